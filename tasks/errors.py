"""Errors that mean "the user's input is wrong" (exit code 2), as opposed to bugs (tracebacks)."""

from __future__ import annotations


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
