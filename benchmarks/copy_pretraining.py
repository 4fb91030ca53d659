"""Do the tiny bases copy from their context, and which pre-training teaches them to?

In-context learning and the prefix attacks (ReCaLL, Con-ReCaLL) measure something only when a model
uses what its context holds. For one family and pre-training profile this pre-trains a fresh base with
the profile's copy curriculum (:class:`privauditor.tasks.models._spec.Induction`: random-token sequences
repeated through a window, then the corpus with a share of its windows holding a copied span), or with
the settings given here, and prints held-out and unigram loss and the copy gain
(:func:`privauditor.tasks.models._pretrain.copy_gain`: the per-token NLL drop of a span's second
occurrence in one context against its first) on held-out corpus text and on finance records, after the
curriculum and at the end. A base copies when the gain is well above 0 (the bar: 1 nat). The last line
is JSON.

    python benchmarks/copy_pretraining.py --family llama [--profile fast] [--induction-steps 0]
        [--then-lr 1e-2] [--repeats 0.0] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch

from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.models import _pretrain
from privauditor.tasks.models._spec import FAMILIES, PROFILES, Induction, TinyArchitecture
from privauditor.tasks.models._tiny import _special_ids, _tokenizer, family_profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="llama")
    parser.add_argument("--profile", default="fast", choices=sorted(PROFILES))
    parser.add_argument(
        "--induction-steps", type=int, help="curriculum steps (0: none; default: the profile's)"
    )
    parser.add_argument("--induction-lr", type=float, help="the curriculum's learning rate")
    parser.add_argument("--then-lr", type=float, help="the corpus stage's learning rate after the curriculum")
    parser.add_argument("--repeats", type=float, help="share of corpus windows with a copied span")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    corpus, _, tokenizer = _tokenizer()
    family = FAMILIES.get(args.family)
    profile = PROFILES[args.profile]
    induction = profile.induction or Induction()
    changes = {"steps": args.induction_steps, "lr": args.induction_lr, "then_lr": args.then_lr,
               "repeats": args.repeats}  # fmt: skip
    induction = replace(induction, **{k: v for k, v in changes.items() if v is not None})
    if args.induction_steps == 0 or (profile.induction is None and args.induction_steps is None):
        profile = replace(profile, induction=None, repeats=args.repeats or 0.0, lr=args.then_lr or profile.lr)
    else:
        profile = replace(profile, induction=induction)
    profile = family_profile(profile, family)  # the curriculum whatever the family's copy_curriculum
    config = family.tiny_config(TinyArchitecture(), len(tokenizer), _special_ids(tokenizer))
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    objective = "seq2seq" if family.seq2seq else "causal"
    torch.manual_seed(profile.seed)
    model = (AutoModelForSeq2SeqLM if family.seq2seq else AutoModelForCausalLM).from_config(config)
    records = [e.prompt + e.target for e in load_dataset("finance").examples[:48]]
    after_curriculum = None
    if profile.induction is not None:  # the curriculum's own effect, measured on a copy
        import copy

        probe = copy.deepcopy(model)
        _pretrain.learn_to_copy(probe, tokenizer, objective, profile.induction, profile.seed)
        after_curriculum = round(
            _pretrain.copy_gain(probe.eval(), tokenizer, records, objective, length=24), 3
        )
    started = time.perf_counter()
    report = _pretrain.pretrain(
        model, tokenizer, corpus.train, corpus.held_out, objective, profile, args.family
    )
    figures = {
        "family": args.family, "profile": args.profile,
        "induction": None if profile.induction is None else vars(profile.induction),
        "corpus_lr": profile.lr, "repeats": profile.repeats, "steps": profile.steps,
        "held_out_loss": report["held_out_loss"], "unigram_loss": report["unigram_loss"],
        "copy_gain_records_after_curriculum": after_curriculum,
        "copy_gain_corpus": round(_pretrain.copy_gain(model, tokenizer, corpus.held_out[:48], objective), 3),
        "copy_gain_records": round(_pretrain.copy_gain(model, tokenizer, records, objective, length=24), 3),
        "seconds": round(time.perf_counter() - started),
    }  # fmt: skip
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
