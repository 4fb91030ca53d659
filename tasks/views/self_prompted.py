"""``self_prompted``: every scored text and its neighbours under SPV-MIA's self-prompt reference model (Fu
et al. 2024, "Practical Membership Inference Attacks against Fine-tuned Large Language Models via
Self-prompt Calibration", NeurIPS 2024, https://arxiv.org/abs/2311.06062).

The reference is made as the paper's code makes it (tsinghua-fib-lab/NeurIPS2024_SPV-MIA):

1. **Self-prompt texts.** The target writes them. Each record of the split's ``population`` part (known
   non-members, never scored) gives one prompt, its own prompt followed by the first ``prompt_tokens``
   tokens of its target (16: the code's clip), and the target samples one continuation to the record's
   target length (as ``max_length`` truncates it): the code samples to its block length. A target of no
   more than ``prompt_tokens`` tokens keeps all but its last as the prefix, so at least one token is
   sampled. Sampling is the code's ``generate(do_sample=True)`` at transformers' defaults, which it leaves
   in place: temperature 1, top-k 50. The code's texts are packed blocks that run to the block length; ours
   are forced to theirs (no end-of-text before it: our targets never end with one). A causal target reads
   ``<s> prompt prefix``; T5 reads the prompt on the encoder side and continues the prefix on the decoder
   side. The target reads no in-context demonstrations here (``in_context = False``).
2. **The reference** is a fresh copy of the base adapted on those texts (record prompt → generated
   target) with the target's technique, hyper-parameters, learning rate and batch size (the
   :class:`~privauditor.tasks.views._base.Recipe` the cell lends the view's context) for ``epochs``
   epochs: 2, the code's LoRA setting for its reference, whatever the target had. It trains with the
   plain loop on the target's device, also where the target trained under DeepSpeed (a base too large to
   adapt on one device does not fit there): in a sweep in a Ray task of its own, from the target rebuilt
   from its saved adapter (:mod:`privauditor.tasks.cell.view_job`), else in the cell's process.
   A technique that trains nothing (``none``) leaves the base itself as the reference: nothing is sampled.
3. Every scored text and its ``k`` masked-LM neighbours (the ``neighbours`` view's texts, made and cached
   exactly as that view makes them, so they are shared with it at the same ``k``, ``mask_fraction`` and
   seed) are scored under the reference, each after its record's prompt.

Sampling and training are seeded with the cell's seed (the caller's random state is left as it was), so the
view is deterministic on a device; the reference never sees a scored text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..infra.errors import PrivauditorError
from . import VIEWS
from ._base import Cost, View

#: population texts per scored text in the shipped sweeps (280 population, 280 + 280 scored): the share of
#: the reference's generation and training one scored text's cost carries
POPULATION_SHARE = 0.5
TOP_K = 50  # transformers' default, which the paper's code samples with


@dataclass(frozen=True)
class SelfPromptedNLL:
    """What an attack reads: per scored text, its mean NLL under the self-prompt reference, and each of its
    neighbours'."""

    nll: np.ndarray
    neighbour_nll: list[np.ndarray]


@VIEWS.register("self_prompted")
@dataclass(frozen=True)
class SelfPromptedView(View):
    """Per scored text, the self-prompt reference's mean NLL on it and on each of its ``k`` neighbours."""

    k: int = 10  # neighbours per text (the code's 10 perturbations)
    mask_fraction: float = 0.15  # share of a text's tokens substituted in each neighbour
    prompt_tokens: int = 16  # tokens of a population target that prompt the target (the code's clip)
    epochs: int = 2  # the reference's training epochs (the code's LoRA setting)

    name = "self_prompted"
    version = 1
    in_context = False  # the self-prompt texts are written without the target's demonstrations
    adapts = True

    def __post_init__(self) -> None:
        for field, low in (("k", 1), ("prompt_tokens", 0), ("epochs", 1)):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise PrivauditorError(
                    f"view 'self_prompted': {field} must be an int >= {low}, not {value!r}"
                )
        if not 0 < self.mask_fraction < 1:
            raise PrivauditorError(
                f"view 'self_prompted': mask_fraction must be in (0, 1), not {self.mask_fraction!r}"
            )

    def parts(self) -> tuple[str, ...]:
        return ("scored", "population")

    def cost(self) -> Cost:
        """The reference's passes per scored text: the text and its ``k`` neighbours (their masked-LM passes
        are the ``neighbours`` view's, counted there), plus a ``POPULATION_SHARE`` of the population's
        generation (one pass per text in FLOPs: a KV cache reads each token once; its wall time is longer,
        a token at a time) and training (``epochs`` forward and backward passes per text)."""
        made = POPULATION_SHARE * (1 + self.epochs)
        return Cost(forward=1 + self.k + made, backward=POPULATION_SHARE * self.epochs)

    def identity(self, build: bool) -> dict[str, str | None]:
        from ..models import masked_lm_identity

        return {"masked_lm": masked_lm_identity(build)}

    def compute(self, context):
        import pyarrow as pa

        from ..adaptations import build_adaptation
        from ..passes.forward import mean_nll, score_examples
        from .neighbours import neighbour_examples

        recipe = context.recipe
        if recipe is None:
            raise PrivauditorError(
                "view 'self_prompted' adapts a reference the way the target was adapted: only a cell knows how"
            )
        population = context.examples("population")
        if not population:
            raise PrivauditorError(
                "view 'self_prompted' needs split.population > 0: its records prompt the target"
            )
        target = context.scorer("target")
        technique = build_adaptation(recipe.adaptation, recipe.adaptation_params)
        length, seed = context.max_length, context.seed
        with seeded(target.model):
            texts = []  # a technique that trains nothing leaves the base itself as the reference
            if technique.trains:
                texts = self_prompted_texts(
                    target, population, self.prompt_tokens, length, context.batch_size, seed
                )
            reference = adapted_reference(recipe, texts, self.epochs, length, seed, target.model)
        # the neighbours view's texts, made exactly as it makes them (and shared with it)
        examples, variants = neighbour_examples(context, self.k, self.mask_fraction)
        # batched and averaged as the signals and neighbours views do the target's: a reference with the
        # target's own weights (a technique that trains nothing) then scores exactly 0
        model, tokenizer, seq2seq = reference.model, reference.tokenizer, reference.seq2seq
        stats = score_examples(model, tokenizer, examples, length, seq2seq, context.batch_size, moments=False)
        own = [-np.mean(s.logp, dtype=np.float64) for s in stats]
        rest = mean_nll(model, tokenizer, variants, length, seq2seq)
        return pa.table(
            {
                "sample_id": pa.array([e.sample_id for e in examples], pa.string()),
                "reference_nll": pa.array(own, pa.float64()),
                "reference_neighbour_nll": pa.array(
                    [rest[i * self.k : (i + 1) * self.k].tolist() for i in range(len(examples))],
                    pa.list_(pa.float64()),
                ),
            }
        )

    def read(self, table):
        rows = table.column("reference_neighbour_nll").to_pylist()
        return SelfPromptedNLL(
            np.asarray(table.column("reference_nll").to_pylist(), dtype=np.float64),
            [np.asarray(row, dtype=np.float64) for row in rows],
        )


def seeded(model: Any) -> Any:
    """A block whose draws from torch's generators (on the model's device too) do not change the caller's."""
    import torch

    device = next(model.parameters()).device
    return torch.random.fork_rng(devices=[device] if device.type == "cuda" else [])


def self_prompted_texts(
    target: Any,
    population: Sequence[Any],
    prompt_tokens: int,
    max_length: int,
    batch_size: int,
    seed: int,
) -> list[Any]:
    """One text per population record, in their order and with their ids and prompts, written by ``target``:
    the first ``prompt_tokens`` tokens of the record's target (fewer where the target is shorter, so at
    least one token is sampled) continued by sampling to the target's length (see the module docstring).
    ``target``: the model with its ``tokenizer`` and ``seq2seq`` flag (a :class:`~privauditor.tasks.passes.scorer.Scorer`)."""
    import torch

    from ..datasets import Example
    from ..infra.deadline import check
    from ..infra.precision import autocast
    from ..training.loop import encode

    model, tokenizer, seq2seq = target.model, target.tokenizer, target.seq2seq

    jobs = []  # (what the model reads before the target, the target's prefix, tokens to sample)
    for item in encode(tokenizer, population, max_length, seq2seq):
        target = item["labels"] if seq2seq else [t for t in item["labels"] if t != -100]
        keep = min(prompt_tokens, len(target) - 1)
        before = item["input_ids"] if seq2seq else item["input_ids"][: len(item["input_ids"]) - len(target)]
        jobs.append((before, target[:keep], len(target) - keep))
    groups: dict[tuple[int, int], list[int]] = {}  # equal shapes batch without padding
    for i, (before, prefix, _) in enumerate(jobs):
        groups.setdefault((len(before), len(prefix)), []).append(i)
    device = next(model.parameters()).device
    written: list[list[int]] = [[] for _ in jobs]
    model.eval()
    torch.manual_seed(seed)
    for shape in sorted(groups):
        for start in range(0, len(groups[shape]), batch_size):
            check("self-prompt generation")
            rows = groups[shape][start : start + batch_size]
            before = torch.tensor([jobs[i][0] for i in rows], dtype=torch.long, device=device)
            prefix = torch.tensor([jobs[i][1] for i in rows], dtype=torch.long, device=device)
            prefix = prefix.reshape(len(rows), shape[1])  # also where the prefix is empty
            if seq2seq:  # the decoder starts from its start token, then the prefix
                start_id = torch.full((len(rows), 1), model.config.decoder_start_token_id, device=device)
                inputs = {"input_ids": before, "decoder_input_ids": torch.cat([start_id, prefix], 1)}
                given = prefix.shape[1] + 1
            else:
                inputs = {"input_ids": torch.cat([before, prefix], 1)}
                given = inputs["input_ids"].shape[1]
            new = max(jobs[i][2] for i in rows)
            with torch.inference_mode(), autocast(model):
                out = model.generate(
                    **inputs, attention_mask=torch.ones_like(before if seq2seq else inputs["input_ids"]),
                    do_sample=True, top_k=TOP_K, top_p=1.0, temperature=1.0, num_beams=1,
                    max_new_tokens=new, min_new_tokens=new, pad_token_id=tokenizer.pad_token_id,
                )  # fmt: skip
            for row, i in enumerate(rows):
                written[i] = jobs[i][1] + out[row, given : given + jobs[i][2]].tolist()
    return [
        Example(e.sample_id, e.prompt, tokenizer.decode(ids, skip_special_tokens=True))
        for e, ids in zip(population, written, strict=True)
    ]


def adapted_reference(
    recipe: Any, texts: Sequence[Any], epochs: int, max_length: int, seed: int, like: Any
) -> Any:
    """A fresh copy of the recipe's base (on the device of the model ``like``) adapted on ``texts`` by the
    recipe's technique for ``epochs`` epochs: the loaded model, its ``model`` the adapted one, in eval mode."""
    from ..adaptations import build_adaptation
    from ..infra.precision import precision_of, to_precision
    from ..models import load_model
    from ..training.loop import TrainConfig, apply_seeded, train

    loaded = load_model(recipe.model, device=str(next(like.parameters()).device))
    technique = build_adaptation(recipe.adaptation, recipe.adaptation_params)
    # at the target's precision (tasks/infra/precision.py), as the target was trained
    adapted = apply_seeded(technique, loaded.model, loaded.family, seed=seed)
    loaded.model = to_precision(adapted, precision_of(like))
    if texts:
        config = TrainConfig(epochs, recipe.lr, recipe.batch_size, max_length, seed)
        train(loaded.model, loaded.tokenizer, texts, config, loaded.seq2seq)
    loaded.model.eval()
    return loaded
