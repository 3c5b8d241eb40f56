"""A ``transformers``/TRL ``TrainerCallback`` that records any training script's steps.

Add it to any ``Trainer`` (``SFTTrainer``, ``DPOTrainer``, ...) running under
``llm-powertrace record`` or inside ``with Recording(...)``::

    from generation.record.callback import PowerTraceCallback

    trainer.add_callback(PowerTraceCallback())
    trainer.train()

It yields the events of the project's own fine-tuning workload
(``generation.workloads.finetune``): ``step_begin``/``step_end`` per optimiser step,
``eval_begin``/``eval_end``, ``checkpoint_begin``/``checkpoint_end`` around each checkpoint
(Trainer order per step: ``on_step_begin``, forward/backward/optimizer, ``on_step_end`` — where
the flow callback has decided ``should_evaluate``/``should_save`` — then ``on_evaluate``, then
``on_save``), each stamped with the process's rank; and at the end of training the results::

    steps        = state.global_step
    tokens       = state.num_input_tokens_seen            (include_num_input_tokens_seen on)
                 = steps * per_device_batch * grad_accum * world_size * seq_len   (seq_len given)
    tokens_per_s = tokens / (last step_end - first step_begin)
    final_loss   = the last logged training loss

plus the training arguments' axes (``batch_size``, ``grad_accum``, ``global_batch_size``,
``dp_size``, ``max_steps``, ``learning_rate``, ``optimizer``, ``precision``,
``gradient_checkpointing``, ``seed``), ``model_params`` and the library versions actually
imported. Columns the user gave (``--set``) win over these. ``energy_per_token_j`` follows from
``tokens`` in the run's metrics.

This module is the only one of :mod:`generation.record` that imports ``transformers``.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from transformers import TrainerCallback

from ..trainer_events import StepEventMarks
from .session import Attached, RecordError, Recording, active


class PowerTraceCallback(StepEventMarks, TrainerCallback):
    """Marks training events on the sampler's clock and reports the run's results.

    Args:
        recording: where to record (default: the open :class:`Recording` of this process, or the
            run ``llm-powertrace record`` is recording, found through
            ``$LLM_POWERTRACE_RECORD_DIR``).
        seq_len: tokens per sequence, when every sequence has exactly this many (used for
            ``tokens`` when ``include_num_input_tokens_seen`` is off).

    Raises:
        RecordError: no recording to write to.
    """

    def __init__(self, recording: Recording | Attached | None = None, *,
                 seq_len: int | None = None) -> None:
        target = recording if recording is not None else active()
        if target is None:
            raise RecordError("PowerTraceCallback has no run to record into: run the script "
                              "under `llm-powertrace record` or inside `with Recording(...)`")
        self.target = target
        self.seq_len = seq_len
        self.first_begin_ns: int | None = None
        self.last_end_ns: int | None = None
        self.model_params: int | None = None
        self._pending_save = False

    def mark(self, kind: str, *, step: int | None = None) -> None:
        self.target.mark(kind, step=step)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs.get("model")
        if model is not None and hasattr(model, "parameters"):
            self.model_params = int(sum(p.numel() for p in model.parameters()))

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.first_begin_ns is None:
            self.first_begin_ns = time.monotonic_ns()
        self.mark("step_begin", step=state.global_step + 1)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.last_end_ns = time.monotonic_ns()
        self.mark_step_end(state, control)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        self.target.set_results(**self.results(args, state))

    def results(self, args: Any, state: Any) -> dict[str, Any]:
        """The run's result and axis columns (see the module docstring)."""
        world = max(1, int(getattr(args, "world_size", 1) or 1))
        steps = int(state.global_step)
        bs = int(args.per_device_train_batch_size)
        accum = int(args.gradient_accumulation_steps)
        tokens: int | None = None
        seen = getattr(state, "num_input_tokens_seen", 0) or 0
        if getattr(args, "include_num_input_tokens_seen", "no") not in ("no", False) and seen:
            tokens = int(seen)
        elif self.seq_len is not None:
            tokens = steps * bs * accum * world * int(self.seq_len)
        span_s = None
        if self.first_begin_ns is not None and self.last_end_ns is not None:
            span_s = (self.last_end_ns - self.first_begin_ns) / 1e9
        losses = [h["loss"] for h in state.log_history if "loss" in h]
        final_loss = float(losses[-1]) if losses and math.isfinite(losses[-1]) else None
        precision = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
        out: dict[str, Any] = {
            "steps": steps, "tokens": tokens,
            "tokens_per_s": tokens / span_s if tokens and span_s else None,
            "final_loss": final_loss, "model_params": self.model_params,
            "batch_size": bs, "grad_accum": accum, "global_batch_size": bs * accum * world,
            "dp_size": world, "max_steps": int(args.max_steps) if args.max_steps > 0 else None,
            "learning_rate": float(args.learning_rate), "optimizer": str(getattr(args.optim, "value", args.optim)),
            "precision": precision,
            "gradient_checkpointing": _checkpointing(args),
            "seed": int(args.seed),
        }
        for col, module in (("torch_version", "torch"), ("transformers_version", "transformers"),
                            ("peft_version", "peft"), ("trl_version", "trl")):
            mod = sys.modules.get(module)
            out[col] = getattr(mod, "__version__", None) if mod is not None else None
        return out


def _checkpointing(args: Any) -> bool:
    """Activation (gradient) checkpointing; transformers 5 renamed the argument."""
    fields = getattr(type(args), "__dataclass_fields__", {})
    name = "activation_checkpointing" if "activation_checkpointing" in fields else \
        "gradient_checkpointing"
    return bool(getattr(args, name, False))


__all__ = ["PowerTraceCallback"]
