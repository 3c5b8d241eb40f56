"""Mutation testing of the core modules with mutmut 3: kill rate per module (docs/mutation.md).

    python bench/mutation.py [MODULE ...] [--sample N [--seed S] | --only REGEX | --report-only]
                             [--work DIR] [--max-children N] [--markdown]

mutmut generates the mutants, records which tests reach each function and keeps the verdicts.
This script adds what it does not do: a scratch copy of the tree per module with a
``[tool.mutmut]`` section that mutates only that module and selects only its tests; the
mutants run by ``bench/mutation_driver.py`` (forks of one collected pytest session, about 0.5 s
a mutant instead of mutmut's ≈ 6 s fresh ``pytest.main``); a seeded sample of the mutants; the
judged-equivalent survivors (``bench/mutation_equivalent.txt``); and one table row per module.
The working tree is never touched.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import _report  # noqa: E402

from llm_powertrace_ds.atomic import write_text_atomic  # noqa: E402

EQUIVALENT_FILE = Path(__file__).with_name("mutation_equivalent.txt")


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


_SHARDS_TESTS = ("tests/llm_powertrace_ds/shards",
                 # stage/commit, iter_runs and repair are reached through the importers'
                 # streaming publish, the staging lifecycle and the folder checks
                 "tests/llm_powertrace_ds/importers/test_publish.py",
                 "tests/llm_powertrace_ds/test_staging.py",
                 "tests/llm_powertrace_ds/test_folder_integrity.py")

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
    "shards": Target("llm_powertrace_ds/shards/*.py", _SHARDS_TESTS),
    "process": Target("generation/sampler/process.py",
                      ("tests/generation/sampler/test_process.py",
                       "tests/generation/sampler/test_loop.py",
                       "tests/generation/sampler/test_child.py"),
                      # measures a real CPU burst: fails when other workers load the CPU
                      ("-k", "not cpu_proxy_burst_rises_and_falls")),
    "convert": Target("generation/sampler/convert.py",
                      ("tests/generation/sampler/test_convert.py",
                       "tests/generation/sampler/test_convert_behaviour.py")),
    # single modules of the packages above, sampled on their own (a package's sample draws
    # few mutants from each of its files)
    "window": Target("llm_powertrace_ds/metrics/window.py", ("tests/llm_powertrace_ds/metrics",)),
    "levels": Target("llm_powertrace_ds/metrics/levels.py", ("tests/llm_powertrace_ds/metrics",)),
    "publish": Target("llm_powertrace_ds/shards/publish.py", _SHARDS_TESTS),
    "segments": Target("llm_powertrace_ds/shards/segments.py", _SHARDS_TESTS),
    "facility": Target("llm_powertrace_ds/facility/*.py",
                       ("tests/llm_powertrace_ds/test_facility.py",
                        "tests/llm_powertrace_ds/test_facility_jobs.py",
                        "tests/llm_powertrace_ds/test_facility_schedule.py",
                        "tests/llm_powertrace_ds/test_facility_units.py",
                        "tests/llm_powertrace_ds/test_facility_work_slice_and_nodes.py",
                        "tests/llm_powertrace_ds/test_facility_refusals.py")),
    "limits": Target("llm_powertrace_ds/mitigation/limits.py",
                     ("tests/llm_powertrace_ds/mitigation",)),
}


def load_equivalent(path: Path = EQUIVALENT_FILE) -> dict[str, str]:
    """``{mutant: reason}`` from lines ``<function> <n> <n> ...: <reason>`` (``#`` comments).

    Raises:
        SystemExit: a line without a function, a number or a reason (names file and line).
    """
    judged: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        names, sep, reason = line.partition(": ")
        function, *numbers = names.split()
        if not sep or not reason.strip() or not numbers or not all(n.isdigit() for n in numbers):
            raise SystemExit(f"{path.name}:{number}: expected '<function> <n> ...: <reason>', "
                             f"got {line[:80]!r}")
        for n in numbers:
            judged[f"{function}__mutmut_{n}"] = reason.strip()
    return judged


EQUIVALENT: dict[str, str] = load_equivalent()
"""Surviving mutants judged equivalent, each with a one-line reason."""


_RESULT_RE = re.compile(r"^\s+(\S+): (.+)$")


def _copy_tree(dst: Path) -> None:
    """Copy the working tree's tracked and untracked, not-ignored files to ``dst``."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        if name.startswith(".venv"):  # a virtualenv not (yet) in .gitignore
            continue
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
            f"also_copy = {arr(['cards', 'upload.py', 'bench', 'docs'])}\n"
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


def _seed_mutant(target: Target) -> list[str]:
    """Likely mutant names of the target's first functions (``module.x_function__mutmut_1``).

    ``mutmut run NAME`` generates every mutant and collects the tests' coverage before it runs
    NAME; the driver then runs the rest. Names are tried in turn (a function without mutants
    has none).
    """
    names = []
    for path in sorted(REPO.glob(target.source)):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names += [f"{module}.x_{node.name}__mutmut_1" for node in tree.body
                  if isinstance(node, ast.FunctionDef)]
    return names[:8]


def _generate(name: str, folder: Path, max_children: int) -> None:
    """Generate the mutants and mutmut's coverage stats (and run one mutant) in ``folder``."""
    for seed in _seed_mutant(TARGETS[name]):
        try:
            _mutmut_run(name, folder, max_children, [seed])
            return
        except SystemExit as exc:
            if "nothing matches" not in str(exc):
                raise
    raise SystemExit(f"mutmut found no mutant to start {name} with")


def _covering_tests(scratch: Path) -> tuple[Callable[[str], list[str]], dict[str, float]]:
    """``(tests_of, took)`` from mutmut's stats: a mutant's covering tests, fastest first."""
    stats = json.loads((scratch / "mutmut-stats.json").read_text(encoding="utf-8"))
    cover, took = stats["tests_by_mangled_function_name"], stats["duration_by_test"]

    def tests_of(mutant: str) -> list[str]:
        return sorted(cover.get(mutant.rsplit("__mutmut_", 1)[0], ()),
                      key=lambda t: (took.get(t, 1.0), t))

    return tests_of, took


def _drive(name: str, folder: Path, max_children: int, mutants: list[str]) -> None:
    """Run ``mutants`` with ``bench/mutation_driver.py`` and record the verdicts for mutmut.

    Each mutant meets the tests that cover its function (mutmut's stats), fastest first, in a
    fork of one collected session; the baseline (every covering test, no mutant) runs first
    and must pass. A mutant's time limit is 60 s + 20 × its tests' clean duration.
    """
    scratch = folder / "mutants"
    tests_of, took = _covering_tests(scratch)
    plan: dict[str, dict[str, Any]] = {}
    for mutant in mutants:
        ids = tests_of(mutant)
        plan[mutant] = {"ids": ids,
                        "timeout_s": round(60 + 20 * sum(took.get(t, 1.0) for t in ids))}
    every = sorted({t for entry in plan.values() for t in entry["ids"]})
    plan[""] = {"ids": every, "timeout_s": round(600 + 20 * sum(took.get(t, 1.0) for t in every))}
    shutil.copy2(REPO / "bench" / "mutation_driver.py", scratch / "_mutation_driver.py")
    (scratch / "_driver_plan.json").write_text(json.dumps(plan), encoding="utf-8")
    out = scratch / "_driver_out.json"
    out.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "_mutation_driver.py", "_driver_plan.json",
                           out.name, str(max_children), *TARGETS[name].pytest_args,
                           *TARGETS[name].tests], cwd=scratch, env=env)
    codes = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    if proc.returncode != 0 or codes.get("") != 0:
        raise SystemExit(f"the mutation driver failed for {name} (exit {proc.returncode})")
    _record(folder, {k: v for k, v in codes.items() if k})


def draw(mutants: list[str], size: int, seed: int) -> list[str]:
    """A seeded sample of ``size`` mutant names, keyed by name: the same names give the same draw.

    Each name ranks by ``sha256(f"{seed}:{name}")``; the ``size`` lowest are drawn. A mutant's
    rank does not depend on the other names, so an unchanged source draws the same mutants
    whatever the tests are.
    """
    def rank(mutant: str) -> str:
        return hashlib.sha256(f"{seed}:{mutant}".encode()).hexdigest()

    return sorted(sorted(mutants, key=rank)[:size])


def run_module(name: str, work: Path, max_children: int,
               only: re.Pattern[str] | None = None,
               sample: tuple[int, int] | None = None) -> dict[str, str]:
    """Run mutmut on one target in ``work/<name>``; return ``{mutant: verdict}``.

    With ``only``, every mutant is generated but only those whose name matches it run and are
    returned (the functions a change touched: minutes instead of an hour). With ``sample``
    (``(size, seed)``), only a :func:`draw` of that size runs and is returned, and
    ``work/<name>/sample.json`` lists it with each verdict.
    """
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)  # fresh: a cached "survived" may predate a test
    folder.mkdir(parents=True, exist_ok=True)
    _prepare(name, folder)
    started = time.monotonic()
    _generate(name, folder, max_children)
    generated = read_verdicts(folder)
    chosen = [k for k in generated if only is None or only.search(k)]
    if sample is not None:
        chosen = draw(chosen, *sample)
    _drive(name, folder, max_children, sorted(k for k in chosen if generated[k] == "not checked"))
    verdicts = {k: v for k, v in read_verdicts(folder).items() if k in set(chosen)}
    if sample is not None:
        (folder / "sample.json").write_text(json.dumps(verdicts, indent=1, sort_keys=True),
                                            encoding="utf-8")
    print(f"{name}: {len(verdicts)} mutants in {time.monotonic() - started:.0f} s",
          file=sys.stderr)
    return verdicts


def _record(folder: Path, codes: dict[str, int]) -> None:
    """Write exit codes into mutmut's per-file ``.meta`` verdicts (as ``mutmut run`` does)."""
    by_file: dict[Path, dict[str, int]] = {}
    for mutant, code in codes.items():
        base = folder / "mutants" / mutant.rsplit(".", 1)[0].replace(".", "/")
        meta = base.with_name(base.name + ".py.meta")
        if not meta.exists():  # a function of a package's __init__.py
            meta = base / "__init__.py.meta"
        by_file.setdefault(meta, {})[mutant] = code
    for meta_path, found in by_file.items():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        meta["exit_code_by_key"].update(found)
        meta_path.write_text(json.dumps(meta, indent=4), encoding="utf-8")


def summarise(name: str, verdicts: dict[str, str]) -> dict[str, Any]:
    """Counts of one module's verdicts and its kill rates.

    ``kill_rate`` is killed / (mutants − judged equivalent); ``raw_kill_rate`` is killed /
    mutants, every survivor counted as a miss. A judgment in :data:`EQUIVALENT` names a mutant by
    mutmut's number, and mutmut numbers a function's mutants afresh when the function's code
    changes: a judged mutant that is now killed is reported as ``stale`` (its number points at
    another mutation), and ``raw_kill_rate`` does not depend on any judgment.
    """
    killed = sum(v in ("killed", "caught by type check") for v in verdicts.values())
    survived = [k for k, v in verdicts.items() if v == "survived"]
    equivalent = [k for k in survived if k in EQUIVALENT]
    other = len(verdicts) - killed - len(survived)
    considered = len(verdicts) - len(equivalent)
    rate = killed / considered if considered else None
    stale = sorted(k for k, v in verdicts.items()
                   if k in EQUIVALENT and v in ("killed", "caught by type check"))
    return {"module": name, "mutants": len(verdicts), "killed": killed,
            "survived": len(survived) - len(equivalent), "equivalent": len(equivalent),
            "other": other, "kill_rate": rate,
            "raw_kill_rate": killed / len(verdicts) if verdicts else None,
            "open": sorted(k for k in survived if k not in EQUIVALENT),
            "stale": stale,
            "others": sorted(f"{k}: {v}" for k, v in verdicts.items()
                             if v not in ("killed", "caught by type check", "survived"))}


JSON_PATH = REPO / "docs" / "data" / "bench" / "mutation.json"
DOC_PATH = REPO / "docs" / "mutation.md"
BEGIN, END = "<!-- mutation-table:begin -->", "<!-- mutation-table:end -->"
KILL_RATE_TARGET = 0.9
"""The kill rate each sampled module must reach (killed / (mutants − judged equivalent))."""
_FIGURES = ("mutants", "killed", "survived", "equivalent", "other")


def results_of(rows: list[dict[str, Any]]) -> list[Any]:
    """The bench document's results: per module its counts, kill rate (target) and raw rate."""
    out = []
    for r in rows:
        m = r["module"]
        out += [_report.result(f"{m}.{k}", r[k], "mutants") for k in _FIGURES]
        out.append(_report.result(f"{m}.kill_rate", r["kill_rate"], "ratio",
                                  at_least=KILL_RATE_TARGET))
        out.append(_report.result(f"{m}.raw_kill_rate", r["raw_kill_rate"], "ratio"))
    return out


def write_json(path: Path, rows: list[dict[str, Any]], argv: list[str],
               started: dict[str, Any]) -> None:
    """Write this run's rows into the bench document at ``path``.

    Rows of modules this run did not cover are kept from the document already there, and the
    commands that measured them are kept in ``command`` (joined with `` && ``), so every figure
    names the command that produced it.
    """
    new = {r["module"] for r in rows}
    kept: list[dict[str, Any]] = []
    commands: list[str] = []
    if path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        kept = [r for r in old.get("results", []) if r["name"].split(".")[0] not in new]
        commands = [c for c in old.get("command", "").split(" && ") if c]
    doc = _report.document("mutation", [], script=__file__, argv=argv, started=started)
    mine = portable(doc["command"])
    commands = [portable(c) for c in commands
                if {m for m in TARGETS if f" {m} " in f"{c} "}.difference(new)] + [mine]
    doc["results"] = kept + [dataclasses.asdict(x) for x in results_of(rows)]
    doc["command"] = " && ".join(commands)
    _report.write(path, doc)


def portable(command: str) -> str:
    """A recorded command without ``--work DIR`` (a scratch folder outside the repository)."""
    words = shlex.split(command)
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
        elif w == "--work":
            skip = True
        elif not w.startswith("--work="):
            out.append(w)
    return shlex.join(out)


def render_table(doc: dict[str, Any]) -> str:
    """The per-module table of docs/mutation.md from the bench document."""
    figures: dict[str, dict[str, Any]] = {}
    for r in doc["results"]:
        module, _, name = r["name"].partition(".")
        figures.setdefault(module, {})[name] = r["value"]
    load = doc["machine"].get("load_avg_1min")
    lines = [f"Measured {doc['date']} on {doc['machine'].get('cores')} shared cores "
             f"(load average {'—' if load is None else load} when the last command started), "
             "by:",
             "", "```", *doc["command"].split(" && "), "```", "",
             "| module | mutated | mutants | killed | survived | equivalent | other | kill rate "
             "| raw kill rate |", "|---|---|---|---|---|---|---|---|---|"]

    def pct(x: Any) -> str:
        return "—" if x is None else f"{100 * x:.1f} %"

    for module in sorted(figures, key=lambda m: list(TARGETS).index(m) if m in TARGETS else 99):
        f = figures[module]
        source = TARGETS[module].source if module in TARGETS else "?"
        lines.append(f"| `{module}` | `{source}` | " + " | ".join(
            "—" if f.get(k) is None else str(f[k]) for k in _FIGURES)
            + f" | {pct(f.get('kill_rate'))} | {pct(f.get('raw_kill_rate'))} |")
    return "\n".join(lines) + "\n"


def render_doc(path: Path = JSON_PATH, doc_path: Path = DOC_PATH) -> None:
    """Re-render the table between the markers of docs/mutation.md from the bench document."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    text = doc_path.read_text(encoding="utf-8")
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{doc_path.name}: the markers {BEGIN} / {END} are missing")
    write_text_atomic(doc_path, f"{head}{BEGIN}\n{render_table(doc)}{END}{tail}")


def _regex(text: str) -> re.Pattern[str]:
    """A compiled regular expression for argparse (a bad one is a usage error)."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression ({exc})") from None


def main(argv: list[str] | None = None) -> int:
    """Run (or report) the named modules and print one row each, then the open survivors."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE",
                        help=f"one of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "llm-powertrace-mutation")
    parser.add_argument("--max-children", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--report-only", action="store_true",
                        help="do not run: report the verdicts already in --work")
    parser.add_argument("--only", type=_regex, metavar="REGEX",
                        help="a fresh run of only the mutants whose names match (e.g. the "
                             "functions a change touched: 'x_sidecar_path__|x_meta_file__')")
    parser.add_argument("--sample", type=int, metavar="N",
                        help="a fresh run of a seeded sample of N mutants per module (the same "
                             "N mutants while the source is unchanged)")
    parser.add_argument("--seed", type=int, default=0, help="the --sample seed (default 0)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the rows into this bench document "
                             "(docs/data/bench/mutation.json; rows of other modules kept) and "
                             "re-render docs/mutation.md's table from it")
    parser.add_argument("--render-only", action="store_true",
                        help="only re-render docs/mutation.md's table from docs/data/bench/"
                             "mutation.json")
    args = parser.parse_args(argv)
    if args.render_only:
        render_doc()
        return 0
    unknown = [m for m in args.modules if m not in TARGETS]
    if unknown:
        parser.error(f"unknown module {unknown[0]!r}: one of {', '.join(TARGETS)}")
    if args.only is not None and args.report_only:
        parser.error("--only is for a fresh run (not with --report-only)")
    if args.sample is not None and args.report_only:
        parser.error("--sample is for a fresh run (not with --report-only)")
    names = args.modules or list(TARGETS)
    started = _report.machine()
    if args.report_only:
        names = [n for n in names if (args.work / n / "mutants").is_dir()]
        rows = [summarise(n, read_verdicts(args.work / n)) for n in names]
    else:
        sample = None if args.sample is None else (args.sample, args.seed)
        rows = [summarise(n, run_module(n, args.work, args.max_children, args.only, sample))
                for n in names]
    head = ("module", "mutants", "killed", "survived", "equivalent", "other", "kill rate",
            "raw kill rate")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    for r in rows:
        rate, raw = ("n/a" if r[k] is None else f"{100 * r[k]:.1f} %"
                     for k in ("kill_rate", "raw_kill_rate"))
        cells = [str(r[k]) for k in head[:-2]] + [rate, raw]
        print(("| " + " | ".join(cells) + " |") if args.markdown
              else "  ".join(f"{c:>10}" for c in cells))
    if args.json is not None and not args.report_only:
        write_json(args.json, rows, argv if argv is not None else sys.argv[1:], started)
        render_doc(args.json)
    for r in rows:
        for k in r["open"]:
            print(f"survived: {k}")
        for k in r["stale"]:
            print(f"stale judgment (killed now): {k}")
        for k in r["others"]:
            print(f"other: {k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
