"""Member / non-member / validation splits: disjoint, fixed by (dataset, seed, sizes), hashed."""

from __future__ import annotations

import pytest

from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.errors import PrivauditorError
from privauditor.tasks.splits import draw_split


@pytest.fixture(scope="module")
def finance():
    return load_dataset("finance")


def _ids(part):
    return [e.sample_id for e in part]


def test_parts_are_disjoint_and_sized(finance):
    split = draw_split(finance, members=100, nonmembers=120, validation=80, seed=0)
    members, nonmembers, validation = map(
        set, (_ids(split.members), _ids(split.nonmembers), _ids(split.validation))
    )
    assert (len(members), len(nonmembers), len(validation)) == (100, 120, 80)
    assert not members & nonmembers and not members & validation and not nonmembers & validation
    texts = [e.text for part in (split.members, split.nonmembers, split.validation) for e in part]
    assert len(set(texts)) == len(texts)


def test_same_seed_same_split_and_hash(finance):
    a = draw_split(finance, 50, 50, 50, seed=3)
    b = draw_split(load_dataset("finance"), 50, 50, 50, seed=3)
    assert _ids(a.members) == _ids(b.members) and _ids(a.validation) == _ids(b.validation)
    assert a.hashes() == b.hashes()


def test_other_seed_other_split(finance):
    a = draw_split(finance, 50, 50, 50, seed=0)
    b = draw_split(finance, 50, 50, 50, seed=1)
    assert a.sha256 != b.sha256
    assert len(set(_ids(a.members)) & set(_ids(b.members))) < 25  # ~1 expected by chance


def test_draw_is_iid_from_the_pool_not_a_prefix(finance):
    split = draw_split(finance, 100, 100, 100, seed=0)
    positions = {e.sample_id: i for i, e in enumerate(finance.examples)}
    member_positions = sorted(positions[i] for i in _ids(split.members))
    assert member_positions[-1] > len(finance.examples) // 2  # not the first records
    assert split.dataset_sha256 == finance.sha256


@pytest.mark.parametrize("sizes", [(0, 10, 10), (10, -1, 10), (10, 10, 0), (1.5, 10, 10)])
def test_non_positive_sizes_are_rejected(finance, sizes):
    with pytest.raises(PrivauditorError, match=r"split\.\w+ must be a positive integer"):
        draw_split(finance, *sizes, seed=0)


def test_more_records_than_the_dataset_has(finance):
    n = len(finance.examples)
    with pytest.raises(PrivauditorError, match=f"has {n}"):
        draw_split(finance, n, 1, 1, seed=0)
