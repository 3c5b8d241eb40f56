"""Shared fixtures: synthetic runs generated into tmp_path, the external-data location."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
# LLM_POWERTRACE_EXTERNAL points elsewhere (e.g. from a git worktree, whose parent has no shared/)
EXTERNAL = Path(os.environ.get("LLM_POWERTRACE_EXTERNAL") or REPO.parent / "shared" / "data" / "external")
if str(REPO) not in sys.path:  # upload.py lives at the repo root
    sys.path.insert(0, str(REPO))


def synthetic_run(run_id: str = "run-a", *, workload: str = "finetune", platform: str = "l40s",
                  family: str = "llama", devices: int = 2, n: int = 200, period_ms: int = 100,
                  seed: int = 0, with_requests: bool = False, **meta):
    """A small, deterministic ``Run`` (sine-shaped power with noise, events, optional requests)."""
    from llm_powertrace_ds.run import DeviceSeries, Event, Run

    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.int64) * period_ms
    devs = []
    for g in range(devices):
        power = 200 + 80 * np.sin(t / 2000.0 + g) + rng.normal(0, 3, n)
        util = np.clip(power / 4, 0, 100)
        devs.append(DeviceSeries(g, t + 2 * g, {"power_w": power, "gpu_util_pct": util,
                                                "temp_c": np.full(n, np.nan)},
                                 gpu_name="NVIDIA L40S", gpu_uuid_hash=f"h{g}",
                                 power_limit_w=350.0, default_power_limit_w=350.0))
    base = {"run_id": run_id, "workload": workload, "platform": platform, "model_family": family,
            "model_name": f"{family}-tiny", "sweep": "test", "repeat": 0, "num_gpus": devices,
            "sample_period_ms": float(period_ms), "sampler": "nvml", "power_field": "instant",
            "start_time": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)}
    if workload == "finetune":
        base.update(method="lora", batch_size=4, seq_len=128, tokens=10_000,
                    gradient_checkpointing=True)
    else:
        base.update(concurrency=4, batching="static", arrival_pattern="closed", tokens_out=2000)
    base.update(meta)
    events = [Event(0, "idle_begin"), Event(1000, "idle_end"),
              Event(1100, "step_begin", step=1, rank=0), Event(1900, "step_end", step=1, rank=0),
              Event(1100, "step_begin", step=1, rank=1)]
    requests = None
    if with_requests:
        requests = [{"request_id": f"r{i}", "arrival_ms": 100 * i, "start_ms": 100 * i + 5,
                     "first_token_ms": 100 * i + 50, "finish_ms": 100 * i + 400,
                     "prompt_tokens": 32, "requested_output_tokens": 16, "output_tokens": 16,
                     "status": "ok"} for i in range(5)]
    return Run(base, devs, events, requests)


@pytest.fixture(autouse=True)
def _no_card_figures_by_default(monkeypatch):
    """Drawing card figures after every publish costs ~1 s each, so it is off by default.

    Tests that check figures opt in with ``cards.builder.CardOptions(figures=True)``.
    """
    monkeypatch.setenv("LLM_POWERTRACE_CARD_FIGURES", "0")


@pytest.fixture
def make_run():
    """Factory fixture for synthetic runs (see ``synthetic_run``)."""
    return synthetic_run


@pytest.fixture
def external_dir() -> Path:
    """Real traces measured by others (never committed); skips when absent."""
    if not EXTERNAL.is_dir():
        pytest.skip(f"external traces not present at {EXTERNAL}")
    return EXTERNAL


@pytest.fixture(autouse=True)
def _gpu_settings_journal_in_tmp(monkeypatch, tmp_path_factory):
    """The GPU-settings journal (generation.sampler.journal) never touches the user's state."""
    path = tmp_path_factory.mktemp("gpu-journal") / "journal.json"
    monkeypatch.setenv("LLM_POWERTRACE_GPU_JOURNAL", str(path))
