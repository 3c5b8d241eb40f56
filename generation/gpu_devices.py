"""Which GPUs a run uses, by UUID: the GPUs sampled (and capped) are the GPUs the workload uses.

``CUDA_VISIBLE_DEVICES`` may hold integers, ``GPU-<uuid>`` entries (Kubernetes, Slurm GRES) or
``MIG-<uuid>`` entries; CUDA numbers the visible devices 0..n-1 in ``CUDA_DEVICE_ORDER``. This
module

* forces ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (:func:`pci_bus_order_env`) for the runner and every
  launched rank, so that CUDA's order is NVML's (NVML enumerates by PCI bus id);
* resolves the first ``n`` visible devices to NVML indices and UUIDs
  (:func:`resolve_workload_gpus`, through the sampler's own selection in
  ``generation.sampler.nvml``: integer entries, UUID entries and prefixes, the parent GPU of a
  MIG instance, a container whose NVML sees only its GPUs while ``CUDA_VISIBLE_DEVICES`` holds
  host indices) — never a silent fallback to NVML indices 0..n-1;
* compares, at run start, what torch reports for each CUDA device
  (``torch.cuda.get_device_properties(i).uuid``) with the NVML UUIDs the sampler reads
  (:func:`check_same_gpus`), and refuses the run on a mismatch.

Vendor-free: NVML is reached through ``generation.sampler.nvml``'s public functions; torch is
imported only inside :func:`torch_device_uuids`, which runs in the workload's process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass

from llm_powertrace_ds.errors import PowerTraceError

log = logging.getLogger(__name__)

DEVICE_ORDER = "PCI_BUS_ID"
"""The ``CUDA_DEVICE_ORDER`` every workload and launcher runs with (NVML's order)."""


class GpuMismatch(PowerTraceError, RuntimeError):
    """The GPUs the workload uses are not the GPUs the sampler reads (the run is refused)."""


@dataclass(frozen=True)
class WorkloadGpu:
    """One GPU of a run.

    Attributes:
        cuda_index: the device number the workload uses (``cuda:<i>``).
        nvml_index: the NVML index the sampler reads and settings apply to (a MIG instance's
            parent GPU).
        uuid: the raw NVML UUID the workload's CUDA device has (``GPU-...``, or ``MIG-...`` for
            a MIG instance); compared, never stored (rows hold a salted hash).
    """

    cuda_index: int
    nvml_index: int
    uuid: str


def pci_bus_order_env(env: MutableMapping[str, str] | None = None) -> MutableMapping[str, str]:
    """Set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` in ``env`` (default ``os.environ``); return it.

    A different value the user set is replaced, with a warning: with ``FASTEST_FIRST`` (CUDA's
    default) integer ``CUDA_VISIBLE_DEVICES`` entries are not NVML indices.
    """
    env = os.environ if env is None else env
    current = env.get("CUDA_DEVICE_ORDER")
    if current not in (None, DEVICE_ORDER):
        log.warning("CUDA_DEVICE_ORDER=%s replaced by %s so that CUDA's device order is NVML's",
                    current, DEVICE_ORDER)
    env["CUDA_DEVICE_ORDER"] = DEVICE_ORDER
    return env


def resolve_workload_gpus(n: int, env: Mapping[str, str] | None = None) -> list[WorkloadGpu]:
    """The NVML index and UUID of each of the first ``n`` devices the workload will see.

    Args:
        n: devices the run uses (its ranks, one GPU each; 1 inline).
        env: the environment of the workload (default ``os.environ``).

    Returns:
        ``n`` :class:`WorkloadGpu`, by CUDA index.

    Raises:
        GpuMismatch: fewer than ``n`` GPUs are visible.
        SamplerConfigError: a ``CUDA_VISIBLE_DEVICES`` entry NVML cannot resolve.
        SourceUnavailable: NVML is not usable.
    """
    from generation.sampler import nvml

    env = os.environ if env is None else env
    with nvml.session():
        selected = nvml.select_devices(None, allow_mig=True, env=env)
        if len(selected) < n:
            raise GpuMismatch(f"the run needs {n} GPU(s) but only {len(selected)} are visible "
                              f"(CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', 'unset')})")
        entries = nvml.visible_entries(env) or []
        out = []
        for i, (index, handle) in enumerate(selected[:n]):
            entry = entries[i] if i < len(entries) else ""
            # A MIG instance: the workload sees the instance's UUID, the sampler reads its parent.
            uuid = (nvml.mig_instance_uuid(entry) if entry.startswith("MIG-")
                    else nvml.device_uuid(handle))
            out.append(WorkloadGpu(i, index, uuid))
        return out


def normalise_uuid(uuid: object) -> str:
    """``GPU-1234abcd-...`` / ``1234abcd-...`` / a ``uuid.UUID`` -> ``1234abcd-...`` (lower)."""
    text = str(uuid).strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def check_same_gpus(workload_uuids: Sequence[object], sampled: Sequence[WorkloadGpu]) -> None:
    """Refuse a run whose CUDA devices are not the GPUs the sampler reads (same order).

    Args:
        workload_uuids: ``torch.cuda.get_device_properties(i).uuid`` per CUDA index used.
        sampled: the GPUs the sampler reads (:func:`resolve_workload_gpus`).

    Raises:
        GpuMismatch: a CUDA device whose UUID differs from the sampled GPU's; the message
            names the CUDA index and NVML index (never the UUIDs).
    """
    if len(workload_uuids) != len(sampled):
        raise GpuMismatch(f"the workload uses {len(workload_uuids)} CUDA device(s) but the "
                          f"sampler reads {len(sampled)} GPU(s)")
    for cuda_uuid, gpu in zip(workload_uuids, sampled, strict=True):
        if normalise_uuid(cuda_uuid) != normalise_uuid(gpu.uuid):
            raise GpuMismatch(
                f"cuda:{gpu.cuda_index} is not the GPU the sampler reads (NVML index "
                f"{gpu.nvml_index}): their UUIDs differ; check CUDA_VISIBLE_DEVICES and "
                f"CUDA_DEVICE_ORDER (must be {DEVICE_ORDER})")


def torch_device_uuids(indices: Sequence[int]) -> list[str]:
    """``torch.cuda.get_device_properties(i).uuid`` of each CUDA index (imports torch)."""
    import torch

    return [str(torch.cuda.get_device_properties(int(i)).uuid) for i in indices]


def persistence_modes(nvml_indices: Sequence[int]) -> list[bool | None]:
    """NVML persistence mode of each GPU (``None`` where unreadable or NVML is unusable)."""
    from generation.sampler import nvml
    from generation.sampler.errors import SourceError

    try:
        with nvml.session():
            out: list[bool | None] = []
            for index in nvml_indices:
                try:
                    out.append(nvml.persistence_mode(nvml.device_handle(index)))
                except SourceError:
                    out.append(None)
            return out
    except SourceError:
        return [None] * len(nvml_indices)
