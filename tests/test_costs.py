"""The planner's cost formulas against the tools that measure them: FLOPs against
``torch.utils.flop_counter`` on small models built on the meta device (forward, a full training step,
adapters in every layer), and ZeRO's memory against DeepSpeed's own estimators for a 7B-shaped model."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import GPT2Config, LlamaConfig, OPTConfig, T5Config

from privauditor.orchestrator.plan.costs import (
    Shape,
    activation_bytes,
    forward_flops,
    train_flops,
    zero_state_bytes,
)

SMALL = {
    "llama": LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64),
    "opt": OPTConfig(vocab_size=1000, hidden_size=64, ffn_dim=256, num_hidden_layers=3, num_attention_heads=4,
                     word_embed_proj_dim=64, max_position_embeddings=64),
    "gpt2": GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=64),
}  # fmt: skip


def counted(config, work) -> int:
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    config._attn_implementation = "eager"  # the CPU SDPA kernel has no FLOP formula; eager's bmm has
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config)
        ids = torch.zeros((2, 16), dtype=torch.long)
        counter = FlopCounterMode(display=False)
        with counter:
            work(model, ids)
    return counter.get_total_flops()


@pytest.mark.parametrize("family", sorted(SMALL))
def test_forward_and_training_flops_equal_the_flop_counter(family):
    config = SMALL[family]
    shape = Shape.from_config(config)
    forward = counted(config, lambda m, ids: m(ids))
    assert forward == forward_flops(shape, 16, 2)
    full = counted(config, lambda m, ids: m(ids, labels=ids).loss.backward())
    assert full == train_flops(shape, 16, 2, shape.matmul_params) == 3 * forward

    def adapters(model, ids):  # a LoRA-like technique: query and value weights of every layer train
        names = ("q_proj", "v_proj", "c_attn")
        trainable = [p for n, p in model.named_parameters() if any(k in n for k in names) and p.dim() == 2]
        for p in model.parameters():
            p.requires_grad_(False)
        for p in trainable:
            p.requires_grad_(True)
        adapters.matmul = sum(p.numel() for p in trainable)
        model(ids, labels=ids).loss.backward()

    peft = counted(config, adapters)
    expected = train_flops(shape, 16, 2, adapters.matmul)
    assert abs(peft / expected - 1) < 0.06, (peft, expected)  # backward stops above layer 0's inputs


def test_encoder_decoder_flops_equal_the_flop_counter():
    """T5 with 12 source and 16 target tokens: the encoder and the cross-attention's K and V run over the
    source, the rest of the decoder over the target."""
    config = T5Config(vocab_size=1000, d_model=64, d_kv=8, d_ff=128, num_layers=3, num_decoder_layers=2,
                      num_heads=4, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                      decoder_start_token_id=0, pad_token_id=0)  # fmt: skip
    shape = Shape.from_config(config)
    assert (shape.layers, shape.encoder_layers, shape.attention_width) == (2, 3, 32)
    source, target = torch.zeros((2, 12), dtype=torch.long), torch.zeros((2, 16), dtype=torch.long)
    forward = counted(config, lambda m, _: m(input_ids=source, decoder_input_ids=target))
    assert forward == forward_flops(shape, 16, 2, source=12)
    full = counted(config, lambda m, _: m(input_ids=source, labels=target).loss.backward())
    assert full == train_flops(shape, 16, 2, shape.matmul_params, source=12) == 3 * forward


LLAMA_7B = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, max_position_embeddings=2048)  # fmt: skip


@pytest.mark.parametrize(("stage", "gpus", "nodes", "offload"), [(2, 1, 1, False), (2, 4, 1, True), (2, 8, 2, False),
                         (3, 4, 1, False), (3, 8, 1, True), (3, 8, 2, False)])  # fmt: skip
def test_zero_memory_equals_deepspeeds_estimators_for_a_7b_model(stage, gpus, nodes, offload):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    shape = Shape.from_config(LLAMA_7B)
    assert 6.6e9 < shape.total_params < 6.8e9  # LLaMA-7B's 6.74 B
    ours = zero_state_bytes(shape.total_params, shape.largest_layer_params, stage, gpus, nodes, offload)
    if stage == 2:
        theirs = estimate_zero2_model_states_mem_needs(shape.total_params, gpus, nodes, cpu_offload=offload)
    else:
        theirs = estimate_zero3_model_states_mem_needs(
            shape.total_params, shape.largest_layer_params, gpus, nodes, cpu_offload=offload,
            cpu_offload_params=offload, zero_init=True,
        )[:2]  # fmt: skip
    assert ours == tuple(int(x) for x in theirs)


def test_every_registered_checkpoint_has_the_size_it_is_registered_with():
    """The planner prices a hub checkpoint by the architecture registered with it (no hub): it must give
    the parameter count the registry states (``6.7B``, ``2.8B``: within 5 %)."""
    from privauditor.orchestrator.plan.shapes import parse_size, shape_of
    from privauditor.tasks.models import MODELS

    hub = [(name, spec) for name, spec in MODELS.items() if spec.source == "hub"]
    assert len(hub) >= 6 and all(spec.architecture for _, spec in hub)
    for name, spec in hub:
        assert abs(shape_of(name).total_params / parse_size(spec.params) - 1) < 0.05, name


PLAIN_7B = "someorg/plain-7b"  # a 7B LLaMA shape registered by size: no ZeRO stage, loaded in float32
ZERO_7B = "yahma/llama-7b-hf"  # registered in bfloat16 with ZeRO-2 (DeepSpeed on one worker by default)


def planned_memory(tmp_path, model, adaptation, precision="auto", **train):
    """The memory parts of a cell of ``model`` at ``precision``, its work and its model's shape."""
    import yaml

    from privauditor.orchestrator.plan.memory import memory_parts
    from privauditor.orchestrator.plan.plan import memory_bytes, tokens_for
    from privauditor.orchestrator.plan.shapes import registered, shape_of
    from privauditor.orchestrator.plan.work import cell_work
    from privauditor.orchestrator.sweepfile.sweep import load_sweep

    sweep = {"name": "memory", "matrix": {"model": [model], "adaptation": [adaptation], "dataset": ["finance"]},
             "attacks": ["loss"], "split": {"members": 10, "nonmembers": 10, "validation": 4}, "score": {"batch_size": 4},
             "train": {"max_length": 128, "batch_size": 8, "precision": precision, **train}}  # fmt: skip
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    with registered([f"{PLAIN_7B}=7B:llama"]):
        spec = load_sweep(str(tmp_path / "sweep.yaml")).cells[0].resolve(build=False)
        cw = cell_work(spec, shape_of, tokens_for(measure=False))
        parts = memory_parts(spec, cw)
        assert memory_bytes(spec, cw) == parts.peak == max(parts.scoring, parts.training)
        return parts, cw, shape_of(model)


def test_a_lora_cells_memory_follows_its_precision(tmp_path):
    """A 7B LoRA cell in one process. bf16-mixed: bf16 frozen weights, 16 bytes per trained parameter, bf16
    activations; fp32: 4 bytes per weight and 12 more per trained one, fp32 activations."""
    mixed, cw, shape = planned_memory(tmp_path, PLAIN_7B, "lora", "bf16-mixed")
    total, trainable = shape.total_params, cw.trainable
    assert 6.3e9 < total < 7.7e9 and 0 < trainable == cw.added < total / 100  # an adapter's, added
    assert (mixed.frozen, mixed.trained) == (2 * total, 16 * trainable)
    assert mixed.activations == activation_bytes(shape, 128, 8, 2) and mixed.defence == 0
    assert mixed.scoring_weights == 2 * total + 4 * trainable
    assert mixed.logits == 4 * 128 * shape.vocab * (2 + 4)  # bf16 logits, their fp32 log-softmax
    fp32, _, _ = planned_memory(tmp_path, PLAIN_7B, "lora", "fp32")
    assert fp32.frozen + fp32.trained == 4 * (total + trainable) + 12 * trainable
    assert fp32.activations == activation_bytes(shape, 128, 8, 4) > mixed.activations
    assert fp32.scoring_weights == 4 * (total + trainable) and fp32.logits == 4 * 128 * shape.vocab * 8
    assert fp32.peak > mixed.peak
    auto, _, _ = planned_memory(tmp_path, PLAIN_7B, "lora")  # auto: float32 weights run fp32
    assert auto == fp32


def test_full_fine_tuning_keeps_sixteen_bytes_per_parameter_and_zero_follows_the_precision(tmp_path):
    """Full fine-tuning under bf16-mixed keeps every weight in fp32 with its gradient and moments. Under
    ZeRO, bf16-mixed is DeepSpeed's own estimate and fp32 doubles its 16-bit figures (weights, gradients)."""
    mixed, cw, shape = planned_memory(tmp_path, PLAIN_7B, "full", "bf16-mixed")
    total = shape.total_params
    assert (cw.trainable, cw.added) == (total, 0) and (mixed.frozen, mixed.trained) == (0, 16 * total)
    lora, cw, shape = planned_memory(tmp_path, ZERO_7B, "lora")  # auto: bfloat16 weights run bf16-mixed
    total, largest, trainable = shape.total_params, shape.largest_layer_params, cw.trainable
    assert lora.precision == "bf16-mixed" and (lora.frozen, lora.trained) == (2 * total, (2 + 18) * trainable)
    fp32, _, _ = planned_memory(tmp_path, ZERO_7B, "lora", "fp32")
    assert (fp32.frozen, fp32.trained) == (4 * total, (4 + 20) * trainable)
    zero3 = {"workers": 4, "deepspeed": {"stage": 3}}
    mixed, _, _ = planned_memory(tmp_path, ZERO_7B, "full", **zero3)
    assert mixed.trained == zero_state_bytes(total, largest, 3, 4)[1] == 4 * largest + 18 * total // 4
    assert mixed.activations == activation_bytes(shape, 128, 2, 2)  # a micro-batch of 8 / 4
    fp32, _, _ = planned_memory(tmp_path, ZERO_7B, "full", "fp32", **zero3)
    assert fp32.trained == 8 * largest + 20 * total // 4 and fp32.frozen == 0
    lora, cw, _ = planned_memory(tmp_path, ZERO_7B, "lora", "fp32", **zero3)
    assert lora.frozen == 4 * total // 4  # ZeRO-3 partitions the frozen weights too
    assert lora.trained == 8 * largest + int(20 * cw.trainable / 4)


def test_a_spec_without_a_precision_reads_its_models_dtype():
    from types import SimpleNamespace

    from privauditor.orchestrator.plan.memory import cell_precision

    assert cell_precision(SimpleNamespace(model=ZERO_7B, train=SimpleNamespace())) == "bf16-mixed"
    assert cell_precision(SimpleNamespace(model="tiny-gpt2", train=SimpleNamespace(precision=None))) == "fp32"
