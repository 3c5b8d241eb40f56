"""Check a user-given name (split, config, metric, axis, column) against the valid ones.

One rule for every command and the query API: an unknown name is an error that names the value,
suggests the closest valid one (``difflib.get_close_matches``) and lists them all, instead of
an empty result.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path

from .errors import InputError
from .platforms import known_platforms


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


def check_platform(slug: str, existing: Iterable[str] = (), *, allow_new: bool = False,
                   field: str = "--platform", new_option: str = "--new-platform") -> str:
    """Return a user-given platform slug if it is known, already a split, or explicitly new.

    A slug is a split: a typo or a short form (``h100``) would otherwise open a split of its
    own beside the real one (``h100_sxm_80gb``).

    Args:
        slug: the slug the user gave.
        existing: the splits the target folder already holds (accepted as they are).
        allow_new: accept any slug that is a valid split name (the user asked for a new one).
        field: the option the slug came from, for the message.
        new_option: the option that allows a new slug, for the message.

    Raises:
        UnknownName: an unknown slug without ``allow_new`` (the message suggests the closest
            known one and lists them all), or a slug that is no valid split name.

    Example:
        >>> check_platform("l40s")
        'l40s'
        >>> check_platform("h100")
        Traceback (most recent call last):
        ...
        llm_powertrace_ds.names.UnknownName: field '--platform': unknown platform 'h100'; did you mean one of h100_nvl_94gb, h100_pcie_80gb, h100_sxm_80gb? known: ...; a new one needs --new-platform
    """
    valid = set(known_platforms()) | set(existing)
    if slug in valid:
        return slug
    if not re.match(r"^\w+(\.\w+)*$", slug):  # schema.SPLIT_NAME_RE: schema imports layout, which imports this module
        raise UnknownName(f"platform {slug!r} is no valid split name (letters, digits and _, "
                          "dot-separated)", field=field)
    if allow_new:
        return slug
    starting = sorted(v for v in valid if v.startswith(slug))  # h100 -> its form factors
    close = closest(slug, valid)
    hint = (f"; did you mean one of {', '.join(starting)}?" if len(starting) > 1
            else f"; did you mean {close!r}?" if close else ";")
    raise UnknownName(f"unknown platform {slug!r}{hint} known: {', '.join(sorted(valid))}; "
                      f"a new one needs {new_option}", field=field)
