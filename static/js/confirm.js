// Forms marked data-confirm="question" ask first in a <dialog>. Confirming adds
// confirmed=yes, which the server wants before acting; without this script the server
// shows its own confirm page instead (dashboard/confirm.py), so nothing acts unasked.
(function () {
  "use strict";

  let dialog = null;
  let pending = null;

  function build() {
    dialog = document.createElement("dialog");
    dialog.id = "confirm-dialog";
    dialog.className = "confirm-dialog";
    const text = document.createElement("p");
    text.className = "confirm-question";
    const form = document.createElement("form");
    form.method = "dialog";
    const cancel = document.createElement("button");
    cancel.value = "cancel";
    cancel.className = "secondary";
    cancel.textContent = "Cancel";
    const ok = document.createElement("button");
    ok.value = "ok";
    ok.className = "danger";
    ok.id = "confirm-ok";
    ok.textContent = "Confirm";
    form.append(cancel, " ", ok);
    dialog.append(text, form);
    document.body.append(dialog);
    dialog.addEventListener("close", () => {
      const target = pending;
      pending = null;
      if (dialog.returnValue !== "ok" || !target) return;
      const flag = document.createElement("input");
      flag.type = "hidden";
      flag.name = "confirmed";
      flag.value = "yes";
      target.append(flag);
      target.requestSubmit ? target.requestSubmit() : target.submit();
    });
  }

  document.addEventListener(
    "submit",
    (event) => {
      const form = event.target;
      if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
      if (form.querySelector("input[name=confirmed]")) return; // already confirmed
      event.preventDefault();
      event.stopImmediatePropagation(); // htmx must not send it either
      if (!dialog) build();
      dialog.querySelector(".confirm-question").textContent = form.dataset.confirm;
      const ok = dialog.querySelector("#confirm-ok");
      ok.textContent = form.dataset.confirmButton || "Confirm";
      pending = form;
      dialog.returnValue = "";
      dialog.showModal();
      ok.focus();
    },
    true,
  );
})();
