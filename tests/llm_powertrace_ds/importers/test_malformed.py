"""Malformed inputs: one clear one-line error naming file, line and field; nothing written changes.

Table-driven: each case writes its bad file(s) into ``tmp_path`` and says which file, line and
field the error must name. Each case is imported twice: through ``import_file`` (the error) and
through ``cli.main`` into a copy of a dataset folder that already holds published runs (exit code
1, a one-line ``error:``, and every file of the folder byte-for-byte unchanged). Hypothesis then
throws random rows at both importers: they either import or raise ``InputError``, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import (
    SUMMARY_FORMATS,
    import_file,
    import_summaries,
    load_meta_file,
)

from .test_nvidia_smi import indexed_log, stamp
from .test_powertrace_csv import HEADER as PT_HEADER
from .test_powertrace_csv import RUN_ID, iso, their_json, trace_csv

SMI_HEADER = "timestamp,index,power.draw [W]"


def smi_rows(*rows: str, header: str = SMI_HEADER) -> str:
    return "\n".join([header, *rows]) + "\n"


def good_smi(n: int = 3) -> list[str]:
    return [f"{stamp(100 * k)},0,{10 + k}.5" for k in range(n)]


def pt_row(ms: int, gpu: int = 0, power: str = "50.0", run_id: str = RUN_ID) -> str:
    return f"{run_id},{iso(ms)},{ms / 1000},{gpu},{power},1980,1,0,,,,"


def pt_rows(*rows: str) -> str:
    return "\n".join([PT_HEADER, *rows]) + "\n"


@dataclass
class Case:
    """One malformed input.

    Attributes:
        id: test id.
        fmt: importer format.
        files: file name -> text (or bytes) written into the case folder.
        names: the file the error must name.
        line: the line the error must name (``None``: no line applies).
        field: the field the error must name (``None``: no field applies).
        meta: the file passed as ``meta_path``.
        workload: ``--workload``.
        match: a further substring of the message.
    """

    id: str
    fmt: str
    files: dict[str, str | bytes]
    names: str
    line: int | None
    field: str | None
    meta: str | None = None
    workload: str = "inference"
    match: str = ""
    extra: dict = field(default_factory=dict)


CASES = [
    Case("smi-empty-file", "nvidia-smi", {"a.csv": ""}, "a.csv", 1, "header"),
    Case("smi-blank-lines-only", "nvidia-smi", {"a.csv": "\n\n"}, "a.csv", 2, "header"),
    Case("smi-header-only", "nvidia-smi", {"a.csv": smi_rows()}, "a.csv", 2, "power.draw"),
    Case("smi-unknown-columns-only", "nvidia-smi", {"a.csv": "foo,bar [W]\n1,2\n"}, "a.csv", 1,
         "timestamp"),
    Case("smi-no-power-column", "nvidia-smi",
         {"a.csv": f"timestamp,utilization.gpu [%]\n{stamp(0)},5\n"}, "a.csv", 1, "power.draw"),
    Case("smi-non-numeric-power", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi(2), f"{stamp(300)},0,abc")}, "a.csv", 4, "power.draw",
         match="'abc'"),
    Case("smi-non-numeric-power-units-in-values", "nvidia-smi",
         {"a.csv": f"timestamp, power.draw [W]\n{stamp(0)}, 1.0 W\n{stamp(100)}, abc W\n"},
         "a.csv", 3, "power.draw"),
    Case("smi-wrong-unit-in-header", "nvidia-smi",
         {"a.csv": f"timestamp, power.draw [kW]\n{stamp(0)}, 1.0\n"}, "a.csv", 1, "power.draw"),
    Case("smi-wrong-unit-in-value", "nvidia-smi",
         {"a.csv": f"timestamp, power.draw [W]\n{stamp(0)}, 1.0 mW\n"}, "a.csv", 2, "power.draw"),
    Case("smi-negative-power", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi(2), f"{stamp(300)},0,-4.0")}, "a.csv", 4, "power.draw"),
    Case("smi-bad-timestamp", "nvidia-smi",
         {"a.csv": smi_rows(good_smi(1)[0], "yesterday,0,10")}, "a.csv", 3, "timestamp"),
    Case("smi-impossible-date", "nvidia-smi",
         {"a.csv": smi_rows(good_smi(1)[0], "2024/13/45 10:00:00.000,0,10")}, "a.csv", 3,
         "timestamp"),
    Case("smi-time-goes-backwards", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi(3), f"{stamp(50)},0,3.0")}, "a.csv", 5, "timestamp",
         match="goes back"),
    Case("smi-time-backwards-other-gpu-ok-this-not", "nvidia-smi",
         {"a.csv": smi_rows(f"{stamp(0)},0,1", f"{stamp(0)},1,1", f"{stamp(100)},0,1",
                            f"{stamp(90)},1,1", f"{stamp(80)},1,1")}, "a.csv", 6, "timestamp"),
    Case("smi-time-backwards-no-gpu-column", "nvidia-smi",
         {"a.csv": f"timestamp, power.draw [W]\n{stamp(0)}, 1 W\n{stamp(100)}, 1 W\n"
                   f"{stamp(200)}, 1 W\n{stamp(150)}, 1 W\n"}, "a.csv", 5, "timestamp"),
    Case("smi-repeated-timestamp", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi(2), f"{stamp(100)},0,3.0")}, "a.csv", 4, "timestamp",
         match="repeats"),
    Case("smi-short-line-mid-file", "nvidia-smi",
         {"a.csv": smi_rows(good_smi(1)[0], f"{stamp(100)},0", *good_smi(3)[2:])}, "a.csv", 3,
         "power.draw [W]"),
    Case("smi-bad-gpu-index", "nvidia-smi",
         {"a.csv": smi_rows(good_smi(1)[0], f"{stamp(100)},x,1.0")}, "a.csv", 3, "index"),
    Case("smi-all-power-na", "nvidia-smi",
         {"a.csv": smi_rows(f"{stamp(0)},0,[N/A]", f"{stamp(100)},0,[N/A]")}, "a.csv", 2,
         "power.draw"),
    Case("meta-yaml-not-a-mapping", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi()), "meta.yaml": "- model_name\n- batch_size\n"},
         "meta.yaml", 1, None, meta="meta.yaml", match="mapping"),
    Case("meta-yaml-unparsable", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi()), "meta.yaml": "model_name: x\nbad: [1, 2\n"},
         "meta.yaml", 3, None, meta="meta.yaml", match="YAML"),
    Case("meta-json-unparsable", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi()), "meta.json": '{\n "model_name": nope\n}'},
         "meta.json", 2, None, meta="meta.json", match="JSON"),
    Case("meta-not-utf8", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi()), "meta.yaml": b"\xff\xfe\x00bad"},
         "meta.yaml", 1, None, meta="meta.yaml"),
    Case("meta-unknown-keys", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi()), "meta.json": '{"model_name": "x", "hostname": "n1"}'},
         "meta.json", None, "hostname", meta="meta.json", match="accepted: "),
    Case("meta-reserved-key", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi()), "meta.json": '{"run_id": "mine"}'},
         "meta.json", None, "run_id", meta="meta.json"),
    Case("meta-bad-value", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi()), "meta.yaml": "concurrency: many\n"},
         "meta.yaml", None, "concurrency", meta="meta.yaml"),
    Case("meta-bad-family", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi()), "meta.yaml": "model_family: llama3\n"},
         "meta.yaml", None, "model_family", meta="meta.yaml"),
    Case("sidecar-unparsable", "nvidia-smi",
         {"a.csv": smi_rows(*good_smi()), "a.job_info.yaml": "job: [\n"},
         "a.job_info.yaml", 2, None),
    Case("pt-empty-file", "powertrace-csv", {"t.csv": ""}, "t.csv", 1, "header",
         workload="finetune"),
    Case("pt-header-only", "powertrace-csv", {"t.csv": pt_rows()}, "t.csv", 2, "power_w",
         workload="finetune"),
    Case("pt-missing-gpu-id", "powertrace-csv",
         {"t.csv": "run_id,timestamp,power_w\nr,2026-05-01T00:00:00Z,1\n"}, "t.csv", 1,
         "gpu_id", workload="finetune"),
    Case("pt-unknown-columns-only", "powertrace-csv", {"t.csv": "a,b,c\n1,2,3\n"}, "t.csv", 1,
         "timestamp", workload="finetune"),
    Case("pt-non-numeric-power", "powertrace-csv",
         {"t.csv": pt_rows(pt_row(0), pt_row(100, power="abc"))}, "t.csv", 3, "power_w",
         workload="finetune"),
    Case("pt-time-goes-backwards", "powertrace-csv",
         {"t.csv": pt_rows(pt_row(0), pt_row(0, 1), pt_row(100), pt_row(50))}, "t.csv", 5,
         "timestamp", workload="finetune"),
    Case("pt-truncated-last-line", "powertrace-csv",
         {"t.csv": pt_rows(pt_row(0), pt_row(100)) + f"{RUN_ID},{iso(200)},0.2,0,5"}, "t.csv",
         4, "sm_clock_mhz", workload="finetune"),
    Case("pt-bad-gpu-id", "powertrace-csv",
         {"t.csv": pt_rows(pt_row(0), pt_row(100).replace(",0,50.0", ",1.5,50.0"))}, "t.csv", 3,
         "gpu_id", workload="finetune"),
    Case("pt-meta-not-json", "powertrace-csv",
         {"t.csv": pt_rows(pt_row(0)), "m.json": "run_id: x\n"}, "m.json", 1, None,
         meta="m.json", workload="finetune"),
    Case("pt-meta-a-list", "powertrace-csv",
         {"t.csv": pt_rows(pt_row(0)), "m.json": "[1, 2]"}, "m.json", 1, None,
         meta="m.json", workload="finetune"),
    Case("pt-meta-bad-parallelism", "powertrace-csv",
         {"t.csv": pt_rows(pt_row(0)), "m.json": json.dumps({"parallelism": "lots"})},
         "m.json", None, "parallelism", meta="m.json", workload="finetune"),
    Case("pt-meta-bad-sequence-length", "powertrace-csv",
         {"t.csv": pt_rows(pt_row(0)), "m.json": json.dumps({"sequence_length": "long"})},
         "m.json", None, "sequence_length", meta="m.json", workload="finetune"),
]


def write_case(case: Case, folder: Path) -> tuple[Path, Path | None]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in case.files.items():
        target = folder / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    log_file = next(folder / n for n in case.files if n.endswith(".csv"))
    return log_file, (folder / case.meta if case.meta else None)


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file (and ``<dir>`` for every folder) under root."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "<dir>"
    return out


@pytest.fixture(scope="module")
def populated(tmp_path_factory) -> Path:
    """A dataset folder that already holds published runs of both formats."""
    base = tmp_path_factory.mktemp("populated")
    root = base / "ds"
    log_file = indexed_log(base / "good.csv")
    assert main(["import", "nvidia-smi", str(log_file), "--out", str(root),
                 "--workload", "inference"]) == 0
    csv_path = trace_csv(base / "good-pt.csv", ticks=5)
    meta = their_json(base / "good-pt.json")
    assert main(["import", "powertrace-csv", str(csv_path), "--meta", str(meta), "--out",
                 str(root), "--workload", "finetune"]) == 0
    assert len(list(root.rglob("*.arrow"))) == 4
    return root


def check_message(exc: InputError, case: Case, named: Path) -> None:
    msg = str(exc)
    assert "\n" not in msg, msg
    assert f"'{named}'" in msg, msg
    if case.line is not None:
        assert f"line {case.line}" in msg, msg
    if case.field is not None:
        assert f"field '{case.field}'" in msg, msg
    assert case.match in msg, msg


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_input_is_one_clear_error(case, tmp_path):
    log_file, meta = write_case(case, tmp_path / "in")
    with pytest.raises(InputError) as info:
        import_file(case.fmt, log_file, workload=case.workload, meta_path=meta)
    check_message(info.value, case, tmp_path / "in" / case.names)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_input_changes_nothing_written(case, tmp_path, populated, capsys):
    root = tmp_path / "ds"
    shutil.copytree(populated, root)
    before = snapshot(root)
    log_file, meta = write_case(case, tmp_path / "in")
    args = ["import", case.fmt, str(log_file), "--out", str(root), "--workload", case.workload]
    args += ["--meta", str(meta)] if meta else []
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: ") and case.names in err[0], err
    assert snapshot(root) == before


def test_load_meta_file(tmp_path):
    (tmp_path / "m.yml").write_text("model_name: x\nbatch_size: 4\n", encoding="utf-8")
    assert load_meta_file(tmp_path / "m.yml") == {"model_name": "x", "batch_size": 4}
    (tmp_path / "m.json").write_text('{"model_name": "x"}', encoding="utf-8")
    assert load_meta_file(tmp_path / "m.json") == {"model_name": "x"}
    (tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    with pytest.raises(InputError, match="got nothing"):
        load_meta_file(tmp_path / "empty.yaml")
    with pytest.raises(InputError, match="no such file"):
        load_meta_file(tmp_path / "missing.yaml")


def test_missing_file_and_bad_arguments(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        import_file("nvidia-smi", tmp_path / "nope.csv", workload="inference")
    path = indexed_log(tmp_path / "a.csv")
    with pytest.raises(InputError, match="field 'format'"):
        import_file("no-such-format", path, workload="inference")
    with pytest.raises(InputError, match="field 'workload'"):
        import_file("nvidia-smi", path, workload="training")
    with pytest.raises(InputError, match="field 'num_gpus'"):
        import_file("nvidia-smi", path, workload="inference", num_gpus=0)


SMI_CELLS = [stamp(0), stamp(100), stamp(50), "2024/02/30 00:00:00.000", "0", "1", "-1", "12.5",
             "12.5 W", "[N/A]", "[Not Supported]", "abc", "", " ", '"', "0x4", "1e3", "nan",
             "timestamp", "power.draw [W]", "index", "\t", "é", "1,2"]
PT_CELLS = [iso(0), iso(100), iso(50), RUN_ID, "other", "0", "1", "2.5", "-3", "", "abc",
            "warmup", "2026-05-01T00:00:00+02:00", "1e400", '"x"']


def fuzz_body(rows: list[list[str]]) -> str:
    return "\n".join(",".join(r) for r in rows)


def _expect_run_or_input_error(fmt: str, text: str, header: str, workload: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.csv"
        path.write_text(header + text, encoding="utf-8")
        try:
            run = import_file(fmt, path, workload=workload)
        except InputError as exc:
            msg = str(exc)
            assert "\n" not in msg and f"'{path}'" in msg and " line " in f" {msg}", msg
        else:
            assert run.devices and all(len(d) > 0 for d in run.devices)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.sampled_from(SMI_CELLS), max_size=5), max_size=8),
       st.sampled_from([SMI_HEADER + "\n", "timestamp, power.draw [W]\n", ""]))
def test_fuzz_nvidia_smi_only_input_errors(rows, header):
    _expect_run_or_input_error("nvidia-smi", fuzz_body(rows), header, "inference")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.sampled_from(PT_CELLS), min_size=10, max_size=13), max_size=6))
def test_fuzz_powertrace_csv_only_input_errors(rows):
    _expect_run_or_input_error("powertrace-csv", fuzz_body(rows), PT_HEADER + "\n", "finetune")


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=120))
def test_fuzz_arbitrary_text(text):
    _expect_run_or_input_error("nvidia-smi", text, "", "inference")


def _where(exc: pytest.ExceptionInfo) -> tuple:
    return exc.value.reason, exc.value.file, exc.value.line, exc.value.field


@pytest.mark.parametrize("fmt", ["bogus", "MLENERGY-V2", "nvidia-smi", ""])
def test_unknown_summaries_format_is_one_exact_error(tmp_path, fmt):
    assert SUMMARY_FORMATS == ("mlenergy-v2",)
    with pytest.raises(InputError) as exc:
        import_summaries(fmt, tmp_path)
    reason = f"unknown summaries format {fmt!r}; known: mlenergy-v2"
    assert _where(exc) == (reason, None, None, "format")
    assert str(exc.value) == f"field 'format': {reason}"


def test_import_file_missing_file_names_it(tmp_path):
    path = tmp_path / "nope.csv"
    with pytest.raises(InputError) as exc:
        import_file("nvidia-smi", path, workload="inference")
    assert (exc.value.reason, exc.value.file, exc.value.line, exc.value.field, str(exc.value)) == (
        "no such file", str(path), None, None, f"'{path}': no such file")
