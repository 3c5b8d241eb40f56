"""Resumable downloads checked against their recipe: size and SHA-256, or nothing is kept.

A file is fetched into a hidden ``.<name>.part`` beside its destination. When the transfer
breaks, the part stays and the error says so; the next call asks the server for the rest
(``Range: bytes=<have>-``) and appends it — or starts over when the server answers the whole
file (200) instead of the rest (206). A finished part is checked against the recipe's size and
SHA-256 before it is renamed into place; a mismatch removes it and names the URL, the expected
and the actual digest. A part that grows beyond the recipe's size (or the cap, for an unpinned
file) is stopped there.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..errors import PowerTraceError
from .recipes import RemoteFile

CHUNK_BYTES = 1 << 20
TIMEOUT_S = 60.0
USER_AGENT = "llm-powertrace-get"


class DownloadError(PowerTraceError, OSError):
    """A download that failed; its message names the URL."""


class DownloadInterrupted(DownloadError):
    """The transfer broke; the part is kept and the next call resumes it."""


class ChecksumMismatch(PowerTraceError, ValueError):
    """The bytes are not the recipe's (size or SHA-256); nothing was kept."""


@dataclass(frozen=True)
class Fetched:
    """A file in place: where, its size and SHA-256, and whether the recipe pinned them."""

    path: Path
    size_bytes: int
    sha256: str
    pinned: bool
    resumed: bool


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file (1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def part_path(dest: Path) -> Path:
    """The hidden partial file of ``dest``."""
    return dest.with_name(f".{dest.name}.part")


def _check(remote: RemoteFile, path: Path) -> str:
    size = path.stat().st_size
    if remote.size_bytes is not None and size != remote.size_bytes:
        path.unlink()
        raise ChecksumMismatch(f"{remote.url}: {size} bytes, the recipe says "
                               f"{remote.size_bytes}; the download was removed")
    digest = sha256_of(path)
    if remote.sha256 is not None and digest != remote.sha256:
        path.unlink()
        raise ChecksumMismatch(f"{remote.url}: SHA-256 {digest} is not the recipe's "
                               f"{remote.sha256}; the download was removed")
    return digest


def fetch(remote: RemoteFile, dest: Path, *, max_bytes: int, timeout_s: float = TIMEOUT_S
          ) -> Fetched:
    """Download ``remote`` to ``dest`` (resuming a part left by an earlier call).

    Args:
        remote: the file, with its size and SHA-256 when pinned.
        dest: where it goes (its folder is created).
        max_bytes: largest size accepted for an unpinned file.
        timeout_s: socket timeout.

    Returns:
        The file in place. A ``dest`` that already holds the pinned bytes is not fetched again.

    Raises:
        DownloadInterrupted: the transfer broke; run again to resume.
        DownloadError: the server refused (HTTP error) or cannot be reached.
        ChecksumMismatch: size or SHA-256 differ from the recipe's (nothing kept).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_file() and remote.pinned and dest.stat().st_size == remote.size_bytes \
            and sha256_of(dest) == remote.sha256:
        return Fetched(dest, dest.stat().st_size, str(remote.sha256), True, False)
    limit = remote.size_bytes if remote.size_bytes is not None else max_bytes
    part = part_path(dest)
    have = part.stat().st_size if part.is_file() else 0
    if have > limit:
        part.unlink()
        have = 0
    resumed = False
    if have < limit or remote.size_bytes is None:
        resumed = _transfer(remote, part, have, limit, timeout_s)
    digest = _check(remote, part)
    os.replace(part, dest)
    return Fetched(dest, dest.stat().st_size, digest, remote.pinned, resumed)


def _transfer(remote: RemoteFile, part: Path, have: int, limit: int, timeout_s: float) -> bool:
    """Append the rest of the file to ``part``; return whether the server resumed it."""
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(remote.url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout_s)  # noqa: S310 (http(s) only: recipes check the scheme)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have and have == remote.size_bytes:
            return True  # the part is whole already: the checks decide
        raise DownloadError(f"{remote.url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DownloadError(f"{remote.url}: cannot connect ({reason})") from None
    with response:
        resumed = have > 0 and response.status == 206
        if have and not resumed:
            have = 0  # the server sent the whole file: start over
        elif resumed:
            start = (response.headers.get("Content-Range") or "").split(" ")[-1].split("-")[0]
            if start != str(have):
                raise DownloadError(f"{remote.url}: asked for bytes {have}- but got "
                                    f"{response.headers.get('Content-Range')!r}")
        written = have
        too_big = False
        with open(part, "ab" if resumed else "wb") as out:
            try:
                while True:
                    block = response.read(CHUNK_BYTES)
                    if not block:
                        break
                    written += len(block)
                    if written > limit:
                        too_big = True
                        break
                    out.write(block)
            except (OSError, http.client.HTTPException) as exc:
                out.flush()
                raise DownloadInterrupted(
                    f"{remote.url}: download interrupted after {written} of "
                    f"{remote.size_bytes if remote.size_bytes is not None else '?'} bytes "
                    f"({type(exc).__name__}); run the same command again to resume") from None
    if too_big:
        part.unlink()
        what = "the recipe's size" if remote.size_bytes is not None else "the cap"
        raise ChecksumMismatch(f"{remote.url}: more than {limit} bytes ({what}); stopped and "
                               "removed")
    if remote.size_bytes is not None and written < remote.size_bytes:
        raise DownloadInterrupted(f"{remote.url}: download interrupted after {written} of "
                                  f"{remote.size_bytes} bytes (the server closed the "
                                  "transfer); run the same command again to resume")
    return resumed


__all__ = ["ChecksumMismatch", "DownloadError", "DownloadInterrupted", "Fetched", "fetch",
           "part_path", "sha256_of"]
