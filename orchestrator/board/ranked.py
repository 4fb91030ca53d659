"""The board's ranking of techniques: the battery (:mod:`privauditor.orchestrator.report.battery`) over blocks.

The headline (:mod:`privauditor.orchestrator.report.headline`), as ``findings.md``'s Answer gives it for
one results folder. Like with like: a block is one (model, dataset) pair, and a technique's value in a block
is the mean over its seeds of the :data:`RANKING_ATTACK` AUC at each cell's last checkpoint (by step), undefended
settings only (a defended technique such as ``lora+dp-e8`` is a different question, on its own pages);
where a technique has several settings in one block (two sweeps with different splits or learning
rates), the mean of their seed means. ``none``, the un-adapted base, is the control and is never
ranked. :func:`privauditor.orchestrator.report.battery.run` ranks only the techniques present in every block
(the others are *partial*, each compared within the blocks it shares) and runs Friedman's test, the
Wilcoxon–Holm pairs, Nemenyi's CD and, with a sweep's hypothesis, Page's L.

Between two releases a technique's change of place is news only where the newer battery separates it
from a technique it swapped places with (a significant Wilcoxon–Holm pair); any other change of order
is within the noise (:func:`moves`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from privauditor.orchestrator.report import battery
from privauditor.orchestrator.report import blocks as blk
from privauditor.orchestrator.report.headline import ATTACK, view_of
from privauditor.orchestrator.report.summary import technique

from .check import stored_attempts
from .merge import live

#: the attack the board ranks by: the headline's (:mod:`privauditor.orchestrator.report.headline`)
RANKING_ATTACK = ATTACK
#: the checkpoint it reads, unless a build's hypothesis names the ranking attack at another (``view_of``)
VIEW = "last"


def block_values(
    cells: list[dict[str, Any]], attack: str = RANKING_ATTACK, view: str = VIEW
) -> dict[blk.Block, dict[str, float]]:
    """block → technique → the headline's value (:func:`privauditor.orchestrator.report.blocks.block_values`:
    the mean over its settings of the mean over seeds of ``attack``'s AUC at the checkpoint ``view`` picks)."""
    return blk.block_values(cells, attack, view)


def rank(
    cells: list[dict[str, Any]], hypothesis: Any = None
) -> tuple[battery.Battery | None, battery.Battery | None]:
    """The board's battery (the headline's, at the checkpoint the hypothesis names where it names the
    ranking attack), and the one Page's test of ``hypothesis`` runs on (None without a hypothesis)."""
    own = hypothesis is not None and hypothesis.attack == RANKING_ATTACK
    main = battery.run(block_values(cells, RANKING_ATTACK, view_of(hypothesis)), hypothesis if own else None)
    if hypothesis is None or own:
        return main, main if own else None
    return main, battery.run(block_values(cells, hypothesis.attack, hypothesis.checkpoint), hypothesis)


def fractions(records: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Technique (``lora``, ``lora+dp-e8``) → (lowest, highest) trainable fraction over its live records."""
    found: dict[str, list[float]] = defaultdict(list)
    for record in live(records):
        if record.get("trainable_fraction") is not None:
            found[technique(record)].append(record["trainable_fraction"])
    return {name: (min(v), max(v)) for name, v in sorted(found.items())}


def fraction_of(spans: dict[str, tuple[float, float]], name: str) -> str:
    return blk.fraction_text(spans.get(name))


def summary_of(found: battery.Battery | None) -> dict[str, Any] | None:
    """What a release manifest keeps of the battery: enough to tell a significant move from noise."""
    if found is None:
        return None
    return {"attack": RANKING_ATTACK, "view": VIEW, "blocks": [list(b) for b in found.blocks],
            "names": list(found.names), "mean_rank": dict(found.mean_rank), "mean_auc": dict(found.mean_auc),
            "significant": sorted(sorted((p["a"], p["b"])) for p in found.significant),
            "partial": sorted(found.partial)}  # fmt: skip


def _order(ranking: Any) -> list[str]:
    """The ranked names of a summary's ``ranking``: the battery's, or a pre-battery release's list of
    ``[technique, mean AUC]`` pairs."""
    if not ranking:
        return []
    if isinstance(ranking, list):
        return [name for name, _ in ranking]
    return list(ranking["names"])


def moves(before: Any, after: Any) -> dict[str, list]:
    """How the ranking changed from ``before`` to ``after`` (summaries' ``ranking`` entries).

    Returns:
        ``moved``: per technique that swapped places with one the newer battery separates it from (a
        significant Wilcoxon–Holm pair of ``after``), its places before and now, its mean rank and AUC
        now and those techniques; ``noise``: techniques that swapped places only with techniques no
        test separates them from (the order within the noise); ``entered`` and ``left``: techniques
        ranked in only one of the two.
    """
    old, new = _order(before), _order(after)
    separated = {frozenset(p) for p in after.get("significant", [])} if isinstance(after, dict) else set()
    moved, noise = [], []
    for name in new:
        if name not in old:
            continue
        swapped = [
            other
            for other in new
            if other != name
            and other in old
            and (old.index(name) < old.index(other)) != (new.index(name) < new.index(other))
        ]
        firm = [other for other in swapped if frozenset((name, other)) in separated]
        if firm:
            moved.append({"technique": name, "before": old.index(name) + 1, "now": new.index(name) + 1,
                          "mean_rank": after["mean_rank"][name], "mean_auc": after["mean_auc"][name],
                          "separated_from": firm})  # fmt: skip
        elif swapped:
            noise.append(name)
    return {"moved": moved, "noise": noise, "entered": [n for n in new if n not in old],
            "left": [n for n in old if n not in new]}  # fmt: skip


def load_hypothesis(sweep: str) -> tuple[Any, str]:
    """The ``hypothesis`` block of a sweep file (a path, or a shipped sweep's name) and the sweep's name."""
    from privauditor.orchestrator.sweepfile.hypothesis import parse
    from privauditor.orchestrator.sweepfile.sweep import find_sweep
    from privauditor.tasks.infra.errors import PrivauditorError
    from privauditor.tasks.infra.strict import read_yaml

    path = find_sweep(sweep)
    data = read_yaml(path)  # malformed YAML: a one-line error naming the file and line
    if not isinstance(data, dict) or not data.get("hypothesis"):
        raise PrivauditorError(f"--hypothesis {sweep}: {path} has no hypothesis block")
    return parse(data["hypothesis"]), str(data.get("name") or path.stem)


def registration_of(hypothesis: Any, sweep: str, records: list[dict[str, Any]], store: Any = None) -> Any:
    """Whether ``hypothesis`` was pre-registered for the runs the live records came from: their code
    revisions (``provenance.versions.privauditor_git``) and blocks (base identity, dataset); with the
    ``store``, how many confirmatory attempts of it the runs added there logged (``attempts/``)."""
    from dataclasses import replace

    from privauditor.orchestrator.sweepfile.hypothesis import Block, registration

    kept = live(records)
    revisions = {(r["provenance"]["versions"] or {}).get("privauditor_git") for r in kept}
    blocks = {
        Block(
            str(r["model"]),
            str((r["provenance"]["spec"] or {}).get("base")),
            str(r["dataset"]),
            seeds=() if r.get("seed") is None else (int(r["seed"]),),
        )
        for r in kept
    }
    found = registration(hypothesis, sweep, revisions, blocks)
    return found if store is None else replace(found, attempts=stored_attempts(store, hypothesis))
