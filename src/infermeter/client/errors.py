"""Error classes a request can end in; records store the class name only.

Tree (names as stored in ``RequestRecord.error_class``)::

    request error
    ├── connect_error          TCP/TLS connect failed, or reset before any response
    ├── client_fd_limit        this client had no file descriptor left to connect (EMFILE/ENFILE,
    │                          client.session): never the server's failure; the run is invalid
    ├── timeouts
    │   ├── connect_timeout    no connection within --connect-timeout
    │   ├── first_token_timeout no token within --first-token-timeout of the send
    │   └── total_timeout      not finished within --timeout of the send
    ├── http_429               rate limited
    ├── http_4xx               other client errors (bad model name, too long a prompt, ...)
    ├── http_5xx               server errors, incl. an error object before the first token
    ├── stream_cut             the stream broke or ended unfinished (detail says before/after 1st token)
    ├── malformed_response     not SSE/JSON we can read, a response with no choices, or a
    │                          Content-Encoding the client cannot decode (named in the detail)
    └── empty_response         ended normally without a single token although max_tokens > 0
"""

from __future__ import annotations

import re
from http import HTTPStatus

from infermeter.redact import clip

AUTH_STATUSES = (401, 403)  # the server wants a (different) API key


def http_detail(status: int, body: str) -> str:
    """The detail of a failed HTTP response: ``HTTP 401 Unauthorized: {body}`` (status first, always).

    The body is redacted (``infermeter.redact``: servers echo keys and headers back) before it is cut."""
    try:
        phrase = " " + HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    body = clip(" ".join(body.split()), 200)
    return f"HTTP {status}{phrase}" + (f": {body}" if body else "")


def status_of(detail: str | None) -> int | None:
    """The HTTP status a detail written by :func:`http_detail` names (None for other details)."""
    m = re.match(r"HTTP (\d{3})\b", detail or "")
    return int(m.group(1)) if m else None


def auth_hint(status: int, key_given: bool) -> str:
    """What to do about a 401/403: pass a key, or check the one given."""
    if key_given:
        return "the server refused the API key given; check --api-key / OPENAI_API_KEY"
    return "the server wants an API key; pass --api-key KEY or set OPENAI_API_KEY"


def http_error_class(status: int) -> str:
    if status == 429:
        return "http_429"
    if 400 <= status < 500:
        return "http_4xx"
    if status >= 500:
        return "http_5xx"
    return "malformed_response"  # 1xx/3xx (a redirect we did not follow) or a 2xx other than 200


class RequestFailed(Exception):
    """Raised inside the client to end a request with an error class and a short detail."""

    def __init__(self, error_class: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.error_class = error_class
        self.detail = clip(detail, 300)  # redacted before the cut: a key straddling it never survives in part
        self.status = status
