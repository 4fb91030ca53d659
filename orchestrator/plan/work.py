"""What each cell of a sweep will do, in units a device rate prices: FLOPs, passes, records.

A cell's work is split by stage, under the labels its ``cell.json`` ``timings`` will carry (``train``,
``utility``, every view's label, ``attacks``, ...), so a finished sweep's timings can be set against it
(:mod:`~privauditor.orchestrator.plan.calibrate`). A view that reads only un-adapted models is computed once
once and shared by the cells that read it (its label gains ``" (shared)"``): it is counted once, under
what it is keyed by (the model and the split; the split alone for a model-free view; the split and the
tokenizer for the neighbour texts).

Units (:data:`UNITS`): ``forward`` FLOPs of passes without a backward, ``train`` those of training
passes and of a view's backward passes (:mod:`~privauditor.orchestrator.plan.costs`); ``sequence`` counts the texts of batched forward passes and
``gradient`` those of training or per-sample gradient passes (what a pass costs besides its FLOPs:
kernel launches, tokenising, Python); ``neighbour`` the masked-LM neighbour texts made; ``attack_record``
a scored record per attack run (bootstrap, metrics); ``blind_record`` a record of the model-free control's
permutation test; ``cell`` the fixed cost of a stage (loading, the split, saving); ``process`` a worker
process's first cell (imports, first loads: counted by the planner, not here); ``load_byte`` weight bytes
read.

Sequence lengths are the records' mean token counts (cut at ``max_length``) where the dataset and the
model's tokenizer are at hand without the network (offline datasets and bases, local files), else
``max_length``: an upper bound.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .costs import Shape, forward_flops, train_flops

UNITS = ("forward", "train", "sequence", "gradient", "neighbour", "attack_record", "blind_record", "cell",
         "process", "load_byte")  # fmt: skip
SHARED = " (shared)"
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class Work:
    """Units of work by stage label."""

    stages: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )

    def add(self, stage: str, **units: float) -> None:
        for unit, amount in units.items():
            self.stages[stage][unit] += amount

    def total(self) -> dict[str, float]:
        found: dict[str, float] = defaultdict(float)
        for units in self.stages.values():
            for unit, amount in units.items():
                found[unit] += amount
        return dict(found)


@dataclass(frozen=True)
class Tokens:
    """Mean tokens per record: the causal text (prompt and target), or an encoder-decoder's source and
    target; ``measured`` False where ``max_length`` stands in."""

    text: float
    source: float
    target: float
    measured: bool


@dataclass
class CellWork:
    """One cell's own work, the shared work it reads (by what it is keyed by: each key's work is done
    once), and the sizes behind them."""

    own: Work
    shared: dict[tuple, Work]
    data_key: tuple  # the split: every shared key starts with its kind and ends with it
    trainable: int
    shape: Shape
    tokens: Tokens
    technique: Any
    added: int = 0  # parameters the technique adds to the base's (frozen or trained)


def cell_work(
    spec: Any,
    shape_of: Any,
    tokens_of: Any,
    best: int | None = None,
    best_before_last: float = 1.0,
    checkpointing: bool = False,
) -> CellWork:
    """The work of a resolved cell (a ``CellSpec``) as its plan (:func:`~privauditor.tasks.cell.plan.plan_cell`)
    has it; ``shape_of(model)`` gives a :class:`Shape`, ``tokens_of(dataset, model, max_length)``
    :class:`Tokens`. ``best``: the index of the best checkpoint where it is known (a finished cell's
    record); before the run the costly attacks are counted at the last checkpoint and, with weight
    ``best_before_last``, at the one before. With gradient checkpointing (the spec's
    ``train.gradient_checkpointing``, or ``checkpointing``) each training pass runs the forward twice."""
    from privauditor.tasks.cell.plan import plan_cell
    from privauditor.tasks.models import resolve_model

    from .shapes import trainable_params

    plan = plan_cell(spec, best, best_before_last)
    technique = plan.technique
    shape, tokens = shape_of(spec.model), tokens_of(spec.dataset, spec.model, spec.train.max_length)
    ref_shape = shape_of(spec.reference or spec.model)
    split = spec.split
    parts = {"scored": split.members + split.nonmembers, "population": split.population,
             "known_members": split.known_members}  # fmt: skip
    trained = split.members + split.known_members
    trained += split.members * split.repeated * (sum(split.repeats) / len(split.repeats) - 1)
    model_spec = resolve_model(spec.model)
    data_key = (spec.dataset, spec.seed, spec.split, spec.train.max_length)
    keys = {"model": ("model", spec.model, spec.reference, *data_key), "data": ("data", *data_key),
            "texts": ("texts", "offline" if model_spec.source == "tiny" else spec.model, *data_key)}  # fmt: skip
    own, shared = Work(), {key: Work() for key in keys.values()}
    dtype = DTYPE_BYTES.get(model_spec.dtype, 4)
    own.add("load_model", cell=1, load_byte=shape.total_params * dtype)
    own.add("split", cell=1)
    extra = getattr(technique, "virtual_tokens", 0) if technique.prompt_learning else 0
    demos = getattr(technique, "demonstrations", 0) if technique.in_context else 0
    seq = _lengths(shape, tokens, extra, demos, spec.train.max_length)
    found = trainable_params(spec.model, technique)
    trainable, trainable_matmul, body = found.params, found.matmul, found.body
    if technique.trains:
        passes = spec.train.epochs * trained
        flops = train_flops(shape, seq[0], 1, trainable_matmul, seq[1], inputs=body)
        if getattr(spec.train, "gradient_checkpointing", False) or checkpointing:  # the layers' forward again
            flops += forward_flops(shape, seq[0], 1, seq[1])
        own.add("train", train=passes * flops, gradient=passes)
    else:
        own.add("train", cell=1)  # a technique that trains nothing still passes through the training step
    if plan.defence_stage is not None:  # building its guard (DP-SGD: the noise multiplier for the target ε)
        own.add(plan.defence_stage, cell=1)
    n_checkpoints = len(plan.checkpoints)
    own.add("utility", forward=n_checkpoints * split.validation * forward_flops(shape, seq[0], 1, seq[1]),
            sequence=n_checkpoints * split.validation)  # fmt: skip
    if technique.trains:
        own.add("save", cell=sum(c.saves for c in plan.checkpoints))
    seqs = {"target": seq, "reference": _lengths(ref_shape, tokens, 0, 0, spec.train.max_length)}
    shapes = {"target": shape, "reference": ref_shape}
    made_texts: set[str] = set()
    for checkpoint in plan.checkpoints:
        for weight in checkpoint.attacks.values():
            own.add("attacks", attack_record=weight * parts["scored"])
        for stage in checkpoint.views:
            if not stage.computed:
                continue
            where = shared[keys["model" if stage.models else "data"]] if stage.shared else own
            model = (shapes[stage.role], seqs[stage.role])
            _add_view(where, stage, parts, model, trainable_matmul, 1.0 if stage.shared else stage.weight)
            made = stage.cost.shared_forward * parts["scored"]
            if made and stage.view.label not in made_texts:  # the neighbour texts: made once a split
                made_texts.add(stage.view.label)
                shared[keys["texts"]].add(
                    stage.view.label + SHARED,
                    neighbour=made,
                    forward=made * forward_flops(_masked_lm(), seq[0]),
                )
    _shipped(own, spec, plan.checkpoints[-1], (shapes, seqs, parts, trainable_matmul))
    return CellWork(own, shared, data_key, trainable, shape, tokens, technique, found.added)


def _shipped(own: Work, spec: Any, last: Any, priced: tuple) -> None:
    """The shipped forms' work (``score.shipped``): each made once (``ship <form>``), then the last
    checkpoint's own views again, but those a shipped model cannot give (a gradient, a trajectory), and
    its validation NLL."""
    shapes, seqs, parts, trainable_matmul = priced
    for form in spec.score.shipped:
        own.add(f"ship {form}", cell=1)
        target = (shapes["target"], seqs["target"])
        own.add("utility", forward=spec.split.validation * forward_flops(target[0], target[1][0], 1, target[1][1]),
                sequence=spec.split.validation)  # fmt: skip
        for stage in last.views:
            if (
                stage.computed
                and not stage.shared
                and not stage.cost.backward
                and not stage.view.reads_earlier
            ):
                _add_view(
                    own, stage, parts, (shapes[stage.role], seqs[stage.role]), trainable_matmul, stage.weight
                )


def _lengths(shape: Shape, tokens: Tokens, extra: int, demos: int, max_length: int) -> tuple[int, int]:
    """(target tokens, source tokens) of one pass: virtual tokens and in-context demonstrations added."""
    if shape.seq2seq:
        source = tokens.source * (1 + demos) + extra
        return round(tokens.target), round(source)
    return round(min(tokens.text * (1 + demos), max_length * (1 + demos)) + extra), 0


def _add_view(work: Work, stage: Any, parts: dict[str, int], model: tuple[Shape, tuple[int, int]],
              trainable_matmul: int, weight: float) -> None:  # fmt: skip
    """Price a view stage of a cell's plan on ``parts`` for a model of that (shape, (prompt, target)
    tokens per text)."""
    (shape, seq), cost = model, stage.cost
    texts = weight * (sum(parts.get(p, 0) for p in stage.parts if p in parts) or parts["scored"])
    if not stage.models:  # model-free: the blind control's permutation test, or token counts
        work.add(stage.label, blind_record=cost.records * texts, cell=weight)
        return
    per_text = forward_flops(shape, seq[0], 1, seq[1])
    work.add(stage.label, forward=cost.forward * texts * per_text, sequence=cost.forward * texts)
    if cost.backward:
        backward = train_flops(shape, seq[0], 1, trainable_matmul, seq[1]) - per_text
        work.add(stage.label, train=cost.backward * texts * backward, gradient=cost.backward * texts)


@functools.cache
def _masked_lm() -> Shape:
    from privauditor.tasks.models import masked_lm_config

    config = masked_lm_config()
    config.is_decoder = True  # built as an LM head model on the meta device: the same matrices
    return Shape.from_config(config)
