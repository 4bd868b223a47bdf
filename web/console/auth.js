// Signing in (docs/console.md). Two ways:
//  - a service-account key file, read in the browser: its private key is imported
//    into WebCrypto as non-extractable and kept in memory only (never stored), and
//    signs the assertion exchanged at POST /token for access tokens (keyFileToken);
//  - a one-time sign-in link from `basin console`: its code, in the URL's fragment,
//    is exchanged once at /console/signin for a console session token.
// The access token (never the key) is kept in sessionStorage so a reload of the
// tab stays signed in until it expires; it goes when the tab closes.

const STORE = "basin.console.session";
// The scope the token endpoint asks of a grant's assertion.
const SCOPE = "https://www.googleapis.com/auth/cloud-platform";
const LIFETIME = 3600; // seconds: Basin's longest assertion lifetime

let signer = null; // {key: CryptoKey, kf: key file fields} while signed in with a key file
let session = null; // {token, expires (ms), principal, project, via}

function b64url(bytes) {
  let s = "";
  for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
const b64urlJSON = (o) => b64url(new TextEncoder().encode(JSON.stringify(o)));

// parseKeyFile checks a key file's fields and returns them; errors name the field.
export function parseKeyFile(text) {
  let kf;
  try {
    kf = JSON.parse(text);
  } catch {
    throw new Error("This file is not JSON: choose the service-account key file (.json) Basin gave you.");
  }
  for (const f of ["type", "private_key", "private_key_id", "client_email"]) {
    if (typeof kf[f] !== "string" || kf[f] === "") throw new Error(`The key file has no ${f}: is it a service-account key file?`);
  }
  if (kf.type !== "service_account") throw new Error(`The key file's type is ${kf.type}, not service_account.`);
  return kf;
}

async function importKey(pem) {
  const body = pem.replace(/-----(BEGIN|END) PRIVATE KEY-----/g, "").replace(/\s+/g, "");
  let der;
  try {
    der = Uint8Array.from(atob(body), (c) => c.charCodeAt(0));
  } catch {
    throw new Error("The key file's private_key is not a PEM private key.");
  }
  try {
    return await crypto.subtle.importKey("pkcs8", der, { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" }, false, ["sign"]);
  } catch {
    throw new Error("The key file's private_key is not an RSA private key this browser can use.");
  }
}

// keyFileToken gets an access token for the key the way Google's client
// libraries do with a key file: a JWT signed with it (RS256, its kid, the
// cloud-platform scope, audience this server's /token) is the assertion of the
// OAuth JWT-bearer grant at POST /token, which answers with a short-lived opaque
// access token. The key signs only that assertion; API calls carry the token.
async function keyFileToken(key, kf) {
  const now = Math.floor(Date.now() / 1000);
  const head = b64urlJSON({ alg: "RS256", typ: "JWT", kid: kf.private_key_id });
  const claims = b64urlJSON({ iss: kf.client_email, sub: kf.client_email, aud: location.origin + "/token", scope: SCOPE,
    iat: now, exp: now + LIFETIME });
  const input = new TextEncoder().encode(head + "." + claims);
  const sig = await crypto.subtle.sign("RSASSA-PKCS1-v1_5", key, input);
  const form = new URLSearchParams({ grant_type: "urn:ietf:params:oauth:grant-type:jwt-bearer", assertion: head + "." + claims + "." + b64url(sig) });
  const res = await fetch("/token", { method: "POST", body: form, credentials: "omit", cache: "no-store" });
  const body = await res.json().catch(() => ({}));
  if (!res.ok || typeof body.access_token !== "string") {
    throw new Error(body.error_description || body.error || `Sign-in failed (HTTP ${res.status}).`);
  }
  return { token: body.access_token, expires: Date.now() + body.expires_in * 1000 };
}

function keep(s) {
  session = s;
  sessionStorage.setItem(STORE, JSON.stringify(s));
}

export async function signInWithKeyFile(text) {
  const kf = parseKeyFile(text);
  const key = await importKey(kf.private_key);
  const t = await keyFileToken(key, kf);
  signer = { key, kf: { private_key_id: kf.private_key_id, client_email: kf.client_email } };
  keep({ ...t, principal: kf.client_email, project: kf.project_id || "", via: "key" });
  return session;
}

// signInWithCode exchanges a sign-in link's code for a console session.
export async function signInWithCode(code) {
  const res = await fetch("/console/signin", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ code }),
    credentials: "omit", cache: "no-store",
  });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error?.message || `Sign-in failed (HTTP ${res.status}).`);
  keep({ token: body.access_token, expires: Date.now() + body.expires_in * 1000, principal: body.principal, project: "", via: "link" });
  return session;
}

// current is the session, if any and not expired (a key file's is renewed).
export function current() {
  if (!session) {
    try {
      session = JSON.parse(sessionStorage.getItem(STORE) || "null");
    } catch {
      session = null;
    }
  }
  if (session && session.expires <= Date.now() + 60_000 && !signer) {
    signOut();
  }
  return session;
}

// bearer returns a valid access token, renewing a key file's before it runs out.
export async function bearer() {
  const s = current();
  if (!s) return null;
  if (signer && s.expires - Date.now() < 5 * 60_000) {
    keep({ ...s, ...(await keyFileToken(signer.key, signer.kf)) });
  }
  return session.token;
}

export function signOut() {
  const s = session;
  if (s && s.via === "link") {
    // End the console session on the server too; best effort.
    fetch("/console/signout", { method: "POST", headers: { Authorization: "Bearer " + s.token }, credentials: "omit" }).catch(() => {});
  }
  signer = null;
  session = null;
  sessionStorage.removeItem(STORE);
}
