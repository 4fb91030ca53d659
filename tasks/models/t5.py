"""T5 family (Raffel et al. 2020, https://arxiv.org/abs/1910.10683; Flan-T5: Chung et al. 2022,
https://arxiv.org/abs/2210.11416): encoder-decoder with relative position buckets. The tiny base uses
Flan-T5's gated-GELU MLP (``wi_0``/``wi_1``). Trained and scored with the prompt as encoder input and
the target as decoder labels. The paper's checkpoint is ``google/flan-t5-xl``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._spec import Family, ModuleMap, Resources, TinyArchitecture, register_checkpoint, register_family

if TYPE_CHECKING:
    from transformers import T5Config


@register_family
class T5Family(Family):
    name = "t5"
    model_types = ("t5", "mt5", "umt5")
    seq2seq = True
    # Measured with the fast profile: held-out loss 6.40 at the shared 1e-2, 6.32 at 5e-3 (unigram 6.89).
    pretrain_lr_scale = 0.5
    paper = "https://arxiv.org/abs/1910.10683"
    modules = ModuleMap(
        qkv=("SelfAttention.q", "SelfAttention.k", "SelfAttention.v"),
        attn_out=("SelfAttention.o",),
        mlp_in=("DenseReluDense.wi", "DenseReluDense.wi_0", "DenseReluDense.wi_1"),
        mlp_out=("DenseReluDense.wo",),
        blocks="decoder.block",
    )

    def tiny_config(self, arch: TinyArchitecture, vocab_size: int, special_ids: dict[str, int]) -> T5Config:
        from transformers import T5Config

        return T5Config(
            vocab_size=vocab_size,
            d_model=arch.hidden,
            d_kv=arch.hidden // arch.heads,
            d_ff=arch.ffn * 2 // 3,  # gated: two input projections
            num_layers=arch.layers,
            num_decoder_layers=arch.layers,
            num_heads=arch.heads,
            feed_forward_proj="gated-gelu",
            dropout_rate=0.0,  # see TinyArchitecture: no dropout in a short pre-training
            decoder_start_token_id=special_ids["pad_token_id"],
            # Tied, as the original T5: the output is then scaled by d_model^-0.5. Untied (Flan-T5) with
            # T5's init starts a tiny model at a loss near 80 and wastes most of a short pre-training.
            tie_word_embeddings=True,
            **special_ids,
        )


register_checkpoint(
    "google/flan-t5-xl",
    "t5",
    "2.8B",
    Resources(gpus=1, cpus=8, memory_gb=24),
    dtype="bfloat16",
    architecture={
        "model_type": "t5",
        "d_model": 2048,
        "d_ff": 5120,
        "d_kv": 64,
        "num_heads": 32,
        "num_layers": 24,
        "num_decoder_layers": 24,
        "vocab_size": 32128,
        "feed_forward_proj": "gated-gelu",
        "tie_word_embeddings": False,
    },
)
