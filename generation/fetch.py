"""Everything a sweep's runs read from outside, brought onto this node before the first run.

Weights (``model_source: hub``) and training text (a ``datasets`` Hub id or folder) are fetched
once per node, outside every measured window, and pinned: each run's settings get the local
folder and the commit that was fetched (``_checkpoint_path``, ``_model_revision``,
``_dataset_local``, ``_dataset_revision``; local settings, not hashed into run ids). A checkpoint
or dataset that cannot be fetched stops the sweep here, before any run, with one line naming
it — never a silent substitution of random weights or synthetic text.

With ``HF_HUB_OFFLINE=1`` only the local Hugging Face cache is consulted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .workloads import data, models


def fetch_inputs(settings_list: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Fetch the checkpoints and datasets of ``settings_list`` (each once) and pin them.

    Args:
        settings_list: the resolved settings of the runs to do (updated in place).

    Returns:
        What was fetched: ``{checkpoint or dataset: commit}``.

    Raises:
        InputError: the first checkpoint or dataset that cannot be fetched.
    """
    pinned: dict[str, str] = {}
    for (checkpoint, _rev), fetched in models.fetch_checkpoints(list(settings_list)).items():
        pinned[checkpoint] = fetched.revision
    datasets: dict[tuple[str, str | None], tuple[str, str]] = {}
    for settings in settings_list:
        if settings.get("_dataset_kind") != "datasets":
            continue
        key = (str(settings["_dataset_path"]), settings.get("dataset_revision"))
        if key not in datasets:
            datasets[key] = data.fetch_dataset(*key)
        local, revision = datasets[key]
        settings.update(_dataset_local=local, _dataset_revision=revision)
        pinned[key[0]] = revision
    return pinned
