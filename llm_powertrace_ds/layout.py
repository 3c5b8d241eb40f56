"""Paths and globs of the dataset folder, and the YAML ``configs`` it declares.

::

    <root>/README.md
    <root>/data/<workload>/<platform>/<family>/<shard>.arrow      trace configs
    <root>/data/<workload>_runs/<platform>/<shard>.arrow          runs configs
    <root>/data/inference_requests/<platform>/<shard>.arrow       requests
    <root>/.staging/                                              hidden from every glob

``<shard>`` is ``<run_id>.arrow`` while the folder is filled and
``<platform>-NNNNN-of-MMMMM.arrow`` after ``pack``. A runs folder also holds **segments**,
``segment~<16 hex>.arrow``: the rows of many runs merged into one file when a writing command
finishes (``shards.segments``), because a one-row file of a runs config costs ~29 KB of schema
and batch metadata whatever its data. A ``~`` is a character no run id may hold
(``importers.assemble.check_run_id``: letters, digits and ``._=+-``), so no run's file can take
a segment's name, and it is no prefix that tools skip (``pyarrow.dataset`` skips ``.`` and
``_``). Traces and requests stay one file per run. Temporary files start with a dot and end in
``.tmp``, so no glob ever matches a half-written file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from . import schema

DATA_DIR = "data"
STAGING_DIR = ".staging"
LOCKS_DIR = "locks"
SHARD_SUFFIX = ".arrow"
SEGMENT_PREFIX = "segment~"
"""A runs-table segment's name: ``segment~<16 hex>.arrow`` (no run id holds a ``~``)."""
READ_SUFFIXES = (".arrow", ".parquet")
"""What readers accept: Arrow IPC shards, and Parquet ones of a folder uploaded as Parquet."""


def data_root(root: str | Path) -> Path:
    return Path(root) / DATA_DIR


def staging_root(root: str | Path) -> Path:
    return Path(root) / STAGING_DIR


def staging_dir(root: str | Path, run_id: str) -> Path:
    """The staging folder of one run (``.staging/<run_id>/``)."""
    return staging_root(root) / run_id


def lock_path(root: str | Path, name: str) -> Path:
    """A lock file under ``.staging/locks/`` (``folder`` for the card, else a run id).

    Every lock of a dataset folder lives here, and its file stays after release: the flock is
    on the file's inode, so removing a pathname that another process has open lets a third
    create a new file under the same name and hold "the same" lock at once (filelock's issue
    574 reverted deletion on release for that reason). ``pack`` and uploads never copy them.
    """
    path = staging_root(root) / LOCKS_DIR / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def trace_path(root: str | Path, workload: str, platform: str, family: str, run_id: str) -> Path:
    return data_root(root) / workload / platform / family / f"{run_id}{SHARD_SUFFIX}"


def runs_path(root: str | Path, workload: str, platform: str, run_id: str) -> Path:
    return data_root(root) / f"{workload}_runs" / platform / f"{run_id}{SHARD_SUFFIX}"


PACKED_RE = re.compile(r"-\d{5}-of-\d{5}\.(arrow|parquet)$")
"""Names of ``pack``'s shards (``<platform>-NNNNN-of-MMMMM.arrow``)."""


def is_packed(name: str) -> bool:
    """Whether a file name is a packed shard's (``pack``'s output: read and publish only)."""
    return PACKED_RE.search(name) is not None


def is_segment(name: str) -> bool:
    """Whether a file name is a runs-table segment's (many runs' rows; see the module text)."""
    return name.startswith(SEGMENT_PREFIX) and name.endswith(READ_SUFFIXES)


def requests_path(root: str | Path, platform: str, run_id: str) -> Path:
    return data_root(root) / schema.REQUESTS_CONFIG / platform / f"{run_id}{SHARD_SUFFIX}"


def _is_shard(entry: os.DirEntry) -> bool:
    name = entry.name
    return (not name.startswith(".") and os.path.splitext(name)[1] in READ_SUFFIXES
            and entry.is_file())


def _entries(folder: Path) -> list[os.DirEntry]:
    """The folder's entries (``os.scandir``: file types without a ``stat`` per entry)."""
    try:
        with os.scandir(folder) as it:
            return list(it)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _shards(folder: Path) -> list[Path]:
    return [folder / name for name in sorted(e.name for e in _entries(folder) if _is_shard(e))]


def _subdirs(folder: Path) -> list[Path]:
    return [folder / name for name in sorted(e.name for e in _entries(folder)
                                             if not e.name.startswith(".") and e.is_dir())]


def has_shards(folder: Path) -> bool:
    """Whether a folder holds at least one shard (stops at the first)."""
    return any(_is_shard(e) for e in _entries(folder))


def shard_folders(root: str | Path) -> dict[str, dict[str, list[Path]]]:
    """Every folder holding shards, as ``{config: {split: [folders]}}``.

    Trace configs also yield their per-family configs (``finetune-llama``).
    """
    data = data_root(root)
    out: dict[str, dict[str, list[Path]]] = {}
    for config in schema.ALL_CONFIGS:
        for pdir in _subdirs(data / config):
            split = pdir.name
            if config in schema.TRACE_CONFIGS:
                for fdir in _subdirs(pdir):
                    if has_shards(fdir):
                        out.setdefault(config, {}).setdefault(split, []).append(fdir)
                        fam = f"{config}-{fdir.name}"
                        out.setdefault(fam, {}).setdefault(split, []).append(fdir)
            elif has_shards(pdir):
                out.setdefault(config, {}).setdefault(split, []).append(pdir)
    return out


def shard_files(root: str | Path, config: str, split: str | None = None,
                folders_by_config: dict[str, dict[str, list[Path]]] | None = None) -> list[Path]:
    """Every shard file of a config (and split), sorted.

    Args:
        root: the dataset folder.
        config: the config.
        split: one split, or every split when ``None``.
        folders_by_config: a ``shard_folders(root)`` already computed (one walk of ``data/``
            for many calls).
    """
    folders = (folders_by_config if folders_by_config is not None
               else shard_folders(root)).get(config, {})
    files: list[Path] = []
    for sp, dirs in sorted(folders.items()):
        if split is None or sp == split:
            for d in dirs:
                files.extend(_shards(d))
    return files


def config_globs(root: str | Path, folders_by_config: dict[str, dict[str, list[Path]]] | None = None
                 ) -> dict[str, dict[str, list[str]]]:
    """``{config: {split: [glob relative to root]}}`` for every (config, split) present.

    ``folders_by_config``: a ``shard_folders(root)`` already computed (one walk of ``data/``).
    """
    out: dict[str, dict[str, list[str]]] = {}
    data = data_root(root)
    folders = folders_by_config if folders_by_config is not None else shard_folders(root)
    for config, splits in folders.items():
        for split, dirs in splits.items():
            if config in schema.TRACE_CONFIGS:
                globs = [f"{DATA_DIR}/{config}/{split}/*/*{SHARD_SUFFIX}"]
            elif "-" in config:
                globs = [d.relative_to(data.parent).as_posix() + f"/*{SHARD_SUFFIX}" for d in dirs]
            else:
                globs = [f"{DATA_DIR}/{config}/{split}/*{SHARD_SUFFIX}"]
            out.setdefault(config, {})[split] = globs
    return dict(sorted(out.items(), key=lambda kv: _config_order(kv[0])))


def _config_order(config: str) -> tuple[int, str]:
    base = schema.base_config(config)
    return (schema.ALL_CONFIGS.index(base), config)


def files_fingerprint(splits: dict[str, list[Path]], *,
                      stats: dict[Path, bytes] | None = None) -> str:
    """16 hex digits of SHA-256 over the (name, size, mtime_ns) of every shard of a config.

    ``datasets`` keys a local folder's cache on the config's YAML (its globs), not on the files
    they match, so a folder whose files changed could load stale rows or fail its split-size
    check. This fingerprint, written as the config's ``description`` (a ``BuilderConfig`` field
    that enters the cache key), changes whenever a shard is added, removed or rewritten.
    ``stats``: a dict shared by the calls of one walk (a family config's folders are its
    workload's), so each folder's files are statted once.
    """
    import hashlib

    digest = hashlib.sha256()
    for split in sorted(splits):
        for folder in splits[split]:
            lines = None if stats is None else stats.get(folder)
            if lines is None:  # a family config's folders are its workload's: stat them once
                lines = b"".join(f"{path.name}:{st.st_size}:{st.st_mtime_ns}\n".encode()
                                 for path in _shards(folder) for st in (path.stat(),))
                if stats is not None:
                    stats[folder] = lines
            prefix = f"{split}/{folder.name}/".encode()
            digest.update(b"".join(prefix + line + b"\n" for line in lines.splitlines()))
    return digest.hexdigest()[:16]


def configs_metadata(root: str | Path) -> list[dict]:
    """The card's YAML ``configs:`` list: globs per split and a fingerprint.

    Each entry's ``description`` holds the files' fingerprint (:func:`files_fingerprint`).
    No ``features``: ``datasets`` reads the exact ``Features`` from the files' Arrow types
    (``schema.arrow_schema``), and a feature list per config (family configs repeat their
    workload's) made two thirds of the card (issue 34).

    ``finetune`` is marked ``default: true`` when present (else the first config).
    """
    folders = shard_folders(root)  # one walk of data/ for the globs and the fingerprints
    globs = config_globs(root, folders)
    entries = []
    stats: dict[Path, bytes] = {}  # each folder's files statted once for all its configs
    for config, splits in globs.items():
        fingerprint = files_fingerprint(folders.get(config, {}), stats=stats)
        entry: dict = {"config_name": config, "description": f"files {fingerprint}"}
        entry["data_files"] = [{"split": split, "path": paths} for split, paths in splits.items()]
        entries.append(entry)
    names = [e["config_name"] for e in entries]
    default = "finetune" if "finetune" in names else (names[0] if names else None)
    for e in entries:
        if e["config_name"] == default:
            e["default"] = True
    return entries


CARD_MARKER = "<!-- llm-powertrace dataset card: regenerated by `llm-powertrace card` -->"
"""The line every card this project writes carries: a README without it (and without a YAML
``configs:`` block over ``data/``, what older cards had) is someone else's and is never
overwritten."""


def readme_is_ours(root: str | Path) -> bool:
    """True when ``<root>/README.md`` is absent, empty, or a card this project wrote.

    A card is recognised by :data:`CARD_MARKER`; for cards written before the marker or
    prepared by hand, by the folder already holding a dataset (``data/<config>/``) or by the
    README opening with a YAML front matter (a dataset card's shape; a project's README is
    Markdown).
    """
    path = Path(root) / "README.md"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if not text.strip() or CARD_MARKER in text:
        return True
    data = data_root(root)
    if data.is_dir() and any((data / config).is_dir() for config in schema.ALL_CONFIGS):
        return True  # the folder is a dataset already: its README is its card, hand edits too
    if not text.startswith("---"):
        return False
    import yaml

    head = text.split("\n---", 2)
    try:
        meta = yaml.safe_load(head[0].lstrip("-")) if len(head) > 1 else None
    except yaml.YAMLError:
        return False
    return isinstance(meta, dict)  # a dataset card's shape (YAML front matter), if hand-written


def check_readme_is_ours(root: str | Path) -> None:
    """Refuse, before anything is written, a folder whose README.md is not a dataset card.

    Raises:
        InputError: naming the README (one line).
    """
    from .errors import InputError

    if not readme_is_ours(root):
        raise InputError("is not a dataset card written by llm-powertrace; refusing to replace "
                         "it: write the dataset into a folder of its own (--out)",
                         file=Path(root) / "README.md")
