"""The command-line reference page, ``docs/cli.md``, generated from the argument parser.

    python -m privauditor.orchestrator.cli_reference > docs/cli.md

Every command and subcommand's ``--help``, as ``privauditor`` prints it at 100 columns, in parser order.
``tests/test_docs.py`` fails when the page and the parser disagree, so the page is never edited by hand.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser below it, depth first, in the order they were added."""
    yield parser
    for action in parser._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                yield from _commands(sub)


def reference() -> str:
    """The page's Markdown."""
    from .cli import build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps help to the terminal's width
    try:
        sections = [(p.prog, p.format_help().rstrip()) for p in _commands(build_parser())]
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    lines = [
        "# Command-line reference",
        "",
        "Every command's `--help`, generated from the argument parser with Python "
        f"{sys.version_info.major}.{sys.version_info.minor} (`python -m privauditor.orchestrator.cli_reference "
        "> docs/cli.md`; a test fails when this page and the parser disagree).",
        "",
    ]
    for prog, text in sections:
        lines += [f"## `{prog}`", "", "```text", text, "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(reference())
