"""From measuring swings to managing them: what it takes to make a load acceptable to the grid.

``llm-powertrace mitigate PROFILE`` reads a load profile — a ``t_s,power_w`` CSV from anyone, or
the Parquet that ``facility --out`` writes — and reports what each strategy does to the grid-side
profile and what it costs:

* **cap** (:func:`strategies.cap`): clip the load at C; cost: work above the cap;
* **floor** (:func:`strategies.floor`): never below F; cost: energy burnt below the floor;
* **storage** with a ramp limit R (:func:`strategies.storage`): the grid side ramps at most R;
  cost: storage power and usable energy, throughput, losses, cycles;
* **limits** (:func:`limits.search`): the cheapest of these combinations that meets a grid's
  ramp, swing and band limits, or a statement that none in the searched grid does.

Applied in the order cap → floor → storage; everything is computed at the profile's own
resolution (stated in the output), on a piecewise-constant profile (:mod:`.profile`). A profile
seen at a coarser resolution hides fast swings, so it under-sizes storage: resample only to ask
what a slower meter would see.
"""

from __future__ import annotations

from .apply import JSON_SHAPE, ORDER, Mitigation, Plan, apply
from .grid import DEFAULT_BANDS, DEFAULT_BANDS_HZ, RAMP_WINDOWS_S, Band, band_rms, profile_metrics
from .limits import Limits, SearchResult, load_limits, search
from .profile import MAX_SAMPLES, Profile, read_csv, read_facility, read_profile, resample
from .strategies import DEFAULT_EFFICIENCY

__all__ = [
    "DEFAULT_BANDS", "DEFAULT_BANDS_HZ", "DEFAULT_EFFICIENCY", "JSON_SHAPE", "MAX_SAMPLES", "ORDER",
    "RAMP_WINDOWS_S", "Band", "Limits", "Mitigation", "Plan", "Profile", "SearchResult", "apply",
    "band_rms", "load_limits", "profile_metrics", "read_csv", "read_facility", "read_profile",
    "resample", "search",
]
