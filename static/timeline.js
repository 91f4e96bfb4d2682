/* Timeline panels (templates/investigations/_timeline.html): the region's start (toolbar, lazy panels),
 * pinned charts, finding selection, pinning. The view in the URL is static/timeline_view.js, the panels'
 * loading and drawing static/timeline_panels.js, the labels, y-range and tools static/timeline_tools.js,
 * all loaded before this file. Plain JS, no build step; Plotly is vendored. */
(function () {
  "use strict";

  var current = null; // {region, st}: the timeline on this page
  var TOOLS = window.StepwiseTimelineTools;
  var VIEW = window.StepwiseTimelineView;
  var PANELS = window.StepwiseTimelinePanels;
  var list = VIEW.list;

  /* ---- pinned charts: drawn from their stored figure, no data source needed ---- */

  function renderPinned(root) {
    root.querySelectorAll(".timeline-pinned").forEach(function (fig) {
      var plot = fig.querySelector(".timeline-pinned-plot");
      var script = fig.querySelector('script[type="application/json"]');
      if (!plot || !script || plot.dataset.drawn) return;
      var figure = JSON.parse(script.textContent);
      TOOLS.stepClock(figure);
      TOOLS.touchScroll(figure, plot);
      plot.dataset.drawn = "1";
      VIEW.whenPlotly(function () {
        Plotly.newPlot(plot, figure.data, figure.layout, PANELS.CONFIG).then(function () {
          return TOOLS.fitChrome(plot);
        }).then(function () {
          plot.dataset.state = "drawn";
        });
      });
    });
  }

  /* ---- notes: a click on a chart picks the note's place; the panels redraw when the list changes ---- */

  document.addEventListener("htmx:afterSwap", function (ev) {
    var target = ev.detail && ev.detail.target;
    if (!current || !target || target.id !== "timeline-notes" || !ev.detail.xhr || ev.detail.xhr.status !== 200) return;
    PANELS.reloadAll(current.region, current.st);
  });

  /* ---- findings: select one to highlight its hosts; an onset mark opens it ---- */

  function openFinding(region, id) {
    var row = document.getElementById("finding-" + id);
    if (row) {
      row.scrollIntoView({ block: "center" });
      selectFinding(row);
      var link = row.querySelector("a");
      if (link) link.click();
      return;
    }
    var url = region.dataset.findingUrl;
    if (url) location.href = url.replace(/\/0\/$/, "/" + id + "/");
  }

  function selectFinding(row) {
    if (!current) return;
    var st = current.st, region = current.region;
    var was = row.classList.contains("finding-highlight");
    document.querySelectorAll(".finding-row.finding-highlight").forEach(function (r) {
      r.classList.remove("finding-highlight");
    });
    st.hosts = was ? [] : list(row.dataset.hosts);
    if (!was) row.classList.add("finding-highlight");
    showSelection(region, st);
    PANELS.reloadAll(region, st);
  }

  function showSelection(region, st) {
    var out = region.querySelector(".timeline-selection");
    if (!out) return;
    out.hidden = !st.hosts.length;
    out.textContent = st.hosts.length ? "Highlighting " + st.hosts.join(", ") + " (select the finding again to clear)" : "";
  }

  document.addEventListener("click", function (ev) {
    var row = ev.target.closest && ev.target.closest("tr.finding-row");
    if (row && !ev.target.closest("a, button, input, select")) selectFinding(row);
  });

  /* ---- pin ---- */

  function pin(region, st, button) {
    var body = VIEW.params(region, st, { panel: button.dataset.panel });
    button.disabled = true;
    fetch(region.dataset.pinUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": VIEW.csrfToken(), "HX-Request": "true", "Content-Type": "application/x-www-form-urlencoded" },
      body: body.toString(),
    })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var old = document.getElementById("pinned-charts");
        if (old) {
          old.outerHTML = html;
          renderPinned(document);
        }
        button.textContent = "Pinned ✓";
      })
      .catch(function () { button.textContent = "Pin failed"; })
      .finally(function () { button.disabled = false; });
  }

  /* ---- start ---- */

  PANELS.hooks.openFinding = openFinding;

  function initRegion(region) {
    if (region._init || !region.dataset.panelUrl) return;
    region._init = true;
    var st = VIEW.readState(region);
    current = { region: region, st: st };
    region.querySelectorAll(".timeline-zone").forEach(function (z) { z.textContent = VIEW.zoneName(); });
    region.querySelectorAll('input[name="timeline-x"]').forEach(function (r) {
      r.checked = r.value === st.x;
      r.addEventListener("change", function () {
        st.x = r.value;
        PANELS.reloadAll(region, st);
      });
    });
    region.querySelectorAll('input[name="timeline-panel"]').forEach(function (c) {
      c.checked = st.panels.indexOf(c.value) >= 0;
      c.addEventListener("change", function () {
        st.panels = VIEW.boxValues(region, "timeline-panel", true);
        PANELS.applyPanels(region, st);
        VIEW.writeState(st);
        PANELS.loadVisible(region, st);
      });
    });
    region.querySelectorAll('input[name="timeline-compare"]').forEach(function (c) {
      c.checked = st.compare.indexOf(c.value) >= 0;
      c.addEventListener("change", function () {
        st.compare = VIEW.boxValues(region, "timeline-compare", true);
        var note = region.querySelector(".timeline-compare-note");
        if (st.compare.length && st.x !== "step") {
          // Runs are compared by training step, not by clock: switch the axis, and say so.
          st.x = "step";
          region.querySelectorAll('input[name="timeline-x"]').forEach(function (r) { r.checked = r.value === "step"; });
          if (note) {
            note.textContent = "The x-axis switched to step: compared jobs are aligned by training step.";
            note.hidden = false;
          }
        } else if (note && !st.compare.length) {
          note.hidden = true;
        }
        PANELS.reloadAll(region, st);
      });
    });
    // A free PromQL panel: the expression runs against the job's own source, on the same axis.
    TOOLS.promqlForm(region, st, function (el) {
      PANELS.applyPanels(region, st);
      VIEW.writeState(st);
      if (st.promql) PANELS.loadPanel(region, st, el);
    });
    var reset = region.querySelector(".timeline-reset");
    if (reset) reset.addEventListener("click", function () {
      st.start = st.end = "";
      PANELS.reloadAll(region, st);
    });
    region.querySelectorAll(".timeline-pin").forEach(function (b) {
      b.addEventListener("click", function () { pin(region, st, b); });
    });
    region.querySelectorAll(".timeline-yrange").forEach(function (b) {
      b.addEventListener("click", function () { TOOLS.toggleYRange(b.closest(".timeline-panel")); });
    });
    region.querySelectorAll(".timeline-csv").forEach(function (b) {
      b.addEventListener("click", function () { TOOLS.downloadCsv(b.closest(".timeline-panel")); });
    });
    PANELS.applyPanels(region, st);
    VIEW.showRange(region, st);
    showSelection(region, st);
    VIEW.writeState(st);
    PANELS.observe(region, st);
  }

  function init(root) {
    if (!root || !root.querySelectorAll) return;
    if (root.id === "timeline-region") initRegion(root);
    root.querySelectorAll("#timeline-region").forEach(initRegion);
    if (root.classList && root.classList.contains("timeline-pinned-list")) renderPinned(root.parentNode || root);
    renderPinned(root);
  }

  // The region could not be loaded (server down, network): say so instead of "Loading…" forever.
  function regionFailed(ev) {
    var target = ev.detail && ev.detail.elt;
    if (!target || target.id !== "timeline-region") return;
    target.innerHTML = '<div class="alert alert-error" role="alert">The timeline could not be loaded (' +
      VIEW.esc((ev.detail.xhr && ev.detail.xhr.status) || "no answer") + "). Reload the page to try again.</div>";
  }
  document.addEventListener("htmx:responseError", regionFailed);
  document.addEventListener("htmx:sendError", regionFailed);

  document.addEventListener("DOMContentLoaded", function () { init(document.body); });
  document.addEventListener("htmx:load", function (ev) { init(ev.detail.elt); });
})();
