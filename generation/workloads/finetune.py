"""The fine-tuning workload: TRL ``SFTTrainer`` with PEFT LoRA/QLoRA or full fine-tuning.

Settings (the ``finetune`` axes of ``llm_powertrace_ds.schema`` plus ``model``,
``model_source``, ``seed``, ``target_duration_s`` and ``eval_every_steps``) are declared in
:data:`SPEC`; a sweep file may set any of them. Resolution fills defaults and derived columns
(``global_batch_size``, ``num_gpus``, ``dp_size``, the model's family and name) and
:meth:`FinetuneSpec.check` rejects impossible combinations *before* anything runs: QLoRA
without CUDA and bitsandbytes, ``fp16``/``bf16`` on a device without it, FSDP or DDP with one
device, ``seq_len`` beyond the model's positions, a power cap without permission, LoRA targets
the architecture does not have, an unsupported parallelism (``tp``).

:func:`FinetuneSpec.run` trains in this process (one rank under ``torchrun``):

* model: a zoo shape with random weights or a cached Hub checkpoint (``models.py``);
  ``model_params`` counts the instantiated base model;
* data: pre-tokenised ``input_ids`` (synthetic or a local text dataset, ``data.py``) with the
  zoo's offline tokenizer as ``processing_class``;
* events (:class:`PowerTraceCallback`): ``warmup_begin``/``warmup_end`` (label ``setup``:
  model build and trainer set-up), ``step_begin``/``step_end`` per optimiser step,
  ``eval_begin``/``eval_end``, ``checkpoint_begin``/``checkpoint_end`` around each real
  ``save_steps`` checkpoint written to disk; all stamped with this process's rank;
* results: ``steps``, ``tokens`` (every rank's, all sequences are exactly ``seq_len``),
  ``tokens_per_s`` (tokens over the span from the first ``step_begin`` to the last
  ``step_end``), ``final_loss`` (the loss logged at the last step).

Training stops at ``max_steps`` or, with ``target_duration_s``, at the first step end at least
that many seconds after the first step began (all ranks agree on the step through one
all-reduce per step).
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llm_powertrace_ds import schema
from llm_powertrace_ds.errors import InputError

from . import MachineInfo, RunContext, Setting, WorkloadSpec, models, settings_from_columns
from . import data as data_mod

METHODS = ("full", "lora", "qlora")
PRECISIONS = ("fp32", "bf16", "fp16")
PARALLELISMS = ("single", "ddp", "fsdp", "tp")
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "adagrad", "rmsprop",
              "adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit", "paged_adamw_32bit")
BNB_OPTIMIZERS = frozenset(o for o in OPTIMIZERS if "8bit" in o or o.startswith("paged"))
DEFAULT_MAX_STEPS = 20
DERIVED = ("global_batch_size", "sharding_strategy", "checkpoint_storage")
"""Axis columns computed from others; a sweep cannot set them."""

_AXES = settings_from_columns(
    [c for c in schema.FINETUNE_AXES if c.name not in DERIVED],
    method={"default": "lora", "choices": METHODS},
    lora_rank={"default": 16, "minimum": 1},
    lora_alpha={"default": 32.0, "minimum": 0.0},
    batch_size={"default": 4, "minimum": 1},
    grad_accum={"default": 1, "minimum": 1},
    seq_len={"default": 512, "minimum": 2},
    precision={"choices": PRECISIONS},
    gradient_checkpointing={"default": False},
    parallelism={"default": "single", "choices": PARALLELISMS},
    dp_size={"minimum": 1},
    tp_size={"default": 1, "minimum": 1},
    pp_size={"default": 1, "minimum": 1},
    checkpoint_every_steps={"minimum": 1},
    max_steps={"minimum": 1},
    optimizer={"default": "adamw_torch", "choices": OPTIMIZERS},
    learning_rate={"default": 1e-4, "minimum": 0.0},
    dataset_name={"default": data_mod.SYNTHETIC},
    power_limit_setting_w={"minimum": 1.0},
)
SHARDING = {"single": "none", "ddp": "replicated", "fsdp": "fsdp2_full_shard"}
"""The ``sharding_strategy`` column of each parallelism (FSDP2 shards at load: see setup)."""
SETTINGS: dict[str, Setting] = {
    **models.model_settings(),
    "seed": Setting("seed", "int64", default=0, doc="Random seed (model init, data, trainer)"),
    "target_duration_s": Setting("target_duration_s", "float32", minimum=0.1,
                                 doc="Train until this many seconds have passed"),
    "eval_every_steps": Setting("eval_every_steps", "int32", minimum=1, column=False,
                                doc="Evaluate on a small held-out set every N steps"),
    **_AXES,
}


class FinetuneSpec(WorkloadSpec):
    """The ``finetune`` workload (see the module docstring)."""

    name = "finetune"
    settings = SETTINGS

    def resolve(self, values: dict[str, Any], machine: MachineInfo) -> dict[str, Any]:
        r = {name: values.get(name, s.default) for name, s in self.settings.items()}
        spec = models.resolve_model_columns(r, machine)
        if r["method"] == "full":
            r["lora_rank"] = r["lora_alpha"] = r["lora_targets"] = None
        elif r["lora_targets"] is None and spec is not None:
            r["lora_targets"] = spec.default_lora_targets
        if r["lora_targets"] is not None:
            r["lora_targets"] = ",".join(t.strip() for t in str(r["lora_targets"]).split(",")
                                         if t.strip())
        if r["dp_size"] is None:
            r["dp_size"] = 1 if r["parallelism"] in ("single", "tp") else max(2, machine.num_devices)
        if r["max_steps"] is None and r["target_duration_s"] is None:
            r["max_steps"] = DEFAULT_MAX_STEPS
        r["global_batch_size"] = r["batch_size"] * r["grad_accum"] * r["dp_size"]
        r["num_gpus"] = r["dp_size"] * r["tp_size"] * r["pp_size"]
        r["sharding_strategy"] = SHARDING.get(r["parallelism"])
        dataset = r["dataset_name"]
        if dataset != data_mod.SYNTHETIC:
            r["_dataset_path"] = str(dataset)
            if r["model_source"] != "hub" and Path(str(dataset)).exists():
                r["dataset_name"] = data_mod.dataset_label(dataset)  # byte-level, zoo only
            else:  # real instruction text through `datasets`, tokenised by the model's tokenizer
                r["_dataset_kind"] = "datasets"
                r["dataset_name"] = data_mod.hub_dataset_label(dataset)
        else:
            r["dataset_revision"] = None
        return r

    def check(self, r: dict[str, Any], machine: MachineInfo) -> list[tuple[str, str]]:
        spec, problems = models.check_model(r)
        if spec is None:
            return problems
        if r["seq_len"] > spec.max_positions:
            problems.append(("seq_len", f"seq_len {r['seq_len']} exceeds {spec.name}'s "
                             f"{spec.max_positions} positions"))
        if r["method"] == "qlora":
            if not machine.cuda:
                problems.append(("method", "qlora needs CUDA (4-bit bitsandbytes); this "
                                 f"machine samples with {machine.source}"))
            elif not machine.bitsandbytes:
                from .quant import bitsandbytes_reason

                problems.append(("method", f"qlora needs bitsandbytes with CUDA: "
                                 f"{bitsandbytes_reason(machine)}"))
        if r["lora_targets"]:
            unknown = sorted(set(r["lora_targets"].split(",")) - spec.target_modules)
            if unknown:
                problems.append(("lora_targets", f"{spec.name} has no modules "
                                 f"{', '.join(unknown)}; choose from "
                                 f"{', '.join(sorted(spec.target_modules))}"))
        if r["precision"] == "fp16" and not machine.cuda:
            problems.append(("precision", "fp16 mixed precision needs a CUDA device"))
        if r["precision"] == "bf16" and machine.cuda and not machine.bf16:
            problems.append(("precision", "bf16 is not supported by this GPU (needs compute "
                             "capability >= 8.0)"))
        par, dp = r["parallelism"], r["dp_size"]
        if par == "tp":
            problems.append(("parallelism", "tensor parallelism is not supported by the "
                             "fine-tuning workload (use ddp or fsdp)"))
        if r["tp_size"] != 1 or r["pp_size"] != 1:
            key = "tp_size" if r["tp_size"] != 1 else "pp_size"
            problems.append((key, "the fine-tuning workload supports tp_size = pp_size = 1"))
        if par == "single" and dp != 1:
            problems.append(("dp_size", f"dp_size {dp} needs parallelism ddp or fsdp"))
        if par in ("ddp", "fsdp") and dp < 2:
            problems.append(("parallelism", f"{par} with one device (dp_size {dp}); use "
                             "parallelism single or dp_size >= 2"))
        if dp > machine.num_devices:
            unit = "GPUs" if machine.source == "nvml" else "CPU cores"
            problems.append(("dp_size", f"dp_size {dp} exceeds the {machine.num_devices} {unit} "
                             "of this machine"))
        if par == "fsdp" and r["method"] == "qlora":
            problems.append(("parallelism", "fsdp with qlora is not supported"))
        if r["optimizer"] in BNB_OPTIMIZERS and not (machine.cuda and machine.bitsandbytes):
            problems.append(("optimizer", f"optimizer {r['optimizer']} needs CUDA and "
                             "bitsandbytes"))
        problems.extend(self.gpu_axis_problems(r, machine))
        if r.get("_dataset_kind") == "datasets":
            if r["model_source"] != "hub":
                problems.append(("dataset_name", f"{r['dataset_name']} is text for a real "
                                 "tokenizer: it needs model_source hub (zoo models train on "
                                 "synthetic or byte-level local text)"))
        elif "_dataset_path" in r:
            if spec.vocab_size < models.BYTE_OFFSET + 256:
                problems.append(("dataset_name", f"{spec.name}'s vocabulary is too small "
                                 "for byte-level text"))
            else:
                message = _local_dataset_problem(r["_dataset_path"])
                if message:
                    problems.append(("dataset_name", message))
        return problems

    def slug(self, r: dict[str, Any]) -> str:
        parts = ["ft", str(r["model"]), r["method"]]
        if r["method"] != "full":
            parts.append(f"r{r['lora_rank']}")
        parts.append(f"b{r['batch_size']}" + (f"x{r['grad_accum']}" if r["grad_accum"] != 1 else ""))
        parts.append(f"s{r['seq_len']}")
        parts.append(r["precision"])
        if r["gradient_checkpointing"]:
            parts.append("gc")
        parts.append(r["parallelism"] + (str(r["dp_size"]) if r["dp_size"] != 1 else ""))
        if r["power_limit_setting_w"] is not None:
            parts.append(f"cap{r['power_limit_setting_w']:g}w")
        return "-".join(parts)

    def num_processes(self, r: dict[str, Any]) -> int:
        return int(r["dp_size"]) if r["parallelism"] in ("ddp", "fsdp") else 1

    def columns(self, r: dict[str, Any]) -> dict[str, Any]:
        names = schema.RUN_LEVEL_FIELDS["finetune"]
        return {k: v for k, v in r.items() if k in names}

    def prepare(self) -> None:
        prepare()

    def setup(self, r: dict[str, Any], ctx: RunContext) -> Any:
        return setup(r, ctx)

    def run(self, r: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        return train(r, ctx)


SPEC = FinetuneSpec()


@functools.lru_cache(maxsize=64)
def _local_dataset_problem(path: str) -> str | None:
    """Read a local dataset once at validation (a bad line fails here, not mid-sweep)."""
    try:
        data_mod.local_token_ids(path, 1, 2, vocab_size=models.BYTE_OFFSET + 256)
    except InputError as exc:
        return str(exc)
    return None


# ---------------------------------------------------------------------------------------------
# Running (torch, transformers, TRL and PEFT are imported here only)
# ---------------------------------------------------------------------------------------------

def prepare() -> None:
    """Import torch, transformers, TRL and PEFT (seconds; done before the sampler starts).

    Also silences the deprecation chatter of the libraries' own internals (``FutureWarning``
    about names renamed for transformers v6), which says nothing about the run.
    """
    import warnings

    warnings.filterwarnings("ignore", message=r".*deprecated and will be removed in v6.*",
                            category=FutureWarning)
    import peft  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import trl  # noqa: F401


def _callback_class() -> type:
    from transformers import TrainerCallback

    from ..trainer_events import StepEventMarks

    class PowerTraceCallback(StepEventMarks, TrainerCallback):
        """Records step, eval and checkpoint events on the run clock and stops at a deadline.

        Trainer order per optimiser step: ``on_step_begin``, forward/backward/optimizer,
        ``on_step_end`` (the flow callback has decided ``should_evaluate``/``should_save``),
        logging, evaluation (``on_evaluate``), checkpoint (``on_save``). So ``eval_begin`` is
        marked in ``on_step_end`` when an evaluation follows, ``checkpoint_begin`` there too,
        or after ``eval_end`` when both follow.
        """

        def __init__(self, mark: Any, *, duration_ns: int | None, world_size: int,
                     sync: Any = None) -> None:
            self._mark = mark
            self.checkpoints = 0
            self.checkpoint_write_ns = 0
            self.checkpoint_bytes: int | None = None
            self._ckpt_begin_ns: int | None = None
            self.duration_ns = duration_ns
            self.deadline_ns: int | None = None
            self.world_size = world_size
            self.sync = sync
            self.first_begin_ns: int | None = None
            self.last_end_ns: int | None = None
            self._pending_save = False

        def mark(self, kind: str, **kw: Any) -> None:
            """Mark an event; time each checkpoint between its begin and end."""
            self._mark(kind, **kw)
            if kind == "checkpoint_begin":
                self._ckpt_begin_ns = time.monotonic_ns()

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            end = time.monotonic_ns()
            super().on_save(args, state, control, **kwargs)
            self.checkpoints += 1
            if self._ckpt_begin_ns is not None:
                self.checkpoint_write_ns += end - self._ckpt_begin_ns
                self._ckpt_begin_ns = None
            output_dir = getattr(args, "output_dir", None)
            if output_dir is not None:
                folder = Path(output_dir) / f"checkpoint-{state.global_step}"
                self.checkpoint_bytes = folder_bytes(folder)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._mark("warmup_end", label="trainer_prepare")

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now = time.monotonic_ns()
            if self.first_begin_ns is None:
                self.first_begin_ns = now
                if self.duration_ns is not None:  # the duration counts training, not set-up
                    self.deadline_ns = now + self.duration_ns
            self.mark("step_begin", step=state.global_step + 1)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.sync is not None:
                self.sync()
            self.last_end_ns = time.monotonic_ns()
            self.mark_step_end(state, control)
            if self.deadline_ns is not None and self._past_deadline():
                control.should_training_stop = True

        def _past_deadline(self) -> bool:
            past = self.deadline_ns is not None and time.monotonic_ns() >= self.deadline_ns
            if self.world_size <= 1:
                return past
            import torch
            import torch.distributed as dist

            flag = torch.tensor([1.0 if past else 0.0])
            if dist.get_backend() == "nccl":
                flag = flag.cuda()
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            return bool(flag.item() > 0)

    return PowerTraceCallback


def folder_bytes(folder: Path) -> int | None:
    """Bytes of the files under ``folder`` (``None`` when it does not exist)."""
    if not folder.is_dir():
        return None
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def node_local_checkpoint_dir(run_id: str) -> Path:
    """The default checkpoint folder: on this node's temporary storage (``$TMPDIR``), per run.

    Checkpoints never go to the output folder by default, so the speed of a shared file system
    is not an unrecorded axis of the measurement; ``checkpoint_dir`` in a sweep overrides it
    (``checkpoint_storage`` = ``configured``).
    """
    import tempfile

    return Path(tempfile.gettempdir()) / "llm-powertrace-checkpoints" / run_id


@contextlib.contextmanager
def _library_bars_off() -> Iterator[None]:
    """Hide the libraries' own progress bars; the trainer's step bar stays.

    Hidden: TRL's dataset maps, checkpoint shard writes.
    """
    import datasets.utils.logging as dlog
    import transformers.utils.logging as tlog

    was = dlog.is_progress_bar_enabled(), tlog.is_progress_bar_enabled()
    dlog.disable_progress_bar()
    tlog.disable_progress_bar()
    try:
        yield
    finally:
        if was[0]:
            dlog.enable_progress_bar()
        if was[1]:
            tlog.enable_progress_bar()


def _quiet_progress(trainer: Any) -> None:
    """Keep the step progress bar but drop the per-step log lines (``logging_steps=1``)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class StepBar(ProgressCallback):
        def on_log(self, *args: Any, **kwargs: Any) -> None:
            return None

    trainer.remove_callback(PrinterCallback)
    if any(isinstance(cb, ProgressCallback) for cb in trainer.callback_handler.callbacks):
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(StepBar())


def sft_config_kwargs(r: dict[str, Any], ctx: RunContext, output_dir: Path) -> dict[str, Any]:
    """The ``SFTConfig`` keyword arguments of a resolved run (pure; tested without training)."""
    cuda = ctx.device == "cuda"
    max_steps = r["max_steps"] if r["max_steps"] is not None else 10**9
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir),
        max_steps=int(max_steps),
        per_device_train_batch_size=r["batch_size"],
        gradient_accumulation_steps=r["grad_accum"],
        learning_rate=r["learning_rate"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim=r["optimizer"],
        bf16=r["precision"] == "bf16",
        fp16=r["precision"] == "fp16",
        gradient_checkpointing=bool(r["gradient_checkpointing"]),
        max_length=r["seq_len"],
        packing=False,
        seed=int(r["seed"]),
        data_seed=int(r["seed"]),
        logging_steps=1,
        logging_strategy="steps",
        report_to="none",
        disable_tqdm=not (ctx.progress and ctx.rank == 0),
        dataloader_num_workers=0,
        use_cpu=not cuda,
        save_strategy="steps" if r["checkpoint_every_steps"] else "no",
        save_total_limit=1,
    )
    if r["checkpoint_every_steps"]:
        kwargs["save_steps"] = r["checkpoint_every_steps"]
    if r.get("eval_every_steps"):
        kwargs.update(eval_strategy="steps", eval_steps=r["eval_every_steps"],
                      per_device_eval_batch_size=r["batch_size"])
    if r["gradient_checkpointing"]:
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if ctx.world_size > 1:
        kwargs["ddp_backend"] = "nccl" if cuda else "gloo"
        kwargs["ddp_find_unused_parameters"] = False
    # FSDP2 shards the model while it loads (setup: distributed_config), before the sampler
    # starts; the trainer then leaves the sharded model as it is (no fsdp arguments here).
    return kwargs


def base_weights_dtype(r: dict[str, Any]) -> str:
    """The dtype the base model's weights are held in for a resolved run (a ``torch`` name).

    Full fine-tuning keeps float32 master weights in every precision (bf16/fp16 compute is the
    trainer's autocast; fp16 weights cannot be trained with a gradient scaler). LoRA and QLoRA
    hold the frozen base in the compute precision (the adapters are float32, PEFT's default).
    """
    if r["method"] == "full":
        return "float32"
    return models.PRECISION_DTYPES[r["precision"]]


class Prepared:
    """A fine-tuning run set up before the sampler starts (model on its device, data, trainer).

    Attributes:
        trainer: the ``SFTTrainer``, ready to ``train()``.
        callback: the events callback.
        model_params: parameters of the instantiated base model.
        probe: the compute-dtype probe (reads the first forward pass of training).
        columns: the observed execution columns (``models.execution_columns``).
    """

    def __init__(self, trainer: Any, callback: Any, model_params: int, probe: Any,
                 columns: dict[str, Any]) -> None:
        self.trainer = trainer
        self.callback = callback
        self.model_params = model_params
        self.probe = probe
        self.columns = columns


def _train_eval_datasets(r: dict[str, Any], ctx: RunContext, vocab_size: int,
                         tokenizer: Any = None) -> tuple[Any, Any]:
    """The training dataset and, when the row evaluates, a small synthetic evaluation set."""
    n_seq = data_mod.sequences_needed(r["max_steps"] or 1000, r["global_batch_size"])
    if r.get("_dataset_kind") == "datasets":
        ids = data_mod.instruction_token_ids(r.get("_dataset_local") or r["_dataset_path"],
                                             tokenizer, n_seq, r["seq_len"])
    else:
        ids = data_mod.token_ids(r.get("_dataset_path"), n_seq, r["seq_len"],
                                 vocab_size=vocab_size, seed=int(r["seed"]))
    train_ds = data_mod.to_dataset(ids)
    eval_ds = None
    if r.get("eval_every_steps"):
        n_eval = max(2, r["batch_size"] * ctx.world_size * 2)
        eval_ds = data_mod.to_dataset(data_mod.synthetic_token_ids(
            n_eval, r["seq_len"], vocab_size=vocab_size, seed=int(r["seed"]) + 1))
    return train_ds, eval_ds


def _sft_config(r: dict[str, Any], ctx: RunContext) -> Any:
    """The row's ``SFTConfig`` (checkpointing keywords renamed where transformers >= 5 wants)."""
    from trl import SFTConfig

    output_dir = Path(ctx.checkpoint_dir or node_local_checkpoint_dir(ctx.run_id))
    kwargs = sft_config_kwargs(r, ctx, output_dir)
    if "activation_checkpointing" in SFTConfig.__dataclass_fields__:  # transformers >= 5.x
        kwargs["activation_checkpointing"] = kwargs.pop("gradient_checkpointing")
        if "gradient_checkpointing_kwargs" in kwargs:
            kwargs["activation_checkpointing_kwargs"] = kwargs.pop("gradient_checkpointing_kwargs")
    return SFTConfig(**kwargs)


def setup(r: dict[str, Any], ctx: RunContext) -> Prepared:
    """Build everything a run needs, outside the measured window (issue 11, item 2).

    The model is built directly on its device in the weights' dtype (:func:`base_weights_dtype`,
    passed explicitly on every load path), the tokenizer, the data and the trainer (PEFT wraps
    the model here) are made, and the CUDA context exists; no event is marked (this happens
    before the sampler's first tick).

    Raises:
        InputError: the instantiated model does not hold the weights' dtype the row will say.
    """
    import torch
    from peft import LoraConfig
    from trl import SFTTrainer

    spec = models.get_spec(r["model"])
    cuda = ctx.device == "cuda"
    device = f"cuda:{ctx.local_rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(ctx.local_rank)
        torch.cuda.init()
    dtype = getattr(torch, base_weights_dtype(r))
    quant = None
    device_map = None
    if r["method"] == "qlora":
        from transformers import BitsAndBytesConfig

        compute = models.torch_dtype(r["precision"])  # fp32 rows compute in fp32, not fp16
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                   bnb_4bit_compute_dtype=compute, bnb_4bit_use_double_quant=True)
        device_map = {"": ctx.local_rank}
    distributed = None
    if ctx.world_size > 1:
        _init_process_group(cuda)
    if r["parallelism"] == "fsdp":
        from transformers.distributed import DistributedConfig

        # FSDP2 (fully_shard on every decoder layer and the root) applied while loading: the
        # wrapping and sharding happen here, before the sampler starts.
        distributed = DistributedConfig(fsdp_size=int(r["dp_size"]))
    model = models.build_model(spec, r["model_source"], seed=int(r["seed"]), dtype=dtype,
                               device=device, quantization_config=quant, device_map=device_map,
                               checkpoint=r.get("_checkpoint_path"),
                               revision=r.get("model_revision"), distributed_config=distributed)
    model_params = _global_params(model) if distributed is not None else models.count_params(model)
    model.config.use_cache = False
    if quant is not None:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=bool(r["gradient_checkpointing"]))
    if r["model_source"] == "hub":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(r.get("_checkpoint_path")
                                                  or models.hub_id_of(spec),
                                                  local_files_only=True)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
    else:
        tokenizer = models.build_tokenizer()

    train_ds, eval_ds = _train_eval_datasets(r, ctx, spec.vocab_size, tokenizer)
    peft_config = None
    if r["method"] in ("lora", "qlora"):
        peft_config = LoraConfig(r=int(r["lora_rank"]), lora_alpha=float(r["lora_alpha"]),  # type: ignore[arg-type]  # PEFT annotates int; the scaling alpha/r takes a float
                                 target_modules=r["lora_targets"].split(","), lora_dropout=0.0,
                                 bias="none", task_type="CAUSAL_LM",
                                 fan_in_fan_out=spec.arch == "gpt2")  # GPT-2's Conv1D
    args = _sft_config(r, ctx)
    duration = None
    if r["target_duration_s"] is not None:
        duration = int(r["target_duration_s"] * 1e9)
    sync = torch.cuda.synchronize if cuda else None
    callback = _callback_class()(ctx.mark, duration_ns=duration, world_size=ctx.world_size,
                                 sync=sync)
    with _library_bars_off():
        trainer = SFTTrainer(model=model, args=args, train_dataset=train_ds,
                             eval_dataset=eval_ds, processing_class=tokenizer,
                             peft_config=peft_config, callbacks=[callback])
    _quiet_progress(trainer)
    columns = models.execution_columns(trainer.model, cuda=cuda)
    if quant is None:
        held = columns["weights_dtype"].split(",")[0]
        if held != base_weights_dtype(r):
            raise InputError(f"precision {r['precision']} ({r['method']}) needs the base "
                             f"weights in {base_weights_dtype(r)} but the model holds {held}",
                             field="precision")
    if ctx.world_size > 1:
        _warm_collectives(cuda)  # NCCL/gloo communicators exist before the sampler starts
    if cuda:
        torch.cuda.synchronize()
    probe = models.ComputeDtypeProbe(trainer.model)
    return Prepared(trainer, callback, model_params, probe, columns)


def _init_process_group(cuda: bool) -> None:
    """Join the launch's process group now (torchrun's environment), not inside the window."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")


def _warm_collectives(cuda: bool) -> None:
    """One all-reduce and a barrier, before ``ready`` (outside the measured window).

    The first collective sets the communicators up (seconds for NCCL across nodes).
    """
    import torch
    import torch.distributed as dist

    flag = torch.ones(1, device="cuda" if cuda else "cpu")
    dist.all_reduce(flag)
    dist.barrier()


def _global_params(model: Any) -> int:
    """Parameters of a model sharded with FSDP2 (each DTensor's global shape counted once)."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += math.prod(p.shape)  # a DTensor reports its global shape
    return total


def train(r: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Fine-tune one resolved run in this process and return its result columns.

    Uses ``ctx.prepared`` (:func:`setup`, run by the runner before the sampler starts); without
    it, sets up here, inside ``warmup_begin``/``warmup_end`` events labelled ``setup``.

    Args:
        r: the resolved settings (``SPEC.resolve``).
        ctx: run id, staging folder, event recorder, rank and world size.

    Returns:
        ``steps``, ``tokens``, ``tokens_per_s``, ``final_loss``, ``model_params``, what ran
        (``weights_dtype``, ``compute_dtype``, ``attn_implementation``, ``tf32``) and the
        library versions actually used.
    """
    import peft
    import torch
    import transformers
    import trl

    prepared = ctx.prepared
    if not isinstance(prepared, Prepared):
        ctx.mark("warmup_begin", label="setup")
        prepared = setup(r, ctx)
        ctx.mark("warmup_end", label="setup")
    ctx.prepared = None
    trainer, callback = prepared.trainer, prepared.callback
    cuda = ctx.device == "cuda"
    # The trainer's own preparation (optimizer, DDP wrapping, autocast) happens inside train()
    # before its first step: labelled, it ends at on_train_begin.
    ctx.mark("warmup_begin", label="trainer_prepare")
    with _library_bars_off():
        trainer.train()
    prepared.probe.remove()

    steps = int(trainer.state.global_step)
    tokens = steps * int(r["batch_size"]) * int(r["grad_accum"]) * ctx.world_size * int(r["seq_len"])
    span_s = None
    if callback.first_begin_ns is not None and callback.last_end_ns is not None:
        span_s = (callback.last_end_ns - callback.first_begin_ns) / 1e9
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    final_loss = float(losses[-1]) if losses and math.isfinite(losses[-1]) else None
    result = {
        "steps": steps,
        "tokens": tokens,
        "tokens_per_s": tokens / span_s if span_s and span_s > 0 else None,
        "final_loss": final_loss,
        "model_params": prepared.model_params,
        **prepared.columns,
        "compute_dtype": prepared.probe.dtype,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "peft_version": peft.__version__,
        "trl_version": trl.__version__,
        "train_span_s": span_s,
        "model_revision": r.get("_model_revision"),
        "weights_dtype_on_disk": r.get("_weights_dtype_on_disk"),
        "dataset_revision": r.get("_dataset_revision"),
        "checkpoint_storage": "configured" if ctx.checkpoint_dir else "node_local",
        "checkpoints_written": callback.checkpoints,
        "checkpoint_bytes": callback.checkpoint_bytes,
        "checkpoint_write_s": (callback.checkpoint_write_ns / 1e9 if callback.checkpoints
                               else None),
    }
    if ctx.checkpoint_dir is None and ctx.rank == 0:
        import shutil

        shutil.rmtree(node_local_checkpoint_dir(ctx.run_id), ignore_errors=True)
    del trainer, prepared
    release_memory(cuda)
    return result


def release_memory(cuda: bool) -> None:
    """Free the previous run's memory (issue 11, item 3).

    ``gc.collect()`` (after the caller dropped its references), then
    ``torch.cuda.empty_cache()`` — in that order, or the cache keeps the model's blocks and the
    next run's idle padding starts with them.
    """
    import gc

    gc.collect()
    if cuda:
        import torch

        torch.cuda.empty_cache()

