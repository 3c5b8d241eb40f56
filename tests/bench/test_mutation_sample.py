"""bench/mutation.py's seeded sample and its judged-equivalent file."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import mutation  # noqa: E402

NAMES = [f"pkg.mod.x_f{i % 7}__mutmut_{i}" for i in range(1, 200)]


def test_the_sample_depends_on_the_names_and_the_seed_not_their_order():
    drawn = mutation.draw(NAMES, 30, seed=34)
    assert len(drawn) == 30 and set(drawn) <= set(NAMES)
    assert mutation.draw(list(reversed(NAMES)), 30, seed=34) == drawn
    assert mutation.draw(NAMES, 30, seed=35) != drawn


def test_a_smaller_sample_is_the_start_of_a_larger_one():
    small, large = mutation.draw(NAMES, 20, seed=34), mutation.draw(NAMES, 60, seed=34)
    assert set(small) < set(large)


def test_a_mutant_keeps_its_place_when_other_names_are_added():
    drawn = mutation.draw(NAMES, 30, seed=34)
    more = mutation.draw([*NAMES, "pkg.mod.x_new__mutmut_1"], 31, seed=34)
    assert set(drawn) <= set(more)


def test_every_committed_judgment_names_a_mutant_and_gives_a_reason():
    judged = mutation.load_equivalent()
    assert judged == mutation.EQUIVALENT and len(judged) > 0
    pattern = re.compile(r"^[\w.ǁ]+__mutmut_\d+$")
    assert [m for m in judged if not pattern.match(m)] == []
    assert all(reason.strip() for reason in judged.values())


@pytest.mark.parametrize("line", ["pkg.x_f 3 why", "pkg.x_f: no numbers", "pkg.x_f 3:  ",
                                  "pkg.x_f 3a: a letter"])
def test_a_malformed_judgment_names_the_file_and_line(tmp_path, line):
    path = tmp_path / "judged.txt"
    path.write_text("# comment\npkg.x_g 1 2: fine\n" + line + "\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        mutation.load_equivalent(path)
    assert str(exc.value).startswith("judged.txt:3: expected '<function> <n> ...: <reason>'")


def test_judgments_are_read_one_mutant_each(tmp_path):
    path = tmp_path / "judged.txt"
    path.write_text("pkg.x_g 1 12: same reason\n\npkg.x_h 4: other\n", encoding="utf-8")
    assert mutation.load_equivalent(path) == {
        "pkg.x_g__mutmut_1": "same reason", "pkg.x_g__mutmut_12": "same reason",
        "pkg.x_h__mutmut_4": "other"}


def test_the_docs_table_is_the_rendering_of_the_committed_json():
    doc = json.loads(mutation.JSON_PATH.read_text(encoding="utf-8"))
    text = mutation.DOC_PATH.read_text(encoding="utf-8")
    table = text.split(mutation.BEGIN, 1)[1].split(mutation.END, 1)[0]
    assert table == "\n" + mutation.render_table(doc), "run python bench/mutation.py --render-only"
    modules = {r["name"].split(".")[0] for r in doc["results"]}
    assert modules <= set(mutation.TARGETS)
    for r in doc["results"]:
        if r["name"].endswith(".kill_rate"):
            assert r["target"] == ">= 0.9"


def _row(module: str, killed: int) -> dict:
    verdicts = {f"m.x_f__mutmut_{i}": "killed" if i < killed else "survived" for i in range(10)}
    return mutation.summarise(module, verdicts)


def test_a_run_of_some_modules_keeps_the_other_modules_rows_and_their_command(tmp_path):
    path = tmp_path / "mutation.json"
    started = {"cores": 2, "load_avg_1min": 1.0}
    mutation.write_json(path, [_row("window", 9), _row("levels", 8)],
                        ["window", "levels", "--sample", "10"], started)
    mutation.write_json(path, [_row("limits", 10)], ["limits", "--sample", "10"], started)
    mutation.write_json(path, [_row("window", 10)], ["window", "--sample", "10"], started)
    doc = json.loads(path.read_text(encoding="utf-8"))
    rates = {r["name"]: r["value"] for r in doc["results"] if r["name"].endswith(".kill_rate")}
    assert rates == {"levels.kill_rate": 0.8, "limits.kill_rate": 1.0, "window.kill_rate": 1.0}
    ok = {r["name"]: r["ok"] for r in doc["results"] if r["name"].endswith(".kill_rate")}
    assert ok == {"levels.kill_rate": False, "limits.kill_rate": True, "window.kill_rate": True}
    # levels was measured by the first command only, which is kept; limits by the second
    assert doc["command"].split(" && ") == [
        "python bench/mutation.py window levels --sample 10",
        "python bench/mutation.py limits --sample 10",
        "python bench/mutation.py window --sample 10"]
    table = mutation.render_table(doc)
    assert "| `levels` | `llm_powertrace_ds/metrics/levels.py` | 10 | 8 | 2 | 0 | 0 | 80.0 % |" \
        in table
