// The lists of a project's templates, snippets, webhooks and schedules: items kept current
// from /ws events, delete after asking, the edit and delete buttons, and the page around such
// a list (header and tabs, title, "New" button, the create/edit dialog) that those views share.

import { confirmDialog, h, toast } from "../dom.js";
import { onLanguageChange, t } from "../i18n.js";
import { go } from "../main.js";
import { api, loadList, onEvent, state, subscribe } from "../store.js";
import { projectHeader, rerender } from "./common.js";
import { formDialog, formKit, liveForm } from "./form_kit.js";

/** Ask before deleting when the settings say so; resolves true to go ahead. */
export function confirmDelete(name, detail = "") {
  if (state.settings && !state.settings.confirmBeforeDelete) return Promise.resolve(true);
  const message = detail ? `${t("common.confirmDelete", { name })} ${detail}` : t("common.confirmDelete", { name });
  return confirmDialog(message, { ok: t("common.delete"), cancel: t("common.cancel"), danger: true });
}


/**
 * A project's templates/snippets/webhooks/schedules, loaded once (store.js's loadList: read
 * again when an event came meanwhile) and kept current from /ws events
 * (`<prefix>:created|updated|fired|deleted`, and a full reload on resync).
 * @param {number} projectId
 * @param {"templates"|"snippets"|"webhooks"|"schedules"} kind
 * @param {string} prefix  "template" | "snippet" | "webhook" | "schedule"
 * @param {(event: string, data: Object|null) => void} onChange
 */
export function liveItems(projectId, kind, prefix, onChange) {
  const items = new Map();
  const status = { loaded: false, error: null };
  const load = async () => {
    try {
      const list = await loadList(projectId, kind);
      items.clear();
      for (const item of list) items.set(item.id, item);
      status.loaded = true;
      status.error = null;
    } catch (error) {
      status.error = error;
    }
    onChange("loaded", null);
  };
  const off = onEvent(({ event, data }) => {
    if (event === "resync") { load(); return; }
    if (!data || data.projectId !== projectId) return;
    if (event === `${prefix}:created` || event === `${prefix}:updated`) items.set(data.id, data);
    else if (event === `${prefix}:fired`) items.set(data.id, withoutKeys(data, ["taskId"]));  // a schedule's fire
    else if (event === `${prefix}:deleted`) items.delete(data.id);
    else return;
    onChange(event, data);
  });
  load();
  return {
    items, status, reload: load, stop: off,
    /** Apply an answer at once (the event that follows changes nothing). */
    put(item) { items.set(item.id, item); onChange("local", item); },
    drop(id) { items.delete(id); onChange("local", null); },
    /** Items sorted by name, then id. */
    sorted() {
      return [...items.values()].sort((a, b) => String(a.name ?? a.url).localeCompare(String(b.name ?? b.url)) || a.id - b.id);
    },
    /**
     * Fill `list` with one node per item (in `order`), or say it is loading, could not
     * load (i18n key `failed`, with {error}) or is empty (key `empty`).
     */
    show(list, node, { failed, empty, order = () => this.sorted() }) {
      if (status.error && !status.loaded) {
        rerender(list, h("p", { class: "error" }, t(failed, { error: status.error.message })));
      } else if (!status.loaded) {
        rerender(list, h("p", { class: "muted" }, t("common.loading")));
      } else if (!items.size) {
        rerender(list, h("p", { class: "empty" }, t(empty)));
      } else {
        rerender(list, order().map(node));
      }
    },
    /** Delete an item once the user confirms `label`; it leaves the list at once. */
    async remove(item, label, doneText) {
      if (!(await confirmDelete(label))) return;
      try {
        await api.remove(projectId, kind, item.id);
        this.drop(item.id);
        toast(doneText);
      } catch (error) {
        toast(error.message, "error");
      }
    },
  };
}


/** An object without some of its keys. */
function withoutKeys(object, keys) {
  return Object.fromEntries(Object.entries(object).filter(([key]) => !keys.includes(key)));
}


/** The edit and delete buttons of a listed template or snippet. */
export function itemActions(item, onEdit, onDelete) {
  return h("span", { class: "item-actions" },
    h("button", { type: "button", "data-key": `edit-${item.id}`, onclick: () => onEdit(item),
      "aria-label": `${t("common.edit")}: ${item.name}` }, t("common.edit")),
    h("button", { type: "button", "data-key": `delete-${item.id}`, onclick: () => onDelete(item),
      "aria-label": `${t("common.delete")}: ${item.name}` }, t("common.delete")));
}


/**
 * Keep a project view's header (name and tabs) current: renamed, language switched; when
 * the project is deleted, go to the dashboard. Returns the remover.
 * @param {HTMLElement} container
 * @param {number} projectId
 * @param {string} active  the tab suffix, e.g. "/templates"
 */
export function liveProjectHeader(container, projectId, active) {
  const render = () => container.replaceChildren(projectHeader(projectId, active));
  render();
  const offStore = subscribe((s, event) => {
    if (event === "project:updated" || event === "resync") render();
    if (event === "project:deleted" && !s.projects.some((p) => p.id === projectId)) go("/");
  });
  const offLanguage = onLanguageChange(render);
  return () => { offStore(); offLanguage(); };
}




/**
 * A project's list page (templates, snippets, webhooks, schedules): the project header, a title bar
 * with a "New" button, the live list, and the create/edit dialog. The i18n keys are
 * `<kind>.title|intro|new|newTitle|editTitle|empty|loadFailed`.
 * @param {HTMLElement} root
 * @param {Object} options
 * @param {number} options.projectId
 * @param {"templates"|"snippets"|"webhooks"|"schedules"} options.kind
 * @param {string} options.prefix  the event prefix: "template" | "snippet" | "webhook" | "schedule"
 * @param {(item: Object|null) => Object[]} options.specs  the form's specs (see form_kit.js)
 * @param {Object} options.blank  the values of a new item
 * @param {(item: Object) => Object} [options.values]  an item's values as the form's keys name them
 *   (default: the item itself)
 * @param {(kit: Object, item: Object|null, extra: any) => any} options.build  the form's rows
 * @param {(item: Object, page: Object) => Node} options.item  one listed item
 * @param {boolean} [options.wide]  a wide dialog
 * @param {() => Object[]} [options.order]  the items in their order (default: by name)
 * @param {(event: string, data: Object|null) => void} [options.onChange]  after the list changed
 * @param {(kit: Object, item: Object|null) => any} [options.setup]  once per form: state given to build
 * @param {(item: Object|null, kit: Object, body: Object, extra: any) => void} [options.beforeSave]  may change body
 * @param {(saved: Object) => void} [options.onSaved]
 * @returns {{store: Object, openForm: (item: Object|null) => void, renderList: () => void, unmount: () => void}}
 */
export function mountItemList(root, options) {
  const { projectId, kind } = options;
  let dialog = null;
  const head = h("div");
  const bar = h("div", { class: "page-head" });
  const list = h("div", { class: "item-list", "aria-live": "polite" });
  root.append(head, h("section", { class: `${kind}-view` }, bar, list));

  const page = {
    projectId,
    store: null,
    openForm(item) {
      const kit = formKit(options.specs(item), item ? (options.values ? options.values(item) : item) : options.blank);
      const extra = options.setup ? options.setup(kit, item) : null;
      const form = liveForm({
        kit, onlyDirty: Boolean(item),
        build: () => options.build(kit, item, extra),
        submitLabel: () => t(item ? "common.save" : "common.create"),
        onCancel: () => dialog.close(),
        onSubmit: async (body) => {
          if (options.beforeSave) options.beforeSave(item, kit, body, extra);
          const saved = item ? await api.update(projectId, kind, item.id, body) : await api.create(projectId, kind, body);
          page.store.put(saved);
          if (options.onSaved) options.onSaved(saved);
          dialog.close();
          toast(t("common.saved"));
        },
      });
      dialog = formDialog(() => t(item ? `${kind}.editTitle` : `${kind}.newTitle`), form, { wide: Boolean(options.wide) });
      dialog.dialog.addEventListener("close", () => { dialog = null; });
    },
    renderList() {
      page.store.show(list, (item) => options.item(item, page),
        { failed: `${kind}.loadFailed`, empty: `${kind}.empty`, order: options.order });
    },
  };
  page.store = liveItems(projectId, kind, options.prefix, (event, data) => {
    if (options.onChange) options.onChange(event, data);
    page.renderList();
  });
  const offHeader = liveProjectHeader(head, projectId, `/${kind}`);

  function render() {
    bar.replaceChildren(h("div", {}, h("h2", {}, t(`${kind}.title`)), h("p", { class: "muted intro" }, t(`${kind}.intro`))),
      h("button", { type: "button", class: "primary", onclick: () => page.openForm(null) }, t(`${kind}.new`)));
    page.renderList();
  }
  const offLanguage = onLanguageChange(render);
  render();
  page.unmount = () => {
    page.store.stop();
    offHeader();
    offLanguage();
    if (dialog) dialog.close();
  };
  return page;
}

/** The enabled switch of a listed snippet or webhook; onToggle(box) saves it. */
export function enabledSwitch(item, name, onToggle) {
  const box = h("input", { type: "checkbox", class: "switch", checked: item.enabled,
    "data-key": `enabled-${item.id}`, "aria-label": `${t(`${name}.enabled`)}: ${item.name ?? item.url}` });
  box.addEventListener("change", () => onToggle(box));
  // the switch says what it is (on or off), whatever sets it (a click, a refusal, an event)
  return h("label", { class: "switch-label" }, box, h("span", { class: "switch-on", "aria-hidden": "true" }, t("common.on")),
    h("span", { class: "switch-off", "aria-hidden": "true" }, t("common.off")));
}

/** Save a switch's state at once: PUT {enabled}; on failure the switch goes back. */
export async function saveEnabled(page, projectId, kind, item, box, doneText) {
  try {
    const saved = await api.update(projectId, kind, item.id, { enabled: box.checked });
    page.store.put(saved);
    toast(doneText(saved));
  } catch (error) {
    box.checked = !box.checked;
    toast(error.message, "error");
  }
}
