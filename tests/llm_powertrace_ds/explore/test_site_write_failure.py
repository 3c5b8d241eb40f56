"""A site build failing after its temporary folder exists leaves the old site as it was.

The failure is a full disk (``ENOSPC``) while copying the assets, or at the rename that puts
the new site in place after the old one was moved aside. Afterwards the folder holds the
dataset and the old site, nothing hidden.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from conftest import synthetic_run

from llm_powertrace_ds import shards
from llm_powertrace_ds.explore import site as site_mod
from llm_powertrace_ds.explore.site import build_site


def disk_full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def built(tmp_path) -> tuple[Path, Path, dict[str, bytes]]:
    """A dataset, its site built once, and the site's files."""
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("s1", n=300), refresh_card=False)
    out = tmp_path / "site"
    build_site(root, out)
    return root, out, snapshot(out)


def test_a_full_disk_while_copying_assets_leaves_the_old_site(built, monkeypatch):
    root, out, before = built
    monkeypatch.setattr(shutil, "copyfile", disk_full)
    with pytest.raises(OSError, match="No space left"):
        build_site(root, out)
    monkeypatch.undo()
    assert sorted(p.name for p in out.parent.iterdir()) == ["ds", "site"]
    assert snapshot(out) == before


def test_a_failed_rename_into_place_puts_the_old_site_back(built, monkeypatch):
    root, out, before = built
    real_rename = Path.rename

    def new_site_cannot_move(self, target):
        if Path(target) == out and self.name.startswith(f".{out.name}.tmp-"):
            disk_full()
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", new_site_cannot_move)
    with pytest.raises(OSError, match="No space left"):
        site_mod.build_site(root, out)
    monkeypatch.undo()
    assert sorted(p.name for p in out.parent.iterdir()) == ["ds", "site"]
    assert snapshot(out) == before
