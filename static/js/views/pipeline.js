// Dependencies and pipeline (#/projects/:projectId/pipeline): the dependency graph drawn as
// inline SVG, one column per execution wave, edges styled by condition, nodes coloured by
// status; then what runs, what is queued and what is blocked, with the server's reasons.
// Desktop commands: refused (403 local_only) when the board is opened from another machine.

import { h, svg } from "../dom.js";
import { register, t } from "../i18n.js";
import { enumOf } from "../schema.js";
import { api } from "../store.js";
import { projectHeader } from "./common.js";
import { loadedView, projectOf } from "./loaded_view.js";

register({  // key: [English, Turkish]
  "pipe.graph": ["Dependency graph", "Bağımlılık grafiği"],
  "pipe.wave": ["Wave {n}", "Dalga {n}"],
  "pipe.finished": ["Finished", "Biten"],
  "pipe.empty": ["No task is waiting to run.", "Çalışmayı bekleyen görev yok."],
  "pipe.hiddenDone": ["{n} finished tasks without open dependants are not shown.", "Açık bağımlısı olmayan {n} biten görev gösterilmiyor."],
  "pipe.cond.always": ["always", "her durumda"],
  "pipe.cond.on_success": ["on success", "başarılı olursa"],
  "pipe.cond.on_failure": ["on failure", "başarısız olursa"],
  "pipe.legend": ["Legend", "Açıklama"],
  "pipe.edgeTitle": ["{from} → {to} ({condition})", "{from} → {to} ({condition})"],
  "pipe.status": ["Pipeline", "İş akışı"],
  "pipe.autoQueueOn": ["Automatic queue on", "Otomatik kuyruk açık"],
  "pipe.autoQueueOff": ["Automatic queue off", "Otomatik kuyruk kapalı"],
  "pipe.slots": ["{used} of {max} agent slots in use", "{max} ajan yuvasından {used} tanesi kullanımda"],
  "pipe.activeWave": ["Active wave: {n}", "Etkin dalga: {n}"],
  "pipe.running": ["Running", "Çalışıyor"],
  "pipe.queued": ["Queued", "Kuyrukta"],
  "pipe.blocked": ["Blocked or waiting", "Engellenen veya bekleyen"],
  "pipe.noneRunning": ["Nothing is running.", "Çalışan bir şey yok."],
  "pipe.noneQueued": ["Nothing is queued.", "Kuyrukta bir şey yok."],
  "pipe.noneBlocked": ["Nothing is blocked.", "Engellenen bir şey yok."],
  "pipe.state.waiting": ["waiting", "bekliyor"],
  "pipe.state.blocked": ["blocked", "engellendi"],
  "pipe.awaiting": ["waits for its sub-tasks", "alt görevlerini bekliyor"],
  "pipe.waves": ["Execution waves", "Yürütme dalgaları"],
  "pipe.graphLabel": ["Dependency graph of {n} tasks in {w} waves", "{w} dalgada {n} görevin bağımlılık grafiği"],
});

const NODE = { w: 190, h: 50, gapX: 104, gapY: 16, top: 30, left: 8 };
/** Events after which the graph and the queue are asked for again. */
const CHANGES = new Set(["dependencies:updated", "task:created", "task:updated", "task:deleted"]);

const short = (text, n) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

/**
 * Columns of the graph: finished tasks that unfinished ones depend on, then the waves. Pure.
 * @returns {{columns: {label: string|null, wave: number|null, ids: number[]}[], hidden: number}}
 */
export function layoutColumns(graph) {
  const open = new Set(graph.waves.flat());
  const linked = new Set();
  for (const e of graph.edges) {
    if (open.has(e.to)) linked.add(e.from);
    if (open.has(e.from)) linked.add(e.to);
  }
  const finished = graph.tasks.filter((task) => !open.has(task.id));
  const shown = finished.filter((task) => linked.has(task.id)).map((task) => task.id);
  const columns = shown.length ? [{ wave: null, ids: shown }] : [];
  graph.waves.forEach((ids, i) => columns.push({ wave: i, ids }));
  return { columns, hidden: finished.length - shown.length };
}

/** Where each task's node stands: id -> {x, y}, and the drawing's size. */
function placeNodes(columns) {
  const pos = new Map();
  let tallest = 0;
  columns.forEach((column, c) => {
    column.ids.forEach((id, r) => pos.set(id, { x: NODE.left + c * (NODE.w + NODE.gapX),
      y: NODE.top + r * (NODE.h + NODE.gapY) }));
    tallest = Math.max(tallest, column.ids.length);
  });
  const width = NODE.left * 2 + columns.length * NODE.w + Math.max(0, columns.length - 1) * NODE.gapX;
  const height = NODE.top + tallest * (NODE.h + NODE.gapY) + 8;
  return { pos, width, height };
}

/** The edges: a curve from a task to the one that waits for it, styled by its condition. */
function drawEdges(graph, pos, conditions, keyOf) {
  return graph.edges.filter((e) => pos.has(e.from) && pos.has(e.to)).map((e) => {
    const a = pos.get(e.from);
    const b = pos.get(e.to);
    const x1 = a.x + NODE.w;
    const y1 = a.y + NODE.h / 2;
    const x2 = b.x;
    const y2 = b.y + NODE.h / 2;
    const bend = Math.max(40, Math.abs(x2 - x1) / 2);
    const condition = conditions.includes(e.conditionType) ? e.conditionType : conditions[0];
    const label = t(`pipe.cond.${condition}`);
    return svg("g", { class: `pl-edge cond-${condition}` },
      svg("title", {}, t("pipe.edgeTitle", { from: keyOf(e.from), to: keyOf(e.to), condition: label })),
      svg("path", { d: `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`,
        "marker-end": `url(#pl-arrow-${condition})` }),
      svg("text", { x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 4, "text-anchor": "middle" }, label));
  });
}

/** A task's node: key, status, title; its state and the server's reason when blocked. */
function drawNode(task, p, block) {
  const cls = ["pl-node", `status-${task.status}`, task.is_running ? "running" : "",
    block ? `state-${block.state}` : ""].join(" ");
  return svg("a", { href: `#/tasks/${task.id}`, class: cls, "data-task-id": task.id },
    svg("title", {}, `${task.task_key} · ${task.title} · ${t(`status.${task.status}`)}`
      + (block?.reason ? ` · ${block.reason}` : "")),
    svg("rect", { x: p.x, y: p.y, width: NODE.w, height: NODE.h, rx: 6 }),
    svg("text", { x: p.x + 10, y: p.y + 19, class: "pl-key" }, task.task_key,
      svg("tspan", { class: "pl-status", dx: 6 }, t(`status.${task.status}`))),
    svg("text", { x: p.x + 10, y: p.y + 38, class: "pl-title" }, short(task.title, 27)));
}

/** The dependency graph as SVG: {drawing, hidden (finished tasks left out), empty}. */
function drawGraph(graph, status, byId) {
  const { columns, hidden } = layoutColumns(graph);
  const { pos, width, height } = placeNodes(columns);
  const conditions = enumOf("Dependency", "conditionType");
  const blocked = new Map((status?.blocked || []).map((b) => [b.taskId, b]));
  const keyOf = (id) => byId.get(id)?.task_key || `#${id}`;
  const markers = svg("defs", {}, conditions.map((c) => svg("marker", { id: `pl-arrow-${c}`,
    class: `pl-marker cond-${c}`, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 8, markerHeight: 8,
    orient: "auto-start-reverse" }, svg("path", { d: "M0,0 L10,5 L0,10 z" }))));
  const heads = columns.map((column, c) => svg("text", { class: "pl-col-head",
    x: NODE.left + c * (NODE.w + NODE.gapX) + NODE.w / 2, y: 16, "text-anchor": "middle" },
  column.wave === null ? t("pipe.finished") : t("pipe.wave", { n: column.wave + 1 })));
  const nodes = [...pos].map(([id, p]) => (byId.has(id) ? drawNode(byId.get(id), p, blocked.get(id)) : null));
  const drawing = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "pl-graph",
    role: "group", "aria-label": t("pipe.graphLabel", { n: pos.size, w: graph.waves.length }),
    "data-testid": "pipeline-graph" }, markers, heads, drawEdges(graph, pos, conditions, keyOf), nodes);
  return { drawing, hidden, empty: pos.size === 0 };
}

function taskLink(byId, id, key) {
  const task = byId.get(id);
  return h("a", { href: `#/tasks/${id}` }, h("span", { class: "ins-key" }, key || task?.task_key || `#${id}`),
    task ? ` ${task.title}` : "");
}

/** The colours of the statuses and the lines of the conditions (the server's lists). */
function legend() {
  return h("div", { class: "pl-legend", "aria-label": t("pipe.legend") },
    enumOf("Task", "status").map((s) =>
      h("span", { class: `legend-item status-${s}` }, h("span", { class: "swatch", "aria-hidden": "true" }), t(`status.${s}`))),
    enumOf("Dependency", "conditionType").map((c) => h("span", { class: `legend-item cond-${c}` },
      h("span", { class: "line", "aria-hidden": "true" }), t(`pipe.cond.${c}`))));
}

/** What runs, what is queued and what is blocked (with the server's reasons). */
function statusSection(status, byId) {
  const list = (items, none, line) => (items.length
    ? h("ul", { class: "pl-list" }, items.map(line)) : h("p", { class: "muted" }, none));
  return h("section", { class: "card-panel", "data-testid": "pipeline-status" }, h("h2", {}, t("pipe.status")),
    h("p", { class: "pl-summary" },
      h("span", { class: status.autoQueue ? "ins-pill ins-on" : "ins-pill" },
        status.autoQueue ? t("pipe.autoQueueOn") : t("pipe.autoQueueOff")),
      h("span", {}, t("pipe.slots", { used: status.slotsUsed, max: status.maxConcurrent })),
      status.activeWave !== null && status.activeWave !== undefined
        ? h("span", {}, t("pipe.activeWave", { n: status.activeWave + 1 })) : null),
    h("div", { class: "pl-lists" },
      h("section", {}, h("h3", {}, t("pipe.running")), list(status.running, t("pipe.noneRunning"), (r) =>
        h("li", {}, taskLink(byId, r.taskId, r.taskKey),
          r.awaitingSubtasks ? h("span", { class: "muted" }, ` · ${t("pipe.awaiting")}`) : null))),
      h("section", {}, h("h3", {}, t("pipe.queued")), list(status.queued, t("pipe.noneQueued"), (q) =>
        h("li", {}, taskLink(byId, q.taskId, q.taskKey), h("div", { class: "ins-reason muted" }, q.reason)))),
      h("section", {}, h("h3", {}, t("pipe.blocked")), list(status.blocked, t("pipe.noneBlocked"), (b) =>
        h("li", { class: `state-${b.state}` }, taskLink(byId, b.taskId, b.taskKey),
          h("span", { class: `ins-pill state-${b.state}` }, t(`pipe.state.${b.state}`)),
          h("div", { class: "ins-reason muted" }, b.reason || ""))))));
}

/** The page: the graph, the pipeline's state, the waves. */
function renderPipeline({ graph, status }) {
  const byId = new Map(graph.tasks.map((task) => [task.id, task]));
  const { drawing, hidden, empty } = drawGraph(graph, status, byId);
  return [
    h("section", { class: "card-panel" }, h("h2", {}, t("pipe.graph")), legend(),
      empty ? h("p", { class: "muted" }, t("pipe.empty")) : h("div", { class: "graph-scroll", tabindex: "0",
        "data-keep-scroll": "graph", "aria-label": t("pipe.graph") }, drawing),
      hidden ? h("p", { class: "muted ins-small" }, t("pipe.hiddenDone", { n: hidden })) : null),
    statusSection(status, byId),
    graph.waves.length ? h("section", { class: "card-panel" }, h("h2", {}, t("pipe.waves")),
      h("ol", { class: "pl-waves" }, graph.waves.map((ids, i) => h("li", {},
        h("strong", {}, t("pipe.wave", { n: i + 1 })), " ",
        ids.map((id, j) => [j ? ", " : "", h("a", { href: `#/tasks/${id}` }, byId.get(id)?.task_key || `#${id}`)]))))) : null];
}

/** Mount the pipeline view. */
export function mount(root, { projectId }) {
  return loadedView(root, {
    desktop: true, delay: 400,
    head: () => projectHeader(projectId, "/pipeline"),
    load: async () => {
      // One after the other: when the board is refused (local_only), one refusal is enough.
      const graph = await api.desktop("get_dependency_graph", { projectId });
      const status = await api.desktop("get_pipeline_status", { projectId });
      return { graph, status };
    },
    render: renderPipeline,
    on: (event, data) => {
      if (event === "project:updated" && data.id === projectId) return "load";
      return CHANGES.has(event) && projectOf(data) === projectId ? "load" : null;
    },
  }).stop;
}
