"""``blind``: a model-free membership classifier's out-of-fold scores, and a test of the split's shift.

Das et al. 2024 ("Blind Baselines Beat Membership Inference Attacks for Foundation Models",
https://arxiv.org/abs/2406.16201) beat published attacks on eight benchmark splits with classifiers that
never query the model: those splits' members and non-members differ in distribution, so an attack's
AUC there measures the shift, not leakage. This view is that control on our own splits: a bag of word
and character n-grams of the record (prompt and target; see :func:`features`) and a logistic regression
trained on the members' and non-members' labels, ``folds``-fold cross-validated, so every scored text
gets a score from a classifier that did not see it. The vocabulary is built from all scored texts without their
labels; only the classifier sees labels, fold by fold.

Pooled out-of-fold AUCs lie *below* 0.5 under the null (each held-out fold's class balance is the
mirror of its training folds'), so the split is not judged by AUC > 0.5: ``permutations`` label
permutations, each cross-validated the same way, give the null distribution, and the add-one
permutation p-value (:func:`~privauditor.tasks.stats.significance.permutation_p_value`) is stored with the
scores (the table's metadata, key ``privauditor.blind``). It reads only texts and labels, so it is
computed once per split and shared by every cell.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ..infra.errors import PrivauditorError
from . import VIEWS
from ._base import Cost, View

METADATA = b"privauditor.blind"
#: records per side the shift test reads at most: a seeded subsample of larger parts, so its permutations
#: (each a cross-validation) cost the same on 280 records a side or 100,000
TESTED = 500


@VIEWS.register("blind")
@dataclass(frozen=True)
class BlindView(View):
    """Out-of-fold member probabilities of a bag-of-words classifier, with a label-permutation test."""

    folds: int = 5  # cross-validation folds (stratified, shuffled with the cell's seed)
    permutations: int = 200  # label permutations for the shift test (p-values down to 1/201)
    c: float = 1.0  # inverse L2 strength of the logistic regression (scikit-learn's default)

    name = "blind"
    version = 1

    def __post_init__(self) -> None:
        if self.folds < 2:
            raise PrivauditorError(f"view 'blind': folds must be at least 2, not {self.folds!r}")
        if self.permutations < 1 or self.c <= 0:
            raise PrivauditorError("view 'blind': permutations must be at least 1 and c positive")

    def models(self) -> tuple[str, ...]:
        return ()  # model-free

    def cost(self) -> Cost:
        return Cost(records=1)  # no pass through a model: each scored text is a record of its fits

    def compute(self, context):
        import pyarrow as pa

        examples = context.examples()
        found = shift_test(
            [e.text for e in examples], context.member(), self.folds, self.permutations, self.c, context.seed
        )
        metadata = {METADATA: json.dumps({k: v for k, v in found.items() if k != "scores"})}
        return pa.table(
            {
                "sample_id": pa.array([e.sample_id for e in examples], pa.string()),
                "score": pa.array(found["scores"], pa.float64()),
            },
            metadata=metadata,
        )

    def read(self, table):
        return np.asarray(table.column("score").to_pylist(), dtype=np.float64)


def features(texts: list[str]):
    """Which word 1- and 2-grams and which character 2- to 4-grams (within words) each text holds: a
    sparse 0/1 matrix over the texts' own vocabulary. Words alone miss a field drawn from another
    distribution whose values rarely repeat (names from another locale: every name is a new word);
    character n-grams see their spelling."""
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import CountVectorizer

    words = CountVectorizer(ngram_range=(1, 2), binary=True).fit_transform(texts)
    characters = CountVectorizer(analyzer="char_wb", ngram_range=(2, 4), binary=True).fit_transform(texts)
    return hstack([words, characters]).tocsr()


def out_of_fold(x, member: np.ndarray, folds: int, c: float, seed: int) -> np.ndarray:
    """Each sample's member probability from a logistic regression fitted on the other folds."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    folds = min(folds, int(member.sum()), int((~member).sum()))
    scores = np.empty(len(member), dtype=np.float64)
    for train, held in StratifiedKFold(folds, shuffle=True, random_state=seed).split(x, member):
        # liblinear: about 2.5x faster than lbfgs on a few hundred sparse rows (it also penalises the bias)
        model = LogisticRegression(C=c, solver="liblinear").fit(x[train], member[train])
        scores[held] = model.predict_proba(x[held])[:, 1]
    return scores


def shift_test(
    texts: list[str], member: np.ndarray, folds: int, permutations: int, c: float, seed: int
) -> dict:
    """Out-of-fold ``scores`` of every text, and the label-permutation test of the out-of-fold AUC on at
    most :data:`TESTED` texts a side (all of them when both sides are that small): ``auc``, ``p_value``,
    ``null_auc_mean``, ``permutations`` and ``tested``."""
    from ..stats.metrics import auc_from_ranks
    from ..stats.significance import permutation_p_value

    member = np.asarray(member, dtype=bool)
    x = features(texts)
    scores = out_of_fold(x, member, folds, c, seed)
    rng = np.random.default_rng(seed)
    tested, observed_scores = np.arange(len(member)), scores
    if member.sum() > TESTED or (~member).sum() > TESTED:  # the test on a seeded subsample of each side
        sides = [np.flatnonzero(member == side) for side in (True, False)]
        tested = np.sort(np.concatenate([rng.permutation(s)[:TESTED] for s in sides]))
        x, member = x[tested], member[tested]
        observed_scores = out_of_fold(x, member, folds, c, seed)
    observed = float(auc_from_ranks(member, observed_scores))
    null = []
    for _ in range(permutations):
        shuffled = rng.permutation(member)
        null.append(float(auc_from_ranks(shuffled, out_of_fold(x, shuffled, folds, c, seed))))
    return {
        "scores": scores,
        "auc": observed,
        "p_value": permutation_p_value(observed, null),
        "null_auc_mean": float(np.mean(null)),
        "permutations": permutations,
        "tested": len(tested),
    }
