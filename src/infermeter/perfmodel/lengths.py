"""Request-length distributions: what a benchmark's prompts and outputs look like beyond their means.

Promises: :class:`Lengths` describes the prompt and output lengths of a run -- their kind and mean --
and gives what the serving model needs of them (docs/performance-model.md section 5): the moments
(``E[I]``, ``E[I^2]``, ``E[O]``, ``E[O^2]``), a few equal-weight quadrature points of the prompt
length, and the share of outputs longer than ``s`` tokens, ``P(O > s)``, and of the remaining outputs
of a run in steady state, ``P(R > s) = E[(O - s)+] / E[O]`` (the residual life of a length-biased
draw: a running sequence is caught ``O`` times more often the longer it is)::

    >>> l = Lengths.of("sharegpt", 200, 200)
    >>> round(l.mean_o, 6), round(l.o2 / l.mean_o)      # E[O^2]/E[O] = E[O] (1 + CV^2), CV 1
    (200.0, 400)
    >>> Lengths.of("fixed", 128, 128).survival(64), Lengths.of("fixed", 128, 128).residual(64)
    (1.0, 0.5)

Kinds (a corpus row's ``lengths`` setting, ``infermeter plan --lengths``):

- ``fixed``: every request has the stated lengths (TensorRT-LLM's synthetic ISL/OSL, vLLM's
  ``random`` dataset with its default range ratio 0, llama-bench). The model is then exactly the
  mean-length model of before.
- ``uniform``: independent lengths uniform on ``[1, 2 mean - 1]`` (SGLang's ``bench_serving --dataset-name
  random`` with ``--random-range-ratio 0``: ``randint(max(N r, 1), N + 1)``; the stated means are about
  half the nominal lengths).
- ``sharegpt``: independent log-normal lengths with a coefficient of variation of 1 for prompts and
  outputs (free-form chat: many short turns, a long tail). An assumption, stated: the corpus rows
  give only the means, and the dataset itself is not read here; the benchmarks' filters (prompts
  <= 1,024 tokens, prompt + output <= 2,048 in vLLM's and SGLang's samplers) cut the tail at ~5-10
  means, where a CV-1 log-normal has less than 0.1% of its mass, so the cut is ignored.

Why it matters (the convexity the mean hides): a running batch holds sequences in proportion to
their output length, so its mean context is ``E[I] + E[O^2] / (2 E[O])``, not ``E[I] + E[O]/2``; a
finite run ends in a drain whose length is set by its longest requests; prefill attention grows
with ``E[I^2]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infermeter.errors import ConfigError

KINDS = ("fixed", "uniform", "sharegpt")
SHAREGPT_CV = 1.0  # coefficient of variation of ShareGPT prompt and output lengths (assumption, module docstring)
POINTS = 8  # equal-weight quadrature points of the prompt length


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@dataclass(frozen=True, slots=True)
class Lengths:
    kind: str
    mean_i: float
    mean_o: float

    @classmethod
    def of(cls, kind: str | None, input_tokens: float, output_tokens: float) -> Lengths:
        k = (kind or "fixed").strip().lower()
        if k not in KINDS:
            raise ConfigError(f"length distribution {kind!r} unknown; use one of {', '.join(KINDS)}")
        return cls(k, float(max(input_tokens, 1)), float(max(output_tokens, 1)))

    @property
    def fixed(self) -> bool:
        return self.kind == "fixed"

    def _cv2(self) -> float:
        return {"fixed": 0.0, "uniform": 1.0 / 3.0, "sharegpt": SHAREGPT_CV ** 2}[self.kind]

    @property
    def i2(self) -> float:
        """E[I^2]."""
        return self.mean_i ** 2 * (1 + self._cv2())

    @property
    def o2(self) -> float:
        """E[O^2]."""
        return self.mean_o ** 2 * (1 + self._cv2())

    @property
    def running_context(self) -> float:
        """Mean context of the sequences a running batch holds: E[I] + E[O^2] / (2 E[O]) (output-length biased)."""
        return self.mean_i + self.o2 / (2 * self.mean_o)

    @property
    def running_reservation(self) -> float:
        """Mean of I + O over running sequences (what a reserve-up-front engine holds per sequence)."""
        return self.mean_i + self.o2 / self.mean_o

    @property
    def prompt_pairs(self) -> float:
        """E[I (I + 1) / 2]: attention (query, key) pairs of one prompt's prefill."""
        return (self.i2 + self.mean_i) / 2

    def prompt_points(self) -> list[float]:
        """Equal-weight quadrature points of the prompt length (one point, the mean, when fixed)."""
        if self.fixed:
            return [self.mean_i]
        qs = [(k + 0.5) / POINTS for k in range(POINTS)]
        if self.kind == "uniform":
            return [max(1.0, 2 * self.mean_i * q) for q in qs]
        s = math.sqrt(math.log(1 + SHAREGPT_CV ** 2))
        mu = math.log(self.mean_i) - s * s / 2
        pts = [math.exp(mu + s * _probit(q)) for q in qs]
        scale = self.mean_i / (sum(pts) / len(pts))  # keep the stated mean exactly
        return [max(1.0, p * scale) for p in pts]

    def survival(self, s: float) -> float:
        """P(O > s)."""
        m = self.mean_o
        if self.kind == "fixed":
            return 1.0 if s < m else 0.0
        if self.kind == "uniform":
            return max(0.0, 1 - s / (2 * m))
        if s <= 0:
            return 1.0
        sig = math.sqrt(math.log(1 + SHAREGPT_CV ** 2))
        mu = math.log(m) - sig * sig / 2
        return 1 - _phi((math.log(s) - mu) / sig)

    def residual(self, s: float) -> float:
        """P(R > s) = E[(O - s)+] / E[O]: the share of a steady-state batch still running ``s`` steps later."""
        m = self.mean_o
        if s <= 0:
            return 1.0
        if self.kind == "fixed":
            return max(0.0, 1 - s / m)
        if self.kind == "uniform":
            return max(0.0, (2 * m - s)) ** 2 / (4 * m * m)
        sig = math.sqrt(math.log(1 + SHAREGPT_CV ** 2))
        mu = math.log(m) - sig * sig / 2
        d2 = (mu - math.log(s)) / sig
        return max(0.0, _phi(d2 + sig) - s / m * _phi(d2))

    def horizon(self) -> float:
        """An output length beyond which (practically) no request runs: the end of the drain's integral."""
        if self.kind == "fixed":
            return self.mean_o
        if self.kind == "uniform":
            return 2 * self.mean_o
        sig = math.sqrt(math.log(1 + SHAREGPT_CV ** 2))
        return self.mean_o * math.exp(sig * 4.3)  # P(O > s) ~ 1e-5 (z = 4.3 above the median's scale)


def _probit(q: float) -> float:
    """The standard normal quantile (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02, -3.066479806614716e+01,
         2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01, -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549671010229713e+00, 4.374664141464968e+00,
         2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)
    lo = 0.02425
    if q < lo:
        r = math.sqrt(-2 * math.log(q))
        return (((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) / ((((d[0] * r + d[1]) * r + d[2]) * r + d[3]) * r + 1)
    if q > 1 - lo:
        return -_probit(1 - q)
    r = q - 0.5
    t = r * r
    return ((((((a[0] * t + a[1]) * t + a[2]) * t + a[3]) * t + a[4]) * t + a[5]) * r
            / (((((b[0] * t + b[1]) * t + b[2]) * t + b[3]) * t + b[4]) * t + 1))
