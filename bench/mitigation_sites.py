"""Storage, floor and cap for sites composed from real traces: the table of ``docs/mitigation.md``.

The seed authors' two 4 × H200 LoRA fine-tuning traces (``powertraces-v6`` in
``../shared/data/external``, read in place, never copied) are imported into a temporary dataset;
``facility`` composes lock-step sites of 1,000, 10,000 and 100,000 GPUs (4-GPU nodes as measured,
no replicas; the default node-overhead model and PUE 1; a 4-hour horizon: each job starts once,
repeats its measured steady window and stops once); ``mitigate`` then sizes, at the profile's
0.1 s resolution:

- storage for grid-side ramp limits of 1, 10 and 100 MW/min (the state-of-charge-restoring
  controller of ``llm_powertrace_ds/mitigation/controller.py``): the converged size of the
  periodic swing, and the job's start and stop sized apart (ΔP²/(2R) each);
- the energy a power floor at 50, 70 and 90 % of the site's peak burns.

Writes the numbers as JSON (``docs/data/mitigation-sites.json``) and renders the table into
``docs/mitigation.md`` between its ``<!-- sites:begin -->`` / ``<!-- sites:end -->`` markers;
``--render-only`` re-renders from the JSON (what the freshness test checks).

Usage: python bench/mitigation_sites.py [--external DIR] [--render-only]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JSON_PATH = REPO / "docs" / "data" / "mitigation-sites.json"
DOC_PATH = REPO / "docs" / "mitigation.md"
BEGIN, END = "<!-- sites:begin -->", "<!-- sites:end -->"
TRACES = ("powertraces-pt100array_pt017_r1_7536307_1-50f3a1a4a0",
          "powertraces-pt100array_pt019_r1_7536307_11-89ffb37037")
SITES_GPUS = (1_000, 10_000, 100_000)
RAMP_MW_PER_MIN = (1.0, 10.0, 100.0)
FLOOR_PCT = (50.0, 70.0, 90.0)
DURATION_S = 14400.0


def measure(external: Path) -> dict:
    from llm_powertrace_ds import mitigation as mit
    from llm_powertrace_ds.cli import main

    pt = external / "powertraces-v6"
    out: dict = {"machine": platform.machine(), "date": dt.date.today().isoformat(),
                 "traces": list(TRACES), "duration_s": DURATION_S, "sites": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ds"
        for stem in TRACES:
            with contextlib.redirect_stdout(io.StringIO()):
                code = main(["-q", "import", "powertrace-csv", str(pt / f"{stem}.csv"), "--meta",
                             str(pt / f"{stem}.json"), "--out", str(root), "--workload",
                             "finetune"])
            if code != 0:
                raise SystemExit(f"import of {stem} failed ({code})")
        for gpus in SITES_GPUS:
            site = Path(tmp) / f"site-{gpus}.parquet"
            with contextlib.redirect_stdout(io.StringIO()):
                code = main(["-q", "facility", str(root), "--gpus", str(gpus), "--gpus-per-node",
                             "4", "--sync", "lockstep", "--duration", str(DURATION_S),
                             "--out", str(site), "--format", "json"])
            if code != 0:
                raise SystemExit(f"facility --gpus {gpus} failed ({code})")
            profile = mit.read_profile(site)
            base = mit.apply(profile, mit.Plan()).summary
            row: dict = {"gpus": gpus, "resolution_s": profile.resolution_s,
                         "sensor_average_s": profile.sensor_average_s,
                         "mean_mw": base["load"]["mean_w"] / 1e6,
                         "peak_mw": base["load"]["peak_w"] / 1e6,
                         "range_mw": base["load"]["range_w"] / 1e6,
                         "swing_p95_p5_mw": base["load"]["swing_p95_p5_w"] / 1e6,
                         "ramp_max_mw_per_min": base["load"]["ramp_max_w_per_s"]["60"] * 60 / 1e6,
                         "storage": [], "floor": []}
            for mw_per_min in RAMP_MW_PER_MIN:
                summary = mit.apply(profile, mit.Plan(ramp_limit_w_per_s=mw_per_min * 1e6 / 60)
                                    ).summary
                s = summary["storage"]
                starts_stops = sum(s[k]["storage_energy_j"] for k in ("start", "stop") if s[k])
                row["storage"].append({"ramp_limit_mw_per_min": mw_per_min,
                                       "power_mw": s["power_w"] / 1e6,
                                       "energy_mwh": s["energy_mwh"],
                                       "starts_stops_mwh": starts_stops / 3.6e9,
                                       "time_constant_s": s["time_constant_s"],
                                       "grid_ramp_60s_mw_per_min":
                                           summary["grid"]["ramp_max_w_per_s"]["60"] * 60 / 1e6,
                                       "grid_worse_than_load": summary["grid_worse_than_load"],
                                       "full_cycles_per_hour": s["full_cycles_per_hour"]})
            for pct in FLOOR_PCT:
                f = mit.apply(profile, mit.Plan(floor_pct=pct)).summary["floor"]
                row["floor"].append({"floor_pct": pct, "extra_energy_mwh": f["extra_energy_mwh"],
                                     "extra_energy_pct": f["extra_energy_pct"],
                                     "range_mw": f["range_w"] / 1e6})
            out["sites"].append(row)
            print(f"{gpus} GPUs: mean {row['mean_mw']:.3g} MW, range {row['range_mw']:.3g} MW",
                  file=sys.stderr)
    return out


def render(data: dict) -> str:
    """The Markdown tables (deterministic from the JSON)."""
    lines = [
        f"Measured by `bench/mitigation_sites.py` on {data['date']} ({data['machine']}): "
        f"lock-step sites composed from the two 4 × H200 traces, {data['duration_s']:g} s "
        "horizon (each job starts once and stops once), computed at "
        f"{data['sites'][0]['resolution_s']:g} s. Composed, not measured.",
        "",
        "| GPUs | mean (MW) | peak (MW) | range (MW) | swing p95-p5 (MW) | max 1-min ramp "
        "(MW/min) | floor 50 / 70 / 90 %: extra energy (% of the job's) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for s in data["sites"]:
        floors = " / ".join(f"{x['extra_energy_pct']:.3g} %" for x in s["floor"])
        lines.append(f"| {s['gpus']:,} | {s['mean_mw']:.3g} | {s['peak_mw']:.3g} | "
                     f"{s['range_mw']:.3g} | {s['swing_p95_p5_mw']:.3g} | "
                     f"{s['ramp_max_mw_per_min']:.3g} | {floors} |")
    lines += [
        "",
        "| GPUs | grid ramp limit (MW/min) | periodic swing: power (MW), energy (MWh) | start + "
        "stop (MWh) | τ (s) | grid side's max 1-min ramp (MW/min) | grid side worse than the "
        "load |",
        "| ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for s in data["sites"]:
        for x in s["storage"]:
            worse = "; ".join(x["grid_worse_than_load"]) or "nowhere"
            lines.append(f"| {s['gpus']:,} | {x['ramp_limit_mw_per_min']:g} | "
                         f"{x['power_mw']:.3g} MW, {x['energy_mwh']:.3g} MWh | "
                         f"{x['starts_stops_mwh']:.3g} | {x['time_constant_s']:.3g} | "
                         f"{x['grid_ramp_60s_mw_per_min']:.3g} | {worse} |")
    return "\n".join(lines) + "\n"


def write_doc(data: dict) -> None:
    text = DOC_PATH.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{render(data)}{END}{tail}"
    tmp = DOC_PATH.with_name(f".{DOC_PATH.name}.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, DOC_PATH)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--external", type=Path, default=REPO.parent / "shared" / "data" / "external",
                    help="the external traces folder (default: ../shared/data/external)")
    ap.add_argument("--render-only", action="store_true",
                    help="re-render docs/mitigation.md from the JSON")
    args = ap.parse_args()
    if args.render_only:
        data = json.loads(JSON_PATH.read_text(encoding="utf-8"))
    else:
        data = measure(args.external)
        JSON_PATH.parent.mkdir(parents=True, exist_ok=True)
        tmp = JSON_PATH.with_name(f".{JSON_PATH.name}.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, JSON_PATH)
    write_doc(data)
    print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
