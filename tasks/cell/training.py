"""A cell's adaptation trained: in this process under its defence's guard, or on ``train.workers`` ranks
under DeepSpeed (the orchestrator's launcher), each checkpoint snapshotted for the audit that follows
(:mod:`privauditor.tasks.cell.run`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..infra.deadline import remaining


def train_cell(  # noqa: PLR0913  # what the cell has loaded and drawn, and how it runs
    spec: Any,
    model: Any,
    loaded: Any,
    split: Any,
    snapshots: Path,
    clock: Callable[[str, Callable[[], Any]], Any],
    distributed: Any,
    resume: Any = None,
) -> tuple[Any, Any]:
    """The adaptation trained, under its defence's guard where it has one (DeepSpeed's out of this process,
    through ``distributed``), each checkpoint snapshotted into ``snapshots``: the loss record and the guard
    (None without a defence). ``resume``: the cell's
    :class:`~privauditor.tasks.training.resume.ResumeFolder` (in this process only): a drain notice saves
    the step state there and stops, and a state found there is trained on from its step."""
    from ..defences import TrainingRun
    from ..training.loop import Loop, train, train_config_of
    from ..training.snapshots import saver

    defence, guard = spec.defence_plugin(), None
    if defence is not None:
        ids = [e.sample_id for e in split.trained]
        unit_of = {i: n for n, i in enumerate(dict.fromkeys(ids))}  # a record's copies share its unit
        units = tuple(unit_of[i] for i in ids)
        run = TrainingRun(
            len(split.trained), spec.train.batch_size, spec.train.epochs, spec.seed, loaded.seq2seq, units
        )
        guard = clock(defence.stage, lambda: defence.guard(spec.defence_params, run))
    if spec.train.deepspeed is not None:
        return clock("train", lambda: train_elsewhere(spec, snapshots, distributed)), guard
    if (
        spec.train.gradient_checkpointing
    ):  # activations recomputed in the backward: less memory, one more forward
        from ..training.checkpointing import enable

        enable(model)
    loop = Loop(
        checkpoints=spec.train.checkpoints,
        on_checkpoint=saver(model, snapshots),
        resume=resume,
        **({} if guard is None else guard.loop),
    )
    config = train_config_of(spec)
    return clock(
        "train", lambda: train(model, loaded.tokenizer, split.trained, config, loaded.seq2seq, loop)
    ), guard


def train_elsewhere(spec: Any, workdir: Path, distributed: Any) -> Any:
    """Train on ``train.workers`` ranks under DeepSpeed; the snapshots land in ``workdir``."""
    from ..training.distributed import trained_result

    distributed({"cell": spec, "workdir": str(workdir), "timeout_s": remaining()}, spec.train.workers)
    return trained_result(workdir)
