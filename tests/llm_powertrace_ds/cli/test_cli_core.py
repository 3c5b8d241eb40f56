import json

import pytest

from llm_powertrace_ds import layout, shards
from llm_powertrace_ds.cli import main


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("import", "validate", "list", "pack", "card", "demo"):
        assert cmd in out


def test_unknown_subcommand_is_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2


def test_list_and_validate_json(tmp_path, make_run, capsys):
    shards.publish_run(tmp_path, make_run("a"))
    shards.publish_run(tmp_path, make_run("b", platform="cpu_proxy", sampler="cpu_proxy"))
    assert main(["list", str(tmp_path), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in rows] == ["a", "b"]
    assert main(["validate", str(tmp_path), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["run_id"]: r["status"] for r in rows} == {"a": "ok", "b": "ok"}
    assert "cpu_proxy" in rows[1]["flags"]


def test_validate_exits_1_on_error_flag(tmp_path, make_run, capsys):
    shards.publish_run(tmp_path, make_run("good"))
    bad = make_run("bad")
    bad.devices[0].t_ms[7] = bad.devices[0].t_ms[6]
    # written around publish_run (which would refuse it), as a foreign writer might
    shards.write_table_atomic(layout.trace_path(tmp_path, "finetune", "l40s", "llama", "bad"),
                              shards.trace_table(bad))
    shards.write_table_atomic(layout.runs_path(tmp_path, "finetune", "l40s", "bad"),
                              shards.runs_table(bad, {}))
    assert main(["validate", str(tmp_path), "--format", "csv"]) == 1
    out = capsys.readouterr().out
    assert "bad,l40s,error" in out and "good,l40s,ok" in out


def test_corrupt_shard_is_one_line_error(tmp_path, make_run, capsys):
    shards.publish_run(tmp_path, make_run("a"))
    path = layout.runs_path(tmp_path, "finetune", "l40s", "a")
    path.write_bytes(b"not arrow at all")
    assert main(["list", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: Failed to read") and "a.arrow" in err[0]
    assert len(err) == 1  # an explained error: no --debug hint (that is for unexpected ones)


def test_pack_command(tmp_path, make_run, capsys):
    src = tmp_path / "src"
    shards.publish_run(src, make_run("a"))
    assert main(["pack", str(src), "--out", str(tmp_path / "dst"), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"folder": "data/finetune/l40s/llama", "rows": 2, "shards": 1} in rows
    assert main(["pack", str(src), "--out", str(tmp_path / "dst")]) == 1
