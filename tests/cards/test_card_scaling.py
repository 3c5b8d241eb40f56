"""The card's scaling-law section shows the held-out table of the fit saved with the dataset."""

from __future__ import annotations

import math

from importers.test_mlenergy_v2 import task_folder

from llm_powertrace_ds.cli import main

MODELS = {f"org/model-{n}b": n for n in (2, 4, 7, 9, 13, 30, 70)}


def synthetic_runs() -> list[tuple[str, str, int, int, int, float, float]]:
    runs = []
    for model, n in MODELS.items():
        g = 1 if n < 20 else (2 if n < 50 else 4)
        for b in (32, 64, 128, 256):
            per_token = 4e-10 * 2 * n * 1e9 / b + 1.6e-12 * 2 * n * 1e9 + 0.08 * g
            per_token *= math.exp(0.05 * math.sin(n * b))  # deterministic scatter
            runs.append(("NVIDIA H100 80GB HBM3", model, b, g, 1, per_token * 400.0, 1500.0))
    return runs


def test_card_shows_the_saved_fit(tmp_path, capsys):
    task = task_folder(tmp_path / "src", synthetic_runs(), MODELS)
    out = tmp_path / "ds"
    assert main(["import", "mlenergy-v2", str(task), "--out", str(out)]) == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "## Scaling law" in card and "No fit is saved with this dataset yet." in card
    assert "Seed-compatible metrics" in card and "`ramp_event_frequency_1s`" in card
    assert main(["fit", str(out), "--holdout", "model_params=top", "--save", "--n-boot",
                 "20"]) == 0
    assert (out / "scaling" / "fit.json").is_file()
    card = (out / "README.md").read_text(encoding="utf-8")
    section = card.split("## Scaling law", 1)[1].split("\n## ", 1)[0]
    assert "Held out `model_params=top`: 24 runs fitted, 4 held out." in section
    for row in ("| loglinear | 4 | 4 | 0 |", "| physics | 4 | 4 | 0 |",
                "| baseline `constant` | 4 | 4 | 0 |", "| baseline `proportional` | 4 | 4 | 0 |"):
        assert row in section
    # the dataset still loads with the fit beside it
    from datasets import load_dataset

    ds = load_dataset(str(out), "inference_runs", split="h100_sxm_80gb",
                      cache_dir=str(tmp_path / "cache"))
    assert ds.num_rows == 28
