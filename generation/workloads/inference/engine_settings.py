"""Settings of the HTTP serving engines (``vllm``, ``sglang``, ``openai``) and their checks.

A sweep with ``serving_engine: vllm | sglang`` has the runner start the engine's server
(``generation.serving.launch``); ``serving_engine: openai`` drives a server that already runs,
named by ``endpoint`` (the API root, e.g. ``http://127.0.0.1:8000/v1``) and ``model`` (the
served model name). The knobs here (:data:`ENGINE_SETTINGS`) are dropped from ``transformers``
runs (so their run ids do not change), and the ``cb_*`` knobs from engine runs.

``arrival_rate`` (:class:`RateSetting`) gives an open loop's rate either in requests per
second (the same as ``arrival_rate_rps``) or as a fraction of the engine's measured capacity,
``0.5x`` (``generation.serving.calibrate``): then ``arrival_rate_capacity_fraction`` holds the
fraction and ``arrival_rate_rps`` is filled with the absolute rate when the run is measured.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_powertrace_ds.errors import InputError

from .. import MachineInfo, Setting, models

HTTP_ENGINES = ("vllm", "sglang", "openai")
LAUNCHED_ENGINES = ("vllm", "sglang")
SERVING_APIS = ("completions", "chat")
ENGINE_WEIGHT_QUANT = ("none", "fp8")
ENGINE_KV_CACHE_QUANT = ("none", "fp8")
DEFAULT_BATCH_SIZE = 256
"""``batch_size`` (the engine's most sequences in flight) when a launched run gives none."""
_FRACTION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*[xX]\s*$")


@dataclass(frozen=True)
class RateSetting(Setting):
    """An arrival rate: a number (requests/s) or ``<fraction>x`` of the measured capacity."""

    def check(self, value: Any) -> tuple[Any, str | None]:
        if value is None:
            return None, None
        if isinstance(value, bool):
            return value, f"{value!r} is not a rate (requests/s, or e.g. 0.5x of capacity)"
        if isinstance(value, (int, float)):
            if not value > 0 or value != value or value == float("inf"):
                return value, f"{value!r} is not a positive finite rate"
            return float(value), None
        m = _FRACTION_RE.match(str(value))
        if m is None or not float(m.group(1)) > 0:
            return value, (f"{value!r} is not a rate: a number of requests/s, or a fraction of "
                           "the engine's measured capacity such as 0.5x")
        return f"{float(m.group(1)):g}x", None


def capacity_fraction(value: Any) -> float | None:
    """The fraction of ``<f>x`` (``None`` for an absolute rate or no value)."""
    if isinstance(value, str):
        m = _FRACTION_RE.match(value)
        if m:
            return float(m.group(1))
    return None


ENGINE_SETTINGS: dict[str, Setting] = {
    "endpoint": Setting("endpoint", "string", column=False,
                        doc="openai: the API root of a running server, e.g. "
                        "http://127.0.0.1:8000/v1 (never published)"),
    "serving_api": Setting("serving_api", "string", default="completions",
                           choices=SERVING_APIS,
                           doc="completions (token-id prompts) or chat (text prompts)"),
    "request_timeout_s": Setting("request_timeout_s", "float32", default=600.0, minimum=1e-3,
                                 doc="Client timeout of one request"),
    "engine_block_size": Setting("engine_block_size", "int32", minimum=1,
                                 doc="KV-cache block (page) size in tokens (null: the "
                                 "engine's default)"),
    "engine_cuda_graphs": Setting("engine_cuda_graphs", "bool", default=True,
                                  doc="Capture CUDA graphs (false: eager)"),
    "engine_prefix_caching": Setting("engine_prefix_caching", "bool", default=False,
                                     doc="Reuse cached prompt prefixes"),
    "engine_chunked_prefill": Setting("engine_chunked_prefill", "bool", default=True,
                                      doc="Split long prefills into chunks"),
    "engine_extra_args": Setting("engine_extra_args", "string", column=False,
                                 doc="More arguments for the engine's command line (recorded "
                                 "in engine_args)"),
    "model_name": Setting("model_name", "string", column=False,
                          doc="vllm/sglang serving a local checkpoint folder: the name the "
                          "published row carries (default: the name in its config.json)"),
    "engine_python": Setting("engine_python", "string", column=False,
                             doc="vllm/sglang: the Python that has the engine installed (e.g. "
                             "a virtual environment of its own); default: this Python when it "
                             "imports the engine, else the interpreter of the vllm command "
                             "(never published)"),
    "engine_start_timeout_s": Setting("engine_start_timeout_s", "float64", default=1800.0,
                                      minimum=1e-3, column=False,
                                      doc="Longest wait for the engine's /health"),
    "calibration_requests": Setting("calibration_requests", "int32", minimum=1,
                                    doc="Requests of the capacity calibration (default "
                                    "4 x its concurrency)"),
    "arrival_rate": RateSetting("arrival_rate", "string", column=False,
                                doc="Arrival rate: requests/s, or a fraction of the measured "
                                "capacity such as 0.5x"),
}
DRAIN_SETTING = Setting("drain_timeout_s", "float32", minimum=0.0,
                        doc="Bounded draining: requests still in flight this long after the "
                        "last arrival are given up (unfinished); null = unbounded")


def resolve_engine(r: dict[str, Any]) -> None:
    """Resolve the engine knobs of ``r`` in place (see the module docstring)."""
    rate = r.pop("arrival_rate", None)
    fraction = capacity_fraction(rate)
    r["arrival_rate_capacity_fraction"] = fraction
    if rate is not None and fraction is None:
        r["arrival_rate_rps"] = float(rate)
    engine = r["serving_engine"]
    # the server's address is local, like a path: neither published nor hashed into run ids
    r["_endpoint"] = r.pop("endpoint", None)
    r["_engine_python"] = r.pop("engine_python", None)
    if engine not in HTTP_ENGINES:
        r.pop("_endpoint", None)
        r.pop("_engine_python", None)
        for key in ENGINE_SETTINGS:
            if key != "model_name":  # the model column, filled from the model
                r.pop(key, None)
        if fraction is None:  # a fraction stays, for check() to refuse it here
            r.pop("arrival_rate_capacity_fraction", None)
        if r.get("drain_timeout_s") is None:
            r.pop("drain_timeout_s", None)
        return
    r["batching"] = "continuous"  # every HTTP engine batches continuously
    if fraction is not None:
        r["arrival_rate_rps"] = None  # the absolute rate is measured with the capacity
    elif r.get("calibration_requests") is None:
        r.pop("calibration_requests", None)
    if engine in LAUNCHED_ENGINES:  # an endpoint given here is refused by engine_problems
        if r.get("batch_size") is None:
            r["batch_size"] = DEFAULT_BATCH_SIZE
        r["weight_quant_backend"] = engine if r["weight_quant"] != "none" else None
        r["kv_cache_backend"] = engine if r["kv_cache_quant"] != "none" else None
    else:
        for key in ("engine_block_size", "engine_cuda_graphs", "engine_prefix_caching",
                    "engine_chunked_prefill", "engine_extra_args", "engine_start_timeout_s",
                    "_engine_python"):
            r[key] = None  # a running server's own settings: read back, never asked for
        r["weight_quant_backend"] = None
        r["kv_cache_backend"] = None


def local_checkpoint(model: str) -> Path | None:
    """The folder ``model`` names when it is a local checkpoint (holds ``config.json``)."""
    text = str(model)
    if not (text.startswith(("/", ".", "~")) or os.sep in text.rstrip(os.sep)):
        return None
    path = Path(text).expanduser()
    return path.resolve() if (path / "config.json").is_file() else None


def checkpoint_name(folder: Path) -> str | None:
    """The name a checkpoint's ``config.json`` gives itself.

    Its ``model_name``, else a ``_name_or_path`` that is not a path; ``None`` when it names none.
    """
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    for key in ("model_name", "_name_or_path"):
        value = config.get(key)
        if isinstance(value, str) and value.strip() and local_checkpoint(value) is None \
                and not value.startswith(("/", ".", "~")) and "\\" not in value:
            return value.strip()
    return None


def checkpoint_vocab(folder: Path) -> int | None:
    """``vocab_size`` of a checkpoint's ``config.json`` (``None`` when absent)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("vocab_size") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def resolve_engine_model(r: dict[str, Any]) -> None:
    """Model columns of an engine run.

    A zoo name (its Hub id is served), a Hub id / name, or (launched engines) a local
    checkpoint folder, published under the name its config gives or the run's ``model_name``,
    never its path.
    """
    folder = local_checkpoint(str(r["model"])) \
        if r["serving_engine"] in LAUNCHED_ENGINES else None
    if folder is not None:
        name = r.pop("model_name", None) or checkpoint_name(folder)
        r["_engine_model"] = str(folder)
        r["_vocab_size"] = checkpoint_vocab(folder)
        if name is None:  # refused by engine_problems, with the fix
            r["_unnamed_checkpoint"] = folder.name
            name = "unnamed-checkpoint"
        # model_source null: neither a zoo architecture nor Hub weights (the schema has no
        # value for a checkpoint of one's own)
        r.update(model=name, model_name=name.rsplit("/", 1)[-1], model_label=name,
                 model_family=family_of(name), model_source=None)
        r["_served_name"] = name
        return
    r.pop("model_name", None)
    try:
        spec: models.ModelSpec | None = models.get_spec(r["model"])
    except InputError:  # not a zoo name: a Hub id or a served name
        spec = None
    if spec is not None and r["serving_engine"] in LAUNCHED_ENGINES:
        r.update(model=spec.name, model_name=spec.name, model_family=spec.family,
                 model_label=spec.hub_id or spec.name, model_source="hub")
        r["_engine_model"] = spec.hub_id or spec.name
        return
    name = str(r["model"])
    r.update(model_name=name.rsplit("/", 1)[-1], model_label=name,
             model_family=family_of(name),
             model_source="hub" if r["serving_engine"] in LAUNCHED_ENGINES else None)
    r["_engine_model"] = name


def family_of(name: str) -> str:
    """The model family a served model's name points at (``other`` when none does)."""
    low = name.lower()
    for family in ("llama", "qwen", "mistral", "deepseek", "phi", "gemma", "gptj", "gpt2"):
        if family in low.replace("-", "").replace("_", "") or family in low:
            return family
    return "other"


def engine_problems(r: dict[str, Any], machine: MachineInfo) -> list[tuple[str, str]]:
    """Impossible engine settings of one resolved run (HTTP engines only)."""
    problems: list[tuple[str, str]] = []
    engine = r["serving_engine"]
    if r.get("_unnamed_checkpoint"):
        problems.append(("model_name", f"the local checkpoint {r['_unnamed_checkpoint']!r} "
                         "names no model in its config.json (model_name or _name_or_path): "
                         "give model_name, the name the published row carries"))
    if engine == "openai":
        url = r.get("_endpoint")
        if not url:
            problems.append(("endpoint", "serving_engine openai needs endpoint (the API root "
                             "of a running server, e.g. http://127.0.0.1:8000/v1)"))
        elif not re.match(r"^https?://[^/\s]+", str(url)):
            problems.append(("endpoint", f"{url!r} is not an http(s) URL"))
    elif r.get("_endpoint"):
        problems.append(("endpoint", f"endpoint is for serving_engine openai; {engine} is "
                         "started by the runner"))
    if r["weight_quant"] not in ENGINE_WEIGHT_QUANT:
        problems.append(("weight_quant", f"{engine} runs take weight_quant none or fp8 (the "
                         f"engine's own FP8 weights), not {r['weight_quant']}"))
    if r["kv_cache_quant"] not in ENGINE_KV_CACHE_QUANT:
        problems.append(("kv_cache_quant", f"{engine} runs take kv_cache_quant none or fp8, not "
                         f"{r['kv_cache_quant']}"))
    if engine == "openai" and (r["weight_quant"] != "none" or r["kv_cache_quant"] != "none"):
        problems.append(("weight_quant", "a running server's quantisation is its own; leave "
                         "weight_quant and kv_cache_quant at none (the row records what the "
                         "server reports)"))
    fraction = r.get("arrival_rate_capacity_fraction")
    if fraction is not None and r["arrival_pattern"] not in ("poisson", "gamma"):
        problems.append(("arrival_rate", "a rate as a fraction of capacity needs "
                         "arrival_pattern poisson or gamma"))
    if machine.source == "nvml" and int(r["tp_size"]) > machine.num_devices:
        problems.append(("tp_size", f"tp_size {r['tp_size']} exceeds the {machine.num_devices} "
                         "GPUs of this machine"))
    if r["batch_size"] is not None and engine in LAUNCHED_ENGINES \
            and int(r["batch_size"]) < 1:
        problems.append(("batch_size", "batch_size must be >= 1"))
    return problems
