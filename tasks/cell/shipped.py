"""A cell's last checkpoint audited as it ships (``score.shipped``: tasks/shipping), beside the trained
model and without training again.

Each form of the last checkpoint's model is scored and attacked into ``shipped/<form>/`` of the cell's
folder (the contract's files), its views kept under its own identity (the adaptation hash
``<hash>+shipped:<form>``, as ``privauditor audit --shipped`` names it), by the last checkpoint's attacks
on the same split, so a form's numbers pair with the trained model's record by record. Attacks that read a
training trajectory or take the gradient of the trained parameters are skipped with the reason (a shipped
model has neither: :func:`~privauditor.tasks.cell.plan.skip_reason`), and the one-run DP audit stays the
trained model's. A form that cannot ship (a GGUF of a family transformers cannot read, ``nf4`` without a
GPU) or is the trained model itself (``merged`` of a plain model) is recorded with why, and not audited.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..infra.records import checkpoint_record
from .audit_settings import CellAudit, how_at, model_utility


def audit_shipped(
    cell: CellAudit, stage: Any, earlier: tuple[Any, ...], trained_hash: str
) -> list[dict[str, Any]]:
    """The ``shipped`` records of ``cell.json``: the last checkpoint (the plan's ``stage``, after the
    ``earlier`` checkpoints, adaptation hash ``trained_hash``) as each form of ``score.shipped``."""
    from ..shipping import as_trained, unsupported_reason

    spec = cell.trained.spec
    family = cell.trained.loaded.family.name
    found: list[dict[str, Any]] = []
    for form in spec.score.shipped:
        reason = unsupported_reason(form, spec.adaptation, family)
        if as_trained(form, spec.adaptation):
            reason = f"{spec.adaptation} trains one plain model: merged is the model as trained"
        if form == "int8" and spec.train.precision != "fp32":
            reason = f"int8 quantises float32 weights: not at train.precision {spec.train.precision}"
        if reason is not None:
            found.append({"shipped": form, "skipped": reason})
            continue
        found.append(_audit_form(cell, stage, earlier, trained_hash, form))
    return found


def _audit_form(
    cell: CellAudit, stage: Any, earlier: tuple[Any, ...], trained_hash: str, form: str
) -> dict[str, Any]:
    """One form's record (the last checkpoint's, with ``shipped`` and what shipping did under ``ship``)."""
    from ..passes.scorer import Scorer, identity_of
    from ..shipping import ship
    from ..training.snapshots import load_snapshot
    from .evaluate import evaluate
    from .plan import Facts, skipped_attacks

    trained, spec = cell.trained, cell.trained.spec
    loaded = trained.loaded
    load_snapshot(trained.model, trained.snapshots, cell.last)
    work = Path(tempfile.mkdtemp(prefix="ship-", dir=cell.cell_dir))  # a GGUF file, read back, removed
    try:
        shipping = functools.partial(ship, form, trained.model, spec.adaptation, loaded.family.name, work)
        model, done = cell.clock(f"ship {form}", shipping)  # its views and attacks: under their own labels
    finally:
        shutil.rmtree(work, ignore_errors=True)
    folder = cell.cell_dir / "shipped" / form
    attacks = [a for a in spec.attacks if a.name in stage.runs]
    facts = Facts(earlier=bool(earlier), in_context=trained.contexts is not None, shipped=True)
    skipped = stage.skipped | skipped_attacks(attacks, facts)
    adaptation_hash = f"{trained_hash}+shipped:{form}"
    identity = identity_of(model, loaded.tokenizer, spec.model, spec.base, adaptation_hash)
    target = Scorer(model, loaded.tokenizer, loaded.seq2seq, identity, trained.contexts)
    how = dataclasses.replace(
        how_at(cell, folder, cell.last, stage, earlier),
        skipped=skipped, elsewhere=None, one_run=False, gradient_canaries=None,
    )  # fmt: skip
    evaluated = evaluate(target, cell.parts, attacks, how)
    epoch = next(e for e, s in trained.checkpoints if s == cell.last)
    return dict(checkpoint_record(
        epoch=epoch,
        step=cell.last,
        best=cell.last == cell.best,
        path=str(folder.relative_to(cell.cell_dir)),
        utility_loss=cell.clock("utility", lambda: model_utility(trained, model)),
        adaptation_hash=adaptation_hash,
        attacks=[a.name for a in attacks],
        views=evaluated.views,
        extraction=evaluated.extraction,
        shipped=form,
        ship=done,
    ))  # fmt: skip
