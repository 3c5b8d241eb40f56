"""Adversarial dataset folders (issue 12, items 5, 6, 7, 11, 19 and the stale-cache note).

Each case builds a real folder with ``publish_run``, breaks it the way a careless user or an
attacker would, and runs the real commands (``pack``, ``validate``, ``upload.py --dry-run``)
against it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from datasets import load_dataset

from cards.builder import refresh_card
from llm_powertrace_ds import layout, shards

from .conftest import tree_hash, visible_files

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """upload.py's dry run, hermetic: offline, its temp files and the datasets cache in tmp."""
    import datasets

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))


def upload_dry_run(root: Path, *extra: str) -> int:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import upload

    return upload.main([str(root), "--repo-id", "org/name", "--dry-run", *extra])


def folder(root: Path, make_run, *run_ids: str) -> Path:
    for i, run_id in enumerate(run_ids or ("ft-1",)):
        shards.publish_run(root, make_run(run_id, n=40, seed=i), refresh_card=False)
    refresh_card(root)
    return root


def proxy_run(make_run, run_id: str = "proxy-1"):
    run = make_run(run_id, platform="cpu_proxy", family="gpt2", devices=1, n=40,
                   sampler="cpu_proxy", power_field="cpu_proxy_model")
    run.devices[0].gpu_name = "cpu_proxy"
    return run


# -- 5 and 19: what is not a regular file at its place is refused, by name --------------------

def _symlink_outside(root: Path, tmp_path: Path, make_run) -> str:
    other = folder(tmp_path / "elsewhere", make_run, "secret")
    target = next((other / "data" / "finetune").rglob("*.arrow"))
    link = root / "data" / "finetune" / "l40s" / "llama" / "evil.arrow"
    link.symlink_to(target)
    return "data/finetune/l40s/llama/evil.arrow"


def _stray_file(root: Path, tmp_path: Path, make_run) -> str:
    shutil.copyfile(next((root / "data" / "finetune").rglob("*.arrow")), root / "data" / "x.arrow")
    return "data/x.arrow"


def _symlinked_folder(root: Path, tmp_path: Path, make_run) -> str:
    other = folder(tmp_path / "elsewhere", make_run, "secret")
    (root / "data" / "finetune" / "l40s" / "qwen").symlink_to(other / "data/finetune/l40s/llama")
    return "data/finetune/l40s/qwen"


def _fifo(root: Path, tmp_path: Path, make_run) -> str:
    os.mkfifo(root / "data" / "finetune" / "l40s" / "llama" / "pipe.arrow")
    return "data/finetune/l40s/llama/pipe.arrow"


BREAKS = {
    "symlinked shard pointing outside": (_symlink_outside, "a symlink"),
    "symlinked family folder": (_symlinked_folder, "a symlink"),
    "stray data/x.arrow": (_stray_file, "only folders belong directly in data/"),
    "a FIFO named like a shard": (_fifo, "not a regular file"),
}


@pytest.mark.parametrize("command", ["pack", "validate", "upload"])
@pytest.mark.parametrize("name", list(BREAKS))
def test_bad_entries_are_refused_by_name(name, command, tmp_path, make_run, cli, offline,
                                         capsys):
    root = folder(tmp_path / "ds", make_run)
    breaker, reason = BREAKS[name]
    rel = breaker(root, tmp_path, make_run)
    before = tree_hash(root)
    if command == "upload":
        assert upload_dry_run(root) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err
    else:
        args = ["pack", root, "--out", tmp_path / "packed"] if command == "pack" else \
            ["validate", root]
        res = cli(args)
        assert res.rc == 1
        err = res.error_line if command == "pack" else res.out
    assert f"'{rel}'" in err and reason in err
    assert not (tmp_path / "packed").exists()
    assert tree_hash(root) == before


# -- 6: a dry run changes nothing ----------------------------------------------------------------

def test_dry_run_leaves_the_folder_byte_for_byte(tmp_path, make_run, offline):
    root = folder(tmp_path / "ds", make_run, "ft-1", "ft-2")
    (root / "README.md").write_text("---\nlicense: mit\n---\nhand-written card\n")
    figures = root / "figures"
    figures.mkdir(exist_ok=True)
    (figures / "trace-old-run.png").write_bytes(b"\x89PNG not produced by this version")
    before = tree_hash(root)
    assert upload_dry_run(root) == 0
    assert tree_hash(root) == before


# -- 7: cpu_proxy data is found in the trace files themselves ------------------------------------

def test_proxy_trace_without_runs_row_is_seen(tmp_path, make_run, cli, offline, capsys):
    root = folder(tmp_path / "gpu", make_run)
    other = tmp_path / "proxy"
    shards.publish_run(other, proxy_run(make_run), refresh_card=False)
    trace = next((other / "data" / "finetune").rglob("proxy-1.arrow"))
    dest = root / "data" / "finetune" / "l40s" / "gpt2" / "proxy-1.arrow"
    dest.parent.mkdir(parents=True)
    shutil.copyfile(trace, dest)
    res = cli(["validate", root])
    assert res.rc == 1 and "run proxy-1: trace file without a runs row" in res.out
    assert upload_dry_run(root) == 1
    assert "run proxy-1: trace file without a runs row" in capsys.readouterr().err


def test_proxy_trace_behind_a_gpu_runs_row_needs_allow_proxy(tmp_path, make_run, offline,
                                                             capsys):
    """The runs row says nvml/l40s; the trace file says cpu_proxy: the trace wins."""
    root = tmp_path / "gpu"
    shards.publish_run(root, proxy_run(make_run), refresh_card=False)
    liar = tmp_path / "liar"
    shards.publish_run(liar, make_run("proxy-1", n=40), refresh_card=False)
    shutil.copyfile(next((liar / "data" / "finetune_runs").rglob("proxy-1.arrow")),
                    next((root / "data" / "finetune_runs").rglob("proxy-1.arrow")))
    refresh_card(root)
    assert upload_dry_run(root) == 1
    err = capsys.readouterr().err
    assert "cpu_proxy" in err and "--allow-proxy" in err
    assert upload_dry_run(root, "--allow-proxy") == 0


def test_runs_row_without_trace_is_reported_then_repaired(tmp_path, make_run, cli):
    root = folder(tmp_path / "ds", make_run)
    other = folder(tmp_path / "other", make_run, "ghost")
    runs_file = next((other / "data" / "finetune_runs").rglob("ghost.arrow"))
    shutil.copyfile(runs_file, root / "data" / "finetune_runs" / "l40s" / "ghost.arrow")
    res = cli(["validate", root])
    assert res.rc == 1 and "run ghost: runs row without a trace file" in res.out
    res = cli(["validate", root, "--repair"])
    assert res.rc == 0 and "removed 'data/finetune_runs/l40s/ghost.arrow'" in res.out
    assert cli(["validate", root]).rc == 0


def test_leftover_temp_file_of_a_dead_writer_is_repaired(tmp_path, make_run, cli):
    root = folder(tmp_path / "ds", make_run)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    tmp = root / "data" / "finetune" / "l40s" / "llama" / f".ft-9.arrow.{dead}.tmp"
    tmp.write_bytes(b"half a shard")
    assert cli(["validate", root]).rc == 0  # hidden from every glob: not an error
    res = cli(["validate", root, "--repair"])
    assert res.rc == 0 and f"removed 'data/finetune/l40s/llama/{tmp.name}'" in res.out
    assert not tmp.exists()


# -- 11: a full disk during publish leaves nothing of the run visible ------------------------

DISK_FULL = textwrap.dedent("""
    import resource, signal, sys
    sys.path.insert(0, {tests!r})
    from conftest import synthetic_run
    from llm_powertrace_ds import shards
    from llm_powertrace_ds.errors import ShardError
    run = synthetic_run("big", n=20000, devices=4, seed=3)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
    try:
        shards.publish_run({root!r}, run, refresh_card=False)
    except ShardError as exc:
        print("refused:", exc)
        sys.exit(3)
    sys.exit(0)
""")


def test_full_disk_during_publish_shows_nothing_of_the_run(tmp_path, make_run, cli):
    root = folder(tmp_path / "ds", make_run)
    visible_before = visible_files(root)
    # a file-size limit between the runs row's size and the trace's makes the trace's write
    # fail exactly as a full disk does (EFBIG / ENOSPC from write)
    probe = tmp_path / "probe"
    shards.publish_run(probe, make_run("big", n=20000, devices=4, seed=3), refresh_card=False)
    sizes = {p.parent.parent.name if "_runs" in str(p) else "trace": p.stat().st_size
             for p in (probe / "data").rglob("*.arrow")}
    limit = (sizes["finetune_runs"] + sizes["trace"]) // 2
    assert sizes["finetune_runs"] < limit < sizes["trace"]
    script = DISK_FULL.format(tests=str(REPO / "tests"), limit=limit, root=str(root))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "nothing of the run was published" in proc.stdout
    assert visible_files(root) == visible_before
    assert not [p for p in (root / "data").rglob(".*.tmp")]
    loaded = load_dataset(str(root), "finetune_runs", split="l40s",
                          cache_dir=str(tmp_path / "cache"))
    assert loaded["run_id"] == ["ft-1"]
    assert cli(["validate", root]).rc == 0


# -- datasets' cache keyed on the YAML globs -------------------------------------------------

def test_load_dataset_after_files_changed_sees_the_new_rows(tmp_path, make_run):
    root = tmp_path / "ds"
    cache = str(tmp_path / "cache")
    shards.publish_run(root, make_run("a", n=40))
    first = load_dataset(str(root), "finetune_runs", split="l40s", cache_dir=cache)
    shards.publish_run(root, make_run("a", n=60, seed=5))  # same path, new content
    replaced = load_dataset(str(root), "finetune_runs", split="l40s", cache_dir=cache)
    assert replaced["energy_j"] != first["energy_j"]
    shards.publish_run(root, make_run("b", n=40, seed=6))  # one more file under the same glob
    grown = load_dataset(str(root), "finetune_runs", split="l40s", cache_dir=cache)
    assert sorted(grown["run_id"]) == ["a", "b"]
    assert layout.files_fingerprint({}) == layout.files_fingerprint({})


def test_out_of_range_samples_from_any_source_are_flagged(tmp_path, make_run, cli):
    """Item 9 for runs that do not come through an importer: flagged ``implausible_value``."""
    import numpy as np

    run = make_run("hot", n=40)
    run.devices[0].signals["power_w"][5] = 99_999.0
    run.devices[1].signals["gpu_util_pct"] = np.full(40, 500.0)
    shards.publish_run(tmp_path, run, refresh_card=False)
    res = cli(["validate", tmp_path, "--format", "json"])
    assert res.rc == 0  # a warning: the measurement is kept, and says what is wrong with it
    import json

    row = json.loads(res.out)[0]
    assert "implausible_value" in row["flags"]
    assert any("power_w sample(s) outside 0..5000" in m for m in row["messages"])
    assert any("gpu_util_pct sample(s) outside 0..100" in m for m in row["messages"])
    bad = make_run("neg", n=40, concurrency=-5, workload="inference")
    with pytest.raises(ValueError, match="field 'concurrency': value -5 is below 1"):
        shards.publish_run(tmp_path, bad, refresh_card=False)
