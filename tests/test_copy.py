"""Copying from context: the measurement (copy gain), the copy curriculum and the repeated-span windows
that teach it, and the copy test of every tiny base."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from privauditor.tasks.models._pretrain import copy_gain, induction_windows, with_repeats
from privauditor.tasks.models._spec import FAMILIES, Induction

VOCAB, LENGTH = 50, 8


class Copier(torch.nn.Module):
    """A causal 'model' that predicts the token LENGTH + 1 positions back (a perfect copier of the span
    ``<s> A A``), or nothing in particular with ``copies=False``."""

    def __init__(self, copies: bool = True) -> None:
        super().__init__()
        self.copies = copies

    def forward(self, input_ids):
        logits = torch.zeros(*input_ids.shape, VOCAB)
        if self.copies:
            for t in range(LENGTH, input_ids.shape[1] - 1):
                logits[0, t, input_ids[0, t + 1 - LENGTH]] = 20.0
        return SimpleNamespace(logits=logits)


class Tokenizer:
    bos_token_id = 0

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[1 + (ord(c) % (VOCAB - 1)) for c in text] for text in texts]}


def test_copy_gain_is_the_nll_drop_at_a_spans_second_occurrence():
    texts = ["abcdefghij", "klmnopqrst"]
    uniform = torch.log(torch.tensor(float(VOCAB))).item()
    assert copy_gain(Copier(), Tokenizer(), texts, "causal", length=LENGTH) == pytest.approx(
        uniform, abs=1e-3
    )
    assert copy_gain(Copier(copies=False), Tokenizer(), texts, "causal", length=LENGTH) == pytest.approx(0.0)


def test_repeated_span_windows_copy_a_span_forward_and_leave_the_rest():
    windows = torch.arange(4 * 64).view(4, 64)  # every token distinct: a copy is visible
    out = with_repeats(windows, "causal", 1.0, torch.Generator().manual_seed(0))
    for row, original in zip(out, windows, strict=True):
        changed = (row != original).nonzero().flatten()
        assert 8 <= len(changed) <= 16 and changed.max() - changed.min() == len(changed) - 1
        source = row[changed].tolist()
        assert source == original[source[0] - original[0] : source[0] - original[0] + len(changed)].tolist()
        assert source[0] - original[0] + len(changed) <= changed.min()  # the copy comes from earlier
    untouched = torch.Generator().manual_seed(0)
    assert with_repeats(windows, "causal", 0.0, untouched) is windows
    assert untouched.initial_seed() == 0 and torch.equal(  # no draw taken when off: bases stay as they were
        torch.rand(1, generator=untouched), torch.rand(1, generator=torch.Generator().manual_seed(0))
    )


def test_the_copy_curriculum_repeats_random_sequences_through_each_window():
    induction = Induction(window=64, batch_size=32)
    windows = induction_windows(induction, 5, 300, torch.Generator().manual_seed(0))
    assert windows.shape == (32, 64) and windows.min() >= 5 and windows.max() < 300
    periods = []
    for row in windows.tolist():  # the shortest period the row repeats with
        periods.append(next(p for p in range(1, 65) if all(row[i] == row[i - p] for i in range(p, 64))))
    assert min(periods) >= 8 and max(periods) <= 32 and len(set(periods)) > 5  # no one period to learn


@pytest.mark.parametrize("family", [f for f in FAMILIES.names() if FAMILIES.get(f).copy_curriculum])
def test_a_tiny_base_reads_a_record_again_at_a_lower_loss(family):
    """The copy test: a finance record's second occurrence in one context costs at least 1 nat per token
    less than its first, on every base that gets the copy curriculum (the others do not copy with it
    either: benchmarks/copy_pretraining.py, README)."""
    from privauditor.tasks.datasets import load_dataset
    from privauditor.tasks.models import load_model

    loaded = load_model(f"tiny-{family}", device="cpu")
    records = [e.prompt + e.target for e in load_dataset("finance").examples[:24]]
    objective = "seq2seq" if loaded.seq2seq else "causal"
    assert copy_gain(loaded.model.eval(), loaded.tokenizer, records, objective, length=24) >= 1.0
