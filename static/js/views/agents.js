// Live agents (#/projects/:projectId/agents): what each running agent is doing (usage, recent
// tools, files) and the files two tasks touch at once (conflicts). Polls every 2 s while
// an agent runs and refreshes on task events. A desktop command: refused (403 local_only)
// when the board is opened from another machine.

import { api } from "../api.js";
import { append, clear, h } from "../dom.js";
import { cost, duration, tokens } from "../format.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { onEvent, refusedLocally, state } from "../store.js";
import { projectHeader } from "./common.js";

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

/** Mount the agents view. */
export function mount(root, { projectId }) {
  let activity = null;
  let fetchedAt = 0;
  let error = "";
  let refused = state.localOnlyRefused;
  let timer = null;
  let poll = null;
  let alive = true;
  let loading = false;
  let again = false;

  async function load() {
    if (refused) return render();
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    again = false;
    try {
      const answer = await api.desktop("get_agent_activity", { projectId });
      if (!alive) return;
      activity = answer;
      fetchedAt = Date.now();
      error = "";
    } catch (failure) {
      if (refusedLocally(failure)) {
        refused = true;
      } else {
        error = failure.message;
      }
    } finally {
      loading = false;
    }
    if (!alive) return;
    render();
    clearTimeout(poll);
    if (again) refresh();
    else if (!refused && activity && activity.agents.length) poll = setTimeout(load, POLL_MS);
  }

  const elapsedText = (agent) => duration((agent.elapsedSec * 1000) + (Date.now() - fetchedAt));

  function agentCard(agent, conflicting) {
    const stat = (key, value, extra = {}) => h("div", { class: "ins-tile" }, h("dt", {}, t(key)), h("dd", extra, value));
    return h("article", { class: "card-panel agent-card", "data-testid": "agent", "data-task-id": agent.taskId },
      h("h3", {}, h("a", { href: `#/tasks/${agent.taskId}` }, h("span", { class: "ins-key" }, agent.taskKey),
        ` ${agent.title}`)),
      agent.awaitingSubtasks ? h("p", { class: "muted" }, t("agents.awaiting")) : null,
      h("dl", { class: "ins-tiles ins-compact" },
        stat("agents.model", t(`model.${agent.model}`)),
        stat("agents.elapsed", elapsedText(agent), { "data-elapsed": agent.taskId }),
        stat("agents.tokens", `${tokens(agent.inputTokens)} / ${tokens(agent.outputTokens)}`),
        stat("agents.cost", cost(agent.totalCost)),
        stat("agents.tools", String(agent.toolCallCount))),
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

  function render() {
    const focused = root.contains(document.activeElement) ? document.activeElement.getAttribute("href") : null;
    clear(root);
    root.append(projectHeader(projectId, "/agents"));
    if (refused) {
      root.append(h("p", { class: "card-panel muted", role: "status", "data-testid": "local-only" }, t("common.localOnly")));
      return;
    }
    if (error) root.append(h("p", { class: "error", role: "alert" }, error));
    if (!activity) {
      if (!error) root.append(h("p", { class: "muted" }, t("common.loading")));
      return;
    }
    const keys = new Map(activity.agents.map((a) => [a.taskId, a.taskKey]));
    const conflicting = new Set(activity.conflicts.map((c) => c.filePath));
    const taskRef = (id) => h("a", { href: `#/tasks/${id}` }, keys.get(id) || `#${id}`);
    const paths = Object.keys(activity.fileMap).sort((a, b) =>
      Number(conflicting.has(b)) - Number(conflicting.has(a)) || a.localeCompare(b));
    append(root, [
      activity.conflicts.length ? h("section", { class: "card-panel conflicts", role: "alert", "data-testid": "conflicts" },
        h("h2", {}, `⚠ ${t("agents.conflicts")}`), h("p", {}, t("agents.conflictsHelp")),
        h("ul", {}, activity.conflicts.map((c) => h("li", {}, h("code", {}, c.filePath), " — ",
          c.taskIds.map((id, i) => [i ? ", " : "", taskRef(id)]))))) : null,
      h("h2", {}, t("agents.title")),
      activity.agents.length
        ? [h("p", { class: "muted ins-small" }, t("agents.live")),
          h("div", { class: "agent-grid" }, activity.agents.map((a) => agentCard(a, conflicting)))]
        : h("p", { class: "card-panel muted", "data-testid": "no-agents" }, t("agents.none")),
      activity.agents.length ? h("section", { class: "card-panel" }, h("h2", {}, t("agents.fileMap")),
        paths.length ? h("ul", { class: "file-map", "data-testid": "file-map" }, paths.map((path) => h("li",
          { class: conflicting.has(path) ? "conflict" : null },
          h("code", {}, path), h("span", { class: "file-tasks" },
            activityTasks(activity.fileMap[path], taskRef)))))
          : h("p", { class: "muted" }, t("agents.noFileMap"))) : null]);
    if (focused) root.querySelector(`a[href="${CSS.escape(focused)}"]`)?.focus({ preventScroll: true });
  }

  const activityTasks = (ids, ref) => ids.map((id, i) => [i ? ", " : "", ref(id)]);

  const ticker = setInterval(() => {
    if (!activity) return;
    for (const agent of activity.agents) {
      const el = root.querySelector(`[data-elapsed="${agent.taskId}"]`);
      if (el) el.textContent = elapsedText(agent);
    }
  }, 1000);

  const refresh = () => { clearTimeout(timer); timer = setTimeout(load, 500); };
  const stopEvents = onEvent(({ event, data }) => {
    if (event === "resync") return refresh();
    if (event === "project:updated" && data.id === projectId) return render();
    if (!event.startsWith("task:") || !data) return;
    if ((data.project_id ?? data.projectId) === projectId) refresh();
  });
  const stopLanguage = onLanguageChange(render);

  render();
  load();
  return () => {
    alive = false;
    clearTimeout(timer);
    clearTimeout(poll);
    clearInterval(ticker);
    stopEvents();
    stopLanguage();
  };
}
