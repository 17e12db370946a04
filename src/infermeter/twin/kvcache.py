"""Paged KV cache with prefix caching: a pool of fixed-size blocks, counted, not stored.

The pool promises what vLLM's block pool promises to the scheduler, without holding
token data (the block size is the engine's: the pool only counts blocks):

- ``num_free`` blocks are free (never used, or cached with no request using them);
- a full block is cached under its *key*, a chained hash of its content and everything before
  it (:mod:`infermeter.twin.hashing`); a later request whose leading keys match reuses those
  blocks (:meth:`match`, then :meth:`acquire`), at most ``limit`` of them;
- freed blocks join the tail of an LRU queue; allocation takes from its head, evicting cached
  blocks on the way, so the least recently freed block goes first; a request's tail is freed
  (and so evicted) before its prefix.

**Groups.** Keys are chained, so equal keys at one position mean equal prompts up to there, and
what a pool caches is a tree of key runs. A :class:`Group` is one run: the blocks one request
registered in one go (``keys[start : start + n]`` of its key list), found by its first key. A
request holds a *prefix* of each group it uses (``holders``), so a group's free blocks are always
its top ``[max_h, cached)``, freed tail-first: an LRU segment is a range of one group, and
eviction lowers ``cached``. Matching walks groups (a binary search inside each, keys being
chained); registering, freeing and evicting cost O(groups), not O(blocks)::

    >>> pool = BlockPool(num_blocks=8)
    >>> pool.allocate(3)
    >>> held = []
    >>> _ = pool.register([101, 102], 0, 2, held)      # a request's 2 full blocks, computed
    >>> pool.free(held, anonymous=1)                   # done: 2 keyed + 1 anonymous block
    >>> pool.num_free, pool.match([101, 102, 103], limit=3)[:2]
    (8, (2, 2))

``match`` returns ``(hit_blocks, hits_that_are_free, path)``: the second number is how many of
the hit blocks sit in the free queue (taking them costs free blocks, as in vLLM); ``path`` is
what :meth:`acquire` takes. A request's holdings are a list of ``[group, blocks]`` (its
``SimRequest.held``); :meth:`register` extends them as its blocks fill, and :meth:`free` gives
them back with the request's anonymous blocks. If another request cached the same content
first, a request's own copies stay unshared (anonymous), as in vLLM.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from infermeter.twin.state import set_state, state_of

BLOCK_SIZE = 16  # vLLM's default on GPUs; an engine's own is ``EngineConfig.block_size``
# a block's content key: an int, or a numpy int64 from a request's key array (they hash and compare
# alike); Any, so that the compiled build (setup.py) takes both
Key = Any


class Group:
    """A run of cached blocks registered by one request (see the module docstring)."""

    __slots__ = ("keys", "start", "n", "cached", "max_h", "holders", "segs", "first")

    def __init__(self, keys: Sequence[Key], start: int, n: int) -> None:
        self.keys = keys  # the registering request's key list (absolute block positions)
        self.start = start
        self.first = keys[start]  # the key it is found by
        self.n = n  # blocks registered
        self.cached = n  # the first ``cached`` are still cached (eviction takes the top)
        self.max_h = n  # the most blocks any holder holds (free: [max_h, cached))
        self.holders: dict[int, int] = {n: 1}  # blocks held -> holders
        self.segs: list[Seg] = []  # its live segments in the LRU queue

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.keys, self.start, self.n), state_of(self))

    def __setstate__(self, state: dict[str, Any]) -> None:
        set_state(self, state)


def _run(keys: Sequence[Key], gkeys: Sequence[Key], p: int, end: int) -> int:
    """How many positions from ``p`` (``keys[p] == gkeys[p]`` known) agree before ``end``: chained keys
    agree on a prefix, so a binary search finds it."""
    if keys[end - 1] == gkeys[end - 1]:
        return end - p
    lo, hi = p + 1, end - 1  # keys agree before lo, differ at hi
    while lo < hi:
        mid = (lo + hi) // 2
        if keys[mid] == gkeys[mid]:
            lo = mid + 1
        else:
            hi = mid
    return lo - p


class Seg:
    """A run of free blocks in the LRU queue: ``n`` anonymous ones (``g`` None), or group ``g``'s cached
    blocks ``lo..hi-1``."""

    __slots__ = ("g", "n", "lo", "hi")

    def __init__(self, g: Group | None, n: int, lo: int, hi: int) -> None:
        self.g = g
        self.n = n
        self.lo = lo
        self.hi = hi

    def __reduce__(self) -> tuple[Any, ...]:  # the group in the state: it refers back to its segments
        return (type(self), (None, 0, 0, 0), (self.g, self.n, self.lo, self.hi))

    def __setstate__(self, state: tuple[Group | None, int, int, int]) -> None:
        self.g, self.n, self.lo, self.hi = state


class BlockPool:
    """Block accounting plus an LRU prefix cache of key groups."""

    __slots__ = ("num_blocks", "num_free", "caching", "_index", "_queue", "evictions")

    def __init__(self, num_blocks: int, *, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.num_free = num_blocks
        self.caching = enable_prefix_caching
        self._index: dict[Key, Group] = {}  # first key -> group
        # free blocks, LRU first
        self._queue: deque[Seg] = deque([Seg(None, num_blocks, 0, 0)])
        self.evictions = 0  # cached blocks dropped to make room

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.num_blocks,), state_of(self))

    def __setstate__(self, state: dict[str, Any]) -> None:
        set_state(self, state)

    # -- queries -------------------------------------------------------------------
    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests (cached-but-free blocks count as free, as in vLLM)."""
        return 1.0 - self.num_free / self.num_blocks

    @property
    def cached_blocks(self) -> int:
        return sum(g.cached for g in self._groups())

    def __contains__(self, key: int) -> bool:
        """Whether a cached group starts with ``key`` (the engine's quick miss test)."""
        return key in self._index

    def match(self, keys: Sequence[Key], limit: int) -> tuple[int, int, list[list[Any]]]:
        """Leading keys (at most ``limit``) that are cached: (hit blocks, of which free, path to acquire)."""
        if not self.caching or limit <= 0 or not len(keys):
            return 0, 0, []
        end_all = min(limit, len(keys))
        index = self._index
        p = free = 0
        path: list[list[Any]] = []
        while p < end_all:
            g = index.get(keys[p])  # a group starting here (chained keys: its start is p)
            if g is None:
                break
            end = min(end_all, g.start + g.cached)
            m = _run(keys, g.keys, p, end)
            path.append([g, m])
            if m > g.max_h:
                free += m - g.max_h
            p += m  # past a divergence or g's cached top, another group may go on
        return p, free, path

    # -- mutations -----------------------------------------------------------------
    def acquire(self, path: list[list[Any]]) -> None:
        """Hold the blocks of a :meth:`match` path (the caller keeps ``path`` as its holdings)."""
        for g, h in path:
            holders = g.holders
            holders[h] = holders.get(h, 0) + 1
            if h > g.max_h:
                self.num_free -= h - g.max_h
                g.max_h = h
                live = []
                for seg in g.segs:  # blocks taken back leave the segments they were free in
                    if seg.lo < h:
                        seg.lo = h if h < seg.hi else seg.hi
                    if seg.lo < seg.hi:
                        live.append(seg)
                g.segs = live

    def register(self, keys: Sequence[Key], lo: int, hi: int, held: list[list[Any]], cursor: Group | None = None,
                 own: Group | None = None) -> tuple[Group | None, Group | None, int]:
        """A request's blocks ``lo..hi-1`` (positions in its key list ``keys``) are full: cache them.

        ``held``: its holdings (extended in place); ``cursor``: the group its content was last found in
        (up to ``lo``); ``own``: the group it registered last (extended when the new blocks follow it).
        Blocks another group already caches stay the request's own anonymous copies. Returns the new
        (cursor, own) and how many blocks the request now holds keyed in addition.
        """
        if not self.caching or hi <= lo:
            return cursor, own, 0
        index = self._index
        p = lo
        cur = cursor
        g: Group | None
        while p < hi:  # follow what the cache already holds of this content
            if cur is not None and cur.start <= p < cur.start + cur.cached and cur.keys[p] == keys[p]:
                g = cur
            else:
                g = index.get(keys[p])
                if g is None:
                    break
            p += _run(keys, g.keys, p, min(hi, g.start + g.cached))
            cur = g
        if p >= hi:
            return cur, own, 0
        added = hi - p
        if (p == lo and own is not None and cursor is own and own.keys is keys and own.start + own.n == p
                and own.cached == own.n):
            n = own.n + added  # the request's run goes on: extend its group
            holders = own.holders
            c = holders[own.n] - 1
            if c:
                holders[own.n] = c
            else:
                del holders[own.n]
            holders[n] = holders.get(n, 0) + 1
            own.n = own.cached = own.max_h = n
            for entry in held:
                if entry[0] is own:
                    entry[1] = n
                    break
        else:
            own = Group(keys, p, added)
            index[own.first] = own
            held.append([own, added])
        return own, own, added

    def free(self, held: list[list[Any]], anonymous: int) -> None:
        """Release a request's holdings and ``anonymous`` unkeyed blocks.

        As in vLLM, the tail is freed first (anonymous blocks, then the groups from the last), so
        the request's last blocks are evicted before its prefix.
        """
        self.free_anonymous(anonymous)
        queue = self._queue
        for i in range(len(held) - 1, -1, -1):  # the tail first (an index loop: mypyc compiles it)
            g, h = held[i]
            holders = g.holders
            c = holders[h] - 1
            if c:
                holders[h] = c
                continue
            del holders[h]
            if h != g.max_h:
                continue
            top = max(holders) if holders else 0
            g.max_h = top
            if top < h:
                seg = Seg(g, 0, top, h)
                queue.append(seg)
                g.segs.append(seg)
                self.num_free += h - top

    def free_anonymous(self, n: int) -> None:
        """Release ``n`` unkeyed blocks (:meth:`free` with no holdings): several requests' in one call."""
        if n:
            queue = self._queue
            last = queue[-1]
            if last.g is None:
                last.n += n
            else:
                queue.append(Seg(None, n, 0, 0))
            self.num_free += n

    def allocate(self, n: int) -> None:
        """Take ``n`` free blocks from the LRU head (evicting cached blocks); caller checked ``num_free``."""
        if n <= 0:
            return
        if n > self.num_free:
            raise RuntimeError(f"allocate({n}) with only {self.num_free} free blocks")
        self.num_free -= n
        queue = self._queue
        seg = queue[0]
        if seg.g is None and seg.n > n:  # the common case: the head is a run of anonymous blocks
            seg.n -= n
            return
        while n:
            seg = queue[0]
            g = seg.g
            if g is None:
                c = seg.n
                if c > n:
                    seg.n = c - n
                    return
                n -= c
                seg.n = 0
            else:
                top = seg.hi if seg.hi < g.cached else g.cached
                lo = seg.lo if seg.lo > g.max_h else g.max_h
                take = top - lo
                if take > 0:
                    if take > n:
                        take = n
                    top -= take
                    n -= take
                    g.cached = top
                    self.evictions += take
                    if top == 0 and self._index.get(g.first) is g:
                        del self._index[g.first]
                    if top > lo:
                        seg.hi = top
                        return
                seg.lo = seg.hi = top
                segs = g.segs
                if segs and segs[0] is seg:  # the group's oldest: usually the one at the queue's head
                    del segs[0]
                else:
                    g.segs = [x for x in segs if x is not seg]
            if len(queue) > 1:
                queue.popleft()
            elif n:
                raise RuntimeError("twin KV pool: free count and queue disagree")

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block, as vLLM's ``reset_prefix_cache``: only when no request holds a block
        (False, and nothing changes, otherwise). Free blocks stay free; later requests miss."""
        if self.num_free != self.num_blocks:
            return False
        self._index.clear()
        self._queue.clear()
        self._queue.append(Seg(None, self.num_blocks, 0, 0))
        return True

    def _groups(self) -> list[Group]:
        seen: dict[int, Group] = {}
        for g in self._index.values():
            seen[id(g)] = g
        for seg in self._queue:
            if seg.g is not None:
                seen[id(seg.g)] = seg.g
        return list(seen.values())

    def check(self) -> None:
        """Invariants (tests): the free count matches the queue; groups' holders, maxima and segments agree."""
        free = sum(seg.n for seg in self._queue if seg.g is None)
        groups = self._groups()
        for g in groups:
            assert 0 <= g.max_h <= g.cached <= g.n, (g.max_h, g.cached, g.n)
            assert g.max_h == (max(g.holders) if g.holders else 0)
            live = [s for s in self._queue if s.g is g and min(s.hi, g.cached) > max(s.lo, g.max_h)]
            covered = sum(min(s.hi, g.cached) - max(s.lo, g.max_h) for s in live)
            assert covered == g.cached - g.max_h, (covered, g.cached, g.max_h)
            free += covered
        for k, g in self._index.items():
            assert g.first == k and g.cached > 0
        assert free == self.num_free, (free, self.num_free)
        assert 0 <= self.num_free <= self.num_blocks
