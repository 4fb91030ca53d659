"""The GGUF forms: a plain model written to a GGUF file as llama.cpp's converter would write it, and read
back through transformers' GGUF reader.

Tensor names are transformers' own map inverted (``get_gguf_hf_weights_map``: the reader's map, so what is
written is what it reads), with the three layouts llama.cpp's ``convert_hf_to_gguf.py`` writes and the
reader undoes: LLaMA's query and key rows permuted per head (``LlamaModel.permute``), BLOOM's fused
query-key-value regrouped from per-head to [Q; K; V], GPT-2's ``Conv1D`` matrices transposed. The
metadata are the keys the reader needs (head counts: without them it skips the un-permute silently).
A tied output head is left out, as llama.cpp does, and the reader ties it back. Every 2-D weight whose
rows are a whole number of quantisation blocks (32) is quantised; the rest (norms, biases, T5's relative
position bias, the tiny bases' 341-wide feed-forward rows) stay float32, as llama.cpp's converter keeps
tensors it cannot quantise, and the record names them. The reader dequantises every tensor to float32.
Errors of the quantisers (``gguf/quants.py``): Q8_0 within max|x| / 254 of each weight, x over its block
of 32, plus the float16 rounding of the block's scale; Q4_0 within max|x| / 16 (max|x| / 8 at the end of
the range opposite the block's largest value).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from ..infra.errors import PrivauditorError

ARCH = {"llama": "llama", "gpt2": "gpt2", "bloom": "bloom", "t5": "t5"}
QUANT = {"gguf-q8_0": "Q8_0", "gguf-q4": "Q4_0"}
TRANSPOSED = ("attn_qkv.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight")


def round_trip(
    model: Any, family: str, form: str, work_dir: Path, tokenizer: Any = None
) -> tuple[Any, dict[str, Any]]:
    """``model`` (plain) written to ``work_dir/<form>.gguf`` (with ``tokenizer``: :func:`write`) and read
    back as a plain float32 model."""
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / f"{form}.gguf"
    kinds = write(model, family, path, QUANT[form], tokenizer)
    back = read(path, model.config, seq2seq=family == "t5")
    return back, {"form": form, "quant": QUANT[form], "bytes": path.stat().st_size} | kinds


def write(model: Any, family: str, path: Path, quant: str, tokenizer: Any = None) -> dict[str, Any]:
    """The GGUF file of ``model``: matrices at ``quant`` where their rows allow, the rest float32; with
    ``tokenizer`` (a byte-level BPE), its vocabulary and merges too, so the file stands alone."""
    import gguf
    from transformers.modeling_gguf_pytorch_utils import TensorProcessor, get_gguf_hf_weights_map

    config = model.config
    arch = ARCH[family]
    layers = config.num_layers if family == "t5" else config.num_hidden_layers
    names = get_gguf_hf_weights_map(model, TensorProcessor(), model_type=arch, num_layers=layers)
    to_gguf = {hf: name for name, hf in names.items()}
    state = model.state_dict()
    dropped = sorted(k for k in state if k not in to_gguf and not _tied_alias(k, family))
    if dropped:  # an unmapped tensor would silently ship the base without it
        raise PrivauditorError(f"no GGUF name for {len(dropped)} tensors of the model, e.g. {dropped[0]}")
    qtype = gguf.GGMLQuantizationType[quant]
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    writer = gguf.GGUFWriter(str(path), arch)
    _metadata(writer, config, family)
    if tokenizer is not None:
        _tokenizer(writer, tokenizer)
    floats, quantised = [], 0
    for hf_name, tensor in state.items():
        name = to_gguf.get(hf_name)
        if name is None or (name == "output.weight" and config.tie_word_embeddings):
            continue  # a tied alias, or the tied head: the reader ties it back to the embedding
        array = np.ascontiguousarray(_layout(tensor.detach().float().numpy(), name, config, family))
        if array.ndim == 2 and name.endswith(".weight") and array.shape[-1] % block == 0:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
            quantised += 1
        else:
            writer.add_tensor(name, array.astype(np.float32))
            floats.append(name)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {"quantised_tensors": quantised, "float_tensors": floats}


def read(path: Path, config: Any, seq2seq: bool) -> Any:
    """The GGUF file at ``path`` as a plain float32 model of ``config`` (every tensor in its place)."""
    import copy

    import torch
    import transformers.modeling_gguf_pytorch_utils as reader
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    auto = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
    bar = reader.tqdm  # the reader draws a bar of its own
    reader.tqdm = functools.partial(bar, disable=True)
    try:
        loaded, info = auto.from_pretrained(  # type: ignore[misc]  # a pair with output_loading_info
            path.parent, gguf_file=path.name, config=copy.deepcopy(config), dtype=torch.float32,
            output_loading_info=True,
        )  # fmt: skip
    finally:
        reader.tqdm = bar
    # T5 with its head untied (a merged head_lora) unties its embeddings from `shared` too when loaded:
    # they are the shared embedding (the file holds it once), filled in from it
    aliases = {k for k in info["missing_keys"] if _tied_alias(k, "t5" if seq2seq else "")}
    missing = set(info["missing_keys"]) - aliases
    if missing or info["unexpected_keys"]:
        raise PrivauditorError(
            f"{path.name}: missing {sorted(missing)}, unexpected {sorted(info['unexpected_keys'])}"
        )
    plain_config = copy.deepcopy(loaded.config)
    if hasattr(plain_config, "quantization_config"):  # a GGUF-loaded model is marked quantised
        del plain_config.quantization_config
    model = auto.from_config(plain_config, dtype=torch.float32)
    state = {k: v.to(torch.float32) for k, v in loaded.state_dict().items()}
    state |= {k: state["shared.weight"] for k in aliases}
    model.load_state_dict(state, strict=True)
    return model.eval()


def _tied_alias(name: str, family: str) -> bool:
    """T5's encoder and decoder embeddings: the shared embedding under other names."""
    return family == "t5" and name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def _layout(array: np.ndarray, name: str, config: Any, family: str) -> np.ndarray:
    """The tensor as llama.cpp's converter lays it out (which the reader undoes)."""
    if family == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
        heads = config.num_attention_heads if "attn_q" in name else config.num_key_value_heads
        return (
            array.reshape(heads, 2, array.shape[0] // heads // 2, *array.shape[1:])
            .swapaxes(1, 2)
            .reshape(array.shape)
        )
    if family == "gpt2" and name.endswith(TRANSPOSED):
        return array.T
    if family == "bloom" and "attn_qkv" in name:
        heads, width = config.n_head, config.hidden_size
        shape = (heads, 3, width // heads, width) if array.ndim == 2 else (heads, 3, width // heads)
        grouped: np.ndarray = array.reshape(shape)
        rows = (-1, width) if array.ndim == 2 else (-1,)
        return np.concatenate([grouped[:, i].reshape(rows) for i in range(3)], axis=0)
    return array


def _tokenizer(writer: Any, tokenizer: Any) -> None:
    """A byte-level BPE tokenizer as llama.cpp stores one (``tokenizer.ggml.model`` gpt2: tokens by id,
    special ones typed control, merges, the special ids)."""
    import json

    state = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    if state.get("type") != "BPE":
        raise PrivauditorError(
            f"a {state.get('type')} tokenizer: only byte-level BPE is written to GGUF here"
        )
    vocab = dict(state["vocab"])
    for token in tokenizer.all_special_tokens:  # added tokens outside the model's vocabulary
        vocab.setdefault(token, tokenizer.convert_tokens_to_ids(token))
    tokens = sorted(vocab, key=vocab.__getitem__)
    special = set(tokenizer.all_special_tokens)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in special else 1 for t in tokens])  # 3: control, 1: normal
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in state["merges"]])
    for name, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                      ("pad", writer.add_pad_token_id), ("unk", writer.add_unk_token_id)):  # fmt: skip
        found = getattr(tokenizer, f"{name}_token_id")
        if found is not None:
            add(found)


def _metadata(writer: Any, config: Any, family: str) -> None:
    """The architecture keys llama.cpp writes (the reader needs the head counts and widths)."""
    if family == "llama":
        writer.add_context_length(config.max_position_embeddings)
        writer.add_embedding_length(config.hidden_size)
        writer.add_block_count(config.num_hidden_layers)
        writer.add_feed_forward_length(config.intermediate_size)
        writer.add_head_count(config.num_attention_heads)
        writer.add_head_count_kv(config.num_key_value_heads)
        writer.add_layer_norm_rms_eps(config.rms_norm_eps)
        writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
        writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    elif family == "gpt2":
        writer.add_context_length(config.n_positions)
        writer.add_embedding_length(config.n_embd)
        writer.add_block_count(config.n_layer)
        writer.add_feed_forward_length(config.n_inner or 4 * config.n_embd)
        writer.add_head_count(config.n_head)
        writer.add_layer_norm_eps(config.layer_norm_epsilon)
    elif family == "bloom":
        writer.add_context_length(2048)  # BLOOM has no position limit (ALiBi): llama.cpp's placeholder
        writer.add_embedding_length(config.hidden_size)
        writer.add_block_count(config.n_layer)
        writer.add_feed_forward_length(4 * config.hidden_size)
        writer.add_head_count(config.n_head)
        writer.add_head_count_kv(config.n_head)
        writer.add_layer_norm_eps(config.layer_norm_epsilon)
    else:  # t5
        writer.add_context_length(512)
        writer.add_embedding_length(config.d_model)
        writer.add_block_count(config.num_layers)
        writer.add_feed_forward_length(config.d_ff)
        writer.add_head_count(config.num_heads)
        writer.add_key_length(config.d_kv)
        writer.add_layer_norm_eps(config.layer_norm_epsilon)
        writer.add_relative_attn_buckets_count(config.relative_attention_num_buckets)
        writer.add_decoder_start_token_id(config.decoder_start_token_id)
    writer.add_vocab_size(config.vocab_size)
