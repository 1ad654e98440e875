// Webhooks of a project (#/projects/:projectId/webhooks): list with an enabled switch, a
// Test button and the delivery history of each hook (live from webhook:delivery), create
// and edit in a dialog (the secret is write-only), delete; kept current by webhook:* events.

import { api } from "../api.js";
import { h, toast } from "../dom.js";
import { dateTime } from "../format.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { onEvent } from "../store.js";
import { formDialog, formKit, liveForm, liveItems, liveProjectHeader } from "./project_form.js";

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
  "webhooks.event.webhook:test": ["Test", "Deneme"],
  "webhooks.platform.custom": ["Custom (JSON)", "Özel (JSON)"],
});

const PLATFORMS = ["platform_a", "platform_b", "platform_c", "custom"];
/** Product names are not translated. */
const PLATFORM_NAMES = { platform_a: "Slack", platform_b: "Discord", platform_c: "Microsoft Teams" };
const EVENTS = ["task:created", "task:started", "task:completed", "task:approved", "task:changes_requested", "task:failed"];
const URL_RE = /^https?:\/\/[^\s/?#]+\S*$/i;

const platformName = (p) => PLATFORM_NAMES[p] || t(`webhooks.platform.${p}`);
const eventName = (e) => (t(`webhooks.event.${e}`) === `webhooks.event.${e}` ? e : t(`webhooks.event.${e}`));

const specs = (hook) => [
  { key: "platform", kind: "select", options: PLATFORMS, optionLabel: platformName, label: () => t("webhooks.platform") },
  { key: "url", kind: "text", required: true, pattern: URL_RE, patternKey: "webhooks.url.bad", label: () => t("webhooks.url"),
    attrs: { class: "mono", inputmode: "url", placeholder: "https://", spellcheck: "false", maxlength: 2000 } },
  { key: "events", kind: "checks", required: true, options: EVENTS, optionLabel: eventName, label: () => t("webhooks.events") },
  { key: "enabled", kind: "bool", label: () => t("webhooks.enabled") },
  { key: "secret", kind: "password", omitEmpty: true, skip: (raw) => raw.platform !== "custom",
    label: () => t("webhooks.secret"), attrs: { maxlength: 500 },
    help: () => (hook && hook.hasSecret ? `${t("webhooks.secret.help")} ${t("webhooks.secret.keep")}` : t("webhooks.secret.help")) },
];

/** One line about a delivery or a test answer: {ok, status, error}. */
function outcome(result) {
  if (result.ok) return t("webhooks.testOk", { status: result.status });
  const head = result.status === null || result.status === undefined
    ? t("webhooks.testUnreachable") : t("webhooks.testFailed", { status: result.status });
  return result.error ? `${head} — ${result.error}` : head;
}

/**
 * @param {HTMLElement} root
 * @param {{projectId: number}} params
 */
export function mount(root, { projectId }) {
  let dialog = null;
  const deliveries = new Map();  // webhook id -> deliveries, newest first
  const tests = new Map();  // webhook id -> "pending" | {ok, status, error}
  const open = new Set();  // webhook ids whose history is unfolded
  const head = h("div");
  const bar = h("div", { class: "page-head" });
  const list = h("div", { class: "item-list", "aria-live": "polite" });
  root.append(head, h("section", { class: "webhooks-view" }, bar, list));
  const store = liveItems(projectId, "webhooks", "webhook", (event, data) => {
    if (event === "loaded") for (const id of store.items.keys()) loadDeliveries(id);
    else if (event === "webhook:created" && data) loadDeliveries(data.id);
    renderList();
  });
  const offHeader = liveProjectHeader(head, projectId, "/webhooks");

  async function loadDeliveries(id) {
    try {
      deliveries.set(id, await api.deliveries(projectId, id));
      renderList();
    } catch { /* the hook was deleted meanwhile: nothing to show */ }
  }

  const offEvent = onEvent(({ event, data }) => {
    if (event !== "webhook:delivery" || !data || data.projectId !== projectId) return;
    const { webhookId, projectId: _project, ...delivery } = data;
    const known = deliveries.get(webhookId);
    if (!known) return;
    if (!known.some((d) => d.id === delivery.id)) deliveries.set(webhookId, [delivery, ...known].slice(0, 50));
    renderList();
  });

  function openForm(hook) {
    const kit = formKit(specs(hook), hook || { platform: "platform_a", events: ["task:completed", "task:failed"], enabled: true });
    const removeBox = h("input", { type: "checkbox", "data-key": "removeSecret" });
    let removeChecked = false;
    removeBox.addEventListener("change", () => { removeChecked = removeBox.checked; });
    const secretRow = () => {
      const row = kit.row("secret");
      row.hidden = kit.raw.platform !== "custom";
      if (hook) {
        row.querySelector("label").textContent = t(hook.hasSecret ? "webhooks.newSecret" : "webhooks.secret");
        row.insertBefore(h("span", { class: "muted" }, t(hook.hasSecret ? "webhooks.secretSet" : "webhooks.secretNotSet")),
          row.querySelector("input"));
        removeBox.checked = removeChecked;
        if (hook.hasSecret) row.append(h("label", { class: "inline-check" }, removeBox, h("span", {}, t("webhooks.removeSecret"))));
      }
      return row;
    };
    kit.onInput((key, value) => {
      if (key === "platform") kit.rows.get("secret").element.hidden = value !== "custom";
    });
    const form = liveForm({
      kit, onlyDirty: Boolean(hook),
      build: () => [h("div", { class: "form-row" }, kit.row("platform"), kit.row("enabled")), kit.row("url"),
        kit.row("events"), secretRow()],
      submitLabel: () => t(hook ? "common.save" : "common.create"),
      onCancel: () => dialog.close(),
      onSubmit: async (body) => {
        if (hook && removeChecked && kit.raw.platform === "custom") body.secret = null;
        const saved = hook ? await api.update(projectId, "webhooks", hook.id, body)
          : await api.create(projectId, "webhooks", body);
        store.put(saved);
        if (!deliveries.has(saved.id)) loadDeliveries(saved.id);
        dialog.close();
        toast(t("common.saved"));
      },
    });
    dialog = formDialog(() => t(hook ? "webhooks.editTitle" : "webhooks.newTitle"), form);
    dialog.dialog.addEventListener("close", () => { dialog = null; });
  }

  async function test(hook) {
    if (tests.get(hook.id) === "pending") return;
    tests.set(hook.id, "pending");
    renderList();
    try {
      tests.set(hook.id, await api.testWebhook(projectId, hook.id));
    } catch (error) {
      tests.set(hook.id, { ok: false, status: null, error: error.message });
    }
    renderList();
  }

  async function toggle(hook, box) {
    try {
      store.put(await api.update(projectId, "webhooks", hook.id, { enabled: box.checked }));
      toast(t(box.checked ? "webhooks.on" : "webhooks.off"));
    } catch (error) {
      box.checked = !box.checked;
      toast(error.message, "error");
    }
  }

  function remove(hook) {
    return store.remove(hook, `${platformName(hook.platform)} ${hook.url}`, t("webhooks.deleted"));
  }

  function history(hook) {
    const rows = deliveries.get(hook.id);
    if (!rows) return null;
    const details = h("details", { class: "history", open: open.has(hook.id) },
      h("summary", { "data-key": `history-${hook.id}` }, t("webhooks.history", { n: rows.length })),
      rows.length ? h("div", { class: "table-wrap" }, h("table", { class: "deliveries" },
        h("thead", {}, h("tr", {}, ["time", "event", "attempt", "status", "result", "duration", "error"].map((c) =>
          h("th", { scope: "col" }, t(`webhooks.col.${c}`))))),
        h("tbody", {}, rows.map((d) => h("tr", { class: d.ok ? "ok" : "failed" },
          h("td", { class: "nowrap" }, h("time", { datetime: d.createdAt }, dateTime(d.createdAt))),
          h("td", {}, eventName(d.event)), h("td", {}, String(d.attempt)),
          h("td", {}, d.status === null || d.status === undefined ? "—" : String(d.status)),
          h("td", {}, h("span", { class: d.ok ? "pill ok" : "pill failed" }, t(d.ok ? "webhooks.ok" : "webhooks.failed"))),
          h("td", { class: "nowrap" }, d.durationMs === null || d.durationMs === undefined ? "" : `${d.durationMs} ms`),
          h("td", { class: "error-cell" }, d.error || "")))))) : h("p", { class: "muted" }, t("webhooks.noDeliveries")));
    details.addEventListener("toggle", () => { if (details.open) open.add(hook.id); else open.delete(hook.id); });
    return details;
  }

  function item(hook) {
    const box = h("input", { type: "checkbox", class: "switch", checked: hook.enabled,
      "data-key": `enabled-${hook.id}`, "aria-label": `${t("webhooks.enabled")}: ${hook.url}` });
    box.addEventListener("change", () => toggle(hook, box));
    const result = tests.get(hook.id);
    const last = (deliveries.get(hook.id) || [])[0];
    return h("article", { class: `item card-panel webhook${hook.enabled ? "" : " disabled"}`, "data-webhook": hook.id },
      h("header", { class: "item-head" },
        h("h3", {}, platformName(hook.platform)),
        h("label", { class: "switch-label" }, box, h("span", {}, t("webhooks.enabled"))),
        h("span", { class: "item-actions" },
          h("button", { type: "button", "data-key": `test-${hook.id}`, "aria-busy": result === "pending" ? "true" : null,
            onclick: () => test(hook) }, t("webhooks.test")),
          h("button", { type: "button", "data-key": `edit-${hook.id}`, onclick: () => openForm(hook) }, t("common.edit")),
          h("button", { type: "button", "data-key": `delete-${hook.id}`, onclick: () => remove(hook) }, t("common.delete")))),
      h("code", { class: "path url" }, hook.url),
      h("div", { class: "chips" }, hook.events.map((e) => h("span", { class: "chip static" }, eventName(e)))),
      hook.platform === "custom" ? h("p", { class: "muted secret-state" },
        t(hook.hasSecret ? "webhooks.secretSet" : "webhooks.secretNotSet")) : null,
      result ? h("p", { class: `test-result ${result === "pending" ? "pending" : result.ok ? "ok" : "failed"}`,
        role: "status", "data-testid": "test-result" },
      result === "pending" ? t("webhooks.testing") : outcome(result)) : null,
      last ? h("p", { class: "muted last" }, t("webhooks.lastDelivery", { when: dateTime(last.createdAt) }), " ",
        h("span", { class: last.ok ? "pill ok" : "pill failed" }, t(last.ok ? "webhooks.ok" : "webhooks.failed")),
        ` ${eventName(last.event)}`) : null,
      history(hook));
  }

  function renderList() {
    store.show(list, item, { failed: "webhooks.loadFailed", empty: "webhooks.empty",
      order: () => [...store.items.values()].sort((a, b) => a.id - b.id) });
  }

  function render() {
    bar.replaceChildren(h("div", {}, h("h2", {}, t("webhooks.title")), h("p", { class: "muted intro" }, t("webhooks.intro"))),
      h("button", { type: "button", class: "primary", onclick: () => openForm(null) }, t("webhooks.new")));
    renderList();
  }

  const offLanguage = onLanguageChange(render);
  render();
  return () => {
    store.stop();
    offEvent();
    offHeader();
    offLanguage();
    if (dialog) dialog.close();
  };
}
