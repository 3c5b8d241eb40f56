"""The two batching engines (torch and transformers are imported when one is made)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import models

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Engines (torch and transformers are imported when one is made)
# ---------------------------------------------------------------------------------------------

@dataclass
class Job:
    """A request handed to an engine."""

    request_id: str
    prompt: list[int]
    output_tokens: int


@dataclass
class Completion:
    """What an engine reports for a finished request (monotonic ns).

    Attributes:
        request_id: the job's id.
        first_token_ns: when its first output token was produced.
        finish_ns: when its output was complete and delivered.
        output_tokens: tokens generated.
        prefill_begin_ns: when its prefill began (continuous: when it left the queue).
        batch: the static batch's index (``None`` with continuous batching).
        error: the engine's message, if it failed.
        chunk_ns: when each streamed chunk of output arrived (HTTP engines; ``None``
            where the engine does not stream).
        chunk_tokens: the tokens each of those chunks carried (``None``: not reported).
        prompt_tokens: the prompt length the server reports (``None``: as requested).
        cancelled: the request was cancelled (bounded draining, shutdown).
    """

    request_id: str
    first_token_ns: int | None
    finish_ns: int
    output_tokens: int
    prefill_begin_ns: int | None = None
    batch: int | None = None
    error: str | None = None
    chunk_ns: list[int] | None = None
    prompt_tokens: int | None = None
    cancelled: bool = False
    chunk_tokens: list[int] | None = None


def _perf_offset_ns() -> int:
    """``monotonic_ns - perf_counter_ns`` (0 where both are CLOCK_MONOTONIC, e.g. Linux)."""
    best = None
    for _ in range(5):
        a = time.monotonic_ns()
        p = time.perf_counter_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2 - p)
    assert best is not None
    return best[1]


class StaticEngine:
    """Static batching: one ``model.generate`` per batch, run to completion in a worker thread.

    The engine interface (shared with :class:`ContinuousEngine`): ``start()``, ``warmup(jobs)``
    (synchronous, not recorded), ``submit(jobs)`` (non-blocking), ``wait(timeout_s)`` (the
    completions that are ready, ``[]`` after ``timeout_s``; ``None`` waits), ``stop()``, and
    ``admits_while_busy`` (whether the loop may add requests while others are running).

    Args:
        model: a causal LM in eval mode.
        pad_id: the pad token id (prompts are left-padded).
        generate_kwargs: extra ``generate`` keyword arguments (e.g. the quantised cache).
    """

    admits_while_busy = False

    def __init__(self, model: Any, *, pad_id: int = models.PAD_ID,
                 generate_kwargs: dict[str, Any] | None = None) -> None:
        self.model = model
        self.pad_id = pad_id
        self.generate_kwargs = dict(generate_kwargs or {})
        self._jobs: queue.Queue[list[Job] | None] = queue.Queue()
        self._done: queue.Queue[list[Completion]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.batches: list[list[str]] = []
        """Request ids of each batch, in order (what the benchmark replays directly)."""

    def tensors(self, jobs: list[Job]) -> tuple[Any, Any]:
        """Left-padded ``input_ids`` and ``attention_mask`` of a batch."""
        import torch

        width = max(len(j.prompt) for j in jobs)
        ids = torch.full((len(jobs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(jobs), width), dtype=torch.long)
        for i, j in enumerate(jobs):
            ids[i, width - len(j.prompt):] = torch.tensor(j.prompt, dtype=torch.long)
            mask[i, width - len(j.prompt):] = 1
        device = self.model.device
        return ids.to(device), mask.to(device)

    def run_batch(self, jobs: list[Job], batch: int = 0) -> list[Completion]:
        """Generate one batch to completion (every row exactly its own forced length)."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        ids, mask = self.tensors(jobs)
        width = ids.shape[1]
        limits = torch.tensor([j.output_tokens for j in jobs], device=ids.device)
        longest = int(limits.max())
        cuda = ids.device.type == "cuda"
        stamps: list[int] = []

        class RowLimits(StoppingCriteria):
            """Stops each row at its own length; records when the first token was produced."""

            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                if not stamps:
                    if cuda:
                        torch.cuda.synchronize(input_ids.device)
                    stamps.append(time.monotonic_ns())
                return (input_ids.shape[1] - width) >= limits

        begin = time.monotonic_ns()
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=longest, min_new_tokens=longest,
            do_sample=False, pad_token_id=self.pad_id,
            stopping_criteria=StoppingCriteriaList([RowLimits()]), **self.generate_kwargs)
        if cuda:
            torch.cuda.synchronize(ids.device)
        end = time.monotonic_ns()
        generated = int(out.shape[1]) - width
        first = stamps[0] if stamps else end
        return [Completion(j.request_id, first, end, min(j.output_tokens, generated),
                           prefill_begin_ns=begin, batch=batch) for j in jobs]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="static-engine", daemon=True)
        self._thread.start()

    def submit(self, jobs: list[Job]) -> None:
        self.batches.append([j.request_id for j in jobs])
        self._jobs.put(jobs)

    def wait(self, timeout_s: float | None) -> list[Completion]:
        try:
            return self._done.get(timeout=timeout_s)
        except queue.Empty:
            return []

    def _work(self) -> None:
        import torch

        batch = 0
        with torch.inference_mode():
            while True:
                jobs = self._jobs.get()
                if jobs is None:
                    return
                try:
                    done = self.run_batch(jobs, batch)
                except Exception as exc:  # noqa: BLE001 - reported per request; the loop raises
                    now = time.monotonic_ns()
                    msg = f"{type(exc).__name__}: {exc}"
                    log.error("static batch %d failed: %s", batch, msg)
                    done = [Completion(j.request_id, None, now, 0, batch=batch, error=msg)
                            for j in jobs]
                batch += 1
                self._done.put(done)

    def warmup(self, jobs: list[Job]) -> None:
        """Run a batch synchronously (not recorded)."""
        import torch

        with torch.inference_mode():
            self.run_batch(jobs, -1)

    def stop(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=600)
            self._thread = None


def continuous_batching_config(*, concurrency: int, max_prompt: int, max_output: int,
                               device: str = "cpu", use_cuda_graph: bool = False,
                               use_async_batching: bool = False) -> Any:
    """A ``ContinuousBatchingConfig`` sized for the workload (not from free memory).

    The KV cache holds ``concurrency`` requests of the longest prompt + output, and a batch
    holds every in-flight request's prompt (capped at 8192 tokens; longer prefills are split).
    Sizing by the workload keeps CPU set-up fast (the auto-sizing fills a mask of the whole
    cache) and makes runs on different GPUs comparable. Nothing is left to transformers'
    heuristics: ``auto_switch_to_flash=False``, ``use_cuda_graph`` and ``use_async_batching``
    come from the sweep (CUDA graphs only exist on CUDA).
    """
    from transformers import ContinuousBatchingConfig

    page = 256 if device == "cuda" else 64
    per_request = -(-(max_prompt + max_output + 1) // page)
    num_blocks = concurrency * per_request + concurrency + 1
    max_batch_tokens = max(min(concurrency * max_prompt, 8192), min(max_prompt, 8192)) + concurrency
    return ContinuousBatchingConfig(page_size=page, num_blocks=num_blocks,
                                    max_batch_tokens=max_batch_tokens,
                                    max_requests_per_batch=concurrency,
                                    allow_block_sharing=False, return_logprobs=False,
                                    auto_switch_to_flash=False,
                                    use_cuda_graph=bool(use_cuda_graph and device == "cuda"),
                                    use_async_batching=bool(use_async_batching))


@dataclass(frozen=True)
class ContinuousBatchingOptions:
    """The ``cb_*`` settings of a continuous-batching run, typed (``settings.CB_SETTINGS``).

    Attributes:
        attn_implementation: the attention kernel (never switched automatically).
        use_cuda_graph: capture CUDA graphs (CUDA only).
        use_async_batching: double-buffered asynchronous batches.
    """

    attn_implementation: str = "sdpa"
    use_cuda_graph: bool = False
    use_async_batching: bool = False

    @classmethod
    def from_settings(cls, r: Mapping[str, Any] | None) -> ContinuousBatchingOptions:
        """The options of resolved settings ``r`` (defaults for absent or null values)."""
        r = r or {}
        return cls(attn_implementation=r.get("cb_attn_implementation") or "sdpa",
                   use_cuda_graph=bool(r.get("cb_use_cuda_graph")),
                   use_async_batching=bool(r.get("cb_use_async_batching")))


class ContinuousEngine:
    """``transformers`` continuous batching through a ``ContinuousBatchingManager``.

    Requests are added with ``add_request`` (``eos_token_id = -1``: EOS never ends a request;
    ``record_timestamps``: per-token stamps give the first-token time); finished results are
    read from the manager's output queue by the loop thread itself (:meth:`wait`). Same engine
    interface as :class:`StaticEngine`.

    Args:
        model: a causal LM in eval mode.
        concurrency, max_prompt, max_output: the workload's bounds (sizing the paged cache).
    """

    admits_while_busy = True
    POLL_S = 0.1

    def __init__(self, model: Any, *, concurrency: int, max_prompt: int,
                 max_output: int, attn_implementation: str = "sdpa",
                 use_cuda_graph: bool = False, use_async_batching: bool = False) -> None:
        self.model = model
        self.concurrency = concurrency
        self.max_prompt = max_prompt
        self.max_output = max_output
        self.attn_implementation = attn_implementation
        self.use_cuda_graph = use_cuda_graph
        self.use_async_batching = use_async_batching
        self.manager: Any = None
        self._resolved: dict[str, Any] = {}
        self._offset_ns = _perf_offset_ns()
        self._pending: set[str] = set()
        self._refused: list[Completion] = []

    def start(self) -> None:
        from transformers import GenerationConfig

        cb_log = logging.getLogger("ContinuousBatchingLogger")  # transformers' own, propagate off
        if cb_log.level == logging.NOTSET and not log.isEnabledFor(logging.DEBUG):
            cb_log.setLevel(logging.WARNING)  # its INFO lines would flood every run's output
        gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=models.PAD_ID,
                               max_new_tokens=self.max_output)
        cfg = continuous_batching_config(concurrency=self.concurrency, max_prompt=self.max_prompt,
                                         max_output=self.max_output,
                                         device=self.model.device.type,
                                         use_cuda_graph=self.use_cuda_graph,
                                         use_async_batching=self.use_async_batching)
        if self.model.config._attn_implementation != self.attn_implementation:
            self.model.set_attn_implementation(self.attn_implementation)
        self.manager = self.model.init_continuous_batching(generation_config=gen,
                                                           continuous_batching_config=cfg)
        if self.model.device.type == "cuda":
            self.manager.warmup()  # CUDA-graph capture now, not inside the measured window
        cfg = self.manager.continuous_batching_config  # as resolved by the manager
        graphs = cfg.use_cuda_graph
        self._resolved = {
            "cb_attn_implementation": self.model.config._attn_implementation,
            "cb_use_cuda_graph": bool(any(graphs) if isinstance(graphs, (tuple, list))
                                      else graphs),
            "cb_use_async_batching": bool(cfg.use_async_batching)}
        self.manager.start()

    def resolved_config(self) -> dict[str, Any]:
        """The configuration that ran (read back from the manager at start): ``cb_*`` columns."""
        return dict(self._resolved)

    def _ns(self, perf_s: float) -> int:
        return int(round(perf_s * 1e9)) + self._offset_ns

    def submit(self, jobs: list[Job]) -> None:
        for j in jobs:
            self._pending.add(j.request_id)
            rid = self.manager.add_request(j.prompt, request_id=j.request_id,
                                           max_new_tokens=j.output_tokens,
                                           record_timestamps=True, eos_token_id=-1)
            if rid is None:
                self._pending.discard(j.request_id)
                self._refused.append(Completion(j.request_id, None, time.monotonic_ns(), 0,
                                                error="the continuous-batching manager "
                                                "refused it"))

    def _completion(self, res: Any) -> Completion:
        stamps = res.timestamps or []
        begin = self._ns(res.lifespan[0]) if res.lifespan[0] > 0 else None
        finish = self._ns(res.lifespan[1]) if res.lifespan[1] > 0 else time.monotonic_ns()
        first = self._ns(stamps[0]) if stamps else None
        return Completion(res.request_id, first, finish, len(res.generated_tokens),
                          prefill_begin_ns=begin, error=res.error)

    def wait(self, timeout_s: float | None) -> list[Completion]:
        if self._refused:
            out, self._refused = self._refused, []
            return out
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = self.POLL_S if deadline is None else min(self.POLL_S,
                                                             deadline - time.monotonic())
            res = self.manager.get_result(timeout=max(left, 0.0))
            if res is not None:
                if not res.is_finished():
                    continue
                self._pending.discard(res.request_id)
                return [self._completion(res)]
            if not self.manager.is_running():  # the generation thread died
                err = self.manager.background_thread_status.fatal_error
                now = time.monotonic_ns()
                lost, self._pending = sorted(self._pending), set()
                return [Completion(rid, None, now, 0, error=f"engine stopped: {err}")
                        for rid in lost]
            if deadline is not None and time.monotonic() >= deadline:
                return []

    def warmup(self, jobs: list[Job]) -> None:
        """Serve ``jobs`` and wait for them (not recorded)."""
        self.submit([Job(f"warmup-{j.request_id}", j.prompt, j.output_tokens) for j in jobs])
        left = len(jobs)
        while left:
            done = self.wait(600)
            if not done:
                raise RuntimeError("continuous-batching warm-up timed out")
            for c in done:
                if c.error:
                    raise RuntimeError(f"continuous-batching warm-up failed: {c.error}")
            left -= len(done)

    def stop(self) -> None:
        if self.manager is not None:
            self.manager.stop(block=True, timeout=30)
            self.manager.destroy()
            self.manager = None
