"""BlockPool: counting, prefix-cache hits through key groups, LRU eviction order, unshared duplicates."""

from __future__ import annotations

import pytest

from infermeter.twin.kvcache import BlockPool


def _run(pool: BlockPool, keys: list[int], anonymous: int = 0, limit: int | None = None) -> list:
    """A request: hit what is cached, allocate the rest, register its keyed blocks; returns its holdings."""
    hits, free_hits, path = pool.match(keys, len(keys) if limit is None else limit)
    pool.acquire(path)
    pool.allocate(len(keys) - hits + anonymous)
    held = list(path)
    pool.register(keys, hits, len(keys), held, path[-1][0] if path else None, None)
    return held


def _keyed(held: list) -> int:
    return sum(h for _, h in held)


def test_allocate_and_free_count_blocks():
    pool = BlockPool(10)
    pool.allocate(4)
    assert pool.num_free == 6
    assert pool.usage == pytest.approx(0.4)
    pool.free([], anonymous=4)
    assert pool.num_free == 10
    pool.check()


def test_allocate_more_than_free_is_a_bug():
    pool = BlockPool(2)
    with pytest.raises(RuntimeError):
        pool.allocate(3)


def test_registered_blocks_are_found_after_free_and_count_as_free():
    pool = BlockPool(8)
    held = _run(pool, [11, 12], anonymous=1)
    pool.free(held, anonymous=1)
    assert pool.num_free == 8  # cached but unused blocks are free (vLLM's usage)
    assert pool.match([11, 12, 13], limit=3)[:2] == (2, 2)
    assert pool.match([11, 12, 13], limit=1)[:2] == (1, 1)
    assert pool.match([99, 11], limit=2)[:2] == (0, 0)  # a miss stops the walk
    hits, _, path = pool.match([11, 12], limit=2)
    pool.acquire(path)
    assert pool.num_free == 6
    assert pool.match([11, 12], limit=2)[:2] == (2, 0)  # in use: hits that cost no free block
    pool.check()


def test_a_prompt_that_leaves_a_group_goes_on_in_the_branch_cached_after_it():
    pool = BlockPool(32)
    a = _run(pool, [1, 2, 3, 4, 5])
    b = _run(pool, [1, 2, 3, 40, 50, 60])  # shares 3 blocks with a, then its own branch
    assert _keyed(b) == 6 and len(b) == 2  # a's first 3, then b's own group of 3
    pool.free(a, 0)
    pool.free(b, 0)
    assert pool.match([1, 2, 3, 40, 50, 60, 70], limit=7)[:2] == (6, 6)
    assert pool.match([1, 2, 3, 4, 77], limit=5)[:2] == (4, 4)
    assert pool.match([1, 2, 3, 40, 51], limit=5)[:2] == (4, 4)
    pool.check()


def test_content_cached_by_another_request_first_stays_unshared():
    pool = BlockPool(16)
    a = _run(pool, [7, 8, 9])
    # b missed at admission (computed concurrently) and fills the same blocks: its copies stay anonymous
    pool.allocate(3)
    held: list = []
    cursor, own, added = pool.register([7, 8, 9], 0, 3, held)
    assert added == 0 and held == [] and own is None
    pool.free(held, anonymous=3)
    pool.free(a, 0)
    assert pool.num_free == 16
    pool.check()


def test_lru_evicts_least_recently_freed_first_and_tail_blocks_before_prefix():
    pool = BlockPool(4)
    first = _run(pool, [1, 2])
    second = _run(pool, [3, 4])
    pool.free(first, 0)  # queue: 2, 1 (tail first)
    pool.free(second, 0)  # queue: 2, 1, 4, 3
    pool.allocate(1)  # evicts 2
    assert pool.match([1, 2], 2)[:2] == (1, 1)
    pool.allocate(2)  # evicts 1, then 4
    assert pool.match([3, 4], 2)[:2] == (1, 1)
    assert pool.match([1], 1)[:2] == (0, 0)
    assert pool.evictions == 3
    pool.check()


def test_anonymous_blocks_are_consumed_in_order_and_partially():
    pool = BlockPool(10)
    held = _run(pool, [7], anonymous=3)
    pool.free(held, anonymous=3)  # queue: the rest of the first run (6), then 3 anonymous, then key 7
    pool.allocate(8)  # 6 + 2 anonymous
    assert pool.match([7], 1)[:2] == (1, 1)
    pool.allocate(1)  # the last anonymous block
    assert pool.match([7], 1)[:2] == (1, 1)
    pool.allocate(1)  # now the cached block goes
    assert pool.match([7], 1)[:2] == (0, 0)
    assert pool.num_free == 0
    pool.check()


def test_a_shared_block_is_freed_only_when_its_last_user_leaves():
    pool = BlockPool(4)
    owner = _run(pool, [9])
    _, _, path = pool.match([9], 1)
    pool.acquire(path)  # a second request uses it
    pool.free(owner, 0)
    assert pool.num_free == 3
    pool.free(path, 0)
    assert pool.num_free == 4
    pool.check()


def test_an_evicted_tail_is_found_again_once_another_request_caches_it():
    pool = BlockPool(4)
    a = _run(pool, [1, 2, 3, 4])
    pool.free(a, 0)
    pool.allocate(3)  # evicts 4, 3 and 2 (a's tail first)
    pool.free([], anonymous=3)
    assert pool.match([1, 2, 3, 4], 4)[:2] == (1, 1)
    b = _run(pool, [1, 2, 3, 4])  # hits block 1, caches 2..4 again as its own group
    assert _keyed(b) == 4
    pool.free(b, 0)
    assert pool.match([1, 2, 3, 4], 4)[:2] == (4, 4)
    pool.check()


def test_hits_into_a_free_range_leave_the_rest_in_its_lru_place():
    pool = BlockPool(8)
    a = _run(pool, [1, 2, 3, 4])  # 4 blocks, the other 4 are anonymous
    pool.free(a, 0)  # queue: 4 anonymous, then a's 4, 3, 2, 1
    hits, free_hits, path = pool.match([1, 2], 2)
    assert (hits, free_hits) == (2, 2)
    pool.acquire(path)  # blocks 1, 2 in use again; 4, 3 keep their place
    pool.allocate(5)  # the 4 anonymous blocks, then block 4 (a's tail)
    assert pool.match([1, 2, 3, 4], 4)[:2] == (3, 1)
    pool.free(path, 0)  # 2, 1 join the tail now: 3 goes before them
    pool.allocate(1)
    assert pool.match([1, 2, 3, 4], 4)[:2] == (2, 2)
    pool.check()


class _PerKeyPool:
    """Reference: vLLM's block pool key by key (a ref count per key, an LRU queue of free blocks)."""

    def __init__(self, n: int) -> None:
        from collections import OrderedDict

        self.free_n = n
        self.refs: dict[int, int] = {}
        self.lru: OrderedDict = OrderedDict()
        self.run = -1
        self.lru[self.run] = n

    def match(self, keys: list[int], limit: int) -> tuple[int, int]:
        hits = free = 0
        for k in keys[:limit]:
            if k not in self.refs:
                break
            hits += 1
            free += self.refs[k] == 0
        return hits, free

    def acquire(self, keys: list[int]) -> None:
        for k in keys:
            if self.refs[k] == 0:
                del self.lru[k]
                self.free_n -= 1
            self.refs[k] += 1

    def allocate(self, n: int) -> None:
        self.free_n -= n
        while n:
            k = next(iter(self.lru))
            if k < 0:
                c = self.lru[k]
                if c > n:
                    self.lru[k] = c - n
                    return
                del self.lru[k]
                n -= c
            else:
                del self.lru[k]
                del self.refs[k]
                n -= 1

    def free(self, keys: list[int], anonymous: int) -> None:
        if anonymous:
            self.run -= 1
            self.lru[self.run] = anonymous
            self.free_n += anonymous
        for k in reversed(keys):
            self.refs[k] -= 1
            if self.refs[k] == 0:
                self.lru[k] = 1
                self.free_n += 1


@pytest.mark.parametrize("seed", range(6))
def test_groups_behave_as_vllms_per_key_pool(seed):
    import random

    rnd = random.Random(seed)
    n_blocks = 40
    pool, ref = BlockPool(n_blocks), _PerKeyPool(n_blocks)

    def chain(base: int, length: int, diverge: int) -> list[int]:
        tokens = [(base, i) for i in range(diverge)] + [(rnd.random(), i) for i in range(diverge, length)]
        return [hash(tuple(tokens[: i + 1])) & ((1 << 62) - 1) for i in range(length)]

    live: list[dict] = []
    probes = [chain(b, 10, 10) for b in range(3)]
    for step in range(400):
        if live and (len(live) >= 3 or rnd.random() < 0.45):
            r = live.pop(rnd.randrange(len(live)))
            while r["reg"] < len(r["keys"]):  # finish registering, then free
                _register(pool, ref, r, len(r["keys"]))
            pool.free(r["held"], r["anon"])
            ref.free(r["ref_held"], r["ref_anon"])
        else:
            keys = chain(rnd.randrange(3), rnd.randint(1, 10), rnd.randint(0, 10))
            limit = len(keys) - rnd.randint(0, 1)
            hits, free, path = pool.match(keys, limit)
            assert (hits, free) == ref.match(keys, limit)
            need = len(keys) - hits + 1  # its blocks and one anonymous (decode) block
            if need + free > pool.num_free:
                continue
            pool.acquire(path)
            ref.acquire(keys[:hits])
            pool.allocate(need)
            ref.allocate(need)
            r = {"keys": keys, "reg": hits, "held": list(path), "cursor": path[-1][0] if path else None,
                 "own": None, "anon": need - (len(keys) - hits), "ref_held": list(keys[:hits]), "ref_anon": 1}
            _register(pool, ref, r, rnd.randint(hits, len(keys)))
            live.append(r)
        assert pool.num_free == ref.free_n, step
        for p in probes:
            assert pool.match(p, len(p))[:2] == ref.match(p, len(p)), step
        pool.check()


def _register(pool, ref, r, upto):
    keys, lo = r["keys"], r["reg"]
    if upto <= lo:
        upto = min(len(keys), lo + 1)
    r["cursor"], r["own"], added = pool.register(keys, lo, upto, r["held"], r["cursor"], r["own"])
    dup = (upto - lo) - added
    r["anon"] += dup
    for k in keys[lo:upto]:
        if k in ref.refs:
            r["ref_anon"] += 1
        else:
            ref.refs[k] = 1
            r["ref_held"].append(k)
    r["reg"] = upto


def test_reset_forgets_the_cache_only_when_nothing_is_held():
    pool = BlockPool(8)
    held = _run(pool, [1, 2, 3])
    assert not pool.reset_prefix_cache()  # a request still holds its blocks
    pool.free(held, 0)
    assert pool.match([1, 2, 3], 3)[:2] == (3, 3)
    assert pool.reset_prefix_cache()
    assert pool.match([1, 2, 3], 3)[:2] == (0, 0) and pool.num_free == 8
    pool.allocate(8)
    pool.check()
