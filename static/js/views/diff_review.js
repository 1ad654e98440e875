// Review comments on a task's diff (design §12): a click on a diff line (or Enter on it)
// opens a small editor for that file and line — side "new" for added and context lines,
// "old" for removed ones; the comments collect in a list (removable) and "Send review" posts
// them as one review (POST /api/tasks/:id/review) with an optional summary. The comments
// kept from earlier reviews (GET …/review) show at their lines.

import { h, toast } from "../dom.js";
import { register, t } from "../i18n.js";
import { enumOf } from "../schema.js";
import { api } from "../store.js";

register({  // key: [English, Turkish]
  "review.lineTitle": ["Comment on this line", "Bu satıra yorum yaz"],
  "review.editorLabel": ["Comment on {path}, line {line}", "{path}, {line}. satır için yorum"],
  "review.add": ["Add comment", "Yorum ekle"],
  "review.cancel": ["Cancel", "Vazgeç"],
  "review.title": ["Your review", "İncelemeniz"],
  "review.help": ["Click a line of the diff to comment on it.", "Yorum yazmak için farkın bir satırına tıklayın."],
  "review.where": ["{path}, line {line} ({side})", "{path}, {line}. satır ({side})"],
  "review.side.new": ["new", "yeni"],
  "review.side.old": ["old", "eski"],
  "review.remove": ["Remove", "Kaldır"],
  "review.removeLabel": ["Remove the comment on {path}, line {line}", "{path}, {line}. satırdaki yorumu kaldır"],
  "review.summary": ["Summary (optional)", "Özet (isteğe bağlı)"],
  "review.send": ["Send review", "İncelemeyi gönder"],
  "review.sent": ["Review sent; the agent goes back to work.", "İnceleme gönderildi; ajan yeniden çalışıyor."],
  "review.kept": ["Sent earlier", "Daha önce gönderildi"],
  "review.elsewhere": ["Earlier comments on lines no longer in the diff", "Artık farkta olmayan satırlara önceki yorumlar"],
});

/**
 * Where each line of a unified diff is: {path, line, side} for added, removed and context
 * lines, null for headers and hunk lines.
 * @param {string[]} lines
 * @returns {Array<{path: string, line: number, side: string}|null>}
 */
export function diffPositions(lines) {
  const sides = enumOf("ReviewComment", "side");
  const NEW = sides.includes("new") ? "new" : sides[0];
  const OLD = sides.includes("old") ? "old" : sides[1];
  let path = "";
  let oldLine = 0;
  let newLine = 0;
  let inHunk = false;
  return lines.map((line) => {
    if (line.startsWith("diff ")) {
      inHunk = false;
      const match = / b\/(.+)$/.exec(line);
      if (match) path = match[1];
      return null;
    }
    const hunk = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(line);
    if (hunk) {
      [oldLine, newLine, inHunk] = [Number(hunk[1]), Number(hunk[2]), true];
      return null;
    }
    if (!inHunk) {
      if (line.startsWith("+++ ") && line !== "+++ /dev/null") path = line.slice(4).replace(/^b\//, "");
      else if (line.startsWith("--- ") && line !== "--- /dev/null" && !path) path = line.slice(4).replace(/^a\//, "");
      return null;
    }
    if (line.startsWith("+")) return { path, line: newLine++, side: NEW };
    if (line.startsWith("-")) return { path, line: oldLine++, side: OLD };
    if (line.startsWith(" ") || line === "") {
      oldLine += 1;
      return { path, line: newLine++, side: NEW };
    }
    return null;  // "\ No newline at end of file"
  });
}

const keyOf = (c) => `${c.side}:${c.line}:${c.path}`;

/** A comment shown under its line. */
function note(comment, kept) {
  return h("div", { class: `d-note${kept ? " kept" : ""}`, "data-testid": kept ? "review-kept" : "review-note" },
    kept ? h("span", { class: "d-note-tag" }, t("review.kept")) : null, h("span", { class: "prose" }, comment.body));
}

/**
 * The review controls of a diff: call line(i, span) for each rendered line (it becomes
 * clickable), then place() once lines are added; box is the list with "Send review".
 * @param {{taskId: number, positions: Array, kept: Object[], draft: {comments: Object[], summary: string},
 *   onSent: () => void}} options
 */
export function diffReview({ taskId, positions, kept, draft, onSent }) {
  const lineNodes = new Map();  // line index -> element
  let editor = null;
  const list = h("ul", { class: "review-list" });
  const summaryId = `review-summary-${taskId}`;
  const summary = h("textarea", { id: summaryId, rows: "2", value: draft.summary });
  summary.addEventListener("input", () => { draft.summary = summary.value; });
  const send = h("button", { type: "button", class: "primary", "data-testid": "review-send" }, t("review.send"));
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const help = h("p", { class: "muted" }, t("review.help"));
  const elsewhere = h("div", {});
  const box = h("section", { class: "review-box", "data-testid": "review" },
    h("h3", {}, t("review.title")), help, list,
    h("div", { class: "field" }, h("label", { for: summaryId }, t("review.summary")), summary),
    h("div", { class: "actions" }, send), error, elsewhere);

  let notes = [];  // the comment elements placed under their lines
  /** The last comment under a line (or the line): where the next one goes. */
  const lastAfter = (node) => {
    let after = node;
    while (after.nextSibling?.classList?.contains("d-note")) after = after.nextSibling;
    return after;
  };

  function place() {
    for (const el of notes) el.remove();
    notes = [];
    const at = new Map();
    positions.forEach((pos, i) => { if (pos) at.set(keyOf(pos), i); });
    const unplaced = [];
    const put = (comment, isKept) => {
      const node = lineNodes.get(at.get(keyOf(comment)));
      if (!node) { if (isKept) unplaced.push(comment); return; }
      const el = note(comment, isKept);
      lastAfter(node).after(el);
      notes.push(el);
    };
    for (const comment of kept) put(comment, true);
    for (const comment of draft.comments) put(comment, false);
    elsewhere.replaceChildren(...(unplaced.length ? [h("h3", {}, t("review.elsewhere")), h("ul", { class: "review-list" },
      unplaced.map((c) => h("li", {}, h("code", {}, t("review.where", { path: c.path, line: c.line, side: t(`review.side.${c.side}`) })),
        " ", h("span", { class: "prose" }, c.body))))] : []));
    if (editor && lineNodes.has(editor.index)) lastAfter(lineNodes.get(editor.index)).after(editor.el);
    renderList();
  }

  function renderList() {
    list.replaceChildren(...draft.comments.map((c, i) => h("li", { "data-testid": "review-comment" },
      h("code", {}, t("review.where", { path: c.path, line: c.line, side: t(`review.side.${c.side}`) })), " ",
      h("span", { class: "prose" }, c.body),
      h("button", { type: "button", class: "small", "aria-label": t("review.removeLabel", { path: c.path, line: c.line }),
        onclick: () => { draft.comments.splice(i, 1); place(); } }, t("review.remove")))));
    list.hidden = !draft.comments.length;
    send.disabled = !draft.comments.length;
  }

  function openEditor(index) {
    const pos = positions[index];
    if (!pos) return;
    editor?.el.remove();
    const id = `review-editor-${taskId}`;
    const text = h("textarea", { id, rows: "3" });
    const close = () => { el.remove(); editor = null; lineNodes.get(index)?.focus(); };
    const add = h("button", { type: "button", class: "primary small", onclick: () => {
      if (!text.value.trim()) { text.focus(); return; }
      draft.comments.push({ ...pos, body: text.value.trim() });
      el.remove();
      editor = null;
      place();
      lineNodes.get(index)?.focus();
    } }, t("review.add"));
    const el = h("div", { class: "d-editor", "data-testid": "review-editor" },
      h("label", { for: id }, t("review.editorLabel", { path: pos.path, line: pos.line })), text,
      h("div", { class: "actions" }, h("button", { type: "button", class: "small", onclick: close }, t("review.cancel")), add));
    text.addEventListener("keydown", (event) => {
      if (event.key === "Escape") { event.preventDefault(); close(); }
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); add.click(); }
    });
    editor = { el, index };
    lastAfter(lineNodes.get(index)).after(el);
    text.focus();
  }

  send.addEventListener("click", async () => {
    if (!draft.comments.length) return;
    error.hidden = true;
    send.disabled = true;
    try {
      const body = { comments: draft.comments };
      if (draft.summary.trim()) body.summary = draft.summary.trim();
      await api.sendReview(taskId, body);
      draft.comments = [];
      draft.summary = "";
      toast(t("review.sent"));
      onSent();
    } catch (err) {
      error.textContent = err.message;
      error.hidden = false;
      send.disabled = false;
    }
  });

  /** Keyboard: the diff is one tab stop; arrows move between lines, Enter comments. */
  function onKey(event) {
    const current = event.target.closest?.(".d-reviewable");
    const indexes = [...lineNodes.keys()].sort((a, b) => a - b);
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      const at = current ? indexes.indexOf(Number(current.dataset.index)) : -1;
      const next = indexes[event.key === "ArrowDown" ? at + 1 : Math.max(0, at - 1)];
      if (next !== undefined) { event.preventDefault(); lineNodes.get(next).focus(); }
    } else if (event.key === "Enter" && current) {
      event.preventDefault();
      openEditor(Number(current.dataset.index));
    }
  }

  renderList();
  return {
    box,
    /** Make a rendered line clickable (when it has a position). */
    line(index, node) {
      if (!positions[index]) return node;
      node.classList.add("d-reviewable");
      node.dataset.index = String(index);
      node.tabIndex = -1;
      node.title = t("review.lineTitle");
      node.addEventListener("click", () => openEditor(index));
      lineNodes.set(index, node);
      return node;
    },
    place,
    onKey,
  };
}
