"""The ``dp`` defence: DP-SGD adaptation, and the accounting of the privacy it spends.

DP-SGD (Abadi et al. 2016) as opacus runs it, on the trainable parameters only (the base's frozen
weights were pre-trained without the private records):

- each step draws a Poisson sample of the training records, each with probability
  q = ``train.batch_size`` / records, for ceil(records / batch size) steps per epoch;
- every sampled record's gradient comes from :func:`privauditor.tasks.passes.gradients.per_sample_gradients`
  (the GradNorm view's module; it reaches every family's and technique's trainable tensors, prompt
  encoders and prefixes included) and is handed to opacus's ``DPOptimizer`` as ``grad_sample``;
- the ``DPOptimizer`` clips each record's gradient to ``max_grad_norm``, sums them, adds Gaussian noise
  of standard deviation σ · ``max_grad_norm`` and divides by the expected batch size; AdamW then steps
  with the same warm-up-then-constant rate as an undefended run (post-processing: no privacy cost).

σ is calibrated once, with opacus's RDP accountant, so that the run's *last* step has spent the target ε
at δ. Every checkpoint records the ε spent by its own step count: a snapshot after epoch e of a 4-epoch
run has spent less than the target, and is not the model an e-epoch DP run at the target ε would give.
:func:`rdp_epsilon` recomputes the spent ε without opacus (integer Rényi orders, the binomial expansion
of Mironov, Talwar and Zhang 2019, converted as in Balle et al. 2020), from the recorded σ, q and steps.

Limits: the model trains in eval mode (no dropout: per-sample gradients recompute module forwards); one
process (no DeepSpeed, no data-parallel workers: a one-line error); each record's loss is the mean NLL of
its target tokens. ``noise: false`` adds no noise while still claiming the target ε: it exists as the
empirical audit's positive control and is never a defence; ``noise_scale`` below 1 (a planted bug: the
noise added is ``noise_scale`` · σ while the record claims σ's ε) is the control a weak audit could miss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..infra.errors import PrivauditorError
from . import DEFENCES
from ._accounting import noise_multiplier, rdp_epsilon, spent_epsilon
from ._base import Defence, Guard, TrainingRun, default_delta

#: bump whenever a change to DP training alters the weights it trains (part of every DP cell id)
DP_VERSION = 1


@dataclass(frozen=True)
class DPSettings:
    """``defence_params.dp``."""

    epsilon: float = 8.0  # the target ε, spent by the last step
    delta: float | None = None  # None: min(1e-5, n^-1.1), n distinct trained records (default_delta)
    max_grad_norm: float = 1.0  # the per-record clipping norm C
    noise: bool = True  # false: clip only, still claiming epsilon (the audit's positive control)
    noise_scale: float = 1.0  # below 1: less noise than the accounting claims (a planted bug)
    unit: str = "record"  # "user": every copy of a record is one privacy unit (user-level DP)
    gradient_canaries: int = 0  # m Dirac gradient canaries auditing the step (_gradient_canaries.py)

    def __post_init__(self) -> None:
        if not self.epsilon > 0 or not math.isfinite(self.epsilon):
            raise PrivauditorError(f"defence_params.dp.epsilon must be a number > 0, not {self.epsilon!r}")
        if self.delta is not None and not 0 < self.delta < 1:
            raise PrivauditorError(
                f"defence_params.dp.delta must lie in (0, 1) or be null, not {self.delta!r}"
            )
        if not 0 < self.noise_scale <= 1:
            raise PrivauditorError(
                f"defence_params.dp.noise_scale must lie in (0, 1], not {self.noise_scale!r}"
            )
        if isinstance(self.gradient_canaries, bool) or not (
            isinstance(self.gradient_canaries, int) and self.gradient_canaries >= 0
        ):
            raise PrivauditorError(
                f"defence_params.dp.gradient_canaries must be a whole number >= 0, not {self.gradient_canaries!r}"
            )
        if self.unit not in ("record", "user"):
            raise PrivauditorError(f"defence_params.dp.unit must be record or user, not {self.unit!r}")
        if not self.max_grad_norm > 0:
            raise PrivauditorError(
                f"defence_params.dp.max_grad_norm must be a number > 0, not {self.max_grad_norm!r}"
            )


@DEFENCES.register("dp")
class DPDefence(Defence):
    """DP-SGD with opacus's clipping and noise, σ calibrated to the target ε by the RDP accountant.

    Settings ``defence_params.dp`` (:class:`DPSettings`); see the module docstring."""

    name = "dp"
    settings = DPSettings
    version = DP_VERSION
    stage = "calibrate"  # σ for the target ε

    def resolve(self, params: dict[str, Any] | None, trained: int) -> dict[str, Any]:
        """``defence_params.dp`` with every default filled in, δ included."""
        from ..infra.strict import build

        settings = build(DPSettings, params, "defence_params.dp")
        delta = default_delta(trained) if settings.delta is None else settings.delta
        resolved = {"epsilon": settings.epsilon, "delta": delta, "max_grad_norm": settings.max_grad_norm,
                    "noise": settings.noise, "noise_scale": settings.noise_scale, "unit": settings.unit,
                    "version": DP_VERSION}  # fmt: skip
        canaries = settings.gradient_canaries  # only where set: cells without them keep their ids
        return resolved | ({"gradient_canaries": canaries} if canaries else {})

    def unsupported_reason(self, technique: Any, workers: int, deepspeed: Any) -> str | None:
        if not technique.trains:
            return f"dp: {technique.name} trains nothing, so there is no gradient to privatise"
        if workers > 1 or deepspeed is not None:
            return "dp trains in one process: DeepSpeed and train.workers > 1 are not supported with it"
        return None

    def tag(self, resolved: dict[str, Any]) -> str:
        """``+dp-e<ε>`` (``-nonoise`` / ``-noise<scale>`` for the audit's controls)."""
        scale = resolved.get("noise_scale", 1.0)
        noise = "-nonoise" if not resolved.get("noise", True) else "" if scale == 1 else f"-noise{scale:g}"
        user = "-user" if resolved.get("unit") == "user" else ""
        return f"+dp-e{resolved['epsilon']:g}{user}{noise}"

    def guard(self, resolved: dict[str, Any], run: TrainingRun) -> Guard:
        units = run.units if resolved.get("unit") == "user" else ()
        privacy = Privacy.of(resolved, run.records, run.batch_size, run.epochs, run.seed, units)
        sigma = privacy.sigma
        made: list[DPStep] = []
        return Guard(
            loop={
                "make_step": privacy.make_step(sigma, run.seq2seq, made),
                "sampler": privacy.sampler(),
                "steps_per_epoch": privacy.steps_per_epoch,
            },  # fmt: skip
            record=lambda steps: privacy.record(sigma, steps) | _canaries_record(made),
            spent=lambda step: privacy.spent(step, sigma),
            canaries=lambda: made[-1].canaries.result() if made and made[-1].canaries else None,
        )

    def summary(self, record: dict[str, Any], checkpoint: dict[str, Any]) -> str:
        scale = record.get("noise_scale", 1.0)
        noise = ("NO NOISE: the audit control" if not record["noise_applied"] else "noise added" if scale == 1
                 else f"NOISE AT {scale:g} OF SIGMA: the planted bug")  # fmt: skip
        return (f"DP-SGD: eps spent {checkpoint['epsilon']:.3f} of {record['epsilon_target']:g} at delta "
                f"{record['delta']:.2g} (noise multiplier {record['noise_multiplier']:.3f}, {noise})")  # fmt: skip

    def extra_memory(self, trainable: int, batch_size: int) -> int:
        """The per-sample gradients: one fp32 copy of the trainable parameters per record of a batch."""
        return 4 * trainable * batch_size


@dataclass(frozen=True)
class Privacy:
    """One DP run's calibration: what :func:`privauditor.tasks.training.loop.train` needs and ``cell.json``
    records."""

    epsilon: float
    delta: float
    max_grad_norm: float
    noise: bool
    records: int  # trained records (repeats counted)
    batch_size: int
    epochs: int
    seed: int
    noise_scale: float = 1.0  # the planted bug's: the noise added, as a share of sigma
    units: tuple[int, ...] = ()  # user-level DP: each trained record's privacy unit (empty: its own)
    gradient_canaries: int = 0  # Dirac gradient canaries auditing the step (0: none)

    @property
    def count(self) -> int:
        """Privacy units: the distinct units under user-level DP, else the trained records."""
        return len(set(self.units)) if self.units else self.records

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.count // self.batch_size)

    @property
    def sample_rate(self) -> float:
        """q: the expected units of a batch over the units."""
        return min(1.0, self.batch_size / self.count)

    @property
    def sigma(self) -> float:
        return noise_multiplier(
            self.epsilon, self.delta, self.sample_rate, self.steps_per_epoch * self.epochs
        )

    @classmethod
    def of(cls, params: dict[str, Any], records: int, batch_size: int, epochs: int, seed: int,
           units: tuple[int, ...] = ()) -> Privacy:  # fmt: skip
        return cls(params["epsilon"], params["delta"], params["max_grad_norm"], params["noise"], records,
                   batch_size, epochs, seed, params.get("noise_scale", 1.0), units,
                   params.get("gradient_canaries", 0))  # fmt: skip

    def spent(self, step: int, sigma: float) -> float:
        """ε spent after ``step`` steps."""
        return spent_epsilon(sigma, self.sample_rate, step, self.delta)

    def sampler(self) -> PoissonSampler:
        """``sampler(epoch)``: that epoch's Poisson batches (lists of record indices, possibly empty)."""
        return PoissonSampler(self)

    def make_step(self, sigma: float, seq2seq: bool, made: list[DPStep] | None = None) -> Any:
        """A ``make_step`` for :func:`~privauditor.tasks.training.loop.train` (see :class:`DPStep`); each
        step it makes is appended to ``made``."""

        def make(model: Any, parameters: list[Any], lr: float, warmup: int) -> DPStep:
            step = DPStep(model, parameters, lr, warmup, self, sigma, seq2seq)
            if made is not None:
                made.append(step)
            return step

        return make

    def record(self, sigma: float, steps: int) -> dict[str, Any]:
        """The ``defence`` block of ``cell.json``."""
        import opacus

        return {
            "name": "dp",
            "epsilon_target": self.epsilon,
            "epsilon": self.spent(steps, sigma),
            "epsilon_second_accountant": rdp_epsilon(sigma, self.sample_rate, steps, self.delta),
            "delta": self.delta,
            "noise_multiplier": sigma,
            "noise_applied": self.noise,
            "noise_scale": self.noise_scale,
            "unit": "user" if self.units else "record",
            "units": self.count,
            "max_grad_norm": self.max_grad_norm,
            "sample_rate": self.sample_rate,
            "steps": steps,
            "accountant": f"rdp (opacus {opacus.__version__})",
        }


class PoissonSampler:
    """A DP run's ``sampler(epoch)``: each record (each unit, with all its records, under user-level DP) in
    each of the epoch's batches with the sample rate, drawn from a ``generator`` of its own (exposed, so a
    saved training state holds it, :mod:`privauditor.tasks.training.resume`)."""

    def __init__(self, privacy: Privacy) -> None:
        import torch

        self.privacy = privacy
        self.generator = torch.Generator().manual_seed(privacy.seed)
        self.members = records_by_unit(privacy.units)  # a drawn unit brings every copy of its record

    def __call__(self, epoch: int) -> list[list[int]]:
        import torch

        privacy = self.privacy
        draws = torch.rand(privacy.steps_per_epoch, privacy.count, generator=self.generator)
        drawn = [row.nonzero().flatten().tolist() for row in draws < privacy.sample_rate]
        if not privacy.units:
            return drawn
        return [[i for unit in batch for i in self.members[unit]] for batch in drawn]


class DPStep:
    """One DP-SGD step: per-record gradients of the Poisson batch, opacus's clipping, noise and scaling,
    then AdamW (warm-up then a constant rate, as :class:`~privauditor.tasks.training.loop.LocalStep`)."""

    def __init__(
        self,
        model: Any,
        parameters: list[Any],
        lr: float,
        warmup: int,
        privacy: Privacy,
        sigma: float,
        seq2seq: bool,
    ) -> None:
        import torch

        from ..training.loop import warmup_then_constant
        from ._gradient_canaries import GradientCanaries, audited_optimizer

        self.model, self.seq2seq, self.user = model, seq2seq, bool(privacy.units)
        names = {id(p): n for n, p in model.named_parameters()}
        self.params = {names[id(p)]: p for p in parameters}
        self.layouts: dict[Any, Any] = {}
        inner = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.0)
        self.canaries = (
            GradientCanaries(self.params, privacy.gradient_canaries, privacy.sample_rate, sigma,
                             privacy.max_grad_norm, privacy.seed + 2)
            if privacy.gradient_canaries else None
        )  # fmt: skip
        self.optimizer = audited_optimizer(
            inner, self.canaries, noise_multiplier=sigma * privacy.noise_scale if privacy.noise else 0.0,
            max_grad_norm=privacy.max_grad_norm,
            expected_batch_size=privacy.batch_size, generator=torch.Generator().manual_seed(privacy.seed + 1),
        )  # fmt: skip
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(inner, warmup_then_constant(warmup))

    def grad_samples(self, batch: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Per record of ``batch``: each trainable tensor's gradient, and the record's loss."""
        from ..passes.gradients import per_sample_gradients, target_nll

        losses = []

        def loss_fn(model: Any, rows: dict[str, Any]) -> Any:
            found = target_nll(model, rows, self.seq2seq)
            losses.append(found.detach())
            return found

        self.model.eval()  # no dropout: per-record gradients recompute the modules' forwards
        grads = per_sample_gradients(self.model, batch, loss_fn, self.params, self.layouts)
        return grads, losses[0]

    def __call__(self, batch: dict[str, Any], weight: float) -> Any:
        import torch

        grads, losses = self.grad_samples(batch)
        labels = batch["labels"] if self.seq2seq else batch["labels"][:, 1:]
        tokens = (labels != -100).sum(1).to(losses.dtype)
        self.optimizer.zero_grad(set_to_none=True)
        if self.user and weight:  # user-level: a unit's copies are one gradient, clipped once
            rows = copies(batch)
            grads = {
                n: g.new_zeros((int(rows.max()) + 1, *g.shape[1:])).index_add_(0, rows, g)
                for n, g in grads.items()
            }
        for name, p in self.params.items():  # an empty Poisson batch (weight 0) keeps no record
            p.grad_sample = grads[name].to(p.dtype) if weight else grads[name][:0].to(p.dtype)
        self.optimizer.step()
        self.scheduler.step()
        return (losses * tokens).sum() / tokens.sum().clamp_min(1) if weight else torch.tensor(0.0)


def records_by_unit(units: tuple[int, ...]) -> dict[int, list[int]]:
    """Unit -> the indices of its trained records (a record and its copies)."""
    found: dict[int, list[int]] = {}
    for index, unit in enumerate(units):
        found.setdefault(unit, []).append(index)
    return found


def copies(batch: dict[str, Any]) -> Any:
    """Per row of ``batch``, the index of its group of identical rows (a record's copies: same tokens and
    labels) in order of first appearance: what a user-level step sums before clipping."""
    import torch

    seen: dict[tuple[int, ...], int] = {}
    rows = []
    for ids, mask, labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"], strict=True):
        key = (*ids[mask.bool()].tolist(), -1, *labels[labels != -100].tolist())
        rows.append(seen.setdefault(key, len(seen)))
    return torch.tensor(rows, device=batch["input_ids"].device)


def _canaries_record(made: list[DPStep]) -> dict[str, Any]:
    """``cell.json``'s count of gradient canaries and of those their coins put in (none: nothing)."""
    found = made[-1].canaries if made else None
    if found is None:
        return {}
    return {"gradient_canaries": found.m, "gradient_canaries_in": int(found.included.sum())}
