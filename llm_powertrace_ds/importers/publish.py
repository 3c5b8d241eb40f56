"""Import many log files into a dataset folder as a stream: parse one, publish it, forget it.

Memory is bounded by the largest file, not by the number of files (issue 13): a file's run is
published (atomically, ``shards.publish_run``) before the next file is read. The command's fixed
cost — the full card — is paid once by the caller, after the stream.

A bad file stops the stream with its one-line error; the files before it stay published (each
one complete), the bad one and those after it change nothing. ``check_first=True`` restores
all-or-nothing for a batch: every file is parsed and checked once before any is published
(twice the parsing time, still bounded memory).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..run import Run
from ..shards import publish_run
from ..validate import validate_run
from . import import_file

log = logging.getLogger("llm_powertrace_ds.importers")


@dataclass(frozen=True)
class ImportOptions:
    """How every file of one import command is read (see :func:`import_file`)."""

    fmt: str
    workload: str
    meta_path: Path | None = None
    platform: str | None = None
    num_gpus: int | None = None
    tz: str | None = "UTC"


@dataclass(frozen=True)
class ImportedFile:
    """One published file: its run, where it went, its flags and its size in samples."""

    path: Path
    run_id: str
    platform: str
    num_gpus: int
    samples: int
    flags: tuple[str, ...]
    files: tuple[str, ...]


def _read(path: Path, options: ImportOptions) -> Run:
    return import_file(options.fmt, path, workload=options.workload, meta_path=options.meta_path,
                       platform=options.platform, num_gpus=options.num_gpus, tz=options.tz)


def check_files(paths: Sequence[Path], options: ImportOptions) -> None:
    """Parse and validate every file without writing anything (one file in memory at a time).

    Raises:
        InputError: the first bad file, naming the file, the line and the field.
    """
    for path in paths:
        run = _read(path, options)
        report = validate_run(run)
        if report.errors:
            raise InputError(f"run {run.run_id} failed validation: "
                             f"{'; '.join(report.messages)}", file=path, field="quality_flags")


def import_stream(paths: Sequence[Path], root: Path, options: ImportOptions, *,
                  check_first: bool = False) -> Iterator[ImportedFile]:
    """Import and publish each file in turn; yield what each one wrote.

    Args:
        paths: the log files.
        root: the dataset folder.
        options: how to read them.
        check_first: check every file before publishing any (all-or-nothing).

    Raises:
        InputError: a bad file (the ones already yielded stay published).
    """
    if check_first:
        check_files(paths, options)
    for path in paths:
        run = _read(path, options)
        res = publish_run(root, run)
        yield ImportedFile(path=path, run_id=res.run_id, platform=run.platform,
                           num_gpus=len(run.devices),
                           samples=sum(len(d) for d in run.devices), flags=tuple(res.flags),
                           files=tuple(res.files))
        del run
