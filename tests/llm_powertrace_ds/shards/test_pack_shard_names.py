"""``pack`` names its shards ``<platform>-NNNNN-of-MMMMM.arrow``, MMMMM = the shards written.

The count in the name is the number of shard files in the folder (what a reader of the names
expects), never the number of per-run input files merged into them.
"""

from __future__ import annotations

import re

from llm_powertrace_ds import shards

TRACE_FOLDER = "data/finetune/l40s/llama"
NAME = re.compile(r"^l40s-(\d{5})-of-(\d{5})\.arrow$")


def source_folder(tmp_path, make_run, runs: int):
    src = tmp_path / "src"
    for i in range(runs):
        shards.publish_run(src, make_run(f"r{i}", seed=i), refresh_card=False)
    return src


def shard_names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def test_four_runs_packed_into_one_shard_are_named_one_of_one(tmp_path, make_run):
    src = source_folder(tmp_path, make_run, runs=4)
    dst = tmp_path / "dst"
    res = shards.pack(src, dst)  # the default bound holds the four small runs in one shard
    assert shard_names(dst / TRACE_FOLDER) == ["l40s-00000-of-00001.arrow"]
    assert res.shards[TRACE_FOLDER] == 1


def test_the_count_in_every_name_is_the_number_of_shard_files(tmp_path, make_run):
    src = source_folder(tmp_path, make_run, runs=6)
    sizes = sorted(p.stat().st_size for p in (src / TRACE_FOLDER).glob("*.arrow"))
    # room for two per-run files but not three: three shards from six files
    bound = sizes[-1] + sizes[-2] + 1
    assert bound < sizes[0] + sizes[1] + sizes[2]
    dst = tmp_path / "dst"
    res = shards.pack(src, dst, max_shard_bytes=bound)
    names = shard_names(dst / TRACE_FOLDER)
    parsed = [NAME.match(n) for n in names]
    assert all(parsed), names
    assert len(names) == 3
    assert [int(m.group(1)) for m in parsed if m] == [0, 1, 2]
    assert {int(m.group(2)) for m in parsed if m} == {len(names)}
    assert res.shards[TRACE_FOLDER] == len(names)


def test_every_packed_folder_names_its_own_shard_count(tmp_path, make_run):
    src = source_folder(tmp_path, make_run, runs=3)
    dst = tmp_path / "dst"
    res = shards.pack(src, dst)
    for rel, count in res.shards.items():
        names = shard_names(dst / rel)
        assert len(names) == count, rel
        assert all(n.endswith(f"-of-{count:05d}.arrow") for n in names), (rel, names)
