"""What a server says it is: ``served_by``, its version and the configuration it reports.

Nothing here is trusted for the platform (the sampler measures the GPUs named for the run);
these are labels, recorded as the server gave them:

* ``served_by``: ``owned_by`` of the model entry in ``GET /v1/models`` and the ``Server``
  response header, e.g. ``owned_by=vllm; server=uvicorn``;
* ``engine_version``: ``GET /version`` (vLLM, SGLang) or the ``version`` of SGLang's
  ``GET /get_server_info``;
* configuration: the fields of ``/get_server_info`` (SGLang's server arguments) that map to
  the engine columns (:data:`SERVER_INFO_FIELDS`).

What a server reports is checked here, when it is read (before the measured window): a count
that is not a whole number in range (``max_running_requests: 1e30``), a switch that is not a
boolean or a label that is not a short string is refused with one line naming the server's
field and value (:class:`ServerSettingError`), instead of failing the run at publish after
the whole window was measured.
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
_COUNT_FIELDS = ("max_running_requests", "tp_size", "page_size")
_LABEL_FIELDS = ("kv_cache_dtype", "quantization")
_SWITCH_FIELDS = ("disable_cuda_graph", "disable_radix_cache")
MAX_COUNT = 2**31 - 1
MAX_LABEL_CHARS = 64


class ServerSettingError(ValueError):
    """A setting the server reports is not a value the row can hold."""


def _count(source: str, key: str, value: Any, minimum: int = 1) -> int:
    """A reported count as an int in ``minimum..MAX_COUNT`` (else :class:`ServerSettingError`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or (isinstance(value, float) and not value.is_integer()) \
            or not minimum <= value <= MAX_COUNT:
        raise ServerSettingError(f"{source} reports {key} {value!r}: not a whole number in "
                                 f"{minimum}..{MAX_COUNT}")
    return int(value)


def _label(source: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) > MAX_LABEL_CHARS:
        raise ServerSettingError(f"{source} reports {key} {str(value)[:80]!r}: not a label of "
                                 f"at most {MAX_LABEL_CHARS} characters")
    return value


def _switch(source: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ServerSettingError(f"{source} reports {key} {str(value)[:80]!r}: not true/false")
    return value


def server_root(base_url: str) -> str:
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
    root = server_root(base_url)
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

    Raises:
        ServerSettingError: a reported value the row cannot hold (module docstring).
    """
    try:
        status, _, data = get_json(server_root(base_url), "/get_server_info", timeout_s)
    except OSError:
        return {}
    if status != 200 or not isinstance(data, dict):
        return vllm_cache_config(base_url, timeout_s)
    source = f"{server_root(base_url)}/get_server_info"
    out: dict[str, Any] = {}
    for key, column in SERVER_INFO_FIELDS.items():
        value = data.get(key)
        if value is None:
            continue
        out[column] = (_count(source, key, value) if key in _COUNT_FIELDS
                       else _label(source, key, value))
    for key in _SWITCH_FIELDS:
        if key in data:
            _switch(source, key, data[key])
    if "disable_cuda_graph" in data:
        out["engine_cuda_graphs"] = not data["disable_cuda_graph"]
    if "disable_radix_cache" in data:
        out["engine_prefix_caching"] = not data["disable_radix_cache"]
    if data.get("chunked_prefill_size") is not None:
        size = _count(source, "chunked_prefill_size", data["chunked_prefill_size"], -1)
        out["engine_chunked_prefill"] = size > 0
    return out


_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def vllm_cache_config(base_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Engine columns from the labels of vLLM's ``vllm:cache_config_info`` metric."""
    try:
        status, text = get_text(server_root(base_url), "/metrics", timeout_s)
    except OSError:
        return {}
    if status != 200:
        return {}
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(_LABEL_RE.findall(line[line.index("{"):line.rindex("}") + 1]))
            out: dict[str, Any] = {}
            if labels.get("block_size", "").isdigit():
                out["engine_block_size"] = _count(f"{server_root(base_url)}/metrics", "block_size",
                                                  int(labels["block_size"]))
            if labels.get("cache_dtype"):
                out["engine_kv_cache_dtype"] = _label(f"{server_root(base_url)}/metrics",
                                                      "cache_dtype", labels["cache_dtype"])
            if labels.get("enable_prefix_caching") in ("True", "False"):
                out["engine_prefix_caching"] = labels["enable_prefix_caching"] == "True"
            return out
    return {}
