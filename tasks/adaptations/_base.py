"""The base class of adaptation plugins, and the default way to save and reload an adaptation.

An adaptation is a dataclass whose fields are its hyper-parameters. It turns a loaded base model into
the model to train (:meth:`Adaptation.apply`: freeze what stays fixed, add or unfreeze what is trained)
and saves / reloads only what it trained, as safetensors. Reloading onto the same base reproduces the
adapted model's logits exactly.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

from ..infra.errors import PrivauditorError

WEIGHTS_FILE = "adaptation.safetensors"
CONFIG_FILE = "adaptation.json"


class Adaptation:
    """Base class of adaptation plugins; subclasses are ``@dataclass``es of hyper-parameters."""

    name: ClassVar[str]
    #: The paper (link) that introduced the technique.
    paper: ClassVar[str] = ""
    #: Bump whenever a change to the technique alters what it trains (part of every cell id that uses it).
    version: ClassVar[int] = 1
    #: Default learning rate and epochs for this technique (a sweep's ``train`` block overrides them).
    default_lr: ClassVar[float] = 1e-4
    default_epochs: ClassVar[int] = 3
    #: Families this technique supports; None = every family.
    families: ClassVar[tuple[str, ...] | None] = None
    #: Prompt-learning methods add virtual tokens; they are never merged into weights.
    prompt_learning: ClassVar[bool] = False
    #: False where nothing is trained (the base itself, in-context learning): one checkpoint, epoch 0.
    trains: ClassVar[bool] = True
    #: The model reads member records in its context instead (see ``icl``).
    in_context: ClassVar[bool] = False
    #: Applied with nothing trained, the model is the base itself, logit for logit (zero-initialised
    #: updates, ones-initialised scales, the base's own weights): its step-0 checkpoint is scored as the
    #: base, from the split's shared views (``tests/test_adaptations.py`` checks the logits bit for bit).
    starts_as_base: ClassVar[bool] = False

    def default_lr_for(self, family: str) -> float:
        """The default learning rate on ``family`` (the class default unless a technique says otherwise)."""
        return self.default_lr

    def default_lr_on(self, model: str, family: str, defence: str = "none") -> float:
        """The default learning rate on the base ``model``: the one chosen for it by validation NLL
        (``benchmarks/learning_rates.py``) under ``defence`` where one was (DP-SGD's, ``--dp-epsilon``),
        else the one chosen without a defence, else the family's."""
        from ._rates import DP_RATES, RATES

        chosen = DP_RATES.get(self.name, {}).get(model) if defence == "dp" else None
        return chosen or RATES.get(self.name, {}).get(model) or self.default_lr_for(family)

    def unsupported_reason(self, family: str) -> str | None:
        """Why this technique cannot adapt ``family`` (None when it can)."""
        if self.families is not None and family not in self.families:
            return (
                f"adaptation '{self.name}' supports only the {', '.join(self.families)} family, not {family}"
            )
        return None

    def check_family(self, family: str) -> None:
        """Raise a one-line :class:`PrivauditorError` when ``family`` is unsupported."""
        reason = self.unsupported_reason(family)
        if reason:
            raise PrivauditorError(reason)

    def hyperparameters(self) -> dict[str, Any]:
        """The dataclass fields and their values (saved with every adaptation)."""
        return dataclasses.asdict(self) if dataclasses.is_dataclass(self) else {}

    def apply(self, model: Any, family: Any) -> Any:
        """Return the model to train: base frozen where the technique says, new parameters added."""
        raise NotImplementedError

    def save(self, model: Any, out_dir: Path) -> None:
        """Save only the trainable tensors (safetensors) and the hyper-parameters (JSON)."""
        from safetensors.torch import save_file

        out_dir.mkdir(parents=True, exist_ok=True)
        tensors = {n: p.detach().contiguous().cpu() for n, p in model.named_parameters() if p.requires_grad}
        save_file(tensors, str(out_dir / WEIGHTS_FILE))
        self.save_config(out_dir)

    def save_config(self, out_dir: Path) -> None:
        """Write the technique's name and hyper-parameters beside its weights."""
        (out_dir / CONFIG_FILE).write_text(
            json.dumps({"adaptation": self.name, **self.hyperparameters()}, indent=2)
        )

    def load(self, base: Any, family: Any, in_dir: Path) -> Any:
        """Re-apply the technique to a fresh ``base`` and load the saved trainable tensors."""
        from safetensors.torch import load_file

        model = self.apply(base, family)
        saved = load_file(str(in_dir / WEIGHTS_FILE))
        expected = {n for n, p in model.named_parameters() if p.requires_grad}
        if set(saved) != expected:
            missing, extra = sorted(expected - set(saved))[:3], sorted(set(saved) - expected)[:3]
            raise PrivauditorError(
                f"adaptation in '{in_dir}' does not fit this base (missing {missing}, unexpected {extra})"
            )
        model.load_state_dict(saved, strict=False)
        return model


def freeze(model: Any) -> None:
    """Make every parameter of ``model`` non-trainable."""
    for parameter in model.parameters():
        parameter.requires_grad_(False)


def modules_matching(model: Any, suffixes: tuple[str, ...]) -> list[tuple[str, Any]]:
    """(name, module) pairs whose name ends with ``.`` + one of ``suffixes``."""
    return [(n, m) for n, m in model.named_modules() if any(n.endswith("." + s) or n == s for s in suffixes)]
