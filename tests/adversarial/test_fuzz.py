"""Hypothesis fuzzing of the three inputs a stranger controls (issue 12, acceptance).

The inputs: nvidia-smi rows, powertrace-csv rows (and their metadata JSON), sweep YAML.

Whatever the input: no traceback (exit 0 or a one-line error, exit 1), a folder that passes
``validate`` whenever the import succeeded, and no published string (file names, Arrow values,
the card) holding a path, an IP address or ``user@host``.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

HOSTILE = ["/home/alice/x", "10.1.2.3", "alice@host", "gpu-7.corp.example.com", "~/.ssh/id",
           "C:\\Users\\bob", "fe80::1:2:3:4", "\x1b[2J", "a\nb", "..", "[N/A]", "", "nan",
           "1e308", "-5", "99999", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]
HONEST_NAMES = ["NVIDIA H100 80GB HBM3", "NVIDIA L40S", "550.54.15", "train", "eval"]
text = st.one_of(st.sampled_from(HONEST_NAMES), st.sampled_from(HOSTILE), st.text(max_size=12))
number = st.one_of(st.floats(0, 700).map(lambda x: f"{x:.2f}"), st.floats(0, 700).map(repr),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.integers(-10**12, 10**12).map(str), st.sampled_from(HOSTILE))

LEAK_RES = [re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])"),
            re.compile(r"[^\s@'\"]+@[^\s@'\"]+"), re.compile(r"/home/|~/|\\Users\\"),
            re.compile(r"corp\.example\.com"), re.compile(r"\x1b")]


def _strings(value: object):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def published_strings(root: Path) -> list[str]:
    out = []
    for path in root.rglob("*"):
        if ".staging" in path.parts:
            continue
        out.append(path.relative_to(root).as_posix())
        if path.suffix == ".arrow":
            with pa.OSFile(str(path), "rb") as source:
                for row in ipc.open_stream(source).read_all().to_pylist():
                    out.extend(_strings(row))
        elif path.name == "README.md":
            out.append(path.read_text(encoding="utf-8"))
    return out


def check_outcome(cli, args: list, out: Path) -> None:
    res = cli(args)
    assert res.rc in (0, 1), res.err
    if res.rc == 1:
        assert len(res.error_line) <= 2100
        return
    assert cli(["validate", out]).rc == 0
    for s in published_strings(out):
        for pattern in LEAK_RES:
            assert not pattern.search(s), s[:200]


honest_power = st.floats(0, 700).map(lambda x: f"{x:.2f}")
honest_util = st.integers(0, 100).map(str)
smi_row = st.tuples(st.sampled_from(["0", "1"]), st.just("NVIDIA H100 80GB HBM3"),
                    st.just("550.54.15"), honest_power, honest_util)
mutation = st.one_of(st.none(), st.tuples(st.integers(0, 7), st.integers(0, 4),
                                          st.one_of(text, number)))


@FUZZ
@given(rows=st.lists(smi_row, min_size=1, max_size=8), month=st.sampled_from(["01", "07"]),
       bad=mutation)
def test_fuzz_nvidia_smi(rows, month, bad, cli):
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.csv"
        lines = ["timestamp, index, name, driver_version, power.draw [W], utilization.gpu [%]"]
        cells = [list(r) for r in rows]
        if bad is not None and bad[0] < len(cells):  # one hostile cell in an honest log
            cells[bad[0]][bad[1]] = bad[2]
        for i, row in enumerate(cells):
            clean = [c.replace(",", ";").replace("\n", " ") for c in row]
            lines.append(f"2024/{month}/01 00:00:{i:02d}.000, " + ", ".join(clean))
        log.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        out = Path(tmp) / "ds"
        check_outcome(cli, ["import", "nvidia-smi", log, "--out", out, "--workload",
                            "inference"], out)


pt_row = st.tuples(st.sampled_from(["0", "1"]), honest_power, honest_util,
                   st.sampled_from(["train", "eval", ""]))


@FUZZ
@given(rows=st.lists(pt_row, min_size=1, max_size=8), bad=mutation,
       meta=st.dictionaries(st.sampled_from(["model_family", "gpu_type", "method", "precision",
                                             "sampler", "dataset_name", "gpu_count"]),
                            st.one_of(text, st.integers(-3, 9)), max_size=2))
def test_fuzz_powertrace_csv(rows, bad, meta, cli):
    import json

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "t.csv"
        lines = ["run_id,timestamp,gpu_id,power_w,gpu_util_pct,stage"]
        cells = [list(r) for r in rows]
        if bad is not None and bad[0] < len(cells):
            cells[bad[0]][bad[1] % 4] = bad[2]
        for i, row in enumerate(cells):
            clean = [c.replace(",", ";").replace("\n", " ") for c in row]
            lines.append(f"r1,2024-01-01T00:00:{i:02d}.000Z," + ",".join(clean))
        log.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        (Path(tmp) / "t.json").write_text(json.dumps(meta), encoding="utf-8")
        out = Path(tmp) / "ds"
        check_outcome(cli, ["import", "powertrace-csv", log, "--out", out, "--workload",
                            "finetune"], out)


scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**10, 10**10),
                   st.floats(allow_nan=True), text)
sweep_doc = st.fixed_dictionaries(
    {"name": st.one_of(st.just("fz"), text), "workload": st.sampled_from(["inference", "x"])},
    optional={"repeats": scalar, "idle_before_s": scalar, "grid_region": scalar,
              "sampler": st.dictionaries(st.sampled_from(["idle_w", "max_w", "period_ms",
                                                          "source"]), scalar, max_size=3),
              "grid": st.dictionaries(st.sampled_from(["concurrency", "num_requests",
                                                       "prompt_len", "model"]),
                                      st.lists(scalar, max_size=4), max_size=3),
              "base": st.dictionaries(st.sampled_from(["concurrency", "model_name", "label"]),
                                      scalar, max_size=2)})


@FUZZ
@given(doc=sweep_doc, junk=st.binary(max_size=20))
def test_fuzz_sweep_yaml(doc, junk, cli):
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.yaml"
        path.write_bytes(yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")
                         + junk)
        res = cli(["generate", path, "--out", Path(tmp) / "ds", "--dry-run"])
        assert res.rc in (0, 1), res.err
        if res.rc == 1:
            assert res.error_line.startswith("error: ")
            assert len(res.err) < 20_000

