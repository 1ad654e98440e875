// The /ws connection: reconnects with backoff and asks for what it missed (?since=).

import { notify, receive, state } from "./store.js";

let socket = null;
let lastSeq = null;
let retry = 0;
let logs = new Set();
let switching = false;  // followLogs() closed the socket on purpose: reconnect at once
let opened = false;  // a connection was open before: a new one may have missed events

function url() {
  const params = new URLSearchParams();
  if (lastSeq !== null) params.set("since", String(lastSeq));
  for (const id of logs) params.append("logs", String(id));
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const query = params.toString();
  return `${scheme}://${location.host}/ws${query ? `?${query}` : ""}`;
}

function setConnection(value) {
  if (state.connection !== value) {
    state.connection = value;
    notify("connection");
  }
}

/** Open the connection (again). */
export function connect() {
  setConnection("connecting");
  socket = new WebSocket(url());
  socket.addEventListener("open", () => {
    retry = 0;
    setConnection("open");
    // with no seq heard yet there was no ?since=, so the server cannot say resync: say it here
    if (opened && lastSeq === null) receive({ event: "resync", data: {} });
    opened = true;
  });
  socket.addEventListener("message", (event) => {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    if (message.event === "ping") return;
    if (typeof message.seq === "number") lastSeq = message.seq;
    receive(message);
  });
  socket.addEventListener("close", () => {
    socket = null;
    if (switching) {  // not an outage: no "offline" state, no backoff
      switching = false;
      connect();
      return;
    }
    setConnection("closed");
    retry = Math.min(retry + 1, 6);
    setTimeout(connect, Math.min(500 * 2 ** retry, 15000));
  });
}

/**
 * Follow the live log of these task ids (task:log is sent only to those who ask):
 * reconnects with the new ?logs= list, replaying what was missed meanwhile.
 * @param {number[]} taskIds
 */
export function followLogs(taskIds) {
  const next = new Set(taskIds);
  if (next.size === logs.size && [...next].every((id) => logs.has(id))) return;
  logs = next;
  if (socket) {
    switching = true;  // the close handler reconnects with the new list
    const current = socket;
    if (current.readyState === WebSocket.CONNECTING) {
      current.addEventListener("open", () => current.close(), { once: true });  // closing now warns
    } else {
      current.close();
    }
  }
}
