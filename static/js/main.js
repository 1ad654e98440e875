// Boot: the server's API description, settings, projects and health, the /ws connection,
// the header, then the router (only once the API description is here: views take their
// lists of values, limits and patterns from it). After the first view painted (afterPaint):
// health again and the CLIs in use, the "Needs you" inbox, the service worker (sw.js: the
// board starts without the server, and receives Web Push). Also the "offline" state.

import { h, qs, toast } from "./dom.js";
import { clock, missingKeys, onLanguageChange, register, setLanguage, t } from "./i18n.js";
import { defaultOf, loadSchema } from "./schema.js";
import { api, connect, loadAll, needsYouCount, notify, state, subscribe } from "./store.js";

// --- the router ---------------------------------------------------------------------------------

// Hash routes (#/projects/3) to view modules. Each view module exports
// mount(root, params) and returns unmount().

/**
 * What a route's params may be: ids, positive integers as the URL writes them (not decoded:
 * an id has nothing to decode). Views put params into API paths, so a value from the URL such
 * as "1%2F..%2F..%2Fsettings" must never reach one (design §11): a hash whose params are not
 * ids names no route and shows the not-found view. A route that needs another kind of param
 * would need a check of its own here; none does.
 */
const ID = /^[1-9]\d*$/;

/** @type {{pattern: RegExp, names: string[], load: () => Promise<any>}[]} */
const routes = [];

/**
 * route("/projects/:id/board", () => import("./views/board.js"))
 * @param {string} path
 * @param {() => Promise<{mount: Function}>} load
 */
export function route(path, load) {
  const names = [];
  const pattern = new RegExp(`^${path.replace(/:(\w+)/g, (_, name) => {
    names.push(name);
    return "([^/]+)";
  })}$`);
  routes.push({ pattern, names, load });
}

/**
 * Which route a hash names: {route, params} or null (also when a param is not an id). Pure.
 * @param {string} hash  e.g. "#/projects/3"
 */
export function parseHash(hash) {
  const path = (hash || "").replace(/^#/, "").split("?")[0] || "/";
  for (const candidate of routes) {
    const match = candidate.pattern.exec(path);
    if (!match) continue;
    const raws = match.slice(1);
    if (!raws.every((raw) => ID.test(raw) && Number.isSafeInteger(Number(raw)))) return null;
    const params = {};
    candidate.names.forEach((name, i) => { params[name] = Number(raws[i]); });
    return { route: candidate, params };
  }
  return null;
}

/**
 * An id given in the hash's query (#/tasks/7?approval=12 → queryId(hash, "approval") = 12), or
 * null when absent or not an id. Pure.
 * @param {string} hash
 * @param {string} name
 * @returns {number|null}
 */
export function queryId(hash, name) {
  const query = (hash || "").split("?")[1] || "";
  const raw = new URLSearchParams(query).get(name);
  return raw !== null && ID.test(raw) && Number.isSafeInteger(Number(raw)) ? Number(raw) : null;
}

let unmount = null;
let generation = 0;

/**
 * Show the view of the current hash in root; again on every hash change. Resolves once the
 * first view is mounted (or could not be).
 */
export function start(root, notFound) {
  const show = async () => {
    const mine = ++generation;
    const found = parseHash(location.hash);
    if (unmount) {
      try { unmount(); } catch (error) { console.warn(error); }
      unmount = null;
    }
    root.replaceChildren();
    if (!found) {
      unmount = notFound(root);
      return;
    }
    try {
      const module = await found.route.load();
      if (mine !== generation) return;  // the user went elsewhere meanwhile
      unmount = module.mount(root, found.params) || null;
    } catch (error) {  // e.g. the server's API description lacks what the view needs
      if (mine !== generation) return;
      root.replaceChildren(failed(error));
    }
    root.dataset.route = location.hash;  // which view is shown (for tests and styles)
    root.focus({ preventScroll: true });
  };
  window.addEventListener("hashchange", show);
  return show();
}

/** What a view that could not be shown says instead. */
function failed(error) {
  const section = document.createElement("section");
  section.className = "empty";
  section.setAttribute("role", "alert");
  section.dataset.testid = "view-error";
  const p = document.createElement("p");
  p.textContent = error.message;
  section.append(p);
  return section;
}

/** Go to a hash route: go("/projects/3"). */
export function go(path) {
  location.hash = `#${path}`;
}

const view = (name) => () => import(`./views/${name}.js`);
route("/", view("projects"));
route("/projects/:projectId", view("board"));
route("/projects/:projectId/plan", view("planning"));
route("/projects/:projectId/stats", view("stats"));
route("/projects/:projectId/pipeline", view("pipeline"));
route("/projects/:projectId/agents", view("agents"));
route("/projects/:projectId/templates", view("templates"));
route("/projects/:projectId/snippets", view("snippets"));
route("/projects/:projectId/webhooks", view("webhooks"));
route("/projects/:projectId/schedules", view("schedules"));
route("/projects/:projectId/instructions", view("instructions"));
route("/projects/:projectId/settings", view("project_settings"));
route("/tasks/:taskId", view("task_detail"));
route("/attention", view("attention"));
route("/usage", view("usage"));
route("/settings", view("settings"));
route("/settings/notifications", view("notifications"));
route("/settings/hosts", view("hosts"));
route("/settings/tokens", view("tokens"));

register({  // key: [English, Turkish]
  "attention.count": ["{n} waiting for you", "{n} sizi bekliyor"],
  "schema.title": ["The board cannot start", "Pano başlatılamıyor"],
  "schema.failed": [
    "It could not read the server's description of its API (/api/openapi.json): {error}",
    "Sunucunun API tanımı okunamadı (/api/openapi.json): {error}"],
  "schema.retry": ["Try again", "Yeniden dene"],
  "offline.title": ["Offline.", "Çevrimdışı."],
  "offline.retrying": ["The board connects again by itself when the server is back.", "Sunucu geri gelince pano kendiliğinden yeniden bağlanır."],
  "offline.viewTitle": ["Waiting for the server", "Sunucu bekleniyor"],
  "offline.viewBody": ["The board is here, but its data comes from the server, which cannot be reached. It shows up as soon as the server answers again.", "Pano burada, ama verileri ulaşılamayan sunucudan gelir. Sunucu yeniden cevap verir vermez görünür."],
  "update.ready": ["A new version of the board is loaded.", "Panonun yeni sürümü yüklendi."],
  "update.reload": ["Reload", "Yeniden yükle"],
  "health.cliMissing": ["The {name} CLI is not found: tasks that use it cannot run. Install it or set its command (see “Agents” in the README).", "{name} CLI'si bulunamadı: onu kullanan görevler çalışamaz. Kurun ya da komutunu ayarlayın (README'de “Agents” bölümüne bakın)."],
  "health.cliMissing.install": ["The {name} CLI is not found. Install it with: npm install -g {package} — until then tasks that use it cannot run (or set its command: see “Agents” in the README).", "{name} CLI'si bulunamadı. Kurmak için: npm install -g {package} — o zamana dek onu kullanan görevler çalışamaz (ya da komutunu ayarlayın: README'de “Agents” bölümüne bakın)."],
  "health.agentMissing.install": ["The agent CLI is not found. Install it with: npm install -g {package} — until then tasks cannot run (or set --agent-command or TASKBOARD_AGENT_COMMAND; the server's log names the command). To try the board first, start it with --demo: its Demo project's tasks run a simulated agent.", "Ajan CLI bulunamadı. Kurmak için: npm install -g {package} — o zamana dek görevler çalışamaz (ya da --agent-command veya TASKBOARD_AGENT_COMMAND ayarlayın; sunucu günlüğü komutu gösterir). Panoyu önce denemek için --demo ile başlatın: Demo projesinin görevlerini benzetilmiş bir ajan çalıştırır."],
  "health.cliMissingOnHost": ["The {name} CLI is not found on {host}: tasks of projects there cannot run.", "{name} CLI'si {host} makinesinde bulunamadı: oradaki projelerin görevleri çalışamaz."],
  "health.hostUnreachable": ["Host {name} cannot be reached: the tasks of its projects wait for it.", "{name} makinesine ulaşılamıyor: projelerinin görevleri onu bekliyor."],
  "health.hostDisabled": ["Host {name} is disabled: the tasks of its projects wait until it is turned on.", "{name} makinesi devre dışı: projelerinin görevleri o açılana dek bekliyor."],
  "health.hostsLink": ["Settings → Hosts", "Ayarlar → Makineler"],
  "health.cliWaiting": ["{name} reached its usage limit: its tasks continue at {time}.", "{name} kullanım sınırına ulaştı: görevleri {time} itibarıyla devam eder."],
});

/** The "Needs you" inbox: one element, kept across redraws (loaded after the first paint). */
let needsYou = null;
let waiting = 0;  // tasks in testing or failed across every project (from the summaries)
let countTimer = null;

/** Tasks waiting for a person (testing or failed), across all projects. */
function attentionCount() {
  return waiting;
}

/** Whether the first view has painted (afterPaint): until then nothing is recounted. */
let rested = false;

/** Recount from the project summaries, at most once every 300 ms (from the first paint on). */
function recount() {
  if (!rested) return;  // startRest counts
  clearTimeout(countTimer);
  countTimer = setTimeout(async () => {
    try {
      const summaries = await api.projectSummaries();
      waiting = summaries.reduce((n, p) => n + (p.testingCount || 0) + (p.failedCount || 0), 0);
      renderHeader();
    } catch { /* the banner says when the server is unreachable */ }
  }, 300);
}

function renderHeader() {
  const header = qs("#app-header");
  const conn = state.connection;
  const refocus = needsYou && document.activeElement === needsYou.el;  // moving it drops its focus
  header.replaceChildren(
    h("a", { class: "brand", href: "#/" }, t("app.title")),
    h("nav", { class: "main-nav" },
      h("a", { href: "#/" }, t("nav.projects")),
      h("a", { href: "#/attention" }, t("nav.attention"),
        attentionCount() ? h("span", { class: "badge", "data-testid": "attention-badge" },
          String(attentionCount())) : null),
      h("a", { href: "#/usage" }, t("nav.usage")),
      h("a", { href: "#/settings" }, t("nav.settings"))),
    ...[needsYou?.el].filter(Boolean),  // replaceChildren writes a null as "null"
    h("span", { class: `conn conn-${conn}`, "data-testid": "connection", role: "status",
      title: t(`conn.${conn}`) }, h("span", { class: "dot", "aria-hidden": "true" }), t(`conn.${conn}`)));
  needsYou?.render();
  if (refocus) needsYou.el.focus();
  const n = needsYouCount();
  document.title = n ? `(${n}) ${t("app.title")}` : t("app.title");
  appBadge(n);
  renderBanner();
}

let badged = null;

/** The installed app's badge: what waits for a person (where the platform has badges). */
function appBadge(n) {
  if (n === badged || !("setAppBadge" in navigator)) return;
  badged = n;
  (n ? navigator.setAppBadge(n) : navigator.clearAppBadge()).catch(() => {});
}

/** The agent CLIs in use on this machine (a project here runs it, or an open task chose it). */
let agentsInUse = new Set();
/** Each CLI a project on a host uses that the host's last check did not find: [{name, host}]. */
let missingOnHosts = [];
let useTimer = null;

/**
 * Ask which CLIs are in use, here and on the hosts, when one is missing here or projects run
 * on hosts (the banner names a missing CLI only when something uses it).
 */
async function learnUse() {
  const missingHere = Object.values(state.health?.agents || {}).some((cli) => cli.found === false);
  if (!missingHere && !(state.health?.hostsInUse?.count > 0)) {
    missingOnHosts = [];
    renderBanner();
    return;
  }
  try {
    const agents = await api.agents();
    agentsInUse = new Set(agents.filter((a) => a.projects || a.openTasks).map((a) => a.name));
    missingOnHosts = agents.flatMap((a) => (a.hosts || []).filter((host) => host.found === false)
      .map((host) => ({ name: a.name, host: host.name })));
  } catch { /* the next health check asks again */ }
  renderBanner();
}

/** Ask /api/health again soon: a host was checked, or a project chose another one. */
let healthTimer = null;
function recheckHealth() {
  clearTimeout(healthTimer);
  healthTimer = setTimeout(checkHealth, 300);
}

/** The CLIs in use, the default one included while there is no project yet. */
function usedAgents() {
  if (state.projects.length) return agentsInUse;
  try {
    return new Set([...agentsInUse, defaultOf("Project", "agent")]);
  } catch { return agentsInUse; }  // no API description: the health answer's old "agent" speaks
}

/**
 * What the health answer says about the agent CLIs: each one in use here that is not found
 * (how to install it, when the server names its package), each one a host's projects use that
 * the host lacks, and each one waiting for a usage limit.
 */
function agentMessages(health) {
  if (!health?.agents) return health?.agent?.found === false ? [t("health.agentMissing")] : [];
  const used = usedAgents();
  const messages = [];
  for (const [name, cli] of Object.entries(health.agents)) {
    const label = t(`agent.${name}`);
    if (cli.found === false && used.has(name)) {
      // the install command first: it is what a person came for
      const key = (name === "claude" ? "health.agentMissing" : "health.cliMissing") + (cli.package ? ".install" : "");
      messages.push(h("span", { "data-testid": "cli-missing", "data-agent": name },
        t(key, { name: label, package: cli.package })));
    }
    for (const missing of missingOnHosts.filter((m) => m.name === name)) {
      messages.push(h("span", { "data-testid": "cli-missing-host", "data-agent": name },
        t("health.cliMissingOnHost", { name: label, host: missing.host })));
    }
    if (cli.waitingUntil) {
      messages.push(h("span", { "data-testid": "cli-waiting", "data-agent": name },
        t("health.cliWaiting", { name: label, time: clock(cli.waitingUntil) })));
    }
  }
  return messages;
}

/** Each host a project runs on that is disabled or was not reachable at its last check. */
function hostMessages(health) {
  return (health?.hosts || []).filter((host) => !host.enabled || host.reachable === false).map((host) =>
    h("span", { "data-testid": host.enabled ? "host-unreachable" : "host-disabled", "data-host": String(host.id) },
      t(host.enabled ? "health.hostUnreachable" : "health.hostDisabled", { name: host.name }), " ",
      h("a", { href: "#/settings/hosts" }, t("health.hostsLink"))));
}

function renderBanner() {
  const banner = qs("#health-banner");
  const messages = [...agentMessages(state.health), ...hostMessages(state.health)];
  if (state.connection === "closed") {
    messages.push(h("span", { "data-testid": "offline" }, h("strong", {}, t("offline.title")), " ",
      t("health.unreachable"), " ", t("offline.retrying")));
  }
  if (updated) {
    messages.push(h("span", { "data-testid": "update-ready" }, t("update.ready"), " ",
      h("button", { type: "button", onclick: () => location.reload() }, t("update.reload"))));
  }
  banner.replaceChildren(...messages.map((m) => h("p", {}, m)));
  banner.hidden = messages.length === 0;
  banner.classList.toggle("banner-info", Boolean(updated) && messages.length === 1);
}

/** A short two-tone chime with WebAudio (no sound file needed). */
function chime() {
  try {
    const audio = new AudioContext();
    [660, 880].forEach((freq, i) => {
      const osc = audio.createOscillator();
      const gain = audio.createGain();
      osc.frequency.value = freq;
      gain.gain.value = 0.08;
      osc.connect(gain).connect(audio.destination);
      osc.start(audio.currentTime + i * 0.15);
      osc.stop(audio.currentTime + i * 0.15 + 0.12);
    });
  } catch { /* no audio: nothing to do */ }
}

async function checkHealth() {
  try {
    state.health = await api.health();
    await learnUse();
  } catch {
    state.health = null;
  }
  renderBanner();
  notify("health");
  // just after the server started it is still looking for the CLIs: ask again soon
  if (Object.values(state.health?.agents || {}).some((cli) => cli.checking)) setTimeout(checkHealth, 1000);
}

/** A new service worker took over while something was being edited: say so (see serviceWorker). */
let updated = false;

/**
 * Register sw.js (the board starts without the server; Web Push). When a new one takes over
 * (the server was upgraded) the page reloads once, so that it never mixes the files of two
 * versions — unless a field is being edited: then the banner says so, with a Reload button.
 * Skipped where there are no service workers (not a secure context: plain HTTP from elsewhere).
 */
function serviceWorker() {
  if (!("serviceWorker" in navigator) || !window.isSecureContext) return;
  const sw = navigator.serviceWorker;
  const hadController = Boolean(sw.controller);
  let reloading = false;
  sw.addEventListener("controllerchange", () => {
    if (!hadController || reloading) return;  // the first install: these files are current
    const editing = document.activeElement?.matches?.("input, textarea, select, [contenteditable]")
      || document.querySelector("dialog[open]");
    if (editing) {
      updated = true;
      renderBanner();
    } else {
      reloading = true;
      location.reload();
    }
  });
  sw.addEventListener("message", (event) => {  // a tapped notification: open its page here
    const url = event.data?.type === "open" && typeof event.data.url === "string" ? event.data.url : null;
    if (url && url.startsWith("/#/")) location.hash = url.slice(2);
    else if (url === "/") location.hash = "#/";
  });
  sw.register("/sw.js").catch((error) => console.warn("service worker:", error.message));
}

/**
 * Started without the server (from the service worker's cache): say so where the view would
 * be, and start for real once /ws connects again.
 */
function waitForServer(root) {
  root.replaceChildren(h("section", { class: "empty", role: "status", "data-testid": "offline-view" },
    h("h1", {}, t("offline.viewTitle")), h("p", {}, t("offline.viewBody"))));
  const off = subscribe(async () => {
    if (state.connection !== "open") return;
    off();
    try {
      await Promise.all([loadSchema(), loadAll()]);
      root.replaceChildren();
      startViews(root);
    } catch (error) {
      if (error.status !== 401) showSchemaError(root, error);
    }
  });
}

/** The views, once the API description is loaded; resolves once the first one is mounted. */
function startViews(root) {
  return start(root, (el) => {
    el.append(h("section", { class: "empty" }, h("h1", {}, t("notfound.title")), h("p", {}, t("notfound.body"))));
    return null;
  });
}

/** Say why the board cannot start (no API description) and offer to try again. */
function showSchemaError(root, error) {
  const retry = h("button", { type: "button", class: "primary", "data-testid": "schema-retry" }, t("schema.retry"));
  root.replaceChildren(h("section", { class: "empty", role: "alert", "data-testid": "schema-error" },
    h("h1", {}, t("schema.title")), h("p", {}, t("schema.failed", { error: error.message })), retry));
  retry.addEventListener("click", async () => {
    retry.disabled = true;
    try {
      await loadSchema();
      root.replaceChildren();
      startViews(root);
    } catch (again) {
      if (again.status !== 401) showSchemaError(root, again);
    }
  });
}

/** Follow the store: the header, the attention count, the language and the chime. */
function followStore() {
  subscribe((s, event) => {
    if (event !== "task:log" && event !== "task:usage") renderHeader();
  });
  subscribe((s, event) => {
    if (/^(task:(created|updated|deleted)|project:deleted|resync)$/.test(event)) recount();
    if (/^(task:(created|updated|deleted)|project:(created|updated|deleted))$/.test(event)) {
      clearTimeout(useTimer);  // a project or task may have changed its agent
      useTimer = setTimeout(learnUse, 300);
    }
    if (/^(host:(created|updated|deleted)|project:(created|updated|deleted))$/.test(event)) recheckHealth();
  });
  onLanguageChange(renderHeader);
  let lastStatus = new Map();
  subscribe((s, event) => {
    if (event === "settings:updated" || event === "resync") setLanguage(s.settings?.language || "en");
    const finished = event === "task:updated" && [...s.tasks.values()].some((task) =>
      task.status === "testing" && lastStatus.has(task.id) && lastStatus.get(task.id) !== "testing");
    if (finished && s.settings?.soundEnabled) chime();
    lastStatus = new Map([...s.tasks.values()].map((task) => [task.id, task.status]));
  });
}

const frame = () => new Promise((resolve) => {
  requestAnimationFrame(resolve);
  setTimeout(resolve, 100);  // a hidden page gets no frames
});

/**
 * Resolves once the first view has painted: it is mounted, the answers boot.js asked for
 * are read (its data), three frames went by (a view renders in the frame after its data)
 * and the page is idle. What the first paint does not need waits for it, so that a slow
 * network carries the paint's requests first.
 */
async function afterPaint(shown) {
  await Promise.all([shown, window.taskboardEarly?.settled]);
  for (let n = 0; n < 3; n += 1) await frame();
  await new Promise((resolve) => {
    if ("requestIdleCallback" in window) requestIdleCallback(resolve, { timeout: 300 });
    else setTimeout(resolve);
  });
}

/** What waits for the first paint: health, the inbox, the summaries, the service worker. */
async function startRest() {
  rested = true;
  recount();
  checkHealth();
  setInterval(checkHealth, 60000);
  serviceWorker();
  try {
    const { needsYouControl } = await import("./views/needs_you.js");
    needsYou = needsYouControl();
    renderHeader();
  } catch (error) {
    console.warn("needs you:", error.message);
  }
}

async function boot() {
  const root = qs("#view");
  followStore();
  let painted;
  const later = new Promise((resolve) => { painted = resolve; });
  // health as the page or boot.js got it (views read it as they build); asked again, with
  // what it implies, after the first paint (startRest)
  const health = api.health().then((answer) => { state.health = answer; }, () => {});
  const [loaded, described] = await Promise.allSettled([loadAll(later), loadSchema(), health]);
  const failures = [loaded, described].filter((r) => r.status === "rejected").map((r) => r.reason);
  if (failures.some((error) => error.status === 401)) return;  // request() (store.js) is taking us to the login page
  const unreachable = failures.some((error) => error.code === "unreachable");
  if (loaded.status === "rejected" && !unreachable) toast(loaded.reason.message, "error");
  setLanguage(state.settings?.language || "en");
  renderHeader();
  let shown = null;
  if (described.status === "fulfilled" && !unreachable) shown = startViews(root);
  else if (unreachable) waitForServer(root);
  else showSchemaError(root, described.reason);
  // once the view is up, which may ask for a task's log (?logs=): one connection, not two
  Promise.resolve(shown).finally(connect);
  window.taskboard = { state, t, missingKeys };  // a debug handle (and for the browser tests)
  await afterPaint(shown);
  painted();
  await startRest();
}

boot();
