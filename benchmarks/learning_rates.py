"""Each technique's learning rate on each offline base, chosen by validation NLL under the constant schedule.

The rule, fixed before any result is seen and never reading an attack's output: for every tiny base
and every technique it supports, train on the members of a split of each dataset's reserved pool (seed 0;
records no sweep's split draws from, so no audited record ever chose a rate) at rates on a ladder a
factor √10 apart, snapshotting at the default sweep's checkpoint schedule; a
rate's figure is its lowest validation NLL over the checkpoints (the checkpoint a practitioner would
keep), averaged over the datasets; the chosen rate has the lowest figure (ties: the smaller rate). The
ladder starts at the technique's class default (``--start-decades D``: at 10^D times it, a start
only, for cost: the walk below still decides) and one step either side, and grows a step past an end
whenever the best rate sits on it, so the choice is never at an edge of what was tried. ``--write``
stores the choice in ``tasks/adaptations/_rates.py`` beside the settings it was made with (one block per
run: a run over other bases replaces only their rates), which cells on those bases read (a sweep's
``train.lr`` still overrides it; hub models keep the class defaults).

DP-SGD's rates (``--dp-epsilon E``): the same rule with every rate trained by the ``dp`` defence at ε = E
(its defaults otherwise: clipping norm 1, δ = min(1e-5, n^-1.1), Poisson batches), kept apart in
``DP_RATES``, which ``dp`` cells read before the undefended ones: noise and clipping move the best rate,
so DP's utility cost is not an artefact of a rate tuned without them. One rate per (technique, base) for
every ε: the ``defences`` sweep's middle ε, 4, chooses it.

Run (the tiny bases; the real base, at the ``real`` sweep's size, docs/real-base.md)::

    python benchmarks/learning_rates.py --write
    python benchmarks/learning_rates.py --models smollm2-135m --datasets finance --members 24 --start-decades -1 --write
    python benchmarks/learning_rates.py --models tiny-llama tiny-opt --datasets finance --dp-epsilon 4 --write
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import os
import pprint
import time
from pathlib import Path
from typing import Any

import torch
from adaptation_table import supported_pairs  # the script beside this one (its folder is on sys.path)

from privauditor.orchestrator.tables import render
from privauditor.tasks.adaptations import ADAPTATIONS, build_adaptation
from privauditor.tasks.data.splits import draw_reserved
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.models import MODELS, active_profile
from privauditor.tasks.spec.config import SplitConfig
from privauditor.tasks.training.loop import Loop, TrainConfig, apply_seeded, train
from privauditor.tasks.training.snapshots import restore, trainable_state
from privauditor.tasks.training.utility import validation_loss

LADDER = [round(m * 10.0**e, 10) for e in range(-6, 2) for m in (1, 3)]  # 1e-6, 3e-6, ..., 10, 30
HEADER = ["model", "technique", "lr", "val NLL", "tried (lr:NLL)", "s"]
RATES_FILE = Path(__file__).resolve().parents[1] / "tasks" / "adaptations" / "_rates.py"


def figure(loaded, technique, splits, lr, *, checkpoints, dp_epsilon=None, **sizes) -> float:
    """Lowest validation NLL over the checkpoints, averaged over the splits (trained under DP-SGD at
    ``dp_epsilon`` where it is set; ``sizes``: ``max_length`` and ``batch_size``)."""
    max_length, batch_size = sizes["max_length"], sizes["batch_size"]
    lows = []
    for split in splits:
        adaptation = build_adaptation(technique)
        model = apply_seeded(adaptation, copy.deepcopy(loaded.model), loaded.family, seed=0)
        states = {}
        config = TrainConfig(epochs=int(checkpoints[-1]), lr=lr, batch_size=batch_size, max_length=max_length)

        def keep(epoch: float, step: int, states: dict = states, model: Any = model) -> None:
            states[step] = trainable_state(model)

        guarded = {} if dp_epsilon is None else dp_loop(dp_epsilon, split.members, config, loaded.seq2seq)
        train(
            model,
            loaded.tokenizer,
            split.members,
            config,
            loaded.seq2seq,
            Loop(checkpoints=checkpoints, on_checkpoint=keep, **guarded),
        )
        losses = []
        for state in states.values():
            restore(model, state)
            losses.append(
                validation_loss(model, loaded.tokenizer, split.validation, max_length, loaded.seq2seq)
            )
        lows.append(min(losses))
    mean = sum(lows) / len(lows)
    return mean if mean == mean else float("inf")  # a rate that diverges (NaN) loses


def dp_loop(epsilon: float, members, config: TrainConfig, seq2seq: bool) -> dict[str, Any]:
    """The ``dp`` defence's training hooks at ``epsilon`` (its other settings at their defaults)."""
    from privauditor.tasks.defences import TrainingRun
    from privauditor.tasks.defences.dp import DPDefence

    resolved = DPDefence().resolve({"epsilon": epsilon}, len(members))
    run = TrainingRun(len(members), config.batch_size, config.epochs, 0, seq2seq)
    return DPDefence().guard(resolved, run).loop


def choose(measure, start: float) -> tuple[float, dict[float, float]]:
    """The ladder rate with the lowest figure, widening the ladder past an end the best sits on."""
    index = min(range(len(LADDER)), key=lambda i: abs(LADDER[i] - start))
    tried = {LADDER[i]: measure(LADDER[i]) for i in range(max(0, index - 1), min(len(LADDER), index + 2))}
    while True:
        best = min(tried, key=lambda lr: (tried[lr], lr))
        position = LADDER.index(best)
        step = -1 if best == min(tried) else 1 if best == max(tried) else 0
        if step == 0 or not 0 <= position + step < len(LADDER):
            return best, tried
        tried[LADDER[position + step]] = measure(LADDER[position + step])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["finance", "sql"])
    parser.add_argument("--members", type=int, default=64)
    parser.add_argument("--validation", type=int, default=32)
    parser.add_argument("--checkpoints", type=float, nargs="+", default=[0.25, 0.5, 1, 2, 4])
    parser.add_argument("--max-length", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--models", nargs="+", default=[n for n, s in MODELS.items() if s.source == "tiny"])
    parser.add_argument(
        "--techniques", nargs="+", default=[n for n in ADAPTATIONS.names() if build_adaptation(n).trains]
    )
    parser.add_argument(
        "--start-decades", type=float, default=0.0, help="start the ladder at 10^D times the class default"
    )
    parser.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1), help="torch threads")
    parser.add_argument("--dp-epsilon", type=float, help="choose DP-SGD's rates, trained at this epsilon")
    parser.add_argument("--write", action="store_true", help=f"store the choice in {RATES_FILE.name}")
    parser.add_argument("--json", type=Path, help="also write the settings and the choice to this file")
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="combine --json files of runs over other models or techniques"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    if args.merge:  # runs over disjoint models or techniques (e.g. one per core), same settings
        parts = [json.loads(p.read_text()) for p in args.merge]
        chosen: dict[str, dict[str, float]] = {}
        for part in parts:
            for technique, by_model in part["chosen"].items():
                chosen.setdefault(technique, {}).update(by_model)
        settings = parts[0]["settings"] | {  # runs split by base or by technique
            key: sorted({x for p in parts for x in p["settings"][key]}) for key in ("models", "techniques")
        }
        if len({p["settings"].get("start_decades", 0.0) for p in parts}) > 1:  # where each ladder began
            settings["start_decades"] = {
                t: p["settings"].get("start_decades", 0.0) for p in parts for t in p["settings"]["techniques"]
            }
        print(render(HEADER, [row for part in parts for row in part["table"]]))
        if args.write:
            write_rates(settings, chosen, dp=settings.get("dp_epsilon") is not None)
        return

    sizes = SplitConfig(args.members, args.members, args.validation)
    splits = [draw_reserved(load_dataset(d), sizes, seed=0) for d in args.datasets]
    args.checkpoints = [int(c) if float(c).is_integer() else c for c in args.checkpoints]
    chosen: dict[str, dict[str, float]] = {}
    rows = []
    for model_name, loaded, technique, adaptation in supported_pairs(args.models, args.techniques):
        started = time.perf_counter()
        measure = functools.partial(
            figure, loaded, technique, splits, checkpoints=args.checkpoints, max_length=args.max_length,
            batch_size=args.batch_size, dp_epsilon=args.dp_epsilon,
        )  # fmt: skip
        start = adaptation.default_lr_for(loaded.family.name) * 10.0**args.start_decades  # the class default
        best, tried = choose(measure, start)
        chosen.setdefault(technique, {})[model_name] = best
        ladder = "  ".join(f"{lr:g}:{nll:.3f}" for lr, nll in sorted(tried.items()))
        rows.append(
            [
                model_name,
                technique,
                f"{best:g}",
                f"{tried[best]:.3f}",
                ladder,
                f"{time.perf_counter() - started:.0f}",
            ]
        )
        print(
            render(HEADER, rows[-1:]).splitlines()[-1],
            flush=True,
        )
    print()
    print(render(HEADER, rows))
    settings = {k: v for k, v in vars(args).items() if k not in ("write", "json", "threads")}
    settings |= {"profile": active_profile().name, "seed": 0, "pool": "reserved"}
    print(json.dumps({"settings": settings, "chosen": chosen}))
    if args.json:
        args.json.write_text(json.dumps({"settings": settings, "chosen": chosen, "table": rows}, indent=1))
    if args.write:
        write_rates(settings, chosen, dp=args.dp_epsilon is not None)


def write_rates(settings: dict, chosen: dict[str, dict[str, float]], dp: bool = False) -> None:
    """Store ``chosen`` and the settings it was chosen with in ``tasks/adaptations/_rates.py`` (DP-SGD's
    apart); the rates and settings blocks of other bases already there are kept."""
    from privauditor.tasks.adaptations import _rates

    settings = {k: v for k, v in settings.items() if k not in ("write", "json", "threads", "merge")}
    if not dp:
        settings.pop("dp_epsilon", None)
    models = set(settings["models"])
    blocks, rates = (_rates.DP_SETTINGS, _rates.DP_RATES) if dp else (_rates.SETTINGS, _rates.RATES)
    blocks = [b for b in blocks if not models & set(b["models"])] + [settings]
    rates = {t: {m: r for m, r in by.items() if m not in models} for t, by in rates.items()}
    for technique, by_model in chosen.items():
        rates.setdefault(technique, {}).update(by_model)
    rates = {t: dict(sorted(by.items())) for t, by in sorted(rates.items()) if by}
    kept = (_rates.SETTINGS, _rates.RATES) if dp else (_rates.DP_SETTINGS, _rates.DP_RATES)
    (blocks, rates), (dp_blocks, dp_rates) = (kept, (blocks, rates)) if dp else ((blocks, rates), kept)
    RATES_FILE.write_text(
        '"""Learning rates of each technique on each base, chosen by validation NLL under the constant\n'
        "schedule (the rule and the command: ``benchmarks/learning_rates.py``). Written by that script.\n"
        '"""\n\n'
        "#: the settings they were chosen with, one block per run (its ``models``)\n"
        f"SETTINGS = {pprint.pformat(blocks, width=100)}\n\n"
        "#: technique -> base -> learning rate\n"
        f"RATES: dict[str, dict[str, float]] = {pprint.pformat(rates, width=100)}\n\n"
        "#: the settings DP-SGD's rates were chosen with (``--dp-epsilon``), one block per run\n"
        f"DP_SETTINGS: list[dict] = {pprint.pformat(dp_blocks, width=100)}\n\n"
        "#: technique -> base -> learning rate under DP-SGD\n"
        f"DP_RATES: dict[str, dict[str, float]] = {pprint.pformat(dp_rates, width=100)}\n"
    )


if __name__ == "__main__":
    main()
