"""Speculative-decoding acceptance from a server's counters: the ``server_metrics.spec_decode`` block.

Promise: :func:`spec_decode_block` turns counter *increases over the run* (or a window) into the
block; :func:`spec_decode_summary` does it from the scraper's rows (one per scrape, the signals of
:data:`SPEC_SIGNALS` as :mod:`infermeter.telemetry.adapters` extracts them). ``None`` when the
server exposes no speculative-decoding metric (the block is then left out, never zeros)::

    >>> b = spec_decode_block(drafts=100, draft_tokens=300, accepted=180, per_position=[80, 60, 40])
    >>> b["acceptance_rate"], b["mean_accepted_length"], b["per_position_acceptance"]
    (0.6, 2.8, [0.8, 0.6, 0.4])
    >>> round(b["conditional_acceptance"], 4)   # 180 accepted / (180 + 60 drafts stopped before k)
    0.75

Definitions (vLLM's, ``vllm/v1/spec_decode/metrics.py`` and its offline example):

- ``acceptance_rate`` = Δaccepted tokens / Δdraft tokens;
- ``mean_accepted_length`` = 1 + Δaccepted tokens / Δdrafts (tokens emitted per verify step of a
  sequence, the bonus token included);
- ``per_position_acceptance[i]`` = Δaccepted at draft position ``i`` / Δdrafts;
- ``num_speculative_tokens`` = Δdraft tokens / Δdrafts (``k``);
- ``conditional_acceptance`` = Δaccepted / (Δaccepted + Δdrafts rejected before position ``k``),
  the drafts rejected being Δdrafts − Δaccepted at the last position: the probability that a draft
  token is accepted given that every one before it was (the maximum-likelihood ``a`` of the
  position-by-position model ``P(L >= i) = a^i`` that ``emulate --speculative ...,conditional=a``
  draws from). Under that model ``acceptance_rate`` is ``(a + a^2 + ... + a^k) / k``, below ``a``;
  ``--speculative ...,acceptance=A`` is that ``acceptance_rate`` (the twin solves ``a`` from it).

SGLang exposes gauges instead (``sglang:spec_accept_rate``, ``sglang:spec_accept_length``, the
latter also "accepted drafts + bonus token per forward"): their mean over the scrapes, ``source``
``"gauge"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from infermeter.telemetry._series import counter_delta, gauge_mean, ratio

MAX_POSITIONS = 16  # draft positions read per scrape (vLLM's num_speculative_tokens is rarely above 10)
POS_KEY = "spec_decode_accepted_pos_{}"
SPEC_COUNTERS = ("spec_decode_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")
SPEC_GAUGES = ("spec_accept_rate", "spec_accept_length")
SPEC_SIGNALS = SPEC_COUNTERS + SPEC_GAUGES + tuple(POS_KEY.format(i) for i in range(MAX_POSITIONS))


def spec_decode_block(drafts: float | None, draft_tokens: float | None, accepted: float | None,
                      per_position: Sequence[float | None] = ()) -> dict[str, Any] | None:
    """The block from counter increases (``None`` = not exposed); ``None`` when none is exposed."""
    if drafts is None and draft_tokens is None and accepted is None:
        return None
    pos = list(per_position)
    while pos and pos[-1] is None:
        pos.pop()
    mal = ratio(accepted, drafts)
    k = ratio(draft_tokens, drafts)
    cond = None
    if k is not None and accepted is not None and drafts is not None and len(pos) == round(k) and pos[-1] is not None:
        cond = ratio(accepted, accepted + drafts - pos[-1])
    return {
        "source": "counters",
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "num_speculative_tokens": k,
        "acceptance_rate": ratio(accepted, draft_tokens),
        "conditional_acceptance": cond,
        "mean_accepted_length": None if mal is None else 1.0 + mal,
        "per_position_acceptance": [ratio(p, drafts) for p in pos],
    }


def spec_decode_summary(rows: Sequence[dict[str, float | None]]) -> dict[str, Any] | None:
    """The block over the scrapes ``rows`` (counter deltas first to last; SGLang: gauge means)."""
    def col(key: str) -> list[float | None]:
        return [r.get(key) for r in rows]

    drafts, draft_tokens, accepted = (counter_delta(col(k)) for k in SPEC_COUNTERS)
    block = spec_decode_block(drafts, draft_tokens, accepted,
                              [counter_delta(col(POS_KEY.format(i))) for i in range(MAX_POSITIONS)])
    if block is not None:
        return block
    rate, length = gauge_mean(col("spec_accept_rate")), gauge_mean(col("spec_accept_length"))
    if rate is None and length is None:
        return None
    return {"source": "gauge", "drafts": None, "draft_tokens": None, "accepted_tokens": None,
            "num_speculative_tokens": None, "acceptance_rate": rate, "conditional_acceptance": None,
            "mean_accepted_length": length,
            "per_position_acceptance": []}


__all__ = ["MAX_POSITIONS", "SPEC_SIGNALS", "spec_decode_block", "spec_decode_summary"]
