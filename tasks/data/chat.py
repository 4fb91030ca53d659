"""Chat-format records (``messages``: a list of ``{"role", "content"}``, the usual format of instruction
and LoRA training data) as examples an audit scores.

By default the conversation's **last assistant turn** is the scored target and everything before it the
prompt (``scored="assistant"``): what supervised fine-tuning trains on, for the single-turn records most
such data hold; earlier assistant turns of a longer conversation stay in the prompt, unscored. With
``scored="all"`` the whole rendered conversation is the target. Rendering uses the tokenizer's chat
template when it has one (the prompt with the generation prompt appended, the target what the full
conversation adds to it, end-of-turn tokens included), else plain ``role: content`` lines, as the
dataset loader renders chat records. Before a tokenizer is at hand (the input checks) records are
rendered plainly; :func:`render` re-renders them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..datasets import Example
from ..datasets._base import chat_fields, plain_turns
from ..infra.errors import PrivauditorError

SCORED = ("assistant", "all")

Messages = tuple[tuple[str, str], ...]


def is_chat(rows: Sequence[tuple[str, Any]]) -> bool:
    return any(isinstance(row, Mapping) and "messages" in row for _, row in rows)


def messages_of(row: Any, where: str) -> Messages:
    """A row's messages as (role, content) pairs, with at least one assistant turn; else a one-line error."""
    try:
        chat_fields(row.get("messages") if isinstance(row, Mapping) else None)
    except ValueError as error:
        raise PrivauditorError(f"{where}: {error}") from None
    return tuple((m["role"], m["content"]) for m in row["messages"])


def render(sample_id: str, messages: Messages, tokenizer: Any = None, scored: str = "assistant") -> Example:
    """One conversation as (prompt, target); see the module doc."""
    if scored not in SCORED:
        raise PrivauditorError(f"chat records: scored must be one of {', '.join(SCORED)}, not {scored!r}")
    last = max(i for i, (role, _) in enumerate(messages) if role == "assistant")
    as_dicts = [{"role": role, "content": content} for role, content in messages]
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        whole = tokenizer.apply_chat_template(as_dicts[: last + 1], tokenize=False)
        if scored == "all":
            return Example(sample_id, "", whole)
        prompt = tokenizer.apply_chat_template(as_dicts[:last], tokenize=False, add_generation_prompt=True)
        if whole.startswith(prompt):
            return Example(sample_id, prompt, whole[len(prompt) :])
        return Example(sample_id, prompt, messages[last][1])  # a template that rewrites earlier turns
    if scored == "all":
        return Example(sample_id, "", plain_turns(messages[: last + 1]))
    plain = chat_fields(as_dicts)  # as the dataset loader renders a chat record
    return Example(sample_id, plain["prompt"], plain["target"])


def template_of(tokenizer: Any) -> str:
    return (
        "the tokenizer's chat template" if getattr(tokenizer, "chat_template", None) else "plain role: text"
    )
