"""Workloads: what runs under the sampler (fine-tuning, inference), behind one small interface.

A workload module (``finetune.py``, the ``inference/`` package) defines ``SPEC``, a :class:`WorkloadSpec`:
the settings a sweep may give it (each typed, most of them columns of the workload's config in
``llm_powertrace_ds.schema``), how to resolve defaults and derived values, which combinations
are impossible on a given machine, a readable slug for run ids, and ``run``, which does the
work in the current process (one rank of it under ``torchrun``). Importing a workload module
must stay cheap: torch, transformers, TRL and PEFT are imported inside ``run`` only, so sweep
validation, ``--dry-run`` and a fully resumed sweep never load them.

``generation.sweep`` and ``generation.runner`` know workloads only through :func:`get_workload`
and this interface, so a new workload is one module plus one line in :data:`WORKLOAD_MODULES`.

Example:
    >>> spec = get_workload("finetune")
    >>> spec.settings["batch_size"].dtype
    'int32'
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_powertrace_ds import schema
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.run import coerce_scalar

if TYPE_CHECKING:
    from .gpu_settings import GpuSettings

WORKLOAD_MODULES: dict[str, str] = {
    "finetune": "generation.workloads.finetune",
    "inference": "generation.workloads.inference",
}
"""Workload name -> module defining ``SPEC``."""


GPU_AXES = {"gpu_clock_mhz": "lock the GPU clock", "power_limit_setting_w": "apply a power cap"}
"""The sweep axes that change GPU settings, and what each asks the GPU to do."""


@dataclass(frozen=True)
class Setting:
    """One setting a sweep may give a workload.

    Attributes:
        name: the key in the sweep file (equal to the column name when ``column``).
        dtype: ``string``, ``bool``, ``int16``/``int32``/``int64`` or ``float32``/``float64``.
        default: the value when the sweep gives none (``None`` = null or resolved later).
        choices: the allowed values, if a fixed vocabulary.
        minimum: the smallest allowed number (inclusive), if any.
        column: whether the resolved value is copied into the run's metadata (same name).
        doc: one line for ``--help`` style listings.
    """

    name: str
    dtype: str
    default: Any = None
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    column: bool = True
    doc: str = ""

    def check(self, value: Any) -> tuple[Any, str | None]:
        """Coerce ``value`` to this setting's type.

        A sweep file is stricter than an imported file: YAML already types its scalars, so a
        boolean must be ``true``/``false``, a number must be a YAML number, NaN is refused and
        a string is any scalar but a boolean. The conversion itself (integral floats, ranges,
        finiteness) is ``llm_powertrace_ds.run.coerce_scalar``, the rule imports use too.

        Returns:
            ``(value, None)`` when valid, else ``(value, message)`` where the message names the
            expected type or choices and the bad value.
        """
        if value is None:
            return None, None
        problem = _yaml_type_problem(self.dtype, value)
        if problem is not None:
            return value, f"{value!r} {problem}"
        try:
            value = coerce_scalar(value, self.dtype)
        except (TypeError, ValueError) as exc:
            return value, f"{value!r} is {exc}"
        if self.choices is not None and value not in self.choices:
            return value, f"{value!r} is not one of {', '.join(map(str, self.choices))}"
        if self.minimum is not None and isinstance(value, (int, float)) and value < self.minimum:
            return value, f"{value!r} is below the minimum {self.minimum:g}"
        return value, None


def _yaml_type_problem(dtype: str, value: Any) -> str | None:
    """Why a YAML scalar cannot be given for a setting of ``dtype`` (``None``: it can)."""
    if dtype == "bool":
        return None if isinstance(value, bool) else "is not a boolean (true/false)"
    if dtype.startswith("int"):
        ok = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        return None if ok and not isinstance(value, bool) else "is not an integer"
    if dtype.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "is not a number"
        return "is not a finite number" if isinstance(value, float) and math.isnan(value) else None
    if dtype == "string" and isinstance(value, (dict, list, bool)):
        return "is not a string"
    return None


def settings_from_columns(columns: list[schema.Column], **overrides: dict[str, Any]) -> dict[str, Setting]:
    """Settings named and typed after schema columns.

    Args:
        columns: the workload's axis columns (e.g. ``schema.FINETUNE_AXES``).
        overrides: per column, keyword arguments of :class:`Setting` (``default``, ``choices``,
            ``minimum``).

    Returns:
        name -> ``Setting`` (dtype taken from the column's feature, doc from its description).
    """
    out = {}
    for col in columns:
        extra = overrides.get(col.name, {})
        assert col.dtype is not None, f"{col.name} is not a scalar column"
        out[col.name] = Setting(col.name, col.dtype, doc=col.description, **extra)
    return out


@dataclass(frozen=True)
class MachineInfo:
    """What sweep validation knows about the machine the runs will use.

    Attributes:
        source: the resolved sampler source, ``nvml`` or ``cpu_proxy``.
        platform: the platform slug (the split) of the rows.
        num_devices: GPUs the sampler will read (``nvml``) or CPU cores (``cpu_proxy``).
        cuda: whether CUDA devices are usable by the workload.
        bf16: whether the devices support bf16 compute.
        bitsandbytes: whether bitsandbytes is installed (QLoRA).
        can_set_power_limit: whether power caps may be set (root, NVML, not the lent machine).
        extra: anything else a workload wants to record.
    """

    source: str
    platform: str
    num_devices: int
    cuda: bool
    bf16: bool
    bitsandbytes: bool = False
    can_set_power_limit: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunContext:
    """What a workload's ``run`` gets from the runner (or the torchrun worker).

    Attributes:
        run_id: the run.
        staging_dir: ``.staging/<run_id>/`` (events, results, checkpoints by default).
        mark: ``mark(kind, step=None, label=None)`` records an event of this rank on the run
            clock; run-level events are the runner's.
        rank: this process's rank (0 when single).
        world_size: number of ranks.
        local_rank: rank on this node.
        checkpoint_dir: where checkpoints go.
        progress: show the within-run progress bar (steps).
        device: ``cuda`` or ``cpu``.
        prepared: what the workload's ``setup`` built before the sampler started (the model on
            its device, data, trainer or engine); ``run`` consumes it.
    """

    run_id: str
    staging_dir: Path
    mark: Callable[..., object]
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    checkpoint_dir: Path | None = None
    progress: bool = True
    device: str = "cpu"
    prepared: Any = None


class WorkloadSpec:
    """Base class of a workload: its settings, resolution, checks, slug and ``run``.

    Subclasses set :attr:`name` and :attr:`settings` and override the methods below.
    """

    name: str = ""
    settings: dict[str, Setting] = {}

    def prepare(self) -> None:
        """Import the heavy libraries now (before the sampler's first tick); default: nothing."""

    def setup(self, resolved: dict[str, Any], ctx: RunContext) -> Any:
        """Build what the run needs before the sampler starts.

        Model on its device, data, CUDA context, warm-up; the runner puts the result in
        ``ctx.prepared``. Default: nothing (``run`` then sets up inside the measured window).
        """
        return None

    def resolve(self, values: dict[str, Any], machine: MachineInfo) -> dict[str, Any]:
        """Fill defaults and derived values (pure; no heavy imports).

        Args:
            values: the settings given by the sweep, already type-checked.
            machine: the machine the runs will use.

        Returns:
            Every setting resolved (the dict hashed into the run id), plus derived columns.
        """
        return {name: values.get(name, s.default) for name, s in self.settings.items()}

    def check(self, resolved: dict[str, Any], machine: MachineInfo) -> list[tuple[str, str]]:
        """Impossible combinations of one resolved run on ``machine``.

        Returns:
            ``(setting name, message)`` pairs; the sweep reports each at that setting's line.
        """
        return []

    def slug(self, resolved: dict[str, Any]) -> str:
        """A short readable slug of the run (the run id adds a hash)."""
        return self.name

    def num_processes(self, resolved: dict[str, Any]) -> int:
        """How many ranks the run launches (1 runs in the runner's own process by default)."""
        return 1

    def in_process(self, resolved: dict[str, Any]) -> bool:
        """Whether the run computes in the runner's processes (torch, the GPUs it verifies).

        ``False`` for work done by a server the run only talks to (an engine over HTTP): the
        runner then neither imports the heavy libraries nor checks torch's devices.
        """
        return True

    def missing_extra(self, resolved: dict[str, Any]) -> Exception | None:
        """A ``MissingExtra`` when the run needs an optional extra that is not installed.

        ``generate`` raises the first one before any run starts (a dry run too), as one line
        naming the extra. Default: nothing is missing.
        """
        return None

    def columns(self, resolved: dict[str, Any]) -> dict[str, Any]:
        """The run metadata columns known before running (axes, model, identity parts)."""
        return {k: v for k, v in resolved.items() if k in self.settings and self.settings[k].column}

    def device_settings(self, resolved: dict[str, Any],
                        gpu_indices: list[int] | tuple[int, ...]) -> GpuSettings:
        """The GPU settings the run asks for, as a context manager that restores them.

        The axes a workload declares among its settings are applied: ``gpu_clock_mhz`` (a locked
        SM clock) and ``power_limit_setting_w`` (a power cap). The runner enters it before the
        sampler starts (so the sampler reads the enforced values) and leaves it after the
        sampler stops. Nothing is touched when the run asks for neither.
        """
        from .gpu_settings import GpuSettings

        def axis(name: str) -> Any:
            return resolved.get(name) if name in self.settings else None

        return GpuSettings(gpu_indices, clock_mhz=axis("gpu_clock_mhz"),
                           power_limit_w=axis("power_limit_setting_w"))

    def gpu_axis_problems(self, resolved: dict[str, Any],
                          machine: MachineInfo) -> list[tuple[str, str]]:
        """Why the GPU axes a run asks for cannot be applied on ``machine`` (empty: they can).

        Only the axes this workload declares are looked at. Changing GPU settings needs NVML
        (never on ``cpu_proxy``), root and NVML permission (never on a lent device machine).
        """
        problems = []
        for key, what in GPU_AXES.items():
            if key not in self.settings or resolved.get(key) is None:
                continue
            if machine.source != "nvml":
                problems.append((key, f"cannot {what}: {machine.source} has no GPU clocks or "
                                 "power limit"))
            elif not machine.can_set_power_limit:
                problems.append((key, f"cannot {what}: it needs root and NVML permission on "
                                 "this machine (and is never done on a lent device machine)"))
        return problems

    def run(self, resolved: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        """Do the work in this process and return result columns (rank 0's are published)."""
        raise NotImplementedError


def get_workload(name: str) -> WorkloadSpec:
    """The ``SPEC`` of a registered workload.

    Raises:
        InputError: unknown workload, or its module is not available.
    """
    module_name = WORKLOAD_MODULES.get(name)
    if module_name is None:
        raise InputError(f"workload {name!r} is not one of {', '.join(WORKLOAD_MODULES)}",
                         field="workload")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise InputError(f"workload {name!r} is not available in this version",
                             field="workload") from None
        raise
    return module.SPEC
