"""The query API's ordering promises, on runs published out of order.

``Runs`` are sorted by ``run_id`` (``to_arrow``, ``run_ids``, iteration, after ``where``);
``group_by(...).agg(...)`` returns its groups sorted by their keys, whatever order the runs
come in. The folder is built so that no order holds by accident: run ids, publication order
and key order all differ.
"""

from __future__ import annotations

import pytest

from llm_powertrace_ds import shards
from llm_powertrace_ds.query import Runs

# (run_id, platform, model_family, batch_size), published in this order
RUNS = [("r3", "l40s", "qwen", 8), ("r1", "l40s", "qwen", 4), ("r4", "h100_sxm_80gb", "llama", 16),
        ("r2", "a100_sxm_80gb", "mistral", 2), ("r5", "l40s", "llama", 32)]


@pytest.fixture
def runs(tmp_path, make_run) -> Runs:
    root = tmp_path / "ds"
    for i, (run_id, platform, family, batch) in enumerate(RUNS):
        shards.publish_run(root, make_run(run_id, platform=platform, family=family,
                                          batch_size=batch, seed=i, devices=1),
                           refresh_card=False)
    return Runs.load(root, "finetune")


def test_runs_come_sorted_by_run_id_whatever_the_publication_order(runs):
    expected = ["r1", "r2", "r3", "r4", "r5"]
    assert runs.run_ids() == expected
    assert runs.to_arrow().column("run_id").to_pylist() == expected
    assert [row.run_id for row in runs] == expected


def test_a_selection_keeps_the_run_id_order(runs):
    assert runs.where(platform="l40s").run_ids() == ["r1", "r3", "r5"]
    assert runs.where(lambda r: r.batch_size >= 4).run_ids() == ["r1", "r3", "r4", "r5"]


def test_groups_are_sorted_by_their_key_not_by_first_appearance(runs):
    # in run_id order the families first appear as qwen (r1), mistral (r2), llama (r4)
    t = runs.group_by("model_family").agg(run_id="count", batch_size=["min", "max"])
    assert t.column("model_family").to_pylist() == ["llama", "mistral", "qwen"]
    assert t.column("run_id_count").to_pylist() == [2, 1, 2]
    assert t.column("batch_size_min").to_pylist() == [16, 2, 4]
    assert t.column("batch_size_max").to_pylist() == [32, 2, 8]


def test_groups_of_several_keys_are_sorted_by_the_first_key_then_the_next(runs):
    t = runs.group_by("platform", "model_family").agg(run_id="count")
    assert list(zip(t.column("platform").to_pylist(), t.column("model_family").to_pylist(),
                    t.column("run_id_count").to_pylist(), strict=True)) == [
        ("a100_sxm_80gb", "mistral", 1), ("h100_sxm_80gb", "llama", 1), ("l40s", "llama", 1),
        ("l40s", "qwen", 2)]


def test_groups_of_a_selection_are_sorted_too(runs):
    t = runs.where(platform="l40s").group_by("model_family").agg(batch_size="sum")
    assert t.to_pylist() == [{"model_family": "llama", "batch_size_sum": 32},
                             {"model_family": "qwen", "batch_size_sum": 12}]
