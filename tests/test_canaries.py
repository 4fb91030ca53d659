"""Canaries and their exposure (tasks/leakage/canaries.py): drawing, the split part, exact and estimated exposure,
the null, and a cell where repeated canaries are exposed and an untrained model's are not."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.data.splits import draw_split
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.leakage.canaries import (
    CanarySettings,
    exposure,
    exposures,
    make_canaries,
    null_quantile,
)
from privauditor.tasks.passes.signal_table import TokenStats
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.spec.sections import SplitConfig


class Words:
    """A tokenizer of whitespace-separated words (each digit of a spaced secret one token)."""

    def __call__(self, texts, add_special_tokens=False):
        if isinstance(texts, str):
            return {"input_ids": [hash(w) % 1000 for w in texts.split()]}
        return {"input_ids": [[hash(w) % 1000 for w in t.split()] for t in texts]}


class Table:
    """A scorer whose log-probability of a secret is ``logp(secret)``, spread over its digits."""

    def __init__(self, logp):
        self.tokenizer, self.logp, self.calls = Words(), logp, 0

    def score(self, examples, max_length, batch_size, moments=True):
        self.calls += 1
        found = []
        for e in examples:
            words = e.target.split()
            secret = "".join(w for w in words if w.isdigit())
            per = np.zeros(len(words), np.float32)
            per[-len(secret) :] = self.logp(secret) / len(secret)
            found.append(TokenStats(np.zeros(len(words), np.int32), per))
        return found


def test_canaries_are_drawn_from_the_seed_and_trained_as_many_times_as_they_repeat():
    settings = CanarySettings(count=3, repeats=(1, 4), digits=5, inclusion=0.5)
    first, again, other = make_canaries(settings, 0), make_canaries(settings, 0), make_canaries(settings, 1)
    assert first == again and first != other and len(first) == 6
    assert [c.repeats for c in first] == [1, 1, 1, 4, 4, 4]
    for c in first:
        assert len(c.secret) == 5 and c.secret.isdigit()
        assert c.example.target == f"{c.before} {' '.join(c.secret)}" and c.before.startswith(
            "The account number of "
        )
    many = make_canaries(CanarySettings(count=200, repeats=(1,), inclusion=0.5), 0)
    assert 70 < sum(c.included for c in many) < 130  # Binomial(200, 0.5): 99.99 % inside
    data = load_dataset("finance")
    plain = draw_split(data, SplitConfig(members=10, nonmembers=10, validation=5), 0)
    sizes = SplitConfig(members=10, nonmembers=10, validation=5, canaries=settings)
    split = draw_split(data, sizes, 0)
    assert (split.members, split.nonmembers, split.validation) == (
        plain.members,
        plain.nonmembers,
        plain.validation,
    )
    copies = [e.sample_id for e in split.trained if e.sample_id.startswith("canary-")]
    assert len(copies) == sum(c.repeats for c in split.canaries if c.included)
    assert not any(e.sample_id.startswith("canary-") for e in split.scored)


def test_canary_settings_are_checked_and_leave_the_default_ids_alone(tmp_path):
    with pytest.raises(PrivauditorError, match="split.canaries.kind must be one or more of account"):
        CanarySettings(kind="phone")
    with pytest.raises(PrivauditorError, match=r"split.canaries.repeats must be counts of at least 1"):
        CanarySettings(repeats=(0, 2))
    with pytest.raises(PrivauditorError, match=r"inclusion is a probability"):
        CanarySettings(inclusion=0)
    settings = {"model": "tiny-llama", "adaptation": "lora", "dataset": "finance"}
    plain = cell_config(settings, [])
    with_canaries = cell_config(settings, ["split={canaries: {count: 2, repeats: [1, 4]}}"])
    assert with_canaries.split.canaries == CanarySettings(count=2, repeats=(1, 4))
    assert plain.split.canaries is None


@pytest.mark.parametrize("where", [0, 9, 999])
def test_exact_exposure_is_log2_space_less_log2_rank(where):
    """Secrets ordered by value: the secret at ``where`` has rank where + 1 among 1,000."""
    canary = make_canaries(CanarySettings(count=1, repeats=(1,), digits=3), 0)[0]
    canary = type(canary)(canary.example, canary.before, str(where).zfill(3), 1, True)
    scorer = Table(lambda secret: -float(int(secret)))
    found = exposure(scorer, canary, CanarySettings(digits=3), 64, 16, 0)
    assert found == {
        "exposure": pytest.approx(math.log2(1000 / (where + 1))),
        "rank": where + 1,
        "method": "exact",
    }


def test_estimated_exposure_agrees_with_the_exact_one_where_both_exist():
    """10,000 secrets whose log-probabilities are a fixed normal draw: the skew-normal fit from 1,000
    samples puts the secrets ranked 1, 10, 100 and 1,000 where their ranks say. The exact exposure reads
    rank r as the fraction f = r / 10,000 of secrets at least as likely; the estimate's fraction 2^-exposure
    differs from it by the draw (the fraction below the r-th of 10,000 draws has the variance of
    Beta(r, 10,001 - r)) and by the fit's 1,000 samples (a proportion's f (1 - f) / 1,000): within three
    standard deviations of both."""
    from scipy.stats import beta

    values = np.random.default_rng(0).normal(-20.0, 3.0, 10_000)
    order = np.argsort(-values)
    canary = make_canaries(CanarySettings(count=1, repeats=(1,), digits=4), 0)[0]
    for rank in (1, 10, 100, 1000):
        secret = str(order[rank - 1]).zfill(4)
        chosen = type(canary)(canary.example, canary.before, secret, 1, True)
        scorer = Table(lambda s: values[int(s)])
        exact = exposure(scorer, chosen, CanarySettings(digits=4, exact_limit=10_000), 64, 16, 0)
        estimated = exposure(
            scorer, chosen, CanarySettings(digits=4, exact_limit=100, samples=1000), 64, 16, 0
        )
        assert exact["rank"] == rank and estimated["method"] == "estimated"
        f = rank / 10_000
        spread = math.sqrt(beta.var(rank, 10_001 - rank) + f * (1 - f) / 1000)
        assert abs(2 ** -estimated["exposure"] - f) <= 3 * spread, (rank, estimated, exact)


def test_the_null_is_the_exposure_of_uniform_ranks():
    """A model that never saw a canary ranks it uniformly: exposure averages 1/ln 2 = 1.44 bits (The Secret
    Sharer), its median is 1 bit, and means of 8 such exposures fall in the null's 95 % range 95 % of the
    time (simulated over a space of 10^6)."""
    assert null_quantile(0.5, 1) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    ranks = rng.integers(1, 10**6 + 1, size=(20_000, 8))
    means = (math.log2(10**6) - np.log2(ranks)).mean(1)
    assert means.mean() == pytest.approx(1 / math.log(2), abs=0.01)
    inside = (means >= null_quantile(0.025, 8)) & (means <= null_quantile(0.975, 8))
    assert inside.mean() == pytest.approx(0.95, abs=0.01)


def test_exposure_stars_are_holm_over_the_table_and_the_null_p_is_the_gamma_tail():
    """A star is a family-wise claim: 40 table entries each at the null's 99.5th percentile (p = 0.005,
    below the old per-entry 1 % line, so the old table starred all 40) get none after Holm over the 40,
    while a canary ranked first of 1,000 at every repetition (about 10 bits) keeps its star."""
    from privauditor.orchestrator.report.exposure import starred
    from privauditor.tasks.leakage.canaries import null_sf

    assert null_sf(null_quantile(0.995, 4), 4) == pytest.approx(0.005)
    assert null_sf(1.0, 1) == pytest.approx(0.5)  # the null's median exposure is 1 bit
    borderline = null_quantile(0.995, 4)
    found = {f"t{i}": {r: [borderline] * 4 for r in (1, 2, 4, 8)} for i in range(10)}
    found["full"] = {8: [math.log2(1000)] * 4}
    p_holm = starred(found)
    assert len(p_holm) == 41 and borderline > null_quantile(0.99, 4)  # each was starred one by one
    assert all(p > 0.01 for key, p in p_holm.items() if key != ("full", 8)) and p_holm[("full", 8)] <= 0.01


def test_exposures_summarise_by_repeats_and_hold_no_text():
    settings = CanarySettings(count=2, repeats=(1, 4), digits=2, inclusion=0.5)
    canaries = make_canaries(settings, 3)
    found = exposures(Table(lambda s: -float(int(s))), canaries, settings, 64, 16, 0)
    assert {p["canary"] for p in found["canaries"]} == {c.example.sample_id for c in canaries}
    assert sum(v["n"] for v in found["mean_by_repeats"].values()) == 4
    blob = json.dumps(found)
    assert not any(c.secret in blob.replace(c.example.sample_id, "") or c.before in blob for c in canaries)


@pytest.mark.slow
def test_repeated_canaries_are_exposed_and_an_untrained_models_are_not(tmp_path, seed):
    """Full fine-tuning with four canaries trained once and four trained 8 times (1,000 secrets each, exact):
    the base's (``none``) mean exposure lies in the null's 95 % range, full fine-tuning's at 8 repeats
    above the null's 99th percentile; PII inference (score.pii_candidates) at the last checkpoint only.
    A 95 % range: one seed in twenty falls outside it by chance (seed 1 does: 0.53 bits, below 0.62; over
    ten other seeds' untrained models, 80 canaries averaged 1.15 bits). Seed 0: 1.71 bits untrained, 9.97
    (every canary ranked first of 1,000) at 8 repetitions."""
    split = "split={members: 8, nonmembers: 8, validation: 4, canaries: {count: 4, repeats: [1, 8]}}"
    common = {"model": "tiny-gpt2", "dataset": "finance", "seed": seed}
    base = run_cell(cell_config(common | {"adaptation": "none"}, [split, "attacks=[loss]"]), tmp_path)
    found = json.loads((base.path / "extraction.json").read_text())["exposure"]
    values = [c["exposure"] for c in found["canaries"]]
    assert null_quantile(0.025, 8) <= np.mean(values) <= null_quantile(0.975, 8), values
    full = run_cell(
        cell_config(common | {"adaptation": "full"},
                    [split, "attacks=[loss]", "train.epochs=20", "train.lr=0.003", "train.checkpoints=[0, 20]",
                     "score.pii_candidates=4"]),
        tmp_path,
    )  # fmt: skip
    extraction = json.loads((full.path / "extraction.json").read_text())
    found = extraction["exposure"]
    assert found["mean_by_repeats"]["8"]["mean"] > null_quantile(0.99, 4), found["mean_by_repeats"]
    # PII inference among 4 candidates, at the last checkpoint only
    assert extraction["pii_inference"]["candidates"] == 4 and extraction["pii_inference"]["fields"] > 0
    first = json.loads((full.path / "cell.json").read_text())["checkpoints"][0]["extraction"]
    assert "pii_inference" not in first and "exposure" in first
    # the leaderboard's columns and findings.md's section with its figure
    from privauditor.orchestrator.report.exposure import exposure_section
    from privauditor.orchestrator.report.leaderboard import build

    rows = build(tmp_path)
    top = {r["adaptation"]: r["exposure_top"] for r in rows if r["step"] == max(x["step"] for x in rows)}
    assert top["full"] == pytest.approx(found["mean_by_repeats"]["8"]["mean"])
    section = exposure_section(tmp_path, rows)
    assert section[0] == "## Exposure" and (tmp_path / "exposure.png").stat().st_size > 10_000
    lines = "\n".join(section).splitlines()
    assert any(line.startswith("| full |") and line.rstrip(" |").endswith("*") for line in lines)  # r = 8
    assert any(line.startswith("| none |") and "*" not in line for line in lines)


def test_audit_canaries_of_each_kind_are_built_once_with_independent_coins():
    """``record`` canaries come from the pool past every split part; ``random`` and ``designed`` ones are
    written from the base's tokenizer, designed targets being tokens the base finds least likely (so their
    base NLL is higher than random targets') and never shared between canaries."""
    from privauditor.tasks.leakage.audit_canaries import PREFIX, complete
    from privauditor.tasks.models import load_model
    from privauditor.tasks.passes.scorer import Scorer, identity_of

    settings = CanarySettings(kind=("record", "random", "designed"), count=24, repeats=(1,), inclusion=0.5)
    split = draw_split(
        load_dataset("finance"), SplitConfig(members=10, nonmembers=10, validation=5, canaries=settings), 0
    )
    parts = {e.target for e in split.members + split.nonmembers + split.validation}
    records = [c for c in split.canaries if c.kind == "record"]
    assert len(records) == 24 and not {c.example.target for c in records} & parts
    assert 4 < sum(c.included for c in split.canaries) < 68  # Binomial(72, 0.5): far inside
    loaded = load_model("tiny-gpt2")
    base = Scorer(
        loaded.model, loaded.tokenizer, False, identity_of(loaded.model, loaded.tokenizer, "b", None, "none")
    )
    built = complete(split.canaries, loaded, base, 0, 64)
    assert [c.example.sample_id for c in built] == [c.example.sample_id for c in split.canaries]
    assert all(c.base_nll is not None and c.example.target for c in built)
    by_kind = {k: [c for c in built if c.kind == k] for k in ("random", "designed")}
    tokens = [
        loaded.tokenizer(c.example.target, add_special_tokens=False)["input_ids"] for c in by_kind["designed"]
    ]
    assert len({t for ids in tokens for t in ids}) == sum(len(ids) for ids in tokens)  # no token shared
    assert all(
        len(loaded.tokenizer(c.example.prompt, add_special_tokens=False)["input_ids"]) >= PREFIX // 2
        for c in by_kind["random"]
    )
    mean = {k: np.mean([c.base_nll for c in v]) for k, v in by_kind.items()}
    assert mean["designed"] > mean["random"] + 1.0, mean
    assert complete(split.canaries, loaded, base, 0, 64) == built  # seeded: the same canaries again
