"""One run as the explorer draws it: a small description (``meta``) and its pyramid chunks.

The node total is :func:`llm_powertrace_ds.metrics.node_total` — every device interpolated onto
the metrics' common 0.1 s grid and summed, NaN inside any device's gap — so the chart shows the
very series the metrics were computed on (never a sum of samples that happen to share a
timestamp, which dips whenever one device's tick lands a few ms away from the others').
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import metrics as metrics_mod
from .. import schema
from ..request_rows import number_column
from ..run import DeviceSeries, Run
from . import pyramid

SIGNALS = {  # short key -> (column, label, unit)
    "p": ("power_w", "power", "W"),
    "u": ("gpu_util_pct", "GPU utilisation", "%"),
    "c": ("sm_clock_mhz", "SM clock", "MHz"),
    "T": ("temp_c", "temperature", "°C"),
    "m": ("mem_used_mib", "memory used", "MiB"),
}
"""The signals the run page draws, each on its own linked y-axis (power first)."""
TOTAL_KEY = "total"
PHASES = {  # begin kind -> (end kind, label)
    "idle_begin": ("idle_end", "idle"),
    "warmup_begin": ("warmup_end", "warm-up"),
    "steady_begin": ("steady_end", "steady window"),
    "checkpoint_begin": ("checkpoint_end", "checkpoint"),
    "eval_begin": ("eval_end", "eval"),
    "prefill_begin": ("prefill_end", "prefill"),
    "decode_begin": ("decode_end", "decode"),
    "step_begin": ("step_end", "step"),
}
"""Begin/end event pairs drawn as windows on the events row."""
MARKS = {"step_begin": "step", "checkpoint_begin": "checkpoint", "stage": "stage",
         "eval_begin": "eval"}
"""Point events drawn as markers (``stage`` carries the imported tool's label)."""
WORK_START_KINDS = ("warmup_begin", "step_begin", "prefill_begin", "steady_begin",
                    "request_arrival")


ZLIB_LEVEL = 9
"""Deflate level of the chunk files (``DecompressionStream("deflate")`` in the browser)."""


def _shuffle(raw: bytes) -> bytes:
    """Byte planes of 4-byte words: all first bytes, then all second bytes, ... (lossless).

    A float's sign/exponent and top mantissa bytes change slowly along a trace, its low bytes do
    not; grouped, deflate finds the slow planes' repeats (the idea of HDF5's shuffle filter and
    Parquet's BYTE_STREAM_SPLIT).
    """
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, 4).T.tobytes()


def _unshuffle(raw: bytes, n: int) -> bytes:
    return np.frombuffer(raw, dtype=np.uint8).reshape(4, n).T.tobytes()


def encode_chunk(payload: dict[str, Any]) -> dict[str, Any]:
    """The chunk file's form of a chunk: every array in one deflated, base64 binary blob.

    Times (``t``, ms) are stored as int32 differences from the previous sample (the first from
    the chunk's own base time, kept in the layout, so a run longer than 24.8 days never wraps),
    values as float32 bit patterns; each array is byte-shuffled (:func:`_shuffle`), then all
    are concatenated and deflated (zlib). Nothing is rounded: :func:`decode_chunk` (and the
    browser's ``unpack`` in ``explorer.js``) give back the same times and float32 bits, NaN
    included.

    Returns:
        ``payload`` without ``series``, plus ``layout`` (``[key, signal, slot, n]`` per array, in
        blob order; ``slot`` is ``-1`` for a raw array, ``0``/``1`` for a bucket's first/second
        extremum; a time array adds its base time as a fifth item) and ``z`` (the base64 blob).
    """
    layout: list[list[Any]] = []
    parts: list[bytes] = []
    for key, sig in payload["series"].items():
        for name, value in sig.items():
            arrays = list(enumerate(value)) if isinstance(value, tuple) else [(-1, value)]
            for slot, arr in arrays:
                base = 0
                if name == "t":
                    t = np.asarray(arr, dtype=np.int64)
                    base = int(t[0]) if len(t) else 0
                    deltas = np.diff(t, prepend=base)  # from the chunk's first time: a month-
                    if len(deltas) and (deltas.max() > 2**31 - 1 or deltas.min() < -(2**31)):
                        raise ValueError("a gap between two samples does not fit 24.8 days")
                    words = deltas.astype("<i4").tobytes()  # long run never wraps
                else:
                    words = np.ascontiguousarray(arr, dtype="<f4").tobytes()
                layout.append([key, name, slot, len(arr), base])
                parts.append(_shuffle(words))
    out = {k: v for k, v in payload.items() if k != "series"}
    out["layout"] = layout
    out["z"] = base64.b64encode(zlib.compress(b"".join(parts), ZLIB_LEVEL)).decode("ascii")
    return out


def decode_chunk(encoded: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`encode_chunk` (the Python twin of ``explorer.js``'s ``unpack``)."""
    blob = zlib.decompress(base64.b64decode(encoded["z"]))
    series: dict[str, dict[str, Any]] = {}
    offset = 0
    pairs: dict[tuple[str, str], list[np.ndarray]] = {}
    for entry in encoded["layout"]:
        key, name, slot, n = entry[:4]
        base = int(entry[4]) if len(entry) > 4 else 0
        words = _unshuffle(blob[offset:offset + 4 * n], n)
        offset += 4 * n
        if name == "t":
            arr: np.ndarray = base + np.cumsum(np.frombuffer(words, "<i4"), dtype=np.int64)
        else:
            arr = np.frombuffer(words, "<f4")
        if slot < 0:
            series.setdefault(key, {})[name] = arr
        else:
            pairs.setdefault((key, name), []).append(arr)
            series.setdefault(key, {})[name] = tuple(pairs[(key, name)])
    out = {k: v for k, v in encoded.items() if k not in ("layout", "z")}
    out["series"] = series
    return out


def _num(value: Any) -> Any:
    """JSON-safe scalar: NaN/inf become null; numpy scalars become Python ones."""
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(float(value)) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def device_key(index: int) -> str:
    return f"d{index}"


def _device_signals(dev: DeviceSeries) -> dict[str, np.ndarray]:
    out = {}
    for key, (column, _, _) in SIGNALS.items():
        values = dev.signals.get(column)
        if values is not None and np.isfinite(values).any():
            out[key] = values
    return out


def _event_rank(run: Run) -> int | None:
    ranks = sorted({e.rank for e in run.events if e.rank is not None})
    return ranks[0] if ranks else None


def events_view(run: Run) -> tuple[dict[str, list[list[int]]], dict[str, list[Any]]]:
    """Windows per phase and marker times per kind (rank-level events of the lowest rank only).

    Returns:
        ``phases``: label -> ``[[begin_ms, end_ms], ...]``; ``marks``: label -> ``[t_ms, ...]``
        (``stage`` marks are ``[t_ms, label]`` pairs).
    """
    rank = _event_rank(run)
    events = [e for e in run.events if e.rank is None or e.rank == rank]
    phases: dict[str, list[list[int]]] = {}
    open_at: dict[str, int] = {}
    ends = {end: begin for begin, (end, _) in PHASES.items()}
    for e in sorted(events, key=lambda e: e.t_ms):
        if e.kind in PHASES:
            open_at[e.kind] = int(e.t_ms)
        elif e.kind in ends and ends[e.kind] in open_at:
            begin = ends[e.kind]
            phases.setdefault(PHASES[begin][1], []).append([open_at.pop(begin), int(e.t_ms)])
    marks: dict[str, list[Any]] = {}
    for e in events:
        if e.kind == "stage":
            marks.setdefault("stage", []).append([int(e.t_ms), e.label])
        elif e.kind in MARKS:
            marks.setdefault(MARKS[e.kind], []).append(int(e.t_ms))
    return phases, marks


def work_start_ms(run: Run) -> int:
    """Where the work begins (the compare view aligns runs here).

    The first warm-up/step/prefill/steady/arrival event, else the end of the leading idle window,
    else the first sample.
    """
    times = [e.t_ms for e in run.events if e.kind in WORK_START_KINDS]
    if times:
        return int(min(times))
    idle_end = [e.t_ms for e in run.events if e.kind == "idle_end"]
    if idle_end:
        return int(min(idle_end))
    starts = [int(d.t_ms[0]) for d in run.devices if len(d.t_ms)]
    return min(starts) if starts else 0


def requests_view(run: Run) -> dict[str, Any] | None:
    """In-flight requests (arrived, not finished) as a step series, and the arrival times.

    ``in_flight(t) = #{arrival_ms <= t} - #{finish_ms <= t}``; a request with no ``finish_ms``
    stays in flight to the end of the log (the log does not say when it left).
    """
    requests = run.requests or []
    arrived = number_column(requests, "arrival_ms")
    known = ~np.isnan(arrived)
    if not known.any():
        return None
    finished = number_column(requests, "finish_ms")[known]
    arrivals = np.sort(arrived[known].astype(np.int64))
    finishes = np.sort(finished[~np.isnan(finished)].astype(np.int64))
    t = np.concatenate((arrivals, finishes))
    step = np.concatenate((np.ones(len(arrivals), np.int64), -np.ones(len(finishes), np.int64)))
    order = np.argsort(t, kind="stable")
    t, n = t[order], np.cumsum(step[order])
    last = np.concatenate((t[1:] != t[:-1], [True]))  # one point per distinct time
    return {"t_ms": t[last].tolist(), "in_flight": n[last].tolist(),
            "arrivals_ms": arrivals.tolist(),
            "unfinished": int(len(arrivals) - len(finishes))}


class RunData:
    """The explorer's view of one run: its description and its chunk files' payloads.

    Args:
        run: the run.
        folder: the run's folder name inside the site (``data/runs/<folder>/``).
        row: the run's runs-config row (metrics, metric_notes), or ``None`` to compute them.
    """

    def __init__(self, run: Run, folder: str, row: dict[str, Any] | None) -> None:
        self.run = run
        self.folder = folder
        self.row = row
        self.series: dict[str, dict[str, np.ndarray]] = {}
        self.times: dict[str, np.ndarray] = {}
        for i, dev in enumerate(run.devices):
            sig = _device_signals(dev)
            if sig:
                key = device_key(i)
                self.series[key] = sig
                self.times[key] = np.asarray(dev.t_ms, dtype=np.int64)
        self.total = metrics_mod.node_total(run)
        if self.total is not None:
            self.series[TOTAL_KEY] = {"p": self.total.total}
            self.times[TOTAL_KEY] = self.total.grid_ms
        starts = [int(t[0]) for t in self.times.values() if len(t)]
        ends = [int(t[-1]) for t in self.times.values() if len(t)]
        self.origin_ms = min(starts) if starts else 0
        self.end_ms = max(ends) if ends else 0
        # the metrics' period: the declared one, or the devices' median interval when longer
        # (a logger declared at 100 ms that read every second breaks its line at 3 s holes,
        # not at every reading)
        declared = run.meta.get("sample_period_ms")
        dts = [float(np.median(np.diff(t))) for key, t in self.times.items()
               if key != TOTAL_KEY and len(t) > 1]
        observed = min(dts) if dts else None
        if declared and observed is not None:
            period = max(float(declared), observed)
        else:
            period = float(declared or observed or metrics_mod.GRID_MS)
        self.period_ms = period
        self.levels = pyramid.plan_levels(self.origin_ms, self.end_ms, self.period_ms)

    # -- description -----------------------------------------------------------------------

    def meta(self, formulas_known: set[str]) -> dict[str, Any]:
        """The run page's description: devices, levels, events, requests, metrics, flags."""
        run = self.run
        values = dict(self.row or {})
        if any(name not in values for name in metrics_mod.METRIC_NAMES):
            values.update(metrics_mod.compute_run_metrics(run))
        devices = []
        for i, dev in enumerate(run.devices):
            key = device_key(i)
            if key in self.series:
                devices.append({"key": key, "label": f"gpu {dev.node_index}:{dev.gpu_index}",
                                "gpu_name": dev.gpu_name, "power_limit_w": _num(dev.power_limit_w),
                                "signals": sorted(self.series[key])})
        phases, marks = events_view(run)
        flags = list(run.flags)
        scalars = {k: _num(v) for k, v in run.meta.items()
                   if k in schema.RUN_LEVEL_FIELDS.get(run.workload, ()) and k != "quality_flags"
                   and not isinstance(v, (list, dict))}
        scalars = {k: (v.isoformat() if hasattr(v, "isoformat") else v)
                   for k, v in scalars.items()}
        return {
            "run_id": run.run_id, "folder": self.folder, "workload": run.workload,
            "platform": run.platform, "sampler": run.meta.get("sampler"),
            "power_field": run.meta.get("power_field"),
            "cpu_proxy": schema.is_cpu_proxy(run.meta),
            "devices": devices,
            "total": self.total is not None,
            "total_note": None if self.total is not None else
            "node total not drawn: the devices share no common span (metrics say the same)",
            "signals": {k: {"label": lab, "unit": unit} for k, (_, lab, unit) in SIGNALS.items()},
            "levels": {"origin_ms": self.levels.origin_ms, "period_ms": self.levels.period_ms,
                       "bucket_ms": list(self.levels.bucket_ms),
                       "chunk_ms": [self.levels.chunk_ms(k)
                                    for k in range(len(self.levels.bucket_ms))],
                       "n_chunks": [self.levels.n_chunks(k, self.end_ms)
                                    for k in range(len(self.levels.bucket_ms))],
                       "gap_ms": metrics_mod.GAP_PERIODS * self.period_ms,
                       "grid_ms": metrics_mod.GRID_MS},
            "end_ms": self.end_ms, "work_start_ms": work_start_ms(run),
            "phases": phases, "marks": marks, "requests": requests_view(run),
            "metrics": {name: _num(values.get(name)) for name in metrics_mod.METRIC_NAMES
                        if name in formulas_known or values.get(name) is not None},
            "metric_notes": list(values.get("metric_notes") or []),
            "flags": [{"flag": f, "description": schema.FLAG_DESCRIPTIONS.get(f, "")}
                      for f in flags],
            "settings": scalars,
        }

    # -- chunks ----------------------------------------------------------------------------

    def chunks(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(name, payload)`` for every chunk file: ``L<level>-<chunk>``.

        ``payload["series"]`` maps a series key to its arrays: at level 0 ``t`` (int64 ms, with
        a mid-gap time where a line breaks) and one float32 array per signal (NaN at the
        breaks); at level k >= 1 a ``(first, second)`` float32 pair per signal. The files hold
        :func:`encode_chunk` of it.
        """
        lv = self.levels
        gap_ms = metrics_mod.GAP_PERIODS * self.period_ms
        for c in range(lv.n_chunks(0, self.end_ms)):
            lo = lv.origin_ms + c * lv.chunk_ms(0)
            hi = lo + lv.chunk_ms(0)
            out: dict[str, Any] = {}
            for key, sig in self.series.items():
                t = self.times[key]
                a, b = np.searchsorted(t, [lo, hi])
                if a == b:
                    continue
                tt = t[a:b]
                pos, mid = pyramid.gap_breaks(tt, gap_ms)
                entry: dict[str, Any] = {"t": np.insert(tt, pos, mid).astype(np.int64)}
                for s, values in sig.items():
                    entry[s] = np.insert(values[a:b], pos, np.nan).astype(np.float32)
                out[key] = entry
            yield f"L0-{c}", {"level": 0, "chunk": c, "series": out}
        for k in range(1, len(lv.bucket_ms)):
            width = lv.bucket_ms[k]
            n_buckets = int((self.end_ms - lv.origin_ms) // width) + 1
            pairs = {key: {s: pyramid.bucket_extrema(self.times[key], v, lv.origin_ms, width,
                                                     n_buckets)
                           for s, v in sig.items()}
                     for key, sig in self.series.items()}
            for c in range(lv.n_chunks(k, self.end_ms)):
                i0 = c * pyramid.CHUNK_POINTS
                i1 = min(n_buckets, i0 + pyramid.CHUNK_POINTS)
                out = {key: {s: (f[i0:i1].astype(np.float32), g[i0:i1].astype(np.float32))
                             for s, (f, g) in sig_pairs.items()}
                       for key, sig_pairs in pairs.items()}
                yield f"L{k}-{c}", {"level": k, "chunk": c, "i0": i0, "series": out}
