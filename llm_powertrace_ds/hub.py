"""Resolve ``DIR_OR_REPO`` arguments: a local dataset folder, or a Hub dataset repo id."""

from __future__ import annotations

import re
from pathlib import Path

from . import layout
from .errors import InputError

REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def resolve_dataset(dir_or_repo: str | Path) -> Path:
    """Return a local folder holding the dataset.

    A path that exists is used as it is (it must contain ``data/``); ``org/name`` that is not a
    local path is downloaded with ``huggingface_hub.snapshot_download(repo_type="dataset")``
    (``HF_HUB_OFFLINE`` is respected by ``huggingface_hub``).

    Raises:
        InputError: neither a dataset folder nor a repo id, or the download failed.
    """
    path = Path(dir_or_repo)
    if path.exists():
        if not path.is_dir() or not layout.data_root(path).is_dir():
            raise InputError(f"'{path}' is not a dataset folder (no data/ inside)",
                             field="DIR_OR_REPO")
        return path
    if REPO_ID_RE.match(str(dir_or_repo)):
        from huggingface_hub import snapshot_download

        try:
            return Path(snapshot_download(str(dir_or_repo), repo_type="dataset"))
        except Exception as exc:  # network, auth, missing repo: one line for the user
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise InputError(f"cannot download dataset repo {str(dir_or_repo)!r}: "
                             f"{type(exc).__name__}: {first}", field="DIR_OR_REPO") from None
    raise InputError(f"'{dir_or_repo}' is neither a dataset folder nor a Hub repo id (org/name)",
                     field="DIR_OR_REPO")
