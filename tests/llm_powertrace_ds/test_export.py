import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from llm_powertrace_ds import shards
from llm_powertrace_ds.cli import main


def test_long_parquet_one_row_per_tick(tmp_path, make_run, capsys):
    root = tmp_path / "ds"
    run = make_run("a", n=50)
    shards.publish_run(root, run)
    out = tmp_path / "long.parquet"
    assert main(["export", str(root), "--config", "finetune", "--long", "--out", str(out)]) == 0
    table = pq.read_table(out)
    assert table.num_rows == 100  # 2 devices x 50 ticks
    df = table.to_pydict()
    assert df["run_id"][0] == "a" and df["gpu_index"][49] == 0 and df["gpu_index"][50] == 1
    assert df["t_ms"][:2] == [0, 100] and df["t_ms"][50:52] == [2, 102]
    assert abs(df["power_w"][50] - run.devices[1].power_w[0]) < 1e-3
    assert df["temp_c"][0] is None


def test_csv_needs_long_for_traces_and_runs_export(tmp_path, make_run, capsys):
    root = tmp_path / "ds"
    shards.publish_run(root, make_run("a"))
    out = tmp_path / "x.csv"
    assert main(["export", str(root), "--config", "finetune", "--file-format", "csv",
                 "--out", str(out)]) == 1
    assert "--long" in capsys.readouterr().err
    assert not out.exists()
    assert main(["export", str(root), "--config", "finetune_runs", "--file-format", "csv",
                 "--out", str(out)]) == 0
    assert pacsv.read_csv(out).num_rows == 1


def test_not_a_dataset_folder(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--config", "finetune", "--out",
                 str(tmp_path / "o.parquet")]) == 1
    assert "not a dataset folder" in capsys.readouterr().err
