// Application settings (#/settings): every field GET /api/settings returns, with the right
// control (unknown ones by their JSON type), saved with a PUT of what changed; changes made
// elsewhere (settings:updated) flow into the fields not being edited; whether the board has a
// source-host token is shown (read-only); the write-only webhook secret of the source host is
// webhook_secret.js. Also: links to the notifications of this device (notifications.js), to
// the hosts (hosts.js) and to the personal tokens (tokens.js), and log out.

import { h, toast } from "../dom.js";
import { onLanguageChange, register, setLanguage, t } from "../i18n.js";
import { rangeOf } from "../schema.js";
import { api, state, subscribe } from "../store.js";
import { agentModelsField } from "./agent_models.js";
import { formKit, liveForm, schemaSpecs } from "./form_kit.js";
import { webhookSecretField } from "./webhook_secret.js";

register({  // key: [English, Turkish]
  "settings.title": ["Settings", "Ayarlar"],
  "settings.intro": ["These apply to the whole board and every project.", "Bunlar tüm pano ve her proje için geçerlidir."],
  "settings.group.board": ["Board", "Pano"],
  "settings.group.tasks": ["New tasks", "Yeni görevler"],
  "settings.group.agents": ["Agents and cost", "Ajanlar ve maliyet"],
  "settings.group.sourceHost": ["Source host", "Kaynak barındırma"],
  "settings.group.other": ["Other", "Diğer"],
  "settings.gitHostToken": ["Source-host token", "Kaynak barındırma belirteci"],
  "settings.gitHostToken.set": ["Source-host token: set", "Kaynak barındırma belirteci: ayarlı"],
  "settings.gitHostToken.notSet": ["Source-host token: not set — pull requests and issue sync need TASKBOARD_GIT_HOST_TOKEN (or GITHUB_TOKEN) in the board's environment.", "Kaynak barındırma belirteci: ayarlı değil — çekme istekleri ve konu eşitleme, panonun ortamında TASKBOARD_GIT_HOST_TOKEN (ya da GITHUB_TOKEN) ister."],
  "settings.language": ["Language", "Dil"],
  "settings.confirmBeforeDelete": ["Ask before deleting", "Silmeden önce sor"],
  "settings.soundEnabled": ["Play a sound when a task completes", "Bir görev bitince ses çal"],
  "settings.autoOpenTerminal": ["Open the log panel when a task starts", "Bir görev başlayınca kayıt panelini aç"],
  "settings.defaultModel": ["Default model", "Varsayılan model"],
  "settings.defaultEffort": ["Default thinking effort", "Varsayılan düşünme düzeyi"],
  "settings.defaults.help": ["Used for new tasks unless a template of the task's type says otherwise.", "Görevin türüne ait bir şablon başkasını söylemedikçe yeni görevlerde kullanılır."],
  "settings.maxPreviews": ["Previews at once", "Aynı anda önizleme"],
  "settings.maxPreviews.help": ["At most this many task previews run at once; 0 = none ({min} to {max}).", "Aynı anda en çok bu kadar görev önizlemesi çalışır; 0 = hiç ({min} ile {max} arası)."],
  "settings.previewIdleMinutes": ["Stop an unused preview after (minutes)", "Kullanılmayan önizlemeyi durdur (dakika)"],
  "settings.previewIdleMinutes.help": ["A preview nobody opened a page of for this long stops ({min} to {max}).", "Bu süre boyunca kimsenin sayfasını açmadığı önizleme durur ({min} ile {max} arası)."],
  "settings.agentIdleTimeoutMinutes": ["Idle timeout (minutes)", "Boşta kalma süresi sınırı (dakika)"],
  "settings.agentIdleTimeoutMinutes.help": ["Stop a run that printed nothing for this long; 0 = off ({min} to {max}).", "Bu süre boyunca hiçbir şey yazmayan çalışmayı durdur; 0 = kapalı ({min} ile {max} arası)."],
  "settings.dailyCostLimit": ["Daily cost limit (USD)", "Günlük maliyet sınırı (USD)"],
  "settings.dailyCostLimit.help": ["When today's cost reaches it, the queue starts nothing new. Empty = no limit.", "Bugünkü maliyet buna ulaşınca kuyruk yeni bir şey başlatmaz. Boş = sınır yok."],
  "settings.logRetentionDays": ["Keep agent logs (days)", "Ajan kayıtlarını sakla (gün)"],
  "settings.logRetentionDays.help": ["Older logs are deleted. Empty = keep forever.", "Daha eski kayıtlar silinir. Boş = sonsuza dek sakla."],
  "settings.agentModels": ["Models of each agent", "Her ajanın modelleri"],
  "settings.agentModels.help": ["The model name each agent CLI is given for a tier. Empty = the board's built-in choice for that agent and tier.", "Her ajan CLI'sine bir düzey için verilen model adı. Boş = panonun o ajan ve düzey için yerleşik seçimi."],
  "settings.notifications": ["Notifications", "Bildirimler"],
  "settings.notifications.help": ["Push notifications on your phone or this computer: which events, which devices.", "Telefonunuza ya da bu bilgisayara push bildirimleri: hangi olaylar, hangi cihazlar."],
  "settings.notifications.open": ["Set up notifications", "Bildirimleri ayarla"],
  "settings.hosts": ["Hosts", "Makineler"],
  "settings.hosts.help": ["Other machines a project's agents can run on, reached over SSH.", "Bir projenin ajanlarının çalışabileceği, SSH ile ulaşılan başka makineler."],
  "settings.hosts.open": ["Manage hosts", "Makineleri yönet"],
  "settings.tokens": ["Personal tokens", "Kişisel belirteçler"],
  "settings.tokens.help": ["Let a script, a CI job or another program use the board's API, within the scopes you give it.", "Bir betiğin, bir CI işinin ya da başka bir programın panonun API'sini verdiğiniz kapsamlar içinde kullanmasını sağlayın."],
  "settings.tokens.open": ["Open Personal tokens", "Kişisel belirteçleri aç"],
  "settings.account": ["Session", "Oturum"],
  "settings.account.help": ["On a board with a token, this ends the session in this browser.", "Belirteçli bir panoda bu, bu tarayıcıdaki oturumu kapatır."],
  "settings.logout": ["Log out", "Çıkış yap"],
  "settings.loadFailed": ["The settings could not be loaded: {error}", "Ayarlar yüklenemedi: {error}"],
});

/** "Source-host token: set" or "not set — ..." in the paragraph p. */
function paintToken(p, set) {
  p.className = set ? "secret-state" : "secret-state warn-text";
  p.textContent = t(set ? "settings.gitHostToken.set" : "settings.gitHostToken.notSet");
}

/** hasGitHostToken: read-only (the board's environment sets it), said in words, never sent. */
const gitHostTokenField = {
  kind: "custom",
  custom: {
    toRaw: (value) => Boolean(value),
    fromRaw: () => ({ omit: true }),
    render(spec, raw) {
      const text = h("p", { "data-testid": "git-host-token" });
      paintToken(text, raw[spec.key]);
      return { element: h("div", { class: "field", "data-field": spec.key }, text), controls: [] };
    },
    show: (parts, set) => paintToken(parts.element.firstChild, set),
  },
};

/** Language names are written in their own language. */
const LANGUAGE_NAMES = { en: "English", tr: "Türkçe" };
const lbl = (key) => () => t(key);

/**
 * The settings the board knows, in display order with their group; their values and limits
 * come from the server's Settings schema (a write-only one's from its PUT body's).
 */
const knownSpecs = () => [...schemaSpecs("Settings", [
  { key: "language", group: "board", kind: "select", optionLabel: (v) => LANGUAGE_NAMES[v] || v,
    label: lbl("settings.language") },
  { key: "confirmBeforeDelete", group: "board", kind: "bool", label: lbl("settings.confirmBeforeDelete") },
  { key: "soundEnabled", group: "board", kind: "bool", label: lbl("settings.soundEnabled") },
  { key: "autoOpenTerminal", group: "board", kind: "bool", label: lbl("settings.autoOpenTerminal") },
  { key: "defaultModel", group: "tasks", kind: "select",
    optionLabel: (v) => t(`model.${v}`), label: lbl("settings.defaultModel"), help: lbl("settings.defaults.help") },
  { key: "defaultEffort", group: "tasks", kind: "select",
    optionLabel: (v) => t(`effort.${v}`), label: lbl("settings.defaultEffort") },
  { key: "agentIdleTimeoutMinutes", group: "agents", kind: "int", label: lbl("settings.agentIdleTimeoutMinutes"),
    help: () => t("settings.agentIdleTimeoutMinutes.help", rangeOf("Settings", "agentIdleTimeoutMinutes")) },
  { key: "maxPreviews", group: "tasks", kind: "int", label: lbl("settings.maxPreviews"),
    help: () => t("settings.maxPreviews.help", rangeOf("Settings", "maxPreviews")) },
  { key: "previewIdleMinutes", group: "tasks", kind: "int", label: lbl("settings.previewIdleMinutes"),
    help: () => t("settings.previewIdleMinutes.help", rangeOf("Settings", "previewIdleMinutes")) },
  { key: "dailyCostLimit", group: "agents", kind: "number", nullable: true,
    label: lbl("settings.dailyCostLimit"), help: lbl("settings.dailyCostLimit.help"), attrs: { step: "0.01" } },
  { key: "logRetentionDays", group: "agents", kind: "int", nullable: true,
    label: lbl("settings.logRetentionDays"), help: lbl("settings.logRetentionDays.help") },
  { key: "agentModels", group: "agents", ...agentModelsField, label: lbl("settings.agentModels"),
    help: lbl("settings.agentModels.help") },
]), { key: "hasGitHostToken", group: "sourceHost", ...gitHostTokenField, label: lbl("settings.gitHostToken") },
{ key: "gitHostWebhookSecret", group: "sourceHost", ...webhookSecretField, label: lbl("whsecret.label") }];
const GROUPS = ["board", "tasks", "agents", "sourceHost", "other"];

/** The write-only settings: never in the server's answer, their fields start empty again. */
const blankSecrets = (settings) => ({ ...settings, gitHostWebhookSecret: null });

/**
 * Specs for every field of settings: the known ones (a write-only one when the server
 * answers the read-only field it covers), then the others by JSON type.
 */
function specsFor(settings) {
  const known = knownSpecs().filter((spec) => spec.key in settings || spec.covers?.some((key) => key in settings));
  const shown = (key) => known.some((spec) => spec.key === key || spec.covers?.includes(key));
  const others = Object.keys(settings).filter((key) => !shown(key)).map((key) => {
    const value = settings[key];
    const kind = typeof value === "boolean" ? "bool" : typeof value === "number" ? "number" : "text";
    return { key, group: "other", kind, nullable: value === null, label: () => key };
  });
  return [...known, ...others];
}

/** @param {HTMLElement} root */
export function mount(root) {
  let kit = null;
  let form = null;
  let keys = "";
  let hasSecret;  // whether the webhook secret was set when its field was drawn
  const intro = h("div", { class: "page-head" });
  const body = h("div", { class: "settings-form" });
  const notifications = h("section", { class: "card-panel account", "data-testid": "settings-notifications" });
  const hosts = h("section", { class: "card-panel account", "data-testid": "settings-hosts" });
  const tokens = h("section", { class: "card-panel account", "data-testid": "settings-tokens" });
  const account = h("section", { class: "card-panel account" });
  root.append(h("section", { class: "settings-view" }, intro, notifications, hosts, tokens, body, account));

  function build() {
    return GROUPS.map((group) => {
      const rows = kit.specs.filter((spec) => spec.group === group).map((spec) => kit.row(spec.key));
      return rows.length ? h("fieldset", { class: "group", "data-group": group },
        h("legend", {}, t(`settings.group.${group}`)), rows) : null;
    }).filter(Boolean);
  }

  function renderForm() {
    const settings = state.settings;
    if (!settings) {
      body.replaceChildren(h("p", { class: "muted" }, t("common.loading")));
      return;
    }
    if (form) form.destroy();
    hasSecret = settings.hasGitHostWebhookSecret;
    kit = formKit(specsFor(settings), settings);
    keys = Object.keys(settings).sort().join();
    form = liveForm({
      kit, build, onlyDirty: true,
      submitLabel: () => t("common.save"),
      onSubmit: async (changes) => {
        if (!Object.keys(changes).length) {
          toast(t("form.noChanges"));
          return;
        }
        const saved = await api.updateSettings(changes);
        state.settings = saved;
        kit.reset(blankSecrets(saved));
        if (saved.hasGitHostWebhookSecret !== hasSecret || "gitHostWebhookSecret" in changes) {
          hasSecret = saved.hasGitHostWebhookSecret;
          form.rerender();  // "set" or "not set" now, and the field empty
        }
        setLanguage(saved.language || "en");
        toast(t("common.saved"));
      },
    });
    body.replaceChildren(form.element);
  }

  async function logout() {
    try {
      await api.logout();
    } catch { /* without a session there is nothing to end */ }
    location.assign("/login");
  }

  function renderChrome() {
    intro.replaceChildren(h("div", {}, h("h1", {}, t("settings.title")), h("p", { class: "muted intro" }, t("settings.intro"))));
    notifications.replaceChildren(h("h2", {}, t("settings.notifications")),
      h("p", { class: "muted" }, t("settings.notifications.help")),
      h("a", { class: "button", href: "#/settings/notifications" }, t("settings.notifications.open")));
    hosts.replaceChildren(h("h2", {}, t("settings.hosts")), h("p", { class: "muted" }, t("settings.hosts.help")),
      h("a", { class: "button", href: "#/settings/hosts" }, t("settings.hosts.open")));
    tokens.replaceChildren(h("h2", {}, t("settings.tokens")), h("p", { class: "muted" }, t("settings.tokens.help")),
      h("a", { class: "button", href: "#/settings/tokens" }, t("settings.tokens.open")));
    account.replaceChildren(h("h2", {}, t("settings.account")), h("p", { class: "muted" }, t("settings.account.help")),
      h("div", { class: "actions start" }, h("button", { type: "button", onclick: logout, "data-testid": "logout" },
        t("settings.logout"))));
  }

  const offStore = subscribe((s, event) => {
    if (event !== "settings:updated" && event !== "resync") return;
    if (!kit || Object.keys(s.settings || {}).sort().join() !== keys) {
      renderForm();
      return;
    }
    kit.set(s.settings);
    if (s.settings.hasGitHostWebhookSecret !== hasSecret) {  // set or cleared elsewhere
      hasSecret = s.settings.hasGitHostWebhookSecret;
      form.rerender();
    }
  });
  const offLanguage = onLanguageChange(renderChrome);

  renderChrome();
  renderForm();
  if (!state.settings) {
    api.settings().then((settings) => {
      state.settings = settings;
      renderForm();
    }).catch((error) => {
      body.replaceChildren(h("p", { class: "error" }, t("settings.loadFailed", { error: error.message })));
    });
  }
  return () => {
    offStore();
    offLanguage();
    if (form) form.destroy();
  };
}
