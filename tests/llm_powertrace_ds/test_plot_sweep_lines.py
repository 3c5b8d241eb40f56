"""The sweep plot's lines: fine-tuning and inference runs are never joined; sizes on a log axis."""

from __future__ import annotations

import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.plots import log_axis, sweep_lines


def _row(workload, params, e, platform="cpu_proxy"):
    return {"workload": workload, "platform": platform, "model_params": params,
            "energy_per_token_j": e, "sampler": "cpu_proxy" if platform == "cpu_proxy" else "nvml"}


def test_finetune_and_inference_runs_are_separate_lines():
    rows = [_row("finetune", 1e6, 1.0), _row("finetune", 4e6, 2.0),
            _row("inference", 1e6, 0.1), _row("inference", 8e6, 0.3)]
    lines, proxy = sweep_lines(rows, "energy_per_token_j", "model_params")
    assert lines == {"cpu_proxy · finetune": {1e6: [1.0], 4e6: [2.0]},
                     "cpu_proxy · inference": {1e6: [0.1], 8e6: [0.3]}}
    assert proxy == set(lines)


def test_one_workload_keeps_one_line_per_platform():
    rows = [_row("inference", 1e6, 0.1, "h100_sxm_80gb"), _row("inference", 2e6, 0.2, "h100_sxm_80gb"),
            _row("inference", 1e6, 0.3, "a100_sxm4_40gb")]
    lines, proxy = sweep_lines(rows, "energy_per_token_j", "model_params")
    assert sorted(lines) == ["a100_sxm4_40gb", "h100_sxm_80gb"] and proxy == set()


def test_rows_without_the_metric_are_skipped_and_none_is_an_error():
    rows = [_row("finetune", 1e6, None), {"workload": "finetune", "model_params": True,
                                          "energy_per_token_j": 1.0}]
    with pytest.raises(InputError, match="no run has both"):
        sweep_lines(rows, "energy_per_token_j", "model_params")


@pytest.mark.parametrize("xs, log", [([1e6, 2e6, 4e6, 16e6], True), ([1, 2, 4], False),
                                     ([0, 10, 100], False), ([], False), ([2, 8.5], True)])
def test_log_axis_for_sizes_spanning_more_than_4x(xs, log):
    assert log_axis(xs) is log
