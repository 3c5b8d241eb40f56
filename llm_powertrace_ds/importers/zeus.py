"""Zeus power logs: the legacy power CSV, ``PowerMonitor`` timelines and the monitor's lines.

Zeus (the ML.ENERGY GPU energy library, Apache-2.0) leaves power on disk in these forms; the
format is told by the content, never by the file name:

``legacy``
    The CSV that ``PowerMonitor(power_csv_path=...)`` of Zeus up to 0.11 writes from its polling
    process: no header, one row per poll ``<unix time s>,<W of GPU 0>,<W of GPU 1>,...`` (the
    instant power, NVML field 186, of the monitored GPUs in order). Every poll is written, so the
    readings are interpolated (``sample_hold`` ``linear``), as Zeus' own ``get_energy`` does.
``timeline``
    The JSON of ``PowerMonitor.get_all_power_timelines()`` (Zeus 0.12 on, the ML.ENERGY benchmark
    v3's power source): ``{"device_instant": {"<gpu>": [[unix s, W], ...]}, "device_average":
    ..., "memory_average": ...}``, or one domain's ``{"<gpu>": [[unix s, W], ...]}``
    (``get_power_timeline``). Each domain keeps a reading **only when it changed**, so the run's
    ``sample_hold`` is ``previous`` and the metrics hold each reading until the next one. The
    domains of a GPU are put on the union of their instants, each held: ``power_w`` is
    ``device_instant`` (``power_field`` ``instant``; ``device_average`` when no instant domain
    was kept, ``power_field`` ``average``), ``power_avg_w`` is ``device_average``;
    ``memory_average`` (HBM power) has no column and is listed in ``source_metadata``.
``lines``
    What ``python -m zeus.monitor power`` prints: one ``<local time> {'GPU0': W, ...}`` line per
    update period, then ``Total time (s): S`` and ``Total energy (J): {'GPU0': J, ...}``.
    Times are local without a zone (``--tz``). The printed totals are the publisher's own
    figures: ``source_duration_s`` and ``source_total_energy_wh`` (all GPUs, J / 3600), and
    per GPU in ``source_metadata``.

The ``ZeusMonitor(log_file=...)`` CSV (``start_time,window_name,elapsed_time,gpu0_energy,...``)
holds **joules per measurement window**, not power: it is never read as watts. Given with a
power log of the same GPUs, its windows become ``stage`` events of that run (``<name>`` at the
start, ``end`` at the end) and its energies, time and names are kept verbatim in
``source_metadata`` (``windows``); given alone it is refused, naming what to give with it.

``sampler`` = ``import:zeus``; ``run_id`` = ``import-zeus-<first 12 hex of the power log's
sha256>``. Every row's time and value is checked (a finite number, times increasing per GPU, the
gap rule of every importer) and errors name the file, the line and the field.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import bounded
from ..errors import InputError
from ..run import Event, Run
from .common import (
    DeviceData,
    assemble_run,
    base_meta,
    check_run_id,
    file_sha256,
    finish_meta,
    load_meta_file,
    resolve_zone,
    scrub_meta,
)
from .timestamps import local_to_utc_ms

FORMAT = "zeus"
MAX_LOG_BYTES = 1 << 30
"""Largest power log read (1 GiB: ~20 M rows of a few GPUs)."""
MAX_GPUS = 1024
"""Most GPUs one log may hold."""
DOMAINS = {"device_instant": ("power_w", "instant"), "device_average": ("power_avg_w", "average")}
"""Zeus power domain -> (our signal, power_field when it is the run's power_w)."""
NOT_KEPT_DOMAINS = {"memory_average": "HBM power has no column: listed in source_metadata"}
WINDOW_HEADER_RE = re.compile(r"^start_time,window_name,elapsed_time(,gpu\d+_energy)+$")
_LINE_RE = re.compile(r"^(?P<time>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?)"
                      r"\s*(?P<values>\{.*)?$")
"""A printed sample: its local time, and its ``{'GPU0': W, ...}`` on this line or the next ones
(rich pretty-prints the mapping on lines of its own, wrapped when wide)."""
_TOTAL_RE = re.compile(r"^Total (?P<what>time \(s\)|energy \(J\)):\s*(?P<value>.*)$")
FIELD_MAP: dict[str, str] = {
    "legacy CSV: unix time (1st cell)": "t_ms and start_time (UTC)",
    "legacy CSV: W of the k-th GPU (k+1-th cell)": "power_w of gpu_index k (power_field "
    "`instant`: Zeus reads NVML field 186), sample_hold linear",
    "timeline: device_instant[<gpu>]": "power_w (power_field `instant`), sample_hold previous "
    "(Zeus keeps a reading only when it changed)",
    "timeline: device_average[<gpu>]": "power_avg_w (power_w and power_field `average` when "
    "no instant domain was kept)",
    "timeline: memory_average[<gpu>]": "dropped: HBM power has no column (named in "
    "source_metadata domains_not_imported)",
    "lines: <local time>": "t_ms and start_time (local time converted with --tz)",
    "lines: {'GPU<k>': W}": "power_w of gpu_index k (power_field `instant`)",
    "lines: Total time (s)": "source_duration_s",
    "lines: Total energy (J)": "source_total_energy_wh (Σ GPUs / 3600) and per GPU in "
    "source_metadata",
    "window CSV: start_time, window_name": "a `stage` event labelled window_name at start_time "
    "and one labelled `end` at start_time + elapsed_time, on the power log's run",
    "window CSV: elapsed_time, gpu<k>_energy": "kept verbatim in source_metadata (windows): "
    "joules per window, never read as power",
}
"""Every field of the Zeus formats (``docs/importers.md`` renders it)."""


def _number(text: str, *, path: Path, line: int, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"value {text.strip()[:40]!r} is not a number", file=path, line=line,
                         field=field) from None
    if not math.isfinite(value):
        raise InputError(f"value {text.strip()[:40]!r} is not a finite number", file=path,
                         line=line, field=field)
    return value


def _unix_ms(value: float, *, path: Path, line: int, field: str) -> int:
    if not 0.0 < value < 1e11:  # seconds since 1970; checks.check_times bounds the dates
        raise InputError(f"value {value!r} is not a unix time in seconds", file=path, line=line,
                         field=field)
    return round(value * 1000.0)


def sniff(path: Path) -> str:
    """``legacy``, ``timeline``, ``lines`` or ``windows``: the kind of a Zeus file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise InputError(f"Failed to read '{path}': {type(exc).__name__}: {exc}",
                         file=path) from None
    first = next((ln.strip() for ln in head.splitlines() if ln.strip()), "")
    if first.startswith("{"):
        return "timeline"
    if WINDOW_HEADER_RE.match(first.replace(" ", "")):
        return "windows"
    if _LINE_RE.match(first):
        return "lines"
    cells = first.split(",")
    if len(cells) >= 2 and all(re.fullmatch(r"\s*[-+0-9.eE]+\s*", c) for c in cells):
        return "legacy"
    raise InputError("not a Zeus power log (the legacy power CSV 'unix_time,W0,...', a "
                     "PowerMonitor timeline JSON, the lines of `python -m zeus.monitor power`) "
                     "nor a ZeusMonitor window CSV", file=path, line=1)


def read_legacy(path: Path) -> list[DeviceData]:
    """The legacy power CSV: one device per power column."""
    text = bounded.read_text(path, max_bytes=MAX_LOG_BYTES)
    lines = text.split("\n")
    cut = not text.endswith("\n")
    times: list[int] = []
    rows: list[list[float]] = []
    linenos: list[int] = []
    width = None
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        cells = raw.strip().split(",")
        if width is None:
            width = len(cells)
            if not 2 <= width <= MAX_GPUS + 1:
                raise InputError(f"{width} cells: expected unix_time,W0[,W1,...] (at most "
                                 f"{MAX_GPUS} GPUs)", file=path, line=lineno)
        if len(cells) != width or (lineno == len(lines) and cut):
            if lineno == len(lines) and cut:
                continue  # a last row the polling process was killed while writing
            raise InputError(f"{len(cells)} cells where the first row has {width}", file=path,
                             line=lineno)
        t = _number(cells[0], path=path, line=lineno, field="unix_time")
        times.append(_unix_ms(t, path=path, line=lineno, field="unix_time"))
        rows.append([_number(c, path=path, line=lineno, field=f"W{k}")
                     for k, c in enumerate(cells[1:])])
        linenos.append(lineno)
    if not rows:
        raise InputError("no samples", file=path)
    ts = np.array(times, dtype=np.int64)
    values = np.array(rows, dtype=np.float64)
    ln = np.array(linenos, dtype=np.int64)
    _check_increasing(ts, ln, path=path, field="unix_time")
    return [DeviceData(gpu_index=k, ts_ms=ts, lines=ln, signals={"power_w": values[:, k]})
            for k in range(values.shape[1])]


def _check_increasing(ts: np.ndarray, lines: np.ndarray, *, path: Path, field: str) -> None:
    bad = np.flatnonzero(np.diff(ts) <= 0)
    if len(bad):
        i = int(bad[0])
        raise InputError(f"time goes back or repeats after line {int(lines[i])}", file=path,
                         line=int(lines[i + 1]), field=field)


def read_timeline(path: Path) -> tuple[list[DeviceData], str, list[str]]:
    """A PowerMonitor timeline JSON: (devices, power_field, domains not imported)."""
    data = bounded.read_json(path, max_bytes=MAX_LOG_BYTES)
    if not isinstance(data, dict) or not data:
        raise InputError("expected a JSON object of power domains or of GPUs", file=path)
    domains = data if set(data) & (set(DOMAINS) | set(NOT_KEPT_DOMAINS)) else {
        "device_instant": data}
    unknown = sorted(set(domains) - set(DOMAINS) - set(NOT_KEPT_DOMAINS))
    if unknown:
        raise InputError(f"unknown power domain {unknown[0][:40]!r} (Zeus writes "
                         f"{', '.join([*DOMAINS, *NOT_KEPT_DOMAINS])})", file=path,
                         field=unknown[0][:40])
    kept = [d for d in DOMAINS if d in domains]
    if not kept:
        raise InputError("no device_instant or device_average timeline", file=path,
                         field="device_instant")
    series: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for domain in kept:
        gpus = domains[domain]
        if not isinstance(gpus, dict) or len(gpus) > MAX_GPUS:
            raise InputError(f"expected an object of at most {MAX_GPUS} GPUs", file=path,
                             field=domain)
        for key, points in gpus.items():
            if not (isinstance(key, str) and key.isdigit() and len(key) <= 4):
                raise InputError(f"GPU key {str(key)[:20]!r} is not a GPU index", file=path,
                                 field=f"{domain}.{str(key)[:20]}")
            series.setdefault(int(key), {})[domain] = _points(points, path=path,
                                                              field=f"{domain}.{key}")
    power_field = "instant" if "device_instant" in kept else "average"
    devices = []
    for gpu in sorted(series):
        doms = series[gpu]
        if ("device_instant" if power_field == "instant" else "device_average") not in doms:
            raise InputError(f"GPU {gpu} has no {kept[0]} timeline", file=path, field=kept[0])
        union = np.unique(np.concatenate([t for t, _ in doms.values()]))
        signals = {}
        for domain, (t, w) in doms.items():
            signal = DOMAINS[domain][0]
            if power_field == "average" and domain == "device_average":
                signal = "power_w"
            i = np.searchsorted(t, union, side="right") - 1  # the held reading at each instant
            signals[signal] = np.where(i >= 0, w[np.maximum(i, 0)], np.nan)
        devices.append(DeviceData(gpu_index=gpu, ts_ms=union,
                                  lines=np.zeros(len(union), np.int64), signals=signals))
    if not devices:
        raise InputError("the timeline holds no GPU", file=path, field=kept[0])
    return devices, power_field, sorted(set(domains) & set(NOT_KEPT_DOMAINS))


def _points(points: Any, *, path: Path, field: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(points, list) or not points:
        raise InputError("expected a non-empty list of [unix time s, W] pairs", file=path,
                         field=field)
    try:
        arr = np.array(points, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("expected [unix time s, W] pairs of numbers", file=path,
                         field=field) from None
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise InputError("expected [unix time s, W] pairs", file=path, field=field)
    if not np.isfinite(arr).all():
        k = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise InputError(f"pair {k} is not finite", file=path, field=field)
    if not ((arr[:, 0] > 0) & (arr[:, 0] < 1e11)).all():
        k = int(np.flatnonzero(~((arr[:, 0] > 0) & (arr[:, 0] < 1e11)))[0])
        raise InputError(f"pair {k}: {arr[k, 0]!r} is not a unix time in seconds", file=path,
                         field=field)
    t = np.round(arr[:, 0] * 1000.0).astype(np.int64)
    order = np.argsort(t, kind="stable")  # Zeus sorts; a merged dump may not be
    t, w = t[order], arr[order, 1]
    keep = np.append(np.diff(t) > 0, True)  # two readings in one ms: the later one holds
    return t[keep], w[keep]


def read_lines(path: Path, zone: dt.tzinfo) -> tuple[list[DeviceData], dict[str, Any]]:
    """The monitor's printed lines: (devices, the printed totals)."""
    text = bounded.read_text(path, max_bytes=MAX_LOG_BYTES)
    stamps: list[str] = []
    values: list[dict[str, float]] = []
    linenos: list[int] = []
    totals: dict[str, Any] = {}

    def take(owner: str, at: int, mapping: str) -> None:
        reading = _gpu_dict(mapping, path=path, line=at)
        if owner == "energy":
            totals["total_energy_j"] = reading
            return
        if values and list(reading) != list(values[0]):
            raise InputError(f"GPUs {', '.join(reading)[:60]} where the first sample has "
                             f"{', '.join(values[0])[:60]}", file=path, line=at)
        stamps.append(owner)
        values.append(reading)
        linenos.append(at)

    pending: tuple[str, int] | None = None  # what the next mapping belongs to, and its line
    buffer = ""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if pending is None or not (buffer or line.startswith("{")):
            m, t = _LINE_RE.match(line), _TOTAL_RE.match(line)
            if m:
                pending, line = (m.group("time").replace(" ", "T", 1), lineno), \
                    m.group("values") or ""
            elif t and t.group("what").startswith("time"):
                totals["total_time_s"] = _number(t.group("value"), path=path, line=lineno,
                                                 field="Total time (s)")
                continue
            elif t:
                pending, line = ("energy", lineno), t.group("value")
            else:
                continue  # not Zeus' output (log lines of other code)
        buffer += line
        if len(buffer) > 64 * MAX_GPUS:
            raise InputError("a mapping too long for GPU readings", file=path, line=lineno)
        if buffer and buffer.count("{") <= buffer.count("}"):
            take(*pending, buffer)
            pending, buffer = None, ""
    if not values:
        raise InputError("no '<time>' line with its {'GPU0': W, ...}", file=path)
    try:
        local = np.array(stamps, dtype="datetime64[us]").astype(np.int64)
    except ValueError:
        raise InputError("a time that is not a calendar time", file=path, line=linenos[0],
                         field="time") from None
    ts = local_to_utc_ms((local + 500) // 1000, zone)
    ln = np.array(linenos, dtype=np.int64)
    _check_increasing(ts, ln, path=path, field="time")
    return [DeviceData(gpu_index=int(g[3:]), ts_ms=ts, lines=ln,
                       signals={"power_w": np.array([v[g] for v in values])})
            for g in values[0]], totals


def _gpu_dict(text: str, *, path: Path, line: int) -> dict[str, float]:
    """``{'GPU0': 123.4, ...}`` as Zeus prints it (a Python literal, never evaluated)."""
    if len(text) > 64 * MAX_GPUS:
        raise InputError("the line is too long for a GPU reading", file=path, line=line)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise InputError(f"value {text[:40]!r} is not a {{'GPU0': W, ...}} mapping", file=path,
                         line=line) from None
    if not isinstance(value, dict) or not value or not all(
            isinstance(k, str) and re.fullmatch(r"GPU\d{1,4}", k) for k in value):
        raise InputError(f"value {text[:40]!r} is not a {{'GPU0': W, ...}} mapping", file=path,
                         line=line)
    out = {}
    for key, number in value.items():
        if isinstance(number, bool) or not isinstance(number, (int, float)) \
                or not math.isfinite(number):
            raise InputError(f"value {str(number)[:40]!r} is not a finite number", file=path,
                             line=line, field=key)
        out[key] = float(number)
    return out


def read_windows(path: Path) -> list[dict[str, Any]]:
    """A ZeusMonitor window CSV: one dict per window, as written (joules per window)."""
    text = bounded.read_text(path, max_bytes=64 << 20)
    rows = text.splitlines()
    header = rows[0].replace(" ", "").split(",")
    out = []
    for lineno, raw in enumerate(rows[1:], start=2):
        if not raw.strip():
            continue
        cells = raw.split(",")
        if len(cells) != len(header):
            raise InputError(f"{len(cells)} cells where the header has {len(header)}",
                             file=path, line=lineno)
        start = _number(cells[0], path=path, line=lineno, field="start_time")
        _unix_ms(start, path=path, line=lineno, field="start_time")
        elapsed = _number(cells[2], path=path, line=lineno, field="elapsed_time")
        if elapsed < 0:
            raise InputError(f"value {cells[2][:40]!r} is negative", file=path, line=lineno,
                             field="elapsed_time")
        window: dict[str, Any] = {"start_time": start, "window_name": cells[1],
                                  "elapsed_time": elapsed}
        for name, cell in zip(header[3:], cells[3:], strict=True):
            window[name] = _number(cell, path=path, line=lineno, field=name)
        out.append(window)
    return out


def _window_events(windows: Sequence[dict[str, Any]]) -> list[tuple[int, Event]]:
    events = []
    for w in windows:
        start = round(w["start_time"] * 1000.0)
        events.append((start, Event(0, "stage", label=str(w["window_name"])[:200])))
        events.append((start + round(w["elapsed_time"] * 1000.0), Event(0, "stage", label="end")))
    return sorted(events, key=lambda e: e[0])


def import_zeus(paths: Sequence[str | Path], *, workload: str,
                meta_path: str | Path | None = None, platform: str | None = None,
                num_gpus: int | None = None, tz: str | None = "UTC") -> Run:
    """Import one Zeus power log, with its ZeusMonitor window CSV if given (module docstring).

    Args:
        paths: one power log (legacy CSV, timeline JSON or printed lines), and optionally the
            window CSV of the same run.
        workload: ``finetune`` or ``inference``.
        meta_path: flat JSON/YAML of our column names (model, platform, ...).
        platform: the split slug (Zeus names no GPU; default ``unknown``).
        num_gpus: GPUs of the run (default: those in the log).
        tz: IANA zone of the printed lines' local times.

    Raises:
        InputError: bad input, naming the file, the line and the field; a window CSV alone.

    Example:
        >>> run = import_zeus(["power_timeline.json", "windows.csv"],  # doctest: +SKIP
        ...                   workload="inference", platform="h100_sxm_80gb")
    """
    files = [Path(p) for p in paths]
    kinds = {p: sniff(p) for p in files}
    logs = [p for p in files if kinds[p] != "windows"]
    windows_files = [p for p in files if kinds[p] == "windows"]
    if not logs:
        raise InputError("a ZeusMonitor window CSV holds joules per window, not power: give "
                         "it with the power log of the same run (`import zeus "
                         "power_timeline.json windows.csv`), or import the power log alone",
                         file=windows_files[0], field="gpu0_energy")
    if len(logs) > 1 or len(windows_files) > 1:
        raise InputError("one power log (and at most one window CSV) per run: import the "
                         "others separately", file=(logs + windows_files)[1])
    path = logs[0]
    kind = kinds[path]
    meta_in = scrub_meta(load_meta_file(meta_path), source=str(meta_path)) if meta_path else {}
    meta: dict[str, Any] = {**base_meta(FORMAT, workload), **meta_in}
    source: dict[str, Any] = {"format": f"Zeus {kind}", "file": path.name}
    meta["power_field"] = meta.get("power_field") or "instant"
    meta["sample_hold"] = "linear"
    if kind == "legacy":
        devices = read_legacy(path)
    elif kind == "timeline":
        devices, field, not_kept = read_timeline(path)
        meta["power_field"] = meta_in.get("power_field") or field
        meta["sample_hold"] = "previous"  # PowerMonitor keeps a reading only when it changed
        source["domains_not_imported"] = not_kept
    else:
        devices, totals = read_lines(path, resolve_zone(tz))
        source["printed_totals"] = totals
        if "total_time_s" in totals:
            meta["source_duration_s"] = totals["total_time_s"]
        if "total_energy_j" in totals:
            meta["source_total_energy_wh"] = sum(totals["total_energy_j"].values()) / 3600.0
    events: list[tuple[int, Event]] = []
    if windows_files:
        windows = read_windows(windows_files[0])
        source["windows"] = windows
        events = _window_events(windows)
    meta["run_id"] = check_run_id(str(meta.get("run_id") or
                                      f"import-{FORMAT}-{file_sha256(path)[:12]}"), file=path)
    meta.setdefault("source_metadata", json.dumps(source, sort_keys=True))
    flags = finish_meta(devices, meta, platform=platform, num_gpus=num_gpus, file=path)
    return assemble_run(devices, meta, file=path, flags=flags, events=events,
                        fields={"power_w": "power", "power_avg_w": "device_average"})


def iter_zeus(paths: Iterable[str | Path], **kwargs: Any) -> Iterator[Run]:
    """:func:`import_zeus` on ``paths`` as one run (the CLI's iterator form)."""
    yield import_zeus(list(paths), **kwargs)


__all__ = ["FIELD_MAP", "FORMAT", "import_zeus", "iter_zeus", "read_legacy", "read_lines",
           "read_timeline", "read_windows", "sniff"]
