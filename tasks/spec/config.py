"""The settings of one cell as a user writes them, strict: every key known, every value the right type.

A cell's settings are the sweep-file blocks that shape one cell (``split``, ``train``, ``attacks``, ...)
plus its (model, adaptation, dataset, seed). :func:`cell_config` builds a frozen :class:`CellConfig`
from nested mappings, applying ``key.path=value`` overrides (``--set``) last; an unknown key or a value
of the wrong type is a one-line error (:mod:`privauditor.tasks.infra.strict` checks every block).
:meth:`CellConfig.resolve` turns the settings into the typed :class:`~privauditor.tasks.spec.resolved.CellSpec`
the cell id hashes and ``cell.json`` records.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..infra.errors import PrivauditorError, unknown_name_message
from ..infra.strict import build, load_yaml
from .sections import ScoreSettings, SplitConfig, TrainSettings

if TYPE_CHECKING:
    from ..attacks import Attack
    from .resolved import CellSpec

DEFAULT_ATTACKS = ("loss", "reference", "zlib", "neighbourhood", "min_k", "min_k_pp", "gradnorm")


@dataclass(frozen=True)
class CellConfig:
    """One cell's settings as written (defaults not yet filled in)."""

    model: str
    adaptation: str
    dataset: str
    seed: int = 0
    attacks: tuple[str, ...] = DEFAULT_ATTACKS
    split: SplitConfig = field(default_factory=SplitConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    score: ScoreSettings = field(default_factory=ScoreSettings)
    #: hyper-parameters by technique name, e.g. {lora: {r: 16}}; only the cell's own technique's apply
    adaptation_params: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    #: hyper-parameters by attack name, e.g. {neighbourhood: {k: 10}}
    attack_params: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    #: the reference model (None: the un-adapted base)
    reference: str | None = None
    #: ``none`` or a defence's name (``dp``: DP-SGD, :mod:`privauditor.tasks.defences.dp`)
    defence: str = "none"
    #: settings by defence name, e.g. {dp: {epsilon: 1}}; only the cell's own defence's apply
    defence_params: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def built_attacks(self) -> dict[str, Attack]:
        """Every chosen attack, built with its hyper-parameters (unknown names and fields fail here)."""
        from ..attacks import build_attack

        return {name: build_attack(name, self.attack_params.get(name)) for name in self.attacks}

    def check(self) -> None:
        """Every name and hyper-parameter resolves, and every split part an attack reads is not empty;
        no dataset, weights or Ray are touched."""
        from ..adaptations import build_adaptation
        from ..defences import get_defence

        self._check_lists()
        technique = build_adaptation(self.adaptation, self.adaptation_params.get(self.adaptation))
        defence = get_defence(self.defence)
        if defence is not None:
            defence.resolve(
                self.defence_params.get(self.defence), self.split.members + self.split.known_members
            )
            reason = defence.unsupported_reason(technique, self.train.workers, self.train.deepspeed)
            if reason:
                raise PrivauditorError(f"cannot run {self.model} × {self.adaptation}: {reason}")
        for name, attack in self.built_attacks().items():
            for role, view in attack.views().items():
                for part, least in view.needs().items():
                    if getattr(self.split, part) < least:
                        raise PrivauditorError(
                            f"attack '{name}' needs split.{part} > {least - 1} (its {role} view '{view.name}' "
                            f"reads that part): set split.{part}"
                        )

    def _check_lists(self) -> None:
        """The seed is >= 0, ``attacks`` names each attack once, and the ``*_params`` blocks name only
        registered plugins (another cell's technique is fine; a name nothing has is a typo)."""
        from ..adaptations import ADAPTATIONS
        from ..attacks import ATTACKS
        from ..defences import DEFENCES

        if self.seed < 0:
            raise PrivauditorError(f"seed must be an integer >= 0, not {self.seed}")
        if not self.attacks:
            raise PrivauditorError("attacks must name at least one attack (privauditor ls attacks)")
        if any("," in name for name in self.attacks):  # ``--set attacks=loss,zlib``: one name to YAML
            names = ",".join(self.attacks)
            raise PrivauditorError(f"attacks is a list: write attacks=[{names}], not attacks={names}")
        twice = sorted({a for i, a in enumerate(self.attacks) if a in self.attacks[:i]})
        if twice:
            raise PrivauditorError(f"attacks names {', '.join(map(repr, twice))} twice")
        for block, registry in (("attack_params", ATTACKS), ("adaptation_params", ADAPTATIONS),
                                ("defence_params", DEFENCES)):  # fmt: skip
            for name in getattr(self, block):
                if name not in registry:
                    raise PrivauditorError(
                        f"{block}: " + unknown_name_message(registry.kind, name, registry.names())
                    )

    def resolve(self, build: bool = True) -> CellSpec:
        """The typed, resolved spec (every default filled in, data and weights identified). With
        ``build=False`` an offline base that is not built yet is left unidentified, not pre-trained."""
        from .resolved import resolve

        return resolve(self, build)

    def cell_id(self) -> str:
        return self.resolve().cell_id()


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """``a.b=value`` → (["a", "b"], value parsed as YAML), e.g. ``attacks=[loss,zlib]``, ``train.lr=3e-4``."""
    import yaml

    if "=" not in text:
        raise PrivauditorError(f"--set expects key=value, not {text!r}")
    key, raw = text.split("=", 1)
    path = key.strip().split(".")
    if not all(path):
        raise PrivauditorError(
            f"--set expects key=value with a dotted key such as train.epochs, not {text!r}"
        )
    try:
        value = load_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as error:
        raise PrivauditorError(f"--set {key}: cannot parse {raw!r} ({error.problem})") from None
    return path, value


def assign(data: dict[str, Any], path: list[str], value: Any) -> None:
    """Set ``data[path[0]][path[1]]... = value``, creating mappings on the way."""
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise PrivauditorError(f"cannot set {'.'.join(path)}: {part} is not a mapping")
        node = child
    node[path[-1]] = value


def cell_config(settings: dict[str, Any], assignments: list[str] = ()) -> CellConfig:
    """A validated :class:`CellConfig` from nested settings plus ``key=value`` overrides (last wins)."""
    data = copy.deepcopy(settings)
    for text in assignments:
        assign(data, *parse_assignment(text))
    config = build(CellConfig, data, "cell")
    config.check()
    return config
