"""Real measurements shipped with the package, so that a fresh install has real numbers.

Until the project's own GPU campaign is published, the data a newcomer can look at is everyone
else's open data. What the licences allow us to ship is here, unchanged, with its notice:

* ``mlenergy-v2-chat`` — the ML.ENERGY leaderboard v2 ``chat`` task: 191 vLLM inference runs on
  A100-SXM4-40GB and H100 80GB HBM3 (2–405 B parameter models, batch 32–3072, TP 1–8), one
  steady-state summary per run (energy per request, time per output token, throughput, output
  length, batch size; no power series). Apache-2.0, credit "The ML.ENERGY Initiative"
  (``mlenergy_v2/NOTICE.md``, ``mlenergy_v2/LICENSE``).

Example:
    >>> from llm_powertrace_ds.samples import load_sample  # doctest: +SKIP
    >>> from llm_powertrace_ds.query import Runs  # doctest: +SKIP
    >>> runs = Runs.load(load_sample("mlenergy-v2-chat"), workload="inference")  # doctest: +SKIP
    >>> runs.where(lambda r: r.tpot_mean_s <= 0.1)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Sample:
    """One shipped sample: where it lies, how it imports, and whose it is."""

    name: str
    folder: Path
    fmt: str
    licence: str
    credit: str
    citation: str
    source_url: str
    notice: Path


SAMPLES: dict[str, Sample] = {
    "mlenergy-v2-chat": Sample(
        name="mlenergy-v2-chat", folder=HERE / "mlenergy_v2" / "chat", fmt="mlenergy-v2",
        licence="Apache-2.0", credit="The ML.ENERGY Initiative",
        citation="Jae-Won Chung et al., The ML.ENERGY Benchmark: Toward Automated Inference "
        "Energy Measurement and Optimization (2025); ML.ENERGY Leaderboard v2",
        source_url="https://github.com/ml-energy/benchmark (commit 76bf85e, "
        "data/llm_text_generation/chat)",
        notice=HERE / "mlenergy_v2" / "NOTICE.md"),
}


def sample(name: str) -> Sample:
    """The shipped sample called ``name`` (a one-line error listing the names otherwise)."""
    try:
        return SAMPLES[name]
    except KeyError:
        raise UsageError(f"no shipped sample {name!r}; shipped: {', '.join(SAMPLES)}",
                         field="sample") from None


def load_sample(name: str = "mlenergy-v2-chat", out: str | Path | None = None) -> Path:
    """Import a shipped sample into a dataset folder (default ``./<name>``) and return it.

    Importing again replaces the same runs (their ids are the source's), so calling this twice
    is harmless. The folder's card is rebuilt once, as after ``llm-powertrace import``.
    """
    from ..hooks import rebuild_card
    from ..importers import import_summaries
    from ..importers.mlenergy_v2 import publish_summaries

    spec = sample(name)
    root = Path(out) if out is not None else Path(name)
    runs = import_summaries(spec.fmt, spec.folder)
    try:
        publish_summaries(root, runs)
    finally:
        rebuild_card(root)
    return root
