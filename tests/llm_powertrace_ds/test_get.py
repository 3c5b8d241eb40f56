"""``llm-powertrace get`` against a real HTTP server on 127.0.0.1 (``http.server`` in a thread).

The server serves fixture archives built here; it honours ``Range`` requests (206) and can be
told to cut a response after N bytes, as a broken connection does. Nothing reaches the network.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from importers.test_mlenergy_v2 import RUNS, task_folder
from importers.test_wattameter import node_log

import upload
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import UsageError
from llm_powertrace_ds.shards import list_runs
from llm_powertrace_ds.sources.download import ChecksumMismatch, DownloadInterrupted, part_path
from llm_powertrace_ds.sources.get import GetOptions, get_source
from llm_powertrace_ds.sources.provenance import read_sources
from llm_powertrace_ds.sources.recipes import builtin_recipes, load_recipes
from llm_powertrace_ds.sources.unpack import UnsafeArchive, safe_unpack


class Server:
    """Serves ``files`` (path -> bytes); ``cut[path] = n`` ends the next response after n bytes."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.cut: dict[str, int] = {}
        self.ignore_range = False
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # noqa: N802 (http.server's name)
                rng = self.headers.get("Range")
                server.requests.append((self.path, rng))
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                if rng and rng.startswith("bytes=") and not server.ignore_range:
                    start = int(rng[6:].split("-")[0])
                    if start >= len(body):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                part = body[start:]
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                cut = server.cut.pop(self.path, None)
                if cut is not None:
                    self.wfile.write(part[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return  # the client was promised more: its read breaks
                self.wfile.write(part)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def server():
    with Server() as s:
        yield s


def targz(folder) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for path in sorted(folder.rglob("*")):
            tf.add(path, arcname=f"profiles/{path.relative_to(folder).as_posix()}",
                   recursive=False)
    return buf.getvalue()


def wattameter_archive(tmp_path) -> bytes:
    logs = tmp_path / "logs"
    logs.mkdir()
    for host in ("n0", "n1"):
        node_log(logs, host, gpus=2, n=200, job="4242")
    return targz(logs)


def recipe_file(tmp_path, server, name, body: bytes, *, sha=None, size=None, licence="CC-BY-4.0",
                redistributable=True, path="/profiles.tar.gz", extra=None):
    server.files[path] = body
    recipe = {
        "name": name, "title": "Two H100 nodes of a fixture job", "licence": licence,
        "redistributable": redistributable, "citation": "A. Author, Fixture profiles (2026)",
        "source_url": "https://doi.org/10.0000/fixture", "format": "wattameter",
        "workload": "finetune", "platform": "h100_sxm_80gb", "import_path": "profiles",
        "files": [{"url": server.url + path, "path": "profiles.tar.gz", "unpack": True,
                   "size_bytes": len(body) if size is None else size,
                   "sha256": sha or hashlib.sha256(body).hexdigest()}],
        **(extra or {}),
    }
    out = tmp_path / "recipes.json"
    out.write_text(json.dumps({"recipes": [recipe]}))
    return out


def test_get_downloads_checks_unpacks_imports_and_credits(tmp_path, server, capsys):
    recipes = recipe_file(tmp_path, server, "fixture", wattameter_archive(tmp_path))
    out = tmp_path / "ds"
    assert main(["get", "fixture", "--out", str(out), "--recipes", str(recipes),
                 "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["runs"] == 1 and row["resumed"] == 0
    (run,) = list_runs(out)
    assert run["run_id"] == "wattameter-4242" and run["num_gpus"] == 4
    (entry,) = read_sources(out)
    assert entry["licence"] == "CC-BY-4.0" and entry["runs"] == ["wattameter-4242"]
    # the fixture server is on a loopback address: its URL is withheld, never published
    assert entry["files"][0]["pinned"] and entry["files"][0]["url"] is None
    card = (out / "README.md").read_text()
    assert "license: cc-by-4.0" in card
    assert "A. Author, Fixture profiles (2026)" in card and "https://doi.org/10.0000/fixture" in card
    assert "each checked against the recipe's size and SHA-256" in card
    assert [p for p, _ in server.requests] == ["/profiles.tar.gz"]
    # a second get uses the checked file in place: no new request
    assert main(["get", "fixture", "--out", str(out), "--recipes", str(recipes)]) == 0
    assert len(server.requests) == 1


def test_an_interrupted_download_resumes_where_it_broke(tmp_path, server, capsys):
    body = wattameter_archive(tmp_path)
    recipes = recipe_file(tmp_path, server, "fixture", body)
    server.cut["/profiles.tar.gz"] = len(body) // 3
    out = tmp_path / "ds"
    assert main(["get", "fixture", "--out", str(out), "--recipes", str(recipes)]) == 1
    err = capsys.readouterr().err
    assert "interrupted after" in err and "run the same command again to resume" in err
    part = part_path(out / ".downloads" / "fixture" / "archives" / "profiles.tar.gz")
    assert part.stat().st_size == len(body) // 3
    assert main(["get", "fixture", "--out", str(out), "--recipes", str(recipes), "--format",
                 "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["resumed"] == 1
    assert server.requests[-1] == ("/profiles.tar.gz", f"bytes={len(body) // 3}-")
    assert not part.exists() and [r["run_id"] for r in list_runs(out)] == ["wattameter-4242"]


def test_a_server_that_ignores_range_gets_a_fresh_start(tmp_path, server):
    body = wattameter_archive(tmp_path)
    recipes = recipe_file(tmp_path, server, "fixture", body)
    server.cut["/profiles.tar.gz"] = 100
    out = tmp_path / "ds"
    with pytest.raises(DownloadInterrupted):
        get_source("fixture", out, GetOptions(recipes_file=recipes))
    server.ignore_range = True  # answers 200 with the whole file to a Range request
    res = get_source("fixture", out, GetOptions(recipes_file=recipes))
    assert server.requests[-1][1] == "bytes=100-" and not res.files[0].resumed
    assert res.run_ids == ("wattameter-4242",)


def test_a_corrupt_part_is_caught_by_the_digest_and_dropped(tmp_path, server):
    body = wattameter_archive(tmp_path)
    recipes = recipe_file(tmp_path, server, "fixture", body)
    out = tmp_path / "ds"
    part = part_path(out / ".downloads" / "fixture" / "archives" / "profiles.tar.gz")
    part.parent.mkdir(parents=True)
    part.write_bytes(b"garbage that is not the start of the file")
    with pytest.raises(ChecksumMismatch, match="SHA-256"):
        get_source("fixture", out, GetOptions(recipes_file=recipes))
    assert not part.exists()  # a wrong part is never kept
    res = get_source("fixture", out, GetOptions(recipes_file=recipes))
    assert res.run_ids == ("wattameter-4242",)


def test_a_wrong_checksum_is_refused_and_nothing_is_imported(tmp_path, server, capsys):
    recipes = recipe_file(tmp_path, server, "fixture", wattameter_archive(tmp_path),
                          sha="0" * 64)
    out = tmp_path / "ds"
    assert main(["get", "fixture", "--out", str(out), "--recipes", str(recipes)]) == 1
    err = capsys.readouterr().err
    assert f"{server.url}/profiles.tar.gz: SHA-256" in err and "0" * 64 in err
    assert "the download was removed" in err
    assert not (out / "data").exists() and not (out / "sources.json").exists()
    assert not list((out / ".downloads").rglob("*.tar.gz*"))


def test_a_larger_file_than_the_recipe_says_is_stopped(tmp_path, server):
    body = wattameter_archive(tmp_path)
    recipes = recipe_file(tmp_path, server, "fixture", body, size=100)
    with pytest.raises(ChecksumMismatch, match="more than 100 bytes"):
        get_source("fixture", tmp_path / "ds", GetOptions(recipes_file=recipes))


def hostile_tar(member: str, *, kind=tarfile.REGTYPE, data=b"x", link="") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo(member)
        info.type = kind
        info.linkname = link
        info.size = len(data) if kind == tarfile.REGTYPE else 0
        tf.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return buf.getvalue()


@pytest.mark.parametrize(("body", "says"), [
    (hostile_tar("../../escaped.txt"), "outside the folder"),
    (hostile_tar("/tmp/absolute-escape.txt"), "outside the folder"),
    (hostile_tar("profiles/link", kind=tarfile.SYMTYPE, link="/etc/passwd"), "is a link"),
    (hostile_tar("profiles/hard", kind=tarfile.LNKTYPE, link="../../x"), "is a link"),
    (hostile_tar("profiles/big.log", data=b"0" * 5000), "unpacks to 5000 bytes"),
])
def test_a_hostile_archive_is_refused_over_http(tmp_path, server, capsys, body, says):
    recipes = recipe_file(tmp_path, server, "fixture", body,
                          extra={"max_unpacked_bytes": 4096})
    out = tmp_path / "ds"
    assert main(["get", "fixture", "--out", str(out), "--recipes", str(recipes)]) == 1
    err = capsys.readouterr().err
    assert says in err and "refused, nothing unpacked" in err
    assert not (tmp_path / "escaped.txt").exists() and not (out / "data").exists()
    assert not (out / ".downloads" / "fixture" / "tree" / "profiles").exists()


def test_a_zip_that_escapes_or_lies_about_its_size_is_refused(tmp_path):
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../outside.txt", "x")
    with pytest.raises(UnsafeArchive, match="outside the folder"):
        safe_unpack(evil, tmp_path / "u", max_total_bytes=10**6)
    link = tmp_path / "link.zip"
    with zipfile.ZipFile(link, "w") as zf:
        info = zipfile.ZipInfo("l")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(UnsafeArchive, match="link"):
        safe_unpack(link, tmp_path / "u", max_total_bytes=10**6)
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros", b"\0" * 100_000)
    with pytest.raises(UnsafeArchive, match="100000 bytes"):
        safe_unpack(bomb, tmp_path / "u", max_total_bytes=50_000)
    assert not (tmp_path / "u").exists() and not (tmp_path / "outside.txt").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".u.")] == []


def test_a_source_without_a_redistribution_licence(tmp_path, server, capsys):
    body = wattameter_archive(tmp_path)
    recipes = recipe_file(tmp_path, server, "closed", body, licence="LicenseRef-research-only",
                          redistributable=False)
    out = tmp_path / "ds"
    # never offered for download without the explicit flag
    assert main(["get", "closed", "--out", str(out), "--recipes", str(recipes)]) == 2
    assert "no licence that allows redistribution" in capsys.readouterr().err
    assert server.requests == []
    assert main(["get", "--list", "--recipes", str(recipes), "--format", "json"]) == 0
    listed = {r["source"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["closed"]["download"].startswith("local copy only")
    # importable from a local copy (checked against the recipe all the same)
    local = tmp_path / "copy.tar.gz"
    local.write_bytes(body)
    assert main(["get", "closed", "--out", str(out), "--recipes", str(recipes),
                 "--from", str(local)]) == 0
    assert server.requests == [] and read_sources(out)[0]["redistributable"] is False
    card = (out / "README.md").read_text()
    assert "no redistribution licence" in card and "license: other" in card
    # upload refuses it unless forced
    assert upload.main([str(out), "--repo-id", "org/x", "--dry-run"]) == 1
    assert "without a redistribution licence" in capsys.readouterr().err
    assert upload.main([str(out), "--repo-id", "org/x", "--dry-run",
                        "--allow-unlicensed-sources"]) == 0


def test_a_local_copy_with_other_bytes_is_refused(tmp_path, server):
    recipes = recipe_file(tmp_path, server, "fixture", wattameter_archive(tmp_path))
    local = tmp_path / "copy.tar.gz"
    local.write_bytes(b"not the archive")
    with pytest.raises(ChecksumMismatch, match="the recipe says"):
        get_source("fixture", tmp_path / "ds", GetOptions(recipes_file=recipes, local_copy=local))


def test_a_summaries_source_of_many_files(tmp_path, server):
    task = task_folder(tmp_path / "src", RUNS)
    files = []
    for path in sorted(p for p in task.rglob("*") if p.is_file()):
        rel = path.relative_to(task.parent).as_posix()
        server.files["/bench/" + rel.replace(" ", "%20").replace("+", "%2B")] = path.read_bytes()
        files.append({"url": server.url + "/bench/" + rel.replace(" ", "%20").replace("+", "%2B"),
                      "path": rel, "size_bytes": path.stat().st_size,
                      "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    recipes = tmp_path / "r.yaml"
    recipes.write_text(json.dumps({
        "name": "bench", "title": "t", "licence": "Apache-2.0", "redistributable": True,
        "citation": "The ML.ENERGY Initiative", "source_url": "https://example.org",
        "format": "mlenergy-v2", "import_path": "chat", "files": files}))
    res = get_source("bench", tmp_path / "ds", GetOptions(recipes_file=recipes))
    assert len(res.run_ids) == 2 and len(server.requests) == len(files)


def test_unpinned_sources_need_a_flag(tmp_path, server):
    body = wattameter_archive(tmp_path)
    recipes = recipe_file(tmp_path, server, "fixture", body)
    data = json.loads(recipes.read_text())
    for f in data["recipes"][0]["files"]:
        f.pop("sha256")
        f.pop("size_bytes")
    recipes.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="--allow-unpinned"):
        get_source("fixture", tmp_path / "ds", GetOptions(recipes_file=recipes))
    res = get_source("fixture", tmp_path / "ds",
                     GetOptions(recipes_file=recipes, allow_unpinned=True))
    assert res.files[0].sha256 == hashlib.sha256(body).hexdigest() and not res.files[0].pinned


def test_every_builtin_recipe_names_its_licence_and_citation():
    recipes = builtin_recipes()
    assert {"mlenergy-v2-chat", "mlenergy-v2-code", "nlr-genai-power-profiles"} <= set(recipes)
    for r in recipes.values():
        assert r.licence and r.citation and r.source_url and isinstance(r.redistributable, bool)
    assert recipes["mlenergy-v2-chat"].pinned and recipes["mlenergy-v2-code"].pinned
    assert recipes["nlr-genai-power-profiles"].licence == "CC-BY-4.0"


def test_the_pinned_mlenergy_chat_recipe_is_the_shipped_sample_byte_for_byte(tmp_path):
    from llm_powertrace_ds.samples import HERE

    res = get_source("mlenergy-v2-chat", tmp_path / "ds",
                     GetOptions(local_copy=HERE / "mlenergy_v2"))
    assert len(res.files) == 193 and all(f.pinned for f in res.files)
    assert len(res.run_ids) == 191


def test_a_bad_recipe_is_named(tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps({"name": "x", "title": "t", "licence": "MIT", "citation": "c",
                               "source_url": "u", "format": "mlenergy-v2", "files": []}))
    with pytest.raises(Exception, match="redistributable") as info:
        load_recipes(bad)
    assert str(bad) in str(info.value)
    bad.write_text(json.dumps({"name": "x", "title": "t", "licence": "MIT", "citation": "c",
                               "source_url": "u", "format": "mlenergy-v2",
                               "redistributable": True,
                               "files": [{"url": "https://e/x", "path": "../x"}]}))
    with pytest.raises(Exception, match="files\\[0\\].path"):
        load_recipes(bad)


def test_download_interrupted_is_an_os_error():
    assert issubclass(DownloadInterrupted, OSError)


def test_the_uploaded_copy_keeps_the_sources_licence_and_citation(tmp_path, server, capsys):
    recipes = recipe_file(tmp_path, server, "fixture", wattameter_archive(tmp_path),
                          licence="Apache-2.0")
    out = tmp_path / "ds"
    assert main(["get", "fixture", "--out", str(out), "--recipes", str(recipes)]) == 0
    capsys.readouterr()
    assert upload.main([str(out), "--repo-id", "org/x", "--dry-run", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert "sources.json" in [f["path"] for f in plan["files"]]
    diff = "\n".join(plan["card_diff"])
    # the card of the copy still names the source's licence and citation
    assert "-license: apache-2.0" not in diff and "-- Citation: A. Author" not in diff
