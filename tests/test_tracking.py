"""W&B mirroring: offline without an API key, aggregates only, off when disabled."""

from __future__ import annotations

from privauditor.orchestrator.sweep import WandbSettings
from privauditor.orchestrator.tracking import log_cell, log_leaderboard

RECORD = {"cell_id": "tiny-gpt2__lora__climate__s0__0123abcd", "config": {"model": "tiny-gpt2", "train": {"lr": 0.003}},
          "utility_loss": 6.1, "trainable_params": 8192}  # fmt: skip
METRICS = {"loss": {"auc": 0.61, "auc_ci": [0.55, 0.67], "tpr_at_1pct_fpr": 0.02, "tpr_at_0.1pct_fpr": None,
                    "roc": [[0.0, 0.0], [1.0, 1.0]], "n_members": 100, "n_nonmembers": 100}}  # fmt: skip


def test_offline_runs_need_no_key_and_hold_no_text(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    settings = WandbSettings(mode="offline", project="privauditor-test")
    log_cell(settings, "tiny", tmp_path, RECORD, METRICS)
    log_leaderboard(
        settings, "tiny", tmp_path, [{"cell_id": RECORD["cell_id"], "attack": "loss", "auc": 0.61}]
    )
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2
    blobs = b"".join(p.read_bytes() for run in runs for p in run.rglob("*") if p.is_file())
    assert RECORD["cell_id"].encode() in blobs and b"loss/auc" in blobs


def test_disabled_logs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    log_cell(WandbSettings(mode="offline"), "tiny", tmp_path, RECORD, METRICS)
    assert not (tmp_path / "wandb").exists()
