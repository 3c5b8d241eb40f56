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
from typing import Any, Literal, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import privacy
from ..arrow_numpy import from_python, strings, to_arrow, to_numpy
from ..errors import InputError
from ..request_rows import BATCH_ROWS, ColumnRows, RequestRows, number_column, status_is

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


LOG_TYPES: dict[str, pa.DataType] = {
    "request_id": pa.string(), "arrival_s": pa.float64(), "first_token_s": pa.float64(),
    "finish_s": pa.float64(), "prompt_tokens": pa.int64(), "output_tokens": pa.int64(),
    "requested_output_tokens": pa.int64(), "status": pa.string()}
"""The columns of a request log, in :class:`Request`'s field order."""


def log_table(values: dict[str, list[Any]]) -> pa.Table:
    """A request log's columns (:data:`LOG_TYPES`) from lists of Python values."""
    return pa.Table.from_arrays([from_python(values[k], t) for k, t in LOG_TYPES.items()],
                                names=list(LOG_TYPES))


class RequestColumns(ColumnRows[Request]):
    """A request log held as columns (:data:`LOG_TYPES`), read as :class:`Request` items."""

    def _row(self, values: dict[str, Any]) -> Request:
        return Request(**values)

    @classmethod
    def from_requests(cls, requests: Sequence[Request]) -> RequestColumns:
        """The columns of a list of requests."""
        return cls(log_table({k: [getattr(r, k) for r in requests] for k in LOG_TYPES}))


@dataclass
class RequestLog:
    """A file's requests and the clock its times are on.

    ``requests`` is a list of :class:`Request` (the JSON formats, a few thousand requests at
    most) or :class:`RequestColumns` (the CSV format, any number, one Arrow table).
    """

    file: Path
    fmt: str
    clock: Clock
    requests: Sequence[Request] = field(default_factory=list)

    def columns(self) -> pa.Table:
        """The requests as columns (:data:`LOG_TYPES`)."""
        if isinstance(self.requests, RequestColumns):
            return self.requests.table
        return RequestColumns.from_requests(self.requests).table


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
            raise InputError(f"no {key!r} array: save the per-request details (see the serving "
                             "engines in docs/recording.md)", file=file, field=key)
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


_TIMES = (("arrival", "arrival_s"), ("first_token", "first_token_s"), ("finish", "finish_s"))
_INT64_SAFE_US = 2.0**62
"""Largest |µs| converted to int64 column-wise; beyond it a time is far outside any run."""


def duplicate_error(request_id: str, *, file: Path,
                    lines: tuple[int, int] | None = None) -> InputError:
    """The error of an id that appears twice (at ``lines``, first and second, when known)."""
    where = "" if lines is None else f" (lines {lines[0]} and {lines[1]})"
    return InputError(f"request id {request_id!r} appears twice{where}", file=file,
                      line=None if lines is None else lines[1], field="request_id")


def _check_one(req: Request, *, log: RequestLog, offset_ns: int, run_end_ms: int,
               seen: bool, lines: tuple[int, int] | None = None) -> dict[str, int | None]:
    """The run-clock times of one request, after every check (the errors name the request).

    Raises:
        InputError: the checks of :func:`to_run_clock`, in this order: the privacy gate on the
            id, finite times, times inside the run, times in order, an id seen before.
    """
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
    if seen:
        raise duplicate_error(req.request_id, file=log.file, lines=lines)
    return times


def _ms_column(t_s: np.ndarray, present: np.ndarray,
               offset_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_to_ms` column-wise: ``(ms, convertible)``.

    The same float operations as the scalar version (``np.rint`` rounds half to even as
    ``round`` does, ``//`` floors on int64 as on int); a time that is null, not finite or too
    far out for int64 is not convertible (the last is refused as outside the run).
    """
    with np.errstate(invalid="ignore", over="ignore"):
        delta_us = np.rint((t_s - offset_ns / 1e9) * 1e6)
        convertible = present & np.isfinite(delta_us) & (np.abs(delta_us) < _INT64_SAFE_US)
    ms = np.where(convertible, delta_us, 0.0).astype(np.int64) // 1000
    return ms, convertible


def _first_duplicates(ids: pa.ChunkedArray) -> np.ndarray:
    """Whether each id appeared at an earlier row.

    A stable sort puts equal ids side by side in row order: every id equal to its sorted
    predecessor is a repeat (an index and one copy of the ids; a hash table of a million
    strings would take five times that).
    """
    n = len(ids)
    dup = np.zeros(n, dtype=bool)
    if n < 2:
        return dup
    order = pc.sort_indices(ids)  # stable: equal ids keep their row order
    ranked = ids.take(order)
    same = np.asarray(to_numpy(pc.equal(ranked.slice(1), ranked.slice(0, n - 1)),
                               null_value=False), dtype=bool)
    dup[np.asarray(to_numpy(order), dtype=np.int64)[1:][same]] = True
    return dup


def _first_private(ids: pa.ChunkedArray, stop: int) -> int | None:
    """The first row before ``stop`` whose id the privacy gate refuses (``None``: none)."""
    row = 0
    for batch in ids.slice(0, stop).chunks:
        for offset in range(0, len(batch), BATCH_ROWS):
            for value in batch.slice(offset, BATCH_ROWS).to_pylist():
                if value is not None and privacy.text_problem("request_id", value) is not None:
                    return row
                row += 1
    return None


def clock_offset_ns(log: RequestLog, *, t0_ns: int, anchor: dict[str, Any] | None) -> int:
    """The offset subtracted from a log's times (ns on its clock) to put them on the run clock.

    Raises:
        InputError: a ``unix`` log without the sampler's anchor.
    """
    if log.clock == "monotonic":
        return t0_ns
    if not anchor:
        raise InputError("wall-clock request times need the sampler's anchor, which this "
                         "run lacks", file=log.file)
    return int(anchor["utc_ns"]) - int(anchor["monotonic_ns"]) + t0_ns


@dataclass(frozen=True)
class ClockedColumns:
    """Rows of a log on the run clock, before the duplicate-id check.

    Attributes:
        rows: the ``inference_requests`` columns (:func:`to_run_clock`'s table).
        bad: whether each row fails a check other than the privacy gate and duplicate ids.
    """

    rows: pa.Table
    bad: np.ndarray


def clock_columns(cols: pa.Table, *, offset_ns: int, run_end_ms: int, run_id: str,
                  platform: str) -> ClockedColumns:
    """Log columns (:data:`LOG_TYPES`) on the run clock, every per-row check column-wise.

    The per-row part of :func:`to_run_clock` (a block of a log gives the same rows as the whole
    log's rows at its positions): finite times, inside the run, in order.
    """
    n = cols.num_rows
    ms: dict[str, np.ndarray] = {}
    present: dict[str, np.ndarray] = {}
    bad = np.zeros(n, dtype=bool)
    for name, field_name in _TIMES:
        column = cols.column(field_name)
        t_s = np.asarray(to_numpy(column), dtype=np.float64)
        present[name] = np.asarray(to_numpy(column.is_valid()), dtype=bool)
        bad |= present[name] & ~np.isfinite(t_s)
        ms[name], convertible = _ms_column(t_s, present[name], offset_ns)
        bad |= present[name] & ~convertible
        bad |= convertible & ((ms[name] < -TOLERANCE_MS)
                              | (ms[name] > run_end_ms + TOLERANCE_MS))
    for (a, _), (b, _) in (((_TIMES[0]), (_TIMES[1])), ((_TIMES[1]), (_TIMES[2])),
                           ((_TIMES[0]), (_TIMES[2]))):
        bad |= present[a] & present[b] & (ms[a] > ms[b])
    times = {name: to_arrow(ms[name], pa.int64(), valid=present[name]) for name, _ in _TIMES}
    constant = to_arrow(np.zeros(n, dtype=np.int32))
    rows = pa.table({
        "run_id": pa.DictionaryArray.from_arrays(constant, strings([run_id])),
        "platform": pa.DictionaryArray.from_arrays(constant, strings([platform])),
        "request_id": cols.column("request_id"),
        "arrival_ms": times["arrival"], "start_ms": times["arrival"],
        "first_token_ms": times["first_token"], "finish_ms": times["finish"],
        "prompt_tokens": cols.column("prompt_tokens"),
        "requested_output_tokens": cols.column("requested_output_tokens"),
        "output_tokens": cols.column("output_tokens"), "status": cols.column("status")})
    return ClockedColumns(rows=rows, bad=bad)


def first_failing(clocked: ClockedColumns, duplicate: np.ndarray | None = None) -> int | None:
    """The first row that fails any check (privacy gate, times, a repeated id), or ``None``."""
    bad = clocked.bad if duplicate is None else clocked.bad | duplicate
    flagged = np.flatnonzero(bad)
    stop = int(flagged[0]) + 1 if flagged.size else len(bad)
    private = _first_private(clocked.rows.column("request_id"), stop)
    return private if private is not None else (int(flagged[0]) if flagged.size else None)


def raise_for(req: Request, *, log: RequestLog, offset_ns: int, run_end_ms: int,
              seen: bool, lines: tuple[int, int] | None = None) -> NoReturn:
    """Raise the one-line error of a request flagged by :func:`first_failing`.

    ``lines`` (the file lines of the id's first and second appearance) are named in a
    repeated id's error when the format has lines.
    """
    _check_one(req, log=log, offset_ns=offset_ns, run_end_ms=run_end_ms, seen=seen, lines=lines)
    raise AssertionError(f"request {req.request_id!r} flagged but passed every check")


def to_run_clock(log: RequestLog, *, run_id: str, platform: str, t0_ns: int,
                 anchor: dict[str, Any] | None, run_end_ms: int) -> RequestRows:
    """The log's requests as ``inference_requests`` rows on the run clock.

    Column-wise: every check runs on whole columns, and the first request that fails one is
    checked again alone (:func:`_check_one`), which raises the error naming it.

    Args:
        log: the requests.
        run_id: the run.
        platform: the run's platform (split).
        t0_ns: the sampler's first tick, CLOCK_MONOTONIC ns.
        anchor: the sampler's ``{"monotonic_ns", "utc_ns"}`` pair (needed for ``unix``).
        run_end_ms: the run's last tick on the run clock.

    Returns:
        One row per request (``arrival_ms`` = ``start_ms``: a benchmark client sends a request
        when it arrives), held as columns.

    Raises:
        InputError: a request outside the run (misaligned clocks), times out of order
            (arrival <= first token <= finish), or a ``unix`` log without an anchor.
    """
    offset_ns = clock_offset_ns(log, t0_ns=t0_ns, anchor=anchor)
    clocked = clock_columns(log.columns(), offset_ns=offset_ns, run_end_ms=run_end_ms,
                            run_id=run_id, platform=platform)
    duplicate = _first_duplicates(clocked.rows.column("request_id"))
    first = first_failing(clocked, duplicate)
    if first is not None:
        raise_for(log.requests[first], log=log, offset_ns=offset_ns, run_end_ms=run_end_ms,
                  seen=bool(duplicate[first]))
    return RequestRows(clocked.rows)


def summary_columns(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Run-level results from the request rows; null where nothing was reported.

    ``requests_completed`` (status ``ok``), ``num_requests``, ``tokens_in``/``tokens_out`` (sums
    over completed requests), ``ttft_p50_ms``/``ttft_p99_ms`` (percentiles of
    ``first_token_ms - arrival_ms``) and ``latency_p50_ms``/``latency_p99_ms`` (of
    ``finish_ms - arrival_ms``).
    """
    ok = status_is(rows, "ok")
    out: dict[str, Any] = {"requests_completed": int(ok.sum()), "num_requests": len(rows)}
    for name, key in (("tokens_in", "prompt_tokens"), ("tokens_out", "output_tokens")):
        values = number_column(rows, key)[ok]
        values = values[~np.isnan(values)]
        out[name] = int(values.astype(np.int64).sum()) if values.size else None
    arrival = number_column(rows, "arrival_ms")[ok]
    for name, key in (("ttft", "first_token_ms"), ("latency", "finish_ms")):
        values = number_column(rows, key)[ok] - arrival
        values = values[~np.isnan(values)]
        out[f"{name}_p50_ms"] = float(np.percentile(values, 50)) if values.size else None
        out[f"{name}_p99_ms"] = float(np.percentile(values, 99)) if values.size else None
    return out


__all__ = ["LOG_TYPES", "ClockedColumns", "Request", "RequestColumns", "RequestLog", "as_float",
           "as_int", "clock_columns", "clock_offset_ns", "column", "duplicate_error", "first_failing",
           "log_table",
           "raise_for", "summary_columns", "to_run_clock"]
