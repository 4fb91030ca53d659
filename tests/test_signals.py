"""signals.parquet's contract columns, the signal store's cache keys, and the neighbour texts."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from privauditor.tasks.neighbours import cached_neighbours, generate_neighbours
from privauditor.tasks.scoring import TokenStats
from privauditor.tasks.signals import SIGNALS_FORMAT, Signals, SignalStore, signal_key, write_table


def sample_signals(seed=0):
    rng = np.random.default_rng(seed)
    stats = [
        TokenStats(
            np.arange(n, dtype=np.int32),
            rng.normal(size=n).astype(np.float32),
            rng.normal(size=n).astype(np.float32),
            rng.random(n).astype(np.float32),
        )
        for n in (3, 5)
    ]
    return Signals.from_stats(["a", "b"], [True, False], stats, ["first text", "second text"])


def test_parquet_has_the_contract_columns_and_types_and_round_trips(tmp_path):
    signals = sample_signals()
    signals.neighbour_nll = [np.array([1.0, 2.0]), np.array([3.0, 4.0])]
    signals.grad_norm = np.array([0.5, 1.5])
    write_table(signals.to_table(), tmp_path / "signals.parquet")
    table = pq.read_table(tmp_path / "signals.parquet")
    types = {f.name: str(f.type) for f in table.schema}
    assert types["sample_id"] == "string" and types["member"] == "bool"
    assert types["token_ids"] == "list<element: int32>"
    assert types["logp"] == types["mu"] == types["sigma"] == "list<element: float>"
    back = Signals.from_table(table)
    assert back.sample_id == ["a", "b"] and back.member.tolist() == [True, False]
    for field in ("token_ids", "logp", "mu", "sigma", "neighbour_nll"):
        for x, y in zip(getattr(back, field), getattr(signals, field), strict=True):
            np.testing.assert_array_equal(x, y)
    assert back.zlib_bytes.tolist() == signals.zlib_bytes.tolist() and back.grad_norm.tolist() == [0.5, 1.5]
    assert not (tmp_path / ".signals.parquet.tmp").exists() and len(list(tmp_path.iterdir())) == 1


def test_aligned_to_reorders_every_column():
    signals = sample_signals()
    flipped = signals.aligned_to(["b", "a"])
    assert flipped.sample_id == ["b", "a"] and flipped.member.tolist() == [False, True]
    np.testing.assert_array_equal(flipped.logp[0], signals.logp[1])
    with pytest.raises(KeyError, match="lack 1"):
        signals.aligned_to(["a", "zz"])


BASE_KEY = dict(
    model_id="tiny-llama-abc",
    revision=None,
    adaptation_hash="none",
    tokenizer_id="tok:4096",
    dtype="torch.float32",
    max_length=128,
    text_hash="t1",
)


def test_store_computes_once_per_key_and_never_reuses_a_stale_entry(tmp_path):
    store = SignalStore(tmp_path)
    calls = []

    def compute():
        calls.append(1)
        return sample_signals(len(calls))

    first = store.get_or_compute(signal_key(**BASE_KEY), compute)
    again = store.get_or_compute(signal_key(**BASE_KEY), compute)
    assert len(calls) == 1 and np.array_equal(first.logp[0], again.logp[0])
    for field, value in [
        ("model_id", "tiny-opt-abc"),
        ("revision", "v2"),
        ("adaptation_hash", "deadbeef"),
        ("tokenizer_id", "tok:50257"),
        ("dtype", "torch.bfloat16"),
        ("max_length", 64),
        ("text_hash", "t2"),
    ]:
        before = len(calls)
        store.get_or_compute(signal_key(**(BASE_KEY | {field: value})), compute)
        assert len(calls) == before + 1, f"a changed {field} reused a stale entry"
    assert signal_key(**BASE_KEY)["format"] == SIGNALS_FORMAT


TARGETS = [
    "Acme Corp reported net income of $12.4 million in 2021.",
    "SELECT name FROM clients WHERE id = 7;",
]


def test_neighbours_are_k_distinct_near_copies_fixed_by_the_seed():
    first = generate_neighbours(TARGETS, k=4, mask_fraction=0.2, seed=0)
    assert [len(n) for n in first] == [4, 4]
    for text, neighbours in zip(TARGETS, first, strict=True):
        assert all(n != text for n in neighbours)
        assert all(abs(len(n) - len(text)) < len(text) for n in neighbours)  # near copies, not new texts
    assert generate_neighbours(TARGETS, k=4, mask_fraction=0.2, seed=0) == first
    assert generate_neighbours(TARGETS, k=4, mask_fraction=0.2, seed=1) != first


def test_neighbours_are_generated_once_and_shared(tmp_path, monkeypatch):
    found = cached_neighbours(tmp_path, ["a", "b"], TARGETS, 3, 0.2, 0)
    assert set(found) == {"a", "b"} and all(len(v) == 3 for v in found.values())

    def boom(*args, **kwargs):
        raise AssertionError("regenerated")

    monkeypatch.setattr("privauditor.tasks.neighbours.generate_neighbours", boom)
    assert cached_neighbours(tmp_path, ["a", "b"], TARGETS, 3, 0.2, 0) == found
    with pytest.raises(AssertionError, match="regenerated"):
        cached_neighbours(tmp_path, ["a", "b"], TARGETS, 5, 0.2, 0)  # another k is another entry


def test_attack_job_reads_signals_without_torch_or_pandas(tmp_path):
    """An attack worker stays light: reading signals.parquet imports neither torch nor (through pyarrow's
    dataset layer) pandas, and gives the same table, metadata included, as ``pq.read_table``."""
    import subprocess
    import sys

    from privauditor.tasks.signals import read_table

    write_table(sample_signals().to_table(), tmp_path / "signals.parquet")
    assert read_table(tmp_path / "signals.parquet").equals(pq.read_table(tmp_path / "signals.parquet"), True)
    code = (
        "import sys; from privauditor.tasks.attack_job import attack_job;"
        f"scores, metrics = attack_job('loss', {{}}, {str(tmp_path / 'signals.parquet')!r}, None, 10, 0);"
        "print(len(scores), 'auc' in metrics, 'torch' in sys.modules, 'pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "2 True False False"
