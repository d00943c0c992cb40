/* quantbench report: draws the embedded figures with the embedded plotly.js. No network. */
(function () {
  "use strict";
  var state = { drawn: 0, expected: 0, failures: [] };
  window.qbReport = state;

  function esc(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }

  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    var a = Math.abs(v);
    if (a === 0) return "0";
    var digits = Math.max(0, 2 - Math.floor(Math.log10(a)));
    return v.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: 0 });
  }

  var data = JSON.parse(document.getElementById("qb-data").textContent);
  var config = {
    displaylogo: false,
    responsive: true,
    toImageButtonOptions: { format: "svg" },
    modeBarButtonsToRemove: ["sendDataToCloud", "lasso2d", "select2d"],
  };

  function draw(el, fig, options) {
    var layout = Object.assign({}, fig.layout, { template: data.template });
    return Plotly.react(el, fig.data, layout, options || config).then(
      function () {
        if (el.dataset.drawn !== "1") state.drawn += 1;
        el.dataset.drawn = "1";
        el.dataset.traces = String(fig.data.length);
      },
      function (err) {
        state.failures.push(el.id + ": " + err);
      }
    );
  }

  var charts = document.querySelectorAll(".qb-chart");
  state.expected = charts.length;

  // One view (figures, groups, explorer points) per workload; the workload select swaps them.
  var wlSel = document.getElementById("qb-workload");
  function view() {
    var name = wlSel ? wlSel.value : data.workloads[0];
    return data.views[name] || { figures: {}, groups: {}, explorer: null };
  }

  // Figures drawn per workload.
  function drawFigures() {
    document.querySelectorAll(".qb-chart[data-figure]").forEach(function (el) {
      var fig = view().figures[el.dataset.figure];
      if (fig) draw(el, fig);
      else state.failures.push(el.id + ": no figure " + el.dataset.figure);
    });
  }

  // Figures chosen with a <select>: one precomputed figure per option and workload.
  var groupShows = [];
  document.querySelectorAll("select[data-group]").forEach(function (sel) {
    var el = document.getElementById(sel.dataset.target);
    function show() {
      var group = view().groups[sel.dataset.group] || {};
      var fig = group[sel.value];
      if (fig) draw(el, fig);
    }
    sel.addEventListener("change", show);
    groupShows.push(show);
  });

  // Explorer: any two measures, Pareto front recomputed for the chosen directions.
  var ex = data.explorer;
  var exEl = document.getElementById("chart-explorer");
  var renderExplorer = function () {};
  if (ex && exEl) {
    var selX = document.getElementById("explorer-x");
    var selY = document.getElementById("explorer-y");
    var selC = document.getElementById("explorer-color");
    var palette = data.palette;

    var dominates = function (a, b, dx, dy) {
      var sx = dx === "max" ? 1 : -1;
      var sy = dy === "max" ? 1 : -1;
      var ge = sx * a[0] >= sx * b[0] && sy * a[1] >= sy * b[1];
      var gt = sx * a[0] > sx * b[0] || sy * a[1] > sy * b[1];
      return ge && gt;
    };

    renderExplorer = function () {
      var x = selX.value, y = selY.value, by = selC.value;
      var mx = ex.metrics[x], my = ex.metrics[y];
      var points = (view().explorer || { points: [] }).points;
      var pts = points.filter(function (p) {
        return p[x] !== null && p[x] !== undefined && p[y] !== null && p[y] !== undefined;
      });
      var groups = {};
      pts.forEach(function (p) {
        var key = String(p[by]);
        (groups[key] = groups[key] || []).push(p);
      });
      var names = Object.keys(groups).sort();
      var traces = names.map(function (name, i) {
        var g = groups[name];
        var color = palette[i % palette.length];
        return {
          type: "scatter", mode: "markers", name: esc(name),
          x: g.map(function (p) { return p[x]; }),
          y: g.map(function (p) { return p[y]; }),
          marker: {
            size: 11, color: color, line: { width: 2, color: color },
            symbol: g.map(function (p) { return p.passed === false ? "circle-open" : "circle"; }),
          },
          hovertext: g.map(function (p) {
            return "<b>" + esc(p.pair) + "</b><br>" + esc(p.workload) + ": setting " +
              esc(p.server_point) + ", load " + esc(p.load_point) + "<br>" + esc(mx.label) +
              ": " + fmt(p[x]) + "<br>" + esc(my.label) + ": " + fmt(p[y]) + "<br>" +
              (p.passed === false ? "not ranked: " + esc(p.flags) :
               p.passed === true ? "ranked" : "no SLO");
          }),
          hoverinfo: "text",
        };
      });
      var eligible = pts.filter(function (p) { return p.passed !== false; });
      var front = eligible.filter(function (p) {
        return !eligible.some(function (q) {
          return q !== p && dominates([q[x], q[y]], [p[x], p[y]], mx.better, my.better);
        });
      }).sort(function (a, b) { return a[x] - b[x] || a[y] - b[y]; });
      if (front.length) {
        traces.push({
          type: "scatter", mode: "lines+markers", name: "Pareto front",
          x: front.map(function (p) { return p[x]; }),
          y: front.map(function (p) { return p[y]; }),
          line: { color: "rgba(60,60,60,0.6)", dash: "dot", width: 2 },
          marker: { size: 16, symbol: "circle-open", color: "rgba(60,60,60,0.8)", line: { width: 2 } },
          hoverinfo: "skip",
        });
      }
      var title = function (m) { return esc(m.label + (m.unit ? " (" + m.unit + ")" : "")); };
      var arrow = function (m) { return m.better === "max" ? " ↑ better" : " ↓ better"; };
      draw(exEl, {
        data: traces,
        layout: {
          title: { text: esc(my.label) + " vs " + esc(mx.label), x: 0.01, font: { size: 15 } },
          xaxis: { title: { text: title(mx) + arrow(mx) }, zeroline: false },
          yaxis: { title: { text: title(my) + arrow(my) }, zeroline: false },
          height: 460, margin: { l: 70, r: 20, t: 50, b: 60 },
          legend: { orientation: "h", y: -0.18, x: 0 }, hovermode: "closest",
        },
      });
    };
    [selX, selY, selC].forEach(function (s) { s.addEventListener("change", renderExplorer); });
  }

  function drawAll() {
    if (wlSel) {
      document.querySelectorAll(".qb-workload-name").forEach(function (el) {
        el.textContent = wlSel.value;
      });
    }
    drawFigures();
    groupShows.forEach(function (show) { show(); });
    renderExplorer();
  }
  if (wlSel) wlSel.addEventListener("change", drawAll);
  // The first screen: one chart per workload, all at once (the workload select leaves them).
  document.querySelectorAll(".qb-chart[data-overview]").forEach(function (el) {
    var v = data.views[el.dataset.overview];
    if (v && v.overview) draw(el, v.overview, Object.assign({}, config, { displayModeBar: false }));
    else state.failures.push(el.id + ": no overview of " + el.dataset.overview);
  });
  drawAll();

  // Sortable tables: click a header; numbers sort by their data-sort value.
  document.querySelectorAll("table.sortable th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var table = th.closest("table");
      var index = Array.prototype.indexOf.call(th.parentNode.children, th);
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var asc = th.dataset.order !== "asc";
      table.querySelectorAll("th").forEach(function (h) { delete h.dataset.order; });
      th.dataset.order = asc ? "asc" : "desc";
      var key = function (row) {
        var cell = row.cells[index];
        if (!cell) return "";
        var v = cell.dataset.sort;
        if (v !== undefined && v !== "" && !isNaN(Number(v))) return Number(v);
        return cell.textContent.trim().toLowerCase();
      };
      rows.sort(function (a, b) {
        var ka = key(a), kb = key(b);
        if (ka === kb) return 0;
        if (typeof ka === "number" && typeof kb === "number") return asc ? ka - kb : kb - ka;
        return asc ? (String(ka) < String(kb) ? -1 : 1) : (String(ka) < String(kb) ? 1 : -1);
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });

  // Printing: every collapsed section open, charts fitted to the page.
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
    document.querySelectorAll(".qb-chart").forEach(function (el) {
      if (el.dataset.drawn === "1") Plotly.Plots.resize(el);
    });
  });
})();
