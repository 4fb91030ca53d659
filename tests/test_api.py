"""The Python API (``privauditor.audit`` / ``load_results``) and the audit's report (HTML, PDF in Chromium)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import privauditor
import privauditor.tasks.infra.errors
from privauditor.orchestrator.cli import main

#: in every member record: the report must never contain it
CANARY = "zqxcanary"
SECTIONS = ("Verdict", "What was audited", "Configuration", "Strongest attack per threat model",
            "Scores of members and non-members", "Most exposed records", "Every attack", "Controls", "Limits",
            "What to do next", "Sign-off")  # fmt: skip


def records(path, n, seed, canary=""):
    """``n`` JSONL records of random words from one vocabulary (members and non-members alike); a member's
    text, never its id (``m<i>``, which the report may show), ends with the canary."""
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
        json.dumps(
            {"id": f"{'m' if canary else 'n'}{i}", "text": " ".join(rng.choice(words, 12)) + f" {canary}{i}"}
        )
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
    low, high = result.metrics["loss"]["auc_ci"]  # the interval under the leaderboard's column names
    assert (attacks.loc["loss", "auc_ci_low"], attacks.loc["loss", "auc_ci_high"]) == (low, high)
    loss = result.metrics["loss"]  # 20 non-members: no fixed FPR is measured, the TPR at 0 FP is
    assert attacks.loc["loss", "tpr_at_1pct_fpr"] is None and loss["tpr_at_0fp"] is not None
    zero = attacks.loc[
        "loss", ["tpr_at_0fp", "tpr_at_0fp_ci_low", "tpr_at_0fp_ci_high", "tpr_at_0fp_fpr_bound"]
    ]
    assert list(zero) == [loss["tpr_at_0fp"], *loss["tpr_at_0fp_ci"], pytest.approx(1 - 0.05 ** (1 / 20))]
    shown = repr(result)  # one line a notebook can show, never the ROC arrays the metrics hold
    assert result.cell_id in shown and "shift" in shown and "\n" not in shown and len(shown) < 400
    assert repr(loaded_results := privauditor.load_results(tmp / "results" / "my-audit")).startswith(
        "Results("
    )
    assert len(repr(loaded_results)) < 300
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
    assert "k=0.2" in text and "<td>score.bootstrap</td>" in text  # min_k's k; the audit's settings
    assert 'alt="Histograms of the members' in text and "break-after: avoid" in text  # headings kept
    loss = result.metrics["loss"]  # TPR at 0 false positives with its interval, FPR <= 1 - 0.05 ** (1/20)
    assert "TPR at 0 false positives [95 % CI] (FPR ≤ 14 %)" in text
    assert f"{loss['tpr_at_0fp']:.3f} [{loss['tpr_at_0fp_ci'][0]:.3f}, " in text
    strongest = max(("loss", "min_k", "zlib"), key=lambda a: result.metrics[a]["auc"])
    scores = pd.read_parquet(result.path / "scores.parquet")
    members = scores[(scores["attack"] == strongest) & scores["member"]]
    top = members.sort_values("score", ascending=False, kind="stable")["sample_id"].str.removeprefix("m:")
    exposed = text.split('id="exposed"')[1].split("</table>")[0]  # the most exposed members by id, in order
    assert re.findall(r"<tr><td>\d+</td><td>([^<]*)</td>", exposed) == list(top[:10])
    assert "Reviewer</td>" in text and "Decision</td>" in text  # a block to sign
    dom = rendered(page)
    for section in SECTIONS:
        assert f">{section}</h2>" in dom
    assert CANARY not in dom and result.cell_id in dom and "data:image/png;base64," in dom
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


def test_the_report_says_how_the_adapter_was_trained_only_when_it_is_the_adapter_audited(tmp_path):
    """The training of the audited adapter comes from the privauditor cell that wrote it or from peft's
    adapter_config.json, each only while it matches the adapter's sha256 the audit recorded."""
    from privauditor.orchestrator.report.audit_sections import training
    from privauditor.tasks.infra.provenance import directory_hash

    peft = tmp_path / "peft"
    peft.mkdir()
    (peft / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8, "lora_alpha": 16}))
    (peft / "adapter_model.safetensors").write_bytes(b"weights")
    record = {"audit": {"adapter": str(peft)}, "provenance": {"adaptation_hash": directory_hash(peft)},
              "config": {"adaptation": "lora", "adaptation_params": {}}}  # fmt: skip
    rows, about = training(record)
    assert ["r", 8] in rows and "adapter_config.json" in about
    (peft / "adapter_model.safetensors").write_bytes(b"other weights")  # no longer the adapter audited
    assert training(record)[0] == [["technique", "lora"]]

    cell = tmp_path / "cell"
    (cell / "adapter").mkdir(parents=True)
    train = {"epochs": 10, "lr": 0.01, "batch_size": 8, "max_length": 128}
    config = {"adaptation": "full", "adaptation_params": {}, "dataset": "climate", "seed": 0, "train": train,
              "defence": "dp", "defence_params": {"epsilon": 8}}  # fmt: skip
    written = {"cell_id": "c1", "config": config, "n_members": 20,
               "checkpoints": [{"epoch": 5, "adaptation_hash": "a"}, {"epoch": 10, "adaptation_hash": "b"}]}  # fmt: skip
    (cell / "cell.json").write_text(json.dumps(written))
    record = {"audit": {"adapter": str(cell / "adapter")}, "provenance": {"adaptation_hash": "a"},
              "config": {"adaptation": "full", "adaptation_params": {}}}  # fmt: skip
    rows, about = training(record)
    assert ["epochs", "5 of 10"] in rows and ["defence", "dp (epsilon=8)"] in rows and "c1" in about
    record["provenance"]["adaptation_hash"] = "c"  # a checkpoint the cell never wrote
    assert training(record)[0] == [["technique", "full"]]
