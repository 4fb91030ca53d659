"""A sweep's one confirmatory test: an ordering of technique classes, written in the sweep file.

::

    hypothesis:
      attack: loss                      # whose AUC is compared
      checkpoint: last                  # last | best (each cell's lowest validation NLL)
      classes: {prompt: prompt_based, lora: adapters, full: full, head: head}   # technique -> class
      order: [prompt_based, adapters, full, head]   # classes from the lowest AUC to the highest
      formed_on: {seeds: [0], note: "the default run of commit 905c6f7"}     # what it was read from

``findings.md`` tests it with Page's L over the complete blocks (per block, each class's mean AUC).
It counts as **pre-registered**, and the test as confirmatory, only when both hold:

- *committed before the run*: a commit of this checkout whose copy of the shipped sweep file of the
  same name holds the same block is an ancestor of the revision every cell of the run records;
- *on fresh data*: no seed of the run is among ``formed_on.seeds``, or, where ``formed_on.models`` names the
  bases it was read from, the run trains none of them (the tiny bases' order tested on a real base).

Otherwise the test is exploratory and the page says why. A technique without a class is left out of the
test (it is still ranked).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privauditor.tasks.errors import PrivauditorError, unknown_name_message
from privauditor.tasks.settings import build, load_yaml, read_yaml

CHECKPOINTS = ("last", "best")


@dataclass(frozen=True)
class FormedOn:
    seeds: tuple[int, ...] = ()  # the seeds whose results the order was read from
    models: tuple[str, ...] = ()  # the bases it was read from (empty: any)
    note: str = ""  # where (a run, a commit)


@dataclass(frozen=True)
class Hypothesis:
    classes: dict[str, str]  # technique -> class
    order: tuple[str, ...]  # classes, lowest AUC first
    attack: str = "loss"
    checkpoint: str = "last"  # last | best
    formed_on: FormedOn = field(default_factory=FormedOn)

    def __post_init__(self) -> None:
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
            },  # fmt: skip
        }


@dataclass(frozen=True)
class Registration:
    confirmatory: bool
    commit: str | None  # the commit that holds the hypothesis, where one was found
    reason: str  # one sentence: why it is (not) pre-registered


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
    seeds: set[int],
    root: Path | None = None,
    models: set[str] = frozenset(),
) -> Registration:
    """Whether ``hypothesis`` was pre-registered for a run of the sweep ``sweep`` whose cells record the
    code ``revisions`` (``privauditor_git``) and ran ``seeds`` on ``models`` (see the module docstring)."""
    root = root or Path(__file__).resolve().parents[2]
    formed = hypothesis.formed_on
    other_models = bool(formed.models and models) and not (models & set(formed.models))
    reused = [] if other_models else sorted(seeds & set(formed.seeds))
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
    if reused:
        seeds_text = ", ".join(map(str, reused))
        return Registration(False, commit, f"it was formed on seed(s) {seeds_text}, which this run uses")
    fresh = "bases" if other_models else "seeds"
    return Registration(
        True, commit, f"committed in {commit[:7]} before the run, on {fresh} not used to form it"
    )


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


def of_results(out: Path, rows: list[dict[str, Any]]) -> tuple[Hypothesis | None, Registration | None]:
    """A results folder's sweep hypothesis (its ``sweep.yaml``) and whether it was pre-registered for
    the cells of ``rows`` (None, None without one, or with one that no longer parses)."""
    hypothesis, sweep = of_sweep(out)
    if hypothesis is None:
        return None, None
    revisions = set()
    for cell_id in sorted({r["cell_id"] for r in rows}):
        record = json.loads((out / "cells" / cell_id / "cell.json").read_text())
        revisions.add(record.get("versions", {}).get("privauditor_git"))
    seeds = {r["seed"] for r in rows if r["seed"] is not None}
    models = {r["model"] for r in rows}
    return hypothesis, registration(hypothesis, sweep, revisions, seeds, models=models)
