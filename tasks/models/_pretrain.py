"""Pre-training of the offline tiny bases (causal LM, T5 prefix-LM, masked LM) and their evaluation.

Each step draws ``batch_size`` random windows of ``seq_len`` tokens from the corpus's training token
stream (paragraphs joined as ``<s> text </s>``). Causal models learn next-token prediction; T5 models get
the first quarter of a window as encoder input and predict the rest (a prefix-LM objective, the same
shape as privauditor's prompt → target use of T5); masked LMs learn BERT-style masking (40 % of positions).
Where the profile has a copy curriculum (:class:`~privauditor.tasks.models._spec.Induction`), causal and
T5 bases first learn to copy from context on repeated random-token windows (:func:`learn_to_copy`).

Evaluation is on held-out documents: the mean NLL (nats) of exactly the tokens the objective predicts,
beside the unigram baseline — the cross-entropy of those same tokens under training-token frequencies
(add-one smoothed). A base is a real pre-trained model when its loss is well below that baseline.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, replace

import torch

from ._spec import MASK_RATE, Induction, PretrainProfile

log = logging.getLogger(__name__)


def token_stream(texts, tokenizer) -> torch.Tensor:
    """All texts as one 1-D token tensor, each wrapped in ``<s> … </s>``."""
    ids: list[int] = []
    for encoded in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        ids += [tokenizer.bos_token_id, *encoded, tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.long)


def _windows(stream: torch.Tensor, seq_len: int, starts: torch.Tensor) -> torch.Tensor:
    return torch.stack([stream[s : s + seq_len] for s in starts.tolist()])


def _mask_tokens(batch: torch.Tensor, tokenizer, vocab_size: int, gen: torch.Generator):
    """BERT-style masking of MASK_RATE of positions: 80 % <mask>, 10 % random, 10 % unchanged."""
    labels = batch.clone()
    chosen = torch.rand(batch.shape, generator=gen) < MASK_RATE
    labels[~chosen] = -100
    inputs = batch.clone()
    roll = torch.rand(batch.shape, generator=gen)
    inputs[chosen & (roll < 0.8)] = tokenizer.mask_token_id
    random_ids = torch.randint(vocab_size, batch.shape, generator=gen)
    swap = chosen & (roll >= 0.8) & (roll < 0.9)
    inputs[swap] = random_ids[swap]
    return inputs, labels


def with_repeats(windows: torch.Tensor, objective: str, share: float, gen: torch.Generator) -> torch.Tensor:
    """``windows`` with, in a ``share`` of them, a span of 8 to a quarter-window of tokens copied to a
    later place: its second occurrence is predictable from the first alone, the pattern that makes a model
    copy from its context (induction heads; Olsson et al. 2022). Causal windows copy from the first half to
    anywhere after the span; seq2seq windows from the encoder's quarter into the decoder's part."""
    if not share or objective == "mlm":
        return windows
    out = windows.clone()
    width = out.shape[1]
    cut = width // 4

    def draw(low: int, high: int) -> int:  # uniform in [low, high]
        return int(torch.randint(low, high + 1, (1,), generator=gen))

    for row in (torch.rand(out.shape[0], generator=gen) < share).nonzero().flatten().tolist():
        length = draw(8, cut)
        if objective == "seq2seq":
            source, target = draw(0, cut - length), draw(cut, width - length)
        else:
            source = draw(0, width // 2 - length)
            target = draw(source + length, width - length)
        out[row, target : target + length] = windows[row, source : source + length]
    return out


def induction_windows(
    induction: Induction, first_id: int, vocab_size: int, gen: torch.Generator
) -> torch.Tensor:
    """One batch of the copy curriculum: per row a sequence of random tokens (ids from ``first_id``, past
    the special tokens), 8 to half a window long, repeated through the window."""
    width, rows = induction.window, []
    for _ in range(induction.batch_size):
        length = int(torch.randint(8, width // 2 + 1, (1,), generator=gen))
        sequence = torch.randint(first_id, vocab_size, (length,), generator=gen)
        rows.append(sequence.repeat(width // length + 1)[:width])
    return torch.stack(rows)


def learn_to_copy(model, tokenizer, objective: str, induction: Induction, seed: int) -> list[float]:
    """The copy curriculum (:class:`Induction`): causal models predict each window, T5 its second half
    from its first. Returns the loss curve."""
    first_id = max(tokenizer.all_special_ids) + 1  # the special tokens come first in the vocabulary
    gen = torch.Generator().manual_seed(seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=induction.lr, weight_decay=0.0)
    vocab_size, half, curve = model.config.vocab_size, induction.window // 2, []
    model.train()
    for _ in range(induction.steps):
        windows = induction_windows(induction, first_id, vocab_size, gen)
        if objective == "seq2seq":
            batch = {"input_ids": windows[:, :half].contiguous(), "labels": windows[:, half:].contiguous()}
        else:
            batch = {"input_ids": windows, "labels": windows}
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        curve.append(round(loss.item(), 4))
    return curve


def _batch(objective: str, windows: torch.Tensor, tokenizer, vocab_size: int, gen: torch.Generator) -> dict:
    """Model inputs for one batch of windows, labels marking exactly the predicted tokens."""
    if objective == "causal":
        return {"input_ids": windows, "labels": windows}
    if objective == "seq2seq":
        # A short encoder context and a long decoder target, as in privauditor's use of T5 (a short
        # instruction, a long record); it also gives the decoder three times the encoder's tokens.
        cut = windows.shape[1] // 4
        return {"input_ids": windows[:, :cut].contiguous(), "labels": windows[:, cut:].contiguous()}
    inputs, labels = _mask_tokens(windows, tokenizer, vocab_size, gen)
    return {"input_ids": inputs, "labels": labels}


def _predicted(objective: str, batch: dict) -> torch.Tensor:
    """The token ids whose NLL the model's loss averages (causal LMs shift by one)."""
    labels = batch["labels"][:, 1:] if objective == "causal" else batch["labels"]
    return labels[labels != -100]


def pretrain(
    model, tokenizer, train_texts, held_out_texts, objective: str, profile: PretrainProfile, label: str
) -> dict:
    """Train ``model`` in place; return held-out loss, unigram baseline, timings and the loss curve."""
    from ..infra.progress import Progress

    vocab_size = model.config.vocab_size
    train = token_stream(train_texts, tokenizer)
    held_out = token_stream(held_out_texts, tokenizer)
    induction, copy_curve, copy_seconds = profile.induction if objective != "mlm" else None, [], 0.0
    if induction is not None:
        started = time.perf_counter()
        copy_curve = learn_to_copy(model, tokenizer, objective, induction, profile.seed)
        copy_seconds = time.perf_counter() - started
        profile = replace(profile, lr=induction.then_lr, repeats=induction.repeats)
    gen = torch.Generator().manual_seed(profile.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=profile.lr, betas=(0.9, 0.98), weight_decay=0.01)

    def lr_at(step: int) -> float:  # linear warm-up, cosine decay to 10 %
        if step < profile.warmup:
            return (step + 1) / profile.warmup
        progress = (step - profile.warmup) / max(1, profile.steps - profile.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    model.train()
    curve, started = [], time.perf_counter()
    bar = Progress(f"pre-training {label}", profile.steps)
    for _ in range(profile.steps):
        starts = torch.randint(len(train) - profile.seq_len, (profile.batch_size,), generator=gen)
        windows = with_repeats(_windows(train, profile.seq_len, starts), objective, profile.repeats, gen)
        batch = _batch(objective, windows, tokenizer, vocab_size, gen)
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        curve.append(round(loss.item(), 4))
        bar.update(1, loss=f"{loss.item():.3f}")
    bar.close()
    seconds = time.perf_counter() - started
    model.eval()
    result = evaluate(model, tokenizer, train, held_out, objective, profile)
    result.update(
        train_seconds=round(seconds, 1), steps=profile.steps, loss_curve=curve[:: max(1, len(curve) // 50)]
    )
    result.update(profile=asdict(profile), train_tokens=len(train))
    if induction is not None:
        result.update(
            copy_seconds=round(copy_seconds, 1), copy_curve=copy_curve[:: max(1, len(copy_curve) // 50)]
        )
    log.info(
        "%s: held-out loss %.3f vs unigram %.3f (%.0f s)",
        label,
        result["held_out_loss"],
        result["unigram_loss"],
        seconds,
    )
    return result


@torch.inference_mode()
def evaluate(
    model, tokenizer, train: torch.Tensor, held_out: torch.Tensor, objective: str, profile: PretrainProfile
) -> dict:
    """Held-out NLL of the model and of the unigram baseline, on the same predicted tokens."""
    seq_len, vocab_size = profile.seq_len, model.config.vocab_size
    n_windows = min(profile.eval_windows, len(held_out) // seq_len)
    windows = held_out[: n_windows * seq_len].view(n_windows, seq_len)
    counts = torch.bincount(train, minlength=vocab_size).double() + 1.0
    unigram_logp = (counts / counts.sum()).log()
    gen = torch.Generator().manual_seed(profile.seed + 1)
    total_nll = total_unigram = 0.0
    total_tokens = 0
    for chunk in windows.split(32):
        batch = _batch(objective, chunk, tokenizer, vocab_size, gen)
        targets = _predicted(objective, batch)
        total_nll += model(**batch).loss.item() * len(targets)
        total_unigram += -unigram_logp[targets].sum().item()
        total_tokens += len(targets)
    return {
        "held_out_loss": round(total_nll / total_tokens, 4),
        "unigram_loss": round(total_unigram / total_tokens, 4),
        "held_out_tokens": total_tokens,
    }


@torch.inference_mode()
def copy_gain(model, tokenizer, texts, objective: str, length: int = 32) -> float:
    """How much a model copies from its context: the mean drop (nats) of a span's per-token NLL at its
    second occurrence against its first. Causal: ``<s> A A``, the NLL of the second A against the first;
    seq2seq: A decoded from the encoder input A against from another text's span B."""
    spans = [ids[:length] for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
    spans = [s for s in spans if len(s) == length]
    gains = []
    for i, span in enumerate(spans):
        if objective == "seq2seq":
            other = spans[(i + 1) % len(spans)]
            labels = torch.tensor([span])
            first = model(input_ids=torch.tensor([other]), labels=labels).loss
            second = model(input_ids=torch.tensor([span]), labels=labels).loss
        else:
            ids = torch.tensor([[tokenizer.bos_token_id, *span, *span]])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            nll = -logp.gather(1, ids[0, 1:, None])[:, 0]
            first, second = nll[:length].mean(), nll[length:].mean()
        gains.append(float(first - second))
    return sum(gains) / max(1, len(gains))
