"""signals.parquet's contract columns, the view store's keys, and the neighbour texts."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.infra.files import write_table
from privauditor.tasks.passes.neighbours import cached_neighbours, generate_neighbours
from privauditor.tasks.passes.scorer import ModelIdentity
from privauditor.tasks.passes.signal_table import TOPK, Signals, TokenStats
from privauditor.tasks.views import Cost, View
from privauditor.tasks.views._base import ViewContext, aligned

from .helpers import EXAMPLES


def sample_signals(seed=0):
    rng = np.random.default_rng(seed)
    stats = [
        TokenStats(
            np.arange(n, dtype=np.int32),
            rng.normal(size=n).astype(np.float32),
            rng.normal(size=n).astype(np.float32),
            rng.random(n).astype(np.float32),
            rng.normal(size=n).astype(np.float32),
            rng.integers(1, 42, size=n).astype(np.int16),
            rng.normal(size=n).astype(np.float32),
        )
        for n in (3, 5)
    ]
    return Signals.from_stats(["a", "b"], [True, False], stats, ["first text", "second text"])


def test_parquet_has_the_contract_columns_and_types_and_round_trips(tmp_path):
    signals = sample_signals()
    write_table(signals.to_table(), tmp_path / "signals.parquet")
    table = pq.read_table(tmp_path / "signals.parquet")
    types = {f.name: str(f.type) for f in table.schema}
    assert types["sample_id"] == "string" and types["member"] == "bool"
    assert types["token_ids"] == "list<element: int32>"
    assert types["logp"] == types["mu"] == types["sigma"] == "list<element: float>"
    assert types["top1_logp"] == types["topk_lse"] == "list<element: float>"
    assert types["rank"] == "list<element: int16>"
    back = Signals.from_table(table)
    assert back.sample_id == ["a", "b"] and back.member.tolist() == [True, False] and back.topk == TOPK
    for field in ("token_ids", "logp", "mu", "sigma", "top1_logp", "rank", "topk_lse"):
        for x, y in zip(getattr(back, field), getattr(signals, field), strict=True):
            np.testing.assert_array_equal(x, y)
    assert back.zlib_bytes.tolist() == signals.zlib_bytes.tolist()
    assert not (tmp_path / ".signals.parquet.tmp").exists() and len(list(tmp_path.iterdir())) == 1


def test_a_store_of_format_1_is_refused_with_a_one_line_error(tmp_path):
    table = sample_signals().to_table()
    old = table.drop_columns(["top1_logp", "rank", "topk_lse"]).replace_schema_metadata({})
    with pytest.raises(PrivauditorError, match=r"^a signal store of format 1 .*new results folder$"):
        Signals.from_table(old)
    relabelled = table.replace_schema_metadata({b"privauditor.signals_format": b"1"})
    with pytest.raises(PrivauditorError, match="format 1"):
        Signals.from_table(relabelled)


def test_aligned_reorders_a_views_rows_by_sample_id():
    table = sample_signals().to_table()
    flipped = Signals.from_table(aligned(table, ["b", "a"]))
    assert flipped.sample_id == ["b", "a"] and flipped.member.tolist() == [False, True]
    np.testing.assert_array_equal(flipped.logp[0], sample_signals().logp[1])
    with pytest.raises(KeyError, match="lacks 1"):
        aligned(table, ["a", "zz"])


@dataclass(frozen=True)
class CountingView(View):
    """A view that counts its computations: the first text's length times ``scale``."""

    scale: int = 1

    name = "counting"
    computed: ClassVar[list[int]] = []

    def cost(self):
        return Cost(forward=1)

    def compute(self, context):
        CountingView.computed.append(1)
        examples = context.examples()
        return pa.table({"sample_id": [e.sample_id for e in examples],
                         "x": [len(e.target) * self.scale for e in examples]})  # fmt: skip

    def read(self, table):
        return table.column("x").to_pylist()


IDENTITY = ModelIdentity("tiny-llama", "sha256:abc", "deadbeef", "tok:4096", "torch.float32")


def context(tmp_path, identity=IDENTITY, max_length=128, seed=0, texts=EXAMPLES):
    parts = {"members": texts[:2], "nonmembers": texts[2:]}
    return ViewContext(
        scorers={"target": lambda: None},
        identities={"target": identity},
        parts=parts,
        max_length=max_length,
        batch_size=8,
        seed=seed,
        shared=tmp_path / "shared",
        own=tmp_path / "cell",
    )


def test_a_view_is_computed_once_per_key_and_never_served_for_another(tmp_path):
    """The key holds the model's name, weights, adaptation, tokenizer and dtype, the texts, max_length,
    the seed and the view's own parameters: a change to any one computes anew."""
    CountingView.computed.clear()
    view = CountingView()
    first = context(tmp_path).get(view)
    assert context(tmp_path).get(view) == first and len(CountingView.computed) == 1
    changes = [
        {"identity": replace(IDENTITY, name="tiny-opt")},
        {"identity": replace(IDENTITY, weights="sha256:abd")},
        {"identity": replace(IDENTITY, adaptation="cafe")},
        {"identity": replace(IDENTITY, tokenizer="tok:50257")},
        {"identity": replace(IDENTITY, dtype="torch.bfloat16")},
        {"max_length": 64},
        {"seed": 1},
        {"texts": [*EXAMPLES[:2], replace(EXAMPLES[2], target="another text")]},
    ]
    for change in changes:
        before = len(CountingView.computed)
        context(tmp_path, **change).get(view)
        assert len(CountingView.computed) == before + 1, f"a changed {change} reused a stale entry"
    assert context(tmp_path).get(CountingView(scale=2)) == [2 * x for x in first]
    assert len(CountingView.computed) == len(changes) + 2


def test_views_of_unadapted_models_are_shared_and_adapted_ones_stay_in_the_cell(tmp_path):
    own = context(tmp_path).file(CountingView())
    shared = context(tmp_path, identity=replace(IDENTITY, adaptation="none")).file(CountingView())
    assert own.is_relative_to(tmp_path / "cell" / "views" / "counting")
    assert shared.is_relative_to(tmp_path / "shared" / "views" / "counting")
    key = json.loads(pq.read_schema(shared).metadata[b"privauditor.view_key"])
    assert key["models"][0]["adaptation"] == "none" and key["version"] == CountingView.version


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

    monkeypatch.setattr("privauditor.tasks.passes.neighbours.generate_neighbours", boom)
    assert cached_neighbours(tmp_path, ["a", "b"], TARGETS, 3, 0.2, 0) == found
    with pytest.raises(AssertionError, match="regenerated"):
        cached_neighbours(tmp_path, ["a", "b"], TARGETS, 5, 0.2, 0)  # another k is another entry


def test_attack_job_reads_signals_without_torch_or_pandas(tmp_path):
    """An attack worker stays light: reading signals.parquet imports neither torch nor (through pyarrow's
    dataset layer) pandas, and gives the same table, metadata included, as ``pq.read_table``."""
    import subprocess
    import sys

    from privauditor.tasks.infra.files import read_table

    write_table(sample_signals().to_table(), tmp_path / "signals.parquet")
    assert read_table(tmp_path / "signals.parquet").equals(pq.read_table(tmp_path / "signals.parquet"), True)
    signals = str(tmp_path / "signals.parquet")
    code = (
        "import sys; from privauditor.tasks.cell.attack_job import AttackJob, attack_job;"
        f"scores, metrics = attack_job(AttackJob('loss', {{}}, {signals!r}, {{'signals': {signals!r}}}, 10, 0));"
        "print(len(scores), 'auc' in metrics, 'torch' in sys.modules, 'pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "2 True False False"
