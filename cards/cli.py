"""The ``card`` subcommand, and the card writer every folder-changing command calls once.

Registered through the ``llm_powertrace.commands`` entry-point group (pyproject.toml): registering also hands
:func:`cards.builder.refresh_card` to ``llm_powertrace_ds.hooks``, so ``import``, ``pack``,
``merge``, ``generate`` and ``demo`` rebuild the full card once per command without the library
importing this package.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from llm_powertrace_ds import hooks, layout
from llm_powertrace_ds.errors import InputError

from .builder import refresh_card


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``card`` subcommand and register the card writer."""
    hooks.register_card_writer("cards", refresh_card)
    p = sub.add_parser("card", help="regenerate the dataset card (README.md)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  llm-powertrace card llm-powertrace")
    p.add_argument("dir", type=Path, help="dataset folder")
    p.set_defaults(func=cmd_card)


def cmd_card(args: argparse.Namespace) -> int:
    """Rebuild ``DIR/README.md`` (incrementally: unchanged runs reuse their cached summary)."""
    from llm_powertrace_ds.memory import reuse_freed_memory

    reuse_freed_memory()  # run after run of alike size: keep freed buffers (memory.py)
    root = Path(args.dir)
    if not layout.data_root(root).is_dir():
        raise InputError(f"'{root}' is not a dataset folder (no data/ inside)", field="DIR")
    print(refresh_card(root))
    return 0
