// Settings → Notifications (#/settings/notifications): Web Push on this device — its name and
// the events it wants (their list from the server's API description: PushSubscription.events),
// turned on (permission, pushManager.subscribe with the board's key, POST
// /api/push/subscriptions), saved (the same POST again), tested and turned off — and every
// device that receives the board's notifications, with its last delivery, to remove.
// Where push cannot work (plain HTTP from another machine, a browser without push) it says why.
// The helpers of Web Push on this device (what is missing, keys, labels) are push_support.js.

import { confirmDialog, h, toast } from "../dom.js";
import * as format from "../i18n.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { api } from "../store.js";
import { formKit, liveForm, schemaSpecs } from "./form_kit.js";
import {
  eventLabel, guessDeviceName, keyBytes, problem, registration, sameKey,
} from "./push_support.js";

register({  // key: [English, Turkish]
  "push.title": ["Notifications", "Bildirimler"],
  "push.intro": ["A notification on this device when an agent asks for something, a task waits for review or fails — also when the board is closed.", "Bir ajan bir şey istediğinde, bir görev incelemenizi beklediğinde ya da başarısız olduğunda bu cihaza bildirim — pano kapalıyken de."],
  "push.back": ["All settings", "Tüm ayarlar"],
  "push.thisDevice": ["This device", "Bu cihaz"],
  "push.insecure": ["Notifications need a secure connection. This board is opened over plain HTTP from another machine ({origin}), and browsers allow push only over HTTPS (or on localhost). Put the board behind an HTTPS reverse proxy — the README shows one — and open it through that.", "Bildirimler güvenli bir bağlantı ister. Bu pano başka bir makineden düz HTTP ile açıldı ({origin}) ve tarayıcılar push'a yalnızca HTTPS üzerinden (ya da localhost'ta) izin verir. Panoyu bir HTTPS ters vekil sunucunun arkasına koyun — README bir örnek gösterir — ve onun üzerinden açın."],
  "push.unsupported": ["This browser cannot receive push notifications.", "Bu tarayıcı push bildirimleri alamaz."],
  "push.ios": ["On iPhone and iPad, add the board to the Home Screen first (Share → Add to Home Screen), then open it from there.", "iPhone ve iPad'de önce panoyu Ana Ekrana ekleyin (Paylaş → Ana Ekrana Ekle), sonra oradan açın."],
  "push.blocked": ["Notifications are blocked for this board in the browser's settings: allow them there, then come back.", "Bu pano için bildirimler tarayıcı ayarlarında engellenmiş: oradan izin verin, sonra geri gelin."],
  "push.notAllowed": ["Notifications were not allowed on this device.", "Bu cihazda bildirimlere izin verilmedi."],
  "push.on": ["On: this device gets the events below.", "Açık: bu cihaz aşağıdaki olayları alır."],
  "push.off": ["Off: this device gets no notifications.", "Kapalı: bu cihaz bildirim almaz."],
  "push.name": ["Device name", "Cihaz adı"],
  "push.name.help": ["How this device is listed below.", "Bu cihazın aşağıda nasıl listeleneceği."],
  "push.events": ["Notify me when", "Şu durumlarda bildir"],
  "push.turnOn": ["Turn on for this device", "Bu cihaz için aç"],
  "push.test": ["Send a test", "Deneme gönder"],
  "push.turnOff": ["Turn off", "Kapat"],
  "push.turnedOn": ["Notifications are on for this device.", "Bu cihaz için bildirimler açık."],
  "push.turnedOff": ["Notifications are off for this device.", "Bu cihaz için bildirimler kapalı."],
  "push.devices": ["Devices", "Cihazlar"],
  "push.devicesNone": ["No device gets notifications yet.", "Henüz hiçbir cihaz bildirim almıyor."],
  "push.added": ["added {when}", "{when} eklendi"],
  "push.lastSent": ["last sent {when}", "son gönderim {when}"],
  "push.neverSent": ["nothing sent yet", "henüz bir şey gönderilmedi"],
  "push.lastStatus": ["push service answered {status}", "push hizmeti {status} yanıtını verdi"],
  "push.lastError": ["Last error: {error}", "Son hata: {error}"],
  "push.remove": ["Remove", "Kaldır"],
  "push.removeConfirm": ["Remove {name}? It gets no more notifications.", "{name} kaldırılsın mı? Artık bildirim almaz."],
  "push.removed": ["Removed", "Kaldırıldı"],
  "push.testOk": ["Sent: the push service accepted it ({status}).", "Gönderildi: push hizmeti kabul etti ({status})."],
  "push.testFailed": ["Not sent: {error}", "Gönderilmedi: {error}"],
  "push.testUnreachable": ["the push service could not be reached", "push hizmetine ulaşılamadı"],
  "push.testStatus": ["the push service answered {status}", "push hizmeti {status} yanıtını verdi"],
  "push.loadFailed": ["The devices could not be loaded: {error}", "Cihazlar yüklenemedi: {error}"],
});

/** @param {HTMLElement} root */
export function mount(root) {
  const why = problem();
  let alive = true;
  let list = null;          // every device (GET /api/push/subscriptions)
  let listError = "";
  let endpoint = null;      // this browser's push endpoint, if it has a subscription
  let form = null;
  let kit = null;
  let kitFor = undefined;   // the id the form was built for (null: not turned on)
  let busy = false;
  const head = h("header", { class: "page-head" });
  const device = h("section", { class: "card-panel push-device", "data-testid": "push-device" });
  const devices = h("section", { class: "card-panel push-devices", "data-testid": "push-devices" });
  const result = h("p", { class: "push-result", role: "status", "data-testid": "push-result" });
  root.append(h("section", { class: "settings-view notifications-view" }, head, device, devices));

  const mine = () => (list && endpoint ? list.find((s) => s.endpoint === endpoint) || null : null);

  async function load() {
    try {
      const [subs, sub] = await Promise.all([api.pushSubscriptions(),
        why ? null : navigator.serviceWorker.getRegistration("/").then((r) => r?.pushManager.getSubscription() ?? null)]);
      list = subs;
      endpoint = sub ? sub.endpoint : null;
      listError = "";
    } catch (error) {
      listError = t("push.loadFailed", { error: error.message });
    }
    if (alive) render();
  }

  function say(text, kind = "") {
    result.textContent = text;
    result.className = `push-result ${kind}`;
  }

  /** Permission, a subscription with the board's key, and the server told (name, events). */
  async function turnOn(body) {
    const permission = await Notification.requestPermission();
    if (permission !== "granted") throw new Error(t(permission === "denied" ? "push.blocked" : "push.notAllowed"));
    const reg = await registration();
    const key = keyBytes((await api.pushKey()).publicKey);
    let sub = await reg.pushManager.getSubscription();
    if (sub && !sameKey(sub.options.applicationServerKey, key)) {  // made for another key: renew
      await sub.unsubscribe();
      sub = null;
    }
    if (!sub) sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
    await save(sub, body);
    say(t("push.turnedOn"), "ok");
  }

  async function save(sub, body) {
    const { endpoint: url, keys } = sub.toJSON();
    await api.savePushSubscription({ endpoint: url, keys, ...body });
    endpoint = url;
    await load();
  }

  async function submit(body) {
    say("");
    const reg = await navigator.serviceWorker.getRegistration("/");
    const sub = mine() && reg ? await reg.pushManager.getSubscription() : null;
    if (sub) {
      await save(sub, body);
      toast(t("common.saved"));
    } else {
      await turnOn(body);
    }
  }

  async function turnOff() {
    const current = mine();
    await run(async () => {
      const reg = await navigator.serviceWorker.getRegistration("/");
      const sub = reg ? await reg.pushManager.getSubscription() : null;
      if (sub) await sub.unsubscribe();
      if (current) await api.deletePushSubscription(current.id).catch((e) => { if (e.status !== 404) throw e; });
      endpoint = null;
      await load();
      say(t("push.turnedOff"));
    });
  }

  async function sendTest(subscription, where) {
    await run(async () => {
      const answer = await api.testPushSubscription(subscription.id);
      const text = answer.ok ? t("push.testOk", { status: answer.status })
        : t("push.testFailed", { error: answer.error
          || (answer.status === null ? t("push.testUnreachable") : t("push.testStatus", { status: answer.status })) });
      where(text, answer.ok ? "ok" : "error");
      await load();
    }, where);
  }

  async function remove(subscription) {
    const yes = await confirmDialog(t("push.removeConfirm", { name: subscription.name }),
      { ok: t("push.remove"), cancel: t("common.cancel"), danger: true });
    if (!yes) return;
    await run(async () => {
      if (subscription.endpoint === endpoint) {  // this device: the browser forgets it too
        const reg = await navigator.serviceWorker.getRegistration("/");
        const sub = reg ? await reg.pushManager.getSubscription() : null;
        if (sub) await sub.unsubscribe();
        endpoint = null;
      }
      await api.deletePushSubscription(subscription.id).catch((e) => { if (e.status !== 404) throw e; });
      toast(t("push.removed"));
      await load();
    });
  }

  /** One action at a time; its error is said where it belongs. */
  async function run(fn, where = (text) => say(text, "error")) {
    if (busy) return;
    busy = true;
    render();
    try {
      await fn();
    } catch (error) {
      where(error.message || String(error), "error");
    } finally {
      busy = false;
      if (alive) render();
    }
  }

  function buildForm(current) {
    if (form) form.destroy();
    kitFor = current ? current.id : null;
    const specs = schemaSpecs("PushSubscription", [
      { key: "name", kind: "text", required: true, label: () => t("push.name"), help: () => t("push.name.help") },
      { key: "events", kind: "checks", required: true, label: () => t("push.events"), optionLabel: eventLabel },
    ]);
    const events = specs.find((s) => s.key === "events").options;
    kit = formKit(specs, current || { name: guessDeviceName(navigator.userAgent), events });
    form = liveForm({
      kit, className: "push-form",
      build: () => [kit.row("name"), kit.row("events")],
      submitLabel: () => t(mine() ? "common.save" : "push.turnOn"),
      onSubmit: submit,
    });
  }

  function renderDevice() {
    if (why) {
      device.replaceChildren(h("h2", {}, t("push.thisDevice")),
        h("p", { class: "alert alert-warn", "data-testid": "push-unavailable" },
          t(`push.${why}`, { origin: location.origin })));
      return;
    }
    if (!list) {
      device.replaceChildren(h("h2", {}, t("push.thisDevice")), h("p", { class: "muted" }, t("common.loading")));
      return;
    }
    const current = mine();
    if (!form || kitFor !== (current ? current.id : null)) buildForm(current);
    else form.rerender();
    const blocked = Notification.permission === "denied";
    device.replaceChildren(h("h2", {}, t("push.thisDevice")),
      h("p", { class: current ? "push-state on" : "push-state muted", "data-testid": "push-state" },
        t(current ? "push.on" : "push.off")),
      blocked ? h("p", { class: "alert alert-warn" }, t("push.blocked")) : null,
      form.element,
      current ? h("div", { class: "actions start" },
        h("button", { type: "button", disabled: busy, onclick: () => sendTest(current, say) }, t("push.test")),
        h("button", { type: "button", class: "danger", disabled: busy, onclick: turnOff }, t("push.turnOff"))) : null,
      result);
  }

  function deviceItem(s) {
    const here = s.endpoint === endpoint;
    const note = h("p", { class: "push-result", role: "status" });
    const where = (text, kind) => { note.textContent = text; note.className = `push-result ${kind}`; };
    return h("li", { class: "push-item", "data-testid": "push-subscription", "data-id": String(s.id) },
      h("div", { class: "push-item-head" }, h("strong", {}, s.name),
        here ? h("span", { class: "bchip tag", "data-testid": "this-device" }, t("push.thisDevice")) : null),
      h("p", { class: "push-events" }, s.events.map(eventLabel).join(" · ")),
      h("p", { class: "muted ins-small" }, t("push.added", { when: format.dateTime(s.createdAt) }), " · ",
        s.lastSentAt ? t("push.lastSent", { when: format.dateTime(s.lastSentAt) }) : t("push.neverSent"),
        s.lastStatus !== null && s.lastStatus !== undefined ? ` · ${t("push.lastStatus", { status: s.lastStatus })}` : ""),
      s.lastError ? h("p", { class: "error ins-small", "data-testid": "push-last-error" }, t("push.lastError", { error: s.lastError })) : null,
      h("div", { class: "actions start" },
        h("button", { type: "button", disabled: busy, onclick: () => sendTest(s, where) }, t("push.test")),
        h("button", { type: "button", disabled: busy, onclick: () => remove(s) }, t("push.remove"))),
      note);
  }

  function renderDevices() {
    const body = listError ? h("p", { class: "error", role: "alert" }, listError)
      : !list ? h("p", { class: "muted" }, t("common.loading"))
        : !list.length ? h("p", { class: "muted", "data-testid": "push-none" }, t("push.devicesNone"))
          : h("ul", { class: "push-list" }, list.map(deviceItem));
    devices.replaceChildren(h("h2", {}, t("push.devices")), body);
  }

  function render() {
    head.replaceChildren(h("div", {}, h("h1", {}, t("push.title")), h("p", { class: "muted intro" }, t("push.intro"))),
      h("a", { href: "#/settings" }, t("push.back")));
    try {
      renderDevice();
    } catch (error) {  // a server without push in its API description
      device.replaceChildren(h("p", { class: "error" }, error.message));
    }
    renderDevices();
  }

  const offLanguage = onLanguageChange(render);
  render();
  load();
  return () => {
    alive = false;
    offLanguage();
    if (form) form.destroy();
  };
}
