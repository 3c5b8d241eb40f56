"""Every text input is decoded as UTF-8, whatever the locale's or Python's default encoding.

The request readers (plain CSV, vLLM result JSON, SGLang JSONL) read non-ASCII request ids,
statuses and errors the same under an ASCII locale (a subprocess with ``LC_ALL=C``) and when the
default text encoding is patched to Latin-1.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.requests_csv import read_csv_requests
from llm_powertrace_ds.importers.requests_sglang import read_sglang_requests

REPO = Path(__file__).resolve().parents[3]


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


def test_request_csv_is_utf8_whatever_the_default_encoding(tmp_path, monkeypatch):
    path = tmp_path / "req.csv"
    path.write_text("arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens,"
                    "request_id,status\n1.0,1.5,2.0,10,5,r\u00e9q-1,ok\n", encoding="utf-8")
    real = io.text_encoding
    monkeypatch.setattr(io, "text_encoding",
                        lambda enc, stacklevel=2: "latin-1" if enc is None else real(enc))
    got = read_csv_requests(path)
    assert [(r.request_id, r.status) for r in got.requests] == [("r\u00e9q-1", "ok")]


def test_sglang_result_is_read_as_utf8_whatever_the_default_encoding(tmp_path, monkeypatch):
    path = tmp_path / "res.jsonl"
    path.write_bytes(b'{"x": 1}\n\xff\n')
    real = io.text_encoding
    monkeypatch.setattr(io, "text_encoding",
                        lambda enc, stacklevel=2: "latin-1" if enc is None else real(enc))
    with pytest.raises(InputError) as exc:
        read_sglang_requests(path)
    assert exc.value.reason.startswith("Failed to read: UnicodeDecodeError: ")
    assert (exc.value.file, exc.value.line, exc.value.field) == (str(path), None, None)
