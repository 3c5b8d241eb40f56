"""What a limits search says and against what: the reference power, the statement, the file.

Floors and caps are percentages of the reference power (the profile's peak unless one is
given); the statement names exactly the combination chosen; every refusal of a limits file or
of a limit the profile cannot check names the file and, where there is one, the field.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds import mitigation as mit
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.mitigation import limits as lim


def _step_up(dt: float = 1.0) -> mit.Profile:
    """1 MW for 100 s, then 3 MW for 1000 s."""
    p = np.concatenate([np.full(int(100 / dt), 1e6), np.full(int(1000 / dt), 3e6)])
    return mit.Profile(start_s=np.arange(len(p)) * dt, dt_s=np.full(len(p), dt), power_w=p,
                       kind="csv", file="step.csv", column="power_w")


@pytest.mark.parametrize(("reference_w", "floor_pct"), [(None, 50.0), (3e6, 50.0),
                                                         (6e6, 25.0), (4e6, 40.0)])
def test_a_floor_is_a_share_of_the_reference_power(reference_w, floor_pct):
    # a 1.5 MW range from a 1 -> 3 MW step needs the low load raised to 1.5 MW exactly
    res = mit.search(_step_up(), mit.Limits(max_range_w=1.5e6), reference_w=reference_w)
    assert res.feasible and res.plan.cap_pct is None
    assert res.plan.floor_pct == floor_pct
    assert res.plan.reference_w == reference_w
    assert res.statement == f"every limit is met with floor {floor_pct:g} %"


def test_a_storage_plan_keeps_the_given_reference_and_says_only_what_it_uses():
    res = mit.search(_step_up(), mit.Limits(ramps=(lim.RampLimit(1.0, 1e4),)), reference_w=5e6)
    assert res.plan.ramp_limit_w_per_s == pytest.approx(1e4)
    assert res.plan.reference_w == 5e6
    assert res.statement == "every limit is met with storage with grid ramps ≤ 1e+04 W/s"


def test_limits_already_met_are_met_as_the_profile_is():
    res = mit.search(_step_up(), mit.Limits(max_range_w=2e6))
    assert res.statement == "every limit is met as the profile is"


@pytest.mark.parametrize("window_s", [551.0, 1000.0])
def test_a_ramp_window_longer_than_half_the_profile_is_refused_naming_the_field(window_s):
    with pytest.raises(InputError) as exc:
        mit.search(_step_up(), mit.Limits(ramps=(lim.RampLimit(window_s, 1e4),),
                                          file="grid.yaml"))
    assert "grid.yaml" in str(exc.value) and "ramp[0].window_s" in str(exc.value)


def test_a_window_of_half_the_profile_is_checked():
    res = mit.search(_step_up(), mit.Limits(ramps=(lim.RampLimit(550.0, 1e6),)))
    assert res.feasible


@pytest.mark.parametrize(("text", "message"), [
    (b"ramp:\n  - {window_s: 1, max_w_per_s: [\n", "line"),
    (b"ramp:\n  - {window_s: 1, max_w_per_s: 5\x07}\n", "not YAML"),  # a control character
    (b"- {window_s: 1, max_w_per_s: 5}\n", "expected a mapping with ramp, max_range_w"),
    (b"max_range_w: 10MW\nbands: []\nwhatever: 1\n", "unknown key(s) whatever"),
])
def test_a_bad_limits_file_is_refused_naming_the_file(tmp_path, text, message):
    path = tmp_path / "site-limits.yaml"
    path.write_bytes(text)
    with pytest.raises(InputError) as exc:
        lim.load_limits(path)
    assert "site-limits.yaml" in str(exc.value) and message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_limits_file_names_itself_in_later_refusals(tmp_path):
    path = tmp_path / "site-limits.yaml"
    path.write_text("ramp:\n  - {window_s: 10min, max_w_per_s: 1MW/s}\n", encoding="utf-8")
    limits = lim.load_limits(path)
    assert limits.file == "site-limits.yaml"
    with pytest.raises(InputError, match="site-limits.yaml"):
        mit.search(_step_up(), limits)
