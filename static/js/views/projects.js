// The projects dashboard (#/): a card per project with its task counts, kept current by
// refetching the summaries shortly after project and task events; "New project" opens the
// project form in a dialog.

import { h, toast } from "../dom.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { go } from "../main.js";
import { enumOf } from "../schema.js";
import { api, applyEvent, notify, onEvent, state } from "../store.js";
import { avatar, rerender } from "./common.js";

/** The new project's form and its dialog, imported when first opened (the list needs neither). */
const formModules = () => Promise.all([import("./project_form.js"), import("./form_kit.js")]);

register({  // key: [English, Turkish]
  "projects.title": ["Projects", "Projeler"],
  "projects.new": ["New project", "Yeni proje"],
  "projects.newTitle": ["New project", "Yeni proje"],
  "projects.empty": ["No projects yet. A project points the agents at a code directory.", "Henüz proje yok. Bir proje, ajanları bir kod dizinine yönlendirir."],
  "projects.created": ["Project {name} created", "{name} projesi oluşturuldu"],
  "projects.loadFailed": ["The projects could not be loaded: {error}", "Projeler yüklenemedi: {error}"],
  "projects.retry": ["Try again", "Yeniden dene"],
  "projects.counts": ["Tasks by status", "Duruma göre görevler"],
});

/** A status's count in a project summary: "in_progress" → summary.inProgressCount. */
const countOf = (summary, status) => summary[`${status.replace(/_(\w)/g, (_, c) => c.toUpperCase())}Count`] ?? 0;

/** Refetch on these events (task:log and task:usage never change a count). */
const REFETCH = /^(project:|task:(created|updated|deleted)$|resync$)/;

function card(summary) {
  return h("li", {},
    h("a", { class: "project-card", href: `#/projects/${summary.id}`, "data-key": `project-${summary.id}` },
      h("div", { class: "project-card-head" }, avatar(summary),
        h("div", { class: "project-card-title" },
          h("strong", {}, summary.name), h("span", { class: "muted slug" }, summary.slug))),
      h("code", { class: "path", title: summary.workingDir }, summary.workingDir),
      h("ul", { class: "counts", "aria-label": t("projects.counts") }, enumOf("Task", "status").map((status) => {
        const n = countOf(summary, status);
        return h("li", { class: `count count-${status}${n ? "" : " zero"}` },
          h("span", { class: "n" }, String(n)), h("span", { class: "label" }, t(`status.${status}`)));
      }))));
}

/** @param {HTMLElement} root */
export function mount(root) {
  let summaries = null;
  let error = null;
  let timer = null;
  let dialog = null;
  let gone = false;
  const list = h("div", { class: "project-list", "aria-live": "polite" });
  const header = h("div", { class: "page-head" });
  root.append(h("section", { class: "projects-view" }, header, list));

  async function openNew() {
    if (dialog) return;
    const [{ projectForm }, { formDialog }] = await formModules();
    if (dialog || gone) return;  // opened twice meanwhile, or the view left
    const form = projectForm({
      mode: "create",
      onCancel: () => dialog.close(),
      onSaved: (project) => {
        dialog.close();
        toast(t("projects.created", { name: project.name }));
        // the board opens at once: the store knows the project before its /ws event comes
        applyEvent(state, { event: "project:created", data: project });
        notify("project:created");
        go(`/projects/${project.id}`);
      },
    });
    dialog = formDialog(() => t("projects.newTitle"), form);
    dialog.dialog.addEventListener("close", () => { dialog = null; });
  }

  function render() {
    header.replaceChildren(h("h1", {}, t("projects.title")),
      h("button", { type: "button", class: "primary", onclick: openNew, "data-key": "new" }, t("projects.new")));
    if (error && !summaries) {
      rerender(list, h("div", { class: "empty" },
        h("p", { class: "error" }, t("projects.loadFailed", { error: error.message })),
        h("button", { type: "button", onclick: load, "data-key": "retry" }, t("projects.retry"))));
    } else if (!summaries) {
      rerender(list, h("p", { class: "muted" }, t("common.loading")));
    } else if (!summaries.length) {
      rerender(list, h("div", { class: "empty" }, h("p", {}, t("projects.empty")),
        h("button", { type: "button", class: "primary", onclick: openNew, "data-key": "new-empty" }, t("projects.new"))));
    } else {
      rerender(list, h("ul", { class: "project-grid" },
        [...summaries].sort((a, b) => a.name.localeCompare(b.name) || a.id - b.id).map(card)));
    }
  }

  async function load() {
    timer = null;
    try {
      summaries = await api.projectSummaries();
      error = null;
    } catch (e) {
      error = e;
    }
    render();
  }

  const offEvent = onEvent(({ event }) => {
    if (REFETCH.test(event) && !timer) timer = setTimeout(load, 300);
  });
  const offLanguage = onLanguageChange(render);
  render();
  load();
  return () => {
    gone = true;
    offEvent();
    offLanguage();
    clearTimeout(timer);
    if (dialog) dialog.close();
  };
}
