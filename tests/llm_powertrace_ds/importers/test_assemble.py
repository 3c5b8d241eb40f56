"""Run assembly (``importers.assemble``): metadata, platform, GPU count and device defaults.

Strictly increasing timestamps (1 ms steps pass, a repeat names its line, time going back names
both instants); the 1 s-average flag from the logged GPU name or, without one, from the platform
slug read as words; the platform's split-name error; the declared and inferred GPU counts and the
source a mismatch names; the device keys split from the metadata and the device defaults filled
only where the log lacks them; the model family from the label; a declared sample period over
the median; the metadata platform over the GPU name and a UTC start time; and stage labels that
could name a person, machine or path refused under the field ``label`` with the file named.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.assemble import (
    DeviceData,
    apply_device_defaults,
    assemble_run,
    base_meta,
    check_increasing,
    fill_model,
    finish_meta,
    is_1s_average,
    resolve_platform,
    split_device_meta,
)
from llm_powertrace_ds.importers.common import family_from_name
from llm_powertrace_ds.run import Event

from .test_powertrace_csv import their_json, trace_csv


@pytest.mark.parametrize(("slug", "expected"), [
    ("h100_sxm_80gb", True),   # Hopper: power.draw is a 1 s average
    ("l40s_48gb", True),       # Ada
    ("a100_sxm4_80gb", False),  # GA100: instantaneous
])
def test_1s_average_from_the_platform_slug_without_a_gpu_name(slug: str, expected: bool) -> None:
    assert is_1s_average("power_usage", None, slug) is expected
    assert is_1s_average("power_usage", "", slug) is expected  # an empty name is no name
    assert is_1s_average("instant", None, slug) is False


def test_a_private_stage_label_names_the_label_field(tmp_path: Path) -> None:
    path = trace_csv(tmp_path / "t.csv", gpus=1, ticks=3,
                     stages=["TRAIN", "/home/alice/ckpt", "TRAIN"])
    meta = their_json(tmp_path / "t.json", gpu_count=1)
    with pytest.raises(InputError) as err:
        import_file("powertrace-csv", path, workload="finetune", meta_path=meta)
    assert err.value.field == "label"
    message = str(err.value)
    assert "field 'label'" in message and "t.csv" in message and "\n" not in message


def _dev_at(ts: list[int], **kw) -> DeviceData:  # noqa: ANN003
    n = len(ts)
    return DeviceData(gpu_index=kw.pop("gpu_index", 0), ts_ms=np.asarray(ts, np.int64),
                      lines=np.arange(2, n + 2, dtype=np.int64),
                      signals={"power_w": np.full(n, 100.0)}, **kw)


def test_one_millisecond_steps_increase(tmp_path):
    check_increasing(_dev_at([0, 1, 2]), file=tmp_path / "x.csv")
    with pytest.raises(InputError) as exc:
        check_increasing(_dev_at([0, 1, 1]), file=tmp_path / "x.csv")
    assert (exc.value.line, exc.value.field) == (4, "timestamp")


def test_declared_gpu_count_equal_to_the_log_is_no_mismatch(tmp_path):
    meta = {"num_gpus": 2, "power_field": "instant", "gpu_name": "NVIDIA L40S"}
    flags = finish_meta([_dev_at([0, 100]), _dev_at([0, 100], gpu_index=1)], meta, platform=None,
                        num_gpus=None, file=tmp_path / "x.csv")
    assert flags == []
    assert (meta["num_gpus"], meta["platform"]) == (2, "l40s")
    meta = {"num_gpus": 1, "power_field": "instant", "gpu_name": "NVIDIA L40S"}
    flags = finish_meta([_dev_at([0, 100]), _dev_at([0, 100], gpu_index=1)], meta, platform=None,
                        num_gpus=None, file=tmp_path / "x.csv")
    assert flags == ["gpu_count_mismatch"]
    assert meta["num_gpus"] == 2


def test_bad_platform_error_quotes_the_split_rule():
    with pytest.raises(InputError) as exc:
        resolve_platform("bad platform!", None)
    assert exc.value.field == "platform"
    assert exc.value.reason.startswith("platform 'bad platform!' is not a valid split name")


def test_split_device_meta_pops_every_device_key():
    meta = {"gpu_name": "NVIDIA L40S", "power_limit_w": 300.0, "default_power_limit_w": 350.0,
            "run_id": "r"}
    assert split_device_meta(meta) == {"gpu_name": "NVIDIA L40S", "power_limit_w": 300.0,
                                       "default_power_limit_w": 350.0}
    assert meta == {"run_id": "r"}


def test_stage_label_is_checked_under_the_field_label(tmp_path):
    stages = ["warmup", "ask alice@example.com", "eval"]
    path = trace_csv(tmp_path / "t.csv", gpus=1, ticks=3, stages=stages)
    with pytest.raises(InputError) as exc:
        import_file("powertrace-csv", path, workload="finetune")
    assert exc.value.field == "label"
    assert exc.value.reason.startswith("value 'ask alice@example.com' ")


def test_assemble_run_sets_num_gpus_to_three_devices(tmp_path):
    meta = base_meta("nvidia-smi", "inference")
    meta.update(run_id="r3", platform="l40s", power_field="instant", sample_period_ms=100.0)
    run = assemble_run([_dev(0), _dev(1), _dev(2)], meta, file=tmp_path / "x.csv")
    assert run.meta["num_gpus"] == 3
    assert 3 not in run.meta


def _dev(gpu: int = 0) -> DeviceData:
    ts = np.array([1_700_000_000_000, 1_700_000_000_100], np.int64)
    return DeviceData(gpu_index=gpu, ts_ms=ts, lines=np.array([2, 3], np.int64),
                      signals={"power_w": np.full(2, 100.0)})


def _meta() -> dict:
    meta = base_meta("nvidia-smi", "inference")
    meta.update(run_id="r1", platform="l40s", power_field="instant", sample_period_ms=100.0)
    return meta


def test_assemble_run_checks_event_labels_under_the_field_label(tmp_path):
    path = tmp_path / "x.csv"
    events = [(1_700_000_000_000, Event(0, "stage", label="ask alice@example.com"))]
    with pytest.raises(InputError) as exc:
        assemble_run([_dev()], _meta(), file=path, events=events)
    assert (exc.value.file, exc.value.field) == (str(path), "label")


def test_assemble_run_metadata_error_names_the_file(tmp_path):
    path = tmp_path / "x.csv"
    meta = _meta()
    meta["bogus_key"] = "x"
    with pytest.raises(InputError) as exc:
        assemble_run([_dev()], meta, file=path)
    assert (exc.value.file, exc.value.field) == (str(path), "bogus_key")


def _device(**over) -> DeviceData:  # noqa: ANN003
    return DeviceData(gpu_index=0, ts_ms=np.array([0, 100], np.int64),
                      lines=np.array([2, 3], np.int64), **over)


def test_device_defaults_fill_only_what_the_log_lacks():
    logged = _device(gpu_name="NVIDIA A100-SXM4-80GB", power_limit_w=300.0)
    bare = _device()
    apply_device_defaults([logged, bare], {"gpu_name": "NVIDIA H100 80GB HBM3",
                                           "power_limit_w": 700.0, "default_power_limit_w": None})
    assert (logged.gpu_name, logged.power_limit_w, logged.default_power_limit_w) == \
        ("NVIDIA A100-SXM4-80GB", 300.0, None)
    assert (bare.gpu_name, bare.power_limit_w, bare.default_power_limit_w) == \
        ("NVIDIA H100 80GB HBM3", 700.0, None)


def test_model_family_from_the_label_when_no_name():
    label = "Llama-3.1-8B-Instruct"
    assert family_from_name(label) != family_from_name(None)
    meta = {"model_label": label}
    fill_model(meta)
    assert meta["model_family"] == family_from_name(label)
    meta = {"model_family": "mixtral", "model_name": label}  # a given family is kept
    fill_model(meta)
    assert meta["model_family"] == "mixtral"


def test_one_second_average_follows_the_logged_gpu_name_not_the_platform():
    # an A100's power.draw is instantaneous although the platform given is an H100's
    meta = {"power_field": "power_usage"}
    flags = finish_meta([_device(gpu_name="NVIDIA A100-SXM4-80GB")], meta,
                        platform="h100_sxm_80gb", num_gpus=None, file=Path("log.csv"))
    assert "power_is_1s_average" not in flags and meta["platform"] == "h100_sxm_80gb"
    meta = {"power_field": "power_usage"}
    flags = finish_meta([_device(gpu_name="NVIDIA H100 80GB HBM3")], meta,
                        platform="a100_sxm4_80gb", num_gpus=None, file=Path("log.csv"))
    assert "power_is_1s_average" in flags


def test_time_going_back_names_both_instants():
    from llm_powertrace_ds.importers.assemble import DeviceData, check_increasing

    dev = DeviceData(3, np.array([1_000, 2_000, 1_500], dtype=np.int64), np.array([2, 3, 4]))
    with pytest.raises(InputError) as exc:
        check_increasing(dev, file=Path("log.csv"))
    assert exc.value.reason == (
        "time of GPU 3 goes back from 1970-01-01T00:00:02.000Z (line 3) to "
        "1970-01-01T00:00:01.500Z; each GPU's timestamps must increase")
    assert (exc.value.line, exc.value.field) == (4, "timestamp")


def test_the_metadata_platform_wins_over_the_gpu_name_and_start_time_is_utc(
        monkeypatch, local_zone_restored):  # noqa: ARG001 - restores the zone after TZ changes
    import time

    from llm_powertrace_ds.importers.assemble import DeviceData, assemble_run, finish_meta

    monkeypatch.setenv("TZ", "America/New_York")  # a local zone that is not UTC
    time.tzset()

    dev = DeviceData(0, np.array([1_700_000_000_000, 1_700_000_000_100], dtype=np.int64),
                     np.array([2, 3]), {"power_w": np.array([100.0, 110.0])},
                     gpu_name="NVIDIA H100 80GB HBM3")
    meta = {"platform": "l40s", "workload": "inference", "power_field": "power_draw"}
    finish_meta([dev], meta, platform=None, num_gpus=None, file=Path("log.csv"))
    assert meta["platform"] == "l40s"
    run = assemble_run([dev], meta, file=Path("log.csv"))
    assert run.meta["start_time"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)
    assert run.meta["start_time"].utcoffset() == dt.timedelta(0)


@pytest.fixture
def local_zone_restored():
    """Re-read the process's zone after a test that changed TZ (monkeypatch restores the env)."""
    import time

    yield
    time.tzset()


def test_a_declared_gpu_count_below_the_log_names_its_source():
    from llm_powertrace_ds.importers.assemble import resolve_num_gpus

    for given, declared, source in ((2, None, "--num-gpus"), (None, 2, "the metadata's num_gpus")):
        with pytest.raises(InputError) as exc:
            resolve_num_gpus(given, declared, 4, file=Path("log.csv"))
        assert (exc.value.reason, exc.value.field) == (
            f"{source} is 2 but the log holds 4 GPUs", "num_gpus")
    assert resolve_num_gpus(None, None, 4, file=Path("log.csv")) == 4
    assert resolve_num_gpus(None, 6, 4, file=Path("log.csv")) == 6
