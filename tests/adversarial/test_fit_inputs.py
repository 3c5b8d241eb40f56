"""A fit file handed to ``predict`` or ``plot --fit`` goes through the bounded reader (issue 33, 25).

Each hostile file is one line naming it, exit 1; a FIFO or ``/dev/zero`` is refused before a byte
is read (a child process with a time and memory bound runs them, so an unbounded reader fails
the test instead of hanging).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
         "from llm_powertrace_ds.cli import main; sys.exit(main(sys.argv[1:]))")


def _fit_file(tmp_path: Path, kind: str) -> Path:
    if kind == "fifo":
        path = tmp_path / "fit.json"
        os.mkfifo(path)
        return path
    if kind == "dev-zero":
        return Path("/dev/zero")
    path = tmp_path / "fit.json"
    if kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    elif kind == "not-utf8":
        path.write_bytes(b'{"format": "caf\xe9"}')
    else:  # a list, not an object
        path.write_text("[1, 2]", encoding="utf-8")
    return path


@pytest.mark.parametrize(("kind", "message"), [
    ("deep", "nested deeper than 64 levels; refused"),
    ("not-utf8", "not UTF-8 text"),
    ("list", "a fit file is a JSON object"),
    ("fifo", "is a FIFO, not a regular file; refused"),
    ("dev-zero", "is a device or special file, not a regular file; refused"),
])
@pytest.mark.parametrize("command", ["predict", "plot"])
def test_a_hostile_fit_file_is_one_line_naming_it(tmp_path, kind, message, command):
    fit = _fit_file(tmp_path, kind)
    args = (["predict", fit, "--set", "N=1e9"] if command == "predict"
            else ["plot", "--fit", fit, "--out", tmp_path / "fit.png"])
    try:
        res = subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], capture_output=True,
                             text=True, timeout=60, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading the fit {kind} did not return within 60 s")
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert res.returncode == 1, res.stderr
    assert len(errors) == 1 and errors[0].startswith(f"error: '{fit}'"), res.stderr
    assert message in errors[0], res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "fit.png").exists()
