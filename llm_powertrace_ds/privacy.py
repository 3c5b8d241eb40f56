"""What may be published: salted hashes of identifiers, and the free-text gate.

Two jobs, both about never publishing who or where a measurement came from:

* :func:`hash_identifier` — salted hashes of GPU UUIDs and hosts, one function for the sampler
  and the importers, so one device hashes the same whether it was measured or imported. The salt
  is a **secret of this machine** (:func:`secret_salt`): 32 random bytes created once in
  ``~/.config/llm-powertrace/salt`` (mode 0600, outside every dataset folder, never published),
  so nobody can confirm a guessed host or UUID by hashing it (issue 12, item 2).
* :func:`text_problem` / :func:`check_text` — every free-text value that comes from a log, a
  metadata file or a sweep is checked against what it may be (a GPU-name grammar, a version
  pattern, a grid-region pattern, a Hub model id, ...) and anything that looks like a path, an IP
  address, an e-mail or ``user@host``, a host name, this machine's own host or user name, or that
  holds a control character, is **refused** (never silently rewritten into another value).

Imports nothing heavy (the sampler process uses it).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import secrets
import stat
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .errors import InputError, PowerTraceError

SALT_ENV = "LLM_POWERTRACE_SALT"
"""An explicit salt (e.g. one shared by the machines of one campaign); wins over the file."""
SALT_FILE_ENV = "LLM_POWERTRACE_SALT_FILE"
"""Where the machine's secret salt lives (default ``$XDG_CONFIG_HOME/llm-powertrace/salt``)."""
MAX_TEXT_CHARS = 200
"""Longest free-text value accepted in a published string column."""
PROSE_FIELDS = frozenset({"description"})
"""Fields of prose (a sweep's description), allowed up to ``MAX_PROSE_CHARS``."""
MAX_PROSE_CHARS = 4000
JSON_FIELDS = frozenset({"source_metadata", "engine_args"})
"""Fields holding JSON (a publisher's metadata kept verbatim, a served engine's argument list):
every key and string value inside passes the same gate, the whole at most ``MAX_JSON_CHARS``."""
MAX_JSON_CHARS = 65536


def salt_path() -> Path:
    """The secret salt's file: ``$LLM_POWERTRACE_SALT_FILE``, else the user's config folder."""
    explicit = os.environ.get(SALT_FILE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "llm-powertrace" / "salt"


def secret_salt() -> str:
    """This machine's secret salt, created on first use (64 hex digits, file mode 0600).

    ``$LLM_POWERTRACE_SALT`` wins when set. The file is created with ``O_EXCL`` so two processes
    starting together agree on one salt.

    Raises:
        PowerTraceError: the salt file is readable by other users, or cannot be created.
    """
    env = os.environ.get(SALT_ENV)
    if env:
        return env
    path = salt_path()
    for _ in range(2):
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(secrets.token_hex(32) + "\n")
            continue
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise PowerTraceError(f"the salt file '{path}' is readable by other users; "
                                  f"run: chmod 600 '{path}'")
        text = path.read_text(encoding="ascii").strip()
        if text:
            return text
        raise PowerTraceError(f"the salt file '{path}' is empty; delete it to make a new one")
    raise PowerTraceError(f"cannot create the salt file '{path}'")


def hash_identifier(value: str, salt: str | None = None) -> str:
    """Salted SHA-256 of an identifier, first 16 hex digits: ``sha256(salt + ":" + value)``.

    Args:
        value: the identifier (surrounding whitespace is ignored).
        salt: the salt; ``None`` = :func:`secret_salt` (``$LLM_POWERTRACE_SALT`` or this
            machine's secret salt file).
    """
    salt = salt if salt is not None else secret_salt()
    return hashlib.sha256(f"{salt}:{value.strip()}".encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# The free-text gate
# ---------------------------------------------------------------------------------------------

_IPV4_RE = re.compile(r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)"
                      r"(?![\d])")
_IPV6_RE = re.compile(r"(?<![0-9a-f:])(?:(?:[0-9a-f]{1,4}:){3,7}[0-9a-f]{1,4}"
                      r"|[0-9a-f:]*::[0-9a-f:]*[0-9a-f][0-9a-f:]*)(?![0-9a-f:])", re.I)
_USER_AT_HOST_RE = re.compile(r"[^\s@]+@[^\s@]+")
_FILE_EXT = r"(?:json|jsonl|csv|tsv|ya?ml|txt|arrow|parquet|log|gz|zip|bin|safetensors|pt)"
_FQDN_RE = re.compile(rf"(?<![\w.-])[a-z0-9-]+(?:\.[a-z0-9-]+){{2,}}\.(?!{_FILE_EXT}(?![\w-]))"
                      r"[a-z]{2,}(?![\w.-])", re.I)
_HOST_TLD_RE = re.compile(r"(?<![\w.-])[a-z0-9-]+\.(?:com|org|net|edu|gov|local|lan|internal|"
                          r"corp|intra|home|cluster)(?![\w-])", re.I)
_PATH_TOKEN_RE = re.compile(r"^(?:~|/|\\|[A-Za-z]:[\\/]|\.\.?[\\/])")
_PATH_DIR_RE = re.compile(r"(?:^|/)(?:home|Users|root|mnt|media|scratch|tmp|var|etc|opt|srv|"
                          r"gpfs|lustre|nfs|net|private)/", re.I)
_URL_RE = re.compile(r"[a-z][a-z0-9+.-]*://", re.I)
_SECRET_RE = re.compile(
    r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}|sk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|glpat-[A-Za-z0-9_-]{16,})")
"""Access tokens by their published prefixes: Hugging Face, GitHub, AWS, OpenAI/Anthropic-style
``sk-``, Slack, GitLab."""
_SEGMENT_SPLIT_RE = re.compile(r"[\s\-._/:,;=@]+")
MIN_SECRET_SEGMENT = 24
"""A segment this long mixing upper case, lower case and digits reads as a random key (words and
hex hashes do not mix all three)."""


def _looks_secret(value: str) -> bool:
    if _SECRET_RE.search(value):
        return True
    for seg in _SEGMENT_SPLIT_RE.split(value):
        if (len(seg) >= MIN_SECRET_SEGMENT and any(c.isupper() for c in seg)
                and any(c.islower() for c in seg) and any(c.isdigit() for c in seg)):
            return True
    return False

_GRAMMARS: dict[str, tuple[re.Pattern[str], str]] = {
    "gpu_name": (re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()+-]{0,63}$"),
                 "a GPU name such as 'NVIDIA H100 80GB HBM3'"),
    "driver_version": (re.compile(r"^\d{1,4}(?:\.\d{1,4}){0,3}$"), "a version such as '550.54.15'"),
    "cuda_version": (re.compile(r"^\d{1,3}(?:\.\d{1,3}){0,2}$"), "a version such as '12.4'"),
    "nvml_version": (re.compile(r"^\d{1,4}(?:\.\d{1,4}){0,4}$"), "a version such as '12.550.54'"),
    "grid_region": (re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"),
                    "a grid-zone code such as 'US-CAL-CISO' or 'DE'"),
    "model_name": (re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$"),
                   "a model name or Hub id such as 'meta-llama/Llama-3.2-1B'"),
    "model_label": (re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,95}"
                               r"(?:/[A-Za-z0-9][A-Za-z0-9._+-]{0,95})?$"),
                    "a label such as 'ds7bbase' or a Hub id"),
}


@functools.lru_cache(maxsize=1)
def _local_identities() -> tuple[str, ...]:
    """This machine's host name (and its first label) and user name (never to be published).

    Read once per process (``getpass.getuser`` reads the password database when no login
    variable is set, and an import checks dozens of texts per run); ``cache_clear()`` re-reads.
    """
    import getpass
    import socket

    names: set[str] = set()
    for get in (socket.gethostname, getpass.getuser):
        try:
            name = get()
        except (OSError, KeyError):
            continue
        for part in {name, name.split(".")[0]}:
            if part and len(part) >= 4 and part not in ("root", "localhost", "user"):
                names.add(part)
    return tuple(sorted(names))


def text_problem(field: str, value: str) -> str | None:
    """Why ``value`` may not be published in ``field`` (``None`` when it may).

    Refused everywhere: control characters (newline, ESC, ...), a path, a URL, an access token
    or secret key (``hf_…``, ``ghp_…``, ``github_pat_…``, ``AKIA…``, ``sk-…``, or a long random-looking
    segment mixing upper case, lower case and digits), an IPv4/IPv6
    address, ``user@host`` (and e-mail), a fully qualified host name, this machine's own host or
    user name, and text longer than ``MAX_TEXT_CHARS``. Fields with a grammar (``gpu_name``,
    ``driver_version``, ``cuda_version``, ``grid_region``, ``model_name``, versions, ...) must
    also match it.

    Memoised on (field, value, this machine's names): an import checks the same labels and
    settings in every run (about 30 us each with the patterns above).
    """
    return _text_problem(field, value, _local_identities())


def _json_problem(field: str, value: str, identities: tuple[str, ...]) -> str | None:
    """The first problem of a JSON field: its size, its syntax, or any key or string inside."""
    import json

    if len(value) > MAX_JSON_CHARS:
        return f"is longer than {MAX_JSON_CHARS} characters"
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        return "is not JSON"
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                name = f"{where}.{key}" if where else str(key)
                problem = _text_problem(f"{field}.{name}", str(key), identities)
                if problem is not None:
                    return f"key {name!r} {problem}"
                stack.append((name, sub))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", sub) for i, sub in enumerate(item))
        elif isinstance(item, str):
            problem = _text_problem(f"{field}.{where}", item, identities)
            if problem is not None:
                return f"at {where or 'top'}: {_shown(item)} {problem}"
    return None


@functools.lru_cache(maxsize=4096)
def _text_problem(field: str, value: str, identities: tuple[str, ...]) -> str | None:
    if field in JSON_FIELDS:
        return _json_problem(field, value, identities)
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co") for ch in value):
        return "holds a control character"
    limit = MAX_PROSE_CHARS if field in PROSE_FIELDS else MAX_TEXT_CHARS
    if len(value) > limit:
        return f"is longer than {limit} characters"
    if _URL_RE.search(value):
        return "looks like a URL"
    if _looks_secret(value):
        return "looks like an access token or secret key"
    if any(_PATH_TOKEN_RE.match(tok) or "\\" in tok or _PATH_DIR_RE.search(tok)
           for tok in value.split()):
        return "looks like a file path"
    if _IPV4_RE.search(value) or _IPV6_RE.search(value):
        return "holds an IP address"
    if _USER_AT_HOST_RE.search(value):
        return "looks like an e-mail address or user@host"
    if _FQDN_RE.search(value) or _HOST_TLD_RE.search(value):
        return "looks like a host name"
    lowered = value.lower()
    if any(re.search(rf"(?<![a-z0-9]){re.escape(n.lower())}(?![a-z0-9])", lowered)
           for n in identities):
        return "holds this machine's host or user name"
    grammar = _GRAMMARS.get(field)
    if grammar is not None and not grammar[0].match(value):
        return f"is not {grammar[1]}"
    return None


def strip_control(text: str) -> str:
    """``text`` without control characters (newlines and tabs kept): for rendered documents.

    The last line of defence for the card: values are refused on input (:func:`check_text`),
    and whatever reached a folder before that is rendered without ESC sequences, carriage
    returns or bidirectional overrides.
    """
    from .formatting import safe_text

    return safe_text(text)


def _shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:56] + "...'"


def check_text(field: str, value: Any, *, file: str | Path | None = None,
               line: int | None = None) -> None:
    """Raise ``InputError`` (naming file, line and field) when ``value`` may not be published.

    Non-string values pass (they are checked by their column type).
    """
    if not isinstance(value, str):
        return
    problem = text_problem(field, value)
    if problem is not None:
        raise InputError(f"value {_shown(value)} {problem}; refused (nothing is published that "
                         "could name a person, a machine or a path)", file=file, line=line,
                         field=field)


def check_meta_text(meta: Mapping[str, Any], *, file: str | Path | None = None) -> None:
    """:func:`check_text` on every string (and list of strings) value of a metadata mapping."""
    for key, value in meta.items():
        if isinstance(value, (list, tuple)):
            for item in value:
                check_text(key, item, file=file)
        else:
            check_text(key, value, file=file)


def check_labels(field: str, values: Iterable[str | None], *,
                 file: str | Path | None = None) -> None:
    """:func:`check_text` on each non-null value (e.g. event labels, request ids)."""
    for value in values:
        if value is not None:
            check_text(field, value, file=file)


# ---------------------------------------------------------------------------------------------
# Text that leaves with a folder: URLs and credits of public sources
# ---------------------------------------------------------------------------------------------

URL_SCHEMES = ("http", "https", "ftp")
"""Schemes a recorded URL may have."""
PRIVATE_TLDS = ("localhost", "local", "lan", "internal", "intranet", "corp", "intra", "home",
                "cluster", "localdomain", "arpa", "test", "invalid", "private")
"""Top-level labels of names that resolve only inside a site (RFC 6761, RFC 6762, common use)."""
MAX_CREDIT_CHARS = 1000
"""Longest title or citation of a public source."""
_URL_IN_TEXT_RE = re.compile(r"[a-z][a-z0-9+.-]*://[^\s<>\"']+", re.I)
_NUMERIC_LABEL_RE = re.compile(r"^(?:\d+|0x[0-9a-f]+)$", re.I)


def _private_host(host: str) -> bool:
    """Whether a URL's host names a loopback, private, link-local or site-only address."""
    import ipaddress

    host = host.strip("[]").rstrip(".").lower()
    try:
        return not ipaddress.ip_address(host).is_global
    except ValueError:
        pass
    labels = host.split(".")
    if len(labels) < 2 or labels[-1] in PRIVATE_TLDS or _NUMERIC_LABEL_RE.match(labels[-1]):
        return True  # a bare name, a site-only TLD, or an address in another notation (127.1)
    return any(n.lower() in labels for n in _local_identities())


def public_url(url: str) -> str | None:
    """The part of ``url`` that may be published, or ``None`` when none may.

    Kept: scheme, host, port and path. Stripped: the query (signed-URL tokens: Zenodo's
    ``?token=``, S3's ``X-Amz-Signature``, the Hub's ``?download=...&token=``), the fragment and
    any ``user:password@``. Dropped whole (``None``): a host that is an IP address outside the
    public internet (loopback, private, link-local, reserved), a bare or site-only name
    (``localhost``, ``*.local``, ``*.internal``, this machine's name), a scheme other than
    :data:`URL_SCHEMES`, a control character, a space, quote, backslash or angle bracket (it
    is written as a Markdown autolink), or a path that holds an access token.

    Example:
        >>> public_url("https://user:hf_abcdefghijklmnopqrst@zenodo.org/records/1/f.csv?token=x")
        'https://zenodo.org/records/1/f.csv'
        >>> public_url("http://127.0.0.1:8000/f.csv") is None
        True
    """
    from urllib.parse import urlsplit, urlunsplit

    if not isinstance(url, str) or any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co")
                                       or c.isspace() or c in "<>\"'`\\" for c in url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if parts.scheme.lower() not in URL_SCHEMES or not host or _private_host(host):
        return None
    if _looks_secret(parts.path) or _text_problem_in_path(parts.path):
        return None
    netloc = f"[{host}]" if ":" in host else host
    return urlunsplit((parts.scheme.lower(), netloc if port is None else f"{netloc}:{port}",
                       parts.path, "", ""))


def _text_problem_in_path(path: str) -> bool:
    lowered = path.lower()
    return bool(_USER_AT_HOST_RE.search(path)) or any(
        re.search(rf"(?<![a-z0-9]){re.escape(n.lower())}(?![a-z0-9])", lowered)
        for n in _local_identities())


def credit_problem(value: str) -> str | None:
    """Why a public source's title or citation may not be published (``None`` when it may).

    A credit is prose that may cite a public URL (a DOI), so the path-and-host rules of
    :func:`text_problem` do not apply; refused are: control characters (it must be one line),
    more than :data:`MAX_CREDIT_CHARS`, an access token, an IP address, ``user@host``, this
    machine's host or user name, and a URL that is not its own :func:`public_url` (a query, a
    password, a private host). Markup is not refused: the card escapes it
    (:func:`markdown_inline`).
    """
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co") for ch in value):
        return "holds a control character (a newline?): it must be one line"
    if len(value) > MAX_CREDIT_CHARS:
        return f"is longer than {MAX_CREDIT_CHARS} characters"
    for url in _URL_IN_TEXT_RE.findall(value):
        if public_url(url.rstrip(".,;:)]")) != url.rstrip(".,;:)]"):
            return (f"cites the URL {_shown(url)}, which is not public as written (a query, "
                    "a password or a private host)")
    rest = _URL_IN_TEXT_RE.sub(" ", value)
    if _looks_secret(rest):
        return "looks like an access token or secret key"
    if _IPV4_RE.search(rest) or _IPV6_RE.search(rest):
        return "holds an IP address"
    if _USER_AT_HOST_RE.search(rest):
        return "looks like an e-mail address or user@host"
    lowered = value.lower()
    if any(re.search(rf"(?<![a-z0-9]){re.escape(n.lower())}(?![a-z0-9])", lowered)
           for n in _local_identities()):
        return "holds this machine's host or user name"
    return None


_MD_SPECIAL_RE = re.compile(r"([\\`*_{}\[\]#|~])")


def markdown_inline(value: Any) -> str:
    r"""``value`` as inert text inside one Markdown line of the card.

    One line (every run of whitespace, newlines included, becomes a space), no control or
    bidirectional characters, HTML's ``& < > "`` as entities (no tag, no ``onerror``) and
    Markdown's punctuation that makes structure backslash-escaped (`` \ ` * _ { } [ ] # | ~ ``:
    no heading, link, image, table cell, code or emphasis made by the text).

    Example:
        >>> markdown_inline('<img src=x onerror=alert(1)>\n## Licence: Public domain')
        '&lt;img src=x onerror=alert(1)&gt; \\#\\# Licence: Public domain'
    """
    import html

    text = " ".join(strip_control(str(value)).split())
    return _MD_SPECIAL_RE.sub(r"\\\1", html.escape(text, quote=True))
