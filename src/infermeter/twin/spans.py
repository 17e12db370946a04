"""Decode spans: runs of identical decode-only steps, timed in closed form, and how they are cut short.

Part of :class:`~infermeter.twin.engine.Engine` (a mixin over its state). When no prefill is
pending and nothing can be admitted, the engine's next steps differ only in their contexts
(each decoding sequence gains a token per step), so one ``schedule()`` covers them all: up to
the next finish, the step whose KV blocks no longer fit, or a known next arrival
(:meth:`DecodeSpans._span_steps`), timed by the performance model's ``decode_span``. The pending
span can later be shortened to the step in progress at a moment ``t``: a request arriving
(:meth:`interrupt`), a client giving up (:meth:`cut`), or the run stopping (:meth:`settle`)::

    end = engine.interrupt(t)      # None: nothing changed; else the span's new end time
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from typing import Any

from infermeter.twin.predictor import StepTimePredictor
from infermeter.twin.request import DECODE

_INF = math.inf


class DecodeSpans:
    """The span half of the engine (see the module docstring); ``self`` is the engine."""

    # the step in flight: (steps, n_dec, plan, ends, start, kv, duration, first step's decode blocks)
    _pending: tuple[int, int, list[Any], list[float], float, int, float, int] | None
    waiting: Any
    predictor: StepTimePredictor
    block_size: int
    n_dec: int
    g: int
    _phase: list[int]
    _heap: list[int]
    _ends: dict[int, list[Any]]
    max_span_steps: int

    def interrupt(self, t: float) -> float | None:
        """A request was just added at ``t`` during a decode span: end the span with the step in progress
        at ``t`` (the request joins the next step, as step by step). The span's new end time, or None
        when nothing changed (no span in flight, or the arrival waits behind others)."""
        if len(self.waiting) != 1:
            return None
        return self.cut(t)

    def cut(self, t: float) -> float | None:
        """End a decode span in flight with the step in progress at ``t`` (an arrival, or a client that
        gave up: the engine sees it between steps); its new end time, or None when nothing changed."""
        p = self._pending
        if p is None or p[0] <= 1:
            return None
        steps, n_dec, plan, ends, start, kv, dur, d0 = p
        if t >= start + dur:
            return None
        if ends:
            s = bisect_right(ends, t)  # steps ending at or before t
            k = s if s and ends[s - 1] == t else s + 1
            if k >= steps:
                return None
            ends = ends[:k]
            dur = ends[-1] - start
        else:
            s = self.predictor.steps_within(n_dec, kv, t - start)
            k = s if s and start + self.predictor.decode_span(n_dec, kv, s) == t else s + 1
            if k >= steps:
                return None
            dur = self.predictor.decode_span(n_dec, kv, k) if k > 1 else self.predictor.step_time(n_dec, kv, n_dec, None)
        self._pending = (k, n_dec, plan, ends, start, kv, dur, d0)
        return start + dur

    def settle(self, t: float) -> float | None:
        """The run stops at ``t``: keep the steps of the one in flight that end by ``t``; their end time
        (then :meth:`complete` it), or None (nothing in flight ends by ``t``; it is dropped)."""
        p = self._pending
        if p is None:
            return None
        steps, n_dec, plan, ends, start, kv, dur, d0 = p
        if start + dur <= t:
            return start + dur
        if steps > 1:
            if ends:
                k = bisect_right(ends, t)
                if k:
                    ends = ends[:k]
                    self._pending = (k, n_dec, plan, ends, start, kv, ends[-1] - start, d0)
                    return ends[-1]
            else:
                k = self.predictor.steps_within(n_dec, kv, t - start)
                if k:
                    dur = (self.predictor.decode_span(n_dec, kv, k) if k > 1
                           else self.predictor.step_time(n_dec, kv, n_dec, None))
                    self._pending = (k, n_dec, plan, ends, start, kv, dur, d0)
                    return start + dur
        self._pending = None
        return None

    def _blocks_for(self, steps: int) -> int:
        """New KV blocks the decoding requests need over the next ``steps`` steps."""
        bs = self.block_size
        full, rest = divmod(steps, bs)
        total = full * self.n_dec
        g = self.g + full * bs
        phase = self._phase
        for j in range(rest):
            total += phase[(g + j) % bs]
        return total

    def _span_steps(self, now: float, horizon: float, kv: int, free: int) -> int:
        """Identical decode steps until the next finish, KV exhaustion or ``horizon`` (at least 1)."""
        heap = self._heap
        while heap and heap[0] not in self._ends:  # keys whose requests all left decode early
            heapq.heappop(heap)
        g = self.g
        k = min(heap[0] - g, self.max_span_steps) if heap else self.max_span_steps
        if k <= 1:
            return 1
        n = self.n_dec
        bs = self.block_size
        cycles = free // n
        if cycles * bs < k:  # KV may run out first: last step whose demand still fits
            kv_steps = cycles * bs
            left = free - cycles * n
            phase = self._phase
            while kv_steps < k:
                d = phase[(g + kv_steps) % bs]
                if d > left:
                    break
                left -= d
                kv_steps += 1
            k = max(1, kv_steps)
        if not self.waiting and horizon < _INF and k > 1:
            k = max(1, min(k, self.predictor.steps_within(n, kv, horizon - now)))
        return k

    def _step_ends(self, now: float, n: int, kv: int, steps: int) -> list[float]:
        """End times of each step of a decode span (keep_token_times: per-token times)."""
        t = now
        ends = []
        st = self.predictor.step_time
        for j in range(steps):
            t += st(n, kv + j * n, n, None)
            ends.append(t)
        return ends
