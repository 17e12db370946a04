"""Paged KV cache with prefix caching: a pool of fixed-size blocks, counted, not stored.

The pool promises what vLLM's block pool promises to the scheduler, without holding
token data:

- ``num_free`` blocks are free (never used, or cached with no request using them);
- a full block can carry a *key* (its content hash); a later request whose leading
  block keys match reuses those blocks (:meth:`match` then :meth:`acquire`);
- freed blocks join the tail of an LRU queue; allocation takes from its head,
  evicting cached keys on the way, so the least recently freed block goes first.

Blocks without a key ("anonymous": partial blocks, unique content, decode output)
are kept as runs of counts in the same LRU queue, so the cost of a request is O(its
keyed blocks), not O(its blocks)::

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
Keys are non-negative ints (see :mod:`infermeter.twin.hashing`); run ids in the queue
are negative, so the two never collide.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

BLOCK_SIZE = 16


class BlockPool:
    """Block accounting plus an LRU prefix cache keyed by block-content hashes."""

    __slots__ = ("num_blocks", "num_free", "caching", "_refs", "_lru", "_next_run", "evictions")

    def __init__(self, num_blocks: int, *, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.num_free = num_blocks
        self.caching = enable_prefix_caching
        self._refs: dict[int, int] = {}  # key -> number of requests using the block (0: cached, free)
        self._lru: OrderedDict[int, int] = OrderedDict()  # free blocks, LRU first: key -> 1, run id (<0) -> count
        self._next_run = -1
        self.evictions = 0  # cached keys dropped to make room
        self._push_run(num_blocks)

    # -- queries -------------------------------------------------------------------
    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests (cached-but-free blocks count as free, as in vLLM)."""
        return 1.0 - self.num_free / self.num_blocks

    @property
    def cached_keys(self) -> int:
        return len(self._refs)

    def match(self, keys: Sequence[int], limit: int) -> tuple[int, int]:
        """Leading keys (at most ``limit``) that are cached: (hit blocks, of which free)."""
        if not self.caching:
            return 0, 0
        refs = self._refs
        hits = free_hits = 0
        for key in keys[:limit] if len(keys) > limit else keys:
            ref = refs.get(key)
            if ref is None:
                break
            hits += 1
            if ref == 0:
                free_hits += 1
        return hits, free_hits

    # -- mutations -----------------------------------------------------------------
    def acquire(self, keys: Iterable[int]) -> None:
        """Take a reference on cached blocks (found by :meth:`match`)."""
        refs = self._refs
        for key in keys:
            ref = refs[key]
            if ref == 0:
                del self._lru[key]
                self.num_free -= 1
            refs[key] = ref + 1

    def allocate(self, n: int) -> None:
        """Take ``n`` free blocks from the LRU head (evicting cached keys); caller checked ``num_free``."""
        if n <= 0:
            return
        if n > self.num_free:
            raise RuntimeError(f"allocate({n}) with only {self.num_free} free blocks")
        self.num_free -= n
        lru = self._lru
        while n:
            key = next(iter(lru))
            if key < 0:  # anonymous run: take from it (updating a value keeps its place)
                count = lru[key]
                if count > n:
                    lru[key] = count - n
                    return
                del lru[key]
                n -= count
            else:  # a cached block: evict its key
                del lru[key]
                del self._refs[key]
                self.evictions += 1
                n -= 1

    def register(self, key: int) -> bool:
        """Give one of the caller's (already allocated) blocks a content key.

        Returns False (the block stays anonymous) when caching is off or another block
        already holds the key (two requests computed the same content at once).
        """
        if not self.caching or key in self._refs:
            return False
        self._refs[key] = 1
        return True

    def free(self, keys: Sequence[int], anonymous: int) -> None:
        """Release a request's blocks: ``keys`` (block order) and ``anonymous`` unkeyed ones.

        As in vLLM, the tail is freed first (anonymous blocks, then keys in reverse), so
        the request's last blocks are evicted before its prefix.
        """
        lru = self._lru
        if anonymous:
            last = next(reversed(lru), 0) if lru else 0
            if last < 0:  # extend the tail run: same LRU order, fewer entries
                lru[last] += anonymous
            else:
                self._push_run(anonymous)
            self.num_free += anonymous
        refs = self._refs
        for key in reversed(keys):
            ref = refs[key] - 1
            refs[key] = ref
            if ref == 0:
                lru[key] = 1
                self.num_free += 1

    def reset_prefix_cache(self) -> bool:
        """Forget every cached key, as vLLM's ``reset_prefix_cache``: only when no request holds a block
        (False, and nothing changes, otherwise). Free blocks stay free; later requests miss."""
        if self.num_free != self.num_blocks:
            return False
        self._refs.clear()
        self._lru.clear()
        self._push_run(self.num_blocks)
        return True

    def _push_run(self, count: int) -> None:
        run = self._next_run
        self._next_run = run - 1
        self._lru[run] = count

    def check(self) -> None:
        """Invariants (tests): free count matches the queue, every free key has no user."""
        queued = sum(self._lru.values())
        assert queued == self.num_free, (queued, self.num_free)
        for key in self._lru:
            if key >= 0:
                assert self._refs[key] == 0, key
        assert 0 <= self.num_free <= self.num_blocks
