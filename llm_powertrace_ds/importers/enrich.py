"""Finishing an imported run: what the log leaves out but published facts or its own labels give.

Applied by :func:`common.assemble_run` to every imported run (never to measured ones):

- **Power limit from the spec table.** A log without ``power.limit`` leaves the capacity C
  unknown, and with it ``idle_fraction``, ``near_limit_fraction``, ``step_count``,
  ``limit_utilisation`` and the %-of-limit ramps. When no device reports a limit (enforced or
  default) and the run sets no cap, each device's ``default_power_limit_w`` becomes the platform's
  datasheet value (:data:`llm_powertrace_ds.specs.PLATFORM_SPECS`) and the run gets the flag
  ``power_limit_from_spec``. Unknown or ambiguous platforms (a bare ``h100``) stay null.
- **Missing metadata** the seed authors flag: no ``precision`` gives ``precision_unknown``
  (no GPU name already gives ``platform_unknown``).
- **Source stages as stage events.** Labels of another tool's ``stage`` column (``CKPT``,
  ``EVAL``, ...) arrive as ``stage`` events at each label change. Known labels also get the
  generator's begin/end kinds (``checkpoint_begin``/``checkpoint_end``, ...), so the stage
  metrics (``checkpoint_dip_pct``) read imported runs the same way: a stage begins at its event
  and ends at the next ``stage`` event, or at the run's last reading when none follows.
"""

from __future__ import annotations

import re

from .. import specs
from ..run import Event, Run

STAGE_KINDS: dict[str, str] = {
    "ckpt": "checkpoint", "checkpoint": "checkpoint", "save": "checkpoint",
    "eval": "eval", "evaluation": "eval", "validation": "eval",
    "warmup": "warmup", "warm_up": "warmup",
    "idle": "idle",
    "prefill": "prefill", "decode": "decode",
}
"""Source stage label (lower case, non-letters as ``_``) -> the event kind pair it maps to."""


def _stage_key(label: str | None) -> str:
    return re.sub(r"[^a-z]+", "_", str(label or "").lower()).strip("_")


def stage_kind_events(run: Run) -> list[Event]:
    """``<kind>_begin``/``<kind>_end`` events for the run's known ``stage`` labels."""
    stages = sorted((e for e in run.events if e.kind == "stage"), key=lambda e: e.t_ms)
    if not stages:
        return []
    last = max((int(d.t_ms[-1]) for d in run.devices if len(d.t_ms)), default=stages[-1].t_ms)
    out = []
    for i, ev in enumerate(stages):
        kind = STAGE_KINDS.get(_stage_key(ev.label))
        if kind is None:
            continue
        end = stages[i + 1].t_ms if i + 1 < len(stages) else last
        out.append(Event(t_ms=ev.t_ms, kind=f"{kind}_begin", rank=ev.rank, label=ev.label))
        out.append(Event(t_ms=end, kind=f"{kind}_end", rank=ev.rank, label=ev.label))
    return out


def apply_spec_power_limit(run: Run) -> bool:
    """Give devices the platform's datasheet limit when the log has none (see the module doc)."""
    if run.meta.get("power_limit_setting_w") is not None or run.meta.get("power_limit_w"):
        return False
    if any(d.power_limit_w or d.default_power_limit_w for d in run.devices):
        return False
    limit = specs.spec_power_limit_w(run.platform)
    if limit is None or not run.devices:
        return False
    for dev in run.devices:
        dev.default_power_limit_w = limit
    run.add_flags("power_limit_from_spec")
    return True


def finish_imported_run(run: Run) -> Run:
    """Apply the spec-table power limit and the stage mapping to an imported run (in place)."""
    apply_spec_power_limit(run)
    if not run.meta.get("precision"):
        run.add_flags("precision_unknown")
    mapped = stage_kind_events(run)
    if mapped:
        run.events = sorted([*run.events, *mapped], key=lambda e: e.t_ms)
    return run
