"""Importing many files streams: each is published as it is read, the card is built once.

``import_stream`` keeps the platform, GPU count and time zone of its options and each result's
path and platform, refreshes the card once at the end, and writes the YAML ``configs:`` block
exactly when it should (small generated nvidia-smi logs, each result and the folder checked).
"""

from __future__ import annotations

import datetime as dt

import pyarrow.ipc
import pytest

from llm_powertrace_ds import hooks, shards
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.publish import ImportedFile, ImportOptions, import_stream

from .test_malformed import snapshot
from .test_nvidia_smi import T0, indexed_log
from .test_powertrace_csv import their_json, trace_csv


def logs(folder, count, bad_at=None):  # noqa: ANN001, ANN201
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = trace_csv(folder / f"r{i}.csv", ticks=20, run_id=f"run-{i}")
        their_json(folder / f"r{i}.json", run_id=f"run-{i}")
        if i == bad_at:
            path.write_text(path.read_text().replace(",40.0,", ",abc,", 1))
        paths.append(str(path))
    return paths


def test_many_files_one_card_rebuild(tmp_path, monkeypatch):
    built = []
    # the spy beside the real card writer (which main registers when it builds its parser)
    monkeypatch.setattr(hooks, "_card_writers", {"spy": built.append})
    files = logs(tmp_path / "logs", 4)
    root = tmp_path / "ds"
    assert main(["import", "powertrace-csv", *files, "--out", str(root), "--workload",
                 "finetune"]) == 0
    assert built == [root]  # once per command, not per file
    runs_files = list((root / "data" / "finetune_runs").rglob("*.arrow"))
    assert sum(shards.count_rows(p) for p in runs_files) == 4  # in one runs-table segment
    text = (root / "README.md").read_text(encoding="utf-8")
    assert "schema version that wrote them: `" in text and "` (4)." in text  # the full card


def test_a_bad_file_changes_nothing_and_leaves_no_staging(tmp_path, capsys):
    root = tmp_path / "ds"
    assert main(["import", "powertrace-csv", *logs(tmp_path / "ok", 1), "--out", str(root),
                 "--workload", "finetune"]) == 0
    before = snapshot(root)
    files = logs(tmp_path / "logs", 3, bad_at=2)  # two good files are staged before the bad one
    capsys.readouterr()
    assert main(["import", "powertrace-csv", *files, "--out", str(root), "--workload",
                 "finetune"]) == 1
    err = capsys.readouterr().err
    assert "r2.csv" in err and "line 2" in err and "power_w" in err
    assert snapshot(root) == before
    staging = root / ".staging"
    assert not [p for p in staging.rglob("*") if p.is_file() and p.suffix != ".lock"]


def test_staged_runs_are_memory_free_until_commit(tmp_path):
    from llm_powertrace_ds import shards
    from llm_powertrace_ds.importers.publish import ImportOptions, import_stream

    files = [tmp_path / "logs" / f"r{i}.csv" for i in range(2)]
    logs(tmp_path / "logs", 2)
    root = tmp_path / "ds"
    stream = import_stream(files, root, ImportOptions(fmt="powertrace-csv", workload="finetune"))
    first = next(stream)  # every file is staged before the first is committed
    assert first.run_id == "run-0" and first.samples == 80 and first.num_gpus == 4
    staged = list((root / ".staging" / "run-1" / "publish").glob("*.arrow"))
    assert len(staged) == 2 and not shards.existing_run_files(root, "run-1")
    rest = list(stream)
    assert [r.run_id for r in rest] == ["run-1"] and not (root / ".staging" / "run-1").exists()


def test_a_failing_card_writer_still_leaves_the_configs_block(tmp_path, monkeypatch):
    # import leaves the YAML to rebuild_card; when the card writer fails the block is still written
    def broken(root):  # noqa: ANN001, ANN202
        raise RuntimeError("card writer failed")

    monkeypatch.setattr(hooks, "register_card_writer", lambda *a, **k: None)
    monkeypatch.setattr(hooks, "_card_writers", {"broken": broken})
    root = tmp_path / "ds"
    try:
        main(["import", "powertrace-csv", *logs(tmp_path / "logs", 2), "--out", str(root),
              "--workload", "finetune"])
    except RuntimeError:
        pass  # the CLI may report it or let it through; the folder is what matters
    text = (root / "README.md").read_text(encoding="utf-8")
    assert "configs:" in text and "finetune_runs" in text
    assert len(list((root / "data" / "finetune_runs").rglob("*.arrow"))) == 2


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
