"""Put a serving benchmark's request log on the run being recorded (``record --requests``).

The file is read after the command ended (the client writes it last), and its times are put on
the run clock with the sampler's t0 and (monotonic, UTC) anchor from the spool. A CSV log is
streamed into the run's shard as ``import requests-csv`` streams it
(:func:`llm_powertrace_ds.importers.requests_stream.stream_csv_requests`: memory independent
of its rows, the shard written under the run's staging folder, which publishing renames);
vLLM's and SGLang's logs (JSON documents read whole) are put on the run clock in memory
(:func:`llm_powertrace_ds.importers.requests_common.to_run_clock`). Either way the same
checks name the same problems, and the rows also give the run's ``requests_completed``,
``tokens_in``, ``tokens_out``, TTFT and latency percentiles.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from llm_powertrace_ds import layout
from llm_powertrace_ds.importers.requests import (
    StreamedRequests,
    log_file,
    read_requests,
    stream_csv_requests,
    to_run_clock,
)
from llm_powertrace_ds.request_rows import RequestRows
from llm_powertrace_ds.run import Run


def rows_on_run_clock(fmt: str, path: str | Path, staging_dir: Path, *, run_id: str,
                      platform: str, run_end_ms: int) -> RequestRows | StreamedRequests:
    """The request rows of ``path`` on the clock of the spool in ``staging_dir``.

    Returns:
        A CSV log's staged shard and summary (:class:`StreamedRequests`; publishing the run
        renames the shard, :func:`llm_powertrace_ds.importers.requests.discard` removes what
        is left), or the rows of a vLLM or SGLang log.

    Raises:
        InputError: the log's first problem (naming its file, and line or request and field).
        ValueError: a spool without samples, or a staging folder outside a dataset folder.
    """
    from generation.sampler import read_spool

    spool = read_spool(staging_dir)
    if spool.t0_ns is None:
        raise ValueError(f"the spool in '{staging_dir}' has no samples")
    anchor = spool.anchors.get("start")
    if fmt == "csv":
        root = staging_dir.parent.parent
        if layout.staging_dir(root, run_id) != staging_dir:
            raise ValueError(f"'{staging_dir}' is not the staging folder of run {run_id}")
        run = Run(meta={"run_id": run_id, "platform": platform, "workload": "inference"},
                  devices=[])
        return stream_csv_requests(root, run, log_file(fmt, path), anchor=anchor,
                                   run_end_ms=run_end_ms, t0_ns=spool.t0_ns)
    log = read_requests(fmt, path)
    return to_run_clock(log, run_id=run_id, platform=platform, t0_ns=spool.t0_ns,
                        anchor=anchor, run_end_ms=run_end_ms)


def loader(fmt: str, path: str | Path) -> Callable[..., RequestRows | StreamedRequests]:
    """A ``Recording.requests_from`` callable for ``fmt:path``."""
    def load(staging_dir: Path, *, run_id: str, platform: str,
             run_end_ms: int) -> RequestRows | StreamedRequests:
        return rows_on_run_clock(fmt, path, staging_dir, run_id=run_id, platform=platform,
                                 run_end_ms=run_end_ms)
    return load


__all__ = ["loader", "rows_on_run_clock"]
