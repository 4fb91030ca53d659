"""The documentation: the site builds with warnings as errors, every page is in its navigation, the
command-line reference is the parser's own help, and the README stays short."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from privauditor.orchestrator.cli_reference import reference

ROOT = Path(__file__).resolve().parents[1]


def test_the_cli_reference_page_is_the_parsers_help():
    page, fresh = (ROOT / "docs" / "cli.md").read_text(), reference()
    made_with = re.search(r"with Python (\d+\.\d+)", page).group(1)
    if made_with == f"{sys.version_info.major}.{sys.version_info.minor}":
        assert page == fresh, (
            "docs/cli.md is stale: python -m privauditor.orchestrator.cli_reference > docs/cli.md"
        )
    else:  # argparse lays help out differently across Python versions: the commands and options must agree
        for pattern in (r"^## `.*`$", r"--[a-z][a-z-]+"):
            assert set(re.findall(pattern, page, re.M)) == set(re.findall(pattern, fresh, re.M))


def test_the_docs_build_with_warnings_as_errors_and_list_every_page(tmp_path):
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav):
        for entry in nav:
            value = next(iter(entry.values()))
            yield from pages(value) if isinstance(value, list) else [value]

    listed = list(pages(config["nav"]))
    assert sorted(listed) == sorted(p.name for p in (ROOT / "docs").glob("*.md")) and len(set(listed)) == len(
        listed
    )
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        capture_output=True, text=True, env=os.environ | {"NO_MKDOCS_2_WARNING": "1"}, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "privauditor board release" in (site / "cli" / "index.html").read_text()
    assert (site / "exposure_canaries.png").exists()  # figures travel with their pages


def test_the_readme_fits_a_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: move detail to docs/"


def test_the_readmes_headline_is_the_default_runs_answer_in_the_docs():
    """The README's sample of the headline is the table docs/findings.md records for the default run, the
    same rows in the same format (both copied from one run's findings.md), with the same commit named."""

    def answer(text: str, heading: str) -> tuple[str, list[str]]:
        section = text.split(heading, 1)[1].split("\n#", 1)[0]
        return re.search(r"commit ([0-9a-f]{7})", section).group(1), [
            line for line in section.splitlines() if line.startswith("|")
        ]

    readme = answer((ROOT / "README.md").read_text(), "### Tiny bases: the default run's Answer")
    docs = answer((ROOT / "docs" / "findings.md").read_text(), "## The default run's Answer")
    assert readme == docs and len(readme[1]) >= 4
    assert (
        readme[1][0] == "| rank | technique | class | trainable | mean AUC | mean rank (range over blocks) |"
    )
