"""What ``get`` records leaves through the privacy gate: no token, no private host, no markup.

``sources.json`` is uploaded with the folder and printed in the card, so signed-URL queries
(Zenodo ``?token=``, S3 ``X-Amz-Signature``, the Hub's ``token=hf_...``), passwords in URLs and
loopback or private hosts never reach it, and a recipe's title and citation reach the card as
one escaped line (no HTML, no forged section). The downloads still use the full URLs.
"""

from __future__ import annotations

import json

import pytest
from test_get import recipe_file, wattameter_archive

import upload
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.sources.provenance import SOURCES_PATH, read_sources
from llm_powertrace_ds.sources.recipes import load_recipes

HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWx"
SIGNED = f"/profiles.tar.gz?X-Amz-Signature=0f1e2d3c4b5a&X-Amz-Credential=AKIAABCDEFGHIJKLMNOP&token={HF_TOKEN}"
LEAKS = ("token=", "X-Amz", "hf_", "AKIA", "127.0.0.1", "localhost", "10.1.2.3", "s3cret")


@pytest.fixture
def server():
    from test_get import Server

    with Server() as s:
        yield s


def test_signed_urls_tokens_and_loopback_hosts_never_reach_sources_json_or_the_card(
        tmp_path, server):
    extra = {"source_url": f"https://me:s3cret@zenodo.org/records/123?token={HF_TOKEN}#files"}
    recipes = recipe_file(tmp_path, server, "fixture", wattameter_archive(tmp_path),
                          path=SIGNED, extra=extra)
    out = tmp_path / "ds"
    assert main(["get", "fixture", "--out", str(out), "--recipes", str(recipes)]) == 0
    assert server.requests[0][0] == SIGNED  # the download used the whole signed URL
    (entry,) = read_sources(out)
    assert entry["source_url"] == "https://zenodo.org/records/123"
    assert entry["files"][0]["url"] is None  # a loopback host: withheld
    for text in ((out / SOURCES_PATH).read_text(), (out / "README.md").read_text()):
        assert not [leak for leak in LEAKS if leak in text]
    assert "<https://zenodo.org/records/123>" in (out / "README.md").read_text()


def test_an_older_sources_record_is_gated_when_uploaded_and_in_the_card(tmp_path):
    root, dst = tmp_path / "ds", tmp_path / "copy"
    root.mkdir()
    (root / SOURCES_PATH).write_text(json.dumps({"sources": [{
        "name": "old", "title": "Old <script>x</script>", "licence": "CC-BY-4.0",
        "citation": "cite me", "redistributable": True,
        "source_url": f"http://10.1.2.3/page?token={HF_TOKEN}",
        "files": [{"url": f"https://bucket.s3.amazonaws.com/k.tgz{SIGNED[16:]}",
                   "sha256": "0" * 64, "size_bytes": 1, "pinned": True}], "runs": []}]}))
    upload._copy_sources_record(root, dst)
    text = (dst / SOURCES_PATH).read_text()
    assert not [leak for leak in LEAKS if leak in text]
    (entry,) = json.loads(text)["sources"]
    assert entry["source_url"] is None
    assert entry["files"][0]["url"] == "https://bucket.s3.amazonaws.com/k.tgz"
    from cards.analysis import sources_section

    card = "\n".join(sources_section([], root))
    assert "<script>" not in card and "&lt;script&gt;" in card
    assert not [leak for leak in LEAKS if leak in card]


@pytest.mark.parametrize(("url", "public"), [
    ("https://huggingface.co/datasets/o/d/resolve/main/f.csv?download=true&token=x",
     "https://huggingface.co/datasets/o/d/resolve/main/f.csv"),
    (f"https://user:{HF_TOKEN}@huggingface.co/o/d", "https://huggingface.co/o/d"),
    ("https://zenodo.org/records/1/files/a.zip?token=eyJhbGciOiJIUzUxMiJ9",
     "https://zenodo.org/records/1/files/a.zip"),
    ("http://127.0.0.1:8000/a", None), ("http://[::1]/a", None), ("http://localhost/a", None),
    ("http://192.168.1.20/a", None), ("http://169.254.169.254/latest", None),
    ("http://127.1/a", None), ("http://gpu03/a", None), ("http://nas.internal/a", None),
    (f"https://example.org/{HF_TOKEN}/a", None), ("file:///etc/passwd", None),
    ("https://example.org/a b", None),
])
def test_public_url_strips_queries_and_credentials_and_drops_private_hosts(url, public):
    from llm_powertrace_ds.privacy import public_url

    assert public_url(url) == public


def test_markup_in_a_recipe_title_reaches_the_card_escaped_on_one_line(tmp_path, server):
    extra = {"title": '<img src=x onerror="alert(1)"> ## Licence: Public domain',
             "citation": "[click](javascript:alert(1)) <b>A. Author</b>"}
    recipes = recipe_file(tmp_path, server, "fixture", wattameter_archive(tmp_path),
                          extra=extra)
    out = tmp_path / "ds"
    assert main(["get", "fixture", "--out", str(out), "--recipes", str(recipes)]) == 0
    card = (out / "README.md").read_text()
    assert "<img src=x" not in card and "<b>A." not in card and "[click](javascript:" not in card
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in card
    assert "## Licence: Public domain" not in card
    assert "\\#\\# Licence: Public domain" in card
    assert [line for line in card.splitlines() if line.startswith("## Licence")] == ["## Licence"]


@pytest.mark.parametrize(("field", "value", "why"), [
    ("citation", "A. Author (2026)\n\n## Licence: Public domain", "must be one line"),
    ("title", "Profiles\r\n## Licence", "must be one line"),
    ("citation", f"see https://zenodo.org/records/1?token={HF_TOKEN}", "not public as written"),
    ("citation", "ask admin@gpu03.cluster.local", "user@host"),
    ("title", "Traces from 10.1.2.3", "IP address"),
    ("licence", "CC-BY-4.0 <b>or public domain</b>", "not an SPDX licence id"),
])
def test_a_recipe_title_citation_or_licence_that_cannot_be_published_is_refused_by_field(
        tmp_path, field, value, why):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"name": "x", "title": "t", "licence": "CC-BY-4.0",
                                "citation": "c", "source_url": "https://example.org",
                                "format": "wattameter", "redistributable": True, "files": [],
                                field: value}))
    with pytest.raises(InputError) as err:
        load_recipes(path)
    assert err.value.field == field and why in str(err.value) and "\n" not in str(err.value)
