// Review queue keys: j/k move between candidates, x selects, a approves (focusing the
// reason it needs), d dismisses, o/Enter opens, ? shows the help. Rows are found on each
// key press, so rows htmx swapped in (filters, an approved row) work too.
(function () {
  "use strict";

  const rows = () => Array.from(document.querySelectorAll("#candidate-rows tr.cand"));
  let current = -1;

  function focusRow(index) {
    const all = rows();
    if (!all.length) return;
    current = Math.max(0, Math.min(index, all.length - 1));
    all.forEach((row, i) => row.classList.toggle("current", i === current));
    all[current].focus({ preventScroll: false });
    all[current].scrollIntoView({ block: "nearest" });
  }

  function currentRow() {
    const all = rows();
    const focused = document.activeElement && document.activeElement.closest("tr.cand");
    if (focused) current = all.indexOf(focused);
    return all[current] || null;
  }

  function updateCount() {
    const count = document.getElementById("selected-count");
    if (!count) return;
    const n = document.querySelectorAll("input[name=ids][form=selected-form]:checked").length;
    count.textContent = n ? `Selected rows: ${n}` : "Selected rows:";
  }

  document.addEventListener("change", (event) => {
    const box = event.target;
    if (box.id === "select-all") {
      document.querySelectorAll("input[name=ids][form=selected-form]").forEach((b) => {
        b.checked = box.checked;
      });
    }
    updateCount();
  });

  document.addEventListener("keydown", (event) => {
    if (!document.getElementById("candidate-rows")) return;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const typing = event.target.closest && event.target.closest("input, textarea, select, [contenteditable]");
    if (typing) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    const help = document.getElementById("keys-help");
    if (event.key === "?") {
      if (help.open) help.close();
      else help.showModal();
      event.preventDefault();
      return;
    }
    const row = currentRow();
    switch (event.key) {
      case "j":
        focusRow(current + 1);
        break;
      case "k":
        focusRow(current < 0 ? 0 : current - 1);
        break;
      case "x": {
        const box = row && row.querySelector("input[name=ids]");
        if (box) {
          box.checked = !box.checked;
          updateCount();
        }
        break;
      }
      case "a": {
        const note = row && row.querySelector("form[action$='/approve/'] input[name=note]");
        if (!note) return;
        // Approving overrides the gate: the reason is required, so the key asks for it
        // and Enter in the field approves.
        note.focus();
        break;
      }
      case "d": {
        const dismiss = row && row.querySelector("form[action$='/dismiss/'] button[type=submit]");
        if (dismiss) dismiss.click();
        break;
      }
      case "o":
      case "Enter": {
        const link = row && row.querySelector("a[href*='/review/']");
        if (link) link.click();
        break;
      }
      default:
        return;
    }
    event.preventDefault();
  });
})();
