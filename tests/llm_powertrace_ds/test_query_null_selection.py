"""``Runs.where(column=None)`` selects the runs whose value is null, alone or among values."""

from __future__ import annotations

import pytest

from llm_powertrace_ds import shards
from llm_powertrace_ds.query import Runs

# per run: a float, a text, an int16 and a bool column, null where the source said nothing
VALUES = {
    "ft-0": {"power_limit_setting_w": None, "grid_region": "DE", "lora_rank": 8,
             "gradient_checkpointing": True},
    "ft-1": {"power_limit_setting_w": 300.0, "grid_region": None, "lora_rank": None,
             "gradient_checkpointing": None},
    "ft-2": {"power_limit_setting_w": None, "grid_region": None, "lora_rank": 16,
             "gradient_checkpointing": False},
    "ft-3": {"power_limit_setting_w": 250.0, "grid_region": "FR", "lora_rank": 8,
             "gradient_checkpointing": None},
    "ft-4": {"power_limit_setting_w": 300.0, "grid_region": "DE", "lora_rank": None,
             "gradient_checkpointing": True},
}
COLUMNS = ("power_limit_setting_w", "grid_region", "lora_rank", "gradient_checkpointing")


@pytest.fixture
def folder(tmp_path, make_run):
    root = tmp_path / "llm-powertrace"
    for i, (run_id, meta) in enumerate(VALUES.items()):
        shards.publish_run(root, make_run(run_id, platform="l40s", n=30, seed=i, **meta))
    return root


def _ids(pick) -> list[str]:
    return sorted(run_id for run_id, meta in VALUES.items() if pick(meta))


@pytest.mark.parametrize("streaming", [False, True], ids=["table", "streaming"])
def test_none_selects_the_runs_whose_value_is_null(folder, streaming):
    runs = Runs.load(str(folder), workload="finetune", streaming=streaming)
    for col in COLUMNS:
        _check_column(runs, col)


def _check_column(runs: Runs, col: str) -> None:
    nulls = _ids(lambda m: m[col] is None)
    assert 0 < len(nulls) < len(VALUES)
    assert sorted(runs.where(**{col: None}).run_ids()) == nulls
    # null among values: any of them
    some = next(m[col] for m in VALUES.values() if m[col] is not None)
    assert sorted(runs.where(**{col: [None, some]}).run_ids()) == \
        _ids(lambda m: m[col] is None or m[col] == some)
    # a value alone never selects a null, and nulls combine with other conditions
    assert sorted(runs.where(**{col: some}).run_ids()) == _ids(lambda m: m[col] == some)
    assert sorted(runs.where(**{col: None}).where(lora_rank=8).run_ids()) == \
        _ids(lambda m: m[col] is None and m["lora_rank"] == 8)


def test_a_predicate_comparing_with_null_is_never_true(folder):
    runs = Runs.load(str(folder), workload="finetune")
    assert sorted(runs.where(lambda r: r.power_limit_setting_w < 1000).run_ids()) == \
        _ids(lambda m: m["power_limit_setting_w"] is not None)
