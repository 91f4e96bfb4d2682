/* The timeline's panels (used by static/timeline.js): lazy loading, drawing, the shared crosshair, zoom.
 *
 * A panel is fetched when it comes within 300 px of the screen and first drawn (Plotly) only when it is on
 * the screen: the first screen's panels are fetched first and are the only ones drawn on load; a panel
 * fetched ahead keeps its figure (data-state "pending") until it is scrolled to. A panel once drawn is
 * kept up to date wherever it is (a zoom, a selected finding), as it was fetched near the screen. */
(function () {
  "use strict";

  var CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };
  var TOOLS = window.StepwiseTimelineTools; // static/timeline_tools.js
  var VIEW = window.StepwiseTimelineView; // static/timeline_view.js
  var hooks = { openFinding: function () {} }; // set by static/timeline.js

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

  function bind(region, st, plot) {
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
        var shift = st.x === "time-local" ? VIEW.tzMinutes() * 60000 : 0;
        st.start = String((toMs(a) - shift) / 1000);
        st.end = String((toMs(b) - shift) / 1000);
        reloadAll(region, st);
      }
    });
    plot.on("plotly_click", function (ev) {
      if (ev.points && ev.points.length) TOOLS.pickPlace(region, st.x, ev.points[0].x, VIEW.tzMinutes());
    });
    plot.on("plotly_clickannotation", function (ev) {
      var marks = (plot.layout.meta && plot.layout.meta.marks) || [];
      var mark = marks[ev.index];
      if (mark && mark.finding_id) hooks.openFinding(region, mark.finding_id);
    });
  }

  /* Show a panel's figure: its texts at once; the chart now if the panel is on the screen or already drawn,
   * else when it is scrolled to. */
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
      el._pending = null;
      if (window.Plotly && plot.data) Plotly.purge(plot);
      delete plot.dataset.plotted;
      plot.innerHTML = '<p class="muted timeline-message">' + VIEW.esc(meta.message || "No data in this range.") + "</p>";
      plot.dataset.state = meta.mode === "unavailable" ? "unavailable" : "empty";
      return;
    }
    if (!el._onScreen && !plot.dataset.plotted) {
      el._pending = figure;
      plot.dataset.state = "pending";
      return;
    }
    el._pending = null;
    render(region, st, el, plot, figure);
  }

  function render(region, st, el, plot, figure) {
    var meta = figure.layout.meta || {};
    if (!plot.dataset.plotted) {
      // a message or an error is shown there: start a fresh chart
      if (window.Plotly && plot.data) Plotly.purge(plot);
      delete plot.dataset.bound;
      plot.innerHTML = "";
    }
    // On the step axis the hover names a whole step (a step is an integer; the figure's points may not be)
    // and when the job reached it.
    TOOLS.stepClock(figure);
    TOOLS.touchScroll(figure, plot);
    plot.dataset.state = "drawing";
    VIEW.whenPlotly(function () {
      Plotly.react(plot, figure.data, figure.layout, CONFIG).then(function () {
        return TOOLS.plotRoom(plot);
      }).then(function () {
        return TOOLS.layoutLabels(plot);
      }).then(function () {
        return TOOLS.yRange(el, plot);
      }).then(function () {
        return TOOLS.fitChrome(plot);
      }).then(function () {
        plot.dataset.state = "drawn";
        plot.dataset.plotted = "1";
        plot.dataset.xmode = meta.xmode;
        highlight(plot, st.hosts);
        if (!plot.dataset.bound) {
          plot.dataset.bound = "1";
          bind(region, st, plot);
        }
      });
    });
  }

  function loadPanel(region, st, el, extra) {
    var plot = el.querySelector(".timeline-plot");
    var gen = (el._gen || 0) + 1;
    el._gen = gen;
    el.dataset.loading = "1";
    // The panel's width: the server asks Prometheus for no more points than it can show (2 px a point).
    var width = Math.round(plot.clientWidth || 0);
    var more = Object.assign(width ? { w: String(width) } : {}, extra || {});
    var url = el.dataset.panel === "promql"
      ? region.dataset.promqlUrl + "?" + VIEW.params(region, st, Object.assign({ q: st.promql }, more))
      : region.dataset.panelUrl.replace("PANEL", el.dataset.panel) + "?" + VIEW.params(region, st, more);
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
        el._pending = null;
        plot.dataset.state = err.retryAfter ? "busy" : "error";
        delete plot.dataset.plotted;
        plot.innerHTML = '<p class="alert alert-error">' + VIEW.esc(err.message) +
          (err.retryAfter ? " Trying again in " + err.retryAfter + " s…" : "") + "</p>";
        if (err.retryAfter) {
          setTimeout(function () {
            if (gen === el._gen) loadPanel(region, st, el, extra);
          }, err.retryAfter * 1000);
        }
        return null;
      });
  }

  /* Fetch every stale panel near the screen: those on it first, then those just below or above it. */
  function loadVisible(region, st) {
    var near = Array.prototype.filter.call(region.querySelectorAll(".timeline-panel"), function (el) {
      return !el.hidden && el._stale && el._near;
    });
    near.sort(function (a, b) { return (b._onScreen ? 1 : 0) - (a._onScreen ? 1 : 0); }); // stable: page order
    near.forEach(function (el) {
      el._stale = false;
      var extra = el._extra;
      loadPanel(region, st, el, extra).then(function (body) {
        if (body && extra) {
          // A zoom given in steps: the server resolved it to times; the URL keeps times.
          st.start = String(body.start);
          st.end = String(body.end);
          region.querySelectorAll(".timeline-panel").forEach(function (p) { p._extra = null; });
          VIEW.writeState(st);
          VIEW.showRange(region, st);
        }
      });
    });
  }

  function reloadAll(region, st, extra) {
    VIEW.writeState(st);
    VIEW.showRange(region, st);
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

  /* Watch the panels: fetch those within 300 px of the screen, draw those on it. */
  function observe(region, st) {
    // Created first, so that its callbacks run first: a panel is known to be on the screen before the
    // panels near it are fetched, and the first screen's panels are asked for first.
    var onScreen = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) {
        var el = e.target;
        el._onScreen = e.isIntersecting;
        if (el._onScreen && el._pending) {
          var figure = el._pending;
          el._pending = null;
          render(region, st, el, el.querySelector(".timeline-plot"), figure);
        }
      });
    });
    var near = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) { e.target._near = e.isIntersecting; });
      loadVisible(region, st);
    }, { rootMargin: "300px 0px" });
    region.querySelectorAll(".timeline-panel").forEach(function (el) {
      el._stale = true;
      onScreen.observe(el);
      near.observe(el);
    });
  }

  window.StepwiseTimelinePanels = {
    hooks: hooks, loadPanel: loadPanel, loadVisible: loadVisible, reloadAll: reloadAll, applyPanels: applyPanels,
    observe: observe, CONFIG: CONFIG,
  };
})();
