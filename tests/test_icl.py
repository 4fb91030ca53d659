"""In-context learning as an adaptation: its prompts, scoring in context, a cell through the pipeline, and
that the prompts' record ids stay in the cell folder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privauditor.tasks.adaptations import build_adaptation
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.data.splits import draw_split
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.models import load_model
from privauditor.tasks.passes.forward import score_examples
from privauditor.tasks.passes.scorer import Scorer
from privauditor.tasks.spec.config import SplitConfig, cell_config


def test_prompts_hold_every_trained_record_once_and_assign_every_other_text():
    split = draw_split(load_dataset("finance"), SplitConfig(members=10, nonmembers=6, validation=4), seed=3)
    icl = build_adaptation("icl", {"demonstrations": 4})
    contexts, record = icl.contexts(split, seed=3)
    prompts = record["prompts"]
    assert [len(p) for p in prompts] == [4, 4, 2]
    assert sorted(i for p in prompts for i in p) == sorted(e.sample_id for e in split.trained)
    for e in split.members:  # a member is read in the prompt that holds it, so its own record comes first
        assert f"{e.prompt}{e.target}\n" in contexts[e.sample_id]
    for e in (*split.nonmembers, *split.validation):
        assert e.target not in contexts[e.sample_id]
        assert contexts[e.sample_id] in {contexts[prompt[0]] for prompt in prompts}
    assert icl.contexts(split, seed=3) == (contexts, record)
    assert icl.contexts(split, seed=4)[1]["prompts"] != prompts
    with pytest.raises(PrivauditorError, match="demonstrations must be a positive int"):
        build_adaptation("icl", {"demonstrations": 0})


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-t5"])
def test_scoring_in_context_keeps_the_target_positions(name):
    """With a context the scored tokens are exactly those scored without one, also where max_length cuts
    the target; an empty context gives the same numbers as plain scoring."""
    loaded = load_model(name)
    examples = load_dataset("finance").examples[:4]
    plain = score_examples(loaded.model, loaded.tokenizer, examples, 40, loaded.seq2seq)
    contexts = {e.sample_id: "".join(f"{o.prompt}{o.target}\n" for o in examples[::-1]) for e in examples}
    scorer = Scorer(loaded.model, loaded.tokenizer, loaded.seq2seq, None, contexts)
    read = scorer.score(examples, 40)
    empty = Scorer(loaded.model, loaded.tokenizer, loaded.seq2seq, None, dict.fromkeys(contexts, ""))
    for p, r, e in zip(plain, read, empty.score(examples, 40), strict=True):
        assert np.array_equal(p.token_ids, r.token_ids) and np.array_equal(p.token_ids, e.token_ids)
        assert not np.allclose(p.logp, r.logp)  # the context changed the likelihood
        np.testing.assert_allclose(p.logp, e.logp, atol=1e-5)
    assert scorer.context_of(f"{examples[0].sample_id}#3") == contexts[examples[0].sample_id]


def test_demonstrations_past_the_context_are_a_one_line_error(tmp_path):
    settings = {"model": "tiny-gpt2", "adaptation": "icl", "dataset": "finance"}
    too_many = cell_config(
        settings,
        ["split={members: 40, nonmembers: 8, validation: 4}", "adaptation_params.icl.demonstrations=40"],
    )
    with pytest.raises(
        PrivauditorError, match=r"demonstrations \(adaptation icl\).*lower icl's demonstrations"
    ):
        run_cell(too_many, tmp_path)


SPLIT = "split={members: 24, nonmembers: 24, validation: 8}"


@pytest.fixture(scope="module")
def icl_and_base(tmp_path_factory):
    """A canary setting: one demonstration per prompt, so a member is read right after itself; and the
    un-adapted base on the same split."""
    out = tmp_path_factory.mktemp("icl")
    settings = {"model": "tiny-llama", "dataset": "finance", "seed": 0}
    shared = [SPLIT, "attacks=[loss,reference]", "train.max_length=64"]
    icl = run_cell(
        cell_config(settings | {"adaptation": "icl"}, [*shared, "adaptation_params.icl.demonstrations=1"]),
        out,
    )
    return out, icl, run_cell(cell_config(settings | {"adaptation": "none"}, shared), out)


def test_icl_finds_members_in_its_context_and_the_base_finds_nothing(icl_and_base):
    _, icl, base = icl_and_base
    for attack in ("loss", "reference"):
        assert icl.metrics[attack]["auc_ci"][0] > 0.5, (attack, icl.metrics[attack]["auc"])
        low, high = base.metrics[attack]["auc_ci"]
        assert low <= 0.5 <= high, (attack, base.metrics[attack]["auc"])
    record = json.loads((icl.path / "cell.json").read_text())
    assert [c["epoch"] for c in record["checkpoints"]] == [0] and not (icl.path / "adapter").exists()


def test_the_prompts_record_ids_stay_in_the_cell_folder(icl_and_base, tmp_path):
    from privauditor.orchestrator.report.publish import publish

    out, icl, _ = icl_and_base
    prompts = json.loads((icl.path / "demonstrations.json").read_text())["prompts"]
    assert sum(map(len, prompts)) == 24 and all(len(p) == 1 for p in prompts)
    record = json.loads((icl.path / "cell.json").read_text())
    assert record["provenance"]["adaptation_hash"] == record["checkpoints"][0]["adaptation_hash"] != "none"
    publish(out, tmp_path / "public")
    exported = "".join(p.read_text(errors="ignore") for p in (tmp_path / "public").rglob("*") if p.is_file())
    assert not any(sample_id in exported for prompt in prompts for sample_id in prompt)
    assert "demonstrations" not in {p.name.split(".")[0] for p in (tmp_path / "public").rglob("*")}
