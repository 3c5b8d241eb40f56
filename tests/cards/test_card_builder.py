"""The dataset card.

YAML the Hub accepts, loadable configs, every column and axis, figures, runnable snippets,
idempotence.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from conftest import synthetic_run
from datasets import load_dataset
from huggingface_hub import DatasetCard, DatasetCardData

from cards import builder, figures
from cards.builder import (
    REPO_PLACEHOLDER,
    CardOptions,
    fmt_value,
    refresh_card,
    render_card,
    write_card,
)
from llm_powertrace_ds import layout, metrics, schema, shards

PAPER = "LLM-PowerTrace: A Dataset of Time-Resolved GPU Power Traces for AI Compute"


def _rename_devices(run, name, **attrs):
    for dev in run.devices:
        dev.gpu_name = name
        for key, value in attrs.items():
            setattr(dev, key, value)
    return run


def build_folder(root: Path) -> Path:
    """Runs covering the platforms, workloads and run shapes a card must describe.

    Fine-tuning and inference runs on three GPU platforms, an imported-like run of a bare family
    label, a two-node run, and cpu_proxy runs of both workloads.
    """
    runs = [
        synthetic_run("ft-llama-l40s", platform="l40s", family="llama", n=120,
                      model_name="Llama-3.2-1B", model_params=1_235_814_400, model_source="zoo",
                      precision="bf16", lora_rank=8, driver_version="550.54.15"),
        synthetic_run("ft-qwen-l40s", platform="l40s", family="qwen", n=120, seed=1,
                      method="full", model_name="Qwen2.5-0.5B", model_params=494_032_768,
                      model_source="zoo", precision="bf16", driver_version="550.54.15"),
        _rename_devices(synthetic_run(
            "ft-multinode-h100", platform="h100_sxm_80gb", family="llama", n=120, seed=2,
            method="qlora", parallelism="ddp", dp_size=2, precision="bf16"),
            "NVIDIA H100 80GB HBM3", power_limit_w=700.0, default_power_limit_w=700.0),
        _rename_devices(synthetic_run(
            "import-nvidia-smi-0123456789ab", platform="a100", family="unknown", n=120, seed=3,
            devices=1, sampler="import:nvidia-smi", power_field="power_usage",
            sweep="import:nvidia-smi", model_source="import",
            quality_flags=["power_is_1s_average", "form_factor_unknown"]), "A100"),
        _rename_devices(synthetic_run(
            "inf-qwen-l40s", workload="inference", platform="l40s", family="qwen", n=120,
            seed=4, with_requests=True, serving_engine="transformers", precision="bf16",
            weight_quant="int8", num_requests=5), "NVIDIA L40S"),
        _rename_devices(synthetic_run(
            "inf-gpt2-h100", workload="inference", platform="h100_sxm_80gb", family="gpt2",
            n=120, seed=5, with_requests=True, arrival_pattern="poisson", arrival_rate_rps=2.5,
            serving_engine="vllm", batching="continuous"), "NVIDIA H100 80GB HBM3",
            power_limit_w=700.0, default_power_limit_w=700.0),
        _rename_devices(synthetic_run(
            "proxy-ft", platform="cpu_proxy", family="gpt2", devices=1, n=120, seed=6,
            sampler="cpu_proxy", power_field="cpu_proxy_model"), "cpu_proxy"),
        _rename_devices(synthetic_run(
            "proxy-inf", workload="inference", platform="cpu_proxy", family="gpt2", devices=1,
            n=120, seed=7, sampler="cpu_proxy", power_field="cpu_proxy_model",
            with_requests=True), "cpu_proxy"),
    ]
    runs[2].devices[1].node_index = 1  # the h100 run spans two nodes
    for run in runs:
        shards.publish_run(root, run, refresh_card=False)
    refresh_card(root)
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_folder(tmp_path_factory.mktemp("card") / "llm-powertrace")


@pytest.fixture(scope="module")
def card(folder) -> str:
    return (folder / "README.md").read_text(encoding="utf-8")


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    return tmp_path / "hf-cache"


def section(card: str, title: str, level: int = 2) -> str:
    """The text of a ``## title`` section (up to the next heading of the same level)."""
    marks = "#" * level
    m = re.search(rf"^{marks} {re.escape(title)}\n(.*?)(?=^{marks} |\Z)", card, re.M | re.S)
    assert m, f"no section {title!r}"
    return m.group(1)


def table_rows(text: str) -> list[list[str]]:
    """Cells of every Markdown table row in ``text`` (header and separator excluded)."""
    rows = []
    for block in re.split(r"\n(?!\|)", text):
        lines = [ln for ln in block.splitlines() if ln.startswith("|")]
        for ln in lines[2:]:
            cells = re.split(r"(?<!\\)\|", ln.strip())[1:-1]
            rows.append([c.strip() for c in cells])
    return rows


def front_matter(card: str) -> dict:
    m = re.match(r"\A---\n(.*?)\n---\n", card, re.S)
    assert m
    return yaml.safe_load(m.group(1))


# ---------------------------------------------------------------------------------------------
# YAML metadata and loading
# ---------------------------------------------------------------------------------------------

def test_yaml_is_a_valid_hub_dataset_card(folder, card):
    loaded = DatasetCard.load(folder / "README.md")
    data = loaded.data
    assert isinstance(data, DatasetCardData)
    assert data.license == "cc-by-4.0"
    assert data.pretty_name == "LLM-PowerTrace"
    assert data.task_categories == ["time-series-forecasting"]
    assert set(data.tags) >= {"timeseries", "energy", "gpu", "power", "llm"}
    assert data.size_categories == ["n<1K"]
    # the metadata round-trips through DatasetCardData unchanged
    as_dict = data.to_dict()
    assert DatasetCardData(**as_dict).to_dict() == as_dict
    meta = front_matter(card)
    assert "dataset_info" not in meta  # split sizes are not declared (they would have to be exact)
    names = [c["config_name"] for c in meta["configs"]]
    assert names == list(layout.config_globs(folder))
    assert [c["config_name"] for c in meta["configs"] if c.get("default")] == ["finetune"]
    for entry in meta["configs"]:
        assert "features" not in entry  # datasets reads them from the files' Arrow types
        for files in entry["data_files"]:
            for glob in files["path"]:
                assert glob.startswith("data/") and glob.endswith(".arrow")


def test_card_yaml_holds_the_configs_and_their_globs_and_little_else(folder, card):
    """The YAML grows with configs and splits only: no feature list (issue 34).

    11 configs and 25 splits here: 122 lines (with a feature list per config, 3,317). The
    per-config features are what ``datasets`` reads from the files' Arrow types
    (``test_every_configs_entry_loads`` checks the types it gives).
    """
    head = re.match(r"\A---\n(.*?)\n---\n", card, re.S)
    assert head
    lines = len(head.group(1).splitlines())
    globs = layout.config_globs(folder)
    n_configs, n_splits = len(globs), sum(len(s) for s in globs.values())
    assert (n_configs, n_splits) == (11, 25)
    assert lines <= 16 + 4 * n_configs + 3 * n_splits
    assert lines <= 130


def test_every_configs_entry_loads(folder, hf_cache):
    meta = front_matter((folder / "README.md").read_text(encoding="utf-8"))
    seen = 0
    for entry in meta["configs"]:
        config = entry["config_name"]
        for files in entry["data_files"]:
            split = files["split"]
            ds = load_dataset(str(folder), config, split=split)
            expected = sum(shards.read_table(p).num_rows
                           for p in layout.shard_files(folder, config, split))
            assert len(ds) == expected > 0, (config, split)
            assert ds.features == schema.features_for(config)
            seen += 1
    assert seen == sum(len(s) for s in layout.config_globs(folder).values())


def test_configs_table_counts_rows(folder, card):
    rows = {r[0]: r for r in table_rows(section(card, "Configs and splits"))}
    for config, splits in layout.config_globs(folder).items():
        key = f"`{config}`" + (" (default)" if config == "finetune" else "")
        assert key in rows, config
        for split in splits:
            n = sum(shards.read_table(p).num_rows for p in layout.shard_files(folder, config, split))
            assert f"`{split}` ({n})" in rows[key][3]


# ---------------------------------------------------------------------------------------------
# Data dictionary and sweep axes against the schema and the data
# ---------------------------------------------------------------------------------------------

def test_card_is_summaries_with_details_linked(folder, card):
    """The long reference sections live in files of their own; the card links them."""
    for rel, heading in (("card/columns.md", "## Data dictionary"),
                         ("card/metrics.md", "## Metric definitions")):
        assert f"]({rel})" in card
        assert heading in (folder / rel).read_text(encoding="utf-8")
        assert heading not in card
    assert "## Metrics" in card and "## Columns" in card
    # the card's size follows the data: the full schema would be over 100 kB
    assert len(card.encode()) < 60_000


def test_data_dictionary_lists_every_column_of_every_config(folder):
    dictionary = section((folder / "card/columns.md").read_text(encoding="utf-8"),
                         "Data dictionary")
    for config in schema.ALL_CONFIGS:
        rows = table_rows(section(dictionary, f"`{config}`", level=3))
        listed = [r[0] for r in rows]
        expected = []
        for col in schema.COLUMNS[config]:
            expected.append(f"`{col.name}`")
            inner = getattr(col.feature, "feature", None)
            if isinstance(inner, dict):  # list of structs: every field too
                expected += [f"`{col.name}[].{name}`" for name in inner]
        assert listed == expected, config
        by_name = {r[0]: r for r in rows}
        for col in schema.COLUMNS[config]:
            _, type_, unit, description = by_name[f"`{col.name}`"]
            assert description == col.description.replace("|", "\\|")
            assert unit == (col.unit or "—")
            assert type_
        assert all(r[3] for r in rows), f"a field of {config} has no description"
    # family configs point at their workload's columns
    assert "`finetune-llama`" in section(dictionary, "`finetune`", level=3)


def _axis_counts(folder):
    out = Counter()
    for run in shards.list_runs(folder):
        for col in builder._axis_columns(run["workload"]):
            out[(run["workload"], col.name, fmt_value(run.get(col.name)), run["platform"])] += 1
    return out


def test_every_sweep_axis_with_values_and_run_counts_per_platform(folder, card):
    axes = section(card, "Sweep axes")
    expected = _axis_counts(folder)
    found = Counter()
    for workload, title in (("finetune", "Fine-tuning axes"), ("inference", "Inference axes")):
        text = section(axes, title, level=3)
        header = next(ln for ln in text.splitlines() if ln.startswith("| axis"))
        platforms = [c.strip().strip("`") for c in header.strip("|").split("|")][3:-1]
        names = set()
        for row in table_rows(text):
            axis, value = row[0].strip("`"), row[1].strip("`")
            names.add(axis)
            counts = [int(c) for c in row[3:-1]]
            assert sum(counts) == int(row[-1])
            for platform, n in zip(platforms, counts, strict=True):
                if n:
                    found[(workload, axis, value, platform)] += n
        assert names == {c.name for c in builder._axis_columns(workload)}
        schema_axes = schema.FINETUNE_AXES if workload == "finetune" else schema.INFERENCE_AXES
        assert {c.name for c in schema_axes} <= names
    assert found == expected
    # fixed vocabularies carry their meaning; free text is listed as found
    assert re.search(r"\| `method` \| `qlora` \| QLoRA", axes)
    assert re.search(r"\| `arrival_pattern` \| `poisson` \| open loop", axes)
    assert re.search(r"\| `serving_engine` \| `vllm` \|  \|", axes)


def test_platforms_families_quality(folder, card):
    platforms = {r[0]: r for r in table_rows(section(card, "Platforms"))}
    assert set(platforms) == {f"`{p}`" for p in ("a100", "cpu_proxy", "h100_sxm_80gb", "l40s")}
    assert platforms["`a100`"][-1] == "unknown"  # a bare family label: form factor unknown
    assert platforms["`l40s`"][-1] == "known"
    assert platforms["`cpu_proxy`"][-1].startswith("n/a")
    assert platforms["`h100_sxm_80gb`"][1] == "NVIDIA H100 80GB HBM3"
    assert platforms["`h100_sxm_80gb`"][4] == "700"
    assert platforms["`l40s`"][5] == "550.54.15"
    assert platforms["`a100`"][7] == "`power_usage`"
    families = {r[0]: r for r in table_rows(section(card, "Model families"))}
    assert "`Llama-3.2-1B` (1.24 B)" in families["`llama`"][2]
    assert "`Qwen2.5-0.5B` (494 M)" in families["`qwen`"][2]
    assert "`unknown`" in families
    quality = {r[0]: r for r in table_rows(section(card, "Quality"))}
    runs = shards.list_runs(folder)
    flags = Counter(f for r in runs for f in r["quality_flags"])
    for flag, n in flags.items():
        assert quality[f"`{flag}`"][3] == str(n)
    assert "No published run carries an error-level flag." in card


def test_measurement_method_and_cpu_proxy_warning(card):
    intro = card.split("## Configs and splits")[0]
    assert "NOT GPU power measurements" in intro  # prominent: before any other section
    method = section(card, "Measurement method")
    assert "NOT GPU power measurements" in method
    assert "`power.draw` is a 1 s average on newer GPUs" in method
    assert "1 run uses `power_usage`" in method
    assert "Multi-node runs (1)" in method
    assert "Nyquist" in method
    samplers = {r[0]: r for r in table_rows(method)}
    assert samplers["`nvml`"][4] == "100"
    # issue 11: per platform, which power field was read and what it means
    per_platform = {(r[0], r[1]): r for r in table_rows(method) if len(r) == 4}
    assert per_platform[("`a100`", "`power_usage`")][2].startswith("nvmlDeviceGetPowerUsage")
    assert ("`h100_sxm_80gb`", "`instant`") in per_platform
    assert ("`cpu_proxy`", "`cpu_proxy_model`") in per_platform
    assert "only about 25 % of the runtime is sampled" in method  # Yang et al., SC'24
    assert "stale_power" in method and "energy_mismatch" in method


def test_no_proxy_warning_without_proxy_rows(tmp_path):
    root = tmp_path / "gpu-only"
    shards.publish_run(root, synthetic_run("only-gpu", n=40), refresh_card=False)
    text = render_card(root, CardOptions(figures=False))
    assert "NOT GPU" not in text
    assert "Multi-node" not in text


def test_metric_definitions_come_from_metrics_docstrings(folder):
    text = section((folder / "card/metrics.md").read_text(encoding="utf-8"),
                   "Metric definitions")
    formulas = metrics.metric_formulas()
    rows = {r[0].split(" ")[0]: r for r in table_rows(text)}
    trace_cols = {c.name for wl in schema.WORKLOADS for c in schema.COLUMNS[wl]}
    runs_metric_cols = {c.name for cfg in schema.RUNS_CONFIGS for c in schema.COLUMNS[cfg]
                        if c.name not in trace_cols and c.name != "metric_notes"}
    assert {k.strip("`") for k in rows} == runs_metric_cols
    assert set(formulas) == runs_metric_cols  # every runs metric has its docstring formula
    for name, formula in formulas.items():
        if name in runs_metric_cols:
            shown = rows[f"`{name}`"][2].replace("\\|", "|")
            assert shown == re.sub(r"``([^`]+)``", r"`\1`", formula)


# ---------------------------------------------------------------------------------------------
# How to use, figures, licence, citation, changelog
# ---------------------------------------------------------------------------------------------

def test_how_to_use_snippets_run(folder, card, hf_cache, capsys):
    snippets = re.findall(r"```python\n(.*?)```", section(card, "How to use"), re.S)
    configs = set(layout.config_globs(folder))
    loaded = set(re.findall(r'load_dataset\("[^"]+", "([^"]+)"', "".join(snippets)))
    assert loaded == configs  # a snippet for every config
    assert any("streaming=True" in s for s in snippets)
    for code in snippets:
        assert REPO_PLACEHOLDER in code
        exec(compile(code.replace(REPO_PLACEHOLDER, str(folder)), "<card snippet>", "exec"), {})
    assert "requests" in capsys.readouterr().out


def test_figures_are_pngs_in_the_folder_linked_relatively(folder, card):
    pytest.importorskip("matplotlib")
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", card)
    pairs = {(r["workload"], r["platform"]) for r in shards.list_runs(folder)}
    assert len(links) == len(pairs)
    for link in links:
        assert not link.startswith(("/", "http")) and not link.startswith("data/")
        path = folder / link
        assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        assert path.stat().st_size > 5000
    assert not list((folder / "data").rglob("*.png"))


def test_licence_citation_changelog(card):
    meta = front_matter(card)
    assert meta["license"] == "cc-by-4.0"
    citation = section(card, "Citation")
    assert f"*{PAPER}*" in citation
    paper = citation[citation.index("@misc{llm_powertrace_paper"):]
    assert not re.search(r"^\s*author\s*=", paper, re.M)  # no invented authors
    changelog = section(card, "Changelog")
    assert f"`{schema.SCHEMA_VERSION}`" in changelog
    for version, _ in schema.SCHEMA_CHANGELOG:
        assert f"`{version}`" in changelog
    assert re.search(r"\d{4}-\d{2}-\d{2}T\d", card) is None  # no timestamps in the card


def test_card_is_idempotent_byte_for_byte(folder):
    def snapshot():
        files = [folder / "README.md", *sorted((folder / "figures").glob("*.png"))]
        return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in files if p.exists()}

    before = snapshot()
    refresh_card(folder)
    write_card(folder)
    assert snapshot() == before  # same bytes, and nothing was even rewritten


def test_card_cli_command(folder, capsys):
    from llm_powertrace_ds.cli import main

    before = (folder / "README.md").read_bytes()
    assert main(["card", str(folder)]) == 0
    assert (folder / "README.md").read_bytes() == before


def _card_with_figure(tmp_path, monkeypatch):
    """A one-run folder whose card was built with figures on: (folder, its trace figure)."""
    pytest.importorskip("matplotlib")
    monkeypatch.setenv(figures.FIGURES_ENV, "1")  # conftest switches figures off
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("r1", n=40))
    refresh_card(root)
    return root, root / "figures" / "trace-finetune-l40s.png"


def test_stale_figures_are_removed_and_changed_runs_redrawn(tmp_path, monkeypatch):
    root, fig = _card_with_figure(tmp_path, monkeypatch)
    first = fig.read_bytes()
    stale = root / "figures" / "trace-finetune-gone.png"
    stale.write_bytes(first)
    shards.publish_run(root, synthetic_run("r1", n=40, seed=9))
    refresh_card(root)
    assert not stale.exists()
    assert fig.read_bytes() != first  # the run changed, so did its figure
    assert figures.png_text(fig)[figures.KEY_FIELD]


def test_figures_switched_off_keeps_current_ones(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv(figures.FIGURES_ENV, "1")  # conftest switches figures off
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("r1", n=40))
    refresh_card(root)
    fig = root / "figures" / "trace-finetune-l40s.png"
    assert fig.exists()
    monkeypatch.setenv(figures.FIGURES_ENV, "0")
    shards.publish_run(root, synthetic_run("r2", n=40, seed=3, platform="a10g"))
    refresh_card(root)
    text = (root / "README.md").read_text(encoding="utf-8")
    assert "(figures/trace-finetune-l40s.png)" in text  # still current: kept and linked
    assert "trace-finetune-a10g" not in text and not (root / "figures" /
                                                      "trace-finetune-a10g.png").exists()
    write_card(root, CardOptions(figures=True))  # an explicit option wins over the switch
    assert (root / "figures" / "trace-finetune-a10g.png").exists()


def test_without_matplotlib_no_figures_and_base_import(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "matplotlib_available", lambda: False)
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("r1", n=40))
    refresh_card(root)
    text = (root / "README.md").read_text(encoding="utf-8")
    assert "![" not in text and not (root / "figures").exists()
    assert "pip install 'llm-powertrace[plot]'" in text
    code = "import sys, cards.builder; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_empty_folder_and_parquet_globs(tmp_path, folder):
    empty = tmp_path / "empty"
    empty.mkdir()
    text = write_card(empty).read_text(encoding="utf-8")
    assert front_matter(text)["configs"] == []
    assert "No run has been published" in text
    DatasetCard(text)  # still a valid card
    parquet = render_card(folder, CardOptions(file_format="parquet", repo_id="org/name",
                                              figures=False))
    globs = [g for c in front_matter(parquet)["configs"] for f in c["data_files"]
             for g in f["path"]]
    assert globs and all(g.endswith(".parquet") for g in globs)
    assert REPO_PLACEHOLDER not in parquet and 'load_dataset("org/name", "finetune"' in parquet
    with pytest.raises(ValueError, match="file_format"):
        CardOptions(file_format="csv")  # type: ignore[arg-type]


def test_card_states_the_largest_trace_row(tmp_path):
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("short", n=40))
    shards.publish_run(root, synthetic_run("long", n=400, seed=2))
    refresh_card(root)
    text = (root / "README.md").read_text(encoding="utf-8")
    note = next(line for line in text.splitlines() if line.startswith("Long rows:"))
    assert "`long`" in note and "`short`" not in note
    assert "about 400 ticks per device" in note


def test_card_figure_reads_a_parquet_trace_shard(tmp_path, monkeypatch):
    # the card reads trace shards through the library's reader, so .parquet shards (which
    # layout.READ_SUFFIXES accepts) draw the same figure as .arrow ones
    import pyarrow.parquet as pq

    root, fig = _card_with_figure(tmp_path, monkeypatch)
    from_arrow = fig.read_bytes()
    arrow_files = layout.shard_files(root, "finetune", "l40s")
    assert arrow_files and all(p.suffix == ".arrow" for p in arrow_files)
    for path in arrow_files:
        pq.write_table(shards.read_table(path), path.with_suffix(".parquet"))
        path.unlink()
    assert all(p.suffix == ".parquet" for p in layout.shard_files(root, "finetune", "l40s"))
    fig.unlink()
    refresh_card(root)
    assert fig.read_bytes() == from_arrow
    assert "(figures/trace-finetune-l40s.png)" in (root / "README.md").read_text(encoding="utf-8")
