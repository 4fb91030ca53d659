"""Every (family x technique) pair at the technique's default settings on offline data: does it learn?

For each tiny base (pre-trained with the active profile) and each supported technique, trains on the
members of a default-size split of one dataset and prints trainable parameters, first- and last-epoch
training loss, seconds per epoch and the utility (validation NLL). A pair "learns clearly" when the
members' mean loss falls by at least ``--min-drop`` nats (default 0.05) from before training (the
technique applied, nothing trained yet) to the last epoch's mean training loss; the script exits 1 if
any pair does not. The last line is one JSON object.

Run::

    python benchmarks/adaptation_table.py --dataset finance --members 100
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import sys
import time

import torch

from privauditor.orchestrator.tables import render
from privauditor.tasks.adaptations import ADAPTATIONS, build_adaptation
from privauditor.tasks.data.splits import draw_split
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.models import MODELS, load_model
from privauditor.tasks.spec.config import SplitConfig
from privauditor.tasks.training.loop import TrainConfig, apply_seeded, train
from privauditor.tasks.training.utility import validation_loss


def supported_pairs(models, techniques):
    """(model name, loaded base, technique, adaptation) for every pair the technique supports, each base
    loaded once."""
    for model_name in models:
        loaded = load_model(model_name)
        for technique in techniques:
            adaptation = build_adaptation(technique)
            if not adaptation.unsupported_reason(loaded.family.name):
                yield model_name, loaded, technique, adaptation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="finance")
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--min-drop", type=float, default=0.05, help="nats the loss must fall")
    parser.add_argument("--models", nargs="+", default=[n for n, s in MODELS.items() if s.source == "tiny"])
    parser.add_argument(
        "--techniques",
        nargs="+",
        default=[n for n in ADAPTATIONS.names() if not build_adaptation(n).in_context],
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    sizes = SplitConfig(args.members, args.members, args.members)
    split = draw_split(load_dataset(args.dataset), sizes, seed=0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    header = [
        "model",
        "adaptation",
        "trainable",
        "before",
        "loss ep1",
        "loss last",
        "drop",
        "s/epoch",
        "val NLL",
    ]
    rows, results, flat = [], [], []
    for model_name, loaded, technique, adaptation in supported_pairs(args.models, args.techniques):
        model = apply_seeded(adaptation, copy.deepcopy(loaded.model), loaded.family, seed=0)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        config = TrainConfig(
            epochs=adaptation.default_epochs,
            lr=adaptation.default_lr_on(model_name, loaded.family.name),
            max_length=args.max_length,
        )
        before = validation_loss(model, loaded.tokenizer, split.members, args.max_length, loaded.seq2seq)
        started = time.perf_counter()
        result = train(model, loaded.tokenizer, split.members, config, loaded.seq2seq)
        seconds = time.perf_counter() - started
        utility = validation_loss(model, loaded.tokenizer, split.validation, args.max_length, loaded.seq2seq)
        per_epoch = seconds / max(1, config.epochs)
        first, last = result.loss_first_epoch, result.loss_last_epoch
        rows.append(
            [
                model_name,
                technique,
                trainable,
                f"{before:.3f}",
                f"{first:.3f}",
                f"{last:.3f}",
                f"{before - last:.3f}",
                f"{per_epoch:.1f}",
                f"{utility:.3f}",
            ]
        )
        results.append(
            {
                "model": model_name,
                "adaptation": technique,
                "trainable_params": trainable,
                "loss_before": round(before, 4),
                "loss_first_epoch": first,
                "loss_last_epoch": last,
                "seconds_per_epoch": round(per_epoch, 2),
                "utility_loss": round(utility, 4),
            }
        )
        if technique != "none" and not before - last >= args.min_drop:
            flat.append(f"{model_name}/{technique}")
        print(render(header, rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(render(header, rows))
    print(f"pairs whose loss fell < {args.min_drop} nats: {', '.join(flat) or 'none'}")
    print(json.dumps({"dataset": args.dataset, "members": args.members, "pairs": results, "flat": flat}))
    sys.exit(1 if flat else 0)


if __name__ == "__main__":
    main()
