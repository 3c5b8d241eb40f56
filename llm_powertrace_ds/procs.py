"""Process facts shared by the lock, journal and launcher code (standard library only)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (signal 0; no signal is sent).

    A pid we may not signal (``PermissionError``) belongs to a live process of another user.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group ``pgid`` still exists (signal 0 to the group).

    A group we may not signal (``PermissionError``) has a live process of another user.
    """
    if pgid <= 0:
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
