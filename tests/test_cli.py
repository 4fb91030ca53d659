"""The command line's own surface: --version, every command's examples, help that names what exists."""

from __future__ import annotations

import pytest

from privauditor.orchestrator.cli import build_parser, main
from privauditor.orchestrator.cli_help import EXAMPLES
from privauditor.orchestrator.sweepfile.sweep import SWEEPS_DIR


def test_version_names_the_package_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"privauditor {version('privauditor')}")


def test_every_command_has_examples_that_parse():
    """Each command's (or action's: ``board export``) --help ends in examples, and each example is a
    command line the parser accepts."""
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {name.split()[0] for name in EXAMPLES} <= set(commands) and "board export" in EXAMPLES
    for name, examples in EXAMPLES.items():
        command, *action = name.split()
        sub = commands[command]
        if action:
            sub = sub._subparsers._group_actions[0].choices[action[0]]
        assert "examples:" in sub.format_help() and examples[0] in sub.format_help()
        for example in examples:
            argv = example.replace("\\\n", " ").split()[1:]
            parser.parse_args([a.strip("'") for a in argv])  # exits (SystemExit) if it does not parse


def test_sweep_help_and_listing_name_every_shipped_sweep(capsys):
    shipped = sorted(p.stem for p in SWEEPS_DIR.glob("*.yaml"))
    assert len(shipped) >= 8
    help_text = " ".join(
        build_parser()._subparsers._group_actions[0].choices["validate"].format_help().split()
    )
    assert all(name in help_text for name in shipped)
    assert main(["ls", "sweeps"]) == 0
    listed = capsys.readouterr().out
    # each sweep's first sentence whole: the quick sweep's ends in "(a few minutes)."
    assert "(a few minutes)." in " ".join(listed.split())
    assert all(f"\n{name} " in listed for name in shipped)


def test_listings_fit_a_terminal_and_say_what_they_show(capsys):
    for what in ("attacks", "sweeps", "defences"):
        assert main(["ls", what]) == 0
        assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 100, what
    assert main(["ls", "models"]) == 0
    models = capsys.readouterr().out
    assert " 0.0 " not in models and "<1.5M" in models  # GPU counts as counts; tiny bases sized
    assert main(["ls", "adaptations"]) == 0
    assert "default epochs: used only where a cell sets neither" in " ".join(capsys.readouterr().out.split())


def test_the_metrics_table_reads_the_tpr_at_0_false_positives_where_a_fixed_fpr_cannot_be_measured():
    """With 80 non-members neither fixed FPR can be measured: a column gives each attack's TPR at 0 false
    positives with its interval, a footnote the FPR that 0 of 80 bound (3.7 %), a skipped attack's reason
    goes below the table; with 2,000 non-members every rate is measured and the column is not there."""
    import numpy as np

    from privauditor.orchestrator.tables import metrics_table
    from privauditor.tasks.stats.metrics import attack_metrics

    rng = np.random.default_rng(0)
    few = np.r_[np.ones(40, bool), np.zeros(80, bool)]
    metrics = {
        "loss": attack_metrics(few, rng.normal(size=120) + 2 * few, resamples=20),
        "zlib": attack_metrics(few, rng.normal(size=120), resamples=20),
        "reference": {"skipped": "no reference model: a full checkpoint needs --reference"},
    }
    table = metrics_table(metrics)
    header, _, *lines = table.splitlines()
    assert "TPR@0FP [95% CI]" in header and "eps" not in header  # no attack has an ε bound
    m = metrics["loss"]
    assert m["tpr_at_1pct_fpr"] is None and m["tpr_at_0fp"] is not None
    low, high = m["tpr_at_0fp_ci"]
    (loss,) = [line for line in lines if line.startswith("loss ")]
    assert loss.split()[4:6] == ["-", "-"] and f"{m['tpr_at_0fp']:.3f} [{low:.3f}, {high:.3f}]" in loss
    assert "members scored above all 80 non-members" in table and "FPR <= 3.7 %" in table
    assert lines[-1] == "reference skipped: no reference model: a full checkpoint needs --reference"
    assert max(map(len, table.splitlines())) <= 100

    many = np.r_[np.ones(200, bool), np.zeros(2000, bool)]
    measured = {
        "loss": attack_metrics(many, rng.normal(size=2200) + many, resamples=20) | {"eps_ceiling": 2.0}
    }
    plain = metrics_table(measured)
    assert "TPR@0FP" not in plain and "eps >= (ceiling)" in plain and len(plain.splitlines()) == 3
