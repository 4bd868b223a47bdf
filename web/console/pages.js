// The console's pages. Each renders into view with what the caller may see, and
// offers only the actions the caller may take (ctx.can, from testIamPermissions).
import { call, listAll, wait } from "./api.js";
import { h, field, fieldError, checks, checked, submitting, confirmDialog, toast, flash, opStatus, table, copyButton, id, gib, usedGib, bytes, when, stateBadge } from "./ui.js";
import { volumeCharts } from "./charts.js";

const LEVELS = [["PREMIUM", "Premium (64 MiB/s per TiB)"], ["EXTREME", "Extreme (128 MiB/s per TiB)"], ["STANDARD", "Standard (16 MiB/s per TiB)"], ["FLEX", "Flex (16 MiB/s per TiB)"]];
const RATE = { STANDARD: 16, FLEX: 16, PREMIUM: 64, EXTREME: 128 };
const PROTOCOLS = [["NFSV3", "NFSv3"], ["NFSV4", "NFSv4.1"], ["SMB", "SMB"]];
const SMB_SETTINGS = [["ENCRYPT_DATA", "Encrypt data"], ["BROWSABLE", "Browsable"], ["NON_BROWSABLE", "Hidden"], ["CHANGE_NOTIFY", "Change notifications"],
  ["OPLOCKS", "Oplocks"], ["SHOW_SNAPSHOT", "Show snapshot folder"], ["SHOW_PREVIOUS_VERSIONS", "Previous Versions"],
  ["ACCESS_BASED_ENUMERATION", "Access-based enumeration"], ["CONTINUOUSLY_AVAILABLE", "Continuously available"]];
const ACCESS = [["READ_WRITE", "Read and write"], ["READ_ONLY", "Read only"], ["READ_NONE", "No access"]];

// refresh draws the current page again (after a change).
const refresh = () => window.dispatchEvent(new HashChangeEvent("hashchange"));
// may guards a page that needs a permission the caller lacks (an address typed in).
const may = (perm, render) => (ctx, view, ...rest) =>
  ctx.can(perm) ? render(ctx, view, ...rest) : view.append(h("h1", {}, "Not allowed"), h("p", {}, `Your account does not have ${perm} in project ${ctx.project}.`));
const link = (href, text, attrs = {}) => h("a", { href, ...attrs }, text);
const button = (text, onclick, cls = "secondary") => h("button", { type: "button", class: cls, onclick }, text);
const heading = (text, ...actions) => h("div", { class: "page-head" }, h("h1", {}, text), actions.length ? h("div", { class: "actions" }, actions) : null);

// run sends a mutating call and follows its operation in a live region.
async function run(method, path, opts, what) {
  const op = await call(method, path, opts);
  const status = document.getElementById("op-status");
  const res = await wait(op, (o) => {
    if (status) {
      status.classList.remove("ok");
      status.textContent = `${what}: ${o.done ? "done" : o.metadata?.statusMessage || "running"}…`;
    }
  });
  if (status) status.textContent = "";
  flash(`${what}: done.`);
  return res;
}

function budget(pool) {
  if (pool.customPerformanceEnabled && pool.totalThroughputMibps) return Number(pool.totalThroughputMibps);
  return (Number(pool.capacityGib) / 1024) * (RATE[pool.serviceLevel] || 0);
}
const mibps = (n) => (n === undefined || n === null || Number.isNaN(n) ? "–" : `${Number(n).toLocaleString("en", { maximumFractionDigits: 1 })} MiB/s`);

// meter shows used of total GiB; text, if given, says used in words. unknown
// (a hint) draws an empty, hatched bar: how much is used is not known.
function meter(used, total, label, text, unknown) {
  const u = Number(used || 0), t = Number(total || 0);
  return h("div", { class: "meter-wrap", title: unknown },
    h("meter", { min: 0, max: t || 1, value: unknown ? 0 : u, "aria-label": label, class: unknown ? "unknown" : undefined }),
    h("span", {}, `${text || u.toLocaleString("en") + " GiB"} of ${t.toLocaleString("en")} GiB`));
}

// volumeSpace is a volume's space meter: used bytes from the metrics API when
// known; else its usedGib, which the API rounds up to whole GiB, so 1 (anything
// from nothing to 1 GiB) is drawn as not known rather than as 1 GiB, which would
// fill the bar of a 1 GiB volume however empty.
function volumeSpace(v, used, label) {
  if (used !== null) return meter(used / 2 ** 30, v.capacityGib, label, bytes(used));
  const below1 = String(v.usedGib) === "1";
  return meter(v.usedGib, v.capacityGib, label, usedGib(v.usedGib),
    below1 ? "Somewhere up to 1 GiB: the API rounds used space up to whole GiB, and Basin has not measured it yet (it does every 10 s)." : undefined);
}

// ---- storage pools -------------------------------------------------------------

async function poolsPage(ctx, view) {
  const [pools, volumes] = await Promise.all([
    listAll(ctx.parent + "/storagePools", "storagePools"),
    ctx.can("netapp.volumes.list") ? listAll(ctx.parent + "/volumes", "volumes") : Promise.resolve(null),
  ]);
  view.append(heading("Storage pools", ctx.can("netapp.storagePools.create") && link("#/pools/new", "Create pool", { class: "button primary" })),
    opStatus());
  if (!pools.length) view.append(h("p", { class: "empty" }, "No storage pools in this location yet."));
  for (const p of pools) {
    const pid = id(p.name);
    const vols = volumes?.filter((v) => v.storagePool === pid);
    const card = h("section", { class: "card pool", "aria-labelledby": "pool-" + pid },
      h("div", { class: "card-head" }, h("h2", { id: "pool-" + pid }, pid), stateBadge(p.state)),
      h("dl", { class: "facts" },
        h("dt", {}, "Service level"), h("dd", {}, p.serviceLevel),
        h("dt", {}, "Capacity"), h("dd", {}, meter(p.volumeCapacityGib, p.capacityGib, `Capacity of ${pid} given to volumes`)),
        h("dt", {}, "Throughput budget"), h("dd", {}, mibps(budget(p)),
          p.customPerformanceEnabled ? " (custom)" : ` (${RATE[p.serviceLevel] || 0} MiB/s per TiB of capacity)`,
          p.qosType === "MANUAL" ? `; manual QoS, ${mibps(p.availableThroughputMibps)} not yet assigned` : ""),
        h("dt", {}, "Network"), h("dd", {}, id(p.network)),
        p.activeDirectory && [h("dt", {}, "Active Directory"), h("dd", {}, id(p.activeDirectory))],
        h("dt", {}, "Volumes"), h("dd", {}, vols
          ? (vols.length ? h("ul", { class: "inline" }, vols.map((v) => h("li", {}, link("#/volumes/" + id(v.name), id(v.name))))) : "none")
          : String(p.volumeCount || 0))));
    const actions = h("div", { class: "actions" });
    if (ctx.can("netapp.storagePools.update")) {
      const form = h("form", { class: "inline-form", onsubmit: (e) => {
        e.preventDefault();
        submitting(form, async () => {
          await run("PATCH", `${ctx.parent}/storagePools/${pid}`, { query: { updateMask: "capacityGib" }, body: { capacityGib: form.elements.capacityGib.value } }, `Resize ${pid}`);
          refresh();
        });
      } }, field("New capacity (GiB)", { name: "capacityGib", type: "number", min: 1, value: p.capacityGib, required: true }),
      h("button", { class: "secondary", type: "submit" }, "Resize"));
      actions.append(form);
    }
    if (ctx.can("netapp.storagePools.delete")) {
      actions.append(button(`Delete ${pid}`, async () => {
        if (!(await confirmDialog(`Delete pool ${pid}?`, "Only an empty pool can be deleted."))) return;
        try {
          await run("DELETE", `${ctx.parent}/storagePools/${pid}`, {}, `Delete ${pid}`);
          refresh();
        } catch (err) {
          toast(err.message, "error");
        }
      }, "danger"));
    }
    if (actions.childElementCount) card.append(actions);
    view.append(card);
  }
}

async function poolNewPage(ctx, view) {
  const ads = ctx.can("netapp.activeDirectories.list") ? await listAll(ctx.parent + "/activeDirectories", "activeDirectories") : [];
  const form = h("form", { class: "card", onsubmit: (e) => {
    e.preventDefault();
    const f = form.elements;
    submitting(form, async () => {
      const body = { serviceLevel: f.serviceLevel.value, capacityGib: f.capacityGib.value,
        network: `projects/${ctx.project}/global/networks/${f.network.value.trim()}`, qosType: f.qosType.value };
      if (f.activeDirectory.value) body.activeDirectory = `${ctx.parent.slice(4)}/activeDirectories/${f.activeDirectory.value}`;
      if (f.description.value) body.description = f.description.value;
      await run("POST", ctx.parent + "/storagePools", { query: { storagePoolId: f.storagePoolId.value.trim() }, body }, `Create pool ${f.storagePoolId.value}`);
      location.hash = "#/pools";
    });
  } },
  field("Pool ID", { name: "storagePoolId", required: true, autocomplete: "off", spellcheck: "false" }, "Letters, digits and hyphens, starting with a letter."),
  field("Service level", { name: "serviceLevel", options: LEVELS, value: "PREMIUM" }),
  field("Capacity (GiB)", { name: "capacityGib", type: "number", min: 1, value: 2048, required: true }),
  field("Network", { name: "network", value: "default", required: true }, "A network this Basin serves (basin serve --network)."),
  field("QoS", { name: "qosType", options: [["AUTO", "Automatic: throughput follows each volume's size"], ["MANUAL", "Manual: set each volume's throughput"]], value: "AUTO" }),
  field("Active Directory (for SMB)", { name: "activeDirectory", options: [["", "None"], ...ads.map((a) => [id(a.name), `${id(a.name)} (${a.domain})`])] }),
  field("Description", { name: "description" }),
  opStatus(),
  h("div", { class: "actions" }, link("#/pools", "Cancel", { class: "button secondary" }), h("button", { class: "primary", type: "submit" }, "Create pool")));
  view.append(heading("Create a storage pool"), form);
}

// ---- volumes -------------------------------------------------------------------

async function volumesPage(ctx, view) {
  const vols = await listAll(ctx.parent + "/volumes", "volumes");
  view.append(heading("Volumes", ctx.can("netapp.volumes.create") && link("#/volumes/new", "Create volume", { class: "button primary" })), opStatus(),
    table("Volumes", ["Volume", "Share", "Pool", "Capacity", "Used", "Service level", "Throughput", "Protocols", "State"],
      vols.map((v) => [link("#/volumes/" + id(v.name), id(v.name)), v.shareName, v.storagePool, gib(v.capacityGib), usedGib(v.usedGib),
        v.serviceLevel, mibps(v.throughputMibps), (v.protocols || []).join(", "), stateBadge(v.state)]),
      "No volumes in this location yet."));
}

function exportRuleRow(i) {
  const n = (f) => `exportPolicy.rules[${i}].${f}`;
  return h("fieldset", { class: "rule", dataset: { field: `exportPolicy.rules[${i}]` } }, h("legend", {}, `Export rule ${i + 1}`),
    field("Allowed clients", { name: n("allowedClients"), value: "", placeholder: "10.99.0.0/24,192.168.1.5" }, "IPv4 addresses and CIDRs, comma-separated: no client is let in by default."),
    field("Access", { name: n("accessType"), options: ACCESS, value: "READ_WRITE" }),
    h("label", { class: "check" }, h("input", { type: "checkbox", name: n("hasRootAccess") }), " Root keeps its rights (no root squash)"),
    h("label", { class: "check" }, h("input", { type: "checkbox", name: n("nfsv3"), checked: true }), " NFSv3"),
    h("label", { class: "check" }, h("input", { type: "checkbox", name: n("nfsv4"), checked: true }), " NFSv4.1"));
}

// poolFree is the GiB a pool has not given to volumes yet.
const poolFree = (p) => Number(p.capacityGib) - Number(p.volumeCapacityGib || 0);

async function volumeNewPage(ctx, view, _parts, params) {
  const pools = await listAll(ctx.parent + "/storagePools", "storagePools");
  const from = params.get("from") || "";
  const rules = h("div", { class: "rules" }, exportRuleRow(0));
  // The pool's free space, under Capacity, and an error there as soon as the
  // capacity asked for is more (the API would refuse it).
  const capacity = field("Capacity (GiB)", { name: "capacityGib", type: "number", min: 1, value: 100, required: true, oninput: () => checkCapacity() }, " ");
  const capacityHint = capacity.querySelector(".hint");
  const checkCapacity = (quiet = false) => {
    const pid = form.elements.storagePool.value;
    const pool = pools.find((p) => id(p.name) === pid);
    capacityHint.textContent = pool ? `Pool ${pid} has ${poolFree(pool).toLocaleString("en")} GiB free.` : "";
    const want = Number(form.elements.capacityGib.value);
    const over = pool && want > poolFree(pool) ? `Storage pool ${pid} has ${poolFree(pool).toLocaleString("en")} GiB free; this volume asks for ${want.toLocaleString("en")} GiB.` : null;
    if (!quiet || !over) fieldError(form, "capacityGib", over);
    return over;
  };
  const form = h("form", { class: "card", onsubmit: (e) => {
    e.preventDefault();
    const f = form.elements;
    submitting(form, async () => {
      const over = checkCapacity();
      if (over) throw Object.assign(new Error(over), { fields: { capacityGib: over } });
      const protocols = checked(form, "protocols");
      const body = { storagePool: f.storagePool.value, capacityGib: f.capacityGib.value, shareName: f.shareName.value.trim() || f.volumeId.value.trim(), protocols };
      if (protocols.some((p) => p.startsWith("NFS"))) {
        body.exportPolicy = { rules: [...rules.children].map((_, i) => {
          const g = (x) => f[`exportPolicy.rules[${i}].${x}`];
          return { allowedClients: g("allowedClients").value.trim(), accessType: g("accessType").value,
            hasRootAccess: g("hasRootAccess").checked ? "true" : "false", nfsv3: g("nfsv3").checked, nfsv4: g("nfsv4").checked };
        }) };
      }
      if (protocols.includes("SMB")) body.smbSettings = checked(form, "smbSettings");
      if (f.unixPermissions.value) body.unixPermissions = f.unixPermissions.value;
      body.snapshotDirectory = f.snapshotDirectory.checked;
      if (f.throughputMibps.value) body.throughputMibps = Number(f.throughputMibps.value);
      if (from) body.restoreParameters = { sourceSnapshot: from };
      if (f.description.value) body.description = f.description.value;
      const vid = f.volumeId.value.trim();
      await run("POST", ctx.parent + "/volumes", { query: { volumeId: vid }, body }, `Create volume ${vid}`);
      location.hash = "#/volumes/" + encodeURIComponent(vid);
    });
  } },
  from && h("p", { class: "note" }, "A clone of snapshot ", h("strong", {}, from.split("/volumes/")[1] || from), ": it starts with the snapshot's data."),
  field("Volume ID", { name: "volumeId", required: true, autocomplete: "off", spellcheck: "false" }, "Letters, digits and hyphens, starting with a letter."),
  field("Storage pool", { name: "storagePool", options: pools.map((p) => [id(p.name), `${id(p.name)} (${p.serviceLevel}, ${poolFree(p).toLocaleString("en")} GiB free)`]), value: params.get("pool") || "" }),
  capacity,
  field("Share name", { name: "shareName", placeholder: "the volume ID", autocomplete: "off" }, "The NFS export path and SMB share name."),
  checks("Protocols", "protocols", PROTOCOLS, ["NFSV3"]),
  h("h2", {}, "NFS export rules"),
  h("p", { class: "hint" }, "The first rule that matches a client applies; a client no rule matches cannot mount."),
  rules,
  h("button", { type: "button", class: "secondary small", onclick: () => rules.append(exportRuleRow(rules.children.length)) }, "Add a rule"),
  h("h2", {}, "SMB settings"),
  checks("SMB share settings (SMB volumes)", "smbSettings", SMB_SETTINGS, ["BROWSABLE", "CHANGE_NOTIFY", "OPLOCKS"]),
  h("h2", {}, "More"),
  field("UNIX permissions of the root", { name: "unixPermissions", placeholder: "0770", pattern: "[0-7]{3,4}" }),
  h("label", { class: "check" }, h("input", { type: "checkbox", name: "snapshotDirectory", dataset: { field: "snapshotDirectory" } }), " Show snapshots in .snapshot"),
  field("Throughput (MiB/s, manual QoS pools only)", { name: "throughputMibps", type: "number", min: 0, step: "any" }),
  field("Description", { name: "description" }),
  opStatus(),
  h("div", { class: "actions" }, link("#/volumes", "Cancel", { class: "button secondary" }), h("button", { class: "primary", type: "submit" }, from ? "Create clone" : "Create volume")));
  form.elements.storagePool.addEventListener("change", () => checkCapacity());
  view.append(heading(from ? "Clone a snapshot" : "Create a volume"), form);
  checkCapacity(true); // the pool's free space; an error only once the user acts
}

// mountCommands are copy-ready commands for one of a volume's mount options; the
// server's instructions say the rest.
export function mountCommands(mo) {
  const instr = mo.instructions || "";
  const grab = (re) => (re.exec(instr) || [])[1];
  if (mo.protocol === "SMB") {
    return [["Windows", grab(/(net use \S+ \S+ \/persistent:yes)/)], ["Linux", grab(/Linux with a password: (.*?) \(mount\.cifs/)]].filter((c) => c[1]);
  }
  const linux = grab(/Linux: (.*?) \(nconnect/) || `sudo mkdir -p /mnt/${mo.export.slice(1)} && sudo mount -t nfs ${mo.exportFull} /mnt/${mo.export.slice(1)}`;
  const out = [["Linux", linux]];
  // Windows' Client for NFS speaks NFSv3 only.
  if (mo.protocol === "NFSV3") out.push(["Windows", `mount -o anon,nolock,mtype=hard \\\\${mo.ipAddress}${mo.export.replace(/\//g, "\\")} Z:`]);
  return out;
}

function mountSection(v) {
  const sec = h("section", { class: "card", "aria-labelledby": "mount-title" }, h("h2", { id: "mount-title" }, "Mount"));
  if (!(v.mountOptions || []).length) {
    sec.append(h("p", { class: "empty" }, v.state === "READY" ? "Not shared yet." : "Mount commands appear once the volume is ready."));
    return sec;
  }
  for (const mo of v.mountOptions) {
    const block = h("div", { class: "mount" }, h("h3", {}, mo.protocol === "NFSV4" ? "NFSv4.1" : mo.protocol === "NFSV3" ? "NFSv3" : "SMB",
      " · ", h("code", {}, mo.exportFull)));
    for (const [os, cmd] of mountCommands(mo)) {
      const cid = `mount-${mo.protocol}-${os}`.toLowerCase();
      block.append(h("div", { class: "command" }, h("span", { class: "os", id: cid + "-label" }, os),
        h("pre", { id: cid, tabindex: 0, "aria-labelledby": cid + "-label" }, h("code", {}, cmd)), copyButton(cmd, `Copy the ${os} command for ${mo.protocol}`)));
    }
    block.append(h("details", {}, h("summary", {}, "Notes"), h("p", {}, mo.instructions)));
    sec.append(block);
  }
  return sec;
}

async function snapshotsSection(ctx, v, vid) {
  const sec = h("section", { class: "card", "aria-labelledby": "snap-title" }, h("h2", { id: "snap-title" }, "Snapshots"));
  if (!ctx.can("netapp.snapshots.list")) return sec.append(h("p", {}, "You may not list snapshots.")), sec;
  const snaps = await listAll(`${ctx.parent}/volumes/${vid}/snapshots`, "snapshots");
  const rows = snaps.map((s) => {
    const sid = id(s.name);
    const acts = h("div", { class: "row-actions" });
    if (ctx.can("netapp.volumes.revert")) {
      acts.append(button("Revert", async () => {
        if (!(await confirmDialog(`Revert ${vid} to ${sid}?`, `The volume's data goes back to ${when(s.createTime)}; snapshots taken after ${sid} are deleted.`, "Revert"))) return;
        try {
          await run("POST", `${ctx.parent}/volumes/${vid}:revert`, { body: { snapshotId: sid } }, `Revert ${vid} to ${sid}`);
          refresh();
        } catch (err) {
          toast(err.message, "error");
        }
      }));
    }
    if (ctx.can("netapp.volumes.create")) acts.append(link(`#/volumes/new?from=${encodeURIComponent(s.name)}&pool=${encodeURIComponent(v.storagePool)}`, "Clone", { class: "button secondary" }));
    if (ctx.can("netapp.snapshots.delete")) {
      acts.append(button("Delete", async () => {
        if (!(await confirmDialog(`Delete snapshot ${sid}?`, "Its data can no longer be restored."))) return;
        try {
          await run("DELETE", `${ctx.parent}/volumes/${vid}/snapshots/${sid}`, {}, `Delete ${sid}`);
          refresh();
        } catch (err) {
          toast(err.message, "error");
        }
      }, "danger"));
    }
    return [sid, when(s.createTime), `${(Number(s.usedBytes || 0) / 2 ** 20).toFixed(1)} MiB`, stateBadge(s.state), acts];
  });
  const acting = ["netapp.volumes.revert", "netapp.volumes.create", "netapp.snapshots.delete"].some((p) => ctx.can(p));
  sec.append(table("Snapshots of " + vid, ["Snapshot", "Taken", "Only in it", "State", ...(acting ? ["Actions"] : [])],
    acting ? rows : rows.map((r) => r.slice(0, 4)), "No snapshots yet."));
  if (ctx.can("netapp.snapshots.create")) {
    const form = h("form", { class: "inline-form", onsubmit: (e) => {
      e.preventDefault();
      submitting(form, async () => {
        const sid = form.elements.snapshotId.value.trim();
        await run("POST", `${ctx.parent}/volumes/${vid}/snapshots`, { query: { snapshotId: sid }, body: {} }, `Snapshot ${sid}`);
        refresh();
      });
    } }, field("New snapshot ID", { name: "snapshotId", required: true, autocomplete: "off", spellcheck: "false" }), h("button", { class: "primary", type: "submit" }, "Take snapshot"));
    sec.append(form);
  }
  return sec;
}

function manageSection(ctx, v, vid, pools) {
  const sec = h("section", { class: "card", "aria-labelledby": "manage-title" }, h("h2", { id: "manage-title" }, "Change"));
  if (ctx.can("netapp.volumes.update")) {
    const patch = (form, mask, value, what) => submitting(form, async () => {
      await run("PATCH", `${ctx.parent}/volumes/${vid}`, { query: { updateMask: mask }, body: { [mask]: value } }, what);
      refresh();
    });
    const resize = h("form", { class: "inline-form", onsubmit: (e) => {
      e.preventDefault();
      patch(resize, "capacityGib", resize.elements.capacityGib.value, `Resize ${vid}`);
    } }, field("Capacity (GiB)", { name: "capacityGib", type: "number", min: 1, value: v.capacityGib, required: true }), h("button", { class: "secondary", type: "submit" }, "Resize"));
    sec.append(resize);
    // Moving needs another pool: with none, say so rather than offer an empty list.
    const others = pools.filter((p) => id(p.name) !== v.storagePool);
    if (others.length) {
      const move = h("form", { class: "inline-form", onsubmit: (e) => {
        e.preventDefault();
        patch(move, "storagePool", move.elements.storagePool.value, `Move ${vid}`);
      } }, field("Move to pool", { name: "storagePool", options: others.map((p) => [id(p.name), `${id(p.name)} (${p.serviceLevel}, ${poolFree(p).toLocaleString("en")} GiB free)`]) }),
      h("button", { class: "secondary", type: "submit" }, "Move"));
      sec.append(move);
    } else {
      sec.append(h("p", { class: "hint", id: "move-none" }, `Moving to another pool: ${v.storagePool} is the only pool in this location.`));
    }
  }
  if (ctx.can("netapp.volumes.delete")) {
    const del = h("form", { class: "inline-form", onsubmit: async (e) => {
      e.preventDefault();
      if (!(await confirmDialog(`Delete volume ${vid}?`, "Its data is deleted for good.", "Delete volume"))) return;
      submitting(del, async () => {
        await run("DELETE", `${ctx.parent}/volumes/${vid}`, { query: { force: del.elements.force.checked ? "true" : "" } }, `Delete ${vid}`);
        location.hash = "#/volumes";
      });
    } }, h("label", { class: "check" }, h("input", { type: "checkbox", name: "force", dataset: { field: "force" } }), " Delete its snapshots too"),
    h("button", { class: "danger", type: "submit" }, "Delete volume"));
    sec.append(del);
  }
  return sec.childElementCount > 1 ? sec : null;
}

// usedBytes is a volume's latest usedBytes from the metrics API, or null: finer
// than the volume's usedGib, which the API rounds up to whole GiB.
async function usedBytes(ctx, vid) {
  if (!ctx.can("basin.metrics.get")) return null;
  const end = new Date();
  try {
    const res = await call("GET", `${ctx.parent}/volumes/${encodeURIComponent(vid)}/metrics`, {
      query: { metric: "usedBytes", startTime: new Date(end - 5 * 60_000).toISOString(), endTime: end.toISOString(), step: "10s" },
    });
    const last = [...(res.series?.[0]?.points || [])].reverse().find((p) => p.value !== null && p.value !== undefined);
    return last ? last.value : null;
  } catch {
    return null;
  }
}

async function volumePage(ctx, view, parts) {
  const vid = parts[1];
  const [v, used] = await Promise.all([call("GET", `${ctx.parent}/volumes/${encodeURIComponent(vid)}`), usedBytes(ctx, vid)]);
  const pools = ctx.can("netapp.volumes.update") ? await listAll(ctx.parent + "/storagePools", "storagePools") : [];
  const rules = v.exportPolicy?.rules || [];
  const space = h("dd", {}, volumeSpace(v, used, `Space used in ${vid}`));
  view.append(heading(`Volume ${vid}`), opStatus(),
    h("section", { class: "card", "aria-label": "Details" }, h("dl", { class: "facts" },
      h("dt", {}, "State"), h("dd", {}, stateBadge(v.state), v.stateDetails ? " " + v.stateDetails : ""),
      h("dt", {}, "Pool"), h("dd", {}, v.storagePool, ` (${v.serviceLevel})`),
      h("dt", {}, "Capacity"), space,
      h("dt", {}, "Throughput ceiling"), h("dd", {}, mibps(v.throughputMibps)),
      h("dt", {}, "Protocols"), h("dd", {}, (v.protocols || []).join(", ")),
      h("dt", {}, "Share name"), h("dd", {}, v.shareName),
      rules.length > 0 && [h("dt", {}, "Export rules"), h("dd", {}, h("ul", {}, rules.map((r) => h("li", {}, `${r.allowedClients}: ${r.accessType}${r.hasRootAccess === "true" ? ", root" : ""}`))))],
      (v.smbSettings || []).length > 0 && [h("dt", {}, "SMB settings"), h("dd", {}, v.smbSettings.join(", "))],
      v.cloneDetails?.sourceSnapshot && [h("dt", {}, "Cloned from"), h("dd", {}, v.cloneDetails.sourceSnapshot.split("/volumes/")[1])],
      h("dt", {}, "Created"), h("dd", {}, when(v.createTime)))),
    mountSection(v));
  // The charts read usedBytes with the rest every 10 s: the meter follows.
  if (ctx.can("basin.metrics.get")) view.append(volumeCharts(ctx, vid, (b) => space.replaceChildren(volumeSpace(v, b, `Space used in ${vid}`))));
  view.append(await snapshotsSection(ctx, v, vid));
  const manage = manageSection(ctx, v, vid, pools);
  if (manage) view.append(manage);
}

// ---- Active Directory ----------------------------------------------------------

async function adsPage(ctx, view) {
  const ads = await listAll(ctx.parent + "/activeDirectories", "activeDirectories");
  view.append(heading("Active Directory", ctx.can("netapp.activeDirectories.create") && link("#/activeDirectories/new", "Add connection", { class: "button primary" })),
    opStatus(),
    table("Active Directory connections", ["Connection", "Domain", "DNS", "NetBIOS prefix", "Site", "Join account", "State", ""],
      ads.map((a) => {
        const aid = id(a.name);
        return [aid, a.domain, a.dns, a.netBiosPrefix, a.site || "–", a.username, stateBadge(a.state),
          ctx.can("netapp.activeDirectories.delete") && button("Delete", async () => {
            if (!(await confirmDialog(`Delete ${aid}?`, "Pools that use it must be changed first."))) return;
            try {
              await run("DELETE", `${ctx.parent}/activeDirectories/${aid}`, {}, `Delete ${aid}`);
              refresh();
            } catch (err) {
              toast(err.message, "error");
            }
          }, "danger")];
      }), "No Active Directory connections: SMB volumes need one, set on their pool."));
}

function adNewPage(ctx, view) {
  const form = h("form", { class: "card", autocomplete: "off", onsubmit: (e) => {
    e.preventDefault();
    const f = form.elements;
    submitting(form, async () => {
      const body = {};
      for (const k of ["domain", "dns", "netBiosPrefix", "username", "password", "site", "organizationalUnit", "kdcHostname", "kdcIp", "description"]) {
        if (f[k].value) body[k] = f[k].value.trim();
      }
      body.aesEncryption = f.aesEncryption.checked;
      body.encryptDcConnections = f.encryptDcConnections.checked;
      await run("POST", ctx.parent + "/activeDirectories", { query: { activeDirectoryId: f.activeDirectoryId.value.trim() }, body }, "Add connection");
      location.hash = "#/activeDirectories";
    });
  } },
  field("Connection ID", { name: "activeDirectoryId", required: true, spellcheck: "false" }),
  field("Domain", { name: "domain", required: true, placeholder: "corp.example.com" }),
  field("DNS servers", { name: "dns", required: true, placeholder: "10.0.0.2,10.0.0.3" }, "The domain controllers' DNS, comma-separated."),
  field("NetBIOS prefix", { name: "netBiosPrefix", required: true, maxlength: 10 }, "Basin's computer accounts are named from it."),
  field("Join account", { name: "username", required: true }),
  field("Password", { name: "password", type: "password", required: true, autocomplete: "new-password" }, "Stored sealed; never shown again."),
  field("Site", { name: "site" }),
  field("Organizational unit", { name: "organizationalUnit", placeholder: "CN=Computers" }),
  field("KDC hostname", { name: "kdcHostname" }),
  field("KDC IP", { name: "kdcIp" }),
  h("label", { class: "check" }, h("input", { type: "checkbox", name: "aesEncryption", checked: true }), " AES Kerberos encryption"),
  h("label", { class: "check" }, h("input", { type: "checkbox", name: "encryptDcConnections", dataset: { field: "encryptDcConnections" } }), " Encrypt connections to the domain controllers"),
  field("Description", { name: "description" }),
  opStatus(),
  h("div", { class: "actions" }, link("#/activeDirectories", "Cancel", { class: "button secondary" }), h("button", { class: "primary", type: "submit" }, "Add connection")));
  view.append(heading("Add an Active Directory connection"), form);
}

// ---- operations ----------------------------------------------------------------

async function operationsPage(ctx, view) {
  const body = h("div");
  view.append(heading("Operations"), h("p", { class: "hint" }, "Every change is an operation; running ones refresh every 3 seconds."), body);
  let timer = null;
  const draw = async () => {
    const page = await call("GET", ctx.parent + "/operations", { query: { pageSize: 50 } });
    const ops = page.operations || [];
    body.replaceChildren(table("Operations, newest first", ["Operation", "What", "On", "Started", "Progress"],
      ops.map((o) => {
        const m = o.metadata || {};
        const secs = Math.max(0, ((m.endTime ? new Date(m.endTime) : new Date()) - new Date(m.createTime)) / 1000);
        let progress;
        if (!o.done) {
          progress = h("div", { class: "progress" }, h("progress", { "aria-label": `${m.verb} ${id(m.target)} running` }),
            ` ${m.statusMessage || "running"} (${secs.toFixed(0)} s)`,
            ctx.can("netapp.operations.cancel") && !m.requestedCancellation && button("Cancel", async () => {
              await call("POST", `/v1/${o.name}:cancel`, { body: {} }).catch((err) => toast(err.message, "error"));
              draw();
            }, "secondary small"));
        } else if (o.error) {
          progress = h("span", { class: "badge error" }, "Failed: " + o.error.message);
        } else {
          progress = h("span", { class: "badge ready" }, `Done in ${secs < 1 ? Math.round(secs * 1000) + " ms" : secs.toFixed(1) + " s"}`);
        }
        // The full name, which basin operations get and gcloud take as is.
        return [h("div", { class: "op-name" }, h("code", {}, o.name), copyButton(o.name, `Copy the name of operation ${id(o.name)}`)),
          m.verb, id(m.target), when(m.createTime), progress];
      }), "No operations yet."));
    if (ops.some((o) => !o.done)) timer = setTimeout(draw, 3000);
  };
  ctx.onStop(() => clearTimeout(timer));
  await draw();
}

// routes, matched in order against the path after "#/".
export const routes = [
  { match: (p) => p[0] === "pools" && p.length === 1, render: may("netapp.storagePools.list", poolsPage) },
  { match: (p) => p[0] === "pools" && p[1] === "new", render: may("netapp.storagePools.create", poolNewPage) },
  { match: (p) => p[0] === "volumes" && p.length === 1, render: may("netapp.volumes.list", volumesPage) },
  { match: (p) => p[0] === "volumes" && p[1] === "new", render: may("netapp.volumes.create", volumeNewPage) },
  { match: (p) => p[0] === "volumes" && p.length === 2, render: may("netapp.volumes.get", volumePage) },
  { match: (p) => p[0] === "activeDirectories" && p.length === 1, render: may("netapp.activeDirectories.list", adsPage) },
  { match: (p) => p[0] === "activeDirectories" && p[1] === "new", render: may("netapp.activeDirectories.create", adNewPage) },
  { match: (p) => p[0] === "operations" && p.length === 1, render: may("netapp.operations.list", operationsPage) },
];
