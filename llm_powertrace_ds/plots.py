"""Pictures of runs, sweeps and fits (matplotlib, the optional ``plot`` extra).

matplotlib is imported lazily, inside each function, and only through ``matplotlib.figure.Figure``
whose ``savefig`` renders with the Agg canvas — no pyplot, no global backend switch, no window.
When matplotlib is missing the functions raise :class:`MissingExtra` with a one-line message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import metrics as metrics_mod
from . import schema
from .errors import InputError, MissingExtra
from .run import Run

MAX_POINTS = 20_000
"""Longest line drawn for an overview of stepped data (longer lines are strided)."""
ENVELOPE_BUCKETS = 1_500
"""A run's overview line longer than 2 × this is drawn as a min/max envelope of this many
time buckets (≈ 3 per pixel of the overview's width at the card's 110 dpi): every peak and dip
stays visible, which striding cannot promise, and the figure draws in a fraction of the time."""
PHASES = {  # begin kind -> (end kind, colour, label)
    "idle_begin": ("idle_end", "#bbbbbb", "idle"),
    "warmup_begin": ("warmup_end", "#f5d76e", "warm-up"),
    "checkpoint_begin": ("checkpoint_end", "#e67e22", "checkpoint"),
    "eval_begin": ("eval_end", "#9b59b6", "eval"),
    "steady_begin": ("steady_end", "#2ecc71", "steady state"),
}


def _figure(**kwargs: Any) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtra("matplotlib is not installed: pip install 'llm-powertrace[plot]'"
                           ) from None
    return Figure(**kwargs)


def _stride(n: int) -> int:
    return max(1, int(np.ceil(n / MAX_POINTS)))


def envelope(t: np.ndarray, y: np.ndarray,
             buckets: int = ENVELOPE_BUCKETS) -> tuple[np.ndarray, np.ndarray]:
    """``(t, y)`` reduced to each time bucket's minimum and maximum, in time order.

    ``y`` is cut into about ``buckets`` runs of ``k = ceil(n / buckets)`` consecutive points;
    each run keeps the points of its minimum and its maximum (and its first NaN, so a gap in
    the node total stays a break in the line), in the order they occur: the line passes through
    every extreme of the trace. Lines of at most ``2 * buckets`` points are returned as given.
    """
    n = len(y)
    if n <= 2 * buckets:
        return t, y
    k = -(-n // buckets)
    rows = -(-n // k)
    flat = np.full(rows * k, np.nan)
    flat[:n] = y
    grid = flat.reshape(rows, k)
    nan = np.isnan(grid)
    base = np.arange(rows) * k
    lo = np.argmin(np.where(nan, np.inf, grid), axis=1) + base
    hi = np.argmax(np.where(nan, -np.inf, grid), axis=1) + base
    gap = (np.argmax(nan, axis=1) + base)[nan.any(axis=1)]
    keep = np.unique(np.concatenate([lo, hi, gap]))
    keep = keep[keep < n]
    return t[keep], y[keep]


def _save(fig: Any, out: str | Path) -> Path:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _no_data(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _zoom_window(al: metrics_mod.Aligned, zoom_s: float) -> tuple[float, float] | None:
    """A window of ``zoom_s`` (s) around the largest 1 s ramp.

    ``None`` when the run is too short for a zoom to show more than the overview
    (span < 2 × zoom_s).
    """
    span_s = (al.grid_ms[-1] - al.grid_ms[0]) / 1000.0
    if span_s < 2 * zoom_s or al.valid.sum() < 2:
        return None
    k = int(round(1.0 / al.step_s))
    ok = al.lag_pairs(k)
    if ok.any():
        jumps = np.where(ok, np.abs(np.nan_to_num(al.total[k:] - al.total[:-k])), -1.0)
        centre = al.grid_ms[int(np.argmax(jumps))] / 1000.0 + 0.5
    else:
        centre = al.grid_ms[0] / 1000.0 + zoom_s / 2
    lo = min(max(centre - zoom_s / 2, al.grid_ms[0] / 1000.0), al.grid_ms[-1] / 1000.0 - zoom_s)
    return lo, lo + zoom_s


def plot_run(run: Run, out: str | Path, *, zoom_s: float = 10.0,
             grid_ms: int = metrics_mod.GRID_MS) -> Path:
    """Plot one run (see :func:`run_figure`) into ``out`` (PNG).

    Returns:
        the written file.
    """
    return _save(run_figure(run, zoom_s=zoom_s, grid_ms=grid_ms), out)


def _power_label(proxy: bool) -> str:
    return "modelled power, cpu_proxy (W)" if proxy else "power (W)"


def _draw_overview(ax_t: Any, run: Run, al: metrics_mod.Aligned | None, *, proxy: bool,
                   left_out: list[str]) -> None:
    """Per-device power and the node total over time, events as shaded phases."""
    dev_word = "rank" if proxy else "gpu"
    power_label = _power_label(proxy)
    for d in run.devices:
        ok = np.isfinite(d.power_w)
        t, p = envelope(d.t_ms[ok] / 1000.0, d.power_w[ok])
        ax_t.plot(t, p, lw=0.6, alpha=0.7, label=f"{dev_word} {d.node_index}:{d.gpu_index}")
    if al is not None:
        t, total = envelope(al.grid_ms / 1000.0, al.total)
        ax_t.plot(t, total, color="black", lw=0.9, label="node total")
    seen: set[str] = set()
    for begin, (end, colour, label) in PHASES.items():
        for b, e in metrics_mod.event_windows(run, begin, end):
            ax_t.axvspan(b / 1000.0, e / 1000.0, color=colour, alpha=0.25,
                         label=None if label in seen else label)
            seen.add(label)
    ax_t.set_xlabel("time since t0 (s)")
    ax_t.set_ylabel(power_label)
    ax_t.set_title("power per rank (cpu_proxy model) and total" if proxy
                   else "power per device and node total")
    if run.devices:
        ax_t.legend(fontsize=7, loc="upper right", ncol=2)
    else:
        _no_data(ax_t, "no devices")
    if left_out:
        ax_t.text(0.01, 0.01, "not shown: " + "; ".join(left_out), transform=ax_t.transAxes,
                  fontsize=7, color="#555555", va="bottom")


def _draw_zoom(ax_z: Any, run: Run, al: metrics_mod.Aligned, window: tuple[float, float], *,
               proxy: bool) -> None:
    """A zoom on the window around the largest 1 s ramp."""
    power_label = _power_label(proxy)
    lo, hi = window
    for dev in run.devices:
        sel = (dev.t_ms / 1000.0 >= lo) & (dev.t_ms / 1000.0 <= hi)
        ax_z.plot(dev.t_ms[sel] / 1000.0, dev.power_w[sel], ".-", lw=0.6, ms=2)
    sel = (al.grid_ms / 1000.0 >= lo) & (al.grid_ms / 1000.0 <= hi)
    ax_z.plot(al.grid_ms[sel] / 1000.0, al.total[sel], "k.-", lw=1, ms=3, label="node total")
    ax_z.set_xlim(lo, hi)
    ax_z.set_title(f"{hi - lo:g} s zoom around the largest 1 s ramp")
    ax_z.set_xlabel("time since t0 (s)")
    ax_z.set_ylabel(power_label)
    ax_z.legend(fontsize=7)


def _draw_ramps(ax_h: Any, ramps: list[tuple[str, np.ndarray]], *, proxy: bool) -> None:
    """The ramp-rate histograms of the node total."""
    for tag, r in ramps:
        ax_h.hist(r, bins=120, histtype="step", log=True, label=f"δ = {tag}")
    ax_h.set_xlabel("ramp rate r_δ = (P(t+δ) − P(t)) / δ (W/s)"
                    + (", cpu_proxy model" if proxy else ""))
    ax_h.set_ylabel("count")
    ax_h.set_title("ramp-rate histogram (node total)")
    ax_h.legend(fontsize=7)


def _draw_spectrum(ax_s: Any, spec: tuple[np.ndarray, np.ndarray]) -> None:
    """The Welch spectrum of the detrended node total, with the bands and its peak."""
    f, psd = spec
    band = (f >= metrics_mod.SPECTRUM_BAND_HZ[0]) & (f <= metrics_mod.SPECTRUM_BAND_HZ[1])
    ax_s.semilogy(f[band], np.maximum(psd[band], 1e-12), lw=0.8)
    for name, (b0, b1) in metrics_mod.BANDS_HZ.items():
        ax_s.axvspan(b0, b1, alpha=0.08, color={"low": "C0", "mid": "C1", "high": "C2"}[name])
    if band.any() and psd[band].max() > 0:
        peak = f[band][np.argmax(psd[band])]
        ax_s.axvline(peak, color="red", lw=0.8, ls="--", label=f"dominant {peak:.3g} Hz")
        ax_s.legend(fontsize=7)
    ax_s.set_xlabel("frequency (Hz; Nyquist 5 Hz at 0.1 s)")
    ax_s.set_ylabel("PSD (W²/Hz)")
    ax_s.set_title("Welch spectrum of the detrended node total")


RUN_MARGINS_IN = {"left": 0.8, "right": 0.25, "top": 0.75, "bottom": 0.6, "wgap": 0.95,
                  "hgap": 0.95}
"""Fixed margins of a run's figure (inches): room for tick labels, axis labels, panel titles
and the figure title. The panels are always the same kinds, so fixed margins replace
matplotlib's constrained layout, which measured every tick label's extent and took about a
third of the figure's drawing time."""


def _margins(width: float, height: float, rows: int, cols: int) -> dict[str, float]:
    """``add_gridspec`` keyword arguments placing :data:`RUN_MARGINS_IN` on the figure."""
    m = RUN_MARGINS_IN
    left, right = m["left"] / width, 1.0 - m["right"] / width
    bottom, top = m["bottom"] / height, 1.0 - m["top"] / height
    axes_w = (width * (right - left) - (cols - 1) * m["wgap"]) / cols
    axes_h = (height * (top - bottom) - (rows - 1) * m["hgap"]) / rows
    return {"left": left, "right": right, "bottom": bottom, "top": top,
            "wspace": m["wgap"] / axes_w, "hspace": m["hgap"] / axes_h}


def run_figure(run: Run, *, zoom_s: float = 10.0, grid_ms: int = metrics_mod.GRID_MS) -> Any:
    """One run's figure: power over time, a zoom on its largest ramp, ramp rates and spectrum.

    Panels: per-device power and the node total over time with events as shaded phases, a
    ``zoom_s`` zoom around the largest 1 s ramp, the ramp-rate histogram and the Welch spectrum.
    A panel that would show nothing is left out (no blank panels): the zoom when the run is
    shorter than twice ``zoom_s`` (the overview already shows it all), the histogram without
    ramps, the spectrum without a gap-free stretch of ``metrics.MIN_SPECTRUM_S``; the figure
    says which were left out and why. ``cpu_proxy`` runs are labelled as the proxy model
    ("rank", "modelled power"), never as GPUs.

    Returns:
        a ``matplotlib.figure.Figure``.
    """
    proxy = schema.is_cpu_proxy(run.meta)
    al = metrics_mod.node_total(run, grid_ms)
    window = _zoom_window(al, zoom_s) if al is not None else None
    ramps: list[tuple[str, np.ndarray]] = []
    if al is not None:
        for tag, delta in metrics_mod.RAMP_WINDOWS[:2]:
            k = int(round(delta / al.step_s))
            r = al.lag_diff(k) / (k * al.step_s)
            if r.size:
                ramps.append((tag, r))
    spec = metrics_mod.welch_psd(al) if al is not None else None
    left_out = []
    if window is None:
        left_out.append(f"zoom (run shorter than {2 * zoom_s:g} s)")
    if not ramps:
        left_out.append("ramp histogram (no gap-free node total)")
    if spec is None:
        left_out.append(f"spectrum (no gap-free stretch of {metrics_mod.MIN_SPECTRUM_S:g} s)")
    panels = ["overview"] + (["zoom"] if window else []) + (["ramps"] if ramps else []) \
        + (["spectrum"] if spec is not None else [])

    n = len(panels)
    rows, cols = {1: (1, 1), 2: (1, 2), 3: (2, 2), 4: (2, 2)}[n]
    width, height = (12.0 if cols == 2 else 9.0), 4.5 * rows
    fig = _figure(figsize=(width, height))
    gs = fig.add_gridspec(rows, cols, **_margins(width, height, rows, cols))
    if n == 3:  # the overview spans the top row
        slots = [gs[0, :], gs[1, 0], gs[1, 1]]
    else:
        slots = [gs[i // cols, i % cols] for i in range(n)]
    axes: dict[str, Any] = {name: fig.add_subplot(slot)
                            for name, slot in zip(panels, slots, strict=True)}
    kind = "cpu_proxy model — not GPU data" if proxy else run.platform
    unit = "rank(s)" if proxy else "device(s)"
    fig.suptitle(f"{run.run_id} ({kind}, {len(run.devices)} {unit})")

    _draw_overview(axes["overview"], run, al, proxy=proxy, left_out=left_out)
    if window is not None and al is not None:
        _draw_zoom(axes["zoom"], run, al, window, proxy=proxy)
    if ramps:
        _draw_ramps(axes["ramps"], ramps, proxy=proxy)
    if spec is not None:
        _draw_spectrum(axes["spectrum"], spec)
    _pin_labels(fig, list(axes.values()))
    return fig


def _pin_labels(fig: Any, axes: list[Any]) -> None:
    """Titles and axis labels at fixed distances from the axes, log ticks as plain text.

    With matplotlib's automatic placement every draw measures each tick label's extent to move
    the titles and axis labels clear of them, and log axes typeset their ticks as mathtext:
    together most of a run figure's drawing time. The run figure's tick labels are short
    numbers, so fixed offsets (inches, inside :data:`RUN_MARGINS_IN`) hold them.
    """
    from matplotlib.ticker import LogFormatter
    from matplotlib.transforms import ScaledTranslation

    for ax in axes:
        ax.set_title(ax.get_title(), y=1.0)  # an explicit y: no automatic title placement
        ax.xaxis.set_label_coords(0.5, 0.0, transform=ax.transAxes + ScaledTranslation(
            0.0, -0.3, fig.dpi_scale_trans))
        ax.yaxis.set_label_coords(0.0, 0.5, transform=ax.transAxes + ScaledTranslation(
            -0.58, 0.0, fig.dpi_scale_trans))
        if ax.get_yscale() == "log":
            ax.yaxis.set_major_formatter(LogFormatter())
            ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))


LOG_AXIS_SPAN = 4.0
"""A sweep axis spanning more than this factor (all values positive) is drawn on a log scale:
sizes (parameters, batch, GPUs) are swept in multiples."""


def log_axis(xs: Iterable[float]) -> bool:
    """True when ``xs`` are all positive and span more than :data:`LOG_AXIS_SPAN`."""
    arr = np.asarray(list(xs), dtype=float)
    return bool(arr.size and (arr > 0).all() and arr.max() / arr.min() > LOG_AXIS_SPAN)


def sweep_lines(rows: Iterable[Mapping[str, Any]], metric: str, axis: str, *,
                group: str = "platform") -> tuple[dict[str, dict[float, list[float]]], set[str]]:
    """The lines of :func:`plot_sweep`: ``{label: {x: [y, ...]}}`` and the cpu_proxy labels.

    One line per ``group`` value; when the rows hold both workloads, per (value, workload) —
    a fine-tuning run and an inference run are never joined by one line.

    Raises:
        InputError: no row has both the metric and the axis.
    """
    kept: list[tuple[Mapping[str, Any], float, float]] = []
    for r in rows:
        x, y = r.get(axis), r.get(metric)
        if isinstance(x, bool) or isinstance(y, bool):
            continue
        try:
            xf, yf = float(x), float(y)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if np.isfinite(xf) and np.isfinite(yf):
            kept.append((r, xf, yf))
    if not kept:
        raise InputError(f"no run has both {metric} and {axis}", field=metric)
    split = len({r.get("workload") for r, _, _ in kept}) > 1 and group != "workload"
    data: dict[str, dict[float, list[float]]] = {}
    proxy_groups: set[str] = set()
    for r, xf, yf in kept:
        label = str(r.get(group)) + (f" · {r.get('workload')}" if split else "")
        data.setdefault(label, {}).setdefault(xf, []).append(yf)
        if schema.is_cpu_proxy(r):
            proxy_groups.add(label)
    return data, proxy_groups


def plot_sweep(rows: Iterable[Mapping[str, Any]], metric: str, axis: str, out: str | Path, *,
               group: str = "platform") -> Path:
    """A metric against a sweep axis, one line per platform (and workload: :func:`sweep_lines`).

    The median of repeats is drawn, every point shown; sizes spanning more than 4x on a log axis.

    A line holding ``cpu_proxy`` runs (:func:`schema.is_cpu_proxy`) is labelled as the model,
    and the figure then says that it includes model data, not GPU data.

    Raises:
        InputError: no row has both the metric and the axis.
    """
    data, proxy_groups = sweep_lines(rows, metric, axis, group=group)
    fig = _figure(figsize=(7, 5), layout="constrained")
    ax = fig.subplots()
    xs_all: list[float] = []
    for i, (name, points) in enumerate(sorted(data.items())):
        xs = np.array(sorted(points))
        med = np.array([np.median(points[x]) for x in xs])
        colour = f"C{i % 10}"
        ax.plot(xs, med, "-o", color=colour,
                label=f"{name} (cpu_proxy model)" if name in proxy_groups else name)
        for x in xs:
            ax.plot([x] * len(points[x]), points[x], ".", color=colour, alpha=0.4)
        xs_all.extend(xs)
    if log_axis(xs_all):
        ax.set_xscale("log")
    ax.set_xlabel(axis)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} vs {axis}")
    if proxy_groups:
        fig.suptitle("includes cpu_proxy model data (modelled CPU activity) — not GPU data",
                     color="C3", fontsize=9)
    ax.legend(title=group, fontsize=8)
    return _save(fig, out)


def plot_fit(fit_data: Mapping[str, Any] | str | Path, out: str | Path, *,
             axis: str | None = None) -> Path:
    """Plot a fit: the log-linear law along one axis and the held-out points.

    The law is drawn along one axis (others at their training medians, categorical factors at
    their reference level) with its 90 % interval per platform; the held-out points appear on
    the law panel and as predicted vs measured with their intervals.
    """
    from . import scaling

    data = scaling.load_fit(fit_data)
    holdout = data.get("holdout") or {}
    # with a holdout, draw the law fitted without the held-out runs (the one they test)
    ll = scaling.LogLinearLaw.from_json(holdout.get("loglinear_train") or data["loglinear"])
    fig = _figure(figsize=(12, 5), layout="constrained")
    ax_l, ax_p = fig.subplots(1, 2)
    axis = axis or ("model_params" if "model_params" in ll.axes else (ll.axes[0] if ll.axes
                                                                      else None))
    if axis is None or axis not in ll.axis_stats:
        _no_data(ax_l, "the law has no numeric axis")
    else:
        lo, med, hi = ll.axis_stats[axis]
        top = max(hi, max((p.get(axis) or hi for p in holdout.get("points", [])), default=hi))
        xs = np.geomspace(lo, top * 1.5, 60)
        base = {a: ll.axis_stats[a][1] for a in ll.axes}
        base.update({c: spec["reference"] for c, spec in ll.categorical.items()})
        for i, plat in enumerate(ll.platforms):
            rows = [{**base, axis: x, "platform": plat} for x in xs]
            pred = np.asarray(ll.predict_rows(rows), dtype=float)
            colour = f"C{i % 10}"
            ax_l.plot(xs, pred[:, 0], color=colour, label=plat)
            ax_l.fill_between(xs, pred[:, 1], pred[:, 2], color=colour, alpha=0.15)
            pts = [p for p in holdout.get("points", []) if p.get("platform") == plat
                   and p.get(axis)]
            if pts:
                ax_l.plot([p[axis] for p in pts], [p["actual"] for p in pts], "x", color=colour,
                          label=f"held out ({plat})")
        ax_l.axvspan(lo, hi, color="grey", alpha=0.07, label="training range")
        ax_l.set_xscale("log")
        ax_l.set_yscale("log")
        ax_l.set_xlabel(f"{axis} ({scaling.AXES.get(axis, axis)}); other axes at training medians")
        ax_l.set_ylabel(data["target"])
        exps = ", ".join(f"{e['symbol']}^{e['exponent']:.2f}" for e in ll.exponents())
        which = "fitted without the held-out runs" if holdout else "fitted on all runs"
        ax_l.set_title(f"log-linear law ({which}): a · {exps}", fontsize=9)
        ax_l.legend(fontsize=7)
    points = holdout.get("points", [])
    if points:
        spec = holdout.get("spec")
        for name, marker in (("loglinear", "o"), ("physics", "s")):
            pts = [p for p in points if p.get(name)]
            if not pts:
                continue
            act = np.array([p["actual"] for p in pts])
            val = np.array([p[name]["value"] for p in pts])
            err = np.array([[v - p[name]["lo"], p[name]["hi"] - v] for p, v in zip(pts, val,
                                                                                     strict=True)]).T
            m = holdout.get("mdape_pct", {}).get(name)
            ax_p.errorbar(act, val, yerr=err, fmt=marker, ms=4, alpha=0.7, capsize=2,
                          label=f"{name} (MdAPE {m:.1f} %)" if m is not None else name)
        allv = np.array([p["actual"] for p in points])
        span = [allv.min() * 0.8, allv.max() * 1.25]
        ax_p.plot(span, span, "k--", lw=0.8)
        ax_p.set_xscale("log")
        ax_p.set_yscale("log")
        ax_p.set_xlabel(f"measured {data['target']}")
        ax_p.set_ylabel("predicted (90 % interval)")
        ax_p.set_title(f"held out: {spec}")
        ax_p.legend(fontsize=7)
    else:
        _no_data(ax_p, "no holdout (fit with --holdout)")
    return _save(fig, out)


def plot_facility(profiles: Mapping[float, Mapping[str, np.ndarray]],
                  load_duration: Iterable[tuple[float, float]], out: str | Path, *,
                  title: str = "composed site load", zoom_s: float = 120.0) -> Path:
    """Plot a composed site (``facility``): its profile at every resolution and its load-duration curve.

    Args:
        profiles: ``{resolution_s: {"start_s", "length_s", "facility_w", ...}}`` (interval means,
            from ``facility.profiles``).
        load_duration: (percent of time, load W) pairs, from ``facility.load_duration_curve``.
        out: the image to write.
        title: figure title (say "composed, not measured", and cpu_proxy when it applies).
        zoom_s: length of the zoom panel at the start of the horizon.

    Returns:
        the written file.
    """
    fig = _figure(figsize=(12, 7.5), layout="constrained")
    axes = fig.subplots(2, 2)
    ax_all, ax_zoom, ax_ldc, ax_hist = axes[0, 0], axes[0, 1], axes[1, 0], axes[1, 1]
    fig.suptitle(title)
    styles = {0.1: dict(lw=0.4, alpha=0.45, color="C0"), 1.0: dict(lw=0.8, color="C1"),
              60.0: dict(lw=1.4, color="C2"), 900.0: dict(lw=2.0, color="C3")}
    names = {0.1: "0.1 s", 1.0: "1 s", 60.0: "1 min", 900.0: "15 min (demand)"}
    peak = max((float(np.max(p["facility_w"])) for p in profiles.values()
                if len(p["facility_w"])), default=0.0)
    scale, unit = (1e6, "MW") if peak >= 1e6 else (1e3, "kW")
    for res, prof in sorted(profiles.items()):
        start = np.asarray(prof["start_s"])
        mw = np.asarray(prof["facility_w"]) / scale
        if not len(start):
            continue
        ends = start + np.asarray(prof["length_s"])
        s = _stride(len(start))
        kw = styles.get(res, {})
        # interval means as steps: each value held over its interval
        xs = np.stack([start, ends], axis=1)[::s].ravel()
        ys = np.repeat(mw[::s], 2)
        ax_all.plot(xs, ys, label=names.get(res, f"{res:g} s"), **kw)
        sel = start < start[0] + zoom_s
        ax_zoom.plot(np.stack([start, ends], axis=1)[sel].ravel(), np.repeat(mw[sel], 2),
                     label=names.get(res, f"{res:g} s"), **kw)
    for ax, what in ((ax_all, "whole horizon"), (ax_zoom, f"first {zoom_s:g} s")):
        ax.set_xlabel("time (s)")
        ax.set_ylabel(f"facility power ({unit})")
        ax.set_title(f"site profile at four resolutions, {what}")
        ax.legend(fontsize=7, loc="lower right")
    ax_zoom.set_xlim(0, zoom_s)
    ldc = list(load_duration)
    fine = profiles.get(0.1)
    if fine is not None and len(fine["facility_w"]):
        v = np.sort(np.asarray(fine["facility_w"]))[::-1] / scale
        s = _stride(len(v))
        ax_ldc.plot(np.linspace(0, 100, len(v))[::s], v[::s], color="C0", label="0.1 s")
        ax_hist.hist(v, bins=80, color="C0")
        ax_hist.set_xlabel(f"facility power ({unit})")
        ax_hist.set_ylabel("0.1 s samples")
        ax_hist.set_title("distribution of the 0.1 s load")
    else:
        _no_data(ax_hist, "no profile")
    if ldc:
        ax_ldc.plot([p for p, _ in ldc], [w / scale for _, w in ldc], "ko", ms=3,
                    label="reported points")
    ax_ldc.set_xlabel("% of time the load is exceeded")
    ax_ldc.set_ylabel(f"facility power ({unit})")
    ax_ldc.set_title("load-duration curve")
    ax_ldc.legend(fontsize=7)
    return _save(fig, out)
