// The agent-instructions editor (#/projects/:projectId/instructions): the project's
// agent-instructions file (CLAUDE.md in its working directory) through the local-only
// desktop commands get_agent_md and save_agent_md.

import { confirmDialog, h, on, toast } from "../dom.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { api, onEvent, refusedLocally, state } from "../store.js";
import { liveProjectHeader } from "./item_list.js";

register({  // key: [English, Turkish]
  "instructions.title": ["Agent instructions", "Ajan talimatları"],
  "instructions.intro": ["Agents read this file from the project's working directory at the start of every run.", "Ajanlar bu dosyayı her çalışmanın başında projenin çalışma dizininden okur."],
  "instructions.missing": ["The file does not exist yet; saving creates it.", "Dosya henüz yok; kaydetmek onu oluşturur."],
  "instructions.exists": ["Saved on disk.", "Diskte kayıtlı."],
  "instructions.unsaved": ["Unsaved changes.", "Kaydedilmemiş değişiklikler var."],
  "instructions.reload": ["Reload from disk", "Diskten yeniden yükle"],
  "instructions.discard": ["Discard your unsaved changes?", "Kaydedilmemiş değişiklikleriniz atılsın mı?"],
  "instructions.discardOk": ["Discard", "At"],
  "instructions.editor": ["Contents of {path}", "{path} içeriği"],
  "instructions.shortcut": ["Ctrl+S saves.", "Ctrl+S kaydeder."],
});

/**
 * @param {HTMLElement} root
 * @param {{projectId: number}} params
 */
export function mount(root, { projectId }) {
  let file = null;  // {path, content, exists}
  let text = "";
  let failure = null;  // () => string
  let saving = false;
  const head = h("div");
  const body = h("section", { class: "instructions-view" });
  root.append(head, body);
  const offHeader = liveProjectHeader(head, projectId, "/instructions");
  const dirty = () => file !== null && text !== file.content;

  async function load() {
    try {
      file = await api.desktop("get_agent_md", { projectId });
      text = file.content;
      failure = null;
    } catch (error) {
      if (refusedLocally(error)) {
        failure = () => t("common.localOnly");
      } else {
        failure = () => error.message;
      }
    }
    render();
  }

  async function save() {
    if (saving || !file) return;
    saving = true;
    render();
    try {
      file = await api.desktop("save_agent_md", { projectId, content: text });
      text = file.content;
      toast(t("common.saved"));
    } catch (error) {
      refusedLocally(error);
      toast(error.message, "error");
    } finally {
      saving = false;
      render();
    }
  }

  async function reload() {
    if (dirty() && !(await confirmDialog(t("instructions.discard"),
      { ok: t("instructions.discardOk"), cancel: t("common.cancel"), danger: true }))) return;
    file = null;
    render();
    load();
  }

  function statusLine() {
    return dirty() ? t("instructions.unsaved") : file.exists ? t("instructions.exists") : t("instructions.missing");
  }

  function render() {
    const intro = [h("h2", {}, t("instructions.title")), h("p", { class: "muted intro" }, t("instructions.intro"))];
    if (failure) {
      body.replaceChildren(...intro, h("div", { class: "empty local-only", role: "status" }, h("p", {}, failure())));
      return;
    }
    if (!file) {
      body.replaceChildren(...intro, h("p", { class: "muted" }, t("common.loading")));
      return;
    }
    const hadFocus = document.activeElement && document.activeElement.classList.contains("agent-md");
    const status = h("span", { class: `md-status${dirty() ? " dirty" : ""}`, role: "status" }, statusLine());
    const saveButton = h("button", { type: "submit", class: "primary", disabled: saving || !dirty() }, t("common.save"));
    const area = h("textarea", { class: "agent-md mono", spellcheck: "false", rows: 24,
      "aria-label": t("instructions.editor", { path: file.path }) });
    area.value = text;
    area.addEventListener("input", () => {
      text = area.value;
      status.textContent = statusLine();
      status.classList.toggle("dirty", dirty());
      saveButton.disabled = saving || !dirty();
    });
    area.addEventListener("keydown", (event) => {
      if ((event.ctrlKey || event.metaKey) && event.key.toLowerCase() === "s") {
        event.preventDefault();
        save();
      }
    });
    const form = h("form", { class: "md-form" },
      h("p", { class: "md-path" }, h("code", { class: "path" }, file.path), " ", status), area,
      h("div", { class: "actions" }, h("small", { class: "muted shortcut" }, t("instructions.shortcut")),
        h("button", { type: "button", onclick: reload }, t("instructions.reload")), saveButton));
    form.addEventListener("submit", (event) => { event.preventDefault(); save(); });
    const selection = hadFocus ? [document.activeElement.selectionStart, document.activeElement.selectionEnd] : null;
    body.replaceChildren(...intro, form);
    if (selection) {
      area.focus();
      area.setSelectionRange(...selection);
    }
  }

  // A moved working directory means another file: reload unless there is unsaved work.
  let workingDir = null;
  const offEvent = onEvent(({ event, data }) => {
    if (event !== "project:updated" || data.id !== projectId) return;
    if (workingDir !== null && data.workingDir !== workingDir && !dirty()) reload();
    workingDir = data.workingDir;
  });
  const project = state.projects.find((p) => p.id === projectId);
  workingDir = project ? project.workingDir : null;
  const offLanguage = onLanguageChange(render);
  const offUnload = on(window, "beforeunload", (event) => { if (dirty()) event.preventDefault(); });
  render();
  load();
  return () => {
    offHeader();
    offEvent();
    offLanguage();
    offUnload();
  };
}
