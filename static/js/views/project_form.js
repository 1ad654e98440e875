// Forms for the secondary views: a small form kit (fields bound to a model, checked before
// sending, server errors shown next to the field the ApiError names, re-rendered on a
// language switch without losing what was typed), the project create/edit form, and the
// helpers the templates, snippets and webhooks views share (live lists, delete confirmation).

import { api, ApiError } from "../api.js";
import { confirmDialog, h, openDialog, toast } from "../dom.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { go } from "../router.js";
import { onEvent, state, subscribe } from "../store.js";
import { projectHeader, select } from "./common.js";

register({  // key: [English, Turkish]
  "form.required": ["Required.", "Zorunlu."],
  "form.integer": ["Enter a whole number from {min} to {max}.", "{min} ile {max} arasında bir tam sayı girin."],
  "form.atLeast": ["Enter a number of at least {min}.", "En az {min} olan bir sayı girin."],
  "form.unset": ["— not set —", "— ayarlanmamış —"],
  "form.pickOne": ["Pick at least one.", "En az birini seçin."],
  "form.noChanges": ["Nothing changed.", "Değişiklik yok."],
  "form.fixErrors": ["Some fields need attention.", "Bazı alanların düzeltilmesi gerekiyor."],
  "pform.group.basic": ["Basic", "Temel"],
  "pform.group.queue": ["Queue", "Kuyruk"],
  "pform.group.git": ["Git", "Git"],
  "pform.group.autoTest": ["Automatic testing", "Otomatik test"],
  "pform.group.retry": ["Retries and limits", "Yeniden denemeler ve sınırlar"],
  "pform.group.host": ["Source host", "Kaynak barındırma"],
  "pform.name": ["Name", "Ad"],
  "pform.slug": ["Slug", "Kısa ad"],
  "pform.slug.help": ["Lowercase letters, digits and dashes; unique. Task keys are made from it once.", "Küçük harf, rakam ve tire; benzersiz. Görev anahtarları bir kez bundan üretilir."],
  "pform.slug.bad": ["Use lowercase letters, digits and dashes, starting with a letter or digit (at most 63).", "Harf veya rakamla başlayan küçük harf, rakam ve tire kullanın (en çok 63)."],
  "pform.workingDir": ["Working directory", "Çalışma dizini"],
  "pform.workingDir.help": ["Absolute path of an existing directory: the code the agents work on.", "Var olan bir dizinin mutlak yolu: ajanların üzerinde çalıştığı kod."],
  "pform.icon": ["Icon", "Simge"],
  "pform.icon.help": ["An emoji or one or two letters; empty shows the first letter of the name.", "Bir emoji ya da bir iki harf; boşsa adın ilk harfi gösterilir."],
  "pform.iconSeed": ["Icon seed", "Simge tohumu"],
  "pform.iconSeed.help": ["Any text; picks the colour of the icon.", "Herhangi bir metin; simgenin rengini seçer."],
  "pform.permissionMode": ["Permission mode", "İzin kipi"],
  "pform.permissionMode.help": ["Allow-tools passes the list below; default may leave a headless run refused tools.", "Araçlara izin ver kipi aşağıdaki listeyi iletir; varsayılan kipte arka planda çalışan bir ajan araç kullanamayabilir."],
  "pform.perm.auto-accept": ["Auto-accept (skip permission prompts)", "Otomatik kabul (izin sorma)"],
  "pform.perm.allow-tools": ["Allow listed tools", "Listelenen araçlara izin ver"],
  "pform.perm.default": ["Default (the agent's own rules)", "Varsayılan (ajanın kendi kuralları)"],
  "pform.allowedTools": ["Allowed tools", "İzin verilen araçlar"],
  "pform.allowedTools.help": ["Comma-separated tool names, e.g. Read,Edit,Bash(git:*)", "Virgülle ayrılmış araç adları, ör. Read,Edit,Bash(git:*)"],
  "pform.autoQueue": ["Start queued tasks automatically", "Kuyruktaki görevleri otomatik başlat"],
  "pform.autoQueue.help": ["Ready backlog tasks start, in order, whenever a slot is free.", "Hazır bekleyen görevler, boş yer açıldıkça sırayla başlar."],
  "pform.maxConcurrent": ["Agents at once", "Aynı anda çalışan ajan"],
  "pform.maxConcurrent.help": ["1 to 5.", "1 ile 5 arası."],
  "pform.shareWarning": ["Agents share one checkout: with more than one agent at once and no branch per task, they edit the same files. Turn on “Branch and worktree per task”.", "Ajanlar tek bir çalışma kopyasını paylaşıyor: birden fazla ajan aynı anda çalışırken görev başına dal yoksa aynı dosyaları düzenlerler. “Görev başına dal ve çalışma ağacı” seçeneğini açın."],
  "pform.autoBranch": ["Branch and worktree per task", "Görev başına dal ve çalışma ağacı"],
  "pform.autoBranch.help": ["Each task works in its own git worktree on its own branch; your checkout is never touched.", "Her görev kendi dalında, kendi git çalışma ağacında çalışır; sizin kopyanıza dokunulmaz."],
  "pform.autoPr": ["Open a pull request when a task is done", "Görev bitince çekme isteği aç"],
  "pform.prBaseBranch": ["Base branch", "Temel dal"],
  "pform.prBaseBranch.bad": ["Not a valid git branch name.", "Geçerli bir git dal adı değil."],
  "pform.autoTest": ["Verify finished work automatically", "Biten işi otomatik doğrula"],
  "pform.autoTest.help": ["A read-only verifier run approves (→ Done) or sends feedback back to the agent.", "Salt okunur bir doğrulayıcı işi onaylar (→ Tamamlandı) ya da geri bildirimi ajana geri gönderir."],
  "pform.testPrompt": ["Verifier instructions", "Doğrulayıcı talimatları"],
  "pform.maxRetries": ["Retries", "Yeniden deneme"],
  "pform.maxRetries.help": ["0 to 10; a crashed or timed-out run is retried this many times.", "0 ile 10 arası; çöken ya da zaman aşımına uğrayan çalışma bu kadar kez yeniden denenir."],
  "pform.taskTimeoutMinutes": ["Timeout (minutes)", "Zaman aşımı (dakika)"],
  "pform.taskTimeoutMinutes.help": ["0 to 1440; 0 or empty = no timeout.", "0 ile 1440 arası; 0 ya da boş = zaman aşımı yok."],
  "pform.taskBudgetUsd": ["Budget per task (USD)", "Görev başına bütçe (USD)"],
  "pform.taskBudgetUsd.help": ["Empty = no budget.", "Boş = bütçe yok."],
  "pform.gitHostRepo": ["Repository", "Depo"],
  "pform.gitHostRepo.help": ["owner/repo; used for pull requests and issue sync.", "sahip/depo; çekme istekleri ve konu eşitleme için."],
  "pform.gitHostRepo.bad": ["Write it as owner/repo.", "sahip/depo biçiminde yazın."],
  "pform.gitHostSyncEnabled": ["Import open issues as backlog tasks", "Açık konuları bekleyen görev olarak içe aktar"],
  "pform.gitHostSyncEnabled.help": ["Every 5 minutes. An imported task never starts until a person moves or edits it.", "5 dakikada bir. İçe aktarılan görev, biri onu taşıyana ya da düzenleyene dek başlamaz."],
  "pform.create": ["Create project", "Projeyi oluştur"],
});

// --- the form kit ---------------------------------------------------------------------

/**
 * @typedef {Object} Spec  one form field
 * @property {string} key  the API field name (ApiError.field matches it)
 * @property {"text"|"textarea"|"password"|"int"|"number"|"bool"|"flag01"|"select"|"checks"} kind
 *   flag01: a checkbox sent as 1/0; bool: sent as true/false
 * @property {() => string} label
 * @property {() => string} [help]
 * @property {any[]} [options]  values of a select or of checks
 * @property {(value: any) => string} [optionLabel]
 * @property {boolean} [nullable]  empty is sent as null (a select gets a "not set" option)
 * @property {boolean} [required]
 * @property {number} [min]
 * @property {number} [max]
 * @property {RegExp} [pattern]
 * @property {string} [patternKey]  the i18n key of the message when pattern fails
 * @property {boolean} [omitEmpty]  empty is not sent at all (a write-only secret)
 * @property {Object} [attrs]  more attributes for the control
 */

function toRaw(spec, value) {
  if (spec.kind === "bool" || spec.kind === "flag01") return Boolean(value);
  if (spec.kind === "checks") return Array.isArray(value) ? [...value] : [];
  return value === null || value === undefined ? "" : String(value);
}

/** Check one raw value; {value} to send, {error: {key, vars}} or {omit: true}. */
function fromRaw(spec, raw) {
  if (spec.kind === "bool") return { value: raw };
  if (spec.kind === "flag01") return { value: raw ? 1 : 0 };
  if (spec.kind === "checks") {
    return spec.required && !raw.length ? { error: { key: "form.pickOne" } } : { value: raw };
  }
  const text = spec.kind === "text" || spec.kind === "int" || spec.kind === "number" ? raw.trim() : raw;
  if (text === "") {
    if (spec.omitEmpty) return { omit: true };
    if (spec.required || spec.kind === "int" || spec.kind === "number") {
      return spec.nullable && !spec.required ? { value: null } : { error: { key: "form.required" } };
    }
    return { value: spec.nullable ? null : "" };
  }
  if (spec.kind === "int" || spec.kind === "number") {
    const n = Number(text);
    const bad = !Number.isFinite(n) || (spec.kind === "int" && !Number.isInteger(n))
      || (spec.min !== undefined && n < spec.min) || (spec.max !== undefined && n > spec.max);
    if (bad) {
      return { error: spec.kind === "int" && spec.max !== undefined
        ? { key: "form.integer", vars: { min: spec.min ?? 0, max: spec.max } }
        : { key: "form.atLeast", vars: { min: spec.min ?? 0 } } };
    }
    return { value: n };
  }
  if (spec.pattern && !spec.pattern.test(text)) return { error: { key: spec.patternKey || "form.required" } };
  return { value: text };
}

const errorText = (error) => (error.text !== undefined ? error.text : t(error.key, error.vars));
let uid = 0;

/**
 * Fields bound to a model of raw values. Rows are built with row(key) and rebuilt freely
 * (a language switch): what was typed, which fields were touched and the errors stay.
 * @param {Spec[]} specs
 * @param {Object} source  the server object the values start from
 */
export function formKit(specs, source = {}) {
  const byKey = new Map(specs.map((spec) => [spec.key, spec]));
  const raw = {};
  const dirty = new Set();
  const rows = new Map();
  const listeners = new Set();
  let errors = {};
  for (const spec of specs) raw[spec.key] = toRaw(spec, source[spec.key]);

  const changed = (key) => {
    dirty.add(key);
    if (errors[key]) {
      delete errors[key];
      paintError(key);
    }
    for (const fn of listeners) fn(key, raw[key]);
  };

  function paintError(key) {
    const parts = rows.get(key);
    if (!parts) return;
    const error = errors[key];
    parts.error.textContent = error ? errorText(error) : "";
    parts.error.hidden = !error;
    for (const control of parts.controls) control.toggleAttribute("aria-invalid", Boolean(error));
  }

  function buildControl(spec, described) {
    const base = { "data-key": spec.key, "aria-describedby": described, ...(spec.attrs || {}) };
    const value = raw[spec.key];
    if (spec.kind === "textarea") {
      const el = h("textarea", { rows: 6, ...base });
      el.value = value;
      el.addEventListener("input", () => { raw[spec.key] = el.value; changed(spec.key); });
      return el;
    }
    if (spec.kind === "select") {
      const values = spec.nullable ? ["", ...spec.options] : spec.options;
      const label = (v) => (v === "" ? t("form.unset") : (spec.optionLabel || String)(v));
      const el = select(values, value, label, base);
      el.addEventListener("change", () => { raw[spec.key] = el.value; changed(spec.key); });
      return el;
    }
    const numeric = spec.kind === "int" || spec.kind === "number";
    const el = h("input", {
      type: numeric ? "number" : spec.kind === "password" ? "password" : "text",
      min: spec.min, max: spec.max, step: numeric ? (spec.kind === "int" ? 1 : "any") : null,
      inputmode: numeric ? (spec.kind === "int" ? "numeric" : "decimal") : null,
      autocomplete: spec.kind === "password" ? "new-password" : "off", ...base,
    });
    el.value = value;
    el.addEventListener("input", () => { raw[spec.key] = el.value; changed(spec.key); });
    return el;
  }

  /** The labelled row of one field (a fresh element each call). */
  function row(key) {
    const spec = byKey.get(key);
    const id = `pf${++uid}`;
    const help = spec.help ? h("small", { class: "help", id: `${id}-help` }, spec.help()) : null;
    const error = h("small", { class: "field-error", id: `${id}-err`, role: "alert", hidden: true });
    const described = [help && `${id}-help`, `${id}-err`].filter(Boolean).join(" ");
    let element;
    let controls;
    if (spec.kind === "bool" || spec.kind === "flag01") {
      const box = h("input", { type: "checkbox", id, checked: raw[key], "data-key": key,
        "aria-describedby": described });
      box.addEventListener("change", () => { raw[key] = box.checked; changed(key); });
      controls = [box];
      element = h("div", { class: "field field-check", "data-field": key },
        h("label", { for: id }, box, h("span", {}, spec.label())), help, error);
    } else if (spec.kind === "checks") {
      controls = spec.options.map((option) => {
        const box = h("input", { type: "checkbox", value: option, checked: raw[key].includes(option),
          "data-key": `${key}:${option}` });
        box.addEventListener("change", () => {
          raw[key] = spec.options.filter((o) => (o === option ? box.checked : raw[key].includes(o)));
          changed(key);
        });
        return box;
      });
      element = h("fieldset", { class: "field field-checks", "data-field": key, "aria-describedby": described },
        h("legend", {}, spec.label()),
        h("div", { class: "checks" }, controls.map((box, i) =>
          h("label", {}, box, h("span", {}, (spec.optionLabel || String)(spec.options[i]))))),
        help, error);
    } else {
      const control = buildControl(spec, described);
      control.id = id;
      controls = [control];
      element = h("div", { class: "field", "data-field": key },
        h("label", { for: id }, spec.label(), spec.required ? h("span", { class: "req", "aria-hidden": "true" }, " *") : null),
        control, help, error);
    }
    rows.set(key, { element, controls, error });
    paintError(key);
    return element;
  }

  return {
    raw, dirty, rows, specs,
    row,
    /** Call fn(key, raw) whenever the user changes a field; returns the remover. */
    onInput(fn) { listeners.add(fn); return () => listeners.delete(fn); },
    /** Take new server values for the fields the user has not touched. */
    set(source2) {
      for (const spec of specs) {
        if (dirty.has(spec.key) || !(spec.key in source2)) continue;
        raw[spec.key] = toRaw(spec, source2[spec.key]);
        const parts = rows.get(spec.key);
        if (!parts) continue;
        if (spec.kind === "bool" || spec.kind === "flag01") parts.controls[0].checked = raw[spec.key];
        else if (spec.kind === "checks") parts.controls.forEach((box) => { box.checked = raw[spec.key].includes(box.value); });
        else if (spec.kind !== "password") parts.controls[0].value = raw[spec.key];
      }
    },
    /** Forget what was touched and take every value from the server object. */
    reset(source2) {
      dirty.clear();
      errors = {};
      for (const key of rows.keys()) paintError(key);
      this.set(source2);
    },
    /**
     * Check the fields (all, or only the touched ones) and build the body.
     * @returns {{body: Object, errors: Object}}
     */
    collect(onlyDirty = false) {
      const body = {};
      const found = {};
      for (const spec of specs) {
        if (onlyDirty && !dirty.has(spec.key)) continue;
        if (spec.skip && spec.skip(raw)) continue;
        const result = fromRaw(spec, raw[spec.key]);
        if (result.error) found[spec.key] = result.error;
        else if (!result.omit) body[spec.key] = result.value;
      }
      return { body, errors: found };
    },
    /** Show these errors ({key: {key, vars} | {text}}) and no others. */
    showErrors(found) {
      errors = { ...found };
      for (const key of rows.keys()) paintError(key);
    },
    /** Put the keyboard focus on the first field with an error. */
    focusFirstError() {
      const key = specs.map((s) => s.key).find((k) => errors[k] && rows.has(k));
      if (key) rows.get(key).controls[0].focus();
    },
    /** Show an ApiError next to its field when the form has it; answers whether it did. */
    apiError(error) {
      if (error instanceof ApiError && error.field && rows.has(error.field)) {
        this.showErrors({ [error.field]: { text: error.message } });
        this.focusFirstError();
        return true;
      }
      return false;
    },
  };
}

/**
 * A <form> around a kit: build() gives its fields; it is rebuilt on a language switch.
 * onSubmit(body) may throw ApiError: shown next to the field, else above the buttons.
 * @param {{kit: Object, build: () => any, submitLabel: () => string, onSubmit: (body: Object) => Promise<any>,
 *   onCancel?: () => void, onlyDirty?: boolean, className?: string}} options
 * @returns {{element: HTMLFormElement, rerender: () => void, destroy: () => void}}
 */
export function liveForm({ kit, build, submitLabel, onSubmit, onCancel, onlyDirty = false, className = "" }) {
  const form = h("form", { class: `form ${className}`, novalidate: true });
  let busy = false;
  let generalError = "";
  const render = () => {
    const focusKey = form.contains(document.activeElement) ? document.activeElement.dataset.key : null;
    const general = h("p", { class: "form-error error", role: "alert", hidden: !generalError }, generalError);
    const submit = h("button", { type: "submit", class: "primary", disabled: busy }, submitLabel());
    form.replaceChildren(...[build()].flat(), general, h("div", { class: "actions" },
      onCancel ? h("button", { type: "button", onclick: onCancel }, t("common.cancel")) : null, submit));
    if (focusKey) {
      const again = form.querySelector(`[data-key="${CSS.escape(focusKey)}"]`);
      if (again) again.focus();
    }
  };
  const setGeneral = (text) => {
    generalError = text;
    const el = form.querySelector(".form-error");
    el.textContent = text;
    el.hidden = !text;
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (busy) return;
    const { body, errors } = kit.collect(onlyDirty);
    kit.showErrors(errors);
    setGeneral("");
    if (Object.keys(errors).length) {
      setGeneral(t("form.fixErrors"));
      kit.focusFirstError();
      return;
    }
    busy = true;
    form.querySelector("button[type=submit]").disabled = true;
    try {
      await onSubmit(body);
    } catch (error) {
      if (!kit.apiError(error)) setGeneral(error.message || String(error));
    } finally {
      busy = false;
      const submit = form.querySelector("button[type=submit]");
      if (submit) submit.disabled = false;
    }
  });
  render();
  const off = onLanguageChange(render);
  return { element: form, rerender: render, destroy: off };
}

/**
 * A modal holding a liveForm; its title follows the language. Returns {dialog, close}.
 * @param {() => string} title
 * @param {{element: HTMLElement, destroy: () => void}} form
 */
export function formDialog(title, form, { wide = false } = {}) {
  const { dialog, close } = openDialog(title(), form.element, { wide });
  const label = () => {
    dialog.querySelector(".modal-head h2").textContent = title();
    dialog.querySelector(".modal-head .close").setAttribute("aria-label", t("common.close"));
  };
  label();
  const off = onLanguageChange(label);
  dialog.addEventListener("close", () => { off(); form.destroy(); });
  const first = form.element.querySelector("input, select, textarea");
  if (first) first.focus();
  return { dialog, close };
}

// --- shared by the list views -----------------------------------------------------------

/** Ask before deleting when the settings say so; resolves true to go ahead. */
export function confirmDelete(name, detail = "") {
  if (state.settings && !state.settings.confirmBeforeDelete) return Promise.resolve(true);
  const message = detail ? `${t("common.confirmDelete", { name })} ${detail}` : t("common.confirmDelete", { name });
  return confirmDialog(message, { ok: t("common.delete"), cancel: t("common.cancel"), danger: true });
}

/**
 * A project's templates/snippets/webhooks, loaded once and kept current from /ws events
 * (`<prefix>:created|updated|deleted`, and a full reload on resync).
 * @param {number} projectId
 * @param {"templates"|"snippets"|"webhooks"} kind
 * @param {string} prefix  "template" | "snippet" | "webhook"
 * @param {(event: string, data: Object|null) => void} onChange
 */
export function liveItems(projectId, kind, prefix, onChange) {
  const items = new Map();
  const status = { loaded: false, error: null };
  const load = async () => {
    try {
      const list = await api.list(projectId, kind);
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

/** Replace container's children with nodes, keeping the focus on the same data-key. */
export function rerender(container, nodes) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.dataset.key : null;
  container.replaceChildren(...[nodes].flat().filter(Boolean));
  if (key) {
    const again = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

/** A small coloured square with the project's icon, or the first letter of its name. */
export function avatar(project) {
  const seed = project.iconSeed || project.slug || project.name || "";
  let hash = 0;
  for (const ch of seed) hash = (hash * 31 + ch.codePointAt(0)) >>> 0;
  const text = project.icon ? [...project.icon].slice(0, 2).join("") : [...(project.name || "?")][0].toUpperCase();
  return h("span", { class: `avatar avatar-${hash % 8}`, "aria-hidden": "true" }, text);
}

// --- the project form ---------------------------------------------------------------------

const SLUG_RE = /^[a-z0-9][a-z0-9-]{0,62}$/;
const REPO_RE = /^[A-Za-z0-9][A-Za-z0-9-]*\/(?!\.\.?$)[A-Za-z0-9_.-]+$/;
const BRANCH_RE = /^(?!-)(?!.*\.\.)(?!.*\/\/)[A-Za-z0-9._/-]{1,200}$/;
const PERMISSION_MODES = ["auto-accept", "allow-tools", "default"];

const lbl = (key) => () => t(key);

/** Every project field, in the spec's groups. */
const PROJECT_SPECS = [
  { key: "name", group: "basic", kind: "text", required: true, label: lbl("pform.name"), attrs: { maxlength: 200 } },
  { key: "slug", group: "basic", kind: "text", required: true, label: lbl("pform.slug"), help: lbl("pform.slug.help"),
    pattern: SLUG_RE, patternKey: "pform.slug.bad", attrs: { maxlength: 63, autocapitalize: "none", spellcheck: "false" } },
  { key: "workingDir", group: "basic", kind: "text", required: true, label: lbl("pform.workingDir"),
    help: lbl("pform.workingDir.help"), attrs: { class: "mono", placeholder: "/home/me/code/project", spellcheck: "false" } },
  { key: "icon", group: "basic", kind: "text", nullable: true, label: lbl("pform.icon"), help: lbl("pform.icon.help"),
    attrs: { maxlength: 200 } },
  { key: "iconSeed", group: "basic", kind: "text", nullable: true, label: lbl("pform.iconSeed"),
    help: lbl("pform.iconSeed.help"), attrs: { maxlength: 200 } },
  { key: "permissionMode", group: "basic", kind: "select", options: PERMISSION_MODES, label: lbl("pform.permissionMode"),
    help: lbl("pform.permissionMode.help"), optionLabel: (v) => t(`pform.perm.${v}`) },
  { key: "allowedTools", group: "basic", kind: "text", nullable: true, label: lbl("pform.allowedTools"),
    help: lbl("pform.allowedTools.help"), attrs: { class: "mono", spellcheck: "false" } },
  { key: "autoQueue", group: "queue", kind: "bool", label: lbl("pform.autoQueue"), help: lbl("pform.autoQueue.help") },
  { key: "maxConcurrent", group: "queue", kind: "int", min: 1, max: 5, label: lbl("pform.maxConcurrent"),
    help: lbl("pform.maxConcurrent.help") },
  { key: "autoBranch", group: "git", kind: "bool", label: lbl("pform.autoBranch"), help: lbl("pform.autoBranch.help") },
  { key: "autoPr", group: "git", kind: "bool", label: lbl("pform.autoPr") },
  { key: "prBaseBranch", group: "git", kind: "text", required: true, label: lbl("pform.prBaseBranch"),
    pattern: BRANCH_RE, patternKey: "pform.prBaseBranch.bad", attrs: { class: "mono", spellcheck: "false" } },
  { key: "autoTest", group: "autoTest", kind: "bool", label: lbl("pform.autoTest"), help: lbl("pform.autoTest.help") },
  { key: "testPrompt", group: "autoTest", kind: "textarea", label: lbl("pform.testPrompt") },
  { key: "maxRetries", group: "retry", kind: "int", min: 0, max: 10, label: lbl("pform.maxRetries"),
    help: lbl("pform.maxRetries.help") },
  { key: "taskTimeoutMinutes", group: "retry", kind: "int", min: 0, max: 1440, nullable: true,
    label: lbl("pform.taskTimeoutMinutes"), help: lbl("pform.taskTimeoutMinutes.help") },
  { key: "taskBudgetUsd", group: "retry", kind: "number", min: 0.01, max: 10000, nullable: true,
    label: lbl("pform.taskBudgetUsd"), help: lbl("pform.taskBudgetUsd.help"), attrs: { step: "0.01" } },
  { key: "gitHostRepo", group: "host", kind: "text", label: lbl("pform.gitHostRepo"), help: lbl("pform.gitHostRepo.help"),
    pattern: REPO_RE, patternKey: "pform.gitHostRepo.bad", attrs: { class: "mono", placeholder: "owner/repo", spellcheck: "false" } },
  { key: "gitHostSyncEnabled", group: "host", kind: "flag01", label: lbl("pform.gitHostSyncEnabled"),
    help: lbl("pform.gitHostSyncEnabled.help") },
];
const CREATE_KEYS = ["name", "slug", "workingDir", "permissionMode", "allowedTools", "icon", "iconSeed"];
const GROUPS = ["basic", "queue", "git", "autoTest", "retry", "host"];

/** A slug suggested from a name: "Müşteri Paneli" → "musteri-paneli". */
export function suggestSlug(name) {
  return name.toLowerCase().replace(/ı/g, "i").replace(/ß/g, "ss").normalize("NFKD")
    .replace(/[\u0300-\u036f]/g, "").replace(/[^a-z0-9]+/g, "-").replace(/^-+/, "")
    .slice(0, 63).replace(/-+$/, "");
}

/**
 * The project form. mode "create" asks for the create fields and POSTs; "edit" shows every
 * setting in its group and PUTs only what changed. onSaved(project) gets the answer.
 * @param {{mode: "create"|"edit", project?: Object, onSaved: (project: Object) => void, onCancel?: () => void}} options
 * @returns {{element: HTMLFormElement, update: (project: Object) => void, destroy: () => void}}
 */
export function projectForm({ mode, project = {}, onSaved, onCancel }) {
  const create = mode === "create";
  const specs = PROJECT_SPECS.filter((spec) => !create || CREATE_KEYS.includes(spec.key))
    .map((spec) => (spec.key === "allowedTools" && create
      ? { ...spec, skip: (raw) => raw.permissionMode !== "allow-tools" } : spec));
  const source = create ? { permissionMode: "default", ...project } : project;
  const kit = formKit(specs, source);
  let slugTouched = !create || Boolean(source.slug);
  let current = { ...project };

  const preview = () => avatar({ ...current, name: kit.raw.name, slug: kit.raw.slug,
    icon: kit.raw.icon, iconSeed: kit.raw.iconSeed });
  const shareWarning = () => h("p", { class: "warning", role: "status", "data-warning": "share",
    hidden: !(Number(kit.raw.maxConcurrent) > 1 && !kit.raw.autoBranch) }, t("pform.shareWarning"));

  const build = () => {
    const rows = (group) => specs.filter((spec) => spec.group === group).map((spec) => {
      const row = kit.row(spec.key);
      if (spec.key === "allowedTools") row.hidden = kit.raw.permissionMode !== "allow-tools";
      if (spec.key === "icon") row.querySelector("label").append(h("span", { class: "icon-preview" }, preview()));
      return row;
    });
    if (create) return h("div", { class: "form-grid" }, rows("basic"));
    return GROUPS.map((group) => h("fieldset", { class: "group", "data-group": group },
      h("legend", {}, t(`pform.group.${group}`)), rows(group), group === "queue" ? shareWarning() : null));
  };

  const form = liveForm({
    kit, build, onCancel, onlyDirty: !create,
    className: create ? "project-form create" : "project-form",
    submitLabel: () => t(create ? "pform.create" : "common.save"),
    onSubmit: async (body) => {
      if (!create && !Object.keys(body).length) {
        toast(t("form.noChanges"));
        return;
      }
      const saved = create ? await api.createProject(body) : await api.updateProject(project.id, body);
      current = saved;
      kit.reset(saved);
      onSaved(saved);
    },
  });

  /** Keep what depends on other fields in step: tools row, icon preview, warning. */
  const derived = () => {
    const el = form.element;
    const tools = kit.rows.get("allowedTools");
    if (tools) tools.element.hidden = kit.raw.permissionMode !== "allow-tools";
    const slot = el.querySelector(".icon-preview");
    if (slot) slot.replaceChildren(preview());
    const warning = el.querySelector("[data-warning=share]");
    if (warning) warning.hidden = !(Number(kit.raw.maxConcurrent) > 1 && !kit.raw.autoBranch);
  };
  kit.onInput((key, value) => {
    if (key === "name" && !slugTouched) {
      kit.raw.slug = suggestSlug(value);
      const slug = kit.rows.get("slug");
      if (slug) slug.controls[0].value = kit.raw.slug;
    }
    if (key === "slug") slugTouched = value !== "";
    derived();
  });

  return {
    element: form.element,
    kit,
    /** New server values (project:updated): untouched fields follow them. */
    update(next) {
      current = { ...current, ...next };
      kit.set(next);
      derived();
    },
    destroy: form.destroy,
  };
}
