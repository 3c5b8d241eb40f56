"""The request log and its pure maths: records, the steady-state window, the run's results.

Nothing here imports torch; every function works on the records the test or the loop supplies.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_powertrace_ds.atomic import write_text_atomic

log = logging.getLogger(__name__)

REQUESTS_FILE = "requests.jsonl"
"""The request log in the run's staging folder (JSON lines, monotonic ns)."""


# ---------------------------------------------------------------------------------------------
# The request log
# ---------------------------------------------------------------------------------------------

@dataclass
class RequestRecord:
    """One request's life on CLOCK_MONOTONIC (ns).

    Attributes:
        request_id: the stream's id.
        prompt_tokens: prompt length.
        requested_output_tokens: forced output length.
        arrival_ns: when it arrived (recorded by the loop).
        start_ns: when it was admitted to the engine.
        first_token_ns: when its first output token was produced.
        finish_ns: when its output was complete and delivered.
        output_tokens: tokens generated.
        status: ``ok``, ``error``, ``cancelled`` (never admitted) or ``unfinished`` (still in
            flight when the bounded drain ended).
        error: the engine's message when ``status`` is ``error``.
        chunk_ns: when each streamed chunk of output arrived (HTTP engines; ``None`` where
            the engine does not stream).
        chunk_tokens: the tokens each chunk carried, as the server counted them (``None``:
            the server gave no per-chunk count, or the engine does not stream).
    """

    request_id: str
    prompt_tokens: int
    requested_output_tokens: int
    arrival_ns: int
    start_ns: int | None = None
    first_token_ns: int | None = None
    finish_ns: int | None = None
    output_tokens: int = 0
    status: str = "cancelled"
    error: str | None = None
    chunk_ns: list[int] | None = None
    chunk_tokens: list[int] | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def write_requests(path: str | os.PathLike[str], records: list[RequestRecord]) -> None:
    """Write the request log (JSON lines, monotonic ns) atomically."""
    text = "".join(json.dumps(r.as_json()) + "\n" for r in records)
    write_text_atomic(path, text, fsync=False)


def read_requests(path: str | os.PathLike[str]) -> list[RequestRecord]:
    """Read a request log written by :func:`write_requests`."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(RequestRecord(**json.loads(line)))
    return out


def _ms(t_ns: int | None, t0_ns: int) -> int | None:
    return None if t_ns is None else (int(t_ns) - int(t0_ns)) // 1_000_000


def load_requests(staging_dir: str | os.PathLike[str], t0_ns: int) -> list[dict[str, Any]]:
    """The ``inference_requests`` rows of a staged run, on the run clock.

    Times are ``floor((t_ns - t0_ns) / 1e6)``, the formula of the samples and events, so the
    per-request order ``arrival_ms <= start_ms <= first_token_ms <= finish_ms`` is kept.

    Returns:
        One dict per request (``run_id``/``platform`` are added by the shard writer); an empty
        list when the run has no request log.
    """
    path = Path(staging_dir) / REQUESTS_FILE
    if not path.exists():
        return []
    rows = []
    for rec in read_requests(path):
        rows.append({
            "request_id": rec.request_id,
            "arrival_ms": _ms(rec.arrival_ns, t0_ns),
            "start_ms": _ms(rec.start_ns, t0_ns),
            "first_token_ms": _ms(rec.first_token_ns, t0_ns),
            "finish_ms": _ms(rec.finish_ns, t0_ns),
            "prompt_tokens": rec.prompt_tokens,
            "requested_output_tokens": rec.requested_output_tokens,
            "output_tokens": rec.output_tokens,
            "status": rec.status,
            "chunk_ms": (None if rec.chunk_ns is None
                         else [_ms(t, t0_ns) for t in rec.chunk_ns]),
            "chunk_tokens": rec.chunk_tokens,
        })
    return rows


# ---------------------------------------------------------------------------------------------
# Steady state and results (pure)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SteadyWindow:
    """The steady-state window.

    Attributes:
        begin_ns: in-flight requests first reach ``target``.
        end_ns: in-flight requests drop below ``target`` for the last time (draining starts).
        target: the in-flight level (the concurrency, or the peak when it was never reached).
        concurrency_reached: whether ``target`` is the configured concurrency.
    """

    begin_ns: int
    end_ns: int
    target: int
    concurrency_reached: bool

    @property
    def label(self) -> str:
        if self.concurrency_reached:
            return f"in_flight={self.target}"
        return f"in_flight={self.target} (peak; concurrency not reached)"


def in_flight_timeline(records: list[RequestRecord]) -> list[tuple[int, int]]:
    """``(t_ns, in-flight count after it)`` at every admission and finish, time-ordered.

    A finish and an admission at the same ns count the finish first.
    """
    changes = []
    for rec in records:
        if rec.start_ns is None:
            continue
        changes.append((rec.start_ns, 1))
        if rec.finish_ns is not None:
            changes.append((rec.finish_ns, -1))
    changes.sort(key=lambda c: (c[0], c[1]))
    out, level = [], 0
    for t, d in changes:
        level += d
        out.append((t, level))
    return out


def steady_window(records: list[RequestRecord], concurrency: int) -> SteadyWindow | None:
    """The steady-state window of a served stream (``None`` when nothing was admitted)."""
    timeline = in_flight_timeline(records)
    if not timeline:
        return None
    peak = max(level for _, level in timeline)
    target = min(int(concurrency), peak)
    begin = next(t for t, level in timeline if level >= target)
    end = None
    prev = 0
    for t, level in timeline:
        if prev >= target > level:
            end = t
        prev = level
    if end is None or end <= begin:
        end = timeline[-1][0]
    return SteadyWindow(begin, end, target, target == int(concurrency))


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def tpot_s(rec: RequestRecord) -> float | None:
    """Time per output token of one request, from tokens (never chunks).

    ``tpot = (finish - first token) / (output_tokens - 1)``: the decode time after the first
    token shared by the tokens after it (``None`` below two tokens or without a first token).
    """
    if rec.first_token_ns is None or rec.finish_ns is None or rec.output_tokens < 2:
        return None
    return (rec.finish_ns - rec.first_token_ns) / 1e9 / (rec.output_tokens - 1)


def inter_token_ms(records: list[RequestRecord]) -> list[float] | None:
    """Inter-token latencies (ms) of the completed streamed requests, from per-chunk counts.

    Between two consecutive chunks of a request, the later carrying k tokens after a gap g,
    each of its k tokens counts once with the latency g / k (a chunk of several tokens is not
    one long token gap). ``None`` when a completed streamed request has no per-chunk count
    (inter-token latency cannot be told from chunk gaps then) or no request streamed.
    """
    out: list[float] = []
    streamed = False
    for rec in records:
        if rec.status != "ok" or rec.chunk_ns is None:
            continue
        streamed = True
        if rec.chunk_tokens is None:
            return None
        for i in range(1, len(rec.chunk_ns)):
            k = rec.chunk_tokens[i]
            gap_ms = (rec.chunk_ns[i] - rec.chunk_ns[i - 1]) / 1e6
            out.extend([gap_ms / k] * k)
    return out if streamed else None


CHUNK_TOKENS_FLAG = "chunk_tokens_unknown"
"""Quality flag of a served run whose server gave no per-chunk token count."""


def summarise(records: list[RequestRecord]) -> dict[str, Any]:
    """The run's result columns from its request log (see the module docstring).

    ``tpot_mean_s`` is the mean of :func:`tpot_s` over completed requests; ``itl_p50_ms`` and
    ``itl_p99_ms`` are percentiles of :func:`inter_token_ms`. ``_flags`` names
    :data:`CHUNK_TOKENS_FLAG` when completed requests streamed without per-chunk counts.
    """
    done = [r for r in records if r.status == "ok"]
    tokens_in = sum(r.prompt_tokens for r in done)
    tokens_out = sum(r.output_tokens for r in done)
    span_s = None
    if done:
        first = min(r.arrival_ns for r in records)
        last = max(r.finish_ns for r in done if r.finish_ns is not None)
        span_s = (last - first) / 1e9
    ttft = [(r.first_token_ns - r.arrival_ns) / 1e6 for r in done if r.first_token_ns is not None]
    lat = [(r.finish_ns - r.arrival_ns) / 1e6 for r in done if r.finish_ns is not None]
    tpots = [t for t in (tpot_s(r) for r in done) if t is not None]
    itl = inter_token_ms(done)
    unknown = any(r.chunk_ns is not None and r.chunk_tokens is None for r in done)
    return {
        "requests_completed": len(done),
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "tokens_per_s": tokens_out / span_s if span_s and span_s > 0 else None,
        "ttft_p50_ms": _percentile(ttft, 50),
        "ttft_p99_ms": _percentile(ttft, 99),
        "latency_p50_ms": _percentile(lat, 50),
        "latency_p99_ms": _percentile(lat, 99),
        "num_requests": len(records),
        "requests_unfinished": sum(r.status == "unfinished" for r in records),
        "tpot_mean_s": sum(tpots) / len(tpots) if tpots else None,
        "itl_p50_ms": _percentile(itl or [], 50),
        "itl_p99_ms": _percentile(itl or [], 99),
        "_flags": [CHUNK_TOKENS_FLAG] if unknown else [],
    }
