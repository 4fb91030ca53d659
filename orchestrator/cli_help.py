"""What the command line says about itself: each command's examples, ``--version``, the shipped sweeps."""

from __future__ import annotations

import argparse

#: each command's (or a command's action's: ``board export``) examples, shown at the end of its --help
EXAMPLES = {
    "ls": ["privauditor ls attacks", "privauditor ls sweeps"],
    "prepare": ["privauditor prepare --models tiny-llama tiny-gpt2"],
    "cell": [
        "privauditor cell --model tiny-llama --adaptation lora --dataset finance --out results/one",
        "privauditor cell --model tiny-gpt2 --adaptation full --dataset sql --out results/one \\\n"
        "    --set split.members=64 --set 'attacks=[loss,zlib,min_k]'",
    ],
    "validate": ["privauditor validate default", "privauditor validate my_sweep.yaml --set train.epochs=2"],
    "plan": ["privauditor plan default", "privauditor plan paper --cluster aws --budget-usd 500"],
    "run": ["privauditor run quick", "privauditor run default --out results/default --max-concurrent 2"],
    "audit": [
        "privauditor audit --model gpt2 --adapter my-lora/ --members train.jsonl --nonmembers heldout.jsonl \\\n"
        "    --nonmembers-from held-out --out results/my-audit --report",
    ],
    "report": [
        "privauditor report results/default",
        "privauditor report results/real --against results/default",
    ],
    "publish": ["privauditor publish results/default --to public/"],
    "board export": [
        "privauditor board export board/ --format hf-eval-results --to public/hub --date 2026-12-01",
        "privauditor board export board/ --format hf-eval-results --format every-eval-ever --to public/board \\\n"
        "    --date 2026-12-01T12:00:00Z",
    ],
}


def attach_examples(commands: argparse._SubParsersAction) -> None:
    """Show each command's :data:`EXAMPLES` at the end of its --help; a key of two words (``board export``)
    names an action of a command."""
    for name, examples in EXAMPLES.items():
        command, *action = name.split()
        sub = commands.choices[command]
        if action:
            actions = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction))
            sub = actions.choices[action[0]]
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
        sub.epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)


class Version(argparse.Action):
    """``--version``: ``privauditor 0.1.0`` and, run from a checkout, ``(git <12 hex>[+dirty])``."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from privauditor.tasks.infra.provenance import versions

        found = versions()
        revision = found.get("privauditor_git")
        git = f" (git {revision[:12]}{'+dirty' if revision.endswith('+dirty') else ''})" if revision else ""
        print(f"privauditor {found.get('privauditor', '?')}{git}")
        parser.exit()


def shipped_sweeps() -> str:
    from privauditor.orchestrator.sweepfile.sweep import SWEEPS_DIR

    return ", ".join(sorted(p.stem for p in SWEEPS_DIR.glob("*.yaml")))
