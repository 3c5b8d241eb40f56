"""Issue 11, item 6: GPU settings always come back — journal, SIGTERM/SIGHUP, restore command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from generation.sampler import device_settings
from generation.sampler.errors import SamplerError
from generation.sampler.journal import journal_path, read_entries, record, restore_orphans
from generation.sampler.settings import NO_DEVICE_SETTINGS_ENV
from generation.signals import Terminated, terminate_on_signals

from .fake_nvml import FakeGpu

UUID0 = "GPU-00000000-aaaa-bbbb-cccc-000000000000"
UUID1 = "GPU-11111111-aaaa-bbbb-cccc-111111111111"


@pytest.fixture
def gpus(fake_nvml, monkeypatch):
    monkeypatch.delenv(NO_DEVICE_SETTINGS_ENV, raising=False)
    fake = fake_nvml([FakeGpu(uuid=UUID0), FakeGpu(uuid=UUID1)])
    return fake.gpus


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_originals_are_journalled_before_the_first_set_and_cleared_after(gpus):
    with device_settings([0, 1], power_limit_w=300, sm_clock_mhz=1410):
        entries = read_entries()
        assert set(entries) == {UUID0, UUID1}  # by UUID, with the true originals
        assert entries[UUID0]["power_limit_mw"] == 700_000
        assert entries[UUID0]["clocks_locked"] is True
        assert entries[UUID0]["pid"] == os.getpid()
        assert gpus[0].power_limit_mw == 300_000
    assert gpus[0].power_limit_mw == 700_000 and gpus[0].locked_clocks_mhz is None
    assert not journal_path().exists()


def test_sigterm_during_a_capped_run_restores_and_exits_143(gpus):
    with pytest.raises(Terminated) as info, terminate_on_signals(), \
            device_settings([0, 1], power_limit_w=250):
        assert gpus[1].power_limit_mw == 250_000
        os.kill(os.getpid(), signal.SIGTERM)
        pytest.fail("SIGTERM did not interrupt the run")  # pragma: no cover
    assert info.value.code == 128 + signal.SIGTERM and info.value.signum == signal.SIGTERM
    assert [g.power_limit_mw for g in gpus] == [700_000, 700_000]
    assert not journal_path().exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler removed again


def test_sighup_is_a_clean_shutdown_too(gpus):
    with pytest.raises(Terminated), terminate_on_signals(), device_settings([0],
                                                                            sm_clock_mhz=1200):
        os.kill(os.getpid(), signal.SIGHUP)
    assert gpus[0].locked_clocks_mhz is None


def test_terminated_is_not_caught_by_except_exception():
    with pytest.raises(Terminated):
        try:
            raise Terminated(signal.SIGTERM)
        except Exception:  # noqa: BLE001 - what a run's failure handler does
            pytest.fail("a signal must not be recorded as a failed run")


def test_a_dead_process_leftover_is_restored_from_the_journal(gpus):
    # A process that was SIGKILLed while GPU 1 was capped: its journal entry remains and the
    # GPU still carries the cap. Without the journal the next run would read 250 W as original.
    gpus[1].power_limit_mw = 250_000
    gpus[1].locked_clocks_mhz = (1200, 1200)
    journal_path().write_text(json.dumps({
        "format": "llm-powertrace-gpu-settings-journal/1",
        "entries": {UUID1: {"pid": _dead_pid(), "nvml_index": 1, "power_limit_mw": 700_000,
                            "clocks_locked": True}}}))
    done = restore_orphans()
    assert done == [{"gpu": "GPU 1", "power_limit_w": 700.0, "clocks_reset": True}]
    assert gpus[1].power_limit_mw == 700_000 and gpus[1].locked_clocks_mhz is None
    assert not journal_path().exists()


def test_a_live_process_entry_is_left_alone_and_blocks_a_second_writer(gpus):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        journal_path().write_text(json.dumps({
            "format": "llm-powertrace-gpu-settings-journal/1",
            "entries": {UUID0: {"pid": live.pid, "nvml_index": 0, "power_limit_mw": 700_000,
                                "clocks_locked": False}}}))
        assert restore_orphans() == []
        with pytest.raises(SamplerError, match="another run is changing this GPU"):
            record(UUID0, nvml_index=0, power_limit_mw=500_000, clocks_locked=False)
    finally:
        live.kill()
        live.wait()


def test_corrupt_journal_is_a_one_line_error_naming_the_file(gpus):
    journal_path().write_text("{not json")
    with pytest.raises(SamplerError, match="Failed to read .*journal.json"):
        restore_orphans()


def test_restore_gpu_settings_command(gpus, capsys):
    from llm_powertrace_ds.cli import main

    assert main(["restore-gpu-settings"]) == 0
    assert "nothing to restore" in capsys.readouterr().out
    gpus[0].power_limit_mw = 300_000
    journal_path().write_text(json.dumps({
        "format": "llm-powertrace-gpu-settings-journal/1",
        "entries": {UUID0: {"pid": _dead_pid(), "nvml_index": 0, "power_limit_mw": 700_000,
                            "clocks_locked": False}}}))
    assert main(["restore-gpu-settings", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["power_limit_w"] == 700.0
    assert gpus[0].power_limit_mw == 700_000


CHILD = """
import json, os, sys, time
sys.path.insert(0, {tests!r})
from generation.sampler import device_settings, nvml
from generation.signals import terminate_on_signals
from fake_nvml import FakeGpu, FakeNvml

fake = FakeNvml([FakeGpu(uuid={uuid!r})])
nvml.pynvml = fake
state = {state!r}
try:
    with terminate_on_signals(), device_settings([0], power_limit_w=300):
        print("capped", fake.gpus[0].power_limit_mw, flush=True)
        time.sleep(60)
finally:
    with open(state, "w") as f:
        json.dump({{"power_limit_mw": fake.gpus[0].power_limit_mw}}, f)
"""


def test_sigterm_to_a_capped_generate_process_restores_and_exits_143(tmp_path, monkeypatch):
    # A real process, a real signal (what Slurm's time limit, scancel or `timeout` send).
    monkeypatch.delenv(NO_DEVICE_SETTINGS_ENV, raising=False)
    tests = str(Path(__file__).parent)
    state = tmp_path / "state.json"
    code = CHILD.format(tests=tests, uuid=UUID0, state=str(state))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env=env)
    assert child.stdout.readline().split() == ["capped", "300000"]
    assert read_entries()[UUID0]["power_limit_mw"] == 700_000  # journalled before the set
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == 128 + signal.SIGTERM
    assert json.loads(state.read_text())["power_limit_mw"] == 700_000  # restored
    assert not journal_path().exists()  # and the journal entry cleared


def _journal_of(host: str, uuid: str, *, uid: int, limit_mw: int = 700_000) -> dict:
    return {uuid: {"pid": _dead_pid(), "nvml_index": 0 if uuid == UUID0 else 1,
                   "power_limit_mw": limit_mw, "clocks_locked": False, "host": host,
                   "uid": uid}}


def test_a_journal_written_on_another_host_is_restored_only_there(gpus, monkeypatch, caplog):
    # A home folder shared by the nodes: node-a's job was SIGKILLed while GPU 0 was capped.
    # On node-b that pid means nothing and the GPUs are another node's: left alone. Before the
    # fix node-b judged node-a's pid by its own processes and "restored" its own GPU 0.
    from generation.sampler import journal

    gpus[0].power_limit_mw = 250_000
    journal_path().write_text(json.dumps({
        "format": "llm-powertrace-gpu-settings-journal/1",
        "entries": _journal_of("node-a", UUID0, uid=os.getuid())}))
    monkeypatch.setattr(journal, "this_host", lambda: "node-b")
    assert restore_orphans() == []
    assert gpus[0].power_limit_mw == 250_000 and UUID0 in read_entries()
    assert "node-a" in caplog.text
    with pytest.raises(SamplerError, match="host 'node-a'"):
        record(UUID0, nvml_index=0, power_limit_mw=250_000, clocks_locked=False)
    monkeypatch.setattr(journal, "this_host", lambda: "node-a")  # the epilog on node-a
    assert restore_orphans()[0]["power_limit_w"] == 700.0
    assert gpus[0].power_limit_mw == 700_000 and not journal_path().exists()


def test_the_journal_file_is_per_host(monkeypatch, tmp_path):
    from generation.sampler import journal

    monkeypatch.delenv("LLM_POWERTRACE_GPU_JOURNAL")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setattr(journal, "this_host", lambda: "gpu-node-07")
    assert journal_path() == tmp_path / "llm-powertrace" / "gpu-settings-journal-gpu-node-07.json"


def test_all_mine_restores_only_the_job_users_entries(gpus, monkeypatch, capsys):
    from generation.sampler import journal
    from llm_powertrace_ds.cli import main

    monkeypatch.setattr(journal, "this_host", lambda: "node-a")
    gpus[0].power_limit_mw = gpus[1].power_limit_mw = 300_000
    journal_path().write_text(json.dumps({
        "format": "llm-powertrace-gpu-settings-journal/1",
        "entries": {**_journal_of("node-a", UUID0, uid=os.getuid()),
                    **_journal_of("node-a", UUID1, uid=os.getuid() + 4242)}}))
    assert main(["restore-gpu-settings", "--all-mine", "--format", "json"]) == 0
    assert [d["gpu"] for d in json.loads(capsys.readouterr().out)] == ["GPU 0"]
    assert gpus[0].power_limit_mw == 700_000 and gpus[1].power_limit_mw == 300_000
    assert set(read_entries()) == {UUID1}  # another user's entry stays for its own epilog
