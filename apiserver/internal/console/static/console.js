// svc console: progressive enhancement only; every page works without it.
(function () {
  "use strict";
  var meta = document.querySelector('meta[name="csrf-token"]');
  document.addEventListener("htmx:configRequest", function (e) {
    if (meta) e.detail.headers["X-CSRF-Token"] = meta.content;
  });
  document.documentElement.classList.add("js");
  document.addEventListener("click", function (e) {
    var b = e.target.closest("[data-copy]");
    if (!b) return;
    var el = document.querySelector(b.getAttribute("data-copy"));
    if (!el) return;
    var text = "value" in el && el.tagName === "INPUT" ? el.value : el.textContent;
    var done = function () { b.textContent = "Copied"; setTimeout(function () { b.textContent = "Copy"; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { if (el.select) el.select(); });
    } else if (el.select) {
      el.select(); document.execCommand("copy"); done();
    }
  });
  document.addEventListener("focusin", function (e) {
    if (e.target.matches && e.target.matches("[data-select]")) e.target.select();
  });
  document.addEventListener("submit", function (e) {
    var f = e.target.closest("[data-confirm]");
    var btn = e.submitter && e.submitter.closest("[data-confirm]");
    var q = (btn || f) && (btn || f).getAttribute("data-confirm");
    if (q && !window.confirm(q)) e.preventDefault();
  }, true);
})();
