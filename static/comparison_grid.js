/* Small multiples of an investigation's jobs (templates/investigations/comparison_grid.html): each cell is
 * one job's timeline panel on its own step axis; once a row is drawn, every cell of it gets the row's one
 * x-range (the union of the jobs' steps) and one y-range (the union of each cell's steady range, as the
 * timeline computes it: checkpoint spikes clipped). Plain JS, no build step; Plotly is vendored. */
(function () {
  "use strict";

  var CONFIG = { displaylogo: false, responsive: true, displayModeBar: false };
  var PHONE = "(max-width: 640px)"; // as static/stepwise.css, which stacks the jobs there
  var TOOLS = window.StepwiseTimelineTools; // static/timeline_tools.js: stepClock, steadyRange

  function whenPlotly(fn) {
    if (window.Plotly) fn();
    else setTimeout(function () { whenPlotly(fn); }, 50);
  }

  function fail(plot, text) {
    plot.textContent = "";
    var p = document.createElement("p");
    p.className = "muted small";
    p.textContent = text;
    plot.appendChild(p);
    plot.dataset.state = "error";
  }

  function drawCell(grid, panel, cell) {
    var plot = cell.querySelector(".sm-plot");
    var url = grid.dataset.panelUrl.replace("PANEL", panel) + "?" + new URLSearchParams({ job: cell.dataset.job, x: "step" });
    return fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) {
        return r.json().then(function (body) {
          if (!r.ok) throw new Error(body.error || r.statusText);
          return body.figure;
        });
      })
      .then(function (figure) {
        if (!figure.data.length) return fail(plot, (figure.layout.meta || {}).message || "No data.");
        var layout = figure.layout;
        // A cell is small: the row names the panel, the column the job; marks keep their lines, not labels.
        layout.title = { text: "" };
        layout.annotations = [];
        layout.height = window.matchMedia(PHONE).matches ? 160 : 220; // a phone stacks the jobs: shorter cells
        layout.margin = { l: 50, r: 8, t: 10, b: 30 };
        layout.showlegend = false;
        TOOLS.stepClock(figure);
        TOOLS.touchScroll(figure, plot);
        return new Promise(function (done) {
          whenPlotly(function () {
            plot.textContent = "";
            Plotly.newPlot(plot, figure.data, layout, CONFIG).then(function () {
              plot.dataset.state = "drawn";
              done();
            });
          });
        });
      })
      .catch(function (err) { fail(plot, err.message); });
  }

  function union(ranges) {
    var lo = Math.min.apply(null, ranges.map(function (r) { return r[0]; }));
    var hi = Math.max.apply(null, ranges.map(function (r) { return r[1]; }));
    return [lo, hi];
  }

  function align(row) {
    var plots = Array.prototype.filter.call(row.querySelectorAll(".sm-plot"), function (p) {
      return p.dataset.state === "drawn";
    });
    if (!plots.length) return Promise.resolve();
    var x = union(plots.map(function (p) { return p._fullLayout.xaxis.range.slice(); }));
    var y = union(plots.map(function (p) {
      var steady = TOOLS.steadyRange(p);
      return steady ? steady.range : p._fullLayout.yaxis.range.slice();
    }));
    return Promise.all(plots.map(function (p) {
      return Plotly.relayout(p, { "xaxis.range": x, "yaxis.range": y, "xaxis.autorange": false, "yaxis.autorange": false });
    })).then(function () {
      row.dataset.aligned = "1";
    });
  }

  function init() {
    var grid = document.getElementById("small-multiples");
    if (!grid || !grid.dataset.panelUrl) return;
    // Row after row (each row's cells in parallel): every job's Prometheus serves one panel at a time.
    var rows = Array.prototype.slice.call(grid.querySelectorAll(".sm-row[data-panel]"));
    rows.reduce(function (prev, row) {
      return prev.then(function () {
        var cells = Array.prototype.slice.call(row.querySelectorAll(".sm-cell"));
        return Promise.all(cells.map(function (c) { return drawCell(grid, row.dataset.panel, c); }))
          .then(function () { return align(row); });
      });
    }, Promise.resolve());
  }

  document.addEventListener("DOMContentLoaded", init);
})();
