"""Read a serving benchmark's per-request log in any supported format.

Formats: ``vllm`` (:mod:`.requests_vllm`), ``sglang`` (:mod:`.requests_sglang`), ``csv``
(:mod:`.requests_csv`); :func:`.requests_common.to_run_clock` puts them on a run's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import InputError
from .requests_common import RequestLog, summary_columns, to_run_clock
from .requests_csv import read_csv_requests
from .requests_sglang import read_sglang_requests
from .requests_vllm import read_vllm_requests

READERS: dict[str, Callable[[Path], RequestLog]] = {
    "vllm": read_vllm_requests,
    "sglang": read_sglang_requests,
    "csv": read_csv_requests,
}
REQUEST_FORMATS = tuple(READERS)


def read_requests(fmt: str, path: str | Path) -> RequestLog:
    """Read one request log.

    Raises:
        InputError: an unknown format, a missing file, or bad content (names file and field).
    """
    if fmt not in READERS:
        raise InputError(f"unknown request-log format {fmt!r}; known: {', '.join(READERS)}",
                         field="format")
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file (did the command write its result there?)", file=path)
    return READERS[fmt](path)


__all__ = ["REQUEST_FORMATS", "RequestLog", "read_requests", "summary_columns", "to_run_clock"]
