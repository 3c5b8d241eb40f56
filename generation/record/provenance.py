"""The columns a recorded run knows before it is measured: identity and this host's provenance.

Library versions (``torch_version``, ...) are left null here: the recorded program may run in
another environment; :class:`generation.record.callback.PowerTraceCallback` reports the versions
the training script actually imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from generation.runner import host_hash, package_version
from llm_powertrace_ds import schema

SWEEP_NAME = "record"


def planned_meta(workload: str, run_id: str, axes: Mapping[str, Any], *,
                 program: str | None) -> dict[str, Any]:
    """The run's known columns before measuring.

    Identity (``run_id``, ``sweep`` = ``record``, ``repeat`` 0), ``program``, the axes, and
    ``package_version``, ``host_hash`` (salted), ``schema_version``.
    """
    meta: dict[str, Any] = {"run_id": run_id, "sweep": SWEEP_NAME, "repeat": 0,
                            "workload": workload, "program": program}
    meta.update(axes)
    meta.update(package_version=package_version(), host_hash=host_hash(),
                schema_version=schema.SCHEMA_VERSION)
    return meta


__all__ = ["SWEEP_NAME", "planned_meta"]
