// Formatting helpers (pure).

import { currentLanguage } from "./i18n.js";

const locale = () => (currentLanguage() === "tr" ? "tr-TR" : "en-GB");
const DATE_TIME = { day: "numeric", month: "short", hour: "2-digit", minute: "2-digit" };
const TIME = { hour: "2-digit", minute: "2-digit" };
const formats = new Map();

/** One Intl.DateTimeFormat per language and options, made once (each costs milliseconds). */
function formatOf(options) {
  const key = `${locale()} ${JSON.stringify(options)}`;
  if (!formats.has(key)) formats.set(key, new Intl.DateTimeFormat(locale(), options));
  return formats.get(key);
}

/** "12 Nov 14:03" in the current language; in an IANA time zone when given ("" when this
 * browser does not know the zone), else in local time. */
export function dateTime(iso, timeZone) {
  if (!iso) return "";
  if (!timeZone) return formatOf(DATE_TIME).format(new Date(iso));
  try {
    return formatOf({ ...DATE_TIME, timeZone }).format(new Date(iso));
  } catch {
    return "";
  }
}

/** "14:03" when iso is today, else "12 Nov 14:03" (local time). */
export function clock(iso) {
  if (!iso) return "";
  const when = new Date(iso);
  if (when.toDateString() !== new Date().toDateString()) return dateTime(iso);
  return formatOf(TIME).format(when);
}

/** The unit a distance in time is said in: seconds under a minute, ..., days from two days. */
const RELATIVE_UNITS = [[60, 1, "second"], [3600, 60, "minute"], [172800, 3600, "hour"], [Infinity, 86400, "day"]];

/** "in 5 hr", "3 min ago" (or "5 sa. sonra", "3 dk. önce"): iso seen from now, in the current language. */
export function relative(iso, now = Date.now()) {
  if (!iso) return "";
  const seconds = (new Date(iso).getTime() - now) / 1000;
  const [, size, unit] = RELATIVE_UNITS.find(([limit]) => Math.abs(seconds) < limit);
  const key = `${locale()} relative`;
  if (!formats.has(key)) formats.set(key, new Intl.RelativeTimeFormat(locale(), { style: "short", numeric: "always" }));
  return formats.get(key).format(Math.round(seconds / size), unit);
}

/** "3 min", "2 h 5 min", "12 s" from milliseconds. */
export function duration(ms) {
  if (ms === null || ms === undefined) return "";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** "$0.04" */
export function cost(value) {
  return `$${(value || 0).toFixed(value >= 10 ? 2 : value >= 0.1 ? 3 : 4)}`;
}

/** "≈$0.04" when part of the cost is estimated from token counts, else "$0.04". */
export function costMark(value, estimated) {
  return estimated ? `≈${cost(value)}` : cost(value);
}

/** "12.3k" */
export function tokens(n) {
  if (!n) return "0";
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : String(n);
}

/** "1.2 MB" */
export function bytes(n) {
  if (!n) return "0 B";
  const units = ["B", "KB", "MB", "GB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

/** Parse the task's tags field (a string holding a JSON array) into an array. */
export function tags(value) {
  if (!value) return [];
  try {
    const parsed = JSON.parse(value);
    return Array.isArray(parsed) ? parsed.filter((x) => typeof x === "string") : [];
  } catch {
    return [];
  }
}

/** The tool by which Claude asks the person. */
export const QUESTION_TOOL = "AskUserQuestion";

/** The JSON string that starts text (its closing quote may be cut off), unescaped. */
function leadingString(text) {
  const raw = /^((?:[^"\\]|\\.)*)/.exec(text);
  try {
    return JSON.parse(`"${raw[1].replace(/\\$/, "")}"`);
  } catch {
    return raw[1];
  }
}

/**
 * The line of a question call's log entry ("AskUserQuestion: …") without its tool's name:
 * each question with its options ("Which colour? (Red / Blue)"), as the server writes it
 * now. Entries stored before held the call's input as JSON, often cut at 200 characters:
 * their questions and options are read out of it, whole or cut. Any other line as it is.
 * @param {string} message
 */
export function questionLine(message) {
  const prefix = `${QUESTION_TOOL}: `;
  const line = message.startsWith(prefix) ? message.slice(prefix.length) : message;
  if (!/^\s*\{/.test(line)) return line;
  const parts = line.split(/"question"\s*:\s*"/).slice(1).map((part) => {
    const question = leadingString(part).replace(/\s+/g, " ").trim();
    const labels = [...part.matchAll(/"label"\s*:\s*"((?:[^"\\]|\\.)*)"/g)]
      .map((match) => leadingString(match[1]).trim()).filter(Boolean);
    return question ? `${question}${labels.length ? ` (${labels.join(" / ")})` : ""}` : "";
  }).filter(Boolean);
  const cut = /… \[\d+ more\]$/.test(line) ? " …" : "";  // _cut's mark: there was more
  return parts.length ? parts.join(" ") + cut : line;
}
