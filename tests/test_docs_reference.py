"""The reference pages under docs/reference/ are generated from the code and must be fresh."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = module
    spec.loader.exec_module(module)
    return module


GEN = _generator()
PAGES = GEN.generate()


@pytest.mark.parametrize("path", sorted(PAGES), ids=lambda p: p.name)
def test_committed_reference_page_equals_the_generator_output(path):
    committed = path.read_text(encoding="utf-8") if path.exists() else ""
    assert committed == PAGES[path], (
        f"{path.relative_to(REPO)} is stale: run `python docs/gen_reference.py` and commit it")


def test_schema_page_lists_every_column_of_every_config():
    from llm_powertrace_ds import schema

    text = PAGES[GEN.OUT_DIR / "schema.md"]
    for config in schema.ALL_CONFIGS:
        assert f"## {config}\n" in text
        for col in schema.COLUMNS[config]:
            assert f"| `{col.name}` |" in text, (config, col.name)


def test_metrics_page_gives_every_runs_metric_a_definition():
    from cards import metric_docs

    text = PAGES[GEN.OUT_DIR / "metrics.md"]
    for col in metric_docs.metric_columns():
        line = next((x for x in text.splitlines() if x.startswith(f"| `{col.name}` |")), None)
        assert line is not None, col.name
        assert line.rstrip(" |").rsplit("|", 1)[-1].strip(), col.name


def test_cli_page_names_every_subcommand_and_option():
    import argparse

    from llm_powertrace_ds.cli import build_parser

    text = PAGES[GEN.OUT_DIR / "cli.md"]
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, child in sub.choices.items():
        assert f"### llm-powertrace {name}\n" in text, name
        for action in child._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in text, (name, flag)
    assert "## upload.py\n" in text and "`--create-pr`" in text


def test_check_mode_names_a_stale_page_and_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(GEN, "OUT_DIR", tmp_path)
    (tmp_path / "cli.md").write_text("old\n", encoding="utf-8")
    assert GEN.main(["--check"]) == 1
    assert "cli.md: stale" in capsys.readouterr().out
    assert (tmp_path / "cli.md").read_text(encoding="utf-8") == "old\n"
    assert GEN.main([]) == 0
    assert GEN.main(["--check"]) == 0


def test_site_hook_renders_tested_fences_as_plain_code():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", REPO / "docs" / "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = "a\n```bash test\nls\n```\n```python test\nx = 1\n```\n```bash\nmake\n```\n"
    assert hooks.on_page_markdown(page) == "a\n```bash\nls\n```\n```python\nx = 1\n```\n```bash\nmake\n```\n"


def test_reliability_page_names_tests_that_exist():
    """Every test the reliability table cites exists: a renamed test cannot leave a stale row."""
    import fnmatch
    import re

    text = (REPO / "docs" / "reliability.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows
    for row in rows:
        cited = row.rstrip(" |").rsplit("|", 1)[-1]
        current: Path | None = None
        for ref in re.findall(r"`([^`]+)`", cited):
            name, _, func = ref.partition("::")
            if name:
                path = REPO / name if "/" in name else REPO / "tests" / "adversarial" / name
                assert path.is_file(), f"reliability.md cites {ref}, but {path} does not exist"
                current = path
            if func:
                assert current is not None, ref
                defs = re.findall(r"^def (test_\w+)", current.read_text(encoding="utf-8"), re.M)
                assert fnmatch.filter(defs, func), f"reliability.md cites {ref}: no such test"
