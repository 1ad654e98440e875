// The fields of the form kit (form_kit.js): a spec's value as the controls hold it and its
// check before sending (toRaw, fromRaw), and the labelled row of controls that edits it — a
// text, number, textarea or select, a checkbox, a set of checkboxes, or a custom field.

import { h } from "../dom.js";
import { register, t } from "../i18n.js";
import { select } from "./common.js";

register({  // key: [English, Turkish]
  "form.required": ["Required.", "Zorunlu."],
  "form.integer": ["Enter a whole number from {min} to {max}.", "{min} ile {max} arasında bir tam sayı girin."],
  "form.atLeast": ["Enter a number of at least {min}.", "En az {min} olan bir sayı girin."],
  "form.unset": ["— not set —", "— ayarlanmamış —"],
  "form.pickOne": ["Pick at least one.", "En az birini seçin."],
});

/** The value of a spec as its controls hold it (raw): a boolean, a list or a string. */
export function toRaw(spec, value) {
  if (spec.custom) return spec.custom.toRaw(value);
  if (spec.kind === "bool" || spec.kind === "flag01") return Boolean(value);
  if (spec.kind === "checks") return Array.isArray(value) ? [...value] : [];
  return value === null || value === undefined ? "" : String(value);
}

/** Check one raw value; {value} to send, {error: {key, vars}} or {omit: true}. */
export function fromRaw(spec, raw) {
  if (spec.custom) return spec.custom.fromRaw(raw);
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

let uid = 0;

/** A text, textarea or select control of a spec, writing raw[spec.key] and calling changed(). */
function buildControl(spec, raw, described, changed) {
  const base = { "data-key": spec.key, "aria-describedby": described, ...(spec.attrs || {}) };
  let el;
  if (spec.kind === "textarea") {
    el = h("textarea", { rows: 6, ...base });
  } else if (spec.kind === "select") {
    const values = spec.nullable ? ["", ...spec.options] : spec.options;
    const label = (v) => (v === "" ? (spec.unsetLabel || (() => t("form.unset")))() : (spec.optionLabel || String)(v));
    el = select(values, raw[spec.key], label, base);
  } else {
    const numeric = spec.kind === "int" || spec.kind === "number";
    el = h("input", {
      type: numeric ? "number" : spec.kind === "password" ? "password" : "text",
      min: spec.min, max: spec.max, step: numeric ? (spec.kind === "int" ? 1 : "any") : null,
      inputmode: numeric ? (spec.kind === "int" ? "numeric" : "decimal") : null,
      autocomplete: spec.kind === "password" ? "new-password" : "off", ...base,
    });
  }
  el.value = raw[spec.key];
  el.addEventListener(spec.kind === "select" ? "change" : "input", () => { raw[spec.key] = el.value; changed(); });
  return el;
}

/** The row of a checkbox (bool, flag01). */
function checkRow(spec, raw, ids, changed) {
  const box = h("input", { type: "checkbox", id: ids.id, checked: raw[spec.key], "data-key": spec.key,
    "aria-describedby": ids.described });
  box.addEventListener("change", () => { raw[spec.key] = box.checked; changed(); });
  const element = h("div", { class: "field field-check", "data-field": spec.key },
    h("label", { for: ids.id }, box, h("span", {}, spec.label())), ids.help, ids.error);
  return { element, controls: [box] };
}

/** The row of a set of checkboxes (checks): raw[key] is the list of the checked options. */
function checksRow(spec, raw, ids, changed) {
  const key = spec.key;
  const controls = spec.options.map((option) => {
    const box = h("input", { type: "checkbox", value: option, checked: raw[key].includes(option),
      "data-key": `${key}:${option}` });
    box.addEventListener("change", () => {
      raw[key] = spec.options.filter((o) => (o === option ? box.checked : raw[key].includes(o)));
      changed();
    });
    return box;
  });
  const element = h("fieldset", { class: "field field-checks", "data-field": key, "aria-describedby": ids.described },
    h("legend", {}, spec.label()),
    h("div", { class: "checks" }, controls.map((box, i) =>
      h("label", {}, box, h("span", {}, (spec.optionLabel || String)(spec.options[i]))))),
    ids.help, ids.error);
  return { element, controls };
}

/** The labelled row of one field: {element, controls, error}, a fresh element each call. */
export function fieldRow(spec, raw, changed) {
  const id = `pf${++uid}`;
  const help = spec.help ? h("small", { class: "help", id: `${id}-help` }, spec.help()) : null;
  const error = h("small", { class: "field-error", id: `${id}-err`, role: "alert", hidden: true });
  const ids = { id, help, error, described: [help && `${id}-help`, `${id}-err`].filter(Boolean).join(" ") };
  if (spec.kind === "bool" || spec.kind === "flag01") return { ...checkRow(spec, raw, ids, changed), error };
  if (spec.kind === "checks") return { ...checksRow(spec, raw, ids, changed), error };
  if (spec.custom) return { ...spec.custom.render(spec, raw, ids, changed), error };
  const control = buildControl(spec, raw, ids.described, changed);
  control.id = id;
  const element = h("div", { class: "field", "data-field": spec.key },
    h("label", { for: id }, spec.label(), spec.required ? h("span", { class: "req", "aria-hidden": "true" }, " *") : null),
    control, help, error);
  return { element, controls: [control], error };
}

/** Put a raw value into the controls of a row. */
export function showRaw(spec, parts, value) {
  if (spec.custom) return spec.custom.show(parts, value);
  if (spec.kind === "bool" || spec.kind === "flag01") parts.controls[0].checked = value;
  else if (spec.kind === "checks") parts.controls.forEach((box) => { box.checked = value.includes(box.value); });
  else if (spec.kind !== "password") parts.controls[0].value = value;
}
