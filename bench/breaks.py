"""Hand-made breaks of the behaviours issue #20 lists: each must fail its behaviour test.

    python bench/breaks.py [NAME-FRAGMENT ...] [--json PATH]

Each entry is one plausible one-line mistake (a percentile, a threshold, a unit, an order of
writes) in a core module and the tests that pin that behaviour. For each, in a scratch copy of
the working tree (never the tree itself), the line is changed, the tests run, and the verdict
printed: ``CAUGHT`` (a test failed, as it must) or ``MISSED``. Exit status 1 if any was missed
or a break no longer applies (its line changed: update the entry).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report  # noqa: E402
from mutation import _copy_tree  # noqa: E402

MC = "llm_powertrace_ds/metrics/core.py"
MR = "llm_powertrace_ds/metrics/ramps.py"
MS = "llm_powertrace_ds/metrics/states.py"
V = "llm_powertrace_ds/validate.py"
S = "llm_powertrace_ds/scaling/common.py"
SL = "llm_powertrace_ds/scaling/loglinear.py"
SH = "llm_powertrace_ds/shards/write.py"
C = "llm_powertrace_ds/importers/csv_reader.py"
CT = "llm_powertrace_ds/importers/timestamps.py"
N = "llm_powertrace_ds/importers/nvidia_smi.py"
BREAKS: list[tuple[str, str, str, str, str]] = [
    # (name, file, line as it is, the mistake, tests that must catch it)
    ("p99->p95", MR, "_percentiles(x, (5, 50, 95, 99))", "_percentiles(x, (5, 50, 95, 95))", "tests/llm_powertrace_ds/metrics/test_metrics_behaviour.py"),
    ("ramp freq per second", MR, "(t_last - t0) / 60.0)", "(t_last - t0))", "tests/llm_powertrace_ds/metrics/test_metrics_behaviour.py"),
    ("par_1s uses 60s peak", MR, '("par_1s", "peak_power_1s_w")', '("par_1s", "peak_power_60s_w")', "tests/llm_powertrace_ds/metrics/test_metrics_behaviour.py"),
    ("nested gaps: end of last", MS, "np.maximum.at(ce, cluster, e)", "ce[cluster] = e", "tests/llm_powertrace_ds/metrics/test_metrics_behaviour.py"),
    ("declared period ignored", MC, "period = max(float(declared), median) if declared else median", "period = median", "tests/llm_powertrace_ds/metrics/test_metrics_behaviour.py"),
    ("duration from latest first", MR, "first = min(int(d.t_ms[0]) for d in valid)", "first = max(int(d.t_ms[0]) for d in valid)", "tests/llm_powertrace_ds/metrics/test_metrics_behaviour.py"),
    ("gap at exactly threshold", MC, "np.flatnonzero(dt > limit) if dt.max() > limit", "np.flatnonzero(dt >= limit) if dt.max() >= limit", "tests/llm_powertrace_ds/metrics/test_metrics_behaviour.py"),
    ("offset ignored", CT, "ms[offset_row] = _explicit_utc_ms(texts[offset_row])", "pass", "tests/llm_powertrace_ds/importers/test_behaviour.py"),
    ("no restart after header", N, "return _positions(table.segments) % count", "return np.arange(len(table.segments)) % count", "tests/llm_powertrace_ds/importers/test_behaviour.py"),
    ("infer: extra row", N, "if gap > 0 and spread <= 0.5 * gap:", "if gap > 0 and spread <= 0.5 * gap and len(ts) % n == 0:", "tests/llm_powertrace_ds/importers/test_behaviour.py"),
    ("cut-off only if unterminated", C, "return not st.terminated or len(row) < len(self.header)", "return not st.terminated", "tests/llm_powertrace_ds/importers/test_behaviour.py"),
    ("negative power allowed", "llm_powertrace_ds/importers/powertrace_csv.py", 'nonnegative=name == "power_w"', "nonnegative=False", "tests/llm_powertrace_ds/importers/test_behaviour.py"),
    ("stall >=", V, "if (dt > STALL_S * 1000).any():", "if (dt > STALL_S * 1000 + 5).any():", "tests/llm_powertrace_ds/test_validate_behaviour.py"),
    ("irregular CV 0.35", V, "IRREGULAR_CV = 0.25", "IRREGULAR_CV = 0.35", "tests/llm_powertrace_ds/test_validate_behaviour.py"),
    ("irregular CV 0.15", V, "IRREGULAR_CV = 0.25", "IRREGULAR_CV = 0.15", "tests/llm_powertrace_ds/test_validate_behaviour.py"),
    ("mismatch 10%", "llm_powertrace_ds/schema.py", "ENERGY_MISMATCH_PCT = 5.0", "ENERGY_MISMATCH_PCT = 10.0", "tests/llm_powertrace_ds/test_validate_behaviour.py"),
    ("gap 5 periods", "llm_powertrace_ds/schema.py", "GAP_PERIODS = 3.0", "GAP_PERIODS = 5.0", "tests/llm_powertrace_ds/test_validate_behaviour.py"),
    ("cpu_proxy and", V, 'run.meta.get("sampler") == "cpu_proxy" or run.platform', 'run.meta.get("sampler") == "cpu_proxy" and run.platform', "tests/llm_powertrace_ds/test_validate_behaviour.py"),
    ("mdape mean", S, "return float(np.median(errs)) if errs else None", "return float(np.mean(errs)) if errs else None", "tests/llm_powertrace_ds/scaling/test_scaling_behaviour.py"),
    ("holdout leaks", "llm_powertrace_ds/scaling/result.py", "evaluate_holdout(train, test, target, holdout, n_boot, seed)", "evaluate_holdout(use, test, target, holdout, n_boot, seed)", "tests/llm_powertrace_ds/scaling/test_scaling_behaviour.py"),
    ("trace first", "llm_powertrace_ds/shards/publish.py", """    tables: dict[Path, pa.Table | Path] = {
        layout.runs_path(root, run.workload, run.platform, run.run_id):""", """    tables: dict[Path, pa.Table | Path] = {
        layout.trace_path(root, run.workload, run.platform, run.model_family, run.run_id): trace_table(run),
        layout.runs_path(root, run.workload, run.platform, run.run_id):""", "tests/llm_powertrace_ds/shards/test_shards_behaviour.py"),
    ("in-place write", SH, "    tmp = _tmp_name(path)\n", "    tmp = path\n", "tests/llm_powertrace_ds/shards/test_shards_behaviour.py"),
    ("kv cache dropped", "generation/workloads/quant.py", """    return {"cache_implementation": "quantized",""", """    return {}
    return {"cache_implementation": "quantized",""", "tests/generation/workloads/test_inference.py::test_quantised_kv_cache_run"),
    ("page index off", "llm_powertrace_ds/hub_upload.py", 'opts["write_page_index"] = True', 'opts["write_page_index"] = False', "tests/test_upload.py::test_parquet_copy_loads_and_equals_arrow_row_for_row"),
    ("plot device label", "llm_powertrace_ds/plots.py", 'label=f"{dev_word} {d.node_index}:{d.gpu_index}")', 'label=f"{dev_word} {d.gpu_index}")', "tests/llm_powertrace_ds/test_plots.py::test_plot_run_writes_png"),
    ("plot device power halved", "llm_powertrace_ds/plots.py", 'ax_t.plot(t, p, lw=0.6,', 'ax_t.plot(t, p / 2, lw=0.6,', "tests/llm_powertrace_ds/test_plots.py::test_plot_run_writes_png"),
    ("ramp p99 -> p95", MR, "_percentiles(np.abs(r, out=r), (95, 99))", "_percentiles(np.abs(r, out=r), (95, 95))", "tests/llm_powertrace_ds/metrics/test_metrics_behaviour.py"),
    ("loglinear r2 lost", SL, 'r2=float(data["r2_log"]),', 'r2=0.0,', "tests/llm_powertrace_ds/scaling/test_scaling_behaviour.py"),
    ("energy x2 (convert publish)", MC, "energy = 0.5 * float(np.dot(dt, p[:-1] + p[1:])) / 1000.0", "energy = float(np.dot(dt, p[:-1] + p[1:])) / 1000.0", "tests/generation/sampler/test_convert.py::test_converted_run_publishes_and_reads_back"),
]


def main(argv: list[str]) -> int:
    json_path: Path | None = None
    if "--json" in argv:
        at = argv.index("--json")
        if at + 1 >= len(argv):
            print("--json needs a PATH", file=sys.stderr)
            return 2
        json_path = Path(argv[at + 1])
        fragments = argv[:at] + argv[at + 2:]
    else:
        fragments = argv
    started = _report.machine()
    verdicts: dict[str, str] = {}
    bad = 0
    with tempfile.TemporaryDirectory(prefix="llm-powertrace-breaks-") as tmp:
        work = Path(tmp)
        _copy_tree(work)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        for name, file, old, new, tests in BREAKS:
            if fragments and not any(a in name for a in fragments):
                continue
            path = work / file
            original = path.read_text(encoding="utf-8")
            if original.count(old) != 1:
                print(f"STALE   {name}: the line to break is not in {file} once")
                verdicts[name] = "STALE"
                bad += 1
                continue
            path.write_text(original.replace(old, new), encoding="utf-8")
            try:
                proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p",
                                       "no:cacheprovider", *tests.split()], cwd=work, env=env,
                                      capture_output=True, text=True, timeout=900)
            finally:
                path.write_text(original, encoding="utf-8")
            lines = proc.stdout.strip().splitlines()
            verdict = {1: "CAUGHT", 0: "MISSED"}.get(proc.returncode, f"rc={proc.returncode}")
            bad += verdict != "CAUGHT"
            verdicts[name] = verdict
            print(f"{verdict:7s} {name:30s} {lines[-1] if lines else proc.stderr[-200:]}",
                  flush=True)
        shutil.rmtree(work / ".pytest_cache", ignore_errors=True)
    if json_path is not None:
        caught = sum(v == "CAUGHT" for v in verdicts.values())
        others = ", ".join(f"{k}: {v}" for k, v in verdicts.items() if v != "CAUGHT")
        _report.write(json_path, _report.document("breaks", [
            _report.result("breaks_run", len(verdicts), "breaks"),
            _report.result("breaks_caught", caught, "breaks", equals=len(verdicts)),
            _report.result("not_caught", others or "none", "names"),
        ], script=__file__, argv=argv, started=started))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
