"""The query API (``llm_powertrace_ds.query``).

Its docstring examples run here; its results are checked against the stored metrics and raw
pyarrow, on generated folders, the streaming path and the real external traces.
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from cards.builder import refresh_card
from llm_powertrace_ds import names, query, shards
from llm_powertrace_ds.names import UnknownName
from llm_powertrace_ds.query import Runs


def build_folder(root, make_run):
    """The small folder every docstring example of ``query`` reads (named like the demo's)."""
    shards.publish_run(root, make_run("ft-a", platform="l40s", family="llama", method="lora",
                                      batch_size=4, model_params=1_000_000))
    shards.publish_run(root, make_run("ft-b", platform="l40s", family="qwen", method="lora",
                                      batch_size=8, seed=1, model_params=2_000_000))
    shards.publish_run(root, make_run("ft-c", platform="h100_sxm_80gb", family="llama",
                                      method="full", batch_size=16, devices=1, seed=2,
                                      model_params=4_000_000))
    shards.publish_run(root, make_run("inf-a", workload="inference", platform="cpu_proxy",
                                      sampler="cpu_proxy", family="llama", seed=3,
                                      with_requests=True))
    return root


@pytest.fixture
def folder(tmp_path, make_run, monkeypatch):
    root = build_folder(tmp_path / "llm-powertrace", make_run)
    monkeypatch.chdir(tmp_path)
    return root


@pytest.mark.parametrize("module", [query, names])
def test_docstring_examples_run(folder, module):
    pytest.importorskip("matplotlib")
    res = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                          raise_on_error=False, verbose=False)
    assert res.attempted >= (20 if module is query else 2)
    assert res.failed == 0


def tick_sums(runs: Runs) -> dict[str, np.ndarray]:
    """Per run, the devices' readings summed tick by tick (the devices share their ticks)."""
    per: dict[str, list[np.ndarray]] = {}
    for run, trace in runs.traces():
        per.setdefault(run.run_id, []).append(np.asarray(trace.power_w, dtype=np.float64))
    out = {}
    for run_id, arrays in per.items():
        n = min(len(a) for a in arrays)
        total = np.sum([a[:n] for a in arrays], axis=0)
        out[run_id] = total[np.isfinite(total)]
    return out


def test_node_total_matches_stored_metrics(folder):
    runs = Runs.load(folder)
    ticks = tick_sums(runs)
    seen = 0
    for run, trace in runs.traces(total=True):
        # the stored p99 and peak are taken at the sampling ticks (never interpolated): the
        # devices' readings summed tick by tick
        # (the metrics pair each device's reading nearest a tick within half a period; summing
        # by index here differs where a device skips a tick: within 1e-4)
        x = ticks[run.run_id]
        assert math.isclose(float(np.percentile(x, 99)), run.p99_power_w, rel_tol=1e-4)
        assert math.isclose(float(x.max()), run.peak_power_w, rel_tol=1e-4)
        assert np.all(np.diff(trace.t_ms) == 100)
        seen += 1
    assert seen == len(runs) == 4


def test_device_traces_equal_raw_arrow(folder):
    got = {(r.run_id, t.gpu_index): t.power_w for r, t in Runs.load(folder).traces()}
    raw = {}
    for cfg in ("finetune", "inference"):
        for b in shards.iter_batches(folder, cfg):
            for row in b.to_pylist():
                raw[(row["run_id"], row["gpu_index"])] = np.array(row["power_w"], dtype=float)
    assert got.keys() == raw.keys()
    for k, v in raw.items():
        np.testing.assert_array_equal(got[k], v)


def test_traces_read_only_the_selected_runs(folder, monkeypatch):
    opened = []
    real = shards.iter_file_batches
    monkeypatch.setattr(shards, "iter_file_batches", lambda p: (opened.append(p.name), real(p))[1])
    out = [(r.run_id, t.gpu_index) for r, t in Runs.load(folder).where(run_id="ft-b").traces()]
    assert out == [("ft-b", 0), ("ft-b", 1)]
    # the runs tables, then exactly one trace file: ft-b's
    assert [n for n in opened if n == "ft-b.arrow"] and "ft-a.arrow" not in opened[-1:]
    assert sum(1 for n in opened if n in ("ft-a.arrow", "ft-c.arrow", "inf-a.arrow")) <= 3


def test_streaming_gives_the_same_results(folder, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    a = Runs.load(folder, workload="finetune").where(method="lora")
    b = Runs.load(str(folder), workload="finetune", streaming=True).where(method="lora")
    assert a.run_ids() == b.run_ids() == ["ft-a", "ft-b"]
    ta = {(r.run_id, t.gpu_index): t.power_w for r, t in a.traces()}
    tb = {(r.run_id, t.gpu_index): t.power_w for r, t in b.traces()}
    assert ta.keys() == tb.keys()
    for k in ta:
        np.testing.assert_array_equal(ta[k], tb[k])


def test_unknown_names_are_errors(folder):
    runs = Runs.load(folder)
    with pytest.raises(UnknownName, match="did you mean 'finetune'"):
        Runs.load(folder, workload="fine-tune")
    with pytest.raises(UnknownName, match="valid: cpu_proxy, h100_sxm_80gb, l40s"):
        Runs.load(folder, split="cpu-proxy")
    with pytest.raises(UnknownName, match="unknown aggregation 'avg'"):
        runs.group_by("platform").agg(energy_j="avg")
    with pytest.raises(UnknownName, match="unknown column 'energy'"):
        runs.group_by("platform").agg(energy="mean")
    with pytest.raises(UnknownName, match="did you mean 'batch_size'"):
        runs.where(lambda r: r.batch_sise > 2).run_ids()
    with pytest.raises(UnknownName, match="unknown signal"):
        runs.traces(signals=["power"])


def test_text_value_no_run_has_is_an_error_listing_the_values_present(folder):
    runs = Runs.load(folder)
    with pytest.raises(UnknownName, match=r"field 'platform': no run has platform 'h100'; "
                       r"did you mean 'h100_sxm_80gb'\? values present: cpu_proxy, "
                       r"h100_sxm_80gb, l40s$"):
        runs.where(platform="h100").run_ids()
    with pytest.raises(UnknownName, match="no run has method 'qlora' or 'dora'"):
        len(runs.where(method=["qlora", "dora"]))
    with pytest.raises(UnknownName, match="no run has platform 'l40s'.*values present: cpu_proxy$"):
        Runs.load(folder, workload="inference").where(platform="l40s").run_ids()


def test_values_present_before_other_filters_select_nothing_quietly(folder):
    runs = Runs.load(folder)
    assert runs.where(platform="h100_sxm_80gb").where(method="lora").run_ids() == []
    assert runs.where(method=["lora", "qlora"]).run_ids() == ["ft-a", "ft-b"]
    assert runs.where(lambda r: r.batch_size > 1000).run_ids() == []


def test_null_compares_false_and_other_errors_propagate(folder):
    runs = Runs.load(folder)  # inference rows have batch_size null
    assert runs.where(lambda r: r.batch_size >= 8).run_ids() == ["ft-b", "ft-c"]
    with pytest.raises(TypeError):
        runs.where(lambda r: r.run_id >= 8).run_ids()


def test_group_by_equals_pyarrow(folder):
    runs = Runs.load(folder, workload="finetune")
    got = runs.group_by("platform", "model_family").agg(energy_j=["mean", "max"])
    t = runs.to_arrow()
    for row in got.to_pylist():
        sel = t.filter(pc.and_(pc.equal(t["platform"], row["platform"]),
                               pc.equal(t["model_family"], row["model_family"])))
        assert math.isclose(row["energy_j_mean"], pc.mean(sel["energy_j"]).as_py())
        assert row["energy_j_max"] == pc.max(sel["energy_j"]).as_py()
    assert got.num_rows == 3


def test_long_table_and_polars(folder):
    tr = Runs.load(folder).where(platform="l40s").traces(signals=["power_w", "gpu_util_pct"])
    t = tr.to_arrow(long=True, run_columns=["model_family"])
    assert t.num_rows == 4 * 200
    assert set(pc.unique(t["model_family"]).to_pylist()) == {"llama", "qwen"}
    wide = tr.to_arrow(long=False)
    assert wide.num_rows == 4 and pa.types.is_list(wide.schema.field("power_w").type)
    pl = pytest.importorskip("polars")
    df = tr.to_polars()
    assert isinstance(df, pl.DataFrame) and df.height == 800
    assert Runs.load(folder).to_polars().height == 4


def test_empty_selection(folder):
    runs = Runs.load(folder).where(platform="l40s", method="full")
    assert len(runs) == 0 and list(runs.traces()) == []
    with pytest.raises(query.InputError, match="no traces"):
        runs.traces().to_arrow()


@pytest.mark.external
def test_external_traces(external_dir, tmp_path):
    """The authors' real 4-GPU traces: node totals on the grid agree with the stored metrics."""
    from llm_powertrace_ds.importers import import_file

    src = external_dir / "powertraces-v6"
    root = tmp_path / "ext"
    for csv in sorted(src.glob("*.csv")):
        run = import_file("powertrace-csv", csv, workload="finetune",
                          meta_path=csv.with_suffix(".json"))
        shards.publish_run(root, run, refresh_card=False)
    refresh_card(root)
    runs = Runs.load(root, workload="finetune")
    assert len(runs) == 3
    by_platform = runs.group_by("platform").agg(run_id="count", mean_power_w="mean")
    assert dict(zip(by_platform["platform"].to_pylist(), by_platform["run_id_count"].to_pylist(),
                    strict=True)) == {"h200": 2, "l40s": 1}
    h200 = runs.where(platform="h200")
    ticks = tick_sums(h200)
    for run, _ in h200.traces(total=True):
        assert run.num_gpus == 4
        x = ticks[run.run_id]
        assert math.isclose(float(np.percentile(x, 99)), run.p99_power_w, rel_tol=1e-5)
        assert math.isclose(float(x.max()), run.peak_power_w, rel_tol=1e-5)
    counts = {}
    for run, trace in runs.traces():
        counts[run.run_id] = counts.get(run.run_id, 0) + len(trace.t_ms)
    assert sum(counts.values()) == 8_908 + 7_636 + 6_904


def test_packed_folder_gives_the_same_traces(folder, tmp_path):
    packed = tmp_path / "packed"
    shards.pack(folder, packed, refresh_card=False)
    assert any("-of-" in p.name for p in packed.rglob("*.arrow"))
    sel = {"workload": "finetune"}
    a = {(r.run_id, t.gpu_index): t.power_w
         for r, t in Runs.load(folder, **sel).where(method="lora").traces()}
    b = {(r.run_id, t.gpu_index): t.power_w
         for r, t in Runs.load(packed, **sel).where(method="lora").traces()}
    assert sorted(a) == sorted(b) == [("ft-a", 0), ("ft-a", 1), ("ft-b", 0), ("ft-b", 1)]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    totals = {r.run_id: t for r, t in Runs.load(packed).traces(total=True)}
    assert sorted(totals) == ["ft-a", "ft-b", "ft-c", "inf-a"]


def test_hub_repo_id_reads_the_downloaded_snapshot(folder, monkeypatch):
    """A repo id goes through huggingface_hub.snapshot_download (a Hub test double here)."""
    import huggingface_hub

    calls = []

    def fake_download(repo_id, repo_type=None, **kw):
        calls.append((repo_id, repo_type))
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    runs = Runs.load("some-org/llm-powertrace", workload="finetune").where(method="lora")
    assert runs.run_ids() == Runs.load(folder, workload="finetune").where(method="lora").run_ids()
    assert [r.run_id for r, _ in runs.traces(total=True)] == ["ft-a", "ft-b"]
    assert calls == [("some-org/llm-powertrace", "dataset")]
