"""The twin as the emulator server's timing backend: the engine against real time / ``speedup``.

Implements the server's backend protocol (:class:`infermeter.engines.emulator.simple.Backend`):
``generate(req)`` yields the number of tokens in each streamed chunk when the
simulated engine produces them, and ``metrics_text()`` renders vLLM's ``/metrics``::

    backend = TwinBackend(build_twin("llama-3.1-8b", "h100-sxm"), speedup=1.0)
    app = make_app(backend)                 # infermeter.engines.emulator.server
    async for k in backend.generate(GenRequest(prompt_tokens=200, max_tokens=64, prompt_text=text)):
        ...                                 # k tokens are due now

Time: virtual seconds = (loop.time() - start) * ``speedup``; a step of ``d`` virtual
seconds lasts ``d / speedup`` real seconds. Each engine runs in its own asyncio task,
one step at a time: it sleeps until the step's end, applies it, and wakes every
stream that got tokens. Requests arriving while a step runs join the next one; an
idle engine woken by an arrival yields once to the event loop first, so requests
arriving at the same instant share a batch (the offline tie-break). When the event
loop falls behind, steps still follow each other back to back in virtual time and
tokens are delivered late; a request is never admitted to a step that starts before
its arrival. ``describe()["max_lag_s"]`` says how far behind the loop fell at worst.

Requests: ``prompt_tokens`` as the server counted them, ``max_tokens`` tokens are
always generated (the twin has no EOS, so ``ignore_eos`` changes nothing);
prefix-cache keys from ``prompt_token_ids`` when given, else from the prompt text
cut every ``chars_per_block`` characters (default 64: 16 tokens of 4 characters, the
server's own fallback count; :mod:`infermeter.twin.hashing`). A request that cannot fit (prompt + max_tokens over
``max_model_len``) raises :class:`RequestRejected` (HTTP 400 in vLLM). A stream the
client abandons is aborted in the engine. Histograms observe real seconds (what the
server's clients see): virtual / ``speedup``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from infermeter.engines.emulator.metrics import EngineMetrics, render_metrics
from infermeter.twin.deploy import Twin
from infermeter.twin.engine import Engine
from infermeter.twin.hashing import CHARS_PER_BLOCK, text_block_keys, token_block_keys
from infermeter.twin.loop import route
from infermeter.twin.request import DECODE, FINISHED, SimRequest


class RequestRejected(ValueError):
    """The engine cannot run this request (vLLM answers HTTP 400)."""

    status = 400


class _Stream:
    """One request's delivery state, shared by its generate() and the engine's driver."""

    __slots__ = ("event", "delivered", "available", "last_v", "first_v", "engine")

    def __init__(self, engine: int) -> None:
        self.event = asyncio.Event()
        self.delivered = 0
        self.available = 0
        self.last_v = 0.0
        self.first_v: float | None = None
        self.engine = engine


class TwinBackend:
    """Backend protocol implementation on :class:`~infermeter.twin.engine.Engine` (see module docstring)."""

    def __init__(self, twin: Twin, *, speedup: float = 1.0, model_name: str | None = None,
                 chars_per_block: int | None = None) -> None:
        if speedup <= 0:
            raise ValueError(f"speedup must be > 0, got {speedup}")
        self.twin = twin
        self.speedup = float(speedup)
        self.model_name = model_name or twin.served_model_name
        # text keys: a block of ~4-character tokens unless the workload's own figure is given
        self.chars_per_block = chars_per_block or CHARS_PER_BLOCK * twin.block_size // 16
        self.engines: list[Engine] = twin.engines(max_span_steps=1)
        self._router = twin.make_router()
        self._fe_free = [0.0] * twin.replicas
        self.metrics = [EngineMetrics(e.max_model_len) for e in self.engines]
        self._ids = 0
        self._t0: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: list[asyncio.Event] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.max_lag_s = 0.0

    # -- protocol ------------------------------------------------------------------
    def check(self, req: Any) -> str | None:
        """Why this request can never run (vLLM answers HTTP 400), or None; before any streaming."""
        limit = min(e.max_model_len for e in self.engines)
        if req.prompt_tokens + int(req.max_tokens or 0) > limit:
            return (f"This model's maximum context length is {limit} tokens. However, you requested "
                    f"{req.prompt_tokens + int(req.max_tokens or 0)} tokens ({req.prompt_tokens} in the messages, "
                    f"{req.max_tokens} in the completion).")
        return None

    def describe(self) -> dict[str, Any]:
        return {**self.twin.describe(), "speedup": self.speedup, "max_lag_s": self.max_lag_s,
                "prefix_key_chars_per_block": self.chars_per_block}

    def reset_prefix_cache(self) -> bool:
        """Clear every engine's prefix cache (vLLM's dev endpoint); False when requests hold blocks."""
        pools = [e.pool for e in self.engines]
        if any(p.num_free != p.num_blocks for p in pools):
            return False
        return all(p.reset_prefix_cache() for p in pools)

    def metrics_text(self) -> str:
        return render_metrics(self.model_name, list(zip(self.engines, self.metrics)),
                              {"gpu_memory_utilization": str(self.twin.details.get("gpu_memory_utilization", ""))})

    async def generate(self, req: Any) -> AsyncIterator[int]:
        n = int(req.max_tokens or 0)
        if n <= 0:
            return
        self._ensure_started()
        arrived = self.now()  # TTFT counts from here, request overhead included (as vLLM's arrival_time)
        overhead, service = self.twin.frontend
        if overhead:
            await asyncio.sleep(overhead / self.speedup)
        ids = getattr(req, "prompt_token_ids", None)
        prompt = int(req.prompt_tokens)
        bs = self.twin.block_size
        keys = (token_block_keys(ids, bs) if ids else
                text_block_keys(getattr(req, "prompt_text", "") or "", prompt, chars_per_block=self.chars_per_block,
                                block_size=bs))
        self._ids += 1
        r = SimRequest(rid=self._ids, arrival=arrived, prompt_tokens=prompt, max_tokens=n, keys=keys,
                       intended_at=arrived)
        pp = self.twin.pp
        if self.twin.router == "least-outstanding":
            eng = route(self.engines)
        else:  # live requests carry no session id: session affinity falls back to round-robin
            j = self._router.replica_of(self._ids, None, None)
            eng = route(self.engines[j * pp:(j + 1) * pp])
        k = self.engines.index(eng)
        if service:  # the replica's API server: one request at a time (a FIFO single server)
            j = k // pp
            t_e = max(self.now(), self._fe_free[j]) + service
            self._fe_free[j] = t_e
            await asyncio.sleep(max(0.0, t_e - self.now()) / self.speedup)
        stream = _Stream(k)
        r.tag = stream
        if not eng.add(r):
            raise RequestRejected(r.error or "request rejected")
        self._wake[k].set()
        try:
            while True:
                await stream.event.wait()
                stream.event.clear()
                due = stream.available - stream.delivered
                if due > 0:
                    stream.delivered += due
                    yield due
                if r.state == FINISHED and stream.delivered >= r.outputs:
                    return
        finally:
            if r.state != FINISHED:
                eng.abort(r, self.now())
                self.metrics[k].aborted += 1

    # -- time ----------------------------------------------------------------------
    def now(self) -> float:
        """Virtual seconds since the backend started."""
        loop = asyncio.get_running_loop()
        if self._t0 is None:
            self._t0 = loop.time()
        return (loop.time() - self._t0) * self.speedup

    def _ensure_started(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._tasks:
            return
        self._loop = loop
        self._t0 = loop.time()
        self._wake = [asyncio.Event() for _ in self.engines]
        self._tasks = [loop.create_task(self._drive(i), name=f"twin-engine-{i}") for i in range(len(self.engines))]

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        self._tasks = []

    # -- the engine driver -----------------------------------------------------------
    async def _drive(self, k: int) -> None:
        eng, met, wake = self.engines[k], self.metrics[k], self._wake[k]
        loop = asyncio.get_running_loop()
        t_v = self.now()  # virtual time the engine has reached
        while True:
            if eng.idle:
                wake.clear()
                await wake.wait()
                await asyncio.sleep(0)  # same-instant arrivals join this batch
                t_v = self.now()
            d = eng.schedule(t_v)
            if d is None:  # only requests that arrive after t_v (the loop fell behind): catch up
                t_v = max(t_v, self.now())
                await asyncio.sleep(0)
                continue
            met.iteration_tokens.observe(eng.last_step_tokens)
            end_v = t_v + d
            assert self._t0 is not None
            delay = self._t0 + end_v / self.speedup - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                self.max_lag_s = max(self.max_lag_s, -delay)
                await asyncio.sleep(0)
            finished = eng.complete(end_v)
            self._emit(eng, met, end_v, finished)
            t_v = end_v

    def _emit(self, eng: Engine, met: EngineMetrics, t_v: float, finished: list[SimRequest]) -> None:
        """Hand every stream its new tokens and record vLLM's per-request histograms."""
        k = self.speedup
        for r in list(eng.running.values()) + finished:
            s: _Stream | None = r.tag
            if s is None:
                continue
            produced = r.outputs if r.state != DECODE else eng.outputs_of(r)
            if produced > s.available:
                if s.first_v is None:
                    s.first_v = t_v
                    met.ttft.observe((t_v - r.arrival) / k)
                    if r.scheduled_at is not None:
                        met.queue.observe((r.scheduled_at - r.arrival) / k)
                else:
                    met.itl.observe((t_v - s.last_v) / k)
                s.last_v = t_v
                s.available = produced
                s.event.set()
        for r in finished:
            met.success += 1
            met.e2e.observe((t_v - r.arrival) / k)
            met.prompt_tokens.observe(r.prompt_tokens)
            met.generation_tokens.observe(r.outputs)
            if r.tag is not None:
                r.tag.event.set()
