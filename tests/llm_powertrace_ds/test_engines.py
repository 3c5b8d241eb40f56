"""The published Parquet layout read where it lies by a real engine (DuckDB), as its users will.

A folder is packed and copied to Parquet exactly as ``upload.py`` publishes it; DuckDB reads the
files by glob (the same SQL works on ``hf://datasets/<org>/<name>/data/...`` paths, see
docs/engines.md) and must give the query API's answers: per-platform mean power from the runs
table, and per-run p99 of the device power samples from the trace shards.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from llm_powertrace_ds import shards
from llm_powertrace_ds.hub_upload import write_parquet_copy
from llm_powertrace_ds.query import Runs

duckdb = pytest.importorskip("duckdb")


def _sql(sql: str) -> list[tuple]:
    with duckdb.connect() as con:
        return con.execute(sql).fetchall()


@pytest.fixture(scope="module")
def published(tmp_path_factory, make_run_module):
    base = tmp_path_factory.mktemp("engines")
    src = base / "src"
    for i in range(6):
        platform = ("l40s", "h100_sxm_80gb")[i % 2]
        run = make_run_module(f"r{i}", platform=platform, seed=i, n=300 + 40 * i,
                              devices=1 + i % 3)
        run.devices[0].signals["power_w"][7] = np.nan  # a missing reading stays missing
        shards.publish_run(src, run, refresh_card=False)
    packed = base / "packed"
    shards.pack(src, packed, refresh_card=False)
    out = base / "parquet"
    write_parquet_copy(packed, out)
    return out


@pytest.fixture(scope="module")
def make_run_module():
    from conftest import synthetic_run

    return synthetic_run


def test_duckdb_per_platform_mean_power_equals_the_query_api(published):
    api = Runs.load(published, "finetune").group_by("platform").agg(mean_power_w="mean")
    want = {r["platform"]: r["mean_power_w_mean"] for r in api.to_pylist()}
    sql = (f"SELECT platform, avg(mean_power_w) FROM read_parquet("
           f"'{published}/data/finetune_runs/*/*.parquet') GROUP BY platform")
    got = dict(_sql(sql))
    assert got.keys() == want.keys() == {"l40s", "h100_sxm_80gb"}
    for platform, value in want.items():
        assert math.isclose(got[platform], value, rel_tol=1e-12), platform


def test_duckdb_per_run_p99_of_device_power_equals_the_query_api(published):
    samples: dict[str, list[np.ndarray]] = {}
    for row, trace in Runs.load(published, "finetune").traces():
        samples.setdefault(row["run_id"], []).append(trace.power_w)
    want = {}
    for run_id, parts in samples.items():
        x = np.concatenate(parts).astype(np.float64)  # float32 on disk: both in double
        want[run_id] = float(np.quantile(x[np.isfinite(x)], 0.99))  # linear = quantile_cont
    sql = (f"SELECT run_id, quantile_cont(p, 0.99) FROM (SELECT run_id, "
           f"unnest(power_w)::DOUBLE AS p "
           f"FROM read_parquet('{published}/data/finetune/*/*/*.parquet')) "
           f"WHERE p IS NOT NULL GROUP BY run_id")
    got = dict(_sql(sql))
    assert got.keys() == want.keys() == {f"r{i}" for i in range(6)}
    for run_id, value in want.items():
        assert math.isclose(got[run_id], value, rel_tol=1e-9), run_id


def test_duckdb_prunes_a_run_by_row_group_statistics(published):
    # one row group per run: a lookup by run_id reads one run's pages (EXPLAIN ANALYZE is
    # engine-internal; the footer's statistics are what it prunes on)
    import pyarrow.parquet as pq

    (trace,) = (published / "data/finetune/l40s/llama").glob("*.parquet")
    meta = pq.ParquetFile(trace).metadata
    col = meta.schema.to_arrow_schema().get_field_index("run_id")
    ranges = [(meta.row_group(i).column(col).statistics.min,
               meta.row_group(i).column(col).statistics.max) for i in range(meta.num_row_groups)]
    assert all(lo == hi for lo, hi in ranges) and len(ranges) == 3
    sql = (f"SELECT count(*) FROM read_parquet('{published}/data/finetune/*/*/*.parquet') "
           "WHERE run_id = 'r2'")
    assert _sql(sql) == [(3,)]  # r2 has 3 devices
