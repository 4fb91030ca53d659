"""``privauditor audit``: attack your own adapted model on your member / non-member files."""

from __future__ import annotations

import argparse
import sys

from . import tables


def _pii_field(value: str) -> tuple[str, str]:
    """``KIND=REGEX`` as (kind, pattern), checked for its shape here (the pattern compiles when the audit
    starts)."""
    kind, _, pattern = value.partition("=")
    if not kind or not pattern:
        raise argparse.ArgumentTypeError(
            f"--pii {value!r}: expected KIND=REGEX, e.g. account='ending (\\d{{4}})'"
        )
    return kind, pattern


def _audit(args: argparse.Namespace) -> int:
    from pathlib import Path

    import privauditor

    from .report.leaderboard import build
    from .report.plots import roc_png

    out = Path(args.out)
    result = privauditor.audit(
        args.model, args.members, args.nonmembers, out, adapter=args.adapter, reference=args.reference,
        nonmembers_from=args.nonmembers_from, settings=args.set or [], revision=args.revision,
        dtype=args.dtype, chat_scored=args.chat_scored, text_column=args.text_column,
        pii=dict(args.pii or []),
    )  # fmt: skip
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"audit {result.cell_id} {'already done' if result.skipped else 'done'}: {result.path}")
    print(tables.metrics_table(result.metrics))
    print(f"verdict: {result.finding.upper()}")
    for line in result.conclusion:
        print(f"  {line}")
    png = roc_png(result.metrics, out / "plots" / f"{result.cell_id}.png", result.cell_id)
    build(out)
    print(f"ROC (log-log): {png}")
    if args.report:
        for path in result.report(pdf=True):
            print(f"report: {path}")
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """The ``audit`` command, under the command line's ``commands``."""
    audit = commands.add_parser(
        "audit", help="attack your own adapted model on your member / non-member files"
    )
    audit.add_argument(
        "--model",
        required=True,
        help="Hugging Face id (gpt2, org/name), local checkpoint directory or base name",
    )
    audit.add_argument("--revision", help="the Hugging Face id's branch, tag or commit (default: main)")
    audit.add_argument("--dtype", help="float32 (default), bfloat16 or float16: the weights as loaded")
    audit.add_argument("--adapter", help="peft adapter directory, or a cell's adapter/ directory")
    audit.add_argument(
        "--reference", help="reference model for the reference attack (default: the adapter's base)"
    )
    audit.add_argument(
        "--members", required=True, help="JSONL / CSV / Parquet (text, or prompt + target) or .txt"
    )
    audit.add_argument("--nonmembers", required=True, help="same formats as --members")
    audit.add_argument(
        "--text-column", metavar="NAME", help="the files' column holding each record's text (e.g. body)"
    )
    audit.add_argument(
        "--pii",
        metavar="KIND=REGEX",
        action="append",
        type=_pii_field,
        help="a PII field to measure the reconstruction of (and its inference, with --set "
        "score.pii_candidates=M): its kind and a regular expression whose group 1 (or whole match) is the value "
        r"(repeatable), e.g. account='ending (\d{4})'",
    )
    audit.add_argument(
        "--nonmembers-from",
        choices=["held-out", "collected"],
        help="held-out: drawn at random from the same data before training; collected: gathered afterwards",
    )
    audit.add_argument(
        "--chat-scored",
        choices=["assistant", "all"],
        default="assistant",
        help="chat records (messages): score the last assistant turn (default) or the whole conversation",
    )
    audit.add_argument("--out", required=True, help="results folder")
    audit.add_argument(
        "--report",
        action="store_true",
        help="also write OUT/reports/<audit id>.html, and .pdf where a Chromium is found",
    )
    audit.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="attacks=[...], attack_params.*, score.*, seed, train.max_length, train.precision (nothing else applies)",
    )
    audit.set_defaults(handler=_audit)
