"""``--dataset``: requests from a file or a Hugging Face Hub dataset instead of a profile.

::

    wl = build_workload(dataset="sharegpt.json")                       # conversations, all turns
    wl = build_workload(dataset="prompts.jsonl", output_tokens="256")  # one request per line
    wl = build_workload(dataset="burstgpt.csv")                        # a trace: specs carry arrival_s
    wl = build_workload(dataset="AI-MO/aimo-validation-aime")          # Hub (extra "hf")

Conversations (ShareGPT, HF inference-benchmarker JSON) send one request per
user turn with the whole history before it, like the ``chat`` profile; a
conversation without assistant turns gets written replies of the turn's
``max_tokens``. ``max_tokens`` is ``--output-tokens`` when given, else the
length of the file's own reply (ShareGPT), else the entry's ``max_tokens``,
else 128. Files loop forever (``shuffle`` reorders each pass) except traces,
which play once in arrival order. Options (``overrides``) are
:class:`DatasetOptions` fields.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infermeter.errors import ConfigError, DataError
from infermeter.workload.context import BuildContext
from infermeter.workload.datafiles import Entry, read_entries
from infermeter.workload.lengths import LengthDist
from infermeter.workload.replay import EntryPlayer
from infermeter.workload.spec import RequestSpec
from infermeter.workload.tokenizer import _HUB_ID
from infermeter.workload.traces import trace_order

DEFAULT_OUTPUT_TOKENS = 128


class DatasetOptions(BaseModel):
    """Options for ``--dataset`` (set through overrides)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shuffle: bool = Field(False, description="reorder entries with the seed on every pass")
    turns: Literal["all", "first"] = Field("all", description="conversations: every user turn, or the first only")
    active_conversations: int = Field(16, ge=1, description="conversations interleaved in the stream")
    min_input_tokens: int = Field(1, ge=1, description="skip requests with fewer input tokens")
    max_input_tokens: int | None = Field(None, ge=1, description="skip requests (end conversations) above this")
    time_unit: Literal["s", "ms"] | None = Field(None, description="unit of a 'timestamp' field in traces")
    block_tokens: int = Field(512, ge=1, description="tokens per Mooncake hash_ids block")
    split: str = Field("train", description="Hub datasets: split to load")
    prompt_field: str | None = Field(None, description="Hub datasets: column holding the prompt")
    answer_field: str | None = Field(None, description="Hub datasets: column whose length sets max_tokens")
    source: Literal["prose", "docs", "code"] = Field("prose", description="text for synthesised prompts and replies")


def _options(raw: dict[str, Any]) -> DatasetOptions:
    unknown = set(raw) - set(DatasetOptions.model_fields)
    if unknown:
        raise ConfigError(
            f"override {sorted(unknown)[0]!r}: not a dataset option; options: {', '.join(DatasetOptions.model_fields)}"
        )
    try:
        return DatasetOptions(**raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"dataset options: {problems}") from None


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_dataset_workload(
    dataset: str,
    ctx: BuildContext,
    *,
    seed: int,
    input_tokens: str | None,
    output_tokens: str | None,
    options: dict[str, Any],
) -> DatasetWorkload:
    """Resolve ``--dataset`` (a path, ``hf:NAME`` or a Hub id) into a workload."""
    opts = _options(options)
    if input_tokens is not None:
        raise ConfigError("--input-tokens applies to profiles; a --dataset brings its own prompts "
                          "(use the min_input_tokens/max_input_tokens options to filter them)")
    out = LengthDist.parse(output_tokens, flag="--output-tokens") if output_tokens is not None else None
    path = Path(dataset).expanduser()
    hub_name = dataset[3:] if dataset.startswith("hf:") else None
    if hub_name is None and path.exists():
        if path.is_dir():
            raise DataError(f"--dataset {dataset}: is a folder; pass a JSON, JSONL or CSV file")
        entries, fmt = read_entries(path, time_unit=opts.time_unit)
        info: dict[str, Any] = {"name": str(path), "format": fmt, "sha256": _file_hash(path)}
    elif hub_name is not None or _HUB_ID.match(dataset):
        from infermeter.workload.hub import load_hub_dataset

        name = hub_name or dataset
        entries, info = load_hub_dataset(
            name, split=opts.split, prompt_field=opts.prompt_field, answer_field=opts.answer_field,
            count_tokens=ctx.tokenizer.count if out is None else None,
        )
        info = {"format": "hf-hub", **info, "sha256": info.get("fingerprint")}
    else:
        raise DataError(f"--dataset {dataset}: no such file, and not a Hugging Face Hub id (owner/name)")
    return DatasetWorkload(entries, info, ctx, seed=seed, options=opts, output_tokens=out)


class DatasetWorkload:
    """Requests from dataset entries: looped, or played once in arrival order for traces."""

    def __init__(
        self,
        entries: list[Entry],
        info: dict[str, Any],
        ctx: BuildContext,
        *,
        seed: int,
        options: DatasetOptions,
        output_tokens: LengthDist | None,
    ) -> None:
        self.ctx = ctx
        self.seed = seed
        self.options = options
        self.output_tokens = output_tokens
        self.trace = any(e.arrival is not None for e in entries)
        self.offsets: list[float] | None = None
        if self.trace:
            entries, self.offsets = trace_order(entries)
        self.entries = entries
        kinds = {e.kind for e in entries}
        self.info = {**info, "entries": len(entries), "kinds": sorted(kinds), "trace": self.trace}
        longest = max([e.input_tokens or 0 for e in entries] + [e.max_tokens or 0 for e in entries] + [1])
        if output_tokens is not None:
            longest = max(longest, output_tokens.max)
        needs_text = "lengths" in kinds or ("conversation" in kinds and options.turns == "all")
        self.pool = ctx.pool(options.source, max(longest, DEFAULT_OUTPUT_TOKENS)) if needs_text else None
        self._player = EntryPlayer(ctx, self.pool, options, default_output=DEFAULT_OUTPUT_TOKENS)

    def describe(self) -> dict[str, Any]:
        params = self.options.model_dump(mode="json")
        params["output_tokens"] = self.output_tokens.label() if self.output_tokens else None
        sources = [{"source": "dataset", "sha256": self.info.get("sha256")}]
        if self.pool is not None:
            sources.append(self.pool.describe())
        # the salt changes only text infermeter writes (lengths-only rows, replies); a file's own text is sent as is
        return self.ctx.describe(dataset=self.info, parameters=params, sources=sources, seed=self.seed,
                                 prompt_salt=self.ctx.prompt_salt if self.pool is not None else None,
                                 shares_prefixes=None)

    def requests(self) -> Iterator[RequestSpec]:
        outs = None
        if self.output_tokens is not None:
            from infermeter.workload.lengths import LengthSampler

            outs = LengthSampler(self.output_tokens, np.random.default_rng([self.seed, 3]))
        if self.trace:
            return self._player.play_trace(self.entries, self.offsets or [], outs, seed=self.seed)
        return self._player.play_loop(self.entries, outs, seed=self.seed)
