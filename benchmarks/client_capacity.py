"""How much load can one infermeter client process generate on this machine?

Against a server that costs nearly nothing (the emulator in zero-delay mode,
in its own process, writing pre-rendered SSE bytes), this prints:

1. the highest request rate and streamed tokens/s one client process sustains
   (closed loop, concurrency 64, 64-token streams), and its CPU-seconds per
   1,000 requests;
2. at half that rate, open loop (constant arrivals): the client-added TTFT
   (p50/p99 — the server adds ~nothing) and the schedule lag (p50/p99).

Targets on 2 cores: >= 1,500 req/s; at half rate TTFT p50 < 2 ms and lag p99 < 5 ms.
Figures are for this machine at this moment: compare ratios within one run.

    .venv/bin/python benchmarks/client_capacity.py [--requests 6000] [--seconds 10] [--workers N]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time

from infermeter.measure import Measurement, RunConfig
from infermeter.twin.process import EmulatorProcess


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0, help="open-loop phase length")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="infermeter-capacity-")
    with EmulatorProcess(["--zero-delay", "--max-concurrency", "100000"]) as emu:
        common = dict(url=emu.base_url, model="infermeter-emulator", input_tokens="16", output_tokens=str(args.tokens),
                      scrape=False)
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
    print(f"(results under {tmp})", file=sys.stderr)


if __name__ == "__main__":
    main()
