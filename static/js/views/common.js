// Pieces several views share: the project tab bar, a page header, field rows.

import { h } from "../dom.js";
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
  "tabs.instructions": ["Agent instructions", "Ajan talimatları"],
  "tabs.settings": ["Project settings", "Proje ayarları"],
});

const TABS = [["", "tabs.board"], ["/plan", "tabs.plan"], ["/stats", "tabs.stats"],
  ["/pipeline", "tabs.pipeline"], ["/agents", "tabs.agents"], ["/templates", "tabs.templates"],
  ["/snippets", "tabs.snippets"], ["/webhooks", "tabs.webhooks"],
  ["/instructions", "tabs.instructions"], ["/settings", "tabs.settings"]];

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
  return h("header", { class: "project-head" },
    h("h1", {}, projectName(projectId)),
    h("nav", { class: "tabs", "aria-label": projectName(projectId) },
      TABS.map(([suffix, key]) => h("a", {
        href: `#/projects/${projectId}${suffix}`,
        class: suffix === active ? "tab active" : "tab",
        "aria-current": suffix === active ? "page" : null,
      }, t(key)))));
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
