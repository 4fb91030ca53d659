"""DP-SGD's pieces: a clipping-only step against a hand-clipped reference, the two accountants, Poisson
sampling, the empirical ε bound, duplication in the split, and the defence's place in configs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.sweepfile.sweep import parse_sweep
from privauditor.tasks.data.splits import draw_split
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.defences import default_delta
from privauditor.tasks.defences.dp import Privacy, noise_multiplier, rdp_epsilon, spent_epsilon
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.spec.config import SplitConfig, cell_config
from privauditor.tasks.stats.lower_bound import cp_upper, epsilon_bound
from privauditor.tasks.training.loop import LocalStep, apply_seeded, collate, encode

from .helpers import fresh_base


def _batch(tokenizer, n: int):
    examples = load_dataset("finance").examples[:n]  # records of different lengths: the batch is padded
    return collate(encode(tokenizer, examples, 64, False), tokenizer.pad_token_id, False)


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
@pytest.mark.parametrize("technique", ["lora", "prefix", "full"])
def test_clipping_only_step_equals_a_hand_clipped_reference(technique, precision):
    """σ = 0: opacus's clipping of this module's per-record gradients is, tensor by tensor, the mean of
    each record's own gradient (its loss alone, one backward pass each) scaled to norm ≤ C. After a warm
    step (LoRA's B is zero at first, so A gets no gradient), every trainable tensor's gradient is non-zero.
    At ``bf16-mixed`` both sides run under the same autocast (the reference's own bf16 products round
    otherwise than the batched ones: 5 % of each tensor's largest entry)."""
    from privauditor.tasks.adaptations import build_adaptation
    from privauditor.tasks.infra.precision import autocast, to_precision

    family, tokenizer, base = fresh_base("gpt2")
    model = apply_seeded(build_adaptation(technique, None), base, family, seed=0)
    to_precision(model, precision)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    model.eval()
    LocalStep(model, list(params.values()), 1e-2, 1)(_batch(tokenizer, 4), 1.0)  # the warm step
    batch = _batch(tokenizer, 5)
    reference, norms = {n: torch.zeros_like(p) for n, p in params.items()}, []
    own = []
    for i in range(5):
        row = {k: v[i : i + 1, : int(batch["attention_mask"][i].sum())] for k, v in batch.items()}
        model.zero_grad(set_to_none=True)
        with autocast(model):
            loss = model(**row).loss
        loss.backward()
        own.append({n: p.grad.detach().clone() for n, p in params.items()})
        norms.append(math.sqrt(sum(float(g.pow(2).sum()) for g in own[-1].values())))
    clip = float(np.median(norms))  # some records are clipped, some are not
    for grads, norm in zip(own, norms, strict=True):
        for n, g in grads.items():
            reference[n] += g * min(1.0, clip / (norm + 1e-6)) / 5
    privacy = Privacy(1.0, 1e-3, clip, False, records=20, batch_size=5, epochs=1, seed=0)
    step = privacy.make_step(sigma=3.0, seq2seq=False)(model, list(params.values()), 0.0, 1)  # noise off
    before = {n: p.detach().clone() for n, p in params.items()}
    step(batch, 1.0)
    for n, p in params.items():
        if precision == "fp32":
            assert torch.allclose(p.grad, reference[n], rtol=1e-3, atol=1e-6), (technique, n)
        else:
            scale = float(reference[n].abs().max())
            assert float((p.grad - reference[n]).abs().max()) <= 0.05 * scale, (technique, n)
        assert reference[n].abs().sum() > 0, (technique, n)
        assert torch.equal(p, before[n])  # the rate is 0 here: only the gradient is compared
    assert min(norms) < clip < max(norms)


def test_noise_has_the_calibrated_scale():
    """With noise the privatised gradient differs from the clipped sum by N(0, (σC)²) / B per coordinate."""
    family, tokenizer, base = fresh_base("gpt2")
    from privauditor.tasks.adaptations import build_adaptation

    model = apply_seeded(build_adaptation("lora", None), base, family, seed=0)
    params = [p for p in model.parameters() if p.requires_grad]
    batch = _batch(tokenizer, 4)
    grads = []
    for sigma in (0.0, 2.0):
        privacy = Privacy(1.0, 1e-3, 0.5, True, records=16, batch_size=4, epochs=1, seed=0)
        privacy.make_step(sigma, False)(model, params, 0.0, 1)(batch, 1.0)
        grads.append(torch.cat([p.grad.flatten() for p in params]))
    noise = (grads[1] - grads[0]) * 4
    assert abs(float(noise.std()) / (2.0 * 0.5) - 1) < 0.05 and abs(float(noise.mean())) < 0.05


@pytest.mark.parametrize(
    ("epsilon", "q", "epochs"), [(1.0, 8 / 36, 80), (8.0, 8 / 36, 80), (4.0, 0.01, 30), (8.0, 1.0, 10)]
)
def test_calibrated_sigma_spends_the_target_and_a_second_accountant_agrees(epsilon, q, epochs):
    steps = round(epochs / q)
    delta = 1e-5
    sigma = noise_multiplier(epsilon, delta, q, steps)
    spent = spent_epsilon(sigma, q, steps, delta)
    assert 0.97 * epsilon <= spent <= epsilon * 1.001
    assert abs(rdp_epsilon(sigma, q, steps, delta) / spent - 1) < 0.05
    assert spent_epsilon(sigma, q, steps // 4, delta) < spent  # a checkpoint a quarter of the way in


def test_poisson_batches_draw_each_record_at_the_sampling_rate():
    def draw(seed: int) -> list[list[int]]:
        sampler = Privacy(1.0, 1e-3, 1.0, True, records=40, batch_size=4, epochs=50, seed=seed).sampler()
        return [b for epoch in range(50) for b in sampler(epoch)]

    batches, again = draw(3), draw(3)
    assert batches[:10] != batches[10:20] and draw(4) != batches  # each epoch, and each seed, draws anew
    sizes = [len(b) for b in batches]
    assert batches == again and len(batches) == 50 * 10
    assert abs(np.mean(sizes) - 4) < 0.3 and min(sizes) < 2 < 6 < max(sizes)  # sizes vary, as Poisson's do


def test_clopper_pearson_and_the_bound():
    from scipy.stats import beta

    assert cp_upper(np.array([3]), 20, 0.05)[0] == pytest.approx(beta.ppf(0.95, 4, 17))
    assert cp_upper(np.array([0]), 20, 0.05)[0] == pytest.approx(1 - 0.05 ** (1 / 20))
    member = np.r_[np.ones(32, bool), np.zeros(32, bool)]
    perfect = epsilon_bound(member, np.r_[np.arange(32) + 100.0, np.arange(32)], delta=1e-3)
    assert perfect["eps_lower"] == pytest.approx(perfect["eps_ceiling"]) and perfect["eps_ceiling"] > 1.0
    noise = epsilon_bound(member, np.random.default_rng(0).normal(size=64), delta=1e-3)
    assert noise["eps_lower"] is None and noise["eps_ceiling"] == perfect["eps_ceiling"]
    bigger = np.r_[np.ones(256, bool), np.zeros(256, bool)]
    assert epsilon_bound(bigger, bigger.astype(float), 1e-3)["eps_ceiling"] > perfect["eps_ceiling"] + 1
    inverted = epsilon_bound(member, -np.r_[np.arange(32) + 100.0, np.arange(32)], delta=1e-3)
    assert inverted["eps_lower"] is None  # the decision is the attack's: a high score says "member"


def test_duplication_repeats_groups_of_members_and_leaves_the_parts_alone():
    data = load_dataset("finance")
    plain = draw_split(data, SplitConfig(members=40, nonmembers=10, validation=5), seed=0)
    split = draw_split(data, SplitConfig(members=40, nonmembers=10, validation=5, repeated=0.3, repeats=[2, 8]),
                       seed=0)  # fmt: skip
    assert split.hashes() == plain.hashes() and split.members == plain.members
    times = split.repeats()
    assert sorted(times.values()) == [2] * 6 + [8] * 6 and set(times) == {
        e.sample_id for e in split.members[:12]
    }
    counts = {e.sample_id: 0 for e in split.members}
    for e in split.trained:
        counts[e.sample_id] += 1
    assert all(counts[i] == times.get(i, 1) for i in counts) and len(split.trained) == 40 + 6 + 42
    with pytest.raises(PrivauditorError, match="split.repeats must be counts of at least 2"):
        SplitConfig(repeated=0.5)


BASE = {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "finance"}


def test_the_defence_is_in_the_cell_id_and_dp_cannot_run_what_it_cannot_train(capsys):
    plain = cell_config(BASE).resolve(build=False)
    dp = cell_config(BASE, ["defence=dp", "defence_params.dp.epsilon=1"]).resolve(build=False)
    control = cell_config(BASE, ["defence=dp", "defence_params.dp={epsilon: 1, noise: false}"]).resolve(
        build=False
    )
    assert "__lora+dp-e1__" in dp.cell_id() and "__lora+dp-e1-nonoise__" in control.cell_id()
    assert "+" not in plain.cell_id() and plain.defence_params == {}
    assert dp.defence_params["delta"] == 1e-5  # min(1e-5, n^-1.1): 100^-1.1 = 6.3e-3
    assert default_delta(100) == 1e-5 and default_delta(10**6) == pytest.approx(1e6**-1.1)
    assert default_delta(40_000) < 1e-5 and default_delta(30_000) == default_delta(0) == 1e-5
    with pytest.raises(PrivauditorError, match="none trains nothing"):
        cell_config(BASE | {"adaptation": "none"}, ["defence=dp"])
    with pytest.raises(PrivauditorError, match="unknown defence 'dpp'"):
        cell_config(BASE, ["defence=dpp"])
    with pytest.raises(PrivauditorError, match="epsilon must be a number > 0"):
        cell_config(BASE, ["defence=dp", "defence_params.dp.epsilon=0"])
    code = main(["cell", "--model", "tiny-gpt2", "--adaptation", "lora", "--dataset", "finance", "--out", "x",
                 "--set", "defence=dp", "--set", "train.workers=2"])  # fmt: skip
    assert code == 2 and "DeepSpeed and train.workers > 1 are not supported" in capsys.readouterr().err


def test_a_sweep_crosses_defences_and_drops_what_dp_cannot_train():
    sweep = parse_sweep({
        "matrix": {"model": ["tiny-gpt2"], "adaptation": ["none", "lora"], "dataset": ["finance"],
                   "defence": ["none", {"dp": {"epsilon": 1}}, {"dp": {"epsilon": 8}}]},
        "defence_params": {"dp": {"max_grad_norm": 0.5}},
        "overrides": [{"defence": "dp", "train": {"lr": 0.01}}],
    })  # fmt: skip
    cells = {(c.adaptation, c.defence, c.defence_params.get("dp", {}).get("epsilon")): c for c in sweep.cells}
    assert sorted(cells, key=str) == sorted(
        [("none", "none", None), ("lora", "none", None), ("lora", "dp", 1), ("lora", "dp", 8)], key=str
    )
    assert cells[("lora", "dp", 8)].defence_params["dp"]["max_grad_norm"] == 0.5
    assert cells[("lora", "dp", 8)].train.lr == 0.01 and cells[("lora", "none", None)].train.lr is None
    assert [(d.model, d.adaptation) for d in sweep.dropped] == [("tiny-gpt2", "none")]
    assert "none trains nothing" in sweep.dropped[0].reason
    with pytest.raises(PrivauditorError, match="matrix.defence entry"):
        parse_sweep({"matrix": {"model": ["tiny-gpt2"], "adaptation": ["lora"], "dataset": ["finance"],
                                "defence": [["dp"]]}})  # fmt: skip


def test_user_level_dp_samples_whole_units_and_clips_a_units_copies_once():
    """``unit: user``: a record's copies are one privacy unit. Units are Poisson-sampled at q = batch size /
    units (all copies of a drawn unit in its batch), and a unit's gradient is the sum over its copies,
    clipped once: here a record trained 3 times beside 2 singletons."""
    from privauditor.tasks.adaptations import build_adaptation
    from privauditor.tasks.defences.dp import copies

    units = (0, 1, 2, 0, 0)  # record 0 trained three times
    privacy = Privacy(1.0, 1e-5, 0.05, False, records=5, batch_size=2, epochs=40, seed=0, units=units)
    assert privacy.count == 3 and privacy.sample_rate == pytest.approx(2 / 3) and privacy.steps_per_epoch == 2
    sampler = privacy.sampler()
    batches = [b for epoch in range(40) for b in sampler(epoch)]
    assert all(({0, 3, 4} <= set(b)) or not ({0, 3, 4} & set(b)) for b in batches)  # copies go together
    assert abs(np.mean([0 in b for b in batches]) - 2 / 3) < 0.08
    record = privacy.record(1.0, 10)
    assert record["unit"] == "user" and record["units"] == 3

    family, tokenizer, base = fresh_base("gpt2")
    model = apply_seeded(build_adaptation("lora", None), base, family, seed=0)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    LocalStep(model, list(params.values()), 1e-2, 1)(_batch(tokenizer, 4), 1.0)  # LoRA's B non-zero
    examples = load_dataset("finance").examples[:3]
    rows = [examples[0], examples[1], examples[0], examples[2], examples[0]]
    batch = collate(encode(tokenizer, rows, 64, False), tokenizer.pad_token_id, False)
    assert copies(batch).tolist() == [0, 1, 0, 2, 0]
    step = privacy.make_step(sigma=3.0, seq2seq=False)(model, list(params.values()), 0.0, 1)
    own, _ = step.grad_samples(batch)
    clip = privacy.max_grad_norm
    expected = {n: torch.zeros_like(p) for n, p in params.items()}
    for group in ([0, 2, 4], [1], [3]):
        summed = {n: own[n][group].sum(0) for n in params}
        norm = math.sqrt(sum(float(g.pow(2).sum()) for g in summed.values()))
        assert norm > clip  # every unit is clipped here, the repeated one once
        for n in params:
            expected[n] += summed[n] * clip / (norm + 1e-6) / privacy.batch_size
    step(batch, 1.0)
    for n, p in params.items():
        assert torch.allclose(p.grad, expected[n], rtol=1e-3, atol=1e-7), n


def test_dp_cells_train_at_the_rate_chosen_under_dp_and_a_set_rate_still_wins():
    """``DP_RATES`` (benchmarks/learning_rates.py --dp-epsilon 4) for ``dp`` cells on the bases it covers,
    the undefended choice for the rest, ``train.lr`` over both."""
    from privauditor.tasks.adaptations._rates import DP_RATES, RATES

    def lr(model, *assignments):
        settings = {"model": model, "adaptation": "ia3", "dataset": "finance"}
        return cell_config(settings, list(assignments)).resolve(build=False).train.lr

    assert DP_RATES["ia3"]["tiny-llama"] != RATES["ia3"]["tiny-llama"]  # the choice this checks moved
    assert lr("tiny-llama", "defence=dp") == DP_RATES["ia3"]["tiny-llama"]
    assert lr("tiny-llama") == RATES["ia3"]["tiny-llama"]
    assert lr("tiny-gpt2", "defence=dp") == RATES["ia3"]["tiny-gpt2"]  # no DP choice for this base
    assert lr("tiny-llama", "defence=dp", "train.lr=0.5") == 0.5
