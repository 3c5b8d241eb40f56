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
from pathlib import Path

from ..errors import InputError
from .requests_common import RequestLog
from .requests_sglang_log import is_print_requests_log, read_print_requests_log
from .requests_vllm import requests_from_arrays

FORMAT = "sglang"


def read_sglang_requests(path: str | Path) -> RequestLog:
    """Read SGLang's ``--print-requests`` log, or the last run of its JSONL result file.

    Raises:
        InputError: unreadable file or line, no run in it, no per-request details, or a result
            file without ``start_times`` (see the module docstring).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Failed to read: {type(exc).__name__}: {exc}", file=path) from None
    if is_print_requests_log(text):
        return read_print_requests_log(path, text, fmt=FORMAT)
    lines = [(i, line) for i, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise InputError("no benchmark run in the file", file=path)
    lineno, last = lines[-1]
    try:
        data = json.loads(last)
    except ValueError as exc:
        raise InputError(f"not JSON: {exc}", file=path, line=lineno) from None
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


__all__ = ["FORMAT", "read_sglang_requests"]
