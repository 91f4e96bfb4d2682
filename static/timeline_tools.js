/* Stepwise timeline tools (used by static/timeline.js): label layout, a robust y-range, CSV of a panel.
 *
 * - layoutLabels(plot): the marks' labels (onsets, warm-up end, checkpoints, crash) are stacked in rows
 *   above the chart so that no two label boxes intersect; every label stays where it is on the x-axis and
 *   every finding's label stays clickable (nothing is drawn on top of it). At most 6 rows (3 on a phone):
 *   the labels that would go lower fold into the nearest one kept, which says "+N" and lists them on hover.
 * - steadyRange(plot): a y-range that follows the steady state (quartiles -/+ 3 IQR, padded), when
 *   spikes (checkpoint saves: ~100 s against a ~10 s step) would otherwise flatten it; the points beyond
 *   it are counted, so the page can say what was clipped and offer the full range.
 * - csv(plot): the panel's series as drawn, one row per point: series, x, y.
 * - stepClock(figure): on the step axis, the hover names the whole step and when the job reached it, in
 *   UTC (layout.meta.clock from the server: each drawn step and its time), as an invisible trace.
 * - pickPlace(...): a click on a chart writes its step or UTC time into the note form's place.
 * - promqlForm(region, st, redraw): the free PromQL panel's form (the expression is st.promql, q= in the URL).
 * - plotRoom(plot): a figure grows so that its plot area keeps 160 px (a phone's legend rows ate it).
 * - fitChrome(plot): the chart's own texts clear of each other: the title below Plotly's mode bar where
 *   they would share a line (a phone), the legend below the x-axis's tick labels (a date axis writes the
 *   day, "Mar 11, 2026", on a second line under its first tick, which the legend covered).
 */
(function () {
  "use strict";

  var ROW_PX = 14; // one label row (9 px font, with its padding)
  var GAP_PX = 6; // horizontal room kept between two labels on one row
  var TOP_PX = 26; // the panel title above the label rows
  var WIDE_PX = 600; // a plot area narrower than this (a phone) keeps fewer label rows
  var WIDE_ROWS = 6;
  var NARROW_ROWS = 3;

  /* Assign each box [left, right] a row: the first row whose last box ends before it (greedy by left edge). */
  function packRows(boxes) {
    var order = boxes.map(function (b, i) { return i; }).sort(function (a, b) { return boxes[a].left - boxes[b].left; });
    var ends = [];
    var rows = new Array(boxes.length);
    order.forEach(function (i) {
      var r = 0;
      while (r < ends.length && ends[r] + GAP_PX > boxes[i].left) r++;
      ends[r] = boxes[i].right;
      rows[i] = r;
    });
    return { rows: rows, count: ends.length };
  }

  function layoutLabels(plot) {
    var notes = (plot.layout && plot.layout.annotations) || [];
    if (!notes.length || !plot._fullLayout) return Promise.resolve();
    // Upright first (a slanted label is taller than a row), then measured and stacked.
    var upright = {};
    notes.forEach(function (note, i) {
      if (note.yref === "paper" && note.y >= 1 && note.textangle) upright["annotations[" + i + "].textangle"] = 0;
    });
    plot._foldedLabels = {}; // a new figure: its labels are all unfolded
    var first = Object.keys(upright).length ? Plotly.relayout(plot, upright) : Promise.resolve();
    return first.then(function () { return stackLabels(plot); });
  }

  /* Return the marks' labels above the chart: their indices in layout.annotations and their boxes. */
  function measure(plot) {
    var notes = (plot.layout && plot.layout.annotations) || [];
    var out = { boxes: [], index: [] };
    plot.querySelectorAll(".annotation").forEach(function (g) {
      var i = parseInt(g.getAttribute("data-index"), 10);
      var note = notes[i];
      if (!note || note.yref !== "paper" || note.y < 1) return; // only the marks' labels above the chart
      var box = g.getBoundingClientRect();
      if (!box.width) return;
      out.boxes.push({ left: box.left, right: box.left + box.width });
      out.index.push(i);
    });
    return out;
  }

  /* At most this many label rows above a chart (a phone's is about 270 px wide). */
  function maxRows(plot) {
    return plot._fullLayout._size.w < WIDE_PX ? NARROW_ROWS : WIDE_ROWS;
  }

  /* Return the relayout that folds the labels packed below the last row into the nearest label kept (by x):
   * they are hidden, and it says "+N" and lists them on hover. */
  function fold(plot, found, packed, limit) {
    var notes = plot.layout.annotations;
    var counts = plot._foldedLabels = plot._foldedLabels || {};
    var update = {};
    var kept = [];
    var carried = {};
    found.index.forEach(function (i, k) { if (packed.rows[k] < limit) kept.push(k); });
    found.index.forEach(function (i, k) {
      if (packed.rows[k] < limit) return;
      var left = found.boxes[k].left;
      var near = kept.reduce(function (best, j) {
        return Math.abs(found.boxes[j].left - left) < Math.abs(found.boxes[best].left - left) ? j : best;
      }, kept[0]);
      update["annotations[" + i + "].visible"] = false;
      var to = found.index[near];
      (carried[to] = carried[to] || []).push(notes[i].hovertext || notes[i].text);
      counts[to] = (counts[to] || 0) + 1 + (counts[i] || 0); // with those it carried itself
    });
    Object.keys(carried).forEach(function (i) {
      var own = notes[i].hovertext || notes[i].text;
      var more = counts[i];
      update["annotations[" + i + "].hovertext"] = [own].concat(carried[i]).join("<br>");
      update["annotations[" + i + "].text"] = notes[i].text.replace(/ \+\d+$/, "") + " +" + more;
    });
    return update;
  }

  function stackLabels(plot, round) {
    var fl = plot._fullLayout;
    if (!fl || !fl._size) return Promise.resolve();
    var found = measure(plot);
    if (!found.boxes.length) return Promise.resolve();
    var packed = packRows(found.boxes);
    var limit = maxRows(plot);
    // Too many rows for the room (a cluster of onsets on a phone): fold the lowest labels into their
    // neighbours and pack again (a longer "+N" label may push another down: a few rounds at most).
    if (packed.count > limit && (round || 0) < 4) {
      var folded = fold(plot, found, packed, limit);
      return Plotly.relayout(plot, folded).then(function () { return stackLabels(plot, (round || 0) + 1); });
    }
    // The rows live in the top margin, which grows to hold them, and the figure with it: the plot area
    // keeps its height (paper coordinates are fractions of it).
    var top = Math.max(fl.margin.t, TOP_PX + packed.count * ROW_PX + 4);
    var h = fl._size.h;
    var update = { height: fl.height + (top - fl.margin.t) };
    found.index.forEach(function (i, k) {
      update["annotations[" + i + "].y"] = 1 + (2 + packed.rows[k] * ROW_PX) / h;
      update["annotations[" + i + "].yanchor"] = "bottom";
    });
    update["margin.t"] = top;
    plot.dataset.labelRows = String(packed.count);
    return Plotly.relayout(plot, update);
  }

  function quantile(sorted, q) {
    var pos = (sorted.length - 1) * q;
    var lo = Math.floor(pos);
    var hi = Math.ceil(pos);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
  }

  /* Return {range, above, below, max, min, marks} when the steady range is much tighter than the full one, else
   * null. The steady range is Tukey's far fences (quartiles -/+ 3 interquartile ranges): checkpoint spikes
   * fall outside it however often they come, while a lasting shift (a +15 % slowdown) stays inside. */
  function steadyRange(plot) {
    var values = [];
    (plot.data || []).forEach(function (t) {
      if ((t.meta || {}).role === "compare" || helper(t) || !t.y) return;
      for (var i = 0; i < t.y.length; i++) {
        var v = t.y[i];
        if (typeof v === "number" && isFinite(v)) values.push(v);
      }
    });
    if (values.length < 20) return null;
    values.sort(function (a, b) { return a - b; });
    var min = values[0];
    var max = values[values.length - 1];
    var q1 = quantile(values, 0.25);
    var q3 = quantile(values, 0.75);
    var iqr = q3 - q1 || Math.abs(q3) * 0.05 || 1;
    var lo = Math.max(min, q1 - 3 * iqr);
    var hi = Math.min(max, q3 + 3 * iqr);
    // Worth it only when a spike would take most of the chart's height from the steady state.
    if ((max - min) < 2 * (hi - lo)) return null;
    var pad = 0.05 * (hi - lo);
    lo = Math.max(min, lo - pad);
    hi = hi + pad;
    var above = 0;
    var below = 0;
    values.forEach(function (v) { if (v > hi) above++; else if (v < lo) below++; });
    if (above + below === 0) return null;  // a flat series (all zeros): nothing to clip, the range is Plotly's
    // Where the clipped points are, drawn as marks on the edge they cross.
    var marks = { x: [], y: [] };
    (plot.data || []).forEach(function (t) {
      if ((t.meta || {}).role === "compare" || helper(t) || !t.y || !t.x) return;
      for (var i = 0; i < t.y.length; i++) {
        var v = t.y[i];
        if (typeof v !== "number" || !isFinite(v) || (v <= hi && v >= lo)) continue;
        marks.x.push(t.x[i]);
        marks.y.push(v > hi ? hi : lo);
      }
    });
    return { range: [lo, hi], above: above, below: below, max: max, min: min, marks: marks };
  }

  /* Return true for the page's own helper traces (clipped-spike marks, the step clock): not data. */
  function helper(t) {
    var role = (t.meta || {}).role;
    return role === "clipped" || role === "clock";
  }

  function utcText(seconds) {
    return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }

  function stepClock(figure) {
    var meta = figure.layout.meta || {};
    var clock = meta.clock;
    if (meta.xmode !== "step" || !clock || !clock.x || !clock.x.length) return;
    figure.data.push({
      type: "scatter", mode: "markers", name: "time", x: clock.x, y: clock.x.map(function () { return 0.5; }),
      yaxis: "y2", customdata: clock.t.map(function (t) { return "reached " + utcText(t); }),
      hovertemplate: "%{customdata}<extra></extra>", marker: { opacity: 0, size: 1 }, showlegend: false,
      meta: { role: "clock" },
    });
    figure.layout.yaxis2 = { overlaying: "y", visible: false, fixedrange: true, range: [0, 1] };
    figure.layout.xaxis = Object.assign({}, figure.layout.xaxis, {
      hoverformat: ",.0f", unifiedhovertitle: { text: "step %{x:,.0f}" },
    });
  }

  // On a touch screen a finger drawn over a chart scrolls the page (Plotly's default drag zooms, so a phone's
  // user could not scroll past a chart); hover still answers a tap, and the mode bar's zoom or pan buttons
  // give the drag back to whoever picks them (a redraw keeps that choice).
  function touchScroll(figure, plot) {
    if (!window.matchMedia("(pointer: coarse)").matches) return;
    var chosen = plot && plot.layout ? plot.layout.dragmode : undefined;
    figure.layout.dragmode = chosen === undefined ? false : chosen;
  }

  function csvCell(value) {
    var text = value === null || value === undefined ? "" : String(value);
    return /[",\n]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
  }

  function csv(plot) {
    var lines = ["series,x,y"];
    (plot.data || []).forEach(function (t) {
      if (helper(t) || !t.x) return;
      var name = t.name || (t.meta || {}).host || "";
      for (var i = 0; i < t.x.length; i++) {
        lines.push([csvCell(name), csvCell(t.x[i]), csvCell(t.y ? t.y[i] : "")].join(","));
      }
    });
    return lines.join("\n") + "\n";
  }

  /* ---- y-range: the steady state by default (spikes clipped and marked), the full range on request ---- */

  function fmtY(v) { return Math.abs(v) >= 1000 || Math.abs(v) < 0.01 ? v.toPrecision(3) : String(+v.toFixed(2)); }

  function yRange(el, plot) {
    var toggle = el.querySelector(".timeline-yrange");
    var note = el.querySelector(".timeline-clipped");
    var r = steadyRange(plot);
    el.dataset.yrange = r ? (el.dataset.yfull === "1" ? "full" : "steady") : "auto";
    if (toggle) toggle.hidden = !r;
    if (!r) {
      if (note) note.textContent = "";
      return Promise.resolve();
    }
    var full = el.dataset.yfull === "1";
    if (toggle) toggle.textContent = full ? "Steady range" : "Full range";
    if (note) {
      note.textContent = full ? "" : (r.above + r.below) + " point" + (r.above + r.below === 1 ? "" : "s") +
        " beyond the steady range clipped (▲, up to " + fmtY(r.max) + ")";
    }
    if (full) return Plotly.relayout(plot, { "yaxis.autorange": true });
    return Plotly.addTraces(plot, {
      x: r.marks.x, y: r.marks.y, mode: "markers", name: "clipped", showlegend: false, hoverinfo: "skip",
      marker: { symbol: "triangle-up", size: 7, color: "#c92a2a" }, meta: { role: "clipped" }, cliponaxis: false,
    }).then(function () {
      return Plotly.relayout(plot, { "yaxis.range": r.range, "yaxis.autorange": false });
    });
  }

  function toggleYRange(el) {
    var plot = el.querySelector(".timeline-plot");
    if (!plot || plot.dataset.state !== "drawn") return;
    el.dataset.yfull = el.dataset.yfull === "1" ? "" : "1";
    var clipped = (plot.data || []).map(function (t, i) { return (t.meta || {}).role === "clipped" ? i : -1; })
      .filter(function (i) { return i >= 0; });
    (clipped.length ? Plotly.deleteTraces(plot, clipped) : Promise.resolve()).then(function () { yRange(el, plot); });
  }

  function downloadCsv(el) {
    var plot = el.querySelector(".timeline-plot");
    if (!plot || plot.dataset.state !== "drawn") return;
    var link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([csv(plot)], { type: "text/csv" }));
    link.download = (el.dataset.panel || "panel") + ".csv";
    document.body.appendChild(link);
    link.click();
    setTimeout(function () { URL.revokeObjectURL(link.href); link.remove(); }, 0);
  }

  /* ---- the chart's own texts: title, mode bar, tick labels and legend never cover each other ---- */

  var BAR_PX = 26; // Plotly's mode bar: one row of buttons at the top right

  function overlapX(a, b) { return a.width && b.width && a.left < b.right + 4 && b.left < a.right + 4; }

  /* Return the relayout that moves the title under the mode bar, and the legend under the tick labels; the
   * figure grows by the room they take (the plot area keeps its height: paper coordinates stay right). */
  function chromeUpdate(plot) {
    var fl = plot._fullLayout;
    var update = {};
    var grow = 0;
    var title = plot.querySelector(".gtitle");
    var bar = plot.querySelector(".modebar");
    var lowered = fl.title && fl.title.y < 1 - BAR_PX / fl.height;
    if (title && bar && !lowered && overlapX(title.getBoundingClientRect(), bar.getBoundingClientRect())) {
      grow = BAR_PX;
      update["margin.t"] = fl.margin.t + BAR_PX;
      update["title.y"] = 1 - ((1 - fl.title.y) * fl.height + BAR_PX) / (fl.height + BAR_PX);
      update["title.yanchor"] = "top";
    }
    var ticks = plot.querySelector(".xaxislayer-above");
    var legend = plot.querySelector(".legend");
    if (ticks && legend && fl.showlegend !== false) {
      var below = ticks.getBoundingClientRect().bottom + 4 - legend.getBoundingClientRect().top;
      if (below > 1) {
        grow += Math.ceil(below);
        update["legend.y"] = fl.legend.y - below / fl._size.h;
      }
    }
    if (grow) update.height = fl.height + grow;
    return update;
  }

  var MIN_PLOT_PX = 160; // the plot area's least height: a phone's legend rows took it down to 100 px

  /* Grow the figure (before its labels are stacked) so that its plot area keeps MIN_PLOT_PX. */
  function plotRoom(plot) {
    var fl = plot._fullLayout;
    if (!fl || !fl._size || fl._size.h >= MIN_PLOT_PX) return Promise.resolve();
    return Plotly.relayout(plot, { height: fl.height + MIN_PLOT_PX - fl._size.h });
  }

  function fitChrome(plot, round) {
    if (!plot._fullLayout || !plot._fullLayout._size) return Promise.resolve();
    var update = chromeUpdate(plot);
    if (!Object.keys(update).length || (round || 0) >= 2) return Promise.resolve();
    return Plotly.relayout(plot, update).then(function () { return fitChrome(plot, (round || 0) + 1); });
  }

  /* ---- notes: a click on a chart picks the note's place (a step, or the time in UTC) ---- */

  function pickPlace(region, xmode, x, tzMinutes) {
    var input = region.querySelector(".timeline-note-where");
    if (!input || x === undefined || x === null) return;
    if (xmode === "step") {
      input.value = "step " + Math.round(x);
    } else {
      // The axis shows UTC or the viewer's zone as zone-less date strings; the place is written in UTC.
      var shift = xmode === "time-local" ? tzMinutes * 60000 : 0;
      var ms = typeof x === "number" ? x : new Date(String(x).replace(" ", "T") + "Z").getTime();
      input.value = new Date(ms - shift).toISOString().replace("T", " ").slice(0, 19) + " UTC";
    }
    var box = input.closest("details");
    if (box) box.open = true;
  }

  /* ---- the free PromQL panel's form: Enter (or Draw) runs it; shift-Enter is a new line ---- */

  function promqlForm(region, st, redraw) {
    var form = region.querySelector(".timeline-promql-form");
    var el = region.querySelector("#timeline-panel-promql");
    if (!form || !el) return;
    var input = form.querySelector("textarea");
    var title = el.querySelector(".timeline-panel-title");
    input.value = title.textContent = st.promql;
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      st.promql = input.value.trim();
      title.textContent = st.promql;
      redraw(el);
    });
    input.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" && !ev.shiftKey) {
        ev.preventDefault();
        form.requestSubmit();
      }
    });
  }

  window.StepwiseTimelineTools = {
    pickPlace: pickPlace, promqlForm: promqlForm,
    layoutLabels: layoutLabels, steadyRange: steadyRange, csv: csv, packRows: packRows, stepClock: stepClock,
    touchScroll: touchScroll,
    yRange: yRange, toggleYRange: toggleYRange, downloadCsv: downloadCsv, fitChrome: fitChrome, plotRoom: plotRoom,
  };
})();
