"""Publish runs that an importer built from several files at once (one run per job or file).

The same all-or-nothing road as :func:`.publish.import_stream`: every run is staged
(``shards.stage_run``) before any is committed, so a bad run leaves ``data/`` unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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
from .publish import ImportedFile


def publish_runs(root: Path, runs: Iterable[tuple[Path, Run]], *,
                 configs_block: bool = True) -> Iterator[ImportedFile]:
    """Stage every ``(source path, run)``, then commit them all; yield each result.

    Raises:
        InputError: a run fails validation; nothing is published, the staged files are removed.
    """
    staged: list[tuple[Path, tuple[str, int, int], PreparedRun]] = []
    try:
        for path, run in runs:
            prepared = stage_run(root, prepare_run(root, run))
            staged.append((path, (run.platform, int(run.meta.get("num_gpus") or len(run.devices)),
                                  sum(len(d) for d in run.devices)), prepared))
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
        if staged and configs_block:
            write_configs_block(root)


__all__ = ["publish_runs"]
