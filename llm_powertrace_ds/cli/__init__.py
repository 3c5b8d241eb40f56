"""The ``llm-powertrace`` command line (thin: argument parsing, then library calls).

Subcommands live in their own modules, each exposing ``register(subparsers)`` which adds its
parser and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and returning an
exit code). Commands that need the ``generate`` extra import ``generation`` lazily, inside the
command, with a one-line error naming the extra when it is missing.

Exit codes: 0 ok, 1 failure (including a run with error-level quality flags), 2 bad usage.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import MissingExtra, PowerTraceError, UsageError
from ._common import FORMATS, add_format, add_global_flags, emit, out_dir

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
__all__ = ["EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "FORMATS", "add_format", "emit", "main",
           "out_dir"]

# One module per group of the library's subcommands; each has ``register(subparsers)``.
COMMAND_MODULES = [
    "llm_powertrace_ds.cli.core",
    "llm_powertrace_ds.cli.analysis",
    "llm_powertrace_ds.cli.facility",
    "llm_powertrace_ds.cli.mitigate",
    "llm_powertrace_ds.cli.explore",
    "llm_powertrace_ds.cli.get",
]
PLUGIN_GROUP = "llm_powertrace.commands"
"""Entry-point group through which the layers above the library (``generation``: ``generate``,
``merge``, ``salvage``, ``demo``, ``record``, ``restore-gpu-settings``; ``cards``: ``card``) add their commands, so the library
never imports them (pyproject.toml ``[project.entry-points."llm_powertrace.commands"]``)."""


def command_modules() -> list[Any]:
    """The library's command modules, then the installed plug-ins' (by entry-point name)."""
    from importlib.metadata import entry_points

    modules = [importlib.import_module(name) for name in COMMAND_MODULES]
    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        modules.append(ep.load())
    return modules

EPILOG = """exit codes: 0 ok, 1 failure, 2 bad usage.
examples:
  llm-powertrace demo
  llm-powertrace import nvidia-smi gpu.csv --out llm-powertrace --workload inference
  llm-powertrace validate llm-powertrace
"""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="llm-powertrace",
        description="Make, load, analyse and publish time-resolved GPU power traces of LLM "
        "fine-tuning and inference.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks (default: off)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="print only results and errors (default: off)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in command_modules():
        module.register(sub)
    for command in sub.choices.values():  # `llm-powertrace facility ... --quiet` too
        add_global_flags(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's final flush
        return code
    except BrokenPipeError:
        return _closed_pipe()
    except UsageError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("interrupted", file=sys.stderr)
        return 130
    except MissingExtra as exc:  # its message names the extra
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except ModuleNotFoundError as exc:
        if args.debug:
            raise
        print(f"error: {exc.name} is not installed: pip install 'llm-powertrace[generate]'",
              file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:
        if args.debug:
            raise
        print(f"error: {_message(exc)}", file=sys.stderr)
        if not _expected(exc):
            print("hint: run with --debug for the traceback", file=sys.stderr)
        return EXIT_FAILURE


# Errors whose one-line message says everything: the project's own (bad input, no such run...)
# and the user's file-system mistakes. Anything else is unexpected and gets the --debug hint.
EXPECTED_ERRORS = (PowerTraceError, FileNotFoundError, FileExistsError, IsADirectoryError,
                   NotADirectoryError, PermissionError)


def _expected(exc: BaseException) -> bool:
    return isinstance(exc, EXPECTED_ERRORS)


def _message(exc: BaseException) -> str:
    if _expected(exc) or isinstance(exc, (OSError, ValueError)):
        return str(exc) or type(exc).__name__
    return f"unexpected {type(exc).__name__}: {exc}"


def _closed_pipe() -> int:
    """The reader went away (``llm-powertrace metrics DIR | head``): stop quietly.

    Python's documented recipe: point stdout at devnull so that the interpreter's final flush
    raises nothing. Exit code 0: the reader chose to stop reading; nothing failed here.
    """
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a descriptor (captured): nothing to redirect
        pass
    return EXIT_OK
