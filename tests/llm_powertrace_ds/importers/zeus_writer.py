"""Run Zeus' own monitors with the NVML test double standing in for the GPUs.

Started as a separate process by the Zeus importer tests::

    python zeus_writer.py MODE SECONDS OUT [WRITER_PATH]

``MODE`` is ``legacy`` (Zeus 0.11's power polling process writing its power CSV, at
``WRITER_PATH``, a ``pip install --target`` folder; then Zeus 0.11's own ``get_energy`` on what it
wrote), ``timeline`` (Zeus' ``PowerMonitor``, dumped with ``get_all_power_timelines()``),
``lines`` (``python -m zeus.monitor power``, its printed output is the test's file) or
``windows`` (``ZeusMonitor(log_file=...)`` with two measurement windows, beside a
``PowerMonitor`` timeline of the ``device_instant`` domain; ``SECONDS`` is not used: :data:`WINDOWS` fixes them). Zeus'
``PowerMonitor`` polls in spawned processes, which import this file again: the double is
installed at import, before Zeus, in every one of them. In the other modes each power read
advances the double's tick (power rises ``step_mw`` per read). In ``windows`` mode the power is
instead a function of wall-clock time that every process computes alike (:class:`ClockedGpu`),
and the energy counter is its exact integral, so Zeus' window energies (read from the counter
in this process) and the timeline (polled by the spawned processes) describe the same power.
What the process prints last is a JSON line of Zeus' own figures.
"""

from __future__ import annotations

import json
import os
import sys
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


CLOCKED = sys.argv[1:2] == ["windows"]
"""``windows`` mode: the double's power follows the wall clock (:class:`ClockedGpu`)."""
ORIGIN_ENV = "ZEUS_WRITER_T0"
"""Unix time (s) from which the clocked energy counter counts, set before Zeus spawns."""
SCHEDULE_ENV = "ZEUS_WRITER_SCHEDULE"
"""The file in which the writer announces G, the unix time (s) of the first power change."""
ANNOUNCE_S = 1.0
"""G is announced this long before it comes, so that no process reads power at or after G
without knowing it: until then every process reads the flat base power, which is P(t < G)."""
RAMP_W_PER_S = 1.0
STEP_W = 2.0
SEGMENTS = (  # (from s after G, W above the GPU's base there, slope W/s): P(t), piecewise
    (0.0, 0.0, RAMP_W_PER_S),                         # a slow ramp out of the flat start
    (1.5, 1.5 * RAMP_W_PER_S, 0.0),                   # a 2.5 s plateau: one change-only reading
    (4.0, 1.5 * RAMP_W_PER_S + STEP_W, 0.0),          # a step up that ends it (in prefill)
    (6.5, 1.5 * RAMP_W_PER_S + 2 * STEP_W, RAMP_W_PER_S),  # a step and a ramp (in decode)
    (7.5, 2.5 * RAMP_W_PER_S + 2 * STEP_W, 0.0),      # a plateau across decode's end
    (9.7, 2.5 * RAMP_W_PER_S + 3 * STEP_W, 0.0),      # a step after it: the last reading
)
WINDOWS = (("prefill", -0.5, 4.5), ("decode", 4.5, 9.5))
"""(name, begin, end) of Zeus' measurement windows, in s after G. prefill begins on the flat
start, whose only reading is the timeline's first (taken before G is announced); decode ends
on a plateau whose next reading, after the window, is the timeline's last. Held, the timeline
integrates each window to within Σ steps STEP_W·δ + RAMP_W_PER_S·δ/2·(ramp s) + P·1 ms (the
importer's ms rounding of the window ends), δ the poll period (0.1 s): the previous-hold error
of a ramp is slope·δ/2 of its mean power, here 0.05 W of 200 W; per window ≤ 0.2 + 0.08 +
0.25 J of ≥ 1,000 J (200 W + 50 W·g for 5 s), ≤ 0.06 % (a poller late by d s after a step adds
STEP_W·d). Interpolated linearly instead, the 2.5 s plateau that a step ends in each window
reads STEP_W·2.5 s/2 = 2.5 J too much: 0.2 % of GPU 1's 1,250 J, 0.25 % of GPU 0's."""


class ClockedGpu(fake_nvml.FakeGpu):
    """A GPU whose power follows the wall clock t, the same in every process.

    P(t) = base before G, base + the :data:`SEGMENTS` offset at t − G from G on; its energy
    counter (mJ) is ∫ P dt from ``$ZEUS_WRITER_T0``, exact at the time it is read.
    """

    changes_at: float | None = None

    @staticmethod
    def announced() -> float | None:
        if ClockedGpu.changes_at is None:
            try:
                ClockedGpu.changes_at = float(Path(os.environ[SCHEDULE_ENV]).read_text())
            except FileNotFoundError:
                return None
        return ClockedGpu.changes_at

    def _offset(self, since_g: float) -> tuple[float, float]:
        """(W above base at ``since_g`` s after G, J above base·t from G to there)."""
        joules, watts = 0.0, 0.0
        for k, (start, level, slope) in enumerate(SEGMENTS):
            if since_g < start:
                break
            stop = min(since_g, SEGMENTS[k + 1][0]) if k + 1 < len(SEGMENTS) else since_g
            joules += level * (stop - start) + slope * (stop - start) ** 2 / 2
            watts = level + slope * (since_g - start)
        return watts, joules

    def power_w_at(self, t: float) -> float:
        g = self.announced()
        base = self.base_power_mw / 1000.0
        return base if g is None or t < g else base + self._offset(t - g)[0]

    def power_mw(self) -> int:
        return round(self.power_w_at(time.time()) * 1000.0)

    def counter_mj(self) -> int:
        t, g = time.time(), self.announced()
        t0 = float(os.environ[ORIGIN_ENV])
        joules = self.base_power_mw / 1000.0 * (t - t0)
        if g is not None and t >= g:
            joules += self._offset(t - g)[1]
        return self.energy0_mj + round(joules * 1000.0)


class ClockedNvml(fake_nvml.FakeNvml):
    """The double with :class:`ClockedGpu` s: the energy field and call read their counter."""

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):  # noqa: N802, N803 - the binding's
        values = super().nvmlDeviceGetFieldValues(handle, fieldIds)
        for v in values:
            if v.fieldId == self.NVML_FI_DEV_ENERGY and v.nvmlReturn == self.NVML_SUCCESS:
                v.value.ullVal = self.gpus[handle.index].counter_mj()
        return values

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # noqa: N802 - the binding's name
        return self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption").counter_mj()


def install_double() -> fake_nvml.FakeNvml:
    """``pynvml`` -> the double; no AMD GPU.

    GPU g starts at 70 W + 10 W·g, flat on STALE_TICKS; in ``windows`` mode it is a
    :class:`ClockedGpu` of base 200 W + 50 W·g.
    """
    if CLOCKED:
        os.environ.setdefault(ORIGIN_ENV, repr(time.time()))  # before Zeus spawns its pollers
        gpus: list[fake_nvml.FakeGpu] = [
            ClockedGpu(uuid=f"GPU-00000000-0000-0000-0000-{g:012d}",
                       base_power_mw=200_000 + 50_000 * g) for g in range(GPUS)]
        fake: fake_nvml.FakeNvml = ClockedNvml(gpus)
    else:
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


def _wait_for(power, ready, what: str, limit_s: float = 30.0) -> dict:
    """Zeus' timelines once ``ready(timelines)`` holds (polled every 50 ms)."""
    deadline = time.time() + limit_s
    while True:
        timelines = power.get_all_power_timelines()
        if ready(timelines):
            return timelines
        if time.time() > deadline:
            raise RuntimeError(f"Zeus' pollers kept no {what} within {limit_s} s")
        time.sleep(0.05)


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def windows(out: str) -> dict:
    from zeus.monitor import ZeusMonitor
    from zeus.monitor.power import PowerMonitor

    schedule = Path(out).with_name("schedule.txt")
    schedule.unlink(missing_ok=True)  # a try before this one may have announced its own G
    os.environ[SCHEDULE_ENV] = str(schedule)  # before Zeus spawns its pollers
    # one domain: the timeline's instants are the instant readings' own (with device_average
    # too, its readings would join them, each holding the instant reading, which hides much of
    # what a linear interpolation would add)
    power = PowerMonitor(update_period=0.1, power_domains=["device_instant"])
    monitor = ZeusMonitor(log_file=out)
    # every GPU's first reading is taken on the flat start, before the windows
    _wait_for(power, lambda tl: all(len(tl[d].get(g, [])) for d in tl for g in range(GPUS)),
              "first reading")
    g_at = time.time() + ANNOUNCE_S
    schedule.with_suffix(".tmp").write_text(repr(g_at))
    schedule.with_suffix(".tmp").replace(schedule)
    if time.time() > g_at + WINDOWS[0][1]:
        raise RuntimeError("G was announced too late for the first window to begin before it")
    found = {}
    for name, begin, end in WINDOWS:
        _sleep_until(g_at + begin)
        # no CUDA work to wait for: nothing runs on the double
        monitor.begin_window(name, sync_execution=False)
        _sleep_until(g_at + end)
        m = monitor.end_window(name, sync_execution=False)
        found[name] = {"time": m.time, "gpu_energy": m.gpu_energy}
    last = g_at + SEGMENTS[-1][0]  # the step after the last window: every GPU has read it
    timelines = _wait_for(power, lambda tl: all(
        tl["device_instant"].get(g) and tl["device_instant"][g][-1][0] >= last
        for g in range(GPUS)), "reading after the last window")
    Path(out).with_name("power_timeline.json").write_text(json.dumps(timelines))
    power.stop()
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
        result = windows(out)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
