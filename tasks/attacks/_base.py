"""The base class of attack plugins and the helpers the token-level attacks share."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..errors import PrivauditorError

#: Extra views an attack may declare; the cell computes only those some chosen attack needs.
VIEWS = ("reference", "neighbours", "gradients")


class Attack:
    """Base class of attack plugins; subclasses are ``@dataclass``es of hyper-parameters."""

    name: ClassVar[str]
    #: The paper (link) that introduced the attack.
    paper: ClassVar[str] = ""
    #: Extra views beyond the target model's token signals: a subset of :data:`VIEWS`.
    needs: ClassVar[tuple[str, ...]] = ()

    def score(self, signals: Any, reference: Any = None) -> np.ndarray:
        """One float64 score per row of ``signals`` (higher = member); ``reference`` is the reference
        model's :class:`~privauditor.tasks.signals.Signals` aligned to the same samples, when needed."""
        raise NotImplementedError


def check_fraction(attack: str, field: str, value: float) -> None:
    """A one-line error unless ``0 < value <= 1``."""
    if not isinstance(value, int | float) or not 0 < value <= 1:
        raise PrivauditorError(f"attack '{attack}': {field} must be a fraction in (0, 1], not {value!r}")


def lowest_k_mean(values: list[np.ndarray], k: float) -> np.ndarray:
    """Per sample, the mean of the lowest ``ceil(k * n)`` of its ``n`` token values (at least one)."""
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        v = np.asarray(v, dtype=np.float64)
        if not len(v):
            out[i] = np.nan
            continue
        count = max(1, int(np.ceil(k * len(v))))
        out[i] = np.partition(v, count - 1)[:count].mean()
    return out
