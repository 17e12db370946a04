"""Speculative decoding in the twin: the parsed ``--speculative`` option with the draft's cost.

The option is parsed by the performance model's one parser (:func:`infermeter.perfmodel.speculative.parse_spec`:
``METHOD:k=K,acceptance=A[,draft_cost=F][,seed=S]``, ``draft:MODEL,k=K,...``, ``conditional=C``
instead of ``acceptance``); :func:`parse_speculative` wraps it in a :class:`SpecDecode`::

    >>> s = parse_speculative("ngram:k=3,acceptance=0.6")
    >>> s.method, s.k, s.acceptance, s.draft_model, round(s.conditional, 4)
    ('ngram', 3, 0.6, None, 0.7655)
    >>> parse_speculative("draft:llama-3.1-8b,k=4,acceptance=0.7").draft_model
    'llama-3.1-8b'
    >>> round(expected_tokens_per_step(3, 0.6), 4)   # 1 + k A
    2.8

Acceptance model (a verify step): ``acceptance=A`` is vLLM's acceptance rate (accepted / drafted
tokens), so a run against the twin reports ``server_metrics.spec_decode.acceptance_rate`` ~ ``A``.
Draft position ``i`` (1-based) is accepted with probability ``c^i``, ``c`` the conditional
probability solved from ``A`` (:attr:`SpecDecode.conditional`; ``A = (c + ... + c^k) / k``), so the
accepted length ``L`` is truncated-geometric on ``0..k`` and the step emits ``L + 1`` tokens (the
target's own *bonus* token after the last accepted draft), ``1 + k A`` on average.
:func:`draw_accepted` draws ``L`` at ``c`` with the caller's ``random.Random`` (seeded: runs repeat).

Step cost (:meth:`SpecDecode.draft_seconds`): the target verifies ``k + 1`` tokens per decoding
sequence (the engine), plus the draft's cost: ``k`` decode steps of the draft model's own
deployment (``draft:MODEL``, the performance model of MODEL on the same hardware), or
``draft_cost`` (a fraction of one target decode step per drafted token; defaults: ngram 0, eagle
and mtp 0.1, a draft model without a deployment 0.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from infermeter.perfmodel.speculative import (
    MAX_K,
    METHODS,
    SpecConfig,
    acceptance_rate_of,
    conditional_from_rate,
    expected_tokens_per_step,
    parse_spec,
)
from infermeter.perfmodel.speculative import sample_accepted as draw_accepted
from infermeter.twin.predictor import StepTimePredictor

DEFAULT_DRAFT_COST = {"ngram": 0.0, "eagle": 0.1, "mtp": 0.1, "draft": 0.1}


@dataclass(frozen=True)
class SpecDecode:
    """Speculative decoding of one deployment: the parsed option and the draft's step-time predictor."""

    config: SpecConfig
    draft_predictor: StepTimePredictor | None = field(default=None, compare=False, repr=False)
    conditional: float = field(init=False, compare=False)  # per-position probability the engine draws with

    def __post_init__(self) -> None:
        object.__setattr__(self, "conditional", self.config.conditional)

    @property
    def method(self) -> str:
        return self.config.method

    @property
    def k(self) -> int:
        return self.config.k

    @property
    def acceptance(self) -> float:
        """vLLM's acceptance rate (accepted / drafted tokens) the twin reproduces."""
        return self.config.acceptance

    @property
    def draft_model(self) -> str | None:
        return self.config.draft_model or None

    @property
    def draft_cost(self) -> float | None:
        return self.config.draft_cost

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def draft_fraction(self) -> float:
        return DEFAULT_DRAFT_COST[self.method] if self.draft_cost is None else self.draft_cost

    def label(self) -> str:
        return self.config.label

    def with_draft(self, predictor: StepTimePredictor | None) -> SpecDecode:
        return replace(self, draft_predictor=predictor)

    def draft_seconds(self, target: StepTimePredictor, n_dec: int, kv: int) -> float:
        """The draft's cost for ``n_dec`` decoding sequences attending ``kv`` context tokens."""
        if n_dec <= 0:
            return 0.0
        if self.draft_predictor is not None:
            return self.k * self.draft_predictor.step_time(n_dec, kv, n_dec, None)
        frac = self.draft_fraction
        return 0.0 if frac == 0 else self.k * frac * target.step_time(n_dec, kv, n_dec, None)

    def describe(self) -> dict[str, object]:
        return {"method": self.method, "k": self.k, "acceptance": self.acceptance,
                "conditional_acceptance": round(self.conditional, 6), "draft_model": self.draft_model,
                "draft_cost": self.draft_cost if self.draft_predictor is None else "deployment",
                "expected_tokens_per_step": expected_tokens_per_step(self.k, self.acceptance), "spec": self.label()}


def parse_speculative(text: str, where: str = "--speculative") -> SpecDecode:
    """The option as a :class:`SpecDecode` (:func:`~infermeter.perfmodel.speculative.parse_spec`'s one-line
    ConfigError naming ``where`` for bad text)."""
    return SpecDecode(parse_spec(text, where))


__all__ = ["MAX_K", "METHODS", "SpecDecode", "acceptance_rate_of", "conditional_from_rate", "draw_accepted",
           "expected_tokens_per_step", "parse_speculative"]
