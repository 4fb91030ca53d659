"""``report --against``: two folders' rankings side by side, Kendall's τ between them, and the first epoch
at which each technique's members become identifiable."""

from __future__ import annotations

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.report.against import against, first_epochs
from privauditor.orchestrator.report.findings import findings

from .test_findings import synthetic

SWAP = {"head": "prompt", "prompt": "head", "full": "lora", "lora": "full"}


def _reversed(rows):
    """The same rows with the order of the four ranked techniques turned round."""
    return [r | {"adaptation": SWAP.get(r["adaptation"], r["adaptation"])} for r in rows]


def test_the_same_order_agrees_and_a_reversed_one_disagrees(tmp_path):
    rows = synthetic(tmp_path)
    same = "\n".join(against(rows, rows, ("here", "there")))
    assert "Kendall's τ-b between the two orders: +1.000" in same
    assert "| head | 1 | 1 |" in same and "| prompt | 4 | 4 |" in same
    flipped = "\n".join(against(rows, _reversed(rows), ("here", "there")))
    # 4 techniques in exactly the opposite order: tau = -1, exact two-sided p = 2 / 4! = 0.083
    assert "Kendall's τ-b between the two orders: -1.000 (two-sided p = 0.083, 4 techniques" in flipped
    assert "| head | 1 | 4 |" in flipped
    assert "Ranked in one folder only" not in flipped  # llama_adapter is partial in both


def test_first_epoch_to_the_canary_level_per_block(tmp_path):
    rows = synthetic(tmp_path)
    for row in rows:  # head's members identifiable from epoch 1 on, in every block but m2 x d1
        if (
            row["adaptation"] == "head"
            and row["epoch"] >= 1
            and (row["model"], row["dataset"]) != ("m2", "d1")
        ):
            row["auc"] = 0.97
    found = first_epochs(rows, "loss")
    assert found["head"][("m1", "d1")] == 1.0 and found["head"][("m2", "d1")] is None
    assert set(found["full"].values()) == {None}  # 0.70 at most
    text = "\n".join(against(rows, rows, ("a", "b")))
    # blocks sorted: m1xd1, m1xd2, m2xd1, m2xd2, m3xd1, m3xd2
    assert "| head | 1 | 1 | " in text and "| 1 / 1 / - / 1 / 1 / 1 | 1 / 1 / - / 1 / 1 / 1 |" in text


def test_findings_carries_the_section_after_the_answer(tmp_path):
    rows = synthetic(tmp_path / "real")
    text = findings(tmp_path / "real", rows, other=("default", _reversed(rows)))
    assert text.index("## Answer") < text.index("## Against default") < text.index("## Strongest attack")
    assert "| technique | rank, real | rank, default |" in text


def test_against_a_folder_that_is_not_results_is_one_line(tmp_path, capsys):
    synthetic(tmp_path / "real")
    assert main(["report", str(tmp_path / "real"), "--against", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("privauditor: error: --against "), err
