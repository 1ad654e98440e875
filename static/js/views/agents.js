// Live agents (#/projects/:projectId/agents): what each running agent is doing (usage, recent
// tools, files) and the files two tasks touch at once (conflicts). Polls every 2 s while
// an agent runs and refreshes on task events. A desktop command: refused (403 local_only)
// when the board is opened from another machine.

import { h } from "../dom.js";
import { cost, duration, register, t, tokens } from "../i18n.js";
import { api } from "../store.js";
import { projectHeader, statTiles } from "./common.js";
import { loadedView, projectOf } from "./loaded_view.js";

register({  // key: [English, Turkish]
  "agents.title": ["Running agents", "Çalışan ajanlar"],
  "agents.none": ["No agent is running in this project.", "Bu projede çalışan ajan yok."],
  "agents.conflicts": ["File conflicts", "Dosya çakışmaları"],
  "agents.conflictsHelp": ["These files are touched by more than one running task: their changes may collide.", "Bu dosyalara birden fazla çalışan görev dokunuyor: değişiklikleri çakışabilir."],
  "agents.model": ["Model", "Model"],
  "agents.elapsed": ["Running for", "Çalışma süresi"],
  "agents.tokens": ["Tokens in / out", "Token girdi / çıktı"],
  "agents.cost": ["Cost", "Maliyet"],
  "agents.tools": ["Tool calls", "Araç çağrıları"],
  "agents.recentTools": ["Recent tools", "Son araçlar"],
  "agents.files": ["Files", "Dosyalar"],
  "agents.noFiles": ["No file touched yet.", "Henüz dosyaya dokunulmadı."],
  "agents.noTools": ["No tool used yet.", "Henüz araç kullanılmadı."],
  "agents.awaiting": ["Waiting for its sub-tasks", "Alt görevlerini bekliyor"],
  "agents.fileMap": ["Files in use", "Kullanımdaki dosyalar"],
  "agents.noFileMap": ["No agent has touched a file yet.", "Henüz hiçbir ajan bir dosyaya dokunmadı."],
  "agents.conflict": ["conflict", "çakışma"],
  "agents.live": ["Updates every 2 seconds while an agent runs.", "Bir ajan çalışırken her 2 saniyede güncellenir."],
});

const POLL_MS = 2000;

const elapsedText = (agent, fetchedAt) => duration((agent.elapsedSec * 1000) + (Date.now() - fetchedAt));
const taskList = (ids, ref) => ids.map((id, i) => [i ? ", " : "", ref(id)]);

/** A running agent: usage, recent tools, the files it touched (those in conflict marked). */
function agentCard(agent, conflicting, fetchedAt) {
  return h("article", { class: "card-panel agent-card", "data-testid": "agent", "data-task-id": agent.taskId },
    h("h3", {}, h("a", { href: `#/tasks/${agent.taskId}` }, h("span", { class: "ins-key" }, agent.taskKey),
      ` ${agent.title}`)),
    agent.awaitingSubtasks ? h("p", { class: "muted" }, t("agents.awaiting")) : null,
    statTiles([
      ["agents.model", t(`model.${agent.model}`)],
      ["agents.elapsed", elapsedText(agent, fetchedAt), { "data-elapsed": agent.taskId }],
      ["agents.tokens", `${tokens(agent.inputTokens)} / ${tokens(agent.outputTokens)}`],
      ["agents.cost", cost(agent.totalCost)],
      ["agents.tools", String(agent.toolCallCount)]], { class: "ins-compact" }),
    h("h4", {}, t("agents.recentTools")),
    agent.recentTools.length
      ? h("ul", { class: "ins-chips" }, agent.recentTools.map((tool) => h("li", { class: "ins-pill" }, tool)))
      : h("p", { class: "muted" }, t("agents.noTools")),
    h("h4", {}, t("agents.files")),
    agent.activeFiles.length
      ? h("ul", { class: "file-list" }, agent.activeFiles.map((path) => h("li",
        { class: conflicting.has(path) ? "conflict" : null },
        h("code", {}, path),
        conflicting.has(path) ? h("span", { class: "ins-pill ins-danger" }, t("agents.conflict")) : null)))
      : h("p", { class: "muted" }, t("agents.noFiles")));
}

/** The page: conflicts first, then a card per running agent, then the files in use. */
function renderActivity({ activity, fetchedAt }) {
  const keys = new Map(activity.agents.map((a) => [a.taskId, a.taskKey]));
  const conflicting = new Set(activity.conflicts.map((c) => c.filePath));
  const taskRef = (id) => h("a", { href: `#/tasks/${id}` }, keys.get(id) || `#${id}`);
  const paths = Object.keys(activity.fileMap).sort((a, b) =>
    Number(conflicting.has(b)) - Number(conflicting.has(a)) || a.localeCompare(b));
  return [
    activity.conflicts.length ? h("section", { class: "card-panel conflicts", role: "alert", "data-testid": "conflicts" },
      h("h2", {}, `⚠ ${t("agents.conflicts")}`), h("p", {}, t("agents.conflictsHelp")),
      h("ul", {}, activity.conflicts.map((c) => h("li", {}, h("code", {}, c.filePath), " — ",
        taskList(c.taskIds, taskRef))))) : null,
    h("h2", {}, t("agents.title")),
    activity.agents.length
      ? [h("p", { class: "muted ins-small" }, t("agents.live")),
        h("div", { class: "agent-grid" }, activity.agents.map((a) => agentCard(a, conflicting, fetchedAt)))]
      : h("p", { class: "card-panel muted", "data-testid": "no-agents" }, t("agents.none")),
    activity.agents.length ? h("section", { class: "card-panel" }, h("h2", {}, t("agents.fileMap")),
      paths.length ? h("ul", { class: "file-map", "data-testid": "file-map" }, paths.map((path) => h("li",
        { class: conflicting.has(path) ? "conflict" : null },
        h("code", {}, path), h("span", { class: "file-tasks" }, taskList(activity.fileMap[path], taskRef)))))
        : h("p", { class: "muted" }, t("agents.noFileMap"))) : null];
}

/** Mount the agents view. */
export function mount(root, { projectId }) {
  let poll = null;
  const view = loadedView(root, {
    desktop: true, delay: 500,
    head: () => projectHeader(projectId, "/agents"),
    load: async () => ({ activity: await api.desktop("get_agent_activity", { projectId }), fetchedAt: Date.now() }),
    render: renderActivity,
    loaded: ({ activity }) => {  // while an agent runs, look again every POLL_MS
      clearTimeout(poll);
      if (activity.agents.length) poll = setTimeout(view.load, POLL_MS);
    },
    on: (event, data) => {
      if (event === "project:updated" && data.id === projectId) return "render";
      return event.startsWith("task:") && projectOf(data) === projectId ? "load" : null;
    },
  });
  const ticker = setInterval(() => {
    if (!view.data) return;
    for (const agent of view.data.activity.agents) {
      const el = root.querySelector(`[data-elapsed="${agent.taskId}"]`);
      if (el) el.textContent = elapsedText(agent, view.data.fetchedAt);
    }
  }, 1000);
  return () => {
    view.stop();
    clearTimeout(poll);
    clearInterval(ticker);
  };
}
