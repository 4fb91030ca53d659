"""Views in a cell: attacks with other parameters get views of their own, split parts an attack reads
must not be empty, and the population part is scored for attacks that compare with it."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq
import pytest

from privauditor.tasks.attacks import ATTACKS, Attack
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.views import build_view


@dataclass
class NeighbourGapAttack(Attack):
    """A second attack on neighbours, with its own k: the best neighbour's NLL minus the text's."""

    k: int = 3

    name = "neighbour_gap"

    def views(self):
        return {"signals": build_view("signals"), "neighbours": build_view("neighbours", {"k": self.k})}

    def score(self, views):
        return np.array([n.min() for n in views["neighbours"]]) - views["signals"].nll


@dataclass
class PopulationRankAttack(Attack):
    """Share of the population's texts the target finds less likely than this one (an offline RMIA-like
    comparison with a population)."""

    name = "population_rank"

    def views(self):
        return {"signals": build_view("signals"), "population": build_view("signals", {"part": "population"})}

    def score(self, views):
        population = views["population"].nll
        return np.array([(population > nll).mean() for nll in views["signals"].nll])


@pytest.fixture
def toy_attacks(monkeypatch):
    ATTACKS.discover()
    monkeypatch.setitem(ATTACKS._entries, "neighbour_gap", NeighbourGapAttack)
    monkeypatch.setitem(ATTACKS._entries, "population_rank", PopulationRankAttack)


SETTINGS = ["train.epochs=1", "score.bootstrap=20", "attack_params.neighbourhood.k=2"]
BASE = {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "climate"}


def test_a_split_part_an_attack_reads_must_not_be_empty(toy_attacks):
    config = cell_config(BASE, ["attacks=[loss]"])  # the population is empty by default, and unread
    assert config.split.population == 0
    with pytest.raises(
        PrivauditorError, match=r"attack 'population_rank' needs split.population > 0"
    ) as error:
        cell_config(BASE, ["attacks=[loss,population_rank]"])
    assert "\n" not in str(error.value)


def test_two_attacks_on_neighbours_with_other_k_each_get_their_own(tmp_path, toy_attacks, seed):
    sizes = "split={members: 8, nonmembers: 8, validation: 4, population: 6}"
    attacks = "attacks=[neighbourhood,neighbour_gap,population_rank]"
    config = cell_config(BASE | {"seed": seed}, [sizes, attacks, *SETTINGS])
    outcome = run_cell(config, tmp_path)
    record = json.loads((outcome.path / "cell.json").read_text())
    views = record["views"]
    assert views["neighbourhood"]["neighbours"] != views["neighbour_gap"]["neighbours"]
    assert views["neighbourhood"]["signals"] == views["neighbour_gap"]["signals"]  # one shared view
    widths = {}
    for attack in ("neighbourhood", "neighbour_gap"):
        rows = pq.read_table(tmp_path / views[attack]["neighbours"]).column("neighbour_nll").to_pylist()
        widths[attack] = {len(r) for r in rows}
    assert widths == {"neighbourhood": {2}, "neighbour_gap": {3}}
    # each attack's scores come from its own view
    scores = pq.read_table(outcome.path / "scores.parquet").to_pylist()
    signals = pq.read_table(outcome.path / "signals.parquet").column("logp").to_pylist()
    nll = np.array([-np.mean(lp, dtype=np.float64) for lp in signals])
    for attack, reduce in (("neighbourhood", np.mean), ("neighbour_gap", np.min)):
        rows = pq.read_table(tmp_path / views[attack]["neighbours"]).column("neighbour_nll").to_pylist()
        got = [r["score"] for r in scores if r["attack"] == attack]
        np.testing.assert_allclose(got, [reduce(r) for r in rows] - nll, rtol=1e-12)
    # the population part is scored once, for the attack that reads it, and never trained on
    population = pq.read_table(tmp_path / views["population_rank"]["population"])
    ids = json.loads((tmp_path / record["provenance"]["split_file"]).read_text())
    assert population.column("sample_id").to_pylist() == ids["population"] and len(ids["population"]) == 6
    assert not set(ids["population"]) & set(ids["members"]) and "population" in record["provenance"]["split"]
    assert 0 <= outcome.metrics["population_rank"]["auc"] <= 1


def test_every_registered_view_keeps_the_view_contract_and_some_attack_reads_it():
    """Each view: registered under its file stem, a positive version, the models and split parts it reads
    among the known ones, a cost of non-negative passes, and at least one registered attack that reads it
    (a view no attack reads is dead code)."""
    import dataclasses

    from privauditor.tasks.views import VIEWS
    from privauditor.tasks.views._base import PART_MEMBERS

    read = {view.name for _, cls in ATTACKS.items() for view in cls().views().values()}
    for name, cls in VIEWS.items():
        view = cls()
        assert cls.name == name and cls.__module__.endswith(f".{name}"), name
        assert isinstance(cls.version, int) and cls.version >= 1, name
        assert set(view.models()) <= {"target", "reference"}, name
        assert set(view.parts()) <= {"scored", *PART_MEMBERS}, name
        assert all(v >= 0 for v in dataclasses.astuple(view.cost())), name
        assert name in read, f"no registered attack reads view {name!r}"
