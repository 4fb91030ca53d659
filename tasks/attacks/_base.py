"""The base class of attack plugins and the helpers the token-level attacks share."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..infra.errors import PrivauditorError

if TYPE_CHECKING:
    from ..views import Cost, View


#: Threat models, from the least to the most the attacker holds. ``known-members`` is above ``reference``
#: because labelled training records are a stronger holding than a public base; an attack at that level
#: may read a reference model too (``rmia`` does, ``camia`` does not): its views say which.
ACCESS = {
    "model-free": "no query to the model: the texts and labels alone",
    "black-box": "the target's output probabilities (and public data)",
    "reference": "also a reference model: the base, or one adapted from it",
    "known-members": "also labelled members: records the target trained on (the split's known_members, never "
    "scored), beside its outputs and, where the attack reads one, a reference model",
    "white-box": "the target's weights: gradients",
    "checkpoints": "the target's snapshots along its training: its outputs at each",
}


class Attack:
    """Base class of attack plugins; subclasses are ``@dataclass``es of hyper-parameters.

    ``views()`` names the inputs by role (``signals`` → the target's per-token signals, ...); ``score``
    gets each role's view as that view's ``read`` gives it, rows in the scored samples' order.
    """

    name: ClassVar[str]
    #: The paper (link) that introduced the attack.
    paper: ClassVar[str] = ""
    #: Bump whenever a change to the attack alters its scores (it is part of the id of every cell it runs in).
    version: ClassVar[int] = 1
    #: What the attacker must have (see :data:`ACCESS`).
    access: ClassVar[str] = "black-box"
    #: The checkpoints of a training trajectory it runs at (:meth:`runs_at`): ``"any"``, or ``"last"`` for
    #: an attack too costly for more than one (one that adapts a model of its own, as SPV-MIA does).
    checkpoints: ClassVar[str] = "any"
    #: Where the attack may abstain (score NaN for a text it has nothing to say about), what it lacks
    #: there; "" for an attack that scores every text (:func:`~privauditor.tasks.cell.attack_job.attack_job`).
    abstains: ClassVar[str] = ""

    def __post_init__(self) -> None:
        self.views()  # an attack's hyper-parameters are valid when the views they ask for are

    def views(self) -> dict[str, View]:
        """The views the attack reads, by role: the target's signals unless it says otherwise."""
        from ..views import build_view

        return {"signals": build_view("signals")}

    def score(self, views: Mapping[str, Any]) -> np.ndarray:
        """One float64 score per scored sample, higher = member."""
        raise NotImplementedError

    def fitted(self) -> dict[str, float]:
        """What ``score`` chose from labelled texts outside the scored ones, or counted on the scored ones
        (kept with the metrics)."""
        return {}

    def hyperparameters(self) -> dict[str, Any]:
        return dataclasses.asdict(self) if dataclasses.is_dataclass(self) else {}

    @property
    def cheap(self) -> bool:
        """Run at every checkpoint of a training trajectory: the attack reads no view of the target model
        but its signals of the scored texts, or views that take no pass through it (views of un-adapted
        models are computed once per split and shared). Others need more passes through every snapshot
        (neighbours, gradients, prefixes, the target's signals of a population) and run at the last and
        the best."""
        from ..views import Cost

        return all(
            (view.name == "signals" and view.parts() == ("scored",))
            or "target" not in view.models()
            or view.cost() == Cost()
            for view in self.views().values()
        )

    def runs_at(self, step: int, last: int, best: int) -> bool:
        """Whether the attack runs at the checkpoint of ``step`` in a trajectory whose last and best (lowest
        validation NLL) checkpoints are at steps ``last`` and ``best``: a cheap one at every checkpoint,
        another at the last and the best, one whose ``checkpoints`` is ``"last"`` at the last alone."""
        if self.checkpoints == "last":
            return step == last
        return step in (last, best) or self.cheap

    def cost(self) -> Cost:
        """Passes per scored text, summed over the views it reads (views attacks share are paid once)."""
        from ..views import Cost

        return sum((view.cost() for view in self.views().values()), Cost())


def check_fraction(attack: str, field: str, value: float) -> None:
    """A one-line error unless ``0 < value <= 1``."""
    if not 0 < value <= 1:
        raise PrivauditorError(f"attack '{attack}': {field} must be a fraction in (0, 1], not {value!r}")


def lowest_k_mean(values: list[np.ndarray], k: float) -> np.ndarray:
    """Per sample, the mean of its lowest ``max(1, int(k * n))`` of ``n`` token values (``int`` rounds
    down, as MIMIR does; at least one token, where MIMIR keeps none and scores NaN)."""
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        v = np.asarray(v, dtype=np.float64)
        if not len(v):
            out[i] = np.nan
            continue
        count = max(1, int(k * len(v)))
        out[i] = np.partition(v, count - 1)[:count].mean()
    return out
