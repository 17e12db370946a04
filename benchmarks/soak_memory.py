"""Resident memory of a long run: does a 1 M-request run stay flat?

Runs ``--requests N`` (default 1,000,000) closed-loop requests against the
emulator at a speedup (its TTFT and per-token times divided by ``--speedup``)
in this process, with soak storage (part files, checkpoints, windowed
statistics — on by default for runs of >= 200,000 requests), and samples this
process's resident memory (``/proc/self/statm``) every ``--sample`` seconds.

It prints the RSS before the run, once ``--settle`` of the requests are done
(the steady state: pools, buffers and histograms allocated), the peak and the
end, and the growth from the steady state to the peak: the target is at most
50 MB. At ~1,500 req/s a million requests take ~12 minutes on 2 cores; use
``--requests 50000`` for a quick check.

    .venv/bin/python benchmarks/soak_memory.py [--requests 1000000] [--concurrency 32] [--speedup 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time

from infermeter.engines.emulator.process import EmulatorProcess
from infermeter.measure import Measurement, RunConfig

PAGE = os.sysconf("SC_PAGE_SIZE")
MB = 1024 * 1024


def rss() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE / MB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=16, help="output tokens per request")
    ap.add_argument("--speedup", type=float, default=20.0)
    ap.add_argument("--sample", type=float, default=0.5, help="seconds between RSS samples")
    ap.add_argument("--settle", type=float, default=0.1, help="share of the requests before the steady state")
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="infermeter-soak-memory-")
    before = rss()
    samples: list[tuple[float, int, float]] = []
    stop = threading.Event()
    with EmulatorProcess(["--ttft-ms", "20", "--itl-ms", "2", "--speedup", str(args.speedup),
                          "--max-concurrency", "100000"]) as emu:
        m = Measurement(RunConfig(url=emu.base_url, model="infermeter-emulator", concurrency=args.concurrency,
                                  requests=args.requests, input_tokens="32", output_tokens=str(args.tokens),
                                  scrape=False, calibrate=False, out=f"{out}/run", checkpoint_s=30.0))

        def sampler() -> None:
            t0 = time.monotonic()
            while not stop.wait(args.sample):
                samples.append((time.monotonic() - t0, int(m.live.done), rss()))  # an int: safe across threads

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        t0 = time.perf_counter()
        res = asyncio.run(m.run())
        wall = time.perf_counter() - t0
        stop.set()
        th.join()
    end = rss()
    settle_at = args.settle * args.requests
    steady = next((r for _, done, r in samples if done >= settle_at), before)
    peak = max([r for _, _, r in samples] + [end])
    s = res.summary
    print(f"{s['completed'] + s['failed']:,} requests in {wall:.0f} s ({s['request_throughput']:.0f} req/s), "
          f"{args.tokens}-token streams, concurrency {args.concurrency}, soak storage {res.run.get('soak')}")
    print(f"  RSS before the run      {before:8.1f} MB")
    print(f"  RSS at {args.settle:.0%} of requests    {steady:8.1f} MB   (steady state)")
    print(f"  RSS peak                {peak:8.1f} MB")
    print(f"  RSS at the end          {end:8.1f} MB   (after the summary and the merged requests.parquet)")
    growth = peak - steady
    print(f"  growth steady -> peak   {growth:8.1f} MB   (target <= 50 MB: {'met' if growth <= 50 else 'NOT met'})")
    print(f"  growth before -> peak   {peak - before:8.1f} MB")
    for frac in (0.25, 0.5, 0.75, 1.0):
        at = next((r for _, done, r in samples if done >= frac * args.requests), end)
        print(f"    at {frac:4.0%}: {at:8.1f} MB")
    print(f"(results under {out})", file=sys.stderr)


if __name__ == "__main__":
    main()
