"""``generate --dry-run`` plans every shipped sweep on any machine; non-TTY progress lines."""

from __future__ import annotations

import csv
import doctest
import importlib.util
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generation import planning, runner
from llm_powertrace_ds import cli

REPO = Path(__file__).resolve().parents[2]
SWEEPS = sorted((REPO / "generation" / "sweeps").glob("*.yaml"))


def _nvml_usable() -> bool:
    from generation.sampler import SamplerConfig, SamplerError, resolve_source

    try:
        return resolve_source(SamplerConfig(source="nvml")) == "nvml"
    except SamplerError:
        return False


def test_every_campaign_is_shipped():
    assert len([p for p in SWEEPS if not p.name.startswith("demo")]) == 17


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.stem)
def test_dry_run_of_every_shipped_sweep(sweep, tmp_path, capsys, caplog):
    code = cli.main(["generate", str(sweep), "--out", str(tmp_path / "ds"), "--dry-run",
                     "--format", "csv"])
    out, err = capsys.readouterr()
    engine = (yaml.safe_load(sweep.read_text()).get("base") or {}).get("serving_engine")
    assert code == 0, err
    if engine in ("vllm", "sglang") and importlib.util.find_spec(engine) is None \
            and shutil.which(engine) is None:
        # an engine sweep without its engine plans all the same, saying so once
        warned = [r.getMessage() for r in caplog.records if "planned anyway" in r.getMessage()]
        assert len(warned) == 1 and f"pip install 'llm-powertrace[{engine}]'" in warned[0]
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and {r["status"] for r in rows} == {"todo"}
    source = yaml.safe_load(sweep.read_text())["sampler"]["source"]
    if source == "nvml":
        assert "sampler: nvml, every 100 ms" in err
        if not _nvml_usable():
            assert "planned for an assumed GPU machine (NVML is not usable here)" in err
    assert "time: at least " in err
    assert not (tmp_path / "ds").exists()  # a dry run writes nothing


def test_a_real_run_still_needs_the_gpu(tmp_path):
    if _nvml_usable():
        pytest.skip("NVML is usable here")
    from llm_powertrace_ds.errors import InputError

    with pytest.raises(InputError, match="NVML"):
        runner.generate(REPO / "generation" / "sweeps" / "inference-quant.yaml", tmp_path / "ds",
                        progress=False)


def test_estimate_counts_padding_and_targets():
    from generation.sweep import load_sweep, plan

    sweep = load_sweep(REPO / "generation" / "sweeps" / "finetune-scale.yaml")
    runs = plan(sweep, planning.planning_machine(sweep.sampler))
    est = planning.estimate(sweep, runs)
    # 132 runs x (60 s idle + 600 s training + 60 s idle)
    assert len(runs) == 132 and est.seconds == 132 * 720 and est.unknown_runs == 0
    assert est.text().startswith("at least 26.4 h")


def test_progress_line_doctest():
    globs = {"Outcome": runner.Outcome, "progress_line": runner.progress_line}
    tester = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(runner.progress_line, "progress_line", globs=globs):
        tester.run(test)
    assert tester.tries == 1 and tester.failures == 0
    line = runner.progress_line("s", 1, 4, runner.Outcome(0, "r", "published", 61.0), 61.0)
    assert line == "s: run 1/4 r published in 1 min 01 s; elapsed 1 min 01 s, ETA 3 min 03 s"


TWO_RUNS = """\
name: two
workload: finetune
sampler: {source: cpu_proxy, period_ms: 50}
idle_before_s: 0.2
idle_after_s: 0.2
base: {method: lora, lora_rank: 4, batch_size: 1, seq_len: 16, max_steps: 2,
       checkpoint_every_steps: 2}
grid:
  model: [llama-tiny, gpt2-tiny]
"""


def test_non_tty_progress_lines(tmp_path):
    """Output to a pipe (CI, nohup, Slurm) gets one line per run with the ETA."""
    sweep = tmp_path / "two.yaml"
    sweep.write_text(TWO_RUNS)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "llm_powertrace_ds.cli", "generate", str(sweep),
                           "--out", str(tmp_path / "ds")], capture_output=True, text=True,
                          env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("two: run ")]
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith("two: run 1/2 ") and " published in " in lines[0]
    assert "ETA" in lines[0] and lines[1].endswith("ETA 0 s")

    # the query API on these real (cpu_proxy, TRL) runs: node totals agree with stored metrics
    import numpy as np

    from llm_powertrace_ds.query import Runs

    runs = Runs.load(tmp_path / "ds", workload="finetune")
    assert len(runs) == 2 and set(runs.to_arrow().column("platform").to_pylist()) == {"cpu_proxy"}
    per: dict[str, list] = {}
    for run, trace in runs.traces():  # levels are taken at the sampling ticks: sum per tick
        per.setdefault(run.run_id, []).append(np.asarray(trace.power_w, dtype=np.float64))
    for run, _ in runs.traces(total=True):
        n = min(len(a) for a in per[run.run_id])
        x = np.sum([a[:n] for a in per[run.run_id]], axis=0)
        x = x[np.isfinite(x)]
        assert float(np.percentile(x, 99)) == pytest.approx(run.p99_power_w, rel=1e-5)
