// Context snippets of a project (#/projects/:projectId/snippets): enabled snippets are put
// into every agent prompt. List with an enabled switch that saves at once, create and edit
// in a dialog, delete; kept current by snippet:* events.

import { api } from "../api.js";
import { h, toast } from "../dom.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { formDialog, formKit, itemActions, liveForm, liveItems, liveProjectHeader } from "./project_form.js";

register({  // key: [English, Turkish]
  "snippets.title": ["Context snippets", "Bağlam parçacıkları"],
  "snippets.intro": ["Enabled snippets are added to the prompt of every task of this project; a disabled one is kept but left out.", "Etkin parçacıklar bu projedeki her görevin istemine eklenir; devre dışı olan saklanır ama eklenmez."],
  "snippets.new": ["New snippet", "Yeni parçacık"],
  "snippets.newTitle": ["New snippet", "Yeni parçacık"],
  "snippets.editTitle": ["Edit snippet", "Parçacığı düzenle"],
  "snippets.empty": ["No snippets yet.", "Henüz parçacık yok."],
  "snippets.name": ["Name", "Ad"],
  "snippets.content": ["Content", "İçerik"],
  "snippets.enabled": ["Enabled", "Etkin"],
  "snippets.on": ["{name} is now used in prompts", "{name} artık istemlerde kullanılıyor"],
  "snippets.off": ["{name} is now left out of prompts", "{name} artık istemlere eklenmiyor"],
  "snippets.deleted": ["Snippet {name} deleted", "{name} parçacığı silindi"],
  "snippets.loadFailed": ["The snippets could not be loaded: {error}", "Parçacıklar yüklenemedi: {error}"],
});

const SPECS = [
  { key: "name", kind: "text", required: true, label: () => t("snippets.name"), attrs: { maxlength: 200 } },
  { key: "content", kind: "textarea", required: true, label: () => t("snippets.content"),
    attrs: { class: "mono", rows: 10, spellcheck: "false" } },
  { key: "enabled", kind: "bool", label: () => t("snippets.enabled") },
];

/**
 * @param {HTMLElement} root
 * @param {{projectId: number}} params
 */
export function mount(root, { projectId }) {
  let dialog = null;
  const head = h("div");
  const bar = h("div", { class: "page-head" });
  const list = h("div", { class: "item-list", "aria-live": "polite" });
  root.append(head, h("section", { class: "snippets-view" }, bar, list));
  const store = liveItems(projectId, "snippets", "snippet", () => renderList());
  const offHeader = liveProjectHeader(head, projectId, "/snippets");

  function openForm(snippet) {
    const kit = formKit(SPECS, snippet || { enabled: true });
    const form = liveForm({
      kit, onlyDirty: Boolean(snippet),
      build: () => SPECS.map((spec) => kit.row(spec.key)),
      submitLabel: () => t(snippet ? "common.save" : "common.create"),
      onCancel: () => dialog.close(),
      onSubmit: async (body) => {
        const saved = snippet ? await api.update(projectId, "snippets", snippet.id, body)
          : await api.create(projectId, "snippets", body);
        store.put(saved);
        dialog.close();
        toast(t("common.saved"));
      },
    });
    dialog = formDialog(() => t(snippet ? "snippets.editTitle" : "snippets.newTitle"), form, { wide: true });
    dialog.dialog.addEventListener("close", () => { dialog = null; });
  }

  async function toggle(snippet, box) {
    try {
      const saved = await api.update(projectId, "snippets", snippet.id, { enabled: box.checked });
      store.put(saved);
      toast(t(saved.enabled ? "snippets.on" : "snippets.off", { name: saved.name }));
    } catch (error) {
      box.checked = !box.checked;
      toast(error.message, "error");
    }
  }

  function remove(snippet) {
    return store.remove(snippet, snippet.name, t("snippets.deleted", { name: snippet.name }));
  }

  function item(snippet) {
    const box = h("input", { type: "checkbox", class: "switch", checked: snippet.enabled,
      "data-key": `enabled-${snippet.id}`, "aria-label": `${t("snippets.enabled")}: ${snippet.name}` });
    box.addEventListener("change", () => toggle(snippet, box));
    return h("article", { class: `item card-panel${snippet.enabled ? "" : " disabled"}` },
      h("header", { class: "item-head" },
        h("h3", {}, snippet.name),
        h("label", { class: "switch-label" }, box, h("span", {}, t("snippets.enabled"))),
        itemActions(snippet, openForm, remove)),
      h("pre", { class: "preview" }, snippet.content));
  }

  function renderList() {
    store.show(list, item, { failed: "snippets.loadFailed", empty: "snippets.empty" });
  }

  function render() {
    bar.replaceChildren(h("div", {}, h("h2", {}, t("snippets.title")), h("p", { class: "muted intro" }, t("snippets.intro"))),
      h("button", { type: "button", class: "primary", onclick: () => openForm(null) }, t("snippets.new")));
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
