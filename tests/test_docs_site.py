"""The built documentation opens from disk: page links are files, not directory listings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_built_site_links_pages_as_files(tmp_path):
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                           str(site)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    index = (site / "index.html").read_text(encoding="utf-8")
    links = set(re.findall(r'href="([^"#:]+)"', index))
    pages = [link for link in links if not link.startswith(("css/", "js/", "assets/", "search/"))
             and not link.endswith((".css", ".js", ".png", ".ico", ".xml"))]
    assert "analyst-guide.html" in pages and "reference/api.html" in pages
    for link in pages:  # every page link names a file that exists: nothing ends in a folder
        assert not link.endswith("/") or link == "./", link
        target = (site / link).resolve()
        assert target.is_file() or (target / "index.html").is_file(), link
