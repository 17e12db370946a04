"""A server that echoes the API key back, in every place it can, never gets it into a file or onto the console.

The fake server (started here, on 127.0.0.1) puts the ``Authorization`` header it received into a
401 from ``/v1/models``, into 500 bodies (where the key straddles the 200-character cut of an error
detail), into an error object inside the stream (straddling the 300-character cut) and into 401s
on the first requests (the run stops and says why). Each run uses a fresh canary key of one of the
shapes keys come in; then every file under ``--out`` (read raw, and ``requests.parquet`` decoded),
the history database, a report built from the run, and the captured stdout/stderr of every command
are searched for the canary and for its first 8 characters.
"""

import asyncio
import json
import secrets
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from aiohttp import web

from infermeter.engines.emulator.server import serve

EVIL_MODEL = "evil\x1b[2J\x1b]0;pwned\x07-model"


def _sse(*objs: object) -> bytes:
    return b"".join(b"data: " + (o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n\n" for o in objs)


def _app(state: dict) -> web.Application:
    n = 0

    async def models(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if state["models"] == "401":
            return web.json_response({"error": "invalid key", "received": {"authorization": auth,
                                      "key": auth.removeprefix("Bearer ")}}, status=401)
        return web.json_response({"data": [{"id": EVIL_MODEL}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        nonlocal n
        await request.read()
        auth = request.headers.get("Authorization", "")
        key = auth.removeprefix("Bearer ")
        n += 1
        if state["chat"] == "401":
            return web.Response(status=401, text=f"denied: you sent Authorization: {auth} (key {key})")
        kind = n % 3
        if kind == 0:  # the key straddles the 200-character cut of an HTTP error's body
            return web.Response(status=500, text="upstream failed " + "x" * 170 + f" {key} \x1b[2J echoed")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if kind == 1:  # an error object in the stream, the key straddling the 300-character cut
            await resp.write(_sse({"error": {"message": "quota " + "y" * 260 + f" for {key} exceeded"}}))
        else:
            await resp.write(_sse({"choices": [{"index": 0, "delta": {"content": "hi"}}]},
                                  {"choices": [{"index": 0, "delta": {"content": " there"}, "finish_reason": "length"}]},
                                  {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}, b"[DONE]"))
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


@pytest.fixture(scope="module")
def hostile():
    """(base URL, state): the server's behaviour is switched through ``state``."""
    state = {"models": "ok", "chat": "mixed"}
    ready = threading.Event()
    box: dict = {}

    async def main() -> None:
        async with serve(_app(state)) as url:
            box["url"], box["stop"] = url, asyncio.Event()
            ready.set()
            await box["stop"].wait()

    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    t.start()
    assert ready.wait(30)
    yield box["url"], state
    loop.call_soon_threadsafe(box["stop"].set)
    t.join(10)


KEY_SHAPES = {
    "plain": lambda: "Zq7v" + secrets.token_hex(20),  # no known shape: only the literal value can catch it
    "openai": lambda: "sk-proj-" + secrets.token_urlsafe(36),
    "jwt": lambda: ("eyJhbGciOiJSUzI1NiJ9." + secrets.token_urlsafe(300) + "." + secrets.token_urlsafe(40)),
}


def _needles(key: str) -> list[str]:
    return [key, key[:8], key[8:24]]


def _leaks(text: str, key: str) -> list[str]:
    return [n for n in _needles(key) if n in text]


def _files_leak(root: Path, key: str) -> dict[str, list[str]]:
    found = {}
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        text = f.read_bytes().decode("utf-8", "replace")
        if f.suffix == ".parquet":  # compressed columns: read the strings themselves too
            text += json.dumps(pq.read_table(f).to_pylist(), default=str)
        hit = _leaks(text, key)
        if hit:
            found[str(f.relative_to(root))] = hit
    return found


def _db_leak(db: Path, key: str) -> list[str]:
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT * FROM runs").fetchall()
    finally:
        con.close()
    assert rows, "the run was indexed"
    return _leaks(json.dumps(rows, default=str), key)


@pytest.mark.parametrize("shape,extra", [(s, []) for s in sorted(KEY_SHAPES)] + [("plain", ["--workers", "2"])],
                         ids=[*sorted(KEY_SHAPES), "plain-workers"])
def test_an_echoed_key_reaches_no_file_database_report_or_console(hostile, shape, extra, cli, tmp_path):
    """Worker processes redact too (they learn the key from their client's config, not this process)."""
    url, state = hostile
    key = KEY_SHAPES[shape]()
    db = tmp_path / "history.duckdb"
    env = {"INFERMETER_HISTORY_DB": str(db)}
    state.update(models="ok", chat="mixed")
    out = tmp_path / "run"
    p = cli("run", "--url", url, "--api-key", key, "--requests", "12", "--concurrency", "3", "--output-tokens", "2",
            "--out", str(out), *extra, env=env)
    assert (out / "summary.json").exists(), p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] >= 1 and s["failed"] >= 2  # both kinds of echoing error were recorded
    run = json.loads((out / "run.json").read_text())
    i = run["argv"].index("--api-key")
    assert run["argv"][i + 1] == "***" and run["config"]["api_key"] == "***"
    assert run["load"]["backend"] == ("processes" if extra else "local")
    details = [d for d in pq.read_table(out / "requests.parquet").column("error_detail").to_pylist() if d]
    assert any(d.startswith("HTTP 500") for d in details) and any("server error in stream" in d for d in details)
    assert not _leaks(p.stdout + p.stderr, key)
    rep = tmp_path / "report"
    r = cli("report", str(out), "--out", str(rep), env=env)
    assert r.returncode == 0, r.stderr
    summ = cli("summarize", str(out), env=env)
    assert not _leaks(r.stdout + r.stderr + summ.stdout + summ.stderr, key)
    # the first requests refused with the key echoed: the run stops with one line on the console
    state.update(chat="401")
    halted = tmp_path / "halted"
    h = cli("run", "--url", url, "--api-key", key, "--requests", "20", "--out", str(halted), env=env)
    assert h.returncode == 2 and "HTTP 401" in h.stderr and not _leaks(h.stdout + h.stderr, key)
    # /v1/models refuses and echoes the header: one line, exit 2, no key
    state.update(models="401")
    m = cli("run", "--url", url, "--api-key", key, "--requests", "3", "--out", str(tmp_path / "m"), env=env)
    assert m.returncode == 2 and "HTTP 401" in m.stderr and len(m.stderr.strip().splitlines()) == 1, m.stderr
    assert not _leaks(m.stdout + m.stderr, key)
    # the same key from the environment: the same
    e = cli("run", "--url", url, "--requests", "3", "--out", str(tmp_path / "e"), env={**env, "OPENAI_API_KEY": key})
    assert e.returncode == 2 and not _leaks(e.stdout + e.stderr, key)
    assert _files_leak(tmp_path, key) == {}
    assert _db_leak(db, key) == []


def test_server_and_user_text_reach_the_console_and_report_verbatim_and_inert(hostile, cli, tmp_path):
    url, state = hostile
    state.update(models="ok", chat="mixed")
    out = tmp_path / "run"
    p = cli("run", "--url", url, "--requests", "6", "--concurrency", "2", "--output-tokens", "2", "--out", str(out))
    assert (out / "summary.json").exists(), p.stderr
    assert "\x1b" not in p.stdout + p.stderr and "\x07" not in p.stdout + p.stderr
    assert "evil[2J]0;pwned-model" in p.stdout  # the model id, shown with its control characters removed
    rep = tmp_path / "report"
    r = cli("report", str(out), "--out", str(rep))
    assert r.returncode == 0, r.stderr
    md = (rep / "report.md").read_text()
    assert "\x1b" not in md and "\x07" not in md and "evil[2J]0;pwned-model" in md
    assert "\x1b" not in (rep / "report.html").read_text()
    for label in ("[baseline] llama", "gpu [/dev/nvidia0]"):
        d = tmp_path / label.replace("/", "_").replace(" ", "_")
        q = cli("run", "--url", url, "--requests", "3", "--output-tokens", "2", "--label", label, "--out", str(d))
        assert (d / "summary.json").exists() and "Traceback" not in q.stderr and "MarkupError" not in q.stderr, q.stderr
        row = next(line for line in q.stdout.splitlines() if line.startswith("run "))
        assert label in row, q.stdout
        s = cli("summarize", str(d))
        assert label in s.stdout and "Traceback" not in s.stderr
