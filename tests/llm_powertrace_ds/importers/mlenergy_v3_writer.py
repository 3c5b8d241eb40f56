"""ML.ENERGY benchmark v3 ``results.json`` trees, built as the publisher's writer builds them.

``mlenergy-benchmark`` (the writer) needs Python >= 3.12 and a GPU server, so it cannot run
here; the files are built from its source instead: ml-energy/benchmark at commit
c1d6557fbf7c7c495749b0fcf649f71774eabde9, ``mlenergy/benchmark/llm/benchmark.py`` (the
``result`` dict of ``benchmark()`` and the ``result_json`` of ``main()``, keys in its order) and
``mlenergy/benchmark/llm/workloads.py`` (``to_path(of="results")``: the folder layout and the
``key+value`` config name). The power timelines are what Zeus' ``PowerMonitor`` keeps
(ml-energy/zeus at 75a8b9398034eb9baf74ca0a830c2c31bcce52cd, ``zeus/monitor/power.py``: each
domain polled every ``update_period`` and a reading sent only when the power changed), and the
steady-state energy is what ``ZeusMonitor``'s window reads from a GPU's energy counter: the
integral of the true (polled) power, each poll's value held until the next poll. The power
timelines are made by Zeus' own code (``zeus==0.16.0``, the ``publishers`` extra): its polling
loop and ``get_all_power_timelines`` run on a fake clock with the GPUs' readings supplied here
(:func:`zeus_timelines`); the temperature timeline (Zeus' ``TemperatureMonitor``) is kept the
same way by :func:`change_only`.
"""

from __future__ import annotations

import collections
import json
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

T_START = 1_765_000_000.0
"""The benchmark's ``time.time()`` at its start (2025-12-06 UTC)."""
POLL_S = 0.1


@dataclass(frozen=True)
class Tree:
    """One results file of a tree and the figures the writer put in it."""

    root: Path
    results: Path
    data: dict[str, Any]
    polled: dict[int, np.ndarray]
    """Per GPU, the true power at every poll (shape (n, 2): unix s, W) before deduplication."""


class _Clock:
    """Zeus' polling loop on a fake clock: each ``sleep`` is the next poll; the last stops it."""

    def __init__(self, t0: float, polls: int, stop: threading.Event) -> None:
        self.t0, self.polls, self.stop, self.k = t0, polls, stop, 0

    def time(self) -> float:
        return self.t0 + self.k * POLL_S

    def sleep(self, _seconds: float) -> None:
        self.k += 1
        if self.k >= self.polls:
            self.stop.set()


class _Gpus:
    """The GPU under Zeus' device layer: each domain's power (mW, as NVML gives it) per poll."""

    def __init__(self, clock: _Clock, mw: dict[str, dict[int, np.ndarray]]) -> None:
        self.clock, self.mw = clock, mw

    def _read(self, domain: str, gpu: int) -> int:
        return int(round(self.mw[domain][gpu][self.clock.k]))

    def get_instant_power_usage(self, gpu: int) -> int:
        return self._read("device_instant", gpu)

    def get_average_power_usage(self, gpu: int) -> int:
        return self._read("device_average", gpu)

    def get_average_memory_power_usage(self, gpu: int) -> int:
        return self._read("memory_average", gpu)


def zeus_timelines(mw: dict[str, dict[int, np.ndarray]], *, start: float,
                   end: float) -> dict[str, dict[int, list[tuple[float, float]]]]:
    """What ``PowerMonitor(update_period=0.1).get_all_power_timelines(start, end)`` returns.

    Zeus' own polling loop (``_domain_polling_process``: poll every GPU, keep a reading only
    when it changed) runs for each domain on a fake clock over the GPUs above, and Zeus' own
    ``get_all_power_timelines`` turns its samples into the timelines (mW to W).
    """
    import zeus.monitor.power as zp

    domains = [zp.PowerDomain(d) for d in mw]
    gpus_idx = sorted(next(iter(mw.values())))
    polls = len(next(iter(next(iter(mw.values())).values())))
    monitor = object.__new__(zp.PowerMonitor)
    monitor.gpu_indices = gpus_idx
    monitor.measurement_domains = domains
    monitor.data_queues = {}
    monitor.samples = {d: {g: collections.deque() for g in gpus_idx} for d in domains}
    for domain in domains:
        stop = threading.Event()
        clock = _Clock(T_START, polls, stop)
        data: queue.Queue[Any] = queue.Queue()
        gpus = _Gpus(clock, mw)
        with mock.patch.object(zp, "get_gpus", lambda gpus=gpus, **_: gpus), \
                mock.patch.object(zp, "time", clock.time), \
                mock.patch.object(zp, "sleep", clock.sleep):
            zp._domain_polling_process(power_domain=domain, gpu_indices=gpus_idx,
                                       data_queue=data, ready_event=threading.Event(),
                                       stop_event=stop, update_period=POLL_S)
        monitor.data_queues[domain] = data
    return monitor.get_all_power_timelines(start_time=start, end_time=end)


def change_only(points: np.ndarray) -> list[list[float]]:
    """What ``PowerMonitor`` keeps of polled ``[t, W]`` readings: the first and every change."""
    out: list[list[float]] = []
    prev = None
    for t, w in points:
        if w != prev:
            out.append([float(t), float(w)])
            prev = w
    return out


def held_energy_j(points: np.ndarray, a: float, b: float) -> float:
    """The energy counter's reading over ``[a, b]``: each polled value held until the next."""
    t, w = points[:, 0], points[:, 1]
    ends = np.append(t[1:], t[-1] + POLL_S)
    lo, hi = np.maximum(t, a), np.minimum(ends, b)
    return float(np.sum(w * np.clip(hi - lo, 0, None)))


def profile(gpu: int, *, idle_s: float = 10.0, load_s: float = 30.0,
            tail_s: float = 5.0) -> np.ndarray:
    """Polled power of one GPU: idle at 70 W, a load whose level changes every 2 s, idle again."""
    rng = np.random.default_rng(gpu)
    n = int(round((idle_s + load_s + tail_s) / POLL_S))
    t = T_START + np.arange(n) * POLL_S
    w = np.full(n, 70.0 + gpu)
    load = (t >= T_START + idle_s) & (t < T_START + idle_s + load_s)
    levels = np.repeat(rng.uniform(250, 650, size=n // 20 + 1).round(3), 20)[:n]
    w[load] = levels[load]
    return np.column_stack([t, w])


def write_tree(root: Path, *, gpus: int = 2, task: str = "lm-arena-chat",
               org: str = "meta-llama", model: str = "Llama-3.1-8B-Instruct",
               sku: str = "H100", max_num_seqs: int = 64, steady: tuple[float, float] = (
                   12.0, 38.0), tokens_steady: int = 40_000, **overrides: Any) -> Tree:
    """Write one ``results.json`` (and the config files ``mlenergy-data`` reads) under ``root``."""
    config = f"num_gpus+{gpus}+max_num_seqs+{max_num_seqs}+num_request_repeats+1+seed+48105"
    folder = (root / "llm" / sku.lower() / "current" / "run" / "llm" / task / "results" / org
              / model / sku / config)
    folder.mkdir(parents=True)
    polled = {g: profile(g) for g in range(gpus)}
    ss_a, ss_b = T_START + steady[0], T_START + steady[1]
    end = T_START + 45.0
    per_gpu = {str(g): held_energy_j(p, ss_a, ss_b) for g, p in polled.items()}
    entire = {str(g): held_energy_j(p, T_START, end) for g, p in polled.items()}
    energy = sum(per_gpu.values())
    avg = {g: np.column_stack([p[:, 0], np.convolve(p[:, 1], np.ones(10) / 10, "full")[
        :len(p)].round(2)]) for g, p in polled.items()}
    memory = {g: np.column_stack([p[:, 0], (p[:, 1] * 0.1).round(1)]) for g, p in polled.items()}
    temps = {g: np.column_stack([p[::5, 0], (40 + p[::5, 1] / 20).round(0)])
             for g, p in polled.items()}
    outputs = [{"prompt": "hello", "output_text": "hi there", "reasoning_output_text": "",
                "input_len": 12, "output_len": 100 + i, "dataset_output_len": 120,
                "latency": 2.0 + i / 100, "ttft": 0.2, "itl": [0.02] * 99, "success": True,
                "error": "", "energy": energy / tokens_steady * (100 + i)} for i in range(20)]
    total_out = sum(o["output_len"] for o in outputs)
    result: dict[str, Any] = {
        "duration": end - T_START, "completed": 20, "steady_state_duration": ss_b - ss_a,
        "steady_state_energy": energy, "steady_state_energy_per_token": energy / tokens_steady,
        "total_input_tokens": 240, "total_output_tokens": total_out,
        "request_throughput": 20 / 45.0, "output_throughput": total_out / 45.0,
        "total_token_throughput": (total_out + 240) / 45.0,
        "steady_state_measurement": {"time": ss_b - ss_a, "gpu_energy": per_gpu,
                                     "cpu_energy": None, "dram_energy": None,
                                     "soc_energy": None},
        "entire_benchmark_measurement": {"time": end - T_START, "gpu_energy": entire,
                                         "cpu_energy": None, "dram_energy": None,
                                         "soc_energy": None},
        "timeline": {
            "benchmark_start_time": T_START, "benchmark_end_time": end,
            "steady_state_start_time": ss_a, "steady_state_end_time": ss_b,
            "power": json.loads(json.dumps(zeus_timelines(
                {"device_instant": {g: p[:, 1] * 1000 for g, p in polled.items()},
                 "device_average": {g: p[:, 1] * 1000 for g, p in avg.items()},
                 "memory_average": {g: p[:, 1] * 1000 for g, p in memory.items()}},
                start=T_START, end=end))),
            "temperature": {str(g): change_only(p) for g, p in temps.items()},
        },
    }
    for metric in ("ttft", "tpot", "itl", "e2el"):
        base = {"ttft": 200.0, "tpot": 20.0, "itl": 20.0, "e2el": 2100.0}[metric]
        result[f"mean_{metric}_ms"] = base
        result[f"median_{metric}_ms"] = base * 0.98
        result[f"std_{metric}_ms"] = base * 0.1
        for p in ("50", "90", "95", "99"):
            result[f"p{p}_{metric}_ms"] = base * (1 + int(p) / 100)
    result["results"] = outputs
    head = {"date": "20251206-054000", "endpoint_type": "openai-chat",
            "model_id": f"{org}/{model}", "seed": 48105, "num_unique_prompts": 20,
            "num_prompts": 20, "num_request_repeats": 1, "gpu_model": sku, "num_gpus": gpus,
            "max_num_seqs": max_num_seqs, "max_num_batched_tokens": None,
            "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None,
            "max_output_tokens": None}
    data = {**head, **result, **overrides}
    results = folder / "results.json"
    results.write_text(json.dumps(data, indent=2), encoding="utf-8")
    # what mlenergy-data reads beside the tree (configs/vllm/{task}/{org}/{model}/...)
    cfg = root / "configs" / "vllm" / task / org / model
    (cfg / sku).mkdir(parents=True, exist_ok=True)
    (cfg / "model_info.json").write_text(json.dumps(
        {"total_parameters_billion": 8.0, "active_parameters_billion": 8.0,
         "architecture": "Dense", "weight_precision": "bfloat16", "nickname": "Llama 3.1 8B"}),
        encoding="utf-8")
    (cfg / sku / "monolithic.config.yaml").write_text(f"tensor-parallel-size: {gpus}\n",
                                                       encoding="utf-8")
    return Tree(root=root, results=results, data=data, polled=polled)
