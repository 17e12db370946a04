/* infermeter report charts: small SVG line/bar charts with views, legend toggles and tooltips.
   Reads the chart JSON from the element #report-data; builds every node with
   createElement/textContent (never innerHTML), so labels from result files stay text. */
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                 "#7f7f7f", "#bcbd22", "#393b79", "#ad494a"];
  var W = 640, H = 320, M = {l: 64, r: 16, t: 12, b: 44};

  function el(tag, attrs, text) {
    var n = document.createElement(tag);
    for (var k in attrs || {}) n.setAttribute(k, attrs[k]);
    if (text !== undefined) n.textContent = text;
    return n;
  }
  function sv(tag, attrs, text) {
    var n = document.createElementNS(NS, tag);
    for (var k in attrs || {}) n.setAttribute(k, attrs[k]);
    if (text !== undefined) n.textContent = text;
    return n;
  }
  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    var a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toPrecision(3) + "B";
    if (a >= 1e6) return (v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return (v / 1e3).toPrecision(3) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 1) return v.toFixed(2).replace(/\.?0+$/, "");
    if (a === 0) return "0";
    return v.toPrecision(2);
  }
  function niceTicks(lo, hi, log) {
    var t = [], i;
    if (log) {
      var e0 = Math.floor(Math.log10(lo)), e1 = Math.ceil(Math.log10(hi));
      var mult = (e1 - e0) > 4 ? [1] : [1, 2, 5];
      for (i = e0; i <= e1; i++) mult.forEach(function (m) {
        var v = m * Math.pow(10, i);
        if (v >= lo * 0.999 && v <= hi * 1.001) t.push(v);
      });
      return t;
    }
    var span = hi - lo || 1, raw = span / 6, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * mag; }).filter(function (s) { return s >= raw; })[0];
    for (i = Math.ceil(lo / step) * step; i <= hi + step * 1e-9; i += step) t.push(Math.abs(i) < step * 1e-9 ? 0 : i);
    return t;
  }
  function scale(lo, hi, a, b, log) {
    if (log) { lo = Math.log10(lo); hi = Math.log10(hi); }
    var k = (b - a) / ((hi - lo) || 1);
    return function (v) { return a + ((log ? Math.log10(v) : v) - lo) * k; };
  }
  function domain(values, log, zero) {
    var v = values.filter(function (x) { return x !== null && isFinite(x) && (!log || x > 0); });
    if (!v.length) return null;
    var lo = Math.min.apply(null, v), hi = Math.max.apply(null, v);
    if (zero && !log) lo = Math.min(lo, 0);
    if (lo === hi) { if (log) { lo /= 2; hi *= 2; } else { lo -= 1; hi += 1; } }
    if (!log) { var pad = (hi - lo) * 0.04; hi += pad; if (lo !== 0) lo -= pad; }
    return [lo, hi];
  }

  function drawAxes(svg, xs, ys, xd, yd, view) {
    var g = sv("g", {"class": "axis"});
    niceTicks(yd[0], yd[1], view.y.log).forEach(function (t) {
      var y = ys(t);
      g.appendChild(sv("line", {x1: M.l, x2: W - M.r, y1: y, y2: y, "class": "grid"}));
      g.appendChild(sv("text", {x: M.l - 6, y: y + 4, "text-anchor": "end"}, fmt(t)));
    });
    if (view.x.categories) {
      var n = view.x.categories.length, bw = (W - M.l - M.r) / n;
      view.x.categories.forEach(function (c, i) {
        var label = c.length > 20 ? c.slice(0, 19) + "…" : c, x = M.l + bw * (i + 0.5), y = H - M.b + 14;
        g.appendChild(sv("text", {x: x, y: y, "text-anchor": "end", transform: "rotate(-30 " + x + " " + y + ")"}, label));
      });
    } else {
      niceTicks(xd[0], xd[1], view.x.log).forEach(function (t) {
        var x = xs(t);
        g.appendChild(sv("line", {x1: x, x2: x, y1: M.t, y2: H - M.b, "class": "grid"}));
        g.appendChild(sv("text", {x: x, y: H - M.b + 16, "text-anchor": "middle"}, fmt(t)));
      });
    }
    g.appendChild(sv("text", {x: (M.l + W - M.r) / 2, y: H - 6, "text-anchor": "middle", "class": "label"}, view.x.label));
    g.appendChild(sv("text", {x: 14, y: (M.t + H - M.b) / 2, "text-anchor": "middle", "class": "label",
                              transform: "rotate(-90 14 " + ((M.t + H - M.b) / 2) + ")"}, view.y.label));
    svg.appendChild(g);
  }

  function lineView(svg, view, hidden, tip) {
    var shown = view.series.filter(function (s) { return !hidden[s.name]; });
    var xsAll = [], ysAll = [];
    shown.forEach(function (s) { s.points.forEach(function (p) { xsAll.push(p[0]); ysAll.push(p[1]); }); });
    var xd = domain(xsAll, view.x.log, false), yd = domain(ysAll, view.y.log, !view.y.log);
    if (!xd || !yd) { svg.appendChild(sv("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no data")); return; }
    var xs = scale(xd[0], xd[1], M.l, W - M.r, view.x.log), ys = scale(yd[0], yd[1], H - M.b, M.t, view.y.log);
    drawAxes(svg, xs, ys, xd, yd, view);
    var hits = [];
    view.series.forEach(function (s, i) {
      if (hidden[s.name]) return;
      var color = PALETTE[i % PALETTE.length], d = "", pen = false;
      s.points.forEach(function (p) {
        var ok = p[0] !== null && p[1] !== null && (!view.x.log || p[0] > 0) && (!view.y.log || p[1] > 0);
        if (!ok) { pen = false; return; }
        var x = xs(p[0]), y = ys(p[1]);
        if (!pen) d += "M" + x.toFixed(1) + "," + y.toFixed(1);
        else if (s.step) d += "H" + x.toFixed(1) + "V" + y.toFixed(1);
        else d += "L" + x.toFixed(1) + "," + y.toFixed(1);
        pen = true;
        hits.push({x: x, y: y, p: p, s: s.name, c: color});
        if (s.markers) svg.appendChild(sv("circle", {cx: x, cy: y, r: 3.5, fill: color}));
      });
      var path = sv("path", {d: d, fill: "none", stroke: color, "stroke-width": 2});
      if (s.dashed) path.setAttribute("stroke-dasharray", "6 4");
      svg.appendChild(path);
    });
    var dot = sv("circle", {r: 5, fill: "none", stroke: "#000", "stroke-width": 1.5, visibility: "hidden"});
    svg.appendChild(dot);
    svg.addEventListener("mousemove", function (ev) {
      var box = svg.getBoundingClientRect(), mx = (ev.clientX - box.left) * W / box.width,
          my = (ev.clientY - box.top) * H / box.height, best = null, bd = 40 * 40;
      hits.forEach(function (h) { var dd = (h.x - mx) * (h.x - mx) + (h.y - my) * (h.y - my); if (dd < bd) { bd = dd; best = h; } });
      if (!best) { dot.setAttribute("visibility", "hidden"); tip.style.display = "none"; return; }
      dot.setAttribute("cx", best.x); dot.setAttribute("cy", best.y); dot.setAttribute("visibility", "visible");
      tip.textContent = best.s + " — " + view.x.label + ": " + fmt(best.p[0]) + ", " + view.y.label + ": " + fmt(best.p[1]);
      tip.style.display = "block";
    });
    svg.addEventListener("mouseleave", function () { dot.setAttribute("visibility", "hidden"); tip.style.display = "none"; });
  }

  function barView(svg, view, hidden, tip) {
    var shown = view.series.filter(function (s) { return !hidden[s.name]; }), vals = [];
    shown.forEach(function (s) { s.values.forEach(function (v) { vals.push(v); }); });
    var yd = domain(vals, false, true);
    if (!yd) { svg.appendChild(sv("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no data")); return; }
    var ys = scale(yd[0], yd[1], H - M.b, M.t, false);
    drawAxes(svg, null, ys, null, yd, view);
    var n = view.x.categories.length, bw = (W - M.l - M.r) / n, inner = bw * 0.8 / Math.max(1, shown.length);
    view.series.forEach(function (s, si) {
      var k = shown.indexOf(s);
      if (k < 0) return;
      s.values.forEach(function (v, i) {
        if (v === null) return;
        var x = M.l + bw * i + bw * 0.1 + inner * k, y = ys(v);
        var r = sv("rect", {x: x, y: y, width: Math.max(1, inner - 2), height: Math.max(0, ys(yd[0] < 0 ? 0 : yd[0]) - y),
                            fill: PALETTE[si % PALETTE.length]});
        r.appendChild(sv("title", {}, view.x.categories[i] + " — " + s.name + ": " + fmt(v)));
        r.addEventListener("mouseenter", function () {
          tip.textContent = view.x.categories[i] + " — " + s.name + ": " + fmt(v); tip.style.display = "block";
        });
        r.addEventListener("mouseleave", function () { tip.style.display = "none"; });
        svg.appendChild(r);
      });
    });
  }

  function chart(spec, parent) {
    var box = el("figure", {"class": "chart", id: "chart-" + spec.id});
    box.appendChild(el("figcaption", {}, spec.title));
    var bar = el("div", {"class": "views"}), area = el("div", {"class": "plot"}), legend = el("div", {"class": "legend"});
    var tip = el("div", {"class": "tip"});
    var state = {view: 0, hidden: {}};
    function render() {
      var view = spec.views[state.view];
      while (area.firstChild) area.removeChild(area.firstChild);
      while (legend.firstChild) legend.removeChild(legend.firstChild);
      M.b = view.type === "bar" ? 120 : 44;  /* room for slanted category labels */
      var svg = sv("svg", {viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": spec.title + " — " + view.name});
      svg.appendChild(sv("rect", {x: 0, y: 0, width: W, height: H, fill: "#fff"}));
      (view.type === "bar" ? barView : lineView)(svg, view, state.hidden, tip);
      area.appendChild(svg);
      view.series.forEach(function (s, i) {
        var item = el("button", {type: "button", "class": "key" + (state.hidden[s.name] ? " off" : "")});
        var sw = el("span", {"class": "swatch" + (s.dashed ? " dashed" : "")});
        sw.style.borderColor = PALETTE[i % PALETTE.length];
        item.appendChild(sw);
        item.appendChild(document.createTextNode(s.name));
        item.addEventListener("click", function () { state.hidden[s.name] = !state.hidden[s.name]; render(); });
        legend.appendChild(item);
      });
      Array.prototype.forEach.call(bar.children, function (b, i) { b.className = i === state.view ? "on" : ""; });
    }
    if (spec.views.length > 1) spec.views.forEach(function (v, i) {
      var b = el("button", {type: "button"}, v.name);
      b.addEventListener("click", function () { state.view = i; render(); });
      bar.appendChild(b);
    });
    box.appendChild(bar); box.appendChild(area); box.appendChild(tip); box.appendChild(legend);
    if (spec.note) box.appendChild(el("p", {"class": "note"}, spec.note));
    parent.appendChild(box);
    render();
  }

  function timeseries(spec, parent) {
    var wrap = el("div", {"class": "ts"}), pick = el("select", {"aria-label": "run"}), grid = el("div", {"class": "grid"});
    spec.runs.forEach(function (r, i) { pick.appendChild(el("option", {value: String(i)}, r.label)); });
    function render() {
      var r = spec.runs[Number(pick.value)];
      while (grid.firstChild) grid.removeChild(grid.firstChild);
      r.signals.forEach(function (sig) {
        chart({id: "ts-" + sig.key, title: sig.title + (sig.unit ? " (" + sig.unit + ")" : ""),
               views: [{name: sig.title, type: "line", x: {label: "time (s)", log: false},
                        y: {label: sig.unit || sig.title, log: false}, series: sig.series}]}, grid);
      });
    }
    pick.addEventListener("change", render);
    var row = el("p", {}, "Run: ");
    row.appendChild(pick);
    wrap.appendChild(row); wrap.appendChild(grid);
    if (spec.note) wrap.appendChild(el("p", {"class": "note"}, spec.note));
    parent.appendChild(wrap);
    render();
  }

  function sortable(table) {
    var heads = table.querySelectorAll("thead th");
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener("click", function () {
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var dir = th.getAttribute("data-dir") === "asc" ? -1 : 1;
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("data-dir"); });
        th.setAttribute("data-dir", dir === 1 ? "asc" : "desc");
        function key(r) {
          var c = r.cells[col], v = c.getAttribute("data-v");
          return v !== null && v !== "" && isFinite(Number(v)) ? Number(v) : c.textContent;
        }
        rows.sort(function (a, b) {
          var x = key(a), y = key(b);
          if (typeof x === "number" && typeof y === "number") return (x - y) * dir;
          return String(x).localeCompare(String(y)) * dir;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }

  var data = JSON.parse(document.getElementById("report-data").textContent);
  data.charts.forEach(function (spec) {
    var host = document.getElementById("charts-" + spec.section);
    if (!host) return;
    if (spec.type === "timeseries") timeseries(spec, host); else chart(spec, host);
  });
  Array.prototype.forEach.call(document.querySelectorAll("table.data"), sortable);
  document.body.setAttribute("data-charts-ready", String(data.charts.length));
})();
