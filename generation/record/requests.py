"""Put a serving benchmark's request log on the run being recorded (``record --requests``).

The file is read after the command ended (the client writes it last), and its times are put on
the run clock with the sampler's t0 and (monotonic, UTC) anchor from the spool
(:func:`llm_powertrace_ds.importers.requests_common.to_run_clock`). The request rows also give
the run's ``requests_completed``, ``tokens_in``, ``tokens_out``, TTFT and latency percentiles.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from llm_powertrace_ds.importers.requests import read_requests, to_run_clock
from llm_powertrace_ds.request_rows import RequestRows


def rows_on_run_clock(fmt: str, path: str | Path, staging_dir: Path, *, run_id: str,
                      platform: str, run_end_ms: int) -> RequestRows:
    """The request rows of ``path`` on the clock of the spool in ``staging_dir``."""
    from generation.sampler import read_spool

    spool = read_spool(staging_dir)
    if spool.t0_ns is None:
        raise ValueError(f"the spool in '{staging_dir}' has no samples")
    log = read_requests(fmt, path)
    return to_run_clock(log, run_id=run_id, platform=platform, t0_ns=spool.t0_ns,
                        anchor=spool.anchors.get("start"), run_end_ms=run_end_ms)


def loader(fmt: str, path: str | Path) -> Callable[..., RequestRows]:
    """A ``Recording.requests_from`` callable for ``fmt:path``."""
    def load(staging_dir: Path, *, run_id: str, platform: str,
             run_end_ms: int) -> RequestRows:
        return rows_on_run_clock(fmt, path, staging_dir, run_id=run_id, platform=platform,
                                 run_end_ms=run_end_ms)
    return load


__all__ = ["loader", "rows_on_run_clock"]
