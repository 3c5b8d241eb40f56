"""Exact pins of ``import_stream``, found unpinned by mutation testing.

Mutation testing (mutmut) showed that ``import_stream`` could drop the platform, GPU count or
time zone of its options, lose a result's path or platform, refresh the card after every file,
or write (or skip) the YAML ``configs:`` block at the wrong time, and no test noticed. These
tests import small generated nvidia-smi logs through it and pin each result and the folder.
"""

from __future__ import annotations

import datetime as dt

import pyarrow.ipc
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.publish import ImportedFile, ImportOptions, import_stream

from .test_nvidia_smi import T0, indexed_log


def files_under(root):  # noqa: ANN001, ANN201
    """Every file under ``root`` but lock files, relative, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.suffix != ".lock")


def runs_row(root, result: ImportedFile) -> dict:  # noqa: ANN001
    (rel,) = [f for f in result.files if f.startswith("data/inference_runs/")]
    with pyarrow.ipc.open_stream(root / rel) as reader:
        (row,) = reader.read_all().to_pylist()
    return row


def test_options_reach_the_importer_and_the_result_is_exact(tmp_path):
    log = indexed_log(tmp_path / "a.csv", ticks=5)
    run_id = import_file("nvidia-smi", log, workload="inference").run_id
    root = tmp_path / "ds"
    options = ImportOptions(fmt="nvidia-smi", workload="inference", platform="l4", num_gpus=4,
                            tz="America/Phoenix")
    (res,) = import_stream([log], root, options, configs_block=False)
    assert res == ImportedFile(
        path=log, run_id=run_id, platform="l4", num_gpus=2, samples=10,
        flags=("missing_gpu", "power_is_1s_average", "gpu_count_mismatch", "precision_unknown",
               "power_limit_from_spec"),
        files=(f"data/inference_runs/l4/{run_id}.arrow",
               f"data/inference/l4/unknown/{run_id}.arrow"))
    row = runs_row(root, res)
    assert row["platform"] == "l4" and row["num_gpus"] == 4  # the option, not the log's 2
    # Phoenix is UTC-7 all year: the zone-less stamps are 7 hours behind UTC
    assert row["start_time"] == (T0 + dt.timedelta(hours=7)).replace(tzinfo=dt.timezone.utc)
    assert files_under(root) == sorted(res.files)  # no card: configs_block=False


def test_default_options_read_the_log(tmp_path):
    log = indexed_log(tmp_path / "a.csv", ticks=5)
    root = tmp_path / "ds"
    (res,) = import_stream([log], root, ImportOptions(fmt="nvidia-smi", workload="inference"),
                           configs_block=False)
    assert (res.path, res.platform, res.num_gpus, res.samples) == (log, "h100_sxm_80gb", 2, 10)
    assert res.flags == ("power_is_1s_average", "precision_unknown", "power_limit_from_spec")
    row = runs_row(root, res)
    assert row["num_gpus"] == 2
    assert row["start_time"] == T0.replace(tzinfo=dt.timezone.utc)  # UTC by default


@pytest.mark.parametrize("kwargs,field,reason,names_file", [
    ({"num_gpus": 1}, "num_gpus", "--num-gpus is 1 but the log holds 2 GPUs", True),
    ({"tz": "Mars/Olympus"}, "tz",
     "'Mars/Olympus' is not an IANA time zone name (e.g. America/Phoenix)", False),
])
def test_bad_option_stops_before_anything_is_published(tmp_path, kwargs, field, reason,
                                                       names_file):
    log = indexed_log(tmp_path / "a.csv", ticks=5)
    root = tmp_path / "ds"
    options = ImportOptions(fmt="nvidia-smi", workload="inference", **kwargs)
    with pytest.raises(InputError) as exc:
        list(import_stream([log], root, options))
    err = exc.value
    assert (err.reason, err.field, err.line) == (reason, field, None)
    assert err.file == (str(log) if names_file else None)
    assert not root.exists() or files_under(root) == []


def test_configs_block_is_written_once_by_default(tmp_path):
    logs = [indexed_log(tmp_path / f"r{i}.csv", ticks=5 + i) for i in range(2)]
    root = tmp_path / "ds"
    results = list(import_stream(logs, root, ImportOptions(fmt="nvidia-smi",
                                                           workload="inference")))
    assert [r.path for r in results] == logs
    text = (root / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n") and "configs:" in text and "inference_runs" in text


def test_no_card_until_the_stream_ends_and_none_without_configs_block(tmp_path):
    logs = [indexed_log(tmp_path / f"r{i}.csv", ticks=5 + i) for i in range(2)]
    root = tmp_path / "ds"
    stream = import_stream(logs, root, ImportOptions(fmt="nvidia-smi", workload="inference"),
                           configs_block=False)
    first = next(stream)
    assert first.path == logs[0]
    assert not (root / "README.md").exists()  # commits do not refresh the card one by one
    rest = list(stream)
    assert [r.path for r in rest] == [logs[1]]
    assert not (root / "README.md").exists()


def test_nothing_to_import_writes_nothing(tmp_path):
    root = tmp_path / "ds"
    assert list(import_stream([], root, ImportOptions(fmt="nvidia-smi",
                                                      workload="inference"))) == []
    assert not (root / "README.md").exists()
