"""The PowerTrace catalog's compact run files: ``runs/<run_id>.json`` or ``.json.gz``.

Their newest explorer build (``scripts/build_source_verified_inference_package.mjs`` of
Leo-hxu/training-power-trace-explorer at commit b35ddab7f937f523bb82b153b7ef3f249398d88b,
``build --compact true`` then ``finalize``) publishes a run as one JSON object::

    {"run": <catalog entry>, "samples": [<row of the long CSV>, ...],
     "inference_timeline": [<row of the request timeline>, ...]}

``run`` is mapped like their metadata JSON (:mod:`.seed_meta`), each ``samples`` row like a row
of their long CSV (:mod:`.powertrace_csv`: the same columns and signals; ``timestamp`` is
required, as it places the run in time) and ``inference_timeline`` is kept as
:mod:`.request_timeline` says. The file may be gzip-compressed (recognised by its magic bytes,
whatever its name). It is read through the bounded reader's rules: a regular file, at most
:data:`MAX_BYTES` compressed and :data:`MAX_TEXT_BYTES` of JSON text, UTF-8, at most 64 levels
deep. An error in a sample names its position in ``samples`` as the line (1-based).
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .. import bounded
from ..errors import InputError
from ..run import Event, Run
from . import accounting, common, request_timeline
from .common import DeviceData
from .powertrace_csv import _COLUMN_OF, DROPPED_COLUMNS, FORMAT, SIGNALS
from .seed_meta import map_meta

MAX_BYTES = 256 << 20
"""Largest compact run file read, as stored (compressed or not)."""
MAX_TEXT_BYTES = 1 << 30
"""Largest JSON text a compressed file may expand to (a gzip bomb stops here)."""
MAX_SAMPLES = 50_000_000
KEYS = ("run", "samples", "inference_timeline")


def is_compact(path: Path) -> bool:
    """Whether ``path`` is named like a compact run file (``.json`` or ``.json.gz``)."""
    name = path.name.lower()
    return name.endswith(".json") or name.endswith(".json.gz")


def read_compact(path: Path) -> dict[str, Any]:
    """The compact run file's object, read through the bounds in the module docstring.

    Raises:
        InputError: not a regular file, too large, a broken gzip stream, not UTF-8 or JSON,
            too deep, or not ``{run, samples[, inference_timeline]}``.
    """
    raw = bounded.read_bytes(path, max_bytes=MAX_BYTES)
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
                raw = fh.read(MAX_TEXT_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"not a readable gzip file ({exc})", file=path) from None
        if len(raw) > MAX_TEXT_BYTES:
            raise InputError(f"expands past {MAX_TEXT_BYTES} bytes; refused", file=path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", file=path) from None
    del raw
    bounded.check_depth(text, file=path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc.msg})", file=path, line=exc.lineno) from None
    if not isinstance(data, dict) or not isinstance(data.get("run"), dict):
        raise InputError("expected a compact run file {run, samples, inference_timeline}",
                         file=path, field="run")
    if not isinstance(data.get("samples"), list) or not data["samples"]:
        raise InputError("expected a non-empty list of samples", file=path, field="samples")
    if len(data["samples"]) > MAX_SAMPLES:
        raise InputError(f"{len(data['samples'])} samples; at most {MAX_SAMPLES} are read",
                         file=path, field="samples")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r} (known: {', '.join(KEYS)})", file=path,
                         field=unknown[0])
    return data


def _column(samples: list[Any], key: str, path: Path) -> np.ndarray:
    """One numeric column of the samples (NaN where null or absent)."""
    out = np.full(len(samples), np.nan)
    for i, row in enumerate(samples):
        value = row.get(key)
        if value is None or value == "":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise InputError(f"value {str(value)[:40]!r} is not a number", file=path,
                                 line=i + 1, field=key) from None
        out[i] = value
    return out


def _times_ms(samples: list[Any], path: Path) -> np.ndarray:
    texts = []
    for i, row in enumerate(samples):
        value = row.get("timestamp")
        if not isinstance(value, str) or not value.strip():
            raise InputError("no timestamp: a compact run is placed in time by its samples' "
                             "UTC timestamps", file=path, line=i + 1, field="timestamp")
        texts.append(value.strip().removesuffix("Z").removesuffix("z"))
    try:
        return np.array(texts, dtype="datetime64[ms]").astype(np.int64)
    except ValueError:
        for i, text in enumerate(texts):
            try:
                np.datetime64(text, "ms")
            except ValueError:
                raise InputError(f"value {text[:40]!r} is not an ISO 8601 UTC time", file=path,
                                 line=i + 1, field="timestamp") from None
        raise


def _devices(samples: list[Any], path: Path) -> list[DeviceData]:
    for i, row in enumerate(samples):
        if not isinstance(row, dict):
            raise InputError("expected an object", file=path, line=i + 1, field="samples")
    ts = _times_ms(samples, path)
    gpu = _column(samples, "gpu_id", path)
    bad = ~np.isfinite(gpu) | (gpu != np.round(gpu)) | (gpu < 0)
    if bad.any():
        raise InputError("a gpu_id must be a whole number >= 0", file=path,
                         line=int(np.flatnonzero(bad)[0]) + 1, field="gpu_id")
    signals = {sig: _column(samples, col, path) for col, sig in SIGNALS.items()}
    order = np.lexsort((ts, gpu))  # by GPU, then time (stable among equal times)
    numbers = np.arange(1, len(samples) + 1)
    devices = []
    for g in np.unique(gpu):
        idx = order[gpu[order] == g]
        dev = DeviceData(gpu_index=int(g), ts_ms=ts[idx], lines=numbers[idx],
                         signals={k: v[idx] for k, v in signals.items()})
        common.check_increasing(dev, file=path)
        devices.append(dev)
    if not any(np.isfinite(d.signals["power_w"]).any() for d in devices):
        raise InputError("no usable power value: every value is empty", file=path,
                         field="power_w")
    return devices


def _stage_events(samples: list[Any], path: Path) -> list[tuple[int, Event]]:
    labelled = [(i, row["stage"]) for i, row in enumerate(samples)
                if isinstance(row.get("stage"), str) and row["stage"].strip()]
    if not labelled:
        return []
    ts = _times_ms([samples[i] for i, _ in labelled], path)
    order = np.argsort(ts, kind="stable")
    events, last = [], None
    for k in order:
        label = labelled[int(k)][1].strip()
        if label != last:
            events.append((int(ts[k]), Event(t_ms=0, kind="stage", label=label)))
            last = label
    return events


def import_compact(path: str | Path, *, workload: str, platform: str | None = None,
                   num_gpus: int | None = None) -> Run:
    """Import one compact run file (module docstring) as a :class:`Run`.

    Raises:
        InputError: bad input, naming the file, the sample (as the line) and the field.
    """
    path = Path(path)
    data = read_compact(path)
    samples = data["samples"]
    devices = _devices(samples, path)
    meta = common.base_meta(FORMAT, workload)
    meta.update(map_meta(data["run"], workload, file=path))
    ids = {row.get("run_id") for row in samples} - {None, ""}
    if len(ids) > 1 or (ids and meta.get("run_id") not in (None, *ids)):
        raise InputError(f"samples of run {sorted(map(str, ids))[0]!r} in the file of run "
                         f"{meta.get('run_id')!r}", file=path, field="run_id")
    meta["run_id"] = meta.get("run_id") or f"import-{FORMAT}-{common.file_sha256(path)[:12]}"
    meta["power_field"] = "power_usage"
    names = sorted({key for row in samples for key in row})
    used = {*SIGNALS, "run_id", "timestamp", "gpu_id", "stage"}
    accounting.record_not_imported(meta, accounting.not_imported(names, used, DROPPED_COLUMNS),
                                   file=path)
    timeline = data.get("inference_timeline")
    if timeline:
        if not isinstance(timeline, list):
            raise InputError("expected a list of windows", file=path,
                             field="inference_timeline")
        meta["source_metadata"] = request_timeline.with_timeline(
            meta.get("source_metadata"), request_timeline.timeline_columns(timeline, file=path),
            file=path)
    flags = common.finish_meta(devices, meta, platform=platform, num_gpus=num_gpus, file=path)
    return common.assemble_run(devices, meta, file=path, flags=flags,
                               events=_stage_events(samples, path), fields=_COLUMN_OF)


__all__ = ["MAX_BYTES", "MAX_TEXT_BYTES", "import_compact", "is_compact", "read_compact"]
