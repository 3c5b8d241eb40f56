"""The one bounded reader for structured files from users (JSON, YAML, text).

Every ``--meta`` file, sweep file, summary, request log and limits file goes through here:

* a **regular file** only — a FIFO would hang, ``/dev/zero`` would read until memory runs out,
  a folder is a mistake: each is a one-line error before anything is read;
* a **size cap** (:data:`MAX_BYTES` unless the caller gives its own), checked on the file's size
  and again while reading (a file that grows is cut off, not followed);
* **UTF-8** text, or a one-line error naming the byte;
* a **depth cap** (:data:`MAX_DEPTH` levels of nesting) — checked on the text before parsing, so
  a 100,000-deep document never reaches the recursive parser — and a node cap for YAML aliases
  (:mod:`llm_powertrace_ds.importers.meta_files`).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import InputError

MAX_BYTES = 8 << 20
"""Default largest structured file read (8 MiB): far above any metadata or summary."""
MAX_DEPTH = 64
"""Most levels of nesting (objects and lists) a structured file may have."""


def check_regular(path: str | Path, *, field: str | None = None) -> os.stat_result:
    """``stat`` of ``path``, refusing anything but a regular file with a one-line error."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError("no such file", file=p, field=field) from None
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", file=p,
                         field=field) from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device or special file")
        raise InputError(f"is {kind}, not a regular file; refused", file=p, field=field)
    return st


def read_bytes(path: str | Path, *, max_bytes: int = MAX_BYTES,
               field: str | None = None) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` bytes (one-line errors otherwise).

    For a caller that decodes the bytes itself; :func:`read_text` is this plus UTF-8.
    """
    p = Path(path)
    st = check_regular(p, field=field)
    if st.st_size > max_bytes:
        raise InputError(f"the file is {st.st_size} bytes; at most {max_bytes} are read",
                         file=p, field=field)
    try:
        with p.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", file=p,
                         field=field) from None
    if len(data) > max_bytes:
        raise InputError(f"the file grew past {max_bytes} bytes while read", file=p, field=field)
    return data


def read_text(path: str | Path, *, max_bytes: int = MAX_BYTES, field: str | None = None,
              encoding: str = "utf-8-sig") -> str:
    """The text of a regular file of at most ``max_bytes`` bytes (one-line errors otherwise)."""
    p = Path(path)
    data = read_bytes(p, max_bytes=max_bytes, field=field)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", file=p,
                         line=data[:exc.start].count(b"\n") + 1, field=field) from None


def nesting_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` brackets in ``text`` outside JSON strings.

    A cheap bound, computed before any recursive parser sees the text.
    """
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in "]}":
            depth -= 1
    return deepest


def check_depth(text: str, *, file: str | Path, max_depth: int = MAX_DEPTH,
                field: str | None = None) -> None:
    """Refuse text nested deeper than ``max_depth`` (before parsing it)."""
    if nesting_depth(text) > max_depth:
        raise InputError(f"nested deeper than {max_depth} levels; refused", file=file,
                         field=field)


def check_yaml_depth(text: str, *, file: str | Path, max_depth: int = MAX_DEPTH,
                     field: str | None = None) -> None:
    """Refuse YAML nested deeper than ``max_depth`` (before any recursive composer sees it).

    Block style (``- - - x`` or indented mappings) has no brackets for :func:`nesting_depth` to
    count, so this walks the parser's event stream, which PyYAML builds without recursion, and
    stops at the first start event past the cap.

    Raises:
        InputError: too deep, naming the line where the cap is passed.
        yaml.YAMLError: the text is not YAML (left to the caller, which names its own line).
    """
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > max_depth:
                line = event.start_mark.line + 1 if event.start_mark is not None else None
                raise InputError(f"nested deeper than {max_depth} levels; refused", file=file,
                                 line=line, field=field)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def read_json(path: str | Path, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
              field: str | None = None) -> Any:
    """Parse a JSON file through every bound above."""
    p = Path(path)
    text = read_text(p, max_bytes=max_bytes, field=field)
    check_depth(text, file=p, max_depth=max_depth, field=field)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc.msg})", file=p, line=exc.lineno, field=field) from None
    except (RecursionError, MemoryError):
        raise InputError("nested too deeply to parse; refused", file=p, field=field) from None
