"""One training loop for every technique and family, and the utility figure.

Every family trains on, and is scored on, the target tokens conditioned on the prompt (the design's
rule): a causal model sees ``<s> prompt target`` with labels on the target positions only; T5 gets
the prompt as encoder input and the target as decoder labels. Prompt and target are tokenized
separately, so the target's tokens are exactly the tokenization of the target text. Training is plain
PyTorch (AdamW, gradient clipping), seeded and deterministic on CPU.

The learning rate warms up linearly over the first epoch's steps (at most :data:`WARMUP_STEPS`) and then
stays constant: nothing in the schedule depends on how many epochs the run has, so the snapshot taken
after epoch e (``checkpoints``) is the model an e-epoch run with the same seed gives, step for step.
A checkpoint may fall inside an epoch (``0.25``: after a quarter of the first epoch's steps, rounded half
up) and at 0 (the technique's initial state, before the first step); each is named by its step. A
decay to zero at the budget's end (the usual linear or cosine schedule) would make every budget a
different run, and a warm-up–stable–decay schedule would need a cool-down branch per checkpoint, each of
them extra training that the audited trajectory never took; a constant rate costs the final models some
utility, which the validation NLL of every checkpoint shows.

Example::

    result = train(model, tokenizer, split.members, TrainConfig(lr=1e-3, epochs=2), seq2seq=False)
    print(result.loss_first_epoch, result.loss_last_epoch, utility.validation_loss(model, tokenizer, split.validation, 128, False))
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..datasets import Example
from ..infra import drain
from ..infra.deadline import check, expired, timeout
from ..infra.progress import Progress
from .resume import Position, StepState

log = logging.getLogger(__name__)

#: bump whenever a change to the training loop alters the weights it trains (part of every cell id)
TRAINER_VERSION = 3  # 3: checkpoints at steps inside an epoch; 2: warm-up then constant (was: linear decay)
# (not bumped for encode's hard max_length: a record it now encodes otherwise fails the cell, receipts.py)
#: the warm-up's longest length in steps (it lasts one epoch when epochs are shorter)
WARMUP_STEPS = 100


@dataclass(frozen=True)
class TrainConfig:
    """Training settings; ``None`` means the technique's own default."""

    epochs: int | None = None
    lr: float | None = None
    batch_size: int = 8
    max_length: int = 128  # tokens of prompt + target (causal) or of the target (T5)
    seed: int = 0


@dataclass
class TrainResult:
    """What one adaptation's training did, for ``cell.json`` and the leaderboard."""

    epochs: int
    lr: float
    steps: int = 0
    seconds: float = 0.0
    checkpoints: list[tuple[float, int]] = field(default_factory=list)  # (epoch, step) of each snapshot
    loss_curve: list[float] = field(default_factory=list)  # per step
    epoch_losses: list[float] = field(default_factory=list)  # mean per epoch
    resumed_from_step: int | None = None  # the step a saved state (:mod:`.resume`) was loaded at
    preemptions: int = 0  # drain notices this run's training stopped at and came back from

    @property
    def loss_first_epoch(self) -> float:
        return self.epoch_losses[0] if self.epoch_losses else float("nan")

    @property
    def loss_last_epoch(self) -> float:
        return self.epoch_losses[-1] if self.epoch_losses else float("nan")


def encode(
    tokenizer: Any, examples: Sequence[Example], max_length: int, seq2seq: bool
) -> list[dict[str, list[int]]]:
    """Token ids and labels per example; labels are -100 everywhere but on target tokens. A causal input is
    at most ``max_length`` tokens: the target is cut first, and a prompt that fills ``max_length`` leaves it
    none (:mod:`~privauditor.tasks.training.receipts` makes that an error before anything trains or scores)."""
    prompts = tokenizer([e.prompt for e in examples], add_special_tokens=False)["input_ids"]
    targets = tokenizer([e.target for e in examples], add_special_tokens=False)["input_ids"]
    encoded = []
    for prompt, target in zip(prompts, targets, strict=True):
        if seq2seq:
            encoded.append({"input_ids": prompt + [tokenizer.eos_token_id], "labels": target[:max_length]})
            continue
        prefix = [tokenizer.bos_token_id, *prompt] if tokenizer.bos_token_id is not None else list(prompt)
        # at most max_length in all (was: one target token kept past it, beyond the model's positions)
        prefix = prefix[:max_length]
        target = target[: max_length - len(prefix)]
        encoded.append({"input_ids": prefix + target, "labels": [-100] * len(prefix) + target})
    return encoded


def collate(items: Sequence[dict[str, list[int]]], pad_id: int, seq2seq: bool) -> dict[str, torch.Tensor]:
    """Right-padded tensors; padded label positions are -100 and masked out of attention."""

    def pad(rows: list[list[int]], value: int) -> torch.Tensor:
        width = max(len(r) for r in rows)
        return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.long)

    input_ids = pad([i["input_ids"] for i in items], pad_id)
    attention_mask = pad([[1] * len(i["input_ids"]) for i in items], 0)
    labels = pad([i["labels"] for i in items], -100)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def predicted_tokens(labels: torch.Tensor, seq2seq: bool) -> int:
    """How many tokens the model's mean loss averages over (causal models shift labels by one)."""
    return int((labels != -100).sum() if seq2seq else (labels[:, 1:] != -100).sum())


def checkpoint_steps(checkpoints: Sequence[float], steps_per_epoch: int) -> dict[int, float]:
    """Step -> epoch of every checkpoint: epoch e is after ``floor(e * steps_per_epoch + 0.5)`` steps. Two
    checkpoints on one step, or a fraction of an epoch that rounds to step 0, are one-line errors."""
    import math

    from ..infra.errors import PrivauditorError

    steps: dict[int, float] = {}
    for epoch in checkpoints:
        step = math.floor(epoch * steps_per_epoch + 0.5)
        if step in steps or (step == 0 and epoch > 0):
            other = steps.get(step, 0)
            raise PrivauditorError(
                f"train.checkpoints {other} and {epoch} fall on the same step ({step} of {steps_per_epoch} "
                "per epoch): use fewer or coarser checkpoints"
            )
        steps[step] = epoch
    return steps


def apply_seeded(adaptation: Any, model: Any, family: Any, seed: int) -> Any:
    """Apply a technique with the global generator seeded, so new weights (LoRA's A, prompt
    encoders) are the same for the same seed."""
    torch.manual_seed(seed)
    return adaptation.apply(model, family)


def train_config_of(spec: Any) -> TrainConfig:
    """A resolved cell's (a ``CellSpec``'s) training settings."""
    train = spec.train
    return TrainConfig(
        epochs=train.epochs,
        lr=train.lr,
        batch_size=train.batch_size,
        max_length=train.max_length,
        seed=spec.seed,
    )


class LocalStep:
    """One optimisation step in this process: AdamW, warm-up then a constant rate, gradient clipping at 1;
    forward passes under the model's precision (tasks/infra/precision.py).

    The step is the whole batch's: its loss is the mean over the batch's predicted tokens. Where the batch
    does not fit the device's memory (``torch.OutOfMemoryError``), it is cut into micro-batches of half the
    rows, then a quarter, ..., each backward weighted by its share of the batch's tokens, so the gradient is
    the batch's, up to rounding, and with dropout a step with masks drawn per micro-batch (as likely as the
    whole batch's, not the same draws): results do not depend on the device's memory beyond that.
    ``micro_batch`` starts there.
    """

    def __init__(
        self, model: Any, parameters: list[Any], lr: float, warmup: int, micro_batch: int | None = None
    ) -> None:
        self.parameters = parameters
        self.optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_then_constant(warmup))
        self.model = model
        self.micro_batch = micro_batch

    def __call__(self, batch: dict[str, torch.Tensor], weight: float) -> torch.Tensor:
        while True:
            self.optimizer.zero_grad(set_to_none=True)
            try:
                loss = self._backward(batch, weight)
                break
            except torch.OutOfMemoryError:
                rows = len(batch["input_ids"])
                if (self.micro_batch or rows) <= 1:
                    raise
                self.micro_batch = max(1, (self.micro_batch or rows) // 2)
                log.warning(
                    "training batch of %d rows does not fit: micro-batches of %d", rows, self.micro_batch
                )
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
        torch.nn.utils.clip_grad_norm_(self.parameters, 1.0)
        self.optimizer.step()
        self.scheduler.step()
        return loss

    def _backward(self, batch: dict[str, torch.Tensor], weight: float) -> torch.Tensor:
        """The batch's mean token loss, its gradient (times ``weight``) accumulated in the parameters."""
        from ..infra.precision import autocast

        rows = len(batch["input_ids"])
        size = self.micro_batch or rows
        if size >= rows:
            with autocast(self.model):
                loss = self.model(**batch).loss
            (loss * weight).backward()
            return loss.detach()
        seq2seq = bool(getattr(self.model.config, "is_encoder_decoder", False))
        total = predicted_tokens(batch["labels"], seq2seq)
        summed = torch.zeros((), dtype=torch.float32, device=batch["labels"].device)
        for start in range(0, rows, size):
            part = {k: v[start : start + size] for k, v in batch.items()}
            share = predicted_tokens(part["labels"], seq2seq) / max(1, total)
            with autocast(self.model):
                loss = self.model(**part).loss
            if share > 0:
                (loss * (weight * share)).backward()
                summed += loss.detach().float() * share
        return summed


def warmup_then_constant(warmup: int) -> Any:
    """The rate's factor at each step: (step + 1) / warmup for the first ``warmup`` steps, then 1."""
    return lambda step: min(1.0, (step + 1) / max(1, warmup))


@dataclass(frozen=True)
class Loop:
    """How :func:`train` steps, samples and snapshots (the defaults: one process, AdamW, no snapshot).

    At each checkpoint of ``checkpoints`` (epochs; 0: before the first step; fractions fall inside an
    epoch, :func:`checkpoint_steps`) ``on_checkpoint(epoch, step)`` is called, to snapshot the trainable
    weights; it must not draw random numbers or change the model's mode. With ``world`` > 1 (data
    parallel, e.g. DeepSpeed workers) every rank draws the same order and takes its share of each global
    batch; ``make_step(model, parameters, lr, warmup)`` builds the step function (``LocalStep`` here, a
    DeepSpeed engine under Ray Train) and the recorded losses are the mean over all ranks' tokens.
    ``sampler(epoch)`` gives an epoch's batches as lists of example indices, possibly empty (DP-SGD's
    Poisson sampling, :mod:`privauditor.tasks.defences.dp`; ``steps_per_epoch`` of them, by default as many as
    batches of the configured size cover the examples); by default each epoch
    is a seeded permutation cut into batches of the configured size (a sampler that draws from a generator of
    its own exposes it as ``generator``, so a saved state can hold it).

    With a ``resume`` folder (:class:`~privauditor.tasks.training.resume.ResumeFolder`; one process only) a
    drain notice (:mod:`privauditor.tasks.infra.drain`) stops training at the next step boundary with its
    state saved there (:class:`~privauditor.tasks.training.resume.Preempted`), and a state found there at the
    start is loaded and trained on from its step."""

    make_step: Any = LocalStep
    rank: int = 0
    world: int = 1
    checkpoints: Sequence[float] = ()
    on_checkpoint: Callable[[float, int], None] | None = None
    sampler: Callable[[int], list[list[int]]] | None = None
    steps_per_epoch: int | None = None
    resume: Any = None


def train(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    config: TrainConfig,
    seq2seq: bool,
    loop: Loop = Loop(),
) -> TrainResult:
    """Train the trainable parameters of ``model`` on ``examples`` as ``loop`` says; returns the loss
    record."""
    assert config.lr is not None and config.epochs is not None, "resolve the technique's defaults first"
    result = TrainResult(epochs=config.epochs, lr=config.lr)
    steps_per_epoch = loop.steps_per_epoch or -(-len(examples) // config.batch_size)
    wanted = checkpoint_steps(loop.checkpoints, steps_per_epoch)
    snapshot = _Snapshots(result=result, wanted=wanted, on_checkpoint=loop.on_checkpoint)
    parameters = [p for p in model.parameters() if p.requires_grad]
    if config.epochs == 0 or not parameters:  # nothing trains: the one snapshot is the start
        snapshot.untrained()
        return result
    data = encode(tokenizer, examples, config.max_length, seq2seq)
    torch.manual_seed(
        config.seed + loop.rank
    )  # dropout masks (LoRA's, adapters') draw from the global generator
    generator = torch.Generator().manual_seed(config.seed)
    step = loop.make_step(model, parameters, config.lr, min(WARMUP_STEPS, steps_per_epoch))
    saved = StepState(model=model, step=step, result=result, loop=loop, order=generator)
    start = saved.load()
    if start is None:
        start = Position(epoch=0)
        snapshot(0)  # after the step is built: a DeepSpeed engine gathers the weights
    device = parameters[0].device
    model.train()
    started = time.perf_counter()
    shown = Progress(  # one rank speaks for all
        f"training ({len(examples)} records, {config.epochs} epochs)",
        steps_per_epoch * config.epochs,
        quiet=loop.rank > 0,
    )
    if result.loss_curve:
        shown.update(len(result.loss_curve))
    steps = _Steps(
        step=step, data=data, pad_id=tokenizer.pad_token_id, seq2seq=seq2seq, device=device,
        rank=loop.rank, world=loop.world, result=result, snapshot=snapshot, shown=shown,
        notice=saved if loop.resume is not None and loop.world == 1 else None,
    )  # fmt: skip
    drain.listen(steps.notice is not None)
    try:
        for epoch in range(start.epoch, config.epochs):
            at = start if epoch == start.epoch else Position(epoch=epoch)
            saved.orders(at)  # the order generators as they were before this epoch's draw
            batches = _batches(epoch, len(data), config.batch_size, generator, loop.sampler)
            result.epoch_losses.append(_epoch(steps, batches, at))
    finally:
        drain.listen(False)
    shown.close()
    result.steps = steps_per_epoch * config.epochs
    result.seconds = round(saved.seconds + time.perf_counter() - started, 2)
    model.eval()
    return result


@dataclass(frozen=True, kw_only=True)
class _Snapshots:
    """A run's checkpoints (step -> epoch, ``wanted``): each one reached is recorded in ``result`` and
    handed to ``on_checkpoint``."""

    result: TrainResult
    wanted: dict[int, float]
    on_checkpoint: Callable[[float, int], None] | None

    def __call__(self, step: int) -> None:
        if step in self.wanted:
            self._take(self.wanted[step], step)

    def untrained(self) -> None:
        """A run that trains nothing: its one snapshot, where any is wanted, is the start."""
        if self.wanted:
            self._take(0, 0)

    def _take(self, epoch: float, step: int) -> None:
        self.result.checkpoints.append((epoch, step))
        if self.on_checkpoint is not None:
            self.on_checkpoint(epoch, step)


@dataclass(frozen=True, kw_only=True)
class _Steps:
    """What every optimisation step of :func:`train` reads and records: the ``step`` function, the encoded
    records, the pad id, the family (``seq2seq``), the weights' device, this ``rank`` of ``world``, the loss
    record (``result``), the snapshots and the progress shown."""

    step: Callable[[dict[str, torch.Tensor], float], torch.Tensor]
    data: list[dict[str, list[int]]]
    pad_id: int
    seq2seq: bool
    device: Any
    rank: int
    world: int
    result: TrainResult
    snapshot: _Snapshots
    shown: Progress
    notice: Callable[[Position], None] | None = None


def _epoch(steps: _Steps, batches: list[list[int]], at: Position) -> float:
    """Step through one epoch's ``batches`` from where ``at`` is, recording each step's loss (and the
    position) and taking its snapshots, and at each step boundary hearing a drain notice; the epoch's mean
    loss per token."""
    fallback = next((b[:1] for b in batches if b), [0])  # what an idle rank runs, at weight 0
    for drawn in batches[at.index :]:
        summed = _step(steps, drawn, fallback)
        at.loss, at.tokens, at.index = at.loss + summed[0].item(), at.tokens + summed[1].item(), at.index + 1
        steps.result.loss_curve.append(round(summed[0].item() / max(1.0, summed[1].item()), 4))
        steps.snapshot(len(steps.result.loss_curve))
        steps.shown.update(1, loss=steps.result.loss_curve[-1])
        if steps.notice is not None:
            steps.notice(at)
    return round(at.loss / max(1, at.tokens), 4)


def _step(steps: _Steps, drawn: list[int], fallback: list[int]) -> torch.Tensor:
    """One step on this rank's share of the global batch ``drawn``: (loss × tokens, tokens, whether the
    time is up), summed over every rank."""
    if steps.world == 1:
        check("training")
    rows = drawn[steps.rank :: steps.world]
    # a short last batch leaves a rank idle, as an empty Poisson batch does: it steps with zero loss
    weight = 1.0 if rows else 0.0
    batch = collate([steps.data[i] for i in rows or fallback], steps.pad_id, steps.seq2seq)
    loss = steps.step({k: v.to(steps.device) for k, v in batch.items()}, weight)
    n = predicted_tokens(batch["labels"], steps.seq2seq) * weight
    summed = torch.tensor([loss.item() * n, n, float(expired())], dtype=torch.float64)
    if steps.world > 1:  # ranks agree on the time limit too, so none is left waiting in a collective
        torch.distributed.all_reduce(summed)
        if summed[2] > 0:
            raise timeout("training")
    return summed


def _batches(epoch: int, n: int, size: int, generator: torch.Generator, sampler: Any) -> list[list[int]]:
    """An epoch's batches: the sampler's, or a seeded permutation of the ``n`` examples cut in ``size``."""
    if sampler is not None:
        return sampler(epoch)
    order = torch.randperm(n, generator=generator).tolist()
    return [order[s : s + size] for s in range(0, n, size)]
