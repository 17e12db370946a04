"""Paged KV cache with prefix caching: a pool of fixed-size blocks, counted, not stored.

The pool promises what vLLM's block pool promises to the scheduler, without holding
token data (the block size is the engine's: the pool only counts blocks):

- ``num_free`` blocks are free (never used, or cached with no request using them);
- a full block can carry a *key* (its content hash); a later request whose leading
  block keys match reuses those blocks (:meth:`match` then :meth:`acquire`);
- freed blocks join the tail of an LRU queue; allocation takes from its head,
  evicting cached keys on the way, so the least recently freed block goes first.

Blocks without a key ("anonymous": partial blocks, unique content, decode output) are
only counted. The queue holds one *segment* per :meth:`free` call: its anonymous count,
then the keys that became free in eviction order (the request's tail first), so a request
costs O(its keyed blocks) in C-level dict operations and nothing per anonymous block::

    >>> pool = BlockPool(num_blocks=8)
    >>> pool.allocate(3); pool.num_free
    5
    >>> pool.register(101)            # block 0 of a request now holds content key 101
    True
    >>> pool.free([101], anonymous=2)  # request done: 1 keyed + 2 anonymous blocks
    >>> pool.num_free, pool.match([101, 202], limit=2)
    (8, (1, 1))

``match`` returns ``(hit_blocks, hits_that_are_free)``: the second number is how many
of the hit blocks sit in the free queue (taking them costs free blocks, as in vLLM).
Keys are non-negative ints (see :mod:`infermeter.twin.hashing`).

Representation: one dict ``key -> value`` per pool, value ``> 0`` = the number of requests
using the block, ``< 0`` = free and cached, ``-value`` naming the free segment that holds it.
A key taken back by a hit (or freed again later) leaves a stale entry in its old segment,
skipped when that segment is consumed (its value no longer names the segment).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from itertools import repeat

BLOCK_SIZE = 16  # vLLM's default on GPUs; an engine's own is ``EngineConfig.block_size``

_POS = (0).__lt__  # v -> v > 0: the block is in use


class BlockPool:
    """Block accounting plus an LRU prefix cache keyed by block-content hashes."""

    __slots__ = ("num_blocks", "num_free", "caching", "_refs", "_queue", "_next_seg", "evictions")

    def __init__(self, num_blocks: int, *, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.num_free = num_blocks
        self.caching = enable_prefix_caching
        self._refs: dict[int, int] = {}  # key -> users (> 0) or -segment id (< 0: free, cached)
        # free blocks, LRU first: segments [id, anonymous left, keys in eviction order, next key position]
        self._queue: deque[list] = deque([[1, num_blocks, [], 0]])
        self._next_seg = 2
        self.evictions = 0  # cached keys dropped to make room

    # -- queries -------------------------------------------------------------------
    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests (cached-but-free blocks count as free, as in vLLM)."""
        return 1.0 - self.num_free / self.num_blocks

    @property
    def cached_keys(self) -> int:
        return len(self._refs)

    def __contains__(self, key: int) -> bool:
        return key in self._refs

    def match(self, keys: Sequence[int], limit: int) -> tuple[int, int]:
        """Leading keys (at most ``limit``) that are cached: (hit blocks, of which free)."""
        if not self.caching or limit <= 0:
            return 0, 0
        vals = list(map(self._refs.get, keys[:limit] if len(keys) > limit else keys))
        try:
            hits = vals.index(None)
        except ValueError:
            hits = len(vals)
        if not hits:
            return 0, 0
        return hits, hits - sum(map(_POS, vals[:hits]))

    # -- mutations -----------------------------------------------------------------
    def acquire(self, keys: Sequence[int]) -> None:
        """Take a reference on cached blocks (found by :meth:`match`)."""
        refs = self._refs
        vals = list(map(refs.__getitem__, keys))
        in_use = sum(map(_POS, vals))
        if in_use == 0:  # all free and cached (the common hit: an earlier request's finished prefix)
            refs.update(dict.fromkeys(keys, 1))
        elif in_use == len(vals):
            refs.update(zip(keys, map((1).__add__, vals)))
        else:
            for key, v in zip(keys, vals):
                refs[key] = v + 1 if v > 0 else 1
        self.num_free -= len(vals) - in_use

    def allocate(self, n: int) -> None:
        """Take ``n`` free blocks from the LRU head (evicting cached keys); caller checked ``num_free``."""
        if n <= 0:
            return
        if n > self.num_free:
            raise RuntimeError(f"allocate({n}) with only {self.num_free} free blocks")
        self.num_free -= n
        queue = self._queue
        refs = self._refs
        while n:
            seg = queue[0]
            anon = seg[1]
            if anon:
                if anon > n:
                    seg[1] = anon - n
                    return
                seg[1] = 0
                n -= anon
                if seg[3] >= len(seg[2]) and len(queue) > 1:
                    queue.popleft()
                continue
            keys, pos, tag = seg[2], seg[3], -seg[0]
            end = len(keys)
            while pos < end:
                key = keys[pos]
                pos += 1
                if refs.get(key) == tag:  # still free in this segment: evict it
                    del refs[key]
                    self.evictions += 1
                    n -= 1
                    if not n:
                        break
            seg[3] = pos
            if pos >= end:
                queue.popleft()
                if not queue:
                    queue.append([self._new_seg(), 0, [], 0])

    def register(self, key: int) -> bool:
        """Give one of the caller's (already allocated) blocks a content key.

        Returns False (the block stays anonymous) when caching is off or another block
        already holds the key (two requests computed the same content at once).
        """
        if not self.caching or key in self._refs:
            return False
        self._refs[key] = 1
        return True

    def register_many(self, keys: Sequence[int]) -> Sequence[int]:
        """:meth:`register` for consecutive blocks; returns the keys that were registered, in order."""
        if not self.caching or not keys:
            return ()
        refs = self._refs
        if refs.keys().isdisjoint(keys):
            refs.update(dict.fromkeys(keys, 1))
            return keys
        new = [k for k in keys if k not in refs]
        refs.update(dict.fromkeys(new, 1))
        return new

    def free(self, keys: Sequence[int], anonymous: int) -> None:
        """Release a request's blocks: ``keys`` (block order) and ``anonymous`` unkeyed ones.

        As in vLLM, the tail is freed first (anonymous blocks, then keys in reverse), so
        the request's last blocks are evicted before its prefix.
        """
        refs = self._refs
        freed: list[int]
        if keys:
            sid = self._next_seg
            tag = -sid
            vals = list(map(refs.__getitem__, keys))
            if vals.count(1) == len(vals):  # every block this request's alone: all become free
                refs.update(zip(keys, repeat(tag)))
                freed = list(reversed(keys))
            else:
                freed = []
                for key, v in zip(reversed(keys), reversed(vals)):
                    if v == 1:
                        refs[key] = tag
                        freed.append(key)
                    else:
                        refs[key] = v - 1
        else:
            freed = []
        n = anonymous + len(freed)
        if not n:
            return
        self.num_free += n
        queue = self._queue
        if freed:
            self._next_seg += 1
            queue.append([sid, anonymous, freed, 0])
        else:
            last = queue[-1]
            if last[3] >= len(last[2]):  # no keys left behind its anonymous count: extend it
                last[1] += anonymous
            else:
                queue.append([self._new_seg(), anonymous, [], 0])

    def _new_seg(self) -> int:
        sid = self._next_seg
        self._next_seg += 1
        return sid

    def free_keys(self, keys: Iterable[int]) -> None:
        """Test helper: :meth:`free` of keyed blocks only."""
        self.free(list(keys), 0)

    def check(self) -> None:
        """Invariants (tests): free count matches the queue, every free key sits in its segment."""
        refs = self._refs
        live = 0
        seen: set[int] = set()
        for sid, anon, keys, pos in self._queue:
            assert anon >= 0
            live += anon
            for key in keys[pos:]:
                if refs.get(key) == -sid:
                    assert key not in seen, key
                    seen.add(key)
                    live += 1
        assert live == self.num_free, (live, self.num_free)
        assert seen == {k for k, v in refs.items() if v < 0}
        assert all(v != 0 for v in refs.values())
        assert 0 <= self.num_free <= self.num_blocks
