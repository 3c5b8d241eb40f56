"""Card sections about the method: measurement, quality, metrics, facility, dictionary, limitations, citation."""

from __future__ import annotations

from collections import Counter
from typing import Any

from llm_powertrace_ds import facility, schema
from llm_powertrace_ds.privacy import markdown_inline
from llm_powertrace_ds.run import Event
from llm_powertrace_ds.schema import is_cpu_proxy
from llm_powertrace_ds.sources.provenance import public_entry, read_sources

from .analysis import cited_sources
from .card_text import (
    PAPER_TITLE,
    REPO_PLACEHOLDER,
    _code,
    _join,
    _table,
    _value_key,
    flags_sentence,
    fmt_value,
    plural,
)
from .metric_docs import attribute_docs, metric_groups
from .sections_data import _proxy_warning
from .summary import FolderSummary
from .vocab import meaning


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
            rows.append([_code(col.name), col.type_name, col.unit or "—", col.description])
            for name, type_name in col.struct_fields:  # from the spec: no `datasets` import
                text = (event_docs.get(name, "").replace("`None`", "null")
                        .replace("`schema.EVENT_KINDS`", f"the kinds listed under `{col.name}`"))
                rows.append([_code(f"{col.name}[].{name}"), type_name,
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
             "Data measured with this project are released under the Creative Commons "
             "Attribution 4.0 International licence (`cc-by-4.0`). The `llm-powertrace` software that produced them is "
             "Apache-2.0.", ""]
    recorded = read_sources(summary.root)
    if recorded:
        lines += ["Runs imported from a public source keep their publisher's licence and "
                  "citation: " + "; ".join(f"`{markdown_inline(e.get('name'))}` — "
                                           f"`{markdown_inline(e.get('licence'))}`, cite "
                                           f"{markdown_inline(e.get('citation') or 'n/a')}"
                                           for e in map(public_entry, recorded))
                  + " (see Sources).", ""]
    cited = cited_sources(summary.all_runs, summary.root)
    if cited and not recorded:
        lines += ["Runs imported from a public source keep their publisher's licence: "
                  + "; ".join(f"`{markdown_inline(c['name'])}` ({c['runs']} run(s)) — "
                              f"`{markdown_inline(c['licence'])}`" for c in cited) + ".", ""]
    lines += [
             "## Citation", "",
             "If you use these data, please cite the dataset and the paper whose design it "
             f"follows, *{PAPER_TITLE}*:", "", "```bibtex", *dataset_bibtex(summary, repo_id), "",
             *PAPER_BIBTEX, "```", ""]
    if cited:
        lines += ["and the sources whose runs this dataset holds (from the runs' own metadata):",
                  ""]
        lines += [f"- `{markdown_inline(c['name'])}` ({c['runs']} run(s), licence "
                  f"`{markdown_inline(c['licence'])}`): {markdown_inline(c['citation'] or 'n/a')}"
                  for c in cited]
        lines.append("")
    lines += [
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
