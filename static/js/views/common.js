// Pieces several views share: the project tab bar, a page header, field rows, avatars, the
// raised hand of "needs you"; below them, where tasks run (hosts) and which agent runs them.

import { confirmDialog, h, svg } from "../dom.js";
import * as format from "../i18n.js";
import { register, t } from "../i18n.js";
import { enumOf } from "../schema.js";
import { projectAgent, projectHost, state } from "../store.js";

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

/** Replace container's children with nodes, keeping the focus on the same data-key. */
export function rerender(container, nodes) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.dataset.key : null;
  container.replaceChildren(...[nodes].flat().filter(Boolean));
  if (key) {
    const again = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

// --- hosts --------------------------------------------------------------------------------------

// Where a project's tasks run, as the views show it: a host's name, the card's host badge,
// the task page's "Runs on <host>", and "Waiting for host <name>: <error>" of a task whose
// host cannot be reached (task.waitingFor). The hosts themselves are Settings → Hosts.

register({  // key: [English, Turkish]
  "hostpart.unknown": ["host #{id}", "#{id} numaralı makine"],
  "hostpart.runsOn": ["Runs on {name}", "{name} makinesinde çalışır"],
  "hostpart.waiting": ["Waiting for host {name}: {error}", "{name} makinesi bekleniyor: {error}"],
  "hostpart.waitingHelp": ["The task starts by itself once the host answers again: at its next check, or when you press Check in Settings → Hosts.", "Makine yeniden cevap verince görev kendiliğinden başlar: bir sonraki denetiminde ya da Ayarlar → Makineler'de Denetle'ye bastığınızda."],
  "hostpart.waitingSandbox": ["Waiting for the sandbox: {error}", "Korumalı alan bekleniyor: {error}"],
  "hostpart.waitingSandboxHelp": ["The task starts by itself once bubblewrap works where it runs (the board tries again every minute), or when the project's sandbox is set to auto.", "Görev, bubblewrap çalıştığı yerde çalışır olunca (pano her dakika yeniden dener) ya da projenin korumalı alanı otomatik yapılınca kendiliğinden başlar."],
  "hostpart.sandboxed": ["sandboxed", "korumalı"],
  "hostpart.unsandboxed": ["no sandbox", "korumasız"],
  "hostpart.sandboxedHelp": ["Its latest run went through the sandbox (bubblewrap): it saw none of your keys, tokens or other projects.", "Son çalışması korumalı alandan (bubblewrap) geçti: anahtarlarınızı, belirteçlerinizi ve diğer projeleri görmedi."],
  "hostpart.unsandboxedHelp": ["Its latest run was not sandboxed: it ran with the board's rights.", "Son çalışması korumalı alanda değildi: panonun haklarıyla çalıştı."],
});

/** The name of a host, or "host #3" while it is not known. */
export function hostName(hostId) {
  return state.hosts.get(hostId)?.name ?? t("hostpart.unknown", { id: hostId });
}

/** The id of the host a task's project runs on; null: this machine (or not known yet). */
export const taskHost = (task) => projectHost(task.project_id) ?? null;

/** "Runs on build box" of a task whose project runs on a host, else null. */
export function runsOnText(task) {
  const host = taskHost(task);
  return host === null ? null : t("hostpart.runsOn", { name: hostName(host) });
}

/**
 * "Waiting for host build box: <why>" of a task waiting for its host, "Waiting for the
 * sandbox: <why>" of one whose project must be sandboxed where bubblewrap does not work;
 * else null.
 */
export function hostWaitingText(task) {
  const waiting = task.waitingFor;
  if (!waiting) return null;
  return waiting.sandbox ? t("hostpart.waitingSandbox", { error: waiting.sandbox })
    : t("hostpart.waiting", { name: hostName(waiting.host), error: waiting.error || "" });
}

/** The help beside a task's waiting text. */
export const waitingHelp = (task) => t(task.waitingFor?.sandbox ? "hostpart.waitingSandboxHelp" : "hostpart.waitingHelp");

/** A card's chip saying whether the task's latest run went through the sandbox. */
export function sandboxChip(task) {
  if (task.sandboxed === null || task.sandboxed === undefined) return null;
  return h("span", { class: `bchip sandbox${task.sandboxed ? "" : " unsandboxed"}`, "data-testid": "card-sandbox",
    title: t(task.sandboxed ? "hostpart.sandboxedHelp" : "hostpart.unsandboxedHelp") },
  t(task.sandboxed ? "hostpart.sandboxed" : "hostpart.unsandboxed"));
}

/** A card's badge naming the host its project runs on (none on this machine). */
export function hostBadge(task) {
  const host = taskHost(task);
  if (host === null) return null;
  const name = hostName(host);
  return h("span", { class: "bchip host", "data-testid": "card-host", title: t("hostpart.runsOn", { name }) }, name);
}

/** What a card shows of hosts, as text: a card whose text changes is built again. */
export const hostSignature = (task) => `${runsOnText(task)}|${hostWaitingText(task)}`;

// --- agents -------------------------------------------------------------------------------------

// The agent CLI of projects and tasks as the views show it: the task's agent select (the
// project's, or one of the server's list), the card's badge, the usage-limit wait and the
// mark of a cost that is partly estimated.

register({  // key: [English, Turkish]
  "agentpart.label": ["Agent", "Ajan"],
  "agentpart.help": ["The agent CLI that runs this task.", "Bu görevi çalıştıran ajan CLI'si."],
  "agentpart.project": ["Project's ({name})", "Projeninki ({name})"],
  "agentpart.projectUnknown": ["Project's", "Projeninki"],
  "agentpart.badgeTitle": ["Runs with {name}", "{name} ile çalışır"],
  "agentpart.waiting": ["Usage limit — continues at {time}", "Kullanım sınırı — {time} itibarıyla devam eder"],
  "agentpart.waitingHelp": ["The agent hit its usage limit; the task goes on by itself then.", "Ajan kullanım sınırına ulaştı; görev o saatte kendiliğinden devam eder."],
});

/** The display name of an agent CLI: "Codex". */
export const agentName = (agent) => t(`agent.${agent}`);

/** The label of "the project's agent", naming it once known. */
export function projectsLabel(projectId) {
  const agent = projectAgent(projectId);
  return agent ? t("agentpart.project", { name: agentName(agent) }) : t("agentpart.projectUnknown");
}

/**
 * The task's agent: "" (sent as null) is the project's, then the server's list of agents.
 * The first option names the project's agent as soon as it is known.
 * @returns {HTMLSelectElement}
 */
export function agentSelect(projectId, current, attrs = {}) {
  const values = ["", ...enumOf("Task", "agent")];
  const el = select(values, current ?? "", (v) => (v === "" ? projectsLabel(projectId) : agentName(v)), attrs);
  return el;
}

/** The value of an agentSelect as the API takes it (null: the project's). */
export const agentValue = (el) => el.value || null;

/** The agent a task runs: its own, else its project's (undefined while not known). */
export const taskAgent = (task) => task.agent || projectAgent(task.project_id);

/** A card's badge when the task chose an agent of its own (the project's needs no badge). */
export function agentBadge(task) {
  if (!task.agent || task.agent === projectAgent(task.project_id)) return null;
  const name = agentName(task.agent);
  return h("span", { class: "bchip agent", "data-testid": "card-agent", title: t("agentpart.badgeTitle", { name }) },
    name);
}

/** "Usage limit — continues at 14:03" of a task waiting for its agent's limit, else null. */
export function waitingText(task) {
  return task.waitingUntil ? t("agentpart.waiting", { time: format.clock(task.waitingUntil) }) : null;
}

/** A cost; "≈$0.04 estimated" (with a tooltip) when part of it is estimated from token counts. */
export function costText(value, estimated) {
  if (!estimated) return format.cost(value);
  return h("span", { class: "estimated", title: t("cost.estimatedHelp"), "data-estimated": "" },
    format.costMark(value, true), h("small", { class: "muted" }, ` ${t("cost.estimated")}`));
}

register({  // key: [English, Turkish]
  "board.stopConfirm": ["{key} is running: moving it to {column} stops its agent.", "{key} çalışıyor: {column} sütununa taşımak ajanını durdurur."],
  "board.stopAndMove": ["Stop and move", "Durdur ve taşı"],
});

/**
 * move(id, status), asked first when it would stop a running agent: the one path of every
 * move a person makes — the board's "Move to" select, its Alt+Left/Right keys and a drop,
 * and the task page's "Move to". A press on the select that was meant as a drag (the card
 * moved under the pointer) picks an option on its release; a drop or a key lands on the
 * task as it is now, which may have started since the card was grabbed (`taskOf(id)`: the
 * board's copy, or the task page's own).
 * @returns {(id: number, status: string) => Promise<void>}
 */
export function askingMove(move, taskOf = (id) => state.tasks.get(id)) {
  return async (id, status) => {
    const task = taskOf(id);
    if (task?.is_running && status !== "in_progress" && !(await confirmDialog(
      t("board.stopConfirm", { key: task.task_key, column: t(`status.${status}`) }),
      { ok: t("board.stopAndMove"), cancel: t("common.cancel"), danger: true }))) return;
    await move(id, status);
  };
}
