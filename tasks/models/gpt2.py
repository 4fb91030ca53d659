"""GPT-2 family (Radford et al. 2019, https://openai.com/research/better-language-models): learned
positions, ``Conv1D`` projections. Not in the PrivAuditor paper's matrix; the common small baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._spec import Family, ModuleMap, Resources, TinyArchitecture, register_checkpoint, register_family

if TYPE_CHECKING:
    from transformers import GPT2Config


@register_family
class GPT2Family(Family):
    name = "gpt2"
    transposed_linear = True  # Conv1D
    model_types = ("gpt2",)
    paper = "https://openai.com/research/better-language-models"
    modules = ModuleMap(
        qkv=("c_attn",),
        attn_out=("attn.c_proj",),
        mlp_in=("mlp.c_fc",),
        mlp_out=("mlp.c_proj",),
        blocks="transformer.h",
    )

    def tiny_config(self, arch: TinyArchitecture, vocab_size: int, special_ids: dict[str, int]) -> GPT2Config:
        from transformers import GPT2Config

        return GPT2Config(
            vocab_size=vocab_size,
            n_embd=arch.hidden,
            n_layer=arch.layers,
            n_head=arch.heads,
            n_inner=arch.ffn,
            n_positions=arch.max_positions,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **special_ids,
        )


register_checkpoint(
    "openai-community/gpt2-xl",
    "gpt2",
    "1.5B",
    Resources(gpus=1, cpus=4, memory_gb=16),
    architecture={"model_type": "gpt2", "n_embd": 1600, "n_layer": 48, "n_head": 25, "vocab_size": 50257},
)
