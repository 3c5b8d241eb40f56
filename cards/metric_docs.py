"""Metric definitions for the card, generated from ``llm_powertrace_ds.metrics``.

The formulas are written once, in the docstrings of the metrics module; the card prints them:

- ``metrics.metric_formulas()`` gives ``{metric: formula}`` (parsed from the metric groups'
  docstrings);
- the metric groups (``metrics.METRIC_GROUPS``) give each group's
  title and the definitions its formulas use (e.g. the ramp ``r_δ(t)``);
- the module docstring's indented sections (alignment, conventions) explain the node total.

Only metrics that are columns of the runs configs are listed (the card describes the data);
a column without a documented formula gets its description from ``schema.py``.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from llm_powertrace_ds import schema

_SECTION_RE = re.compile(r"^\s*(Args|Arguments|Returns|Yields|Raises|Example|Examples|Note|Notes"
                         r"|Attributes)\s*:\s*$")


@dataclass(frozen=True)
class MetricDoc:
    """One line of the card's metric tables.

    Attributes:
        name: the runs-config column.
        unit: physical unit, or ``""``.
        definition: the formula and its conditions, as Markdown.
        per_device: a list column with one value per device.
    """

    name: str
    unit: str
    definition: str
    per_device: bool = False


@dataclass
class MetricGroup:
    """Metrics documented together.

    Attributes:
        title: the group's first docstring line.
        intro: the definitions its formulas share (Markdown paragraphs).
        metrics: its metrics, in column order.
    """

    title: str
    intro: list[str] = field(default_factory=list)
    metrics: list[MetricDoc] = field(default_factory=list)


def rst_to_markdown(text: str) -> str:
    """Turn the reST bits docstrings use (``x``, :func:`x`) into Markdown code spans."""
    text = re.sub(r":(?:func|meth|class|attr|data|mod):`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def _paragraphs(lines: list[str]) -> list[str]:
    paras, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    return [rst_to_markdown(p) for p in paras]


def docstring_summary(obj: Any) -> str:
    """The docstring of ``obj`` up to its first ``Args:``/``Returns:``/... section, on one line."""
    kept = []
    for line in (inspect.getdoc(obj) or "").splitlines():
        if _SECTION_RE.match(line):
            break
        kept.append(line.strip())
    return rst_to_markdown(" ".join(x for x in kept if x)).strip()


def attribute_docs(obj: Any) -> dict[str, str]:
    """``{name: description}`` from the ``Attributes:`` section of a Google-style docstring."""
    out: dict[str, str] = {}
    inside, current = False, None
    for line in (inspect.getdoc(obj) or "").splitlines():
        if re.match(r"^\s*Attributes\s*:\s*$", line):
            inside = True
            continue
        if not inside:
            continue
        if _SECTION_RE.match(line) or (line.strip() and not line.startswith(" ")):
            break
        m = re.match(r"^\s{4}(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)$", line)
        if m:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif current and line.strip():
            out[current] += " " + line.strip()
    return {k: rst_to_markdown(v) for k, v in out.items()}


def module_sections(module: ModuleType) -> list[tuple[str, str]]:
    """``(heading, text)`` of each indented section of a module docstring.

    A section is an unindented heading line followed by indented lines (numpydoc-like), as the
    metrics module documents its alignment and conventions.
    """
    lines = (inspect.getdoc(module) or "").splitlines()
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        head = lines[i]
        if head.strip() and not head.startswith(" ") and i + 1 < len(lines) \
                and lines[i + 1].startswith("    "):
            body = []
            i += 1
            while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):
                body.append(lines[i])
                i += 1
            out.append((head.strip(), " ".join(_paragraphs(body))))
        else:
            i += 1
    return out


def metric_columns() -> list[schema.Column]:
    """Metric columns of the runs configs: every column a runs table has and a trace table not."""
    trace_names = {c.name for wl in schema.WORKLOADS for c in schema.COLUMNS[wl]}
    seen: dict[str, schema.Column] = {}
    for config in schema.RUNS_CONFIGS:
        for col in schema.COLUMNS[config]:
            if col.name not in trace_names and col.name != "metric_notes":
                seen.setdefault(col.name, col)
    return list(seen.values())


def _group_of(name: str, groups: list[tuple[str, list[str], str]], tags: list[str]) -> int | None:
    """Index of the group whose docstring names ``name`` (or its ``{δ}`` template)."""
    forms = {name} | {name.replace(f"_{tag}_", "_{δ}_") for tag in tags if f"_{tag}_" in name}
    if name.startswith("work_"):  # the work-window twins sit with the work window's group
        forms.add("work_<metric>")
    for i, (_, _, doc) in enumerate(groups):
        if any(f"``{form}``" in doc for form in forms):
            return i
    return None


def metric_groups(module: ModuleType | None = None) -> tuple[list[tuple[str, str]],
                                                             list[MetricGroup]]:
    """The card's metric documentation.

    Args:
        module: the metrics module (default ``llm_powertrace_ds.metrics``).

    Returns:
        ``(sections, groups)``: the module docstring's sections (how the node total is formed,
        conventions) and the metric groups, each with its title, shared definitions and one
        ``MetricDoc`` per metric column of the runs configs. Columns no group documents come
        last, in a group titled ``Other``.
    """
    if module is None:
        from llm_powertrace_ds import metrics

        module = metrics
    formulas: dict[str, str] = dict(module.metric_formulas())
    raw_groups: tuple[Any, ...] = tuple(module.METRIC_GROUPS)
    parsed: list[tuple[str, list[str], str]] = []
    for fn in raw_groups:
        doc = inspect.getdoc(fn) or ""
        lines = doc.splitlines()
        title = rst_to_markdown(lines[0].strip().rstrip(".")) if lines else fn.__name__
        intro_lines = []
        for line in lines[1:]:
            if line.strip().startswith("- "):
                break
            intro_lines.append(line)
        parsed.append((title, _paragraphs(intro_lines), doc))
    tags = [tag for tag, _ in getattr(module, "RAMP_WINDOWS", ())]
    groups = [MetricGroup(title, intro) for title, intro, _ in parsed]
    other = MetricGroup("Other")
    for col in metric_columns():
        text = formulas.get(col.name)
        if not text:
            func = getattr(module, col.name, None)
            text = docstring_summary(func) if callable(func) else col.description
        metric_doc = MetricDoc(col.name, col.unit, rst_to_markdown(" ".join(text.split())),
                               per_device=col.dtype is None)
        index = _group_of(col.name, parsed, tags)
        (groups[index] if index is not None else other).metrics.append(metric_doc)
    groups = [g for g in groups if g.metrics] + ([other] if other.metrics else [])
    return module_sections(module), groups
