"""The arithmetic of one replica's step time, on the coefficients a :class:`~infermeter.perfmodel.api.Deployment` resolved.

Promise: :class:`StepCost` holds plain floats (seconds per unit) and computes the step time of
``infermeter.perfmodel.api``'s formula (its docstring), the closed-form decode span and its
inverse, with nothing else (a step of more than ``ubatch`` tokens runs as equal micro-batches, each a pass
over the weights with its own overheads; pure decode is ``C0(n) + D K``, fitted on two contexts when
even a decode batch is micro-batched): no catalog, no validation, no allocation but a small cache of decode
coefficients per batch size. A ``Deployment`` delegates its ``step_time``, ``decode_span`` and
``steps_within`` here (one definition), and hands this object to the twin's engines
(``Deployment.step_cost``), which call it at every engine iteration; the fast build (setup.py)
compiles this module with mypyc, so that call is C. Same operations in the same order in both
builds, so the same floats::

    >>> c = StepCost(lin_tok=1e-4, lin_seq=0.0, w_dense=0.01, w_expert=0.0, moe_miss=0.0, kv_write=0.0,
    ...              att_pair=0.0, kv_read=1e-6, comm_step=0.0, comm_tok=0.0, oh_step=0.002, oh_seq=0.0,
    ...              dequant=0.0, k=math.inf)
    >>> round(c.step_time(8, 8000, 8), 6)       # max(8e-4, 0.01) + max(0, 0.008) + 0.002
    0.02
    >>> c.steps_within(8, 8000, c.decode_span(8, 8000, 5))
    5
"""

from __future__ import annotations

import math
from typing import Any

DEQUANT_MIN_TOKENS = 32  # ggml-cuda MMQ_MAX_BATCH_SIZE: larger batches dequantise GGUF weights to FP16 for cuBLAS
# the largest step (new tokens) an engine replays as a captured CUDA/HIP graph: vLLM V1's default capture sizes end at
# 512 (vllm/config compilation max_capture_size); larger steps run eagerly even with graphs, so an eager run's launch
# cost (oh_launch) is extra only up to here. One cut-off for every engine: vLLM V0 and SGLang capture pure-decode
# batches only (V0 up to 256 sequences), so their small prompt steps are charged launches they pay with graphs too
GRAPH_MAX_TOKENS = 512


class StepCost:
    """Seconds of one engine iteration (or a span of decode steps) of one replica; see the module docstring."""

    def __init__(self, *, lin_tok: float, lin_seq: float, w_dense: float, w_expert: float, moe_miss: float,
                 kv_write: float, att_pair: float, kv_read: float, comm_step: float, comm_tok: float,
                 oh_step: float, oh_seq: float, dequant: float, k: float, score: float = 0.0, ubatch: int = 0,
                 expert_lat: float = 0.0, att_dec: float = 0.0, oh_launch: float = 0.0) -> None:
        self.lin_tok = lin_tok
        self.lin_seq = lin_seq
        self.w_dense = w_dense
        self.w_expert = w_expert
        self.moe_miss = moe_miss  # 1 - experts_per_token/experts (0: dense)
        self.kv_write = kv_write
        self.att_pair = att_pair
        self.kv_read = kv_read
        self.comm_step = comm_step
        self.comm_tok = comm_tok
        self.oh_step = oh_step
        self.oh_seq = oh_seq
        self.dequant = dequant  # a dequantisation pass (steps of more than DEQUANT_MIN_TOKENS tokens)
        self.k = k  # the smooth maximum's exponent
        self.score = score  # seconds per attention score element (new token x cached token) materialised in DRAM
        self.ubatch = ubatch  # a step of more tokens runs as ceil(T / ubatch) passes over the weights (0: one pass)
        self.expert_lat = expert_lat  # seconds if every expert is touched: MoE layers x experts x the per-expert tile cost
        # seconds per pair on top of att_pair for at most one query per cached token (a decode's pairs): MLA decodes in
        # the absorbed form, costlier per pair than the form its prompts are prefilled in (0: one form)
        self.att_dec = att_dec
        # seconds a step of at most GRAPH_MAX_TOKENS new tokens pays on top of oh_step: the kernel launches of an eager run,
        # which a captured graph would replay in one launch (decode and verification steps, small prompt chunks)
        self.oh_launch = oh_launch
        self._coeffs: dict[int, tuple[float, float]] = {}

    def _args(self) -> dict[str, float]:  # ubatch travels as a float (a whole number) and is restored by _rebuild
        return {"lin_tok": self.lin_tok, "lin_seq": self.lin_seq, "w_dense": self.w_dense, "w_expert": self.w_expert,
                "moe_miss": self.moe_miss, "kv_write": self.kv_write, "att_pair": self.att_pair,
                "kv_read": self.kv_read, "comm_step": self.comm_step, "comm_tok": self.comm_tok,
                "oh_step": self.oh_step, "oh_seq": self.oh_seq, "dequant": self.dequant, "k": self.k, "score": self.score,
                "ubatch": float(self.ubatch), "expert_lat": self.expert_lat, "att_dec": self.att_dec,
                "oh_launch": self.oh_launch}

    def __reduce__(self) -> tuple[Any, ...]:  # both builds (a compiled class has no __dict__): the coefficients
        return (_rebuild, (self._args(),))

    def smax(self, x: float, y: float) -> float:
        """The smooth maximum ``(x^k + y^k)^(1/k)`` (k = 2: ``hypot``; k = inf: ``max``)."""
        k = self.k
        if k == 2.0:
            return math.hypot(x, y)
        if k == math.inf:
            return x if x > y else y
        return (x**k + y**k) ** (1.0 / k) if (x > 0 or y > 0) else 0.0

    def weight_time(self, new_tokens: int) -> float:
        """Seconds to stream the weights one step touches (all experts a batch of ``new_tokens`` routes to)."""
        if self.moe_miss:
            return self.w_dense + self.w_expert * (1.0 - self.moe_miss**new_tokens)
        return self.w_dense + self.w_expert

    def expert_time(self, new_tokens: int) -> float:
        """Seconds of the per-expert fixed cost: the touched share ``1 - miss^T`` of all MoE layers' experts."""
        if self.expert_lat and self.moe_miss:
            return self.expert_lat * (1.0 - self.moe_miss**new_tokens)
        return self.expert_lat

    def launch_time(self, new_tokens: int) -> float:
        """Seconds of an eager run's launches a step of ``new_tokens`` pays (``oh_launch`` up to GRAPH_MAX_TOKENS, else 0)."""
        return self.oh_launch if new_tokens <= GRAPH_MAX_TOKENS else 0.0

    def step_time(self, new_tokens: int, kv_tokens: int, num_seqs: int, attn_pairs: float | None = None) -> float:
        """Seconds for one engine iteration (``Deployment.step_time`` says what the arguments are)."""
        if new_tokens <= 0 or num_seqs <= 0:
            return 0.0
        if attn_pairs is None:
            pairs = new_tokens * (kv_tokens / num_seqs - 0.5 * new_tokens / num_seqs + 0.5)
        else:
            pairs = attn_pairs
        ub = self.ubatch
        launch = self.launch_time(new_tokens)
        if ub > 0 and new_tokens > ub:
            return self._micro_batched(new_tokens, kv_tokens, pairs, num_seqs) + self.oh_seq * num_seqs + launch
        # smax(compute, weights + KV writes) + smax(attention, KV reads); smax and weight_time inlined (every step)
        x = self.lin_tok * new_tokens + self.lin_seq * num_seqs
        moe = self.moe_miss
        y = (self.w_dense + self.w_expert * (1.0 - moe**new_tokens) if moe else self.w_dense + self.w_expert) \
            + self.kv_write * new_tokens
        a = self.att_pair * pairs + self.att_dec * (pairs if pairs < kv_tokens else float(kv_tokens))
        b = self.kv_read * kv_tokens + self.score * new_tokens * kv_tokens  # as _pass: score traffic without flash attention
        k = self.k
        if k == 2.0:
            lin = math.hypot(x, y)
            att = math.hypot(a, b)
        elif k == math.inf:
            lin = x if x > y else y
            att = a if a > b else b
        else:
            lin = self.smax(x, y)
            att = self.smax(a, b)
        t = lin + att + self.comm_step + self.comm_tok * new_tokens + self.oh_step + self.oh_seq * num_seqs + launch
        if self.expert_lat:
            t += self.expert_lat * (1.0 - moe**new_tokens) if moe else self.expert_lat
        return t + self.dequant if new_tokens > DEQUANT_MIN_TOKENS else t

    def _pass(self, tokens: float, kv: float, pairs: float, num_seqs: float) -> float:
        """One pass over the weights for ``tokens`` new tokens (all but the per-sequence cost and the dequantisation)."""
        lin = self.smax(self.lin_tok * tokens + self.lin_seq * num_seqs,
                        self.weight_time(int(math.ceil(tokens))) + self.kv_write * tokens)
        att = self.smax(self.att_pair * pairs + self.att_dec * min(pairs, kv), self.kv_read * kv + self.score * tokens * kv)
        return lin + att + self.comm_step + self.comm_tok * tokens + self.oh_step + self.expert_time(int(math.ceil(tokens)))

    def _micro_batched(self, new_tokens: int, kv_tokens: int, pairs: float, num_seqs: int) -> float:
        """``ceil(T / ubatch)`` equal passes; pass ``j`` sees the cache up to its own tokens (``K - T + j T/m``)."""
        m = (new_tokens + self.ubatch - 1) // self.ubatch
        tok = new_tokens / m
        total = 0.0
        for j in range(1, m + 1):
            kv = max(kv_tokens - new_tokens + j * tok, tok)
            total += self._pass(tok, kv, pairs / m, num_seqs / m) + (self.dequant if tok > DEQUANT_MIN_TOKENS else 0.0)
        return total

    def _decode_coeffs(self, num_seqs: int) -> tuple[float, float]:
        got = self._coeffs.get(num_seqs)  # the twin's decode spans ask for the same batch sizes over and over
        if got is None:
            if 0 < self.ubatch < num_seqs:  # micro-batched decode: nearly linear in the context, fitted on two contexts
                k1, k2 = float(num_seqs * 64), float(num_seqs * 4096)
                t1, t2 = self.step_time(num_seqs, int(k1), num_seqs), self.step_time(num_seqs, int(k2), num_seqs)
                slope = (t2 - t1) / (k2 - k1)
                got = (t1 - slope * k1, slope)
            else:
                got = (self.step_time(num_seqs, 0, num_seqs, 0.0),
                       self.smax(self.att_pair + self.att_dec, self.kv_read + self.score * num_seqs))
            self._coeffs[num_seqs] = got
        return got

    def decode_span(self, num_seqs: int, kv_tokens: int, steps: int) -> float:
        """Seconds for ``steps`` pure-decode steps of ``num_seqs`` sequences, context growing by ``num_seqs`` a step."""
        if steps <= 0 or num_seqs <= 0:
            return 0.0
        c0, d = self._decode_coeffs(num_seqs)
        return steps * c0 + d * (steps * kv_tokens + num_seqs * steps * (steps - 1) / 2)

    def steps_within(self, num_seqs: int, kv_tokens: int, budget_s: float) -> int:
        """Largest number of pure-decode steps whose :meth:`decode_span` is <= ``budget_s``."""
        if num_seqs <= 0 or budget_s <= 0:
            return 0
        c0, d = self._decode_coeffs(num_seqs)
        a, b = d * num_seqs / 2, c0 + d * kv_tokens - d * num_seqs / 2
        s = int(budget_s / b) if a == 0 else int((-b + math.sqrt(b * b + 4 * a * budget_s)) / (2 * a))
        s = max(s, 0)
        while s > 0 and self.decode_span(num_seqs, kv_tokens, s) > budget_s:
            s -= 1
        while self.decode_span(num_seqs, kv_tokens, s + 1) <= budget_s:
            s += 1
        return s


def _rebuild(args: dict[str, float]) -> StepCost:
    rest = {k: v for k, v in args.items() if k != "ubatch"}
    return StepCost(**rest, ubatch=int(args.get("ubatch", 0)))
