"""The seed-format importer's shortcuts for the usual file give the general path's answers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.powertrace_csv import stage_events

HEADER = "run_id,timestamp,gpu_id,power_w\n"


def stamp(tick: int, gpu: int) -> str:
    return f"2026-05-01T00:00:{tick // 10:02d}.{tick % 10}{gpu}0Z"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + body, encoding="utf-8")
    return path


def imp(path: Path):
    return import_file("powertrace-csv", path, workload="finetune", platform="a100")


def test_bad_gpu_id_of_a_cycled_log_names_the_first_row_holding_it(tmp_path):
    """GPUs 0 and 0.5 cycled over 3 ticks: the error names line 3, the first 0.5."""
    body = "".join(f"r1,{stamp(t, g)},{gpu},100\n" for t in range(3)
                   for g, gpu in enumerate(("0", "0.5")))
    path = write(tmp_path, body)
    with pytest.raises(InputError) as info:
        imp(path)
    err = info.value
    assert (str(err.file), err.line, err.field) == (str(path), 3, "gpu_id")
    assert "a gpu_id must be a whole number >= 0" in str(err)


def test_one_run_id_on_every_row_is_the_run_id_and_an_unusable_one_names_line_2(tmp_path):
    """The usual file (one id on every row) and the same file with an unusable id."""
    body = "".join(f"{{rid}},{stamp(t, g)},{g},100\n" for t in range(3) for g in range(2))
    assert imp(write(tmp_path, body.format(rid="r-1"))).run_id == "r-1"
    path = write(tmp_path, body.format(rid="a b"))
    with pytest.raises(InputError) as info:
        imp(path)
    assert (info.value.line, info.value.field) == (2, "run_id")


def events_by_sorting_every_row(ts: np.ndarray, codes: np.ndarray, levels: list[str]):
    """The reference: a stable sort of every row by time, then the labelled rows' changes."""
    order = np.argsort(ts, kind="stable")
    labelled = order[codes[order] >= 0]
    if not len(labelled):
        return []
    seq = codes[labelled]
    change = np.r_[True, seq[1:] != seq[:-1]]
    return [(int(ts[row]), levels[int(c)]) for row, c in zip(labelled[change], seq[change],
                                                              strict=True)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(-1, 2)), max_size=60))
def test_stage_events_equal_those_of_a_stable_sort_of_every_row(rows):
    """Rows in any time order, labels anywhere (-1: empty): the same events, in the same order."""
    ts = np.array([t for t, _ in rows], dtype=np.int64)
    codes = np.array([c for _, c in rows], dtype=np.int64)
    levels = ["warmup", "train", "checkpoint"]
    table = SimpleNamespace(columns={"ts": ts, "stage": codes})
    factors = {"stage": SimpleNamespace(levels=levels)}
    got = [(t, e.label) for t, e in stage_events(table, factors)]  # type: ignore[arg-type]
    assert got == events_by_sorting_every_row(ts, codes, levels)
