"""The ``privauditor`` command line.

Examples::

    privauditor ls models
    privauditor prepare            # pre-train / load every offline base, print their quality
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
