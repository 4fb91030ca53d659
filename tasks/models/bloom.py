"""BLOOM family (BigScience 2022, https://arxiv.org/abs/2211.05100): ALiBi attention biases instead of
position embeddings, an embedding LayerNorm, fused QKV. The paper's checkpoint is ``bigscience/bloom-7b1``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._spec import Family, ModuleMap, Resources, TinyArchitecture, register_checkpoint, register_family

if TYPE_CHECKING:
    from transformers import BloomConfig


@register_family
class BloomFamily(Family):
    name = "bloom"
    model_types = ("bloom",)
    paper = "https://arxiv.org/abs/2211.05100"
    modules = ModuleMap(
        qkv=("query_key_value",),
        attn_out=("self_attention.dense",),
        mlp_in=("dense_h_to_4h",),
        mlp_out=("dense_4h_to_h",),
        blocks="transformer.h",
    )

    # ALiBi positions: the copy curriculum forms induction heads that the corpus stage keeps (README)
    copy_curriculum = True

    def tiny_config(
        self, arch: TinyArchitecture, vocab_size: int, special_ids: dict[str, int]
    ) -> BloomConfig:
        from transformers import BloomConfig

        # BLOOM's MLP is fixed at 4x hidden; ALiBi needs no position table, so any length works.
        return BloomConfig(
            vocab_size=vocab_size,
            hidden_size=arch.hidden,
            n_layer=arch.layers,
            n_head=arch.heads,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            **special_ids,
        )


register_checkpoint(
    "bigscience/bloom-7b1",
    "bloom",
    "7.1B",
    Resources(gpus=1, cpus=8, memory_gb=48, zero_stage=2),
    dtype="bfloat16",
    architecture={
        "model_type": "bloom",
        "hidden_size": 4096,
        "n_layer": 30,
        "n_head": 32,
        "vocab_size": 250880,
    },
)
