"""Shared test helpers: a fresh tiny base of each family, and a few records."""

from __future__ import annotations

from privauditor.tasks.datasets import Example

EXAMPLES = [
    Example("a", "Answer the finance question.\n", "Acme Corp reported net income of $12.4 million in 2021."),
    Example("b", "Answer the finance question.\n", "Loan request from Jane Roe: $30,000, credit score 712."),
    Example("c", "Answer the finance question.\n", "Sentiment of 'Globex shares fall 8%': negative."),
]


def fresh_base(family_name: str):
    """The family's offline tiny base (pre-trained, loaded fresh from the cache) on the CPU, whatever the
    machine has (the tests that use it feed CPU tensors; tests/test_gpu.py covers CUDA), and its tokenizer."""
    from privauditor.tasks.models import load_model

    loaded = load_model(f"tiny-{family_name}", device="cpu")
    return loaded.family, loaded.tokenizer, loaded.model
