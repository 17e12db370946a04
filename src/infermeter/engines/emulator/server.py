"""The emulated OpenAI-compatible server (aiohttp), driven by a timing backend.

Serves ``POST /v1/chat/completions`` and ``/v1/completions`` (streaming with
usage, or not), ``GET /v1/models``, ``/health``, ``POST /reset_prefix_cache`` (vLLM's dev
endpoint) and, when the backend has one, ``/metrics``. With ``api_key`` the ``/v1`` routes answer 401 without
``Authorization: Bearer KEY``, as vLLM's ``--api-key`` does. Token timing comes from a :class:`~infermeter.engines.emulator.simple.Backend`;
faults from a :class:`~infermeter.engines.emulator.faults.FaultPlan`::

    app = make_app(SimpleBackend(ttft_s=0.05, itl_s=0.01))
    async with serve(app, port=0) as base_url: ...   # a free port on 127.0.0.1

Prompt tokens are counted with ``count_tokens`` (default: the workload's
default tokenizer when available, else about 4 characters per token); the
output is the word " tok" repeated, one word per token. With a :class:`ThinkingPlan`
(``--reasoning-tokens``) the first tokens of each request are a reasoning model's thinking,
streamed as ``reasoning_content`` (``engines.emulator.reasoning``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from infermeter.engines.emulator.faults import FaultPlan
from infermeter.engines.emulator.reasoning import ThinkingPlan, split
from infermeter.engines.emulator.simple import Backend, GenRequest

TOKEN_TEXT = " tok"
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def approx_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def _prompt_text(body: dict[str, Any], chat: bool) -> str:
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise web.HTTPBadRequest(text=json.dumps({"error": {"message": "'messages' must be a non-empty list"}}),
                                     content_type="application/json")
        parts = []
        for m in msgs:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, list):
                c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
            parts.append(str(c or ""))
        return "\n".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        prompt = "".join(str(p) for p in prompt)
    if not isinstance(prompt, str):
        raise web.HTTPBadRequest(text=json.dumps({"error": {"message": "'prompt' must be a string"}}),
                                 content_type="application/json")
    return prompt


def _json_error(status: int, msg: str) -> web.Response:
    return web.json_response({"error": {"message": msg, "type": "emulated", "code": status}}, status=status)


class EmulatorServer:
    def __init__(self, backend: Backend, *, faults: FaultPlan | None = None,
                 count_tokens: Callable[[str], int] | None = None, thinking: ThinkingPlan | None = None) -> None:
        self.backend = backend
        self.thinking = thinking  # a reasoning model's thinking tokens per request (engines.emulator.reasoning)
        self.faults = faults or FaultPlan()
        self.count_tokens = count_tokens or approx_tokens
        self._ids = 0
        self._prerendered: dict[tuple[Any, ...], bytes] = {}
        self.created = int(time.time())

    # -- handlers -------------------------------------------------------------------------------
    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.backend.model_name, "object": "model", "created": self.created, "owned_by": "infermeter",
             "infermeter": self.backend.describe()}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        text = self.backend.metrics_text()
        if text is None:
            raise web.HTTPNotFound(text="this backend exports no metrics")
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        """``POST /reset_prefix_cache`` as vLLM's dev endpoint (campaigns call it between runs); 409 while
        requests hold cache blocks (vLLM logs that and leaves the cache as it is)."""
        reset = getattr(self.backend, "reset_prefix_cache", None)
        if reset is None:
            raise web.HTTPNotFound(text="this backend has no prefix cache")
        if not reset():
            return _json_error(409, "requests are running; the prefix cache was not reset")
        return web.json_response({"reset": True})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=False)

    async def _complete(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return _json_error(400, "request body is not JSON")
        if not isinstance(body, dict):
            return _json_error(400, "request body must be a JSON object")
        try:
            text = _prompt_text(body, chat)
        except web.HTTPBadRequest as exc:
            return web.Response(status=400, text=exc.text, content_type="application/json")
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens", 16))
        if not isinstance(max_tokens, int) or max_tokens < 0:
            return _json_error(400, "'max_tokens' must be a non-negative integer")
        self._ids += 1
        rid = self._ids
        fault = self.faults.draw()
        if fault in ("429", "500", "503"):
            return _json_error(int(fault), f"injected fault {fault}")
        if fault == "reset":
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError  # nothing more to send on a dead connection
        req = GenRequest(prompt_tokens=self.count_tokens(text), max_tokens=max_tokens,
                         ignore_eos=bool(body.get("ignore_eos")), prompt_text=text, request_id=rid, extra=body)
        check = getattr(self.backend, "check", None)
        problem = check(req) if check is not None else None
        if problem:
            return _json_error(400, problem)
        if fault == "slow_first_byte":
            await asyncio.sleep(self.faults.slow_s)
        model = body.get("model") or self.backend.model_name
        think = min(self.thinking.draw(), max_tokens) if self.thinking is not None else 0
        if body.get("stream"):
            return await self._stream(request, req, chat, model, rid, fault,
                                      bool((body.get("stream_options") or {}).get("include_usage")), think)
        n = 0
        async for k in self.backend.generate(req):
            n += k
        r = min(n, think)
        content = TOKEN_TEXT * (n - r)
        message = {"role": "assistant", "content": content} | ({"reasoning_content": TOKEN_TEXT * r} if r else {})
        choice = ({"index": 0, "message": message, "finish_reason": "length"} if chat
                  else {"index": 0, "text": (f"<think>{TOKEN_TEXT * r}</think>" if r else "") + content,
                        "finish_reason": "length"})
        return web.json_response({"id": f"cmpl-{rid}", "object": "chat.completion" if chat else "text_completion",
                                  "created": int(time.time()), "model": model, "choices": [choice],
                                  "usage": {"prompt_tokens": req.prompt_tokens, "completion_tokens": n,
                                            "total_tokens": req.prompt_tokens + n}})

    async def _stream(self, request: web.Request, req: GenRequest, chat: bool, model: str, rid: int,
                      fault: str | None, include_usage: bool, think: int = 0) -> web.StreamResponse:
        zero = getattr(self.backend, "zero_delay", False) and fault is None
        key = (chat, model, req.max_tokens, req.prompt_tokens, include_usage, think)
        if zero and key in self._prerendered:  # zero-delay mode: the same bytes every time
            return web.Response(body=self._prerendered[key], headers=_SSE_HEADERS)
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        await resp.prepare(request)
        head = f'{{"id":"cmpl-{rid}","object":"{"chat.completion.chunk" if chat else "text_completion"}","created":{self.created},"model":{json.dumps(model)},"choices":['
        if fault == "stall":
            await asyncio.sleep(self.faults.stall_s)
        n = 0
        buf: list[bytes] = []
        if chat:
            buf.append(f'data: {head}{{"index":0,"delta":{{"role":"assistant","content":""}},"finish_reason":null}}]}}\n\n'.encode())
        async for k in self.backend.generate(req):
            if fault == "malformed" and n >= 1:
                await resp.write(b"".join(buf) + b"data: {this is not json\n\n")
                return resp
            r, a = split(k, n, think) if think else (0, k)
            if r:  # thinking: reasoning_content (chat) or inside <think> tags (completions)
                text = TOKEN_TEXT * r
                if not chat:
                    text = ("<think>" if n == 0 else "") + text + ("</think>" if n + r == think else "")
                delta = f'"delta":{{"reasoning_content":{json.dumps(text)}}}' if chat else f'"text":{json.dumps(text)}'
                n += r
                fin = '"length"' if n >= req.max_tokens else "null"
                buf.append(f"data: {head}{{\"index\":0,{delta},\"finish_reason\":{fin}}}]}}\n\n".encode())
            if a:
                content = json.dumps(TOKEN_TEXT * a)
                delta = f'"delta":{{"content":{content}}}' if chat else f'"text":{content}'
                n += a
                fin = '"length"' if n >= req.max_tokens else "null"
                buf.append(f"data: {head}{{\"index\":0,{delta},\"finish_reason\":{fin}}}]}}\n\n".encode())
            if fault == "cut" and n >= self.faults.cut_after:
                await resp.write(b"".join(buf))
                return resp  # ends the body without a finish: a cut stream
            if not zero:
                await resp.write(b"".join(buf))
                buf.clear()
        if n == 0 and chat:
            buf.append(f'data: {head}{{"index":0,"delta":{{}},"finish_reason":"length"}}]}}\n\n'.encode())
        if include_usage:
            usage = {"prompt_tokens": req.prompt_tokens, "completion_tokens": n, "total_tokens": req.prompt_tokens + n}
            buf.append(f"data: {head}],\"usage\":{json.dumps(usage)}}}\n\n".encode())
        buf.append(b"data: [DONE]\n\n")
        if zero and len(self._prerendered) < 256:
            self._prerendered[key] = b"".join(buf)
        await resp.write(b"".join(buf))
        await resp.write_eof()
        return resp


EMULATOR_KEY = web.AppKey("emulator", EmulatorServer)


def require_key(api_key: str) -> Middleware:
    """Middleware: /v1 routes need ``Authorization: Bearer KEY`` (vLLM's --api-key: 401 otherwise)."""
    expected = f"Bearer {api_key}"

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/v1") and request.headers.get("Authorization") != expected:
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check


def make_app(backend: Backend, *, faults: FaultPlan | None = None,
             count_tokens: Callable[[str], int] | None = None, api_key: str | None = None,
             thinking: ThinkingPlan | None = None) -> web.Application:
    srv = EmulatorServer(backend, faults=faults, count_tokens=count_tokens, thinking=thinking)
    app = web.Application(client_max_size=256 * 1024 * 1024,
                          middlewares=[require_key(api_key)] if api_key else [])
    app[EMULATOR_KEY] = srv
    app.router.add_get("/v1/models", srv.models)
    app.router.add_get("/health", srv.health)
    app.router.add_get("/metrics", srv.metrics)
    app.router.add_post("/reset_prefix_cache", srv.reset_prefix_cache)
    app.router.add_post("/v1/chat/completions", srv.chat)
    app.router.add_post("/v1/completions", srv.completions)
    return app


@contextlib.asynccontextmanager
async def serve(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Run ``app`` on host:port (0 = a free port) for the block; yields the base URL."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    actual = int(runner.addresses[0][1])  # the port bound
    try:
        yield f"http://{host}:{actual}"
    finally:
        await runner.cleanup()
