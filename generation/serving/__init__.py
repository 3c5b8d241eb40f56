"""Serving engines behind an OpenAI-compatible HTTP API, driven under the sampler.

The inference workload's ``serving_engine`` may be ``transformers`` (in this process, see
``generation.workloads.inference``) or a server spoken to over HTTP:

* ``vllm`` / ``sglang``: the runner starts the engine's OpenAI-compatible server as the
  workload process (:mod:`.launch`, kept alive only as long as the runner by :mod:`.guard`);
* ``openai``: a server someone already runs (vLLM, SGLang, TGI, llama.cpp, ...), named by
  ``endpoint`` and ``model``.

Modules, one job each: :mod:`.client` (one streamed completion over ``http.client``),
:mod:`.engine` (the serving loop's engine interface over concurrent streams), :mod:`.launch`
(engine command lines, start-up, health, shutdown), :mod:`.guard` (the watchdog that kills an
engine's process group when the runner dies), :mod:`.probe` (what a server says it is),
:mod:`.calibrate` (saturation throughput, for arrival rates given as a fraction of it) and
:mod:`.workload` (setup before the sampler, serving inside the window).

Only the standard library is used for HTTP; nothing here imports torch.
"""
