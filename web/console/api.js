// The REST API, as the signed-in caller (the NetApp Volumes v1 REST API and Basin's
// own paths, docs/api.md).
import { bearer } from "./auth.js";

// ApiError is an API error answer (Google APIs' {"error": {...}} body): status,
// message, and the fields a BadRequest names (fields: {field path: description}).
export class ApiError extends Error {
  constructor(status, body) {
    const e = body?.error || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.status || "";
    this.fields = {};
    for (const d of e.details || []) {
      for (const v of d.fieldViolations || []) this.fields[v.field] = v.description;
    }
  }
}

let onUnauthenticated = () => {};
export function setUnauthenticatedHandler(f) {
  onUnauthenticated = f;
}

export async function call(method, path, { query, body } = {}) {
  const token = await bearer();
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let url = path;
  if (query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== "") q.set(k, v);
    if ([...q].length) url += "?" + q;
  }
  const res = await fetch(url, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit", cache: "no-store",
  });
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    data = null;
  }
  if (!res.ok) {
    const err = new ApiError(res.status, data);
    if (res.status === 401) onUnauthenticated(err);
    throw err;
  }
  return data;
}

// listAll follows nextPageToken to the end.
export async function listAll(path, field, query = {}) {
  const out = [];
  let pageToken = "";
  do {
    const page = await call("GET", path, { query: { ...query, pageToken } });
    out.push(...(page[field] || []));
    pageToken = page.nextPageToken || "";
  } while (pageToken);
  return out;
}

// wait polls an operation until it is done, calling progress with it each time;
// it returns the operation's response or throws its error.
export async function wait(op, progress = () => {}) {
  for (let delay = 300; !op.done; delay = Math.min(delay * 1.5, 3000)) {
    progress(op);
    await new Promise((r) => setTimeout(r, delay));
    op = await call("GET", "/v1/" + op.name);
  }
  progress(op);
  if (op.error) {
    const e = new Error(op.error.message || "The operation failed.");
    e.operation = op;
    throw e;
  }
  return op.response;
}

// The permissions the console's pages and buttons need, asked of the API once per
// project (testIamPermissions answers which of them the caller holds).
export const PERMISSIONS = [
  "netapp.locations.list",
  "netapp.storagePools.list", "netapp.storagePools.create", "netapp.storagePools.update", "netapp.storagePools.delete",
  "netapp.volumes.list", "netapp.volumes.get", "netapp.volumes.create", "netapp.volumes.update", "netapp.volumes.delete", "netapp.volumes.revert",
  "netapp.snapshots.list", "netapp.snapshots.create", "netapp.snapshots.delete",
  "netapp.activeDirectories.list", "netapp.activeDirectories.create", "netapp.activeDirectories.update", "netapp.activeDirectories.delete",
  "netapp.operations.list", "netapp.operations.cancel",
  "basin.metrics.get",
];

export async function permissions(project) {
  const res = await call("POST", `/v1/projects/${encodeURIComponent(project)}:testIamPermissions`, { body: { permissions: PERMISSIONS } });
  return new Set(res.permissions || []);
}
