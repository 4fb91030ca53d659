"""Loss receipts: how much of every trained record the training loss covers, recorded in ``cell.json``,
and a member the loss never reaches as a one-line error (cells and audits)."""

from __future__ import annotations

import json

import pytest

from privauditor.orchestrator.cli import main
from privauditor.tasks.adaptations import build_adaptation
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.datasets import Example
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.training.receipts import first_label_in_loss, receipt

from .helpers import fresh_base

SMALL = ["split={members: 4, nonmembers: 4, validation: 2}", "train.epochs=1", "attacks=[loss]"]
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa"


def write_records(path, prompt, targets):
    path.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "prompt": prompt, "target": t}) + "\n" for i, t in enumerate(targets)
        )
    )
    return path


def ids_of(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_receipt_counts_what_truncation_leaves_of_each_target():
    """Three records at a max length that cuts the third target halfway: exact token counts."""
    _, tokenizer, _ = fresh_base("llama")
    prompt = "Answer.\n"
    targets = ["Fee 12.", "Loan to Jane Roe.", " ".join(WORDS.split()[:12])]
    prefix = 1 + len(ids_of(tokenizer, prompt))  # <s> prompt
    lengths = [len(ids_of(tokenizer, t)) for t in targets]
    assert lengths[2] >= 2 * max(lengths[:2])  # the long one is cut, the short ones are not
    half = lengths[2] // 2
    examples = [Example(f"x{i}", prompt, t) for i, t in enumerate(targets)]
    found = receipt(tokenizer, examples, prefix + half, seq2seq=False)
    assert (found.records, found.records_in_loss, found.uncovered) == (3, 3, ())
    assert found.target_tokens == sum(lengths)
    assert found.tokens_in_loss == lengths[0] + lengths[1] + half
    assert found.as_dict()["fraction_in_loss"] == pytest.approx(found.tokens_in_loss / sum(lengths), abs=1e-6)
    # a max length the prompt fills leaves nothing of any target: each record is named
    cut = receipt(tokenizer, examples, prefix, seq2seq=False)
    assert (cut.records_in_loss, cut.tokens_in_loss, cut.uncovered) == (0, 0, ("x0", "x1", "x2"))
    # T5: the target is the decoder's labels, cut at max_length alone
    _, t5_tokenizer, _ = fresh_base("t5")
    t5 = receipt(t5_tokenizer, examples, 3, seq2seq=True)
    assert t5.tokens_in_loss == sum(min(3, len(ids_of(t5_tokenizer, t))) for t in targets)


def test_prompt_tuning_puts_the_first_position_in_the_loss_and_prefix_tuning_does_not():
    """peft prepends -100 labels for prompt tuning's virtual tokens, so the last one predicts position 0."""
    found = {}
    for name in ("prompt", "prefix", "lora"):
        family, _, base = fresh_base("llama")
        found[name] = first_label_in_loss(build_adaptation(name).apply(base, family))
    assert found == {"prompt": True, "prefix": False, "lora": False}
    _, tokenizer, _ = fresh_base("llama")
    tokenizer.bos_token = None  # no <s>, no prompt: the first target token has no prefix to be predicted from
    one = [Example("x", "", "Fee 12.")]
    n = len(ids_of(tokenizer, "Fee 12."))
    assert receipt(tokenizer, one, 64, False).tokens_in_loss == n - 1
    assert receipt(tokenizer, one, 64, False, first_label=True).tokens_in_loss == n


def test_a_member_whose_target_is_cut_to_nothing_fails_the_cell_in_one_line(tmp_path):
    """The acceptance test: prompts longer than train.max_length leave no target token to train on."""
    data = write_records(
        tmp_path / "long.jsonl", f"Read this: {WORDS} {WORDS}.\n", [f"Fee {i}." for i in range(12)]
    )
    config = cell_config(
        {"model": "tiny-llama", "adaptation": "lora", "dataset": str(data)}, [*SMALL, "train.max_length=16"]
    )
    with pytest.raises(
        PrivauditorError, match=r"4 of 4 members keep no target token within train.max_length 16"
    ) as error:
        run_cell(config, tmp_path / "out")
    message = str(error.value)
    assert "\n" not in message and "never trained on" in message and "raise train.max_length" in message
    assert not list((tmp_path / "out" / "cells").glob("*/DONE"))


def test_cell_json_records_the_members_loss_receipt(tmp_path):
    """Short and long targets at a max length that cuts the long ones: cell.json's counts equal the
    tokenizer's, counted here without the trainer's code; a cell that trains nothing has no receipt."""
    targets = [f"Fee {i}." if i % 2 else f"{WORDS} {i}" for i in range(12)]
    data = write_records(tmp_path / "mixed.jsonl", "Answer.\n", targets)
    settings = {"model": "tiny-llama", "adaptation": "lora", "dataset": str(data)}
    outcome = run_cell(cell_config(settings, [*SMALL, "train.max_length=12"]), tmp_path / "out")
    record = json.loads((outcome.path / "cell.json").read_text())
    (split_file,) = (tmp_path / "out" / "shared" / "splits").glob("*.json")
    members = [int(i[1:]) for i in json.loads(split_file.read_text())["members"]]
    _, tokenizer, _ = fresh_base("llama")
    room = 12 - 1 - len(ids_of(tokenizer, "Answer.\n"))
    lengths = [len(ids_of(tokenizer, targets[i])) for i in members]
    expected = {
        "records": 4,
        "records_in_loss": 4,
        "target_tokens": sum(lengths),
        "tokens_in_loss": sum(min(n, room) for n in lengths),
    }
    receipts = record["loss_receipts"]
    assert receipts["max_length"] == 12 and set(receipts["parts"]) == {"members"}
    assert {k: receipts["parts"]["members"][k] for k in expected} == expected
    assert 0 < receipts["parts"]["members"]["fraction_in_loss"] <= 1
    untrained = run_cell(cell_config(settings | {"adaptation": "none"}, SMALL), tmp_path / "out")
    assert json.loads((untrained.path / "cell.json").read_text())["loss_receipts"] is None


def test_an_audit_receipts_its_members_and_refuses_one_the_loss_never_reaches(tmp_path, capsys):
    from privauditor.orchestrator.report.audit_report import _identities

    words = WORDS.split()
    targets = [f"Record {i}: {' '.join(words[i:] + words[:i])}." for i in range(16)]
    members = write_records(tmp_path / "members.jsonl", "Answer.\n", targets[:8])
    nonmembers = write_records(tmp_path / "nonmembers.jsonl", "Answer.\n", targets[8:])
    argv = ["audit", "--model", "tiny-gpt2", "--members", str(members), "--nonmembers", str(nonmembers),
            "--set", "attacks=[loss]", "--set", "train.max_length=16"]  # fmt: skip
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    (audit_dir,) = (tmp_path / "a" / "cells").iterdir()
    record = json.loads((audit_dir / "cell.json").read_text())
    _, tokenizer, _ = fresh_base("gpt2")
    room = 16 - len(ids_of(tokenizer, "Answer.\n")) - (tokenizer.bos_token_id is not None)
    lengths = [len(ids_of(tokenizer, t)) for t in targets[:8]]
    found = record["loss_receipts"]["parts"]["members"]
    assert (found["records_in_loss"], found["target_tokens"]) == (8, sum(lengths))
    assert found["tokens_in_loss"] == sum(min(n, room) for n in lengths) < sum(lengths)
    (line,) = [text for name, text in _identities(record) if name == "members in the loss"]
    assert line.startswith("at max length 16: 8 of 8 records keep a target token")
    # a prompt that fills the max length: exit 2, one line, nothing written
    long = write_records(tmp_path / "long.jsonl", f"Read: {WORDS} {WORDS}.\n", targets[:8])
    capsys.readouterr()
    argv[4] = str(long)
    assert main([*argv, "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert "8 of 8 members keep no target token within train.max_length 16" in err and "\n" not in err
    assert not list((tmp_path / "b" / "cells").glob("*/DONE"))
