// Small things every page does (no inline script: the Content-Security-Policy forbids it).
// 1. On a narrow screen the navigation is one row that scrolls sideways: bring the
//    current page's link into view.
// 2. On a phone, filter boxes are folded unless the URL sets a filter.
// 3. Forms marked data-unsaved-warning: once the person has typed in one, leaving the
//    page (a link, reload, closing the tab) asks first; submitting the form does not.
(function () {
  "use strict";

  function showCurrentNavLink() {
    const nav = document.querySelector(".nav");
    const current = nav && nav.querySelector("[aria-current=page]");
    if (!current || nav.scrollWidth <= nav.clientWidth) return;
    nav.scrollLeft = current.offsetLeft - (nav.clientWidth - current.offsetWidth) / 2;
  }

  // 2. On a phone a filter box is folded when the URL sets no filter: the rows come first.
  function foldFilters() {
    if (!window.matchMedia("(max-width: 640px)").matches) return;
    const params = new URLSearchParams(window.location.search);
    params.delete("page");
    if ([...params.values()].some((value) => value !== "")) return;
    document.querySelectorAll("details.filter-box[open]").forEach((box) => box.removeAttribute("open"));
  }

  // 3. Unsaved edits.
  let dirty = false;
  function watchUnsaved() {
    const forms = document.querySelectorAll("form[data-unsaved-warning]");
    if (!forms.length) return;
    forms.forEach((form) => {
      form.addEventListener("input", () => {
        dirty = true;
        document.body.classList.add("has-unsaved");
      });
      form.addEventListener("submit", () => {
        dirty = false;
      });
    });
    window.addEventListener("beforeunload", (event) => {
      if (!dirty) return;
      event.preventDefault();
      event.returnValue = ""; // older browsers show their own words; the text is not used
    });
  }

  function start() {
    showCurrentNavLink();
    foldFilters();
    watchUnsaved();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
