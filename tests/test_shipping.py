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


def adapted(family_name: str, technique: str, seed: int = 0):
    """The tiny base adapted by ``technique``, its trainable tensors moved off their initial values (a
    zero LoRA B would merge to the base whatever the merge did), and a padded batch of records."""
    family, tokenizer, base = fresh_base(family_name)
    model = apply_seeded(build_adaptation(technique, None), base, family, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=generator))
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
    assert "prefix cannot be merged" in unsupported_reason("merged", "prefix", "llama")
    assert "adapter_h cannot be merged" in unsupported_reason("int8", "adapter_h", "gpt2")
    assert "cannot read the opt architecture" in unsupported_reason("gguf-q4", "lora", "opt")
    assert (
        unsupported_reason("int8", "lora", "opt") is None
        and unsupported_reason("gguf-q8_0", "full", "t5") is None
    )
    with pytest.raises(PrivauditorError, match="unknown shipped form 'gguf-q2': choose one of merged, int8"):
        unsupported_reason("gguf-q2", "lora", "llama")
    with pytest.raises(
        PrivauditorError, match="cannot ship as gguf-q8_0: transformers' GGUF reader cannot read the gptj"
    ):
        ship("gguf-q8_0", None, "lora", "gptj", None)


def test_privauditor_audit_shipped_scores_the_form_it_names(tmp_path):
    """``privauditor audit --shipped``: merged scores as the adapter on its base (LOSS within 1e-4), the
    GGUF form is another audit whose scores moved only a little, and its record and report name the form;
    the same GGUF written to a file with its tokenizer and audited as ``--model FILE.gguf`` scores alike."""
    import json

    import pyarrow.parquet as pq

    from privauditor import load_results
    from privauditor.orchestrator.cli import main
    from privauditor.tasks.cell.run import run_cell
    from privauditor.tasks.spec.config import cell_config

    from .test_audit import audit_argv, write_files

    config = cell_config(
        {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "climate"},
        ["split={members: 12, nonmembers: 12, validation: 4}", "train.epochs=1"],
    )
    outcome = run_cell(config, tmp_path / "cells")
    (split_file,) = (tmp_path / "cells" / "shared" / "splits").glob("*.json")
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
