"""Helpers of the adversarial suite: the CLI run in-process, tree hashes, a private salt."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Result:
    """Exit code and output of one CLI call."""

    rc: int
    out: str
    err: str

    @property
    def error_line(self) -> str:
        """The ``error: ...`` line (there must be exactly one)."""
        lines = [line for line in self.err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1, self.err
        return lines[0]


@pytest.fixture
def cli(capsys):
    """Run ``llm-powertrace ARGS`` in this process; return its ``Result``."""
    from llm_powertrace_ds.cli import main

    def run(args: Sequence[str | Path]) -> Result:
        capsys.readouterr()
        rc = main([str(a) for a in args])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        return Result(rc, captured.out, captured.err)

    return run


@pytest.fixture(autouse=True)
def private_salt(tmp_path, monkeypatch):
    """Each test gets its own secret salt file (never the user's)."""
    monkeypatch.delenv("LLM_POWERTRACE_SALT", raising=False)
    path = tmp_path / "config" / "salt"
    monkeypatch.setenv("LLM_POWERTRACE_SALT_FILE", str(path))
    return path


def tree_hash(root: Path) -> str:
    """SHA-256 over every path, file mode and file content under ``root`` (symlinks as targets)."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if Path(dirpath, d).is_symlink()]):
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            digest.update(rel.encode() + b"\0")
            if path.is_symlink():
                digest.update(b"link:" + os.readlink(path).encode())
            else:
                mode = path.stat().st_mode
                digest.update(oct(mode).encode())
                if stat.S_ISREG(mode):  # never open a FIFO or a device
                    digest.update(path.read_bytes())
    return digest.hexdigest()


def visible_files(root: Path) -> list[str]:
    """Every file a reader's glob can see under ``data/`` (no hidden name)."""
    data = root / "data"
    if not data.is_dir():
        return []
    return sorted(p.relative_to(root).as_posix() for p in data.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.parts))
