"""How much load can one infermeter client process generate on this machine?

Against a server that costs nearly nothing, in its own process, this prints:

1. the highest request rate and streamed tokens/s one client process sustains
   (closed loop, concurrency 64, 64-token streams), and its CPU-seconds per
   1,000 requests;
2. at half that rate, open loop (constant arrivals): the client-added TTFT
   (p50/p99 — the server adds ~nothing) and the schedule lag (p50/p99).

Targets on 2 cores: >= 1,500 req/s; at half rate TTFT p50 < 2 ms and lag p99 < 5 ms.

3. with ``--workers N`` (N > 1): the same closed loop from N client processes
   sharing one striped schedule (``infermeter run --workers N``), its rate,
   CPU-seconds per 1,000 requests (parent + workers) and the ratio to one process.

The server (``--server``): ``raw`` (default) is a bare asyncio protocol in its
own process answering every POST with the same pre-rendered SSE response, taken
once from the emulator's zero-delay mode (about 0.05 ms of CPU per request);
``emulator`` is the emulator's zero-delay mode itself (aiohttp: about as much
CPU per request as the client, so on 2 cores it caps what several client
processes can show).

Figures are for this machine at this moment: compare ratios within one run.

    .venv/bin/python benchmarks/client_capacity.py [--requests 6000] [--seconds 10] [--workers N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import resource
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator

from infermeter.engines.emulator.process import EmulatorProcess
from infermeter.measure import Measurement, RunConfig


def cpu_s(children: bool = False) -> float:
    """CPU seconds of this process (and, with ``children``, of its finished child processes)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN) if children else None
    return r.ru_utime + r.ru_stime + (c.ru_utime + c.ru_stime if c else 0.0)


class _Raw(asyncio.Protocol):
    """HTTP/1.1 keep-alive: every POST gets ``post``, every GET gets ``get`` (pre-rendered responses)."""

    def __init__(self, post: bytes, get: bytes) -> None:
        self.post, self.get, self.buf = post, get, b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tr = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:end].lower()
            i = head.find(b"content-length:")
            n = int(head[i + 15:].split(b"\r\n", 1)[0]) if i >= 0 else 0
            if len(self.buf) < end + 4 + n:
                return
            self.buf = self.buf[end + 4 + n:]
            self.tr.write(self.post if head.startswith(b"post") else self.get)  # type: ignore[attr-defined]


def _response(body: bytes, ctype: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (ctype, len(body), body)


def serve_raw(port: int, sse: bytes) -> None:
    models = json.dumps({"object": "list", "data": [{"id": "infermeter-emulator", "object": "model"}]}).encode()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(lambda: _Raw(_response(sse, b"text/event-stream"),
                                                    _response(models, b"application/json")),
                                       "127.0.0.1", port, backlog=1024)
        await srv.serve_forever()

    asyncio.run(main())


@contextlib.contextmanager
def zero_cost_server(kind: str, tokens: int) -> Iterator[str]:
    """Base URL of the zero-cost server (see the module docstring)."""
    with EmulatorProcess(["--zero-delay", "--max-concurrency", "100000"]) as emu:
        if kind == "emulator":
            yield emu.base_url
            return
        req = {"model": "infermeter-emulator", "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens,
               "stream": True, "stream_options": {"include_usage": True}}
        with urllib.request.urlopen(urllib.request.Request(emu.base_url + "/v1/chat/completions",
                                                           data=json.dumps(req).encode())) as r:
            sse = r.read()
    port = EmulatorProcess().port
    proc = mp.get_context("spawn").Process(target=serve_raw, args=(port, sse), daemon=True)
    proc.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0, help="open-loop phase length")
    ap.add_argument("--workers", type=int, default=1, help="also measure N client processes (N > 1)")
    ap.add_argument("--server", choices=("raw", "emulator"), default="raw", help="the zero-cost server")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="infermeter-capacity-")
    with zero_cost_server(args.server, args.tokens) as url:
        print(f"server: {args.server} (zero cost, pre-rendered {args.tokens}-token SSE response)")
        common = dict(url=url, model="infermeter-emulator", input_tokens="16", output_tokens=str(args.tokens),
                      scrape=False, calibrate=False)
        # warm the connection pool and the server's pre-rendered body
        asyncio.run(Measurement(RunConfig(concurrency=args.concurrency, requests=500, out=f"{tmp}/warm", **common)).run())
        c0, w0 = cpu_s(), time.perf_counter()
        r = asyncio.run(Measurement(RunConfig(concurrency=args.concurrency, requests=args.requests,
                                              out=f"{tmp}/max", **common)).run())
        cpu, wall = cpu_s() - c0, time.perf_counter() - w0
        s = r.summary
        max_rps = s["request_throughput"]
        print(f"closed loop, concurrency {args.concurrency}, {args.tokens}-token streams, {args.requests} requests")
        print(f"  max request rate     {max_rps:9.0f} req/s   (target >= 1500)")
        print(f"  streamed tokens/s    {s['output_token_throughput']:9.0f} tok/s")
        print(f"  client CPU           {1000 * cpu / s['completed']:9.3f} CPU-s per 1,000 requests ({cpu / wall:.0%} of a core)")
        print(f"  failed               {s['failed']:9d}")
        half = max_rps / 2
        r2 = asyncio.run(Measurement(RunConfig(rate=half, arrival="constant", duration_s=args.seconds,
                                               out=f"{tmp}/half", **common)).run())
        s2 = r2.summary
        print(f"open loop at half the max rate ({half:.0f} req/s, constant arrivals, {args.seconds:g} s)")
        print(f"  achieved rate        {s2['achieved_rate']:9.1f} req/s")
        print(f"  client-added TTFT    p50 {s2['ttft_ms']['p50']:.3f} ms   p99 {s2['ttft_ms']['p99']:.3f} ms   (target p50 < 2 ms)")
        print(f"  schedule lag         p50 {s2['schedule_lag_ms']['p50']:.3f} ms   p99 {s2['schedule_lag_ms']['p99']:.3f} ms   (target p99 < 5 ms)")
        print(f"  run valid            {s2['valid']} {s2['invalid_reasons']}")
        if args.workers > 1:
            c0, w0 = cpu_s(children=True), time.perf_counter()
            r3 = asyncio.run(Measurement(RunConfig(concurrency=args.concurrency, requests=args.requests * args.workers,
                                                   workers=args.workers, out=f"{tmp}/workers", **common)).run())
            cpu3, wall3 = cpu_s(children=True) - c0, time.perf_counter() - w0
            s3 = r3.summary
            rps = s3["request_throughput"]
            print(f"closed loop, concurrency {args.concurrency}, {args.workers} worker processes (--workers {args.workers})")
            print(f"  max request rate     {rps:9.0f} req/s   ({rps / max_rps:.2f}x one process)")
            print(f"  streamed tokens/s    {s3['output_token_throughput']:9.0f} tok/s")
            print(f"  client CPU           {1000 * cpu3 / s3['completed']:9.3f} CPU-s per 1,000 requests "
                  f"(parent + workers, incl. start-up; {wall3:.1f} s wall)")
            print(f"  failed               {s3['failed']:9d}   (merged {s3['completed'] + s3['failed']} records)")
    print(f"(results under {tmp})", file=sys.stderr)


if __name__ == "__main__":
    main()
