// A task's preview (design §21): its project's previewCommand serving the task's checkout,
// started from the task page (createPreview) and from each attempt's column (previewControls);
// its state kept live by the preview:updated events; opened in a new tab, or on the task page
// in a panel (an iframe of the preview's own origin, with a phone-width toggle); stopped. A
// failed start shows the command's last lines. Its link works once: each use reads a new one.

import { h, toast } from "../dom.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { api, onEvent, state } from "../store.js";
import { put } from "./task_tabs.js";

register({  // key: [English, Turkish]
  "preview.title": ["Preview", "Önizleme"],
  "preview.start": ["Preview", "Önizle"],
  "preview.startLabel": ["Start the preview of the running app", "Çalışan uygulamanın önizlemesini başlat"],
  "preview.status.starting": ["starting…", "başlıyor…"],
  "preview.status.ready": ["ready", "hazır"],
  "preview.status.failed": ["failed", "başarısız"],
  "preview.status.stopped": ["stopped", "durdu"],
  "preview.open": ["Open in a new tab", "Yeni sekmede aç"],
  "preview.show": ["Show here", "Burada göster"],
  "preview.hide": ["Hide", "Gizle"],
  "preview.phone": ["Phone width", "Telefon genişliği"],
  "preview.stop": ["Stop", "Durdur"],
  "preview.stopLabel": ["Stop the preview", "Önizlemeyi durdur"],
  "preview.output": ["Its command's last lines", "Komutunun son satırları"],
  "preview.frame": ["Preview of the running app", "Çalışan uygulamanın önizlemesi"],
  "preview.help": ["The app this task's checkout serves, on a port of its own: it reaches nothing of the board.", "Bu görevin çalışma kopyasının sunduğu uygulama, kendi portunda: panonun hiçbir şeyine erişemez."],
});

const LIVE = new Set(["starting", "ready"]);
/** Project id -> the promise of whether its tasks have a preview (a previewCommand). */
const previewable = new Map();

/** Whether the project has a previewCommand (read once, then kept by project:updated). */
function hasPreview(projectId) {
  const known = state.projects.find((p) => p.id === projectId);
  if (known && "previewCommand" in known) return Promise.resolve(Boolean(known.previewCommand?.trim()));
  if (!previewable.has(projectId)) {
    previewable.set(projectId, api.project(projectId).then((p) => Boolean(p.previewCommand?.trim()))
      .catch(() => { previewable.delete(projectId); return false; }));
  }
  return previewable.get(projectId);
}

/**
 * A preview's link as this page reaches the board: the board names its own address, which
 * may not be the one this browser uses (a board bound to every address, opened from a phone);
 * the preview's port is on the same host.
 */
function here(preview) {
  if (!preview?.url) return preview;
  try {
    const url = new URL(preview.url);
    url.hostname = location.hostname;
    return { ...preview, url: url.href };
  } catch {
    return preview;
  }
}

/** The path of a preview's routes: the task's own (n null) or attempt n's. */
const calls = (taskId, n) => ({
  get: () => (n == null ? api.preview(taskId) : api.attemptPreview(taskId, n)),
  start: () => (n == null ? api.startPreview(taskId) : api.startAttemptPreview(taskId, n)),
  stop: () => (n == null ? api.stopPreview(taskId) : api.stopAttemptPreview(taskId, n)),
});

/**
 * The controls of a preview: its state, start, open in a new tab, stop, its output when it
 * failed; `extra` (the task page's panel toggles) when ready. `act` runs a call.
 */
export function previewControls(shown, { act, n = null, extra = [] }) {
  const preview = here(shown);
  const suffix = n == null ? "" : `-${n}`;
  const status = preview?.status ?? "stopped";
  const live = LIVE.has(status);
  const button = (key, onclick, attrs = {}) => h("button", { type: "button", class: "small", onclick,
    "data-key": `preview-${key}${suffix}`, ...attrs }, t(`preview.${key}`));
  return [
    h("div", { class: "preview-bar" },
      h("strong", {}, t("preview.title")),
      preview && status !== "stopped" ? h("span", { class: `preview-status st-${status}`, "data-testid": `preview-status${suffix}` },
        status === "starting" ? h("span", { class: "spinner", "aria-hidden": "true" }) : null,
        t(`preview.status.${status}`)) : null,
      live ? null : button("start", () => act("start"), { "aria-label": t("preview.startLabel") }),
      status === "ready" && preview.url ? h("a", { class: "button small", href: preview.url, target: "_blank",
        rel: "noopener noreferrer", "data-key": `preview-open${suffix}`, onclick: () => setTimeout(() => act("get"), 0) },
      t("preview.open")) : null,
      status === "ready" ? extra : null,
      live ? button("stop", () => act("stop"), { "aria-label": t("preview.stopLabel") }) : null),
    status === "failed" ? h("div", { class: "alert alert-error", role: "alert", "data-testid": `preview-error${suffix}` },
      h("p", {}, preview.error || t("preview.status.failed")),
      preview.output ? h("details", { open: true }, h("summary", {}, t("preview.output")),
        h("pre", { class: "preview-output" }, preview.output)) : null) : null,
  ];
}

/** The task page's preview: {el, setTask(task), destroy()}; hidden where there is none. */
export function createPreview(taskId) {
  const controls = h("div", {});
  const box = h("div", { class: "preview-frame", hidden: true, "data-testid": "preview-frame" });
  const el = h("section", { class: "task-preview", hidden: true, "data-testid": "preview" }, controls,
    h("p", { class: "muted preview-help" }, t("preview.help")), box);
  const call = calls(taskId, null);
  let task = null;
  let preview = null;
  let offered = false;  // the project has a previewCommand
  let read = false;  // its state was asked once
  let phone = false;

  async function act(what) {
    try {
      const next = await call[what]();
      if (what === "stop") hide();
      preview = next;
    } catch (error) {
      toast(error.message, "error");
    }
    render();
  }

  function show() {
    if (!preview?.url) return;
    box.replaceChildren(h("iframe", { src: here(preview).url, title: t("preview.frame"),
      sandbox: "allow-scripts allow-forms allow-same-origin allow-popups allow-modals allow-downloads",
      referrerpolicy: "no-referrer" }));
    box.hidden = false;
    act("get");  // the link is used: a new one for the next open
  }

  function hide() {
    box.replaceChildren();
    box.hidden = true;
  }

  function render() {
    const eligible = offered && task && (task.status === "in_progress" || task.status === "testing");
    el.hidden = !eligible && !LIVE.has(preview?.status);
    if (el.hidden) return;
    box.classList.toggle("phone", phone);
    if (preview?.status !== "ready") hide();
    const button = (key, onclick, attrs) => h("button", { type: "button", class: "small", onclick, "data-key": `preview-${key}`, ...attrs },
      t(`preview.${key}`));
    put(controls, previewControls(preview, { act, extra: [
      box.hidden ? button("show", show) : button("hide", () => { hide(); render(); }),
      button("phone", () => { phone = !phone; render(); }, { "aria-pressed": String(phone) })] }));
  }

  const offs = [
    onEvent(({ event, data }) => {
      if (event === "preview:updated" && data && data.taskId === taskId && data.n == null) {
        preview = data;
        render();
      } else if (event === "project:updated" && data && task && data.id === task.project_id) {
        previewable.delete(data.id);
        offered = Boolean(data.previewCommand?.trim());
        render();
      }
    }),
    onLanguageChange(render),
  ];

  return {
    el,
    setTask(next) {
      task = next;
      hasPreview(task.project_id).then((has) => {
        offered = has;
        if (has && !read) {
          read = true;
          call.get().then((p) => { preview = p; render(); }).catch(() => {});
        }
        render();
      });
    },
    destroy() {
      for (const off of offs) off();
    },
  };
}

/** Attempt n's preview state, read once and then kept by preview:updated: {get(), refresh()}. */
export function attemptPreviews(taskId, onChange) {
  const known = new Map();  // n -> its preview
  const asked = new Set();
  let offered = null;
  const off = onEvent(({ event, data }) => {
    if (event === "preview:updated" && data && data.taskId === taskId && data.n != null) {
      known.set(data.n, data);
      onChange();
    }
  });
  return {
    /** The controls of attempt n (null when its project has no preview). */
    controls(task, n) {
      if (offered === null) {
        offered = false;
        hasPreview(task.project_id).then((has) => { offered = has; onChange(); });
      }
      if (!offered) return null;
      if (!asked.has(n)) {
        asked.add(n);
        calls(taskId, n).get().then((p) => { known.set(n, p); onChange(); }).catch(() => {});
      }
      const act = async (what) => {
        try {
          known.set(n, await calls(taskId, n)[what]());
        } catch (error) {
          toast(error.message, "error");
        }
        onChange();
      };
      return h("div", { class: "task-preview attempt-preview", "data-testid": `preview-${n}` },
        previewControls(known.get(n), { act, n }));
    },
    destroy: off,
  };
}
