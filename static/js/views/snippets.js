// Context snippets of a project (#/projects/:projectId/snippets): enabled snippets are put
// into every agent prompt. List with an enabled switch that saves at once, create and edit
// in a dialog, delete; kept current by snippet:* events.

import { h } from "../dom.js";
import { register, t } from "../i18n.js";
import { schemaSpecs } from "./form_kit.js";
import { enabledSwitch, itemActions, mountItemList, saveEnabled } from "./item_list.js";

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

/** The form's fields; lengths from the server's Snippet schema. */
const specs = () => schemaSpecs("Snippet", [
  { key: "name", kind: "text", required: true, label: () => t("snippets.name") },
  { key: "content", kind: "textarea", required: true, label: () => t("snippets.content"),
    attrs: { class: "mono", rows: 10, spellcheck: "false" } },
  { key: "enabled", kind: "bool", label: () => t("snippets.enabled") },
]);

/** One listed snippet: its switch saves at once. */
function item(snippet, page) {
  const toggle = (box) => saveEnabled(page, page.projectId, "snippets", snippet, box,
    (saved) => t(saved.enabled ? "snippets.on" : "snippets.off", { name: saved.name }));
  const remove = () => page.store.remove(snippet, snippet.name, t("snippets.deleted", { name: snippet.name }));
  return h("article", { class: `item card-panel${snippet.enabled ? "" : " disabled"}` },
    h("header", { class: "item-head" },
      h("h3", {}, snippet.name),
      enabledSwitch(snippet, "snippets", toggle),
      itemActions(snippet, page.openForm, remove)),
    h("pre", { class: "preview" }, snippet.content));
}

/**
 * @param {HTMLElement} root
 * @param {{projectId: number}} params
 */
export function mount(root, { projectId }) {
  return mountItemList(root, {
    projectId, kind: "snippets", prefix: "snippet", wide: true, specs, blank: { enabled: true },
    build: (kit) => kit.specs.map((spec) => kit.row(spec.key)), item,
  }).unmount;
}
