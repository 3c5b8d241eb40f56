"""The serving loop's engine interface over concurrent HTTP streams.

:class:`HttpEngine` is what ``generation.workloads.inference.loop.ServingLoop`` drives for the
``vllm``, ``sglang`` and ``openai`` serving engines: every submitted job is one streamed request
(:class:`generation.serving.client.CompletionStream`) in a thread of its own, so the loop's
admission (the arrival process) is never held up by a request in flight; finished requests are
handed back through a queue (:meth:`HttpEngine.wait`). :meth:`HttpEngine.cancel` ends requests
still in flight (bounded draining); :meth:`HttpEngine.stop` cancels what is left and joins every
thread. A request thread never dies of an exception: whatever a stream raises becomes that
request's one-line error.
"""

from __future__ import annotations

import queue
import threading
import time

from generation.workloads.inference.engines import Completion, Job

from .client import CompletionStream, StreamResult


class HttpEngine:
    """Streams each job to an OpenAI-compatible server (same interface as ``StaticEngine``).

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name.
        api: ``completions`` (token-id prompts) or ``chat``.
        timeout_s: the client timeout of one request (``None``: none).
    """

    admits_while_busy = True

    def __init__(self, base_url: str, model: str, *, api: str = "completions",
                 timeout_s: float | None = None) -> None:
        self.base_url = base_url
        self.model = model
        self.api = api
        self.timeout_s = timeout_s
        self.batches: list[list[str]] = []
        self._done: queue.Queue[Completion] = queue.Queue()
        self._streams: dict[str, CompletionStream] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        """Nothing to start: the server runs already (its health was checked)."""

    def submit(self, jobs: list[Job]) -> None:
        for job in jobs:
            stream = CompletionStream(self.base_url, self.model, api=self.api,
                                      timeout_s=self.timeout_s)
            thread = threading.Thread(target=self._work, args=(job, stream),
                                      name=f"http-{job.request_id}", daemon=True)
            with self._lock:
                self._streams[job.request_id] = stream
                self._threads[job.request_id] = thread
            thread.start()

    def _work(self, job: Job, stream: CompletionStream) -> None:
        try:
            res = stream.run(job.prompt, job.output_tokens)
        except BaseException as exc:  # noqa: BLE001 - a request's failure, never the thread's
            # (a traceback on stderr and a loop waiting forever for a completion that never
            # comes): the request fails with one line
            res = StreamResult(time.monotonic_ns(), finish_ns=time.monotonic_ns(),
                               error=f"unexpected {type(exc).__name__}: {exc}"[:300])
        with self._lock:
            self._streams.pop(job.request_id, None)
        self._done.put(completion(job.request_id, res))

    def wait(self, timeout_s: float | None) -> list[Completion]:
        """The completions that are ready (``[]`` after ``timeout_s``; ``None`` waits)."""
        try:
            first = self._done.get(timeout=timeout_s)
        except queue.Empty:
            return []
        out = [first]
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def cancel(self, request_ids: list[str]) -> None:
        """Cancel requests still in flight (their completions say ``cancelled``)."""
        with self._lock:
            streams = [self._streams[r] for r in request_ids if r in self._streams]
        for stream in streams:
            stream.cancel()

    def warmup(self, jobs: list[Job]) -> None:
        """Serve ``jobs`` concurrently and wait for them (not recorded).

        Raises:
            RuntimeError: a warm-up request failed (the server cannot serve the run).
        """
        self.submit(jobs)
        left = {j.request_id for j in jobs}
        while left:
            for done in self.wait(None):
                left.discard(done.request_id)
                if done.error:
                    raise RuntimeError(f"warm-up request failed: {done.error}")

    def stop(self, join_timeout_s: float = 30.0) -> None:
        """Cancel every request still in flight and join the request threads."""
        with self._lock:
            ids = list(self._streams)
            threads = list(self._threads.values())
            self._threads.clear()
        self.cancel(ids)
        deadline = time.monotonic() + join_timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def completion(request_id: str, res: StreamResult) -> Completion:
    """The loop's :class:`Completion` of one streamed request."""
    finish = res.finish_ns if res.finish_ns is not None else time.monotonic_ns()
    return Completion(request_id, res.first_token_ns, finish, res.output_tokens,
                      error=res.error, chunk_ns=list(res.chunk_ns),
                      chunk_tokens=None if res.chunk_tokens is None else list(res.chunk_tokens),
                      prompt_tokens=res.prompt_tokens, cancelled=res.cancelled)
