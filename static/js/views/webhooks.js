// Webhooks of a project (#/projects/:projectId/webhooks): list with an enabled switch, a
// Test button and the delivery history of each hook (live from webhook:delivery), create
// and edit in a dialog (the secret is write-only), delete; kept current by webhook:* events.

import { h } from "../dom.js";
import { dateTime, register, t } from "../i18n.js";
import { enumOf } from "../schema.js";
import { api, onEvent } from "../store.js";
import { schemaSpecs } from "./form_kit.js";
import { enabledSwitch, mountItemList, saveEnabled } from "./item_list.js";

register({  // key: [English, Turkish]
  "webhooks.title": ["Webhooks", "Web kancaları"],
  "webhooks.intro": ["Tell a chat channel or any URL about task events. Failed deliveries are retried twice; every attempt is listed below its hook.", "Görev olaylarını bir sohbet kanalına ya da herhangi bir URL'ye bildirin. Başarısız gönderimler iki kez yeniden denenir; her deneme kancasının altında listelenir."],
  "webhooks.new": ["New webhook", "Yeni web kancası"],
  "webhooks.newTitle": ["New webhook", "Yeni web kancası"],
  "webhooks.editTitle": ["Edit webhook", "Web kancasını düzenle"],
  "webhooks.empty": ["No webhooks yet.", "Henüz web kancası yok."],
  "webhooks.platform": ["Platform", "Platform"],
  "webhooks.url": ["URL", "URL"],
  "webhooks.url.bad": ["Enter an http:// or https:// URL.", "http:// ya da https:// ile başlayan bir URL girin."],
  "webhooks.events": ["Events", "Olaylar"],
  "webhooks.enabled": ["Enabled", "Etkin"],
  "webhooks.secret": ["Secret", "Gizli anahtar"],
  "webhooks.newSecret": ["New secret", "Yeni gizli anahtar"],
  "webhooks.secret.help": ["Signs each payload (X-Taskboard-Signature: sha256=…). Write-only: it is never shown again.", "Her yükü imzalar (X-Taskboard-Signature: sha256=…). Yalnızca yazılır: bir daha gösterilmez."],
  "webhooks.secret.keep": ["Leave empty to keep the current one.", "Mevcut anahtarı korumak için boş bırakın."],
  "webhooks.removeSecret": ["Remove the secret", "Gizli anahtarı kaldır"],
  "webhooks.secretSet": ["Secret: set", "Gizli anahtar: ayarlı"],
  "webhooks.secretNotSet": ["Secret: not set", "Gizli anahtar: ayarlı değil"],
  "webhooks.test": ["Test", "Dene"],
  "webhooks.testing": ["Sending a test…", "Deneme gönderiliyor…"],
  "webhooks.testOk": ["Test delivered: HTTP {status}", "Deneme iletildi: HTTP {status}"],
  "webhooks.testFailed": ["Test failed: HTTP {status}", "Deneme başarısız: HTTP {status}"],
  "webhooks.testUnreachable": ["Test failed: the target could not be reached", "Deneme başarısız: hedefe ulaşılamadı"],
  "webhooks.history": ["Delivery history ({n})", "Gönderim geçmişi ({n})"],
  "webhooks.noDeliveries": ["Nothing sent yet.", "Henüz bir şey gönderilmedi."],
  "webhooks.lastDelivery": ["Last delivery {when}:", "Son gönderim {when}:"],
  "webhooks.col.time": ["Time", "Zaman"],
  "webhooks.col.event": ["Event", "Olay"],
  "webhooks.col.attempt": ["Attempt", "Deneme"],
  "webhooks.col.status": ["HTTP", "HTTP"],
  "webhooks.col.result": ["Result", "Sonuç"],
  "webhooks.col.duration": ["Duration", "Süre"],
  "webhooks.col.error": ["Error", "Hata"],
  "webhooks.ok": ["OK", "Başarılı"],
  "webhooks.failed": ["Failed", "Başarısız"],
  "webhooks.on": ["Webhook enabled", "Web kancası etkinleştirildi"],
  "webhooks.off": ["Webhook disabled", "Web kancası devre dışı bırakıldı"],
  "webhooks.deleted": ["Webhook deleted", "Web kancası silindi"],
  "webhooks.loadFailed": ["The webhooks could not be loaded: {error}", "Web kancaları yüklenemedi: {error}"],
  "webhooks.event.task:created": ["Task created", "Görev oluşturuldu"],
  "webhooks.event.task:started": ["Task started", "Görev başladı"],
  "webhooks.event.task:completed": ["Task completed (in testing)", "Görev bitti (testte)"],
  "webhooks.event.task:approved": ["Task approved (done)", "Görev onaylandı (tamamlandı)"],
  "webhooks.event.task:changes_requested": ["Changes requested", "Değişiklik istendi"],
  "webhooks.event.task:failed": ["Task failed", "Görev başarısız oldu"],
  "webhooks.event.task:merged": ["Pull request merged", "Çekme isteği birleştirildi"],
  "webhooks.event.task:needs_input": ["The agent needs you", "Ajan sizi bekliyor"],
  "webhooks.event.webhook:test": ["Test", "Deneme"],
  "webhooks.platform.custom": ["Custom (JSON)", "Özel (JSON)"],
});

/** Product names are not translated. */
const PLATFORM_NAMES = { platform_a: "Slack", platform_b: "Discord", platform_c: "Microsoft Teams" };
/** The events a new webhook is about, when the server offers them. */
const NEW_HOOK_EVENTS = ["task:completed", "task:failed"];
const COLUMNS = ["time", "event", "attempt", "status", "result", "duration", "error"];

const platformName = (p) => PLATFORM_NAMES[p] || t(`webhooks.platform.${p}`);
const eventName = (e) => (t(`webhooks.event.${e}`) === `webhooks.event.${e}` ? e : t(`webhooks.event.${e}`));
const okPill = (ok) => h("span", { class: ok ? "pill ok" : "pill failed" }, t(ok ? "webhooks.ok" : "webhooks.failed"));

/** The form's fields; platforms, events, the URL pattern and lengths from the server's schema. */
const specs = (hook) => schemaSpecs("api_create_webhook_body", [
  { key: "platform", kind: "select", optionLabel: platformName, label: () => t("webhooks.platform") },
  { key: "url", kind: "text", required: true, patternKey: "webhooks.url.bad", label: () => t("webhooks.url"),
    attrs: { class: "mono", inputmode: "url", placeholder: "https://", spellcheck: "false" } },
  { key: "events", kind: "checks", required: true, optionLabel: eventName, label: () => t("webhooks.events") },
  { key: "enabled", kind: "bool", label: () => t("webhooks.enabled") },
  { key: "secret", kind: "password", omitEmpty: true, skip: (raw) => raw.platform !== "custom",
    label: () => t("webhooks.secret"),
    help: () => (hook && hook.hasSecret ? `${t("webhooks.secret.help")} ${t("webhooks.secret.keep")}` : t("webhooks.secret.help")) },
]);

/** What a new webhook starts with. */
function newHook() {
  const events = enumOf("Webhook", "events");
  return { platform: enumOf("Webhook", "platform")[0], events: NEW_HOOK_EVENTS.filter((e) => events.includes(e)),
    enabled: true };
}

/** One line about a delivery or a test answer: {ok, status, error}. */
function outcome(result) {
  if (result.ok) return t("webhooks.testOk", { status: result.status });
  const head = result.status === null || result.status === undefined
    ? t("webhooks.testUnreachable") : t("webhooks.testFailed", { status: result.status });
  return result.error ? `${head} — ${result.error}` : head;
}

/** The form's state beyond the kit: "remove the secret" (kept across re-renders). */
function setupForm(kit) {
  const removeBox = h("input", { type: "checkbox", "data-key": "removeSecret" });
  const extra = { removeBox, removeChecked: false };
  removeBox.addEventListener("change", () => { extra.removeChecked = removeBox.checked; });
  kit.onInput((key, value) => {
    if (key === "platform") kit.rows.get("secret").element.hidden = value !== "custom";
  });
  return extra;
}

/** The secret's row: shown for custom hooks; when editing, whether one is set and "remove". */
function secretRow(kit, hook, extra) {
  const row = kit.row("secret");
  row.hidden = kit.raw.platform !== "custom";
  if (hook) {
    row.querySelector("label").textContent = t(hook.hasSecret ? "webhooks.newSecret" : "webhooks.secret");
    row.insertBefore(h("span", { class: "muted" }, t(hook.hasSecret ? "webhooks.secretSet" : "webhooks.secretNotSet")),
      row.querySelector("input"));
    extra.removeBox.checked = extra.removeChecked;
    if (hook.hasSecret) row.append(h("label", { class: "inline-check" }, extra.removeBox, h("span", {}, t("webhooks.removeSecret"))));
  }
  return row;
}

/** The delivery history of a hook, folded (open keeps which are unfolded). */
function history(hook, rows, open) {
  const cell = (value, cls) => h("td", cls ? { class: cls } : {}, value);
  const details = h("details", { class: "history", open: open.has(hook.id) },
    h("summary", { "data-key": `history-${hook.id}` }, t("webhooks.history", { n: rows.length })),
    rows.length ? h("div", { class: "table-wrap" }, h("table", { class: "deliveries" },
      h("thead", {}, h("tr", {}, COLUMNS.map((c) => h("th", { scope: "col" }, t(`webhooks.col.${c}`))))),
      h("tbody", {}, rows.map((d) => h("tr", { class: d.ok ? "ok" : "failed" },
        cell(h("time", { datetime: d.createdAt }, dateTime(d.createdAt)), "nowrap"),
        cell(eventName(d.event)), cell(String(d.attempt)),
        cell(d.status === null || d.status === undefined ? "—" : String(d.status)),
        cell(okPill(d.ok)),
        cell(d.durationMs === null || d.durationMs === undefined ? "" : `${d.durationMs} ms`, "nowrap"),
        cell(d.error || "", "error-cell")))))) : h("p", { class: "muted" }, t("webhooks.noDeliveries")));
  details.addEventListener("toggle", () => { if (details.open) open.add(hook.id); else open.delete(hook.id); });
  return details;
}

/** One listed hook: switch, Test/Edit/Delete, its events, the latest test and deliveries. */
function hookItem(hook, page, live) {
  const result = live.tests.get(hook.id);
  const rows = live.deliveries.get(hook.id);
  const last = (rows || [])[0];
  const toggle = (box) => saveEnabled(page, page.projectId, "webhooks", hook, box,
    (saved) => t(saved.enabled ? "webhooks.on" : "webhooks.off"));
  const remove = () => page.store.remove(hook, `${platformName(hook.platform)} ${hook.url}`, t("webhooks.deleted"));
  return h("article", { class: `item card-panel webhook${hook.enabled ? "" : " disabled"}`, "data-webhook": hook.id },
    h("header", { class: "item-head" },
      h("h3", {}, platformName(hook.platform)),
      enabledSwitch(hook, "webhooks", toggle),
      h("span", { class: "item-actions" },
        h("button", { type: "button", "data-key": `test-${hook.id}`, "aria-busy": result === "pending" ? "true" : null,
          onclick: () => live.test(hook) }, t("webhooks.test")),
        h("button", { type: "button", "data-key": `edit-${hook.id}`, onclick: () => page.openForm(hook) }, t("common.edit")),
        h("button", { type: "button", "data-key": `delete-${hook.id}`, onclick: remove }, t("common.delete")))),
    h("code", { class: "path url" }, hook.url),
    h("div", { class: "chips" }, hook.events.map((e) => h("span", { class: "chip static" }, eventName(e)))),
    hook.platform === "custom" ? h("p", { class: "muted secret-state" },
      t(hook.hasSecret ? "webhooks.secretSet" : "webhooks.secretNotSet")) : null,
    result ? h("p", { class: `test-result ${result === "pending" ? "pending" : result.ok ? "ok" : "failed"}`,
      role: "status", "data-testid": "test-result" },
    result === "pending" ? t("webhooks.testing") : outcome(result)) : null,
    last ? h("p", { class: "muted last" }, t("webhooks.lastDelivery", { when: dateTime(last.createdAt) }), " ",
      okPill(last.ok), ` ${eventName(last.event)}`) : null,
    rows ? history(hook, rows, live.open) : null);
}

/**
 * @param {HTMLElement} root
 * @param {{projectId: number}} params
 */
export function mount(root, { projectId }) {
  const live = {
    deliveries: new Map(),  // webhook id -> deliveries, newest first
    tests: new Map(),  // webhook id -> "pending" | {ok, status, error}
    open: new Set(),  // webhook ids whose history is unfolded
    async test(hook) {
      if (live.tests.get(hook.id) === "pending") return;
      live.tests.set(hook.id, "pending");
      page.renderList();
      try {
        live.tests.set(hook.id, await api.testWebhook(projectId, hook.id));
      } catch (error) {
        live.tests.set(hook.id, { ok: false, status: null, error: error.message });
      }
      page.renderList();
    },
  };
  async function loadDeliveries(id) {
    try {
      live.deliveries.set(id, await api.deliveries(projectId, id));
      page.renderList();
    } catch { /* the hook was deleted meanwhile: nothing to show */ }
  }
  const page = mountItemList(root, {
    projectId, kind: "webhooks", prefix: "webhook", specs, blank: newHook(),
    setup: setupForm,
    build: (kit, hook, extra) => [h("div", { class: "form-row" }, kit.row("platform"), kit.row("enabled")), kit.row("url"),
      kit.row("events"), secretRow(kit, hook, extra)],
    beforeSave: (hook, kit, body, extra) => {
      if (hook && extra.removeChecked && kit.raw.platform === "custom") body.secret = null;
    },
    onSaved: (saved) => { if (!live.deliveries.has(saved.id)) loadDeliveries(saved.id); },
    onChange: (event, data) => {
      if (event === "loaded") for (const id of page.store.items.keys()) loadDeliveries(id);
      else if (event === "webhook:created" && data) loadDeliveries(data.id);
    },
    item: (hook) => hookItem(hook, page, live),
    order: () => [...page.store.items.values()].sort((a, b) => a.id - b.id),
  });
  const offEvent = onEvent(({ event, data }) => {
    if (event !== "webhook:delivery" || !data || data.projectId !== projectId) return;
    const { webhookId, projectId: _project, ...delivery } = data;
    const known = live.deliveries.get(webhookId);
    if (!known) return;
    if (!known.some((d) => d.id === delivery.id)) live.deliveries.set(webhookId, [delivery, ...known].slice(0, 50));
    page.renderList();
  });
  return () => {
    page.unmount();
    offEvent();
  };
}
