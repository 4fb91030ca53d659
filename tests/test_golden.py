"""Golden cases for every registered attack: hand-made views, scores worked out by hand (in the comments),
never by calling the code under test. An attack registered without a case here fails the suite."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privauditor.tasks.attacks import ATTACKS, build_attack
from privauditor.tasks.passes.signal_table import Signals
from privauditor.tasks.views.conditioned import HeldOut
from privauditor.tasks.views.self_prompted import SelfPromptedNLL

LN2, LN4, LN8 = math.log(2), math.log(4), math.log(8)


def signals(logp, mu=None, sigma=None, token_ids=None, zlib_bytes=None, rank=None, top1=None):
    n = len(logp)
    return Signals(
        sample_id=[f"s{i}" for i in range(n)],
        member=np.array([i % 2 == 0 for i in range(n)]),
        token_ids=[np.asarray(t, dtype=np.int32) for t in (token_ids or [range(len(lp)) for lp in logp])],
        logp=[np.asarray(lp, dtype=np.float32) for lp in logp],
        mu=[np.asarray(m, dtype=np.float32) for m in (mu or [np.zeros(len(lp)) for lp in logp])],
        sigma=[np.asarray(s, dtype=np.float32) for s in (sigma or [np.ones(len(lp)) for lp in logp])],
        zlib_bytes=np.asarray(zlib_bytes or [10] * n, dtype=np.int64),
        rank=None if rank is None else [np.asarray(r, dtype=np.int16) for r in rank],
        top1_logp=None if top1 is None else [np.asarray(t, dtype=np.float32) for t in top1],
    )


def nll_only(*nll):
    """Signals whose texts have the given mean NLLs (one token each)."""
    return signals([[-x] for x in nll])


#: EZ-MIA: text 1: target logp (-1, -2, -0.5, -3.5), reference (-1.5, -1, -1, -2), ranks (2, 1, 3, 2);
#: text 2: ranks (1, 1, 2), one error-zone token; text 3: ranks (2, 2), target above the reference at both
EZMIA = {
    "signals": signals(
        [[-1, -2, -0.5, -3.5], [-1, -1, -3], [-1, -1]], rank=[[2, 1, 3, 2], [1, 1, 2], [2, 2]]
    ),
    "reference": signals([[-1.5, -1, -1, -2], [-1, -1, -2], [-2, -3]]),
}
#: Gap-K%: text 1 gaps (logp - top1) / sigma = (-0.5, -2/2, -1, -3, 0); text 2 (-1/2, 0); text 3: sigma 0
#: at a token the model predicts (floored at 1e-4: gap 0)
GAP_K = {
    "signals": signals(
        [[-1, -3, -2, -4, -1], [-2, -1], [-1]],
        sigma=[[1, 2, 1, 1, 0.5], [2, 1], [0]],
        top1=[[-0.5, -1, -1, -1, -1], [-1, -1], [-1]],
    )
}

#: CAMIA (one-copy features, 27 in 9 groups): the population is z1 = (-0.5, -0.5, -4), ids (1, 2, 3) and
#: z2 = (-3, -3, -1.2), ids (1, 1, 1); the known member m = (-0.125,) * 3, ids (1, 2, 3); z1 and z2 are
#: scored. Three-token texts: the cut-offs 200 and 300 take all of x, -1 its first two values.
#: z1: loss (-0.5, -5/3, -5/3), ppl exp(-loss), count_above (2/3, 2/3, 2/3), lz 2/3 (binned (2, 2, 0): phrases
#: 2, 20), diversity 1, count_mean (0, 2, 2), calibrated = loss, ppl; count_above_pre 0 (no value above
#: the mean before it). z2: loss (-3, -2.4, -2.4), count_above (0, 1/3, 1), lz 2/3 ((0, 0, 2): 0, 02),
#: diversity (1/2, 1/3, 1/3), count_mean (0, 1, 1), calibrated_loss (-6, -7.2, -7.2), calibrated_ppl (2e^3,
#: 3e^2.4), count_above_pre 1/2. m: loss -0.125, count_above 1, lz 2/3, diversity 1, count_mean 0, pre 0.
#: Signs: m's group mean is above the population's for loss, count_above, diversity, calibrated_loss
#: (flipped); below or equal for the rest. Against a population of two, percentileofscore's "rank" kind
#: gives a value below the other text's rank 1 of 2: p 1/2; above it: 1 (moved to 1 - 1e-10); equal to
#: both: ranks 1 and 2 averaged, 3/4. z1: p 1/2 for loss 3, ppl 3, count_above 2 (its third: -2/3 > -1,
#: p 1), diversity 3, calibrated 6, pre 3 = 20; 1 for count_above 1 and count_mean 2 (2 > 1) = 3; 3/4 for
#: lz 3 and count_mean's first = 4. z2 the mirror (1 x 20, 1/2 x 3, 3/4 x 4). Pearson's statistic
#: 2 sum ln(1 - p), Fisher's -2 sum ln p.
CAMIA_POPULATION = signals([[-0.5, -0.5, -4], [-3, -3, -1.2]], token_ids=[[1, 2, 3], [1, 1, 1]])
CAMIA = {
    "signals": CAMIA_POPULATION,
    "population": CAMIA_POPULATION,
    "held_out_members": signals([[-0.125] * 3], token_ids=[[1, 2, 3]]),
}
ONE = 1 - 1e-10  # p = 1, as moved
CAMIA_PEARSON = [2 * (n * LN2 + m * math.log1p(-ONE) + 4 * math.log(0.25)) for n, m in ((-20, 3), (-3, 20))]
CAMIA_FISHER = [-2 * (-n * LN2 + m * math.log(ONE) + 4 * math.log(0.75)) for n, m in ((20, 3), (3, 20))]

#: one scored text for WBC: per-token losses 1, 2, 0.5, 3, 1 under the target, 1.5, 1, 1, 2, 2 under the reference
WBC = {"signals": signals([[-1, -2, -0.5, -3, -1]]), "reference": signals([[-1.5, -1, -1, -2, -2]])}

# name -> [(hyper-parameters, views, expected scores)]
#: one scored text for Con-ReCaLL: NLL 2, 3 under the non-member prefix, 1 under the member prefix
CON_RECALL = {"signals": signals([[-1, -3]]), "non_members": np.array([3.0]), "members": np.array([1.0])}


def held_out(member_prefix):
    """Held-out texts, a member then a non-member: NLL 1 each, (2, 1.5) under the non-member prefix and
    ``member_prefix`` under the member prefix."""
    labels, nll = np.array([True, False]), np.array([1.0, 1.0])
    return {
        "held_out_non_members": HeldOut(labels, nll, np.array([2.0, 1.5])),
        "held_out_members": HeldOut(labels, nll, np.array(member_prefix)),
    }


GOLDEN = {
    # -mean NLL: text 1 logp (-1, -3) -> -2; text 2 (-0.5) -> -0.5
    "loss": [({}, {"signals": signals([[-1, -3], [-0.5]])}, [-2.0, -0.5])],
    # -NLL / zlib bytes: -2 / 4
    "zlib": [({}, {"signals": signals([[-1, -3]], zlib_bytes=[4])}, [-0.5])],
    # k 0.5 of 4 tokens = 2 lowest: (-4 + -3) / 2; of 3 tokens int(1.5) = 1: -9
    "min_k": [({"k": 0.5}, {"signals": signals([[-1, -3, -2, -4], [-9, -1, -2]])}, [-3.5, -9.0])],
    # z = (logp - mu) / sigma with mu -2, sigma 1: (1, -1, 0, -2); lowest 2: (-2 + -1) / 2
    "min_k_pp": [({"k": 0.5}, {"signals": signals([[-1, -3, -2, -4]], mu=[[-2] * 4])}, [-1.5])],
    # reference NLL 4 - target NLL 2
    "reference": [({}, {"signals": signals([[-1, -3]]), "reference": nll_only(4)}, [2.0])],
    # mean neighbour NLL (3 + 5) / 2 = 4, minus own NLL 2
    "neighbourhood": [({}, {"signals": signals([[-1, -3]]), "neighbours": [np.array([3.0, 5.0])]}, [2.0])],
    # -gradient norm
    "gradnorm": [({}, {"gradients": np.array([3.0, 0.5])}, [-3.0, -0.5])],
    # the classifier's out-of-fold probability, as it is
    "blind": [({}, {"blind": np.array([0.7, 0.2])}, [0.7, 0.2])],
    # losses target (1, 2, 0.5, 3, 1), reference (1.5, 1, 1, 2, 2). Windows of 2: target sums (3, 2.5, 3.5,
    # 4), reference (2.5, 2, 3, 4): reference above in none (the last a tie) = 0; of 3: target (3.5, 5.5,
    # 4.5), reference (3.5, 4, 5): in 1 of 3; mean 1/6. Of 1: above at tokens 1, 3, 5 = 3/5. Of 10 on 5
    # tokens: one window, 7.5 against 7.5, a tie = 0
    "wbc": [
        ({"windows": (2, 3)}, WBC, [1 / 6]),
        ({"windows": (1,)}, WBC, [0.6]),
        ({"windows": (10,)}, WBC, [0.0]),
    ],
    # -NLL / lowercase NLL: -2 / 4
    "lowercase": [({}, {"signals": signals([[-1, -3]]), "lowercase": np.array([4.0])}, [-0.5])],
    # LL(x|P) / LL(x) = (-3) / (-2)
    "recall": [({}, {"signals": signals([[-1, -3]]), "non_members": np.array([3.0])}, [1.5])],
    # [LL(x|P_non) - g LL(x|P_mem)] / LL(x) = (-3 + g 1) / (-2): g 1 -> 1.0, g 0.5 -> 1.25.
    # g chosen on held-out texts (by default): a member with NLL 1, conditioned 2 (non-member prefix) and
    # 1.9 (member prefix) scores 2 - 1.9 g; a non-member with 1, 1.5, 0.5 scores 1.5 - 0.5 g. The member is
    # ahead (AUC 1) iff 0.5 > 1.4 g, g < 0.357: of the grid 0.1, 0.2, 0.3 tie, the larger is taken, 0.3;
    # the scored text: (3 - 0.3 1) / 2 = 1.35. Held-out texts on which every g ranks alike: g = 1, 1.0
    "con_recall": [
        ({"gamma": 1.0}, CON_RECALL, [1.0]),
        ({"gamma": 0.5}, CON_RECALL, [1.25]),
        ({}, CON_RECALL | held_out(member_prefix=[1.9, 0.5]), [1.35]),
        ({}, CON_RECALL | held_out(member_prefix=[0.5, 0.5]), [1.0]),
    ],
    # tokens (5, 7, 5), p (0.5, 0.001, 0.9), f (e^-1, e^-2, e^-1); first occurrences: positions 0 and 1;
    # alpha = p log(1/f) = (0.5, 0.002); capped at a 0.01: (0.01 + 0.002) / 2; at a 1: (0.5 + 0.002) / 2
    "dc_pdd": [
        (
            params,
            {
                "signals": signals([[LN2 * -1, math.log(0.001), math.log(0.9)]], token_ids=[[5, 7, 5]]),
                "frequency": [np.exp([-1.0, -2.0, -1.0])],
            },
            [expected],
        )
        for params, expected in (({}, 0.006), ({"a": 1.0}, 0.251))
    ],
    # k 0.5: text 1's 2 lowest logp at positions 1 (-5) and 3 (-4); entropy -mu (0.5, 3, 1, 0.1) < 2 at
    # 0, 2, 3: surprising = position 3 -> -4. Text 2: lowest 1 at position 1, entropy 3: none -> abstains
    "surp": [
        (
            {"k": 0.5},
            {"signals": signals([[-1, -5, -3, -4], [-1, -2]], mu=[[-0.5, -3, -1, -0.1], [-3, -3]])},
            [-4.0, math.nan],  # abstains on text 2
        )
    ],
    # error zone of text 1: positions 1, 3, 4 with differences 0.5, 0.5, -1.5: r = (0.5 + 0.5) / 1.5 = 2/3,
    # reported as r / (1 + r) = 0.4. Degenerate: text 2, one error-zone token (< 2); text 3, differences 1, 2,
    # none negative: the authors' 0 (ezmia) or 1 (ezmia_degenerate_one). min_tokens 4: text 1 has 3,
    # degenerate too; min_tokens 1: text 2's one difference (-3 - -2 = -1) has no positive part: r = 0
    "ezmia": [
        ({}, EZMIA, [0.4, 0.0, 0.0]),
        ({"min_tokens": 4}, EZMIA, [0.0, 0.0, 0.0]),
        ({"min_tokens": 1}, EZMIA, [0.4, 0.0, 0.0]),
    ],
    "ezmia_degenerate_one": [
        ({}, EZMIA, [0.4, 1.0, 1.0]),
        ({"min_tokens": 4}, EZMIA, [1.0, 1.0, 1.0]),
        ({"min_tokens": 1}, EZMIA, [0.4, 0.0, 1.0]),  # text 2 is no longer degenerate: its r = 0 stays 0
    ],
    # window 3 over text 1's gaps: means (-2.5/3, -5/3, -4/3); k 0.2 of 3: int(0.6) -> 1 lowest: -5/3;
    # k 0.7: int(2.1) = 2: (-5/3 - 4/3) / 2 = -1.5. Text 2 is shorter than the window: its gaps, lowest -0.5.
    # Text 3: 0. Window 1, k 0.2: text 1's lowest int(1.0) = 1 gap: -3
    # traces, oldest first. Text 1 sorted (0.5, 1, 1.5, 2, 3, 4): the 75th percentile at position 0.75 x 5 =
    # 3.75: 2 + 0.75 (3 - 2) = 2.75; the 25th at 1.25: 1 + 0.25 (1.5 - 1) = 1.125; IQR 1.625. Text 2 flat: 0.
    # Two points (3, 1): positions 0.75 and 0.25 of one step of 2: 2.5 - 1.5 = 1, half the difference
    "lt_iqr": [
        ({}, {"trajectory": np.array([[4, 3, 2, 1.5, 1, 0.5], [2, 2, 2, 2, 2, 2.0]])}, [1.625, 0.0]),
        ({}, {"trajectory": np.array([[3, 1.0]])}, [1.0]),
    ],
    # s_t = logp_T - logp_R + KL_t: (-1 + 1.5 + 1, -2 + 1 + 1.5) = (1.5, 0.5): mean 1, sum 2, mink k 0.5: the
    # lowest int(1.0) = 1: 0.5
    "informia": [
        (
            params,
            {
                "signals": signals([[-1, -2]]),
                "reference": signals([[-1.5, -1]]),
                "reference_kl": [np.array([1.0, 1.5])],
            },
            [expected],
        )
        for params, expected in (
            ({}, 1.0),
            ({"aggregate": "sum"}, 2.0),
            ({"aggregate": "mink", "k": 0.5}, 0.5),
        )
    ],
    "camia": [
        ({}, CAMIA, CAMIA_PEARSON),
        ({"combine": "fisher"}, CAMIA, CAMIA_FISHER),
    ],
    "gap_k": [
        ({}, GAP_K, [-5 / 3, -0.5, 0.0]),
        ({"k": 0.7}, GAP_K, [-1.5, -0.5, 0.0]),
        ({"window": 1}, GAP_K, [-3.0, -0.5, 0.0]),
    ],
    # a 0.5: Pr(x) = ((1 + a) p_ref + (1 - a)) / 2. x: p 0.5, p_ref 1 -> Pr 1, ratio 0.5. Population z1: p 1,
    # p_ref 1 -> ratio 1; z2: p 0.25, p_ref 0.5 -> Pr 0.625, ratio 0.4. LR(x, z) = 0.5, 1.25: one of two > 1
    "rmia": [
        (
            {"a": 0.5},
            {
                "signals": nll_only(LN2),
                "reference": nll_only(0.0),
                "population": nll_only(0.0, LN4),
                "population_reference": nll_only(0.0, LN2),
            },
            [0.5],
        ),
        # a chosen on held-out texts: population z1 (p 1/2, p_ref 1/2), z2 (1/4, 1/8), a known member m (1/4,
        # 1/16). Pr(x) = ((1 + a) p_ref + 1 - a) / 2. a 0.4: ratios z1 0.769, z2 0.645, m 0.727: m beats z2
        # (0.5), z1 beats z2 (1), z2 none (0): AUC 0.5. a 0.5: z1 0.8, z2 0.727, m 0.842: m beats both (1),
        # z1 1, z2 0: AUC 0.75, as at every a above 5/11 (m beats z1 once (0.34375 a > 0.15625); at a 1
        # z2 beats z1 instead: still 0.75); the first of equal AUCs: a 0.5. Scored x (p 0.34, p_ref 1/4)
        # at a 0.5: 0.34 / 0.4375 = 0.777, above z2 only: 0.5
        (
            {},
            {
                "signals": nll_only(-math.log(0.34)),
                "reference": nll_only(LN4),
                "population": nll_only(LN2, LN4),
                "population_reference": nll_only(LN2, LN8),
                "held_out_members": nll_only(LN4),
                "held_out_members_reference": nll_only(math.log(16)),
            },
            [0.5],
        ),
    ],
    # p = exp(-NLL). Target: p 1/2, neighbours p (1/4, 1/8) -> mean 3/16 (not exp of the mean NLL, 0.177):
    # 1/2 - 3/16 = 5/16. Reference: p 1/4, neighbours (1/4, 1/8) -> 1/4 - 3/16 = 1/16. 5/16 - 1/16 = 1/4.
    # Text 2: target p 1, neighbours (1, 1) -> 0; reference p 1/2, neighbours (1/4, 1/4) -> 1/4: -1/4
    "spv_mia": [
        (
            {},
            {
                "signals": nll_only(LN2, 0.0),
                "neighbours": [np.array([LN4, LN8]), np.array([0.0, 0.0])],
                "reference": SelfPromptedNLL(
                    np.array([LN4, LN2]), [np.array([LN4, LN8]), np.array([LN4, LN4])]
                ),
            },
            [0.25, -0.25],
        )
    ],
}


@pytest.mark.parametrize("name", ATTACKS.names())
def test_every_registered_attack_matches_its_golden_case(name):
    assert name in GOLDEN, f"attack {name!r} has no golden case in tests/test_golden.py"
    for params, views, expected in GOLDEN[name]:
        attack = build_attack(name, params)
        assert set(views) == set(attack.views()), name  # the case feeds exactly the roles it reads
        assert attack.score(views) == pytest.approx(expected, rel=1e-6, abs=1e-9, nan_ok=True), (name, params)


def test_no_golden_case_is_left_without_an_attack():
    assert set(GOLDEN) <= set(ATTACKS.names())


def test_every_attack_names_its_threat_model():
    from privauditor.tasks.attacks._base import ACCESS

    levels = {name: cls.access for name, cls in ATTACKS.items()}
    assert set(levels.values()) <= set(ACCESS), levels
    assert (levels["blind"], levels["reference"], levels["rmia"], levels["gradnorm"], levels["loss"]) == (
        "model-free", "reference", "known-members", "white-box", "black-box"
    )  # fmt: skip
    assert (levels["ezmia"], levels["gap_k"], levels["lt_iqr"]) == ("reference", "black-box", "checkpoints")
    assert levels["camia"] == levels["con_recall"] == "known-members"  # both read labelled members
    assert levels["ezmia_degenerate_one"] == levels["ezmia"]


@pytest.mark.parametrize("name", ATTACKS.names())
def test_an_attack_that_reads_labelled_members_says_so_in_its_access(name):
    """An attack whose views (at its defaults) read the split's ``known_members`` (records the target
    trained on) holds more than black-box or reference access: its level is ``known-members``; one that
    reads none is not labelled so."""
    attack = build_attack(name)
    reads = any("known_members" in view.parts() for view in attack.views().values())
    assert (attack.access == "known-members") == reads, (name, attack.access)


def test_ezmia_scores_a_degenerate_text_as_its_authors_do_and_the_variant_does_not():
    """The authors' code scores a degenerate text 0 (mia/ez_score.py lines 43-52): under ``ezmia`` a member
    whose every error-zone difference is positive ranks last; ``ezmia_degenerate_one`` ranks it first.
    Both read the same views and differ in nothing else; ezmia's version says its rule changed."""
    first, second = build_attack("ezmia"), build_attack("ezmia_degenerate_one")
    assert set(first.views()) == set(second.views()) and first.cost() == second.cost()
    scores = first.score(EZMIA), second.score(EZMIA)
    assert list(scores[0][1:]) == [0.0, 0.0] and list(scores[1][1:]) == [1.0, 1.0]
    assert scores[0][0] == scores[1][0] == pytest.approx(0.4)
    assert first.fitted() == second.fitted() == {"degenerate": 2, "degenerate_members": 1}
    assert first.version == 2 and "degenerate" not in first.hyperparameters()
