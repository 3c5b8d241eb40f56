"""The catalog: one row per run with its axes and headline metrics, and the columns' docs."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from .. import schema
from .rundata import _num

IDENTITY = ("run_id", "workload", "platform", "model_family", "model_name", "model_params",
            "num_gpus", "sampler", "sweep", "repeat")
HEADLINE_METRICS = ("energy_per_token_j", "energy_j", "peak_power_w", "mean_power_w",
                    "p99_power_w", "ramp_abs_p99_1s_w_per_s", "ramp_up_max_1s_w_per_s",
                    "ramp_down_max_1s_w_per_s", "par", "duration_s")
"""The metrics the catalog shows, in the order people sort by (every metric is on the run page).

The catalog's columns: ``run_id``, these figures, then the other identity columns, the axes and
the quality flags — the figures are on screen first, ids and axes after them."""
FILTER_MAX_VALUES = 40
"""An axis or identity column with 2 to this many distinct values gets a drop-down filter: a
column with one value filters nothing, and metrics are continuous (sorted, not filtered)."""


def axis_names() -> list[str]:
    """Every sweep axis of both workloads, in schema order, without duplicates."""
    names = [c.name for c in schema.FINETUNE_AXES + schema.INFERENCE_AXES]
    return [n for n in dict.fromkeys(names) if n not in IDENTITY]


def run_folder(run_id: str) -> str:
    """A file-system- and URL-safe folder name for a run: a readable slug and a short hash."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id).strip("._")[:60] or "run"
    return f"{slug}-{hashlib.sha256(run_id.encode()).hexdigest()[:8]}"


def run_dir(folder: str) -> str:
    """Where a run's files live under the site's ``data/runs/``: ``<2 hex>/<folder>``.

    The first two hex digits of the folder's hash spread runs over 256 sub-folders, so that no
    folder of the site holds 10,000 entries (the Hub's advice) below about 2.5 million runs.
    ``assets/explorer.js`` derives the same path from the folder name.
    """
    return f"{folder[-8:-6]}/{folder}"


def _docs() -> dict[str, dict[str, str]]:
    docs: dict[str, dict[str, str]] = {}
    for config in schema.RUNS_CONFIGS:
        for col in schema.COLUMNS[config]:
            docs.setdefault(col.name, {"description": col.description, "unit": col.unit})
    return docs


def catalog(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Catalog rows and columns from the runs-config rows (columns null in every run dropped).

    Returns:
        ``{"columns": [{name, group, description, unit, filter}], "rows": [...]}``; each row has
        ``folder`` (its run page) and ``cpu_proxy`` (bool) beside the columns. The site writes
        the rows column-wise (:func:`packed_rows`).
    """
    docs = _docs()
    groups = ([("run_id", "identity")] + [(n, "metric") for n in HEADLINE_METRICS]
              + [(n, "identity") for n in IDENTITY if n != "run_id"]
              + [(n, "axis") for n in axis_names()] + [("quality_flags", "flags")])
    out_rows = []
    for r in rows:
        row: dict[str, Any] = {"folder": run_folder(str(r["run_id"])), "cpu_proxy": schema.is_cpu_proxy(r)}
        for name, _ in groups:
            value = r.get(name)
            row[name] = list(value or []) if name == "quality_flags" else _num(value)
        out_rows.append(row)
    columns = []
    for name, group in groups:
        values = [r[name] for r in out_rows]
        if name != "quality_flags" and name != "run_id" and all(v is None for v in values):
            continue
        if name == "quality_flags":
            distinct = {f for v in values for f in v}
        else:
            distinct = {v for v in values if v is not None}
        doc = docs.get(name, {})
        columns.append({"name": name, "group": group,
                        "description": doc.get("description", ""), "unit": doc.get("unit", ""),
                        "filter": group != "metric" and name != "run_id"
                        and 1 < len(distinct) <= FILTER_MAX_VALUES})
    return {"columns": columns, "rows": out_rows}


def packed_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Catalog rows as ``{"names": [...], "values": [[row values in names' order], ...]}``.

    The key of every cell is written once for all rows instead of once per row, which halves
    ``data/catalog.js`` at 10,000 runs and what the browser parses; ``explorer.js`` rebuilds the
    row objects.
    """
    names = list(rows[0]) if rows else []
    return {"names": names, "values": [[r.get(n) for n in names] for r in rows]}
