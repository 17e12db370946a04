"""Does scraping a huge ``/metrics`` distort what the run measures?

A fake server in its own process streams chat completions (``--ttft-ms`` to the first token,
then ``--tokens`` tokens ``--itl-ms`` apart: E2E about 100 ms) and serves a ``/metrics`` of
``--series`` series (about 65 bytes each: 100,000 is 6.5 MB) beside a few vLLM gauges, with
labels that change on every scrape under ``--churn``. The same closed-loop run
(``infermeter run``'s :class:`~infermeter.measure.Measurement`, scraping every
``--scrape-interval``) goes against a server whose ``/metrics`` holds only the vLLM gauges and
against the heavy one, alternating, ``--repeats`` times each. It prints, for each: completed requests, E2E p50/p90, the
scraper's own cost (``server_metrics.scrape``) and the verdict's scrape findings, then the
ratio of the median E2E p90s, heavy / light. Done when the ratio is within 1.5, or the heavy run names why not
(``scrape_heavy``).

Figures are for this machine at this moment: compare the two runs of one invocation.

    .venv/bin/python benchmarks/scrape_interference.py [--series 100000] [--seconds 10] [--churn] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import resource
import socket
import statistics
import tempfile
import time
import urllib.request
from typing import Any

from infermeter.measure import Measurement, RunConfig


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(port: int, series: int, churn: bool, ttft_ms: float, itl_ms: float, tokens: int, variants: int) -> None:
    """The fake server (runs in a child process)."""
    from aiohttp import web

    gauges = ('vllm:num_requests_running{engine="0",model_name="fake"} 1\n'
              'vllm:num_requests_waiting{engine="0",model_name="fake"} 0\n'
              'vllm:kv_cache_usage_perc{engine="0",model_name="fake"} 0.1\n')
    def body(gen: int) -> bytes:
        junk = "".join(f'app_request_bytes{{route="/r{i}",pod="p{gen}",code="200"}} {i}.5\n' for i in range(series))
        return ("# TYPE app_request_bytes gauge\n" + junk + gauges).encode()

    # pre-rendered, so serving a body costs the server's loop nothing; with churn every scrape of the
    # run gets labels it has not seen (``variants`` of them, one per scrape)
    bodies = [body(g) for g in range(variants if churn else 1)]
    state = {"scrapes": 0}

    async def metrics(_: web.Request) -> web.Response:
        state["scrapes"] += 1
        return web.Response(body=bodies[(state["scrapes"] - 1) % len(bodies)], content_type="text/plain")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(ttft_ms / 1000)
        for i in range(tokens):
            if i:
                await asyncio.sleep(itl_ms / 1000)
            chunk = {"id": "x", "object": "chat.completion.chunk", "model": "fake",
                     "choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": None}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        done = {"id": "x", "object": "chat.completion.chunk", "model": "fake",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
        usage = {"id": "x", "object": "chat.completion.chunk", "model": "fake", "choices": [],
                 "usage": {"prompt_tokens": 16, "completion_tokens": tokens, "total_tokens": 16 + tokens}}
        await resp.write(b"data: " + json.dumps(done).encode() + b"\n\ndata: " + json.dumps(usage).encode()
                         + b"\n\ndata: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=True)


class FakeServer:
    def __init__(self, series: int, churn: bool, ttft_ms: float, itl_ms: float, tokens: int, variants: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = mp.get_context("spawn").Process(target=serve, daemon=True,
                                                    args=(self.port, series, churn, ttft_ms, itl_ms, tokens, variants))

    def __enter__(self) -> FakeServer:
        self.proc.start()
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(self.url + "/v1/models", timeout=1).read()
                return self
            except OSError:
                if time.monotonic() > deadline or not self.proc.is_alive():
                    raise
                time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.join(10)


def one_run(url: str, out: str, args: argparse.Namespace) -> dict[str, Any]:
    cfg = RunConfig(url=url, model="fake", concurrency=args.concurrency, duration_s=args.seconds,
                    input_tokens="16", output_tokens=str(args.tokens), scrape_interval_s=args.scrape_interval,
                    calibrate=False, history=False, gpu=False, out=out)
    return asyncio.run(Measurement(cfg).run()).summary


def row(name: str, s: dict[str, Any]) -> float | None:
    e2e = s.get("e2e_ms") or {}
    sc = (s.get("server_metrics") or {}).get("scrape") or {}
    codes = [w.split(":")[0] for w in s.get("warnings", []) if w.startswith("scrape_")]
    p90 = e2e.get("p90")
    fmt = lambda v, spec=".1f": "n/a" if v is None else format(v, spec)  # noqa: E731
    print(f"{name:>6}: completed {s.get('completed')}, E2E p50 {fmt(e2e.get('p50'))} ms, p90 {fmt(p90)} ms; "
          f"scrapes {sc.get('count')}, {fmt((sc.get('bytes_max') or 0) / 1e6, '.2f')} MB max, "
          f"wall {fmt(sc.get('duration_ms_mean'), '.0f')}/{fmt(sc.get('duration_ms_max'), '.0f')} ms mean/max, "
          f"CPU {fmt(sc.get('cpu_ms_mean'), '.0f')} ms/scrape ({fmt((sc.get('cpu_share') or 0) * 100, '.0f')}% of a core), "
          f"series kept {sc.get('series_kept')}, dropped/scrape {sc.get('series_dropped_max')}, "
          f"truncated {sc.get('truncated')}; valid {s.get('valid')}; findings {codes or '-'}")
    return float(p90) if isinstance(p90, (int, float)) else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=100_000, help="extra series in the heavy /metrics")
    ap.add_argument("--churn", action="store_true", help="labels of the extra series change every scrape")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=1.0)
    ap.add_argument("--scrape-interval", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3, help="light/heavy pairs, alternating")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="infermeter-scrape-")
    figures: dict[str, list[float]] = {"light": [], "heavy": []}
    variants = int(args.seconds / args.scrape_interval) + 8
    with FakeServer(0, False, args.ttft_ms, args.itl_ms, args.tokens, 1) as light_srv, \
            FakeServer(args.series, args.churn, args.ttft_ms, args.itl_ms, args.tokens, variants) as heavy_srv:
        for name, srv in (("light", light_srv), ("heavy", heavy_srv)):
            size = len(urllib.request.urlopen(srv.url + "/metrics").read())
            print(f"{name}: /metrics {size / 1e6:.2f} MB ({args.series if name == 'heavy' else 0} extra series"
                  f"{', churning' if args.churn and name == 'heavy' else ''})")
        for k in range(args.repeats):  # alternate, so a change in the machine's load hits both alike
            for name, srv in (("light", light_srv), ("heavy", heavy_srv)):
                p90 = row(name, one_run(srv.url, f"{tmp}/{name}-{k}", args))
                if p90 is not None:
                    figures[name].append(p90)
    if figures["light"] and figures["heavy"]:
        light, heavy = statistics.median(figures["light"]), statistics.median(figures["heavy"])
        print(f"E2E p90 (median of {args.repeats}) heavy / light = {heavy:.1f} / {light:.1f} ms = {heavy / light:.2f}x "
              "(done when <= 1.5x, or the heavy run names scrape_heavy)")
    print(f"client max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
