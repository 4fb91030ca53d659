"""``privauditor audit --dry-run``: how an audit would read its files, scoring and writing nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..data.chat import template_of
from ..spec.config import CellConfig
from .run import AuditFiles, AuditOptions, _identify, _load_target


def preview_audit(  # noqa: PLR0913  # run_audit's arguments and how many records to show
    model: str, members: str, nonmembers: str, config: CellConfig, options: AuditOptions, shown: int = 2
) -> dict[str, Any]:
    """What ``audit --dry-run`` shows, without scoring or writing anything: the files read and checked,
    the model's chat template and max length, and for the first ``shown`` records of each file how they
    render (prompt and scored target) and how many target tokens the loss would score."""
    from ..training.receipts import first_label_in_loss, receipt

    if options.render == "text":
        options = dataclasses.replace(options, chat_scored="all")
    inputs = _identify(AuditFiles(model=model, members=members, nonmembers=nonmembers), config, options)
    target = _load_target(inputs, options)
    loaded, max_length = target.loaded, inputs.spec.train.max_length
    first = first_label_in_loss(loaded.model)
    records = {
        part: [{"id": e.sample_id, "prompt": e.prompt, "target": e.target,
                "scored": receipt(loaded.tokenizer, [e], max_length, loaded.seq2seq, first).as_dict()}
               for e in examples[:shown]]
        for part, examples in target.parts.items()
    }  # fmt: skip
    return {
        "audit_id": inputs.audit_id, "records": {k: len(v) for k, v in target.parts.items()},
        "chat_template": template_of(loaded.tokenizer) if inputs.chats else None, "max_length": max_length,
        "warnings": inputs.warnings, "shown": records,
    }  # fmt: skip
