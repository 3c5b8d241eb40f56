"""ML.ENERGY leaderboard v2 run summaries: runs rows without traces, loadable, checked input.

The rows ``summary_runs`` makes (run id, model and GPU names, flags, metrics keys) and each
one-line error it raises (reason, file, field) are checked exactly on small task folders written
in ML.ENERGY's layout; one test reads the real development copy of the data when it is present
and skips otherwise.
"""

from __future__ import annotations

import json
import locale
import math
import sys
from pathlib import Path
from typing import Any

import pyarrow.ipc
import pytest
from datasets import load_dataset

from llm_powertrace_ds import layout, schema
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_summaries
from llm_powertrace_ds.importers.mlenergy_v2 import (
    SUMMARY_NOTE,
    load_models,
    publish_summaries,
    summary_runs,
)

MODELS = {"meta-llama/Meta-Llama-3.1-8B-Instruct": 8,
          "mistralai/Mixtral-8x7B-Instruct-v0.1": 47}


def summary(model: str, gpu: str, tp: int, pp: int, energy: float, tput: float,
            out_tokens: float = 400.0) -> dict:
    return {"Model": model, "GPU": gpu, "TP": tp, "PP": pp, "Energy/req (J)": energy,
            "Avg TPOT (s)": 0.05, "Token tput (tok/s)": tput, "Avg Output Tokens": out_tokens,
            "Avg BS (reqs)": 60.0, "Max BS (reqs)": 64}


def task_folder(root: Path, runs: list[tuple[str, str, int, int, int, float, float]],
                models: dict[str, float] | None = None) -> Path:
    """A task folder in ML.ENERGY's layout: models.json and <GPU>/<org>/<model>/bs+tp+pp.json."""
    task = root / "chat"
    task.mkdir(parents=True)
    (task / "models.json").write_text(json.dumps(
        {m: {"url": f"https://huggingface.co/{m}", "nickname": m, "params": p}
         for m, p in (models or MODELS).items()}), encoding="utf-8")
    for gpu, model, b, tp, pp, energy, tput in runs:
        folder = task / gpu.removeprefix("NVIDIA ") / model
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"bs{b}+tp{tp}+pp{pp}.json").write_text(
            json.dumps(summary(model, gpu, tp, pp, energy, tput)), encoding="utf-8")
    return task


RUNS = [("NVIDIA H100 80GB HBM3", "meta-llama/Meta-Llama-3.1-8B-Instruct", 64, 1, 1, 60.0, 1800.0),
        ("NVIDIA A100-SXM4-40GB", "mistralai/Mixtral-8x7B-Instruct-v0.1", 128, 2, 2, 200.0, 1200.0)]


def test_import_publishes_runs_rows_without_traces(tmp_path):
    task = task_folder(tmp_path / "src", RUNS)
    out = tmp_path / "ds"
    assert main(["import", "mlenergy-v2", str(task), "--out", str(out)]) == 0
    assert not (out / "data" / "inference").exists()  # trace configs untouched
    ds = load_dataset(str(out), "inference_runs", split="a100_sxm4_40gb",
                      cache_dir=str(tmp_path / "cache"))
    assert ds.features == schema.FEATURES["inference_runs"]
    row = ds[0]
    assert row["num_gpus"] == 4 and row["tp_size"] == 2 and row["pp_size"] == 2
    assert row["batch_size"] == 128 and row["task"] == "chat"
    assert row["platform"] == "a100_sxm4_40gb" and row["serving_engine"] == "vllm"
    assert row["model_params"] == 47_000_000_000
    assert row["model_params_active"] == 12_900_000_000  # from the model map, not models.json
    assert "models.json" in row["model_facts_source"] and "Mistral AI" in row["model_facts_source"]
    assert row["energy_per_token_j"] == pytest.approx(200.0 / 400.0)
    assert row["mean_power_w"] == pytest.approx(200.0 / 400.0 * 1200.0)
    assert row["energy_j"] is None and row["peak_power_w"] is None  # not in a summary
    assert "summary_only" in row["quality_flags"]
    assert row["sampler"] == "import:mlenergy-v2"
    h100 = load_dataset(str(out), "inference_runs", split="h100_sxm_80gb",
                        cache_dir=str(tmp_path / "cache"))[0]
    assert h100["model_params_active"] is None and h100["model_family"] == "llama"
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "The ML.ENERGY Initiative" in card and "Apache-2.0" in card
    # importing again replaces, never duplicates
    assert main(["import", "mlenergy-v2", str(task), "--out", str(out)]) == 0
    assert len(list((out / "data" / "inference_runs").rglob("*.arrow"))) == 2


@pytest.mark.parametrize("breakage,field", [
    (lambda d: d.update({"Energy/req (J)": -1}), "Energy/req (J)"),
    (lambda d: d.update({"Avg Output Tokens": "n/a"}), "Avg Output Tokens"),
    (lambda d: d.update({"TP": 8}), "TP"),
    (lambda d: d.update({"Model": "org/unknown"}), "Model"),
    (lambda d: d.pop("Token tput (tok/s)"), "Token tput (tok/s)"),
])
def test_bad_summary_is_one_line_and_writes_nothing(tmp_path, breakage, field):
    task = task_folder(tmp_path / "src", RUNS)
    bad = next(task.rglob("bs64+tp1+pp1.json"))
    data = json.loads(bad.read_text())
    breakage(data)
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        import_summaries("mlenergy-v2", task)
    assert field in str(err.value) and bad.name in str(err.value)
    assert "\n" not in str(err.value)
    out = tmp_path / "ds"
    assert main(["import", "mlenergy-v2", str(task), "--out", str(out)]) == 1
    assert not list(out.rglob("*.arrow"))


def test_bad_file_name_and_missing_models_json(tmp_path):
    task = task_folder(tmp_path / "src", RUNS)
    next(task.rglob("bs64+tp1+pp1.json")).rename(task / "H100 80GB HBM3" / "x.json")
    with pytest.raises(InputError, match="file name"):
        import_summaries("mlenergy-v2", task)
    (task / "models.json").unlink()
    with pytest.raises(InputError, match="models.json"):
        import_summaries("mlenergy-v2", task)


@pytest.mark.external
def test_real_mlenergy_chat_folder(external_dir, tmp_path):
    task = external_dir / "mlenergy-v2" / "chat"
    out = tmp_path / "ds"
    assert main(["import", "mlenergy-v2", str(task), "--out", str(out)]) == 0
    rows = [r for split in ("a100_sxm4_40gb", "h100_sxm_80gb")
            for r in load_dataset(str(out), "inference_runs", split=split,
                                  cache_dir=str(tmp_path / "cache"))]
    assert len(rows) == 191
    big = [r for r in rows if r["model_params"] == 405_000_000_000]
    assert len(big) == 6 and {r["num_gpus"] for r in big} == {16}
    assert all(r["energy_per_token_j"] > 0 and r["mean_power_w"] > 0 for r in rows)
    moe = {r["model_name"]: r["model_params_active"] for r in rows if "Mixtral" in r["model_name"]}
    assert moe == {"Mixtral-8x7B-Instruct-v0.1": 12_900_000_000,
                   "Mixtral-8x22B-Instruct-v0.1": 39_000_000_000}


LLAMA = "meta-llama/Meta-Llama-3.1-8B-Instruct"


MIXTRAL = "mistralai/Mixtral-8x7B-Instruct-v0.1"


H100 = "NVIDIA H100 80GB HBM3"


PARAMS_SOURCE = "model_params: ML.ENERGY models.json (params, billions)"


MIXTRAL_SOURCE = ("Mistral AI, 'Mixtral of experts' (2023-12-11): 46.7B total, "
                  "12.9B used per token")


NOT_POSITIVE = "value {!r} is not a positive number"


def run_summary(model: str = LLAMA, gpu: str = H100, tp: int = 1, pp: int = 1, **over: Any) -> dict:
    """One run file's content (the keys ML.ENERGY writes), with overrides."""
    data = {"Model": model, "GPU": gpu, "TP": tp, "PP": pp, "Energy/req (J)": 100.0,
            "Avg TPOT (s)": 0.05, "Token tput (tok/s)": 1200.0, "Avg Output Tokens": 400.0,
            "Avg BS (reqs)": 60.0, "Max BS (reqs)": 64}
    data.update(over)
    return data


def task_tree(root: Path, files: dict[str, Any], models: Any = None, *,
                name: str = "chat") -> Path:
    """``<root>/<name>/models.json`` and each ``{relative path: content}`` run file."""
    task = root / name
    task.mkdir(parents=True)
    if models is None:
        models = {LLAMA: {"nickname": "Llama 3.1 8B", "params": 8},
                  MIXTRAL: {"nickname": "Mixtral 8x7B", "params": 47}}
    (task / "models.json").write_text(json.dumps(models, ensure_ascii=False), encoding="utf-8")
    for rel, content in files.items():
        path = task / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        path.write_text(text, encoding="utf-8")
    return task


LLAMA_FILE = "H100 80GB HBM3/meta-llama/Meta-Llama-3.1-8B-Instruct/bs64+tp1+pp1.json"


def one_error(task: Path) -> InputError:
    with pytest.raises(InputError) as exc:
        summary_runs(task)
    assert "\n" not in str(exc.value)
    return exc.value


def test_llama_row_is_exact(tmp_path):
    task = task_tree(tmp_path, {LLAMA_FILE: run_summary()})
    ((run, metrics),) = summary_runs(task)
    assert run.devices == []
    assert run.meta == {
        "run_id": "mlenergy-v2.chat.h100_sxm_80gb.Meta-Llama-3.1-8B-Instruct.bs64-tp1-pp1",
        "sweep": "import:mlenergy-v2", "sampler": "import:mlenergy-v2", "workload": "inference",
        "platform": "h100_sxm_80gb", "num_gpus": 1, "tp_size": 1, "pp_size": 1,
        "batch_size": 64, "task": "chat", "serving_engine": "vllm", "batching": "continuous",
        "model_name": "Meta-Llama-3.1-8B-Instruct", "model_label": LLAMA,
        "model_source": "import", "model_family": "llama", "model_params": 8_000_000_000,
        "tokens_per_s": 1200.0, "schema_version": schema.SCHEMA_VERSION,
        "model_facts_source": PARAMS_SOURCE, "gpu_name": H100,
        "quality_flags": ["precision_unknown", "summary_only"],
        # every other field of the file, named: nothing the publisher says is dropped
        "tpot_mean_s": 0.05, "energy_per_request_j": 100.0, "output_tokens_mean": 400.0,
        "batch_size_mean": 60.0, "batch_size_observed_max": 64,
        "source_metadata": json.dumps({"models.json": {"nickname": "Llama 3.1 8B", "params": 8},
                                       "run": run_summary()}, sort_keys=True, separators=(",", ":")),
    }
    # 100 J per request / 400 tokens = 0.25 J per token; x 1200 tok/s = 300 W
    assert metrics == {"energy_per_token_j": 0.25, "mean_power_w": 300.0,
                       "metric_notes": [SUMMARY_NOTE]}
    assert SUMMARY_NOTE == "summary_only: a published summary without a power trace"


def test_mixture_of_experts_row_has_both_sources_and_bare_gpu_flag(tmp_path):
    rel = "A100/mistralai/Mixtral-8x7B-Instruct-v0.1/bs128+tp2+pp2.json"
    task = task_tree(tmp_path, {rel: run_summary(MIXTRAL, "A100", 2, 2, **{
        "Energy/req (J)": 200.0, "Avg Output Tokens": 400.0, "Token tput (tok/s)": 1200.0})})
    ((run, metrics),) = summary_runs(task)
    m = run.meta
    assert m["run_id"] == "mlenergy-v2.chat.a100.Mixtral-8x7B-Instruct-v0.1.bs128-tp2-pp2"
    assert (m["num_gpus"], m["tp_size"], m["pp_size"], m["batch_size"]) == (4, 2, 2, 128)
    assert m["platform"] == "a100" and m["gpu_name"] == "A100"
    assert m["model_params"] == 47_000_000_000 and m["model_params_active"] == 12_900_000_000
    assert m["model_facts_source"] == (f"{PARAMS_SOURCE}; model_params_active: {MIXTRAL_SOURCE}")
    assert m["model_family"] == "mistral" and m["model_name"] == "Mixtral-8x7B-Instruct-v0.1"
    # the GPU name's own flag comes with the importer's two
    assert run.flags == ["form_factor_unknown", "precision_unknown", "summary_only"]
    assert metrics == {"energy_per_token_j": 0.5, "mean_power_w": 600.0,
                       "metric_notes": [SUMMARY_NOTE]}


@pytest.mark.parametrize("model,name", [
    ("tinymodel", "tinymodel"),           # no organisation
    ("org/deep-model", "deep-model"),     # the part after the organisation
])
def test_model_name_is_the_last_part_of_the_id(tmp_path, model, name):
    task = task_tree(tmp_path, {"H100 80GB HBM3/org/m/bs8+tp1+pp1.json": run_summary(model)},
                       {model: {"params": 1}})
    ((run, _),) = summary_runs(task)
    assert run.meta["model_name"] == name and run.meta["model_label"] == model
    assert run.run_id == "mlenergy-v2.chat.h100_sxm_80gb.m.bs8-tp1-pp1"


@pytest.mark.parametrize("model_dir,slug", [
    ("Meta-Llama-3.1-8B-Instruct", "Meta-Llama-3.1-8B-Instruct"),  # upper and lower kept
    ("Meta Llama 3", "Meta-Llama-3"),        # a space becomes one "-"
    ("a  (b) c", "a-b-c"),                   # a run of bad characters becomes one "-"
    ("(Foo) bar.", "Foo-bar"),               # leading "-" and trailing "." are stripped
    ("Xwin-LM_7B", "Xwin-LM_7B"),            # only "-" and "." are stripped, not letters
])
def test_run_id_slug_of_the_model_folder(tmp_path, model_dir, slug):
    task = task_tree(tmp_path, {f"H100 80GB HBM3/org/{model_dir}/bs16+tp2+pp4.json":
                                  run_summary(tp=2, pp=4)})
    ((run, _),) = summary_runs(task)
    assert run.run_id == f"mlenergy-v2.chat.h100_sxm_80gb.{slug}.bs16-tp2-pp4"
    assert (run.meta["num_gpus"], run.meta["tp_size"], run.meta["pp_size"]) == (8, 2, 4)
    assert run.meta["batch_size"] == 16


def test_task_name_and_order_of_runs(tmp_path):
    task = task_tree(tmp_path, {
        "H100 80GB HBM3/o/b/bs2+tp1+pp1.json": run_summary(),
        "A100-SXM4-40GB/o/a/bs1+tp1+pp1.json": run_summary(gpu="NVIDIA A100-SXM4-40GB"),
    }, name="code")
    runs = summary_runs(task)
    assert [r.run_id for r, _ in runs] == ["mlenergy-v2.code.a100_sxm4_40gb.a.bs1-tp1-pp1",
                                           "mlenergy-v2.code.h100_sxm_80gb.b.bs2-tp1-pp1"]
    assert [r.meta["task"] for r, _ in runs] == ["code", "code"]
    assert [r.meta["gpu_name"] for r, _ in runs] == ["NVIDIA A100-SXM4-40GB", H100]


def test_small_positive_values_are_accepted(tmp_path):
    # the check is "> 0", not ">= 1" and not ">= 0"
    task = task_tree(tmp_path, {LLAMA_FILE: run_summary(**{
        "Energy/req (J)": 0.25, "Avg Output Tokens": 0.5, "Token tput (tok/s)": 0.5})},
        {LLAMA: {"params": 0.5}})
    ((run, metrics),) = summary_runs(task)
    assert run.meta["model_params"] == 500_000_000 and run.meta["tokens_per_s"] == 0.5
    assert metrics["energy_per_token_j"] == 0.5 and metrics["mean_power_w"] == 0.25


def test_fractional_params_round_to_whole_parameters(tmp_path):
    task = task_tree(tmp_path, {LLAMA_FILE: run_summary()}, {LLAMA: {"params": 46.7}})
    assert load_models(task) == {LLAMA: 46.7e9}
    ((run, _),) = summary_runs(task)
    assert run.meta["model_params"] == 46_700_000_000


def test_files_are_read_as_utf8_whatever_the_locale(tmp_path):
    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode reads every file as UTF-8")
    task = task_tree(tmp_path, {LLAMA_FILE: run_summary(Note="Grüße — ☃")},
                       {LLAMA: {"nickname": "Llama ü", "params": 8}})
    saved = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")  # an ASCII locale
        runs = summary_runs(task)
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)
    assert [r.meta["model_params"] for r, _ in runs] == [8_000_000_000]


def test_publish_summaries_writes_one_runs_row_per_run(tmp_path):
    task = task_tree(tmp_path / "src", {
        LLAMA_FILE: run_summary(),
        "A100/m/Mixtral/bs128+tp2+pp2.json": run_summary(MIXTRAL, "A100", 2, 2)})
    runs = summary_runs(task)
    root = tmp_path / "ds"
    written = publish_summaries(root, runs)
    assert written == [
        layout.runs_path(root, "inference", "a100", "mlenergy-v2.chat.a100.Mixtral.bs128-tp2-pp2"),
        layout.runs_path(root, "inference", "h100_sxm_80gb",
                         "mlenergy-v2.chat.h100_sxm_80gb.Meta-Llama-3.1-8B-Instruct.bs64-tp1-pp1"),
    ]
    assert sorted(p for p in layout.data_root(root).rglob("*") if p.is_file()) == sorted(written)
    assert not (root / "README.md").exists()  # the card is the command's, once at its end
    with pyarrow.ipc.open_stream(written[1]) as reader:
        row = reader.read_all().to_pylist()
    assert len(row) == 1
    assert row[0]["run_id"] == runs[1][0].run_id and row[0]["gpu_name"] == H100
    assert row[0]["energy_per_token_j"] == 0.25 and row[0]["mean_power_w"] == 300.0


@pytest.mark.parametrize("key", ["Energy/req (J)", "Avg Output Tokens", "Token tput (tok/s)"])
@pytest.mark.parametrize("value", [0, 0.0, -1, -0.5, "n/a", None, True, False, [], {},
                                   math.inf, -math.inf, math.nan])
def test_non_positive_number_is_rejected_exactly(tmp_path, key, value):
    task = task_tree(tmp_path, {LLAMA_FILE: run_summary(**{key: value})})
    err = one_error(task)
    raw = json.loads(json.dumps(value))  # what the file holds once read back
    assert err.reason == NOT_POSITIVE.format(raw)
    assert (err.file, err.line, err.field) == (str(task / LLAMA_FILE), None, key)


@pytest.mark.parametrize("key", ["Model", "GPU", "TP", "PP", "Energy/req (J)",
                                 "Token tput (tok/s)", "Avg Output Tokens"])
def test_missing_required_key(tmp_path, key):
    data = run_summary()
    del data[key]
    task = task_tree(tmp_path, {LLAMA_FILE: data})
    err = one_error(task)
    assert (err.reason, err.file, err.line, err.field) == (
        "missing", str(task / LLAMA_FILE), None, key)


def test_optional_keys_may_be_absent(tmp_path):
    data = run_summary()
    for key in ("Avg TPOT (s)", "Avg BS (reqs)", "Max BS (reqs)"):
        del data[key]
    task = task_tree(tmp_path, {LLAMA_FILE: data})
    ((_, metrics),) = summary_runs(task)
    assert metrics["energy_per_token_j"] == 0.25


@pytest.mark.parametrize("over,field,reason", [
    ({"TP": 8}, "TP", "value 8 differs from the file name's 1"),
    ({"PP": 2}, "PP", "value 2 differs from the file name's 1"),
    ({"TP": "1"}, "TP", "value '1' differs from the file name's 1"),
    ({"Model": "org/unknown"}, "Model", "value 'org/unknown' is not in models.json"),
    # a GPU or model that is not a name was read as one ("None" -> platform `none`)
    ({"GPU": None}, "GPU", "value None is not a name"),
    ({"GPU": 123}, "GPU", "value 123 is not a name"),
    ({"GPU": "  "}, "GPU", "value '  ' is not a name"),
    ({"Model": None}, "Model", "value None is not a name"),
])
def test_bad_summary_value(tmp_path, over, field, reason):
    task = task_tree(tmp_path, {LLAMA_FILE: run_summary(**over)})
    err = one_error(task)
    assert (err.reason, err.file, err.line, err.field) == (
        reason, str(task / LLAMA_FILE), None, field)


@pytest.mark.parametrize("content,reason,line", [
    ("{", "not JSON (Expecting property name enclosed in double quotes)", 1),
    ("\n\n", "not JSON (Expecting value)", 3),
    ("[1, 2]", "expected a JSON object", None),
    ("null", "expected a JSON object", None),
    ('"text"', "expected a JSON object", None),
])
def test_run_file_that_is_not_an_object(tmp_path, content, reason, line):
    task = task_tree(tmp_path, {LLAMA_FILE: content})
    err = one_error(task)
    assert (err.reason, err.file, err.line, err.field) == (
        reason, str(task / LLAMA_FILE), line, None)


def test_run_file_that_cannot_be_read(tmp_path):
    task = task_tree(tmp_path, {LLAMA_FILE: run_summary()})
    folder = task / "H100 80GB HBM3" / "o" / "m" / "bs1+tp1+pp1.json"
    folder.mkdir(parents=True)  # a folder with a run file's name
    err = one_error(task)
    assert (err.reason, err.file, err.line, err.field) == (
        "is a folder, not a regular file; refused", str(folder), None, None)


@pytest.mark.parametrize("name", ["x.json", "bs64+tp1.json", "bs64+tp1+pp1.JSON.json",
                                  "bs+tp1+pp1.json", "BS64+tp1+pp1.json"])
def test_bad_file_name(tmp_path, name):
    rel = f"H100 80GB HBM3/o/m/{name}"
    task = task_tree(tmp_path, {rel: run_summary()})
    err = one_error(task)
    assert (err.reason, err.file, err.line, err.field) == (
        f"file name {name!r} is not bs<B>+tp<T>+pp<P>.json", str(task / rel), None, "file name")


def test_batch_size_out_of_range_names_the_file(tmp_path):
    rel = "H100 80GB HBM3/o/m/bs3000000000+tp1+pp1.json"
    task = task_tree(tmp_path, {rel: run_summary()})
    err = one_error(task)
    assert (err.reason, err.file, err.line, err.field) == (
        "value 3000000000 is not a valid int32 (out of range for int32)", str(task / rel), None,
        "batch_size")


def test_unusable_run_id_names_the_file(tmp_path):
    task = task_tree(tmp_path, {LLAMA_FILE: run_summary()}, name="my chat")
    err = one_error(task)
    assert (err.reason, err.file, err.line, err.field) == (
        "value 'mlenergy-v2.my chat.h100_sxm_80gb.M...' is not a usable run id (letters, "
        "digits and ._=+- only)", str(task / LLAMA_FILE), None, "run_id")


def test_two_files_making_one_run_id(tmp_path):
    first = "H100 80GB HBM3/o/Meta Llama/bs64+tp1+pp1.json"
    second = "H100 80GB HBM3/o/Meta-Llama/bs64+tp1+pp1.json"
    task = task_tree(tmp_path, {second: run_summary(), first: run_summary()})
    err = one_error(task)
    rid = "mlenergy-v2.chat.h100_sxm_80gb.Meta-Llama.bs64-tp1-pp1"
    assert (err.reason, err.file, err.line, err.field) == (
        f"run id {rid!r} also made from {task / first}", str(task / second), None, "run_id")


def test_task_path_that_is_not_a_folder(tmp_path):
    for path in (tmp_path / "absent", tmp_path / "file.json"):
        if path.name == "file.json":
            path.write_text("{}", encoding="utf-8")
        with pytest.raises(InputError) as exc:
            summary_runs(path)
        err = exc.value
        assert (err.reason, err.file, err.line, err.field) == (
            "not a folder (expected an ML.ENERGY v2 task folder)", str(path), None, None)


def test_task_folder_without_run_files(tmp_path):
    task = task_tree(tmp_path, {})
    err = one_error(task)
    assert (err.reason, err.file, err.line, err.field) == (
        "no run summaries (<GPU>/<org>/<model>/bs<B>+tp<T>+pp<P>.json)", str(task), None, None)


def test_task_folder_without_models_json(tmp_path):
    task = task_tree(tmp_path, {LLAMA_FILE: run_summary()})
    (task / "models.json").unlink()
    err = one_error(task)
    assert (err.reason, err.file, err.line, err.field) == (
        "no models.json in the task folder (is this an ML.ENERGY v2 task folder, e.g. "
        "data/llm_text_generation/chat?)", str(task / "models.json"), None, None)


@pytest.mark.parametrize("models,reason,field", [
    ([1, 2], "expected an object {model id: {params, ...}}", None),
    ("text", "expected an object {model id: {params, ...}}", None),
    ({"m": 5}, "model 'm' has no params", "params"),
    ({"m": "8B"}, "model 'm' has no params", "params"),
    ({"m": None}, "model 'm' has no params", "params"),
    ({"m": {"nickname": "M"}}, "model 'm' has no params", "params"),
    ({"m": {"params": 0}}, "value 0 is not a positive number", "params"),
    ({"m": {"params": -8}}, "value -8 is not a positive number", "params"),
    ({"m": {"params": None}}, "value None is not a positive number", "params"),
    ({"m": {"params": "big"}}, "value 'big' is not a positive number", "params"),
    ({"m": {"params": True}}, "value True is not a positive number", "params"),
])
def test_bad_models_json(tmp_path, models, reason, field):
    task = task_tree(tmp_path, {LLAMA_FILE: run_summary()}, models)
    with pytest.raises(InputError) as exc:
        load_models(task)
    err = exc.value
    assert (err.reason, err.file, err.line, err.field) == (
        reason, str(task / "models.json"), None, field)
    assert one_error(task).reason == reason  # the same error through summary_runs


def test_models_json_that_is_not_json(tmp_path):
    task = task_tree(tmp_path, {LLAMA_FILE: run_summary()})
    (task / "models.json").write_text("{\n  \"m\": ", encoding="utf-8")
    err = one_error(task)
    assert (err.reason, err.file, err.line, err.field) == (
        "not JSON (Expecting value)", str(task / "models.json"), 2, None)


@pytest.mark.external
def test_real_chat_folder_rows(external_dir):
    task = external_dir / "mlenergy-v2" / "chat"
    if not task.is_dir():
        pytest.skip(f"no ML.ENERGY v2 chat folder at {task}")
    rel = "H100 80GB HBM3/microsoft/Phi-3-small-8k-instruct/bs768+tp1+pp1.json"
    data = json.loads((task / rel).read_text(encoding="utf-8"))
    runs = dict((r.run_id, (r, m)) for r, m in summary_runs(task))
    run, metrics = runs["mlenergy-v2.chat.h100_sxm_80gb.Phi-3-small-8k-instruct.bs768-tp1-pp1"]
    per_token = data["Energy/req (J)"] / data["Avg Output Tokens"]
    assert metrics == {"energy_per_token_j": per_token,
                       "mean_power_w": per_token * data["Token tput (tok/s)"],
                       "metric_notes": [SUMMARY_NOTE]}
    assert run.meta["model_label"] == data["Model"] == "microsoft/Phi-3-small-8k-instruct"
    assert run.meta["gpu_name"] == data["GPU"] == H100
    assert run.meta["batch_size"] == 768 and run.meta["num_gpus"] == 1
    assert run.meta["tokens_per_s"] == data["Token tput (tok/s)"]
    params = json.loads((task / "models.json").read_text(encoding="utf-8"))
    assert run.meta["model_params"] == round(params[data["Model"]]["params"] * 1e9)
    assert run.flags == ["precision_unknown", "summary_only"]
    files = [p for p in task.rglob("*.json") if p.name != "models.json"]
    assert len(runs) == len(files)
    assert all(m["metric_notes"] == [SUMMARY_NOTE] for _, m in runs.values())


@pytest.mark.parametrize("model", [
    "org/sub/deep-model",    # not a Hub id: reads as a path
    "org/Model Name",        # not a Hub id
    "ann@10.0.0.7",          # user@host, an address
])
def test_a_model_id_that_is_no_hub_id_is_refused_by_the_text_gate(tmp_path, model):
    task = task_tree(tmp_path, {"H100 80GB HBM3/org/m/bs8+tp1+pp1.json": run_summary(model)},
                       {model: {"params": 1}})
    err = one_error(task)
    assert err.field in ("model_name", "model_label") and err.file.endswith("bs8+tp1+pp1.json")


def test_a_gpu_name_holding_an_address_is_refused(tmp_path):
    task = task_tree(tmp_path, {"H100 80GB HBM3/org/m/bs8+tp1+pp1.json":
                                  run_summary(gpu="NVIDIA H100 on 10.1.2.3")})
    assert one_error(task).field == "gpu_name"
