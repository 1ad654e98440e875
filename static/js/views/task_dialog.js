// The task create/edit dialog, used by the board and the task detail page.

import { h, openDialog, toast } from "../dom.js";
import { register, t, tags as parseTags } from "../i18n.js";
import { defaultOf, enumOf, integersOf, maxLengthOf } from "../schema.js";
import { ApiError, api, notify, state, tasksOf } from "../store.js";
import { agentSelect, agentValue, field, select } from "./common.js";

register({  // key: [English, Turkish]
  "taskdlg.new": ["New task", "Yeni görev"],
  "taskdlg.newSub": ["New sub-task", "Yeni alt görev"],
  "taskdlg.edit": ["Edit {key}", "{key} düzenle"],
  "taskdlg.title": ["Title", "Başlık"],
  "taskdlg.description": ["Description", "Açıklama"],
  "taskdlg.type": ["Type", "Tür"],
  "taskdlg.priority": ["Priority", "Öncelik"],
  "taskdlg.model": ["Model", "Model"],
  "taskdlg.effort": ["Thinking effort", "Düşünme eforu"],
  "taskdlg.agent": ["Agent", "Ajan"],
  "taskdlg.criteria": ["Acceptance criteria", "Kabul ölçütleri"],
  "taskdlg.criteriaHelp": ["How the agent (and you) can tell the task is done.", "Ajanın (ve sizin) görevin bittiğini nasıl anlayacağı."],
  "taskdlg.tags": ["Tags", "Etiketler"],
  "taskdlg.tagsHelp": ["Enter or comma adds a tag; Backspace removes the last one.", "Enter veya virgül etiket ekler; Geri tuşu sonuncuyu siler."],
  "taskdlg.removeTag": ["Remove tag {tag}", "{tag} etiketini kaldır"],
  "taskdlg.parent": ["Parent task", "Üst görev"],
  "taskdlg.parentHelp": ["A sub-task makes its parent wait until it is finished. Set only when creating.", "Alt görev bitene kadar üst görev bekler. Yalnızca oluştururken seçilir."],
  "taskdlg.noParent": ["None (a top-level task)", "Yok (üst düzey görev)"],
  "taskdlg.template": ["Template", "Şablon"],
  "taskdlg.noTemplate": ["No template", "Şablon yok"],
  "taskdlg.templateHelp": ["Applies the template's type, model, effort and text.", "Şablonun türünü, modelini, eforunu ve metnini uygular."],
  "taskdlg.titleRequired": ["A title is required.", "Başlık gerekli."],
  "taskdlg.created": ["{key} created", "{key} oluşturuldu"],
  "taskdlg.saving": ["Saving…", "Kaydediliyor…"],
});

let counter = 0;

/** A tags input: chips plus a text box; values() commits what is typed and returns the tags. */
function tagsInput(initial, suggestions) {
  const values = [...initial];
  const listId = `tag-options-${++counter}`;
  const input = h("input", { type: "text", id: `tags-${counter}`, list: listId, autocomplete: "off",
    class: "tags-text", "aria-describedby": `tags-help-${counter}` });
  const chips = h("span", { class: "bchips" });
  const box = h("div", { class: "tags-input" }, chips, input,
    h("datalist", { id: listId }, suggestions.map((tag) => h("option", { value: tag }))));
  const render = () => chips.replaceChildren(...values.map((tag, i) => h("span", { class: "bchip" }, tag,
    h("button", { type: "button", class: "bchip-x", "aria-label": t("taskdlg.removeTag", { tag }),
      onclick: () => { values.splice(i, 1); render(); input.focus(); } }, "×"))));
  const commit = () => {
    for (const part of input.value.split(",").map((s) => s.trim()).filter(Boolean)) {
      if (!values.includes(part)) values.push(part);
    }
    input.value = "";
    render();
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === ",") {
      if (event.key === "Enter" && !input.value.trim()) return;  // Enter on empty submits
      event.preventDefault();
      commit();
    } else if (event.key === "Backspace" && !input.value && values.length) {
      values.pop();
      render();
    }
  });
  input.addEventListener("change", commit);
  box.addEventListener("click", (event) => { if (event.target === box || event.target === chips) input.focus(); });
  render();
  return { box, input, helpId: `tags-help-${counter}`, values: () => { commit(); return [...values]; } };
}

/** Every tag used in the project (for suggestions). */
function projectTags(projectId) {
  const all = new Set();
  for (const task of tasksOf(projectId)) for (const tag of parseTags(task.tags)) all.add(tag);
  return [...all].sort();
}

/** The values a new task starts with: the settings' model and effort, the server's defaults. */
function newTask(parentTaskId) {
  const settings = state.settings || {};
  return {
    title: "", description: "", task_type: defaultOf("Task", "task_type"), priority: defaultOf("Task", "priority"),
    model: settings.defaultModel || defaultOf("Settings", "defaultModel"),
    thinking_effort: settings.defaultEffort || defaultOf("Settings", "defaultEffort"),
    acceptance_criteria: "", tags: null, parent_task_id: parentTaskId,
  };
}

/** The dialog's controls; the lists of values and the title's length from the server's Task schema. */
function taskControls(projectId, start) {
  return {
    title: h("input", { type: "text", value: start.title, maxlength: maxLengthOf("Task", "title"), autocomplete: "off",
      required: true }),
    description: h("textarea", { rows: "6" }, start.description || ""),
    task_type: select(enumOf("Task", "task_type"), start.task_type, (v) => t(`type.${v}`)),
    priority: select(integersOf("Task", "priority"), start.priority, (v) => t(`priority.${v}`)),
    model: select(enumOf("Task", "model"), start.model, (v) => t(`model.${v}`)),
    thinking_effort: select(enumOf("Task", "thinking_effort"), start.thinking_effort, (v) => t(`effort.${v}`)),
    acceptance_criteria: h("textarea", { rows: "3" }, start.acceptance_criteria || ""),
    agent: agentSelect(projectId, start.agent),
  };
}

/** The parent task: chosen on create, shown (disabled) on edit. */
function parentSelect(projectId, task, start) {
  const parents = tasksOf(projectId).filter((other) => !task || other.id !== task.id);
  const byId = new Map(parents.map((p) => [p.id, p]));
  const values = ["", ...parents.map((p) => p.id)];
  if (start.parent_task_id && !byId.has(start.parent_task_id)) values.push(start.parent_task_id);
  return select(values, start.parent_task_id ?? "", (v) => {
    if (v === "") return t("taskdlg.noParent");
    const p = byId.get(v);
    return p ? `${p.task_key} ${p.title}` : `#${v}`;
  }, { disabled: Boolean(task) });
}

/**
 * The template picker (create and edit): a template applies its type, model, effort and
 * text. On create, choosing a type applies that type's template's model and effort unless
 * the user chose them. Returns the row (hidden while the project has no template).
 */
function templatePicker(projectId, controls, editing) {
  const touched = new Set();
  let templates = [];
  let appliedContent = null;
  controls.model.addEventListener("change", () => touched.add("model"));
  controls.thinking_effort.addEventListener("change", () => touched.add("thinking_effort"));
  const picker = h("select", {}, h("option", { value: "" }, t("taskdlg.noTemplate")));
  const row = field(t("taskdlg.template"), picker, t("taskdlg.templateHelp"));
  row.hidden = true;
  const apply = (template) => {
    if (template.taskType) controls.task_type.value = template.taskType;
    if (template.model) controls.model.value = template.model;
    if (template.thinkingEffort) controls.thinking_effort.value = template.thinkingEffort;
    const current = controls.description.value;
    if (!current.trim() || current === appliedContent) controls.description.value = template.content;
    else controls.description.value = `${current.replace(/\s+$/, "")}\n\n${template.content}`;
    appliedContent = controls.description.value;
  };
  picker.addEventListener("change", () => {
    const template = templates.find((x) => String(x.id) === picker.value);
    if (template) apply(template);
  });
  controls.task_type.addEventListener("change", () => {
    if (editing) return;
    const template = templates.find((x) => x.taskType === controls.task_type.value);
    if (template?.model && !touched.has("model")) controls.model.value = template.model;
    if (template?.thinkingEffort && !touched.has("thinking_effort")) {
      controls.thinking_effort.value = template.thinkingEffort;
    }
  });
  api.list(projectId, "templates").then((list) => {
    templates = [...list].sort((a, b) => a.id - b.id);
    picker.append(...templates.map((x) => h("option", { value: String(x.id) }, x.name)));
    row.hidden = templates.length === 0;
  }).catch(() => {});
  return row;
}

/**
 * The error places of a form: one per field (slot(name, control) adds it to a row) and
 * one for the form. show(name, message) puts the message at the field the API named.
 */
function formErrors() {
  const slots = {};
  const general = h("p", { class: "error form-error", role: "alert", hidden: true });
  return {
    general,
    slot(name, control) {
      const error = h("small", { class: "field-error", id: `${control.id}-error`, role: "alert", hidden: true });
      slots[name] = { control, error };
      return error;
    },
    clear() {
      general.hidden = true;
      for (const { control, error } of Object.values(slots)) {
        error.hidden = true;
        control.removeAttribute("aria-invalid");
      }
    },
    show(name, message) {
      const slot = name && slots[name];
      const el = slot ? slot.error : general;
      el.textContent = message;
      el.hidden = false;
      if (slot) {
        slot.control.setAttribute("aria-invalid", "true");
        slot.control.focus();
      }
    },
  };
}

/** The body to send: the form's values (a parent only on create). */
function taskBody(controls, tags, editing) {
  const body = {
    title: controls.title.value.trim(),
    description: controls.description.value,
    task_type: controls.task_type.value,
    priority: Number(controls.priority.value),
    model: controls.model.value,
    thinking_effort: controls.thinking_effort.value,
    agent: agentValue(controls.agent),
    acceptance_criteria: controls.acceptance_criteria.value,
    tags: tags.length ? JSON.stringify(tags) : null,
  };
  if (!editing && controls.parent_task_id.value) body.parent_task_id = Number(controls.parent_task_id.value);
  return body;
}

/**
 * Open the task dialog: create (no task) or edit (task). Resolves with the saved task,
 * or null when the dialog is closed without saving.
 * @param {{projectId: number, task?: Object|null, parentTaskId?: number|null}} options
 * @returns {Promise<Object|null>}
 */
export function openTaskDialog({ projectId, task = null, parentTaskId = null }) {
  const editing = Boolean(task);
  const start = task || newTask(parentTaskId);
  const controls = taskControls(projectId, start);
  controls.parent_task_id = parentSelect(projectId, task, start);
  const tagBox = tagsInput(parseTags(start.tags), projectTags(projectId));
  const errors = formErrors();
  const row = (name, label, control, help) => {
    const el = field(label, control, help);
    el.append(errors.slot(name, control));
    return el;
  };
  const saveLabel = editing ? t("common.save") : t("common.create");
  const saveButton = h("button", { type: "submit", class: "primary" }, saveLabel);
  const cancelButton = h("button", { type: "button" }, t("common.cancel"));
  const tagsRow = h("div", { class: "field" },
    h("label", { for: tagBox.input.id }, t("taskdlg.tags")), tagBox.box,
    h("small", { class: "help", id: tagBox.helpId }, t("taskdlg.tagsHelp")));
  tagsRow.append(errors.slot("tags", tagBox.input));

  const form = h("form", { class: "task-form", novalidate: true },
    templatePicker(projectId, controls, editing),
    row("title", [t("taskdlg.title"), h("span", { class: "req", "aria-hidden": "true" }, " *")], controls.title),
    row("description", t("taskdlg.description"), controls.description),
    h("div", { class: "form-grid" },
      row("task_type", t("taskdlg.type"), controls.task_type),
      row("priority", t("taskdlg.priority"), controls.priority),
      row("model", t("taskdlg.model"), controls.model),
      row("thinking_effort", t("taskdlg.effort"), controls.thinking_effort),
      row("agent", t("taskdlg.agent"), controls.agent)),
    row("acceptance_criteria", t("taskdlg.criteria"), controls.acceptance_criteria, t("taskdlg.criteriaHelp")),
    tagsRow,
    row("parent_task_id", t("taskdlg.parent"), controls.parent_task_id, t("taskdlg.parentHelp")),
    errors.general,
    h("div", { class: "actions" }, cancelButton, saveButton));

  const heading = editing ? t("taskdlg.edit", { key: task.task_key })
    : parentTaskId ? t("taskdlg.newSub") : t("taskdlg.new");
  const { dialog, close } = openDialog(heading, form, { wide: true });
  dialog.classList.add("task-dialog");
  cancelButton.addEventListener("click", close);
  controls.title.focus();

  let saved = null;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    errors.clear();
    if (!controls.title.value.trim()) {
      errors.show("title", t("taskdlg.titleRequired"));
      return;
    }
    const body = taskBody(controls, tagBox.values(), editing);
    saveButton.disabled = true;
    saveButton.textContent = t("taskdlg.saving");
    try {
      saved = editing ? await api.updateTask(task.id, body) : await api.createTask(projectId, body);
      if (state.loadedProjects.has(saved.project_id)) {
        state.tasks.set(saved.id, saved);
        notify("local");
      }
      if (!editing) toast(t("taskdlg.created", { key: saved.task_key }));
      close();
    } catch (error) {
      errors.show(error instanceof ApiError ? error.field : null, error.message);
    } finally {
      saveButton.disabled = false;
      saveButton.textContent = saveLabel;
    }
  });

  return new Promise((resolve) => dialog.addEventListener("close", () => resolve(saved)));
}
