"""What a server that lies about ``usage.completion_tokens`` costs a run, and what the run reports.

Starts an OpenAI-shaped server on 127.0.0.1 (in a thread of this process) whose every answer streams
two content chunks and then claims ``--claim`` completion tokens, runs ``infermeter run`` against it
in a child process (``--src``: the source tree it imports, to compare two checkouts), and prints the
child's wall time, peak RSS, the reported output tokens/s, ``valid`` and the usage warnings.

    .venv/bin/python benchmarks/hostile_usage.py [--claim 20000000] [--requests 4] [--src src]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from aiohttp import web


def _chunk(delta: dict[str, str], finish: str | None = None) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"


def serve(claim: int, ready: threading.Event, box: dict[str, int]) -> None:
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": claim}})
    body = (_chunk({"role": "assistant", "content": ""}) + _chunk({"content": "one"}) + _chunk({"content": " two"})
            + _chunk({}, "length") + f"data: {usage}\n\n" + "data: [DONE]\n\n").encode()

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(body)
        return resp

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        box["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--claim", type=int, default=20_000_000)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"))
    a = ap.parse_args()
    ready, box = threading.Event(), {}
    threading.Thread(target=serve, args=(a.claim, ready, box), daemon=True).start()
    ready.wait(30)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        env = dict(os.environ, PYTHONPATH=a.src, INFERMETER_HISTORY_DB=str(Path(tmp) / "h.duckdb"))
        env.pop("OPENAI_API_KEY", None)
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "infermeter.cli.main", "run", "--url", f"http://127.0.0.1:{box['port']}",
               "--concurrency", "2", "--requests", str(a.requests), "--output-tokens", "2", "--no-calibrate",
               "--out", str(out), "--json"]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - t0
        rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"src {a.src}: claim {a.claim:,} x {a.requests} requests: exit {p.returncode}, {wall:.1f} s, "
              f"peak RSS {rss_mb:,.0f} MB")
        if (out / "summary.json").exists():
            s = json.loads((out / "summary.json").read_text())
            print(f"  output tok/s {s.get('output_token_throughput') or 0:,.0f}, valid {s.get('valid')}, "
                  f"usage_implausible {s.get('usage_implausible')}, "
                  f"warnings {[w.split(':')[0] for w in s.get('warnings') or []]}")
        else:
            print("  no summary.json; last stderr line: " + (p.stderr.strip().splitlines() or [""])[-1][:200])


if __name__ == "__main__":
    main()
