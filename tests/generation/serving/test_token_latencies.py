"""Served latencies from tokens, not chunks.

The OpenAI double streams like vLLM: running usage counts per chunk, merged chunks, a first
token with no text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from generation.serving.client import CompletionStream
from llm_powertrace_ds import layout
from llm_powertrace_ds.shards import read_run, read_table

from .openai_double import DoubleConfig, start_double, sweep_text


def publish(tmp_path: Path, config: DoubleConfig) -> tuple[dict, list[dict]]:
    from generation.runner import generate

    with start_double(config) as server:
        sweep = tmp_path / "sweep.yaml"
        sweep.write_text(sweep_text(server.url, "tokens", output_len=9), encoding="utf-8")
        report = generate(sweep, tmp_path / "ds", progress=False)
    (outcome,) = report.outcomes
    assert outcome.status == "published", outcome.error
    rows: list[dict] = []
    for path in layout.shard_files(tmp_path / "ds", "inference_requests"):
        rows.extend(read_table(path).to_pylist())
    return read_run(tmp_path / "ds", outcome.run_id).meta, rows


def test_a_chunk_of_several_tokens_counts_its_tokens():
    with start_double(DoubleConfig(tokens_per_chunk=3, token_delay_s=0.01)) as server:
        res = CompletionStream(server.url, "double-model").run([5, 6], 9)
        body = server.bodies[0]
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert res.error is None and res.output_tokens == 9
    assert res.chunk_tokens == [3, 3, 3] and len(res.chunk_ns) == 3


def test_a_first_token_without_text_is_the_first_token():
    config = DoubleConfig(empty_first_text=True, token_delay_s=0.05)
    with start_double(config) as server:
        res = CompletionStream(server.url, "double-model").run([5, 6], 4)
    assert res.error is None and res.chunk_tokens == [1, 1, 1, 1]
    assert res.first_token_ns == res.chunk_ns[0]
    # the first chunk with text came one token delay later: it is not the first token
    assert res.chunk_ns[1] - res.first_token_ns >= 40_000_000


def test_without_per_chunk_counts_the_first_text_chunk_is_used_and_nothing_is_guessed():
    config = DoubleConfig(continuous_usage=False, empty_first_text=True)
    with start_double(config) as server:
        res = CompletionStream(server.url, "double-model").run([5, 6], 4)
    assert res.error is None and res.output_tokens == 4  # the final usage
    assert res.chunk_tokens is None and len(res.chunk_ns) == 3  # the empty chunk is not seen


def test_published_requests_carry_chunk_tokens_and_tpot_comes_from_tokens(tmp_path):
    meta, rows = publish(tmp_path, DoubleConfig(tokens_per_chunk=3, token_delay_s=0.02))
    assert len(rows) == 4
    for row in rows:
        assert row["output_tokens"] == 9 and row["chunk_tokens"] == [3, 3, 3]
        assert len(row["chunk_ms"]) == 3 and row["first_token_ms"] == row["chunk_ms"][0]
    tpots = [(r["finish_ms"] - r["first_token_ms"]) / 1000 / (r["output_tokens"] - 1)
             for r in rows]
    # the run's mean is taken on ns; the rows' ms floor each time, hence the 1 ms tolerance
    assert meta["tpot_mean_s"] == pytest.approx(sum(tpots) / len(tpots), abs=1e-3 / 8)
    # a 3-token chunk after ~60 ms counts as three ~20 ms token gaps, not one 60 ms gap
    assert 10 <= meta["itl_p50_ms"] <= 40
    assert "chunk_tokens_unknown" not in (meta["quality_flags"] or [])


def test_a_server_without_per_chunk_counts_flags_the_run_and_leaves_itl_null(tmp_path):
    meta, rows = publish(tmp_path, DoubleConfig(continuous_usage=False, token_delay_s=0.005))
    assert "chunk_tokens_unknown" in meta["quality_flags"]
    assert meta["itl_p50_ms"] is None and meta["itl_p99_ms"] is None
    assert meta["tpot_mean_s"] is not None  # from the final usage count, not from chunks
    assert all(r["chunk_tokens"] is None and len(r["chunk_ms"]) == 9 for r in rows)
