"""One record per request, anchored on its intended send time.

Every request the load generator *intended* to send gets exactly one
:class:`RequestRecord`, whatever happened to it (ok, error, dropped). All times
are seconds on the run's monotonic clock, relative to the run start ``t0``
(``run.json`` holds the wall-clock time of ``t0``). Measured and simulated
runs write the same record; ``run.json``'s ``source`` tells them apart.

    intended_at  when the schedule said to send (open loop) or when the slot
                 became free (closed loop)
    sent_at      when the request bytes were handed to the connection
    first_byte_at  first response byte (headers) arrived
    first_token_at first token-bearing chunk arrived
    chunk_times / chunk_tokens  every token-bearing chunk's arrival and the
                 number of tokens it carried
    first_answer_at  first chunk of the answer arrived: the first that is not a
                 reasoning model's thinking (``client.reasoning``); equal to
                 ``first_token_at`` for a response without thinking, null when no
                 answer came (or in files older than it, and simulated runs
                 without reasoning: read as ``first_token_at``)
    ended_at     response finished (or failed)

Token counts: ``prompt_tokens`` / ``completion_tokens`` come from the server's
``usage`` when it sent one (``usage_source='server'``), otherwise from the
stream (``'stream'``). A usage the client found implausible (more tokens than
the response could carry, or not counts at all) is ``'rejected'``: the counts
are then the stream's (the prompt's: the request's). ``stream_tokens`` is
always the stream's own count. ``reasoning_tokens`` / ``answer_tokens`` split
``completion_tokens`` (usage ``completion_tokens_details.reasoning_tokens`` when
the server sent it, else the tokens of the thinking chunks). Integer columns are 64-bit; :func:`conform`
reads files written with the older 32-bit ``chunk_tokens`` and files without
the newer columns (null).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

SCHEMA_VERSION = 1

# Outcome of a request.
OK = "ok"
ERROR = "error"
DROPPED = "dropped"  # never sent: run ended (or was cancelled) before its turn
# error_detail of an ok record whose server ignored "stream" and answered with one JSON body
NOT_STREAMED = "not streamed"
# usage_source of a record whose server usage was set aside (client.openai says when)
REJECTED = "rejected"

# Error classes (records store these names, never free text; detail is separate).
ERROR_CLASSES = (
    "connect_error",
    "client_fd_limit",  # this client had no file descriptor left to connect (EMFILE): invalidates the run
    "connect_timeout",
    "first_token_timeout",
    "total_timeout",
    "http_429",
    "http_4xx",
    "http_5xx",
    "stream_cut",  # the stream ended (or broke) after the first token, before completion
    "malformed_response",  # unparseable SSE/JSON, or a response with no choices
    "empty_response",  # a "successful" response that carried no token although max_tokens > 0
    # the client's own failures (never the server's): see records.store and load.runner
    "request_encoding_error",  # the request body cannot be encoded (e.g. a lone surrogate in a prompt): never sent
    "record_error",  # the record held a value no column can store (e.g. max_tokens 1e300): kept minimal, with why
    "client_error",  # an exception escaped the client while sending: the request is recorded failed, with its type
)


@dataclass(slots=True)
class RequestRecord:
    """Per-request facts; see the module docstring for each timestamp."""

    request_id: int
    phase: str = "measure"  # "warmup" | "measure"
    worker: int = 0
    intended_at: float = 0.0
    sent_at: float | None = None
    first_byte_at: float | None = None
    first_token_at: float | None = None
    ended_at: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    outcome: str = OK
    error_class: str | None = None
    error_detail: str | None = None
    http_status: int | None = None
    requested_input_tokens: int | None = None
    requested_output_tokens: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    stream_tokens: int = 0
    usage_source: str | None = None  # "server" | "stream"
    cached_tokens: int | None = None  # server-reported prompt cache hits
    conversation_id: int | None = None
    prefix_group: int | None = None
    finish_reason: str | None = None  # the server's, e.g. "length" or "stop"
    first_answer_at: float | None = None  # first answer (non-reasoning) chunk arrived
    reasoning_tokens: int | None = None  # of completion_tokens, the model's thinking
    answer_tokens: int | None = None  # of completion_tokens, the answer

    def to_row(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELDS}


_FIELDS = tuple(RequestRecord.__dataclass_fields__)

ARROW_SCHEMA = pa.schema(
    [
        ("request_id", pa.int64()),
        ("phase", pa.string()),
        ("worker", pa.int32()),
        ("intended_at", pa.float64()),
        ("sent_at", pa.float64()),
        ("first_byte_at", pa.float64()),
        ("first_token_at", pa.float64()),
        ("ended_at", pa.float64()),
        ("chunk_times", pa.list_(pa.float64())),
        ("chunk_tokens", pa.list_(pa.int64())),
        ("outcome", pa.string()),
        ("error_class", pa.string()),
        ("error_detail", pa.string()),
        ("http_status", pa.int32()),
        ("requested_input_tokens", pa.int64()),
        ("requested_output_tokens", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("stream_tokens", pa.int64()),
        ("usage_source", pa.string()),
        ("cached_tokens", pa.int64()),
        ("conversation_id", pa.int64()),
        ("prefix_group", pa.int64()),
        ("finish_reason", pa.string()),
        ("first_answer_at", pa.float64()),
        ("reasoning_tokens", pa.int64()),
        ("answer_tokens", pa.int64()),
    ]
)

COLUMNS = tuple(ARROW_SCHEMA.names)


def records_to_table(records: list[RequestRecord]) -> pa.Table:
    """Columnar table of records in ``ARROW_SCHEMA``."""
    cols = {name: [getattr(r, name) for r in records] for name in COLUMNS}
    return pa.table(cols, schema=ARROW_SCHEMA)


def conform(table: pa.Table) -> pa.Table:
    """``table`` in ``ARROW_SCHEMA`` exactly: columns in order, older types widened (32-bit
    ``chunk_tokens``), missing columns null, unknown ones dropped. Raises ``pyarrow.ArrowInvalid``
    when a column cannot be cast."""
    if table.schema == ARROW_SCHEMA:
        return table
    cols = []
    for f in ARROW_SCHEMA:
        if f.name in table.column_names:
            c = table.column(f.name)
            cols.append(c if c.type == f.type else c.cast(f.type))
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=ARROW_SCHEMA)


def rows_to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Columnar table from dict rows (missing keys become null)."""
    cols = {name: [row.get(name) for row in rows] for name in COLUMNS}
    return pa.table(cols, schema=ARROW_SCHEMA)
