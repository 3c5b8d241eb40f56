"""What the ``generate`` of this process is part of: a multi-node launch, a parallel-runs slot.

The runner asks this module, never :mod:`generation.multinode` or
:mod:`generation.parallel_runs` (they build on the runner): a multi-node launch registers its
hooks here for the time of its sweep, and a slot of ``--parallel-runs`` is told by its
environment.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

SLOT_ENV = "LLM_POWERTRACE_PARALLEL_SLOT"
RUNS_ENV = "LLM_POWERTRACE_PARALLEL_RUNS"


@dataclass(frozen=True)
class MultiNode:
    """A multi-node launch in progress (node 0): its size and how it measures and merges.

    Attributes:
        nnodes: nodes of every run.
        measure: measures one run across the nodes (replaces the runner's own measuring).
        merge: adds the other nodes' devices and events to node 0's run record.
    """

    nnodes: int
    measure: Callable[..., dict[str, Any]]
    merge: Callable[..., None]


_ACTIVE: list[MultiNode] = []


def multi_node() -> MultiNode | None:
    """The multi-node launch this process leads, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextlib.contextmanager
def leading(launch: MultiNode) -> Iterator[None]:
    """Register a multi-node launch for the duration of its sweep."""
    _ACTIVE.append(launch)
    try:
        yield
    finally:
        _ACTIVE.remove(launch)


def parallel_columns(env: dict[str, str] | None = None) -> dict[str, int]:
    """``parallel_runs`` and ``parallel_slot`` of a run measured in a slot (empty otherwise)."""
    env = dict(os.environ) if env is None else env
    if SLOT_ENV not in env or RUNS_ENV not in env:
        return {}
    return {"parallel_runs": int(env[RUNS_ENV]), "parallel_slot": int(env[SLOT_ENV])}
