"""W&B mirroring: offline without an API key, aggregates only, a history step per checkpoint, off when
disabled."""

from __future__ import annotations

import struct

from privauditor.orchestrator.sweepfile.sweep import WandbSettings
from privauditor.orchestrator.tracking import log_cell, log_leaderboard

RECORD = {"cell_id": "tiny-gpt2__lora__climate__s0__0123abcd", "config": {"model": "tiny-gpt2", "train": {"lr": 0.003}},
          "utility_loss": 6.1, "trainable_params": 8192}  # fmt: skip


def metrics(auc):
    return {"loss": {"auc": auc, "auc_ci": [auc - 0.06, auc + 0.06], "tpr_at_1pct_fpr": 0.02, "tpr_at_0.1pct_fpr": None,
                     "roc": [[0.0, 0.0], [1.0, 1.0]], "n_members": 100, "n_nonmembers": 100}}  # fmt: skip


AUDITED = [
    ({"epoch": 1, "step": 8, "best": False, "utility_loss": 6.4}, metrics(0.55)),
    ({"epoch": 4, "step": 32, "best": True, "utility_loss": 6.1}, metrics(0.61)),
]


def records(path):
    """The records of a ``.wandb`` file: a LevelDB-style log (7-byte header, 32 KiB blocks, each chunk a
    4-byte checksum, 2-byte length and 1-byte type: 1 whole, 2 first, 3 middle, 4 last) of protobufs."""
    from wandb.proto.wandb_internal_pb2 import Record

    data, block, found, pending, offset = path.read_bytes(), 32768, [], b"", 7
    while offset + 7 <= len(data):
        room = block - offset % block
        if room < 7:  # a block's tail too short for a chunk header is padding
            offset += room
            continue
        length, kind = struct.unpack("<HB", data[offset + 4 : offset + 7])
        pending += data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind in (1, 4):
            record = Record()
            record.ParseFromString(pending)
            found.append(record)
            pending = b""
        elif kind == 0:
            break
    return found


def test_offline_runs_need_no_key_hold_a_step_per_checkpoint_and_no_text(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    settings = WandbSettings(mode="offline", project="privauditor-test")
    log_cell(settings, "tiny", tmp_path, RECORD, AUDITED)
    log_leaderboard(
        settings, "tiny", tmp_path, [{"cell_id": RECORD["cell_id"], "attack": "loss", "auc": 0.61}]
    )
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2
    blobs = b"".join(p.read_bytes() for run in runs for p in run.rglob("*") if p.is_file())
    assert RECORD["cell_id"].encode() in blobs and b"loss/auc" in blobs
    history = [
        {item.key or "/".join(item.nested_key): item.value_json for item in r.history.item}
        for run in runs
        for r in records(next(run.glob("*.wandb")))
        if r.WhichOneof("record_type") == "history"
    ]
    steps = [(h["epoch"], h["utility_loss"], h["loss/auc"]) for h in history if "epoch" in h]
    assert steps == [("1", "6.4", "0.55"), ("4", "6.1", "0.61")]


def test_disabled_logs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    log_cell(WandbSettings(mode="offline"), "tiny", tmp_path, RECORD, AUDITED)
    assert not (tmp_path / "wandb").exists()
