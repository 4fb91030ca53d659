"""What every dataset plugin provides, and the one path that turns raw rows into scored examples.

Rows come from an offline generator, a Hugging Face dataset or a local file; whatever the source they
pass through :func:`build_examples`, which maps columns to the plugin's schema, renders each record into
(``prompt``, ``target``) and drops — with a report, never a crash — records that are empty, not valid
UTF-8, missing a field, duplicated or over-long. Records are named by id or line number in reports,
never quoted: their text may be private.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

# A record longer than this (prompt + target, in characters) is dropped as over-long. Sequences are
# also truncated to the sweep's max_length tokens at training/scoring time; this bound only keeps
# pathological rows (pasted documents, base64 blobs) out of a split.
MAX_RECORD_CHARS = 4000


@dataclass(frozen=True)
class Example:
    """One rendered record: ``prompt`` is the generic task instruction, ``target`` the record itself."""

    sample_id: str
    prompt: str
    target: str

    @property
    def text(self) -> str:
        return f"{self.prompt}{self.target}"


@dataclass
class LoadReport:
    """What happened to each raw row: counts, and the locators (id or line) of dropped ones."""

    source: str
    total: int = 0
    dropped: dict[str, list[str]] = field(default_factory=dict)

    @property
    def kept(self) -> int:
        return self.total - sum(len(v) for v in self.dropped.values())

    def drop(self, reason: str, locator: str) -> None:
        self.dropped.setdefault(reason, []).append(locator)

    def summary(self, max_locators: int = 5) -> str:
        """One line, e.g. ``data.jsonl: 10 rows, 8 kept; dropped 1 empty (line 3), 1 duplicate (id r7)``."""
        parts = []
        for reason, locators in sorted(self.dropped.items()):
            shown = ", ".join(locators[:max_locators]) + (", ..." if len(locators) > max_locators else "")
            parts.append(f"{len(locators)} {reason} ({shown})")
        dropped = f"; dropped {', '.join(parts)}" if parts else ""
        return f"{self.source}: {self.total} rows, {self.kept} kept{dropped}"


class BadRow:
    """A raw row that could not even be parsed (invalid UTF-8, broken JSON)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class DatasetPlugin:
    """Base class of a dataset plugin (one file each, registered in ``DATASETS``).

    Subclasses set the class attributes and implement :meth:`render_target` and :meth:`generate`.
    """

    name: ClassVar[str]
    #: The generic task instruction, identical for every record (the scored prompt).
    instruction: ClassVar[str]
    #: Fields every record has (the schema of the real dataset, in our names).
    fields: ClassVar[tuple[str, ...]]
    #: Fields a record may lack (rendered only when present).
    optional_fields: ClassVar[tuple[str, ...]] = ()
    #: The real dataset on the Hugging Face hub, and its config / split / revision.
    hub_id: ClassVar[str | None] = None
    hub_config: ClassVar[str | None] = None
    hub_split: ClassVar[str] = "train"
    #: Real dataset column → our field name, for columns whose names differ.
    column_map: ClassVar[Mapping[str, str]] = {}
    #: Records the offline generator makes by default.
    #: The PII fields its records hold: kind -> a regular expression over the rendered target whose first
    #: group (or whole match) is the value; ``{person}`` and ``{company}`` stand for Faker's en_US names
    #: (privauditor.tasks.leakage.pii)
    pii: ClassVar[Mapping[str, str]] = {}
    offline_size: ClassVar[int] = 3000
    #: Records it makes after those for the reserved pool, which no split draws from: learning rates are
    #: chosen on them (``benchmarks/learning_rates.py``: 64 members and 32 validation records per dataset)
    reserved_size: ClassVar[int] = 256

    def render_target(self, record: Mapping[str, str]) -> str:
        """The record-specific text that is trained on and scored."""
        raise NotImplementedError

    def generate(self, n: int, seed: int) -> list[dict[str, str]]:
        """``n`` offline records with an ``id`` and every field, deterministic in ``seed``."""
        raise NotImplementedError

    def render(self, record: Mapping[str, str]) -> tuple[str, str]:
        """(prompt, target) of one record; the prompt ends with a newline so tokens do not merge."""
        return f"{self.instruction}\n", self.render_target(record)

    def map_columns(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """A raw row with real-dataset column names renamed to this plugin's field names."""
        return {self.column_map.get(k, k): v for k, v in row.items()}


def _clean(value: Any) -> str | None:
    """A field value as text; None for missing; raises UnicodeError for undecodable bytes."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    text = str(value)
    text.encode("utf-8")  # surrogates left by a lenient decoder are not valid UTF-8
    return text


def plain_turns(turns: Iterable[tuple[str, str]]) -> str:
    """Chat turns as plain ``role: content`` lines (a tokenizer without a chat template renders them so)."""
    return "".join(f"{role}: {content}\n" for role, content in turns)


def chat_fields(messages: Any) -> dict[str, str]:
    """A chat record (``messages``: ``{role, content}`` turns) as ``prompt`` + ``target`` in plain
    ``role: content`` lines, the last assistant turn the target (a model's chat template renders it
    in an audit: ``privauditor.tasks.data.chat``). Raises ValueError naming what is wrong."""
    if not isinstance(messages, list) or not all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages
    ):
        raise ValueError("'messages' must be a list of {role, content} strings")
    turns = [(m["role"], m["content"]) for m in messages]
    assistant = [i for i, (role, _) in enumerate(turns) if role == "assistant"]
    if not assistant:
        raise ValueError("a conversation with no assistant turn has nothing to score")
    prompt = plain_turns(turns[: assistant[-1]]) + "assistant: "
    return {"prompt": prompt, "target": turns[assistant[-1]][1] + "\n"}


def build_examples(
    rows: Iterable[tuple[str, Mapping[str, Any] | BadRow]],
    plugin: DatasetPlugin | None,
    source: str,
    max_chars: int = MAX_RECORD_CHARS,
) -> tuple[list[Example], LoadReport]:
    """Validate and render raw rows (``(locator, row)`` pairs) into examples plus a report.

    With a plugin, rows are mapped to its schema and rendered; without one (a user's own file), a row
    needs ``prompt`` + ``target``, a ``text`` column or chat ``messages``. Sample ids are the row's ``id``
    when present, else the locator, so reports and results name records the same way.
    """
    report = LoadReport(source=source)
    examples: list[Example] = []
    seen_text: set[str] = set()
    seen_ids: set[str] = set()
    for locator, row in rows:
        report.total += 1
        if isinstance(row, BadRow):
            report.drop(row.reason, locator)
            continue
        try:
            record = _mapped(row, plugin)
        except _Dropped as dropped:
            report.drop(str(dropped), locator)
            continue
        sample_id = record.get("id") or locator.replace(" ", "-")
        where = f"id {record['id']}" if record.get("id") else locator
        try:
            prompt, target = _prompt_target(record, plugin)
        except _Dropped as dropped:
            report.drop(str(dropped), where)
            continue
        if len(prompt) + len(target) > max_chars:
            report.drop(f"over {max_chars} characters", where)
        elif sample_id in seen_ids:
            report.drop("duplicate id", where)
        elif prompt + target in seen_text:
            report.drop("duplicate", where)
        else:
            seen_ids.add(sample_id)
            seen_text.add(prompt + target)
            examples.append(Example(sample_id=sample_id, prompt=prompt, target=target))
    return examples, report


class _Dropped(Exception):
    """Why a row is left out (its message is the report's reason)."""


def _mapped(row: Mapping[str, Any], plugin: DatasetPlugin | None) -> dict[str, Any]:
    """The row as a record of the plugin's schema (a user's chat record as prompt + target), cleaned."""
    if plugin is None and "messages" in row:  # a chat record (see chat_fields)
        try:
            row = {"id": row.get("id")} | chat_fields(row["messages"])
        except ValueError as error:
            raise _Dropped(str(error)) from None
    try:
        return {k: _clean(v) for k, v in (plugin.map_columns(row) if plugin else row).items()}
    except UnicodeError:
        raise _Dropped("not valid UTF-8") from None


def _prompt_target(record: dict[str, Any], plugin: DatasetPlugin | None) -> tuple[str, str]:
    """The record's (prompt, target): the plugin's rendering, a ``text`` column as the target alone, or
    its ``prompt`` and ``target``."""
    needed = plugin.fields if plugin else (("text",) if "text" in record else ("prompt", "target"))
    missing = [f for f in needed if record.get(f) is None]
    if missing:
        raise _Dropped(f"missing field {'/'.join(missing)}")
    if all(not (record.get(f) or "").strip() for f in needed):
        raise _Dropped("empty")
    if plugin:
        prompt, target = plugin.render(record)
    elif "text" in needed:
        prompt, target = "", record["text"]
    else:
        prompt, target = record["prompt"], record["target"]
    if not target.strip():
        raise _Dropped("empty")
    return prompt, target


def content_hash(examples: Iterable[Example]) -> str:
    """sha256 over ids, prompts and targets, in order: the identity of a dataset or split."""
    digest = hashlib.sha256()
    for ex in examples:
        for part in (ex.sample_id, ex.prompt, ex.target):
            digest.update(part.encode("utf-8"))
            digest.update(b"\x00")
    return digest.hexdigest()
