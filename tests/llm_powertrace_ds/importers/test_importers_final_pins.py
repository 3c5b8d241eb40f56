"""Pins of the two importer behaviours the seventh session's complete mutation run left open.

A run without a GPU name decides the 1 s-average flag from its platform slug, read as words
(``h100_sxm_80gb`` → ``h100 sxm 80gb``: an underscore is a word character, so the slug itself
never matches a GPU family); and a stage label that could name a person, machine or path is
refused with an error that names the ``label`` field. A number with an underscore (``1_000``,
which numpy's float parsing reads) is refused as the exact parser refuses it, on every path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.assemble import is_1s_average
from llm_powertrace_ds.importers.values import numeric_converter

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


@pytest.mark.parametrize("cells", [["1_000", "2"], pa.chunked_array([["2", "1_000"]])])
def test_an_underscore_in_a_number_is_refused_on_every_path(cells) -> None:  # noqa: ANN001
    """A fast parse by numpy reads "1_000" as 1000.0; the exact parser refuses it.

    The fast path must accept nothing the per-value parser refuses (``values.TYPED_ATTR``), so
    a list of cells and an Arrow text column give the exact parser's error.
    """
    convert = numeric_converter(file=Path("log.csv"), field="power.draw [W]")
    with pytest.raises(InputError) as err:
        convert(cells, np.array([2, 3]))
    assert err.value.field == "power.draw [W]"
    assert err.value.line == (2 if isinstance(cells, list) else 3)
    assert "value '1_000' is not a number" in str(err.value)


@pytest.mark.parametrize("unit", [" W", ""])  # csv and csv,nounits
def test_an_underscore_in_a_logged_number_fails_the_import(tmp_path: Path, unit: str) -> None:
    log = tmp_path / "smi.csv"
    log.write_text("timestamp, index, power.draw [W]\n"
                   f"2024/05/01 10:00:00.000, 0, 50.0{unit}\n"
                   f"2024/05/01 10:00:00.100, 0, 1_000{unit}\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        import_file("nvidia-smi", log, workload="inference")
    assert (err.value.line, err.value.field) == (3, "power.draw")
    assert "1_000" in str(err.value) and "is not a number" in str(err.value)
