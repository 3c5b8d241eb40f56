"""SGLang's benchmark client's per-request log: ``bench_serving --print-requests`` on stdout.

SGLang's ``--output-details`` result file has no per-request start times (read in
``sglang/benchmark/serving.py`` of SGLang 0.5.23, the module ``python -m sglang.bench_serving``
now forwards to: its details are ``input_lens``, ``output_lens``, ``ttfts``, ``itls``,
``generated_texts`` and ``errors``). With ``--print-requests`` (the ``sglang-oai-chat`` backend)
the client prints, per request, two lines on stdout::

    rid=<uuid> time=<time.time()> message="request start" request_func_input="RequestFuncInput(...)"
    rid=<uuid> time=<time.time()> time_delta=<s> message="request end" output="RequestFuncOutput(...)"

and the ``RequestFuncOutput`` it prints holds the client's own measurements of that request:
``start_time`` (``time.perf_counter()`` when the request was sent: CLOCK_MONOTONIC on Linux, the
sampler's clock), ``ttft`` and ``latency`` (seconds after ``start_time``), ``success``,
``error``, ``prompt_len`` and ``output_len``. Per ``request end`` line::

    arrival_s     = start_time
    first_token_s = start_time + ttft          (success only; null for a failed request)
    finish_s      = start_time + latency       (success only)

A client without ``start_time`` in its output (``0.0``: older versions) is placed by the wall
clock instead: ``arrival_s = time - time_delta`` (the ``time.time()`` it printed at the start),
converted through the sampler's (monotonic, UTC) anchor. Nothing is estimated: every time is one
the client measured. The output is read with :func:`ast.literal_eval` on each keyword (never
evaluated as code). Requests printed between the lines ``Starting warmup ...`` and ``Warmup
completed ... Starting main benchmark run...`` are the client's warm-up and are left out, as
SGLang's own results leave them out.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path
from typing import Any

from ..errors import InputError
from .requests_common import MAX_TOKENS, Request, RequestLog

END_LINE = re.compile(r'^rid=(?P<rid>\S+) time=(?P<time>\S+) time_delta=(?P<delta>\S+) '
                      r'message="request end" output="(?P<output>.*)"\s*$')
END_MARK = 'message="request end"'
MAX_OUTPUT_CHARS = 1 << 20
"""Longest printed ``RequestFuncOutput(...)`` parsed (its generated text included)."""
WARMUP_BEGIN = "Starting warmup"
WARMUP_END = "Warmup completed"
NEEDED = ("success", "latency", "ttft", "prompt_len", "output_len", "error", "start_time")


def is_print_requests_log(text: str) -> bool:
    """Whether ``text`` holds ``--print-requests`` lines (``message="request end"``)."""
    return END_MARK in text


def _output_fields(text: str, *, file: Path, line: int) -> dict[str, Any]:
    """The keywords of a printed ``RequestFuncOutput(...)``, literal values only.

    The text is parsed only when it is at most :data:`MAX_OUTPUT_CHARS` long; a parser that
    runs out of stack or memory on a malformed line is a one-line error naming the line.
    """
    if len(text) > MAX_OUTPUT_CHARS:
        raise InputError(f"the printed output is {len(text)} characters; at most "
                         f"{MAX_OUTPUT_CHARS} are read", file=file, line=line, field="output")
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise InputError(f"the printed output is not a RequestFuncOutput: {exc.msg}",
                         file=file, line=line, field="output") from None
    except (MemoryError, RecursionError):
        raise InputError("the printed output is nested too deeply to be a RequestFuncOutput",
                         file=file, line=line, field="output") from None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "RequestFuncOutput"):
        raise InputError("the printed output is not a RequestFuncOutput(...)", file=file,
                         line=line, field="output")
    fields: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg in NEEDED:
            try:
                fields[kw.arg] = ast.literal_eval(kw.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise InputError(f"{kw.arg} is not a literal value", file=file, line=line,
                                 field=kw.arg) from None
    missing = [k for k in ("success", "latency", "ttft") if k not in fields]
    if missing:
        raise InputError("the printed RequestFuncOutput has no " + missing[0], file=file,
                         line=line, field=missing[0])
    return fields


def _num(value: Any, name: str, *, file: Path, line: int) -> float:
    """A finite number of seconds; anything else is an error naming file, line, field, value."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{name}={value!r} is not a finite number", file=file, line=line,
                         field=name)
    return float(value)


def _count(value: Any, name: str, *, file: Path, line: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{name}={value!r} is not a token count", file=file, line=line,
                         field=name)
    if value > MAX_TOKENS:
        raise InputError(f"{name}={str(value)[:40]} is not a token count (at most {MAX_TOKENS})",
                         file=file, line=line, field=name)
    return value


def _request(match: re.Match[str], fields: dict[str, Any], *, file: Path, line: int,
             monotonic: bool) -> Request:
    if monotonic:
        start = _num(fields["start_time"], "start_time", file=file, line=line)
    else:  # the time.time() printed at the request's start
        start = (_num(match["time"], "time", file=file, line=line)
                 - _num(match["delta"], "time_delta", file=file, line=line))
    ok = fields["success"] is True
    ttft = _num(fields["ttft"], "ttft", file=file, line=line)
    latency = _num(fields["latency"], "latency", file=file, line=line)
    return Request(
        request_id=match["rid"], arrival_s=start,
        first_token_s=start + ttft if ok else None,
        finish_s=start + latency if ok else None,
        prompt_tokens=_count(fields.get("prompt_len"), "prompt_len", file=file, line=line),
        output_tokens=(_count(fields.get("output_len"), "output_len", file=file, line=line)
                       if ok else None),
        status="ok" if ok else "error")


def read_print_requests_log(path: Path, text: str, *, fmt: str) -> RequestLog:
    """The benchmark's requests from a ``--print-requests`` stdout log (module docstring).

    Raises:
        InputError: a ``request end`` line that cannot be read (names file, line and field), or
            no request outside the warm-up.
    """
    found: list[tuple[re.Match[str], dict[str, Any], int]] = []
    warmup = False
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.startswith(WARMUP_BEGIN):
            warmup = True
        elif line.startswith(WARMUP_END):
            warmup = False
        elif line.startswith("rid=") and END_MARK in line:
            match = END_LINE.match(line)
            if match is None:
                raise InputError('a "request end" line that is not rid=... time=... '
                                 'time_delta=... output="..."', file=path, line=lineno,
                                 field="output")
            fields = _output_fields(match["output"], file=path, line=lineno)
            if not warmup:
                found.append((match, fields, lineno))
    if not found:
        raise InputError("no benchmark request in the log (only warm-up, or no --print-requests "
                         "lines)", file=path, field="output")
    monotonic = all(f.get("start_time") for _, f, _ in found)
    log = RequestLog(file=path, fmt=fmt, clock="monotonic" if monotonic else "unix")
    log.requests = [_request(m, f, file=path, line=n, monotonic=monotonic)
                    for m, f, n in found]
    return log


__all__ = ["is_print_requests_log", "read_print_requests_log"]
