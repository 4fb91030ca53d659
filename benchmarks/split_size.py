"""How many members (and as many non-members) a split needs for a paired AUC difference's 95 % CI to be
at most a given half-width, measured on a finished sweep.

For every pair of techniques of every (model, dataset, seed) group, DeLong's standard error of the
paired AUC difference under ``--attack`` (at each cell's last checkpoint, where the cell folder's own
``scores.parquet`` is), its 95 % half-width 1.96 SE, and the members per side that bring the median and
the 90th percentile of the half-widths down to ``--target``: SE shrinks as 1 / sqrt(n), so
n_needed = n * (half-width / target)^2.

Run::

    python benchmarks/split_size.py results/default --target 0.06
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from privauditor.tasks.infra.results import Results
from privauditor.tasks.stats.significance import delong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--attack", default="loss")
    parser.add_argument("--target", type=float, default=0.06)
    args = parser.parse_args()
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for cell in Results(args.results).folders():
        config = cell.record()["config"]
        table = pq.ParquetFile(cell.path / "scores.parquet").read().to_pylist()
        scores = {r["sample_id"]: (r["member"], r["score"]) for r in table if r["attack"] == args.attack}
        groups[(config["model"], config["dataset"], config["seed"])][config["adaptation"]] = scores
    halves, members = [], set()
    for techniques in groups.values():
        for a, b in itertools.combinations(sorted(techniques), 2):
            ids = sorted(techniques[a])
            member = np.array([techniques[a][i][0] for i in ids], dtype=bool)
            test = delong(member, [techniques[a][i][1] for i in ids], [techniques[b][i][1] for i in ids])
            halves.append(1.96 * test["se"])
            members.add(int(member.sum()))
    if len(members) != 1:
        raise SystemExit(f"need one split size, found members {sorted(members)}")
    (n,) = members
    found = {"pairs": len(halves), "members": n}
    for name, value in (("median", float(np.median(halves))), ("p90", float(np.percentile(halves, 90)))):
        found[f"half_width_{name}"] = round(value, 4)
        found[f"members_for_{name}"] = math.ceil(n * (value / args.target) ** 2)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
