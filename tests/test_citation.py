"""CITATION.cff: valid Citation File Format 1.2.0 fields, in step with pyproject.toml."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _project(key: str) -> str:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    return re.search(rf'^{key} = "([^"]+)"$', text, re.M).group(1)  # type: ignore[union-attr]


def test_citation_cff_has_the_required_fields_and_matches_the_package():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors"):  # required by CFF 1.2.0
        assert cff.get(key), key
    assert all("name" in a or "family-names" in a for a in cff["authors"])
    assert str(cff["version"]) == _project("version")
    assert cff["license"] == _project("license")
    assert cff["type"] == "software"
    for ref in cff.get("references", []):
        assert ref.get("type") and ref.get("title") and ref.get("authors"), ref
