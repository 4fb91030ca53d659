"""An audit's inputs are checked before anything is built or loaded: overlap and too few records are
refused in one line, near-duplicates and weak metrics are warned about, and settings an audit does not
read are errors."""

from __future__ import annotations

import json
import math

import pytest

from privauditor.orchestrator.cli import main
from privauditor.tasks.audit.inputs import check_inputs, near_duplicates, perfect_separation_p
from privauditor.tasks.audit.run import audit_config
from privauditor.tasks.datasets import Example
from privauditor.tasks.infra.errors import PrivauditorError

from .test_audit import audit_argv

WORDS = [f"w{k}" for k in range(15)]


def record(i: int, tag: str = "m") -> Example:
    """A distinct sentence per ``i``: no two share a word 5-gram."""
    words = [WORDS[(i * 7 + j * (i % 5 + 1)) % len(WORDS)] + str(i) for j in range(8)]
    return Example(f"{tag}:{i}", "Note: ", " ".join(words))


def write(path, examples):
    path.write_text("".join(json.dumps({"text": e.text}) + "\n" for e in examples))
    return path


def refused(capsys, argv) -> str:
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_identical_and_overlapping_files_are_refused_before_anything_is_built(tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(cache))  # an empty cache: nothing may be pre-trained
    members = write(tmp_path / "m.jsonl", [record(i) for i in range(30)])
    same = write(tmp_path / "same.jsonl", [record(i) for i in range(30)])
    err = refused(capsys, audit_argv("tiny-gpt2", members, same, tmp_path / "out"))
    assert "30 of 30 non-members also appear among the members (30 exactly)" in err
    # the same texts with other spacing and case: counted apart
    shifted = [record(i) for i in range(30, 50)] + [
        Example(f"n:{i}", "NOTE:  ", record(i).target.upper()) for i in range(3)
    ]
    err = refused(
        capsys, audit_argv("tiny-gpt2", members, write(tmp_path / "n.jsonl", shifted), tmp_path / "o")
    )
    assert "3 of 23 non-members" in err and "0 exactly, 3 more after whitespace/case normalisation" in err
    err = refused(capsys, audit_argv("tiny-gpt2", tmp_path / "missing.jsonl", same, tmp_path / "out"))
    assert "no such file" in err and "missing.jsonl" in err
    assert not any(cache.iterdir()) and not (tmp_path / "out").exists()


def test_too_few_to_show_anything_is_refused_by_the_exact_test():
    # scipy's exact Mann-Whitney p of a perfect separation: one arrangement in each tail of C(n + m, n)
    for n, m in [(1, 40), (2, 40), (5, 5), (6, 6), (3, 3), (12, 30)]:
        assert perfect_separation_p(n, m) == pytest.approx(min(1.0, 2 / math.comb(n + m, n)), rel=1e-9)
    assert perfect_separation_p(400, 400) == pytest.approx(2 / math.comb(800, 400), rel=1e-9)
    members = [record(i) for i in range(6)]
    nonmembers = [record(i, "n") for i in range(100, 140)]
    with pytest.raises(
        PrivauditorError, match=r"1 members against 40 non-members cannot show leakage.*p = 0\.0488"
    ):
        check_inputs(members[:1], nonmembers, attacks=7)
    check_inputs(members[:2], nonmembers, attacks=7)  # p = 0.0023 < 0.05 / 7
    with pytest.raises(PrivauditorError, match="5 members against 5 non-members"):
        check_inputs(members[:5], nonmembers[:5], attacks=7)
    check_inputs(members[:6], nonmembers[:6], attacks=7)
    check_inputs(members[:5], nonmembers[:5], attacks=6)  # 0.0079 < 0.05 / 6


def test_near_duplicates_and_weak_metrics_are_warned_about():
    members = [record(i) for i in range(20)]
    nonmembers = [record(i, "n") for i in range(100, 140)]
    assert near_duplicates(members, nonmembers) == 0
    words = members[0].target.split()
    close = Example("n:a", "Note: ", " ".join([*words, "extra"]))  # 4 of its 5 five-grams are the member's
    far = Example("n:b", "Note: ", " ".join([*words[:5], *record(200).target.split()]))  # 1 shared 5-gram
    assert near_duplicates(members, [close, far]) == 1
    warnings = check_inputs(members, [*nonmembers, close, far], attacks=7)
    assert any(w.startswith("1 of 42 non-members are near-duplicates") for w in warnings)
    assert any("TPR at 1 % FPR is weak with 42 non-members" in w and "1,000" in w for w in warnings)
    assert any("TPR at 0.1 % FPR" in w and "10,000" in w for w in warnings)
    many = [record(i, "n") for i in range(1000, 2000)]
    assert [w for w in check_inputs(members, many, attacks=7) if "FPR" in w] == [
        "TPR at 0.1 % FPR is weak with 1,000 non-members (fewer than 10 expected false positives; 10,000 would give 10)"
    ]


def test_settings_an_audit_does_not_read_are_errors(capsys, tmp_path):
    assert audit_config("tiny-gpt2", "m.jsonl", ["attacks=[loss,zlib]", "score.bootstrap=50"]).attacks
    audit_config("tiny-gpt2", "m.jsonl", ["train.max_length=64", "attack_params.min_k.k=0.1", "seed=3"])
    for key in ("train.epochs=3", "split.members=8", "adaptation=lora", "train=3"):
        with pytest.raises(PrivauditorError, match=f"--set {key.split('=')[0]}: an audit does not read it"):
            audit_config("tiny-gpt2", "m.jsonl", [key])
    members = write(tmp_path / "m.jsonl", [record(i) for i in range(8)])
    argv = [*audit_argv("tiny-gpt2", members, members, tmp_path / "out"), "--set", "train.epochs=3"]
    assert "--set train.epochs: an audit does not read it" in refused(capsys, argv)


def test_a_byte_order_mark_is_not_text_in_csv_or_jsonl_and_a_folder_is_named_as_one(tmp_path):
    """Excel and Notepad write UTF-8 with a byte-order mark: a CSV's first column is still ``text`` and a
    JSONL's first record is still read; a folder given as a file is an error that says so."""
    from privauditor.tasks.audit.inputs import read_records

    bom = "\ufeff".encode()
    (tmp_path / "m.csv").write_bytes(bom + b"text\nfirst record\nsecond record\n")
    (tmp_path / "m.jsonl").write_bytes(bom + b'{"text": "first record"}\n{"text": "second record"}\n')
    for name in ("m.csv", "m.jsonl"):
        examples, _ = read_records(str(tmp_path / name), "m")
        assert [e.text for e in examples] == ["first record", "second record"], name
    with pytest.raises(PrivauditorError, match="is a folder"):
        read_records(str(tmp_path), "m")


def test_files_of_different_forms_are_refused_naming_forms_and_counts_unless_rendered_as_text(
    tmp_path, capsys
):
    """Members mixing ``text`` and ``prompt`` + ``target`` records, non-members all ``prompt`` + ``target``:
    refused before anything loads (a base that saw neither file was called leaking on such files);
    ``--render text`` scores every record whole, which ``--dry-run`` shows without scoring or writing."""
    members = tmp_path / "members.jsonl"
    nonmembers = tmp_path / "nonmembers.jsonl"
    pairs = [record(i) for i in range(40)]
    members.write_text("".join(json.dumps({"text": e.text} if i % 2 else {"prompt": e.prompt, "target": e.target})
                               + "\n" for i, e in enumerate(pairs[:20])))  # fmt: skip
    nonmembers.write_text(
        "".join(json.dumps({"prompt": e.prompt, "target": e.target}) + "\n" for e in pairs[20:])
    )
    out = tmp_path / "out"
    err = refused(capsys, audit_argv("tiny-gpt2", members, nonmembers, out))
    assert "different forms (members: 10 prompt + target, 10 text; non-members: 20 prompt + target)" in err
    assert "--render text" in err and not out.exists()
    argv = [
        *audit_argv("tiny-gpt2", members, nonmembers, out),
        "--render",
        "text",
        "--limit",
        "12",
        "--dry-run",
    ]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "records: 12 members, 12 non-members" in shown and "nothing scored, nothing written" in shown
    assert "prompt: ''" in shown and f"target (scored): {pairs[0].text!r}" in shown and not out.exists()
