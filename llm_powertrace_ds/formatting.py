"""Numbers as people read them, for tables and the dataset card (never for JSON or CSV).

A float read back from a float32 column carries binary noise (``1e-4`` is stored as
``9.999999747378752e-05``); ``%g`` formatting then mixes plain and scientific numbers in one
column (``24050`` becomes ``2.405e+04``). :func:`human_number` prints plain decimals from 0.001
up to a billion (thousands grouped), and a short scientific form only outside that range.
"""

from __future__ import annotations

import math
import re


def human_number(value: float, digits: int = 4, *, grouping: bool = True) -> str:
    """A number for a table cell: ``digits`` significant digits, plain where that reads well.

    Rules: 0 → ``0``; 1,000 ≤ |v| < 1e9 → rounded to an integer with grouped thousands
    (``grouping``; off where values are themselves listed with commas);
    0.001 ≤ |v| < 1,000 → ``digits`` significant digits, no exponent, trailing zeros dropped;
    otherwise a short scientific form (``1e-4``, ``2.5e-5``, ``1.2e12``). NaN → ``nan``.

    Example:
        >>> [human_number(v) for v in (9.999999747378752e-05, 24050.31, 0.0123456, 3.0, 7e12)]
        ['1e-4', '24,050', '0.01235', '3', '7e12']
    """
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == 0:
        return "0"
    mag = abs(value)
    if 1_000 <= mag < 1e9:
        return f"{value:,.0f}" if grouping else f"{value:.0f}"
    if 1e-3 <= mag < 1_000:
        exponent = math.floor(math.log10(mag))
        decimals = max(0, digits - 1 - exponent)
        text = f"{value:.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, _, exp = f"{value:.{max(0, digits - 2)}e}".partition("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return f"{mantissa}e{int(exp)}"


def human_bytes(n_bytes: float) -> str:
    """A size in the largest decimal unit that keeps it at least 1: ``B``, ``kB``, ``MB``, ``GB``.

    Three significant digits (whole bytes below 1 kB), so a small size never reads ``0.0 MB``.

    Example:
        >>> [human_bytes(v) for v in (0, 950, 6_050, 1_234_567, 2.5e9)]
        ['0 B', '950 B', '6.05 kB', '1.23 MB', '2.5 GB']
    """
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n_bytes) >= size:
            return f"{human_number(n_bytes / size, 3)} {unit}"
    return f"{n_bytes:.0f} B"


_TERMINAL_UNSAFE_RE = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
"""C0/C1 control characters (ESC starts every terminal escape: OSC 52 clipboard writes, screen
clears, titles), zero-width and bidirectional formatting characters (U+202E and friends, which
spoof what a name looks like). Newline and tab are kept."""


def safe_text(text: str) -> str:
    """``text`` without terminal escapes and bidirectional overrides: the one output sanitiser.

    For dataset strings shown in a terminal, a CSV or a page.

    Values are refused on input by the text gate (``privacy``); this is for strings that reached
    a folder some other way (a dataset from the Hub written by someone else).
    """
    return _TERMINAL_UNSAFE_RE.sub("", text)
