"""ML.ENERGY benchmark v3 results (Apache-2.0, "The ML.ENERGY Initiative"): one run per file.

The writer is ``mlenergy.benchmark.llm.benchmark`` of ml-energy/benchmark (read at commit
c1d6557fbf7c7c495749b0fcf649f71774eabde9). Each benchmark writes one ``results.json`` at::

    llm/{gpu}/{snapshot}/run/{suite}/{task}/results/{org}/{model}/{sku}/{config}/results.json

where ``{config}`` is ``key+value+key+value...`` (``num_gpus``, ``max_num_seqs``,
``num_request_repeats``, the dataset's own parameters). What the file holds and where it goes:

- ``timeline.power.device_instant["<gpu>"]``, ``device_average``, ``memory_average``: lists of
  ``[unix_s, W]`` written by Zeus' ``PowerMonitor(update_period=0.1)``, which keeps a reading
  **only when it changed** (``zeus/monitor/power.py``). Each GPU becomes one device row:
  ``power_w`` = ``device_instant`` (``power_field`` ``instant``, NVML field 186) and
  ``power_avg_w`` = ``device_average`` (field 185, the 1 s average), and ``temp_c`` =
  ``timeline.temperature["<gpu>"]`` when present. The run's ``sample_hold`` is ``previous``:
  every reading holds until the next one, so each series is carried forward onto the union of
  the device's reading times (never interpolated; null before its first reading). Readings of
  one series in the same millisecond keep the later one. ``memory_average`` (HBM power) has no
  column and is kept only in ``source_metadata``'s list of series (by name, not values).
- ``timeline.steady_state_start_time`` / ``steady_state_end_time``: the ``steady_begin`` /
  ``steady_end`` events (the steady window metrics use).
- ``steady_state_energy`` (J, all GPUs, Zeus' ``ZeusMonitor`` window), ``steady_state_duration``
  (s), ``steady_state_energy_per_token`` (J per generated token), ``steady_state_measurement`` and
  ``entire_benchmark_measurement``: kept verbatim in ``source_metadata`` (the publisher's own
  figures, which ``llm-powertrace compare`` puts beside ours).
- Latency statistics ``{mean,median,std,p50,p90,p95,p99}_{ttft,tpot,itl,e2el}_ms``: all kept in
  ``source_metadata``; ``ttft_p50_ms`` = ``median_ttft_ms``, ``ttft_p99_ms`` = ``p99_ttft_ms``,
  ``latency_p50_ms`` = ``median_e2el_ms``, ``latency_p99_ms`` = ``p99_e2el_ms``,
  ``tpot_mean_s`` = ``mean_tpot_ms`` / 1000.
- ``results`` (per request: prompt, output text, lengths, latency, TTFT, ITLs, energy): **not
  kept** — the writer saves no send time per request, so no request can be placed on the run
  clock, and the texts are prompts and model outputs, not measurements.
- ``prometheus_timeline`` is not in ``results.json`` (the writer moves it to
  ``prometheus.json``), which is not read.

:data:`FIELD_MAP` lists every top-level field; ``docs/importers.md`` renders it.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import bounded, checks, schema
from ..errors import InputError
from ..run import DeviceSeries, Event, Run, coerce_meta
from .assemble import DeviceData, base_meta, check_run_id, fill_model

FORMAT = "mlenergy-v3"
SOURCE_CREDIT = ("ML.ENERGY benchmark v3 results (ml-energy/benchmark, Apache-2.0), credit: "
                 "The ML.ENERGY Initiative")
MAX_RESULTS_BYTES = 512 << 20
"""Largest ``results.json`` read (512 MiB: the per-request texts of a long benchmark)."""
MAX_FILES = 100_000
"""Most ``results.json`` files one import reads (a whole published tree is ~10^3)."""
MAX_READINGS = 10_000_000
"""Most readings of one series (a day of 10 Hz changes on every poll is 864,000)."""
SAMPLE_PERIOD_MS = 100.0
"""The writer's ``PowerMonitor(update_period=0.1)``: the polling period of every series."""
PATH_PARTS = ("gpu", "snapshot", "run", "suite", "task", "results", "org", "model", "sku",
              "config")
SERIES = {"device_instant": "power_w", "device_average": "power_avg_w"}
LATENCY_MAP = {"median_ttft_ms": "ttft_p50_ms", "p99_ttft_ms": "ttft_p99_ms",
               "median_e2el_ms": "latency_p50_ms", "p99_e2el_ms": "latency_p99_ms"}
SOURCE_FIGURES = ("steady_state_energy", "steady_state_duration",
                  "steady_state_energy_per_token")
"""The publisher's own figures of the steady window (J, s, J per generated token)."""
DROPPED = ("results", "timeline", "prometheus_timeline")
_LATENCY_KEY = re.compile(r"^(mean|median|std|p\d+(\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")

FIELD_MAP: dict[str, str] = {
    "timeline.power.device_instant": "power_w of each GPU's row (power_field instant); "
    "sample_hold previous",
    "timeline.power.device_average": "power_avg_w of each GPU's row (the 1 s average)",
    "timeline.power.memory_average": "not kept: GPU memory power has no column (its presence "
    "is listed in source_metadata.series)",
    "timeline.temperature": "temp_c of each GPU's row",
    "timeline.steady_state_start_time / steady_state_end_time": "steady_begin / steady_end "
    "events",
    "timeline.benchmark_start_time / benchmark_end_time": "source_metadata",
    "steady_state_energy, steady_state_duration, steady_state_energy_per_token":
    "source_metadata (compared with ours by `llm-powertrace compare`)",
    "steady_state_measurement, entire_benchmark_measurement": "source_metadata (Zeus windows: "
    "time, gpu_energy per GPU)",
    "{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms": "source_metadata; median/p99 TTFT -> "
    "ttft_p50_ms/ttft_p99_ms, median/p99 E2EL -> latency_p50_ms/latency_p99_ms, mean TPOT -> "
    "tpot_mean_s",
    "model_id": "model_label, model_name, model_family",
    "gpu_model": "gpu_name, platform",
    "num_gpus": "num_gpus (checked against the timeline's GPUs)",
    "max_num_seqs": "batch_size (the server's maximum batch)",
    "num_prompts": "num_requests",
    "completed": "requests_completed",
    "total_input_tokens / total_output_tokens": "tokens_in / tokens_out",
    "output_throughput": "tokens_per_s",
    "max_concurrency": "concurrency",
    "request_rate, burstiness": "arrival_rate_rps and arrival_pattern (poisson when burstiness "
    "is 1, gamma otherwise; arrival_cv = 1/sqrt(burstiness)); `inf`: all at once, left null",
    "seed": "seed",
    "other scalars (date, endpoint_type, num_unique_prompts, num_request_repeats, "
    "max_num_batched_tokens, max_output_tokens, duration, request_throughput, "
    "total_token_throughput)": "source_metadata",
    "results": "not kept: per-request prompts and outputs; the writer saves no send time per "
    "request, so requests cannot be placed on the run clock",
}
"""Where every field of an ML.ENERGY v3 ``results.json`` goes (docs/importers.md renders it)."""


def results_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every ``results.json`` of the given files and folders (sorted, at most ``MAX_FILES``).

    Raises:
        InputError: a path that is neither, or no ``results.json`` under a folder.
    """
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = []
            for p in path.rglob("results.json"):
                found.append(p)
                if len(found) + len(out) > MAX_FILES:
                    raise InputError(f"more than {MAX_FILES} results.json files; import part "
                                     "of the tree", file=path)
            if not found:
                raise InputError("no results.json under the folder (an ML.ENERGY v3 tree: "
                                 "llm/{gpu}/{snapshot}/run/{suite}/{task}/results/...)",
                                 file=path)
            out += sorted(found)
        elif path.name == "results.json":
            out.append(path)
        else:
            raise InputError("expected an ML.ENERGY v3 results.json or a folder holding them",
                             file=path)
    return out


def parse_path(path: Path) -> dict[str, str]:
    """The parts of a results path and the keys of its ``config`` folder name.

    The parts are ``gpu``, ``snapshot``, ``suite``, ``task``, ``org``, ``model``, ``sku`` and
    ``config``; the config keys (``key+value+...``) come as ``config.<key>``.

    Raises:
        InputError: a path not laid out as the writer lays it out.
    """
    parts = path.resolve().parts
    for i in range(len(parts) - 12, -1, -1):
        if parts[i] == "llm" and parts[i + 3] == "run" and parts[i + 6] == "results":
            named = dict(zip(PATH_PARTS, parts[i + 1:i + 11], strict=True))
            toks = named["config"].split("+")
            if len(toks) % 2:
                break
            cfg = {toks[k]: toks[k + 1] for k in range(0, len(toks), 2)}
            return {**named, **{f"config.{k}": v for k, v in cfg.items()}}
    raise InputError("not under llm/{gpu}/{snapshot}/run/{suite}/{task}/results/{org}/{model}/"
                     "{sku}/{key+value...}/results.json (the ML.ENERGY v3 layout)", file=path)


def _number(value: Any, key: str, path: Path, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"value {str(value)[:40]!r} is not a number", file=path, field=key)
    x = float(value)
    if not math.isfinite(x) or (positive and x <= 0) or (not positive and x < 0):
        raise InputError(f"value {value!r} is not a {'positive' if positive else 'non-negative'}"
                         " finite number", file=path, field=key)
    return x


def _optional(data: dict[str, Any], key: str, path: Path) -> float | None:
    value = data.get(key)
    return None if value is None else _number(value, key, path)


def _series(group: Any, name: str, path: Path) -> dict[int, np.ndarray]:
    """``{gpu: array of shape (n, 2)}`` of one ``{"<gpu>": [[unix_s, value], ...]}`` mapping."""
    if not isinstance(group, dict):
        raise InputError("expected an object {\"<gpu>\": [[unix_s, value], ...]}", file=path,
                         field=name)
    out: dict[int, np.ndarray] = {}
    for key, points in group.items():
        if not (isinstance(key, str) and key.isdigit() and len(key) <= 4):
            raise InputError(f"GPU key {str(key)[:20]!r} is not a GPU index", file=path,
                             field=name)
        if not isinstance(points, list) or len(points) > MAX_READINGS:
            raise InputError(f"GPU {key}: expected a list of at most {MAX_READINGS} "
                             "[unix_s, value] pairs", file=path, field=name)
        try:
            arr = np.array(points, dtype=np.float64).reshape(len(points), 2)
        except (TypeError, ValueError):
            bad = next((p for p in points if not (isinstance(p, list) and len(p) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in p))), None)
            raise InputError(f"GPU {key}: reading {str(bad)[:60]} is not [unix_s, value]",
                             file=path, field=name) from None
        if not np.isfinite(arr).all():
            raise InputError(f"GPU {key}: a reading is not finite", file=path, field=name)
        if len(arr) > 1 and (np.diff(arr[:, 0]) < 0).any():
            i = int(np.flatnonzero(np.diff(arr[:, 0]) < 0)[0])
            raise InputError(f"GPU {key}: time goes back at reading {i + 1} "
                             f"({arr[i, 0]!r} -> {arr[i + 1, 0]!r})", file=path, field=name)
        out[int(key)] = arr
    return out


def _on_grid(t_ms: np.ndarray, arr: np.ndarray | None) -> np.ndarray:
    """One series carried forward (its ``previous`` hold) onto ``t_ms``; NaN before it starts."""
    out = np.full(len(t_ms), np.nan)
    if arr is None or not len(arr):
        return out
    own = np.round(arr[:, 0] * 1000).astype(np.int64)
    idx = np.searchsorted(own, t_ms, side="right") - 1  # the last reading at or before t
    ok = idx >= 0
    out[ok] = arr[idx[ok], 1]
    return out


def _source_metadata(data: dict[str, Any], timeline: dict[str, Any], power: dict[str, Any],
                     parts: dict[str, str], path: Path) -> str:
    kept = {k: v for k, v in data.items() if k not in DROPPED}
    kept["timeline"] = {k: v for k, v in timeline.items() if k not in ("power", "temperature")}
    kept["series"] = sorted([f"power.{k}" for k in power]
                            + (["temperature"] if "temperature" in timeline else []))
    kept["path"] = {k: v for k, v in parts.items()}
    try:
        return json.dumps(kept, sort_keys=True, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":"))
    except (TypeError, ValueError):
        raise InputError("holds NaN, infinity or a value that is not JSON", file=path) from None


def _arrival(data: dict[str, Any], path: Path) -> dict[str, Any]:
    rate = data.get("request_rate")
    if rate is None or rate == "inf" or (isinstance(rate, float) and math.isinf(rate)):
        return {}
    out: dict[str, Any] = {"arrival_rate_rps": _number(rate, "request_rate", path,
                                                       positive=True)}
    burst = data.get("burstiness")
    if burst is not None:
        b = _number(burst, "burstiness", path, positive=True)
        out["arrival_pattern"] = "poisson" if b == 1 else "gamma"
        out["arrival_cv"] = 1 / math.sqrt(b)
    return out


def _run_id(parts: dict[str, str], path: Path) -> str:
    slug = "+".join(re.sub(r"[^A-Za-z0-9._=-]+", "-", parts[k]).strip("-.") for k in
                    ("task", "sku", "org", "model", "config"))
    return check_run_id(f"{FORMAT}.{slug}", file=path)


def read_results(path: str | Path, *, platform: str | None = None) -> Run:
    """Read one ``results.json`` of the ML.ENERGY v3 tree as a run (module docstring).

    Args:
        path: the file, inside the writer's folder layout.
        platform: the split slug (default: from ``gpu_model``).

    Raises:
        InputError: a file outside the layout, a missing or malformed field (naming it).
    """
    path = Path(path)
    parts = parse_path(path)
    data = bounded.read_json(path, max_bytes=MAX_RESULTS_BYTES)
    if not isinstance(data, dict):
        raise InputError("expected one JSON object", file=path)
    timeline = data.get("timeline")
    if not isinstance(timeline, dict):
        raise InputError("missing or not an object", file=path, field="timeline")
    power = timeline.get("power")
    if not isinstance(power, dict) or "device_instant" not in power:
        raise InputError("no power timeline (timeline.power.device_instant)", file=path,
                         field="timeline.power.device_instant")
    series = {key: _series(power[key], f"timeline.power.{key}", path)
              for key in SERIES if key in power}
    if "memory_average" in power:  # checked like the others; its values are not kept
        _series(power["memory_average"], "timeline.power.memory_average", path)
    temps = (_series(timeline["temperature"], "timeline.temperature", path)
             if isinstance(timeline.get("temperature"), dict) else {})
    gpus = sorted(series["device_instant"])
    if not gpus:
        raise InputError("no GPU in the power timeline", file=path,
                         field="timeline.power.device_instant")
    num_gpus = data.get("num_gpus")
    if num_gpus is not None and (isinstance(num_gpus, bool) or num_gpus != len(gpus)):
        raise InputError(f"value {num_gpus!r} differs from the {len(gpus)} GPUs of the power "
                         "timeline", file=path, field="num_gpus")
    for key in SOURCE_FIGURES:
        if key in data and data[key] is not None:
            _number(data[key], key, path)
    model_id = data.get("model_id") or f"{parts['org']}/{parts['model']}"
    gpu_model = data.get("gpu_model") or parts["sku"]
    for key, value in (("model_id", model_id), ("gpu_model", gpu_model)):
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"value {value!r} is not a name", file=path, field=key)

    # every device on one clock: t0 = the first reading of any GPU's instant power
    t0_ms = min(int(round(series["device_instant"][g][0, 0] * 1000))
                for g in gpus if len(series["device_instant"][g]))
    devices, checked = [], []
    for g in gpus:
        own = [s[g] for s in series.values() if g in s] + ([temps[g]] if g in temps else [])
        t_abs = np.unique(np.concatenate([np.round(a[:, 0] * 1000).astype(np.int64)
                                          for a in own]))
        signals = {col: _on_grid(t_abs, series[key].get(g)) for key, col in SERIES.items()
                   if key in series}
        if g in temps:
            signals["temp_c"] = _on_grid(t_abs, temps[g])
        checked.append(DeviceData(gpu_index=g, ts_ms=t_abs, lines=np.zeros(len(t_abs), np.int64),
                                  signals=signals))
        devices.append(DeviceSeries(gpu_index=g, t_ms=t_abs - t0_ms, signals=signals,
                                    gpu_name=gpu_model))
    checks.check_times(checked, file=path)
    checks.check_device_ranges(checked, file=path,
                               fields={"power_w": "timeline.power.device_instant",
                                       "power_avg_w": "timeline.power.device_average",
                                       "temp_c": "timeline.temperature"})

    info = schema.platform_from_name(gpu_model)
    meta: dict[str, Any] = {
        **base_meta(FORMAT, "inference"),
        "run_id": _run_id(parts, path), "platform": platform or info.slug,
        "num_gpus": len(gpus), "model_label": model_id, "model_name": model_id.split("/")[-1],
        "serving_engine": "vllm", "batching": "continuous", "task": parts["task"],
        "power_field": "instant", "sample_hold": "previous",
        "sample_period_ms": SAMPLE_PERIOD_MS,
        "start_time": dt.datetime.fromtimestamp(t0_ms / 1000, tz=dt.timezone.utc),
        "source_metadata": _source_metadata(data, timeline, power, parts, path),
    }
    ints = {"max_num_seqs": "batch_size", "num_prompts": "num_requests",
            "completed": "requests_completed", "total_input_tokens": "tokens_in",
            "total_output_tokens": "tokens_out", "max_concurrency": "concurrency",
            "seed": "seed"}
    for key, col in ints.items():
        value = data.get(key)
        if value is not None:
            x = _number(value, key, path)
            if x != int(x):
                raise InputError(f"value {value!r} is not a whole number", file=path, field=key)
            meta[col] = int(x)
    tput = _optional(data, "output_throughput", path)
    if tput is not None:
        meta["tokens_per_s"] = tput
    for key, col in LATENCY_MAP.items():
        value = _optional(data, key, path)
        if value is not None:
            meta[col] = value
    tpot = _optional(data, "mean_tpot_ms", path)
    if tpot is not None:
        meta["tpot_mean_s"] = tpot / 1000
    meta.update(_arrival(data, path))
    fill_model(meta)
    checks.check_texts({**meta, "gpu_name": gpu_model}, [], (), file=path)
    run = Run(meta=coerce_meta({k: v for k, v in meta.items() if v is not None}, "inference",
                               file=path), devices=devices)
    run.add_flags(*(() if platform else info.flags))
    run.events = _steady_events(timeline, t0_ms, path)
    return run


def _steady_events(timeline: dict[str, Any], t0_ms: int, path: Path) -> list[Event]:
    """``steady_begin`` / ``steady_end`` at the writer's steady-state bounds (run clock)."""
    start, end = timeline.get("steady_state_start_time"), timeline.get("steady_state_end_time")
    if start is None or end is None:
        return []
    a = _number(start, "timeline.steady_state_start_time", path)
    b = _number(end, "timeline.steady_state_end_time", path)
    if b < a:
        raise InputError(f"the steady state ends ({b!r}) before it starts ({a!r})", file=path,
                         field="timeline.steady_state_end_time")
    return [Event(t_ms=int(round(a * 1000)) - t0_ms, kind="steady_begin"),
            Event(t_ms=int(round(b * 1000)) - t0_ms, kind="steady_end")]


def iter_mlenergy_v3(paths: Sequence[str | Path], *,
                     platform: str | None = None) -> Iterator[tuple[Path, Run]]:
    """``(results.json, run)`` of every file under ``paths``, one in memory at a time.

    Raises:
        InputError: as :func:`read_results`; every path is listed before the first is read.
    """
    for path in results_files(paths):
        yield path, read_results(path, platform=platform)


__all__ = ["FIELD_MAP", "FORMAT", "SOURCE_CREDIT", "SOURCE_FIGURES", "iter_mlenergy_v3",
           "parse_path", "read_results", "results_files"]
