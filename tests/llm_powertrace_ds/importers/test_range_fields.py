"""A value outside its physical range is reported under the log's own column name.

``assemble_run`` passes the importer's column map to the range check, so the error names the
file's column (``memory_util_pct``), as a parse error in the same column does, not the
project's signal (``mem_util_pct``).
"""

from __future__ import annotations

import json

import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file


def _error(tmp_path, fmt: str, text: str, meta: dict | None = None) -> InputError:
    path = tmp_path / "log.txt"
    path.write_text(text)
    kw = {}
    if meta is not None:
        (tmp_path / "meta.json").write_text(json.dumps(meta))
        kw["meta_path"] = tmp_path / "meta.json"
    with pytest.raises(InputError) as exc:
        import_file(fmt, path, workload="finetune", **kw)
    return exc.value


@pytest.mark.parametrize(("fmt", "text", "meta", "line", "field", "reason"), [
    ("powertrace-csv", "run_id,timestamp,gpu_id,power_w,memory_util_pct\n"
     "r,2026-01-01T00:00:00Z,0,100,-1\n", None, 2, "memory_util_pct",
     "value -1 of GPU 0 is outside the physical range 0..100 of mem_util_pct"),
    ("powertrace-csv", "run_id,timestamp,gpu_id,power_w,temperature_c\n"
     "r,2026-01-01T00:00:00Z,0,100,40\nr,2026-01-01T00:00:00.1Z,0,100,900\n", None, 3,
     "temperature_c", "value 900 of GPU 0 is outside the physical range -40..150 of temp_c"),
    ("nvidia-smi", "timestamp, index, power.draw [W], utilization.memory [%]\n"
     "2026/11/30 12:00:00.000, 0, 100 W, 150 %\n", None, 2, "utilization.memory",
     "value 150 of GPU 0 is outside the physical range 0..100 of mem_util_pct"),
    ("nvidia-smi", "timestamp, index, power.draw.instant [W]\n"
     "2026/11/30 12:00:00.000, 0, 99999 W\n", None, 2, "power.draw.instant",
     "value 99999 of GPU 0 is outside the physical range 0..5000 of power_w"),
    ("dcgm", "#Entity POWER TMPTR\nGPU 0 100 40\nGPU 0 100 900\n", {"sample_period_ms": 100}, 3,
     "TMPTR", "value 900 of GPU 0 is outside the physical range -40..150 of temp_c"),
])
def test_range_errors_name_the_logs_column(tmp_path, fmt, text, meta, line, field, reason):
    err = _error(tmp_path, fmt, text, meta)
    assert (err.reason, err.file, err.line, err.field) == \
        (reason, str(tmp_path / "log.txt"), line, field)
