"""``privauditor audit``: attack your own adapted model on your member / non-member files."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from privauditor.tasks.shipping import FORMS

from . import tables

#: ``--fail-on``'s exit codes (0: the audit ran and its finding is not one ``--fail-on`` names; 2: bad
#: input; 1: an error): what was found
EXIT_LEAKAGE, EXIT_FILES_DIFFER = 3, 4
FAIL_ON = {"leakage": {"leakage"}, "shift": {"shift", "reversed"}, "any": {"leakage", "shift", "reversed"}}


def _pii_field(value: str) -> tuple[str, str]:
    """``KIND=REGEX`` as (kind, pattern), checked for its shape here (the pattern compiles when the audit
    starts)."""
    kind, _, pattern = value.partition("=")
    if not kind or not pattern:
        raise argparse.ArgumentTypeError(
            f"--pii {value!r}: expected KIND=REGEX, e.g. account='ending (\\d{{4}})'"
        )
    return kind, pattern


def exit_code(finding: str, fail_on: str | None) -> int:
    """``--fail-on``'s exit code for a finding: 3 for leakage, 4 for files that differ (a shift, or members
    scoring lower), when ``fail_on`` names it; else 0."""
    if fail_on is None or finding not in FAIL_ON[fail_on]:
        return 0
    return EXIT_LEAKAGE if finding == "leakage" else EXIT_FILES_DIFFER


def summary(result: Any, code: int) -> dict[str, Any]:
    """``--json``'s one object: the finding, the exit code, and per attack what the report's table shows."""
    keys = (
        "auc",
        "auc_ci",
        "tpr_at_0.1pct_fpr",
        "tpr_at_1pct_fpr",
        "tpr_at_0fp",
        "tpr_at_0fp_ci",
        "tpr_at_0fp_fpr_bound",
        "n_members",
        "n_nonmembers",
    )
    verdict = result.verdict
    return {
        "cell_id": result.cell_id, "finding": result.finding, "exit_code": code, "path": str(result.path),
        "skipped": result.skipped, "detectable_auc": verdict["detectable_auc"], "shift": verdict["shift"],
        "baseline": verdict.get("baseline"),
        "attacks": {name: {k: m.get(k) for k in keys} | verdict["attacks"].get(name, {})
                    for name, m in sorted(result.metrics.items()) if "auc" in m},
        "conclusion": result.conclusion, "warnings": result.warnings,
    }  # fmt: skip


def preview_text(found: dict[str, Any]) -> str:
    """``--dry-run``'s page: the audit's id and sizes, then the first records as the model reads them."""
    lines = [f"dry run of {found['audit_id']}: nothing scored, nothing written",
             f"records: {found['records']['members']} members, {found['records']['nonmembers']} non-members; "
             f"max length {found['max_length']}; chat template: {found['chat_template'] or 'none (no chat records)'}"]  # fmt: skip
    for part, shown in found["shown"].items():
        for record in shown:
            scored = record["scored"]
            lines += [f"{part} {record['id']}: {scored['tokens_in_loss']} of {scored['target_tokens']} target "
                      "tokens scored", f"  prompt: {record['prompt']!r}", f"  target (scored): {record['target']!r}"]  # fmt: skip
    return "\n".join(lines + [f"warning: {w}" for w in found["warnings"]])


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of at least 1")
    return int(value)


def _audit(args: argparse.Namespace) -> int:
    """The audit; with ``--json`` its human output goes to stderr and stdout holds one JSON object."""
    if not args.json:
        return _run_audit(args)
    with contextlib.redirect_stdout(sys.stderr):
        result, code = _run_audit(args, keep=True)
    print(json.dumps(result if args.dry_run else summary(result, code), default=float))
    return code


def _run_audit(args: argparse.Namespace, keep: bool = False) -> Any:
    from pathlib import Path

    import privauditor
    from privauditor.tasks.infra.results import Results

    from .report.leaderboard import build
    from .report.plots import roc_png

    out = Path(args.out)
    options = {
        "adapter": args.adapter, "reference": args.reference, "settings": args.set or [],
        "revision": args.revision, "dtype": args.dtype, "chat_scored": args.chat_scored,
        "text_column": args.text_column, "pii": dict(args.pii or []), "render": args.render, "limit": args.limit,
        "skip_bad": args.skip_bad_records, "baseline": not args.no_baseline, "shipped": args.shipped,
    }  # fmt: skip
    if args.dry_run:
        preview = privauditor.audit_preview(args.model, args.members, args.nonmembers, **options)
        print(preview_text(preview))
        return (preview, 0) if keep else 0
    result = privauditor.audit(
        args.model, args.members, args.nonmembers, out, nonmembers_from=args.nonmembers_from, **options
    )
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"audit {result.cell_id} {'already done' if result.skipped else 'done'}: {result.path}")
    print(tables.metrics_table(result.metrics))
    print(f"verdict: {result.finding.upper()}")
    for line in result.conclusion:
        print(f"  {line}")
    words = (result.verdict.get("shift") or {}).get("words") if result.finding == "shift" else None
    if words:  # from the user's own files: printed here, never written into a report
        print("  words held by different shares of the files (members / non-members): "
              + ", ".join(f"{w['word']!r} {w['members']:.0%} / {w['nonmembers']:.0%}" for w in words))  # fmt: skip
    png = roc_png(result.metrics, Results(out).roc_image(result.cell_id), result.cell_id)
    build(out)
    print(f"ROC (log-log): {png}")
    if args.report:
        for path in result.report(pdf=True):
            print(f"report: {path}")
    code = exit_code(result.finding, args.fail_on)
    return (result, code) if keep else code


def _export_split(args: argparse.Namespace) -> int:
    from privauditor.tasks.cell.export_split import export_split
    from privauditor.tasks.infra.results import Results

    written = export_split(args.results, args.cell, args.to)
    for part, path in written.items():
        print(f"{part}: {path} ({sum(1 for _ in path.open())} records)")
    cell = Results.at(args.results).cell(args.cell)
    print(f"audit the cell's adapter with them: privauditor audit --model {cell.record()['config']['model']} "
          f"--adapter {cell.path / 'adapter'} --members {written['members']} "
          f"--nonmembers {written['nonmembers']} --nonmembers-from held-out --out OUT")  # fmt: skip
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """The ``audit`` and ``export-split`` commands, under the command line's ``commands``."""
    export = commands.add_parser(
        "export-split", help="write a finished cell's members, non-members, ... as JSONL files an audit reads"
    )
    export.add_argument("results", help="results folder holding the cell")
    export.add_argument("cell", help="the cell's id (its folder under RESULTS/cells/)")
    export.add_argument("--to", required=True, help="folder for <part>.jsonl (members, nonmembers, ...)")
    export.set_defaults(handler=_export_split)

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
        "--shipped",
        choices=FORMS,
        help="audit the model as it ships: the adapter merged, then int8, a GGUF file or nf4 (a GPU); an "
        "adapter without a merge on its base so quantised (docs/shipping.md)",
    )
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
        "--render",
        choices=["text"],
        help="text: score every record as one whole text, whatever its form (files whose records differ in "
        "form, e.g. text and prompt + target, are refused otherwise)",
    )
    audit.add_argument(
        "--limit", type=_positive, metavar="N", help="read only the first N records of each file"
    )
    audit.add_argument(
        "--skip-bad-records",
        action="store_true",
        help="audit the rest of a file some of whose records are malformed, empty, too long or repeated "
        "(refused otherwise, naming them by line)",
    )
    audit.add_argument(
        "--no-baseline",
        action="store_true",
        help="do not also attack the un-adapted base (the adapter's base, or --reference) on the same files; "
        "halves the time of an audit with one",
    )
    audit.add_argument(
        "--dry-run",
        action="store_true",
        help="show how the first records render and how many tokens are scored; score and write nothing",
    )
    audit.add_argument(
        "--fail-on",
        choices=sorted(FAIL_ON),
        help=f"exit {EXIT_LEAKAGE} when leakage is found, {EXIT_FILES_DIFFER} when the files differ (a shift, "
        "or members scoring lower): leakage, shift or any of them (default: exit 0 whatever the finding)",
    )
    audit.add_argument(
        "--json", action="store_true", help="print one JSON summary object on stdout (the rest on stderr)"
    )
    audit.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="attacks=[...], attack_params.*, score.*, seed, train.max_length, train.precision (nothing else applies)",
    )
    audit.set_defaults(handler=_audit)
