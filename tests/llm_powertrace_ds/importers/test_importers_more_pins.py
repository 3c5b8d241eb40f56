"""Pins of the importers' entry points and helpers that mutation testing found unpinned.

Mutation testing of ``importers/`` left these behaviours without a failing test: the exact
errors of ``import_summaries`` (unknown format) and of the DCGM importer (a header that is not
``#Entity``, a missing sample period without a metadata file, metadata text that names a path,
``--num-gpus`` below the GPUs in the log), each naming the right file, line and field; the
normalisation of source stage labels (case, runs of non-letters, the ends, a missing label); and
that the request readers decode their files as UTF-8 whatever the locale's encoding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import SUMMARY_FORMATS, import_file, import_summaries
from llm_powertrace_ds.importers.enrich import STAGE_KINDS, _stage_key, stage_kind_events
from llm_powertrace_ds.run import Event

from .test_dcgm import HEADER as DMON_HEADER
from .test_dcgm import write_log

REPO = Path(__file__).resolve().parents[3]


def _where(exc: pytest.ExceptionInfo) -> tuple:
    return exc.value.reason, exc.value.file, exc.value.line, exc.value.field


# ---------------------------------------------------------------------------------------------
# import_summaries
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["bogus", "MLENERGY-V2", "nvidia-smi", ""])
def test_unknown_summaries_format_is_one_exact_error(tmp_path, fmt):
    assert SUMMARY_FORMATS == ("mlenergy-v2",)
    with pytest.raises(InputError) as exc:
        import_summaries(fmt, tmp_path)
    reason = f"unknown summaries format {fmt!r}; known: mlenergy-v2"
    assert _where(exc) == (reason, None, None, "format")
    assert str(exc.value) == f"field 'format': {reason}"


# ---------------------------------------------------------------------------------------------
# DCGM
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("header", ["#XEntity", "#X Entity", "#Device", "#"])
def test_dmon_header_must_name_entity_right_after_the_hash(tmp_path, header):
    path, meta = write_log(tmp_path, n=3)
    path.write_text(path.read_text().replace("#Entity", header))
    line = DMON_HEADER.split("\n")[0].replace("#Entity", header)
    with pytest.raises(InputError) as exc:
        import_file("dcgm", path, workload="inference", meta_path=meta)
    assert _where(exc) == (f"expected a '#Entity ...' header, got {line[:40]!r}", str(path), 1,
                           None)


def test_dmon_header_with_hashes_and_space_is_read(tmp_path):
    path, meta = write_log(tmp_path, n=3, gpus=1)
    path.write_text(path.read_text().replace("#Entity", "## Entity"))
    run = import_file("dcgm", path, workload="inference", meta_path=meta)
    assert run.devices[0].t_ms.tolist() == [0, 100, 200]


def test_dmon_without_metadata_names_the_missing_period(tmp_path):
    path, _ = write_log(tmp_path, n=3)
    with pytest.raises(InputError) as exc:
        import_file("dcgm", path, workload="inference")
    assert _where(exc) == ("dcgmi dmon prints no timestamps: give its -d delay as "
                           "sample_period_ms in --meta (got None)", str(path), None,
                           "sample_period_ms")


def test_dmon_metadata_naming_a_path_is_refused_naming_the_metadata_file(tmp_path):
    path, meta = write_log(tmp_path, n=3)
    meta.write_text(json.dumps({"sample_period_ms": 100, "model_name": "/home/alice/llama"}))
    with pytest.raises(InputError) as exc:
        import_file("dcgm", path, workload="inference", meta_path=meta)
    assert exc.value.file == str(meta)
    assert exc.value.field == "model_name"
    assert exc.value.line is None


def test_dmon_num_gpus_below_the_log_names_the_log(tmp_path):
    path, meta = write_log(tmp_path, n=3, gpus=2)
    with pytest.raises(InputError) as exc:
        import_file("dcgm", path, workload="inference", meta_path=meta, num_gpus=1)
    assert _where(exc) == ("--num-gpus is 1 but the log holds 2 GPUs", str(path), None,
                           "num_gpus")


# ---------------------------------------------------------------------------------------------
# Source stage labels
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("label, key", [
    ("Warm up", "warm_up"),
    ("WARM-UP", "warm_up"),
    (" (EVAL) ", "eval"),
    ("__ckpt__", "ckpt"),
    ("Checkpoint #3", "checkpoint"),
    ("prefill/decode", "prefill_decode"),
    ("42", ""),
    ("", ""),
    (None, ""),
])
def test_stage_labels_normalise_to_lower_case_words_joined_by_underscores(label, key):
    assert _stage_key(label) == key


def test_stage_labels_with_spaces_and_brackets_map_to_their_kinds(make_run):
    run = make_run(devices=1, n=50)  # readings every 100 ms up to 4900
    run.events = [Event(0, "stage", label="Warm up"), Event(1000, "stage", label="(EVAL)"),
                  Event(2000, "stage", label="Checkpoint #3"), Event(3000, "stage", label="42")]
    got = [(e.t_ms, e.kind, e.label) for e in stage_kind_events(run)]
    assert STAGE_KINDS["warm_up"] == "warmup"
    assert got == [(0, "warmup_begin", "Warm up"), (1000, "warmup_end", "Warm up"),
                   (1000, "eval_begin", "(EVAL)"), (2000, "eval_end", "(EVAL)"),
                   (2000, "checkpoint_begin", "Checkpoint #3"),
                   (3000, "checkpoint_end", "Checkpoint #3")]


# ---------------------------------------------------------------------------------------------
# Request files are UTF-8 whatever the locale
# ---------------------------------------------------------------------------------------------

_READ_ALL = """
import json, locale, sys
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.requests_csv import read_csv_requests
from llm_powertrace_ds.importers.requests_sglang import read_sglang_requests
from llm_powertrace_ds.importers.requests_vllm import read_vllm_requests
out = {"encoding": locale.getpreferredencoding(False)}
for name, read, path in zip(("csv", "sglang", "vllm"),
                            (read_csv_requests, read_sglang_requests, read_vllm_requests),
                            sys.argv[1:], strict=True):
    try:
        out[name] = [[r.request_id, r.status] for r in read(path).requests]
    except InputError as exc:
        out[name] = str(exc)
print(json.dumps(out))
"""


def test_request_files_are_read_as_utf8_under_an_ascii_locale(tmp_path):
    csv_path = tmp_path / "req.csv"
    csv_path.write_text("arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens,"
                        "request_id,status\n1.0,1.5,2.0,10,5,r\u00e9q-1,ok\n"
                        "2.0,,,10,0,r\u00e9q-2,error\n", encoding="utf-8")
    arrays = {"start_times": [1.0, 2.0], "input_lens": [10, 12], "output_lens": [5, 0],
              "ttfts": [0.5, 0.0], "itls": [[0.1, 0.1], []],
              "errors": ["", "d\u00e9lai d\u00e9pass\u00e9"]}
    vllm_path = tmp_path / "vllm.json"
    vllm_path.write_text(json.dumps(arrays, ensure_ascii=False), encoding="utf-8")
    sglang_path = tmp_path / "sglang.jsonl"
    sglang_path.write_text(json.dumps(arrays, ensure_ascii=False) + "\n", encoding="utf-8")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
           "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": "utf-8"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-c", _READ_ALL, str(csv_path), str(sglang_path),
                           str(vllm_path)], cwd=REPO, env=env, capture_output=True,
                          text=True, encoding="utf-8", timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    if out["encoding"].lower().replace("-", "") == "utf8":
        pytest.skip("this platform's C locale decodes files as UTF-8 already")
    assert out == {"encoding": out["encoding"],
                   "csv": [["r\u00e9q-1", "ok"], ["r\u00e9q-2", "error"]],
                   "sglang": [["0", "ok"], ["1", "error"]],
                   "vllm": [["0", "ok"], ["1", "error"]]}
