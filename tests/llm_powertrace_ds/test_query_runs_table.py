"""The runs table of many one-row files: combined in parts, old schema versions included."""

from __future__ import annotations

import pyarrow as pa

from llm_powertrace_ds import query


def _batch(run_id: str, energy_j: float, with_notes: bool = True) -> pa.RecordBatch:
    cols = {"run_id": pa.array([run_id]), "energy_j": pa.array([energy_j])}
    if with_notes:
        cols["notes"] = pa.array([f"n-{run_id}"])
    return pa.RecordBatch.from_pydict(cols)


def test_batches_beyond_one_part_keep_their_order_and_one_chunk_a_column(monkeypatch):
    monkeypatch.setattr(query, "_RUNS_CHUNK_BATCHES", 2)
    schema_ = _batch("x", 0.0).schema
    table = query._runs_table((_batch(f"r{i}", float(i)) for i in range(5)), schema_)
    assert table.column("run_id").to_pylist() == [f"r{i}" for i in range(5)]
    assert table.column("energy_j").to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert all(table.column(c).num_chunks == 1 for c in table.column_names)


def test_a_file_of_an_older_schema_in_a_later_part_gets_nulls(monkeypatch):
    monkeypatch.setattr(query, "_RUNS_CHUNK_BATCHES", 2)
    schema_ = _batch("x", 0.0).schema
    batches = [_batch("r0", 0.0), _batch("r1", 1.0), _batch("r2", 2.0, with_notes=False),
               _batch("r3", 3.0)]
    table = query._runs_table(iter(batches), schema_)
    assert table.schema.names == ["run_id", "energy_j", "notes"]
    assert table.column("notes").to_pylist() == ["n-r0", "n-r1", None, "n-r3"]
    assert all(table.column(c).num_chunks == 1 for c in table.column_names)


def test_no_batch_gives_the_empty_table_of_the_schema():
    schema_ = _batch("x", 0.0).schema
    table = query._runs_table(iter([]), schema_)
    assert table.num_rows == 0 and table.schema.equals(schema_)


def test_reading_a_folder_runs_table_does_not_import_datasets(tmp_path, make_run):
    """The runs files' schema comes from ``schema.arrow_schema``, not ``Features`` (~0.5 s)."""
    import subprocess
    import sys
    from pathlib import Path

    from llm_powertrace_ds import shards

    shards.publish_run(tmp_path, make_run("r1"), refresh_card=False)
    code = ("import sys\n"
            "from llm_powertrace_ds.query import Runs\n"
            f"n = Runs.load({str(tmp_path)!r}).to_arrow().num_rows\n"
            "print(n, 'datasets' in sys.modules)\n")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=repo, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["1", "False"]
