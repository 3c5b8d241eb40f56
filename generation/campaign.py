"""A campaign: the sweeps that make one release of the dataset, with a GPU-hour budget.

A campaign file is a YAML mapping::

    name: llm-powertrace-v1
    platform: h100_sxm_80gb     # the GPU the plan is for (its memory decides what fits)
    gpus_per_node: 8
    budget_gpu_hours: 1000      # the plan must fit it
    setup_s_per_run: 180        # model load, warm-up and teardown per run (outside the window)
    unknown_run_s: 600          # a run of a fixed number of requests or steps, assumed length
    rationale: |                # why these sweeps (the design of experiments), free text
    datasets: [{name: ..., licence: ...}]
    sweeps: [campaign-v1-ft-scale.yaml, ...]   # sweep files, relative to the campaign file

``generate CAMPAIGN --plan`` plans every sweep for the campaign's platform (no GPU needed),
drops the cells that cannot fit the GPU's memory (listed with the reason), and counts runs and
GPU-hours. GPU-hours of a run = num_gpus × (idle_before_s + duration + idle_after_s +
setup_s_per_run) / 3600, where duration = ``target_duration_s`` or ``unknown_run_s``;
``--slurm FILE`` writes a Slurm array script (one task per sweep, one node each, ``nnodes``
nodes for multi-node sweeps) whose every task restores journalled GPU settings when it ends.

Example:
    >>> plan = plan_campaign("generation/campaigns/llm-powertrace-v1.yaml")  # doctest: +SKIP
    >>> plan.gpu_hours <= plan.budget_gpu_hours                               # doctest: +SKIP
    True
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_powertrace_ds.errors import InputError

from .sweep import SweepError, load_sweep, load_yaml_with_lines, plan, read_sweep_text
from .workloads import models

CAMPAIGN_KEYS = ("name", "description", "platform", "gpus_per_node", "budget_gpu_hours",
                 "setup_s_per_run", "unknown_run_s", "rationale", "datasets", "sweeps",
                 "slurm")
FINETUNE_AXES = ("model", "method", "batch_size", "seq_len", "precision", "parallelism",
                 "dp_size", "gradient_checkpointing", "checkpoint_every_steps", "lora_rank",
                 "power_limit_setting_w")
SLURM_KEYS = ("time",)
"""What a campaign's ``slurm`` mapping may set (anything else is refused by name)."""
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""A campaign name: it becomes the Slurm job name and its log file's name."""
SLURM_TIME_RE = re.compile(r"^(?:\d{1,7}(?::\d{1,2}){0,2}|\d{1,5}-\d{1,2}(?::\d{1,2}){0,2}"
                           r"|UNLIMITED|INFINITE)$")
"""Slurm's ``--time`` formats: ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``."""
SERVING_AXES = ("serving_engine", "concurrency", "arrival_pattern", "arrival_rate",
                "prompt_len", "output_len", "length_distribution", "tp_size", "weight_quant",
                "kv_cache_quant", "gpu_clock_mhz", "power_limit_setting_w", "batch_size")


def is_campaign(path: str | Path) -> bool:
    """Whether a YAML file is a campaign (a mapping with a ``sweeps`` list), not a sweep."""
    try:
        data, _ = load_yaml_with_lines(read_sweep_text(Path(path)), path)
    except SweepError:  # not a regular file, too big, not UTF-8, not YAML: never a campaign
        return False
    return isinstance(data, dict) and isinstance(data.get("sweeps"), list)


@dataclass(frozen=True)
class Campaign:
    """A parsed campaign file (see the module docstring)."""

    path: Path
    name: str
    platform: str
    gpus_per_node: int
    budget_gpu_hours: float
    setup_s_per_run: float
    unknown_run_s: float
    sweeps: tuple[Path, ...]
    rationale: str = ""
    datasets: tuple[dict[str, Any], ...] = ()
    slurm: dict[str, Any] = field(default_factory=dict)


def _number(data: dict[str, Any], key: str, path: Path, minimum: float = 0.0) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise InputError(f"{key} must be a number >= {minimum:g} (got {value!r})", file=path,
                         field=key)
    return float(value)


def _whole(data: dict[str, Any], key: str, path: Path) -> int:
    value = _number(data, key, path, 1)
    if not value.is_integer():
        raise InputError(f"{key} must be a whole number (got {data.get(key)!r})", file=path,
                         field=key)
    return int(value)


def load_campaign(path: str | Path) -> Campaign:
    """Read and check a campaign file.

    Raises:
        InputError: an unknown key, a missing or bad value, or a sweep file that does not
            exist (one line naming the file, the field and the value).
    """
    path = Path(path)
    data, _ = load_yaml_with_lines(read_sweep_text(path), path)
    if not isinstance(data, dict):
        raise InputError("a campaign file is a YAML mapping", file=path)
    for key in data:
        if key not in CAMPAIGN_KEYS:
            raise InputError(f"unknown key {key!r}; known: {', '.join(CAMPAIGN_KEYS)}",
                             file=path, field=str(key))
    sweeps: list[Path] = []
    for i, entry in enumerate(data.get("sweeps") or []):
        if not isinstance(entry, str) or _has_control(entry):
            raise InputError(f"sweeps[{i}] must be a file name on one line (got {entry!r})",
                             file=path, field="sweeps")
        sweep_path = (path.parent / entry).resolve()
        if not sweep_path.is_file():
            raise InputError(f"sweeps[{i}] '{entry}' does not exist", file=path, field="sweeps")
        if sweep_path in sweeps:
            raise InputError(f"sweeps[{i}] '{entry}' repeats sweeps[{sweeps.index(sweep_path)}] "
                             "(a sweep listed twice would be planned and scheduled twice)",
                             file=path, field="sweeps")
        sweeps.append(sweep_path)
    if not sweeps:
        raise InputError("sweeps must list at least one sweep file", file=path, field="sweeps")
    name = data.get("name")
    platform = data.get("platform")
    if not isinstance(name, str) or not isinstance(platform, str):
        raise InputError("name and platform are required strings", file=path, field="name")
    if not NAME_RE.match(name):
        raise InputError(f"value {name!r} is not a campaign name (letters, digits, '.', '_', "
                         "'-', at most 64; it names the Slurm job and its log)", file=path,
                         field="name")
    return Campaign(
        path=path, name=name, platform=platform,
        gpus_per_node=_whole(data, "gpus_per_node", path),
        budget_gpu_hours=_number(data, "budget_gpu_hours", path, 0),
        setup_s_per_run=_number(data, "setup_s_per_run", path, 0),
        unknown_run_s=_number(data, "unknown_run_s", path, 0),
        sweeps=tuple(sweeps), rationale=str(data.get("rationale") or ""),
        datasets=tuple(data.get("datasets") or ()), slurm=_slurm(data.get("slurm"), path))


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def _slurm(raw: Any, path: Path) -> dict[str, Any]:
    """The campaign's ``slurm`` settings, each checked against its Slurm format."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InputError(f"slurm must be a mapping (got {raw!r})", file=path, field="slurm")
    for key, value in raw.items():
        if key not in SLURM_KEYS:
            raise InputError(f"unknown key {key!r}; known: {', '.join(SLURM_KEYS)}", file=path,
                             field=f"slurm.{key}")
        if key == "time" and not (isinstance(value, str) and SLURM_TIME_RE.match(value)):
            raise InputError(f"value {value!r} is not a quoted Slurm time ('minutes', "
                             "'hours:minutes:seconds', 'days-hours[:minutes[:seconds]]'; YAML "
                             "reads an unquoted 12:00:00 as a number)", file=path,
                             field="slurm.time")
    return dict(raw)


@dataclass
class SweepPlan:
    """One sweep of the plan: runs that will run, their GPU-hours, cells refused."""

    file: str
    name: str
    workload: str
    runs: int
    gpu_hours: float
    max_gpus: int
    nnodes: int
    too_big: list[dict[str, str]]


@dataclass
class CampaignPlan:
    """The whole campaign's plan (``--plan``)."""

    campaign: str
    platform: str
    budget_gpu_hours: float
    sweeps: list[SweepPlan]
    families: list[str]
    min_model_params: int | None
    max_model_params: int | None
    moe: bool
    axes: list[str]
    rationale: str

    @property
    def runs(self) -> int:
        return sum(s.runs for s in self.sweeps)

    @property
    def gpu_hours(self) -> float:
        return round(sum(s.gpu_hours for s in self.sweeps), 1)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form of ``--plan --format json``."""
        return {"campaign": self.campaign, "platform": self.platform, "runs": self.runs,
                "gpu_hours": self.gpu_hours, "budget_gpu_hours": self.budget_gpu_hours,
                "fits_budget": self.gpu_hours <= self.budget_gpu_hours,
                "families": self.families, "min_model_params": self.min_model_params,
                "max_model_params": self.max_model_params, "moe": self.moe, "axes": self.axes,
                "too_big": sum(len(s.too_big) for s in self.sweeps),
                "sweeps": [{"file": s.file, "name": s.name, "workload": s.workload,
                            "runs": s.runs, "gpu_hours": round(s.gpu_hours, 1),
                            "max_gpus": s.max_gpus, "nnodes": s.nnodes,
                            "too_big": s.too_big} for s in self.sweeps]}


def spec_of(model: str) -> models.ModelSpec | None:
    """The zoo entry of a model name or Hub id (``None`` when the zoo has neither)."""
    try:
        return models.get_spec(model)
    except InputError:
        return next((s for s in models.ZOO.values() if s.hub_id == model), None)


def plan_campaign(path: str | Path) -> CampaignPlan:
    """Plan every sweep of a campaign for its platform (see the module docstring).

    Raises:
        InputError: a bad campaign file; SweepError: a sweep with problems.
    """
    from .memory_estimate import too_big
    from .planning import planning_machine

    campaign = load_campaign(path)
    sweeps: list[SweepPlan] = []
    families: set[str] = set()
    params: list[int] = []
    moe = False
    values: dict[str, set[str]] = {}
    names: dict[str, Path] = {}
    for sweep_path in campaign.sweeps:
        sweep = load_sweep(sweep_path)
        if sweep.name in names:
            raise InputError(f"sweeps '{os.path.relpath(sweep_path)}' and "
                             f"'{os.path.relpath(names[sweep.name])}' are both named "
                             f"{sweep.name!r}: their runs would be planned and scheduled twice",
                             file=campaign.path, field="sweeps")
        names[sweep.name] = sweep_path
        machine = planning_machine(sweep.sampler, platform=campaign.platform)
        runs = plan(sweep, machine)
        hours = 0.0
        refused = []
        kept = 0
        max_gpus = 1
        for run in runs:
            s = run.settings
            reason = too_big(s, campaign.platform)
            if reason is not None:
                refused.append({"run_id": run.run_id, "reason": reason})
                continue
            kept += 1
            gpus = int(s.get("num_gpus") or 1)
            max_gpus = max(max_gpus, gpus)
            duration = s.get("target_duration_s") or campaign.unknown_run_s
            hours += gpus * (sweep.idle_before_s + float(duration) + sweep.idle_after_s
                             + campaign.setup_s_per_run) / 3600.0
            spec = spec_of(str(s.get("model")))
            if spec is not None:
                families.add(spec.family)
                params.append(spec.estimated_params())
                moe = moe or spec.moe
            for axis in FINETUNE_AXES if sweep.workload == "finetune" else SERVING_AXES:
                if axis in s:
                    values.setdefault(f"{sweep.workload}.{axis}", set()).add(repr(s[axis]))
        nnodes = max(1, -(-max_gpus // campaign.gpus_per_node))
        sweeps.append(SweepPlan(os.path.relpath(sweep_path), sweep.name, sweep.workload, kept,
                                hours, max_gpus, nnodes, refused))
    axes = sorted(k for k, v in values.items() if len(v) > 1)
    return CampaignPlan(campaign=campaign.name, platform=campaign.platform,
                        budget_gpu_hours=campaign.budget_gpu_hours, sweeps=sweeps,
                        families=sorted(families), min_model_params=min(params, default=None),
                        max_model_params=max(params, default=None), moe=moe, axes=axes,
                        rationale=campaign.rationale)


SLURM_TEMPLATE = """\
#!/bin/bash
# {name}: one Slurm array task per single-node sweep ({n} sweeps), {gpn} GPUs per node,
# written by `llm-powertrace generate {campaign} --plan --slurm`. Planned: {runs} runs,
# {hours} GPU-hours (budget {budget}). Every task fills one shared dataset folder (resumable:
# a requeued task skips what is published), keeps the whole node busy (--parallel-runs auto)
# and, however it ends, restores GPU settings (power caps, locked clocks) a killed run left.
#SBATCH --job-name={name}
#SBATCH --array=0-{last}
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gpus-per-node={gpn}
#SBATCH --exclusive
#SBATCH --time={time}
#SBATCH --output={name}-%A_%a.log
set -euo pipefail
OUT="${{LLM_POWERTRACE_OUT:-llm-powertrace}}"
SWEEPS=({sweeps})
SWEEP="${{SWEEPS[$SLURM_ARRAY_TASK_ID]}}"
# the settings-restore epilog of every task (also on failure, timeout or scancel)
trap 'llm-powertrace restore-gpu-settings || true' EXIT
llm-powertrace generate "$SWEEP" --out "$OUT" --parallel-runs auto
{multinode}"""
MULTINODE_LINE = """\
# multi-node sweep {sweep} ({nnodes} nodes): its own job, one launcher per node (node rank,
# node count and master address from Slurm's environment):
#   sbatch --nodes={nnodes} --ntasks-per-node=1 --gpus-per-node={gpn} --exclusive \\
#     --wrap "srun bash -c 'trap \\"llm-powertrace restore-gpu-settings || true\\" EXIT; \\
#     llm-powertrace generate {sweep} --out \\$LLM_POWERTRACE_OUT --nnodes {nnodes}'"
"""


def slurm_script(path: str | Path, campaign_plan: CampaignPlan | None = None) -> str:
    """The Slurm array script of a campaign (see :data:`SLURM_TEMPLATE`).

    Every value written into it is checked first: the name and ``slurm.time`` by their formats
    (:func:`load_campaign`), the file names single-line and shell-quoted, so no text of the
    campaign becomes a command or ends an ``#SBATCH`` block.

    Raises:
        InputError: a campaign or sweep path holding a control character (a newline would end
            the comment it is written in).
    """
    campaign = load_campaign(path)
    cp = campaign_plan or plan_campaign(path)
    for where, p in [("campaign", campaign.path),
                     *((f"sweeps[{i}]", s) for i, s in enumerate(campaign.sweeps))]:
        if _has_control(os.path.relpath(p)):
            raise InputError(f"the path {os.path.relpath(p)!r} holds a control character: it "
                             "cannot be written into a Slurm script", file=campaign.path,
                             field=where)
    single = [(p, s) for p, s in zip(campaign.sweeps, cp.sweeps, strict=True) if s.nnodes == 1]
    multi = [(p, s) for p, s in zip(campaign.sweeps, cp.sweeps, strict=True) if s.nnodes > 1]
    longest_h = max((s.gpu_hours / max(1, s.max_gpus) for _, s in single), default=1.0)
    hours = max(1, int(longest_h + 1.999))
    return SLURM_TEMPLATE.format(
        name=campaign.name, n=len(single), gpn=campaign.gpus_per_node,
        campaign=os.path.relpath(campaign.path), runs=cp.runs, hours=cp.gpu_hours,
        budget=campaign.budget_gpu_hours, last=max(0, len(single) - 1),
        time=str(campaign.slurm.get("time", f"{hours}:00:00")),
        sweeps=" ".join(shlex.quote(os.path.relpath(p)) for p, _ in single),
        multinode="".join(MULTINODE_LINE.format(sweep=shlex.quote(os.path.relpath(p)),
                                                nnodes=s.nnodes, gpn=campaign.gpus_per_node)
                          for p, s in multi))
