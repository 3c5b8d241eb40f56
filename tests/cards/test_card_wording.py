"""The card's wording: flags sentence, citation, limitations, numbers formatted for people."""

from __future__ import annotations

import doctest
import re

import numpy as np
import pytest

from cards import builder
from cards.builder import fmt_value, render_card
from llm_powertrace_ds import formatting, shards


@pytest.mark.parametrize("module", [formatting])
def test_formatting_doctests(module):
    res = doctest.testmod(module)
    assert res.attempted >= 1 and res.failed == 0


def test_plural_doctest_and_no_run_s_in_the_card(card):
    tester = doctest.DocTestRunner()
    for t in doctest.DocTestFinder().find(builder.plural, "plural",
                                          globs={"plural": builder.plural}):
        tester.run(t)
    assert tester.tries == 1 and tester.failures == 0
    assert not re.findall(r"\w+\(s\)", card.split("\n---\n", 1)[1])  # "run(s)"; "(s)" units are fine


def test_flags_sentence_has_no_double_negative():
    tester = doctest.DocTestRunner()
    for t in doctest.DocTestFinder().find(builder.flags_sentence, "flags_sentence",
                                          globs={"flags_sentence": builder.flags_sentence}):
        tester.run(t)
    assert tester.tries == 2 and tester.failures == 0
    assert builder.flags_sentence([{"quality_flags": []}] * 25) == "No run carries a quality flag."
    text = builder.flags_sentence([{"quality_flags": ["gap"]}] * 3)
    assert text == "3 of 3 runs carry at least one quality flag."


@pytest.mark.parametrize("value,text", [
    (float(np.float32(1e-4)), "1e-4"), (24050.31, "24050"), (2.0e-4, "2e-4"), (0.5, "0.5"),
    (123.456789, "123.457"), (float(np.float32(0.1)), "0.1"), (3.0, "3"), (1.5e12, "1.5e12"),
])
def test_numbers_for_people(value, text):
    assert fmt_value(value) == text


@pytest.fixture
def card(tmp_path, make_run):
    root = tmp_path / "ds"
    shards.publish_run(root, make_run("a", learning_rate=float(np.float32(1e-4)),
                                      model_params=124_000_000, tokens=24_050))
    shards.publish_run(root, make_run("b", platform="cpu_proxy", sampler="cpu_proxy", seed=1,
                                      quality_flags=["cpu_proxy"]))
    return render_card(root, builder.CardOptions(repo_id="org/llm-powertrace"))


def test_card_prose_numbers(card):
    body = card.split("\n---\n", 1)[1]
    assert "9.99999" not in body and "carry no quality flag" not in body
    # no exponent among plain numbers: only in a number's own short form (1e-4), never e+NN
    assert not re.search(r"\d\.\d+e\+\d\d", body), re.findall(r"\S*\d\.\d+e\+\d\d\S*", body)
    assert "`1e-4`" in body  # learning_rate in the axes table


def test_card_citation_and_limitations(card):
    cite = card[card.index("## Citation"):card.index("## Changelog")]
    entry = cite[cite.index("@misc{llm_powertrace_dataset"):cite.index("}\n\n@misc")]
    for field in ("title", "author", "year", "version", "publisher", "howpublished", "license"):
        assert re.search(rf"^  {field} +=", entry, re.M), field
    assert "https://huggingface.co/datasets/org/llm-powertrace" in entry
    assert "year         = {2026}" in entry
    assert "@misc{llm_powertrace_paper" in cite and builder.PAPER_TITLE in cite
    lim = card[card.index("## Limitations and intended use"):]
    assert "**Intended use.**" in lim and "GPU power only" in lim
    assert "1 of 2 runs is `cpu_proxy` data" in lim


def test_a_short_run_row_size_reads_in_bytes_or_kb_not_zero_mb(card):
    note = next(line for line in card.splitlines() if line.startswith("Long rows:"))
    size = re.search(r"about ([\d.,]+ [kMG]?B) per row", note)
    assert size and "0.0 MB" not in note, note
    assert size.group(1).endswith((" B", " kB")), note  # a test run is seconds long
