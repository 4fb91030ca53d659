"""The ``privauditor`` command line.

Examples::

    privauditor ls models
    privauditor prepare            # pre-train / load every offline base, print their quality
    privauditor cell --model tiny-llama --adaptation lora --dataset finance --out results/one
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from privauditor.tasks.errors import PrivauditorError

from . import tables

LISTABLE = ("models", "datasets", "adaptations", "attacks")


def _ls(args: argparse.Namespace) -> int:
    print(tables.listing(args.what))
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from privauditor.tasks.cache import cache_root
    from privauditor.tasks.models import MODELS
    from privauditor.tasks.models._pretrain import active_profile

    profile = active_profile(args.profile)
    names = args.models or [name for name, spec in MODELS.items() if spec.source == "tiny"]
    print(f"Offline bases (pre-training profile '{profile.name}', cache {cache_root()}):", flush=True)
    print(tables.bases(names, profile))
    print()
    print(tables.datasets_summary())
    return 0


def _cell(args: argparse.Namespace) -> int:
    from pathlib import Path

    from privauditor.tasks.cell import run_cell
    from privauditor.tasks.config import cell_config

    from .matrix import check_cell
    from .plots import roc_png

    settings = {
        "model": args.model,
        "adaptation": args.adaptation,
        "dataset": args.dataset,
        "seed": args.seed,
    }
    config = cell_config(settings, args.set or [])
    check_cell(config.model, config.adaptation)
    out = Path(args.out)
    outcome = run_cell(config, out)
    state = "already done" if outcome.skipped else "done"
    print(f"cell {outcome.cell_id} {state}: {outcome.path}")
    print(tables.metrics_table(outcome.metrics))
    png = roc_png(outcome.metrics, out / "plots" / f"{outcome.cell_id}.png", outcome.cell_id)
    print(f"ROC (log-log): {png}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="privauditor", description="Privacy audits of adapted language models."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ls = commands.add_parser("ls", help="list registered models, datasets, adaptations or attacks")
    ls.add_argument("what", choices=LISTABLE)
    ls.set_defaults(handler=_ls)

    prepare = commands.add_parser("prepare", help="build (or load from cache) the offline bases and datasets")
    prepare.add_argument(
        "--profile", help="pre-training profile: default or fast (env PRIVAUDITOR_PRETRAIN_PROFILE)"
    )
    prepare.add_argument("--models", nargs="+", metavar="MODEL", help="only these tiny bases (default: all)")
    prepare.set_defaults(handler=_prepare)

    cell = commands.add_parser("cell", help="run one cell in this process (no Ray): adapt, score, attack")
    cell.add_argument("--model", required=True, help="registry name, Hugging Face id or local path")
    cell.add_argument("--adaptation", required=True, help="technique name (privauditor ls adaptations)")
    cell.add_argument("--dataset", required=True, help="registry name, Hugging Face id or local file")
    cell.add_argument("--seed", type=int, default=0)
    cell.add_argument("--out", required=True, help="results folder (the cell goes to OUT/cells/<cell_id>/)")
    cell.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a setting, e.g. split.members=64, train.epochs=2, attacks=[loss,zlib], "
        "attack_params.neighbourhood.k=10 (repeatable)",
    )
    cell.set_defaults(handler=_cell)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``privauditor`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return args.handler(args)
    except PrivauditorError as exc:
        print(f"privauditor: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
