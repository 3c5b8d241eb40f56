"""Per-run metric rows of a dataset folder (what ``llm-powertrace metrics`` prints).

Not imported by the package's ``__init__``: it reads shards, and ``shards`` computes metrics
when it publishes, so importing it from there would close a cycle. ``shards`` is imported when
rows are read, so the CLI's start-up does not load the shard readers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import schema
from ..errors import RunNotFound
from ..names import check_name, check_split, known_configs
from . import METRIC_NAMES, compute_run_metrics


def runs_configs(config: str | None) -> list[str]:
    """The runs config(s) behind a ``--config`` value (an unknown name lists the valid ones).

    Raises:
        UnknownName: a config the dataset does not define.
    """
    if config is None:
        return list(schema.RUNS_CONFIGS)
    valid = [c for c in known_configs() if c != schema.REQUESTS_CONFIG]
    check_name(config, valid, what="config", field="--config")
    if config in schema.RUNS_CONFIGS:
        return [config]
    return [f"{schema.base_config(config)}_runs"]


def iter_run_rows(root: Path, config: str | None = None, split: str | None = None
                  ) -> Iterator[dict[str, Any]]:
    """Rows of the runs configs (one per run) of a dataset folder.

    Raises:
        UnknownName: an unknown config, or a split the folder does not hold for it.
    """
    from ..shards import iter_rows  # pyarrow readers: loaded when rows are read, not on import

    configs = runs_configs(config)
    check_split(root, split, configs)
    for cfg in configs:
        yield from iter_rows(root, cfg, split)


def run_metrics_rows(root: Path, *, config: str | None = None, split: str | None = None,
                     run_id: str | None = None, recompute: bool = False) -> list[dict[str, Any]]:
    """One dict per run: ``run_id``, ``num_gpus``, every node-total metric, ``metric_notes``.

    Stored runs rows are used when they carry every metric of this version; otherwise (older
    schema) or with ``recompute`` the metrics are computed again from the trace rows.

    Raises:
        RunNotFound: ``run_id`` is given and no row of the folder (config, split) has it.
    """
    from ..shards import RunReader

    out = []
    reader: RunReader | None = None  # one walk and one index of packed shards for every run
    for row in iter_run_rows(root, config, split):
        if run_id is not None and row["run_id"] != run_id:
            continue
        values: dict[str, Any] = dict(row)
        if recompute or any(name not in row for name in METRIC_NAMES):
            reader = reader or RunReader(root)
            values.update(compute_run_metrics(reader.read(row["run_id"])))
        obj = {"run_id": row["run_id"], "workload": row.get("workload"),
               "platform": row.get("platform"), "num_gpus": row.get("num_gpus")}
        obj.update({name: values.get(name) for name in METRIC_NAMES})
        obj["metric_notes"] = values.get("metric_notes") or []
        out.append(obj)
    if run_id is not None and not out:
        raise RunNotFound(f"run {run_id!r} is not in {root}"
                          + (f" (config {config}, split {split})" if config or split else ""))
    return sorted(out, key=lambda r: r["run_id"])


__all__ = ["iter_run_rows", "run_metrics_rows", "runs_configs"]
