"""A fake ``vllm`` / ``sglang`` server module that serves the OpenAI double.

It parses the engine's server arguments, records them, forks a "worker" process (as
tensor-parallel engines do) and serves the double.

:func:`install_fake_engine` writes fake packages (``vllm.entrypoints.openai.api_server``,
``sglang.launch_server``) and a ``python`` that imports them first: the launcher runs
``<that python> -m <server module>`` when a run gives it as ``engine_python``. Each start appends one JSON line to ``$FAKE_ENGINE_LOG``: the engine name, its argv, its pid,
the worker's pid, the ``CUDA_VISIBLE_DEVICES`` it got and when its ``/health`` turned ready
(``time.monotonic_ns()``, the clock of the run's events). ``$FAKE_ENGINE_READY_AFTER_S``
delays ``/health`` (loading weights, capturing graphs); ``$FAKE_ENGINE_TOKEN_DELAY_S`` is the
per-token delay; ``$FAKE_ENGINE_VOCAB`` gives the served model that vocabulary (out-of-vocabulary
prompt ids are answered HTTP 400).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _flag(argv: list[str], name: str, default: str | None = None) -> str | None:
    for i, tok in enumerate(argv):
        if tok == name and i + 1 < len(argv):
            return argv[i + 1]
        if tok.startswith(name + "="):
            return tok.split("=", 1)[1]
    return default


def main(engine: str, argv: list[str]) -> int:
    sys.path.insert(0, str(HERE.parent))
    from serving.openai_double import DoubleConfig, DoubleServer

    args = argv
    model = _flag(args, "--model" if engine == "vllm" else "--model-path") or "?"
    name = _flag(args, "--served-model-name", model) or model
    port = int(_flag(args, "--port") or 8000)
    ready_after = float(os.environ.get("FAKE_ENGINE_READY_AFTER_S", "0"))
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    server = DoubleServer(("127.0.0.1", port), DoubleConfig(
        model=name, token_delay_s=float(os.environ.get("FAKE_ENGINE_TOKEN_DELAY_S", "0")),
        ready_after_s=ready_after, version=f"{engine}-fake-1.0", owned_by=engine,
        vocab_size=int(os.environ["FAKE_ENGINE_VOCAB"]) if os.environ.get("FAKE_ENGINE_VOCAB")
        else None))
    record = {"engine": engine, "argv": argv, "pid": os.getpid(), "worker_pid": worker.pid,
              "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "ready_ns": time.monotonic_ns() + int(ready_after * 1e9)}
    log = os.environ.get("FAKE_ENGINE_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    def on_healthy() -> None:  # the first /health answered 200
        if log:
            with open(log + ".health", "w", encoding="utf-8") as f:
                f.write(repr(time.time()))

    server.on_healthy = on_healthy
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        worker.wait()
    finally:
        server.shutdown()
    return 0


MODULE_FILES = {"vllm": ("vllm/__init__.py", "vllm/entrypoints/__init__.py",
                         "vllm/entrypoints/openai/__init__.py",
                         "vllm/entrypoints/openai/api_server.py"),
                "sglang": ("sglang/__init__.py", "sglang/launch_server.py")}


def install_fake_engine(folder: Path) -> Path:
    """Write the fake engine packages and a ``folder/python`` that finds them; its path."""
    pkgs = folder / "pkgs"
    for engine, files in MODULE_FILES.items():
        for rel in files:
            path = pkgs / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            body = ""
            if not rel.endswith("__init__.py"):
                body = ("import sys\n"
                        f"sys.path.insert(0, {str(HERE.parent)!r})\n"
                        "from serving.fake_engine import main\n"
                        "if __name__ == '__main__':\n"
                        f"    sys.exit(main({engine!r}, sys.argv[1:]))\n")
            path.write_text(body, encoding="utf-8")
    python = folder / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{pkgs}${{PYTHONPATH:+:$PYTHONPATH}}" '
                      f'exec "{sys.executable}" "$@"\n', encoding="utf-8")
    python.chmod(python.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return python
