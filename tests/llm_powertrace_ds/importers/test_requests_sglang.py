"""SGLang's benchmark client onto the run clock: its ``--print-requests`` log and its result file.

The fixture lines are built here the way SGLang 0.5.23's ``sglang/benchmark/serving.py`` prints
them (``--backend sglang-oai-chat --print-requests``): ``rid=<uuid> time=<time.time()> ...
message="request start"`` and ``... time_delta=<s> message="request end" output="<repr of its
RequestFuncOutput dataclass>"`` — a dataclass with upstream's fields in upstream's order, so the
repr is the one the client prints.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.requests import read_requests, summary_columns, to_run_clock

T0_NS = 5_000_000_000_000          # the sampler's first tick (CLOCK_MONOTONIC ns)
ANCHOR = {"monotonic_ns": T0_NS + 50_000_000, "utc_ns": 1_764_547_200_000_000_000}
RUN_END_MS = 60_000
WALL_T0 = (ANCHOR["utc_ns"] - 50_000_000) / 1e9   # t0 on the wall clock


@dataclass
class RequestFuncOutput:  # SGLang 0.5.23's fields, in its order
    generated_text: str = ""
    success: bool = False
    latency: float = 0.0
    ttft: float = 0.0
    tpot: float | None = None
    itl: list[float] = field(default_factory=list)
    text_chunks: list[str] = field(default_factory=list)
    prompt_len: int = 0
    error: str = ""
    output_len: int = 0
    start_time: float = 0.0
    cached_tokens: int = 0
    cached_tokens_details: dict[str, Any] | None = None
    spec_accept_length: float = 0.0
    spec_cap_length: float = 0.0
    spec_block_accept_length: float = 0.0
    spec_cap_lens_histogram: list[int] = field(default_factory=list)


def request_lines(at_s: float, ttft: float, latency: float, *, ok: bool = True,
                  monotonic: bool = True) -> list[str]:
    """The two lines the client prints for one request sent ``at_s`` after the run's t0."""
    rid = str(uuid.uuid4())
    wall_start = WALL_T0 + at_s
    out = RequestFuncOutput(
        generated_text="...", success=ok, latency=latency if ok else 0.0,
        ttft=ttft if ok else 0.0, itl=[0.02] * 3 if ok else [],
        text_chunks=['He said "hi", ttft=9', " done=\\n"] if ok else [],
        prompt_len=128, error="" if ok else "Traceback ...\nClientConnectorError('x')",
        output_len=4 if ok else 0, start_time=T0_NS / 1e9 + at_s if monotonic else 0.0,
        cached_tokens_details={"device": 0} if ok else None)
    end = wall_start + (latency if ok else 0.01)
    return [
        f'rid={rid} time={wall_start} message="request start" request_func_input='
        f'"RequestFuncInput(prompt=\'...\', api_url=\'http://127.0.0.1:30000/v1/chat/completions'
        f'\', prompt_len=128, output_len=4, model=\'m\', lora_name=None, image_data=None, '
        f'extra_request_body={{}}, timestamp=None, routing_key=None)"',
        f'rid={rid} time={end} time_delta={end - wall_start} message="request end" '
        f'output="{out!s}"',
    ]


def write_log(tmp_path: Path, *, monotonic: bool = True, shift_s: float = 0.0) -> Path:
    lines = ["benchmark_args=Namespace(backend='sglang-oai-chat', print_requests=True)",
             "Starting warmup with 1 sequences...",
             *request_lines(1.0 + shift_s, 0.05, 0.2, monotonic=monotonic),
             "Warmup completed with 1 sequences. Starting main benchmark run...",
             *request_lines(3.0 + shift_s, 0.12, 1.5, monotonic=monotonic),
             *request_lines(3.1 + shift_s, 0.30, 2.0, monotonic=monotonic),
             *request_lines(3.2 + shift_s, 0, 0, ok=False, monotonic=monotonic),
             "", "============ Serving Benchmark Result ============"]
    path = tmp_path / "client.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def to_clock(path: Path) -> list[dict]:
    return to_run_clock(read_requests("sglang", path), run_id="r", platform="h100_sxm_80gb",
                        t0_ns=T0_NS, anchor=ANCHOR, run_end_ms=RUN_END_MS)


@pytest.mark.parametrize("monotonic", [True, False], ids=["start_time", "wall_clock"])
def test_print_requests_log_onto_the_run_clock(tmp_path, monotonic):
    rows = to_clock(write_log(tmp_path, monotonic=monotonic))
    assert len(rows) == 3  # the warm-up request is left out
    got = [(r["arrival_ms"], r["first_token_ms"], r["finish_ms"]) for r in rows]
    assert got == [(3000, 3120, 4500), (3100, 3400, 5100), (3200, None, None)]
    for r in rows[:2]:
        assert r["arrival_ms"] <= r["first_token_ms"] <= r["finish_ms"]
    assert [r["status"] for r in rows] == ["ok", "ok", "error"]
    assert rows[0]["prompt_tokens"] == 128 and rows[0]["output_tokens"] == 4
    assert rows[2]["output_tokens"] is None
    summary = summary_columns(rows)
    assert summary["requests_completed"] == 2 and summary["tokens_out"] == 8


def test_a_log_from_another_clock_is_an_error_naming_the_file(tmp_path):
    path = write_log(tmp_path, shift_s=-3600)
    with pytest.raises(InputError, match="outside the run") as info:
        to_clock(path)
    assert "client.log" in str(info.value)


def test_a_damaged_output_names_file_line_and_field(tmp_path):
    path = write_log(tmp_path)
    lines = path.read_text().splitlines()
    lines[6] = lines[6].replace("ttft=0.12,", "ttft='fast',")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as info:
        read_requests("sglang", path)
    assert (info.value.line, info.value.field) == (7, "ttft") and "client.log" in str(info.value)
    lines[6] = lines[6].replace("output=\"RequestFuncOutput(", "output=\"os.system(")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="RequestFuncOutput") as info:
        read_requests("sglang", path)
    assert info.value.line == 7


def test_only_warm_up_is_an_error(tmp_path):
    path = tmp_path / "client.log"
    path.write_text("\n".join(["Starting warmup with 1 sequences...",
                               *request_lines(1.0, 0.05, 0.2)]) + "\n")
    with pytest.raises(InputError, match="no benchmark request"):
        read_requests("sglang", path)


def output_details_line() -> dict:
    """One ``--output-file --output-details`` line: SGLang 0.5.23's result and detail keys."""
    return {"tag": None, "backend": "sglang-oai-chat", "dataset_name": "random",
            "request_rate": float("inf"), "max_concurrency": 2, "duration": 4.2,
            "completed": 2, "total_input_tokens": 256, "total_output_tokens": 8,
            "input_lens": [128, 128, 128], "output_lens": [4, 4, 0],
            "ttfts": [0.12, 0.3, 0.0], "itls": [[0.02] * 3, [0.02] * 3, []],
            "generated_texts": ["...", "...", ""], "errors": ["", "", "Bad Request"]}


def test_the_output_details_file_is_refused_naming_start_times(tmp_path):
    path = tmp_path / "sglang.jsonl"
    path.write_text(json.dumps(output_details_line()) + "\n")
    with pytest.raises(InputError, match="print-requests") as info:
        read_requests("sglang", path)
    assert (info.value.field, info.value.line) == ("start_times", 1)
    assert info.value.file == str(path)
