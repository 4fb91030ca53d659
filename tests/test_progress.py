"""Progress lines: a live bar on a terminal, plain periodic lines elsewhere, files from workers."""

from __future__ import annotations

import io

import pytest

from privauditor.tasks.infra import progress
from privauditor.tasks.infra.progress import Progress, duration, line, read_folder, to_folder


class Clock:
    """time.monotonic, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    found = Clock()
    monkeypatch.setattr(progress.time, "monotonic", found)
    to_folder(None)
    yield found
    to_folder(None)


def test_the_eta_follows_the_rate_so_far():
    assert line("training", 25, 100, 60.0) == "training: 25/100 (25 %), elapsed 60 s, ETA 3 min"
    assert line("training", 100, 100, 240.0) == "training: 100/100 (100 %), elapsed 4 min"
    assert (duration(30), duration(600), duration(7200)) == ("30 s", "10 min", "2.0 h")


def test_off_a_terminal_a_line_every_period_and_one_at_the_end(clock):
    stream = io.StringIO()  # not a terminal
    shown = Progress("scoring 40 texts", 4, stream)
    shown.update(1)
    clock.now += progress.PERIOD  # a period later: one line
    shown.update(1)
    shown.update(1)  # within the same period: none
    clock.now += 1
    shown.close()
    lines = stream.getvalue().splitlines()
    assert lines == [
        f"scoring 40 texts: 2/4 (50 %), elapsed {progress.PERIOD:.0f} s, ETA {progress.PERIOD:.0f} s",
        f"scoring 40 texts: 3/4 (75 %), elapsed {progress.PERIOD + 1:.0f} s, ETA 10 s",
    ]


def test_a_short_step_and_a_quiet_one_print_nothing(clock):
    stream = io.StringIO()
    with Progress("short", 2, stream) as shown:
        shown.update(2)
    with Progress("another rank", 2, stream, quiet=True) as shown:
        clock.now += 2 * progress.PERIOD
        shown.update(2)
    assert stream.getvalue() == ""


def test_a_worker_reports_into_a_folder_that_the_driver_reads(clock, tmp_path):
    stream = io.StringIO()
    to_folder(tmp_path)
    shown = Progress("pre-training tiny-llama", 700, stream)
    clock.now += 60
    shown.update(350)
    assert read_folder(tmp_path) == ["pre-training tiny-llama: 350/700 (50 %), elapsed 60 s, ETA 60 s"]
    clock.now += 60
    shown.update(350)
    shown.close()
    assert read_folder(tmp_path) == ["pre-training tiny-llama: 700/700 (100 %), elapsed 2 min"]
    assert stream.getvalue() == ""  # nothing printed in the worker


def test_a_sweeps_eta_weighs_cells_by_their_predicted_cost():
    """Two cheap cells done out of two cheap and two dear ones: the plan-weighted ETA counts the dear
    ones' cost, where a count of cells would say 'as long again'."""
    import math

    from privauditor.orchestrator.run.console import eta_seconds

    weights = {"a": 1.0, "b": 1.0, "c": 4.0, "d": 4.0}
    assert eta_seconds(60.0, {"a", "b"}, 4, weights) == 240.0  # 60 s per 2 units, 8 units left
    assert eta_seconds(60.0, {"a", "b"}, 4, {}) == 60.0  # unpriced: by count
    assert eta_seconds(60.0, {"a", "b"}, 4, {"a": 1.0}) == 60.0  # partly priced: by count
    assert math.isnan(eta_seconds(5.0, set(), 4, weights))
