"""GPT-J family (Wang & Komatsuzaki 2021, https://github.com/kingoflolz/mesh-transformer-jax): parallel
attention + MLP blocks with partial rotary positions. The paper's checkpoint is ``EleutherAI/gpt-j-6b``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._spec import Family, ModuleMap, Resources, TinyArchitecture, register_checkpoint, register_family

if TYPE_CHECKING:
    from transformers import GPTJConfig


@register_family
class GPTJFamily(Family):
    name = "gptj"
    model_types = ("gptj",)
    paper = "https://github.com/kingoflolz/mesh-transformer-jax"
    modules = ModuleMap(
        qkv=("q_proj", "k_proj", "v_proj"),
        attn_out=("out_proj",),
        mlp_in=("fc_in",),
        mlp_out=("fc_out",),
        blocks="transformer.h",
    )

    def tiny_config(self, arch: TinyArchitecture, vocab_size: int, special_ids: dict[str, int]) -> GPTJConfig:
        from transformers import GPTJConfig

        head_dim = arch.hidden // arch.heads
        return GPTJConfig(
            vocab_size=vocab_size,
            n_embd=arch.hidden,
            n_layer=arch.layers,
            n_head=arch.heads,
            n_inner=arch.ffn,
            n_positions=arch.max_positions,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            rotary_dim=head_dim // 4,  # GPT-J 6B rotates 64 of 256 dimensions per head
            **special_ids,
        )


register_checkpoint(
    "EleutherAI/gpt-j-6b",
    "gptj",
    "6B",
    Resources(gpus=1, cpus=8, memory_gb=48, zero_stage=2),
    dtype="bfloat16",
    architecture={
        "model_type": "gptj",
        "n_embd": 4096,
        "n_layer": 28,
        "n_head": 16,
        "rotary_dim": 64,
        "vocab_size": 50400,
    },
)
