"""The run page's data: the node total is the metrics' series; requests; events; chunks."""

from __future__ import annotations

import base64
import json
import zlib

import numpy as np
from conftest import synthetic_run

from llm_powertrace_ds import metrics
from llm_powertrace_ds.explore import rundata


def _chunk(rd: rundata.RunData, name: str) -> dict:
    """A chunk as the browser gets it: encoded, through JSON, decoded."""
    payload = dict(rd.chunks())[name]
    return rundata.decode_chunk(json.loads(json.dumps(rundata.encode_chunk(payload))))


def test_node_total_is_the_metrics_grid_total_not_equal_timestamp_sums():
    run = synthetic_run(devices=3, n=400)  # devices' ticks are 2 ms apart: no shared stamps
    rd = rundata.RunData(run, "f", None)
    al = metrics.node_total(run)
    raw = _chunk(rd, "L0-0")["series"]["total"]
    t, p = raw["t"], raw["p"]
    np.testing.assert_array_equal(t, al.grid_ms)
    np.testing.assert_allclose(p, al.total.astype(np.float32))
    # summing only identical timestamps would find none here and draw nothing or dips
    assert np.nanmin(p) > 0.8 * np.nanmean(p) - 3 * 80


def test_raw_level_holds_every_sample_and_breaks_lines_at_gaps():
    run = synthetic_run(devices=1, n=300)
    dev = run.devices[0]
    keep = np.ones(300, bool)
    keep[100:140] = False  # a 4 s gap
    dev.t_ms = dev.t_ms[keep]
    dev.signals = {k: v[keep] for k, v in dev.signals.items()}
    rd = rundata.RunData(run, "f", None)
    raw = _chunk(rd, "L0-0")["series"]["d0"]
    t, p = raw["t"], raw["p"]
    assert len(t) == 260 + 1 and np.isnan(p).sum() == 1
    np.testing.assert_array_equal(t[~np.isnan(p)], dev.t_ms)
    np.testing.assert_allclose(p[~np.isnan(p)], dev.power_w.astype(np.float32))
    assert "T" not in raw  # temp_c is all null in the synthetic run: not drawn


def test_chunk_encoding_is_bit_exact_and_compact():
    rng = np.random.default_rng(7)
    t = np.cumsum(rng.integers(90, 111, 5000)).astype(np.int32) + 2_000_000_000 - 600_000
    t[100] = t[99] - 5  # a step back in time survives too (wrap-around differences)
    p = (200 + rng.normal(0, 3, 5000)).astype(np.float32)
    p[[3, 4000]] = np.nan
    p[5] = -0.0
    first, second = p[:700].copy(), p[700:1400].copy()
    payload = {"level": 1, "chunk": 0, "i0": 0,
               "series": {"d0": {"t": t, "p": p}, "total": {"p": (first, second)}}}
    enc = rundata.encode_chunk(payload)
    assert set(enc) == {"level", "chunk", "i0", "layout", "z"}
    back = rundata.decode_chunk(json.loads(json.dumps(enc)))
    np.testing.assert_array_equal(back["series"]["d0"]["t"], t.astype(np.int64))
    assert back["series"]["d0"]["p"].tobytes() == p.tobytes()  # every bit: NaN, -0.0
    assert [a.tobytes() for a in back["series"]["total"]["p"]] == [first.tobytes(),
                                                                    second.tobytes()]
    blob = zlib.decompress(base64.b64decode(enc["z"]))
    assert len(blob) == 4 * (5000 + 5000 + 700 + 700)  # nothing added, nothing dropped
    # differences of a regular clock and shuffled float bytes deflate well below the raw size
    assert len(enc["z"]) < 0.75 * len(blob)


def test_requests_in_flight_and_arrivals():
    run = synthetic_run(workload="inference", with_requests=True)
    view = rundata.requests_view(run)
    # arrivals at 0,100,..,400 ms, each finishing 400 ms later
    assert view["arrivals_ms"] == [0, 100, 200, 300, 400]
    by_t = dict(zip(view["t_ms"], view["in_flight"], strict=True))
    assert by_t[300] == 4 and by_t[400] == 4 and by_t[800] == 0 and max(by_t.values()) == 4
    assert view["unfinished"] == 0


def test_events_view_windows_and_marks_of_one_rank():
    run = synthetic_run(devices=2)
    phases, marks = rundata.events_view(run)
    assert phases["idle"] == [[0, 1000]]
    assert phases["step"] == [[1100, 1900]]
    assert marks["step"] == [1100]  # rank 1's duplicate step is not drawn twice
    assert rundata.work_start_ms(run) == 1100


def test_meta_carries_metrics_formulas_notes_flags_and_proxy():
    run = synthetic_run(platform="cpu_proxy", sampler="cpu_proxy")
    run.add_flags("cpu_proxy", "gap")
    meta = rundata.RunData(run, "f", None).meta(set(metrics.metric_formulas()))
    assert meta["cpu_proxy"] is True
    assert {f["flag"] for f in meta["flags"]} == {"cpu_proxy", "gap"}
    assert all(f["description"] for f in meta["flags"])
    assert meta["metrics"]["energy_j"] > 0 and "metric_notes" in meta
    assert [d["label"] for d in meta["devices"]] == ["gpu 0:0", "gpu 0:1"]


def test_times_past_24_8_days_never_wrap():
    """A month-long run: times beyond 2^31 ms come back exactly.

    They are int32 differences from the chunk's own base time, summed in 64 bits here and in
    float64 in the browser.
    """
    t = np.arange(0, 31 * 86_400_000, 60_000, dtype=np.int64) + 5
    p = np.full(len(t), 300.0, dtype=np.float32)
    enc = rundata.encode_chunk({"level": 0, "chunk": 0, "series": {"d0": {"t": t, "p": p}}})
    back = rundata.decode_chunk(json.loads(json.dumps(enc)))
    np.testing.assert_array_equal(back["series"]["d0"]["t"], t)
    assert back["series"]["d0"]["t"][-1] > 2**31
    late = t[-100:]
    enc = rundata.encode_chunk({"level": 0, "chunk": 9, "series": {"d0": {"t": late,
                                                                          "p": p[-100:]}}})
    back = rundata.decode_chunk(json.loads(json.dumps(enc)))
    np.testing.assert_array_equal(back["series"]["d0"]["t"], late)
