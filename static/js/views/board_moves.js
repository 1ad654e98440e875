// How cards of the board are opened and moved: clicks, the "Move to" select, the card's menu,
// the keys of a focused card (Enter, Alt+Left/Right) and drag and drop between the columns.

import { go } from "../router.js";
import { state } from "../store.js";

const cardOf = (target) => target.closest?.(".task-card");
const idOf = (el) => Number(el.dataset.id);
const columnOf = (target) => target.closest?.(".board-col");

/**
 * move(id, status), asked first when it would stop a running agent: the one path of the
 * "Move to" select, the Alt+Left/Right keys and a drop. A press on the select that was meant as
 * a drag (the card moved under the pointer) picks an option on its release; a drop or a key
 * lands on the task as it is now, which may have started since the card was grabbed.
 * @returns {(id: number, status: string) => Promise<void>}
 */
export function askingMove(move, confirmStop) {
  return async (id, status) => {
    const task = state.tasks.get(id);
    if (task?.is_running && status !== "in_progress" && !(await confirmStop(task, status))) return;
    await move(id, status);
  };
}

/** Clicks, "Move to", the menu and the keys of the cards: open, move, show the log, run the
 * task with several agents. An open card menu closes at a click anywhere else. A held
 * Alt+arrow moves once: its repeats would carry a card into In progress and on out of it. */
export function bindCards(board, { statuses, statusOf, move, openLog, runSeveral }) {
  board.addEventListener("click", (event) => {
    const menu = event.target.closest?.(".card-menu");
    board.querySelectorAll(".card-menu[open]").forEach((open) => { if (open !== menu) open.open = false; });
    const el = cardOf(event.target);
    if (!el) return;
    const action = event.target.closest("[data-action]")?.dataset.action;
    if (action === "log") openLog(idOf(el));
    if (action === "attempts") {
      if (menu) menu.open = false;
      runSeveral(idOf(el));
    }
    if (action || event.target.closest("a, button, select, input, summary")) return;
    go(`/tasks/${idOf(el)}`);
  });
  board.addEventListener("change", (event) => {
    if (event.target.dataset.action !== "move") return;
    const el = cardOf(event.target);
    const status = event.target.value;
    event.target.value = "";  // the select is an action, not a state
    if (el && status) move(idOf(el), status);
  });
  board.addEventListener("keydown", (event) => {
    const el = cardOf(event.target);
    if (!el || event.target !== el) return;
    if (event.key === "Enter") {
      event.preventDefault();
      go(`/tasks/${idOf(el)}`);
    } else if (event.altKey && (event.key === "ArrowLeft" || event.key === "ArrowRight")) {
      event.preventDefault();
      if (event.repeat) return;
      const task = state.tasks.get(idOf(el));
      const next = statuses.indexOf(statusOf(task)) + (event.key === "ArrowLeft" ? -1 : 1);
      if (next >= 0 && next < statuses.length) move(task.id, statuses[next]);
    }
  });
}

/** Drag and drop of cards between columns: move(id, status) on a drop. A card re-rendered
 * during its drag (its task changed) is out of the page when the drag ends: its dragend does
 * not reach the board, so the card itself ends the drag (else a later drop of anything else
 * would move the card). */
export function bindDragAndDrop(board, move) {
  let dragId = null;
  const unmark = () => board.querySelectorAll(".drop-target, .dragging").forEach((el) => el.classList.remove("drop-target", "dragging"));
  const end = () => { dragId = null; unmark(); };
  board.addEventListener("dragstart", (event) => {
    const el = cardOf(event.target);
    dragId = el ? idOf(el) : null;
    if (!el) return;
    el.addEventListener("dragend", end, { once: true });
    event.dataTransfer.setData("text/plain", String(dragId));
    event.dataTransfer.effectAllowed = "move";
    el.classList.add("dragging");
  });
  board.addEventListener("dragover", (event) => {
    const column = columnOf(event.target);
    if (!column || dragId === null) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "move";
    if (!column.classList.contains("drop-target")) {
      board.querySelectorAll(".drop-target").forEach((el) => el.classList.remove("drop-target"));
      column.classList.add("drop-target");
    }
  });
  board.addEventListener("dragleave", (event) => {
    const column = columnOf(event.target);
    if (column && !column.contains(event.relatedTarget)) column.classList.remove("drop-target");
  });
  board.addEventListener("drop", (event) => {
    const column = columnOf(event.target);
    if (!column || dragId === null) return;
    event.preventDefault();
    const id = dragId;
    dragId = null;
    unmark();
    move(id, column.dataset.status);
  });
  board.addEventListener("dragend", end);
}
