"""Hugging Face Hub datasets by name, through the ``datasets`` library (extra ``hf``).

::

    entries, info = load_hub_dataset("AI-MO/aimo-validation-aime", split="train")
    entries[0].prompt[:40], entries[0].max_tokens    # problem text; tokens of its solution

Each row becomes a request: the prompt comes from ``prompt_field`` or the first
of :data:`PROMPT_FIELDS` the rows have; a chat column (``messages``,
``conversations``) becomes a conversation. The output length is, when a
reference answer exists (:data:`ANSWER_FIELDS`), the token count of that
answer, as vLLM's benchmark does for AIMO. Nothing is imported until a Hub
dataset is asked for; a missing library or an unreachable Hub is a
:class:`DataError` that says what to do.
"""

from __future__ import annotations

from typing import Any

from infermeter.errors import DataError
from infermeter.workload.datafiles import Entry, parse_object

PROMPT_FIELDS = ("prompt", "problem", "question", "instruction", "input", "query", "text")
CHAT_FIELDS = ("messages", "conversations", "conversation")
ANSWER_FIELDS = ("solution", "answer", "response", "output", "completion", "target")


def _load(name: str, split: str) -> Any:
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"--dataset {name}: Hugging Face Hub datasets need the 'datasets' package "
            "(pip install 'infermeter[hf]'); or pass a local JSON, JSONL or CSV file"
        ) from None
    try:
        return datasets.load_dataset(name, split=split)
    except Exception as exc:  # the library raises many types for "offline" and "not found"
        msg = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise DataError(
            f"--dataset {name}: could not load split {split!r} from the Hugging Face Hub or its cache "
            f"({type(exc).__name__}: {msg}); check the name and network, or pass a local file"
        ) from None


def load_hub_dataset(
    name: str,
    *,
    split: str = "train",
    prompt_field: str | None = None,
    answer_field: str | None = None,
    count_tokens: Any = None,
) -> tuple[list[Entry], dict[str, Any]]:
    """Rows of a Hub dataset as entries, and facts for ``describe()``.

    ``count_tokens(text) -> int`` measures reference answers (their length
    becomes ``max_tokens``); without it answers are ignored.
    """
    ds = _load(name, split)
    columns = list(getattr(ds, "column_names", []) or [])
    chat = next((c for c in CHAT_FIELDS if c in columns), None)
    field = prompt_field or next((c for c in PROMPT_FIELDS if c in columns), None)
    if prompt_field and prompt_field not in columns:
        raise DataError(f"--dataset {name}: no column {prompt_field!r}; columns: {', '.join(columns)}")
    if field is None and chat is None:
        raise DataError(
            f"--dataset {name}: found no prompt column ({', '.join(PROMPT_FIELDS)}) or chat column; "
            f"columns: {', '.join(columns)}; set the prompt_field option"
        )
    answer = answer_field or next((c for c in ANSWER_FIELDS if c in columns and c != field), None)
    entries: list[Entry] = []
    for i, row in enumerate(ds):
        where = f"{name}[{split}] row {i}"
        if field is None:
            entries.append(parse_object({"conversations": row[chat]}, where, time_key_ms=True))
            continue
        text = row.get(field)
        if not isinstance(text, str) or not text:
            raise DataError(f"{where}: column {field!r} is not a non-empty string")
        max_tokens = None
        ref = row.get(answer) if answer else None
        if count_tokens is not None and isinstance(ref, str) and ref:
            max_tokens = max(1, int(count_tokens(ref)))
        entries.append(Entry(where, "request", prompt=text, max_tokens=max_tokens))
    if not entries:
        raise DataError(f"--dataset {name}: split {split!r} has no rows")
    info = {
        "name": name,
        "split": split,
        "prompt_field": field or chat,
        "answer_field": answer if count_tokens is not None else None,
        "fingerprint": getattr(ds, "_fingerprint", None),
        "rows": len(entries),
    }
    return entries, info
