"""Pins of the two importer behaviours the seventh session's complete mutation run left open.

A run without a GPU name decides the 1 s-average flag from its platform slug, read as words
(``h100_sxm_80gb`` → ``h100 sxm 80gb``: an underscore is a word character, so the slug itself
never matches a GPU family); and a stage label that could name a person, machine or path is
refused with an error that names the ``label`` field.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.assemble import is_1s_average

from .test_powertrace_csv import their_json, trace_csv


@pytest.mark.parametrize(("slug", "expected"), [
    ("h100_sxm_80gb", True),   # Hopper: power.draw is a 1 s average
    ("l40s_48gb", True),       # Ada
    ("a100_sxm4_80gb", False),  # GA100: instantaneous
])
def test_1s_average_from_the_platform_slug_without_a_gpu_name(slug: str, expected: bool) -> None:
    assert is_1s_average("power_usage", None, slug) is expected
    assert is_1s_average("power_usage", "", slug) is expected  # an empty name is no name
    assert is_1s_average("instant", None, slug) is False


def test_a_private_stage_label_names_the_label_field(tmp_path: Path) -> None:
    path = trace_csv(tmp_path / "t.csv", gpus=1, ticks=3,
                     stages=["TRAIN", "/home/alice/ckpt", "TRAIN"])
    meta = their_json(tmp_path / "t.json", gpu_count=1)
    with pytest.raises(InputError) as err:
        import_file("powertrace-csv", path, workload="finetune", meta_path=meta)
    assert err.value.field == "label"
    message = str(err.value)
    assert "field 'label'" in message and "t.csv" in message and "\n" not in message
