"""``build_workload``: flags in, a :class:`~infermeter.workload.spec.Workload` out.

The one entry point the load runner and the CLI call::

    wl = build_workload(profile="classification", seed=1)
    wl = build_workload(input_tokens="512,128,64,1024", output_tokens="128", api="completions")
    wl = build_workload(dataset="conversations.jsonl", tokenizer="tokenizer.json")
    wl.describe()["content_hash"]

With neither ``profile`` nor ``dataset`` the ``synthetic`` profile runs with
the given lengths (default 200 tokens in, 100 out). ``overrides`` sets profile
fields by name (``{"questions_per_document": 8}``) or dataset options
(``{"shuffle": True}``); a key that is neither is an error naming it.
"""

from __future__ import annotations

from typing import Any

from infermeter.errors import ConfigError
from infermeter.workload.context import BuildContext
from infermeter.workload.profiles import profile_params
from infermeter.workload.spec import Workload
from infermeter.workload.tokenizer import load_tokenizer


def build_workload(
    *,
    profile: str | None = None,
    dataset: str | None = None,
    input_tokens: str | None = None,
    output_tokens: str | None = None,
    prefix_tokens: int | None = None,
    prefix_groups: int | None = None,
    tokenizer: str | None = None,
    seed: int = 0,
    api: str = "chat",
    overrides: dict[str, Any] | None = None,
    prompt_salt: int = 0,
) -> Workload:
    """Build the workload the flags describe; ConfigError/DataError name the bad input.

    ``prompt_salt`` > 0 sends other text of the same lengths (profiles; a dataset sends its own text)."""
    if profile and dataset:
        raise ConfigError(f"--profile {profile} and --dataset {dataset}: give one or the other")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"--seed {seed!r}: expected a whole number >= 0")
    ctx = BuildContext(load_tokenizer(tokenizer), api=api, prompt_salt=prompt_salt)
    if dataset:
        if prefix_tokens or prefix_groups:
            raise ConfigError("--prefix-tokens/--prefix-groups apply to the synthetic profile, not to --dataset")
        from infermeter.workload.datasets import build_dataset_workload

        return build_dataset_workload(
            dataset, ctx, seed=seed, input_tokens=input_tokens, output_tokens=output_tokens, options=overrides or {}
        )
    name = profile or "synthetic"
    flags = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "prefix_tokens": prefix_tokens,
        "prefix_groups": prefix_groups,
    }
    if name == "synthetic" and prefix_groups and not prefix_tokens and not (overrides or {}).get("prefix_tokens"):
        raise ConfigError("--prefix-groups needs --prefix-tokens (the length of each shared prefix)")
    params = profile_params(name, overrides, flags)
    if params.kind == "chat":
        from infermeter.workload.chat import ChatWorkload

        return ChatWorkload(params, ctx, seed=seed)
    if params.kind == "classification":
        from infermeter.workload.classification import ClassificationWorkload

        return ClassificationWorkload(params, ctx, seed=seed)
    from infermeter.workload.synthetic import SingleTurnWorkload

    return SingleTurnWorkload(params, ctx, seed=seed)
