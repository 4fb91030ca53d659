"""Errors that mean "the user's input is wrong" (exit code 2), as opposed to bugs (tracebacks)."""

from __future__ import annotations

import difflib


class PrivauditorError(Exception):
    """Bad input or configuration. The message is one line that names the problem and what is allowed."""

    exit_code = 2


class UnknownNameError(PrivauditorError, KeyError):
    """A name that no registry knows; the message lists the known names and the closest match."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class DataError(PrivauditorError):
    """A dataset file or record that cannot be used. Names records by id or line, never by content."""


def one_line(exc: BaseException, limit: int = 200) -> str:
    """``Type: first line of the message`` of a third-party exception, cut to ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def closest(name: str, known: list[str]) -> str | None:
    """The known name most similar to ``name`` (for "did you mean"), or None if nothing is close."""
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    if not matches:
        lowered = {k.lower(): k for k in known}
        matches = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.5)
        matches = [lowered[m] for m in matches]
    return matches[0] if matches else None


def unknown_name_message(kind: str, name: str, known: list[str]) -> str:
    """One line: the unknown name, the closest known one and the full list."""
    hint = closest(name, known)
    did_you_mean = f"; did you mean '{hint}'?" if hint else ""
    return f"unknown {kind} '{name}'{did_you_mean} (known: {', '.join(sorted(known)) or 'none'})"
