"""Shared fixtures: synthetic runs generated into tmp_path, the external-data location."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest
from hypothesis import settings as hypothesis_settings


def _sibling_module(name: str) -> ModuleType:
    """The module ``tests/<name>.py``, loaded by its path.

    This file is also loaded by path, from folders where ``tests/`` is not on ``sys.path``
    (``test_hermetic.py`` runs it in a bare folder), so an import by name would fail there.
    """
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# the headless-browser fixtures, defined here once for every suite: one Playwright instance per
# test process (a second sync_playwright started beside the first fails)
_browser_fixtures = _sibling_module("browser_fixtures")
browser, open_page, page, shots = (_browser_fixtures.browser, _browser_fixtures.open_page,
                                   _browser_fixtures.page, _browser_fixtures.shots)

REPO = Path(__file__).resolve().parents[1]
# LLM_POWERTRACE_EXTERNAL points elsewhere (e.g. from a git worktree, whose parent has no shared/)
EXTERNAL = Path(os.environ.get("LLM_POWERTRACE_EXTERNAL") or REPO.parent / "shared" / "data" / "external")

# Hypothesis keeps no example database between runs (by default it writes .hypothesis/ into the
# working folder, and a replayed example from an earlier run would change what a run tests).
hypothesis_settings.register_profile("hermetic", database=None)
hypothesis_settings.load_profile("hermetic")


def synthetic_run(run_id: str = "run-a", *, workload: str = "finetune", platform: str = "l40s",
                  family: str = "llama", devices: int = 2, n: int = 200, period_ms: int = 100,
                  seed: int = 0, with_requests: bool = False, **meta):
    """A small, deterministic ``Run`` (sine-shaped power with noise, events, optional requests)."""
    from llm_powertrace_ds.run import DeviceSeries, Event, Run

    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.int64) * period_ms
    devs = []
    for g in range(devices):
        power = 200 + 80 * np.sin(t / 2000.0 + g) + rng.normal(0, 3, n)
        util = np.clip(power / 4, 0, 100)
        devs.append(DeviceSeries(g, t + 2 * g, {"power_w": power, "gpu_util_pct": util,
                                                "temp_c": np.full(n, np.nan)},
                                 gpu_name="NVIDIA L40S", gpu_uuid_hash=f"h{g}",
                                 power_limit_w=350.0, default_power_limit_w=350.0))
    base = {"run_id": run_id, "workload": workload, "platform": platform, "model_family": family,
            "model_name": f"{family}-tiny", "sweep": "test", "repeat": 0, "num_gpus": devices,
            "sample_period_ms": float(period_ms), "sampler": "nvml", "power_field": "instant",
            "start_time": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)}
    if workload == "finetune":
        base.update(method="lora", batch_size=4, seq_len=128, tokens=10_000,
                    gradient_checkpointing=True)
    else:
        base.update(concurrency=4, batching="static", arrival_pattern="closed", tokens_out=2000)
    base.update(meta)
    events = [Event(0, "idle_begin"), Event(1000, "idle_end"),
              Event(1100, "step_begin", step=1, rank=0), Event(1900, "step_end", step=1, rank=0),
              Event(1100, "step_begin", step=1, rank=1)]
    requests = None
    if with_requests:
        requests = [{"request_id": f"r{i}", "arrival_ms": 100 * i, "start_ms": 100 * i + 5,
                     "first_token_ms": 100 * i + 50, "finish_ms": 100 * i + 400,
                     "prompt_tokens": 32, "requested_output_tokens": 16, "output_tokens": 16,
                     "status": "ok"} for i in range(5)]
    return Run(base, devs, events, requests)


def hermetic_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Point every cache a test could share through the home folder at ``home``.

    ``datasets`` keys a local folder's cache on its path and a hash that does not change when
    the files do, so a test reading through the shared home cache can get rows an earlier run
    (or another test at a recycled ``tmp_path``) left there. The environment variables reach
    subprocesses; the module attributes reach ``datasets`` and ``huggingface_hub`` already
    imported in this process (they read the variables once, at import). Matplotlib reads
    ``MPLCONFIGDIR`` at import; subprocesses get ``home``'s, this process keeps the one it
    imported with (set by ``pytest_configure`` below to a folder under the session's temp dir).

    Returns:
        The folders used, by role (``datasets``, ``hub``, ``home``).
    """
    import datasets.config
    import huggingface_hub.constants as hub_constants

    hf_home = home / "hf"
    folders = {"home": home, "datasets": hf_home / "datasets", "hub": hf_home / "hub",
               "modules": hf_home / "modules", "assets": hf_home / "assets",
               "xet": hf_home / "xet", "mpl": home / "mpl", "xdg": home / "xdg-cache"}
    env = {"HF_HOME": hf_home, "HF_DATASETS_CACHE": folders["datasets"],
           "HF_HUB_CACHE": folders["hub"], "HUGGINGFACE_HUB_CACHE": folders["hub"],
           "HF_MODULES_CACHE": folders["modules"], "HF_ASSETS_CACHE": folders["assets"],
           "HF_XET_CACHE": folders["xet"], "MPLCONFIGDIR": folders["mpl"],
           "XDG_CACHE_HOME": folders["xdg"]}
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    downloads = folders["datasets"] / datasets.config.DOWNLOADED_DATASETS_DIR
    for name, value in {"HF_CACHE_HOME": str(hf_home),
                        "HF_DATASETS_CACHE": folders["datasets"],
                        "HF_MODULES_CACHE": folders["modules"],
                        "DOWNLOADED_DATASETS_PATH": downloads,
                        "EXTRACTED_DATASETS_PATH":
                            downloads / datasets.config.EXTRACTED_DATASETS_DIR}.items():
        monkeypatch.setattr(datasets.config, name, value)
    for name, value in {"HF_HOME": hf_home, "HF_HUB_CACHE": folders["hub"],
                        "HUGGINGFACE_HUB_CACHE": folders["hub"],
                        "HF_ASSETS_CACHE": folders["assets"],
                        "HF_XET_CACHE": folders["xet"]}.items():
        if hasattr(hub_constants, name):
            monkeypatch.setattr(hub_constants, name, str(value))
    return folders


def pytest_configure(config: pytest.Config) -> None:
    """Send matplotlib's and Hypothesis's own files to a folder of this test run.

    Matplotlib's config and font cache, and Hypothesis's storage (its constants cache, written
    even without an example database), never land in the home or the working folder.
    """
    import os
    import shutil
    import tempfile

    from hypothesis.configuration import set_hypothesis_home_dir

    folder = Path(tempfile.mkdtemp(prefix="llm-powertrace-session-"))
    os.environ["MPLCONFIGDIR"] = str(folder / "mpl")
    set_hypothesis_home_dir(folder / "hypothesis")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


@pytest.fixture(autouse=True)
def _hermetic_home(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Every test gets its own empty ``datasets`` / Hub / matplotlib caches (see ``hermetic_home``).

    The folder is a sibling of ``tmp_path`` (from the same factory), so tests that list their
    ``tmp_path`` see only what they wrote.
    """
    return hermetic_home(tmp_path_factory.mktemp("home"), monkeypatch)


@pytest.fixture(autouse=True)
def _no_card_figures_by_default(monkeypatch):
    """Drawing card figures after every publish costs ~1 s each, so it is off by default.

    Tests that check figures opt in with ``cards.builder.CardOptions(figures=True)``.
    """
    monkeypatch.setenv("LLM_POWERTRACE_CARD_FIGURES", "0")


@pytest.fixture
def cli(capsys):
    """Run ``llm-powertrace ARGS`` in this process: (exit code, stdout, stderr)."""
    from llm_powertrace_ds.cli import main

    def run(args):
        capsys.readouterr()
        rc = main([str(a) for a in args])
        out = capsys.readouterr()
        return SimpleNamespace(returncode=rc, stdout=out.out, stderr=out.err)

    return run


@pytest.fixture
def make_run():
    """Factory fixture for synthetic runs (see ``synthetic_run``)."""
    return synthetic_run


@pytest.fixture
def external_dir() -> Path:
    """Real traces measured by others (never committed); skips when absent."""
    if not EXTERNAL.is_dir():
        pytest.skip(f"external traces not present at {EXTERNAL}")
    return EXTERNAL


@pytest.fixture(autouse=True)
def _gpu_settings_journal_in_tmp(monkeypatch, tmp_path_factory):
    """The GPU-settings journal (generation.sampler.journal) never touches the user's state."""
    path = tmp_path_factory.mktemp("gpu-journal") / "journal.json"
    monkeypatch.setenv("LLM_POWERTRACE_GPU_JOURNAL", str(path))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    """One line for the tests that need the external traces, instead of silent ``s`` marks."""
    skipped = terminalreporter.stats.get("skipped", [])
    # by the skip's reason: an external-marked test may skip for another reason (a package
    # that is not installed), and the folder is then not absent
    external = [r for r in skipped
                if "external traces not present" in str(getattr(r, "longrepr", ""))]
    if external:
        terminalreporter.write_line(
            f"{len(external)} {'test' if len(external) == 1 else 'tests'} on real traces "
            "measured by others skipped: "
            f"{EXTERNAL} is absent (set LLM_POWERTRACE_EXTERNAL to their folder; the shipped "
            "ML.ENERGY sample in llm_powertrace_ds/samples still runs)")
