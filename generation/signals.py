"""SIGTERM and SIGHUP become a clean shutdown of ``generate``.

Slurm's time limit, ``scancel``, ``timeout``, an eviction, a closed terminal send them.

Their default action kills the process on the spot: no ``finally`` runs, so a power cap or a
clock lock stays on the GPU and the sampler's summary is never written. Inside
:func:`terminate_on_signals` they raise :class:`Terminated` in the main thread instead; it
propagates through every ``finally`` (GPU settings restored, sampler stopped, locks released)
and ends the process with exit status 128 + the signal number, as the default action would
have reported. A lifecycle layer may catch :class:`Terminated` to record the run as
interrupted; ``except Exception`` does not catch it (it is a ``SystemExit``).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None))
                if s is not None)


class Terminated(SystemExit):
    """``generate`` was asked to stop by a signal; ``code`` is 128 + the signal number.

    Attributes:
        signum: the signal received.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(128 + int(signum))
        self.signum = int(signum)

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}"


@contextlib.contextmanager
def terminate_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into :class:`Terminated` for the duration.

    Main thread only (elsewhere a no-op). The previous handlers come back on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        for s in SIGNALS:  # a second signal during the shutdown must not interrupt it
            signal.signal(s, signal.SIG_IGN)
        log.warning("received %s: stopping cleanly (GPU settings restored, sampler stopped)",
                    signal.Signals(signum).name)
        raise Terminated(signum)

    for s in SIGNALS:
        previous[s] = signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
