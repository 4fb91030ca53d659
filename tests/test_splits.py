"""Member / non-member / validation splits: disjoint, fixed by (dataset, seed, sizes), hashed."""

from __future__ import annotations

import pytest

from privauditor.tasks.data.splits import PARTS, draw_split
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.spec.config import SplitConfig


def sizes(members=50, nonmembers=50, validation=50, population=0, known_members=0):
    return SplitConfig(members, nonmembers, validation, population, known_members)


@pytest.fixture(scope="module")
def finance():
    return load_dataset("finance")


def _ids(part):
    return [e.sample_id for e in part]


def test_parts_are_disjoint_and_sized(finance):
    split = draw_split(finance, sizes(100, 120, 80, 30, 20), seed=0)
    ids = {part: set(_ids(getattr(split, part))) for part in PARTS}
    assert [len(ids[p]) for p in PARTS] == [100, 120, 80, 30, 20]
    assert sum(map(len, ids.values())) == len(set().union(*ids.values()))  # no record in two parts
    texts = [e.text for part in PARTS for e in getattr(split, part)]
    assert len(set(texts)) == len(texts)
    # known members are trained on, never scored; the population is neither
    assert split.trained == split.members + split.known_members
    assert split.scored == split.members + split.nonmembers
    hashes = split.hashes()
    assert set(hashes) == {*PARTS, "split"} and len(set(hashes.values())) == len(hashes)


def test_adding_a_population_or_known_members_leaves_the_other_parts_as_they_were(finance):
    plain = draw_split(finance, sizes(), seed=0)
    more = draw_split(finance, sizes(population=40, known_members=10), seed=0)
    for part in ("members", "nonmembers", "validation"):
        assert getattr(plain, part) == getattr(more, part)
    assert plain.sha256 != more.sha256 and plain.population == () and len(more.population) == 40


def test_same_seed_same_split_and_hash(finance):
    a = draw_split(finance, sizes(), seed=3)
    b = draw_split(load_dataset("finance"), sizes(), seed=3)
    assert _ids(a.members) == _ids(b.members) and _ids(a.validation) == _ids(b.validation)
    assert a.hashes() == b.hashes()


def test_other_seed_other_split(finance):
    a = draw_split(finance, sizes(), seed=0)
    b = draw_split(finance, sizes(), seed=1)
    assert a.sha256 != b.sha256
    assert len(set(_ids(a.members)) & set(_ids(b.members))) < 25  # ~1 expected by chance


def test_draw_is_iid_from_the_pool_not_a_prefix(finance):
    split = draw_split(finance, sizes(100, 100, 100), seed=0)
    positions = {e.sample_id: i for i, e in enumerate(finance.examples)}
    member_positions = sorted(positions[i] for i in _ids(split.members))
    assert member_positions[-1] > len(finance.examples) // 2  # not the first records
    assert split.dataset_sha256 == finance.sha256


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"members": 0}, "split.members must be at least 1"),
        ({"nonmembers": -1}, "split.nonmembers must be at least 1"),
        ({"validation": 0}, "split.validation must be at least 1"),
        ({"population": -1}, "split.population must be at least 0"),
        ({"members": 1.5}, "split.members must be int"),
    ],
)
def test_bad_sizes_are_rejected(finance, bad, match):
    from privauditor.tasks.infra.strict import build

    with pytest.raises(PrivauditorError, match=match):
        build(SplitConfig, bad, "split")


def test_more_records_than_the_dataset_has(finance):
    n = len(finance.examples)
    with pytest.raises(PrivauditorError, match=f"has {n}"):
        draw_split(finance, sizes(n, 1, 1), seed=0)


@pytest.mark.parametrize("name", ["finance", "sql", "climate"])
def test_the_reserved_pool_is_outside_every_split_and_splits_of_its_own(name):
    from privauditor.tasks.data.splits import draw_reserved

    data = load_dataset(name)
    assert len(data.reserved) == 256 and len(data.examples) == 3000
    pool = {e.sample_id for e in data.examples}
    reserved = {e.sample_id for e in data.reserved}
    assert not pool & reserved and not {e.text for e in data.examples} & {e.text for e in data.reserved}
    everything = SplitConfig(members=700, nonmembers=700, validation=700, population=900)  # the whole pool
    for seed in (0, 1):
        drawn = draw_split(data, everything, seed)
        assert not {e.sample_id for part in PARTS for e in getattr(drawn, part)} & reserved
    chosen = draw_reserved(data, SplitConfig(members=64, nonmembers=1, validation=32), seed=0)
    assert {e.sample_id for e in chosen.members + chosen.validation} <= reserved
    assert chosen == draw_reserved(data, SplitConfig(members=64, nonmembers=1, validation=32), seed=0)
    with pytest.raises(PrivauditorError, match=f"the reserved pool of '{name}' has 256"):
        draw_reserved(data, SplitConfig(members=300, nonmembers=1, validation=1), seed=0)
