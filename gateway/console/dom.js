// DOM helpers. Every string from the API becomes a text node (document.createTextNode): stored names,
// metadata and audit details are never parsed as HTML, and no attribute is ever set from them except
// through setAttribute on a fixed list of inert attributes.
const SVG = "http://www.w3.org/2000/svg";

function append(el, children) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  return el;
}

export function h(tag, attrs, ...children) {
  return append(setAttrs(document.createElement(tag), attrs), children);
}

export function s(tag, attrs, ...children) {
  return append(setAttrs(document.createElementNS(SVG, tag), attrs), children);
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

export function field(id, label, input) {
  input.id = id;
  return h("div", null, h("label", { for: id }, label), input);
}

export function table(columns, rows, caption) {
  const head = h("tr", null, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : null }, c.label)));
  const body = rows.map((r) => h("tr", null, columns.map((c) => {
    const v = c.value(r);
    return h("td", { class: c.num ? "num" : c.cls || null }, v instanceof Node ? v : text(v));
  })));
  return h("table", null, caption ? h("caption", { class: "hint" }, caption) : null,
    h("thead", null, head), h("tbody", null, body.length ? body : h("tr", null,
      h("td", { colspan: columns.length, class: "empty" }, "Nothing here yet."))));
}

export function text(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

export const usd = (v) => (v === null || v === undefined ? "—" : "$" + Number(v).toFixed(v < 1 ? 4 : 2));
export const ms = (v) => (v === null || v === undefined ? "—" : (v * 1000).toFixed(1) + " ms");
export const pct = (v) => (v === null || v === undefined ? "—" : (v * 100).toFixed(1) + " %");

export function today(offsetDays = 0) {
  const d = new Date(Date.now() + offsetDays * 86400000);
  return d.toISOString().slice(0, 10);
}
