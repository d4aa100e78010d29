// Keys: list, create (the secret shown once, with a copy button), change limits, rotate, revoke.
import { call, listAll } from "./api.js";
import { clear, field, h, table, text, usd } from "./dom.js";

// a new secret, shown above the list once the list is read again (then dropped: shown once)
let pendingSecret = null;

const num = (v) => (v.trim() === "" ? null : Number(v));

// The form's values as the API's fields: only what was filled in (`partial`: an edit sends blanks as null).
function limitsOf(form, partial) {
  const out = {};
  const v = (n) => form.elements[n].value;
  const put = (k, val) => { if (val !== null || partial) out[k] = val; };
  put("models", v("models").trim() ? v("models").split(",").map((m) => m.trim()).filter(Boolean) : null);
  put("rpm", num(v("rpm")));
  put("tpm", num(v("tpm")));
  put("budget_usd", num(v("budget_usd")));
  out.budget_period = v("budget_period");
  put("expires_at", v("expires_at") ? new Date(v("expires_at")).toISOString() : null);
  return out;
}

function limitInputs(prefix) {
  const period = h("select", { name: "budget_period" }, h("option", { value: "day" }, "day"),
    h("option", { value: "month" }, "month"));
  return [
    field(prefix + "-models", "Models (comma separated, empty: all)", h("input", { name: "models" })),
    field(prefix + "-rpm", "Requests per minute", h("input", { name: "rpm", type: "number", min: 1 })),
    field(prefix + "-tpm", "Tokens per minute", h("input", { name: "tpm", type: "number", min: 1 })),
    field(prefix + "-budget", "Budget (USD)", h("input", { name: "budget_usd", type: "number", min: 0, step: "any" })),
    field(prefix + "-period", "Budget period", period),
    field(prefix + "-expires", "Expires at", h("input", { name: "expires_at", type: "datetime-local" })),
  ];
}

function secretPanel(title, answer, ctx) {
  const input = h("input", { readonly: true, value: answer.key, "aria-label": "New secret for " + answer.name });
  const copy = h("button", { type: "button", class: "primary", onclick: async () => {
    input.select();
    try {
      await navigator.clipboard.writeText(answer.key);
      ctx.status("Copied to the clipboard.", "ok");
    } catch (e) {
      ctx.status("The browser refused the clipboard: select the secret and copy it.", "error");
    }
  } }, "Copy");
  return h("div", { class: "card secret", role: "region", "aria-label": "New secret" },
    h("h2", null, title), h("p", null, "Shown once: copy it now. The gateway keeps only its SHA-256."),
    input, copy);
}

function createForm(ctx, teams, onDone) {
  const teamSelect = h("select", { name: "team" }, h("option", { value: "" }, "(no team)"),
    teams.map((t) => h("option", { value: t.name }, t.name)));
  if (ctx.me.role === "team_admin") {
    clear(teamSelect).append(h("option", { value: ctx.me.team || "" }, ctx.me.team || "(no team)"));
  }
  const form = h("form", { "aria-label": "Create a key" },
    h("div", { class: "grid" },
      field("key-name", "Name", h("input", { name: "name", required: true, autocomplete: "off" })),
      field("key-team", "Team", teamSelect), ...limitInputs("key")),
    field("key-metadata", "Metadata (JSON object)", h("textarea", { name: "metadata", placeholder: "{}" })),
    h("button", { type: "submit", class: "primary" }, "Create key"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { name: form.elements.name.value.trim(), ...limitsOf(form, false) };
    if (form.elements.team.value) body.team = form.elements.team.value;
    const meta = form.elements.metadata.value.trim();
    if (meta) {
      try { body.metadata = JSON.parse(meta); } catch (e) { return ctx.status("Metadata is not valid JSON.", "error"); }
    }
    await ctx.run(async () => {
      const answer = await call("POST", "keys", body);
      form.reset();
      form.closest("details").open = false; // the secret and the list in view
      onDone(secretPanel("Key " + answer.name + " created", answer, ctx));
      ctx.status("Key " + answer.name + " created.", "ok");
    });
  });
  return h("details", { class: "card" }, h("summary", null, "Create a key"), form);
}

function editForm(ctx, key, onDone) {
  const form = h("form", { class: "card", "aria-label": "Limits of " + key.name },
    h("h2", null, "Limits of " + key.name),
    h("div", { class: "grid" }, ...limitInputs("edit")),
    h("button", { type: "submit", class: "primary" }, "Save limits"));
  const el = form.elements;
  el.models.value = (key.models || []).join(", ");
  el.rpm.value = key.rpm ?? "";
  el.tpm.value = key.tpm ?? "";
  el.budget_usd.value = key.budget_usd ?? "";
  el.budget_period.value = key.budget_period || "day";
  if (key.expires_at) el.expires_at.value = new Date(key.expires_at).toISOString().slice(0, 16);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    ctx.run(async () => {
      await call("PATCH", "keys/" + encodeURIComponent(key.name), limitsOf(form, true));
      ctx.status("Limits of " + key.name + " saved.", "ok");
      onDone(null);
    });
  });
  return form;
}

function actions(ctx, key, panel, reload) {
  const path = "keys/" + encodeURIComponent(key.name);
  const grace = h("input", { type: "number", min: 0, value: 0, class: "grace", "aria-label": "Grace seconds for " + key.name });
  const rotate = h("button", { type: "button", onclick: () => ctx.run(async () => {
    const answer = await call("POST", path + "/rotate", { grace_s: Number(grace.value || 0) });
    clear(panel).append(secretPanel("Key " + key.name + " rotated", answer, ctx));
    ctx.status("Key " + key.name + " rotated; the old secret works until " + text(answer.previous_key_expires_at) + ".", "ok");
  }) }, "Rotate");
  const revoke = h("button", { type: "button", class: "danger", onclick: () => {
    if (revoke.dataset.armed !== "1") {
      revoke.dataset.armed = "1";
      revoke.textContent = "Confirm revoke";
      return;
    }
    ctx.run(async () => {
      await call("DELETE", path);
      ctx.status("Key " + key.name + " revoked.", "ok");
      reload();
    });
  } }, "Revoke");
  const edit = h("button", { type: "button", onclick: () => {
    clear(panel).append(editForm(ctx, key, () => { clear(panel); reload(); }));
    panel.querySelector("input").focus();
  } }, "Limits");
  return h("span", null, edit, " ", h("label", { class: "inline" }, "grace s ", grace), rotate, revoke);
}

export async function keysPage(root, ctx) {
  const [keys, teams] = await Promise.all([listAll("keys"),
    ctx.me.role === "admin" ? listAll("teams").catch(() => []) : Promise.resolve([])]);
  const panel = h("div");
  if (pendingSecret) panel.append(pendingSecret);
  pendingSecret = null;
  const reload = () => ctx.show("keys");
  const columns = [
    { label: "Name", value: (k) => k.name, cls: "mono" },
    { label: "Team", value: (k) => k.team },
    { label: "Models", value: (k) => (k.models ? k.models.join(", ") : "all") },
    { label: "RPM", value: (k) => k.rpm, num: true },
    { label: "TPM", value: (k) => k.tpm, num: true },
    { label: "Budget", value: (k) => (k.budget_usd === null ? "—" : usd(k.budget_usd) + " / " + k.budget_period), num: true },
    { label: "Expires", value: (k) => k.expires_at },
    { label: "Metadata", value: (k) => h("code", null, JSON.stringify(k.metadata)) },
  ];
  if (ctx.can.writeKeys) columns.push({ label: "Actions", cls: "actions", value: (k) => actions(ctx, k, panel, reload) });
  clear(root).append(h("h1", null, "Keys"),
    ctx.can.writeKeys ? createForm(ctx, teams, (el) => { pendingSecret = el; reload(); }) : null,
    panel, table(columns, keys));
}
