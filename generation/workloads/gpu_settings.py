"""Locked clocks and power caps of a run: the one path from a sweep's GPU axes to the GPUs.

A workload declares the axes it uses among its settings (``gpu_clock_mhz``,
``power_limit_setting_w``); :meth:`generation.workloads.WorkloadSpec.device_settings` turns a
resolved run into a :class:`GpuSettings`, which the runner enters around the sampler. Setting and
restoring go through ``generation.sampler.device_settings`` (root only; refused where
``$LLM_POWERTRACE_NO_DEVICE_SETTINGS`` is set).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

log = logging.getLogger(__name__)

class GpuSettings:
    """Lock the SM clock and/or cap the power of GPUs for one run; restore them on exit.

    Enter it before the sampler starts (so the sampler's ``power_limit_w`` is the enforced cap
    and ``sm_clock_mhz`` shows the locked clock) and leave it after the sampler stops. The
    original power limit is set back and locked clocks are reset on exit, also when the run
    failed, and also when entering failed half-way. Nothing is touched when neither setting is
    requested. A thin wrapper of ``generation.sampler.device_settings`` (range checks, the
    ``$LLM_POWERTRACE_NO_DEVICE_SETTINGS`` guard, restore; NVML errors arrive translated:
    ``NoPermission``, ``NotSupported``, ...).

    Args:
        gpu_indices: NVML indices of the run's GPUs.
        clock_mhz: the SM clock to lock (``nvmlDeviceSetGpuLockedClocks(min = max = mhz)``).
        power_limit_w: the power cap (``nvmlDeviceSetPowerManagementLimit``).

    Attributes:
        observed: per GPU index, ``power_limit_w`` (enforced after setting) and
            ``sm_clock_mhz`` (read right after locking).
        applied: the ``AppliedSettings`` records (requested, original and observed values).

    Raises:
        InputError: a power cap or clock outside the GPU's allowed range (``SettingOutOfRange``).
        SourceError: NVML refused (``NoPermission`` without root or where settings are guarded,
            ``NotSupported``).
    """

    def __init__(self, gpu_indices: list[int] | tuple[int, ...], *, clock_mhz: int | None = None,
                 power_limit_w: float | None = None) -> None:
        self.gpu_indices = list(gpu_indices)
        self.clock_mhz = clock_mhz
        self.power_limit_w = power_limit_w
        self.observed: dict[int, dict[str, float | None]] = {}
        self.applied: list[Any] = []
        self._stack: contextlib.ExitStack | None = None

    @property
    def active(self) -> bool:
        return self.clock_mhz is not None or self.power_limit_w is not None

    def __enter__(self) -> GpuSettings:
        if not self.active:
            return self
        from generation.sampler import device_settings

        stack = contextlib.ExitStack()
        self.applied = stack.enter_context(device_settings(
            self.gpu_indices, power_limit_w=self.power_limit_w, sm_clock_mhz=self.clock_mhz))
        self._stack = stack
        self.observed = {a.gpu_index: a.observed() for a in self.applied}
        return self

    def __exit__(self, *exc_info: Any) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.__exit__(*exc_info)
