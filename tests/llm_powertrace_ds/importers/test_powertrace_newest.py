"""``import powertrace-csv`` on the PowerTrace catalog's newest export (their explorer's build).

The files are built from the writer's source (:mod:`importers.powertrace_newest_writer` cites the
script and commit): the catalog entry with ``"Not reported"``/``"Not applicable"``, the new
fields, the compact ``runs/<id>.json[.gz]`` and the 5 s request timeline.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from importers.powertrace_newest_writer import (
    RUN_ID,
    TIMELINE_COLUMNS,
    compact_finalized,
    run_entry,
    timeline,
    write_compact,
    write_export,
)
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file, seed_meta
from llm_powertrace_ds.importers.powertrace_compact import import_compact
from llm_powertrace_ds.importers.request_timeline import FIELD_MAP as TIMELINE_MAP
from llm_powertrace_ds.shards import read_run


def _expected_timeline() -> dict[str, list]:
    rows = timeline()
    return {c: [r[c] for r in rows] for c in TIMELINE_COLUMNS}


def _check_run(run) -> dict:
    assert run.run_id == RUN_ID
    assert run.workload == "inference" and len(run.devices) == 2
    assert [d.gpu_name for d in run.devices] == ["NVIDIA H100 80GB HBM3"] * 2
    assert run.platform == "h100_sxm_80gb"
    assert run.meta["requests_completed"] == 90
    assert run.meta["source_total_energy_wh"] == 5.966
    assert run.meta["serving_engine"] == "vllm" and run.meta["concurrency"] == 64
    assert run.meta.get("arrival_pattern") is None  # "Not reported"
    assert run.meta["sample_period_ms"] == pytest.approx(100.0)  # "Not reported": observed
    source = json.loads(run.meta["source_metadata"])
    assert source["sampling_interval_declared_s"] == "Not reported"  # their value, kept
    assert source["microbatch_size"] == "Not applicable"
    assert source["gpu_model_reported"] == "NVIDIA H100 80GB HBM3"
    assert source["requests_arrived_derived"] == 96
    assert source["request_timeline_method"].startswith("5-second bins")
    assert source["inference_timeline"] == _expected_timeline()
    for dropped in ("source_directory", "source_integrity", "run_json_file_id"):
        assert dropped not in source
    return source


@pytest.mark.parametrize("gz", [True, False], ids=["json.gz", "json"])
def test_a_compact_run_file_imports_through_the_same_command(tmp_path, cli, gz):
    path = write_compact(tmp_path / "export", gz=gz)
    out = tmp_path / "ds"
    res = cli(["import", "powertrace-csv", path, "--workload", "inference", "--out", out])
    assert res.returncode == 0, res.stderr
    assert cli(["validate", out]).returncode == 0
    run = read_run(out, RUN_ID)
    source = _check_run(run)
    assert source["storage"] == {"provider": "google-drive", "format": "compact-run-json"}
    assert [len(d.t_ms) for d in run.devices] == [300, 300]
    assert run.devices[1].signals["power_w"][0] == pytest.approx(91.0)


def test_a_sample_key_no_table_names_is_listed_not_dropped(tmp_path):
    path = write_compact(tmp_path, gz=False)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["samples"][0]["fan_speed_pct"] = 30
    path.write_text(json.dumps(data), encoding="utf-8")
    run = import_compact(path, workload="inference")
    assert json.loads(run.meta["source_metadata"])["columns_not_imported"] == ["fan_speed_pct"]


def test_their_export_folder_brings_metadata_and_request_timeline(tmp_path, cli):
    raw = write_export(tmp_path / "export")
    out = tmp_path / "ds"
    res = cli(["import", "powertrace-csv", raw, "--workload", "inference", "--out", out])
    assert res.returncode == 0, res.stderr
    _check_run(read_run(out, RUN_ID))


def test_the_compact_file_and_the_export_give_the_same_run(tmp_path):
    a = import_compact(write_compact(tmp_path / "a"), workload="inference")
    b = import_file("powertrace-csv", write_export(tmp_path / "b"), workload="inference")
    for key in ("num_gpus", "gpu_name", "requests_completed", "source_total_energy_wh",
                "start_time", "tp_size"):
        assert a.meta.get(key) == b.meta.get(key), key
    sa, sb = json.loads(a.meta["source_metadata"]), json.loads(b.meta["source_metadata"])
    assert sa.pop("storage") and sa == sb  # finalize's storage note is the only difference
    for da, db in zip(a.devices, b.devices, strict=True):
        assert (da.t_ms == db.t_ms).all()
        assert (da.signals["power_w"] == db.signals["power_w"]).all()


@pytest.mark.parametrize("key,value,workload", [
    ("microbatch_size", "auto", "finetune"),
    ("gpu_count", "two", "inference"),
    ("in_flight_requests", "many", "inference"),
    ("requests_completed", "ninety", "inference"),
])
def test_an_error_names_the_publishers_field_not_ours(key, value, workload):
    with pytest.raises(InputError) as info:
        seed_meta.map_meta({key: value}, workload, file=Path("m.json"))
    assert info.value.field == key
    assert repr(value) in info.value.reason


@pytest.mark.parametrize("word", ["Not reported", "Not applicable", "not reported"])
@pytest.mark.parametrize("key", ["sampling_interval_declared_s", "duration_declared_min",
                                 "microbatch_size", "model_family", "sequence_length"])
def test_not_reported_is_null_and_their_word_is_kept(key, word):
    meta = seed_meta.map_meta({key: word}, "finetune", file=Path("m.json"))
    assert json.loads(meta["source_metadata"]) == {key: word}
    assert set(meta) == {"source_metadata"}


def test_source_directory_is_not_refused_as_a_path_and_not_kept(tmp_path):
    entry = compact_finalized(run_entry())
    meta = seed_meta.map_meta(entry, "inference", file=tmp_path / "m.json")
    source = json.loads(meta["source_metadata"])
    assert "source_directory" not in source and "run_json_file_id" not in source


def test_every_field_of_the_newest_entry_is_mapped_or_listed_as_not_kept():
    keys = set(compact_finalized(run_entry()))
    listed = set(seed_meta.FIELD_MAP)
    assert sorted(k for k in keys if k not in listed and not k.endswith("_file_id")) == []
    assert "*_file_id" in seed_meta.FIELD_MAP
    assert set(TIMELINE_MAP) == set(TIMELINE_COLUMNS)


@pytest.mark.parametrize("change,field,line", [
    (lambda d: d["samples"][3].update(power_w="lots"), "power_w", 4),
    (lambda d: d["samples"][5].update(timestamp=None), "timestamp", 6),
    (lambda d: d["samples"][7].update(gpu_id="x"), "gpu_id", 8),
    (lambda d: d["inference_timeline"][2].update(requests_arrived=-1), "requests_arrived", None),
    (lambda d: d.update(extra=1), "extra", None),
], ids=["power", "timestamp", "gpu", "timeline", "unknown-key"])
def test_a_bad_compact_file_names_the_sample_and_field(tmp_path, change, field, line):
    path = write_compact(tmp_path, gz=False)
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError) as info:
        import_compact(path, workload="inference")
    assert (info.value.file, info.value.field, info.value.line) == (str(path), field, line)


def test_a_gzip_bomb_and_a_deep_file_are_refused(tmp_path, monkeypatch):
    import gzip

    from llm_powertrace_ds.importers import powertrace_compact

    path = tmp_path / "runs" / "bomb.json.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(b" " * (2 << 20)))
    monkeypatch.setattr(powertrace_compact, "MAX_TEXT_BYTES", 1 << 20)
    with pytest.raises(InputError, match="expands past"):
        import_compact(path, workload="inference")
    deep = tmp_path / "runs" / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(InputError, match="nested deeper than 64 levels"):
        import_compact(deep, workload="inference")
