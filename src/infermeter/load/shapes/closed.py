"""``constant-vus``: a closed loop of N streams, each sending when its previous request ends.

    >>> s = ConstantConcurrency(concurrency=8)
    >>> s.open_loop, s.streams, s.describe()
    (False, 8, 'closed loop, concurrency 8')
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from infermeter.load.shapes.base import BaseShape


class ConstantConcurrency(BaseShape):
    """Closed loop: ``concurrency`` streams (k6's VUs)."""

    kind: Literal["constant-vus"] = "constant-vus"
    concurrency: int = Field(gt=0)

    @property
    def streams(self) -> int:
        return self.concurrency

    def describe(self) -> str:
        return f"closed loop, concurrency {self.concurrency}"
