"""The query API over the layouts users meet: packed shards and files of an older schema."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc

from llm_powertrace_ds import layout, shards
from llm_powertrace_ds.query import Runs


def test_runs_files_of_an_older_schema_read_with_null_for_new_columns(tmp_path, make_run):
    root = tmp_path / "ds"
    for i in range(3):
        shards.publish_run(root, make_run(f"r{i}", seed=i), refresh_card=False)
    old = layout.runs_path(root, "finetune", "l40s", "r1")  # written before `seed` existed
    with pa.OSFile(str(old), "rb") as source:  # read into memory: the file is rewritten
        table = ipc.open_stream(source).read_all()
    table = table.drop_columns(["seed"])
    with pa.OSFile(str(old), "wb") as sink, ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    runs = Runs.load(root, "finetune")
    t = runs.to_arrow()
    assert t.column("run_id").to_pylist() == ["r0", "r1", "r2"]
    assert t.column("seed").to_pylist()[1] is None
    assert runs.where(run_id="r1").run_ids() == ["r1"]
    assert t.column("seed").num_chunks == 1  # one chunk per column, whatever the files
