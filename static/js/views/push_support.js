// Web Push on this device for Settings → Notifications (notifications.js): why push cannot
// work here, a name for the device from its user agent, the board's key as bytes and whether a
// subscription was made with it, the service worker's registration, and an event's label.

import { register, t } from "../i18n.js";

register({  // key: [English, Turkish]
  "push.event.approval": ["an agent asks for permission", "bir ajan izin istediğinde"],
  "push.event.question": ["an agent asks a question", "bir ajan soru sorduğunda"],
  "push.event.testing": ["a task is ready for review", "bir görev incelemeye hazır olduğunda"],
  "push.event.failed": ["a task failed", "bir görev başarısız olduğunda"],
  "push.event.plan": ["a plan is ready", "bir plan hazır olduğunda"],
  "push.event.budget": ["the daily cost limit is reached", "günlük maliyet sınırına ulaşıldığında"],
  "push.deviceName": ["{browser} on {os}", "{os} üzerinde {browser}"],
  "push.browser": ["Browser", "Tarayıcı"],
  "push.device": ["device", "cihaz"],
});

/**
 * Why push cannot work here, or null: "insecure" (no secure context), "ios" (Safari outside a
 * Home Screen app), "unsupported".
 */
export function problem() {
  if (!window.isSecureContext) return "insecure";
  if ("serviceWorker" in navigator && "PushManager" in window && "Notification" in window) return null;
  return /iPhone|iPad|iPod/.test(navigator.userAgent) && !navigator.standalone ? "ios" : "unsupported";
}

/** A name for this device from its user agent: "Chrome on Android", "Firefox on Windows". Pure. */
export function guessDeviceName(ua) {
  const browser = [["Edge", /Edg\//], ["Opera", /OPR\//], ["Samsung Internet", /SamsungBrowser/],
    ["Firefox", /Firefox|FxiOS/], ["Chrome", /Chrome|CriOS|Chromium/], ["Safari", /Safari/]]
    .find(([, re]) => re.test(ua))?.[0] || t("push.browser");
  const os = [["Android", /Android/], ["iPhone", /iPhone/], ["iPad", /iPad/], ["ChromeOS", /CrOS/],
    ["Windows", /Windows/], ["macOS", /Mac OS X|Macintosh/], ["Linux", /Linux/]]
    .find(([, re]) => re.test(ua))?.[0] || t("push.device");
  return t("push.deviceName", { browser, os });
}

/** base64url (no padding) to bytes: the applicationServerKey. */
export function keyBytes(text) {
  const b64 = String(text).replace(/-/g, "+").replace(/_/g, "/");
  return Uint8Array.from(atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4)), (c) => c.charCodeAt(0));
}

/** Whether a subscription's applicationServerKey (buffer) is these bytes. */
export function sameKey(buffer, bytes) {
  const a = buffer ? new Uint8Array(buffer) : new Uint8Array();
  return a.length === bytes.length && a.every((x, i) => x === bytes[i]);
}

/** The service worker's registration (registered here too, should main.js not have). */
export async function registration() {
  await navigator.serviceWorker.register("/sw.js");
  return navigator.serviceWorker.ready;
}

/** An event's label (its value when the board has no text for it: a server newer than the board). */
export function eventLabel(value) {
  const key = `push.event.${value}`;
  const text = t(key);
  return text === key ? String(value) : text;
}
