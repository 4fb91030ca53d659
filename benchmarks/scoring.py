"""Scoring cost: privauditor's signal store + logit attacks vs plain forward passes vs a MIMIR-style loop.

On a model shaped like a real one (LLaMA layout, random weights: 6 layers, hidden 512, vocabulary 32k by
default) and on a tiny one, for the same texts (offline finance records, their targets scored after
their prompts), it times, side by side in one run:

- ``forward``: plain batched forward passes producing the logits of the same texts (inference mode),
  batched in input order; ``length-bucketed forward``: the same with the texts sorted by length, as
  ``score_examples`` batches them (so ``overhead_vs_bucketed_forward`` isolates the scoring work);
- ``privauditor``: ``score_examples`` (per-token logp, mu, sigma) + the logit attacks (loss, reference
  from stored reference signals, zlib, min_k, min_k_pp) on the stored signals;
- ``naive``: MIMIR-style, per text and per attack one forward pass keeping the full-vocabulary
  log-softmax (the reference attack also runs the reference model per text); its scores must equal
  privauditor's.

Then, in fresh processes, the peak RSS of scoring with vocabularies of 8k and 64k over the model's own
weights and one batch of logits. The last line is one JSON object.

    python benchmarks/scoring.py [--texts 256] [--layers 6] [--hidden 512] [--vocab 32000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import zlib

import numpy as np
import torch

from privauditor.orchestrator.tables import render
from privauditor.tasks.attacks import build_attack
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.scoring import score_examples
from privauditor.tasks.signals import Signals
from privauditor.tasks.training import collate, encode

ATTACKS = ("loss", "reference", "zlib", "min_k", "min_k_pp")


def build_model(layers: int, hidden: int, vocab: int, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 64), intermediate_size=hidden * 8 // 3, max_position_embeddings=512,
        tie_word_embeddings=False,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def tokenizer_and_texts(n: int):
    from privauditor.tasks.models import load_model

    tokenizer = load_model("tiny-llama", device="cpu").tokenizer  # the offline BPE tokenizer
    examples = list(load_dataset("finance").examples[:n])
    return tokenizer, examples


def timed(work):
    started = time.perf_counter()
    out = work()
    return out, time.perf_counter() - started


@torch.inference_mode()
def plain_forward(model, tokenizer, examples, max_length, batch_size, by_length=False):
    data = encode(tokenizer, examples, max_length, False)
    if by_length:  # the same length-bucketed batches as score_examples forms
        data = sorted(data, key=lambda item: len(item["input_ids"]))
    for start in range(0, len(data), batch_size):
        batch = collate(data[start : start + batch_size], tokenizer.pad_token_id, False)
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # noqa: B018


def signals_of(model, tokenizer, examples, max_length, batch_size):
    stats = score_examples(model, tokenizer, examples, max_length, False, batch_size)
    texts = tokenizer.batch_decode([s.token_ids.tolist() for s in stats])  # as the cell does
    return Signals.from_stats([e.sample_id for e in examples], np.zeros(len(examples), bool), stats, texts)


def privauditor_scores(model, tokenizer, examples, max_length, batch_size, reference_signals):
    signals = signals_of(model, tokenizer, examples, max_length, batch_size)
    return {name: np.asarray(build_attack(name).score(signals, reference_signals)) for name in ATTACKS}


@torch.inference_mode()
def naive_scores(model, reference, tokenizer, examples, max_length):
    """Per text, per attack: a fresh forward pass and the full log-softmax, as MIMIR's loop does."""

    def logprobs_of(net, item):
        batch = collate([item], tokenizer.pad_token_id, False)
        full = torch.log_softmax(net(input_ids=batch["input_ids"]).logits[0].float(), -1)  # T x V kept
        labels = batch["labels"][0, 1:]
        rows = full[:-1][labels != -100]
        return rows, labels[labels != -100]

    scores = {name: [] for name in ATTACKS}
    for item in encode(tokenizer, examples, max_length, False):
        for name in ATTACKS:
            rows, tokens = logprobs_of(model, item)
            logp = rows.gather(-1, tokens[:, None]).squeeze(-1).double().numpy()
            if name == "loss":
                scores[name].append(logp.mean())
            elif name == "reference":
                ref_rows, _ = logprobs_of(reference, item)
                ref = ref_rows.gather(-1, tokens[:, None]).squeeze(-1).double().numpy()
                scores[name].append(logp.mean() - ref.mean())
            elif name == "zlib":
                text = tokenizer.decode(tokens.tolist())
                scores[name].append(logp.mean() / len(zlib.compress(text.encode("utf-8"))))
            else:
                if name == "min_k_pp":
                    probs = rows.exp()
                    mu = (probs * rows).sum(-1)
                    sigma = ((probs * rows.square()).sum(-1) - mu.square()).clamp_min(0).sqrt()
                    logp = ((torch.from_numpy(logp) - mu.double()) / sigma.double()).numpy()
                k = max(1, int(np.ceil(len(logp) * 0.2)))
                scores[name].append(np.sort(logp)[:k].mean())
    return {name: np.asarray(v) for name, v in scores.items()}


def compare(model, reference, tokenizer, examples, max_length, batch_size, naive_texts):
    reference_signals = signals_of(
        reference, tokenizer, examples, max_length, batch_size
    )  # stored beforehand
    _, forward_s = timed(lambda: plain_forward(model, tokenizer, examples, max_length, batch_size))
    _, bucketed_s = timed(lambda: plain_forward(model, tokenizer, examples, max_length, batch_size, True))
    ours, ours_s = timed(
        lambda: privauditor_scores(model, tokenizer, examples, max_length, batch_size, reference_signals)
    )
    subset = examples[:naive_texts]
    naive, naive_s = timed(lambda: naive_scores(model, reference, tokenizer, subset, max_length))
    worst = max(float(np.max(np.abs(naive[a] - ours[a][: len(subset)]))) for a in ATTACKS)
    per_text = len(examples) / len(subset)
    return {
        "forward_s": forward_s,
        "bucketed_forward_s": bucketed_s,
        "privauditor_s": ours_s,
        "naive_s": naive_s * per_text,
        "max_abs_diff": worst,
    }


def child_peak_rss(
    vocab: int, layers: int, hidden: int, texts: int, max_length: int, batch_size: int
) -> None:
    """In a fresh process: peak RSS after building the model and one forward pass, then after scoring."""
    tokenizer, examples = tokenizer_and_texts(texts)
    model = build_model(layers, hidden, vocab)
    plain_forward(model, tokenizer, examples[:batch_size], max_length, batch_size)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    signals_of(model, tokenizer, examples, max_length, batch_size)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"model_and_logits_mb": base, "peak_mb": peak}))


def peak_rss(vocab: int, args) -> dict[str, float]:
    command = [sys.executable, __file__, "--child-vocab", str(vocab), "--layers", "2", "--hidden", str(args.hidden),
               "--texts", str(min(args.texts, 64)), "--max-length", str(args.max_length), "--batch-size", str(args.batch_size)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument(
        "--naive-texts", type=int, default=32, help="texts timed in the naive loop (scaled up)"
    )
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child-vocab", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child_vocab:
        child_peak_rss(
            args.child_vocab, args.layers, args.hidden, args.texts, args.max_length, args.batch_size
        )
        return 0
    tokenizer, examples = tokenizer_and_texts(args.texts)
    shapes = {"real-shaped": (args.layers, args.hidden, args.vocab), "tiny": (2, 128, len(tokenizer))}
    rows, figures = [], {}
    for label, (layers, hidden, vocab) in shapes.items():
        model, reference = build_model(layers, hidden, vocab, 0), build_model(layers, hidden, vocab, 1)
        got = compare(
            model, reference, tokenizer, examples, args.max_length, args.batch_size, args.naive_texts
        )
        rows.append([label, f"{layers}x{hidden}, V {vocab}", round(got["forward_s"], 2), round(got["bucketed_forward_s"], 2),
                     round(got["privauditor_s"], 2), round(got["naive_s"], 1), f"{got['max_abs_diff']:.1e}"])  # fmt: skip
        suffix = "" if label == "real-shaped" else "_tiny"
        figures[f"overhead_vs_forward{suffix}"] = round(got["privauditor_s"] / got["forward_s"], 3)
        figures[f"overhead_vs_bucketed_forward{suffix}"] = round(
            got["privauditor_s"] / got["bucketed_forward_s"], 3
        )
        figures[f"speedup_vs_naive{suffix}"] = round(got["naive_s"] / got["privauditor_s"], 1)
        figures[f"max_abs_score_diff{suffix}"] = got["max_abs_diff"]
    print(f"{len(examples)} texts, max length {args.max_length}, batch {args.batch_size}, {args.threads} threads; "
          f"naive timed on {args.naive_texts} texts and scaled")  # fmt: skip
    print(render(["model", "shape", "forward s", "length-bucketed forward s", "privauditor s", "naive s",
                  "max |score diff|"], rows))  # fmt: skip
    memory = []
    for vocab in (8192, 65536):
        got = peak_rss(vocab, args)
        figures[f"peak_rss_mb_vocab_{vocab // 1024}k"] = round(got["peak_mb"], 1)
        figures[f"model_and_logits_rss_mb_vocab_{vocab // 1024}k"] = round(got["model_and_logits_mb"], 1)
        memory.append([vocab, round(got["model_and_logits_mb"], 1), round(got["peak_mb"], 1)])
    print(render(["vocab", "RSS after model + one forward (MB)", "peak RSS after scoring (MB)"], memory))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
