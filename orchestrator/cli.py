"""The ``privauditor`` command line.

Examples::

    privauditor ls models
    privauditor prepare            # pre-train / load every offline base, print their quality
    privauditor cell --model tiny-llama --adaptation lora --dataset finance --out results/one
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from privauditor.tasks.infra.errors import PrivauditorError

from . import tables
from .cli_help import Version, attach_examples, shipped_sweeps

if TYPE_CHECKING:
    from privauditor.tasks.infra.results import Results

LISTABLE = ("models", "datasets", "adaptations", "attacks", "defences", "sweeps")


def at_least_one(value: str) -> int:
    """An argparse type: a whole number of at least 1 (``--max-concurrent 0`` would mean "no limit" to Tune)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number} cells at once runs nothing: give 1 or more")
    return number


def _ls(args: argparse.Namespace) -> int:
    print(tables.listing(args.what))
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from privauditor.tasks.infra.cache import cache_root
    from privauditor.tasks.models import MODELS, active_profile

    profile = active_profile(args.profile)
    names = args.models or [name for name, spec in MODELS.items() if spec.source == "tiny"]
    print(f"Offline bases (pre-training profile '{profile.name}', cache {cache_root()}):", flush=True)
    print(tables.bases(names, profile))
    print()
    print(tables.datasets_summary())
    return 0


def _cell(args: argparse.Namespace) -> int:
    from pathlib import Path

    from privauditor.orchestrator.sweepfile.matrix import check_cell
    from privauditor.tasks.cell.run import CellEnvironment, run_cell
    from privauditor.tasks.defences import get_defence
    from privauditor.tasks.infra import drain
    from privauditor.tasks.infra.results import CellFolder, Results, checkpoint_results
    from privauditor.tasks.spec.config import cell_config

    from .report.plots import roc_png
    from .run.trials import local_launcher

    drain.install()  # SIGTERM (a spot node's notice): training saves its step state and exits 75, to resume
    settings = {
        "model": args.model,
        "adaptation": args.adaptation,
        "dataset": args.dataset,
        "seed": args.seed,
    }
    config = cell_config(settings, args.set or [])
    check_cell(config.model, config.adaptation)
    spec = config.resolve()
    out = Path(args.out)
    Results.open_for_writing(out, {"kind": "cell"})  # not into a sweep's or an audit's folder
    outcome = run_cell(spec, out, CellEnvironment(distributed=local_launcher(spec)))
    state = "already done" if outcome.skipped else "done"
    print(f"cell {outcome.cell_id} {state}: {outcome.path}")
    audited = checkpoint_results(outcome.path)
    if len(audited) > 1:
        print(tables.checkpoints_table(audited))
        print(f"last checkpoint (epoch {audited[-1][0]['epoch']}):")
    print(tables.metrics_table(outcome.metrics))
    last, defence = audited[-1][0], get_defence(spec.defence)
    for line in tables.one_run_lines((last.get("extraction") or {}).get("one_run")):
        print(line)
    if defence is not None:
        print(defence.summary(CellFolder.at(outcome.path).record()["defence"], last))
        for kind in last.get("dp_violations", []):
            print(f"DP VIOLATION: the one-run bound over the {kind} canaries exceeds the eps spent: a bug",
                  file=sys.stderr)  # fmt: skip
    png = roc_png(outcome.metrics, Results(out).roc_image(outcome.cell_id), outcome.cell_id)
    print(f"ROC (log-log): {png}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from privauditor.orchestrator.sweepfile.sweep import load_sweep
    from privauditor.tasks.models import resolve_model

    sweep = load_sweep(args.sweep, args.set or [])
    rows, unbuilt = [], 0
    for c in sweep.cells:
        spec = c.resolve(build=False)
        unbuilt += not spec.complete
        needs, ds = resolve_model(c.model).resources, spec.train.deepspeed
        zero = "-" if ds is None else f"ZeRO-{ds.stage}" + (" offload" if ds.offload else "")
        rows.append([spec.cell_id(), c.model, c.adaptation, c.dataset, c.seed, needs.gpus, needs.cpus,
                     spec.train.workers, zero])  # fmt: skip
    header = ["cell_id", "model", "adaptation", "dataset", "seed", "gpus", "cpus", "workers", "deepspeed"]
    print(tables.render(header, rows))
    print(f"\nsweep '{sweep.name}': {len(sweep.cells)} cells")
    if unbuilt:
        print(f"{unbuilt} cell ids end in ???????? until the offline models they use are built "
              "(privauditor prepare, or the sweep's first run): an id hashes its model's weights")  # fmt: skip
    for dropped in sweep.dropped:
        print(f"dropped {dropped.model} x {dropped.adaptation}: {dropped.reason}")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from .plan.plan_report import plan_report

    print(plan_report(args))
    return 0


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from privauditor.orchestrator.sweepfile.hypothesis import check_committed
    from privauditor.orchestrator.sweepfile.sweep import load_sweep

    from .run.runner import run_sweep

    sweep = load_sweep(args.sweep, args.set or [])
    if args.only:
        from privauditor.orchestrator.sweepfile.select import only

        sweep = only(sweep, args.only)
    if sweep.hypothesis is not None and not args.exploratory:  # before anything is written
        check_committed(sweep.hypothesis, sweep.name)
    out = args.out or Path("results") / sweep.name  # a folder, or an object-store URI (s3://, gs://)
    return run_sweep(
        sweep, out, address=args.address, max_concurrent=args.max_concurrent, verbose=args.verbose,
        add_spec=args.add_spec, cluster=args.cluster,
    )  # fmt: skip


def _report(args: argparse.Namespace) -> int:
    from privauditor.tasks.infra.results import Results

    from .report.leaderboard import rows
    from .report.row_schema import trained_rows
    from .report.summary import SUMMARY_HEADER, summary
    from .report.write import leaderboard, write_findings

    results = Results.at(args.dir)
    results.check_readable()  # not a results folder, or one of another results format: refused, not read
    results.pull_summaries()
    found = rows(results.root)
    if args.formed_on:  # a hypothesis's formed_on block, read from these cells; nothing is written
        from privauditor.orchestrator.sweepfile.hypothesis import formed_on_of
        from privauditor.tasks.infra.strict import dump_yaml

        print(dump_yaml({"formed_on": formed_on_of(results.root, found)}, sort_keys=False), end="")
        return 0
    _check_attack(args.attack, found, args.dir)
    other = _against(args.against, results) if args.against else None
    leaderboard(results, found)
    print(tables.render(["adaptation", *SUMMARY_HEADER], summary(trained_rows(found), "adaptation")))
    print(f"leaderboard: {results.root / 'leaderboard.html'} ({len(found)} rows)")
    print(write_findings(results, found, args.attack, other))
    print(f"findings: {results.root / 'findings.md'}")
    print(tables.stages_table(results.root))
    return 0


def _against(location: str, results: Results) -> tuple[str, list[dict[str, Any]]]:
    """The (name, leaderboard rows) of the results folder ``location`` that ``report --against`` ranks
    ``results`` against: a path or an object-store URI, checked as ``results`` is, read and never written."""
    from privauditor.tasks.infra.results import Results

    from .report.leaderboard import rows
    from .report.row_schema import trained_rows

    other = Results.at(location)
    if other.uri.rstrip("/") == results.uri.rstrip("/"):
        raise PrivauditorError(
            f"--against {location} is the results folder itself: give another to compare with"
        )
    try:
        other.check_readable()
    except PrivauditorError as exc:
        raise PrivauditorError(f"--against {exc}") from None
    other.pull_summaries()
    return other.uri.rstrip("/").rsplit("/", 1)[-1], trained_rows(rows(other.root))


def _check_attack(attack: str, found: list[dict[str, Any]], name: str) -> None:
    """A one-line error, before anything is written, unless ``--attack`` names an attack the finished
    cells of the results folder ``name`` ran (their leaderboard rows ``found``); an unknown name gets
    "did you mean"."""
    from privauditor.tasks.attacks import ATTACKS
    from privauditor.tasks.infra.errors import unknown_name_message

    ran = sorted({r["attack"] for r in found})
    if attack not in ATTACKS and attack not in ran:
        known = sorted({*ATTACKS.names(), *ran})
        raise PrivauditorError("--attack: " + unknown_name_message("attack", attack, known))
    if ran and attack not in ran:
        raise PrivauditorError(
            f"--attack {attack}: no finished cell of {name} ran it (they ran {', '.join(ran)})"
        )


def _publish(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .report.publish import publish

    to = Path(args.to or Path(args.dir) / "public")
    found = publish(Path(args.dir), to, args.wandb_project)
    print(f"published {len({r['cell_id'] for r in found})} cells, {len(found)} rows to {to} "
          "(aggregates, provenance, plots; no sample text, ids or per-sample scores)")  # fmt: skip
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="privauditor", description="Privacy audits of adapted language models."
    )
    parser.add_argument("--version", action=Version)
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="log progress details; for run, also Ray's trial tables and workers' output",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ls = commands.add_parser(
        "ls", help="list registered models, datasets, adaptations, attacks, defences or sweeps"
    )
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
    cell.add_argument(
        "--seed", type=int, default=0, help="the split's shuffle and the training's seed (default: 0)"
    )
    cell.add_argument("--out", required=True, help="results folder (the cell goes to OUT/cells/<cell_id>/)")
    cell.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a setting, e.g. split.members=64, train.epochs=2, attacks=[loss,zlib], "
        "attack_params.neighbourhood.k=10 (repeatable)",
    )
    cell.set_defaults(handler=_cell)

    validate = commands.add_parser(
        "validate", help="expand a sweep file and print its cells (no Ray, no training)"
    )
    validate.add_argument("sweep", help=f"sweep YAML, or the name of a shipped sweep ({shipped_sweeps()})")
    validate.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a setting in every cell"
    )
    validate.set_defaults(handler=_validate)

    plan = commands.add_parser(
        "plan", help="price a sweep before it runs: FLOPs, memory, GPU-hours, wall time, cost (no network)"
    )
    plan.add_argument("sweep", help="sweep YAML or shipped sweep name")
    plan.add_argument(
        "--cluster",
        help="Ray cluster YAML whose node types run it, or a shipped one: aws, gcp (default: this machine)",
    )
    plan.add_argument("--prices", help="price table YAML (default: clusters/prices.yaml)")
    plan.add_argument("--budget-usd", help="say which part of the sweep this budget pays for")
    plan.add_argument(
        "--calibrate", metavar="RESULTS|BENCH.json",
        help="fit the device rates to a finished sweep's timings, or set the benchmarked device's "
        "utilisation from benchmarks/gpu_bench.py's JSON",
    )  # fmt: skip
    plan.add_argument(
        "--compare",
        metavar="RESULTS",
        help="set the predicted per-cell times against a finished run of SWEEP",
    )
    plan.add_argument(
        "--params", action="append", default=[], metavar="ID=SIZE:FAMILY|ID=CONFIG",
        help="size of a Hugging Face id not in the registry: 7B:llama, or a local config.json (repeatable)",
    )  # fmt: skip
    plan.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a setting in every cell")
    plan.add_argument("--cells", action="store_true", help="print every cell's figures, not only the totals")
    plan.set_defaults(handler=_plan)

    run = commands.add_parser(
        "run", help="run a sweep on Ray and build its leaderboard (resumes if OUT exists)"
    )
    run.add_argument(
        "sweep", nargs="?", default="default", help="sweep YAML or shipped sweep name (default: default)"
    )
    run.add_argument("--out", help="results folder (default: results/<sweep name>)")
    run.add_argument("--address", help="Ray cluster address, e.g. auto (default: a local Ray)")
    run.add_argument("--max-concurrent", type=at_least_one, help="at most N cells at once")
    run.add_argument(
        "--cluster",
        help="Ray cluster YAML (or aws, gcp) the sweep runs on: a cell that fits none of its node types "
        "is refused before Ray starts",
    )
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a setting in every cell")
    run.add_argument(
        "--only", action="append", metavar="KEY=VALUE[,VALUE]",
        help="run only the cells that match (model, adaptation, dataset, defence, seed; repeatable): one "
        "block of a sweep, into the same results folder as the rest",
    )  # fmt: skip
    run.add_argument(
        "--add-spec",
        action="store_true",
        help="run into a folder that holds this sweep with other settings (or another sweep), keeping both",
    )
    run.add_argument(
        "--exploratory", action="store_true",
        help="run a sweep whose hypothesis names test blocks on code that does not descend from the "
        "commit that holds it (its test is then exploratory)",
    )  # fmt: skip
    run.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
        help="also Ray's trial tables and workers' output (library warnings, progress bars)",
    )  # fmt: skip
    run.set_defaults(handler=_run)

    from .cli_audit import register as register_audit

    register_audit(commands)

    report = commands.add_parser(
        "report", help="rebuild the leaderboard files from the cells on disk; write and print findings.md"
    )
    report.add_argument("dir", help="results folder")
    report.add_argument(
        "--attack", default="loss", help="the attack the findings compare techniques under (default: loss)"
    )
    report.add_argument(
        "--against",
        metavar="OTHER",
        help="another results folder (a path or an object-store URI, read and never written): rank its "
        "techniques alike and compare the orders (e.g. the tiny bases' results/default against results/real)",
    )
    report.add_argument(
        "--formed-on",
        action="store_true",
        help="print, as YAML, the formed_on block of a hypothesis read from this folder (its blocks with "
        "each base's identity, seeds, commits) and write nothing",
    )
    report.set_defaults(handler=_report)

    publish = commands.add_parser(
        "publish",
        help="export the public leaderboard: aggregates, provenance, plots, Hub and Every Eval Ever files; "
        "no sample data",
    )
    publish.add_argument("dir", help="results folder")
    publish.add_argument("--to", help="export folder (default: DIR/public)")
    publish.add_argument("--wandb-project", help="also log the leaderboard table to this W&B project")
    publish.set_defaults(handler=_publish)

    from .board.cli import register

    register(commands)
    attach_examples(commands)
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
    except KeyboardInterrupt:  # finished cells are kept (DONE); a rerun does the rest
        print("privauditor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (`privauditor ls attacks | head`): quiet, as other tools are
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141


if __name__ == "__main__":
    sys.exit(main())
