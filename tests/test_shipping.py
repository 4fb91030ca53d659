"""Shipped forms (tasks/shipping): merging keeps the function, int8 and GGUF change weights only as their
quantisers allow, and what cannot ship says why."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privauditor.tasks.adaptations import build_adaptation
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.shipping import ship, unsupported_reason
from privauditor.tasks.training.loop import apply_seeded, collate, encode

from .helpers import fresh_base

FAMILIES = ["llama", "gpt2", "opt", "bloom", "gptj", "t5"]


def adapted(family_name: str, technique: str, seed: int = 0, scale: float = 0.05):
    """The tiny base adapted by ``technique``, its trainable tensors moved off their initial values by
    noise of sd ``scale`` (a zero LoRA B would merge to the base whatever the merge did), and a padded
    batch of records."""
    family, tokenizer, base = fresh_base(family_name)
    model = apply_seeded(build_adaptation(technique, None), base, family, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(scale * torch.randn(p.shape, generator=generator))
    examples = load_dataset("finance").examples[:4]
    batch = collate(encode(tokenizer, examples, 48, family.seq2seq), tokenizer.pad_token_id, family.seq2seq)
    return family, model.eval(), batch


def nll(model, batch) -> float:
    """The batch's mean target NLL per token."""
    with torch.no_grad():
        return float(model(**batch).loss)


def logits(model, batch):
    """The logits at every position (T5 builds its decoder's inputs from the labels)."""
    with torch.no_grad():
        return model(**batch).logits


@pytest.mark.parametrize("technique", ["lora", "ia3", "head_lora"])
@pytest.mark.parametrize("family_name", FAMILIES)
def test_a_merged_model_scores_as_the_unmerged_one(family_name, technique, tmp_path):
    family, model, batch = adapted(family_name, technique)
    if build_adaptation(technique, None).unsupported_reason(family.name):
        pytest.skip("the technique does not adapt this family")
    before = logits(model, batch)
    shipped, record = ship("merged", model, technique, family.name, tmp_path)
    assert record == {"form": "merged"} and not hasattr(shipped, "peft_config")
    assert torch.allclose(logits(shipped, batch), before, atol=1e-4, rtol=0)
    assert torch.equal(logits(model, batch), before)  # the adapted model is left as it was
    base = logits(fresh_base(family_name)[2].eval(), batch)
    assert (before - base).abs().max() > 1e-2  # the adapter moved the function: the check has teeth


#: per weight, the most each quantiser may move it, as a share of its block's largest |x| (gguf/quants.py
#: 378-401: Q8_0 rounds x / d to an integer with d = max|x| / 127, then stores d as float16, which adds up
#: to 127 · d · 2^-11; 220-252: Q4_0 truncates x / d + 8.5 to 0-15 with d = -m / 8, m the block's value of
#: largest magnitude, so the end opposite m clips at 7 / 8 of it: d, plus 8 · d · 2^-11 of float16 scale)
BOUND = {"gguf-q8_0": 1 / 254 + 1 / 2048, "gguf-q4": (1 + 8 / 2048) / 8}
#: a sanity bound on the batch's mean NLL change (nats per token), not a tolerance derived from BOUND
LOOSE = {"gguf-q8_0": 0.05, "gguf-q4": 0.5}


@pytest.mark.parametrize("form", ["gguf-q8_0", "gguf-q4"])
@pytest.mark.parametrize("family_name", ["llama", "gpt2", "bloom", "t5"])
def test_a_gguf_written_and_read_back_moves_each_weight_only_as_its_quantiser_allows(
    family_name, form, tmp_path, capsys
):
    """Every tensor comes back, each quantised matrix within the quantiser's error of each weight (checked
    per block of 32 in the layout the file holds), every other tensor bit for bit; the scores move little
    (printed), and the file is smaller than float32."""
    from privauditor.tasks.shipping.gguf_file import ARCH, _layout, _tied_alias
    from privauditor.tasks.shipping.merge import merged

    family, model, batch = adapted(family_name, "lora")
    plain = merged(model, "lora")
    shipped, record = ship(form, model, "lora", family.name, tmp_path)
    names = {v: k for k, v in _names(plain, family_name).items()}
    before, after = plain.state_dict(), shipped.state_dict()
    assert set(after) == set(before)
    tied = plain.config.tie_word_embeddings
    moved = 0
    for key, weight in before.items():
        name = names.get(key)
        if _tied_alias(key, family_name) or (name == "output.weight" and tied):
            continue  # the embedding under another name: checked as the embedding
        if name in record["float_tensors"]:
            assert torch.equal(after[key], weight), key
            continue
        x = _layout(weight.numpy(), name, plain.config, family_name).reshape(-1, 32)
        y = _layout(after[key].numpy(), name, plain.config, family_name).reshape(-1, 32)
        assert np.all(np.abs(y - x) <= BOUND[form] * np.abs(x).max(1, keepdims=True) + 1e-7), key
        moved += 1
    assert moved == record["quantised_tensors"] > 0 and ARCH[family_name]
    change = abs(nll(shipped, batch) - nll(plain, batch))
    float_bytes = sum(t.numel() * 4 for t in before.values())
    with capsys.disabled():
        print(f"\n{family_name} {form}: NLL {nll(plain, batch):.4f} -> {nll(shipped, batch):.4f}, "
              f"{record['bytes']} bytes against {float_bytes} in float32")  # fmt: skip
    assert 0 < change < LOOSE[form] and record["bytes"] < float_bytes


def test_t5_with_its_head_untied_reads_back_its_embeddings_from_the_shared_one(tmp_path):
    """A merged ``head_lora`` on T5 unties the head; loaded, T5 then unties its encoder's and decoder's
    embeddings from ``shared`` too, which the file holds once: they are filled in from it (found by the
    ``shipped`` sweep, where both tiny-t5 ``head_lora`` cells failed at Q8_0 before)."""
    family, model, batch = adapted("t5", "head_lora")
    shipped, _ = ship("gguf-q8_0", model, "head_lora", family.name, tmp_path)
    for part in (shipped.encoder, shipped.decoder):
        assert torch.equal(part.embed_tokens.weight, shipped.shared.weight)
    assert 0 < abs(nll(shipped, batch) - nll(model, batch)) < LOOSE["gguf-q8_0"]


def _names(model, family_name):
    from transformers.modeling_gguf_pytorch_utils import TensorProcessor, get_gguf_hf_weights_map

    layers = model.config.num_layers if family_name == "t5" else model.config.num_hidden_layers
    return get_gguf_hf_weights_map(model, TensorProcessor(), model_type=family_name, num_layers=layers)


@pytest.mark.parametrize("family_name", ["gpt2", "llama"])
def test_int8_quantises_every_linear_layer_and_gpt2s_conv1d_as_the_linear_it_is(
    family_name, tmp_path, capsys
):
    family, model, batch = adapted(family_name, "lora")
    plain = nll(ship("merged", model, "lora", family.name, tmp_path)[0], batch)
    shipped, record = ship("int8", model, "lora", family.name, tmp_path)
    layers = model.get_base_model().config.num_hidden_layers
    assert record["conv1d_made_linear"] == (4 * layers if family_name == "gpt2" else 0)
    assert record["int8_layers"] >= 4 * layers + 1  # attention and MLP projections and the head
    with capsys.disabled():
        print(f"\n{family_name} int8: NLL {plain:.4f} -> {nll(shipped, batch):.4f}")
    assert 0 < abs(nll(shipped, batch) - plain) < LOOSE["gguf-q8_0"]


def test_what_cannot_ship_says_why():
    assert "prefix has no merge: it ships unmerged" in unsupported_reason("merged", "prefix", "llama")
    assert "cannot read the opt architecture" in unsupported_reason("gguf-q4", "lora", "opt")
    assert (
        unsupported_reason("int8", "lora", "opt") is None
        and unsupported_reason("gguf-q8_0", "full", "t5") is None
        and unsupported_reason("int8", "adapter_h", "gpt2") is None  # unmerged, on an int8 base
    )
    if not torch.cuda.is_available():
        assert "nf4 needs" in unsupported_reason("nf4", "lora", "llama")
    with pytest.raises(PrivauditorError, match="unknown form 'gguf-q2': choose from merged, int8"):
        unsupported_reason("gguf-q2", "lora", "llama")
    with pytest.raises(
        PrivauditorError, match="cannot ship as gguf-q8_0: transformers' GGUF reader cannot read the gptj"
    ):
        ship("gguf-q8_0", None, "lora", "gptj", None)


@pytest.mark.parametrize("form", ["gguf-q8_0", "gguf-q4"])
@pytest.mark.parametrize("family_name", ["gpt2", "llama"])
def test_quantising_in_place_is_the_gguf_files_round_trip_tensor_for_tensor(family_name, form, tmp_path):
    """The unmerged path (each frozen weight quantised in place by the file's rule) gives exactly the
    weights the file written and read back gives, for a plain model (GPT-2: transposed ``Conv1D``;
    LLaMA: permuted query and key rows)."""
    from privauditor.tasks.shipping.merge import merged
    from privauditor.tasks.shipping.unmerged import gguf_in_place

    family, model, _ = adapted(family_name, "lora")
    plain = merged(model, "lora").requires_grad_(False)
    through_file, record = ship(form, model, "lora", family.name, tmp_path)
    in_place, found = gguf_in_place(plain, form)
    assert found["quantised_tensors"] == record["quantised_tensors"] > 0
    after = through_file.state_dict()
    assert all(torch.equal(after[k], v) for k, v in in_place.state_dict().items())


@pytest.mark.parametrize("form", ["int8", "gguf-q8_0", "gguf-q4"])
@pytest.mark.parametrize(("family_name", "technique"), [("gpt2", "adapter_h"), ("llama", "prompt"),
                                                        ("llama", "llama_adapter"), ("t5", "parallel")])  # fmt: skip
def test_a_technique_without_a_merge_ships_its_adapter_in_float_on_the_shipped_base(
    family_name, technique, form, tmp_path
):
    """Prompt learning, LLaMA-Adapter and the bottleneck adapters ship unmerged: every trainable tensor
    as trained, the base's quantised (int8: its frozen linear layers swapped, the adapters' kept float and
    still run through their hooks). The adapter still acts: it moves the shipped base's logits as it moved
    the float base's (mean |Δ logit| within a third), and the scores move as little as the merged forms'."""
    family, model, batch = adapted(family_name, technique, scale=0.5)
    trained = {k: v.clone() for k, v in model.named_parameters() if v.requires_grad}
    shipped, record = ship(form, model, technique, family.name, tmp_path)
    assert record["unmerged"] and record["form"] == form
    kept = dict(shipped.named_parameters())
    assert all(torch.equal(kept[k], v) for k, v in trained.items() if k in kept)
    if form == "int8":
        assert record["int8_layers"] > 0
        assert not any(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for n, m in shipped.named_modules()
                       if any(p.requires_grad for p in m.parameters()))  # fmt: skip
    else:
        assert record["quantised_tensors"] > 0 and set(trained) <= set(kept)
    base = fresh_base(family_name)[2].eval()
    shipped_base = ship(form, base, "none", family.name, tmp_path / "base")[0]
    width = batch["labels"].shape[1]  # prompt learning's logits lead with its virtual tokens
    effect = (logits(model, batch)[:, -width:] - logits(base, batch)).abs().mean()
    kept_effect = (logits(shipped, batch)[:, -width:] - logits(shipped_base, batch)).abs().mean()
    assert abs(kept_effect - effect) < effect / 3, (kept_effect, effect)
    assert 0 < abs(nll(shipped, batch) - nll(model, batch)) < LOOSE[form if form != "int8" else "gguf-q8_0"]


FORMS = ["merged", "gguf-q8_0", "int8"]


@pytest.fixture(scope="module")
def shipped_cell(tmp_path_factory):
    """A LoRA cell on tiny GPT-2 whose last checkpoint is also audited as three shipped forms, and its
    split's `none` control (the board wants it), shipped too."""
    from privauditor.tasks.cell.run import run_cell
    from privauditor.tasks.spec.config import cell_config

    out = tmp_path_factory.mktemp("shipped") / "cells"
    configs = [
        cell_config(
            {"model": "tiny-gpt2", "adaptation": adaptation, "dataset": "climate"},
            [
                "split={members: 12, nonmembers: 12, validation: 4}",
                "train.epochs=1",
                "score.bootstrap=50",
                "attacks=[loss, zlib, gradnorm, blind]",
                f"score.shipped=[{', '.join(FORMS)}]",
            ],
        )  # fmt: skip
        for adaptation in ("none", "lora")
    ]
    outcomes = [run_cell(config, out) for config in configs]
    return out, configs[1], outcomes[1]


def _scores(folder):
    import pyarrow.parquet as pq

    rows = pq.read_table(folder / "scores.parquet").to_pylist()
    return {r["sample_id"]: r["score"] for r in rows if r["attack"] == "loss"}


def test_the_shipped_axis_audits_each_form_beside_the_trained_model(shipped_cell, tmp_path, capsys):
    """``score.shipped``: each form's folder and record, merged scoring as trained (1e-4), the gradient
    attack skipped with why; rows with a ``shipped`` column, findings' *As shipped*, a board that keeps
    the forms apart and filters by them; the cell ids of cells without the setting are unchanged."""
    import json

    from privauditor.orchestrator.board.store import Store
    from privauditor.orchestrator.cli import main
    from privauditor.orchestrator.report.findings import findings
    from privauditor.orchestrator.report.leaderboard import build
    from privauditor.orchestrator.report.row_schema import trained_rows
    from privauditor.tasks.spec.config import cell_config

    out, config, outcome = shipped_cell
    record = json.loads((outcome.path / "cell.json").read_text())
    assert [s["shipped"] for s in record["shipped"]] == FORMS and all("path" in s for s in record["shipped"])
    trained = _scores(outcome.path)
    merged = _scores(outcome.path / "shipped" / "merged")
    assert merged.keys() == trained.keys() and max(abs(merged[k] - trained[k]) for k in trained) < 1e-4
    metrics = json.loads((outcome.path / "shipped" / "int8" / "metrics.json").read_text())
    assert "no trained parameters" in metrics["gradnorm"]["skipped"] and "auc" in metrics["loss"]
    rows = build(out)
    forms = {r["shipped"] for r in rows}
    assert forms == {"trained", *FORMS} and len(trained_rows(rows)) == 2 * 4  # two cells, four attacks
    assert {r["setting"].rsplit("+", 1)[-1] for r in rows if r["shipped"] == "int8"} == {"int8"}
    text = findings(out, rows)
    assert "## As shipped" in text and "| lora | gguf-q8_0 | 1 |" in text and "| lora | merged | 1 | " in text
    store = tmp_path / "store"
    assert main(["board", "add", str(out), str(store)]) == 0
    records = [json.loads(p.read_text()) for p in Store(store).local.glob("records/*/*.json")]
    lora = [r for r in records if r["adaptation"] == "lora"]
    assert (
        sorted(r["shipped"] for r in lora) == sorted(["trained", *FORMS])
        and len({r["key"] for r in lora}) == 4
    )
    # `none` is plain: its merged form is the model as trained, left out with why
    assert sorted(r["shipped"] for r in records if r["adaptation"] == "none") == [
        "gguf-q8_0",
        "int8",
        "trained",
    ]
    assert main(["board", "build", str(store), "--out", str(tmp_path / "site"), "--shipped", "int8"]) == 0
    int8_page = (tmp_path / "site" / "leaderboard.md").read_text()  # the int8 models' rows, ranked alike
    assert "| tiny-gpt2 | lora | climate | 0 |" in int8_page and "shipped forms" not in int8_page
    capsys.readouterr()
    assert main(["board", "build", str(store), "--out", str(tmp_path / "site2"), "--shipped", "nf4"]) == 2
    err = capsys.readouterr().err
    assert "no records of form 'nf4' in the store: it holds gguf-q8_0, int8, merged, trained" in err
    plain = cell_config(
        {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "climate"}, ["score.shipped=[]"]
    )
    assert "shipped" not in plain.resolve().to_dict()["score"]
    assert (
        plain.cell_id()
        == cell_config({"model": "tiny-gpt2", "adaptation": "lora", "dataset": "climate"}).cell_id()
    )
    with pytest.raises(PrivauditorError, match="score.shipped names a form twice"):
        cell_config(
            {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "climate"}, ["score.shipped=[int8, int8]"]
        )


def test_privauditor_audit_shipped_scores_the_form_it_names(shipped_cell, tmp_path):
    """``privauditor audit --shipped``: merged scores as the adapter on its base (LOSS within 1e-4), the
    GGUF form is another audit whose scores moved only a little, and its record and report name the form;
    the same GGUF written to a file with its tokenizer and audited as ``--model FILE.gguf`` scores alike,
    and as the cell's own shipped axis scored it (the same AUC)."""
    import json

    import pyarrow.parquet as pq

    from privauditor import load_results
    from privauditor.orchestrator.cli import main

    from .test_audit import audit_argv, write_files

    cells, _, outcome = shipped_cell
    (split_file,) = (cells / "shared" / "splits").glob("*.json")
    members, nonmembers = write_files(tmp_path, split_file)
    out = tmp_path / "audit"
    settings = ["--set", "attacks=[loss]", "--set", "score.bootstrap=50", "--no-baseline"]
    argv = [
        *audit_argv("tiny-gpt2", members, nonmembers, out),
        "--adapter",
        str(outcome.path / "adapter"),
        *settings,
    ]
    loss = {}
    for form in ("", "merged", "gguf-q8_0"):
        assert main([*argv, *(["--shipped", form] if form else [])]) == 0
        (folder,) = (out / "cells").glob(f"audit__tiny-gpt2__adapter{'-' + form if form else ''}__*")
        rows = pq.read_table(folder / "scores.parquet").to_pylist()
        loss[form] = {r["sample_id"]: r["score"] for r in rows}
        shipped = json.loads((folder / "cell.json").read_text())["audit"]["shipped"]
        assert (shipped or {}).get("form") == (form or None)
    assert loss["merged"].keys() == loss[""].keys() == loss["gguf-q8_0"].keys()
    assert all(abs(loss["merged"][k] - loss[""][k]) < 1e-4 for k in loss[""])
    moved = [abs(loss["gguf-q8_0"][k] - loss[""][k]) for k in loss[""]]
    assert 0 < max(moved) < 0.05
    # the same GGUF written as a file (its tokenizer in it), audited directly as llama.cpp users would
    from privauditor.tasks.passes.adapted import load_adapted

    loaded, _, _ = load_adapted("tiny-gpt2", str(outcome.path / "adapter"))
    ship("gguf-q8_0", loaded.model, "lora", "gpt2", tmp_path / "file", loaded.tokenizer)
    direct = [*audit_argv(str(tmp_path / "file" / "gguf-q8_0.gguf"), members, nonmembers, out), *settings]
    assert main(direct) == 0
    (folder,) = (out / "cells").glob("audit__*gguf-q8_0.gguf__checkpoint__*")
    rows = pq.read_table(folder / "scores.parquet").to_pylist()
    assert all(abs(r["score"] - loss["gguf-q8_0"][r["sample_id"]]) < 1e-4 for r in rows) and len(rows) == 24
    aucs = {a.cell_id: a.metrics["loss"]["auc"] for a in load_results(out).audits}
    assert aucs[folder.name] == aucs[next(c for c in aucs if "adapter-gguf" in c)]
    axis = json.loads((outcome.path / "shipped" / "gguf-q8_0" / "metrics.json").read_text())["loss"]["auc"]
    assert aucs[folder.name] == axis  # the file audited directly, and the cell's shipped axis
    (gguf_audit,) = [a for a in load_results(out).audits if "adapter-gguf" in a.cell_id]
    page = gguf_audit.report(tmp_path / "report", pdf=False)[0].read_text()
    assert "as shipped (gguf-q8_0)" in page and "read back by transformers&#39; GGUF reader" in page


def test_a_gguf_model_file_privauditor_cannot_read_is_refused_in_one_line(tmp_path):
    import gguf

    from privauditor.tasks.models import resolve_model

    (tmp_path / "broken.gguf").write_bytes(b"not a gguf file")
    with pytest.raises(PrivauditorError, match=r"^cannot read broken.gguf as a GGUF file: "):
        resolve_model(str(tmp_path / "broken.gguf"))
    writer = gguf.GGUFWriter(str(tmp_path / "encoder.gguf"), "t5")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(
        PrivauditorError,
        match="encoder.gguf is a GGUF of architecture t5; privauditor reads llama, gpt2, bloom files",
    ):
        resolve_model(str(tmp_path / "encoder.gguf"))


@pytest.mark.gpu
def test_nf4_quantises_the_merged_models_linear_layers_on_a_gpu(tmp_path):
    """``nf4`` (bitsandbytes, CUDA): the merged LoRA model's linear layers in 4-bit NormalFloat, its NLL
    near the float model's (the GGUF Q4_0 bound's sanity margin)."""
    pytest.importorskip("bitsandbytes")
    if not torch.cuda.is_available():
        pytest.skip("nf4 needs a CUDA GPU")
    family, model, batch = adapted("llama", "lora")
    plain = nll(ship("merged", model, "lora", family.name, tmp_path)[0], batch)
    shipped, record = ship("nf4", model, "lora", family.name, tmp_path)
    assert record["nf4_layers"] > 0
    on_gpu = {k: v.cuda() for k, v in batch.items()}
    assert 0 < abs(nll(shipped, on_gpu) - plain) < LOOSE["gguf-q4"]
