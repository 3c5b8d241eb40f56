"""One streamed completion from an OpenAI-compatible server (``http.client``, SSE).

A request is sent with ``stream: true`` and read as server-sent events (``data: {...}`` lines,
ended by ``data: [DONE]``). Every chunk that carries output is stamped on
``time.monotonic_ns()`` (the sampler's clock) as it is read.

Tokens, not chunks: a server merges several tokens into one chunk whenever the engine runs
ahead of the HTTP consumer (vLLM does at high concurrency), and sends chunks whose text is
empty (a token that decodes to nothing yet). So the request asks for
``stream_options: {include_usage: true, continuous_usage_stats: true}``: every chunk then
carries the running ``usage.completion_tokens``, and the tokens a chunk carries are the
increase over the chunk before. With those counts

* a chunk carries output when its count increased (text or not); ``chunk_tokens`` lists the
  count of each such chunk, and the first token is the first chunk that carries one;
* the output token count is the server's final ``usage.completion_tokens``.

A server that reports no per-chunk count (usage only at the end, or none) leaves
``chunk_tokens`` ``None``: every chunk with text is kept as a chunk, the first token is the
first chunk with text, and nothing per token is inferred from chunks (the run says so, see
:mod:`generation.serving.workload`). The output token count is then the final usage, else the
number of text chunks. Output lengths are forced the way vLLM and SGLang accept it
(``ignore_eos`` and ``min_tokens`` equal to ``max_tokens``); a server that ignores those fields
returns fewer tokens, which the serving loop records as an error, never as a success.

Bounded: one SSE line is at most :data:`MAX_LINE_BYTES` (a longer one ends the request as
failed, whatever the server keeps sending), and the client timeout (``timeout_s``) is a
deadline for the whole request kept by a timer that shuts the socket, so a server trickling
bytes without ever ending a line cannot hold a request past it.

Failures never raise: a refused connection, an HTTP error status, a stream cut before
``[DONE]``, a malformed event, an over-long line, the client timeout or
:meth:`CompletionStream.cancel` from another thread end the request with ``error`` (or
``cancelled``) set in its :class:`StreamResult`.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

APIS = ("completions", "chat")
MAX_LINE_BYTES = 1 << 20
"""The longest SSE line read (1 MiB; a chunk of one token is a few hundred bytes)."""
MAX_BODY_BYTES = 16 << 20
"""The largest body of a ``GET`` read (``/v1/models``, ``/metrics``, ``/get_server_info``)."""
"""``completions``: ``/v1/completions`` with token-id prompts; ``chat``: ``/v1/chat/completions``."""

_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
          "juliet", "kilo", "lima", "mike", "november", "oscar", "papa")


def prompt_text(ids: list[int]) -> str:
    """A deterministic text prompt of ``len(ids)`` words (chat APIs take text, not token ids)."""
    return " ".join(_WORDS[i % len(_WORDS)] for i in ids)


@dataclass
class StreamResult:
    """What one streamed request produced (monotonic ns).

    Attributes:
        start_ns: when the request was sent.
        chunk_ns: when each chunk carrying output was read (see the module docstring).
        chunk_tokens: the tokens each of those chunks carried (``None``: the server gave no
            per-chunk count).
        finish_ns: when the stream ended (``[DONE]``, an error or a cancel).
        output_tokens: ``usage.completion_tokens``, else the number of text chunks (of a
            broken stream: the tokens, else chunks, read before it broke).
        prompt_tokens: ``usage.prompt_tokens`` when the server reports it.
        error: what went wrong (``None`` on success).
        cancelled: the request was cancelled (:meth:`CompletionStream.cancel`).
    """

    start_ns: int
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] | None = None
    finish_ns: int | None = None
    output_tokens: int = 0
    prompt_tokens: int | None = None
    error: str | None = None
    cancelled: bool = False

    @property
    def first_token_ns(self) -> int | None:
        return self.chunk_ns[0] if self.chunk_ns else None


def split_url(url: str) -> tuple[str, str, int, str]:
    """``(scheme, host, port, path prefix)`` of a base URL such as ``http://127.0.0.1:8000/v1``.

    Raises:
        ValueError: not an ``http``/``https`` URL with a host.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL with a host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


def connection(url: str, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
    """An (unopened) connection to the server of ``url`` and the URL's path prefix."""
    scheme, host, port, prefix = split_url(url)
    cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    return cls(host, port, timeout=timeout_s), prefix


def _get(url: str, path: str, timeout_s: float) -> tuple[int, dict[str, str], bytes]:
    """``GET`` ``path`` under ``url``: status, headers and a body (bounded).

    The body is read up to :data:`MAX_BODY_BYTES`; a longer one is an ``OSError`` naming the
    limit.
    """
    conn, prefix = connection(url, timeout_s)
    try:
        conn.request("GET", prefix + path)
        resp = conn.getresponse()
        body = resp.read(MAX_BODY_BYTES + 1)
        headers = {k.lower(): v for k, v in resp.getheaders()}
    except http.client.HTTPException as exc:
        raise OSError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()
    if len(body) > MAX_BODY_BYTES:
        raise OSError(f"GET {path} answered more than {MAX_BODY_BYTES} bytes")
    return resp.status, headers, body


def get_json(url: str, path: str, timeout_s: float = 5.0) -> tuple[int, dict[str, str], Any]:
    """``GET`` ``path`` under ``url``: ``(status, headers, parsed JSON or None)``.

    Raises:
        OSError: the server cannot be reached (``http.client.HTTPException`` included), or
            its body is longer than :data:`MAX_BODY_BYTES`.
    """
    status, headers, body = _get(url, path, timeout_s)
    try:
        data = json.loads(body) if body else None
    except (ValueError, RecursionError):
        data = None
    return status, headers, data


def post_json(url: str, path: str, body: dict[str, Any],
              timeout_s: float = 10.0) -> tuple[int, Any]:
    """``POST`` JSON ``body`` to ``path`` under ``url``: ``(status, parsed JSON or None)``.

    The answer is read up to :data:`MAX_LINE_BYTES` (a longer one is ``None``).

    Raises:
        OSError: the server cannot be reached (``http.client.HTTPException`` included).
    """
    conn, prefix = connection(url, timeout_s)
    try:
        conn.request("POST", prefix + path, body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read(MAX_LINE_BYTES + 1)
    except http.client.HTTPException as exc:
        raise OSError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()
    try:
        data = json.loads(raw) if raw and len(raw) <= MAX_LINE_BYTES else None
    except (ValueError, RecursionError):
        data = None
    return resp.status, data


def get_text(url: str, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """``GET`` ``path`` under ``url``: ``(status, body as text)``.

    Raises:
        OSError: the server cannot be reached (``http.client.HTTPException`` included), or
            its body is longer than :data:`MAX_BODY_BYTES`.
    """
    status, _, body = _get(url, path, timeout_s)
    return status, body.decode("utf-8", "replace")


class CompletionStream:
    """One streamed request; :meth:`run` in a worker thread, :meth:`cancel` from any thread.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name.
        api: ``completions`` or ``chat``.
        timeout_s: the client timeout of the whole request (``None``: none).
    """

    def __init__(self, base_url: str, model: str, *, api: str = "completions",
                 timeout_s: float | None = None) -> None:
        if api not in APIS:
            raise ValueError(f"api {api!r} is not one of {', '.join(APIS)}")
        self.base_url = base_url
        self.model = model
        self.api = api
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._cancelled = False
        self._timed_out = False

    def body(self, prompt: list[int], max_tokens: int) -> dict[str, Any]:
        """The JSON request body (output length forced, greedy, streamed with usage)."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": int(max_tokens),
                                "min_tokens": int(max_tokens), "ignore_eos": True,
                                "temperature": 0.0, "stream": True,
                                "stream_options": {"include_usage": True,
                                                   "continuous_usage_stats": True}}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt_text(prompt)}]
        else:
            body["prompt"] = list(prompt)
        return body

    def cancel(self) -> None:
        """Stop the request: its socket is shut down, :meth:`run` returns ``cancelled``."""
        with self._lock:
            self._cancelled = True
        self._shut()

    def _expire(self) -> None:
        """The client timeout: shut the socket (the read in :meth:`run` ends at once)."""
        with self._lock:
            self._timed_out = True
        self._shut()

    def _shut(self) -> None:
        # the socket itself, kept at connect: http.client drops ``conn.sock`` once a response
        # that ends with the connection is returned, while that response still reads from it
        with self._lock:
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def run(self, prompt: list[int], max_tokens: int) -> StreamResult:
        """Send the request and read its stream to the end (never raises)."""
        res = StreamResult(time.monotonic_ns())
        path = "/chat/completions" if self.api == "chat" else "/completions"
        self._timed_out = False
        timer = None
        if self.timeout_s is not None:
            timer = threading.Timer(self.timeout_s, self._expire)
            timer.daemon = True
            timer.start()
        conn = None
        complete = False
        try:
            conn, prefix = connection(self.base_url, self.timeout_s or 3600.0)
            conn.connect()
            with self._lock:  # cancel() and _expire() see the socket, or run() sees them
                self._conn = conn
                self._sock = conn.sock
                stop = self._cancelled or self._timed_out
            if stop:
                self._shut()
            payload = json.dumps(self.body(prompt, max_tokens)).encode()
            conn.request("POST", prefix + path, body=payload,
                         headers={"Content-Type": "application/json",
                                  "Accept": "text/event-stream"})
            resp = conn.getresponse()
            if resp.status != 200:
                text = resp.read(300).decode("utf-8", "replace").strip().replace("\n", " ")
                raise _Failed(f"HTTP {resp.status}: {text[:200]}")
            complete = self._read_events(resp, res)
        except ValueError as exc:  # not an http(s) URL
            res.error = str(exc)
        except _Failed as exc:
            res.error = str(exc)
        except TimeoutError:  # the socket's own timeout (the same deadline, per operation)
            res.error = f"client timeout after {self.timeout_s or 3600.0:g} s"
        except (OSError, http.client.HTTPException) as exc:
            res.error = f"{type(exc).__name__}: {exc}"
        finally:
            if timer is not None:
                timer.cancel()
            if conn is not None:
                conn.close()
            res.finish_ns = time.monotonic_ns()
        if complete:
            return res
        if self._cancelled:  # whatever the read saw once the socket was shut
            res.cancelled, res.error = True, "cancelled"
        elif self._timed_out:
            res.error = f"client timeout after {self.timeout_s:g} s"
        return res

    def _read_events(self, resp: http.client.HTTPResponse, res: StreamResult) -> bool:
        """Read the stream into ``res``: ``True`` at ``[DONE]``, ``False`` when stopped."""
        chunks = 0
        tokens = 0  # the running usage.completion_tokens of the chunks read
        counted = True  # every output chunk so far came with a running count
        usage_tokens = None
        per_chunk: list[int] = []
        while True:
            line = resp.readline(MAX_LINE_BYTES + 1)
            now = time.monotonic_ns()
            if self._cancelled or self._timed_out:
                return False
            if len(line) > MAX_LINE_BYTES:
                raise _Failed(f"an SSE line longer than {MAX_LINE_BYTES} bytes after {chunks} "
                              "chunk(s)")
            if not line:
                raise _Failed(f"the stream ended before [DONE] after {chunks} chunk(s)")
            text = line.decode("utf-8", "replace").strip()
            if not text or text.startswith(":") or not text.startswith("data:"):
                continue
            data = text[5:].strip()
            if data == "[DONE]":
                break
            event = _parse_event(data, chunks)
            count = _usage_int(event, "completion_tokens")
            if isinstance(event.get("choices"), list) and event["choices"]:
                if count is None:
                    if _chunk_text(event):  # output without a count (an empty one says nothing)
                        counted = False
                        res.chunk_ns.append(now)
                        chunks += 1
                elif count > tokens:
                    res.chunk_ns.append(now)
                    per_chunk.append(count - tokens)
                    chunks += 1
                    tokens = count
            res.output_tokens = tokens if counted and tokens else chunks  # should it break
            if count is not None:
                usage_tokens = count
            prompt = _usage_int(event, "prompt_tokens")
            if prompt is not None:
                res.prompt_tokens = prompt
        res.chunk_tokens = per_chunk if counted and per_chunk else None
        res.output_tokens = usage_tokens if usage_tokens is not None else chunks
        return True


def _parse_event(data: str, chunks: int) -> dict[str, Any]:
    """One ``data:`` event as a dict (``_Failed`` naming a malformed or error event)."""
    try:
        event = json.loads(data)
    except (ValueError, RecursionError):
        raise _Failed(f"a malformed event after {chunks} chunk(s): {data[:80]!r}") from None
    if not isinstance(event, dict):
        raise _Failed(f"a malformed event after {chunks} chunk(s): {data[:80]!r}")
    if "error" in event:
        raise _Failed(f"server error after {chunks} chunk(s): {str(event['error'])[:160]}")
    return event


def _usage_int(event: dict[str, Any], key: str) -> int | None:
    """``usage[key]`` of an event when it is a non-negative int."""
    usage = event.get("usage")
    value = usage.get(key) if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _chunk_text(event: dict[str, Any]) -> str:
    """The output text a chunk carries (completions ``text`` or chat ``delta.content``)."""
    out = []
    for choice in event.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        text = choice.get("text")
        if text is None and isinstance(choice.get("delta"), dict):
            text = choice["delta"].get("content")
        if isinstance(text, str):
            out.append(text)
    return "".join(out)


class _Failed(Exception):
    """A request that failed (HTTP status, cut stream, malformed or error event)."""


