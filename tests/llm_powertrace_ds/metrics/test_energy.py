"""Energy metrics on values worked out by hand: the trapezoid, the counter and their mismatch.

The one energy rule (trapezoid on each device's own timestamps, bridging missing readings; the
counter's advance, sorted, dropping missing values and skipping resets; their signed mismatch),
per-device mean and peak, the steady-window tokens (first token at ``first_token_ms``, the other
k − 1 spread evenly to ``finish_ms``) and energy per token, and the reasons a null energy carries.
"""

from __future__ import annotations

import numpy as np
import pytest
from metric_runs import run_of_devices as _run

from llm_powertrace_ds import metrics
from llm_powertrace_ds.metrics import core
from llm_powertrace_ds.run import DeviceSeries, Run


def _req(first: float, finish: float, k: int) -> dict:
    return {"first_token_ms": first, "finish_ms": finish, "output_tokens": k}


@pytest.mark.parametrize(("request_", "tokens"), [
    (_req(1000, 3000, 11), 1 + 10 * 0.5),     # first token at t0 counts; half the rest inside
    (_req(2000, 2000, 3), 1 + 2),             # first token and zero-span finish at t1 count
    (_req(1000, 1000, 4), 1 + 3),             # zero span at t0
    (_req(0, 500, 5), 0.0),                   # wholly before: no negative share
    (_req(500, 1000, 2), 0.0),                # finishes at t0: nothing inside
    (_req(1999.75, 2000.25, 3), 1 + 2 * 0.5),  # a sub-millisecond span is still spread
    (_req(1500, 2500, 1), 1.0),               # one token: only the first
    (_req(2500, 3000, 4), 0.0),               # wholly after
    (_req(500, 500, 3), 0.0),                 # zero span, before
    (_req(2500, 2500, 3), 0.0),               # zero span, after
])
def test_steady_tokens_per_request(request_, tokens):
    run = _run(requests=[request_], workload="inference")
    assert core._steady_tokens(run, 1000, 2000) == pytest.approx(tokens, abs=1e-12)


def test_steady_tokens_sums_requests_and_skips_incomplete_rows():
    rows = [_req(1000, 3000, 11), _req(2000, 2000, 3),
            {"first_token_ms": None, "finish_ms": 1500, "output_tokens": 9}]
    run = _run(requests=rows, workload="inference")
    assert core._steady_tokens(run, 1000, 2000) == pytest.approx(6 + 3)
    assert core._steady_tokens(_run(requests=rows[2:], workload="inference"), 0, 1) is None
    assert core._steady_tokens(_run(requests=[], workload="inference"), 0, 1) is None


def test_device_energy_is_the_trapezoid_in_joules_bridging_missing_readings():
    dev = DeviceSeries(0, np.array([0, 1000, 3000]), {"power_w": np.array([100.0, 200.0, 200.0])})
    assert metrics.device_energy_j(dev) == pytest.approx(150.0 + 400.0)  # W · s
    bridged = DeviceSeries(0, np.array([0, 1000, 2000]),
                           {"power_w": np.array([100.0, np.nan, 300.0])})
    assert metrics.device_energy_j(bridged) == pytest.approx(400.0)
    two = DeviceSeries(0, np.array([0, 500]), {"power_w": np.array([80.0, 120.0])})
    assert metrics.device_energy_j(two) == pytest.approx(50.0)  # two readings are enough
    one = DeviceSeries(0, np.array([0, 500]), {"power_w": np.array([80.0, np.nan])})
    assert metrics.device_energy_j(one) is None


def test_mismatch_pct_is_signed_and_needs_an_advancing_counter():
    assert metrics.mismatch_pct(110.0, 100.0) == pytest.approx(10.0)
    assert metrics.mismatch_pct(90.0, 100.0) == pytest.approx(-10.0)
    assert metrics.mismatch_pct(1.0, 0.5) == pytest.approx(100.0)  # a small counter still counts
    assert metrics.mismatch_pct(1.0, 0.0) is None
    assert metrics.mismatch_pct(None, 100.0) is None
    assert metrics.mismatch_pct(1.0, None) is None


def test_device_mismatch_pct_compares_the_integral_with_the_counter():
    t = np.array([0, 1000, 2000])
    power = np.array([100.0, 100.0, 100.0])  # 200 J by the trapezoid
    dev = DeviceSeries(0, t, {"power_w": power, "energy_mj": np.array([0.0, 80_000, 160_000])})
    assert metrics.device_mismatch_pct(dev) == pytest.approx(25.0)  # 200 J against 160 J
    reset = DeviceSeries(0, t, {"power_w": power,
                                "energy_mj": np.array([50_000.0, 250_000, 10_000])})
    # a counter reset loses its interval: the advance is 200 J, so no mismatch
    assert metrics.device_mismatch_pct(reset) == pytest.approx(0.0)
    assert metrics.device_mismatch_pct(DeviceSeries(0, t, {"power_w": power})) is None
    stuck = DeviceSeries(0, t, {"power_w": power, "energy_mj": np.array([5.0, 5.0, 5.0])})
    assert metrics.device_mismatch_pct(stuck) is None  # the counter did not advance
    no_power = DeviceSeries(0, t, {"power_w": np.full(3, np.nan),
                                   "energy_mj": np.array([0.0, 80_000, 160_000])})
    assert metrics.device_mismatch_pct(no_power) is None


def _notes(m: dict) -> dict[str, str]:
    return dict(n.split(": ", 1) for n in m["metric_notes"])


def test_energy_nulls_name_their_reasons():
    from llm_powertrace_ds.run import Event

    t = np.arange(0, 5001, 100)
    one = DeviceSeries(1, t, {"power_w": np.r_[100.0, np.full(len(t) - 1, np.nan)]})
    ok = DeviceSeries(0, t, {"power_w": np.full(len(t), 100.0),
                             "energy_mj": np.arange(len(t)) * 10_000.0})
    run = Run({"run_id": "pins", "workload": "finetune", "platform": "l40s", "tokens": 100},
              [ok, one], [Event(0, "idle_begin"), Event(1000, "idle_end"),
                          Event(1000, "steady_begin"), Event(2000, "steady_end")])
    notes = _notes(metrics.compute_run_metrics(run))
    assert notes["energy_j"] == "gpu 1 has fewer than 2 power readings"
    assert notes["energy_counter_j"] == "no energy counter"
    assert notes["energy_mismatch_pct"] == "no energy counter"
    assert notes["energy_per_token_j"] == "energy_j is null"
    assert notes["idle_power_w"] == "a device has fewer than 2 power readings"
    assert notes["steady_energy_j"] == "a device has fewer than 2 power readings"
    assert notes["steady_energy_per_token_j"] == "a device has fewer than 2 power readings"
    both = Run(dict(run.meta), [DeviceSeries(0, t, {"power_w": one.power_w}), one], [])
    assert _notes(metrics.compute_run_metrics(both))["energy_j"] == (
        "gpu 0, 1 has fewer than 2 power readings")
    counted = Run(dict(run.meta), [ok, DeviceSeries(1, t, {
        "power_w": one.power_w, "energy_mj": np.arange(len(t)) * 10_000.0})], [])
    assert _notes(metrics.compute_run_metrics(counted))["energy_mismatch_pct"] == (
        "energy_j is null")


def test_energy_counter_and_token_edges():
    t = np.arange(0, 2001, 100)
    p = np.full(len(t), 100.0)  # 200 J
    stuck = Run({"run_id": "pins", "workload": "finetune", "platform": "l40s", "tokens": 0},
                [DeviceSeries(0, t, {"power_w": p, "energy_mj": np.full(len(t), 7.0)})], [])
    m = metrics.compute_run_metrics(stuck)
    assert m["energy_counter_j"] == 0.0 and m["energy_mismatch_pct"] is None
    assert _notes(m)["energy_mismatch_pct"] == "energy counter did not advance"
    assert m["energy_per_token_j"] is None and _notes(m)["energy_per_token_j"] == "no token count"
    small = Run({"run_id": "pins", "workload": "finetune", "platform": "l40s", "tokens": 0.5},
                [DeviceSeries(0, t, {"power_w": p,
                                     "energy_mj": np.linspace(0.0, 500.0, len(t))})], [])
    m = metrics.compute_run_metrics(small)
    assert m["energy_counter_j"] == pytest.approx(0.5)
    assert m["energy_mismatch_pct"] == pytest.approx(100.0 * (200.0 - 0.5) / 0.5)
    assert m["energy_per_token_j"] == pytest.approx(400.0)


def test_counter_energy_sorts_drops_missing_and_skips_resets():
    t = np.array([0, 1000, 2000, 3000])
    assert metrics.counter_energy_j(t[:2], np.array([1000.0, 3000.0])) == pytest.approx(2.0)
    assert metrics.counter_energy_j(t, np.array([1000.0, np.nan, 3000.0, 4000.0])) == (
        pytest.approx(3.0))
    assert metrics.counter_energy_j(t, np.array([1000.0, 3000.0, 4000.0, np.nan])) == (
        pytest.approx(3.0))
    # out of time order: sorted first (the later times are all after the first one); in time
    # order the counter reads 0, 10, 5 (a reset), 15 mJ: advances of 10 + 10 mJ
    assert metrics.counter_energy_j(np.array([0, 2000, 1000, 3000]),
                                    np.array([0.0, 5.0, 10.0, 15.0])) == pytest.approx(0.020)
    # sub-millijoule steps are advances, not resets
    assert metrics.counter_energy_j(t[:3], np.array([0.0, 0.5, 1.0])) == pytest.approx(0.001)
    assert metrics.counter_energy_j(t[:2], np.array([np.nan, 5.0])) is None
    assert metrics.counter_energy_j(t, None) is None
    assert metrics.counter_energy_j(t, np.zeros(3)) is None


def test_per_device_energy_mean_and_peak():
    t = np.arange(1000, 4001, 100)  # 3 s from t = 1 s
    p = np.linspace(100.0, 400.0, len(t))
    m = metrics.compute_run_metrics(_run((t, p), (np.array([1000, 2000]), np.array([50.0, 50.0])),
                                         (np.array([1000, 4000]), np.array([np.nan, 70.0]))))
    assert m["gpu_energy_j"] == [pytest.approx(750.0), pytest.approx(50.0), None]
    assert m["gpu_mean_power_w"] == [pytest.approx(250.0), pytest.approx(50.0), None]
    assert m["gpu_peak_power_w"] == [pytest.approx(400.0), 50.0, 70.0]  # one reading: its own


def test_steady_energy_per_token_needs_tokens_in_the_window():
    from llm_powertrace_ds.run import Event

    t = np.arange(0, 10_001, 100)
    events = [Event(2000, "steady_begin"), Event(4000, "steady_end")]

    def run_with(requests: list[dict]) -> dict:
        run = _run((t, np.full(len(t), 100.0)), requests=requests, workload="inference")
        run.events = list(events)
        return metrics.compute_run_metrics(run)

    half = run_with([_req(1000, 5000, 2)])  # no first token inside; half of the second one
    assert half["steady_energy_j"] == pytest.approx(200.0)
    assert half["steady_energy_per_token_j"] == pytest.approx(400.0)
    none = run_with([_req(5000, 6000, 3)])
    assert none["steady_energy_per_token_j"] is None
    assert _notes(none)["steady_energy_per_token_j"] == (
        "no request log with tokens in the steady window")
