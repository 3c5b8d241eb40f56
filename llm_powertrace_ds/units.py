"""Quantities with units on the command line, and site-scale figures as people read them.

One parser for every power, ramp, energy and time option (``20MW``, ``1MW/min``, ``16.7kW/s``,
``26.5kWh``, ``90min``), so ``facility`` and ``mitigate`` speak one vocabulary. A bare number keeps
the option's own SI meaning (``--ramp-limit 16667`` is 16,667 W/s), so older command lines still
work. Every value is converted once, here, to SI (W, W/s, J, s); JSON stays SI and names its unit
in the key (``power_w``, ``energy_j``); tables print site figures in MW, MWh and MW/min.

Units (case-sensitive, SI prefixes k, M, G; ``mW`` is milliwatt and is not accepted, so that
``mW`` can never be read as megawatt):

- power: ``W``, ``kW``, ``MW``, ``GW``;
- ramp: a power unit per ``s``, ``min`` or ``h`` (``W/s``, ``kW/s``, ``MW/s``, ``MW/min``, ...);
- energy: ``J``, ``kJ``, ``MJ``, ``GJ``, ``Wh``, ``kWh``, ``MWh``, ``GWh``;
- time: ``ms``, ``s``, ``min``, ``h``.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Literal

from .errors import UsageError
from .formatting import human_number

Kind = Literal["power", "ramp", "energy", "time"]

POWER_W: dict[str, float] = {"W": 1.0, "kW": 1e3, "MW": 1e6, "GW": 1e9}
"""Power units, in watts."""
TIME_S: dict[str, float] = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
"""Time units, in seconds."""
ENERGY_J: dict[str, float] = {
    "J": 1.0, "kJ": 1e3, "MJ": 1e6, "GJ": 1e9,
    "Wh": 3600.0, "kWh": 3.6e6, "MWh": 3.6e9, "GWh": 3.6e12}
"""Energy units, in joules."""
RAMP_W_PER_S: dict[str, float] = {
    f"{p}/{t}": pw / ts for p, pw in POWER_W.items() for t, ts in TIME_S.items() if t != "ms"}
"""Ramp units (a power unit per second, minute or hour), in watts per second."""

UNITS: dict[str, dict[str, float]] = {
    "power": POWER_W, "ramp": RAMP_W_PER_S, "energy": ENERGY_J, "time": TIME_S}
SI_UNIT: dict[str, str] = {"power": "W", "ramp": "W/s", "energy": "J", "time": "s"}
"""What a bare number means unless the option says otherwise."""

MAX_CHARS = 64
"""Longest text read as a quantity (an option value, never a document)."""

_QUANTITY = re.compile(
    r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]+(?:\s*/\s*[A-Za-z]+)?)?\s*")


def _unit_list(kind: str) -> str:
    names = list(UNITS[kind])
    if kind == "ramp":  # the ones people use; the rest follow the pattern
        names = ["W/s", "kW/s", "MW/s", "kW/min", "MW/min", "MW/h"]
    return ", ".join(names)


def parse_quantity(text: str, kind: Kind, *, option: str, bare_unit: str | None = None) -> float:
    """The SI value of ``text``, a number with an optional unit of ``kind``.

    Args:
        text: e.g. ``"1MW/min"``, ``"16.7 kW/s"``, ``"20MW"``, ``"16667"``.
        kind: ``power`` (→ W), ``ramp`` (→ W/s), ``energy`` (→ J) or ``time`` (→ s).
        option: the option's name, for the error (``--ramp-limit``).
        bare_unit: what a number without a unit means (default: the SI unit of ``kind``).

    Returns:
        The value in W, W/s, J or s; always finite.

    Raises:
        UsageError: one line naming the option and the value: not a number, an unknown or
            mismatched unit (``MW`` given for a ramp), or not finite.

    Example:
        >>> parse_quantity("1MW/min", "ramp", option="--ramp-limit")
        16666.666666666668
        >>> parse_quantity("2.5", "power", option="--site", bare_unit="MW")
        2500000.0
    """
    units = UNITS[kind]
    shown = repr(text) if len(text) <= MAX_CHARS else repr(text[:MAX_CHARS]) + "..."
    m = _QUANTITY.fullmatch(text) if len(text) <= MAX_CHARS else None
    if m is None:
        raise UsageError(f"{shown} is not a {kind} (a number with a unit: {_unit_list(kind)})",
                         field=option)
    number, unit = m.group(1), m.group(2)
    if unit is None:
        unit = bare_unit or SI_UNIT[kind]
    unit = re.sub(r"\s+", "", unit)
    if unit not in units:
        other = next((k for k, table in UNITS.items() if unit in table), None)
        why = f"{unit!r} is a unit of {other}, not of {kind}" if other else f"unknown unit {unit!r}"
        raise UsageError(f"{shown}: {why} (units: {_unit_list(kind)})", field=option)
    value = float(number) * units[unit]
    if not math.isfinite(value):
        raise UsageError(f"{shown} is not finite", field=option)
    return value


def option_type(kind: Kind, option: str, *,
                bare_unit: str | None = None) -> Callable[[str], float]:
    """An argparse ``type=`` that reads a quantity of ``kind`` and returns its SI value.

    A bad value stops argparse with ``argument OPTION: 'VALUE' ...`` (exit 2), one line.

    Example:
        >>> option_type("ramp", "--ramp-limit")("60MW/h")
        16666.666666666668
    """
    def parse(text: str) -> float:
        try:
            return parse_quantity(text, kind, option=option, bare_unit=bare_unit)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(exc.reason) from None
    parse.__name__ = option
    return parse


def to_unit(value_si: float, unit: str) -> float:
    """``value_si`` (W, W/s, J or s) expressed in ``unit`` (any unit this module knows).

    Example:
        >>> to_unit(16666.666666666668, "MW/min")
        1.0
    """
    for table in UNITS.values():
        if unit in table:
            return value_si / table[unit]
    raise ValueError(f"unknown unit {unit!r}")


def format_quantity(value_si: float | None, unit: str, digits: int = 4) -> str:
    """``value_si`` in ``unit`` for a table cell, the unit appended (``null`` for None).

    Example:
        >>> format_quantity(1.93e6, "MW"), format_quantity(9.53e7, "MWh", 3)
        ('1.93 MW', '0.0265 MWh')
    """
    if value_si is None:
        return "null"
    return f"{human_number(to_unit(value_si, unit), digits)} {unit}"


def format_mw(power_w: float | None, digits: int = 4) -> str:
    """A power in MW: ``format_mw(1.93e6)`` → ``'1.93 MW'``."""
    return format_quantity(power_w, "MW", digits)


def format_mwh(energy_j: float | None, digits: int = 4) -> str:
    """An energy in MWh (1 MWh = 3.6e9 J): ``format_mwh(3.6e9)`` → ``'1 MWh'``."""
    return format_quantity(energy_j, "MWh", digits)


def format_mw_per_min(ramp_w_per_s: float | None, digits: int = 4) -> str:
    """A ramp in MW/min (1 MW/min ≈ 16,666.7 W/s): ``format_mw_per_min(1e6 / 60)`` → ``'1 MW/min'``."""
    return format_quantity(ramp_w_per_s, "MW/min", digits)
