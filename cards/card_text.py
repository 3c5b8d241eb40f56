"""Card constants, options and the small Markdown formatting helpers every section uses."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from llm_powertrace_ds.formatting import human_number

REPO_PLACEHOLDER = "<org>/llm-powertrace"
"""Stands for the Hub repo id (or a local folder) in the card's snippets when none is given."""
PAPER_TITLE = ("LLM-PowerTrace: A Dataset of Time-Resolved GPU Power Traces for AI Compute")
LICENSE = "cc-by-4.0"
TAGS = ["timeseries", "energy", "gpu", "power", "llm"]
TASK_CATEGORIES = ["time-series-forecasting"]
FILE_SUFFIXES = {"arrow": ".arrow", "parquet": ".parquet"}
EXTRA_AXES = ("model_name", "num_gpus", "repeat")
"""Columns shown with the sweep axes besides the schema's fine-tuning/inference axes."""
_CONFIG_ROWS = {"finetune": "run × device", "inference": "run × device",
                "finetune_runs": "run", "inference_runs": "run", "inference_requests": "request"}
_CONFIG_WHAT = {
    "finetune": "fine-tuning power traces: per-tick signal lists, events, every sweep axis",
    "inference": "inference power traces: per-tick signal lists, events, serving axes",
    "finetune_runs": "one row per fine-tuning run: axes and node-total metrics",
    "inference_runs": "one row per inference run: axes and node-total metrics",
    "inference_requests": "per-request timing on the run clock",
}
_WORKLOAD_NAMES = {"finetune": "fine-tuning", "inference": "inference"}


@dataclass(frozen=True)
class CardOptions:
    """How to build a card (the only way to customise it; the text is never hand-edited).

    Attributes:
        repo_id: Hub repo id used in the snippets (default: ``REPO_PLACEHOLDER``).
        file_format: the shards' format; the YAML globs follow it (``arrow`` or ``parquet``).
        figures: draw missing or stale figures (needs matplotlib; current ones are always
            kept and linked). ``None`` (default): draw unless the environment variable
            ``LLM_POWERTRACE_CARD_FIGURES`` is ``0`` — the switch for the card rebuilt after
            every publish, e.g. in test suites or on a cluster writing many runs.
        pretty_name: the dataset's display name.
    """

    repo_id: str | None = None
    file_format: Literal["arrow", "parquet"] = "arrow"
    figures: bool | None = None
    pretty_name: str = "LLM-PowerTrace"

    def __post_init__(self) -> None:
        if self.file_format not in FILE_SUFFIXES:
            raise ValueError(f"file_format {self.file_format!r} is not one of "
                             f"{', '.join(FILE_SUFFIXES)}")


# ---------------------------------------------------------------------------------------------
# Markdown helpers
# ---------------------------------------------------------------------------------------------

def _esc(text: Any) -> str:
    """One table cell: pipes escaped, newlines flattened."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: Any) -> str:
    return f"`{str(text).replace('`', '')}`"


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    out += ["| " + " | ".join(_esc(c) for c in row) + " |" for row in rows]
    return out


def fmt_value(value: Any) -> str:
    """A value as the card prints it (``null``, ``true``, ``1e-4``, ``24050``, ``7``, text).

    Floats go through :func:`llm_powertrace_ds.formatting.human_number` (6 significant digits,
    no thousands separator because values are listed with commas): no float32 noise
    (``9.999999747378752e-05``) and no exponent among plain numbers (``2.405e+04``).
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return human_number(value, 6, grouping=False)
    return str(value)


def human_count(n: int | None) -> str:
    """A parameter count in words (``1.24 B``, ``124 M``)."""
    if n is None:
        return "unknown"
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.3g} {unit}"
    return str(n)


def _join(values: Iterable[Any], *, code: bool = False) -> str:
    vals = sorted({fmt_value(v) for v in values if v is not None}, key=_natural)
    if not vals:
        return "not recorded"
    return ", ".join(_code(v) if code else v for v in vals)


def _natural(text: str) -> tuple:
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def _value_key(value: Any) -> tuple:
    if value is None:
        return (2, 0.0, "")
    if isinstance(value, (bool, int, float)):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def plural(n: int, word: str) -> str:
    """``"1 run"``, ``"3 runs"``, ``"0 runs"``: a count and its noun, for people.

    Example:
        >>> plural(1, "run"), plural(0, "device trace")
        ('1 run', '0 device traces')
    """
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def flags_sentence(runs: Sequence[Mapping[str, Any]]) -> str:
    """How many runs carry a quality flag, in plain words (no double negative).

    Example:
        >>> flags_sentence([{"quality_flags": []}, {"quality_flags": ["gap"]}])
        '1 of 2 runs carries at least one quality flag; 1 carries none.'
        >>> flags_sentence([{"quality_flags": None}])
        'No run carries a quality flag.'
    """
    flagged = sum(1 for r in runs if r.get("quality_flags"))
    n = len(runs)
    if flagged == 0:
        return "No run carries a quality flag."
    verb = "carries" if flagged == 1 else "carry"
    rest = n - flagged
    tail = f"; {rest} {'carries' if rest == 1 else 'carry'} none." if rest else "."
    return f"{flagged} of {n} run{'s' if n != 1 else ''} {verb} at least one quality flag{tail}"
