"""Live statistics for the progress display, updated as records arrive.

Cheap per record (a few appends); windowed so a 72-hour run stays bounded
(old entries leave on ``add`` as well as on ``snapshot``)::

    live = LiveStats(window_s=10)
    live.add(record)
    live.snapshot(now)  # {"done", "errors", "in_flight", "req_per_s", "out_tok_per_s", "ttft_p50_ms"}
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from infermeter.records.record import RequestRecord


class LiveStats:
    def __init__(self, window_s: float = 10.0, ttft_window: int = 2000) -> None:
        self.window_s = window_s
        self.done = 0
        self.ok = 0
        self.errors = 0
        self.in_flight = 0
        self._recent: deque[tuple[float, int]] = deque()
        self._ttft: deque[float] = deque(maxlen=ttft_window)

    def add(self, rec: RequestRecord) -> None:
        self.done += 1
        if rec.outcome == "ok":
            self.ok += 1
            end = rec.ended_at or 0.0
            self._recent.append((end, rec.completion_tokens or rec.stream_tokens))
            cut = end - self.window_s
            while self._recent[0][0] < cut:  # bounded without a display calling snapshot()
                self._recent.popleft()
            if rec.first_token_at is not None and rec.sent_at is not None:
                self._ttft.append(rec.first_token_at - rec.sent_at)
        elif rec.outcome == "error":
            self.errors += 1

    def snapshot(self, now: float) -> dict[str, Any]:
        cut = now - self.window_s
        while self._recent and self._recent[0][0] < cut:
            self._recent.popleft()
        span = min(self.window_s, max(now, 1e-9))
        toks = sum(n for _, n in self._recent)
        return {
            "done": self.done,
            "errors": self.errors,
            "in_flight": self.in_flight,
            "req_per_s": len(self._recent) / span,
            "out_tok_per_s": toks / span,
            "ttft_p50_ms": float(np.median(self._ttft)) * 1000 if self._ttft else None,
        }
