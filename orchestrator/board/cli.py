"""``privauditor board add | check | build | tables | release | export``."""

from __future__ import annotations

import argparse
import sys

from privauditor.orchestrator.report.row_schema import TRAINED
from privauditor.tasks.shipping import FORMS


def _add(args: argparse.Namespace) -> int:
    from .check import add

    written, there = add(args.results, args.store, args.supersedes)
    print(f"{args.store}: {written} records added, {there} already there")
    return 0


def _check(args: argparse.Namespace) -> int:
    from .check import check, versions_line
    from .store import Store

    store = Store(args.store)
    records, found = check(store)
    for line in found:
        print(line, file=sys.stderr)
    print(f"{args.store}: {len(records)} valid records, {len(found)} problems")
    mixed = versions_line(records)
    if mixed:
        print(mixed)
    return 1 if found else 0


def _build(args: argparse.Namespace) -> int:
    from .site import build

    now = build(args.store, args.out, args.hypothesis, args.shipped)
    counts = now["counts"]
    form = "" if args.shipped == TRAINED else f" as shipped ({args.shipped})"
    print(f"board{form}: {counts['records']} records from {counts['runs']} runs, {counts['settings']} settings, "
          f"{counts['rows']} setting rows: {args.out}/index.html")  # fmt: skip
    return 0


def _tables(args: argparse.Namespace) -> int:
    from .release_tables import tables

    text = tables(args.store, args.hypothesis, args.figures)
    if args.to:
        from pathlib import Path

        from privauditor.tasks.infra.files import write_text

        write_text(Path(args.to), text)
    else:
        print(text, end="")
    return 0


def _release(args: argparse.Namespace) -> int:
    from .history import release

    manifest = release(args.store, args.name, args.wandb_project, args.wandb_dir)
    after = f" after {manifest['previous']}" if manifest["previous"] else ""
    print(f"release {manifest['name']} (number {manifest['sequence']}{after}): {manifest['counts']['records']} records, "
          f"{manifest['counts']['rows']} setting rows")  # fmt: skip
    return 0


def _export(args: argparse.Namespace) -> int:
    import time

    from .export import export

    done = export(args.store, args.format, args.to, args.date or time.strftime("%Y-%m-%d", time.gmtime()))
    print(f"board export: {done['cells']} cells from {done['records']} records as {' and '.join(done['formats'])}, "
          f"dated {done['date']}: {args.to}")  # fmt: skip
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    board = commands.add_parser(
        "board", help="a results store many runs merge into: add, check, build the site, release, export"
    )
    actions = board.add_subparsers(dest="board_command", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add a results folder's records (aggregates and provenance only)")
    add.add_argument("results", help="results folder (or object-store URI)")
    add.add_argument("store", help="store folder (created if new) or pyarrow.fs URI (s3://, gs://, file://)")
    add.add_argument(
        "--supersedes", action="append", metavar="KEY_OR_RUN",
        help="a record key, or a run id, whose records these correct (same model, technique, dataset, seed, step)",
    )  # fmt: skip
    add.set_defaults(handler=_add)
    check = actions.add_parser(
        "check", help="validate every record; exit 1 on any problem (for a store's CI)"
    )
    check.add_argument("store")
    check.set_defaults(handler=_check)
    build = actions.add_parser("build", help="validate, merge runs and seeds, write tables and the HTML site")
    build.add_argument("store")
    build.add_argument("--out", required=True, help="site folder (replaced if it is an earlier site)")
    build.add_argument(
        "--hypothesis", metavar="SWEEP",
        help="a sweep file or shipped sweep name whose hypothesis block Page's test checks (default: none)",
    )  # fmt: skip
    build.add_argument(
        "--shipped", default=TRAINED, metavar="FORM",
        help=f"the board of the models in one form: {TRAINED} (default) or a shipped form ({', '.join(FORMS)})",
    )  # fmt: skip
    build.set_defaults(handler=_build)
    tables = actions.add_parser(
        "tables", help="a release's tables in Markdown (confirmatory test, rankings, transfer, attacks)"
    )
    tables.add_argument("store")
    tables.add_argument(
        "--hypothesis",
        required=True,
        metavar="SWEEP",
        help="the sweep (file or shipped name) whose hypothesis it tests",
    )
    tables.add_argument("--to", metavar="FILE", help="write them here (default: print)")
    tables.add_argument(
        "--figures", metavar="DIR", help="also each ranking's critical-difference diagram here"
    )
    tables.set_defaults(handler=_tables)
    release = actions.add_parser("release", help="write a release manifest (the history page compares them)")
    release.add_argument("store")
    release.add_argument("name", help="release name, used once (letters, digits, . _ -)")
    release.add_argument("--wandb-project", help="also log the board as a W&B table and artifact version")
    release.add_argument("--wandb-dir", help="where W&B writes its files (default: here)")
    release.set_defaults(handler=_release)
    export = actions.add_parser(
        "export",
        help="each cell's numbers (replicas averaged) as Hugging Face Hub eval results or Every Eval Ever",
    )
    export.add_argument("store", help="store folder or pyarrow.fs URI")
    export.add_argument(
        "--format", action="append", required=True, metavar="hf-eval-results|every-eval-ever",
        help="hf-eval-results: eval_results/ (Hub .eval_results entries, model-index block, model-card "
        "section); every-eval-ever: every_eval_ever/ (schema 0.3.0 records); repeat for both",
    )  # fmt: skip
    export.add_argument(
        "--to", required=True, help="export folder (replaced if it is an earlier board export)"
    )
    export.add_argument(
        "--date", metavar="YYYY-MM-DD[THH:MM:SSZ]",
        help="the evaluation time the files state, the same for every cell (board records hold no time; "
        "default: today, UTC; give it to get the same bytes from the same store)",
    )  # fmt: skip
    export.set_defaults(handler=_export)
