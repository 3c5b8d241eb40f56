"""vLLM's benchmark client: ``vllm bench serve --save-result --save-detailed``.

The result file is one JSON object. With ``--save-detailed`` it holds per-request arrays of
equal length (read from vLLM's ``vllm/benchmarks/serve.py``): ``input_lens`` (prompt tokens),
``output_lens`` (generated tokens), ``start_times`` (``time.perf_counter()`` seconds when the
request was sent — CLOCK_MONOTONIC on Linux, the sampler's clock), ``ttfts`` (seconds to the
first token), ``itls`` (per request, the seconds between later tokens) and ``errors`` (empty
text for a success). A failed request reports ``ttft`` 0 and no ITLs: its first-token and
finish times are null and its status ``error``.

Per request ``i``::

    arrival_s     = start_times[i]
    first_token_s = start_times[i] + ttfts[i]
    finish_s      = first_token_s + sum(itls[i])      (e2els[i] after the start when present)

Older vLLM versions saved no ``start_times``: such a file cannot be placed on the run clock and
is refused (naming the field).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import bounded
from ..errors import InputError
from .requests_common import Request, RequestLog, as_float, as_int, column

FORMAT = "vllm"
MAX_LOG_BYTES = 512 << 20
"""Largest benchmark result file read (512 MiB: per-request arrays of ~10^6 requests)."""


def read_json_object(path: Path) -> dict[str, Any]:
    data = bounded.read_json(path, max_bytes=MAX_LOG_BYTES)
    if not isinstance(data, dict):
        raise InputError(f"expected one JSON object, got {type(data).__name__}", file=path)
    return data


def requests_from_arrays(data: dict[str, Any], *, file: Path, fmt: str) -> RequestLog:
    """The shared per-request arrays of vLLM's and SGLang's clients (see the module docstring)."""
    starts = column(data, "start_times", None, file=file)
    assert starts is not None
    n = len(starts)
    ins = column(data, "input_lens", n, file=file)
    outs = column(data, "output_lens", n, file=file, required=False)
    ttfts = column(data, "ttfts", n, file=file)
    itls = column(data, "itls", n, file=file, required=False)
    errors = column(data, "errors", n, file=file, required=False)
    e2els = column(data, "e2els", n, file=file, required=False)
    assert ins is not None and ttfts is not None
    requests: list[Request] = []
    for i in range(n):
        start = as_float(starts[i], file=file, field_name="start_times", index=i)
        ttft = as_float(ttfts[i], file=file, field_name="ttfts", index=i)
        failed = bool(errors[i]) if errors is not None else False
        first = finish = None
        if not failed and start is not None and ttft is not None:
            first = start + ttft
            e2el = (as_float(e2els[i], file=file, field_name="e2els", index=i)
                    if e2els is not None else None)
            if e2el is not None:
                finish = start + e2el
            elif itls is not None:
                gaps = itls[i] if isinstance(itls[i], list) else None
                if gaps is None:
                    raise InputError(f"request {i}: expected a list of seconds", file=file,
                                     field="itls")
                finish = first + sum(as_float(g, file=file, field_name="itls", index=i) or 0.0
                                     for g in gaps)
        requests.append(Request(
            request_id=str(i), arrival_s=start, first_token_s=first, finish_s=finish,
            prompt_tokens=as_int(ins[i], file=file, field_name="input_lens", index=i),
            output_tokens=(as_int(outs[i], file=file, field_name="output_lens", index=i)
                           if outs is not None else None),
            status="error" if failed else "ok"))
    return RequestLog(file=file, fmt=fmt, clock="monotonic", requests=requests)


def read_vllm_requests(path: str | Path) -> RequestLog:
    """Read a ``vllm bench serve --save-result --save-detailed`` result file.

    Raises:
        InputError: unreadable file, a missing or ragged per-request array (names the field).
    """
    path = Path(path)
    return requests_from_arrays(read_json_object(path), file=path, fmt=FORMAT)


__all__ = ["FORMAT", "read_json_object", "read_vllm_requests", "requests_from_arrays"]
