"""Disaggregated prefill/decode in the twin: a prefill pool, a decode pool and the KV transfer between them.

Promises: :func:`parse_disaggregate` reads the ``--disaggregate`` grammar (one-line ConfigError naming the
part that is wrong); :func:`build_disagg` builds both pools as twins of the same model; :class:`DisaggLoop`
runs a request stream through them on a virtual clock, as vLLM's NixlConnector, SGLang's PD mode and
Dynamo serve it:

1. a request is sent to a *prefill instance* (router: ``least-loaded`` = fewest prompt tokens queued
   there; ``kv-aware`` = fewest tokens to compute once its prefix-cache hit there is taken off, as
   Dynamo's KV router scores it), which computes its prompt (``max_tokens=1``; that token is dropped);
2. its KV (``prompt tokens x kv_bytes_per_token``) then crosses the link to a *decode instance* (the one
   with the fewest KV tokens committed): ``latency + bytes / (streams x bandwidth)``, one transfer at a
   time per prefill instance (FIFO on its NICs), ``streams = min(GPUs per prefill instance, GPUs per
   decode instance)``. With ``pipelining=layer`` the transfer of each layer starts when the layer is
   computed, so only ``max(bytes/bw/L, bytes/bw - prefill_s (L-1)/L)`` is exposed after the prefill;
3. the decode instance admits it with all but its last prompt token already computed (the engine's
   ``kv_remote``): its first step samples the first token, so decode steps never carry a long prefill.
   TTFT = prefill queue + prefill + transfer + decode queue + first decode step.

``kv_transfer_ms`` (per request, from the end of its prefill to the end of its transfer, queueing on
the link included) is the figure a disaggregated run adds to ``summary.json``.

Grammar (commas separate items; ``CONFIG`` is a hardware configuration as ``--gpu`` takes it, whose
GPU count makes the pool: ``4xh100-sxm:tp2`` = two instances of TP2)::

    prefill=CONFIG,decode=CONFIG[,link=auto|node|NETWORK][,pipelining=none|layer]
        [,route=least-loaded|kv-aware][,overhead_ms=X]

``link=auto`` (default): both pools on the same hardware within one node (8 GPUs) use the hardware's
interconnect (``data/hardware.yaml``); otherwise ``ib-ndr400`` (``data/networks.yaml``).
``overhead_ms``: a fixed cost per transfer (connector bookkeeping; default 0, i.e. not modelled).
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infermeter.errors import ConfigError
from infermeter.perfmodel.hardware import DEFAULT_NETWORK, Network, network_catalog
from infermeter.twin.deploy import Twin
from infermeter.twin.engine import Engine
from infermeter.twin.loop import ArrivalSource, Boundary, LoopStats, VirtualClock
from infermeter.twin.request import CANCELLED, FINISHED, TIMED_OUT, WAITING, SimRequest

ROUTES = ("least-loaded", "kv-aware")
PIPELINING = ("none", "layer")
_KEYS = ("prefill", "decode", "link", "pipelining", "route", "overhead_ms")
_INF = math.inf


@dataclass(frozen=True)
class DisaggSpec:
    """What ``--disaggregate`` says (see the module docstring)."""

    prefill: str
    decode: str
    link: str = "auto"
    pipelining: str = "none"
    route: str = "least-loaded"
    overhead_ms: float = 0.0

    @property
    def text(self) -> str:
        extra = "".join(f",{k}={getattr(self, k)}" for k, d in (("link", "auto"), ("pipelining", "none"),
                        ("route", "least-loaded"), ("overhead_ms", 0.0)) if getattr(self, k) != d)
        return f"prefill={self.prefill},decode={self.decode}{extra}"


def parse_disaggregate(text: str, flag: str = "--disaggregate") -> DisaggSpec:
    """``prefill=CONFIG,decode=CONFIG[,...]`` -> DisaggSpec; ConfigError naming the bad part.

    A comma inside a configuration (``4xa100-80gb:tp2,pp2``) stays with it: an item starts only at a
    known ``KEY=``::

        >>> parse_disaggregate("prefill=4xh100-sxm:tp2,pp2,decode=2xh100-sxm:tp2,route=kv-aware").prefill
        '4xh100-sxm:tp2,pp2'
    """
    from infermeter.perfmodel.configspec import parse_config
    from infermeter.perfmodel.hardware import get_hardware

    items: dict[str, str] = {}
    last: str | None = None
    for tok in (t.strip() for t in str(text).split(",")):
        key, eq, value = tok.partition("=")
        if eq and key.strip() in _KEYS:
            last = key.strip()
            if last in items:
                raise ConfigError(f"{flag} {text!r}: {last}= given twice")
            items[last] = value.strip()
        elif last in ("prefill", "decode") and tok and not eq:
            items[last] += "," + tok
        else:
            raise ConfigError(f"{flag} {text!r}: cannot read {tok!r}; expected prefill=CONFIG,decode=CONFIG"
                              f"[,link=auto|node|NETWORK][,pipelining=none|layer][,route=least-loaded|kv-aware]"
                              f"[,overhead_ms=X]")
    for need in ("prefill", "decode"):
        if not items.get(need):
            raise ConfigError(f"{flag} {text!r}: {need}=CONFIG is missing (e.g. {need}=2xh100-sxm:tp2)")
        try:
            items[need] = parse_config(items[need]).label
            get_hardware(parse_config(items[need]).hardware)
        except ConfigError as exc:
            raise ConfigError(f"{flag} {need}={items[need]}: {exc}") from None
    pipe = items.get("pipelining", "none")
    if pipe not in PIPELINING:
        raise ConfigError(f"{flag} pipelining={pipe!r}: use none or layer")
    route = items.get("route", "least-loaded")
    if route not in ROUTES:
        raise ConfigError(f"{flag} route={route!r}: use least-loaded or kv-aware")
    link = items.get("link", "auto") or "auto"
    if link not in ("auto", "node") and link not in networks():
        raise ConfigError(f"{flag} link={link!r}: use auto, node or one of {', '.join(networks())}")
    try:
        overhead = float(items.get("overhead_ms", "0"))
    except ValueError:
        raise ConfigError(f"{flag} overhead_ms={items.get('overhead_ms')!r}: not a number") from None
    if not math.isfinite(overhead) or overhead < 0:
        raise ConfigError(f"{flag} overhead_ms={overhead}: must be >= 0")
    return DisaggSpec(prefill=items["prefill"], decode=items["decode"], link=link, pipelining=pipe, route=route,
                      overhead_ms=overhead)


def networks() -> dict[str, Network]:
    """The network catalog (``data/networks.yaml``, :func:`perfmodel.hardware.network_catalog`)."""
    return network_catalog()


@dataclass(frozen=True)
class Link:
    """The path KV takes from a prefill instance to a decode instance."""

    kind: str  # nvlink4, pcie5, ib-ndr400, ...
    where: str  # "node" (the hardware's interconnect) or "network"
    bytes_per_s: float  # all streams together, one direction
    latency_s: float
    streams: int
    overhead_s: float = 0.0

    def seconds(self, nbytes: float) -> float:
        return self.latency_s + self.overhead_s + nbytes / self.bytes_per_s

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "where": self.where, "bandwidth_gbs": self.bytes_per_s / 1e9,
                "latency_us": self.latency_s * 1e6, "streams": self.streams, "overhead_ms": self.overhead_s * 1e3}


def resolve_link(spec: DisaggSpec, prefill: Any, decode: Any) -> Link:
    """The link between the pools (``prefill``/``decode``: HardwareConfig); ConfigError when ``node`` cannot be."""
    from infermeter.perfmodel.hardware import get_hardware

    streams = max(1, min(prefill.gpus_per_replica, decode.gpus_per_replica))
    ic = get_hardware(prefill.hardware).interconnect
    same_node = prefill.hardware == decode.hardware and prefill.count + decode.count <= ic.node_devices
    link = spec.link
    if link == "auto":
        link = "node" if same_node and ic.bandwidth_gbs > 0 else DEFAULT_NETWORK
    overhead = spec.overhead_ms / 1e3
    if link == "node":
        if not same_node:
            raise ConfigError(f"--disaggregate link=node: prefill {spec.prefill} and decode {spec.decode} are not "
                              f"one node of the same hardware (at most {ic.node_devices} GPUs); use link=auto or a "
                              f"network ({', '.join(networks())})")
        if ic.bandwidth_gbs <= 0:
            raise ConfigError(f"--disaggregate link=node: {prefill.hardware} has no device interconnect; use a network")
        return Link(ic.kind, "node", ic.per_direction_bytes_per_s * streams, ic.latency_us * 1e-6, streams, overhead)
    net = networks()[link]
    per = net.bandwidth_gbs * 1e9
    bw = per if net.shared_nic else per * streams
    return Link(link, "network", bw, net.latency_us * 1e-6, streams, overhead)


@dataclass(frozen=True)
class DisaggTwin:
    """Both pools as twins of one model, and the link between them."""

    spec: DisaggSpec
    prefill: Twin
    decode: Twin
    link: Link
    kv_bytes_per_token: int
    layers: int
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return int(self.details.get("gpus", 0))

    def transfer_seconds(self, prompt_tokens: int, prefill_s: float) -> float:
        """Seconds the KV transfer of ``prompt_tokens`` adds after a prefill of ``prefill_s`` (module docstring)."""
        link = self.link
        raw = prompt_tokens * self.kv_bytes_per_token / link.bytes_per_s
        if self.spec.pipelining == "layer" and self.layers > 1:
            raw = max(raw / self.layers, raw - prefill_s * (self.layers - 1) / self.layers)
        return link.latency_s + link.overhead_s + raw

    def describe(self) -> dict[str, Any]:
        return {"backend": "twin", "disaggregated": True, "model": self.prefill.model,
                "hardware": f"prefill {self.prefill.hardware} + decode {self.decode.hardware}",
                "disaggregate": self.spec.text, "route": self.spec.route, "pipelining": self.spec.pipelining,
                "link": self.link.describe(), "kv_bytes_per_token": self.kv_bytes_per_token,
                "prefill": self.prefill.describe(), "decode": self.decode.describe(), **self.details}


def build_disagg(spec: DisaggSpec, make_twin: Callable[[str], Twin]) -> DisaggTwin:
    """Both pools; ``make_twin(config)`` builds one pool's twin (the caller's model and engine knobs)."""
    from infermeter.perfmodel import build_deployment
    from infermeter.perfmodel.configspec import parse_config

    pre, dec = make_twin(spec.prefill), make_twin(spec.decode)
    if dec.speculative is not None or pre.speculative is not None:
        raise ConfigError("--disaggregate with --speculative is not modelled yet; drop one of them")
    # the decode side never looks its prompts up in a prefix cache: their KV comes over the link
    dec = dataclasses.replace(dec, config=dec.config.model_copy(update={"enable_prefix_caching": False}))
    pc, dc = parse_config(spec.prefill), parse_config(spec.decode)
    from infermeter.perfmodel.api import Deployment

    d = pre.predictor if isinstance(pre.predictor, Deployment) else build_deployment(
        pre.model, spec.prefill, dtype=str(pre.details.get("dtype", "bf16")), kv_dtype=pre.details.get("kv_dtype"))
    link = resolve_link(spec, pc, dc)
    return DisaggTwin(spec=spec, prefill=pre, decode=dec, link=link, kv_bytes_per_token=int(d.kv_bytes_per_token),
                      layers=int(d.spec.layers),
                      details={"gpus": pc.count + dc.count, "prefill_instances": pre.replicas,
                               "decode_instances": dec.replicas})


def disagg_twin(spec: Any, disaggregate: str | DisaggSpec) -> DisaggTwin:
    """Both pools from ``spec``'s model and knobs, on the configurations ``disaggregate`` names."""
    ds = parse_disaggregate(disaggregate) if isinstance(disaggregate, str) else disaggregate
    if spec.calibration is not None:
        raise ConfigError("--disaggregate with --calibration: a calibration file describes one aggregated "
                          "deployment; drop one of them")
    return build_disagg(ds, lambda config: spec.model_copy(update={"gpu": config, "tp": None, "pp": None}).twin())


@dataclass
class PoolStats:
    """What the loop saw per pool beyond the engines' own counters."""

    transfers: int = 0
    transfer_bytes: float = 0.0
    in_transfer_max: int = 0
    transfer_ms: list[float] = field(default_factory=list)  # measured requests (rid >= warmup), ms


class DisaggLoop:
    """Prefill engines, decode engines and the link, on one virtual clock (module docstring).

    Events at equal times: sends, then arrivals (at a prefill engine from the API server, at a decode
    engine from the link), then step ends (``twin.loop.arrival_first``). ``timeouts`` (first token,
    total; seconds from the send) fail a request as its client would; ``cancel_at`` ends the run as
    :class:`~infermeter.twin.loop.EventLoop` does.
    """

    def __init__(self, dt: DisaggTwin, *, keep_token_times: bool = False, warmup: int = 0) -> None:
        self.dt = dt
        self.prefill: list[Engine] = dt.prefill.engines()
        self.decode: list[Engine] = dt.decode.engines(keep_token_times=keep_token_times)
        for e in self.decode:
            e.kv_remote = True
        self.engines = self.prefill + self.decode
        self.stats = LoopStats()
        self.pool = PoolStats()
        self.warmup = warmup

    def run(self, source: ArrivalSource, on_done: Callable[[SimRequest], None], clock: VirtualClock, *,
            cancel_at: float = _INF, timeouts: tuple[float | None, float | None] = (None, None)) -> LoopStats:
        dt = self.dt
        pre, dec = self.prefill, self.decode
        npre = len(pre)
        engines = self.engines
        overhead = dt.prefill.frontend[0]
        kv_aware = dt.spec.route == "kv-aware"
        bs = dt.prefill.block_size
        ptok = [0] * npre  # prompt tokens routed to each prefill engine and not yet prefilled
        dtok = [0] * len(dec)  # KV tokens committed to each decode engine
        link_free = [0.0] * npre
        legs: dict[int, tuple[SimRequest, SimRequest]] = {}  # rid -> (prefill leg, request)
        where: dict[int, int] = {}  # rid -> engine index (into engines), -1 in transfer or API server
        busy = [False] * len(engines)
        ver = [0] * len(engines)
        # events: (time, 0 arrival at prefill | 1 arrival at decode | 2 step end | 3 deadline, seq, payload)
        ev: list[tuple[float, int, int, Any]] = []
        seq = 0
        st, ps = self.stats, self.pool
        in_transfer = 0
        t_first, t_total = timeouts
        push, pop = heapq.heappush, heapq.heappop

        def wake(i: int, t: float) -> None:
            nonlocal seq
            if not busy[i]:
                busy[i] = True
                seq += 1
                push(ev, (t, 2, seq, (i, ver[i])))
            else:
                end = engines[i].interrupt(t)
                if end is not None:
                    ver[i] += 1
                    seq += 1
                    push(ev, (end, 2, seq, (i, ver[i])))

        def end_request(r: SimRequest, t: float, i: int) -> None:
            st.done += 1
            legs.pop(r.rid, None)
            where.pop(r.rid, None)
            if i >= npre:
                j = i - npre
                dtok[j] -= r.prompt_tokens + r.max_tokens
            on_done(r)
            source.finished(r, t)

        def give_up(r: SimRequest, t: float, kind: int) -> None:
            rec = copy.copy(r)
            rec.state, rec.ended_at = TIMED_OUT, t
            if kind == 0:
                rec.error_class, rec.error = "first_token_timeout", f"no token within {t_first:g} s"
            else:
                rec.error_class, rec.error = "total_timeout", f"not finished within {t_total:g} s"
            r.timed_out = True
            i = where.get(r.rid, -1)
            leg = legs.get(r.rid, (r, r))[0]
            if 0 <= i < npre:  # in the prefill pool
                e = pre[i]
                running = leg.state != WAITING
                e.abort(leg, t)
                ptok[i] -= leg.prompt_tokens
                if running:
                    end = e.cut(t)
                    if end is not None:
                        ver[i] += 1
                        push(ev, (end, 2, 0, (i, ver[i])))
            elif i >= npre:
                e = engines[i]
                rec.outputs = e.outputs_of(r)
                running = r.state != WAITING
                e.abort(r, t)
                if running:
                    end = e.cut(t)
                    if end is not None:
                        ver[i] += 1
                        push(ev, (end, 2, 0, (i, ver[i])))
            end_request(rec, t, i)

        def to_prefill(r: SimRequest, t: float) -> None:
            nonlocal seq
            st.arrived += 1
            leg = SimRequest(r.rid, r.arrival, r.prompt_tokens, 1, r.keys, r.intended_at, r.conversation_id,
                             r.prefix_group)
            if kv_aware:
                best, cost = 0, _INF
                keys = r.keys
                for i, e in enumerate(pre):
                    hit = 0
                    if len(keys) and keys[0] in e.pool._index:
                        hit = e.pool.match(keys, (r.prompt_tokens - 1) // bs)[0] * bs
                    c = ptok[i] + r.prompt_tokens - hit
                    if c < cost:
                        best, cost = i, c
            else:
                best = min(range(npre), key=ptok.__getitem__)
            e = pre[best]
            if not e.add(leg, t):
                r.state, r.error, r.ended_at = leg.state, leg.error, t
                end_request(r, t, -1)
                return
            legs[r.rid] = (leg, r)
            where[r.rid] = best
            ptok[best] += leg.prompt_tokens
            wake(best, t)

        def prefilled(leg: SimRequest, i: int, t: float) -> None:
            nonlocal seq, in_transfer
            _, r = legs[leg.rid]
            ptok[i] -= leg.prompt_tokens
            r.scheduled_at, r.cached_tokens = leg.scheduled_at, leg.cached_tokens
            start = link_free[i] if link_free[i] > t else t
            began = leg.scheduled_at if leg.scheduled_at is not None else t
            end = start + dt.transfer_seconds(leg.prompt_tokens, t - began)
            link_free[i] = end
            where[r.rid] = -1
            ps.transfers += 1
            ps.transfer_bytes += leg.prompt_tokens * dt.kv_bytes_per_token
            if r.rid >= self.warmup:
                ps.transfer_ms.append((end - t) * 1e3)
            in_transfer += 1
            if in_transfer > ps.in_transfer_max:
                ps.in_transfer_max = in_transfer
            seq += 1
            push(ev, (end, 1, seq, r))

        def to_decode(r: SimRequest, t: float) -> None:
            j = min(range(len(dec)), key=dtok.__getitem__)
            e = dec[j]
            r.replica = j
            r.lane = npre + j
            if not e.add(r, t):
                r.ended_at = t
                end_request(r, t, -1)
                return
            dtok[j] += r.prompt_tokens + r.max_tokens
            where[r.rid] = npre + j
            wake(npre + j, t)

        next_time, pop_src = source.next_time, source.pop
        dl_first: list[tuple[float, SimRequest]] = []  # FIFO by send time (sends come in time order)
        dl_total: list[tuple[float, SimRequest]] = []
        i_first = i_total = 0
        while True:
            t_src = next_time()
            t_ev = ev[0][0] if ev else _INF
            t_dl = _INF
            if i_first < len(dl_first):
                t_dl = dl_first[i_first][0]
            if i_total < len(dl_total) and dl_total[i_total][0] < t_dl:
                t_dl = dl_total[i_total][0]
            if t_dl < t_src and t_dl < t_ev:
                if t_dl >= cancel_at:
                    break
                if i_first < len(dl_first) and dl_first[i_first][0] == t_dl:
                    _, r = dl_first[i_first]
                    i_first += 1
                    kind = 0
                    live = r.state < FINISHED and not r.timed_out and r.first_token_at is None
                else:
                    _, r = dl_total[i_total]
                    i_total += 1
                    kind = 1
                    live = r.state < FINISHED and not r.timed_out
                if live and r.rid in legs:  # (a deadline of a request already done leaves the clock alone)
                    clock.now = t_dl
                    give_up(r, t_dl, kind)
                if i_first > 4096 and i_first * 2 > len(dl_first):  # keep the deadline queues short
                    del dl_first[:i_first]
                    i_first = 0
                if i_total > 4096 and i_total * 2 > len(dl_total):
                    del dl_total[:i_total]
                    i_total = 0
                continue
            if t_src <= t_ev and t_src < _INF:
                if t_src >= cancel_at:
                    break
                clock.now = t_src
                sent = pop_src()
                if isinstance(sent, Boundary):
                    continue
                if t_first:
                    dl_first.append((sent.arrival + t_first, sent))
                if t_total:
                    dl_total.append((sent.arrival + t_total, sent))
                if overhead > 0:
                    seq += 1
                    push(ev, (t_src + overhead, 0, seq, sent))
                    where[sent.rid] = -1
                    legs[sent.rid] = (sent, sent)
                else:
                    to_prefill(sent, t_src)
                continue
            if not ev:
                break
            if t_ev >= cancel_at:
                break
            t, kind, _, payload = pop(ev)
            clock.now = t
            if kind == 0:
                r = payload
                legs.pop(r.rid, None)
                where.pop(r.rid, None)
                if not r.timed_out:
                    to_prefill(r, t)
            elif kind == 1:
                r = payload
                in_transfer -= 1
                if not r.timed_out:
                    to_decode(r, t)
            else:
                i, v = payload
                if v != ver[i]:
                    continue
                e = engines[i]
                for r in e.complete(t):
                    if i < npre:
                        pair = legs.get(r.rid)
                        if pair is not None and not pair[1].timed_out:
                            prefilled(r, i, t)
                    elif not r.timed_out:
                        end_request(r, t, i)
                d = e.schedule(t)
                if d is None:
                    busy[i] = False
                else:
                    seq += 1
                    push(ev, (t + d, 2, seq, (i, v)))
        if cancel_at < _INF:
            self._cancel(cancel_at, ev, busy, legs, on_done, clock, end_request)
        for e in engines:
            e.waiting_series.close(clock.now)
        st.end = clock.now
        st.in_system_s = sum(e.in_system_integral for e in engines)
        return st

    def _cancel(self, t: float, ev: list[tuple[float, int, int, Any]], busy: list[bool],
                legs: dict[int, tuple[SimRequest, SimRequest]], on_done: Callable[[SimRequest], None],
                clock: VirtualClock, end_request: Callable[[SimRequest, float, int], None]) -> None:
        """The run gives up at ``t``: what ends by then ends; every request still in the system is cancelled."""
        clock.now = t
        npre = len(self.prefill)
        for i, e in enumerate(self.engines):
            if busy[i]:
                end = e.settle(t)
                if end is not None:
                    for r in e.complete(end):
                        if i >= npre and not r.timed_out:
                            end_request(r, end, i)
            e.cancel_all(t)
        for _, r in sorted(legs.values(), key=lambda x: x[1].rid):  # still in the system: not ended
            if r.timed_out:
                continue
            r.state, r.ended_at = CANCELLED, t
            self.stats.cancelled += 1
            on_done(r)
        legs.clear()
        ev.clear()
