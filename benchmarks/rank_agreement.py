"""Kendall's τ-b between two rankings of techniques, read from the Answer tables of two findings pages.

Each page's table is the headline a run's ``findings.md`` printed (``| rank | technique | ... | mean AUC |
mean rank ... |``), copied into the docs: by default the tiny bases' default run (``docs/findings.md``,
"The default run's Answer") against the real base's ``real`` sweep (``docs/real-base.md``). Over the
techniques both rank, τ-b between the two orders by mean rank and by mean AUC (``scipy.stats.kendalltau``,
two-sided p), once over all shared techniques and once without those **at chance on both bases**: a rule
fixed before reading the result, mean AUC below ``--chance`` (0.55) on both pages. Techniques at chance
agree trivially at the bottom of both orders and so inflate τ.

Run::

    python benchmarks/rank_agreement.py
    python benchmarks/rank_agreement.py results/default/findings.md results/real/findings.md
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from scipy.stats import kendalltau

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = ((ROOT / "docs" / "findings.md", "## The default run's Answer"),
            (ROOT / "docs" / "real-base.md", "## Results: the `real` sweep"))  # fmt: skip


def answer_table(path: Path, heading: str | None) -> dict[str, tuple[float, float]]:
    """technique -> (mean AUC, mean rank) from the first headline table after ``heading`` (or in the file)."""
    text = path.read_text()
    if heading:
        if heading not in text:
            raise SystemExit(f"{path}: no heading {heading!r}")
        text = text.split(heading, 1)[1]
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| rank | technique |")), None)
    if start is None:
        raise SystemExit(f"{path}: no headline table (| rank | technique | ...)")
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    auc, rank = header.index("mean AUC"), next(i for i, c in enumerate(header) if c.startswith("mean rank"))
    found = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        found[cells[1]] = (float(cells[auc]), float(re.match(r"[0-9.]+", cells[rank]).group()))
    return found


def agreement(first: dict, second: dict, chance: float) -> list[tuple[str, int, float, float, float, float]]:
    """(which techniques, how many, τ-b by rank, its p, τ-b by AUC, its p) over all shared, then without
    the techniques at chance on both."""
    shared = sorted(set(first) & set(second))
    at_chance = [t for t in shared if first[t][0] < chance and second[t][0] < chance]
    found = []
    for label, names in (("all shared", shared), (f"without {', '.join(at_chance) or '-'}", [
        t for t in shared if t not in at_chance])):  # fmt: skip
        by_rank = kendalltau([first[t][1] for t in names], [second[t][1] for t in names])
        by_auc = kendalltau([first[t][0] for t in names], [second[t][0] for t in names])
        found.append((label, len(names), by_rank.statistic, by_rank.pvalue, by_auc.statistic, by_auc.pvalue))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", type=Path, help="two findings pages (default: the docs' two)")
    parser.add_argument("--chance", type=float, default=0.55, help="'at chance': mean AUC below this on both")
    args = parser.parse_args()
    if args.pages and len(args.pages) != 2:
        parser.error("give two findings pages, or none for the docs' two")
    pages = [(p, None) for p in args.pages] or list(DEFAULTS)
    first, second = (answer_table(path, heading) for path, heading in pages)
    print(f"{pages[0][0].name} against {pages[1][0].name}; at chance: mean AUC < {args.chance} on both")
    for label, n, tau_rank, p_rank, tau_auc, p_auc in agreement(first, second, args.chance):
        print(f"{label} ({n} techniques): τ-b by mean rank {tau_rank:+.3f} (p {p_rank:.2g}), "
              f"by mean AUC {tau_auc:+.3f} (p {p_auc:.2g})")  # fmt: skip


if __name__ == "__main__":
    main()
