"""``privauditor audit``: a practitioner's adapted model and their own member / non-member files."""

from __future__ import annotations

import csv
import json

import pyarrow.parquet as pq
import pytest

from privauditor.orchestrator.cli import main
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.spec.config import cell_config

SETTINGS = ["attacks=[loss,reference,min_k_pp]", "score.bootstrap=50"]


def write_files(tmp_path, split_file):
    """The cell's members / non-members, written as a user would: JSONL with prompt + target, and CSV
    (records of one form in both files: files of different forms are refused)."""
    ids = json.loads(split_file.read_text())
    by_id = {e.sample_id: e for e in load_dataset("climate").examples}
    members = tmp_path / "members.jsonl"
    members.write_text(
        "".join(
            json.dumps({"id": i, "prompt": by_id[i].prompt, "target": by_id[i].target}) + "\n"
            for i in ids["members"]
        )
    )
    nonmembers = tmp_path / "nonmembers.csv"
    with nonmembers.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["prompt", "target"])
        writer.writeheader()
        writer.writerows({"prompt": by_id[i].prompt, "target": by_id[i].target} for i in ids["nonmembers"])
    return members, nonmembers


def audit_argv(model, members, nonmembers, out):
    return [
        "audit",
        "--model",
        model,
        "--members",
        str(members),
        "--nonmembers",
        str(nonmembers),
        "--out",
        str(out),
    ]


def test_audit_an_adapter_saved_by_a_cell_and_a_full_checkpoint(tmp_path, capsys):
    config = cell_config(
        {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "climate"},
        ["split={members: 12, nonmembers: 12, validation: 4}", "train.epochs=1", *SETTINGS],
    )
    outcome = run_cell(config, tmp_path / "cells")
    (split_file,) = (tmp_path / "cells" / "shared" / "splits").glob("*.json")
    members, nonmembers = write_files(tmp_path, split_file)
    out = tmp_path / "audit"
    argv = audit_argv("tiny-gpt2", members, nonmembers, out)
    settings = sum((["--set", s] for s in SETTINGS), [])
    pii = ["--pii", "person={person}", "--pii", r"amount=\$([\d,]+)", "--set", "score.pii_candidates=3"]
    assert main([*argv, "--adapter", str(outcome.path / "adapter"), *settings, *pii]) == 0
    printed = capsys.readouterr().out
    (audit_dir,) = (out / "cells").glob("audit__tiny-gpt2__adapter__*")
    # the PII fields it was told to look for, found in the climate records and their reconstruction measured
    found = json.loads((audit_dir / "extraction.json").read_text())["pii"]
    assert found["fields"] > 0 and {"person", "amount"} >= set(found) - {"fields", "all"}
    inferred = json.loads((audit_dir / "extraction.json").read_text())["pii_inference"]  # among 3 candidates
    assert inferred["chance"] == pytest.approx(1 / 3) and inferred["fields"] > 0
    assert main([*argv, "--pii", "account=(unclosed"]) == 2
    assert "PII field 'account': not a regular expression" in capsys.readouterr().err
    metrics = json.loads((audit_dir / "metrics.json").read_text())
    assert set(metrics) == {"loss", "reference", "min_k_pp"} and all("auc" in m for m in metrics.values())
    signals = pq.read_table(audit_dir / "signals.parquet")
    assert signals.num_rows == 24 and sum(signals.column("member").to_pylist()) == 12
    assert "min_k_pp" in printed and (out / "leaderboard.parquet").exists()
    # the members file held the cell's own prompts and targets, scored the same way: same LOSS scores
    cell_scores = pq.read_table(outcome.path / "scores.parquet").to_pylist()
    audit_scores = pq.read_table(audit_dir / "scores.parquet").to_pylist()
    cell_loss = {r["sample_id"]: r["score"] for r in cell_scores if r["attack"] == "loss" and r["member"]}
    audit_loss = {
        r["sample_id"][2:]: r["score"] for r in audit_scores if r["attack"] == "loss" and r["member"]
    }
    assert audit_loss.keys() == cell_loss.keys()
    assert all(abs(audit_loss[k] - cell_loss[k]) < 1e-4 for k in cell_loss)

    # a full checkpoint directory, no reference: the reference attack is skipped with a note
    from privauditor.tasks.models import load_model

    loaded = load_model("tiny-gpt2")
    checkpoint = tmp_path / "full-checkpoint"
    loaded.model.save_pretrained(checkpoint)
    loaded.tokenizer.save_pretrained(checkpoint)
    argv = audit_argv(str(checkpoint), members, nonmembers, out)
    assert main([*argv, *sum((["--set", s] for s in SETTINGS), [])]) == 0
    (full_dir,) = (out / "cells").glob("audit__*full-checkpoint__checkpoint__*")
    metrics = json.loads((full_dir / "metrics.json").read_text())
    assert "skipped" in metrics["reference"] and "auc" in metrics["loss"]
    assert main([*argv, "--set", "attacks=[loss]", "--reference", "tiny-gpt2"]) == 0
    assert (
        main(
            [
                "audit",
                "--model",
                "tiny-gpt2",
                "--members",
                str(tmp_path / "nope.jsonl"),
                "--nonmembers",
                str(nonmembers),
                "--out",
                str(out),
            ]
        )
        == 2
    )
    # audits are not benchmark cells: the board refuses a folder of them in one line, and adds nothing
    capsys.readouterr()
    assert main(["board", "add", str(out), str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds audits of a user's own model (3), not benchmark cells" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "store").exists()


def test_a_bare_hugging_face_id_resolves_from_the_local_hub_cache(tmp_path):
    """``--model gpt2``: a name with no "/" that is no near miss of a registered base is a Hugging Face id,
    read here from a hub cache the test writes (offline), at the dtype asked for."""
    import os
    import subprocess
    import sys

    from privauditor.tasks.models import load_model

    commit = "0" * 40
    snapshot = tmp_path / "hub" / "models--gpt2" / "snapshots" / commit
    loaded = load_model("tiny-gpt2")
    loaded.model.save_pretrained(snapshot)
    loaded.tokenizer.save_pretrained(snapshot)
    (tmp_path / "hub" / "models--gpt2" / "refs").mkdir()
    (tmp_path / "hub" / "models--gpt2" / "refs" / "main").write_text(commit)
    examples = load_dataset("climate").examples
    members, nonmembers = tmp_path / "m.txt", tmp_path / "n.txt"
    members.write_text("".join(e.text.replace("\n", " ") + "\n" for e in examples[:10]))
    nonmembers.write_text("".join(e.text.replace("\n", " ") + "\n" for e in examples[10:20]))
    argv = [*audit_argv("gpt2", members, nonmembers, tmp_path / "out"), "--dtype", "bfloat16"]
    env = os.environ | {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "privauditor.orchestrator.cli", *argv, "--set", "attacks=[loss]"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (audit_dir,) = (tmp_path / "out" / "cells").glob("audit__gpt2__checkpoint__*")
    record = json.loads((audit_dir / "cell.json").read_text())
    assert record["audit"]["model"] == "gpt2" and record["audit"]["dtype"] == "bfloat16"
    assert "auc" in json.loads((audit_dir / "metrics.json").read_text())["loss"]
    signals = pq.read_schema(tmp_path / "out" / record["views"]["loss"]["signals"])
    (scored,) = json.loads(signals.metadata[b"privauditor.view_key"])["models"]
    assert scored["name"] == "gpt2" and scored["weights"] == "revision:main"
    # bf16 weights as loaded, scored under bf16 autocast: the bf16-mixed recipe that --dtype bfloat16 implies
    assert scored["dtype"] == "bf16-mixed" and record["config"]["train"]["precision"] == "bf16-mixed"


def test_an_adapter_hashes_alike_whatever_order_peft_wrote_its_module_sets(tmp_path):
    """peft keeps ``target_modules`` as a set and writes it in the order of the process's string hashing:
    the same adapter saved twice must give one adaptation hash (and one audit id), other changes another."""

    from privauditor.tasks.infra.provenance import directory_hash

    config = {"peft_type": "LORA", "r": 8, "target_modules": ["q_proj", "v_proj", "c_fc"]}
    hashes = []
    for name, modules, r in (("a", ["q_proj", "v_proj", "c_fc"], 8), ("b", ["c_fc", "q_proj", "v_proj"], 8),
                             ("c", ["c_fc", "q_proj", "v_proj"], 4)):  # fmt: skip
        folder = tmp_path / name
        folder.mkdir()
        (folder / "adapter_config.json").write_text(json.dumps(config | {"target_modules": modules, "r": r}))
        (folder / "adapter_model.safetensors").write_bytes(b"weights")
        hashes.append(directory_hash(folder))
    assert hashes[0] == hashes[1] != hashes[2]
