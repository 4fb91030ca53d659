"""The bad-input catalogue: each bad input is one line on stderr naming the problem, exit 2, results untouched.

Every case runs the real command line against a results folder that already holds a finished cell;
the folder's bytes must be the same afterwards. A bad record is named by its line or id, never quoted
(the canary planted in every bad file must not appear in the message). Three tables: ``CASES`` (cells,
audits, datasets, adapters), ``YAML_CASES`` (the structure of a sweep file and of ``--set`` values,
including what PyYAML reads silently: booleans, dates and numbers for names, duplicate keys, merge keys,
several documents) and ``COMMANDS`` (every option of ``plan``, ``report``, ``publish`` and ``board``,
with the price table, cluster and hypothesis files they read; a board store made from the finished cell
must be untouched too). ``ARGPARSE_CASES`` are the usage errors argparse itself reports (a usage line,
then the error): exit 2 as well.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from privauditor.orchestrator.cli import main

CANARY = "CANARY-7f3a-private-record"
CELL = ["cell", "--model", "tiny-gpt2", "--adaptation", "none", "--dataset", "finance"]


def write(path, data: bytes | str):
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def sweep_file(tmp, **changes):
    data = {"name": "bad", "matrix": {"model": ["tiny-gpt2"], "adaptation": ["none"], "dataset": ["finance"]}}
    return write(tmp / "sweep.yaml", yaml.safe_dump(data | changes))


MATRIX = "matrix: {model: [tiny-gpt2], adaptation: [none], dataset: [finance]}\n"
TWO = MATRIX.replace("[none]", "[none, lora]")  # two techniques, for a hypothesis block
HYPOTHESIS = "hypothesis: {classes: {none: base, lora: adapted}, order: [base, adapted]"
NODE = "available_node_types:\n  w: {max_workers: 1, resources: {CPU: 8, GPU: 1}, node_config: {InstanceType: g5.2xlarge}}\n"


def validate(text: bytes | str, *extra):
    """``validate`` of a sweep file holding ``text`` (plus ``extra`` arguments)."""
    return lambda t, o, a: ["validate", write(t / "s.yaml", text), *extra]


def plan(*extra):
    return lambda t, r, s: ["plan", sweep_file(t), *[e(t) if callable(e) else e for e in extra]]


def prices(old, new):
    """The shipped price table with ``old`` replaced by ``new`` (once)."""

    def written(tmp):
        from privauditor.orchestrator.plan.inputs import PRICES

        text = PRICES.read_text()
        assert old in text, old  # the case still edits what the shipped table says
        return write(tmp / "prices.yaml", text.replace(old, new, 1))

    return written


def cluster(text):
    return lambda tmp: write(tmp / "cluster.yaml", text)


def claim(text):
    """``board build --hypothesis`` of a sweep file holding ``text``."""
    return lambda t, r, s: [
        "board",
        "build",
        s,
        "--out",
        str(t / "site"),
        "--hypothesis",
        write(t / "claim.yaml", text),
    ]


def folder(path):
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def broken_sweep(tmp, results):
    """A copy of the results folder whose sweep.yaml (the run's record of its sweep) was hand-edited badly."""
    import shutil

    copy = Path(shutil.copytree(results, tmp / "copy"))
    (copy / "sweep.yaml").write_text("name: x\nhypothesis: [loss\n")
    return str(copy)


def board_format(tmp, marker):
    write(Path(folder(tmp / "other-store")) / "board.json", marker)
    return str(tmp / "other-store")


def released(tmp, store):
    """A copy of the store with release ``v1`` in it."""
    import shutil

    copy = tmp / "released"
    shutil.copytree(store, copy)
    assert main(["board", "release", str(copy), "v1"]) == 0
    return str(copy)


def records(tmp, n, name="few.jsonl", word="record"):
    return write(tmp / name, "".join(json.dumps({"text": f"{word} {i} {CANARY}"}) + "\n" for i in range(n)))


@pytest.fixture(scope="module")
def gpt2_adapter(tmp_path_factory):
    """A LoRA adapter saved for tiny-gpt2, as a cell saves it."""
    from privauditor.tasks.adaptations import build_adaptation
    from privauditor.tasks.models import load_model
    from privauditor.tasks.training.loop import apply_seeded

    loaded = load_model("tiny-gpt2")
    technique = build_adaptation("lora")
    path = tmp_path_factory.mktemp("adapter") / "adapter"
    technique.save(apply_seeded(technique, loaded.model, loaded.family, seed=0), path)
    return path


def corrupted(tmp, adapter):
    import shutil

    copy = tmp / "corrupted"
    shutil.copytree(adapter, copy)
    weights = next(copy.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100] + b"\x00garbage")
    return str(copy)


def audit(tmp, model, adapter):
    return ["audit", "--model", model, "--adapter", str(adapter), "--members", records(tmp, 12, "m.jsonl"),
            "--nonmembers", records(tmp, 12, "n.jsonl", "other")]  # fmt: skip


# (case, argv builder (tmp, out, adapter) -> argv, fragment of the one-line error)
CASES = [
    ("malformed YAML", lambda t, o, a: ["validate", write(t / "s.yaml", "matrix: [tiny-gpt2\n")], "not valid YAML"),
    ("key given twice", lambda t, o, a: ["validate", write(t / "s.yaml", "seeds: [0]\nseeds: [1]\n")],
     "line 2: not valid YAML (key 'seeds' is given twice)"),
    ("unknown key", lambda t, o, a: ["validate", sweep_file(t, epochz=3)], "unknown sweep key 'epochz'"),
    ("unknown model", lambda t, o, a: CELL[:2] + ["tiny-lama"] + CELL[3:] + ["--out", o], "did you mean 'tiny-llama'"),
    ("unknown adaptation", lambda t, o, a: CELL[:4] + ["lorra"] + CELL[5:] + ["--out", o], "did you mean 'lora'"),
    ("unknown attack", lambda t, o, a: CELL + ["--out", o, "--set", "attacks=[loss,min_kk]"], "did you mean 'min_k'"),
    ("attacks without brackets", lambda t, o, a: CELL + ["--out", o, "--set", "attacks=loss,zlib"], "write attacks=[loss,zlib]"),
    ("unknown dataset", lambda t, o, a: CELL[:6] + ["financ", "--out", o], "did you mean 'finance'"),
    ("unsupported pair", lambda t, o, a: CELL[:4] + ["llama_adapter"] + CELL[5:] + ["--out", o], "supports only the llama"),
    ("negative size", lambda t, o, a: CELL + ["--out", o, "--set", "split.members=-5"], "split.members"),
    ("zero size", lambda t, o, a: CELL + ["--out", o, "--set", "train.batch_size=0"], "train.batch_size"),
    ("more members than records", lambda t, o, a: CELL[:6] + [records(t, 10), "--out", o], "has 10"),
    ("empty dataset file", lambda t, o, a: CELL[:6] + [write(t / "e.jsonl", b""), "--out", o], "is empty"),
    ("non-UTF-8 file", lambda t, o, a: CELL[:6] + [write(t / "b.txt", b"\xff\xfe" + CANARY.encode() + b"\n"), "--out", o], "not valid UTF-8 (line 1)"),
    ("records missing a field", lambda t, o, a: CELL[:6] + [write(t / "p.jsonl", json.dumps({"prompt": CANARY}) + "\n"), "--out", o], "missing field"),
    ("texts longer than the context", lambda t, o, a: CELL + ["--out", o, "--set", "train.max_length=5000"], "context"),
    ("audit longer than the context", lambda t, o, a: audit(t, "tiny-gpt2", a) + ["--out", str(t / "audits"), "--set", "train.max_length=5000"], "exceeds tiny-gpt2's context"),
    ("missing adapter directory", lambda t, o, a: audit(t, "tiny-gpt2", t / "nowhere") + ["--out", str(t / "audits")], "nowhere"),
    ("adapter for another base", lambda t, o, a: audit(t, "tiny-llama", a) + ["--out", str(t / "audits")], "base"),
    ("corrupted safetensors", lambda t, o, a: audit(t, "tiny-gpt2", corrupted(t, a)) + ["--out", str(t / "audits")], "safetensors"),
    ("export-split of no such cell", lambda t, o, a: ["export-split", o, "tiny-gpt2__nope", "--to", str(t / "x")],
     "no finished cell tiny-gpt2__nope in"),
    ("audit into a folder of cells", lambda t, o, a: audit(t, "tiny-gpt2", a) + ["--out", o],
     "holds cells run one at a time (privauditor cell); audits go to a folder of their own"),
    ("audit file with a malformed line", lambda t, o, a: ["audit", "--model", "tiny-gpt2", "--members",
     write(t / "m.jsonl", Path(records(t, 12, "ok.jsonl")).read_text() + "{" + CANARY + "\n"), "--nonmembers",
     records(t, 12, "n.jsonl", "other"), "--out", str(t / "audits")], "dropped 1 not valid JSON (line 13)"),
    ("members a folder", lambda t, o, a: ["audit", "--model", "tiny-gpt2", "--members", str(t), "--nonmembers",
                                          records(t, 12, "n.jsonl", "other"), "--out", o], "is a folder: name one"),
    ("output dir is a file", lambda t, o, a: CELL + ["--out", write(t / "file.out", "x")], "file.out"),
    ("incompatible results dir", lambda t, o, a: CELL + ["--out", str(old_results(t))], "results format 0, this privauditor writes"),
    ("malformed --set", lambda t, o, a: CELL + ["--out", o, "--set", "split.members"], "expects key=value"),
    ("seeds not integers", lambda t, o, a: ["validate", sweep_file(t, seeds=["one"])], "seeds"),
]  # fmt: skip


# (case, argv builder (tmp, out, adapter) -> argv, fragment of the one-line error)
YAML_CASES = [
    ("top level a list", validate("- " + MATRIX), "a sweep file is a mapping of keys, not list"),
    ("top level a scalar", validate("just a name\n"), "a sweep file is a mapping of keys, not str"),
    ("empty file", validate(""), "a sweep file is a mapping of keys, not NoneType"),
    ("matrix a string", validate("matrix: tiny-gpt2\n"), "matrix must map model, adaptation and dataset to lists"),
    ("matrix.model a mapping", validate(MATRIX.replace("[tiny-gpt2]", "{tiny-gpt2: 1}")), "matrix.model must be a non-empty list"),
    ("matrix.model a number", validate(MATRIX.replace("[tiny-gpt2]", "[123]")), "matrix.model[0] must be a name, not 123"),
    ("matrix.model a list in the list", validate(MATRIX.replace("[tiny-gpt2]", "[[tiny-gpt2]]")), "matrix.model[0] must be a name"),
    ("matrix.model an empty entry", validate(MATRIX.replace("[tiny-gpt2]", "[tiny-gpt2, null]")), "matrix.model[1] must be a name, not None"),
    ("matrix.model an entry twice", validate(MATRIX.replace("[tiny-gpt2]", "[tiny-gpt2, tiny-gpt2]")), "matrix.model gives 'tiny-gpt2' twice"),
    ("matrix.dataset read as a boolean", validate(MATRIX.replace("[finance]", "[no]")),
     "matrix.dataset[0] must be a name, not False (YAML reads unquoted yes, no, on, off"),
    ("matrix.dataset read as a date", validate(MATRIX.replace("[finance]", "[2026-01-01]")),
     "matrix.dataset[0] must be a name, not datetime.date(2026, 1, 1) (YAML reads"),
    ("nested key given twice", validate(MATRIX + "train:\n  epochs: 1\n  epochs: 2\n"), "line 4: not valid YAML (key 'epochs' is given twice)"),
    ("train a list", validate(MATRIX + "train: [1, 2]\n"), "cell.train must be a mapping, not [1, 2]"),
    ("split a number", validate(MATRIX + "split: 64\n"), "cell.split must be a mapping, not 64"),
    ("attacks empty", validate(MATRIX + "attacks:\n"), "cell.attacks must be a list, not null"),
    ("attacks an empty list", validate(MATRIX + "attacks: []\n"), "attacks must name at least one attack"),
    ("attack given twice", validate(MATRIX + "attacks: [loss, zlib, loss]\n"), "attacks names 'loss' twice"),
    ("attack read as a boolean", validate(MATRIX + "attacks: [loss, no]\n"), "cell.attacks[1] must be str, not False (YAML reads"),
    ("attack_params a list", validate(MATRIX + "attack_params: [neighbourhood]\n"), "cell.attack_params must be a mapping"),
    ("attack_params of an unknown attack", validate(MATRIX + "attack_params: {neighbourhod: {k: 3}}\n"),
     "attack_params: unknown attack 'neighbourhod'; did you mean 'neighbourhood'"),
    ("adaptation_params of an unknown technique", validate(MATRIX + "adaptation_params: {lorra: {r: 4}}\n"),
     "adaptation_params: unknown adaptation 'lorra'; did you mean 'lora'"),
    ("hypothesis a list", validate(TWO + "hypothesis: [none, lora]\n"), "hypothesis must be a mapping, not ['none', 'lora']"),
    ("hypothesis.attack unknown", validate(TWO + HYPOTHESIS + ", attack: los}\n"), "hypothesis.attack: unknown attack 'los'; did you mean 'loss'"),
    ("hypothesis.attack not run", validate(TWO + "attacks: [loss]\n" + HYPOTHESIS + ", attack: zlib}\n"),
     "hypothesis.attack 'zlib' is not an attack the sweep runs (loss)"),
    ("hypothesis class read as a boolean", validate(TWO + "hypothesis: {classes: {none: no, lora: yes}, order: [no, yes]}\n"),
     "hypothesis.classes.none must be str, not False"),
    ("run a string", validate(MATRIX + "run: fast\n"), "run must be a mapping, not 'fast'"),
    ("run.gpus_per_trial read as a boolean", validate(MATRIX + "run: {gpus_per_trial: yes}\n"),
     "run.gpus_per_trial must be a number or auto or null, not True"),
    ("run.cpus_per_trial zero", validate(MATRIX + "run: {cpus_per_trial: 0}\n"), "run.cpus_per_trial must be a number > 0 or null"),
    ("run.max_concurrent_trials zero", validate(MATRIX + "run: {max_concurrent_trials: 0}\n"), "run.max_concurrent_trials must be at least 1"),
    ("tracking.wandb read as a boolean", validate(MATRIX + "tracking: {wandb: off}\n"), "tracking.wandb must be a mapping, not False"),
    ("wandb.mode read as a boolean", validate(MATRIX + "tracking: {wandb: {mode: off}}\n"), "tracking.wandb.mode must be str, not False"),
    ("wandb.project W&B refuses", validate(MATRIX + "tracking: {wandb: {project: team/bench}}\n"),
     "tracking.wandb.project 'team/bench' is not a W&B project name (it holds '/')"),
    ("name read as a boolean", validate("name: no\n" + MATRIX), "name must be letters, digits, '.', '_' and '-' (at most 64, the results folder's name), not False"),
    ("name a date", validate("name: 2026-01-01\n" + MATRIX), "not datetime.date(2026, 1, 1)"),
    ("name a path", validate("name: ../elsewhere\n" + MATRIX), "not '../elsewhere'"),
    ("name bytes", validate("name: !!binary aGVsbG8=\n" + MATRIX), "not b'hello'"),
    ("negative seed", validate(MATRIX + "seeds: [-1]\n"), "seeds must be integers >= 0, not [-1]"),
    ("seed given twice", validate(MATRIX + "seeds: [0, 1, 0]\n"), "seeds gives 0 twice"),
    ("exclude a mapping", validate(MATRIX + "exclude: {model: tiny-gpt2}\n"), "exclude must be a list of mappings"),
    ("exclude of seed true", validate(MATRIX + "exclude: [{seed: true}]\n"),
     "exclude[0].seed must be a seed (an integer), not True (YAML reads unquoted yes"),
    ("exclude of a dataset named no", validate(MATRIX + "exclude: [{dataset: no}]\n"),
     "exclude[0].dataset must be a name, not False (YAML reads unquoted yes"),
    ("exclude of a model the matrix lacks", validate(MATRIX + "exclude: [{model: tiny-gtp2}]\n"),
     "exclude[0].model names 'tiny-gtp2', which matrix.model lacks; did you mean 'tiny-gpt2'"),
    ("overrides of a seed not run", validate(MATRIX + "overrides: [{seed: 3, train: {epochs: 1}}]\n"), "overrides[0].seed names 3, which seeds lack"),
    ("alias of a list for a mapping", validate(MATRIX + "attacks: &a [loss]\ntrain: *a\n"), "cell.train must be a mapping, not ['loss']"),
    ("merge key into the wrong block", validate(MATRIX + "train: &t {epochs: 1}\nscore: {<<: *t}\n"), "cell.score: unknown key 'epochs'"),
    ("merge key of a scalar", validate(MATRIX + "train:\n  <<: 5\n"), "line 3: not valid YAML (expected a mapping or list of mappings for merging"),
    ("two documents", validate(MATRIX + "---\n" + MATRIX), "line 2: not valid YAML (but found another document)"),
    ("a tab", validate("matrix:\n\tmodel: [tiny-gpt2]\n"), "line 2: not valid YAML (found character '\\t' that cannot start any token)"),
    ("a Python tag", validate(MATRIX + "name: !!python/name:os.system\n"), "could not determine a constructor for the tag"),
    ("not UTF-8", validate(b"name: \xff\xfe\n"), "s.yaml: not valid UTF-8"),
    ("--set key with an empty part", validate(MATRIX, "--set", "train..epochs=2"), "--set expects key=value with a dotted key"),
    ("--set name read as a boolean", validate(MATRIX, "--set", "model=no"), "cell.model must be str, not False (YAML reads"),
    ("--set key given twice", validate(MATRIX, "--set", "train={epochs: 1, epochs: 2}"), "(key 'epochs' is given twice)"),
    ("--set two documents", validate(MATRIX, "--set", "train.epochs=1\n---\n2"), "(but found another document)"),
    ("--set into a number", validate(MATRIX, "--set", "train.epochs.x=5"), "cell.train.epochs must be int or null, not {'x': 5}"),
]  # fmt: skip


# (case, argv builder (tmp, results, store) -> argv, fragment of the one-line error)
def tampered(tmp, results) -> str:
    """A copy of ``results`` whose cell's ``loss`` AUC reads 1.7."""
    copy = Path(shutil.copytree(results, tmp / "tampered"))
    (metrics,) = copy.glob("cells/*/metrics.json")
    data = json.loads(metrics.read_text())
    metrics.write_text(json.dumps(data | {"loss": data["loss"] | {"auc": 1.7}}))
    return str(copy)


def foreign(tmp, results) -> str:
    """A copy of ``results`` without its marker: a ``cells/`` folder privauditor did not write."""
    copy = Path(shutil.copytree(results, tmp / "foreign"))
    (copy / "privauditor.json").unlink()
    return str(copy)


COMMANDS = [
    ("plan unknown shipped sweep", lambda t, r, s: ["plan", "smok"], "did you mean 'smoke'"),
    ("plan --cluster missing", plan("--cluster", "aw"), "cluster file 'aw' does not exist"),
    ("plan --cluster a list", plan("--cluster", cluster("- w\n")), "cluster.yaml must hold a YAML mapping of keys, not list"),
    ("plan --cluster key given twice", plan("--cluster", cluster(NODE + "head_node_type: w\nhead_node_type: x\n")),
     "line 4: not valid YAML (key 'head_node_type' is given twice)"),
    ("plan --cluster node types a list", plan("--cluster", cluster("available_node_types: [w]\n")),
     "available_node_types must map node type names to mappings"),
    ("plan --cluster resources a string", plan("--cluster", cluster(NODE.replace("{CPU: 8, GPU: 1}", "many"))),
     "available_node_types.w.resources must be a mapping, not 'many'"),
    ("plan --cluster GPUs a word", plan("--cluster", cluster(NODE.replace("GPU: 1", "GPU: two"))),
     "available_node_types.w.resources.GPU must be a whole number >= 0, not 'two'"),
    ("plan --cluster negative max_workers", plan("--cluster", cluster(NODE.replace("max_workers: 1", "max_workers: -3"))),
     "available_node_types.w.max_workers must be a whole number >= 0, not -3"),
    ("plan --cluster instance read as a boolean", plan("--cluster", cluster(NODE.replace("g5.2xlarge", "yes"))),
     "available_node_types.w.node_config.InstanceType must be an instance name, not True"),
    ("plan --cluster instance not priced", plan("--cluster", cluster(NODE.replace("g5.2xlarge", "g5.2xlarg"))),
     "node type w's instance g5.2xlarg is not in the price table"),
    ("plan --prices missing", plan("--prices", lambda t: str(t / "nope.yaml")), "nope.yaml' does not exist"),
    ("plan --prices empty", plan("--prices", lambda t: write(t / "prices.yaml", "")), "must hold a YAML mapping of keys, not NoneType"),
    ("plan --prices without a key", plan("--prices", prices("as_of: 2024-06\n", "")), "it has no 'as_of'"),
    ("plan --prices unknown key", plan("--prices", prices("as_of:", "currency: EUR\nas_of:")), "unknown key 'currency'"),
    ("plan --prices unit misspelt", plan("--prices", prices("  forward: 0.0", "  forwrd: 0.0")),
     "cpu_seconds: unknown unit 'forwrd'; did you mean 'forward'"),
    ("plan --prices key given twice", plan("--prices", prices("{usd_per_hour: 0.384,", "{usd_per_hour: 0.384, usd_per_hour: 0.5,")),
     "not valid YAML (key 'usd_per_hour' is given twice)"),
    ("plan --prices instances a list", plan("--prices", prices("instances:\n", "instances: [m6i.2xlarge]\nx:\n")), "instances must be a mapping"),
    ("plan --prices negative price", plan("--prices", prices("usd_per_hour: 0.384", "usd_per_hour: -0.384")),
     "instances.m6i.2xlarge.usd_per_hour must be >= 0, not -0.384"),
    ("plan --prices a float GPU count", plan("--prices", prices("gpus: 1, device: A10G", "gpus: 1.5, device: A10G")),
     "instances.g5.2xlarge.gpus must be int, not 1.5"),
    ("plan --prices device not listed", plan("--prices", prices("device: A10G,", "device: A10,")),
     "instances.g5.2xlarge.device 'A10' is not under devices"),
    ("plan --prices zero peak FLOP/s", plan("--prices", prices("peak_flops: 70.0e12", "peak_flops: 0")), "devices.A10G.peak_flops must be > 0, not 0"),
    ("plan --prices utilisation over 1", plan("--prices", prices("{forward: 0.3", "{forward: 3")), "utilisation.forward must be a share in (0, 1], not 3"),
    ("plan --prices a rate in words", plan("--prices", prices("gradient: 0.0063", "gradient: fast")), "cpu_seconds.gradient must be a number, not 'fast'"),
    ("plan --budget-usd negative", plan("--budget-usd", "-5"), "--budget-usd must be a number of dollars > 0, not '-5'"),
    ("plan --budget-usd zero", plan("--budget-usd", "0"), "--budget-usd must be a number of dollars > 0, not '0'"),
    ("plan --budget-usd not a number", plan("--budget-usd", "ten"), "--budget-usd must be a number of dollars > 0, not 'ten'"),
    ("plan --budget-usd nan", plan("--budget-usd", "nan"), "--budget-usd must be a number of dollars > 0, not 'nan'"),
    ("plan --calibrate missing folder", plan("--calibrate", lambda t: str(t / "nowhere")), "nowhere is not a results folder (no such folder)"),
    ("plan --calibrate non-results folder", plan("--calibrate", str), "holds no finished cells"),
    ("plan --calibrate old results format", plan("--calibrate", lambda t: str(old_results(t))), "results format 0, this privauditor reads"),
    ("plan --calibrate a file", plan("--calibrate", lambda t: write(t / "file", "x")), "file is not a results folder (a file)"),
    ("plan --compare missing folder", plan("--compare", lambda t: str(t / "nowhere")), "is not a results folder"),
    ("plan --params without a family", plan("--params", "x/y=7B"), "give the family too"),
    ("plan --params zero size", plan("--params", "x/y=0:llama"), "'0' is not a size"),
    ("plan --params unknown family", plan("--params", "x/y=7B:lama"), "did you mean 'llama'"),
    ("plan --params of a registered model", plan("--params", "tiny-gpt2=7B:llama"), "a registered model already has its architecture"),
    ("plan --params given twice", plan("--params", "x/y=7B:llama", "--params", "x/y=8B:llama"), "--params x/y is given twice"),
    ("plan --params config not JSON", plan("--params", lambda t: "x/y=" + write(t / "c.json", "{nope")), "is not JSON"),
    ("plan --params config a list", plan("--params", lambda t: "x/y=" + write(t / "c.json", "[1]")), "must hold a JSON object"),
    ("plan --set malformed", plan("--set", "split.members"), "expects key=value"),
    ("report missing folder", lambda t, r, s: ["report", str(t / "nowhere")], "nowhere is not a results folder"),
    ("report of a file", lambda t, r, s: ["report", write(t / "file", "x")], "file is not a results folder"),
    ("report non-results folder", lambda t, r, s: ["report", str(t)], "is not a results folder (no cells/ inside)"),
    ("report old results format", lambda t, r, s: ["report", str(old_results(t))], "results format 0, this privauditor reads"),
    ("report URI pyarrow cannot open", lambda t, r, s: ["report", "nope://results"], "cannot open results nope://results"),
    ("report a tampered AUC", lambda t, r, s: ["report", tampered(t, r)], "loss auc = 1.7 is outside [0, 1]"),
    ("report a folder privauditor did not write", lambda t, r, s: ["report", foreign(t, r)],
     "has no privauditor.json: privauditor did not write this folder"),
    ("report --attack unknown", lambda t, r, s: ["report", r, "--attack", "los"], "--attack: unknown attack 'los'; did you mean 'loss'"),
    ("report --attack not run", lambda t, r, s: ["report", r, "--attack", "min_k"], "ran it (they ran blind, loss, zlib)"),
    ("report --against non-results folder", lambda t, r, s: ["report", r, "--against", str(t)], "is not a results folder"),
    ("report --against a file", lambda t, r, s: ["report", r, "--against", write(t / "file", "x")], "is not a results folder"),
    ("report --against itself", lambda t, r, s: ["report", r, "--against", r], "is the results folder itself"),
    ("report with a broken sweep.yaml", lambda t, r, s: ["report", broken_sweep(t, r)], "copy/sweep.yaml line 3: not valid YAML"),
    ("report --against old results format", lambda t, r, s: ["report", r, "--against", str(old_results(t))], "results format 0, this privauditor reads"),
    ("publish missing folder", lambda t, r, s: ["publish", str(t / "nowhere")], "nowhere is not a results folder"),
    ("publish non-results folder", lambda t, r, s: ["publish", str(t)], "is not a results folder (no cells/ inside)"),
    ("publish old results format", lambda t, r, s: ["publish", str(old_results(t)), "--to", str(t / "p")], "results format 0, this privauditor reads"),
    ("publish --to the results folder", lambda t, r, s: ["publish", r, "--to", r], "would replace the results folder itself"),
    ("publish --to above the results folder", lambda t, r, s: ["publish", r, "--to", str(Path(r).parent)], "would replace the results folder itself"),
    ("publish --to inside cells/", lambda t, r, s: ["publish", r, "--to", str(Path(r) / "cells" / "public")], "inside the results folder's cells/"),
    ("publish --to an existing folder", lambda t, r, s: ["publish", r, "--to", folder(t / "mine")], "exists and is not an earlier publish folder"),
    ("publish --to a file", lambda t, r, s: ["publish", r, "--to", write(t / "file", "x")], "exists and is not an earlier publish folder"),
    ("publish --wandb-project W&B refuses", lambda t, r, s: ["publish", r, "--to", str(t / "p"), "--wandb-project", "team/bench"],
     "--wandb-project 'team/bench' is not a W&B project name (it holds '/')"),
    ("publish --wandb-project empty", lambda t, r, s: ["publish", r, "--to", str(t / "p"), "--wandb-project", ""], "(1 to 128 characters)"),
    ("board add missing folder", lambda t, r, s: ["board", "add", str(t / "nowhere"), str(t / "s")], "nowhere is not a results folder"),
    ("board add non-results folder", lambda t, r, s: ["board", "add", str(t), str(t / "s")], "is not a results folder"),
    ("board add old results format", lambda t, r, s: ["board", "add", str(old_results(t)), str(t / "s")], "results format 0, this privauditor reads"),
    ("board add URI pyarrow cannot open", lambda t, r, s: ["board", "add", "nope://results", str(t / "s")], "cannot open results nope://results"),
    ("board add into the results folder", lambda t, r, s: ["board", "add", r, r], "is a results folder: give a new or empty folder"),
    ("board add into a file", lambda t, r, s: ["board", "add", r, write(t / "file", "x")], "is a file, not a folder"),
    ("board add --supersedes unknown", lambda t, r, s: ["board", "add", r, s, "--supersedes", "deadbeef"], "--supersedes deadbeef names no record key or run id"),
    ("board check missing store", lambda t, r, s: ["board", "check", str(t / "nowhere")], "is not a board store (no board.json)"),
    ("board check of a results folder", lambda t, r, s: ["board", "check", r], "is not a board store (no board.json)"),
    ("board check another board format", lambda t, r, s: ["board", "check", board_format(t, '{"board_format": 7}')], "holds board format 7"),
    ("board check unreadable board.json", lambda t, r, s: ["board", "check", board_format(t, "[1]")], "holds board format 'unreadable'"),
    ("board build empty store", lambda t, r, s: ["board", "build", board_format(t, '{"board_format": 1}'), "--out", str(t / "site")], "holds no records"),
    ("board build --out an existing folder", lambda t, r, s: ["board", "build", s, "--out", folder(t / "mine")], "exists and is not an earlier board site"),
    ("board build --out the results folder", lambda t, r, s: ["board", "build", s, "--out", r], "exists and is not an earlier board site"),
    ("board build --out inside records/", lambda t, r, s: ["board", "build", s, "--out", str(Path(s) / "records" / "site")], "inside the store's records/"),
    ("board build --hypothesis unknown sweep", lambda t, r, s: ["board", "build", s, "--out", str(t / "site"), "--hypothesis", "defalt"],
     "did you mean 'default'"),
    ("board build --hypothesis without a block", lambda t, r, s: ["board", "build", s, "--out", str(t / "site"), "--hypothesis", "smoke"],
     "has no hypothesis block"),
    ("board build --hypothesis malformed YAML", claim("hypothesis: [a\n"), "claim.yaml line 2: not valid YAML"),
    ("board build --hypothesis key given twice", claim(HYPOTHESIS + ", order: [adapted, base]}\n"), "(key 'order' is given twice)"),
    ("board build --hypothesis a list", claim("hypothesis: [none, lora]\n"), "hypothesis must be a mapping"),
    ("board build --hypothesis unknown attack", claim(HYPOTHESIS + ", attack: los}\n"), "hypothesis.attack: unknown attack 'los'; did you mean 'loss'"),
    ("board build --hypothesis class read as a boolean", claim("hypothesis: {classes: {none: no, lora: yes}, order: [no, yes]}\n"),
     "hypothesis.classes.none must be str, not False"),
    ("board release bad name", lambda t, r, s: ["board", "release", s, "bad name!"], "release name 'bad name!'"),
    ("board release a path for a name", lambda t, r, s: ["board", "release", s, "../v1"], "release name '../v1'"),
    ("board release empty store", lambda t, r, s: ["board", "release", board_format(t, '{"board_format": 1}'), "v1"], "holds no records to release"),
    ("board release a name used twice", lambda t, r, s: ["board", "release", released(t, s), "v1"], "release v1 is already in"),
    ("board release --wandb-project W&B refuses", lambda t, r, s: ["board", "release", s, "v9", "--wandb-project", "team/bench"],
     "--wandb-project 'team/bench' is not a W&B project name"),
    ("board release --wandb-dir a file", lambda t, r, s: ["board", "release", s, "v9", "--wandb-project", "p", "--wandb-dir", write(t / "file", "x")],
     "is a file, not a folder"),
]  # fmt: skip

# (case, argv, fragment of argparse's last line): argparse's own usage errors, a usage line and the error
ARGPARSE_CASES = [
    (
        "run --max-concurrent 0",
        ["run", "smoke", "--max-concurrent", "0"],
        "argument --max-concurrent: 0 cells at once",
    ),
    ("board build without --out", ["board", "build", "store"], "the following arguments are required: --out"),
    ("board unknown action", ["board", "nuke", "store"], "invalid choice: 'nuke'"),
    ("publish without a folder", ["publish"], "the following arguments are required: dir"),
    (
        "plan --cells given a value",
        ["plan", "smoke", "--cells=yes"],
        "argument --cells: ignored explicit argument 'yes'",
    ),
]


def old_results(tmp):
    folder = tmp / "old"
    (folder / "cells").mkdir(parents=True)
    write(folder / "privauditor.json", json.dumps({"results_format": 0}))
    return folder


def fingerprint(folder):
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def built():
    """What the cases legitimately build before their error (the bases they load, the neighbourhood
    attack's masked LM), built first: a pre-training progress bar on stderr is not part of an error."""
    from privauditor.tasks.models import checkpoint_path, masked_lm_identity

    for model in ("tiny-gpt2", "tiny-llama"):
        checkpoint_path(model)
    masked_lm_identity(build=True)


def test_a_wrong_dataset_fails_before_anything_is_built(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(tmp_path / "cache"))
    assert main(CELL[:6] + ["financ", "--out", str(tmp_path / "out")]) == 2
    assert "did you mean 'finance'" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.safetensors"))


@pytest.fixture(scope="module")
def finished_once(tmp_path_factory, built):
    out = tmp_path_factory.mktemp("finished") / "results"
    argv = CELL + ["--out", str(out), "--set", "split.members=8", "--set", "split.nonmembers=8",
                   "--set", "split.validation=4", "--set", "attacks=[loss,zlib,blind]"]  # fmt: skip
    assert main(argv) == 0
    return out


@pytest.fixture(scope="module")
def store(finished_once, tmp_path_factory):
    """A board store holding the finished cell's records (it ran both controls: ``none`` and ``blind``)."""
    location = tmp_path_factory.mktemp("board") / "store"
    assert main(["board", "add", str(finished_once), str(location)]) == 0
    return location


@pytest.mark.parametrize("case, argv, fragment", CASES + YAML_CASES, ids=[c[0] for c in CASES + YAML_CASES])
def test_bad_input_is_one_line_exit_2_and_results_untouched(case, argv, fragment, tmp_path, finished_once,
                                                             gpt2_adapter, capsys):  # fmt: skip
    before = fingerprint(finished_once)
    capsys.readouterr()
    assert main(argv(tmp_path, str(finished_once), gpt2_adapter)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("privauditor: error: "), err
    assert fragment in err and CANARY not in err and "Traceback" not in err, err
    assert fingerprint(finished_once) == before


@pytest.mark.parametrize("case, argv, fragment", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_bad_option_is_one_line_exit_2_and_results_and_store_untouched(case, argv, fragment, tmp_path, finished_once,
                                                                         store, capsys):  # fmt: skip
    before = fingerprint(finished_once), fingerprint(store)
    args = argv(tmp_path, str(finished_once), str(store))  # may set up a file or a store copy first
    old = tmp_path / "old"  # a folder of another results format, refused and never written
    before_old = fingerprint(old) if old.exists() else None
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("privauditor: error: "), err
    assert fragment in err and "Traceback" not in err, err
    assert (fingerprint(finished_once), fingerprint(store)) == before
    assert (fingerprint(old) if old.exists() else None) == before_old


@pytest.mark.parametrize("case, argv, fragment", ARGPARSE_CASES, ids=[c[0] for c in ARGPARSE_CASES])
def test_a_usage_error_argparse_reports_exits_2_naming_the_argument(case, argv, fragment, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and err[0].startswith("usage: privauditor"), err
    assert err[-1].startswith("privauditor ") and ": error: " in err[-1] and fragment in err[-1], err


def test_a_bad_params_list_registers_nothing(capsys):
    """``--params`` registers ids for the command's run only: one bad entry leaves none of them behind."""
    from privauditor.tasks.models import MODELS

    assert main(["plan", "smoke", "--params", "org/kept=7B:llama", "--params", "org/bad=7B"]) == 2
    assert "give the family too" in capsys.readouterr().err
    assert "org/kept" not in MODELS


def test_what_yaml_means_as_written_is_accepted(tmp_path):
    """The other side of the YAML cases: a leading ``---`` is one document, an exponent without a dot is a
    number, and a merge key's settings are overridden by the mapping's own keys (not a key given twice)."""
    from privauditor.orchestrator.sweepfile.sweep import load_sweep

    path = write(tmp_path / "ok.yaml", "---\n" + MATRIX + "train: {<<: {epochs: 1, lr: 1e-3}, epochs: 2}\n")
    assert main(["validate", path]) == 0
    train = load_sweep(path).cells[0].train
    assert (train.epochs, train.lr) == (2, 1e-3)


def test_what_privauditor_writes_as_yaml_reads_back_as_it_was():
    """A results folder's ``sweep.yaml`` is written by ``dump_yaml`` and read by ``load_yaml``, which takes
    ``3074e23`` for a number: a string of that form (a commit) is quoted, so it reads back a string."""
    from privauditor.orchestrator.sweepfile.sweep import load_sweep
    from privauditor.tasks.infra.strict import dump_yaml, load_yaml

    data = {"commits": ["3074e23", "1cd7a79", "1e5"], "lr": 3e-4, "n": 12, "name": "x", "flag": True}
    assert load_yaml(dump_yaml(data)) == data
    assert load_yaml("a: 3074e23")["a"] == 3.074e26  # written plain, it is a number
    from privauditor.orchestrator.sweepfile.hypothesis import parse

    release = load_sweep("release")  # its formed_on commits hold 3074e23
    assert parse(load_yaml(dump_yaml(release.resolved([])))["hypothesis"]) == release.hypothesis


def test_a_reader_that_leaves_early_gets_no_traceback():
    """``privauditor ls attacks | head -1``: stdout's reader is gone before anything is written."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # every write to the pipe now fails: EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "privauditor.orchestrator.cli", "ls", "attacks"],
            stdout=write, stderr=subprocess.PIPE, timeout=120, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == b"", done.stderr.decode()[-300:]


def test_a_cache_that_is_a_file_is_one_line(tmp_path, monkeypatch, capsys):
    """``$PRIVAUDITOR_CACHE`` naming a file: one line naming it, not a traceback from deep in a model load."""
    from privauditor.tasks.infra.cache import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, write(tmp_path / "cache", "x"))
    assert main([*CELL, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"${CACHE_ENV}={tmp_path / 'cache'} is a file" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1", "no-port-here"])
def test_an_address_nothing_listens_at_is_one_line_and_leaves_no_results_folder(address, tmp_path, capsys):
    """A wrong ``--address``: one line at once (not Ray's retries, then a traceback), and no stub folder."""
    assert main(["run", sweep_file(tmp_path), "--out", str(tmp_path / "new"), "--address", address]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and (f"--address {address}" in err or f"at {address}" in err), err
    assert not (tmp_path / "new").exists()
