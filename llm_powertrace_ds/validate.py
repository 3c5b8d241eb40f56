"""Quality checks of a run, in the flag vocabulary of ``schema.FLAG_DESCRIPTIONS`` (docs/design.md).

Error-level flags (``empty``, ``nonmonotonic_time``, ``unequal_lengths``, ``negative_power``)
stop a run from being published; warnings are recorded in ``quality_flags`` and counted by the
card.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import checks, metrics, schema
from .run import DeviceSeries, Run
from .schema import ENERGY_MISMATCH_PCT, GAP_PERIODS

STALL_S = 1.0
IRREGULAR_CV = 0.25
STUCK_S = 10.0
IMPLAUSIBLE_FACTOR = 2.0


@dataclass
class ValidationReport:
    """Flags found in one run, with a message per problem.

    Attributes:
        run_id: the run.
        flags: quality flags (errors and warnings).
        messages: one human-readable line per problem.
    """

    run_id: str
    flags: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [f for f in self.flags if f in schema.ERROR_FLAGS]

    def add(self, flag: str, message: str) -> None:
        if flag not in self.flags:
            self.flags.append(flag)
        self.messages.append(message)


def nominal_period_ms(run: Run, t_ms: np.ndarray) -> float:
    """The sampling period: the declared one, or the median interval when that is longer.

    period = max(sample_period_ms, median(Δt)), the rule of the metrics' gaps
    (``metrics.core``): a logger declared at 100 ms that really read every second has a period
    of 1 s, so its regular readings are not gaps.
    """
    declared = run.meta.get("sample_period_ms")
    median = metrics.interval_median(np.diff(t_ms)) if len(t_ms) > 1 else float("nan")
    if declared:
        return float(declared) if not median > float(declared) else median
    return median


def _longest_constant_run_ms(t_ms: np.ndarray, power: np.ndarray) -> float:
    """The longest time over which power repeats one reading (``t_ms`` strictly increasing).

    span = max over runs of equal consecutive readings of t_last − t_first (0 without a
    repeat). Only the repeats are visited: i with P_i+1 − P_i == 0 (never true at a NaN or
    between infinities), grouped where the indices are consecutive; a reading without a repeat
    spans 0 ms.
    """
    if len(power) < 2:
        return 0.0
    same = np.flatnonzero(np.diff(power) == 0)
    if not len(same):
        return 0.0
    cut = np.flatnonzero(np.diff(same) != 1) + 1  # where a new run of repeats begins
    first = same[np.r_[0, cut]]
    last = same[np.r_[cut - 1, len(same) - 1]] + 1
    return float((t_ms[last] - t_ms[first]).max())


def _per_device_view(run: Run) -> list[DeviceSeries]:
    """The devices, with an aggregate series' power shown as its per-device mean (total / N).

    The physical ranges of ``checks`` are per device; a node or cluster total
    (``aggregate_series``) is checked as the mean of the ``num_gpus`` devices it sums.
    """
    count = run.meta.get("num_gpus")
    if "aggregate_series" not in run.flags or not count:
        return list(run.devices)
    return [DeviceSeries(d.gpu_index, d.t_ms, {k: (v / int(count) if k in ("power_w",
                                                                            "power_avg_w")
                                                   else v) for k, v in d.signals.items()},
                         node_index=d.node_index) for d in run.devices]


def validate_run(run: Run) -> ValidationReport:
    """Check a run and return its flags (the run itself is not changed).

    Checks: samples present, strictly increasing ``t_ms``, equal list lengths, negative power,
    gaps (> 3 periods), stalls (> 1 s), irregular sampling (interval CV > 0.25), implausible
    power (> 2x the limit), stuck sensor (power unchanged over > 10 s), missing GPUs (fewer
    series than ``num_gpus``), counter-vs-integral energy mismatch (> 5 %); and the seed authors'
    vocabulary: ``zero_power_samples`` (a 0 W reading), ``duplicate_samples`` (a repeated
    timestamp), ``gpu_count_mismatch`` (device series != ``num_gpus``, either direction).
    """
    rep = ValidationReport(run.run_id)
    if not run.devices:
        rep.add("empty", "the run has no device series")
        return rep
    # an aggregate series is one total of num_gpus devices: one series is all there is
    num_gpus = None if "aggregate_series" in run.flags else run.meta.get("num_gpus")
    if num_gpus is not None and len(run.devices) < int(num_gpus):
        rep.add("missing_gpu", f"{len(run.devices)} device series for num_gpus={num_gpus}")
    if num_gpus is not None and len(run.devices) != int(num_gpus):
        rep.add("gpu_count_mismatch", f"{len(run.devices)} device series, num_gpus={num_gpus}")
    for dev in run.devices:
        name = f"gpu {dev.node_index}:{dev.gpu_index}"
        t = dev.t_ms
        if len(t) == 0:
            rep.add("empty", f"{name}: no samples")
            continue
        bad_len = [k for k, v in dev.signals.items() if len(v) != len(t)]
        if bad_len:
            rep.add("unequal_lengths", f"{name}: {', '.join(bad_len)} length differs from t_ms")
            continue
        dt = np.diff(t)
        if (dt == 0).any():
            rep.add("duplicate_samples", f"{name}: {int((dt == 0).sum())} repeated timestamps")
        if (dt <= 0).any():
            i = int(np.flatnonzero(dt <= 0)[0])
            rep.add("nonmonotonic_time", f"{name}: t_ms goes from {t[i]} to {t[i + 1]} at sample {i + 1}")
            continue
        power = dev.power_w
        if (power == 0).any():
            rep.add("zero_power_samples", f"{name}: {int((power == 0).sum())} readings of 0 W")
        if np.nanmin(power, initial=np.inf) < 0:
            rep.add("negative_power", f"{name}: power {np.nanmin(power):.1f} W < 0")
        period = nominal_period_ms(run, t)
        # a change-only source (sample_hold previous) logs nothing while the reading stays:
        # its long intervals are held values, not gaps, stalls or irregular sampling
        if len(dt) and np.isfinite(period) and run.sample_hold != "previous":
            if (dt > GAP_PERIODS * period).any():
                rep.add("gap", f"{name}: {(dt > GAP_PERIODS * period).sum()} gaps > 3 periods")
            if (dt > STALL_S * 1000).any():
                rep.add("stall", f"{name}: longest interval {dt.max() / 1000:.1f} s")
            regular = dt[dt <= GAP_PERIODS * period]
            if len(regular) > 2 and regular.std() / regular.mean() > IRREGULAR_CV:
                rep.add("irregular_sampling", f"{name}: interval CV "
                        f"{regular.std() / regular.mean():.2f}")
        if dev.power_limit_w and np.nanmax(power, initial=-np.inf) > IMPLAUSIBLE_FACTOR * dev.power_limit_w:
            rep.add("implausible_power", f"{name}: power {np.nanmax(power):.0f} W > 2x limit")
        if _longest_constant_run_ms(t, power) > STUCK_S * 1000:
            rep.add("stuck_sensor", f"{name}: power unchanged for more than {STUCK_S:.0f} s")
        counter_j = metrics.counter_energy_j(t, dev.signals.get("energy_mj"))
        # the power integral only where a counter can disagree with it (mismatch_pct is None
        # without a counter)
        integral_j = (metrics.device_energy_j(dev, run.sample_hold) if counter_j is not None
                      else None)
        mismatch = metrics.mismatch_pct(integral_j, counter_j)
        if mismatch is not None and abs(mismatch) > ENERGY_MISMATCH_PCT:
            rep.add("energy_mismatch", f"{name}: integral {integral_j:.0f} J vs counter "
                    f"{counter_j:.0f} J")
    for message in checks.implausible_samples(_per_device_view(run)):
        rep.add("implausible_value", message)
    if run.meta.get("sampler") == "cpu_proxy" or run.platform == "cpu_proxy":
        rep.add("cpu_proxy", "cpu_proxy: modelled from CPU activity, not a GPU measurement")
    return rep
