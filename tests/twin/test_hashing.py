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


def test_a_chunk_has_the_same_key_whether_or_not_the_text_around_it_is_ascii():
    head = "plain words here " * 20  # 340 ASCII characters: 4 whole chunks of 77 (bytes padded to 80)
    ascii_keys = text_block_keys(head[:308], prompt_tokens=64, chars_per_block=77)
    mixed = text_block_keys(head[:308] + "naïve café ☕ \ud800" * 20, prompt_tokens=160, chars_per_block=77)
    assert len(ascii_keys) == 4 and len(mixed) == 7  # (308 + 280 characters) // 77
    assert mixed[:4] == ascii_keys  # the byte-array path and the per-chunk path hash alike
    assert len(set(mixed)) == 7


def test_keys_do_not_depend_on_the_process_hash_seed():
    import os
    import subprocess
    import sys

    code = ("from infermeter.twin.hashing import text_block_keys as k; "
            "print(k('some shared system prompt text ' * 40, 400, chars_per_block=77, block_size=16))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(outs) == 1 and outs.pop().count(",") == 15  # 16 keys (1,280 characters // 77), the same in both


def test_a_request_record_copy_has_every_attribute_of_the_request():
    import copy

    from infermeter.twin.request import SimRequest

    r = SimRequest(7, 1.5, 300, 20, [1, 2], 1.25, 3, None, tag="t", replica=2, lane=1)
    for i, name in enumerate(SimRequest.__slots__):  # a distinct value in every attribute
        setattr(r, name, ("v", i))
    c = copy.copy(r)
    assert c is not r and all(getattr(c, n) == ("v", i) for i, n in enumerate(SimRequest.__slots__))
