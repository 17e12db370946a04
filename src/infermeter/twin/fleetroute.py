"""A multi-model fleet's arrivals and gateway: which pool and replica each request goes to, and autoscaling.

:class:`FleetSource` is an :class:`~infermeter.twin.loop.ArrivalSource` for the one event loop
over every pool's engines (concatenated in pool order: pool ``i`` owns replicas ``[offset_i,
offset_i + max_i)``). It makes the send times (:func:`arrivals`), takes each request's content
from the workload stream, decides its pool (:mod:`infermeter.twin.fleetfile` routing) and its
replica (the fewest outstanding among the pool's ready replicas, lowest index on ties), and sets
``SimRequest.replica`` so the loop keeps it. Request ids are given in send order (so windows,
records and ``pool_of`` line up). ``finished`` (the loop calls it for every finished, rejected or
timed-out request) keeps the outstanding counts, drains scaled-down replicas and re-sends a
cascade's escalations::

    src = FleetSource(fleet, content, offsets=[0, 2], seed=0, duration_s=600)
    loop = EventLoop(engines, router=Router("round-robin", n), frontend=(0.0, 0.0))

Autoscaling (:class:`~infermeter.twin.fleetfile.Autoscale`) is decided at sends: at the first
send at or after each ``interval_s`` tick, and loading replicas become ready at the first send
after their load delay (so an idle pool decides late; a busy one, within one inter-arrival gap).
Every change of a pool's provisioned (ready + loading + draining) and ready counts is kept in
``changes[pool]`` for its replica-seconds (:func:`replica_seconds`).
"""

from __future__ import annotations

import bisect
from array import array
import heapq
import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from infermeter.twin.fleetfile import FleetFile
from infermeter.twin.request import FINISHED, SimRequest
from infermeter.twin.router import mix64

_INF = math.inf


class RateProfile:
    """A piecewise-linear rate ``[(t_s, req_per_s), ...]`` (held at the last rate after the last point; before
    the first, the first rate), and its cumulative intensity's inverse (arrivals by time change)."""

    def __init__(self, points: Sequence[tuple[float, float]]) -> None:
        pts = [(float(t), float(r)) for t, r in points]
        if pts[0][0] > 0:
            pts.insert(0, (0.0, pts[0][1]))
        self.t = [p[0] for p in pts]
        self.r = [p[1] for p in pts]
        self.cum = [0.0]
        for i in range(1, len(pts)):
            dt = self.t[i] - self.t[i - 1]
            self.cum.append(self.cum[-1] + dt * (self.r[i] + self.r[i - 1]) / 2)

    def rate(self, t: float) -> float:
        if t >= self.t[-1]:
            return self.r[-1]
        i = bisect.bisect_right(self.t, t) - 1
        t0, t1 = self.t[i], self.t[i + 1]
        return self.r[i] + (self.r[i + 1] - self.r[i]) * (t - t0) / (t1 - t0)

    def intensity(self, t: float) -> float:
        """Expected arrivals in [0, t]."""
        if t >= self.t[-1]:
            return self.cum[-1] + (t - self.t[-1]) * self.r[-1]
        i = bisect.bisect_right(self.t, t) - 1
        x = t - self.t[i]
        return self.cum[i] + x * (self.r[i] + self.rate(t)) / 2

    def inverse(self, u: float) -> float:
        """The time at which the expected arrivals reach ``u`` (inf when they never do)."""
        if u >= self.cum[-1]:
            last = self.r[-1]
            return self.t[-1] + (u - self.cum[-1]) / last if last > 0 else _INF
        i = bisect.bisect_right(self.cum, u) - 1
        while i + 1 < len(self.cum) and self.cum[i + 1] <= self.cum[i]:  # a zero-rate stretch
            i += 1
        d = u - self.cum[i]
        r0, r1, T = self.r[i], self.r[i + 1], self.t[i + 1] - self.t[i]
        a = (r1 - r0) / (2 * T)
        x = d / r0 if abs(a) < 1e-15 else (-r0 + math.sqrt(max(r0 * r0 + 4 * a * d, 0.0))) / (2 * a)
        return self.t[i] + min(max(x, 0.0), T)


def poisson_times(rng: np.random.Generator, rate: float | None, profile: RateProfile | None) -> Iterator[float]:
    """Send times of a Poisson process of ``rate`` (or of the time-varying ``profile``), by time change."""
    u = 0.0
    while True:
        for g in rng.exponential(1.0, 4096):
            u += float(g)
            t = u / rate if rate is not None else profile.inverse(u)  # type: ignore[union-attr]
            if not math.isfinite(t):
                return
            yield t


def arrivals(fleet: FleetFile, *, seed: int, rate: float | None) -> Iterator[tuple[float, int]]:
    """``(send time, pool index)`` in time order: the fleet's process split by share, and pools' own processes."""
    shares = fleet.shares()
    streams: list[Iterator[tuple[float, int]]] = []
    if any(s > 0 for s in shares):
        tr = fleet.traffic
        prof = RateProfile(tr.profile) if tr is not None and tr.profile is not None else None
        r = tr.rate if tr is not None and tr.rate is not None else rate
        if prof is None and r is None:
            raise ValueError("pools with a share need the fleet's arrivals: traffic: {rate: R} in the file, or --rate")
        cum = np.cumsum(shares)
        pick = np.random.default_rng([seed, 1])

        def split() -> Iterator[tuple[float, int]]:
            for t in poisson_times(np.random.default_rng([seed, 0]), None if prof else r, prof):
                yield t, min(int(np.searchsorted(cum, pick.random(), side="right")), len(shares) - 1)

        streams.append(split())
    for i, p in enumerate(fleet.pools):
        if p.own_arrivals:
            prof = RateProfile(p.profile) if p.profile is not None else None
            rng = np.random.default_rng([seed, 2 + i])
            streams.append(((t, i) for t in poisson_times(rng, p.rate, prof)))
    return heapq.merge(*streams)


def expected_rate(fleet: FleetFile, *, rate: float | None, duration_s: float) -> list[float]:
    """Each pool's mean arrival rate over ``[0, duration_s]`` (before cascade escalations)."""
    shares = fleet.shares()
    tr = fleet.traffic
    if tr is not None and tr.profile is not None:
        total = RateProfile(tr.profile).intensity(duration_s) / duration_s
    else:
        total = (tr.rate if tr is not None and tr.rate is not None else rate) or 0.0
    out = []
    for p, s in zip(fleet.pools, shares):
        if p.profile is not None:
            out.append(RateProfile(p.profile).intensity(duration_s) / duration_s)
        else:
            out.append(p.rate if p.rate is not None else s * total)
    return out


class FleetSource:
    """Arrivals, routing, cascade and autoscaling of a multi-model fleet (module docstring)."""

    def __init__(self, fleet: FleetFile, content: Iterator[SimRequest], *, offsets: Sequence[int], seed: int,
                 rate: float | None = None, duration_s: float | None = None, requests: int | None = None) -> None:
        self.fleet = fleet
        self.pools = list(fleet.pools)
        self._content = content
        self._arr = arrivals(fleet, seed=seed, rate=rate)
        self._duration = _INF if duration_s is None else duration_s
        self._limit = requests
        self._base = 0
        self._next: tuple[float, int] | None = None
        self._esc: list[tuple[float, int, SimRequest, tuple[int, float]]] = []  # (send, seq, request, first)
        self._esc_n = 0
        self.offsets = list(offsets)
        self.out = [0] * (self.offsets[-1] + self.pools[-1].max_replicas if self.pools else 0)
        self.pool_of = array("i")  # pool index by request id
        # escalated request id -> (id, intended send) of the request it escalates
        self.origin: dict[int, tuple[int, float]] = {}
        self.sent = 0
        names = [p.label for p in self.pools]
        self.group = [[k for k, q in enumerate(self.pools) if q.model == p.model] if fleet.routing == "least-loaded"
                      else [i] for i, p in enumerate(self.pools)]
        c = fleet.cascade
        self._cascade = (names.index(c.source), names.index(c.to), c.escalation, seed) if c is not None else None
        # autoscaling state per pool: ready (accepting), draining, loading (ready_at, replica), free replicas
        self.ready: list[list[int]] = []
        self.free: list[list[int]] = []
        self.loading: list[list[tuple[float, int]]] = []
        self.draining: set[int] = set()
        self.changes: list[list[tuple[float, int, int]]] = []  # (t, provisioned, ready)
        self.scale_ups = [0] * len(self.pools)
        self.scale_downs = [0] * len(self.pools)
        self._want_less_since: list[float | None] = [None] * len(self.pools)
        self._next_eval = [0.0] * len(self.pools)
        self._rng = random.Random(seed * 7919 + 17)
        for i, p in enumerate(self.pools):
            off, n0 = self.offsets[i], p.initial_replicas
            self.ready.append(list(range(off, off + n0)))
            self.free.append(list(range(off + p.max_replicas - 1, off + n0 - 1, -1)))  # popped lowest first
            self.loading.append([])
            self.changes.append([(0.0, n0, n0)])
        self._advance()

    # -- arrivals ------------------------------------------------------------------------------------
    def _advance(self) -> None:
        self._next = None
        if self._limit is not None and self._base >= self._limit:
            return
        nxt = next(self._arr, None)
        if nxt is None or nxt[0] >= self._duration:
            return
        self._next = nxt
        self._base += 1

    def next_time(self) -> float:
        t = self._next[0] if self._next is not None else _INF
        return self._esc[0][0] if self._esc and self._esc[0][0] < t else t

    def pop(self) -> SimRequest:
        t_base = self._next[0] if self._next is not None else _INF
        if self._esc and self._esc[0][0] < t_base:
            t, _, r, first = heapq.heappop(self._esc)
            pool = self._cascade[1]  # type: ignore[index]
            self.origin[self.sent] = first
        else:
            assert self._next is not None
            t, pool = self._next
            self._advance()
            r = next(self._content)
        r.rid = self.sent
        r.arrival = r.intended_at = t
        self.sent += 1
        self._tick(t)
        group = self.group[pool]
        cands: list[int] = []
        for k in group:
            cands.extend(self.ready[k])
        out = self.out
        j = min(cands, key=lambda x: (out[x], x))
        out[j] += 1
        r.replica = j
        # the pool that serves it (least-loaded: maybe another pool of the same model)
        self.pool_of.append(pool if len(group) == 1 else bisect.bisect_right(self.offsets, j) - 1)
        return r

    def finished(self, r: SimRequest, now: float) -> None:
        j = r.replica
        if j < 0:
            return
        self.out[j] -= 1
        if j in self.draining and self.out[j] == 0:
            self.draining.discard(j)
            i = bisect.bisect_right(self.offsets, j) - 1
            self.free[i].append(j)
            self._changed(i, now)
        c = self._cascade
        if c is not None and r.state == FINISHED and self.pool_of[r.rid] == c[0] and r.rid not in self.origin:
            if mix64(c[3] * 1_000_003 + r.rid) < c[2] * 2.0 ** 64:
                self._esc_n += 1
                again = SimRequest(0, now, r.prompt_tokens, r.max_tokens, r.keys, now, r.conversation_id,
                                   r.prefix_group)
                first = (r.rid, r.arrival if r.intended_at is None else r.intended_at)
                heapq.heappush(self._esc, (now, self._esc_n, again, first))

    def close(self) -> None:
        close = getattr(self._content, "close", None)
        if close is not None:
            close()

    # -- autoscaling ---------------------------------------------------------------------------------
    def _changed(self, i: int, t: float) -> None:
        n = len(self.ready[i]) + len(self.loading[i]) + sum(
            1 for j in self.draining if bisect.bisect_right(self.offsets, j) - 1 == i)
        self.changes[i].append((t, n, len(self.ready[i])))

    def _tick(self, now: float) -> None:
        for i, p in enumerate(self.pools):
            a = p.autoscale
            if a is None:
                continue
            load = self.loading[i]
            while load and load[0][0] <= now:
                t_ready, j = heapq.heappop(load)
                self.ready[i].append(j)
                self.ready[i].sort()
                self._changed(i, t_ready)
            if now < self._next_eval[i]:
                continue
            self._next_eval[i] = (math.floor(now / a.interval_s) + 1) * a.interval_s
            off = self.offsets[i]
            q = sum(self.out[j] for j in range(off, off + p.max_replicas))
            desired = min(a.max, max(a.min, math.ceil(q * (1 + a.headroom) / a.target)))
            have = len(self.ready[i]) + len(load)
            if desired > have:
                self._want_less_since[i] = None
                for _ in range(min(desired - have, len(self.free[i]))):
                    j = self.free[i].pop()
                    lo, hi = a.load_s
                    heapq.heappush(load, (now + self._rng.uniform(lo, hi), j))
                    self.scale_ups[i] += 1
                self._changed(i, now)
            elif desired < len(self.ready[i]) and not load:
                since = self._want_less_since[i]
                if since is None:
                    self._want_less_since[i] = now
                elif now - since >= a.cooldown_s:
                    j = min(self.ready[i], key=lambda x: (self.out[x], -x))
                    self.ready[i].remove(j)
                    self.scale_downs[i] += 1
                    self._want_less_since[i] = now
                    if self.out[j] == 0:
                        self.free[i].append(j)
                    else:
                        self.draining.add(j)
                    self._changed(i, now)
            else:
                self._want_less_since[i] = None


def replica_seconds(changes: Sequence[tuple[float, int, int]], end: float) -> dict[str, Any]:
    """A pool's provisioned and ready replica-seconds up to ``end``, from its change list, and the extremes."""
    prov = ready = 0.0
    pts = sorted(changes, key=lambda c: c[0])
    for (t, n, r), nxt in zip(pts, [*pts[1:], (end, 0, 0)]):
        t1 = min(max(nxt[0], t), end)
        if t1 > t:
            prov += n * (t1 - t)
            ready += r * (t1 - t)
    return {"provisioned_replica_s": prov, "ready_replica_s": ready,
            "max_provisioned": max(c[1] for c in pts), "min_ready": min(c[2] for c in pts),
            "max_ready": max(c[2] for c in pts)}
