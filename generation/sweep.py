"""Sweep files: parse, validate (every problem at once, with its line), expand into runs.

A sweep is a YAML mapping::

    name: demo-finetune            # required; the `sweep` column
    workload: finetune             # required; a key of generation.workloads.WORKLOAD_MODULES
    description: ...               # optional, free text
    sampler: {source: auto, period_ms: 100}   # auto | nvml | cpu_proxy (+ idle_w, max_w)
    idle_before_s: 1.5             # sampled idle padding with idle_begin/idle_end events
    idle_after_s: 1.5
    repeats: 1                     # each configuration runs this many times (repeat 0..n-1)
    launcher: auto                 # auto | inline | torchrun (process isolation per run)
    grid_region: null              # optional electricity-grid zone written to every row
    checkpoint_dir: null           # where checkpoints go (default: the run's staging folder)
    base: {model: llama-tiny, ...} # settings shared by every run
    grid: {batch_size: [2, 4]}     # cartesian product, in the order written (last fastest);
                                   # a list of such mappings is the union of their products
                                   # (one-factor-at-a-time studies); equal runs are kept once
    zip: [{method: [lora, full], lora_rank: [8, null]}]   # lists advanced together
    include: [{parallelism: ddp, dp_size: 2}]  # extra single runs (over base, not the grid)
    exclude: [{method: full, model: Qwen2.5-7B}]  # grid points matching all keys are dropped

Expansion is deterministic: for each repeat, every grid point crossed with every zip row (in
file order), then every ``include`` entry; a run equal to an earlier one is kept once. Each run's settings are resolved by its workload
(defaults, derived columns) and checked against the machine; every problem of the file —
unknown keys, wrong types, impossible combinations — is collected and raised together as one
:class:`SweepError` whose lines name the YAML line of the offending value, before any run starts.

``run_id`` = readable slug + ``-`` + the first 10 hex digits of the SHA-256 of the canonical
JSON of the fully resolved settings (workload, model, every axis, repeat, sampler source and
period, platform, idle padding). Settings whose name starts with ``_`` (local paths) are not
hashed, so the same sweep on another machine gives the same ids.

Example:
    >>> sweep = load_sweep("generation/sweeps/demo-finetune.yaml")   # doctest: +SKIP
    >>> runs = plan(sweep, detect_machine(sweep.sampler))              # doctest: +SKIP
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from llm_powertrace_ds import bounded
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.privacy import text_problem

from .workloads import MachineInfo, WorkloadSpec, get_workload

if TYPE_CHECKING:
    from .sampler import SamplerConfig

TOP_KEYS = ("name", "workload", "description", "sampler", "idle_before_s", "idle_after_s",
            "repeats", "launcher", "grid_region", "checkpoint_dir", "base", "grid", "zip",
            "include", "exclude")
SAMPLER_KEYS = ("source", "period_ms", "idle_w", "max_w")
SAMPLER_SOURCES = ("auto", "nvml", "cpu_proxy")
LAUNCHERS = ("auto", "inline", "torchrun")
PATH_SETTINGS = frozenset({"dataset_name", "replay_file", "checkpoint"})
"""Settings whose non-keyword values are paths, resolved against the sweep file's folder.
``dataset_name`` and ``checkpoint`` may also be Hub ids (``org/name``): a relative value is a
path when it starts with ``.`` or exists next to the sweep file, else it is kept as given."""
HUB_ID_SETTINGS = frozenset({"dataset_name", "checkpoint"})
URL_SETTINGS = frozenset({"endpoint"})
"""Settings whose values are URLs of a server: never published (not columns), so the text gate
that keeps URLs out of published text does not apply; the workload checks their form."""
LOCAL_SETTINGS = frozenset({"engine_python"})
"""Settings naming a program of this machine: never published (not columns), so the text gate
does not apply."""
HASH_LEN = 10
MAX_SWEEP_BYTES = 1 << 20
"""Largest sweep file read (1 MiB)."""
MAX_YAML_NODES = 100_000
"""Most YAML values a sweep may expand to (aliases included): an alias bomb stops here."""
MAX_RUNS = 10_000
"""Most runs one sweep may plan (grid points x zips x repeats), checked before expanding."""
MAX_REPEATS = 1_000
MAX_IDLE_S = 3_600.0
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# bf16-less GPU families, for detect_machine where NVML reports no compute capability.
_NO_BF16_RE = re.compile(r"\b(V100|T4|P100|P40|P4|K80|M60|GTX|RTX\s?20\d\d|Quadro RTX)\b", re.I)


@dataclass(frozen=True)
class Problem:
    """One problem of a sweep file.

    Attributes:
        line: 1-based line of the offending value (``None`` when the file has no such line).
        field: the key.
        message: what is wrong, with the value.
    """

    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "(no line)"
        return f"{where}, field '{self.field}': {self.message}"


class SweepError(InputError):
    """A sweep file with problems; ``problems`` lists every one (sorted by line)."""

    def __init__(self, file: str | Path, problems: list[Problem]) -> None:
        self.problems = sorted(set(problems), key=lambda p: (p.line or 0, p.field, p.message))
        n = len(self.problems)
        body = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{n} problem{'s' if n != 1 else ''}; nothing was run:\n{body}",
                         file=file)


@dataclass
class Sweep:
    """A parsed sweep file (types checked, not yet expanded).

    Attributes:
        path: the file.
        name: the sweep name (``sweep`` column).
        workload: the workload name.
        spec: the workload's ``WorkloadSpec``.
        sampler: ``source``, ``period_ms`` and the optional ``cpu_proxy`` model constants.
        idle_before_s: idle padding before the workload, s.
        idle_after_s: idle padding after, s.
        repeats: repeats of each configuration.
        launcher: ``auto``, ``inline`` or ``torchrun``.
        grid_region: optional grid zone column.
        checkpoint_dir: where checkpoints go (``None`` = the staging folder).
        base, grids, zips, include, exclude: the settings blocks (type-checked values);
            ``grids`` is a list of grids (one for a plain ``grid`` mapping).
        lines: the YAML line of each value, keyed by its path (``("grid", "batch_size", 1)``).
        problems: what ``load_sweep(strict=False)`` left out (``plan`` reports them).
    """

    path: Path
    name: str
    workload: str
    spec: WorkloadSpec
    sampler: dict[str, Any]
    idle_before_s: float = 0.0
    idle_after_s: float = 0.0
    repeats: int = 1
    launcher: str = "auto"
    grid_region: str | None = None
    checkpoint_dir: str | None = None
    description: str | None = None
    base: dict[str, Any] = field(default_factory=dict)
    grids: list[dict[str, list[Any]]] = field(default_factory=list)
    zips: list[dict[str, list[Any]]] = field(default_factory=list)
    include: list[dict[str, Any]] = field(default_factory=list)
    exclude: list[dict[str, Any]] = field(default_factory=list)
    lines: dict[tuple, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


@dataclass(frozen=True)
class PlannedRun:
    """One expanded, resolved and checked run.

    Attributes:
        index: position in the sweep's expansion (0-based; what task splitting uses).
        run_id: slug + hash.
        repeat: repeat index.
        settings: the resolved settings (``_``-prefixed ones are local, not hashed).
        columns: run metadata known before running (identity, model, axes).
        lines: setting -> YAML line it came from.
    """

    index: int
    run_id: str
    repeat: int
    settings: dict[str, Any]
    columns: dict[str, Any]
    lines: dict[str, int | None]

    @property
    def num_processes(self) -> int:
        return int(self.settings.get("_num_processes", 1))


# ---------------------------------------------------------------------------------------------
# YAML with lines
# ---------------------------------------------------------------------------------------------

def _to_python(node: yaml.Node, path: tuple, lines: dict[tuple, int], loader: yaml.SafeLoader,
               problems: list[Problem]) -> Any:
    """Convert a composed node to Python values, recording each value's line by path."""
    lines[path] = node.start_mark.line + 1
    if len(lines) > MAX_YAML_NODES:
        raise _TooBig(node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                problems.append(Problem(key_node.start_mark.line + 1, str(key),
                                        "keys must be strings"))
                continue
            if key in out:
                problems.append(Problem(key_node.start_mark.line + 1, ".".join(map(str, path + (key,))),
                                        "duplicate key"))
            lines[path + (key, "<key>")] = key_node.start_mark.line + 1
            out[key] = _to_python(value_node, path + (key,), lines, loader, problems)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(v, path + (i,), lines, loader, problems) for i, v in enumerate(node.value)]
    return loader.construct_object(node)


class _TooBig(Exception):
    def __init__(self, line: int) -> None:
        self.line = line


def load_yaml_with_lines(text: str, file: str | Path) -> tuple[Any, dict[tuple, int]]:
    """Parse YAML text and return ``(data, lines)``; ``lines`` maps value paths to 1-based lines.

    Raises:
        SweepError: the text is not YAML (with the parser's line), or has duplicate keys.
    """
    loader = yaml.SafeLoader("")
    try:
        bounded.check_yaml_depth(text, file=file)  # flow and block style, without recursion
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except InputError as exc:
        raise SweepError(file, [Problem(exc.line or 1, "<yaml>", exc.reason)]) from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise SweepError(file, [Problem(line, "<yaml>", f"not valid YAML: {exc.problem}")]) from None
    except yaml.reader.ReaderError as exc:  # a NUL or another unprintable character
        line = text.count("\n", 0, exc.position) + 1
        raise SweepError(file, [Problem(line, "<yaml>", "not valid YAML: unprintable character "
                                        f"#x{exc.character:04x}")]) from None
    if node is None:
        raise SweepError(file, [Problem(1, "<file>", "the sweep file is empty")])
    lines: dict[tuple, int] = {}
    problems: list[Problem] = []
    try:
        data = _to_python(node, (), lines, loader, problems)
    except _TooBig as exc:
        raise SweepError(file, [Problem(exc.line, "<yaml>", f"the file expands to more than "
                                        f"{MAX_YAML_NODES} values (YAML aliases?); refused")]
                         ) from None
    if problems:
        raise SweepError(file, problems)
    return data, lines


# ---------------------------------------------------------------------------------------------
# Loading (types and keys)
# ---------------------------------------------------------------------------------------------

def _did_you_mean(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _checkpoint_folder(base: Path, value: str) -> str | None:
    """The absolute path of the local checkpoint folder ``value`` names.

    A folder with a ``config.json``, relative to the sweep file's folder; ``None`` when
    ``value`` names none (a name or a Hub id).
    """
    if not (value.startswith(("/", ".", "~")) or os.sep in value.rstrip(os.sep)):
        return None
    p = Path(value).expanduser()
    p = p if p.is_absolute() else base / p
    return str(p.resolve()) if (p / "config.json").is_file() else None


def _coerce_float_text(value: Any) -> Any:
    """YAML 1.1 reads ``1e-4`` as a string; accept such numeric strings for number settings."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


INVALID: Any = object()
"""A value that failed its check (reported; left out so the rest of the file is still planned)."""


class _Loader:
    """Collects problems while checking one sweep file."""

    def __init__(self, path: Path, lines: dict[tuple, int]) -> None:
        self.path = path
        self.lines = lines
        self.problems: list[Problem] = []

    def line(self, path: tuple, key: bool = False) -> int | None:
        if key and path + ("<key>",) in self.lines:
            return self.lines[path + ("<key>",)]
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

    def add(self, path: tuple, field_name: str, message: str, key: bool = False) -> None:
        self.problems.append(Problem(self.line(path, key), field_name, message))

    def number(self, data: dict, key: str, *, default: float, minimum: float = 0.0,
               integer: bool = False, maximum: float = float("inf")) -> Any:
        value = data.get(key, default)
        if value is None:
            return default
        value = _coerce_float_text(value)
        ok = not isinstance(value, bool) and isinstance(value, (int, float))
        if ok and integer and not float(value).is_integer():
            ok = False
        if not ok:
            kind = "an integer" if integer else "a number"
            self.add((key,), key, f"{value!r} is not {kind}")
            return default
        if value != value or value in (float("inf"), float("-inf")):
            self.add((key,), key, f"{value!r} is not a finite number")
            return default
        if value < minimum:
            self.add((key,), key, f"{value!r} must be >= {minimum:g}")
            return default
        if value > maximum:
            self.add((key,), key, f"{value!r} must be <= {maximum:g}")
            return default
        return int(value) if integer else float(value)

    def setting(self, spec: WorkloadSpec, path: tuple, key: str, value: Any) -> Any:
        """Type-check one setting value at ``path``; return the coerced value."""
        setting = spec.settings.get(key)
        if setting is None:
            self.add(path[:-1] + (key,), key, f"unknown setting '{key}' for workload "
                     f"{spec.name}{_did_you_mean(key, list(spec.settings))}", key=True)
            return INVALID
        if setting.dtype.startswith("float"):
            value = _coerce_float_text(value)
        coerced, message = setting.check(value)
        if message:
            self.add(path, key, message)
            return INVALID
        if isinstance(coerced, float) and coerced != coerced:
            self.add(path, key, "nan is not a number")
            return INVALID
        if key == "model" and isinstance(coerced, str):
            folder = _checkpoint_folder(self.path.parent, coerced)
            if folder is not None:  # served by path, published by name (the workload's)
                return folder
        if isinstance(coerced, str) and key not in PATH_SETTINGS | URL_SETTINGS | LOCAL_SETTINGS:
            problem = text_problem(key, coerced)
            if problem:
                self.add(path, key, f"{coerced[:60]!r} {problem}")
                return INVALID
        if key in PATH_SETTINGS and isinstance(coerced, str) and coerced != setting.default:
            p = Path(coerced)
            hub_id = (key in HUB_ID_SETTINGS and not p.is_absolute()
                      and not coerced.startswith(".") and not (self.path.parent / p).exists())
            if not hub_id:
                coerced = str(p if p.is_absolute() else (self.path.parent / p).resolve())
        return coerced

    def block(self, spec: WorkloadSpec, data: Any, path: tuple) -> dict[str, Any]:
        if data is None:
            return {}
        if not isinstance(data, dict):
            self.add(path, path[-1] if isinstance(path[-1], str) else str(path),
                     f"must be a mapping of settings, not {type(data).__name__}")
            return {}
        out = {k: self.setting(spec, path + (k,), k, v) for k, v in data.items()}
        return {k: v for k, v in out.items() if v is not INVALID}

    def lists(self, spec: WorkloadSpec, data: Any, path: tuple) -> dict[str, list[Any]]:
        name = ".".join(map(str, path))
        if data is None:
            return {}
        if not isinstance(data, dict):
            self.add(path, name, "must be a mapping of setting -> list of values")
            return {}
        out = {}
        for k, values in data.items():
            if not isinstance(values, list) or not values:
                self.add(path + (k,), k, f"{name}.{k} must be a non-empty list of values, not "
                         f"{values!r}")
                if k not in spec.settings:
                    self.setting(spec, path + (k,), k, None)
                continue
            checked = [self.setting(spec, path + (k, i), k, v) for i, v in enumerate(values)]
            kept = [v for v in checked if v is not INVALID]
            if kept:
                out[k] = kept  # bad values are reported and left out, so planning goes on
        return out


def read_sweep_text(path: Path) -> str:
    """A sweep or campaign file's text, read by the bounded reader.

    A regular file of at most ``MAX_SWEEP_BYTES`` (a FIFO or ``/dev/zero`` is refused before a
    byte is read), UTF-8 with an optional BOM.

    Raises:
        SweepError: any of these bounds broken (one problem, naming the file).
    """
    try:
        raw = bounded.read_bytes(path, max_bytes=MAX_SWEEP_BYTES)
    except InputError as exc:  # no such file, not a regular file, too big
        raise SweepError(path, [Problem(exc.line or 1, "<file>", exc.reason)]) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SweepError(path, [Problem(line, "<file>", f"not UTF-8 text (byte "
                                        f"0x{raw[exc.start]:02x} at offset {exc.start})")]
                         ) from None


def _sampler_block(block: Any, ld: _Loader) -> dict[str, Any]:
    """The checked ``sampler`` block (bad values reported and left out)."""
    sampler = block or {}
    if not isinstance(sampler, dict):
        ld.add(("sampler",), "sampler", "sampler must be a mapping {source, period_ms}")
        sampler = {}
    for key in sampler:
        if key not in SAMPLER_KEYS:
            ld.add(("sampler", key), f"sampler.{key}", f"unknown sampler setting '{key}'"
                   f"{_did_you_mean(key, list(SAMPLER_KEYS))}; known: {', '.join(SAMPLER_KEYS)}",
                   key=True)
    source = sampler.get("source", "auto")
    if source not in SAMPLER_SOURCES:
        ld.add(("sampler", "source"), "sampler.source",
               f"{source!r} is not one of {', '.join(SAMPLER_SOURCES)}")
        source = "auto"
    resolved_sampler: dict[str, Any] = {"source": source}
    for key, default in (("period_ms", 100.0), ("idle_w", None), ("max_w", None)):
        value = _coerce_float_text(sampler.get(key, default))
        if value is None:
            continue
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or value != value
                or not 0 < value < float("inf")):
            ld.add(("sampler", key), f"sampler.{key}", f"{value!r} must be a finite number > 0")
            value = default
        if value is not None:
            resolved_sampler[key] = float(value)
    if resolved_sampler.get("idle_w", 0.0) >= resolved_sampler.get("max_w", float("inf")):
        ld.add(("sampler", "idle_w"), "sampler.idle_w",
               f"idle_w {resolved_sampler['idle_w']:g} must be below max_w "
               f"{resolved_sampler['max_w']:g}")
        del resolved_sampler["idle_w"], resolved_sampler["max_w"]  # bad values are left out
    return resolved_sampler


def _axis_blocks(sweep: Sweep, spec: WorkloadSpec, data: dict[str, Any], ld: _Loader) -> None:
    """Read ``base``, ``grid``, ``zip``, ``include`` and ``exclude`` into ``sweep``."""
    sweep.base = ld.block(spec, data.get("base"), ("base",))
    grid = data.get("grid")
    if isinstance(grid, list):
        sweep.grids = [ld.lists(spec, g, ("grid", i)) for i, g in enumerate(grid)]
    elif grid is not None:
        sweep.grids = [ld.lists(spec, grid, ("grid",))]
    zips = data.get("zip") or []
    if not isinstance(zips, list):
        ld.add(("zip",), "zip", "zip must be a list of mappings of equal-length lists")
        zips = []
    for i, group in enumerate(zips):
        lists = ld.lists(spec, group, ("zip", i))
        lengths = {len(v) for v in lists.values()}
        if len(lengths) > 1:
            ld.add(("zip", i), "zip", "the lists of one zip group must have equal lengths "
                   f"(got {', '.join(f'{k}: {len(v)}' for k, v in lists.items())})")
        elif lists:
            sweep.zips.append(lists)
    seen: dict[str, str] = {k: "grid" for g in sweep.grids for k in g}
    for i, group in enumerate(sweep.zips):
        for k in group:
            if k in seen:
                ld.add(("zip", i, k), k, f"'{k}' is both in {seen[k]} and zip {i}", key=True)
            seen[k] = f"zip {i}"
    for block in ("include", "exclude"):
        entries = data.get(block) or []
        if not isinstance(entries, list):
            ld.add((block,), block, f"{block} must be a list of mappings")
            continue
        target = sweep.include if block == "include" else sweep.exclude
        for i, entry in enumerate(entries):
            target.append(ld.block(spec, entry, (block, i)))


def load_sweep(path: str | Path, *, strict: bool = True) -> Sweep:
    """Read and type-check a sweep file (keys, types, choices); no expansion yet.

    Args:
        path: the YAML file.
        strict: raise on any problem. With ``strict=False`` bad keys and values are left out
            and kept in ``Sweep.problems``, so that :func:`plan` reports them together with the
            combination problems it finds (every problem of the file in one error).

    Raises:
        SweepError: every problem found, each with its line (always when the file cannot be
            planned at all: no such file, not a regular file, not YAML, nested too deeply,
            not a mapping, no known workload).
    """
    path = Path(path)
    data, lines = load_yaml_with_lines(read_sweep_text(path), path)
    ld = _Loader(path, lines)
    if not isinstance(data, dict):
        raise SweepError(path, [Problem(1, "<file>", "a sweep file is a YAML mapping")])
    for key in data:
        if key not in TOP_KEYS:
            ld.add((key,), key, f"unknown key '{key}'{_did_you_mean(key, list(TOP_KEYS))}; "
                   f"known: {', '.join(TOP_KEYS)}", key=True)
    name = data.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        ld.add(("name",), "name", "name is required: letters, digits, '_', '.', '-' "
               f"(got {name!r})")
        name = path.stem
    workload = data.get("workload")
    spec: WorkloadSpec | None = None
    try:
        spec = get_workload(str(workload)) if workload is not None else None
        if spec is None:
            ld.add(("workload",), "workload", "workload is required (finetune or inference)")
    except InputError as exc:
        ld.add(("workload",), "workload", exc.reason)
    resolved_sampler = _sampler_block(data.get("sampler"), ld)
    launcher = data.get("launcher", "auto")
    if launcher not in LAUNCHERS:
        ld.add(("launcher",), "launcher", f"{launcher!r} is not one of {', '.join(LAUNCHERS)}")
        launcher = "auto"
    for key in ("grid_region", "checkpoint_dir", "description"):
        if data.get(key) is not None and not isinstance(data.get(key), str):
            ld.add((key,), key, f"{str(data[key])[:60]!r} is not a string")
        elif key != "checkpoint_dir" and data.get(key) is not None:
            problem = text_problem(key, data[key])
            if problem:
                ld.add((key,), key, f"{data[key][:60]!r} {problem}")
    sweep = Sweep(
        path=path, name=name, workload=str(workload), spec=spec or WorkloadSpec(),
        sampler=resolved_sampler,
        idle_before_s=ld.number(data, "idle_before_s", default=0.0, maximum=MAX_IDLE_S),
        idle_after_s=ld.number(data, "idle_after_s", default=0.0, maximum=MAX_IDLE_S),
        repeats=ld.number(data, "repeats", default=1, minimum=1, integer=True,
                          maximum=MAX_REPEATS),
        launcher=launcher, grid_region=data.get("grid_region"),
        checkpoint_dir=data.get("checkpoint_dir"), description=data.get("description"),
        lines=lines,
    )
    if spec is not None:
        _axis_blocks(sweep, spec, data, ld)
        _check_size(sweep, ld)
    if ld.problems and (strict or spec is None):
        raise SweepError(path, ld.problems)
    sweep.problems = list(ld.problems)
    return sweep


def planned_size(sweep: Sweep) -> int:
    """Runs the sweep would expand to (before exclusions and duplicates), without expanding it.

    ``(sum over grids of the product of their list lengths) x (product of zip lengths) +
    includes``, times ``repeats``.
    """
    points = 0
    for grid in sweep.grids or [{}]:
        size = 1
        for values in grid.values():
            size *= len(values)
        points += size
    for group in sweep.zips:
        points *= len(next(iter(group.values())))
    return (points + len(sweep.include)) * max(1, sweep.repeats)


def _check_size(sweep: Sweep, ld: _Loader) -> None:
    size = planned_size(sweep)
    if size > MAX_RUNS:
        ld.add(("grid",), "grid", f"the sweep expands to {size} runs (grid x zip x repeats); "
               f"at most {MAX_RUNS} per sweep file: split it")


# ---------------------------------------------------------------------------------------------
# Machine and expansion
# ---------------------------------------------------------------------------------------------

def sampler_config(sampler: dict[str, Any], **overrides: Any) -> SamplerConfig:
    """The one parse of a sweep's (already checked) ``sampler`` block into a ``SamplerConfig``.

    Args:
        sampler: ``Sweep.sampler`` (``source``, ``period_ms``, ``idle_w``, ``max_w``).
        overrides: fields the caller resolves (e.g. ``source`` and ``gpu_indices`` of a run).

    Raises:
        SamplerConfigError: an invalid combination (the sweep loader reports these first).
    """
    from .sampler import SamplerConfig

    fields: dict[str, Any] = {"source": sampler.get("source", "auto"),
                              "period_ms": float(sampler.get("period_ms", 100.0))}
    for key in ("idle_w", "max_w"):
        if sampler.get(key) is not None:
            fields[key] = sampler[key]
    return SamplerConfig(**{**fields, **overrides})


def detect_machine(sampler: dict[str, Any]) -> MachineInfo:
    """What the runs will use: the resolved sampler source, platform and device capabilities.

    Imports no torch: NVML (``generation.sampler.probe_gpus``) names the GPUs and reports their
    compute capability; CUDA is assumed usable where NVML sees a GPU; bf16 support is compute
    capability >= 8.0 (judged from the GPU name only where NVML cannot report it); power caps
    are allowed where every probed GPU may have its power limit set (root, not a machine with
    ``$LLM_POWERTRACE_NO_DEVICE_SETTINGS`` set).

    Raises:
        SweepError: the sampler source cannot be used here (e.g. ``nvml`` without a GPU).
    """
    from .sampler import SamplerError, resolve_source

    try:
        cfg = sampler_config(sampler)
        source = resolve_source(cfg)
    except SamplerError as exc:
        raise InputError(str(exc), field="sampler") from None
    bnb = importlib.util.find_spec("bitsandbytes") is not None
    if source == "cpu_proxy":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        return MachineInfo(source="cpu_proxy", platform="cpu_proxy", num_devices=int(cores or 1),
                           cuda=False, bf16=True, bitsandbytes=False)
    from llm_powertrace_ds.schema import platform_from_name

    from .sampler import probe_gpus

    gpus = probe_gpus(cfg.gpu_indices, allow_mig=cfg.allow_mig)
    from .workloads.quant import bitsandbytes_problem

    bnb_problem = bitsandbytes_problem() if bnb else None  # installed: does it have CUDA?
    bnb = bnb and bnb_problem is None
    names = [g.name for g in gpus]
    platform = platform_from_name(names[0] if names else None).slug
    bf16 = all(g.bf16 if g.bf16 is not None else not _NO_BF16_RE.search(g.name) for g in gpus)
    return MachineInfo(source="nvml", platform=platform, num_devices=len(gpus), cuda=True,
                       bf16=bf16, bitsandbytes=bnb,
                       can_set_power_limit=bool(gpus) and all(g.can_set_power_limit for g in gpus),
                       extra={"gpu_names": names, "bitsandbytes_problem": bnb_problem,
                              # transformers' paged continuous-batching kernels
                              "flash_attn": importlib.util.find_spec("flash_attn") is not None,
                              "flash_attn_3": importlib.util.find_spec(
                                  "flash_attn_interface") is not None})


def canonical_hash(payload: dict[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of ``payload`` (sorted keys, no spaces)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_run_id(slug: str, payload: dict[str, Any]) -> str:
    """``<slug>-<first 10 hex of the settings hash>`` (slug lower-cased, file-name safe)."""
    clean = re.sub(r"[^a-z0-9.]+", "-", slug.lower()).strip("-")
    return f"{clean}-{canonical_hash(payload)[:HASH_LEN]}"


def _grid_points(sweep: Sweep) -> list[tuple[dict[str, Any], dict[str, tuple]]]:
    """Grid x zip combinations as ``(values, paths)`` in deterministic order."""
    points: list[tuple[dict[str, Any], dict[str, tuple]]] = []
    grids = sweep.grids or [{}]
    for g, grid in enumerate(grids):
        prefix: tuple = ("grid", g) if _grid_is_list(sweep) else ("grid",)
        points.extend(_one_grid(sweep, grid, prefix))
    return points


def _grid_is_list(sweep: Sweep) -> bool:
    return ("grid", 0) in sweep.lines


def _one_grid(sweep: Sweep, grid: dict[str, list[Any]], prefix: tuple
              ) -> list[tuple[dict[str, Any], dict[str, tuple]]]:
    names = list(grid)
    combos = itertools.product(*[range(len(grid[k])) for k in names]) if names else [()]
    points = []
    for combo in combos:
        values = {k: grid[k][i] for k, i in zip(names, combo, strict=True)}
        paths = {k: prefix + (k, i) for k, i in zip(names, combo, strict=True)}
        rows: list[tuple[dict, dict]] = [({}, {})]
        for z, group in enumerate(sweep.zips):
            n = len(next(iter(group.values())))
            rows = [({**rv, **{k: v[i] for k, v in group.items()}},
                     {**rp, **{k: ("zip", z, k, i) for k in group}})
                    for rv, rp in rows for i in range(n)]
        for rv, rp in rows:
            points.append(({**values, **rv}, {**paths, **rp}))
    return points


def _excluded(values: dict[str, Any], exclude: list[dict[str, Any]]) -> bool:
    return any(all(values.get(k) == v for k, v in entry.items()) for entry in exclude)


def plan(sweep: Sweep, machine: MachineInfo) -> list[PlannedRun]:
    """Expand, resolve and check every run of a sweep on ``machine``.

    Returns:
        The runs in expansion order (``index`` 0..n-1).

    Raises:
        SweepError: every impossible combination, each at the line of the value that made it
            (deduplicated across runs).
    """
    spec = sweep.spec
    if planned_size(sweep) > MAX_RUNS:  # never expand an unbounded grid, even to report it
        ld0 = _Loader(sweep.path, sweep.lines)
        ld0.problems.extend(sweep.problems)
        _check_size(sweep, ld0)
        raise SweepError(sweep.path, ld0.problems)
    configs: list[tuple[dict[str, Any], dict[str, tuple]]] = []
    for values, paths in _grid_points(sweep):
        merged = {**sweep.base, **values}
        if sweep.exclude and _excluded(merged, sweep.exclude):
            continue
        configs.append((merged, {**{k: ("base", k) for k in sweep.base}, **paths}))
    if not sweep.grids and not sweep.zips and sweep.include:
        configs = []  # only the explicit runs
    for i, entry in enumerate(sweep.include):
        configs.append(({**sweep.base, **entry},
                        {**{k: ("base", k) for k in sweep.base},
                         **{k: ("include", i, k) for k in entry}}))
    ld = _Loader(sweep.path, sweep.lines)
    ld.problems.extend(sweep.problems)
    runs: list[PlannedRun] = []
    seen: dict[str, int] = {}
    sampler_key = {"source": machine.source, "period_ms": sweep.sampler.get("period_ms", 100.0)}
    for repeat in range(sweep.repeats):
        for values, paths in configs:
            resolved = spec.resolve(values, machine)
            for key, message in spec.check(resolved, machine):
                path = paths.get(key)
                if path is None:
                    # a default: point at the block that made the combination
                    path = next((p for p in paths.values()), ("base",))
                    message = f"{message} (default {key}={resolved.get(key)!r})"
                ld.add(path, key, message)
            hashed = {k: v for k, v in resolved.items() if not k.startswith("_")}
            payload = {"workload": sweep.workload, "settings": hashed, "repeat": repeat,
                       "sampler": sampler_key, "platform": machine.platform,
                       "idle_before_s": sweep.idle_before_s, "idle_after_s": sweep.idle_after_s}
            run_id = make_run_id(f"{spec.slug(resolved)}-rep{repeat}", payload)
            if run_id in seen:
                continue  # the same run from two grids (or include): measured once
            seen[run_id] = len(runs)
            resolved["_num_processes"] = spec.num_processes(resolved)
            columns = {**spec.columns(resolved), "run_id": run_id, "sweep": sweep.name,
                       "repeat": repeat, "workload": sweep.workload,
                       "platform": machine.platform, "grid_region": sweep.grid_region}
            lines = {k: ld.line(p) for k, p in paths.items()}
            runs.append(PlannedRun(len(runs), run_id, repeat, resolved, columns, lines))
    if not runs and not ld.problems:
        ld.add(("grid",), "grid", "the sweep expands to no runs")
    if ld.problems:
        raise SweepError(sweep.path, ld.problems)
    return runs


def task_subset(runs: list[PlannedRun], task_index: int, num_tasks: int) -> list[PlannedRun]:
    """The runs of task ``task_index`` of ``num_tasks``: every ``num_tasks``-th, from ``task_index``.

    Deterministic and disjoint; the union over all tasks is the whole sweep.

    Raises:
        ValueError: ``num_tasks < 1`` or ``task_index`` outside ``[0, num_tasks)``.
    """
    if num_tasks < 1:
        raise ValueError(f"--num-tasks {num_tasks} must be >= 1")
    if not 0 <= task_index < num_tasks:
        raise ValueError(f"--task-index {task_index} must be in [0, {num_tasks})")
    return [r for r in runs if r.index % num_tasks == task_index]
