"""Folder-level checks of a dataset folder: what ``validate``, ``pack`` and ``upload.py`` trust.

Per-run quality lives in ``validate.py``; this module checks the folder as a whole:

* **Files** (:func:`tree_problems`): every entry under ``data/`` is a regular file or folder
  (never a symlink, a device, a FIFO) at the place the layout expects —
  ``data/<finetune|inference>/<split>/<family>/<name>.arrow`` or
  ``data/<config>_runs|inference_requests/<split>/<name>.arrow``, ``<name>`` a run id or a
  packed shard name. A symlink anywhere in the folder (outside ``.staging/``) is refused too:
  following one would publish a file from outside the folder.
* **Pairs** (:func:`audit_folder`): every trace file's run has a runs row and every runs row has
  a trace; a run missing either, or with two runs rows (a runs-table segment and a one-run
  file left by an interrupted merge), is reported by run id.
* **Proxy** data read from the trace files themselves (``sampler``, ``power_field``,
  ``platform``, ``quality_flags``), not from the runs rows, so a cpu_proxy trace copied into a
  GPU folder without its runs row is still seen.
* **Leftovers**: hidden temporary files (``.<name>.<pid>.tmp``) of a writer that died.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from . import layout, schema
from .errors import ShardError
from .procs import pid_alive as _pid_alive

_RUN_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]{0,199}$")
_SEGMENT_RE = re.compile(rf"^{layout.SEGMENT_PREFIX}[0-9a-f]{{16}}\.(arrow|parquet)$")
_TMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$")
PROXY_COLUMNS = ("run_id", "sampler", "power_field", "platform", "quality_flags")


@dataclass
class FolderAudit:
    """What :func:`audit_folder` found.

    Attributes:
        bad_files: ``'<path>': <reason>`` for each entry that is not where/what it should be.
        orphan_traces: run ids with a trace file but no runs row.
        orphan_rows: run ids with a runs row but no trace file.
        proxy_runs: run ids whose trace rows say ``cpu_proxy``.
        leftovers: hidden temporary files of a writer that is no longer running.
        duplicate_rows: run ids with more than one runs row (a merge into a runs-table segment
            or a republish stopped before its removals; ``validate --repair`` keeps one).
        packed_runs: run ids with a row in a packed shard (``pack``'s output is never rewritten
            in place: its problems are repaired in the folder it was packed from).
    """

    bad_files: list[str] = field(default_factory=list)
    orphan_traces: list[str] = field(default_factory=list)
    orphan_rows: list[str] = field(default_factory=list)
    proxy_runs: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    duplicate_rows: list[str] = field(default_factory=list)
    packed_runs: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not (self.bad_files or self.orphan_traces or self.orphan_rows
                    or self.duplicate_rows)

    def messages(self) -> list[str]:
        """One line per problem, each saying what repairs it."""
        out = list(self.bad_files)
        out += [f"run {r}: trace file without a runs row"
                f"{self._fix(r, ' (run `validate --repair`: the row is rebuilt from it)')}"
                for r in self.orphan_traces]
        out += [f"run {r}: runs row without a trace file"
                f"{self._fix(r, ' (run `validate --repair`)')}" for r in self.orphan_rows]
        out += [f"run {r}: more than one runs row{self._fix(r, ' (run `validate --repair`)')}"
                for r in self.duplicate_rows]
        return out

    def _fix(self, run_id: str, loose: str) -> str:
        if run_id in self.packed_runs:
            return (" in a packed folder, which is never rewritten in place: run `llm-powertrace "
                    "validate --repair` on the folder it was packed from, then pack it again")
        return loose


def _expected(rel: tuple[str, ...]) -> str | None:
    """Why a path (parts relative to the root, ``data`` first) is not where files belong."""
    if len(rel) <= 2:
        return ("only folders belong directly in data/: a shard goes to "
                "data/<config>/<split>[/<family>]/<run_id>.arrow")
    config = rel[1]
    if config not in schema.ALL_CONFIGS:
        return (f"'{config}' is not a config folder; data/ holds only "
                f"{', '.join(schema.ALL_CONFIGS)}")
    depth = 5 if config in schema.TRACE_CONFIGS else 4
    where = ("data/<config>/<split>/<family>/<run_id>.arrow" if depth == 5
             else "data/<config>/<split>/<run_id>.arrow")
    if len(rel) != depth:
        return f"files of {config} belong at {where}"
    if not schema.SPLIT_NAME_RE.match(rel[2]):
        return f"'{rel[2]}' is not a split name"
    if depth == 5 and rel[3] not in schema.MODEL_FAMILIES:
        return f"'{rel[3]}' is not a model family ({', '.join(schema.MODEL_FAMILIES)})"
    name = rel[-1]
    if not name.endswith(layout.READ_SUFFIXES):
        return f"not a shard: files here end in {' or '.join(layout.READ_SUFFIXES)} ({where})"
    if depth == 4 and config in schema.RUNS_CONFIGS and _SEGMENT_RE.match(name):
        return None  # a runs-table segment (layout.is_segment)
    if not _RUN_FILE_RE.match(name):
        return f"not a shard name ({where})"
    return None




def tree_problems(root: str | Path) -> tuple[list[str], list[Path]]:
    """Entries of the folder that must not be read or published, and dead writers' temp files.

    Returns:
        ``(problems, leftovers)``: ``'<relative path>': <reason>`` lines, and temp files whose
        writer process is gone.
    """
    root = Path(root)
    problems: list[str] = []
    leftovers: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).parts
        if rel_dir[:1] == (layout.STAGING_DIR,):
            dirnames[:] = []
            continue
        for name in sorted(dirnames):
            path = here / name
            if path.is_symlink():
                problems.append(f"'{path.relative_to(root).as_posix()}': a symlink (refused: "
                                "only regular files inside the folder are read or published)")
                dirnames.remove(name)
            elif rel_dir == () and name == layout.STAGING_DIR:
                dirnames.remove(name)
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(root)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                problems.append(f"'{rel.as_posix()}': a symlink (refused: only regular files "
                                "inside the folder are read or published)")
                continue
            if not stat.S_ISREG(mode):
                problems.append(f"'{rel.as_posix()}': not a regular file")
                continue
            if rel.parts[0] != layout.DATA_DIR:
                continue
            tmp = _TMP_RE.match(name)
            if tmp is not None:
                if not _pid_alive(int(tmp.group("pid"))):
                    leftovers.append(path)
                continue
            if name.startswith("."):
                continue
            reason = _expected(rel.parts)
            if reason is not None:
                problems.append(f"'{rel.as_posix()}': {reason}")
    return problems, leftovers


def check_tree(root: str | Path) -> None:
    """Raise ``ShardError`` naming every entry of :func:`tree_problems` (at most 5 shown)."""
    problems, _ = tree_problems(root)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ShardError(f"'{root}' holds what must not be read or published: "
                         f"{'; '.join(problems[:5])}{more}")


def _read_columns(path: Path, columns: tuple[str, ...]) -> list[dict]:
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq  # Parquet shards only (≈ 20 ms of imports)

            names = pq.read_schema(str(path)).names
            return pq.read_table(str(path), columns=[c for c in columns if c in names]).to_pylist()
        with pa.memory_map(str(path), "r") as source:
            reader = ipc.open_stream(source)
            names = [c for c in columns if c in reader.schema.names]
            return reader.read_all().select(names).to_pylist()
    except (OSError, pa.ArrowInvalid) as exc:
        raise ShardError(f"Failed to read '{path}': {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


def audit_folder(root: str | Path) -> FolderAudit:
    """Check the folder's files, the trace/runs pairing and where cpu_proxy data is.

    Reads only a few columns of each file. Never changes the folder.
    """
    root = Path(root)
    audit = FolderAudit()
    problems, leftovers = tree_problems(root)
    audit.bad_files = problems
    audit.leftovers = [p.relative_to(root).as_posix() for p in leftovers]
    bad = {p.split("'")[1] for p in problems}
    traces: set[str] = set()
    proxy: set[str] = set()
    for config in schema.TRACE_CONFIGS:
        for path in layout.shard_files(root, config):
            if path.relative_to(root).as_posix() in bad:
                continue
            packed = layout.is_packed(path.name)
            for row in _read_columns(path, (*PROXY_COLUMNS, "gpu_name")):
                traces.add(row["run_id"])
                if packed:
                    audit.packed_runs.add(row["run_id"])
                if schema.is_cpu_proxy(row):
                    proxy.add(row["run_id"])
    rows: set[str] = set()
    twice: set[str] = set()
    summaries: set[str] = set()  # flag summary_only: a published summary, no trace by design
    for config in schema.RUNS_CONFIGS:
        for path in layout.shard_files(root, config):
            if path.relative_to(root).as_posix() in bad:
                continue
            packed = layout.is_packed(path.name)
            for row in _read_columns(path, PROXY_COLUMNS):
                if row["run_id"] in rows:
                    twice.add(row["run_id"])
                rows.add(row["run_id"])
                if packed:
                    audit.packed_runs.add(row["run_id"])
                if "summary_only" in (row.get("quality_flags") or []):
                    summaries.add(row["run_id"])
                if schema.is_cpu_proxy(row):
                    proxy.add(row["run_id"])
    audit.orphan_traces = sorted(traces - rows)
    audit.orphan_rows = sorted(rows - traces - summaries)
    audit.proxy_runs = sorted(proxy)
    audit.duplicate_rows = sorted(twice)
    return audit


def remove_leftovers(root: str | Path) -> list[str]:
    """Delete hidden temporary files of writers that are gone; return them (relative paths)."""
    root = Path(root)
    _, leftovers = tree_problems(root)
    for path in leftovers:
        path.unlink(missing_ok=True)
    return [p.relative_to(root).as_posix() for p in leftovers]
