"""Launched engines (``vllm``, ``sglang``) run by a Python that has fake engine modules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from generation.serving.launch import (
    SERVER_MODULES,
    EngineConfig,
    config_columns,
    engine_command,
)
from llm_powertrace_ds.errors import MissingExtra
from llm_powertrace_ds.shards import read_run

from .fake_engine import install_fake_engine

ROOT = Path(__file__).resolve().parents[3]

SWEEP = """\
name: engine-{engine}
workload: inference
sampler: {{source: cpu_proxy, period_ms: 50}}
idle_before_s: 0.2
idle_after_s: 0.2
base:
  serving_engine: {engine}
  model: meta-llama/Llama-3.1-8B
  arrival_pattern: closed
  concurrency: 2
  num_requests: {n}
  prompt_len: 8
  output_len: 4
  batch_size: 16
  weight_quant: fp8
  kv_cache_quant: fp8
  engine_block_size: 32
  engine_cuda_graphs: false
  engine_start_timeout_s: 120
  engine_python: {python}
{extra}
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_for(condition, timeout_s: float = 120.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def fake_engines(tmp_path, monkeypatch):
    install_fake_engine(tmp_path / "bin")
    log = tmp_path / "engine-starts.jsonl"
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(log))
    monkeypatch.setenv("FAKE_ENGINE_READY_AFTER_S", "1.0")

    def starts() -> list[dict]:
        if not log.exists():
            return []
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        health = Path(str(log) + ".health")
        if records and health.exists():
            records[-1]["health_ok_wall_s"] = float(health.read_text())
        return records

    return starts


def write(tmp_path: Path, engine: str, n: int = 6, extra: str = "") -> Path:
    path = tmp_path / f"{engine}.yaml"
    path.write_text(SWEEP.format(engine=engine, n=n, extra=extra,
                                 python=tmp_path / "bin" / "python"), encoding="utf-8")
    return path


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_launch_health_before_prepare_end_config_capture_and_clean_stop(
        tmp_path, fake_engines, engine):
    from generation.runner import generate

    report = generate(write(tmp_path, engine), tmp_path / "ds", progress=False)
    assert [o.status for o in report.outcomes] == ["published"], report.outcomes[0].error
    (start,) = fake_engines()
    run = read_run(tmp_path / "ds", report.outcomes[0].run_id)
    m = run.meta
    # start-up ordering: /health was up (weights "loaded") before the measured window began
    prepare_end_ms = next(e.t_ms for e in run.events if e.kind == "prepare_end")
    t0_wall_ms = m["start_time"].timestamp() * 1000
    assert start["health_ok_wall_s"] * 1000 <= t0_wall_ms + prepare_end_ms + 1
    # config capture: read back from the arguments the engine got
    from generation.serving.launch import recorded_args

    module = SERVER_MODULES[engine]
    assert json.loads(m["engine_args"]) == recorded_args(["python", "-m", module,
                                                          *start["argv"]], engine)
    assert json.loads(m["engine_args"])[:2] == ["-m", module]
    assert str(tmp_path) not in m["engine_args"]  # never the interpreter's path
    recorded = json.loads(m["engine_args"])
    assert "--host" not in recorded and "--port" not in recorded  # never the address
    assert "meta-llama/Llama-3.1-8B" not in recorded and m["model_label"] == \
        "meta-llama/Llama-3.1-8B"
    assert m["serving_engine"] == engine and m["model_family"] == "llama"
    assert m["served_by"].startswith(f"owned_by={engine};")
    assert m["engine_version"] == f"{engine}-fake-1.0"
    assert (m["batch_size"], m["tp_size"], m["engine_block_size"]) == (16, 1, 32)
    assert m["engine_quantization"] == "fp8" and m["weight_quant"] == "fp8"
    assert m["engine_kv_cache_dtype"] == ("fp8" if engine == "vllm" else "fp8_e4m3")
    assert m["engine_cuda_graphs"] is False and m["engine_prefix_caching"] is False
    assert m["engine_chunked_prefill"] is True
    assert m["requests_completed"] == 6 and m["weight_quant_backend"] == engine
    # clean stop: the engine and its worker are gone once the run is published
    assert not alive(start["pid"]) and not alive(start["worker_pid"])


def test_extra_args_that_override_a_knob_are_what_the_row_records():
    cfg = EngineConfig("vllm", "m", "m", max_num_seqs=16,
                       extra_args=("--max-num-seqs", "8", "--enable-prefix-caching"))
    cols = config_columns(engine_command(cfg, "127.0.0.1", 1), "vllm")
    assert cols["batch_size"] == 8 and cols["engine_prefix_caching"] is True
    sg = EngineConfig("sglang", "m", "m", chunked_prefill=False, prefix_caching=True)
    cols = config_columns(engine_command(sg, "127.0.0.1", 1), "sglang")
    assert cols["engine_chunked_prefill"] is False and cols["engine_prefix_caching"] is True
    assert cols["engine_block_size"] is None  # not asked for, not reported: unknown


def test_no_orphan_server_after_sigkill_of_the_runner(tmp_path, fake_engines, monkeypatch):
    monkeypatch.setenv("FAKE_ENGINE_TOKEN_DELAY_S", "0.5")
    sweep = write(tmp_path, "vllm", n=1000)
    code = ("import sys; from generation.runner import generate; "
            "generate(sys.argv[1], sys.argv[2], progress=False)")
    runner = subprocess.Popen([sys.executable, "-c", code, str(sweep), str(tmp_path / "ds")],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: bool(fake_engines()), what="the engine to start")
        (start,) = fake_engines()
        wait_for(lambda: bool(list((tmp_path / "ds" / ".staging").glob("inf-*/spool"))),
                 what="the sampler to start (the run is serving)")
        assert alive(start["pid"]) and alive(start["worker_pid"])
        runner.send_signal(signal.SIGKILL)
        runner.wait(30)
        wait_for(lambda: not alive(start["pid"]) and not alive(start["worker_pid"]),
                 timeout_s=90, what="the engine and its worker to exit")
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def test_a_plan_needs_no_engine_a_real_run_names_the_missing_extra(tmp_path, monkeypatch,
                                                                  caplog):
    from generation.runner import generate

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    for engine in ("vllm", "sglang"):
        sweep = tmp_path / f"{engine}.yaml"
        sweep.write_text(SWEEP.format(engine=engine, n=6, extra="", python="no-such-python"),
                         encoding="utf-8")
        caplog.clear()
        report = generate(sweep, tmp_path / "ds", dry_run=True)
        assert [o.status for o in report.outcomes] == ["todo"]
        warned = [r.getMessage() for r in caplog.records if "planned anyway" in r.getMessage()]
        assert len(warned) == 1 and "engine_python 'no-such-python'" in warned[0]
        with pytest.raises(MissingExtra) as info:
            generate(sweep, tmp_path / "ds")
        assert "engine_python 'no-such-python' is not an executable Python" in str(info.value)
        assert "\n" not in str(info.value)


def test_a_local_checkpoint_is_served_by_path_and_published_by_name(tmp_path, fake_engines,
                                                                     monkeypatch):
    from generation.runner import generate

    ckpt = tmp_path / "checkpoints" / "step-1000"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text(json.dumps({"model_name": "acme-llama-ft",
                                                  "vocab_size": 100}), encoding="utf-8")
    monkeypatch.setenv("FAKE_ENGINE_VOCAB", "100")  # ids at or above 100 are refused
    sweep = tmp_path / "local.yaml"
    text = SWEEP.format(engine="vllm", n=6, extra="", python=tmp_path / "bin" / "python")
    sweep.write_text(text.replace("model: meta-llama/Llama-3.1-8B",
                                  "model: ./checkpoints/step-1000"), encoding="utf-8")
    report = generate(sweep, tmp_path / "ds", progress=False)
    assert [o.status for o in report.outcomes] == ["published"], report.outcomes[0].error
    (start,) = fake_engines()
    argv = start["argv"]
    assert argv[argv.index("--model") + 1] == str(ckpt)  # served from the folder
    assert argv[argv.index("--served-model-name") + 1] == "acme-llama-ft"
    m = read_run(tmp_path / "ds", report.outcomes[0].run_id).meta
    assert (m["model_name"], m["model_label"], m["model_family"]) == ("acme-llama-ft",
                                                                 "acme-llama-ft", "llama")
    assert m["requests_completed"] == 6  # every prompt id inside the 100-id vocabulary
    assert m["model_source"] is None  # neither the zoo nor the Hub
    assert not [k for k, v in m.items() if isinstance(v, str) and str(tmp_path) in v]


def test_a_local_checkpoint_whose_config_names_no_model_asks_for_model_name(tmp_path):
    from generation.runner import generate
    from generation.sweep import SweepError

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"_name_or_path": str(ckpt)}),
                                      encoding="utf-8")
    sweep = tmp_path / "local.yaml"
    text = SWEEP.format(engine="vllm", n=6, extra="", python="python")
    sweep.write_text(text.replace("model: meta-llama/Llama-3.1-8B", "model: ./ckpt"),
                     encoding="utf-8")
    with pytest.raises(SweepError) as info:
        generate(sweep, tmp_path / "ds", dry_run=True)
    assert "'ckpt' names no model in its config.json" in str(info.value)
    assert "give model_name" in str(info.value)
    named = text.replace("model: meta-llama/Llama-3.1-8B", "model: ./ckpt\n  model_name: mine")
    sweep.write_text(named, encoding="utf-8")
    report = generate(sweep, tmp_path / "ds", dry_run=True)
    assert [o.status for o in report.outcomes] == ["todo"]
    assert "-mine-" in report.outcomes[0].run_id and str(tmp_path) not in str(report.outcomes)
