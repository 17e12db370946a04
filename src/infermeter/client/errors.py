"""Error classes a request can end in; records store the class name only.

Tree (names as stored in ``RequestRecord.error_class``)::

    request error
    ├── connect_error          TCP/TLS connect failed, or reset before any response
    ├── timeouts
    │   ├── connect_timeout    no connection within --connect-timeout
    │   ├── first_token_timeout no token within --first-token-timeout of the send
    │   └── total_timeout      not finished within --timeout of the send
    ├── http_429               rate limited
    ├── http_4xx               other client errors (bad model name, too long a prompt, ...)
    ├── http_5xx               server errors, incl. an error object before the first token
    ├── stream_cut             the stream broke or ended unfinished (detail says before/after 1st token)
    └── malformed_response     not SSE/JSON we can read, or a response with no choices
"""

from __future__ import annotations


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
        self.detail = detail[:300]
        self.status = status
