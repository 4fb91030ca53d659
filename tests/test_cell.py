"""One audit cell end to end (``privauditor cell``): the results-folder contract and the validity checks."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from privauditor.orchestrator.cli import main
from privauditor.tasks.cell.run import CellEnvironment, run_cell
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.leakage.extraction import ExtractionSettings, extraction_metrics
from privauditor.tasks.passes.signal_table import Signals
from privauditor.tasks.spec.config import DEFAULT_ATTACKS, cell_config
from privauditor.tasks.spec.resolved import CellSpec

SIGNAL_COLUMNS = {"sample_id", "member", "token_ids", "logp", "mu", "sigma"}
METRIC_KEYS = {"auc", "auc_ci", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "roc"}


def cell(out, model="tiny-llama", adaptation="lora", dataset="finance", *assignments, seed=0):
    settings = {"model": model, "adaptation": adaptation, "dataset": dataset, "seed": seed}
    return run_cell(cell_config(settings, list(assignments)), out)


def test_lora_cell_at_defaults_writes_the_contract(tmp_path, capsys, seed):
    """The acceptance cell: tiny-llama x lora x finance at default sizes, every attack, via the CLI."""
    out = tmp_path / "results"
    argv = [
        "cell",
        "--model",
        "tiny-llama",
        "--adaptation",
        "lora",
        "--dataset",
        "finance",
        "--seed",
        str(seed),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    (cell_dir,) = (out / "cells").iterdir()
    assert (
        cell_dir.name.startswith(f"tiny-llama__lora__finance__s{seed}__")
        and len(cell_dir.name.split("__")[-1]) == 8
    )
    names = {p.name for p in cell_dir.iterdir()}
    assert {"cell.json", "adapter", "signals.parquet", "scores.parquet", "metrics.json", "DONE"} <= names
    signals = pq.read_table(cell_dir / "signals.parquet")
    assert set(signals.column_names) >= SIGNAL_COLUMNS and signals.num_rows == 200
    scores = pq.read_table(cell_dir / "scores.parquet")
    assert scores.column_names == ["sample_id", "member", "attack", "score"]
    assert (
        scores.num_rows == 200 * len(DEFAULT_ATTACKS) and str(scores.schema.field("score").type) == "double"
    )
    metrics = json.loads((cell_dir / "metrics.json").read_text())
    assert set(metrics) == set(DEFAULT_ATTACKS) and all(set(m) >= METRIC_KEYS for m in metrics.values())
    assert metrics["loss"]["tpr_at_0.1pct_fpr"] is None  # 100 non-members cannot measure 0.1 % FPR
    record = json.loads((cell_dir / "cell.json").read_text())
    spec = CellSpec.from_dict(record["config"])
    assert record["trainable_params"] > 0 and (spec.train.lr, spec.train.epochs) == (1e-2, 20)
    assert spec.cell_id() == cell_dir.name  # cell.json holds exactly what the id hashes
    assert record["provenance"]["split"]["members"] and record["versions"]["torch"]
    assert (out / "privauditor.json").exists() and (out / "plots" / f"{cell_dir.name}.png").stat().st_size > 0
    assert "loss" in printed and "AUC" in printed
    low, high = metrics["loss"]["auc_ci"]
    # LoRA at defaults leaks a little (AUC about 0.6 on the fast bases over seeds; 0.496 on one GPU run), so
    # one split's point estimate says nothing: the memorisation cases below assert the leak with margin
    assert 0 <= low <= metrics["loss"]["auc"] <= high <= 1 and high - low < 0.4
    # the views: the adapted model's in the cell, the base's (the reference signals) in the shared store;
    # a `none` cell of the same split reuses the base's signals as its own
    views = {p.parent.name for p in (cell_dir / "views").glob("*/*.parquet")}
    assert views == {"signals", "neighbours", "grad_norm"}
    shared = sorted((out / "shared" / "views" / "signals").glob("*.parquet"))
    assert len(shared) == 1
    cell(out, "tiny-llama", "none", "finance", "attacks=[loss,reference]", seed=seed)
    assert sorted((out / "shared" / "views" / "signals").glob("*.parquet")) == shared
    # a rerun finds DONE and does nothing
    assert main(argv) == 0 and "already done" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("model", "adaptation", "train", "least", "fields"),
    [
        ("tiny-gpt2", "full", ["train.epochs=80", "train.lr=0.003"], 0.95, False),
        ("tiny-llama", "lora", ["train.epochs=60"], 0.85, True),
    ],
)
def test_canary_cell_memorises(tmp_path, model, adaptation, train, least, fields, seed):
    """16 members seen many times are told apart from 16 others (seeds 0-5 all gave 1.0 for full fine-tuning
    at 80 epochs and 0.90-1.0 for LoRA at 60 on the fast bases). Their 8-token suffixes come back to top-k
    sampling more often than the non-members' (seed 0: 0.69 and 0.94 against 0.31: a non-member's record
    template is predictable too), and LoRA's members give their PII fields back (seed 0: 77 % of 114 fields
    against 0 %; full fine-tuning, which lowers the members' loss without making their values the top
    token, 2 %). The default's 32-token suffix asks more than these tiny bases give: every rate 0 here."""
    outcome = cell(
        tmp_path,
        model,
        adaptation,
        "finance",
        "split={members: 16, nonmembers: 16, validation: 8}",
        *train,
        "attacks=[loss]",
        seed=seed,
    )
    assert outcome.metrics["loss"]["auc"] >= least and outcome.metrics["loss"]["auc_ci"][0] > 0.5
    found = json.loads((outcome.path / "extraction.json").read_text())
    assert found == json.loads((outcome.path / "cell.json").read_text())["checkpoints"][-1]["extraction"]
    signals = Signals.from_table(pq.read_table(outcome.path / "signals.parquet"))
    short = extraction_metrics(signals, ExtractionSettings(prefix=8, suffix=8))
    assert short["sampled_members"] > short["sampled_nonmembers"] and found["pii"]["fields"] > 0
    assert not fields or found["pii"]["all"]["reconstructed_difference_ci"][0] > 0


def test_untrained_model_gives_every_attack_chance_auc(tmp_path, seed):
    """Nothing trained: every attack is at chance (|AUC - 0.5| <= 0.1, three standard errors at 150 / 150)."""
    outcome = cell(
        tmp_path, "tiny-opt", "none", "climate",
        "split={members: 150, nonmembers: 150, validation: 10}", "attack_params.neighbourhood.k=4", seed=seed,
    )  # fmt: skip
    aucs = {name: m["auc"] for name, m in outcome.metrics.items()}
    assert set(aucs) == set(DEFAULT_ATTACKS)
    assert all(abs(auc - 0.5) <= 0.1 for auc in aucs.values()), aucs


def test_t5_cell_scores_decoder_targets(tmp_path):
    outcome = cell(
        tmp_path, "tiny-t5", "prompt", "sql",
        "split={members: 8, nonmembers: 8, validation: 4}", "train.epochs=1",
        "attacks=[loss,min_k_pp,neighbourhood,gradnorm]", "attack_params.neighbourhood.k=2",
    )  # fmt: skip
    signals = pq.read_table(outcome.path / "signals.parquet")
    (neighbours,) = (outcome.path / "views" / "neighbours").glob("*.parquet")
    rows = pq.read_table(neighbours).column("neighbour_nll").to_pylist()
    assert signals.num_rows == 16 and len(rows) == 16 and all(len(n) == 2 for n in rows)
    assert all(0.0 <= m["auc"] <= 1.0 for m in outcome.metrics.values())


def test_settings_make_the_cell_id_and_bad_settings_are_one_line_errors(tmp_path):
    base = {"model": "tiny-llama", "adaptation": "lora", "dataset": "finance"}
    ids = {
        cell_config(base, s).cell_id()
        for s in ([], ["train.lr=0.02"], ["split.members=64"], ["attack_params.min_k.k=0.1"], ["seed=1"])
    }
    assert len(ids) == 5
    assert (
        cell_config(base, ["train.lr=0.01"]).cell_id() == cell_config(base).cell_id()
    )  # the default, made explicit
    # numbers as people write them: 1e-2 is the default learning rate too
    assert cell_config(base, ["train.lr=1e-2"]).cell_id() == cell_config(base).cell_id()
    assert cell_config(base, ["train.lr=3e-3"]).train.lr == 0.003
    for bad, match in [
        (["split.member=5"], "did you mean 'members'"),
        (["train.lr=fast"], "train.lr must be a number or null, not 'fast'"),
        (["train.epochs=true"], "must be int or null"),
        (["attacks=[los]"], "did you mean 'loss'"),
        (["adaptation_params.lora.alhpa=4"], "did you mean 'alpha'"),
        (["split.members=0"], "at least 1"),
        (["seed"], "key=value"),
    ]:
        with pytest.raises(PrivauditorError, match=match) as error:
            cell_config(base, bad)
        assert "\n" not in str(error.value)


def test_cli_errors_exit_2_and_leave_nothing(tmp_path, capsys):
    out = tmp_path / "r"
    argv = [
        "cell",
        "--model",
        "tiny-opt",
        "--adaptation",
        "llama_adapter",
        "--dataset",
        "finance",
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    assert "llama" in capsys.readouterr().err and not out.exists()
    out.mkdir()
    (out / "privauditor.json").write_text('{"results_format": 999}')
    argv = ["cell", "--model", "tiny-opt", "--adaptation", "none", "--dataset", "finance", "--out", str(out)]
    assert main([*argv, "--set", "attacks=[loss]"]) == 2
    assert "results format" in capsys.readouterr().err and not (out / "cells").exists()


def test_a_cell_past_its_time_limit_stops_without_done_and_reruns_cleanly(tmp_path):
    from privauditor.tasks.infra.deadline import CellTimeout

    config = cell_config(
        {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "climate"},
        ["split={members: 8, nonmembers: 8, validation: 4}", "train.epochs=1", "attacks=[loss]"],
    )
    with pytest.raises(CellTimeout, match=r"run.cell_timeout_s = 0.01 s \(in training\)") as error:
        run_cell(config, tmp_path, CellEnvironment(timeout_s=0.01))
    assert "\n" not in str(error.value)
    cell_dir = tmp_path / "cells" / config.cell_id()
    assert not (cell_dir / "DONE").exists() and not (cell_dir / "metrics.json").exists()
    outcome = run_cell(config, tmp_path, CellEnvironment(timeout_s=600))  # the unfinished attempt is replaced
    assert (outcome.path / "DONE").exists() and not outcome.skipped
