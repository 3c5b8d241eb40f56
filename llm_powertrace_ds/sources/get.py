"""``llm-powertrace get``: from a public source to a loaded dataset folder in one call.

Steps, each checked before the next: find the recipe (:mod:`.recipes`); refuse a source whose
licence does not allow redistribution unless the user asked (``allow_no_redistribution``) or
brings a local copy; fetch every file from the publisher's own location into
``<out>/.downloads/<name>/`` (hidden: never globbed, never uploaded), resuming a broken
transfer and checking size and SHA-256 (:mod:`.download`) — or take them from a local copy,
checked the same way; unpack archives safely (:mod:`.unpack`); import the recipe's folder with
its importer; record licence, citation, URL and digests in ``sources.json``
(:mod:`.provenance`), which the card prints.

Example:
    >>> from llm_powertrace_ds.sources.get import get_source  # doctest: +SKIP
    >>> res = get_source("mlenergy-v2-chat", "mlenergy")  # doctest: +SKIP
    >>> len(res.run_ids)  # doctest: +SKIP
    191
"""

from __future__ import annotations

import datetime as dt
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .download import ChecksumMismatch, Fetched, fetch, sha256_of
from .provenance import record_source
from .recipes import Recipe, RemoteFile, find_recipe, safe_relpath
from .unpack import safe_unpack

DOWNLOADS_DIR = ".downloads"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip")


def unpack_dir(path: str) -> str:
    """The folder an archive unpacks into: its path without the archive suffix."""
    for suffix in ARCHIVE_SUFFIXES:
        if path.lower().endswith(suffix):
            return path[: -len(suffix)]
    return path + ".d"


@dataclass(frozen=True)
class GetOptions:
    """How ``get`` runs.

    Attributes:
        recipes_file: a JSON/YAML file of the user's own recipes (searched first).
        local_copy: a file (one-file recipes) or folder holding the recipe's files at their
            paths, used instead of downloading (checked against the recipe all the same).
        allow_no_redistribution: download a source whose licence does not allow
            redistribution (for private use; ``upload.py`` still refuses it unless forced).
        allow_unpinned: accept files the recipe gives no SHA-256 for (their digest is
            recorded, marked unpinned).
        cache: where downloads go (default ``<out>/.downloads``).
        workload: overrides the recipe's (trace formats).
        platform: overrides the recipe's split.
        tz: overrides the recipe's zone of zone-less timestamps.
    """

    recipes_file: Path | None = None
    local_copy: Path | None = None
    allow_no_redistribution: bool = False
    allow_unpinned: bool = False
    cache: Path | None = None
    workload: str | None = None
    platform: str | None = None
    tz: str | None = None


@dataclass(frozen=True)
class GetResult:
    """What ``get`` did: the recipe, the files (fetched or taken), the runs published."""

    recipe: Recipe
    files: tuple[Fetched, ...]
    run_ids: tuple[str, ...]
    flags: dict[str, list[str]] = field(default_factory=dict)


def _gate(recipe: Recipe, options: GetOptions) -> None:
    if not recipe.redistributable and options.local_copy is None \
            and not options.allow_no_redistribution:
        raise UsageError(
            f"source {recipe.name!r} ({recipe.licence}) has no licence that allows "
            f"redistribution: it is not offered for download. Get it from {recipe.source_url} "
            "and pass --from PATH, or pass --allow-no-redistribution (private use; upload.py "
            "refuses it unless forced)", field="SOURCE")
    if not recipe.files and (options.local_copy is None or not options.local_copy.is_dir()):
        raise UsageError(f"source {recipe.name!r} lists no files to download: get it from "
                         f"{recipe.source_url} and pass its folder with --from PATH",
                         field="SOURCE")
    if recipe.files and not recipe.pinned and not options.allow_unpinned:
        raise UsageError(f"source {recipe.name!r} gives no size and SHA-256 for every file, "
                         "so what arrives cannot be checked: pass --allow-unpinned to accept "
                         "it (the digests are recorded as unpinned)", field="SOURCE")


def _local(remote: RemoteFile, copy: Path, dest: Path, single: bool) -> Fetched:
    src = copy if (single and copy.is_file()) else copy.joinpath(*remote.path.split("/"))
    if not src.is_file():
        raise UsageError(f"the local copy has no {remote.path!r} (looked at '{src}')",
                         field="--from")
    size = src.stat().st_size
    digest = sha256_of(src)
    if remote.pinned and (size != remote.size_bytes or digest != remote.sha256):
        raise ChecksumMismatch(f"'{src}': {size} bytes, SHA-256 {digest}; the recipe says "
                               f"{remote.size_bytes} bytes, {remote.sha256}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.resolve() != dest.resolve():
        shutil.copyfile(src, dest)
    return Fetched(dest, size, digest, remote.pinned, False)


def _import(recipe: Recipe, tree: Path, out: Path, options: GetOptions
            ) -> tuple[list[str], dict[str, list[str]]]:
    folder = tree.joinpath(*recipe.import_path.split("/")) if recipe.import_path != "." \
        else tree
    if recipe.fmt == "mlenergy-v2":
        from ..importers import import_summaries
        from ..importers.mlenergy_v2 import publish_summaries

        runs = import_summaries(recipe.fmt, folder)
        publish_summaries(out, runs)
        return [r.run_id for r, _ in runs], {r.run_id: r.flags for r, _ in runs}
    from ..importers.publish_runs import publish_runs
    from ..importers.wattameter import iter_wattameter

    workload = options.workload or recipe.workload
    if workload is None:
        raise UsageError(f"source {recipe.name!r} holds training and inference jobs: say "
                         "which these are with --workload finetune|inference", field="--workload")
    built = iter_wattameter([folder], workload=workload,
                            platform=options.platform or recipe.platform,
                            tz=options.tz or recipe.tz or "UTC")  # one job in memory at a time
    results = list(publish_runs(out, ((folder, r) for r in built), configs_block=False))
    return [r.run_id for r in results], {r.run_id: list(r.flags) for r in results}


def get_source(name: str, out: str | Path, options: GetOptions | None = None) -> GetResult:
    """Fetch, check, unpack and import the source ``name`` into the folder ``out``.

    The card is not rebuilt here (the command does it once).

    Raises:
        UsageError: unknown source, a licence or pinning gate, a local copy missing a file.
        DownloadInterrupted: a broken transfer (run again to resume).
        DownloadError: the server refused or cannot be reached.
        ChecksumMismatch: bytes that are not the recipe's (nothing kept).
        UnsafeArchive: an archive that would escape its folder or exceed the caps.
        InputError: the files do not import (naming file, line and field).
    """
    options = options or GetOptions()
    recipe = find_recipe(name, options.recipes_file)
    _gate(recipe, options)
    out = Path(out)
    cache = (options.cache or out / DOWNLOADS_DIR) / recipe.name
    tree = cache / "tree"
    fetched: list[Fetched] = []
    single = len(recipe.files) == 1
    for remote in recipe.files:
        rel = safe_relpath(remote.path)
        dest = (cache / "archives" / rel) if remote.unpack else tree.joinpath(*rel.split("/"))
        if options.local_copy is not None:
            got = _local(remote, options.local_copy, dest, single)
        else:
            got = fetch(remote, dest, max_bytes=recipe.max_unpacked_bytes)
        fetched.append(got)
        if remote.unpack:
            safe_unpack(got.path, tree.joinpath(*unpack_dir(rel).split("/")),
                        max_total_bytes=recipe.max_unpacked_bytes)
    if not recipe.files:  # a source known by its page only: import the user's local folder
        assert options.local_copy is not None
        tree = options.local_copy
        fetched = [Fetched(p, p.stat().st_size, sha256_of(p), False, False)
                   for p in sorted(tree.rglob("*")) if p.is_file()]
    run_ids, flags = _import(recipe, tree, out, options)
    record_source(out, _entry(recipe, fetched, run_ids, options))
    return GetResult(recipe=recipe, files=tuple(fetched), run_ids=tuple(run_ids), flags=flags)


def _entry(recipe: Recipe, fetched: list[Fetched], run_ids: list[str],
           options: GetOptions) -> dict[str, Any]:
    return {
        "name": recipe.name, "title": recipe.title, "licence": recipe.licence,
        "redistributable": recipe.redistributable, "citation": recipe.citation,
        "source_url": recipe.source_url, "format": recipe.fmt,
        "retrieved_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "from_local_copy": options.local_copy is not None,
        "files": [{"url": r.url, "size_bytes": f.size_bytes, "sha256": f.sha256,
                   "pinned": f.pinned} for r, f in zip(recipe.files, fetched, strict=True)]
        if recipe.files else [{"local": f.path.name, "size_bytes": f.size_bytes,
                               "sha256": f.sha256, "pinned": False} for f in fetched],
        "runs": sorted(run_ids),
    }


__all__ = ["DOWNLOADS_DIR", "GetOptions", "GetResult", "get_source", "unpack_dir"]
