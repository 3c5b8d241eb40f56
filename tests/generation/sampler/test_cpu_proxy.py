"""The cpu_proxy source: the model's maths, real process trees, ranks joining later."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import psutil
import pytest

from generation.sampler import SamplerConfigError, register_pid
from generation.sampler.base import FAULT_PROCESS_GONE
from generation.sampler.cpu_proxy import (
    CpuProxySource,
    cpu_clock_id,
    descendants,
    proxy_power_w,
    read_pid_files,
)

BUSY = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"
PARENT_OF_BUSY = ("import subprocess, sys, time\n"
                  "p = subprocess.Popen([sys.executable, '-c', {code!r}])\n"
                  "time.sleep(30)\n")


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []

    def start(code: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", code])
        started.append(p)
        return p

    yield start
    for p in started:
        for child in psutil.Process(p.pid).children(recursive=True) if p.poll() is None else []:
            child.kill()
        p.kill()
        p.wait()


@pytest.mark.parametrize(("cpu_s", "wall_s", "threads", "power", "u"), [
    (0.0, 0.1, 2, 60.0, 0.0),
    (0.1, 0.1, 2, 180.0, 0.5),
    (0.2, 0.1, 2, 300.0, 1.0),
    (0.5, 0.1, 2, 300.0, 1.0),  # capped at u = 1
    (0.1, 0.1, 1, 300.0, 1.0),
    (0.05, 0.1, 4, 90.0, 0.125),
])
def test_model(cpu_s, wall_s, threads, power, u):
    assert proxy_power_w(cpu_s, wall_s, threads, 60.0, 300.0) == pytest.approx((power, u))


def test_model_without_a_wall_interval_is_null():
    assert all(math.isnan(v) for v in proxy_power_w(0.1, 0.0, 2, 60.0, 300.0))


def test_cpu_clock_of_a_process_reads_its_cpu_time():
    before = time.process_time_ns()
    ours = time.clock_gettime_ns(cpu_clock_id(os.getpid()))
    after = time.process_time_ns()
    assert before <= ours <= after


def test_pid_files(tmp_path):
    register_pid(tmp_path, 1, 4242)
    register_pid(tmp_path, 0, 4141)
    (tmp_path / "pids" / "rank-x.pid").write_text("9")
    (tmp_path / "pids" / "rank-3.pid").write_text("half")
    assert read_pid_files(tmp_path / "pids") == {0: 4141, 1: 4242}


def test_no_pid_file_is_a_config_error(tmp_path):
    with pytest.raises(SamplerConfigError, match="no process to measure"):
        CpuProxySource(tmp_path / "pids").open()


def test_busy_process_reads_high_idle_process_reads_idle(tmp_path, procs):
    busy = procs(BUSY.format(s=5))
    idle = procs("import time; time.sleep(30)")
    register_pid(tmp_path, 0, busy.pid)
    register_pid(tmp_path, 1, idle.pid)
    time.sleep(0.3)  # let both interpreters finish starting up
    source = CpuProxySource(tmp_path / "pids", idle_w=60.0, max_w=300.0)
    devices = source.open()
    assert [d.gpu_index for d in devices] == [0, 1]
    assert devices[0].name == "cpu_proxy" and devices[0].power_limit_w == 300.0
    time.sleep(0.5)
    hot, cold = source.read(0), source.read(1)
    threads = len(os.sched_getaffinity(busy.pid))
    # one busy thread of `threads` allowed (less if the machine is shared)
    assert hot.gpu_util_pct > 100 / threads * 0.3
    assert hot.power_mw / 1000 > 60.0 + 240.0 * 0.3 / threads
    assert cold.gpu_util_pct < 5 and cold.power_mw / 1000 < 75.0
    assert cold.mem_used_bytes > 1e6
    for r in (hot, cold):
        assert math.isnan(r.sm_clock_mhz) and math.isnan(r.temp_c) and math.isnan(r.power_avg_mw)


def test_energy_counter_is_the_running_integral(tmp_path, procs):
    p = procs(BUSY.format(s=5))
    register_pid(tmp_path, 0, p.pid)
    now = [0]
    source = CpuProxySource(tmp_path / "pids", clock=lambda: now[0])
    source.open()
    expected = 0.0
    for _ in range(5):
        time.sleep(0.05)
        now[0] += 100_000_000
        r = source.read(0)
        expected += r.power_mw / 1000.0 * 0.1 * 1000.0
        assert r.energy_mj == pytest.approx(expected)


def test_children_are_found_by_the_rescan(tmp_path, procs):
    parent = procs(PARENT_OF_BUSY.format(code=BUSY.format(s=10)))
    register_pid(tmp_path, 0, parent.pid)
    deadline = time.time() + 10
    while not psutil.Process(parent.pid).children() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    kids = descendants(parent.pid)
    assert kids == [c.pid for c in psutil.Process(parent.pid).children(recursive=True)]
    source = CpuProxySource(tmp_path / "pids")
    source.open()
    time.sleep(0.4)
    assert source.read(0).gpu_util_pct > 10  # the busy child counts


def test_excluded_pids_are_not_counted(tmp_path, procs):
    parent = procs(PARENT_OF_BUSY.format(code=BUSY.format(s=10)))
    register_pid(tmp_path, 0, parent.pid)
    deadline = time.time() + 10
    while not psutil.Process(parent.pid).children() and time.time() < deadline:
        time.sleep(0.05)
    child = psutil.Process(parent.pid).children()[0].pid
    source = CpuProxySource(tmp_path / "pids", exclude_pids=[child])
    source.open()
    time.sleep(0.4)
    assert source.read(0).gpu_util_pct < 5


def test_a_rank_joining_later_becomes_a_new_device(tmp_path, procs):
    register_pid(tmp_path, 0, os.getpid())
    source = CpuProxySource(tmp_path / "pids")
    assert len(source.open()) == 1
    assert source.rescan() == []
    late = procs("import time; time.sleep(30)")
    register_pid(tmp_path, 1, late.pid)
    new = source.rescan()
    assert [(d.slot, d.gpu_index, d.rank) for d in new] == [(1, 1, 1)]
    assert source.read(1).faults == 0


def test_a_process_that_ends_reads_the_idle_model_flagged_gone(tmp_path, procs):
    p = procs("import time; time.sleep(0.3)")
    register_pid(tmp_path, 0, p.pid)
    source = CpuProxySource(tmp_path / "pids", idle_w=55.0)
    source.open()
    assert source.read(0).faults == 0
    p.wait()
    for _ in range(2):  # an empty tree uses no CPU: u = 0, power = idle_w, no memory
        time.sleep(0.05)
        r = source.read(0)
        assert r.faults == FAULT_PROCESS_GONE
        assert (r.power_mw, r.gpu_util_pct, r.mem_used_bytes) == (55_000.0, 0.0, 0.0)
    source.rescan()  # nothing to rescan; must not fail
    source.close()


def test_children_left_running_by_an_ended_rank_are_still_measured(tmp_path, procs):
    code = ("import subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, '-c', {BUSY.format(s=3)!r}])\n"
            "time.sleep(0.5)\n")
    parent = procs(code)
    register_pid(tmp_path, 0, parent.pid)
    source = CpuProxySource(tmp_path / "pids")
    source.open()
    while not psutil.Process(parent.pid).children():
        time.sleep(0.05)
    child = psutil.Process(parent.pid).children()[0]
    source.rescan()
    parent.wait()
    source.read(0)
    time.sleep(0.4)
    r = source.read(0)
    child.kill()
    assert r.faults == FAULT_PROCESS_GONE and r.gpu_util_pct > 0 and r.mem_used_bytes > 0


def test_a_rank_gone_before_it_was_seen_reads_null(tmp_path, procs):
    p = procs("pass")
    p.wait()
    register_pid(tmp_path, 0, p.pid)
    source = CpuProxySource(tmp_path / "pids")
    source.open()
    r = source.read(0)
    assert r.faults == FAULT_PROCESS_GONE and math.isnan(r.power_mw)
