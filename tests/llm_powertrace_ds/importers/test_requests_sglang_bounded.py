"""SGLang request logs go through the bounded reader: size and depth caps, one line in memory.

The ``--print-requests`` lines are the ones SGLang 0.5.23's ``sglang/benchmark/serving.py``
prints (the fixture writer of ``test_requests_sglang``); the result file is its JSON Lines
output with vLLM's per-request arrays.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from importers.test_requests_sglang import request_lines
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.requests import read_requests
from llm_powertrace_ds.importers.requests_sglang import read_sglang_requests
from llm_powertrace_ds.importers.requests_vllm import MAX_LOG_BYTES


def _peak_bytes(read, *args):
    """What ``read(*args)`` allocated at its peak, and what it returned or raised."""
    tracemalloc.start()
    try:
        try:
            out: object = read(*args)
        except InputError as exc:
            out = exc
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def test_a_600_mb_sglang_log_is_refused_by_its_size_before_it_is_read(tmp_path):
    path = tmp_path / "sglang.jsonl"
    with path.open("wb") as fh:  # sparse: 600 MB on the file system's books, no disk used
        fh.truncate(600_000_000)
    peak, out = _peak_bytes(read_requests, "sglang", path)
    assert isinstance(out, InputError)
    assert out.reason == f"the file is 600000000 bytes; at most {MAX_LOG_BYTES} are read"
    assert out.file == str(path)
    assert peak < 8 << 20


def test_a_200000_deep_sglang_result_line_is_one_line_error(tmp_path):
    path = tmp_path / "sglang.jsonl"
    path.write_text('{"ttfts": [0.1], "start_times": [1.0]}\n'
                    + "[" * 200_000 + "]" * 200_000 + "\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_requests("sglang", path)
    assert (info.value.file, info.value.line) == (str(path), 2)
    assert info.value.reason == "nested deeper than 64 levels; refused"
    assert "\n" not in str(info.value)


def test_a_print_requests_log_is_read_a_line_at_a_time(tmp_path):
    """40 requests with 1 MB outputs each: memory holds about one line, not the 40 MB file."""
    path = tmp_path / "bench.log"
    text_chars = 900_000
    with path.open("w", encoding="utf-8") as fh:
        for i in range(40):
            start, end = request_lines(0.5 + i, 0.1, 0.4)
            fh.write(start + "\n")
            fh.write(end.replace("generated_text='...'", f"generated_text='{'x' * text_chars}'")
                     + "\n")
    assert path.stat().st_size > 36_000_000
    peak, log = _peak_bytes(read_requests, "sglang", path)
    assert not isinstance(log, InputError), log
    assert len(log.requests) == 40
    assert all(r.status == "ok" for r in log.requests)
    assert peak < 12 << 20, peak


def test_a_sglang_log_that_is_not_a_regular_file_is_refused_by_name(tmp_path):
    with pytest.raises(InputError) as info:
        read_sglang_requests(tmp_path)
    assert info.value.file == str(tmp_path)
    assert info.value.reason == "is a folder, not a regular file; refused"


def test_a_long_sglang_result_line_keeps_one_line_in_memory(tmp_path):
    """Twenty earlier runs appended to the result file are skipped, not held."""
    run = {"ttfts": [0.1] * 50_000, "input_lens": [10] * 50_000,
           "start_times": [1.0 + i for i in range(50_000)], "errors": [""] * 50_000}
    line = json.dumps(run)
    path = tmp_path / "sglang.jsonl"
    path.write_text((line + "\n") * 20, encoding="utf-8")
    peak, log = _peak_bytes(read_requests, "sglang", path)
    assert not isinstance(log, InputError), log
    assert len(log.requests) == 50_000
    assert peak < 10 * len(line) + (64 << 20)
    assert Path(path).stat().st_size > 20 * len(line)
