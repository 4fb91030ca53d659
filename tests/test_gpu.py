"""On CUDA: every technique's cell trains, snapshots and is attacked on the GPU, and the GPU's numbers
agree with the CPU's on the same weights. Marked ``gpu``: skipped where CUDA is absent (CI has none);
on a GPU machine, ``pytest -m gpu``.

Tolerances, float32 on both sides (PyTorch leaves TF32 off for matrix products by default): per-token
log-probabilities within 1e-4 nats, per-sample gradients within 1e-3 of each sample's largest entry.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from privauditor.tasks.adaptations import ADAPTATIONS, build_adaptation
from privauditor.tasks.attacks import ATTACKS
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.models import load_model
from privauditor.tasks.passes.forward import score_examples
from privauditor.tasks.passes.gradients import per_sample_gradients, target_nll
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.training.loop import apply_seeded, collate, encode

from .test_scoring import TEXTS

pytestmark = pytest.mark.gpu

MEMBERS = NONMEMBERS = 16
SMALL = [f"split.members={MEMBERS}", f"split.nonmembers={NONMEMBERS}", "split.validation=8",
         "split.population=8", "split.known_members=8", "train.max_length=48", "train.batch_size=4",
         "train.checkpoints=[1,2]", "attack_params.neighbourhood.k=2", "attack_params.recall.shots=4",
         "attack_params.con_recall.shots=4"]  # fmt: skip
CELLS = [("llama", t) for t in ADAPTATIONS.names()] + [
    ("t5", t) for t in ("full", "lora", "adapter_h", "prefix", "prompt", "ptuning")
]


@pytest.mark.parametrize(("family_name", "technique"), CELLS)
def test_every_technique_trains_snapshots_and_is_attacked_on_cuda(tmp_path, family_name, technique):
    settings = {"model": f"tiny-{family_name}", "adaptation": technique, "dataset": "finance", "seed": 0}
    attacks = f"attacks=[{','.join(ATTACKS.names())}]"
    outcome = run_cell(cell_config(settings, [*SMALL, attacks]), tmp_path)
    record = json.loads((outcome.path / "cell.json").read_text())
    assert record["device"].startswith("cuda")
    epochs = [1, 2] if build_adaptation(technique).trains else [0]
    assert [c["epoch"] for c in record["checkpoints"]] == epochs
    assert all(math.isfinite(c["utility_loss"]) for c in record["checkpoints"])
    assert all(math.isfinite(x) for x in record["train"]["epoch_losses"])
    table = pq.read_table(outcome.path / "scores.parquet").to_pylist()
    skipped = {a for a, m in outcome.metrics.items() if "skipped" in m}
    # in context (icl), attacks whose views read no context are skipped: gradnorm, spv_mia; SURP abstains
    # where no target token is surprising, as at these 16 texts of 48 tokens (on the CPU too)
    assert skipped - {"surp"} == ({"gradnorm", "spv_mia"} if technique == "icl" else set()), skipped
    for attack in set(ATTACKS.names()) - skipped:
        rows = [r for r in table if r["attack"] == attack]
        assert len(rows) == MEMBERS + NONMEMBERS and len({r["sample_id"] for r in rows}) == len(rows), attack
        assert all(math.isfinite(r["score"]) for r in rows), attack


def adapted_pair(family_name, technique):
    """The technique on the family's tiny base, new weights moved off their initial values, on the CPU,
    and an exact copy on the GPU."""
    loaded = load_model(f"tiny-{family_name}", device="cpu")
    model = apply_seeded(build_adaptation(technique), loaded.model, loaded.family, seed=0)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.02)
    model.eval()
    return loaded, model, copy.deepcopy(model).to("cuda")


PAIRS = [("llama", "lora"), ("llama", "llama_adapter"), ("gpt2", "prompt"), ("opt", "prefix"),
         ("bloom", "ia3"), ("gptj", "adapter_p"), ("t5", "full"), ("t5", "ptuning")]  # fmt: skip


@pytest.mark.parametrize(("family_name", "technique"), PAIRS)
def test_cuda_scores_and_gradients_agree_with_the_cpu(family_name, technique):
    loaded, cpu, gpu = adapted_pair(family_name, technique)
    seq2seq = loaded.family.seq2seq
    on_cpu = score_examples(cpu, loaded.tokenizer, TEXTS, 48, seq2seq, batch_size=8)
    on_gpu = score_examples(gpu, loaded.tokenizer, TEXTS, 48, seq2seq, batch_size=8)
    for a, b in zip(on_cpu, on_gpu, strict=True):
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_allclose(a.logp, b.logp, atol=1e-4)
        np.testing.assert_allclose(a.mu, b.mu, atol=1e-4)
    batch = collate(encode(loaded.tokenizer, TEXTS, 48, seq2seq), loaded.tokenizer.pad_token_id, seq2seq)
    grads = {}
    for name, model in (("cpu", cpu), ("cuda", gpu)):
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        moved = {k: v.to(name) for k, v in batch.items()}
        grads[name] = per_sample_gradients(model, moved, lambda m, b: target_nll(m, b, seq2seq), params)
    assert set(grads["cpu"]) == set(grads["cuda"])
    for i in range(len(TEXTS)):
        scale = max(float(g[i].abs().max()) for g in grads["cpu"].values())
        worst = max(float((grads["cuda"][n][i].cpu() - g[i]).abs().max()) for n, g in grads["cpu"].items())
        assert scale > 0 and worst <= 1e-3 * scale, (i, worst, scale)


def random_1b(folder):
    """A random-weight model of LLaMA-3.2-1B's published shape (hidden 2,048, 16 layers, 32 query and 8
    key/value heads, MLP 8,192, vocabulary 128,256, tied embeddings), saved in bf16 with the offline
    tokenizer: a local checkpoint directory, as a user's would be."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True, max_position_embeddings=2048,
        rope_theta=500000.0,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    load_model("tiny-llama", device="cpu").tokenizer.save_pretrained(folder)
    del model
    torch.cuda.empty_cache()
    return str(folder)


@pytest.mark.parametrize("shape", ["tiny", "1b"])
def test_a_bf16_mixed_lora_cell_runs_end_to_end_on_cuda_without_ray(tmp_path, shape):
    """``privauditor cell`` on CUDA at ``bf16-mixed``: LoRA on the tiny base and on a random-weight 1 B
    shape, every attack, trained, scored, and its cell.json saying the device and the precision."""
    from privauditor.orchestrator.cli import main

    model = "tiny-llama" if shape == "tiny" else random_1b(tmp_path / "llama-1b")
    attacks = [a for a in ATTACKS.names() if ATTACKS.get(a).access != "checkpoints"]
    sets = [*SMALL, "train.precision=bf16-mixed", f"attacks=[{','.join(attacks)}]"]
    argv = [
        "cell",
        "--model",
        model,
        "--adaptation",
        "lora",
        "--dataset",
        "finance",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv + [x for s in sets for x in ("--set", s)]) == 0
    (cell_dir,) = (tmp_path / "out" / "cells").iterdir()
    record = json.loads((cell_dir / "cell.json").read_text())
    assert record["device"].startswith("cuda") and record["precision"] == "bf16-mixed"
    assert math.isfinite(record["utility_loss"]) and all(
        math.isfinite(x) for x in record["train"]["epoch_losses"]
    )
    metrics = json.loads((cell_dir / "metrics.json").read_text())
    assert set(attacks) <= set(metrics) and all(
        "auc" in metrics[a] or "skipped" in metrics[a] for a in attacks
    )
    assert [a for a in attacks if "auc" not in metrics[a]] in ([], ["surp"]), metrics  # see the test above
    assert all(math.isfinite(m["auc"]) for m in metrics.values() if "auc" in m)
