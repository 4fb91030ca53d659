"""``privauditor run``: a sweep's cells as Ray Tune trials, finished cells skipped, a leaderboard at the end.

Each cell is one trial, named by its cell id, with its own resources (the model spec's CPUs and GPUs
unless the ``run`` block sets them: :func:`trial_resources`), at most ``run.max_concurrent_trials`` at
once, retried ``run.max_failures`` times (``FailureConfig``), with worker processes reused between
cells (``reuse_actors``) so imports are paid once per worker. A cell that trains under DeepSpeed starts a
Ray Train worker group from its trial (``distributed.py``); its attacks run in parallel on the stored
signals as tasks of an attack actor (:func:`ray_tasks`). Cells whose folder has ``DONE`` are not scheduled at all, so a rerun after a crash, or
after adding cells to the sweep, runs only what is missing. Work cells share is done once: every base
model is built by one Ray task before the trials start, and the shared signals / neighbours are written
under file locks in ``OUT/shared/`` by the first cell that needs them. The leaderboard is rebuilt as
trials finish (at most every 30 s) and when the sweep ends. ``OUT`` may be an object-store URI
(``storage.py``). Ctrl-C stops the running cells (marked ``INTERRUPTED``) and keeps what finished.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path
from typing import Any

from privauditor.tasks.cell import check_results_dir
from privauditor.tasks.config import cell_config
from privauditor.tasks.signals import write_json, write_text

from .storage import Results
from .sweep import Sweep

LEADERBOARD_EVERY_S = 30.0  # while a sweep runs; it is always rebuilt when the sweep ends
FORWARDED_ENV = ("PRIVAUDITOR_", "HF_", "TRANSFORMERS_", "WANDB_", "TOKENIZERS_", "XDG_CACHE_HOME")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}


def _trial(
    config: dict[str, Any],
    out: str,
    settings: dict[str, dict[str, Any]],
    resources: dict[str, dict[str, float]],
    sweep: Sweep | None = None,
) -> None:
    """One cell, inside a Ray Tune trial; a finished cell is mirrored to W&B from here (once: a retried
    trial logs only when it succeeds)."""
    import json

    import ray
    import torch
    from ray import tune

    from privauditor.tasks.cell import CellEnvironment, run_cell

    from .distributed import RayTrainLauncher
    from .plots import roc_png

    _attack_actor()  # started now, so its process start-up overlaps the cell's adaptation
    needs = resources[config["cell_id"]]
    threads = max(1, int(needs["CPU"]))
    torch.set_num_threads(threads)  # two trials' thread pools on the same cores slow both many times over
    cell = cell_config(settings[config["cell_id"]])
    launcher = RayTrainLauncher(cpus_per_worker=threads, gpus_per_worker=min(needs.get("GPU", 0.0), 1.0))
    runtime = {
        "ray_node_id": ray.get_runtime_context().get_node_id(),
        "trial_id": tune.get_context().get_trial_id(),
    }
    env = CellEnvironment(
        distributed=launcher,
        map_jobs=ray_tasks,
        timeout_s=sweep.run.cell_timeout_s if sweep is not None else None,
        runtime=runtime | {"attacks": "ray actor tasks"},
    )
    results = Results.at(out)
    if results.done(cell.cell_id()):  # finished since the sweep started (another run of the same sweep)
        tune.report({"max_auc": float("nan"), "skipped": True})
        return
    outcome = run_cell(cell, results.local, env)
    roc_png(outcome.metrics, results.local / "plots" / f"{outcome.cell_id}.png", outcome.cell_id)
    results.push_cell(outcome.cell_id)  # object stores: every file uploaded, DONE last
    results.upload(f"plots/{outcome.cell_id}.png")
    if sweep is not None and not outcome.skipped:
        from .tracking import log_cell

        record = json.loads((outcome.path / "cell.json").read_text())
        log_cell(sweep.wandb, sweep.name, results.local, record, outcome.metrics)
    aucs = [m["auc"] for m in outcome.metrics.values() if "auc" in m]
    tune.report({"max_auc": max(aucs) if aucs else float("nan"), "skipped": outcome.skipped})


def _reason(error: BaseException) -> str:
    """The cell's own exception in one line (not Ray's wrapper around it)."""
    from privauditor.tasks.errors import one_line

    cause = getattr(error, "cause", None) or error
    return one_line(cause, limit=300)


def ray_tasks(job: Any, jobs: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``job(*args)`` for every args in parallel on this trial's attack actor (Ray actor tasks)."""
    import ray

    actor = _attack_actor()
    return ray.get([actor.run.remote(job, args) for args in jobs])


@functools.cache
def _attack_actor() -> Any:
    """One attack actor per trial process, kept while Tune reuses the process: attacks are milliseconds
    to a second each, so fresh task workers (started and reaped per cell) would cost more than the
    attacks. It asks for no CPU, so it never waits behind trials holding every CPU; its threads run a
    cell's attacks side by side. It is pinned to this trial's node: the jobs read the cell's files
    there (Ray places an actor that asks for no resources on any node)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0, max_concurrency=8)
    class AttackActor:
        def __init__(self) -> None:
            import privauditor.tasks.attack_job  # noqa: F401  # the jobs' module: numpy and pyarrow, no torch

        def run(self, job: Any, args: tuple[Any, ...]) -> Any:
            return job(*args)

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return AttackActor.options(scheduling_strategy=here).remote()


def _build_base(name: str) -> str:
    """A Ray task (1 CPU): build or find one base. One torch thread, as two builds share the cores."""
    import torch

    from privauditor.tasks.models import checkpoint_path, resolve_model

    torch.set_num_threads(1)
    return str(checkpoint_path(resolve_model(name)))


def _build_masked_lm() -> str:
    import torch

    from privauditor.tasks.models._tiny import masked_lm_dir

    torch.set_num_threads(1)
    return str(masked_lm_dir())


def _looks_built(name: str) -> bool:
    """A finished build of the tiny base ``name`` is in the cache for the active pre-training profile (or
    it is not a tiny base). A quick look, not the exact key: a base it misses or mistakes is still built
    exactly once, under the cache's lock, by the first trial that needs it; this spares a warm sweep
    the start-up of one Ray worker per base."""
    from privauditor.tasks.cache import cache_root
    from privauditor.tasks.models import resolve_model
    from privauditor.tasks.models._spec import profile_name

    if name != "tiny-mlm" and resolve_model(name).source != "tiny":
        return True
    return any((cache_root() / "bases").glob(f"{name}-{profile_name()}-*/key.json"))


def trial_resources(cell: Any, run: Any, has_gpus: bool) -> dict[str, float]:
    """A cell's trial resources: CPUs from ``run.cpus_per_trial`` or else the model spec; GPUs from
    ``run.gpus_per_trial`` (a number), none (null), or with ``auto`` the model spec's (at least one)
    when the cluster has GPUs. DeepSpeed workers get their own resources besides these."""
    from privauditor.tasks.models import resolve_model

    needs = resolve_model(cell.model).resources
    cpus = needs.cpus if run.cpus_per_trial is None else run.cpus_per_trial
    if run.gpus_per_trial == "auto":
        gpus = max(needs.gpus, 1.0) if has_gpus else 0.0
    else:
        gpus = float(run.gpus_per_trial or 0.0)
    return {"CPU": float(cpus)} | ({"GPU": gpus} if gpus else {})


def pending(sweep: Sweep, results: Results) -> list[Any]:
    """The sweep's cells without ``DONE`` in ``results``."""
    return [c for c in sweep.cells if not results.done(c.cell_id())]


def leaderboard(results: Results) -> list[dict[str, Any]]:
    """Rebuild the leaderboard from the finished cells (fetched from an object store first)."""
    from .leaderboard import build

    results.pull_summaries()
    found = build(results.local)
    results.push_leaderboard()
    return found


def run_sweep(
    sweep: Sweep, out: str | Path, address: str | None = None, max_concurrent: int | None = None
) -> int:
    """Run every cell of ``sweep`` that is not DONE in ``out`` (a folder or an object-store URI);
    returns the exit code."""
    import yaml

    results = Results.at(out)
    results.fetch("privauditor.json")  # an object store's marker decides, as a folder's does
    check_results_dir(results.local)
    results.upload("privauditor.json")
    write_text(results.local / "sweep.yaml", yaml.safe_dump(sweep.resolved(), sort_keys=False))
    results.upload("sweep.yaml")
    out = results.local
    todo = pending(sweep, results)
    print(f"sweep '{sweep.name}': {len(sweep.cells)} cells, {len(sweep.cells) - len(todo)} already done, "
          f"{len(todo)} to run; results in {results.uri if results.remote else out}", flush=True)  # fmt: skip
    for dropped in sweep.dropped:
        print(f"  dropped {dropped.model} x {dropped.adaptation}: {dropped.reason}")
    for stale in [*out.glob(".*.tmp-*"), *out.glob("plots/.*.tmp-*")]:  # being written when a run was killed
        stale.unlink()
    failures: list[tuple[str, str]] = []
    if todo:
        failures = _tune(sweep, todo, results, address, max_concurrent)
    failed = {cell_id for cell_id, _ in failures}
    interrupted = [c.cell_id() for c in pending(sweep, results) if c.cell_id() not in failed]
    found = leaderboard(results)
    if todo and not interrupted:
        from .tracking import log_leaderboard

        log_leaderboard(sweep.wandb, sweep.name, out, found)
    print(f"leaderboard: {out / 'leaderboard.html'} ({len(found)} rows)")
    for cell_id, error in failures:
        print(f"FAILED {cell_id}: {error}")
    if interrupted:
        for cell_id in interrupted:  # a started cell's partial files stay for inspection; a rerun redoes it
            if (out / "cells" / cell_id).is_dir():
                write_json(out / "cells" / cell_id / "INTERRUPTED", {"cell_id": cell_id})
                results.upload(f"cells/{cell_id}/INTERRUPTED")
        print(
            f"interrupted: {len(interrupted)} cells not finished; run the same command again to finish them"
        )
        return 130
    return 1 if failures else 0


def _tune(
    sweep: Sweep, todo: list[Any], results: Results, address: str | None, max_concurrent: int | None
) -> list:
    import ray
    from ray import tune
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    # Tune's default loggers add TensorBoardX, whose import pulls torch into this driver (about 2.5 s
    # before the first trial starts); the CSV and JSON logs are kept, passed explicitly below
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    run = sweep.run
    started = time.perf_counter()
    started_ray = not ray.is_initialized()
    if started_ray:
        kwargs = {} if address else {"num_cpus": os.cpu_count()}
        ray.init(address=address, include_dashboard=False, runtime_env={"env_vars": _env()}, **kwargs)
    build_base, build_mlm = ray.remote(_build_base), ray.remote(_build_masked_lm)
    shared = [build_base.remote(m) for m in sorted({c.model for c in todo}) if not _looks_built(m)]
    if any("neighbourhood" in c.attacks for c in todo) and not _looks_built("tiny-mlm"):
        shared.append(build_mlm.remote())
    ray.get(shared)  # every base exists before the trials start: built once, not by racing trials
    print(f"bases ready in {time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()  # the ETA counts cells only (a cold cache's base building is done)
    has_gpus = ray.cluster_resources().get("GPU", 0) > 0
    settings = {c.cell_id(): dataclasses.asdict(c) | {"attacks": list(c.attacks)} for c in todo}
    resources = {c.cell_id(): trial_resources(c, run, has_gpus) for c in todo}
    trainable = tune.with_parameters(
        _trial, out=results.uri, settings=settings, resources=resources, sweep=sweep
    )
    trainable = tune.with_resources(
        trainable, lambda config: tune.PlacementGroupFactory([resources[config["cell_id"]]])
    )

    class Progress(tune.Callback):
        """Rebuilds the leaderboard as cells finish (at most every ``LEADERBOARD_EVERY_S``: a rebuild
        holds up Tune's loop, about a second at 200 cells) and prints done / running / failed with an ETA."""

        done = failed = 0  # counted here: Tune sets a trial's final status after these callbacks
        rebuilt = time.perf_counter()

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.done += 1
            if time.perf_counter() - self.rebuilt >= LEADERBOARD_EVERY_S or self.done == 1:
                leaderboard(results)
                self.rebuilt = time.perf_counter()
            self._line(trials, trial)

        def on_trial_recover(self, iteration, trials, trial, **info):
            lines = str(trial.get_pickled_error() or "").strip().splitlines()
            print(f"[privauditor] cell {trial.config['cell_id']} failed (attempt {trial.num_failures}), "
                  f"retrying: {lines[-1] if lines else 'unknown error'}", flush=True)  # fmt: skip

        def on_trial_error(self, iteration, trials, trial, **info):
            self.failed += 1
            self._line(trials, trial)

        def _line(self, trials, finished):
            done, failed = self.done, self.failed
            running = sum(t.status == "RUNNING" and t is not finished for t in trials)
            elapsed = time.perf_counter() - started
            left = len(todo) - done - failed
            eta = f"{elapsed / (done + failed) * left / 60:.1f} min"
            print(f"[privauditor] cells {done + failed}/{len(todo)}: {done} done, {running} running, "
                  f"{failed} failed; elapsed {elapsed / 60:.1f} min, ETA {eta}", flush=True)  # fmt: skip

    tuner = tune.Tuner(
        trainable,
        param_space={"cell_id": tune.grid_search(list(settings))},
        tune_config=tune.TuneConfig(
            max_concurrent_trials=max_concurrent or run.max_concurrent_trials,
            reuse_actors=True,
            trial_name_creator=lambda trial: trial.config["cell_id"],
            trial_dirname_creator=lambda trial: trial.config["cell_id"],
        ),
        run_config=tune.RunConfig(
            name=sweep.name,
            storage_path=run.storage_path
            or (
                f"{results.uri.rstrip('/')}/ray" if results.remote else str(results.local / "ray")
            ),  # fmt: skip
            failure_config=tune.FailureConfig(max_failures=run.max_failures),
            callbacks=[Progress(), CSVLoggerCallback(), JsonLoggerCallback()],
            verbose=1,
        ),
    )
    try:
        results = tuner.fit()  # SIGINT: Tune stops the running trials and returns what finished
    finally:
        if started_ray:
            ray.shutdown()
    failures = [(r.config["cell_id"], _reason(r.error)) for r in results if r.error]
    print(
        f"{len(todo) - len(failures)} cells ran, {len(failures)} failed, {time.perf_counter() - started:.0f} s"
    )
    return failures
