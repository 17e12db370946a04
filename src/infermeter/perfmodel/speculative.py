"""Speculative decoding in the performance model: acceptance arithmetic and the cost of one step.

Promises (a stable API: the planner and the twin both use it):

- :func:`parse_spec` / :meth:`SpecConfig.parse` read ``METHOD:k=K,acceptance=A`` where METHOD is
  ``draft:MODEL`` (a catalog id, HF id or config.json path), ``eagle``, ``mtp`` or ``ngram``;
  bad text raises :class:`ConfigError` naming it.
- :func:`expected_tokens_per_step` is the expected number of tokens one verification step emits
  at per-token acceptance ``a`` with ``k`` drafted tokens (accepted prefix plus the target's own
  token): ``E = (1 - a^(k+1)) / (1 - a)`` (``k + 1`` at ``a = 1``)::

      >>> round(expected_tokens_per_step(4, 0.7), 4)
      2.7731
      >>> SpecConfig.parse("draft:llama-3.1-8b,k=4,acceptance=0.7").draft_model
      'llama-3.1-8b'

- :func:`position_acceptance` gives P(position i accepted) = ``a^i`` for i = 1..k (the
  per-position counter vLLM exposes); :func:`sample_accepted` draws one step's accepted drafts.
- :func:`draft_time` is the draft's own seconds per step for ``num_seqs`` sequences on a target
  :class:`~infermeter.perfmodel.api.Deployment`: a draft model runs ``k`` sequential decode steps
  with its own weights and KV (built on the target's hardware configuration); EAGLE and MTP run
  ``k`` steps of a one-layer head shaped like one target layer, sharing the target's lm_head;
  n-gram lookup costs nothing on the accelerator.
- :func:`verify_time` is the target's step over ``k + 1`` tokens per sequence;
  :func:`spec_step` combines both into a :class:`SpecStep` whose ``speedup`` is
  ``E x t_base / (t_verify + t_draft)``. Since ``t_verify >= t_base`` and ``t_draft >= 0`` the
  speedup never exceeds ``E`` (the physical bound at batch 1); at high batch the verify step is
  compute-bound, grows ~``(k + 1)`` times, and the speedup shrinks below 1.
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
_KEY_RE = re.compile(r"^\s*(k|acceptance|a)\s*=\s*(.+?)\s*$", re.I)


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """One speculative-decoding configuration: method, drafted tokens per step, per-token acceptance."""

    method: str  # draft | eagle | mtp | ngram
    k: int
    acceptance: float
    draft_model: str = ""  # the catalog id (or path) of a draft model; "" unless method == "draft"

    @classmethod
    def parse(cls, text: str) -> SpecConfig:
        return parse_spec(text)

    @property
    def label(self) -> str:
        head = f"draft:{self.draft_model}" if self.method == "draft" else self.method
        return f"{head},k={self.k},acceptance={self.acceptance:g}"

    @property
    def expected_tokens(self) -> float:
        return expected_tokens_per_step(self.k, self.acceptance)


def parse_spec(text: str) -> SpecConfig:
    """``METHOD:k=K,acceptance=A`` (``draft:MODEL,k=K,acceptance=A`` for a draft model)."""
    where = f"--speculative {text!r}"
    m0 = re.match(r"^\s*([A-Za-z_-]*)\s*[:,]?(.*)$", text or "")  # "eagle:k=2,..." or "eagle,k=2,..."
    head, rest = (m0.group(1), m0.group(2)) if m0 else (text, "")
    method = head.strip().lower()
    if method not in METHODS:
        raise ConfigError(f"{where}: unknown method {head!r}; use draft:MODEL, eagle, mtp or ngram, e.g. 'ngram:k=3,acceptance=0.6'")
    parts = [p for p in rest.split(",") if p.strip()]
    draft = ""
    if method == "draft":
        if not parts or "=" in parts[0]:
            raise ConfigError(f"{where}: draft needs a model, e.g. 'draft:llama-3.1-8b,k=4,acceptance=0.7'")
        draft, parts = parts[0].strip(), parts[1:]
    values: dict[str, str] = {}
    for p in parts:
        m = _KEY_RE.match(p)
        if not m:
            raise ConfigError(f"{where}: expected k=K and acceptance=A, got {p.strip()!r}")
        values["acceptance" if m.group(1).lower() == "a" else m.group(1).lower()] = m.group(2)
    try:
        k = int(values.get("k", ""))
        a = float(values.get("acceptance", ""))
    except ValueError:
        raise ConfigError(f"{where}: k must be an integer and acceptance a number, both required (k=4,acceptance=0.7)") from None
    if not 1 <= k <= 64:
        raise ConfigError(f"{where}: k={k} must be within 1..64")
    if not 0.0 <= a <= 1.0:
        raise ConfigError(f"{where}: acceptance={a:g} must be within 0..1")
    return SpecConfig(method=method, k=k, acceptance=a, draft_model=draft)


def expected_tokens_per_step(k: int, a: float) -> float:
    """Expected tokens emitted per verification step: ``(1 - a^(k+1)) / (1 - a)``; ``k + 1`` at ``a = 1``."""
    if k < 0 or not 0.0 <= a <= 1.0:
        raise ValueError(f"k={k} must be >= 0 and acceptance={a} within 0..1")
    if a >= 1.0:
        return float(k + 1)
    return float(sum(a**i for i in range(k + 1)))  # the sum, not the ratio: exact near a = 1


def position_acceptance(k: int, a: float) -> list[float]:
    """P(draft position i is accepted) for i = 1..k: ``a^i`` (a position needs every one before it)."""
    return [a**i for i in range(1, k + 1)]


def sample_accepted(rng: random.Random, k: int, a: float) -> int:
    """Accepted drafts of one step (0..k): independent per-token acceptance, stop at the first rejection."""
    n = 0
    while n < k and rng.random() < a:
        n += 1
    return n


_DRAFTS: dict[tuple[str, str, str, str, int, SpecConfig], Deployment] = {}


def _draft_deployment(d: Deployment, spec: SpecConfig) -> Deployment | None:
    """The deployment whose decode step is one draft step (None for ngram); cached per target and spec."""
    if spec.method == "ngram":
        return None
    key = (d.model_name, d.config.label, d.dtype, d.engine, d.max_model_len, spec)
    got = _DRAFTS.get(key)
    if got is None:
        got = _DRAFTS[key] = _build_draft(d, spec)
    return got


def _build_draft(d: Deployment, spec: SpecConfig) -> Deployment:
    cal = None  # the shipped table, as the target's (per-deployment overlays do not transfer to another model)
    if spec.method == "draft":
        return build_deployment(spec.draft_model, d.config, dtype=d.dtype, engine=d.engine, calibration=cal,
                                max_model_len=d.max_model_len, gpu_memory_utilization=0.9)
    # eagle / mtp: one decoder layer shaped like the target's, sharing its lm_head
    head = dataclasses.replace(d.spec, name=f"{d.spec.name}-{spec.method}-head", layers=1,
                               dense_layers=0)
    return build_deployment(head, d.config, dtype=d.dtype, engine=d.engine, calibration=cal, max_model_len=d.max_model_len)


def draft_deployment(d: Deployment, spec: SpecConfig) -> Deployment | None:
    """The draft (model or head) as a deployment on the target's hardware; None for n-gram lookup."""
    return _draft_deployment(d, spec)


def draft_time(d: Deployment, spec: SpecConfig, num_seqs: int, kv_tokens: int) -> float:
    """Seconds the draft spends per verification step: ``k`` sequential decode steps of ``num_seqs`` sequences."""
    dd = _draft_deployment(d, spec)
    if dd is None or num_seqs <= 0:
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
        "expected_tokens_per_step": round(step.expected_tokens, 4),
        "speedup_bound": round(step.expected_tokens, 4),
        "speedup": round(step.speedup, 4),
        "tpot_ms_without": round(est.tpot_s * 1e3, 3),
        "base_step_ms": round(step.t_base * 1e3, 4), "verify_step_ms": round(step.t_verify * 1e3, 4),
        "draft_ms_per_step": round(step.t_draft * 1e3, 4),
        "saturation_speedup": round(sat_step.speedup, 4), "saturation_concurrency": sat_batch * d.config.replicas,
        "speedup_at_acceptance": sens,
        "draft_weights_gib_per_gpu": _draft_weights_gib(d, spec, dd),
        "basis": ("TPOT = plain TPOT x (t_verify + t_draft) / (E t_base) at the running batch; E = (1 - a^(k+1))/(1 - a) "
                  "from the given acceptance; intervals are the plain plan's scaled by the same factor (acceptance not included); "
                  "the draft's weights and KV are not subtracted from the target's KV capacity"),
    }
    return new, sat_new, ivs, block
