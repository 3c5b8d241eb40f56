"""The figure of ``mitigate --figure``: load, grid side and state of charge on one time axis."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..atomic import atomic_path
from ..errors import MissingExtra
from .apply import Mitigation

MAX_POINTS = 20_000


def plot_mitigation(result: Mitigation, out: str | Path) -> Path:
    """Draw load, grid side and state of charge on one time axis.

    Two panels sharing the time axis: input load, load after cap/floor and grid side (top);
    the storage's state of charge (bottom, when there is storage). Long profiles are drawn as
    per-bucket min/max envelopes so that no peak disappears from the picture.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtra("matplotlib is not installed: pip install 'llm-powertrace[plot]'"
                           ) from None
    prof = result.profile
    t = prof.start_s - prof.start_s[0]
    peak = float(max(prof.power_w.max(), result.grid_w.max()))
    scale, unit = (1e6, "MW") if peak >= 1e6 else (1e3, "kW") if peak >= 1e3 else (1.0, "W")

    def env(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        step = max(1, int(np.ceil(len(y) / MAX_POINTS)))
        if step == 1:
            return t, y
        n = len(y) // step * step
        tt = np.repeat(t[:n:step], 2)
        blocks = y[:n].reshape(-1, step)
        yy = np.column_stack([blocks.min(axis=1), blocks.max(axis=1)]).ravel()
        return tt, yy

    has_soc = result.soc_j is not None
    fig = Figure(figsize=(11, 6.5 if has_soc else 4.0), layout="constrained")
    axes = fig.subplots(2 if has_soc else 1, 1, sharex=True, squeeze=False)[:, 0]
    title = f"mitigate {prof.file} at {prof.resolution_s:g} s"
    if not prof.measured:
        title += " (composed, not measured)"
    if prof.cpu_proxy:
        title += " — cpu_proxy sources: NOT GPU data"
    fig.suptitle(title)
    ax = axes[0]
    ax.plot(*env(prof.power_w / scale), lw=0.6, color="0.6", label="load (input)")
    if result.plan.cap_pct is not None or result.plan.floor_pct is not None:
        ax.plot(*env(result.load_w / scale), lw=0.8, color="C1", label="load after cap/floor")
    ax.plot(*env(result.grid_w / scale), lw=1.2, color="C0", label="grid side")
    ax.set_ylabel(f"power ({unit})")
    ax.legend(loc="upper right", fontsize="small")
    if has_soc:
        assert result.soc_j is not None
        soc = result.soc_j - min(0.0, float(result.soc_j.min()))
        e_unit, e_scale = ("MWh", 3.6e9) if soc.max() >= 3.6e9 else ("kWh", 3.6e6)
        axes[1].plot(*env(soc / e_scale), lw=1.0, color="C2")
        axes[1].set_ylabel(f"state of charge ({e_unit})")
    axes[-1].set_xlabel("time (s)")
    out = Path(out)
    with atomic_path(out, suffix=out.suffix) as tmp:
        fig.savefig(tmp, dpi=110)
    return out
