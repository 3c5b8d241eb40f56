"""The serving loop: admission under an arrival process, events on explicit timestamps."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from .. import arrivals as arr
from .engines import Completion, Job
from .requests import RequestRecord

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Events on explicit timestamps
# ---------------------------------------------------------------------------------------------

class _StampClock:
    """An ``EventRecorder`` clock that returns a timestamp set for the calling thread."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __call__(self) -> int:
        t = getattr(self._local, "t_ns", None)
        return time.monotonic_ns() if t is None else t

    @contextlib.contextmanager
    def at(self, t_ns: int) -> Iterator[None]:
        self._local.t_ns = int(t_ns)
        try:
            yield
        finally:
            self._local.t_ns = None


class EventSink:
    """Run-level events at explicit monotonic times, through ``generation.events``.

    Args:
        staging_dir: the run's staging folder; ``None`` drops events (benchmarks).
    """

    def __init__(self, staging_dir: str | os.PathLike[str] | None) -> None:
        self._clock = _StampClock()
        self._rec = None
        if staging_dir is not None:
            from generation.events import EventRecorder

            self._rec = EventRecorder(staging_dir, rank=None, clock=self._clock)

    def mark(self, kind: str, t_ns: int, *, request_id: str | None = None,
             label: str | None = None) -> None:
        """Record a run-level event at ``t_ns``."""
        if self._rec is None:
            return
        with self._clock.at(t_ns):
            self._rec.mark(kind, request_id=request_id, label=label, rank=None)

    def close(self) -> None:
        if self._rec is not None:
            self._rec.close()


# ---------------------------------------------------------------------------------------------
# The serving loop
# ---------------------------------------------------------------------------------------------

class ServingLoop:
    """Admit a request stream into an engine, up to ``concurrency`` in flight.

    Args:
        stream: the requests (open loop: scheduled offsets; closed: released by the loop).
        prompts: ``prompts(request) -> token ids`` (exactly ``prompt_tokens`` long).
        concurrency: the most requests in flight (the closed loop's clients).
        events: where run-level events go (``None``: nowhere).
        drain_timeout_s: bounded draining: once no request will arrive any more, requests
            still waiting or in flight ``drain_timeout_s`` after the last arrival are given up
            (``unfinished``; an engine with ``cancel`` cancels them). ``None``: unbounded.

    The engine (:class:`StaticEngine` or :class:`ContinuousEngine`) is attached with
    :meth:`bind`.
    """

    def __init__(self, stream: arr.RequestStream, prompts: Callable[[arr.Request], list[int]],
                 *, concurrency: int, events: EventSink | None = None,
                 drain_timeout_s: float | None = None) -> None:
        self.stream = stream
        self.prompts = prompts
        self.concurrency = int(concurrency)
        self.events = events or EventSink(None)
        self.engine: Any = None
        self.records: dict[str, RequestRecord] = {}
        self.max_in_flight = 0
        self.t_start_ns: int | None = None
        self.drain_timeout_s = drain_timeout_s
        self.last_arrival_ns: int | None = None

    def bind(self, engine: Any) -> None:
        self.engine = engine

    def _arrive(self, req: arr.Request, now: int) -> RequestRecord:
        rec = RequestRecord(req.request_id, req.prompt_tokens, req.output_tokens, now)
        self.records[req.request_id] = rec
        self.last_arrival_ns = now
        self.events.mark("request_arrival", now, request_id=req.request_id)
        return rec

    def run(self) -> list[RequestRecord]:
        """Serve the whole stream; return the request log in arrival order.

        Raises:
            RuntimeError: no engine bound, or every request failed (with the first error).
        """
        if self.engine is None:
            raise RuntimeError("no engine bound")
        engine = self.engine
        closed = not self.stream.arrivals.open_loop
        requests = iter(self.stream)
        waiting: deque[tuple[arr.Request, RequestRecord]] = deque()
        in_flight: dict[str, arr.Request] = {}
        busy = False  # a static batch is running
        errors: list[str] = []
        t0 = time.monotonic_ns()
        self.t_start_ns = t0
        deadline = None
        if self.stream.target_duration_s is not None:
            deadline = t0 + int(self.stream.target_duration_s * 1e9)
        exhausted = False  # no request will arrive any more

        def pull() -> arr.Request | None:
            nonlocal exhausted
            req = None if exhausted else next(requests, None)
            if req is None:
                exhausted = True
            return req

        def due_ns(req: arr.Request) -> int:  # open loops only: every request has an offset
            if req.offset_s is None:
                raise ValueError(f"request {req.request_id} of an open loop has no offset")
            return t0 + int(round(req.offset_s * 1e9))

        next_req: arr.Request | None = None
        if closed:  # every client sends its first request now
            for _ in range(self.concurrency):
                req = pull()
                if req is None:
                    break
                waiting.append((req, self._arrive(req, time.monotonic_ns())))
        else:
            next_req = pull()

        while True:
            # open loop: release every arrival that is due
            now = time.monotonic_ns()
            while next_req is not None and due_ns(next_req) <= now:
                waiting.append((next_req, self._arrive(next_req, now)))
                next_req = pull()
                now = time.monotonic_ns()
            # admit up to the concurrency (static: only when no batch is running)
            if waiting and (engine.admits_while_busy or not busy) \
                    and len(in_flight) < self.concurrency:
                busy = True
                self._admit(waiting, in_flight)
            if not in_flight and not waiting and next_req is None and exhausted:
                break
            # wait for results, or until the next arrival is due (or the drain ends)
            timeout = None
            if next_req is not None:
                timeout = max(0.0, (due_ns(next_req) - time.monotonic_ns()) / 1e9)
            drain_end = self._drain_end_ns(closed, exhausted, next_req, in_flight)
            if drain_end is not None:
                left = (drain_end - time.monotonic_ns()) / 1e9
                if left <= 0:
                    self._give_up(waiting, in_flight)
                    break
                timeout = left if timeout is None else min(timeout, left)
            for done in engine.wait(timeout):
                in_flight.pop(done.request_id)
                self._complete(self.records[done.request_id], done)
                if done.error:
                    errors.append(done.error)
                if closed:  # the client sends its next request at once (until the deadline)
                    t = time.monotonic_ns()
                    if deadline is not None and t >= deadline:
                        exhausted = True
                    follow = pull()
                    if follow is not None:
                        waiting.append((follow, self._arrive(follow, t)))
            busy = bool(in_flight)
        return self._request_log(errors)

    def _drain_end_ns(self, closed: bool, exhausted: bool, next_req: arr.Request | None,
                      in_flight: dict[str, arr.Request]) -> int | None:
        """When draining must end (``None``: not draining, or unbounded).

        Draining starts when no request will arrive any more: an open loop's stream is
        exhausted; a closed loop has released its last request (it cannot release more once the
        stream is exhausted).
        """
        if self.drain_timeout_s is None or self.last_arrival_ns is None:
            return None
        if next_req is not None or not exhausted:
            return None
        return self.last_arrival_ns + int(self.drain_timeout_s * 1e9)

    def _give_up(self, waiting: deque[tuple[arr.Request, RequestRecord]],
                 in_flight: dict[str, arr.Request]) -> None:
        """End the drain: every request still waiting or in flight becomes ``unfinished``."""
        ids = list(in_flight)
        cancel = getattr(self.engine, "cancel", None)
        if ids and cancel is not None:
            cancel(ids)
        for rid in ids:
            self.records[rid].status = "unfinished"
        for _, rec in waiting:
            rec.status = "unfinished"
        if ids or waiting:
            log.warning("drain timeout (%g s after the last arrival): %d request(s) unfinished",
                        self.drain_timeout_s, len(ids) + len(waiting))
        in_flight.clear()
        waiting.clear()

    def _admit(self, waiting: deque[tuple[arr.Request, RequestRecord]],
               in_flight: dict[str, arr.Request]) -> None:
        """Start waiting requests, up to the concurrency, as one submission to the engine."""
        jobs = []
        while waiting and len(in_flight) < self.concurrency:
            req, rec = waiting.popleft()
            rec.start_ns = time.monotonic_ns()
            in_flight[req.request_id] = req
            jobs.append(Job(req.request_id, self.prompts(req), req.output_tokens))
        self.max_in_flight = max(self.max_in_flight, len(in_flight))
        self.engine.submit(jobs)

    def _request_log(self, errors: list[str]) -> list[RequestRecord]:
        """The request records in arrival order; ``RuntimeError`` when every request failed."""
        records = sorted(self.records.values(), key=lambda r: (r.arrival_ns, r.request_id))
        if records and all(r.status == "error" for r in records):
            raise RuntimeError(f"every request failed; first error: {errors[0] if errors else '?'}")
        return records

    def _complete(self, rec: RequestRecord, done: Completion) -> None:
        start = rec.start_ns if rec.start_ns is not None else rec.arrival_ns
        finish = max(done.finish_ns, start)
        first = done.first_token_ns
        if first is not None:
            first = min(max(first, start), finish)
        rec.finish_ns = finish
        rec.first_token_ns = first
        rec.output_tokens = int(done.output_tokens)
        if done.chunk_ns is not None:
            rec.chunk_ns = [min(max(t, start), finish) for t in done.chunk_ns]
            counts = done.chunk_tokens
            if counts is not None and len(counts) == len(done.chunk_ns) \
                    and sum(counts) == int(done.output_tokens):  # else not a count to trust
                rec.chunk_tokens = [int(k) for k in counts]
        if done.prompt_tokens is not None:
            rec.prompt_tokens = int(done.prompt_tokens)
        if done.error:
            rec.status, rec.error = "error", done.error
        elif rec.output_tokens != rec.requested_output_tokens:
            rec.status = "error"
            rec.error = (f"generated {rec.output_tokens} tokens, {rec.requested_output_tokens} "
                         "requested")
        else:
            rec.status = "ok"
        ev = self.events
        rid = rec.request_id
        if done.batch is None:  # continuous: per request
            if done.prefill_begin_ns is not None and first is not None:
                ev.mark("prefill_begin", max(done.prefill_begin_ns, start), request_id=rid)
                ev.mark("prefill_end", first, request_id=rid)
                ev.mark("decode_begin", first, request_id=rid)
                ev.mark("decode_end", finish, request_id=rid)
        elif done.request_id == self.engine.batches[done.batch][0] and first is not None:
            label = f"batch-{done.batch}"
            ev.mark("prefill_begin", done.prefill_begin_ns or start, label=label)
            ev.mark("prefill_end", first, label=label)
            ev.mark("decode_begin", first, label=label)
            ev.mark("decode_end", finish, label=label)
        ev.mark("request_finish", finish, request_id=rid)
