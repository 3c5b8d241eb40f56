"""Check a user-given name (split, config, metric, axis, column) against the valid ones.

One rule for every command and the query API: an unknown name is an error that names the value,
suggests the closest valid one (``difflib.get_close_matches``) and lists them all, instead of
an empty result.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path

from .errors import InputError


class UnknownName(InputError):
    """A name that is not among the valid ones (a split, config, metric, axis or column)."""


def closest(value: str, names: Iterable[str]) -> str | None:
    """The valid name ``value`` most likely meant, or ``None``.

    The closest by ``difflib.get_close_matches``; failing that, the first name (sorted) that
    starts with ``value``, so that a short form (``h100``) points to the slug
    (``h100_sxm_80gb``) that difflib's ratio finds too far away.

    Example:
        >>> closest("lroa", ["full", "lora"]), closest("h100", ["h100_sxm_80gb", "l40s"])
        ('lora', 'h100_sxm_80gb')
        >>> closest("zzz", ["full", "lora"]) is None
        True
    """
    pool = sorted(set(names))
    close = difflib.get_close_matches(value, pool, n=1)
    if close:
        return close[0]
    prefixed = [n for n in pool if value and n.startswith(value)]
    return prefixed[0] if prefixed else None


def check_name(value: str, valid: Iterable[str], *, what: str, field: str | None = None,
               where: str = "") -> str:
    """Return ``value`` if it is valid, else raise :class:`UnknownName`.

    Args:
        value: the name the user gave.
        valid: the names that exist.
        what: what the name is, for the message (``split``, ``metric``, ``axis``...).
        field: the option or argument it came from (``--split``).
        where: where the valid names come from, e.g. ``"in llm-powertrace (config finetune)"``.

    Raises:
        UnknownName: ``value`` is not in ``valid``.

    Example:
        >>> check_name("l40s", ["l40s", "cpu_proxy"], what="split")
        'l40s'
        >>> check_name("cpu-proxy", ["l40s", "cpu_proxy"], what="split", field="--split")
        Traceback (most recent call last):
        ...
        llm_powertrace_ds.names.UnknownName: field '--split': unknown split 'cpu-proxy'; did you mean 'cpu_proxy'? valid: cpu_proxy, l40s
    """
    names = sorted(set(valid))
    if value in names:
        return value
    close = closest(value, names)
    hint = f"; did you mean {close!r}?" if close else ""
    listing = ", ".join(names) if names else "(none)"
    place = f" {where}" if where else ""
    raise UnknownName(f"unknown {what} {value!r}{place}{hint} valid: {listing}"
                      if hint else f"unknown {what} {value!r}{place}; valid: {listing}",
                      field=field)


def check_split(root: str | Path, split: str | None, configs: Iterable[str], *,
                field: str = "--split") -> str | None:
    """Check that ``split`` exists in ``root`` for at least one of ``configs``.

    A wrong split used to give an empty result with exit code 0; now it is an error that lists
    the splits the folder holds for those configs.

    Raises:
        UnknownName: ``split`` is not among them.
    """
    if split is None:
        return None
    from . import layout

    folders = layout.shard_folders(root)
    configs = list(configs)
    valid = {s for c in configs for s in folders.get(c, {})}
    return check_name(split, valid, what="split", field=field,
                      where=f"in {root} (config {', '.join(configs)})")


def known_configs() -> list[str]:
    """Every config name the schema knows: the five base configs and ``<workload>-<family>``."""
    from . import schema

    return list(schema.ALL_CONFIGS) + [f"{w}-{f}" for w in schema.TRACE_CONFIGS
                                       for f in schema.MODEL_FAMILIES]
