"""The query API on wrong types and list columns.

List columns get list semantics or a clear refusal, wrong types a one-line error naming the
column and its type — never a raw pyarrow error.
"""

from __future__ import annotations

import pytest

from llm_powertrace_ds import shards
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.query import Runs


@pytest.fixture
def runs(tmp_path, make_run):
    root = tmp_path / "ds"
    a = make_run("q-a", batch_size=2)
    b = make_run("q-b", batch_size=4)
    b.add_flags("stall")
    shards.publish_run(root, a, refresh_card=False)
    shards.publish_run(root, b, refresh_card=False)
    return Runs.load(root, workload="finetune")


def test_a_list_column_gets_contains_semantics(runs):
    flagged = runs.where(quality_flags="stall").run_ids()
    assert flagged == ["q-b"]
    assert runs.where(quality_flags=["stall", "gap"]).run_ids() == ["q-b"]
    assert runs.where(quality_flags="no_such_flag").run_ids() == []


def test_grouping_by_a_list_column_is_refused_by_name(runs):
    with pytest.raises(InputError) as exc:
        runs.group_by("quality_flags").agg(energy_j="mean")
    assert exc.value.field == "quality_flags" and "holds lists" in str(exc.value)
    with pytest.raises(InputError, match="only 'count'"):
        runs.group_by("workload").agg(quality_flags="mean")


@pytest.mark.parametrize(("column", "value", "expected"), [
    ("start_time", "yesterday", "timestamp"),
    ("batch_size", True, "int32"),
    ("batch_size", "four", "int32"),
    ("energy_j", "a lot", "double"),
])
def test_a_value_of_the_wrong_type_names_the_column_and_its_type(runs, column, value, expected):
    with pytest.raises(InputError) as exc:
        runs.where(**{column: value}).run_ids()
    assert exc.value.field == column and expected in str(exc.value)
    assert "\n" not in str(exc.value)


def test_values_that_convert_still_work(runs):
    assert runs.where(batch_size=[2, 4]).run_ids() == ["q-a", "q-b"]
    assert runs.where(batch_size="4").run_ids() == ["q-b"]  # a number written as text
