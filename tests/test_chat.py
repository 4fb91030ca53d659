"""Chat-format records (``messages``) in an audit: rendered with the model's chat template, the last
assistant turn scored unless asked otherwise, malformed conversations and unreadable columns refused."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from privauditor.orchestrator.cli import main
from privauditor.tasks.audit.inputs import read_records
from privauditor.tasks.data.chat import render
from privauditor.tasks.infra.errors import PrivauditorError

from .test_audit import audit_argv

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def conversation(i: int, side: str) -> dict:
    return {
        "messages": [
            {"role": "system", "content": "You answer questions about climate policy."},
            {"role": "user", "content": f"What did {side} report {i} say about emissions in region {i % 7}?"},
            {
                "role": "assistant",
                "content": f"{side.title()} report {i} found emissions fell {i % 9 + 1} percent.",
            },
        ]
    }


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class Templated:
    """The two things :func:`render` asks of a tokenizer, with a template in the usual Jinja form."""

    chat_template = TEMPLATE

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        from jinja2 import Template

        return Template(TEMPLATE).render(messages=messages, add_generation_prompt=add_generation_prompt)


def test_rendering_scores_the_last_assistant_turn_with_the_template_or_plainly():
    messages = (
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "Hello"),
        ("user", "Bye"),
        ("assistant", "Ciao"),
    )
    example = render("m:1", messages, Templated())
    assert (
        example.prompt
        == "<|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>Hello<|end|><|user|>Bye<|end|><|assistant|>"
    )
    assert example.target == "Ciao<|end|>"  # the end-of-turn token is trained on, so it is scored
    assert render("m:1", messages, Templated(), "all").prompt == ""
    assert render("m:1", messages, Templated(), "all").target == example.prompt + example.target
    plain = render("m:1", messages)
    assert plain.prompt == "system: Be brief.\nuser: Hi\nassistant: Hello\nuser: Bye\nassistant: "
    assert plain.target == "Ciao\n"


def test_malformed_conversations_and_unreadable_columns_are_one_line_errors(tmp_path):
    bad = write(tmp_path / "bad.jsonl", [conversation(0, "a"), {"messages": [{"role": "user"}]}])
    with pytest.raises(
        PrivauditorError, match=r"bad.jsonl line 2: 'messages' must be a list of \{role, content\}"
    ):
        read_records(str(bad), "m")
    silent = write(tmp_path / "silent.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(PrivauditorError, match="line 1: a conversation with no assistant turn"):
        read_records(str(silent), "m")
    other = write(tmp_path / "other.jsonl", [{"body": "x", "label": 1}])
    with pytest.raises(PrivauditorError, match=r"'text' column.*'messages'.*columns found: body, label"):
        read_records(str(other), "m")


def test_a_chat_file_audits_with_the_models_template(tmp_path, capsys):
    from privauditor.tasks.models import load_model

    loaded = load_model("tiny-gpt2")
    checkpoint = tmp_path / "chat-model"
    loaded.model.save_pretrained(checkpoint)
    loaded.tokenizer.chat_template = TEMPLATE
    loaded.tokenizer.save_pretrained(checkpoint)
    members = write(tmp_path / "m.jsonl", [conversation(i, "member") for i in range(12)])
    nonmembers = write(tmp_path / "n.jsonl", [conversation(i, "outside") for i in range(12)])
    out = tmp_path / "out"
    argv = [*audit_argv(str(checkpoint), members, nonmembers, out), "--set", "attacks=[loss]"]
    assert main(argv) == 0 and main([*argv, "--chat-scored", "all"]) == 0
    records = {}
    for audit_dir in (out / "cells").glob("audit__*"):
        chat = json.loads((audit_dir / "cell.json").read_text())["audit"]["chat"]
        assert chat["template"] == "the tokenizer's chat template"
        scores = pq.read_table(audit_dir / "scores.parquet").to_pylist()
        assert len(scores) == 24 and sum(r["member"] for r in scores) == 12
        records[chat["scored"]] = {r["sample_id"]: r["score"] for r in scores}
    assert set(records) == {"assistant", "all"}  # two audits, two ids
    assert records["assistant"].keys() == records["all"].keys()
    assert all(records["assistant"][k] != records["all"][k] for k in records["all"])  # other tokens scored
