"""``emulate --disaggregate``: the disaggregated twin (:mod:`infermeter.twin.disagg`) live, behind one endpoint.

Promises: :class:`DisaggBackend` serves requests as :class:`~infermeter.twin.disagg.DisaggLoop` simulates
them, against real time / ``speedup``: the prompt on a prefill engine (``least-loaded`` or ``kv-aware``),
then the KV transfer (the same seconds, FIFO per prefill instance), then the decode engine with the
fewest KV tokens committed, which streams every output token (the client's first token comes from the
decode side, after the transfer). Each engine runs in its own task, as
:class:`~infermeter.engines.emulator.live.TwinBackend`'s do. ``/metrics`` lists every engine under
vLLM's names, prefill engines first (``engine="0"`` ...), then decode engines; per-request histograms
(TTFT, ITL, E2E, queue) are observed on the decode engines only, so they describe whole requests; and
``infermeter:disagg_pool_info{engine, pool}``, ``infermeter:kv_transfers_in_flight`` and the
``infermeter:kv_transfer_seconds`` histogram say which pool an engine is in and what the link does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from infermeter.engines.emulator.live import RequestRejected, TwinBackend, _Stream
from infermeter.engines.emulator.metrics import TTFT_BUCKETS, EngineMetrics, Histogram, _labels, _le, _num, render_metrics
from infermeter.twin.disagg import DisaggTwin
from infermeter.twin.engine import Engine
from infermeter.twin.hashing import text_block_keys, token_block_keys
from infermeter.twin.request import FINISHED, SimRequest


class DisaggBackend(TwinBackend):
    """The backend protocol on a prefill pool, a decode pool and the link (module docstring)."""

    def __init__(self, dt: DisaggTwin, *, speedup: float = 1.0, chars_per_block: int | None = None) -> None:
        super().__init__(dt.prefill, speedup=speedup, chars_per_block=chars_per_block)
        self.dt = dt
        pre = dt.prefill.engines(max_span_steps=1)
        dec = dt.decode.engines(max_span_steps=1)
        for e in dec:
            e.kv_remote = True
        self.npre = len(pre)
        self.engines = pre + dec
        self.metrics = [EngineMetrics(e.max_model_len) for e in self.engines]
        self._ptok = [0] * len(pre)
        self._dtok = [0] * len(dec)
        self._link_free = [0.0] * len(pre)
        self.in_transfer = 0
        self.kv_transfer = Histogram(TTFT_BUCKETS)

    def check(self, req: Any) -> str | None:
        limit = min(e.max_model_len for e in self.engines)
        asked = req.prompt_tokens + int(req.max_tokens or 0)
        if asked > limit:
            return (f"This model's maximum context length is {limit} tokens. However, you requested {asked} tokens "
                    f"({req.prompt_tokens} in the messages, {req.max_tokens} in the completion).")
        return None

    def describe(self) -> dict[str, Any]:
        return {**self.dt.describe(), "speedup": self.speedup, "max_lag_s": self.max_lag_s,
                "prefix_key_chars_per_block": self.chars_per_block}

    def metrics_text(self) -> str:
        text = render_metrics(self.model_name, list(zip(self.engines, self.metrics)),
                              {"gpu_memory_utilization": str(self.dt.prefill.details.get("gpu_memory_utilization", ""))})
        lab = {"model_name": self.model_name}
        out = ["# HELP infermeter:disagg_pool_info The pool of each engine (disaggregated prefill/decode).",
               "# TYPE infermeter:disagg_pool_info gauge"]
        for i in range(len(self.engines)):
            pool = "prefill" if i < self.npre else "decode"
            out.append(f"infermeter:disagg_pool_info{_labels({'engine': str(i), **lab, 'pool': pool})} 1.0")
        out += ["# HELP infermeter:kv_transfers_in_flight KV transfers from prefill to decode in flight.",
                "# TYPE infermeter:kv_transfers_in_flight gauge",
                f"infermeter:kv_transfers_in_flight{_labels(lab)} {_num(self.in_transfer)}",
                "# HELP infermeter:kv_transfer_seconds End of a prefill to its KV at the decode instance.",
                "# TYPE infermeter:kv_transfer_seconds histogram"]
        h = self.kv_transfer
        for b, c in zip(h.bounds, h.cumulative()):
            out.append(f"infermeter:kv_transfer_seconds_bucket{_labels({**lab, 'le': _le(b)})} {_num(c)}")
        out.append(f"infermeter:kv_transfer_seconds_bucket{_labels({**lab, 'le': '+Inf'})} {_num(h.count)}")
        out.append(f"infermeter:kv_transfer_seconds_count{_labels(lab)} {_num(h.count)}")
        out.append(f"infermeter:kv_transfer_seconds_sum{_labels(lab)} {_num(h.sum)}")
        return text + "\n".join(out) + "\n"

    async def generate(self, req: Any) -> AsyncIterator[int]:
        n = int(req.max_tokens or 0)
        if n <= 0:
            return
        self._ensure_started()
        arrived = self.now()
        overhead = self.twin.frontend[0]
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
        leg = SimRequest(rid=self._ids, arrival=arrived, prompt_tokens=prompt, max_tokens=1, keys=keys,
                         intended_at=arrived)
        i = self._pick_prefill(leg)
        pe = self.engines[i]
        ls = _Stream(i)
        leg.tag = ls
        if not pe.add(leg):
            raise RequestRejected(leg.error or "request rejected")
        self._ptok[i] += leg.prompt_tokens
        self._wake[i].set()
        k = -1
        try:
            while leg.state != FINISHED:
                await ls.event.wait()
                ls.event.clear()
            self._ptok[i] -= leg.prompt_tokens
            t_end = self.now()
            start = max(t_end, self._link_free[i])
            began = leg.scheduled_at if leg.scheduled_at is not None else t_end
            done_v = start + self.dt.transfer_seconds(leg.prompt_tokens, t_end - began)
            self._link_free[i] = done_v
            self.in_transfer += 1
            try:
                await asyncio.sleep(max(0.0, done_v - self.now()) / self.speedup)
            finally:
                self.in_transfer -= 1
            self.kv_transfer.observe((done_v - t_end) / self.speedup)
            r.scheduled_at, r.cached_tokens = leg.scheduled_at, leg.cached_tokens
            j = min(range(len(self._dtok)), key=self._dtok.__getitem__)
            k = self.npre + j
            de = self.engines[k]
            stream = _Stream(k)
            r.tag = stream
            if not de.add(r, self.now()):
                raise RequestRejected(r.error or "request rejected")
            self._dtok[j] += r.prompt_tokens + r.max_tokens
            self._wake[k].set()
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
            if leg.state != FINISHED:
                pe.abort(leg, self.now())
                self._ptok[i] -= leg.prompt_tokens
                self.metrics[i].aborted += 1
            if k >= 0:
                self._dtok[k - self.npre] -= r.prompt_tokens + r.max_tokens
                if r.state != FINISHED:
                    self.engines[k].abort(r, self.now())
                    self.metrics[k].aborted += 1

    def _pick_prefill(self, leg: SimRequest) -> int:
        pre = self.engines[:self.npre]
        if self.dt.spec.route != "kv-aware":
            return min(range(self.npre), key=self._ptok.__getitem__)
        bs = self.twin.block_size
        keys = leg.keys
        best, cost = 0, float("inf")
        for i, e in enumerate(pre):
            hit = 0
            if len(keys) and keys[0] in e.pool._index:
                hit = e.pool.match(keys, (leg.prompt_tokens - 1) // bs)[0] * bs
            c = self._ptok[i] + leg.prompt_tokens - hit
            if c < cost:
                best, cost = i, c
        return best

    def _emit(self, eng: Engine, met: EngineMetrics, t_v: float, finished: list[SimRequest]) -> None:
        if self.engines.index(eng) >= self.npre:
            super()._emit(eng, met, t_v, finished)
            return
        for r in finished:  # a prefill leg: wake its request (no per-request histograms here)
            met.success += 1
            if r.tag is not None:
                r.tag.event.set()
