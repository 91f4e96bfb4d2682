/* Timeline panels (templates/investigations/_timeline.html): lazy loading, shared x-axis, zoom re-query,
 * the view in the URL, pinning, finding selection. Plain JS, no build step; Plotly is vendored. */
(function () {
  "use strict";

  var CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };
  var XMODES = ["step", "time-utc", "time-local"];
  var current = null; // {region, st}: the timeline on this page
  var TOOLS = window.StepwiseTimelineTools; // static/timeline_tools.js, loaded before this file

  function whenPlotly(fn) {
    if (window.Plotly) fn();
    else setTimeout(function () { whenPlotly(fn); }, 50);
  }

  function esc(text) {
    var div = document.createElement("div");
    div.textContent = String(text);
    return div.innerHTML;
  }

  function list(text) {
    return (text || "").split(",").map(function (s) { return s.trim(); }).filter(Boolean);
  }

  function tzMinutes() {
    return -new Date().getTimezoneOffset();
  }

  function zoneName() {
    var m = tzMinutes();
    if (!m) return "UTC";
    var a = Math.abs(m);
    function two(n) { return (n < 10 ? "0" : "") + n; }
    return "UTC" + (m > 0 ? "+" : "-") + two(Math.floor(a / 60)) + ":" + two(a % 60);
  }

  function csrfToken() {
    try {
      return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
    } catch (e) {
      return "";
    }
  }

  /* ---- pinned charts: drawn from their stored figure, no data source needed ---- */

  function renderPinned(root) {
    root.querySelectorAll(".timeline-pinned").forEach(function (fig) {
      var plot = fig.querySelector(".timeline-pinned-plot");
      var script = fig.querySelector('script[type="application/json"]');
      if (!plot || !script || plot.dataset.drawn) return;
      var figure = JSON.parse(script.textContent);
      TOOLS.stepClock(figure);
      plot.dataset.drawn = "1";
      whenPlotly(function () {
        Plotly.newPlot(plot, figure.data, figure.layout, CONFIG).then(function () {
          plot.dataset.state = "drawn";
        });
      });
    });
  }

  /* ---- the view, kept in the URL so that a link opens the same view ---- */

  function readState(region) {
    var q = new URLSearchParams(location.search);
    var defaults = list(region.dataset.defaultPanels);
    var asked = list(q.get("panels")).filter(function (p) { return defaults.indexOf(p) >= 0; });
    return {
      defaults: defaults,
      panels: asked.length ? asked : defaults.slice(),
      start: q.get("start") || "",
      end: q.get("end") || "",
      x: XMODES.indexOf(q.get("x")) >= 0 ? q.get("x") : "step",
      hosts: list(q.get("hosts")),
      promql: q.get("q") || "", // a free PromQL panel's expression
      // Other jobs of the investigation drawn over the panels by step: only those the toolbar offers.
      compare: list(q.get("compare")).filter(function (c) { return compareChoices(region).indexOf(c) >= 0; }),
    };
  }

  function compareChoices(region) {
    return boxValues(region, "timeline-compare", false);
  }

  /* The values of the toolbar's checkboxes named `name`: all of them, or only the ticked ones. */
  function boxValues(region, name, checkedOnly) {
    return Array.prototype.filter
      .call(region.querySelectorAll('input[name="' + name + '"]'), function (x) { return !checkedOnly || x.checked; })
      .map(function (x) { return x.value; });
  }

  function writeState(st) {
    var q = new URLSearchParams(location.search);
    function set(k, v) { if (v) q.set(k, v); else q.delete(k); }
    set("panels", st.panels.join(",") === st.defaults.join(",") ? "" : st.panels.join(","));
    set("start", st.start);
    set("end", st.end);
    set("x", st.x);
    set("hosts", st.hosts.join(","));
    set("compare", st.compare.join(","));
    set("q", st.promql);
    var qs = q.toString();
    history.replaceState(null, "", location.pathname + (qs ? "?" + qs : "") + location.hash);
  }

  function params(region, st, extra) {
    var q = new URLSearchParams();
    if (region.dataset.job) q.set("job", region.dataset.job);
    q.set("x", st.x);
    if (st.start) q.set("start", st.start);
    if (st.end) q.set("end", st.end);
    if (st.x === "time-local") q.set("tz", String(tzMinutes()));
    if (st.hosts.length) q.set("hosts", st.hosts.join(","));
    if (st.compare.length) q.set("compare", st.compare.join(","));
    Object.keys(extra || {}).forEach(function (k) { q.set(k, extra[k]); });
    return q;
  }

  function showRange(region, st) {
    var out = region.querySelector(".timeline-range");
    if (!out) return;
    if (!st.start || !st.end) { out.textContent = "whole job"; return; }
    // In the chosen zone, as the axes are: local time when the x-axis shows local time, else UTC.
    var shift = st.x === "time-local" ? tzMinutes() * 60000 : 0;
    function fmt(s) { return new Date(parseFloat(s) * 1000 + shift).toISOString().replace("T", " ").slice(0, 19); }
    out.textContent = fmt(st.start) + " – " + fmt(st.end) + " " + (shift ? zoneName() : "UTC");
  }

  /* ---- panels ---- */

  function highlight(plot, hosts) {
    if (!plot.data || !plot.data.length) return;
    var opacity = plot.data.map(function (t) {
      var m = t.meta || {};
      // Only host and GPU series fade: a job-wide series (step time, loss) and the band stay readable.
      if (!hosts.length || !m.host || ["min", "median", "max", "compare", "clipped", "clock"].indexOf(m.role) >= 0) return 1;
      return hosts.indexOf(m.host) >= 0 ? 1 : 0.2;
    });
    var width = plot.data.map(function (t) {
      var m = t.meta || {};
      var base = (t.line && t.line.width) || 1.2;
      return hosts.length && hosts.indexOf(m.host) >= 0 ? Math.max(base, 3) : base;
    });
    Plotly.restyle(plot, { opacity: opacity, "line.width": width });
  }

  function toMs(value) {
    if (typeof value === "number") return value;
    return new Date(String(value).replace(" ", "T") + "Z").getTime();
  }

  /* ---- shared crosshair: hovering one panel draws a vertical line at the same x on every drawn panel ---- */

  var crossFrame = 0;

  function crosshair(region, x) {
    cancelAnimationFrame(crossFrame);
    crossFrame = requestAnimationFrame(function () {
      region.querySelectorAll(".timeline-panel:not([hidden]) .timeline-plot[data-state='drawn']").forEach(function (p) {
        var line = p.querySelector(".timeline-crosshair");
        if (!line) {
          line = document.createElement("div");
          line.className = "timeline-crosshair";
          line.setAttribute("aria-hidden", "true");
          p.appendChild(line);
        }
        var fl = p._fullLayout, xa = fl && fl.xaxis;
        var px = x === null || !xa ? NaN : xa.l2p(xa.d2l(x));
        if (!isFinite(px) || px < 0 || px > xa._length) {
          line.hidden = true;
          delete line.dataset.x;
          return;
        }
        line.hidden = false;
        line.dataset.x = String(x);
        line.style.left = fl._size.l + px + "px";
        line.style.top = fl._size.t + "px";
        line.style.height = fl._size.h + "px";
      });
    });
  }

  function bind(region, st, el, plot) {
    plot.on("plotly_hover", function (ev) {
      if (ev.points && ev.points.length) crosshair(region, ev.points[0].x);
    });
    plot.on("plotly_unhover", function () { crosshair(region, null); });
    plot.on("plotly_relayout", function (ev) {
      if (ev["xaxis.autorange"]) {
        st.start = st.end = "";
        reloadAll(region, st);
        return;
      }
      var a = ev["xaxis.range[0]"], b = ev["xaxis.range[1]"];
      if (a === undefined || b === undefined) return;
      if (st.x === "step") {
        reloadAll(region, st, { sfrom: a, sto: b });
      } else {
        var shift = st.x === "time-local" ? tzMinutes() * 60000 : 0;
        st.start = String((toMs(a) - shift) / 1000);
        st.end = String((toMs(b) - shift) / 1000);
        reloadAll(region, st);
      }
    });
    plot.on("plotly_click", function (ev) {
      if (ev.points && ev.points.length) TOOLS.pickPlace(region, st.x, ev.points[0].x, tzMinutes());
    });
    plot.on("plotly_clickannotation", function (ev) {
      var marks = (plot.layout.meta && plot.layout.meta.marks) || [];
      var mark = marks[ev.index];
      if (mark && mark.finding_id) openFinding(region, mark.finding_id);
    });
  }

  function draw(region, st, el, figure) {
    var plot = el.querySelector(".timeline-plot");
    var meta = figure.layout.meta || {};
    var names = (meta.outliers || []).map(function (o) { return o.name; });
    el.querySelector(".timeline-outliers").textContent = names.length ? "outliers: " + names.join(", ") : "";
    // Why a compared job is not drawn (no data source, no such signal, a time axis), and the panel's own
    // message when only compared jobs are drawn.
    var notes = (meta.notes || []).slice();
    if (figure.data.length && meta.message) notes.unshift(meta.message);
    var noteEl = el.querySelector(".timeline-notes");
    if (noteEl) noteEl.textContent = notes.join(" ");
    el.dataset.mode = meta.mode || "";
    if (!figure.data.length) {
      if (window.Plotly && plot.data) Plotly.purge(plot);
      plot.innerHTML = '<p class="muted timeline-message">' + esc(meta.message || "No data in this range.") + "</p>";
      plot.dataset.state = meta.mode === "unavailable" ? "unavailable" : "empty";
      return;
    }
    if (plot.dataset.state !== "drawn") plot.innerHTML = "";
    // On the step axis the hover names a whole step (a step is an integer; the figure's points may not be)
    // and when the job reached it.
    TOOLS.stepClock(figure);
    whenPlotly(function () {
      Plotly.react(plot, figure.data, figure.layout, CONFIG).then(function () {
        return TOOLS.layoutLabels(plot);
      }).then(function () {
        return TOOLS.yRange(el, plot);
      }).then(function () {
        plot.dataset.state = "drawn";
        plot.dataset.xmode = meta.xmode;
        highlight(plot, st.hosts);
        if (!plot.dataset.bound) {
          plot.dataset.bound = "1";
          bind(region, st, el, plot);
        }
      });
    });
  }

  function loadPanel(region, st, el, extra) {
    var plot = el.querySelector(".timeline-plot");
    var gen = (el._gen || 0) + 1;
    el._gen = gen;
    el.dataset.loading = "1";
    var url = el.dataset.panel === "promql"
      ? region.dataset.promqlUrl + "?" + params(region, st, Object.assign({ q: st.promql }, extra || {}))
      : region.dataset.panelUrl.replace("PANEL", el.dataset.panel) + "?" + params(region, st, extra);
    return fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) {
        return r.json().then(function (body) {
          if (!r.ok) {
            var err = new Error(body.error || r.statusText);
            // The machine serves its cap of TSDB copies: ask again after Retry-After, as the region does.
            if (body.busy) err.retryAfter = Number(r.headers.get("Retry-After")) || 5;
            throw err;
          }
          return body;
        });
      })
      .then(function (body) {
        if (gen !== el._gen) return null; // a newer request for this panel won
        delete el.dataset.loading;
        el.dataset.bytes = String(JSON.stringify(body).length);
        draw(region, st, el, body.figure);
        return body;
      })
      .catch(function (err) {
        if (gen !== el._gen) return null;
        delete el.dataset.loading;
        plot.dataset.state = err.retryAfter ? "busy" : "error";
        plot.innerHTML = '<p class="alert alert-error">' + esc(err.message) +
          (err.retryAfter ? " Trying again in " + err.retryAfter + " s…" : "") + "</p>";
        if (err.retryAfter) {
          setTimeout(function () {
            if (gen === el._gen) loadPanel(region, st, el, extra);
          }, err.retryAfter * 1000);
        }
        return null;
      });
  }

  function loadVisible(region, st) {
    region.querySelectorAll(".timeline-panel").forEach(function (el) {
      if (el.hidden || !el._stale || !el._visible) return;
      el._stale = false;
      var extra = el._extra;
      loadPanel(region, st, el, extra).then(function (body) {
        if (body && extra) {
          // A zoom given in steps: the server resolved it to times; the URL keeps times.
          st.start = String(body.start);
          st.end = String(body.end);
          region.querySelectorAll(".timeline-panel").forEach(function (p) { p._extra = null; });
          writeState(st);
          showRange(region, st);
        }
      });
    });
  }

  function reloadAll(region, st, extra) {
    writeState(st);
    showRange(region, st);
    region.querySelectorAll(".timeline-panel").forEach(function (el) {
      el._stale = true;
      el._extra = extra || null;
    });
    loadVisible(region, st);
  }

  function applyPanels(region, st) {
    region.querySelectorAll(".timeline-panel").forEach(function (el) {
      el.hidden = el.dataset.panel === "promql" ? !st.promql : st.panels.indexOf(el.dataset.panel) < 0;
    });
    region.querySelectorAll(".timeline-domain:not(.timeline-promql)").forEach(function (d) {
      d.hidden = !d.querySelector(".timeline-panel:not([hidden])");
    });
  }

  /* ---- notes: a click on a chart picks the note's place; the panels redraw when the list changes ---- */

  document.addEventListener("htmx:afterSwap", function (ev) {
    var target = ev.detail && ev.detail.target;
    if (!current || !target || target.id !== "timeline-notes" || !ev.detail.xhr || ev.detail.xhr.status !== 200) return;
    reloadAll(current.region, current.st);
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
    reloadAll(region, st);
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
    var body = params(region, st, { panel: button.dataset.panel });
    button.disabled = true;
    fetch(region.dataset.pinUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), "HX-Request": "true", "Content-Type": "application/x-www-form-urlencoded" },
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

  function initRegion(region) {
    if (region._init || !region.dataset.panelUrl) return;
    region._init = true;
    var st = readState(region);
    current = { region: region, st: st };
    region.querySelectorAll(".timeline-zone").forEach(function (z) { z.textContent = zoneName(); });
    region.querySelectorAll('input[name="timeline-x"]').forEach(function (r) {
      r.checked = r.value === st.x;
      r.addEventListener("change", function () {
        st.x = r.value;
        reloadAll(region, st);
      });
    });
    region.querySelectorAll('input[name="timeline-panel"]').forEach(function (c) {
      c.checked = st.panels.indexOf(c.value) >= 0;
      c.addEventListener("change", function () {
        st.panels = boxValues(region, "timeline-panel", true);
        applyPanels(region, st);
        writeState(st);
        loadVisible(region, st);
      });
    });
    region.querySelectorAll('input[name="timeline-compare"]').forEach(function (c) {
      c.checked = st.compare.indexOf(c.value) >= 0;
      c.addEventListener("change", function () {
        st.compare = boxValues(region, "timeline-compare", true);
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
        reloadAll(region, st);
      });
    });
    // A free PromQL panel: the expression runs against the job's own source, on the same axis.
    TOOLS.promqlForm(region, st, function (el) {
      applyPanels(region, st);
      writeState(st);
      if (st.promql) loadPanel(region, st, el);
    });
    var reset = region.querySelector(".timeline-reset");
    if (reset) reset.addEventListener("click", function () {
      st.start = st.end = "";
      reloadAll(region, st);
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
    applyPanels(region, st);
    showRange(region, st);
    showSelection(region, st);
    writeState(st);
    var observer = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) { e.target._visible = e.isIntersecting; });
      loadVisible(region, st);
    }, { rootMargin: "300px 0px" });
    region.querySelectorAll(".timeline-panel").forEach(function (el) {
      el._stale = true;
      observer.observe(el);
    });
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
      esc((ev.detail.xhr && ev.detail.xhr.status) || "no answer") + "). Reload the page to try again.</div>";
  }
  document.addEventListener("htmx:responseError", regionFailed);
  document.addEventListener("htmx:sendError", regionFailed);

  document.addEventListener("DOMContentLoaded", function () { init(document.body); });
  document.addEventListener("htmx:load", function (ev) { init(ev.detail.elt); });
})();
