"""A sweep's one confirmatory test: an ordering of technique classes, written in the sweep file.

::

    hypothesis:
      attack: loss                      # whose AUC is compared
      checkpoint: last                  # last | best (each cell's lowest validation NLL)
      classes: {prompt: prompt_based, lora: adapters, full: full, head: head}   # technique -> class
      order: [prompt_based, adapters, full, head]   # classes from the lowest AUC to the highest
      formed_on:                        # read from the results it was formed on: `privauditor report
        blocks:                         # RESULTS --formed-on` prints this block
          - {model: tiny-llama, base: "sha256:…", dataset: finance}
        seeds: [0]
        commits: [905c6f7…]
        note: "the default run of commit 905c6f7"
      test_blocks:                      # the fresh blocks it will be tested on
        - {model: smollm2-135m, base: "sha256:…", dataset: finance}

A *block* is a (base, dataset) pair: the base's weights identity (``sha256:`` of a checkpoint, so a tiny
base pre-trained from another seed is another base) and the dataset's name; an offline tiny base also
names its recipe (its cache folder: config, corpus and pre-training seed), and a block with the same
recipe is the same block even where a rebuild on another machine changed the weights' last bits. New seeds of the same block
are not fresh data: the test's unit is the block, so they would test reproducibility, not the order.
The one exception is written in the blocks: a block may list its ``seeds`` (the split draws: which records
are members), and a (base, dataset) block on seeds disjoint from a formed one's is a *fresh draw*: new
members and non-members from the same pool, a weaker kind of fresh that a hypothesis names explicitly
(a block without ``seeds`` covers every seed). A hypothesis whose ``test_blocks`` overlap
``formed_on.blocks`` is refused (one line).

A sweep whose hypothesis names ``test_blocks`` runs only on code that descends from a commit holding that
hypothesis (:func:`check_committed`: ``privauditor run`` refuses it otherwise, before anything is
written, unless ``--exploratory``), so that no cell of a confirmatory test runs before its hypothesis is
fixed. ``alpha`` is the test's level (one-sided: Page's L tests the stated order against none).

``findings.md`` tests it with Page's L over the complete blocks (per block, each class's mean AUC).
It counts as **pre-registered**, and the test as confirmatory, only when all hold:

- *committed before the run*: a commit of this checkout whose copy of the shipped sweep file of the
  same name holds the same block is an ancestor of the revision every cell of the run records;
- *formed on named blocks*: ``formed_on.blocks`` is not empty (a hypothesis that names only seeds or
  models was self-declared, not read from records);
- *on fresh blocks*: every block of the run is among ``test_blocks`` and none among ``formed_on.blocks``.

Otherwise the test is exploratory and the page says why. Each confirmatory attempt (a run of the test on
a set of cells not tried before) is appended to ``hypothesis_attempts.jsonl`` in the results folder
(:func:`~.attempts.log_attempt`), and the page says how many attempts that hypothesis has had there. A technique
without a class is left out of the test (it is still ranked).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError, unknown_name_message
from privauditor.tasks.infra.results import Results
from privauditor.tasks.infra.strict import build, load_yaml, read_yaml

CHECKPOINTS = ("last", "best")


@dataclass(frozen=True, order=True)
class Block:
    model: str  # the model's name, for the reader
    base: str  # the base's weights identity (what makes it this base)
    dataset: str
    recipe: str = ""  # an offline tiny base's cache name (its config, corpus and pre-training seed)
    seeds: tuple[int, ...] = ()  # the split draws it covers (none: every seed)

    def same(self, other: Block) -> bool:
        """The same block: the same dataset and the same weights, or the same tiny-base recipe (a base
        rebuilt from one recipe on another machine may differ in its last bits, and is still that base),
        on a shared split seed (a block without seeds shares every seed)."""
        if self.dataset != other.dataset:
            return False
        if self.seeds and other.seeds and not set(self.seeds) & set(other.seeds):
            return False  # a fresh draw of the same (base, dataset)
        return self.base == other.base or bool(self.recipe and self.recipe == other.recipe)

    def among(self, blocks: Iterable[Block]) -> bool:
        return any(self.same(b) for b in blocks)

    def text(self) -> str:
        return f"({self.model}, {self.dataset})"

    def unseeded(self) -> Block:
        """The block over every seed (the test's unit: seeds are averaged within a block)."""
        return Block(self.model, self.base, self.dataset, self.recipe)


@dataclass(frozen=True)
class FormedOn:
    seeds: tuple[int, ...] = ()  # the seeds whose results the order was read from
    models: tuple[str, ...] = ()  # the bases' names (for the reader; blocks decide)
    note: str = ""  # where (a run, a commit)
    blocks: tuple[Block, ...] = ()  # read from the records it was formed on
    commits: tuple[str, ...] = ()  # the code revisions of those records


@dataclass(frozen=True)
class Hypothesis:
    classes: dict[str, str]  # technique -> class
    order: tuple[str, ...]  # classes, lowest AUC first
    attack: str = "loss"
    checkpoint: str = "last"  # last | best
    formed_on: FormedOn = field(default_factory=FormedOn)
    test_blocks: tuple[Block, ...] = ()  # the fresh blocks it will be tested on
    alpha: float = 0.05  # the confirmatory test's level (one-sided)

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise PrivauditorError(f"hypothesis.alpha must be between 0 and 0.5, not {self.alpha}")
        if self.checkpoint not in CHECKPOINTS:
            raise PrivauditorError(f"hypothesis.checkpoint must be last or best, not {self.checkpoint!r}")
        from privauditor.tasks.attacks import ATTACKS

        if self.attack not in ATTACKS:
            raise PrivauditorError(
                "hypothesis.attack: " + unknown_name_message("attack", self.attack, ATTACKS.names())
            )
        if len(self.order) < 2 or len(set(self.order)) != len(self.order):
            raise PrivauditorError(
                f"hypothesis.order must name two or more classes once each, not {list(self.order)}"
            )
        unknown = sorted(set(self.classes.values()) - set(self.order))
        unused = [c for c in self.order if c not in self.classes.values()]
        if unknown or unused:
            what = (
                f"classes {unknown} are not in hypothesis.order" if unknown else f"{unused} have no technique"
            )
            raise PrivauditorError(f"hypothesis: {what}")
        reused = [b.text() for b in self.test_blocks if b.among(self.formed_on.blocks)]
        if reused:
            raise PrivauditorError(
                f"hypothesis.test_blocks: {', '.join(reused)} {'is' if len(reused) == 1 else 'are'} among "
                "formed_on.blocks; a confirmatory test needs blocks the order was not read from"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "checkpoint": self.checkpoint,
            "classes": dict(self.classes),
            "order": list(self.order),
            "formed_on": {
                "seeds": list(self.formed_on.seeds),
                "models": list(self.formed_on.models),
                "note": self.formed_on.note,
                "blocks": [_block_dict(b) for b in self.formed_on.blocks],
                "commits": list(self.formed_on.commits),
            },  # fmt: skip
            "test_blocks": [_block_dict(b) for b in self.test_blocks],
        } | ({"alpha": self.alpha} if self.alpha != 0.05 else {})  # the default leaves digests as they were

    def digest(self) -> str:
        """A short hash of the whole hypothesis: attempts of the same hypothesis share it."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def _block_dict(block: Block) -> dict[str, Any]:
    found: dict[str, Any] = {"model": block.model, "base": block.base, "dataset": block.dataset}
    return (
        found
        | ({"recipe": block.recipe} if block.recipe else {})
        | ({"seeds": list(block.seeds)} if block.seeds else {})
    )


@dataclass(frozen=True)
class Registration:
    confirmatory: bool
    commit: str | None  # the commit that holds the hypothesis, where one was found
    reason: str  # one sentence: why it is (not) pre-registered
    attempts: int = 0  # confirmatory attempts of this hypothesis logged (a results folder's or a board's)


def parse(data: Any) -> Hypothesis | None:
    """The sweep file's ``hypothesis`` block (None without one); a malformed one is a one-line error."""
    return None if data is None else build(Hypothesis, data, "hypothesis")


def _git(root: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None


def first_commit(hypothesis: Hypothesis, sweep: str, root: Path) -> str | None:
    """The oldest commit of the checkout at ``root`` whose ``benchmarks/sweeps/<sweep>.yaml`` holds this
    hypothesis (None: none does, or no git history is at hand)."""
    path = f"benchmarks/sweeps/{sweep}.yaml"
    log = _git(root, "log", "--reverse", "--format=%H", "--", path)
    if log is None or log.returncode != 0:
        return None
    for commit in log.stdout.split():
        shown = _git(root, "show", f"{commit}:{path}")
        if shown is None or shown.returncode != 0:
            continue
        try:
            found = parse((load_yaml(shown.stdout) or {}).get("hypothesis"))
        except (PrivauditorError, AttributeError, ValueError):
            continue
        if found == hypothesis:
            return commit
    return None


def registration(
    hypothesis: Hypothesis,
    sweep: str,
    revisions: set[str | None],
    blocks: set[Block],
    root: Path | None = None,
) -> Registration:
    """Whether ``hypothesis`` was pre-registered for a run of the sweep ``sweep`` whose cells record the
    code ``revisions`` (``privauditor_git``) and form ``blocks`` (see the module docstring)."""
    root = root or Path(__file__).resolve().parents[2]
    commit = first_commit(hypothesis, sweep, root)
    if commit is None:
        return Registration(
            False, None, f"no commit of this checkout holds it in benchmarks/sweeps/{sweep}.yaml"
        )
    if None in revisions:
        return Registration(False, commit, "some cells record no git revision, so the run's code is unknown")
    for revision in revisions:
        done = _git(root, "merge-base", "--is-ancestor", commit, str(revision).removesuffix("+dirty"))
        if done is None or done.returncode != 0:
            return Registration(
                False, commit, f"it was committed ({commit[:7]}) after the run's code {str(revision)[:7]}"
            )
    formed = hypothesis.formed_on.blocks
    if not formed:
        return Registration(
            False,
            commit,
            "formed_on names no blocks read from results (`privauditor report RESULTS --formed-on` prints "
            "them), so nothing shows the run's blocks are fresh",
        )
    ordered = sorted(blocks)
    reused = [b.text() for b in ordered if b.among(formed)]
    if reused:
        return Registration(
            False, commit, f"it was formed on block(s) {', '.join(reused)}, which this run uses"
        )
    undeclared = [b.text() for b in ordered if not b.among(hypothesis.test_blocks)]
    if undeclared:
        return Registration(
            False, commit, f"block(s) {', '.join(undeclared)} of this run are not among its test_blocks"
        )
    units = {b.unseeded() for b in blocks}
    drawn = sorted({b.text() for b in blocks if b.unseeded().among(formed)})
    fresh_draws = (
        f" ({len(drawn)} of them fresh split draws of formed blocks: {', '.join(drawn)})" if drawn else ""
    )
    return Registration(
        True,
        commit,
        f"committed in {commit[:7]} before the run, on {len(units)} declared blocks not used to form "
        f"it{fresh_draws}",
    )


def check_committed(
    hypothesis: Hypothesis, sweep: str, root: Path | None = None, revision: str | None = None
) -> None:
    """Refuse (one line) to run cells of the sweep ``sweep`` whose hypothesis names ``test_blocks`` unless
    a commit holding that hypothesis in ``benchmarks/sweeps/<sweep>.yaml`` is an ancestor of the code
    that would run them (``revision``; default: the checkout's ``HEAD``)."""
    if not hypothesis.test_blocks:
        return
    root = root or Path(__file__).resolve().parents[2]
    path = f"benchmarks/sweeps/{sweep}.yaml"
    commit = first_commit(hypothesis, sweep, root)
    if commit is None:
        raise PrivauditorError(
            f"sweep '{sweep}': its hypothesis names test blocks, and no commit of this checkout holds it in "
            f"{path}: commit the hypothesis before its cells run (or run with --exploratory)"
        )
    head = _git(root, "rev-parse", "HEAD")
    revision = revision or (head.stdout.strip() if head is not None and head.returncode == 0 else None)
    done = revision and _git(root, "merge-base", "--is-ancestor", commit, revision)
    if not done or done.returncode != 0:
        raise PrivauditorError(
            f"sweep '{sweep}': its hypothesis was committed in {commit[:7]}, which the code that would run "
            f"({revision[:7] if revision else 'no git revision'}) does not descend from: check out a descendant (or run with --exploratory)"
        )


def blocks_of(out: Path, cell_ids: set[str]) -> tuple[set[Block], set[str | None], set[int]]:
    """The blocks, code revisions and seeds of a results folder's cells ``cell_ids`` (their ``cell.json``)."""
    blocks, revisions, seeds = set(), set(), set()
    for cell_id in sorted(cell_ids):
        record = Results(out).cell(cell_id).record()
        config = record.get("config", {})
        recipe = (record.get("model") or {}).get("path_name", "") if _tiny(config.get("model")) else ""
        seed = () if config.get("seed") is None else (int(config["seed"]),)
        blocks.add(
            Block(str(config.get("model")), str(config.get("base")), str(config.get("dataset")), recipe, seed)
        )
        revisions.add(record.get("versions", {}).get("privauditor_git"))
        if config.get("seed") is not None:
            seeds.add(int(config["seed"]))
    return blocks, revisions, seeds


def _tiny(model: Any) -> bool:
    """Whether ``model`` names an offline tiny base (its cache folder's name is its recipe)."""
    from privauditor.tasks.models import resolve_model

    try:
        return resolve_model(str(model)).source == "tiny"
    except (PrivauditorError, ValueError):
        return False


def formed_on_of(out: Path, rows: list[dict[str, Any]], note: str = "") -> dict[str, Any]:
    """The ``formed_on`` block of a hypothesis read from the results folder ``out`` (its cells in
    ``rows``): every block with its base's identity, the seeds and the code revisions."""
    blocks, revisions, seeds = blocks_of(out, {r["cell_id"] for r in rows})
    return {
        "blocks": [_block_dict(b) for b in _with_seeds(blocks)],
        "seeds": sorted(seeds),
        "commits": sorted(str(r) for r in revisions if r is not None),
        "models": sorted({b.model for b in blocks}),
        "note": note or f"read from {Path(out).name}",
    }


def _with_seeds(blocks: set[Block]) -> list[Block]:
    """Blocks of one seed each (a cell's) merged into one block per (base, dataset) with all its seeds."""
    seeds: dict[Block, set[int]] = {}
    for block in blocks:
        seeds.setdefault(block.unseeded(), set()).update(block.seeds)
    return [replace(b, seeds=tuple(sorted(found))) for b, found in sorted(seeds.items())]


def of_sweep(out: Path) -> tuple[Hypothesis | None, str]:
    """A results folder's sweep hypothesis (its ``sweep.yaml``; None without one, or with one that no
    longer parses) and the sweep's name."""
    sweep = Path(out) / "sweep.yaml"
    data = read_yaml(sweep) if sweep.exists() else None
    if not isinstance(data, dict) or not data.get("hypothesis"):
        return None, ""
    try:
        return parse(data["hypothesis"]), str(data.get("name", ""))
    except PrivauditorError:
        return None, ""


def of_results(out: Path, rows: Sequence[Mapping[str, Any]]) -> tuple[Hypothesis | None, Registration | None]:
    """A results folder's sweep hypothesis (its ``sweep.yaml``) and whether it was pre-registered for
    the cells of ``rows`` (None, None without one, or with one that no longer parses)."""
    hypothesis, sweep = of_sweep(out)
    if hypothesis is None:
        return None, None
    blocks, revisions, _ = blocks_of(out, {r["cell_id"] for r in rows})
    return hypothesis, registration(hypothesis, sweep, revisions, blocks)
