"""The fit result: fit every law, serialise to JSON, read it back."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import bounded
from ..errors import InputError
from ..schema import is_cpu_proxy
from .common import BASELINES, FORMAT, N_BOOT, TARGETS, _num
from .holdout import _fit_law, evaluate_holdout, split_holdout
from .loglinear import LogLinearLaw, fit_loglinear
from .physics import PhysicsLaw


@dataclass
class FitResult:
    """Every law fitted on all runs, and the holdout evaluation when asked."""

    target: str
    loglinear: LogLinearLaw
    physics: PhysicsLaw | None
    physics_note: str | None
    holdout: dict[str, Any] | None
    dropped: int

    @property
    def best_law(self) -> str:
        """The law with the lower held-out MdAPE, else the narrower conformal interval."""
        if self.physics is None:
            return "loglinear"
        if self.holdout:
            m = self.holdout["mdape_pct"]
            if m.get("physics") is not None and m.get("loglinear") is not None:
                return "physics" if m["physics"] < m["loglinear"] else "loglinear"
            if m.get("physics") is not None and m.get("loglinear") is None:
                return "physics"
        qp, ql = self.physics.q90, self.loglinear.q90
        if qp is not None and ql is not None:
            return "physics" if qp < ql else "loglinear"
        return "physics" if self.physics.sigma < self.loglinear.sigma else "loglinear"

    preferred = best_law

    def to_json(self) -> dict[str, Any]:
        """The documented, stable shape (docs/analyst-guide.md, "Scaling law").

        ``target``, ``n_runs``, ``laws`` ``{name: {"params", "holdout"}}``, ``baselines``
        ``{name: {"holdout"}}``, ``best_law``; plus ``format``, the laws' states for
        :func:`predict` and the holdout points.
        """
        ho = self.holdout
        laws: dict[str, Any] = {
            "loglinear": {"params": self.loglinear.params_json(),
                          "holdout": ho["laws"].get("loglinear") if ho else None},
            "physics": {"params": self.physics.params_json() if self.physics else None,
                        "not_fitted": self.physics_note,
                        "holdout": ho["laws"].get("physics") if ho else None},
        }
        baselines = {name: {"holdout": ho["baselines"].get(name) if ho else None}
                     for name in BASELINES}
        return {"format": FORMAT, "target": self.target, "n_runs": self.loglinear.n,
                "laws": laws, "baselines": baselines, "best_law": self.best_law,
                "preferred": self.best_law, "runs_dropped": self.dropped,
                "holdout_spec": ho["spec"] if ho else None,
                "loglinear": self.loglinear.to_json(),
                "physics": self.physics.to_json() if self.physics else None,
                "physics_note": self.physics_note, "holdout": ho}

    def save(self, path: str | Path) -> None:
        """Write the JSON (temporary name, then rename)."""
        from ..atomic import write_text_atomic

        write_text_atomic(Path(path), json.dumps(self.to_json(), indent=2))


def window_rows(rows: Iterable[Mapping[str, Any]], target: str, window: str
                ) -> list[Mapping[str, Any]]:
    """Rows whose ``target`` is taken over the chosen window.

    ``work``: the run's work-window twin ``work_<target>`` (the workload without its idle
    padding, ``metrics.window``) where the row has it, else ``target`` itself (rows of an
    older schema, or published summaries such as ML.ENERGY's, which are steady-state
    already); ``whole``: ``target`` over the whole trace.
    """
    if window not in ("work", "whole"):
        raise InputError(f"{window!r} is not one of work, whole", field="--window")
    out: list[Mapping[str, Any]] = []
    for row in rows:
        r = dict(row)
        if window == "work" and r.get(f"work_{target}") is not None:
            r[target] = r[f"work_{target}"]
        out.append(r)
    return out


def fit(rows: Iterable[Mapping[str, Any]], target: str = "energy_per_token_j", *,
        holdout: str | None = None, n_boot: int = N_BOOT, seed: int = 0,
        window: str = "work") -> FitResult:
    """Fit every law on a runs table (rows as dicts) and optionally evaluate a holdout.

    Args:
        rows: runs-config rows (``finetune_runs`` / ``inference_runs``).
        target: ``energy_per_token_j``, ``mean_power_w`` or ``energy_j``.
        window: ``work`` (default): the target over each run's work window
            (:func:`window_rows`); ``whole``: over the whole trace, idle padding included.
        holdout: ``AXIS=top``, ``family=NAME`` or ``COLUMN=VALUE`` (see :func:`split_holdout`).
        n_boot: bootstrap replicates of the coefficient intervals.
        seed: bootstrap seed.

    Raises:
        InputError: unknown target, degenerate data (the one-line reason), a holdout that
            selects nothing.
    """
    if target not in TARGETS:
        raise InputError(f"target {target!r} is not one of {', '.join(TARGETS)}", field="target")
    all_rows = window_rows(rows, target, window)
    use = [r for r in all_rows if (_num(r.get(target)) or 0) > 0]
    if holdout:
        train, test = split_holdout(use, holdout)
        fit_loglinear(train, target, n_boot=0)  # refuse degenerate training data up front
    ll = _fit_law("loglinear", use, target, n_boot, seed)
    try:
        ph: PhysicsLaw | None = _fit_law("physics", use, target, n_boot, seed)
        note = None
    except InputError as exc:
        ph, note = None, exc.reason
    proxy = sum(1 for r in use if is_cpu_proxy(r))
    if proxy:  # printed by `fit` and kept in the fit's JSON, as the card and explorer say it
        ll.notes.insert(0, f"cpu_proxy: {proxy} of {len(use)} fitted runs are the cpu_proxy "
                        "model of CPU activity, not GPU measurements; so is this fit")
    evaluation = evaluate_holdout(train, test, target, holdout, n_boot, seed) if holdout else None
    return FitResult(target, ll, ph, note, evaluation, len(all_rows) - len(use))


def load_fit(path_or_data: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """Read a fit's JSON (a path or the parsed object); checks its format."""
    if isinstance(path_or_data, Mapping):
        data = dict(path_or_data)
    else:
        path = Path(path_or_data)
        try:  # the bounded reader: a regular file, size and depth capped, one-line errors
            data = bounded.read_json(path)
        except InputError as exc:
            raise InputError(f"cannot read the fit: {exc.reason}", file=path,
                             line=exc.line) from None
        if not isinstance(data, Mapping):
            raise InputError("a fit file is a JSON object", file=path)
    if data.get("format") != FORMAT:
        raise InputError(f"not a fit file of this version (format {data.get('format')!r}, "
                         f"expected {FORMAT!r}); fit again", field="format")
    return data
