"""The partitioned exact repeated-id check: every group's earliest repeat, whatever the partitions."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds.repeated_ids import IdPartitions, Repeat, id_hash


def _expected(ids: list[str], groups: list[int], before: int | None) -> dict[int, Repeat]:
    """The earliest repeat of each group, by a dict of what each group has seen."""
    seen: dict[tuple[int, str], int] = {}
    out: dict[int, Repeat] = {}
    for row, (rid, group) in enumerate(zip(ids, groups, strict=True)):
        if before is not None and row >= before:
            break
        if (group, rid) in seen and group not in out:
            out[group] = Repeat(rid, row, line=10 * row, first_line=10 * seen[(group, rid)],
                                group=group)
        seen.setdefault((group, rid), row)
    return out


@pytest.mark.parametrize("count", [1, 3, 64])
@pytest.mark.parametrize("before", [None, 150])
def test_every_group_gets_its_earliest_repeat_whatever_the_partition_count(tmp_path, count,
                                                                           before):
    rng = np.random.default_rng(count)
    n = 400
    ids = [f"id-{v}" for v in rng.integers(0, 300, n)]
    groups = np.sort(rng.integers(0, 5, n)).tolist()  # a group's rows are consecutive, as a run's
    parts = IdPartitions(tmp_path, count)
    for start in range(0, n, 37):  # blocks that cut groups
        stop = min(n, start + 37)
        for group in sorted(set(groups[start:stop])):
            rows = [i for i in range(start, stop) if groups[i] == group]
            parts.add(pa.chunked_array([[ids[i] for i in rows]]), rows[0],
                      np.array(rows, dtype=np.int64) * 10, group=group)
    parts.close()
    got = parts.first_repeats(before)
    assert got == _expected(ids, groups, before)
    assert len(got) >= 2  # the case is not empty: repeats in more than one group
    assert parts.first_repeat(before) == min(got.values(), key=lambda r: r.row)


def test_equal_ids_of_two_groups_are_not_a_repeat(tmp_path):
    parts = IdPartitions(tmp_path, 1)  # one partition: both groups' ids are sorted together
    # sorted by (group, id): (0, a) (0, b) (1, b) (1, c): the two b's are neighbours
    parts.add(pa.chunked_array([["b", "a"]]), 0, np.array([0, 1]), group=0)
    parts.add(pa.chunked_array([["c", "b"]]), 2, np.array([2, 3]), group=1)
    parts.close()
    assert parts.first_repeats() == {}


def test_group_zero_partitions_ids_by_their_hash_alone(tmp_path):
    """The import's partitions (one group, 0) are chosen by the id's hash, as before groups."""
    ids = pa.chunked_array([[f"req-{i}" for i in range(50)]])
    parts = IdPartitions(tmp_path, 7)
    parts.add(ids, 0, np.arange(50))
    parts.close()
    expected = (id_hash(ids) % np.uint64(7)).astype(np.int64)
    for k, path in enumerate(parts.paths):
        table = pa.ipc.open_stream(pa.OSFile(str(path))).read_all()
        assert (expected[table.column("row").to_numpy()] == k).all()


def test_a_long_column_hashes_as_its_ids_one_by_one():
    """Hashed a slice at a time, each id's hash is still its own (the slices cut nowhere)."""
    ids = pa.array([f"request-{i}" * (1 + i % 3) for i in range(10_000)])
    whole = id_hash(pa.chunked_array([ids.slice(0, 5_000), ids.slice(5_000)]))
    assert len(whole) == 10_000
    for i in (0, 4095, 4096, 4097, 5_000, 9_999):
        assert whole[i] == id_hash(ids.slice(i, 1))[0]
    assert len(np.unique(whole)) == 10_000
