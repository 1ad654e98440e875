// Translations: every visible string goes through t(). Each view registers its own
// strings with register({en: {...}, tr: {...}}) so views stay independent files.

const dictionaries = { en: {}, tr: {} };
const listeners = new Set();
let language = "en";

/**
 * Add strings: register({en: {"board.title": "Board"}, tr: {"board.title": "Pano"}}).
 * @param {{en: Object<string,string>, tr: Object<string,string>}} strings
 */
export function register(strings) {
  for (const lang of Object.keys(dictionaries)) Object.assign(dictionaries[lang], strings[lang] || {});
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

register({
  en: {
    "app.title": "Taskboard",
    "nav.projects": "Projects",
    "nav.attention": "Needs attention",
    "nav.usage": "Agent usage",
    "nav.settings": "Settings",
    "nav.logout": "Log out",
    "conn.open": "Live",
    "conn.connecting": "Connecting…",
    "conn.closed": "Offline — reconnecting",
    "health.agentMissing": "The agent command {command} is not found: tasks cannot run. Set --agent-command or TASKBOARD_AGENT_COMMAND.",
    "health.unreachable": "The server cannot be reached.",
    "common.save": "Save",
    "common.cancel": "Cancel",
    "common.delete": "Delete",
    "common.edit": "Edit",
    "common.create": "Create",
    "common.close": "Close",
    "common.loading": "Loading…",
    "common.none": "None",
    "common.yes": "Yes",
    "common.no": "No",
    "common.saved": "Saved",
    "common.confirmDelete": "Delete {name}?",
    "common.localOnly": "Only available on the machine running Taskboard.",
    "status.backlog": "Backlog",
    "status.in_progress": "In progress",
    "status.testing": "Testing",
    "status.done": "Done",
    "status.failed": "Failed",
    "type.feature": "Feature",
    "type.bugfix": "Bug fix",
    "type.refactor": "Refactor",
    "type.docs": "Docs",
    "type.test": "Test",
    "type.chore": "Chore",
    "priority.0": "Low",
    "priority.1": "Medium",
    "priority.2": "High",
    "priority.3": "Urgent",
    "model.model_large": "Large",
    "model.model_medium": "Medium",
    "model.model_small": "Small",
    "effort.low": "Low",
    "effort.medium": "Medium",
    "effort.high": "High",
    "notfound.title": "Nothing here",
    "notfound.body": "This page does not exist.",
  },
  tr: {
    "app.title": "Taskboard",
    "nav.projects": "Projeler",
    "nav.attention": "İlgi bekleyenler",
    "nav.usage": "Ajan kullanımı",
    "nav.settings": "Ayarlar",
    "nav.logout": "Çıkış yap",
    "conn.open": "Canlı",
    "conn.connecting": "Bağlanıyor…",
    "conn.closed": "Çevrimdışı — yeniden bağlanıyor",
    "health.agentMissing": "Ajan komutu {command} bulunamadı: görevler çalışamaz. --agent-command veya TASKBOARD_AGENT_COMMAND ayarlayın.",
    "health.unreachable": "Sunucuya ulaşılamıyor.",
    "common.save": "Kaydet",
    "common.cancel": "Vazgeç",
    "common.delete": "Sil",
    "common.edit": "Düzenle",
    "common.create": "Oluştur",
    "common.close": "Kapat",
    "common.loading": "Yükleniyor…",
    "common.none": "Yok",
    "common.yes": "Evet",
    "common.no": "Hayır",
    "common.saved": "Kaydedildi",
    "common.confirmDelete": "{name} silinsin mi?",
    "common.localOnly": "Yalnızca Taskboard'un çalıştığı makinede kullanılabilir.",
    "status.backlog": "Bekleyen",
    "status.in_progress": "Devam ediyor",
    "status.testing": "Test",
    "status.done": "Tamamlandı",
    "status.failed": "Başarısız",
    "type.feature": "Özellik",
    "type.bugfix": "Hata düzeltme",
    "type.refactor": "Yeniden düzenleme",
    "type.docs": "Belgeler",
    "type.test": "Test",
    "type.chore": "Bakım",
    "priority.0": "Düşük",
    "priority.1": "Orta",
    "priority.2": "Yüksek",
    "priority.3": "Acil",
    "model.model_large": "Büyük",
    "model.model_medium": "Orta",
    "model.model_small": "Küçük",
    "effort.low": "Düşük",
    "effort.medium": "Orta",
    "effort.high": "Yüksek",
    "notfound.title": "Burada bir şey yok",
    "notfound.body": "Bu sayfa yok.",
  },
});
