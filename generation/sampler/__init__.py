"""The 100 ms power sampler: NVML in its own process, or a ``cpu_proxy`` model without a GPU.

Layers (the Zeus model): **device** — ``nvml.py`` (the only module that imports the NVML
binding, ``pynvml`` from nvidia-ml-py) and ``cpu_proxy.py`` behind the ``Source`` interface of
``base.py``, raw units (mW, mJ, bytes) and a small error hierarchy (``errors.py``);
**monitor** — ``process.py`` (the spawned sampler process, ticking on absolute deadlines),
``spool.py`` (the crash-safe on-disk spool) and ``settings.py`` (GPU probes, power caps and
locked clocks with restore, through ``nvml.py``'s public functions only); **report** — ``convert.py`` (spool + events ->
``llm_powertrace_ds.run.Run``) and the ``SamplerSummary`` dataclass.

Public API (stable)::

    from generation.sampler import SamplerConfig, Sampler, resolve_source, spool_to_run
    from generation.events import EventRecorder

    cfg = SamplerConfig(source="auto", period_ms=100.0, gpu_indices=None,
                        idle_w=60.0, max_w=300.0)        # frozen; validated in __post_init__
    resolve_source(cfg)              # -> "nvml" | "cpu_proxy"; SamplerConfigError if impossible
    with Sampler(cfg, staging_dir, pids=[os.getpid()]) as sampler:
        # start() has returned: the sampler process took its first tick (the run's t0).
        sampler.source               # "nvml" | "cpu_proxy"
        sampler.provenance           # dict, also in <staging_dir>/provenance.json
        rec = EventRecorder(staging_dir, rank=0)
        rec.mark("step_begin", step=3)
        ...                          # the workload
    sampler.summary                  # SamplerSummary: state, ticks, missed_ticks, drift_ms, ...
    run = spool_to_run(staging_dir, meta)   # -> Run (one series per device, events included)

* ``Sampler(config, staging_dir, *, pids=None)`` — cheap constructor; ``start()`` (or ``with``)
  validates the configuration (one ``SamplerConfigError`` before anything starts), spawns a
  fresh Python interpreter (``python -m generation.sampler.process``: the spawn start method,
  without re-importing the parent's ``__main__``, so it never imports torch or datasets) and
  waits for its first tick; ``stop()`` returns a ``SamplerSummary`` (it does not raise when the
  sampler died: ``summary.state`` says what happened). ``cpu_proxy`` has one virtual device per
  pid in ``pids`` (rank = position; default ``[os.getpid()]``); ranks that start later call
  ``register_pid(staging_dir, rank)`` and are picked up within ~``rescan_s`` (1 s).
  ``nvml`` ignores ``pids``.
* ``spool_to_run(staging_dir, meta, *, incomplete=None) -> Run`` — ``meta`` is the runner's
  resolved run metadata (``run_id``, ``workload``, model and axis columns, ...); the sampler's
  provenance columns (``sampler``, ``power_field``, ``sample_period_ms``, ``start_time``,
  ``driver_version``, ``nvml_version``, ``cuda_version``, ``platform``, ``num_gpus``,
  ``quality_flags`` such as ``cpu_proxy``/``incomplete``/``energy_mismatch``) are added unless
  ``meta`` sets them. ``provenance_meta(staging_dir)`` returns just those columns.
* ``spool.wait_sampler_exit(staging_dir) -> str`` — waits for a killed attempt's sampler to
  exit and returns its final state; ``generation.attempts.archive_attempt`` then has the
  staging (``llm_powertrace_ds.staging``) move the attempt into ``attempt-N/`` (status
  ``incomplete``), and ``spool_to_run(attempt_dir, meta)`` adds the ``incomplete`` flag.
* ``read_spool(staging_dir) -> Spool`` — the raw ticks (monotonic ns, deadlines, missed
  counts, per-tick read latency), devices, anchors and summary, for benchmarks and tests.
* ``probe_gpus(indices=None, *, allow_mig=False, uuid_salt=None, env=None) -> list[GpuProbe]``
  — the GPUs the sampler would read (changes nothing): ``index``, ``name``, ``uuid_hash``,
  ``mig_mode``, ``compute_capability``, ``power_limit_w`` and its ``default_``/``min_``/``max_``
  values, ``bf16`` (compute capability >= 8.0), and ``can_set_power_limit``/``can_lock_clocks``
  with the reason when not (``power_limit_refusal``/``gpu_clock_refusal``: not root, or
  ``$LLM_POWERTRACE_NO_DEVICE_SETTINGS`` set).
* ``device_settings(indices, *, power_limit_w=None, sm_clock_mhz=None)`` — context manager
  (``settings.py``) that caps the power and/or locks the SM clock, yields one
  ``AppliedSettings`` per GPU (requested, original and observed values; ``.observed()`` gives
  ``{"power_limit_w", "sm_clock_mhz"}``) and restores the original settings on exit, also on
  error. It refuses with one line naming the axis and the reason where
  ``$LLM_POWERTRACE_NO_DEVICE_SETTINGS`` is set (``NO_DEVICE_SETTINGS_ENV``; the lent device
  machine) or NVML refuses (``NoPermission``), and raises ``SettingOutOfRange`` for a value
  the GPU does not accept, before anything changes::

      with device_settings([0], power_limit_w=350) as applied:
          applied[0].observed()          # {"power_limit_w": 350.0}

* Errors: ``SamplerError`` > ``SamplerConfigError`` (also ``ValueError``) > ``SettingOutOfRange``
  (also ``InputError``, ``field`` = the axis), ``SourceUnavailable`` > ``WrongBinding``,
  ``SourceError`` > ``NotSupported``, ``NoPermission``, ``GpuLost``, ``UnknownError``.

Staging files written here (``<staging_dir>/``): ``spool/`` (``header.json``,
``devices.json``, ``samples.bin``, ``anchors.json``, ``summary.json``, ``sampler.log``),
``pids/rank-<r>.pid``, ``events/*.jsonl`` (``generation.events``) and ``provenance.json``
(including ``cpu_proxy``'s ``idle_w``/``max_w``, which have no column; ``power_limit_w`` of a
``cpu_proxy`` device is ``max_w``). ``status.json``, ``meta.json``, attempts and the lock
belong to ``llm_powertrace_ds.staging``: the sampler never writes them.
"""

from __future__ import annotations

from .config import SOURCES, SamplerConfig
from .convert import provenance_meta, spool_to_run
from .errors import (
    GpuLost,
    NoPermission,
    NotSupported,
    SamplerConfigError,
    SamplerError,
    SettingOutOfRange,
    SourceError,
    SourceUnavailable,
    UnknownError,
    WrongBinding,
)
from .process import Sampler, register_pid
from .settings import (
    NO_DEVICE_SETTINGS_ENV,
    AppliedSettings,
    GpuProbe,
    device_settings,
    probe_gpus,
    settings_refusal,
)
from .sources import resolve_source
from .spool import SamplerSummary, Spool, read_spool

__all__ = [
    "NO_DEVICE_SETTINGS_ENV",
    "SOURCES",
    "AppliedSettings",
    "GpuLost",
    "GpuProbe",
    "NoPermission",
    "NotSupported",
    "Sampler",
    "SamplerConfig",
    "SamplerConfigError",
    "SamplerError",
    "SamplerSummary",
    "SettingOutOfRange",
    "SourceError",
    "SourceUnavailable",
    "Spool",
    "UnknownError",
    "WrongBinding",
    "device_settings",
    "probe_gpus",
    "provenance_meta",
    "read_spool",
    "register_pid",
    "resolve_source",
    "settings_refusal",
    "spool_to_run",
]
