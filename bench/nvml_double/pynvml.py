"""``pynvml`` for the smoke check's CPU rehearsal: the Hopper-like double in place of the binding.

Only ``bench/gpu_smoke.py --nvml-double`` puts this folder first on ``PYTHONPATH`` (its steps
and the sampler process they start). The real binding (nvidia-ml-py) is loaded under another
name for its constants, error classes and ctypes structures; every function the project calls
is the double's (``bench/hopper_nvml.py``), driven by the load's edge log named in
``LLM_POWERTRACE_SMOKE_EDGES`` and behaving as ``LLM_POWERTRACE_SMOKE_DOUBLE`` says.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

_dist = importlib.metadata.distribution("nvidia-ml-py")
_spec = importlib.util.spec_from_file_location("_pynvml_real", str(_dist.locate_file("pynvml.py")))
assert _spec is not None and _spec.loader is not None
_real = importlib.util.module_from_spec(_spec)
sys.modules["_pynvml_real"] = _real  # the binding looks itself up by name
_spec.loader.exec_module(_real)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hopper_nvml import HopperNvml, PowerModel, read_edges  # noqa: E402

_edges_path = os.environ.get("LLM_POWERTRACE_SMOKE_EDGES")
_cache: dict[tuple[int, int], list[tuple[float, bool]]] = {}


def _edges() -> list[tuple[float, bool]]:
    """The load's switches, re-read only when its log changed."""
    path = Path(_edges_path) if _edges_path else None
    try:
        st = path.stat() if path is not None else None
    except FileNotFoundError:
        st = None
    key = (st.st_mtime_ns, st.st_size) if st is not None else (0, 0)
    if key not in _cache:
        _cache.clear()
        _cache[key] = read_edges(path)
    return _cache[key]


_double = HopperNvml(_real, PowerModel(_edges), os.environ.get("LLM_POWERTRACE_SMOKE_DOUBLE",
                                                               "hopper"))

for _name in dir(_real):
    if _name.startswith(("NVML_", "NVMLError", "c_nvml", "nvmlPciInfo")):
        globals()[_name] = getattr(_real, _name)
NVMLError = _real.NVMLError


def __getattr__(name: str) -> Any:
    if name.startswith("nvml") and hasattr(_double, name):
        return getattr(_double, name)
    raise AttributeError(name)
