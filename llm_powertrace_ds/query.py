"""A small, lazy, Arrow-backed query API for analysts: runs, filters, groups, traces.

``Runs`` is the runs table (``finetune_runs`` / ``inference_runs``: one row per run with every
axis and metric); ``where`` narrows it, ``group_by(...).agg(...)`` summarises it, and
``traces()`` streams the selected runs' power traces as numpy arrays — one run at a time, and
only the columns asked for, so memory is bounded by one run whatever the dataset's size.
Nothing is read until a result is asked for.

Sources: a dataset folder, a Hub dataset repo id (downloaded once with
``huggingface_hub.snapshot_download``, see :func:`llm_powertrace_ds.hub.resolve_dataset`), or
either of them with ``streaming=True`` (read through ``datasets.load_dataset(...,
streaming=True)``: nothing is downloaded up front, batches stream in). The three give the same
results.

Example (the folder ``llm-powertrace`` that ``llm-powertrace demo`` writes; here a small one):
    >>> runs = Runs.load("llm-powertrace", workload="finetune")
    >>> len(runs)
    3
    >>> l40s = runs.where(platform="l40s", method="lora").where(lambda r: r.batch_size >= 8)
    >>> l40s.run_ids()
    ['ft-b']
    >>> for run, trace in l40s.traces(total=True):
    ...     print(run.run_id, trace.gpu_index, len(trace.t_ms), round(float(trace.power_w.mean())))
    ft-b None 199 420
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import schema
from .errors import InputError, MissingExtra
from .matched import Comparison, compare_matched
from .names import UnknownName, check_name, closest
from .query_sources import Source, arrow_schema, list_to_numpy, open_source

AGGREGATIONS = ("mean", "min", "max", "sum", "count", "count_distinct", "stddev", "variance",
                "first", "last")
"""What ``GroupBy.agg`` accepts (pyarrow's hash aggregations of the same names)."""

TRACE_KEYS = ("run_id", "node_index", "gpu_index")


# ---------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------

class UnknownColumn(UnknownName, AttributeError):
    """A row attribute that is no column (an ``AttributeError`` too, so ``hasattr`` works)."""


class Row(Mapping[str, Any]):
    """One run's row: attribute access (``r.batch_size``) and mapping access (``r["energy_j"]``).

    Examples:
        >>> r = Row({"run_id": "a", "batch_size": 8})
        >>> r.batch_size, r["run_id"], hasattr(r, "batch_sise")
        (8, 'a', False)
    """

    __slots__ = ("_data", "_read")

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data: Mapping[str, Any] = data if isinstance(data, _RowView) else dict(data)
        self._read: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._data:
            close = difflib.get_close_matches(name, list(self._data), n=1)
            raise UnknownColumn(f"unknown column {name!r}"
                                + (f"; did you mean {close[0]!r}?" if close else ""),
                                field=name)
        self._read.append(name)
        return self._data[name]

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Row(run_id={self._data.get('run_id')!r})"


class _Columns:
    """A table's columns as Python lists, each converted on its first use."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.names = table.column_names
        self.known = set(self.names)
        self.lists: dict[str, list[Any]] = {}

    def value(self, name: str, i: int) -> Any:
        values = self.lists.get(name)
        if values is None:
            values = self.lists[name] = self.table.column(name).to_pylist()
        return values[i]


class _RowView(Mapping[str, Any]):
    """Row ``i`` of a :class:`_Columns`: a predicate that reads two columns converts two."""

    __slots__ = ("_cols", "_i")

    def __init__(self, cols: _Columns, i: int) -> None:
        self._cols = cols
        self._i = i

    def __getitem__(self, key: str) -> Any:
        if key not in self._cols.known:
            raise KeyError(key)
        return self._cols.value(key, self._i)

    def __contains__(self, key: object) -> bool:
        return key in self._cols.known

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols.names)

    def __len__(self) -> int:
        return len(self._cols.names)


def _predicate_mask(table: pa.Table, pred: Callable[[Row], Any]) -> pa.Array:
    """Evaluate a Python predicate per row; SQL null semantics for comparisons with null.

    A predicate that raises ``TypeError`` after reading a null value (``None >= 8``) is false
    for that row, as ``NULL >= 8`` is in SQL; any other error propagates. Only the columns the
    predicate reads become Python objects (a runs row has a few hundred columns).
    """
    keep = []
    cols = _Columns(table)
    for i in range(table.num_rows):
        row = Row(_RowView(cols, i))
        try:
            keep.append(bool(pred(row)))
        except TypeError:
            if any(row._data[name] is None for name in row._read):
                keep.append(False)
            else:
                raise
    return pa.array(keep, type=pa.bool_())


# ---------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------

_RUNS_CHUNK_BATCHES = 32
"""Batches combined at a time by :func:`_runs_table` (an unpacked folder: one batch per run).

Measured on imported 300- and 1,000-run folders (``Runs.load``, CPU, fresh processes): 32 at a
time, 0.36-0.45 ms a run at 1,000; 128, 0.51; all at once, 0.52-0.54; 8, 0.42-0.44."""


def _batches_table(got: list[pa.RecordBatch], schema_: pa.Schema) -> pa.Table:
    """Record batches as one table in ``schema_`` (extra or missing columns promoted)."""
    try:
        return pa.Table.from_batches(got, schema=schema_)
    except pa.ArrowInvalid:  # a file of another schema version: group batches by schema
        groups: list[list[pa.RecordBatch]] = []
        for batch in got:
            if groups and batch.schema.equals(groups[-1][0].schema):
                groups[-1].append(batch)
            else:
                groups.append([batch])
        return pa.concat_tables([schema_.empty_table(),
                                 *(pa.Table.from_batches(g) for g in groups)],
                                promote_options="default")


def _runs_table(batches: Iterable[pa.RecordBatch], schema_: pa.Schema) -> pa.Table:
    """One runs config's batches as a table of one chunk per column, in ``schema_``.

    Files written by an older schema version (fewer columns) are read too: their missing
    columns are null, columns they have beyond ``schema_`` are kept. One contiguous chunk per
    column: an unpacked folder gives one batch per run, and filters over thousands of one-row
    chunks (each holding its file's memory map) cost more per run the more runs there are.
    The batches are combined ``_RUNS_CHUNK_BATCHES`` at a time, then the parts once more:
    combining all of an unpacked folder's one-row batches at once (each column a chunk per
    run, every file's memory map held until the end) cost up to 4.4x more CPU at 1,000 runs
    than at 300 (``bench/scale.py --published-only``; linear is 3.33x); a few dozen at a time
    stay in the processor's caches.
    """
    parts: list[pa.Table] = []
    got: list[pa.RecordBatch] = []
    for batch in batches:
        got.append(batch)
        if len(got) >= _RUNS_CHUNK_BATCHES:
            parts.append(_batches_table(got, schema_).combine_chunks())
            got = []
    if got or not parts:
        parts.append(_batches_table(got, schema_).combine_chunks())
    if len(parts) == 1:
        return parts[0]
    if all(part.schema.equals(parts[0].schema) for part in parts):
        return pa.concat_tables(parts).combine_chunks()
    return pa.concat_tables(parts, promote_options="default").combine_chunks()


Filter = Callable[[pa.Table], pa.Array]


class Runs:
    """A lazy selection of runs (one row per run: axes, results and node-total metrics).

    Build one with :meth:`Runs.load`; every method returns a new object or a result, never
    changes this one.
    """

    def __init__(self, source: Source, configs: Sequence[tuple[str, str]],
                 filters: tuple[Filter, ...] = (), base: dict[str, pa.Table] | None = None
                 ) -> None:
        self._source = source
        self._configs = tuple(configs)  # (runs config, split)
        self._filters = filters
        self._table: pa.Table | None = None
        self._base = {} if base is None else base  # the unfiltered table, shared by derived

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def load(cls, source: str | Path, workload: str | None = None, *,
             split: str | None = None, streaming: bool = False) -> Runs:
        """Open the runs of a dataset folder or Hub repo (nothing is read yet but the names).

        Args:
            source: a dataset folder, or a Hub dataset repo id (``org/name``).
            workload: ``finetune`` or ``inference``; ``None`` for both.
            split: one platform (e.g. ``h100_sxm_80gb``); ``None`` for all.
            streaming: read through ``datasets.load_dataset(..., streaming=True)``.

        Raises:
            UnknownName: an unknown workload or split (the message lists the valid ones).
            InputError: ``source`` is neither a dataset folder nor a reachable repo.

        Examples:
            >>> Runs.load("llm-powertrace", split="h100_sxm_80gb").run_ids()
            ['ft-c']
            >>> Runs.load("llm-powertrace", split="h100")
            Traceback (most recent call last):
            ...
            llm_powertrace_ds.names.UnknownName: field 'split': unknown split 'h100' in llm-powertrace; did you mean 'h100_sxm_80gb'? valid: cpu_proxy, h100_sxm_80gb, l40s
        """
        workloads = list(schema.WORKLOADS) if workload is None else [
            check_name(workload, schema.WORKLOADS, what="workload", field="workload")]
        src = open_source(source, streaming)
        configs: list[tuple[str, str]] = []
        valid: set[str] = set()
        for w in workloads:
            splits = src.splits(f"{w}_runs")
            valid.update(splits)
            configs.extend((f"{w}_runs", s) for s in splits if split is None or s == split)
        if split is not None:
            check_name(split, valid, what="split", field="split", where=f"in {src.name}")
        return cls(src, configs)

    def _derive(self, filters: tuple[Filter, ...]) -> Runs:
        return Runs(self._source, self._configs, filters, self._base)

    # -- the runs table -------------------------------------------------------------------------

    def to_arrow(self) -> pa.Table:
        """The selected runs as a ``pyarrow.Table`` (columns of both workloads when mixed).

        Examples:
            >>> t = Runs.load("llm-powertrace", workload="finetune").to_arrow()
            >>> t.num_rows, "energy_j" in t.column_names
            (3, True)
        """
        if self._table is None:
            if "table" not in self._base:  # read once per load(), whatever is derived from it
                # one contiguous chunk per column: an unpacked folder gives one batch per run,
                # and filters over thousands of one-row chunks (each holding its file's memory
                # map) cost more per run the more runs there are
                tables = [_runs_table(self._source.batches(cfg, split, None), arrow_schema(cfg))
                          for cfg, split in self._configs]
                self._base["table"] = (pa.concat_tables(tables, promote_options="default")
                                       if tables else pa.table({"run_id": pa.array([], pa.string())}))
            table = base = self._base["table"]
            for f in self._filters:
                if isinstance(f, _Equals):
                    f.check_present(base)
                table = table.filter(f(table))
            self._table = table.sort_by("run_id") if table.num_rows else table
        return self._table

    def to_pandas(self) -> Any:
        """The selected runs as a ``pandas.DataFrame`` (needs pandas).

        Examples:
            >>> Runs.load("llm-powertrace", workload="finetune").to_pandas()[["run_id", "method"]]
              run_id method
            0   ft-a   lora
            1   ft-b   lora
            2   ft-c   full
        """
        _need("pandas")
        return self.to_arrow().to_pandas()

    def to_polars(self) -> Any:
        """The selected runs as a ``polars.DataFrame`` (needs polars).

        Examples:
            >>> Runs.load("llm-powertrace", workload="finetune").to_polars().shape[0]  # doctest: +SKIP
            3
        """
        pl = _need("polars")
        return pl.from_arrow(self.to_arrow())

    def __len__(self) -> int:
        return self.to_arrow().num_rows

    def __iter__(self) -> Iterator[Row]:
        return (Row(r) for r in self.to_arrow().to_pylist())

    def __repr__(self) -> str:
        return f"Runs({self._source.name!r}, {len(self)} run(s))"

    def run_ids(self) -> list[str]:
        """The selected run ids, sorted.

        Examples:
            >>> Runs.load("llm-powertrace", workload="inference").run_ids()
            ['inf-a']
        """
        return [str(v) for v in self.to_arrow().column("run_id").to_pylist()]

    def columns(self) -> list[str]:
        """Column names of the runs table (axes, results, metrics)."""
        return list(self.to_arrow().column_names)

    # -- filters --------------------------------------------------------------------------------

    def where(self, predicate: Callable[[Row], Any] | None = None, /, **equals: Any) -> Runs:
        """Keep the runs that match ``column=value`` and a predicate.

        ``column=value``: a list/tuple/set means any of them; ``None`` means null. The predicate
        takes a :class:`Row`; a comparison with null is never true, as in SQL.

        Raises:
            UnknownName: a column that does not exist, or a text column (``platform``,
                ``method``...) asked for values none of which any loaded run has (checked when
                the result is read; the message lists the values present).

        Examples:
            >>> runs = Runs.load("llm-powertrace", workload="finetune")
            >>> runs.where(model_family=["llama", "qwen"], method="lora").run_ids()
            ['ft-a', 'ft-b']
            >>> runs.where(lambda r: r.batch_size >= 8).run_ids()
            ['ft-b', 'ft-c']
            >>> runs.where(batch_sise=8).run_ids()
            Traceback (most recent call last):
            ...
            llm_powertrace_ds.names.UnknownName: field 'batch_sise': unknown column 'batch_sise'; did you mean 'batch_size'? valid: ...
            >>> runs.where(method="lroa").run_ids()
            Traceback (most recent call last):
            ...
            llm_powertrace_ds.names.UnknownName: field 'method': no run has method 'lroa'; did you mean 'lora'? values present: full, lora
        """
        filters = list(self._filters)
        for col, value in equals.items():
            filters.append(_Equals(col, value))
        if predicate is not None:
            filters.append(lambda t, p=predicate: _predicate_mask(t, p))  # type: ignore[misc]
        return self._derive(tuple(filters))

    # -- groups ---------------------------------------------------------------------------------

    def group_by(self, *keys: str) -> GroupBy:
        """Group the runs by one or more columns; summarise with :meth:`GroupBy.agg`.

        Examples:
            >>> runs = Runs.load("llm-powertrace", workload="finetune")
            >>> t = runs.group_by("model_family").agg(energy_j="mean", p99_power_w="max")
            >>> t.column_names
            ['model_family', 'energy_j_mean', 'p99_power_w_max']
            >>> t.column("model_family").to_pylist()
            ['llama', 'qwen']
        """
        return GroupBy(self, keys)

    def compare(self, by: str, metric: str, match: Sequence[str], *,
                baseline: Any = None) -> Comparison:
        """Compare ``metric`` across the values of ``by``, like with like.

        Only configurations (runs agreeing on every ``match`` column) run under the baseline
        and another value are compared; per configuration c, ``ratio = m_v(c) / m_b(c)`` (means
        over repeats), summarised as counts lower/higher than the baseline and the median
        ratio (:mod:`llm_powertrace_ds.matched`). A group mean of a mixed set is not.

        Returns:
            a :class:`~llm_powertrace_ds.matched.Comparison` (print it; ``.table`` per config).

        Examples:
            >>> runs = Runs.load("llm-powertrace", workload="finetune")
            >>> c = runs.compare(by="platform", metric="energy_j", match=["model_name"])
            >>> c.summary[0]["configurations"]
            1
        """
        return compare_matched(self.to_arrow(), by, metric, match, baseline=baseline)

    # -- traces ---------------------------------------------------------------------------------

    def traces(self, *, total: bool = False, grid_ms: int | None = None,
               signals: Sequence[str] = ("power_w",)) -> Traces:
        """The selected runs' traces, read lazily, one run at a time.

        Args:
            total: yield each run's node total on the metrics' common grid (the sum of the
                devices' power interpolated onto a ``grid_ms`` grid over the span where all are
                present; NaN inside a device's gap) instead of one trace per device.
            grid_ms: the grid step for ``total`` (default: the metrics' 100 ms).
            signals: the per-tick columns to read besides ``t_ms`` (``power_w``, ``temp_c``...).

        Examples:
            >>> tr = Runs.load("llm-powertrace", workload="finetune").where(run_id="ft-a").traces()
            >>> [(run.run_id, t.gpu_index, len(t.t_ms)) for run, t in tr]
            [('ft-a', 0, 200), ('ft-a', 1, 200)]
        """
        from .metrics import GRID_MS

        for s in signals:
            check_name(s, [n for n in schema.SIGNAL_NAMES if n != "t_ms"], what="signal",
                       field="signals")
        if total and tuple(signals) != ("power_w",):
            raise InputError("a node total is formed from power_w only", field="signals")
        return Traces(self, total=total, grid_ms=grid_ms or GRID_MS, signals=tuple(signals))

    # -- plots ----------------------------------------------------------------------------------

    def plot(self, metric: str, x: str, *, color: str = "platform",
             out: str | Path = "runs.png") -> Path:
        """Plot a runs-table metric against a column, one line per ``color`` value.

        Returns:
            the written image (PNG).

        Examples:
            >>> Runs.load("llm-powertrace").plot("energy_per_token_j", x="model_params",
            ...                                  color="method", out="sweep.png").name
            'sweep.png'
        """
        from . import plots

        cols = self.columns()
        for name, what in ((metric, "metric"), (x, "axis"), (color, "column")):
            check_name(name, cols, what=what, field=what)
        return plots.plot_sweep(self, metric, x, out, group=color)


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(f"{module} is not installed: pip install 'llm-powertrace[query]'"
                           ) from None


def _is_list(typ: pa.DataType) -> bool:
    return pa.types.is_list(typ) or pa.types.is_large_list(typ)


def _typed(values: list[Any], typ: pa.DataType, col: str) -> pa.Array:
    """``values`` as an Arrow array of the column's type, or a one-line error naming both."""
    for v in values:
        if isinstance(v, bool) and not pa.types.is_boolean(typ):
            raise InputError(f"{v!r} is a bool; column {col!r} holds {typ}", field=col)
    try:
        return pa.array(values).cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError,
            OverflowError) as exc:
        shown = ", ".join(repr(v) for v in values[:3])
        raise InputError(f"{shown} cannot be compared with column {col!r}, which holds {typ} "
                         f"({type(exc).__name__})", field=col) from None


_PRESENT_SHOWN = 12
"""Values listed in the message of :meth:`_Equals.check_present` (the rest are counted)."""


def _is_text(typ: pa.DataType) -> bool:
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    return pa.types.is_string(typ) or pa.types.is_large_string(typ)


@dataclass(frozen=True)
class _Equals:
    """``col == value`` (any of them for a collection).

    For a list column (``quality_flags``): the rows whose list contains the value (any of them).
    """

    col: str
    value: Any

    def _values(self) -> tuple[bool, list[Any]]:
        many = isinstance(self.value, (list, tuple, set, frozenset))
        return many, list(self.value) if many else [self.value]

    def check_present(self, base: pa.Table) -> None:
        """Refuse text values that no run of ``base`` (the unfiltered selection) has.

        A misspelt value (``platform="h100"``) would otherwise select nothing, silently, as a
        misspelt column name used to. Only when none of the asked-for values is present: a
        list that names a value this dataset lacks besides ones it has is a valid question.

        Raises:
            UnknownName: the column is unknown, or none of the values is present in it.
        """
        col = self.col
        check_name(col, base.column_names, what="column", field=col)
        column = base.column(col)
        _, values = self._values()
        asked = [v for v in values if isinstance(v, str)]
        if not _is_text(column.type) or not asked or len(asked) != len(values):
            return
        if pc.any(pc.is_in(column, value_set=pa.array(asked))).as_py():
            return
        present = sorted(str(v) for v in pc.unique(column).drop_null().to_pylist())
        close = closest(asked[0], present)
        hint = f"; did you mean {close!r}?" if close else ""
        shown = ", ".join(present[:_PRESENT_SHOWN]) if present else "(none)"
        more = f" and {len(present) - _PRESENT_SHOWN} more" if len(present) > _PRESENT_SHOWN else ""
        wanted = " or ".join(repr(v) for v in asked)
        raise UnknownName(f"no run has {col} {wanted}{hint} values present: {shown}{more}"
                          if hint else
                          f"no run has {col} {wanted}; values present: {shown}{more}", field=col)

    def __call__(self, table: pa.Table) -> pa.Array:
        col, value = self.col, self.value
        check_name(col, table.column_names, what="column", field=col)
        column = table.column(col)
        many, values = self._values()
        if _is_list(column.type):
            if any(v is None for v in values):
                raise InputError(f"column {col!r} holds lists: ask for the values a list "
                                 "contains (None is not one)", field=col)
            wanted = _typed(values, column.type.value_type, col)
            hits = np.zeros(len(column), dtype=bool)
            for chunk_start, chunk in _chunks(column):
                flat = pc.list_flatten(chunk)
                parents = pc.list_parent_indices(chunk)
                found = pc.filter(parents, pc.fill_null(pc.is_in(flat, value_set=wanted), False))
                hits[chunk_start + np.asarray(found.to_numpy(zero_copy_only=False),
                                              dtype=np.int64)] = True
            return pa.array(hits)
        if not many and value is None:
            return pc.is_null(column)
        wanted = _typed(values, column.type, col)
        if many:
            return pc.fill_null(pc.is_in(column, value_set=wanted), False)
        return pc.fill_null(pc.equal(column, wanted[0]), False)


def _chunks(column: pa.ChunkedArray) -> list[tuple[int, pa.Array]]:
    out, start = [], 0
    for chunk in column.chunks:
        out.append((start, chunk))
        start += len(chunk)
    return out


class GroupBy:
    """Runs grouped by some columns (see :meth:`Runs.group_by`)."""

    def __init__(self, runs: Runs, keys: Sequence[str]) -> None:
        self._runs = runs
        self._keys = list(keys)

    def agg(self, **columns: str | Sequence[str]) -> pa.Table:
        """Aggregate columns per group: ``column="mean"`` or ``column=["mean", "max"]``.

        Output columns are named ``<column>_<aggregation>``; groups are sorted by their keys;
        nulls are skipped (a group whose values are all null gets null). Aggregations:
        ``AGGREGATIONS``.

        Returns:
            a ``pyarrow.Table`` (``.to_pandas()`` for a DataFrame).

        Raises:
            UnknownName: an unknown column or aggregation.

        Examples:
            >>> runs = Runs.load("llm-powertrace")
            >>> runs.group_by("workload").agg(run_id="count").to_pylist()
            [{'workload': 'finetune', 'run_id_count': 3}, {'workload': 'inference', 'run_id_count': 1}]
        """
        table = self._runs.to_arrow()
        for k in self._keys:
            check_name(k, table.column_names, what="column", field=k)
            if _is_list(table.schema.field(k).type):
                raise InputError(f"column {k!r} holds lists and cannot be a group key: group by "
                                 f"a scalar column, or select with where({k}=VALUE)", field=k)
        specs = []
        for col, hows in columns.items():
            check_name(col, table.column_names, what="column", field=col)
            if _is_list(table.schema.field(col).type) and hows not in ("count", ["count"]):
                raise InputError(f"column {col!r} holds lists; only 'count' aggregates it",
                                 field=col)
            for how in [hows] if isinstance(hows, str) else hows:
                check_name(how, AGGREGATIONS, what="aggregation", field=col)
                specs.append((col, how))
        out = table.group_by(self._keys, use_threads=False).aggregate(specs)
        order = self._keys + [f"{c}_{h}" for c, h in specs]
        return out.select(order).sort_by([(k, "ascending") for k in self._keys])


# ---------------------------------------------------------------------------------------------
# Traces
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Trace:
    """One device's trace, or a run's node total (then ``gpu_index`` is ``None``).

    Attributes:
        run_id: the run.
        node_index: the device's node (``None`` for a node total).
        gpu_index: the device (``None`` for a node total).
        t_ms: int64 ms since the run's first tick (the device's own ticks, or the grid).
        signals: name -> float array (NaN where the source reported nothing).
    """

    run_id: str
    node_index: int | None
    gpu_index: int | None
    t_ms: np.ndarray
    signals: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def power_w(self) -> np.ndarray:
        """The power signal (W)."""
        return self.signals["power_w"]


class Traces:
    """The traces of a selection of runs (see :meth:`Runs.traces`).

    Iterate for ``(run, trace)`` pairs, or convert to a table.
    """

    def __init__(self, runs: Runs, *, total: bool, grid_ms: int, signals: tuple[str, ...]) -> None:
        self._runs = runs
        self._total = total
        self._grid_ms = grid_ms
        self._signals = signals

    def _device_traces(self) -> Iterator[tuple[Row, Trace]]:
        table = self._runs.to_arrow()
        if not table.num_rows:
            return
        rows = {r["run_id"]: Row(r) for r in table.to_pylist()}
        wanted = pa.array(list(rows), pa.string())
        groups: dict[tuple[str, str], set[str]] = {}
        for r in rows.values():
            groups.setdefault((r["workload"], r["platform"]), set()).add(r["model_family"])
        columns = list(TRACE_KEYS) + ["t_ms", *self._signals]
        src = self._runs._source
        for (workload, platform), families in sorted(groups.items()):
            for batch in src.batches(workload, platform, columns, families, rows):
                ids = batch.column("run_id").to_pylist()
                if not all(i in rows for i in ids):  # a packed shard: keep the selected runs
                    batch = batch.filter(pc.is_in(batch.column("run_id"), value_set=wanted))
                    ids = batch.column("run_id").to_pylist()
                if not batch.num_rows:
                    continue
                t_flat, t_off = list_to_numpy(batch.column("t_ms"))
                flats = {s: list_to_numpy(batch.column(s)) for s in self._signals}
                nodes = batch.column("node_index").to_pylist()
                gpus = batch.column("gpu_index").to_pylist()
                for i, rid in enumerate(ids):
                    sig = {}
                    for s, (flat, off) in flats.items():
                        values = flat[off[i]:off[i + 1]]
                        sig[s] = values if values.dtype.kind == "f" else values.astype(float)
                    yield rows[rid], Trace(rid, nodes[i], gpus[i], t_flat[t_off[i]:t_off[i + 1]],
                                           sig)

    def _totals(self) -> Iterator[tuple[Row, Trace]]:
        from .metrics import node_total
        from .run import DeviceSeries, Run

        pending: dict[str, list[Trace]] = {}

        def total_of(row: Row, devs: list[Trace]) -> Trace:
            run = Run(meta={"run_id": row["run_id"], "workload": row["workload"],
                            "platform": row["platform"],
                            "sample_period_ms": row.get("sample_period_ms")},
                      devices=[DeviceSeries(d.gpu_index or 0, d.t_ms, {"power_w": d.power_w},
                                            node_index=d.node_index or 0) for d in devs],
                      events=[])
            al = node_total(run, self._grid_ms)
            if al is None:
                return Trace(row["run_id"], None, None, np.zeros(0, np.int64),
                             {"power_w": np.zeros(0)})
            return Trace(row["run_id"], None, None, al.grid_ms, {"power_w": al.total})

        rows: dict[str, Row] = {}
        for row, dev in self._device_traces():
            rows[row["run_id"]] = row
            devs = pending.setdefault(row["run_id"], [])
            devs.append(dev)
            if len(devs) >= (row.get("num_gpus") or 1):
                yield row, total_of(row, pending.pop(row["run_id"]))
        for rid, devs in pending.items():  # runs with a missing device: total of those present
            yield rows[rid], total_of(rows[rid], devs)

    def __iter__(self) -> Iterator[tuple[Row, Trace]]:
        return self._totals() if self._total else self._device_traces()

    def to_arrow(self, *, long: bool = True, run_columns: Iterable[str] = ()) -> pa.Table:
        """All the selected traces as one table (materialises what it returns).

        One row per tick per device (``long``), or one row per device with list columns.

        Args:
            long: one row per tick (``run_id``, ``node_index``, ``gpu_index``, ``t_ms``, the
                signals); else one row per device (or per run for a node total).
            run_columns: runs-table columns to repeat beside each row (``platform``...).

        Examples:
            >>> tr = Runs.load("llm-powertrace").where(run_id="inf-a").traces(total=True)
            >>> t = tr.to_arrow(run_columns=["platform"])
            >>> t.column_names, t.num_rows
            (['run_id', 'node_index', 'gpu_index', 't_ms', 'power_w', 'platform'], 199)
        """
        extra = list(run_columns)
        parts: list[pa.Table] = []
        for row, tr in self:
            n = len(tr.t_ms)
            cols: dict[str, Any] = {}
            if long:
                cols["run_id"] = pa.array([tr.run_id] * n, pa.string())
                cols["node_index"] = pa.array([tr.node_index] * n, pa.int16())
                cols["gpu_index"] = pa.array([tr.gpu_index] * n, pa.int16())
                cols["t_ms"] = pa.array(tr.t_ms, pa.int64())
                for s in self._signals:
                    cols[s] = pa.array(tr.signals[s], from_pandas=True)
                for c in extra:
                    cols[c] = pa.array([row[c]] * n)
            else:
                cols = {"run_id": [tr.run_id], "node_index": pa.array([tr.node_index], pa.int16()),
                        "gpu_index": pa.array([tr.gpu_index], pa.int16()),
                        "t_ms": pa.array([tr.t_ms], pa.list_(pa.int64()))}
                for s in self._signals:
                    cols[s] = pa.array([tr.signals[s]], pa.list_(pa.float64()), from_pandas=True)
                for c in extra:
                    cols[c] = [row[c]]
            parts.append(pa.table(cols))
        if not parts:
            raise InputError("no traces for this selection", field="traces")
        return pa.concat_tables(parts, promote_options="default")

    def to_pandas(self, *, long: bool = True, run_columns: Iterable[str] = ()) -> Any:
        """:meth:`to_arrow` as a ``pandas.DataFrame``.

        Examples:
            >>> tr = Runs.load("llm-powertrace").where(run_id="ft-a").traces()
            >>> df = tr.to_pandas(long=True)
            >>> df.groupby("gpu_index")["t_ms"].count().to_dict()
            {0: 200, 1: 200}
        """
        _need("pandas")
        return self.to_arrow(long=long, run_columns=run_columns).to_pandas()

    def to_polars(self, *, long: bool = True, run_columns: Iterable[str] = ()) -> Any:
        """:meth:`to_arrow` as a ``polars.DataFrame`` (needs polars)."""
        pl = _need("polars")
        return pl.from_arrow(self.to_arrow(long=long, run_columns=run_columns))

