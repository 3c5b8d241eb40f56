"""The step / evaluation / checkpoint events a ``transformers`` trainer callback marks.

Shared by the fine-tuning workload's callback and the public ``PowerTraceCallback``. The
trainer's order within a step is ``on_step_end`` (the flow callback has decided
``should_evaluate``/``should_save``), evaluation (``on_evaluate``), checkpoint (``on_save``), so
``eval_begin`` is marked at the step's end when an evaluation follows, ``checkpoint_begin`` there
too, or after ``eval_end`` when both follow. No ``transformers`` import: a mixin placed before
``TrainerCallback`` in the bases.
"""

from __future__ import annotations

from typing import Any


class StepEventMarks:
    """Marks ``step_end``, ``eval_begin/end`` and ``checkpoint_begin/end`` through ``self.mark``.

    The class using it provides ``mark(kind, step=...)`` (a method or an attribute).
    """

    mark: Any
    _pending_save: bool = False

    def mark_step_end(self, state: Any, control: Any) -> None:
        """``step_end`` of ``state.global_step``, then what follows it in this step."""
        self.mark("step_end", step=state.global_step)
        if control.should_evaluate:
            self.mark("eval_begin", step=state.global_step)
            self._pending_save = bool(control.should_save)
        elif control.should_save:
            self.mark("checkpoint_begin", step=state.global_step)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.mark("eval_end", step=state.global_step)
        if self._pending_save and control.should_save:
            self.mark("checkpoint_begin", step=state.global_step)
        self._pending_save = False

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.mark("checkpoint_end", step=state.global_step)
