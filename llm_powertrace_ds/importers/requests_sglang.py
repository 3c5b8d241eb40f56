"""SGLang's benchmark client (``python -m sglang.bench_serving``, now ``sglang.benchmark.serving``).

Two files of the client are read (``sglang:FILE`` tells them apart by content):

* **the ``--print-requests`` log** (its stdout, ``--backend sglang-oai-chat``): per request, the
  time it was sent and its TTFT and latency as the client measured them — placed on the run
  clock exactly (:mod:`.requests_sglang_log`). This is the recipe for SGLang runs.
* **the ``--output-file F --output-details`` result**: JSON Lines, each benchmark run *appends*
  one object (the last line, the most recent run, is read). Its details are the per-request
  arrays of vLLM's client, from which SGLang's is adapted: ``input_lens``, ``output_lens``,
  ``ttfts``, ``itls``, ``generated_texts``, ``errors`` (re-read in SGLang 0.5.23's
  ``sglang/benchmark/serving.py``) — and **no start times**: its ``RequestFuncOutput`` keeps a
  ``start_time`` but the details leave it out, and the arrivals cannot be rebuilt from durations
  (they depend on the event loop, the concurrency limit and the request-rate draws). Such a file
  is refused with an error naming ``start_times``; one that carries ``start_times``
  (``time.perf_counter()`` seconds, as vLLM's does) is read like vLLM's (:mod:`.requests_vllm`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from .. import bounded
from ..errors import InputError
from .requests_common import RequestLog
from .requests_sglang_log import PrintRequestsParser
from .requests_vllm import MAX_LOG_BYTES, requests_from_arrays

FORMAT = "sglang"
MAX_LINE_BYTES = 128 << 20
"""Longest line read (128 MiB): a ``--print-requests`` line is capped far below it (its printed
output at ``MAX_OUTPUT_CHARS``), a result line holds one run's per-request arrays."""


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's lines, one at a time, through the bounded reader's checks.

    A regular file of at most :data:`~.requests_vllm.MAX_LOG_BYTES` (the cap of vLLM's result
    file), each line at most :data:`MAX_LINE_BYTES` and UTF-8: memory holds one line, never the
    whole file.
    """
    try:
        path.stat()
    except OSError as exc:
        raise InputError(f"Failed to read: {type(exc).__name__}: {exc}", file=path) from None
    st = bounded.check_regular(path)  # a FIFO or a device is refused before a byte is read
    if st.st_size > MAX_LOG_BYTES:
        raise InputError(f"the file is {st.st_size} bytes; at most {MAX_LOG_BYTES} are read",
                         file=path)
    total = 0
    try:
        with path.open("rb") as fh:
            lineno = 0
            while raw := fh.readline(MAX_LINE_BYTES + 1):
                lineno += 1
                total += len(raw)
                if total > MAX_LOG_BYTES:
                    raise InputError(f"the file grew past {MAX_LOG_BYTES} bytes while read",
                                     file=path)
                if len(raw) > MAX_LINE_BYTES:
                    raise InputError(f"a line longer than {MAX_LINE_BYTES} bytes; refused",
                                     file=path, line=lineno)
                try:
                    text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(f"Failed to read: UnicodeDecodeError: {exc}",
                                     file=path) from None
                yield lineno, text.rstrip("\r\n")
    except OSError as exc:
        raise InputError(f"Failed to read: {type(exc).__name__}: {exc}", file=path) from None


def _last_run(path: Path, lineno: int, last: str) -> RequestLog:
    """The last line of a JSON Lines result file, read like vLLM's (module docstring)."""
    if bounded.nesting_depth(last) > bounded.MAX_DEPTH:  # before the recursive parser sees it
        raise InputError(f"nested deeper than {bounded.MAX_DEPTH} levels; refused", file=path,
                         line=lineno)
    try:
        data = json.loads(last)
    except ValueError as exc:
        raise InputError(f"not JSON: {exc}", file=path, line=lineno) from None
    except (RecursionError, MemoryError):
        raise InputError("nested too deeply to parse; refused", file=path,
                         line=lineno) from None
    if not isinstance(data, dict):
        raise InputError("expected one JSON object per line", file=path, line=lineno)
    if "ttfts" not in data:
        raise InputError("no per-request details: run bench_serving with --output-details",
                         file=path, line=lineno, field="ttfts")
    if "start_times" not in data:
        raise InputError("SGLang's --output-details result saves no per-request start times, so "
                         "its requests cannot be placed on the run clock: give the client's "
                         "stdout of --backend sglang-oai-chat --print-requests instead (the "
                         "serving engines in docs/recording.md)",
                         file=path, line=lineno, field="start_times")
    return requests_from_arrays(data, file=path, fmt=FORMAT)


def read_sglang_requests(path: str | Path) -> RequestLog:
    """Read SGLang's ``--print-requests`` log, or the last run of its JSONL result file.

    The file is read a line at a time through the bounded reader's checks (:func:`_lines`):
    a ``--print-requests`` log keeps only each request's measured numbers, a result file only
    its last non-blank line, which is depth-checked before it is parsed.

    Raises:
        InputError: unreadable, oversized or non-UTF-8 file, a line that cannot be read, no run
            in it, no per-request details, or a result file without ``start_times`` (see the
            module docstring).
    """
    path = Path(path)
    parser = PrintRequestsParser(path, fmt=FORMAT)
    last: tuple[int, str] | None = None
    for lineno, line in _lines(path):
        parser.feed(lineno, line)
        if line.strip():
            last = (lineno, line)
    if parser.seen_end:
        return parser.result()
    if last is None:
        raise InputError("no benchmark run in the file", file=path)
    return _last_run(path, *last)


__all__ = ["FORMAT", "MAX_LINE_BYTES", "read_sglang_requests"]
