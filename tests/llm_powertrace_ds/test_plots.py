"""Plots: a run, a sweep, a fit; the one-line error without matplotlib."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from scaling.test_scaling import loglinear_rows  # tests/llm_powertrace_ds is on pytest's pythonpath

from llm_powertrace_ds import plots, scaling
from llm_powertrace_ds.errors import InputError, PowerTraceError
from llm_powertrace_ds.run import DeviceSeries, Event, Run

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def drawn(monkeypatch) -> list:
    """Every figure the plot functions save, kept for inspection (the real savefig runs)."""
    from matplotlib.figure import Figure

    figures: list = []
    real_savefig = Figure.savefig

    def keeping_savefig(self, *args, **kwargs):
        figures.append(self)
        return real_savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keeping_savefig)
    return figures


def labelled(ax) -> dict:
    """Lines of an axes by their legend label (unlabelled lines left out)."""
    return {line.get_label(): line for line in ax.get_lines()
            if not line.get_label().startswith("_")}


def _run(n: int = 1200, devices: int = 2) -> Run:
    t = np.arange(n) * 100
    devs = [DeviceSeries(g, t + 3 * g, {"power_w": 200 + 100 * ((t // 900) % 2) + g},
                         power_limit_w=400.0) for g in range(devices)]
    events = [Event(0, "idle_begin"), Event(5000, "idle_end"),
              Event(40_000, "checkpoint_begin", rank=0), Event(45_000, "checkpoint_end", rank=0),
              Event(10_000, "steady_begin"), Event(100_000, "steady_end")]
    return Run({"run_id": "plot-run", "workload": "finetune", "platform": "l40s"}, devs, events)


def test_plot_run_writes_png(tmp_path, drawn):
    out = plots.plot_run(_run(), tmp_path / "sub" / "run.png")
    assert out.read_bytes()[:8] == PNG
    (fig,) = drawn
    ax_t, ax_z, ax_h, ax_s = fig.axes
    assert [ax.get_title() for ax in fig.axes] == [
        "power per device and node total", "10 s zoom around the largest 1 s ramp",
        "ramp-rate histogram (node total)", "Welch spectrum of the detrended node total"]
    lines = labelled(ax_t)
    assert list(lines) == ["gpu 0:0", "gpu 0:1", "node total"]
    assert (ax_t.get_xlabel(), ax_t.get_ylabel()) == ("time since t0 (s)", "power (W)")
    total = np.asarray(lines["node total"].get_ydata(), float)
    assert total.max() == pytest.approx(601.0) and total.min() == pytest.approx(401.0)
    assert len(lines["gpu 0:0"].get_xdata()) == 1200
    for g in (0, 1):  # each device's own square wave, 200/300 W plus its index
        assert set(np.asarray(lines[f"gpu 0:{g}"].get_ydata(), float)) == {200.0 + g, 300.0 + g}
    # the square wave has a 1.8 s period: the spectrum's marked peak is at 1 / 1.8 Hz
    (peak,) = [k for k in labelled(ax_s) if k.startswith("dominant ")]
    assert float(peak.split()[1]) == pytest.approx(1 / 1.8, abs=0.01)
    assert ax_z.get_xlim()[1] - ax_z.get_xlim()[0] <= 12.0
    assert ax_h.patches  # one step histogram per ramp horizon


def test_plot_run_degenerate_runs(tmp_path, drawn):
    empty = Run({"run_id": "e", "workload": "finetune", "platform": "l40s"}, [])
    assert plots.plot_run(empty, tmp_path / "empty.png").read_bytes()[:8] == PNG
    texts = [[t.get_text() for t in ax.texts] for ax in drawn[0].axes]
    # panels that would be empty are left out and named with their reason (issue 19)
    assert texts == [["no devices", "not shown: zoom (run shorter than 20 s); ramp histogram "
                      "(no gap-free node total); spectrum (no gap-free stretch of 20 s)"]]
    assert not any(ax.get_lines() for ax in drawn[0].axes)
    short = _run(n=5, devices=1)
    assert plots.plot_run(short, tmp_path / "short.png").read_bytes()[:8] == PNG


def test_plot_sweep(tmp_path, drawn):
    rows = [{"platform": p, "model_params": n, "energy_per_token_j": n ** 0.5 * k, "run_id": i}
            for i, (p, k) in enumerate([("l40s", 1.0), ("h100_sxm_80gb", 0.6)])
            for n in (1e8, 1e9, 7e9)]
    out = plots.plot_sweep(rows, "energy_per_token_j", "model_params", tmp_path / "sweep.png")
    assert out.read_bytes()[:8] == PNG
    (ax,) = drawn[0].axes
    assert ax.get_title() == "energy_per_token_j vs model_params"
    lines = labelled(ax)
    assert sorted(lines) == ["h100_sxm_80gb", "l40s"]
    for name, k in (("l40s", 1.0), ("h100_sxm_80gb", 0.6)):
        np.testing.assert_allclose(lines[name].get_xdata(), [1e8, 1e9, 7e9])
        np.testing.assert_allclose(lines[name].get_ydata(),
                                   [n ** 0.5 * k for n in (1e8, 1e9, 7e9)])
    with pytest.raises(InputError):
        plots.plot_sweep(rows, "nope", "model_params", tmp_path / "x.png")


def test_plot_sweep_labels_cpu_proxy_lines_and_says_not_gpu_data(tmp_path, drawn):
    rows = [{"platform": p, "model_params": n, "energy_j": n * 1e-6, "sampler": s}
            for p, s in (("l40s", "nvml"), ("cpu_proxy", "cpu_proxy")) for n in (1e8, 1e9)]
    plots.plot_sweep(rows, "energy_j", "model_params", tmp_path / "sweep.png")
    plots.plot_sweep(rows[:2], "energy_j", "model_params", tmp_path / "gpu.png")
    (ax,) = drawn[0].axes
    assert sorted(labelled(ax)) == ["cpu_proxy (cpu_proxy model)", "l40s"]
    assert "not GPU data" in drawn[0].get_suptitle()
    assert drawn[1].get_suptitle() == "" and sorted(labelled(drawn[1].axes[0])) == ["l40s"]


def test_plot_fit_with_holdout(tmp_path, drawn):
    res = scaling.fit(loglinear_rows(120), holdout="N=top", n_boot=50)
    path = tmp_path / "fit.json"
    res.save(path)
    out = plots.plot_fit(path, tmp_path / "fit.png")
    assert out.read_bytes()[:8] == PNG
    ax_l, ax_p = drawn[0].axes
    assert ax_l.get_title().startswith("log-linear law (fitted without the held-out runs): a · N^0.")
    held = {k for k in labelled(ax_l) if k.startswith("held out")}
    assert held == {"held out (h100_sxm_80gb)", "held out (l40s)"}
    assert ax_p.get_title() == "held out: N=top"
    assert ax_p.get_xlabel() == "measured energy_per_token_j"
    no_holdout = scaling.fit(loglinear_rows(120), n_boot=20).to_json()
    assert plots.plot_fit(no_holdout, tmp_path / "fit2.png").read_bytes()[:8] == PNG


def test_missing_matplotlib_is_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(plots.MissingExtra) as info:
        plots.plot_run(_run(), tmp_path / "x.png")
    assert "pip install 'llm-powertrace[plot]'" in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, PowerTraceError)


# ---------------------------------------------------------------------------------------------
# No blank panels, a zoom only where it zooms, cpu_proxy labelled as the model
# ---------------------------------------------------------------------------------------------

def _drawn(ax) -> bool:
    return bool(ax.lines or ax.patches or ax.collections)


def _titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes]


@pytest.mark.parametrize("n,expected", [
    (1, 1),      # one tick: the overview only
    (34, 2),     # a 3.4 s demo run: overview + ramps (no 10 s zoom of the whole run, no spectrum)
    (400, 3),    # 40 s with a gap every 15 s: no spectrum
    (1200, 4),   # 2 min: every panel
])
def test_run_figure_never_has_blank_panels(n, expected):
    run = _run(n=n)
    if n == 400:  # a gap every 15 s: no gap-free stretch of 20 s, so no spectrum
        for d in run.devices:
            d.signals["power_w"][150::150] = np.nan
            d.signals["power_w"][151::150] = np.nan
            d.signals["power_w"][149::150] = np.nan
            d.signals["power_w"][148::150] = np.nan
    fig = plots.run_figure(run)
    assert len(fig.axes) == expected, _titles(fig)
    for ax in fig.axes:
        assert _drawn(ax) and ax.get_title(), ax.get_title()
    overview = fig.axes[0]
    if expected < 4:
        assert any("not shown:" in t.get_text() for t in overview.texts)


def test_zoom_is_a_zoom():
    fig = plots.run_figure(_run(n=1200), zoom_s=10.0)
    zoom = next(ax for ax in fig.axes if "zoom" in ax.get_title())
    lo, hi = zoom.get_xlim()
    assert hi - lo == pytest.approx(10.0)
    assert zoom.get_title().startswith("10 s zoom")
    short = plots.run_figure(_run(n=150), zoom_s=10.0)  # 15 s < 2 x 10 s
    assert not any("zoom" in t for t in _titles(short))


def test_cpu_proxy_figure_says_proxy(tmp_path):
    run = _run(n=300)
    run.meta.update(platform="cpu_proxy", sampler="cpu_proxy", power_field="cpu_proxy_model")
    fig = plots.run_figure(run)
    text = " ".join([fig.get_suptitle()] + [ax.get_ylabel() for ax in fig.axes]
                    + [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()
                       if ax.get_legend()])
    assert "cpu_proxy model" in fig.get_suptitle() and "not GPU data" in fig.get_suptitle()
    assert "modelled power, cpu_proxy (W)" in text
    assert "gpu 0:0" not in text and "rank 0:0" in text
    gpu = plots.run_figure(_run(n=300))
    assert "gpu 0:0" in [t.get_text() for t in gpu.axes[0].get_legend().get_texts()]


def test_envelope_keeps_every_extreme_in_time_order():
    rng = np.random.default_rng(3)
    n = 100_003
    t = np.arange(n) * 0.1
    y = 300 + rng.normal(0, 5, n)
    y[54_321] = 900.0  # one 100 ms spike: striding by 5 would drop it
    y[77_777] = 10.0  # one dip
    y[20_000:20_500] = np.nan  # a gap in the node total
    te, ye = plots.envelope(t, y, buckets=1000)
    assert len(te) <= 2 * 1000 + 1000 and np.all(np.diff(te) > 0)
    assert 900.0 in ye and 10.0 in ye
    assert np.isnan(ye).any()  # the gap stays a break in the line
    k = -(-n // 1000)
    for b in (0, 137, -(-n // k) - 1):  # each bucket's own min and max are on the line
        chunk = y[b * k:(b + 1) * k]
        if np.isfinite(chunk).all():
            assert chunk.max() in ye and chunk.min() in ye
    short_t, short_y = plots.envelope(t[:2000], y[:2000], buckets=1000)
    assert len(short_t) == 2000 and np.array_equal(short_y, y[:2000], equal_nan=True)


def test_long_run_overview_is_an_envelope(tmp_path, drawn):
    run = _run(n=40_000, devices=1)
    run.devices[0].signals["power_w"][12_345] = 5000.0
    plots.plot_run(run, tmp_path / "long.png")
    (fig,) = drawn
    line = labelled(fig.axes[0])["gpu 0:0"]
    assert len(line.get_ydata()) <= 2 * plots.ENVELOPE_BUCKETS
    assert 5000.0 in np.asarray(line.get_ydata(), float)  # the spike is drawn
    assert fig.axes[0].get_title() == "power per device and node total"
