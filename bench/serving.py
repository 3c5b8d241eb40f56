"""Benchmark the serving loop against its direct ``transformers`` counterpart, side by side.

    python bench/serving.py [--model llama-tiny] [--concurrency 8] [--requests 48]
                            [--prompt-len 64] [--output-len 32] [--repeats 5] [--device cpu] [--threads 1]
                            [--json PATH]

One fixed model at saturation: a closed loop whose concurrency equals the batch size, fixed
prompt and output lengths, the same synthetic prompts everywhere. For each batching mode, in one
process, alternating ``--repeats`` times:

* ``loop``: ``generation.workloads.inference.serve.serve_stream`` (arrival bookkeeping, admission,
  the engine's worker thread, completions back through the loop's inbox);
* ``direct`` for ``static``: ``model.generate`` on exactly the batches the loop formed (same
  prompts, same forced length), back to back;
* ``direct`` for ``continuous``: ``model.generate_batch`` on all requests at once with the same
  continuous-batching configuration (``max_requests_per_batch`` = the concurrency).

Throughput is generated tokens over the span from the first request's start to the last
request's finish, measured the same way on both sides (the loop: first arrival to last finish
of its request log; static direct: first ``generate`` call to last return; continuous direct:
the manager's own per-request stamps, first creation to last finish). Set-up (model load,
manager creation, warm-up) is excluded on both sides. Each repeat runs the loop and then the
direct path right after it, so both see the same machine load; the medians over the repeats are
reported and ``ratio`` is the median of the per-repeat ratios loop / direct (1.0 = the loop
costs nothing). On a CPU, torch runs ``--threads`` intra-op threads (default 1: on a shared
machine more threads mostly add contention noise). Prints one JSON object:
``{"static": {"loop_tokens_per_s", "direct_tokens_per_s", "ratio"}, "continuous": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _report  # noqa: E402


def _stream(args: argparse.Namespace):
    from generation.workloads import arrivals as arr

    return arr.RequestStream(arr.ArrivalProcess("closed"),
                             arr.Lengths.fixed(args.prompt_len, args.output_len),
                             num_requests=args.requests, seed=0)


def _loop(model, args, batching: str, vocab: int) -> tuple[float, list[list[str]]]:
    import torch

    from generation.workloads.inference import requests as inf_requests
    from generation.workloads.inference import serve as inf_serve

    with torch.inference_mode():
        served = inf_serve.serve_stream(model, _stream(args), batching=batching,
                                  concurrency=args.concurrency, vocab_size=vocab)
    bad = [r for r in served.records if r.status != "ok"]
    if bad:
        raise SystemExit(f"the loop failed {len(bad)} requests: {bad[0].error}")
    batches = served.engine.batches if batching == "static" else []
    return inf_requests.summarise(served.records)["tokens_per_s"], batches


def _direct_static(model, args, batches: list[list[str]], vocab: int) -> float:
    import torch

    from generation.workloads.inference import engines as inf_engines

    stream = _stream(args)
    by_id = {r.request_id: r for r in stream}
    engine = inf_engines.StaticEngine(model)
    tensors = []
    for ids in batches:
        jobs = [inf_engines.Job(i, stream.prompt_ids(by_id[i], vocab, 3), by_id[i].output_tokens)
                for i in ids]
        tensors.append(engine.tensors(jobs))
    n = args.output_len
    tokens = 0
    with torch.inference_mode():
        start = time.monotonic_ns()
        for input_ids, mask in tensors:
            out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=n,
                                 min_new_tokens=n, do_sample=False, pad_token_id=0)
            tokens += (out.shape[1] - input_ids.shape[1]) * out.shape[0]
        if input_ids.device.type == "cuda":
            torch.cuda.synchronize()
        end = time.monotonic_ns()
    return tokens / ((end - start) / 1e9)


def _direct_continuous(model, args, vocab: int) -> float:
    import torch
    from transformers import GenerationConfig

    from generation.workloads.inference import engines as inf_engines

    stream = _stream(args)
    prompts = [stream.prompt_ids(r, vocab, 3) for r in stream]
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0,
                           max_new_tokens=args.output_len)
    cfg = inf_engines.continuous_batching_config(concurrency=args.concurrency,
                                         max_prompt=args.prompt_len, max_output=args.output_len,
                                         device=model.device.type)
    with torch.inference_mode():
        results = model.generate_batch(prompts, generation_config=gen,
                                       continuous_batching_config=cfg, record_timestamps=True)
    if len(results) != len(prompts) or any(r.error for r in results.values()):
        raise SystemExit("generate_batch failed some requests")
    tokens = sum(len(r.generated_tokens) for r in results.values())
    start = min(r.created_time for r in results.values())
    end = max(r.lifespan[1] for r in results.values())
    return tokens / (end - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama-tiny")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads on a CPU")
    _report.add_json_option(parser)
    args = parser.parse_args(argv)
    started = _report.machine()

    import torch

    if args.device == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)

    import logging

    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.WARNING)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    from generation.workloads import inference as inf
    from generation.workloads import models
    from generation.workloads.inference import model as inf_model

    spec = models.get_spec(args.model)
    settings = inf.SPEC.resolve({"model": args.model, "precision": "fp32"},
                                inf.MachineInfo("cpu_proxy", "cpu_proxy", 1, False, True))
    if args.device == "cuda":
        settings["precision"] = "bf16"
    model = inf_model.load_model(settings, args.device)
    vocab = spec.vocab_size
    out: dict[str, dict[str, float]] = {}
    for batching in ("static", "continuous"):
        loop_tps, direct_tps, ratios = [], [], []
        # warm both paths once (kernels, allocator, the manager's first set-up)
        _, batches = _loop(model, args, batching, vocab)
        if batching == "static":
            _direct_static(model, args, batches, vocab)
        else:
            _direct_continuous(model, args, vocab)
        for _ in range(args.repeats):
            tps, batches = _loop(model, args, batching, vocab)
            loop_tps.append(tps)
            if batching == "static":
                direct_tps.append(_direct_static(model, args, batches, vocab))
            else:
                direct_tps.append(_direct_continuous(model, args, vocab))
            ratios.append(tps / direct_tps[-1])
        out[batching] = {"loop_tokens_per_s": round(statistics.median(loop_tps), 1),
                         "direct_tokens_per_s": round(statistics.median(direct_tps), 1),
                         "ratio": round(statistics.median(ratios), 3)}
        print(f"{batching}: loop {[round(x) for x in loop_tps]} direct "
              f"{[round(x) for x in direct_tps]} tokens/s", file=sys.stderr)
    print(json.dumps(out))
    if args.json:
        rows = [_report.result(f"{batching}_{key}", out[batching][key], unit)
                for batching in ("static", "continuous")
                for key, unit in (("loop_tokens_per_s", "tokens/s (median)"),
                                  ("direct_tokens_per_s", "tokens/s (median)"),
                                  ("ratio", "loop / direct (median)"))]
        _report.write(args.json, _report.document("serving", rows, script=__file__, argv=argv,
                                                  started=started))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
