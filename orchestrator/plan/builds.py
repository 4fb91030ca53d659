"""What a sweep builds before its first trial where the artefact cache lacks it, and how long that takes.

``privauditor run`` pre-trains every offline model its cells need that is not cached (the tiny bases, the
masked LM that makes neighbour texts; the corpus and the tokenizer first), one Ray task of one CPU each,
as many at once as the machine has CPUs (``orchestrator/run/bases.py``), and keeps them for later runs.
The planner only looks at the cache (nothing is built) and prices each build from the pre-training
steps the active profile runs, at seconds per step measured on a 2-core machine (docs/planning.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: seconds per corpus pre-training step (a batch of 8 windows), per family: the cached bases'
#: ``pretrain.json`` (``train_seconds / steps`` at the default profile, built two at a time on a 2-core
#: machine, 2026-12-04). The fast profile's shorter windows took about as long a step, so a step is the unit.
STEP_S = {"llama": 0.18, "opt": 0.20, "t5": 0.36, "gpt2": 0.15, "gptj": 0.16, "bloom": 0.17}
MASKED_LM_STEP_S = 0.32  # the masked LM's step (tiny-mlm's pretrain.json: 446 s for 1,400 steps)
COPY_STEP_S = 0.10  # a copy-curriculum step (16 windows of 64 tokens; 0.093-0.096 s measured, 2026-12-05)
TASK_S = 10.0  # a build's own start (its process's imports), the corpus tokenised, the evaluation, the save
CORPUS_S = 5.0  # the corpus extracted and the tokenizer trained, before any model (3.2 s measured)


@dataclass(frozen=True)
class Build:
    """One artefact to build: its name, what it is (``corpus``, ``base``, ``masked_lm``) and its seconds on
    one CPU."""

    name: str
    kind: str
    seconds: float


def first_builds(specs: list[Any]) -> list[Build]:
    """What the resolved cells ``specs`` (resolved without building) still need built, each once, in the
    order ``run`` starts them, with the corpus and the tokenizer first where an offline build needs them
    and they are missing too."""
    from privauditor.tasks.models import resolve_model

    needed: dict[str, Build] = {}
    offline = False  # an offline model to pre-train, or the corpus's token counts to make
    for spec in specs:
        models = [spec.model] * (spec.base is None)
        models += [spec.reference] * (spec.reference is not None and spec.reference_weights is None)
        for name in models:
            needed.setdefault(name, _model_build(resolve_model(name)))
            offline |= resolve_model(name).source == "tiny"
        for view in (view for attack in spec.attacks for view in attack.views.values()):
            if view.identity.get("masked_lm", "") is None:
                needed.setdefault("masked_lm", _masked_lm_build())
            offline |= None in view.identity.values()
    builds = list(needed.values())
    if offline and _corpus_missing():
        builds.insert(0, Build("the corpus and tokenizer", "corpus", CORPUS_S))
    return builds


def _corpus_missing() -> bool:
    from privauditor.tasks.models import corpus_ready

    return not corpus_ready()


def _model_build(spec: Any) -> Build:
    """A missing base: an offline tiny base's pre-training (its copy curriculum first where its family has
    one); a packaged base's download and conversion are not priced (0 s)."""
    from privauditor.tasks.models import FAMILIES, active_profile

    if spec.source != "tiny":
        return Build(f"{spec.name} (its download and conversion not priced)", "base", 0.0)
    profile, family = active_profile(), FAMILIES.get(spec.family)
    steps = profile.steps * STEP_S.get(spec.family, max(STEP_S.values()))
    if family.copy_curriculum and profile.induction is not None:
        steps += profile.induction.steps * COPY_STEP_S
    return Build(spec.name, "base", TASK_S + steps)


def _masked_lm_build() -> Build:
    """The masked LM: twice the profile's steps (``tasks/models/_tiny.py``), no copy curriculum."""
    from privauditor.tasks.models import active_profile

    return Build("the masked LM", "masked_lm", TASK_S + 2 * active_profile().steps * MASKED_LM_STEP_S)


def build_seconds(builds: list[Build], slots: int) -> float:
    """The wall time of ``builds`` run ``slots`` at a time, each started on the first free slot in order
    (as Ray starts its tasks), after the corpus and the tokenizer (one task makes them, the others wait)."""
    first = sum(b.seconds for b in builds if b.kind == "corpus")
    free = [0.0] * max(1, slots)
    for build in builds:
        if build.kind != "corpus":
            free[free.index(min(free))] += build.seconds
    return first + max(free)


def builds_line(builds: list[Build], seconds: float, local: bool) -> str:
    """The plan's line on what a first run builds (``local``: this machine's plan, where it is in the
    wall time)."""
    bases = [b.name for b in builds if b.kind == "base"]
    names = [b.name for b in builds if b.kind == "corpus"]
    names += [", ".join(bases) + (" bases" if len(bases) > 1 else " base")] if bases else []
    names += [b.name for b in builds if b.kind == "masked_lm"]
    minutes = f"about {seconds / 60:.0f} min" if seconds >= 90 else f"about {seconds:.0f} s"
    if local:
        return f"first builds: {', '.join(names)}: {minutes} on this machine, in the wall time; cached afterwards"
    return (f"first builds (missing from this machine's cache): {', '.join(names)}: {minutes} at this "
            "machine's speed, not in the wall time (a cluster builds what its own cache lacks)")  # fmt: skip
