"""Models: registry and name resolution, offline tiny bases (pre-trained, cached), real-path loading."""

from __future__ import annotations

import json

import pytest
import torch

from privauditor.orchestrator.cli import main
from privauditor.tasks.infra.errors import PrivauditorError, UnknownNameError
from privauditor.tasks.models import (
    FAMILIES,
    MODELS,
    TinyArchitecture,
    _pretrain,
    _tiny,
    active_profile,
    checkpoint_path,
    load_model,
    masked_lm_path,
    pretrain_report,
    resolve_model,
)

TINY = ["tiny-llama", "tiny-opt", "tiny-bloom", "tiny-gptj", "tiny-t5", "tiny-gpt2"]
PAPER = [
    "yahma/llama-7b-hf",
    "facebook/opt-6.7b",
    "bigscience/bloom-7b1",
    "EleutherAI/gpt-j-6b",
    "google/flan-t5-xl",
]
# Held-out NLL must beat the unigram baseline by at least this much (nats) even with the fast profile
# (0.4 nats is a third lower perplexity; the default profile reaches more, see the README):
# a model that only learned token frequencies sits at margin 0.
MIN_MARGIN_NATS = 0.4


def test_ls_models_lists_tiny_bases_and_paper_checkpoints(capsys):
    assert main(["ls", "models"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]}
    assert set(TINY) | set(PAPER) <= listed


def test_paper_checkpoints_carry_resources():
    for name in PAPER:
        spec = MODELS.get(name)
        assert spec.source == "hub" and spec.resources.gpus >= 1 and spec.resources.memory_gb >= 16


def test_unknown_model_name_suggests_the_closest(capsys):
    with pytest.raises(UnknownNameError, match="did you mean 'tiny-llama'"):
        resolve_model("tiny-lama")
    assert main(["ls", "models"]) == 0


def test_missing_local_directory_and_bad_dtype_are_clear_errors(tmp_path):
    with pytest.raises(PrivauditorError, match="does not exist"):
        resolve_model(str(tmp_path / "nowhere"))
    with pytest.raises(PrivauditorError, match="has no config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(PrivauditorError, match="unknown dtype 'fp8'"):
        resolve_model("tiny-llama", dtype="fp8")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(PrivauditorError, match="model_type 'mamba' belongs to no supported family"):
        resolve_model(str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY)
def test_tiny_base_is_really_pretrained(name):
    """Each offline base is built from its family's own architecture and beats the unigram baseline."""
    loaded = load_model(name)
    report = pretrain_report(loaded.path)
    assert loaded.model.config.model_type in loaded.family.model_types
    assert report["held_out_loss"] < report["unigram_loss"] - MIN_MARGIN_NATS, report
    assert report["loss_curve"][-1] < report["loss_curve"][0] - 2.0
    limit = getattr(loaded.model.config, "max_position_embeddings", None) or getattr(
        loaded.model.config, "n_positions", None
    )
    if limit is not None and loaded.family.name not in ("t5", "bloom"):  # relative / ALiBi positions
        assert limit >= TinyArchitecture().max_positions
    assert loaded.seq2seq == (name == "tiny-t5")
    assert len(loaded.tokenizer) == loaded.model.config.vocab_size


@pytest.mark.slow
def test_masked_lm_is_really_pretrained():
    report = pretrain_report(masked_lm_path())
    assert report["held_out_loss"] < report["unigram_loss"] - MIN_MARGIN_NATS, report


@pytest.mark.slow
def test_cached_base_is_loaded_not_retrained(monkeypatch):
    first = _tiny.tiny_base_dir("llama")

    def no_training(*args, **kwargs):
        raise AssertionError("a cached base was pre-trained again")

    monkeypatch.setattr(_pretrain, "pretrain", no_training)
    assert _tiny.tiny_base_dir("llama") == first
    assert load_model("tiny-llama").path == str(first)


@pytest.mark.slow
def test_cache_key_changes_with_what_the_weights_depend_on(monkeypatch, tmp_path):
    """Another profile or architecture is another base; the built one is never served for it."""
    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(tmp_path))
    built = []
    monkeypatch.setattr(
        _tiny, "_build_and_save", lambda out, *a: built.append(out) or (out / "x").write_text("1")
    )
    base = _tiny.tiny_base_dir("opt", active_profile("fast"))
    assert _tiny.tiny_base_dir("opt", active_profile("fast")) == base and len(built) == 1
    assert _tiny.tiny_base_dir("opt", active_profile("default")) != base
    assert _tiny.tiny_base_dir("opt", active_profile("fast"), TinyArchitecture(layers=3)) != base
    assert _tiny.tiny_base_dir("bloom", active_profile("fast")) != base
    assert len(built) == 4


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-t5"])
def test_local_directory_loads_through_the_real_path(tmp_path, name):
    """A checkpoint saved to disk resolves by its config and gives the same logits as the original."""
    original = load_model(name, device="cpu")
    original.model.save_pretrained(tmp_path)
    original.tokenizer.save_pretrained(tmp_path)
    spec = resolve_model(str(tmp_path))
    assert (spec.source, spec.family) == ("local", original.family.name)
    reloaded = load_model(spec, device="cpu")
    ids = original.tokenizer("Net income rose 12% in 2021.", return_tensors="pt")["input_ids"]
    kwargs = {"decoder_input_ids": ids} if original.seq2seq else {}
    with torch.inference_mode():
        assert torch.equal(original.model(ids, **kwargs).logits, reloaded.model(ids, **kwargs).logits)


def test_every_family_has_a_tiny_base_registered():
    assert {f"tiny-{name}" for name in FAMILIES.names()} <= set(MODELS.names())
    assert set(TINY) == {f"tiny-{name}" for name in FAMILIES.names()}


def test_a_tiny_base_of_another_pretraining_seed_is_another_base_with_its_familys_rates(
    monkeypatch, tmp_path
):
    """``tiny-llama-s1``: the same recipe but the pre-training seed, so another cache folder (another
    base, a fresh block); it trains at the rates chosen for ``tiny-llama`` (same shape, corpus, profile)."""
    from privauditor.tasks.adaptations import chosen_rates
    from privauditor.tasks.spec.config import cell_config

    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(tmp_path))
    profiles = []
    monkeypatch.setattr(_tiny, "tiny_base_dir", lambda family, profile, build=True: profiles.append(profile))
    spec = resolve_model("tiny-llama-s3")
    assert (spec.name, spec.family, spec.source, spec.pretrain_seed, spec.registered) == (
        "tiny-llama-s3",
        "llama",
        "tiny",
        3,
        "tiny-llama",
    )
    for name in ("tiny-llama", "tiny-llama-s3", "tiny-llama-s4"):
        checkpoint_path(name, build=False)
    assert [p.seed for p in profiles] == [0, 3, 4]
    assert len({p.key()["seed"] for p in profiles}) == 3  # the seed is in the cache key
    settings = {"model": "tiny-llama-s3", "adaptation": "lora", "dataset": "finance", "seed": 0}
    train = cell_config(settings, ["attacks=[loss]"]).resolve(build=False).train
    assert train.lr == chosen_rates("lora")["tiny-llama"]
    with pytest.raises(PrivauditorError, match="pre-training seed 0 is 'tiny-llama' itself"):
        resolve_model("tiny-llama-s0")
    with pytest.raises(UnknownNameError, match="did you mean 'tiny-llama'"):
        resolve_model("tiny-lama-s1")
