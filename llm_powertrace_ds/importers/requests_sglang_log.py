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
from dataclasses import dataclass
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


def _request(found: _Found, *, file: Path, monotonic: bool) -> Request:
    fields, line = found.fields, found.line
    if monotonic:
        start = _num(fields["start_time"], "start_time", file=file, line=line)
    else:  # the time.time() printed at the request's start
        start = (_num(found.time, "time", file=file, line=line)
                 - _num(found.delta, "time_delta", file=file, line=line))
    ok = fields["success"] is True
    ttft = _num(fields["ttft"], "ttft", file=file, line=line)
    latency = _num(fields["latency"], "latency", file=file, line=line)
    return Request(
        request_id=found.rid, arrival_s=start,
        first_token_s=start + ttft if ok else None,
        finish_s=start + latency if ok else None,
        prompt_tokens=_count(fields.get("prompt_len"), "prompt_len", file=file, line=line),
        output_tokens=(_count(fields.get("output_len"), "output_len", file=file, line=line)
                       if ok else None),
        status="ok" if ok else "error")


@dataclass(frozen=True)
class _Found:
    """What is kept of one ``request end`` line: its numbers, never the line itself."""

    rid: str
    time: str
    delta: str
    fields: dict[str, Any]
    line: int


class PrintRequestsParser:
    """Reads a ``--print-requests`` log fed one line at a time (module docstring).

    Only each benchmark request's id, times and measured fields are kept, so memory grows with
    the number of requests, not with the printed outputs.

    Args:
        path: the log file (named in errors).
        fmt: the request-log format recorded in the result.
    """

    def __init__(self, path: Path, *, fmt: str) -> None:
        self.path = path
        self.fmt = fmt
        self.seen_end = False
        self._warmup = False
        self._found: list[_Found] = []

    def feed(self, lineno: int, line: str) -> None:
        """Take line ``lineno`` (1-based) of the log.

        Raises:
            InputError: a ``request end`` line that cannot be read (names file, line, field).
        """
        if END_MARK in line:
            self.seen_end = True
        if line.startswith(WARMUP_BEGIN):
            self._warmup = True
        elif line.startswith(WARMUP_END):
            self._warmup = False
        elif line.startswith("rid=") and END_MARK in line:
            match = END_LINE.match(line)
            if match is None:
                raise InputError('a "request end" line that is not rid=... time=... '
                                 'time_delta=... output="..."', file=self.path, line=lineno,
                                 field="output")
            fields = _output_fields(match["output"], file=self.path, line=lineno)
            if not self._warmup:
                self._found.append(_Found(match["rid"], match["time"], match["delta"], fields,
                                          lineno))

    def result(self) -> RequestLog:
        """The benchmark's requests of every line fed.

        Raises:
            InputError: no request outside the warm-up, or a value that is not a number.
        """
        if not self._found:
            raise InputError("no benchmark request in the log (only warm-up, or no "
                             "--print-requests lines)", file=self.path, field="output")
        monotonic = all(f.fields.get("start_time") for f in self._found)
        log = RequestLog(file=self.path, fmt=self.fmt,
                         clock="monotonic" if monotonic else "unix")
        log.requests = [_request(f, file=self.path, monotonic=monotonic) for f in self._found]
        return log


def read_print_requests_log(path: Path, text: str, *, fmt: str) -> RequestLog:
    """The benchmark's requests from a ``--print-requests`` stdout log already in memory.

    Raises:
        InputError: a ``request end`` line that cannot be read (names file, line and field), or
            no request outside the warm-up.
    """
    parser = PrintRequestsParser(path, fmt=fmt)
    for lineno, line in enumerate(text.splitlines(), start=1):
        parser.feed(lineno, line)
    return parser.result()


__all__ = ["PrintRequestsParser", "is_print_requests_log", "read_print_requests_log"]
