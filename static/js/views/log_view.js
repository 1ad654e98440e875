// The live log terminal of a task: a virtualised list of fixed-height rows.
//
// The rows come from LogRows, below (one terminal line each, wrapped at the width of the
// viewport), so every row is ROW_H pixels high and only the rows in view (plus a buffer)
// exist as DOM nodes. Appending entries adds rows at the end; nothing already rendered is
// rebuilt unless it changed. A page shows the newest entries first and fetches older ones
// (older()) when asked or when scrolled to the top, so a long log never comes whole.

import { h } from "../dom.js";
import { QUESTION_TOOL, duration, questionLine, register, t } from "../i18n.js";

register({  // key: [English, Turkish]
  "log.count": ["{n} entries", "{n} kayıt"],
  "log.countNewest": ["newest {n} entries", "en yeni {n} kayıt"],
  "log.older": ["Show older entries", "Daha eski kayıtları göster"],
  "log.expandAll": ["Expand all", "Tümünü aç"],
  "log.collapseAll": ["Collapse all", "Tümünü kapat"],
  "log.jump": ["Jump to latest", "En sona git"],
  "log.jumpNew": ["Jump to latest ({n} new)", "En sona git ({n} yeni)"],
  "log.empty": ["No log yet.", "Henüz günlük yok."],
  "log.thinking": ["thinking", "düşünüyor"],
  "log.toggle": ["Show or hide the details", "Ayrıntıları göster veya gizle"],
  "log.label": ["Agent log", "Ajan günlüğü"],
  "log.waiting": ["waiting for the result…", "sonuç bekleniyor…"],
  "log.youSaid": ["You", "Siz"],
  "log.agentSaid": ["Agent", "Ajan"],
  "log.verifierSaid": ["Verifier", "Doğrulayıcı"],
  "log.prSaid": ["Pull request", "Çekme isteği"],
  "log.question": ["Question", "Soru"],
});

/** Row height in px; board.css sizes .log-row with the same number. */
export const ROW_H = 20;
/** Rows rendered above and below the visible slice. */
const BUFFER = 40;
/** Character columns taken by the time gutter and the toggle before the text. */
const GUTTER_COLS = 11;

const pad = (n) => String(n).padStart(2, "0");
function clock(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? "" : `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
const ms = (value) => (value < 1000 ? `${value} ms` : duration(value));

/** The head of a call or thinking block: its toggle and one line about it. */
function headParts(row, index) {
  const { entry, result, expanded } = row.block;
  const toggle = h("button", { type: "button", class: "log-toggle", "data-row": String(index),
    "aria-expanded": String(expanded), "aria-label": t("log.toggle"), title: t("log.toggle") },
  expanded ? "▾" : "▸");
  if (row.block.kind !== "call") {
    const firstLine = entry.message.split("\n", 1)[0];
    return [toggle, h("span", { class: "log-text" }, h("i", {}, t("log.thinking")), " ", firstLine)];
  }
  const tool = entry.tool || "tool";
  const summary = entry.message.startsWith(`${tool}: `) ? entry.message.slice(tool.length + 2) : entry.message;
  const meta = result ? `${result.isError ? "✗" : "✓"}${result.durationMs != null ? ` ${ms(result.durationMs)}` : ""}` : "…";
  const label = tool === QUESTION_TOOL ? `❓ ${t("log.question")}` : tool;
  return [toggle, h("span", { class: "log-text" }, h("b", { class: "log-tool" }, label), " ", summary),
    h("span", { class: result ? "log-meta" : "log-meta pending" }, meta)];
}

/** The element of one row, placed at its index. */
function rowElement(row, index) {
  const node = document.createElement("div");
  node.className = `log-row ${row.cls}`;
  node.style.top = `${index * ROW_H}px`;
  const time = document.createElement("span");
  time.className = "log-time";
  time.textContent = row.first ? clock(row.block.entry.createdAt) : "";
  node.append(time);
  if (row.head) {
    node.append(...headParts(row, index));
  } else {
    const text = document.createElement("span");
    text.className = "log-text";
    text.textContent = row.text;
    node.append(text);
  }
  return node;
}

/**
 * The rows in view (plus BUFFER) as elements of spacer, inside the scrolling viewport.
 * paint(rows) renders what scrolled into view; invalidate(from) drops what changed.
 */
function virtualRows(viewport, spacer) {
  const rendered = new Map();
  let first = 0;  // the rendered rows are [first, last)
  let last = 0;
  const render = (rows, i) => {
    const node = rowElement(rows[i], i);
    rendered.set(i, node);
    return node;
  };
  return {
    invalidate(from) {
      for (const [i, node] of rendered) {
        if (i >= from) {
          node.remove();
          rendered.delete(i);
        }
      }
      last = Math.min(last, from);
      if (first >= last) first = last = 0;
    },
    paint(rows) {
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
      for (let i = from; i < first; i += 1) above.append(render(rows, i));
      spacer.prepend(above);
      const below = document.createDocumentFragment();
      for (let i = Math.max(last, from); i < to; i += 1) if (!rendered.has(i)) below.append(render(rows, i));
      spacer.append(below);
      first = from;
      last = to;
    },
  };
}

/** Columns of text that fit in the viewport (0 while it is hidden). */
function measureCols(viewport) {
  const width = viewport.clientWidth;
  if (!width) return 0;
  const probe = h("span", { class: "log-probe" }, "0".repeat(50));
  viewport.append(probe);
  const char = probe.getBoundingClientRect().width / 50 || 8;
  probe.remove();
  return Math.max(20, Math.floor((width - 16) / char) - GUTTER_COLS);
}

/** Rows from the top at which scrolling up fetches the older entries. */
const OLDER_AT = 50;
/** Entries fetched at a time: the newest to start with, then older ones. */
export const LOG_PAGE = 1000;

/**
 * A log terminal. Call setEntries() with the initial log, then append() live entries
 * (duplicates by id are dropped, so a replay after a reconnect is harmless).
 * @param {{older?: (beforeId: number, limit: number) => Promise<Object[]>}} [options]  fetches
 *   up to limit entries before an id, oldest first (fewer: there are no more)
 * @returns {{el: HTMLElement, setEntries: (entries: Object[], complete?: boolean) => void,
 *   append: (entries: Object[]) => void, size: () => number, entries: () => Object[],
 *   complete: () => boolean, destroy: () => void}}
 */
export function createLogView({ older } = {}) {
  const log = new LogRows();
  let loaded = false;
  let complete = true;  // every entry up to the first is held
  let fetching = null;
  let pending = [];
  let follow = true;
  let unseen = 0;
  let frame = 0;

  const spacer = h("div", { class: "log-spacer" });
  const viewport = h("div", { class: "log-viewport", tabindex: "0", role: "log",
    "aria-label": t("log.label") }, spacer);
  const empty = h("p", { class: "log-empty" }, t("log.empty"));
  const jump = h("button", { type: "button", class: "log-jump", hidden: true, onclick: jumpToLatest });
  const count = h("span", { class: "log-count" });
  const more = h("button", { type: "button", class: "small", hidden: true, "data-testid": "log-older",
    onclick: () => fetchOlder() }, t("log.older"));
  const el = h("div", { class: "log-view" },
    h("div", { class: "log-toolbar" }, h("span", { class: "log-tools" }, count, more),
      h("span", { class: "log-tools" },
        h("button", { type: "button", class: "small", onclick: () => setAll(true) }, t("log.expandAll")),
        h("button", { type: "button", class: "small", onclick: () => setAll(false) }, t("log.collapseAll")))),
    h("div", { class: "log-frame" }, viewport, empty, jump));
  const rows = virtualRows(viewport, spacer);

  function paint() {
    frame = 0;
    rows.paint(log.rows);
    empty.hidden = log.entries.length > 0 || !loaded;
    count.textContent = t(complete ? "log.count" : "log.countNewest", { n: log.entries.length.toLocaleString() });
    more.hidden = complete || !older;  // nothing to read them with: the count says "newest"
    more.disabled = Boolean(fetching);
    jump.hidden = follow;
    jump.textContent = unseen ? t("log.jumpNew", { n: unseen }) : t("log.jump");
  }

  function schedule() {
    if (!frame) frame = requestAnimationFrame(paint);
  }

  const atBottom = () => viewport.scrollTop + viewport.clientHeight >= viewport.scrollHeight - ROW_H;

  function toBottom() {
    spacer.style.height = `${log.rows.length * ROW_H}px`;
    viewport.scrollTop = viewport.scrollHeight;
  }

  function jumpToLatest() {
    follow = true;
    unseen = 0;
    toBottom();
    schedule();
    viewport.focus({ preventScroll: true });
  }

  function setAll(expanded) {
    log.setAll(expanded);
    rows.invalidate(0);
    if (follow) toBottom();
    schedule();
  }

  const resizer = new ResizeObserver(() => {
    const next = measureCols(viewport);
    if (!next) return;  // hidden (an inactive tab)
    const anchor = log.rows[Math.floor(viewport.scrollTop / ROW_H)];
    if (next !== log.cols) {
      log.cols = next;
      log.rebuild();
      rows.invalidate(0);
      spacer.style.height = `${log.rows.length * ROW_H}px`;
      if (!follow && anchor) viewport.scrollTop = anchor.block.start * ROW_H;
    }
    if (follow) toBottom();
    schedule();
  });
  resizer.observe(viewport);

  /**
   * Hold these entries (oldest first) instead: the blocks held stay open or closed, new ones
   * follow "Expand all"; the rows in view stay where they are (added above: shifted down).
   */
  function replace(entries) {
    const held = new Set(log.entries.map((entry) => entry.id));
    const open = new Set(log.blocks.filter((b) => b.expanded).map((b) => b.entry.id));
    const top = Math.floor(viewport.scrollTop / ROW_H);
    const row = follow ? null : log.rows[top];  // the row at the top of the view stays there
    const anchor = row ? { id: row.block.entry.id, below: viewport.scrollTop - row.block.start * ROW_H } : null;
    log.reset();
    log.add(entries);
    for (const block of log.blocks) {
      if (block.kind !== "plain") block.expanded = open.has(block.entry.id) || (!held.has(block.entry.id) && log.expandDefault);
    }
    log.rebuild();
    rows.invalidate(0);
    spacer.style.height = `${log.rows.length * ROW_H}px`;
    const block = anchor && log.blocks.find((b) => b.entry.id === anchor.id);
    if (follow) toBottom();
    else if (block) viewport.scrollTop = block.start * ROW_H + anchor.below;
  }

  /** Put older entries before those held, keeping the rows in view where they are. */
  function prepend(list) {
    const firstId = log.entries[0]?.id ?? Infinity;
    const fresh = list.filter((entry) => entry && entry.id < firstId);
    if (fresh.length) replace([...fresh, ...log.entries]);
  }

  /** Fetch the entries before the first one held (once at a time). */
  function fetchOlder() {
    if (complete || fetching || !older || !log.entries.length) return;
    fetching = older(log.entries[0].id, LOG_PAGE).then((list) => {
      complete = list.length < LOG_PAGE;
      prepend(list);
    }).catch(() => { /* the button stays: the next scroll or click tries again */ }).finally(() => {
      fetching = null;
      schedule();
    });
    schedule();
  }

  viewport.addEventListener("scroll", () => {
    follow = atBottom();
    if (follow) unseen = 0;
    if (viewport.scrollTop < OLDER_AT * ROW_H) fetchOlder();
    schedule();
  }, { passive: true });
  spacer.addEventListener("click", (event) => {
    const button = event.target.closest("button.log-toggle");
    const row = button && log.rows[Number(button.dataset.row)];
    if (!row) return;
    log.toggle(row.block);
    rows.invalidate(row.block.start);
    schedule();
  });

  return {
    el,
    /** Replace everything with this log, oldest first; complete = false when older entries exist. */
    setEntries(list, whole = true) {
      log.reset();
      loaded = true;
      complete = whole;
      log.cols = measureCols(viewport) || log.cols;
      log.add(list || []);
      const early = pending;
      pending = [];
      log.add(early);
      rows.invalidate(0);
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
      const { changedFrom, added } = log.add(list);
      if (!added) return;
      rows.invalidate(changedFrom);
      if (wasAtBottom) toBottom();
      else unseen += added;
      schedule();
    },
    /**
     * Take the newest page of the log read again after a reconnect (up to limit entries,
     * oldest first): the entries missed meanwhile go in among those held, by id (a live
     * entry heard since may be newer). When the page reaches back to none of those held, more
     * were missed than it holds: the older ones held go, and "Show older entries" reads them.
     */
    catchUp(list, limit) {
      if (!loaded) return this.setEntries(list, list.length < limit);
      const known = new Set(log.entries.map((entry) => entry.id));
      const fresh = list.filter((entry) => entry && !known.has(entry.id));
      if (!fresh.length) return undefined;
      const reaches = list.length < limit || list.some((entry) => known.has(entry.id) && entry.id < fresh[0].id);
      const kept = reaches ? log.entries : log.entries.filter((entry) => entry.id > list[list.length - 1].id);
      if (!reaches) complete = false;
      const wasAtBottom = follow;
      replace([...kept, ...fresh].sort((a, b) => a.id - b.id));
      if (!wasAtBottom) unseen += fresh.length;
      schedule();
      return undefined;
    },
    /** How many entries are held. */
    size: () => log.entries.length,
    /** The entries held, oldest first (to carry them over to a new view). */
    entries: () => log.entries.slice(),
    /** Whether every entry up to the first is held. */
    complete: () => complete,
    destroy() {
      resizer.disconnect();
      if (frame) cancelAnimationFrame(frame);
      frame = 0;
    },
  };
}

// --- the rows -----------------------------------------------------------------------------------

// The rows of a task's log terminal (no DOM): entries grouped into blocks (a tool call with
// its result, a thinking entry, any other entry), and the blocks flattened into rows of one
// terminal line each, wrapped at the terminal's width. Appending entries adds rows at the
// end; a block that changes (toggled, or its call got its result) is redone in place.

/** Extra indent (columns) of the rows inside a tool call or thinking block. */
const CHILD_INDENT = 2;
/** Unmatched tool calls kept waiting for their result. */
const MAX_OPEN_CALLS = 64;
/** Who wrote a message entry (its author), as its row names them; a person's is "You". */
const SAID = { agent: "log.agentSaid", verifier: "log.verifierSaid", pull_request: "log.prSaid" };

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
 * @typedef {Object} Block
 * @property {Object} entry  the log entry (a tool call's, for a call)
 * @property {"call"|"thinking"|"plain"} kind
 * @property {Object|null} result  a call's tool_result entry
 * @property {boolean} expanded
 * @property {number} start  the index of its first row
 *
 * @typedef {Object} Row  one terminal line
 * @property {Block} block
 * @property {string} [text]
 * @property {string} cls
 * @property {boolean} [first]  the block's first row (shows the time)
 * @property {boolean} [head]  the head row of a call or thinking block (with a toggle)
 */

/** The entries, blocks and rows of one log. */
export class LogRows {
  constructor() {
    this.cols = 80;
    this.expandDefault = false;
    this.reset();
  }

  /** Forget every entry. */
  reset() {
    /** @type {Object[]} */
    this.entries = [];
    /** @type {Block[]} */
    this.blocks = [];
    this.openCalls = [];
    /** @type {Row[]} */
    this.rows = [];
    this.lastId = 0;
  }

  /** Add one entry; returns [block, isNewBlock]. A question call stored as its JSON input
   * (before the server wrote its questions) reads as its questions. */
  addEntry(entry) {
    if (entry.kind === "tool_call" && entry.tool === QUESTION_TOOL) {
      entry = { ...entry, message: `${QUESTION_TOOL}: ${questionLine(entry.message)}` };
    }
    this.entries.push(entry);
    if (entry.kind === "tool_result") {
      const i = this.openCalls.findIndex((b) => b.entry.runId === entry.runId
        && (!entry.tool || b.entry.tool === entry.tool));
      if (i >= 0) {
        const block = this.openCalls[i];
        this.openCalls.splice(i, 1);
        block.result = entry;
        if (entry.isError) block.expanded = true;
        return [block, false];
      }
    }
    const block = { entry, kind: blockKind(entry), result: null, expanded: this.expandDefault, start: 0 };
    if (block.kind === "call") {
      this.openCalls.push(block);
      if (this.openCalls.length > MAX_OPEN_CALLS) this.openCalls.shift();
    }
    this.blocks.push(block);
    return [block, true];
  }

  pushLines(block, text, cls, out, { firstRow = false, indent = 0 } = {}) {
    let isFirst = firstRow;
    for (const line of String(text ?? "").replace(/\t/g, "    ").split("\n")) {
      for (const piece of wrap(line, Math.max(10, this.cols - indent))) {
        out.push({ block, text: piece, cls, first: isFirst });
        isFirst = false;
      }
    }
  }

  /** Append the rows of one block to out. */
  rowsOf(block, out) {
    block.start = out.length;
    const { entry } = block;
    const error = entry.isError ? " is-error" : "";
    if (block.kind === "call") {
      const result = block.result;
      const bad = result && result.isError ? " is-error" : "";
      out.push({ block, head: true, first: true, cls: `k-tool_call head${bad}` });
      if (!block.expanded) return;
      if (entry.message.length > this.cols - 4) {
        this.pushLines(block, entry.message, "k-tool_call child", out, { indent: CHILD_INDENT });
      }
      if (result) this.pushLines(block, result.message, `k-tool_result child${bad}`, out, { indent: CHILD_INDENT });
      else out.push({ block, text: t("log.waiting"), cls: "k-tool_call child waiting" });
    } else if (block.kind === "thinking") {
      out.push({ block, head: true, first: true, cls: "k-thinking head" });
      if (block.expanded) this.pushLines(block, entry.message, "k-thinking child", out, { indent: CHILD_INDENT });
    } else if (entry.kind === "status") {
      out.push({ block, text: entry.message, cls: "k-status", first: true });
    } else if (entry.kind === "message") {  // a message between a person and the agent
      const agent = entry.author === "agent";
      this.pushLines(block, `${agent ? "◂" : "▸"} ${t(SAID[entry.author] || "log.youSaid")}: ${entry.message}`,
        `k-message ${agent ? "from-agent" : "from-person"}`, out, { firstRow: true });
    } else if (entry.kind === "stop_check") {  // the project's stop check ran as the agent tried to finish
      this.pushLines(block, `${entry.isError ? "✗" : "✓"} ${entry.message}`, `k-stop_check${error}`, out, { firstRow: true });
    } else {
      this.pushLines(block, entry.message, `k-${entry.kind}${error}`, out, { firstRow: true });
    }
  }

  /** Redo every row (the width changed, or every block was expanded or collapsed). */
  rebuild() {
    const next = [];
    for (const block of this.blocks) this.rowsOf(block, next);
    this.rows = next;
  }

  /** Redo the rows of one block in place (it was toggled or got its result). */
  replaceRows(block) {
    const { blocks, rows } = this;
    const index = blocks.lastIndexOf(block);
    const start = block.start;
    const end = index + 1 < blocks.length ? blocks[index + 1].start : rows.length;
    const fresh = [];
    this.rowsOf(block, fresh);
    block.start = start;
    rows.splice(start, end - start, ...fresh);
    const delta = fresh.length - (end - start);
    if (delta) for (let i = index + 1; i < blocks.length; i += 1) blocks[i].start += delta;
  }

  /** Expand or collapse one block. */
  toggle(block) {
    block.expanded = !block.expanded;
    this.replaceRows(block);
  }

  /** Expand or collapse every block (and those to come). */
  setAll(expanded) {
    this.expandDefault = expanded;
    for (const block of this.blocks) if (block.kind !== "plain") block.expanded = expanded;
    this.rebuild();
  }

  /**
   * Add entries (those already held, by id, are skipped).
   * @returns {{changedFrom: number, added: number}}  the first row that changed, how many were added
   */
  add(list) {
    const { rows, blocks } = this;
    let changedFrom = rows.length;
    let added = 0;
    for (const entry of list) {
      if (!entry || (typeof entry.id === "number" && entry.id <= this.lastId)) continue;
      if (typeof entry.id === "number") this.lastId = entry.id;
      entry.message = entry.message == null ? "" : String(entry.message);
      added += 1;
      const [block, isNew] = this.addEntry(entry);
      if (isNew) {
        this.rowsOf(block, rows);
      } else if (block === blocks[blocks.length - 1]) {
        rows.length = block.start;
        changedFrom = Math.min(changedFrom, block.start);
        this.rowsOf(block, rows);
      } else {  // the result of an earlier call (parallel tool calls)
        changedFrom = Math.min(changedFrom, block.start);
        this.replaceRows(block);
      }
    }
    return { changedFrom, added };
  }
}
