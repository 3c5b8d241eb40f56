"""From measuring swings to managing them: what it takes to make a load acceptable to the grid.

``llm-powertrace mitigate PROFILE`` reads a load profile — a ``t_s,power_w`` CSV from anyone, or
the Parquet that ``facility --out`` writes — and reports what each strategy does to the grid-side
profile and what it costs:

* **cap** (:func:`strategies.cap`): clip the load at C; cost: work above the cap;
* **floor** (:func:`strategies.floor`): never below F; cost: energy burnt below the floor;
* **storage** with a ramp limit R (:func:`strategies.storage`, the controller of
  :mod:`.controller`): the grid side follows the load's slow mean, ramps at most R and restores
  the state of charge; cost: storage power and usable energy (converged, after a warm-up),
  starts and stops (ΔP²/(2R) each), throughput, losses, cycles;
* **limits** (:func:`limits.search`): the cheapest of these combinations that meets a grid's
  ramp (per time scale), dynamic range and band (spectral) limits, or a statement that none in
  the searched grid does.

Applied in the order cap → floor → storage; everything is computed at the profile's own
resolution (stated in the output), on a piecewise-constant profile (:mod:`.profile`). A profile
seen at a coarser resolution hides fast swings, so it under-sizes storage: resample only to ask
what a slower meter would see.
"""

from __future__ import annotations

from . import controller
from .apply import JSON_SHAPE, ORDER, Mitigation, Plan, apply
from .grid import DEFAULT_BANDS, DEFAULT_BANDS_HZ, RAMP_WINDOWS_S, Band, band_rms, profile_metrics
from .limits import Limits, SearchResult, load_limits, search
from .profile import (
    MAX_SAMPLES,
    Profile,
    read_csv,
    read_facility,
    read_profile,
    resample,
    skip,
)
from .strategies import DEFAULT_EFFICIENCY

__all__ = [
    "DEFAULT_BANDS", "DEFAULT_BANDS_HZ", "DEFAULT_EFFICIENCY", "JSON_SHAPE", "MAX_SAMPLES", "ORDER",
    "RAMP_WINDOWS_S", "Band", "Limits", "Mitigation", "Plan", "Profile", "SearchResult", "apply",
    "band_rms", "load_limits", "profile_metrics", "read_csv", "read_facility", "read_profile",
    "controller", "resample", "search", "skip",
]
