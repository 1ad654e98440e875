// Pieces several views share: the project tab bar, a page header, field rows, avatars, the
// raised hand of "needs you".

import { h, svg } from "../dom.js";
import { register, t } from "../i18n.js";
import { state } from "../store.js";

register({  // key: [English, Turkish]
  "tabs.board": ["Board", "Pano"],
  "tabs.plan": ["Plan", "Planla"],
  "tabs.stats": ["Stats", "İstatistik"],
  "tabs.pipeline": ["Dependencies", "Bağımlılıklar"],
  "tabs.agents": ["Agents", "Ajanlar"],
  "tabs.templates": ["Templates", "Şablonlar"],
  "tabs.snippets": ["Snippets", "Parçacıklar"],
  "tabs.webhooks": ["Webhooks", "Web kancaları"],
  "tabs.schedules": ["Schedules", "Zamanlamalar"],
  "tabs.instructions": ["Agent instructions", "Ajan talimatları"],
  "tabs.settings": ["Project settings", "Proje ayarları"],
});

const TABS = [["", "tabs.board"], ["/plan", "tabs.plan"], ["/stats", "tabs.stats"],
  ["/pipeline", "tabs.pipeline"], ["/agents", "tabs.agents"], ["/templates", "tabs.templates"],
  ["/snippets", "tabs.snippets"], ["/webhooks", "tabs.webhooks"], ["/schedules", "tabs.schedules"],
  ["/instructions", "tabs.instructions"], ["/settings", "tabs.settings"]];

/**
 * A raised hand (what waits for a person), drawn: the ✋ character is a box in fonts that
 * lack it. It takes the colour of its text.
 */
export function handIcon() {
  return svg("svg", { class: "icon-hand", viewBox: "0 0 16 16", width: "1em", height: "1em", fill: "currentColor",
    "aria-hidden": "true", focusable: "false" },
  svg("rect", { x: 4.5, y: 3, width: 2, height: 7, rx: 1 }),
  svg("rect", { x: 7, y: 1.5, width: 2, height: 8, rx: 1 }),
  svg("rect", { x: 9.5, y: 2.5, width: 2, height: 7, rx: 1 }),
  svg("rect", { x: 12, y: 4.5, width: 2, height: 5.5, rx: 1 }),
  svg("rect", { x: 1.6, y: 6.5, width: 2, height: 5, rx: 1, transform: "rotate(-30 2.6 9)" }),
  svg("path", { d: "M4.5 8H14v3a4 4 0 0 1-4 4H8.5a4 4 0 0 1-3.6-2.3L3 9.5z" }));
}

/** The project's name (from the store) or "#id". */
export function projectName(projectId) {
  const project = state.projects.find((p) => p.id === projectId);
  return project ? project.name : `#${projectId}`;
}

/**
 * The header of every project view: its name and the tab bar.
 * @param {number} projectId
 * @param {string} active  one of "", "/plan", "/stats", ... as in TABS
 */
export function projectHeader(projectId, active) {
  const tabs = h("nav", { class: "tabs", "aria-label": projectName(projectId) },
    TABS.map(([suffix, key]) => h("a", {
      href: `#/projects/${projectId}${suffix}`,
      class: suffix === active ? "tab active" : "tab",
      "aria-current": suffix === active ? "page" : null,
    }, t(key))));
  requestAnimationFrame(() => showInStrip(tabs, tabs.querySelector(".tab.active")));
  return h("header", { class: "project-head" }, h("h1", {}, projectName(projectId)), tabs);
}

/**
 * Scroll a strip that scrolls sideways (a phone's tabs) so that its item is in the middle of
 * it, when the strip is on the page and wider than the screen; the page itself stays.
 */
export function showInStrip(strip, item) {
  if (!item || !strip.isConnected || strip.scrollWidth <= strip.clientWidth) return;
  const box = strip.getBoundingClientRect();
  const at = item.getBoundingClientRect();
  strip.scrollLeft += at.left - box.left - (box.width - at.width) / 2;
}

/**
 * A labelled form row: field("Name", input, "help text").
 * @param {string} label
 * @param {HTMLElement} control  an input/select/textarea (gets an id if it has none)
 * @param {string} [help]
 */
let fieldCounter = 0;
export function field(label, control, help) {
  if (!control.id) control.id = `f${++fieldCounter}`;
  return h("div", { class: "field" },
    h("label", { for: control.id }, label), control,
    help ? h("small", { class: "help" }, help) : null);
}

/** A <select> of values with translated labels: select(["a","b"], "a", v => t(`x.${v}`)). */
export function select(values, current, label = (v) => v, attrs = {}) {
  return h("select", attrs, values.map((value) => h("option", {
    value: String(value), selected: String(value) === String(current) }, label(value))));
}

/** A small coloured square with the project's icon, or the first letter of its name. */
export function avatar(project) {
  const seed = project.iconSeed || project.slug || project.name || "";
  let hash = 0;
  for (const ch of seed) hash = (hash * 31 + ch.codePointAt(0)) >>> 0;
  const text = project.icon ? [...project.icon].slice(0, 2).join("") : [...(project.name || "?")][0].toUpperCase();
  return h("span", { class: `avatar avatar-${hash % 8}`, "aria-hidden": "true" }, text);
}

/**
 * Stat tiles: statTiles([["usage.today", "$0.04"], ["stats.total", "12", {}, {"data-testid": "t"}]]).
 * Each item is [i18n key of the label, value, attributes of the value, attributes of the tile].
 * @param {Array<[string, any, Object?, Object?]>} items
 * @param {Object} [attrs]  attributes of the list (class adds to "ins-tiles")
 */
export function statTiles(items, attrs = {}) {
  return h("dl", { ...attrs, class: `ins-tiles${attrs.class ? ` ${attrs.class}` : ""}` },
    items.map(([key, value, valueAttrs = {}, tileAttrs = {}]) =>
      h("div", { class: "ins-tile", ...tileAttrs }, h("dt", {}, t(key)), h("dd", valueAttrs, value))));
}

/**
 * A table of numbers: a header row, body rows and an optional footer row. A cell is a value
 * or {value, num, head} (num: right-aligned; head: a row header <th scope="row">).
 * @param {Array<any>} columns  header cells
 * @param {Array<Array<any>>} rows
 * @param {{foot?: Array<any>, attrs?: Object}} [options]
 */
export function numberTable(columns, rows, { foot = null, attrs = {} } = {}) {
  const cell = (tag, c) => {
    const spec = c !== null && typeof c === "object" && !(c instanceof Node) ? c : { value: c };
    return h(spec.head ? "th" : tag, { class: spec.num ? "num" : null, scope: spec.head ? "row" : null }, spec.value);
  };
  return h("div", { class: "table-scroll" }, h("table", attrs,
    h("thead", {}, h("tr", {}, columns.map((c) => cell("th", c)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, row.map((c) => cell("td", c))))),
    foot ? h("tfoot", {}, h("tr", {}, foot.map((c) => cell("td", c)))) : null));
}
