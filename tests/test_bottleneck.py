"""Bottleneck adapters (adapter_h, adapter_p, parallel) on random-init tiny bases of every family: per
(family, technique, placement) the contract (exact no-op when fresh, only adapters train, counts from the
module map, loss falls, save/load reproduces logits), then placement spot checks and bad settings."""

from __future__ import annotations

import copy
import dataclasses
import functools
import subprocess
import sys

import pytest
import torch

from privauditor.tasks.adaptations import ADAPTATIONS
from privauditor.tasks.adaptations._base import WEIGHTS_FILE, modules_matching
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.models import FAMILIES
from privauditor.tasks.models._spec import ModuleMap, TinyArchitecture

TECHNIQUES = [(t, p) for t in ("adapter_h", "adapter_p", "parallel") for p in ("privauditor", "paper")]
RANK = TinyArchitecture().hidden // 2  # the default bottleneck rule, min(256, hidden // 2), on tiny bases


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One intra-op thread: on a busy 2-core box two OpenMP threads made tiny forwards ~30x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def _base(family_name: str):
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    family, special = FAMILIES.get(family_name), dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    auto = AutoModelForSeq2SeqLM if family.seq2seq else AutoModelForCausalLM
    return auto.from_config(family.tiny_config(TinyArchitecture(), 4096, special)).eval()


def fresh(family_name: str):
    """A private copy of the family's tiny random-init base (building one per test would be slower)."""
    return copy.deepcopy(_base(family_name))


def run(model, family, labels: bool = False):
    """Forward a fixed batch (2 x 12 tokens); T5 gets it as encoder input and decoder labels."""
    ids = torch.randint(3, 4096, (2, 12), generator=torch.Generator().manual_seed(1))
    if family.seq2seq:
        return model(input_ids=ids, labels=ids) if labels else model(input_ids=ids, decoder_input_ids=ids)
    return model(input_ids=ids, labels=ids if labels else None)


def adapted(family_name: str, technique: str, placement: str, seed: int = 0, **fields):
    family = FAMILIES.get(family_name)
    adaptation = ADAPTATIONS.get(technique)(placement=placement, **fields)
    torch.manual_seed(seed)  # the adapters' initial weights come from this seed, not from earlier tests
    return adaptation, family, adaptation.apply(fresh(family_name), family)


def expected_params(model, family, technique: str, placement: str) -> int:
    """Adapters x (d_in·r + r + r·d_out + d_out), from the module map alone (Conv1D weight is (in, out))."""
    m = family.modules
    in_out = lambda x: x.weight.shape[::-1] if hasattr(x, "in_features") else x.weight.shape  # noqa: E731
    after = lambda suffixes: [(in_out(x)[1],) * 2 for _, x in modules_matching(model, suffixes)]  # noqa: E731
    if technique == "parallel" and placement == "privauditor":  # beside each q/k/v (fused: d -> 3d)
        sites = [in_out(x) for _, x in modules_matching(model, m.qkv)]
    elif technique == "adapter_h" and placement == "paper":  # after attention and after the MLP
        sites = after(m.attn_out + m.mlp_out)
    else:  # one per MLP (d -> d); adapter_h's default has a second one on the MLP's input
        sites = after(m.mlp_out) * (2 if technique == "adapter_h" else 1)
    return sum(d_in * RANK + RANK + RANK * d_out + d_out for d_in, d_out in sites)


@pytest.mark.parametrize("technique,placement", TECHNIQUES)
@pytest.mark.parametrize("family_name", FAMILIES.names())
def test_adapter_contract(family_name, technique, placement, tmp_path, seed):
    base = _base(family_name)
    adaptation, family, model = adapted(family_name, technique, placement, seed)
    with torch.no_grad():
        base_logits = run(base, family).logits
        assert torch.equal(run(model, family).logits, base_logits), "a fresh adapter must be a no-op"

    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".bottleneck" in n for n in trainable)
    assert sum(p.numel() for p in trainable.values()) == expected_params(base, family, technique, placement)

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(trainable.values(), lr=1e-2)
    losses = []
    for _ in range(12):
        loss = run(model, family, labels=True).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1, losses
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, before[name]) == (name not in trainable), name
    with torch.no_grad():
        trained_logits = run(model, family).logits
    assert not torch.allclose(trained_logits, base_logits)

    adaptation.save(model, tmp_path)
    from safetensors import safe_open

    with safe_open(str(tmp_path / WEIGHTS_FILE), framework="pt") as saved:
        assert set(saved.keys()) == set(trainable)
    reloaded = type(adaptation)(placement=placement).load(fresh(family_name), family, tmp_path)
    with torch.no_grad():
        assert torch.equal(run(reloaded, family).logits, trained_logits)


def perturbed(model):
    """Random up-projections, so every adapter changes its site's output."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad and ".up." in name:
                parameter.normal_(0, 0.5)
    return model


def adapter_sites(model) -> set[str]:
    return {n for n, _ in model.named_modules() if n.rsplit(".", 1)[-1].startswith("bottleneck")}


def test_placements_by_name():
    assert adapter_sites(adapted("llama", "adapter_p", "privauditor")[2]) == {
        f"model.layers.{i}.mlp.down_proj.bottleneck" for i in range(2)
    }
    gpt2_p = adapter_sites(adapted("gpt2", "adapter_p", "paper")[2])
    assert gpt2_p == {f"transformer.h.{i}.mlp.c_proj.bottleneck" for i in range(2)}
    gpt2_h = adapter_sites(adapted("gpt2", "adapter_h", "paper")[2])
    assert {f"transformer.h.0.{s}.c_proj.bottleneck" for s in ("attn", "mlp")} <= gpt2_h
    # OPT's fc1/fc2 hang off the decoder layer itself: the shared-input adapter lives there.
    opt_h = adapter_sites(adapted("opt", "adapter_h", "privauditor")[2])
    assert "model.decoder.layers.0.bottleneck_mlp_in" in opt_h
    for technique, placement in TECHNIQUES:
        sites = adapter_sites(adapted("t5", technique, placement)[2])
        assert {s.split(".")[0] for s in sites} == {"encoder", "decoder"}, (technique, placement)
        assert not any("EncDecAttention" in s for s in sites)


@pytest.mark.parametrize("family_name,mlp,inputs", [
    ("llama", "model.layers.0.mlp", ("gate_proj", "up_proj")),
    ("t5", "encoder.block.0.layer.1.DenseReluDense", ("wi_0", "wi_1")),
])  # fmt: skip
def test_gated_mlp_input_adapter_is_shared(family_name, mlp, inputs):
    _, family, model = adapted(family_name, "adapter_h", "privauditor")
    seen, calls, parent = {}, [], perturbed(model).get_submodule(mlp)
    parent.register_forward_pre_hook(lambda module, args: seen.__setitem__("mlp", args[0]))
    for name in inputs:  # registered after the adapter's pre-hook, so they see what the projection gets
        parent.get_submodule(name).register_forward_pre_hook(lambda m, a, n=name: seen.__setitem__(n, a[0]))
    parent.bottleneck_mlp_in.register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        run(model, family)
        assert len(calls) == 1, "one adapter call per MLP forward, shared by both gated projections"
        first, second = (seen[name] for name in inputs)
        assert torch.equal(first, second) and not torch.equal(first, seen["mlp"])
        assert torch.allclose(first, seen["mlp"] + parent.bottleneck_mlp_in(seen["mlp"]))


@pytest.mark.parametrize("family_name,mlp,extra", [
    ("llama", "model.layers.1.mlp", ()),
    ("t5", "decoder.block.1.layer.2.DenseReluDense", ()),
    ("bloom", "transformer.h.0.mlp", (torch.zeros(2, 5, 128),)),  # BloomMLP(x, residual) adds the residual
    ("gpt2", "transformer.h.1.mlp", ()),
])  # fmt: skip
def test_parallel_beside_whole_mlp(family_name, mlp, extra):
    model = perturbed(adapted(family_name, "parallel", "paper")[2])
    base_mlp, adapted_mlp = _base(family_name).get_submodule(mlp), model.get_submodule(mlp)
    x = torch.randn(2, 5, 128)
    with torch.no_grad():
        expected = base_mlp(x, *extra) + adapted_mlp.bottleneck_mlp(x)
        assert torch.allclose(adapted_mlp(x, *extra), expected, atol=1e-6)


def test_parallel_beside_fused_qkv_and_serial_output():
    model = perturbed(adapted("gpt2", "parallel", "privauditor")[2])
    c_attn, x = model.transformer.h[0].attn.c_attn, torch.randn(2, 5, 128)
    base = _base("gpt2").transformer.h[0]
    with torch.no_grad():
        assert torch.allclose(c_attn(x), base.attn.c_attn(x) + c_attn.bottleneck(x), atol=1e-6)
    model = perturbed(adapted("gpt2", "adapter_p", "privauditor")[2])
    c_proj, h = model.transformer.h[0].mlp.c_proj, torch.randn(2, 5, 512)
    with torch.no_grad():
        y = base.mlp.c_proj(h)
        assert torch.allclose(c_proj(h), y + c_proj.bottleneck(y), atol=1e-6)


def test_bf16_base_keeps_float32_adapters():
    family = FAMILIES.get("llama")
    base = fresh("llama").to(torch.bfloat16)
    model = ADAPTATIONS.get("adapter_h")().apply(copy.deepcopy(base), family)
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}
    with torch.no_grad():
        assert torch.equal(run(model, family).logits, run(base, family).logits)
    run(model, family, labels=True).loss.backward()  # mixed dtypes meet only inside the hooks' casts


def test_deepcopy_of_adapted_model_is_independent():
    _, family, model = adapted("llama", "parallel", "paper")
    clone = copy.deepcopy(perturbed(model))
    with torch.no_grad():
        logits = run(model, family).logits
        assert torch.equal(run(clone, family).logits, logits)
        perturbed(clone)
        assert torch.equal(run(model, family).logits, logits)


def test_bad_settings_are_clear_errors():
    _, family, model = adapted("opt", "adapter_h", "privauditor")
    with pytest.raises(PrivauditorError, match="already has bottleneck adapters"):
        ADAPTATIONS.get("adapter_p")().apply(model, family)
    with pytest.raises(PrivauditorError, match="placement 'middle'"):
        ADAPTATIONS.get("parallel")(placement="middle")
    with pytest.raises(PrivauditorError, match="non_linearity 'swish'"):
        ADAPTATIONS.get("adapter_h")(non_linearity="swish")
    with pytest.raises(PrivauditorError, match="bottleneck"):
        ADAPTATIONS.get("adapter_p")(bottleneck=0)

    class NoMlp:
        modules = ModuleMap(qkv=("q_proj",), attn_out=("o_proj",), mlp_in=("w1",), mlp_out=("w2",), blocks="")

    model = fresh("llama")
    with pytest.raises(PrivauditorError, match="no module ending in w2"):
        ADAPTATIONS.get("adapter_h")().apply(model, NoMlp())
    assert not adapter_sites(model) and all(p.requires_grad for p in model.parameters()), "left untouched"


def test_plugins_are_dataclasses_with_defaults():
    for name in ("adapter_h", "adapter_p", "parallel"):
        cls = ADAPTATIONS.get(name)
        assert dataclasses.is_dataclass(cls) and cls.name == name and cls.paper.startswith("https://")
        assert cls().hyperparameters()["placement"] == "privauditor"
    houlsby = ADAPTATIONS.get("adapter_h")
    assert (houlsby(bottleneck=8).rank(4096), houlsby().rank(4096), houlsby().rank(128)) == (8, 256, RANK)


def test_discovery_does_not_import_torch():
    code = (
        "import sys, privauditor.tasks.adaptations.adapter_h, privauditor.tasks.adaptations.adapter_p,"
        "privauditor.tasks.adaptations.parallel; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"
