// The server's description of its API (GET /api/openapi.json), loaded once by main.js
// before the first view mounts. The board takes every list of values, limit and pattern
// from it and keeps no copies: enumOf("Task", "status"), patternOf("Project", "slug"),
// rangeOf("Project", "maxConcurrent"), maxLengthOf("Task", "title"). Display names stay in
// the board (i18n); only values, limits and patterns come from here.

import { api } from "./store.js";

/** @type {{components: {schemas: Object<string, Object>}, paths: Object<string, Object>}|null} */
let doc = null;
/** @type {Map<string, RegExp>} */
const patterns = new Map();

/**
 * Fetch the document (once, at start-up). Throws (ApiError, or Error when the answer is not
 * an OpenAPI document) so that main.js can say why the board cannot start.
 */
export async function loadSchema() {
  const answer = await api.openapi();
  if (!answer || !answer.components || !answer.components.schemas) {
    throw new Error("/api/openapi.json did not answer with an OpenAPI document");
  }
  useSchema(answer);
}

/** Use this document (loadSchema, and tests that bring their own). */
export function useSchema(document) {
  doc = document;
  patterns.clear();
}

/**
 * The JSON schema of one property: propertyOf("Task", "status"); a property of an object
 * property by its dotted name: propertyOf("Schedule", "task.type"). Throws when the document
 * does not describe it (a board newer than its server): the view says so instead of guessing.
 * @param {string} schema  a name in components.schemas, e.g. "Project" or "api_start_plan_body"
 * @param {string} name  the property, or "object.property"
 * @returns {Object}
 */
export function propertyOf(schema, name) {
  if (!doc) throw new Error("The server's API description is not loaded.");
  const found = name.split(".").reduce((node, part) => node?.properties?.[part], doc.components.schemas[schema]);
  if (!found) throw new Error(`The server's API description has no ${schema}.${name}.`);
  return found;
}

/**
 * The allowed values of a property (of its items, for an array): enumOf("Task", "status").
 * @returns {Array<string|number>}
 */
export function enumOf(schema, name) {
  const property = propertyOf(schema, name);
  const values = property.enum ?? property.items?.enum;
  if (!Array.isArray(values)) throw new Error(`${schema}.${name} has no list of values.`);
  return [...values];
}

/**
 * The property's pattern as a RegExp, tested as JSON Schema does (a match anywhere: the
 * server anchors the patterns that must cover the whole value).
 * @returns {RegExp}
 */
export function patternOf(schema, name) {
  const key = `${schema}.${name}`;
  if (!patterns.has(key)) {
    const source = propertyOf(schema, name).pattern;
    if (typeof source !== "string") throw new Error(`${key} has no pattern.`);
    patterns.set(key, toRegExp(source));
  }
  return patterns.get(key);
}

/** A JSON Schema pattern (ECMA-262) as a RegExp; unicode mode when the pattern allows it. */
function toRegExp(source) {
  try {
    return new RegExp(source, "u");
  } catch {
    return new RegExp(source);
  }
}

/**
 * The property's limits: {min, max} (either undefined when the server sets none).
 * @returns {{min: number|undefined, max: number|undefined}}
 */
export function rangeOf(schema, name) {
  return limits(propertyOf(schema, name));
}

/** The property's maxLength, or undefined. @returns {number|undefined} */
export function maxLengthOf(schema, name) {
  return propertyOf(schema, name).maxLength;
}

/** The property's default value, or undefined. */
export function defaultOf(schema, name) {
  return propertyOf(schema, name).default;
}

/**
 * A parameter of an operation (a query parameter, or a property of its JSON body):
 * parameterOf("/api/projects/{project_id}/activity", "limit") → its JSON schema.
 * @param {string} path  as the document names it
 * @param {string} name
 * @param {string} [method]
 * @returns {Object}
 */
export function parameterOf(path, name, method = "get") {
  if (!doc) throw new Error("The server's API description is not loaded.");
  const operation = doc.paths?.[path]?.[method];
  const param = operation?.parameters?.find((p) => p.name === name)?.schema
    ?? operation?.requestBody?.content?.["application/json"]?.schema?.properties?.[name];
  if (!param) throw new Error(`The server's API description has no ${method.toUpperCase()} ${path} ${name}.`);
  return param;
}

/** {min, max} of an operation's parameter (see parameterOf). */
export function parameterRangeOf(path, name, method = "get") {
  return limits(parameterOf(path, name, method));
}

const limits = (property) => ({ min: property.minimum, max: property.maximum });

/** Every integer from min to max of a property: integersOf("Task", "priority") → [0, 1, 2, 3]. */
export function integersOf(schema, name) {
  const { min, max } = rangeOf(schema, name);
  if (!Number.isInteger(min) || !Number.isInteger(max)) throw new Error(`${schema}.${name} has no integer range.`);
  return Array.from({ length: max - min + 1 }, (_, i) => min + i);
}
