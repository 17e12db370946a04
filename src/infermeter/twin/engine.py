"""A vLLM-like continuous-batching engine, one scheduling step at a time, on any clock.

The engine forms a batch, asks the performance model how long it takes, and applies
its effects when the caller says the step has ended. It never reads a clock: the
caller passes ``now`` (virtual time offline, scaled real time live)::

    >>> from infermeter.twin.predictor import LinearStepTime
    >>> eng = Engine(LinearStepTime(base_s=0.01, per_token_s=0.0), EngineConfig(), num_blocks=64)
    >>> eng.add(SimRequest(rid=0, arrival=0.0, prompt_tokens=32, max_tokens=3))
    True
    >>> t = 0.0
    >>> while (d := eng.schedule(t)) is not None:
    ...     t += d
    ...     done = eng.complete(t)
    >>> round(t, 3), done[0].first_token_at, done[0].outputs
    (0.03, 0.01, 3)

Scheduling, as vLLM V1 with FCFS: running requests first (every decoding sequence
gets one token; unfinished prefills continue in admission order within the
``max_num_batched_tokens`` budget); KV blocks for them are allocated now, and when
there are not enough the most recently admitted running request is preempted by
recompute (blocks freed, back to the front of the queue, counted); if nothing was
preempted, waiting requests are admitted in order while there is budget, a free
sequence slot (``max_num_seqs``) and free blocks for their first chunk after the
prefix-cache hit (at most ``num_tokens - 1`` tokens hit). The head of the queue
blocks the rest.

Decoding requests are not visited per step: a step counter ``g`` advances, a
request entered decode at ``g0`` with ``c0`` computed tokens and ``o0`` outputs, and
finishes at ``g0 + max_tokens - o0`` (a heap of those step counts, each with its requests in the
order they entered decode; a request leaving decode early is taken out of its list). The sum of contexts and the number of
new KV blocks per step (a histogram of block-boundary phases) are O(1), so a step
costs O(requests whose state changes). When no prefill is pending and nothing can
be admitted, :meth:`schedule` covers several identical decode steps at once (a
*span*), up to the next finish, KV exhaustion or ``horizon`` (next arrival), timed
by the model's closed-form ``decode_span``. A span is optimistic: when a request arrives
while one is in flight, :meth:`interrupt` ends it at the step in progress at that moment (the
request joins the next step, as it would step by step), so the caller need not know the next
arrival.

A step's effects, its KV blocks beyond the first step's and its accounting (steps, busy time,
KV usage and running-request integrals) are applied by :meth:`complete`, once its length is
final. The engine integrates its own occupancy (running + waiting, Little's ``L``) and keeps its
waiting queue over time in a :class:`~infermeter.twin.series.LevelSeries`. Blocks hold
``config.block_size`` tokens.

**Speculative decoding** (``speculative``, :mod:`infermeter.twin.speculative`; off by default, and
then nothing here changes): every step with decoding sequences is one verify step of ``k`` drafted
tokens per sequence (no spans). Its accepted length ``L`` is drawn from the acceptance model with the
engine's seeded ``random.Random`` -- one draw per step, shared by the step's decoding sequences, so
the O(1) decode bookkeeping holds: the step counter advances by ``L + 1`` (every decoding sequence
gains ``L + 1`` tokens, delivered together; a sequence that needs fewer finishes with its
``max_tokens``, the rest discarded). The step costs the target over ``k + 1`` tokens per decoding
sequence plus the draft's cost. vLLM's counters are kept: drafts (one per decoding sequence per step),
draft tokens (``k`` each), accepted tokens and accepted tokens per position.

**Disaggregated decode** (``kv_remote``, set by :mod:`infermeter.twin.disagg`; off by default): a request's
prompt KV came from a prefill instance, so it is admitted with all but its last prompt token computed (its
blocks allocated, no prefix-cache lookup); a preempted one recomputes locally as usual.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from typing import Any

from infermeter.twin.config import EngineConfig
from infermeter.twin.hashing import private_key
from infermeter.twin.kvcache import BlockPool
from infermeter.twin.predictor import StepTimePredictor
from infermeter.twin.request import (
    ABORTED,
    CANCELLED,
    DECODE,
    FINISHED,
    PREFILL,
    REJECTED,
    WAITING,
    SimRequest,
)
from infermeter.twin.series import LevelSeries
from infermeter.twin.speculative import SpecDecode, draw_accepted
from infermeter.twin.spans import DecodeSpans
from infermeter.twin.state import set_state, state_of

_INF = math.inf


class Engine(DecodeSpans):
    """Queues, KV blocks and step formation; see the module docstring."""

    def __init__(
        self,
        predictor: StepTimePredictor,
        config: EngineConfig,
        num_blocks: int,
        *,
        keep_token_times: bool = False,
        max_span_steps: int = 1 << 30,
        speculative: SpecDecode | None = None,
        seed: int = 0,
    ) -> None:
        self.predictor = predictor
        self.config = config
        bs = self.block_size = config.block_size
        self.pool = BlockPool(num_blocks, enable_prefix_caching=config.enable_prefix_caching)
        cap = num_blocks * bs
        self.max_model_len = min(config.max_model_len or cap, cap)
        self.template_tokens = config.template_tokens
        self.keep_token_times = keep_token_times
        self.max_span_steps = max(1, max_span_steps)
        self.waiting: deque[SimRequest] = deque()
        self.running: dict[int, SimRequest] = {}  # admission order; preemption takes the last
        self.prefilling: list[SimRequest] = []
        self.g = 0  # decode-step counter
        self.n_dec = 0
        self._sum_c = 0  # sum over decoding requests of (c0 - g0)
        self._phase = [0] * bs  # decoding requests per block-boundary phase
        self._heap: list[int] = []  # step counts at which decoding requests finish (a key may repeat, or be gone)
        self._ends: dict[int, list[SimRequest]] = {}  # step count -> its decoding requests, in decode-entry order
        self._tlog: list[float] = [0.0]  # end time of the step that set the counter to g
        # the step in flight: (steps, n_dec, plan, ends, start, kv, duration, first step's decode blocks)
        self._pending: tuple[int, int, list[tuple[SimRequest, int]], list[float], float, int, float, int] | None = None
        self._aborts: list[SimRequest] = []
        # counters (vLLM metric names in comments)
        self.num_preemptions = 0  # vllm:num_preemptions_total
        self.prefix_queries = 0  # vllm:prefix_cache_queries_total (tokens)
        self.prefix_hits = 0  # vllm:prefix_cache_hits_total (tokens)
        self.prompt_tokens_total = 0  # vllm:prompt_tokens_total
        self.generation_tokens_total = 0  # vllm:generation_tokens_total
        self.steps = 0
        self.busy_s = 0.0
        self.usage_integral = 0.0  # sum of kv usage x step time
        self.running_integral = 0.0  # sum of running requests x step time
        self.in_system_integral = 0.0  # integral of (running + waiting) dt: Little's L x time
        self._sys_t = 0.0
        self.waiting_series = LevelSeries()
        self.max_usage = 0.0
        self.max_waiting = 0
        self.max_running = 0
        self.last_step_tokens = 0
        # speculative decoding (vllm:spec_decode_* counters); the step in flight's (advance, accepted)
        self.spec = speculative
        self._rng = random.Random(seed)
        self._spec_adv = 0
        self._spec_acc = 0
        self.spec_drafts = 0  # vllm:spec_decode_num_drafts_total
        self.spec_draft_tokens = 0  # vllm:spec_decode_num_draft_tokens_total
        self.spec_accepted = 0  # vllm:spec_decode_num_accepted_tokens_total
        self.spec_accepted_per_pos = [0] * (speculative.k if speculative is not None else 0)
        # a disaggregated decode instance (twin.disagg): a request's prompt KV arrives from a prefill instance,
        # so its admission computes only the last prompt token (as vLLM's decode side does), unless preempted
        self.kv_remote = False

    def __reduce__(self) -> tuple[Any, ...]:  # checkpoints; both builds (twin.state)
        return (type(self), (self.predictor, self.config, self.pool.num_blocks), state_of(self))

    def __setstate__(self, state: dict[str, Any]) -> None:
        set_state(self, state)

    # -- intake --------------------------------------------------------------------
    def add(self, r: SimRequest, now: float | None = None) -> bool:
        """Queue a request arriving at ``now`` (default ``r.arrival``); False (state REJECTED,
        ``error`` set) when it can never run."""
        if self.template_tokens:  # the server's chat template, tokenised with the prompt
            r.prompt_tokens += self.template_tokens
            r.num_tokens += self.template_tokens
        pt, mt = r.prompt_tokens, r.max_tokens
        if pt < 1 or mt < 1:
            r.error = f"prompt_tokens ({pt}) and max_tokens ({mt}) must be >= 1"
        elif pt + mt > self.max_model_len:
            r.error = f"prompt ({pt}) + max_tokens ({mt}) tokens exceed max_model_len ({self.max_model_len})"
        if r.error is not None:
            r.state = REJECTED
            return False
        t = r.arrival if now is None else now
        waiting = self.waiting
        t0 = self._sys_t
        if t > t0:
            self.in_system_integral += (len(self.running) + len(waiting)) * (t - t0)
            self._sys_t = t
        if self.keep_token_times and r.token_times is None:
            r.token_times = []
        waiting.append(r)
        n = len(waiting)
        self.waiting_series.set(t, n)
        if n > self.max_waiting:
            self.max_waiting = n
        return True

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def outputs_of(self, r: SimRequest) -> int:
        """Output tokens ``r`` has produced so far."""
        if r.state == DECODE:
            return r.o0 + self.g - r.g0
        return r.outputs

    # -- one step ------------------------------------------------------------------
    def schedule(self, now: float, horizon: float = _INF) -> float | None:
        """Form the next step (or span of decode steps); its duration in seconds, None when idle.

        ``horizon`` (optional) caps a span at a known next arrival; without it, :meth:`interrupt`
        shortens the span when a request arrives.
        """
        if self._pending is not None:
            raise RuntimeError("schedule() called twice without complete()")
        if self._aborts:
            self._apply_aborts(now)
        waiting = self.waiting
        running = self.running
        if not running and not waiting:
            return None
        pool = self.pool
        phase = self._phase
        bs = self.block_size
        g = self.g
        cfg = self.config
        n_wait = len(waiting)
        preempted = False
        while True:  # running requests: decodes, then continuing prefills; preempt until they fit
            n_dec = self.n_dec
            need = phase[g % bs] if n_dec else 0
            budget = cfg.max_num_batched_tokens - n_dec
            plan: list[tuple[SimRequest, int]] = []
            grow: list[int] = []
            for r in self.prefilling:
                if budget <= 0:
                    break
                chunk = min(r.num_tokens - r.computed, budget)
                nb = -(-(r.computed + chunk) // bs) - r.blocks
                plan.append((r, chunk))
                grow.append(nb)
                need += nb
                budget -= chunk
            if need <= pool.num_free:
                break
            self._preempt(next(reversed(running.values())))
            preempted = True
        d0 = phase[g % bs] if n_dec else 0
        if plan:
            for (r, _), nb in zip(plan, grow):
                r.blocks += nb
        # the blocks this step takes -- the decodes' (d0), the continuing prefills' and the admitted requests' --
        # leave the pool in one call: the same blocks as one call each, as long as no cache lookup comes between
        alloc = need
        if waiting and (not preempted or not running):  # admission, in queue order
            room = cfg.max_num_seqs - len(running)  # free sequence slots
            chunked = cfg.enable_chunked_prefill
            index = pool._index
            prefilling = self.prefilling
            kv_remote = self.kv_remote
            queries = hit_total = 0  # prefix-cache counters, added once
            while waiting and budget > 0 and room > 0:
                r = waiting[0]
                if r.arrival > now:  # live: the engine's clock lags the request's arrival
                    break
                keys = r.keys
                n_tok = r.num_tokens
                hits = free_hits = 0
                remote = kv_remote and not r.preemptions
                if not remote and len(keys) and keys[0] in index:  # most prompts miss on their first block
                    if alloc:  # the cache as the blocks taken so far left it
                        pool.allocate(alloc)
                        alloc = 0
                    hits, free_hits, path = pool.match(keys, (n_tok - 1) // bs)
                hit_tokens = n_tok - 1 if remote else hits * bs
                todo = n_tok - hit_tokens
                if todo <= budget:
                    chunk = todo
                elif chunked:
                    chunk = budget
                else:
                    break
                nb = -(-(hit_tokens + chunk) // bs) - hits
                if nb + free_hits > pool.num_free - alloc:
                    break
                waiting.popleft()
                if hits:
                    pool.acquire(path)
                    r.held = path
                    r.keyed = hits
                    r.cursor = path[-1][0]
                alloc += nb
                r.blocks = hits + nb
                r.computed = hit_tokens
                r.next_reg = hits
                if not remote:
                    queries += n_tok
                    hit_total += hit_tokens
                if r.cached_tokens is None:
                    r.cached_tokens = hit_tokens
                if r.scheduled_at is None:
                    r.scheduled_at = now
                r.state = PREFILL
                running[r.rid] = r
                prefilling.append(r)
                plan.append((r, chunk))
                budget -= chunk
                room -= 1
            self.prefix_queries += queries
            self.prefix_hits += hit_total
        if alloc:
            pool.allocate(alloc)
        if len(waiting) != n_wait:
            self.waiting_series.set(now, len(waiting))
        if not plan and n_dec == 0:
            if self.waiting and self.waiting[0].arrival <= now:
                raise RuntimeError("twin engine: waiting requests but nothing can be scheduled")
            return None  # idle, or (live) the next request arrives after ``now``
        steps = 1
        ends: list[float] = []
        kv = self._sum_c + n_dec * (g + 1)
        if plan:
            new_tokens = n_dec
            pairs = float(kv)  # a decode attends its whole context with one query
            for r, chunk in plan:
                new_tokens += chunk
                kv += r.computed + chunk
                pairs += chunk * (r.computed + (chunk + 1) / 2)
            if self.spec is not None and n_dec:
                dur = self._spec_step(n_dec, new_tokens, kv, n_dec + len(plan), pairs, d0)
                new_tokens += n_dec * self.spec.k
            else:
                self._spec_adv = 0
                dur = self.predictor.step_time(new_tokens, kv, n_dec + len(plan), pairs)
            self.last_step_tokens = new_tokens
        elif self.spec is not None:  # one verify step, never a span
            dur = self._spec_step(n_dec, n_dec, kv, n_dec, float(kv), d0)
            self.last_step_tokens = n_dec * (self.spec.k + 1)
        else:
            self._spec_adv = 0
            # a preemption skipped admission for this step only: no span past it
            steps = 1 if preempted else self._span_steps(now, horizon, kv, pool.num_free + d0)
            if self.keep_token_times and steps > 1:
                ends = self._step_ends(now, n_dec, kv, steps)
                dur = ends[-1] - now
            elif steps == 1:
                dur = self.predictor.step_time(n_dec, kv, n_dec, None)
            else:
                dur = self.predictor.decode_span(n_dec, kv, steps)
            self.last_step_tokens = n_dec
        self._pending = (steps, n_dec, plan, ends, now, kv, dur, d0)
        return dur

    def complete(self, now: float) -> list[SimRequest]:
        """Apply the pending step at its end time ``now``; the requests that finished."""
        if self._pending is None:
            return []
        steps, n_dec, plan, ends, start, kv, dur, d0 = self._pending
        self._pending = None
        pool = self.pool
        running = self.running
        adv = steps  # decode positions the step advances (speculative: accepted + 1)
        if self._spec_adv:
            adv = self._spec_adv
            self._spec_adv = 0
            self._count_spec(n_dec)
        if adv > 1:
            pool.allocate(self._blocks_for(adv) - d0)
        # accounting of the step (or span), now that its length is final
        self.steps += steps
        self.busy_s += dur
        usage = 1.0 - pool.num_free / pool.num_blocks
        n_run = len(running)
        self.usage_integral += usage * dur
        self.running_integral += n_run * dur
        if usage > self.max_usage:
            self.max_usage = usage
        if n_run > self.max_running:
            self.max_running = n_run
        if now > self._sys_t:
            self.in_system_integral += (n_run + len(self.waiting)) * (now - self._sys_t)
            self._sys_t = now
        finished: list[SimRequest] = []
        if n_dec:
            self.g += adv
            self.generation_tokens_total += n_dec * adv
            if self.keep_token_times:
                if ends:
                    self._tlog.extend(ends[:-1])
                elif adv > steps:  # a verify step's tokens arrive together
                    self._tlog.extend([now] * (adv - 1))
                self._tlog.append(now)
            heap = self._heap
            g = self.g
            if heap and heap[0] <= g:  # decodes that reached max_tokens (inlined _leave_decode + _finish)
                bs = self.block_size
                phase = self._phase
                tlog = self._tlog
                pop = heapq.heappop
                finish_at = self._ends
                left = 0  # decodes that finished
                sum_c = 0  # their (c0 - g0)
                anon = 0  # blocks of finished requests holding no cache group, freed together (the same queue)
                while heap and heap[0] <= g:
                    gk = pop(heap)  # the step count at which these requests have max_tokens
                    those = finish_at.pop(gk, None)
                    if those is None:  # they all left decode early
                        continue
                    if gk < g:  # a verify step went past max_tokens: the extra tokens are discarded
                        self.generation_tokens_total -= (g - gk) * len(those)
                    for r in those:
                        g0, c0 = r.g0, r.c0
                        left += 1
                        sum_c += c0 - g0
                        phase[(g0 - c0) % bs] -= 1
                        if r.token_times is not None:
                            r.token_times.extend(tlog[g0 + 1 : gk + 1])
                        computed = r.computed = c0 + g - g0  # KV written (freed below)
                        r.outputs = r.o0 + gk - g0
                        blocks = r.blocks = -(-computed // bs)
                        del running[r.rid]
                        held = r.held
                        if held:  # the tail first, as one request's free() would (anonymous, then its groups)
                            pool.free(held, anon + blocks - r.keyed)
                            anon = 0
                            r.held = []
                        else:
                            anon += blocks - r.keyed
                        r.keyed = 0
                        r.cursor = r.own = None
                        r.state = FINISHED
                        r.ended_at = now
                        finished.append(r)
                if anon:
                    pool.free_anonymous(anon)
                self.n_dec -= left
                self._sum_c -= sum_c
        if plan:  # the step's prefill chunks are computed (inlined: once per request)
            bs = self.block_size
            prefilling = self.prefilling
            g = self.g
            phase = self._phase
            heap = self._heap
            push = heapq.heappush
            finish_at = self._ends
            sampled = prompt = entered = sum_c = 0  # counters, added once
            for r, chunk in plan:
                computed = r.computed = r.computed + chunk
                keys = r.keys
                if r.next_reg < len(keys):
                    upto = computed // bs
                    if upto > len(keys):
                        upto = len(keys)
                    if upto > r.next_reg:
                        if pool.caching:  # cache newly full prompt blocks
                            r.cursor, r.own, added = pool.register(keys, r.next_reg, upto, r.held, r.cursor, r.own)
                            r.keyed += added
                        r.next_reg = upto
                if computed < r.num_tokens:
                    continue
                prefilling.remove(r)  # its prompt is done: its first token
                out = r.outputs = r.outputs + 1
                r.num_tokens += 1
                sampled += 1
                if r.first_token_at is None:
                    r.first_token_at = now
                    prompt += r.prompt_tokens
                if r.token_times is not None:
                    r.token_times.append(now)
                if out >= r.max_tokens:
                    self._finish(r, now)
                    finished.append(r)
                    continue
                r.state = DECODE
                r.g0 = g
                r.c0 = computed
                r.o0 = out
                entered += 1
                sum_c += computed - g
                phase[(g - computed) % bs] += 1
                gk = g + r.max_tokens - out
                those = finish_at.get(gk)
                if those is None:
                    finish_at[gk] = [r]
                    push(heap, gk)
                else:
                    those.append(r)
            self.generation_tokens_total += sampled
            self.prompt_tokens_total += prompt
            self.n_dec += entered
            self._sum_c += sum_c
        return finished

    def cancel_all(self, now: float) -> list[SimRequest]:
        """The run gave up at ``now``: every request still here ends ``CANCELLED`` (blocks freed)."""
        self._pending = None
        if now > self._sys_t:
            self.in_system_integral += (len(self.running) + len(self.waiting)) * (now - self._sys_t)
            self._sys_t = now
        out: list[SimRequest] = []
        for r in list(self.running.values()):
            self._release(r, keep=False)
            out.append(r)
        out.extend(self.waiting)
        self.waiting.clear()
        self.waiting_series.set(now, 0)
        for r in out:
            r.state = CANCELLED
            r.ended_at = now
        return out

    # -- internals -----------------------------------------------------------------
    def _spec_step(self, n_dec: int, new_tokens: int, kv: int, n_seqs: int, pairs: float, d0: int) -> float:
        """A verify step: draw the accepted length (fewer when KV blocks for it are short), set the
        advance, and return the step's seconds (target over k + 1 tokens per decoding sequence + draft)."""
        spec = self.spec
        assert spec is not None
        k = spec.k
        acc = draw_accepted(self._rng, k, spec.conditional)
        free = self.pool.num_free + d0
        while acc and self._blocks_for(acc + 1) > free:
            acc -= 1
        self._spec_acc = acc
        self._spec_adv = acc + 1
        kv_dec = self._sum_c + n_dec * (self.g + 1)  # the decoding sequences' contexts
        extra = n_dec * k
        dur = self.predictor.step_time(new_tokens + extra, kv + extra, n_seqs,
                                       pairs + k * kv_dec + n_dec * k * (k + 1) / 2)
        return dur + spec.draft_seconds(self.predictor, n_dec, kv_dec)

    def _count_spec(self, n_dec: int) -> None:
        spec = self.spec
        assert spec is not None
        self.spec_drafts += n_dec
        self.spec_draft_tokens += n_dec * spec.k
        acc = self._spec_acc
        self.spec_accepted += n_dec * acc
        per_pos = self.spec_accepted_per_pos
        for i in range(acc):
            per_pos[i] += n_dec

    def _leave_decode(self, r: SimRequest) -> None:
        self.n_dec -= 1
        self._sum_c -= r.c0 - r.g0
        self._phase[(r.g0 - r.c0) % self.block_size] -= 1
        if r.token_times is not None:
            r.token_times.extend(self._tlog[r.g0 + 1 : self.g + 1])

    def _finish(self, r: SimRequest, now: float) -> None:
        del self.running[r.rid]
        self.pool.free(r.held, r.blocks - r.keyed)
        r.held = []
        r.keyed = 0
        r.cursor = r.own = None
        r.state = FINISHED
        r.ended_at = now

    def _release(self, r: SimRequest, *, keep: bool) -> None:
        """Take a running ``r`` off the engine and free its blocks (``keep``: computed blocks stay findable)."""
        del self.running[r.rid]
        bs = self.block_size
        if r.state == DECODE:
            gk = r.g0 + r.max_tokens - r.o0  # its finish: out of that list (its heap key may stay, then empty)
            those = self._ends[gk]
            those.remove(r)
            if not those:
                del self._ends[gk]
            self._leave_decode(r)
            r.outputs = r.o0 + self.g - r.g0
            r.computed = r.c0 + self.g - r.g0
            r.blocks = -(-r.computed // bs)
            r.epoch += 1
        else:
            self.prefilling.remove(r)
        pool = self.pool
        if keep:
            full = r.computed // bs
            keys = list(r.keys[:full])
            keys.extend(private_key(r.rid, j) for j in range(len(keys), full))
            if pool.caching and full > r.next_reg:
                _, _, added = pool.register(keys, r.next_reg, full, r.held, r.cursor, r.own)
                r.keyed += added
            r.keys = keys
        pool.free(r.held, r.blocks - r.keyed)
        r.held = []
        r.keyed = 0
        r.cursor = r.own = None
        r.blocks = 0

    def _preempt(self, r: SimRequest) -> None:
        """Recompute preemption: free ``r``'s blocks (keeping computed ones findable), requeue it first."""
        self._release(r, keep=True)
        r.computed = 0
        r.next_reg = 0
        r.num_tokens = r.prompt_tokens + r.outputs
        r.state = WAITING
        r.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(r)

    def abort(self, r: SimRequest, now: float) -> None:
        """The client went away: drop ``r`` (now if waiting; after the step in flight if running)."""
        if r.state == WAITING:
            if now > self._sys_t:
                self.in_system_integral += (len(self.running) + len(self.waiting)) * (now - self._sys_t)
                self._sys_t = now
            self.waiting.remove(r)
            self.waiting_series.set(now, len(self.waiting))
            self._end_aborted(r, now)
        elif r.state in (PREFILL, DECODE):
            self._aborts.append(r)

    def _end_aborted(self, r: SimRequest, now: float) -> None:
        r.state = ABORTED
        r.ended_at = now

    def _apply_aborts(self, now: float) -> None:
        if now > self._sys_t:
            self.in_system_integral += (len(self.running) + len(self.waiting)) * (now - self._sys_t)
            self._sys_t = now
        for r in self._aborts:
            if r.state in (PREFILL, DECODE):
                self._release(r, keep=False)
                self._end_aborted(r, now)
        self._aborts.clear()
