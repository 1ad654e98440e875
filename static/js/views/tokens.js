// Settings → Personal tokens (#/settings/tokens, design §19): bearers for scripts, CI jobs and
// other programs, each within its scopes (read, write, approve). The list (name, scopes,
// created, expires, last used), a form for a new one, whose secret the server answers once:
// shown here with a Copy button until dismissed, never again; and revoke after asking. No
// event tells about a token (nor about its use): the list is read again when the page comes
// back into view.

import { confirmDialog, h, toast } from "../dom.js";
import { dateTime, onLanguageChange, register, relative, t } from "../i18n.js";
import { enumOf } from "../schema.js";
import { api, onEvent } from "../store.js";
import { rerender } from "./common.js";
import { formKit, liveForm, schemaSpecs } from "./form_kit.js";

register({  // key: [English, Turkish]
  "tokens.title": ["Personal tokens", "Kişisel belirteçler"],
  "tokens.intro": ["A token lets a script, a CI job or another program use the board's API (Authorization: Bearer …) within its scopes. The board's settings, hosts, tokens and webhooks stay yours.", "Bir belirteç; bir betiğin, bir CI işinin ya da başka bir programın panonun API'sini (Authorization: Bearer …) kapsamları içinde kullanmasını sağlar. Panonun ayarları, makineleri, belirteçleri ve web kancaları yalnızca sizindir."],
  "tokens.back": ["All settings", "Tüm ayarlar"],
  "tokens.new": ["New token", "Yeni belirteç"],
  "tokens.create": ["Create token", "Belirteç oluştur"],
  "tokens.name": ["Name", "Ad"],
  "tokens.name.help": ["What it is for, e.g. “nightly CI”; unique. Approvals it answers are signed with it.", "Ne için olduğu, ör. “gece CI”; benzersiz. Yanıtladığı onaylar bu adla imzalanır."],
  "tokens.name.bad": ["Letters, digits, spaces and . _ - @ only.", "Yalnızca harf, rakam, boşluk ve . _ - @."],
  "tokens.scopes": ["Scopes", "Kapsamlar"],
  "tokens.scope.read": ["GETs and live events", "GET istekleri ve canlı olaylar"],
  "tokens.scope.write": ["create, change, move, start and stop tasks; send messages", "görev oluşturma, değiştirme, taşıma, başlatma ve durdurma; ileti gönderme"],
  "tokens.scope.approve": ["answer approvals and questions", "onayları ve soruları yanıtlama"],
  "tokens.expiresAt": ["Expires on", "Bitiş tarihi"],
  "tokens.expiresAt.help": ["Optional: it stops working at 00:00 of that day, your time. Empty: it never expires.", "İsteğe bağlı: o gün saat 00:00'da (sizin saatinizle) çalışmayı bırakır. Boş: hiç sona ermez."],
  "tokens.list": ["Tokens", "Belirteçler"],
  "tokens.empty": ["No tokens yet.", "Henüz belirteç yok."],
  "tokens.loadFailed": ["The tokens could not be loaded: {error}", "Belirteçler yüklenemedi: {error}"],
  "tokens.created": ["Created", "Oluşturuldu"],
  "tokens.expires": ["Expires", "Bitiş"],
  "tokens.lastUsed": ["Last used", "Son kullanım"],
  "tokens.never": ["never", "hiç"],
  "tokens.expired": ["expired", "süresi doldu"],
  "tokens.at": ["{time} ({relative})", "{time} ({relative})"],
  "tokens.revoke": ["Revoke", "İptal et"],
  "tokens.revokeConfirm": ["Revoke {name}? Programs that use it are refused (401) from now on.", "{name} iptal edilsin mi? Onu kullanan programlar bundan sonra reddedilir (401)."],
  "tokens.revoked": ["Token {name} revoked", "{name} belirteci iptal edildi"],
  "tokens.secretTitle": ["Your new token {name}", "Yeni belirteciniz: {name}"],
  "tokens.secretOnce": ["Copy it now and keep it somewhere safe: it is not shown again. The board keeps only a hash of it.", "Şimdi kopyalayıp güvenli bir yerde saklayın: bir daha gösterilmez. Pano yalnızca özetini tutar."],
  "tokens.secretLabel": ["Token", "Belirteç"],
  "tokens.copy": ["Copy", "Kopyala"],
  "tokens.copied": ["Copied.", "Kopyalandı."],
  "tokens.copyByHand": ["The browser did not let the board copy: select the token and copy it yourself.", "Tarayıcı panonun kopyalamasına izin vermedi: belirteci seçip kendiniz kopyalayın."],
  "tokens.done": ["I have copied it", "Kopyaladım"],
  "tokens.use": ["Use it as: curl -H \"Authorization: Bearer <token>\" {url}", "Şöyle kullanın: curl -H \"Authorization: Bearer <token>\" {url}"],
});

/** The form's fields; the scopes, the name's pattern and length from the server's Token schema. */
const specs = () => schemaSpecs("Token", [
  { key: "name", kind: "text", required: true, patternKey: "tokens.name.bad", label: () => t("tokens.name"),
    help: () => t("tokens.name.help") },
  { key: "scopes", kind: "checks", required: true, optionLabel: scopeLabel, label: () => t("tokens.scopes") },
  { key: "expiresAt", kind: "text", omitEmpty: true, label: () => t("tokens.expiresAt"),
    help: () => t("tokens.expiresAt.help"), attrs: { type: "date", min: dayAfter(new Date()) } },
]);

/** A scope and what it allows, in one line. */
function scopeLabel(scope) {
  return [h("strong", { class: "mono" }, scope), ` — ${t(`tokens.scope.${scope}`)}`];
}

/** What a new token starts with: no name, the first scope (read), no expiry. */
const newToken = () => ({ name: "", scopes: enumOf("Token", "scopes").slice(0, 1), expiresAt: null });

/** "2031-01-02": the local date of the day after date (the earliest expiry the picker offers). */
function dayAfter(date) {
  const next = new Date(date.getFullYear(), date.getMonth(), date.getDate() + 1);
  return `${next.getFullYear()}-${String(next.getMonth() + 1).padStart(2, "0")}-${String(next.getDate()).padStart(2, "0")}`;
}

/** A date of the form ("2031-01-02") as the API takes it: 00:00 of that day here, in UTC. */
function expiryOf(date) {
  const at = new Date(`${date}T00:00`);
  return Number.isNaN(at.getTime()) ? date : at.toISOString();  // not a date: the server says why
}

/** "12 Nov 14:03 (3 min ago)". */
const when = (iso) => t("tokens.at", { time: dateTime(iso), relative: relative(iso) });

/** Copy text; the browser may refuse (no clipboard without a secure page): then select it. */
async function copyText(text, input) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    input.focus();
    input.select();
    try {
      return document.execCommand("copy");
    } catch {
      return false;
    }
  }
}

/** A row of a token's facts: [i18n key of the label, value, data-testid of the value]. */
const fact = ([key, value, testid]) => [h("dt", {}, t(key)), h("dd", { "data-testid": testid }, value)];

/** One listed token. */
function tokenItem(token, page) {
  const expired = token.expiresAt && new Date(token.expiresAt).getTime() <= Date.now();
  return h("article", { class: `item card-panel token${expired ? " disabled" : ""}`, "data-token": String(token.id),
    "aria-labelledby": `token-name-${token.id}` },
  h("header", { class: "item-head" },
    h("h3", { id: `token-name-${token.id}` }, token.name),
    h("span", { class: "chips", "data-testid": "token-scopes" },
      token.scopes.map((scope) => h("span", { class: "chip static mono", title: t(`tokens.scope.${scope}`) }, scope))),
    h("span", { class: "item-actions" }, h("button", { type: "button", class: "danger", "data-key": `revoke-${token.id}`,
      "aria-label": `${t("tokens.revoke")}: ${token.name}`, onclick: () => page.revoke(token) }, t("tokens.revoke")))),
  h("dl", { class: "field-list token-facts" }, [
    ["tokens.created", when(token.createdAt), "token-created"],
    ["tokens.expires", token.expiresAt ? [when(token.expiresAt), expired ? [" — ", h("strong", { class: "warn-text" },
      t("tokens.expired"))] : null] : t("tokens.never"), "token-expires"],
    ["tokens.lastUsed", token.lastUsedAt ? when(token.lastUsedAt) : t("tokens.never"), "token-last-used"],
  ].map(fact)));
}

/** @param {HTMLElement} root */
export function mount(root) {
  let tokens = null;       // the list (GET /api/tokens), null until read
  let loadError = "";
  let fresh = null;        // {name, secret, copied}: the token just made, until dismissed
  let reads = 0;           // reads started: only the latest one's answer is kept
  const kit = formKit(specs(), newToken());
  const head = h("header", { class: "page-head" });
  const secret = h("section", { class: "card-panel token-secret", "data-testid": "token-secret-panel", hidden: true,
    "aria-live": "polite" });
  const create = h("section", { class: "card-panel token-new" });
  const listHead = h("h2");
  const list = h("div", { class: "item-list", "data-testid": "token-list" });
  root.append(h("section", { class: "settings-view tokens-view" }, head, secret, create,
    h("section", { class: "token-list" }, listHead, list)));

  const form = liveForm({
    kit,
    build: () => [kit.row("name"), kit.row("scopes"), kit.row("expiresAt")],
    submitLabel: () => t("tokens.create"),
    onSubmit: async (body) => {
      if (body.expiresAt) body.expiresAt = expiryOf(body.expiresAt);
      const made = await api.createToken(body);
      const { secret: text, ...token } = made;
      fresh = { name: token.name, secret: text, copied: null };
      tokens = [...(tokens || []).filter((known) => known.id !== token.id), token];
      kit.reset(newToken());
      form.rerender();
      renderSecret();
      renderList();
      secret.querySelector("input").focus();
    },
  });

  const page = {
    async revoke(token) {
      const sure = await confirmDialog(t("tokens.revokeConfirm", { name: token.name }),
        { ok: t("tokens.revoke"), cancel: t("common.cancel"), danger: true });
      if (!sure) return;
      try {
        await api.deleteToken(token.id);
        tokens = (tokens || []).filter((known) => known.id !== token.id);
        if (fresh && fresh.name === token.name) fresh = null;
        renderSecret();
        renderList();
        toast(t("tokens.revoked", { name: token.name }));
      } catch (error) {
        toast(error.message, "error");
        load();
      }
    },
  };

  async function load() {
    const mine = ++reads;
    try {
      const answer = await api.tokens();
      if (mine !== reads) return;
      tokens = answer;
      loadError = "";
    } catch (error) {
      if (mine !== reads) return;
      loadError = error.message;
    }
    renderList();
  }

  function renderSecret() {
    secret.hidden = !fresh;
    if (!fresh) {
      secret.replaceChildren();
      return;
    }
    const input = h("input", { type: "text", class: "mono", readonly: true, value: fresh.secret,
      "aria-label": t("tokens.secretLabel"), "data-testid": "token-secret", spellcheck: "false", autocomplete: "off", onfocus: (e) => e.target.select() });
    const copy = h("button", { type: "button", class: "primary", "data-key": "copy-secret", onclick: async () => {
      fresh.copied = await copyText(fresh.secret, input);
      renderSecret();
      secret.querySelector("[data-key=copy-secret]").focus();
    } }, t("tokens.copy"));
    const status = fresh.copied === null ? "" : t(fresh.copied ? "tokens.copied" : "tokens.copyByHand");
    secret.replaceChildren(h("h2", {}, t("tokens.secretTitle", { name: fresh.name })),
      h("p", { class: "warn-text" }, t("tokens.secretOnce")),
      h("div", { class: "secret-row" }, input, copy),
      h("p", { class: fresh.copied === false ? "error" : "push-result ok", role: "status", "data-testid": "token-copied" },
        status),
      h("p", { class: "muted help" }, t("tokens.use", { url: `${location.origin}/api/projects` })),
      h("div", { class: "actions start" }, h("button", { type: "button", "data-key": "secret-done",
        onclick: () => { fresh = null; renderSecret(); } }, t("tokens.done"))));
  }

  function renderList() {
    if (tokens === null) {
      rerender(list, loadError ? h("p", { class: "error" }, t("tokens.loadFailed", { error: loadError }))
        : h("p", { class: "muted" }, t("common.loading")));
    } else if (!tokens.length) {
      rerender(list, h("p", { class: "empty" }, t("tokens.empty")));
    } else {
      rerender(list, [...tokens].sort((a, b) => a.id - b.id).map((token) => tokenItem(token, page)));
    }
  }

  function render() {
    head.replaceChildren(h("div", {}, h("h1", {}, t("tokens.title")), h("p", { class: "muted intro" }, t("tokens.intro")),
      h("a", { href: "#/settings" }, t("tokens.back"))));
    create.replaceChildren(h("h2", {}, t("tokens.new")), form.element);
    listHead.textContent = t("tokens.list");
    renderSecret();
    renderList();
  }

  // a token's use tells no one: read the list again when the page is looked at again
  const again = () => { if (document.visibilityState === "visible") load(); };
  window.addEventListener("focus", again);
  document.addEventListener("visibilitychange", again);
  const offEvent = onEvent(({ event }) => { if (event === "resync") load(); });
  const offLanguage = onLanguageChange(render);
  render();
  load();
  return () => {
    window.removeEventListener("focus", again);
    document.removeEventListener("visibilitychange", again);
    offEvent();
    offLanguage();
    form.destroy();
  };
}
