"""Record anything into the dataset: a command, a block of Python, a training script.

* :func:`record_command` (``llm-powertrace record -- CMD``): any program as one run.
* :class:`Recording`: a context manager around any block, with ``mark(kind, ...)`` events.
* :func:`attach`: from inside a program run by ``record`` (or another rank), mark events and
  report results into the run being recorded.
* :mod:`generation.record.callback`: a ``transformers``/TRL ``TrainerCallback`` (imports
  ``transformers`` only there).

Nothing here imports torch.
"""

from __future__ import annotations

from .command import CommandOutcome, exit_status, record_command
from .session import (
    RECORD_DIR_ENV,
    Attached,
    RecordConfig,
    RecordError,
    Recording,
    active,
    attach,
    check_axes,
)

__all__ = [
    "RECORD_DIR_ENV",
    "Attached",
    "CommandOutcome",
    "RecordConfig",
    "RecordError",
    "Recording",
    "active",
    "attach",
    "check_axes",
    "exit_status",
    "record_command",
]
