"""Node-overhead and PUE models of ``facility`` (with their published sources)."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError, UsageError
from ..units import parse_quantity

MAX_NODE_IDLE_W = 1e6
"""Largest non-GPU idle power of one node accepted (1 MW: far above any server)."""
MAX_FRACTION = 10.0
"""Largest non-GPU power per watt of GPU power accepted."""
MAX_PUE = 10.0
"""Largest PUE accepted (the worst data centres surveyed stay below 3)."""


@dataclass(frozen=True)
class NodeOverhead:
    """Non-GPU power of one node: P_other(t) = idle_w + fraction · P_gpu,node(t).

    Attributes:
        name: preset name, ``custom`` or ``none``.
        idle_w: constant part per node (W).
        fraction: proportional part, W of non-GPU power per W of GPU power.
        source: where the numbers come from (printed in every output).
    """

    name: str
    idle_w: float
    fraction: float
    source: str

    def __post_init__(self) -> None:
        if not (math.isfinite(self.idle_w) and 0 <= self.idle_w <= MAX_NODE_IDLE_W):
            raise InputError(f"idle power {self.idle_w!r} W must be in [0, {MAX_NODE_IDLE_W:g}] "
                             "W per node", field="--node-overhead")
        if not (math.isfinite(self.fraction) and 0 <= self.fraction <= MAX_FRACTION):
            raise InputError(f"fraction {self.fraction!r} must be in [0, {MAX_FRACTION:g}]",
                             field="--node-overhead")

    def node_w(self, gpu_w: np.ndarray | float) -> np.ndarray | float:
        """Node IT power (W) for a node GPU power (W): P_gpu + idle_w + fraction · P_gpu."""
        return self.idle_w + (1.0 + self.fraction) * gpu_w


def _split_preset(name: str, system_max_w: float, gpus: int, gpu_max_w: float,
                  source: str) -> NodeOverhead:
    """Half of the non-GPU headroom at full GPU power as constant, half proportional."""
    headroom = system_max_w - gpus * gpu_max_w
    return NodeOverhead(name, headroom / 2, (headroom / 2) / (gpus * gpu_max_w),
                        source + f" -> non-GPU {headroom:.0f} W at full GPU power ({gpus} x "
                        f"{gpu_max_w:.0f} W); split half constant, half proportional to GPU "
                        "power (the split is an assumption, not a published figure)")


OVERHEAD_PRESETS: dict[str, NodeOverhead] = {
    "none": NodeOverhead("none", 0.0, 0.0, "no non-GPU power (GPUs only)"),
    "dgx-h100": _split_preset(
        "dgx-h100", 10_200.0, 8, 700.0,
        "NVIDIA DGX H100 user guide: system power 10.2 kW max with 8 x H100 SXM (700 W)"),
    "hgx-h100-measured": _split_preset(
        "hgx-h100-measured", 8_400.0, 8, 700.0,
        "Latif et al., 'Single-node power demand during AI training: measurements on an 8-GPU "
        "NVIDIA H100 system', IEEE Access 13 (2025) 61740: max observed 8.4 kW, 18 % below "
        "the rated 10.2 kW"),
    "dgx-a100": _split_preset(
        "dgx-a100", 6_500.0, 8, 400.0,
        "NVIDIA DGX A100 user guide: system power 6.5 kW max with 8 x A100 SXM4 (400 W)"),
}
"""Named node-overhead models. Presets describe an 8-GPU node; with another ``gpus_per_node``
the constant part is scaled by gpus_per_node / 8."""
DEFAULT_OVERHEAD = "auto"
"""``auto``: ``dgx-a100`` when every source run is on an A100 platform, else ``dgx-h100``
(the output says so when a platform has no preset of its own)."""


def auto_overhead(platforms: Sequence[str], gpus_per_node: int = 8) -> tuple[NodeOverhead, str]:
    """The preset for the source runs' platforms, and a sentence saying how it was chosen."""
    plats = sorted(set(platforms))
    if plats and all(p.startswith("a100") for p in plats):
        return parse_overhead("dgx-a100", gpus_per_node), "auto: A100 platform"
    own = [p for p in plats if not p.startswith(("h100", "h200"))]
    why = ("auto: H100/H200 platform" if not own else
           f"auto: no preset for platform(s) {', '.join(own)}; the DGX H100 figures stand in")
    return parse_overhead("dgx-h100", gpus_per_node), why


def parse_overhead(text: str, gpus_per_node: int = 8) -> NodeOverhead:
    """A preset name (:data:`OVERHEAD_PRESETS`) or ``IDLE:FRACTION`` (``1500:0.3``, ``1.5kW:0.3``).

    The idle power takes units (:mod:`llm_powertrace_ds.units`; a bare number is W).

    ``auto`` is resolved from the source runs' platforms by :func:`auto_overhead` (this function
    returns the ``dgx-h100`` preset for it).

    Raises:
        InputError: unknown name, or numbers that do not parse or are negative.
    """
    text = text.strip()
    if text == "auto":
        text = "dgx-h100"
    if text in OVERHEAD_PRESETS:
        preset = OVERHEAD_PRESETS[text]
        if gpus_per_node == 8 or preset.idle_w == 0:
            return preset
        scale = gpus_per_node / 8
        return NodeOverhead(preset.name, preset.idle_w * scale, preset.fraction,
                            preset.source + f"; constant part scaled by {gpus_per_node}/8 GPUs")
    idle, sep, frac = text.partition(":")
    try:
        if not sep:
            raise ValueError
        idle_w = parse_quantity(idle, "power", option="--node-overhead")
        return NodeOverhead("custom", idle_w, float(frac),
                            f"user-given: {idle_w:g} W per node + {float(frac):g} x GPU power")
    except (ValueError, UsageError):
        raise InputError(f"{text!r} is neither a preset ({', '.join(OVERHEAD_PRESETS)}) nor "
                         "IDLE:FRACTION (e.g. 1500:0.3 or 1.5kW:0.3; a bare idle power is W)",
                         field="--node-overhead") from None


@dataclass(frozen=True)
class Pue:
    """Power usage effectiveness: P_facility = PUE · P_IT.

    Attributes:
        constant: a constant PUE (≥ 1), or ``None`` for a curve.
        x: curve abscissa, increasing (IT load fraction of design IT power, or IT power in kW).
        y: PUE at each x (≥ 1); linear interpolation, held constant beyond the ends.
        x_name: ``it_load_fraction`` or ``it_power_kw``.
        source: the file or the constant (printed in every output).
    """

    constant: float | None = 1.0
    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()
    x_name: str = ""
    source: str = "constant"

    def __post_init__(self) -> None:
        values = (self.constant,) if self.constant is not None else self.y
        if not values or any(not (math.isfinite(v) and 1.0 <= v <= MAX_PUE) for v in values):
            raise InputError(f"PUE must be in [1, {MAX_PUE:g}], got {values!r}"[:200],
                             field="--pue")
        if self.constant is None and (len(self.x) != len(self.y) or
                                      any(b <= a for a, b in zip(self.x, self.x[1:], strict=False))):
            raise InputError("the PUE curve's first column must increase", field="--pue-curve")

    def apply(self, it_w: np.ndarray, design_it_w: float | None) -> np.ndarray:
        """Facility power (W) for IT power ``it_w`` (W); ``design_it_w`` for load fractions."""
        if self.constant is not None:
            return it_w * self.constant
        if self.x_name == "it_load_fraction":
            if not design_it_w:
                raise InputError("a PUE curve over it_load_fraction needs the GPUs' power limit, "
                                 "which the source runs do not report", field="--pue-curve")
            xs = it_w / design_it_w
        else:
            xs = it_w / 1000.0
        return it_w * np.interp(xs, self.x, self.y)

    def describe(self) -> str:
        if self.constant is not None:
            return f"constant PUE {self.constant:g}"
        return f"PUE curve over {self.x_name} from {self.source} ({len(self.x)} points)"


def load_pue_curve(path: str | Path) -> Pue:
    """Read a PUE curve: CSV with header ``it_load_fraction,pue`` or ``it_power_kw,pue``.

    Raises:
        InputError: naming the file, the line, the field and the value.
    """
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=path.name) from None
    header = [c.strip() for c in rows[0]] if rows else []
    if len(header) != 2 or header[1] != "pue" or header[0] not in ("it_load_fraction",
                                                                     "it_power_kw"):
        raise InputError(f"header {','.join(header)!r} is not 'it_load_fraction,pue' or "
                         "'it_power_kw,pue'", file=path.name, line=1)
    xs, ys = [], []
    for i, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        for name, cell in zip(header, (row + ["", ""])[:2], strict=True):
            try:
                value = float(cell)
            except ValueError:
                raise InputError(f"value {cell!r} is not a number", file=path.name, line=i,
                                 field=name) from None
            if not math.isfinite(value) or value < (1.0 if name == "pue" else 0.0):
                raise InputError(f"value {cell!r} is out of range", file=path.name, line=i,
                                 field=name)
        xs.append(float(row[0]))
        ys.append(float(row[1]))
    if not xs:
        raise InputError("no data rows", file=path.name)
    order = np.argsort(xs, kind="stable")
    x = tuple(float(xs[i]) for i in order)
    if any(b <= a for a, b in zip(x, x[1:], strict=False)):
        raise InputError("a load value appears twice", file=path.name, field=header[0])
    return Pue(None, x, tuple(float(ys[i]) for i in order), header[0], path.name)
