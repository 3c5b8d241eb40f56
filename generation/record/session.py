"""Record any block of code as one run: the ``Recording`` context manager.

The block runs under the project's sampler (instant power, 1 s average, energy counter; or
``cpu_proxy`` without a GPU) and its events share the sampler's clock; on a clean exit the run
travels the same road as a sweep's (``spool_to_run`` -> ``shards.publish_run``: validate,
metrics, atomic files, card). Needs only the sampler's dependencies (nvidia-ml-py, psutil) and
the dataset library — never torch::

    from generation.record import Recording

    with Recording("llm-powertrace", workload="finetune",
                   axes={"model_name": "my-model", "batch_size": 8}) as rec:
        for step in range(1, 11):
            rec.mark("step_begin", step=step)
            train_step()
            rec.mark("step_end", step=step)
        rec.set_results(steps=10, tokens=10 * 8 * 512)

Lifecycle (the run lifecycle of docs/design.md): ``.staging/<run_id>/`` gets ``meta.json`` and status
``running``; the sampler starts (its first tick is the run's t0); ``idle_begin .. idle_end``
for ``idle_before_s``; the block; ``idle_begin .. idle_end`` for ``idle_after_s``; the sampler
stops. A block that raises (``KeyboardInterrupt`` included) leaves the run ``failed`` in staging
and publishes nothing (``keep_failed=True`` publishes it with its ``exit_code``).

Threads and ranks: :meth:`Recording.mark` is safe from any thread (one lock per append).
Processes of the same run — other ranks under ``torchrun``, or the program that
``llm-powertrace record`` runs — :func:`attach` to the staging folder named by
``$LLM_POWERTRACE_RECORD_DIR`` and write their own events (rank from ``$RANK``) and results;
one sampler per node measures them all.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from llm_powertrace_ds import layout, schema
from llm_powertrace_ds.atomic import write_json_atomic
from llm_powertrace_ds.errors import InputError, PowerTraceError

from .provenance import planned_meta

if TYPE_CHECKING:  # a CSV log streamed into the staged shard (imported where used)
    from llm_powertrace_ds.importers.requests import StreamedRequests

log = logging.getLogger(__name__)

RECORD_DIR_ENV = "LLM_POWERTRACE_RECORD_DIR"
"""Set for the program ``record`` runs: the run's staging folder (events and results go there)."""
RESULTS_PREFIX = "results-"

RESERVED = frozenset({
    "run_id", "sweep", "repeat", "workload", "platform", "num_gpus", "gpu_name",
    "power_limit_w", "default_power_limit_w", "start_time", "sampler", "power_field",
    "sample_period_ms", "driver_version", "nvml_version", "cuda_version", "package_version",
    "host_hash", "quality_flags", "schema_version", "program", "exit_code",
})
"""Columns the recorder fills itself; ``--set`` may not give them."""
MIN_PERIOD_MS = 10.0
"""Shortest sampling period ``record`` accepts (NVML's fastest useful tick)."""
MAX_PERIOD_MS = 10_000.0
"""Longest sampling period ``record`` accepts (the sampler must tick before a run can start)."""

SamplerName = Literal["auto", "nvml", "cpu_proxy"]


class RecordError(PowerTraceError, RuntimeError):
    """The recording could not be made or published (the message says why)."""


@dataclass(frozen=True)
class RecordConfig:
    """What to record and where.

    Attributes:
        out: the dataset folder.
        workload: ``finetune`` or ``inference``.
        axes: column values of the run (model and axis columns, checked against the schema).
        sampler: ``auto`` (NVML when a GPU is usable, else ``cpu_proxy``), ``nvml``, ``cpu_proxy``.
        gpus: NVML indices to read (``None``: the GPUs ``CUDA_VISIBLE_DEVICES`` names, or all).
        period_ms: the sampler's tick period.
        idle_before_s: idle padding before the block, s.
        idle_after_s: idle padding after the block, s.
        program: the recorded program's file name (``record`` sets it; never a command line).
        keep_failed: publish a failed block too (with its ``exit_code``).
        run_id: the run id (default: ``rec-<workload>-<program>-<UTC time>-<hash>``).
    """

    out: Path
    workload: str
    axes: Mapping[str, Any] = field(default_factory=dict)
    sampler: SamplerName = "auto"
    gpus: tuple[int, ...] | None = None
    period_ms: float = 100.0
    idle_before_s: float = 0.0
    idle_after_s: float = 0.0
    program: str | None = None
    keep_failed: bool = False
    run_id: str | None = None

    def __post_init__(self) -> None:
        if self.workload not in schema.WORKLOADS:
            raise InputError(f"workload {self.workload!r} is not one of "
                             f"{', '.join(schema.WORKLOADS)}", field="workload")
        if self.sampler not in ("auto", "nvml", "cpu_proxy"):
            raise InputError(f"sampler {self.sampler!r} is not one of auto, nvml, cpu_proxy",
                             field="sampler")
        for name in ("idle_before_s", "idle_after_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value < 3600):
                raise InputError(f"{name}={value!r} must be in [0, 3600)", field=name)
        if not (isinstance(self.period_ms, (int, float)) and
                MIN_PERIOD_MS <= self.period_ms <= MAX_PERIOD_MS):
            raise InputError(f"{self.period_ms!r} ms is not a sampling period: give "
                             f"{MIN_PERIOD_MS:g} to {MAX_PERIOD_MS:g} ms", field="--period-ms")
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "axes", check_axes(self.axes, self.workload))


def check_axes(axes: Mapping[str, Any], workload: str, *, file: str | Path | None = None
               ) -> dict[str, Any]:
    """Check and coerce user-given columns like a sweep's settings.

    Raises:
        InputError: a reserved or unknown column (naming it and the accepted ones) or a value of
            the wrong type; a value that holds a path, host or user name is reduced or refused.
    """
    from llm_powertrace_ds.importers.common import fill_model, scrub_meta
    from llm_powertrace_ds.names import closest
    from llm_powertrace_ds.run import coerce_meta, meta_keys

    reserved = sorted(k for k in axes if k in RESERVED)
    if reserved:
        raise InputError(f"{', '.join(reserved)} is set by the recorder, not by --set",
                         file=file, field=reserved[0])
    settable = meta_keys(workload) - RESERVED if workload in schema.WORKLOADS else None
    unknown = sorted(k for k in axes if settable is not None and k not in settable)
    if settable is not None and unknown:  # list what --set accepts, not what the recorder sets
        close = closest(unknown[0], settable)
        hint = f"; did you mean {close!r}?" if close else ";"
        raise InputError(f"unknown column {unknown[0]!r} of a {workload} run{hint} accepted: "
                         f"{', '.join(sorted(settable))}", file=file, field=unknown[0])
    meta = coerce_meta(dict(axes), workload, file=file)
    meta = scrub_meta(meta, source=str(file or "--set"))
    fill_model(meta)
    return meta


def _slug(text: str) -> str:
    keep = "".join(c if c.isalnum() else "-" for c in text.lower())
    return "-".join(p for p in keep.split("-") if p)[:32] or "block"


def make_run_id(workload: str, program: str | None, axes: Mapping[str, Any],
                utc: dt.datetime) -> str:
    """``rec-<workload>-<program>-<UTC yyyymmddThhmmss>-<8 hex of axes + time>``."""
    stamp = utc.strftime("%Y%m%dt%H%M%S")
    payload = json.dumps({"axes": dict(axes), "utc": utc.isoformat(), "pid": os.getpid()},
                         sort_keys=True, default=str)
    digest = hashlib.sha256(payload.encode()).hexdigest()[:8]
    return f"rec-{workload[:2]}-{_slug(program or 'block')}-{stamp}-{digest}"


def _write_json(path: Path, obj: Any) -> None:
    write_json_atomic(path, obj, fsync=False, indent=None, sort_keys=False)


def _env_rank() -> int:
    try:
        return max(0, int(os.environ.get("RANK", "0")))
    except ValueError:
        return 0


class Attached:
    """Events and results of one process into a run recorded elsewhere (same staging folder).

    Args:
        staging_dir: the run's staging folder.
        rank: this process's rank (default ``$RANK`` or 0).
    """

    def __init__(self, staging_dir: str | os.PathLike[str], rank: int | None = None) -> None:
        from generation.events import EventRecorder

        self.staging_dir = Path(staging_dir)
        self.rank = _env_rank() if rank is None else rank
        self._events = EventRecorder(self.staging_dir, rank=self.rank)
        self._results: dict[str, Any] = {}
        self._lock = threading.Lock()

    def mark(self, kind: str, *, step: int | None = None, request_id: str | None = None,
             label: str | None = None) -> int:
        """Record one event now on the sampler's clock; returns its monotonic time in ns."""
        return self._events.mark(kind, step=step, request_id=request_id, label=label)

    def set_results(self, **results: Any) -> None:
        """Result columns of the run (``steps``, ``tokens``, ``final_loss``, ...); rank 0's win."""
        with self._lock:
            self._results.update(results)
            _write_json(self.staging_dir / f"{RESULTS_PREFIX}rank{self.rank}.json",
                        self._results)

    def close(self) -> None:
        """Flush the events (idempotent)."""
        self._events.close()


def attach(rank: int | None = None) -> Attached | None:
    """The run this process is being recorded into (``$LLM_POWERTRACE_RECORD_DIR``), if any."""
    sdir = os.environ.get(RECORD_DIR_ENV)
    if not sdir or not Path(sdir).is_dir():
        return None
    return Attached(sdir, rank)


def read_results(staging_dir: Path) -> dict[str, Any]:
    """Results written by attached processes; rank 0's values win, then lower ranks'."""
    files = sorted(staging_dir.glob(f"{RESULTS_PREFIX}rank*.json"),
                   key=lambda p: int(p.stem.removeprefix(f"{RESULTS_PREFIX}rank") or 0),
                   reverse=True)
    out: dict[str, Any] = {}
    for path in files:
        try:
            out.update(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise InputError(f"unreadable results: {exc}", file=path) from None
    return out


def _fill_request_results(record: Any, summary: dict[str, Any]) -> None:
    """Fill the run's request results from its requests' summary where the user gave none.

    ``requests_completed``, ``tokens_in``, ``tokens_out``, TTFT and latency percentiles
    (:func:`llm_powertrace_ds.importers.requests.summary_columns`, or the same numbers of a
    streamed log).
    """
    from llm_powertrace_ds.run import coerce_meta

    found = {k: v for k, v in summary.items() if v is not None and record.meta.get(k) is None}
    record.meta.update(coerce_meta(found, record.workload))


_active: Recording | None = None


def active() -> Recording | Attached | None:
    """The recording this process marks into: an open :class:`Recording`, else :func:`attach`."""
    if _active is not None:
        return _active
    return attach()


class Recording:
    """Record a block as one run (a context manager; see the module docstring).

    Args:
        out: the dataset folder.
        workload: ``finetune`` or ``inference``.
        axes: model and axis columns (``model_name``, ``batch_size``, ``concurrency``, ...).
        pids: ``cpu_proxy`` only: the process trees to measure (default: this process's).
        **options: the other fields of :class:`RecordConfig`.

    Attributes:
        run_id: the run's id (after ``start``).
        staging_dir: its staging folder.
        result: the ``PublishResult`` after a published exit, else ``None``.
        exit_code: set it (or let ``record`` set it) to store the program's exit status.
    """

    def __init__(self, out: str | os.PathLike[str] | None = None, workload: str | None = None,
                 *, axes: Mapping[str, Any] | None = None, pids: Sequence[int] | None = None,
                 config: RecordConfig | None = None, **options: Any) -> None:
        if config is None:
            if out is None or workload is None:
                raise TypeError("Recording needs out and workload (or config=)")
            config = RecordConfig(out=Path(out), workload=workload, axes=axes or {}, **options)
        self.config = config
        self.pids = list(pids) if pids is not None else None
        self.run_id: str = ""
        self.staging_dir: Path | None = None
        self.result: Any = None
        self.exit_code: int | None = None
        self.results: dict[str, Any] = {}
        self.extra_flags: list[str] = []
        """Quality flags the recorder adds to the run (``children_outlived``)."""
        self.work_begin_ns: int | None = None
        self.work_end_ns: int | None = None
        # the rows of a log read whole, or a CSV log streamed into its staged shard
        self.requests_from: (Callable[..., Sequence[dict[str, Any]] | StreamedRequests]
                             | None) = None
        self._sampler: Any = None
        self._run_events: Any = None
        self._events: Any = None
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Recording:
        """Prepare staging, start the sampler (t0) and idle for ``idle_before_s``.

        Raises:
            SamplerConfigError: the sampler cannot be used (nothing was started).
            RecordError: a run with this id is already staged.
        """
        from generation.events import EventRecorder
        from generation.sampler import Sampler, SamplerConfig
        from llm_powertrace_ds.shards import set_status

        cfg = self.config
        utc = dt.datetime.now(dt.timezone.utc)
        self.run_id = cfg.run_id or make_run_id(cfg.workload, cfg.program, cfg.axes, utc)
        out = cfg.out
        layout.check_readme_is_ours(out)  # refused before the command runs, not after
        out.mkdir(parents=True, exist_ok=True)
        sdir = layout.staging_dir(out, self.run_id)
        if sdir.exists():
            raise RecordError(f"run {self.run_id} is already staged in '{sdir}'")
        sdir.mkdir(parents=True)
        self.staging_dir = sdir
        _write_json(sdir / "meta.json", {"columns": self._planned_meta(), "settings": {},
                                         "sampler": {"source": cfg.sampler}, "sweep": "record"})
        set_status(out, self.run_id, "running", started_utc=utc.isoformat(), pid=os.getpid())
        sampler_cfg = SamplerConfig(source=cfg.sampler, period_ms=cfg.period_ms,
                                    gpu_indices=cfg.gpus)
        try:
            self._sampler = Sampler(sampler_cfg, sdir, pids=self.pids).start()
        except BaseException as exc:
            self._fail(f"{type(exc).__name__}: {exc}")
            raise
        self._run_events = EventRecorder(sdir, rank=None)
        self._events = EventRecorder(sdir, rank=_env_rank())
        self.idle(cfg.idle_before_s)
        self.work_begin_ns = time.monotonic_ns()
        return self

    def idle(self, seconds: float) -> None:
        """``idle_begin``, sleep ``seconds``, ``idle_end`` (nothing when ``seconds`` is 0)."""
        if seconds <= 0:
            return
        self._run_events.mark("idle_begin")
        time.sleep(seconds)
        self._run_events.mark("idle_end")

    def mark(self, kind: str, *, step: int | None = None, request_id: str | None = None,
             label: str | None = None, rank: int | None = None) -> int:
        """Record one event now on the sampler's clock (thread-safe).

        Args:
            kind: one of ``schema.EVENT_KINDS`` (``step_begin``, ``checkpoint_end``,
                ``prefill_begin``, ``request_arrival``, ``stage``, ...).
            step: optimiser step.
            request_id: the request, for request events.
            label: free text (a ``stage``'s name).
            rank: the rank (default: ``$RANK`` or 0; request, idle and steady events are
                run-level).

        Returns:
            The event's monotonic time in ns.

        Raises:
            ValueError: an unknown kind, or the recording is not running.
        """
        if self._events is None:
            raise ValueError("this Recording is not running (use it as a context manager)")
        if rank is None:
            return self._events.mark(kind, step=step, request_id=request_id, label=label)
        return self._events.mark(kind, step=step, request_id=request_id, label=label, rank=rank)

    def set_results(self, **results: Any) -> None:
        """Result columns (``steps``, ``tokens``, ``tokens_per_s``, ``final_loss``, ...)."""
        with self._lock:
            self.results.update(results)

    def stop(self, error: str | None = None) -> Any:
        """Idle for ``idle_after_s``, stop the sampler and publish (or record the failure).

        Args:
            error: why the block failed (``None``: it succeeded).

        Returns:
            The ``PublishResult``, or ``None`` when the run was kept as failed.
        """
        cfg = self.config
        self.work_end_ns = time.monotonic_ns()
        summary = None
        try:
            if error is None:
                self.idle(cfg.idle_after_s)
        finally:
            for rec in (self._events, self._run_events):
                if rec is not None:
                    rec.close()
            if self._sampler is not None:
                summary = self._sampler.stop()
        if error is None and summary is not None and not summary.complete:
            error = f"the sampler ended {summary.state}: {summary.message}"
        if error is not None and not cfg.keep_failed:
            self._fail(error)
            return None
        try:
            self.result = self._publish()
        except BaseException as exc:
            self._fail(f"{type(exc).__name__}: {exc}", tb=traceback.format_exc(limit=20))
            raise
        return self.result

    def _fail(self, error: str, tb: str | None = None) -> None:
        from llm_powertrace_ds.shards import set_status

        extra: dict[str, Any] = {"error": error}
        if tb:
            extra["traceback"] = tb
        if self.exit_code is not None:
            extra["exit_code"] = self.exit_code
        set_status(self.config.out, self.run_id, "failed", **extra)
        log.warning("run %s kept as failed in %s, not published (%s); keep_failed (record "
                    "--keep-failed) publishes it", self.run_id,
                    layout.staging_root(self.config.out), error)

    def _planned_meta(self) -> dict[str, Any]:
        cfg = self.config
        return planned_meta(cfg.workload, self.run_id, cfg.axes, program=cfg.program)

    def _publish(self) -> Any:
        from generation.sampler import spool_to_run
        from llm_powertrace_ds.hooks import rebuild_card
        from llm_powertrace_ds.shards import publish_run

        assert self.staging_dir is not None
        names = schema.RUN_LEVEL_FIELDS[self.config.workload]
        meta = self._planned_meta()
        results = {**read_results(self.staging_dir), **self.results}
        unknown = sorted(k for k in results if k not in names and not k.startswith("_"))
        if unknown:
            raise InputError(f"unknown result columns {', '.join(unknown)}", field=unknown[0])
        # columns the user gave win over what the program reports
        meta.update({k: v for k, v in results.items()
                     if v is not None and k in names and meta.get(k) is None})
        if self.exit_code is not None:
            meta["exit_code"] = self.exit_code
        record = spool_to_run(self.staging_dir, meta)
        requests = results.get("_requests")
        streamed = False
        if self.requests_from is not None:
            from llm_powertrace_ds.importers.requests import StreamedRequests, summary_columns

            if self.config.workload != "inference":
                raise InputError("a request log belongs to an inference run (--workload "
                                 "inference)", field="workload")
            run_end_ms = max((int(d.t_ms[-1]) for d in record.devices if len(d.t_ms)),
                             default=0)
            loaded = self.requests_from(self.staging_dir, run_id=self.run_id,
                                        platform=record.platform, run_end_ms=run_end_ms)
            if isinstance(loaded, StreamedRequests):  # a CSV log, already the staged shard
                streamed = True
                requests = loaded.requests
                _fill_request_results(record, loaded.summary)
            else:
                requests = loaded
                _fill_request_results(record, summary_columns(loaded))
        if requests:
            record.requests = requests
        record.add_flags(*self.extra_flags)
        try:
            result = publish_run(self.config.out, record)
        finally:
            if streamed:  # published: renamed away; else the staged shard and its work files
                from llm_powertrace_ds.importers.requests import discard

                discard(self.config.out, self.run_id)
        # the card's configs block (and its files fingerprint) current after every recording;
        # the full card too when a card writer is registered (the CLI registers it)
        rebuild_card(self.config.out)
        return result

    # -- context manager ---------------------------------------------------------------------
    def __enter__(self) -> Recording:
        global _active
        self.start()
        _active = self
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: Any) -> None:
        global _active
        _active = None
        error = None if exc is None else f"{type(exc).__name__}: {exc}"
        self.stop(error)


__all__ = ["RECORD_DIR_ENV", "Attached", "RecordConfig", "RecordError", "Recording", "active",
           "attach", "check_axes", "make_run_id", "read_results"]
