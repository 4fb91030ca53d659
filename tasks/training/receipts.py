"""Loss receipts: how much of each trained record the training loss actually covers.

A record longer than ``train.max_length`` loses the end of its target, and a prompt that fills
``max_length`` (a long chat turn, a chat template's system text) leaves its target no token at all: such a
"member" was never trained on, and an audit that counts it as one measures nothing. A receipt is read off
the very labels the trainer feeds to the loss (:func:`~privauditor.tasks.training.loop.encode`, counted as
:func:`~privauditor.tasks.training.loop.predicted_tokens` counts them for the mean loss), so it cannot disagree
with training. Per split part it counts the records, those with at least one target token in the loss, the
target tokens before truncation and those in the loss.

A trained record with no target token in the loss is an error (there is no setting that excludes such
records: raise ``train.max_length`` or shorten the prompts); so is a record of a part the cell only scores
(non-members, validation, population), which would give an empty score.

Example::

    receipts = receipts_of(tokenizer, {"members": split.members}, max_length=128, seq2seq=False)
    check_covered(receipts, max_length=128, setting="train.max_length")  # raises on an untrained member
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..data.splits import LABELS, PARTS
from ..datasets import Example
from ..infra.errors import PrivauditorError
from .loop import encode, predicted_tokens

#: parts whose records the training loss covers (``canaries``: the included ones)
TRAINED_PARTS = ("members", "known_members", "canaries")
#: how many sample ids an error names
SHOWN_IDS = 3


@dataclass(frozen=True)
class Receipt:
    """One part's coverage by the loss: ``records`` and those with a target token in it
    (``records_in_loss``), the targets' tokens before truncation (``target_tokens``) and in the loss
    (``tokens_in_loss``); ``uncovered``: the sample ids with no token in the loss."""

    records: int
    records_in_loss: int
    target_tokens: int
    tokens_in_loss: int
    uncovered: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """``cell.json``'s entry for the part (the ids stay out: the record names no sample)."""
        fraction = self.tokens_in_loss / self.target_tokens if self.target_tokens else None
        return {
            "records": self.records,
            "records_in_loss": self.records_in_loss,
            "target_tokens": self.target_tokens,
            "tokens_in_loss": self.tokens_in_loss,
            "fraction_in_loss": None if fraction is None else round(fraction, 6),
        }


def first_label_in_loss(model: Any) -> bool:
    """Whether a causal model's loss also predicts the input's first position: peft's prompt tuning and
    P-tuning put virtual tokens in front of the input and -100 in front of the labels, so the last
    virtual token predicts position 0 (peft 0.21 ``PeftModelForCausalLM.forward``, peft_model.py:2161-2167;
    prefix tuning passes key/values instead and leaves the labels alone)."""
    configs = getattr(model, "peft_config", None) or {}
    config = configs.get(getattr(model, "active_adapter", "default"))
    if config is None or not getattr(config, "is_prompt_learning", False):
        return False
    return str(getattr(config.peft_type, "value", config.peft_type)) not in ("PREFIX_TUNING", "CARTRIDGE")


def receipt(
    tokenizer: Any, examples: Sequence[Example], max_length: int, seq2seq: bool, first_label: bool = False
) -> Receipt:
    """The loss's coverage of ``examples`` as the trainer encodes them; ``first_label``: see
    :func:`first_label_in_loss`."""
    if not examples:
        return Receipt(0, 0, 0, 0, ())
    whole = tokenizer([e.target for e in examples], add_special_tokens=False)["input_ids"]
    in_loss = []
    for item in encode(tokenizer, examples, max_length, seq2seq):
        labels = torch.tensor([item["labels"]], dtype=torch.long)
        if first_label and not seq2seq:  # the virtual tokens' -100 labels in front, as peft prepends them
            labels = torch.cat([torch.full((1, 1), -100, dtype=torch.long), labels], dim=1)
        in_loss.append(predicted_tokens(labels, seq2seq))
    return Receipt(
        records=len(examples),
        records_in_loss=sum(1 for n in in_loss if n > 0),
        target_tokens=sum(len(ids) for ids in whole),
        tokens_in_loss=sum(in_loss),
        uncovered=tuple(e.sample_id for e, n in zip(examples, in_loss, strict=True) if n == 0),
    )


def receipts_of(
    tokenizer: Any,
    parts: Mapping[str, Sequence[Example]],
    max_length: int,
    seq2seq: bool,
    first_label: bool = False,
) -> dict[str, Receipt]:
    """A receipt per non-empty part."""
    return {
        part: receipt(tokenizer, examples, max_length, seq2seq, first_label)
        for part, examples in parts.items()
        if examples
    }


def check_covered(
    receipts: Mapping[str, Receipt], max_length: int, setting: str, trained: bool = True
) -> None:
    """A one-line error for the first part with a record that has no target token in the loss (``trained``
    parts: never trained on; the others: nothing to score), naming ``setting`` as the fix."""
    for part, found in receipts.items():
        if not found.uncovered:
            continue
        n, ids = len(found.uncovered), ", ".join(found.uncovered[:SHOWN_IDS])
        more = f" and {n - SHOWN_IDS} more" if n > SHOWN_IDS else ""
        what = "so they were never trained on" if trained else "so they cannot be scored"
        raise PrivauditorError(
            f"{n} of {found.records} {LABELS.get(part, part)} keep no target token within {setting} "
            f"{max_length} (truncation or prompt masking), {what} (ids {ids}{more}): raise {setting} or "
            "shorten their prompts"
        )


def split_receipts(
    split: Any, tokenizer: Any, max_length: int, seq2seq: bool, model: Any, trains: bool
) -> dict[str, Any] | None:
    """Check every part of ``split`` a cell reads (a one-line error for a record left no target token) and
    return ``cell.json``'s ``loss_receipts`` for the trained ones (None when ``trains`` is false: ``none``,
    in-context learning). ``model``: the adapted model the trainer steps (see :func:`first_label_in_loss`)."""
    first = first_label_in_loss(model)
    included = tuple(c.example for c in split.canaries if c.included)
    trained = dict(zip(TRAINED_PARTS, (split.members, split.known_members, included), strict=True))
    trained = receipts_of(tokenizer, trained if trains else {}, max_length, seq2seq, first)
    check_covered(trained, max_length, "train.max_length")
    read = {part: getattr(split, part) for part in PARTS}
    read["canaries"] = tuple(c.example for c in split.canaries)  # exposure scores every canary
    # as scoring reads them: no virtual-token label in front (scoring never reads position 0)
    check_covered(receipts_of(tokenizer, read, max_length, seq2seq), max_length, "train.max_length", False)
    return recorded(trained, max_length) if trains else None


def audit_receipts(
    parts: Mapping[str, Sequence[Example]], tokenizer: Any, max_length: int, seq2seq: bool, model: Any
) -> dict[str, Any]:
    """An audit's files as :func:`split_receipts` checks a cell's split: the members' receipt as the
    audited model's training would have covered them at this ``max_length`` (and chat template, already
    rendered into ``parts``), and every record of either file left something to score."""
    members = receipts_of(
        tokenizer, {"members": parts["members"]}, max_length, seq2seq, first_label_in_loss(model)
    )
    check_covered(members, max_length, "train.max_length")
    check_covered(receipts_of(tokenizer, parts, max_length, seq2seq), max_length, "train.max_length", False)
    return recorded(members, max_length)


def recorded(receipts: Mapping[str, Receipt], max_length: int) -> dict[str, Any]:
    """``cell.json``'s ``loss_receipts``: the max length and each part's counts."""
    return {"max_length": max_length, "parts": {part: r.as_dict() for part, r in receipts.items()}}
