"""The gateway in front of a fleet: which replica a request goes to.

Three policies, named as a gateway names them (``TwinSpec.router``, ``--router``):

- ``round-robin``: request ``i`` (in send order, warmup included) goes to replica ``i mod N``;
- ``session``: session / prefix affinity, as a gateway with sticky sessions: every request of
  one conversation (``conversation_id``), else of one shared-prefix group (``prefix_group``),
  goes to the replica a fixed hash of that id picks, so a conversation's history stays in one
  replica's prefix cache; requests with neither go round-robin;
- ``least-outstanding``: the replica with the fewest requests routed to it and not yet
  finished (in its API server, waiting or running), the lowest index on ties.

The first two are decided from the arrival stream alone (:meth:`Router.replica_of`), so a
fleet can be split over processes or machines that each simulate their own replicas and get
the same answer; ``least-outstanding`` needs every replica's state at every arrival and runs
in one process (:attr:`Router.stream_decided` is False)::

    >>> r = Router("round-robin", 3)
    >>> [r.replica_of(i, None, None) for i in range(5)]
    [0, 1, 2, 0, 1]
    >>> s = Router("session", 4)
    >>> s.replica_of(10, 7, None) == s.replica_of(99, 7, None)
    True
"""

from __future__ import annotations

import heapq
from typing import Literal

from infermeter.errors import ConfigError
from infermeter.twin.state import set_state, state_of

RouterName = Literal["round-robin", "session", "least-outstanding"]
ROUTERS: tuple[str, ...] = ("round-robin", "session", "least-outstanding")
_M64 = (1 << 64) - 1


def mix64(x: int) -> int:
    """splitmix64's finalizer: a fixed, well-spread hash of an int (the same in every process)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


class Router:
    """A routing policy over ``replicas`` replicas; see the module docstring."""

    __slots__ = ("name", "replicas", "_out", "_heap")

    def __init__(self, name: str, replicas: int) -> None:
        if name not in ROUTERS:
            raise ConfigError(f"--router {name!r}: use one of {', '.join(ROUTERS)}")
        if replicas < 1:
            raise ConfigError(f"a fleet needs at least one replica, got {replicas}")
        self.name = name
        self.replicas = replicas
        self._out = [0] * replicas  # least-outstanding: requests routed and not finished
        self._heap = [(0, j) for j in range(replicas)]

    def __reduce__(self) -> tuple[object, ...]:  # checkpoints, fleet workers; both builds (twin.state)
        return (type(self), (self.name, self.replicas), state_of(self))

    def __setstate__(self, state: dict[str, object]) -> None:
        set_state(self, state)

    @property
    def stream_decided(self) -> bool:
        """True when the choice depends on the arrival stream alone (the fleet can be partitioned)."""
        return self.name != "least-outstanding"

    def replica_of(self, index: int, conversation_id: int | None, prefix_group: int | None) -> int:
        """The replica of the ``index``-th request sent (stream-decided policies only)."""
        n = self.replicas
        if n == 1:
            return 0
        if self.name == "session":
            if conversation_id is not None:
                return mix64(2 * conversation_id) % n
            if prefix_group is not None:
                return mix64(2 * prefix_group + 1) % n
        elif self.name != "round-robin":
            raise RuntimeError("least-outstanding routing depends on the replicas' state: use pick()")
        return index % n

    def pick(self, index: int, conversation_id: int | None, prefix_group: int | None) -> int:
        """The replica of the next request sent; ``least-outstanding`` counts it as outstanding there."""
        if self.name != "least-outstanding":
            return self.replica_of(index, conversation_id, prefix_group)
        heap, out = self._heap, self._out
        while True:  # lazily updated heap of (outstanding, replica)
            n, j = heap[0]
            if out[j] == n:
                break
            heapq.heappop(heap)
        out[j] = n + 1
        heapq.heapreplace(heap, (n + 1, j))
        return j

    def done(self, replica: int) -> None:
        """A request routed to ``replica`` finished (or was rejected): least-outstanding bookkeeping."""
        if self.name == "least-outstanding":
            out = self._out
            out[replica] -= 1
            heapq.heappush(self._heap, (out[replica], replica))

    def describe(self) -> dict[str, object]:
        return {"router": self.name, "replicas": self.replicas, "stream_decided": self.stream_decided}
