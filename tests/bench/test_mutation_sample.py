"""bench/mutation.py's seeded sample and its judged-equivalent file."""

from __future__ import annotations

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
