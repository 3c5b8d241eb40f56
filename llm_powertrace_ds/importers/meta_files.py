"""Importer basics: file hashes, model families, scrubbing identities, metadata files (JSON/YAML)."""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from .. import bounded, privacy
from ..errors import InputError

log = logging.getLogger("llm_powertrace_ds.importers")

CHUNK_ROWS = 65_536

_MS_PER_S = 1000

# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", file=path) from None
    return digest.hexdigest()


def companion(path: Path, name: str) -> Path | None:
    """``path``'s folder / ``name`` when that is a file (a sidecar or metadata file), else None.

    A name longer than the file system allows (``ENAMETOOLONG``: a 250-byte log name plus
    ``.job_info.yaml``) names no file, so it is None as well; ``Path.is_file`` raises there
    instead (Python 3.11).
    """
    candidate = path.with_name(name)
    try:
        return candidate if candidate.is_file() else None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return None
        raise


_FAMILY_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"deepseek"), "deepseek"),
    (re.compile(r"gpt[-_ ]?j(?![a-z])"), "gptj"),
    (re.compile(r"gpt[-_ ]?2(?!\d)"), "gpt2"),
    (re.compile(r"llama"), "llama"),
    (re.compile(r"qwen"), "qwen"),
    (re.compile(r"mistral|mixtral"), "mistral"),
    (re.compile(r"(?<![a-z])phi(?![a-z])"), "phi"),
    (re.compile(r"gemma"), "gemma"),
]


def family_from_name(name: str | None) -> str:
    """Guess the model family of a model name (``Mistral-7B-v0.1`` -> ``mistral``).

    Returns ``unknown`` when no name is given and ``other`` when no known family matches.
    """
    if name is None or not str(name).strip():
        return "unknown"
    text = str(name).lower()
    for pattern, family in _FAMILY_PATTERNS:
        if pattern.search(text):
            return family
    return "other"


_IP_RE = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b|\b[0-9a-f]{1,4}(?::[0-9a-f]{0,4}){4,7}\b", re.I)
_ABS_PATH_RE = re.compile(r"^(?:/|~|\\\\|[A-Za-z]:[\\/])")


_EMBEDDED_PATH_RE = re.compile(r"(?:(?<=\s)|^)(?:~|/|[A-Za-z]:[\\/]|\\\\)[^\s]*")
_HOST_RE = re.compile(r"\b[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+){2,}\.[A-Za-z]{2,}\b|\S+@\S+")


def _local_identities() -> tuple[str, ...]:
    """This machine's host name and user name (never to be published)."""
    import getpass
    import socket

    names = []
    for get in (socket.gethostname, getpass.getuser):
        try:
            name = get()
        except (OSError, KeyError):
            continue
        if name and len(name) >= 3 and name not in ("root",):
            names.append(name)
    return tuple(names)


def scrub_text(value: str) -> str | None:
    """Remove what must never be published from a metadata string.

    An absolute path keeps only its last component (``/home/ann/models/x`` -> ``x``), also when
    it stands inside the text; a value that holds an IP address, a fully qualified host name,
    an e-mail-like ``user@host``, or this machine's host or user name is dropped (``None``).
    """
    text = value.strip()
    if _IP_RE.search(text) or _HOST_RE.search(text):
        return None
    if any(re.search(rf"\b{re.escape(n)}\b", text) for n in _local_identities()):
        return None
    if _ABS_PATH_RE.match(text) and not any(c.isspace() for c in text):
        pure = PureWindowsPath(text) if "\\" in text else PurePosixPath(text)
        return pure.name or None

    def last_part(m: re.Match[str]) -> str:
        token = m.group(0)
        pure = PureWindowsPath(token) if "\\" in token else PurePosixPath(token)
        return pure.name

    return _EMBEDDED_PATH_RE.sub(last_part, text).strip() or None


def scrub_meta(meta: dict[str, Any], *, source: str) -> dict[str, Any]:
    """Refuse metadata whose text could name a person, a machine or a path; return it unchanged.

    Free text is checked, never rewritten (issue 12, item 1): a value that looks like a path, an
    IP address, ``user@host`` or a host name, or that breaks its field's grammar, is an
    ``InputError`` naming the file and the field (``privacy.check_text``). Surrounding whitespace
    is stripped.
    """
    out = {k: v.strip() if isinstance(v, str) else v for k, v in meta.items()}
    privacy.check_meta_text(out, file=source)
    return out


def resolve_zone(tz: str | None) -> dt.tzinfo:
    """The ``tzinfo`` of an IANA zone name (``None``/``UTC`` -> UTC)."""
    if tz is None or tz.upper() in ("UTC", "Z", "ETC/UTC"):
        return dt.timezone.utc
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InputError(f"{tz!r} is not an IANA time zone name (e.g. America/Phoenix)",
                         field="tz") from None


def one_line(text: object, limit: int = 60) -> str:
    """Text squeezed onto one line (whitespace runs become one space), cut at ``limit``."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def list_names(names: Sequence[str], limit: int = 200) -> str:
    """A one-line, comma-separated list of header names for messages."""
    return one_line(", ".join(repr(one_line(n, 40)) for n in names) or "nothing", limit)


def _short(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


# ---------------------------------------------------------------------------------------------
# Metadata files
# ---------------------------------------------------------------------------------------------


def _parse_error_line(exc: Exception) -> int | None:
    if isinstance(exc, json.JSONDecodeError):
        return exc.lineno
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return mark.line + 1 if mark is not None else None


def _one_line(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    problem = getattr(exc, "problem", None) or str(exc)
    return " ".join(str(problem).split())


MAX_META_CHARS = 1 << 20
MAX_META_NODES = 10_000
"""Most values a metadata file may expand to, YAML aliases followed (an alias bomb stops)."""


def _check_yaml_size(node: yaml.Node | None, path: Path) -> None:
    stack = [node] if node is not None else []
    seen = 0
    while stack:
        cur = stack.pop()
        seen += 1
        if seen > MAX_META_NODES:
            raise InputError(f"the file expands to more than {MAX_META_NODES} values (YAML "
                             "aliases?); refused", file=path, line=cur.start_mark.line + 1)
        if isinstance(cur, yaml.MappingNode):
            for key, value in cur.value:
                stack.extend((key, value))
        elif isinstance(cur, yaml.SequenceNode):
            stack.extend(cur.value)


def _check_yaml_depth(node: yaml.Node | None, path: Path) -> None:
    """Refuse block-style YAML nested deeper than ``bounded.MAX_DEPTH`` (no brackets to count)."""
    stack = [(node, 1)] if node is not None else []
    while stack:
        cur, depth = stack.pop()
        if depth > bounded.MAX_DEPTH:
            raise InputError(f"nested deeper than {bounded.MAX_DEPTH} levels; refused", file=path,
                             line=cur.start_mark.line + 1)
        if isinstance(cur, yaml.MappingNode):
            stack.extend((v, depth + 1) for _, v in cur.value)
        elif isinstance(cur, yaml.SequenceNode):
            stack.extend((v, depth + 1) for v in cur.value)


def read_structured(path: str | Path) -> Any:
    """Parse a JSON or YAML file (JSON by suffix ``.json``, else YAML, which reads JSON too).

    Raises:
        InputError: the file cannot be read or parsed (naming the file and the line).
    """
    path = Path(path)
    text = bounded.read_text(path, max_bytes=4 * MAX_META_CHARS)  # regular file, size, UTF-8
    kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
    if len(text) > MAX_META_CHARS:
        raise InputError(f"the file is {len(text)} characters; a metadata file is at most "
                         f"{MAX_META_CHARS}", file=path, line=1)
    bounded.check_depth(text, file=path)
    try:
        if kind == "JSON":
            return json.loads(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except (ValueError, yaml.YAMLError) as exc:
        raise InputError(f"not valid {kind}: {_one_line(exc)}", file=path,
                         line=_parse_error_line(exc) or 1) from None
    except (RecursionError, MemoryError):
        raise InputError(f"not valid {kind}: nested too deeply; refused", file=path) from None
    _check_yaml_size(node, path)
    _check_yaml_depth(node, path)
    try:
        return yaml.safe_load(text)
    except (RecursionError, MemoryError):
        raise InputError(f"not valid {kind}: nested too deeply; refused", file=path) from None
    except (ValueError, yaml.YAMLError) as exc:
        raise InputError(f"not valid {kind}: {_one_line(exc)}", file=path,
                         line=_parse_error_line(exc) or 1) from None


def load_meta_file(path: str | Path) -> dict[str, Any]:
    """Load a flat metadata mapping from a JSON or YAML file.

    Args:
        path: a ``.json``, ``.yaml`` or ``.yml`` file holding one mapping.

    Returns:
        The mapping (keys as strings).

    Raises:
        InputError: unreadable or unparsable file, or a document that is not a mapping.
    """
    data = read_structured(path)
    if not isinstance(data, Mapping):
        got = "nothing" if data is None else type(data).__name__
        raise InputError(f"expected a mapping of column names to values, got {got}",
                         file=path, line=1)
    return {str(k): v for k, v in data.items()}
