"""Read a serving benchmark's per-request log in any supported format.

Formats: ``vllm`` (:mod:`.requests_vllm`), ``sglang`` (:mod:`.requests_sglang`), ``csv``
(:mod:`.requests_csv`); :func:`.requests_common.to_run_clock` puts them on a run's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InputError
from .requests_common import RequestLog, summary_columns, to_run_clock
from .requests_csv import read_csv_requests
from .requests_sglang import read_sglang_requests
from .requests_stream import StreamedRequests, discard, stream_csv_requests
from .requests_vllm import read_vllm_requests

READERS: dict[str, Callable[[Path], RequestLog]] = {
    "vllm": read_vllm_requests,
    "sglang": read_sglang_requests,
    "csv": read_csv_requests,
}
REQUEST_FORMATS = tuple(READERS)


def log_file(fmt: str, path: str | Path) -> Path:
    """``path`` as a request log of a known format that exists.

    Raises:
        InputError: an unknown format or a missing file.
    """
    if fmt not in READERS:
        raise InputError(f"unknown request-log format {fmt!r}; known: {', '.join(READERS)}",
                         field="format")
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file (did the command write its result there?)", file=path)
    return path


def read_requests(fmt: str, path: str | Path) -> RequestLog:
    """Read one request log whole (a long CSV is streamed instead: :mod:`.requests_stream`).

    Raises:
        InputError: an unknown format, a missing file, or bad content (names file and field).
    """
    path = log_file(fmt, path)  # before READERS[fmt]: an unknown format is an InputError
    return READERS[fmt](path)


def _read_without_requests(root: str | Path, run_id: str) -> Any:
    """A published run's trace and metadata, not its request log (the import replaces it)."""
    from ..shards.read import RunReader

    class WithoutRequests(RunReader):
        def _attach(self, run: Any) -> None:
            return None

    return WithoutRequests(root).read(run_id)


def attach_requests(root: str | Path, run_id: str, fmt: str, path: str | Path) -> Any:
    """Put a wall-clock request log onto a published inference run and publish it again.

    Only ``csv`` logs (UNIX seconds) can be aligned after the fact, through the run's
    ``start_time`` (the UTC time of its first tick, ms precision). The file is streamed
    (:mod:`.requests_stream`): memory does not grow with its rows. vLLM's and SGLang's
    ``start_times`` are on the client machine's monotonic clock, which only the sampler's anchor
    relates to UTC: give those files to ``record --requests`` while recording.

    Returns:
        The ``PublishResult`` of the re-published run.

    Raises:
        InputError: a monotonic-clock format, a finetune run, a run without ``start_time``, or
            requests outside the run (naming the file).
        RunNotFound: no such run.
    """
    from ..run import coerce_meta
    from ..shards import publish_run

    if fmt in READERS and fmt != "csv":
        raise InputError(f"{fmt} request times are on the client's monotonic clock and cannot be "
                         "aligned after the fact: record them with `llm-powertrace record "
                         f"--requests {fmt}:FILE -- ...`", file=path, field="format")
    path = log_file(fmt, path)
    run = _read_without_requests(root, run_id)  # an earlier log is never loaded
    if run.workload != "inference":
        raise InputError(f"run {run_id} is a {run.workload} run; request logs belong to "
                         "inference runs", field="workload")
    start = run.meta.get("start_time")
    if start is None:
        raise InputError(f"run {run_id} has no start_time to align wall-clock times with",
                         file=path, field="start_time")
    utc_ns = int(round(start.timestamp() * 1000)) * 1_000_000
    run_end_ms = max((int(d.t_ms[-1]) for d in run.devices if len(d.t_ms)), default=0)
    root = Path(root)
    streamed = stream_csv_requests(root, run, path, anchor={"monotonic_ns": 0, "utc_ns": utc_ns},
                                   run_end_ms=run_end_ms)
    try:
        run.requests = streamed.requests
        found = {k: v for k, v in streamed.summary.items()
                 if v is not None and run.meta.get(k) is None}
        run.meta.update(coerce_meta(found, "inference"))
        return publish_run(root, run, refresh_card=False)
    finally:
        discard(root, run.run_id)  # published: renamed away; else what was staged


__all__ = ["REQUEST_FORMATS", "RequestLog", "attach_requests", "log_file", "read_requests",
           "StreamedRequests", "discard", "stream_csv_requests", "summary_columns",
           "to_run_clock"]
