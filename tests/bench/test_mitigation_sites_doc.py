"""The real-site table of docs/mitigation.md is rendered from its committed JSON, never by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("mitigation_sites",
                                                  REPO / "bench" / "mitigation_sites.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_table_is_the_rendering_of_the_committed_json():
    bench = _bench()
    data = json.loads(bench.JSON_PATH.read_text(encoding="utf-8"))
    doc = bench.DOC_PATH.read_text(encoding="utf-8")
    table = doc.split(bench.BEGIN, 1)[1].split(bench.END, 1)[0]
    assert table == "\n" + bench.render(data)
    assert [s["gpus"] for s in data["sites"]] == [1_000, 10_000, 100_000]
    assert [x["ramp_limit_mw_per_min"] for x in data["sites"][0]["storage"]] == [1, 10, 100]
    assert [x["floor_pct"] for x in data["sites"][0]["floor"]] == [50, 70, 90]
