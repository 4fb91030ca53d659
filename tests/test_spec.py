"""The resolved spec: cell ids change exactly when the results would (data, weights, code versions)."""

from __future__ import annotations

import json

import pytest

from privauditor.tasks.attacks import ATTACKS
from privauditor.tasks.infra.cache import stable_hash
from privauditor.tasks.models import PROFILES, PretrainProfile, active_profile, weights_identity
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.spec.resolved import UNKNOWN_HASH, CellSpec
from privauditor.tasks.views import VIEWS

BASE = {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "finance"}
SMALL = ["split={members: 4, nonmembers: 4, validation: 2}"]


def cell_id(settings=BASE, assignments=SMALL):
    return cell_config(settings, assignments).cell_id()


def records(path, n, edit=None):
    lines = [
        {"id": f"r{i}", "prompt": "Answer.\n", "target": f"record number {i} of a local file"}
        for i in range(n)
    ]
    if edit is not None:
        lines[edit]["target"] += "!"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_editing_one_record_of_a_local_dataset_file_changes_the_cell_id(tmp_path):
    path = tmp_path / "mine.jsonl"
    settings = BASE | {"dataset": records(path, 20)}
    first = cell_id(settings)
    records(path, 20, edit=7)
    edited = cell_id(settings)
    records(path, 20)
    assert edited != first and cell_id(settings) == first  # the content decides, not the file's name or time
    assert cell_config(settings, SMALL).resolve().data.startswith("sha256:")


def test_a_local_dataset_file_is_named_by_its_file_name_so_its_cells_match_from_any_folder(tmp_path):
    """The same records at two paths: one cell id, naming the file and never the folders it sat in."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    here, there = records(tmp_path / "a" / "mine.jsonl", 20), records(tmp_path / "b" / "mine.jsonl", 20)
    first, second = cell_id(BASE | {"dataset": here}), cell_id(BASE | {"dataset": there})
    assert first == second and first.split("__")[2] == "mine.jsonl" and tmp_path.name not in first
    spec = cell_config(BASE, SMALL).resolve()  # a registered name is itself: the id hashes the spec as it is
    assert spec.cell_id().endswith("__finance__s0__" + stable_hash(spec.to_dict(), 8))


def test_switching_the_pretraining_profile_changes_the_cell_id(monkeypatch):
    """Another profile gives other weights: a cell on them is another cell (the id hashes the bytes)."""
    first, weights = cell_id(), weights_identity("tiny-gpt2")
    probe = PretrainProfile("probe", steps=3, batch_size=2, seq_len=32, lr=1e-3, warmup=1, eval_windows=2)
    monkeypatch.setitem(PROFILES, "probe", probe)
    profile = active_profile().name
    monkeypatch.setenv("PRIVAUDITOR_PRETRAIN_PROFILE", "probe")
    assert weights_identity("tiny-gpt2") != weights and cell_id() != first
    monkeypatch.setenv("PRIVAUDITOR_PRETRAIN_PROFILE", profile)
    assert cell_id() == first  # back on the first profile: the same cell again


def test_bumping_a_version_changes_the_ids_of_the_cells_that_run_it_and_no_others(monkeypatch):
    with_min_k = [*SMALL, "attacks=[loss,min_k]"]
    without = [*SMALL, "attacks=[loss,zlib]"]
    with_neighbours = [*SMALL, "attacks=[loss,neighbourhood]"]
    before = [cell_id(BASE, a) for a in (with_min_k, without, with_neighbours)]
    monkeypatch.setattr(ATTACKS.get("min_k"), "version", 2)
    after = [cell_id(BASE, a) for a in (with_min_k, without, with_neighbours)]
    assert after[0] != before[0] and after[1:] == before[1:]
    monkeypatch.setattr(VIEWS.get("neighbours"), "version", 2)  # a view's version reaches its attacks' cells
    again = [cell_id(BASE, a) for a in (with_min_k, without, with_neighbours)]
    assert again[2] != after[2] and again[:2] == after[:2]


def test_the_spec_is_typed_recorded_and_read_back():
    spec = cell_config(BASE, [*SMALL, "train.lr=3e-3", "attack_params.min_k.k=0.1"]).resolve()
    assert spec.train.lr == 3e-3 and spec.attack("min_k").params == {"k": 0.1}
    assert spec.attack("reference").views["reference"].params == {"model": "reference", "part": "scored"}
    assert spec.base == weights_identity("tiny-gpt2") and spec.base.startswith("sha256:")
    again = CellSpec.from_dict(json.loads(json.dumps(spec.to_dict())))  # cell.json's round trip
    assert again == spec and again.cell_id() == spec.cell_id()  # equal, and hashed alike (20 is not 20.0)


def test_a_cell_whose_offline_base_is_not_built_has_no_final_id_yet(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(tmp_path))  # an empty cache: nothing built
    spec = cell_config(BASE, SMALL).resolve(build=False)
    assert spec.base is None and not spec.complete and spec.cell_id().endswith(UNKNOWN_HASH)
    assert not (tmp_path / "bases").exists()  # looked, built nothing
    hub = cell_config(BASE | {"model": "yahma/llama-7b-hf"}, SMALL).resolve(build=False)
    assert hub.base == "revision:main" and hub.cell_id().count("__") == 4


@pytest.mark.parametrize("text", ["train.lr=fast", "train.lr=[1]", "train.epochs=2.5"])
def test_a_value_that_is_not_a_number_is_a_one_line_error(text):
    from privauditor.tasks.infra.errors import PrivauditorError

    with pytest.raises(PrivauditorError, match="train.(lr|epochs) must be") as error:
        cell_config(BASE, [text])
    assert "\n" not in str(error.value)


def test_a_sweep_knows_which_offline_models_to_build_before_its_cells_have_ids(tmp_path, monkeypatch):
    from privauditor.orchestrator.run.bases import missing

    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(tmp_path))  # an empty cache
    settings = [*SMALL, "attacks=[loss,neighbourhood]", "attack_params.neighbourhood.k=3"]
    specs = [cell_config(BASE | {"adaptation": a}, settings).resolve(build=False) for a in ("none", "lora")]
    assert missing(specs) == {
        ("model", "tiny-gpt2", ()): "tiny-gpt2",
        ("view", "neighbours", (("k", 3), ("mask_fraction", 0.1))): "masked_lm (of view neighbours)",
    }
