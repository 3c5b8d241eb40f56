"""Write the explorer: a static site (no server, no network at view time) for a dataset folder.

Layout of ``SITE/``::

    index.html  run.html  compare.html  sweep.html     the pages (one run page: ?run=<folder>)
    assets/bokeh.min.js  assets/bokeh-api.min.js       BokehJS, from the ``bokeh`` package
    assets/explorer.js  assets/style.css               the pages' glue code
    data/site.js                                       columns, formulas, flag meanings, counts
    data/catalog.js                                    catalog rows (the catalog and sweep pages)
    data/runs/<xx>/<folder>/meta.js                    one run's description, events, metrics
    data/runs/<xx>/<folder>/L<level>-<chunk>.js        its pyramid chunks, loaded on demand
    site.json                                          what was written, and its size

``<xx>`` is two hex digits of the folder's hash (``catalog.run_dir``): 256 sub-folders, so no
folder holds 10,000 entries. The run and compare pages load ``site.js`` and their runs' files,
never the catalog rows, so a run page opens as fast in a 10,000-run site as in a one-run site.

Data files are JavaScript (``LPT.got(key, payload)``) loaded through ``<script>`` tags, because
browsers refuse ``fetch`` on ``file://``; so the same folder works opened from disk and as a
static Hugging Face Space. A chunk's arrays travel as one deflated, byte-shuffled binary blob in
base64 (``rundata.encode_chunk``), inflated in the browser by the standard ``DecompressionStream``
into typed arrays — lossless, so the site stays within ``SIZE_BOUND`` of the dataset's
zstd-compressed shards without rounding a sample. Devices' all-null signals are not written. The site is built in a temporary sibling folder and renamed into place,
so an interrupted build never leaves a half-written site, and a folder that is not an explorer
site is never overwritten.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import string
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .. import layout, schema, shards, work_dirs
from ..errors import InputError, MissingExtra
from ..formatting import safe_text
from ..metrics import metric_formulas
from ..request_rows import RequestRows
from ..run import Run
from .catalog import catalog, packed_rows, run_dir, run_folder
from .rundata import RunData, encode_chunk

MANIFEST = "site.json"
PAGES = ("index.html", "run.html", "compare.html", "sweep.html")
_BOKEH_TAGS = ('<script src="assets/bokeh.min.js" defer></script>\n'
               '<script src="assets/bokeh-api.min.js" defer></script>')
_CATALOG_TAG = '<script src="data/catalog.js"></script>'
_PAGE_PARTS: dict[str, dict[str, str]] = {
    # page -> the template's fields. The plotting pages load BokehJS deferred in the head, so
    # the page starts loading its data while BokehJS is parsed; the catalog loads it after it
    # is drawn, so that the browser's code cache has BokehJS compiled when a run page opens
    # (measured by bench/explorer.py).
    "index.html": {"title": "Runs", "page": "index", "head_scripts": _CATALOG_TAG,
                   "tail_scripts": _BOKEH_TAGS},
    "run.html": {"title": "Run", "page": "run", "head_scripts": _BOKEH_TAGS,
                 "tail_scripts": ""},
    "compare.html": {"title": "Compare runs", "page": "compare", "head_scripts": _BOKEH_TAGS,
                     "tail_scripts": ""},
    "sweep.html": {"title": "Sweep", "page": "sweep",
                   "head_scripts": _CATALOG_TAG + "\n" + _BOKEH_TAGS, "tail_scripts": ""},
}
"""The four pages share one template (``assets/page.html``, :class:`string.Template` fields)."""
ASSETS = ("explorer.js", "style.css")
LIBRARY = ("bokeh.min.js", "bokeh-api.min.js")
"""BokehJS files the pages load: the core (models, canvas rendering) and its JS plotting API
(``Bokeh.Plotting.figure``); not bokeh-gl (WebGL), -widgets, -tables or -mathjax."""
SIZE_BOUND = 1.5
"""The site's data files are at most this many times the dataset's trace bytes (checked by
``tests/llm_powertrace_ds/explore/test_site.py`` on 4 devices x 20 min with every signal: 1.26x)."""


@dataclass(frozen=True)
class SiteReport:
    """What ``build_site`` wrote.

    Attributes:
        out: the site folder.
        runs: runs in the catalog.
        data_bytes: bytes of ``data/`` (catalog, run descriptions, pyramid chunks).
        trace_bytes: bytes of the dataset's trace shards (``data/finetune``, ``data/inference``).
        library_bytes: bytes of the pages, BokehJS and the glue code (fixed, whatever the data).
        proxy_runs: how many runs are ``cpu_proxy`` (modelled, not measured).
        skipped_runs: runs left out of the site, with the reason (published summaries without a
            power trace: nothing to draw).
    """

    out: Path
    runs: int
    data_bytes: int
    trace_bytes: int
    library_bytes: int
    proxy_runs: int
    skipped_runs: int = 0

    @property
    def ratio(self) -> float | None:
        """``data_bytes / trace_bytes`` (``None`` without traces)."""
        return self.data_bytes / self.trace_bytes if self.trace_bytes else None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["out"] = str(self.out)
        out["ratio"] = self.ratio
        return out


def bokeh_js() -> dict[str, Path]:
    """The BokehJS files of ``LIBRARY``, shipped inside the ``bokeh`` Python package (offline use).

    BokehJS rather than plotly.js: its core and plotting API are 1.4 MB of script against
    plotly.js's 4.8 MB, and a cold browser tab starts them in about a fifth of the time, which is
    what keeps a run page's first draw under a second (bench/explorer.py).
    """
    try:
        from bokeh.util.paths import bokehjs_path
    except ImportError:
        raise MissingExtra("bokeh is not installed: pip install 'llm-powertrace[explore]'"
                           ) from None
    files = {name: Path(bokehjs_path()) / "js" / name for name in LIBRARY}
    missing = [str(p.name) for p in files.values() if not p.is_file()]
    if missing:
        raise MissingExtra(f"the bokeh package lacks {', '.join(missing)}: reinstall bokeh")
    return files


def _clean(value: Any) -> Any:
    """Every string through the output sanitiser: no control or bidi character reaches a page.

    A dataset from elsewhere may hold them; they would spoof how names look.
    """
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _js(key: str, payload: Any) -> str:
    """One site data file: ``LPT.got(key, payload)`` with every string sanitised."""
    return (f"LPT.got({json.dumps(_clean(key))},"
            f"{json.dumps(_clean(payload), separators=(',', ':'))});\n")


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def trace_bytes(root: Path) -> int:
    """Bytes of the trace-config shards of a dataset folder."""
    return sum(p.stat().st_size for config in schema.TRACE_CONFIGS
               for p in layout.shard_files(root, config))


def _check_target(out: Path) -> None:
    if out.exists() and (not out.is_dir()
                         or (any(out.iterdir()) and not (out / MANIFEST).is_file())):
        raise InputError(f"'{out}' exists and is not an explorer site (no {MANIFEST}); "
                         "choose an empty or new folder", field="--out")


def iter_runs(root: Path) -> Iterator[Run]:
    """Every run of the trace configs, reading each shard once.

    A packed shard holds many runs, each as consecutive rows; they are grouped as they stream by
    (``shards.iter_rows``), so a packed dataset is read in one pass instead of once per run.
    """
    for config in schema.TRACE_CONFIGS:
        group: list[dict[str, Any]] = []
        for row in shards.iter_rows(root, config):
            if group and row["run_id"] != group[0]["run_id"]:
                yield shards.run_from_rows(group, root=root)
                group = []
            group.append(row)
        if group:
            yield shards.run_from_rows(group, root=root)


def requests_by_run(root: Path) -> dict[str, RequestRows]:
    """The ``inference_requests`` rows of every run, read in one pass, held as columns.

    ``shards.run_from_rows`` looks for a run's own requests file only, which ``pack`` merges
    away; this reads the config whatever its layout (per-run files or packed shards).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    parts: dict[str, list[pa.RecordBatch]] = {}
    for batch in shards.iter_batches(root, schema.REQUESTS_CONFIG):
        ids = batch.column("run_id")
        unique = pc.unique(ids)
        if len(unique) == 1:  # a per-run file's batch: all of it
            parts.setdefault(str(unique[0].as_py()), []).append(batch)
            continue
        for rid in unique.to_pylist():
            parts.setdefault(str(rid), []).append(batch.filter(pc.equal(ids, rid)))
    return {rid: RequestRows.from_shard(pa.Table.from_batches(batches))
            for rid, batches in parts.items()}


_RST_ROLE = re.compile(r":(?:data|func|class|meth|mod|attr|obj):`~?(?:[\w.]+\.)?([^`]+)`")
_RST_LITERAL = re.compile(r"``([^`]+)``")


def plain_formula(text: str) -> str:
    """A metric's docstring formula as the run page shows it: reST markup removed.

    ``tokens`` reads tokens, :data:`GRID_MS` reads GRID_MS (the page shows plain text).
    """
    return _RST_LITERAL.sub(r"\1", _RST_ROLE.sub(r"\1", text))


def _write_site(root: Path, tmp: Path, name: str) -> tuple[int, int, int]:
    rows = shards.list_runs(root)
    # a published summary (ML.ENERGY) has no trace to draw: listed as skipped, never fatal
    skipped = [{"run_id": str(r["run_id"]), "reason": "summary_only: a published summary "
                "without a power trace"} for r in rows
               if "summary_only" in (r.get("quality_flags") or [])]
    rows = [r for r in rows if "summary_only" not in (r.get("quality_flags") or [])]
    by_id = {str(r["run_id"]): r for r in rows}
    formulas = {name: plain_formula(text) for name, text in metric_formulas().items()}
    cat = catalog(rows)
    data = tmp / "data"
    (data / "runs").mkdir(parents=True)
    written: set[str] = set()
    requests = requests_by_run(root)
    reader: shards.RunReader | None = None
    for run in iter_runs(root):
        run_id = run.run_id
        if run_id not in by_id:
            continue  # a trace without its runs row (or a summary's) is not drawn
        if run_id in written:  # rows of one run split across shards: read it whole
            reader = reader or shards.RunReader(root)
            run = reader.read(run_id)
        written.add(run_id)
        if run.workload == "inference" and not run.requests:
            run.requests = requests.get(run_id)
        folder = run_folder(run_id)
        rd = RunData(run, folder, by_id[run_id])
        where = data / "runs" / run_dir(folder)
        if where.exists():
            shutil.rmtree(where)
        where.mkdir(parents=True)
        (where / "meta.js").write_text(_js(f"{folder}/meta", rd.meta(set(formulas))),
                                       encoding="utf-8")
        for chunk, payload in rd.chunks():
            (where / f"{chunk}.js").write_text(_js(f"{folder}/{chunk}", encode_chunk(payload)),
                                               encoding="utf-8")
    missing = sorted(set(by_id) - written)
    if missing:
        raise InputError(f"run(s) {', '.join(missing[:5])} of {root} have a runs row but no "
                         "trace rows", field="run_id")
    about = {"dataset": name, "columns": cat["columns"], "runs": len(cat["rows"]),
             "skipped": skipped,
             "formulas": formulas, "flags": schema.FLAG_DESCRIPTIONS,
             "schema_version": schema.SCHEMA_VERSION}
    (data / "site.js").write_text(_js("site", about), encoding="utf-8")
    (data / "catalog.js").write_text(_js("catalog", packed_rows(cat["rows"])), encoding="utf-8")
    assets = tmp / "assets"
    assets.mkdir()
    for name, path in bokeh_js().items():
        shutil.copyfile(path, assets / name)
    src = resources.files("llm_powertrace_ds.explore") / "assets"
    for asset in ASSETS:
        (assets / asset).write_text(src.joinpath(asset).read_text(encoding="utf-8"),
                                    encoding="utf-8")
    template = string.Template(src.joinpath("page.html").read_text(encoding="utf-8"))
    for page in PAGES:
        (tmp / page).write_text(template.substitute(_PAGE_PARTS[page]), encoding="utf-8")
    return len(rows), sum(1 for r in cat["rows"] if r["cpu_proxy"]), len(skipped)


def build_site(root: str | Path, out: str | Path, *, name: str | None = None) -> SiteReport:
    """Write the explorer of the dataset folder ``root`` into ``out``.

    Args:
        root: a dataset folder (with ``data/``).
        out: the site folder; replaced atomically if it is an explorer site already.
        name: the dataset's name shown on the pages (default: the folder's name; never a path).

    Returns:
        a :class:`SiteReport` with the sizes (the data files are at most ``SIZE_BOUND`` times
        the dataset's trace bytes for datasets whose runs are longer than a few seconds).

    Raises:
        InputError: ``out`` is a folder that is not an explorer site.
        MissingExtra: bokeh is not installed.

    Example:
        >>> build_site("llm-powertrace", "llm-powertrace-explorer")  # doctest: +SKIP
    """
    root, out = Path(root), Path(out)
    _check_target(out)
    bokeh_js()  # fail before any work when the extra is missing
    out.parent.mkdir(parents=True, exist_ok=True)
    # a killed explore's work folders (their pid is gone) go first; a previous site it had
    # moved aside comes back when no new one replaced it
    work_dirs.remove_stale_work_dirs(out.parent, out.name)
    _check_target(out)
    tmp = work_dirs.make_work_dir(out, "tmp")
    old: Path | None = None
    try:
        runs, proxy, skipped = _write_site(root, tmp, name or root.resolve().name)
        data_bytes = _folder_bytes(tmp / "data")
        report = SiteReport(out, runs, data_bytes, trace_bytes(root),
                            _folder_bytes(tmp) - data_bytes, proxy, skipped)
        manifest = report.as_json()
        manifest["out"] = out.name
        manifest["generator"] = "llm-powertrace explore"
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o755)
        if out.exists():
            old = work_dirs.aside_name(out)
            out.rename(old)
        tmp.rename(out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and old.exists() and not out.exists():
            old.rename(out)  # the new site never arrived: the old one is back in place
        raise
    return report
