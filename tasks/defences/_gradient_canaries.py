"""Gradient canaries: a white-box one-run audit of the DP-SGD step itself (``defence_params.dp.gradient_canaries``).

The text canaries (:mod:`privauditor.tasks.leakage.audit_canaries`) ask what the adapted model gives away;
these ask whether the privatising step adds the noise its accounting claims, which a black-box audit of a
small model cannot tell (``docs/defences.md``: noise at a quarter of σ went unflagged by every text kind).

m Dirac canaries (Nasr et al. 2021 and 2023; Steinke, Nasr and Jagielski 2023, §6): canary i is the
gradient C · e_i, C the clipping norm, e_i a trainable coordinate of its own (m distinct coordinates drawn
uniformly from the seed; m is capped at the trainable parameters). A fair coin drawn from the seed puts a
canary into training; an included canary joins each step's Poisson sample with the run's sampling rate q,
by a generator of its own, and its gradient is added to the step's clipped sum before opacus adds the
noise (it enters at norm C, what clipping leaves of any gradient at most). Adding or removing one
canary is adding or removing one privacy unit, so the run's claimed (ε, δ) covers the canaries' coins.

The auditor sees every step's noisy sum and the data's clipped sum (the trainer's white-box view: the data
batch is drawn independently of the canaries' coins, so conditioning on it keeps the guarantee). Per step,
x_i = (noisy sum − data's sum at e_i) / C, and the canary's score is the log-likelihood ratio of "in" against
"out" under the mechanism as claimed, Σ_t log(1 − q + q · exp((x_i − 1/2) / σ²)) with σ the accountant's
noise multiplier (the Neyman–Pearson statistic if the claim held; it is the same whatever noise was really
added). :func:`privauditor.tasks.stats.one_run.one_run_bound` turns the scores and the coins into ε̂.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class GradientCanaries:
    """The canaries of one DP run over ``params`` (name -> trainable tensor, in a fixed order): their
    coordinates, coins, and scores so far; :meth:`add` and :meth:`observe` run inside each step."""

    def __init__(self, params: dict[str, Any], count: int, rate: float, sigma: float, clip: float,
                 seed: int) -> None:  # fmt: skip
        sizes = [p.numel() for p in params.values()]
        m = min(count, sum(sizes))
        chosen = torch.randperm(sum(sizes), generator=torch.Generator().manual_seed(seed))[:m].sort().values
        starts = np.cumsum([0, *sizes])
        self.where: list[tuple[Any, Any, Any]] = []  # (parameter, its flat indices, the canaries' indices)
        for (_, p), start, end in zip(params.items(), starts[:-1], starts[1:], strict=True):
            mine = ((chosen >= int(start)) & (chosen < int(end))).nonzero().flatten()
            if len(mine):
                self.where.append((p, (chosen[mine] - int(start)).to(p.device), mine))
        coins = torch.Generator().manual_seed(seed + 1)
        self.included = torch.rand(m, generator=coins) < 0.5
        self.generator = torch.Generator().manual_seed(seed + 2)  # each step's draws (saved on preemption)
        self.rate, self.sigma, self.clip = rate, sigma, clip
        self.scores = torch.zeros(m, dtype=torch.float64)
        self._data: list[Any] = []

    @property
    def m(self) -> int:
        return len(self.scores)

    def add(self) -> None:
        """After clipping: note the data's clipped sum at each canary's coordinate, then add C to it for
        each included canary this step's Poisson draw takes."""
        drawn = (torch.rand(self.m, generator=self.generator) < self.rate) & self.included
        self._data = []
        for p, flat, mine in self.where:
            summed = p.summed_grad.view(-1)
            self._data.append(summed[flat].double())
            summed.index_add_(0, flat, (drawn[mine].to(summed.dtype) * self.clip).to(summed.device))

    def observe(self) -> None:
        """After the noise: each canary's log-likelihood ratio for this step, added to its score."""
        q, s2 = self.rate, self.sigma**2
        for (p, flat, mine), data in zip(self.where, self._data, strict=True):
            x = (p.grad.view(-1)[flat].double() - data).cpu() / self.clip
            step = (x - 0.5) / s2 if q >= 1 else torch.log1p(q * torch.expm1((x - 0.5) / s2))
            self.scores[mine] += step

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """The scores and the coins."""
        return self.scores.numpy().copy(), self.included.numpy().copy()

    def state(self) -> dict[str, Any]:
        return {"scores": self.scores.clone(), "generator": self.generator.get_state()}

    def load(self, state: dict[str, Any]) -> None:
        self.scores.copy_(state["scores"])
        self.generator.set_state(state["generator"])


def audited_optimizer(inner: Any, canaries: GradientCanaries | None, **kwargs: Any) -> Any:
    """opacus's ``DPOptimizer`` over ``inner``, with ``canaries`` (if any) added after clipping and read
    after the noise."""
    from opacus.optimizers import DPOptimizer

    if canaries is None:
        return DPOptimizer(inner, **kwargs)
    audit: GradientCanaries = canaries  # (named for the class below)

    class Audited(DPOptimizer):  # type: ignore[misc]
        def clip_and_accumulate(self) -> None:
            super().clip_and_accumulate()
            audit.add()

        def add_noise(self) -> None:
            super().add_noise()
            audit.observe()

    return Audited(inner, **kwargs)
