"""Mutation testing of the core modules with mutmut 3: kill rate per module.

    python bench/mutation.py [MODULE ...] [--work DIR] [--max-children N] [--markdown]
                             [--report-only | --rerun]

For each module (``metrics``, ``importers``, ``validate``, ``scaling``, ``shards``, ``process``,
``convert``; all when none is named) it copies the repository's tracked and untracked,
not-ignored files into ``DIR/<module>`` (default: a folder under the system temp dir), writes a
``[tool.mutmut]`` section there that mutates only that module and selects only the tests that
cover it, runs ``mutmut run`` in that copy and reads the verdicts back with ``mutmut results``.
The working tree is never touched (mutmut writes its ``mutants/`` folder into the copy).

Prints one row per module: mutants, killed, survived, judged equivalent (listed in
:data:`EQUIVALENT` with a one-line reason each), other verdicts (timeout, no tests, suspicious)
and the kill rate of the non-equivalent mutants, ``killed / (mutants − equivalent)``; then
every surviving mutant not judged equivalent, so the next test to write is in view. Every run
starts from a fresh copy (a verdict cached by mutmut could predate a new test).

Too slow for CI (minutes to an hour per module on two cores): run it before resolving a test
issue and whenever a core module changes (``make mutation``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Target:
    """One core module and the tests that cover it."""

    source: str
    """Glob of the mutated file(s), relative to the repository root."""
    tests: tuple[str, ...]
    """Test files or folders run against each mutant."""
    pytest_args: tuple[str, ...] = ()
    """Extra pytest arguments (e.g. ``-k`` to leave out a test too timing-sensitive to run
    beside mutmut's workers on a loaded machine)."""


TARGETS: dict[str, Target] = {
    # each module's whole test folder (tests mirror the package): a narrower selection leaves
    # the mutants of functions that only another file's tests reach "no tests" or "survived"
    "metrics": Target("llm_powertrace_ds/metrics/*.py", ("tests/llm_powertrace_ds/metrics",)),
    "importers": Target("llm_powertrace_ds/importers/*.py",
                        ("tests/llm_powertrace_ds/importers",)),
    "validate": Target("llm_powertrace_ds/validate.py",
                       ("tests/llm_powertrace_ds/test_validate.py",
                        "tests/llm_powertrace_ds/test_validate_behaviour.py")),
    "scaling": Target("llm_powertrace_ds/scaling/*.py", ("tests/llm_powertrace_ds/scaling",)),
    "shards": Target("llm_powertrace_ds/shards/*.py",
                     ("tests/llm_powertrace_ds/shards",
                      # stage/commit, iter_runs and repair are reached through the importers'
                      # streaming publish, the staging lifecycle and the folder checks
                      "tests/llm_powertrace_ds/importers/test_publish.py",
                      "tests/llm_powertrace_ds/test_staging.py",
                      "tests/llm_powertrace_ds/test_folder_integrity.py")),
    "process": Target("generation/sampler/process.py",
                      ("tests/generation/sampler/test_process.py",
                       "tests/generation/sampler/test_loop.py",
                       "tests/generation/sampler/test_child.py"),
                      # measures a real CPU burst: fails when other workers load the CPU
                      ("-k", "not cpu_proxy_burst_rises_and_falls")),
    "convert": Target("generation/sampler/convert.py",
                      ("tests/generation/sampler/test_convert.py",
                       "tests/generation/sampler/test_convert_behaviour.py")),
}

_V = "llm_powertrace_ds.validate."
_NAN_MIN = ("differs only on an all-NaN power series: NaN (with a RuntimeWarning) instead of "
            "±inf, and both compare False with the threshold")
_C = "generation.sampler.convert."
_INT64 = "spool ticks are int64 already, and numpy reads Python ints as int64"
EQUIVALENT: dict[str, str] = {
    # mutant name (as ``mutmut results`` prints it) -> why no test can tell it apart.
    _V + "x__longest_constant_run_ms__mutmut_3": "1 ms instead of 0 ms for < 2 readings never "
    "exceeds the 10 s stuck threshold",
    _V + "x__longest_constant_run_ms__mutmut_28": "1 ms instead of 0 ms for an all-NaN series "
    "never exceeds the 10 s stuck threshold",
    _V + "x_nominal_period_ms__mutmut_6": "one reading: the median of an empty diff is NaN, the "
    "same value the fallback returns",
    _V + "x_nominal_period_ms__mutmut_13": 'float("NAN") is float("nan")',
    _V + "x_validate_run__mutmut_71": _NAN_MIN,
    _V + "x_validate_run__mutmut_73": _NAN_MIN,
    _V + "x_validate_run__mutmut_128": _NAN_MIN,
    _V + "x_validate_run__mutmut_130": _NAN_MIN,
    _V + "x_validate_run__mutmut_88": "`and` -> `or`: a NaN period only arises with < 2 "
    "readings, where every check runs on empty intervals and flags nothing",
    _V + "x_validate_run__mutmut_165": "one valid counter reading gives counter_j = 0, which the "
    "`counter_j > 0` guard already skips",
    _C + "x_t_ms_of__mutmut_7": _INT64,
    _C + "x_t_ms_of__mutmut_9": _INT64,
    _C + "x_spool_to_run__mutmut_38": "the spool's signal fields are float64 already",
    _C + "x_spool_to_run__mutmut_40": "the spool's signal fields are float64 already",
    _C + "x_spool_to_run__mutmut_111": "`meta.pop(key, None) or []` equals `meta.pop(key, []) "
    "or []`",
    _C + "x_spool_to_run__mutmut_119": "a second `incomplete` is dropped by Run.add_flags, "
    "which keeps each flag once",
    _C + "x_spool_to_run__mutmut_120": "a second `incomplete` is dropped by Run.add_flags, "
    "which keeps each flag once",
}
"""Surviving mutants judged equivalent, each with a one-line reason (see README, Development)."""

_RESULT_RE = re.compile(r"^\s+(\S+): (.+)$")


def _copy_tree(dst: Path) -> None:
    """Copy the working tree's tracked and untracked, not-ignored files to ``dst``."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)


def _config(target: Target) -> str:
    """The ``[tool.mutmut]`` section for one target (TOML)."""
    def arr(items: list[str] | tuple[str, ...]) -> str:
        return "[" + ", ".join(f'"{i}"' for i in items) + "]"

    return ("\n[tool.mutmut]\n"
            f"source_paths = {arr(['llm_powertrace_ds', 'generation'])}\n"
            f"only_mutate = {arr([target.source])}\n"
            f"also_copy = {arr(['cards', 'upload.py', 'bench'])}\n"
            f"pytest_add_cli_args_test_selection = {arr(target.tests)}\n"
            f"pytest_add_cli_args = {arr(['-p', 'no:cacheprovider', '-q', *target.pytest_args])}\n")


def read_verdicts(folder: Path) -> dict[str, str]:
    """``{mutant: verdict}`` of the mutmut run in ``folder`` (``mutmut results --all true``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"],
                         cwd=folder, env=env, check=True, capture_output=True, text=True).stdout
    return {m.group(1): m.group(2).strip() for line in out.splitlines()
            if (m := _RESULT_RE.match(line))}


def _mutmut_run(name: str, folder: Path, max_children: int, mutants: list[str]) -> None:
    """``mutmut run`` of the given mutants (all when none) in ``folder``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the copy, not the tree
    batches = [mutants[i:i + 200] for i in range(0, len(mutants), 200)] or [[]]
    for batch in batches:  # keep each command line short
        proc = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children",
                               str(max_children), *batch], cwd=folder, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-2000:]
            raise SystemExit(f"mutmut run failed for {name} (exit {proc.returncode}):\n{tail}")


def _prepare(name: str, folder: Path) -> None:
    """Copy the working tree into ``folder`` and configure mutmut for one target there."""
    _copy_tree(folder)
    pyproject = folder / "pyproject.toml"
    pyproject.write_text((REPO / "pyproject.toml").read_text(encoding="utf-8")
                         + _config(TARGETS[name]), encoding="utf-8")


def run_module(name: str, work: Path, max_children: int) -> dict[str, str]:
    """Run mutmut on one target in ``work/<name>``; return ``{mutant: verdict}``."""
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)  # fresh: a cached "survived" may predate a test
    folder.mkdir(parents=True, exist_ok=True)
    _prepare(name, folder)
    started = time.monotonic()
    _mutmut_run(name, folder, max_children, [])
    verdicts = read_verdicts(folder)
    print(f"{name}: {len(verdicts)} mutants in {time.monotonic() - started:.0f} s",
          file=sys.stderr)
    return verdicts


def rerun_module(name: str, work: Path, max_children: int) -> dict[str, str]:
    """Run again, with the current tree, the mutants the last run in ``work/<name>`` left.

    Those are the mutants not killed (survived, no tests, timeout, suspicious), plus every
    mutant of a function whose code changed since (mutmut regenerates those and forgets their
    verdicts). The tree (code and tests) is copied over the earlier copy first; mutmut finds
    the new tests and collects their coverage. A mutant killed before stays killed as long as
    tests were only added, so this gives a fresh run's numbers in a fraction of its time;
    after a test was changed or removed, run afresh.
    """
    folder = work / name
    if not (folder / "mutants").is_dir():
        raise SystemExit(f"no earlier run of {name} in {folder}: run without --rerun first")
    before = read_verdicts(folder)
    _prepare(name, folder)
    shutil.rmtree(folder / "mutants" / "tests", ignore_errors=True)
    shutil.copytree(REPO / "tests", folder / "mutants" / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    todo = sorted(k for k, v in before.items() if v not in ("killed", "caught by type check"))
    started = time.monotonic()
    _mutmut_run(name, folder, max_children, todo)
    fresh = sorted(k for k, v in read_verdicts(folder).items() if v == "not checked")
    if fresh:  # mutants of changed functions, regenerated by the run above
        _mutmut_run(name, folder, max_children, fresh)
    verdicts = read_verdicts(folder)
    print(f"{name}: {len(todo)} + {len(fresh)} mutants run again in "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr)
    return verdicts


def summarise(name: str, verdicts: dict[str, str]) -> dict[str, object]:
    """Counts of one module's verdicts and the kill rate of its non-equivalent mutants."""
    killed = sum(v in ("killed", "caught by type check") for v in verdicts.values())
    survived = [k for k, v in verdicts.items() if v == "survived"]
    equivalent = [k for k in survived if k in EQUIVALENT]
    other = len(verdicts) - killed - len(survived)
    considered = len(verdicts) - len(equivalent)
    rate = killed / considered if considered else None
    return {"module": name, "mutants": len(verdicts), "killed": killed,
            "survived": len(survived) - len(equivalent), "equivalent": len(equivalent),
            "other": other, "kill_rate": rate,
            "open": sorted(k for k in survived if k not in EQUIVALENT),
            "others": sorted(f"{k}: {v}" for k, v in verdicts.items()
                             if v not in ("killed", "caught by type check", "survived"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE",
                        help=f"one of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "llm-powertrace-mutation")
    parser.add_argument("--max-children", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--report-only", action="store_true",
                        help="do not run: report the verdicts already in --work")
    parser.add_argument("--rerun", action="store_true",
                        help="run again only the mutants the last run in --work did not kill, "
                             "with the current tests (after adding tests)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in TARGETS]
    if unknown:
        parser.error(f"unknown module {unknown[0]!r}: one of {', '.join(TARGETS)}")
    names = args.modules or list(TARGETS)
    if args.report_only:
        names = [n for n in names if (args.work / n / "mutants").is_dir()]
        rows = [summarise(n, read_verdicts(args.work / n)) for n in names]
    elif args.rerun:
        rows = [summarise(n, rerun_module(n, args.work, args.max_children)) for n in names]
    else:
        rows = [summarise(n, run_module(n, args.work, args.max_children)) for n in names]
    head = ("module", "mutants", "killed", "survived", "equivalent", "other", "kill rate")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    for r in rows:
        rate = "n/a" if r["kill_rate"] is None else f"{100 * r['kill_rate']:.1f} %"
        cells = [str(r[k]) for k in head[:-1]] + [rate]
        print(("| " + " | ".join(cells) + " |") if args.markdown
              else "  ".join(f"{c:>10}" for c in cells))
    for r in rows:
        for k in r["open"]:
            print(f"survived: {k}")
        for k in r["others"]:
            print(f"other: {k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
