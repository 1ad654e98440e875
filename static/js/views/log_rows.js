// The rows of a task's log terminal (no DOM): entries grouped into blocks (a tool call with
// its result, a thinking entry, any other entry), and the blocks flattened into rows of one
// terminal line each, wrapped at the terminal's width. Appending entries adds rows at the
// end; a block that changes (toggled, or its call got its result) is redone in place.

import { QUESTION_TOOL, questionLine } from "../format.js";
import { t } from "../i18n.js";

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
