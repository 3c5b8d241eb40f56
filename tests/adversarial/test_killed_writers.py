"""Killed ``pack`` and ``explore`` writers leave nothing behind (issue 33, case 29).

The next writer into the same place, or ``validate --repair`` on the dataset folder that holds
the leftover, removes it; a live writer's work folder is never touched.

Each writer runs as a real ``llm-powertrace`` process. One function of it is wrapped so that the
process stops at a chosen point while its hidden work folder exists: ``kill`` sends itself
SIGKILL there (no ``finally`` runs, exactly as ``kill -9`` from outside), ``pause`` writes a
ready file and waits, so a second writer runs while the first is alive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llm_powertrace_ds import shards

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, signal, sys, time
from pathlib import Path

mode, point, ready = sys.argv[1], sys.argv[2], Path(sys.argv[3])
stopped = []


def stop():
    if stopped:
        return
    stopped.append(1)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    ready.write_text(str(os.getpid()))
    while True:  # paused until the test kills it
        time.sleep(0.05)


if point == "pack-shard":  # after pack wrote its first shard into the work folder
    import llm_powertrace_ds.shards.pack
    mod = sys.modules["llm_powertrace_ds.shards.pack"]
    real_write = mod.write_batches_atomic

    def write(*args, **kwargs):
        n = real_write(*args, **kwargs)
        stop()
        return n

    mod.write_batches_atomic = write
elif point == "explore-written":  # the whole site is in the work folder, not yet renamed
    from llm_powertrace_ds.explore import site
    real_bytes = site._folder_bytes

    def folder_bytes(path):
        stop()
        return real_bytes(path)

    site._folder_bytes = folder_bytes
elif point == "explore-swap":  # the previous site moved aside, the new one not yet in place
    real_rename = Path.rename

    def rename(self, target):
        out = real_rename(self, target)
        if ".old-" in Path(target).name:
            stop()
        return out

    Path.rename = rename
from llm_powertrace_ds.cli import main
sys.exit(main(sys.argv[4:]))
"""


def _child(mode: str, point: str, ready: Path, args: list) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LLM_POWERTRACE_CARD_FIGURES": "0"}
    return subprocess.Popen([sys.executable, "-c", CHILD, mode, point, str(ready),
                             *map(str, args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _killed(point: str, tmp_path: Path, args: list) -> None:
    proc = _child("kill", point, tmp_path / "ready", args)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err


def _paused(point: str, tmp_path: Path, args: list) -> subprocess.Popen:
    ready = tmp_path / "ready"
    proc = _child("pause", point, ready, args)
    deadline = time.monotonic() + 300
    while not ready.exists():
        if proc.poll() is not None:
            pytest.fail(f"the writer ended before pausing: {proc.communicate()[1]}")
        assert time.monotonic() < deadline, "the writer never reached its pause"
        time.sleep(0.05)
    return proc


def _hidden(parent: Path, target: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{target}."))


def _folder(root: Path, make_run) -> Path:
    shards.publish_run(root, make_run("ft-1", n=400), refresh_card=False)
    shards.publish_run(root, make_run("ft-2", n=400, seed=2), refresh_card=False)
    shards.publish_run(root, make_run("inf-1", workload="inference", family="qwen", n=400,
                                      seed=1, with_requests=True), refresh_card=False)
    return root


def _totals(root: Path) -> dict[str, int]:
    """Rows per data folder (``data/<config>/<split>[/<family>]``), summed over its files."""
    out: dict[str, int] = {}
    for path in sorted((root / "data").rglob("*.arrow")):
        folder = path.relative_to(root).parent.as_posix()
        out[folder] = out.get(folder, 0) + shards.count_rows(path)
    return out


# ---- pack -------------------------------------------------------------------------------------

def test_a_killed_pack_leaves_nothing_once_pack_runs_again(tmp_path, make_run, cli):
    src = _folder(tmp_path / "ds", make_run)
    _killed("pack-shard", tmp_path, ["pack", src, "--out", tmp_path / "packed"])
    left = _hidden(tmp_path, "packed")
    assert left and left[0].startswith(".packed.packing-"), "the case is not exercised"
    assert not (tmp_path / "packed").exists()
    res = cli(["pack", src, "--out", tmp_path / "packed"])
    assert res.rc == 0, res.err
    assert _hidden(tmp_path, "packed") == []
    assert _totals(tmp_path / "packed") == _totals(src)


def test_a_live_packs_work_folder_is_left_alone(tmp_path, make_run, cli):
    src = _folder(tmp_path / "ds", make_run)
    live = _paused("pack-shard", tmp_path, ["pack", src, "--out", tmp_path / "packed"])
    try:
        before = _hidden(tmp_path, "packed")
        assert len(before) == 1
        files = sorted(p.relative_to(tmp_path) for p in (tmp_path / before[0]).rglob("*"))
        assert files
        res = cli(["pack", src, "--out", tmp_path / "packed"])  # the same place, meanwhile
        assert res.rc == 0, res.err
        assert _hidden(tmp_path, "packed") == before
        assert sorted(p.relative_to(tmp_path) for p in (tmp_path / before[0]).rglob("*")) == files
    finally:
        live.kill()
        live.communicate(timeout=60)
    res = cli(["pack", src, "--out", tmp_path / "other"])  # another target: not its leftover
    assert res.rc == 0, res.err
    assert _hidden(tmp_path, "packed") == before
    res = cli(["pack", src, "--out", tmp_path / "packed"])  # its writer is dead now
    assert res.rc == 1 and "exists and is not empty" in res.error_line
    assert _hidden(tmp_path, "packed") == []


# ---- explore ----------------------------------------------------------------------------------

def _site_runs(site: Path) -> int:
    return json.loads((site / "site.json").read_text(encoding="utf-8"))["runs"]


@pytest.fixture
def bokeh():
    pytest.importorskip("bokeh")


def test_a_killed_explore_leaves_nothing_once_explore_runs_again(tmp_path, make_run, cli, bokeh):
    root = _folder(tmp_path / "ds", make_run)
    _killed("explore-written", tmp_path, ["explore", root, "--out", tmp_path / "site"])
    left = _hidden(tmp_path, "site")
    assert left and left[0].startswith(".site.tmp-"), "the case is not exercised"
    res = cli(["explore", root, "--out", tmp_path / "site"])
    assert res.rc == 0, res.err
    assert _hidden(tmp_path, "site") == []
    assert _site_runs(tmp_path / "site") == 3


def test_an_explore_killed_during_its_swap_gets_the_previous_site_back(tmp_path, make_run, cli,
                                                                       bokeh):
    root = _folder(tmp_path / "ds", make_run)
    assert cli(["explore", root, "--out", tmp_path / "site"]).rc == 0
    _killed("explore-swap", tmp_path, ["explore", root, "--out", tmp_path / "site"])
    assert not (tmp_path / "site").exists()
    assert any(n.startswith(".site.old-") for n in _hidden(tmp_path, "site")), \
        "the case is not exercised"
    res = cli(["explore", root, "--out", tmp_path / "site"])
    assert res.rc == 0, res.err
    assert _hidden(tmp_path, "site") == []
    assert _site_runs(tmp_path / "site") == 3


def test_a_live_explores_work_folder_is_left_alone(tmp_path, make_run, cli, bokeh):
    root = _folder(tmp_path / "ds", make_run)
    live = _paused("explore-written", tmp_path, ["explore", root, "--out", tmp_path / "site"])
    try:
        before = _hidden(tmp_path, "site")
        assert len(before) == 1 and before[0].startswith(".site.tmp-")
        res = cli(["explore", root, "--out", tmp_path / "site"])
        assert res.rc == 0, res.err
        assert _hidden(tmp_path, "site") == before
        assert (tmp_path / before[0] / "data" / "catalog.js").is_file()
    finally:
        live.kill()
        live.communicate(timeout=60)


# ---- validate --repair ------------------------------------------------------------------------

@pytest.mark.parametrize("writer", ["pack", "explore"])
def test_validate_repair_removes_a_killed_writers_work_folder_inside_the_dataset(
        tmp_path, make_run, cli, writer):
    if writer == "explore":
        pytest.importorskip("bokeh")
    root = _folder(tmp_path / "ds", make_run)
    point = "pack-shard" if writer == "pack" else "explore-written"
    target = root / "extras" / writer
    target.parent.mkdir()
    _killed(point, tmp_path, [writer, root, "--out", target])
    left = _hidden(target.parent, writer)
    assert left, "the case is not exercised"
    res = cli(["validate", root, "--repair", "--format", "json"])
    assert _hidden(target.parent, writer) == []
    assert f"extras/{left[0]}" in res.out + res.err
