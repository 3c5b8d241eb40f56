"""The dataset card builder: the one writer of a dataset folder's ``README.md``.

The card is regenerated from the data and the schema alone, so nothing hand-edited survives;
customisation goes through :class:`CardOptions`. It is called once per command (under the
folder lock, by :func:`refresh_card`, through ``llm_powertrace_ds.hooks``) and by
``llm-powertrace card DIR``; publishing a run only keeps the YAML ``configs:`` block current:
it uses base dependencies only (matplotlib, when installed, draws the figures), reads the small
runs tables and only a few scalar columns of the trace shards, and is idempotent — the card holds
no timestamp, and a second run rewrites nothing.

Sections: YAML metadata (licence, tags, size, ``configs`` with globs and features), configs and
splits, how to use, figures, platforms, model families, every sweep axis with its values and run
counts per platform, measurement method (with a prominent warning when ``cpu_proxy`` rows are
present), quality summary, metric definitions (from ``metrics.py`` docstrings), the data
dictionary (from ``schema.py``), licence, citation and changelog.

Example:
    >>> from cards.builder import write_card  # doctest: +SKIP
    >>> write_card("llm-powertrace")  # doctest: +SKIP
    PosixPath('llm-powertrace/README.md')
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from llm_powertrace_ds import facility, layout, schema
from llm_powertrace_ds.formatting import human_number
from llm_powertrace_ds.privacy import strip_control
from llm_powertrace_ds.run import Event
from llm_powertrace_ds.schema import is_cpu_proxy
from llm_powertrace_ds.shards import folder_lock, write_text_atomic

from . import analysis
from . import figures as figures_mod
from .metric_docs import attribute_docs, metric_groups
from .summary import FolderSummary, summarize
from .vocab import meaning

_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: same text, 4x faster

REPO_PLACEHOLDER = "<org>/llm-powertrace"
"""Stands for the Hub repo id (or a local folder) in the card's snippets when none is given."""
PAPER_TITLE = ("LLM-PowerTrace: A Dataset of Time-Resolved GPU Power Traces for AI Compute")
LICENSE = "cc-by-4.0"
TAGS = ["timeseries", "energy", "gpu", "power", "llm"]
TASK_CATEGORIES = ["time-series-forecasting"]
FILE_SUFFIXES = {"arrow": ".arrow", "parquet": ".parquet"}
EXTRA_AXES = ("model_name", "num_gpus", "repeat")
"""Columns shown with the sweep axes besides the schema's fine-tuning/inference axes."""
_SIZE_CATEGORIES = [
    (1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
]
_CONFIG_ROWS = {"finetune": "run × device", "inference": "run × device",
                "finetune_runs": "run", "inference_runs": "run", "inference_requests": "request"}
_CONFIG_WHAT = {
    "finetune": "fine-tuning power traces: per-tick signal lists, events, every sweep axis",
    "inference": "inference power traces: per-tick signal lists, events, serving axes",
    "finetune_runs": "one row per fine-tuning run: axes and node-total metrics",
    "inference_runs": "one row per inference run: axes and node-total metrics",
    "inference_requests": "per-request timing on the run clock",
}
_WORKLOAD_NAMES = {"finetune": "fine-tuning", "inference": "inference"}


@dataclass(frozen=True)
class CardOptions:
    """How to build a card (the only way to customise it; the text is never hand-edited).

    Attributes:
        repo_id: Hub repo id used in the snippets (default: ``REPO_PLACEHOLDER``).
        file_format: the shards' format; the YAML globs follow it (``arrow`` or ``parquet``).
        figures: draw missing or stale figures (needs matplotlib; current ones are always
            kept and linked). ``None`` (default): draw unless the environment variable
            ``LLM_POWERTRACE_CARD_FIGURES`` is ``0`` — the switch for the card rebuilt after
            every publish, e.g. in test suites or on a cluster writing many runs.
        pretty_name: the dataset's display name.
    """

    repo_id: str | None = None
    file_format: Literal["arrow", "parquet"] = "arrow"
    figures: bool | None = None
    pretty_name: str = "LLM-PowerTrace"

    def __post_init__(self) -> None:
        if self.file_format not in FILE_SUFFIXES:
            raise ValueError(f"file_format {self.file_format!r} is not one of "
                             f"{', '.join(FILE_SUFFIXES)}")


# ---------------------------------------------------------------------------------------------
# Markdown helpers
# ---------------------------------------------------------------------------------------------

def _esc(text: Any) -> str:
    """One table cell: pipes escaped, newlines flattened."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: Any) -> str:
    return f"`{str(text).replace('`', '')}`"


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    out += ["| " + " | ".join(_esc(c) for c in row) + " |" for row in rows]
    return out


def fmt_value(value: Any) -> str:
    """A value as the card prints it (``null``, ``true``, ``1e-4``, ``24050``, ``7``, text).

    Floats go through :func:`llm_powertrace_ds.formatting.human_number` (6 significant digits,
    no thousands separator because values are listed with commas): no float32 noise
    (``9.999999747378752e-05``) and no exponent among plain numbers (``2.405e+04``).
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return human_number(value, 6, grouping=False)
    return str(value)


def human_count(n: int | None) -> str:
    """A parameter count in words (``1.24 B``, ``124 M``)."""
    if n is None:
        return "unknown"
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.3g} {unit}"
    return str(n)


def _join(values: Iterable[Any], *, code: bool = False) -> str:
    vals = sorted({fmt_value(v) for v in values if v is not None}, key=_natural)
    if not vals:
        return "not recorded"
    return ", ".join(_code(v) if code else v for v in vals)


def _natural(text: str) -> tuple:
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def _value_key(value: Any) -> tuple:
    if value is None:
        return (2, 0.0, "")
    if isinstance(value, (bool, int, float)):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def _feature_type(feature: Any) -> str:
    if hasattr(feature, "dtype") and not hasattr(feature, "feature"):
        return str(feature.dtype)
    inner = getattr(feature, "feature", None)
    if isinstance(inner, dict):
        return "list<struct>"
    if inner is not None:
        return f"list<{_feature_type(inner)}>"
    return type(feature).__name__


# ---------------------------------------------------------------------------------------------
# YAML metadata
# ---------------------------------------------------------------------------------------------

def size_category(n_rows: int) -> str:
    """The Hub's ``size_categories`` bucket for ``n_rows`` rows."""
    for limit, name in _SIZE_CATEGORIES:
        if n_rows < limit:
            return name
    return "n>1B"


def configs_yaml(root: str | Path, file_format: str = "arrow") -> list[dict[str, Any]]:
    """``layout.configs_metadata`` with the globs' file suffix following ``file_format``."""
    entries = layout.configs_metadata(root)
    suffix = FILE_SUFFIXES[file_format]
    if suffix != layout.SHARD_SUFFIX:
        for entry in entries:
            for files in entry["data_files"]:
                files["path"] = [p[: -len(layout.SHARD_SUFFIX)] + suffix
                                 if p.endswith(layout.SHARD_SUFFIX) else p for p in files["path"]]
    return entries


def card_metadata(root: str | Path, options: CardOptions | None = None,
                  summary: FolderSummary | None = None) -> dict[str, Any]:
    """The card's YAML metadata (the form the Hub documents for dataset cards)."""
    options = options or CardOptions()
    summary = summary or summarize(root)
    return {
        "license": LICENSE,
        "pretty_name": options.pretty_name,
        "task_categories": list(TASK_CATEGORIES),
        "tags": list(TAGS),
        "size_categories": [size_category(summary.base_row_total())],
        "configs": configs_yaml(root, options.file_format),
    }


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
    return lines + _proxy_warning(summary)


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
    """The largest trace cell (issue 13: long rows and the Hub's dataset viewer)."""
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
    mb = ticks * _SAMPLE_BYTES / 1e6
    return [f"Long rows: a trace row holds a whole run of one device. The longest here is "
            f"{_code(run['run_id'])} ({fmt_value(run.get('duration_s'))} s at "
            f"{fmt_value(run.get('sample_period_ms'))} ms: about {ticks:,.0f} ticks per device, "
            f"about {mb:.1f} MB per row in memory with every signal). The Hub's dataset viewer "
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


def _power_w_is_and_is_not(fields: Counter[Any]) -> list[str]:
    """What ``power_w`` is and is not, for the power fields present in the folder."""
    lines = []
    if fields.get("instant"):
        lines.append(
            "- **`instant` (NVML field 186, `nvmlDeviceGetFieldValues`).** The driver's latest "
            "power reading at each tick, not an average over the sampling interval. Every "
            "reading's own NVML timestamp is kept by the sampler; a tick whose timestamp equals "
            "the previous one repeated a stale value (quality flag `stale_power`). The on-board "
            "sensor itself does not see all of the time: Yang et al. (SC'24, \"Accurate and "
            "Convenient Energy Measurements for GPUs\") found that on A100 and H100 GPUs only "
            "about 25 % of the runtime is sampled for power, so activity shorter than the "
            "sensor's window can be missed or over-weighted in `power_w` and in the energy "
            "counter alike. Read sub-second features as indicative; energy totals over many "
            "seconds are robust.")
    if fields.get("average"):
        lines.append("- **`average` (NVML field 185).** A 1 s moving average: transients are "
                     "smoothed and shifted by up to a second.")
    if fields.get("power_usage"):
        lines.append(
            "- **`power_usage` (`nvmlDeviceGetPowerUsage`, nvidia-smi `power.draw`).** The "
            "sampler uses it only where field 186 failed at start-up (the run's provenance "
            "records why); it is a 1 s average on Ampere (except GA100) and newer GPUs, "
            "instantaneous on older ones.")
    if fields.get("cpu_proxy_model"):
        lines.append("- **`cpu_proxy_model`.** Not a GPU measurement at all (see the warning "
                     "above).")
    lines.append("- **Energy counter cross-check.** `energy_mj` (NVML field 191, or "
                 "`nvmlDeviceGetTotalEnergyConsumption`) is integrated by the driver; every run "
                 "compares it with the integral of `power_w` and flags `energy_mismatch` beyond "
                 "5 %.")
    return lines + [""]


def _measurement_section(summary: FolderSummary) -> list[str]:
    runs = summary.all_runs
    if not runs:
        return []
    lines = ["## Measurement method", ""]
    lines += _proxy_warning(summary)
    samplers: dict[Any, list[dict[str, Any]]] = {}
    for r in runs:
        samplers.setdefault(r.get("sampler"), []).append(r)
    rows = []
    for sampler in sorted(samplers, key=_value_key):
        rs = samplers[sampler]
        periods = sorted({r["sample_period_ms"] for r in rs if r.get("sample_period_ms")})
        nyquist = ", ".join(fmt_value(1000.0 / (2 * p)) for p in periods) or "—"
        rows.append([_code(fmt_value(sampler)), meaning("sampler", sampler) or "",
                     str(len(rs)), _join((r["platform"] for r in rs), code=True),
                     ", ".join(fmt_value(p) for p in periods) or "not recorded", nyquist])
    lines += ["How power was read, per sampler. The highest frequency a trace can resolve is "
              "the Nyquist frequency, half the sampling rate (5 Hz at 100 ms).", ""]
    lines += _table(["sampler", "what it is", "runs", "platforms", "sample period (ms)",
                     "Nyquist (Hz)"], rows) + [""]
    fields = Counter(r.get("power_field") for r in runs)
    lines += ["Which reading `power_w` holds (`power_field`), per platform:", ""]
    per_platform = Counter((r.get("platform"), r.get("power_field")) for r in runs)
    lines += _table(["platform", "power_field", "meaning", "runs"],
                    [[_code(fmt_value(p)), _code(fmt_value(f)), meaning("power_field", f) or "",
                      str(n)] for (p, f), n in sorted(
                          per_platform.items(),
                          key=lambda kv: (_value_key(kv[0][0]), _value_key(kv[0][1])))]) + [""]
    lines += _power_w_is_and_is_not(fields)
    n_usage = fields.get("power_usage", 0)
    n_avg_flag = sum("power_is_1s_average" in (r.get("quality_flags") or []) for r in runs)
    desc = {c.name: c.description for c in schema.SIGNALS}
    lines += [
        f"- **Clock.** `t_ms`: {desc['t_ms']}. `start_time` is the UTC wall-clock time of the "
        "first tick. Each device keeps its own timestamps; nothing is resampled in the data.",
        "- **Energy.** `energy_mj` is the device's energy counter where the source reports it; "
        "the runs tables give both the integral of `power_w` (`energy_j`) and the counter "
        f"difference (`energy_counter_j`); `energy_mismatch` flags "
        f"{schema.FLAG_DESCRIPTIONS['energy_mismatch']}.",
        "- **`power.draw` is a 1 s average on newer GPUs.** On Ampere (except GA100) and newer "
        "GPUs, nvidia-smi `power.draw` and `nvmlDeviceGetPowerUsage` (`power_field = "
        "power_usage`) are a 1 s moving average, so fast transients are smoothed; "
        "`power.draw.instant` / NVML field 186 (`instant`) is not. In this dataset "
        f"{plural(n_usage, 'run')} {'uses' if n_usage == 1 else 'use'} `power_usage` and "
        f"{n_avg_flag} {'carries' if n_avg_flag == 1 else 'carry'} the `power_is_1s_average` "
        "flag.",
        "- **Missing values.** A reading the source does not report is null, never 0.",
    ]
    multi = sorted(r["run_id"] for r in runs
                   if len({d.get("node_index") or 0 for d in summary.devices.get(r["run_id"], [])})
                   > 1)
    if multi:
        lines.append(
            f"- **Multi-node runs ({len(multi)}).** Each node has its own sampler; node clocks "
            "are aligned through each sampler's (monotonic, UTC) anchor pairs, so cross-node "
            "alignment is as good as the nodes' clock synchronisation: typically about 1 ms with "
            "NTP on a local network (worse over the internet) and about 1 µs with PTP.")
    return lines + [""]


def _quality_section(summary: FolderSummary) -> list[str]:
    runs = summary.all_runs
    if not runs:
        return []
    flag_runs: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        for f in r.get("quality_flags") or []:
            flag_runs.setdefault(f, []).append(r)
    lines = ["## Quality", "",
             f"Every run is validated before it is published. {flags_sentence(runs)}", ""]
    n_errors = sum(len(flag_runs.get(f, [])) for f in schema.ERROR_FLAGS)
    if n_errors == 0:
        lines += ["No published run carries an error-level flag.", ""]
    if flag_runs:
        order = {f: i for i, f in enumerate(schema.QUALITY_FLAGS)}
        rows = []
        for flag in sorted(flag_runs, key=lambda f: (order.get(f, len(order)), f)):
            rs = flag_runs[flag]
            level = "error" if flag in schema.ERROR_FLAGS else "warning"
            per = Counter(r["platform"] for r in rs)
            rows.append([_code(flag), level,
                         schema.FLAG_DESCRIPTIONS.get(flag, "not in the documented vocabulary"),
                         str(len(rs)),
                         ", ".join(f"{_code(p)} ({n})" for p, n in sorted(per.items()))])
        lines += _table(["flag", "level", "meaning", "runs", "platforms (runs)"], rows) + [""]
    notes = Counter(n for r in runs for n in (r.get("metric_notes") or []))
    if notes:
        lines += ["Why some metrics are null (`metric_notes`):", ""]
        lines += _table(["note", "runs"], [[_code(n), str(c)] for n, c in sorted(notes.items())])
        lines += [""]
    return lines


def _metrics_section() -> list[str]:
    sections, groups = metric_groups()
    lines = ["## Metric definitions", "",
             "Columns of `finetune_runs` / `inference_runs`, computed from the traces by "
             "`llm_powertrace_ds.metrics`; the definitions below are its docstrings. A metric "
             "that cannot be computed is null and `metric_notes` says why.", ""]
    for heading, text in sections:
        lines += [f"**{heading}.** {text}", ""]
    for group in groups:
        lines += [f"### {group.title}", ""]
        for para in group.intro:
            lines += [para, ""]
        rows = [[_code(d.name) + (" (list, per device)" if d.per_device else ""),
                 d.unit or "—", d.definition] for d in group.metrics]
        lines += _table(["metric", "unit", "definition"], rows) + [""]
    return lines


def _facility_section() -> list[str]:
    lines = ["## From GPUs to the grid", "",
             "`llm-powertrace facility DIR_OR_REPO --gpus N ...` composes node, rack and site "
             "load profiles (0.1 s to 15 min) from these runs. Such profiles are extrapolations:",
             ""]
    lines += [f"- {text}" for text in facility.CARD_LIMITS] + [""]
    lines += ["Node-overhead presets (non-GPU power per node = idle_w + fraction × node GPU "
              "power):", ""]
    rows = [[_code(name), f"{p.idle_w:.0f}", f"{p.fraction:.3f}", p.source]
            for name, p in facility.OVERHEAD_PRESETS.items()]
    return lines + _table(["preset", "idle_w (W)", "fraction", "source"], rows) + [""]


def _dictionary_section(summary: FolderSummary) -> list[str]:
    present = [c for c in schema.ALL_CONFIGS if c in summary.globs]
    if not present:
        return []
    event_docs = attribute_docs(Event)
    event_units = {"t_ms": "ms"}
    lines = ["## Data dictionary", "",
             "Every column of every config, generated from `llm_powertrace_ds/schema.py`. "
             "Units are in the names. Categorical values are plain strings. Per-tick signals "
             "are lists with one entry per tick of the device; `events` is a list of structs.",
             ""]
    for config in present:
        fam = sorted(c for c in summary.globs if c not in schema.ALL_CONFIGS
                     and schema.base_config(c) == config)
        lines += [f"### `{config}`", ""]
        if fam:
            lines += [f"Also the columns of {', '.join(_code(c) for c in fam)}.", ""]
        rows = []
        for col in schema.column_doc(config):
            rows.append([_code(col.name), _feature_type(col.feature), col.unit or "—",
                         col.description])
            inner = getattr(col.feature, "feature", None)
            if isinstance(inner, dict):
                for name, sub in inner.items():
                    text = (event_docs.get(name, "").replace("`None`", "null")
                            .replace("`schema.EVENT_KINDS`", f"the kinds listed under `{col.name}`"))
                    rows.append([_code(f"{col.name}[].{name}"), _feature_type(sub),
                                 event_units.get(name, "—"), text])
        lines += _table(["column", "type", "unit", "description"], rows) + [""]
    return lines


def _limitations_section(summary: FolderSummary) -> list[str]:
    """What the data can and cannot support (counts from this folder)."""
    runs = summary.all_runs
    if not runs:
        return []
    proxy = sum(1 for r in runs if is_cpu_proxy(r))
    lines = ["## Limitations and intended use", "",
             "**Intended use.** Research on how the power of LLM fine-tuning and inference "
             "moves in time — peaks, ramps, oscillations, synchrony across devices — for "
             "data-centre provisioning, power-grid planning, energy modelling and scaling-law "
             "studies; testing power-aware schedulers and trace generators.", "",
             "**Not intended for** certifying the energy or carbon footprint of a product or "
             "model: the traces cover only the settings listed above, on the platforms listed "
             "above.", "",
             "**Limitations.**", "",
             "- GPU power only: CPU, memory, storage, network, fans and cooling (PUE) are not "
             "in the traces; facility power is higher.",
             "- Sampling every 100 ms resolves oscillations up to 5 Hz (Nyquist); faster "
             "transients alias or average out, and a `power_usage` reading is itself a 1 s "
             "average (see *Measurement*).",
             "- Zoo models have random weights and the data are synthetic token ids: compute, "
             "and so power, follow the architecture's shape, but effects of real weights or "
             "text (sparsity, early stopping of generation) are not captured.",
             "- Readings are the vendor's sensor; energy from the counter and from integrated "
             "power are both stored, and disagreements beyond 5 % are flagged "
             "(`energy_mismatch`), but the sensor's absolute accuracy is not re-calibrated here.",
             "- Each run is one machine's behaviour at one time (driver, clocks, temperature); "
             "repeats show the spread, not a population."]
    if proxy:
        lines.append(f"- {proxy} of {len(runs)} run{'s' if len(runs) != 1 else ''} "
                     f"{'is' if proxy == 1 else 'are'} `cpu_proxy` data: power modelled from CPU "
                     "activity on a machine without a GPU — a pipeline check, never a GPU "
                     "measurement.")
    return lines + [""]


def plural(n: int, word: str) -> str:
    """``"1 run"``, ``"3 runs"``, ``"0 runs"``: a count and its noun, for people.

    Example:
        >>> plural(1, "run"), plural(0, "device trace")
        ('1 run', '0 device traces')
    """
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def flags_sentence(runs: Sequence[Mapping[str, Any]]) -> str:
    """How many runs carry a quality flag, in plain words (no double negative).

    Example:
        >>> flags_sentence([{"quality_flags": []}, {"quality_flags": ["gap"]}])
        '1 of 2 runs carries at least one quality flag; 1 carries none.'
        >>> flags_sentence([{"quality_flags": None}])
        'No run carries a quality flag.'
    """
    flagged = sum(1 for r in runs if r.get("quality_flags"))
    n = len(runs)
    if flagged == 0:
        return "No run carries a quality flag."
    verb = "carries" if flagged == 1 else "carry"
    rest = n - flagged
    tail = f"; {rest} {'carries' if rest == 1 else 'carry'} none." if rest else "."
    return f"{flagged} of {n} run{'s' if n != 1 else ''} {verb} at least one quality flag{tail}"


PAPER_BIBTEX = [
    "@misc{llm_powertrace_paper,",
    f"  title        = {{{PAPER_TITLE}}},",
    "  howpublished = {Traces published by the authors at "
    "\\url{https://leo-hxu.github.io/training-power-trace-explorer/}},",
    "  note         = {Authors, year and venue are not stated in the sources this project "
    "used; please complete them from the paper}",
    "}",
]
"""The seed paper, as far as it is known here: its title and where its authors publish traces."""


def dataset_bibtex(summary: FolderSummary, repo_id: str | None) -> list[str]:
    """A complete BibTeX entry for this dataset (its year is that of its latest run).

    Fields: title, author (the project's contributors), year, version (schema), publisher,
    howpublished (the Hub URL, or a placeholder until published), license.
    """
    years = [r["start_time"].year for r in summary.all_runs
             if hasattr(r.get("start_time"), "year")]
    repo = repo_id or REPO_PLACEHOLDER
    return [
        "@misc{llm_powertrace_dataset,",
        "  title        = {{LLM-PowerTrace}: Time-Resolved Per-{GPU} Power Traces of {LLM} "
        "Fine-Tuning and Inference},",
        "  author       = {{LLM-PowerTrace contributors}},",
        f"  year         = {{{max(years) if years else 'n.d.'}}},",
        f"  version      = {{schema {schema.SCHEMA_VERSION}}},",
        "  publisher    = {Hugging Face},",
        f"  howpublished = {{\\url{{https://huggingface.co/datasets/{repo}}}}},",
        "  license      = {CC-BY-4.0},",
        "}",
    ]


def _licence_citation_changelog(summary: FolderSummary, repo_id: str | None = None) -> list[str]:
    lines = ["## Licence", "",
             "The data are released under the Creative Commons Attribution 4.0 International "
             "licence (`cc-by-4.0`). The `llm-powertrace` software that produced them is "
             "Apache-2.0.", "",
             "## Citation", "",
             "If you use these data, please cite the dataset and the paper whose design it "
             f"follows, *{PAPER_TITLE}*:", "", "```bibtex", *dataset_bibtex(summary, repo_id), "",
             *PAPER_BIBTEX, "```", "",
             "## Changelog", "",
             f"Current schema version: `{schema.SCHEMA_VERSION}`. Adding or renaming a column "
             "bumps it.", ""]
    lines += _table(["schema version", "change"],
                    [[_code(v) + (" (current)" if v == schema.SCHEMA_VERSION else ""), text]
                     for v, text in reversed(schema.SCHEMA_CHANGELOG)]) + [""]
    versions = Counter(r.get("schema_version") for r in summary.all_runs)
    if versions:
        lines += ["Runs in this folder by the schema version that wrote them: "
                  + ", ".join(f"{_code(fmt_value(v))} ({n})"
                              for v, n in sorted(versions.items(), key=lambda kv: _value_key(kv[0])))
                  + ".", ""]
    return lines


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------

def render_card(root: str | Path, options: CardOptions | None = None, *,
                summary: FolderSummary | None = None,
                figures: list[figures_mod.Figure] | None = None) -> str:
    """Render the card's text (YAML front matter + Markdown body).

    Args:
        root: the dataset folder.
        options: card options (default ``CardOptions()``).
        summary: a precomputed ``summarize(root)``.
        figures: the figures to link (default: those already current in ``root/figures``;
            :func:`write_card` draws missing ones first).

    Returns:
        The card text; the same folder and options always give the same text.
    """
    options = options or CardOptions()
    summary = summary or summarize(root)
    if figures is None:
        figures = [f for f in figures_mod.planned_figures(summary) if f.available]
    meta = yaml.dump(card_metadata(root, options, summary), Dumper=_YAML_DUMPER,
                     sort_keys=False, allow_unicode=True, width=1000)
    body: list[str] = []
    for section in (_intro(summary, options), _configs_section(summary), _long_rows_note(summary),
                    _how_to_use(summary, options), _figures_section(figures, summary),
                    _platforms_section(summary), _families_section(summary),
                    _axes_section(summary), _measurement_section(summary),
                    _quality_section(summary), _limitations_section(summary),
                    _metrics_section() + analysis.seed_note(), _facility_section(),
                    analysis.scaling_section(summary.root), analysis.sources_section(summary.all_runs),
                    _dictionary_section(summary),
                    _licence_citation_changelog(summary, options.repo_id)):
        body += section
    while body and body[-1] == "":
        body.pop()
    return "\n".join(["---", meta.rstrip(), "---", "", *body, ""])


def write_card(root: str | Path, options: CardOptions | None = None, *,
               out_dir: str | Path | None = None) -> Path:
    """Draw missing figures, then write ``README.md`` atomically; return its path.

    Unchanged text is not rewritten, so a second call changes nothing.

    Args:
        root: the dataset folder the card describes.
        options: card options (default ``CardOptions()``).
        out_dir: write the card (and copy the figures) into this folder instead — e.g. a
            Parquet copy of ``root`` whose card must describe the same data.

    Returns:
        The path of the written ``README.md``.
    """
    options = options or CardOptions()
    root = Path(root)
    summary = summarize(root)
    draw = options.figures if options.figures is not None else figures_mod.drawing_enabled()
    figs = figures_mod.update_figures(summary, render=draw)
    text = render_card(root, options, summary=summary, figures=figs)
    dest = Path(out_dir) if out_dir is not None else root
    if dest.resolve() != root.resolve():
        for fig in figs:
            target = dest / fig.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / fig.path, target)
    path = dest / "README.md"
    text = strip_control(text)  # no ESC sequence or CR from old data reaches the card
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        write_text_atomic(path, text)
    return path


def refresh_card(root: str | Path, options: CardOptions | None = None) -> Path:
    """:func:`write_card` under the folder lock: what a command calls once, at its end.

    Raises:
        LockTimeout: another process holds the folder's card.
    """
    with folder_lock(root):
        return write_card(root, options)
