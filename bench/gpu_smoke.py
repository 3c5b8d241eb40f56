"""One command that proves, on a GPU machine, that every GPU-only path measures what its row says.

Usage::

    python bench/gpu_smoke.py [--out DIR] [--budget-s 470] [--allow-settings]
    python bench/gpu_smoke.py --cpu-selftest [--out DIR]     # the runner steps on CPU (CI)

Each step runs in its own process with its own time limit (a CUDA crash or a hang fails that step,
not the command), then one JSON object is printed (and written to ``DIR/gpu_smoke.json``)::

    {"mode": "gpu", "passed": true, "checks": {"nvml_probe": {"status": "pass", ...}, ...}}

Every check is ``pass``, ``fail`` or ``skip`` (with ``why``). The exit status is 0 only when every
check passed; with ``--cpu-selftest`` the GPU-only checks are skipped by design and only a failure
counts.

Steps (random-init zoo models only, nothing downloaded, about 8 minutes on one H100/H200):

* ``env`` — versions; CUDA_DEVICE_ORDER; the CUDA device the workload gets is, by UUID, the GPU
  the sampler reads (``generation.gpu_devices``).
* ``nvml`` — the start-up probe (``power_field`` must be ``instant``), per-read latency.
* ``fields`` — a square-wave load (0.5 s on / 0.5 s off) in another process while NVML fields
  186/185/191 are polled every 5 ms: how often each really changes (the driver's update
  interval, from the fields' own timestamps), whether power follows the load, and the energy
  counter against integrated instant power.
* ``sampler`` — the project's sampler at 100 ms under a bursty load: missed ticks, lateness, and
  GPU utilisation that follows the load (the GPU sampled is the GPU used).
* ``settings`` — without ``--allow-settings`` (the default; always on shared or lent machines)
  no clock or power limit is changed: the settings paths must refuse cleanly and the power limit
  must be the same before and after. With it: a cap is set, observed, and restored, and the
  journal is empty again.
* ``finetune`` — a LoRA fine-tune through the real runner under torchrun (bf16), checked column
  by column (dtype, attention, ``prepare_end`` before ``idle_begin``, utilisation in steps vs idle).
* ``qlora`` — a QLoRA fine-tune inline (skipped with the reason when bitsandbytes lacks CUDA).
* ``inference`` — a continuous-batching run (explicit, recorded configuration) and a
  static-batching one with Poisson arrivals and an int4 quantised KV cache (transformers' paged
  cache of continuous batching has no quantised form), through the real runner.
* ``idle`` — three inline runs in one process: their idle paddings must agree (every run creates
  its CUDA context and model before the sampler starts; memory is released between runs).

Not the project's test suite: ``tests/bench/test_gpu_smoke.py`` runs ``--cpu-selftest`` (slow
marker) so that the runner steps cannot rot.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

NO_SETTINGS_ENV = "LLM_POWERTRACE_NO_DEVICE_SETTINGS"
STEPS: dict[str, float] = {  # step -> share of the budget (its time limit)
    "env": 0.06, "nvml": 0.04, "fields": 0.06, "sampler": 0.06, "settings": 0.04,
    "finetune": 0.22, "qlora": 0.14, "inference": 0.2, "idle": 0.18,
}
GPU_ONLY = {"nvml", "fields", "sampler", "settings", "qlora"}


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
        return round(x, 4)
    if isinstance(x, (list, tuple)):
        return [_round(v) for v in x]
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    return x


# ---------------------------------------------------------------------------------------------
# Loads and sweeps
# ---------------------------------------------------------------------------------------------

def _load_proc(seconds: float, on_s: float, off_s: float) -> subprocess.Popen[bytes]:
    """A separate process that loads cuda:0 in a square wave (never the polling process)."""
    code = (
        "import time, torch\n"
        "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16); b = a.clone()\n"
        "torch.cuda.synchronize(); print('ready', flush=True)\n"
        f"end = time.monotonic() + {seconds}\n"
        "while time.monotonic() < end:\n"
        f"    t = time.monotonic() + {on_s}\n"
        "    while time.monotonic() < t:\n"
        "        for _ in range(8): a = (a @ b) * 1e-4\n"
        "        torch.cuda.synchronize()\n"
        f"    time.sleep({off_s})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()  # "ready": CUDA context and buffers exist before timing starts
    return proc


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


def _window_mean(run: Any, signal: str, begin: str, end: str) -> float | None:
    """Mean over devices and samples of ``signal`` between the first ``begin`` and ``end``."""
    import numpy as np

    b, e = _first(run, begin), _first(run, end)
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


# ---------------------------------------------------------------------------------------------
# Steps (each returns {check name: record}); ``cpu`` = --cpu-selftest
# ---------------------------------------------------------------------------------------------

def step_env(cpu: bool, args: argparse.Namespace) -> dict[str, Any]:
    import importlib.metadata as md

    versions: dict[str, Any] = {}  # dist -> version or None
    for dist in ("torch", "transformers", "peft", "trl", "accelerate", "nvidia-ml-py",
                 "optimum-quanto", "bitsandbytes", "datasets"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = None
    out = {"versions": check(True, **versions)}
    if cpu:
        out["gpus_by_uuid"] = check(None, "cpu self-test")
        return out
    import torch

    from generation.gpu_devices import check_same_gpus, resolve_workload_gpus, torch_device_uuids

    out["cuda_available"] = check(torch.cuda.is_available(),
                                  device_order=os.environ.get("CUDA_DEVICE_ORDER"))
    gpus = resolve_workload_gpus(1)
    try:
        check_same_gpus(torch_device_uuids([0]), gpus)
        out["gpus_by_uuid"] = check(True, nvml_index=gpus[0].nvml_index)
    except Exception as exc:  # noqa: BLE001 - reported as the check's failure
        out["gpus_by_uuid"] = check(False, f"{type(exc).__name__}: {exc}")
    return out


def step_nvml(cpu: bool, args: argparse.Namespace) -> dict[str, Any]:
    from generation.gpu_devices import resolve_workload_gpus
    from generation.sampler.nvml import NvmlSource

    index = resolve_workload_gpus(1)[0].nvml_index
    source = NvmlSource([index])
    [dev] = source.open()
    try:
        lat = []
        for _ in range(300):
            t = time.perf_counter()
            source.read(0)
            lat.append((time.perf_counter() - t) * 1e3)
    finally:
        source.close()
    lat.sort()
    p99 = lat[int(0.99 * (len(lat) - 1))]
    return {"nvml_probe": check(source.power_field == "instant",
                                "" if source.power_field == "instant" else
                                "field 186 unusable: power_w falls back to a 1 s average",
                                gpu=dev.name, power_field=source.power_field,
                                probes=dev.details.get("probes")),
            "nvml_read_latency": check(p99 < 20.0, p50_ms=statistics.median(lat), p99_ms=p99)}


def step_fields(cpu: bool, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from generation.gpu_devices import resolve_workload_gpus
    from generation.sampler.nvml import NvmlSource

    source = NvmlSource([resolve_workload_gpus(1)[0].nvml_index])
    source.open()
    load = _load_proc(8.0, 0.5, 0.5)
    rows = []
    try:
        end = time.monotonic() + 8.0
        while time.monotonic() < end and load.poll() is None:
            r = source.read(0)
            rows.append((time.monotonic(), r.power_mw, r.power_avg_mw, r.energy_mj,
                         r.power_ts_us, r.gpu_util_pct))
            time.sleep(0.005)
    finally:
        load.wait(timeout=30)
        source.close()
    a = np.array(rows, dtype=float)
    t, p, pavg, e, ts, util = a.T
    stamps = np.unique(ts[np.isfinite(ts)])
    interval_ms = float(np.median(np.diff(stamps)) / 1e3) if len(stamps) > 2 else None

    def change_rate(x: np.ndarray) -> float:
        x = x[np.isfinite(x)]
        return float(np.mean(x[1:] != x[:-1])) if len(x) > 1 else 0.0

    # trapezoid since numpy 2.0; trapz (numpy < 2.0, removed in 2.4) for the oldest numpy allowed
    trapezoid = getattr(np, "trapezoid", None) or getattr(np, "trapz")  # noqa: B009
    integral_j = float(trapezoid(p / 1e3, t))
    counter_j = float((e[-1] - e[0]) / 1e3)
    ratio = counter_j / integral_j if integral_j > 0 else None
    busy = util > 50
    contrast = float(p[busy].mean() - p[~busy].mean()) / 1e3 if busy.any() and (~busy).any() \
        else None
    return {
        "field_update_rates": check(interval_ms is not None, reads=len(a),
                                    instant_186_changes_per_read=change_rate(p),
                                    average_185_changes_per_read=change_rate(pavg),
                                    energy_191_changes_per_read=change_rate(e),
                                    instant_186_update_interval_ms=interval_ms),
        "power_follows_load": check(contrast is not None and contrast > 20.0,
                                    busy_minus_idle_w=contrast),
        "counter_vs_integral": check(ratio is not None and 0.9 <= ratio <= 1.1,
                                     counter_j=counter_j, integral_j=integral_j, ratio=ratio),
    }


def step_sampler(cpu: bool, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from generation.gpu_devices import resolve_workload_gpus
    from generation.sampler import Sampler, SamplerConfig, read_spool

    index = resolve_workload_gpus(1)[0].nvml_index
    staging = Path(tempfile.mkdtemp(prefix="smoke-sampler-", dir=args.out))
    load = _load_proc(8.0, 0.3, 0.7)
    with Sampler(SamplerConfig(source="nvml", period_ms=100.0, gpu_indices=(index,)), staging):
        load.wait(timeout=60)
        time.sleep(1.0)
    spool = read_spool(staging)
    s = spool.summary
    util = np.asarray(spool.samples["gpu_util_pct"], dtype=float)
    return {
        "sampler_ticks": check(s.missed_ticks <= 1 and (s.lateness_p99_ms or 0) < 20.0,
                               ticks=s.ticks, missed=s.missed_ticks,
                               lateness_p50_ms=s.lateness_p50_ms,
                               lateness_p99_ms=s.lateness_p99_ms, faults=s.faults),
        "sampled_gpu_is_used": check(bool(np.nanmax(util) > 50 and np.nanmin(util) < 20),
                                     "utilisation of the sampled GPU must follow the load",
                                     util_max=float(np.nanmax(util)),
                                     util_min=float(np.nanmin(util))),
    }


def step_settings(cpu: bool, args: argparse.Namespace) -> dict[str, Any]:
    from generation.gpu_devices import resolve_workload_gpus
    from generation.sampler import NoPermission, device_settings, nvml, probe_gpus
    from generation.sampler.journal import journal_path

    index = resolve_workload_gpus(1)[0].nvml_index

    def limit() -> tuple[int, int]:
        with nvml.session():
            h = nvml.device_handle(index)
            return nvml.power_limit_mw(h), nvml.default_power_limit_mw(h)

    before = limit()
    [probe] = probe_gpus([index])
    if not args.allow_settings:
        os.environ[NO_SETTINGS_ENV] = "1"
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
        after = limit()
        return {"settings_refused_cleanly": check(
            refused and clock_refused and before == after and probe.power_limit_refusal
            is not None, why if refused else "a setting was applied",
            power_limit_w_before=before[0] / 1e3, power_limit_w_after=after[0] / 1e3,
            probe_refusal=probe.power_limit_refusal)}
    target = max(probe.min_power_limit_w or 0, 0.8 * before[1] / 1000.0)
    with device_settings([index], power_limit_w=target) as applied:
        observed = applied[0].observed()
        journalled = journal_path().exists()
    after = limit()
    return {"settings_set_and_restored": check(
        journalled and after == before and not journal_path().exists(),
        requested_w=target, observed=observed, restored_w=after[0] / 1e3)}


def _base_sweep(name: str, cpu: bool, workload: str) -> dict[str, Any]:
    return {"name": name, "workload": workload,
            "sampler": {"source": "cpu_proxy" if cpu else "nvml", "period_ms": 100},
            "idle_before_s": 1.0 if cpu else 3.0, "idle_after_s": 0.5 if cpu else 2.0}


def step_finetune(cpu: bool, args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out) / "ds-finetune"
    data = _base_sweep("smoke-finetune", cpu, "finetune")
    data["launcher"] = "torchrun"
    data["base"] = {"model": "llama-tiny" if cpu else "Qwen2.5-0.5B", "method": "lora",
                    "lora_rank": 8, "batch_size": 2 if cpu else 8, "seq_len": 32 if cpu else 512,
                    "max_steps": 3 if cpu else 40, "precision": "fp32" if cpu else "bf16"}
    outcomes = _generate(_sweep(Path(args.out) / "finetune.yaml", data), out)
    res = {"finetune_published": _published(outcomes)}
    if res["finetune_published"]["status"] != "pass":
        return res
    run = _run_of(out, outcomes[0])
    m = run.meta
    want = "float32" if cpu else "bfloat16"
    res["finetune_dtype_columns"] = check(
        m["weights_dtype"].split(",")[0] == want and m["compute_dtype"] == want
        and bool(m["attn_implementation"]), weights_dtype=m["weights_dtype"],
        compute_dtype=m["compute_dtype"], attn_implementation=m["attn_implementation"],
        tf32=m["tf32"])
    res["finetune_prepare_before_idle"] = _ordering(run)
    if cpu:
        res["finetune_util_follows_steps"] = check(None, "cpu self-test")
    else:
        steps = _window_mean(run, "gpu_util_pct", "step_begin", "step_end")
        idle = _window_mean(run, "gpu_util_pct", "idle_begin", "idle_end")
        res["finetune_util_follows_steps"] = check(
            steps is not None and idle is not None and steps > idle + 20,
            util_in_steps=steps, util_idle=idle, power_field=m["power_field"])
    return res


def step_qlora(cpu: bool, args: argparse.Namespace) -> dict[str, Any]:
    from generation.workloads.quant import bitsandbytes_problem

    problem = bitsandbytes_problem()
    if problem:
        return {"qlora": check(None, problem)}
    out = Path(args.out) / "ds-qlora"
    data = _base_sweep("smoke-qlora", cpu, "finetune")
    data["base"] = {"model": "Qwen2.5-0.5B", "method": "qlora", "lora_rank": 8,
                    "batch_size": 8, "seq_len": 512, "max_steps": 20, "precision": "bf16"}
    outcomes = _generate(_sweep(Path(args.out) / "qlora.yaml", data), out)
    res = {"qlora_published": _published(outcomes)}
    if res["qlora_published"]["status"] == "pass":
        m = _run_of(out, outcomes[0]).meta
        res["qlora_dtype_columns"] = check(
            "nf4" in m["weights_dtype"] and m["compute_dtype"] == "bfloat16",
            weights_dtype=m["weights_dtype"], compute_dtype=m["compute_dtype"])
    return res


def step_inference(cpu: bool, args: argparse.Namespace) -> dict[str, Any]:
    from generation.workloads import get_workload
    from generation.workloads.quant import installed

    out = Path(args.out) / "ds-inference"
    model = "llama-tiny" if cpu else "Qwen2.5-0.5B"
    common = {"model": model, "prompt_len": 16 if cpu else 256, "output_len": 4 if cpu else 64,
              "num_requests": 12 if cpu else 64, "precision": "fp32" if cpu else "bf16"}
    data = _base_sweep("smoke-inference", cpu, "inference")
    kv = "int4" if installed("optimum.quanto") else "none"
    data["base"] = common
    data["zip"] = [{  # run 1: continuous batching; run 2: static, Poisson, quantised KV cache
        "batching": ["continuous", "static"],
        "concurrency": [4 if cpu else 16, 4],
        "arrival_pattern": ["closed", "poisson"],
        "arrival_rate_rps": [None, 4.0 if cpu else 20.0],
        "kv_cache_quant": ["none", kv],
        "cb_use_cuda_graph": [not cpu, False],
    }]
    get_workload("inference")  # a missing extra fails here, with its hint
    outcomes = _generate(_sweep(Path(args.out) / "inference.yaml", data), out)
    res = {"inference_published": _published(outcomes)}
    runs = {o.run_id: _run_of(out, o) for o in outcomes if o.status == "published"}
    for run in runs.values():
        m = run.meta
        if m["batching"] == "continuous":
            res["cb_config_recorded"] = check(
                m["cb_attn_implementation"] == "sdpa" and m["cb_use_cuda_graph"] is (not cpu)
                and m["cb_use_async_batching"] is False,
                cb_attn_implementation=m["cb_attn_implementation"],
                cb_use_cuda_graph=m["cb_use_cuda_graph"],
                cb_use_async_batching=m["cb_use_async_batching"])
            res["inference_prepare_before_idle"] = _ordering(run)
        else:
            want = "float32" if cpu else "bfloat16"
            res["static_poisson_kv"] = check(
                m["weights_dtype"] == want and m["requests_completed"] == common["num_requests"],
                "" if kv != "none" else "optimum-quanto missing: KV cache not quantised",
                kv_cache_quant=m["kv_cache_quant"], weights_dtype=m["weights_dtype"],
                compute_dtype=m["compute_dtype"], requests=m["requests_completed"])
    return res


def step_idle(cpu: bool, args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out) / "ds-idle"
    data = _base_sweep("smoke-idle", cpu, "finetune")
    data["repeats"] = 3
    data["launcher"] = "inline"
    data["base"] = {"model": "llama-tiny" if cpu else "Qwen2.5-0.5B", "method": "lora",
                    "lora_rank": 8, "batch_size": 2, "seq_len": 32 if cpu else 256,
                    "max_steps": 3 if cpu else 10, "precision": "fp32" if cpu else "bf16"}
    outcomes = _generate(_sweep(Path(args.out) / "idle.yaml", data), out)
    res = {"idle_runs_published": _published(outcomes)}
    means = [_window_mean(_run_of(out, o), "power_w", "idle_begin", "idle_end")
             for o in outcomes if o.status == "published"]
    known = [m for m in means if m is not None]
    ok = len(known) == 3
    spread = (max(known) - min(known)) / statistics.fmean(known) if ok else None
    limit = 0.25 if cpu else 0.10  # cpu_proxy: the modelled idle follows real CPU noise
    res["idle_baselines_agree"] = check(ok and spread is not None and spread <= limit,
                                        idle_mean_w=means, relative_spread=spread,
                                        limit=limit)
    return res


STEP_FUNCTIONS: dict[str, Callable[[bool, argparse.Namespace], dict[str, Any]]] = {
    "env": step_env, "nvml": step_nvml, "fields": step_fields, "sampler": step_sampler,
    "settings": step_settings, "finetune": step_finetune, "qlora": step_qlora,
    "inference": step_inference, "idle": step_idle,
}


# ---------------------------------------------------------------------------------------------
# Orchestration
# ---------------------------------------------------------------------------------------------

def run_step(name: str, args: argparse.Namespace, timeout_s: float) -> dict[str, Any]:
    """Run one step in its own process; a crash or a timeout is that step's failure."""
    result = Path(args.out) / f"step-{name}.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--step", name, "--out", str(args.out)]
    if args.cpu_selftest:
        cmd.append("--cpu-selftest")
    if args.allow_settings:
        cmd.append("--allow-settings")
    env = dict(os.environ)
    if not args.allow_settings:
        env[NO_SETTINGS_ENV] = "1"  # no step may change a clock or a power limit
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=env, timeout=timeout_s, capture_output=True, text=True,
                              cwd=REPO)
    except subprocess.TimeoutExpired:
        return {f"{name}_step": check(False, f"timed out after {timeout_s:.0f} s")}
    if proc.returncode != 0 or not result.exists():
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
        return {f"{name}_step": check(False, f"exit {proc.returncode}: {tail}",
                                      seconds=time.monotonic() - started)}
    return json.loads(result.read_text())


def orchestrate(args: argparse.Namespace) -> int:
    Path(args.out).mkdir(parents=True, exist_ok=True)
    checks: dict[str, Any] = {}
    start = time.monotonic()
    for name, share in STEPS.items():
        if args.cpu_selftest and name in GPU_ONLY:
            checks[f"{name}_step"] = check(None, "GPU-only step; cpu self-test")
            continue
        budget = max(60.0, share * args.budget_s * (4.0 if args.cpu_selftest else 1.0))
        t = time.monotonic()
        checks.update(run_step(name, args, budget))
        print(f"[gpu_smoke] {name}: {time.monotonic() - t:.1f} s", file=sys.stderr)
    statuses = [c["status"] for c in checks.values()]
    passed = "fail" not in statuses and (args.cpu_selftest or "skip" not in statuses)
    report = {"mode": "cpu-selftest" if args.cpu_selftest else "gpu",
              "settings_changed_allowed": bool(args.allow_settings), "passed": passed,
              "seconds": round(time.monotonic() - start, 1),
              "counts": {s: statuses.count(s) for s in ("pass", "fail", "skip")},
              "checks": checks}
    text = json.dumps(report, indent=1, default=str)
    (Path(args.out) / "gpu_smoke.json").write_text(text)
    print(text)
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="gpu_smoke_out", help="work folder (default: "
                        "gpu_smoke_out)")
    parser.add_argument("--budget-s", type=float, default=470.0,
                        help="total time budget split over the steps (default: 470)")
    parser.add_argument("--allow-settings", action="store_true",
                        help="really set and restore a power cap (only on a machine you own; "
                        "default: only check that the settings paths refuse)")
    parser.add_argument("--cpu-selftest", action="store_true",
                        help="run the runner steps on CPU (cpu_proxy, tiny models)")
    parser.add_argument("--step", choices=sorted(STEP_FUNCTIONS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out = str(Path(args.out).resolve())
    if args.step is None:
        return orchestrate(args)
    import logging

    logging.basicConfig(level=logging.WARNING)
    try:
        result = STEP_FUNCTIONS[args.step](args.cpu_selftest, args)
    except Exception as exc:  # noqa: BLE001 - the step's failure, reported in the JSON
        import traceback

        result = {f"{args.step}_step": check(False, f"{type(exc).__name__}: {exc}",
                                             traceback=traceback.format_exc(limit=6))}
    Path(args.out, f"step-{args.step}.json").write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
