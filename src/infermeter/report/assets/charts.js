/* infermeter report: draws the chart specs with Plotly (bundled before this script) and sorts tables.
   Specs are JSON from #report-data (see infermeter.report.figures): each chart has views, each view
   panels of Plotly traces and layout, drawn as given. Labels were escaped in Python; nodes made here
   use textContent only. Sets body[data-charts-ready] to the number of panels drawn, and each chart's
   figure[data-drawn-view] to the index of the view once it is drawn (tests wait on it). */
(function () {
  "use strict";
  var CONFIG = {responsive: true, displaylogo: false, displayModeBar: "hover", modeBarButtonsToRemove: ["select2d", "lasso2d"],
                toImageButtonOptions: {format: "png", scale: 2}};

  function el(tag, attrs, text) {
    var n = document.createElement(tag);
    for (var k in attrs || {}) n.setAttribute(k, attrs[k]);
    if (text !== undefined) n.textContent = text;
    return n;
  }

  function svgButton(name) {
    return {name: "Download as SVG", icon: Plotly.Icons.disk, click: function (gd) {
      Plotly.downloadImage(gd, {format: "svg", filename: name});
    }};
  }

  function chart(spec, host) {
    var box = el("figure", {"class": "chart", id: "chart-" + spec.id});
    box.appendChild(el("figcaption", {}, spec.title));
    var pick = el("div", {"class": "views"}), grid = el("div", {"class": "panels"});
    box.appendChild(pick);
    box.appendChild(grid);
    if (spec.note) box.appendChild(el("p", {"class": "note"}, spec.note));
    host.appendChild(box);
    var state = {view: 0};

    function draw() {
      var view = spec.views[state.view], jobs = [], drawing = state.view;
      box.removeAttribute("data-drawn-view");
      Array.prototype.forEach.call(grid.querySelectorAll(".js-plotly-plot"), function (gd) { Plotly.purge(gd); });
      while (grid.firstChild) grid.removeChild(grid.firstChild);
      grid.className = "panels n" + Math.min(view.panels.length, 3);
      var divs = view.panels.map(function (p, i) {  /* lay every panel out first, so each is drawn at its width */
        var cell = el("div", {"class": "panel"}), div = el("div", {"class": "plot", "data-panel": String(i)});
        if (p.title) cell.appendChild(el("div", {"class": "panel-title"}, p.title));
        cell.appendChild(div);
        grid.appendChild(cell);
        return div;
      });
      view.panels.forEach(function (p, i) {
        var div = divs[i];
        var cfg = Object.assign({}, CONFIG, {modeBarButtonsToAdd: [svgButton(spec.id + "-" + i)],
                                             toImageButtonOptions: Object.assign({}, CONFIG.toImageButtonOptions,
                                                                                 {filename: spec.id + "-" + i})});
        jobs.push(Plotly.newPlot(div, p.data, p.layout, cfg));
      });
      Array.prototype.forEach.call(pick.querySelectorAll("button"), function (b, i) {
        b.className = i === state.view ? "on" : "";
      });
      return Promise.all(jobs).then(function () {
        if (state.view === drawing) box.setAttribute("data-drawn-view", String(drawing));
        return view.panels.length;
      });
    }

    if (spec.views.length > 6) {
      var sel = el("select", {"aria-label": spec.title});
      spec.views.forEach(function (v, i) { sel.appendChild(el("option", {value: String(i)}, v.name)); });
      sel.addEventListener("change", function () { state.view = Number(sel.value); draw(); });
      pick.appendChild(sel);
    } else if (spec.views.length > 1) {
      spec.views.forEach(function (v, i) {
        var b = el("button", {type: "button"}, v.name);
        b.addEventListener("click", function () { state.view = i; draw(); });
        pick.appendChild(b);
      });
    }
    return draw();
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

  Array.prototype.forEach.call(document.querySelectorAll("table.data"), sortable);
  /* charts in a collapsed section were drawn at a guessed width: fit them when it opens */
  Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) {
    d.addEventListener("toggle", function () {
      if (d.open) Array.prototype.forEach.call(d.querySelectorAll(".js-plotly-plot"), function (gd) { Plotly.Plots.resize(gd); });
    });
  });
  var data = JSON.parse(document.getElementById("report-data").textContent), jobs = [];
  if (typeof Plotly === "undefined") data.charts = [];
  data.charts.forEach(function (spec) {
    var host = document.getElementById("charts-" + spec.section);
    if (host) jobs.push(chart(spec, host));
  });
  Promise.all(jobs).then(function (counts) {
    document.body.setAttribute("data-charts-ready", String(counts.reduce(function (a, b) { return a + b; }, 0)));
  }, function (err) {
    document.body.setAttribute("data-charts-error", String(err));
    console.error(err);
  });
})();
