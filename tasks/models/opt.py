"""OPT family (Zhang et al. 2022, https://arxiv.org/abs/2205.01068): GPT-style decoder with learned
positions (offset by 2) and ReLU MLP. The paper's checkpoint is ``facebook/opt-6.7b``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._spec import Family, ModuleMap, Resources, TinyArchitecture, register_checkpoint, register_family

if TYPE_CHECKING:
    from transformers import OPTConfig


@register_family
class OPTFamily(Family):
    name = "opt"
    model_types = ("opt",)
    paper = "https://arxiv.org/abs/2205.01068"
    modules = ModuleMap(
        qkv=("q_proj", "k_proj", "v_proj"),
        attn_out=("out_proj",),
        mlp_in=("fc1",),
        mlp_out=("fc2",),
        blocks="model.decoder.layers",
    )

    def tiny_config(self, arch: TinyArchitecture, vocab_size: int, special_ids: dict[str, int]) -> OPTConfig:
        from transformers import OPTConfig

        return OPTConfig(
            vocab_size=vocab_size,
            hidden_size=arch.hidden,
            word_embed_proj_dim=arch.hidden,
            ffn_dim=arch.ffn,
            num_hidden_layers=arch.layers,
            num_attention_heads=arch.heads,
            max_position_embeddings=arch.max_positions,
            dropout=0.0,
            attention_dropout=0.0,
            **special_ids,
        )


register_checkpoint(
    "facebook/opt-6.7b",
    "opt",
    "6.7B",
    Resources(gpus=1, cpus=8, memory_gb=48, zero_stage=2),
    dtype="bfloat16",
    architecture={
        "model_type": "opt",
        "hidden_size": 4096,
        "ffn_dim": 16384,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "word_embed_proj_dim": 4096,
        "vocab_size": 50272,
    },
)
