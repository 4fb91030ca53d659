"""What carries a shift between an audit's two files: simple features of the texts as scored, each tested
alone.

When the blind control finds the files apart (``verdict.py``), the verdict names the simple features that
separate them, so a user can see *what* differs before anything else:

- **length**: characters and words per record;
- **format**: lines per record, the shares of punctuation and digits among its visible characters and of
  capitals among its letters;
- **vocabulary**: words (lower-cased runs of letters and digits) more common in one file's records than
  in the other's.

Each scalar feature is tested by the two-sided Mann-Whitney U test (``scipy.stats.mannwhitneyu``), its
AUC the members' U over both sizes' product; a word by Fisher's exact test on how many records of each
file contain it (``scipy.stats.fisher_exact``). The scalar features form one family and the words
another, each Holm-adjusted (``statsmodels.stats.multitest.multipletests``) at 0.05. Only words found in
at least :data:`COMMON` of one file's records are tested or named, so no single record's content is ever
named. The words themselves are kept in the audit's ``verdict.json`` and printed by the command, never
written into a sentence of the verdict (which the report shows: no text of the files enters it). A feature
that separates the files is one reason the control can tell them apart; finding none
does not clear them (the control reads many n-grams together).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

ALPHA = 0.05
#: a word is tested, and can be named, only if at least this share of one file's records contain it
COMMON = 0.1
#: words named at most, the most separating first
NAMED = 10
WORD = re.compile(r"[^\W_]+")


def _share(test: Callable[[str], bool], among: Callable[[str], bool]) -> Callable[[str], float]:
    """The share of a text's characters ``among`` that pass ``test`` (so a longer text of the same kind has
    the same share)."""

    def share(text: str) -> float:
        pool = [c for c in text if among(c)]
        return sum(map(test, pool)) / max(1, len(pool))

    return share


def _visible(c: str) -> bool:
    return not c.isspace()


#: the scalar features: name -> (kind, the feature of one text)
SCALARS: dict[str, tuple[str, Callable[[str], float]]] = {
    "characters": ("length", len),
    "words": ("length", lambda text: len(WORD.findall(text))),
    "lines": ("format", lambda text: text.count("\n") + 1),
    "punctuation share": ("format", _share(lambda c: not c.isalnum(), _visible)),
    "digit share": ("format", _share(str.isdigit, _visible)),
    "capital share": ("format", _share(str.isupper, str.isalpha)),
}


def shift_features(members: Sequence[str], nonmembers: Sequence[str]) -> dict[str, Any]:
    """The scalar features' tests (AUC, p, Holm's p) and the words that separate the two sets of texts
    (the share of each set's records holding each, and Holm's p), the most separating first."""
    from scipy.stats import mannwhitneyu
    from statsmodels.stats.multitest import multipletests

    scalars = {}
    for name, (kind, feature) in SCALARS.items():
        m = np.array([feature(t) for t in members], dtype=np.float64)
        n = np.array([feature(t) for t in nonmembers], dtype=np.float64)
        same = np.ptp(np.concatenate([m, n])) == 0  # a constant feature separates nothing
        test = None if same else mannwhitneyu(m, n, alternative="two-sided")
        scalars[name] = {
            "kind": kind,
            "auc": 0.5 if test is None else float(test.statistic) / (len(m) * len(n)),
            "p": 1.0 if test is None else float(test.pvalue),
        }
    adjusted = multipletests([s["p"] for s in scalars.values()], alpha=ALPHA, method="holm")[1]
    for s, p in zip(scalars.values(), adjusted, strict=True):
        s["p_holm"] = float(p)
    words, tested = _words(members, nonmembers)
    return {
        "features": scalars,
        "words": words[:NAMED],
        "words_separating": len(words),
        "words_tested": tested,
    }


def _words(members: Sequence[str], nonmembers: Sequence[str]) -> tuple[list[dict[str, Any]], int]:
    """The words held by a different share of each file's records (Fisher, Holm over the words tested),
    the largest difference first; (those words, how many words were tested)."""
    from scipy.stats import fisher_exact
    from statsmodels.stats.multitest import multipletests

    counts = [
        Counter(w for t in texts for w in {x.lower() for x in WORD.findall(t)})
        for texts in (members, nonmembers)
    ]
    sizes = (len(members), len(nonmembers))
    common = sorted(
        w for w in counts[0] | counts[1] if max(counts[i][w] / sizes[i] for i in (0, 1)) >= COMMON
    )
    if not common:
        return [], 0
    p = [
        fisher_exact(
            [[counts[0][w], sizes[0] - counts[0][w]], [counts[1][w], sizes[1] - counts[1][w]]]
        ).pvalue
        for w in common
    ]
    adjusted = multipletests(p, alpha=ALPHA, method="holm")[1]
    found = [
        {
            "word": w,
            "members": counts[0][w] / sizes[0],
            "nonmembers": counts[1][w] / sizes[1],
            "p_holm": float(q),
        }
        for w, q in zip(common, adjusted, strict=True)
        if q < ALPHA
    ]
    found.sort(key=lambda f: (-abs(f["members"] - f["nonmembers"]), f["word"]))
    return found, len(common)


def carriers(found: dict[str, Any]) -> list[str]:
    """What carries the shift, in words: one phrase per kind of feature that separates the files."""
    phrases = []
    for kind in ("format", "length"):
        hits = [
            (name, s) for name, s in found["features"].items() if s["kind"] == kind and s["p_holm"] < ALPHA
        ]
        if hits:
            named = ", ".join(
                f"{name} (members {'higher' if s['auc'] > 0.5 else 'lower'}: AUC {s['auc']:.3f}, "
                f"Holm p {s['p_holm']:.2g})"
                for name, s in sorted(hits, key=lambda h: -abs(h[1]["auc"] - 0.5))
            )
            phrases.append(f"{kind}: {named}")
    if found[
        "words"
    ]:  # by their shares: a word from the files is never written into a sentence a report shows
        top = found["words"][0]
        phrases.append(
            f"vocabulary: {found['words_separating']} of {found['words_tested']} common words held by different shares "
            f"of the two files' records (the largest difference: {top['members']:.0%} of members, "
            f"{top['nonmembers']:.0%} of non-members; the words are in verdict.json)"
        )
    return phrases
