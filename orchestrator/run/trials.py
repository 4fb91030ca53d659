"""Ray Tune glue: a local or remote Ray session, each cell as a trial, and the Tuner that runs them.

Each cell is one trial, named by its cell id, with its own resources (the model spec's CPUs and GPUs
unless the ``run`` block sets them: :func:`trial_resources`), at most ``run.max_concurrent_trials`` at
once, retried ``run.max_failures`` times (``FailureConfig``), with worker processes reused between cells
(``reuse_actors``) so imports are paid once per worker. A cell that trains under DeepSpeed starts a Ray
Train worker group from its trial (``distributed.py``); its attacks run on the stored views as tasks of
an attack actor (``attack_actor.py``); a view that adapts a model of its own (SPV-MIA's reference) runs as
a task in a second bundle of the trial's placement group (``view_tasks.py``). Ray's own console output
(trial tables, worker logs, library warnings) is left out unless ``verbose``: the sweep prints its own
progress (``console.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError

NODE_GROUP = "ray.io/node-group"  # the label holding an autoscaler-launched node's type
FORWARDED_ENV = ("PRIVAUDITOR_", "HF_", "TRANSFORMERS_", "WANDB_", "TOKENIZERS_", "XDG_CACHE_HOME")


def forwarded_env() -> dict[str, str]:
    """The environment Ray workers get from this process (cache, offline and tracking settings)."""
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}


@contextlib.contextmanager
def ray_session(address: str | None, verbose: bool, cpus: int | None = None) -> Iterator[None]:
    """Ray for the block: joined at ``address``, else a local instance (shut down afterwards). Worker
    output reaches this console only when ``verbose``."""
    import ray

    if ray.is_initialized():
        yield
        return
    kwargs: dict[str, Any] = {} if address else {"num_cpus": cpus or os.cpu_count()}
    ray.init(
        address=address, include_dashboard=False, runtime_env={"env_vars": forwarded_env()},
        log_to_driver=verbose, logging_level=logging.INFO if verbose else logging.ERROR, **kwargs,
    )  # fmt: skip
    try:
        yield
    finally:
        ray.shutdown()


def check_reachable(address: str | None) -> None:
    """A one-line error, in a second rather than after Ray's retries, when nothing listens at a cluster
    ``address`` (``host:port`` or ``ray://host:port``; ``auto`` is left to Ray)."""
    import socket

    if not address or address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise PrivauditorError(f"--address {address}: expected host:port (or ray://host:port, or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise PrivauditorError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}): start one (ray start --head) "
            "or leave --address out to run on this machine"
        ) from None


def trial_resources(cell: Any, run: Any, has_gpus: bool) -> dict[str, float]:
    """A cell's trial resources: CPUs from ``run.cpus_per_trial`` or else the model spec; GPUs from
    ``run.gpus_per_trial`` (a number), none (null), or with ``auto`` the model spec's (at least one)
    when the cluster has GPUs; custom resources from ``run.resources_for`` (its adaptation's, else its
    model's) or else ``run.resources``. DeepSpeed workers get their own resources besides these."""
    from privauditor.tasks.models import resolve_model

    needs = resolve_model(cell.model).resources
    cpus = needs.cpus if run.cpus_per_trial is None else run.cpus_per_trial
    if run.gpus_per_trial == "auto":
        gpus = max(needs.gpus, 1.0) if has_gpus else 0.0
    else:
        gpus = float(run.gpus_per_trial or 0.0)
    custom = run.resources_for.get(cell.adaptation, run.resources_for.get(cell.model, run.resources))
    return {"CPU": float(cpus)} | ({"GPU": gpus} if gpus else {}) | custom


def check_placeable(sweep: Any, todo: list[Any], address: str | None) -> None:
    """On the local Ray instance (``address`` None: it never grows, unlike an autoscaling cluster), a
    one-line error for the first cell whose trial can never be placed: its bundles (two on one node where
    a view adapts a model of its own, ``spv_mia``) ask for more CPUs, GPUs or custom resources
    (``run.resources``) than the machine has, and Tune would wait for them for ever."""
    if address is not None:
        return
    import ray

    from privauditor.tasks.infra.errors import PrivauditorError

    from .view_tasks import bundles

    has = ray.cluster_resources()
    for spec in todo:
        found, _ = bundles(spec, trial_resources(spec, sweep.run, has.get("GPU", 0) > 0))
        for kind in sorted({k for bundle in found for k in bundle}):
            asked = sum(b.get(kind, 0.0) for b in found)
            if asked > has.get(kind, 0.0):
                two = " (two bundles: the trial and its view task)" if len(found) > 1 else ""
                plain = kind in ("CPU", "GPU")
                fix = (
                    "lower run.cpus_per_trial / run.gpus_per_trial in the sweep file"
                    if plain
                    else "run it on a cluster whose nodes have it (--address), or drop it from run.resources"
                )
                raise PrivauditorError(
                    f"cell {spec.cell_id()} asks for {asked:g} {kind + 's' if plain else repr(kind)} on one "
                    f"node{two}, and this machine has {has.get(kind, 0.0):g}: {fix}"
                )


def _trial(
    config: dict[str, Any],
    out: str,
    specs: dict[str, Any],
    resources: dict[str, dict[str, float]],
    sweep: Any = None,
) -> None:
    """One cell, inside a Ray Tune trial; a finished cell is mirrored to W&B from here (once: a retried
    trial logs only when it succeeds)."""

    from ray import tune

    from privauditor.tasks.cell.run import run_cell
    from privauditor.tasks.infra.results import CellFolder, Results, checkpoint_results

    from ..report.plots import roc_png
    from .attack_actor import attack_actor

    attack_actor()  # started now, so its process start-up overlaps the cell's adaptation
    forward_notices()
    cell_id = config["cell_id"]
    env = _environment(specs[cell_id], resources[cell_id], sweep)
    results = Results.at(out)
    if results.done(cell_id):  # finished since the sweep started (another run of the same sweep)
        tune.report({"max_auc": float("nan"), "skipped": True})
        return
    outcome = run_cell(specs[cell_id], results.root, env)
    roc_png(outcome.metrics, results.roc_image(outcome.cell_id), outcome.cell_id)
    results.push_cell(outcome.cell_id)  # object stores: every file uploaded, DONE last
    results.upload(results.roc_key(outcome.cell_id))
    from privauditor.orchestrator.tracking import checkpoint_report, log_cell

    audited = checkpoint_results(outcome.path)
    if sweep is not None and not outcome.skipped:
        record = CellFolder.at(outcome.path).record()
        log_cell(sweep.wandb, sweep.name, results.root, record, audited)
    for checkpoint, metrics in audited:  # one report per checkpoint: Tune's progress follows the epochs
        tune.report(checkpoint_report(checkpoint, metrics) | {"skipped": outcome.skipped})


#: how long a trial's process, ended by SIGTERM (a node's drain or spot notice), waits for its cell's
#: training to save its step state before Ray shuts the process down (GKE's notice is 30 s, AWS's 120 s)
NOTICE_WAIT_S = 20.0
_FORWARDING: list[bool] = []


def forward_notices() -> None:
    """Forward a drain notice to the cell this trial trains. Ray's worker turns SIGTERM into ``SystemExit``
    on its main thread while Tune runs the trial's function on a daemon thread of its own, so the cell's
    loop never sees the signal: at that exit, before Ray's own shutdown (``atexit`` runs the last registered
    first), the drain flag is raised and the loop given :data:`NOTICE_WAIT_S` to save its step state
    (:mod:`privauditor.tasks.infra.drain`); the retried trial resumes there. Registered once a process
    (Tune reuses it for trials); an earlier trial's notice is forgotten."""
    import atexit

    from privauditor.tasks.infra import drain

    if not _FORWARDING:
        atexit.register(drain.forward, NOTICE_WAIT_S)
        _FORWARDING.append(True)
    drain.reset()


def _environment(spec: Any, resources: dict[str, float], sweep: Any) -> Any:
    """What a trial's cell runs with: this trial's threads (two trials' thread pools on the same cores
    slow both many times over), Ray Train workers for DeepSpeed, attacks as Ray actor tasks, a view that
    adapts a model of its own as a Ray task, the cell's time limit, and where it ran."""
    import ray
    import torch
    from ray import tune

    from privauditor.tasks.cell.run import CellEnvironment

    from .attack_actor import ray_tasks
    from .ray_train import RayTrainLauncher
    from .view_tasks import adapts, view_task

    threads = max(1, int(resources["CPU"]))
    torch.set_num_threads(threads)
    launcher = RayTrainLauncher(cpus_per_worker=threads, gpus_per_worker=min(resources.get("GPU", 0.0), 1.0))
    context = ray.get_runtime_context()
    runtime = {
        "ray_node_id": context.get_node_id(),
        "trial_id": tune.get_context().get_trial_id(),
        "pid": os.getpid(),
    } | node_type(context.get_node_labels())
    return CellEnvironment(
        distributed=launcher,
        map_jobs=ray_tasks,
        run_view=view_task(resources) if adapts(spec) else None,
        timeout_s=sweep.run.cell_timeout_s if sweep is not None else None,
        runtime=runtime | {"attacks": "ray actor tasks"},
    )


def node_type(labels: dict[str, Any]) -> dict[str, str]:
    """``{"ray_node_type": ...}``: the cluster config's node type of this worker's node, where an autoscaler
    launched it: its ``ray.io/node-group`` label (autoscaler v2, KubeRay), else the ``RAY_NODE_TYPE_NAME`` its
    raylet passes to workers (the v1 autoscaler's fake multi-node provider); nothing on a node no autoscaler
    launched (a local run, a head, a v1 cloud worker: its ``ray_node_id`` alone says where it ran)."""
    group = labels.get(NODE_GROUP) or os.environ.get("RAY_NODE_TYPE_NAME")
    group = group[0] if isinstance(group, list) and group else group
    return {"ray_node_type": str(group)} if group else {}


def run_trials(
    sweep: Any, todo: list[Any], results: Any, rebuild: Any, max_concurrent: int | None, verbose: bool
) -> list[tuple[str, str]]:
    """Run the resolved cells ``todo`` as Tune trials on the current Ray session; returns the failed
    cells' (id, one-line error)."""
    from ray import tune

    from .console import reason
    from .view_tasks import bundles

    # Tune's default loggers add TensorBoardX, whose import costs the driver about 2.5 s before the first
    # trial starts; the CSV and JSON logs are kept, passed explicitly by _tuner
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    import ray

    run = sweep.run
    started = time.perf_counter()
    has_gpus = ray.cluster_resources().get("GPU", 0) > 0
    specs = {spec.cell_id(): spec for spec in todo}
    resources = {cell_id: trial_resources(spec, run, has_gpus) for cell_id, spec in specs.items()}
    trainable = tune.with_parameters(_trial, out=results.uri, specs=specs, resources=resources, sweep=sweep)
    placed = {cell_id: bundles(spec, resources[cell_id]) for cell_id, spec in specs.items()}
    trainable = tune.with_resources(
        trainable, lambda config: tune.PlacementGroupFactory(*placed[config["cell_id"]])
    )
    tuner = _tuner(sweep, trainable, specs, results, rebuild, max_concurrent, verbose)
    with _quiet(not verbose):
        found = tuner.fit()  # SIGINT: Tune stops the running trials and returns what finished
    failures = [(r.config["cell_id"], reason(r.error)) for r in found if r.error]
    finished = sum(results.done(spec.cell_id()) for spec in todo)  # not those Ctrl-C stopped
    stopped = len(todo) - finished - len(failures)
    print(
        f"{finished} cells ran, {len(failures)} failed"
        + (f", {stopped} stopped" if stopped > 0 else "")
        + f", {time.perf_counter() - started:.0f} s"
    )
    return failures


def _tuner(  # noqa: PLR0913  # the sweep, its trainable and cells, and run_trials' own arguments
    sweep: Any,
    trainable: Any,
    specs: dict[str, Any],
    results: Any,
    rebuild: Any,
    max_concurrent: int | None,
    verbose: bool,
) -> Any:
    """The Tune run of the sweep's cells: one trial per cell (named by its id), at most ``max_concurrent``
    (else ``run.max_concurrent_trials``) at once, retried ``run.max_failures`` times, the console's
    progress line and Tune's CSV and JSON logs under ``OUT/ray/`` (or ``run.storage_path``)."""
    from ray import tune
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    from .console import Progress, weights

    run = sweep.run
    storage = run.storage_path or (
        f"{results.uri.rstrip('/')}/ray" if results.remote else str(results.root / "ray")
    )
    return tune.Tuner(
        trainable,
        param_space={"cell_id": tune.grid_search(list(specs))},
        tune_config=tune.TuneConfig(
            max_concurrent_trials=max_concurrent or run.max_concurrent_trials,
            reuse_actors=True,
            trial_name_creator=lambda trial: trial.config["cell_id"],
            trial_dirname_creator=lambda trial: trial.config["cell_id"],
        ),
        run_config=tune.RunConfig(
            name=sweep.name,
            storage_path=storage,
            failure_config=tune.FailureConfig(max_failures=run.max_failures),
            callbacks=[
                Progress(len(specs), rebuild, lambda: weights(sweep, specs)),
                CSVLoggerCallback(),
                JsonLoggerCallback(),
            ],
            verbose=2 if verbose else 0,
        ),
    )


@contextlib.contextmanager
def _quiet(quiet: bool) -> Iterator[None]:
    """Ray Tune's own console output off (its experiment box and trial tables, each failed attempt's
    traceback, hints): the sweep prints every failure itself, in one line, and the trial's ``error.txt``
    under ``OUT/ray/`` keeps the traceback."""
    if not quiet:
        yield
        return
    loggers = [logging.getLogger(name) for name in ("ray.tune", "ray.train", "ray.air")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    # Tune's newer console output prints an experiment box and a results path even at verbose 0
    reporter = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        if reporter is None:
            del os.environ["RAY_AIR_NEW_OUTPUT"]
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = reporter


def local_launcher(spec: Any) -> Any:
    """A Ray Train launcher on a local Ray for a cell that trains under DeepSpeed, else None."""
    if spec.train.deepspeed is None:
        return None
    import os

    import ray
    import torch

    from .ray_train import RayTrainLauncher

    gpus = 1.0 if torch.cuda.is_available() else 0.0
    if not ray.is_initialized():  # logical CPUs: one per worker plus this process, even on fewer cores
        cpus = max(os.cpu_count() or 1, spec.train.workers + 1)
        ray.init(num_cpus=cpus, include_dashboard=False, runtime_env={"env_vars": forwarded_env()})
    return RayTrainLauncher(cpus_per_worker=1.0, gpus_per_worker=gpus)
