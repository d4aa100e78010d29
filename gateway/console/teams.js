// Teams and their budgets, with this period's spend against each budget.
import { call, listAll } from "./api.js";
import { clear, field, h, s, table, today, usd } from "./dom.js";

function periodStart(period) {
  const d = today();
  return period === "month" ? d.slice(0, 8) + "01" : d;
}

function meter(spent, budget) {
  if (budget === null || budget === undefined) return h("span", null, usd(spent) + " (no budget)");
  const share = budget > 0 ? spent / budget : 1;
  const svg = s("svg", { class: "meter", viewBox: "0 0 100 10", preserveAspectRatio: "none", role: "img",
    "aria-label": Math.round(share * 100) + " percent of the budget" },
  s("rect", { class: "track", x: 0, y: 0, width: 100, height: 10, rx: 4 }),
  s("rect", { class: share >= 1 ? "over" : "fill", x: 0, y: 0, width: Math.min(100, share * 100), height: 10, rx: 4 }));
  return h("span", null, svg, usd(spent) + " of " + usd(budget));
}

async function spendByTeam() {
  // the month so far covers both periods; a day budget reads today's rows only
  const [month, day] = await Promise.all([
    call("GET", `spend?group_by=team&from=${periodStart("month")}&to=${today()}`),
    call("GET", `spend?group_by=team&from=${today()}&to=${today()}`)]);
  // by the team's id: a team created again under a deleted one's name starts from nothing; a team made
  // before teams had ids has none, nor have its rows (docs/keys-teams-spend.md, How it behaves)
  const index = (rows) => Object.fromEntries(rows.data.map((r) => [teamRef(r.team_id, r.team), r.cost_usd]));
  return { month: index(month), day: index(day) };
}

const teamRef = (id, name) => (id == null ? "name:" + name : "id:" + id);

function createForm(ctx) {
  const period = h("select", { name: "budget_period" }, h("option", { value: "day" }, "day"),
    h("option", { value: "month" }, "month"));
  const form = h("form", { "aria-label": "Create a team" },
    h("div", { class: "grid" },
      field("team-name", "Name", h("input", { name: "name", required: true, autocomplete: "off" })),
      field("team-budget", "Budget (USD)", h("input", { name: "budget_usd", type: "number", min: 0, step: "any" })),
      field("team-period", "Budget period", period),
      field("team-rpm", "Requests per minute", h("input", { name: "rpm", type: "number", min: 1 })),
      field("team-models", "Models (comma separated, empty: all)", h("input", { name: "models" }))),
    h("button", { type: "submit", class: "primary" }, "Create team"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const el = form.elements;
    const body = { name: el.name.value.trim(), budget_period: el.budget_period.value };
    if (el.budget_usd.value) body.budget_usd = Number(el.budget_usd.value);
    if (el.rpm.value) body.rpm = Number(el.rpm.value);
    if (el.models.value.trim()) body.models = el.models.value.split(",").map((m) => m.trim()).filter(Boolean);
    ctx.run(async () => {
      await call("POST", "teams", body);
      ctx.status("Team " + body.name + " created.", "ok");
      ctx.show("teams");
    });
  });
  return h("details", { class: "card" }, h("summary", null, "Create a team"), form);
}

export async function teamsPage(root, ctx) {
  const [teams, spent] = await Promise.all([listAll("teams"), spendByTeam()]);
  const columns = [
    { label: "Team", value: (t) => t.name, cls: "mono" },
    { label: "Models", value: (t) => (t.models ? t.models.join(", ") : "all") },
    { label: "RPM", value: (t) => t.rpm, num: true },
    { label: "TPM", value: (t) => t.tpm, num: true },
    { label: "Spend this period vs budget", value: (t) => meter(spent[t.budget_period === "month" ? "month" : "day"][teamRef(t.id, t.name)] || 0,
      t.budget_usd) },
  ];
  if (ctx.can.writeTeams) {
    columns.push({ label: "Actions", cls: "actions", value: (t) => {
      const del = h("button", { type: "button", class: "danger", onclick: () => {
        if (del.dataset.armed !== "1") { del.dataset.armed = "1"; del.textContent = "Confirm delete"; return; }
        ctx.run(async () => { await call("DELETE", "teams/" + encodeURIComponent(t.name)); ctx.show("teams"); });
      } }, "Delete");
      return del;
    } });
  }
  clear(root).append(h("h1", null, "Teams and budgets"), ctx.can.writeTeams ? createForm(ctx) : null, table(columns, teams));
}
