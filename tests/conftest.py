"""Test-wide settings: offline, W&B off, the fast pre-training profile, one artefact cache per run, and
the seed of tests that train (``$PRIVAUDITOR_TEST_SEED``).

Tiny bases are pre-trained with the ``fast`` profile (seconds per family, still far below the unigram
baseline) unless ``PRIVAUDITOR_PRETRAIN_PROFILE`` says otherwise. The artefact cache is
``$PRIVAUDITOR_CACHE`` when set (CI points it at a fresh folder so everything is built from scratch),
else the user's cache, where the fast profile's keys never collide with the default ones.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("PRIVAUDITOR_PRETRAIN_PROFILE", "fast")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def seed() -> int:
    """The seed of tests that train or attack: ``$PRIVAUDITOR_TEST_SEED`` (default 0). Their assertions
    must hold whatever it is (run the suite with 1 and 2 too), so none rests on one lucky draw."""
    return int(os.environ.get("PRIVAUDITOR_TEST_SEED", "0"))


@pytest.fixture
def rendered():
    """A function giving a page's DOM as headless Chromium leaves it (``--dump-dom``); without a browser
    the test skips, or fails under ``CI=true`` (CI installs Debian's chromium, so page tests never pass
    by not running)."""
    import subprocess

    from privauditor.orchestrator.report.audit_report import browser

    def dom(page, fragment: str = "") -> str:
        """``page``'s DOM once its scripts are done (a virtual-time budget: the row table inflates its
        data asynchronously); ``fragment``: the address's ``#...`` part, as a reader's link gives it."""
        binary = browser()
        if binary is None:
            if os.environ.get("CI") == "true":
                pytest.fail("no Chromium found: CI installs Debian's chromium for the page tests")
            pytest.skip("no Chromium here (install Debian's chromium to render the page)")
        return subprocess.run(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000", "--dump-dom",
             page.as_uri() + (f"#{fragment}" if fragment else "")],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout  # fmt: skip

    return dom


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests skip themselves where CUDA is absent."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
