"""What carries a shift between two files (``tasks/audit/features.py``): each kind of simple feature is
named when it alone separates the files, and nothing is named for files drawn alike."""

import numpy as np

from privauditor.tasks.audit.features import carriers, shift_features
from privauditor.tasks.audit.verdict import conclusion

RNG_WORDS = [f"w{i}" for i in range(3000)]  # a vocabulary so large that no word is in 10 % of records


def texts(rng, n, words=(12, 18), sep=" ", extra=""):
    return [sep.join(rng.choice(RNG_WORDS, size=rng.integers(*words))) + extra for _ in range(n)]


def kinds(found):
    return {phrase.split(":")[0] for phrase in carriers(found)}


def test_longer_members_are_named_by_length_alone():
    rng = np.random.default_rng(0)
    found = shift_features(texts(rng, 60, (25, 35)), texts(rng, 60, (8, 14)))
    assert kinds(found) == {"length"}
    assert found["features"]["words"]["auc"] > 0.95 and found["features"]["characters"]["p_holm"] < 0.05
    assert found["words"] == []  # no word reaches COMMON in either file
    assert "members higher" in carriers(found)[0]


def test_a_different_layout_is_named_as_format():
    rng = np.random.default_rng(1)
    found = shift_features(texts(rng, 60, sep="\n"), texts(rng, 60))
    assert kinds(found) == {"format"} and "lines (members higher" in carriers(found)[0]


def test_a_marker_word_is_named_as_vocabulary_with_its_shares():
    rng = np.random.default_rng(2)
    members = [t + " patient" for t in texts(rng, 60)]
    nonmembers = [t + " invoice" for t in texts(rng, 60)]
    found = shift_features(members, nonmembers)
    assert kinds(found) == {"vocabulary"}
    named = {w["word"]: w for w in found["words"]}
    assert set(named) == {"patient", "invoice"}
    assert named["patient"]["members"] == 1.0 and named["patient"]["nonmembers"] == 0.0
    assert "2 of 2 common words" in carriers(found)[0] and "patient" not in carriers(found)[0]


def test_files_drawn_alike_name_nothing_and_rare_words_are_never_tested():
    rng = np.random.default_rng(3)
    members, nonmembers = texts(rng, 80), texts(rng, 80)
    members[0] += " secretname"  # in one record: below COMMON, never tested, never named
    found = shift_features(members, nonmembers)
    assert carriers(found) == [] and found["words_tested"] == 0


def test_the_shift_verdict_says_what_separates_the_files():
    shift = {
        "auc": 0.9,
        "p_value": 0.005,
        "detected": True,
        "carried_by": ["length: characters (members higher)"],
    }
    found = {"attacks": {}, "leakage": False, "reversed": [], "shift": shift, "detectable_auc": 0.7,
             "nonmembers_from": "held-out", "baseline": None}  # fmt: skip
    lines = conclusion(found)
    assert lines[1] == "What separates them: length: characters (members higher)."
    lines = conclusion(found | {"shift": shift | {"carried_by": []}})
    assert lines[1].startswith("No single simple feature")
