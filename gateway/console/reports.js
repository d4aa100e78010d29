// Spend (by team, key, model or day, over a date range), the last hour's stats per model, the audit log.
import { call } from "./api.js";
import { barChart } from "./charts.js";
import { clear, field, h, ms, pct, table, text, today, usd } from "./dom.js";

const GROUPS = ["team", "key", "model", "day"];
const range = { from: today(-6), to: today(), group: "team" };

export async function spendPage(root, ctx) {
  const data = await call("GET", `spend?group_by=${range.group}&from=${range.from}&to=${range.to}`);
  const rows = data.data.slice().sort((a, b) => (range.group === "day"
    ? String(a.day).localeCompare(String(b.day)) : b.cost_usd - a.cost_usd));
  const form = h("form", { class: "filters", "aria-label": "Spend filters" },
    field("spend-from", "From", h("input", { type: "date", name: "from", value: range.from, required: true })),
    field("spend-to", "To", h("input", { type: "date", name: "to", value: range.to, required: true })),
    field("spend-group", "Group by", h("select", { name: "group" },
      GROUPS.map((g) => h("option", { value: g, selected: g === range.group }, g)))),
    h("button", { type: "submit", class: "primary" }, "Show"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    Object.assign(range, { from: form.elements.from.value, to: form.elements.to.value, group: form.elements.group.value });
    ctx.show("spend");
  });
  const label = (r) => text(r[range.group]);
  const total = rows.reduce((a, r) => a + r.cost_usd, 0);
  clear(root).append(h("h1", null, "Spend"), form,
    h("div", { class: "charts" },
      barChart(`Cost by ${range.group}, ${range.from} to ${range.to}`, rows.slice(0, 30).map((r) => ({ label: label(r), value: r.cost_usd })), usd),
      barChart(`Requests by ${range.group}`, rows.slice(0, 30).map((r) => ({ label: label(r), value: r.requests })), String, { alt: true })),
    h("h2", null, "Rows"),
    table([
      { label: range.group, value: label, cls: "mono" },
      { label: "Requests", value: (r) => r.requests, num: true },
      { label: "Input tokens", value: (r) => r.input_tokens, num: true },
      { label: "Output tokens", value: (r) => r.output_tokens, num: true },
      { label: "Cached", value: (r) => r.cached_input_tokens, num: true },
      { label: "Reasoning", value: (r) => r.reasoning_tokens, num: true },
      { label: "Cost", value: (r) => usd(r.cost_usd), num: true },
    ], rows, `Total ${usd(total)} over ${rows.length} rows`));
}

export async function statsPage(root, ctx) {
  const data = await call("GET", "stats?window_s=3600");
  const rows = data.data;
  const refresh = h("button", { type: "button", onclick: () => ctx.show("stats") }, "Refresh");
  clear(root).append(h("h1", null, "Last hour, this replica"),
    h("p", { class: "hint" }, "From the gateway replica that answered: its own requests of the last hour. ", refresh),
    h("div", { class: "charts" },
      barChart("Time to first token p50 / p95 (ms)", rows.filter((r) => r.ttft_p50_s !== null).flatMap((r) => [
        { label: r.model + " p50", value: r.ttft_p50_s * 1000 },
        { label: r.model + " p95", value: r.ttft_p95_s * 1000 }]), (v) => v.toFixed(1) + " ms"),
      barChart("Error rate", rows.map((r) => ({ label: r.model, value: r.error_rate })), pct, { alt: true })),
    table([
      { label: "Model", value: (r) => r.model, cls: "mono" },
      { label: "Requests", value: (r) => r.requests, num: true },
      { label: "Errors", value: (r) => r.errors, num: true },
      { label: "Error rate", value: (r) => pct(r.error_rate), num: true },
      { label: "TTFT p50", value: (r) => ms(r.ttft_p50_s), num: true },
      { label: "TTFT p95", value: (r) => ms(r.ttft_p95_s), num: true },
      { label: "Overhead p50", value: (r) => ms(r.overhead_p50_s), num: true },
    ], rows));
}

export async function auditPage(root, ctx) {
  const data = await call("GET", "audit?limit=200");
  clear(root).append(h("h1", null, "Audit log"),
    table([
      { label: "When", value: (e) => e.at },
      { label: "Admin", value: (e) => e.admin, cls: "mono" },
      { label: "Action", value: (e) => e.action },
      { label: "Name", value: (e) => e.name, cls: "mono" },
      { label: "Detail", value: (e) => h("code", null, JSON.stringify(e.detail)) },
    ], data.data, "The latest 200 actions"));
}
