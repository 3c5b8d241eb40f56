"""memory: the batch commands keep freed buffers for reuse (glibc ``mallopt``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llm_powertrace_ds import memory

PROBE = (
    "import ctypes, ctypes.util, sys\n"
    "from llm_powertrace_ds import memory\n"
    "if sys.argv[1] == 'reuse':\n"
    "    print(memory.reuse_freed_memory(), memory.reuse_freed_memory())\n"
    "libc = ctypes.CDLL(ctypes.util.find_library('c'))\n"
    "libc.malloc.restype = ctypes.c_void_p\n"
    "libc.malloc.argtypes = [ctypes.c_size_t]\n"
    "class Info(ctypes.Structure):\n"
    "    _fields_ = [(n, ctypes.c_size_t) for n in ('arena', 'ordblks', 'smblks', 'hblks',\n"
    "                'hblkhd', 'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost')]\n"
    "libc.mallinfo2.restype = Info\n"
    "before = libc.mallinfo2().hblkhd\n"
    "block = libc.malloc(64 << 20)\n"
    "print(libc.mallinfo2().hblkhd - before)\n"  # bytes of the block that mmap served
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_reuse_freed_memory_serves_large_buffers_from_the_heap():
    """A 64 MiB buffer: glibc maps it on its own by default, from the heap once tuned.

    By default it is unmapped again on free; after ``reuse_freed_memory`` it comes from the
    heap, where a freed one is reused.
    """
    plain = subprocess.run([sys.executable, "-c", PROBE, "plain"], capture_output=True,
                           text=True, check=True).stdout.split()
    tuned = subprocess.run([sys.executable, "-c", PROBE, "reuse"], capture_output=True,
                           text=True, check=True).stdout.split()
    assert int(plain[0]) >= 64 << 20
    assert tuned == ["True", "True", "0"]


def test_reuse_freed_memory_is_a_no_op_without_mallopt(monkeypatch):
    monkeypatch.setattr(memory, "_done", None)
    monkeypatch.setattr(memory.sys, "platform", "darwin")
    assert memory.reuse_freed_memory() is False
    monkeypatch.setattr(memory, "_done", None)
