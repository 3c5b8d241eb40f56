"""One streamed completion from an OpenAI-compatible server (``http.client``, SSE).

A request is sent with ``stream: true`` and read as server-sent events (``data: {...}`` lines,
ended by ``data: [DONE]``). Every chunk that carries output text is stamped on
``time.monotonic_ns()`` (the sampler's clock) as it is read; the output token count is the
server's ``usage.completion_tokens`` when it reports usage (``stream_options.include_usage``),
else the number of chunks with text (one token per chunk on vLLM and SGLang's default
streaming). Output lengths are forced the way vLLM and SGLang accept it (``ignore_eos`` and
``min_tokens`` equal to ``max_tokens``); a server that ignores those fields returns fewer
tokens, which the serving loop records as an error, never as a success.

Failures never raise: a refused connection, an HTTP error status, a stream cut before
``[DONE]``, a malformed event, the client timeout (``timeout_s``, a deadline for the whole
request) or :meth:`CompletionStream.cancel` from another thread end the request with
``error`` (or ``cancelled``) set in its :class:`StreamResult`.
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
        chunk_ns: when each chunk carrying output text was read.
        finish_ns: when the stream ended (``[DONE]``, an error or a cancel).
        output_tokens: ``usage.completion_tokens``, else the number of text chunks (of a
            broken stream: the chunks read before it broke).
        prompt_tokens: ``usage.prompt_tokens`` when the server reports it.
        error: what went wrong (``None`` on success).
        cancelled: the request was cancelled (:meth:`CompletionStream.cancel`).
    """

    start_ns: int
    chunk_ns: list[int] = field(default_factory=list)
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


def get_json(url: str, path: str, timeout_s: float = 5.0) -> tuple[int, dict[str, str], Any]:
    """``GET`` ``path`` under ``url``: ``(status, headers, parsed JSON or None)``.

    Raises:
        OSError: the server cannot be reached (``http.client.HTTPException`` included).
    """
    conn, prefix = connection(url, timeout_s)
    try:
        conn.request("GET", prefix + path)
        resp = conn.getresponse()
        body = resp.read()
        headers = {k.lower(): v for k, v in resp.getheaders()}
    except http.client.HTTPException as exc:
        raise OSError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()
    try:
        data = json.loads(body) if body else None
    except ValueError:
        data = None
    return resp.status, headers, data


def get_text(url: str, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """``GET`` ``path`` under ``url``: ``(status, body as text)``.

    Raises:
        OSError: the server cannot be reached (``http.client.HTTPException`` included).
    """
    conn, prefix = connection(url, timeout_s)
    try:
        conn.request("GET", prefix + path)
        resp = conn.getresponse()
        body = resp.read()
    except http.client.HTTPException as exc:
        raise OSError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()
    return resp.status, body.decode("utf-8", "replace")


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
        self._lock = threading.Lock()
        self._cancelled = False

    def body(self, prompt: list[int], max_tokens: int) -> dict[str, Any]:
        """The JSON request body (output length forced, greedy, streamed with usage)."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": int(max_tokens),
                                "min_tokens": int(max_tokens), "ignore_eos": True,
                                "temperature": 0.0, "stream": True,
                                "stream_options": {"include_usage": True}}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt_text(prompt)}]
        else:
            body["prompt"] = list(prompt)
        return body

    def cancel(self) -> None:
        """Stop the request: its socket is shut down, :meth:`run` returns ``cancelled``."""
        with self._lock:
            self._cancelled = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def run(self, prompt: list[int], max_tokens: int) -> StreamResult:
        """Send the request and read its stream to the end (never raises)."""
        res = StreamResult(time.monotonic_ns())
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        path = "/chat/completions" if self.api == "chat" else "/completions"
        try:
            conn, prefix = connection(self.base_url, self.timeout_s or 3600.0)
        except ValueError as exc:
            res.error = str(exc)
            res.finish_ns = time.monotonic_ns()
            return res
        with self._lock:
            self._conn = conn
            cancelled = self._cancelled
        try:
            if cancelled:
                raise _Cancelled
            payload = json.dumps(self.body(prompt, max_tokens)).encode()
            conn.request("POST", prefix + path, body=payload,
                         headers={"Content-Type": "application/json",
                                  "Accept": "text/event-stream"})
            resp = conn.getresponse()
            if resp.status != 200:
                text = resp.read(300).decode("utf-8", "replace").strip().replace("\n", " ")
                raise _Failed(f"HTTP {resp.status}: {text[:200]}")
            self._read_events(resp, res, deadline)
        except _Cancelled:
            res.cancelled = True
            res.error = "cancelled"
        except _Failed as exc:
            res.error = str(exc)
        except TimeoutError:
            res.error = f"client timeout after {self.timeout_s:g} s"
        except (OSError, http.client.HTTPException) as exc:
            if self._cancelled:
                res.cancelled, res.error = True, "cancelled"
            else:
                res.error = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
            res.finish_ns = time.monotonic_ns()
        return res

    def _read_events(self, resp: http.client.HTTPResponse, res: StreamResult,
                     deadline: float | None) -> None:
        chunks = 0
        usage_tokens = None
        while True:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock = self._conn.sock if self._conn is not None else None
                if sock is not None:
                    sock.settimeout(left)
            line = resp.readline()
            now = time.monotonic_ns()
            if self._cancelled:
                raise _Cancelled
            if not line:
                raise _Failed(f"the stream ended before [DONE] after {chunks} chunk(s)")
            text = line.decode("utf-8", "replace").strip()
            if not text or text.startswith(":") or not text.startswith("data:"):
                continue
            data = text[5:].strip()
            if data == "[DONE]":
                break
            try:
                event = json.loads(data)
            except ValueError:
                raise _Failed(f"a malformed event after {chunks} chunk(s): {data[:80]!r}") from None
            if not isinstance(event, dict):
                raise _Failed(f"a malformed event after {chunks} chunk(s): {data[:80]!r}")
            if "error" in event:
                raise _Failed(f"server error after {chunks} chunk(s): "
                              f"{str(event['error'])[:160]}")
            if _chunk_text(event):
                res.chunk_ns.append(now)
                chunks += 1
                res.output_tokens = chunks  # what was streamed, should the stream break
            usage = event.get("usage")
            if isinstance(usage, dict):
                if isinstance(usage.get("completion_tokens"), int):
                    usage_tokens = usage["completion_tokens"]
                if isinstance(usage.get("prompt_tokens"), int):
                    res.prompt_tokens = usage["prompt_tokens"]
        res.output_tokens = usage_tokens if usage_tokens is not None else chunks


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


class _Cancelled(Exception):
    """A request cancelled by :meth:`CompletionStream.cancel`."""
