// Prompt templates of a project (#/projects/:projectId/templates): list, create and edit
// in a dialog, delete; kept current by template:* events.

import { api } from "../api.js";
import { h, toast } from "../dom.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { formDialog, formKit, itemActions, liveForm, liveItems, liveProjectHeader } from "./project_form.js";

register({  // key: [English, Turkish]
  "templates.title": ["Prompt templates", "İstem şablonları"],
  "templates.intro": ["A template with a task type is added to the prompt of every task of that type; its model and effort become the defaults of new tasks of that type.", "Görev türü seçilmiş bir şablon, o türdeki her görevin istemine eklenir; modeli ve düşünme düzeyi o türdeki yeni görevlerin varsayılanı olur."],
  "templates.new": ["New template", "Yeni şablon"],
  "templates.newTitle": ["New template", "Yeni şablon"],
  "templates.editTitle": ["Edit template", "Şablonu düzenle"],
  "templates.empty": ["No templates yet.", "Henüz şablon yok."],
  "templates.name": ["Name", "Ad"],
  "templates.content": ["Content", "İçerik"],
  "templates.variables": ["Variables (click to insert):", "Değişkenler (eklemek için tıklayın):"],
  "templates.taskType": ["Task type", "Görev türü"],
  "templates.taskType.help": ["Applied automatically to tasks of this type.", "Bu türdeki görevlere otomatik uygulanır."],
  "templates.model": ["Model", "Model"],
  "templates.thinkingEffort": ["Thinking effort", "Düşünme düzeyi"],
  "templates.anyType": ["Any type", "Her tür"],
  "templates.deleted": ["Template {name} deleted", "{name} şablonu silindi"],
  "templates.loadFailed": ["The templates could not be loaded: {error}", "Şablonlar yüklenemedi: {error}"],
});

const TASK_TYPES = ["feature", "bugfix", "refactor", "docs", "test", "chore"];
const MODELS = ["model_large", "model_medium", "model_small"];
const EFFORTS = ["low", "medium", "high"];
const VARIABLES = ["project_name", "task_title", "task_type", "priority", "model"];

const SPECS = [
  { key: "name", kind: "text", required: true, label: () => t("templates.name"), attrs: { maxlength: 200 } },
  { key: "taskType", kind: "select", nullable: true, options: TASK_TYPES, optionLabel: (v) => t(`type.${v}`),
    label: () => t("templates.taskType"), help: () => t("templates.taskType.help") },
  { key: "model", kind: "select", nullable: true, options: MODELS, optionLabel: (v) => t(`model.${v}`),
    label: () => t("templates.model") },
  { key: "thinkingEffort", kind: "select", nullable: true, options: EFFORTS, optionLabel: (v) => t(`effort.${v}`),
    label: () => t("templates.thinkingEffort") },
  { key: "content", kind: "textarea", required: true, label: () => t("templates.content"),
    attrs: { class: "mono", rows: 12, spellcheck: "false" } },
];

/** Insert text at the caret of a textarea and tell the form. */
function insertAt(textarea, text) {
  textarea.focus();
  textarea.setRangeText(text, textarea.selectionStart, textarea.selectionEnd, "end");
  textarea.dispatchEvent(new Event("input"));
}

/**
 * @param {HTMLElement} root
 * @param {{projectId: number}} params
 */
export function mount(root, { projectId }) {
  let dialog = null;
  const head = h("div");
  const bar = h("div", { class: "page-head" });
  const list = h("div", { class: "item-list", "aria-live": "polite" });
  root.append(head, h("section", { class: "templates-view" }, bar, list));
  const store = liveItems(projectId, "templates", "template", () => renderList());
  const offHeader = liveProjectHeader(head, projectId, "/templates");

  function openForm(template) {
    const kit = formKit(SPECS, template || {});
    const build = () => [kit.row("name"), h("div", { class: "form-row" }, kit.row("taskType"), kit.row("model"),
      kit.row("thinkingEffort")), kit.row("content"),
    h("p", { class: "variables help" }, t("templates.variables"), " ", VARIABLES.map((name) =>
      h("button", { type: "button", class: "chip", "data-key": `var-${name}`,
        onclick: () => insertAt(kit.rows.get("content").controls[0], `{{${name}}}`) }, `{{${name}}}`)))];
    const form = liveForm({
      kit, build, onlyDirty: Boolean(template),
      submitLabel: () => t(template ? "common.save" : "common.create"),
      onCancel: () => dialog.close(),
      onSubmit: async (body) => {
        const saved = template ? await api.update(projectId, "templates", template.id, body)
          : await api.create(projectId, "templates", body);
        store.put(saved);
        dialog.close();
        toast(t("common.saved"));
      },
    });
    dialog = formDialog(() => t(template ? "templates.editTitle" : "templates.newTitle"), form, { wide: true });
    dialog.dialog.addEventListener("close", () => { dialog = null; });
  }

  function remove(template) {
    return store.remove(template, template.name, t("templates.deleted", { name: template.name }));
  }

  function item(template) {
    const meta = [template.taskType ? t(`type.${template.taskType}`) : t("templates.anyType"),
      template.model && t(`model.${template.model}`), template.thinkingEffort && t(`effort.${template.thinkingEffort}`)];
    return h("article", { class: "item card-panel" },
      h("header", { class: "item-head" },
        h("h3", {}, template.name),
        h("span", { class: "chips" }, meta.filter(Boolean).map((text) => h("span", { class: "chip static" }, text))),
        itemActions(template, openForm, remove)),
      h("pre", { class: "preview" }, template.content));
  }

  function renderList() {
    store.show(list, item, { failed: "templates.loadFailed", empty: "templates.empty" });
  }

  function render() {
    bar.replaceChildren(h("div", {}, h("h2", {}, t("templates.title")), h("p", { class: "muted intro" }, t("templates.intro"))),
      h("button", { type: "button", class: "primary", onclick: () => openForm(null) }, t("templates.new")));
    renderList();
  }

  const offLanguage = onLanguageChange(render);
  render();
  return () => {
    store.stop();
    offHeader();
    offLanguage();
    if (dialog) dialog.close();
  };
}
