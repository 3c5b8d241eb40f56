"""Salted hashes of identifiers (GPU UUIDs, hosts).

One function for the sampler and importers, so one device hashes the same whether it was
measured or imported. Identifiers themselves never reach the data. Imports nothing heavy (the
sampler process uses it).
"""

from __future__ import annotations

import hashlib
import os

DEFAULT_SALT = "llm-powertrace/gpu-uuid/v1"
"""Salt used when neither the caller nor ``$LLM_POWERTRACE_SALT`` sets one."""
SALT_ENV = "LLM_POWERTRACE_SALT"


def hash_identifier(value: str, salt: str | None = None) -> str:
    """Salted SHA-256 of an identifier, first 16 hex digits: ``sha256(salt + ":" + value)``.

    Args:
        value: the identifier (surrounding whitespace is ignored).
        salt: the salt; ``None`` = ``$LLM_POWERTRACE_SALT`` or ``DEFAULT_SALT``.
    """
    salt = salt if salt is not None else os.environ.get(SALT_ENV, DEFAULT_SALT)
    return hashlib.sha256(f"{salt}:{value.strip()}".encode()).hexdigest()[:16]
