// Small DOM helpers. Server and user text only ever goes in through textContent.

import { t } from "./i18n.js";

/**
 * Build an element: h("button", {class: "primary", onclick: fn, "data-id": 3}, "Save").
 * Attributes starting with "on" become listeners; true/false toggle boolean attributes;
 * children are nodes or strings (strings become text nodes, never HTML).
 * @param {string} tag
 * @param {Object<string, any>} [attrs]
 * @param {...(Node|string|number|null|undefined|false|Array)} children
 * @returns {HTMLElement}
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (name === "class") {
      el.className = value;
    } else if (name === "style" && typeof value === "object") {
      Object.assign(el.style, value);
    } else if (name === "value" && "value" in el) {
      el.value = value;
    } else if (name === "checked" || name === "selected" || name === "disabled") {
      el[name] = Boolean(value);
      if (value) el.setAttribute(name, "");
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

/** Append children (nested arrays allowed; null/false skipped). */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Build an SVG element (for charts and the dependency graph). */
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) el.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** @returns {Element|null} */
export const qs = (selector, root = document) => root.querySelector(selector);
/** @returns {Element[]} */
export const qsa = (selector, root = document) => [...root.querySelectorAll(selector)];

/** Remove every child of el; returns el. */
export function clear(el) {
  el.replaceChildren();
  return el;
}

/**
 * Listen and get the remover back: const off = on(el, "click", fn).
 * @returns {() => void}
 */
export function on(target, type, handler, options) {
  target.addEventListener(type, handler, options);
  return () => target.removeEventListener(type, handler, options);
}

/** The control a person used last (clicked, or pressed Enter or Space on): what a toast reports on. */
let lastControl = null;
const CONTROL = "button, a[href], select, input, textarea, summary, [role=button]";  // not a focusable box (a card, the view)
for (const type of ["click", "keydown"]) {
  document.addEventListener(type, (event) => {
    if (type === "keydown" && event.key !== "Enter" && event.key !== " ") return;
    lastControl = event.target instanceof Element ? event.target.closest(CONTROL) : null;
  }, true);
}

/** Room kept around a control a toast must not cover (px): its neighbours are used next. */
const TOAST_MARGIN = 16;

const overlaps = (a, b) => a.left < b.right + TOAST_MARGIN && b.left - TOAST_MARGIN < a.right
  && a.top < b.bottom + TOAST_MARGIN && b.top - TOAST_MARGIN < a.bottom;

/**
 * Toasts stand at the bottom of the page, or at its top while there they would cover the
 * control they report on (the one focused or used last) or the buttons beside it (of its form
 * or its row of actions).
 */
function placeToasts(box) {
  const used = [document.activeElement, lastControl].filter((el) => el?.isConnected && el.matches(CONTROL));
  const controls = used.flatMap((el) => [el, ...(el.closest("form, .actions, .detail-actions")?.querySelectorAll("button") || [])]);
  box.classList.remove("at-top");
  const rect = box.getBoundingClientRect();
  if (controls.some((el) => overlaps(rect, el.getBoundingClientRect()))) box.classList.add("at-top");
}

/** Show a short message at the bottom of the page (see placeToasts). kind: "info" | "error". */
export function toast(message, kind = "info") {
  let box = document.getElementById("toasts");
  if (!box) {
    box = h("div", { id: "toasts", role: "status", "aria-live": "polite" });
    document.body.append(box);
  }
  const item = h("div", { class: `toast toast-${kind}` }, message);
  box.append(item);
  placeToasts(box);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 4000);
}

/**
 * A modal <dialog> holding content; resolves when it closes. Returns {dialog, close}.
 * @param {string} title
 * @param {Node|Node[]} content
 */
let dialogCounter = 0;

export function openDialog(title, content, { wide = false } = {}) {
  const closeButton = h("button", { type: "button", class: "icon close",
    "aria-label": t("common.close") }, "×");
  const headingId = `dialog-title-${++dialogCounter}`;
  const dialog = h("dialog", { class: wide ? "modal wide" : "modal", "aria-labelledby": headingId },
    h("header", { class: "modal-head" }, h("h2", { id: headingId }, title), closeButton),
    h("div", { class: "modal-body" }, content));
  const close = () => { dialog.close(); };
  closeButton.addEventListener("click", close);
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();
  return { dialog, close };
}

/** Ask the user to confirm; resolves true or false. */
export function confirmDialog(message, { ok = "OK", cancel = "Cancel", danger = false } = {}) {
  return new Promise((resolve) => {
    let answer = false;
    const yes = h("button", { type: "button", class: danger ? "danger" : "primary" }, ok);
    const no = h("button", { type: "button" }, cancel);
    const { dialog, close } = openDialog(message, h("div", { class: "actions" }, no, yes));
    yes.addEventListener("click", () => { answer = true; close(); });
    no.addEventListener("click", close);
    dialog.addEventListener("close", () => resolve(answer));
    yes.focus();
  });
}
