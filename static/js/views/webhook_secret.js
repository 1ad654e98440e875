// The settings' source-host webhook secret (design §16): a write-only field of the settings
// form. The server never returns the secret, only whether one is set
// (hasGitHostWebhookSecret); the form says which, takes a new one or clears it, and tells
// what to configure on the source host (the URL of this board's webhook route, its content
// type and events; that a board opened at a loopback address needs a public one first).

import { h } from "../dom.js";
import { register, t } from "../i18n.js";
import { maxLengthOf } from "../schema.js";
import { state } from "../store.js";

register({  // key: [English, Turkish]
  "whsecret.label": ["Webhook secret", "Web kancası gizli anahtarı"],
  "whsecret.newLabel": ["New webhook secret", "Yeni web kancası gizli anahtarı"],
  "whsecret.set": ["Webhook secret: set", "Web kancası gizli anahtarı: ayarlı"],
  "whsecret.notSet": ["Webhook secret: not set — the board refuses every webhook call and looks at open pull requests on its own schedule.", "Web kancası gizli anahtarı: ayarlı değil — pano her web kancası çağrısını reddeder ve açık çekme isteklerine kendi aralığında bakar."],
  "whsecret.remove": ["Remove the secret", "Gizli anahtarı kaldır"],
  "whsecret.help": ["So that the source host tells the board at once when a pull request changes, add a webhook there with the payload URL {url}, content type {type}, this secret, and the events “Pull requests”, “Check runs”, “Statuses”, “Pull request reviews”, “Pull request review comments” and “Issue comments”. Write-only: it is never shown again.", "Bir çekme isteği değişince kaynak barındırmanın panoya hemen haber vermesi için orada şu ayarlarla bir web kancası ekleyin: yük URL'si {url}, içerik türü {type}, bu gizli anahtar ve “Pull requests”, “Check runs”, “Statuses”, “Pull request reviews”, “Pull request review comments” ve “Issue comments” olayları (kaynak barındırmadaki adlarıyla). Yalnızca yazılır: bir daha gösterilmez."],
  "whsecret.loopback": ["This page is opened at a loopback address, which the source host cannot reach: give the board a public address (e.g. through a reverse proxy or a tunnel), use it in the payload URL, and add its host name to TASKBOARD_ALLOWED_HOSTS.", "Bu sayfa, kaynak barındırmanın ulaşamadığı bir geri döngü adresinden açıldı: panoya herkese açık bir adres verin (ör. bir ters vekil sunucu ya da tünel ile), yük URL'sinde onu kullanın ve makine adını TASKBOARD_ALLOWED_HOSTS'a ekleyin."],
  "whsecret.keep": ["Leave it empty to keep the current one.", "Mevcut anahtarı korumak için boş bırakın."],
});

/** The board's webhook route for the source host, at the address this page was opened from. */
export const webhookUrl = () => `${location.origin}/api/git-host/webhook`;

/** Whether this page is opened at a loopback address (which no source host reaches). */
const onLoopback = () => /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/.test(location.hostname);

/** A text with {name} placeholders filled with nodes (or strings). */
function fill(text, values) {
  return text.split(/(\{\w+\})/).map((part) => {
    const name = /^\{(\w+)\}$/.exec(part)?.[1];
    return name && name in values ? values[name] : part;
  }).filter((part) => part !== "");
}

/** Whether the server says a secret is set. */
const isSet = () => Boolean(state.settings?.hasGitHostWebhookSecret);

/**
 * The form kit's spec (without key, group and label) of gitHostWebhookSecret: raw is {text,
 * remove}; empty sends nothing, "remove" sends null. `covers` names the read-only field it
 * shows, which the form must not show again.
 */
export const webhookSecretField = {
  kind: "custom",
  covers: ["hasGitHostWebhookSecret"],
  help: () => [...fill(t("whsecret.help"), { url: h("code", { "data-testid": "webhook-url" }, webhookUrl()),
    type: h("code", {}, "application/json") }), isSet() ? ` ${t("whsecret.keep")}` : "",
  onLoopback() ? [" ", h("span", { class: "warn-text", "data-testid": "webhook-loopback" }, t("whsecret.loopback"))] : ""],
  custom: {
    toRaw: () => ({ text: "", remove: false }),
    fromRaw: (raw) => (raw.remove ? { value: null } : raw.text ? { value: raw.text } : { omit: true }),
    render(spec, raw, ids, changed) {
      const value = raw[spec.key];
      const set = isSet();
      const input = h("input", { type: "password", id: ids.id, "data-key": spec.key, autocomplete: "new-password",
        spellcheck: "false", maxlength: maxLengthOf("api_update_settings_body", spec.key), "aria-describedby": ids.described,
        disabled: value.remove });
      input.value = value.text;
      input.addEventListener("input", () => { raw[spec.key] = { ...raw[spec.key], text: input.value }; changed(); });
      let remove = null;
      if (set) {
        const box = h("input", { type: "checkbox", "data-key": `${spec.key}:remove`, checked: value.remove });
        box.addEventListener("change", () => {
          raw[spec.key] = { text: box.checked ? "" : input.value, remove: box.checked };
          input.disabled = box.checked;
          if (box.checked) input.value = "";
          changed();
        });
        remove = h("label", { class: "inline-check" }, box, h("span", {}, t("whsecret.remove")));
      }
      const element = h("div", { class: "field", "data-field": spec.key },
        h("p", { class: set ? "secret-state" : "secret-state muted", "data-testid": "webhook-secret-state" },
          t(set ? "whsecret.set" : "whsecret.notSet")),
        h("label", { for: ids.id }, t(set ? "whsecret.newLabel" : "whsecret.label")), input, remove, ids.help, ids.error);
      return { element, controls: [input] };
    },
    show(parts, value) {
      parts.controls[0].value = value.text;
      parts.controls[0].disabled = value.remove;
    },
  },
};
