"""``--load sweep``: synchronous, then maximum throughput, then N open-loop rates in between.

The throughput-vs-latency curve of a server in one run. Step 0 is one
stream (the batch-size-1 latency case), step 1 a closed loop with
``throughput_concurrency`` streams (the most the server does), and the next
``rates`` steps are open loops at evenly spaced rates strictly between the two
measured request rates, each with its own warmup and stop condition::

    >>> rates_between(2.0, 10.0, 3)
    [4.0, 6.0, 8.0]
    >>> gen = SweepPlan(rates=3, arrival="constant").steps()
    >>> next(gen).name, gen.send({"request_throughput": 2.0}).name
    ('synchronous', 'throughput')
    >>> round(gen.send({"request_throughput": 10.0}).offered_rate, 6)
    4.0

When the throughput step is not faster than the synchronous one there is no
rate in between and the plan ends with a note saying so.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from infermeter.load.shapes import ConstantArrivalRate, ConstantConcurrency
from infermeter.load.steps import Step, StepGen


def rates_between(lo: float, hi: float, n: int) -> list[float]:
    """n rates evenly spaced strictly between lo and hi."""
    return [lo + (hi - lo) * i / (n + 1) for i in range(1, n + 1)]


class SweepPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["sweep"] = "sweep"
    rates: int = Field(5, ge=0, description="open-loop rates between synchronous and max throughput")
    arrival: Literal["constant", "poisson"] = "constant"
    throughput_concurrency: int = Field(256, gt=0, description="streams of the max-throughput step")

    def describe(self) -> str:
        return (f"sweep: synchronous, max throughput (concurrency {self.throughput_concurrency}), "
                f"{self.rates} {self.arrival} rates in between")

    def steps(self) -> StepGen:
        sync = yield Step(ConstantConcurrency(concurrency=1), "synchronous")
        top = yield Step(ConstantConcurrency(concurrency=self.throughput_concurrency), "throughput")
        lo, hi = sync.get("request_throughput") or 0.0, top.get("request_throughput") or 0.0
        if self.rates == 0:
            return {"rates": []}
        if not lo or hi <= lo:
            return {"rates": [], "notes": [f"max throughput {hi:.3g} req/s is not above synchronous {lo:.3g} req/s; "
                                           "no rate in between"]}
        rates = rates_between(lo, hi, self.rates)
        for r in rates:
            yield Step(ConstantArrivalRate(rate_per_s=r, arrival=self.arrival), "rate")
        return {"rates": rates}
