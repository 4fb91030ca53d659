"""Do the tiny bases copy from their context, and does pre-training with repeated spans teach them to?

In-context learning and the prefix attacks (ReCaLL, Con-ReCaLL) measure something only when a model
uses what its context holds. For one family and pre-training profile this pre-trains a fresh base with
``--repeats`` of its windows holding a copied span (``span``: a span of the text copied to a later place,
``PretrainProfile.repeats``) or a random-token sequence repeated through the window (``random``: the
synthetic data that teaches small transformers induction heads), and prints held-out and unigram loss
and the copy gain (:func:`privauditor.tasks.models._pretrain.copy_gain`: the per-token NLL drop of a
span's second occurrence in one context against its first) on held-out corpus text and on finance
records. A base copies when the gain is well above 0 (the issue's bar: 1 nat). The last line is JSON.

    python benchmarks/copy_pretraining.py --family llama --repeats 0.5 [--mode random] [--steps 1200]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch

from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.models import _pretrain
from privauditor.tasks.models._spec import FAMILIES, PROFILES, TinyArchitecture
from privauditor.tasks.models._tiny import _special_ids, _tokenizer


def random_repeats(vocabulary: int):
    """``with_repeats``'s ``random`` kind: in a ``share`` of windows, a random sequence of non-special
    tokens (8 to a quarter-window long) repeated through the window (causal), or placed at the encoder's
    start and again at the decoder's (seq2seq)."""
    return lambda windows, objective, share, gen: _random(windows, objective, share, gen, vocabulary)


def _random(windows: torch.Tensor, objective: str, share: float, gen: torch.Generator, vocabulary: int):
    if not share or objective == "mlm":
        return windows
    out, width = windows.clone(), windows.shape[1]
    cut = width // 4
    for row in (torch.rand(out.shape[0], generator=gen) < share).nonzero().flatten().tolist():
        length = int(torch.randint(8, cut + 1, (1,), generator=gen))
        sequence = torch.randint(5, vocabulary, (length,), generator=gen)
        if objective == "seq2seq":
            out[row, :length] = sequence
            out[row, cut : cut + length] = sequence
        else:
            out[row] = sequence.repeat(width // length + 1)[:width]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="llama")
    parser.add_argument("--repeats", type=float, default=0.5, help="share of windows with a repeat")
    parser.add_argument("--mode", choices=["span", "random"], default="span")
    parser.add_argument("--profile", default="fast", choices=sorted(PROFILES))
    parser.add_argument("--steps", type=int, default=None, help="the profile's steps unless given")
    args = parser.parse_args()
    torch.set_num_threads(2)
    corpus, _, tokenizer = _tokenizer()
    if args.mode == "random":
        _pretrain.with_repeats = random_repeats(len(tokenizer))
    family = FAMILIES.get(args.family)
    profile = replace(
        PROFILES[args.profile], repeats=args.repeats, steps=args.steps or PROFILES[args.profile].steps
    )
    profile = replace(profile, lr=profile.lr * family.pretrain_lr_scale)
    config = family.tiny_config(TinyArchitecture(), len(tokenizer), _special_ids(tokenizer))
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    objective = "seq2seq" if family.seq2seq else "causal"
    torch.manual_seed(profile.seed)
    model = (AutoModelForSeq2SeqLM if family.seq2seq else AutoModelForCausalLM).from_config(config)
    started = time.perf_counter()
    report = _pretrain.pretrain(
        model, tokenizer, corpus.train, corpus.held_out, objective, profile, args.family
    )
    records = [e.prompt + e.target for e in load_dataset("finance").examples[:48]]
    figures = {
        "family": args.family, "mode": args.mode, "repeats": args.repeats, "profile": args.profile,
        "steps": profile.steps, "held_out_loss": report["held_out_loss"], "unigram_loss": report["unigram_loss"],
        "copy_gain_corpus": round(_pretrain.copy_gain(model, tokenizer, corpus.held_out[:48], objective), 3),
        "copy_gain_records": round(_pretrain.copy_gain(model, tokenizer, records, objective, length=24), 3),
        "seconds": round(time.perf_counter() - started),
    }  # fmt: skip
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
