"""The client stamps every event with the arrival of its bytes, against a server with known timing.

The server (in the test's own event loop, on the same clock as the client) writes each SSE event at
a known moment and notes when; the client's stamps must follow within a few ms. The last event has
no blank line after it and the server waits a second before closing: that event is still stamped
when its bytes arrived, not when the connection closed.
"""

import asyncio
import json
import statistics

from aiohttp import web

from infermeter.records.record import RequestRecord
from infermeter.workload.spec import RequestSpec

SPEC = RequestSpec(index=0, prompt=None, messages=({"role": "user", "content": "hi"},), max_tokens=4, input_tokens=1)
PLAN = [(0.050, {"content": "a"}), (0.070, {"content": "b"}), (0.090, {"content": "c"}), (0.110, {"content": "d"})]


def test_every_stamp_is_the_arrival_of_its_bytes_even_the_last_unterminated_event(send_once):
    writes: list[float] = []

    async def go() -> RequestRecord:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        clock = lambda: loop.time() - t0  # noqa: E731 - the run clock both sides read

        async def handler(request: web.Request) -> web.StreamResponse:
            start = clock()
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i, (at, delta) in enumerate(PLAN):
                await asyncio.sleep(max(0.0, start + at - clock()))
                finish = "length" if i == len(PLAN) - 1 else None
                payload = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                if finish:  # the final event carries usage and no blank line after it
                    payload["usage"] = {"prompt_tokens": 1, "completion_tokens": len(PLAN)}
                end = "\n" if finish else "\n\n"
                writes.append(clock())
                await resp.write(("data: " + json.dumps(payload) + end).encode())
            await asyncio.sleep(1.0)  # close late: an end stamped at close would be 1 s late
            return resp

        return await send_once(handler, SPEC, clock=clock)

    rec = asyncio.run(go())
    assert rec.outcome == "ok" and rec.completion_tokens == 4 and len(rec.chunk_times) == 4
    lags = [got - wrote for got, wrote in zip(rec.chunk_times, writes)]
    assert all(lag >= 0 for lag in lags)  # never before the server wrote it
    assert statistics.median(lags) <= 0.005, lags  # within 5 ms of the bytes' arrival
    assert rec.first_token_at == rec.chunk_times[0]
    # the unterminated last event: stamped at its arrival (~110 ms), not at the close (~1.1 s)
    assert rec.ended_at == rec.chunk_times[-1]
    assert rec.ended_at - writes[-1] < 0.5 and rec.ended_at - rec.sent_at < 0.6
