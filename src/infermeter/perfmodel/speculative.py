"""Speculative decoding in the performance model: the ``--speculative`` option, acceptance and the cost of a step.

Promises (a stable API: the planner, the twin, ``simulate``/``emulate`` and studies all use it;
the twin imports this parser, there is no other):

- :func:`parse_spec` / :meth:`SpecConfig.parse` read ``METHOD:k=K,acceptance=A`` where METHOD is
  ``draft:MODEL`` (a catalog id, HF id or config.json path), ``eagle``, ``mtp`` or ``ngram``,
  with optional ``draft_cost=F`` (the draft's seconds per drafted token as a fraction of one target
  decode step, instead of the performance model's draft) and ``seed=S`` (the twin's draws); bad
  text raises :class:`ConfigError` naming it, on one line.
- ``acceptance=A`` is **vLLM's acceptance rate**: accepted / drafted tokens, what
  ``server_metrics.spec_decode.acceptance_rate`` reports from a server. ``rate=`` is an alias.
  ``conditional=C`` gives instead the per-position conditional probability (a draft token is
  accepted given that every one before it was); it is converted to the acceptance rate.
- The per-position model: position ``i`` (1..k) is accepted with probability ``c^i``, ``c`` the
  conditional probability, so the acceptance rate is ``A = (c + c^2 + ... + c^k) / k``
  (:func:`acceptance_rate_of`) and ``c`` is solved from ``A`` (:func:`conditional_from_rate`,
  increasing, ``c >= A``). Tokens per verification step (accepted drafts plus the target's own
  token) are ``E = 1 + k A`` -- true for any acceptance pattern, the model only shapes the
  per-position split -- which equals ``(1 - c^(k+1)) / (1 - c)`` under it::

      >>> s = SpecConfig.parse("draft:llama-3.1-8b,k=4,acceptance=0.7")
      >>> s.draft_model, s.expected_tokens, round(s.conditional, 4)
      ('llama-3.1-8b', 3.8, 0.8623)
      >>> round(geometric_tokens_per_step(4, s.conditional), 4)
      3.8
      >>> round(SpecConfig.parse("ngram:k=3,conditional=0.6").acceptance, 4)   # (0.6 + 0.36 + 0.216) / 3
      0.392

- :func:`position_acceptance` gives P(position i accepted) = ``c^i`` for i = 1..k (the
  per-position counter vLLM exposes); :func:`sample_accepted` draws one step's accepted drafts
  at conditional probability ``c``.
- :func:`draft_time` is the draft's own seconds per step for ``num_seqs`` sequences on a target
  :class:`~infermeter.perfmodel.api.Deployment`: a draft model runs ``k`` sequential decode steps
  with its own weights and KV (built on the target's hardware configuration); EAGLE and MTP run
  ``k`` steps of a one-layer head shaped like one target layer, sharing the target's lm_head;
  n-gram lookup costs nothing on the accelerator; ``draft_cost=F`` replaces all of these by
  ``k F`` target decode steps.
- :func:`verify_time` is the target's step over ``k + 1`` tokens per sequence;
  :func:`spec_step` combines both into a :class:`SpecStep` whose ``speedup`` is
  ``E x t_base / (t_verify + t_draft)``. Since ``t_verify >= t_base`` and ``t_draft >= 0`` the
  speedup never exceeds ``E = 1 + k A`` (the physical bound at batch 1; the issue's
  ``(1 - a^(k+1)) / (1 - a)`` with ``a`` the conditional probability); at high batch the verify
  step is compute-bound, grows ~``(k + 1)`` times, and the speedup shrinks below 1.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from infermeter.errors import ConfigError
from infermeter.perfmodel.api import Deployment, build_deployment
from infermeter.perfmodel.memory import layer_bytes_per_gpu
from infermeter.perfmodel.serving import Estimate

METHODS = ("draft", "eagle", "mtp", "ngram")
MAX_K = 64
_KEYS = {"k": "k", "acceptance": "acceptance", "a": "acceptance", "rate": "acceptance", "conditional": "conditional",
         "draft_cost": "draft_cost", "seed": "seed"}
_EXAMPLE = "e.g. 'ngram:k=3,acceptance=0.6' or 'draft:llama-3.1-8b,k=4,acceptance=0.7'"


def acceptance_rate_of(k: int, c: float) -> float:
    """vLLM's acceptance rate (accepted / drafted tokens) at conditional probability ``c``: ``(c + ... + c^k) / k``."""
    return (geometric_tokens_per_step(k, c) - 1.0) / k


def conditional_from_rate(k: int, rate: float) -> float:
    """The conditional probability ``c`` whose :func:`acceptance_rate_of` is ``rate`` (bisection; increasing)."""
    if rate >= 1.0 or rate <= 0.0:
        return min(max(rate, 0.0), 1.0)
    if k == 1:
        return rate
    lo, hi = rate, 1.0  # c >= rate: c^i <= c for every i
    for _ in range(60):
        mid = (lo + hi) / 2
        if acceptance_rate_of(k, mid) < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """One speculative-decoding configuration: method, drafted tokens per step, vLLM acceptance rate."""

    method: str  # draft | eagle | mtp | ngram
    k: int
    acceptance: float  # vLLM's acceptance rate: accepted / drafted tokens
    draft_model: str = ""  # the catalog id (or path) of a draft model; "" unless method == "draft"
    draft_cost: float | None = None  # the draft's cost per drafted token, a fraction of one target decode step
    seed: int = 0  # the twin's accepted-length draws (random.Random(seed + engine index))

    @classmethod
    def parse(cls, text: str, where: str = "--speculative") -> SpecConfig:
        return parse_spec(text, where)

    @property
    def label(self) -> str:
        head = f"draft:{self.draft_model}," if self.method == "draft" else f"{self.method}:"
        extra = "" if self.draft_cost is None else f",draft_cost={self.draft_cost:g}"
        return f"{head}k={self.k},acceptance={self.acceptance:.6g}{extra}"

    @property
    def conditional(self) -> float:
        """The per-position conditional probability ``c`` of the acceptance model (``acceptance_rate_of(k, c) = A``)."""
        return conditional_from_rate(self.k, self.acceptance)

    @property
    def expected_tokens(self) -> float:
        """Tokens per sequence per verification step: ``1 + k A``."""
        return expected_tokens_per_step(self.k, self.acceptance)


def parse_spec(text: str, where: str = "--speculative") -> SpecConfig:
    """``METHOD:k=K,acceptance=A[,draft_cost=F][,seed=S]`` (``draft:MODEL,k=K,...`` for a draft model;
    ``conditional=C`` instead of ``acceptance``); a one-line ConfigError naming ``where`` otherwise."""
    at = f"{where} {text!r}"
    m0 = re.match(r"^\s*([A-Za-z_-]*)\s*[:,]?(.*)$", text or "")  # "eagle:k=2,..." or "eagle,k=2,..."
    head, rest = (m0.group(1), m0.group(2)) if m0 else (text, "")
    method = head.strip().lower()
    if method not in METHODS:
        raise ConfigError(f"{at}: unknown method {head!r}; use draft:MODEL, eagle, mtp or ngram, {_EXAMPLE}")
    parts = [p.strip() for p in rest.split(",") if p.strip()]
    draft = ""
    if method == "draft":
        if not parts or "=" in parts[0]:
            raise ConfigError(f"{at}: draft needs a model, e.g. 'draft:llama-3.1-8b,k=4,acceptance=0.7'")
        draft, parts = parts[0], parts[1:]
    values: dict[str, str] = {}
    for p in parts:
        key, eq, val = p.partition("=")
        name = _KEYS.get(key.strip().lower())
        if not eq or name is None or not val.strip():
            raise ConfigError(f"{at}: {p!r} is not one of k=K, acceptance=A (vLLM's accepted/drafted tokens; alias "
                              f"rate=), conditional=C, draft_cost=F, seed=S")
        if name in values:
            raise ConfigError(f"{at}: {name} given twice")
        values[name] = val.strip()
    if "k" not in values or ("acceptance" in values) == ("conditional" in values):
        raise ConfigError(f"{at}: give k=K (drafted tokens per step) and one of acceptance=A (0..1, vLLM's accepted / "
                          f"drafted tokens) or conditional=C (0..1, per position given the ones before)")
    form = "acceptance" if "acceptance" in values else "conditional"
    try:
        k = int(values["k"])
        a = float(values[form])
        cost = float(values["draft_cost"]) if "draft_cost" in values else None
        seed = int(values.get("seed", "0"))
    except ValueError:
        raise ConfigError(f"{at}: k and seed must be integers, {form} and draft_cost numbers "
                          f"(k=4,acceptance=0.7)") from None
    if not 1 <= k <= MAX_K:
        raise ConfigError(f"{at}: k={k} must be within 1..{MAX_K}")
    if not 0.0 <= a <= 1.0:
        raise ConfigError(f"{at}: {form}={a:g} must be within 0..1")
    if cost is not None and not 0.0 <= cost < 1e3:
        raise ConfigError(f"{at}: draft_cost={cost:g} must be >= 0 (a fraction of one target decode step)")
    if form == "conditional":
        a = acceptance_rate_of(k, a)
    return SpecConfig(method=method, k=k, acceptance=a, draft_model=draft, draft_cost=cost, seed=seed)


def expected_tokens_per_step(k: int, acceptance: float) -> float:
    """Expected tokens emitted per verification step at vLLM acceptance rate ``acceptance``: ``1 + k A``."""
    if k < 0 or not 0.0 <= acceptance <= 1.0:
        raise ValueError(f"k={k} must be >= 0 and acceptance={acceptance} within 0..1")
    return 1.0 + k * acceptance


def geometric_tokens_per_step(k: int, c: float) -> float:
    """Tokens per step at conditional probability ``c``: ``(1 - c^(k+1)) / (1 - c)``; ``k + 1`` at ``c = 1``."""
    if k < 0 or not 0.0 <= c <= 1.0:
        raise ValueError(f"k={k} must be >= 0 and conditional={c} within 0..1")
    if c >= 1.0:
        return float(k + 1)
    return float(sum(c**i for i in range(k + 1)))  # the sum, not the ratio: exact near c = 1


def position_acceptance(k: int, acceptance: float) -> list[float]:
    """P(draft position i is accepted) for i = 1..k at acceptance rate ``acceptance``: ``c^i``."""
    c = conditional_from_rate(k, acceptance)
    return [c**i for i in range(1, k + 1)]


def sample_accepted(rng: random.Random, k: int, conditional: float) -> int:
    """Accepted drafts of one step (0..k) at conditional probability ``conditional`` (see
    :attr:`SpecConfig.conditional`): independent per-token trials, stop at the first rejection."""
    n = 0
    while n < k and rng.random() < conditional:
        n += 1
    return n


_DRAFTS: dict[tuple[str, str, str, str, int, str, str, bool], Deployment] = {}


def _draft_deployment(d: Deployment, spec: SpecConfig) -> Deployment | None:
    """The deployment whose decode step is one draft step (None for ngram); cached per target and spec."""
    if spec.method == "ngram":
        return None
    key = (d.model_name, d.config.label, d.dtype, d.engine, d.max_model_len, spec.method, spec.draft_model, d.enforce_eager)
    got = _DRAFTS.get(key)
    if got is None:
        got = _DRAFTS[key] = _build_draft(d, spec)
    return got


def _build_draft(d: Deployment, spec: SpecConfig) -> Deployment:
    cal = None  # the shipped table, as the target's (per-deployment overlays do not transfer to another model)
    # an eager engine runs its draft eagerly too (vLLM's --enforce-eager is the whole engine's)
    if spec.method == "draft":
        return build_deployment(spec.draft_model, d.config, dtype=d.dtype, engine=d.engine, calibration=cal,
                                max_model_len=d.max_model_len, gpu_memory_utilization=0.9, enforce_eager=d.enforce_eager)
    # eagle / mtp: one decoder layer shaped like the target's, sharing its lm_head
    head = dataclasses.replace(d.spec, name=f"{d.spec.name}-{spec.method}-head", layers=1,
                               dense_layers=0)
    return build_deployment(head, d.config, dtype=d.dtype, engine=d.engine, calibration=cal, max_model_len=d.max_model_len,
                            enforce_eager=d.enforce_eager)


def draft_deployment(d: Deployment, spec: SpecConfig) -> Deployment | None:
    """The draft (model or head) as a deployment on the target's hardware; None for n-gram lookup."""
    return _draft_deployment(d, spec)


def draft_time(d: Deployment, spec: SpecConfig, num_seqs: int, kv_tokens: int) -> float:
    """Seconds the draft spends per verification step: ``k`` sequential decode steps of ``num_seqs`` sequences."""
    if num_seqs <= 0:
        return 0.0
    if spec.draft_cost is not None:
        return spec.k * spec.draft_cost * d.step_time(num_seqs, kv_tokens, num_seqs)
    dd = _draft_deployment(d, spec)
    if dd is None:
        return 0.0
    return dd.decode_span(num_seqs, kv_tokens, spec.k)


def verify_time(d: Deployment, spec: SpecConfig, num_seqs: int, kv_tokens: int) -> float:
    """Seconds of the target's verification step: ``k + 1`` tokens per sequence in one forward pass."""
    n = num_seqs * (spec.k + 1)
    return d.step_time(n, kv_tokens + num_seqs * spec.k, num_seqs)


@dataclass(frozen=True, slots=True)
class SpecStep:
    """One decode step with and without speculation, for ``num_seqs`` sequences."""

    t_base: float  # target decode step, one token per sequence
    t_verify: float  # target step over k + 1 tokens per sequence
    t_draft: float  # the draft's k proposals
    expected_tokens: float  # E, tokens per sequence per step

    @property
    def speedup(self) -> float:
        """Decode tokens per second with speculation over without: ``E t_base / (t_verify + t_draft)``."""
        return self.expected_tokens * self.t_base / (self.t_verify + self.t_draft)

    @property
    def tpot_factor(self) -> float:
        """Effective time per output token over the plain decode step's: ``1 / speedup``."""
        return 1.0 / self.speedup


def spec_step(d: Deployment, spec: SpecConfig, num_seqs: int, kv_tokens: int) -> SpecStep:
    """The speculative step's pieces for ``num_seqs`` sequences reading ``kv_tokens`` context tokens."""
    n = max(num_seqs, 1)
    return SpecStep(t_base=d.step_time(n, kv_tokens, n), t_verify=verify_time(d, spec, n, kv_tokens),
                    t_draft=draft_time(d, spec, n, kv_tokens), expected_tokens=spec.expected_tokens)


def _draft_weights_gib(d: Deployment, spec: SpecConfig, dd: Deployment | None) -> float:
    """GiB per GPU the draft adds: a draft model's weights; a head's one layer (it shares the target's lm_head)."""
    if dd is None:
        return 0.0
    if spec.method == "draft":
        return round(dd.weights_gib_per_gpu, 3)
    return round(layer_bytes_per_gpu(dd.spec, dd.precision, d.config.tp) / 2**30, 3)


def _interval_scaled(iv: tuple[float, float], factor: float) -> tuple[float, float]:
    lo, hi = iv[0] * factor, iv[1] * factor
    return (min(lo, hi), max(lo, hi))


def apply_to_estimate(d: Deployment, spec: SpecConfig, est: Estimate, sat: float, sat_batch: int, input_tokens: int,
                      output_tokens: int, intervals: dict[str, tuple[float, float]]
                      ) -> tuple[Estimate, float, dict[str, tuple[float, float]], dict[str, Any]]:
    """A plan's estimate with speculation: (estimate, saturation tokens/s, intervals, the ``speculative`` JSON block).

    Per replica with ``n`` running sequences at mean context ``I + O/2``: TPOT is the plain TPOT
    over :attr:`SpecStep.speedup` at ``n``; E2E and throughput follow; the saturation throughput
    is scaled by the speedup at the saturation batch. The 80% intervals of the timing figures
    are the plain plan's (the step-time model's out-of-sample error) scaled by the same factor;
    the acceptance is an input and is not part of them: ``speedup_at_acceptance`` shows how the
    speedup moves with it.
    """
    pp = d.pipeline_depth
    ctx = input_tokens + output_tokens / 2
    n = max(1, math.ceil(est.running_per_replica / pp))
    step = spec_step(d, spec, n, int(n * ctx))
    f = step.tpot_factor
    o = max(output_tokens, 1)
    tpot = est.tpot_s * f
    e2e = est.ttft_s + (o - 1) * tpot
    thr = d.config.replicas * est.running_per_replica * o / e2e
    new = dataclasses.replace(est, tpot_s=tpot, e2e_s=e2e, output_tokens_per_s=thr, per_user_tokens_per_s=1.0 / tpot)
    nb = max(1, math.ceil(sat_batch / pp))
    sat_step = spec_step(d, spec, nb, int(nb * ctx))
    sat_new = sat * sat_step.speedup
    thr_factor = thr / est.output_tokens_per_s
    scale = {"tpot_ms": f, "per_user_output_tokens_per_s": 1.0 / f, "output_tokens_per_s": thr_factor,
             "saturation_output_tokens_per_s": sat_step.speedup}
    ivs = {k: (_interval_scaled(v, scale[k]) if k in scale else v) for k, v in intervals.items()}
    sens = {}
    for da in (-0.1, 0.1):
        a2 = min(max(spec.acceptance + da, 0.0), 1.0)
        s2 = dataclasses.replace(spec, acceptance=a2)
        sens[f"{a2:.2f}"] = round(dataclasses.replace(step, expected_tokens=s2.expected_tokens).speedup, 3)
    dd = draft_deployment(d, spec)
    block: dict[str, Any] = {
        "method": spec.method, "draft_model": spec.draft_model or None, "k": spec.k, "acceptance": spec.acceptance,
        "conditional_acceptance": round(spec.conditional, 4),
        "expected_tokens_per_step": round(step.expected_tokens, 4),
        "speedup_bound": round(step.expected_tokens, 4),
        "speedup": round(step.speedup, 4),
        "tpot_ms_without": round(est.tpot_s * 1e3, 3),
        "base_step_ms": round(step.t_base * 1e3, 4), "verify_step_ms": round(step.t_verify * 1e3, 4),
        "draft_ms_per_step": round(step.t_draft * 1e3, 4),
        "saturation_speedup": round(sat_step.speedup, 4), "saturation_concurrency": sat_batch * d.config.replicas,
        "speedup_at_acceptance": sens,
        "draft_weights_gib_per_gpu": _draft_weights_gib(d, spec, dd),
        "basis": ("TPOT = plain TPOT x (t_verify + t_draft) / (E t_base) at the running batch; E = 1 + k A "
                  "from the given acceptance rate A (vLLM's accepted / drafted tokens); intervals are the plain plan's "
                  "scaled by the same factor (acceptance not included); the draft's weights and KV are not subtracted "
                  "from the target's KV capacity"),
    }
    return new, sat_new, ivs, block
