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
