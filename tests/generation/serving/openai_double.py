"""A local OpenAI-compatible streaming server: the test double of vLLM, SGLang and the like.

Standard library only (``http.server``). It serves ``/v1/completions`` and
``/v1/chat/completions`` (streamed as server-sent events, or as one JSON body), ``/v1/models``,
``/health`` and ``/version``. Output is exactly ``max_tokens`` tokens (the double honours
``ignore_eos``), one chunk per token, ``token_delay_s`` apart, after a prefill of
``prefill_delay_s``; at most ``max_concurrency`` requests are served at once (the others wait
for a slot), so its saturation throughput is known:
``max_concurrency / (prefill_delay_s + (max_tokens - 1) * token_delay_s)`` requests per second.

Streaming like vLLM: with ``stream_options.continuous_usage_stats`` every chunk carries the
running ``usage.completion_tokens`` (``continuous_usage=False``: a server that never does);
``tokens_per_chunk`` merges that many tokens into one chunk (a server whose engine ran ahead
of the consumer); ``empty_first_text`` makes the first token's text empty (a token that
decodes to nothing yet).

``vocab_size`` makes the double a model with that vocabulary: a token-id prompt with an id at or
above it is answered HTTP 400 (``Token id N is out of vocabulary``, as vLLM does), and
``POST /tokenize`` answers ids below it.

Faults are planned per request, by the order in which completions arrive (0-based):
``faults={3: "error"}`` answers HTTP 500; ``"drop:2"`` cuts the connection after two tokens;
``"hang"`` sends nothing until the client gives up; ``"endless"`` sends one SSE line that never
ends (:data:`ENDLESS_FAST_BYTES` at once, then a byte every 50 ms, no newline, until the
client goes away); ``"trickle"`` sends one byte of such a line every 50 ms. ``ready_after_s`` keeps ``/health`` at 503
for that long after start (an engine still loading).

Run as a script it is a fake engine executable (see ``fake_engine.py``); in tests use
:func:`start_double` (a context manager).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ENDLESS_FAST_BYTES = 32 << 20
"""What the ``endless`` fault sends at once (then it trickles): a bounded test of a bound."""


@dataclass
class DoubleConfig:
    """How the double behaves (see the module docstring)."""

    model: str = "double-model"
    token_delay_s: float = 0.0
    prefill_delay_s: float = 0.0
    max_concurrency: int = 64
    faults: dict[int, str] = field(default_factory=dict)
    ready_after_s: float = 0.0
    version: str = "0.0.0-double"
    owned_by: str = "openai-double"
    server_info: dict[str, Any] = field(default_factory=dict)
    metrics: str = ""
    continuous_usage: bool = True
    vocab_size: int | None = None
    tokens_per_chunk: int = 1
    empty_first_text: bool = False


class DoubleServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], config: DoubleConfig) -> None:
        super().__init__(address, _Handler)
        self.config = config
        self.slots = threading.Semaphore(config.max_concurrency)
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.count = 0
        self.bodies: list[dict[str, Any]] = []
        self.max_active = 0
        self.active = 0
        self.on_healthy: Callable[[], None] | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def next_index(self, body: dict[str, Any]) -> int:
        with self.lock:
            i = self.count
            self.count += 1
            self.bodies.append(body)
            return i


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: DoubleServer
    server_version = "openai-double/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def version_string(self) -> str:
        return self.server_version

    def _json(self, status: int, data: Any) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        cfg = self.server.config
        path = self.path.split("?")[0].rstrip("/")
        if path == "/health":
            ready = time.monotonic() - self.server.started >= cfg.ready_after_s
            if ready and self.server.on_healthy is not None:
                hook, self.server.on_healthy = self.server.on_healthy, None
                hook()
            self._json(200 if ready else 503, {"ready": ready})
        elif path == "/version":
            self._json(200, {"version": cfg.version})
        elif path == "/get_server_info" and cfg.server_info:
            self._json(200, {"version": cfg.version, **cfg.server_info})
        elif path == "/metrics" and cfg.metrics:
            body = cfg.metrics.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [
                {"id": cfg.model, "object": "model", "owned_by": cfg.owned_by}]})
        else:
            self._json(404, {"error": {"message": f"no route {path}"}})

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON"}})
            return
        vocab_size = self.server.config.vocab_size
        if path == "/tokenize" and vocab_size is not None:
            words = str(body.get("prompt") or "").split()
            vocab = int(vocab_size)
            self._json(200, {"tokens": [sum(map(ord, w)) % vocab for w in words],
                             "count": len(words)})
            return
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(404, {"error": {"message": f"no route {path}"}})
            return
        cfg = self.server.config
        if body.get("model") != cfg.model:
            self._json(404, {"error": {"message": f"model {body.get('model')!r} not served"}})
            return
        vocab = cfg.vocab_size
        bad = [t for t in body.get("prompt") or [] if isinstance(t, int) and vocab is not None
               and not 0 <= t < vocab] if isinstance(body.get("prompt"), list) else []
        if bad:
            self._json(400, {"error": {"message": f"Token id {bad[0]} is out of vocabulary"}})
            return
        index = self.server.next_index(body)
        fault = cfg.faults.get(index, "")
        if fault == "error":
            self._json(500, {"error": {"message": "planned failure"}})
            return
        chat = path.endswith("chat/completions")
        prompt = body.get("prompt") if not chat else body.get("messages", [{}])[-1].get("content")
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        n = int(body.get("max_tokens") or 16)
        with self.server.slots:
            with self.server.lock:
                self.server.active += 1
                self.server.max_active = max(self.server.max_active, self.server.active)
            try:
                self._generate(body, index, fault, chat, prompt_tokens, n)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client went away (cancelled, timed out)
            finally:
                with self.server.lock:
                    self.server.active -= 1

    def _generate(self, body: dict[str, Any], index: int, fault: str, chat: bool,
                  prompt_tokens: int, n: int) -> None:
        cfg = self.server.config
        rid = f"cmpl-{index}"
        obj = "chat.completion.chunk" if chat else "text_completion"
        if fault == "hang":
            time.sleep(3600)
        if fault in ("endless", "trickle"):
            self._endless_line(fault == "trickle")
            return
        time.sleep(cfg.prefill_delay_s)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                 "total_tokens": prompt_tokens + n}
        if not body.get("stream"):
            time.sleep(cfg.token_delay_s * n)
            text = " tok" * n
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}}
                      if chat else {"index": 0, "text": text})
            self._json(200, {"id": rid, "object": obj.replace(".chunk", ""),
                             "choices": [choice], "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        drop = int(fault.split(":")[1]) if fault.startswith("drop:") else None
        running = bool(cfg.continuous_usage
                       and (body.get("stream_options") or {}).get("continuous_usage_stats"))
        step = max(1, int(cfg.tokens_per_chunk))
        for k in range(0, n, step):
            if drop is not None and k >= drop:
                self._cut()
                return
            if k:
                time.sleep(cfg.token_delay_s * step)
            carried = min(step, n - k)
            text = "" if (k == 0 and cfg.empty_first_text) else " tok" * carried
            choice = ({"index": 0, "delta": {"content": text}} if chat
                      else {"index": 0, "text": text})
            event: dict[str, Any] = {"id": rid, "object": obj, "model": cfg.model,
                                     "choices": [choice]}
            if running:
                event["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": k + carried,
                                  "total_tokens": prompt_tokens + k + carried}
            self._event(event)
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event({"id": rid, "object": obj, "model": cfg.model, "choices": [],
                         "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _endless_line(self, trickle: bool) -> None:
        """An SSE line that never ends (see the module docstring); stops when the client goes."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b"data: ")
        block = b"x" * (1 << 16)
        sent = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            fast = not trickle and sent < ENDLESS_FAST_BYTES
            self.wfile.write(block if fast else b"x")
            sent += len(block) if fast else 1
            self.wfile.flush()
            if not fast:
                time.sleep(0.05)
        self.close_connection = True

    def _event(self, data: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
        self.wfile.flush()

    def _cut(self) -> None:
        """Drop the connection mid-stream (a reset, as a crashed server would)."""
        self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True


def sweep_text(url: str, name: str, output_len: int = 4, extra: str = "") -> str:
    """A small cpu_proxy sweep serving four closed-loop requests from the double at ``url``.

    ``extra`` is appended to the ``base`` block as it is (indented YAML lines).
    """
    text = (f"name: {name}\nworkload: inference\n"
            "sampler: {source: cpu_proxy, period_ms: 50}\n"
            "idle_before_s: 0.1\nidle_after_s: 0.1\n"
            "base:\n  serving_engine: openai\n"
            f"  endpoint: {url}\n  model: double-model\n  concurrency: 2\n"
            "  arrival_pattern: closed\n  num_requests: 4\n  prompt_len: 8\n"
            f"  output_len: {output_len}\n")
    return text + (extra + "\n" if extra else "")


@contextlib.contextmanager
def start_double(config: DoubleConfig | None = None, port: int = 0) -> Iterator[DoubleServer]:
    """A running double on 127.0.0.1 (``port`` 0: a free one); stopped on exit."""
    server = DoubleServer(("127.0.0.1", port), config or DoubleConfig())
    thread = threading.Thread(target=server.serve_forever, name="openai-double", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def main(argv: list[str] | None = None) -> int:
    """Serve until killed (used by the fake engine executables)."""
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="double-model")
    p.add_argument("--token-delay-s", type=float, default=0.0)
    p.add_argument("--max-concurrency", type=int, default=64)
    p.add_argument("--ready-after-s", type=float, default=0.0)
    p.add_argument("--version", default="0.0.0-double")
    p.add_argument("--owned-by", default="openai-double")
    args = p.parse_args(argv)
    server = DoubleServer(("127.0.0.1", args.port), DoubleConfig(
        model=args.model, token_delay_s=args.token_delay_s,
        max_concurrency=args.max_concurrency, ready_after_s=args.ready_after_s,
        version=args.version, owned_by=args.owned_by))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
