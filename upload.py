#!/usr/bin/env python
"""Publish a dataset folder to the Hugging Face Hub.

::

    python upload.py DIR --repo-id ORG/NAME [--private] [--revision BRANCH] [--tag vX.Y]
                     [--create-pr] [--dry-run] [--file-format parquet|arrow] [--allow-proxy]
    python upload.py DIR --space ORG/NAME [--repo-id ORG/NAME] [--dry-run] [--allow-proxy]

Before any network call: every run passes validation, ``cpu_proxy`` runs are refused unless
``--allow-proxy``, the folder's card is regenerated, every shard has its config's exact schema
and every (config, split) holds rows (Arrow-level, nothing copied). The upload itself is a packed
temporary copy (``pack``), in Parquet by default — what the Hub's viewer, DuckDB, Spark and
Polars read where it lies (one row group per run in the trace configs, content-defined chunking
and page index where pyarrow supports them) — or, with ``--file-format arrow``, in Arrow IPC,
with the card's globs following the format; every (config, split) of that
copy must load with ``datasets.load_dataset`` (streaming: no cached second copy) and,
for Parquet, equal the Arrow shards table for table. ``.staging/`` and lock files are never
uploaded. Temporary disk stays near one packed copy of the dataset (a Parquet copy replaces the
Arrow shards one by one); its measured peak is part of the plan. ``--dry-run`` prints the plan
(files, sizes, commits, card diff, temporary disk) and makes no network
call.

Large uploads go in several commits (data first, the card last). Re-running after an
interruption is safe: ``huggingface_hub`` skips files whose content is already on the Hub and
never makes an empty commit. Several commits are not atomic on a branch: for an atomic
publication use ``--create-pr`` (every commit goes to one pull request) and merge it.

``--space ORG/NAME`` publishes the dataset's explorer (``llm-powertrace explore``) as a static
Hugging Face Space (``sdk: static``), after the dataset when ``--repo-id`` is given too; its
``data/`` and ``assets/`` folders are replaced as a whole, so runs removed from the dataset leave
the Space as well.

The token comes from ``HF_TOKEN`` or the login cache (``hf auth login``); it is never printed,
logged or written. Exit codes: 0 ok, 1 failure, 2 bad usage.
"""

from __future__ import annotations

import argparse
import difflib
import glob
import html
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_powertrace_ds.formatting import safe_text
from llm_powertrace_ds.hub_upload import (
    UploadError,
    check_loads,
    check_shards,
    write_parquet_copy,
)
from llm_powertrace_ds.procs import pid_alive

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
LOGIN_HINT = ("run `hf auth login` (or set the HF_TOKEN environment variable to a token with "
              "write access) and try again")
MAX_COMMIT_FILES = 100
"""Most files in one commit (the card and figures go in the last one)."""
MAX_COMMIT_BYTES = 4 * 1024**3
"""Most bytes in one commit."""
NEVER_UPLOAD = [".staging/**", "**/.staging/**", "*.lock", "**/*.lock", ".*", "**/.*"]
"""Passed as ``ignore_patterns`` on every upload, whatever the plan says."""
CARD_FILES = ("README.md", "card/columns.md", "card/metrics.md", "croissant.json")
"""Written from the data by the card builder: the card, its detail pages, its Croissant
metadata."""
DIFF_MAX_LINES = 40
"""Card diff lines printed by a text plan (the JSON plan holds them all)."""



class _Printer:
    """Every line this script prints goes through here, with the token scrubbed."""

    def __init__(self) -> None:
        self.secret: str | None = None

    def scrub(self, text: str) -> str:
        return text.replace(self.secret, "***") if self.secret else text

    def out(self, text: str = "") -> None:
        print(self.scrub(text))

    def err(self, text: str) -> None:
        print(self.scrub(text), file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The ``upload.py`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="upload.py",
        description="Publish a dataset folder to the Hugging Face Hub (repo type dataset).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  HF_HUB_OFFLINE=1 python upload.py llm-powertrace --repo-id ORG/llm-powertrace "
        "--dry-run\n"
        "  python upload.py llm-powertrace --repo-id ORG/llm-powertrace --create-pr "
        "--file-format parquet\n"
        "exit codes: 0 ok, 1 failure, 2 bad usage.",
    )
    parser.add_argument("dir", type=Path, metavar="DIR", help="dataset folder to publish")
    parser.add_argument("--repo-id", default=None, metavar="ORG/NAME",
                        help="Hub dataset repository (required unless --space; there is no "
                        "default organisation)")
    parser.add_argument("--space", default=None, metavar="ORG/NAME",
                        help="also (or only) publish the explorer site as a static Space "
                        "(default: none)")
    parser.add_argument("--private", action="store_true",
                        help="create the repository as private (default: public; an existing "
                        "repository keeps its visibility)")
    parser.add_argument("--revision", default=None, metavar="BRANCH",
                        help="branch to upload to, created when missing (default: main)")
    parser.add_argument("--tag", default=None, metavar="vX.Y",
                        help="tag the uploaded revision (default: no tag)")
    parser.add_argument("--create-pr", action="store_true",
                        help="upload into one pull request instead of committing to the branch "
                        "(atomic publication: merge it when it looks right; default: off)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan (files, sizes, commits, card diff); no network call")
    parser.add_argument("--file-format", choices=("parquet", "arrow"), default="parquet",
                        help="format of the uploaded shards (default: parquet, which the Hub's "
                        "viewer, DuckDB, Spark and Polars read as is; arrow: Arrow IPC streams)")
    parser.add_argument("--allow-proxy", action="store_true",
                        help="publish cpu_proxy runs too (not GPU measurements; default: refuse)")
    parser.add_argument("--allow-unlicensed-sources", action="store_true",
                        help="publish runs of a source whose licence does not allow "
                        "redistribution (sources.json; you must hold the rights; default: "
                        "refuse)")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="how the plan (and the result) is printed (default: table)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks (default: off)")
    return parser


# ---------------------------------------------------------------------------------------------
# Checks before any network call
# ---------------------------------------------------------------------------------------------

@dataclass
class FolderCheck:
    """What the local checks found.

    Attributes:
        runs: published runs.
        proxy_runs: run ids of ``cpu_proxy`` runs.
        splits: (config, split) pairs that loaded.
        unpublished: run folders in ``.staging/`` (not uploaded).
    """

    runs: int = 0
    proxy_runs: list[str] = field(default_factory=list)
    splits: list[tuple[str, str]] = field(default_factory=list)
    unpublished: int = 0


def validate_folder(root: Path) -> FolderCheck:
    """Re-validate the folder and every published run; raise ``UploadError`` on any error.

    The checks are ``llm_powertrace_ds.folder_check.validate_folder`` (the same as
    ``llm-powertrace validate DIR``).
    """
    from llm_powertrace_ds import folder_check

    report = folder_check.validate_folder(root)
    # The folder first: no symlink or stray file, every trace paired with its runs row, and
    # cpu_proxy data found in the trace files themselves (not only in the runs rows).
    if report.problems:
        problems = report.problems
        raise UploadError(f"'{root}' is not publishable: {'; '.join(problems[:5])}"
                          + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
                          + "; llm-powertrace validate DIR lists them")
    failed = [f"{r.run_id} ({', '.join(r.errors)})" for r in report.failed_runs]
    if failed:
        raise UploadError(f"{len(failed)} run(s) fail validation: {'; '.join(failed)}; fix or "
                          "remove them (llm-powertrace validate DIR shows why)")
    # runs not published yet (a published or salvaged run may keep its killed attempts)
    return FolderCheck(runs=len(report.runs), proxy_runs=report.proxy_runs,
                       unpublished=len(report.unpublished))


def publishable_folder(root: Path, *, allow_proxy: bool,
                       allow_unlicensed: bool = False) -> FolderCheck:
    """The checks before anything is prepared: a dataset folder, valid runs, the proxy gate."""
    if not (root / "data").is_dir():
        raise UploadError(f"'{root}' is not a dataset folder (it has no data/ folder)")
    from llm_powertrace_ds.sources.provenance import unredistributable

    blocked = unredistributable(root)
    if blocked and not allow_unlicensed:
        names = ", ".join(f"{e.get('name')} ({e.get('licence')})" for e in blocked)
        raise UploadError(
            f"'{root}' holds runs of source(s) without a redistribution licence: {names} "
            "(sources.json); pass --allow-unlicensed-sources only if you hold the rights")
    check = validate_folder(root)
    if check.runs == 0:
        raise UploadError(f"'{root}' holds no published run")
    if check.proxy_runs and not allow_proxy:
        raise UploadError(
            f"'{root}' holds {len(check.proxy_runs)} cpu_proxy run(s) (modelled from CPU "
            "activity, not GPU measurements); pass --allow-proxy to publish them anyway")
    return check



def upload_files(root: Path) -> list[tuple[str, int]]:
    """``(path relative to root, size)`` of every file to upload: no hidden path, no lock."""
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or any(p.startswith(".") for p in rel.parts):
            continue
        if path.suffix == ".lock":
            continue
        out.append((rel.as_posix(), path.stat().st_size))
    return out


def plan_commits(files: list[tuple[str, int]], *, max_files: int | None = None,
                 max_bytes: int | None = None) -> list[list[tuple[str, int]]]:
    """Split the files into commits: data in batches, the card and figures in the last one.

    Everything goes in one commit when it fits.
    """
    max_files = max_files or MAX_COMMIT_FILES
    max_bytes = max_bytes or MAX_COMMIT_BYTES
    if len(files) <= max_files and sum(s for _, s in files) <= max_bytes:
        return [list(files)] if files else []
    data = [f for f in files if f[0].startswith("data/")]
    rest = [f for f in files if not f[0].startswith("data/")]
    commits: list[list[tuple[str, int]]] = [[]]
    size = 0
    for f in data:
        if commits[-1] and (len(commits[-1]) >= max_files or size + f[1] > max_bytes):
            commits.append([])
            size = 0
        commits[-1].append(f)
        size += f[1]
    if rest:
        commits.append(rest)
    return [c for c in commits if c]


def human_bytes(n: float) -> str:
    """``1.2 MB`` style sizes (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _commit_summary(commit: list[tuple[str, int]]) -> str:
    data = sum(1 for p, _ in commit if p.startswith("data/"))
    figs = sum(1 for p, _ in commit if p.startswith("figures/"))
    parts = []
    if data:
        parts.append(f"data ({data} file(s))")
    parts += [name for name in CARD_FILES if any(p == name for p, _ in commit)]
    if figs:
        parts.append(f"figures ({figs})")
    other = len(commit) - data - figs - sum(1 for p, _ in commit if p in CARD_FILES)
    if other:
        parts.append(f"{other} other file(s)")
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

@dataclass
class Plan:
    """What will be uploaded (printed by ``--dry-run`` and before a real upload)."""

    dir: str
    repo_id: str
    revision: str
    private: bool
    create_pr: bool
    tag: str | None
    file_format: str
    runs: int
    proxy_runs: int
    unpublished: int
    splits_checked: int
    files: list[tuple[str, int]]
    commits: list[list[tuple[str, int]]]
    card_diff: list[str]
    temp_disk_peak_bytes: int = 0
    dataset_bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "dir": self.dir, "repo_id": self.repo_id, "repo_type": "dataset",
            "revision": self.revision, "private": self.private, "create_pr": self.create_pr,
            "tag": self.tag, "file_format": self.file_format, "runs": self.runs,
            "proxy_runs": self.proxy_runs, "unpublished_runs": self.unpublished,
            "splits_checked": self.splits_checked,
            "files": [{"path": p, "bytes": s} for p, s in self.files],
            "total_bytes": sum(s for _, s in self.files),
            "commits": [{"files": [p for p, _ in c], "bytes": sum(s for _, s in c)}
                        for c in self.commits],
            "card_diff": self.card_diff,
            "temp_disk_peak_bytes": self.temp_disk_peak_bytes,
            "dataset_bytes": self.dataset_bytes,
        }

    def lines(self) -> list[str]:
        total = sum(s for _, s in self.files)
        out = [
            f"upload plan: {self.dir} -> https://huggingface.co/datasets/{self.repo_id}",
            f"  revision {self.revision}, {'private' if self.private else 'public'} if created, "
            f"file format {self.file_format}, pull request: {'yes' if self.create_pr else 'no'}, "
            f"tag: {self.tag or '-'}",
            f"checks: {self.runs} run(s) pass validation"
            + (f" ({self.proxy_runs} cpu_proxy run(s) allowed)" if self.proxy_runs else "")
            + f"; card regenerated; {self.splits_checked} (config, split) pair(s): every shard's "
            "schema and rows checked in the folder, and each loads with load_dataset "
            "(streaming) from the upload copy",
        ]
        if self.unpublished:
            out.append(f"not uploaded: {self.unpublished} unpublished run(s) in .staging/")
        ratio = self.temp_disk_peak_bytes / self.dataset_bytes if self.dataset_bytes else 0.0
        out.append(f"temporary disk at its peak: {human_bytes(self.temp_disk_peak_bytes)} "
                   f"({ratio:.2f}x the dataset's {human_bytes(self.dataset_bytes)})")
        out.append(f"files: {len(self.files)} ({human_bytes(total)})")
        out += [f"  {human_bytes(s):>10}  {p}" for p, s in self.files]
        out.append(f"commits: {len(self.commits)}")
        for i, commit in enumerate(self.commits, 1):
            out.append(f"  {i}. {len(commit)} file(s), {human_bytes(sum(s for _, s in commit))}: "
                       f"{_commit_summary(commit)}")
        if not self.card_diff:
            out.append("card diff: none (README.md in the folder is the card that is uploaded)")
        else:
            out.append("card diff (README.md in the folder -> the uploaded card):")
            shown = self.card_diff[:DIFF_MAX_LINES]
            out += ["  " + line for line in shown]
            if len(self.card_diff) > len(shown):
                out.append(f"  ... {len(self.card_diff) - len(shown)} more diff line(s) "
                           "(--format json lists them all)")
        return out


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link a file (cheap, read-only use), or copy it when the link is not possible."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _copy_sources_record(root: Path, dst: Path) -> None:
    """Carry ``sources.json`` (what ``get`` recorded: licence, citation, URL) into a copy."""
    from llm_powertrace_ds.sources.provenance import copy_public

    copy_public(root, dst)  # through the privacy gate: no signed-URL token or private host


def _prepare(args: argparse.Namespace, work: Path) -> tuple[Plan, Path]:
    """Every local step: checks, card, packed copy (and Parquet copy), the plan."""
    from cards.builder import CardOptions, refresh_card, write_card
    from cards.figures import FIGURES_DIR
    from llm_powertrace_ds import shards

    root = args.dir
    check = publishable_folder(root, allow_proxy=args.allow_proxy,
                               allow_unlicensed=args.allow_unlicensed_sources)
    readme = root / "README.md"
    old_card = readme.read_text(encoding="utf-8") if readme.exists() else ""
    packed = work / "arrow"
    if args.dry_run:
        # A dry run changes nothing in the source folder: its card is written in a copy of
        # data/ and README.md only (issue 12, item 6; tests/adversarial prove it by tree hash).
        source = work / "source"
        shutil.copytree(root / "data", source / "data", copy_function=_link_or_copy,
                        ignore=shutil.ignore_patterns(".*"))
        _copy_sources_record(root, source)
        refresh_card(source)
        pairs = check_shards(source)
        shutil.rmtree(source)
    else:
        refresh_card(root)
        pairs = check_shards(root)
    disk = DiskMeter(work)  # after the dry run's hard-linked copy is gone (it used no disk)

    shards.pack(root, packed, refresh_card=False)  # the card is written below, with the repo id
    _copy_sources_record(root, packed)  # the card's licence and citation of imported sources
    shutil.rmtree(packed / ".staging", ignore_errors=True)
    for png in sorted((root / FIGURES_DIR).glob("trace-*.png")):  # current ones are reused
        target = packed / FIGURES_DIR / png.name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, target)
    options = CardOptions(repo_id=args.repo_id)
    write_card(packed, options)
    disk.measure()
    upload_root = packed
    if args.file_format == "parquet":
        upload_root = work / "parquet"
        write_card(packed, CardOptions(repo_id=args.repo_id, file_format="parquet"),
                   out_dir=upload_root)
        # shard by shard, each Arrow shard removed once its Parquet twin is checked
        write_parquet_copy(packed, upload_root, remove_source=True, on_file=disk.measure)
        _copy_sources_record(packed, upload_root)
    shutil.rmtree(upload_root / ".staging", ignore_errors=True)
    copy_pairs = check_loads(upload_root, work / "cache")
    disk.measure()
    if sorted(copy_pairs) != sorted(pairs):
        raise UploadError("the upload copy does not hold the same (config, split) pairs as "
                          f"'{root}'")
    new_card = (upload_root / "README.md").read_text(encoding="utf-8")
    diff = list(difflib.unified_diff(old_card.splitlines(), new_card.splitlines(),
                                     f"{root}/README.md", "README.md (uploaded)", lineterm=""))
    files = upload_files(upload_root)
    plan = Plan(dir=str(root), repo_id=args.repo_id, revision=args.revision or "main",
                private=args.private, create_pr=args.create_pr, tag=args.tag,
                file_format=args.file_format, runs=check.runs,
                proxy_runs=len(check.proxy_runs), unpublished=check.unpublished,
                splits_checked=len(pairs), files=files, commits=plan_commits(files),
                card_diff=diff, temp_disk_peak_bytes=disk.peak,
                dataset_bytes=DiskMeter.size(root / "data"))
    return plan, upload_root


class DiskMeter:
    """The peak size of a temporary folder, measured after each step that grows it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.peak = 0

    @staticmethod
    def size(folder: Path) -> int:
        """Bytes of every file under ``folder``."""
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())

    def measure(self) -> None:
        """Record the folder's current size."""
        self.peak = max(self.peak, self.size(self.folder))


def _token() -> str:
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise UploadError(f"no Hugging Face token found: {LOGIN_HINT}")
    return token


def _is_auth_error(exc: Exception) -> bool:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None) in (401, 403)


def _publish(api: Any, plan: Plan, upload_root: Path,
             printer: _Printer | None) -> dict[str, Any]:
    """The network part: repo, branch, commits (one pull request with ``create_pr``), tag."""
    from huggingface_hub.errors import RevisionNotFoundError

    repo_id = plan.repo_id
    try:
        api.whoami()
    except Exception as exc:
        if _is_auth_error(exc):
            raise UploadError(f"the Hugging Face token was rejected: {LOGIN_HINT}") from exc
        raise
    api.create_repo(repo_id, repo_type="dataset", private=plan.private, exist_ok=True)
    revision = plan.revision
    if revision != "main":
        api.create_branch(repo_id, repo_type="dataset", branch=revision, exist_ok=True)
    try:
        remote = set(api.list_repo_files(repo_id, repo_type="dataset", revision=revision))
    except RevisionNotFoundError:
        remote = set()
    planned = {p for p, _ in plan.files}
    stale = sorted(p for p in remote - planned
                   if p.startswith(("data/", "figures/")))
    result: dict[str, Any] = {"repo_id": repo_id, "commits": [], "deleted": stale}
    target, pr_url = revision, None
    n = len(plan.commits)
    for i, commit in enumerate(plan.commits, 1):
        last = i == n
        first_pr = plan.create_pr and i == 1
        info = api.upload_folder(
            repo_id=repo_id, repo_type="dataset", folder_path=str(upload_root),
            allow_patterns=[glob.escape(p) for p, _ in commit],
            ignore_patterns=list(NEVER_UPLOAD),
            delete_patterns=[glob.escape(p) for p in stale] if last and stale else None,
            revision=target, create_pr=first_pr or None,
            commit_message=f"Upload LLM-PowerTrace ({i}/{n}): {_commit_summary(commit)}",
            commit_description=f"{plan.runs} run(s), file format {plan.file_format}; "
            "written by upload.py",
        )
        if first_pr:
            target = getattr(info, "pr_revision", None) or target
            pr_url = getattr(info, "pr_url", None)
        result["commits"].append(getattr(info, "commit_url", None))
        if printer:
            printer.out(f"commit {i}/{n}: {len(commit)} file(s) uploaded")
    if plan.tag:
        api.create_tag(repo_id, repo_type="dataset", tag=plan.tag, revision=revision,
                       tag_message=f"LLM-PowerTrace {plan.tag}")
    result["pr_url"] = pr_url
    return result


def main(argv: Sequence[str] | None = None, *, api: Any = None) -> int:
    """Run ``upload.py``; returns the exit code.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).
        api: an ``huggingface_hub.HfApi``-like object (tests pass a test double); default: a
            real ``HfApi`` with the token from ``HF_TOKEN`` or the login cache.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or bad usage (argparse says why)
        return EXIT_OK if not exc.code else EXIT_USAGE
    from llm_powertrace_ds.hub import REPO_ID_RE

    printer = _Printer()
    if not args.repo_id and not args.space:
        printer.err("error: give --repo-id ORG/NAME (the dataset), --space ORG/NAME (the "
                    "explorer), or both")
        return EXIT_USAGE
    for flag, value in (("--repo-id", args.repo_id), ("--space", args.space)):
        if value is not None and not REPO_ID_RE.match(value):
            printer.err(f"error: {flag} {value!r} is not of the form ORG/NAME")
            return EXIT_USAGE
    if args.tag and args.create_pr:
        printer.err("error: --tag cannot be combined with --create-pr: merge the pull request, "
                    "then tag the merged revision")
        return EXIT_USAGE
    try:
        return _run(args, api, printer)
    except UploadError as exc:
        if args.debug:
            raise
        printer.err(f"error: {exc}")
        return EXIT_FAILURE
    except Exception as exc:
        if args.debug:
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        printer.err(f"error: {type(exc).__name__}: {first}")
        printer.err("hint: run with --debug for the traceback")
        return EXIT_FAILURE


WORK_PREFIX = "llm-powertrace-"
"""Prefix of upload.py's temporary work folders: ``<prefix>{upload,space}-<pid>-<random>``."""
_WORK_RE = re.compile(rf"^{re.escape(WORK_PREFIX)}(?:upload|space)-(\d+)-")


def _remove_stale_work_dirs() -> list[Path]:
    """Remove the work folders of upload.py runs that were killed (their pid is gone).

    A killed upload leaves its packed copy in the temporary folder; the next upload removes it.
    Folders of a live process (another upload running now) are left alone.
    """
    removed = []
    base = Path(tempfile.gettempdir())
    for entry in base.glob(f"{WORK_PREFIX}*"):
        m = _WORK_RE.match(entry.name)
        if m and entry.is_dir() and not entry.is_symlink() and not pid_alive(int(m.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
    return env or constants.is_offline_mode()


def _run(args: argparse.Namespace, api: Any, printer: _Printer) -> int:
    token = None
    if not args.dry_run:  # fail fast, before the (slow) local checks
        if _offline():
            raise UploadError("HF_HUB_OFFLINE is set: unset it to upload, or pass --dry-run")
        token = _token()
        printer.secret = token
    both = bool(args.repo_id and args.space)
    args.json_plans = {} if both and args.format == "json" else None
    if args.repo_id:
        code = _run_dataset(args, api, printer, token)
        if code or not args.space:
            return code
    code = _run_space(args, api, printer, token)
    if args.json_plans:  # one JSON document for both plans (strict parsers read one)
        printer.out(json.dumps(args.json_plans, indent=2))
    return code


def _show_plan(plan: Any, args: argparse.Namespace, printer: _Printer, dry_note: str) -> bool:
    """Print a plan (its JSON only for a dry run with ``--format json``); True on a dry run.

    With both ``--repo-id`` and ``--space`` the two plans are printed together, as one JSON
    object ``{"dataset": ..., "space": ...}``.
    """
    as_json = args.format == "json"
    collected = getattr(args, "json_plans", None)
    if as_json and args.dry_run and collected is not None:
        collected["space" if isinstance(plan, SpacePlan) else "dataset"] = plan.as_json()
    elif as_json and args.dry_run:
        printer.out(json.dumps(plan.as_json(), indent=2))
    elif not as_json:
        for line in plan.lines():
            printer.out(line)
    if args.dry_run and not as_json:
        printer.out(dry_note)
    return bool(args.dry_run)


def _hf_api(token: str | None) -> Any:
    from huggingface_hub import HfApi

    return HfApi(token=token)


def _run_dataset(args: argparse.Namespace, api: Any, printer: _Printer,
                 token: str | None) -> int:
    _remove_stale_work_dirs()
    with tempfile.TemporaryDirectory(prefix=f"{WORK_PREFIX}upload-{os.getpid()}-") as tmp:
        plan, upload_root = _prepare(args, Path(tmp))
        if _show_plan(plan, args, printer,
                      "dry run: nothing was uploaded and no network call was made"):
            return EXIT_OK
        api = api if api is not None else _hf_api(token)
        as_json = args.format == "json"
        result = _publish(api, plan, upload_root, None if as_json else printer)
    if as_json:
        printer.out(json.dumps({**plan.as_json(), "result": result}, indent=2))
        return EXIT_OK
    where = result["pr_url"] or f"https://huggingface.co/datasets/{plan.repo_id}"
    printer.out(f"uploaded {len(plan.files)} file(s) in {len(plan.commits)} commit(s) to {where}"
                + (f"; deleted {len(result['deleted'])} stale file(s)" if result["deleted"] else "")
                + (f"; tagged {plan.tag}" if plan.tag else ""))
    if result["pr_url"]:
        printer.out("merge the pull request to publish it atomically")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# The explorer as a static Space
# ---------------------------------------------------------------------------------------------

SPACE_REPLACED = ["data/**", "assets/**"]
"""Remote folders replaced as a whole on every Space upload (stale runs go)."""


def _yaml_str(text: str) -> str:
    """A YAML scalar that is exactly ``text``: a JSON string, which YAML reads as it is.

    So no ``: ``, ``#`` or newline in a folder name can add keys or break the header.
    """
    return json.dumps(text, ensure_ascii=False)


def space_readme(space_id: str, dataset_name: str, repo_id: str | None) -> str:
    """The Space's README.md: the YAML that makes it a static Space, and one paragraph.

    The dataset's name comes from the user's folder name: it passes the output sanitiser (no
    control or bidi characters), is quoted in the YAML and HTML-escaped in the Markdown.
    """
    name = " ".join(safe_text(dataset_name).split()) or "dataset"
    title = f"{name.split('/')[-1]} explorer"
    lines = ["---", f"title: {_yaml_str(title)}", "emoji: ⚡",
             "colorFrom: yellow", "colorTo: gray", "sdk: static", "app_file: index.html",
             "pinned: false", "short_description: Per-GPU power traces of LLM jobs, explored"]
    if repo_id:
        lines += ["datasets:", f"- {_yaml_str(repo_id)}"]
    lines += ["---", "", f"# {html.escape(name)}: LLM-PowerTrace explorer", "",
              "A static site written by `llm-powertrace explore`: the runs catalog, a zoomable "
              "run page per run, a compare view and a sweep view. It needs no server and loads "
              "nothing from the network."]
    if repo_id:
        lines += ["", f"Data: https://huggingface.co/datasets/{repo_id}"]
    return "\n".join(lines) + "\n"


@dataclass
class SpacePlan:
    """What the Space upload will send."""

    dir: str
    space_id: str
    runs: int
    proxy_runs: int
    files: list[tuple[str, int]]

    def as_json(self) -> dict[str, Any]:
        return {"dir": self.dir, "space_id": self.space_id, "repo_type": "space",
                "space_sdk": "static", "runs": self.runs, "proxy_runs": self.proxy_runs,
                "files": [{"path": p, "bytes": n} for p, n in self.files],
                "total_bytes": sum(n for _, n in self.files),
                "replaced": SPACE_REPLACED}

    def lines(self) -> list[str]:
        total = sum(n for _, n in self.files)
        return [f"space plan: {self.dir} -> https://huggingface.co/spaces/{self.space_id} "
                "(static)",
                f"  explorer of {self.runs} run(s)"
                + (f" ({self.proxy_runs} cpu_proxy run(s) allowed)" if self.proxy_runs else "")
                + f"; {len(self.files)} file(s), {human_bytes(total)} in one commit; "
                f"remote {', '.join(SPACE_REPLACED)} replaced"]


def _prepare_space(args: argparse.Namespace, work: Path) -> tuple[SpacePlan, Path]:
    from llm_powertrace_ds.explore import build_site

    root = args.dir
    publishable_folder(root, allow_proxy=args.allow_proxy,
                               allow_unlicensed=args.allow_unlicensed_sources)
    name = args.repo_id or root.resolve().name
    site = work / "space"
    report = build_site(root, site, name=name)
    (site / "README.md").write_text(space_readme(args.space, name, args.repo_id),
                                    encoding="utf-8")
    files = [(p.relative_to(site).as_posix(), p.stat().st_size)
             for p in sorted(site.rglob("*")) if p.is_file()]
    return SpacePlan(str(root), args.space, report.runs, report.proxy_runs, files), site


def _run_space(args: argparse.Namespace, api: Any, printer: _Printer,
               token: str | None) -> int:
    as_json = args.format == "json"
    _remove_stale_work_dirs()
    with tempfile.TemporaryDirectory(prefix=f"{WORK_PREFIX}space-{os.getpid()}-") as tmp:
        plan, site = _prepare_space(args, Path(tmp))
        if _show_plan(plan, args, printer,
                      "dry run: the Space was not uploaded and no network call was made"):
            return EXIT_OK
        api = api if api is not None else _hf_api(token)
        api.create_repo(plan.space_id, repo_type="space", space_sdk="static",
                        private=args.private, exist_ok=True)
        info = api.upload_folder(
            repo_id=plan.space_id, repo_type="space", folder_path=str(site),
            ignore_patterns=list(NEVER_UPLOAD), delete_patterns=list(SPACE_REPLACED),
            commit_message=f"Explorer of {plan.runs} run(s)",
            commit_description="written by upload.py --space (llm-powertrace explore)")
    url = f"https://huggingface.co/spaces/{plan.space_id}"
    if as_json:
        printer.out(json.dumps({**plan.as_json(), "result": {
            "url": url, "commit": getattr(info, "commit_url", None)}}, indent=2))
    else:
        printer.out(f"uploaded the explorer ({len(plan.files)} file(s)) to {url}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
