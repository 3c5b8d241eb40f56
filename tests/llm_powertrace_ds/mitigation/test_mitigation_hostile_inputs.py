"""``mitigate`` on inputs that are almost right: tiny time steps, huge spans, altered Parquet.

Each is a one-line error naming the file and the field, or the right result, within bounded
memory (the peak is measured with tracemalloc, which numpy reports its arrays to).
"""

from __future__ import annotations

import json
import sys
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_powertrace_ds import mitigation as mit
from llm_powertrace_ds import shards
from llm_powertrace_ds.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_facility import step_run  # noqa: E402  (the facility tests' synthetic training run)

MIB = 1 << 20


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and "unexpected" not in err, err
    return err


@pytest.mark.parametrize("step", ["5e-324", "1e-300", "1e-9"])
def test_a_time_step_below_a_microsecond_is_refused_by_line_and_field(tmp_path, capsys, step):
    path = tmp_path / "tiny.csv"
    path.write_text(f"t_s,power_w\n0,100\n{step},200\n1,300\n", encoding="utf-8")
    assert main(["mitigate", str(path), "--ramp-limit", "10", "--format", "json"]) == 1
    err = one_error_line(capsys)
    assert "'tiny.csv', line 3, field 't_s'" in err and "shorter than 1e-06 s" in err


def test_two_samples_1e10_s_apart_are_summarised_by_samples_not_by_the_span(tmp_path, capsys):
    path = tmp_path / "span.csv"
    path.write_text("t_s,power_w\n0,1000\n1e10,3000\n", encoding="utf-8")
    tracemalloc.start()
    try:
        code = main(["mitigate", str(path), "--ramp-limit", "1", "--format", "json"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0, capsys.readouterr().err
    data = json.loads(capsys.readouterr().out)
    assert peak < 200 * MIB
    # the right answer: one step of 2,000 W at 1e10 s. It falls on a 1 s window edge (a 2,000 W
    # jump between window means); 1e10 = 166,666,666 × 60 + 40, so the 60 s window holding it
    # is 40 s at 1,000 W and 20 s at 3,000 W (mean 1,666.7 W), then the next is 3,000 W
    assert data["load"]["ramp_max_w_per_s"] == {"1": pytest.approx(2000.0),
                                                 "60": pytest.approx((3000 - 5000 / 3) / 60)}
    assert data["load"]["energy_j"] == pytest.approx(1000 * 1e10 + 3000 * 1e10)


def test_a_long_gap_among_short_steps_bounds_resampling_and_band_power(tmp_path, capsys):
    path = tmp_path / "gap.csv"
    rows = "".join(f"{i / 10},{1000 + (i % 7) * 10}\n" for i in range(200))
    path.write_text("t_s,power_w\n" + rows + "1e9,2000\n1000000000.1,2000\n", encoding="utf-8")
    tracemalloc.start()
    try:
        code = main(["mitigate", str(path), "--format", "json"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0, capsys.readouterr().err
    data = json.loads(capsys.readouterr().out)
    assert peak < 200 * MIB
    assert all(v is None for v in data["load"]["band_rms_w"].values())
    assert any("band power not computed" in n for n in data["notes"])
    assert main(["mitigate", str(path), "--resolution-s", "1"]) == 2
    err = one_error_line(capsys)
    assert "--resolution-s" in err and "more than 10000000" in err


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("site")
    root = tmp / "ds"
    shards.publish_run(root, step_run("run-a", seconds=60, seed=1), refresh_card=False)
    out = tmp / "site.parquet"
    assert main(["-q", "facility", str(root), "--gpus", "16", "--out", str(out),
                 "--format", "json"]) == 0
    return out


def rewrite(site: Path, out: Path, *, summary=None, drop=None, cast=None, scale=None) -> Path:
    table = pq.read_table(site)
    meta = dict(table.schema.metadata)
    if summary is not None:
        meta[b"llm_powertrace_facility"] = json.dumps(summary).encode()
    if drop is not None:
        table = table.drop_columns([drop])
    if cast is not None:
        i = table.schema.get_field_index(cast)
        table = table.set_column(i, cast, table.column(cast).cast(pa.string()))
    if scale is not None:
        name, factor = scale
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pa.compute.multiply(table.column(name), factor))
    pq.write_table(table.replace_schema_metadata(meta), out)
    return out


@pytest.mark.parametrize(("change", "words"), [
    ({"summary": ["not", "an", "object"]}, "field 'llm_powertrace_facility': its facility "
     "summary is a JSON list, not an object"),
    ({"summary": 3}, "summary is a JSON int"),
    ({"drop": "start_s"}, "field 'start_s': the column is missing"),
    ({"drop": "facility_kw"}, "field 'facility_kw': the column is missing"),
    ({"cast": "resolution_s"}, "field 'resolution_s': the column holds string, not numbers"),
    ({"cast": "facility_kw"}, "field 'facility_kw': the column holds string, not numbers"),
    ({"scale": ("length_s", 1e-300)}, "field 'length_s': an interval is shorter than 1e-06 s"),
])
def test_an_altered_facility_parquet_is_one_line_naming_the_field(site, tmp_path, capsys, change,
                                                                  words):
    path = rewrite(site, tmp_path / "altered.parquet", **change)
    assert main(["mitigate", str(path), "--ramp-limit", "16667"]) == 1
    err = one_error_line(capsys)
    assert "'altered.parquet'" in err and words in err


def test_an_unaltered_facility_parquet_still_reads(site):
    prof = mit.read_profile(site)
    assert prof.kind == "facility" and len(prof.power_w) > 2


@pytest.mark.parametrize(("args", "option"), [
    (["--ramp-limit", "1e-300"], "--ramp-limit"),
    (["--ramp-limit", "5e-324"], "--ramp-limit"),
    (["--ramp-limit", "1MW/min", "--efficiency", "1e-300"], "--efficiency"),
    (["--sensor-average-s", "5e-324"], "--sensor-average-s"),
])
def test_options_so_small_they_would_make_a_figure_infinite_are_refused(tmp_path, capsys, args,
                                                                        option):
    path = tmp_path / "load.csv"
    path.write_text("t_s,power_w\n" + "".join(f"{i / 10},{1000 + 500 * (i // 50 % 2)}\n"
                                              for i in range(2000)), encoding="utf-8")
    assert main(["mitigate", str(path), *args, "--format", "json"]) == 2
    err = one_error_line(capsys)
    assert f"field '{option}'" in err


def test_a_limits_file_ramp_below_a_milliwatt_per_second_is_refused(tmp_path):
    path = tmp_path / "limits.yaml"
    path.write_text("ramp: [{window_s: 1, max_w_per_s: 1e-300}]\n", encoding="utf-8")
    with pytest.raises(mit.profile.InputError) as exc:
        mit.load_limits(path)
    assert exc.value.field == "ramp[0].max_w_per_s" and "slowest ramp limit" in str(exc.value)
