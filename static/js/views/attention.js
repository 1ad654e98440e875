// Testing & failed (#/attention): tasks waiting for a person — in testing (review them) or
// failed — across every project, grouped by project. Loads each project's tasks into the
// store (main.js counts the same tasks for the page title) and follows the store live.

import { clear, h } from "../dom.js";
import { dateTime, onLanguageChange, register, t } from "../i18n.js";
import { loadTasks, state, subscribe } from "../store.js";

register({  // key: [English, Turkish]
  "att.title": ["Testing & failed", "Test ve başarısız"],
  "att.intro": ["Tasks waiting for you: review the ones in testing, look into the failed ones.", "Sizi bekleyen görevler: testtekileri inceleyin, başarısız olanlara bakın."],
  "att.none": ["No task is in testing or failed.", "Testte ya da başarısız görev yok."],
  "att.noProjects": ["There are no projects yet.", "Henüz proje yok."],
  "att.board": ["Open the board", "Panoyu aç"],
  "att.updated": ["updated {when}", "{when} güncellendi"],
  "att.loadFailed": ["Could not load the tasks of {project}: {error}", "{project} projesinin görevleri yüklenemedi: {error}"],
});

const WAITING = ["failed", "testing"];

/** Mount the attention view. */
export function mount(root) {
  const errors = new Map();  // projectId -> message
  const requested = new Set();
  let frame = 0;
  let alive = true;

  /** Load the tasks of every project not loaded yet. */
  function ensureLoaded() {
    for (const project of state.projects) {
      if (state.loadedProjects.has(project.id) || requested.has(project.id)) continue;
      requested.add(project.id);
      loadTasks(project.id).then(() => errors.delete(project.id)).catch((error) => {
        errors.set(project.id, error.message);
        requested.delete(project.id);
        if (alive) schedule();
      });
    }
  }

  function render() {
    frame = 0;
    const focused = root.contains(document.activeElement) ? document.activeElement.getAttribute("href") : null;
    clear(root);
    root.append(h("h1", {}, t("att.title")), h("p", { class: "muted" }, t("att.intro")));
    for (const [projectId, message] of errors) {
      const project = state.projects.find((p) => p.id === projectId);
      root.append(h("p", { class: "error", role: "alert" },
        t("att.loadFailed", { project: project ? project.name : `#${projectId}`, error: message })));
    }
    if (!state.projects.length) {
      root.append(h("p", { class: "empty" }, t("att.noProjects")));
      return;
    }
    const loading = state.projects.some((p) => !state.loadedProjects.has(p.id) && !errors.has(p.id));
    const groups = state.projects.map((project) => ({
      project,
      tasks: [...state.tasks.values()]
        .filter((task) => task.project_id === project.id && WAITING.includes(task.status))
        .sort((a, b) => WAITING.indexOf(a.status) - WAITING.indexOf(b.status)
          || (b.updated_at || "").localeCompare(a.updated_at || "")),
    })).filter((group) => group.tasks.length);
    if (!groups.length) {
      root.append(h("p", { class: "empty", "data-testid": "attention-empty" },
        loading ? t("common.loading") : t("att.none")));
      return;
    }
    root.append(...groups.map(({ project, tasks }) => h("section", { class: "card-panel attention-group",
      "data-testid": "attention-group", "data-project-id": project.id },
    h("header", { class: "attention-head" },
      h("h2", {}, project.name, h("span", { class: "badge" }, String(tasks.length))),
      h("a", { href: `#/projects/${project.id}` }, t("att.board"))),
    h("ul", { class: "attention-list" }, tasks.map((task) => h("li", { class: `status-${task.status}` },
      h("span", { class: `ins-pill status-${task.status}` }, t(`status.${task.status}`)),
      h("a", { href: `#/tasks/${task.id}`, "data-testid": "attention-task" },
        h("span", { class: "ins-key" }, task.task_key), ` ${task.title}`),
      h("time", { class: "muted ins-small", datetime: task.updated_at }, t("att.updated", { when: dateTime(task.updated_at) })),
      task.status === "failed" && task.last_error
        ? h("p", { class: "ins-reason muted" }, task.last_error) : null))))));
    if (focused) root.querySelector(`a[href="${CSS.escape(focused)}"]`)?.focus({ preventScroll: true });
  }

  function schedule() {
    if (!frame) frame = requestAnimationFrame(render);
  }

  const stopStore = subscribe((s, event) => {
    if (event === "project:created" || event === "resync") ensureLoaded();
    if (event === "connection" || event === "task:log" || event === "task:usage" || event.startsWith("plan:")) return;
    schedule();
  });
  const stopLanguage = onLanguageChange(render);

  render();
  ensureLoaded();
  return () => {
    alive = false;
    if (frame) cancelAnimationFrame(frame);
    stopStore();
    stopLanguage();
  };
}
