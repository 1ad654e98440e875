// Prompt templates of a project (#/projects/:projectId/templates): list, create and edit
// in a dialog, delete; kept current by template:* events.

import { h } from "../dom.js";
import { register, t } from "../i18n.js";
import { schemaSpecs } from "./form_kit.js";
import { itemActions, mountItemList } from "./item_list.js";

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

/** The variables a template may use ({{name}}), as the server fills them in. */
const VARIABLES = ["project_name", "task_title", "task_type", "priority", "model"];

/** The form's fields; the lists of values and lengths from the server's Template schema. */
const specs = () => schemaSpecs("Template", [
  { key: "name", kind: "text", required: true, label: () => t("templates.name") },
  { key: "taskType", kind: "select", nullable: true, optionLabel: (v) => t(`type.${v}`),
    label: () => t("templates.taskType"), help: () => t("templates.taskType.help") },
  { key: "model", kind: "select", nullable: true, optionLabel: (v) => t(`model.${v}`),
    label: () => t("templates.model") },
  { key: "thinkingEffort", kind: "select", nullable: true, optionLabel: (v) => t(`effort.${v}`),
    label: () => t("templates.thinkingEffort") },
  { key: "content", kind: "textarea", required: true, label: () => t("templates.content"),
    attrs: { class: "mono", rows: 12, spellcheck: "false" } },
]);

/** Insert text at the caret of a textarea and tell the form. */
function insertAt(textarea, text) {
  textarea.focus();
  textarea.setRangeText(text, textarea.selectionStart, textarea.selectionEnd, "end");
  textarea.dispatchEvent(new Event("input"));
}

/** The form's rows, and the variables to insert into the content. */
function build(kit) {
  return [kit.row("name"), h("div", { class: "form-row" }, kit.row("taskType"), kit.row("model"),
    kit.row("thinkingEffort")), kit.row("content"),
  h("p", { class: "variables help" }, t("templates.variables"), " ", VARIABLES.map((name) =>
    h("button", { type: "button", class: "chip", "data-key": `var-${name}`,
      onclick: () => insertAt(kit.rows.get("content").controls[0], `{{${name}}}`) }, `{{${name}}}`)))];
}

/** One listed template. */
function item(template, page) {
  const meta = [template.taskType ? t(`type.${template.taskType}`) : t("templates.anyType"),
    template.model && t(`model.${template.model}`), template.thinkingEffort && t(`effort.${template.thinkingEffort}`)];
  const remove = () => page.store.remove(template, template.name, t("templates.deleted", { name: template.name }));
  return h("article", { class: "item card-panel" },
    h("header", { class: "item-head" },
      h("h3", {}, template.name),
      h("span", { class: "chips" }, meta.filter(Boolean).map((text) => h("span", { class: "chip static" }, text))),
      itemActions(template, page.openForm, remove)),
    h("pre", { class: "preview" }, template.content));
}

/**
 * @param {HTMLElement} root
 * @param {{projectId: number}} params
 */
export function mount(root, { projectId }) {
  return mountItemList(root, {
    projectId, kind: "templates", prefix: "template", wide: true, specs, blank: {}, build, item,
  }).unmount;
}
