"""Per-request logs of serving benchmarks, onto a run's clock.

An engine's benchmark client records, per request, when it was sent and how long the first token
and the rest took. Each format module (``requests_vllm``, ``requests_sglang``,
``requests_csv``) reads its file into a :class:`RequestLog` of absolute times in seconds on a
named clock; :func:`to_run_clock` puts them on the run clock (ms since the sampler's first tick)::

    t_ms = floor((t_s * 1e9 - t0_ns) / 1e6)                          clock "monotonic"
    t_ms = floor((t_s * 1e9 - utc_ns + monotonic_ns - t0_ns) / 1e6)   clock "unix"

(the difference rounded to whole µs first, the resolution float seconds can hold).

``monotonic`` is Linux CLOCK_MONOTONIC (Python's ``time.perf_counter``/``time.monotonic``, the
sampler's clock: valid for a client that ran on the sampler's machine, e.g. under
``llm-powertrace record``); ``unix`` is wall-clock seconds since the epoch, converted through
the sampler's (monotonic, UTC) anchor pair (its error is the anchor's uncertainty plus any NTP
step between the two readings). The formula is the events' (``generation.events``).

A request outside the run (earlier than its first tick or later than its last) means the file's
clock is not this run's: an error naming the file, never silently clipped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .. import privacy
from ..errors import InputError

Clock = Literal["monotonic", "unix"]
TOLERANCE_MS = 1000
"""How far outside ``[0, run end]`` a request may fall before the clocks are declared misaligned
(one sampler period would do for ``monotonic``; NTP and anchor error allow more for ``unix``)."""


@dataclass
class Request:
    """One request: absolute times in seconds on the log's clock (``None``: not reported)."""

    request_id: str
    arrival_s: float | None
    first_token_s: float | None
    finish_s: float | None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    requested_output_tokens: int | None = None
    status: str = "ok"


@dataclass
class RequestLog:
    """A file's requests and the clock its times are on."""

    file: Path
    fmt: str
    clock: Clock
    requests: list[Request] = field(default_factory=list)


def as_float(value: Any, *, file: Path, field_name: str, index: int) -> float | None:
    """A finite number or ``None``; anything else is an error naming file, field and value."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"request {index}: value {value!r} is not a finite number",
                         file=file, field=field_name)
    return float(value)


MAX_TOKENS = 2**31 - 1
"""Largest token count a request column (int32) holds; more is refused, never wrapped."""


def check_count(value: float, *, shown: str, file: Path, field_name: str, where: str,
                line: int | None = None) -> int:
    """A token count: a whole number in [0, :data:`MAX_TOKENS`], checked before conversion."""
    if not math.isfinite(value) or not value.is_integer() or value < 0:
        raise InputError(f"{where}value {shown} is not a token count", file=file, line=line,
                         field=field_name)
    if value > MAX_TOKENS:
        raise InputError(f"{where}value {shown} is not a token count (at most {MAX_TOKENS})",
                         file=file, line=line, field=field_name)
    return int(value)


def as_int(value: Any, *, file: Path, field_name: str, index: int) -> int | None:
    number = as_float(value, file=file, field_name=field_name, index=index)
    if number is None:
        return None
    return check_count(number, shown=repr(value)[:40], file=file, field_name=field_name,
                       where=f"request {index}: ")


def column(data: dict[str, Any], key: str, n: int | None, *, file: Path,
           required: bool = True) -> list[Any] | None:
    """``data[key]`` as a list of length ``n`` (``None`` when absent and not required)."""
    if key not in data:
        if required:
            raise InputError(f"no {key!r} array: save the per-request details (see the README's "
                             "'Record your own runs')", file=file, field=key)
        return None
    values = data[key]
    if not isinstance(values, list):
        raise InputError(f"expected a list, got {type(values).__name__}", file=file, field=key)
    if n is not None and len(values) != n:
        raise InputError(f"{len(values)} entries where the other arrays have {n}",
                         file=file, field=key)
    return values


def _to_ms(t_s: float | None, offset_ns: int) -> int | None:
    """Milliseconds since the offset, floored.

    The difference is first rounded to whole µs: float seconds of an epoch-sized clock hold about
    0.24 µs, so ``1.25`` s must not become 1249 ms.
    """
    if t_s is None:
        return None
    delta_us = round((t_s - offset_ns / 1e9) * 1e6)
    return delta_us // 1000


def to_run_clock(log: RequestLog, *, run_id: str, platform: str, t0_ns: int,
                 anchor: dict[str, Any] | None, run_end_ms: int) -> list[dict[str, Any]]:
    """The log's requests as ``inference_requests`` rows on the run clock.

    Args:
        log: the requests.
        run_id: the run.
        platform: the run's platform (split).
        t0_ns: the sampler's first tick, CLOCK_MONOTONIC ns.
        anchor: the sampler's ``{"monotonic_ns", "utc_ns"}`` pair (needed for ``unix``).
        run_end_ms: the run's last tick on the run clock.

    Returns:
        One row per request (``arrival_ms`` = ``start_ms``: a benchmark client sends a request
        when it arrives).

    Raises:
        InputError: a request outside the run (misaligned clocks), times out of order
            (arrival <= first token <= finish), or a ``unix`` log without an anchor.
    """
    if log.clock == "monotonic":
        offset_ns = t0_ns
    else:
        if not anchor:
            raise InputError("wall-clock request times need the sampler's anchor, which this "
                             "run lacks", file=log.file)
        offset_ns = int(anchor["utc_ns"]) - int(anchor["monotonic_ns"]) + t0_ns
    rows = []
    seen: set[str] = set()
    for req in log.requests:
        privacy.check_text("request_id", req.request_id, file=log.file)
        for name, value in (("arrival_s", req.arrival_s), ("first_token_s", req.first_token_s),
                            ("finish_s", req.finish_s)):
            if value is not None and not math.isfinite(value):
                raise InputError(f"request {req.request_id!r}: value {value!r} is not a finite "
                                 "time", file=log.file, field=name)
        times = {"arrival": _to_ms(req.arrival_s, offset_ns),
                 "first_token": _to_ms(req.first_token_s, offset_ns),
                 "finish": _to_ms(req.finish_s, offset_ns)}
        for name, t in times.items():
            if t is not None and not -TOLERANCE_MS <= t <= run_end_ms + TOLERANCE_MS:
                raise InputError(
                    f"request {req.request_id!r} has its {name} at {t / 1000:.3f} s on the run "
                    f"clock, outside the run [0, {run_end_ms / 1000:.3f} s]: the file's "
                    f"{log.clock} clock is not this run's (record the client on the sampler's "
                    "machine, under `llm-powertrace record`)", file=log.file,
                    field=f"{name}_s")
        known = [t for t in times.values() if t is not None]
        if known != sorted(known):
            raise InputError(f"request {req.request_id!r}: times out of order (arrival <= first "
                             f"token <= finish): {times}", file=log.file, line=None,
                             field="first_token_s")
        if req.request_id in seen:
            raise InputError(f"request id {req.request_id!r} appears twice", file=log.file,
                             field="request_id")
        seen.add(req.request_id)
        rows.append({"run_id": run_id, "platform": platform, "request_id": req.request_id,
                     "arrival_ms": times["arrival"], "start_ms": times["arrival"],
                     "first_token_ms": times["first_token"], "finish_ms": times["finish"],
                     "prompt_tokens": req.prompt_tokens,
                     "requested_output_tokens": req.requested_output_tokens,
                     "output_tokens": req.output_tokens, "status": req.status})
    return rows


def summary_columns(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Run-level results from the request rows; null where nothing was reported.

    ``requests_completed`` (status ``ok``), ``num_requests``, ``tokens_in``/``tokens_out`` (sums
    over completed requests), ``ttft_p50_ms``/``ttft_p99_ms`` (percentiles of
    ``first_token_ms - arrival_ms``) and ``latency_p50_ms``/``latency_p99_ms`` (of
    ``finish_ms - arrival_ms``).
    """
    import numpy as np

    ok = [r for r in rows if r["status"] == "ok"]
    out: dict[str, Any] = {"requests_completed": len(ok), "num_requests": len(rows)}
    tin = [r["prompt_tokens"] for r in ok if r["prompt_tokens"] is not None]
    tout = [r["output_tokens"] for r in ok if r["output_tokens"] is not None]
    out["tokens_in"] = int(sum(tin)) if tin else None
    out["tokens_out"] = int(sum(tout)) if tout else None
    ttft = [r["first_token_ms"] - r["arrival_ms"] for r in ok
            if r["first_token_ms"] is not None and r["arrival_ms"] is not None]
    lat = [r["finish_ms"] - r["arrival_ms"] for r in ok
           if r["finish_ms"] is not None and r["arrival_ms"] is not None]
    for name, values in (("ttft", ttft), ("latency", lat)):
        out[f"{name}_p50_ms"] = float(np.percentile(values, 50)) if values else None
        out[f"{name}_p99_ms"] = float(np.percentile(values, 99)) if values else None
    return out


__all__ = ["Request", "RequestLog", "as_float", "as_int", "column", "summary_columns",
           "to_run_clock"]
