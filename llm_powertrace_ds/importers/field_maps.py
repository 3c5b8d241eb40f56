"""Where every field of every publisher's format goes: no silent drops.

Each importer's format is listed here field by field: mapped to a column of ours, kept verbatim
in a ``source_*`` column, or dropped on purpose with the reason. A column of a log that no entry
names is still never dropped silently: the importer logs it and lists it in the run's
``source_metadata`` (``columns_not_imported``). ``docs/importers.md`` is generated from these
tables (``python -m llm_powertrace_ds.importers.field_maps``); a test fails when it is stale,
and another holds every field of the real published files to these tables.
"""

from __future__ import annotations

from . import (
    dcgm,
    mlenergy_v2,
    mlenergy_v3,
    nvidia_smi,
    powertrace_csv,
    request_timeline,
    seed_meta,
    wattameter,
    zeus,
)

POWERTRACE_CSV_COLUMNS: dict[str, str] = dict(powertrace_csv.CSV_COLUMNS)

NVIDIA_SMI_FIELDS: dict[str, str] = {
    "timestamp": "t_ms and start_time (local time converted with --tz)",
    **{q: f"power_w (power_field `{f}`; the most direct reading present wins)"
       for q, f in nvidia_smi.POWER_FIELDS},
    **{q: col for q, col in nvidia_smi.SIGNAL_FIELDS.items()},
    **{q: col for q, col in nvidia_smi.LIMIT_FIELDS.items()},
    "index": "gpu_index", "uuid": "gpu_uuid_hash (salted hash, never the UUID)",
    "gpu_uuid": "gpu_uuid_hash (salted hash, never the UUID)",
    "name": "gpu_name (and the platform)", "gpu_name": "gpu_name (and the platform)",
    "driver_version": "driver_version",
    **{f"{nvidia_smi.REASON_PREFIXES[0]}{r}": "clock_event_reasons (its NVML bit)"
       for r in nvidia_smi.REASON_BITS},
    f"{nvidia_smi.REASON_PREFIXES[0]}active": "clock_event_reasons (the bitmask)",
    **{q: f"dropped: {why}" for q, why in nvidia_smi.DROPPED_FIELDS.items()},
}
"""nvidia-smi ``--query-gpu`` fields (per-reason fields also under the older prefixes)."""

DCGM_FIELDS: dict[str, str] = {tag: col for tag, (col, _) in dcgm.FIELDS.items()}
"""``dcgmi dmon`` tags; any other tag is refused by name (never dropped)."""

MLENERGY_V2_FIELDS: dict[str, str] = dict(mlenergy_v2.FIELD_MAP)
MLENERGY_V3_FIELDS: dict[str, str] = dict(mlenergy_v3.FIELD_MAP)
REQUEST_TIMELINE_FIELDS: dict[str, str] = dict(request_timeline.FIELD_MAP)
COMPACT_RUN_FIELDS: dict[str, str] = {
    "run": "the catalog entry: mapped as the metadata JSON below",
    "samples": "rows of the long CSV: mapped as its columns below (`timestamp` required)",
    "inference_timeline": "the request timeline: mapped as its table below",
}
SEED_METADATA_FIELDS: dict[str, str] = dict(seed_meta.FIELD_MAP)

FORMATS: dict[str, tuple[str, dict[str, str]]] = {
    "powertrace-csv (CSV columns)": ("The long CSV of the PowerTrace catalog (the public catalog "
                                     "of LLM power traces the project started from, which the "
                                     "code calls the seed)", POWERTRACE_CSV_COLUMNS),
    "powertrace-csv (metadata JSON)": ("Their configuration JSON or full catalog entry, as "
                                       "published; every key also lands verbatim in "
                                       "`source_metadata` unless dropped",
                                       SEED_METADATA_FIELDS),
    "powertrace-csv (compact run file)": ("Their explorer's `runs/<run_id>.json` or "
                                          "`.json.gz`, given to `import powertrace-csv` like "
                                          "a CSV", COMPACT_RUN_FIELDS),
    "powertrace-csv (request timeline)": ("Their binned request counts of an inference run: "
                                          "`requests/<run_id>.csv` beside `raw/<run_id>.csv` "
                                          "of their export, or a compact file's "
                                          "`inference_timeline`", REQUEST_TIMELINE_FIELDS),
    "nvidia-smi": ("Logs of `nvidia-smi --query-gpu=... --format=csv -lms N`",
                   NVIDIA_SMI_FIELDS),
    "dcgm": ("The text output of `dcgmi dmon -e ...`; an unknown tag is refused by name",
             DCGM_FIELDS),
    "mlenergy-v2": ("ML.ENERGY leaderboard v2 run summaries; the run file and its models.json "
                    "entry also land verbatim in `source_metadata`", MLENERGY_V2_FIELDS),
    "mlenergy-v3": ("ML.ENERGY benchmark v3 `results.json` files (one inference run each); "
                    "every field but the timelines and the per-request results also lands "
                    "verbatim in `source_metadata`", MLENERGY_V3_FIELDS),
    "wattameter": ("WattAMeter NVML logs, 0.7 (`nvml_wattameter.log`) and 0.8 on "
                   "(`nvml_<dt>_wattameter_<job>-<host>.log`), a tracker's log merged into its "
                   "node's power log", dict(wattameter.FIELD_MAP)),
    "zeus": ("Zeus' power logs (the legacy power CSV of Zeus up to 0.11, `PowerMonitor` "
             "timelines as JSON, the lines `python -m zeus.monitor power` prints) and the "
             "`ZeusMonitor` window CSV beside one", dict(zeus.FIELD_MAP)),
}


def markdown() -> str:
    """``docs/importers.md``: the tables above."""
    lines = [
        "# Importers: where every field goes",
        "",
        "Generated by `python -m llm_powertrace_ds.importers.field_maps` from the importers' own",
        "tables; a test fails when this page is stale. Every field of a publisher's format is",
        "mapped to a column, kept verbatim in a `source_*` column, or dropped on purpose with the",
        "reason below. A log column that no table names is listed in the run's `source_metadata`",
        "(`columns_not_imported`) and in the import's log — never dropped silently.",
        "",
    ]
    for name, (what, table) in FORMATS.items():
        lines += [f"## {name}", "", what + ".", "", "| field | where it goes |", "| --- | --- |"]
        lines += [f"| `{field}` | {dest.replace('|', '/')} |" for field, dest in table.items()]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
