"""One gate per kind of input, used by every path.

The same hostile strings go through every importer and entry point, hostile numbers through every
numeric column, hostile files through the bounded reader. Each case asserts the exact outcome:
the one-line error and its exit code, and nothing written.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from llm_powertrace_ds import privacy, schema
from llm_powertrace_ds.errors import InputError

from .conftest import tree_hash

HOSTILE = [
    "/home/alice/runs/x",                 # a path
    "alice@node7",                        # user@host
    "node 10.1.2.3",                      # an address
    "hf_" + "aB3" * 8,                    # a Hugging Face token
    "ghp_" + "x1Y" * 8,                   # a GitHub token
    "github_pat_" + "Zz9_" * 6,           # a fine-grained GitHub token
    "AKIAABCDEFGHIJKLMNOP",               # an AWS access key id
    "sk-" + "Ab1" * 8,                    # an API key
    "q" + "Kp7Wm2Xr9Lz4Tn8Vb3Hd6Fs1" + "x",  # a long random-looking key
    "evil\u202etxt.exe",                  # a bidirectional override
]
IDS = ["path", "user@host", "ip", "hf", "ghp", "github_pat", "aws", "sk", "random", "bidi"]


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_the_text_gate_refuses_each_hostile_value(value):
    assert privacy.text_problem("dataset_name", value) is not None


# ---- every importer and entry point, the same hostile strings ---------------------------------

def _nvidia_log(path: Path, gpu_name: str = "NVIDIA H100 80GB HBM3") -> Path:
    path.write_text("timestamp, index, name, power.draw [W]\n" + "".join(
        f"2026/01/01 00:00:{s:02d}.000, 0, {gpu_name}, {100 + s} W\n" for s in range(10)),
        encoding="utf-8")
    return path


def _refused(cli, args, out: Path) -> str:
    before = tree_hash(out) if out.exists() else None
    res = cli(args)
    assert res.rc == 1, res.err
    line = res.error_line
    assert (tree_hash(out) if out.exists() else None) == before  # nothing written
    return line


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_nvidia_smi_meta(cli, tmp_path, value):
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"dataset_name": value}), encoding="utf-8")
    line = _refused(cli, ["import", "nvidia-smi", _nvidia_log(tmp_path / "gpu.csv"), "--meta",
                          meta, "--out", tmp_path / "ds", "--workload", "finetune"],
                    tmp_path / "ds")
    assert "field 'dataset_name'" in line and "meta.json" in line


@pytest.mark.parametrize("value", HOSTILE[:9], ids=IDS[:9])
def test_nvidia_smi_gpu_name_in_the_log(cli, tmp_path, value):
    line = _refused(cli, ["import", "nvidia-smi", _nvidia_log(tmp_path / "gpu.csv", value),
                          "--out", tmp_path / "ds", "--workload", "finetune"], tmp_path / "ds")
    assert "gpu.csv" in line


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_powertrace_csv_their_metadata(cli, tmp_path, value):
    csv = tmp_path / "t.csv"
    csv.write_text("run_id,timestamp,gpu_id,power_w\n" + "".join(
        f"r1,2026-01-01T00:00:{s:02d}.000Z,0,{100 + s}\n" for s in range(10)), encoding="utf-8")
    meta = tmp_path / "t.json"
    meta.write_text(json.dumps({"run_id": "r1", "source_family": value}), encoding="utf-8")
    line = _refused(cli, ["import", "powertrace-csv", csv, "--meta", meta, "--out",
                          tmp_path / "ds", "--workload", "finetune"], tmp_path / "ds")
    assert "t.json" in line and "source_metadata" in line


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_dcgm_meta(cli, tmp_path, value):
    log = tmp_path / "dmon.txt"
    log.write_text("#Entity   POWER\nID        W\n" + "".join(f"GPU 0     {100 + s}.0\n"
                                                           for s in range(10)), encoding="utf-8")
    meta = tmp_path / "meta.yaml"
    meta.write_text(f"sample_period_ms: 100\nmodel_name: {json.dumps(value)}\n",
                    encoding="utf-8")
    line = _refused(cli, ["import", "dcgm", log, "--meta", meta, "--out", tmp_path / "ds",
                          "--workload", "finetune"], tmp_path / "ds")
    assert "meta.yaml" in line and "model_name" in line


def _mlenergy_task(root: Path, model: str = "org/m", gpu: str = "NVIDIA H100 80GB HBM3",
                   **over) -> Path:
    task = root / "chat"
    run = {"Model": model, "GPU": gpu, "TP": 1, "PP": 1, "Energy/req (J)": 100.0,
           "Avg TPOT (s)": 0.05, "Token tput (tok/s)": 1200.0, "Avg Output Tokens": 400.0,
           "Avg BS (reqs)": 60.0, "Max BS (reqs)": 64, **over}
    path = task / "H100" / "org" / "m" / "bs64+tp1+pp1.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(run), encoding="utf-8")
    (task / "models.json").write_text(json.dumps({model: {"params": 8}}), encoding="utf-8")
    return task


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_mlenergy_gpu_name_and_model(cli, tmp_path, value):
    """A hostile GPU name or model id never becomes a split name, gpu_name or model_label."""
    for task in (_mlenergy_task(tmp_path / "a", gpu=value),
                 _mlenergy_task(tmp_path / "b", model=value)):
        line = _refused(cli, ["import", "mlenergy-v2", task, "--out", tmp_path / "ds"],
                        tmp_path / "ds")
        assert "bs64+tp1+pp1.json" in line
    assert not (tmp_path / "ds").exists()


def _inference_run_folder(tmp_path: Path, make_run) -> tuple[Path, str]:
    from llm_powertrace_ds import shards

    root = tmp_path / "ds"
    run = make_run("inf-1", workload="inference", platform="h100_sxm_80gb")
    shards.publish_run(root, run, refresh_card=False)
    return root, run.run_id


@pytest.mark.parametrize("value", HOSTILE[:9], ids=IDS[:9])
def test_request_ids_of_a_request_log(cli, tmp_path, make_run, value):
    from llm_powertrace_ds.shards import read_run

    root, run_id = _inference_run_folder(tmp_path, make_run)
    t0 = read_run(root, run_id).meta["start_time"].timestamp()
    log = tmp_path / "req.csv"
    log.write_text("request_id,arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens\n"
                   f"{value},{t0 + 0.1},{t0 + 0.2},{t0 + 0.3},10,5\n", encoding="utf-8")
    line = _refused(cli, ["import", "requests-csv", log, "--run", run_id, "--out", root], root)
    assert "request_id" in line


def test_sglang_rid_passes_the_gate(tmp_path):
    from llm_powertrace_ds.importers.requests_common import to_run_clock
    from llm_powertrace_ds.importers.requests_sglang_log import read_print_requests_log

    out = ('RequestFuncOutput(success=True, latency=0.5, ttft=0.1, prompt_len=10, '
           'output_len=5, error="", start_time=1.0)')
    text = (f'rid=alice@node7 time=2.0 time_delta=0.5 message="request end" output="{out}"\n')
    path = tmp_path / "sglang.log"
    path.write_text(text, encoding="utf-8")
    log = read_print_requests_log(path, text, fmt="sglang")
    with pytest.raises(InputError) as exc:
        to_run_clock(log, run_id="r", platform="h100_sxm_80gb", t0_ns=0, anchor=None,
                     run_end_ms=10_000)
    assert exc.value.field == "request_id" and "user@host" in str(exc.value)


def test_validate_refuses_a_private_request_id_already_in_a_folder(tmp_path, make_run, cli):
    """A folder written by someone else: validate names the run, the field and the reason."""
    import pyarrow as pa

    from llm_powertrace_ds import layout
    from llm_powertrace_ds.shards import write_table_atomic
    from llm_powertrace_ds.shards.encode import requests_table

    root, run_id = _inference_run_folder(tmp_path, make_run)
    run = make_run("inf-1", workload="inference", platform="h100_sxm_80gb", with_requests=True)
    table = requests_table(run)
    ids = table.column("request_id").to_pylist()
    ids[0] = "alice@node7"
    table = table.set_column(table.schema.get_field_index("request_id"), "request_id",
                             pa.array(ids, pa.string()))
    write_table_atomic(layout.requests_path(root, run.platform, run.run_id), table)
    res = cli(["validate", root])
    assert res.rc == 1 and "request_id" in res.out and "user@host" in res.out


@pytest.mark.parametrize("value", ["hf_" + "aB3" * 8, "alice@node7"], ids=["token", "user@host"])
def test_record_set_and_program_name(tmp_path, value):
    """``record --set`` and the recorded program's name pass the same gate before anything runs."""
    import subprocess

    repo = Path(__file__).resolve().parents[2]
    env = {"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}
    for extra in (["--set", f"dataset_name={value}", "--", "true"],
                  ["--", str(tmp_path / value.replace("@", "-at-")) if "@" in value
                   else str(tmp_path / value)]):
        if extra[0] == "--":
            Path(extra[1]).write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
            Path(extra[1]).chmod(0o755)
        proc = subprocess.run([sys.executable, "-m", "llm_powertrace_ds.cli", "record", "--out",
                               str(tmp_path / "ds"), "--workload", "finetune", "--sampler",
                               "cpu_proxy", *extra], env=env, capture_output=True, text=True,
                              timeout=120)
        if extra[0] == "--" and "@" in value:
            continue  # a path holding "-at-" is a fine program name: only the token case applies
        assert proc.returncode in (1, 2), proc.stderr
        assert "access token" in proc.stderr or "user@host" in proc.stderr, proc.stderr
        assert not (tmp_path / "ds" / "data").exists()


# ---- every numeric column, hostile numbers ----------------------------------------------------

HOSTILE_NUMBERS = [math.inf, -math.inf, math.nan, 1e308, 2**31, 2**63]


def _numeric_columns():
    seen = set()
    for config in (*schema.RUNS_CONFIGS, schema.REQUESTS_CONFIG, *schema.TRACE_CONFIGS):
        for col in schema.COLUMNS[config]:
            if col.dtype and (col.dtype.startswith("float") or col.dtype.startswith("int")) \
                    and (config, col.name) not in seen:
                seen.add((config, col.name))
                yield config, col


@pytest.mark.parametrize(("config", "col"), list(_numeric_columns()),
                         ids=lambda x: x if isinstance(x, str) else x.name)
def test_every_numeric_column_refuses_hostile_numbers(config, col):
    from llm_powertrace_ds import numbers  # only this case needs the module

    for value in HOSTILE_NUMBERS:
        why = numbers.problem(col.dtype, value)
        if value == 2**31 and col.dtype in ("int64", "float32", "float64"):
            assert why is None  # fits its type and is below 1e15
            continue
        assert why is not None, (col.name, value)
        with pytest.raises(InputError) as exc:
            numbers.check_row(config, {col.name: value}, where="run r")
        assert exc.value.field == col.name and "\n" not in str(exc.value)
    assert numbers.problem(col.dtype, -0.0) is None
    assert numbers.problem(col.dtype, 0) is None


def test_a_run_with_an_infinite_value_is_not_published(tmp_path, make_run):
    from llm_powertrace_ds import layout, shards
    from llm_powertrace_ds.shards.encode import runs_table

    root = tmp_path / "ds"
    run = make_run("r-inf")
    run.meta["learning_rate"] = math.inf
    with pytest.raises(InputError) as exc:
        shards.publish_run(root, run, refresh_card=False)
    assert exc.value.field == "learning_rate" and "finite" in str(exc.value)
    data = layout.data_root(root)
    assert not data.exists() or not any(p.is_file() for p in data.rglob("*"))
    with pytest.raises(InputError) as exc:
        runs_table(make_run("r-2"), {"energy_per_token_j": math.inf})
    assert exc.value.field == "energy_per_token_j"


@pytest.mark.parametrize(("field", "value"), [("Energy/req (J)", 1e300),
                                              ("Token tput (tok/s)", 1e300),
                                              ("Avg Output Tokens", 1e-300)])
def test_ml_energy_huge_values_never_publish_inf(cli, tmp_path, field, value):
    task = _mlenergy_task(tmp_path, **{field: value})
    res = cli(["import", "mlenergy-v2", task, "--out", tmp_path / "ds"])
    assert res.rc == 1 and "bs64+tp1+pp1.json" in res.error_line
    assert not (tmp_path / "ds").exists()


def test_ml_energy_params_1e300_is_one_line(cli, tmp_path):
    task = _mlenergy_task(tmp_path)
    (task / "models.json").write_text(json.dumps({"org/m": {"params": 1e300}}), encoding="utf-8")
    res = cli(["import", "mlenergy-v2", task, "--out", tmp_path / "ds"])
    assert res.rc == 1 and "field 'params'" in res.error_line


# ---- the bounded reader: nested, not UTF-8, special files -------------------------------------

def test_ml_energy_nested_or_not_utf8(cli, tmp_path):
    task = _mlenergy_task(tmp_path)
    run = next(task.rglob("bs64*.json"))
    run.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    res = cli(["import", "mlenergy-v2", task, "--out", tmp_path / "ds"])
    assert res.rc == 1 and "nested deeper than" in res.error_line
    run.write_bytes(b'{"Model": "\xff"}')
    res = cli(["import", "mlenergy-v2", task, "--out", tmp_path / "ds"])
    assert res.rc == 1 and "not UTF-8" in res.error_line


@pytest.mark.parametrize("kind", ["deep-json", "deep-yaml", "dev-zero", "fifo"])
def test_meta_files_are_read_by_the_bounded_reader(cli, tmp_path, kind):
    import os

    if kind == "deep-json":
        meta = tmp_path / "m.json"
        meta.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    elif kind == "deep-yaml":
        meta = tmp_path / "m.yaml"
        meta.write_text("a: " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    elif kind == "dev-zero":
        meta = Path("/dev/zero")
    else:
        meta = tmp_path / "m.yaml"
        os.mkfifo(meta)
    res = cli(["import", "nvidia-smi", _nvidia_log(tmp_path / "gpu.csv"), "--meta", meta,
               "--out", tmp_path / "ds", "--workload", "finetune"])
    assert res.rc == 1
    assert any(w in res.error_line for w in ("nested deeper", "not a regular file")), \
        res.error_line


def test_a_deep_vllm_result_file_is_one_line(tmp_path):
    from llm_powertrace_ds.importers.requests import read_requests

    path = tmp_path / "vllm.json"
    path.write_text('{"start_times": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    with pytest.raises(InputError, match="nested deeper than"):
        read_requests("vllm", path)


@pytest.mark.parametrize("ttft", ["(" * 200_000 + ")",  # too many parentheses to tokenize
                                  "-" * 100_000 + "1",   # the parser's stack: MemoryError
                                  "1+" * 100_000 + "1"],  # the AST's depth: RecursionError
                         ids=["parentheses", "unary-chain", "binary-chain"])
def test_a_malformed_sglang_line_is_one_line(tmp_path, ttft):
    from llm_powertrace_ds.importers.requests import read_requests

    out = f"RequestFuncOutput(success=True, latency=0.5, ttft={ttft})"
    path = tmp_path / "sglang.log"
    path.write_text(f'rid=a time=2.0 time_delta=0.5 message="request end" output="{out}"\n',
                    encoding="utf-8")
    with pytest.raises(InputError) as exc:
        read_requests("sglang", path)
    assert (exc.value.line, exc.value.field) == (1, "output") and "\n" not in str(exc.value)


# ---- request times and token counts -----------------------------------------------------------

@pytest.mark.parametrize(("row", "field"), [
    ("r1,nan,2,3,10,5", "arrival_s"), ("r1,1,inf,3,10,5", "first_token_s"),
    ("r1,1,2,3,3e9,5", "prompt_tokens"), ("r1,1,2,3,10,1e30", "output_tokens")])
def test_request_csv_values_are_named_with_their_line(tmp_path, row, field):
    from llm_powertrace_ds.importers.requests import read_requests

    path = tmp_path / "req.csv"
    path.write_text("request_id,arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens\n"
                    + row + "\n", encoding="utf-8")
    with pytest.raises(InputError) as exc:
        read_requests("csv", path)
    assert (exc.value.line, exc.value.field) == (2, field)


def test_vllm_gaps_that_sum_to_inf_are_named(tmp_path):
    from llm_powertrace_ds.importers.requests import read_requests
    from llm_powertrace_ds.importers.requests_common import to_run_clock

    path = tmp_path / "vllm.json"
    path.write_text(json.dumps({"start_times": [1.0], "input_lens": [10], "output_lens": [3],
                                "ttfts": [0.1], "itls": [[1e308, 1e308]]}), encoding="utf-8")
    log = read_requests("vllm", path)
    with pytest.raises(InputError) as exc:
        to_run_clock(log, run_id="r", platform="p", t0_ns=0, anchor=None, run_end_ms=10**9)
    assert exc.value.field == "finish_s" and "vllm.json" in str(exc.value)


# ---- the provenance rule and timing options of the DCGM importer -------------------------------

def _dmon(tmp_path: Path) -> Path:
    log = tmp_path / "dmon.txt"
    log.write_text("#Entity   POWER\nID        W\n" + "".join(f"GPU 0     {100 + s}.0\n"
                                                           for s in range(10)), encoding="utf-8")
    return log


@pytest.mark.parametrize(("key", "value"), [("sampler", "nvml"), ("workload", "inference"),
                                            ("host_hash", "abc"), ("schema_version", "9.9.9")])
def test_dcgm_meta_cannot_set_provenance(cli, tmp_path, key, value):
    meta = tmp_path / "meta.yaml"
    meta.write_text(f"sample_period_ms: 100\n{key}: {value}\n", encoding="utf-8")
    line = _refused(cli, ["import", "dcgm", _dmon(tmp_path), "--meta", meta, "--out",
                          tmp_path / "ds", "--workload", "finetune"], tmp_path / "ds")
    assert f"field '{key}'" in line and "provenance" in line


def test_dcgm_period_out_of_range_names_the_key(cli, tmp_path):
    meta = tmp_path / "meta.yaml"
    meta.write_text("sample_period_ms: 0.001\n", encoding="utf-8")
    line = _refused(cli, ["import", "dcgm", _dmon(tmp_path), "--meta", meta, "--out",
                          tmp_path / "ds", "--workload", "finetune"], tmp_path / "ds")
    assert "field 'sample_period_ms'" in line and "quality_flags" not in line


# ---- facility: options bounded up front, strict JSON -------------------------------------------

@pytest.fixture
def site_folder(tmp_path, make_run):
    from llm_powertrace_ds import shards

    root = tmp_path / "site-ds"
    shards.publish_run(root, make_run("f-1"), refresh_card=False)
    return root


@pytest.mark.parametrize(("args", "option"), [
    (["--node-overhead", "1e308:1e308"], "--node-overhead"),
    (["--node-overhead", "1e7:0.3"], "--node-overhead"),
    (["--pue", "1e308"], "--pue"),
    (["--gpus", "1000000000000"], "--gpus"),
    (["--duration", "1e12"], "--duration"),
    (["--seed", "-1"], "--seed"),
])
def test_facility_refuses_absurd_options_naming_them(cli, site_folder, args, option):
    base = ["facility", site_folder, "--gpus", "8", "--format", "json"]
    if args[0] == "--gpus":
        base = ["facility", site_folder, "--format", "json"]
    res = cli([*base, *args])
    assert res.rc in (1, 2), res.out
    assert option in res.error_line and "Infinity" not in res.out
