"""upload.py against a test double of ``HfApi``.

The checks before any network call, the dry run, the recorded calls and files, Parquet, pull
requests, and the token never leaking.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from datasets import load_dataset
from huggingface_hub.utils import filter_repo_objects

from cards import figures
from cards.builder import CardOptions, refresh_card, write_card
from llm_powertrace_ds import hub_upload, layout, shards

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # upload.py lives at the repo root
    sys.path.insert(0, str(REPO))

import upload  # noqa: E402
from upload import main  # noqa: E402

TOKEN = "hf_TestTokenNeverToBeSeen_7f3a9c2e"


class FakeApi:
    """Records every call and the bytes of every file ``upload_folder`` would send."""

    def __init__(self, remote_files=(), whoami_error=None, upload_error=None):
        self.calls: list[tuple[str, dict]] = []
        self.commits: list[dict[str, bytes]] = []
        self.remote = list(remote_files)
        self.whoami_error = whoami_error
        self.upload_error = upload_error

    def _record(self, name, **kwargs):
        self.calls.append((name, kwargs))

    def names(self):
        return [name for name, _ in self.calls]

    def kwargs(self, name):
        return [kw for n, kw in self.calls if n == name]

    @property
    def files(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for commit in self.commits:
            out.update(commit)
        return out

    def whoami(self, token=None, **kwargs):
        self._record("whoami", token=token, **kwargs)
        if self.whoami_error:
            raise self.whoami_error
        return {"name": "tester"}

    def create_repo(self, repo_id, **kwargs):
        self._record("create_repo", repo_id=repo_id, **kwargs)
        return f"https://huggingface.co/datasets/{repo_id}"

    def create_branch(self, repo_id, **kwargs):
        self._record("create_branch", repo_id=repo_id, **kwargs)

    def create_tag(self, repo_id, **kwargs):
        self._record("create_tag", repo_id=repo_id, **kwargs)

    def list_repo_files(self, repo_id, **kwargs):
        self._record("list_repo_files", repo_id=repo_id, **kwargs)
        return list(self.remote)

    def upload_folder(self, *, folder_path, allow_patterns=None, ignore_patterns=None, **kwargs):
        self._record("upload_folder", folder_path=str(folder_path), allow_patterns=allow_patterns,
                     ignore_patterns=ignore_patterns, **kwargs)
        if self.upload_error:
            raise self.upload_error
        root = Path(folder_path)
        paths = [p.relative_to(root).as_posix() for p in sorted(root.rglob("*")) if p.is_file()]
        chosen = filter_repo_objects(paths, allow_patterns=allow_patterns,
                                     ignore_patterns=ignore_patterns)
        self.commits.append({p: (root / p).read_bytes() for p in chosen})
        pr = bool(kwargs.get("create_pr"))
        return SimpleNamespace(
            commit_url=f"https://huggingface.co/datasets/x/commit/{len(self.commits)}",
            pr_url="https://huggingface.co/datasets/org/name/discussions/1" if pr else None,
            pr_revision="refs/pr/1" if pr else None)


def make_folder(root: Path, make_run, *, proxy: bool = False) -> Path:
    """A fine-tuning and an inference run (with requests), optionally a cpu_proxy run.

    Also leftovers that must never be uploaded (a run in progress in .staging/, lock files).
    """
    shards.publish_run(root, make_run("ft-1", n=40), refresh_card=False)
    shards.publish_run(root, make_run("inf-1", workload="inference", family="qwen", n=40,
                                      seed=1, with_requests=True), refresh_card=False)
    if proxy:
        run = make_run("proxy-1", platform="cpu_proxy", family="gpt2", devices=1, n=40,
                       sampler="cpu_proxy", power_field="cpu_proxy_model")
        run.devices[0].gpu_name = "cpu_proxy"
        shards.publish_run(root, run, refresh_card=False)
    refresh_card(root)
    running = layout.staging_dir(root, "still-running")
    running.mkdir(parents=True)
    (running / "status.json").write_text('{"status": "running"}')
    (running / "spool.bin").write_bytes(b"\0" * 100)
    return root


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A hermetic environment: token set, online, temp files and the datasets cache in tmp."""
    import datasets
    from huggingface_hub import constants

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    return tmp_path


@pytest.fixture
def no_figures(monkeypatch):
    """Skip drawing figures (slow on 2 cores) where a test is not about them."""
    monkeypatch.setenv(figures.FIGURES_ENV, "0")


@pytest.fixture
def no_network(monkeypatch):
    """Any socket connection fails the test, and no real HfApi may be built."""
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise AssertionError("network call attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(huggingface_hub, "HfApi", refuse)


def materialise(files: dict[str, bytes], root: Path) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def card_configs(readme: bytes | str) -> list[dict]:
    text = readme.decode() if isinstance(readme, bytes) else readme
    return yaml.safe_load(text.split("---\n")[1])["configs"]


# ---------------------------------------------------------------------------------------------
# Dry run
# ---------------------------------------------------------------------------------------------

def test_dry_run_offline_prints_plan_and_makes_no_network_call(env, make_run, monkeypatch,
                                                               no_network, no_figures, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN")
    root = make_folder(env / "ds", make_run)
    (root / "README.md").write_text("---\nlicense: mit\n---\nold card\n")
    api = FakeApi()
    assert main([str(root), "--repo-id", "org/llm-powertrace", "--dry-run"], api=api) == 0
    assert api.calls == []
    out = capsys.readouterr().out
    assert "upload plan:" in out and "org/llm-powertrace" in out
    assert "dry run: nothing was uploaded and no network call was made" in out
    assert "commits: 1" in out
    assert "-license: mit" in out and "+license: cc-by-4.0" in out  # the card diff
    for config in ("finetune", "finetune_runs", "inference", "inference_runs",
                   "inference_requests"):
        assert f"data/{config}/l40s/" in out
    assert "README.md" in out and ".staging" not in out.split("files:")[1]
    assert ".lock" not in out
    assert "not uploaded: 1 unpublished run(s) in .staging/" in out
    # a dry run changes nothing in the folder, not even its card (issue 12, item 6)
    assert (root / "README.md").read_text() == "---\nlicense: mit\n---\nold card\n"


def test_dry_run_json_plan(env, make_run, no_network, no_figures, capsys):
    root = make_folder(env / "ds", make_run)
    assert main([str(root), "--repo-id", "org/name", "--dry-run", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["repo_type"] == "dataset" and plan["file_format"] == "parquet"  # the default
    paths = [f["path"] for f in plan["files"]]
    assert "README.md" in paths and all(not p.startswith(".") for p in paths)
    assert plan["total_bytes"] == sum(f["bytes"] for f in plan["files"]) > 0
    assert [p for c in plan["commits"] for p in c["files"]] == paths


# ---------------------------------------------------------------------------------------------
# The upload through the test double
# ---------------------------------------------------------------------------------------------

def test_upload_records_calls_and_files(env, make_run, capsys, monkeypatch):
    monkeypatch.setenv("LLM_POWERTRACE_CARD_FIGURES", "1")  # this test checks the figures too
    root = make_folder(env / "ds", make_run)
    api = FakeApi()
    assert main([str(root), "--repo-id", "org/llm-powertrace"], api=api) == 0
    assert api.names()[:3] == ["whoami", "create_repo", "list_repo_files"]
    assert api.names().count("upload_folder") == 1
    (create,) = api.kwargs("create_repo")
    assert create == {"repo_id": "org/llm-powertrace", "repo_type": "dataset", "private": False,
                      "exist_ok": True}
    for kw in api.kwargs("upload_folder"):
        assert kw["repo_type"] == "dataset" and kw["repo_id"] == "org/llm-powertrace"
        assert ".staging/**" in kw["ignore_patterns"]
    files = api.files
    assert "README.md" in files
    assert not [p for p in files if ".staging" in p or p.endswith(".lock") or p.startswith(".")]
    assert any(p.startswith("figures/") and p.endswith(".png") for p in files)
    assert all("-of-" in Path(p).name for p in files if p.startswith("data/"))  # packed
    readme = files["README.md"].decode()
    assert 'load_dataset("org/llm-powertrace", "finetune"' in readme
    croissant = json.loads(files["croissant.json"])  # published beside the card
    assert croissant["url"] == "https://huggingface.co/datasets/org/llm-powertrace"
    assert {d["encodingFormat"] for d in croissant["distribution"]} == {"application/x-parquet"}
    # what was uploaded loads, with the same rows as the folder
    hub = materialise(files, env / "hub-copy")
    for entry in card_configs(files["README.md"]):
        for split in entry["data_files"]:
            got = load_dataset(str(hub), entry["config_name"], split=split["split"])
            want = load_dataset(str(root), entry["config_name"], split=split["split"])
            assert got.to_list() == want.to_list()
    out = capsys.readouterr().out
    assert "uploaded" in out and "https://huggingface.co/datasets/org/llm-powertrace" in out
    assert (root / ".staging" / "still-running" / "status.json").exists()  # left alone


def test_parquet_copy_loads_and_equals_arrow_row_for_row(env, make_run, no_figures):
    import pyarrow.parquet as pq

    root = make_folder(env / "ds", make_run)
    api = FakeApi()
    assert main([str(root), "--repo-id", "org/name", "--file-format", "parquet"], api=api) == 0
    files = api.files
    data = [p for p in files if p.startswith("data/")]
    assert data and all(p.endswith(".parquet") for p in data)
    configs = card_configs(files["README.md"])
    globs = [g for c in configs for f in c["data_files"] for g in f["path"]]
    assert all(g.endswith(".parquet") for g in globs)
    hub = materialise(files, env / "parquet-copy")
    arrow = env / "arrow-copy"
    shards.pack(root, arrow)
    pairs = 0
    for entry in configs:
        for split in entry["data_files"]:
            got = load_dataset(str(hub), entry["config_name"], split=split["split"])
            want = load_dataset(str(arrow), entry["config_name"], split=split["split"])
            assert got.features == want.features
            assert got.to_list() == want.to_list()
            pairs += 1
    assert pairs == sum(len(s) for s in layout.config_globs(root).values())
    meta = pq.ParquetFile(hub / data[0]).metadata
    col = meta.row_group(0).column(0)
    # pyproject requires pyarrow >= 15, which writes the page index: it must be there.
    assert hub_upload.parquet_writer_options()["write_page_index"] is True
    assert col.has_offset_index and col.has_column_index


def test_create_pr_puts_every_commit_in_one_pull_request(env, make_run, monkeypatch,
                                                         no_figures, capsys):
    monkeypatch.setattr(upload, "MAX_COMMIT_FILES", 3)
    root = make_folder(env / "ds", make_run)
    pytest.importorskip("matplotlib")
    write_card(root, CardOptions(figures=True))  # drawn once; the upload reuses them
    drawn = sorted(p.name for p in (root / "figures").glob("*.png"))
    api = FakeApi()
    assert main([str(root), "--repo-id", "org/name", "--create-pr"], api=api) == 0
    assert sorted(Path(p).name for p in api.commits[-1] if p.startswith("figures/")) == drawn
    assert all(f"(figures/{name})" in api.commits[-1]["README.md"].decode() for name in drawn)
    uploads = api.kwargs("upload_folder")
    assert len(uploads) == len(api.commits) > 2
    assert uploads[0]["create_pr"] is True and uploads[0]["revision"] == "main"
    for kw in uploads[1:]:
        assert not kw["create_pr"] and kw["revision"] == "refs/pr/1"
    assert "README.md" in api.commits[-1]  # the card lands last, after its data
    assert all("README.md" not in c for c in api.commits[:-1])
    assert all(len([p for p in c if p.startswith("data/")]) <= 3 for c in api.commits)
    assert "discussions/1" in capsys.readouterr().out


def test_revision_tag_and_stale_remote_files(env, make_run, no_figures, capsys):
    root = make_folder(env / "ds", make_run)
    api = FakeApi(remote_files=[".gitattributes", "README.md", "data/finetune/l40s/llama/old.arrow",
                                "figures/trace-finetune-gone.png", "notes.txt"])
    argv = [str(root), "--repo-id", "org/name", "--revision", "v1-branch", "--tag", "v1.0",
            "--private", "--format", "json"]
    assert main(argv, api=api) == 0
    report = json.loads(capsys.readouterr().out)  # one JSON object: the plan and the result
    assert report["revision"] == "v1-branch" and report["tag"] == "v1.0"
    assert report["result"]["deleted"] == ["data/finetune/l40s/llama/old.arrow",
                                           "figures/trace-finetune-gone.png"]
    (branch,) = api.kwargs("create_branch")
    assert branch["branch"] == "v1-branch" and branch["repo_type"] == "dataset"
    assert api.kwargs("create_repo")[0]["private"] is True
    assert all(kw["revision"] == "v1-branch" for kw in api.kwargs("upload_folder"))
    assert api.kwargs("upload_folder")[-1]["delete_patterns"] == [
        "data/finetune/l40s/llama/old.arrow", "figures/trace-finetune-gone.png"]
    (tag,) = api.kwargs("create_tag")
    assert tag["tag"] == "v1.0" and tag["revision"] == "v1-branch"
    assert api.names()[-1] == "create_tag"


# ---------------------------------------------------------------------------------------------
# Refusals: each one line, before any network call
# ---------------------------------------------------------------------------------------------

def test_cpu_proxy_rows_refused_unless_allowed(env, make_run, no_figures, capsys):
    root = make_folder(env / "ds", make_run, proxy=True)
    api = FakeApi()
    assert main([str(root), "--repo-id", "org/name"], api=api) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cpu_proxy" in err[0] and "--allow-proxy" in err[0]
    assert api.calls == []
    assert main([str(root), "--repo-id", "org/name", "--allow-proxy"], api=api) == 0
    assert any("cpu_proxy" in p for p in api.files)


def test_missing_token_says_how_to_log_in(env, make_run, monkeypatch, capsys):
    import huggingface_hub

    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    root = make_folder(env / "ds", make_run)
    api = FakeApi()
    assert main([str(root), "--repo-id", "org/name"], api=api) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert "hf auth login" in line and "HF_TOKEN" in line
    assert api.calls == []


def test_rejected_token_says_how_to_log_in(env, make_run, no_figures, capsys):
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    response = httpx2.Response(401, request=httpx2.Request("GET", "https://huggingface.co/api"))
    api = FakeApi(whoami_error=HfHubHTTPError("401 Client Error: Unauthorized",
                                              response=response))
    root = make_folder(env / "ds", make_run)
    assert main([str(root), "--repo-id", "org/name"], api=api) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "rejected" in line and "hf auth login" in line
    assert api.names() == ["whoami"]


def test_offline_without_dry_run_is_refused(env, make_run, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root = make_folder(env / "ds", make_run)
    api = FakeApi()
    assert main([str(root), "--repo-id", "org/name"], api=api) == 1
    assert "--dry-run" in capsys.readouterr().err
    assert api.calls == []


def test_validation_failure_stops_before_network(env, make_run, monkeypatch, no_figures, capsys):
    from llm_powertrace_ds import validate

    root = make_folder(env / "ds", make_run)
    real = validate.validate_run

    def broken(run):
        report = real(run)
        if run.run_id == "ft-1":
            report.add("nonmonotonic_time", "t_ms goes backwards")
        return report

    monkeypatch.setattr(validate, "validate_run", broken)
    api = FakeApi()
    assert main([str(root), "--repo-id", "org/name"], api=api) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "ft-1" in line and "nonmonotonic_time" in line
    assert api.calls == []


def test_folder_that_does_not_load_stops_before_network(env, make_run, no_figures, capsys):
    root = make_folder(env / "ds", make_run)
    runs_file = layout.runs_path(root, "finetune", "l40s", "ft-1")
    runs_file.write_bytes(b"not an arrow stream")
    api = FakeApi()
    assert main([str(root), "--repo-id", "org/name"], api=api) == 1
    assert "ft-1.arrow" in capsys.readouterr().err
    assert api.calls == []


@pytest.mark.parametrize("argv", [
    ["DIR"],  # --repo-id is required: no default organisation
    ["DIR", "--repo-id", "no-slash"],
    ["DIR", "--repo-id", "org/name", "--create-pr", "--tag", "v1"],
    ["DIR", "--repo-id", "org/name", "--file-format", "csv"],
])
def test_bad_usage_exits_2(argv, tmp_path, capsys):
    argv = [str(tmp_path) if a == "DIR" else a for a in argv]
    api = FakeApi()
    assert main(argv, api=api) == 2
    assert capsys.readouterr().err
    assert api.calls == []


def test_not_a_dataset_folder(env, capsys):
    assert main([str(env), "--repo-id", "org/name", "--dry-run"]) == 1
    assert "not a dataset folder" in capsys.readouterr().err


def test_plan_commits_batches_data_and_puts_the_card_last():
    files = [(f"data/x/{i}.arrow", 10) for i in range(5)] + [("README.md", 1),
                                                             ("figures/a.png", 1)]
    assert upload.plan_commits(files) == [files]
    commits = upload.plan_commits(files, max_files=2)
    assert [len(c) for c in commits] == [2, 2, 1, 2]
    assert commits[-1] == [("README.md", 1), ("figures/a.png", 1)]
    assert [len(c) for c in upload.plan_commits(files, max_bytes=25)] == [2, 2, 1, 2]


# ---------------------------------------------------------------------------------------------
# The token never leaks
# ---------------------------------------------------------------------------------------------

def test_token_is_never_printed_logged_or_written(env, make_run, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    root = make_folder(env / "ds", make_run)
    seen: list[str] = []

    api = FakeApi()
    assert main([str(root), "--repo-id", "org/name", "--file-format", "parquet"], api=api) == 0
    captured = capsys.readouterr()
    seen += [captured.out, captured.err]
    # a server error that echoes the token back must not be printed either
    failing = FakeApi(upload_error=RuntimeError(f"server said: bad token {TOKEN}"))
    assert main([str(root), "--repo-id", "org/name"], api=failing) == 1
    captured = capsys.readouterr()
    seen += [captured.out, captured.err]
    assert "***" in captured.err
    seen.append(caplog.text)
    seen.append(repr(api.calls) + repr(failing.calls))
    blobs = list(api.files.values())
    blobs += [p.read_bytes() for p in env.rglob("*") if p.is_file()]
    assert blobs and all(TOKEN.encode() not in b for b in blobs)
    assert all(TOKEN not in text for text in seen)
    assert TOKEN[3:] not in "".join(seen)


# ---------------------------------------------------------------------------------------------
# The explorer as a static Space (--space)
# ---------------------------------------------------------------------------------------------

def test_space_dry_run_offline_plans_the_static_site(env, make_run, monkeypatch, no_network,
                                                     no_figures, capsys):
    pytest.importorskip("bokeh")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN")
    root = make_folder(env / "ds", make_run)
    api = FakeApi()
    assert main([str(root), "--space", "org/explorer", "--dry-run"], api=api) == 0
    assert api.calls == []
    out = capsys.readouterr().out
    assert "space plan:" in out and "https://huggingface.co/spaces/org/explorer" in out
    assert "explorer of 2 run(s)" in out
    assert "dry run: the Space was not uploaded and no network call was made" in out
    assert main([str(root), "--space", "org/explorer", "--dry-run", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    paths = {f["path"] for f in plan["files"]}
    assert {"index.html", "run.html", "assets/bokeh.min.js", "assets/bokeh-api.min.js", "data/catalog.js",
            "README.md"} <= paths
    assert plan["repo_type"] == "space" and plan["space_sdk"] == "static"


def test_space_upload_through_the_test_double(env, make_run, no_figures, capsys):
    pytest.importorskip("bokeh")
    root = make_folder(env / "ds", make_run)
    api = FakeApi()
    assert main([str(root), "--repo-id", "org/ds", "--space", "org/explorer"], api=api) == 0
    space_creates = [kw for kw in api.kwargs("create_repo") if kw["repo_type"] == "space"]
    assert space_creates == [{"repo_id": "org/explorer", "repo_type": "space",
                              "space_sdk": "static", "private": False, "exist_ok": True}]
    (space_upload,) = [kw for kw in api.kwargs("upload_folder") if kw["repo_type"] == "space"]
    assert space_upload["repo_id"] == "org/explorer"
    assert space_upload["delete_patterns"] == ["data/**", "assets/**"]
    files = api.commits[-1]  # the Space's commit comes after the dataset's
    front = yaml.safe_load(files["README.md"].decode().split("---\n")[1])
    assert front["sdk"] == "static" and front["app_file"] == "index.html"
    assert front["datasets"] == ["org/ds"]
    assert b"org/ds" in files["data/site.js"]  # the site names the dataset repo
    assert str(env).encode() not in files["data/catalog.js"]
    assert "uploaded the explorer" in capsys.readouterr().out


def test_space_refuses_cpu_proxy_runs_unless_allowed(env, make_run, no_network, no_figures,
                                                      capsys):
    pytest.importorskip("bokeh")
    root = make_folder(env / "ds", make_run, proxy=True)
    assert main([str(root), "--space", "org/explorer", "--dry-run"]) == 1
    assert "--allow-proxy" in capsys.readouterr().err
    assert main([str(root), "--space", "org/explorer", "--dry-run", "--allow-proxy"]) == 0


def test_neither_repo_id_nor_space_is_bad_usage(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "--space" in capsys.readouterr().err
    assert main([str(tmp_path), "--space", "not a repo"]) == 2


# ---------------------------------------------------------------------------------------------
# Temporary disk (issue 13)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("file_format", ["arrow", "parquet"])
def test_dry_run_reports_temp_disk_near_one_copy(env, make_run, no_network, no_figures, capsys,
                                                 file_format):
    root = env / "ds"
    for i in range(4):
        shards.publish_run(root, make_run(f"ft-{i}", n=3000, seed=i), refresh_card=False)
    refresh_card(root)
    assert main([str(root), "--repo-id", "org/name", "--dry-run", "--format", "json",
                 "--file-format", file_format]) == 0
    plan = json.loads(capsys.readouterr().out)
    data = sum(p.stat().st_size for p in (root / "data").rglob("*") if p.is_file())
    assert plan["dataset_bytes"] == data
    # one packed copy (+ the card and croissant.json, twice for Parquet: the packed copy's and
    # the upload copy's); a Parquet copy replaces the Arrow shards one at a time, so at most one
    # shard exists in both formats at once
    one_shard = max(f["bytes"] for f in plan["files"]) if file_format == "parquet" else 0
    card = sum(f["bytes"] for f in plan["files"] if f["path"] in upload.CARD_FILES)
    copies = 2 if file_format == "parquet" else 1
    assert 0 < plan["temp_disk_peak_bytes"] <= 1.2 * data + one_shard + copies * card + 64 * 1024
    assert not list((env / "hf-cache").rglob("*.arrow"))  # no cached copy of the data


def test_check_shards_names_a_shard_of_another_schema(env, make_run):
    root = env / "ds"
    shards.publish_run(root, make_run("ft-1", n=40))
    path = next((root / "data" / "finetune").rglob("*.arrow"))
    shards.write_table_atomic(path, shards.read_table(path).drop_columns(["seed"]))
    with pytest.raises(upload.UploadError, match="does not have the schema"):
        upload.check_shards(root)


def test_dry_run_text_plan_prints_a_bounded_card_diff(env, make_run, no_network, no_figures,
                                                      capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root = make_folder(env / "ds", make_run)
    (root / "README.md").write_text("---\nlicense: mit\n---\nold card\n")
    assert main([str(root), "--repo-id", "org/name", "--dry-run"]) == 0
    out = capsys.readouterr().out
    diff = out.split("card diff (README.md in the folder -> the uploaded card):\n")[1]
    shown = [line for line in diff.splitlines() if line.startswith("  ") and
             not line.startswith("  ...")]
    assert 0 < len(shown) <= upload.DIFF_MAX_LINES
    assert "more diff line(s) (--format json lists them all)" in diff
    assert main([str(root), "--repo-id", "org/name", "--dry-run", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert len(plan["card_diff"]) > upload.DIFF_MAX_LINES
