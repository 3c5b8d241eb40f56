"""docs/benchmarks.md is rendered from the bench JSON in docs/data/bench/, never typed by hand."""

from __future__ import annotations

import getpass
import json
import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import _report  # noqa: E402
import render_benchmarks as rb  # noqa: E402


def _doc(name: str = "metrics", value: float = 12.5e6) -> dict:
    return _report.document(name, [
        _report.result("samples_per_s", value, "samples/s", at_least=10e6),
        _report.result("samples", 20_000_000, "samples"),
    ], script=f"bench/{name}.py", argv=["--repeat", "1"])


def _write(folder: Path, doc: dict) -> Path:
    path = folder / f"{doc['bench']}.json"
    _report.write(path, doc)
    return path


def test_the_committed_page_is_the_rendering_of_the_committed_json():
    assert rb.PAGE.read_text(encoding="utf-8") == rb.render(), (
        "docs/benchmarks.md is stale: run python bench/render_benchmarks.py")


def test_every_committed_document_is_from_a_bench_script_and_names_no_host_or_user():
    files = sorted(rb.DATA_DIR.glob("*.json"))
    assert files, "no bench results committed"
    host, user = socket.gethostname(), getpass.getuser()
    for path in files:
        doc = rb.load(path)
        assert (REPO / "bench" / f"{doc['bench']}.py").is_file(), path.name
        assert doc["command"].startswith(f"python bench/{doc['bench']}.py"), path.name
        text = path.read_text(encoding="utf-8")
        assert host not in text and f"/{user}/" not in text, path.name
        assert str(REPO) not in text and "/tmp/" not in text, path.name


def test_check_exits_1_when_a_figure_changes_and_0_once_rendered(tmp_path, capsys):
    data, page = tmp_path / "data", tmp_path / "benchmarks.md"
    _write(data, _doc())
    args = ["--data", str(data), "--page", str(page)]
    assert rb.main([*args, "--check"]) == 1  # no page yet
    assert rb.main(args) == 0
    assert rb.main([*args, "--check"]) == 0
    assert "12,500,000" in page.read_text(encoding="utf-8")
    _write(data, _doc(value=9e6))
    assert rb.main([*args, "--check"]) == 1
    assert "is stale" in capsys.readouterr().err


def test_the_table_shows_value_unit_target_and_a_missed_target():
    data = _doc(value=9e6)
    text = rb.section(data)
    assert "| `samples_per_s` | 9,000,000 | samples/s | >= 10,000,000 | **no** |" in text
    assert "| `samples` | 20,000,000 | samples |  |  |" in text
    assert "Targets met: 0 of 1." in text
    assert "    python bench/metrics.py --repeat 1" in text
    assert "at the start," in text and "at the end." in text


@pytest.mark.parametrize(("field", "edit", "message"), [
    ("results[0].unit", lambda d: d["results"][0].pop("unit"), "missing"),
    ("results[1].ok", lambda d: d["results"][1].update(ok="yes"), "'yes'"),
    ("date", lambda d: d.update(date="03/12/2026"), "'03/12/2026'"),
    ("bench", lambda d: d.update(bench="other"), "'other'"),
    ("machine.cpu", lambda d: d["machine"].pop("cpu"), "missing"),
])
def test_a_bad_document_is_named_by_file_field_and_value(tmp_path, capsys, field, edit, message):
    doc = _doc()
    edit(doc)
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(rb.BenchDocError) as err:
        rb.load(path)
    assert str(err.value).startswith(f"metrics.json: field '{field}'")
    assert message in str(err.value)
    assert rb.main(["--data", str(tmp_path), "--page", str(tmp_path / "p.md")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "p.md").exists()


def test_ok_follows_the_bound_and_is_null_without_a_value_or_target():
    assert _report.result("x", 1.5, "s", at_most=1.5).ok is True
    assert _report.result("x", 1.6, "s", at_most=1.5).ok is False
    assert _report.result("x", 1.4e6, "1/s", at_least=1.5e6).ok is False
    assert _report.result("x", 1.01, "", within=(0.98, 1.02)).target == "0.98 to 1.02"
    assert _report.result("x", 0.97, "", within=(0.98, 1.02)).ok is False
    assert _report.result("x", None, "s", at_most=1.5).ok is None
    assert _report.result("x", 3.0, "s").ok is None
    assert _report.result("x", float("nan"), "%", at_most=1.0) == \
        _report.Result("x", None, "%", "<= 1", None)
    with pytest.raises(ValueError, match="one of"):
        _report.result("x", 1.0, "s", at_most=1.0, at_least=0.5)


def test_the_machine_block_names_hardware_not_the_host_or_user():
    machine = _report.machine()
    assert set(machine) == {"cpu", "cores", "memory_gib", "os", "python", "load_avg_1min"}
    text = json.dumps(machine)
    assert socket.gethostname() not in text and getpass.getuser() not in text.split('"')


def test_the_command_writes_repository_paths_relative_to_it():
    cmd = _report.command(str(REPO / "bench" / "scale.py"),
                          ["--json", str(REPO / "docs/data/bench/scale.json"), "--runs", "30"])
    assert cmd == "python bench/scale.py --json docs/data/bench/scale.json --runs 30"


def test_two_results_of_one_name_are_refused():
    with pytest.raises(ValueError, match="named twice: a"):
        _report.document("metrics", [_report.result("a", 1, "s"), _report.result("a", 2, "s")],
                         script="metrics.py", argv=[])
