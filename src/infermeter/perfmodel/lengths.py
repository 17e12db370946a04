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

An output cap is not ignored: a client that sends every request with ``max_tokens`` C (a corpus row's
``max_output`` setting, ``plan --max-output``) stops the outputs there, and when C is within a few means
it cuts the tail that sets a finite run's drain (100 chat requests of mean 551 tokens: the longest
uncapped one about 3,000 tokens, capped at 1,024). The capped law is the kind's law cut at C, all the mass
beyond it sitting at C; its mean is the stated (measured) one, so the uncapped law behind it (``free_o``)
has a larger mean, solved for. Equal lengths have no tail and ignore the cap.

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
_SIG = math.sqrt(math.log(1 + SHAREGPT_CV ** 2))  # the log-normal's sigma for that coefficient of variation


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@dataclass(frozen=True, slots=True)
class Lengths:
    kind: str
    mean_i: float
    mean_o: float
    cap_o: float | None = None  # every output stops at this many tokens (a request's max_tokens); None: no cap
    free_o: float = 0.0  # the mean the outputs would have without the cap (mean_o when there is none)

    def __post_init__(self) -> None:
        if self.cap_o is None and self.free_o != self.mean_o:  # built directly, not through of(): no cap, one mean
            object.__setattr__(self, "free_o", self.mean_o)
        if self.cap_o is not None and not self.free_o >= self.mean_o > 0:
            raise ConfigError(f"output cap {self.cap_o:g}: build a capped length law with Lengths.of (its uncapped mean is "
                              "solved for there)")

    @classmethod
    def of(cls, kind: str | None, input_tokens: float, output_tokens: float, max_output: float | None = None) -> Lengths:
        """``max_output``: the cap every request carried (``max_tokens``), ``output_tokens`` being the mean of the capped
        outputs as measured; the uncapped distribution of the kind is the one whose capped mean that is. Equal lengths
        ignore it."""
        k = (kind or "fixed").strip().lower()
        if k not in KINDS:
            raise ConfigError(f"length distribution {kind!r} unknown; use one of {', '.join(KINDS)}")
        mean_i, mean_o = float(max(input_tokens, 1)), float(max(output_tokens, 1))
        if max_output is None or k == "fixed":
            return cls(k, mean_i, mean_o, None, mean_o)
        if not max_output >= mean_o:
            raise ConfigError(f"output cap {max_output:g}: below the mean output of {mean_o:g} tokens")
        cap = float(max_output)
        target = min(mean_o, cap * (1 - 1e-4))  # a mean at the cap: (practically) every output reaches it
        lo, hi = target, target
        while _capped_mean(k, hi, cap) < target:
            hi *= 2
        for _ in range(80):  # the capped mean grows with the uncapped one: bisect
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _capped_mean(k, mid, cap) < target else (lo, mid)
        return cls(k, mean_i, mean_o, cap, (lo + hi) / 2)

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
        """E[O^2] (of the capped outputs: ``E[min(O, cap)^2]``)."""
        if self.cap_o is None:
            return self.mean_o ** 2 * (1 + self._cv2())
        c = self.cap_o
        return _below_square(self.kind, self.free_o, c) + c * c * _tail(self.kind, self.free_o, c)

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
        mu, s = _lognormal(self.mean_i)
        pts = [math.exp(mu + s * _probit(q)) for q in qs]
        scale = self.mean_i / (sum(pts) / len(pts))  # keep the stated mean exactly
        return [max(1.0, p * scale) for p in pts]

    def survival(self, s: float) -> float:
        """P(O > s)."""
        if self.kind == "fixed":
            return 1.0 if s < self.mean_o else 0.0
        if self.cap_o is not None and s >= self.cap_o:
            return 0.0
        return _tail(self.kind, self.free_o, s)

    def residual(self, s: float) -> float:
        """P(R > s) = E[(O - s)+] / E[O]: the share of a steady-state batch still running ``s`` steps later."""
        if s <= 0:
            return 1.0
        if self.kind == "fixed":
            return max(0.0, 1 - s / self.mean_o)
        if self.cap_o is None:
            return _excess(self.kind, self.mean_o, s) / self.mean_o
        if s >= self.cap_o:
            return 0.0
        return max(0.0, _excess(self.kind, self.free_o, s) - _excess(self.kind, self.free_o, self.cap_o)) / self.mean_o

    def horizon(self) -> float:
        """An output length beyond which (practically) no request runs: the end of the drain's integral."""
        if self.kind == "fixed":
            return self.mean_o
        m = self.free_o
        free = 2 * m if self.kind == "uniform" else m * math.exp(_SIG * 4.3)
        # P(O > s) ~ 1e-5 for the log-normal (z = 4.3 above the median's scale)
        return free if self.cap_o is None else min(free, self.cap_o)


# The uncapped output law of a kind, by its mean m (uniform on [0, 2m], a log-normal of CV SHAREGPT_CV):
def _lognormal(m: float) -> tuple[float, float]:
    """(mu, sigma) of the log-normal of mean ``m``."""
    return math.log(m) - _SIG * _SIG / 2, _SIG


def _tail(kind: str, m: float, s: float) -> float:
    """P(O > s)."""
    if s <= 0:
        return 1.0
    if kind == "uniform":
        return max(0.0, 1 - s / (2 * m))
    mu, sig = _lognormal(m)
    return 1 - _phi((math.log(s) - mu) / sig)


def _excess(kind: str, m: float, s: float) -> float:
    """E[(O - s)+]."""
    if s <= 0:
        return m - s
    if kind == "uniform":
        return max(0.0, 2 * m - s) ** 2 / (4 * m)
    mu, sig = _lognormal(m)
    d2 = (mu - math.log(s)) / sig
    return max(0.0, m * _phi(d2 + sig) - s * _phi(d2))


def _below_square(kind: str, m: float, c: float) -> float:
    """E[O^2; O < c]."""
    if kind == "uniform":
        x = min(c, 2 * m)
        return x ** 3 / (6 * m)
    mu, sig = _lognormal(m)
    return math.exp(2 * mu + 2 * sig * sig) * _phi((math.log(c) - mu - 2 * sig * sig) / sig)


def _capped_mean(kind: str, m: float, c: float) -> float:
    """E[min(O, c)] = E[O] - E[(O - c)+]."""
    return m - _excess(kind, m, c)


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
