// The dependencies tab of a task page (task_tabs.js): the tasks it waits for and the tasks it
// blocks, each with its condition and a "Remove" button, and a form that adds a task it waits
// for. They come from desktop (local-only) commands.

import { h } from "../dom.js";
import { register, t } from "../i18n.js";
import { enumOf } from "../schema.js";
import { state, tasksOf } from "../store.js";
import { select } from "./common.js";
import { badge, fill, isLocalOnly, muted, panelBar, refresh, taskLink } from "./task_tabs.js";

register({  // key: [English, Turkish]
  "detail.parents": ["Waits for", "Bekledikleri"],
  "detail.children": ["Blocks", "Engelledikleri"],
  "detail.noDeps": ["None", "Yok"],
  "detail.addDep": ["Add a task this one waits for", "Bu görevin bekleyeceği bir görev ekle"],
  "detail.dependsOn": ["Task", "Görev"],
  "detail.condition": ["Condition", "Koşul"],
  "detail.add": ["Add", "Ekle"],
  "detail.remove": ["Remove", "Kaldır"],
  "detail.removeDep": ["Remove the dependency on {key}", "{key} bağımlılığını kaldır"],
  "cond.always": ["when it finishes", "bittiğinde"],
  "cond.on_success": ["when it succeeds", "başarılı olduğunda"],
  "cond.on_failure": ["when it fails", "başarısız olduğunda"],
});

/** The condition preselected for a new dependency. */
const NEW_CONDITION = "on_success";

/** The form that adds a dependency on another task of the project. */
function dependencyForm(tabs, candidates) {
  const { taskId, desktop } = tabs.ctx;
  const pick = select(candidates.map((c) => c.id), "", (id) => {
    const c = state.tasks.get(id);
    return `${c.task_key} ${c.title}`;
  });
  const conditions = enumOf("Dependency", "conditionType");
  const cond = select(conditions, conditions.includes(NEW_CONDITION) ? NEW_CONDITION : conditions[0], (c) => t(`cond.${c}`));
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const form = h("form", { class: "dep-form" },
    h("label", { class: "inline-field" }, t("detail.dependsOn"), pick),
    h("label", { class: "inline-field" }, t("detail.condition"), cond),
    h("button", { type: "submit" }, t("detail.add")), error);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!pick.value) return;
    try {
      await desktop("add_task_dependency", { taskId, dependsOnId: Number(pick.value), conditionType: cond.value });
      tabs.show("deps", true);
    } catch (err) {
      error.textContent = isLocalOnly(err) ? t("common.localOnly") : err.message;
      error.hidden = false;
    }
  });
  return form;
}

/** The dependencies tab: the tasks this one waits for and blocks, and the form that adds one. */
export function showDeps(panel, tabs) {
  const { taskId, task, desktop, act } = tabs.ctx;
  const load = async () => {
    const [deps, graph] = await Promise.all([
      desktop("get_task_dependencies", { taskId }),
      desktop("get_dependency_graph", { projectId: task().project_id }).catch(() => ({ edges: [] })),
    ]);
    const condition = new Map(graph.edges.map((e) => [`${e.from}>${e.to}`, e.conditionType]));
    return { ...deps, condition };
  };
  fill(panel, load, ({ parents, children, condition }) => {
    const row = (id, from, to, removeBody) => {
      const other = state.tasks.get(id);
      const cond = condition.get(`${from}>${to}`);
      return h("li", {}, taskLink(id), " ", other ? badge(other.status) : null, " ",
        cond ? h("span", { class: "bchip" }, t(`cond.${cond}`)) : null,
        h("button", { type: "button", class: "small", "aria-label": t("detail.removeDep", { key: other?.task_key || `#${id}` }),
          onclick: () => act(async () => { await desktop("remove_task_dependency", removeBody); tabs.show("deps", true); }) },
        t("detail.remove")));
    };
    const candidates = tasksOf(task().project_id).filter((other) => other.id !== taskId && !parents.includes(other.id)
      && !children.includes(other.id));
    const list = (ids, line) => (ids.length ? h("ul", { class: "dep-list" }, ids.map(line)) : muted("detail.noDeps"));
    return [panelBar(refresh(tabs, "deps")),
      h("h3", {}, t("detail.parents")),
      list(parents, (id) => row(id, id, taskId, { taskId, dependsOnId: id })),
      h("h3", {}, t("detail.children")),
      list(children, (id) => row(id, taskId, id, { taskId: id, dependsOnId: taskId })),
      candidates.length ? [h("h3", {}, t("detail.addDep")), dependencyForm(tabs, candidates)] : null];
  });
}
