"""Sweep files: strict parsing, expansion, precedence, the shipped sweeps, and ``privauditor validate``."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest
import yaml

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.sweepfile.sweep import SWEEPS_DIR, load_sweep, parse_sweep
from privauditor.tasks.adaptations import ADAPTATIONS
from privauditor.tasks.attacks import ATTACKS, Attack
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.spec.config import cell_config

BASE = {
    "name": "t",
    "matrix": {
        "model": ["tiny-llama", "tiny-opt"],
        "adaptation": ["lora", "prompt", "llama_adapter"],
        "dataset": ["finance"],
    },
    "seeds": [0, 1],
}


def test_shipped_sweeps_validate_and_the_default_keeps_what_it_must():
    assert {p.stem for p in SWEEPS_DIR.glob("*.yaml")} >= {
        "smoke",
        "quick",
        "default",
        "paper",
        "full",
        "lowfpr",
        "lowfpr_opt",
        "canaries",
    }
    default = load_sweep("default")
    models = {c.model for c in default.cells}
    assert {"tiny-llama", "tiny-t5"} <= models and len(models) >= 3  # llama_adapter's family, and T5
    assert len({c.dataset for c in default.cells}) >= 2
    every = set(ADAPTATIONS.names()) - {"icl"}  # in-context learning has its own tests and sweeps
    assert {c.adaptation for c in default.cells} == every
    specs = [c.resolve(build=False) for c in default.cells]
    assert all(len(s.train.checkpoints) >= 2 for s in specs if s.adaptation != "none")
    assert len({s.train.checkpoints for s in specs if s.adaptation != "none"}) == 1  # equal budgets
    assert all({"blind", "loss"} <= {a.name for a in s.attacks} for s in specs)  # the controls
    full = load_sweep("full")
    assert len({c.model for c in full.cells}) == 6 and len({c.dataset for c in full.cells}) == 3
    assert len({c.seed for c in full.cells}) >= 2
    lowfpr, second = load_sweep("lowfpr"), load_sweep("lowfpr_opt")
    assert all(c.split.nonmembers >= 1000 for c in lowfpr.cells + second.cells)
    assert len({c.model for c in lowfpr.cells + second.cells}) >= 2  # two bases
    assert all(c.attacks == tuple(ATTACKS.names()) for c in lowfpr.cells)  # every attack (`attacks: all`)
    assert {"ezmia", "wbc", "reference", "loss"} <= set(second.cells[0].attacks)
    canaries = load_sweep("canaries")
    assert all(c.split.canaries is not None and len(c.split.canaries.repeats) >= 4 for c in canaries.cells)
    assert "none" in {c.adaptation for c in canaries.cells} and default.cells[0].split.canaries is None
    paper = load_sweep("paper")
    assert all(c.attack_params["neighbourhood"]["k"] == 25 for c in paper.cells)
    quick = load_sweep("quick")
    assert len({c.model for c in quick.cells}) == 2 and {c.adaptation for c in quick.cells} == every
    for trajectory in (default, quick, full, lowfpr):  # from the initial state, through the first epoch
        checkpoints = trajectory.cells[-1].resolve(build=False).train.checkpoints
        assert checkpoints[0] == 0 and 0 < checkpoints[1] < 1, (trajectory.name, checkpoints)


def test_expansion_drops_unsupported_pairs_and_ids_are_deterministic():
    sweep = parse_sweep(BASE)
    assert len(sweep.cells) == (2 * 2 + 1) * 2 and [(d.model, d.adaptation) for d in sweep.dropped] == [
        ("tiny-opt", "llama_adapter")
    ]
    assert [c.cell_id() for c in sweep.cells] == [c.cell_id() for c in parse_sweep(BASE).cells]
    assert len({c.cell_id() for c in sweep.cells}) == len(sweep.cells)


def test_precedence_technique_then_train_then_overrides_then_set():
    data = BASE | {
        "train": {"epochs": 2},
        "overrides": [
            {"adaptation": "prompt", "train": {"lr": 0.5}},
            {"model": "tiny-opt", "adaptation": "prompt", "train": {"lr": 0.7}},
        ],
    }
    cells = {(c.model, c.adaptation, c.seed): c.resolve(build=False).train for c in parse_sweep(data).cells}
    assert (cells[("tiny-llama", "lora", 0)].epochs, cells[("tiny-llama", "lora", 0)].lr) == (2, 1e-2)
    assert cells[("tiny-llama", "prompt", 0)].lr == 0.5 and cells[("tiny-opt", "prompt", 1)].lr == 0.7
    forced = parse_sweep(data, assignments=["train.lr=0.02"]).cells
    assert {c.resolve(build=False).train.lr for c in forced} == {0.02}


def test_numbers_are_numbers_however_they_are_written(tmp_path):
    """The paper's learning rate copied as written (PyYAML alone reads ``3e-4`` as a string)."""
    path = tmp_path / "paper-lr.yaml"
    path.write_text(
        yaml.safe_dump(BASE)[:-1] + "\ntrain: {lr: 3e-4, epochs: 2}\nattack_params: {min_k: {k: 2E-1}}\n"
    )
    sweep = load_sweep(str(path), ["train.batch_size=4"])
    assert {c.train.lr for c in sweep.cells} == {3e-4} and {c.train.batch_size for c in sweep.cells} == {4}
    assert {c.resolve(build=False).attack("min_k").params["k"] for c in sweep.cells} == {0.2}
    assert {c.train.lr for c in load_sweep(str(path), ["train.lr=3e-3"]).cells} == {3e-3}
    path.write_text(path.read_text().replace("3e-4", "fast"))
    with pytest.raises(PrivauditorError, match="train.lr must be a number or null, not 'fast'") as error:
        load_sweep(str(path))
    assert "\n" not in str(error.value)


@dataclass
class LowestToken(Attack):
    """The lowest per-token log-probability: a plugin registered for one test only."""

    name = "toy_lowest"
    paper = "https://example.org/toy"

    def score(self, views):
        return np.array([float(np.min(lp)) for lp in views["signals"].logp])


def test_attacks_all_is_every_registered_attack_sorted_plugins_included():
    """``attacks: all`` (the sweep's, or an override's as a list of one) takes a plugin registered now."""
    data = BASE | {
        "attacks": "all",
        "split": {"population": 16, "known_members": 16},  # what rmia, camia and con_recall read
        "overrides": [{"adaptation": "prompt", "attacks": ["loss"]}, {"seed": 1, "attacks": ["all"]}],
    }
    ATTACKS.add(LowestToken.name, LowestToken)
    try:
        every = tuple(ATTACKS.names())
        sweep = parse_sweep(data)
    finally:
        ATTACKS.remove(LowestToken.name)
    assert LowestToken.name in every and LowestToken.name not in ATTACKS.names()
    assert list(every) == sorted(every) and every[-1] != LowestToken.name  # sorted, not appended
    ran = {(c.adaptation, c.seed): c.attacks for c in sweep.cells}
    assert ran[("lora", 0)] == ran[("prompt", 1)] == every and ran[("prompt", 0)] == ("loss",)
    assert sweep.resolved([])["attacks"] == list(every) and data["attacks"] == "all"  # the file's data kept


def test_run_block_takes_fractional_gpus():
    assert parse_sweep(BASE | {"run": {"gpus_per_trial": 0.5}}).run.gpus_per_trial == 0.5
    assert parse_sweep(BASE).run.gpus_per_trial == "auto"
    assert (
        parse_sweep(BASE | {"run": {"cell_timeout_s": None}}).run.cell_timeout_s is None
    )  # the design's example
    assert parse_sweep(BASE | {"run": {"cell_timeout_s": 600}}).run.cell_timeout_s == 600.0
    for bad in (0, -5, "1h"):
        with pytest.raises(PrivauditorError, match="cell_timeout_s"):
            parse_sweep(BASE | {"run": {"cell_timeout_s": bad}})


def test_exclude_drops_matching_cells():
    data = BASE | {"exclude": [{"model": "tiny-opt"}, {"adaptation": "prompt", "seed": 1}]}
    cells = parse_sweep(data).cells
    assert all(c.model == "tiny-llama" for c in cells) and not any(
        c.adaptation == "prompt" and c.seed == 1 for c in cells
    )


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (BASE | {"atacks": ["loss"]}, "did you mean 'attacks'"),
        (BASE | {"matrix": {"models": ["tiny-llama"]}}, "did you mean 'model'"),
        (BASE | {"matrix": BASE["matrix"] | {"model": ["tiny-lama"]}}, "did you mean 'tiny-llama'"),
        (BASE | {"attacks": ["loss", "zlibb"]}, "did you mean 'zlib'"),
        (BASE | {"attacks": ["all", "loss"]}, r"^sweep: attacks is either all .* not both"),
        (
            BASE | {"overrides": [{"seed": 1, "attacks": ["loss", "all"]}]},
            r"overrides\[0\]\.attacks is either all",
        ),
        (BASE | {"split": {"members": "many"}}, "must be int"),
        (
            BASE | {"train": {"lr": "3e-4"}},
            "train.lr must be a number or null, not '3e-4'",
        ),  # quoted: a string
        (BASE | {"exclude": [{"modle": "tiny-opt"}]}, "did you mean 'model'"),
        (BASE | {"run": {"max_failure": 1}}, "did you mean 'max_failures'"),
        (BASE | {"run": {"gpus_per_trial": "many"}}, "must be a number or auto or null, not 'many'"),
        (BASE | {"run": {"gpus_per_trial": True}}, "or null, not True$"),  # no hint to quote a name
        (BASE | {"run": {"gpus_per_trial": -1}}, "must be a number >= 0 or auto or null, not -1"),
        (BASE | {"run": {"cell_timeout_s": 0}}, "seconds > 0 or null"),
        (BASE | {"tracking": {"wandb": {"mode": "sometimes"}}}, "offline, online or disabled"),
        (BASE | {"seeds": ["zero"]}, "integers"),
        ([1, 2], "mapping"),
    ],
)
def test_bad_sweeps_are_one_line_errors(data, match):
    with pytest.raises(PrivauditorError, match=match) as error:
        parse_sweep(data)
    assert "\n" not in str(error.value)


def test_validate_prints_cells_and_dropped_pairs_without_ray(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(BASE))
    code = (
        "import sys; from privauditor.orchestrator.cli import main; rc = main(['validate', sys.argv[1]]);"
        "assert 'ray' not in sys.modules, 'validate imported ray'; sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "10 cells" in done.stdout and "dropped tiny-opt x llama_adapter" in done.stdout
    assert "tiny-llama__prompt__finance__s1__" in done.stdout


def test_validate_reports_bad_yaml_with_its_line(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nmatrix: {model: [tiny-llama\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "broken.yaml line" in err and "not valid YAML" in err
    assert main(["validate", "smok"]) == 2 and "did you mean 'smoke'" in capsys.readouterr().err


def test_paper_sweep_resolves_every_cell_with_resources_and_deepspeed(capsys):
    assert main(["validate", "paper"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.count("__") == 4]
    assert len(rows) == 459
    by_kind = {(r[1], r[2]): r[5:] for r in rows}
    assert by_kind[("yahma/llama-7b-hf", "full")] == ["1", "8", "4", "ZeRO-3"]
    assert by_kind[("yahma/llama-7b-hf", "lora")] == ["1", "8", "1", "ZeRO-2"]  # the 7B spec's stage
    assert by_kind[("yahma/llama-7b-hf", "none")] == ["1", "8", "1", "-"]  # nothing to train


def test_trial_resources_come_from_the_model_spec_unless_the_run_block_sets_them():
    from privauditor.orchestrator.run.trials import trial_resources
    from privauditor.orchestrator.sweepfile.sweep import RunSettings

    tiny, big = (
        cell_config({"model": m, "adaptation": "lora", "dataset": "finance"})
        for m in ("tiny-gpt2", "yahma/llama-7b-hf")
    )
    auto = RunSettings()
    assert trial_resources(tiny, auto, has_gpus=False) == {"CPU": 1.0}
    assert trial_resources(tiny, auto, has_gpus=True) == {"CPU": 1.0, "GPU": 1.0}
    assert trial_resources(big, auto, has_gpus=True) == {"CPU": 8.0, "GPU": 1.0}
    assert trial_resources(big, RunSettings(cpus_per_trial=2, gpus_per_trial=0.5), True) == {
        "CPU": 2.0,
        "GPU": 0.5,
    }
    assert trial_resources(big, RunSettings(gpus_per_trial=None), True) == {"CPU": 8.0}


def test_run_resources_name_custom_resources_per_sweep_model_or_adaptation_and_leave_ids_alone():
    from privauditor.orchestrator.run.trials import trial_resources

    run = {"resources": {"gpu_1x": 1}, "resources_for": {"prompt": {"gpu_8x": 1}, "tiny-opt": {"big": 2}}}
    sweep, plain = parse_sweep(BASE | {"run": run}), parse_sweep(BASE)
    asked = {(c.model, c.adaptation): trial_resources(c, sweep.run, False) for c in sweep.cells}
    assert asked[("tiny-llama", "lora")] == {"CPU": 1.0, "gpu_1x": 1.0}
    assert asked[("tiny-opt", "lora")] == {"CPU": 1.0, "big": 2.0}  # the model's
    assert asked[("tiny-opt", "prompt")] == {"CPU": 1.0, "gpu_8x": 1.0}  # the adaptation's wins
    assert [c.cell_id() for c in sweep.cells] == [c.cell_id() for c in plain.cells]
    assert sweep.writer() == plain.writer()  # how cells run is not what they are
    assert "resources" not in plain.resolved([])["run"]  # an unset setting leaves OUT/sweep.yaml as it was
    assert sweep.resolved([])["run"]["resources_for"]["prompt"] == {"gpu_8x": 1.0}


@pytest.mark.parametrize(
    ("run", "match"),
    [
        ({"resources": {"GPU": 1}}, r"run.resources.GPU: set CPUs and GPUs with run.cpus_per_trial"),
        ({"resources": {"gpu_1x": 0}}, r"run.resources.gpu_1x must be a number > 0, not 0"),
        ({"resources": {"gpu_1x": "one"}}, r"run.resources.gpu_1x must be a number"),
        (
            {"resources_for": {"lroa": {"x": 1}}},
            r"model or adaptation in run.resources_for 'lroa'; did you mean 'lora'",
        ),
    ],
)
def test_bad_run_resources_are_one_line_errors(run, match):
    with pytest.raises(PrivauditorError, match=match) as error:
        parse_sweep(BASE | {"run": run})
    assert "\n" not in str(error.value)


def test_only_runs_one_block_of_a_sweep_and_refuses_a_filter_that_matches_nothing():
    """``privauditor run SWEEP --only KEY=VALUE``: the release's one real-base block (7 techniques x 2
    seeds), the same sweep to its results folder (the matrix is not part of its writer)."""
    from privauditor.orchestrator.sweepfile.select import only

    sweep = load_sweep("release")
    block = only(sweep, ["model=smollm2-135m", "dataset=climate"])
    assert {(c.model, c.dataset) for c in block.cells} == {("smollm2-135m", "climate")}
    assert len(block.cells) == 14 and {c.seed for c in block.cells} == {1, 2}
    assert block.writer() == sweep.writer() and block.hypothesis == sweep.hypothesis
    assert len(only(sweep, ["adaptation=none,full", "seed=2"]).cells) == 2 * 7 * 3
    for filters, message in ((["colour=red"], "unknown key 'colour'"), (["model"], "expected KEY=VALUE"),
                             (["dataset=medical"], r"matches no cell of sweep 'release' \(dataset: climate, finance, sql\)")):  # fmt: skip
        with pytest.raises(PrivauditorError, match=message):
            only(sweep, filters)
