"""An audit's verdict: one test over its attacks, read together with the model-free control.

- **Leakage** is one test over the attacks, never the strongest AUC read alone (the largest of several
  AUCs exceeds 0.5 under the null). Each attack's members-above-non-members test is the one-sided
  Mann-Whitney U test of its scores (``scipy.stats.mannwhitneyu``, ``alternative="greater"``: the test
  of its AUC against 0.5), and Holm's step-down adjusts them over the attacks
  (``statsmodels.stats.multitest.multipletests``, ``method="holm"``); leakage is detected when an
  adjusted p-value is below 0.05. Model-free controls are not in that family.
- **Members scoring lower** is the same test's other tail (``alternative="less"``), Holm-adjusted over the
  attacks as a family of its own, at 0.05. An attack's scores are oriented so that members score higher;
  members significantly *lower* means the files were swapped or differ in distribution, never that
  nothing was detected. The finding is then ``reversed``, and no leakage verdict is given.
- **Shift**: the ``blind`` control's label-permutation p-value (``views/blind.py``). Below 0.05 the two
  files differ in distribution in a way a bag of n-grams sees, and the attacks' AUCs measure that shift,
  not leakage (Das et al. 2024, https://arxiv.org/abs/2406.16201). Its absence is not proof of i.i.d.
  data: the control sees lexical shifts only.
- **What could have been found**: with nothing detected, the smallest AUC a one-sided rank test at the
  family's first Holm level (0.05 / attacks) finds with 80 % power at these file sizes, from Happ et al.
  2019's sample-size formula (``statsmodels.stats.nonparametric.samplesize_rank_compare_onetail``) on
  binormal scores, inverted by bisection over the AUC.
- **How the non-members were obtained** (``held-out``: drawn at random from the same data before
  training; ``collected``: gathered afterwards): only held-out non-members make the AUCs interpretable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..infra.files import write_json
from ..infra.results import CellFolder
from .features import carriers

ALPHA = 0.05
POWER = 0.8


def attack_tests(scores: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, dict[str, float]]:
    """Per attack (name -> (member mask, scores)): its AUC, one-sided Mann-Whitney p and Holm's p."""
    from scipy.stats import mannwhitneyu
    from statsmodels.stats.multitest import multipletests

    found = {}
    for name, (member, score) in scores.items():
        member = np.asarray(member, dtype=bool)
        score = np.asarray(score, dtype=np.float64)
        test = mannwhitneyu(score[member], score[~member], alternative="greater")
        lower = mannwhitneyu(score[member], score[~member], alternative="less")
        found[name] = {
            "auc": float(test.statistic) / (member.sum() * (~member).sum()),
            "p": float(test.pvalue),
            "p_lower": float(lower.pvalue),
        }
    for key in ("p", "p_lower") if found else ():  # each tail a family of its own, Holm over the attacks
        adjusted = multipletests([t[key] for t in found.values()], alpha=ALPHA, method="holm")[1]
        for t, p in zip(found.values(), adjusted, strict=True):
            t[f"{key}_holm"] = float(p)
    return found


def detectable_auc(n_members: int, n_nonmembers: int, attacks: int) -> float | None:
    """The smallest AUC found with 80 % power by a one-sided rank test at 0.05 / ``attacks`` with these
    sizes (Happ et al. 2019 via statsmodels; binormal scores); None when not even 0.999 is."""
    from scipy.stats import norm
    from statsmodels.stats.nonparametric import samplesize_rank_compare_onetail

    reference = norm.ppf((np.arange(2000) + 0.5) / 2000)  # non-members' scores: standard normal quantiles
    level = ALPHA / max(attacks, 1)

    def needed(auc: float) -> float:
        shifted = reference + np.sqrt(2) * norm.ppf(auc)  # binormal with equal variances: AUC = auc
        result = samplesize_rank_compare_onetail(
            shifted, reference, level, POWER, nobs_ratio=n_nonmembers / n_members, alternative="larger"
        )
        return result.nobs_total

    total = n_members + n_nonmembers
    low, high = 0.505, 0.999
    if needed(high) > total:
        return None
    for _ in range(30):
        middle = (low + high) / 2
        low, high = (middle, high) if needed(middle) > total else (low, middle)
    return round(high, 3)


def shift_of(audit_dir: Path, record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The blind control's shift test (auc, p_value, permutations), if the audit ran it."""
    import pyarrow.parquet as pq

    from ..views.blind import METADATA

    path = record.get("views", {}).get("blind", {}).get("blind")
    if path is None:
        return None
    metadata = pq.read_schema(Path(audit_dir).parents[1] / path).metadata
    return json.loads(metadata[METADATA])


def baseline_of(audit_dir: Path, about: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The baseline (the un-adapted base attacked on the same files: ``audit/run.py``): its model and each
    attack's AUC with its interval; None where the audit ran none."""
    if not about:
        return None
    metrics = json.loads((Path(audit_dir) / about["path"] / "metrics.json").read_text())
    attacks = {
        name: {"auc": m["auc"], "auc_ci": m.get("auc_ci")} for name, m in metrics.items() if "auc" in m
    }
    return {"model": about["model"], "attacks": attacks}


def verdict(audit_dir: Path, nonmembers_from: str | None = None, write: bool = True) -> dict[str, Any]:
    """The audit's verdict from its scores and controls (see the module doc); also written as
    ``verdict.json`` in the audit's folder unless ``write`` is false."""
    import pyarrow.parquet as pq

    from ..attacks import ATTACKS

    audit_dir = Path(audit_dir)
    record = CellFolder.at(audit_dir).record()
    rows = pq.read_table(audit_dir / "scores.parquet").to_pydict()
    scores: dict[str, tuple[list, list]] = {}
    for attack, member, score in zip(rows["attack"], rows["member"], rows["score"], strict=True):
        if ATTACKS.get(attack).access != "model-free":
            scores.setdefault(attack, ([], []))
            scores[attack][0].append(member)
            scores[attack][1].append(score)
    tests = attack_tests({k: (np.array(m), np.array(s)) for k, (m, s) in scores.items()})
    shift = shift_of(audit_dir, record)
    about = record.get("audit") or {}
    if shift is not None and about.get("features"):  # what tells the files apart, for a shift found
        shift["carried_by"] = carriers(about["features"])
        shift["words"] = about["features"]["words"]
    found = {
        "attacks": tests,
        "leakage": any(t["p_holm"] < ALPHA for t in tests.values()),
        "reversed": sorted(name for name, t in tests.items() if t["p_lower_holm"] < ALPHA),
        "shift": None if shift is None else shift | {"detected": shift["p_value"] < ALPHA},
        "detectable_auc": detectable_auc(record["n_members"], record["n_nonmembers"], len(tests)),
        "nonmembers_from": nonmembers_from,
        "baseline": baseline_of(audit_dir, about.get("baseline")),
    }
    found["conclusion"] = conclusion(found)
    if write:
        write_json(audit_dir / "verdict.json", found)
    return found


def conclusion(found: dict[str, Any]) -> list[str]:
    """The verdict in plain sentences: the finding first, then what limits it."""
    tests, shift = found["attacks"], found["shift"]
    lines = []
    if shift and shift["detected"]:
        lines.append(
            f"The two files differ in distribution: a model-free classifier tells them apart (blind AUC "
            f"{shift['auc']:.3f}, permutation p = {shift['p_value']:.3g}). The attacks' AUCs then measure "
            "that shift, not leakage (Das et al. 2024): no leakage verdict is possible on these files."
        )
        lines.append(_carried(shift))
    elif not tests:
        lines.append("No attack ran (each was skipped: see the table), so there is no leakage verdict.")
    elif found.get("reversed"):
        names = found["reversed"]
        weakest = min(names, key=lambda name: tests[name]["auc"])
        lines.append(
            f"Members score lower than non-members: {len(names)} of {len(tests)} attacks rank them below "
            f"chance (the other tail of the same test, Holm over the attacks, level {ALPHA}); {weakest} has AUC "
            f"{tests[weakest]['auc']:.3f}. The member and non-member files look swapped, or they differ in "
            "distribution: no leakage verdict is possible on these files."
        )
    elif found["leakage"]:
        hits = sorted((t["p_holm"], name) for name, t in tests.items() if t["p_holm"] < ALPHA)
        strongest = max(tests, key=lambda name: tests[name]["auc"])
        lines.append(
            f"Leakage detected: {len(hits)} of {len(tests)} attacks rank members above non-members beyond "
            f"chance (one-sided Mann-Whitney, Holm over the attacks, level {ALPHA}); the strongest, "
            f"{strongest}, has AUC {tests[strongest]['auc']:.3f}."
        )
    else:
        smallest = found["detectable_auc"]
        could = f"AUC {smallest:.3f}" if smallest else "an AUC above 0.999"
        lines.append(
            f"No leakage detected by {len(tests)} attacks at these sizes: an attack would need {could} to be "
            "found with 80 % power. This bounds what the audit could see; it is not evidence of privacy."
        )
    if found.get("baseline") and tests:
        lines.append(_against_baseline(tests, found["baseline"]))
    if shift is None:
        lines.append("The blind control did not run: a shift between the files could not be ruled out.")
    elif not shift["detected"]:
        lines.append(
            f"The blind control detected no shift (p = {shift['p_value']:.3g}); it sees lexical shifts only, "
            "so this is not proof that the two files are drawn alike."
        )
    origin = found["nonmembers_from"]
    if origin == "collected":
        lines.append(
            "The non-members were collected after training: only non-members held out at random before "
            "training make these AUCs interpretable; any difference in how the files were gathered shows up "
            "as leakage."
        )
    elif origin is None:
        lines.append(
            "How the non-members were obtained was not stated (--nonmembers-from held-out|collected): only "
            "non-members held out at random before training make these AUCs interpretable."
        )
    return lines


def _carried(shift: Mapping[str, Any]) -> str:
    """Which simple features tell the files apart (``features.py``), as one sentence."""
    if "carried_by" not in shift:
        return "Which features tell the files apart was not recorded."
    if not shift["carried_by"]:
        return (
            "No single simple feature (length, format, a common word) separates them on its own: the "
            "difference lies in combinations of n-grams the control reads together."
        )
    return "What separates them: " + "; ".join(shift["carried_by"]) + "."


def _against_baseline(tests: Mapping[str, Mapping[str, float]], baseline: Mapping[str, Any]) -> str:
    """The audited model's strongest attack against the same attack on the un-adapted base (same files)."""
    shared = [name for name in tests if name in baseline["attacks"]]
    if not shared:
        return f"The un-adapted base ({baseline['model']}) ran none of these attacks: no baseline to compare."
    name = max(shared, key=lambda n: tests[n]["auc"])
    base = baseline["attacks"][name]
    ci = base.get("auc_ci")
    interval = "" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]"
    line = (
        f"Baseline: the un-adapted base ({baseline['model']}) on the same files has {name} AUC "
        f"{base['auc']:.3f}{interval} where the audited model has {tests[name]['auc']:.3f}"
    )
    if ci is not None and (ci[0] > 0.5 or ci[1] < 0.5):
        return line + (
            ": the base already tells the files apart, so part of what the attacks see predates the adaptation "
            "(these records in its pre-training, or a difference between the files)."
        )
    return line + ": the base does not tell the files apart, so the difference is what the adaptation added."
