// Translations: every visible string goes through t(). Each view registers its own
// strings with register({key: [English, Turkish]}) so views stay independent files.

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
