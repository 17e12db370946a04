"""Length distributions: the mean[,stdev[,min,max]] syntax and the clamped-normal sampler."""

from __future__ import annotations

import numpy as np
import pytest

from infermeter.errors import ConfigError
from infermeter.workload.lengths import LengthDist, LengthSampler


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("200", LengthDist(200, 0.0, 200, 200)),
        ("800,100,50,800", LengthDist(800, 100.0, 50, 800)),
        ("1000,100", LengthDist(1000, 100.0, 700, 1300)),  # mean -/+ 3 stdev
        ("10,5", LengthDist(10, 5.0, 1, 25)),  # never below 1
        (" 64 , 0 ", LengthDist(64, 0.0, 64, 64)),
        (512, LengthDist(512, 0.0, 512, 512)),
    ],
)
def test_parse(text: str, expected: LengthDist) -> None:
    assert LengthDist.parse(text, flag="--input-tokens") == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "1, 2 or 4 numbers"),
        ("1,2,3", "1, 2 or 4 numbers"),
        ("abc", "expected numbers"),
        ("0", "mean must be a whole number of tokens >= 1"),
        ("12.5", "mean must be a whole number"),
        ("100,-1", "stdev must be >= 0"),
        ("100,10,200,50", "min 200 is above max 50"),
        ("100,10,150,200", "mean 100 is outside [min, max]"),
        ("nan", "finite"),
    ],
)
def test_parse_errors_name_the_flag(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        LengthDist.parse(text, flag="--output-tokens")
    assert str(err.value).startswith("--output-tokens:")
    assert fragment in str(err.value)


def test_label_round_trips() -> None:
    for text in ("200", "800,100,50,800", "4096,1000,3000,6000"):
        d = LengthDist.parse(text)
        assert LengthDist.parse(d.label()) == d


def test_fixed_length_never_varies() -> None:
    s = LengthSampler(LengthDist.parse("200"), np.random.default_rng(0))
    assert {s.draw() for _ in range(3000)} == {200}


def test_clamped_normal_matches_closed_form() -> None:
    # Normal(800, 100) clamped to [50, 800]: mean = 800 - 100/sqrt(2*pi) = 760.11, half the mass at 800.
    s = LengthSampler(LengthDist.parse("800,100,50,800"), np.random.default_rng(1))
    draws = np.array([s.draw() for _ in range(20_000)])
    assert draws.min() >= 50 and draws.max() == 800
    assert abs(draws.mean() - 760.11) < 2.0
    assert abs((draws == 800).mean() - 0.5) < 0.015


def test_same_seed_same_draws_across_blocks() -> None:
    d = LengthDist.parse("100,30,1,400")
    a = LengthSampler(d, np.random.default_rng(5))
    b = LengthSampler(d, np.random.default_rng(5))
    assert [a.draw() for _ in range(2500)] == [b.draw() for _ in range(2500)]


@pytest.mark.parametrize("text", ["1e300", "20000000", "100,5000000", "5,1,1,99999999"])
def test_lengths_beyond_any_context_are_refused(text):
    with pytest.raises(ConfigError, match="above the 10,000,000 allowed"):
        LengthDist.parse(text, flag="--output-tokens")


@pytest.mark.parametrize("text", ["600,300", "32", "100,40,20,150"])
def test_blocks_give_the_draws_in_order(text):
    dist = LengthDist.parse(text)
    drawn = LengthSampler(dist, np.random.default_rng(9))
    blocks = LengthSampler(dist, np.random.default_rng(9)).blocks()
    assert np.concatenate([next(blocks) for _ in range(3)]).tolist() == [drawn.draw() for _ in range(3 * 1024)]
    drawn.draw()
    with pytest.raises(RuntimeError):
        next(drawn.blocks())


def test_a_keyless_workloads_length_blocks_are_its_specs_lengths():
    from infermeter.workload import build_workload

    wl = build_workload(seed=4, input_tokens="200,50", output_tokens="30,10")
    blocks = wl.length_blocks()
    pt, mt = (np.concatenate(c) for c in zip(*[next(blocks) for _ in range(2)]))
    specs = [s for _, s in zip(range(2048), wl.requests(text=False))]
    assert pt.tolist() == [s.input_tokens for s in specs] and mt.tolist() == [s.max_tokens for s in specs]
    with pytest.raises(ValueError):
        build_workload(seed=4, profile="code").length_blocks()
