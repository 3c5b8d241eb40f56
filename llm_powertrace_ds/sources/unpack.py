"""Unpacking downloaded archives without trusting them.

``safe_unpack`` accepts ``.tar`` (plain, gzip, bzip2, xz) and ``.zip`` archives and refuses,
before writing anything, an archive with a member that:

- has an absolute name, a drive letter or a ``..`` part (it would land outside the folder);
- is a symbolic or hard link, a device or a FIFO (only files and folders are unpacked);
- makes the declared total exceed the cap, or the member count exceed its cap.

It then writes every file into a hidden temporary folder, counting the bytes actually written
(a zip's declared sizes can lie), and renames the folder into place only when all is done; a
refusal leaves nothing behind. Errors name the archive and the member.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, Any

from ..errors import PowerTraceError

MAX_MEMBERS = 200_000
CHUNK_BYTES = 1 << 20


class UnsafeArchive(PowerTraceError, ValueError):
    """An archive that would write outside its folder, a link or device, or too much."""


def _member_path(archive: Path, name: str) -> PurePosixPath:
    clean = name.replace("\\", "/")
    p = PurePosixPath(clean)
    if not clean or p.is_absolute() or ".." in p.parts or (len(clean) > 1 and clean[1] == ":"):
        raise UnsafeArchive(f"'{archive}': member {name!r} would be written outside the "
                            "folder; refused, nothing unpacked")
    return p


Member = tuple[PurePosixPath, bool, int, Any]
"""(path, is a folder, declared size, the archive's own member object)."""


def _plan(archive: Path) -> tuple[str, list[Member]]:
    """``(kind, [(path, is_dir, declared size, member)])`` after the per-member checks."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            out: list[Member] = []
            for info in zf.infolist():
                path = _member_path(archive, info.filename)
                kind = stat.S_IFMT(info.external_attr >> 16)  # 0: no Unix type recorded
                if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                    raise UnsafeArchive(f"'{archive}': member {info.filename!r} is a link or "
                                        "special file; refused, nothing unpacked")
                out.append((path, info.is_dir(), info.file_size, info))
            return "zip", out
    try:
        with tarfile.open(archive, "r:*") as tf:
            members: list[Member] = []
            for member in tf.getmembers():
                if not (member.isfile() or member.isdir()):
                    what = "link" if member.issym() or member.islnk() else "special file"
                    raise UnsafeArchive(f"'{archive}': member {member.name!r} is a {what}; "
                                        "refused, nothing unpacked")
                members.append((_member_path(archive, member.name), member.isdir(),
                                member.size, member))
            return "tar", members
    except tarfile.TarError as exc:
        raise UnsafeArchive(f"'{archive}': not a tar or zip archive ({exc})") from None


@contextmanager
def _opened(archive: Path, kind: str) -> Iterator[tarfile.TarFile | zipfile.ZipFile]:
    handle: tarfile.TarFile | zipfile.ZipFile = (
        zipfile.ZipFile(archive) if kind == "zip" else tarfile.open(archive, "r:*"))
    try:
        yield handle
    finally:
        handle.close()


def safe_unpack(archive: str | Path, dest: str | Path, *, max_total_bytes: int,
                max_members: int = MAX_MEMBERS) -> list[str]:
    """Unpack ``archive`` into ``dest`` (replacing it) after the checks of the module docstring.

    Args:
        archive: the archive.
        dest: the folder to create (an existing one is replaced when all went well).
        max_total_bytes: cap on the bytes unpacked (declared and actually written).
        max_members: cap on the number of members.

    Returns:
        The relative paths of the files written.

    Raises:
        UnsafeArchive: a refused archive; nothing is left behind.
    """
    archive, dest = Path(archive), Path(dest)
    kind, members = _plan(archive)
    if len(members) > max_members:
        raise UnsafeArchive(f"'{archive}': {len(members)} members (at most {max_members}); "
                            "refused, nothing unpacked")
    declared = sum(size for _, is_dir, size, _ in members if not is_dir)
    if declared > max_total_bytes:
        raise UnsafeArchive(f"'{archive}': unpacks to {declared} bytes (at most "
                            f"{max_total_bytes}); refused, nothing unpacked")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.unpack.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    written = 0
    files: list[str] = []
    try:
        with _opened(archive, kind) as handle:
            for path, is_dir, _, member in members:
                target = tmp.joinpath(*path.parts)
                if is_dir:
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                src: IO[bytes] | None
                if isinstance(handle, zipfile.ZipFile):
                    src = handle.open(member)
                else:
                    src = handle.extractfile(member)
                if src is None:
                    continue
                with src, open(target, "wb") as out:
                    for block in iter(lambda: src.read(CHUNK_BYTES), b""):  # noqa: B023
                        written += len(block)
                        if written > max_total_bytes:
                            raise UnsafeArchive(
                                f"'{archive}': member {str(path)!r} takes the total past "
                                f"{max_total_bytes} bytes; refused, nothing unpacked")
                        out.write(block)
                files.append(path.as_posix())
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return files


__all__ = ["MAX_MEMBERS", "UnsafeArchive", "safe_unpack"]
