"""Croissant metadata (``croissant.json``): the MLCommons format dataset venues and the Hub read.

A dataset folder's ``croissant.json`` is written beside its card, from the same facts: the
column contract of :mod:`llm_powertrace_ds.schema` (every field with its type, unit and
description), the card's configs and splits (one ``FileSet`` per config, the split a field read
from the file path), and the Responsible-AI fields of Croissant's RAI vocabulary: how the data
were collected, with which sensors, and the limitations present in the folder (``cpu_proxy``
rows, 1 s averaged power, summary-only runs, ...).

The document follows Croissant 1.0 (``conformsTo``); the tests validate it with the
``mlcroissant`` package. Nothing here needs ``mlcroissant`` at run time.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import schema

CROISSANT_FILE = "croissant.json"
"""The file's name in a dataset folder (beside ``README.md``)."""
CONFORMS_TO = "http://mlcommons.org/croissant/1.0"

_CONTEXT: dict[str, Any] = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}
"""Croissant 1.0's JSON-LD context, key for key."""

ENCODING_FORMATS = {
    "arrow": "https://arrow.apache.org/docs/format/Columnar.html#ipc-streaming-format",
    "parquet": "application/x-parquet",
}
"""A shard format's ``encodingFormat``: Parquet's MIME type; Arrow's streaming format by the URL
of its specification (Croissant's way of naming a format without a registered MIME type)."""

_LICENCE_URLS = {
    "cc-by-4.0": "https://creativecommons.org/licenses/by/4.0/",
    "apache-2.0": "https://www.apache.org/licenses/LICENSE-2.0",
    "mit": "https://opensource.org/license/mit",
    "cc0-1.0": "https://creativecommons.org/publicdomain/zero/1.0/",
    "cc-by-sa-4.0": "https://creativecommons.org/licenses/by-sa/4.0/",
    "odc-by": "https://opendatacommons.org/licenses/by/",
}

_SENSORS = {
    "nvml": "NVIDIA's NVML (the driver's power readings) sampled every 100 ms per GPU",
    "cpu_proxy": "cpu_proxy: NOT a GPU measurement, power modelled from the workload "
    "processes' real CPU utilisation (idle_w + (max_w - idle_w) * u)",
    "import:nvidia-smi": "nvidia-smi query logs measured by others (NVML readings)",
    "import:dcgm": "DCGM field logs measured by others (NVML readings)",
    "import:wattameter": "WattAMeter logs measured by others (NVML readings, multi-node jobs)",
    "import:series": "plain time/power series measured by others",
    "import:powertrace-csv": "the PowerTrace catalog's own traces (NVML readings)",
    "import:mlenergy-v2": "ML.ENERGY leaderboard v2 summaries (the publisher's steady-state "
    "NVML energy per request; no power series)",
}
"""What each sampler (``runs.sampler``) measured with: the RAI collection's sensors."""

_LIMITATION_FLAGS = ("cpu_proxy", "power_is_1s_average", "summary_only", "incomplete",
                     "aggregate_series", "power_field_unknown", "platform_unknown",
                     "power_limit_from_spec", "precision_unknown", "gap", "stall")
"""Quality flags that limit what a row can be used for, stated in ``rai:dataLimitations``."""


@dataclass(frozen=True)
class CroissantInfo:
    """The dataset-level facts the card also states.

    Attributes:
        name: the dataset's name.
        description: one paragraph.
        licence: the Hub licence id of the data (``cc-by-4.0``, or ``other`` when sources differ).
        cite_as: the BibTeX entries to cite.
        url: where the dataset lives (the Hub page, or a placeholder until published).
        version: the schema version.
    """

    name: str
    description: str
    licence: str
    cite_as: str
    url: str
    version: str = schema.SCHEMA_VERSION


def _data_type(spec: Any) -> str:
    """The Croissant ``dataType`` of a scalar spec (``schema._Value``)."""
    dtype = spec.dtype
    if dtype == "bool":
        return "sc:Boolean"
    if dtype.startswith(("int", "uint")):
        return "sc:Integer"
    if dtype.startswith("float"):
        return "sc:Float"
    if dtype.startswith("timestamp"):
        return "sc:DateTime"
    return "sc:Text"


def _description(column: schema.Column) -> str:
    return f"{column.description} (unit: {column.unit})" if column.unit else column.description


def _field(record_set: str, column: schema.Column, file_set: str) -> dict[str, Any]:
    """One column as a Croissant field: type, unit, description, where its values are read."""
    field_id = f"{record_set}/{column.name}"
    out: dict[str, Any] = {"@type": "cr:Field", "@id": field_id, "name": column.name,
                           "description": _description(column)}
    spec: Any = column.spec
    source = {"fileSet": {"@id": file_set}, "extract": {"column": column.name}}
    if isinstance(spec, schema._List):
        out["repeated"] = True
        spec = spec.inner
    if isinstance(spec, tuple):  # a struct (or a list of structs): one sub-field per member
        out["subField"] = [
            {"@type": "cr:Field", "@id": f"{field_id}/{name}", "name": name,
             "dataType": _data_type(inner),
             "source": {"fileSet": {"@id": file_set},
                        "extract": {"column": column.name}, "transform": {"jsonPath": name}}}
            for name, inner in spec]
    else:
        out["dataType"] = _data_type(spec)
        out["source"] = source
    return out


def _record_set(config: str, splits: Sequence[str], file_set: str) -> dict[str, Any]:
    fields = [{
        "@type": "cr:Field", "@id": f"{config}/split", "name": "split",
        "description": "The split (the platform, e.g. h100_sxm_80gb, or cpu_proxy) the row is "
        f"in: one of {', '.join(splits)}; read from the file's path data/{config}/<split>/",
        "dataType": "sc:Text",
        "source": {"fileSet": {"@id": file_set}, "extract": {"fileProperty": "fullpath"},
                   "transform": {"regex": f"^(?:.*/)?data/{config}/([^/]+)/.*$"}},
    }]
    fields += [_field(config, c, file_set) for c in schema.column_doc(config)]
    return {"@type": "cr:RecordSet", "@id": config, "name": config,
            "description": _CONFIG_TEXT.get(schema.base_config(config), config)
            + f" Splits (platforms): {', '.join(splits)}.",
            "field": fields}


_CONFIG_TEXT = {
    "finetune": "Fine-tuning power traces, one row per run and device: per-tick signal lists, "
    "events and every sweep axis.",
    "inference": "Inference power traces, one row per run and device: per-tick signal lists, "
    "events and every sweep axis.",
    "finetune_runs": "One row per fine-tuning run: its settings and power/energy metrics.",
    "inference_runs": "One row per inference run: its settings, latencies and power/energy "
    "metrics.",
    "inference_requests": "One row per served request of an inference run, on the run's clock.",
}


def _rai(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The Responsible-AI fields, from the runs actually in the folder."""
    samplers = Counter(str(r.get("sampler")) for r in runs)
    sensors = "; ".join(f"{_SENSORS.get(s, s)} ({n} run(s))" for s, n in sorted(samplers.items()))
    flags: Counter[str] = Counter()
    for r in runs:
        flags.update(set(r.get("quality_flags") or ()))
    limitations = [f"{n} run(s) flagged `{flag}`: {schema.FLAG_DESCRIPTIONS[flag]}"
                   for flag in _LIMITATION_FLAGS if (n := flags.get(flag))]
    if flags.get("cpu_proxy"):
        limitations.insert(0, "Runs in split cpu_proxy are NOT GPU power measurements: exclude "
                           "them from any analysis of GPU power.")
    limitations.append("A value the source does not report is null, never 0. Power readings "
                       "are what the sensor gives (NVML readings are the driver's, with its "
                       "own averaging and accuracy); see the card's measurement method.")
    imported = sum(n for s, n in samplers.items() if s.startswith("import:"))
    kinds = []
    if len(runs) - imported:
        kinds.append("Experiments")
    if imported:
        kinds.append("Secondary Data Analysis")
    return {
        "rai:dataCollection": (
            "Power sampled per device while real LLM fine-tuning and inference workloads ran "
            "(TRL/PEFT training, transformers or serving engines), or imported from logs "
            "measured by others through the same checks and metrics. Sensors: "
            + (sensors or "none (the folder holds no run)") + "."),
        "rai:dataCollectionType": kinds or ["Experiments"],
        "rai:dataCollectionRawData": "Each device's power samples are kept as read (no "
        "resampling, padding or back-dating); metrics are computed from them.",
        "rai:dataPreprocessingProtocol": [
            "Every run is validated (monotonic time, equal lengths, physical ranges) and "
            "flagged (quality_flags) rather than altered; metric formulas are in the card."],
        "rai:dataLimitations": limitations,
        "rai:personalSensitiveInformation": "None: host names, user names, paths, IP "
        "addresses and token-shaped strings are refused or removed; GPU UUIDs and the host "
        "are stored only as salted hashes.",
        "rai:dataUseCases": [
            "Energy per token and power-swing analysis of LLM workloads; load profiles for "
            "power-system and data-centre studies; scaling laws of energy."],
    }


def croissant_metadata(info: CroissantInfo, configs: Sequence[Mapping[str, Any]],
                       runs: Sequence[Mapping[str, Any]], *,
                       file_format: str = "arrow") -> dict[str, Any]:
    """The Croissant JSON-LD document of a dataset folder.

    Args:
        info: dataset-level facts (name, licence, citation, ...).
        configs: the card's ``configs:`` entries (``config_name`` and ``data_files`` with the
            split and globs, as :func:`llm_powertrace_ds.layout.configs_metadata` gives them);
            family configs (``finetune-llama``) are subsets of their workload's and are left out.
        runs: the folder's runs-config rows (sampler and quality flags feed the RAI fields).
        file_format: the shards' format (``arrow`` or ``parquet``).

    Returns:
        The document, ready for ``json.dumps``.
    """
    if file_format not in ENCODING_FORMATS:
        raise ValueError(f"file_format {file_format!r} is not one of {', '.join(ENCODING_FORMATS)}")
    distribution: list[dict[str, Any]] = []
    record_sets: list[dict[str, Any]] = []
    for entry in configs:
        config = str(entry["config_name"])
        if config not in schema.ALL_CONFIGS:
            continue
        files = entry.get("data_files") or []
        globs = [p for f in files for p in f.get("path") or []]
        splits = [str(f["split"]) for f in files]
        file_set = f"{config}-files"
        distribution.append({"@type": "cr:FileSet", "@id": file_set, "name": file_set,
                             "description": f"The {file_format} shards of config {config}.",
                             "encodingFormat": ENCODING_FORMATS[file_format],
                             "includes": globs if len(globs) != 1 else globs[0]})
        record_sets.append(_record_set(config, splits, file_set))
    licence = _LICENCE_URLS.get(info.licence.lower(), info.licence)
    doc: dict[str, Any] = {
        "@context": _CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "name": info.name,
        "description": info.description,
        "license": licence,
        "url": info.url,
        "version": info.version,
        "citeAs": info.cite_as,
        "keywords": ["GPU power", "energy", "LLM", "time series", "power grid"],
        "isLiveDataset": True,
        "distribution": distribution,
        "recordSet": record_sets,
    }
    doc.update(_rai(runs))
    return doc


def croissant_text(doc: Mapping[str, Any]) -> str:
    """The document as written: indented, keys in order, a final newline (stable bytes)."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def croissant_path(root: str | Path) -> Path:
    """``<root>/croissant.json``."""
    return Path(root) / CROISSANT_FILE
