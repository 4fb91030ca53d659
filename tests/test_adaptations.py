"""Contract tests for every adaptation technique on every family it supports.

Bases are the offline tiny bases (pre-trained once per cache, loaded fresh for each test). A new
technique or family is tested here without editing this file.
"""

from __future__ import annotations

import copy

import pytest
import torch

from privauditor.tasks.adaptations import ADAPTATIONS, build_adaptation, chosen_rates
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.models import FAMILIES
from privauditor.tasks.training.loop import Loop, TrainConfig, apply_seeded, collate, encode, train
from privauditor.tasks.training.snapshots import restore, trainable_state

from .helpers import EXAMPLES, fresh_base

PAIRS = [
    (family, technique)
    for family in FAMILIES.names()
    for technique in ADAPTATIONS.names()
    if not ADAPTATIONS.get(technique)().unsupported_reason(family)
]


def logits(model, batch):
    with torch.inference_mode():
        return model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).logits


def loss(model, batch):
    """The model's loss on ``batch`` in eval mode (no dropout): the same number every time."""
    with torch.inference_mode():
        return model.eval()(**batch).loss.item()


def inert(model, batch) -> bool:
    """Whether the batch's loss is unchanged, bit for bit, when every trainable tensor moves by a seeded
    0.1 std (the weights are put back)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in trainable]
    start = loss(model, batch)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in trainable:
            p.add_(0.1 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    moved = loss(model, batch)
    with torch.no_grad():
        for p, value in zip(trainable, saved, strict=True):
            p.copy_(value)
    return moved == start


@pytest.mark.parametrize(("family_name", "technique"), PAIRS)
def test_technique_contract(family_name, technique, tmp_path, seed):
    family, tokenizer, base = fresh_base(family_name)
    pristine = copy.deepcopy(base)
    adaptation = build_adaptation(technique)
    model = apply_seeded(adaptation, base, family, seed=seed)  # new weights drawn from this seed alone
    trainable = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    batch = collate(encode(tokenizer, EXAMPLES, 48, family.seq2seq), tokenizer.pad_token_id, family.seq2seq)

    if not adaptation.trains:  # none, icl: the base itself (icl's demonstrations: test_icl.py)
        assert not trainable
        assert torch.equal(logits(model, batch), logits(pristine, batch))
        return
    assert sum(t.numel() for t in trainable.values()) > 0
    # a technique that says it starts as the base is the base, logit for logit (its step-0 checkpoint is
    # scored from the base's shared views); one that does not, is not
    same = torch.equal(logits(model.eval(), batch), logits(pristine.eval(), batch))
    assert same == adaptation.starts_as_base, (technique, same)

    # Steps on one fixed batch lower that batch's loss at some point of the run: the lowest of the 12
    # snapshots' losses (eval mode: the same number every time) is below the start, at a tenth of the
    # technique's own rate (Adam's first steps move every weight by about the rate, whatever its gradient;
    # at the full rate a 3-text batch can overshoot for good). Measured over seeds 0-4, every pair fell
    # (the least: opt x prefix, 0.0005 nats, far above float noise) except P-tuning: bloom x ptuning seed 4
    # stays 0.0005 nats above its start for 24 steps (its randomly initialised MLP encoder overshoots at
    # the first step). For P-tuning the test asserts what does not depend on the draw: its weights train
    # and its output moves; its learning on 64 members is benchmarks/learning_rates.py's figure.
    before = loss(model, batch)
    lr = adaptation.default_lr_on(f"tiny-{family.name}", family.name) / 10
    config = TrainConfig(epochs=12, lr=lr, batch_size=len(EXAMPLES), seed=seed)
    states = {}
    train(
        model, tokenizer, EXAMPLES, config, family.seq2seq,
        Loop(checkpoints=range(1, 13), on_checkpoint=lambda epoch, step: states.__setitem__(step, trainable_state(model))),
    )  # fmt: skip
    lows = []
    for state in states.values():
        restore(model, state)
        lows.append(loss(model, batch))
    # A base on which the technique cannot move the batch's loss at all (tiny-opt's fast base, as built on
    # some machines, gives prefix tuning's virtual tokens no attention at the scored positions) cannot
    # show learning: the rest is still checked, then the pair is reported as an expected failure.
    inert_base = None
    if technique == "ptuning":
        assert lows[-1] != before
    elif min(lows) >= before and inert(model, batch):
        inert_base = (
            f"{family_name} x {technique}: this base's loss on the batch stays the same to the last bit when "
            "every trainable tensor moves by 0.1 std, so no step can lower it"
        )
    else:
        assert min(lows) < before, (before, lows)

    # Only trainable weights changed, and they did change.
    after = dict(model.named_parameters())
    assert all(torch.equal(after[n].detach(), before) for n, before in frozen.items())
    assert any(not torch.equal(after[n].detach(), before) for n, before in trainable.items())

    # Saved as safetensors, reloaded onto an untouched base: identical logits.
    adaptation.save(model, tmp_path)
    assert list(tmp_path.glob("*.safetensors")) and not list(tmp_path.glob("*.bin"))
    reloaded = build_adaptation(technique).load(pristine, family, tmp_path)
    assert torch.equal(logits(model.eval(), batch), logits(reloaded.eval(), batch))
    if inert_base:
        pytest.xfail(inert_base)


def test_unsupported_pair_is_a_clear_error():
    family, _, base = fresh_base("opt")
    with pytest.raises(PrivauditorError, match="'llama_adapter' supports only the llama family, not opt"):
        build_adaptation("llama_adapter").apply(base, family)


def test_unknown_hyperparameter_suggests_the_field():
    with pytest.raises(PrivauditorError, match="did you mean 'alpha'"):
        build_adaptation("lora", {"alpah": 32})
    assert build_adaptation("lora", {"r": 4}).r == 4
    with pytest.raises(PrivauditorError, match="lora targets must be one of all, qv, not 'q'"):
        build_adaptation("lora", {"targets": "q"})


@pytest.mark.parametrize("family_name", ["llama", "gpt2", "t5"])
def test_lora_targets_every_projection_or_query_value(family_name):
    def adapted(targets):
        family, _, base = fresh_base(family_name)
        model = build_adaptation("lora", {"targets": targets}).apply(base, family)
        return {
            n.rsplit(".lora_A", 1)[0].removeprefix("base_model.model.")
            for n, _ in model.named_parameters()
            if ".lora_A" in n
        }

    family, _, base = fresh_base(family_name)
    m = family.modules
    projections = {
        n
        for n, _ in base.named_modules()
        if any(n.endswith("." + s) for s in (*m.qkv, *m.attn_out, *m.mlp_in, *m.mlp_out))
    }
    everything, query_value = adapted("all"), adapted("qv")
    assert everything == projections and query_value < everything
    assert not any(n.endswith("." + m.mlp_out[0]) for n in query_value)


def test_ls_adaptations_lists_unsupported_pairs(capsys):
    from privauditor.orchestrator.cli import main

    assert main(["ls", "adaptations"]) == 0
    table = capsys.readouterr().out.split("\n\n")[0]  # the footnote below the table is prose
    rows = {line.split()[0]: line for line in table.splitlines()[2:]}
    assert "bloom, gpt2, gptj, opt, t5" in rows["llama_adapter"]
    assert rows["lora"].rstrip().endswith("-")
    from privauditor.tasks.models import MODELS

    chosen = chosen_rates("lora")
    tiny = sorted(r for m, r in chosen.items() if MODELS.get(m).source == "tiny")
    packaged = sorted(r for m, r in chosen.items() if MODELS.get(m).source == "package")
    columns = rows["lora"].split()  # name, default lr, tiny range, packaged range, epochs, unsupported

    def span(rates):
        return "-" if not rates else "-".join(dict.fromkeys(f"{r:g}" for r in (rates[0], rates[-1])))

    assert columns[2] == span(tiny) and columns[2] != "-"
    assert columns[3] == span(packaged)


def test_every_technique_documents_its_defaults():
    for name, cls in ADAPTATIONS.items():
        assert cls.__module__.endswith("." + name), "adaptation names equal their file stems"
        assert cls.default_epochs >= (1 if cls.trains else 0) and cls.default_lr >= 0
        assert (cls.__doc__ or "").strip() and (
            __import__(cls.__module__, fromlist=["x"]).__doc__ or ""
        ).strip()
