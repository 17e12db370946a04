"""What redaction costs a failing request and a printed line (``infermeter.redact``, ``infermeter.terminal``).

Every failed request's detail is redacted before it is recorded, and every line the console
prints is cleaned and redacted, so this is on the load generator's path. Prints microseconds per
call (best of 7) for: a 200-character detail with no credential words, the same detail fresh
each time (no cache hit), a 2 KB HTTP error body (``http_detail``: redact, then cut to 200), an
OpenAI-style 401 body that triggers the named-value patterns, and a summary table printed to a
SafeConsole against a plain rich Console.

    python benchmarks/redact_cost.py
"""

from __future__ import annotations

import io
import itertools
import timeit

from rich.console import Console

from infermeter.cli.view import summary_table
from infermeter.client.errors import http_detail
from infermeter.redact import redact_text, remember_secret
from infermeter.terminal import SafeConsole


def best_us(fn, n: int = 2000) -> float:
    return min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e6


def main() -> None:
    remember_secret("Zq7v0123456789abcdef0123")
    plain = "HTTP 500 Internal Server Error: " + "upstream failed because the model is overloaded, retry later " * 3
    counter = itertools.count()
    openai_401 = ('{"error": {"message": "Incorrect API key provided: sk-abc***xyz", "type": '
                  '"invalid_request_error", "code": "invalid_api_key"}}')
    print(f"200-char detail, repeated:           {best_us(lambda: redact_text(plain)):8.1f} us")
    print(f"200-char detail, fresh each call:    {best_us(lambda: redact_text(plain + str(next(counter)))):8.1f} us")
    print(f"2 KB body through http_detail:       {best_us(lambda: http_detail(500, plain * 10 + str(next(counter)))):8.1f} us")
    print(f"OpenAI 401 body, fresh each call:    {best_us(lambda: redact_text(openai_401 + str(next(counter)))):8.1f} us")
    s = {"label": "bench", "source": "measured", "completed": 100, "failed": 3, "duration_s": 10.0,
         "request_throughput": 10.0, "input_token_throughput": 1000.0, "output_token_throughput": 500.0,
         "errors": {"http_5xx": 3}, "error_messages": {"http_5xx": plain}, "valid": True,
         "ttft_ms": {"count": 100, "mean": 50.0, "p50": 48.0, "p90": 60.0, "p95": 70.0, "p99": 80.0}}
    for name, cls in (("rich Console", Console), ("SafeConsole", SafeConsole)):
        def show(cls=cls):
            cls(file=io.StringIO(), width=120).print(summary_table(s))
        print(f"summary table, {name + ':':14s}       {best_us(show, 50):8.1f} us")


if __name__ == "__main__":
    main()
