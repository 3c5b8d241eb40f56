"""Unknown split, config, metric and axis names are errors that list the valid ones (rc 1).

A wrong ``--split`` used to print an empty table with exit code 0. Every subcommand that takes
``--split`` is found in the parser itself, so a new one without a case here fails the test.
"""

from __future__ import annotations

import argparse

import pytest

from llm_powertrace_ds import cli, shards

# argv for each subcommand that takes --split, with {ds} the dataset and {out} a scratch path
SPLIT_ARGV = {
    "metrics": ["metrics", "{ds}"],
    "compare": ["compare", "{ds}"],
    "fit": ["fit", "{ds}", "--n-boot", "10"],
    "plot": ["plot", "{ds}", "--metric", "energy_j", "--axis", "batch_size", "--out", "{out}"],
    "export": ["export", "{ds}", "--config", "finetune", "--out", "{out}"],
}


def _commands_with(option: str) -> list[str]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(name for name, p in sub.choices.items()
                  if any(option in a.option_strings for a in p._actions))


@pytest.fixture
def ds(tmp_path, make_run):
    root = tmp_path / "ds"
    shards.publish_run(root, make_run("a", platform="l40s"), refresh_card=False)
    shards.publish_run(root, make_run("b", platform="cpu_proxy", sampler="cpu_proxy", seed=1))
    return root


def _run(capsys, argv):
    code = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def test_every_split_command_has_a_case():
    assert _commands_with("--split") == sorted(SPLIT_ARGV)


@pytest.mark.parametrize("command", sorted(SPLIT_ARGV))
@pytest.mark.parametrize("split,hint", [("h100_sxm_80gb", None), ("cpu-proxy", "cpu_proxy")])
def test_unknown_split(command, split, hint, ds, tmp_path, capsys):
    argv = [a.format(ds=ds, out=tmp_path / "out.png") for a in SPLIT_ARGV[command]]
    code, err = _run(capsys, argv + ["--split", split])
    assert code == 1, err
    assert len(err) == 1, err  # one line, no --debug hint: this is not an unexpected error
    assert f"unknown split {split!r}" in err[0] and "valid: cpu_proxy, l40s" in err[0]
    if hint:
        assert f"did you mean {hint!r}" in err[0]
    assert not (tmp_path / "out.png").exists()


@pytest.mark.parametrize("command", sorted(SPLIT_ARGV))
def test_a_valid_split_still_works(command, ds, tmp_path, capsys):
    if command in ("fit", "plot"):
        pytest.skip("needs a sweep of runs (tested in test_cli_analysis)")
    argv = [a.format(ds=ds, out=tmp_path / "out.parquet") for a in SPLIT_ARGV[command]]
    code, err = _run(capsys, argv + ["--split", "l40s"])
    assert code == 0, err


@pytest.mark.parametrize("argv,message", [
    (["metrics", "{ds}", "--config", "finetune_run"], "unknown config 'finetune_run'; did you "
     "mean 'finetune_runs'?"),
    (["export", "{ds}", "--config", "fintune", "--out", "{out}"], "did you mean 'finetune'"),
    (["plot", "{ds}", "--metric", "energy_per_tokn_j", "--axis", "model_params", "--out", "{out}"],
     "unknown metric 'energy_per_tokn_j'; did you mean 'energy_per_token_j'?"),
    (["plot", "{ds}", "--metric", "energy_j", "--axis", "batch_sise", "--out", "{out}"],
     "unknown axis 'batch_sise'; did you mean 'batch_size'?"),
    (["predict", "{out}", "--set", "foo=3", "platform=l40s"], "unknown axis 'foo'"),
])
def test_unknown_names(argv, message, ds, tmp_path, capsys):
    code, err = _run(capsys, [a.format(ds=ds, out=tmp_path / "out.png") for a in argv])
    assert code == 1 and len(err) == 1 and message in err[0], err
