// Basin's web console (docs/console.md): a single page, plain ES modules, talking
// only to the public REST API with the signed-in caller's own permissions.
import * as auth from "./auth.js";
import { call, permissions, setUnauthenticatedHandler } from "./api.js";
import { h, field, showError, submitting } from "./ui.js";
import { routes } from "./pages.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const scope = document.getElementById("scope");
const projectInput = document.getElementById("project");
const locationSelect = document.getElementById("location");

const SCOPE = "basin.console.scope";
let ctx = null; // {project, location, parent, perms, can(p)}
let stop = []; // what the current page runs (timers), stopped when it changes

// A sign-in link's code arrives in the fragment (#signin=CODE&project=P&location=L),
// which never reaches a server or its logs; it is taken out of the address bar
// (and the history) at once, before anything else runs.
function takeLink() {
  if (!location.hash.startsWith("#signin=")) return null;
  const p = new URLSearchParams(location.hash.slice(1));
  history.replaceState(null, "", location.pathname + "#/");
  return p;
}

// signInWithLink signs in with a link's code and shows the console.
async function signInWithLink(p) {
  ctx = null;
  try {
    auth.signOut();
    await auth.signInWithCode(p.get("signin"));
  } catch (err) {
    signInPage(err.message);
    return;
  }
  await start({ project: p.get("project") || "", location: p.get("location") || "" }).catch((err) => signInPage(err.message));
}

function savedScope() {
  try {
    return JSON.parse(sessionStorage.getItem(SCOPE) || "{}");
  } catch {
    return {};
  }
}

setUnauthenticatedHandler(() => {
  auth.signOut();
  signInPage("Your session has ended: sign in again.");
});

function stopPage() {
  stop.forEach((f) => f());
  stop = [];
}

function signInPage(message) {
  stopPage();
  nav.hidden = true;
  scope.hidden = true;
  const fileId = "keyfile";
  const form = h("form", { class: "card signin", "aria-labelledby": "signin-title", onsubmit: (e) => {
    e.preventDefault();
    submitting(form, async () => {
      const file = form.elements.keyFile.files[0];
      if (!file) throw Object.assign(new Error("Choose a key file."), { fields: { keyFile: "Choose a key file." } });
      try {
        await auth.signInWithKeyFile(await file.text());
      } catch (err) {
        throw Object.assign(err, { fields: err.fields || { keyFile: err.message } });
      }
      await start({ project: form.elements.project.value.trim() });
    });
  } },
  h("h1", { id: "signin-title" }, "Sign in to Basin"),
  message && h("p", { class: "form-error", role: "alert" }, message),
  h("div", { class: "field" },
    h("label", { for: fileId }, "Service-account key file"),
    h("input", { id: fileId, name: "keyFile", type: "file", accept: ".json,application/json", required: true, "aria-describedby": "keyfile-hint" }),
    h("p", { class: "hint", id: "keyfile-hint" },
      "Read here, in your browser: the key never leaves this page. The owner can also run ", h("code", {}, "basin console"),
      " on the server for a one-time sign-in link.")),
  field("Project", { name: "project", value: savedScope().project || "", placeholder: "from the key file, or default", autocomplete: "off" }),
  h("div", { class: "actions" }, h("button", { class: "primary", type: "submit" }, "Sign in")));
  main.replaceChildren(form);
  form.elements.keyFile.focus();
}

// start sets the project and location, learns the caller's permissions there and
// shows the page the address names.
async function start(pick = {}) {
  const s = auth.current();
  const saved = savedScope();
  const project = pick.project || saved.project || s.project || "default";
  const perms = await permissions(project);
  let locations = [];
  if (perms.has("netapp.locations.list")) {
    locations = (await call("GET", `/v1/projects/${encodeURIComponent(project)}/locations`)).locations || [];
  }
  const ids = locations.map((l) => l.locationId);
  const loc = [pick.location, saved.location].find((l) => l && (ids.includes(l) || !ids.length)) || ids[0] || "local";
  ctx = {
    project, location: loc, perms,
    parent: `/v1/projects/${encodeURIComponent(project)}/locations/${encodeURIComponent(loc)}`,
    can: (p) => perms.has(p),
    onStop: (f) => stop.push(f),
  };
  sessionStorage.setItem(SCOPE, JSON.stringify({ project, location: loc }));
  projectInput.value = project;
  locationSelect.replaceChildren(...(ids.length ? ids : [loc]).map((l) => h("option", { value: l, selected: l === loc }, l)));
  document.getElementById("who").textContent = s.principal;
  for (const a of nav.querySelectorAll("a")) a.hidden = !ctx.can(a.dataset.perm);
  nav.hidden = false;
  scope.hidden = false;
  route();
}

async function route() {
  if (!ctx) return;
  stopPage();
  const hash = location.hash.startsWith("#/") ? location.hash.slice(2) : "";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query || "");
  let page = routes.find((r) => r.match(parts));
  if (!page) {
    location.replace("#/" + (ctx.can("netapp.volumes.list") ? "volumes" : "pools"));
    return;
  }
  for (const a of nav.querySelectorAll("a")) {
    if (a.getAttribute("href") === "#/" + parts[0]) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const view = h("div", { class: "page", "aria-busy": "true" });
  main.replaceChildren(view);
  try {
    await page.render(ctx, view, parts, params);
  } catch (err) {
    if (err.status !== 401) view.replaceChildren(h("h1", {}, "Something went wrong"), h("p", { class: "form-error", role: "alert" }, err.message));
  }
  view.removeAttribute("aria-busy");
  // Move focus to the new page's heading, for keyboard and screen-reader users.
  const h1 = view.querySelector("h1");
  if (h1) {
    h1.tabIndex = -1;
    h1.focus({ preventScroll: true });
    document.title = h1.textContent + " · Basin";
  }
}

window.addEventListener("hashchange", () => {
  const link = takeLink(); // a link opened in a tab already on the console
  if (link) signInWithLink(link);
  else if (location.hash.startsWith("#/")) route();
});

document.getElementById("scope-form").addEventListener("submit", (e) => {
  e.preventDefault();
  start({ project: projectInput.value.trim(), location: locationSelect.value }).catch((err) => showError(e.target, err));
});
locationSelect.addEventListener("change", () => start({ project: ctx.project, location: locationSelect.value }));
document.getElementById("signout").addEventListener("click", () => {
  auth.signOut();
  ctx = null;
  sessionStorage.removeItem(SCOPE);
  signInPage("You are signed out.");
});

(async () => {
  const link = takeLink();
  if (link) {
    await signInWithLink(link);
    return;
  }
  if (!auth.current()) {
    signInPage();
    return;
  }
  start().catch((err) => signInPage(err.message));
})();
