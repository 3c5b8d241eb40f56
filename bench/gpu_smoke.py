"""One short command that proves, on a GPU machine, that every GPU-only path measures what its row says.

Usage::

    python bench/gpu_smoke.py --plan [--format json]       # steps, budgets, wheels to carry
    python bench/gpu_smoke.py [--out DIR] [--allow-settings]
    python bench/gpu_smoke.py --cpu-selftest [--out DIR]   # the plumbing on CPU (CI)

Sized for the first, cold contact with a GPU: a debug-queue job of 10-15 minutes on one H200, or a
rented node for a quarter of an hour. The whole check, model set-up included, is budgeted at
:data:`TOTAL_BUDGET_S` (the sum of the steps' budgets, each its step's hard time limit; no floor).
Steps that need a compiler (optimum-quanto's JIT CUDA kernels) or bitsandbytes are optional:
without them they are skipped with the reason and the check can still pass.

Each step runs in its own process (a CUDA crash or a hang fails that step, not the command) and
writes its checks one by one; after every step the whole report is rewritten atomically
(``DIR/gpu_smoke.json``, ``"complete": false`` until the end), so a check cut off by its job's
time limit still returns everything measured so far. The final report is also printed::

    {"mode": "gpu", "complete": true, "passed": true, "checks": {"nvml_probe": {...}, ...}}

Every check is ``pass``, ``fail`` or ``skip`` (with ``why``); the exit status is 0 only when every
non-optional check passed. Nothing is downloaded: random-init zoo models, synthetic data,
``HF_HUB_OFFLINE=1``. No GPU setting changes unless ``--allow-settings`` (a machine you own).

The GPU load (:data:`LOAD_STEP`) keeps its operands' magnitude: ``a = a @ b`` rescaled to unit
RMS stays at unit scale forever, where ``a = (a @ b) * 1e-4`` decays to all-zero operands within
about twenty matmuls (power and speed depend on the operand values; zeros are the least
representative load there is). ``--cpu-selftest`` checks that on CPU.

``--plan`` lists the steps (what each proves) and :data:`CARRY`: what a cold GPU machine needs
beyond an image with CUDA torch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

NO_SETTINGS_ENV = "LLM_POWERTRACE_NO_DEVICE_SETTINGS"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}


@dataclass(frozen=True)
class Step:
    """One step of the plan.

    Attributes:
        name: the step (``--only`` takes these).
        budget_s: its hard time limit on the GPU, s (model set-up included).
        proves: what a pass shows, in one line.
        optional: needs something a cold machine may lack (a compiler, bitsandbytes): skipped
            with the reason, never failing the check.
        gpu_only: skipped (by design) by ``--cpu-selftest``.
    """

    name: str
    budget_s: float
    proves: str
    optional: bool = False
    gpu_only: bool = False


STEPS: tuple[Step, ...] = (
    Step("env", 15, "versions; offline; the CUDA device the workload uses is, by UUID, the GPU "
         "the sampler reads"),
    Step("load", 10, "the benchmark load keeps its operands' magnitude (no decay to zeros)"),
    Step("nvml", 20, "the probe finds field 186 (instant power) and the driver's power buffer; "
         "per-call latency, and the power phase of a tick extrapolated to 8 GPUs", gpu_only=True),
    Step("fields", 25, "a load switched on and off every 250 ms: instant (186) follows it, the 1 s average "
         "(185) and nvmlDeviceGetPowerUsage lag ~1 s; energy counter / integral of instant "
         "power in 0.98-1.02", gpu_only=True),
    Step("sampler", 25, "the sampler at 100 ms under load: no missed ticks, lateness, no stale "
         "flood, the driver's finer series, utilisation of the sampled GPU follows the load",
         gpu_only=True),
    Step("settings", 15, "no clock or power limit changes (or, with --allow-settings, one is "
         "set and restored); limits and clocks are what they were", gpu_only=True),
    Step("finetune", 90, "a LoRA fine-tune through the runner under torchrun: published, dtype "
         "columns, utilisation over the work window (first step_begin to last step_end) above "
         "idle, quality flags and missed ticks"),
    Step("inference", 90, "continuous batching (recorded configuration) and static batching "
         "with Poisson arrivals through the runner: published, flags, missed ticks"),
    Step("idle", 60, "three runs in one process have the same idle baseline (10 %)"),
    Step("qlora", 40, "a QLoRA fine-tune: nf4 weights, bf16 compute (needs bitsandbytes with "
         "CUDA)", optional=True, gpu_only=True),
    Step("kv_int4", 30, "static batching with an int4 quantised KV cache (needs optimum-quanto "
         "and its compiled CUDA kernels: nvcc + ninja, built beforehand)", optional=True,
         gpu_only=True),
)
TOTAL_BUDGET_S = sum(s.budget_s for s in STEPS)
"""The whole check's budget on one H200, s: the sum of the steps' limits (<= 420)."""
CPU_SLOWDOWN = 4.0
"""``--cpu-selftest``: the runner steps' limits are this many times longer on CPU."""

CARRY: tuple[str, ...] = (
    "transformers==5.24.*", "trl", "peft", "accelerate", "datasets", "nvidia-ml-py",
    "optimum-quanto (optional: kv_int4)", "bitsandbytes (optional: qlora; ~43 MB of a 64 MB "
    "carry budget)",
)
"""Wheels a cold GPU machine needs beyond an image with CUDA torch and the project's own
dependencies (numpy, pyarrow, scipy, psutil, pyyaml, filelock, huggingface-hub)."""

LOAD_N = 4096
LOAD_STEP = "a = a @ b; a = a * a.float().pow(2).mean().rsqrt().to(a.dtype)"
"""One step of the GPU load: a matmul, then the operand rescaled to unit RMS (a reduction and a
scale, negligible next to the matmul), so its magnitude never drifts."""


def check(ok: bool | None, why: str = "", **values: Any) -> dict[str, Any]:
    """One check's record: ``pass``/``fail`` (``ok``) or ``skip`` (``ok`` is ``None``)."""
    status = "skip" if ok is None else ("pass" if ok else "fail")
    out: dict[str, Any] = {"status": status}
    if why:
        out["why"] = why
    out.update({k: _round(v) for k, v in values.items()})
    return out


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


# ---------------------------------------------------------------------------------------------
# The load
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


def _load_proc(seconds: float, on_s: float, off_s: float) -> subprocess.Popen[bytes]:
    """A separate process that loads cuda:0 in a square wave (never the polling process)."""
    step = LOAD_STEP
    code = (
        "import time, torch\n"
        f"a = torch.randn({LOAD_N}, {LOAD_N}, device='cuda', dtype=torch.bfloat16)\n"
        "b = torch.randn_like(a)\n"
        "torch.cuda.synchronize(); print('ready', flush=True)\n"
        f"end = time.monotonic() + {seconds}\n"
        "while time.monotonic() < end:\n"
        f"    t = time.monotonic() + {on_s}\n"
        "    while time.monotonic() < t:\n"
        f"        for _ in range(4): {step}\n"
        "        torch.cuda.synchronize()\n"
        f"    time.sleep({off_s})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()  # "ready": CUDA context and buffers exist before timing starts
    return proc


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
# Steps (each records its checks as it goes); ``cpu`` = --cpu-selftest
# ---------------------------------------------------------------------------------------------

def step_env(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    import importlib.metadata as md

    versions: dict[str, Any] = {}
    for dist in ("torch", "transformers", "peft", "trl", "accelerate", "nvidia-ml-py",
                 "optimum-quanto", "bitsandbytes", "datasets"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = None
    rec["versions"] = check(True, **versions)
    offline = {k: os.environ.get(k) for k in OFFLINE_ENV}
    rec["offline"] = check(all(offline[k] == v for k, v in OFFLINE_ENV.items()), env=offline)
    if cpu:
        rec["gpus_by_uuid"] = check(None, "cpu self-test")
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


def step_nvml(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    from generation.gpu_devices import resolve_workload_gpus
    from generation.sampler.nvml import NvmlSource

    index = resolve_workload_gpus(1)[0].nvml_index
    source = NvmlSource([index])
    [dev] = source.open()
    probes = dev.details.get("probes") or {}
    rec["nvml_probe"] = check(source.power_field == "instant",
                              "" if source.power_field == "instant" else
                              "field 186 unusable: power_w falls back to a 1 s average",
                              gpu=dev.name, power_field=source.power_field, probes=probes)
    rec["driver_power_buffer"] = check(
        probes.get("driver_power_samples") == "ok", probes.get("driver_power_samples", ""),
        interval_ms=dev.details.get("driver_power_sample_interval_ms"))
    power, rest = [], []
    try:
        for _ in range(300):
            t0 = time.perf_counter()
            r = source.read_power(0)
            t1 = time.perf_counter()
            source.read_rest(0, r)
            rest.append((time.perf_counter() - t1) * 1e3)
            power.append((t1 - t0) * 1e3)
            source.driver_samples(0)
    finally:
        source.close()
    p99 = sorted(power)[int(0.99 * (len(power) - 1))]
    p99_rest = sorted(rest)[int(0.99 * (len(rest) - 1))]
    eight = 8 * p99  # the power phase of a tick with 8 GPUs, read one after another
    rec["nvml_read_latency"] = check(eight <= 10.0 and 8 * (p99 + p99_rest) < 100.0,
                                     power_p50_ms=statistics.median(power), power_p99_ms=p99,
                                     rest_p99_ms=p99_rest, power_phase_8_gpus_ms=eight,
                                     tick_reads_8_gpus_ms=8 * (p99 + p99_rest))


def step_fields(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    import numpy as np

    from generation.gpu_devices import resolve_workload_gpus
    from generation.sampler import nvml

    index = resolve_workload_gpus(1)[0].nvml_index
    rows = []
    with nvml.session():
        h = nvml.device_handle(index)
        load = _load_proc(8.0, 0.25, 0.25)
        try:
            end = time.monotonic() + 8.0
            while time.monotonic() < end and load.poll() is None:
                rows.append((time.monotonic(), *nvml.power_readings_mw(h)))
                time.sleep(0.01)
        finally:
            load.wait(timeout=30)
    a = np.array(rows, dtype=float)
    t, inst, avg, usage, energy = a.T
    # square wave of 0.5 s: the instant field's swing over it, against the averages'
    def swing(x: np.ndarray) -> float:
        x = x[np.isfinite(x)]
        return float(np.percentile(x, 95) - np.percentile(x, 5)) / 1e3 if len(x) else math.nan

    def lag_s(x: np.ndarray) -> float:
        """Delay (s) maximising the correlation of ``x`` with the instant field."""
        dt = float(np.median(np.diff(t)))
        y = inst - np.nanmean(inst)
        z = x - np.nanmean(x)
        best, lag = -np.inf, 0
        for k in range(0, int(2.0 / dt)):
            c = np.nansum(y[: len(y) - k] * z[k:])
            if c > best:
                best, lag = c, k
        return lag * dt

    s_inst, s_avg, s_usage = swing(inst), swing(avg), swing(usage)
    rec["instant_follows_square_wave"] = check(
        s_inst > 50.0 and s_inst > 2 * s_avg, instant_swing_w=s_inst, average_swing_w=s_avg,
        power_usage_swing_w=s_usage)
    lag_avg, lag_usage = lag_s(avg), lag_s(usage)
    rec["average_lags_about_1s"] = check(0.2 <= lag_avg <= 1.5, average_185_lag_s=lag_avg,
                                         power_usage_lag_s=lag_usage)
    trapezoid = getattr(np, "trapezoid", None) or getattr(np, "trapz")  # noqa: B009
    ok = np.isfinite(inst)
    integral_j = float(trapezoid(inst[ok] / 1e3, t[ok]))
    counter_j = float((energy[-1] - energy[0]) / 1e3)
    ratio = counter_j / integral_j if integral_j > 0 else None
    rec["counter_vs_integral"] = check(ratio is not None and 0.98 <= ratio <= 1.02,
                                       counter_j=counter_j, integral_j=integral_j, ratio=ratio)


def step_sampler(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    import numpy as np

    from generation.gpu_devices import resolve_workload_gpus
    from generation.sampler import Sampler, SamplerConfig, read_spool

    index = resolve_workload_gpus(1)[0].nvml_index
    staging = Path(tempfile.mkdtemp(prefix="smoke-sampler-", dir=args.out))
    load = _load_proc(6.0, 0.3, 0.7)
    with Sampler(SamplerConfig(source="nvml", period_ms=100.0, gpu_indices=(index,)), staging):
        load.wait(timeout=60)
        time.sleep(1.0)
    spool = read_spool(staging)
    s = spool.summary
    stale = s.faults.get("stale_power", 0) / max(s.ticks, 1)
    rec["sampler_ticks"] = check(s.missed_ticks <= 1 and (s.lateness_p99_ms or 0) < 20.0
                                 and stale < 0.5, ticks=s.ticks, missed=s.missed_ticks,
                                 lateness_p99_ms=s.lateness_p99_ms,
                                 read_phase_p99_ms=s.read_phase_p99_ms, faults=s.faults,
                                 stale_fraction=stale)
    d = spool.driver_samples
    interval = float(np.median(np.diff(np.sort(d["ts_us"])))) / 1e3 if len(d) > 2 else None
    rec["driver_series"] = check(len(d) > 0, "" if len(d) else "no driver samples recorded",
                                 samples=int(len(d)), median_interval_ms=interval)
    util = np.asarray(spool.samples["gpu_util_pct"], dtype=float)
    rec["sampled_gpu_is_used"] = check(bool(np.nanmax(util) > 50 and np.nanmin(util) < 20),
                                       "utilisation of the sampled GPU must follow the load",
                                       util_max=float(np.nanmax(util)),
                                       util_min=float(np.nanmin(util)))


def step_settings(cpu: bool, args: argparse.Namespace, rec: Recorder) -> None:
    from generation.gpu_devices import resolve_workload_gpus
    from generation.sampler import NoPermission, device_settings, nvml, probe_gpus
    from generation.sampler.journal import journal_path

    index = resolve_workload_gpus(1)[0].nvml_index

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
assert set(STEP_FUNCTIONS) == {s.name for s in STEPS}


# ---------------------------------------------------------------------------------------------
# Orchestration
# ---------------------------------------------------------------------------------------------

def plan() -> dict[str, Any]:
    """The plan ``--plan`` prints: steps, their budgets, what each proves, the wheels to carry."""
    return {"steps": [{"name": s.name, "budget_s": s.budget_s, "proves": s.proves,
                       "optional": s.optional} for s in STEPS],
            "total_budget_s": TOTAL_BUDGET_S, "carry": list(CARRY)}


def run_step(step: Step, args: argparse.Namespace, timeout_s: float) -> dict[str, Any]:
    """Run one step in its own process; a crash or a timeout fails it, keeping its checks."""
    result = Path(args.out) / f"step-{step.name}.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--step", step.name, "--out", str(args.out)]
    if args.cpu_selftest:
        cmd.append("--cpu-selftest")
    if args.allow_settings:
        cmd.append("--allow-settings")
    env = {**os.environ, **OFFLINE_ENV, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if not args.allow_settings:
        env[NO_SETTINGS_ENV] = "1"  # no step may change a clock or a power limit
    started = time.monotonic()
    failure = None
    try:
        proc = subprocess.run(cmd, env=env, timeout=timeout_s, capture_output=True, text=True,
                              cwd=REPO)
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


def _report(args: argparse.Namespace, checks: dict[str, Any], started: float,
            complete: bool) -> dict[str, Any]:
    optional = {s.name for s in STEPS if s.optional}
    required = {k: c for k, c in checks.items() if k.split("_")[0] not in optional
                and not any(k.startswith(o) for o in optional)}
    statuses = [c["status"] for c in checks.values()]
    needed = [c["status"] for c in required.values()]
    passed = complete and "fail" not in statuses and (
        args.cpu_selftest or "skip" not in needed)
    return {"mode": "cpu-selftest" if args.cpu_selftest else "gpu", "complete": complete,
            "settings_changed_allowed": bool(args.allow_settings), "passed": passed,
            "seconds": round(time.monotonic() - started, 1), "budget_s": TOTAL_BUDGET_S,
            "counts": {s: statuses.count(s) for s in ("pass", "fail", "skip")},
            "checks": checks}


def orchestrate(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checks: dict[str, Any] = {}
    started = time.monotonic()
    report_path = out / "gpu_smoke.json"
    only = set(args.only.split(",")) if args.only else None
    for step in STEPS:
        if only is not None and step.name not in only:
            continue
        if args.cpu_selftest and step.gpu_only:
            checks[f"{step.name}_step"] = check(None, "GPU-only step; cpu self-test")
        else:
            budget = step.budget_s * (CPU_SLOWDOWN if args.cpu_selftest else 1.0)
            t = time.monotonic()
            checks.update(run_step(step, args, budget))
            print(f"[gpu_smoke] {step.name}: {time.monotonic() - t:.1f} s of {budget:.0f}",
                  file=sys.stderr)
        _write_json_atomic(report_path, _report(args, checks, started, complete=False))
    report = _report(args, checks, started, complete=True)
    _write_json_atomic(report_path, report)
    print(json.dumps(report, indent=1, default=str))
    return 0 if report["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", default="gpu_smoke_out", help="work folder (default: "
                        "gpu_smoke_out)")
    parser.add_argument("--plan", action="store_true",
                        help="print the steps, their budgets and the wheels to carry; run nothing")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="--plan output format")
    parser.add_argument("--allow-settings", action="store_true",
                        help="really set and restore a power cap (only on a machine you own; "
                        "default: only check that the settings paths refuse)")
    parser.add_argument("--cpu-selftest", action="store_true",
                        help="run the plumbing on CPU (cpu_proxy, tiny models)")
    parser.add_argument("--only", help="comma-separated steps to run (default: all)")
    parser.add_argument("--step", choices=sorted(STEP_FUNCTIONS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.plan:
        p = plan()
        if args.format == "json":
            print(json.dumps(p, indent=1))
        else:
            for s in p["steps"]:
                tag = " (optional)" if s["optional"] else ""
                print(f"{s['name']:<10} {s['budget_s']:>5.0f} s{tag}  {s['proves']}")
            print(f"{'total':<10} {p['total_budget_s']:>5.0f} s")
            print("carry: " + ", ".join(p["carry"]))
        return 0
    args.out = str(Path(args.out).resolve())
    if args.step is None:
        return orchestrate(args)
    import logging

    logging.basicConfig(level=logging.WARNING)
    rec = Recorder(Path(args.out, f"step-{args.step}.json"))
    rec.update({})
    try:
        STEP_FUNCTIONS[args.step](args.cpu_selftest, args, rec)
    except Exception as exc:  # noqa: BLE001 - the step's failure, reported in the JSON
        import traceback

        rec[f"{args.step}_step"] = check(False, f"{type(exc).__name__}: {exc}",
                                         traceback=traceback.format_exc(limit=6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
