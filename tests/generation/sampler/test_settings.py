"""GPU probes and device settings (power caps, locked clocks) against the NVML test double."""

from __future__ import annotations

import logging
import os

import pytest

from generation.sampler import (
    NO_DEVICE_SETTINGS_ENV,
    GpuProbe,
    NoPermission,
    NotSupported,
    SamplerConfigError,
    SettingOutOfRange,
    SourceUnavailable,
    device_settings,
    probe_gpus,
    settings_refusal,
)
from generation.sampler import nvml as nvml_mod
from llm_powertrace_ds.errors import InputError

from .fake_nvml import LIBRARY_NOT_FOUND, NO_PERMISSION, NOT_SUPPORTED, FakeGpu, always

SET_CALLS = ("nvmlDeviceSetPowerManagementLimit", "nvmlDeviceSetGpuLockedClocks",
             "nvmlDeviceResetGpuLockedClocks")


@pytest.fixture
def root(monkeypatch):
    """This process counts as root (the double refuses what a test tells it to)."""
    monkeypatch.setattr(os, "geteuid", lambda: 0, raising=False)


@pytest.fixture
def unguarded(monkeypatch):
    """Settings are allowed here: only ever against the NVML test double."""
    monkeypatch.delenv(NO_DEVICE_SETTINGS_ENV, raising=False)


def two_gpus() -> list[FakeGpu]:
    return [FakeGpu(), FakeGpu(uuid="GPU-99999999-2222-3333-4444-555555555555")]


def state(fake) -> list[tuple[int, tuple[int, int] | None]]:
    return [(g.power_limit_mw, g.locked_clocks_mhz) for g in fake.gpus]


# ---------------------------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------------------------

def test_probe_reports_a_fake_gpu_list(fake_nvml, root):
    fake = fake_nvml([
        FakeGpu(),
        FakeGpu(name="Tesla V100-SXM2-32GB", uuid="GPU-aaaaaaaa-2222-3333-4444-555555555555",
                compute_capability=(7, 0), power_limit_mw=250_000,
                power_range_mw=(150_000, 300_000)),
        FakeGpu(name="Tesla K80", uuid="GPU-bbbbbbbb-2222-3333-4444-555555555555",
                compute_capability=(3, 7)),
    ])
    h100, v100, k80 = probe_gpus(env={})
    assert [p.index for p in (h100, v100, k80)] == [0, 1, 2]
    assert h100.name == "NVIDIA H100 80GB HBM3" and h100.compute_capability == (9, 0)
    assert (h100.power_limit_w, h100.default_power_limit_w) == (700.0, 700.0)
    assert (h100.min_power_limit_w, h100.max_power_limit_w) == (200.0, 700.0)
    assert h100.bf16 and h100.can_set_power_limit and h100.can_lock_clocks
    assert h100.uuid_hash == nvml_mod.uuid_hash(fake.gpus[0].uuid) and "GPU-" not in str(h100)
    assert v100.bf16 is False and v100.can_lock_clocks and v100.power_limit_w == 250.0
    assert (v100.min_power_limit_w, v100.max_power_limit_w) == (150.0, 300.0)
    assert k80.bf16 is False and not k80.can_lock_clocks and "Volta" in k80.gpu_clock_refusal
    assert k80.can_set_power_limit
    d = h100.to_dict()
    assert d["compute_capability"] == [9, 0] and d["bf16"] is True and d["can_set_power_limit"]
    assert not any(fake.calls[fn] for fn in SET_CALLS) and fake.initialised == 0


def test_probe_selects_like_the_sampler(fake_nvml, root):
    fake_nvml(two_gpus())
    assert [p.index for p in probe_gpus([1], env={})] == [1]
    assert [p.index for p in probe_gpus(env={"CUDA_VISIBLE_DEVICES": "1"})] == [1]
    with pytest.raises(SamplerConfigError, match="out of range"):
        probe_gpus([2], env={})


def test_probe_refuses_mig_unless_allowed(fake_nvml, root):
    fake_nvml([FakeGpu(mig=True)])
    with pytest.raises(SamplerConfigError, match="MIG"):
        probe_gpus(env={})
    assert probe_gpus(allow_mig=True, env={})[0].mig_mode is True


def test_probe_unreadable_facts_are_none(fake_nvml, root):
    fake_nvml([FakeGpu(faults={
        "nvmlDeviceGetCudaComputeCapability": always(NOT_SUPPORTED),
        "nvmlDeviceGetPowerManagementLimitConstraints": always(NO_PERMISSION),
        "nvmlDeviceGetUUID": always(NOT_SUPPORTED)})])
    [p] = probe_gpus(env={})
    assert p.compute_capability is None and p.bf16 is None and p.uuid_hash is None
    assert p.min_power_limit_w is None and p.power_limit_w == 700.0
    assert not p.can_set_power_limit and "range" in p.power_limit_refusal
    assert not p.can_lock_clocks


def test_probe_permission_needs_root_and_no_guard(fake_nvml, monkeypatch):
    fake_nvml()
    monkeypatch.setattr(os, "geteuid", lambda: 1000, raising=False)
    [p] = probe_gpus(env={})
    assert not p.can_set_power_limit and not p.can_lock_clocks
    assert "root" in p.power_limit_refusal and "root" in p.gpu_clock_refusal
    monkeypatch.setattr(os, "geteuid", lambda: 0, raising=False)
    [p] = probe_gpus(env={NO_DEVICE_SETTINGS_ENV: ""})  # set, even empty
    assert NO_DEVICE_SETTINGS_ENV in p.power_limit_refusal and not p.can_lock_clocks
    assert settings_refusal({}) is None


def test_probe_without_nvml_is_unavailable(fake_nvml):
    fake_nvml(init_code=LIBRARY_NOT_FOUND)
    with pytest.raises(SourceUnavailable):
        probe_gpus(env={})


def test_probe_is_a_frozen_record():
    p = GpuProbe(index=0, name="x")
    with pytest.raises(AttributeError):
        p.name = "y"  # type: ignore[misc]
    assert p.bf16 is None and p.can_set_power_limit


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------

def test_set_observe_and_restore(fake_nvml, unguarded):
    fake = fake_nvml(two_gpus())
    fake.gpus[1].power_limit_mw = 650_000
    with device_settings([0, 1], power_limit_w=350, sm_clock_mhz=1410) as applied:
        assert state(fake) == [(350_000, (1410, 1410)), (350_000, (1410, 1410))]
        assert [a.observed() for a in applied] == [{"power_limit_w": 350.0,
                                                    "sm_clock_mhz": 1410.0}] * 2
        assert [a.original_power_limit_mw for a in applied] == [700_000, 650_000]
        assert applied[1].requested_power_limit_mw == 350_000
        assert applied[1].requested_sm_clock_mhz == 1410
    assert state(fake) == [(700_000, None), (650_000, None)]
    assert not applied[0].power_limit_set and not applied[0].clocks_locked
    assert fake.initialised == 0


def test_only_the_requested_axis_is_touched(fake_nvml, unguarded):
    fake = fake_nvml()
    with device_settings([0], power_limit_w=300.5) as applied:
        assert applied[0].observed() == {"power_limit_w": 300.5}
    assert fake.calls["nvmlDeviceSetGpuLockedClocks"] == 0
    assert fake.calls["nvmlDeviceResetGpuLockedClocks"] == 0
    with device_settings([0], sm_clock_mhz=1200) as applied:
        assert applied[0].observed() == {"sm_clock_mhz": 1200.0}
    assert fake.calls["nvmlDeviceSetPowerManagementLimit"] == 2  # 300.5 W, then back
    assert state(fake) == [(700_000, None)]


def test_restored_when_the_body_fails(fake_nvml, unguarded):
    fake = fake_nvml(two_gpus())
    with pytest.raises(RuntimeError, match="boom"), \
            device_settings([0, 1], power_limit_w=300, sm_clock_mhz=1200):
        raise RuntimeError("boom")
    assert state(fake) == [(700_000, None), (700_000, None)] and fake.initialised == 0


def test_no_permission_half_way_restores_the_rest(fake_nvml, unguarded):
    gpus = two_gpus()
    gpus[1].faults["nvmlDeviceSetGpuLockedClocks"] = always(NO_PERMISSION)
    fake = fake_nvml(gpus)
    with pytest.raises(NoPermission) as exc, \
            device_settings([0, 1], power_limit_w=300, sm_clock_mhz=1200):
        pytest.fail("the body must not run")  # pragma: no cover
    message = str(exc.value)
    assert message.startswith("gpu_clock_mhz: ") and "GPU 1" in message and "root" in message
    assert "\n" not in message and exc.value.code == NO_PERMISSION
    assert isinstance(exc.value.__cause__, fake.NVMLError)
    assert state(fake) == [(700_000, None), (700_000, None)] and fake.initialised == 0


def test_no_permission_for_a_power_cap_names_the_axis(fake_nvml, unguarded):
    fake = fake_nvml([FakeGpu(faults={"nvmlDeviceSetPowerManagementLimit":
                                      always(NO_PERMISSION)})])
    with pytest.raises(NoPermission, match=r"^power_limit_setting_w: .*GPU 0.*root"), \
            device_settings([0], power_limit_w=300):
        pass  # pragma: no cover
    assert state(fake) == [(700_000, None)] and fake.initialised == 0


def test_guarded_machine_is_refused_before_nvml_is_touched(fake_nvml, monkeypatch):
    fake = fake_nvml()
    monkeypatch.setenv(NO_DEVICE_SETTINGS_ENV, "1")
    with pytest.raises(NoPermission) as exc, \
            device_settings([0], power_limit_w=300, sm_clock_mhz=1200):
        pass  # pragma: no cover
    message = str(exc.value)
    assert "power_limit_setting_w and gpu_clock_mhz" in message
    assert NO_DEVICE_SETTINGS_ENV in message and "\n" not in message
    assert sum(fake.calls.values()) == 0 and state(fake) == [(700_000, None)]
    with pytest.raises(NoPermission, match="gpu_clock_mhz"), \
            device_settings([0], sm_clock_mhz=1200, env={NO_DEVICE_SETTINGS_ENV: ""}):
        pass  # pragma: no cover
    with device_settings([0]) as applied:  # nothing asked: nothing to refuse
        assert applied == []
    assert sum(fake.calls.values()) == 0


def test_out_of_range_is_refused_before_anything_changes(fake_nvml, unguarded):
    fake = fake_nvml(two_gpus())
    fake.gpus[1].power_range_mw = (100_000, 300_000)
    with pytest.raises(SettingOutOfRange) as exc, device_settings([0, 1], power_limit_w=350):
        pass  # pragma: no cover
    assert isinstance(exc.value, InputError) and isinstance(exc.value, ValueError)
    assert exc.value.field == "power_limit_setting_w" and "100-300 W" in str(exc.value)
    assert fake.calls["nvmlDeviceSetPowerManagementLimit"] == 0  # GPU 0 untouched too
    with pytest.raises(SettingOutOfRange, match="highest SM clock 1980 MHz") as exc, \
            device_settings([0], sm_clock_mhz=2500):
        pass  # pragma: no cover
    assert exc.value.field == "gpu_clock_mhz" and fake.calls["nvmlDeviceSetGpuLockedClocks"] == 0
    for bad in ({"power_limit_w": -5}, {"power_limit_w": float("nan")},
                {"sm_clock_mhz": 1410.5}, {"sm_clock_mhz": True}):
        with pytest.raises(SettingOutOfRange), device_settings([0], **bad):
            pass  # pragma: no cover
    with pytest.raises(SamplerConfigError, match="twice"), device_settings([0, 0],
                                                                             power_limit_w=300):
        pass  # pragma: no cover
    assert fake.initialised == 0 and state(fake) == [(700_000, None), (700_000, None)]


def test_unknown_range_leaves_the_decision_to_nvml(fake_nvml, unguarded):
    fake = fake_nvml([FakeGpu(faults={
        "nvmlDeviceGetPowerManagementLimitConstraints": always(NOT_SUPPORTED),
        "nvmlDeviceGetMaxClockInfo": always(NOT_SUPPORTED),
        "nvmlDeviceGetEnforcedPowerLimit": always(NOT_SUPPORTED)})])
    with device_settings([0], power_limit_w=300, sm_clock_mhz=1200) as applied:
        assert applied[0].observed() == {"power_limit_w": None, "sm_clock_mhz": 1200.0}
    assert state(fake) == [(700_000, None)]


def test_unsupported_setting_names_the_axis(fake_nvml, unguarded):
    fake = fake_nvml([FakeGpu(faults={"nvmlDeviceSetGpuLockedClocks": always(NOT_SUPPORTED)})])
    with pytest.raises(NotSupported, match="^gpu_clock_mhz: cannot lock GPU 0"), \
            device_settings([0], power_limit_w=300, sm_clock_mhz=1200):
        pass  # pragma: no cover
    assert state(fake) == [(700_000, None)]


def test_a_failed_restore_is_logged_not_raised(fake_nvml, unguarded, caplog):
    fake = fake_nvml(two_gpus())
    fake.gpus[0].faults["nvmlDeviceResetGpuLockedClocks"] = always(NO_PERMISSION)
    with caplog.at_level(logging.ERROR), \
            device_settings([0, 1], power_limit_w=300, sm_clock_mhz=1200) as applied:
        pass
    assert "could not restore GPU settings" in caplog.text and "GPU 0 gpu_clock_mhz" in caplog.text
    assert state(fake) == [(700_000, (1200, 1200)), (700_000, None)]  # the rest restored
    assert applied[0].clocks_locked and not applied[0].power_limit_set


def test_a_function_missing_from_the_binding_is_not_supported(fake_nvml, monkeypatch):
    fake = fake_nvml()
    monkeypatch.delattr(type(fake), "nvmlDeviceGetMaxClockInfo")  # an older nvidia-ml-py
    with nvml_mod.session(), pytest.raises(NotSupported, match="nvmlDeviceGetMaxClockInfo"):
        nvml_mod.max_sm_clock_mhz(nvml_mod.device_handle(0))
    assert fake.initialised == 0
