"""Speculative decoding in the twin: the ``--speculative`` option, the acceptance model and the draft's cost.

``--speculative METHOD:k=K,acceptance=A`` (``draft:MODEL,k=K,acceptance=A`` for a draft model;
METHOD one of ``draft``, ``eagle``, ``ngram``, ``mtp``) parses to a :class:`SpecDecode`::

    >>> s = parse_speculative("ngram:k=3,acceptance=0.6")
    >>> s.method, s.k, s.acceptance, s.draft_model
    ('ngram', 3, 0.6, None)
    >>> parse_speculative("draft:llama-3.1-8b,k=4,acceptance=0.7").draft_model
    'llama-3.1-8b'
    >>> round(expected_tokens_per_step(3, 0.6), 4)   # 1 + a + a^2 + a^3
    2.176

Acceptance model (a verify step of one sequence): draft position ``i`` (0-based) is accepted with
probability ``a`` given that every position before it was, so the accepted length ``L`` is
truncated-geometric on ``0..k`` (``P(L >= i) = a^i``) and the step emits ``L + 1`` tokens (the
target's own token after the last accepted draft: the *bonus* token).
``E[L + 1] = (1 - a^(k+1)) / (1 - a)`` (:func:`expected_tokens_per_step`; ``k + 1`` at ``a = 1``).
:func:`draw_accepted` draws ``L`` with the caller's ``random.Random`` (seeded: runs repeat).

``acceptance=a`` is that conditional probability. vLLM's reported acceptance rate (accepted /
drafted tokens) is smaller, ``E[L] / k = (a + a^2 + ... + a^k) / k`` (:func:`acceptance_rate_of`):
0.392 for ``k=3, a=0.6``. To emulate a server whose vLLM acceptance rate was measured, give
``rate=R`` instead of ``acceptance``: ``a`` is then solved from ``R`` (:func:`conditional_from_rate`)::

    >>> round(parse_speculative("ngram:k=3,rate=0.6").acceptance, 4)
    0.7655

Step cost (:meth:`SpecDecode.step_extra`): the target verifies ``k + 1`` tokens per decoding
sequence (``k`` more new tokens and attention pairs than a plain decode), plus the draft's cost:
``k`` decode steps of the draft model's own deployment (``draft:MODEL``, the performance model
of MODEL on the same hardware), or ``draft_cost`` (option, a fraction of one target decode step
per drafted token; defaults: ngram 0, eagle and mtp 0.1, a draft model without a deployment 0.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from infermeter.errors import ConfigError
from infermeter.perfmodel.speculative import expected_tokens_per_step
from infermeter.perfmodel.speculative import sample_accepted as draw_accepted
from infermeter.twin.predictor import StepTimePredictor

METHODS = ("draft", "eagle", "ngram", "mtp")
DEFAULT_DRAFT_COST = {"ngram": 0.0, "eagle": 0.1, "mtp": 0.1, "draft": 0.1}
MAX_K = 64


def acceptance_rate_of(k: int, a: float) -> float:
    """vLLM's acceptance rate (accepted / drafted tokens) under the model: ``(a + ... + a^k) / k``."""
    return (expected_tokens_per_step(k, a) - 1.0) / k


def conditional_from_rate(k: int, rate: float) -> float:
    """The ``a`` whose :func:`acceptance_rate_of` is ``rate`` (bisection; increasing in ``a``)."""
    if rate >= 1.0 or rate <= 0.0:
        return min(max(rate, 0.0), 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if acceptance_rate_of(k, mid) < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class SpecDecode:
    """Speculative decoding of one deployment (see the module docstring)."""

    method: str
    k: int
    acceptance: float
    draft_model: str | None = None
    draft_cost: float | None = None  # fraction of a target decode step per drafted token
    seed: int = 0
    draft_predictor: StepTimePredictor | None = field(default=None, compare=False, repr=False)

    @property
    def draft_fraction(self) -> float:
        return DEFAULT_DRAFT_COST[self.method] if self.draft_cost is None else self.draft_cost

    def label(self) -> str:
        head = f"draft:{self.draft_model}," if self.draft_model else f"{self.method}:"
        extra = "" if self.draft_cost is None else f",draft_cost={self.draft_cost:g}"
        return f"{head}k={self.k},acceptance={self.acceptance:g}{extra}"

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
        return {"method": self.method, "k": self.k, "acceptance": self.acceptance, "draft_model": self.draft_model,
                "draft_cost": self.draft_cost if self.draft_predictor is None else "deployment",
                "expected_tokens_per_step": expected_tokens_per_step(self.k, self.acceptance), "spec": self.label()}


def parse_speculative(text: str, where: str = "--speculative") -> SpecDecode:
    """``METHOD:k=K,acceptance=A[,draft_cost=F][,seed=S]`` or ``draft:MODEL,k=K,...``; a ConfigError
    (one line, naming ``where``) for anything else."""
    s = (text or "").strip()
    method, _, rest = s.partition(":")
    method = method.strip().lower()
    if "," in method:  # "ngram,k=3"
        method, _, more = method.partition(",")
        rest = more + ("," + rest if rest else "")
    if method not in METHODS:
        raise ConfigError(f"{where} {text!r}: method must be one of {', '.join(METHODS)} "
                          f"(e.g. ngram:k=3,acceptance=0.6 or draft:llama-3.1-8b,k=4,acceptance=0.7)")
    parts = [p.strip() for p in rest.split(",") if p.strip()]
    model = None
    if method == "draft":
        if not parts or "=" in parts[0]:
            raise ConfigError(f"{where} {text!r}: draft needs the draft model, e.g. draft:llama-3.1-8b,k=4,acceptance=0.7")
        model = parts.pop(0)
    opts: dict[str, str] = {}
    for p in parts:
        key, eq, val = p.partition("=")
        key = key.strip().lower()
        if not eq or key not in ("k", "acceptance", "rate", "draft_cost", "seed"):
            raise ConfigError(f"{where} {text!r}: {p!r} is not one of k=K, acceptance=A, rate=R, draft_cost=F, seed=S")
        opts[key] = val.strip()
    if "k" not in opts or ("acceptance" in opts) == ("rate" in opts):
        raise ConfigError(f"{where} {text!r}: give k=K (drafted tokens per step) and one of acceptance=A (0..1, "
                          f"per position) or rate=R (vLLM's accepted / drafted tokens)")
    try:
        k = int(opts["k"])
        a = float(opts.get("acceptance", opts.get("rate", "")))
        cost = float(opts["draft_cost"]) if "draft_cost" in opts else None
        seed = int(opts.get("seed", "0"))
    except ValueError:
        raise ConfigError(f"{where} {text!r}: k and seed are integers, acceptance and draft_cost numbers") from None
    if not 1 <= k <= MAX_K:
        raise ConfigError(f"{where} {text!r}: k must be 1..{MAX_K}, got {k}")
    if not 0.0 <= a <= 1.0:
        raise ConfigError(f"{where} {text!r}: {'acceptance' if 'acceptance' in opts else 'rate'} must be in [0, 1], "
                          f"got {a:g}")
    if "rate" in opts:
        a = conditional_from_rate(k, a)
    if cost is not None and not 0.0 <= cost < 1e3:
        raise ConfigError(f"{where} {text!r}: draft_cost must be >= 0 (a fraction of a target decode step)")
    return SpecDecode(method=method, k=k, acceptance=a, draft_model=model, draft_cost=cost, seed=seed)


__all__ = ["METHODS", "SpecDecode", "acceptance_rate_of", "conditional_from_rate", "draw_accepted",
           "expected_tokens_per_step", "parse_speculative"]
