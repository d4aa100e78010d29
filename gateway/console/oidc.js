// Sign-in through the IdP: OpenID Connect authorization code with PKCE (RFC 7636) as a public client.
// The browser leaves the page for the IdP, so the one-time verifier and state wait in sessionStorage
// (this tab only) and are removed at the callback, before the code is exchanged; the access token
// itself is kept in memory only, as an admin key is.
const PENDING = "gateway-console-pkce";

function b64url(bytes) {
  let bin = "";
  for (const b of new Uint8Array(bytes)) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomString() {
  return b64url(crypto.getRandomValues(new Uint8Array(32)));
}

async function discover(issuer) {
  const resp = await fetch(issuer.replace(/\/$/, "") + "/.well-known/openid-configuration",
    { credentials: "omit", referrerPolicy: "no-referrer" });
  if (!resp.ok) throw new Error("the identity provider's discovery document: HTTP " + resp.status);
  return resp.json();
}

export function redirectUri() {
  return location.origin + "/admin/callback";
}

export async function start(oidc) {
  const doc = await discover(oidc.issuer);
  const verifier = randomString();
  const state = randomString();
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  const scopes = ["openid"];
  if ((doc.scopes_supported || []).includes("groups")) scopes.push("groups");
  sessionStorage.setItem(PENDING, JSON.stringify({ verifier, state, token_endpoint: doc.token_endpoint }));
  const url = new URL(doc.authorization_endpoint);
  const params = { response_type: "code", client_id: oidc.client_id, redirect_uri: redirectUri(),
    scope: scopes.join(" "), state, code_challenge: challenge, code_challenge_method: "S256" };
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  location.assign(url.toString());
}

// At /admin/callback: the code and state out of the address at once, then the exchange.
export async function finish(oidc) {
  const params = new URLSearchParams(location.search);
  history.replaceState(null, "", "/admin/");
  const pending = JSON.parse(sessionStorage.getItem(PENDING) || "null");
  sessionStorage.removeItem(PENDING);
  // The state first, an error answer's too (RFC 6749 §4.1.2.1 sends it back): a link anyone can make to
  // /admin/callback?error=... must not put its own words on this page.
  if (!pending || params.get("state") !== pending.state) {
    throw new Error("this sign-in was not started here (state mismatch); sign in again");
  }
  if (params.get("error")) throw new Error("the identity provider refused: " + params.get("error"));
  if (!params.get("code")) throw new Error("the identity provider gave no code; sign in again");
  const body = new URLSearchParams({ grant_type: "authorization_code", code: params.get("code"),
    redirect_uri: redirectUri(), client_id: oidc.client_id, code_verifier: pending.verifier });
  const resp = await fetch(pending.token_endpoint, { method: "POST", body, credentials: "omit",
    referrerPolicy: "no-referrer" });
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok || typeof data.access_token !== "string") {
    throw new Error("the identity provider did not give a token (HTTP " + resp.status + ")");
  }
  return data.access_token;
}
