"""Leaderboard summaries: mean ± std per adaptation / attack at each cell's last checkpoint, across seeds
when there are several."""

from __future__ import annotations

import types
import typing

import pytest

from privauditor.orchestrator.report.formats import markdown_table
from privauditor.orchestrator.report.leaderboard import SUMMARY_HEADER, summary


def row(adaptation, seed, auc, attack="loss", epoch=3):
    cell = f"{adaptation}-{seed}"
    return {
        "cell_id": cell,
        "adaptation": adaptation,
        "seed": seed,
        "auc": auc,
        "attack": attack,
        "epoch": epoch,
    }


def test_one_seed_spreads_over_rows_and_several_seeds_over_seed_means():
    found = [
        row("lora", 0, 0.6), row("lora", 0, 0.8, "zlib"),  # seed 0 mean 0.7
        row("lora", 1, 0.5), row("lora", 1, 0.5, "zlib"),  # seed 1 mean 0.5
        row("full", 0, 0.9), row("full", 0, 0.7, "zlib"),
        row("full", 0, 0.1, epoch=1), row("lora", 1, 0.1, "zlib", epoch=1),  # earlier checkpoints: left out
    ]  # fmt: skip
    table = {r[0]: r[1:] for r in summary(found, "adaptation")}
    assert table["lora"] == ["0.600 ± 0.141", "2 seeds", 4]  # mean of (0.7, 0.5), sample std sqrt(0.02)
    assert table["full"] == ["0.800 ± 0.100", "rows", 2]  # one seed: population std of the rows
    assert [r[0] for r in summary(found, "adaptation")] == ["full", "lora"]  # best first
    per_attack = {r[0]: r[1:] for r in summary(found, "attack")}
    assert per_attack["zlib"] == ["0.625 ± 0.177", "2 seeds", 3]  # seed means 0.75 (lora, full) and 0.5


def test_attacks_are_compared_over_the_same_cells_and_one_that_abstained_is_shown_apart():
    """``surp`` has no row where it abstained on every text (two of four cells here, the leakiest): its mean
    over its own cells (0.85) beat every attack's over all four, though over the same two cells ``loss``
    reads 0.80 against it. It is left out of both summaries and listed apart with its cell count."""
    from privauditor.orchestrator.report.summary import APART_HEADER, apart_table

    aucs = {
        "full": (0.9, 0.8, 0.95),
        "head": (0.7, 0.6, 0.75),
        "lora": (0.6, 0.5, None),
        "ia3": (0.5, 0.5, None),
    }
    found = [
        row(adaptation, 0, auc, attack)
        for adaptation, values in aucs.items()
        for attack, auc in zip(("loss", "zlib", "surp"), values, strict=True)
        if auc is not None
    ]
    per_attack = summary(found, "attack")
    assert [r[0] for r in per_attack] == ["loss", "zlib"]  # surp (0.85 over 2 cells) no longer first
    assert per_attack[0][1:] == ["0.675 ± 0.148", "rows", 4]  # mean of 0.9, 0.7, 0.6, 0.5
    assert apart_table(found) == [["surp", "2 of 4", "0.850", "loss 0.800"]]
    assert len(APART_HEADER) == 4
    per_adaptation = {r[0]: r[1] for r in summary(found, "adaptation")}
    assert per_adaptation["full"] == "0.850 ± 0.050"  # loss and zlib alone, as for lora and ia3
    assert apart_table([r for r in found if r["attack"] != "surp"]) == []


def test_summary_tables_have_a_cell_per_header_column():
    found = [row("lora", 0, 0.6), row("full", 0, 0.7)]
    table = markdown_table(["adaptation", *SUMMARY_HEADER], summary(found, "adaptation"))
    assert all(line.count("|") == len(SUMMARY_HEADER) + 2 for line in table.splitlines())
    with pytest.raises(ValueError, match="cells of its header"):
        markdown_table(["adaptation", "AUC", "rows"], summary(found, "adaptation"))


def test_every_technique_has_a_colour_and_marker_of_its_own_in_every_figure():
    """The pages' palette: 14 registered techniques, 14 colours and 14 (colour, marker) pairs; a defended
    cell keeps its technique's colour, dashed and with another marker; the same name, the same style."""
    from privauditor.orchestrator.report.plots import technique_style
    from privauditor.tasks.adaptations import ADAPTATIONS

    names = sorted(ADAPTATIONS.names())
    styles = [technique_style(n) for n in names]
    assert len({s["color"] for s in styles}) == len(names) >= 12
    assert len({(s["color"], s["marker"]) for s in styles}) == len(names)
    plain, private = technique_style("full"), technique_style("full+dp-e1")
    assert private["color"] == plain["color"] and private["linestyle"] == "--" != plain["linestyle"]
    assert private["marker"] != plain["marker"] and technique_style("lora") == technique_style("lora")


def test_the_row_type_names_the_schema_columns_in_order_with_their_kinds():
    """``Row`` (what the type checker reads) and ``ROW`` (what builds the files) are written apart: a
    column added to one and not the other, moved, or of another kind fails here."""
    from privauditor.orchestrator.report.row_schema import KINDS, ROW, Row

    python = {"string": str, "int": int, "float": float, "bool": bool}
    assert set(python) == set(KINDS)
    hints = typing.get_type_hints(Row)
    assert list(hints) == [c.name for c in ROW]
    for column in ROW:
        hint = hints[column.name]
        given = set(typing.get_args(hint)) if isinstance(hint, types.UnionType) else {hint}
        assert given - {type(None)} == {python[column.kind]}, (column.name, column.kind, hint)
