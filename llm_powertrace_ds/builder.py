"""``datasets`` builder for LLM-PowerTrace folders: the programmatic twin of the card's YAML.

Loading scripts are gone from ``datasets`` (4.0 removed them), so this builder is not found by
``load_dataset``; it is shipped in the package and instantiated directly::

    from llm_powertrace_ds.builder import LLMPowerTrace
    b = LLMPowerTrace(config_name="finetune-llama", data_dir="llm-powertrace")
    b.download_and_prepare()
    ds = b.as_dataset(split="cpu_proxy")
    it = b.as_streaming_dataset(split="cpu_proxy")

``repo_id="<org>/llm-powertrace"`` downloads the repo first (``huggingface_hub``). The cache key
(``hash``) combines ``SCHEMA_VERSION`` with a fingerprint of the shard files (names, sizes,
modification times), so a stale cache is never served after the folder changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
from datasets.builder import Key

from . import layout, schema, shards
from .errors import ShardError


@dataclass
class LLMPowerTraceConfig(datasets.BuilderConfig):
    """One config: workload x granularity (trace, runs, requests) x optional model family."""

    workload: str = "finetune"
    granularity: str = "trace"
    family: str | None = None


def _all_configs() -> list[LLMPowerTraceConfig]:
    version = datasets.Version(schema.SCHEMA_VERSION)
    out = []
    for wl in schema.WORKLOADS:
        out.append(LLMPowerTraceConfig(name=wl, version=version, workload=wl,
                                       description=f"{wl} traces: one row per run and device"))
        for fam in schema.MODEL_FAMILIES:
            out.append(LLMPowerTraceConfig(name=f"{wl}-{fam}", version=version, workload=wl,
                                           family=fam, description=f"{wl} traces of {fam} models"))
        out.append(LLMPowerTraceConfig(name=f"{wl}_runs", version=version, workload=wl,
                                       granularity="runs", description=f"{wl}: one row per run"))
    out.append(LLMPowerTraceConfig(name=schema.REQUESTS_CONFIG, version=version,
                                   workload="inference", granularity="requests",
                                   description="inference: one row per request"))
    return out


def folder_fingerprint(root: str | Path) -> str:
    """Hash of every shard's relative path, size and mtime (changes when the data changes)."""
    root = Path(root)
    h = hashlib.sha256(schema.SCHEMA_VERSION.encode())
    data = layout.data_root(root)
    if data.is_dir():
        for p in sorted(data.rglob("*")):
            if p.name.startswith(".") or p.suffix not in layout.READ_SUFFIXES:
                continue
            st = p.stat()
            h.update(f"{p.relative_to(root).as_posix()}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


class LLMPowerTrace(datasets.ArrowBasedBuilder):
    """Builder over a local dataset folder or a Hub repo id.

    Args:
        config_name: e.g. ``finetune``, ``finetune-llama``, ``inference_runs``.
        data_dir: the dataset folder.
        repo_id: a Hub dataset repo id, downloaded with ``huggingface_hub.snapshot_download``.
        **kwargs: passed to ``datasets.ArrowBasedBuilder``.
    """

    BUILDER_CONFIG_CLASS = LLMPowerTraceConfig
    BUILDER_CONFIGS = _all_configs()
    DEFAULT_CONFIG_NAME = "finetune"
    VERSION = datasets.Version(schema.SCHEMA_VERSION)

    def __init__(self, config_name: str | None = None, data_dir: str | Path | None = None,
                 repo_id: str | None = None, **kwargs: Any) -> None:
        if data_dir is None and repo_id is not None:
            from huggingface_hub import snapshot_download

            data_dir = snapshot_download(repo_id, repo_type="dataset")
        if data_dir is None:
            raise ValueError("LLMPowerTrace needs data_dir (a folder) or repo_id (a Hub repo)")
        self._root = Path(data_dir).resolve()
        kwargs.setdefault("hash", folder_fingerprint(self._root))
        kwargs.setdefault("dataset_name", "llm_powertrace")
        super().__init__(config_name=config_name, data_dir=str(self._root), **kwargs)

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description=self.config.description,
            features=schema.features_for(self.config.name),
            license="cc-by-4.0",
        )

    def _split_generators(self, dl_manager: Any) -> list[datasets.SplitGenerator]:
        folders = layout.shard_folders(self._root).get(self.config.name, {})
        return [
            datasets.SplitGenerator(
                name=split, gen_kwargs={"files": layout.shard_files(self._root, self.config.name,
                                                                    split)})
            for split in sorted(folders)
        ]

    def _generate_tables(self, files: list[Path]) -> Iterator[tuple[Key, pa.Table]]:
        arrow_schema = self.info.features.arrow_schema
        for i, path in enumerate(files):
            try:
                for j, batch in enumerate(shards.iter_file_batches(path)):
                    table = pa.Table.from_batches([batch])
                    if table.schema != arrow_schema:
                        table = table.cast(arrow_schema)
                    yield Key(i, j), table
            except (OSError, pa.ArrowInvalid) as exc:
                raise ShardError(f"Failed to read '{path}': {type(exc).__name__}: {exc}") from None
