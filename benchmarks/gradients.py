"""Per-sample gradient norms (GradNorm's input): the batched per-sample-gradient module vs one backward pass
per text, side by side in one run.

On the scoring benchmark's model (``scoring.py``'s LLaMA shape with random weights: 6 layers x 512 hidden,
vocabulary 32,000) and on a tiny one (2 x 128, vocabulary 4,096), for the same offline finance texts
(targets scored after their prompts, max length 128), two trainable sets: LoRA on every projection (r 16,
the offline default) and every parameter (``full`` / ``none``):

- ``before``: the loop GradNorm ran until now: per text, one forward and one backward pass
  (``torch.autograd.grad`` of the model's own loss), the norm of the concatenated gradient;
- ``after``: :func:`privauditor.tasks.passes.gradients.gradient_norms` (a probe per model, then per batch one
  forward and one backward pass and ``vmap``-ed per-module products; its batch shrinks to keep 256 MB of
  per-sample gradients, so every parameter of the 52 M-parameter model goes one text at a time).

Both are checked against the exact norms (the loop's gradients, their norm summed in float64): the
batched module's must agree to 1e-5 (asserted); the old loop's float32 norm is reported beside it. The
last line is one JSON object.

    python benchmarks/gradients.py [--texts 64] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scoring import build_model, tokenizer_and_texts  # noqa: E402  # the scoring benchmark's model and texts

from privauditor.orchestrator.tables import render  # noqa: E402
from privauditor.tasks.adaptations import build_adaptation  # noqa: E402
from privauditor.tasks.models import FAMILIES  # noqa: E402
from privauditor.tasks.passes.gradients import gradient_norms  # noqa: E402
from privauditor.tasks.training.loop import collate, encode  # noqa: E402


def one_at_a_time(model, tokenizer, examples, max_length, exact):
    """The loop GradNorm used: per text, the model's loss, its gradient, the L2 norm of the concatenated
    gradient in float32 (as it was), and, outside the timing, the exact norm (float64) into ``exact``."""
    params = [p for p in model.parameters() if p.requires_grad]
    norms = []
    for item in encode(tokenizer, examples, max_length, False):
        loss = model(**collate([item], tokenizer.pad_token_id, False)).loss
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        flat = torch.cat([g.flatten() for g in grads if g is not None])
        norms.append(float(torch.linalg.vector_norm(flat)))
        started = time.perf_counter()
        exact.append(float(torch.linalg.vector_norm(flat, dtype=torch.float64)))
        exact_s[0] += time.perf_counter() - started
    return np.array(norms)


exact_s = [0.0]  # time spent on the exact norms inside the timed loop, taken off its time


def timed(work):
    started = time.perf_counter()
    out = work()
    return out, time.perf_counter() - started


def trainable(model, technique: str):
    if technique == "lora":
        return build_adaptation("lora").apply(model, FAMILIES.get("llama")).eval()
    for p in model.parameters():
        p.requires_grad_(True)
    return model.eval()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer, examples = tokenizer_and_texts(args.texts)
    shapes = {"real-shaped": (6, 512, 32000), "tiny": (2, 128, len(tokenizer))}
    rows, figures = [], {}
    for label, (layers, hidden, vocab) in shapes.items():
        for technique in ("lora", "full"):
            torch.manual_seed(0)
            model = trainable(build_model(layers, hidden, vocab, 0), technique)
            count = sum(p.numel() for p in model.parameters() if p.requires_grad)
            exact, exact_s[0] = [], 0.0
            before, before_s = timed(
                partial(one_at_a_time, model, tokenizer, examples, args.max_length, exact)
            )
            before_s -= exact_s[0]
            norms = partial(
                gradient_norms, model, tokenizer, examples, args.max_length, False, 2.0, args.batch_size
            )
            after, after_s = timed(norms)
            exact = np.array(exact)
            worst, worst_before = (float(np.max(np.abs(x - exact) / exact)) for x in (after, before))
            assert worst <= 1e-5, f"{label} {technique}: norms differ from the exact ones by {worst:.1e}"
            rows.append([label, technique, f"{count / 1e6:.2f} M", round(before_s, 2), round(after_s, 2),
                         round(before_s / after_s, 2), f"{worst:.1e}", f"{worst_before:.1e}"])  # fmt: skip
            suffix = "" if label == "real-shaped" else "_tiny"
            figures[f"speedup_{technique}{suffix}"] = round(before_s / after_s, 2)
            figures[f"seconds_per_text_before_{technique}{suffix}"] = round(before_s / len(examples), 4)
            figures[f"seconds_per_text_after_{technique}{suffix}"] = round(after_s / len(examples), 4)
            figures[f"max_rel_norm_error_{technique}{suffix}"] = worst
            figures[f"max_rel_norm_error_before_{technique}{suffix}"] = worst_before
    print(
        f"{len(examples)} texts, max length {args.max_length}, batch {args.batch_size}, {args.threads} threads"
    )
    print(render(["model", "trained", "parameters", "before s (one pass per text)", "after s (batched)",
                  "speed-up", "max rel error after", "max rel error before"], rows))  # fmt: skip
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
