"""Card sections about the data: intro, configs, how to use, figures, platforms, families, axes."""

from __future__ import annotations

from collections import Counter
from typing import Any

from llm_powertrace_ds import schema
from llm_powertrace_ds.formatting import human_bytes
from llm_powertrace_ds.schema import is_cpu_proxy

from . import figures as figures_mod
from .card_text import (
    _CONFIG_ROWS,
    _CONFIG_WHAT,
    _WORKLOAD_NAMES,
    EXTRA_AXES,
    REPO_PLACEHOLDER,
    CardOptions,
    _code,
    _join,
    _table,
    _value_key,
    fmt_value,
    human_count,
    plural,
)
from .summary import FolderSummary
from .vocab import meaning

# ---------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------

def _proxy_warning(summary: FolderSummary) -> list[str]:
    proxy_runs = [r for r in summary.all_runs if is_cpu_proxy(r)]
    if not summary.has_cpu_proxy:
        return []
    model = schema.POWER_FIELDS["cpu_proxy_model"].split(": ", 1)[-1]
    splits = sorted({r["platform"] for r in proxy_runs} | (
        {"cpu_proxy"} if "cpu_proxy" in summary.platforms else set()))
    return [
        f"> **Warning: {plural(len(proxy_runs), 'run')} in this dataset "
        f"{'is' if len(proxy_runs) == 1 else 'are'} `cpu_proxy` data — NOT GPU "
        f"power measurements.** Their \"power\" is {model}, used where no GPU is available. "
        f"They are in {'split' if len(splits) == 1 else 'splits'} "
        f"{', '.join(_code(s) for s in splits)} and "
        "labelled in every row (`sampler = cpu_proxy`, `power_field = cpu_proxy_model`, "
        "`quality_flags` contains `cpu_proxy`). Exclude them from any analysis of GPU power.",
        "",
    ]


def _intro(summary: FolderSummary, options: CardOptions) -> list[str]:
    counts = {wl: len(summary.runs.get(wl, [])) for wl in schema.WORKLOADS}
    n_runs = sum(counts.values())
    lines = [f"# {options.pretty_name}", ""]
    if not n_runs:
        return lines + ["Time-resolved, per-device power traces of LLM fine-tuning and inference. "
                        "No run has been published to this folder yet.", ""]
    devices = sum(len(summary.devices.get(r["run_id"], [])) for r in summary.all_runs)
    parts = ["every sweep axis"]
    if any(c in summary.globs for c in schema.RUNS_CONFIGS):
        parts.append("per-run power and energy metrics")
    if schema.REQUESTS_CONFIG in summary.globs:
        parts.append("per-request timing for inference")
    what = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    lines += [
        f"Time-resolved, per-device power traces of LLM fine-tuning and inference, with {what}.",
        "",
        f"This release holds **{plural(n_runs, 'run')}** ({counts['finetune']} fine-tuning, "
        f"{counts['inference']} inference) with **{plural(devices, 'device trace')}** on "
        f"**{plural(len(summary.platforms), 'platform')}** "
        f"({', '.join(_code(p) for p in summary.platforms)}). "
        f"Schema version `{schema.SCHEMA_VERSION}`.",
        "",
    ]
    return lines + _proxy_warning(summary) + _random_weights_note(summary)


def _random_weights_note(summary: FolderSummary) -> list[str]:
    """How many runs ran random (untrained) weights, counted apart from the trained ones."""
    random = [r for r in summary.all_runs if r.get("random_weights") is True]
    if not random:
        return []
    trained = sum(1 for r in summary.all_runs if r.get("random_weights") is False)
    return [
        f"> **{plural(len(random), 'run')} used random (untrained) weights** "
        f"(`random_weights = true`, `model_source = zoo`: the demo, tests and `cpu_proxy`), "
        f"against {plural(trained, 'run')} with trained checkpoints (`random_weights = false`). "
        "Power and speed depend on the operands, not only on the shapes: analyse the two "
        "groups apart.",
        "",
    ]


def _configs_section(summary: FolderSummary) -> list[str]:
    lines = ["## Configs and splits", "",
             "Configs are workload granularities; splits are platforms. "
             "`finetune-<family>` and `inference-<family>` hold the rows of one model family "
             "with the columns of `finetune` / `inference`.", ""]
    rows = []
    for config, splits in summary.rows.items():
        base = schema.base_config(config)
        what = _CONFIG_WHAT[base] if base == config else (
            f"the `{base}` rows of model family `{config.partition('-')[2]}`")
        default = " (default)" if config == "finetune" else ""
        rows.append([_code(config) + default, _CONFIG_ROWS[base], what,
                     ", ".join(f"{_code(s)} ({n})" for s, n in splits.items())])
    return lines + _table(["config", "one row per", "what", "splits (rows)"], rows) + [""]


_SAMPLE_BYTES = 50
"""Bytes per tick of one trace row in memory, every signal present (the widths of ``t_ms``,
``power_w``, ``power_avg_w``, ``energy_mj``, the utilisations, memory, clocks, temperature and
clock-event reasons in ``schema.SIGNALS``)."""


def _long_rows_note(summary: FolderSummary) -> list[str]:
    """The largest trace cell: very long rows are what the Hub's dataset viewer struggles with."""
    best: tuple[float, dict[str, Any]] | None = None
    for run in summary.all_runs:
        duration, period = run.get("duration_s"), run.get("sample_period_ms")
        if duration and period:
            ticks = float(duration) * 1000.0 / float(period) + 1
            if best is None or ticks > best[0]:
                best = (ticks, run)
    if best is None:
        return []
    ticks, run = best
    return [f"Long rows: a trace row holds a whole run of one device. The longest here is "
            f"{_code(run['run_id'])} ({fmt_value(run.get('duration_s'))} s at "
            f"{fmt_value(run.get('sample_period_ms'))} ms: about {ticks:,.0f} ticks per device, "
            f"about {human_bytes(ticks * _SAMPLE_BYTES)} per row in memory with every signal). "
            "The Hub's dataset viewer "
            "reads pages of rows, so the trace configs stay the default (`load_dataset(repo)` "
            "keeps returning traces) and the runs configs "
            "(`finetune_runs`, `inference_runs`: one small row per run, with its metrics) are "
            "the quick overview to open first.", ""]


def _first_split(summary: FolderSummary, config: str) -> str:
    splits = list(summary.globs[config])
    gpu = [s for s in splits if s != "cpu_proxy"]
    return (gpu or splits)[0]


def _how_to_use(summary: FolderSummary, options: CardOptions) -> list[str]:
    repo = options.repo_id or REPO_PLACEHOLDER
    lines = ["## How to use", ""]
    if not summary.globs:
        return lines + ["Nothing to load yet.", ""]
    where = ("" if options.repo_id else
             f" Replace `{REPO_PLACEHOLDER}` with the Hub repo id, or with the path of a local "
             "copy of this folder.")
    lines += [f"Every config loads with plain `datasets.load_dataset` (no loading script).{where} "
              "`pip install datasets` is all it needs.", ""]
    for wl in schema.WORKLOADS:
        if wl not in summary.globs:
            continue
        split = _first_split(summary, wl)
        lines += [f"{_WORKLOAD_NAMES[wl].capitalize()} traces (one row per run and device, one "
                  "list entry per tick):", "", "```python",
                  "import numpy as np",
                  "from datasets import load_dataset", "",
                  f'ds = load_dataset("{repo}", "{wl}", split="{split}")',
                  "row = ds[0]",
                  't_s = np.asarray(row["t_ms"]) / 1000.0',
                  'power_w = np.asarray(row["power_w"], dtype=float)  # null -> nan',
                  'print(row["run_id"], row["gpu_index"], len(t_s), "ticks,", '
                  'np.nanmean(power_w), "W mean")',
                  "```", ""]
    for wl in schema.WORKLOADS:
        config = f"{wl}_runs"
        if config not in summary.globs:
            continue
        split = _first_split(summary, config)
        lines += [f"Per-run metrics of {_WORKLOAD_NAMES[wl]} (one row per run, analysis-ready):",
                  "", "```python", "from datasets import load_dataset", "",
                  f'runs = load_dataset("{repo}", "{config}", split="{split}").to_pandas()',
                  'print(runs[["run_id", "num_gpus", "energy_j", "mean_power_w", '
                  '"peak_power_w", "energy_per_token_j"]])',
                  "```", ""]
    if schema.REQUESTS_CONFIG in summary.globs:
        split = _first_split(summary, schema.REQUESTS_CONFIG)
        lines += ["Per-request timing of the inference runs (run clock, ms):", "", "```python",
                  "from datasets import load_dataset", "",
                  f'reqs = load_dataset("{repo}", "{schema.REQUESTS_CONFIG}", split="{split}")',
                  'ttft_ms = [r["first_token_ms"] - r["arrival_ms"] for r in reqs '
                  'if r["first_token_ms"] is not None and r["arrival_ms"] is not None]',
                  "print(len(reqs), \"requests\")",
                  "```", ""]
    families = [c for c in summary.globs if c not in schema.ALL_CONFIGS]
    if families:
        lines += ["One model family at a time:", "", "```python",
                  "from datasets import load_dataset", ""]
        for config in families:
            split = _first_split(summary, config)
            lines.append(f'print(load_dataset("{repo}", "{config}", split="{split}"))')
        lines += ["```", ""]
    stream_cfg = "finetune" if "finetune" in summary.globs else next(iter(summary.globs))
    split = _first_split(summary, stream_cfg)
    lines += ["Streaming (nothing is downloaded up front):", "", "```python",
              "from datasets import load_dataset", "",
              f'stream = load_dataset("{repo}", "{stream_cfg}", split="{split}", streaming=True)',
              "first = next(iter(stream))",
              'print(first["run_id"])',
              "```", ""]
    return lines


def _figures_section(figs: list[figures_mod.Figure], summary: FolderSummary) -> list[str]:
    lines = ["## Figures", ""]
    if not figs:
        if summary.all_runs:
            lines += ["No figure is rendered in this folder yet. `llm-powertrace card DIR` "
                      "draws them when matplotlib is installed (`pip install "
                      "'llm-powertrace[plot]'`) and `LLM_POWERTRACE_CARD_FIGURES` is not `0`.",
                      ""]
        return lines if summary.all_runs else []
    lines += ["A representative run per workload and platform: the run with the median mean "
              "power of that platform (preferring runs without quality warnings). Each figure "
              "shows the power of every device and the node total (black, on the common 0.1 s "
              "grid) over time with workload phases shaded, then — where the run has them — a "
              "10 s zoom around the largest 1 s ramp (runs of 20 s or more), the histogram of "
              "ramp rates and the Welch spectrum of the node total (a gap-free stretch of 20 s "
              "or more); a panel that would be empty is left out and the figure says why.", ""]
    for fig in figs:
        proxy = " — modelled from CPU activity, NOT a GPU measurement" if (
            fig.platform == "cpu_proxy") else ""
        lines += [f"**{_WORKLOAD_NAMES[fig.workload]} on `{fig.platform}`** "
                  f"(run `{fig.run_id}`){proxy}", "",
                  f"![{fig.workload} power trace on {fig.platform}]({fig.path})", ""]
    return lines


def _platforms_section(summary: FolderSummary) -> list[str]:
    rows = []
    for platform in summary.platforms:
        runs = [r for r in summary.all_runs if r["platform"] == platform]
        devs = [d for r in runs for d in summary.devices.get(r["run_id"], [])]
        names = {d.get("gpu_name") for d in devs} | {r.get("gpu_name") for r in runs}
        flags = {f for r in runs for f in (r.get("quality_flags") or [])}
        if platform == "cpu_proxy" or any(is_cpu_proxy(r) for r in runs):
            form = "n/a — not a GPU"
        elif flags & {"form_factor_unknown", "platform_unknown"}:
            form = "unknown"
        else:
            form = "known"
        by_wl = Counter(r["workload"] for r in runs)
        rows.append([
            _code(platform), _join(names), f"{by_wl['finetune']} / {by_wl['inference']}",
            _join(r.get("num_gpus") for r in runs),
            _join([d.get("power_limit_w") for d in devs] + [r.get("power_limit_w") for r in runs]),
            _join(r.get("driver_version") for r in runs),
            _join((r.get("sampler") for r in runs), code=True),
            _join((r.get("power_field") for r in runs), code=True),
            form,
        ])
    if not rows:
        return []
    return (["## Platforms", "", "Each split is one platform (GPU model and form factor). "
             "`form factor` is `unknown` when the source named only a GPU family "
             "(e.g. `A100`).", ""]
            + _table(["platform (split)", "GPU name", "runs (fine-tuning / inference)",
                      "devices per run", "power limit (W)", "driver", "sampler", "power field",
                      "form factor"], rows) + [""])


def _families_section(summary: FolderSummary) -> list[str]:
    by_family: dict[str, list[dict[str, Any]]] = {}
    for run in summary.all_runs:
        by_family.setdefault(run.get("model_family") or "unknown", []).append(run)
    if not by_family:
        return []
    rows = []
    for family in sorted(by_family, key=lambda f: (f not in schema.MODEL_FAMILIES,
                                                   schema.MODEL_FAMILIES.index(f)
                                                   if f in schema.MODEL_FAMILIES else 0, f)):
        runs = by_family[family]
        configs = sorted({f"{r['workload']}-{family}" for r in runs}
                         & set(summary.globs))
        models = sorted({(r.get("model_name") or "not named", r.get("model_params"))
                         for r in runs}, key=lambda m: (m[1] is None, m[1] or 0, m[0]))
        by_wl = Counter(r["workload"] for r in runs)
        rows.append([
            _code(family), ", ".join(_code(c) for c in configs) or "—",
            ", ".join(f"{_code(name)} ({human_count(params)})" for name, params in models),
            _join((r.get("model_source") for r in runs), code=True),
            f"{by_wl['finetune']} / {by_wl['inference']}",
        ])
    return (["## Model families", "",
             "Models by family, with the parameter count of the instantiated model and where it "
             "came from (`zoo`: the published architecture with random weights — compute, and so "
             "power, depends on shape, not on weight values; `hub`: pretrained weights; "
             "`import`: as named by an imported trace).", ""]
            + _table(["family", "configs", "models (parameters)", "source",
                      "runs (fine-tuning / inference)"], rows) + [""])


def _axis_columns(workload: str) -> list[schema.Column]:
    axes = schema.FINETUNE_AXES if workload == "finetune" else schema.INFERENCE_AXES
    by_name = {c.name: c for c in schema.COLUMNS[workload]}
    return [by_name[n] for n in EXTRA_AXES] + list(axes)


def _axes_section(summary: FolderSummary) -> list[str]:
    lines = ["## Sweep axes", "",
             "Every axis column with the values present and the number of runs per platform. "
             "Values of a fixed vocabulary carry their meaning; other values are listed as "
             "found. `null` means the axis was not set (or the source did not report it).", ""]
    any_runs = False
    for wl in schema.WORKLOADS:
        runs = summary.runs.get(wl, [])
        if not runs:
            continue
        any_runs = True
        platforms = sorted({r["platform"] for r in runs})
        configs = [c for c in summary.globs
                   if schema.base_config(c) in (wl, f"{wl}_runs")]
        lines += [f"### {_WORKLOAD_NAMES[wl].capitalize()} axes", "",
                  f"Applies to {', '.join(_code(c) for c in configs)} "
                  f"({plural(len(runs), 'run')}).", ""]
        rows = []
        for col in _axis_columns(wl):
            counts: dict[Any, Counter] = {}
            for r in runs:
                counts.setdefault(r.get(col.name), Counter())[r["platform"]] += 1
            for value in sorted(counts, key=_value_key):
                c = counts[value]
                mean = "not set" if value is None else (meaning(col.name, value) or "")
                rows.append([_code(col.name), _code(fmt_value(value)), mean]
                            + [str(c.get(p, 0)) for p in platforms] + [str(sum(c.values()))])
        lines += _table(["axis", "value", "meaning"] + [_code(p) for p in platforms]
                        + ["runs"], rows) + [""]
    return lines if any_runs else []
