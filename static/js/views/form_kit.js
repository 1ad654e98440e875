// The form kit of the board's settings forms: fields bound to a model of raw values,
// checked before sending (with the enums, limits and patterns of the server's API
// description), server errors shown next to the field the ApiError names, and forms
// re-rendered on a language switch without losing what was typed. The rows of the fields and
// the check of their values are form_fields.js.

import { h, openDialog } from "../dom.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { patternOf, propertyOf } from "../schema.js";
import { ApiError } from "../store.js";
import { fieldRow, fromRaw, showRaw, toRaw } from "./form_fields.js";

register({  // key: [English, Turkish]
  "form.noChanges": ["Nothing changed.", "Değişiklik yok."],
  "form.fixErrors": ["Some fields need attention.", "Bazı alanların düzeltilmesi gerekiyor."],
});

/**
 * @typedef {Object} Spec  one form field
 * @property {string} key  the API field name (ApiError.field matches it)
 * @property {"text"|"textarea"|"password"|"int"|"number"|"bool"|"flag01"|"select"|"checks"|"custom"} kind
 *   flag01: a checkbox sent as 1/0; bool: sent as true/false
 * @property {() => string} label
 * @property {() => string} [help]
 * @property {any[]} [options]  values of a select or of checks
 * @property {(value: any) => string} [optionLabel]
 * @property {boolean} [nullable]  empty is sent as null (a select gets a "not set" option)
 * @property {() => string} [unsetLabel]  what a nullable select's "not set" option says instead
 * @property {boolean} [required]
 * @property {number} [min]
 * @property {number} [max]
 * @property {RegExp} [pattern]
 * @property {string} [patternKey]  the i18n key of the message when pattern fails
 * @property {boolean} [omitEmpty]  empty is not sent at all (a write-only secret)
 * @property {Object} [attrs]  more attributes for the control
 * @property {Object} [custom]  a field of its own kind (e.g. a grid): {toRaw(value),
 *   fromRaw(raw) → as fromRaw, render(spec, raw, ids, changed) → {element, controls}, show(parts, raw)}
 */


/**
 * Specs completed from the server's schema of their fields: a select's or checks' values
 * (enum), min and max, the maxlength of a text, and the pattern of a field that has a
 * patternKey (the message shown when it fails). Nothing of these is written in the board.
 * @param {string} schema  e.g. "Project" (components.schemas of /api/openapi.json)
 * @param {Spec[]} specs  keys are the schema's property names
 * @returns {Spec[]}
 */
export function schemaSpecs(schema, specs) {
  return specs.map((spec) => {
    const property = propertyOf(schema, spec.key);
    const values = property.enum ?? property.items?.enum;
    const choice = spec.kind === "select" || spec.kind === "checks";
    const text = spec.kind === "text" || spec.kind === "textarea" || spec.kind === "password";
    return {
      ...spec,
      options: choice ? [...values] : spec.options,
      min: property.minimum ?? spec.min,
      max: property.maximum ?? spec.max,
      pattern: spec.patternKey ? patternOf(schema, spec.key) : spec.pattern,
      attrs: { ...(text && property.maxLength ? { maxlength: property.maxLength } : {}), ...(spec.attrs || {}) },
    };
  });
}

const errorText = (error) => (error.text !== undefined ? error.text : t(error.key, error.vars));

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

  function paintError(key) {
    const parts = rows.get(key);
    if (!parts) return;
    const error = errors[key];
    parts.error.textContent = error ? errorText(error) : "";
    parts.error.hidden = !error;
    for (const control of parts.controls) control.toggleAttribute("aria-invalid", Boolean(error));
  }

  const changed = (key) => {
    dirty.add(key);
    if (errors[key]) {
      delete errors[key];
      paintError(key);
    }
    for (const fn of listeners) fn(key, raw[key]);
  };

  return {
    raw, dirty, rows, specs,
    /** The labelled row of one field (a fresh element each call). */
    row(key) {
      const parts = fieldRow(byKey.get(key), raw, () => changed(key));
      rows.set(key, parts);
      paintError(key);
      return parts.element;
    },
    /** Call fn(key, raw) whenever the user changes a field; returns the remover. */
    onInput(fn) { listeners.add(fn); return () => listeners.delete(fn); },
    /** Take new server values for the fields the user has not touched. */
    set(source2) {
      for (const spec of specs) {
        if (dirty.has(spec.key) || !(spec.key in source2)) continue;
        raw[spec.key] = toRaw(spec, source2[spec.key]);
        if (rows.has(spec.key)) showRaw(spec, rows.get(spec.key), raw[spec.key]);
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
        if ((onlyDirty && !dirty.has(spec.key)) || (spec.skip && spec.skip(raw))) continue;
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
    /**
     * A server message as the form speaks: each API field name of its specs (a camelCase
     * one such as workingDir; a plain word such as name reads as itself) is written as the
     * field's label ("workingDir '/x' ..." → "Working directory '/x' ...").
     */
    labelled(message) {
      const names = specs.filter((spec) => /[A-Z0-9]/.test(spec.key)).map((spec) => spec.key);
      if (!names.length) return message;
      return message.replace(new RegExp(`\\b(${names.join("|")})\\b`, "g"), (key) => byKey.get(key).label());
    },
    /** Show an ApiError next to its field when the form has it; answers whether it did. */
    apiError(error) {
      if (error instanceof ApiError && error.field && rows.has(error.field)) {
        this.showErrors({ [error.field]: { text: this.labelled(error.message) } });
        this.focusFirstError();
        return true;
      }
      return false;
    },
  };
}

/**
 * A <form> around a kit: build() gives its fields; it is rebuilt on a language switch.
 * onSubmit(body) may throw ApiError: shown next to the field, else above the buttons (with
 * the fields' labels for their API names).
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
      if (!kit.apiError(error)) setGeneral(kit.labelled(error.message || String(error)));
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

