// DOM helpers. Everything is built with createElement and textContent: no HTML
// strings anywhere (the page's Content-Security-Policy enforces that with Trusted
// Types), so no name or message from the API can become markup.

// h builds an element: h("button", {class: "primary", onclick: f}, "Save").
// Attributes starting with "on" are listeners; true/false toggle boolean ones.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

let seq = 0;
export const uid = (p = "f") => `${p}-${++seq}`;

// field is a labelled input: field("Capacity (GiB)", {name: "capacityGib", type: "number"}, hint).
export function field(label, attrs, hint) {
  const id = uid();
  const hintId = hint ? id + "-hint" : undefined;
  const input = attrs.options
    ? h("select", { id, name: attrs.name, required: attrs.required, "aria-describedby": hintId },
        attrs.options.map(([v, t]) => h("option", { value: v, selected: String(attrs.value ?? "") === String(v) }, t)))
    : h("input", { id, "aria-describedby": hintId, ...attrs, options: undefined });
  return h("div", { class: "field" }, h("label", { for: id }, label), input, hint && h("p", { class: "hint", id: hintId }, hint));
}

// checks is a fieldset of checkboxes named name (field errors for name show below it).
export function checks(legend, name, items, chosen = []) {
  return h("fieldset", { class: "checks", dataset: { field: name } }, h("legend", {}, legend),
    items.map(([v, t]) => h("label", {}, h("input", { type: "checkbox", name, value: v, checked: chosen.includes(v) }), " ", t)));
}

export function checked(form, name) {
  return [...form.querySelectorAll(`input[name="${name}"]:checked`)].map((i) => i.value);
}

// clearErrors removes a form's error messages.
export function clearErrors(form) {
  for (const e of form.querySelectorAll(".field-error, .form-error")) e.remove();
  for (const e of form.querySelectorAll("[aria-invalid]")) {
    e.removeAttribute("aria-invalid");
    const ids = (e.getAttribute("aria-describedby") || "").split(" ").filter((x) => x && !x.startsWith("err-"));
    if (ids.length) e.setAttribute("aria-describedby", ids.join(" "));
    else e.removeAttribute("aria-describedby");
  }
}

const sentence = (s) => (s ? s[0].toUpperCase() + s.slice(1) : s);

// placeError puts desc under the field named name (a control's name or a
// data-field) and marks its control invalid; it returns the control, or null if
// the form has no such field.
function placeError(form, name, desc) {
  const target = form.querySelector(`[data-field="${CSS.escape(name)}"]`) || form.elements.namedItem(name);
  const el = target instanceof RadioNodeList ? target[0] : target;
  if (!el) return null;
  const id = "err-" + uid();
  const msg = h("p", { class: "field-error", id, role: "alert" }, sentence(desc));
  const box = el.closest(".field") || el;
  box.append(msg);
  const control = el.matches("input, select, textarea") ? el : el.querySelector("input, select, textarea");
  if (control) {
    control.setAttribute("aria-invalid", "true");
    control.setAttribute("aria-describedby", ((control.getAttribute("aria-describedby") || "") + " " + id).trim());
  }
  return control || el;
}

// fieldError shows (text) or takes away (null) the error under one field while
// the user types, without moving the focus.
export function fieldError(form, name, text) {
  const control = form.elements.namedItem(name);
  const box = control?.closest?.(".field");
  if (!box) return;
  const shown = box.querySelector(".field-error");
  if (shown && text && shown.textContent === sentence(text)) return; // said once is enough (role=alert)
  shown?.remove();
  control.removeAttribute("aria-invalid");
  const ids = (control.getAttribute("aria-describedby") || "").split(" ").filter((x) => x && !x.startsWith("err-"));
  if (ids.length) control.setAttribute("aria-describedby", ids.join(" "));
  else control.removeAttribute("aria-describedby");
  if (text) placeError(form, name, text);
}

// showError puts an API error next to the fields it names (a BadRequest's field
// violations, or a message that starts with a field's name, "capacityGib: …", as
// Basin's failed preconditions do), and the rest at the top of the form; the
// first is focused.
export function showError(form, err, aliases = {}) {
  clearErrors(form);
  let first = null;
  let placed = false;
  let fields = err.fields || {};
  const named = /^([A-Za-z][\w.[\]]*): (.+)$/s.exec(err.message || "");
  if (!Object.keys(fields).length && named && form.elements.namedItem(aliases[named[1]] || named[1])) fields = { [named[1]]: named[2] };
  for (const [path, desc] of Object.entries(fields)) {
    const control = placeError(form, aliases[path] || path, desc);
    if (!control) continue;
    if (control.matches("input, select, textarea")) first = first || control;
    placed = true;
  }
  if (!placed) {
    form.prepend(h("p", { class: "form-error", role: "alert" }, err.message || String(err)));
    first = first || form.querySelector("input, select, textarea, button");
  }
  first?.focus();
}

// submitting runs f while the form's buttons are disabled and shows its error.
export async function submitting(form, f, aliases) {
  const buttons = [...form.querySelectorAll("button")];
  buttons.forEach((b) => (b.disabled = true));
  clearErrors(form);
  try {
    await f();
  } catch (err) {
    showError(form, err, aliases);
  } finally {
    buttons.forEach((b) => (b.disabled = false));
  }
}

// confirmDialog asks a yes/no question in a modal <dialog>; resolves true on yes.
export function confirmDialog(title, text, yes = "Delete") {
  return new Promise((resolve) => {
    const titleId = uid("dlg");
    const d = h("dialog", { "aria-labelledby": titleId },
      h("h2", { id: titleId }, title), h("p", {}, text),
      h("form", { method: "dialog", class: "actions" },
        h("button", { value: "no", class: "secondary", autofocus: true }, "Cancel"),
        h("button", { value: "yes", class: "danger" }, yes)));
    d.addEventListener("close", () => {
      resolve(d.returnValue === "yes");
      d.remove();
    });
    document.body.append(d);
    d.showModal();
  });
}

// A finished change's message goes in the page's status line (opStatus) for a
// few seconds, in the page's flow rather than over it (a toast covered the
// charts); the page drawn again after the change shows it too.
const FLASH = 8000; // ms
let flashed = null; // {text, until}

export function opStatus() {
  const el = h("p", { id: "op-status", class: "op-status", role: "status" });
  if (flashed && Date.now() < flashed.until) {
    const { text } = flashed;
    // After a frame, so that screen readers hear it in the new page.
    requestAnimationFrame(() => {
      el.textContent = text;
      el.classList.add("ok");
    });
  }
  return el;
}

export function flash(text) {
  flashed = { text, until: Date.now() + FLASH };
  const el = document.getElementById("op-status");
  if (!el) return toast(text, "ok");
  el.textContent = text;
  el.classList.add("ok");
  setTimeout(() => {
    const now = document.getElementById("op-status");
    if (now?.classList.contains("ok") && now.textContent === text) {
      now.textContent = "";
      now.classList.remove("ok");
    }
  }, FLASH);
}

// toast announces a message (role=status) for a few seconds.
export function toast(text, kind = "info") {
  const box = document.getElementById("toast");
  const t = h("p", { class: "toast " + kind }, text);
  box.append(t);
  setTimeout(() => t.remove(), 4000);
}

// table renders rows as a table with a caption (for screen readers).
export function table(caption, headers, rows, empty = "None yet.") {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h("div", { class: "table-wrap" }, h("table", {},
    h("caption", { class: "visually-hidden" }, caption),
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) => (i === 0 ? h("th", { scope: "row" }, c) : h("td", {}, c))))))));
}

export function copyButton(text, label) {
  return h("button", { type: "button", class: "secondary small", "aria-label": label, onclick: async (e) => {
    try {
      await navigator.clipboard.writeText(text);
      e.target.textContent = "Copied";
    } catch {
      e.target.textContent = "Select and copy";
    }
    setTimeout(() => (e.target.textContent = "Copy"), 2000);
  } }, "Copy");
}

export const id = (name) => (name || "").split("/").pop();

export function gib(n) {
  return n === undefined || n === null || n === "" ? "–" : `${Number(n).toLocaleString("en")} GiB`;
}

// usedGib is a volume's usedGib in words: the API rounds it up to whole GiB
// (docs/api.md), so 1 is anything from a byte to 1 GiB.
export function usedGib(n) {
  return String(n) === "1" ? "≤ 1 GiB" : gib(n);
}

// bytes in binary units, e.g. "12.3 MiB".
export function bytes(n) {
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  for (n = Number(n); n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return `${n.toLocaleString("en", { maximumFractionDigits: i && n < 100 ? 1 : 0 })} ${units[i]}`;
}

export function when(t) {
  return t ? new Date(t).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "medium" }) : "–";
}

export function stateBadge(state) {
  return h("span", { class: "badge " + String(state || "").toLowerCase() }, state || "–");
}
