"""The project's small exception hierarchy.

Each error subclasses both :class:`PowerTraceError` and the matching built-in, so callers can
catch either (``except FileNotFoundError`` still works). Messages are one line and name the
file, the line and the field where they are known.
"""

from __future__ import annotations

from pathlib import Path

MAX_MESSAGE_CHARS = 2000
"""Longest reason an ``InputError`` carries (the input's own text is never dumped whole)."""


class PowerTraceError(Exception):
    """Base class of every error this package raises on purpose."""


def _where(file: str | Path | None, line: int | None, field: str | None) -> str:
    parts = []
    if file is not None:
        parts.append(f"'{file}'")
    if line is not None:
        parts.append(f"line {line}")
    if field is not None:
        parts.append(f"field '{field}'")
    return ", ".join(parts)


class InputError(PowerTraceError, ValueError):
    """Bad input: a file to import, a metadata file, a sweep, a shard.

    Args:
        message: what is wrong, including the offending value.
        file: the file it is in.
        line: 1-based line number, when known.
        field: the field or column, when known.
    """

    def __init__(self, message: str, *, file: str | Path | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        if len(message) > MAX_MESSAGE_CHARS:  # one line, never a dump of the input
            message = message[: MAX_MESSAGE_CHARS - 3] + "..."
        self.reason = message
        where = _where(file, line, field)
        super().__init__(f"{where}: {message}" if where else message)


class ShardError(PowerTraceError, OSError):
    """A shard or dataset folder that cannot be read or written."""


class RunNotFound(PowerTraceError, FileNotFoundError):
    """A run id that is not in the dataset folder."""


class LockTimeout(PowerTraceError, TimeoutError):
    """Another process holds a lock for too long."""


class UsageError(InputError):
    """A request that cannot be served as asked: a bad option or combination of options.

    The command line reports it as one line with exit code 2; a library caller can catch it as
    the ``InputError`` (and ``ValueError``) it is.
    """


class MissingExtra(PowerTraceError, ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra that brings it.

    A ``ModuleNotFoundError`` (hence an ``ImportError``), so ``except ImportError`` still works.
    """
