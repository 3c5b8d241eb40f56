"""Importing many files streams: each is published as it is read, the card is built once."""

from __future__ import annotations

from llm_powertrace_ds import hooks
from llm_powertrace_ds.cli import main

from .test_malformed import snapshot
from .test_powertrace_csv import their_json, trace_csv


def logs(folder, count, bad_at=None):  # noqa: ANN001, ANN201
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = trace_csv(folder / f"r{i}.csv", ticks=20, run_id=f"run-{i}")
        their_json(folder / f"r{i}.json", run_id=f"run-{i}")
        if i == bad_at:
            path.write_text(path.read_text().replace(",40.0,", ",abc,", 1))
        paths.append(str(path))
    return paths


def test_many_files_one_card_rebuild(tmp_path, monkeypatch):
    built = []
    # the spy beside the real card writer (which main registers when it builds its parser)
    monkeypatch.setattr(hooks, "_card_writers", {"spy": built.append})
    files = logs(tmp_path / "logs", 4)
    root = tmp_path / "ds"
    assert main(["import", "powertrace-csv", *files, "--out", str(root), "--workload",
                 "finetune"]) == 0
    assert built == [root]  # once per command, not per file
    assert len(list((root / "data" / "finetune_runs").rglob("*.arrow"))) == 4
    text = (root / "README.md").read_text(encoding="utf-8")
    assert "schema version that wrote them: `" in text and "` (4)." in text  # the full card


def test_bad_file_stops_the_stream_and_keeps_what_was_published(tmp_path, capsys):
    files = logs(tmp_path / "logs", 3, bad_at=1)
    root = tmp_path / "ds"
    assert main(["import", "powertrace-csv", *files, "--out", str(root), "--workload",
                 "finetune"]) == 1
    err = capsys.readouterr().err
    assert "r1.csv" in err and "line 2" in err and "power_w" in err
    runs = sorted(p.stem for p in (root / "data" / "finetune_runs").rglob("*.arrow"))
    assert runs == ["run-0"]  # the file before the bad one, complete; nothing after
    text = (root / "README.md").read_text(encoding="utf-8")  # the card is rebuilt anyway
    assert "schema version that wrote them: `" in text and "` (1)." in text


def test_check_first_is_all_or_nothing(tmp_path):
    root = tmp_path / "ds"
    assert main(["import", "powertrace-csv", *logs(tmp_path / "ok", 1), "--out", str(root),
                 "--workload", "finetune"]) == 0
    before = snapshot(root)
    files = logs(tmp_path / "logs", 3, bad_at=2)
    assert main(["import", "powertrace-csv", *files, "--out", str(root), "--workload",
                 "finetune", "--check-first"]) == 1
    assert snapshot(root) == before
