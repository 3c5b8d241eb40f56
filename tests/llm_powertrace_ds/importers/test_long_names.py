"""A log whose companion file's name would exceed the file system's 255-byte limit.

The sidecar (``<stem>.job_info.yaml``) or metadata (``<stem>.json``) of such a log cannot exist,
so the import goes on without one; before, ``Path.is_file`` raised ``OSError: File name too
long`` (Python 3.11 ignores only "not found"-like errors there) and the import crashed.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.common import companion
from llm_powertrace_ds.importers.nvidia_smi import sidecar_path
from llm_powertrace_ds.importers.powertrace_csv import meta_file

from .test_nvidia_smi import units_log
from .test_powertrace_csv import trace_csv

NAME_MAX = os.pathconf("/", "PC_NAME_MAX") if hasattr(os, "pathconf") else 255


@pytest.mark.skipif(NAME_MAX != 255, reason="the file system's name limit is not 255 bytes")
def test_nvidia_smi_log_with_a_name_too_long_for_its_sidecar(tmp_path):
    path = units_log(tmp_path / ("n" * (NAME_MAX - len(".csv")) + ".csv"))
    assert len(path.name) == NAME_MAX  # the log itself exists
    assert sidecar_path(path) is None
    run = import_file("nvidia-smi", path, workload="inference")
    assert run.run_id.startswith("import-nvidia-smi-") and "model_name" not in run.meta


@pytest.mark.skipif(NAME_MAX != 255, reason="the file system's name limit is not 255 bytes")
def test_powertrace_csv_with_a_name_too_long_for_its_json(tmp_path):
    path = trace_csv(tmp_path / ("p" * (NAME_MAX - len(".csv")) + ".csv"), ticks=3)
    assert meta_file(path, None) is None
    run = import_file("powertrace-csv", path, workload="finetune")
    assert run.meta["num_gpus"] == 4 and run.meta["model_family"] == "unknown"


def test_other_file_system_errors_still_raise(tmp_path, monkeypatch):
    (tmp_path / "a.json").write_text("{}", encoding="utf-8")
    assert companion(tmp_path / "a.csv", "a.json") == tmp_path / "a.json"
    assert companion(tmp_path / "a.csv", "b.json") is None

    def broken(self):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(Path, "is_file", broken)
    with pytest.raises(OSError, match="Input/output"):
        companion(tmp_path / "a.csv", "a.json")
