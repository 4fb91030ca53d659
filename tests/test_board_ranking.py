"""The board on synthetic records (no training): the ranking is over complete blocks only, replicas'
intervals are one run's, a missing ε bound lowers a mean, a change of order is news only when
significant, schema-1 records are still read, and the site is byte-stable."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from privauditor.orchestrator.board import records as rec
from privauditor.orchestrator.board.check import check
from privauditor.orchestrator.board.history import changes
from privauditor.orchestrator.board.merge import cell_rows, setting_rows
from privauditor.orchestrator.board.ranked import moves, rank, summary_of
from privauditor.orchestrator.board.records import canonical, content_hash, record_key
from privauditor.orchestrator.board.store import Store
from privauditor.orchestrator.cli import main
from privauditor.orchestrator.report import battery
from privauditor.orchestrator.report.blocks import fraction_text
from privauditor.tasks.infra.cache import stable_hash
from privauditor.tasks.spec.resolved import setting_of

from .test_board import Page, snapshot


def record(run: str, model: str, adaptation: str, auc: float, seed: int = 0, step: int = 20, dp: bool = False,
           **extra) -> dict:  # fmt: skip
    """A valid schema-2 record of one checkpoint: ``loss`` at ``auc`` and the ``blind`` control at 0.5;
    ``extra`` overrides the record's fields or, under ``loss``, the attack's (``loss={...}``)."""
    defence = "dp" if dp else "none"
    spec = {"model": model, "adaptation": adaptation, "dataset": "d", "seed": seed, "defence": defence}
    cell_id = f"{model}__{adaptation}{'+dp-e8' if dp else ''}__d__s{seed}__{stable_hash(spec, 8)}"

    def attack(value: float, access: str) -> dict:
        return dict.fromkeys(rec.attack_fields()) | {"access": access, "auc": value, "auc_ci_low": value - 0.1,
                                                   "auc_ci_high": value + 0.1, "n_members": 50, "n_nonmembers": 50}  # fmt: skip

    found = dict.fromkeys(rec.fields()) | {
        "format": rec.FORMAT, "schema_version": rec.SCHEMA_VERSION, "run": run, "cell_id": cell_id,
        "setting": setting_of(spec), "shipped": "trained", "model": model, "adaptation": adaptation, "dataset": "d", "seed": seed,
        "defence": defence, "epoch": step / 10, "step": step, "trainable_fraction": 0.01, "utility_loss": 3.0, "best": True, "supersedes": [],
        "attacks": {"loss": attack(auc, "black-box") | extra.pop("loss", {}), "blind": attack(0.5, "model-free")},
        "provenance": dict.fromkeys(rec.PROVENANCE_FIELDS, {}) | {"versions": {"privauditor": "0"}, "spec": spec,
                                                               "split": {"members": "h"}},
    } | extra  # fmt: skip
    return found | {"key": record_key(spec, run, cell_id, step)}


def block(run: str, model: str, aucs: dict[str, float], seed: int = 0) -> list[dict]:
    """One run's records of one (model, d) block and seed: each technique, and the ``none`` control."""
    return [record(run, model, name, auc, seed) for name, auc in {"none": 0.5, **aucs}.items()]


def store_of(folder: Path, records: list[dict]) -> Path:
    store = Store(folder, create=True)
    for r in records:
        data = canonical(r)
        store.write_new(f"records/{r['key']}/{content_hash(data)}.json", data)
    assert check(store)[1] == []
    return folder


def test_the_ranking_is_over_complete_blocks_only(tmp_path):
    # run A: block m1 with full, lora and prompt (two seeds of full, an earlier checkpoint, a DP lora);
    # run B: block m2 with full and lora only, lora at another trainable fraction
    a = block("a", "m1", {"full": 0.70, "lora": 0.60, "prompt": 0.80}) + block("a", "m1", {"full": 0.80}, 1)
    a += [record("a", "m1", "full", 0.99, step=10), record("a", "m1", "lora", 0.99, dp=True)]
    b = block("b", "m2", {"full": 0.62, "lora": 0.66})
    b[-1]["trainable_fraction"] = 0.02
    found, _ = rank(cell_rows(a + b))
    assert found.blocks == [("m1", "d"), ("m2", "d")] and set(found.names) == {"full", "lora"}
    assert found.mean_auc["full"] == pytest.approx(((0.70 + 0.80) / 2 + 0.62) / 2)  # seeds, then blocks
    assert found.mean_auc["lora"] == pytest.approx((0.60 + 0.66) / 2)  # not the DP cell's
    assert found.coverage == {"full": 2, "lora": 2, "prompt": 1} and set(found.partial) == {"prompt"}
    assert found.friedman is None and all("prompt" not in (p["a"], p["b"]) for p in found.pairs)

    site = tmp_path / "site"
    assert main(["board", "build", str(store_of(tmp_path / "store", a + b)), "--out", str(site)]) == 0
    index = Page()
    index.feed((site / "index.html").read_text())
    ranking = next(t for t in index.tables if t and t[0][:2] == ["rank", "technique"])
    lora = fraction_text((0.01, 0.02))
    assert [tuple(r[1:4]) for r in ranking[1:]] == [("full", "1 %", "0.685"), ("lora", lora, "0.630")]
    partial = next(t for t in index.tables if t and t[0][:3] == ["technique", "trainable", "blocks"])
    assert [r[0] for r in partial[1:]] == ["prompt"]
    assert 'src="cd.png"' in (site / "index.html").read_text() and (site / "cd.png").stat().st_size > 0
    assert f"Trainable fraction: {lora}." in (site / "techniques" / "lora.html").read_text()


def test_replicas_keep_the_first_runs_intervals():
    first = record("run-a", "m", "lora", 0.70, loss={"tpr_at_1pct_fpr_ci_low": 0.01, "eps_lower": 0.4})
    again = record(
        "run-b", "m", "lora", 0.74, loss={"auc_ci_low": 0.1, "auc_ci_high": 0.95, "eps_lower": 2.0}
    )
    again["attacks"]["loss"]["tpr_at_1pct_fpr_ci_low"] = 0.3
    rows = {(r["adaptation"], r["attack"]): r for r in cell_rows([again, first, *block("run-a", "m", {})])}
    merged = rows[("lora", "loss")]
    assert merged["runs"] == 2 and merged["auc"] == pytest.approx(0.72) and merged["replicas_agree"] is False
    assert (merged["auc_ci_low"], merged["auc_ci_high"]) == pytest.approx((0.6, 0.8))  # run-a's, not a mean
    assert merged["tpr_at_1pct_fpr_ci_low"] == 0.01 and merged["eps_lower"] == 0.4
    twin = record("run-c", "m", "lora", 0.70)
    assert cell_rows([first, twin])[1]["replicas_agree"] is True


def test_a_missing_bound_lowers_the_mean_and_a_missing_rate_is_not_dropped():
    found = [record("r", "m", "lora", 0.6 + s / 10, seed=s, loss={"eps_lower": e, "tpr_at_1pct_fpr": 0.2})
             for s, e in enumerate([0.9, None, None])]  # fmt: skip
    found[2]["attacks"]["loss"]["tpr_at_1pct_fpr"] = None  # too few non-members in one seed
    loss, blind = ([r for r in setting_rows(cell_rows(found)) if r["attack"] == a] for a in ("loss", "blind"))
    assert (
        loss[0]["eps_lower"] == pytest.approx(0.3) and loss[0]["eps_bounded"] == 1 and loss[0]["n_seeds"] == 3
    )
    assert loss[0]["tpr_at_1pct_fpr"] is None
    assert loss[0]["ci_over"] == "seeds" and loss[0]["auc_ci_low"] < 0.6  # a t-interval, not a mean of CIs
    assert blind[0]["eps_lower"] is None and blind[0]["eps_bounded"] == 0  # nothing bounded in any seed


def test_a_change_of_order_is_news_only_when_the_battery_separates_it():
    # 8 blocks: b leaks more than a and c every time; a and c trade places by a hair
    values = {(f"m{i}", "d"): {"a": 0.60 + i / 100, "b": 0.80 + i / 100, "c": 0.60 + i / 100 + (-1) ** i / 1000}
              for i in range(8)}  # fmt: skip
    after = summary_of(battery.run(values))
    assert after["names"] == ["b", "a", "c"] and after["significant"] == [["a", "b"], ["b", "c"]]
    found = moves({"names": ["c", "b", "a"]}, after)
    assert [m["technique"] for m in found["moved"]] == [
        "b",
        "c",
    ]  # b and c swapped, and a test separates them
    assert found["moved"][0]["separated_from"] == ["c"] and found["noise"] == ["a"]  # a passed c: noise
    within = moves({"names": ["c", "b", "a"]}, after | {"significant": []})
    assert within["moved"] == [] and within["noise"] == ["b", "a", "c"]
    entering = moves([["b", 0.8], ["a", 0.6]], after)  # a release from before the battery: a list of AUCs
    assert entering == {"moved": [], "noise": [], "entered": ["c"], "left": []}  # shifted places, no swap
    before, now = (
        {"rows": {}, "superseded": [], "records": [], "ranking": r}
        for r in ({"names": ["c", "b", "a"]}, after)
    )
    assert [m["technique"] for m in changes(before, now)["ranks"]["moved"]] == ["b", "c"]


def test_schema_1_records_are_still_read_and_a_mixed_store_says_so(tmp_path, capsys):
    old = []
    for r in block("old-run", "m", {"lora": 0.7}):
        r = {k: v for k, v in r.items() if k in rec.fields(1)} | {"schema_version": 1}
        r["attacks"] = {a: {k: m[k] for k in rec.attack_fields(1)} for a, m in r["attacks"].items()}
        old.append(
            r | {"key": rec.record_key_v1(r["provenance"]["spec"], r["run"], r["cell_id"], r["epoch"])}
        )
    store = store_of(tmp_path / "store", old)
    records = check(Store(store))[0]
    assert {r["schema_version"] for r in records} == {1} and {r["key"] for r in records} == {
        r["key"] for r in old
    }
    assert all(
        r["trainable_fraction"] is None and r["attacks"]["loss"]["tpr_at_0fp"] is None for r in records
    )
    assert {r["shipped"] for r in records} == {"trained"}  # a record before schema 6: the model as trained
    assert main(["board", "build", str(store), "--out", str(tmp_path / "site")]) == 0
    new = block("new-run", "m", {"lora": 0.7})
    mixed = store_of(tmp_path / "mixed", old + new)
    capsys.readouterr()
    assert main(["board", "check", str(mixed)]) == 0
    expected = (
        f"mixed record schema versions: {len(old)} of version 1, {len(new)} of version {rec.SCHEMA_VERSION}"
    )
    assert expected in capsys.readouterr().out
    keyed_by_step = old[0] | {
        "key": record_key(old[0]["provenance"]["spec"], "old-run", old[0]["cell_id"], 20)
    }
    assert "not the hash of its spec, run, cell and epoch" in rec.problems(keyed_by_step)[0]
    assert rec.problems(old[0] | {"schema_version": 7})[0].endswith(
        "version 1, 2, 3, 4, 5 or 6, the ones this privauditor reads"
    )
    # the same folder added again as schema 6: one record per (run, cell, step), the newer one
    rows = cell_rows(records + block("old-run", "m", {"lora": 0.7}))
    assert len(rows) == 4 and {r["runs"] for r in rows} == {1} and rows[0]["trainable_fraction"] == 0.01
    assert rec.SCHEMA_VERSION == 6


def test_the_site_is_byte_identical_across_builds(tmp_path):
    found = [
        r for i in range(3) for r in block("r", f"m{i}", {"full": 0.7 + i / 50, "lora": 0.6, "prompt": 0.55})
    ]
    store = store_of(tmp_path / "store", found)
    sweep = tmp_path / "claim.yaml"
    sweep.write_text(yaml.safe_dump({"name": "claim", "hypothesis": {
        "classes": {"prompt": "prompt_based", "lora": "adapters", "full": "full"},
        "order": ["prompt_based", "adapters", "full"], "formed_on": {"seeds": [0]}}}))  # fmt: skip
    for name in ("one", "two"):
        assert (
            main(["board", "build", str(store), "--out", str(tmp_path / name), "--hypothesis", str(sweep)])
            == 0
        )
    assert snapshot(tmp_path / "one") == snapshot(tmp_path / "two")
    assert "cd.png" in snapshot(tmp_path / "one")
    index = (tmp_path / "one" / "index.html").read_text()
    assert "Friedman χ²(2)" in index and "Page's L = " in index and "<b>exploratory</b>" in index


def test_a_hypothesis_at_the_best_checkpoint_ranks_the_board_there(tmp_path):
    """The board's headline reads the checkpoint findings.md would: the build's hypothesis's (`best`, the
    lowest validation NLL) where it names the ranking attack, else each setting's last."""
    found = []
    for i in range(2):  # per block: full's best checkpoint (step 10) at 0.9, its last (step 20) at 0.6
        found += block("r", f"m{i}", {"lora": 0.7})
        found += [record("r", f"m{i}", "full", 0.9, step=10, best=True)]
        found += [record("r", f"m{i}", "full", 0.6, step=20, best=False)]
    store = store_of(tmp_path / "store", found)
    sweep = tmp_path / "best.yaml"
    sweep.write_text(yaml.safe_dump({"name": "best", "hypothesis": {
        "checkpoint": "best", "classes": {"lora": "adapters", "full": "full"}, "order": ["adapters", "full"],
        "formed_on": {"seeds": [0]}}}))  # fmt: skip

    def ranking(*extra: str) -> tuple[list[tuple[str, str]], str]:
        site = tmp_path / f"site{len(extra)}"
        assert main(["board", "build", str(store), "--out", str(site), *extra]) == 0
        index = Page()
        index.feed((site / "index.html").read_text())
        table = next(t for t in index.tables if t and t[0][:2] == ["rank", "technique"])
        return [(r[1], r[3]) for r in table[1:]], (site / "index.html").read_text()

    last, page = ranking()
    assert last == [("lora", "0.700"), ("full", "0.600")] and "each setting's last checkpoint" in page
    best, page = ranking("--hypothesis", str(sweep))
    assert (
        best == [("full", "0.900"), ("lora", "0.700")] and "each setting's best-validation checkpoint" in page
    )
