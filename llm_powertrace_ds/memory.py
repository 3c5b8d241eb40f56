"""Process memory tuning for the batch commands: keep freed buffers for the next run's reuse.

A batch command (``import``, ``validate``, ``pack``, ``card``: each calls
:func:`reuse_freed_memory` first; ``generate`` and ``record``, which host a workload, do not)
handles run after run of similar
size: each file's bytes, its parsed columns and its aligned node total are allocated, used and
freed, then allocated again for the next run. glibc's ``malloc`` serves allocations above its
(dynamic) mmap threshold with fresh ``mmap`` pages and returns them to the kernel on ``free``,
so every run pays first-touch page faults for all of its buffers again — measured at ≈ 10 % of
an import's CPU time (user + system) on this project's 2-core VM, where a page fault is dear.

:func:`reuse_freed_memory` raises the mmap threshold and the trim threshold with ``mallopt``
(the same knobs as the ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` environment
variables, set at run time), so freed buffers stay in the heap and the next run reuses them. It
does not grow memory with the number of runs: what is kept is what the largest run needed, and
the peak RSS of a batch stays bounded by its largest file (``bench/scale.py``,
``import_rss_ratio``). Arrow's own pool (mimalloc) is left as it is.

On a C library without ``mallopt`` (macOS, musl) it does nothing. Standard library only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1
"""``mallopt`` parameter: free memory at the heap's top kept before it is returned (glibc)."""
M_MMAP_THRESHOLD = -3
"""``mallopt`` parameter: allocations at least this large get their own ``mmap`` (glibc)."""
MMAP_THRESHOLD_BYTES = 512 * 1024 * 1024
"""Allocations below 512 MiB come from the heap (a 2-hour 8-GPU run's largest buffer is
≈ 60 MB)."""
TRIM_THRESHOLD_BYTES = 1024 * 1024 * 1024
"""Up to 1 GiB of freed heap is kept for reuse rather than returned to the kernel."""

_done: bool | None = None


def reuse_freed_memory() -> bool:
    """Ask glibc ``malloc`` to keep freed large buffers for reuse (once per process).

    Returns:
        ``True`` when both settings were accepted, ``False`` where ``mallopt`` is missing or
        refused them (the process then runs with the C library's defaults).
    """
    global _done
    if _done is not None:
        return _done
    _done = False
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    return _done
