"""The card counts runs with random weights apart from runs with trained checkpoints."""

from __future__ import annotations

from conftest import synthetic_run

from cards.builder import refresh_card
from llm_powertrace_ds import shards


def test_random_weight_runs_are_counted_separately(tmp_path):
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("zoo-a", random_weights=True, model_source="zoo"),
                       refresh_card=False)
    shards.publish_run(root, synthetic_run("hub-a", random_weights=False, model_source="hub"),
                       refresh_card=False)
    shards.publish_run(root, synthetic_run("hub-b", random_weights=False, model_source="hub",
                                           seed=1), refresh_card=False)
    refresh_card(root)
    text = (root / "README.md").read_text()
    assert "**1 run used random (untrained) weights**" in text
    assert "against 2 runs with trained checkpoints" in text


def test_no_note_without_random_weights(tmp_path):
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("hub-a", random_weights=False, model_source="hub"),
                       refresh_card=False)
    refresh_card(root)
    assert "used random (untrained) weights" not in (root / "README.md").read_text()
