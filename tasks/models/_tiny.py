"""Build (once) and locate the offline tiny bases and the masked LM used for neighbour texts.

A tiny base's cache key covers its family config, the tokenizer, the corpus hash, the pre-training
profile and an artefact format version, so any change to what the weights depend on builds a new
base, and nothing else does. The directory holds a standard ``save_pretrained`` checkpoint (safetensors)
plus its tokenizer and ``pretrain.json`` (held-out and unigram loss, timings, loss curve).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..infra.cache import cached_dir
from ._corpus import load_corpus
from ._spec import FAMILIES, MASK_RATE, PretrainProfile, TinyArchitecture, active_profile
from ._tokenizer import SPECIAL_TOKENS, VOCAB_SIZE, tokenizer_dir

TINY_FORMAT = 2  # bump when a change to this module changes the weights built for the same key
MASKED_LM_ARCH = TinyArchitecture(hidden=128, layers=2, heads=4, ffn=512, max_positions=512)


def _special_ids(tokenizer) -> dict[str, int]:
    return {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }


def _build_and_save(
    out: Path, config, objective: str, label: str, tok_dir: Path, profile: PretrainProfile
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoTokenizer

    from ._pretrain import pretrain

    auto = {"causal": AutoModelForCausalLM, "seq2seq": AutoModelForSeq2SeqLM, "mlm": AutoModelForMaskedLM}[
        objective
    ]
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    corpus = load_corpus()
    torch.manual_seed(profile.seed)
    model = auto.from_config(config)
    report = pretrain(model, tokenizer, corpus.train, corpus.held_out, objective, profile, label)
    report.update(parameters=sum(p.numel() for p in model.parameters()), corpus_sha256=corpus.sha256)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar for writing one small file
    model.save_pretrained(out)  # safetensors by default
    tokenizer.save_pretrained(out)
    (out / "pretrain.json").write_text(json.dumps(report, indent=2))


def _tokenizer(build: bool = True):
    """The corpus, the cached tokenizer's directory and the tokenizer itself (None when not built and
    ``build`` is False)."""
    from transformers import AutoTokenizer

    corpus = load_corpus(build)
    tok_dir = None if corpus is None else tokenizer_dir(corpus, build=build)
    if tok_dir is None:
        return None
    return corpus, tok_dir, AutoTokenizer.from_pretrained(tok_dir)


def _cached_model(label, config, objective, profile, corpus, tok_dir, build=True, **extra_key) -> Path | None:
    """The cache directory of one pre-trained model, keyed by everything its weights depend on (None
    when it is not built and ``build`` is False)."""
    key = {
        "format": TINY_FORMAT,
        "config": config.to_dict(),
        "tokenizer": tok_dir.name,
        "corpus": corpus.sha256,
        "profile": profile.key(),
        "objective": objective,
        **extra_key,
    }
    key["config"].pop("transformers_version", None)  # a library upgrade alone does not change weights

    def build_and_save(out: Path) -> None:
        _build_and_save(out, config, objective, label, tok_dir, profile)

    return cached_dir("bases", f"{label}-{profile.name}", key, build_and_save if build else None)


def family_profile(profile: PretrainProfile, family) -> PretrainProfile:
    """``profile`` at ``family``'s learning-rate scale (the corpus stage's rate, with or without the copy
    curriculum before it)."""
    scale, induction = family.pretrain_lr_scale, profile.induction
    if induction is not None:
        induction = replace(induction, then_lr=induction.then_lr * scale)
    return replace(profile, lr=profile.lr * scale, induction=induction)


#: the offline tokenizer's special-token ids: its trainer places the special tokens first, in this order
SPECIAL_IDS = {
    f"{name}_id": list(SPECIAL_TOKENS).index(name) for name in ("pad_token", "bos_token", "eos_token")
}


def tiny_config(
    family_name: str,
    arch: TinyArchitecture | None = None,
    vocab_size: int = VOCAB_SIZE,
    special_ids: dict[str, int] | None = None,
):
    """The transformers config of ``tiny-<family_name>`` (or of that family at ``arch``), without building
    anything: the offline tokenizer's vocabulary size and special ids unless given."""
    family = FAMILIES.get(family_name)
    return family.tiny_config(arch or TinyArchitecture(), vocab_size, special_ids or SPECIAL_IDS)


def masked_lm_config(vocab_size: int = VOCAB_SIZE, pad_token_id: int = SPECIAL_IDS["pad_token_id"]):
    """The config of the offline masked LM that proposes neighbour substitutions (BERT architecture)."""
    from transformers import BertConfig

    arch = MASKED_LM_ARCH
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=arch.hidden,
        num_hidden_layers=arch.layers,
        num_attention_heads=arch.heads,
        intermediate_size=arch.ffn,
        max_position_embeddings=arch.max_positions,
        type_vocab_size=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=pad_token_id,
    )


def tiny_base_dir(
    family_name: str,
    profile: PretrainProfile | None = None,
    arch: TinyArchitecture | None = None,
    build: bool = True,
) -> Path | None:
    """The cached checkpoint directory of ``tiny-<family_name>``, pre-training it first if needed (with
    ``build`` False, None when it is not built)."""
    family = FAMILIES.get(family_name)
    profile = profile or active_profile()
    profile = family_profile(
        replace(profile, induction=profile.induction if family.copy_curriculum else None), family
    )
    found = _tokenizer(build)
    if found is None:
        return None
    corpus, tok_dir, tokenizer = found
    config = tiny_config(family_name, arch, len(tokenizer), _special_ids(tokenizer))
    objective = "seq2seq" if family.seq2seq else "causal"
    return _cached_model(f"tiny-{family_name}", config, objective, profile, corpus, tok_dir, build)


def masked_lm_dir(profile: PretrainProfile | None = None, build: bool = True) -> Path | None:
    """The cached small masked LM (BERT architecture) that proposes neighbour substitutions (with
    ``build`` False, None when it is not built)."""
    profile = profile or active_profile()
    # Post-LN BERT stalls at the causal bases' 1e-2 (measured: 6.87 vs unigram 6.88 at 5e-3, 6.45 at
    # 2e-3), and a masked LM learns from a fraction of the positions only: a fifth of the rate, twice
    # the steps.
    profile = replace(profile, lr=profile.lr * 0.2, steps=profile.steps * 2, induction=None)
    found = _tokenizer(build)
    if found is None:
        return None
    corpus, tok_dir, tokenizer = found
    config = masked_lm_config(len(tokenizer), tokenizer.pad_token_id)
    return _cached_model("tiny-mlm", config, "mlm", profile, corpus, tok_dir, build, mask_rate=MASK_RATE)
