"""Scoring cost: privauditor's signal store + logit attacks vs MIMIR's own loop vs plain forward passes.

On a model shaped like a real one (LLaMA layout, random weights: 6 layers, hidden 512, vocabulary 32k by
default), on a tiny one, and on the real pre-trained base ``smollm2-135m`` (135 M parameters, vocabulary
49,152, its own tokenizer; docs/real-base.md), for the same texts (offline finance records, their
targets scored after their prompts), it times, side by side in one run:

- ``forward``: plain batched forward passes producing the logits of the same texts (inference mode),
  batched in input order; ``length-bucketed forward``: the same with the texts sorted by length, as
  ``score_examples`` batches them (so ``overhead_vs_bucketed_forward`` isolates the scoring work);
- ``privauditor``: ``score_examples`` (per-token logp, mu, sigma) + the logit attacks (loss, reference
  from stored reference signals, zlib, min_k, min_k_pp) on the stored signals;
- ``mimir`` (the headline, ``speedup_vs_mimir``): MIMIR's loop as its ``run.py`` runs it, one text at a
  time: one pass through the target per text shared by LOSS, zlib, Min-K% and Min-K%++, one through the
  reference per text, each record tokenised whole, every token after the first scored, K = int(0.2 n);
  against privauditor doing the whole work of one cell (the reference model's signals, the target's,
  the five attacks) on the same records as whole texts (empty prompt, a BOS first in both), those
  shorter than the max length, so that neither side cuts (here) or slides a window (MIMIR) and both
  score the same tokens. Each side is timed three times, alternated with privauditor writing the signal
  store's format 1 as it did before format 2 (``speedup_vs_mimir_v1_store``), and the medians compared,
  so that a drift in the machine's speed does not pass for a change of code. The benchmark fails unless
  each attack's scores agree to 1e-4 of the attack's largest score. On the real base the reference model
  is the base with seeded noise on every weight (1 % of each tensor's standard deviation; a model of the
  same vocabulary, since the loop is timed, not the model), and the texts go to MIMIR's loop as token ids
  (its ``get_probabilities(text, tokens=...)``) with the BOS privauditor puts first, since this tokenizer
  adds none;
- ``store_v2_vs_v1``: ``score_examples`` writing the signal store's format 2 (also the top-1 log p, the
  token's rank and the top-k log-sum-exp) against format 1 (logp, mu, sigma): every batch scored in both
  formats back to back, which goes first alternating, each format's seconds summed over all the texts;
  the median of three such runs;
- ``naive`` (a secondary figure): per text and per attack one forward pass keeping the full-vocabulary
  log-softmax (the reference attack also runs the reference model per text), written as MIMIR's
  ``get_probabilities`` is (labels passed to the model, each target's log-prob read with ``.item()``);
  ``vectorised naive``: the same passes with one gather per text and no loss, a stricter baseline.
  Both must give privauditor's scores.

Then, in fresh processes with vocabularies of 8k and 64k, the peak RSS of scoring every text against
that of one plain forward pass (the model's weights and one batch of its logits), each measured from a
reset of the process's peak. The last line is one JSON object.

    python benchmarks/scoring.py [--texts 256] [--layers 6] [--hidden 512] [--vocab 32000] [--real smollm2-135m]
                                 [--only real-shaped tiny smollm2-135m] [--no-memory]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import torch

from privauditor.orchestrator.tables import render
from privauditor.tasks.attacks import build_attack
from privauditor.tasks.datasets import Example, load_dataset
from privauditor.tasks.passes.batches import length_order
from privauditor.tasks.passes.forward import score_examples
from privauditor.tasks.passes.signal_table import Signals
from privauditor.tasks.training.loop import collate, encode

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


def real_base(name: str):
    """A registered pre-trained base (built or read from the cache) and, as its reference, the same base
    with seeded noise of 1 % of each tensor's standard deviation."""
    import copy

    from privauditor.tasks.models import load_model

    loaded = load_model(name, device="cpu")
    model = loaded.model.float().eval()
    reference = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for weight in reference.parameters():
            if weight.numel() > 1:
                weight.add_(torch.randn(weight.shape, generator=generator) * 0.01 * weight.std())
    return model, reference, loaded.tokenizer


def timed(work):
    started = time.perf_counter()
    out = work()
    return out, time.perf_counter() - started


@torch.inference_mode()
def plain_forward(model, tokenizer, examples, max_length, batch_size, by_length=False):
    data = encode(tokenizer, examples, max_length, False)
    if by_length:  # the same length-bucketed batches as score_examples forms
        data = [data[i] for i in length_order(data)]
    for start in range(0, len(data), batch_size):
        batch = collate(data[start : start + batch_size], tokenizer.pad_token_id, False)
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # noqa: B018


def signals_of(model, tokenizer, examples, max_length, batch_size, extended=True):
    stats = score_examples(model, tokenizer, examples, max_length, False, batch_size, extended=extended)
    texts = tokenizer.batch_decode([s.token_ids.tolist() for s in stats])  # as the cell does
    return Signals.from_stats([e.sample_id for e in examples], np.zeros(len(examples), bool), stats, texts)


def privauditor_scores(model, tokenizer, examples, max_length, batch_size, reference_signals, extended=True):
    signals = signals_of(model, tokenizer, examples, max_length, batch_size, extended)
    views = {"signals": signals, "reference": reference_signals}
    return {name: np.asarray(build_attack(name).score(views)) for name in ATTACKS}


def _mimir_logprobs(net, item, pad_id, all_probs=False):
    """One text through ``net`` as MIMIR's ``get_probabilities`` does it: labels passed (so the model
    computes its own loss too), the full log-softmax kept, each target's log-prob read with ``.item()``."""
    batch = collate([item], pad_id, False)
    labels = batch["labels"]
    logits = net(input_ids=batch["input_ids"], labels=labels).logits
    full = torch.log_softmax(logits[..., :-1, :].float(), -1)  # T x V kept
    targets = labels[0, 1:]
    logp = [full[0, i, token].item() for i, token in enumerate(targets) if token != -100]
    if not all_probs:
        return np.asarray(logp), None
    rows = full[0][targets != -100]
    return np.asarray(logp), {"prob": rows.exp(), "log_prob": rows}


def _vectorised_logprobs(net, item, pad_id, all_probs=False):
    """The same with one gather instead of the per-token loop and no loss: a stricter baseline."""
    batch = collate([item], pad_id, False)
    full = torch.log_softmax(net(input_ids=batch["input_ids"]).logits[0, :-1].float(), -1)
    targets = batch["labels"][0, 1:]
    rows, tokens = full[targets != -100], targets[targets != -100]
    logp = rows.gather(-1, tokens[:, None]).squeeze(-1).double().numpy()
    return logp, ({"prob": rows.exp(), "log_prob": rows} if all_probs else None)


@torch.inference_mode()
def naive_scores(model, reference, tokenizer, examples, max_length, logprobs=_mimir_logprobs):
    """Per text, per attack: a fresh forward pass and the full log-softmax, as MIMIR's loop does."""
    scores, pad_id = {name: [] for name in ATTACKS}, tokenizer.pad_token_id
    for item in encode(tokenizer, examples, max_length, False):
        for name in ATTACKS:
            logp, full = logprobs(model, item, pad_id, all_probs=name == "min_k_pp")
            if name == "loss":
                scores[name].append(logp.mean())
            elif name == "reference":
                scores[name].append(logp.mean() - logprobs(reference, item, pad_id)[0].mean())
            elif name == "zlib":
                targets = [t for t in item["labels"][1:] if t != -100]
                text = tokenizer.decode(targets)
                scores[name].append(logp.mean() / len(zlib.compress(text.encode("utf-8"))))
            else:
                if name == "min_k_pp":
                    mu = (full["prob"] * full["log_prob"]).sum(-1).double()
                    second = (full["prob"] * full["log_prob"].square()).sum(-1).double()
                    logp = (logp - mu.numpy()) / (second - mu.square()).clamp_min(0).sqrt().numpy()
                k = max(1, int(len(logp) * 0.2))  # privauditor's count (MIMIR: int(n * 0.2))
                scores[name].append(np.sort(logp)[:k].mean())
    return {name: np.asarray(v) for name, v in scores.items()}


def _mimir_probabilities(net, ids, all_probs=False):
    """MIMIR's ``get_probabilities`` for one text (batch of one, no attention mask): labels passed, the
    log-softmax of every position but the last moved to the CPU, each next token's log-prob a float."""
    ids = torch.tensor([ids])
    logits = net(input_ids=ids, labels=ids).logits.cpu()
    rows = torch.log_softmax(logits[0, :-1], dim=-1)
    logp = rows.gather(-1, ids[0, 1:, None]).squeeze(-1).tolist()
    return logp, (rows if all_probs else None)


@torch.inference_mode()
def mimir_scores(model, reference, tokenizer, texts, max_length):
    """MIMIR's loop (``run.py``'s ``get_mia_scores``): per text one pass through the target shared by LOSS,
    zlib, Min-K% and Min-K%++, then one through the reference for the reference attack; each text
    tokenised alone with the tokenizer's special tokens, a BOS first as LLaMA's tokenizer adds it (the
    offline one adds none), every token after the first scored; K = int(0.2 n) tokens; MIMIR's sign
    (lower = member) turned round so that higher = member, as privauditor's."""
    scores = {name: [] for name in ATTACKS}
    for text in texts:
        ids = tokenizer(text)["input_ids"]  # MIMIR's tokenisation; the BOS privauditor puts first
        ids = ([tokenizer.bos_token_id] if ids[:1] != [tokenizer.bos_token_id] else []) + ids
        ids = ids[:max_length]
        logp, rows = _mimir_probabilities(model, ids, all_probs=True)
        loss = -np.mean(logp)
        k = int(len(logp) * 0.2)
        probs = rows.exp()
        mu = (probs * rows).sum(-1)
        sigma = ((probs * rows.square()).sum(-1) - mu.square()).sqrt()
        standard = ((torch.tensor(logp) - mu) / sigma).tolist()
        scores["loss"].append(-loss)
        scores["zlib"].append(-loss / len(zlib.compress(bytes(text, "utf-8"))))
        scores["min_k"].append(np.mean(sorted(logp)[:k]))
        scores["min_k_pp"].append(np.mean(sorted(standard)[:k]))
        scores["reference"].append(-(loss + np.mean(_mimir_probabilities(reference, ids)[0])))
    return {name: np.asarray(v) for name, v in scores.items()}


def against_mimir(model, reference, tokenizer, examples, max_length, batch_size, texts):
    """privauditor (the reference model's signals and the target's, then every attack) against MIMIR's
    loop on the same records as whole texts (prompt empty, so both score the same tokens after a BOS);
    both timed on ``texts`` records, alternated three times with privauditor writing the signal store's
    format 1 (``v1_store``: what it did before format 2), the median of each. Fails unless every attack's
    scores agree to 1e-4 of its largest score."""
    chosen = [Example(e.sample_id, "", e.target) for e in examples[:texts]]
    # MIMIR's K is 0 below 5 tokens; a text longer than max_length would be cut here and slid over there
    chosen = [e for e in chosen if 5 <= len(tokenizer(e.target)["input_ids"]) < max_length]

    def cell(extended):
        reference_signals = signals_of(reference, tokenizer, chosen, max_length, batch_size, extended)
        return privauditor_scores(
            model, tokenizer, chosen, max_length, batch_size, reference_signals, extended
        )

    times = {"ours": [], "v1_store": [], "mimir": []}
    for _ in range(3):
        ours, took = timed(lambda: cell(True))
        times["ours"].append(took)
        times["v1_store"].append(timed(lambda: cell(False))[1])
        theirs, took = timed(
            lambda: mimir_scores(model, reference, tokenizer, [e.target for e in chosen], max_length)
        )
        times["mimir"].append(took)
    ours_s, v1_store_s, mimir_s = (float(np.median(times[key])) for key in ("ours", "v1_store", "mimir"))
    worst = {}
    for name in ATTACKS:
        # relative to the attack's largest score: the reference score is a difference of two mean
        # log-probs, near zero for some texts, where a per-text ratio would only measure float32 rounding
        worst[name] = float(np.max(np.abs(ours[name] - theirs[name])) / np.max(np.abs(theirs[name])))
        if worst[name] > 1e-4:
            raise SystemExit(
                f"{name}: privauditor's scores differ from MIMIR's loop by {worst[name]:.1e} of its largest score"
            )
    return {
        "privauditor_with_reference_s": ours_s,
        "privauditor_v1_store_s": v1_store_s,
        "mimir_s": mimir_s,
        "texts": len(chosen),
        "rel_diff": worst,
    }


def store_formats(model, tokenizer, examples, max_length, batch_size, runs=3):
    """Seconds of ``score_examples`` writing the signal store's format 1 (logp, mu, sigma) and format 2 (also
    top1_logp, rank, topk_lse): each of its length-bucketed batches scored in both formats back to back,
    the format that goes first alternating from batch to batch and from run to run, and each format's
    time summed over the batches; the median of ``runs`` runs. Whole runs of one format after the other
    measured the machine as much as the format on a shared 2-core machine (benchmarks/README.md): a batch
    takes about a second, so a drift in speed falls on both formats alike."""
    order = length_order(encode(tokenizer, examples, max_length, False))
    batches = [[examples[i] for i in order[s : s + batch_size]] for s in range(0, len(order), batch_size)]
    times = {False: [0.0] * runs, True: [0.0] * runs}
    for run in range(runs):
        for number, batch in enumerate(batches):  # the batches score_examples forms
            for extended in (False, True) if (run + number) % 2 == 0 else (True, False):
                times[extended][run] += timed(lambda e=extended, b=batch: score_examples(
                    model, tokenizer, b, max_length, False, batch_size, extended=e
                ))[1]  # fmt: skip
    return float(np.median(times[False])), float(np.median(times[True]))


def compare(model, reference, tokenizer, examples, max_length, batch_size, naive_texts):
    reference_signals = signals_of(
        reference, tokenizer, examples, max_length, batch_size
    )  # stored beforehand
    _, forward_s = timed(lambda: plain_forward(model, tokenizer, examples, max_length, batch_size))
    _, bucketed_s = timed(lambda: plain_forward(model, tokenizer, examples, max_length, batch_size, True))
    ours, ours_s = timed(
        lambda: privauditor_scores(model, tokenizer, examples, max_length, batch_size, reference_signals)
    )
    subset, worst = examples[:naive_texts], 0.0
    got = {"forward_s": forward_s, "bucketed_forward_s": bucketed_s, "privauditor_s": ours_s}
    for key, logprobs in (("naive_s", _mimir_logprobs), ("vectorised_naive_s", _vectorised_logprobs)):
        naive, naive_s = timed(
            lambda f=logprobs: naive_scores(model, reference, tokenizer, subset, max_length, f)
        )
        worst = max([worst] + [float(np.max(np.abs(naive[a] - ours[a][: len(subset)]))) for a in ATTACKS])
        got[key] = naive_s * len(examples) / len(subset)
    return got | {"max_abs_diff": worst}


def _peak_mb(reset: bool = False) -> float:
    """This process's peak resident memory in MB since the last reset (Linux VmHWM; ``reset`` starts a
    new peak from the current size), so each phase's peak is not hidden under an earlier one's."""
    status = Path("/proc/self/status")
    if not status.exists():  # elsewhere: the whole process's peak
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if reset:
        Path("/proc/self/clear_refs").write_text("5")
    line = next(x for x in status.read_text().splitlines() if x.startswith("VmHWM"))
    return int(line.split()[1]) / 1024


def child_peak_rss(
    vocab: int, layers: int, hidden: int, texts: int, max_length: int, batch_size: int
) -> None:
    """In a fresh process: the peak RSS of one plain forward pass (model + one batch of logits), then,
    from a reset, the peak RSS of scoring every text."""
    tokenizer, examples = tokenizer_and_texts(texts)
    model = build_model(layers, hidden, vocab)
    _peak_mb(reset=True)
    plain_forward(model, tokenizer, examples[:batch_size], max_length, batch_size)
    base = _peak_mb()
    _peak_mb(reset=True)
    signals_of(model, tokenizer, examples, max_length, batch_size)
    print(json.dumps({"model_and_logits_mb": base, "peak_mb": _peak_mb()}))


# glibc keeps freed memory of mid-sized blocks for reuse, by thresholds it adapts as the process runs:
# how much it keeps varies from run to run (measured: scoring's peak at 64k from 0.90 to 1.57 GB). A fixed
# threshold returns freed blocks to the system at once, so the peak is what the work itself holds
# (scoring then takes 1.4-1.7x as long, which is why it does not run that way).
FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}


def peak_rss(vocab: int, args, env: dict[str, str]) -> dict[str, float]:
    command = [sys.executable, __file__, "--child-vocab", str(vocab), "--layers", "2", "--hidden", str(args.hidden),
               "--texts", str(min(args.texts, 64)), "--max-length", str(args.max_length), "--batch-size", str(args.batch_size)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=os.environ | env)
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
    parser.add_argument(
        "--real", default="smollm2-135m", help="a registered pre-trained base to time too ('' for none)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="SUBJECT",
        help="time only these: real-shaped, tiny and/or the --real base",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-RSS measurements")
    parser.add_argument("--child-vocab", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child_vocab:
        child_peak_rss(
            args.child_vocab, args.layers, args.hidden, args.texts, args.max_length, args.batch_size
        )
        return 0
    tokenizer, examples = tokenizer_and_texts(args.texts)
    subjects = {
        "real-shaped": lambda: (*[build_model(args.layers, args.hidden, args.vocab, s) for s in (0, 1)], tokenizer),
        "tiny": lambda: (*[build_model(2, 128, len(tokenizer), s) for s in (0, 1)], tokenizer),
    }  # fmt: skip
    if args.real:
        subjects[args.real] = lambda: real_base(args.real)
    if args.only:
        unknown = sorted(set(args.only) - set(subjects))
        if unknown:
            parser.error(f"--only: unknown subject(s) {', '.join(unknown)} (known: {', '.join(subjects)})")
        subjects = {k: v for k, v in subjects.items() if k in args.only}
    rows, figures = [], {}
    for label, build in subjects.items():
        model, reference, tok = build()
        config = model.config
        shape = f"{config.num_hidden_layers}x{config.hidden_size}, V {config.vocab_size}"
        got = compare(model, reference, tok, examples, args.max_length, args.batch_size, args.naive_texts)
        mimir = against_mimir(model, reference, tok, examples, args.max_length, args.batch_size, args.texts)
        v1_s, v2_s = store_formats(model, tok, examples, args.max_length, args.batch_size)
        rows.append([label, shape, round(got["forward_s"], 2), round(got["bucketed_forward_s"], 2),
                     round(got["privauditor_s"], 2), round(got["naive_s"], 1), round(got["vectorised_naive_s"], 1),
                     f"{got['max_abs_diff']:.1e}", round(mimir["mimir_s"], 1), round(mimir["privauditor_with_reference_s"], 1),
                     round(mimir["privauditor_v1_store_s"], 1),
                     f"{max(mimir['rel_diff'].values()):.1e}"])  # fmt: skip
        suffix = {"real-shaped": "", "tiny": "_tiny"}.get(label, "_real")
        figures[f"overhead_vs_forward{suffix}"] = round(got["privauditor_s"] / got["forward_s"], 3)
        figures[f"overhead_vs_bucketed_forward{suffix}"] = round(
            got["privauditor_s"] / got["bucketed_forward_s"], 3
        )
        figures[f"speedup_vs_mimir{suffix}"] = round(
            mimir["mimir_s"] / mimir["privauditor_with_reference_s"], 2
        )
        figures[f"speedup_vs_mimir_v1_store{suffix}"] = round(
            mimir["mimir_s"] / mimir["privauditor_v1_store_s"], 2
        )
        figures[f"store_v1_s{suffix}"], figures[f"store_v2_s{suffix}"] = round(v1_s, 2), round(v2_s, 2)
        figures[f"store_v2_vs_v1{suffix}"] = round(v2_s / v1_s, 3)
        figures[f"mimir_s{suffix}"] = round(mimir["mimir_s"], 2)
        figures[f"mimir_texts{suffix}"] = mimir["texts"]
        figures[f"privauditor_with_reference_s{suffix}"] = round(mimir["privauditor_with_reference_s"], 2)
        figures[f"max_rel_diff_vs_mimir{suffix}"] = max(mimir["rel_diff"].values())
        figures[f"speedup_vs_naive{suffix}"] = round(got["naive_s"] / got["privauditor_s"], 1)
        figures[f"speedup_vs_vectorised_naive{suffix}"] = round(
            got["vectorised_naive_s"] / got["privauditor_s"], 1
        )
        figures[f"max_abs_score_diff{suffix}"] = got["max_abs_diff"]
        del model, reference
    print(f"{len(examples)} texts, max length {args.max_length}, batch {args.batch_size}, {args.threads} threads; "
          f"naive timed on {args.naive_texts} texts and scaled")  # fmt: skip
    print(render(["model", "shape", "forward s", "length-bucketed forward s", "privauditor s", "naive s",
                  "vectorised naive s", "max |score diff|", "MIMIR's loop s", "privauditor (+ reference) s", "the same, store format 1 s",
                  "max rel. diff vs MIMIR"], rows))  # fmt: skip
    memory = []
    for vocab in () if args.no_memory else (8192, 65536):
        for label, env in (("", FIXED_MALLOC), ("_default_malloc", {})):
            got = peak_rss(vocab, args, env)
            figures[f"peak_rss_mb_vocab_{vocab // 1024}k{label}"] = round(got["peak_mb"], 1)
            figures[f"forward_rss_mb_vocab_{vocab // 1024}k{label}"] = round(got["model_and_logits_mb"], 1)
            memory.append([vocab, "fixed threshold" if env else "default", round(got["model_and_logits_mb"], 1),
                           round(got["peak_mb"], 1)])  # fmt: skip
    print(render(["vocab", "malloc", "peak RSS, one plain forward pass (MB)",
                  "peak RSS, scoring every text (MB)"], memory))  # fmt: skip
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
