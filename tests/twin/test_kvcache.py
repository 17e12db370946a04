"""BlockPool: counting, prefix-cache hits, LRU eviction order."""

from __future__ import annotations

import pytest

from infermeter.twin.kvcache import BlockPool


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
    pool.allocate(3)
    assert pool.register(11) and pool.register(12)
    pool.free([11, 12], anonymous=1)
    assert pool.num_free == 8  # cached but unused blocks are free (vLLM's usage)
    assert pool.match([11, 12, 13], limit=3) == (2, 2)
    assert pool.match([11, 12, 13], limit=1) == (1, 1)
    assert pool.match([99, 11], limit=2) == (0, 0)  # a miss stops the walk
    pool.acquire([11, 12])
    assert pool.num_free == 6
    assert pool.match([11, 12], limit=2) == (2, 0)  # in use: hits that cost no free block
    pool.check()


def test_register_refuses_duplicates_and_when_caching_is_off():
    pool = BlockPool(4)
    pool.allocate(2)
    assert pool.register(5)
    assert not pool.register(5)
    off = BlockPool(4, enable_prefix_caching=False)
    off.allocate(1)
    assert not off.register(5)
    assert off.match([5], limit=1) == (0, 0)


def test_lru_evicts_least_recently_freed_first_and_tail_blocks_before_prefix():
    pool = BlockPool(4)
    pool.allocate(4)
    for k in (1, 2, 3, 4):
        pool.register(k)
    pool.free([1, 2], anonymous=0)  # freed tail first: queue 2, 1
    pool.free([3, 4], anonymous=0)  # queue 2, 1, 4, 3
    pool.allocate(1)  # evicts 2
    assert pool.match([1], 1) == (1, 1) and pool.match([2], 1) == (0, 0)
    pool.allocate(2)  # evicts 1, then 4
    assert pool.match([3], 1) == (1, 1)
    assert pool.match([1], 1) == (0, 0) and pool.match([4], 1) == (0, 0)
    assert pool.evictions == 3
    pool.check()


def test_anonymous_runs_are_consumed_in_order_and_partially():
    pool = BlockPool(10)  # one run of 10
    pool.allocate(10)
    pool.register(7)
    pool.free([7], anonymous=3)  # queue: run(3), key 7
    pool.allocate(2)  # from the run
    assert pool.match([7], 1) == (1, 1)
    pool.allocate(1)  # rest of the run
    assert pool.match([7], 1) == (1, 1)
    pool.allocate(1)  # now the cached block goes
    assert pool.match([7], 1) == (0, 0)
    assert pool.num_free == 0
    pool.check()


def test_shared_block_freed_only_when_last_user_leaves():
    pool = BlockPool(4)
    pool.allocate(1)
    pool.register(9)
    pool.acquire([9])  # a second request uses it
    pool.free([9], anonymous=0)
    assert pool.num_free == 3
    pool.free([9], anonymous=0)
    assert pool.num_free == 4
    pool.check()
