"""Card sections about analysis: seed-compatible metrics, the scaling law, credited sources."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llm_powertrace_ds import metrics, scaling
from llm_powertrace_ds.privacy import markdown_inline
from llm_powertrace_ds.sources.provenance import SOURCES_PATH, public_entry, read_sources

SCALING_FIT_PATH = scaling.DATASET_FIT_PATH

SOURCES = {
    "import:mlenergy-v2": (
        "**ML.ENERGY leaderboard v2** run summaries (vLLM inference; github.com/ml-energy/"
        "benchmark, `data/llm_text_generation/`), Apache-2.0, credit: *The ML.ENERGY "
        "Initiative*. Imported as `inference_runs` rows without traces (flag `summary_only`): "
        "`energy_per_token_j` = Energy/req ÷ Avg Output Tokens, `mean_power_w` = J/token × token "
        "throughput, `num_gpus` = TP × PP, `batch_size` from the file name."),
    "import:powertrace-csv": (
        "**The LLM-PowerTrace authors' own traces** (their canonical long CSV and metadata)."),
}


SAMPLER_RECIPES = {"import:mlenergy-v2": "mlenergy-v2-chat"}
"""Runs imported without ``get`` (``import``, the shipped sample) name their source by their
sampler: the recipe whose licence and citation that source's runs carry."""


def cited_sources(runs: list[dict[str, Any]], root: str | Path | None = None
                  ) -> list[dict[str, Any]]:
    """The third-party sources a folder's runs come from: name, licence, citation, run count.

    From the runs' own metadata: a run ``get`` recorded (``sources.json``) cites its recorded
    source; any other imported run cites the source its ``sampler`` names (the recipe's licence
    and citation); runs of the seed catalog (``import:powertrace-csv``) cite the seed paper.
    """
    from llm_powertrace_ds.sources.recipes import builtin_recipes

    out: list[dict[str, Any]] = []
    recorded = [public_entry(e) for e in read_sources(root)] if root is not None else []
    by_run = {rid: e for e in recorded for rid in e.get("runs") or []}
    for entry in recorded:
        n = sum(1 for r in runs if r.get("run_id") in set(entry.get("runs") or []))
        out.append({"name": entry.get("name"), "licence": entry.get("licence"),
                    "citation": entry.get("citation"), "runs": n})
    recipes = builtin_recipes()
    for sampler in sorted({str(r.get("sampler")) for r in runs
                           if r.get("run_id") not in by_run}):
        n = sum(1 for r in runs if r.get("sampler") == sampler and r.get("run_id") not in by_run)
        if sampler in SAMPLER_RECIPES:
            recipe = recipes[SAMPLER_RECIPES[sampler]]
            out.append({"name": recipe.name, "licence": recipe.licence,
                        "citation": recipe.citation, "runs": n})
        elif sampler == "import:powertrace-csv":
            out.append({"name": "powertrace-catalog", "licence": "as stated by its authors",
                        "citation": "the seed paper (llm_powertrace_paper below)", "runs": n})
    return out


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def seed_note() -> list[str]:
    """The list of seed-compatible metrics (the seed authors' definitions and names)."""
    names = ", ".join(f"`{n}`" for n in metrics.SEED_RAMP_NAMES + metrics.SAMPLING_NAMES)
    return ["**Seed-compatible metrics.** These columns follow the seed authors' own "
            "definitions number for number (same names as their catalog), so the two catalogs "
            f"compare directly: {names}; and the quality flags `zero_power_samples`, "
            "`duplicate_samples`, `gpu_count_mismatch`. Our other metrics use our own definitions "
            "under their own names (e.g. the ramps `ramp_abs_p95_1s_w_per_s` on the gap-aware "
            "0.1 s node total).", ""]


def sources_section(runs: list[dict[str, Any]], root: str | Path | None = None) -> list[str]:
    """Credit the imported sources present in the folder, and those ``get`` recorded.

    A recorded source (``sources.json``, written by ``llm-powertrace get``) is listed with its
    licence, whether it may be redistributed, its citation, the publisher's URL and the files'
    SHA-256.
    """
    present = sorted({str(r.get("sampler")) for r in runs} & set(SOURCES))
    recorded = read_sources(root) if root is not None else []
    if not present and not recorded:
        return []
    lines = ["## Sources", ""]
    if present:
        lines += ["Runs imported from data measured by others:", ""]
        for key in present:
            n = sum(1 for r in runs if r.get("sampler") == key)
            lines.append(f"- `{key}` ({n} run(s)): {SOURCES[key]}")
        lines.append("")
    for raw in recorded:
        entry = public_entry(raw)  # a record written by hand or an older version: gated too
        files = [f for f in entry.get("files") or [] if isinstance(f, dict)]
        pinned = all(f.get("pinned") for f in files) and bool(files)
        md = markdown_inline
        url = entry.get("source_url")
        lines += [f"### {md(entry.get('title') or entry.get('name'))}", "",
                  f"- Source: `{md(entry.get('name'))}`, "
                  + (f"<{url}>" if url else "publisher's page not recorded (not a public URL)"),
                  f"- Licence: `{md(entry.get('licence'))}`"
                  + ("" if entry.get("redistributable") is True else
                     " — **no redistribution licence**: do not republish these runs"),
                  f"- Citation: {md(entry.get('citation') or 'not recorded')}",
                  f"- Runs: {len(entry.get('runs') or [])}; retrieved "
                  f"{md(entry.get('retrieved_utc'))}"
                  + (" from a local copy" if entry.get("from_local_copy") else "")
                  + f"; {len(files)} file(s), "
                  + ("each checked against the recipe's size and SHA-256" if pinned else
                     "SHA-256 recorded, **not pinned** by the recipe")
                  + f" (`{SOURCES_PATH}` lists them)", ""]
    return lines


def scaling_section(root: str | Path) -> list[str]:
    """The scaling law, with the held-out table of the last fit saved with the dataset."""
    lines = ["## Scaling law", "",
             "`llm-powertrace fit DIR --target energy_per_token_j --holdout model_params=top` "
             "fits a log-linear law (platform intercepts, exponents of N — active parameters for "
             "mixture-of-experts —, batch, sequence length, GPUs, with a curvature term in the "
             "batch) and a physics-informed law (energy per token = weights streamed per token + "
             "FLOPs per token + a per-GPU term) from settings known before a run only. Its 90 % "
             "intervals are group-wise conformal (models left out in turn), so they include the "
             "error a new model meets. `fit --save` keeps the fit here and this section shows "
             "its held-out table.", ""]
    path = Path(root) / SCALING_FIT_PATH
    if not path.is_file():
        return lines + ["No fit is saved with this dataset yet.", ""]
    try:
        data = scaling.load_fit(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, scaling.InputError) as exc:
        return lines + [f"The saved fit `{SCALING_FIT_PATH}` cannot be read ({exc}).", ""]
    lines += [f"Last saved fit: target `{data['target']}`, {data['n_runs']} runs, best law "
              f"`{data['best_law']}`.", ""]
    ho = data.get("holdout")
    if not ho:
        return lines + ["It was fitted without a holdout (`fit --holdout ... --save` adds the "
                        "held-out table).", ""]
    lines += [f"Held out `{ho['spec']}`: {ho['n_train']} runs fitted, {ho['n_test']} held out.",
              "", "| model | held out | predicted | unpredictable | MdAPE (%) | 90 % coverage |",
              "| --- | --- | --- | --- | --- | --- |"]
    for kind in ("laws", "baselines"):
        for name, entry in data[kind].items():
            h = entry.get("holdout")
            if not h:
                continue
            label = name if kind == "laws" else f"baseline `{name}`"
            lines.append(f"| {label} | {h['n_heldout']} | {h['n_predicted']} | "
                         f"{h['n_unpredictable']} | {_fmt(h['mdape_pct'])} | "
                         f"{_fmt(h['coverage_90'], 2)} |")
    reasons = [f"- `{u['run_id']}` ({name}): {u['reason']}" for kind in ("laws", "baselines")
               for name, entry in data[kind].items()
               for u in (entry.get("holdout") or {}).get("unpredictable", [])]
    if reasons:
        lines += ["", "Unpredictable held-out runs:", "", *reasons]
    return lines + [""]
