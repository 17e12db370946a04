"""Serving metrics from step times: TTFT, TPOT and throughput at a concurrency, and at saturation.

Promises: :func:`at_concurrency` models a closed loop of ``concurrency`` users (spread over the
configuration's replicas), each sending ``input_tokens`` and reading ``output_tokens``, on a
continuous-batching engine with chunked prefill; :func:`saturation` models the engine filled to
its batch or KV-capacity limit (all requests queued at once)::

    >>> from infermeter.perfmodel.api import build_deployment
    >>> d = build_deployment("llama-3.1-8b", "h100-sxm")
    >>> e = at_concurrency(d, 1000, 200, 1)
    >>> e.tpot_s < e.e2e_s and e.output_tokens_per_s > 0
    True

Model, per replica with ``c`` users and ``pp`` micro-batches of ``n = c/pp`` sequences at mean
context ``I + O/2``:

- ``base``  = step time of a pure decode batch of ``n``;
- ``delta`` = extra time a step takes when it also carries one prompt (chunked by the engine's
  token budget) next to ``n - 1`` decodes (alone: the prompt's prefill time);
- other users' prompts arrive at ``lambda = (c - 1) / E2E``; waiting behind them is M/D/1:
  ``rho delta / (2 (1 - rho))`` with ``rho = lambda delta``;
- ``TTFT = request_overhead + delta + base/2 (when others decode) + wait``;
- ``TPOT = base / (1 - (c - 1) delta / E2E)`` (other users' prompts stall the decodes);
- ``E2E = TTFT + (O - 1) TPOT``, solved by fixed-point iteration; throughput ``c O / E2E``;
- a benchmark's closed loop of equal lengths (``lockstep``) keeps its users in cohorts of ``g = budget / I``
  prompts that arrive together: ``delta`` in the first token, its wait and the decodes' stall are the cohorts', ``g I``
  tokens each (France-Travail's ten users of 1,024-token prompts on A100s under vLLM 0.6: first tokens 3-7x the
  drifting-apart figure in three of its five runs; blind sets 12 and 14, read after they were scored).

Users beyond the KV-capacity (or engine) limit wait for a free slot: their extra wait is
``(c / limit - 1) E2E``. Saturation: ``B`` = min(engine max_num_seqs, KV capacity / per-sequence
reservation), and each step decodes ``B`` tokens and prefills ``B I / O`` prompt tokens; a finite run of ``N``
equal requests runs in waves of ``B``, its last (or, with ``N < B``, only) wave a static batch.
:func:`static_batch` models a batch that starts together and runs to completion (old
TensorRT-LLM benchmarks, vLLM's ``benchmark_latency``). :func:`saturated_latency` gives the mean
TTFT and TPOT of a saturated run (``N`` requests queued at once, each replica running its batch
``B`` at ``X`` output tokens/s): a running sequence gains a token every ``B / X`` seconds (the
TPOT, Little's law); the first ``B`` requests of a replica are admitted at once and their prompts
prefilled in token-budget chunks (on average half of them before a given one's); the rest queue,
the k-th admitted once ``k - B`` have finished at ``X / E[O]`` completions a second, so the mean
queue wait over all ``N`` is ``(N - B)(N - B + 1) / (2 N) E[O] / X``. That assumes completions spread
evenly, as varied lengths make them; equal lengths finish in waves of ``B``: the requests of wave ``w``
(0-based) wait ``w`` whole waves of ``B E[O] / X`` seconds and then their wave's burst of prompts (at ``N = 2B``
about twice the even spread's wait; a hundred 1024-in / 128-out requests on an RTX 4090 measured 8.9 s mean TTFT
where the even spread said 4.6 s, GPUStack's LMCache page, blind set 5, read after it was scored). With
``N < B`` there is no queue and the ``N`` run as one batch (their own decode step).

A served replica (``served=True``, the default: requests through the engine's OpenAI-compatible server) also
passes every request through the server's one process, which spends ``Deployment.frontend_s`` of serial work on
each (HTTP and JSON, the chat template, tokenisation, detokenisation and the streamed chunks; the calibration's
``frontend`` phase, per engine): a replica finishes at most ``1 / frontend_s`` requests a second, so
:func:`saturation` is at most ``replicas E[O] / frontend_s`` tokens a second. It binds for short requests (128 in /
4 out: 44-57 requests a second under vLLM's API server on H100, H200 and A100 alike, whatever the model), not where
the GPU's own rate is lower. Offline harnesses (``LLM.generate``, ``benchmark_throughput``, ``trtllm-bench``) have no
server: ``served=False``. :func:`at_concurrency` and :func:`saturated_latency` leave it out: a closed loop of a few
users pays the server's work as latency, in the request overhead, and reaches its rate only with users far beyond
the corpus's; the latency of a server-bound saturated run is not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from infermeter.perfmodel.api import Deployment
from infermeter.perfmodel.calibration import load_calibration
from infermeter.perfmodel.engines import EngineDefaults
from infermeter.perfmodel.lengths import Lengths


@dataclass(frozen=True, slots=True)
class Estimate:
    concurrency: int  # users asked for, whole configuration
    running_per_replica: int  # sequences one replica runs at once (<= max_concurrency)
    max_concurrency: int  # per replica, KV capacity and engine limit
    ttft_s: float
    tpot_s: float
    e2e_s: float
    output_tokens_per_s: float  # whole configuration
    per_user_tokens_per_s: float  # 1 / TPOT
    bound: str  # what dominates the decode step: compute | memory | communication | overhead
    shares: dict[str, float]  # fraction of the decode step by cause
    overloaded: bool = False  # at_rate only: arrivals at or past the configuration's rate, requests queue for a slot


def engine_of(d: Deployment) -> EngineDefaults:
    """The engine limits and costs ``d`` was built with (older Deployments: the shipped table's)."""
    return d.engine_defaults or load_calibration().engine(d.engine)


def max_concurrency(d: Deployment, input_tokens: int, output_tokens: int) -> int:
    """Sequences of I+O tokens one replica runs at once: KV capacity and the engine's batch limit."""
    eng = engine_of(d)
    return min(eng.max_num_seqs, d.memory.max_concurrency(input_tokens + output_tokens))


def prefill_delta(d: Deployment, input_tokens: int, others: int, other_ctx: float, budget: int) -> float:
    """Extra seconds a prompt of ``input_tokens`` adds next to ``others`` decoding sequences."""
    if others <= 0:
        return d.prefill_time(input_tokens, budget)
    k_others = others * other_ctx
    base = d.step_time(others, int(k_others), others)
    extra, done = 0.0, 0
    while done < input_tokens:
        c = min(max(budget - others, 1), input_tokens - done)
        pairs = k_others + c * (done + (c + 1) / 2)
        extra += d.step_time(others + c, int(k_others + done + c), others + 1, attn_pairs=pairs) - base
        done += c
    return extra


def bound_of(d: Deployment, n: int, ctx: float) -> tuple[str, dict[str, float]]:
    parts = d.breakdown(n, int(n * ctx), n)
    total = sum(parts.values()) or 1.0
    shares = {k: v / total for k, v in parts.items()}
    return max(shares, key=lambda k: shares[k]), shares


def at_concurrency(d: Deployment, input_tokens: int, output_tokens: int, concurrency: int,
                   lengths: Lengths | None = None, lockstep: bool = False, requests: int | None = None) -> Estimate:
    """The closed loop of the module docstring; with ``lengths`` not fixed, a running sequence's mean context is the
    output-length-biased ``E[I] + E[O^2] / (2 E[O])`` and a prompt's extra step time is averaged over the prompt lengths.

    ``lockstep`` (equal lengths, every user starting at once: a benchmark's closed loop, ``vllm bench serve
    --max-concurrency`` on fixed random lengths): the users stay in cohorts. The first wave's prompts are prefilled
    ``g = min(c, max(1, budget / I))`` a step (the engine's token budget; a prompt may split over two steps); each
    cohort then decodes in step, finishes in the same step and sends its next prompts together, so every prompt waits
    for its cohort's ``g I`` tokens, not its own ``I``: ``delta_g`` replaces ``delta`` in the first token, and the
    wait behind other prompts is behind the ``c / g - 1`` other cohorts. With ``requests`` (a finite run of ``N``)
    the first wave's cohorts also queue behind each other once, ``(c / g - 1) / 2`` cohort prefills on average, a
    share ``c / N`` of the requests (per replica; with ``N < c`` only ``N`` users ever send). The decodes stall for the other cohorts' prompts only,
    ``(c / g - 1) delta_g / E2E``: a cohort's own are in its first token (one cohort: plain decode steps). Like
    :func:`prefill_delta`, it lets an engine split a prompt over two steps (chunked prefill), so ``g`` need not be a
    whole number. Varied lengths (or Poisson arrivals) break the cohorts apart: the default, as in production traffic.
    """
    eng = engine_of(d)
    dist = lengths if lengths is not None and not lengths.fixed else None
    replicas = d.config.replicas
    per_replica = max(1, math.ceil(concurrency / replicas))
    limit = max(1, max_concurrency(d, input_tokens, output_tokens))
    c = min(per_replica, limit)
    pp = d.pipeline_depth
    n = max(1, math.ceil(c / pp))
    ctx = input_tokens + output_tokens / 2 if dist is None else dist.running_context
    base = d.step_time(n, int(n * ctx), n)
    if dist is None:
        delta = prefill_delta(d, input_tokens, n - 1, ctx, eng.max_batched_tokens)
    else:
        pts = dist.prompt_points()
        delta = sum(prefill_delta(d, max(1, round(i)), n - 1, ctx, eng.max_batched_tokens) for i in pts) / len(pts)
    o = max(output_tokens, 1)
    g = min(float(c), max(1.0, eng.max_batched_tokens / max(input_tokens, 1))) if lockstep and dist is None else 1.0
    delta_g = delta if g == 1.0 else prefill_delta(d, round(g * input_tokens), max(round(n - g), 0), ctx, eng.max_batched_tokens)
    # g is capped by the users, not by a pipeline stage's n = c / pp: one scheduler (vLLM V1) takes a cohort whole
    cohorts = c / g  # g = 1: every prompt its own cohort, the drifting-apart loop
    first_wave = 0.0
    if g > 1.0 and requests:  # the first wave's cohorts queue behind each other once; its share of this replica's run
        mine = math.ceil(requests / replicas)
        users = min(c, mine)
        first_wave = max(users / g - 1.0, 0.0) / 2 * delta_g * users / mine
    e2e = delta + (o - 1) * base
    ttft = tpot = base
    for _ in range(30):
        rho = min((cohorts - 1) * delta_g / e2e, 0.95)
        wait = rho * delta_g / (2 * (1 - rho))
        ttft = d.request_overhead_s + delta_g + (0.5 * base if c > 1 else 0.0) + wait + first_wave
        stall = min((cohorts - 1) * delta_g / e2e, 0.95)  # the other cohorts' prompts; a cohort's own are in its TTFT
        tpot = base / (1 - stall)
        new = ttft + (o - 1) * tpot
        if abs(new - e2e) <= 1e-9 * new:
            e2e = new
            break
        e2e = 0.5 * (e2e + new)
    if per_replica > limit:
        ttft += (per_replica / limit - 1) * e2e
    thr = replicas * c * o / e2e
    bound, shares = bound_of(d, n, ctx)
    return Estimate(concurrency=concurrency, running_per_replica=c, max_concurrency=limit, ttft_s=ttft, tpot_s=tpot,
                    e2e_s=ttft + (o - 1) * tpot, output_tokens_per_s=thr, per_user_tokens_per_s=1.0 / tpot,
                    bound=bound, shares=shares)


def at_rate(d: Deployment, input_tokens: int, output_tokens: int, rate: float, lengths: Lengths | None = None,
            requests: int | None = None, served: bool = True) -> Estimate:
    """An open loop: requests arrive ``rate`` a second over the whole configuration (vLLM's and SGLang's
    ``--request-rate``, Poisson), each replica taking its share ``lambda``.

    A replica in the closed loop of :func:`at_concurrency` with ``c`` users completes ``c / E2E(c)`` requests a second;
    its rate ``mu`` is the most of that over ``c`` up to its batch limit ``B`` (with long prompts or pipeline stages it
    peaks before ``B``). Below ``mu`` the replica holds ``c = lambda E2E(c)`` requests (Little's law; the smallest such
    ``c``, interpolated between whole numbers of users): the closed loop at ``c`` gives TTFT and TPOT, and the output is
    ``rate E[O]``. At or past ``mu`` arrivals queue: the replica is taken to run the ``c*`` requests at which its closed
    loop completes the most (``B`` unless long prompts or pipeline stages peak earlier; an engine would admit up to ``B``,
    each then slower, so no more complete), and request ``k`` arriving at ``k / lambda`` is admitted at
    ``a_k = max(k / lambda, a_(k-c*) + E2E(c*))``, its first token ``a_k - k / lambda`` later; without ``requests`` that
    queue has no finite mean (ValueError).

    ``requests``: a finite run of ``N`` (``--num-prompts``) split over the replicas, whose throughput counts from the
    first send to the last completion: ``N E[O] / ((n - 1) / lambda + tail)`` below ``mu`` (``n`` the busiest replica's
    share; ``tail``: once the sends stop no prompt stalls the decodes, so the last request ends within its first token
    and ``O - 1`` plain decode steps of a batch emptying from the ``c`` running, ``c / 2`` on average; at most its
    ``E2E``). Its prompts also queue for the prefill when they arrive faster than it takes them (:func:`_prompt_queue`:
    batched in token-budget steps), which adds to the first token what that queue holds above a lone prompt's prefill.
    Where its sends span less than one request's life (``s = (n - 1) / lambda / E2E < 1``) every figure leans, by
    ``1 - s``, to the burst of all ``N`` queued at once: first tokens from the prompts' queue, TPOT from
    :func:`saturated_latency`, duration from :func:`saturation` with ``requests`` (``served`` as there) or the sends if
    longer; past ``mu`` the run lasts that burst, or its sends and tail if longer. Not charged: the
    Poisson arrivals' own bunching (an M/G/B queue's wait below saturation) and the change of regime within a run
    (prompts arriving, then none), which the twin simulates.
    """
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"request rate {rate!r} must be a positive number of requests a second")
    if requests is not None and requests < 1:
        raise ValueError(f"requests {requests!r} must be >= 1")
    replicas = d.config.replicas
    lam = rate / replicas  # arrivals a second at each replica
    dist = lengths if lengths is not None and not lengths.fixed else None
    mean_o = dist.mean_o if dist is not None else float(max(output_tokens, 1))
    limit = max(1, max_concurrency(d, input_tokens, output_tokens))
    n = math.ceil(requests / replicas) if requests else None  # the busiest replica's share of a finite run
    memo: dict[int, Estimate] = {}

    def closed(users: int) -> Estimate:  # one replica with ``users`` in its closed loop
        if users not in memo:
            memo[users] = at_concurrency(d, input_tokens, output_tokens, users * replicas, lengths)
        return memo[users]

    def mix(c: float) -> tuple[Estimate, Estimate, float]:
        lo, hi = min(max(1, math.floor(c)), limit), min(max(1, math.ceil(c)), limit)
        return closed(lo), closed(hi), (min(max(c - lo, 0.0), 1.0) if hi > lo else 0.0)

    def interp(c: float) -> tuple[float, float, float, Estimate]:
        """(TTFT, TPOT, E2E) at c users, between whole numbers, and the nearer whole number's estimate."""
        a, z, w = mix(c)
        return (a.ttft_s + w * (z.ttft_s - a.ttft_s), a.tpot_s + w * (z.tpot_s - a.tpot_s),
                a.e2e_s + w * (z.e2e_s - a.e2e_s), a if w < 0.5 else z)

    def e2e(c: float) -> float:
        return interp(c)[2]

    # the replica's rate: the most c / E2E(c) over whole numbers of users (geometric steps and the limit itself)
    grid = sorted({max(1, min(limit, round(1.08 ** i))) for i in range(200)} | {limit})
    # a grid point whose ceiling cannot beat what is known needs no closed loop of its own (closed_loop_ceiling)
    ceiling = {u: closed_loop_ceiling(d, input_tokens, output_tokens, u, lengths, limit) for u in grid}
    best = (-math.inf, 0)
    for u in reversed(grid):  # from the top, where the peak usually is
        if ceiling[u] >= best[0]:
            best = max(best, (u / closed(u).e2e_s, u))
    mu, peak = best
    c = math.inf
    if lam < mu:  # below the replica's rate: the smallest c on the rising branch with c = lam E2E(c)
        hi_u = next(u for u in grid if ceiling[u] > lam and u / closed(u).e2e_s > lam)
        lo_u = max([u for u in grid if u < hi_u], default=0)
        lo_c, hi_c = float(lo_u), float(hi_u)
        for _ in range(60):
            mid = 0.5 * (lo_c + hi_c)
            lo_c, hi_c = (mid, hi_c) if mid < lam * e2e(mid) else (lo_c, mid)
        c = hi_c
    burst_s = burst_tpot = 0.0
    if n is not None and requests is not None:  # a run of n never holds more than n; all queued at once: the burst it leans to
        c = min(c, float(n))
        burst_s = requests * mean_o / saturation(d, input_tokens, output_tokens, lengths, requests, served)[0]
        burst_tpot = saturated_latency(d, input_tokens, output_tokens, lengths, requests)[1]
    if c <= limit:
        ttft, tpot, span, base = interp(c)
        thr = rate * mean_o
        if n is not None and requests is not None:
            sends = (n - 1) / lam
            alone = d.prefill_time(input_tokens, engine_of(d).max_batched_tokens)
            queue = _prompt_queue(d, input_tokens, lam, n)  # mean arrival -> prefilled, a lone prompt's included
            share = min(1.0, sends / span)  # below 1: a burst, whose figures lean to all n at once
            # once the sends stop no prompt stalls the decodes: the last request ends within its own first token
            # and O - 1 plain decode steps of the c still running
            tail = min(span, ttft + _plain_decode(d, input_tokens, output_tokens, c))
            ttft = share * (ttft + queue - alone) + (1.0 - share) * (d.request_overhead_s + queue + 0.5 * tpot)
            tpot = share * tpot + (1.0 - share) * min(tpot, burst_tpot)
            thr = requests * mean_o / (share * (sends + tail) + (1.0 - share) * max(burst_s, sends))
        in_system = max(1, round(c * replicas))
        return Estimate(concurrency=min(in_system, requests) if requests else in_system, running_per_replica=max(1, round(c)),
                        max_concurrency=limit, ttft_s=ttft, tpot_s=tpot, e2e_s=ttft + (max(output_tokens, 1) - 1) * tpot,
                        output_tokens_per_s=thr, per_user_tokens_per_s=1.0 / tpot, bound=base.bound, shares=base.shares)
    if n is None or requests is None:
        raise ValueError(f"{rate:g} requests a second is at or past what the configuration completes "
                         f"({replicas * mu:.3g} a second): the queue grows without end; give the run's "
                         "number of requests (--requests N; a row's requests=N) for its mean wait")
    top = closed(peak)
    admit = [0.0] * n
    for k in range(n):
        admit[k] = max(k / lam, admit[k - peak] + top.e2e_s) if k >= peak else k / lam
    wait = sum(admit[k] - k / lam for k in range(n)) / n
    first = max(top.ttft_s, d.request_overhead_s + _prompt_queue(d, input_tokens, lam, min(n, peak)) + 0.5 * top.tpot_s)
    tpot = min(top.tpot_s, burst_tpot)
    tail = min(top.e2e_s, top.ttft_s + _plain_decode(d, input_tokens, output_tokens, peak))
    thr = requests * mean_o / max(burst_s, (n - 1) / lam + tail)
    return Estimate(concurrency=peak * replicas, running_per_replica=peak, max_concurrency=limit, ttft_s=first + wait,
                    tpot_s=tpot, e2e_s=first + wait + (max(output_tokens, 1) - 1) * tpot, output_tokens_per_s=thr,
                    per_user_tokens_per_s=1.0 / tpot, bound=top.bound, shares=top.shares, overloaded=True)


def closed_loop_ceiling(d: Deployment, input_tokens: int, output_tokens: int, users: int, lengths: Lengths | None = None,
                        limit: int | None = None) -> float:
    """An upper bound on the requests a second one replica completes with ``users`` in its closed loop
    (``users / at_concurrency(...).e2e_s`` at ``users x replicas``), for one step time: a closed loop's E2E is at least
    ``O - 1`` of its plain decode steps (:func:`at_concurrency`: TPOT is that step over ``1 - stall``, the stall and TTFT
    are not negative), so :func:`at_rate` skips the closed loop of a user count whose ceiling cannot beat the best rate
    found or the arrival rate, with the same result. ``inf`` for one-token outputs (no decode step to bound by);
    ``limit`` is :func:`max_concurrency`'s, given when known."""
    o = max(output_tokens, 1)
    if o <= 1:
        return math.inf
    dist = lengths if lengths is not None and not lengths.fixed else None
    cap = limit if limit is not None else max(1, max_concurrency(d, input_tokens, output_tokens))
    ctx = input_tokens + output_tokens / 2 if dist is None else dist.running_context
    n = max(1, math.ceil(min(users, cap) / d.pipeline_depth))
    return users / ((o - 1) * d.step_time(n, int(n * ctx), n))


def _plain_decode(d: Deployment, input_tokens: int, output_tokens: int, c: float) -> float:
    """Seconds of the last request's ``O - 1`` decode steps once no prompt interrupts them: the ``c`` running with it
    finish along the way, so the batch empties from ``c`` towards one, ``c / 2`` on average."""
    b = max(1, round(c / 2))
    return d.decode_span(b, int(b * (input_tokens + output_tokens / 2)), max(output_tokens, 1) - 1)


def _prompt_queue(d: Deployment, input_tokens: int, lam: float, n: int) -> float:
    """Mean seconds from arrival to prefilled over ``n`` prompts arriving ``1/lam`` apart. The engine batches waiting
    prompts into token-budget steps, so a backlog drains at a full step's share per prompt, ``s = I t(budget) / budget``,
    while a prompt that finds none takes its own prefill, ``t_1``: prompt ``k`` is done at
    ``f_k = max(k / lam + t_1, f_(k-1) + s)``."""
    budget = max(engine_of(d).max_batched_tokens, 1)
    alone = d.prefill_time(input_tokens, budget)
    per = max(budget // max(input_tokens, 1), 1)  # prompts a full step carries
    tokens = per * input_tokens
    share = d.step_time(tokens, tokens, per, attn_pairs=tokens * (input_tokens + 1) / 2) / per
    done, total = 0.0, 0.0
    for k in range(n):
        done = max(k / lam + alone, done + share) if k else alone
        total += done - k / lam
    return total / n


def saturation(d: Deployment, input_tokens: int, output_tokens: int, lengths: Lengths | None = None,
               requests: int | None = None, served: bool = True) -> tuple[float, int]:
    """(output tokens/s of the whole configuration with every replica full, sequences per replica).

    ``served``: the requests pass through the engine's API server, whose serial per-request work
    (``Deployment.frontend_s``) caps a replica at ``E[O] / frontend_s`` output tokens a second (the module docstring);
    the rest is :func:`_gpu_saturation`'s.
    """
    thr, b = _gpu_saturation(d, input_tokens, output_tokens, lengths, requests)
    if served and d.frontend_s > 0:
        mean_o = lengths.mean_o if lengths is not None and not lengths.fixed else float(output_tokens)
        thr = min(thr, d.config.replicas * max(mean_o, 1.0) / d.frontend_s)
    return thr, b


def _gpu_saturation(d: Deployment, input_tokens: int, output_tokens: int, lengths: Lengths | None,
                    requests: int | None) -> tuple[float, int]:
    """What the replicas' engines sustain, the API server aside (:func:`saturation`).

    With ``lengths`` not fixed, the steady state uses the running batch's output-length-biased context and
    reservation and the prompts' ``E[I^2]``; with ``requests`` too (a finite run: every request queued at once),
    the run's drain is added: once the queue is empty the batch empties as its longest requests finish, at the
    batch sizes the residual lengths leave (``_drain``); the run's ``requests`` split over the replicas, the busiest
    (``ceil(requests / replicas)``) setting the duration and only the requests there are counting (one request on two
    replicas is one replica's work, not two). Equal lengths with ``requests`` run in waves that start and
    finish together: every wave but the last at the steady rate, the last (the remainder, ``B`` when ``B`` divides the
    run, all of them when the run has fewer requests than ``B``) as one :func:`static_batch`: fifty 1000-in /
    2000-out requests on 8 H200s decode at batch 50, not at the engine's limit (without the wave a run of 50 and one
    of 200 were predicted alike, where SkyPilot's DeepSeek-R1 logs measured 2.4x between them, blind set 5)."""
    eng = engine_of(d)
    dist = lengths if lengths is not None and not lengths.fixed else None
    if dist is None:
        reserve = input_tokens + output_tokens if eng.kv_reserve == "full" else input_tokens + output_tokens / 2
    else:
        reserve = dist.running_reservation if eng.kv_reserve == "full" else dist.running_context
    b = max(1, min(eng.max_num_seqs, d.kv_capacity_tokens // max(int(reserve), 1)))
    o = max(output_tokens, 1)
    n = max(1, math.ceil(b / d.pipeline_depth))
    pre = n * input_tokens / o  # prompt tokens prefilled per step in steady state
    tokens = n + pre
    if dist is None:
        kv = n * (input_tokens + o / 2) + pre
        pairs = n * (input_tokens + o / 2) + pre * (input_tokens + 1) / 2
    else:
        kv = n * dist.running_context + pre
        pairs = n * dist.running_context + pre * dist.prompt_pairs / dist.mean_i
    t = d.step_time(int(round(tokens)), int(kv), n, attn_pairs=pairs)
    extra_steps = tokens / eng.max_batched_tokens - 1
    if extra_steps > 0:  # prompts overflow the token budget: more steps, each re-reading weights
        t += extra_steps * (d.weight_time(eng.max_batched_tokens) + d.step_overhead_s
                            + d.step_cost.launch_time(eng.max_batched_tokens))
    else:  # under one admission a step: whole prompts in some steps, pure decodes in the others (_lumpy_step)
        per_token = _prompt_pairs(input_tokens, dist)
        mean_i = dist.mean_i if dist is not None else float(input_tokens)
        t = max(t, _lumpy_step(d, n, o, kv - pre, pairs - pre * per_token, mean_i, per_token, eng.max_batched_tokens))
    steady = d.config.replicas * n * d.pipeline_depth / t
    if not requests:
        return steady, b
    per_replica = math.ceil(requests / d.config.replicas)
    if dist is None:  # equal lengths: waves of b, the last one (or the only one) a static batch
        rest = per_replica % b or b  # the last wave's requests (a whole batch when b divides the run)
        last = static_batch(d, input_tokens, output_tokens, rest * d.config.replicas)
        total = (per_replica - rest) * o / (steady / d.config.replicas) + last.e2e_s
        return requests * o / total, min(b, per_replica)
    if per_replica > b:  # a steady state, then the drain of the last full batch (its residual lengths)
        tail_tokens = b * dist.o2 / (2 * dist.mean_o)
        busy = max(per_replica * dist.mean_o - tail_tokens, 0.0) / (steady / d.config.replicas)
        # the steady rate carries E[I]/E[O] prompt tokens per output token, but every prompt, the last batch's
        # included, is prefilled before the drain: the prefill part of tail/n more steady steps
        decode_only = d.step_time(n, int(n * dist.running_context), n)
        busy += tail_tokens / n * max(t - decode_only, 0.0)
        total = busy + _drain(d, dist, b, dist.running_context, dist.residual)
    else:  # every request admitted at once: their prompts, then the batch empties as outputs end
        prompt_tokens = per_replica * dist.mean_i
        budget = max(eng.max_batched_tokens, 1)
        steps = prompt_tokens / budget
        c = min(budget, prompt_tokens)
        seqs = max(1, round(c / dist.mean_i))
        total = steps * d.step_time(int(round(c)), int(round(c)), seqs, attn_pairs=c * dist.prompt_pairs / dist.mean_i)
        total += _drain(d, dist, per_replica, dist.mean_i, dist.survival)
        b = per_replica
    return requests * dist.mean_o / total, b


def _prompt_pairs(input_tokens: int, dist: Lengths | None) -> float:
    """Attention pairs per prompt token of a whole prompt (``(I + 1) / 2``; ``E[I^2]``-weighted for a distribution)."""
    return (input_tokens + 1) / 2 if dist is None else dist.prompt_pairs / dist.mean_i


def _lumpy_step(d: Deployment, n: int, o: int, kv_decode: float, pairs_decode: float, mean_i: float, pairs_per_token: float,
                budget: int) -> float:
    """Mean step time of a steady state admitting ``n / o`` prompts a step when that is under one prompt's chunks a step.

    A continuous-batching scheduler admits a waiting prompt whole, up to the token budget left after the decodes
    (vLLM V1's scheduler.py: ``num_new_tokens = min(num_new_tokens, token_budget)``; SGLang and TensorRT-LLM's
    chunked context alike), as soon as a finished sequence frees its slot or KV blocks. With ``n / o`` completions a
    step below one, a prompt of ``I`` tokens takes ``k = ceil(I / (budget - n))`` steps of ``I / k`` tokens next to
    the ``n`` decodes and the other steps decode alone: a share ``s = (n / o) k`` of the steps costs
    ``t(n + I / k)`` and the rest ``t(n)``. The step time is convex in its tokens where the weights' read stops
    hiding behind compute, so this mean is above the time of the evenly spread step (``n + n I / o`` tokens) the
    steady state would otherwise take; where ``s >= 1`` every step carries prefill and the spread step stands."""
    k = math.ceil(mean_i / max(budget - n, 1))
    share = n / o * k
    if share >= 1.0:
        return 0.0
    c = mean_i / k
    chunk = d.step_time(int(round(n + c)), int(kv_decode + c), n, attn_pairs=pairs_decode + c * pairs_per_token)
    decode = d.step_time(n, int(kv_decode), n, attn_pairs=pairs_decode)
    return share * chunk + (1.0 - share) * decode


def saturated_latency(d: Deployment, input_tokens: int, output_tokens: int, lengths: Lengths | None = None,
                      requests: int | None = None) -> tuple[float | None, float]:
    """(mean TTFT, mean TPOT) in seconds of a saturated run of ``requests`` queued at once (the module docstring).

    The TPOT is the steady state's and needs no count; a queue's wait grows with its length, so without
    ``requests`` the TTFT is None. With ``requests`` split unevenly over the replicas the TTFT is the busiest replica's
    (``ceil(requests / replicas)`` requests) mean, a little above the mean over all of them."""
    eng = engine_of(d)
    steady, b = _gpu_saturation(d, input_tokens, output_tokens, lengths, None)
    reps = d.config.replicas
    x = steady / reps  # output tokens/s of one replica
    mean_i = lengths.mean_i if lengths is not None else float(input_tokens)
    mean_o = max(lengths.mean_o if lengths is not None else float(output_tokens), 1.0)
    n = math.ceil(requests / reps) if requests else 0
    running = min(b, n) if n else b
    # every running sequence gains a token a step: B / X at the full batch; fewer requests than the batch run as
    # one batch of n (no queue), whose decode step is its own (X is the full batch's rate)
    tpot = running / x if running == b else d.step_time(running, int(running * (mean_i + mean_o / 2)), running)
    if not requests:
        return None, tpot
    budget = max(eng.max_batched_tokens, 1)

    def burst_wait(admitted: int) -> float:  # a burst request waits, on average, for half the burst's chunks
        burst_tokens = admitted * mean_i
        chunk = min(budget, burst_tokens)
        per_chunk = d.step_time(int(chunk), int(chunk), max(1, round(chunk / max(mean_i, 1.0))))
        return (math.ceil(burst_tokens / budget) + 1) / 2 * per_chunk

    queued = n - running
    if queued and (lengths is None or lengths.fixed):  # equal lengths: waves of b admitted, and finishing, together
        waves = math.ceil(n / running)
        rest = n % running or running  # the last wave's requests (as in _gpu_saturation)
        wave_s = running * mean_o / x  # a whole wave at the steady rate (its prompts' burst included)
        mean_wave = (running * (waves - 1) * (waves - 2) / 2 + rest * (waves - 1)) / n
        ttft = d.request_overhead_s + ((n - rest) * burst_wait(running) + rest * burst_wait(rest)) / n + wave_s * mean_wave
        return ttft, tpot
    queue_wait = queued * (queued + 1) / (2 * n) * mean_o / x  # averaged over all n requests
    ttft = d.request_overhead_s + (running * burst_wait(running) + queued * tpot) / n + queue_wait
    return ttft, tpot


def _drain(d: Deployment, dist: Lengths, count: int, ctx0: float, share: Callable[[float], float], segments: int = 48) -> float:
    """Seconds until ``count`` sequences (a share ``share(s)`` still running ``s`` decode steps on) have all ended.

    Each step is charged with the probability that any sequence still runs, at the batch size expected when
    some do: ``P(any) = 1 - (1 - p)^count``, batch ``count p / P(any)`` (so the last long request runs its
    steps at batch one). Segments are denser early, where the batch falls fastest."""
    horizon = dist.horizon()
    total, prev = 0.0, 0.0
    for k in range(1, segments + 1):
        s = horizon * (k / segments) ** 2
        mid = (prev + s) / 2
        p = share(mid)
        if p <= 0.0:
            break
        any_running = 1 - (1 - p) ** count
        if any_running < 1e-6:
            break
        m = max(1.0, count * p / any_running)
        seqs = max(1, math.ceil(m / d.pipeline_depth))
        total += (s - prev) * any_running * d.step_time(seqs, int(seqs * (ctx0 + mid)), seqs)
        prev = s
    return total


def static_batch(d: Deployment, input_tokens: int, output_tokens: int, batch: int) -> Estimate:
    """A static batch per replica: ``batch`` requests start together and run to completion.

    What ``gptSessionBenchmark`` (TensorRT-LLM up to v0.9) and vLLM's ``benchmark_latency`` measure:
    the prompts are prefilled in chunks of the engine's token budget, then ``O - 1`` decode steps
    run the whole batch at a context growing by one token a step. The KV capacity is not applied (a
    static engine allocates what the batch needs; a published batch ran); a batch beyond the
    engine's ``max_num_seqs`` runs in waves. Throughput = batch x O / latency (the batch split over the replicas, the
    busiest, ``ceil(batch / replicas)``, setting the latency).
    """
    eng = engine_of(d)
    per_replica = max(1, math.ceil(batch / d.config.replicas))
    limit = max(1, eng.max_num_seqs)  # a static engine allocates what the batch needs: only the engine's limit applies
    b = min(per_replica, limit)
    waves = math.ceil(per_replica / b)
    prompt = b * input_tokens
    budget = max(eng.max_batched_tokens, input_tokens)
    prefill, done = 0.0, 0
    while done < prompt:
        c = min(budget, prompt - done)
        prefill += d.step_time(c, done + c, min(b, max(1, math.ceil(c / input_tokens))), attn_pairs=c * (input_tokens + 1) / 2)
        done += c
    o = max(output_tokens, 1)
    decode = d.decode_span(b, b * (input_tokens + 1), o - 1)
    ttft = d.request_overhead_s + prefill
    latency = ttft + decode
    tpot = decode / (o - 1) if o > 1 else 0.0
    bound, shares = bound_of(d, b, input_tokens + o / 2)
    return Estimate(concurrency=batch, running_per_replica=b, max_concurrency=limit, ttft_s=ttft, tpot_s=tpot, e2e_s=latency * waves,
                    output_tokens_per_s=batch * o / (latency * waves),
                    per_user_tokens_per_s=1.0 / tpot if tpot else 0.0, bound=bound, shares=shares)
