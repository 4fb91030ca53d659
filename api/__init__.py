"""privauditor's Python API (this folder installs as the top-level ``privauditor`` package).

::

    import privauditor

    result = privauditor.audit(
        "tiny-llama", members="members.jsonl", nonmembers="nonmembers.jsonl", out="results/audit",
        nonmembers_from="held-out",
    )
    result.finding        # "shift", "reversed", "leakage" or "nothing detected"
    result.to_pandas()    # one row per attack: AUC with its interval, TPR at low FPR, p-values
    result.report()       # results/audit/reports/<id>.html (and .pdf where a Chromium is found)

    results = privauditor.load_results("results/audit")   # any results folder: sweeps' and audits'
    results.to_pandas()   # the leaderboard rows
    results.audits        # the folder's audits, as AuditResult

    privauditor.run("smoke", out="results/smoke")          # a sweep, as ``privauditor run smoke``

The command line calls these same functions. Importing this package loads no torch and no Ray: each
function imports what it needs when called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._results import AuditResult, Results

__all__ = ["AuditResult", "Results", "audit", "audit_preview", "load_results", "run"]


def audit(  # noqa: PLR0913  # the public call mirrors `privauditor audit`'s flags, all keyword-only
    model: str,
    members: str | Path,
    nonmembers: str | Path,
    out: str | Path,
    *,
    adapter: str | Path | None = None,
    reference: str | None = None,
    nonmembers_from: str | None = None,
    settings: Sequence[str] = (),
    revision: str | None = None,
    dtype: str | None = None,
    chat_scored: str = "assistant",
    text_column: str | None = None,
    pii: Mapping[str, str] | None = None,
    render: str | None = None,
    limit: int | None = None,
    skip_bad: bool = False,
    baseline: bool = True,
    shipped: str | None = None,
) -> AuditResult:
    """Attack ``model`` (a Hugging Face id, a local checkpoint or a registered base; with ``adapter`` on
    top) on its ``members`` and ``nonmembers`` files and return the scores with the verdict
    (docs/audit.md). ``settings`` are ``KEY=VALUE`` strings, as ``--set`` takes them; ``text_column``
    names the files' column holding each record's text (CSV / Parquet / JSONL). The audit's files
    go under ``out/cells/<audit id>/``; an audit already done there is read back, not redone. ``pii``:
    kind -> regular expression (group 1, or the whole match, is the value) of the PII fields whose
    reconstruction the audit measures (docs/extraction.md). ``render="text"`` scores every record as one
    whole text, whatever its form (files of different forms are refused otherwise); ``limit`` reads the first
    N records of each file (:func:`audit_preview` shows how they render, scoring nothing); a file with
    records that cannot be read (malformed, empty, too long, repeated) is refused unless ``skip_bad``.
    ``baseline``: also attack the un-adapted base (the reference) on the same files, where there is one
    (an adapter's base or ``reference``): the verdict's baseline; False halves such an audit's time.
    ``shipped``: audit the model as it ships instead (``merged``, ``int8``, ``gguf-q8_0``, ``gguf-q4``:
    docs/shipping.md)."""
    from .tasks.audit.run import run_audit
    from .tasks.audit.verdict import verdict

    if nonmembers_from not in (None, "held-out", "collected"):
        raise ValueError(f"nonmembers_from={nonmembers_from!r}: held-out, collected or None")
    config, options = _prepared(
        model, members, settings=settings, adapter=adapter, reference=reference, revision=revision, dtype=dtype,
        chat_scored=chat_scored, text_column=text_column, pii=pii, render=render, limit=limit,
        skip_bad=skip_bad, baseline=baseline, shipped=shipped,
    )  # fmt: skip
    outcome = run_audit(model, str(members), str(nonmembers), Path(out), config, options)
    verdict(outcome.path, nonmembers_from)
    return AuditResult.read(outcome.path, skipped=outcome.skipped)


def audit_preview(model: str, members: str | Path, nonmembers: str | Path, **options: Any) -> dict[str, Any]:
    """What :func:`audit` with these ``options`` (its keyword arguments but ``out`` and ``nonmembers_from``)
    would read, scoring and writing nothing (``privauditor audit --dry-run``): the audit's id, the files'
    sizes, the chat template and max length, and the first records as the model reads them (prompt, scored
    target, target tokens in the loss)."""
    from .tasks.audit.preview import preview_audit

    config, prepared = _prepared(model, members, **options)
    return preview_audit(model, str(members), str(nonmembers), config, prepared)


def _prepared(
    model: str, members: str | Path, settings: Sequence[str] = (), **options: Any
) -> tuple[Any, Any]:
    """The audit's settings (``settings``: ``--set`` strings) and its options (``adapter`` as a string,
    ``pii`` as pairs)."""
    from .tasks.audit.run import AuditOptions, audit_config

    adapter, pii = options.pop("adapter", None), options.pop("pii", None)
    found = AuditOptions(adapter=None if adapter is None else str(adapter), pii=tuple((pii or {}).items()),
                         **options)  # fmt: skip
    return audit_config(model, str(members), list(settings)), found


def run(
    sweep: str | Path,
    out: str | Path | None = None,
    *,
    settings: Sequence[str] = (),
    address: str | None = None,
    max_concurrent: int | None = None,
    verbose: bool = False,
) -> Results:
    """Run every cell of ``sweep`` (a shipped sweep's name, such as ``smoke``, or a sweep file) that is
    not done in ``out`` (default ``results/<sweep name>``), as ``privauditor run`` does, and return the
    folder's results. Cells that failed are in the folder's log and ``Results.failed``; a run stopped
    part way is finished by calling this again."""
    from privauditor.orchestrator.sweepfile.sweep import load_sweep

    from .orchestrator.run.runner import run_sweep

    loaded = load_sweep(str(sweep), list(settings))
    out = Path("results") / loaded.name if out is None else out
    code = run_sweep(loaded, out, address=address, max_concurrent=max_concurrent, verbose=verbose)
    found = load_results(out)
    found.exit_code = code
    return found


def load_results(path: str | Path) -> Results:
    """A results folder (a sweep's or audits') as rows, read from its finished cells."""
    return Results.read(Path(path))
