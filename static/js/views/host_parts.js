// Where a project's tasks run, as the views show it: a host's name, the card's host badge,
// the task page's "Runs on <host>", and "Waiting for host <name>: <error>" of a task whose
// host cannot be reached (task.waitingFor). The hosts themselves are Settings → Hosts.

import { h } from "../dom.js";
import { register, t } from "../i18n.js";
import { projectHost, state } from "../store.js";

register({  // key: [English, Turkish]
  "hostpart.unknown": ["host #{id}", "#{id} numaralı makine"],
  "hostpart.runsOn": ["Runs on {name}", "{name} makinesinde çalışır"],
  "hostpart.waiting": ["Waiting for host {name}: {error}", "{name} makinesi bekleniyor: {error}"],
  "hostpart.waitingHelp": ["The task starts by itself once the host answers again: at its next check, or when you press Check in Settings → Hosts.", "Makine yeniden cevap verince görev kendiliğinden başlar: bir sonraki denetiminde ya da Ayarlar → Makineler'de Denetle'ye bastığınızda."],
  "hostpart.waitingSandbox": ["Waiting for the sandbox: {error}", "Korumalı alan bekleniyor: {error}"],
  "hostpart.waitingSandboxHelp": ["The task starts by itself once bubblewrap works where it runs (the board tries again every minute), or when the project's sandbox is set to auto.", "Görev, bubblewrap çalıştığı yerde çalışır olunca (pano her dakika yeniden dener) ya da projenin korumalı alanı otomatik yapılınca kendiliğinden başlar."],
  "hostpart.sandboxed": ["sandboxed", "korumalı"],
  "hostpart.unsandboxed": ["no sandbox", "korumasız"],
  "hostpart.sandboxedHelp": ["Its latest run went through the sandbox (bubblewrap): it saw none of your keys, tokens or other projects.", "Son çalışması korumalı alandan (bubblewrap) geçti: anahtarlarınızı, belirteçlerinizi ve diğer projeleri görmedi."],
  "hostpart.unsandboxedHelp": ["Its latest run was not sandboxed: it ran with the board's rights.", "Son çalışması korumalı alanda değildi: panonun haklarıyla çalıştı."],
});

/** The name of a host, or "host #3" while it is not known. */
export function hostName(hostId) {
  return state.hosts.get(hostId)?.name ?? t("hostpart.unknown", { id: hostId });
}

/** The id of the host a task's project runs on; null: this machine (or not known yet). */
export const taskHost = (task) => projectHost(task.project_id) ?? null;

/** "Runs on build box" of a task whose project runs on a host, else null. */
export function runsOnText(task) {
  const host = taskHost(task);
  return host === null ? null : t("hostpart.runsOn", { name: hostName(host) });
}

/**
 * "Waiting for host build box: <why>" of a task waiting for its host, "Waiting for the
 * sandbox: <why>" of one whose project must be sandboxed where bubblewrap does not work;
 * else null.
 */
export function hostWaitingText(task) {
  const waiting = task.waitingFor;
  if (!waiting) return null;
  return waiting.sandbox ? t("hostpart.waitingSandbox", { error: waiting.sandbox })
    : t("hostpart.waiting", { name: hostName(waiting.host), error: waiting.error || "" });
}

/** The help beside a task's waiting text. */
export const waitingHelp = (task) => t(task.waitingFor?.sandbox ? "hostpart.waitingSandboxHelp" : "hostpart.waitingHelp");

/** A card's chip saying whether the task's latest run went through the sandbox. */
export function sandboxChip(task) {
  if (task.sandboxed === null || task.sandboxed === undefined) return null;
  return h("span", { class: `bchip sandbox${task.sandboxed ? "" : " unsandboxed"}`, "data-testid": "card-sandbox",
    title: t(task.sandboxed ? "hostpart.sandboxedHelp" : "hostpart.unsandboxedHelp") },
  t(task.sandboxed ? "hostpart.sandboxed" : "hostpart.unsandboxed"));
}

/** A card's badge naming the host its project runs on (none on this machine). */
export function hostBadge(task) {
  const host = taskHost(task);
  if (host === null) return null;
  const name = hostName(host);
  return h("span", { class: "bchip host", "data-testid": "card-host", title: t("hostpart.runsOn", { name }) }, name);
}

/** What a card shows of hosts, as text: a card whose text changes is built again. */
export const hostSignature = (task) => `${runsOnText(task)}|${hostWaitingText(task)}`;
