"""A release's tables: the confirmatory verdict (confirmed, refuted, not established) from Page's L of the
order and of its reverse, and the committed release's tables rebuilt byte for byte from its records."""

from __future__ import annotations

import numpy as np
import pytest

from privauditor.orchestrator.board.release_tables import _page_line
from privauditor.orchestrator.report import battery
from privauditor.orchestrator.sweepfile.hypothesis import parse

CLAIM = parse({"classes": {"prompt": "soft", "ptuning": "soft", "lora": "adapters", "ia3": "adapters",
                           "full": "output", "head": "output"}, "order": ["soft", "adapters", "output"]})  # fmt: skip


def values(means, blocks=8, spread=0.01, seed=0):
    """block -> technique -> AUC: each class at its mean, with a little noise per technique and block."""
    rng = np.random.default_rng(seed)
    classes = CLAIM.classes
    return {(f"m{i}", "finance"): {t: means[c] + rng.normal(0, spread) for t, c in classes.items()}
            for i in range(blocks)}  # fmt: skip


@pytest.mark.parametrize(
    ("means", "verdict"),
    [
        ({"soft": 0.5, "adapters": 0.6, "output": 0.7}, "confirmed"),
        ({"soft": 0.7, "adapters": 0.6, "output": 0.5}, "refuted"),
        ({"soft": 0.6, "adapters": 0.6, "output": 0.6}, "not established"),
    ],
)
def test_the_verdict_reads_page_of_the_order_and_of_its_reverse(means, verdict):
    found = battery.run(values(means, spread=0.05 if verdict == "not established" else 0.01), CLAIM)
    line, said = _page_line(found, CLAIM)
    assert said == verdict and "one-sided, 8 blocks, soft < adapters < output" in line
    forward, reverse = (float(part.split("p = ")[1].split(" ")[0].rstrip(";,")) for part in line.split("; "))
    assert (forward <= 0.05) == (verdict == "confirmed") and (reverse <= 0.05) == (verdict == "refuted")


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
STORE = ROOT / "releases" / "2026-12"
PAGE = ROOT / "docs" / "release-2026-12.md"
BEGIN, END = (
    "<!-- privauditor board tables releases/2026-12 --hypothesis release -->",
    "<!-- end of the tables -->",
)


def test_the_committed_release_was_pre_registered_and_its_page_rebuilds_from_its_records():
    """Every committed record ran on code that descends from the hypothesis's commit, on its test
    blocks; once the release is made (its manifest), the page's tables are the records' byte for byte."""
    from privauditor.orchestrator.board.check import valid_records
    from privauditor.orchestrator.board.ranked import load_hypothesis, registration_of
    from privauditor.orchestrator.board.release_tables import tables
    from privauditor.orchestrator.board.store import Store

    if not (ROOT / ".git").exists():
        pytest.skip("the registration reads the checkout's git history")
    store = Store(STORE)
    records = valid_records(store)
    claim, name = load_hypothesis("release")
    found = registration_of(claim, name, records)
    assert records and found.confirmatory, found.reason
    if (STORE / "releases" / "2026-12.json").exists():
        text = PAGE.read_text()
        assert BEGIN in text and END in text, f"{PAGE.name} has no tables between the markers"
        quoted = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
        assert quoted == tables(STORE, "release", log=False)  # the committed attempts log, as it is


def test_a_release_tables_run_of_a_pre_registered_test_logs_one_attempt_in_the_store(tmp_path):
    """Rebuilding the tables is the same attempt (the same cells); the count the tables print includes it."""
    import shutil

    from privauditor.orchestrator.board.release_tables import tables

    if not (ROOT / ".git").exists():
        pytest.skip("the registration reads the checkout's git history")
    store = tmp_path / "store"
    shutil.copytree(STORE, store, ignore=shutil.ignore_patterns("attempts", "releases"))
    logged = lambda: sorted(p.name for p in (store / "attempts").rglob("*.json"))  # noqa: E731
    assert not (store / "attempts").exists()
    first = tables(store, "release")
    assert len(logged()) == 1 and "confirmatory attempts logged in the store: 1)" in first
    assert logged() == sorted(p.name for p in (STORE / "attempts").rglob("*.json"))  # the committed one
    assert tables(store, "release") == first and len(logged()) == 1
    assert tables(store, "release", log=False) == first


def test_the_committed_release_exports_validate_against_the_hub_and_every_eval_ever_schemas(tmp_path):
    """The release's records as Hugging Face ``.eval_results`` entries and Every Eval Ever records
    (``board export``), each file checked against the vendored schemas the exports' own tests use."""
    import json

    import jsonschema
    import yaml

    from privauditor.orchestrator.board.export import export
    from tests.test_exports import EEE_RULES, hub_rules

    done = export(STORE, ["hf-eval-results", "every-eval-ever"], tmp_path / "public", "2026-12-05")
    hub = [p for p in (tmp_path / "public" / "eval_results").glob("*.yaml") if "." not in p.stem]
    eee = list((tmp_path / "public" / "every_eval_ever" / "data").rglob("*.json"))
    assert done["cells"] > 0 and len(hub) == len(eee) == done["cells"]
    for path in hub:
        jsonschema.Draft7Validator(hub_rules()).validate(yaml.safe_load(path.read_text()))
    validator = jsonschema.Draft7Validator(EEE_RULES)
    for path in eee:
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(json.loads(path.read_text()))]
        assert errors == [], (path.name, errors)
