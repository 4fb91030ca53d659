"""The bad-input catalogue: each bad input is one line on stderr naming the problem, exit 2, results untouched.

Every case runs the real command line against a results folder that already holds a finished cell;
the folder's bytes must be the same afterwards. A bad record is named by its line or id, never quoted
(the canary planted in every bad file must not appear in the message).
"""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from privauditor.orchestrator.cli import main

CANARY = "CANARY-7f3a-private-record"
CELL = ["cell", "--model", "tiny-gpt2", "--adaptation", "none", "--dataset", "finance"]


def write(path, data: bytes | str):
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def sweep_file(tmp, **changes):
    data = {"name": "bad", "matrix": {"model": ["tiny-gpt2"], "adaptation": ["none"], "dataset": ["finance"]}}
    return write(tmp / "sweep.yaml", yaml.safe_dump(data | changes))


def records(tmp, n, name="few.jsonl", word="record"):
    return write(tmp / name, "".join(json.dumps({"text": f"{word} {i} {CANARY}"}) + "\n" for i in range(n)))


@pytest.fixture(scope="module")
def gpt2_adapter(tmp_path_factory):
    """A LoRA adapter saved for tiny-gpt2, as a cell saves it."""
    from privauditor.tasks.adaptations import build_adaptation
    from privauditor.tasks.models import load_model
    from privauditor.tasks.training import apply_seeded

    loaded = load_model("tiny-gpt2")
    technique = build_adaptation("lora")
    path = tmp_path_factory.mktemp("adapter") / "adapter"
    technique.save(apply_seeded(technique, loaded.model, loaded.family, seed=0), path)
    return path


def corrupted(tmp, adapter):
    import shutil

    copy = tmp / "corrupted"
    shutil.copytree(adapter, copy)
    weights = next(copy.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100] + b"\x00garbage")
    return str(copy)


def audit(tmp, model, adapter):
    return ["audit", "--model", model, "--adapter", str(adapter), "--members", records(tmp, 12, "m.jsonl"),
            "--nonmembers", records(tmp, 12, "n.jsonl", "other")]  # fmt: skip


# (case, argv builder (tmp, out, adapter) -> argv, fragment of the one-line error)
CASES = [
    ("malformed YAML", lambda t, o, a: ["validate", write(t / "s.yaml", "matrix: [tiny-gpt2\n")], "not valid YAML"),
    ("key given twice", lambda t, o, a: ["validate", write(t / "s.yaml", "seeds: [0]\nseeds: [1]\n")],
     "line 2: not valid YAML (key 'seeds' is given twice)"),
    ("unknown key", lambda t, o, a: ["validate", sweep_file(t, epochz=3)], "unknown sweep key 'epochz'"),
    ("unknown model", lambda t, o, a: CELL[:2] + ["tiny-lama"] + CELL[3:] + ["--out", o], "did you mean 'tiny-llama'"),
    ("unknown adaptation", lambda t, o, a: CELL[:4] + ["lorra"] + CELL[5:] + ["--out", o], "did you mean 'lora'"),
    ("unknown attack", lambda t, o, a: CELL + ["--out", o, "--set", "attacks=[loss,min_kk]"], "did you mean 'min_k'"),
    ("unknown dataset", lambda t, o, a: CELL[:6] + ["financ", "--out", o], "did you mean 'finance'"),
    ("unsupported pair", lambda t, o, a: CELL[:4] + ["llama_adapter"] + CELL[5:] + ["--out", o], "supports only the llama"),
    ("negative size", lambda t, o, a: CELL + ["--out", o, "--set", "split.members=-5"], "split.members"),
    ("zero size", lambda t, o, a: CELL + ["--out", o, "--set", "train.batch_size=0"], "train.batch_size"),
    ("more members than records", lambda t, o, a: CELL[:6] + [records(t, 10), "--out", o], "has 10"),
    ("empty dataset file", lambda t, o, a: CELL[:6] + [write(t / "e.jsonl", b""), "--out", o], "is empty"),
    ("non-UTF-8 file", lambda t, o, a: CELL[:6] + [write(t / "b.txt", b"\xff\xfe" + CANARY.encode() + b"\n"), "--out", o], "not valid UTF-8 (line 1)"),
    ("records missing a field", lambda t, o, a: CELL[:6] + [write(t / "p.jsonl", json.dumps({"prompt": CANARY}) + "\n"), "--out", o], "missing field"),
    ("texts longer than the context", lambda t, o, a: CELL + ["--out", o, "--set", "train.max_length=5000"], "context"),
    ("audit longer than the context", lambda t, o, a: audit(t, "tiny-gpt2", a) + ["--out", o, "--set", "train.max_length=5000"], "exceeds tiny-gpt2's context"),
    ("missing adapter directory", lambda t, o, a: audit(t, "tiny-gpt2", t / "nowhere") + ["--out", o], "nowhere"),
    ("adapter for another base", lambda t, o, a: audit(t, "tiny-llama", a) + ["--out", o], "base"),
    ("corrupted safetensors", lambda t, o, a: audit(t, "tiny-gpt2", corrupted(t, a)) + ["--out", o], "safetensors"),
    ("output dir is a file", lambda t, o, a: CELL + ["--out", write(t / "file.out", "x")], "file.out"),
    ("incompatible results dir", lambda t, o, a: CELL + ["--out", str(old_results(t))], "results format 0"),
    ("malformed --set", lambda t, o, a: CELL + ["--out", o, "--set", "split.members"], "expects key=value"),
    ("seeds not integers", lambda t, o, a: ["validate", sweep_file(t, seeds=["one"])], "seeds"),
]  # fmt: skip


def old_results(tmp):
    folder = tmp / "old"
    folder.mkdir()
    write(folder / "privauditor.json", json.dumps({"results_format": 0}))
    return folder


def fingerprint(folder):
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def built():
    """What the cases legitimately build before their error (the bases they load, the neighbourhood
    attack's masked LM), built first: a pre-training progress bar on stderr is not part of an error."""
    from privauditor.tasks.models import checkpoint_path, masked_lm_identity

    for model in ("tiny-gpt2", "tiny-llama"):
        checkpoint_path(model)
    masked_lm_identity(build=True)


def test_a_wrong_dataset_fails_before_anything_is_built(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(tmp_path / "cache"))
    assert main(CELL[:6] + ["financ", "--out", str(tmp_path / "out")]) == 2
    assert "did you mean 'finance'" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.safetensors"))


@pytest.fixture(scope="module")
def finished_once(tmp_path_factory, built):
    out = tmp_path_factory.mktemp("finished") / "results"
    argv = CELL + ["--out", str(out), "--set", "split.members=8", "--set", "split.nonmembers=8",
                   "--set", "split.validation=4", "--set", "attacks=[loss,zlib]"]  # fmt: skip
    assert main(argv) == 0
    return out


@pytest.mark.parametrize("case, argv, fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_results_untouched(case, argv, fragment, tmp_path, finished_once,
                                                             gpt2_adapter, capsys):  # fmt: skip
    before = fingerprint(finished_once)
    capsys.readouterr()
    assert main(argv(tmp_path, str(finished_once), gpt2_adapter)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("privauditor: error: "), err
    assert fragment in err and CANARY not in err and "Traceback" not in err, err
    assert fingerprint(finished_once) == before


def test_a_reader_that_leaves_early_gets_no_traceback():
    """``privauditor ls attacks | head -1``: stdout's reader is gone before anything is written."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # every write to the pipe now fails: EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "privauditor.orchestrator.cli", "ls", "attacks"],
            stdout=write, stderr=subprocess.PIPE, timeout=120, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == b"", done.stderr.decode()[-300:]
