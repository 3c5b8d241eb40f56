"""The dataset card builder: the one writer of a dataset folder's ``README.md``.

Minimal version: YAML metadata with every (config, split) present, its globs and the config's
``features``, then a short body. Regenerated from the data and the schema alone (idempotent).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from llm_powertrace_ds import layout, schema
from llm_powertrace_ds.shards import write_text_atomic


def card_metadata(root: str | Path) -> dict:
    """The card's YAML metadata."""
    return {
        "license": "cc-by-4.0",
        "pretty_name": "LLM-PowerTrace",
        "task_categories": ["time-series-forecasting"],
        "tags": ["timeseries", "energy", "gpu", "power", "llm"],
        "configs": layout.configs_metadata(root),
    }


def render_card(root: str | Path) -> str:
    """Render the card's text (YAML front matter + body)."""
    meta = yaml.safe_dump(card_metadata(root), sort_keys=False, allow_unicode=True, width=1000)
    configs = layout.config_globs(root)
    lines = [
        "---", meta.rstrip(), "---", "",
        "# LLM-PowerTrace",
        "",
        "Time-resolved, per-GPU power traces of LLM fine-tuning and inference.",
        f"Schema version `{schema.SCHEMA_VERSION}`.",
        "",
        "| config | splits |",
        "| --- | --- |",
    ]
    for config, splits in configs.items():
        lines.append(f"| `{config}` | {', '.join(f'`{s}`' for s in splits)} |")
    lines += ["", "```python", "from datasets import load_dataset",
              'ds = load_dataset("<this folder or repo id>", "finetune", split="<platform>")',
              "```", ""]
    return "\n".join(lines)


def write_card(root: str | Path) -> Path:
    """Write ``README.md`` atomically and return its path (unchanged text is not rewritten)."""
    path = Path(root) / "README.md"
    text = render_card(root)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        write_text_atomic(path, text)
    return path
