"""A large request log is imported and validated in memory independent of its rows.

``llm-powertrace import requests-csv`` and ``llm-powertrace validate`` run as real subprocesses;
their peak resident set size comes from ``os.wait4`` in a small launcher that forks them (that
child's own ``ru_maxrss``, not the largest child the test process ever had, nor the size of the
process it was forked from). The import streams the file (a block of rows, one
id partition and the percentile histograms at a time), so ten times the rows may add at most
:data:`MAX_IMPORT_GROWTH_BYTES` to its peak; holding the log as one table added ≈ 240 bytes a
request (≈ 230 MB from 10^5 to 10^6 rows). ``validate`` checks the published requests a block
of rows at a time (repeated ids in partitions on disk) and never attaches them to their run:
ten times the rows may add at most :data:`MAX_VALIDATE_GROWTH_BYTES` to its peak; attaching
the log to its run added ≈ 100 MB from 10^5 to 10^6 rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

SMALL_ROWS, N_ROWS = 100_000, 1_000_000
MAX_IMPORT_GROWTH_BYTES = 60 * 2**20
"""Peak RSS of the 10^6-row import over the 10^5-row one's."""
MAX_VALIDATE_GROWTH_BYTES = 60 * 2**20
"""Peak RSS of ``validate`` on the 10^6-request folder over the 10^5-request one's."""

pytestmark = pytest.mark.skipif(not hasattr(os, "wait4") or not hasattr(os, "fork"),
                                reason="needs os.wait4 and os.fork (POSIX)")


def _write_log(path: Path, t0_s: float, n: int) -> np.ndarray:
    """Write ``n`` requests inside the run's first 12 s.

    Returns:
        Their arrival times (UNIX s) as written (6 decimals).
    """
    rng = np.random.default_rng(19)
    arrival = t0_s + 1.0 + rng.random(n) * 10.0
    written = []
    with path.open("w", encoding="utf-8") as fh:
        fh.write("request_id,arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens,"
                 "status\n")
        for i, a in enumerate(arrival):
            cell = f"{a:.6f}"
            written.append(float(cell))
            fh.write(f"req-{i},{cell},{a + 0.25:.6f},{a + 2.0:.6f},{100 + i % 50},"
                     f"{50 + i % 7},ok\n")
    return np.array(written)


# A child's ru_maxrss starts from the memory it was forked (or vforked) from: a command started
# straight from this test would report at least this process's resident size (≈ 300 MB after
# writing the 10^6-row log), whatever its own peak. A small launcher forks the command and
# reports its peak instead.
_LAUNCHER = """\
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as fh:
    fh.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _peak_rss_bytes(args: list[str], tmp_path: Path) -> int:
    """Run ``llm-powertrace ARGS`` as a subprocess; its exit must be 0; its peak RSS in bytes."""
    peak = tmp_path / "peak"
    with (tmp_path / "stdout").open("wb") as so, (tmp_path / "stderr").open("wb") as se:
        proc = subprocess.run([sys.executable, "-c", _LAUNCHER, str(peak), "-m",
                               "llm_powertrace_ds.cli", *args], stdout=so, stderr=se,
                              env=os.environ.copy())
    assert proc.returncode == 0, (tmp_path / "stderr").read_text()
    return int(peak.read_text()) * (1 if sys.platform == "darwin" else 1024)


def _import_peak_rss_bytes(out: Path, log: Path, tmp_path: Path) -> int:
    return _peak_rss_bytes(["import", "requests-csv", str(log), "--run", "serve-1", "--out",
                            str(out), "--workload", "inference"], tmp_path)


def _published(out: Path, make_run) -> float:
    from llm_powertrace_ds.shards import publish_run

    run = make_run("serve-1", workload="inference")
    publish_run(out, run)
    return float(run.meta["start_time"].timestamp())


def _requests_file(out: Path) -> Path:
    files = list((out / "data" / "inference_requests").rglob("*.arrow"))
    assert len(files) == 1, files
    return files[0]


@pytest.mark.slow
def test_a_large_request_csv_imports_and_validates_in_memory_independent_of_its_rows(
        tmp_path, make_run):
    one_out, small_out, large_out = tmp_path / "one", tmp_path / "small", tmp_path / "large"
    t0_s = _published(one_out, make_run)
    assert _published(small_out, make_run) == t0_s
    assert _published(large_out, make_run) == t0_s
    one = tmp_path / "one.csv"
    _write_log(one, t0_s, 1)
    small = tmp_path / "small.csv"
    _write_log(small, t0_s, SMALL_ROWS)
    big = tmp_path / "big.csv"
    arrival = _write_log(big, t0_s, N_ROWS)
    size = big.stat().st_size

    _import_peak_rss_bytes(one_out, one, tmp_path)
    small_peak = _import_peak_rss_bytes(small_out, small, tmp_path)
    peak = _import_peak_rss_bytes(large_out, big, tmp_path)

    table = pa.ipc.open_stream(pa.memory_map(str(_requests_file(large_out)))).read_all()
    assert table.num_rows == N_ROWS
    assert table.column("request_id")[N_ROWS - 1].as_py() == f"req-{N_ROWS - 1}"
    # run clock: ms since the first tick (UNIX start_time), rounded to µs, then floored
    expected_ms = np.round((arrival - t0_s) * 1e6).astype(np.int64) // 1000
    got_ms = table.column("arrival_ms").to_numpy()
    assert np.array_equal(got_ms, expected_ms)
    del table, got_ms, expected_ms
    growth = peak - small_peak
    assert growth < MAX_IMPORT_GROWTH_BYTES, (
        f"import: peak RSS {peak / 2**20:.0f} MiB for {N_ROWS} rows, {small_peak / 2**20:.0f} "
        f"MiB for {SMALL_ROWS}: {growth / 2**20:.0f} MiB more for "
        f"{(N_ROWS - SMALL_ROWS) / 1e3:.0f} k rows ({growth / (N_ROWS - SMALL_ROWS):.0f} "
        "bytes a request)")
    # validate checks the published requests back, a block of rows at a time
    _peak_rss_bytes(["validate", str(one_out)], tmp_path)
    small_peak = _peak_rss_bytes(["validate", str(small_out)], tmp_path)
    peak = _peak_rss_bytes(["validate", str(large_out)], tmp_path)
    growth = peak - small_peak
    assert growth < MAX_VALIDATE_GROWTH_BYTES, (
        f"validate: peak RSS {peak / 2**20:.0f} MiB for {N_ROWS} rows, "
        f"{small_peak / 2**20:.0f} MiB for {SMALL_ROWS}: {growth / 2**20:.0f} MiB more "
        f"({growth / (N_ROWS - SMALL_ROWS):.0f} bytes a request; the CSV: {size / 2**20:.0f} "
        "MiB)")
