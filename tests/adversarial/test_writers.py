"""One writer discipline for every writer.

Someone else's README is never replaced, and merge publishes like publish_run: locks,
all-or-nothing, the trace last, no symlinked files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_powertrace_ds import layout, shards
from llm_powertrace_ds.errors import InputError, ShardError
from llm_powertrace_ds.merge import merge

from .conftest import tree_hash

REPO = Path(__file__).resolve().parents[2]
USER_README = "# My project\n\nNotes I wrote myself.\n"


def _log(path: Path) -> Path:
    path.write_text("timestamp, index, name, power.draw [W]\n" + "".join(
        f"2026/01/01 00:00:{s:02d}.000, 0, NVIDIA H100 80GB HBM3, {100 + s} W\n"
        for s in range(10)), encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path):
    """A folder that is not a dataset: the user's own README in it."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text(USER_README, encoding="utf-8")
    (folder / "code.py").write_text("print(1)\n", encoding="utf-8")
    return folder


def test_import_into_a_folder_with_someone_elses_readme_is_refused(cli, tmp_path, project):
    before = tree_hash(project)
    res = cli(["import", "nvidia-smi", _log(tmp_path / "gpu.csv"), "--out", project,
               "--workload", "inference"])
    assert res.rc == 1 and "README.md" in res.error_line and "not a dataset card" in \
        res.error_line
    assert tree_hash(project) == before


def test_merge_into_a_folder_with_someone_elses_readme_is_refused(cli, tmp_path, project,
                                                                  make_run):
    src = tmp_path / "src"
    shards.publish_run(src, make_run("m-1"))
    before = tree_hash(project)
    res = cli(["merge", src, "--into", project])
    assert res.rc == 1 and "README.md" in res.error_line
    assert tree_hash(project) == before


def test_record_into_a_folder_with_someone_elses_readme_is_refused_before_running(tmp_path,
                                                                                   project):
    marker = tmp_path / "ran"
    proc = subprocess.run(
        [sys.executable, "-m", "llm_powertrace_ds.cli", "record", "--out", str(project),
         "--workload", "finetune", "--sampler", "cpu_proxy", "--", sys.executable, "-c",
         f"open({str(marker)!r}, 'w').write('x')"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "README.md" in proc.stderr and not marker.exists()
    assert (project / "README.md").read_text(encoding="utf-8") == USER_README


def test_our_own_cards_old_and_new_are_recognised(tmp_path, make_run):
    from cards.builder import refresh_card

    root = tmp_path / "ds"
    shards.publish_run(root, make_run("r-1"))
    refresh_card(root)
    text = (root / "README.md").read_text(encoding="utf-8")
    assert layout.CARD_MARKER in text and layout.readme_is_ours(root)
    (root / "README.md").write_text(text.replace(layout.CARD_MARKER, ""), encoding="utf-8")
    assert layout.readme_is_ours(root)  # a card from before the marker, in a dataset folder
    shards.publish_run(root, make_run("r-2"))  # and it is still updated
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    (prepared / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# Card\n",
                                        encoding="utf-8")
    assert layout.readme_is_ours(prepared)  # a card prepared by hand for a new dataset


def test_merge_refuses_a_symlinked_data_file(tmp_path, make_run):
    outside = tmp_path / "outside"
    shards.publish_run(outside, make_run("secret"))
    src = tmp_path / "src"
    shards.publish_run(src, make_run("ok-1"))
    target = next(layout.data_root(outside).rglob("secret.arrow"))
    link = layout.data_root(src) / "finetune_runs" / "link" / "secret.arrow"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    dest = tmp_path / "dest"
    with pytest.raises(ShardError, match="symbolic link"):
        merge([src], dest)
    assert not layout.data_root(dest).exists() or not any(
        p.is_file() for p in layout.data_root(dest).rglob("*"))


@pytest.mark.parametrize("failing", ["finetune_runs", "finetune"])
def test_merge_publishes_a_run_all_or_nothing(tmp_path, make_run, monkeypatch, failing):
    """A full disk at the runs row's copy or at the trace's leaves nothing of the run."""
    import shutil

    src = tmp_path / "src"
    shards.publish_run(src, make_run("m-1"))
    dest = tmp_path / "dest"
    real = shutil.copyfile

    def full_disk(a, b, *args, **kw):
        if f"/{failing}/" in str(a):
            raise OSError(28, "No space left on device")
        return real(a, b, *args, **kw)

    monkeypatch.setattr(shutil, "copyfile", full_disk)
    with pytest.raises(OSError):
        merge([src], dest)
    left = [p for p in layout.data_root(dest).rglob("*") if p.is_file()] \
        if layout.data_root(dest).exists() else []
    assert left == []  # no row without its trace, no trace without its row, no temporary copy


def test_merge_renames_the_trace_last(tmp_path, make_run, monkeypatch):
    src = tmp_path / "src"
    shards.publish_run(src, make_run("m-1", workload="inference", platform="h100_sxm_80gb",
                                     with_requests=True))
    order = []
    real = os.replace

    def spy(a, b):
        parts = Path(b).relative_to(tmp_path / "dest").parts
        if parts[0] == "data" and b.name.endswith(".arrow") and not b.name.startswith("."):
            order.append(parts[1])  # shards only (the card's caches live beside them)
        return real(a, b)

    monkeypatch.setattr(os, "replace", spy)
    merge([src], tmp_path / "dest")
    data = [c for c in order if c in ("inference", "inference_runs", "inference_requests")]
    assert data[-1] == "inference", order
    assert set(data) == {"inference", "inference_runs",
                                                     "inference_requests"}


# Each merge pauses after its first file copy until the other merge has copied one too (at most
# 5 s), so both are under way at once: without the folder lock both would plan on an empty
# folder and both copy.
MERGE = ("import shutil, sys, time\nfrom pathlib import Path\n"
         "from llm_powertrace_ds.merge import merge\n"
         "mine, other = Path(sys.argv[3]), Path(sys.argv[4])\nreal = shutil.copyfile\n"
         "def copy_then_meet(*args, **kw):\n"
         "    out = real(*args, **kw)\n"
         "    if not mine.exists():\n"
         "        mine.touch()\n"
         "        deadline = time.monotonic() + 5\n"
         "        while not other.exists() and time.monotonic() < deadline:\n"
         "            time.sleep(0.02)\n"
         "    return out\n"
         "shutil.copyfile = copy_then_meet\n"
         "try:\n    merge([Path(sys.argv[1])], Path(sys.argv[2]))\nexcept Exception as e:\n"
         "    print(type(e).__name__, e, file=sys.stderr); sys.exit(1)\n")


def test_two_merges_into_one_folder_at_once_never_mix_sources(tmp_path, make_run):
    a, b, dest = tmp_path / "a", tmp_path / "b", tmp_path / "dest"
    shards.publish_run(a, make_run("same-id", seed=1))
    shards.publish_run(b, make_run("same-id", seed=2))  # same id, different data
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    marks = [tmp_path / "a-copied", tmp_path / "b-copied"]
    procs = [subprocess.Popen([sys.executable, "-c", MERGE, str(src), str(dest), str(mine),
                               str(other)], env=env, stderr=subprocess.PIPE, text=True)
             for src, mine, other in ((a, *marks), (b, *marks[::-1]))]
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 1], results
    assert any("different data" in err for _, err in results)
    winner = a if results[0][0] == 0 else b
    for config in ("finetune_runs", "finetune"):
        got = next(layout.data_root(dest).glob(f"{config}/**/same-id.arrow"))
        want = next(layout.data_root(winner).glob(f"{config}/**/same-id.arrow"))
        assert got.read_bytes() == want.read_bytes(), config


def test_a_readme_check_error_is_an_input_error_naming_the_file(project):
    with pytest.raises(InputError) as exc:
        layout.check_readme_is_ours(project)
    assert exc.value.file == str(project / "README.md")
