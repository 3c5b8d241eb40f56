"""Mutation testing of the core modules with mutmut 3: kill rate per module.

    python bench/mutation.py [MODULE ...] [--work DIR] [--max-children N] [--markdown]
                             [--report-only | --rerun [--tests TEST ...] | --only REGEX]

For each module (``metrics``, ``importers``, ``validate``, ``scaling``, ``shards``, ``process``,
``convert``; all when none is named) it copies the repository's tracked and untracked,
not-ignored files into ``DIR/<module>`` (default: a folder under the system temp dir), writes a
``[tool.mutmut]`` section there that mutates only that module and selects only the tests that
cover it, lets ``mutmut run`` generate the mutants and collect which tests cover each function, runs the
mutants with ``bench/mutation_driver.py`` (one collected pytest session forked per mutant, only
the covering tests, fastest first: about 0.5 s a mutant instead of mutmut's ≈ 6 s fresh
``pytest.main``; the tests first run once without a mutant and must pass), records the verdicts
in mutmut's files and reads them back with ``mutmut results``. The working tree is never
touched (mutmut writes its ``mutants/`` folder into the copy).

Prints one row per module: mutants, killed, survived, judged equivalent (listed in
:data:`EQUIVALENT` with a one-line reason each), other verdicts (timeout, no tests, suspicious)
and the kill rate of the non-equivalent mutants, ``killed / (mutants − equivalent)``; then
every surviving mutant not judged equivalent, so the next test to write is in view. Every run
starts from a fresh copy (a verdict cached by mutmut could predate a new test).

Too slow for CI (minutes to about an hour per module on two cores): run it before resolving a test
issue and whenever a core module changes (``make mutation``).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Target:
    """One core module and the tests that cover it."""

    source: str
    """Glob of the mutated file(s), relative to the repository root."""
    tests: tuple[str, ...]
    """Test files or folders run against each mutant."""
    pytest_args: tuple[str, ...] = ()
    """Extra pytest arguments (e.g. ``-k`` to leave out a test too timing-sensitive to run
    beside mutmut's workers on a loaded machine)."""


TARGETS: dict[str, Target] = {
    # each module's whole test folder (tests mirror the package): a narrower selection leaves
    # the mutants of functions that only another file's tests reach "no tests" or "survived"
    "metrics": Target("llm_powertrace_ds/metrics/*.py", ("tests/llm_powertrace_ds/metrics",)),
    "importers": Target("llm_powertrace_ds/importers/*.py",
                        ("tests/llm_powertrace_ds/importers",)),
    "validate": Target("llm_powertrace_ds/validate.py",
                       ("tests/llm_powertrace_ds/test_validate.py",
                        "tests/llm_powertrace_ds/test_validate_behaviour.py")),
    "scaling": Target("llm_powertrace_ds/scaling/*.py", ("tests/llm_powertrace_ds/scaling",)),
    "shards": Target("llm_powertrace_ds/shards/*.py",
                     ("tests/llm_powertrace_ds/shards",
                      # stage/commit, iter_runs and repair are reached through the importers'
                      # streaming publish, the staging lifecycle and the folder checks
                      "tests/llm_powertrace_ds/importers/test_publish.py",
                      "tests/llm_powertrace_ds/test_staging.py",
                      "tests/llm_powertrace_ds/test_folder_integrity.py")),
    "process": Target("generation/sampler/process.py",
                      ("tests/generation/sampler/test_process.py",
                       "tests/generation/sampler/test_loop.py",
                       "tests/generation/sampler/test_child.py"),
                      # measures a real CPU burst: fails when other workers load the CPU
                      ("-k", "not cpu_proxy_burst_rises_and_falls")),
    "convert": Target("generation/sampler/convert.py",
                      ("tests/generation/sampler/test_convert.py",
                       "tests/generation/sampler/test_convert_behaviour.py")),
}

_V = "llm_powertrace_ds.validate."
_NAN_MIN = ("differs only on an all-NaN power series: NaN (with a RuntimeWarning) instead of "
            "±inf, and both compare False with the threshold")
_C = "generation.sampler.convert."
_INT64 = "spool ticks are int64 already, and numpy reads Python ints as int64"
EQUIVALENT: dict[str, str] = {
    # mutant name (as ``mutmut results`` prints it) -> why no test can tell it apart.
    _V + "x__longest_constant_run_ms__mutmut_3": "1 ms instead of 0 ms for < 2 readings never "
    "exceeds the 10 s stuck threshold",
    _V + "x__longest_constant_run_ms__mutmut_28": "1 ms instead of 0 ms for an all-NaN series "
    "never exceeds the 10 s stuck threshold",
    _V + "x_nominal_period_ms__mutmut_6": "one reading: the median of an empty diff is NaN, the "
    "same value the fallback returns",
    _V + "x_nominal_period_ms__mutmut_13": 'float("NAN") is float("nan")',
    _V + "x_validate_run__mutmut_103": _NAN_MIN,
    _V + "x_validate_run__mutmut_105": _NAN_MIN,
    _V + "x_validate_run__mutmut_160": _NAN_MIN,
    _V + "x_validate_run__mutmut_162": _NAN_MIN,
    _V + "x_validate_run__mutmut_120": "`and` -> `or`: a NaN period only arises with < 2 "
    "readings, where every check runs on empty intervals and flags nothing",
    _C + "x_t_ms_of__mutmut_7": _INT64,
    _C + "x_t_ms_of__mutmut_9": _INT64,
    _C + "x_spool_to_run__mutmut_38": "the spool's signal fields are float64 already",
    _C + "x_spool_to_run__mutmut_40": "the spool's signal fields are float64 already",
    _C + "x_spool_to_run__mutmut_111": "`meta.pop(key, None) or []` equals `meta.pop(key, []) "
    "or []`",
    _C + "x_spool_to_run__mutmut_119": "a second `incomplete` is dropped by Run.add_flags, "
    "which keeps each flag once",
    _C + "x_provenance_meta__mutmut_24": "the cpu_proxy source's device name is 'cpu_proxy', which "
    "schema.platform_from_name maps to platform cpu_proxy with flag cpu_proxy (and its power "
    "field 'cpu_proxy_model' adds none): both branches label the run alike",
    _C + "x_provenance_meta__mutmut_25": "the cpu_proxy source's device name is 'cpu_proxy', which "
    "schema.platform_from_name maps to platform cpu_proxy with flag cpu_proxy (and its power "
    "field 'cpu_proxy_model' adds none): both branches label the run alike",
    _C + "x_spool_to_run__mutmut_161": "Run.add_flags reads `quality_flags or []`: None and [] "
    "start the same list",
    _C + "x_spool_to_run__mutmut_176": "a device mismatch of exactly ENERGY_MISMATCH_PCT (5 %) "
    "between a trapezoid and a counter difference: a float tie, not built by any spool here",
    _C + "x_spool_to_run__mutmut_120": "a second `incomplete` is dropped by Run.add_flags, "
    "which keeps each flag once",
}
"""Surviving mutants judged equivalent, each with a one-line reason (see docs/mutation-testing.md)."""


def _judge(reason: str, function: str, *numbers: int,
           package: str = "llm_powertrace_ds.metrics") -> None:
    """Record mutants ``<package>.<function>__mutmut_<n>`` as equivalent (default: metrics)."""
    for n in numbers:
        EQUIVALENT[f"{package}.{function}__mutmut_{n}"] = reason


def _judge_shards(reason: str, function: str, *numbers: int) -> None:
    """:func:`_judge` for the shards package."""
    _judge(reason, function, *numbers, package="llm_powertrace_ds.shards")


_FAST = "a fast path's guard: with every mask true the general path gives the same values"
_DTYPE = ("the dtype numpy infers (int64 or float64 from these integers and floats) gives the "
          "same values")
_STRICT = "zip over sequences of one length by construction: strict or not, the same pairs"
_SIDE = "searchsorted's side='left' is its default"
_UNREACHED = ("unreachable through compute_run_metrics: a run without a gap-free node total "
              "gets every such metric nulled with the node total's reason first, and a null "
              "never overwrites")
_THREAD = ("where the seed group runs (inline or in its thread) changes no value: replay_into "
           "applies the same calls in the same order")
_CARRY = ("the seed aggregate keeps more carried points than the next block's t − δ can reach: "
          "the interpolation uses the same two neighbours")
_HP_EXACT = ("HighPass takes its exact block-by-block path (or a longer carry): sosfilt's "
             "values to rounding, only slower")
_judge(_UNREACHED, "ramps.x__group_level", 51, 52, 53, 54, 55, 56, 57, 58, 119,
       122, 123)
_judge(_UNREACHED, "ramps.x__group_ramps", 13, 17, 18, 19)
_judge(_UNREACHED, "ramps.x__group_seed_ramps", 10, 13, 14, 47, 77, 79, 80, 81)
_judge(_UNREACHED, "spectral.x__group_across", 5, 8, 9)
_judge(_UNREACHED, "spectral.x__group_oscillations", 8, 12, 17, 18)
_judge(_UNREACHED, "states.x__group_states", 12, 15, 16)
_judge("step events are distinct times after _events keeps one per time, so the median "
       "interval is > 0 and this branch is never taken", "spectral.x__group_oscillations", 91,
       101, 102, 103, 104, 105, 106, 107, 108)
_judge("the spectrum exists only when the node total does: `al is not None` always holds here",
       "spectral.x__spectrum_metrics", 89, 99, 125, 126, 128, 129)
_judge("no Welch bin lies within 1e-9 Hz of an edge except on it, and 5 Hz is the last bin",
       "spectral.x__spectrum_metrics", 36, 39, 41)
_judge("a float tie of band power and the floor: measure zero", "spectral.x__spectrum_metrics",
       102)
_judge("the peak is at bin 5 or above (5 cycles per window), so max(0, ·) and max(1, ·) agree",
       "spectral.x__spectrum_metrics", 145)
_judge("rfftfreq starts at 0 Hz: freqs[1] + freqs[0] is the bin width", "spectral.x__dominant_peak",
       3)
_judge("the band starts at bin 5 or above (5 cycles per window): band > 0 and band > 1 hold",
       "spectral.x__dominant_peak", 66, 67)
_judge("on a plateau argmax picks the first of the equal bins, the one > its left neighbour",
       "spectral.x__dominant_peak", 73)
_judge("a ratio exactly equal to the threshold: a float tie of measure zero",
       "spectral.x__dominant_peak", 80)
_judge("rfft's default axis (-1) is axis 1 of the 2-D frames", "spectral.x_welch_psd", 85)
_judge("Cauchy–Schwarz keeps each correlation in [-1, 1] up to rounding: the clip bounds never bind",
       "spectral.x__group_across", 191, 192, 202, 203)
_judge(_FAST, "spectral.x__group_across", 10, 11, 14)
_judge("with non-negative power, Σ peaks > 0 exactly when the node total's peak is > 0, and "
       "a 0 on either side fails the other test", "spectral.x__group_across", 33, 34, 36)
_judge("count is 0 or at least 200 (segments of 20 s or more): < 2, ≤ 2 and < 3 agree",
       "spectral.x__group_across", 132, 133)
_judge("a variance exactly at the floor: a float tie of measure zero", "spectral.x__group_across",
       166)
_judge(_STRICT, "spectral.x__group_across", 94, 97, 98)
_judge(_THREAD, "xǁ_SeedRampsǁ__init__", 7, 8, 9, 10, 11, 12, 16, 17, 20, 21, 22, 23, 24)
_judge("replay_into treats every recorded op other than 'set' as a null", "xǁ_Deferredǁnull",
       2, 3)
_judge("threadpoolctl limits every API to one thread instead of BLAS only: the same values",
       "x_compute_run_metrics", 2, 4)
_judge("'' is falsy like None, and reason is set before it is read", "x__compute", 24)
_judge("_capacity_w of a run without devices is None as well", "x__compute", 60)
_judge("al is None exactly when a reason was set: `and` and `or` agree", "x__compute", 62)
_judge("`inside = None` is falsy like False", "x_metric_formulas", 2, 24)
_judge("a group without a docstring reads one line 'XXXX', which is not a bullet",
       "x_metric_formulas", 5)
_judge(_FAST, "core.xǁAlignedǁvalues", 3)
_judge(_FAST, "core.xǁAlignedǁlag_diff", 12)
_judge("at k == n both branches give an empty mask", "core.xǁAlignedǁlag_pairs", 3)
_judge("an empty mask's dtype is never used: every caller returns on an empty mask first",
       "core.xǁAlignedǁlag_pairs", 6, 8)
_judge("the float diff is ±1.0, which compares equal to 1 and -1", "core.xǁAlignedǁsegments", 6)
_judge("writeable = None is writeable = False", "core.xǁAlignedǁsegments", 16)
_judge(_FAST, "core.x__sliding_range", 5, 30)
_judge("NaN (or None, which the float padding reads as NaN) at invalid points reaches only the "
       "windows that hold them, which the pair mask drops", "core.x__sliding_range", 6, 9)
_judge("the filler sits only in windows the pair mask drops", "core.x__sliding_range", 13)
_judge("at b == a the general path integrates over [a, a]: 0.0", "core.x__device_integral", 15)
_judge("astype(None) is float64", "core.x__device_integral", 18)
_judge("an end point repeated among the abscissae adds a zero-width trapezoid",
       "core.x__device_integral", 20, 21)
_judge(_DTYPE, "core.x__steady_tokens", 17, 19, 25, 66)
_judge(_STRICT, "core.x__steady_tokens", 20, 22, 23)
_judge("where span ≤ 0 the divided value (0/0, or over 2.0) is discarded by the outer where",
       "core.x__steady_tokens", 63, 65)
_judge(_DTYPE, "core.x__tokens", 30, 32)
_judge(_DTYPE, "core.x_event_windows", 3, 5, 12, 14)
_judge(_STRICT, "core.x_event_windows", 34, 37, 38)
_judge("the index only labels notes, which node_total discards", "core.x_node_total", 4)
_judge("numpy.percentile itself: the shortcut gives its values to the bit",
       "core.x__percentiles", 1, 3)
_judge("overwrite_input only spares a copy: the same values", "core.x__percentiles", 12, 15, 16)
_judge(_DTYPE, "core.x_align", 16, 20)
_judge(_SIDE, "core.x_align", 53)
_judge("bin counts past n are sliced off before the cumulative sum", "core.x_align", 66, 68, 75,
       77)
_judge("None assigned into a float array is NaN", "core.x_align", 82)
_judge("_Dev.index and _Dev.period_ms are never read by the metrics", "core.x__prepare_device",
       37, 40, 105, 108)
_judge('float("NAN") is float("nan")', "core.x__prepare_device", 49)
_judge("an empty gap index is never used for indexing (callers test .size), whatever its dtype",
       "core.x__prepare_device", 51, 53, 87, 89)
_judge("the period's median is taken on a subsample by design (any stride of a regular log "
       "gives the same median; `dt[::None]` is every interval)", "core.x__prepare_device", 55, 62)
_judge("flatnonzero of an all-false mask is the same empty index", "core.x__prepare_device", 82,
       85)
_judge("numpy reads any negative size in reshape as 'the rest'", "filters.x__window_extreme", 19)
_judge("the padding lies past n − size: it never enters a window", "filters.x_sliding_max", 9)
_judge("partition's default axis (-1) is axis 1 of the 2-D windows", "filters.x_running_median",
       32)
_judge("one unused extra A^t slot", "filters.xǁHighPassǁ__init__", 20)
_judge("the clipped lag only feeds entries where np.where puts 0, or lags already in [0, L-1]",
       "filters.xǁHighPassǁ__init__", 60, 61, 66)
_judge(_HP_EXACT, "filters.xǁHighPassǁ__init__", 91)
_judge("the section is stable (spectral radius < 1): radius < 1, ≤ 1 and < 2 agree",
       "filters.xǁHighPassǁ__init__", 82, 99, 100)
_judge(_HP_EXACT, "filters.xǁHighPassǁ__call__", 24, 25, 27, 56)
_judge(_DTYPE, "energy.x_counter_energy_j", 20, 22)
_judge(_FAST, "energy.x_counter_energy_j", 10)
_judge("sorting readings already in time order (stable) changes nothing",
       "energy.x_counter_energy_j", 13, 15)
_judge("numpy reads the sort kind case-insensitively", "energy.x_counter_energy_j", 24)
_judge("a zero step subtracts nothing", "energy.x_counter_energy_j", 28)
_judge("event_windows pairs a begin only with an end strictly after it",
       "energy.x__idle_power", 16)
_judge("_tokens returns None for 0 tokens, so `< 0` and `<= 0` agree", "energy.x__run_energy",
       92)
_judge(_STRICT, "energy.x__per_device_energy", 7, 10, 11)
_judge("abs into a new array instead of in place: the same values", "ramps.x__group_ramps", 64,
       66)
_judge(_STRICT, "ramps.x__group_ramps", 71, 74, 75, 89, 92, 93)
_judge(_STRICT, "ramps.x__group_seed_ramps", 63)
_judge(_FAST, "ramps.x__group_level", 175)
_judge("the filler sits only where no complete window is summed", "ramps.x__group_level", 183)
_judge(_SIDE, "ramps.x_seed_ramps", 8)
_judge("first == len gives an empty ramp array either way", "ramps.x_seed_ramps", 13)
_judge("cuts of every reading (step None) or of two readings per device are other block sizes: "
       "the same values (tested for block sizes 8, 50 and 2^18)", "ramps.x__union_blocks", 16, 21)
_judge("np.unique drops the repeated start or end cut", "ramps.x__union_blocks", 34)
_judge(_STRICT, "ramps.x__union_blocks", 59, 62, 63, 107, 110, 111)
_judge("readings at one time get one union index whatever their order after the sort",
       "ramps.x__union_blocks", 66, 68, 70)
_judge("a one-point grid gives no 1 s ramp either: the same empty result as no grid",
       "ramps.x__seed_aggregates", 12, 23, 24)
_judge(_DTYPE, "ramps.x__seed_aggregates", 16, 20)
_judge("g0 = None slices from the start like g0 = 0 (the first block only)",
       "ramps.x__seed_aggregates", 30)
_judge("the ramp buffer holds one value per union point at least δ after the first, fewer "
       "than the readings: one slot less or more is never reached", "ramps.x__seed_aggregates",
       36, 38)
_judge("grid and tick are None together", "ramps.x__seed_aggregates", 48)
_judge("an empty block cannot occur (every cut is a reading)", "ramps.x__seed_aggregates", 74)
_judge(_SIDE, "ramps.x__seed_aggregates", 96, 114, 187, 225)
_judge("first == len gives no ramp either way", "ramps.x__seed_aggregates", 100)
_judge("on the first block every t − δ is at or after its first point: split is 0 either way",
       "ramps.x__seed_aggregates", 107)
_judge(_CARRY, "ramps.x__seed_aggregates", 193, 194, 195, 196, 212, 227, 228, 231)
_judge("t0 and t_last are set together", "ramps.x__seed_aggregates", 233)
_judge(_DTYPE, "states.x__group_states", 123, 125)
_judge(_SIDE, "states.x__group_states", 132, 143)
_judge(_STRICT, "states.x__group_states", 160, 164, 165)
_judge("on the 0.1 s grid the first point at or after b − 10.01 s is the one at b − 10 s",
       "states.x__group_states", 120)
_judge("with depth ≤ 0 every point inside is at or above B − depth/2: the width is 0 either way",
       "states.x__group_states", 187, 195)
_judge("overlapping gaps merge the same whatever the order of equal starts",
       "states.x__group_gaps", 31, 33, 35)
_judge("cluster ids shifted by one rotate the per-cluster maxima: the same count and sum",
       "states.x__group_gaps", 49)
_judge(_DTYPE, "states.x__group_gaps", 53, 55)
_judge("a one-slot empty histogram adds nothing", "states.x__group_sampling", 6)
_judge("with equal lengths both branches add the two histograms", "states.x__group_sampling", 21)
_judge("no recorded kind gives None instead of [], and `not evs` returns [] for both",
       "core.x__events", 7, 9)
_judge("partitioning at k and k + 2 leaves one slot between them: the (k + 1)-th order "
       "statistic; at n − 2 it leaves the maximum at n − 1", "core.x__percentiles", 33, 35)
_judge("numpy reads the sort kind case-insensitively", "core.x__prepare_device", 22)
_judge("a device of 2 or more readings at distinct times has a span > 0",
       "energy.x__per_device_energy", 34, 37)
_judge("the event frequency is set in the 5 s pass instead of the 1 s one, from the same 1 s "
       "union values", "ramps.x__group_seed_ramps", 103)
_judge(_STRICT, "ramps.x__group_seed_ramps", 53, 56)
_judge("a carried point at 0 s lies at or before the union's start: np.interp never reads it "
       "(every t − δ is at or after the start, and at a repeated abscissa it takes the later "
       "point)", "ramps.x__seed_aggregates", 45)
_judge("new[1] is overwritten by the not_equal on the next line", "ramps.x__union_blocks", 78)
_judge("a negated sum of the outputs enters the covariance only as mean · meanᵀ, the same for "
       "−mean", "spectral.x__group_across", 124)
_judge("k == len(p) gives an empty lag difference either way", "ramps.x__tick_ramps", 10)
_judge("no bin lies within 1e-9 Hz of a band edge except on it", "spectral.x__dominant_peak", 18,
       21)
_judge("rfftfreq starts at 0 Hz: freqs[1] + freqs[0] is the bin width",
       "spectral.x__spectrum_metrics", 30)
_judge("no bin lies within 1e-9 Hz of a band edge except on it, and 5 Hz is the last bin",
       "spectral.x__spectrum_metrics", 49, 54, 56, 57)

# -- shards ---------------------------------------------------------------------------------
_S_CAST = ("the schema type is applied afterwards (pa.array's inferred type, or _table's cast "
           "to the column's type): the same values")
_S_MASKED = "changes only values under the null mask, which no reader sees"
_S_NO_DEVICE = ("a run without devices (which validate refuses as `empty`): an unreferenced "
                "value in an empty list column")
_S_MODE = "pyarrow opens a file for reading by default"
_S_REASON = ("pyarrow's errors always carry a message: the empty-message fallback is never "
             "taken")
_S_COST = ("selects which columns are decoded (cost only): the same rows and columns come out")
_judge_shards(_S_CAST, "encode.x__signal_array", 3, 5, 17, 19, 24, 26, 55, 57, 70, 72, 111, 114,
              117, 130, 132)
_judge_shards("np.ones with a float dtype: the t_ms branch's validity is all true, so only "
              "valid.all() reads it", "encode.x__signal_array", 12, 14)
_judge_shards(_STRICT, "encode.x__signal_array", 46, 49, 50)
_judge_shards("parts is assigned in both branches before it is read", "encode.x__signal_array",
              6)
_judge_shards("t_ms through the general branch: rint of int64 milliseconds (< 2^53) gives them "
              "back", "encode.x__signal_array", 66, 67)
_judge_shards(_S_NO_DEVICE, "encode.x__signal_array", 77, 79, 80)
_judge_shards("every device's cell is null: one unreferenced value behind empty offsets, the "
              "same null cells", "encode.x__signal_array", 86)
_judge_shards("the mask is computed when the column has no gap too, and passed only if any is "
              "set: the same array", "encode.x__signal_array", 89, 91, 120)
_judge_shards(_S_MASKED, "encode.x__signal_array", 98, 99, 101, 102, 108)
_judge_shards("an all-false validity mask is no mask", "encode.x__signal_array", 133)
_judge_shards(_STRICT, "encode.x__converted", 10, 13, 14, 15, 17, 18)
_judge_shards("unreachable: _encode_batch gives every column n cells", "encode.x__converted", 20)
_judge_shards("rows is never empty (a runs row has its metadata; requests name every column)",
              "encode.x__table", 5, 6, 17)
_judge_shards("unreachable: every field not in `extra` is in `full`, so in `converted`",
              "encode.x__table", 36, 37, 38, 39, 40)
_judge_shards(_S_MODE, "read.x_file_schema", 4)
_judge_shards(_S_MODE, "read.x_read_table", 10)
_judge_shards(_S_MODE, "read.x_iter_file_batches", 11)
_judge_shards(_S_REASON, "read.x_file_schema", 12, 15, 16)
_judge_shards(_S_REASON, "read.x_read_table", 18, 21, 22)
_judge_shards(_S_REASON, "pack.x__stream_files", 5, 8, 9)
_judge_shards(_S_COST, "read.x_iter_batches", 8, 10)
_judge_shards(_S_COST, "read.x_count_rows", 3, 5, 6, 7)
_judge_shards("table.column() is always a ChunkedArray", "read.x__signal_values", 3)
_judge_shards("zero_copy_only=None is falsy like False", "read.x__signal_values", 7, 13, 16, 20)
_judge_shards("int32 offsets without nulls convert zero-copy", "read.x__signal_values", 8)
_judge_shards("float32 values: DeviceSeries converts every signal to float64",
              "read.x__signal_values", 12)
_judge_shards("slice(0, None) / (0, 2) / (0,): every row of a run holds the same scalars, and "
              "the first is taken", "read.x__run_from_slice", 3, 5, 8)
_judge_shards("DeviceSeries converts t_ms to int64", "read.x__run_from_slice", 19)
_judge_shards("DeviceSeries converts t_ms to int64", "read.x_run_from_rows", 43, 45)
_judge_shards("np.array(..., dtype=None) of floats and NaN is float64; DeviceSeries converts "
              "ints", "read.x_run_from_rows", 17, 19)
_judge_shards("np.array([None], dtype=float) is NaN", "read.x_run_from_rows", 20)
_judge_shards("end = 0 compares the first id with itself and continues",
              "read.x_runs_from_table", 24)
_judge_shards("'UTF-8' and 'utf-8' name one codec", "publish.x_write_configs_block", 14)
_judge_shards("sort_keys=None is falsy like False", "publish.x_write_configs_block", 36)
_judge_shards("PyYAML's default Dumper writes the same YAML for plain dicts, lists and scalars",
              "publish.x_write_configs_block", 40)
_judge_shards("no configs line is 1000 characters wide", "publish.x_write_configs_block", 46)
_judge_shards("a held lock waits 1 s instead of 0 s, then skips the run the same way",
              "publish.x_repair_folder", 16)
_judge_shards("max(2, n) for a one-row table is one batch as well", "write.x__write_stream", 18)
_judge_shards("opened in text mode, the file descriptor is fsynced the same",
              "write.x__write_tmp", 16)
_S_PORT = ("the port's copy decision only: every cell is converted again (_encode_value, or "
           "pyarrow with the column's type), or the table falls back to datasets' own "
           "encode_batch (_Foreign): the same bytes (test_encode compares them on odd cells)")
_judge_shards(_S_PORT, "encode.x__cast", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 17, 18, 19, 20, 21,
              24, 25, 27, 31, 32, 33, 34)
_judge_shards(_S_PORT, "encode.x__encode", 19, 23, 24)
_judge_shards(_S_PORT, "encode.x__first_non_null", 4, 7, 8, 9, 10, 11, 14, 16)
_judge_shards("Path.rglob of a missing folder yields nothing", "pack.x__pack_into", 8)
_judge_shards("the text starts with '---\\n': '\\n---\\n' cannot start before index 3",
              "publish.x_split_front_matter", 5, 7)
_judge_shards("every temporary in `written` was written and fsynced: it exists when removed",
              "write.x_write_tables_all_or_nothing", 16, 17, 22, 23, 29, 30)

# -- importers (judged by the helpers' per-mutant checks against the test files, read back) --
_I = "llm_powertrace_ds.importers."
_I_CODEC = "'UTF-8' and 'utf-8' name one codec (codec lookup is case-insensitive)"
_I_FALSY = "None is falsy like False, the only way the flag is read"
_I_MAX = ("max(..., default=…) over a published run's devices: a publishable run has a device "
          "with samples, so the default is never used")
EQUIVALENT.update({
    _I + "requests.x_attach_requests__mutmut_57": _I_MAX,
    _I + "requests.x_attach_requests__mutmut_59": _I_MAX,
    _I + "requests.x_attach_requests__mutmut_63": _I_MAX,
    _I + "requests.x_attach_requests__mutmut_66": "the rows' run_id is overwritten by "
    "requests_table when publishing and read by nothing else",
    _I + "requests.x_attach_requests__mutmut_67": "the rows' platform is overwritten by "
    "requests_table when publishing and read by nothing else",
    _I + "requests.x_attach_requests__mutmut_99": _I_FALSY,
    _I + "requests_common.x_to_run_clock__mutmut_72": "line=None is the keyword's default",
    _I + "requests_csv.x_read_csv_requests__mutmut_9": _I_CODEC,
    _I + "requests_vllm.x_read_json_object__mutmut_5": _I_CODEC,
    _I + "requests_vllm.x_requests_from_arrays__mutmut_29": _I_FALSY,
    _I + "requests_vllm.x_requests_from_arrays__mutmut_54": _I_FALSY,
    _I + "requests_vllm.x_requests_from_arrays__mutmut_68": _I_FALSY,
    _I + "requests_vllm.x_requests_from_arrays__mutmut_82": _I_FALSY,
    _I + "requests_vllm.x_requests_from_arrays__mutmut_91": "both arrays come from required "
    "columns (a list or an error), so neither assert can fail either way",
    _I + "requests_sglang.x_read_sglang_requests__mutmut_6": _I_CODEC,
    _I + "requests_sglang_log.x_read_print_requests_log__mutmut_2": _I_FALSY,
    _I + "requests_sglang_log.x_read_print_requests_log__mutmut_13": _I_FALSY,
    _I + "mlenergy_v2.x__positive__mutmut_8": 'float("NAN") is float("nan")',
    _I + "mlenergy_v2.x__read_json__mutmut_4": _I_CODEC,
    _I + "publish.x_import_stream__mutmut_26": _I_FALSY,
})

# powertrace_csv and meta_files (helper D's per-mutant driver)
EQUIVALENT.update({
    _I + 'powertrace_csv.x__scaled__mutmut_6': 'float("NAN") is the same NaN as float("nan") (Python parses the token case-insensitively)',
    _I + 'powertrace_csv.x_build_devices__mutmut_40': 'keys=None only forces the stable-sort split, which yields the same devices/rows/lines as the round-robin fast path (speed only; see test_round_robin_split_equals_the_stable_sort)',
    _I + 'powertrace_csv.x_build_devices__mutmut_47': 'small=None sorts the float gpu ids instead of int16 keys: the same stable order (speed only)',
    _I + 'powertrace_csv.x_build_devices__mutmut_49': 'gpu.max() < 2*15 only moves the int16/float switch down to 30; both stable sorts give the same order for ids < 30 (speed only)',
    _I + 'powertrace_csv.x_build_devices__mutmut_57': "'small and False' always sorts the float ids: the same stable order (speed only)",
    _I + 'powertrace_csv.x_build_devices__mutmut_59': 'gpu.astype(None) is float64: the same stable order as the int16 keys (speed only)',
    _I + 'powertrace_csv.x_build_devices__mutmut_61': 'np.argsort accepts kind="STABLE" (case-insensitive): the same sort',
    _I + 'powertrace_csv.x_stage_events__mutmut_15': 'np.argsort accepts kind="STABLE" (case-insensitive): the same sort',
    _I + 'powertrace_csv.x_build_devices__mutmut_79': 'zip(bounds[:-1], bounds[1:]) always has equal lengths: strict=None changes nothing',
    _I + 'powertrace_csv.x_build_devices__mutmut_82': 'zip(bounds[:-1], bounds[1:]) always has equal lengths: dropping strict changes nothing',
    _I + 'powertrace_csv.x_build_devices__mutmut_86': 'zip(bounds[:-1], bounds[1:]) always has equal lengths: strict=False changes nothing',
    _I + 'powertrace_csv.x_build_devices__mutmut_91': "keys are 'signal:<name>' and no SIGNALS target holds ':': split(':') gives the same [1]",
    _I + 'powertrace_csv.x_build_devices__mutmut_92': "keys are 'signal:<name>' and no SIGNALS target holds ':': rsplit gives the same [1]",
    _I + 'powertrace_csv.x_build_devices__mutmut_94': "keys are 'signal:<name>' and no SIGNALS target holds ':': split(':', 2) gives the same [1]",
    _I + 'powertrace_csv.x_csv_run_id__mutmut_17': 'Factorizer codes the first non-null run id 0, so first==0 and (codes>0)&(codes!=0) == (codes>=0)&(codes!=0)',
    _I + 'powertrace_csv.x_csv_run_id__mutmut_18': 'Factorizer codes the first non-null run id 0, so first==0 and (codes>=1)&(codes!=0) == (codes>=0)&(codes!=0)',
    _I + 'powertrace_csv.x_map_meta__mutmut_102': 'run_id is in schema.RUN_LEVEL_FIELDS of every workload, so \'or k == "run_id"\' is redundant',
    _I + 'powertrace_csv.x_map_meta__mutmut_103': 'run_id is in schema.RUN_LEVEL_FIELDS of every workload, so \'or k == "run_id"\' is redundant',
    _I + 'powertrace_csv.x_map_meta__mutmut_84': 'run_id is in schema.RUN_LEVEL_FIELDS of every workload, so \'and k != "run_id"\' is redundant',
    _I + 'powertrace_csv.x_map_meta__mutmut_85': 'run_id is in schema.RUN_LEVEL_FIELDS of every workload, so \'and k != "run_id"\' is redundant',
    _I + 'powertrace_csv.x_parse_parallelism__mutmut_39': "tp >= 1 with dp == pp == 1 differs from tp > 1 only at tp == 1, which the 'single' branch already took",
    _I + 'powertrace_csv.x_stage_events__mutmut_34': 'Event t_ms is a placeholder: assemble_run (the only consumer) sets it from the utc ms before use',
    _I + 'powertrace_csv.x_stage_events__mutmut_40': 'Event t_ms is a placeholder: assemble_run (the only consumer) sets it from the utc ms before use',
    _I + 'powertrace_csv.x_stage_events__mutmut_46': 'zip(labelled[change], seq[change]) always has equal lengths: strict=None changes nothing',
    _I + 'powertrace_csv.x_stage_events__mutmut_49': 'zip(labelled[change], seq[change]) always has equal lengths: dropping strict changes nothing',
    _I + 'powertrace_csv.x_stage_events__mutmut_50': 'zip(labelled[change], seq[change]) always has equal lengths: strict=False changes nothing',
    _I + 'powertrace_csv.x_read_trace__mutmut_3': 'ArrowCsvReader only tests cut_last == "drop"; any other value (None) is the same as "error"',
    _I + 'powertrace_csv.x_read_trace__mutmut_6': 'ArrowCsvReader only tests cut_last == "drop"; any other value ("XXerrorXX") is the same as "error"',
    _I + 'powertrace_csv.x_read_trace__mutmut_7': 'ArrowCsvReader only tests cut_last == "drop"; any other value ("ERROR") is the same as "error"',
    _I + 'powertrace_csv.x__round_robin__mutmut_9': 'a head of 1026 vs 1025 only lets a strictly rising cycle of exactly 1026 GPUs take the fast path, which splits rows exactly as the stable sort does',
    _I + 'powertrace_csv.x__round_robin__mutmut_36': 'numpy treats reshape(-2, k) like reshape(-1, k) (any negative size is the unknown dimension)',
    _I + 'meta_files.x__check_yaml_size__mutmut_3': 'with node None the stack holds [None]: one count and no children, never near the limit, so nothing changes',
    _I + 'meta_files.x_file_sha256__mutmut_13': 'fh.read(None) reads the rest of the file in one block: the same digest (memory only)',
    _I + 'meta_files.x_file_sha256__mutmut_15': 'a 2 MiB block instead of 1 MiB: the same digest',
    _I + 'meta_files.x_file_sha256__mutmut_16': 'a 2 MiB block instead of 1 MiB: the same digest',
    _I + 'meta_files.x_read_structured__mutmut_6': '"UTF-8-SIG" names the same codec as "utf-8-sig" (codec lookup is case-insensitive)',
    _I + 'meta_files.x_read_structured__mutmut_46': "yaml.compose without Loader uses yaml.Loader, whose composer and resolver are SafeLoader's: the same node tree (composing constructs nothing)",
})

# nvidia_smi, timestamps and values (helper E's per-mutant driver)
EQUIVALENT.update({
    _I + 'values.x__by_distinct__mutmut_17': 'np.empty(n, dtype=None) is float64, the same dtype as np.float64',
    _I + 'values.x__by_distinct__mutmut_19': 'np.empty(n) without dtype is float64, the same as dtype=np.float64',
    _I + 'values.x__by_distinct__mutmut_46': 'inverse is already 1-D; ndarray.reshape(None) returns it unchanged (numpy 2.4)',
    _I + 'values.x__by_distinct__mutmut_48': 'inverse is already 1-D; reshape(-2) is accepted as an unknown dimension like -1 (numpy 2.4)',
    _I + 'values.x__by_distinct__mutmut_5': 'the list branch only ever gets Python str cells: np.asarray infers the same <U dtype (an empty list gives an empty array and an empty result either way)',
    _I + 'values.x__by_distinct__mutmut_7': 'same as mutmut_5: np.asarray of str cells infers the <U dtype that dtype=str gives',
    _I + 'values.x__check_nonnegative__mutmut_10': "str(pa.StringScalar) is the cell's text, so the message is the same with or without .as_py()",
    _I + 'values.x_numeric_converter__mutmut_2': 'the initial value of out is overwritten on every path before it is read',
    _I + 'values.x_numeric_converter__mutmut_3': 'disables the Arrow fast path: the exact per-distinct parser gives the same values and errors by design (TYPED_ATTR contract); speed only',
    _I + 'values.x_numeric_converter__mutmut_26': 'disables the numpy float fast path: _by_distinct gives the same values and errors; speed only',
    _I + 'values.x_numeric_converter__mutmut_27': 'astype(None) is astype(float64)',
    _I + 'values.x_numeric_converter__mutmut_28': 'np.asarray(None, dtype=str).astype(float) raises ValueError, caught: falls back to _by_distinct with the same result; speed only',
    _I + 'values.x_numeric_converter__mutmut_29': 'np.asarray of str cells infers the same <U dtype as dtype=str (empty list: empty float array either way)',
    _I + 'values.x_numeric_converter__mutmut_30': 'np.asarray(dtype=str) raises TypeError, caught: falls back to _by_distinct with the same result; speed only',
    _I + 'values.x_numeric_converter__mutmut_31': 'same as mutmut_29',
    _I + 'values.xǁFactorizerǁconverter__mutmut_10': 'with no distinct cells codes is an empty int64 array and codes[inverse] is the same empty int64 array as np.zeros(0, np.int64)',
    _I + 'values.xǁFactorizerǁconverter__mutmut_21': 'count= is only a preallocation hint for np.fromiter; same array',
    _I + 'values.xǁFactorizerǁconverter__mutmut_5': 'a list of Python ints becomes int64 on this platform; the empty (float64) case is never indexed (the else branch returns zeros)',
    _I + 'values.xǁFactorizerǁconverter__mutmut_7': 'same as mutmut_5',
    _I + 'timestamps.x__explicit_utc_ms__mutmut_13': "only rows whose zone is an offset reach _explicit_utc_ms; a text matching _TS_RE with an offset contains no 'Z'",
    _I + 'timestamps.x__explicit_utc_ms__mutmut_14': "same as mutmut_13: no 'z' can occur in such a text either",
    _I + 'timestamps.x__explicit_utc_ms__mutmut_15': 'same as mutmut_13: the replacement never applies',
    _I + 'timestamps.x__to_utc_ms__mutmut_33': "texts and zones always have the same length (one zone per text), so zip's strict flag never matters",
    _I + 'timestamps.x__to_utc_ms__mutmut_36': 'same as mutmut_33',
    _I + 'timestamps.x__to_utc_ms__mutmut_37': 'same as mutmut_33',
    _I + 'timestamps.x__to_utc_ms__mutmut_58': 'the per-row loop only runs after the array parse failed; for _TS_RE texts np.datetime64 fails with and without the ms unit on the same rows (checked: 19+ fraction digits, Feb 30, 24:00, month 13), so the same row is named',
    _I + 'timestamps.x__to_utc_ms__mutmut_77': "unreachable: the 'unparsable timestamps' raise needs the array astype to fail while every per-row np.datetime64 succeeds; both parsers agree (checked on single values and all pairs of a candidate set), so the loop always raises first",
    _I + 'timestamps.x__to_utc_ms__mutmut_78': "unreachable 'unparsable timestamps' raise (see mutmut_77)",
    _I + 'timestamps.x__to_utc_ms__mutmut_79': "unreachable 'unparsable timestamps' raise (see mutmut_77)",
    _I + 'timestamps.x__to_utc_ms__mutmut_80': "unreachable 'unparsable timestamps' raise (see mutmut_77)",
    _I + 'timestamps.x__to_utc_ms__mutmut_81': "unreachable 'unparsable timestamps' raise (see mutmut_77)",
    _I + 'timestamps.x__to_utc_ms__mutmut_82': "unreachable 'unparsable timestamps' raise (see mutmut_77)",
    _I + 'timestamps.x__to_utc_ms__mutmut_83': "unreachable 'unparsable timestamps' raise (see mutmut_77)",
    _I + 'timestamps.x__to_utc_ms__mutmut_84': "unreachable 'unparsable timestamps' raise (see mutmut_77)",
    _I + 'timestamps.x__to_utc_ms__mutmut_85': "unreachable 'unparsable timestamps' raise (see mutmut_77)",
    _I + 'timestamps.x__to_utc_ms__mutmut_86': "unreachable 'unparsable timestamps' raise (see mutmut_77)",
    _I + 'timestamps.x__to_utc_ms__mutmut_87': "unreachable 'unparsable timestamps' raise (see mutmut_77)",
    _I + 'timestamps.x__to_utc_ms__mutmut_88': "unreachable 'unparsable timestamps' raise (see mutmut_77)",
    _I + 'timestamps.x_local_to_utc_ms__mutmut_15': 'offsets are Python ints from a non-empty list (len(local_ms) > 0 here): np.array infers int64',
    _I + 'timestamps.x_local_to_utc_ms__mutmut_17': 'same as mutmut_15',
    _I + 'timestamps.x_local_to_utc_ms__mutmut_25': 'inverse is 1-D already; reshape(None) returns it unchanged (numpy 2.4)',
    _I + 'timestamps.x_local_to_utc_ms__mutmut_27': 'inverse is 1-D already; reshape(-2) acts as -1 (numpy 2.4)',
    _I + 'timestamps.x_timestamp_converter__mutmut_1': 'disables the Arrow fixed-width fast path: the exact path gives the same ms and errors; speed only',
    _I + 'timestamps.x_timestamp_converter__mutmut_13': 'disables the Arrow all-Z fast path: the exact path gives the same ms and errors; speed only',
    _I + 'timestamps.x_timestamp_converter__mutmut_16': 'disables the Arrow zone-less fast path: the exact path gives the same ms and errors; speed only',
    _I + 'nvidia_smi.x__reasons__mutmut_10': "the keys are 'reason:<name>' with one colon (REASON_BITS names have none): split(':') gives the same [1]",
    _I + 'nvidia_smi.x__reasons__mutmut_11': 'same as mutmut_10: rsplit on the single colon is split',
    _I + 'nvidia_smi.x__reasons__mutmut_13': 'same as mutmut_10: maxsplit 2 on one colon is maxsplit 1',
    _I + 'nvidia_smi.x__reasons__mutmut_27': 'np.zeros(n, dtype=None) is float64',
    _I + 'nvidia_smi.x__reasons__mutmut_29': 'np.zeros(n) is float64',
    _I + 'nvidia_smi.x_build_devices__mutmut_24': "keys are 'signal:<target>' with one colon: split(':') gives the same [1]",
    _I + 'nvidia_smi.x_build_devices__mutmut_25': 'same as mutmut_24 (rsplit)',
    _I + 'nvidia_smi.x_build_devices__mutmut_27': 'same as mutmut_24 (maxsplit 2)',
    _I + 'nvidia_smi.x_import_nvidia_smi__mutmut_25': 'gpu_keys never reads its factors argument',
    _I + 'nvidia_smi.x_import_nvidia_smi__mutmut_39': 'side is then also computed when meta_path is given, but the meta_path branch is taken first and side is never read there (and a name too long for a sidecar is no file: common.companion)',
    _I + 'nvidia_smi.x_infer_gpu_count__mutmut_9': 'astype(None) is astype(float64)',
    _I + 'nvidia_smi.x_infer_gpu_count__mutmut_33': 'the extra candidates n = len(ts) and len(ts)+1 never have a boundary row (pos <= len(ts)-2 < n-1), so they are skipped',
    _I + 'nvidia_smi.x_infer_gpu_count__mutmut_53': 'the skip is monotone in n: no boundary row for n means every segment is shorter than n+1, so none for larger n either; no inside row means all segments have 1 row; so break == continue',
    _I + 'nvidia_smi.x_read_log__mutmut_5': "ArrowCsvReader's default cut_last is 'drop'",
    _I + 'nvidia_smi.x_read_user_meta__mutmut_9': "load_meta_file turns every key into str, so raw.get(None) is None, as raw.get('workload') always is here (check_meta_keys refuses a 'workload' key first)",
    _I + 'nvidia_smi.x_read_user_meta__mutmut_13': "unreachable: checks.check_meta_keys refuses any 'workload' key (it is in IMPORTER_KEYS) before this raise",
    _I + 'nvidia_smi.x_read_user_meta__mutmut_14': 'unreachable raise (see mutmut_13)',
    _I + 'nvidia_smi.x_read_user_meta__mutmut_15': 'unreachable raise (see mutmut_13)',
    _I + 'nvidia_smi.x_read_user_meta__mutmut_16': 'unreachable raise (see mutmut_13)',
    _I + 'nvidia_smi.x_read_user_meta__mutmut_17': 'unreachable raise (see mutmut_13)',
    _I + 'nvidia_smi.x_read_user_meta__mutmut_18': 'unreachable raise (see mutmut_13)',
    _I + 'nvidia_smi.x_read_user_meta__mutmut_19': 'unreachable raise (see mutmut_13)',
    _I + 'nvidia_smi.x_read_user_meta__mutmut_20': 'unreachable raise (see mutmut_13)',
    _I + 'nvidia_smi.x_read_user_meta__mutmut_21': 'unreachable raise (see mutmut_13)',
    _I + 'nvidia_smi.x_read_user_meta__mutmut_22': 'unreachable raise (see mutmut_13)',
    _I + 'nvidia_smi.x_import_nvidia_smi__mutmut_114': "power_key is 'power:<query>' with one colon (the queries have none): split/rsplit/maxsplit variants give the same [1]",
    _I + 'nvidia_smi.x_import_nvidia_smi__mutmut_115': "power_key is 'power:<query>' with one colon (the queries have none): split/rsplit/maxsplit variants give the same [1]",
    _I + 'nvidia_smi.x_import_nvidia_smi__mutmut_117': "power_key is 'power:<query>' with one colon (the queries have none): split/rsplit/maxsplit variants give the same [1]",
})

# dcgm (after test_dcgm_malformed.py and test_dcgm_assemble_pins.py)
_I_LAST = "the last line: nothing follows it, so continue and break agree"
_I_DT = "the dtype numpy infers (float64, int64) or DeviceSeries' conversion gives the same values"
EQUIVALENT.update({
    _I + "dcgm.x__parse__mutmut_100": _I_LAST,
    _I + "dcgm.x__parse__mutmut_127": _I_LAST,
    _I + "dcgm.x__parse__mutmut_99": "lineno == len(lines) only for a non-empty last line, so "
    "the text does not end in a newline: not endswith(anything ending in one) holds too",
    _I + "dcgm.x__parse__mutmut_126": "lineno == len(lines) only for a non-empty last line, so "
    "the text does not end in a newline: not endswith(anything ending in one) holds too",
    _I + "dcgm.x__parse__mutmut_137": "cells and tags have one length (checked just before)",
    _I + "dcgm.x__parse__mutmut_140": "cells and tags have one length (checked just before)",
    _I + "dcgm.x__parse__mutmut_141": "cells and tags have one length (checked just before)",
    _I + "dcgm.x__parse__mutmut_143": "a float64 array reads None as NaN",
    _I + "dcgm.x__parse__mutmut_4": _I_CODEC,
    _I + "dcgm.x_import_dcgm__mutmut_103": _I_DT,
    _I + "dcgm.x_import_dcgm__mutmut_107": _I_DT,
    _I + "dcgm.x_import_dcgm__mutmut_109": _I_DT,
    _I + "dcgm.x_import_dcgm__mutmut_70": _I_DT,
    _I + "dcgm.x_import_dcgm__mutmut_72": _I_DT,
    _I + "dcgm.x_import_dcgm__mutmut_75": _I_DT,
    _I + "dcgm.x_import_dcgm__mutmut_77": _I_DT,
    _I + "dcgm.x_import_dcgm__mutmut_158": "assemble_run already set start_time to the first "
    "tick, which is the given start: the same datetime",
    _I + "dcgm.x_import_dcgm__mutmut_159": "assemble_run already set start_time to the first "
    "tick, which is the given start: the same datetime",
    _I + "dcgm.x_import_dcgm__mutmut_20": "float(None) raises TypeError, caught as NaN: the same "
    "error",
})


# -- importers, sixth session (test_arrow_pins.py, test_importers_more_pins.py) --
EQUIVALENT.update({
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_scanned_lines__mutmut_30':
        'crlf = lengths >= 0 adds only zero-length lines, whose byte before the end is the previous LF (or raw[-1], never CR: a file ending in a lone CR already fell back as bare CR), so crlf stays False for them',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_scanned_lines__mutmut_36':
        'crlf[:] = None on a numpy bool array stores False, identical to crlf[:] = False',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_scanned_lines__mutmut_73':
        'branch runs only when rows is empty: rows - 1 and rows + 1 are the same empty int64 array',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_scanned_lines__mutmut_74':
        'branch runs only when rows is empty: rows + 2 and rows + 1 are the same empty int64 array',
    _I + 'arrow_values.x__hashed__mutmut_8':
        'to_numpy(zero_copy_only=None): None is falsy like False, and index_in against unique(values) has no nulls, so the int32 result converts the same either way (ChunkedArray only checks truthiness)',
    _I + 'arrow_values.x__mostly_empty__mutmut_18':
        "the 'or [np.zeros(0, ...)]' default is used only for a ChunkedArray with no chunks, so n == 0 and the function returns None whatever the dtype",
    _I + 'arrow_values.x__mostly_empty__mutmut_20':
        "the 'or [np.zeros(0, ...)]' default is used only for a ChunkedArray with no chunks, so n == 0 and the function returns None whatever the dtype",
    _I + 'arrow_values.x__mostly_empty__mutmut_21':
        "the 'or [np.zeros(1, bool)]' default is used only for a ChunkedArray with no chunks: rows stays empty and n == 0 returns None as before",
    _I + 'arrow_values.x__mostly_empty__mutmut_25':
        '(n == 0 and len(rows) == n) or len(rows) > n // 4 decides the same: n == 0 implies len(rows) == 0; for n >= 1 an all-filled column has n > n // 4',
    _I + 'arrow_values.x__mostly_empty__mutmut_30':
        'for an integer count r, r > n // 4 iff r > n / 4 (floor(x) < r iff x < r for integer r)',
    _I + 'arrow_values.x__offsets__mutmut_15':
        "empty chunk: np.zeros(1, float) instead of int32; np.diff of one element is empty and '> 0' gives the same empty bool array",
    _I + 'arrow_values.x__offsets__mutmut_17':
        "empty chunk: np.zeros(1) float instead of int32; np.diff of one element is empty and '> 0' gives the same empty bool array",
    _I + 'csv_reader.xǁCsvReaderǁ_bad_count__mutmut_6':
        'n < width vs n <= width differ only at n == width, and _bad_count is only called when len(row) != width',
    _I + 'enrich.x__stage_key__mutmut_15':
        'strip("XX_XX") strips the chars {X, _}; the string is lower-cased and re.sub leaves only a-z and \'_\', so it never holds \'X\'',
    _I + 'mlenergy_v2.x_summary_runs__mutmut_273':
        'out gets exactly one entry per file or the loop raises, so zip(out, files) never sees unequal lengths; strict is unobservable',
    _I + 'mlenergy_v2.x_summary_runs__mutmut_276':
        'out gets exactly one entry per file or the loop raises, so zip(out, files) never sees unequal lengths; strict is unobservable',
    _I + 'mlenergy_v2.x_summary_runs__mutmut_277':
        'out gets exactly one entry per file or the loop raises, so zip(out, files) never sees unequal lengths; strict is unobservable',
    _I + 'x_import_summaries__mutmut_7':
        "SUMMARY_FORMATS has one entry ('mlenergy-v2'), so the join separator never appears in the message (pinned exactly in test_importers_more_pins); becomes observable if a second summaries format is added",
})

# -- importers, sixth session: the random sample of unrun mutants (test_importers_sample_pins.py) --
EQUIVALENT.update({
    _I + 'values.x_numeric_converter__mutmut_3':
        'arrow_values.numbers is the vectorised fast path: without it every Arrow column takes the exact per-value parser, which gives the same values and errors (only slower)',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_parse__mutmut_107':
        'message of a _Fallback that no input reaches (after the rescan the row count always equals the line count; 8000 fuzzed files of blank/CR/CRLF/whitespace/NUL/latin-1 lines never raised it); only a debug log would differ',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_parse__mutmut_117':
        'pa.chunked_array of string views with type=None infers string; the chunk list is never empty here (num_rows == len(lines) > 0)',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_plain_lines__mutmut_43':
        'np.arange of Python ints with dtype=None is int64 on this platform, and _table casts lines to int64 anyway',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_read_csv__mutmut_3':
        'pyarrow\'s default ParseOptions are exactly newlines_in_values=False, ignore_empty_lines=True (delimiter \',\', quote \'"\', double_quote, no escape)',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_repeated_headers__mutmut_46':
        '"UTF-8" and "utf-8" name the same codec',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_typed_columns__mutmut_18':
        "data[hi] is always the body's terminating LF (or hi == len(data)), so the first LF found from lo is the same slice end with or without the hi bound",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_typed_columns__mutmut_30':
        'only decides whether a column is parsed as float64 or as text for a one-row body; by design (TYPED_ATTR, _plain) both paths give identical values and errors',
    _I + 'arrow_values.x__fixed_chunk__mutmut_38':
        'frac == 0 is already rejected by the (frac == -1 or 1 <= frac <= 9) check above, so frac >= 0 equals frac > 0 here',
    _I + 'arrow_values.x_naive_ms__mutmut_18':
        'a cell ending in "Z" is still rejected by the _ZONE_PATTERN check; one ending in "z" fails Arrow\'s timestamp cast, so None either way',
    _I + 'arrow_values.x_numbers__mutmut_78':
        'assigning None into a float64 numpy array stores NaN',
    _I + 'assemble.x__num_or_none__mutmut_2':
        'int(None) raises TypeError, caught and returned as None',
    _I + 'csv_reader.xǁCsvReaderǁ_classify__mutmut_27':
        'read() only acts on "header" and "data"; any other label (the cut-off line\'s) is skipped the same, warning included',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_plain_lines__mutmut_54':
        'bytes.index(sub, None) searches from 0 like index(sub, 0), and the loop always runs (header_line >= 1 after read_header), so lo is an int either way',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_typed_columns__mutmut_27':
        'slicing to hi only merges later rows into the last cells, so some columns i >= 1 lose the float64 parse (cell 0 is unchanged); the typed and text paths give identical values and errors by design (TYPED_ATTR, _plain)',
    _I + 'arrow_values.x__minute_ms__mutmut_9':
        'a non-digit at byte 14 wraps to >= 10, so minute = 10*d14 + d15 >= 100 and the minute > 59 check returns None all the same',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_bytes__mutmut_18':
        '"UTF-16" and "utf-16" name the same codec',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_parse__mutmut_25':
        'rfind and find over the same span are both -1 exactly when the span has no quote',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_read_csv__mutmut_14':
        'use_threads only changes how Arrow parses the one block, not the rows, their order or the values',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_read_csv__mutmut_7':
        "pyarrow's default ParseOptions are exactly newlines_in_values=False, ignore_empty_lines=True",
    _I + 'arrow_values.x__cell_matrix__mutmut_37':
        'a width-0 matrix has no elements: constant() reads row bytes b"" and an empty flat array whatever its dtype',
    _I + 'arrow_values.x_float_view__mutmut_14':
        "np.frombuffer's default dtype is float64",
    _I + 'values.x__by_distinct__mutmut_19':
        "np.empty's default dtype is float64",
    _I + 'values.x__by_distinct__mutmut_46':
        "inverse is already 1-D (a column's values), and reshape(None) keeps a 1-D array's shape",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_parse__mutmut_52':
        'hi is the body\'s last LF or len(data), so find(b"\\n", lo, None) and the slice data[lo:None] give the same first-row cells (and even a different typed set would give identical values by design)',
    _I + 'arrow_values.x__fixed_matrix__mutmut_40':
        'without count the whole value buffer is viewed, and the slice [offsets[0]:offsets[-1]] takes the same bytes',
    _I + 'arrow_values.x__minute_ms__mutmut_7':
        'a non-digit at byte 11 wraps to >= 10, so hour = 10*d11 + d12 >= 100 and the hour > 23 check returns None all the same',
    _I + 'arrow_values.x__to_float__mutmut_20':
        "np.empty's default dtype is float64",
    _I + 'csv_reader.xǁCsvReaderǁ_classify__mutmut_6':
        'the guard has len(row) <= 1, and joining zero or one cell never inserts the separator',
    _I + 'arrow_values.x__fixed_chunk__mutmut_101':
        "comparing with None makes every row a run start, so each cell's minute prefix is parsed on its own: same values, only slower",
})

def _judge_process(reason: str, function: str, *numbers: int) -> None:
    """:func:`_judge` for ``generation/sampler/process.py``."""
    _judge(reason, function, *numbers, package="generation.sampler.process")


_judge_process("basicConfig's stream defaults to sys.stderr (StreamHandler(None) writes there)",
               "x_child_main", 4, 7)
_judge_process("CpuProxySource always excludes its own process (the sampler) from what it counts",
               "x_child_main", 56)
_judge_process("child_main returns 2 right after printing ERROR: the interpreter flushes stdout "
               "at exit, before the parent can read EOF", "x_child_main", 78, 80, 81)
_judge_process('codec names are case-insensitive: "UTF-8" is "utf-8"', "x__tail", 8)
_judge_process("log.error(lost) without arguments: logging does no %-formatting, the same "
               "message", "xǁTickLoopǁ_tick", 11)
_judge_process("_sleep_until returns only once the clock has reached the deadline, so woke >= "
               "deadline and (woke - deadline) // period is 0 whenever woke == deadline",
               "xǁTickLoopǁrun", 17, 20)
_judge_process("a sampler killed by a signal wrote no summary, and read_spool already reports "
               "that as state 'unfinished' (a summary written just before a SIGKILL is a race "
               "no test can set up)", "x__replace_state", 5)
_judge_process("start sets both before it calls _wait_ready: the assert holds either way",
               "xǁSamplerǁ_wait_ready", 1)
_judge_process("remaining is the difference of two monotonic float reads: exactly 0.0 has "
               "measure zero, and select accepts a zero timeout", "xǁSamplerǁ_wait_ready", 9)
_judge_process("the child exits right after its ERROR line (child_main returns 2) or has "
               "exited at EOF: the wait returns at once whatever its bound",
               "xǁSamplerǁ_wait_ready", 33, 34)
_judge_process("a grace period a second longer (SIGTERM wait 5 -> 6 s, stop's default 10 -> 11 "
               "s): the same outcome, only later; the suite has no timed tests (README)",
               "xǁSamplerǁ_kill", 6)
_judge_process("a grace period a second longer (SIGTERM wait 5 -> 6 s, stop's default 10 -> 11 "
               "s): the same outcome, only later; the suite has no timed tests (README)",
               "xǁSamplerǁstop", 1)
_judge_process("atomic_path tests `if fsync:`: None is falsy, no fsync, like False",
               "x_register_pid", 25)
_judge_process("when the line is empty (EOF), line[len('ERROR'):].strip() is '' too",
               "xǁSamplerǁ_wait_ready", 37)
_judge_process("Popen's close_fds defaults to True", "xǁSamplerǁstart", 77)
_judge_process("the wait after SIGKILL: a killed process is gone within milliseconds, so its "
               "bound (5 s, 6 s or none) never matters", "xǁSamplerǁ_kill", 7, 8)


def _judge_scaling(reason: str, function: str, *numbers: int) -> None:
    """:func:`_judge` for the scaling package (``function`` as ``module.x_name``)."""
    _judge(reason, function, *numbers, package="llm_powertrace_ds.scaling")


_judge_scaling("the default method only has to be neither lora nor qlora: any other string "
               "gives k = 6", "common.x__flops_factor", 8, 9)
_judge_scaling("a one-character suffix alone leaves float('') to fail, which returns the text "
               "as the len > 1 guard does", "common.x_parse_value", 18)
_judge_scaling("conformal_half_width reads only the refits' point predictions (log_predict): "
               "their bootstrap count changes nothing but the time", "holdout.x__fit_law",
               10, 11, 26, 27)
_judge_scaling("v == the range's edge gives log10(1) = 0, not above 1e-9 either way",
               "prediction.x_predict", 81, 86)
_judge_scaling("inside the range log10(lo / v) <= 0, which the 1e-9 threshold drops like 0.0",
               "prediction.x_predict", 83)
_judge_scaling("a distance of exactly 1e-9 decades has measure zero", "prediction.x_predict", 88)
_judge_scaling("only axes with a value > 0 reach the warning, so `or 0` / `or 1` never applies",
               "prediction.x_predict", 103)
_judge_scaling("preds holds one entry per test row and actual is built from test: zip over "
               "one length, strict or not", "holdout.x__report", 16, 29, 30)
_judge_scaling("test and points are built from one list (points has one entry per test row): "
               "zip over one length, strict or not", "holdout.x_evaluate_holdout", 103)
_judge_scaling("a law's axes are the keys of AXES it was fitted on, so AXES.get(axis) never "
               "falls back to its default", "loglinear.xǁLogLinearLawǁdesign", 38)
_judge_scaling('codec names are case-insensitive: "UTF-8" is "utf-8"', "result.x_load_fit", 9)
_judge_scaling("a prediction's lo and hi are both set (laws) or both None (baselines): testing "
               "either tells the same", "holdout.x__report", 33)
_judge_scaling("zip over sequences of one length by construction: strict or not, the same pairs",
               "holdout.x_evaluate_holdout", 50, 107)
_judge_scaling("zip over sequences of one length by construction: strict or not, the same pairs",
               "holdout.x_split_holdout", 57)
_judge_scaling("zip over sequences of one length by construction: strict or not, the same pairs",
               "intervals.x_conformal_half_width", 31)
_judge_scaling("every physics feature is positive and every platform has a run, so no column "
               "norm is 0 (or exactly 1 by chance): the guard never changes scale",
               "physics.x_fit_physics", 128)
_judge_scaling("NNLS of strictly positive features against a vector of ones puts a positive "
               "coefficient in every platform's block, so pred > 0: the guard and its message "
               "are unreachable", "physics.x_fit_physics", 142, 146)

# -- scaling, sixth session (test_scaling_pins_{holdout,loglinear,physics}.py) --
_S = "llm_powertrace_ds.scaling."
EQUIVALENT.update({
    _S + 'holdout.x__report__mutmut_13':
        'the second zip(preds, actual, strict=True) still rejects a length mismatch (actual is built one per test row), same ValueError text',
    _S + 'holdout.x__report__mutmut_17':
        'the second zip(preds, actual, strict=True) still rejects a length mismatch (actual is built one per test row), same ValueError text',
    _S + 'holdout.x__report__mutmut_26':
        'the first zip(preds, test, strict=True) already rejects a length mismatch (actual has len(test)), same ValueError text',
    _S + 'holdout.x_evaluate_holdout__mutmut_46':
        'zip(test, points): points is built one per test row',
    _S + 'holdout.x_evaluate_holdout__mutmut_49':
        'zip(test, points): points is built one per test row',
    _S + 'holdout.x_evaluate_holdout__mutmut_95':
        'zip(vals, points): baseline_predictions returns one entry per test row, points one per test row',
    _S + 'holdout.x_evaluate_holdout__mutmut_98':
        'zip(vals, points): baseline_predictions returns one entry per test row, points one per test row',
    _S + 'holdout.x_evaluate_holdout__mutmut_99':
        'zip(vals, points): baseline_predictions returns one entry per test row, points one per test row',
    _S + 'holdout.x_evaluate_holdout__mutmut_106':
        'zip(test, points): points is built one per test row',
    _S + 'holdout.x_evaluate_holdout__mutmut_58':
        '_report reads the reason only when the prediction is None; this one is a tuple',
    _S + 'holdout.x_evaluate_holdout__mutmut_84':
        '_report reads the reason only when the prediction is None; this one is a tuple',
    _S + 'holdout.x_split_holdout__mutmut_32':
        'axis_value(r, c) == _num(r.get(c)) for every column except model_params, which is in AXES anyway',
    _S + 'holdout.x_split_holdout__mutmut_54':
        'zip(rows, vals): vals is built one per row',
    _S + 'holdout.x_split_holdout__mutmut_58':
        'zip(rows, vals): vals is built one per row',
    _S + 'intervals.x_conformal_half_width__mutmut_18':
        'zip(use, keys): keys = _groups(use) is one per row',
    _S + 'intervals.x_conformal_half_width__mutmut_21':
        'zip(use, keys): keys = _groups(use) is one per row',
    _S + 'intervals.x_conformal_half_width__mutmut_22':
        'zip(use, keys): keys = _groups(use) is one per row',
    _S + 'intervals.x_conformal_half_width__mutmut_27':
        'zip(use, keys): keys = _groups(use) is one per row',
    _S + 'intervals.x_conformal_half_width__mutmut_30':
        'zip(use, keys): keys = _groups(use) is one per row',
    _S + 'intervals.x_extrapolation__mutmut_42':
        'at v == hi both branches give 0.0 (log10(1) or the in-range 0.0), never > 1e-9',
    _S + 'intervals.x_extrapolation__mutmut_44':
        'for lo <= v <= hi, log10(lo / v) <= 0, never > 1e-9, same as 0.0',
    _S + 'intervals.x_extrapolation__mutmut_47':
        'at v == lo, log10(lo / v) == 0.0, the same as the in-range 0.0',
    _S + 'intervals.x_extrapolation__mutmut_49':
        'no float ratio v/hi gives math.log10 exactly 1e-9 (searched the ulps around 10**1e-9), so > and >= never differ',
    _S + 'loglinear.x_fit_loglinear__mutmut_154':
        'np.linalg.lstsq default rcond is None in numpy 2.x (venv has 2.4.6), so dropping rcond=None passes the same value',
    _S + 'loglinear.x_fit_loglinear__mutmut_191':
        'Generator.integers(n, size=s) means integers(0, n, size=s) (high=None -> [0, low)); same draws from the same stream (checked: identical arrays)',
    _S + 'physics.x_fit_physics__mutmut_129':
        'scale of an all-zero column only divides zeros (column 0/1 == 0/2, theta 0/1 == 0/2); checked with underflowing columns and bootstraps: identical output',
    _S + 'physics.x_fit_physics__mutmut_164':
        'n >= k*platforms + MIN_EXTRA_RUNS (5) is enforced above, so n - len(theta) >= 5 and max(., 1) == max(., 2)',
    _S + 'physics.x_fit_physics__mutmut_93':
        'zip(use, feats) over two lists appended together in one loop: always one length, strict=None behaves as strict=True',
    _S + 'physics.x_fit_physics__mutmut_96':
        'zip(use, feats) over two lists appended together in one loop: always one length, dropping strict changes nothing',
    _S + 'physics.x_fit_physics__mutmut_97':
        'zip(use, feats) over two lists appended together in one loop: always one length, strict=False changes nothing',
    _S + 'prediction.x_predict__mutmut_111':
        'warnings is built by one comprehension over extra.items(): always len(extra), strict=None changes nothing',
    _S + 'prediction.x_predict__mutmut_114':
        'warnings is built by one comprehension over extra.items(): always len(extra), dropping strict changes nothing',
    _S + 'prediction.x_predict__mutmut_115':
        'warnings is built by one comprehension over extra.items(): always len(extra), strict=False changes nothing',
    _S + 'result.x_fit__mutmut_32':
        'the up-front fit_loglinear(train) only checks for degenerate data; its result is discarded and its bootstrap (pinv + percentile, own local rng) cannot raise: only runtime changes',
    _S + 'result.x_fit__mutmut_33':
        'the up-front fit_loglinear(train) only checks for degenerate data; its result is discarded and its bootstrap cannot raise: n_boot=1 vs 0 is not observable',
    _S + 'result.x_fit__mutmut_48':
        'holdout._fit_law branches on name == "loglinear" only; None takes the same physics branch as "physics"',
    _S + 'result.x_fit__mutmut_58':
        'holdout._fit_law branches on name == "loglinear" only; "XXphysicsXX" takes the same physics branch as "physics"',
    _S + 'result.x_fit__mutmut_59':
        'holdout._fit_law branches on name == "loglinear" only; "PHYSICS" takes the same physics branch as "physics"',
})

# Seventh session (2026-12-02): every importers judgment above was re-read against the mutants
# mutmut generates for this code (it renumbers a function's mutants when the function changes,
# so a judgment can end up naming another mutation). 14 do not hold: 4 names point at another
# mutation now, 10 judgments were wrong. 30 reasons are rewritten (self-contained or corrected).
# One of the 14 (import_nvidia_smi 39: the sidecar probed despite --meta crashed on a log name
# too long for a sidecar) holds again since common.companion treats such a name as "no file".
NOT_EQUIVALENT: dict[str, str] = {
    _I + 'dcgm.x__parse__mutmut_99':
        'NOT equivalent: the recorded premise is wrong (\'XX\\nXX\' does not end in a newline). A log ending \'...\\nID  XX\\nXX\' (units line ending in XX, then an unterminated non-GPU last line \'XX\') ends with \'XX\\nXX\': the original skips the cut-off last line and imports, the mutant raises InputError line N "expected \'GPU <index> <values>\', got \'XX\'" (verified by calling both bodies)',
    _I + 'nvidia_smi.x_import_nvidia_smi__mutmut_117':
        "NOT equivalent (reason is for a power_key split mutant): fields=None makes check_device_ranges name the signal instead of the query column; e.g. power.draw 9999 W -> error field 'power_w' instead of 'power.draw' (temperature.gpu -> 'temp_c', etc.; verified)",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_parse__mutmut_107':
        "REACHABLE: a data line holding only a UTF-8 BOM right after the header (b'a,b\\n\\xef\\xbb\\xbf\\n1,2\\n'): Arrow skips the BOM at the start of the parsed span and then drops the line as empty, so the row count differs and this raise runs (checked). The result is the same (the row reader raises), but the DEBUG log 'row reader (row count differs from the line count)' becomes 'row reader (None)'",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_read_csv__mutmut_14':
        "use_threads=True changes Arrow's parse-error text: 'CSV parse error: Row #2: Expected 3 columns, got 2: 4,5' loses its 'Row #2: ' (checked on pyarrow 26). That text reaches the DEBUG log 'row reader (...)' for any file with a wrong-width line. Rows and values are unchanged; only the debug log differs",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_repeated_headers__mutmut_46':
        "bytes.decode(None, ...) raises TypeError (the encoding must be str). It runs for every candidate repeated-header row of a text first column, e.g. an appended nvidia-smi log that repeats 'timestamp, ...'. TypeError escapes read() (only _Fallback is caught), so the import crashes instead of skipping the header line",
    _I + 'dcgm.x_import_dcgm__mutmut_103':
        "contrived, warning only: with a float ts_ms, sample_period_ms just under 2**63 ms (e.g. 9.2233720e18) makes start_ms + k*period pass 2**63 as a float, and checks.check_times' np.asarray(..., int64) emits 'RuntimeWarning: invalid value encountered in cast'. The original's int64 sum wraps silently with no warning; both then raise the same 'date is outside 1990-2200' InputError",
    _I + 'dcgm.x_import_dcgm__mutmut_158':
        "the returned run.meta gains an extra key 'XXstart_timeXX' (start_time itself is unchanged, set by assemble_run), so the returned Run's metadata differs (e.g. keys, or equality with the expected meta)",
    _I + 'nvidia_smi.x_import_nvidia_smi__mutmut_114':
        'assemble_run gets meta=None: check_import -> check_texts -> privacy.check_meta_text(None) calls None.items(), so every otherwise successful nvidia-smi import raises AttributeError. The recorded reason is about the power_key split, a different mutant',
    _I + 'values.x_numeric_converter__mutmut_28':
        'not the same result: the skipped np.asarray(values, dtype=str).astype(float64) accepts cells that _number\'s regex rejects, e.g. \'1_000\' -> 1000.0 (also reached from an Arrow column: arrow_values.numbers gives None and _cells feeds this line). The original returns 1000.0; the mutant always uses _by_distinct and raises "value \'1_000\' is not a number" (checked)',
    _I + 'values.x_numeric_converter__mutmut_30':
        'as mutmut_28: np.asarray(dtype=str) raises TypeError, so every list column goes to _by_distinct. A cell like \'1_000\', which numpy reads as 1000.0 in the original, now raises "value \'1_000\' is not a number"',
    _I + 'dcgm.x_import_dcgm__mutmut_159':
        "run.meta gains an extra key 'START_TIME' (returned Run's meta differs, and is carried into publishing); the recorded reason only covers start_time, which assemble_run did set",
    _I + 'nvidia_smi.x_import_nvidia_smi__mutmut_115':
        "file=None is passed to assemble_run, so InputErrors raised there (check_import range/time/text checks, coerce_meta) lose the file name, e.g. a power.draw of 6000 W (outside 0..5000) is reported without the log's path",
    _I + 'values.x_numeric_converter__mutmut_26':
        "numpy's str->float64 cast accepts underscores ('1_000' -> 1000.0) but _number's regex does not: a cell like '1_000' in a numeric column (row-reader path, or after arrow_values.numbers returns None) imports as 1000 originally but raises InputError 'is not a number' in the mutant",
}
EQUIVALENT.update({
    _I + 'dcgm.x_import_dcgm__mutmut_109':
        'np.array of a non-empty list of Python ints infers int64 (Linux, numpy 2), the same dtype and values as dtype=np.int64',
    _I + 'dcgm.x_import_dcgm__mutmut_75':
        'np.arange(n) with dtype=None is int64 already (Linux, numpy 2): same k and same ts_ms',
    _I + 'nvidia_smi.x__reasons__mutmut_11':
        "keys are 'reason:<name>' and no REASON_BITS name holds ':', so rsplit(':', 1)[1] == split(':', 1)[1]",
    _I + 'nvidia_smi.x_build_devices__mutmut_27':
        "keys are 'signal:<target>' with one colon (SIGNAL_FIELDS targets hold none), so split(':', 2)[1] == split(':', 1)[1]",
    _I + 'nvidia_smi.x_read_user_meta__mutmut_15':
        "unreachable raise: 'workload' is in checks.IMPORTER_KEYS, so check_meta_keys already refuses any meta with a workload key; raw.get('workload') is always None here",
    _I + 'nvidia_smi.x_read_user_meta__mutmut_18':
        "unreachable raise: 'workload' is in checks.IMPORTER_KEYS, so check_meta_keys already refuses any meta with a workload key; raw.get('workload') is always None here",
    _I + 'nvidia_smi.x_read_user_meta__mutmut_21':
        "unreachable raise: 'workload' is in checks.IMPORTER_KEYS, so check_meta_keys already refuses any meta with a workload key; raw.get('workload') is always None here",
    _I + 'powertrace_csv.x__round_robin__mutmut_36':
        'numpy (2.4.6 installed) treats reshape(-2, k) like reshape(-1, k) (any negative size is the unknown dimension; checked)',
    _I + 'powertrace_csv.x_csv_run_id__mutmut_17':
        'a fresh Factorizer per read assigns codes in order of first appearance (both reader paths), so the first non-null run id is code 0 = first; (codes>0)&(codes!=0) == (codes>=0)&(codes!=0)',
    _I + 'requests.x_attach_requests__mutmut_59':
        "read_run only finds runs with trace rows (>= 1 device) and publishing refuses a device without samples (validate 'empty' is an error flag), so the generator is never empty and default=0 is never used",
    _I + 'requests_csv.x_read_csv_requests__mutmut_9':
        "'UTF-8' and 'utf-8' name one codec; the UnicodeDecodeError text still says 'utf-8' (checked)",
    _I + 'requests_sglang_log.x_read_print_requests_log__mutmut_2':
        "None is falsy like False and the flag is only read as 'if not warmup'",
    _I + 'requests_vllm.x_requests_from_arrays__mutmut_54':
        "column() only tests 'if required:'; None is falsy like False",
    _I + 'timestamps.x__explicit_utc_ms__mutmut_15':
        "only rows whose _TS_RE zone is +-HH:MM reach here, and _TS_RE admits no 'Z' in such text, so replace('Z', ...) never applies",
    _I + 'timestamps.x__to_utc_ms__mutmut_37':
        'zones gets exactly one entry per text (or the converter raised), so zip never sees unequal lengths; strict=False changes nothing',
    _I + 'timestamps.x__to_utc_ms__mutmut_78':
        "unreachable 'unparsable timestamps' raise: the vectorised datetime64 cast fails only if some element fails np.datetime64 alone (same parser; non-ASCII digits fail both), and the per-row loop raises on it first",
    _I + 'timestamps.x__to_utc_ms__mutmut_81':
        "unreachable 'unparsable timestamps' raise: the vectorised datetime64 cast fails only if some element fails np.datetime64 alone (same parser; non-ASCII digits fail both), and the per-row loop raises on it first",
    _I + 'timestamps.x__to_utc_ms__mutmut_84':
        "unreachable 'unparsable timestamps' raise: the vectorised datetime64 cast fails only if some element fails np.datetime64 alone (same parser; non-ASCII digits fail both), and the per-row loop raises on it first",
    _I + 'timestamps.x__to_utc_ms__mutmut_87':
        "unreachable 'unparsable timestamps' raise: the vectorised datetime64 cast fails only if some element fails np.datetime64 alone (same parser; non-ASCII digits fail both), and the per-row loop raises on it first",
    _I + 'timestamps.x_local_to_utc_ms__mutmut_17':
        'np.array of a non-empty list of Python int offsets infers int64 (Linux, numpy 2), same as np.int64',
    _I + 'values.xǁFactorizerǁconverter__mutmut_7':
        "np.array of a non-empty list of Python int codes infers int64; for an empty uniq the 'if len(uniq)' branch returns np.zeros(0, np.int64) without using codes",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_typed_columns__mutmut_27':
        "slicing to hi merges the next row into the first row's last cell, so at most column width-1 (and column 0 only when width is 1, which no importer allows: timestamp and power are separate columns) loses the float64 parse and is read as text. For cells the typed parse accepts as finite and >= 0, the text path gives the same values and errors (TYPED_ATTR, _plain; spot-checked with whitespace, +, -0, exponents, 1e-400)",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_parse__mutmut_117':
        "pa.chunked_array of binary chunks viewed as string with type=None infers string; pyarrow's CSV reader always yields at least one chunk per column (an all-blank body gives one empty chunk), so the chunk list is never empty",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_typed_columns__mutmut_30':
        "end == -2 never holds (find returns -1 or an index), so a one-row body's first-row cells come from data[lo:-1] instead of data[lo:hi]; this only changes which plain-number columns are tried as float64 first, and Arrow's CSV float parse, the _plain filter and the text path (pc.cast with the same parser, nulls as NaN) give identical values and errors",
    _I + 'dcgm.x__parse__mutmut_126':
        "at this branch the last line matched ^GPU, so the text after its last newline is not 'XX': text.endswith('XX\\nXX') is False, and since that last line is non-empty text.endswith('\\n') is False too; both conditions are True",
    _I + 'nvidia_smi.x_build_devices__mutmut_25':
        "cols keys starting with 'signal:' are 'signal:<target>' with SIGNAL_FIELDS targets (no ':'), so rsplit(':', 1)[1] equals split(':', 1)[1]",
    _I + 'timestamps.x__explicit_utc_ms__mutmut_14':
        "_explicit_utc_ms only gets texts fully matched by _TS_RE with a +HH:MM/-HHMM offset zone: neither 'Z' nor 'z' can occur, so both replace calls are no-ops",
    _I + 'timestamps.x__to_utc_ms__mutmut_36':
        'zones gets exactly one entry per text (the loop appends or raises), so zip(texts, zones) never sees unequal lengths; strict is unobservable',
    _I + 'values.x__by_distinct__mutmut_7':
        "values here are always a tuple/list of str (CsvReader rows or _cells' to_pylist of a string column): np.asarray infers the same <U dtype that dtype=str gives",
    _I + 'values.x_numeric_converter__mutmut_31':
        'np.asarray of the str cells infers the same <U dtype as dtype=str (empty list: empty float array either way)',
})
for _name in NOT_EQUIVALENT:
    EQUIVALENT.pop(_name, None)


# Seventh session: survivors of the complete run judged equivalent (two reviews; the others got
# tests in test_importers_run7_pins_a.py / _b.py).
EQUIVALENT.update({
    _I + 'arrow_csv.x__plain__mutmut_10':
        "values in [0,1) among nulls only send the column to the text path, which yields the same values: typed (float64) vs text parse of a column give the same values by design (TYPED_ATTR contract: Arrow's CSV float parser and the string->float64 cast agree; empty cells -> NaN both ways); only speed differs",
    _I + 'arrow_csv.x__plain__mutmut_4':
        "min_max(None) gives null lo -> column with nulls goes to the text path: typed (float64) vs text parse of a column give the same values by design (TYPED_ATTR contract: Arrow's CSV float parser and the string->float64 cast agree; empty cells -> NaN both ways); only speed differs",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_parse__mutmut_100':
        'warn=None is falsy like warn=False',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_parse__mutmut_104':
        'branch only runs when data has no CR: has_cr=True then finds no bare CR and marks no CRLF line, same result',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_parse__mutmut_119':
        'columns here always have >=1 chunk (num_rows == len(lines) > 0), so chunked_array infers string from the views',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_read_csv__mutmut_11':
        'use_threads=None only changes threading (speed); the parse result is the same',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_read_csv__mutmut_39':
        'a file with any quote in the parsed span falls back before read_csv, so there are never quoted strings',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_repeated_headers__mutmut_48':
        'bytes.decode defaults to utf-8',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_repeated_headers__mutmut_56':
        'rstrip(None) also strips trailing whitespace, which the per-cell strip() removes anyway',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_repeated_headers__mutmut_57':
        "a trailing \\r is removed by the last cell's strip(); a line cannot start with \\r (bare CR falls back, CR LF-only lines are blank)",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_typed_columns__mutmut_15':
        "first-row slice runs to hi, so only the last column may lose typed parsing: typed (float64) vs text parse of a column give the same values by design (TYPED_ATTR contract: Arrow's CSV float parser and the string->float64 cast agree; empty cells -> NaN both ways); only speed differs",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_typed_columns__mutmut_21':
        'without hi, find only differs when the first row is the last row, and then the newline found is at hi itself (or none), same slice',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_typed_columns__mutmut_22':
        "rfind merges later rows into the last cell, so only the last column may go to the text path: typed (float64) vs text parse of a column give the same values by design (TYPED_ATTR contract: Arrow's CSV float parser and the string->float64 cast agree; empty cells -> NaN both ways); only speed differs",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_typed_columns__mutmut_23':
        "pattern never found -> slice to hi; only the last column may go to the text path: typed (float64) vs text parse of a column give the same values by design (TYPED_ATTR contract: Arrow's CSV float parser and the string->float64 cast agree; empty cells -> NaN both ways); only speed differs",
    _I + 'arrow_values.x__cell_matrix__mutmut_47':
        'frombuffer without count reads the whole buffer but the result is sliced to [offsets[0], offsets[-1]) anyway',
    _I + 'arrow_values.x__fixed_chunk__mutmut_100':
        'np.not_equal(None, ...) is all True: every cell starts its own minute run, each parsed with the same result (speed only)',
    _I + 'arrow_values.x__fixed_chunk__mutmut_80':
        'dict.get(col) returns None (falsy) like 0 for a missing key',
    _I + 'arrow_values.x__fixed_chunk__mutmut_90':
        'view(None) gives float64 words: runs differ only for NaN (more runs, same values) or +0/-0 (bytes with NUL + 0x80 after NUL, invalid UTF-8 in a string chunk, and NUL bytes fail _minute_ms anyway)',
    _I + 'arrow_values.x__to_float__mutmut_18':
        'np.empty(n, None) is float64 by default',
    _I + 'arrow_values.x__to_float__mutmut_28':
        'assigning None into a float64 array stores NaN',
    _I + 'arrow_values.x__to_float__mutmut_37':
        'to_numpy(zero_copy_only=None) behaves as False (checked: nulls become NaN)',
    _I + 'arrow_values.x_constant__mutmut_13':
        'numpy treats reshape(-2) like reshape(-1) here (checked)',
    _I + 'arrow_values.x_constant__mutmut_30':
        "'UTF-8' and 'utf-8' name the same codec",
    _I + 'arrow_values.x_naive_ms__mutmut_17':
        'a Z-terminated cell is still refused: either _shape_ok fails or _ZONE_PATTERN matches the trailing Z; both return None',
    _I + 'arrow_values.x_numbers__mutmut_27':
        'pc.if_else with a Python None promotes to a null string, same array (checked)',
    _I + 'arrow_values.x_numbers__mutmut_33':
        'pa.scalar(None, None) is a null scalar that if_else promotes to string, same array (checked)',
    _I + 'arrow_values.x_numbers__mutmut_35':
        'pa.scalar(None) is a null scalar that if_else promotes to string, same array',
    _I + 'arrow_values.x_numbers__mutmut_50':
        "skipping the non-match check: a non-matching cell gives an empty 'num' field whose cast fails (or NaN) -> None anyway",
    _I + 'arrow_values.x_numbers__mutmut_51':
        'to_numpy of a boolean is_null array is already bool',
    _I + 'arrow_values.x_numbers__mutmut_54':
        'zero_copy_only=None behaves as False',
    _I + 'arrow_values.x_numbers__mutmut_56':
        "with null words present the struct's 'num' child holds '' there (pyarrow fills null struct rows with ''), so the later cast fails -> None in the original too; without nulls, non-matches also end in None",
    _I + 'csv_reader.xǁCsvReaderǁread__mutmut_14':
        'np.asarray of Python ints infers int64 on this 64-bit Linux platform',
    _I + 'csv_reader.xǁCsvReaderǁread__mutmut_19':
        'every chunk row has exactly `width` cells (classified), so strict never fires',
    _I + 'nvidia_smi.x_import_nvidia_smi__mutmut_111':
        "power_key is 'power:<query>' and no POWER_FIELDS query contains ':', so split(':',2)[1] == split(':',1)[1]",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_repeated_headers__mutmut_8':
        "'or'->'and' only changes the early return when the column is not constant and no cell contains header[0]; then the full path's cand is all False, identical np bool zeros (speed only)",
    _I + 'arrow_values.x__to_float__mutmut_14':
        'always copying: in the writable branch out is a fresh array from a non-zero-copy to_numpy/astype (pyarrow zero-copy views are always read-only), so the extra copy is not observable (speed only)',
    _I + 'arrow_values.x_null_mask__mutmut_27':
        'to_numpy(zero_copy_only=None): None is falsy, same as False for both Array and ChunkedArray (checked: identical output incl. nulls)',
    _I + 'csv_reader.xǁCsvReaderǁread__mutmut_22':
        "strict=False in zip(*chunk): only rows classified 'data' are chunked and _classify raises unless len(row) == width, so all rows have equal length and strict never fires (unreachable)",
})

# Seventh session, later survivors of the complete run judged equivalent (the others got tests in
# test_importers_run7_pins_c1.py / _c2.py).
EQUIVALENT.update({
    _I + 'arrow_values.x__cast_ms__mutmut_23':
        'pyarrow to_numpy treats zero_copy_only=None as falsy (checked: int64 with nulls converts to float NaN the same)',
    _I + 'arrow_values.x__cell_matrix__mutmut_39':
        "width-0 matrix only feeds constant(): tobytes() of an empty row is b'' and array_equal of empty arrays is True whatever the dtype",
    _I + 'arrow_values.x__fixed_chunk__mutmut_107':
        'extra run starts only re-parse identical prefixes (same values); a missed start needs every earlier row with bytes 0-7 == 8-15, so row 0 is invalid and both return None',
    _I + 'arrow_values.x__fixed_chunk__mutmut_78':
        'weights.get(col, None) and get(col, 0) have the same truthiness',
    _I + 'arrow_values.x__to_float__mutmut_12':
        'pyarrow to_numpy treats zero_copy_only=None as falsy (checked on float32 Array and ChunkedArray with nulls)',
    _I + 'arrow_values.x_fixed_width_ms__mutmut_23':
        'concatenating a single part gives an equal, writable int64 copy; only identity differs',
    _I + 'arrow_values.x_fixed_width_ms__mutmut_25':
        'parts is non-empty whenever zulu is set, so concatenate([p]) vs p: equal writable int64 array',
    _I + 'arrow_values.x_float_view__mutmut_11':
        "np.frombuffer's default dtype is float64",
    _I + 'arrow_values.x_numbers__mutmut_53':
        'is_null() of a non-chunked array gives a bool numpy array already; the bool cast is a no-op',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_parse__mutmut_99':
        'has_cr=None vs False: both falsy in every use (`if has_cr and ...`, `if has_cr:`)',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_read_csv__mutmut_16':
        'use_threads only changes parse parallelism; Arrow keeps row order and values (speed only; one 64 MiB block anyway)',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_read_csv__mutmut_17':
        'ParseOptions(newlines_in_values=None) is stored as False (checked: pyarrow 26 reports False), same as the default',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_read_csv__mutmut_19':
        'newlines_in_values defaults to False, the value given explicitly',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_read_csv__mutmut_21':
        'newlines_in_values only affects quoted cells, and _parse falls back before read_csv whenever the body has a quote',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_read_csv__mutmut_31':
        'strings_can_be_null defaults to False, the value given explicitly',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_repeated_headers__mutmut_29':
        'to_numpy(zero_copy_only=None) treats None as falsy and copies; gives the same bool array as False (checked)',
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_repeated_headers__mutmut_51':
        "'UTF-8' and 'utf-8' name the same codec",
    _I + 'arrow_csv.xǁArrowCsvReaderǁ_repeated_headers__mutmut_6':
        'skipping the constant() shortcut: if every cell equals `one` and header[0] is not in it, match_substring finds nothing and the same all-False mask is returned (speed only)',
    _I + 'csv_reader.xǁCsvReaderǁ_next_row__mutmut_9':
        'line_no is 0 only before the first line is yielded; csv.reader can raise csv.Error only while parsing a yielded line, so line_no>=1 and `or 2` is unreachable',
    _I + 'csv_reader.xǁCsvReaderǁread__mutmut_21':
        'every chunked row has len == width (_classify raises or skips on any other length), so zip(strict=True) never raises',
    _I + 'nvidia_smi.x_import_nvidia_smi__mutmut_108':
        "power_key is 'power:'+ a POWER_FIELDS query (power.draw...), which has exactly one ':' so split(':') and split(':',1) give the same [1]",
    _I + 'nvidia_smi.x_import_nvidia_smi__mutmut_109':
        "power_key has exactly one ':' (power:<query without colon>), so rsplit gives the same [1]",
    _I + 'x_import_file__mutmut_2':
        "resolve_zone upper-cases tz: 'utc' and 'UTC' both map to dt.timezone.utc",
})

# values.numeric_converter changed in the seventh session (a number with "_" goes to the exact
# parser): its mutants from the numpy fast path on were renumbered, so those judgments are
# dropped until its survivors are judged again.
for _number in (26, 27, 28, 29, 30, 31):
    EQUIVALENT.pop(_I + f"values.x_numeric_converter__mutmut_{_number}", None)
    NOT_EQUIVALENT.pop(_I + f"values.x_numeric_converter__mutmut_{_number}", None)


_RESULT_RE = re.compile(r"^\s+(\S+): (.+)$")


def _copy_tree(dst: Path) -> None:
    """Copy the working tree's tracked and untracked, not-ignored files to ``dst``."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)


def _config(target: Target) -> str:
    """The ``[tool.mutmut]`` section for one target (TOML)."""
    def arr(items: list[str] | tuple[str, ...]) -> str:
        return "[" + ", ".join(f'"{i}"' for i in items) + "]"

    return ("\n[tool.mutmut]\n"
            f"source_paths = {arr(['llm_powertrace_ds', 'generation'])}\n"
            f"only_mutate = {arr([target.source])}\n"
            f"also_copy = {arr(['cards', 'upload.py', 'bench'])}\n"
            f"pytest_add_cli_args_test_selection = {arr(target.tests)}\n"
            f"pytest_add_cli_args = {arr(['-p', 'no:cacheprovider', '-q', *target.pytest_args])}\n")


def read_verdicts(folder: Path) -> dict[str, str]:
    """``{mutant: verdict}`` of the mutmut run in ``folder`` (``mutmut results --all true``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"],
                         cwd=folder, env=env, check=True, capture_output=True, text=True).stdout
    return {m.group(1): m.group(2).strip() for line in out.splitlines()
            if (m := _RESULT_RE.match(line))}


def _mutmut_run(name: str, folder: Path, max_children: int, mutants: list[str]) -> None:
    """``mutmut run`` of the given mutants (all when none) in ``folder``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the copy, not the tree
    batches = [mutants[i:i + 200] for i in range(0, len(mutants), 200)] or [[]]
    for batch in batches:  # keep each command line short
        proc = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children",
                               str(max_children), *batch], cwd=folder, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-2000:]
            raise SystemExit(f"mutmut run failed for {name} (exit {proc.returncode}):\n{tail}")


def _prepare(name: str, folder: Path) -> None:
    """Copy the working tree into ``folder`` and configure mutmut for one target there.

    The configuration is always the target's own: mutmut resets every cached verdict when the
    test selection changes (a rerun with ``--tests`` narrows the tests in its own driver).
    """
    _copy_tree(folder)
    pyproject = folder / "pyproject.toml"
    pyproject.write_text((REPO / "pyproject.toml").read_text(encoding="utf-8")
                         + _config(TARGETS[name]), encoding="utf-8")


def _seed_mutant(target: Target) -> list[str]:
    """Likely mutant names of the target's first functions (``module.x_function__mutmut_1``).

    ``mutmut run NAME`` generates every mutant and collects the tests' coverage before it runs
    NAME; the driver then runs the rest. Names are tried in turn (a function without mutants
    has none).
    """
    names = []
    for path in sorted(REPO.glob(target.source)):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names += [f"{module}.x_{node.name}__mutmut_1" for node in tree.body
                  if isinstance(node, ast.FunctionDef)]
    return names[:8]


def _generate(name: str, folder: Path, max_children: int) -> None:
    """Generate the mutants and mutmut's coverage stats (and run one mutant) in ``folder``."""
    for seed in _seed_mutant(TARGETS[name]):
        try:
            _mutmut_run(name, folder, max_children, [seed])
            return
        except SystemExit as exc:
            if "nothing matches" not in str(exc):
                raise
    raise SystemExit(f"mutmut found no mutant to start {name} with")


def _covering_tests(scratch: Path) -> tuple[Callable[[str], list[str]], dict[str, float]]:
    """``(tests_of, took)`` from mutmut's stats: a mutant's covering tests, fastest first."""
    stats = json.loads((scratch / "mutmut-stats.json").read_text(encoding="utf-8"))
    cover, took = stats["tests_by_mangled_function_name"], stats["duration_by_test"]

    def tests_of(mutant: str) -> list[str]:
        return sorted(cover.get(mutant.rsplit("__mutmut_", 1)[0], ()),
                      key=lambda t: (took.get(t, 1.0), t))

    return tests_of, took


def _drive(name: str, folder: Path, max_children: int, mutants: list[str]) -> None:
    """Run ``mutants`` with ``bench/mutation_driver.py`` and record the verdicts for mutmut.

    Each mutant meets the tests that cover its function (mutmut's stats), fastest first, in a
    fork of one collected session; the baseline (every covering test, no mutant) runs first
    and must pass. A mutant's time limit is 60 s + 20 × its tests' clean duration.
    """
    scratch = folder / "mutants"
    tests_of, took = _covering_tests(scratch)
    plan: dict[str, dict[str, Any]] = {}
    for mutant in mutants:
        ids = tests_of(mutant)
        plan[mutant] = {"ids": ids,
                        "timeout_s": round(60 + 20 * sum(took.get(t, 1.0) for t in ids))}
    every = sorted({t for entry in plan.values() for t in entry["ids"]})
    plan[""] = {"ids": every, "timeout_s": round(600 + 20 * sum(took.get(t, 1.0) for t in every))}
    shutil.copy2(REPO / "bench" / "mutation_driver.py", scratch / "_mutation_driver.py")
    (scratch / "_driver_plan.json").write_text(json.dumps(plan), encoding="utf-8")
    out = scratch / "_driver_out.json"
    out.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "_mutation_driver.py", "_driver_plan.json",
                           out.name, str(max_children), *TARGETS[name].pytest_args,
                           *TARGETS[name].tests], cwd=scratch, env=env)
    codes = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    if proc.returncode != 0 or codes.get("") != 0:
        raise SystemExit(f"the mutation driver failed for {name} (exit {proc.returncode})")
    _record(folder, {k: v for k, v in codes.items() if k})


def draw(mutants: list[str], size: int, seed: int) -> list[str]:
    """A seeded sample of ``size`` mutant names, keyed by name: the same names give the same draw.

    Each name ranks by ``sha256(f"{seed}:{name}")``; the ``size`` lowest are drawn. A mutant's
    rank does not depend on the other names, so an unchanged source draws the same mutants
    whatever the tests are.
    """
    def rank(mutant: str) -> str:
        return hashlib.sha256(f"{seed}:{mutant}".encode()).hexdigest()

    return sorted(sorted(mutants, key=rank)[:size])


def run_module(name: str, work: Path, max_children: int,
               only: re.Pattern[str] | None = None,
               sample: tuple[int, int] | None = None) -> dict[str, str]:
    """Run mutmut on one target in ``work/<name>``; return ``{mutant: verdict}``.

    With ``only``, every mutant is generated but only those whose name matches it run and are
    returned (the functions a change touched: minutes instead of an hour). With ``sample``
    (``(size, seed)``), only a :func:`draw` of that size runs and is returned, and
    ``work/<name>/sample.json`` lists it with each verdict.
    """
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)  # fresh: a cached "survived" may predate a test
    folder.mkdir(parents=True, exist_ok=True)
    _prepare(name, folder)
    started = time.monotonic()
    _generate(name, folder, max_children)
    generated = read_verdicts(folder)
    chosen = [k for k in generated if only is None or only.search(k)]
    if sample is not None:
        chosen = draw(chosen, *sample)
    _drive(name, folder, max_children, sorted(k for k in chosen if generated[k] == "not checked"))
    verdicts = {k: v for k, v in read_verdicts(folder).items() if k in set(chosen)}
    if sample is not None:
        (folder / "sample.json").write_text(json.dumps(verdicts, indent=1, sort_keys=True),
                                            encoding="utf-8")
    print(f"{name}: {len(verdicts)} mutants in {time.monotonic() - started:.0f} s",
          file=sys.stderr)
    return verdicts


_NARROW_DRIVER = """\
import contextlib, io, json, os, signal, sys
import pytest
plan, timeout_s, out = json.load(open(sys.argv[1])), int(sys.argv[2]), {}
class Late(Exception):
    pass
def alarm(*_):
    raise Late()
signal.signal(signal.SIGALRM, alarm)
for i, (name, ids) in enumerate(plan.items(), 1):
    os.environ["MUTANT_UNDER_TEST"] = name  # mutmut's trampolines read it at every call
    buf = io.StringIO()
    signal.alarm(timeout_s)
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            rc = int(pytest.main(["-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider",
                                  *ids]))
        rc = 36 if "Late" in buf.getvalue() else rc  # mutmut's "timeout"
    except Late:
        rc = 36
    finally:
        signal.alarm(0)
    out[name] = rc
    print(f"{i}/{len(plan)} {name}: exit {rc}", file=sys.stderr, flush=True)
json.dump(out, open(sys.argv[3], "w"))
"""
"""In-process (the test modules stay imported: about 1 s a mutant instead of 6 s forked)."""


def _record(folder: Path, codes: dict[str, int]) -> None:
    """Write exit codes into mutmut's per-file ``.meta`` verdicts (as ``mutmut run`` does)."""
    by_file: dict[Path, dict[str, int]] = {}
    for mutant, code in codes.items():
        base = folder / "mutants" / mutant.rsplit(".", 1)[0].replace(".", "/")
        meta = base.with_name(base.name + ".py.meta")
        if not meta.exists():  # a function of a package's __init__.py
            meta = base / "__init__.py.meta"
        by_file.setdefault(meta, {})[mutant] = code
    for meta_path, found in by_file.items():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        meta["exit_code_by_key"].update(found)
        meta_path.write_text(json.dumps(meta, indent=4), encoding="utf-8")


def _rerun_narrow(name: str, folder: Path, max_children: int, todo: list[str],
                  tests: tuple[str, ...], before: dict[str, str]) -> None:
    """Check ``todo`` against ``tests`` only, in one in-process pytest loop.

    Each mutant meets the tests of those files that cover its function (mutmut's own stats).
    """
    # one mutmut run regenerates the mutants of changed functions, collects the new tests'
    # coverage and checks one mutant
    _mutmut_run(name, folder, max_children, todo[:1])
    ran = {k.rsplit("__mutmut_", 1)[0] for k, v in before.items() if v != "not checked"}
    fresh = [k for k, v in read_verdicts(folder).items()
             if v == "not checked" and k.rsplit("__mutmut_", 1)[0] in ran]
    scratch = folder / "mutants"
    tests_of, _ = _covering_tests(scratch)
    plan = {}
    for mutant in sorted(set(todo[1:]) | set(fresh)):
        ids = [t for t in tests_of(mutant) if t.split("::")[0] in tests]
        if ids:  # no new test reaches it: the earlier verdict stands
            plan[mutant] = ids
    (scratch / "_narrow_driver.py").write_text(_NARROW_DRIVER, encoding="utf-8")
    (scratch / "_narrow_plan.json").write_text(json.dumps(plan), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "_narrow_driver.py", "_narrow_plan.json", "300",
                    "_narrow_out.json"], cwd=scratch, env=env, check=True)
    codes = json.loads((scratch / "_narrow_out.json").read_text(encoding="utf-8"))
    # pytest: 1 tests failed, 3 internal error (both kills for mutmut); 0 passed: the verdict
    # stays "survived" (a fresh mutant met only these tests: a lower bound)
    _record(folder, {k: (1 if rc in (1, 3) else 36 if rc == 36 else 0)
                     for k, rc in codes.items()})


def rerun_module(name: str, work: Path, max_children: int,
                 tests: tuple[str, ...] = ()) -> dict[str, str]:
    """Run again, with the current tree, the mutants the last run in ``work/<name>`` left.

    Those are the mutants not killed (survived, no tests, timeout, suspicious), plus every
    mutant of a function whose code changed since (mutmut regenerates those and forgets their
    verdicts). The tree (code and tests) is copied over the earlier copy first; mutmut finds
    the new tests and collects their coverage. A mutant killed before stays killed as long as
    tests were only added, so this gives a fresh run's numbers in a fraction of its time;
    after a test was changed or removed, run afresh.

    With ``tests`` (the test files added or extended since the last run), only those run
    against the mutants left: a mutant the other, unchanged tests let survive is killed exactly
    when one of these fails, at a fraction of the cost on a loaded machine. Mutants of changed
    functions then also meet only these tests, so their verdicts are a lower bound.
    """
    folder = work / name
    if not (folder / "mutants").is_dir():
        raise SystemExit(f"no earlier run of {name} in {folder}: run without --rerun first")
    before = read_verdicts(folder)
    _prepare(name, folder)
    shutil.rmtree(folder / "mutants" / "tests", ignore_errors=True)
    shutil.copytree(REPO / "tests", folder / "mutants" / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    todo = sorted(k for k, v in before.items() if v not in ("killed", "caught by type check"))
    started = time.monotonic()
    if tests:
        _rerun_narrow(name, folder, max_children, todo, tests, before)
        print(f"{name}: {len(todo)} mutants checked against {len(tests)} test files in "
              f"{time.monotonic() - started:.0f} s", file=sys.stderr)
        return read_verdicts(folder)
    # one mutmut run regenerates the mutants of changed functions and collects the new tests'
    # coverage; the driver runs the rest
    if todo:
        _mutmut_run(name, folder, max_children, todo[:1])
    else:
        _generate(name, folder, max_children)
    fresh = sorted(k for k, v in read_verdicts(folder).items() if v == "not checked")
    _drive(name, folder, max_children, sorted(set(todo[1:]) | set(fresh)))
    verdicts = read_verdicts(folder)
    print(f"{name}: {len(todo)} + {len(fresh)} mutants run again in "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr)
    return verdicts


def summarise(name: str, verdicts: dict[str, str]) -> dict[str, Any]:
    """Counts of one module's verdicts and its kill rates.

    ``kill_rate`` is killed / (mutants − judged equivalent); ``raw_kill_rate`` is killed /
    mutants, every survivor counted as a miss. A judgment in :data:`EQUIVALENT` names a mutant by
    mutmut's number, and mutmut numbers a function's mutants afresh when the function's code
    changes: a judged mutant that is now killed is reported as ``stale`` (its number points at
    another mutation), and ``raw_kill_rate`` does not depend on any judgment.
    """
    killed = sum(v in ("killed", "caught by type check") for v in verdicts.values())
    survived = [k for k, v in verdicts.items() if v == "survived"]
    equivalent = [k for k in survived if k in EQUIVALENT]
    other = len(verdicts) - killed - len(survived)
    considered = len(verdicts) - len(equivalent)
    rate = killed / considered if considered else None
    stale = sorted(k for k, v in verdicts.items()
                   if k in EQUIVALENT and v in ("killed", "caught by type check"))
    return {"module": name, "mutants": len(verdicts), "killed": killed,
            "survived": len(survived) - len(equivalent), "equivalent": len(equivalent),
            "other": other, "kill_rate": rate,
            "raw_kill_rate": killed / len(verdicts) if verdicts else None,
            "open": sorted(k for k in survived if k not in EQUIVALENT),
            "stale": stale,
            "others": sorted(f"{k}: {v}" for k, v in verdicts.items()
                             if v not in ("killed", "caught by type check", "survived"))}


def _regex(text: str) -> re.Pattern[str]:
    """A compiled regular expression for argparse (a bad one is a usage error)."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression ({exc})") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE",
                        help=f"one of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "llm-powertrace-mutation")
    parser.add_argument("--max-children", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--report-only", action="store_true",
                        help="do not run: report the verdicts already in --work")
    parser.add_argument("--rerun", action="store_true",
                        help="run again only the mutants the last run in --work did not kill, "
                             "with the current tests (after adding tests)")
    parser.add_argument("--tests", nargs="+", default=(), metavar="TEST",
                        help="with --rerun: run only these (new or extended) test files")
    parser.add_argument("--only", type=_regex, metavar="REGEX",
                        help="a fresh run of only the mutants whose names match (e.g. the "
                             "functions a change touched: 'x_sidecar_path__|x_meta_file__')")
    parser.add_argument("--sample", type=int, metavar="N",
                        help="a fresh run of a seeded sample of N mutants per module (the same "
                             "N mutants while the source is unchanged)")
    parser.add_argument("--seed", type=int, default=0, help="the --sample seed (default 0)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in TARGETS]
    if unknown:
        parser.error(f"unknown module {unknown[0]!r}: one of {', '.join(TARGETS)}")
    if args.tests and not args.rerun:
        parser.error("--tests needs --rerun (a first run uses each module's whole selection)")
    if args.only is not None and (args.rerun or args.report_only):
        parser.error("--only is for a fresh run (not with --rerun or --report-only)")
    if args.sample is not None and (args.rerun or args.report_only):
        parser.error("--sample is for a fresh run (not with --rerun or --report-only)")
    names = args.modules or list(TARGETS)
    if args.report_only:
        names = [n for n in names if (args.work / n / "mutants").is_dir()]
        rows = [summarise(n, read_verdicts(args.work / n)) for n in names]
    elif args.rerun:
        rows = [summarise(n, rerun_module(n, args.work, args.max_children, tuple(args.tests)))
                for n in names]
    else:
        sample = None if args.sample is None else (args.sample, args.seed)
        rows = [summarise(n, run_module(n, args.work, args.max_children, args.only, sample))
                for n in names]
    head = ("module", "mutants", "killed", "survived", "equivalent", "other", "kill rate",
            "raw kill rate")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    for r in rows:
        rate, raw = ("n/a" if r[k] is None else f"{100 * r[k]:.1f} %"
                     for k in ("kill_rate", "raw_kill_rate"))
        cells = [str(r[k]) for k in head[:-2]] + [rate, raw]
        print(("| " + " | ".join(cells) + " |") if args.markdown
              else "  ".join(f"{c:>10}" for c in cells))
    for r in rows:
        for k in r["open"]:
            print(f"survived: {k}")
        for k in r["stale"]:
            print(f"stale judgment (killed now): {k}")
        for k in r["others"]:
            print(f"other: {k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
