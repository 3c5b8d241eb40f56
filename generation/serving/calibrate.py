"""Capacity calibration: the saturation throughput of a served configuration.

An arrival sweep may give its rate as a fraction of the engine's capacity
(``arrival_rate: 0.5x``). Before the sampler starts (outside the measured window), a closed
loop of ``concurrency`` clients — enough to keep the engine saturated — sends
``num_requests`` requests of the run's own length distribution; the capacity is

    capacity_rps = completed / (last finish - first arrival)
    capacity_tokens_per_s = generated tokens of the completed requests / (same span)

and the run's absolute rate is ``fraction x capacity_rps``. The run records both, with the
calibration's request count and duration. A calibration in which no request completes raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from generation.workloads import arrivals as arr
from generation.workloads.inference.loop import ServingLoop


@dataclass(frozen=True)
class Capacity:
    """A measured saturation throughput.

    Attributes:
        requests_per_s: completed requests per second (see the module docstring).
        tokens_per_s: generated tokens per second of the completed requests.
        requests: requests sent.
        completed: requests that completed.
        concurrency: the closed loop's clients.
        seconds: the calibration's wall time.
    """

    requests_per_s: float
    tokens_per_s: float
    requests: int
    completed: int
    concurrency: int
    seconds: float

    def columns(self) -> dict[str, float | int]:
        """The run columns it fills."""
        return {"capacity_rps": self.requests_per_s, "capacity_tokens_per_s": self.tokens_per_s,
                "calibration_requests": self.requests, "calibration_s": self.seconds}


def calibration_stream(lengths: arr.Lengths, num_requests: int, seed: int) -> arr.RequestStream:
    """A closed-loop stream of the run's lengths (its own seed: not the run's requests)."""
    return arr.RequestStream(arr.ArrivalProcess("closed"), lengths, num_requests=num_requests,
                             seed=seed + 1_000_003)


def measure_capacity(engine: object, stream: arr.RequestStream, *, concurrency: int,
                     prompts: Callable[[arr.Request], list[int]]) -> Capacity:
    """Serve ``stream`` (closed loop) at ``concurrency`` on ``engine``; return its throughput.

    Args:
        engine: an engine of the serving loop's interface (e.g. ``HttpEngine``).
        stream: a closed-loop stream (:func:`calibration_stream`).
        concurrency: clients in flight (at least the engine's batch limit, to saturate it).
        prompts: ``prompts(request) -> token ids``.

    Raises:
        RuntimeError: no request completed.
    """
    started = time.monotonic()
    loop = ServingLoop(stream, prompts, concurrency=concurrency)
    loop.bind(engine)
    records = loop.run()
    seconds = time.monotonic() - started
    done = [r for r in records if r.status == "ok" and r.finish_ns is not None]
    if not done:
        raise RuntimeError("capacity calibration: no request completed")
    first = min(r.arrival_ns for r in records)
    last = max(int(r.finish_ns) for r in done if r.finish_ns is not None)
    span_s = max((last - first) / 1e9, 1e-9)
    tokens = sum(r.output_tokens for r in done)
    return Capacity(len(done) / span_s, tokens / span_s, len(records), len(done),
                    int(concurrency), seconds)
