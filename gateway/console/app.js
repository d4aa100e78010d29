// The admin console: sign-in, then one page at a time over /admin/v1 (docs/console.md).
import { ApiError, signIn, signOut, whoAmI } from "./api.js";
import { clear, h } from "./dom.js";
import { keysPage } from "./keys.js";
import * as oidc from "./oidc.js";
import { auditPage, spendPage, statsPage } from "./reports.js";
import { teamsPage } from "./teams.js";

const PAGES = { keys: keysPage, teams: teamsPage, spend: spendPage, stats: statsPage, audit: auditPage };
// What each role's API allows (docs/console.md, Roles): the pages it sees, whether it may write.
const ROLES = {
  admin: { pages: ["keys", "teams", "spend", "stats", "audit"], writeKeys: true, writeTeams: true },
  team_admin: { pages: ["keys", "teams", "spend", "stats", "audit"], writeKeys: true, writeTeams: false },
  viewer: { pages: ["spend", "stats"], writeKeys: false, writeTeams: false },
};
const $ = (id) => document.getElementById(id);

function status(message, kind) {
  clear($("status")).append(message ? h("span", { class: kind || "" }, message) : "");
}

function explain(e) {
  if (e instanceof ApiError) {
    if (e.status === 401) return "Your credential was refused (401): sign in again.";
    if (e.status === 403) return "Your role may not do this (403).";
    if (e.status === 404) return "Not found (404): " + e.message;
    return e.message + (e.param ? " (" + e.param + ")" : "") + " [" + e.status + "]";
  }
  return String(e.message || e);
}

const ctx = { me: null, can: null, status };

ctx.run = async (fn) => {
  try {
    await fn();
  } catch (e) {
    status(explain(e), "error");
    if (e instanceof ApiError && e.status === 401) leave();
  }
};

ctx.show = (name) => ctx.run(async () => {
  for (const b of $("nav").querySelectorAll("button")) {
    if (b.dataset.page === name) b.setAttribute("aria-current", "page");
    else b.removeAttribute("aria-current");
  }
  const root = $("page");
  root.setAttribute("aria-busy", "true");
  try {
    await PAGES[name](root, ctx);
  } finally {
    root.removeAttribute("aria-busy");
  }
});

function leave() {
  signOut();
  ctx.me = null;
  $("page").hidden = true;
  clear($("page"));
  $("nav").hidden = true;
  $("signout").hidden = true;
  clear($("who"));
  $("signin").hidden = false;
}

async function enter(credential) {
  signIn(credential);
  let me;
  try {
    me = await whoAmI();
  } catch (e) {
    leave();
    status(explain(e), "error");
    return;
  }
  const role = ROLES[me.role] || ROLES.viewer;
  ctx.me = me;
  ctx.can = role;
  for (const b of $("nav").querySelectorAll("button")) b.hidden = !role.pages.includes(b.dataset.page);
  $("who").textContent = me.name + " · " + me.role + (me.team ? " · team " + me.team : "");
  $("signin").hidden = true;
  $("nav").hidden = false;
  $("signout").hidden = false;
  $("page").hidden = false;
  status("");
  await ctx.show(role.pages[0]);
  $("main").focus();
}

async function boot() {
  const config = await fetch("/admin/config.json", { credentials: "omit" }).then((r) => r.json()).catch(() => ({}));
  $("keyform").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = $("adminkey");
    const secret = input.value.trim();
    input.value = ""; // out of the DOM: the secret lives in api.js's memory only
    if (secret) enter(secret);
  });
  $("signout").addEventListener("click", () => { leave(); status("Signed out.", "ok"); });
  for (const b of $("nav").querySelectorAll("button")) {
    b.addEventListener("click", () => { status(""); ctx.show(b.dataset.page); });
  }
  if (config.oidc) {
    $("sso").hidden = false;
    $("ssobutton").addEventListener("click", () => oidc.start(config.oidc).catch((e) => status(explain(e), "error")));
    if (location.pathname === "/admin/callback") {
      try {
        await enter(await oidc.finish(config.oidc));
      } catch (e) {
        status(explain(e), "error");
      }
      return;
    }
  }
  if (location.pathname !== "/admin/") history.replaceState(null, "", "/admin/");
  $("adminkey").focus();
}

boot();
