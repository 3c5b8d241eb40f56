"""ML.ENERGY leaderboard v2 run summaries (Apache-2.0, "The ML.ENERGY Initiative").

Layout of one task folder (``data/llm_text_generation/<task>/`` of ml-energy/benchmark)::

    <task>/models.json                                   {model id: {"nickname", "params" (B)}}
    <task>/<GPU name>/<org>/<model>/bs<B>+tp<T>+pp<P>.json

Each run file holds steady-state summaries of one vLLM configuration: ``Model``, ``GPU``,
``TP``, ``PP``, ``Energy/req (J)``, ``Avg TPOT (s)``, ``Token tput (tok/s)``,
``Avg Output Tokens``, ``Avg BS (reqs)``, ``Max BS (reqs)``. There is no power series, so each
run becomes one ``inference_runs`` row with the flag ``summary_only`` and no trace rows:

- ``num_gpus`` = TP × PP (``tp_size``, ``pp_size`` kept); ``batch_size`` = B of the file name
  (vLLM's maximum batch); ``task`` = the folder's name; ``platform`` from the ``GPU`` name
  (``schema.platform_from_name``); ``serving_engine`` ``vllm``, ``batching`` ``continuous``.
- ``energy_per_token_j`` = Energy/req ÷ Avg Output Tokens (J per generated token, the ML.ENERGY
  convention); ``mean_power_w`` = energy_per_token_j × Token tput (W, all GPUs of the run);
  ``tokens_per_s`` = Token tput. Every other metric is null with the reason in
  ``metric_notes``.
- ``tpot_mean_s`` = Avg TPOT (s); ``energy_per_request_j`` = Energy/req (J);
  ``batch_size_mean`` = Avg BS (reqs); ``batch_size_observed_max`` = Max BS (reqs);
  ``output_tokens_mean`` = Avg Output Tokens (all but Energy/req optional in a file).
- ``source_metadata``: the run file verbatim (JSON) and its model's ``models.json`` entry
  (``nickname``, ``params``; its ``url`` is dropped: a link, and derivable from the model id).
  :data:`FIELD_MAP` says where each field goes; a test holds every field of the files to it.
- ``model_params`` = ``params`` × 10⁹ from ``models.json``; ``model_params_active`` for
  mixture-of-experts models from :data:`llm_powertrace_ds.specs.MODEL_FACTS` (``models.json``
  gives total parameters only); ``model_facts_source`` says which.

Every file is read and checked before anything is written; a bad value raises a one-line
:class:`InputError` naming the file, the field and the value.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from .. import bounded, numbers, privacy, schema, specs
from ..errors import InputError
from ..run import Run, coerce_meta
from .common import check_run_id, family_from_name

FORMAT = "mlenergy-v2"
SOURCE_CREDIT = ("ML.ENERGY leaderboard v2 run summaries (ml-energy/benchmark, Apache-2.0), "
                 "credit: The ML.ENERGY Initiative")
_FILE_RE = re.compile(r"^bs(\d+)\+tp(\d+)\+pp(\d+)\.json$")
REQUIRED = ("Model", "GPU", "TP", "PP", "Energy/req (J)", "Token tput (tok/s)",
            "Avg Output Tokens")
SUMMARY_NOTE = "summary_only: a published summary without a power trace"
MAX_PARAMS_B = 1e5
"""Largest model size accepted from models.json, in billions (100 T parameters)."""
MAX_VALUE = 1e12
"""Largest value of a summary number (J per request, tokens/s, tokens, batch size, seconds):
anything larger is a unit mistake or a hostile file, refused before it becomes inf."""
OPTIONAL_NUMBERS: dict[str, str] = {
    "Avg TPOT (s)": "tpot_mean_s",
    "Avg BS (reqs)": "batch_size_mean",
    "Max BS (reqs)": "batch_size_observed_max",
}
FIELD_MAP: dict[str, str] = {
    "Model": "model_label, model_name, model_family (and model_params via models.json)",
    "GPU": "gpu_name, platform",
    "TP": "tp_size (checked against the file name), num_gpus = TP x PP",
    "PP": "pp_size (checked against the file name), num_gpus = TP x PP",
    "Energy/req (J)": "energy_per_request_j; energy_per_token_j = Energy/req / Avg Output Tokens",
    "Token tput (tok/s)": "tokens_per_s; mean_power_w = energy_per_token_j x tokens_per_s",
    "Avg Output Tokens": "output_tokens_mean",
    **OPTIONAL_NUMBERS,
    "models.json nickname": "source_metadata",
    "models.json params": "model_params (x 1e9), source_metadata",
    "models.json url": "dropped: a link to the model's Hub page, derivable from the model id",
}
"""Where every field of an ML.ENERGY v2 run summary goes (docs/importers.md renders it)."""


def _positive(data: dict[str, Any], key: str, path: Path) -> float:
    value = data.get(key)
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        x = float("nan")
    if isinstance(value, bool) or not math.isfinite(x) or x <= 0:
        raise InputError(f"value {value!r} is not a positive number", file=path, field=key)
    if x > MAX_VALUE:
        raise InputError(f"value {value!r} is beyond {MAX_VALUE:g}", file=path, field=key)
    return x


def _read_json(path: Path) -> Any:
    return bounded.read_json(path, max_bytes=1 << 20)  # regular file, size, UTF-8, depth


def _optional(data: dict[str, Any], key: str, path: Path) -> float | None:
    return _positive(data, key, path) if data.get(key) is not None else None


def load_model_info(task_dir: Path) -> dict[str, dict[str, Any]]:
    """``{model id: {"nickname", "params"}}`` of ``<task>/models.json`` (its ``url`` dropped)."""
    data = _read_json(task_dir / "models.json")
    out: dict[str, dict[str, Any]] = {}
    if isinstance(data, dict):
        for model, info in data.items():
            if isinstance(info, dict):
                out[model] = {k: v for k, v in info.items() if k in ("nickname", "params")}
    return out


def load_models(task_dir: Path) -> dict[str, float]:
    """``{model id: total parameters}`` from ``<task>/models.json``."""
    path = task_dir / "models.json"
    if not path.is_file():
        if (task_dir / "llm").is_dir() or task_dir.name == "llm" or next(
                task_dir.rglob("results.json"), None) is not None:
            raise InputError("no models.json: this is an ML.ENERGY benchmark v3 tree "
                             "(results.json files); import it with `import mlenergy-v3`",
                             file=path)
        raise InputError("no models.json in the task folder (is this an ML.ENERGY v2 task "
                         "folder, e.g. data/llm_text_generation/chat?)", file=path)
    data = _read_json(path)
    if not isinstance(data, dict):
        raise InputError("expected an object {model id: {params, ...}}", file=path)
    out = {}
    for model, info in data.items():
        if not isinstance(info, dict) or "params" not in info:
            raise InputError(f"model {model!r} has no params", file=path, field="params")
        billions = _positive(info, "params", path)
        if billions > MAX_PARAMS_B:
            raise InputError(f"model {model!r}: params {info['params']!r} billion is beyond "
                             f"{MAX_PARAMS_B:g} billion", file=path, field="params")
        out[model] = billions * 1e9
    return out


def _run_id(task: str, platform: str, model_dir: str, b: int, t: int, p: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model_dir).strip("-.")
    return f"mlenergy-v2.{task}.{platform}.{slug}.bs{b}-tp{t}-pp{p}"


def summary_runs(task_dir: str | Path) -> list[tuple[Run, dict[str, Any]]]:
    """Read every run summary of a task folder as ``(Run without devices, metrics)`` pairs.

    Raises:
        InputError: a missing ``models.json``, a malformed file name or value, a model missing
            from ``models.json``; nothing is returned then.
    """
    task_dir = Path(task_dir)
    if not task_dir.is_dir():
        raise InputError("not a folder (expected an ML.ENERGY v2 task folder)", file=task_dir)
    params = load_models(task_dir)
    model_info = load_model_info(task_dir)
    task = task_dir.name
    files = sorted(p for p in task_dir.rglob("*.json") if p.name != "models.json")
    if not files:
        raise InputError("no run summaries (<GPU>/<org>/<model>/bs<B>+tp<T>+pp<P>.json)",
                         file=task_dir)
    out = []
    for path in files:
        m = _FILE_RE.match(path.name)
        if not m:
            raise InputError(f"file name {path.name!r} is not bs<B>+tp<T>+pp<P>.json", file=path,
                             field="file name")
        b, t, p = (int(g) for g in m.groups())
        data = _read_json(path)
        if not isinstance(data, dict):
            raise InputError("expected a JSON object", file=path)
        for key in REQUIRED:
            if key not in data:
                raise InputError("missing", file=path, field=key)
        for key, expected in (("TP", t), ("PP", p)):
            if data[key] != expected:
                raise InputError(f"value {data[key]!r} differs from the file name's {expected}",
                                 file=path, field=key)
        for key in ("Model", "GPU"):  # names, never a number or null read as one
            if not isinstance(data[key], str) or not data[key].strip():
                raise InputError(f"value {data[key]!r} is not a name", file=path, field=key)
        model = data["Model"]
        if model not in params:
            raise InputError(f"value {model!r} is not in models.json", file=path, field="Model")
        info = schema.platform_from_name(data["GPU"])
        energy_req = _positive(data, "Energy/req (J)", path)
        out_tokens = _positive(data, "Avg Output Tokens", path)
        tput = _positive(data, "Token tput (tok/s)", path)
        per_token = energy_req / out_tokens
        extras = {col: _optional(data, key, path) for key, col in OPTIONAL_NUMBERS.items()}
        if extras["batch_size_observed_max"] is not None:
            whole = extras["batch_size_observed_max"]
            if whole != round(whole) or whole > 2**31 - 1:
                raise InputError(f"value {data['Max BS (reqs)']!r} is not a whole number of "
                                 "requests", file=path, field="Max BS (reqs)")
            extras["batch_size_observed_max"] = int(whole)
        verbatim = {"run": data, "models.json": model_info.get(model, {})}
        try:
            source_text = json.dumps(verbatim, sort_keys=True, ensure_ascii=False,
                                     allow_nan=False, separators=(",", ":"))
        except ValueError:
            raise InputError("holds NaN or infinity", file=path) from None
        model_dir = path.parent.name
        meta: dict[str, Any] = {
            "run_id": check_run_id(_run_id(task, info.slug, model_dir, b, t, p), file=path),
            "sweep": f"import:{FORMAT}", "sampler": f"import:{FORMAT}", "workload": "inference",
            "platform": info.slug, "num_gpus": t * p, "tp_size": t, "pp_size": p,
            "batch_size": b, "task": task, "serving_engine": "vllm", "batching": "continuous",
            "model_name": model.split("/")[-1], "model_label": model, "model_source": "import",
            "model_family": family_from_name(model), "model_params": int(round(params[model])),
            "gpu_name": data["GPU"], "tokens_per_s": tput,
            "energy_per_request_j": energy_req, "output_tokens_mean": out_tokens,
            **{k: v for k, v in extras.items() if v is not None},
            "source_metadata": source_text,
            "schema_version": schema.SCHEMA_VERSION,
        }
        sources = ["model_params: ML.ENERGY models.json (params, billions)"]
        facts = specs.model_facts(model)
        if facts is not None and facts.active_params is not None:
            meta["model_params_active"] = facts.active_params
            sources.append(f"model_params_active: {facts.source}")
        meta["model_facts_source"] = "; ".join(sources)
        privacy.check_meta_text(meta, file=path)  # the text gate every importer passes
        gpu_name = meta.pop("gpu_name")
        run = Run(meta=coerce_meta(meta, "inference", file=path), devices=[])
        run.meta["gpu_name"] = gpu_name
        run.add_flags("summary_only", "precision_unknown", *info.flags)
        metrics = {"energy_per_token_j": per_token, "mean_power_w": per_token * tput,
                   "metric_notes": [SUMMARY_NOTE]}
        # the number gate, per file, before anything is written (derived values included)
        numbers.check_row("inference_runs", {**run.meta, **metrics}, where=str(path))
        out.append((run, metrics))
    seen: dict[str, Path] = {}
    for (run, _), path in zip(out, files, strict=True):
        if run.run_id in seen:
            raise InputError(f"run id {run.run_id!r} also made from {seen[run.run_id]}",
                             file=path, field="run_id")
        seen[run.run_id] = path
    return out


def publish_summaries(root: str | Path, runs: list[tuple[Run, dict[str, Any]]]) -> list[Path]:
    """Write each summary run's ``inference_runs`` row (temp name, then rename); no traces.

    Returns:
        The files written.
    """
    from .. import layout
    from ..shards import runs_table
    from ..shards.segments import write_runs_rows

    root = Path(root)
    layout.check_readme_is_ours(root)
    written = []
    for run, metrics in runs:
        path = layout.runs_path(root, "inference", run.platform, run.run_id)
        # an earlier import's row of the run may sit in a runs-table segment: taken out
        write_runs_rows(root, {path: runs_table(run, metrics)})
        written.append(path)
    return written
