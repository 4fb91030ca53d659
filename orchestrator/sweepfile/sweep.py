"""Sweep files: strict YAML into frozen dataclasses, expanded into cells.

A sweep names a matrix (``model`` × ``adaptation`` × ``dataset``, optionally × ``defence``) and ``seeds``,
the cell settings every cell shares (``attacks``, ``split``, ``train``, ``score``, ``attack_params``,
``adaptation_params``, ``reference``, ``defence_params``), ``exclude`` (partial cells to drop) and ``overrides`` (partial cells → settings merged
on top; later overrides win), plus ``run`` and ``tracking`` blocks. Precedence: a technique's defaults <
the sweep's blocks < ``overrides`` < ``--set``. An unknown key or name is a one-line error with "did you
mean"; a (family, technique) pair the family cannot run is dropped from the matrix and listed.

A ``defence`` entry is a name (``none``, ``dp``) or a one-key mapping of a name to its settings, merged
over the sweep's ``defence_params`` (``defence: [none, {dp: {epsilon: 1}}, {dp: {epsilon: 8}}]``: the
same cells without a defence and at two privacy budgets). Without the key every cell is undefended.

``attacks: all`` (the sweep's or an override's) is every registered attack, plugins from other installed
packages included, sorted by name: expanded here, when the file is parsed, so a sweep that runs every
attack takes a new one without an edit. ``all`` stands alone: beside attack names it is an error.

Example::

    sweep = load_sweep("benchmarks/sweeps/smoke.yaml")
    for cell in sweep.cells: print(cell.cell_id())
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import privauditor.sweeps as sweeps_package
from privauditor.tasks.infra.cache import stable_hash
from privauditor.tasks.infra.errors import PrivauditorError, closest, unknown_name_message
from privauditor.tasks.infra.strict import build, read_yaml, yaml_hint
from privauditor.tasks.spec.config import CellConfig, cell_config

from .hypothesis import Hypothesis, parse
from .matrix import Dropped, defence_reason, expand

MATRIX_KEYS = ("model", "adaptation", "dataset")
#: sweep keys that do not shape a cell's results: which cells there are, how they run, the hypothesis
NOT_SHAPING = ("name", "matrix", "seeds", "exclude", "run", "tracking", "hypothesis")
#: keys exclude / overrides entries may match on
MATCH_KEYS = (*MATRIX_KEYS, "defence", "seed")
CELL_KEYS = ("attacks", "split", "train", "score", "attack_params", "adaptation_params", "reference",
             "defence_params")  # fmt: skip
TOP_KEYS = ("name", "seeds", "matrix", "exclude", "overrides", "run", "tracking", "hypothesis", *CELL_KEYS)
#: ``attacks: all``: every registered attack
ALL_ATTACKS = "all"
SWEEPS_DIR = Path(sweeps_package.__file__).resolve().parent  # benchmarks/sweeps, shipped as package data
#: a sweep's name: the default results folder's (results/<name>), so one safe path segment
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class RunSettings:
    max_concurrent_trials: int | None = None  # None: as many as the CPUs / GPUs allow
    max_failures: int = 2  # retries per cell (Ray Tune FailureConfig)
    cpus_per_trial: float | None = None  # None: the model spec's (1 for the tiny bases)
    # auto: the model spec's (at least 1) if the cluster has GPUs
    gpus_per_trial: float | Literal["auto"] | None = "auto"
    storage_path: str | None = None  # shared storage for Ray's trial state (default: OUT/ray)
    cell_timeout_s: float | None = None  # a cell past this stops (no DONE) and counts as a failure
    # custom resources every trial asks for besides its CPUs and GPUs, which an autoscaling cluster's node
    # types advertise (``{gpu_1x: 1}``: the cell runs only on a node of a type that has one free)
    resources: dict[str, float] = field(default_factory=dict)
    # a model or adaptation name -> the custom resources its cells ask for instead of ``resources`` (where
    # both a cell's model and its adaptation are named, the adaptation's): ``{full: {gpu_8x: 1}}``
    resources_for: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for where, asked in [("run.resources", self.resources)] + [
            (f"run.resources_for.{name}", value) for name, value in self.resources_for.items()
        ]:
            check_resources(where, asked)
        if self.cell_timeout_s is not None and self.cell_timeout_s <= 0:
            raise PrivauditorError(
                f"run.cell_timeout_s must be a number of seconds > 0 or null, not {self.cell_timeout_s!r}"
            )
        gpus = self.gpus_per_trial
        if not (gpus in (None, "auto") or (isinstance(gpus, float) and gpus >= 0)):
            raise PrivauditorError(f"run.gpus_per_trial must be a number >= 0 or auto or null, not {gpus!r}")
        if self.cpus_per_trial is not None and self.cpus_per_trial <= 0:
            raise PrivauditorError(
                f"run.cpus_per_trial must be a number > 0 or null, not {self.cpus_per_trial!r}"
            )
        if self.max_concurrent_trials is not None and self.max_concurrent_trials < 1:
            raise PrivauditorError(
                f"run.max_concurrent_trials must be at least 1 or null, not {self.max_concurrent_trials!r}"
            )


def check_resources(where: str, asked: dict[str, float]) -> None:
    """A one-line error unless ``asked`` names custom resources (not CPU or GPU: ``cpus_per_trial`` and
    ``gpus_per_trial`` set those) in amounts > 0."""
    for name, amount in asked.items():
        if name in ("CPU", "GPU"):
            raise PrivauditorError(
                f"{where}.{name}: set CPUs and GPUs with run.cpus_per_trial / gpus_per_trial"
            )
        if amount <= 0:
            raise PrivauditorError(f"{where}.{name} must be a number > 0, not {amount!r}")


@dataclass(frozen=True)
class WandbSettings:
    mode: str = "offline"  # offline | online | disabled
    project: str = "privauditor"
    entity: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("offline", "online", "disabled"):
            raise PrivauditorError(
                f"tracking.wandb.mode must be offline, online or disabled, not {self.mode!r}"
            )
        check_project(self.project, "tracking.wandb.project")


def check_project(project: str, where: str) -> None:
    """A one-line error unless ``project`` is a name W&B takes (W&B refuses others only once it starts)."""
    bad = sorted(set(project) & set("/\\#?%:"))
    if not project.strip() or len(project) > 128 or bad:
        why = f"it holds {', '.join(map(repr, bad))}" if bad else "1 to 128 characters"
        raise PrivauditorError(f"{where} {project!r} is not a W&B project name ({why})")


@dataclass(frozen=True)
class Sweep:
    name: str
    seeds: tuple[int, ...]
    cells: tuple[CellConfig, ...]
    dropped: tuple[Dropped, ...]
    run: RunSettings
    wandb: WandbSettings
    source: dict[str, Any] = field(repr=False)
    hypothesis: Hypothesis | None = None  # the one confirmatory test (orchestrator/sweepfile/hypothesis.py)
    assignments: tuple[str, ...] = ()  # the ``--set`` overrides applied to every cell

    def writer(self) -> dict[str, str]:
        """What this sweep records as the writer of its results folder: its name and a hash of the settings
        that shape its cells (``--set`` included; not the matrix, seeds or exclusions, so adding cells to a
        sweep is the same sweep, nor how it runs or is tracked). Another hash into the same folder is refused
        (``tasks/infra/results.py``'s ``claim``)."""
        shaping = {k: v for k, v in self.source.items() if k not in NOT_SHAPING}
        return {
            "kind": "sweep",
            "sweep": self.name,
            "spec": stable_hash([shaping, list(self.assignments)], 8),
        }

    def resolved(self, cell_ids: list[str]) -> dict[str, Any]:
        """The sweep with every default filled in and its cells' ids (written to ``OUT/sweep.yaml``)."""
        data = copy.deepcopy(self.source)
        data["run"] = {  # no custom resources: the block as before they could be set
            k: v
            for k, v in dataclasses.asdict(self.run).items()
            if v or k not in ("resources", "resources_for")
        }
        data["tracking"] = {"wandb": dataclasses.asdict(self.wandb)}
        data["cells"] = list(cell_ids)
        return data


def _names(where: str, value: Any) -> list[Any]:
    if isinstance(value, str | int):
        return [value]
    if not isinstance(value, list) or not value:
        raise PrivauditorError(f"{where} must be a non-empty list, not {value!r}")
    return value


def _matches(partial: dict[str, Any], cell: dict[str, Any], where: str) -> bool:
    for key, value in partial.items():
        if key not in MATCH_KEYS:
            raise PrivauditorError(unknown_name_message(f"key in {where}", str(key), list(MATCH_KEYS)))
        if cell[key] not in (value if isinstance(value, list) else [value]):
            return False
    return True


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _defences(name: str, entries: Any) -> list[tuple[str, dict[str, Any] | None]]:
    """The ``matrix.defence`` entries as (defence, its settings or None)."""
    from privauditor.tasks.defences import check_defence

    found = []
    for entry in _names("matrix.defence", entries):
        if isinstance(entry, dict) and len(entry) == 1:
            ((defence, params),) = entry.items()
            if params is not None and not isinstance(params, dict):
                raise PrivauditorError(f"{name}: matrix.defence {defence}: settings must be a mapping")
        elif isinstance(entry, str):
            defence, params = entry, None
        else:
            raise PrivauditorError(
                f"{name}: a matrix.defence entry is a name or {{name: {{settings}}}}, not {entry!r}"
            )
        check_defence(str(defence))
        found.append((str(defence), params))
    return found


def parse_sweep(data: Any, name: str = "sweep", assignments: list[str] = ()) -> Sweep:
    """A validated :class:`Sweep` from the parsed YAML ``data``; ``assignments`` are ``--set`` overrides
    applied to every cell."""
    matrix = _checked_keys(data, name)
    data = _expand_attacks(name, data)
    axes = {key: _names(f"matrix.{key}", matrix.get(key)) for key in MATRIX_KEYS}
    for key, names in axes.items():
        _once(name, f"matrix.{key}", names, "a name")
    seeds = _names("seeds", data.get("seeds", [0]))
    if not all(type(s) is int and s >= 0 for s in seeds):
        raise PrivauditorError(f"{name}: seeds must be integers >= 0, not {seeds!r}")
    _once(name, "seeds", seeds, "an integer")
    cells, dropped = expand(axes["model"], axes["adaptation"], axes["dataset"], seeds)
    defences = _defences(name, matrix.get("defence", ["none"]))
    axes |= {"defence": [d for d, _ in defences], "seed": seeds}
    rules = {"shared": {k: data[k] for k in CELL_KEYS if k in data}}
    for where in ("exclude", "overrides"):
        rules[where] = items = data.get(where) or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise PrivauditorError(f"{name}: {where} must be a list of mappings")
        for index, partial in enumerate(items):
            _matchable(name, f"{where}[{index}]", partial, axes)
    configs = []
    for cell, (defence, params) in itertools.product(cells, defences):
        reason = defence_reason(cell.model, cell.adaptation, defence)
        if reason:
            if not any(d.model == cell.model and d.adaptation == cell.adaptation and d.reason == reason
                       for d in dropped):  # fmt: skip
                dropped.append(Dropped(cell.model, cell.adaptation, reason))
            continue
        settings = _cell_settings(cell, defence, params, rules, name)
        if settings is not None:
            configs.append(cell_config(settings, list(assignments)))
    run = build(RunSettings, data.get("run"), "run")
    _named(name, "run.resources_for", list(run.resources_for), axes["model"] + axes["adaptation"])
    tracking = {} if data.get("tracking") is None else data["tracking"]
    if not isinstance(tracking, dict) or set(tracking) - {"wandb"}:
        raise PrivauditorError(f"{name}: tracking has one key, wandb")
    wandb = build(WandbSettings, tracking.get("wandb"), "tracking.wandb")
    hypothesis = _hypothesis(name, data.get("hypothesis"), configs)
    sweep_name = data.get("name", name)  # without one, the file's name
    if "name" in data and not (isinstance(sweep_name, str) and NAME.match(sweep_name)):
        raise PrivauditorError(
            f"{name}: name must be letters, digits, '.', '_' and '-' (at most 64, the results folder's name), "
            f"not {sweep_name!r}{yaml_hint(sweep_name)}"
        )
    return Sweep(
        sweep_name,
        tuple(seeds),
        tuple(configs),
        tuple(dropped),
        run,
        wandb,
        data,
        hypothesis,
        tuple(assignments),
    )


def _expand_attacks(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each ``attacks: all`` (the sweep's and its overrides') replaced by the attacks it
    means, so the cells and the resolved sweep (``OUT/sweep.yaml``) name them; ``data`` is not changed."""
    out = dict(data)
    if "attacks" in out:
        out["attacks"] = _attack_names(name, "attacks", out["attacks"])
    overrides = out.get("overrides")
    if isinstance(overrides, list):
        out["overrides"] = [
            entry | {"attacks": _attack_names(name, f"overrides[{index}].attacks", entry["attacks"])}
            if isinstance(entry, dict) and "attacks" in entry
            else entry
            for index, entry in enumerate(overrides)
        ]
    return out


def _attack_names(name: str, where: str, value: Any) -> Any:
    """``value``, the ``attacks`` of ``where``: ``all`` (alone or a list of one) as every registered attack
    sorted by name (``ATTACKS.names()``), anything else as written (the cell's checks judge it); ``all``
    beside other names is a one-line error."""
    names = value if isinstance(value, list) else [value]
    if ALL_ATTACKS not in names:
        return value
    if len(names) > 1:
        raise PrivauditorError(
            f"{name}: {where} is either {ALL_ATTACKS} (every registered attack) or a list of attack names, "
            f"not both: {value!r}"
        )
    from privauditor.tasks.attacks import ATTACKS

    return ATTACKS.names()


def _hypothesis(name: str, block: Any, configs: list[CellConfig]) -> Hypothesis | None:
    """The sweep's ``hypothesis`` block, its classes' techniques in the matrix and its attack among the
    attacks the cells run."""
    hypothesis = parse(block)
    if hypothesis is None:
        return None
    unknown = sorted(set(hypothesis.classes) - {c.adaptation for c in configs})
    if unknown:
        raise PrivauditorError(f"{name}: hypothesis.classes names techniques the matrix lacks: {unknown}")
    ran = sorted({a for c in configs for a in c.attacks})
    if configs and hypothesis.attack not in ran:
        hint = closest(hypothesis.attack, ran)
        raise PrivauditorError(
            f"{name}: hypothesis.attack '{hypothesis.attack}' is not an attack the sweep runs "
            f"({', '.join(ran)}){f'; did you mean {hint!r}?' if hint else ''}"
        )
    return hypothesis


def _once(name: str, where: str, values: list[Any], kind: str) -> None:
    """A one-line error unless every entry of the list ``where`` is ``kind`` (a name: a string; an integer)
    and given once."""
    for index, value in enumerate(values):
        if not (isinstance(value, str) if kind == "a name" else type(value) is int):
            raise PrivauditorError(
                f"{name}: {where}[{index}] must be {kind}, not {value!r}{yaml_hint(value)}"
            )
        if value in values[:index]:
            raise PrivauditorError(f"{name}: {where} gives {value!r} twice")


def _named(name: str, where: str, keys: list[str], names: list[str]) -> None:
    """A one-line error for the first of ``keys`` that is none of the matrix's ``names`` (a typo would
    leave its cells without the resources they need)."""
    for key in keys:
        if key not in names:
            raise PrivauditorError(
                f"{name}: " + unknown_name_message(f"model or adaptation in {where}", key, names)
            )


def _matchable(name: str, where: str, partial: dict[str, Any], axes: dict[str, list[Any]]) -> None:
    """A one-line error unless every value an ``exclude`` / ``overrides`` entry matches on is one the
    matrix has (a value it lacks matches nothing: a typo, or a rule left over)."""
    for key, value in partial.items():
        if key not in axes:
            continue
        for entry in value if isinstance(value, list) else [value]:
            if not (type(entry) is int if key == "seed" else isinstance(entry, str)):  # True is not seed 1
                kind = "a seed (an integer)" if key == "seed" else "a name"
                raise PrivauditorError(
                    f"{name}: {where}.{key} must be {kind}, not {entry!r}{yaml_hint(entry)}"
                )
            if entry not in axes[key]:
                lacks = "seeds lack" if key == "seed" else f"matrix.{key} lacks"
                hint = closest(str(entry), [str(a) for a in axes[key]]) if isinstance(entry, str) else None
                raise PrivauditorError(
                    f"{name}: {where}.{key} names {entry!r}, which {lacks}"
                    + (f"; did you mean {hint!r}?" if hint else f" ({', '.join(map(str, axes[key]))})")
                )


def _checked_keys(data: Any, name: str) -> dict[str, Any]:
    """The sweep's ``matrix``, once the file's keys and the matrix's are known ones."""
    if not isinstance(data, dict):
        raise PrivauditorError(f"{name}: a sweep file is a mapping of keys, not {type(data).__name__}")
    for key in data:
        if key not in TOP_KEYS:
            raise PrivauditorError(f"{name}: " + unknown_name_message("sweep key", str(key), list(TOP_KEYS)))
    matrix = data.get("matrix")
    if not isinstance(matrix, dict):
        raise PrivauditorError(f"{name}: matrix must map model, adaptation and dataset to lists")
    for key in matrix:
        if key not in (*MATRIX_KEYS, "defence"):
            raise PrivauditorError(
                f"{name}: " + unknown_name_message("matrix key", str(key), [*MATRIX_KEYS, "defence"])
            )
    return matrix


def _cell_settings(
    cell: Any, defence: str, params: dict[str, Any] | None, rules: dict[str, Any], name: str
) -> dict[str, Any] | None:
    """One cell's settings: the sweep's ``shared`` ones, its matrix keys, its defence's settings and the
    ``overrides`` that match it; None when an ``exclude`` entry matches it."""
    keys = {"model": cell.model, "adaptation": cell.adaptation, "dataset": cell.dataset, "seed": cell.seed,
            "defence": defence}  # fmt: skip
    if any(_matches(partial, keys, "exclude") for partial in rules["exclude"]):
        return None
    settings = _merge(rules["shared"], keys)
    if params:
        settings = _merge(settings, {"defence_params": {defence: params}})
    for override in rules["overrides"]:
        match = {k: v for k, v in override.items() if k in MATCH_KEYS}
        if _matches(match, keys, "overrides"):
            extra = {k: v for k, v in override.items() if k not in match}
            settings = _merge(settings, extra)
            if any(k in (*MATRIX_KEYS, "defence") for k in extra):
                raise PrivauditorError(f"{name}: an override cannot change {sorted(extra)}")
    return settings


def find_sweep(path_or_name: str) -> Path:
    """A sweep file by path, or by the name of a shipped sweep (``smoke`` → benchmarks/sweeps/smoke.yaml)."""
    path = Path(path_or_name)
    if path.is_file():
        return path
    shipped = SWEEPS_DIR / f"{path_or_name.removesuffix('.yaml')}.yaml"
    if shipped.is_file():
        return shipped
    known = sorted(p.stem for p in SWEEPS_DIR.glob("*.yaml"))
    raise PrivauditorError(
        f"no sweep file {path_or_name!r} ({unknown_name_message('sweep', path.stem, known)})"
    )


def load_sweep(path_or_name: str, assignments: list[str] = ()) -> Sweep:
    """Read, validate and expand a sweep file."""
    path = find_sweep(path_or_name)
    return parse_sweep(read_yaml(path), path.stem, assignments)
