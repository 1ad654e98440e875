// Translations: every visible string goes through t(). Each view registers its own
// strings with register({key: [English, Turkish]}) so views stay independent files.
// Below them, the formats of dates, times, durations, costs and sizes in the reader's language.

const dictionaries = { en: {}, tr: {} };
const listeners = new Set();
let language = "en";

/** The languages of the board, in the order register() takes their texts. */
export const LANGUAGES = Object.keys(dictionaries);

/**
 * Add strings, each key once with its text in every language (in LANGUAGES order):
 * register({"board.title": ["Board", "Pano"]}).
 * @param {Object<string, string[]>} strings
 */
export function register(strings) {
  for (const [key, texts] of Object.entries(strings)) {
    LANGUAGES.forEach((lang, i) => {
      if (texts[i] !== undefined) dictionaries[lang][key] = texts[i];
    });
  }
}

/**
 * The text of key in the current language, with {name} placeholders filled from vars.
 * Falls back to English, then to the key itself (so a missing string is visible).
 * @param {string} key
 * @param {Object<string, string|number>} [vars]
 */
export function t(key, vars = {}) {
  const text = dictionaries[language][key] ?? dictionaries.en[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (_, name) => (name in vars ? String(vars[name]) : `{${name}}`));
}

/** The current language code ("en" or "tr"). */
export const currentLanguage = () => language;

/** Switch language and tell every listener (views re-render). */
export function setLanguage(lang) {
  if (!(lang in dictionaries) || lang === language) return;
  language = lang;
  document.documentElement.lang = lang;
  for (const fn of listeners) fn(lang);
}

/** Call fn(lang) after every language switch; returns the remover. */
export function onLanguageChange(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** Keys missing in a language (used by tests through window.taskboard). */
export function missingKeys(lang = "tr") {
  return Object.keys(dictionaries.en).filter((key) => !(key in dictionaries[lang]));
}

register({  // key: [English, Turkish]
  "app.title": ["Taskboard", "Taskboard"],
  "nav.projects": ["Projects", "Projeler"],
  "nav.attention": ["Testing & failed", "Test ve başarısız"],
  "nav.usage": ["Agent usage", "Ajan kullanımı"],
  "nav.settings": ["Settings", "Ayarlar"],
  "nav.logout": ["Log out", "Çıkış yap"],
  "conn.open": ["Live", "Canlı"],
  "conn.connecting": ["Connecting…", "Bağlanıyor…"],
  "conn.closed": ["Offline — reconnecting", "Çevrimdışı — yeniden bağlanıyor"],
  "health.agentMissing": ["The agent CLI is not found: tasks cannot run. Install it, or set --agent-command or TASKBOARD_AGENT_COMMAND (the server's log names the command). To try the board first, start it with --demo: its Demo project's tasks run a simulated agent.", "Ajan CLI bulunamadı: görevler çalışamaz. Kurun ya da --agent-command veya TASKBOARD_AGENT_COMMAND ayarlayın (sunucu günlüğü komutu gösterir). Panoyu önce denemek için --demo ile başlatın: Demo projesinin görevlerini benzetilmiş bir ajan çalıştırır."],
  "health.unreachable": ["The server cannot be reached.", "Sunucuya ulaşılamıyor."],
  "common.save": ["Save", "Kaydet"],
  "common.cancel": ["Cancel", "Vazgeç"],
  "common.delete": ["Delete", "Sil"],
  "common.edit": ["Edit", "Düzenle"],
  "common.create": ["Create", "Oluştur"],
  "common.close": ["Close", "Kapat"],
  "common.loading": ["Loading…", "Yükleniyor…"],
  "common.none": ["None", "Yok"],
  "common.yes": ["Yes", "Evet"],
  "common.no": ["No", "Hayır"],
  "common.on": ["On", "Açık"],
  "common.off": ["Off", "Kapalı"],
  "common.saved": ["Saved", "Kaydedildi"],
  "common.confirmDelete": ["Delete {name}?", "{name} silinsin mi?"],
  "common.localOnly": ["Only available on the machine running Taskboard.", "Yalnızca Taskboard'un çalıştığı makinede kullanılabilir."],
  "status.backlog": ["Backlog", "Bekleyen"],
  "status.in_progress": ["In progress", "Devam ediyor"],
  "status.testing": ["Testing", "Test"],
  "status.done": ["Done", "Tamamlandı"],
  "status.failed": ["Failed", "Başarısız"],
  "type.feature": ["Feature", "Özellik"],
  "type.bugfix": ["Bug fix", "Hata düzeltme"],
  "type.refactor": ["Refactor", "Yeniden düzenleme"],
  "type.docs": ["Docs", "Belgeler"],
  "type.test": ["Test", "Test"],
  "type.chore": ["Chore", "Bakım"],
  "priority.0": ["Low", "Düşük"],
  "priority.1": ["Medium", "Orta"],
  "priority.2": ["High", "Yüksek"],
  "priority.3": ["Urgent", "Acil"],
  "model.model_large": ["Large", "Büyük"],
  "model.model_medium": ["Medium", "Orta"],
  "model.model_small": ["Small", "Küçük"],
  "agent.claude": ["Claude Code", "Claude Code"],
  "agent.codex": ["Codex", "Codex"],
  "agent.gemini": ["Gemini CLI", "Gemini CLI"],
  "agent.opencode": ["OpenCode", "OpenCode"],
  "cost.estimated": ["estimated", "tahmini"],
  "cost.estimatedHelp": ["Part of this cost is estimated from token counts: the agent CLI reported none.", "Bu maliyetin bir kısmı token sayılarından tahmin edildi: ajan CLI'si maliyet bildirmedi."],
  "effort.low": ["Low", "Düşük"],
  "effort.medium": ["Medium", "Orta"],
  "effort.high": ["High", "Yüksek"],
  "notfound.title": ["Nothing here", "Burada bir şey yok"],
  "notfound.body": ["This page does not exist.", "Bu sayfa yok."],
});

// --- formats ------------------------------------------------------------------------------------

// Formatting helpers (pure).

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
