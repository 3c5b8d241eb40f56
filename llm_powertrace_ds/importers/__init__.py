"""Importers of power logs measured by other tools.

Each importer turns one log file (and its metadata) into the same :class:`~llm_powertrace_ds.run.Run`
that the generator produces; ``shards.publish_run`` then validates and publishes it.

Example:
    >>> from llm_powertrace_ds.importers import import_file  # doctest: +SKIP
    >>> run = import_file("nvidia-smi", "gpu.csv", workload="inference", tz="America/Phoenix")

Formats:
    ``nvidia-smi``: logs of ``nvidia-smi --query-gpu=... --format=csv[,nounits] -lms N``.
    ``powertrace-csv``: the LLM-PowerTrace authors' long CSV with its metadata JSON, or their
    explorer's compact run file ``runs/<run_id>.json[.gz]`` (:mod:`.powertrace_compact`).
    ``dcgm``: ``dcgmi dmon -e 155,156,150,203,100,101 -d 100`` text output (:mod:`.dcgm`).
    ``mlenergy-v2`` (a summaries format: one task folder, many runs, no traces): ML.ENERGY
    leaderboard v2 run summaries, see :mod:`.mlenergy_v2` and :func:`import_summaries`.
    ``mlenergy-v3`` (many files, one run per ``results.json``): ML.ENERGY benchmark v3 results
    trees, see :func:`.mlenergy_v3.iter_mlenergy_v3`.
    ``wattameter`` (many files, one run per Slurm job): WattAMeter ``nvml_*.log`` files, see
    :func:`.wattameter.import_wattameter`.
    ``series`` (one time/power CSV of a device, node or cluster total, flagged
    ``aggregate_series``): see :func:`.series.import_series`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .. import schema
from ..errors import InputError
from ..run import Run
from .common import load_meta_file, resolve_zone
from .dcgm import import_dcgm
from .nvidia_smi import import_nvidia_smi
from .powertrace_compact import import_compact, is_compact
from .powertrace_csv import import_powertrace_csv

__all__ = ["FORMATS", "SUMMARY_FORMATS", "import_file", "import_summaries", "load_meta_file"]

FORMATS = ("nvidia-smi", "powertrace-csv", "dcgm")
SUMMARY_FORMATS = ("mlenergy-v2",)
"""Formats of published run summaries without power traces (one folder, many runs)."""


def import_summaries(fmt: str, path: str | Path) -> list[tuple[Run, dict]]:
    """Read a folder of run summaries as ``(Run without devices, metrics)`` pairs.

    Publish them with :func:`.mlenergy_v2.publish_summaries` (runs rows only, flag
    ``summary_only``). Raises ``InputError`` on bad input, before anything is written.
    """
    from .mlenergy_v2 import summary_runs

    if fmt not in SUMMARY_FORMATS:
        raise InputError(f"unknown summaries format {fmt!r}; known: {', '.join(SUMMARY_FORMATS)}",
                         field="format")
    return summary_runs(path)

log = logging.getLogger("llm_powertrace_ds.importers")


def import_file(fmt: str, path: str | Path, *, workload: str, meta_path: str | Path | None = None,
                platform: str | None = None, num_gpus: int | None = None,
                tz: str | None = "UTC") -> Run:
    """Import one log file as a :class:`Run` (nothing is written).

    Args:
        fmt: ``nvidia-smi``, ``powertrace-csv`` or ``dcgm``.
        path: the log file.
        workload: ``finetune`` or ``inference`` (what ran while it was logged).
        meta_path: for ``nvidia-smi`` a flat JSON/YAML mapping of our column names (default: the
            ``<stem>.job_info.yaml`` sidecar if present); for ``powertrace-csv`` its metadata
            JSON (default: the ``.json`` beside the CSV).
        platform: the split slug (default: from the GPU name in the log or metadata, else
            ``unknown`` with the flag ``platform_unknown``).
        num_gpus: GPUs of a log without a GPU column (default: inferred from the timestamps).
        tz: IANA time zone of zone-less timestamps (default UTC).

    Returns:
        The run, ready for ``shards.publish_run``.

    Raises:
        InputError: bad input; its one-line message names the file, the line and the field.
    """
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}", field="format")
    if workload not in schema.WORKLOADS:
        raise InputError(f"workload {workload!r} is not one of {', '.join(schema.WORKLOADS)}",
                         field="workload")
    if num_gpus is not None and num_gpus < 1:
        raise InputError(f"num_gpus must be at least 1, got {num_gpus}", field="num_gpus")
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", file=path)
    if fmt == "dcgm":
        return import_dcgm(path, workload=workload, meta_path=meta_path, platform=platform,
                           num_gpus=num_gpus)
    if fmt == "nvidia-smi":
        return import_nvidia_smi(path, workload=workload, meta_path=meta_path, platform=platform,
                                 num_gpus=num_gpus, zone=resolve_zone(tz))
    if is_compact(path):  # runs/<run_id>.json[.gz] of their explorer: {run, samples, ...}
        if meta_path is not None:
            raise InputError("a compact run file carries its own metadata (its `run`); drop "
                             "--meta", file=path, field="--meta")
        return import_compact(path, workload=workload, platform=platform, num_gpus=num_gpus)
    return import_powertrace_csv(path, workload=workload, meta_path=meta_path, platform=platform,
                                 num_gpus=num_gpus, zone=resolve_zone(tz))
