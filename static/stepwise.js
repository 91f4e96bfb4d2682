/* Behaviour that used to sit in inline handlers: the Content-Security-Policy allows scripts from the
 * app's own static files only (no inline script, no eval), so the pages wire it here by data attributes.
 *
 * - [data-use-path]: a "Use" link of the folder browser puts its path into the job-directory field.
 * - [data-copy-previous]: a "Copy" button copies the text of the element just before it.
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
})();
