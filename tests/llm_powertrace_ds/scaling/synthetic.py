"""Synthetic runs for the scaling tests (shared by the scaling test modules)."""

from __future__ import annotations

import itertools
import math

import numpy as np


def finetune_rows(n: int = 48, seed: int = 3) -> list[dict]:
    """Fine-tuning runs from e = c · N^0.7 · G^0.1 with 5 % noise, two platforms, four models."""
    rng = np.random.default_rng(seed)
    grid = list(itertools.product([1e8, 3e8, 1e9, 7e9], [1, 2, 4, 8], ["h100_sxm_80gb", "l40s"],
                                  [256, 1024]))
    rows = []
    for i in rng.choice(len(grid), size=n, replace=False):
        npar, g, plat, seq = grid[i]
        y = (2e-7 if plat == "h100_sxm_80gb" else 3e-7) * npar ** 0.7 * g ** 0.1
        y *= math.exp(rng.normal(0, 0.05))
        tokens = 8 * seq * 100
        rows.append({"run_id": f"r{i}", "workload": "finetune", "platform": plat,
                     "model_family": "llama", "model_name": f"m{npar:g}", "model_params": npar,
                     "global_batch_size": 8, "seq_len": seq, "num_gpus": g, "method": "full",
                     "precision": "bf16", "tokens": tokens, "energy_per_token_j": y,
                     "energy_j": y * tokens, "duration_s": 100.0})
    return rows
