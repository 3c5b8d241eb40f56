"""The facility's one-line refusals, and what its JSON and limits say of each source.

Refusals name the option, or the file, line and field; the JSON gives each source's replayed
duration and the limits state a 1 s-averaging sensor.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds import facility as fac
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.run import DeviceSeries, Run


def _run(flags: tuple[str, ...] = ()) -> Run:
    t = np.arange(600) * 100
    devs = [DeviceSeries(g, t.astype(np.int64),
                         {"power_w": np.where((t % 2500) < 1500, 600.0, 450.0) + g},
                         power_limit_w=700.0, default_power_limit_w=700.0) for g in range(2)]
    run = Run({"run_id": "f1", "workload": "finetune", "platform": "h100_sxm_80gb",
               "sample_period_ms": 100.0}, devs, [])
    run.add_flags(*flags)
    return run


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"window": "bogus"}, "field '--window': 'bogus' is not one of work, whole"),
    ({"duration_s": 0.01}, "field '--duration': 0.01 s is shorter than one 0.1 s step"),
])
def test_a_bad_site_setting_is_refused_naming_the_option(kwargs, message):
    with pytest.raises(InputError) as exc:
        fac.FacilityConfig(gpus=8, **kwargs)
    assert str(exc.value) == message


def test_no_source_run_is_refused_naming_the_sources():
    with pytest.raises(InputError) as exc:
        fac.compose([], fac.FacilityConfig(gpus=8))
    assert str(exc.value) == "field 'sources': no source run to compose a site from"


@pytest.mark.parametrize(("text", "message"), [
    ("- {job: a, trace: r1, gpus: 8, start: true, end: 5}\n",
     "'s.yaml', line 1, field 'start': value True is not a time"),
    ("- {job: a, trace: *nowhere, gpus: 8, start: 0, end: 5}\n", "'s.yaml', line 1: not YAML"),
])
def test_a_bad_schedule_is_refused_naming_file_line_and_field(tmp_path, text, message):
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as exc:
        fac.read_schedule(path)
    assert str(exc.value) == message


def test_a_cut_off_yaml_schedule_is_refused_in_one_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("jobs:\n  - {job: a, trace: r1, gpus: 8, start: 0, end: 5\n",
                    encoding="utf-8")
    with pytest.raises(InputError, match="not YAML"):
        fac.read_schedule(path)


def test_the_json_gives_each_sources_replayed_duration_and_a_1s_sensor_is_stated():
    src = fac.source_from_run(_run(("power_is_1s_average",)))
    result = fac.compose([src], fac.FacilityConfig(gpus=8, sync="lockstep"))
    (entry,) = fac.to_json(result)["sources"]
    assert entry["duration_s"] == pytest.approx(src.length * 0.1)
    assert any("the 0.2-3 Hz band are under-reported" in line for line in result.limits)
