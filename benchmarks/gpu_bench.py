"""Accelerator throughput and memory: privauditor's scoring, GradNorm and training on random-weight models of
the registered real shapes, side by side in one run, against the device's own peak.

Shapes (``--shapes real``): LLaMA-7B (``yahma/llama-7b-hf``'s registered architecture, the layout of
LLaMA-2-7B: 32 x 4,096, vocabulary 32,000), LLaMA-3.2-1B (not registered: built from its published
``config.json``, vocabulary 128,256) and BLOOM-7B1 (``bigscience/bloom-7b1``'s, vocabulary 250,880), each
built seeded with ``AutoModelForCausalLM.from_config`` on the device. ``--shapes tiny`` (2 x 64, the
offline tokenizer's 4,096 words, as LLaMA and as BLOOM) runs every path on a CPU in seconds. Texts: the
offline finance records and the offline BPE tokenizer that ``prepare`` wrote (62-190 tokens), cut at 256
tokens (tiny: 128, so that batches still pad: at 48 every record would be cut to one length). Counts
(real / tiny): 128 / 32 scoring texts, 32 / 16 GradNorm texts, 5 / 4 timed training steps per
configuration, 10 / 6 host-sync steps.

- ``peak_bf16_tflops``: the best of square bf16 matrix products of a few sizes.
- ``scoring`` (every shape; bf16-mixed on CUDA, fp32 on a CPU): ``score_examples`` at batches of 16 and 64
  texts (its CUDA token budget switched off, so the batch size applies) and, on CUDA, with its own token
  budget (``batch: "budget"``), against (a) a plain forward making every logit over the same batches and
  (b) MIMIR's loop as its ``Model.get_probabilities`` runs it (one text at a time, the full logits moved to
  the CPU, the log-softmax and each token's log p there; Min-K%++'s moments from its rows as
  ``MinKPlusPlusAttack`` takes them) and (c) the same loop with the statistics left on the device. Each
  text is scored whole after a BOS on every side; ``max_diff_nats`` is the largest difference of a text's
  mean log p between privauditor and either loop. TFLOP/s from the planner's forward FLOPs
  (``costs.forward_flops``: 2 x matmul weights x tokens + attention) over privauditor's seconds.
- ``gradnorm`` (LLaMA-7B, LoRA; tiny on a CPU): ``per_sample_gradients`` over batches of 8 texts against
  one backward pass per text; ``max_rel_diff`` of the per-sample gradient norms (float64 sums).
- ``training``: ``train`` at batches of 8 and 32, a warm-up step then the timed ones (the clock read
  after each step, synchronised, through the loop's checkpoint hook), ``fp32`` (float32 weights, no
  autocast: what every cell ran before ``train.precision``) against ``bf16-mixed`` (``to_precision``): LoRA
  on LLaMA-7B and LLaMA-3.2-1B, full fine-tuning on LLaMA-3.2-1B. Tokens are the padded batches' (what
  the device computes); TFLOP/s from the planner's ``costs.train_flops``; peak memory
  (``torch.cuda.max_memory_allocated``) against the planner's ``plan.memory_bytes`` for a cell of that
  architecture (registered here from the same config, so a plain training loop is planned, as run),
  technique, batch, precision and the batches' longest length. A configuration the planner says does
  not fit is skipped with the reason; ``micro_batch`` says where the step cut a batch that ran out of
  memory.
- ``host_sync`` (LLaMA-3.2-1B, LoRA, batch 8): the same training step repeated, with and without
  reading the loss (``.item()``) after each; the best of two alternated runs of each.
- ``goals`` (``null`` where not measured, and on a CPU): at LLaMA-7B, LoRA at bf16-mixed, batch 32
  reaches 45 % of the measured peak, and at batch 8 3x fp32's tokens/s; full fine-tuning of LLaMA-3.2-1B
  at bf16-mixed, batch 32, 45 % of peak; scoring at LLaMA-7B (privauditor's fastest row) 10x MIMIR's
  loop, 60 % of peak and no slower than the logits forward; the planner's memory within 15 % of every
  measured training peak (rows that cut micro-batches left out).

The machine that runs it needs torch, transformers, peft and this package only (no Ray, DeepSpeed,
opacus, faker or gensim): ``prepare`` writes its inputs beforehand, here::

    python benchmarks/gpu_bench.py prepare DIR [--records 512]   # DIR/records.jsonl, DIR/tokenizer/: < 1 MB
    python benchmarks/gpu_bench.py run DIR [--shapes real|tiny] [--device cuda|cpu] [--out FILE]

``run`` prints its tables as it goes and, as its last line, one JSON object (also written to ``--out``),
which ``privauditor plan --calibrate FILE.json`` reads: ``bench`` ("gpu_bench"), ``version`` (1), ``date``,
``device``, ``device_type``, ``versions``, ``peak_bf16_tflops``, the ``scoring``, ``gradnorm`` and
``training`` rows, ``host_sync``, ``goals`` and ``errors``. A measurement that fails is printed and named in
``errors`` (exit 1) and the rest still run. The real run is sized for under 5 minutes on one H200.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privauditor.tasks.infra.errors import PrivauditorError

GIB = 2**30
BATCHES = (16, 64)  # scoring batch sizes (and "budget" on CUDA)
TRAIN_BATCHES = (8, 32)
PRECISIONS = ("fp32", "bf16-mixed")
#: per --shapes: scoring texts, max length, GradNorm texts, timed training steps, host-sync steps
SIZES = {"real": (128, 256, 32, 5, 10), "tiny": (32, 128, 16, 4, 6)}


@dataclass(frozen=True)
class Subject:
    """A model shape and what is measured on it (``score``, ``lora``, ``gradnorm``, ``host_sync``,
    ``full``)."""

    label: str
    family: str
    config: Any
    work: tuple[str, ...]


def real_subjects() -> list[Subject]:
    from transformers import LlamaConfig

    from privauditor.orchestrator.plan.shapes import config_of

    # LLaMA-3.2-1B is not registered: its published config.json (meta-llama/Llama-3.2-1B)
    llama_1b = LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
    )  # fmt: skip
    return [
        Subject("llama-7b", "llama", config_of("yahma/llama-7b-hf"), ("score", "lora", "gradnorm")),
        Subject("llama-3.2-1b", "llama", llama_1b, ("score", "lora", "host_sync", "full")),
        Subject("bloom-7b1", "bloom", config_of("bigscience/bloom-7b1"), ("score",)),
    ]


def tiny_subjects(vocab: int) -> list[Subject]:
    from privauditor.tasks.models import TinyArchitecture, tiny_config

    arch = TinyArchitecture(hidden=64, layers=2, heads=2, ffn=256, max_positions=512)
    return [
        Subject("tiny-llama", "llama", tiny_config("llama", arch, vocab),
                ("score", "lora", "gradnorm", "host_sync", "full")),
        Subject("tiny-bloom", "bloom", tiny_config("bloom", arch, vocab), ("score",)),
    ]  # fmt: skip


# --- timing and memory ------------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, work: Any) -> tuple[Any, float]:
    sync(device)
    started = time.perf_counter()
    out = work()
    sync(device)
    return out, time.perf_counter() - started


def reset_peak(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_gb(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / GIB, 2) if device.type == "cuda" else None


def peak_bf16_tflops(device: torch.device) -> float:
    """The best rate of square bf16 matrix products (a few sizes, each timed over repeats after a warm-up)."""
    sizes, repeats = ((4096, 8192, 16384), 20) if device.type == "cuda" else ((256, 512), 3)
    best = 0.0
    for n in sizes:
        a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
        out = a @ b  # warm-up

        def products(a: torch.Tensor = a, b: torch.Tensor = b, out: torch.Tensor = out) -> None:
            for _ in range(repeats):
                torch.matmul(a, b, out=out)

        _, seconds = timed(device, products)
        best = max(best, 2 * n**3 * repeats / seconds / 1e12)
        del a, b, out
    free(device)
    return round(best, 2)


def build(subject: Subject, device: torch.device) -> Any:
    """The subject's model with seeded random weights, built on the device, every weight frozen."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(subject.config)
    return model.float().requires_grad_(False).eval()


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --- MIMIR's loop and the baselines -----------------------------------------------------------------------


@torch.no_grad()
def mimir_get_probabilities(
    model: Any, tokens: np.ndarray, device: torch.device
) -> tuple[list, torch.Tensor]:
    """MIMIR's ``Model.get_probabilities(text, tokens=tokens, return_all_probs=True)`` (iamgroot42/mimir,
    ``mimir/models.py``, commit 1b6fd64), line for line, with ``self``'s model, device, ``max_length`` (the
    config's positions, else 1024) and ``stride`` (half of it) taken here. One change: its target models
    load in float32 (no ``torch_dtype`` for LLaMA), so its logits are float32; under bf16 autocast they are
    bf16 here and are made float32 after the move, before the log-softmax."""
    max_length = getattr(model.config, "max_position_embeddings", None) or getattr(
        model.config, "n_positions", 1024
    )
    stride = max_length // 2
    labels = torch.from_numpy(tokens.astype(np.int64)).type(torch.LongTensor)
    if labels.shape[0] != 1:
        labels = labels.unsqueeze(0)
    target_token_log_prob = []
    all_token_log_prob = []
    for i in range(0, labels.size(1), stride):
        begin_loc = max(i + stride - max_length, 0)
        end_loc = min(i + stride, labels.size(1))
        trg_len = end_loc - i
        input_ids = labels[:, begin_loc:end_loc].to(device)
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        logits = model(input_ids, labels=target_ids).logits
        logits = logits.cpu().float()
        shift_logits = logits[..., :-1, :].contiguous()
        log_probabilities = torch.nn.functional.log_softmax(shift_logits, dim=-1)
        shift_labels = target_ids[..., 1:].cpu().contiguous()
        labels_processed = shift_labels[0]
        del input_ids
        del target_ids
        for j, token_id in enumerate(labels_processed):
            if token_id != -100:
                target_token_log_prob.append(log_probabilities[0, j, token_id].item())
                all_token_log_prob.append(log_probabilities[0, j])
    assert len(target_token_log_prob) == labels.size(1) - 1
    return target_token_log_prob, torch.stack(all_token_log_prob, dim=0)


def mimir_loop(model: Any, data: list[dict], device: torch.device) -> list[float]:
    """Per text, MIMIR's probabilities and Min-K%++'s moments from its rows (``MinKPlusPlusAttack._attack``);
    the text's mean log p."""
    from privauditor.tasks.infra.precision import autocast

    means = []
    with autocast(model):
        for item in data:
            probs, all_probs = mimir_get_probabilities(model, np.asarray(item["input_ids"]), device)
            mu = (torch.exp(all_probs) * all_probs).sum(-1)
            sigma = (torch.exp(all_probs) * torch.square(all_probs)).sum(-1) - torch.square(mu)
            _ = (np.array(probs) - mu.numpy()) / sigma.sqrt().numpy()
            means.append(float(np.mean(probs)))
    return means


@torch.no_grad()
def device_stats_loop(model: Any, data: list[dict], device: torch.device) -> list[float]:
    """MIMIR's loop (one text at a time, labels passed, the full logits) with log p, mu and sigma computed
    on the device and moved to the CPU once per text."""
    from privauditor.tasks.infra.precision import autocast

    found = []
    with autocast(model):
        for item in data:
            ids = torch.tensor([item["input_ids"]], device=device)
            logprobs = torch.log_softmax(model(ids, labels=ids).logits[0, :-1].float(), -1)
            logp = logprobs.gather(-1, ids[0, 1:, None]).squeeze(-1)
            weighted = logprobs.exp() * logprobs
            mu = weighted.sum(-1)
            sigma = ((weighted * logprobs).sum(-1) - mu.square()).clamp_min(0).sqrt()
            found.append(torch.stack([logp, mu, sigma]).cpu())
    return [float(stats[0].double().mean()) for stats in found]


@torch.inference_mode()
def logits_forward(model: Any, batches: list[dict], device: torch.device) -> None:
    """Plain forward passes making every logit of the given batches."""
    from privauditor.tasks.infra.precision import autocast

    with autocast(model):
        for batch in batches:
            inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask")}
            model(**inputs).logits  # noqa: B018  # made, not read


def scoring_batches(tokenizer: Any, data: list[dict], batch: int, budget: int | None) -> list[dict]:
    """The batches ``score_examples`` forms: the length order cut by ``batch_size`` or the token budget."""
    from privauditor.tasks.passes.batches import cut_batches, length_order
    from privauditor.tasks.training.loop import collate

    order = length_order(data)
    width = [max(len(data[i]["input_ids"]), len(data[i]["labels"])) for i in order]
    return [collate([data[order[i]] for i in cut], tokenizer.pad_token_id, False)
            for cut in cut_batches(width, batch, budget)]  # fmt: skip


@contextlib.contextmanager
def fixed_budget(budget: int | None) -> Any:
    """``score_examples`` with its token budget set to ``budget``: None switches the CUDA budget off, so
    ``batch_size`` applies; a number makes its batches the ones :func:`scoring_batches` forms."""
    from privauditor.tasks.passes import forward as scoring

    kept = scoring.token_budget
    scoring.token_budget = lambda model: budget
    try:
        yield
    finally:
        scoring.token_budget = kept


# --- the bench ----------------------------------------------------------------------------------------------


@dataclass
class Bench:
    device: torch.device
    tokenizer: Any
    records: list  # Examples
    records_path: str
    mode: str
    result: dict[str, Any]
    planned_names: dict[str, str] = field(default_factory=dict)  # subject label -> name the planner knows

    @property
    def sizes(self) -> tuple[int, int, int, int, int]:
        return SIZES[self.mode]

    @property
    def precision(self) -> str:
        """Scoring's, GradNorm's and the host-sync steps' precision: ``bf16-mixed`` on CUDA (what ``auto``
        gives the registered 1-7 B shapes, loaded in bf16), ``fp32`` on a CPU (the offline bases')."""
        return "bf16-mixed" if self.device.type == "cuda" else "fp32"

    def measure(self, subject: Subject) -> None:
        from privauditor.tasks.infra.precision import to_precision

        model = build(subject, self.device)
        if "score" in subject.work:
            self.guarded(
                "scoring", subject, lambda: self.scoring(to_precision(model, self.precision), subject)
            )
        if "lora" in subject.work:
            model = self.adapted(model, subject, "lora")
            self.guarded("training", subject, lambda: self.training(model, subject, "lora"))
        if "gradnorm" in subject.work:
            self.guarded(
                "gradnorm", subject, lambda: self.gradnorm(to_precision(model, self.precision), subject)
            )
        if "host_sync" in subject.work:
            self.guarded(
                "host_sync", subject, lambda: self.host_sync(to_precision(model, self.precision), subject)
            )
        del model
        free(self.device)
        if "full" in subject.work:
            model = self.adapted(build(subject, self.device), subject, "full")
            self.guarded("training", subject, lambda: self.training(model, subject, "full"))
            del model
            free(self.device)

    def guarded(self, what: str, subject: Subject, work: Any) -> None:
        """Run one measurement; a failure is printed and listed in ``errors``, and the run goes on."""
        started = time.perf_counter()
        try:
            work()
        except Exception as exc:  # a benchmark reports what broke and measures the rest
            traceback.print_exc()
            self.result["errors"].append(
                f"{what} {subject.label}: {type(exc).__name__}: {exc}".splitlines()[0]
            )
        free(self.device)  # after the handler, which held the failed frames' tensors
        print(f"[{what} {subject.label}: {time.perf_counter() - started:.1f} s]", flush=True)

    def adapted(self, model: Any, subject: Subject, technique: str) -> Any:
        from privauditor.tasks.adaptations import build_adaptation
        from privauditor.tasks.models import FAMILIES
        from privauditor.tasks.training.loop import apply_seeded

        return apply_seeded(build_adaptation(technique), model, FAMILIES.get(subject.family), 0)

    # scoring

    def scoring(self, model: Any, subject: Subject) -> None:
        from privauditor.orchestrator.plan.costs import forward_flops
        from privauditor.orchestrator.plan.shapes import shape_of
        from privauditor.tasks.datasets import Example
        from privauditor.tasks.passes.batches import token_budget
        from privauditor.tasks.training.loop import encode

        count, max_length = self.sizes[:2]
        examples = [Example(e.sample_id, "", e.text) for e in self.records[:count]]  # whole texts after a BOS
        data = encode(self.tokenizer, examples, max_length, False)
        shape = shape_of(self.planned_names[subject.label])
        flops = sum(forward_flops(shape, len(item["input_ids"])) for item in data)
        mimir_loop(model, data[:2], self.device)  # warm-up
        mimir, mimir_s = timed(self.device, lambda: mimir_loop(model, data, self.device))
        on_device, on_device_s = timed(self.device, lambda: device_stats_loop(model, data, self.device))
        budget = token_budget(model)
        rows = []
        for batch in (*BATCHES, *(["budget"] if budget else [])):
            row = self.scoring_row(model, examples, data, batch, budget if batch == "budget" else None)
            ours, seconds = row.pop("means"), row["privauditor_s"]
            worst = max(np.max(np.abs(np.subtract(ours, theirs))) for theirs in (mimir, on_device))
            row.update(
                shape=subject.label, mimir_s=round(mimir_s, 3), mimir_device_stats_s=round(on_device_s, 3)
            )
            row.update(speedup_vs_mimir=round(mimir_s / seconds, 2), max_diff_nats=float(f"{worst:.3g}"))
            row.update(tflops=round(flops / seconds / 1e12, 3), precision=self.precision)
            rows.append(row)
        self.result["scoring"] += rows
        show(f"scoring {subject.label} ({len(data)} texts, {self.precision})", rows, SCORING_COLUMNS)

    def scoring_row(
        self, model: Any, examples: list, data: list[dict], batch: Any, budget: int | None
    ) -> dict:
        from privauditor.tasks.passes.forward import score_examples

        max_length = self.sizes[1]
        size = batch if budget is None else 16  # with a budget, batch_size does not apply
        with fixed_budget(budget):
            score_examples(model, self.tokenizer, examples[:size], max_length, False, size)  # warm-up
            reset_peak(self.device)
            stats, seconds = timed(
                self.device, lambda: score_examples(model, self.tokenizer, examples, max_length, False, size)
            )
        peak = peak_gb(self.device)
        batches = scoring_batches(self.tokenizer, data, size, budget)
        logits_forward(model, batches[:1], self.device)  # warm-up
        _, forward_s = timed(self.device, lambda: logits_forward(model, batches, self.device))
        return {"batch": batch, "texts": len(examples), "privauditor_s": round(seconds, 3),
                "logits_forward_s": round(forward_s, 3), "peak_memory_gb": peak, "budget_tokens": budget,
                "means": [float(np.mean(s.logp, dtype=np.float64)) for s in stats]}  # fmt: skip

    # GradNorm

    def gradnorm(self, model: Any, subject: Subject) -> None:
        from privauditor.tasks.infra.precision import autocast
        from privauditor.tasks.passes.gradients import per_sample_gradients, target_nll
        from privauditor.tasks.training.loop import collate, encode

        count, max_length = self.sizes[2], self.sizes[1]
        data = encode(self.tokenizer, self.records[:count], max_length, False)
        order = sorted(range(len(data)), key=lambda i: len(data[i]["input_ids"]))
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        pad = self.tokenizer.pad_token_id

        def loss(m: Any, b: dict) -> torch.Tensor:
            return target_nll(m, b, False)

        def batched() -> np.ndarray:
            norms, layouts = np.zeros(len(data)), {}
            for start in range(0, len(order), 8):
                rows = order[start : start + 8]
                batch = {
                    k: v.to(self.device) for k, v in collate([data[i] for i in rows], pad, False).items()
                }
                norms[rows] = grad_norms(per_sample_gradients(model, batch, loss, params, layouts).values())
            return norms

        def loop() -> np.ndarray:
            norms = []
            for item in data:
                batch = {k: v.to(self.device) for k, v in collate([item], pad, False).items()}
                with autocast(model):
                    value = loss(model, batch)[0]
                grads = torch.autograd.grad(value, list(params.values()), allow_unused=True)
                norms.append(grad_norms([g[None] for g in grads if g is not None])[0])
            return np.array(norms)

        model.eval()
        batched()  # warm-up (and the probes, as GradNorm's first batch pays them)
        ours, batched_s = timed(self.device, batched)
        theirs, loop_s = timed(self.device, loop)
        worst = np.max(np.abs(ours - theirs) / theirs)
        row = {"shape": subject.label, "technique": "lora", "texts": len(data),
               "batched_s": round(batched_s, 3), "loop_s": round(loop_s, 3),
               "speedup": round(loop_s / batched_s, 2),
               "max_rel_diff": float(f"{worst:.3g}"), "precision": self.precision}  # fmt: skip
        self.result["gradnorm"].append(row)
        show(f"GradNorm {subject.label}", [row], list(row))

    # training

    def training(self, model: Any, subject: Subject, technique: str) -> None:
        from privauditor.tasks.infra.precision import to_precision

        rows = []
        for precision in PRECISIONS:
            to_precision(model, precision)
            for batch in TRAIN_BATCHES:
                rows.append(self.training_row(model, subject, technique, precision, batch))
        self.result["training"] += rows
        show(f"training {subject.label} {technique}", rows, TRAINING_COLUMNS)

    def training_row(self, model: Any, subject: Subject, technique: str, precision: str, batch: int) -> dict:
        from privauditor.orchestrator.plan.costs import train_flops
        from privauditor.orchestrator.plan.shapes import shape_of, trainable_params
        from privauditor.tasks.adaptations import build_adaptation
        from privauditor.tasks.training.loop import encode

        steps, max_length = self.sizes[3] + 1, self.sizes[1]
        examples = [self.records[i % len(self.records)] for i in range(steps * batch)]
        lengths = [len(item["input_ids"]) for item in encode(self.tokenizer, examples, max_length, False)]
        widths = [max(lengths[s : s + batch]) for s in range(0, len(lengths), batch)]
        row = {"shape": subject.label, "technique": technique, "precision": precision, "batch": batch,
               "tokens_per_s": None, "tflops": None, "peak_memory_gb": None, "planned_memory_gb": None,
               "skipped": None, "micro_batch": None}  # fmt: skip
        name = self.planned_names[subject.label]
        planned = planned_gb(name, technique, precision, batch, max(widths), self.records_path)
        row.update(planned_memory_gb=planned, skipped=self.no_room(planned))
        if row["skipped"]:
            return row
        model.zero_grad(set_to_none=True)
        reset_peak(self.device)
        seconds, step = self.timed_steps(model, examples, batch)
        row["peak_memory_gb"] = peak_gb(self.device)
        model.zero_grad(set_to_none=True)
        found = trainable_params(name, build_adaptation(technique))
        timed_widths = widths[1:]  # the first step is the warm-up
        flops = sum(
            train_flops(shape_of(name), w, batch, found.matmul, inputs=found.body) for w in timed_widths
        )
        row.update(tokens_per_s=round(batch * sum(timed_widths) / seconds, 1),
                   tflops=round(flops / seconds / 1e12, 3), micro_batch=step.micro_batch)  # fmt: skip
        return row

    def timed_steps(self, model: Any, examples: list, batch: int) -> tuple[float, Any]:
        """``train`` over ``examples`` in order, ``batch`` at a time: seconds from the end of the first
        step (the warm-up) to the end of the last, and the step object."""
        from privauditor.tasks.training.loop import LocalStep, Loop, TrainConfig, train

        steps = len(examples) // batch
        ends: dict[int, float] = {}
        made: list[Any] = []

        def make_step(*args: Any) -> Any:
            made.append(LocalStep(*args))
            return made[-1]

        def mark(epoch: float, step: int) -> None:
            sync(self.device)
            ends[step] = time.perf_counter()

        in_order = [list(range(s, s + batch)) for s in range(0, len(examples), batch)]
        checkpoints = [k / steps for k in range(1, steps + 1)]  # after every step
        loop = Loop(make_step, checkpoints=checkpoints, on_checkpoint=mark, sampler=lambda epoch: in_order)
        config = TrainConfig(epochs=1, lr=1e-4, batch_size=batch, max_length=self.sizes[1], seed=0)
        train(model, self.tokenizer, examples, config, False, loop)
        return ends[steps] - ends[1], made[0]

    def no_room(self, planned: float | None) -> str | None:
        """Why a configuration is skipped: the planner's memory over the device's (None: it fits)."""
        if self.device.type != "cuda" or planned is None:
            return None
        total = torch.cuda.get_device_properties(self.device).total_memory / GIB
        return f"planned {planned:.1f} GB > the device's {total:.1f} GB" if planned > total else None

    # host syncs

    def host_sync(self, model: Any, subject: Subject) -> None:
        from privauditor.tasks.training.loop import LocalStep, collate, encode

        steps, batch = self.sizes[4], 8
        data = encode(self.tokenizer, self.records[:batch], self.sizes[1], False)
        tensors = {k: v.to(self.device) for k, v in collate(data, self.tokenizer.pad_token_id, False).items()}
        params = [p for p in model.parameters() if p.requires_grad]
        step = LocalStep(model, params, 1e-4, 1)
        model.train()
        step(tensors, 1.0).item()  # warm-up

        def synced() -> None:
            for _ in range(steps):
                step(tensors, 1.0).item()

        def unsynced() -> None:
            torch.stack([step(tensors, 1.0) for _ in range(steps)]).sum().item()

        times = {"with": [], "without": []}
        for _ in range(2):  # alternated, the best of each
            times["with"].append(timed(self.device, synced)[1])
            times["without"].append(timed(self.device, unsynced)[1])
        model.eval()
        model.zero_grad(set_to_none=True)
        with_s, without_s = min(times["with"]), min(times["without"])
        row = {"shape": subject.label, "with_sync_s": round(with_s, 4), "without_sync_s": round(without_s, 4),
               "ratio": round(with_s / without_s, 3), "steps": steps, "batch": batch,
               "precision": self.precision}  # fmt: skip
        self.result["host_sync"] = row
        show(f"host syncs {subject.label}", [row], list(row))


def grad_norms(grads: Any) -> np.ndarray:
    """Per sample, the L2 norm of its gradients as one vector (squares summed in float64)."""
    total = sum(g.flatten(1).double().square().sum(1) for g in grads)
    return total.sqrt().cpu().numpy()


def planned_gb(  # noqa: PLR0913  # one planner cell's settings
    name: str, technique: str, precision: str, batch: int, max_length: int, dataset: str
) -> float | None:
    """The planner's memory for a cell of model ``name`` (``plan.memory_bytes``) in GB (None, with the
    reason on stderr, where the planner cannot build the cell)."""
    from privauditor.orchestrator.plan.plan import memory_bytes, tokens_for
    from privauditor.orchestrator.plan.shapes import shape_of
    from privauditor.orchestrator.plan.work import cell_work
    from privauditor.tasks.spec.config import cell_config

    sets = [f"train.precision={precision}", f"train.batch_size={batch}", f"train.max_length={max_length}"]
    try:
        config = cell_config(
            {"model": name, "adaptation": technique, "dataset": dataset, "attacks": ["loss"]}, sets
        )
        spec = config.resolve(build=False)
        return round(memory_bytes(spec, cell_work(spec, shape_of, tokens_for(False))) / GIB, 2)
    except PrivauditorError as exc:
        print(f"planner: no plan for {name} {technique} {precision}: {exc}", file=sys.stderr)
        return None


@contextlib.contextmanager
def planner_names(subjects: list[Subject]) -> Any:
    """Each subject's architecture registered with the planner under a name of its own (its config as
    ``--params NAME=config.json`` registers it), so the plan is of the model measured, trained by the
    plain loop as here: registered 7 B checkpoints would be planned under DeepSpeed ZeRO-2."""
    from privauditor.orchestrator.plan.shapes import registered

    with tempfile.TemporaryDirectory() as folder:
        names = {s.label: f"gpu-bench/{s.label}" for s in subjects}
        assignments = []
        for s in subjects:
            path = Path(folder) / f"{s.label}.json"
            path.write_text(s.config.to_json_string())
            assignments.append(f"{names[s.label]}={path}")
        with registered(assignments):
            yield names


# --- goals and output -----------------------------------------------------------------------------------

SCORING_COLUMNS = ["batch", "texts", "privauditor_s", "logits_forward_s", "mimir_s", "mimir_device_stats_s",
                   "speedup_vs_mimir", "max_diff_nats", "tflops", "peak_memory_gb"]  # fmt: skip
TRAINING_COLUMNS = ["precision", "batch", "tokens_per_s", "tflops", "peak_memory_gb", "planned_memory_gb",
                    "micro_batch", "skipped"]  # fmt: skip
GOALS = ("lora_7b_bf16_mixed_batch32_45pct_of_peak", "bf16_mixed_3x_fp32_lora_7b_batch8",
         "full_1b_bf16_mixed_batch32_45pct_of_peak", "scoring_7b_10x_mimir", "scoring_7b_60pct_of_peak",
         "scoring_7b_not_slower_than_logits_forward", "planner_memory_within_15pct")  # fmt: skip


def goals(result: dict[str, Any]) -> dict[str, bool | None]:
    """The module docstring's goals on the real shapes (null where not measured, and on a CPU). Scoring's
    are judged on privauditor's fastest row at LLaMA-7B; the 45 % goals at bf16-mixed; the planner's on
    every training row with both a measured and a planned peak (and no micro-batches)."""
    if result["device_type"] != "cuda":
        return dict.fromkeys(GOALS)
    peak = result["peak_bf16_tflops"]

    def trained(shape: str, technique: str, precision: str, batch: int) -> dict | None:
        wanted = {"shape": shape, "technique": technique, "precision": precision, "batch": batch}
        found = [r for r in result["training"] if wanted.items() <= r.items() and not r["skipped"]]
        return found[0] if found else None

    lora32 = trained("llama-7b", "lora", "bf16-mixed", 32)
    full32 = trained("llama-3.2-1b", "full", "bf16-mixed", 32)
    mixed, fp32 = trained("llama-7b", "lora", "bf16-mixed", 8), trained("llama-7b", "lora", "fp32", 8)
    scoring = [r for r in result["scoring"] if r["shape"] == "llama-7b"]
    best = min(scoring, key=lambda r: r["privauditor_s"]) if scoring else None
    memory = [r["planned_memory_gb"] / r["peak_memory_gb"] for r in result["training"]
              if r["planned_memory_gb"] and r["peak_memory_gb"] and not r["micro_batch"]]  # fmt: skip
    return {
        GOALS[0]: None if lora32 is None else lora32["tflops"] >= 0.45 * peak,
        GOALS[1]: None if not (mixed and fp32) else mixed["tokens_per_s"] >= 3 * fp32["tokens_per_s"],
        GOALS[2]: None if full32 is None else full32["tflops"] >= 0.45 * peak,
        GOALS[3]: None if best is None else best["speedup_vs_mimir"] >= 10,
        GOALS[4]: None if best is None else best["tflops"] >= 0.6 * peak,
        GOALS[5]: None if best is None else best["privauditor_s"] <= best["logits_forward_s"],
        GOALS[6]: None if not memory else all(abs(ratio - 1) <= 0.15 for ratio in memory),
    }


def show(title: str, rows: list[dict], columns: list[str]) -> None:
    """A plain table of ``rows``' ``columns``."""
    cells = [[str(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(columns)]
    print(f"\n{title}")
    for line in [columns, *cells]:
        print("  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)), flush=True)


def versions() -> dict[str, str]:
    import importlib.metadata

    import peft
    import transformers

    try:
        ours = importlib.metadata.version("privauditor")
    except importlib.metadata.PackageNotFoundError:
        ours = "unknown"
    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "privauditor": ours}  # fmt: skip


# --- commands -------------------------------------------------------------------------------------------


def prepare(folder: Path, records: int) -> None:
    """The offline finance records and the offline tokenizer, written to ``folder``."""
    from privauditor.tasks.datasets import load_dataset
    from privauditor.tasks.models._tiny import _tokenizer

    if records < 1:
        raise PrivauditorError(f"--records must be at least 1, not {records}")
    folder.mkdir(parents=True, exist_ok=True)
    examples = load_dataset("finance").examples[:records]
    lines = [json.dumps({"sample_id": e.sample_id, "prompt": e.prompt, "target": e.target}) for e in examples]
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n")
    _tokenizer()[2].save_pretrained(folder / "tokenizer")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    print(f"wrote {len(examples)} records and the tokenizer to {folder} ({size / 1e6:.2f} MB)")


def inputs(folder: Path) -> tuple[Any, list]:
    from transformers import AutoTokenizer

    from privauditor.tasks.datasets import Example

    for part in ("records.jsonl", "tokenizer"):
        if not (folder / part).exists():
            raise PrivauditorError(f"{folder} has no {part}: run 'gpu_bench.py prepare {folder}' first")
    rows = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines() if line.strip()]
    records = [Example(str(r["sample_id"]), r["prompt"], r["target"]) for r in rows]
    return AutoTokenizer.from_pretrained(folder / "tokenizer"), records


def run(args: argparse.Namespace) -> int:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise PrivauditorError("--device cuda: torch sees no CUDA device (use --device cpu)")
    device = torch.device(args.device)
    tokenizer, records = inputs(args.folder)
    result: dict[str, Any] = {
        "bench": "gpu_bench", "version": 1, "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "device_type": device.type, "versions": versions(), "peak_bf16_tflops": peak_bf16_tflops(device),
        "scoring": [], "gradnorm": [], "training": [], "host_sync": None, "goals": {}, "errors": [],
    }  # fmt: skip
    print(f"{result['device']}: peak bf16 {result['peak_bf16_tflops']} TFLOP/s", flush=True)
    subjects = real_subjects() if args.shapes == "real" else tiny_subjects(len(tokenizer))
    with planner_names(subjects) as names:
        path = str((args.folder / "records.jsonl").resolve())  # the planner's cells read it as their dataset
        bench = Bench(device, tokenizer, records, path, args.shapes, result, names)
        for subject in subjects:
            bench.measure(subject)
    result["goals"] = goals(result)
    show("goals", [result["goals"]], list(result["goals"]))
    line = json.dumps(result)
    if args.out:
        Path(args.out).write_text(line + "\n")
    print(line, flush=True)
    return 1 if result["errors"] else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("prepare", help="write the records and the tokenizer to DIR")
    made.add_argument("folder", type=Path, metavar="DIR")
    made.add_argument("--records", type=int, default=512)
    measured = commands.add_parser("run", help="measure, from what prepare wrote to DIR")
    measured.add_argument("folder", type=Path, metavar="DIR")
    measured.add_argument("--shapes", choices=("real", "tiny"), default="real")
    measured.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    measured.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            prepare(args.folder, args.records)
            return 0
        return run(args)
    except PrivauditorError as exc:
        print(f"gpu_bench: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
