"""The text tables the CLI prints (registries, offline bases, datasets, summaries), through rich."""

from __future__ import annotations

import functools
import re
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.results import Results

#: rich's box of these tables: no borders, a space between columns, a rule of dashes under the header
RULE_SPEC = "    \n    \n -  \n    \n    \n    \n    \n    \n"


def render(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A left-aligned table (rich's), a rule under the header, columns two spaces apart; wrapped to the
    terminal's width when printed to one, else (a pipe, a file, a test) as wide as its rows."""
    import io
    import shutil
    import sys

    from rich.box import Box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=Box(RULE_SPEC, ascii=True), show_edge=False, padding=(0, 1, 0, 0), header_style="")
    for header in headers:
        table.add_column(Text(header))
    for row in rows:  # Text: a cell's "[0.08, 0.16]" is an interval, not rich markup
        table.add_row(*(Text(str(c)) for c in row))
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 100_000
    printed = io.StringIO()
    Console(file=printed, width=width, color_system=None, highlight=False, emoji=False).print(table)
    return "\n".join(line.rstrip() for line in printed.getvalue().splitlines() if line.strip())


def listing(what: str) -> str:
    """``privauditor ls <what>``: every registered name with its key facts."""
    rows: list[list[object]]  # each listing's own columns
    if what == "models":
        from privauditor.tasks.models import FAMILIES, MODELS

        rows = [
            [
                name,
                s.family,
                "seq2seq" if FAMILIES.get(s.family).seq2seq else "causal",
                s.source,
                s.params or "<1.5M",
                f"{s.resources.gpus:g}",
                s.dtype,
            ]
            for name, s in MODELS.items()
        ]
        return render(["model", "family", "kind", "source", "params", "gpus", "dtype"], rows)
    if what == "datasets":
        from privauditor.tasks.datasets import DATASETS

        rows = [
            [name, cls.hub_id or "-", ", ".join(cls.fields), cls.offline_size]
            for name, cls in DATASETS.items()
        ]
        return render(["dataset", "real dataset", "fields", "offline records"], rows)
    if what == "adaptations":
        return adaptations_listing()
    if what == "defences":
        import dataclasses

        from privauditor.tasks.defences import DEFENCES

        rows, about = [], []
        for name, cls in DEFENCES.items():  # the settings wrapped to fit 100 columns, a line a row
            settings = " ".join(f"{f.name}={f.default}" for f in dataclasses.fields(cls.settings))
            lines = textwrap.wrap(settings, 80)
            rows.append([name, cls.version, lines[0]])
            rows += [["", "", line] for line in lines[1:]]
            about.append(textwrap.fill((cls.__doc__ or "").strip().splitlines()[0], 100,
                                       initial_indent=f"{name:<10} ", subsequent_indent=" " * 11))  # fmt: skip
        return render(["defence", "version", "settings (defaults)"], rows) + "\n\n" + "\n".join(about)
    if what == "sweeps":
        from privauditor.orchestrator.sweepfile.sweep import SWEEPS_DIR, load_sweep

        rows, about = [], []
        paths = sorted(SWEEPS_DIR.glob("*.yaml"))
        width = max(len(p.stem) for p in paths)  # the names' column
        for path in paths:
            sweep = load_sweep(str(path))
            rows.append([path.stem, len(sweep.cells), len(sweep.dropped)])
            about.append(textwrap.fill(first_sentence(path), 100, initial_indent=f"{path.stem:<{width}} ",
                                       subsequent_indent=" " * (width + 1)))  # fmt: skip
        return render(["sweep", "cells", "dropped pairs"], rows) + "\n\n" + "\n".join(about)
    return attacks_listing()


def attacks_listing() -> str:
    """Each attack with its threat model (access level), its hyper-parameters' defaults, the views it
    reads, its cost in passes per scored text (at its defaults), the checkpoints of a trajectory it runs
    at, and its paper."""
    from privauditor.tasks.attacks import ATTACKS

    rows, details = [], []
    for name, cls in ATTACKS.items():
        attack = cls()
        fields = ", ".join(f"{k}={v}" for k, v in attack.hyperparameters().items()) or "-"
        views = ", ".join(f"{role}: {view.label}" for role, view in attack.views().items())
        checkpoints = "last" if cls.checkpoints == "last" else "every" if attack.cheap else "last + best"
        if attack.cheap and not attack.runs_at(0, 3, 3):  # an attack of the trajectory
            checkpoints = "every but the first"
        rows.append([name, cls.access, str(attack.cost()), checkpoints])
        details.append(
            textwrap.fill(f"{fields}; reads {views}; {cls.paper}", 100, initial_indent=f"{name:<14} ",
                          subsequent_indent=" " * 15, break_on_hyphens=False, break_long_words=False)
        )  # fmt: skip
    table = render(["attack", "access", "passes per text", "checkpoints"], rows)
    return table + "\n\nhyper-parameters (defaults); views read; paper\n" + "\n".join(details)


def metrics_table(metrics: dict) -> str:
    """One row per attack of a cell's ``metrics.json``, a skipped attack's reason below the table. Where a
    TPR at 0.1 % or 1 % FPR cannot be measured (``-``: fewer than 1,000 or 100 non-members), a column gives
    each attack's TPR at 0 false positives with its 95 % interval, and a footnote the FPR that 0 false
    positives of N bound it to; the ε column only where an attack has an ε bound."""

    def fmt(value: object) -> str:
        return "-" if value is None else f"{value:.3f}"

    scored = {name: m for name, m in metrics.items() if "skipped" not in m}
    zero = any(m.get(r) is None for m in scored.values() for r in ("tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr"))
    zero = zero and any(m.get("tpr_at_0fp") is not None for m in scored.values())
    eps = any("eps_ceiling" in m for m in scored.values())
    headers = ["attack", "AUC", "95% CI", "TPR@0.1%FPR", "TPR@1%FPR"]
    headers += ["TPR@0FP [95% CI]"] * zero + ["eps >= (ceiling)"] * eps
    per_cell = len({m.get("n_nonmembers") for m in scored.values() if m.get("tpr_at_0fp") is not None}) > 1
    rows = []
    for name, m in metrics.items():
        if name not in scored:
            rows.append([name, "skipped", *["-"] * (len(headers) - 2)])
            continue
        ci = f"[{m['auc_ci'][0]:.3f}, {m['auc_ci'][1]:.3f}]"
        row = [name, fmt(m["auc"]), ci, fmt(m["tpr_at_0.1pct_fpr"]), fmt(m["tpr_at_1pct_fpr"])]
        row += [_zero_fp(m, per_cell)] * zero
        row += [
            f"{fmt(m.get('eps_lower'))} ({fmt(m.get('eps_ceiling'))})" if "eps_ceiling" in m else "-"
        ] * eps
        rows.append(row)
    notes = [_zero_fp_note(scored)] * zero
    notes += [f"{name} skipped: {m['skipped']}" for name, m in metrics.items() if name not in scored]
    return "\n".join([render(headers, rows), *(textwrap.fill(note, 100) for note in notes)])


def _zero_fp_note(scored: dict) -> str:
    """The footnote of the TPR@0FP column: what it is, and the FPR that 0 false positives of N bound."""
    found = [m for m in scored.values() if m.get("tpr_at_0fp") is not None]
    if len({m.get("n_nonmembers") for m in found}) != 1:
        return ("TPR@0FP: members scored above every non-member (0 false positives of N: FPR <= the bound "
                "in each cell, one-sided 95 %), read where a TPR at 0.1 % or 1 % FPR (-) needs more non-members.")  # fmt: skip
    return (f"TPR@0FP: members scored above all {found[0]['n_nonmembers']} non-members (0 false positives: FPR <= "
            f"{_percent(found[0]['tpr_at_0fp_fpr_bound'])}, one-sided 95 %), read where a TPR at 0.1 % or 1 % "
            "FPR (-) needs more non-members.")  # fmt: skip


def _zero_fp(m: dict, per_cell: bool) -> str:
    """An attack's TPR at 0 false positives with its 95 % interval (``-`` where it has none); ``per_cell``:
    with its N and the FPR bound (attacks that scored different numbers of non-members)."""
    if m.get("tpr_at_0fp") is None:
        return "-"
    low, high = m.get("tpr_at_0fp_ci") or (None, None)
    text = f"{m['tpr_at_0fp']:.3f}" + ("" if low is None else f" [{low:.3f}, {high:.3f}]")
    if per_cell:
        text += f" of {m['n_nonmembers']} (FPR <= {_percent(m['tpr_at_0fp_fpr_bound'])})"
    return text


def _percent(rate: float | None) -> str:
    """A rate as a percentage with two significant digits (``3.7 %``, ``14 %``)."""
    return "-" if rate is None else f"{100 * rate:.2g} %"


def checkpoints_table(audited: list) -> str:
    """One row per checkpoint of a cell: epoch, step, validation NLL, best, and each attack's AUC."""
    attacks = list(dict.fromkeys(a for _, metrics in audited for a in metrics))
    rows = [
        [c["epoch"], c["step"], f"{c['utility_loss']:.3f}", "best" if c["best"] else "",
         *("-" if "auc" not in m.get(a, {}) else f"{m[a]['auc']:.3f}" for a in attacks)]
        for c, m in audited
    ]  # fmt: skip
    return render(["epoch", "step", "val NLL", "", *(f"{a} AUC" for a in attacks)], rows)


def adaptations_listing() -> str:
    """Each technique with its default lr / epochs, the rates chosen for it on the tiny bases (a range)
    and on the packaged real base (``benchmarks/learning_rates.py``), and the families it cannot adapt."""
    from privauditor.tasks.adaptations import ADAPTATIONS, chosen_rates
    from privauditor.tasks.models import FAMILIES, MODELS

    def span(rates: list[float]) -> str:
        rates = sorted(rates)
        return "-" if not rates else f"{rates[0]:g}" + (f"-{rates[-1]:g}" if rates[-1] != rates[0] else "")

    rows = []
    for name, cls in ADAPTATIONS.items():
        technique = cls()
        unsupported = [f for f in FAMILIES.names() if technique.unsupported_reason(f)]
        other = {f: technique.default_lr_for(f) for f in FAMILIES.names() if f not in unsupported}
        other = {f: lr for f, lr in other.items() if lr != cls.default_lr}
        lr = " ".join([str(cls.default_lr), *(f"({f}: {v})" for f, v in other.items())])
        chosen = chosen_rates(name)
        by_source = {
            source: span([r for m, r in chosen.items() if m in MODELS and MODELS.get(m).source == source])
            for source in ("tiny", "package")
        }
        row = [name, lr, by_source["tiny"], by_source["package"], cls.default_epochs]
        rows.append([*row, ", ".join(unsupported) or "-"])
    headers = [
        "adaptation", "default lr", "lr on tiny bases", "lr on packaged bases", "default epochs",
        "unsupported families",
    ]  # fmt: skip
    note = (
        "default lr: the class default, used where no rate was chosen for a base; lr on tiny / packaged\n"
        "bases: the rates chosen per base by validation NLL (benchmarks/learning_rates.py). default\n"
        "epochs: used only where a cell sets neither train.epochs nor train.checkpoints (a `privauditor\n"
        "cell` without them); each technique's file says why (lora's 20: at the paper's 3 a tiny base\n"
        "learns no record). The shipped sweeps set one schedule for all (the default sweep: 4 epochs)."
    )
    return render(headers, rows) + "\n\n" + note


def bases(names: list[str], profile) -> str:
    """Build or load each tiny base (and the masked LM); one row of quality figures per model."""
    from privauditor.tasks.models import checkpoint_path, masked_lm_path, pretrain_report

    rows = []
    targets: list[tuple[str, Callable[[], str | Path | None]]]
    targets = [(n, functools.partial(checkpoint_path, n, profile=profile)) for n in names]
    targets.append(("tiny-mlm (neighbours)", functools.partial(masked_lm_path, profile=profile)))
    for name, build in targets:
        started = time.perf_counter()
        path = build()  # built where not cached
        if path is None:
            raise RuntimeError(f"{name}: no weights were built")
        report = pretrain_report(path)
        rows.append(
            [
                name,
                f"{report['parameters'] / 1e6:.2f}M",
                f"{report['train_seconds']:.0f}",
                f"{time.perf_counter() - started:.1f}",
                f"{report['held_out_loss']:.3f}",
                f"{report['unigram_loss']:.3f}",
                f"{report['unigram_loss'] - report['held_out_loss']:.2f}",
            ]
        )
    headers = ["model", "params", "pre-train s", "this run s", "held-out NLL", "unigram NLL", "margin (nats)"]
    return render(headers, rows)


def datasets_summary() -> str:
    """Each registered dataset's offline version: records kept, distinct texts and content hash."""
    from privauditor.tasks.datasets import DATASETS, load_dataset

    rows = []
    for name, _ in DATASETS.items():
        data = load_dataset(name)
        rows.append(
            [
                name,
                data.report.total,
                len(data.examples),
                len({e.text for e in data.examples}),
                data.sha256[:12],
            ]
        )
    return render(["dataset", "records", "kept", "distinct texts", "sha256"], rows)


def stage_seconds(results: Path) -> tuple[dict[str, float], int]:
    """Seconds per stage (each ``cell.json``'s ``timings``: loading, training, each view, the attacks),
    summed over the finished cells of a results folder, and how many cells that is."""
    totals: dict[str, float] = {}
    cells = 0
    for cell in Results(results).folders():
        timings = cell.record().get("timings", {})
        cells += 1
        for stage, seconds in timings.items():
            totals[stage] = totals.get(stage, 0.0) + seconds
    return totals, cells


def stages_table(results: Path) -> str:
    """Where a run's time went: seconds per stage summed over cells, largest first, with shares."""
    totals, cells = stage_seconds(results)
    whole = sum(totals.values()) or 1.0
    rows = [[stage, f"{seconds:.1f}", f"{100 * seconds / whole:.1f} %"]
            for stage, seconds in sorted(totals.items(), key=lambda kv: -kv[1])]  # fmt: skip
    shared = sum(seconds for stage, seconds in totals.items() if stage.endswith(" (shared)"))
    return (
        f"time per stage, summed over {cells} cells ({whole:.1f} s in all; {shared:.1f} s of it shared work, "
        "done once by the first cell that read it):\n" + render(["stage", "seconds", "share"], rows)
    )


def first_sentence(path: Path) -> str:
    """The first sentence of a sweep file's leading comment, whole."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    text = " ".join(lines)
    end = re.search(r"\.(\s|$)", text)
    return text[: end.start() + 1] if end else text


def one_run_lines(one_run: dict[str, Any] | None) -> list[str]:
    """The one-run DP audit, a line per canary kind (none without one)."""
    if not one_run:
        return []
    lines = [f"one-run DP audit (add/remove one canary; 95 %, {one_run['correction']} and the guess counts):"]
    for kind, b in one_run["kinds"].items():
        lines.append(
            f"  {kind:9s} eps >= {b['eps_lower']:.3f} (ceiling {b['eps_ceiling']:.3f}) over {b['m']} canaries, "
            f"{b['included']} trained; {b['correct']} of {b['guesses']} guesses right; delta {b['delta']:.2g}"
        )
    return lines
