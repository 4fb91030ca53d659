"""Golden tests: every attack's formula on hand-made signals, against scores computed by hand."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from privauditor.tasks.attacks import ATTACKS, build_attack
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.passes.signal_table import Signals, zlib_bytes
from privauditor.tasks.spec.config import DEFAULT_ATTACKS


def f32(*values):
    return np.array(values, dtype=np.float32)


def make_signals(logp, mu=None, sigma=None, zlib_sizes=None):
    n = len(logp)
    return Signals(
        sample_id=[f"s{i}" for i in range(n)],
        member=np.array([i % 2 == 0 for i in range(n)]),
        token_ids=[np.arange(len(lp), dtype=np.int32) for lp in logp],
        logp=logp,
        mu=mu or [np.zeros_like(lp) for lp in logp],
        sigma=sigma or [np.ones_like(lp) for lp in logp],
        zlib_bytes=np.array(zlib_sizes or [10] * n, dtype=np.int64),
    )


def score(name, params=None, **views):
    """The attack's scores on hand-made views (``signals`` → the target's signals by default)."""
    return build_attack(name, params).score(views)


TWO = [f32(-1.0, -2.0, -3.0, -4.0, -5.0), f32(-0.5, -0.5)]


def test_every_design_attack_is_registered_under_its_file_stem():
    assert set(DEFAULT_ATTACKS) <= set(ATTACKS.names())
    for name, cls in ATTACKS.items():
        assert cls.name == name and cls.__module__.endswith(f".{name}") and cls.paper.startswith("https://")


def test_loss_is_minus_mean_token_nll():
    assert score("loss", signals=make_signals(TWO)) == pytest.approx([-3.0, -0.5])


def test_zlib_divides_nll_by_compressed_bytes():
    scores = score("zlib", signals=make_signals(TWO, zlib_sizes=[30, 4]))
    assert scores == pytest.approx([-3.0 / 30, -0.5 / 4])
    assert zlib_bytes("abcabcabc") == len(zlib.compress(b"abcabcabc"))
    assert zlib_bytes("é") == len(zlib.compress("é".encode()))


SEVEN = [f32(-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0)]


@pytest.mark.parametrize(
    ("k", "logp", "expected"),
    [
        (0.2, TWO, [-5.0, -0.5]),  # 20 % of 5 tokens is 1; of 2 tokens int(0.4) = 0, so at least 1
        (0.4, TWO, [-4.5, -0.5]),  # 40 % of 5 is 2
        (1.0, TWO, [-3.0, -0.5]),
        (0.2, SEVEN, [-7.0]),  # int(1.4) = 1 token (ceil would keep 2: -6.5)
        (0.5, SEVEN, [-6.0]),  # int(3.5) = 3 tokens: -5, -6, -7 (ceil would keep 4: -5.5)
    ],
)
def test_min_k_averages_the_lowest_k_percent_rounded_down(k, logp, expected):
    """``max(1, int(k * n))`` tokens, as the Min-K% paper's code and MIMIR keep."""
    assert score("min_k", {"k": k}, signals=make_signals(logp)) == pytest.approx(expected)


def test_min_k_pp_standardises_each_token_by_mu_and_sigma():
    logp = [f32(-1.0, -2.0, -6.0, -3.0, -2.5)]
    mu = [f32(-2.0, -2.0, -4.0, -1.0, -2.5)]
    sigma = [f32(1.0, 2.0, 1.0, 0.5, 1.0)]
    # z = [1, 0, -2, -4, 0]; lowest 40 % (2 tokens) = -4 and -2; lowest 50 %: int(2.5) = 2 tokens too
    for k in (0.4, 0.5):
        assert score("min_k_pp", {"k": k}, signals=make_signals(logp, mu, sigma)) == pytest.approx([-3.0])


def test_reference_is_reference_nll_minus_target_nll():
    target = make_signals(TWO)
    reference = make_signals([f32(-4.0, -4.0), f32(-0.25, -0.75, -0.5)])
    assert score("reference", signals=target, reference=reference) == pytest.approx([4.0 - 3.0, 0.5 - 0.5])


def test_neighbourhood_is_mean_neighbour_nll_minus_own_nll():
    neighbours = [np.array([4.0, 5.0, 9.0]), np.array([1.0, 2.0, 3.0])]
    scores = score("neighbourhood", {"k": 3}, signals=make_signals(TWO), neighbours=neighbours)
    assert scores == pytest.approx([6.0 - 3.0, 2.0 - 0.5])


def test_gradnorm_scores_small_gradients_as_members():
    assert score("gradnorm", gradients=np.array([3.0, 0.5])) == pytest.approx([-3.0, -0.5])


def test_attacks_declare_the_views_they_need_with_their_own_parameters():
    views = {
        name: {role: (v.name, v.hyperparameters()) for role, v in cls().views().items()}
        for name, cls in ATTACKS.items()
    }
    assert (
        views["loss"] == views["min_k_pp"] == {"signals": ("signals", {"model": "target", "part": "scored"})}
    )
    assert views["reference"]["reference"] == ("signals", {"model": "reference", "part": "scored"})
    assert views["neighbourhood"]["neighbours"] == ("neighbours", {"k": 25, "mask_fraction": 0.1})
    assert views["gradnorm"] == {"gradients": ("grad_norm", {"norm": 2.0})}
    # the attack's hyper-parameters reach its view: another k is another view
    assert build_attack("neighbourhood", {"k": 5}).views()["neighbours"].k == 5
    assert build_attack("gradnorm", {"norm": 1}).views()["gradients"].norm == 1.0


def test_attack_costs_are_their_views_passes_per_text():
    assert str(build_attack("loss").cost()) == "1 fwd"
    assert str(build_attack("reference").cost()) == "2 fwd"
    assert str(build_attack("gradnorm").cost()) == "1 fwd + 1 bwd"
    assert str(build_attack("neighbourhood", {"k": 5}).cost()) == "6 fwd (+5 shared fwd)"
    assert str(build_attack("ezmia").cost()) == str(build_attack("wbc").cost()) == "2 fwd"
    assert str(build_attack("gap_k").cost()) == "1 fwd"
    assert str(build_attack("lt_iqr").cost()) == "0 fwd"  # the checkpoints' stored signals
    assert str(build_attack("camia").cost()) == "3 fwd"  # scored texts, population, known members


def stored_signals(folder, mu_rows):
    """A signals file of format 2 with one member and one non-member per row of ``mu`` (entropy −mu)."""
    from privauditor.tasks.infra.files import write_table

    n = len(mu_rows)
    logp = [f32(-1.0, -4.0, -2.0) - i for i in range(n)]
    signals = make_signals(logp, mu=[f32(*m) for m in mu_rows])
    signals.top1_logp = [np.zeros(3, np.float32)] * n
    signals.rank = [np.full(3, 2, np.int16)] * n
    signals.topk_lse = [np.zeros(3, np.float32)] * n
    signals.topk = 40
    write_table(signals.to_table(), folder / "signals.parquet")
    return str(folder / "signals.parquet")


def test_an_attack_abstains_on_a_text_it_cannot_score_and_on_all_reports_no_auc(tmp_path):
    from privauditor.tasks.cell.attack_job import AttackJob, attack_job

    # surp, k 0.4 of 3 tokens = 1 lowest (position 2, log p -4 - i); entropy -mu there 0.5 (< 2) or 5
    sure, unsure = [-3.0, -0.5, -3.0], [-3.0, -5.0, -3.0]
    file = stored_signals(tmp_path, [sure, unsure, unsure, sure])  # members: rows 0 and 2
    scores, metrics = attack_job(AttackJob("surp", {}, file, {"signals": file}, 100, 0))
    assert scores[[0, 3]] == pytest.approx([-4.0, -7.0]) and (scores[[1, 2]] == -8.0).all()  # below both
    assert (metrics["abstained"], metrics["abstained_members"]) == (2, 1) and "auc" in metrics
    file = stored_signals(tmp_path, [unsure] * 4)
    scores, metrics = attack_job(AttackJob("surp", {}, file, {"signals": file}, 100, 0))
    assert metrics == {"skipped": "abstains on every text: no surprising token", "abstained": 4}
    # an attack that never abstains keeps a NaN as it is (a bug to see, not a text to hide)
    assert build_attack("loss").abstains == "" and build_attack("surp").abstains


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("min_k", {"k": 0}, "fraction"),
        ("min_k_pp", {"k": 1.5}, "fraction"),
        ("neighbourhood", {"k": 0}, "positive int"),
        ("neighbourhood", {"k": 2.5}, "must be int"),
        ("neighbourhood", {"mask_fraction": 1.0}, "mask_fraction"),
        ("gradnorm", {"norm": -1}, "positive"),
        ("min_k", {"kk": 0.2}, "did you mean 'k'"),
        ("min_k", {"k": "high"}, "must be a number"),
        ("min_k", {"k": True}, "must be a number"),
    ],
)
def test_bad_hyper_parameters_are_one_line_errors(name, params, match):
    with pytest.raises(PrivauditorError, match=match) as error:
        build_attack(name, params)
    assert "\n" not in str(error.value)


def test_unknown_attack_suggests_the_closest_name():
    with pytest.raises(PrivauditorError, match="did you mean 'min_k_pp'"):
        build_attack("min_kpp")


def test_scores_order_members_above_nonmembers_when_they_are_more_likely():
    rng = np.random.default_rng(0)
    member_logp = [f32(*rng.normal(-1.0, 0.3, 20)) for _ in range(5)]
    other_logp = [f32(*rng.normal(-3.0, 0.3, 20)) for _ in range(5)]
    signals = make_signals(member_logp + other_logp)
    for name in ("loss", "zlib", "min_k", "min_k_pp"):
        scores = score(name, signals=signals)
        assert scores[:5].min() > scores[5:].max(), name
        assert all(math.isfinite(s) for s in scores)


def test_rmia_chooses_a_on_held_out_texts_and_then_reads_an_informative_reference():
    """Where the reference explains most of a text's likelihood (p_ref spread over 0.05-0.9, a member's
    target probability a little above its reference's), RMIA at the fixed a 0.3 ranks texts nearly as
    loss does; with a chosen on held-out known members against the population, it reads the reference
    and ranks as the ratio does."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)

    def texts(n, member):
        p_ref = rng.uniform(0.05, 0.9, n)
        p = np.minimum(p_ref * np.exp(rng.normal(0.3 if member else 0.0, 0.1, n)), 0.999)
        return make_signals([f32(np.log(x)) for x in p]), make_signals([f32(np.log(x)) for x in p_ref])

    (m, m_ref), (n, n_ref), (pop, pop_ref), (held, held_ref) = (
        texts(100, True),
        texts(100, False),
        texts(150, False),
        texts(50, True),
    )
    scored, scored_ref = make_signals(m.logp + n.logp), make_signals(m_ref.logp + n_ref.logp)
    views = {"signals": scored, "reference": scored_ref, "population": pop, "population_reference": pop_ref}
    fixed = build_attack("rmia", {"a": 0.3}).score(views)
    chosen = build_attack("rmia")
    tuned = chosen.score(views | {"held_out_members": held, "held_out_members_reference": held_ref})
    loss, ratio = -scored.nll, scored_ref.nll - scored.nll
    assert spearmanr(fixed, loss)[0] > 0.9 and spearmanr(tuned, loss)[0] < 0.5
    assert spearmanr(tuned, ratio)[0] > 0.95 and chosen.fitted()["a"] >= 0.8


def test_camia_lz_complexity_is_the_authors_example_and_its_signs_come_from_held_out_texts():
    """The authors' docstring example: a series binned to 1 0 0 1 1 1 parses into 1, 0, 01, 11: 4 / 6.
    Which way a feature points comes from the held-out known members; the scored texts' labels are
    never read (shuffling them leaves every score as it was)."""
    from privauditor.tasks.attacks.camia import lz_complexity

    assert lz_complexity(np.array([0.0, -2, -2, 0, 0, 0]), 2) == pytest.approx(4 / 6)
    rng = np.random.default_rng(0)

    def texts(n, mean):
        return make_signals([f32(*rng.normal(mean, 0.5, 12)) for _ in range(n)])

    scored = make_signals(texts(20, -1.0).logp + texts(20, -2.0).logp)
    views = {"signals": scored, "population": texts(40, -2.0), "held_out_members": texts(10, -1.0)}
    scores = score("camia", **views)
    assert scores[:20].mean() > scores[20:].mean() and np.isfinite(scores).all()
    shuffled = make_signals(scored.logp)
    shuffled.member = rng.permutation(shuffled.member)
    assert score("camia", **(views | {"signals": shuffled})) == pytest.approx(scores)
    # known "members" that look like the population's opposite turn the likelihood features around
    flipped = score("camia", **(views | {"held_out_members": texts(10, -3.0)}))
    assert flipped[:20].mean() < flipped[20:].mean()
