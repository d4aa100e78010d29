// Hand-drawn SVG charts: horizontal bars, one per row. Labels are text nodes (see dom.js).
import { s } from "./dom.js";

export function barChart(title, rows, format, opts = {}) {
  const rowH = 26;
  const labelW = 200;
  const width = 560;
  const height = Math.max(1, rows.length) * rowH + 36;
  const max = Math.max(...rows.map((r) => r.value || 0), 0) || 1;
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": title, preserveAspectRatio: "xMinYMin meet" });
  svg.append(s("title", null, title));
  svg.append(s("text", { x: 8, y: 18, "font-weight": "600" }, title));
  if (!rows.length) svg.append(s("text", { x: 8, y: 44 }, "No data in this range."));
  rows.forEach((r, i) => {
    const y = 30 + i * rowH;
    const w = Math.max(1, ((r.value || 0) / max) * (width - labelW - 90));
    const label = r.label.length > 28 ? r.label.slice(0, 27) + "…" : r.label;
    svg.append(s("text", { x: 8, y: y + 15 }, label));
    const bar = s("rect", { class: opts.alt ? "bar2" : "bar", x: labelW, y: y + 3, width: w, height: rowH - 8, rx: 2 });
    bar.append(s("title", null, r.label + ": " + format(r.value)));
    svg.append(bar);
    svg.append(s("text", { x: labelW + w + 6, y: y + 15 }, format(r.value)));
  });
  return svg;
}
