"""``llm-powertrace demo``: the embedded default job.

Until the generators land it explains what it will do and how to import one's own logs; the
generator issues make it run the demo sweeps.
"""

from __future__ import annotations

from pathlib import Path

INTRO = """LLM-PowerTrace demo
===================
This demo will run tiny fine-tuning and inference sweeps under the best available power sampler
(NVML on a GPU, else `cpu_proxy`, a model of CPU activity that is NOT a GPU measurement), write
them to {out}/, build the dataset card and load the result back with `datasets.load_dataset`.

Import your own nvidia-smi log (the project bundles no third-party trace):

  nvidia-smi --query-gpu=timestamp,index,uuid,name,power.draw,clocks.sm,utilization.gpu,\\
memory.used,temperature.gpu --format=csv,nounits -lms 100 > gpu.csv
  llm-powertrace import nvidia-smi gpu.csv --out {out} --workload inference
  python -c "from datasets import load_dataset; print(load_dataset('{out}', 'inference'))"
"""


def run_demo(out: Path, *, quick: bool = False, quiet: bool = False) -> int:
    """Run the demo; returns the exit code."""
    print(INTRO.format(out=out))
    return 0
