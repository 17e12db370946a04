"""What the engine asks of a performance model: how long one step (or a run of steps) takes.

The twin never looks inside a performance model; it calls three functions on the
batch it actually formed::

    >>> p = LinearStepTime(base_s=0.01, per_token_s=0.001)
    >>> p.step_time(new_tokens=4, kv_tokens=400, num_seqs=4)
    0.014
    >>> p.decode_span(num_seqs=4, kv_tokens=400, steps=3)   # 3 decode steps of 4 sequences
    0.042
    >>> p.steps_within(num_seqs=4, kv_tokens=400, budget_s=0.03)
    2

Meaning of the arguments (the same as ``infermeter.perfmodel``'s ``Deployment``):

- ``new_tokens``: tokens computed in the step (one per decoding sequence plus every
  prefill-chunk token);
- ``kv_tokens``: context tokens attended in the step, summed over the batch (each
  sequence's cached tokens plus its new ones);
- ``num_seqs``: sequences in the batch;
- ``attn_pairs``: query x key pairs over the batch: a decode adds its context, a
  prefill chunk of ``c`` tokens after ``k`` cached ones adds ``c * (k + (c + 1) / 2)``;
  ``None`` for pure decode steps (the pairs then equal ``kv_tokens``).

``decode_span(num_seqs, kv_tokens, steps)`` is the time of ``steps`` consecutive
decode-only steps of ``num_seqs`` sequences whose first step attends ``kv_tokens``
(growing by ``num_seqs`` per step); ``steps_within`` is the largest number of such
steps that fit in ``budget_s``. :class:`LinearStepTime` is the in-package fake: exact
closed forms, used by tests and as a stand-in where no hardware model is wanted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@runtime_checkable
class StepTimePredictor(Protocol):
    """Seconds for the batch the engine formed (see the module docstring)."""

    def step_time(self, new_tokens: int, kv_tokens: int, num_seqs: int, attn_pairs: float | None = None) -> float: ...

    def decode_span(self, num_seqs: int, kv_tokens: int, steps: int) -> float: ...

    def steps_within(self, num_seqs: int, kv_tokens: int, budget_s: float) -> int: ...


@dataclass(frozen=True, slots=True)
class LinearStepTime:
    """Step time linear in the batch: ``base + per_token*new + per_kv*kv + per_seq*seqs + per_pair*pairs``.

    ``pairs`` defaults to ``kv`` (pure decode). Closed forms: with ``q = per_kv + per_pair``,
    a decode span of ``k`` steps of ``n`` sequences starting at ``kv`` costs
    ``k*(c + q*kv) + q*n*k*(k-1)/2`` with ``c = base + (per_token + per_seq)*n``;
    ``steps_within`` inverts it exactly.
    """

    base_s: float = 0.005
    per_token_s: float = 2.0e-5
    per_kv_token_s: float = 0.0
    per_seq_s: float = 0.0
    per_pair_s: float = 0.0

    def step_time(self, new_tokens: int, kv_tokens: int, num_seqs: int, attn_pairs: float | None = None) -> float:
        pairs = kv_tokens if attn_pairs is None else attn_pairs
        return (
            self.base_s
            + self.per_token_s * new_tokens
            + self.per_kv_token_s * kv_tokens
            + self.per_seq_s * num_seqs
            + self.per_pair_s * pairs
        )

    def decode_span(self, num_seqs: int, kv_tokens: int, steps: int) -> float:
        if steps <= 0:
            return 0.0
        kv_s = self.per_kv_token_s + self.per_pair_s
        c = self.base_s + (self.per_token_s + self.per_seq_s) * num_seqs + kv_s * kv_tokens
        return steps * c + kv_s * num_seqs * steps * (steps - 1) / 2.0

    def steps_within(self, num_seqs: int, kv_tokens: int, budget_s: float) -> int:
        if budget_s <= 0:
            return 0
        kv_s = self.per_kv_token_s + self.per_pair_s
        c = self.base_s + (self.per_token_s + self.per_seq_s) * num_seqs + kv_s * kv_tokens
        a = kv_s * num_seqs / 2.0  # span(k) = a k^2 + (c - a) k
        if a <= 0:
            k = int(budget_s / c) if c > 0 else 1 << 40
        else:
            b = c - a
            k = int((-b + math.sqrt(b * b + 4 * a * budget_s)) / (2 * a))
        # guard the float edges so that span(k) <= budget < span(k + 1)
        while k > 0 and self.decode_span(num_seqs, kv_tokens, k) > budget_s:
            k -= 1
        while self.decode_span(num_seqs, kv_tokens, k + 1) <= budget_s:
            k += 1
        return k

    def saturation_rate(self, input_tokens: int, output_tokens: int, max_num_seqs: int) -> float:
        """Requests/s when ``max_num_seqs`` slots are always full (per_kv and per_pair ignored).

        Each request holds a slot for ``output_tokens`` steps (its prefill step makes the
        first token) and computes ``input + output - 1`` tokens, so ``n`` requests take
        ``base*n*O/B + per_token*n*(I+O-1) + per_seq*n*O`` seconds.
        """
        per_req = (
            self.base_s * output_tokens / max_num_seqs
            + self.per_token_s * (input_tokens + output_tokens - 1)
            + self.per_seq_s * output_tokens
        )
        return 1.0 / per_req
