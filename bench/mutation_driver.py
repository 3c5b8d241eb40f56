"""Run mutmut's mutants in forks of one collected pytest session (``bench/mutation.py``).

    python mutation_driver.py PLAN.json OUT.json WORKERS TESTPATH...   (cwd: mutmut's mutants/)

``mutmut run`` starts a fresh ``pytest.main`` for every mutant (about 6 s each here, most of it
collecting and importing). This driver collects the tests once, then forks the collected session
per mutant: the child sets ``MUTANT_UNDER_TEST`` (mutmut's trampolines read it at every call),
runs only the tests that cover the mutant's function (``PLAN``, from mutmut's coverage stats)
and the tests that share a module- or class-scoped fixture with them (mutmut credits such a
fixture's calls to the first test that builds it), grouped by file so module fixtures are set up
once, and exits at the first failure. A fork
shares nothing with the next mutant, so a mutant cannot leak state into another's verdict.
``WORKERS`` children run at once; each has its own ``tmp_path`` base, removed when it ends.

``PLAN``: ``{mutant: {"ids": [node id or test file, ...], "timeout_s": seconds}}``; the key ``""`` (if
present) is the baseline: every listed test without a mutant, which must pass. ``OUT``:
``{mutant: exit code}`` as mutmut records them (0 survived, 1 killed, 33 no tests, 36 timeout);
written every 20 mutants, so a stopped run resumes where it stopped.

Import-time code runs once, in the parent, without a mutant (as in mutmut's own runner).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

os.environ["MUTANT_UNDER_TEST"] = ""  # import-time calls take the original code
signal.signal(signal.SIGINT, signal.default_int_handler)  # not ignored when started with &

import pytest  # noqa: E402
from _pytest.runner import runtestprotocol  # noqa: E402

SAVE_EVERY = 20


def _child(session: pytest.Session, name: str, items: list[pytest.Item], base: Path) -> None:
    """Run ``items`` against mutant ``name``; exit 1 at the first failure, else 0."""
    os.setpgid(0, 0)  # the parent kills the whole group on a timeout (tests' subprocesses too)
    if not os.environ.get("MUTATION_DRIVER_DEBUG"):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
    os.environ["MUTANT_UNDER_TEST"] = name
    factory = session.config._tmp_path_factory  # type: ignore[attr-defined]  # noqa: SLF001
    mine = base / str(os.getpid())
    factory._given_basetemp = mine  # noqa: SLF001
    factory._basetemp = None  # noqa: SLF001
    code = 0
    try:
        for i, item in enumerate(items):
            nxt = items[i + 1] if i + 1 < len(items) else None  # module fixtures live on
            reports = runtestprotocol(item, nextitem=nxt, log=False)
            failed = [r for r in reports if r.failed]
            if failed:
                if os.environ.get("MUTATION_DRIVER_DEBUG"):
                    print(item.nodeid, failed[0].when, str(failed[0].longrepr)[-3000:],
                          file=sys.stderr)
                code = 1
                break
    except BaseException:  # noqa: BLE001 - a crash under a mutant is a kill
        code = 1
    shutil.rmtree(mine, ignore_errors=True)
    os._exit(code)


def _scoped_fixtures(item: pytest.Item) -> list[int]:
    """Ids of the module- or class-scoped fixture definitions ``item`` uses."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [id(defs[-1]) for defs in info.name2fixturedefs.values()
            if defs and defs[-1].scope in ("module", "class")]


class Driver:
    """A pytest plugin that replaces the test loop with the per-mutant fork loop."""

    def __init__(self, plan: dict, out_path: Path, workers: int) -> None:
        self.plan, self.out_path, self.workers = plan, out_path, workers
        self.base = Path(tempfile.mkdtemp(prefix="mutation-driver-"))

    def _items(self, by_id: dict[str, pytest.Item], shared: dict[int, list[pytest.Item]],
               ids: list[str]) -> list[pytest.Item]:
        chosen = []
        for i in ids:  # a node id, or a file: every test collected from it
            chosen += [by_id[i]] if i in by_id else [it for n, it in by_id.items()
                                                    if n.startswith(i + "::")]
        for it in list(chosen):  # the tests reading the same module/class fixture value
            for key in _scoped_fixtures(it):
                chosen += shared[key]
        chosen = list(dict.fromkeys(chosen))  # an item runs once (a file and its node ids)
        rank: dict[str, int] = {}
        for it in chosen:  # files in the order their first (fastest) test comes
            rank.setdefault(it.nodeid.split("::")[0], len(rank))
        return sorted(chosen, key=lambda it: rank[it.nodeid.split("::")[0]])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        by_id = {it.nodeid: it for it in session.items}
        # {id(fixture definition): tests using it}. A module/class fixture's value is computed by
        # the first test that asks for it, and mutmut's stats credit the mutated function to
        # that test alone, so a later test asserting on the same value never counts as covering
        # it: each mutant also meets every test sharing such a fixture with its covering tests.
        shared: dict[int, list[pytest.Item]] = {}
        for item in session.items:
            for key in _scoped_fixtures(item):
                shared.setdefault(key, []).append(item)
        out = self.out_path
        results = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
        queue = sorted((m for m in self.plan if m not in results), key=bool)  # baseline first
        running: dict[int, tuple[str, float, float]] = {}
        done, t0 = 0, time.monotonic()
        while queue or running:
            while (queue and len(running) < self.workers
                   and all(n for n, _, _ in running.values())):  # the baseline runs alone
                name = queue.pop(0)
                entry = self.plan[name]
                items = self._items(by_id, shared, entry["ids"])
                if not items:
                    results[name] = 33
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(session, name, items, self.base)
                running[pid] = (name, time.monotonic(), float(entry["timeout_s"]))
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                now = time.monotonic()
                for child, (name, start, limit) in list(running.items()):
                    if now - start > limit and results.get(name) != 36:
                        results[name] = 36
                        _kill(child)
                time.sleep(0.01)
                continue
            name, start, _ = running.pop(pid)
            if results.get(name) != 36:
                results[name] = (os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
            _kill(pid)  # stray subprocesses of its tests
            shutil.rmtree(self.base / str(pid), ignore_errors=True)
            done += 1
            print(f"{done} {name or '<baseline>'} {results[name]} "
                  f"{time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
            if done % SAVE_EVERY == 0:
                _save(out, results)
            if name == "" and results[name] != 0:
                _save(out, results)
                pytest.exit("the tests fail without a mutant: fix them first "
                            "(MUTATION_DRIVER_DEBUG=1 shows the failure)", returncode=4)
        _save(out, results)
        shutil.rmtree(self.base, ignore_errors=True)
        return True


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _save(path: Path, results: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results), encoding="utf-8")
    tmp.replace(path)


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    driver = Driver(plan, Path(argv[1]), int(argv[2]))
    return int(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", *argv[3:]],
                           plugins=[driver]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
