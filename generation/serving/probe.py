"""What a server says it is: ``served_by``, its version and the configuration it reports.

Nothing here is trusted for the platform (the sampler measures the GPUs named for the run);
these are labels, recorded as the server gave them:

* ``served_by``: ``owned_by`` of the model entry in ``GET /v1/models`` and the ``Server``
  response header, e.g. ``owned_by=vllm; server=uvicorn``;
* ``engine_version``: ``GET /version`` (vLLM, SGLang) or the ``version`` of SGLang's
  ``GET /get_server_info``;
* configuration: the fields of ``/get_server_info`` (SGLang's server arguments) that map to
  the engine columns (:data:`SERVER_INFO_FIELDS`).
"""

from __future__ import annotations

import re
from typing import Any

from .client import get_json, get_text

SERVER_INFO_FIELDS = {
    "max_running_requests": "batch_size",
    "tp_size": "tp_size",
    "kv_cache_dtype": "engine_kv_cache_dtype",
    "page_size": "engine_block_size",
    "quantization": "engine_quantization",
}
"""SGLang ``/get_server_info`` key -> column."""


def _root(base_url: str) -> str:
    """The server root of an API URL (``.../v1`` dropped)."""
    url = base_url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def models(base_url: str, timeout_s: float = 10.0) -> tuple[list[dict[str, Any]], str | None]:
    """The entries of ``GET /v1/models`` and the ``Server`` header.

    Raises:
        OSError: the server cannot be reached or does not answer 200.
    """
    status, headers, data = get_json(base_url, "/models", timeout_s)
    if status != 200:
        raise OSError(f"GET {base_url}/models answered HTTP {status}")
    entries = data.get("data") if isinstance(data, dict) else None
    return [e for e in entries or [] if isinstance(e, dict)], headers.get("server")


def served_by(base_url: str, model: str, timeout_s: float = 10.0) -> str:
    """``owned_by=<...>; server=<...>`` from ``/v1/models`` (``unknown`` parts when absent).

    Raises:
        OSError: the server cannot be reached.
        LookupError: the server does not list ``model`` (the names it lists are in the message).
    """
    entries, server = models(base_url, timeout_s)
    ids = [str(e.get("id")) for e in entries]
    if model not in ids:
        raise LookupError(f"the server at {base_url} does not serve model {model!r} "
                          f"(it lists: {', '.join(ids) or 'nothing'})")
    owner = next(e.get("owned_by") for e in entries if e.get("id") == model)
    return f"owned_by={owner or 'unknown'}; server={server or 'unknown'}"


def engine_version(base_url: str, timeout_s: float = 5.0) -> str | None:
    """The version the server reports (``None`` when it reports none)."""
    root = _root(base_url)
    for path in ("/version", "/get_server_info"):
        try:
            status, _, data = get_json(root, path, timeout_s)
        except OSError:
            continue
        if status == 200 and isinstance(data, dict) and data.get("version") is not None:
            return str(data["version"])
    return None


def server_config(base_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Engine columns the server reports (empty when it reports nothing).

    SGLang's ``/get_server_info`` (its server arguments), else vLLM's Prometheus gauge
    ``vllm:cache_config_info`` on ``/metrics`` (block size, cache dtype, prefix caching).
    """
    try:
        status, _, data = get_json(_root(base_url), "/get_server_info", timeout_s)
    except OSError:
        return {}
    if status != 200 or not isinstance(data, dict):
        return vllm_cache_config(base_url, timeout_s)
    out: dict[str, Any] = {}
    for key, column in SERVER_INFO_FIELDS.items():
        if data.get(key) is not None:
            out[column] = data[key]
    if "disable_cuda_graph" in data:
        out["engine_cuda_graphs"] = not bool(data["disable_cuda_graph"])
    if "disable_radix_cache" in data:
        out["engine_prefix_caching"] = not bool(data["disable_radix_cache"])
    if "chunked_prefill_size" in data and data["chunked_prefill_size"] is not None:
        out["engine_chunked_prefill"] = int(data["chunked_prefill_size"]) > 0
    return out


_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def vllm_cache_config(base_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Engine columns from the labels of vLLM's ``vllm:cache_config_info`` metric."""
    try:
        status, text = get_text(_root(base_url), "/metrics", timeout_s)
    except OSError:
        return {}
    if status != 200:
        return {}
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(_LABEL_RE.findall(line[line.index("{"):line.rindex("}") + 1]))
            out: dict[str, Any] = {}
            if labels.get("block_size", "").isdigit():
                out["engine_block_size"] = int(labels["block_size"])
            if labels.get("cache_dtype"):
                out["engine_kv_cache_dtype"] = labels["cache_dtype"]
            if labels.get("enable_prefix_caching") in ("True", "False"):
                out["engine_prefix_caching"] = labels["enable_prefix_caching"] == "True"
            return out
    return {}
