"""Run WattAMeter's own command line with the NVML test double standing in for the GPUs.

Started as a separate process by the WattAMeter writer tests::

    python wattameter_writer.py WRITER_PATH WORK_DIR N_GPUS -- <wattameter arguments>

``WRITER_PATH`` is a folder holding an older ``wattameter`` package (``pip install --target``,
see the Makefile), or ``installed`` for the version of the test environment. The double
(``tests/generation/sampler/fake_nvml.py``) replaces the ``pynvml`` module before WattAMeter
imports it; everything else — trackers, threads, file names, headers, rows, the signal
handling that writes the last rows — is WattAMeter's own code. Every power read advances the
double's tick, so each GPU's power rises by ``step_mw`` per read. The process runs until it
receives SIGINT, as WattAMeter does under Slurm.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "generation" / "sampler"))

import fake_nvml  # noqa: E402  (the double imports the real binding's constants first)


def install_double(n_gpus: int) -> fake_nvml.FakeNvml:
    """Put the NVML double in place of ``pynvml``: GPU g starts at 70 W + 10 W·g."""
    gpus = [fake_nvml.FakeGpu(uuid=f"GPU-00000000-0000-0000-0000-{g:012d}",
                              base_power_mw=70_000 + 10_000 * g, step_mw=250)
            for g in range(n_gpus)]
    fake = fake_nvml.FakeNvml(gpus)
    field_values = fake.nvmlDeviceGetFieldValues
    power_usage = fake.nvmlDeviceGetPowerUsage

    def usage(handle):  # nvmlDeviceGetPowerUsage (WattAMeter up to 0.9.1): one tick per read
        field_values(handle, [fake.NVML_FI_DEV_POWER_INSTANT])
        return power_usage(handle)

    fake.nvmlDeviceGetPowerUsage = usage
    sys.modules["pynvml"] = fake  # type: ignore[assignment]
    # no AMD GPU either: the amdsmi package (a dependency of zeus) fails at import without
    # ROCm's library, with a KeyError that WattAMeter's optional import does not catch
    sys.modules["amdsmi"] = None  # type: ignore[assignment]
    return fake


def main() -> None:
    writer, work, n_gpus, sep, *args = sys.argv[1:]
    assert sep == "--", "usage: WRITER_PATH WORK_DIR N_GPUS -- <wattameter arguments>"
    install_double(int(n_gpus))
    if writer != "installed":
        sys.path.insert(0, writer)
    os.chdir(work)
    from wattameter.cli.main import main as wattameter_main

    print("wattameter from", os.path.dirname(sys.modules["wattameter"].__file__ or ""),
          flush=True)
    sys.argv = ["wattameter", *args]
    wattameter_main()


if __name__ == "__main__":
    main()
