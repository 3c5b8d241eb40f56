"""SGLang's benchmark client: ``python -m sglang.bench_serving --output-file F --output-details``.

The output file is JSON Lines: each benchmark run *appends* one object (so the last line is the
most recent run, the one read here). With ``--output-details`` the object holds the per-request
arrays of vLLM's client, from which SGLang's is adapted (SGLang's
``docs/developer_guide/bench_serving.md``): ``input_lens``, ``output_lens``, ``ttfts``, ``itls``,
``generated_texts``, ``errors``.

**Start times.** SGLang's upstream ``bench_serving`` does not save when each request was sent
(its per-request ``RequestFuncOutput`` keeps only durations), so its requests cannot be placed on
the run clock from the documented arrays alone: such a file is refused with an error naming the
missing ``start_times`` field. A client that adds ``start_times`` (``time.perf_counter()``
seconds, as vLLM's does) is read exactly like vLLM's file (:mod:`.requests_vllm`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError
from .requests_common import RequestLog
from .requests_vllm import requests_from_arrays

FORMAT = "sglang"


def read_sglang_requests(path: str | Path) -> RequestLog:
    """Read the last run of an SGLang ``bench_serving`` JSONL output file.

    Raises:
        InputError: unreadable file or line, no run in it, no per-request details, or no
            ``start_times`` (see the module docstring).
    """
    path = Path(path)
    try:
        lines = [(i, line) for i, line in
                 enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
                 if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Failed to read: {type(exc).__name__}: {exc}", file=path) from None
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
        raise InputError("SGLang's bench_serving saves no per-request start times, so its "
                         "requests cannot be placed on the run clock; use a client that saves "
                         "start_times (perf_counter seconds), or vllm bench serve",
                         file=path, line=lineno, field="start_times")
    return requests_from_arrays(data, file=path, fmt=FORMAT)


__all__ = ["FORMAT", "read_sglang_requests"]
