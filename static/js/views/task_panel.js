// The pieces of a task page's panels (task_detail.js, task_fields.js, task_tabs.js,
// task_deps.js): filling a panel (loading note, data, or the note that desktop commands are
// refused), its bar and "Refresh" button, a muted line, and a task's status badge and link.

import { append, h } from "../dom.js";
import { register, t } from "../i18n.js";
import { ApiError, state } from "../store.js";

register({  // key: [English, Turkish]
  "detail.refresh": ["Refresh", "Yenile"],
});

/** Replace el's children (nested arrays allowed; null and false skipped). */
export const put = (el, ...children) => { el.replaceChildren(); append(el, children); };
/** Whether an error is the server's refusal of a desktop command (local_only). */
export const isLocalOnly = (error) => error instanceof ApiError && error.code === "local_only";
/** The note shown instead of what desktop commands would give. */
export const localOnlyNote = () => h("p", { class: "detail-local-only muted" }, t("common.localOnly"));
/** A muted line of text (an i18n key). */
export const muted = (key) => h("p", { class: "muted" }, t(key));

/** A task's status as a coloured badge. */
export function badge(status) {
  return h("span", { class: `status-badge st-${status}` }, t(`status.${status}`));
}

/** A link to a task: its key and title when the store knows it. */
export function taskLink(id) {
  const other = state.tasks.get(id);
  return h("a", { href: `#/tasks/${id}` }, other ? `${other.task_key} ${other.title}` : `#${id}`);
}

/** Load into a panel: loading note, then render(data); a local_only refusal shows the note. */
export async function fill(panel, load, render) {
  put(panel, h("p", { class: "muted" }, t("common.loading")));
  try {
    const data = await load();
    put(panel, render(data));
  } catch (error) {
    put(panel, isLocalOnly(error) ? localOnlyNote() : h("p", { class: "error" }, error.message));
  }
}

/** The bar at the top of a panel. */
export const panelBar = (...items) => h("div", { class: "panel-bar" }, ...items);
/** The "Refresh" button of a tab: shows it again, loading its data anew. */
export const refresh = (tabs, name) => h("button", { type: "button", class: "small", onclick: () => tabs.show(name, true) },
  t("detail.refresh"));
