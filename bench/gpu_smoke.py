"""One short command that proves, on a GPU machine, that every GPU-only path measures what its row says.

Usage::

    python bench/gpu_smoke.py --plan [--with-optional] [--format json]  # steps, budgets, carry
    python bench/gpu_smoke.py --fetch-carry [--with-optional]   # the pinned wheels, checked
    python bench/gpu_smoke.py --carry-check [--carry DIR]       # the carry is closed (CPU)
    python bench/gpu_smoke.py [--carry DIR] [--out DIR] [--only STEPS]   # on the GPU machine
    python bench/gpu_smoke.py --cpu-selftest [--out DIR]        # the whole run, rehearsed on CPU

Sized for a 15-minute lease of one H100/H200 whose machine start takes 2-4 minutes: installing
the carry is budgeted at :data:`INSTALL_BUDGET_S` and the steps at :data:`TOTAL_BUDGET_S` (the
sum of the steps' budgets, each its step's hard time limit), so the check, its report and one
rerun of a failed step fit. Steps that need bitsandbytes or a compiler (optimum-quanto's JIT
CUDA kernels) are optional: their failure is reported as ``optional_failed`` and ``passed``
is the required steps' verdict.

**The carry.** The GPU image has CUDA torch, transformers 5.17, huggingface_hub, accelerate,
peft, pyarrow, pandas and nvidia-ml-py (``bench/device_image.txt``) but not datasets, TRL, dill or
multiprocess, and its transformers is older than the inference workload needs (5.18).
``bench/gpu_carry.txt`` pins the wheels that travel (bitsandbytes and optimum-quanto only with
``--with-optional``); ``--carry-check`` proves on CPU that they and the
image meet every requirement (``bench/gpu_carry.py``); ``--carry DIR`` installs them with
``pip install --no-index --find-links DIR --no-deps --target OUT/site`` (timed) before the steps.

**The checks have known answers on Hopper** (instant field 186 updated about every 100 ms; field
185 and ``nvmlDeviceGetPowerUsage`` a 1 s boxcar average; an energy counter in mJ updated about
every 100 ms; utilisation over a 1 s window). The load process logs its own switches (monotonic
time), and the checks are read against them:

- after a **step** of the load the instant field crosses halfway within ``INSTANT_DELAY_MAX_S``
  and the 1 s average crosses halfway about 0.5 s later (a boxcar of width ``W`` delays a step's
  50 % crossing by ``W/2``): ``0.3 s <= delay <= 0.8 s``;
- the **energy counter** over >= 20 s agrees with the integral of the instant field,
  ``|ΔE/∫P dt - 1| <= tol``, ``tol = ((2 Δu + Δpoll) (P(t0) + P(t1)) + 2 r) / ∫P dt + 1 %``
  with ``Δu`` the counter's measured update period, ``Δpoll`` the polling period, ``P(t0)``,
  ``P(t1)`` the power at the two ends, ``r`` = 1 mJ its resolution and 1 % for the instant
  field's own sampling; a tolerance over ``COUNTER_TOL_MAX`` cannot tell a 5 % drift and fails;
- **utilisation** in the interior of >= 2 s on-phases (from 1.2 s after the switch, when the
  1 s window lies inside the phase) is high and in off-phases low;
- **latency** is timed per NVML call a tick makes.

Where NVML answers field or sample calls NOT_SUPPORTED (gVisor), the sampler falls back to
``nvmlDeviceGetPowerUsage`` (``power_field=power_usage``, flagged ``power_is_1s_average``) and
the checks that need the missing call report ``degraded`` with the reason, not a failure.

**The rehearsal.** ``--cpu-selftest`` builds (once) a virtual environment holding the image's
packages that the carry and the project rely on (CPU torch; the image's versions where
installable, transformers 5.17 included) and none of the carried packages the image lacks,
fetches the pins for this interpreter, and runs this very script under it with ``--carry`` and
``--nvml-double hopper``: the carry is installed from the folder only, every step runs, the NVML
steps against a time-driven Hopper-like NVML double (``bench/hopper_nvml.py``, put in place of
the binding by ``bench/nvml_double/``), the runner steps with ``cpu_proxy``, and each step and
the install are timed. So the first run on a GPU is the second run of this script.

Each step runs in its own process (a CUDA crash or a hang fails that step, not the command) and
writes its checks one by one; after every step the whole report is rewritten atomically
(``DIR/gpu_smoke.json``, ``"complete": false`` until the end). Every check is ``pass``,
``fail``, ``skip``, ``degraded`` or (an optional step's failure) ``optional_failed``; the exit
status is 0 only when ``passed``. Nothing is downloaded on the GPU machine: random-init zoo
models, synthetic data, ``HF_HUB_OFFLINE=1``. No GPU setting changes unless ``--allow-settings``
(a machine you own; never on a lent one).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
for _p in (str(REPO), str(BENCH)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import gpu_carry  # noqa: E402 - bench/, after the path set-up above

NO_SETTINGS_ENV = "LLM_POWERTRACE_NO_DEVICE_SETTINGS"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}
DOUBLE_ENV = "LLM_POWERTRACE_SMOKE_DOUBLE"
EDGES_ENV = "LLM_POWERTRACE_SMOKE_EDGES"
DOUBLE_DIR = BENCH / "nvml_double"
BEHAVIOURS = ("hopper", "frozen_instant", "counter_drift", "util_zero", "unsupported")
"""``--nvml-double``: the Hopper-like double, well-behaved or misbehaving (bench/hopper_nvml.py)."""


class UsageError(Exception):
    """A bad command line: one line naming the option and the value."""


@dataclass(frozen=True)
class Step:
    """One step of the plan.

    Attributes:
        name: the step (``--only`` takes these).
        budget_s: its hard time limit on the GPU, s (model set-up included).
        proves: what a pass shows, in one line.
        optional: needs something a cold machine may lack (a compiler, bitsandbytes): its
            failure is ``optional_failed``, never failing the check.
        cuda_only: needs CUDA kernels: skipped, with the reason, in a CPU rehearsal (the NVML
            steps are not: they run against the NVML double there).
    """

    name: str
    budget_s: float
    proves: str
    optional: bool = False
    cuda_only: bool = False


STEPS: tuple[Step, ...] = (
    Step("env", 10, "versions; offline; the CUDA device the workload uses is, by UUID, the GPU "
         "the sampler reads"),
    Step("load", 15, "the benchmark load keeps its operands' magnitude (no decay to zeros)"),
    Step("nvml", 10, "the probe finds field 186 (instant power) and the driver's power buffer "
         "(or degrades, labelled); each call a tick makes, timed; a tick's calls for 8 GPUs fit "
         "half a 100 ms period"),
    Step("fields", 40, "a load stepped on and off (3 s / 2 s, 22 s): 186 crosses halfway within "
         "0.35 s of each step, the 1 s average (185) 0.3-0.8 s later; the energy counter over "
         ">= 20 s equals the integral of 186 within its resolution and update period"),
    Step("sampler", 30, "the sampler at 100 ms under a 2.5 s on / 2.5 s off load: no missed "
         "ticks, lateness, no stale flood, the driver's finer series, utilisation high inside "
         "on-phases and low inside off-phases"),
    Step("settings", 10, "no clock or power limit changes (or, with --allow-settings, one is "
         "set and restored); limits and clocks are what they were"),
    Step("finetune", 70, "a LoRA fine-tune through the runner under torchrun: published, dtype "
         "columns, utilisation over the work window above idle, quality flags and missed "
         "ticks"),
    Step("inference", 70, "continuous batching (recorded configuration) and static batching "
         "with Poisson arrivals through the runner: published, flags, missed ticks"),
    Step("idle", 45, "three runs in one process have the same idle baseline (10 %)"),
    Step("qlora", 20, "a QLoRA fine-tune: nf4 weights, bf16 compute (needs bitsandbytes with "
         "CUDA)", optional=True, cuda_only=True),
    Step("kv_int4", 10, "static batching with an int4 quantised KV cache (needs optimum-quanto "
         "and its compiled CUDA kernels: nvcc + ninja, built beforehand)", optional=True,
         cuda_only=True),
)
STEP_NAMES = tuple(s.name for s in STEPS)
TOTAL_BUDGET_S = sum(s.budget_s for s in STEPS)
"""The steps' budget on one H100/H200, s: the sum of the steps' limits (<= 330)."""
INSTALL_BUDGET_S = 60.0
"""Installing the carry on the GPU machine, s."""
CPU_SLOWDOWN = 4.0
"""CPU rehearsal: the runner steps' limits are this many times longer on CPU."""

LOAD_N = 4096
LOAD_STEP = "a = a @ b; a = a * a.float().pow(2).mean().rsqrt().to(a.dtype)"
"""One step of the GPU load: a matmul, then the operand rescaled to unit RMS (a reduction and a
scale, negligible next to the matmul), so its magnitude never drifts."""

FIELDS_SCHEDULE: tuple[tuple[str, float], ...] = (("off", 2.0),) + (("on", 3.0), ("off", 2.0)) * 4
"""The fields step's load: 2 s idle, then four 3 s on / 2 s off cycles (22 s)."""
SAMPLER_SCHEDULE: tuple[tuple[str, float], ...] = (
    ("off", 1.5), ("on", 2.5), ("off", 2.5), ("on", 2.5), ("off", 1.5))
"""The sampler step's load: on-phases of 2.5 s, longer than the 1 s utilisation window."""
POLL_S = 0.01
INSTANT_DELAY_MAX_S = 0.35
AVERAGE_DELAY_S = (0.3, 0.8)
MIN_SWING_W = 50.0
COUNTER_MIN_S = 20.0
COUNTER_TOL_MAX = 0.04
COUNTER_SAMPLING_TOL = 0.01
COUNTER_RESOLUTION_J = 0.001
UTIL_SETTLE_S = 1.2
UTIL_ON_MIN, UTIL_OFF_MAX = 70.0, 15.0
FIELD_CALL_P50_MS = 1.25
CALL_P99_MS = 5.0
TICK_8_GPUS_MS = 50.0


def check(ok: bool | None, why: str = "", **values: Any) -> dict[str, Any]:
    """One check's record: ``pass``/``fail`` (``ok``) or ``skip`` (``ok`` is ``None``)."""
    status = "skip" if ok is None else ("pass" if ok else "fail")
    out: dict[str, Any] = {"status": status}
    if why:
        out["why"] = why
    out.update({k: _round(v) for k, v in values.items()})
    return out


def degraded(why: str, **values: Any) -> dict[str, Any]:
    """A check that could not be made as designed because NVML refuses a call (``why``)."""
    return {"status": "degraded", "why": why, **{k: _round(v) for k, v in values.items()}}


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 4) if math.isfinite(x) else None
    if isinstance(x, (list, tuple)):
        return [_round(v) for v in x]
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    return x


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


class Recorder:
    """A step's checks, written to ``step-<name>.json`` after each one (a timeout keeps them)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.checks: dict[str, Any] = {}

    def __setitem__(self, name: str, record: dict[str, Any]) -> None:
        self.checks[name] = record
        _write_json_atomic(self.path, self.checks)

    def update(self, records: dict[str, Any]) -> None:
        self.checks.update(records)
        _write_json_atomic(self.path, self.checks)


def parse_only(value: str | None) -> list[str] | None:
    """``--only``: the steps named, in plan order; an unknown or empty name is a usage error."""
    if value is None:
        return None
    names = [n.strip() for n in value.split(",")]
    unknown = [n for n in names if n not in STEP_NAMES]
    if unknown or not names:
        raise UsageError(f"--only: unknown step {unknown[0]!r} in {value!r}; the steps are "
                         f"{', '.join(STEP_NAMES)}")
    return [n for n in STEP_NAMES if n in names]


# ---------------------------------------------------------------------------------------------
# The load and what its switches show
# ---------------------------------------------------------------------------------------------

def load_rms_after(steps: int, *, n: int = 256, device: str = "cpu",
                   step: str = LOAD_STEP) -> tuple[float, float]:
    """RMS of the operand before and after ``steps`` load steps (the self-test's measure)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device)
    b = torch.randn(n, n, generator=gen).to(device)
    before = float(a.pow(2).mean().sqrt())
    code = compile(step, "<load>", "exec")
    scope: dict[str, Any] = {"torch": torch, "a": a, "b": b}
    for _ in range(steps):
        exec(code, scope)  # noqa: S102 - the load's own one-line step, also run on the GPU
    return before, float(scope["a"].pow(2).mean().sqrt())


def _edges_path() -> Path:
    path = os.environ.get(EDGES_ENV)
    if not path:
        raise RuntimeError(f"{EDGES_ENV} is not set (the orchestrator sets it per step)")
    return Path(path)


def _load_proc(schedule: Sequence[tuple[str, float]], cuda: bool) -> subprocess.Popen[bytes]:
    """A separate process that runs ``schedule`` (never the polling process).

    It writes each switch, ``<CLOCK_MONOTONIC s> on|off``, to the edge log before it acts on
    it; on a GPU an on-phase runs :data:`LOAD_STEP` on cuda:0, in a rehearsal it only waits
    (the NVML double reads the switches).
    """
    edges = _edges_path()
    edges.unlink(missing_ok=True)
    setup = ("import torch\n"
             f"a = torch.randn({LOAD_N}, {LOAD_N}, device='cuda', dtype=torch.bfloat16)\n"
             "b = torch.randn_like(a)\ntorch.cuda.synchronize()\n") if cuda else ""
    work = (f"        for _ in range(4): {LOAD_STEP}\n        torch.cuda.synchronize()\n"
            if cuda else "        time.sleep(min(0.01, max(0.0, end - time.monotonic())))\n")
    code = (
        "import sys, time\n" + setup +
        f"schedule = {list(schedule)!r}\n"
        "log = open(sys.argv[1], 'a', encoding='utf-8')\n"
        "print('ready', flush=True)\n"
        "for state, seconds in schedule:\n"
        "    now = time.monotonic()\n"
        "    log.write(f'{now:.6f} {state}\\n'); log.flush()\n"
        "    end = now + seconds\n"
        "    if state == 'off':\n"
        "        time.sleep(seconds)\n"
        "        continue\n"
        "    while time.monotonic() < end:\n" + work +
        "log.write(f'{time.monotonic():.6f} off\\n'); log.flush()\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(edges)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()  # "ready": CUDA context and buffers exist before timing starts
    return proc


def read_edges(path: Path) -> list[tuple[float, bool]]:
    """The load's switches ``(t_s, on)`` from its edge log."""
    from hopper_nvml import read_edges as _read

    return _read(path)


def _switches(edges: Sequence[tuple[float, bool]]) -> list[tuple[float, bool, float]]:
    """Switches that change the state: ``(t, now_on, seconds until the next switch)``."""
    out = []
    for i in range(1, len(edges) - 1):
        (_, before), (t, on), (t_next, _) = edges[i - 1], edges[i], edges[i + 1]
        if on != before:
            out.append((t, on, t_next - t))
    return out


def _crossing(t: Any, x: Any, t_switch: float, up: bool, mid: float) -> float | None:
    """Seconds after ``t_switch`` at which ``x`` first passes ``mid`` in the step's direction."""
    import numpy as np

    sel = (t >= t_switch - 0.05) & np.isfinite(x)
    past = (x[sel] >= mid) if up else (x[sel] <= mid)
    idx = np.flatnonzero(past)
    return float(t[sel][idx[0]] - t_switch) if len(idx) else None


def step_delays(t: Any, x: Any, edges: Sequence[tuple[float, bool]]) -> list[dict[str, Any]]:
    """Each switch of the load: the level before and after, and when ``x`` crossed halfway.

    The level before is the median of ``x`` over the last second before the switch; after, the
    median from 1.5 s after it to the next switch (both the instant field and a 1 s average have
    settled there).
    """
    import numpy as np

    t, x = np.asarray(t, float), np.asarray(x, float)
    out = []
    for ts, on, length in _switches(edges):
        before = x[(t >= ts - 1.0) & (t < ts - 0.05) & np.isfinite(x)]
        after = x[(t >= ts + 1.5) & (t < ts + length - 0.05) & np.isfinite(x)]
        if not len(before) or not len(after):
            continue
        lo, hi = float(np.median(before)), float(np.median(after))
        out.append({"t": ts, "on": on, "swing": hi - lo,
                    "delay_s": _crossing(t, x, ts, hi > lo, (lo + hi) / 2)
                    if abs(hi - lo) > 0 else None})
    return out


def analyse_fields(t: Any, inst_mw: Any, avg_mw: Any, usage_mw: Any, energy_mj: Any,
                   edges: Sequence[tuple[float, bool]]) -> dict[str, dict[str, Any]]:
    """The fields step's checks from its polled readings and the load's switches (mW, mJ, s).

    Returns ``instant_follows_step``, ``average_delay_from_step`` and ``counter_vs_integral``
    (see the module docstring for what each asserts).
    """
    import numpy as np

    t = np.asarray(t, float)
    inst, avg, usage, energy = (np.asarray(v, float) for v in (inst_mw, avg_mw, usage_mw,
                                                               energy_mj))
    out: dict[str, dict[str, Any]] = {}
    si, sa, su = step_delays(t, inst, edges), step_delays(t, avg, edges), \
        step_delays(t, usage, edges)
    swings = [abs(s["swing"]) / 1e3 for s in si]
    d_inst = [s["delay_s"] for s in si]
    swing_w = float(np.median(swings)) if swings else 0.0
    known = [d for d in d_inst if d is not None]
    ok = (bool(si) and len(known) == len(si) and swing_w >= MIN_SWING_W
          and float(np.median(known)) <= INSTANT_DELAY_MAX_S)
    out["instant_follows_step"] = check(
        ok, "" if ok else f"field 186 does not follow the load's steps (median swing "
        f"{swing_w:.0f} W, needs >= {MIN_SWING_W:.0f} W; halfway within "
        f"{INSTANT_DELAY_MAX_S} s)", switches=len(si), swing_w=swing_w, delays_s=d_inst)
    pairs = [(a["delay_s"], i["delay_s"]) for a, i in zip(sa, si, strict=False)
             if a["delay_s"] is not None and i["delay_s"] is not None and a["t"] == i["t"]]
    delay = float(np.median([a - i for a, i in pairs])) if pairs else None
    usage_delays = [u["delay_s"] for u in su]
    ok = delay is not None and AVERAGE_DELAY_S[0] <= delay <= AVERAGE_DELAY_S[1]
    out["average_delay_from_step"] = check(
        ok, "" if ok else "the 1 s average's halfway crossing is not about 0.5 s after the "
        "instant field's", delay_s=delay, expected_s=list(AVERAGE_DELAY_S),
        power_usage_delays_s=usage_delays)
    out["counter_vs_integral"] = counter_vs_integral(t, inst, energy)
    return out


def counter_vs_integral(t: Any, inst_mw: Any, energy_mj: Any) -> dict[str, Any]:
    """The energy counter against the integral of the instant field, between counter updates.

    From the first counter update 0.5 s in to the last one, ``ratio = ΔE / ∫P_186 dt`` must be
    within ``tol`` of 1 (module docstring); the tolerance comes from the counter's measured
    update period ``Δu``, the polling period, the power at both ends and 1 mJ resolution.
    """
    import numpy as np

    t, inst, energy = (np.asarray(v, float) for v in (t, inst_mw, energy_mj))
    ok_rows = np.isfinite(energy) & np.isfinite(inst)
    t, inst, energy = t[ok_rows], inst[ok_rows], energy[ok_rows]
    changes = np.flatnonzero(np.diff(energy) != 0) + 1 if len(energy) > 1 else np.array([], int)
    changes = changes[t[changes] >= t[0] + 0.5] if len(changes) else changes
    if len(changes) < 3:
        return check(False, "the energy counter did not change", updates=int(len(changes)))
    k0, k1 = int(changes[0]), int(changes[-1])
    span = float(t[k1] - t[k0])
    update_s = float(np.median(np.diff(t[changes])))
    poll_s = float(np.median(np.diff(t)))
    counter_j = float(energy[k1] - energy[k0]) / 1e3
    trapezoid = getattr(np, "trapezoid", None) or getattr(np, "trapz")  # noqa: B009
    integral_j = float(trapezoid(inst[k0:k1 + 1] / 1e3, t[k0:k1 + 1]))
    reach = 2 * update_s + poll_s

    def p_near(k: int) -> float:
        near = inst[np.abs(t - t[k]) <= reach]
        return float(np.nanmax(near)) / 1e3

    tol_j = reach * (p_near(k0) + p_near(k1)) + 2 * COUNTER_RESOLUTION_J
    tol = tol_j / integral_j + COUNTER_SAMPLING_TOL if integral_j > 0 else math.inf
    ratio = counter_j / integral_j if integral_j > 0 else math.nan
    well_posed = span >= COUNTER_MIN_S and tol <= COUNTER_TOL_MAX
    ok = well_posed and abs(ratio - 1) <= tol
    why = ("" if ok else f"only {span:.1f} s between counter updates (needs {COUNTER_MIN_S:.0f})"
           if span < COUNTER_MIN_S else f"tolerance {tol:.3f} too wide to tell a 5 % drift"
           if not well_posed else f"counter / integral {ratio:.4f} outside 1 ± {tol:.4f}")
    return check(ok, why, counter_j=counter_j, integral_j=integral_j, ratio=ratio,
                 tolerance=tol, span_s=span, counter_update_s=update_s, poll_s=poll_s)


def utilisation_follows_load(t: Any, util_pct: Any,
                             edges: Sequence[tuple[float, bool]]) -> dict[str, Any]:
    """Mean utilisation inside on-phases (high) and off-phases (low), from ``UTIL_SETTLE_S`` in."""
    import numpy as np

    t, util = np.asarray(t, float), np.asarray(util_pct, float)
    on_vals: list[float] = []
    off_vals: list[float] = []
    for ts, on, length in _switches(edges):
        if length < UTIL_SETTLE_S + 0.5:
            continue
        sel = (t >= ts + UTIL_SETTLE_S) & (t < ts + length - 0.05) & np.isfinite(util)
        (on_vals if on else off_vals).extend(util[sel].tolist())
    on_mean = float(np.mean(on_vals)) if on_vals else None
    off_mean = float(np.mean(off_vals)) if off_vals else None
    ok = (on_mean is not None and off_mean is not None and on_mean >= UTIL_ON_MIN
          and off_mean <= UTIL_OFF_MAX)
    return check(ok, "" if ok else f"utilisation of the sampled GPU must be >= {UTIL_ON_MIN:.0f} % "
                 f"inside on-phases and <= {UTIL_OFF_MAX:.0f} % inside off-phases",
                 util_on_mean=on_mean, util_off_mean=off_mean, samples_on=len(on_vals),
                 samples_off=len(off_vals))


def call_latency(latencies: dict[str, Any]) -> dict[str, Any]:
    """Each tick call's p50/p99 (ms), against the period of a tick on 8 GPUs.

    The field-values call and the buffer typically (p50) within ``FIELD_CALL_P50_MS`` each (the
    power phase of 8 GPUs in 10 ms), every call's tail (p99) within ``CALL_P99_MS``, and a
    tick's calls for 8 GPUs (8 x the sum of the p50s) within ``TICK_8_GPUS_MS``, half the
    100 ms period. The median, not the tail, judges the power phase: one scheduling hiccup of the
    polling process in 100 calls is the CPU's, not NVML's.
    """
    p50, p99, refused = {}, {}, {}
    for name, times in latencies.items():
        if isinstance(times, str):
            refused[name] = times
            continue
        s = sorted(times)
        p50[name] = statistics.median(s)
        p99[name] = s[int(0.99 * (len(s) - 1))]
    power = [p50[n] for n in ("field_values", "driver_samples") if n in p50]
    tick_8 = 8 * sum(p50.values())
    ok = (bool(p99) and all(v <= FIELD_CALL_P50_MS for v in power)
          and all(v <= CALL_P99_MS for v in p99.values()) and tick_8 <= TICK_8_GPUS_MS)
    return check(ok, "" if ok else "an NVML call is too slow for a 100 ms tick on 8 GPUs",
                 p50_ms=p50, p99_ms=p99, tick_8_gpus_ms=tick_8, refused=refused)


# ---------------------------------------------------------------------------------------------
# Sweeps and runs
# ---------------------------------------------------------------------------------------------

def _sweep(path: Path, data: dict[str, Any]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _generate(sweep: Path, out: Path) -> list[Any]:
    from generation.runner import generate

    return generate(sweep, out, progress=False).outcomes


def _run_of(out: Path, outcome: Any) -> Any:
    from llm_powertrace_ds.shards import read_run

    return read_run(out, outcome.run_id)


def _first(run: Any, kind: str) -> int | None:
    return next((e.t_ms for e in run.events if e.kind == kind), None)


def _last(run: Any, kind: str) -> int | None:
    return next((e.t_ms for e in reversed(run.events) if e.kind == kind), None)


def _window_mean(run: Any, signal: str, b: int | None, e: int | None) -> float | None:
    """Sum over devices of each device's mean of ``signal`` in ``[b, e]`` (ms)."""
    import numpy as np

    if b is None or e is None:
        return None
    vals = []
    for d in run.devices:
        x = d.signals.get(signal)
        if x is None:
            continue
        t = np.asarray(d.t_ms)
        sel = np.asarray(x, dtype=float)[(t >= b) & (t <= e)]
        sel = sel[np.isfinite(sel)]
        if len(sel):
            vals.append(float(sel.mean()))
    return float(sum(vals)) if vals else None


def _ordering(run: Any) -> dict[str, Any]:
    p, i = _first(run, "prepare_end"), _first(run, "idle_begin")
    return check(p is not None and i is not None and p <= i,
                 "" if p is not None else "no prepare_end event", prepare_end_ms=p,
                 idle_begin_ms=i)


def _published(outcomes: list[Any]) -> dict[str, Any]:
    bad = [o for o in outcomes if o.status != "published"]
    return check(not bad, "; ".join(f"{o.run_id}: {o.error}" for o in bad),
                 runs=[o.status for o in outcomes])


ALLOWED_FLAGS = {"cpu_proxy", "power_is_1s_average", "work_window_detected",
                 "checkpoint_dips_detected", "step_period_detected", "precision_unknown"}
"""Quality flags a clean smoke run may carry; any other (gap, stall, stale_power, gpu_lost,
energy_mismatch, incomplete, ...) fails ``<step>_flags``."""


def _flags_and_ticks(out: Path, outcomes: list[Any], cpu: bool) -> dict[str, Any]:
    """The published runs' quality flags and the sampler's missed ticks."""
    from generation.sampler import read_spool

    flags, missed = {}, {}
    for o in outcomes:
        if o.status != "published":
            continue
        flags[o.run_id] = _run_of(out, o).flags
        staging = Path(out) / ".staging" / o.run_id
        if staging.exists():
            missed[o.run_id] = read_spool(staging).summary.missed_ticks
    bad = {r: [f for f in fl if f not in ALLOWED_FLAGS] for r, fl in flags.items()}
    bad = {r: fl for r, fl in bad.items() if fl}
    limit = 5 if cpu else 1
    return check(not bad and all(m <= limit for m in missed.values()),
                 "; ".join(f"{r}: {fl}" for r, fl in bad.items()), flags=flags,
                 missed_ticks=missed, missed_limit=limit)


def _base_sweep(name: str, cpu: bool, workload: str) -> dict[str, Any]:
    return {"name": name, "workload": workload,
            "sampler": {"source": "cpu_proxy" if cpu else "nvml", "period_ms": 100},
            "idle_before_s": 1.0 if cpu else 3.0, "idle_after_s": 0.5 if cpu else 2.0}


# ---------------------------------------------------------------------------------------------
# Steps (each records its checks as it goes); ``cpu``: a CPU rehearsal against the NVML double
# ---------------------------------------------------------------------------------------------

def step_env(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    import importlib.metadata as md

    versions: dict[str, Any] = {}
    for dist in ("torch", "transformers", "peft", "trl", "accelerate", "nvidia-ml-py",
                 "optimum-quanto", "bitsandbytes", "datasets", "dill", "multiprocess",
                 "huggingface-hub"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = None
    rec["versions"] = check(True, python=sys.version.split()[0], **versions)
    offline = {k: os.environ.get(k) for k in OFFLINE_ENV}
    rec["offline"] = check(all(offline[k] == v for k, v in OFFLINE_ENV.items()), env=offline)
    if cpu:
        rec["gpus_by_uuid"] = check(None, "cpu rehearsal: no CUDA device")
        return
    import torch

    from generation.gpu_devices import check_same_gpus, resolve_workload_gpus, torch_device_uuids

    rec["cuda_available"] = check(torch.cuda.is_available(),
                                  device_order=os.environ.get("CUDA_DEVICE_ORDER"))
    gpus = resolve_workload_gpus(1)
    try:
        check_same_gpus(torch_device_uuids([0]), gpus)
        rec["gpus_by_uuid"] = check(True, nvml_index=gpus[0].nvml_index)
    except Exception as exc:  # noqa: BLE001 - reported as the check's failure
        rec["gpus_by_uuid"] = check(False, f"{type(exc).__name__}: {exc}")


def step_load(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    before, after = load_rms_after(200)
    _, decayed = load_rms_after(40, step="a = (a @ b) * 1e-4")  # the old load, for contrast
    rec["load_keeps_magnitude"] = check(0.5 <= after / before <= 2.0,
                                        "" if 0.5 <= after / before <= 2.0 else
                                        "the operand's magnitude drifts",
                                        rms_before=before, rms_after_200_steps=after,
                                        old_load_rms_after_40_steps=decayed)
    if not cpu:
        import torch

        b4, af = load_rms_after(200, n=LOAD_N, device="cuda")
        torch.cuda.synchronize()
        rec["load_keeps_magnitude_gpu"] = check(0.5 <= af / b4 <= 2.0, rms_before=b4,
                                                rms_after_200_steps=af)


def _gpu_index() -> int:
    from generation.gpu_devices import resolve_workload_gpus

    return resolve_workload_gpus(1)[0].nvml_index


def _probe(index: int) -> tuple[str | None, dict[str, Any], Any]:
    """``(power_field, probes, driver sample interval ms)`` of the GPU, as the sampler opens it."""
    from generation.sampler.nvml import NvmlSource

    source = NvmlSource([index])
    try:
        [dev] = source.open()
    finally:
        source.close()
    return (source.power_field, dev.details.get("probes") or {},
            dev.details.get("driver_power_sample_interval_ms"))


def _instant_missing(probes: dict[str, Any]) -> str:
    return (f"field 186 (instant power) unavailable (probe: {probes.get('power_instant')}): "
            "power_w is nvmlDeviceGetPowerUsage, a 1 s average on Hopper, flagged "
            "power_is_1s_average")


def step_nvml(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    from generation.sampler import nvml

    index = _gpu_index()
    power_field, probes, interval = _probe(index)
    if power_field == "instant":
        rec["nvml_probe"] = check(True, power_field=power_field, probes=probes)
    elif power_field == "power_usage" and probes.get("power_usage") == "ok":
        rec["nvml_probe"] = degraded(_instant_missing(probes), power_field=power_field,
                                     probes=probes)
    else:
        rec["nvml_probe"] = check(False, "no power reading works", power_field=power_field,
                                  probes=probes)
    buffer = probes.get("driver_power_samples")
    rec["driver_power_buffer"] = (
        check(True, interval_ms=interval) if buffer == "ok" else
        degraded(f"the driver's power buffer is unavailable ({buffer}): no finer series"))
    with nvml.session():
        latencies = nvml.tick_call_latencies_ms(nvml.device_handle(index), repeats=200)
    rec["nvml_call_latency"] = call_latency(latencies)


def _poll_power(index: int, schedule: Sequence[tuple[str, float]], cuda: bool) -> list[tuple]:
    from generation.sampler import nvml

    rows = []
    with nvml.session():
        h = nvml.device_handle(index)
        load = _load_proc(schedule, cuda)
        try:
            while load.poll() is None:
                t0 = time.monotonic()
                readings = nvml.power_readings_mw(h)
                rows.append(((t0 + time.monotonic()) / 2, *readings))
                time.sleep(max(0.0, POLL_S - (time.monotonic() - t0)))
        finally:
            load.wait(timeout=60)
    return rows


def step_fields(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    import numpy as np

    index = _gpu_index()
    power_field, probes, _ = _probe(index)
    if power_field != "instant":
        why = _instant_missing(probes)
        for name in ("instant_follows_step", "average_delay_from_step", "counter_vs_integral"):
            rec[name] = degraded(why)
        return
    rows = _poll_power(index, FIELDS_SCHEDULE, cuda=not cpu)
    t, inst, avg, usage, energy = np.array(rows, dtype=float).T
    rec.update(analyse_fields(t, inst, avg, usage, energy, read_edges(_edges_path())))


def step_sampler(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    import numpy as np

    from generation.sampler import Sampler, SamplerConfig, read_spool

    index = _gpu_index()
    staging = Path(tempfile.mkdtemp(prefix="smoke-sampler-", dir=args.out))
    with Sampler(SamplerConfig(source="nvml", period_ms=100.0, gpu_indices=(index,)), staging):
        load = _load_proc(SAMPLER_SCHEDULE, cuda=not cpu)
        load.wait(timeout=60)
    spool = read_spool(staging)
    s = spool.summary
    stale = s.faults.get("stale_power", 0) / max(s.ticks, 1)
    rec["sampler_ticks"] = check(s.missed_ticks <= 1 and (s.lateness_p99_ms or 0) < 20.0
                                 and stale < 0.5, ticks=s.ticks, missed=s.missed_ticks,
                                 lateness_p99_ms=s.lateness_p99_ms,
                                 read_phase_p99_ms=s.read_phase_p99_ms, faults=s.faults,
                                 stale_fraction=stale)
    probes = (spool.devices[0].get("details") or {}).get("probes") or {}
    power = np.asarray(spool.samples["power_w"], dtype=float)
    field = spool.provenance.get("power_field")
    if field == "instant":
        rec["sampler_power"] = check(bool(np.isfinite(power).all()), power_field=field)
    else:
        from generation.sampler.convert import provenance_meta

        flags = provenance_meta(staging)["quality_flags"]
        labelled = "power_is_1s_average" in flags and bool(np.isfinite(power).all())
        rec["sampler_power"] = (
            degraded(_instant_missing(probes), power_field=field, quality_flags=flags)
            if labelled else check(False, "power is missing or its 1 s average is unlabelled",
                                   power_field=field, quality_flags=flags))
    d = spool.driver_samples
    interval = float(np.median(np.diff(np.sort(d["ts_us"])))) / 1e3 if len(d) > 2 else None
    buffer = probes.get("driver_power_samples")
    rec["driver_series"] = (
        check(len(d) > 0, "" if len(d) else "no driver samples recorded", samples=int(len(d)),
              median_interval_ms=interval) if buffer == "ok" else
        degraded(f"the driver's power buffer is unavailable ({buffer})"))
    t = np.asarray(spool.samples["t_before_ns"], dtype=float) / 1e9
    rec["utilisation_follows_load"] = utilisation_follows_load(
        t, spool.samples["gpu_util_pct"], read_edges(_edges_path()))


def step_settings(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    from generation.sampler import NoPermission, device_settings, nvml, probe_gpus
    from generation.sampler.journal import journal_path

    index = _gpu_index()

    def state() -> tuple[int, int, int]:
        with nvml.session():
            h = nvml.device_handle(index)
            return nvml.power_limit_mw(h), nvml.default_power_limit_mw(h), nvml.sm_clock_mhz(h)

    before = state()
    [probe] = probe_gpus([index])
    if not args.allow_settings:
        os.environ[NO_SETTINGS_ENV] = "1"
        why = ""
        try:
            with device_settings([index], power_limit_w=before[0] / 1000.0 - 50):
                refused = False
        except NoPermission as exc:
            refused, why = True, str(exc)
        try:
            with device_settings([index], sm_clock_mhz=1000):
                clock_refused = False
        except NoPermission:
            clock_refused = True
        after = state()
        rec["settings_refused_cleanly"] = check(
            refused and clock_refused and before[:2] == after[:2]
            and probe.power_limit_refusal is not None, why if refused else "a setting was applied",
            power_limit_w_before=before[0] / 1e3, power_limit_w_after=after[0] / 1e3,
            probe_refusal=probe.power_limit_refusal)
        return
    target = max(probe.min_power_limit_w or 0, 0.8 * before[1] / 1000.0)
    with device_settings([index], power_limit_w=target) as applied:
        observed = applied[0].observed()
        journalled = journal_path().exists()
    after = state()
    rec["settings_set_and_restored"] = check(
        journalled and after[:2] == before[:2] and not journal_path().exists(),
        requested_w=target, observed=observed, restored_w=after[0] / 1e3)


def step_finetune(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    out = Path(args.out) / "ds-finetune"
    data = _base_sweep("smoke-finetune", cpu, "finetune")
    data["launcher"] = "torchrun"
    data["base"] = {"model": "llama-tiny" if cpu else "Qwen2.5-0.5B", "model_source": "zoo",
                    "dataset_name": "synthetic", "method": "lora", "lora_rank": 8,
                    "batch_size": 2 if cpu else 8, "seq_len": 32 if cpu else 512,
                    "max_steps": 3 if cpu else 40, "precision": "fp32" if cpu else "bf16"}
    outcomes = _generate(_sweep(Path(args.out) / "finetune.yaml", data), out)
    rec["finetune_published"] = _published(outcomes)
    if rec.checks["finetune_published"]["status"] != "pass":
        return
    rec["finetune_flags_and_ticks"] = _flags_and_ticks(out, outcomes, cpu)
    run = _run_of(out, outcomes[0])
    m = run.meta
    want = "float32" if cpu else "bfloat16"
    rec["finetune_dtype_columns"] = check(
        m["weights_dtype"].split(",")[0] == want and m["compute_dtype"] == want
        and bool(m["attn_implementation"]), weights_dtype=m["weights_dtype"],
        compute_dtype=m["compute_dtype"], attn_implementation=m["attn_implementation"],
        tf32=m["tf32"])
    rec["finetune_prepare_before_idle"] = _ordering(run)
    # the work window: first step_begin to last step_end (NVML averages utilisation over
    # 1/6-1 s: the first step alone is too short to show it)
    steps = _window_mean(run, "gpu_util_pct", _first(run, "step_begin"), _last(run, "step_end"))
    idle = _window_mean(run, "gpu_util_pct", _first(run, "idle_begin"), _first(run, "idle_end"))
    if cpu:
        rec["finetune_util_follows_steps"] = check(None, "cpu self-test", util_in_steps=steps)
    else:
        rec["finetune_util_follows_steps"] = check(
            steps is not None and idle is not None and steps > idle + 20,
            util_in_work_window=steps, util_idle=idle, power_field=m["power_field"])


def step_qlora(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    from generation.workloads.quant import bitsandbytes_problem

    problem = bitsandbytes_problem()
    if problem:
        rec["qlora"] = check(None, problem)
        return
    out = Path(args.out) / "ds-qlora"
    data = _base_sweep("smoke-qlora", cpu, "finetune")
    data["base"] = {"model": "Qwen2.5-0.5B", "model_source": "zoo", "dataset_name": "synthetic",
                    "method": "qlora", "lora_rank": 8, "batch_size": 8, "seq_len": 512,
                    "max_steps": 20, "precision": "bf16"}
    outcomes = _generate(_sweep(Path(args.out) / "qlora.yaml", data), out)
    rec["qlora_published"] = _published(outcomes)
    if rec.checks["qlora_published"]["status"] == "pass":
        m = _run_of(out, outcomes[0]).meta
        rec["qlora_dtype_columns"] = check(
            "nf4" in m["weights_dtype"] and m["compute_dtype"] == "bfloat16",
            weights_dtype=m["weights_dtype"], compute_dtype=m["compute_dtype"])


def _inference_common(cpu: bool) -> dict[str, Any]:
    return {"model": "llama-tiny" if cpu else "Qwen2.5-0.5B", "model_source": "zoo",
            "prompt_len": 16 if cpu else 256, "output_len": 4 if cpu else 64,
            "num_requests": 12 if cpu else 64, "precision": "fp32" if cpu else "bf16"}


def step_inference(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    from generation.workloads import get_workload

    out = Path(args.out) / "ds-inference"
    common = _inference_common(cpu)
    data = _base_sweep("smoke-inference", cpu, "inference")
    data["base"] = common
    data["zip"] = [{  # run 1: continuous batching; run 2: static batching, Poisson arrivals
        "batching": ["continuous", "static"],
        "concurrency": [4 if cpu else 16, 4],
        "arrival_pattern": ["closed", "poisson"],
        "arrival_rate_rps": [None, 4.0 if cpu else 20.0],
        "cb_use_cuda_graph": [not cpu, False],
    }]
    get_workload("inference")  # a missing extra fails here, with its hint
    outcomes = _generate(_sweep(Path(args.out) / "inference.yaml", data), out)
    rec["inference_published"] = _published(outcomes)
    rec["inference_flags_and_ticks"] = _flags_and_ticks(out, outcomes, cpu)
    for o in outcomes:
        if o.status != "published":
            continue
        run = _run_of(out, o)
        m = run.meta
        if m["batching"] == "continuous":
            rec["cb_config_recorded"] = check(
                m["cb_attn_implementation"] is not None and m["cb_use_cuda_graph"] is (not cpu)
                and m["cb_use_async_batching"] is False,
                cb_attn_implementation=m["cb_attn_implementation"],
                cb_use_cuda_graph=m["cb_use_cuda_graph"],
                cb_use_async_batching=m["cb_use_async_batching"])
            rec["inference_prepare_before_idle"] = _ordering(run)
        else:
            want = "float32" if cpu else "bfloat16"
            rec["static_poisson"] = check(
                m["weights_dtype"] == want and m["requests_completed"] == common["num_requests"],
                weights_dtype=m["weights_dtype"], compute_dtype=m["compute_dtype"],
                requests=m["requests_completed"])


def step_kv_int4(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    from generation.workloads.quant import installed, quanto_cuda_problem

    if not installed("optimum.quanto"):
        rec["kv_int4"] = check(None, "optimum-quanto is not installed")
        return
    problem = quanto_cuda_problem()
    if problem:  # its JIT build (nvcc + ninja) takes minutes: never inside this budget
        rec["kv_int4"] = check(None, problem)
        return
    out = Path(args.out) / "ds-kv"
    data = _base_sweep("smoke-kv", cpu, "inference")
    data["base"] = {**_inference_common(cpu), "batching": "static", "concurrency": 4,
                    "kv_cache_quant": "int4"}
    outcomes = _generate(_sweep(Path(args.out) / "kv.yaml", data), out)
    rec["kv_int4_published"] = _published(outcomes)
    if rec.checks["kv_int4_published"]["status"] == "pass":
        m = _run_of(out, outcomes[0]).meta
        rec["kv_int4_recorded"] = check(str(m["kv_cache_quant"]).startswith("int4"),
                                        kv_cache_quant=m["kv_cache_quant"])


def step_idle(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    out = Path(args.out) / "ds-idle"
    data = _base_sweep("smoke-idle", cpu, "finetune")
    data["repeats"] = 3
    data["launcher"] = "inline"
    data["base"] = {"model": "llama-tiny" if cpu else "Qwen2.5-0.5B", "model_source": "zoo",
                    "dataset_name": "synthetic", "method": "lora", "lora_rank": 8,
                    "batch_size": 2, "seq_len": 32 if cpu else 256,
                    "max_steps": 3 if cpu else 10, "precision": "fp32" if cpu else "bf16"}
    outcomes = _generate(_sweep(Path(args.out) / "idle.yaml", data), out)
    rec["idle_runs_published"] = _published(outcomes)
    means = []
    for o in outcomes:
        if o.status == "published":
            run = _run_of(out, o)
            means.append(_window_mean(run, "power_w", _first(run, "idle_begin"),
                                      _first(run, "idle_end")))
    known = [m for m in means if m is not None]
    ok = len(known) == 3
    spread = (max(known) - min(known)) / statistics.fmean(known) if ok else None
    limit = 0.25 if cpu else 0.10  # cpu_proxy: the modelled idle follows real CPU noise
    rec["idle_baselines_agree"] = check(ok and spread is not None and spread <= limit,
                                        idle_mean_w=means, relative_spread=spread, limit=limit)


STEP_FUNCTIONS: dict[str, Callable[[bool, argparse.Namespace, Recorder], None]] = {
    "env": step_env, "load": step_load, "nvml": step_nvml, "fields": step_fields,
    "sampler": step_sampler, "settings": step_settings, "finetune": step_finetune,
    "inference": step_inference, "idle": step_idle, "qlora": step_qlora, "kv_int4": step_kv_int4,
}
assert set(STEP_FUNCTIONS) == set(STEP_NAMES)


# ---------------------------------------------------------------------------------------------
# Orchestration
# ---------------------------------------------------------------------------------------------

def plan(with_optional: bool = False) -> dict[str, Any]:
    """The plan ``--plan`` prints: steps, budgets, what each proves, the pinned carry."""
    pins = gpu_carry.selected(gpu_carry.read_lock(), with_optional)
    return {"steps": [{"name": s.name, "budget_s": s.budget_s, "proves": s.proves,
                       "optional": s.optional} for s in STEPS],
            "total_budget_s": TOTAL_BUDGET_S, "install_budget_s": INSTALL_BUDGET_S,
            "carry": [p.pin for p in pins], "carry_wheels": [p.wheel for p in pins],
            "carry_mib": round(sum(p.size_bytes for p in pins) / 2**20, 2),
            "with_optional": with_optional,
            "gpu_command": "python3 bench/gpu_smoke.py --carry build/gpu-carry --out OUT/smoke",
            "carry_folder": "build/gpu-carry (git-ignored: name it among the paths that travel)"}


def _step_env(args: argparse.Namespace, step: Step) -> dict[str, str]:
    env = {**os.environ, **OFFLINE_ENV, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
           EDGES_ENV: str(Path(args.out) / f"load-edges-{step.name}.txt")}
    paths = [str(REPO)]
    site, double = getattr(args, "site", None), getattr(args, "nvml_double", None)
    if site:
        paths.insert(0, site)
    if double:
        paths.insert(0, str(DOUBLE_DIR))
        env[DOUBLE_ENV] = double
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                 else []))
    if not args.allow_settings:
        env[NO_SETTINGS_ENV] = "1"  # no step may change a clock or a power limit
    return env


def run_step(step: Step, args: argparse.Namespace, timeout_s: float) -> dict[str, Any]:
    """Run one step in its own process; a crash or a timeout fails it, keeping its checks."""
    result = Path(args.out) / f"step-{step.name}.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--step", step.name, "--out", str(args.out)]
    if getattr(args, "nvml_double", None):
        cmd += ["--nvml-double", args.nvml_double]
    if args.allow_settings:
        cmd.append("--allow-settings")
    started = time.monotonic()
    failure = None
    try:
        proc = subprocess.run(cmd, env=_step_env(args, step), timeout=timeout_s,
                              capture_output=True, text=True, cwd=REPO)
        if proc.returncode != 0:
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
            failure = f"exit {proc.returncode}: {tail}"
    except subprocess.TimeoutExpired:
        failure = f"timed out after {timeout_s:.0f} s (its checks so far are kept)"
    checks: dict[str, Any] = {}
    try:
        checks = json.loads(result.read_text())
    except (OSError, ValueError):
        failure = failure or "the step wrote no result"
    if failure:
        checks[f"{step.name}_step"] = check(False, failure, seconds=time.monotonic() - started)
    return checks


def _report(args: argparse.Namespace, checks: dict[str, Any], steps: dict[str, Any],
            started: float, complete: bool, install: dict[str, Any] | None) -> dict[str, Any]:
    cpu = bool(args.nvml_double)
    statuses = [c["status"] for c in checks.values()]
    required = [c["status"] for k, c in checks.items() if not steps.get(
        c.get("_step", ""), {}).get("optional")]
    passed = (complete and "fail" not in required
              and (cpu or "skip" not in required)
              and (install is None or install["status"] == "pass"))
    return {"mode": f"cpu-rehearsal ({args.nvml_double} NVML double)" if cpu else "gpu",
            "complete": complete, "settings_changed_allowed": bool(args.allow_settings),
            "passed": passed, "seconds": round(time.monotonic() - started, 1),
            "steps_seconds": round(sum(s.get("seconds", 0.0) for s in steps.values()), 1),
            "budget_s": TOTAL_BUDGET_S, "install": install,
            "counts": {s: statuses.count(s) for s in
                       ("pass", "fail", "skip", "degraded", "optional_failed")},
            "optional_failed": sorted(k for k, c in checks.items()
                                      if c["status"] == "optional_failed"),
            "degraded": {k: c.get("why", "") for k, c in checks.items()
                         if c["status"] == "degraded"},
            "steps": steps,
            "checks": {k: {kk: v for kk, v in c.items() if kk != "_step"}
                       for k, c in checks.items()}}


def install_carry(carry: Path, out: Path) -> dict[str, Any]:
    """Install the carry folder's wheels into ``out/site`` (no index, no dependencies), timed."""
    site = out / "site"
    shutil.rmtree(site, ignore_errors=True)
    wheels = sorted(w.name for w in carry.glob("*.whl"))
    cmd = gpu_carry.install_command(carry, site, sys.executable)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    ok = proc.returncode == 0 and bool(wheels) and seconds <= INSTALL_BUDGET_S
    why = "" if ok else (f"no wheel in {carry.name}" if not wheels else
                         f"pip exit {proc.returncode}: "
                         + " | ".join(proc.stderr.strip().splitlines()[-3:])
                         if proc.returncode else f"took {seconds:.0f} s of {INSTALL_BUDGET_S:.0f}")
    named = {str(carry): "CARRY", str(site): "OUT/site", sys.executable: "python3"}
    shown = [named.get(a, a) for a in cmd[:len(cmd) - len(wheels)]]
    return {**check(ok, why, seconds=seconds, budget_s=INSTALL_BUDGET_S, wheels=wheels,
                    command=" ".join([*shown, "CARRY/*.whl"])), "site": str(site)}


def orchestrate(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    install = None
    args.site = None
    if args.carry:
        install = install_carry(Path(args.carry).resolve(), out)
        args.site = install.pop("site")
        print(f"[gpu_smoke] install: {install['seconds']:.1f} s of {INSTALL_BUDGET_S:.0f}",
              file=sys.stderr)
    checks: dict[str, Any] = {}
    steps: dict[str, Any] = {}
    report_path = out / "gpu_smoke.json"
    only = args.only_steps
    for step in STEPS:
        if only is not None and step.name not in only:
            continue
        t = time.monotonic()
        budget = step.budget_s
        if args.nvml_double and step.cuda_only:
            got = {f"{step.name}_step": check(None, "needs CUDA kernels; cpu rehearsal")}
        else:
            runner = step.name in ("finetune", "inference", "idle")
            budget *= CPU_SLOWDOWN if (args.nvml_double and runner) else 1.0
            got = run_step(step, args, budget)
        seconds = time.monotonic() - t
        for name, c in got.items():
            if step.optional and c["status"] == "fail":
                c["status"] = "optional_failed"
            checks[name] = {**c, "_step": step.name}
        st = [c["status"] for c in got.values()]
        steps[step.name] = {"seconds": round(seconds, 1), "budget_s": budget,
                            "optional": step.optional,
                            "status": next((s for s in ("fail", "optional_failed", "degraded",
                                                        "skip") if s in st), "pass")}
        print(f"[gpu_smoke] {step.name}: {seconds:.1f} s of {budget:.0f}", file=sys.stderr)
        _write_json_atomic(report_path, _report(args, checks, steps, started, False, install))
    report = _report(args, checks, steps, started, True, install)
    _write_json_atomic(report_path, report)
    print(json.dumps(report, indent=1, default=str))
    return 0 if report["passed"] else 1


# ---------------------------------------------------------------------------------------------
# The CPU rehearsal
# ---------------------------------------------------------------------------------------------

IMAGE_VENV = REPO / "build" / "gpu-image-venv"
REHEARSAL_CARRY = REPO / "build" / "gpu-carry-rehearsal"
REHEARSAL_TORCH = "torch==2.13.0"
"""The CPU torch the rehearsal's image stands in with (the image's is a CUDA 2.11 build)."""



def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def image_venv(carry: Path, venv: Path = IMAGE_VENV) -> dict[str, Any]:
    """A virtual environment standing in for the GPU image: its packages, none carried.

    Made once and reused while its requirements are unchanged.
    """
    image = gpu_carry.read_image()
    # the image's packages the carry and the project rely on (as --carry-check finds them), at
    # the image's version where recorded; torch is the CPU build
    relied_on = sorted(set(gpu_carry.carry_check(carry, image)["from_image"])
                       | ({p.name for p in gpu_carry.read_lock()} & set(image)))  # overridden
    wanted = [REHEARSAL_TORCH] + [f"{n}=={image[n]}" if image.get(n) else n
                                  for n in relied_on if n != "torch"]
    stamp = venv / "image-requirements.txt"
    t0 = time.monotonic()
    if not (stamp.exists() and stamp.read_text() == "\n".join(wanted)):
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        asked = list(wanted)
        for _ in range(len(asked)):
            proc = subprocess.run([str(_venv_python(venv)), "-m", "pip", "install", "-q",
                                   *asked], capture_output=True, text=True)
            if proc.returncode == 0:
                break
            # the image's version not installable on this Python: the closest one below it
            missing = re.search(r"No matching distribution found for (\S+)==(\S+)", proc.stderr)
            if missing is None or f"{missing[1]}=={missing[2]}" not in asked:
                raise gpu_carry.CarryError("the rehearsal's image could not be installed: "
                                           + " | ".join(proc.stderr.strip().splitlines()[-3:]))
            asked[asked.index(f"{missing[1]}=={missing[2]}")] = f"{missing[1]}<={missing[2]}"
        stamp.write_text("\n".join(wanted))
    listed = subprocess.run([str(_venv_python(venv)), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, check=True)
    have: dict[str, str] = {str(gpu_carry.canonicalize_name(p["name"])): p["version"]
                            for p in json.loads(listed.stdout)}
    absent = {p.name for p in gpu_carry.read_lock()} - set(image)  # the image lacks them
    leaked = sorted(absent & set(have))
    if leaked:
        raise gpu_carry.CarryError(f"the rehearsal's image holds carried packages {leaked}: "
                                   "it would hide an open carry")
    differs = {n: {"image": image[n], "rehearsal": have.get(n)} for n in relied_on
               if image.get(n) and have.get(n) != image[n]}
    return {"seconds": round(time.monotonic() - t0, 1), "python": sys.version.split()[0],
            "requirements": wanted, "versions_differing_from_the_image": differs,
            "torch": have.get("torch")}


def cpu_selftest(args: argparse.Namespace) -> int:
    """Rehearse the GPU run on CPU (see the module docstring) and print its report."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pins = gpu_carry.selected(gpu_carry.read_lock(), args.with_optional)
    shutil.rmtree(REHEARSAL_CARRY, ignore_errors=True)
    gpu_carry.fetch(pins, REHEARSAL_CARRY, for_this_python=True)
    setup = image_venv(REHEARSAL_CARRY)
    wheels = sorted(w.name for w in REHEARSAL_CARRY.glob("*.whl"))
    setup["carry_wheels"] = wheels
    setup["carry_differing_from_the_gpu_carry"] = sorted(set(wheels) - {p.wheel for p in pins})
    cmd = [str(_venv_python(IMAGE_VENV)), __file__, "--carry", str(REHEARSAL_CARRY),
           "--nvml-double", args.nvml_double or "hopper", "--out", str(out)]
    if args.only:
        cmd += ["--only", args.only]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        print(proc.stderr[-4000:], file=sys.stderr)
        return 2
    report = {"mode": "cpu-selftest", "rehearsal": setup, **{k: v for k, v in report.items()
                                                             if k != "mode"},
              "inner_mode": report["mode"]}
    _write_json_atomic(out / "gpu_smoke.json", report)
    print(json.dumps(report, indent=1, default=str))
    return proc.returncode


def _print_plan(p: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(p, indent=1))
        return
    for s in p["steps"]:
        tag = " (optional)" if s["optional"] else ""
        print(f"{s['name']:<10} {s['budget_s']:>5.0f} s{tag}  {s['proves']}")
    print(f"{'total':<10} {p['total_budget_s']:>5.0f} s (+ {p['install_budget_s']:.0f} s "
          "to install the carry)")
    print(f"carry ({p['carry_mib']} MiB, {p['carry_folder']}): " + ", ".join(p["carry"]))
    print(f"on the GPU machine: {p['gpu_command']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", default="gpu_smoke_out", help="work folder (default: "
                        "gpu_smoke_out)")
    parser.add_argument("--plan", action="store_true",
                        help="print the steps, their budgets and the pinned carry; run nothing")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="--plan output format")
    parser.add_argument("--with-optional", action="store_true",
                        help="the carry includes the optional steps' wheels (bitsandbytes, "
                        "optimum-quanto)")
    parser.add_argument("--fetch-carry", action="store_true",
                        help="download the pinned wheels into --carry (default build/gpu-carry), "
                        "checking each file's size and sha256")
    parser.add_argument("--carry-check", action="store_true",
                        help="check that the carry folder and the image meet every requirement")
    parser.add_argument("--carry", help="the carry folder: installed (timed) before the steps; "
                        "--fetch-carry / --carry-check: the folder to fill / check")
    parser.add_argument("--allow-settings", action="store_true",
                        help="really set and restore a power cap (only on a machine you own; "
                        "default: only check that the settings paths refuse)")
    parser.add_argument("--cpu-selftest", action="store_true",
                        help="rehearse the whole run on CPU: the image's packages, the carry "
                        "installed from its folder only, the NVML steps against the Hopper-like "
                        "double")
    parser.add_argument("--nvml-double", choices=BEHAVIOURS,
                        help="run against the Hopper-like NVML double instead of a GPU (CPU)")
    parser.add_argument("--only", help="comma-separated steps to run (default: all): "
                        + ", ".join(STEP_NAMES))
    parser.add_argument("--step", choices=STEP_NAMES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        args.only_steps = parse_only(args.only)
    except UsageError as exc:
        print(f"gpu_smoke.py: error: {exc}", file=sys.stderr)
        return 2
    if args.plan:
        _print_plan(plan(args.with_optional), args.format)
        return 0
    carry = Path(args.carry) if args.carry else gpu_carry.DEFAULT_CARRY
    try:
        if args.fetch_carry:
            pins = gpu_carry.selected(gpu_carry.read_lock(), args.with_optional)
            files = gpu_carry.fetch(pins, carry)
            print(json.dumps({"carry": str(carry), "wheels": [f.name for f in files]}, indent=1))
            return 0
        if args.carry_check:
            result = gpu_carry.carry_check(carry, gpu_carry.read_image())
            print(json.dumps(result, indent=1))
            return 0 if result["closed"] else 1
    except gpu_carry.CarryError as exc:
        print(f"gpu_smoke.py: error: {exc}", file=sys.stderr)
        return 2
    args.out = str(Path(args.out).resolve())
    if args.cpu_selftest:
        return cpu_selftest(args)
    if args.step is None:
        return orchestrate(args)
    import logging

    logging.basicConfig(level=logging.WARNING)
    rec = Recorder(Path(args.out, f"step-{args.step}.json"))
    rec.update({})
    try:
        STEP_FUNCTIONS[args.step](bool(args.nvml_double), args, rec)
    except Exception as exc:  # noqa: BLE001 - the step's failure, reported in the JSON
        import traceback

        rec[f"{args.step}_step"] = check(False, f"{type(exc).__name__}: {exc}",
                                         traceback=traceback.format_exc(limit=6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
