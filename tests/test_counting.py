"""The forward-pass counter counts real passes: checked against hooks on the model instances themselves."""

from __future__ import annotations

import torch

from privauditor.tasks.adaptations import build_adaptation
from privauditor.tasks.passes.counting import ForwardCounter, read_counts
from privauditor.tasks.passes.forward import score_examples
from privauditor.tasks.passes.gradients import gradient_norms
from privauditor.tasks.passes.neighbours import generate_neighbours, load_masked_lm
from privauditor.tasks.training.loop import TrainConfig, apply_seeded, train

from .helpers import EXAMPLES, fresh_base


def watch(module):
    """Batch rows of every call of ``module``, seen by a hook on that instance (independent of the counter)."""
    seen: list[int] = []

    def hook(_, args, kwargs, output):
        tensor = getattr(output, "logits", None)
        seen.append((tensor if tensor is not None else output[0]).shape[0])

    return seen, module.register_forward_hook(hook, with_kwargs=True)


def test_counter_counts_each_model_call_once_with_its_rows(tmp_path):
    family, tokenizer, model = fresh_base("gpt2")
    texts = EXAMPLES * 3
    seen, handle = watch(model)
    with ForwardCounter(tmp_path / "passes.tsv") as counter:
        score_examples(model, tokenizer, texts, 64, False, batch_size=4)
        gradient_norms(model, tokenizer, texts[:2], 64, False)
        train(model, tokenizer, texts, TrainConfig(epochs=1, lr=1e-4, batch_size=5, max_length=64), False)
    handle.remove()
    # three scoring batches; per-sample gradients: one batched pass, then its probe (one row more, no
    # gradients); two training batches
    assert seen == [4, 4, 1, 2, 3, 5, 4]
    name = type(model).__name__
    assert counter.rows == {(name, "infer"): 12, (name, "grad"): 2, (name, "train"): 9}
    assert counter.passes == {(name, "infer"): 4, (name, "grad"): 1, (name, "train"): 2}
    assert read_counts(tmp_path / "passes.tsv") == (counter.passes, counter.rows)
    with torch.inference_mode():  # not counted once the counter is closed
        score_examples(model, tokenizer, texts, 64, False)
    assert counter.total() == 23


def test_a_wrapped_model_is_one_pass_and_the_masked_lm_is_counted():
    family, tokenizer, model = fresh_base("llama")
    model = apply_seeded(build_adaptation("lora"), model, family, seed=0)
    inner, handle = watch(model.get_base_model())
    masked_lm = load_masked_lm()
    mlm, mlm_handle = watch(masked_lm[0].base_model)
    with ForwardCounter() as counter:
        score_examples(model, tokenizer, EXAMPLES, 64, False, batch_size=2)
        generate_neighbours([e.target for e in EXAMPLES], k=3, mask_fraction=0.2, seed=0, masked_lm=masked_lm,
                            batch_size=4)  # fmt: skip
    handle.remove(), mlm_handle.remove()
    assert inner == [2, 1] and mlm == [4, 4, 1]  # nine neighbours in batches of four
    assert counter.passes == {
        (type(model).__name__, "infer"): 2,
        (type(masked_lm[0].base_model).__name__, "infer"): 3,
    }
    assert counter.total() == 3 + 9
