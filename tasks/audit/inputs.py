"""An audit's member and non-member files, checked before anything heavy is built or loaded.

The rules (each a one-line error, or a warning the audit prints and keeps in its ``cell.json``):

- **Overlap** (error): a record in both files, compared exactly and after normalisation (whitespace runs
  collapsed, case folded). The same text cannot be a member and a non-member.
- **Near-duplicates** (warning): a member and a non-member whose word 5-gram sets have Jaccard similarity
  of at least 0.8, the near-duplicate rule of Lee et al. 2022 ("Deduplicating Training Data Makes Language
  Models Better", https://arxiv.org/abs/2107.06499: 5-grams, threshold 0.8). Such a non-member's score
  says little about the member it copies.
- **Too few to detect anything** (error): the audit's verdict tests its attacks together (Holm's step-down
  over them), so its smallest per-attack level is 0.05 / attacks. When even a perfect separation (every
  member scored above every non-member) has an exact two-sided Mann-Whitney p-value above that level
  (``scipy.stats.mannwhitneyu``, ``method="exact"``), no outcome could show leakage: 1 member against 40
  non-members, or 5 a side, are refused at 7 attacks; 2 against 40 and 6 a side are not.
- **Weak metrics** (warning): TPR at a target FPR rests on fewer than 10 expected false positives below
  10 / target non-members (the leaderboard's ``_few`` flag): 1,000 for 1 %, 10,000 for 0.1 %.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..data.chat import Messages, is_chat, messages_of, render
from ..datasets import Example, load_dataset
from ..datasets._sources import read_file
from ..infra.errors import DataError, PrivauditorError

ALPHA = 0.05
NEAR_DUPLICATE = 0.8  # word 5-gram Jaccard (Lee et al. 2022)
NGRAM = 5
TPR_TARGETS = {"1 %": 0.01, "0.1 %": 0.001}


def read_records(
    path: str, tag: str, text_column: str | None = None, skip_bad: bool = False
) -> tuple[list[Example], dict[str, Messages]]:
    """A file's records as examples with ids ``<tag>:<id>``, and the conversations of chat records by id
    (``messages`` rows, rendered plainly until a tokenizer is at hand: ``chat.py``). ``text_column``
    names the column that holds each record's whole text (scored as a ``text`` column is). A missing
    file, or one with no record an audit can read, is an error naming the columns it found; so is a record
    left out (malformed, empty, over the length limit, a duplicate) unless ``skip_bad``."""
    file = Path(path)
    if file.is_dir():
        raise PrivauditorError(f"{path} is a folder: name one JSONL, CSV, Parquet or TXT file of records")
    if not file.is_file():
        raise PrivauditorError(f"no such file: {path}")
    try:
        rows = list(read_file(file))
    except DataError as error:
        raise PrivauditorError(str(error)) from None
    columns = sorted({k for _, row in rows if isinstance(row, dict) for k in row})
    if text_column is not None:
        return column_records(path, tag, rows, text_column, columns), {}
    if is_chat(rows):
        chats = {}
        for locator, row in rows:
            where = f"{path} {locator}"
            if not isinstance(row, dict):
                raise PrivauditorError(f"{where}: {row.reason}")
            chats[f"{tag}:{row.get('id') or locator.replace(' ', '-')}"] = messages_of(row, where)
        return [render(sample_id, messages) for sample_id, messages in chats.items()], chats
    readable = (
        "an audit reads a 'text' column, 'prompt' + 'target', chat 'messages' or a dataset plugin's fields; "
        f"columns found: {', '.join(columns[:8]) or 'none'}"
    )
    try:
        loaded = load_dataset(path)
    except DataError as error:
        raise PrivauditorError(f"{error}; {readable}") from None
    examples = loaded.examples
    if loaded.report.dropped and not skip_bad:  # an audit reads every record it is given, or says why not
        raise PrivauditorError(
            f"{loaded.report.summary()}: fix those records, or pass --skip-bad-records to audit the rest"
        )
    if not examples:
        raise PrivauditorError(f"{path}: no usable records; {readable}")
    return [Example(f"{tag}:{e.sample_id}", e.prompt, e.target) for e in examples], {}


def column_records(path: str, tag: str, rows: list, column: str, columns: list[str]) -> list[Example]:
    """Each row's ``column`` as one record's text (empty cells skipped); a column no row has is an error."""
    if column not in columns:
        raise PrivauditorError(
            f"{path}: no column '{column}' (--text-column); columns found: {', '.join(columns[:8]) or 'none'}"
        )
    found = []
    for locator, row in rows:
        value = row.get(column) if isinstance(row, dict) else None
        if isinstance(value, str) and value.strip():
            found.append(Example(f"{tag}:{row.get('id') or locator.replace(' ', '-')}", "", value))
    if not found:
        raise PrivauditorError(f"{path}: column '{column}' holds no text")
    return found


def normalised(text: str) -> str:
    return " ".join(text.split()).casefold()


def overlap(members: list[Example], nonmembers: list[Example]) -> tuple[int, int]:
    """How many non-members equal a member exactly, and how many after normalisation."""
    exact = {m.text for m in members}
    loose = {normalised(m.text) for m in members}
    return sum(n.text in exact for n in nonmembers), sum(normalised(n.text) in loose for n in nonmembers)


def shingles(text: str) -> frozenset[tuple[str, ...]]:
    words = re.findall(r"\w+", text.casefold())
    if len(words) < NGRAM:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i : i + NGRAM]) for i in range(len(words) - NGRAM + 1))


def near_duplicates(members: list[Example], nonmembers: list[Example]) -> int:
    """Non-members with a member at word 5-gram Jaccard >= 0.8 (candidates by shared 5-gram: exact)."""
    member_sets = [shingles(m.text) for m in members]
    index: dict[tuple[str, ...], list[int]] = {}
    for i, grams in enumerate(member_sets):
        for gram in grams:
            index.setdefault(gram, []).append(i)
    found = 0
    for n in nonmembers:
        grams = shingles(n.text)
        candidates = {i for gram in grams for i in index.get(gram, ())}
        found += any(
            len(grams & member_sets[i]) >= NEAR_DUPLICATE * len(grams | member_sets[i]) for i in candidates
        )
    return found


def perfect_separation_p(n_members: int, n_nonmembers: int) -> float:
    """Exact two-sided Mann-Whitney p-value of every member above every non-member."""
    from scipy.stats import mannwhitneyu

    if n_members * n_nonmembers > 20_000:  # scipy's exact null grows with n·m; it equals this count
        return min(1.0, 2 / math.comb(n_members + n_nonmembers, n_members))  # 1 arrangement a tail
    members = range(n_nonmembers, n_nonmembers + n_members)
    return float(mannwhitneyu(list(members), list(range(n_nonmembers)), method="exact").pvalue)


def check_inputs(members: list[Example], nonmembers: list[Example], attacks: int) -> list[str]:
    """Refuse what cannot be audited (one-line errors); return the warnings for what is weak."""
    exact, loose = overlap(members, nonmembers)
    if loose:
        how = f"{exact} exactly" + (
            f", {loose - exact} more after whitespace/case normalisation" if loose > exact else ""
        )
        raise PrivauditorError(
            f"{loose} of {len(nonmembers)} non-members also appear among the members ({how}): "
            "a record cannot be both; remove them from one file"
        )
    level = ALPHA / max(attacks, 1)
    p = perfect_separation_p(len(members), len(nonmembers))
    if p > level:
        raise PrivauditorError(
            f"{len(members)} members against {len(nonmembers)} non-members cannot show leakage: even every "
            f"member scored above every non-member has p = {p:.3g} (exact Mann-Whitney) > {level:.3g} "
            f"(0.05 over {attacks} attacks); add records"
        )
    warnings = []
    near = near_duplicates(members, nonmembers)
    if near:
        warnings.append(
            f"{near} of {len(nonmembers)} non-members are near-duplicates of a member (word 5-gram "
            f"Jaccard >= {NEAR_DUPLICATE}): their scores say little about membership; consider removing them"
        )
    for label, target in TPR_TARGETS.items():
        if len(nonmembers) * target < 10:
            warnings.append(
                f"TPR at {label} FPR is weak with {len(nonmembers):,} non-members (fewer than 10 expected false "
                f"positives; {round(10 / target):,} would give 10)"
            )
    return warnings


#: how a record is scored, by its form: what an attack reads of it
FORMS = {
    "text": "a whole text, every token scored",
    "prompt + target": "a target scored after its prompt",
    "chat": "a conversation, its last assistant turn scored",
}
#: ``--render``: every record rendered one way, whatever its form
RENDERINGS = ("text",)


def form_of(example: Example, chats: Mapping[str, Any]) -> str:
    if example.sample_id in chats:
        return "chat"
    return "text" if not example.prompt else "prompt + target"


def one_form(
    parts: dict[str, list[Example]], chats: Mapping[str, Any], render: str | None
) -> dict[str, list[Example]]:
    """The parts in one form: as they are when every record has the same form; with ``render="text"``
    every record as one whole text (a chat record is rendered whole once its template is known). Records
    of different forms otherwise are a one-line error naming the forms and counts: an attack would tell
    the forms apart, not members from non-members."""
    if render == "text":
        return {part: [e if e.sample_id in chats else Example(e.sample_id, "", e.text) for e in found]
                for part, found in parts.items()}  # fmt: skip
    counts = {part: Counter(form_of(e, chats) for e in found) for part, found in parts.items()}
    if len(set().union(*counts.values())) > 1:
        said = "; ".join(
            f"{part.replace('nonmembers', 'non-members')}: "
            + ", ".join(f"{n} {form}" for form, n in sorted(c.items()))
            for part, c in counts.items()
        )
        raise PrivauditorError(
            f"the files hold records of different forms ({said}): an attack would tell the forms apart, not "
            "members from non-members; write both files in one form, or pass --render text to score every "
            "record as one whole text"
        )
    return parts
