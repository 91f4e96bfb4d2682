/* Behaviour that used to sit in inline handlers: the Content-Security-Policy allows scripts from the
 * app's own static files only (no inline script, no eval), so the pages wire it here by data attributes.
 *
 * - [data-use-path]: a "Use" link of the folder browser puts its path into the job-directory field.
 * - [data-copy-previous]: a "Copy" button copies the text of the element just before it.
 * - an action sent by htmx (a POST: a select that saves on change, a button) that the server refuses (403: a
 *   viewer's role, 4xx, 5xx) or that cannot reach it says so at the top of the page, and its form goes back
 *   to what it showed, instead of doing nothing. Regions that load themselves (GET) keep their own messages.
 */
(function () {
  "use strict";
  document.addEventListener("click", function (ev) {
    var use = ev.target.closest("[data-use-path]");
    if (use) {
      var field = document.getElementById("id_job_dir");
      if (field) {
        ev.preventDefault();
        field.value = use.dataset.path;
        field.dispatchEvent(new Event("change", { bubbles: true }));
      }
      return;
    }
    var copy = ev.target.closest("[data-copy-previous]");
    if (copy && navigator.clipboard && copy.previousElementSibling) {
      navigator.clipboard.writeText(copy.previousElementSibling.textContent);
    }
  });

  /* The server's words: a plain-text answer as it is, an error page's own text, else the status. */
  function reason(xhr) {
    if (!xhr || !xhr.status) return "Stepwise could not be reached; check the connection and try again.";
    var body = (xhr.responseText || "").trim();
    if (body && body.charAt(0) !== "<") return body.slice(0, 300);
    var page = body ? new DOMParser().parseFromString(body, "text/html").querySelector("[data-testid=error-page] p:not(.error-code)") : null;
    return (page && page.textContent.trim()) || "The server answered " + xhr.status + " " + (xhr.statusText || "") + ".";
  }

  function refused(ev) {
    var d = ev.detail || {};
    if (!d.requestConfig || String(d.requestConfig.verb).toLowerCase() === "get") return;
    var box = document.getElementById("action-error");
    if (!box) {
      box = document.createElement("div");
      box.id = "action-error";
      box.className = "msg msg-error";
      box.setAttribute("role", "alert");
      var main = document.querySelector("main") || document.body;
      main.insertBefore(box, main.firstChild);
    }
    box.textContent = "Not saved: " + reason(d.xhr);
    var form = d.elt && (d.elt.tagName === "FORM" ? d.elt : d.elt.closest("form"));
    if (form) form.reset(); // a select that saved on change shows what is stored again
  }
  document.addEventListener("htmx:responseError", refused);
  document.addEventListener("htmx:sendError", refused);
})();
