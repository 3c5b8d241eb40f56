"""The bench scripts' JSON documents carry the issues' targets, whatever the figures."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import gpu_validate  # noqa: E402
import scale  # noqa: E402


def _published() -> dict:
    names = ("list", "metrics", "facility", "runs_load", "traces_10_runs")
    return {
        "runs": {"mid": 300, "big": 1000},
        "packed_over_unpacked_cpu": {n: 1.6 if n == "facility" else 0.5 for n in names},
        "growth_cpu": {f"{n}_{lay}": 3.4 for n in names for lay in ("unpacked", "packed")},
        "facility_unpacked_growth": {"cpu": 1.1, "rss": 1.0},
        "per_run": {"runs_table_bytes_per_run_unpacked": 53_000,
                    "runs_table_bytes_per_run_packed": 2_700,
                    "packed_runs_table_arrow_read_ms_per_run": 0.03,
                    "packed_list_runs_ms_per_run": 0.08, "packed_runs_load_ms_per_run": 0.04},
        "duckdb_vs_runs": {"runs_mean_by_platform_s": 0.084, "duckdb_mean_by_platform_s": 0.014,
                           "runs_p99_per_run_s": 1.31, "duckdb_p99_per_run_s": 0.36,
                           "mean_by_platform_agree": True, "p99_per_run_agree": False},
    }


def _by_name(rows) -> dict:
    return {r.name: r for r in rows}


def test_scale_published_figures_carry_issue_40s_targets():
    rows = _by_name(scale.results_of(_published()))
    assert rows["published.packed_over_unpacked_facility"].target == "<= 1.5"
    assert rows["published.packed_over_unpacked_facility"].ok is False
    assert rows["published.packed_over_unpacked_runs_load"].ok is True
    assert rows["published.packed_over_unpacked_traces_10_runs"].target is None
    assert rows["published.growth_list_unpacked"].target == "<= 3.6"
    assert rows["published.runs_table_bytes_per_run_unpacked"].target == "<= 8,192"
    assert rows["published.runs_table_bytes_per_run_unpacked"].ok is False
    assert rows["published.packed_runs_table_arrow_read_ms_per_run"].ok is True
    assert rows["published.duckdb_agrees_with_runs"].ok is False


def test_scale_cli_cost_figures_carry_issue_32s_targets_and_a_missing_one_stays_null():
    report = {"samples_5min": 12_000, "ratios": {"cli_import_fixed_cpu_s": 0.61,
                                                 "cli_import_marginal_samples_per_cpu_s": None},
              "targets": {"cli_import_fixed_cpu_s": "<= 0.5",
                          "cli_import_marginal_samples_per_cpu_s": ">= 1.5e+06"}}
    rows = _by_name(scale.results_of(report))
    assert (rows["cli_import_fixed_cpu_s"].target, rows["cli_import_fixed_cpu_s"].ok) == \
        ("<= 0.5", False)
    marginal = rows["cli_import_marginal_samples_per_cpu_s"]
    assert (marginal.value, marginal.target, marginal.ok) == (None, ">= 1,500,000", None)
    assert marginal.unit == "samples/CPU-s"


def test_the_full_scale_report_has_its_three_parts_once_each():
    main_part = {"runs": 300, "samples": 29_700_000,
                 "ratios": {"import_cpu_samples_per_s": 1_600_000},
                 "targets": {"import_cpu_samples_per_s": ">= 1.5e+06"}}
    cli = {"ratios": {"cli_import_fixed_cpu_s": 0.4}, "targets": {"cli_import_fixed_cpu_s":
                                                                  "<= 0.5"}}
    rows = scale.results_of({**main_part, "cli_import": cli, "published": _published()})
    names = [r.name for r in rows]
    assert len(names) == len(set(names))
    assert {"import_cpu_samples_per_s", "cli_import_fixed_cpu_s",
            "published.growth_list_packed"} <= set(names)
    assert _by_name(rows)["import_cpu_samples_per_s"].ok is True


def test_gpu_validate_energy_ratio_must_lie_within_two_percent():
    report = {"matmul": {"device": "NVIDIA H200", "tflops": 600.0}, "energy_ratio": 1.03,
              "idle_mean_w": 80.0, "loaded_mean_w": 650.0, "missed_ticks": 0,
              "lateness_p99_ms": 1.2, "instant_changes_per_s": 10.0}
    rows = _by_name(gpu_validate.results_of(report))
    assert rows["energy_ratio"].target == "0.98 to 1.02"
    assert rows["energy_ratio"].ok is False
    assert rows["gpu"].value == "NVIDIA H200"
