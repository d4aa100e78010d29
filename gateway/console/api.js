// The one way to /admin/v1: the credential lives in this module's memory only (never a URL, cookie
// or browser storage), so closing or reloading the tab signs out.
let credential = null;

export class ApiError extends Error {
  constructor(status, message, param) {
    super(message);
    this.status = status;
    this.param = param;
  }
}

export function signIn(secret) { credential = secret; }
export function signOut() { credential = null; }
export function signedIn() { return credential !== null; }

export async function call(method, path, body) {
  const headers = { Authorization: "Bearer " + credential };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch("/admin/v1/" + path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer",
    });
  } catch (e) {
    throw new ApiError(0, "the gateway cannot be reached");
  }
  const data = await resp.json().catch(() => null);
  if (!resp.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(resp.status, err.message || "HTTP " + resp.status, err.param);
  }
  return data;
}

// Every page of a list (`limit`, `after`, `has_more`), bounded so a huge store cannot hang the tab.
export async function listAll(path, maxPages = 20) {
  let out = [];
  let after = null;
  for (let i = 0; i < maxPages; i++) {
    const sep = path.includes("?") ? "&" : "?";
    const page = await call("GET", path + sep + "limit=1000" + (after ? "&after=" + encodeURIComponent(after) : ""));
    out = out.concat(page.data || []);
    if (!page.has_more || !page.data || !page.data.length) break;
    const last = page.data[page.data.length - 1];
    after = last.name || last.id;
  }
  return out;
}

// Who is signed in: `GET /admin/v1/me`; a gateway without it (older) knows admin keys only.
export async function whoAmI() {
  try {
    return await call("GET", "me");
  } catch (e) {
    if (e.status === 404) return { name: "admin key", role: "admin", team: null };
    throw e;
  }
}
