"""Matched comparisons: compare the values of one column (e.g. platforms) like with like.

A group mean over a mixed set ranks platforms by what each happened to run (bigger models,
other batches) as much as by the platform. :func:`compare_matched` compares only
*configurations* — the runs that agree on every ``match`` column — that were run under both
values, and summarises the per-configuration ratios.

For a configuration c with mean metric ``m_v(c)`` under value v (mean over its repeats), the
ratio against the baseline b is ``r_v(c) = m_v(c) / m_b(c)``. The summary per value v over the
configurations run under both v and b: their count, how many have ``r_v < 1`` (lower than the
baseline) and ``> 1``, and the median, minimum and maximum of ``r_v``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import InputError
from .names import check_name


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare_matched` (``Runs.compare``).

    Attributes:
        by: the compared column (``platform``).
        metric: the compared metric.
        match: the columns a configuration agrees on.
        baseline: the value the others are divided by.
        table: one row per configuration run under the baseline and at least one other value:
            the ``match`` columns, the metric's mean under each value (a column named by the
            value) and ``ratio_<value>`` for each value other than the baseline.
        summary: per other value, the counts and ratio statistics (see the module's formula).
        runs_total: runs with the metric, ``by`` and every ``match`` column set.
        runs_matched: of those, the runs in a configuration of ``table``.
    """

    by: str
    metric: str
    match: tuple[str, ...]
    baseline: Any
    table: pa.Table
    summary: tuple[dict[str, Any], ...]
    runs_total: int
    runs_matched: int

    def to_pandas(self) -> Any:
        """:attr:`table` as a pandas DataFrame."""
        return self.table.to_pandas()

    def __str__(self) -> str:
        keys = ", ".join(self.match)
        lines = [f"{self.metric} by {self.by}, like with like: configurations matched on "
                 f"({keys}); {self.runs_matched} of {self.runs_total} runs are in one"]
        for s in self.summary:
            if not s["configurations"]:
                lines.append(f"  {s[self.by]} vs {self.baseline}: no configuration run under both")
                continue
            lines.append(
                f"  {s[self.by]} vs {self.baseline}: {s['configurations']} matched "
                f"configurations, lower in {s['lower']}, higher in {s['higher']}; ratio median "
                f"{s['median_ratio']:.3f} (min {s['min_ratio']:.3f}, max {s['max_ratio']:.3f})")
        return "\n".join(lines)


def compare_matched(table: pa.Table, by: str, metric: str, match: Sequence[str], *,
                    baseline: Any = None) -> Comparison:
    """Compare ``metric`` across the values of ``by`` on configurations matched on ``match``.

    Args:
        table: a runs table (``Runs.to_arrow()``).
        by: the column whose values are compared (``platform``).
        metric: a numeric column (``energy_per_token_j``).
        match: the columns two runs must agree on to be compared (``model_name``,
            ``batch_size``, ``num_gpus``, ...).
        baseline: the value the others are divided by (default: the first value, sorted).

    Returns:
        the :class:`Comparison` (print it for the summary).

    Raises:
        UnknownName: an unknown column.
        InputError: a list column as a key, a non-numeric metric, fewer than two values of
            ``by``, or a baseline that is not one of them.
    """
    keys = list(match)
    if not keys:
        raise InputError("match names no column: name the columns runs must agree on",
                         field="match")
    if by in keys:
        raise InputError(f"{by!r} is both compared and matched", field="match")
    for name in [by, metric, *keys]:
        check_name(name, table.column_names, what="column", field=name)
    for name in [by, *keys]:
        typ = table.schema.field(name).type
        if pa.types.is_list(typ) or pa.types.is_large_list(typ):
            raise InputError(f"column {name!r} holds lists and cannot be matched on", field=name)
    mtype = table.schema.field(metric).type
    if not (pa.types.is_integer(mtype) or pa.types.is_floating(mtype)):
        raise InputError(f"metric {metric!r} is not numeric ({mtype})", field="metric")
    cols = [by, metric, *keys]
    t = table.select(cols)
    mask = None
    for name in cols:
        valid = pc.is_valid(t.column(name))
        if name == metric:
            valid = pc.and_(valid, pc.invert(pc.is_nan(pc.cast(t.column(name), pa.float64()))))
        mask = valid if mask is None else pc.and_(mask, valid)
    t = t.filter(mask) if mask is not None else t
    grouped = t.group_by([*keys, by], use_threads=False).aggregate(
        [(metric, "mean"), (metric, "count")]).to_pylist()
    values = sorted({g[by] for g in grouped})
    if len(values) < 2:
        raise InputError(f"{by!r} has {len(values)} value(s) with {metric!r} set; a comparison "
                         "needs two", field="by")
    base = values[0] if baseline is None else baseline
    if base not in values:
        raise InputError(f"baseline {base!r} is not a value of {by!r} ({', '.join(map(str, values))})",
                         field="baseline")
    others = [v for v in values if v != base]
    configs: dict[tuple[Any, ...], dict[Any, tuple[float, int]]] = {}
    for g in grouped:
        configs.setdefault(tuple(g[k] for k in keys), {})[g[by]] = (
            g[f"{metric}_mean"], g[f"{metric}_count"])
    rows = []
    matched_runs = 0
    for key in sorted(configs, key=lambda k: tuple(str(x) for x in k)):
        got = configs[key]
        if base not in got or not any(v in got for v in others):
            continue
        matched_runs += sum(n for _, n in got.values())
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        for v in values:
            row[str(v)] = got[v][0] if v in got else None
        for v in others:
            row[f"ratio_{v}"] = got[v][0] / got[base][0] if v in got and got[base][0] else None
        rows.append(row)
    out_cols = [*keys, *map(str, values), *(f"ratio_{v}" for v in others)]
    out = pa.Table.from_pylist(rows, schema=_schema(t, keys, values, others)) if rows else \
        pa.table({c: pa.array([], type=f.type)
                  for c, f in zip(out_cols, _schema(t, keys, values, others), strict=True)})
    summary = []
    for v in others:
        r = np.array([row[f"ratio_{v}"] for row in rows if row[f"ratio_{v}"] is not None])
        summary.append({
            by: v, "configurations": int(r.size), "lower": int((r < 1).sum()),
            "higher": int((r > 1).sum()),
            "median_ratio": float(np.median(r)) if r.size else None,
            "min_ratio": float(r.min()) if r.size else None,
            "max_ratio": float(r.max()) if r.size else None})
    return Comparison(by=by, metric=metric, match=tuple(keys), baseline=base, table=out,
                      summary=tuple(summary), runs_total=t.num_rows, runs_matched=matched_runs)


def _schema(t: pa.Table, keys: list[str], values: list[Any], others: list[Any]) -> pa.Schema:
    fields = [t.schema.field(k) for k in keys]
    fields += [pa.field(str(v), pa.float64()) for v in values]
    fields += [pa.field(f"ratio_{v}", pa.float64()) for v in others]
    return pa.schema(fields)
