// The board's service worker (design §13), served at /sw.js with __TASKBOARD_BUILD__ replaced
// by a hash of the board's files and the server's version: an upgraded server is a new worker.
//
// - Caches the board's own files only (BOARD_FILES, in a cache named after the build), never
//   API data: /api/*, /ws, /login and /sw.js always go to the network.
// - The page and the files: this build's from the cache, else from the network.
// - Web Push: shows what the server sent (title and body come ready), with Allow and Deny on
//   an approval; act() decides it from the notification with the payload's single-use token.
// - A tap opens the board at the payload's url, in a board window already open if any.
//
// A classic script (not a module), so that every browser with push can run it.

/* global clients */

const BUILD = "__TASKBOARD_BUILD__";
const CACHE = `taskboard-${BUILD}`;

/**
 * Every file the board loads, so it starts without the server: the page ("/" serves
 * index.html), its scripts, styles, icons and manifest. The server writes the list when it
 * serves this file (every file under static/ but the login page's and this one).
 */
const BOARD_FILES = __TASKBOARD_FILES__;
const ICON = "/static/icons/icon-192.png";
const BADGE = "/static/icons/badge-96.png";

/** The worker's own few words, in the device's language (the board's strings live in i18n.js). */
const TEXTS = {  // key: [English, Turkish]
  allow: ["Allow", "İzin ver"],
  deny: ["Deny", "Reddet"],
  allowed: ["Allowed", "İzin verildi"],
  denied: ["Denied", "Reddedildi"],
  answered: ["Already answered", "Zaten cevaplandı"],
  expired: ["Link expired: open the board to answer", "Bağlantının süresi doldu: cevaplamak için panoyu açın"],
  failed: ["Not sent: the board cannot be reached", "Gönderilemedi: panoya ulaşılamıyor"],
};
const LANG = (self.navigator.languages || [self.navigator.language || "en"])
  .some((l) => /^tr\b/i.test(String(l))) ? 1 : 0;
const say = (key) => TEXTS[key][LANG] ?? TEXTS[key][0];

// ---- install, activate, update --------------------------------------------------------

self.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    // cache: "reload" skips the HTTP cache: the files of this build, not of the last one
    await cache.addAll(BOARD_FILES.map((url) => new Request(url, { cache: "reload" })));
    await self.skipWaiting();
  })());
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    const names = await caches.keys();
    await Promise.all(names.filter((name) => name.startsWith("taskboard-") && name !== CACHE)
      .map((name) => caches.delete(name)));
    await self.clients.claim();
  })());
});

// ---- fetch ------------------------------------------------------------------------------

/** Whether a request is for one of the board's own files (the only ones ever cached). */
function isBoardFile(url) {
  if (url.origin !== self.location.origin || url.search) return false;
  const path = url.pathname;
  return path === "/" || (path.startsWith("/static/") && !path.startsWith("/static/login") && path !== "/static/sw.js");
}

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET") return;
  const url = new URL(request.url);
  if (request.mode === "navigate") {
    if (url.origin === self.location.origin && url.pathname === "/") event.respondWith(page(request));
    return;  // /login and anything else: the network alone
  }
  if (isBoardFile(url)) event.respondWith(boardFile(request, url));
});

/**
 * The board's page: the one of this build from the cache (it changes only with the board's
 * files, and so with this worker), saving a round trip on a slow network; else the server's.
 */
async function page(request) {
  const cached = await caches.match("/", { cacheName: CACHE });
  return cached || fetch(request);
}

/** A file of this build: from the cache, else from the server (and kept when it is fine). */
async function boardFile(request, url) {
  const cache = await caches.open(CACHE);
  const cached = await cache.match(url.pathname);
  if (cached) return cached;
  const response = await fetch(request);
  if (response.ok && response.type === "basic") await cache.put(url.pathname, response.clone());
  return response;
}

// ---- push ------------------------------------------------------------------------------

self.addEventListener("push", (event) => {
  let payload = {};
  try {
    payload = event.data ? event.data.json() : {};
  } catch {
    payload = { title: "Taskboard", body: event.data ? event.data.text() : "" };
  }
  event.waitUntil(notify(payload));
});

/**
 * Show one push payload ({kind, title, body, tag, url, approvalId, token, needsYou}) and set
 * the app's badge to its needsYou. "answered" replaces the approval's notification (same
 * tag) without a sound.
 * @returns {Promise<void>}
 */
async function notify(payload) {
  const kind = String(payload.kind || "");
  const tag = payload.tag ? String(payload.tag) : "";
  const quiet = kind === "answered";
  const options = {
    body: String(payload.body || ""),
    tag: tag || undefined,
    data: payload,
    icon: ICON,
    badge: BADGE,
    requireInteraction: kind === "approval" || kind === "question",
    silent: quiet,
    renotify: Boolean(tag) && !quiet,
  };
  if (kind === "approval" && payload.token && payload.approvalId) {
    options.actions = [{ action: "allow", title: say("allow") }, { action: "deny", title: say("deny") }];
  }
  await self.registration.showNotification(String(payload.title || "Taskboard"), options);
  await setBadge(payload.needsYou);
}

/** The app's badge: the number of things waiting for a person (nothing where unsupported). */
async function setBadge(count) {
  if (typeof count !== "number" || !("setAppBadge" in self.navigator)) return;
  try {
    if (count > 0) await self.navigator.setAppBadge(count);
    else await self.navigator.clearAppBadge();
  } catch { /* not installed, or the platform has no badges */ }
}

// ---- notification clicks ----------------------------------------------------------------

self.addEventListener("notificationclick", (event) => {
  const notification = event.notification;
  const data = notification.data || {};
  if (event.action === "allow" || event.action === "deny") {
    event.waitUntil(act(data, event.action));
    return;
  }
  notification.close();
  event.waitUntil(openBoard(data.url));
});

/**
 * Decide an approval from its notification: POST /api/approvals/<id>/act {token, decision}
 * (no session: the token is the credential), then replace the notification with the outcome.
 * @param {{approvalId: number, token: string, title?: string, body?: string, tag?: string}} data
 * @param {"allow"|"deny"} action
 * @returns {Promise<{outcome: "allowed"|"denied"|"answered"|"expired"|"failed", status: number|null}>}
 */
async function act(data, action) {
  const id = Number(data && data.approvalId);
  let status = null;
  if (Number.isSafeInteger(id) && id > 0 && (action === "allow" || action === "deny")) {
    try {
      const response = await fetch(`/api/approvals/${id}/act`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ token: String(data.token || ""), decision: action }),
        credentials: "omit",  // a stale session cookie would turn the answer into a 401
      });
      status = response.status;
    } catch { /* the board cannot be reached */ }
  }
  const outcome = status === null ? "failed" : status >= 200 && status < 300
    ? (action === "allow" ? "allowed" : "denied") : status === 409 ? "answered" : status === 403 ? "expired" : "failed";
  const title = data && data.title ? `${say(outcome)} · ${data.title}` : say(outcome);
  try {
    await self.registration.showNotification(title, {
      body: String((data && data.body) || ""),
      tag: (data && data.tag) || `approval-${id}`,
      data: { ...data, kind: "outcome", token: undefined, outcome },
      icon: ICON,
      badge: BADGE,
      silent: true,
    });
  } catch { /* notifications were turned off meanwhile: the decision stands */ }
  return { outcome, status };
}

/** The board at url (a path of this origin): in an open board window if any, else a new one. */
async function openBoard(url) {
  let target = new URL(url || "/", self.location.origin);
  if (target.origin !== self.location.origin) target = new URL("/", self.location.origin);
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  const board = windows.find((w) => new URL(w.url).origin === self.location.origin
    && !new URL(w.url).pathname.startsWith("/login"));
  if (board) {
    await board.focus();
    board.postMessage({ type: "open", url: target.pathname + target.search + target.hash });
    return board;
  }
  return self.clients.openWindow(target.href);
}

// ---- a subscription the browser replaced ------------------------------------------------

self.addEventListener("pushsubscriptionchange", (event) => {
  event.waitUntil(resubscribe(event.oldSubscription, event.newSubscription));
});

/**
 * The push service changed this device's subscription: subscribe again (when the browser did
 * not) and register it under the old one's name and events (needs the board's session).
 */
async function resubscribe(old, fresh) {
  try {
    const listed = await fetch("/api/push/subscriptions", { credentials: "same-origin" });
    if (!listed.ok) return;
    const mine = (await listed.json()).find((s) => old && s.endpoint === old.endpoint);
    if (!mine) return;
    let next = fresh;
    if (!next) {
      const { publicKey } = await (await fetch("/api/push/key", { credentials: "same-origin" })).json();
      next = await self.registration.pushManager.subscribe({ userVisibleOnly: true,
        applicationServerKey: base64UrlBytes(publicKey) });
    }
    const json = next.toJSON();
    await fetch("/api/push/subscriptions", {
      method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ endpoint: json.endpoint, keys: json.keys, name: mine.name, events: mine.events }),
    });
    if (json.endpoint !== mine.endpoint) {
      await fetch(`/api/push/subscriptions/${Number(mine.id)}`, { method: "DELETE", credentials: "same-origin" });
    }
  } catch { /* the board asks again when Settings → Notifications is opened */ }
}

/** base64url (no padding) to bytes. */
function base64UrlBytes(text) {
  const b64 = String(text).replace(/-/g, "+").replace(/_/g, "/");
  const raw = atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}
