// The docked log panel of the board: the live log of one task at a time, beside the
// columns, opened from a card's "Log" button (or when a task starts, with autoOpenTerminal).

import { api } from "../api.js";
import { h, toast } from "../dom.js";
import { register, t } from "../i18n.js";
import { state } from "../store.js";

/** The log view, imported on the first open (the board paints without it). */
const logView = () => import("./log_view.js");

register({  // key: [English, Turkish]
  "board.closeLog": ["Close the log panel", "Günlük panelini kapat"],
});

/** The newest entries a docked log shows. */
const DOCK_PAGE = 2000;

/**
 * The docked log panel of one task at a time: open(taskId) shows its live log in root.
 * onClose() after the user closed it.
 */
export function dockedLog(root, onClose) {
  let panel = null;  // {taskId, view, el}
  const dock = {
    get taskId() { return panel ? panel.taskId : null; },
    get el() { return panel ? panel.el : null; },
    open(taskId, rebuild = false) {
      if (panel && panel.taskId === taskId && !rebuild) return;
      dock.close();
      const task = state.tasks.get(taskId);
      const el = h("aside", { class: "term-panel", "aria-label": task ? `${task.task_key} ${task.title}` : "" },
        h("header", { class: "term-head" },
          h("a", { href: `#/tasks/${taskId}` }, task ? `${task.task_key} ${task.title}` : `#${taskId}`),
          h("button", { type: "button", class: "icon", "aria-label": t("board.closeLog"), title: t("board.closeLog"),
            onclick: () => { dock.close(); onClose(); } }, "×")));
      const mine = { taskId, view: null, el };
      panel = mine;
      root.append(el);
      const entries = api.taskLogs(taskId, DOCK_PAGE);
      entries.catch(() => {});  // told below, unless the panel closed meanwhile
      logView().then(({ createLogView }) => {
        if (panel !== mine) return null;
        mine.view = createLogView();
        el.append(mine.view.el);
        return entries.then((list) => {
          if (panel === mine) mine.view.setEntries(list);
        });
      }).catch((error) => toast(error.message, "error"));
    },
    /** After a reconnect: what the log got meanwhile (see createLogView's catchUp). */
    catchUp() {
      if (!panel) return;
      const { taskId, view } = panel;
      api.taskLogs(taskId, DOCK_PAGE).then((list) => {
        if (panel && panel.view === view) view.catchUp(list, DOCK_PAGE);
      }).catch(() => { /* the next reconnect tries again */ });
    },
    append(taskId, entries) {
      if (panel && panel.taskId === taskId) panel.view?.append(entries);
    },
    close() {
      if (!panel) return;
      panel.view?.destroy();
      panel.el.remove();
      panel = null;
    },
  };
  return dock;
}
