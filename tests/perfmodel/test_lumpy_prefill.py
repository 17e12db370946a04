"""Saturated runs of long prompts (issue 29, blind set 3 miss b): whole prompts in some steps, pure decodes in the rest."""

from __future__ import annotations

import math

import pytest

from infermeter.perfmodel import build_deployment
from infermeter.perfmodel.serving import _lumpy_step, engine_of, saturation


def _spread_step(d, n: int, i: int, o: int) -> float:
    """The evenly spread steady step: ``n`` decodes and ``n I / O`` prompt tokens every step."""
    pre = n * i / o
    return d.step_time(int(round(n + pre)), int(n * (i + o / 2) + pre), n, attn_pairs=n * (i + o / 2) + pre * (i + 1) / 2)


def test_a_batch_admitting_under_one_prompt_a_step_steps_slower_than_the_spread_mean():
    """66 sequences of 4000 + 200 tokens finish a third of a request a step: one step in three carries a whole prompt,
    the others decode alone and read the weights with nothing to hide it behind."""
    d = build_deployment("qwen3-14b", "h100-sxm")
    n, i, o = 66, 4000, 200
    ctx = i + o / 2
    lumpy = _lumpy_step(d, n, o, n * ctx, n * ctx, float(i), (i + 1) / 2, engine_of(d).max_batched_tokens)
    assert lumpy > _spread_step(d, n, i, o)
    decode = d.step_time(n, int(n * ctx), n)
    assert decode < lumpy < d.step_time(n + i, int(n * ctx + i), n)


def test_many_admissions_a_step_keep_the_spread_step():
    d = build_deployment("qwen3-14b", "h100-sxm")
    n, i, o = 1024, 128, 4  # 256 prompts a step: every step is full of prefill
    assert _lumpy_step(d, n, o, n * 130.0, n * 130.0, float(i), 64.5, engine_of(d).max_batched_tokens) == 0.0


def test_long_prompt_saturation_falls_and_short_prompts_do_not_move():
    d = build_deployment("qwen3-14b", "h100-sxm")
    budget = engine_of(d).max_batched_tokens
    thr, b = saturation(d, 4000, 200, served=False)
    n = math.ceil(b / d.pipeline_depth)
    assert thr < n / _spread_step(d, n, 4000, 200)  # below the evenly spread steady state
    thr_short, b_short = saturation(d, 217, 202, served=False)
    n_short = math.ceil(b_short / d.pipeline_depth)
    assert n_short / 202 * math.ceil(217 / (budget - n_short)) >= 1.0  # several admissions a step
    assert thr_short == pytest.approx(n_short / _spread_step(d, n_short, 217, 202))
