"""The write, publish and pack paths: messages, locks, durability, grouping.

The exact one-line error messages, the status a commit writes, the lock names and their timeout,
fsync before rename, batch sizes in a shard, shard grouping at the size bound, and the card's
front matter at its edges.
"""

from __future__ import annotations

import errno
import importlib
import json
import locale
import sys

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from filelock import FileLock

from llm_powertrace_ds import atomic, layout, schema, shards
from llm_powertrace_ds.errors import InputError, LockTimeout, ShardError
from llm_powertrace_ds.run import DeviceSeries, Run
from llm_powertrace_ds.shards import publish, read, write
from llm_powertrace_ds.staging import Staging
from llm_powertrace_ds.validate import validate_run

pack_mod = importlib.import_module("llm_powertrace_ds.shards.pack")  # `shards.pack` is the function


def _table(n: int, value: float = 1.0) -> pa.Table:
    return pa.table({"x": pa.array(np.full(n, value))})


# -- write -------------------------------------------------------------------------------------

def test_files_are_fsynced_before_they_are_renamed(tmp_path, monkeypatch):
    synced = []
    real = atomic._fsync_path
    monkeypatch.setattr(atomic, "_fsync_path", lambda p: (synced.append(p), real(p)))
    write.write_table_atomic(tmp_path / "a.arrow", _table(3))
    table = _table(3)
    write.write_batches_atomic(tmp_path / "b.arrow", table.schema, table.to_batches())
    assert [p.name.split(".")[1] for p in synced] == ["a", "b"]
    assert all(not p.exists() for p in synced)  # renamed away after the sync


def _uncompressed(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema,
                        options=ipc.IpcWriteOptions(compression=None)) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_small_tables_are_written_uncompressed_and_packs_compressed(tmp_path):
    small = _table(3)
    write.write_table_atomic(tmp_path / "s.arrow", small)
    assert (tmp_path / "s.arrow").read_bytes() == _uncompressed(small)
    big = _table(200_000, 7.0)  # 1.6 MB of one value: zstd takes it to almost nothing
    n = write.write_batches_atomic(tmp_path / "p.arrow", big.schema, big.to_batches(50_000))
    assert n == 200_000
    assert (tmp_path / "p.arrow").stat().st_size < len(_uncompressed(big)) / 10


def test_large_tables_are_written_in_batches_of_1024_rows(tmp_path):
    write.write_table_atomic(tmp_path / "r.arrow", _table(2500))
    with pa.OSFile(str(tmp_path / "r.arrow"), "rb") as source:
        sizes = [b.num_rows for b in ipc.open_stream(source)]
    assert sizes == [1024, 1024, 452]


def test_a_batch_of_another_schema_is_refused_by_name(tmp_path):
    a, b = _table(2), pa.table({"y": [1, 2]})
    with pytest.raises(ShardError) as exc:
        write.write_batches_atomic(tmp_path / "m.arrow", a.schema,
                                   [*a.to_batches(), *b.to_batches()])
    assert str(exc.value) == ("cannot pack into 'm.arrow': a batch's schema differs from the "
                              "first file's")
    assert not list(tmp_path.iterdir())


def test_a_failed_write_names_the_file_and_keeps_staged_files(tmp_path, monkeypatch):
    staged = tmp_path / "staged.arrow"
    write.write_table_atomic(staged, _table(2))
    real = write._write_stream

    def full_disk(dest, table, **kw):
        if table.num_rows == 5:  # fails before its file exists
            raise OSError(errno.ENOSPC, "No space left on device")
        real(dest, table, **kw)

    monkeypatch.setattr(write, "_write_stream", full_disk)
    first, second, third = tmp_path / "d" / "1.arrow", tmp_path / "d" / "2.arrow", \
        tmp_path / "d" / "3.arrow"
    with pytest.raises(ShardError) as exc:
        write.write_tables_all_or_nothing({first: _table(2), second: staged, third: _table(5)})
    assert str(exc.value) == (f"cannot write '{third}': No space left on device; nothing of the "
                              "run was published")
    assert staged.exists()  # a staged file belongs to its staging folder: a retry commits it
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == []


def test_folder_and_run_locks_time_out_with_their_names(tmp_path, monkeypatch, make_run):
    monkeypatch.setattr(write, "LOCK_TIMEOUT_S", 0.05)
    held = FileLock(str(layout.lock_path(tmp_path, "folder")))
    with held:
        with pytest.raises(LockTimeout) as exc:
            with write.folder_lock(tmp_path):
                pass
    assert str(exc.value) == f"the card of {tmp_path} is locked by another process"
    prepared = shards.prepare_run(tmp_path, make_run("locked"))
    with FileLock(str(layout.lock_path(tmp_path, "locked"))):
        with pytest.raises(LockTimeout) as exc:
            shards.commit_run(tmp_path, prepared)
    assert str(exc.value) == "run locked is locked by another process"
    assert not layout.data_root(tmp_path).exists()


# -- publish -----------------------------------------------------------------------------------

def test_a_commit_marks_complete_then_published(tmp_path, monkeypatch, make_run):
    seen = []
    real = publish.set_status
    monkeypatch.setattr(publish, "set_status",
                        lambda root, run_id, status, **kw: (seen.append((run_id, status)),
                                                            real(root, run_id, status, **kw)))
    prepared = shards.prepare_run(tmp_path, make_run("st"))
    result = shards.commit_run(tmp_path, prepared)
    assert seen == [("st", "complete"), ("st", "published")]
    assert result.metrics is prepared.metrics and result.metrics["energy_j"] > 0
    assert (tmp_path / "README.md").exists()  # the configs block by default


def test_set_status_writes_the_status_and_its_details(tmp_path):
    publish.set_status(tmp_path, "r1", "complete", pid=7)
    assert json.loads((Staging(tmp_path, "r1").dir / "status.json").read_text()) == \
        {"status": "complete", "pid": 7}


def test_publish_leaves_the_card_alone_when_asked(tmp_path, make_run):
    shards.publish_run(tmp_path, make_run("quiet"), refresh_card=False)
    assert not (tmp_path / "README.md").exists()
    shards.publish_run(tmp_path, make_run("loud"))
    assert (tmp_path / "README.md").exists()


def test_prepare_refuses_an_unknown_workload_by_field(tmp_path, make_run):
    run = make_run("wl")
    run.meta["workload"] = "pretraining"
    with pytest.raises(InputError) as exc:
        shards.prepare_run(tmp_path, run)
    assert exc.value.field == "workload"
    assert str(exc.value) == ("field 'workload': workload 'pretraining' is not one of "
                              f"{schema.WORKLOADS}")


def test_prepare_names_every_validation_error(tmp_path):
    devices = [DeviceSeries(0, [0, 100, 50], {"power_w": [1.0, 2.0, 3.0]}),
               DeviceSeries(1, [0, 100, 200], {"power_w": [1.0, -5.0, 3.0]})]
    run = Run({"run_id": "bad", "workload": "finetune", "platform": "l40s",
               "model_family": "llama", "sample_period_ms": 100.0}, devices, [])
    messages = validate_run(run).messages
    assert len(messages) >= 2
    with pytest.raises(InputError) as exc:
        shards.prepare_run(tmp_path, run)
    assert exc.value.field == "quality_flags"
    assert str(exc.value) == ("field 'quality_flags': run bad failed validation: "
                              + "; ".join(messages))


def test_staging_twice_keeps_every_file_and_the_metrics(tmp_path, make_run):
    prepared = shards.prepare_run(tmp_path, make_run("twice", workload="inference",
                                                     platform="h100_sxm_80gb",
                                                     with_requests=True))
    staged = publish.stage_run(tmp_path, prepared)
    again = publish.stage_run(tmp_path, staged)
    assert again.files == staged.files and len(staged.files) == 3
    assert all(p.exists() for p in again.files.values())
    assert again.metrics is prepared.metrics


def test_discarding_a_run_never_staged_is_a_no_op(tmp_path, make_run):
    prepared = shards.prepare_run(tmp_path, make_run("never"))
    publish.discard_staged(tmp_path, prepared)
    assert not layout.staging_dir(tmp_path, "never").exists()
    Staging(tmp_path, "never").set_status("complete")
    publish.discard_staged(tmp_path, publish.stage_run(tmp_path, prepared))
    assert layout.staging_dir(tmp_path, "never").is_dir()  # its status stays


@pytest.mark.parametrize(("text", "meta", "body"), [
    ("---\na: 1\n---\nbody\n", {"a": 1}, "body\n"),
    ("---\n---\nbody\n", {}, "body\n"),                      # an empty block
    ("---\n\n---\nbody\n", {}, "body\n"),                    # a blank line in it
    ("---\na: 1\n---\ntext\n\n---\n\nmore\n", {"a": 1}, "text\n\n---\n\nmore\n"),  # a rule
    ("---\na: 1\n", {}, "---\na: 1\n"),                      # never closed: no front matter
    ("no front matter\n", {}, "no front matter\n"),
])
def test_front_matter_is_split_at_its_first_closing_line(text, meta, body):
    assert publish.split_front_matter(text) == (meta, body)


def test_repair_keeps_runs_rows_whose_trace_arrived_after_the_audit(tmp_path, monkeypatch,
                                                                    make_run):
    for run_id in ("raced", "stray"):
        shards.publish_run(tmp_path, make_run(run_id), refresh_card=False)
    traces = {r: layout.trace_path(tmp_path, "finetune", "l40s", "llama", r)
              for r in ("raced", "stray")}
    aside = tmp_path / "aside.arrow"
    traces["raced"].rename(aside)
    traces["stray"].unlink()
    real = publish.audit.audit_folder

    def audit_then_publish(root):
        found = real(root)
        aside.rename(traces["raced"])  # a publisher finished between the audit and the lock
        return found

    monkeypatch.setattr(publish.audit, "audit_folder", audit_then_publish)
    removed = publish.repair_folder(tmp_path)
    assert removed == ["data/finetune_runs/l40s/stray.arrow"]
    assert layout.runs_path(tmp_path, "finetune", "l40s", "raced").exists()


# -- pack --------------------------------------------------------------------------------------

def test_groups_fill_up_to_the_bound_and_start_again(tmp_path):
    files = []
    for i in range(5):
        files.append(tmp_path / f"{i}.arrow")
        files[-1].write_bytes(b"x" * 100)
    groups = pack_mod._group_by_size(files, 200)
    assert [[p.name for p in g] for g in groups] == \
        [["0.arrow", "1.arrow"], ["2.arrow", "3.arrow"], ["4.arrow"]]
    assert pack_mod._group_by_size(files[:1], 50) == [files[:1]]  # a big file alone


def test_pack_refuses_its_own_folder_and_works_hidden_beside_the_new_one(tmp_path, monkeypatch,
                                                                         make_run):
    src = tmp_path / "src"
    shards.publish_run(src, make_run("pk"), refresh_card=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ShardError) as exc:
        shards.pack(empty, empty / ".." / "empty")
    assert str(exc.value) == "pack never works in place: choose another --out"
    seen = []
    real = pack_mod._pack_into
    monkeypatch.setattr(pack_mod, "_pack_into",
                        lambda s, d, **kw: (seen.append(d), real(s, d, **kw))[1])
    dst = tmp_path / "new" / "deep" / "out"
    result = shards.pack(src, dst)
    assert seen[0].parent == dst.parent and seen[0].name.startswith(".out.packing-")
    assert result.rows == {"data/finetune/l40s/llama": 2, "data/finetune_runs/l40s": 1}
    assert sorted(p.name for p in dst.parent.iterdir()) == ["out"]


def test_pack_leaves_hidden_files_and_an_empty_folder_behind(tmp_path, make_run):
    src = tmp_path / "src"
    shards.publish_run(src, make_run("hid"), refresh_card=False)
    trace = layout.trace_path(src, "finetune", "l40s", "llama", "hid")
    (trace.parent / ".old.arrow").write_bytes(trace.read_bytes())
    result = shards.pack(src, tmp_path / "out")
    assert result.rows["data/finetune/l40s/llama"] == 2  # not 4
    empty = tmp_path / "empty"
    empty.mkdir()
    shards.pack(empty, tmp_path / "out2")
    assert not any((tmp_path / "out2").iterdir())  # no card for nothing
    # a folder holding only a hidden file is no folder to pack
    only_hidden = tmp_path / "hidden-only"
    shards.publish_run(only_hidden, make_run("hid2"), refresh_card=False)
    extra = layout.data_root(only_hidden) / "finetune" / "l40s" / "qwen"
    extra.mkdir(parents=True)
    (extra / ".stale.arrow").write_bytes(trace.read_bytes())
    assert "data/finetune/l40s/qwen" not in shards.pack(only_hidden, tmp_path / "out3").rows


def test_pack_names_a_file_it_cannot_read_and_a_count_that_differs(tmp_path, monkeypatch,
                                                                   make_run):
    src = tmp_path / "src"
    for r in ("a", "b"):
        shards.publish_run(src, make_run(r), refresh_card=False)
    second = layout.trace_path(src, "finetune", "l40s", "llama", "b")
    data = second.read_bytes()
    second.write_bytes(data[: len(data) // 2])
    try:
        list(read.iter_file_batches(second))
    except (OSError, pa.ArrowInvalid) as exc:
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    with pytest.raises(ShardError) as exc:
        shards.pack(src, tmp_path / "out")
    assert str(exc.value) == f"Failed to read '{second}': {reason}"
    second.write_bytes(data)
    monkeypatch.setattr(pack_mod, "count_rows", lambda path: 1)
    with pytest.raises(ShardError) as exc:
        shards.pack(src, tmp_path / "out3")
    assert str(exc.value) == "pack lost rows in 'data/finetune/l40s/llama': 4 in, 1 out"


def test_the_card_is_read_as_utf8_whatever_the_locale(tmp_path, make_run):
    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode reads every file as UTF-8")
    shards.publish_run(tmp_path, make_run("loc"), refresh_card=False)
    (tmp_path / "README.md").write_text("---\npretty_name: Grüße ☃\n---\nBody — ü\n",
                                        encoding="utf-8")
    saved = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")  # an ASCII locale
        publish.write_configs_block(tmp_path)
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)
    meta, body = publish.split_front_matter((tmp_path / "README.md").read_text(encoding="utf-8"))
    assert meta["pretty_name"] == "Grüße ☃" and body == "Body — ü\n"
    assert [c["config_name"] for c in meta["configs"]][:1] == ["finetune"]
