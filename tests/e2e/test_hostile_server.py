"""``infermeter run`` against servers that lie or compress, started here on 127.0.0.1: the run completes, its
records convert to parquet, the summary names what was wrong, and ``summarize`` recovers a run an older client
left with a claim it could not store."""

import asyncio
import json
import threading
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from aiohttp import web

from infermeter.records.store import JOURNAL, RUN


def _chunk(delta, finish=None):
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"


class FakeServer:
    """An OpenAI-shaped server in a thread: /v1/models lists 'm'; chat answers with ``body(request)``."""

    def __init__(self, body, encoding=None):
        self.body, self.encoding = body, encoding
        self.accept = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self):
        self._thread.start()
        assert self._ready.wait(30)
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _serve(self):
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._main())

    async def _main(self):
        async def models(request):
            return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

        async def chat(request):
            self.accept.append(request.headers.get("Accept-Encoding"))
            headers = {"Content-Type": "text/event-stream"}
            data = self.body().encode()
            if self.encoding:
                headers["Content-Encoding"] = self.encoding
                z = zlib.compressobj(wbits=31)
                data = z.compress(data) + z.flush()
            resp = web.StreamResponse(headers=headers)
            await resp.prepare(request)
            await resp.write(data)
            return resp

        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()


def lying(claim):
    return lambda: (_chunk({"role": "assistant", "content": ""}) + _chunk({"content": "one"}) + _chunk({"content": " two"})
                    + _chunk({}, "length") + f'data: {{"choices":[],"usage":{{"prompt_tokens":4,"completion_tokens":{claim}}}}}\n\n'
                    + "data: [DONE]\n\n")


def _run(cli, url, out, n=6):
    return cli("run", "--url", url, "--concurrency", "2", "--requests", str(n), "--output-tokens", "2",
               "--no-calibrate", "--out", str(out), "--json")


@pytest.mark.parametrize("claim", [2**31, 4_294_967_295, 20_000_000])
def test_a_lying_usage_is_flagged_and_the_stream_counted(claim, cli, tmp_path):
    out = tmp_path / "run"
    with FakeServer(lying(claim)) as srv:
        p = _run(cli, srv.url, out)
    assert p.returncode == 0, p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] == 6 and s["usage_implausible"] == 6 and s["total_output_tokens"] == 12
    assert any(w.startswith("usage_implausible") for w in s["warnings"])
    t = pq.read_table(out / "requests.parquet")
    assert t.schema.field("chunk_tokens").type == pa.list_(pa.int64())
    assert set(t.column("usage_source").to_pylist()) == {"rejected"}
    assert srv.accept and set(srv.accept) == {"identity"}


def test_a_server_that_sends_only_done_fails_as_empty_response(cli, tmp_path):
    out = tmp_path / "run"
    with FakeServer(lambda: "data: [DONE]\n\n") as srv:
        p = _run(cli, srv.url, out, n=4)
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] == 0 and s["errors"] == {"empty_response": 4}, p.stderr
    assert "without a token" in s["error_messages"]["empty_response"]


def test_a_gzip_proxy_is_read(cli, tmp_path):
    out = tmp_path / "run"
    with FakeServer(lying(2), encoding="gzip") as srv:
        p = _run(cli, srv.url, out, n=4)
    assert p.returncode == 0, p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] == 4 and s["total_output_tokens"] == 8 and s["usage_implausible"] == 0


def test_summarize_recovers_a_journal_with_a_claim_an_older_client_kept(cli, tmp_path):
    out = tmp_path / "old"
    with FakeServer(lying(3)) as srv:
        assert _run(cli, srv.url, out, n=4).returncode == 0
    rows = pq.read_table(out / "requests.parquet").to_pylist()
    for r in rows:  # as the client before the bound wrote them: the claim kept, spread over the chunks
        r["usage_source"], r["completion_tokens"], r["chunk_tokens"] = "server", 4_294_967_295, [1, 4_294_967_294]
    (out / "requests.parquet").unlink()
    (out / "summary.json").unlink()
    (out / JOURNAL).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert (out / RUN).exists()
    p = cli("summarize", str(out), "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["completed"] == 4 and s["itl_ms"]["count"] == 4 * 4_294_967_294
