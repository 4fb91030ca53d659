"""An audit's report: one self-contained HTML page (``templates/audit_report.html.j2``) and its PDF.

It names the audited model, adapter and files by identity (hashes, sizes, record counts), never by their
text: no member or non-member text enters the page; of single records only the most exposed members' ids
and scores do. It gives the verdict and its plain-language conclusion first, then the configuration
(``audit_sections.py``), each threat model's strongest attack with its AUC interval and TPR at low
false-positive rates (at 0 false positives where a fixed FPR cannot be measured) and its scores'
histograms, the most exposed members, the controls, the limits of what was measured, what to do next and
a block to sign.
The PDF is Chromium's (or Chrome's) headless print of the page; without a browser only the HTML is
written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.files import write_text
from privauditor.tasks.infra.results import CellFolder, Results
from privauditor.tasks.stats.metrics import fpr_upper_bound

from . import audit_sections as sections
from .formats import tpr_text
from .row_schema import access_of, tpr_fields

#: browsers whose headless print makes the PDF, tried in this order (``PRIVAUDITOR_BROWSER`` first)
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
#: the order threat models are shown in (weakest access first); model-free attacks are the controls
THREAT_MODELS = ("black-box", "reference", "white-box")
#: models below this many parameters are called small in the limits
SMALL_MODEL = 1_000_000_000


def _number(value: float | None, digits: str = ".3g") -> str:
    return "-" if value is None else format(value, digits)


def _attack_row(attack: str, m: dict[str, Any], test: dict[str, float]) -> dict[str, str]:
    row = m | tpr_fields(m)
    low, high = m.get("auc_ci") or (None, None)
    interval = "" if low is None else f" [{low:.3f}, {high:.3f}]"
    return {
        "attack": attack,
        "access": access_of(attack),
        "auc": f"{m['auc']:.3f}{interval}",
        "auc_value": m["auc"],
        "tpr_01": tpr_text(row, "tpr_at_0.1pct_fpr"),
        "tpr_1": tpr_text(row, "tpr_at_1pct_fpr"),
        "tpr_0fp": tpr_text(row, "tpr_at_0fp"),
        "p": _number(test.get("p")),
        "p_holm": _number(test.get("p_holm")),
    }


def _identities(record: dict[str, Any]) -> list[tuple[str, str]]:
    audit, files = record["audit"], record["audit"].get("files", {})
    found = [
        ("model", f"{audit['model']} (revision {audit.get('revision') or 'main'}, "
                  f"{audit.get('dtype') or 'float32'}, {record['total_params']:,} parameters)"),
        ("adapter", "none" if audit["adapter"] is None else
                    f"{Path(audit['adapter']).name}: sha256 {record['provenance']['adaptation_hash']} "
                    f"({record['trainable_params']:,} parameters added)"),
        ("reference model", audit.get("reference") or "none"),
    ]  # fmt: skip
    shipped = audit.get("shipped")
    if shipped:  # the audited function is the shipped form, not the model as trained
        found.insert(2, ("audited as shipped", _shipped_text(shipped)))
    for part, label in (("members", "members"), ("nonmembers", "non-members")):
        f = files.get(part)
        detail = f"sha256 {f['sha256']}, {f['bytes']:,} bytes" if f else "identity not recorded"
        found.append((label, f"{Path(audit[part]).name}: {record[f'n_{part}']} records, {detail}"))
    receipt = ((record.get("loss_receipts") or {}).get("parts") or {}).get("members")
    if receipt:  # an audit written before receipts has none
        fraction = receipt["fraction_in_loss"]
        found.append(
            ("members in the loss", f"at max length {record['loss_receipts']['max_length']}: "
                                    f"{receipt['records_in_loss']} of {receipt['records']} records keep a target "
                                    f"token a training loss scores; {_number(fraction and 100 * fraction, '.1f')} % "
                                    f"of their {receipt['target_tokens']:,} target tokens (the rest cut by "
                                    "truncation or masked)")
        )  # fmt: skip
    if audit.get("chat"):
        found.append(
            ("chat records", f"rendered with the model's chat template; scored: {audit['chat']['scored']}")
        )
    return found


def _baseline_auc(baseline: dict[str, Any], attack: str) -> str:
    """The un-adapted base's AUC of ``attack`` with its interval ('-' where the baseline did not run it)."""
    found = baseline["attacks"].get(attack)
    if found is None:
        return "-"
    low, high = found.get("auc_ci") or (None, None)
    return f"{found['auc']:.3f}" + ("" if low is None else f" [{low:.3f}, {high:.3f}]")


def _control(verdict: dict[str, Any]) -> str:
    shift = verdict["shift"]
    if shift is None:
        return "The model-free blind control did not run: a shift between the two files was not tested."
    said = "detected" if shift["detected"] else "did not detect"
    return (
        f"The model-free blind control (a bag-of-n-grams classifier that never sees the model) {said} a "
        f"difference between the two files: AUC {shift['auc']:.3f}, label-permutation p = "
        f"{shift['p_value']:.3g} ({shift.get('permutations', '?')} permutations, "
        f"{shift.get('tested', 'every')} records a side tested)."
        + (
            f" What separates them: {'; '.join(shift['carried_by'])}."
            if shift["detected"] and shift.get("carried_by")
            else ""
        )
    )


def _limits(record: dict[str, Any], verdict: dict[str, Any], attacks: list[str]) -> list[str]:
    n_m, n_n = record["n_members"], record["n_nonmembers"]
    smallest = verdict.get("detectable_auc")
    could = f"about {smallest:.3f}" if smallest else "above 0.999"
    unread = [f"{rate} % FPR" for rate, needed in (("0.1", 1000), ("1", 100)) if n_n < needed]
    found = [
        f"Sample size: {n_m} members and {n_n} non-members. The smallest AUC this audit finds with 80 % power "
        f"is {could}."
        + (
            f" TPR at {' and '.join(unread)} cannot be read with fewer than "
            f"{1000 if len(unread) == 2 else 100} non-members: the tables give the TPR at 0 false positives "
            f"instead, which 0 false positives of {n_n} bound to an FPR of at most "
            f"{sections.percent(fpr_upper_bound(0, n_n))} (one-sided 95 %)."
            if unread
            else ""
        ),
        f"Attack set: {', '.join(attacks)}. Stronger attacks than these exist; an attack not run here may "
        "find more.",
    ]
    if record["total_params"] < SMALL_MODEL:
        found.append(
            f"Model size: {record['total_params']:,} parameters. Larger models memorise more of what they "
            "read; figures on this model do not transfer to larger ones."
        )
    origin = str(verdict.get("nonmembers_from"))  # None: not stated
    found.append(
        {"held-out": "The non-members were held out at random before training, as the AUCs require.",
         "collected": "The non-members were collected after training: a difference in how the files were "
                      "gathered reads as leakage."}.get(origin, "How the non-members were obtained was not "
                      "stated; only non-members held out at random before training make the AUCs interpretable.")
    )  # fmt: skip
    return found


def _next_steps(record: dict[str, Any], verdict: dict[str, Any], finding: str) -> list[str]:
    steps = []
    if finding == "reversed":
        steps.append("Check that --members names the records the model was trained on and --nonmembers the "
                     "others; if they are right, the files differ in distribution: draw the non-members at "
                     "random from the same data, before training.")  # fmt: skip
    if finding == "shift":
        steps.append("Draw the non-members at random from the same data as the members, before training, and "
                     "audit again: no leakage verdict is possible on files that differ.")  # fmt: skip
    if finding == "leakage":
        steps.append("Train with differential privacy (DP-SGD; privauditor's dp defence measures what it "
                     "costs) or fewer epochs, and audit the retrained model.")  # fmt: skip
    if any("near-duplicate" in w for w in record["audit"]["warnings"]) or finding == "leakage":
        steps.append("Deduplicate the training data: repeated records are memorised first.")
    if finding != "leakage" and (verdict.get("detectable_auc") or 1.0) > 0.6:
        steps.append("Add non-members (and members): the audit could miss an AUC below "
                     f"{verdict.get('detectable_auc') or 0.999:.3f} at these sizes.")  # fmt: skip
    if verdict.get("nonmembers_from") != "held-out":
        steps.append("State how the non-members were obtained (--nonmembers-from held-out|collected).")
    return steps or ["Keep the audit with the model; rerun it when the model or its training data change."]


def _extraction(record: dict[str, Any]) -> tuple[list[list[str]], str]:
    """The extraction table (kind, members, non-members, difference, each with its 95 % interval) and what
    it measured; none for an audit written before extraction rates were."""
    found = (record.get("checkpoints") or [{}])[0].get("extraction")
    if not found:
        return [], ""

    def rate(where: dict[str, Any], key: str) -> str:
        value, ci = where.get(key), where.get(f"{key}_ci") or (None, None)
        return "-" if value is None else f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"

    sides = ("members", "nonmembers", "difference")
    rows = [[label] + [rate(found, f"{kind}_{side}") for side in sides]
            for kind, label in (("greedy", "greedy decoding"), ("sampled", "top-k sampling"))]  # fmt: skip
    pii = {k: v for k, v in (found.get("pii") or {}).items() if isinstance(v, dict)}
    rows += [[f"PII fields: {kind} ({v['n']})"] + [rate(v, f"reconstructed_{side}") for side in sides]
             for kind, v in pii.items()]  # fmt: skip
    inferred = {
        k: v for k, v in (found.get("pii_inference") or {}).items() if isinstance(v, dict) and "n" in v
    }

    def label(kind: str, v: dict[str, Any]) -> str:  # fields, and the records they cluster in where stated
        records = v.get("records_members", 0) + v.get("records_nonmembers", 0)
        return f"PII inferred: {kind} ({v['n']}" + (f" fields of {records} records)" if records else ")")

    rows += [
        [label(kind, v)] + [rate(v, f"inferred_{side}") for side in sides] for kind, v in inferred.items()
    ]
    about = (
        f"Each record's prompt and first {found['prefix']} target tokens as the prefix, the next {found['suffix']} "
        f"as the suffix. Greedy decoding: it gives the suffix back. Top-k sampling (k {found['topk']}, temperature "
        f"1): at least once in {found['samples']} samples with probability {found['probability']:g}. "
        f"{found['too_short']} record(s) too short to split are not counted."
        + (
            " PII fields: every token of the field ranked first given the text before it (over fields)."
            if pii
            else ""
        )
        + (
            f" PII inferred: the true value of a hidden field scores above {found['pii_inference']['candidates'] - 1}"
            " decoys of its kind (chance 1 / candidates)" + _decoys(found["pii_inference"])
            if inferred
            else ""
        )
    )
    return rows, about


def _decoys(inference: dict[str, Any]) -> str:
    """Where PII inference's decoys came from and its intervals (tasks/leakage/pii.py); an audit written before
    either was stated drew its decoys from every scored record, members' included."""
    interval = inference.get("interval")
    if not interval:
        return ", decoys from every scored record's values, members' included."
    return (
        f", decoys drawn from the {inference['decoys']}, the same pool for members and non-members; its"
        f" rates' intervals: {100 * interval['level']:g} % record-level bootstrap ({interval['resamples']:,}"
        f" resamples of the records, every field of a record together, seed {interval['seed']}), not the"
        " Clopper-Pearson / Newcombe intervals of the other rows."
    )


def render(result: Any) -> str:
    """The report of an :class:`privauditor.AuditResult` as one HTML page (``templates/audit_report.html.j2``,
    on the leaderboard's layout)."""
    from .html import render as render_page

    record, verdict = result.record, result.verdict
    stamp = record.get("versions", {})  # the versions that ran the audit
    written = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    version = " ".join(filter(None, (stamp.get("privauditor", "?"), stamp.get("privauditor_git"))))
    rows = [
        _attack_row(a, m, verdict["attacks"].get(a, {}))
        for a, m in sorted(result.metrics.items())
        if "auc" in m
    ]
    strongest = [
        max(candidates, key=lambda r: r["auc_value"])
        for access in THREAT_MODELS
        if (candidates := [r for r in rows if r["access"] == access])
    ]
    zero = sections.zero_fp(result.metrics)
    finding = {
        "shift": "The two files differ in distribution: no leakage verdict is possible.",
        "reversed": "Members score lower than non-members: files swapped, or a shift. No leakage verdict.",
        "leakage": "Leakage detected: members are told apart from non-members beyond chance.",
        "nothing detected": "No leakage detected at these sizes (not evidence of privacy).",
    }[result.finding]
    roc = Results(CellFolder.at(result.path).out).roc_image(result.cell_id)
    audit = record["audit"]
    model = audit["model"] + (f" + {Path(audit['adapter']).name}" if audit["adapter"] else "")
    model += f" as shipped ({audit['shipped']['form']})" if audit.get("shipped") else ""
    top = max(strongest, key=lambda r: r["auc_value"]) if strongest else None
    return str(
        render_page(
            "audit_report.html.j2",
            title=f"Privacy audit: {model}",
            cell_id=result.cell_id,
            written=written,
            version=version,
            finding=finding,
            colour={"shift": "#d98c00", "reversed": "#d98c00", "leakage": "#c0392b"}.get(
                result.finding, "#2e7d32"
            ),
            conclusion=result.conclusion,
            identities=[list(pair) for pair in _identities(record)],
            configuration=sections.configuration(record, verdict, result.metrics),
            zero=zero,
            strongest=[
                [
                    r["access"],
                    r["attack"],
                    r["auc"],
                    r["tpr_01"],
                    r["tpr_1"],
                    *[r["tpr_0fp"]] * bool(zero),
                    r["p_holm"],
                ]
                for r in strongest
            ],  # fmt: skip
            histograms=sections.histograms(result.path, strongest),
            exposed=(top["attack"], top["auc"], sections.exposed(result.path, top["attack"]))
            if top
            else None,
            attacks=[
                [
                    r["attack"],
                    r["access"],
                    r["auc"],
                    r["tpr_1"],
                    *[r["tpr_0fp"]] * bool(zero),
                    r["p"],
                    r["p_holm"],
                    *([_baseline_auc(verdict["baseline"], r["attack"])] if verdict.get("baseline") else []),
                ]
                for r in rows
            ],  # fmt: skip
            baseline=verdict.get("baseline"),
            roc=roc.read_bytes() if roc.exists() else None,
            control=_control(verdict),
            extraction=_extraction(record),
            warnings=audit["warnings"],
            limits=_limits(record, verdict, [r["attack"] for r in rows]),
            next_steps=_next_steps(record, verdict, result.finding),
            audited=sections.audited(record, result.finding, version, written),
        )
    )


def browser() -> str | None:
    """The headless browser that prints PDFs here, or None."""
    named = os.environ.get("PRIVAUDITOR_BROWSER")
    return shutil.which(named) if named else next(filter(None, map(shutil.which, BROWSERS)), None)


def print_pdf(page: Path, pdf: Path, binary: str) -> Path:
    """Chromium's headless print of ``page`` into ``pdf`` (written to a temporary name, then renamed)."""
    with tempfile.TemporaryDirectory() as profile:
        partial = pdf.with_name(f".{pdf.name}.tmp")
        command = [binary, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                   "--no-pdf-header-footer", f"--print-to-pdf={partial}", page.resolve().as_uri()]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=180)
        if done.returncode != 0 or not partial.exists():
            raise RuntimeError(f"{binary} could not print {page} to PDF: {done.stderr.strip()[-300:]}")
        partial.replace(pdf)
    return pdf


def write_report(result: Any, folder: Path, pdf: bool = True) -> list[Path]:
    """Write ``folder/<audit id>.html`` (and ``.pdf`` when ``pdf`` and a browser is found); the paths."""
    page = folder / f"{result.cell_id}.html"
    write_text(page, render(result))
    written = [page]
    binary = browser() if pdf else None
    if binary:
        written.append(print_pdf(page, page.with_suffix(".pdf"), binary))
    return written


def _shipped_text(shipped: dict[str, Any]) -> str:
    """The shipped form as the report names it (docs/shipping.md)."""
    form = shipped["form"]
    if form == "merged":
        return "merged: the adapter folded into the base's weights"
    if form == "int8":
        return (
            f"int8: {shipped['int8_layers']} linear layers dynamically quantised (the adapter merged first)"
        )
    return (f"{form}: the merged model written to a GGUF file, {shipped['quantised_tensors']} matrices at "
            f"{shipped['quant']} and {len(shipped['float_tensors'])} tensors in float32 ({shipped['bytes']:,} bytes), "
            "read back by transformers' GGUF reader")  # fmt: skip
