"""The emulated server answers 400 (as vLLM does) for a request longer than the context."""

import asyncio

import aiohttp

from infermeter.engines.emulator.app import twin_backend
from infermeter.engines.emulator.server import make_app, serve


def test_too_long_request_is_a_400_before_streaming():
    async def go():
        backend = twin_backend("llama-3.1-8b", "h100-sxm", max_model_len=64, speedup=100)
        async with serve(make_app(backend, count_tokens=lambda t: len(t.split()))) as url:
            async with aiohttp.ClientSession() as s:
                body = {"model": "m", "stream": True, "max_tokens": 60, "messages": [{"role": "user", "content": "w " * 10}]}
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    too_long = (r.status, await r.json())
                body["max_tokens"] = 4
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    ok = (r.status, await r.text())
        await backend.close()
        return too_long, ok

    (status, err), (ok_status, ok_body) = asyncio.run(go())
    assert status == 400 and "maximum context length is 64" in err["error"]["message"]
    assert ok_status == 200 and "[DONE]" in ok_body
