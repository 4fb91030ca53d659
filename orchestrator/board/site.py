"""``privauditor board build STORE --out SITE``: the board as files and a static HTML site.

```
SITE/
  index.html                overview: counts, the techniques' battery (ranking, tests, coverage,
                            partial techniques, a hypothesis's Page test), models, attacks, privacy–utility
  cd.png                    the ranking's critical-difference diagram (no time stamp: byte-stable)
  models/<model>.html       a model's setting rows (last checkpoint, then every checkpoint)
  techniques/<name>.html    the same for a technique (defended techniques apart: ``lora+dp-e8``)
  cells/<cell_id>.html      provenance of a cell's records: runs, versions, hashes, hardware, wall times
  history.html              each release against the one before, and what is not released yet
  leaderboard.parquet/.csv/.md/.html   cell rows (the results folder's leaderboard schema)
  settings.parquet/.csv/.md            setting rows (seeds aggregated)
  board-site.json           what the site was built from
```

No network and nothing outside ``SITE``: the plots are embedded, the diagram is a file beside the pages,
tables sort on a header click. The pages are jinja2 templates (``templates/board/``, autoescaped) in the
layout of the results folder's ``leaderboard.html`` (:mod:`privauditor.orchestrator.report.html`). Equal stores
give equal bytes (the battery's bootstrap is seeded). The site is built beside ``SITE`` and renamed into
place; a folder that is not an earlier site is refused.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from markupsafe import Markup

from privauditor.orchestrator.report.battery import diagram
from privauditor.orchestrator.report.blocks import fraction_text
from privauditor.orchestrator.report.formats import markdown_table, tpr_text
from privauditor.orchestrator.report.headline import view_of
from privauditor.orchestrator.report.html import Link, privacy_utility_png, render
from privauditor.orchestrator.report.leaderboard import write
from privauditor.orchestrator.report.summary import APART_HEADER, apart, apart_table
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.infra.files import replace_folder
from privauditor.tasks.spec.resolved import slug

from ..report.row_schema import TRAINED, arrow_schema, setting_columns, shipped_form
from .check import valid_records
from .history import changes, manifests, summary
from .merge import cell_rows, setting_rows
from .ranked import block_values, fraction_of, fractions, load_hypothesis, rank, registration_of
from .store import Store
from .techniques import CD_PICTURE, diagram_title, moves_html, section

MARKER = "board-site.json"


def page(template: str, title: str, root: str = "", **context: Any) -> str:
    """``templates/board/<template>`` in the board's layout; ``root`` leads from the page to the site's top."""
    return str(render(f"board/{template}", title=title, root=root, **context)) + "\n"


def _f(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def _bound(row: dict[str, Any]) -> str:
    """The ε bound of a setting row and, over several seeds, in how many of them anything was bounded."""
    if row["n_seeds"] == 1:
        return _f(row["eps_lower"])
    return f"{_f(row['eps_lower'])} (bounded in {row['eps_bounded']} of {row['n_seeds']} seeds)"


def _fraction(row: dict[str, Any]) -> str:
    f = row["trainable_fraction"]
    return fraction_text(None if f is None else (f, f))


def settings_body(rows: list[dict[str, Any]], root: str) -> list[list[Any]]:
    """The cells of the settings table (``templates/board/macros.html.j2``), highest AUC first."""
    return [
        [Link(r["model"], f"{root}models/{slug(r['model'])}.html"),
         Link(r["technique"], f"{root}techniques/{slug(r['technique'])}.html"), _fraction(r), r["dataset"],
         r["epoch"], r["step"], r["attack"], r["access"], _f(r["auc"]),
         f"[{_f(r['auc_ci_low'])}, {_f(r['auc_ci_high'])}]", r["ci_over"], f"{r['n_seeds']} ({r['seeds']})",
         r["runs"] if r["replicas_agree"] else f"{r['runs']} (replicas differ)", _f(r["tpr_at_1pct_fpr"]),
         _f(r["utility_loss"]), _f(r["epsilon"]), _bound(r),
         [Link(c.split("__")[3], f"{root}cells/{c}.html") for c in r["cells"].split()]]
        for r in sorted(rows, key=lambda r: -r["auc"])
    ]  # fmt: skip


def grouped_page(title: str, rows: list[dict[str, Any]], column: str, cells: list[dict[str, Any]],
                 spans: dict[str, tuple[float, float]]) -> str:  # fmt: skip
    """A model's or a technique's page (``models/``, ``techniques/``): its setting rows."""
    return page(
        "group.html.j2", title, "../",
        settings=len({r["setting"] for r in rows}), rows=len(rows),
        trainable=fraction_of(spans, rows[0]["technique"]) if column == "technique" else None,
        privacy_utility=privacy_utility_png(cells) if cells else None,
        last=settings_body([r for r in rows if r["last"]], "../"), every=settings_body(rows, "../"),
    )  # fmt: skip


def overview(settings: list[dict[str, Any]], cells: list[dict[str, Any]], counts: dict[str, int],
             ranked: Markup) -> str:  # fmt: skip
    """index.html; ``ranked`` is the techniques' section (:func:`.techniques.section`)."""
    models = defaultdict(set)
    for r in settings:
        models[r["model"]].add(r["setting"])
    last = [r for r in settings if r["last"]]
    left_out = apart(last, "setting")  # attacks without a row in some settings: not over the same ones
    by_attack = defaultdict(list)
    for r in last:
        if r["attack"] not in left_out:
            by_attack[r["attack"]].append(r["auc"])
    return page(
        "index.html.j2", "privauditor board", counts=counts, ranked=ranked,
        downloads=("settings.parquet", "settings.csv", "leaderboard.parquet", "leaderboard.csv"),
        models=[[Link(m, f"models/{slug(m)}.html"), len(s)] for m, s in sorted(models.items())],
        attacks=[[a, f"{sum(v) / len(v):.3f}", len(v)] for a, v in sorted(by_attack.items())],
        apart_header=APART_HEADER, apart=apart_table(last, "setting", last=False),
        privacy_utility=privacy_utility_png(cells) if cells else None,
        last=settings_body([r for r in settings if r["last"]], ""),
    )  # fmt: skip


def cell_page(cell_id: str, records: list[dict[str, Any]], agree: bool) -> str:
    runs = sorted({r["run"] for r in records})
    shown = []
    for r in sorted(records, key=lambda r: (r["step"] or 0, r["run"])):
        p = r["provenance"]
        facts = [["record", r["key"]], ["run", r["run"]], ["epoch", r["epoch"]], ["step", r["step"]],
                 ["setting", r["setting"]], ["supersedes", ", ".join(r["supersedes"]) or None],
                 ["adapter hash", p["adaptation_hash"]], ["split", json.dumps(p["split"], sort_keys=True)],
                 ["versions", json.dumps(p["versions"], sort_keys=True)], ["hardware", json.dumps(p["hardware"], sort_keys=True)],
                 ["train", json.dumps(p["train"], sort_keys=True)], ["timings (s)", json.dumps(p["timings"], sort_keys=True)],
                 ["defence", json.dumps(p["defence"], sort_keys=True)], ["record schema", r["schema_version"]],
                 ["trainable fraction", fraction_text(None if r["trainable_fraction"] is None else (r["trainable_fraction"],) * 2)]]  # fmt: skip
        metrics = [[a, _f(m["auc"]), f"[{_f(m['auc_ci_low'])}, {_f(m['auc_ci_high'])}]", tpr_text(m, "tpr_at_1pct_fpr"),
                    tpr_text(m, "tpr_at_0fp"), _f(m["eps_lower"]), _f(m["eps_ceiling"])] for a, m in sorted(r["attacks"].items())]  # fmt: skip
        shown.append({"key": r["key"], "step": r["step"], "epoch": r["epoch"], "run": r["run"][:8], "facts": facts,
                      "metrics": metrics})  # fmt: skip
    return page(
        "cell.html.j2", f"cell {cell_id}", "../", records=shown, runs=len(runs),
        replicas={"run": runs[0][:8], "agree": agree} if len(runs) > 1 else None,  # the run id that sorts first
        spec=json.dumps(records[0]["provenance"]["spec"], indent=1, sort_keys=True),
    )  # fmt: skip


def history_page(store: Store, now: dict[str, Any]) -> str:
    releases = manifests(store)
    previous = [None, *releases]
    steps = [(m["name"], previous[i], m) for i, m in enumerate(releases)]
    steps.append(
        ("unreleased (the store now)" if releases else "unreleased (no release yet)", previous[-1], now)
    )
    shown = []
    for name, before, after in reversed(steps):
        c = changes(before, after)
        shown.append({
            "name": name, "before": before["name"] if before else None, "changes": c, "moves": moves_html(c["ranks"]),
            "new": _rows(c["new"]), "gone": _rows(c["gone"]), "superseded": [[k] for k in c["superseded"]],
            "moved": [[n["model"], n["technique"], n["dataset"], n["epoch"], n["attack"], _f(o["auc"]), _f(n["auc"]), n["n_seeds"]]
                      for _, o, n in c["moved"]],
        })  # fmt: skip
    return page("history.html.j2", "privauditor board: history", steps=shown)


def _rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    return [[r["model"], r["technique"], r["dataset"], r["epoch"], r["attack"], _f(r["auc"]), r["n_seeds"]] for r in rows]  # fmt: skip


def build(
    location: str | Path, out: str | Path, hypothesis: str | None = None, shipped: str = TRAINED
) -> dict[str, Any]:
    """Validate the store and write the site to ``out``; returns the board's summary. ``hypothesis``: a
    sweep (file or shipped name) whose ``hypothesis`` block Page's test checks on the ranking; ``shipped``:
    the form whose records the board shows (the models as trained, or one shipped form: tasks/shipping)."""
    store = Store(location)
    every = valid_records(store)
    if not every:
        raise PrivauditorError(f"store {store.uri} holds no records: board add a results folder first")
    records = of_form(every, shipped)
    out = Path(out).resolve()
    for part in ("records", "releases"):
        if store.local is not None and (out == store.local / part or store.local / part in out.parents):
            raise PrivauditorError(f"--out {out} is inside the store's {part}/: choose a folder outside them")
    if out.exists() and not (out / MARKER).is_file():
        raise PrivauditorError(f"--out {out} exists and is not an earlier board site: not overwriting it")
    claim, sweep = load_hypothesis(hypothesis) if hypothesis else (None, "")
    cells = cell_rows(records)
    settings = setting_rows(cells)
    found, tested = rank(cells, claim)
    # the history compares releases, which rank at the last checkpoint: the unreleased state does too
    now = summary(store, records, settings, found if view_of(claim) == "last" else rank(cells)[0])
    spans = fractions(records)
    registration = registration_of(claim, sweep, records, store) if claim else None
    ranked = section(
        found, block_values(cells, view=view_of(claim)), spans, claim, tested, registration, sweep
    )

    def write_site(tmp: Path) -> None:  # built beside `out`, then renamed into its place
        write(tmp, cells)
        _tables(tmp, settings)
        if found is not None:
            diagram(found, tmp / CD_PICTURE, diagram_title(found, view_of(claim)))
        pages = {
            "index.html": overview(settings, cells, now["counts"], ranked),
            "history.html": history_page(store, now),
        }
        for column, folder in (("model", "models"), ("technique", "techniques")):
            for value in sorted({r[column] for r in settings}):
                rows = [r for r in settings if r[column] == value]
                chosen = [c for c in cells if c["setting"] in {r["setting"] for r in rows}]
                pages[f"{folder}/{slug(value)}.html"] = grouped_page(
                    f"{column} {value}", rows, column, chosen, spans
                )
        by_cell = defaultdict(list)
        for r in records:
            by_cell[r["cell_id"]].append(r)
        for cell_id, kept in by_cell.items():
            agree = all(c["replicas_agree"] for c in cells if c["cell_id"] == cell_id)
            pages[f"cells/{cell_id}.html"] = cell_page(cell_id, kept, agree)
        for name, text in pages.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        (tmp / MARKER).write_text(
            json.dumps({"store": store.uri, "counts": now["counts"]}, indent=1, sort_keys=True) + "\n"
        )

    replace_folder(out, write_site)
    return now


def of_form(records: list[dict[str, Any]], shipped: str) -> list[dict[str, Any]]:
    """The records of the models in form ``shipped`` (``trained``, or a shipped form), or a one-line error
    naming the forms the store holds."""
    found = [r for r in records if shipped_form(r) == shipped]
    if not found:
        forms = sorted({shipped_form(r) for r in records})
        raise PrivauditorError(f"no records of form {shipped!r} in the store: it holds {', '.join(forms)}")
    return found


def _tables(folder: Path, settings: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    table_ = pa.Table.from_pylist(settings, schema=_schema())
    pq.write_table(table_, folder / "settings.parquet")
    pacsv.write_csv(table_, folder / "settings.csv")
    columns = ["model", "technique", "dataset", "defence", "epsilon_target", "epoch", "step", "last", "attack",
               "access", "n_seeds", "seeds"]  # fmt: skip
    body = [
        [r[c] for c in columns] + [_f(r["auc"]), _f(r["auc_ci_low"]), _f(r["auc_ci_high"])] for r in settings
    ]
    (folder / "settings.md").write_text(
        "# Board: setting rows\n\n"
        + markdown_table([*columns, "auc", "auc_ci_low", "auc_ci_high"], body)
        + "\n"
    )


def _schema():
    return arrow_schema(setting_columns())
