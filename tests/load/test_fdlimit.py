"""The client's open-file limit: the in-flight bound a run plans, raised where allowed, refused where it cannot fit."""

import resource

import pytest

from infermeter.errors import UserError
from infermeter.load import fdlimit
from infermeter.load.fdlimit import InFlight, in_flight_bound, prepare_fd_limit
from infermeter.load.runner import Limits
from infermeter.load.shapes import ConstantArrivalRate, ConstantConcurrency


@pytest.mark.parametrize("shape,limits,count,certain", [
    (ConstantConcurrency(concurrency=200), Limits(), 200, True),
    (ConstantConcurrency(concurrency=200), Limits(max_concurrency=50), 50, True),
    (ConstantConcurrency(concurrency=200), Limits(requests=30, warmup=5), 35, True),
    (ConstantArrivalRate(rate_per_s=40.0), Limits(max_concurrency=64), 64, True),
    (ConstantArrivalRate(rate_per_s=40.0), Limits(), 400, False),  # 40 req/s x 10 s
    (ConstantArrivalRate(rate_per_s=40.0), Limits(requests=100), 100, False),
])
def test_the_in_flight_bound_follows_the_load(shape, limits, count, certain):
    b = in_flight_bound(shape, limits)
    assert (b.count, b.certain) == (count, certain)


class _Limits:
    """A fake RLIMIT_NOFILE: getrlimit/setrlimit on a pair, setrlimit refusing what the kernel would."""

    def __init__(self, soft, hard):
        self.value = (soft, hard)

    def get(self, which):
        return self.value

    def set(self, which, value):
        if value[0] > value[1]:
            raise ValueError("not allowed to raise maximum limit")
        self.value = value


@pytest.fixture
def fake_rlimit(monkeypatch):
    def make(soft, hard):
        lim = _Limits(soft, hard)
        monkeypatch.setattr(resource, "getrlimit", lim.get)
        monkeypatch.setattr(resource, "setrlimit", lim.set)
        monkeypatch.setattr(fdlimit, "open_fds", lambda: 10)
        monkeypatch.setattr(fdlimit, "_first_soft", None)
        return lim
    return make


def test_the_soft_limit_is_raised_toward_the_hard_one(fake_rlimit):
    lim = fake_rlimit(64, 4096)
    info, warning = prepare_fd_limit(InFlight(200, "--concurrency 200", True))
    assert lim.value == (4096, 4096) and warning is None
    assert info["soft"] == 4096 and info["raised_from"] == 64 and info["need"] == 200 + 10 + fdlimit.FD_HEADROOM


def test_a_certain_bound_that_cannot_fit_is_one_line_naming_the_limit(fake_rlimit):
    fake_rlimit(64, 64)
    with pytest.raises(UserError) as e:
        prepare_fd_limit(InFlight(200, "--concurrency 200", True))
    msg = str(e.value)
    assert "\n" not in msg and "--concurrency 200" in msg and "RLIMIT_NOFILE" in msg and "ulimit -n" in msg
    assert "is 64" in msg and "only root" in msg


def test_workers_split_the_sockets_and_the_refusal_says_how_many(fake_rlimit):
    fake_rlimit(256, 256)
    info, _ = prepare_fd_limit(InFlight(400, "--concurrency 400", True), workers=2)
    assert info["need"] == 200 + 10 + fdlimit.FD_HEADROOM
    with pytest.raises(UserError, match=r"--workers 2\b"):
        prepare_fd_limit(InFlight(400, "--concurrency 400", True))  # 214 spare per process: two of them


def test_a_plausible_bound_that_may_not_fit_is_a_warning(fake_rlimit):
    fake_rlimit(1024, 1024)
    info, warning = prepare_fd_limit(InFlight(5000, "an open loop at 500 req/s with requests lasting 10 s", False))
    assert warning.startswith("fd_limit: ") and "--max-concurrency" in warning and "client_fd_limit" in warning
    assert info["soft"] == 1024 and info["raised_from"] is None
