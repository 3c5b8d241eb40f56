"""``llm-powertrace restore-gpu-settings``: put back GPU settings a killed run left behind.

A thin command over :func:`generation.sampler.journal.restore_orphans` (the journal of original
power limits and clock locks, written before any setting changes).
"""

from __future__ import annotations

import argparse

from llm_powertrace_ds.cli import add_format, emit


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``restore-gpu-settings``."""
    p = sub.add_parser(
        "restore-gpu-settings", help="restore GPU power limits and clocks a killed run left",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Restore the original power limit and unlock the clocks of every GPU "
        "whose settings a generate process changed and did not restore (it was killed). The "
        "originals come from the journal written before any setting changed (path: "
        "$LLM_POWERTRACE_GPU_JOURNAL, else $XDG_STATE_HOME/llm-powertrace/"
        "gpu-settings-journal-<host>.json: one file per node). Entries of running processes "
        "and of other hosts are left alone. Needs root, like the settings themselves.",
        epilog="examples:\n  sudo llm-powertrace restore-gpu-settings\n"
        "  llm-powertrace restore-gpu-settings --all-mine   # Slurm epilog (docs/generating.md)")
    p.add_argument("--all-mine", action="store_true",
                   help="restore every entry of this host written by the job's user "
                   "($SLURM_JOB_USER when run as root in an epilog, else the calling user)")
    add_format(p)
    p.set_defaults(func=cmd_restore)


def _job_uid() -> int:
    """The uid whose entries ``--all-mine`` restores: the Slurm job's user for root, else mine."""
    import os
    import pwd

    user = os.environ.get("SLURM_JOB_USER")
    if os.getuid() == 0 and user:
        return pwd.getpwnam(user).pw_uid
    return os.getuid()


def cmd_restore(args: argparse.Namespace) -> int:
    """Restore, print one row per GPU; exit 1 when a GPU could not be restored."""
    from generation.sampler.journal import journal_path, restore_orphans

    done = restore_orphans(uid=_job_uid() if args.all_mine else None)
    if not done:
        print(f"nothing to restore ({journal_path()} has no entry of a dead process)")
        return 0
    emit(done, args.format, ["gpu", "power_limit_w", "clocks_reset", "error"])
    return 1 if any("error" in d for d in done) else 0
