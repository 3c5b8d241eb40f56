"""Our figures of an imported run beside the publisher's own, in the publisher's units.

An importer keeps what the publisher computed: the PowerTrace catalog's aggregates in the
``source_*`` columns, ML.ENERGY's steady-state figures in ``source_metadata``. This module puts
each beside the figure we computed from the same trace (the runs table's metrics), converted to
the publisher's unit, with

    diff_pct = 100 · (ours − theirs) / theirs        (null when theirs is 0 or absent)

PowerTrace catalog (:data:`CATALOG_FIGURES`): energy in Wh (ours: ``energy_j`` / 3600), mean,
p95, p99 and peak node power in W, mean power per GPU (ours: ``mean_power_w`` / ``num_gpus``),
the seed-compatible 1 s ramps in W/s and ramp events per minute, the duration in s.

ML.ENERGY v3 (:func:`mlenergy_figures`): over the steady window (our ``steady_begin`` /
``steady_end`` events, which are the publisher's bounds), the energy in J (ours:
``steady_energy_j``), the duration in s (ours: the work window when its source is ``steady``),
the mean power in W (energy / duration, both sides) and the energy per generated token in J
(ours: ``steady_energy_j`` / the publisher's steady-state token count, which is
``steady_state_energy / steady_state_energy_per_token``: the tokens are counted by them, as our
trace holds no per-request record of that window).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True)
class Figure:
    """One figure both sides report: its name, the publisher's unit and how to read each side."""

    name: str
    unit: str
    ours: Callable[[Row], float | None]
    theirs: Callable[[Row], float | None]


def _col(name: str, scale: float = 1.0) -> Callable[[Row], float | None]:
    def read(row: Row) -> float | None:
        value = row.get(name)
        return None if value is None else float(value) * scale
    return read


def _per_gpu(row: Row) -> float | None:
    mean, n = row.get("mean_power_w"), row.get("num_gpus")
    return None if mean is None or not n else float(mean) / int(n)


CATALOG_FIGURES: tuple[Figure, ...] = (
    Figure("energy", "Wh", _col("energy_j", 1 / 3600), _col("source_total_energy_wh")),
    Figure("mean power", "W", _col("mean_power_w"), _col("source_mean_total_power_w")),
    Figure("p95 power", "W", _col("p95_power_w"), _col("source_p95_total_power_w")),
    Figure("p99 power", "W", _col("p99_power_w"), _col("source_p99_total_power_w")),
    Figure("peak power", "W", _col("peak_power_w"), _col("source_max_total_power_w")),
    Figure("mean power per GPU", "W", _per_gpu, _col("source_mean_power_per_gpu_w")),
    Figure("ramp up p95 (1 s)", "W/s", _col("ramp_up_p95_1s_w_per_s"),
           _col("source_ramp_up_p95_1s_w_per_s")),
    Figure("ramp up p99 (1 s)", "W/s", _col("ramp_up_p99_1s_w_per_s"),
           _col("source_ramp_up_p99_1s_w_per_s")),
    Figure("ramp down p99 (1 s)", "W/s", _col("ramp_down_p99_1s_w_per_s"),
           _col("source_ramp_down_p99_1s_w_per_s")),
    Figure("ramp events (1 s)", "per min", _col("ramp_event_frequency_1s"),
           _col("source_ramp_event_frequency_1s")),
    Figure("duration", "s", _col("duration_s"), _col("source_duration_s")),
)
"""The PowerTrace catalog's aggregates (``source_*`` columns) and ours."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _source(row: Row) -> dict[str, Any]:
    text = row.get("source_metadata")
    if not isinstance(text, str):
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _steady_s(row: Row) -> float | None:
    if row.get("work_window_source") != "steady":
        return None
    a, b = row.get("work_window_start_s"), row.get("work_window_end_s")
    return None if a is None or b is None else float(b) - float(a)


def mlenergy_figures(row: Row) -> list[tuple[str, str, float | None, float | None]]:
    """``(figure, unit, ours, theirs)`` of an ML.ENERGY run's steady window (module docstring)."""
    src = _source(row)
    energy = _number(src.get("steady_state_energy"))
    duration = _number(src.get("steady_state_duration"))
    per_token = _number(src.get("steady_state_energy_per_token"))
    if energy is None and per_token is None:
        return []
    ours_e = _number(row.get("steady_energy_j"))
    ours_s = _steady_s(row)
    tokens = energy / per_token if energy is not None and per_token else None
    return [
        ("steady-state energy", "J", ours_e, energy),
        ("steady-state duration", "s", ours_s, duration),
        ("steady-state mean power", "W",
         ours_e / ours_s if ours_e is not None and ours_s else None,
         energy / duration if energy is not None and duration else None),
        ("steady-state energy per token", "J/token",
         ours_e / tokens if ours_e is not None and tokens else None, per_token),
    ]


def diff_pct(ours: float | None, theirs: float | None) -> float | None:
    """``100 · (ours − theirs) / theirs``; null when either is missing or theirs is 0."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return 100.0 * (ours - theirs) / theirs


def compare_rows(rows: Iterable[Row]) -> list[Row]:
    """One row per (run, figure) the publisher reported: ours, theirs, unit, ``diff_pct``.

    Runs whose publisher reported none of these figures (our own runs) give no row.
    """
    out: list[Row] = []
    for row in rows:
        figures = [(f.name, f.unit, f.ours(row), f.theirs(row)) for f in CATALOG_FIGURES]
        figures = [f for f in figures if f[3] is not None] + mlenergy_figures(row)
        for name, unit, ours, theirs in figures:
            out.append({"run_id": row["run_id"], "figure": name, "unit": unit, "ours": ours,
                        "theirs": theirs, "diff_pct": diff_pct(ours, theirs)})
    return out


__all__ = ["CATALOG_FIGURES", "Figure", "compare_rows", "diff_pct", "mlenergy_figures"]
