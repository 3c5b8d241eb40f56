"""What a server reports never overwrites what the run measures.

It is checked before the measured window (``serving_engine: openai``).
"""

from __future__ import annotations

from pathlib import Path

from llm_powertrace_ds.shards import read_run

from .openai_double import DoubleConfig, start_double, sweep_text


def generate_against(tmp_path: Path, server_info: dict):
    from generation.runner import generate

    with start_double(DoubleConfig(server_info=server_info)) as server:
        sweep = tmp_path / "sweep.yaml"
        sweep.write_text(sweep_text(server.url, "reports"), encoding="utf-8")
        report = generate(sweep, tmp_path / "ds", progress=False)
        return report, server.count


def test_a_server_reporting_another_tp_size_is_refused_before_any_request(tmp_path):
    report, served = generate_against(tmp_path, {"tp_size": 4})
    (outcome,) = report.outcomes
    assert outcome.status == "failed"
    assert "reports tp_size 4, the run has tp_size 1" in outcome.error
    assert "\n" not in outcome.error
    assert served == 0  # refused before warm-up, before the measured window


def test_a_count_no_row_can_hold_is_refused_before_any_request(tmp_path):
    report, served = generate_against(tmp_path, {"max_running_requests": 1e30})
    (outcome,) = report.outcomes
    assert outcome.status == "failed"
    assert "max_running_requests 1e+30: not a whole number in 1..2147483647" in outcome.error
    assert "/get_server_info" in outcome.error and "\n" not in outcome.error
    assert served == 0


def test_what_the_server_reports_fills_only_what_the_run_does_not_know(tmp_path):
    report, served = generate_against(tmp_path, {"tp_size": 1, "max_running_requests": 48,
                                                 "page_size": 16})
    (outcome,) = report.outcomes
    assert outcome.status == "published", outcome.error
    meta = read_run(tmp_path / "ds", outcome.run_id).meta
    assert (meta["tp_size"], meta["num_gpus"]) == (1, 1)
    assert meta["batch_size"] == 48 and meta["engine_block_size"] == 16
    assert served > 0
