/* The timeline's view (used by static/timeline_panels.js and static/timeline.js): what the page shows, kept
 * in the URL so that a link opens the same view, the panel requests' parameters, and the small helpers
 * the other timeline files share (escaping, lists, the viewer's zone, the CSRF token). */
(function () {
  "use strict";

  var XMODES = ["step", "time-utc", "time-local"];

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
      compare: list(q.get("compare")).filter(function (c) { return boxValues(region, "timeline-compare", false).indexOf(c) >= 0; }),
    };
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

  window.StepwiseTimelineView = {
    whenPlotly: whenPlotly, esc: esc, list: list, tzMinutes: tzMinutes, zoneName: zoneName, csrfToken: csrfToken,
    readState: readState, boxValues: boxValues, writeState: writeState, params: params, showRange: showRange,
  };
})();
