"""Matrix expansion: unsupported (family, technique) pairs are dropped and listed, or refused."""

from __future__ import annotations

import pytest

from privauditor.orchestrator.sweepfile.matrix import check_cell, expand
from privauditor.tasks.infra.errors import PrivauditorError, UnknownNameError


def test_unsupported_pairs_are_dropped_and_listed():
    models = ["tiny-llama", "tiny-opt", "tiny-t5"]
    cells, dropped = expand(models, ["lora", "llama_adapter"], ["finance", "sql"], [0, 1])
    assert len(cells) == 3 * 2 * 2 + 1 * 2 * 2  # lora everywhere, llama_adapter on llama only
    assert {(c.model, c.adaptation) for c in cells if c.adaptation == "llama_adapter"} == {
        ("tiny-llama", "llama_adapter")
    }
    assert [(d.model, d.adaptation) for d in dropped] == [
        ("tiny-opt", "llama_adapter"),
        ("tiny-t5", "llama_adapter"),
    ]
    assert all("supports only the llama family" in d.reason for d in dropped)


def test_explicit_unsupported_pair_is_an_exit_2_error():
    check_cell("tiny-llama", "llama_adapter")
    with pytest.raises(PrivauditorError, match="cannot run tiny-gpt2 × llama_adapter") as info:
        check_cell("tiny-gpt2", "llama_adapter")
    assert info.value.exit_code == 2


def test_unknown_names_fail_before_any_work():
    with pytest.raises(UnknownNameError, match="did you mean 'lora'"):
        expand(["tiny-llama"], ["lorra"], ["finance"], [0])
    with pytest.raises(UnknownNameError, match="did you mean 'climate'"):
        expand(["tiny-llama"], ["lora"], ["climat"], [0])
