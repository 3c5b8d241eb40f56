"""Analysis subcommands: metrics, compare, fit, predict, plot.

``DIR_OR_REPO`` is a local dataset folder, or a Hugging Face Hub dataset repo id
(``org/name``) which is first downloaded with ``huggingface_hub.snapshot_download``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, NoReturn

from .. import schema
from ..errors import InputError, UsageError
from ..hub import resolve_dataset
from ..metrics.rows import iter_run_rows, run_metrics_rows, runs_configs
from ._common import FORMATS, add_format, emit

TABLE_METRICS = ["run_id", "num_gpus", "duration_s", "energy_j", "mean_power_w", "peak_power_w",
                 "par", "swing_w", "ramp_abs_p99_1s_w_per_s", "dominant_freq_hz",
                 "coincidence_factor", "energy_per_token_j"]


def check_columns(names: dict[str, str | None], config: str | None) -> None:
    """Check ``--metric``/``--axis`` values against the runs tables' columns.

    Args:
        names: option -> value (``{"--metric": "energy_per_token_j"}``); ``None`` is skipped.
        config: the ``--config`` given (``None``: both runs configs).

    Raises:
        UnknownName: a column no runs table has (the message suggests the closest one).
    """
    from ..names import check_name

    valid = {c.name for cfg in runs_configs(config) for c in schema.COLUMNS[cfg]}
    for option, value in names.items():
        if value is not None:
            check_name(value, valid, what=option.lstrip("-"), field=option)


def check_settings(settings: dict[str, Any]) -> None:
    """Check ``predict --set`` names: a runs-table column or an axis symbol (``N``, ``B``...).

    Raises:
        UnknownName: ``unknown axis 'foo'``, with the closest valid name.
    """
    from ..names import check_name
    from ..scaling import AXES

    valid = {c.name for cfg in schema.RUNS_CONFIGS for c in schema.COLUMNS[cfg]}
    valid |= set(AXES.values())
    for key in settings:
        check_name(key, valid, what="axis", field="--set")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the analysis subcommands (metrics, compare, fit, predict, plot)."""
    _register_metrics(sub)
    _register_compare(sub)
    _register_fit(sub)
    _register_predict(sub)
    _register_plot(sub)


def _register_metrics(sub: argparse._SubParsersAction) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "metrics", help="power-grid metrics of every run", formatter_class=fmt,
        description="Print the node-total metrics of every run (energy, levels, ramps, "
        "oscillations, synchrony, states). JSON: a list with one object per run.",
        epilog="examples:\n  llm-powertrace metrics llm-powertrace --format json\n"
        "  llm-powertrace metrics org/llm-powertrace --config finetune --split h100_sxm_80gb")
    p.add_argument("dir", metavar="DIR_OR_REPO", help="dataset folder or Hub dataset repo id")
    p.add_argument("--config", default=None,
                   help="finetune, inference, finetune_runs or inference_runs (default: both)")
    p.add_argument("--split", default=None, help="platform split (default: all)")
    p.add_argument("--run", default=None, metavar="RUN_ID", help="one run (default: all)")
    p.add_argument("--recompute", action="store_true",
                   help="recompute from the traces instead of the runs tables (default: off; "
                   "runs written by an older schema are always recomputed)")
    add_format(p)
    p.set_defaults(func=cmd_metrics)


def _register_compare(sub: argparse._SubParsersAction) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "compare", help="our figures of imported runs beside the publisher's own",
        formatter_class=fmt,
        description="Per imported run, each figure its publisher reported (the PowerTrace "
        "catalog's energy in Wh, mean, p95, p99 and peak power, ramps and duration; ML.ENERGY's "
        "steady-state energy, duration, mean power and energy per token) beside ours from the "
        "same trace, in the publisher's unit, with diff_pct = 100 (ours - theirs) / theirs.",
        epilog="examples:\n  llm-powertrace compare llm-powertrace\n"
        "  llm-powertrace compare mlenergy --run RUN_ID --format json")
    p.add_argument("dir", metavar="DIR_OR_REPO", help="dataset folder or Hub dataset repo id")
    p.add_argument("--config", default=None,
                   help="finetune_runs or inference_runs (default: both)")
    p.add_argument("--split", default=None, help="platform split (default: all)")
    p.add_argument("--run", default=None, metavar="RUN_ID", help="one run (default: all)")
    add_format(p)
    p.set_defaults(func=cmd_compare)


def _register_fit(sub: argparse._SubParsersAction) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "fit", help="fit the energy/power scaling law", formatter_class=fmt,
        description="Fit a log-linear law with platform intercepts and a physics-informed law "
        "(energy per token from weight streaming, FLOPs and devices) on a runs table, from "
        "pre-run settings only, with group-wise conformal 90 % intervals; with --holdout, "
        "refit without the held-out runs and report n predicted / unpredictable (with "
        "reasons), MdAPE and 90 % coverage beside two baselines. Degenerate data are refused "
        "with a one-line reason.",
        epilog="examples:\n  llm-powertrace fit llm-powertrace --target energy_per_token_j "
        "--holdout model_params=top --out fit.json\n"
        "  llm-powertrace fit llm-powertrace --holdout family=qwen --format json")
    p.add_argument("dir", metavar="DIR_OR_REPO", help="dataset folder or Hub dataset repo id")
    p.add_argument("--target", default="energy_per_token_j",
                   choices=["energy_per_token_j", "mean_power_w", "energy_j"],
                   help="what to fit (default: energy_per_token_j)")
    p.add_argument("--window", default="work", choices=["work", "whole"],
                   help="the target over each run's work window, without idle padding "
                   "(default; work_<target> columns), or over the whole trace")
    p.add_argument("--holdout", default=None, metavar="AXIS=top|family=NAME",
                   help="hold out the runs at an axis's largest value (AXIS a column or symbol: "
                   "N, B, L, G, f), or one model family, or COLUMN=VALUE (default: none)")
    p.add_argument("--config", default=None,
                   help="runs table to fit: finetune_runs or inference_runs (default: the one "
                   "the folder has; finetune_runs when it has both)")
    p.add_argument("--split", default=None, help="platform split (default: all)")
    p.add_argument("--out", type=Path, default=None, metavar="FIT.json",
                   help="write the fit as JSON for `predict` and `plot --fit` (default: none)")
    p.add_argument("--n-boot", type=int, default=1000,
                   help="bootstrap replicates for the exponent intervals (default: 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    p.add_argument("--save", action="store_true",
                   help="also keep the fit in the dataset folder (scaling/fit.json) and refresh "
                   "the card, whose scaling-law section then shows its held-out table "
                   "(default: off)")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="output format: table, json (the documented shape) or csv (the held-out "
                   "table with --holdout, else the parameters) (default: table)")
    p.set_defaults(func=cmd_fit)


def _register_predict(sub: argparse._SubParsersAction) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "predict", help="predict with a fitted law, with its 90 %% interval", formatter_class=fmt,
        epilog="examples:\n  llm-powertrace predict fit.json --set platform=h100_sxm_80gb "
        "model_params=7e9 num_gpus=1 batch_size=256\n"
        "  llm-powertrace predict fit.json --model physics --set platform=h100_sxm_80gb "
        "model_params=70B num_gpus=4 batch_size=128\n"
        "Settings are what is known before a run (columns or symbols); a value beyond the "
        "training range prints a warning with the distance in decades.")
    p.add_argument("fit", type=Path, metavar="FIT.json", help="a file written by `fit --out`")
    p.add_argument("--set", dest="settings", nargs="+", action="extend", default=[],
                   metavar="AXIS=VALUE", help="a setting (column or symbol); repeatable")
    p.add_argument("--model", choices=("loglinear", "physics"), default=None,
                   help="which law (default: the fit's best law)")
    add_format(p)
    p.set_defaults(func=cmd_predict)


def _register_plot(sub: argparse._SubParsersAction) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "plot", help="plot a run, a sweep or a fit", formatter_class=fmt,
        description="One run: per-device power and node total with events, a 10 s zoom, the "
        "ramp histogram and the spectrum. A sweep (--metric, --axis): the metric against the axis, "
        "one line per platform. A fit (--fit FIT.json): the law, its interval and the held-out "
        "points.",
        epilog="examples:\n  llm-powertrace plot llm-powertrace RUN_ID --out run.png\n"
        "  llm-powertrace plot llm-powertrace --metric energy_per_token_j --axis model_params "
        "--out sweep.png\n  llm-powertrace plot --fit fit.json --out fit.png")
    p.add_argument("dir", nargs="?", default=None, metavar="DIR_OR_REPO",
                   help="dataset folder or Hub dataset repo id (not needed with --fit)")
    p.add_argument("run_id", nargs="?", default=None, metavar="RUN_ID", help="the run to plot")
    p.add_argument("--out", type=Path, required=True, metavar="FILE.png", help="image to write")
    p.add_argument("--metric", default=None, help="sweep plot: runs-table metric (y)")
    p.add_argument("--axis", default=None, help="sweep plot: axis column (x); fit plot: the axis")
    p.add_argument("--config", default=None, help="sweep plot: runs table (default: both)")
    p.add_argument("--split", default=None, help="sweep plot: platform split (default: all)")
    p.add_argument("--fit", type=Path, default=None, metavar="FIT.json", help="plot a fit")
    p.set_defaults(func=cmd_plot)

def _usage(message: str) -> NoReturn:
    raise UsageError(message)


def cmd_metrics(args: argparse.Namespace) -> int:
    root = resolve_dataset(args.dir)
    rows = run_metrics_rows(root, config=args.config, split=args.split, run_id=args.run,
                            recompute=args.recompute)
    if args.format == "table":
        emit(rows, "table", TABLE_METRICS)
    elif args.format == "csv":
        emit(rows, "csv", list(rows[0]) if rows else ["run_id", "num_gpus"])
    else:
        emit(rows, "json")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from ..compare import compare_rows

    root = resolve_dataset(args.dir)
    runs = [r for r in iter_run_rows(root, args.config, args.split)
            if args.run is None or r["run_id"] == args.run]
    if args.run is not None and not runs:
        raise InputError(f"no run {args.run!r} in the runs tables", field="--run")
    emit(compare_rows(runs), args.format,
         ["run_id", "figure", "unit", "ours", "theirs", "diff_pct"])
    return 0


def fit_tables(data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(parameter rows, held-out rows) of a fit's JSON, for the table and CSV formats."""
    terms: list[dict[str, Any]] = []
    ll = data["loglinear"]
    for plat, v in ll["platform_intercepts"].items():
        terms.append({"law": "loglinear", "term": f"a[{plat}]", "value": v["a"]})
    for e in ll["exponents"]:
        terms.append({"law": "loglinear", "term": f"beta_{e['symbol']} ({e['axis']})",
                      "value": e["exponent"], "ci95_lo": e["ci95"][0], "ci95_hi": e["ci95"][1]})
        if "curvature" in e:
            terms.append({"law": "loglinear", "term": f"gamma_{e['symbol']} (curvature in log "
                          f"{e['axis']})", "value": e["curvature"],
                          "ci95_lo": e["curvature_ci95"][0], "ci95_hi": e["curvature_ci95"][1]})
    for name, spec in ll["factors"].items():
        for lv, v in spec["levels"].items():
            terms.append({"law": "loglinear", "term": f"{name}={lv} (vs {spec['reference']})",
                          "value": v["factor"], "ci95_lo": v["ci95"][0], "ci95_hi": v["ci95"][1]})
    terms.append({"law": "loglinear", "term": "interval_90_half_width_log",
                  "value": ll["interval_90_half_width_log"]})
    if data["physics"]:
        ph = data["physics"]
        for plat, coefs in ph["params"].items():
            for t, v in coefs.items():
                terms.append({"law": "physics", "term": f"c[{t}][{plat}]", "value": v["value"],
                              "ci95_lo": v["ci95"][0], "ci95_hi": v["ci95"][1]})
        terms.append({"law": "physics", "term": "interval_90_half_width_log",
                      "value": ph["interval_90_half_width_log"]})
    else:
        terms.append({"law": "physics", "term": f"not fitted: {data['physics_note']}"})
    held = []
    for kind in ("laws", "baselines"):
        for name, entry in data[kind].items():
            h = entry.get("holdout")
            if not h:
                continue
            held.append({"model": name if kind == "laws" else f"baseline {name}",
                         "n_heldout": h["n_heldout"], "n_predicted": h["n_predicted"],
                         "n_unpredictable": h["n_unpredictable"], "mdape_pct": h["mdape_pct"],
                         "coverage_90": h["coverage_90"]})
    return terms, held


def cmd_fit(args: argparse.Namespace) -> int:
    from .. import scaling

    root = resolve_dataset(args.dir)
    config = args.config
    if config is None:
        present = {c: list(iter_run_rows(root, c, args.split)) for c in schema.RUNS_CONFIGS}
        have = [c for c, r in present.items() if r]
        config = have[0] if len(have) == 1 else "finetune_runs"
        rows = present.get(config, [])
    else:
        rows = list(iter_run_rows(root, config, args.split))
    if not rows:
        raise InputError(f"no runs in {root} (config {config}"
                         + (f", split {args.split})" if args.split else ")"))
    res = scaling.fit(rows, args.target, holdout=args.holdout, n_boot=args.n_boot,
                      seed=args.seed, window=args.window)
    data = res.to_json()
    if args.out:
        res.save(args.out)
    if args.save:
        from ..hooks import rebuild_card

        res.save(Path(root) / scaling.DATASET_FIT_PATH)
        rebuild_card(root)
    terms, held = fit_tables(data)
    if args.format == "json":
        print(json.dumps(data, indent=2))
        return 0
    if args.format == "csv":
        emit(held or terms, "csv", list((held or terms)[0]) if held else
             ["law", "term", "value", "ci95_lo", "ci95_hi"])
        return 0
    ll = data["loglinear"]
    print(f"target {data['target']}: {ll['n_runs']} runs; best law: {data['best_law']}")
    emit(terms, "table", ["law", "term", "value", "ci95_lo", "ci95_hi"])
    # both laws share the interval's method: each note once
    for note in dict.fromkeys(ll["notes"] + (data["physics"]["notes"] if data["physics"] else [])):
        print(f"note: {note}")
    if data["holdout"]:
        ho = data["holdout"]
        print(f"\nholdout {ho['spec']}: {ho['n_train']} runs fitted, {ho['n_test']} held out")
        emit(held, "table", ["model", "n_heldout", "n_predicted", "n_unpredictable",
                             "mdape_pct", "coverage_90"])
        for kind in ("laws", "baselines"):
            for name, entry in data[kind].items():
                for u in (entry.get("holdout") or {}).get("unpredictable", []):
                    print(f"unpredictable ({name}): {u['run_id']}: {u['reason']}")
        far = [(p["run_id"], p["extrapolation_decades"]) for p in ho["points"]
               if p.get("extrapolation_decades")]
        for run_id, ext in far:
            print(f"extrapolation: {run_id}: " + ", ".join(
                f"{axis} {d:.2f} decades beyond the training range" for axis, d in ext.items()))
    if args.out:
        print(f"\nwrote {args.out}")
    if args.save:
        print(f"\nsaved with the dataset: {Path(root) / scaling.DATASET_FIT_PATH}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from .. import scaling

    settings: dict[str, Any] = {}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            _usage(f"--set {item!r} is not AXIS=VALUE")
        settings[key.strip()] = scaling.parse_value(value)
    check_settings(settings)
    res = scaling.predict(args.fit, settings, model=args.model)
    if args.format == "json":
        emit([res], "json")
        return 0
    emit([res], args.format if args.format in FORMATS else "table",
         ["target", "model", "value", "lo90", "hi90"])
    if args.format == "table":
        for w in res["warnings"]:
            print(f"warning: {w}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from .. import plots

    if args.fit is not None:
        path = plots.plot_fit(args.fit, args.out, axis=args.axis)
    else:
        if args.dir is None:
            _usage("plot needs DIR_OR_REPO (with RUN_ID, or --metric and --axis), or --fit FIT.json")
        root = resolve_dataset(args.dir)
        if args.metric or args.axis:
            if not (args.metric and args.axis):
                _usage("a sweep plot needs both --metric and --axis")
            check_columns({"--metric": args.metric, "--axis": args.axis}, args.config)
            rows = list(iter_run_rows(root, args.config, args.split))
            path = plots.plot_sweep(rows, args.metric, args.axis, args.out)
        elif args.run_id:
            from ..shards import read_run

            path = plots.plot_run(read_run(root, args.run_id), args.out)
        else:
            _usage("plot needs RUN_ID, or --metric and --axis, or --fit FIT.json")
    print(path)
    return 0
