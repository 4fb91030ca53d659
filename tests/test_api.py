"""The Python API (``privauditor.audit`` / ``load_results``) and the audit's report (HTML, PDF in Chromium)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import privauditor
import privauditor.tasks.infra.errors
from privauditor.orchestrator.cli import main

#: in every member record: the report must never contain it
CANARY = "zqxcanary"
SECTIONS = ("Verdict", "What was audited", "Strongest attack per threat model", "Every attack", "Controls",
            "Limits", "What to do next")  # fmt: skip


def records(path, n, seed, canary=""):
    """``n`` JSONL records of random words from one vocabulary (members and non-members alike)."""
    words = [
        "ledger",
        "invoice",
        "account",
        "transfer",
        "branch",
        "balance",
        "audit",
        "credit",
        "payment",
        "quarter",
    ]
    rng = np.random.default_rng(seed)
    lines = [
        json.dumps({"id": f"{canary or 'n'}{i}", "text": " ".join(rng.choice(words, 12)) + f" {canary}{i}"})
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def doc_example() -> str:
    """The Python example of docs/audit.md, as a user would copy it."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "audit.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """docs/audit.md's example, run where its two files are."""
    tmp = tmp_path_factory.mktemp("api")
    records(tmp / "members.jsonl", 20, 0, CANARY)
    records(tmp / "nonmembers.jsonl", 20, 1)
    here = os.getcwd()
    os.chdir(tmp)
    try:
        found: dict = {}
        exec(doc_example(), found)
    finally:
        os.chdir(here)
    return tmp, found


def test_audit_returns_a_typed_result_that_load_results_reads_back(audited):
    tmp, found = audited
    result = found["result"]
    assert result.cell_id.startswith("audit__tiny-gpt2__") and not result.skipped
    assert result.finding == "shift"  # the canary token is in members only: the blind control sees it
    table = result.to_pandas()
    assert sorted(table["attack"]) == ["blind", "loss", "min_k", "zlib"]
    attacks = table.set_index("attack")
    assert (
        attacks.loc[["loss", "zlib", "min_k"], "p_holm"] >= attacks.loc[["loss", "zlib", "min_k"], "p"]
    ).all()
    assert np.isnan(attacks.loc["blind", "p_holm"])  # a control is not in the verdict's family
    assert attacks.loc["loss", "auc"] == pytest.approx(result.metrics["loss"]["auc"])
    assert result.verdict["nonmembers_from"] == "held-out"

    loaded = privauditor.load_results(tmp / "results" / "my-audit")
    assert loaded == found["results"]
    (again,) = loaded.audits
    assert (again.record, again.metrics, again.verdict) == (result.record, result.metrics, result.verdict)
    rows = loaded.to_pandas()
    assert set(rows["cell_id"]) == {result.cell_id} and set(rows["attack"]) == set(table["attack"])
    assert result.record["audit"]["files"]["members"]["records"] == 20


def test_the_cli_calls_the_api_and_writes_a_report_without_member_text(audited, capsys, rendered):
    """The CLI finds the API's audit done; its --report page names files by hash, never by their text,
    and renders in Chromium with every section (a missing browser fails under CI=true)."""
    tmp, found = audited
    result = found["result"]
    out = tmp / "results" / "my-audit"
    argv = ["audit", "--model", "tiny-gpt2", "--members", str(tmp / "members.jsonl"), "--nonmembers",
            str(tmp / "nonmembers.jsonl"), "--out", str(out), "--nonmembers-from", "held-out",
            "--set", "attacks=[loss,zlib,min_k,blind]", "--report"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert (
        f"audit {result.cell_id} already done" in printed and f"verdict: {result.finding.upper()}" in printed
    )
    assert "<title>privauditor audits</title>" in (out / "leaderboard.html").read_text()
    page = out / "reports" / f"{result.cell_id}.html"
    text = page.read_text()
    assert CANARY not in text and "ledger" not in text  # neither the canary nor any record's words
    assert result.record["audit"]["files"]["members"]["sha256"] in text
    dom = rendered(page)
    for section in SECTIONS:
        assert f">{section}</h2>" in dom
    assert CANARY not in dom and result.cell_id in dom
    pdf = page.with_suffix(".pdf")
    assert pdf.read_bytes().startswith(b"%PDF") and f"report: {pdf}" in printed


def test_a_named_column_of_csv_and_parquet_files_is_audited(tmp_path):
    """Records in a column of the user's naming (CSV members, Parquet non-members); a column that is not
    there is a one-line error naming the columns found, before any model is loaded."""
    import pandas as pd

    rng = np.random.default_rng(2)
    words = ["ledger", "invoice", "account", "transfer", "branch", "balance", "credit", "payment"]
    texts = [" ".join(rng.choice(words, 10)) for _ in range(32)]
    pd.DataFrame({"ticket": range(16), "body": texts[:16]}).to_csv(tmp_path / "m.csv", index=False)
    pd.DataFrame({"ticket": range(16), "body": texts[16:]}).to_parquet(tmp_path / "n.parquet")
    with pytest.raises(
        privauditor.tasks.infra.errors.PrivauditorError, match=r"no column 'text'.*body, ticket"
    ):
        privauditor.audit("tiny-gpt2", tmp_path / "m.csv", tmp_path / "n.parquet", tmp_path / "out",
                          text_column="text")  # fmt: skip
    result = privauditor.audit(
        "tiny-gpt2", tmp_path / "m.csv", tmp_path / "n.parquet", tmp_path / "out", text_column="body",
        settings=["attacks=[loss]", "score.bootstrap=20"],
    )  # fmt: skip
    assert (result.record["n_members"], result.record["n_nonmembers"]) == (16, 16)
    assert result.metrics["loss"]["n_members"] == 16
