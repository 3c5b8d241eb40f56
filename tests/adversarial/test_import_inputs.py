"""Adversarial imports (issue 12, items 1, 3, 8, 9, 10, 17, 18), one table row per input.

Each row is a file a careless user or an attacker could hand to ``llm-powertrace import``, and
the exact refusal it gets.

Every refusal is one ``error:`` line naming the file, the line (where one exists) and the field,
no traceback, exit code 1, and nothing written under ``data/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from .conftest import visible_files

H = "timestamp, index, name, driver_version, power.draw [W], utilization.gpu [%]\n"


def smi(*rows: str, header: str = H) -> str:
    return header + "".join(r + "\n" for r in rows)


def row(t: str = "00:00:00.000", idx: str = "0", name: str = "NVIDIA H100 80GB HBM3",
        driver: str = "550.54.15", power: str = "100.0", util: str = "50") -> str:
    return f"2024/01/01 {t}, {idx}, {name}, {driver}, {power}, {util}"


def ok_rows(**kw: str) -> tuple[str, ...]:
    return tuple(row(t=f"00:00:0{i}.000", **kw) for i in range(3))


PT_HEADER = "run_id,timestamp,gpu_id,power_w,gpu_util_pct,stage\n"
PT_ROWS = "".join(f"r1,2024-01-01T00:00:0{i}.000Z,0,{100 + i},50,train\n" for i in range(3))


@dataclass
class Case:
    """One adversarial input and the refusal it must get."""

    name: str
    files: dict[str, str]
    fmt: str = "nvidia-smi"
    args: tuple[str, ...] = ()
    line: int | None = None
    field: str | None = None
    message: str = ""
    workload: str = "inference"


BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))

CASES = [
    # -- 1. free text from logs and meta files ------------------------------------------------
    Case("gpu_name is a path", {"log.csv": smi(*ok_rows(
        name="/home/alice/secret-host.corp.example.com"))}, field="gpu_name",
        message="looks like a file path"),
    Case("driver_version is a path", {"log.csv": smi(*ok_rows(driver="/home/alice/10.0.0.5"))},
         field="driver_version", message="looks like a file path"),
    Case("gpu name with an IP and user@host", {"log.csv": smi(*ok_rows(
        name="NVIDIA H100 on 10.1.2.3 alice@host"))}, field="gpu_name",
        message="holds an IP address"),
    Case("gpu name is a host name", {"log.csv": smi(*ok_rows(
        name="gpu-node-17.corp.example.com"))}, field="gpu_name", message="looks like a host name"),
    Case("meta model_name with an e-mail", {"log.csv": smi(*ok_rows()),
                                             "meta.json": '{"model_name": "ann@example.org"}'},
         args=("--meta", "{meta.json}"), field="model_name",
         message="looks like an e-mail address or user@host"),
    Case("meta grid_region is an IP", {"log.csv": smi(*ok_rows()),
                                        "meta.json": '{"grid_region": "10.0.0.5"}'},
         args=("--meta", "{meta.json}"), field="grid_region", message="holds an IP address"),
    Case("meta cuda_version is not a version", {"log.csv": smi(*ok_rows()),
                                                 "meta.json": '{"cuda_version": "latest"}'},
         args=("--meta", "{meta.json}"), field="cuda_version", message="is not a version"),
    # -- 3. control characters ----------------------------------------------------------------
    Case("ESC sequence in the gpu name", {"log.csv": smi(*ok_rows(
        name="NVIDIA H100\x1b[2J"))}, field="gpu_name", message="holds a control character"),
    Case("newline in a meta label", {"log.csv": smi(*ok_rows()),
                                     "meta.json": '{"model_label": "a\\n# injected"}'},
         args=("--meta", "{meta.json}"), field="model_label",
         message="holds a control character"),
    Case("ESC in a powertrace stage label", {"t.csv": PT_HEADER + PT_ROWS.replace(
        "train", "tr\x1b[31main")}, fmt="powertrace-csv", field="label",
        message="holds a control character", workload="finetune"),
    # -- 8. provenance keys in --meta ---------------------------------------------------------
    *[Case(f"meta sets {key}", {"t.csv": PT_HEADER + PT_ROWS,
                                "meta.json": f'{{"{key}": {value}}}'},
           fmt="powertrace-csv", args=("--meta", "{meta.json}"), field=key,
           message="is provenance the importer sets itself", workload="finetune")
      for key, value in (("sampler", '"cpu_proxy"'), ("workload", '"inference"'),
                         ("schema_version", '"0.1"'), ("host_hash", '"abc"'),
                         ("power_field", '"instant"'))],
    Case("nvidia-smi meta sets sampler", {"log.csv": smi(*ok_rows()),
                                          "meta.json": '{"sampler": "cpu_proxy"}'},
         args=("--meta", "{meta.json}"), field="sampler",
         message="a meta file may set: "),
    # -- 9. absurd values (the field is the log's column: what the user can find in the file) --
    Case("1e308 W", {"log.csv": smi(row(), row(t="00:00:01.000", power="1e308"))}, line=3,
         field="power.draw", message="is outside the physical range 0..5000"),
    Case("1e12 W", {"log.csv": smi(row(), row(t="00:00:01.000", power="1e12"))}, line=3,
         field="power.draw", message="outside the physical range"),
    Case("99,999 W", {"log.csv": smi(row(), row(t="00:00:01.000", power="99999"))}, line=3,
         field="power.draw", message="outside the physical range"),
    Case("utilisation 500 %", {"log.csv": smi(row(), row(t="00:00:01.000", util="500"))},
         line=3, field="utilization.gpu", message="outside the physical range 0..100"),
    Case("utilisation -5 %", {"log.csv": smi(row(), row(t="00:00:01.000", util="-5"))},
         line=3, field="utilization.gpu", message="outside the physical range 0..100"),
    Case("concurrency -5", {"log.csv": smi(*ok_rows()), "meta.json": '{"concurrency": -5}'},
         args=("--meta", "{meta.json}"), field="concurrency", message="is below 1"),
    Case("power limit 1e308", {"log.csv": smi(*ok_rows()),
                               "meta.json": '{"power_limit_w": 1e308}'},
         args=("--meta", "{meta.json}"), field="power_limit_w", message="outside"),
    # -- 10. two GPU models in one log --------------------------------------------------------
    Case("an H100 and an A100", {"log.csv": smi(row(), row(idx="1", name="NVIDIA A100-SXM4-80GB"),
                                                row(t="00:00:01.000"),
                                                row(t="00:00:01.000", idx="1",
                                                    name="NVIDIA A100-SXM4-80GB"))},
         field="name", message="the log mixes GPU models"),
    # -- 17. sizes derived from input ---------------------------------------------------------
    Case("a 6-month gap", {"log.csv": smi(row(), row(t="00:00:00.100"),
                                          row().replace("2024/01/01", "2024/07/01"))},
         line=4, field="timestamp", message="has a gap of 4368.0 h"),
    Case("a 130-year gap", {"log.csv": smi(row().replace("2024", "1995"),
                                           row().replace("2024", "2125"))},
         line=3, field="timestamp", message="has a gap of"),
    # -- 18. errors that named nothing or said too much ---------------------------------------
    Case("year 0", {"log.csv": smi(row().replace("2024", "0000"),
                                   row(t="00:00:01.000").replace("2024", "0000"))},
         line=2, field="timestamp", message="the date is outside 1990-2200"),
    Case("GPU index 99999", {"log.csv": smi(*ok_rows(idx="99999"))}, line=2, field="index",
         message="GPU index 99999 is outside 0..4095"),
    Case("YAML alias bomb in --meta", {"log.csv": smi(*ok_rows()), "meta.yaml": BOMB},
         args=("--meta", "{meta.yaml}"), line=1, message="expands to more than 10000 values"),
    # -- what held on main, kept holding ------------------------------------------------------
    Case("run id with ../", {"t.csv": PT_HEADER + PT_ROWS.replace("r1,", "../../etc,")},
         fmt="powertrace-csv", line=2, field="run_id", message="is not a usable run id",
         workload="finetune"),
    Case("YAML python tag in --meta", {"log.csv": smi(*ok_rows()),
                                       "meta.yaml": "model_name: !!python/object/apply:os.system ['echo pwned']\n"},
         args=("--meta", "{meta.yaml}"), line=1, message="not valid YAML"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_refused_with_one_line_naming_file_line_field(case, tmp_path, cli):
    for name, text in case.files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    log = next(iter(case.files))
    out = tmp_path / "ds"
    args = [str(tmp_path / a[1:-1]) if a.startswith("{") else a for a in case.args]
    res = cli(["import", case.fmt, tmp_path / log, "--out", out, "--workload", case.workload,
               *args])
    assert res.rc == 1
    line = res.error_line
    assert case.message in line
    where = re.match(r"error: '([^']+)'(?:, line (\d+))?(?:, field '([^']+)')?: ", line)
    assert where is not None, line
    assert where.group(1).startswith(str(tmp_path))
    if case.line is not None:
        assert where.group(2) == str(case.line)
    if case.field is not None:
        assert where.group(3) == case.field
    assert len(line) <= 2100  # InputError caps its reason at 2000 characters
    assert visible_files(out) == []


def test_refused_text_is_never_published_even_in_part(tmp_path, cli):
    """The refused host name appears nowhere in the folder (no split, no card, no file name)."""
    log = tmp_path / "log.csv"
    log.write_text(smi(*ok_rows(name="NVIDIA H100 on 10.1.2.3 alice@host")))
    out = tmp_path / "ds"
    assert cli(["import", "nvidia-smi", log, "--out", out, "--workload", "inference"]).rc == 1
    assert not out.exists() or not any("10_1_2_3" in p.name or "alice" in p.name
                                       for p in out.rglob("*"))


def test_a_clean_log_still_imports(tmp_path, cli):
    """The gate refuses what it must, not honest logs (the control case of the table)."""
    log = tmp_path / "log.csv"
    log.write_text(smi(*ok_rows()))
    out = tmp_path / "ds"
    res = cli(["import", "nvidia-smi", log, "--out", out, "--workload", "inference"])
    assert res.rc == 0, res.err
    assert any("/h100_sxm_80gb/" in p for p in visible_files(out))
