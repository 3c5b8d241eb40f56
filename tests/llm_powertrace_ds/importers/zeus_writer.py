"""Run Zeus' own monitors with the NVML test double standing in for the GPUs.

Started as a separate process by the Zeus importer tests::

    python zeus_writer.py MODE SECONDS OUT [WRITER_PATH]

``MODE`` is ``legacy`` (Zeus 0.11's power polling process writing its power CSV, at
``WRITER_PATH``, a ``pip install --target`` folder; then Zeus 0.11's own ``get_energy`` on what it
wrote), ``timeline`` (Zeus' ``PowerMonitor``, dumped with ``get_all_power_timelines()``),
``lines`` (``python -m zeus.monitor power``, its printed output is the test's file) or
``windows`` (``ZeusMonitor(log_file=...)`` with two measurement windows, beside a
``PowerMonitor`` timeline). Zeus' ``PowerMonitor`` polls in spawned processes, which import
this file again: the double is installed at import, before Zeus, in every one of them. Each
power read advances the double's tick (power rises ``step_mw`` per read). What the process
prints last is a JSON line of Zeus' own figures.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "generation" / "sampler"))

import fake_nvml  # noqa: E402  (the double imports the real binding's constants first)

GPUS = int(os.environ.get("ZEUS_WRITER_GPUS", "2"))
STALE_TICKS = frozenset(range(4, 12))
"""Reads on which the double's power repeats the previous one (an idle stretch): Zeus'
PowerMonitor keeps no reading there, so its timeline is change-only."""
UNSUPPORTED_FIELD = 9_999
"""A field id the double answers NOT_SUPPORTED (the memory power scope, as on an A40)."""


def install_double() -> fake_nvml.FakeNvml:
    """``pynvml`` -> the double (GPU g starts at 70 W + 10 W·g, flat on STALE_TICKS); no AMD GPU."""
    gpus = [fake_nvml.FakeGpu(uuid=f"GPU-00000000-0000-0000-0000-{g:012d}",
                              base_power_mw=70_000 + 10_000 * g, step_mw=250,
                              stale_ticks=STALE_TICKS)
            for g in range(GPUS)]
    fake = fake_nvml.FakeNvml(gpus)

    def no_function_pointer(name):  # Zeus checks it exists (the official binding has it)
        raise fake.NVMLError(fake.NVML_ERROR_FUNCTION_NOT_FOUND)

    fake._nvmlGetFunctionPointer = no_function_pointer
    # what Zeus asks beyond the sampler's calls, answered as an H100 (not a Grace Hopper) does
    field_values = fake.nvmlDeviceGetFieldValues

    def scoped_field_values(handle, field_ids):
        plain = []
        for fid in field_ids:
            if isinstance(fid, tuple):  # (field, scope): the GPU scope reads the device fields
                fid = fid[0] if fid[1] == fake.NVML_POWER_SCOPE_GPU else UNSUPPORTED_FIELD
            plain.append(fid)
        return field_values(handle, plain)

    def not_supported(*args, **kwargs):
        raise fake.NVMLError(fake.NVML_ERROR_NOT_SUPPORTED)

    fake.nvmlDeviceGetFieldValues = scoped_field_values
    fake.nvmlDeviceGetC2cModeInfoV = not_supported
    fake.nvmlDeviceGetArchitecture = lambda handle: fake.NVML_DEVICE_ARCH_HOPPER
    fake.nvmlDeviceGetTemperatureV = lambda handle, sensor: fake.nvmlDeviceGetTemperature(
        handle, sensor)
    sys.modules["pynvml"] = fake  # type: ignore[assignment]
    # the amdsmi package fails at import without ROCm's library (a KeyError, not ImportError)
    sys.modules["amdsmi"] = None  # type: ignore[assignment]
    return fake


FAKE = install_double()
if len(sys.argv) > 4 and sys.argv[1] == "legacy":
    sys.path.insert(0, sys.argv[4])


def legacy(seconds: float, out: str) -> dict:
    import signal

    import pandas as pd
    from zeus.monitor.power import PowerMonitor, _polling_process

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    _polling_process(list(range(GPUS)), out, 0.1)  # returns on KeyboardInterrupt
    monitor = PowerMonitor.__new__(PowerMonitor)  # Zeus 0.11's reader of that CSV, no process
    monitor.gpu_indices = list(range(GPUS))
    monitor.power_f = open(out)  # noqa: SIM115 - as Zeus holds it
    monitor.power_df_columns = ["time"] + [f"power{i}" for i in monitor.gpu_indices]
    monitor.power_df = pd.DataFrame(columns=monitor.power_df_columns)
    monitor.process = None
    energy = monitor.get_energy(0.0, 1e11)
    return {"zeus_version": sys.modules["zeus"].__file__, "energy_j": energy}


def timeline(seconds: float, out: str) -> dict:
    from zeus.monitor.power import PowerMonitor

    monitor = PowerMonitor(update_period=0.1)
    start = time.time()
    time.sleep(seconds)
    end = time.time()
    timelines = monitor.get_all_power_timelines()
    energy = monitor.get_energy(start, end)
    monitor.stop()
    Path(out).write_text(json.dumps(timelines))
    return {"energy_j": energy}


def lines(seconds: float) -> dict:
    """``python -m zeus.monitor power``, stopped as by Ctrl-C after ``10 * seconds`` lines."""
    import runpy

    import rich

    printed = rich.print
    count = [0]

    def print_then_stop(*args, **kwargs):  # Ctrl-C right after the last wanted line
        printed(*args, **kwargs)
        count[0] += 1
        if count[0] == int(10 * seconds):
            raise KeyboardInterrupt

    rich.print = print_then_stop
    sys.argv = ["python -m zeus.monitor", "power", "--update-period", "0.1"]
    runpy.run_module("zeus.monitor", run_name="__main__")
    return {}


def windows(seconds: float, out: str) -> dict:
    from zeus.monitor import ZeusMonitor
    from zeus.monitor.power import PowerMonitor

    running = threading.Event()

    def gpu_clock() -> None:  # the double's counter advances on its tick, as a GPU's does
        while not running.is_set():
            for h in range(GPUS):
                FAKE.nvmlDeviceGetFieldValues(FAKE.nvmlDeviceGetHandleByIndex(h),
                                              [FAKE.NVML_FI_DEV_ENERGY])
            time.sleep(0.1)

    clock = threading.Thread(target=gpu_clock, daemon=True)
    clock.start()
    power = PowerMonitor(update_period=0.1)
    monitor = ZeusMonitor(log_file=out)
    found = {}
    for name in ("prefill", "decode"):
        # no CUDA work to wait for: nothing runs on the double
        monitor.begin_window(name, sync_execution=False)
        time.sleep(seconds / 2)
        m = monitor.end_window(name, sync_execution=False)
        found[name] = {"time": m.time, "gpu_energy": m.gpu_energy}
    Path(out).with_name("power_timeline.json").write_text(
        json.dumps(power.get_all_power_timelines()))
    power.stop()
    running.set()
    return {"windows": found}


def main() -> None:
    mode, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    if mode == "legacy":
        result = legacy(seconds, out)
    elif mode == "timeline":
        result = timeline(seconds, out)
    elif mode == "lines":
        result = lines(seconds)
    else:
        result = windows(seconds, out)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
