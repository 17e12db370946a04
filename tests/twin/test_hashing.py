"""Block keys: shared leading content shares keys, distinct content does not."""

from __future__ import annotations

from infermeter.twin.hashing import CHARS_PER_BLOCK, chat_text, private_key, text_block_keys, token_block_keys


def test_text_keys_follow_shared_prefix_exactly_to_the_chunk():
    shared = "A" * (3 * CHARS_PER_BLOCK)
    a = text_block_keys(shared + "B" * CHARS_PER_BLOCK, prompt_tokens=64)
    b = text_block_keys(shared + "C" * CHARS_PER_BLOCK, prompt_tokens=64)
    assert len(a) == len(b) == 4
    assert a[:3] == b[:3]
    assert a[3] != b[3]


def test_text_keys_chain_so_a_later_equal_chunk_does_not_match():
    a = text_block_keys("x" * CHARS_PER_BLOCK + "y" * CHARS_PER_BLOCK, prompt_tokens=32)
    b = text_block_keys("z" * CHARS_PER_BLOCK + "y" * CHARS_PER_BLOCK, prompt_tokens=32)
    assert a[0] != b[0] and a[1] != b[1]


def test_text_keys_limited_by_full_blocks_and_by_text_length():
    text = "q" * (5 * CHARS_PER_BLOCK)
    assert len(text_block_keys(text, prompt_tokens=47)) == 2  # 47 tokens: 2 full blocks
    assert len(text_block_keys(text, prompt_tokens=1000)) == 5  # only 5 whole chunks of text
    assert text_block_keys("short", prompt_tokens=100) == []


def test_keys_are_non_negative_63_bit():
    for k in text_block_keys("w" * 10 * CHARS_PER_BLOCK, 160) + [private_key(3, 4)]:
        assert 0 <= k < 1 << 63


def test_token_keys_exact_per_16_tokens():
    ids = list(range(40))
    keys = token_block_keys(ids)
    assert len(keys) == 2
    assert token_block_keys(ids[:32] + [999] * 8) == keys
    assert token_block_keys([1] + ids[1:])[0] != keys[0]


def test_private_keys_differ_by_request_and_block():
    assert private_key(1, 0) != private_key(2, 0) != private_key(1, 1)


def test_chat_text_joins_contents_like_the_server():
    msgs = ({"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]})
    assert chat_text(msgs) == "be brief\nhi"
