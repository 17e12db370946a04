"""Drive headless Chromium over the DevTools protocol (aiohttp websocket; no extra Python package).

``ensure_chromium()`` returns the browser path, installing Debian's ``chromium`` with apt-get when
it is missing (pytest skips with the reason when it cannot). ``inspect_page(path)`` opens a local
file and reports console errors, uncaught exceptions, log errors (CSP violations land there),
dialogs, pixel statistics of a screenshot of every chart panel (decoded by the browser's own canvas),
and then the values of extra expressions, which may click around. ``OPEN_ALL``, ``CLIPPED_TEXT``
and ``EMPTY_PLOTS`` are expressions for the checks every report page gets: open the folded
sections, list chart labels drawn outside their plot, list plots without data; ``CHART_MARKS`` draws every
view of every chart and counts the marks drawn against the data's values.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = Path("/usr/bin/chromium")


def ensure_chromium() -> tuple[Path | None, str]:
    """(path, "") when Chromium is there or could be installed, else (None, why)."""
    if CHROMIUM.exists():
        return CHROMIUM, ""
    if shutil.which("apt-get") is None:
        return None, "no /usr/bin/chromium and no apt-get to install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        try:
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{' '.join(cmd)} failed: {exc}"
        if res.returncode != 0:
            return None, f"{' '.join(cmd)} exited {res.returncode}: {res.stderr.strip()[-300:]}"
    return (CHROMIUM, "") if CHROMIUM.exists() else (None, "apt-get installed chromium but /usr/bin/chromium is missing")


@dataclass
class PageReport:
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    charts: list[dict[str, Any]] = field(default_factory=list)  # id, std, colored pixels
    values: dict[str, Any] = field(default_factory=dict)  # results of the extra expressions
    screenshot: bytes = b""


_PIXELS_JS = """
(async (data) => {
  const img = new Image();
  await new Promise((ok, bad) => { img.onload = ok; img.onerror = bad; img.src = "data:image/png;base64," + data; });
  const c = document.createElement("canvas"); c.width = img.width; c.height = img.height;
  const g = c.getContext("2d"); g.drawImage(img, 0, 0);
  const px = g.getImageData(0, 0, c.width, c.height).data;
  let n = 0, s = 0, s2 = 0, colored = 0;
  for (let i = 0; i < px.length; i += 4) {
    const r = px[i], gr = px[i + 1], b = px[i + 2], y = 0.299 * r + 0.587 * gr + 0.114 * b;
    n++; s += y; s2 += y * y;
    if (Math.max(r, gr, b) - Math.min(r, gr, b) > 60) colored++;
  }
  const m = s / n;
  return JSON.stringify({width: c.width, height: c.height, std: Math.sqrt(Math.max(0, s2 / n - m * m)), colored});
})
"""


class _Cdp:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws, self.next_id, self.pending, self.events = ws, 0, {}, []
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            else:
                self.events.append(data)

    async def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        await self.ws.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        data = await asyncio.wait_for(fut, timeout)
        if "error" in data:
            raise RuntimeError(f"{method}: {data['error']}")
        return data.get("result", {})

    async def evaluate(self, expr: str, timeout: float = 30.0) -> Any:
        res = await self.call("Runtime.evaluate", timeout, expression=expr, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"evaluate {expr[:60]!r}: {res['exceptionDetails'].get('text')}")
        return res["result"].get("value")


async def _inspect(browser: Path, page: Path, extra: dict[str, str], width: int, height: int,
                   before: str | None = None) -> PageReport:
    # chromium's helper processes may still write into the profile as it closes: a leftover file is no failure
    with tempfile.TemporaryDirectory(prefix="infermeter-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [str(browser), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--remote-debugging-port=0", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("chromium did not open its DevTools port")
                await asyncio.sleep(0.05)
            port = int(port_file.read_text().splitlines()[0])
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                    targets = await resp.json(content_type=None)
                ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
                async with http.ws_connect(ws_url, max_msg_size=0) as ws:
                    return await _drive(_Cdp(ws), page, extra, before)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


async def _drive(cdp: _Cdp, page: Path, extra: dict[str, str], before: str | None = None) -> PageReport:
    for domain in ("Page", "Runtime", "Log"):
        await cdp.call(f"{domain}.enable")
    await cdp.call("Page.navigate", url=page.resolve().as_uri())
    deadline = time.monotonic() + 30
    while not any(e.get("method") == "Page.loadEventFired" for e in cdp.events):
        if time.monotonic() > deadline:
            raise RuntimeError("the page did not finish loading")
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    deadline = time.monotonic() + 30  # the chart script marks the page when every chart is drawn
    while not await cdp.evaluate("document.body.hasAttribute('data-charts-ready') || "
                                 "document.body.hasAttribute('data-charts-error')"):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    if before:
        await cdp.evaluate(before)
        await asyncio.sleep(0.3)
    rep = PageReport()
    boxes = await cdp.evaluate(
        "JSON.stringify(Array.from(document.querySelectorAll('figure.chart .js-plotly-plot')).map((p, i) => {"
        "const r = p.getBoundingClientRect();"
        "return {id: p.closest('figure').id, panel: i, x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height}; }))")
    for box in json.loads(boxes):
        # scroll it into view and shoot the viewport: growing the viewport to the page instead would make the
        # charts redraw at the new size while the picture is taken
        await cdp.evaluate(f"window.scrollTo(0, {max(0.0, box['y'] - 20)})")
        await asyncio.sleep(0.05)
        shot = await cdp.call("Page.captureScreenshot", format="png",
                              clip={"x": box["x"], "y": box["y"], "width": max(1, box["w"]),
                                    "height": max(1, box["h"]), "scale": 1})
        stats = json.loads(await cdp.evaluate(f"{_PIXELS_JS}({json.dumps(shot['data'])})"))
        rep.charts.append({"id": box["id"], **stats})
    await cdp.evaluate("window.scrollTo(0, 0)")
    rep.screenshot = base64.b64decode((await cdp.call("Page.captureScreenshot", format="png"))["data"])
    for name, expr in extra.items():  # after the screenshots: these may click and change the page
        rep.values[name] = await cdp.evaluate(expr, timeout=240.0)  # CHART_MARKS draws every view in turn
    for e in cdp.events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            rep.console_errors.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            rep.exceptions.append(str(d.get("exception", {}).get("description") or d.get("text")))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            rep.log_errors.append(p["entry"].get("text", ""))
        elif m == "Page.javascriptDialogOpening":
            rep.dialogs.append(p.get("message", ""))
    return rep


def inspect_page(browser: Path, page: Path, extra: dict[str, str] | None = None,
                 width: int = 1400, height: int = 1000, before: str | None = None, timeout: float = 300) -> PageReport:
    """Open ``page`` in headless Chromium and report what happened (see the module docstring); ``before`` runs
    (awaited) once the charts are drawn and before the screenshots, e.g. :data:`OPEN_ALL`."""
    return asyncio.run(asyncio.wait_for(_inspect(browser, page, extra or {}, width, height, before), timeout))


# open every folded section and fit its charts to their now visible width
OPEN_ALL = ("(async () => { document.querySelectorAll('details').forEach(d => { d.open = true; });"
            " await new Promise(r => setTimeout(r, 100));"
            " for (const gd of document.querySelectorAll('.js-plotly-plot')) await Plotly.Plots.resize(gd);"
            " return true; })()")

# every text label of every chart lies inside its plot (nothing clipped), as "chart id: text" for those that do not
CLIPPED_TEXT = ("JSON.stringify((() => { const bad = [];"
                " document.querySelectorAll('figure.chart .js-plotly-plot').forEach(gd => {"
                "  const box = gd.getBoundingClientRect();"
                "  gd.querySelectorAll('svg text').forEach(t => {"
                "   if (!t.textContent.trim()) return; const r = t.getBoundingClientRect(); if (!r.width) return;"
                "   if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)"
                "    bad.push(gd.closest('figure').id + ': ' + t.textContent); }); });"
                " return bad; })())")

# plots with no finite value in any trace (an empty chart), as their chart ids
EMPTY_PLOTS = ("JSON.stringify(Array.from(document.querySelectorAll('figure.chart .js-plotly-plot'))"
               ".filter(gd => !gd.data.some(t => (t[t.orientation === 'h' ? 'x' : 'y'] || [])"
               ".some(v => v !== null && isFinite(v))))"
               ".map(gd => gd.closest('figure').id))")

# every view of every chart drawn in turn, and per panel the marks Plotly drew inside the plot area (bars with a
# width, markers, line paths) beside the marks its data asks for (each finite value; a line where two are
# adjacent), with the axes' types and ranges (a log range in exponents), the data's extent on them (error bars
# included) and the limit lines drawn: a panel whose data draws nothing shows drawn < expected
CHART_MARKS = r"""(async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const fin = v => v !== null && v !== undefined && v !== '' && isFinite(Number(v));
  const out = [];
  for (const fig of document.querySelectorAll('figure.chart')) {
    const buttons = Array.from(fig.querySelectorAll('.views button')), sel = fig.querySelector('.views select');
    const n = sel ? sel.options.length : Math.max(1, buttons.length);
    for (let view = 0; view < n; view++) {
      if (n > 1) {
        if (sel) { sel.value = String(view); sel.dispatchEvent(new Event('change')); } else buttons[view].click();
      }
      for (let k = 0; k < 200 && fig.getAttribute('data-drawn-view') !== String(view); k++) await sleep(25);
      const name = sel ? sel.options[view].textContent : (buttons[view] ? buttons[view].textContent : '');
      fig.querySelectorAll('.js-plotly-plot').forEach((gd, p) => {
        const box = gd.getBoundingClientRect(), s = gd._fullLayout._size;
        const area = {l: box.left + s.l - 2, r: box.left + s.l + s.w + 2, t: box.top + s.t - 2, b: box.top + s.t + s.h + 2};
        const inside = e => { const r = e.getBoundingClientRect();
          return r.right >= area.l && r.left <= area.r && r.bottom >= area.t && r.top <= area.b; };
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const expected = {bars: 0, points: 0, lines: 0};
        const extent = {x: [], y: []};
        for (const t of gd.data) {
          if (t.visible === false || t.visible === 'legendonly') continue;
          const xs = t.x || [], ys = t.y || [];
          let k = 0, joined = false;
          const lying = t.orientation === 'h', cs = lying ? ys : xs, vs = lying ? xs : ys;  // category, value
          const has = i => cs[i] !== null && cs[i] !== undefined && fin(vs[i]);
          const err = t.error_y || {}, plus = err.array || [], minus = err.arrayminus || plus;
          xs.forEach(v => { if (fin(v)) extent.x.push(Number(v)); });
          ys.forEach((v, i) => { if (!fin(v)) return; extent.y.push(Number(v));
            if (fin(plus[i])) extent.y.push(Number(v) + Number(plus[i]));
            if (fin(minus[i])) extent.y.push(Number(v) - Number(minus[i])); });
          for (let i = 0; i < vs.length; i++) if (has(i)) {
            k++;
            if (i > 0 && has(i - 1)) joined = true;
          }
          if (t.type === 'bar') expected.bars += k;
          else if ((t.mode || '').includes('markers')) expected.points += k;
          if (t.type !== 'bar' && (t.mode || '').includes('lines') && joined) expected.lines += 1;
          if (t.type !== 'bar' && !(t.mode || '').includes('markers') && k && !joined) expected.points += k;  // unseen
        }
        const bars = Array.from(gd.querySelectorAll('.barlayer .trace .point path'))
          .filter(e => e.getBoundingClientRect().width > 0 && inside(e)).length;
        const points = Array.from(gd.querySelectorAll('.scatterlayer .trace .points path.point')).filter(inside).length;
        const lines = Array.from(gd.querySelectorAll('.scatterlayer .trace path.js-line')).filter(e => {
          const r = e.getBoundingClientRect(); return r.width + r.height > 0 && inside(e); }).length;
        const limits = (gd.layout.shapes || []).map(sh => [sh.xref === 'x' ? 'x' : 'y', Number(sh.xref === 'x' ? sh.x0 : sh.y0)]);
        const lim = a => limits.filter(l => l[0] === a).map(l => l[1]);
        const span = (ax, vals) => ({type: ax.type, range: ax.range.map(Number),
          data: vals.length ? [Math.min(...vals), Math.max(...vals)] : null});
        out.push({id: fig.id, view: name, panel: p, title: (gd.closest('.panel').querySelector('.panel-title') || {}).textContent || '',
                  expected, drawn: {bars, points, lines},
                  x: {...span(xa, extent.x), limits: lim('x')}, y: {...span(ya, extent.y), limits: lim('y')}});
      });
    }
    if (n > 1) { if (sel) { sel.value = '0'; sel.dispatchEvent(new Event('change')); } else buttons[0].click(); }
  }
  return JSON.stringify(out);
})()"""
