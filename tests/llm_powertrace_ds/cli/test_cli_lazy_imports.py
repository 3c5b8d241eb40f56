"""The command line loads the heavy optional libraries only where a command needs them.

Starting ``llm-powertrace`` builds its parser from every command module and every plug-in's;
importing one log (``import powertrace-csv``: read, validate, metrics, publish, card) needs
``numpy`` and ``pyarrow`` only. Each of pandas, scipy, matplotlib and ``datasets`` costs 0.1 to
0.3 CPU seconds a process to import (bench/scale.py, ``cli_import_fixed_cpu_s``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("matplotlib", "pandas", "datasets", "torch", "scipy")
LOADED = f"sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))"


def _child(code: str, tmp_path: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LLM_POWERTRACE_CARD_FIGURES": "0",
           "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_building_the_parser_loads_no_heavy_library(tmp_path):
    code = ("import json, sys\n"
            "from llm_powertrace_ds.cli import build_parser\n"
            "build_parser()\n"
            f"print(json.dumps({LOADED}))\n")
    assert _child(code, tmp_path) == []


def _seed_csv(path: Path, ticks: int = 3000, gpus: int = 4) -> Path:
    """A seed-format long CSV: 5 minutes of 4 GPUs at 100 ms, a stage label per phase."""
    lines = ["run_id,timestamp,time_relative_s,gpu_id,power_w,sm_clock_mhz,gpu_util_pct,"
             "memory_util_pct,memory_used_mb,memory_total_mb,temperature_c,stage"]
    for k in range(ticks):
        stage = ("warmup" if k == 0 else "train" if k == ticks // 4
                 else "checkpoint" if k == ticks // 2 else "")
        for g in range(gpus):
            ms = k * 100 + 2 * g
            s, frac = divmod(ms, 1000)
            stamp = f"2026-05-01T12:{s // 60:02d}:{s % 60:02d}.{frac:03d}Z"
            watts = 300 + 150 * ((k // 37) % 2) + 7 * ((k * 13 + g * 5) % 11)
            lines.append(f"lazy-run,{stamp},{ms / 1000},{g},{watts:.2f},1980,{k % 100},"
                         f"{k % 50},,,,{stage if g == 0 else ''}")
        stage = ""
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_importing_one_log_loads_no_heavy_library(tmp_path):
    """The whole import command (metrics, spectrum, validation, card) without them."""
    csv = _seed_csv(tmp_path / "trace.csv")
    out = tmp_path / "ds"
    code = ("import json, sys\n"
            "from llm_powertrace_ds.cli import main\n"
            f"code = main(['--quiet', 'import', 'powertrace-csv', {str(csv)!r}, '--out', "
            f"{str(out)!r}, '--workload', 'finetune', '--format', 'json'])\n"
            "assert code == 0, code\n"
            f"print(json.dumps({LOADED} + sorted({{'pyarrow.parquet'}} & set(sys.modules))))\n")
    assert _child(code, tmp_path) == []  # Parquet is read for packed Parquet shards only
    assert (out / "README.md").is_file()  # the full card was written (cards registered)
    from llm_powertrace_ds.query import Runs

    (row,) = Runs.load(out, "finetune").to_arrow().to_pylist()
    assert row["run_id"] == "lazy-run" and abs(row["duration_s"] - 299.906) < 1e-9
    assert row["dominant_freq_hz"] is not None  # the spectral test (chi-square) ran
