// The live log terminal of a task: a virtualised list of fixed-height rows.
//
// Entries are kept in an array and grouped into blocks (a tool call with its result,
// a thinking entry, any other entry).  Blocks are flattened into rows of one terminal
// line each, wrapped at the width of the viewport, so every row is ROW_H pixels high
// and only the rows in view (plus a buffer) exist as DOM nodes.  Appending entries
// adds rows at the end; nothing already rendered is rebuilt unless it changed.

import { h } from "../dom.js";
import { duration } from "../format.js";
import { register, t } from "../i18n.js";

register({  // key: [English, Turkish]
  "log.count": ["{n} entries", "{n} kayıt"],
  "log.expandAll": ["Expand all", "Tümünü aç"],
  "log.collapseAll": ["Collapse all", "Tümünü kapat"],
  "log.jump": ["Jump to latest", "En sona git"],
  "log.jumpNew": ["Jump to latest ({n} new)", "En sona git ({n} yeni)"],
  "log.empty": ["No log yet.", "Henüz günlük yok."],
  "log.thinking": ["thinking", "düşünüyor"],
  "log.toggle": ["Show or hide the details", "Ayrıntıları göster veya gizle"],
  "log.label": ["Agent log", "Ajan günlüğü"],
  "log.waiting": ["waiting for the result…", "sonuç bekleniyor…"],
});

/** Row height in px; board.css sizes .log-row with the same number. */
export const ROW_H = 20;
/** Rows rendered above and below the visible slice. */
const BUFFER = 40;
/** Character columns taken by the time gutter and the toggle before the text. */
const GUTTER_COLS = 11;
/** Extra indent (columns) of the rows inside a tool call or thinking block. */
const CHILD_INDENT = 2;
/** Unmatched tool calls kept waiting for their result. */
const MAX_OPEN_CALLS = 64;

const pad = (n) => String(n).padStart(2, "0");
function clock(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? "" : `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
const ms = (value) => (value < 1000 ? `${value} ms` : duration(value));

/** Split one line into pieces of at most cols characters, preferring a break after a space. */
function wrap(line, cols) {
  if (line.length <= cols) return [line];
  const out = [];
  let rest = line;
  while (rest.length > cols) {
    let cut = rest.lastIndexOf(" ", cols - 1);
    if (cut < cols * 0.6) cut = cols;
    else cut += 1;
    out.push(rest.slice(0, cut));
    rest = rest.slice(cut);
  }
  if (rest) out.push(rest);
  return out;
}

function blockKind(entry) {
  if (entry.kind === "tool_call") return "call";
  if (entry.kind === "thinking") return "thinking";
  return "plain";
}

/**
 * A log terminal. Call setEntries() with the initial log, then append() live entries
 * (duplicates by id are dropped, so a replay after a reconnect is harmless).
 * @returns {{el: HTMLElement, setEntries: (entries: Object[]) => void,
 *   append: (entries: Object[]) => void, size: () => number, entries: () => Object[],
 *   destroy: () => void}}
 */
export function createLogView() {
  /** @type {Object[]} */
  let entries = [];
  let blocks = [];
  let openCalls = [];
  let rows = [];
  let lastId = 0;
  let loaded = false;
  let pending = [];
  let cols = 80;
  let expandDefault = false;
  let follow = true;
  let unseen = 0;
  let frame = 0;
  let first = 0;  // the rendered rows are [first, last)
  let last = 0;
  const rendered = new Map();

  const spacer = h("div", { class: "log-spacer" });
  const viewport = h("div", { class: "log-viewport", tabindex: "0", role: "log",
    "aria-label": t("log.label") }, spacer);
  const empty = h("p", { class: "log-empty" }, t("log.empty"));
  const jump = h("button", { type: "button", class: "log-jump", hidden: true, onclick: jumpToLatest });
  const count = h("span", { class: "log-count" });
  const el = h("div", { class: "log-view" },
    h("div", { class: "log-toolbar" }, count,
      h("span", { class: "log-tools" },
        h("button", { type: "button", class: "small", onclick: () => setAll(true) }, t("log.expandAll")),
        h("button", { type: "button", class: "small", onclick: () => setAll(false) }, t("log.collapseAll")))),
    h("div", { class: "log-frame" }, viewport, empty, jump));

  // --- blocks and rows ------------------------------------------------------

  /** Add one entry; returns [block, isNewBlock]. */
  function addEntry(entry) {
    entries.push(entry);
    if (entry.kind === "tool_result") {
      const i = openCalls.findIndex((b) => b.entry.runId === entry.runId
        && (!entry.tool || b.entry.tool === entry.tool));
      if (i >= 0) {
        const block = openCalls[i];
        openCalls.splice(i, 1);
        block.result = entry;
        if (entry.isError) block.expanded = true;
        return [block, false];
      }
    }
    const block = { entry, kind: blockKind(entry), result: null, expanded: expandDefault, start: 0 };
    if (block.kind === "call") {
      openCalls.push(block);
      if (openCalls.length > MAX_OPEN_CALLS) openCalls.shift();
    }
    blocks.push(block);
    return [block, true];
  }

  function pushLines(block, text, cls, out, { firstRow = false, indent = 0 } = {}) {
    let isFirst = firstRow;
    for (const line of String(text ?? "").replace(/\t/g, "    ").split("\n")) {
      for (const piece of wrap(line, Math.max(10, cols - indent))) {
        out.push({ block, text: piece, cls, first: isFirst });
        isFirst = false;
      }
    }
  }

  /** Append the rows of one block to out. */
  function rowsOf(block, out) {
    block.start = out.length;
    const { entry } = block;
    const error = entry.isError ? " is-error" : "";
    if (block.kind === "call") {
      const result = block.result;
      const bad = result && result.isError ? " is-error" : "";
      out.push({ block, head: true, first: true, cls: `k-tool_call head${bad}` });
      if (!block.expanded) return;
      if (entry.message.length > cols - 4) {
        pushLines(block, entry.message, "k-tool_call child", out, { indent: CHILD_INDENT });
      }
      if (result) pushLines(block, result.message, `k-tool_result child${bad}`, out, { indent: CHILD_INDENT });
      else out.push({ block, text: t("log.waiting"), cls: "k-tool_call child waiting" });
    } else if (block.kind === "thinking") {
      out.push({ block, head: true, first: true, cls: "k-thinking head" });
      if (block.expanded) pushLines(block, entry.message, "k-thinking child", out, { indent: CHILD_INDENT });
    } else if (entry.kind === "status") {
      out.push({ block, text: entry.message, cls: "k-status", first: true });
    } else {
      pushLines(block, entry.message, `k-${entry.kind}${error}`, out, { firstRow: true });
    }
  }

  function rebuildRows() {
    const next = [];
    for (const block of blocks) rowsOf(block, next);
    rows = next;
  }

  /** Redo the rows of one block in place (it was toggled or got its result). */
  function replaceRows(block) {
    const index = blocks.lastIndexOf(block);
    const start = block.start;
    const end = index + 1 < blocks.length ? blocks[index + 1].start : rows.length;
    const fresh = [];
    rowsOf(block, fresh);
    block.start = start;
    rows.splice(start, end - start, ...fresh);
    const delta = fresh.length - (end - start);
    if (delta) for (let i = index + 1; i < blocks.length; i += 1) blocks[i].start += delta;
  }

  // --- rendering ------------------------------------------------------------

  function rowElement(row, index) {
    const node = document.createElement("div");
    node.className = `log-row ${row.cls}`;
    node.style.top = `${index * ROW_H}px`;
    const time = document.createElement("span");
    time.className = "log-time";
    time.textContent = row.first ? clock(row.block.entry.createdAt) : "";
    node.append(time);
    if (row.head) {
      const { entry, result, expanded } = row.block;
      node.append(h("button", { type: "button", class: "log-toggle", "data-row": String(index),
        "aria-expanded": String(expanded), "aria-label": t("log.toggle"), title: t("log.toggle") },
      expanded ? "▾" : "▸"));
      if (row.block.kind === "call") {
        const tool = entry.tool || "tool";
        const summary = entry.message.startsWith(`${tool}: `) ? entry.message.slice(tool.length + 2) : entry.message;
        const meta = result ? `${result.isError ? "✗" : "✓"}${result.durationMs != null ? ` ${ms(result.durationMs)}` : ""}` : "…";
        node.append(h("span", { class: "log-text" }, h("b", { class: "log-tool" }, tool), " ", summary),
          h("span", { class: result ? "log-meta" : "log-meta pending" }, meta));
      } else {
        const firstLine = entry.message.split("\n", 1)[0];
        node.append(h("span", { class: "log-text" }, h("i", {}, t("log.thinking")), " ", firstLine));
      }
    } else {
      const text = document.createElement("span");
      text.className = "log-text";
      text.textContent = row.text;
      node.append(text);
    }
    return node;
  }

  /** Drop the rendered rows from index on (they changed). */
  function invalidate(from) {
    for (const [i, node] of rendered) {
      if (i >= from) {
        node.remove();
        rendered.delete(i);
      }
    }
    last = Math.min(last, from);
    if (first >= last) first = last = 0;
  }

  function paint() {
    frame = 0;
    spacer.style.height = `${rows.length * ROW_H}px`;
    const top = viewport.scrollTop;
    const from = Math.max(0, Math.floor(top / ROW_H) - BUFFER);
    const to = Math.min(rows.length, Math.ceil((top + viewport.clientHeight) / ROW_H) + BUFFER);
    for (const [i, node] of rendered) {
      if (i < from || i >= to) {
        node.remove();
        rendered.delete(i);
      }
    }
    if (rendered.size === 0) first = last = from;
    first = Math.max(first, from);
    last = Math.min(last, to);
    // keep DOM order = row order (tab order of the toggles): prepend above, append below
    const above = document.createDocumentFragment();
    for (let i = from; i < first; i += 1) {
      const node = rowElement(rows[i], i);
      rendered.set(i, node);
      above.append(node);
    }
    spacer.prepend(above);
    const below = document.createDocumentFragment();
    for (let i = Math.max(last, from); i < to; i += 1) {
      if (rendered.has(i)) continue;
      const node = rowElement(rows[i], i);
      rendered.set(i, node);
      below.append(node);
    }
    spacer.append(below);
    first = from;
    last = to;
    empty.hidden = entries.length > 0 || !loaded;
    count.textContent = t("log.count", { n: entries.length.toLocaleString() });
    jump.hidden = follow;
    jump.textContent = unseen ? t("log.jumpNew", { n: unseen }) : t("log.jump");
  }

  function schedule() {
    if (!frame) frame = requestAnimationFrame(paint);
  }

  const atBottom = () => viewport.scrollTop + viewport.clientHeight >= viewport.scrollHeight - ROW_H;

  function toBottom() {
    spacer.style.height = `${rows.length * ROW_H}px`;
    viewport.scrollTop = viewport.scrollHeight;
  }

  function jumpToLatest() {
    follow = true;
    unseen = 0;
    toBottom();
    schedule();
    viewport.focus({ preventScroll: true });
  }

  function toggle(block) {
    block.expanded = !block.expanded;
    replaceRows(block);
    invalidate(block.start);
    schedule();
  }

  function setAll(expanded) {
    expandDefault = expanded;
    for (const block of blocks) if (block.kind !== "plain") block.expanded = expanded;
    rebuildRows();
    invalidate(0);
    if (follow) toBottom();
    schedule();
  }

  /** Columns of text that fit in the viewport (0 while it is hidden). */
  function measureCols() {
    const width = viewport.clientWidth;
    if (!width) return 0;
    const probe = h("span", { class: "log-probe" }, "0".repeat(50));
    viewport.append(probe);
    const char = probe.getBoundingClientRect().width / 50 || 8;
    probe.remove();
    return Math.max(20, Math.floor((width - 16) / char) - GUTTER_COLS);
  }

  const resizer = new ResizeObserver(() => {
    const next = measureCols();
    if (!next) return;  // hidden (an inactive tab)
    const anchor = rows[Math.floor(viewport.scrollTop / ROW_H)];
    if (next !== cols) {
      cols = next;
      rebuildRows();
      invalidate(0);
      spacer.style.height = `${rows.length * ROW_H}px`;
      if (!follow && anchor) viewport.scrollTop = anchor.block.start * ROW_H;
    }
    if (follow) toBottom();
    schedule();
  });
  resizer.observe(viewport);

  viewport.addEventListener("scroll", () => {
    follow = atBottom();
    if (follow) unseen = 0;
    schedule();
  }, { passive: true });
  spacer.addEventListener("click", (event) => {
    const button = event.target.closest("button.log-toggle");
    if (!button) return;
    const row = rows[Number(button.dataset.row)];
    if (row) toggle(row.block);
  });

  // --- the interface ----------------------------------------------------------

  function add(list) {
    let changedFrom = rows.length;
    let added = 0;
    for (const entry of list) {
      if (!entry || (typeof entry.id === "number" && entry.id <= lastId)) continue;
      if (typeof entry.id === "number") lastId = entry.id;
      entry.message = entry.message == null ? "" : String(entry.message);
      added += 1;
      const [block, isNew] = addEntry(entry);
      if (isNew) {
        rowsOf(block, rows);
      } else if (block === blocks[blocks.length - 1]) {
        rows.length = block.start;
        changedFrom = Math.min(changedFrom, block.start);
        rowsOf(block, rows);
      } else {  // the result of an earlier call (parallel tool calls)
        changedFrom = Math.min(changedFrom, block.start);
        replaceRows(block);
      }
    }
    return { changedFrom, added };
  }

  return {
    el,
    /** Replace everything with this (complete) log, oldest first. */
    setEntries(list) {
      entries = [];
      blocks = [];
      openCalls = [];
      rows = [];
      lastId = 0;
      loaded = true;
      cols = measureCols() || cols;
      add(list || []);
      const early = pending;
      pending = [];
      add(early);
      invalidate(0);
      follow = true;
      unseen = 0;
      toBottom();
      schedule();
    },
    /** Add live entries (a task:log message's entries). */
    append(list) {
      if (!loaded) {
        pending.push(...list);
        return;
      }
      const wasAtBottom = follow;
      const { changedFrom, added } = add(list);
      if (!added) return;
      invalidate(changedFrom);
      if (wasAtBottom) toBottom();
      else unseen += added;
      schedule();
    },
    /** How many entries are held. */
    size: () => entries.length,
    /** The entries held, oldest first (to carry them over to a new view). */
    entries: () => entries.slice(),
    destroy() {
      resizer.disconnect();
      if (frame) cancelAnimationFrame(frame);
      frame = 0;
    },
  };
}
