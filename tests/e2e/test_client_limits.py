"""Client-side limits are the client's: the open-file limit (checked, raised, EMFILE classed as the
client's), a --model the server does not serve, and a run whose first requests are all refused."""

import asyncio
import errno
import json
import os
import resource
import sys

import aiohttp.connector
import pytest
from aiohttp import web

from infermeter.engines.emulator.process import EmulatorProcess
from infermeter.engines.emulator.server import serve
from infermeter.errors import UserError
from infermeter.load.runner import EARLY_4XX
from infermeter.measure import Measurement, RunConfig

BIN = os.path.join(os.path.dirname(sys.executable), "infermeter")


@pytest.fixture(scope="module")
def emu():
    with EmulatorProcess(["--ttft-ms", "2", "--itl-ms", "1"]) as e:
        yield e


def _limited(soft: int, hard: int):
    def pre() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return pre


def _run(args, soft, hard, timeout=300):
    import subprocess

    env = dict(os.environ)
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run([BIN, "run", *args], capture_output=True, text=True, timeout=timeout, env=env,
                          preexec_fn=_limited(soft, hard))


def test_a_concurrency_the_fd_limit_cannot_hold_is_refused_before_the_run(emu, tmp_path):
    out = tmp_path / "r"
    p = _run(["--url", emu.base_url, "--concurrency", "200", "--requests", "400", "--output-tokens", "2",
              "--out", str(out), "--no-calibrate"], 64, 64)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "--concurrency 200" in lines[0] and "RLIMIT_NOFILE" in lines[0] and "ulimit -n" in lines[0]
    assert not out.exists()  # refused before any load: no run directory claims a start


def test_with_a_higher_hard_limit_the_soft_one_is_raised_and_the_run_holds(emu, tmp_path):
    out = tmp_path / "r"
    p = _run(["--url", emu.base_url, "--concurrency", "200", "--requests", "400", "--output-tokens", "2",
              "--out", str(out), "--no-calibrate", "--no-scrape"], 64, 1024)
    assert p.returncode == 0, p.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["fd_limit"]["raised_from"] == 64 and run["fd_limit"]["soft"] == 1024
    assert run["fd_limit"]["in_flight"] == 200
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] == 400 and s["errors"] == {}
    assert s["client"]["fd_limit"]["soft"] == 1024


@pytest.mark.parametrize("http_client", ["aiohttp", "fast"])
def test_emfile_on_connect_is_the_clients_failure_and_invalidates_the_run(emu, tmp_path, monkeypatch, http_client):
    """EMFILE injected where the client opens the socket (aiohttp's, or the fast client's connect):
    recorded client_fd_limit, never connect_error."""
    monkeypatch.setenv("INFERMETER_HTTP_CLIENT", http_client)
    calls = {"n": 0}
    if http_client == "aiohttp":
        real = aiohttp.connector.aiohappyeyeballs.start_connection

        async def start_connection(*a, **kw):
            calls["n"] += 1
            if calls["n"] in (2, 3):  # the first is the model discovery's
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
            return await real(*a, **kw)

        monkeypatch.setattr(aiohttp.connector.aiohappyeyeballs, "start_connection", start_connection)
    else:
        real_cc = asyncio.BaseEventLoop.create_connection

        async def create_connection(self, factory, host=None, *a, **kw):
            if host is not None:  # the fast client's (aiohttp hands over a connected socket)
                calls["n"] += 1
                if calls["n"] in (1, 2):
                    raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
            return await real_cc(self, factory, host, *a, **kw)

        monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", create_connection)
    out = tmp_path / "r"
    m = Measurement(RunConfig(url=emu.base_url, concurrency=2, requests=20, output_tokens="2", out=str(out),
                              calibrate=False, scrape=False))
    s = asyncio.run(m.run()).summary
    assert calls["n"] >= 4  # the client really connected through the patched path
    assert s["errors"] == {"client_fd_limit": 2} and s["completed"] == 18
    assert s["valid"] is False and any(r.startswith("client_fd_limit") for r in s["invalid_reasons"])
    assert "Too many open files" in s["error_messages"]["client_fd_limit"]
    runtime = json.loads((out / "run.json").read_text())["runtime"]  # how the requests were sent
    assert runtime["http_client"] == http_client and runtime["event_loop"] == "asyncio"


def test_a_model_the_server_does_not_list_is_one_line_with_did_you_mean(emu, tmp_path, cli):
    out = tmp_path / "r"
    p = cli("run", "--url", emu.base_url, "--model", "infermeter-emulatr", "--requests", "5", "--out", str(out))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "--model 'infermeter-emulatr'" in lines[0] and "did you mean 'infermeter-emulator'" in lines[0]
    assert not out.exists()


def _app(models_status: int = 200, completion_status: int = 404) -> web.Application:
    async def models(request):
        if models_status != 200:
            return web.Response(status=models_status, text="no such route")
        return web.json_response({"object": "list", "data": [{"id": "smollm2", "object": "model"}]})

    async def complete(request):
        body = await request.json()
        msg = (f"The model `{body['model']}` does not exist. Valid aliases: smollm2 "
               f"(sent {request.headers.get('Authorization')})")
        return web.json_response({"object": "error", "message": msg, "type": "NotFoundError", "code": 404},
                                 status=completion_status)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", complete)
    return app


def test_a_run_whose_first_requests_all_get_one_404_stops_with_its_message(tmp_path):
    out = tmp_path / "a"

    async def main():
        async with serve(_app(models_status=404)) as url:  # no model list: --model is not judged
            m = Measurement(RunConfig(url=url, model="smollm", concurrency=4, requests=500, out=str(out),
                                      calibrate=False, scrape=False, api_key="sk-canary-0123456789"))
            with pytest.raises(UserError) as e:
                await m.run()
            return str(e.value)

    msg = asyncio.run(main())
    assert "\n" not in msg and "HTTP 404" in msg and "does not exist" in msg and str(out) in msg
    assert "sk-canary" not in msg
    s = json.loads((out / "summary.json").read_text())
    assert s["errors"] == {"http_4xx": s["failed"]} and EARLY_4XX <= s["failed"] < EARLY_4XX + 4  # not 500
    run = json.loads((out / "run.json").read_text())
    assert run["runtime"]["halted"] == f"HTTP 404 on the first {EARLY_4XX} requests"


def test_the_cli_exits_2_after_the_early_stop_and_keeps_the_summary(tmp_path):
    out = tmp_path / "c"

    async def main():
        async with serve(_app()) as url:
            env = dict(os.environ)
            env.pop("OPENAI_API_KEY", None)
            # the listed model passes the check; the server still refuses every completion
            p = await asyncio.create_subprocess_exec(
                BIN, "run", "--url", url, "--model", "smollm2", "--concurrency", "2", "--requests", "200",
                "--out", str(out), "--no-calibrate", "--no-scrape", env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            _, err = await asyncio.wait_for(p.communicate(), 300)
            return p.returncode, err.decode()

    rc, err = asyncio.run(main())
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "does not exist" in lines[0], err
    assert json.loads((out / "summary.json").read_text())["failed"] >= EARLY_4XX


def test_the_embedded_emulator_starts_under_the_raised_limit_too(tmp_path, monkeypatch):
    """No --url: the limit is raised before the emulator starts (it holds a socket per request too)."""
    from infermeter.engines.emulator import process
    from infermeter.load import fdlimit

    seen = []
    enter = process.EmulatorProcess.__enter__

    def spy(self):
        seen.append(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        return enter(self)

    monkeypatch.setattr(process.EmulatorProcess, "__enter__", spy)
    monkeypatch.setattr(fdlimit, "_first_soft", None)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, 256)
    if hard != resource.RLIM_INFINITY and hard <= low:
        pytest.skip(f"the hard open-file limit here is {hard}: nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        m = Measurement(RunConfig(concurrency=2, requests=4, output_tokens="2", out=str(tmp_path / "e"),
                                  calibrate=False, scrape=False))
        res = asyncio.run(m.run())
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert seen and seen[0] > low
    assert res.run["fd_limit"]["raised_from"] == low and res.summary["completed"] == 4


def test_a_sweep_whose_throughput_step_cannot_fit_is_refused_before_its_first_step(emu, tmp_path):
    out = tmp_path / "s"
    p = _run(["--url", emu.base_url, "--load", "sweep", "--concurrency", "200", "--requests", "400",
              "--output-tokens", "2", "--out", str(out), "--no-calibrate", "--no-scrape"], 64, 64)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "--concurrency 200" in p.stderr, p.stderr
    assert not (out / "steps").exists()  # no step ran
