"""The vLLM and SGLang request-log readers: exact values and one-line errors.

``requests_vllm``, ``requests_sglang`` and ``requests_sglang_log``: the error (reason, file, line
and field) for each kind of malformed input, and the values read from each format — times, token
counts, statuses, request ids, which clock, null versus 0, and the optional arrays and keys when
absent. The input files are written here in each client's documented format (see the modules'
docstrings).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.requests_sglang import read_sglang_requests
from llm_powertrace_ds.importers.requests_vllm import read_json_object, read_vllm_requests

# ---------------------------------------------------------------------------------------------
# vLLM's ``--save-result --save-detailed`` JSON (and SGLang's JSONL lines that carry start_times)
# ---------------------------------------------------------------------------------------------


def vllm_data() -> dict[str, Any]:
    """Three requests; every time a binary-exact float so sums compare exactly."""
    return {
        "backend": "vllm", "num_prompts": 3,
        "start_times": [100.0, 100.5, 101.0],
        "input_lens": [10, 20, 30],
        "output_lens": [3, 4, 0],
        "ttfts": [0.125, 0.25, 0.0],
        "itls": [[0.5, 0.25], [0.0, None, 0.125], []],
        "errors": ["", "", "Bad Request"],
    }


def write_json(tmp_path: Path, data: Any, name: str = "vllm.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def as_tuples(log) -> list[tuple]:
    return [(r.request_id, r.arrival_s, r.first_token_s, r.finish_s, r.prompt_tokens,
             r.output_tokens, r.status) for r in log.requests]


def where(exc: InputError) -> tuple:
    return (exc.reason, exc.file, exc.line, exc.field)


def test_vllm_values_are_read_exactly(tmp_path):
    path = write_json(tmp_path, vllm_data())
    log = read_vllm_requests(path)
    assert (log.file, log.fmt, log.clock) == (path, "vllm", "monotonic")
    assert as_tuples(log) == [
        # finish = first token + the sum of the ITLs (a null or 0.0 gap adds nothing)
        ("0", 100.0, 100.125, 100.875, 10, 3, "ok"),
        ("1", 100.5, 100.75, 100.875, 20, 4, "ok"),
        # a failed request keeps its arrival and counts but has no first token or finish
        ("2", 101.0, None, None, 30, 0, "error"),
    ]
    assert [r.requested_output_tokens for r in log.requests] == [None] * 3


def test_vllm_optional_arrays_absent(tmp_path):
    data = vllm_data()
    for key in ("output_lens", "itls", "errors"):
        del data[key]
    log = read_vllm_requests(write_json(tmp_path, data))
    # no errors: every request succeeded; no itls: no finish; no output_lens: null, not 0
    assert as_tuples(log) == [
        ("0", 100.0, 100.125, None, 10, None, "ok"),
        ("1", 100.5, 100.75, None, 20, None, "ok"),
        ("2", 101.0, 101.0, None, 30, None, "ok"),
    ]


def test_vllm_e2els_give_the_finish_over_the_itls(tmp_path):
    data = vllm_data()
    data["e2els"] = [2.0, None, 7.0]
    log = read_vllm_requests(write_json(tmp_path, data))
    assert [(r.first_token_s, r.finish_s) for r in log.requests] == [
        (100.125, 102.0),     # start + e2el (not first token + sum(itls) = 100.875)
        (100.75, 100.875),    # a null e2el falls back to the ITLs
        (None, None),         # failed: neither
    ]
    del data["itls"]
    log = read_vllm_requests(write_json(tmp_path, data))
    assert [r.finish_s for r in log.requests] == [102.0, None, None]


def test_vllm_zero_and_null_itl_gaps_add_nothing(tmp_path):
    data = vllm_data()
    data["itls"] = [[0.0, 0.0], [None], [None, 0.0]]
    data["errors"] = ["", "", ""]
    log = read_vllm_requests(write_json(tmp_path, data))
    assert [r.finish_s for r in log.requests] == [100.125, 100.75, 101.0]
    assert [r.status for r in log.requests] == ["ok", "ok", "ok"]


@pytest.mark.parametrize("key", ["input_lens", "output_lens", "ttfts", "itls", "errors", "e2els"])
def test_vllm_ragged_array_names_its_field(tmp_path, key):
    data = vllm_data()
    data["e2els"] = [2.0, 3.0, 4.0]
    data[key].pop()
    path = write_json(tmp_path, data)
    with pytest.raises(InputError) as info:
        read_vllm_requests(path)
    assert where(info.value) == ("2 entries where the other arrays have 3", str(path), None, key)


@pytest.mark.parametrize("key,value,reason", [
    ("start_times", "soon", "request 1: value 'soon' is not a finite number"),
    ("ttfts", True, "request 1: value True is not a finite number"),
    ("e2els", "long", "request 1: value 'long' is not a finite number"),
    ("itls", [0.25, "x"], "request 1: value 'x' is not a finite number"),
    ("itls", 0.5, "request 1: expected a list of seconds"),
    ("itls", None, "request 1: expected a list of seconds"),
    ("input_lens", 1.5, "request 1: value 1.5 is not a token count"),
    ("input_lens", "20", "request 1: value '20' is not a finite number"),
    ("output_lens", -1, "request 1: value -1 is not a token count"),
    ("output_lens", [4], "request 1: value [4] is not a finite number"),
], ids=["start", "ttft-bool", "e2el", "itl-gap", "itls-number", "itls-null", "input-frac",
        "input-str", "output-neg", "output-list"])
def test_vllm_bad_value_names_file_field_and_request(tmp_path, key, value, reason):
    data = vllm_data()
    data["e2els"] = [2.0, 3.0, 4.0]
    if key == "itls":
        del data["e2els"]  # the ITLs are read only without an e2el
    data[key][1] = value
    path = write_json(tmp_path, data)
    with pytest.raises(InputError) as info:
        read_vllm_requests(path)
    assert where(info.value) == (reason, str(path), None, key)


def test_vllm_a_failed_request_reads_no_itls_or_e2els(tmp_path):
    data = vllm_data()
    data["itls"][2] = "not a list"
    log = read_vllm_requests(write_json(tmp_path, data))
    assert log.requests[2].finish_s is None and log.requests[2].status == "error"
    data["e2els"] = [2.0, 3.0, "x"]
    log = read_vllm_requests(write_json(tmp_path, data))
    assert log.requests[2].finish_s is None and log.requests[2].status == "error"


def _error_of(call) -> Exception:
    try:
        call()
    except Exception as exc:  # the wording of the underlying error is part of the reason
        return exc
    raise AssertionError("expected an error")


def test_vllm_unreadable_or_non_object_files(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"start_times": [1.0,', encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_vllm_requests(path)
    assert where(info.value) == ("not JSON (Expecting value)", str(path), 1, None)

    path.write_bytes(b'{"start_times": "\xff"}')
    with pytest.raises(InputError) as info:
        read_json_object(path)
    assert where(info.value) == ("not UTF-8 text (byte 17)", str(path), 1, None)

    missing = tmp_path / "absent.json"
    with pytest.raises(InputError) as info:
        read_vllm_requests(missing)
    assert where(info.value) == ("no such file", str(missing), None, None)

    for data, kind in (([1, 2], "list"), ("text", "str"), (None, "NoneType")):
        path = write_json(tmp_path, data)
        with pytest.raises(InputError) as info:
            read_vllm_requests(path)
        assert where(info.value) == (f"expected one JSON object, got {kind}", str(path), None,
                                     None)


def test_vllm_reads_utf8_text(tmp_path):
    path = tmp_path / "vllm.json"
    data = {**vllm_data(), "model_id": "modèle-ü"}
    path.write_bytes(json.dumps(data, ensure_ascii=False).encode("utf-8"))
    assert read_json_object(path)["model_id"] == "modèle-ü"


# ---------------------------------------------------------------------------------------------
# SGLang's ``--output-file --output-details`` JSON Lines
# ---------------------------------------------------------------------------------------------

NO_START_TIMES = (
    "SGLang's --output-details result saves no per-request start times, so its requests cannot "
    "be placed on the run clock: give the client's stdout of --backend sglang-oai-chat "
    "--print-requests instead (the serving engines in docs/recording.md)")


def write_lines(tmp_path: Path, lines: list[str], name: str = "sglang.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_sglang_jsonl_reads_the_last_run(tmp_path):
    older = {**vllm_data(), "start_times": [1.0, 2.0, 3.0]}
    newer = {**vllm_data(), "backend": "sglang", "output_lens": [5, 6, 7]}
    path = write_lines(tmp_path, [json.dumps(older), json.dumps(newer), "", "   "])
    log = read_sglang_requests(path)
    assert (log.file, log.fmt, log.clock) == (path, "sglang", "monotonic")
    assert as_tuples(log) == [
        ("0", 100.0, 100.125, 100.875, 10, 5, "ok"),
        ("1", 100.5, 100.75, 100.875, 20, 6, "ok"),
        ("2", 101.0, None, None, 30, 7, "error"),
    ]


def test_sglang_jsonl_values_are_bad_naming_the_file(tmp_path):
    data = vllm_data()
    data["ttfts"][0] = "quick"
    path = write_lines(tmp_path, [json.dumps(data)])
    with pytest.raises(InputError) as info:
        read_sglang_requests(path)
    assert where(info.value) == ("request 0: value 'quick' is not a finite number", str(path),
                                 None, "ttfts")


def _details(**drop: bool) -> str:
    data = vllm_data()
    for key in drop:
        del data[key]
    return json.dumps(data)


@pytest.mark.parametrize("lines,reason,line,field", [
    ([], "no benchmark run in the file", None, None),
    (["", "  ", "\t"], "no benchmark run in the file", None, None),
    ([_details(), "[1, 2]", ""], "expected one JSON object per line", 2, None),
    (["42"], "expected one JSON object per line", 1, None),
    ([_details(), "", _details(ttfts=True)],
     "no per-request details: run bench_serving with --output-details", 3, "ttfts"),
    ([_details(start_times=True), ""], NO_START_TIMES, 1, "start_times"),
], ids=["empty", "blank", "list", "number", "no-ttfts", "no-start-times"])
def test_sglang_jsonl_errors(tmp_path, lines, reason, line, field):
    path = write_lines(tmp_path, lines)
    with pytest.raises(InputError) as info:
        read_sglang_requests(path)
    assert where(info.value) == (reason, str(path), line, field)


def test_sglang_jsonl_last_line_not_json(tmp_path):
    path = write_lines(tmp_path, [_details(), "", '{"ttfts": [0.1', ""])
    exc = _error_of(lambda: json.loads('{"ttfts": [0.1'))
    with pytest.raises(InputError) as info:
        read_sglang_requests(path)
    assert where(info.value) == (f"not JSON: {exc}", str(path), 3, None)


def test_sglang_unreadable_file(tmp_path):
    missing = tmp_path / "absent.jsonl"
    exc = _error_of(missing.read_text)
    with pytest.raises(InputError) as info:
        read_sglang_requests(missing)
    assert where(info.value) == (f"Failed to read: FileNotFoundError: {exc}", str(missing), None,
                                 None)
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"backend": "caf\xe9"}\n')
    exc = _error_of(lambda: path.read_text(encoding="utf-8"))
    with pytest.raises(InputError) as info:
        read_sglang_requests(path)
    assert where(info.value) == (f"Failed to read: UnicodeDecodeError: {exc}", str(path), None,
                                 None)


# ---------------------------------------------------------------------------------------------
# SGLang's ``--print-requests`` stdout log
# ---------------------------------------------------------------------------------------------


DROP = object()


class Raw(str):
    """A keyword value printed as is (not through ``repr``)."""


def rfo(**kw: Any) -> str:
    """The repr of a ``RequestFuncOutput`` as the client prints it (``key=DROP`` leaves it out)."""
    fields: dict[str, Any] = {
        "generated_text": "...", "success": True, "latency": 1.5, "ttft": 0.125, "tpot": None,
        "itl": [0.02, 0.02], "text_chunks": ['He said "hi", ttft=9'], "prompt_len": 128,
        "error": "", "output_len": 4, "start_time": 5000.0, "cached_tokens": 0}
    fields.update(kw)
    parts = [f"{k}={v if isinstance(v, Raw) else repr(v)}" for k, v in fields.items()
             if v is not DROP]
    return "RequestFuncOutput(" + ", ".join(parts) + ")"


def start_line(rid: str, time: float = 1764547203.0) -> str:
    return (f'rid={rid} time={time} message="request start" request_func_input='
            f'"RequestFuncInput(prompt=\'...\', prompt_len=128, output_len=4)"')


def end_line(rid: str, output: str, *, time: Any = 1764547203.5, delta: Any = 1.5) -> str:
    return f'rid={rid} time={time} time_delta={delta} message="request end" output="{output}"'


def write_log(tmp_path: Path, lines: list[str]) -> Path:
    return write_lines(tmp_path, lines, name="client.log")


def test_print_requests_log_without_warmup_on_the_monotonic_clock(tmp_path):
    path = write_log(tmp_path, [
        "benchmark_args=Namespace(backend='sglang-oai-chat', print_requests=True)",
        start_line("rid-a"),
        end_line("rid-a", rfo(start_time=5000.0, ttft=0.125, latency=1.5, prompt_len=0,
                              output_len=7)),
        start_line("rid-b"),
        end_line("rid-b", rfo(success=False, start_time=5000.25, ttft=0.0, latency=0.0,
                              prompt_len=64, output_len=-1, error="Traceback ...\n")),
        end_line("rid-c", rfo(start_time=5000.5, ttft=0.25, latency=2.0, prompt_len=32,
                              output_len=0)),
    ])
    log = read_sglang_requests(path)
    assert (log.file, log.fmt, log.clock) == (path, "sglang", "monotonic")
    assert as_tuples(log) == [
        ("rid-a", 5000.0, 5000.125, 5001.5, 0, 7, "ok"),
        # failed: no first token, finish or output count (not even a bad one is read)
        ("rid-b", 5000.25, None, None, 64, None, "error"),
        ("rid-c", 5000.5, 5000.75, 5002.5, 32, 0, "ok"),
    ]


def test_print_requests_log_on_the_wall_clock(tmp_path):
    # one request without start_time (0.0) puts every request on the wall clock
    path = write_log(tmp_path, [
        end_line("w1", rfo(start_time=5000.0), time=1764547204.5, delta=1.25),
        end_line("w2", rfo(start_time=0.0, ttft=0.5, latency=1.0), time=1764547205.0,
                 delta=0.75),
    ])
    log = read_sglang_requests(path)
    assert (log.fmt, log.clock) == ("sglang", "unix")
    assert as_tuples(log) == [
        ("w1", 1764547203.25, 1764547203.375, 1764547204.75, 128, 4, "ok"),
        ("w2", 1764547204.25, 1764547204.75, 1764547205.25, 128, 4, "ok"),
    ]
    path = write_log(tmp_path, [end_line("w3", rfo(start_time=DROP), time=100.5, delta=0.5)])
    log = read_sglang_requests(path)
    assert log.clock == "unix" and log.requests[0].arrival_s == 100.0


def test_print_requests_log_leaves_out_the_warm_up(tmp_path):
    path = write_log(tmp_path, [
        end_line("before", rfo(start_time=4999.0)),
        "Starting warmup with 1 sequences...",
        end_line("warm", rfo(start_time=4999.5)),
        "Warmup completed with 1 sequences. Starting main benchmark run...",
        end_line("main", rfo(start_time=5000.0)),
    ])
    assert [r.request_id for r in read_sglang_requests(path).requests] == ["before", "main"]


NOT_AN_END_LINE = ('a "request end" line that is not rid=... time=... time_delta=... '
                   'output="..."')
NO_REQUEST = ("no benchmark request in the log (only warm-up, or no --print-requests lines)")


def _syntax_msg(text: str) -> str:
    exc = _error_of(lambda: ast.parse(text, mode="eval"))
    assert isinstance(exc, SyntaxError)
    return exc.msg


@pytest.mark.parametrize("bad,reason,field", [
    ('rid=x time=1.0 message="request end" output="RequestFuncOutput(success=True)"',
     NOT_AN_END_LINE, "output"),
    (end_line("x", "RequestFuncOutput(success=True, latency=1.5"),
     "the printed output is not a RequestFuncOutput: "
     + _syntax_msg("RequestFuncOutput(success=True, latency=1.5"), "output"),
    (end_line("x", "dict(success=True, latency=1.5, ttft=0.1)"),
     "the printed output is not a RequestFuncOutput(...)", "output"),
    (end_line("x", "[1, 2]"), "the printed output is not a RequestFuncOutput(...)", "output"),
    (end_line("x", rfo(ttft=Raw("compute()"))), "ttft is not a literal value", "ttft"),
    (end_line("x", rfo(start_time=Raw("t0"))), "start_time is not a literal value", "start_time"),
    (end_line("x", rfo(latency=DROP)), "the printed RequestFuncOutput has no latency", "latency"),
    (end_line("x", rfo(ttft=DROP)), "the printed RequestFuncOutput has no ttft", "ttft"),
    (end_line("x", rfo(success=DROP, ttft=DROP)), "the printed RequestFuncOutput has no success",
     "success"),
    (end_line("x", rfo(start_time="soon")), "start_time='soon' is not a finite number",
     "start_time"),
    (end_line("x", rfo(ttft=None)), "ttft=None is not a finite number", "ttft"),
    (end_line("x", rfo(latency="slow")), "latency='slow' is not a finite number", "latency"),
    (end_line("x", rfo(latency=True)), "latency=True is not a finite number", "latency"),
    (end_line("x", rfo(prompt_len=-1)), "prompt_len=-1 is not a token count", "prompt_len"),
    (end_line("x", rfo(prompt_len=True)), "prompt_len=True is not a token count", "prompt_len"),
    (end_line("x", rfo(prompt_len="7")), "prompt_len='7' is not a token count", "prompt_len"),
    (end_line("x", rfo(prompt_len=7.5)), "prompt_len=7.5 is not a token count", "prompt_len"),
    (end_line("x", rfo(output_len=-2)), "output_len=-2 is not a token count", "output_len"),
    (end_line("x", rfo(output_len=False)), "output_len=False is not a token count",
     "output_len"),
    (end_line("x", rfo(start_time=0.0), time="abc"), "time='abc' is not a finite number",
     "time"),
    (end_line("x", rfo(start_time=0.0), delta="nan"), "time_delta=nan is not a finite number",
     "time_delta"),
    (end_line("x", rfo(start_time=0.0), delta="1.0s"),
     "time_delta='1.0s' is not a finite number", "time_delta"),
], ids=["not-end-line", "syntax", "not-rfo", "list", "ttft-call", "start-name", "no-latency",
        "no-ttft", "no-success-first", "start-str", "ttft-none", "latency-str", "latency-bool",
        "prompt-neg", "prompt-bool", "prompt-str", "prompt-float", "output-neg", "output-bool",
        "time-str", "delta-nan", "delta-unit"])
def test_print_requests_log_errors_name_file_line_and_field(tmp_path, bad, reason, field):
    path = write_log(tmp_path, [
        "Starting warmup with 1 sequences...",
        "Warmup completed with 1 sequences. Starting main benchmark run...",
        start_line("ok"),
        end_line("ok", rfo()),
        bad,
        "============ Serving Benchmark Result ============",
    ])
    with pytest.raises(InputError) as info:
        read_sglang_requests(path)
    assert where(info.value) == (reason, str(path), 5, field)


def test_a_bad_line_in_the_warm_up_is_still_an_error(tmp_path):
    path = write_log(tmp_path, ["Starting warmup with 1 sequences...",
                                end_line("w", "RequestFuncOutput(")])
    with pytest.raises(InputError) as info:
        read_sglang_requests(path)
    assert (info.value.file, info.value.line, info.value.field) == (str(path), 2, "output")


@pytest.mark.parametrize("lines", [
    ["Starting warmup with 1 sequences...", end_line("w", rfo())],
    ['INFO client: message="request end" seen', "rid-less line"],
], ids=["only-warm-up", "no-rid-lines"])
def test_print_requests_log_without_a_benchmark_request(tmp_path, lines):
    path = write_log(tmp_path, lines)
    with pytest.raises(InputError) as info:
        read_sglang_requests(path)
    assert where(info.value) == (NO_REQUEST, str(path), None, "output")
