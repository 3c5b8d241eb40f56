"""The generator: the power sampler, workloads, sweeps and the runner (the ``generate`` extra).

``generation.sampler`` measures (NVML in its own process, or the ``cpu_proxy`` model without a
GPU), ``generation.events`` marks workload events on the same clock, ``generation.workloads`` runs
fine-tuning and inference, ``generation.sweep`` expands sweep files and ``generation.runner``
turns each planned run into a published ``Run``. This package imports nothing at import time: the
sampler process imports ``generation.sampler`` and must never pull in torch or datasets.
"""
