"""Request streams for the inference workload: arrival processes and prompt/output lengths.

A stream is a seeded, lazily drawn sequence of :class:`Request` objects. Arrival patterns
(``arrival_pattern``):

* ``closed`` — a fixed number of clients (the ``concurrency``), each sending its next request
  the moment the previous one finishes; requests carry no scheduled time, the serving loop
  releases them.
* ``poisson`` — exponential inter-arrival times of rate ``arrival_rate_rps`` (λ).
* ``gamma`` — bursty: gamma inter-arrival times of mean ``1/λ`` and coefficient of variation
  ``arrival_cv`` (shape ``k = 1/cv²``, scale ``1/(λk)``; ``cv = 1`` is Poisson).
* ``replay`` — the arrival offsets of a trace file (:func:`read_replay`), optionally sped up
  or slowed down by ``time_scale`` (offsets are multiplied by it).

Every stream is bounded by ``num_requests`` and/or ``target_duration_s`` (open loops stop at the
first arrival later than the duration; the serving loop stops releasing closed-loop requests
after it), whichever comes first; a replayed trace also ends with its last row.

Lengths (``length_distribution`` with ``length_params``):

* ``fixed`` — ``prompt_len`` and ``output_len``.
* ``uniform`` — ``{"prompt_len": [lo, hi], "output_len": [lo, hi]}``, inclusive integer ranges
  (a plain integer is a constant).
* ``list`` — ``{"prompt_len": [...], "output_len": [...]}`` drawn independently and uniformly
  from each list, or ``{"pairs": [[prompt, output], ...]}`` drawn jointly.
* ``replay`` — the token lengths of the trace file, clipped to ``max_prompt_len`` /
  ``max_output_len`` when given.

Arrival times, lengths and prompt token ids come from three independent child streams of one
``numpy`` ``SeedSequence``, so changing the arrival rate never changes the lengths or prompts
of a seeded run (request ``i``'s prompt depends on the seed and ``i`` only). Prompts are
synthetic token ids of exactly the requested length, drawn above the offline tokenizer's
special ids (``models.NUM_SPECIAL``). Open loops send their first request at once (offset 0).

This module imports neither torch nor transformers.

Example:
    >>> stream = RequestStream(ArrivalProcess("poisson", rate_rps=4.0), Lengths.fixed(32, 16),
    ...                        num_requests=3, seed=0)
    >>> [(r.request_id, r.prompt_tokens, r.output_tokens) for r in stream]
    [('r00000', 32, 16), ('r00001', 32, 16), ('r00002', 32, 16)]
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llm_powertrace_ds.errors import InputError

ARRIVAL_PATTERNS = ("closed", "poisson", "gamma", "replay")
LENGTH_DISTRIBUTIONS = ("fixed", "uniform", "list", "replay")

# Column names of public serving traces: ours, BurstGPT, Azure LLM inference (2023/2024).
TIME_COLUMNS = ("arrival_s", "arrival_offset_s", "timestamp", "Timestamp", "TIMESTAMP")
PROMPT_COLUMNS = ("prompt_tokens", "input_tokens", "Request tokens", "ContextTokens")
OUTPUT_COLUMNS = ("output_tokens", "Response tokens", "GeneratedTokens")


# ---------------------------------------------------------------------------------------------
# Replay traces
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayTrace:
    """The rows of a serving trace, in arrival order.

    Attributes:
        name: the file's name (no folder).
        sha256: hex digest of the file's bytes.
        offsets_s: arrival offsets from the first row, seconds (non-decreasing, starts at 0).
        prompt_tokens: prompt length per row (``None`` when the file has no such column).
        output_tokens: output length per row (``None`` when the file has no such column).
    """

    name: str
    sha256: str
    offsets_s: np.ndarray
    prompt_tokens: np.ndarray | None = None
    output_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets_s)

    @property
    def mean_rate_rps(self) -> float | None:
        """Requests per second over the trace's span (``None`` with fewer than 2 rows)."""
        if len(self) < 2 or self.offsets_s[-1] <= 0:
            return None
        return (len(self) - 1) / float(self.offsets_s[-1])


def _find_column(header: Sequence[str], names: Sequence[str]) -> str | None:
    lowered = {h.strip().lower(): h for h in header}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return None


def _parse_time(text: str) -> float:
    """Seconds: a number, or an ISO date-time (Azure's ``2023-11-16 18:15:46.6805900``)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    # Python's fromisoformat takes at most 6 fractional digits.
    head, dot, frac = text.partition(".")
    if dot:
        digits = "".join(ch for ch in frac if ch.isdigit())
        rest = frac[len(digits):]
        text = f"{head}.{digits[:6]}{rest}"
    stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.timezone.utc)
    return stamp.timestamp()


def read_replay(path: str | Path) -> ReplayTrace:
    """Read a serving trace: CSV with an arrival-time column and optional token lengths.

    Recognised columns (case-insensitive): time — ``arrival_s``, ``arrival_offset_s``,
    ``timestamp`` (BurstGPT: seconds; Azure: ISO date-times); prompt — ``prompt_tokens``,
    ``input_tokens``, ``Request tokens`` (BurstGPT), ``ContextTokens`` (Azure); output —
    ``output_tokens``, ``Response tokens``, ``GeneratedTokens``. Rows are sorted by time and
    offsets start at 0.

    Raises:
        InputError: unreadable file, no time column, or a bad value (names file, line, field).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"Failed to read '{path}': {type(exc).__name__}: {exc}",
                         file=path) from None
    text = raw.decode("utf-8-sig", errors="replace")
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    t_col = _find_column(header, TIME_COLUMNS)
    if t_col is None:
        # Never echo the header: a mistyped path (``/etc/passwd``) must not print its content.
        raise InputError(f"no arrival-time column in the header line ({len(header)} field(s)); "
                         f"expected one of {', '.join(TIME_COLUMNS)}", file=path, line=1,
                         field="replay_file")
    p_col = _find_column(header, PROMPT_COLUMNS)
    o_col = _find_column(header, OUTPUT_COLUMNS)
    times: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    for line, row in enumerate(reader, start=2):
        try:
            times.append(_parse_time(row[t_col] or ""))
        except (TypeError, ValueError):
            raise InputError("the value is not a time (seconds or ISO-8601)", file=path,
                             line=line, field=t_col) from None
        for col, out in ((p_col, prompts), (o_col, outputs)):
            if col is None:
                continue
            value = (row.get(col) or "").strip()
            try:
                number = float(value)
                if not number.is_integer() or number < 0:
                    raise ValueError
            except ValueError:
                raise InputError("the value is not a token count (an integer >= 0)", file=path,
                                 line=line, field=col) from None
            out.append(int(number))
    if not times:
        raise InputError("the trace has no rows", file=path)
    t = np.asarray(times, dtype=np.float64)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    return ReplayTrace(
        name=path.name,
        sha256=hashlib.sha256(raw).hexdigest(),
        offsets_s=t,
        prompt_tokens=np.asarray(prompts, dtype=np.int64)[order] if p_col else None,
        output_tokens=np.asarray(outputs, dtype=np.int64)[order] if o_col else None,
    )


# ---------------------------------------------------------------------------------------------
# Arrival processes
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ArrivalProcess:
    """How requests arrive.

    Attributes:
        pattern: ``closed``, ``poisson``, ``gamma`` or ``replay``.
        rate_rps: mean arrival rate λ (``poisson``, ``gamma``).
        cv: coefficient of variation of inter-arrival times (``gamma``; 1 = Poisson).
        replay: the trace (``replay``).
        time_scale: multiplies replayed offsets (0.5 = twice as fast).
    """

    pattern: str
    rate_rps: float | None = None
    cv: float | None = None
    replay: ReplayTrace | None = None
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.pattern not in ARRIVAL_PATTERNS:
            raise InputError(f"{self.pattern!r} is not one of {', '.join(ARRIVAL_PATTERNS)}",
                             field="arrival_pattern")
        if self.pattern in ("poisson", "gamma"):
            if self.rate_rps is None or not self.rate_rps > 0 or not math.isfinite(self.rate_rps):
                raise InputError(f"arrival_pattern {self.pattern} needs arrival_rate_rps > 0 "
                                 f"(got {self.rate_rps!r})", field="arrival_rate_rps")
        if self.pattern == "gamma":
            if self.cv is None or not self.cv > 0 or not math.isfinite(self.cv):
                raise InputError(f"arrival_pattern gamma needs arrival_cv > 0 (got {self.cv!r})",
                                 field="arrival_cv")
        if self.pattern == "replay" and self.replay is None:
            raise InputError("arrival_pattern replay needs a replay file", field="replay_file")
        if not self.time_scale > 0:
            raise InputError(f"time_scale must be > 0 (got {self.time_scale!r})",
                             field="replay_time_scale")

    @property
    def open_loop(self) -> bool:
        """Whether arrivals are scheduled in advance (everything but ``closed``)."""
        return self.pattern != "closed"

    def interarrivals_s(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` inter-arrival gaps in seconds (``poisson``/``gamma`` only)."""
        rate, cv = self.rate_rps, self.cv  # both checked in __post_init__ for these patterns
        if self.pattern == "poisson" and rate is not None:
            return rng.exponential(1.0 / rate, size=n)
        if self.pattern == "gamma" and rate is not None and cv is not None:
            shape = 1.0 / (cv * cv)
            return rng.gamma(shape, 1.0 / (rate * shape), size=n)
        raise ValueError(f"{self.pattern} has no drawn inter-arrival times")


# ---------------------------------------------------------------------------------------------
# Lengths
# ---------------------------------------------------------------------------------------------

def _range_param(params: dict[str, Any], key: str) -> tuple[int, int]:
    value = params.get(key)
    if isinstance(value, bool):
        value = None
    if isinstance(value, int):
        lo = hi = value
    elif (isinstance(value, (list, tuple)) and len(value) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        lo, hi = int(value[0]), int(value[1])
    else:
        raise InputError(f"uniform needs {key}: [low, high] (integers) or an integer, got "
                         f"{value!r}", field="length_params")
    if lo < 1 or hi < lo:
        raise InputError(f"{key} range {value!r} must satisfy 1 <= low <= high",
                         field="length_params")
    return lo, hi


def _list_param(params: dict[str, Any], key: str) -> np.ndarray:
    value = params.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)):
        raise InputError(f"list needs {key}: a non-empty list of positive integers, got "
                         f"{value!r}", field="length_params")
    return np.asarray(value, dtype=np.int64)


@dataclass(frozen=True)
class Lengths:
    """Prompt and output length distribution.

    Attributes:
        distribution: ``fixed``, ``uniform``, ``list`` or ``replay``.
        prompt_len: the prompt length (``fixed``).
        output_len: the forced output length (``fixed``).
        params: ``length_params`` (see the module docstring).
        replay: the trace (``replay``).
    """

    distribution: str
    prompt_len: int | None = None
    output_len: int | None = None
    params: dict[str, Any] = field(default_factory=dict, hash=False)
    replay: ReplayTrace | None = None

    @classmethod
    def fixed(cls, prompt_len: int, output_len: int) -> Lengths:
        """Every request has ``prompt_len`` prompt and ``output_len`` output tokens."""
        return cls("fixed", prompt_len, output_len)

    def __post_init__(self) -> None:
        d = self.distribution
        if d not in LENGTH_DISTRIBUTIONS:
            raise InputError(f"{d!r} is not one of {', '.join(LENGTH_DISTRIBUTIONS)}",
                             field="length_distribution")
        if d == "fixed":
            for key in ("prompt_len", "output_len"):
                value = getattr(self, key)
                if value is None or value < 1:
                    raise InputError(f"length_distribution fixed needs {key} >= 1 (got "
                                     f"{value!r})", field=key)
        elif d == "uniform":
            _range_param(self.params, "prompt_len")
            _range_param(self.params, "output_len")
        elif d == "list":
            if "pairs" in self.params:
                self._pairs()
            else:
                _list_param(self.params, "prompt_len")
                _list_param(self.params, "output_len")
        else:
            if self.replay is None:
                raise InputError("length_distribution replay needs a replay file",
                                 field="replay_file")
            if self.replay.prompt_tokens is None or self.replay.output_tokens is None:
                raise InputError(f"replay file {self.replay.name} has no prompt/output token "
                                 "columns", field="length_distribution")
            for key in ("max_prompt_len", "max_output_len"):
                value = self.params.get(key)
                if value is not None and (not isinstance(value, int) or value < 1):
                    raise InputError(f"{key} must be a positive integer (got {value!r})",
                                     field="length_params")

    def _pairs(self) -> np.ndarray:
        pairs = self.params.get("pairs")
        ok = (isinstance(pairs, (list, tuple)) and pairs and all(
            isinstance(p, (list, tuple)) and len(p) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in p)
            for p in pairs))
        if not ok:
            raise InputError(f"pairs must be a non-empty list of [prompt, output] positive "
                             f"integers, got {pairs!r}", field="length_params")
        return np.asarray(pairs, dtype=np.int64)

    def max_lengths(self) -> tuple[int, int]:
        """The longest prompt and output this distribution can draw."""
        d = self.distribution
        if d == "fixed":
            return self._fixed()
        if d == "uniform":
            return _range_param(self.params, "prompt_len")[1], _range_param(
                self.params, "output_len")[1]
        if d == "list":
            if "pairs" in self.params:
                pairs = self._pairs()
                return int(pairs[:, 0].max()), int(pairs[:, 1].max())
            return (int(_list_param(self.params, "prompt_len").max()),
                    int(_list_param(self.params, "output_len").max()))
        p, o = self._replay_lengths()
        return int(p.max()), int(o.max())

    def _fixed(self) -> tuple[int, int]:
        if self.prompt_len is None or self.output_len is None:  # checked in __post_init__
            raise InputError("fixed lengths need prompt_len and output_len", field="prompt_len")
        return int(self.prompt_len), int(self.output_len)

    def _replay_lengths(self) -> tuple[np.ndarray, np.ndarray]:
        replay = self.replay
        if replay is None or replay.prompt_tokens is None or replay.output_tokens is None:
            raise InputError("replayed lengths need a replay file with prompt and output token "
                             "columns", field="replay_file")  # checked in __post_init__
        p = np.maximum(replay.prompt_tokens, 1)
        o = np.maximum(replay.output_tokens, 1)
        if self.params.get("max_prompt_len"):
            p = np.minimum(p, int(self.params["max_prompt_len"]))
        if self.params.get("max_output_len"):
            o = np.minimum(o, int(self.params["max_output_len"]))
        return p, o

    def draw(self, rng: np.random.Generator, index: int) -> tuple[int, int]:
        """The ``(prompt, output)`` lengths of request ``index``."""
        d = self.distribution
        if d == "fixed":
            return self._fixed()
        if d == "uniform":
            plo, phi = _range_param(self.params, "prompt_len")
            olo, ohi = _range_param(self.params, "output_len")
            return int(rng.integers(plo, phi + 1)), int(rng.integers(olo, ohi + 1))
        if d == "list":
            if "pairs" in self.params:
                pairs = self._pairs()
                p, o = pairs[int(rng.integers(len(pairs)))]
                return int(p), int(o)
            ps = _list_param(self.params, "prompt_len")
            os_ = _list_param(self.params, "output_len")
            return int(ps[int(rng.integers(len(ps)))]), int(os_[int(rng.integers(len(os_)))])
        p, o = self._replay_lengths()
        i = index % len(p)  # an open loop of another pattern may outlast the trace: wrap
        return int(p[i]), int(o[i])


def length_params_json(lengths: Lengths, replay: ReplayTrace | None = None,
                       time_scale: float = 1.0) -> str | None:
    """The ``length_params`` column: JSON of the range/list, and the replay file's name and hash.

    Returns ``None`` for fixed lengths without a replay file.
    """
    out: dict[str, Any] = {}
    if lengths.distribution != "fixed":
        out.update(lengths.params)
    trace = replay or lengths.replay
    if trace is not None:
        out["replay_file"] = trace.name
        out["replay_sha256"] = trace.sha256
        if time_scale != 1.0:
            out["replay_time_scale"] = time_scale
    return json.dumps(out, sort_keys=True) if out else None


# ---------------------------------------------------------------------------------------------
# The stream
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    """One request of a stream.

    Attributes:
        request_id: ``r<index>``, zero-padded.
        index: 0-based position in the stream.
        prompt_tokens: prompt length.
        output_tokens: forced output length.
        offset_s: scheduled arrival since the stream's start (``None`` for closed loops).
    """

    request_id: str
    index: int
    prompt_tokens: int
    output_tokens: int
    offset_s: float | None


class RequestStream:
    """A seeded, bounded, lazily drawn stream of requests.

    Args:
        arrivals: the arrival process.
        lengths: the length distribution.
        num_requests: stop after this many requests (``None`` = no count bound).
        target_duration_s: open loops stop at the first arrival later than this; the serving
            loop enforces it for closed loops (``None`` = no time bound).
        seed: the stream's seed.

    Raises:
        InputError: neither bound given (a replay stream is bounded by its trace), or a bound
            out of range.
    """

    def __init__(self, arrivals: ArrivalProcess, lengths: Lengths, *,
                 num_requests: int | None = None, target_duration_s: float | None = None,
                 seed: int = 0) -> None:
        if num_requests is None and target_duration_s is None and arrivals.pattern != "replay":
            raise InputError("a request stream needs num_requests or target_duration_s",
                             field="num_requests")
        if num_requests is not None and num_requests < 1:
            raise InputError(f"num_requests must be >= 1 (got {num_requests})",
                             field="num_requests")
        if target_duration_s is not None and not target_duration_s > 0:
            raise InputError(f"target_duration_s must be > 0 (got {target_duration_s})",
                             field="target_duration_s")
        self.arrivals = arrivals
        self.lengths = lengths
        self.num_requests = num_requests
        self.target_duration_s = target_duration_s
        self.seed = int(seed)

    def _rngs(self) -> tuple[np.random.Generator, np.random.Generator]:
        arrivals, lengths, _ = np.random.SeedSequence(self.seed).spawn(3)
        return np.random.default_rng(arrivals), np.random.default_rng(lengths)

    def prompt_ids(self, request: Request, vocab_size: int, first_id: int = 3) -> list[int]:
        """The synthetic prompt of ``request``.

        Exactly ``prompt_tokens`` ids in ``[first_id, vocab_size)``, a function of the seed and
        the request's index only.
        """
        seq = np.random.SeedSequence(self.seed, spawn_key=(2, request.index))
        return synthetic_prompt(np.random.default_rng(seq), request.prompt_tokens, vocab_size,
                                first_id)

    def _offsets(self, rng: np.random.Generator) -> Iterator[float | None]:
        proc = self.arrivals
        if proc.pattern == "closed":
            while True:
                yield None
        if proc.pattern == "replay":
            assert proc.replay is not None
            for off in proc.replay.offsets_s:
                yield float(off) * proc.time_scale
            return
        t = 0.0  # the first request arrives at once, the next after the first gap
        while True:
            for gap in proc.interarrivals_s(rng, 256):
                yield t
                t += float(gap)

    def __iter__(self) -> Iterator[Request]:
        arrival_rng, length_rng = self._rngs()
        width = max(5, len(str((self.num_requests or 1) - 1)))
        for index, offset in enumerate(self._offsets(arrival_rng)):
            if self.num_requests is not None and index >= self.num_requests:
                return
            if (offset is not None and self.target_duration_s is not None
                    and offset > self.target_duration_s):
                return
            prompt, output = self.lengths.draw(length_rng, index)
            yield Request(f"r{index:0{width}d}", index, prompt, output, offset)

    def materialise(self, limit: int = 1_000_000) -> list[Request]:
        """All requests of a stream that is bounded without the serving loop's help.

        Raises:
            InputError: a closed loop bounded by duration only (its length depends on the run).
        """
        if self.num_requests is None and not self.arrivals.open_loop:
            raise InputError("a closed loop bounded by target_duration_s only has no fixed "
                             "length", field="num_requests")
        out = []
        for req in self:
            out.append(req)
            if len(out) >= limit:
                raise InputError(f"the stream has more than {limit} requests",
                                 field="num_requests")
        return out


def synthetic_prompt(rng: np.random.Generator, length: int, vocab_size: int,
                     first_id: int = 3) -> list[int]:
    """``length`` token ids drawn uniformly from ``[first_id, vocab_size)``."""
    return rng.integers(first_id, vocab_size, size=length).tolist()


__all__ = [
    "ARRIVAL_PATTERNS",
    "LENGTH_DISTRIBUTIONS",
    "ArrivalProcess",
    "Lengths",
    "ReplayTrace",
    "Request",
    "RequestStream",
    "length_params_json",
    "read_replay",
    "synthetic_prompt",
]
