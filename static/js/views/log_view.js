// The live log terminal of a task: a virtualised list of fixed-height rows.
//
// The rows come from log_rows.js (one terminal line each, wrapped at the width of the
// viewport), so every row is ROW_H pixels high and only the rows in view (plus a buffer)
// exist as DOM nodes. Appending entries adds rows at the end; nothing already rendered is
// rebuilt unless it changed. A page shows the newest entries first and fetches older ones
// (older()) when asked or when scrolled to the top, so a long log never comes whole.

import { h } from "../dom.js";
import { QUESTION_TOOL, duration } from "../format.js";
import { register, t } from "../i18n.js";
import { LogRows } from "./log_rows.js";

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
