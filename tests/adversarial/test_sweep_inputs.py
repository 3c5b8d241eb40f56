"""Adversarial sweep files (issue 12, items 1, 17, 18; issue 33, case 25), one table row per file.

``generate --dry-run`` refuses each one up front with the line and field of the problem, before
any allocation or measurement.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

VALUES = ", ".join(str(i + 1) for i in range(100))
BOMB = 'base: {}\nx0: &x0 ["a","a","a","a","a","a","a","a","a","a"]\n' + "".join(
    f"x{i + 1}: &x{i + 1} [{', '.join([f'*x{i}'] * 10)}]\n" for i in range(6))


@dataclass
class Case:
    name: str
    text: bytes
    line: int
    field: str
    message: str


def case(name: str, body: str, line: int, field: str, message: str) -> Case:
    return Case(name, f"name: adv\nworkload: inference\n{body}".encode(), line, field, message)


CASES = [
    case("1e8-point grid", f"grid:\n  concurrency: [{VALUES}]\n  num_requests: [{VALUES}]\n"
         f"  prompt_len: [{VALUES}]\n  output_len: [{VALUES}]\n", 4, "grid",
         "the sweep expands to 100000000 runs"),
    case("repeats 1e9", "repeats: 1e9\n", 3, "repeats", "1000000000.0 must be <= 1000"),
    case("idle_before_s .nan", "idle_before_s: .nan\n", 3, "idle_before_s",
         "nan is not a finite number"),
    case("idle_after_s .inf", "idle_after_s: .inf\n", 3, "idle_after_s", "inf is not a finite number"),
    case("idle_w above max_w", "sampler: {source: cpu_proxy, idle_w: 500, max_w: 10}\n", 3,
         "sampler.idle_w", "idle_w 500 must be below max_w 10"),
    case("period .nan", "sampler: {period_ms: .nan}\n", 3, "sampler.period_ms",
         "nan must be a finite number > 0"),
    case("grid_region is user@host", "grid_region: alice@gpu-node-17\n", 3, "grid_region",
         "'alice@gpu-node-17' looks like an e-mail address or user@host"),
    case("description holds a path", "description: measured in /home/alice/runs\n", 3,
         "description", "'measured in /home/alice/runs' looks like a file path"),
    case("ESC in the description", "description: \"run \\e[2J\"\n", 3, "description",
         "'run \\x1b[2J' holds a control character"),
    Case("non-UTF-8 byte", b"name: adv\nworkload: inference\ndescription: caf\xe9\n", 3, "<file>",
         "not UTF-8 text (byte 0xe9"),
    case("YAML alias bomb", BOMB, 4, "<yaml>",
         "the file expands to more than 100000 values"),
    case("flow nested 100,000 deep", "base: {x: " + "[" * 100_000 + "]" * 100_000 + "}\n", 3,
         "<yaml>", "nested deeper than 64 levels; refused"),
    case("block nested 100,000 deep", "base:\n  x:\n    " + "- " * 100_000 + "1\n", 5, "<yaml>",
         "nested deeper than 64 levels; refused"),
    case("block mappings nested 100 deep", "base:\n" + "".join(
        f"{'  ' * (i + 1)}k{i}:\n" for i in range(100)) + "  " * 101 + "1\n", 67, "<yaml>",
        "nested deeper than 64 levels; refused"),
]


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_dry_run_refuses_up_front(c, tmp_path, cli):
    path = tmp_path / "sweep.yaml"
    path.write_bytes(c.text)
    res = cli(["generate", path, "--out", tmp_path / "ds", "--dry-run"])
    assert res.rc == 1
    assert f"error: '{path}'" in res.err
    assert f"line {c.line}, field '{c.field}': {c.message}" in res.err, res.err
    assert len(res.err) < 2500
    assert not (tmp_path / "ds" / "data").exists()


def test_a_big_but_bounded_sweep_still_plans(tmp_path, cli):
    """The bounds refuse absurd sizes, not real campaigns (the control case)."""
    path = tmp_path / "sweep.yaml"
    path.write_text("name: ok\nworkload: inference\nrepeats: 3\nidle_before_s: 1.5\n"
                    "grid:\n  concurrency: [1, 2, 4, 8]\n  num_requests: [8, 16]\n")
    res = cli(["generate", path, "--out", tmp_path / "ds", "--dry-run"])
    assert res.rc == 0, res.err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_sweep_that_is_not_a_regular_file_is_refused_before_a_byte_is_read(tmp_path, kind):
    """A FIFO would hang the reader and ``/dev/zero`` would read until memory runs out.

    Run in a child process with a time and memory bound, so a reader without the bound fails
    this test instead of hanging or exhausting the machine.
    """
    if kind == "fifo":
        sweep = tmp_path / "sweep.yaml"
        os.mkfifo(sweep)
    else:
        sweep = Path("/dev/zero")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
            "from llm_powertrace_ds.cli import main; sys.exit(main(sys.argv[1:]))")
    try:
        res = subprocess.run([sys.executable, "-c", code, "generate", str(sweep), "--out",
                              str(tmp_path / "ds"), "--dry-run"],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading the sweep {kind} did not return within 60 s")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr and "unexpected" not in res.stderr, res.stderr
    assert f"error: '{sweep}'" in res.stderr, res.stderr
    assert "not a regular file; refused" in res.stderr, res.stderr
    assert not (tmp_path / "ds").exists()
