"""Recipes of public sources: where a dataset lies, what its bytes are, whose it is.

A recipe names every file to fetch with its size and SHA-256 (``pinned``), the licence (an
SPDX id) and whether that licence allows redistribution, the citation, the publisher's own
page, and how the files import (a format of ``llm-powertrace import``). The built-in recipes
are the JSON files in ``recipes/``; a user's own (``get --recipes FILE``, JSON or YAML) have the
same fields. A recipe is checked when it is read: a bad one is refused with a one-line error
naming the file and the field.

Example:
    >>> from llm_powertrace_ds.sources.recipes import builtin_recipes
    >>> r = builtin_recipes()["mlenergy-v2-chat"]
    >>> (r.licence, r.redistributable, r.pinned)
    ('Apache-2.0', True, True)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import InputError

HERE = Path(__file__).resolve().parent / "recipes"
FORMATS = ("mlenergy-v2", "wattameter")
"""Import formats a recipe may name (folder importers: one folder, many runs)."""
DEFAULT_MAX_UNPACKED_BYTES = 20 * 1024**3
"""Largest total an archive may unpack to, unless its recipe says otherwise (20 GiB)."""
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_LICENCE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+-]{0,63}$")
"""An SPDX licence id (``Apache-2.0``, ``CC-BY-4.0``, ``LicenseRef-...``)."""


def safe_relpath(text: str, *, file: str | Path | None = None, field: str = "path") -> str:
    """``text`` as a relative POSIX path that stays inside its folder, else ``InputError``."""
    p = PurePosixPath(text.replace("\\", "/"))
    if not text or p.is_absolute() or ".." in p.parts or re.match(r"^[A-Za-z]:", text):
        raise InputError(f"value {text!r} is not a relative path inside the source's folder",
                         file=file, field=field)
    return p.as_posix()


@dataclass(frozen=True)
class RemoteFile:
    """One file of a source.

    Attributes:
        url: where the publisher serves it (``https://``; ``http://`` for local servers).
        path: where it goes under the source's folder (relative POSIX path).
        size_bytes: its size; ``None`` when the recipe is not pinned.
        sha256: its SHA-256 (lower-case hex); ``None`` when the recipe is not pinned.
        unpack: a ``.tar[.gz|.bz2|.xz]`` or ``.zip`` archive to unpack into ``path``'s folder.
    """

    url: str
    path: str
    size_bytes: int | None = None
    sha256: str | None = None
    unpack: bool = False

    @property
    def pinned(self) -> bool:
        return self.size_bytes is not None and self.sha256 is not None


@dataclass(frozen=True)
class Recipe:
    """How to get one public source (see the module docstring).

    Attributes:
        name: the name ``get`` takes.
        title: what the source is, in a line.
        licence: SPDX id of the data's licence.
        redistributable: whether that licence lets us (and the user) republish the data.
        citation: how its authors ask to be cited.
        source_url: the publisher's own page (DOI or repository).
        fmt: the import format (:data:`FORMATS`).
        files: every file to fetch.
        import_path: the folder (under the source's folder) to import.
        workload: ``finetune``/``inference`` for trace formats (``wattameter``); ``None`` when
            the source mixes both (``get --workload`` then says which).
        platform: the split, when the publisher states the GPU.
        tz: the IANA zone of the source's zone-less timestamps.
        max_unpacked_bytes: cap on what the archives unpack to.
        notes: anything a user must know (shown by ``get --list``).
    """

    name: str
    title: str
    licence: str
    redistributable: bool
    citation: str
    source_url: str
    fmt: str
    files: tuple[RemoteFile, ...]
    import_path: str = "."
    workload: str | None = None
    platform: str | None = None
    tz: str | None = None
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES
    notes: str = ""

    @property
    def pinned(self) -> bool:
        """Every file has a size and a SHA-256 to check."""
        return bool(self.files) and all(f.pinned for f in self.files)


def _need(raw: Mapping[str, Any], key: str, kind: type, *, file: str | Path | None) -> Any:
    value = raw.get(key)
    if not isinstance(value, kind) or (isinstance(value, str) and not value.strip()):
        raise InputError(f"value {value!r} is not a {'non-empty text' if kind is str else kind.__name__}",
                         file=file, field=key)
    return value


def _credit(raw: Mapping[str, Any], key: str, *, file: str | Path | None) -> str:
    """A title or citation: text, one line, nothing private (``privacy.credit_problem``)."""
    from ..privacy import credit_problem

    value: str = _need(raw, key, str, file=file)
    problem = credit_problem(value)
    if problem is not None:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:56] + "...'"
        raise InputError(f"value {shown} {problem}; refused (it is published in the card and "
                         "sources.json)", file=file, field=key)
    return value


def _remote(raw: Any, *, file: str | Path | None, k: int) -> RemoteFile:
    where = f"files[{k}]"
    if not isinstance(raw, Mapping):
        raise InputError(f"value {raw!r} is not a mapping", file=file, field=where)
    url = _need(raw, "url", str, file=file)
    if not re.match(r"^https?://", url):
        raise InputError(f"value {url!r} is not an http(s) URL", file=file, field=f"{where}.url")
    path = safe_relpath(str(raw.get("path") or url.rsplit("/", 1)[-1]), file=file,
                        field=f"{where}.path")
    size = raw.get("size_bytes")
    sha = raw.get("sha256")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise InputError(f"value {size!r} is not a byte count", file=file,
                         field=f"{where}.size_bytes")
    if sha is not None and (not isinstance(sha, str) or not _SHA_RE.match(sha)):
        raise InputError(f"value {sha!r} is not a lower-case hex SHA-256", file=file,
                         field=f"{where}.sha256")
    if (size is None) != (sha is None):
        raise InputError("give both size_bytes and sha256, or neither", file=file, field=where)
    return RemoteFile(url=url, path=path, size_bytes=size, sha256=sha,
                      unpack=bool(raw.get("unpack", False)))


def recipe_from_mapping(raw: Mapping[str, Any], *, file: str | Path | None = None) -> Recipe:
    """Check one recipe mapping and build it (``InputError`` naming the field otherwise)."""
    name = _need(raw, "name", str, file=file)
    if not _NAME_RE.match(name):
        raise InputError(f"value {name!r} is not a recipe name (a-z, 0-9, ._-)", file=file,
                         field="name")
    redistributable = raw.get("redistributable")
    if not isinstance(redistributable, bool):
        raise InputError(f"value {redistributable!r} is not true/false: every recipe says "
                         "whether its licence allows redistribution", file=file,
                         field="redistributable")
    fmt = _need(raw, "format", str, file=file)
    if fmt not in FORMATS:
        raise InputError(f"value {fmt!r} is not one of {', '.join(FORMATS)}", file=file,
                         field="format")
    files = raw.get("files")
    if not isinstance(files, list):
        raise InputError(f"value {files!r} is not a list of files", file=file, field="files")
    cap = raw.get("max_unpacked_bytes", DEFAULT_MAX_UNPACKED_BYTES)
    if isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0:
        raise InputError(f"value {cap!r} is not a positive byte count", file=file,
                         field="max_unpacked_bytes")
    licence = _need(raw, "licence", str, file=file)
    if not _LICENCE_RE.match(licence):
        raise InputError(f"value {licence!r} is not an SPDX licence id such as 'CC-BY-4.0'",
                         file=file, field="licence")
    workload = raw.get("workload")
    if workload not in (None, "finetune", "inference"):
        raise InputError(f"value {workload!r} is not finetune or inference", file=file,
                         field="workload")
    return Recipe(
        name=name, title=_credit(raw, "title", file=file),
        licence=licence, redistributable=redistributable,
        citation=_credit(raw, "citation", file=file),
        source_url=_need(raw, "source_url", str, file=file), fmt=fmt,
        files=tuple(_remote(f, file=file, k=k) for k, f in enumerate(files)),
        import_path=safe_relpath(str(raw.get("import_path") or "."), file=file,
                                 field="import_path") if raw.get("import_path") else ".",
        workload=workload, platform=raw.get("platform"), tz=raw.get("tz"),
        max_unpacked_bytes=cap, notes=str(raw.get("notes") or ""))


def load_recipes(path: str | Path) -> dict[str, Recipe]:
    """The recipes of a JSON/YAML file: one recipe, or ``{"recipes": [...]}``."""
    from ..importers.meta_files import read_structured

    data = read_structured(path)
    items = data.get("recipes") if isinstance(data, Mapping) and "recipes" in data else [data]
    if not isinstance(items, list):
        raise InputError("expected a recipe or {recipes: [...]}", file=path, field="recipes")
    out: dict[str, Recipe] = {}
    for item in items:
        if not isinstance(item, Mapping):
            raise InputError(f"value {item!r} is not a recipe mapping", file=path)
        recipe = recipe_from_mapping(item, file=path)
        out[recipe.name] = recipe
    return out


def builtin_recipes() -> dict[str, Recipe]:
    """The recipes shipped with the package (``recipes/*.json``), by name."""
    out: dict[str, Recipe] = {}
    for path in sorted(HERE.glob("*.json")):
        raw = json.loads(path.read_text(encoding="utf-8"))
        out.update({r.name: r for r in [recipe_from_mapping(raw, file=path)]})
    return out


def find_recipe(name: str, recipes_file: str | Path | None = None) -> Recipe:
    """The recipe called ``name``: the user's file first, then the built-in ones."""
    from ..errors import UsageError

    known = builtin_recipes()
    if recipes_file is not None:
        known.update(load_recipes(recipes_file))
    if name not in known:
        raise UsageError(f"no recipe {name!r}; known: {', '.join(sorted(known))}",
                         field="SOURCE")
    return known[name]


__all__ = ["DEFAULT_MAX_UNPACKED_BYTES", "FORMATS", "Recipe", "RemoteFile", "builtin_recipes",
           "find_recipe", "load_recipes", "recipe_from_mapping", "safe_relpath"]
