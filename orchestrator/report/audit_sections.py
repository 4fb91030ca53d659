"""The sections of an audit's report (``audit_report.py``) that a reviewer signs beside its figures: the
configuration the audit ran with and what its user stated, the TPR at 0 false positives where a TPR at a
fixed FPR cannot be measured, the members' and non-members' scores under each threat model's strongest
attack, the most exposed members (by id and score: never a record's text), and the sign-off block."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: how many of the highest-scoring members the report lists
EXPOSED = 10
#: the fixed FPRs the report reads TPRs at, and the non-members each needs to be measured at all
FIXED_RATES = (("tpr_at_0.1pct_fpr", 1000, "0.1 %"), ("tpr_at_1pct_fpr", 100, "1 %"))


def percent(rate: float) -> str:
    """A rate as a percentage with two significant digits (``3.7 %``, ``14 %``)."""
    return f"{100 * rate:.2g} %"


def zero_fp(metrics: Mapping[str, Mapping[str, Any]]) -> dict[str, str] | None:
    """The TPR at 0 false positives as the report shows it where a TPR at 0.1 % or 1 % FPR cannot be
    measured (fewer than 1,000 or 100 non-members): its column's header, with the FPR that 0 false positives
    of N bound (one-sided 95 %), and the note under the tables; None where every fixed rate was measured."""
    scored = [m for m in metrics.values() if "auc" in m]
    if all(m.get(rate) is not None for m in scored for rate, _, _ in FIXED_RATES):
        return None
    found = [m for m in scored if m.get("tpr_at_0fp") is not None]
    if not found:
        return None
    sizes = {m["n_nonmembers"]: m["tpr_at_0fp_fpr_bound"] for m in found}
    bounds = "; ".join(
        f"0 false positives of {n} bound the FPR to at most {percent(b)}" for n, b in sorted(sizes.items())
    )
    header = "TPR at 0 false positives [95 % CI]"
    if len(sizes) == 1:
        header += f" (FPR ≤ {percent(next(iter(sizes.values())))})"
    unread = [label for _, need, label in FIXED_RATES if any(m["n_nonmembers"] < need for m in found)]
    note = (
        f"A TPR at {' and '.join(unread)} FPR cannot be measured with these non-members (-): the TPR "
        "at 0 false positives is read instead, the share of members scored above every non-member, with its "
        f"95 % Clopper-Pearson interval; {bounds} (one-sided 95 %), the smallest FPR this sample vouches for."
    )
    return {"header": header, "note": note}


def configuration(
    record: Mapping[str, Any], verdict: Mapping[str, Any], metrics: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The audit's configuration as its ``cell.json`` holds it (the model, adapter and files are in "What
    was audited"): what the user stated of the non-members and PII, how it scored (max length, precision,
    seed, ``score.*``), each attack with its hyper-parameters, the views it read and whether it ran (its
    ``metrics``), and how the audited model was trained where that is known (:func:`training`)."""
    from .row_schema import access_of

    config, train = record["config"], record["config"]["train"]
    origin = verdict.get("nonmembers_from")
    stated = {"held-out": "held out at random before training", "collected": "collected after training"}
    pii = [k for k, v in (_extraction(record).get("pii") or {}).items() if isinstance(v, dict) and k != "all"]
    settings = [
        ["non-members obtained", f"{stated[origin]} (as stated)" if origin in stated else "not stated"],
        ["PII fields searched", ", ".join(pii) or "none"],
        ["max length", f"{train['max_length']} tokens (longer records truncated)"],
        ["precision", train.get("precision", "fp32")], ["seed", config["seed"]],
        *([f"score.{key}", value] for key, value in sorted(config["score"].items())),
    ]  # fmt: skip
    attacks = [
        [a["name"], access_of(a["name"]), _settings(a["params"]) or "none",
         "; ".join(f"{v['name']} ({_settings(v['params']) or 'defaults'})" for v in a["views"].values()),
         f"skipped: {metrics[a['name']]['skipped']}" if "skipped" in metrics.get(a["name"], {}) else "ran"]
        for a in config["attacks"]
    ]  # fmt: skip
    return {"settings": settings, "attacks": attacks, "training": training(record)}


def _settings(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(params.items()))


def _extraction(record: Mapping[str, Any]) -> dict[str, Any]:
    return (record.get("checkpoints") or [{}])[0].get("extraction") or {}


def training(record: Mapping[str, Any]) -> tuple[list[list[Any]], str]:
    """How the audited model was trained, where the audit can know it, and where that comes from: the
    privauditor cell that wrote the adapter (its ``cell.json`` beside ``adapter/``, matched by the adapter's
    sha256), else peft's ``adapter_config.json`` (the folder hashed again: the adapter the audit read)."""
    adapter, expected = record["audit"]["adapter"], record["provenance"]["adaptation_hash"]
    params = _settings(record["config"]["adaptation_params"])
    technique = record["config"]["adaptation"] + (f" ({params})" if params else "")
    if adapter is None:
        about = "A full checkpoint: how it was trained is not recorded with it."
        return [["technique", f"{technique} (no adapter: the weights as loaded)"]], about
    cell = _trained_by(Path(adapter).parent / "cell.json", expected)
    if cell is not None:
        about = f"From the privauditor cell that wrote the adapter ({cell['cell_id']})."
        return _cell_training(cell, expected), about
    peft = _peft_settings(Path(adapter), expected)
    about = "From the adapter's adapter_config.json; epochs and learning rate are not recorded in it."
    if peft:
        return peft, about
    return [["technique", technique]], "How long and on what the adapter was trained is not recorded with it."


def _peft_settings(folder: Path, expected: str) -> list[list[Any]]:
    """A peft adapter's settings (type, rank, alpha, dropout, modules, base) from its ``adapter_config.json``
    when the folder still hashes to the audited adapter's sha256; none otherwise."""
    from privauditor.tasks.infra.provenance import directory_hash

    config = folder / "adapter_config.json"
    if not config.is_file() or directory_hash(folder) != expected:
        return []
    settings = json.loads(config.read_text())
    kept = ("peft_type", "r", "lora_alpha", "lora_dropout", "target_modules", "base_model_name_or_path")
    return [[key, settings[key]] for key in kept if settings.get(key) is not None]


def _trained_by(path: Path, expected: str) -> dict[str, Any] | None:
    """The cell record at ``path`` when one of its checkpoints has the adapter's sha256, else None."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    checkpoints = found.get("checkpoints") if isinstance(found, dict) else None
    return found if any(c.get("adaptation_hash") == expected for c in checkpoints or []) else None


def _cell_training(cell: Mapping[str, Any], expected: str) -> list[list[Any]]:
    config, train = cell["config"], cell["config"]["train"]
    epoch = next(c["epoch"] for c in cell["checkpoints"] if c.get("adaptation_hash") == expected)
    defence = config["defence"] + (
        f" ({_settings(config['defence_params'])})" if config["defence_params"] else ""
    )
    params = _settings(config["adaptation_params"])
    return [
        ["technique", config["adaptation"] + (f" ({params})" if params else "")],
        ["data", f"{config['dataset']}: {cell['n_members']} members (seed {config['seed']})"],
        ["epochs", f"{epoch:g} of {train['epochs']}" if epoch is not None else train["epochs"]],
        ["learning rate", train["lr"]], ["batch size", train["batch_size"]],
        ["max length", f"{train['max_length']} tokens"], ["precision", train.get("precision", "fp32")],
        ["defence", defence],
    ]  # fmt: skip


def _scores(folder: Path) -> Any:
    """The audit's ``scores.parquet`` (attack, sample_id, member, score), its finite scores; None without."""
    import numpy as np
    import pandas as pd

    path = folder / "scores.parquet"
    if not path.is_file():
        return None
    scores = pd.read_parquet(path, columns=["attack", "sample_id", "member", "score"])
    return scores[np.isfinite(scores["score"])]


def histograms(folder: Path, strongest: Sequence[Mapping[str, Any]]) -> bytes | None:
    """One panel per threat model: the members' and non-members' scores under its strongest attack (rows of
    the report's attack table); None without the audit's scores."""
    from .plots import score_histograms_png

    scores = _scores(folder)
    if scores is None or not strongest:
        return None
    panels = []
    for r in strongest:
        chosen = scores[scores["attack"] == r["attack"]]
        if len(chosen):
            side = chosen["member"].astype(bool)
            title = f"{r['access']}: {r['attack']} (AUC {r['auc_value']:.3f})"
            panels.append((title, chosen["score"][side].tolist(), chosen["score"][~side].tolist()))
    return score_histograms_png(panels) if panels else None


def exposed(folder: Path, attack: str, shown: int = EXPOSED) -> list[list[Any]]:
    """The ``shown`` members ``attack`` scores highest: rank, the record's id (its file's ``id``, else its
    line), its score and how many non-members score at least as high. Ids and scores only, never text."""
    scores = _scores(folder)
    if scores is None:
        return []
    chosen = scores[scores["attack"] == attack]
    side = chosen["member"].astype(bool)
    nonmembers = chosen["score"][~side].to_numpy()
    top = chosen[side].sort_values("score", ascending=False, kind="stable").head(shown)
    return [
        [rank, str(sample_id).removeprefix("m:"), f"{score:.4g}", int((nonmembers >= score).sum())]
        for rank, (sample_id, score) in enumerate(zip(top["sample_id"], top["score"], strict=True), 1)
    ]


def audited(record: Mapping[str, Any], finding: str, version: str, written: str) -> list[list[str]]:
    """What the sign-off is for: the audit, the model and adapter, the files by sha256, the finding, the
    tool that found it and when this report was written."""
    audit, files = record["audit"], record["audit"].get("files", {})
    adapter = "none" if audit["adapter"] is None else f"sha256 {record['provenance']['adaptation_hash']}"
    model = f"{audit['model']} (revision {audit.get('revision') or 'main'})"
    rows = [["audit", record["cell_id"]], ["model", model], ["adapter", adapter]]
    for part, label in (("members", "members"), ("nonmembers", "non-members")):
        f = files.get(part)
        count = f"{record[f'n_{part}']} records"
        rows.append([label, f"{count}, sha256 {f['sha256']}" if f else count])
    return rows + [
        ["finding", finding.upper()],
        ["tool", f"privauditor {version}"],
        ["report written", written],
    ]
