"""--prompt-salt: other text, the same lengths and sharing structure; salt 0 is the seed's own text."""

import itertools

import pytest

from infermeter.workload import build_workload


def _specs(salt, profile, n=40, **kw):
    return list(itertools.islice(build_workload(profile=profile, seed=3, prompt_salt=salt, **kw).requests(), n))


def _text(spec):
    return spec.prompt if spec.prompt is not None else "\n".join(m["content"] for m in spec.messages)


@pytest.mark.parametrize("profile,kw", [("synthetic", {}), ("synthetic", {"prefix_tokens": 64, "prefix_groups": 2}),
                                        ("fixed", {}), ("chat", {}), ("classification", {}), ("code", {})])
def test_a_salt_changes_the_text_and_nothing_else(profile, kw):
    plain, salted, again = _specs(0, profile, **kw), _specs(7, profile, **kw), _specs(7, profile, **kw)
    shape = lambda specs: [(s.input_tokens, s.max_tokens, s.prefix_group, s.conversation_id) for s in specs]  # noqa: E731
    assert shape(plain) == shape(salted)
    assert [_text(s) for s in salted] == [_text(s) for s in again]  # reproducible from the salt
    assert all(_text(a) != _text(b) for a, b in zip(plain, salted))
    # no salted prompt opens like any unsalted one: a warm cache from the unsalted run does not help
    openings = {_text(s)[:64] for s in plain}
    assert not any(_text(s)[:64] in openings for s in salted)


def test_salt_zero_is_the_default_text_and_is_recorded():
    assert [_text(s) for s in _specs(0, "synthetic")] == \
        [_text(s) for s in itertools.islice(build_workload(seed=3).requests(), 40)]
    assert build_workload(prompt_salt=5).describe()["prompt_salt"] == 5
    assert build_workload(prompt_salt=5).describe()["content_hash"] == build_workload().describe()["content_hash"]
    assert build_workload().describe()["shares_prefixes"] is False
    assert build_workload(profile="chat").describe()["shares_prefixes"] is True


def test_a_bad_salt_names_the_flag():
    from infermeter.errors import ConfigError

    with pytest.raises(ConfigError, match="--prompt-salt"):
        build_workload(prompt_salt=-1)
