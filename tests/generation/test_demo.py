"""The demo's own reporting: warm-up shares and flags, the machine line (no host names)."""

from __future__ import annotations

import doctest

from generation import demo
from llm_powertrace_ds import shards
from llm_powertrace_ds.run import Event


def test_warmup_flags_doctest():
    tester = doctest.DocTestRunner()
    for t in doctest.DocTestFinder().find(demo.warmup_flags, "warmup_flags",
                                          globs={"warmup_flags": demo.warmup_flags}):
        tester.run(t)
    assert tester.tries == 1 and tester.failures == 0


def test_warmup_shares_flag_the_run_whose_warmup_dominates(tmp_path, make_run):
    ok = make_run("ok", n=200)  # 19.9 s window
    ok.events += [Event(1000, "warmup_begin"), Event(3000, "warmup_end")]
    slow = make_run("slow", workload="inference", n=200, seed=1)
    slow.events += [Event(500, "warmup_begin", rank=0), Event(17_500, "warmup_end", rank=0),
                    Event(600, "warmup_begin", rank=1), Event(19_000, "warmup_end", rank=1)]
    for run in (ok, slow):
        shards.publish_run(tmp_path, run, refresh_card=False)
    shares = demo.warmup_shares(tmp_path)
    assert shares["ok"] == (2.0, 19.9)
    assert shares["slow"] == (17.0, 19.9)  # rank 1's own events are not the run's warm-up
    flags = demo.warmup_flags(shares)
    assert list(flags) == ["slow"] and "warm-up 17 s of a 20 s window (85 %)" in flags["slow"]


def test_machine_text_has_no_host_name():
    import socket

    text = demo.machine_text()
    assert text.endswith(("CPU core", "CPU cores")) and socket.gethostname() not in text


def test_import_hint_names_the_shipped_sample():
    """The demo's closing hint agrees with the README: the package ships a real sample."""
    import re

    from generation.demo import IMPORT_HINT
    from llm_powertrace_ds.samples import SAMPLES

    assert "no third-party" not in IMPORT_HINT
    named = re.findall(r"load_sample\('([^']+)'\)", IMPORT_HINT)
    assert named and all(name in SAMPLES for name in named)


def test_activation_note_only_when_the_environment_is_not_on_path(tmp_path):
    from generation.demo import activation_note

    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    note = activation_note({"PATH": "/usr/bin"}, str(venv), "/usr", tmp_path)
    assert "`. .venv/bin/activate`" in note and ".venv/bin/" in note
    on_path = {"PATH": f"/usr/bin:{venv / 'bin'}"}
    assert activation_note(on_path, str(venv), "/usr", tmp_path) == ""
    assert activation_note({"PATH": "/usr/bin"}, "/usr", "/usr", tmp_path) == ""  # no venv
