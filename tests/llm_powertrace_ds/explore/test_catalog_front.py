"""The catalog shows the figures people sort by first; filters only for columns that vary."""

from __future__ import annotations

from llm_powertrace_ds.explore.catalog import HEADLINE_METRICS, catalog
from llm_powertrace_ds.explore.site import plain_formula
from llm_powertrace_ds.metrics import metric_formulas


def _row(run_id, platform, family, e):
    return {"run_id": run_id, "workload": "inference", "platform": platform,
            "model_family": family, "model_name": "m", "num_gpus": 1, "sampler": "nvml",
            "energy_per_token_j": e, "energy_j": 10 * e, "peak_power_w": 500.0,
            "quality_flags": []}


def test_figures_come_right_after_the_run_id():
    cat = catalog([_row("a", "h100_sxm_80gb", "llama", 0.3), _row("b", "a100_sxm4_40gb", "qwen", 0.2)])
    names = [c["name"] for c in cat["columns"]]
    assert names[:4] == ["run_id", "energy_per_token_j", "energy_j", "peak_power_w"]
    assert HEADLINE_METRICS[:3] == ("energy_per_token_j", "energy_j", "peak_power_w")
    assert names.index("platform") > names.index("peak_power_w")


def test_filters_only_for_columns_that_vary():
    cat = catalog([_row("a", "h100_sxm_80gb", "llama", 0.3), _row("b", "a100_sxm4_40gb", "llama", 0.2)])
    filters = {c["name"] for c in cat["columns"] if c["filter"]}
    assert filters == {"platform"}  # workload, family, model, GPUs and sampler have one value


def test_run_page_formulas_have_no_rest_markup():
    shown = {name: plain_formula(text) for name, text in metric_formulas().items()}
    assert not [n for n, t in shown.items() if "`" in t or ":data:" in t or ":func:" in t]
    assert plain_formula("energy_j / ``tokens``; see :data:`GRID_MS` and "
                         ":func:`~llm_powertrace_ds.metrics.node_total`") == \
        "energy_j / tokens; see GRID_MS and node_total"
