"""Plan a sweep without running it (``generate --dry-run``), on any machine.

A dry run expands and checks every run, and says how long the sweep will take and which
sampler it would use. It needs no GPU: when the sweep asks for NVML and no usable GPU is here,
the runs are planned for an **assumed** GPU machine (:data:`ASSUMED`), and the report says so.
Run ids hash the platform, so ids planned on such a machine are provisional: the GPU machine's
own dry run gives the final ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llm_powertrace_ds.errors import InputError

from .sweep import PlannedRun, Sweep, detect_machine
from .workloads import MachineInfo

ASSUMED = MachineInfo(source="nvml", platform="unknown", num_devices=8, cuda=True, bf16=True,
                      bitsandbytes=True, can_set_power_limit=True)
"""The GPU machine a dry run assumes when it has none: one node of 8 GPUs with bf16, CUDA and
bitsandbytes, where power caps may be set (root). Power caps are checked again on the real
machine."""


def planning_machine(sampler: dict[str, Any], *, platform: str | None = None) -> MachineInfo:
    """The machine to plan for: this one, or an assumed GPU machine when NVML is not usable here.

    Args:
        sampler: the sweep's ``sampler`` block.
        platform: the platform slug to plan for when assuming (default ``unknown``).

    Raises:
        InputError: the sampler block is invalid (not merely "no GPU here").
    """
    try:
        return detect_machine(sampler)
    except InputError as exc:
        if sampler.get("source") != "nvml":
            raise
        return dataclasses.replace(ASSUMED, platform=platform or "unknown",
                                   extra={"assumed": True, "reason": exc.reason})


@dataclass(frozen=True)
class Estimate:
    """How long a set of runs will take, at least.

    Attributes:
        seconds: Σ over runs of idle_before_s + target_duration_s + idle_after_s (runs that
            have a target duration).
        unknown_runs: runs without a target duration (a fixed number of requests or steps),
            whose time depends on the machine's speed.
    """

    seconds: float
    unknown_runs: int

    def text(self) -> str:
        """``"≥ 1.2 h"``-style wording, naming the runs of unknown length."""
        s = self.seconds
        span = f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"
        extra = f" + {self.unknown_runs} run(s) of machine-dependent length" if self.unknown_runs else ""
        return f"at least {span} of measurement{extra} (model loading and warm-up come on top)"


def estimate(sweep: Sweep, runs: Sequence[PlannedRun]) -> Estimate:
    """Estimate the measured time of ``runs`` (see :class:`Estimate`)."""
    total = 0.0
    unknown = 0
    for run in runs:
        target = run.settings.get("target_duration_s")
        if target:
            total += sweep.idle_before_s + float(target) + sweep.idle_after_s
        else:
            unknown += 1
            total += sweep.idle_before_s + sweep.idle_after_s
    return Estimate(total, unknown)
