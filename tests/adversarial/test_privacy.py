"""Adversarial privacy cases (issue 12, items 2, 3 and 4)."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest

from cards.builder import refresh_card
from llm_powertrace_ds import privacy
from llm_powertrace_ds.errors import InputError, PowerTraceError


def test_host_hash_is_not_the_public_default_salt(private_salt):
    """Anyone could confirm a guessed host against the old public salt; not any more."""
    guessed = hashlib.sha256(b"llm-powertrace/gpu-uuid/v1:host:gpu-node-17").hexdigest()[:16]
    assert privacy.hash_identifier("host:gpu-node-17") != guessed


def test_salt_is_created_once_private_and_outside_the_dataset(private_salt, tmp_path):
    first = privacy.hash_identifier("GPU-1234")
    assert private_salt.is_file()
    assert stat.S_IMODE(private_salt.stat().st_mode) == 0o600
    assert len(private_salt.read_text().strip()) == 64
    assert privacy.hash_identifier("GPU-1234") == first  # stable on this machine
    private_salt.unlink()
    assert privacy.hash_identifier("GPU-1234") != first  # another machine, another salt


def test_a_salt_file_readable_by_others_is_refused(private_salt):
    privacy.secret_salt()
    os.chmod(private_salt, 0o644)
    with pytest.raises(PowerTraceError, match="readable by other users; run: chmod 600"):
        privacy.hash_identifier("GPU-1234")


def test_an_explicit_salt_wins(monkeypatch):
    monkeypatch.setenv(privacy.SALT_ENV, "campaign-secret")
    assert privacy.hash_identifier("x") == hashlib.sha256(b"campaign-secret:x").hexdigest()[:16]


TEXTS = [
    ("gpu_name", "/home/alice/secret-host.corp.example.com", "looks like a file path"),
    ("driver_version", "/home/alice/10.0.0.5", "looks like a file path"),
    ("gpu_name", "NVIDIA H100 on 10.1.2.3 alice@host", "holds an IP address"),
    ("model_name", "alice@host", "looks like an e-mail address or user@host"),
    ("gpu_name", "node-3.cluster.example.org", "looks like a host name"),
    ("model_label", "x.internal", "looks like a host name"),
    ("model_name", "fe80::1:2:3:4", "holds an IP address"),
    ("model_name", "https://example.org/model", "looks like a URL"),
    ("model_name", "C:\\Users\\alice\\model", "looks like a file path"),
    ("model_name", "Llama\n# injected heading", "holds a control character"),
    ("gpu_name", "H100\x1b]0;title\x07", "holds a control character"),
    ("grid_region", "US CAL", "is not a grid-zone code"),
    ("driver_version", "550.54.15; rm -rf /", "looks like a file path"),
    ("cuda_version", "12.4-beta", "is not a version"),
    ("dataset_name", "x" * 201, "is longer than 200 characters"),
]


@pytest.mark.parametrize(("field", "value", "reason"), TEXTS)
def test_text_gate_refuses(field, value, reason):
    assert privacy.text_problem(field, value) == reason or \
        reason in (privacy.text_problem(field, value) or "")
    with pytest.raises(InputError) as exc:
        privacy.check_text(field, value, file="meta.json")
    assert str(exc.value).startswith(f"'meta.json', field '{field}': value ")
    assert "\n" not in str(exc.value) and "\x1b" not in str(exc.value)


ACCEPTED = [
    ("gpu_name", "NVIDIA H100 80GB HBM3"), ("gpu_name", "NVIDIA A100-SXM4-80GB"),
    ("gpu_name", "Tesla V100-SXM2-16GB"), ("gpu_name", "cpu_proxy"),
    ("driver_version", "550.54.15"), ("cuda_version", "12.4"), ("grid_region", "US-CAL-CISO"),
    ("model_name", "meta-llama/Llama-3.2-1B"), ("model_name", "Qwen2.5-7B"),
    ("model_label", "ds7bbase"), ("torch_version", "2.13.0+cpu"), ("trl_version", "fake"),
    ("length_params", '{"file": "burst.v2.csv", "sha256": "ab12"}'),
    ("lora_targets", "q_proj,v_proj"),
]


@pytest.mark.parametrize(("field", "value"), ACCEPTED)
def test_text_gate_accepts_honest_values(field, value):
    assert privacy.text_problem(field, value) is None


def test_replay_error_never_echoes_file_content(tmp_path):
    from generation.workloads.arrivals import read_replay

    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n")
    with pytest.raises(InputError) as exc:
        read_replay(secret)
    assert "root:x" not in str(exc.value) and "/bin/bash" not in str(exc.value)
    assert "field 'replay_file'" in str(exc.value)
    bad_cell = tmp_path / "t.csv"
    bad_cell.write_text("arrival_s,prompt_tokens\n0.0,12\nhunter2-password,3\n")
    with pytest.raises(InputError) as exc:
        read_replay(bad_cell)
    assert "hunter2" not in str(exc.value) and "line 3, field 'arrival_s'" in str(exc.value)


def test_control_characters_already_in_a_folder_never_reach_the_card(tmp_path, make_run):
    """Item 3: data written before the gate existed (bypassing it) is rendered without them."""
    from llm_powertrace_ds import layout, metrics, shards

    run = make_run("old-run", n=40, model_name="tiny\x1b[2J\rX\u202eevil", model_label="a\nb")
    tables = {layout.runs_path(tmp_path, "finetune", "l40s", "old-run"):
              shards.runs_table(run, metrics.compute_run_metrics(run)),
              layout.trace_path(tmp_path, "finetune", "l40s", "llama", "old-run"):
              shards.trace_table(run)}
    shards.write_tables_all_or_nothing(tables)
    refresh_card(tmp_path)
    card = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "\x1b" not in card and "\r" not in card and "\u202e" not in card
    with pytest.raises(InputError, match="holds a control character"):
        shards.publish_run(tmp_path / "new", run, refresh_card=False)


@pytest.mark.parametrize("value", ["Serving power with int8/int4/fp8 weights", "fp16/bf16 runs",
                                   "TP=4 and DP=1 on 8 GPUs (~2 h)"])
def test_prose_with_slashes_is_not_a_path(value):
    assert privacy.text_problem("description", value) is None


@pytest.mark.parametrize("value", ["data in home/alice/runs", "see scratch/bob/x",
                                   "~alice", "../../etc/passwd"])
def test_relative_paths_into_user_folders_are_refused(value):
    assert privacy.text_problem("description", value) == "looks like a file path"
