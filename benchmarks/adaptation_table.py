"""Every (family x technique) pair at the technique's default settings on offline data: does it learn?

For each tiny base (pre-trained with the active profile) and each supported technique, trains on the
members of a default-size split of one dataset and prints trainable parameters, first- and last-epoch
training loss, seconds per epoch and the utility (validation NLL). The last line is one JSON object.

Run::

    python benchmarks/adaptation_table.py --dataset finance --members 100
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import time

from privauditor.orchestrator.tables import render
from privauditor.tasks.adaptations import ADAPTATIONS, build_adaptation
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.models import MODELS, load_model
from privauditor.tasks.splits import draw_split
from privauditor.tasks.training import TrainConfig, apply_seeded, train, validation_loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="finance")
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--models", nargs="+", default=[n for n, s in MODELS.items() if s.source == "tiny"])
    parser.add_argument("--techniques", nargs="+", default=ADAPTATIONS.names())
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    split = draw_split(load_dataset(args.dataset), args.members, args.members, args.members, seed=0)
    rows, results = [], []
    for model_name in args.models:
        loaded = load_model(model_name)
        for technique in args.techniques:
            adaptation = build_adaptation(technique)
            if adaptation.unsupported_reason(loaded.family.name):
                continue
            model = apply_seeded(adaptation, copy.deepcopy(loaded.model), loaded.family, seed=0)
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            config = TrainConfig(
                epochs=adaptation.default_epochs, lr=adaptation.default_lr, max_length=args.max_length
            )
            started = time.perf_counter()
            result = train(model, loaded.tokenizer, split.members, config, loaded.seq2seq)
            seconds = time.perf_counter() - started
            utility = validation_loss(
                model, loaded.tokenizer, split.validation, args.max_length, loaded.seq2seq
            )
            per_epoch = seconds / max(1, config.epochs)
            first, last = result.loss_first_epoch, result.loss_last_epoch
            rows.append(
                [
                    model_name,
                    technique,
                    trainable,
                    f"{first:.3f}",
                    f"{last:.3f}",
                    f"{per_epoch:.1f}",
                    f"{utility:.3f}",
                ]
            )
            results.append(
                {
                    "model": model_name,
                    "adaptation": technique,
                    "trainable_params": trainable,
                    "loss_first_epoch": first,
                    "loss_last_epoch": last,
                    "seconds_per_epoch": round(per_epoch, 2),
                    "utility_loss": round(utility, 4),
                }
            )
            print(
                render(
                    ["model", "adaptation", "trainable", "loss ep1", "loss last", "s/epoch", "val NLL"],
                    rows[-1:],
                ).splitlines()[-1],
                flush=True,
            )
    print()
    print(render(["model", "adaptation", "trainable", "loss ep1", "loss last", "s/epoch", "val NLL"], rows))
    print(json.dumps({"dataset": args.dataset, "members": args.members, "pairs": results}))


if __name__ == "__main__":
    main()
