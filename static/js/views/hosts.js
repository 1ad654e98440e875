// Settings → Hosts (#/settings/hosts): the machines agents run on besides this one (design
// §15). Each host with its address, what runs there and its last check (reachable, latency,
// git, the agent CLIs found), and Check, Edit, Delete, an enabled switch and — when the host
// showed a key the board has not pinned — the fingerprint to compare and "Trust this key".
// The add/edit dialog is host_form.js; the list follows the store's hosts (host:* events).

import { h, toast } from "../dom.js";
import { dateTime, onLanguageChange, register, t } from "../i18n.js";
import { api, dropHost, loadHosts, putHost, state, subscribe } from "../store.js";
import { agentName, rerender } from "./common.js";
import { openHostForm } from "./host_form.js";
import { confirmDelete, enabledSwitch } from "./item_list.js";

register({  // key: [English, Turkish]
  "hosts.title": ["Hosts", "Makineler"],
  "hosts.intro": ["Other machines your agents can run on, reached with this machine's OpenSSH (your ~/.ssh/config and ssh agent apply). A project chooses one in its settings: “Runs on”.", "Ajanlarınızın çalışabileceği başka makineler; bu makinenin OpenSSH'si ile ulaşılır (~/.ssh/config ve ssh ajanınız geçerlidir). Bir proje ayarlarında birini seçer: “Çalıştığı yer”."],
  "hosts.back": ["All settings", "Tüm ayarlar"],
  "hosts.new": ["Add a host", "Makine ekle"],
  "hosts.empty": ["No hosts yet: every project runs on this machine.", "Henüz makine yok: her proje bu makinede çalışır."],
  "hosts.loadFailed": ["The hosts could not be loaded: {error}", "Makineler yüklenemedi: {error}"],
  "hosts.enabled": ["Enabled", "Etkin"],
  "hosts.on": ["Host enabled", "Makine etkinleştirildi"],
  "hosts.off": ["Host disabled: its projects' tasks wait", "Makine devre dışı: projelerinin görevleri bekler"],
  "hosts.check": ["Check", "Denetle"],
  "hosts.checking": ["Checking…", "Denetleniyor…"],
  "hosts.never": ["Not checked yet: press Check.", "Henüz denetlenmedi: Denetle'ye basın."],
  "hosts.reachable": ["Reachable", "Ulaşılabilir"],
  "hosts.unreachable": ["Unreachable", "Ulaşılamıyor"],
  "hosts.untrusted": ["Key not trusted yet", "Anahtara henüz güvenilmedi"],
  "hosts.checkedAt": ["checked {when}", "{when} denetlendi"],
  "hosts.address": ["Address", "Adres"],
  "hosts.port": ["Port", "Port"],
  "hosts.running": ["Running", "Çalışan"],
  "hosts.runningOf": ["{n} of at most {max}", "{n} / en çok {max}"],
  "hosts.hostKey": ["Trusted key", "Güvenilen anahtar"],
  "hosts.noKey": ["none yet", "henüz yok"],
  "hosts.baseDir": ["Folder", "Klasör"],
  "hosts.identityFile": ["Key file", "Anahtar dosyası"],
  "hosts.latency": ["Latency", "Gecikme"],
  "hosts.ms": ["{n} ms", "{n} ms"],
  "hosts.git": ["Git", "Git"],
  "hosts.agents": ["Agent CLIs", "Ajan CLI'leri"],
  "hosts.notFound": ["not found", "bulunamadı"],
  "hosts.keyShown": ["The host showed this key. Trust it only if it is the host's own:", "Makine bu anahtarı gösterdi. Yalnızca makinenin kendi anahtarıysa güvenin:"],
  "hosts.keyChanged": ["The host now shows another key, and the board refuses it. If nobody re-installed or re-keyed the host, someone may be in between: do not trust it. The new key:", "Makine artık başka bir anahtar gösteriyor ve pano onu reddediyor. Makineyi kimse yeniden kurmadıysa ya da anahtarını değiştirmediyse arada biri olabilir: güvenmeyin. Yeni anahtar:"],
  "hosts.compare": ["Compare it, character for character, with the fingerprint the host prints of its own key: run this on the host (or read it in your cloud console).", "Bunu, makinenin kendi anahtarı için yazdığı parmak iziyle harf harf karşılaştırın: şu komutu makinede çalıştırın (ya da bulut konsolunuzda okuyun)."],
  "hosts.thenEnable": ["The host was turned off when its key changed: after trusting the new key, turn it on again.", "Anahtarı değişince makine kapatıldı: yeni anahtara güvendikten sonra onu yeniden açın."],
  "hosts.trust": ["Trust this key", "Bu anahtara güven"],
  "hosts.trusted": ["Key trusted; checking the host again", "Anahtara güvenildi; makine yeniden denetleniyor"],
  "hosts.deleted": ["Host deleted", "Makine silindi"],
});

/** What a person runs on the host to see its key's fingerprint (design §15). */
const COMPARE_COMMAND = "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub";
/** Store events after which the list is shown again. */
const RENDER_ON = new Set(["hosts:loaded", "host:created", "host:updated", "host:deleted", "resync"]);

/** A row of a host's facts: [i18n key of the label, value, data-testid of the value]. */
const fact = ([key, value, testid]) => [h("dt", {}, t(key)), h("dd", testid ? { "data-testid": testid } : {}, value)];

/** The address and limits of a host, and its trusted key. */
function facts(host) {
  return h("dl", { class: "field-list host-facts" }, [
    ["hosts.address", h("code", {}, host.address)],
    ["hosts.port", String(host.port)],
    ["hosts.running", t("hosts.runningOf", { n: host.running, max: host.maxConcurrent }), "host-running"],
    ["hosts.hostKey", host.hostKey ? h("code", { class: "wrap" }, host.hostKey) : t("hosts.noKey"), "host-key"],
    ["hosts.baseDir", h("code", {}, host.baseDir)],
    host.identityFile ? ["hosts.identityFile", h("code", {}, host.identityFile)] : null,
  ].filter(Boolean).map(fact));
}

/** What the last check found: reachable or why not, and on success latency, git and CLIs. */
function checkResult(host, checking) {
  const check = host.lastCheck;
  if (checking) return h("p", { class: "test-result pending", role: "status", "data-testid": "host-status" }, t("hosts.checking"));
  if (!check) return h("p", { class: "muted", "data-testid": "host-status" }, t("hosts.never"));
  const firstKey = !check.ok && !host.hostKey && check.fingerprint;
  const verdict = check.ok ? "reachable" : firstKey ? "untrusted" : "unreachable";
  const when = t("hosts.checkedAt", { when: dateTime(check.at) });
  const status = h("p", { class: `test-result ${check.ok ? "ok" : firstKey ? "pending" : "failed"}`, role: "status",
    "data-testid": "host-status" }, `${t(`hosts.${verdict}`)} — ${when}`);
  if (!check.ok) {
    return [status, firstKey || !check.error ? null : h("p", { class: "host-error", "data-testid": "host-error" }, check.error)];
  }
  const agents = Object.entries(check.agents || {}).map(([cli, found]) =>
    h("span", { class: `chip static${found.found ? "" : " missing"}`, "data-testid": "host-agent", "data-agent": cli },
      `${agentName(cli)} ${found.found ? found.version || "" : t("hosts.notFound")}`.trim()));
  return [status, h("dl", { class: "field-list host-facts" }, [
    ["hosts.latency", t("hosts.ms", { n: check.latencyMs }), "host-latency"],
    ["hosts.git", check.git || t("hosts.notFound"), "host-git"],
    agents.length ? ["hosts.agents", h("span", { class: "chips" }, agents)] : null,
  ].filter(Boolean).map(fact))];
}

/** The fingerprint the host showed, how to compare it, and "Trust this key". */
function trustPanel(host, fingerprint, page) {
  return h("section", { class: "trust", "data-testid": "host-trust" },
    h("p", {}, t(host.hostKey ? "hosts.keyChanged" : "hosts.keyShown")),
    h("code", { class: "fingerprint", "data-testid": "host-fingerprint" }, fingerprint),
    h("p", {}, t("hosts.compare")),
    h("pre", { class: "command" }, COMPARE_COMMAND),
    host.enabled ? null : h("p", { class: "muted" }, t("hosts.thenEnable")),
    h("div", { class: "actions start" }, h("button", { type: "button", class: "primary", "data-key": `trust-${host.id}`,
      onclick: () => page.trust(host, fingerprint) }, t("hosts.trust"))));
}

/** One listed host. */
function hostItem(host, page) {
  const check = host.lastCheck;
  const shown = check?.fingerprint && check.fingerprint !== host.hostKey ? check.fingerprint : null;
  const checking = page.checking.has(host.id);
  const note = page.notes.get(host.id);
  const button = (key, label, onclick, attrs = {}) =>
    h("button", { type: "button", "data-key": `${key}-${host.id}`, onclick, ...attrs }, label);
  return h("article", { class: `item card-panel host${host.enabled ? "" : " disabled"}`, "data-host": String(host.id),
    "aria-labelledby": `host-name-${host.id}` },
  h("header", { class: "item-head" },
    h("h3", { id: `host-name-${host.id}` }, host.name),
    enabledSwitch(host, "hosts", (box) => page.toggle(host, box)),
    h("span", { class: "item-actions" },
      button("check", t("hosts.check"), () => page.check(host), { "aria-busy": checking ? "true" : null }),
      button("edit", t("common.edit"), () => openHostForm(state.hosts.get(host.id) || host)),
      button("delete", t("common.delete"), () => page.remove(host)))),
  facts(host),
  checkResult(host, checking),
  shown ? trustPanel(host, shown, page) : null,
  note ? h("p", { class: "alert alert-error", role: "alert", "data-testid": "host-note" }, note) : null);
}

/** @param {HTMLElement} root */
export function mount(root) {
  let loadError = null;
  const head = h("header", { class: "page-head" });
  const list = h("div", { class: "item-list" });
  root.append(h("section", { class: "settings-view hosts-view" }, head, list));

  const page = {
    checking: new Set(),  // host ids whose check is on its way
    notes: new Map(),     // host id -> why the latest action on it failed (e.g. delete's 409)
    /** Run an action on a host; its failure is said on the host. */
    async act(host, fn) {
      page.notes.delete(host.id);
      try {
        await fn();
        return true;
      } catch (error) {
        page.notes.set(host.id, error.message);
        return false;
      } finally {
        renderList();
      }
    },
    async check(host) {
      if (page.checking.has(host.id)) return;
      page.checking.add(host.id);
      renderList();
      await page.act(host, async () => {
        try {
          putHost(await api.checkHost(host.id));
        } finally {
          page.checking.delete(host.id);
        }
      });
    },
    async trust(host, fingerprint) {
      const trusted = await page.act(host, async () => putHost(await api.updateHost(host.id, { hostKey: fingerprint })));
      if (!trusted) return;
      toast(t("hosts.trusted"));
      await page.check(host);
    },
    toggle(host, box) {
      return page.act(host, async () => {
        try {
          putHost(await api.updateHost(host.id, { enabled: box.checked }));
          toast(t(box.checked ? "hosts.on" : "hosts.off"));
        } catch (error) {
          box.checked = !box.checked;
          throw error;
        }
      });
    },
    async remove(host) {
      if (!(await confirmDelete(host.name))) return;
      const gone = await page.act(host, () => api.deleteHost(host.id));
      if (!gone) return;
      page.notes.delete(host.id);
      dropHost(host.id);
      toast(t("hosts.deleted"));
    },
  };

  function renderList() {
    const hosts = [...state.hosts.values()].sort((a, b) => a.id - b.id);
    if (!state.hostsLoaded) {
      rerender(list, loadError ? h("p", { class: "error" }, t("hosts.loadFailed", { error: loadError }))
        : h("p", { class: "muted" }, t("common.loading")));
    } else if (!hosts.length) {
      rerender(list, h("p", { class: "empty" }, t("hosts.empty")));
    } else {
      rerender(list, hosts.map((host) => hostItem(host, page)));
    }
  }

  function render() {
    head.replaceChildren(h("div", {}, h("h1", {}, t("hosts.title")), h("p", { class: "muted intro" }, t("hosts.intro")),
      h("a", { href: "#/settings" }, t("hosts.back"))),
    h("button", { type: "button", class: "primary", "data-testid": "add-host", onclick: () => openHostForm(null) },
      t("hosts.new")));
    renderList();
  }

  const offStore = subscribe((s, event) => { if (RENDER_ON.has(event)) renderList(); });
  const offLanguage = onLanguageChange(render);
  render();
  loadHosts().catch((error) => {  // fresh, also when the store has them: lastCheck moves on
    loadError = error.message;
    renderList();
  });
  return () => {
    offStore();
    offLanguage();
  };
}
