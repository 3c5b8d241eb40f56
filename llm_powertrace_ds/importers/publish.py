"""Import many log files into a dataset folder: one file in memory at a time, all or nothing.

Each file is parsed, validated and turned into its tables, which are written at once into
``.staging/<run_id>/publish/`` (``shards.stage_run``); only its small summary stays in memory,
so memory is bounded by the largest file, not by the number of files (issue 13). When every
file has passed, the staged files are renamed into ``data/`` (``shards.commit_run``: cheap, one
rename per file). A bad file stops the command with its one-line error and removes what this
command staged: ``data/`` is unchanged, as before the streaming reader. The full card is the
caller's, once per command.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..run import Run
from ..shards import (
    PreparedRun,
    commit_run,
    discard_staged,
    prepare_run,
    stage_run,
    write_configs_block,
)
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


def import_stream(paths: Sequence[Path], root: Path, options: ImportOptions, *,
                  configs_block: bool = True) -> Iterator[ImportedFile]:
    """Import every file (staged one at a time), then publish them all; yield each result.

    Args:
        paths: the log files.
        root: the dataset folder.
        options: how to read them.
        configs_block: write the card's YAML ``configs:`` block at the end; ``False`` when the
            caller rebuilds the whole card right after (``hooks.rebuild_card``, which writes the
            block itself, also when a card writer fails), so the folder is walked once.

    Raises:
        InputError: a bad file; nothing is published and the staged files are removed.
    """
    staged: list[tuple[Path, tuple[str, int, int], PreparedRun]] = []
    try:
        for path in paths:
            run = _read(path, options)
            prepared = stage_run(root, prepare_run(root, run))
            # keep only what the result rows need: nothing per tick stays in memory
            staged.append((path, (run.platform, len(run.devices),
                                  sum(len(d) for d in run.devices)), prepared))
            del run
    except BaseException:
        for _, _, prepared in staged:
            discard_staged(root, prepared)
        raise
    try:
        for path, (platform, num_gpus, samples), prepared in staged:
            res = commit_run(root, prepared, refresh_card=False)
            yield ImportedFile(path=path, run_id=res.run_id, platform=platform,
                               num_gpus=num_gpus, samples=samples, flags=tuple(res.flags),
                               files=tuple(res.files))
    finally:
        if staged and configs_block:  # once for the batch: the commits above are renames
            write_configs_block(root)
