"""Request streams: arrival processes, bounds, lengths, replay files, prompts (no torch)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from generation.workloads import arrivals as arr
from llm_powertrace_ds.errors import InputError


def _offsets(stream: arr.RequestStream) -> np.ndarray:
    return np.array([r.offset_s for r in stream], dtype=np.float64)


def test_poisson_is_seeded_and_bounded_by_count():
    proc = arr.ArrivalProcess("poisson", rate_rps=10.0)
    a = list(arr.RequestStream(proc, arr.Lengths.fixed(8, 4), num_requests=50, seed=1))
    b = list(arr.RequestStream(proc, arr.Lengths.fixed(8, 4), num_requests=50, seed=1))
    c = list(arr.RequestStream(proc, arr.Lengths.fixed(8, 4), num_requests=50, seed=2))
    assert a == b
    assert [r.offset_s for r in a] != [r.offset_s for r in c]
    assert len(a) == 50
    assert a[0].offset_s == 0.0  # the first request is sent at once
    assert all(x.offset_s <= y.offset_s for x, y in zip(a, a[1:], strict=False))
    assert [r.request_id for r in a[:2]] == ["r00000", "r00001"]


def test_poisson_gaps_are_exponential():
    proc = arr.ArrivalProcess("poisson", rate_rps=5.0)
    gaps = np.diff(_offsets(arr.RequestStream(proc, arr.Lengths.fixed(8, 4), num_requests=2000,
                                              seed=3)))
    assert stats.kstest(gaps, "expon", args=(0, 1 / 5.0)).pvalue > 0.01
    assert gaps.mean() == pytest.approx(0.2, rel=0.1)


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_has_the_requested_rate_and_cv(cv):
    proc = arr.ArrivalProcess("gamma", rate_rps=20.0, cv=cv)
    gaps = np.diff(_offsets(arr.RequestStream(proc, arr.Lengths.fixed(8, 4), num_requests=20000,
                                              seed=0)))
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)
    # the draws themselves (offsets are sums: sub-ns gaps of cv = 3 vanish in float rounding)
    shape = 1 / cv**2
    draws = proc.interarrivals_s(np.random.default_rng(1), 5000)
    assert stats.kstest(draws, "gamma", args=(shape, 0, 1 / (20.0 * shape))).pvalue > 0.01


def test_open_loop_bounded_by_duration():
    proc = arr.ArrivalProcess("poisson", rate_rps=50.0)
    reqs = list(arr.RequestStream(proc, arr.Lengths.fixed(8, 4), target_duration_s=2.0, seed=0))
    assert 60 < len(reqs) < 140
    assert max(r.offset_s for r in reqs) <= 2.0
    # both bounds: whichever comes first
    few = list(arr.RequestStream(proc, arr.Lengths.fixed(8, 4), num_requests=5,
                                 target_duration_s=2.0, seed=0))
    assert len(few) == 5


def test_closed_loop_has_no_schedule():
    stream = arr.RequestStream(arr.ArrivalProcess("closed"), arr.Lengths.fixed(8, 4),
                               num_requests=7, seed=0)
    reqs = stream.materialise()
    assert len(reqs) == 7 and all(r.offset_s is None for r in reqs)
    unbounded = arr.RequestStream(arr.ArrivalProcess("closed"), arr.Lengths.fixed(8, 4),
                                  target_duration_s=1.0)
    with pytest.raises(InputError, match="no fixed length"):
        unbounded.materialise()


def test_stream_needs_a_bound_and_valid_parameters():
    with pytest.raises(InputError) as exc:
        arr.RequestStream(arr.ArrivalProcess("closed"), arr.Lengths.fixed(8, 4))
    assert exc.value.field == "num_requests"
    with pytest.raises(InputError) as exc:
        arr.ArrivalProcess("poisson")
    assert exc.value.field == "arrival_rate_rps"
    with pytest.raises(InputError) as exc:
        arr.ArrivalProcess("gamma", rate_rps=1.0, cv=0.0)
    assert exc.value.field == "arrival_cv"
    with pytest.raises(InputError) as exc:
        arr.ArrivalProcess("replay")
    assert exc.value.field == "replay_file"
    with pytest.raises(InputError) as exc:
        arr.ArrivalProcess("bursty")
    assert exc.value.field == "arrival_pattern"


def test_uniform_lengths_cover_the_range():
    lengths = arr.Lengths("uniform", params={"prompt_len": [4, 6], "output_len": 3})
    reqs = list(arr.RequestStream(arr.ArrivalProcess("closed"), lengths, num_requests=300))
    assert {r.prompt_tokens for r in reqs} == {4, 5, 6}
    assert {r.output_tokens for r in reqs} == {3}
    assert lengths.max_lengths() == (6, 3)
    with pytest.raises(InputError, match="low <= high"):
        arr.Lengths("uniform", params={"prompt_len": [6, 4], "output_len": 3})
    with pytest.raises(InputError, match="prompt_len"):
        arr.Lengths("uniform", params={"output_len": 3})


def test_list_lengths_independent_and_paired():
    lengths = arr.Lengths("list", params={"prompt_len": [16, 64], "output_len": [8]})
    reqs = list(arr.RequestStream(arr.ArrivalProcess("closed"), lengths, num_requests=100))
    assert {r.prompt_tokens for r in reqs} == {16, 64}
    pairs = arr.Lengths("list", params={"pairs": [[10, 1], [20, 2]]})
    reqs = list(arr.RequestStream(arr.ArrivalProcess("closed"), pairs, num_requests=100))
    assert {(r.prompt_tokens, r.output_tokens) for r in reqs} == {(10, 1), (20, 2)}
    assert pairs.max_lengths() == (20, 2)
    with pytest.raises(InputError):
        arr.Lengths("list", params={"pairs": [[10]]})


def test_fixed_lengths_need_values():
    with pytest.raises(InputError) as exc:
        arr.Lengths("fixed", None, 4)
    assert exc.value.field == "prompt_len"


def test_lengths_do_not_depend_on_the_arrival_rate():
    lengths = arr.Lengths("uniform", params={"prompt_len": [1, 100], "output_len": [1, 100]})
    a = arr.RequestStream(arr.ArrivalProcess("poisson", rate_rps=1.0), lengths,
                          num_requests=20, seed=5)
    b = arr.RequestStream(arr.ArrivalProcess("poisson", rate_rps=9.0), lengths,
                          num_requests=20, seed=5)
    assert [(r.prompt_tokens, r.output_tokens) for r in a] == \
        [(r.prompt_tokens, r.output_tokens) for r in b]


def test_prompt_ids_exact_length_range_and_determinism():
    stream = arr.RequestStream(arr.ArrivalProcess("closed"),
                               arr.Lengths("list", params={"prompt_len": [1, 7, 33],
                                                           "output_len": [2]}),
                               num_requests=30, seed=4)
    reqs = list(stream)
    for r in reqs:
        ids = stream.prompt_ids(r, vocab_size=50, first_id=3)
        assert len(ids) == r.prompt_tokens
        assert min(ids) >= 3 and max(ids) < 50
        assert ids == stream.prompt_ids(r, vocab_size=50, first_id=3)
    other = arr.RequestStream(arr.ArrivalProcess("poisson", rate_rps=3.0), stream.lengths,
                              num_requests=30, seed=4)
    assert stream.prompt_ids(reqs[5], 50) == other.prompt_ids(list(other)[5], 50)


BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5.0,ChatGPT,100,20,120,Conversation log
2.0,ChatGPT,50,10,60,Conversation log
2.5,GPT-4,3000,900,3900,API log
"""

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,879,16
"""


def test_read_replay_burstgpt(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text(BURSTGPT)
    trace = arr.read_replay(path)
    assert trace.name == "burst.csv" and len(trace.sha256) == 64
    np.testing.assert_allclose(trace.offsets_s, [0.0, 0.5, 3.0])
    assert trace.prompt_tokens.tolist() == [50, 3000, 100]
    assert trace.output_tokens.tolist() == [10, 900, 20]
    assert trace.mean_rate_rps == pytest.approx(2 / 3.0)


def test_read_replay_azure_iso_times(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text(AZURE)
    trace = arr.read_replay(path)
    np.testing.assert_allclose(trace.offsets_s, [0.0, 4.314579, 4.31941], atol=1e-5)
    assert trace.output_tokens.tolist() == [44, 109, 16]


def test_replay_stream_and_clipped_lengths(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text(BURSTGPT)
    trace = arr.read_replay(path)
    proc = arr.ArrivalProcess("replay", replay=trace, time_scale=0.5)
    lengths = arr.Lengths("replay", params={"max_prompt_len": 512, "max_output_len": 64},
                          replay=trace)
    reqs = list(arr.RequestStream(proc, lengths, num_requests=10))
    assert [r.offset_s for r in reqs] == [0.0, 0.25, 1.5]
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(50, 10), (512, 64), (100, 20)]
    assert lengths.max_lengths() == (512, 64)
    # bounded by duration too, and by the trace alone
    assert len(list(arr.RequestStream(proc, lengths, target_duration_s=1.0))) == 2
    assert len(list(arr.RequestStream(proc, lengths))) == 3
    params = json.loads(arr.length_params_json(lengths))
    assert params["replay_file"] == "burst.csv" and params["replay_sha256"] == trace.sha256
    assert arr.length_params_json(arr.Lengths.fixed(4, 4)) is None


def test_replay_errors_name_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("when,ContextTokens\n1,2\n")
    with pytest.raises(InputError, match="no arrival-time column"):
        arr.read_replay(bad)
    bad.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,ten,5\n")
    with pytest.raises(InputError) as exc:
        arr.read_replay(bad)
    assert exc.value.line == 3 and exc.value.field == "prompt_tokens"
    with pytest.raises(InputError, match="Failed to read"):
        arr.read_replay(tmp_path / "missing.csv")
    only_times = tmp_path / "times.csv"
    only_times.write_text("arrival_s\n0\n1\n")
    trace = arr.read_replay(only_times)
    with pytest.raises(InputError, match="no prompt/output token columns"):
        arr.Lengths("replay", replay=trace)
