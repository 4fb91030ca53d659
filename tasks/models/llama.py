"""LLaMA family (Touvron et al. 2023, https://arxiv.org/abs/2302.13971): pre-norm RMSNorm, rotary
positions, SwiGLU MLP. The paper's checkpoint is ``yahma/llama-7b-hf``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._spec import Family, ModuleMap, Resources, TinyArchitecture, register_checkpoint, register_family

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
    architecture={"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "vocab_size": 32000},
)
