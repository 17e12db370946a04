"""A server that wants an API key: one line naming the status and what to pass, results kept."""

import asyncio
import json

import pytest
from aiohttp import web

from infermeter.engines.emulator.process import EmulatorProcess
from infermeter.engines.emulator.server import serve
from infermeter.errors import UserError
from infermeter.load.runner import Limits, Runner
from infermeter.load.shapes import ConstantConcurrency
from infermeter.measure import Measurement, RunConfig


@pytest.fixture(scope="module")
def keyed():
    with EmulatorProcess(["--ttft-ms", "5", "--itl-ms", "1", "--api-key", "sk-right"]) as emu:
        yield emu


@pytest.mark.parametrize("extra", [[], ["--model", "infermeter-emulator"]], ids=["no-model", "with-model"])
def test_no_key_is_one_line_naming_401_and_the_flag(keyed, extra, cli, tmp_path):
    p = cli("run", "--url", keyed.base_url, *extra, "--requests", "20", "--out", str(tmp_path / "x"))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "HTTP 401 Unauthorized" in lines[0] and "--api-key" in lines[0] and "OPENAI_API_KEY" in lines[0]


def test_a_wrong_key_says_so_and_the_right_one_runs(keyed, cli, tmp_path):
    p = cli("run", "--url", keyed.base_url, "--requests", "5", "--out", str(tmp_path / "w"),
            env={"OPENAI_API_KEY": "sk-wrong"})
    assert p.returncode == 2 and "refused the API key" in p.stderr and "sk-wrong" not in p.stderr
    p = cli("run", "--url", keyed.base_url, "--requests", "5", "--output-tokens", "3", "--out", str(tmp_path / "r"),
            env={"OPENAI_API_KEY": "sk-right"})
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["completed"] == 5


def _open_models_closed_completions() -> web.Application:
    async def models(request):
        return web.json_response({"data": [{"id": "m"}]})

    async def complete(request):
        await request.read()
        return web.json_response({"error": "Unauthorized"}, status=401)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", complete)
    return app


def test_401_on_the_first_requests_stops_the_run_and_keeps_what_was_recorded(tmp_path, cli):
    out = tmp_path / "a"

    async def main():
        async with serve(_open_models_closed_completions()) as url:
            m = Measurement(RunConfig(url=url, concurrency=4, requests=500, out=str(out), calibrate=False, scrape=False))
            with pytest.raises(UserError) as e:
                await m.run()
            return str(e.value)

    msg = asyncio.run(main())
    assert "HTTP 401 Unauthorized" in msg and "--api-key" in msg and str(out) in msg and "\n" not in msg
    s = json.loads((out / "summary.json").read_text())
    assert s["errors"] == {"http_4xx": s["failed"]} and 1 <= s["failed"] <= 4  # stopped, not 500 errors
    run = json.loads((out / "run.json").read_text())
    assert run["runtime"]["halted"] == "HTTP 401 on the first requests" and not run["runtime"]["interrupted"]
    # the console's error table names the status and the message
    p = cli("summarize", str(out))
    row = next(line for line in p.stdout.splitlines() if "http_4xx" in line)
    assert "401" in row.split("│")[2] and "HTTP 401 Unauthorized" in p.stdout


def test_a_401_after_requests_succeeded_is_an_ordinary_error():
    from infermeter.records.record import RequestRecord

    n = 0

    async def send(spec, rec: RequestRecord):
        nonlocal n
        n += 1
        rec.sent_at = rec.ended_at = 0.0
        if n == 1:
            rec.outcome = "ok"
        else:
            rec.outcome, rec.error_class, rec.http_status = "error", "http_4xx", 401

    records = []
    runner = Runner(send=send, specs=iter(range(10**6)), shape=ConstantConcurrency(concurrency=1),
                    limits=Limits(requests=30), clock=lambda: 0.0, on_record=records.append)
    stats = asyncio.run(runner.run())
    assert len(records) == 30 and stats.halted is None
