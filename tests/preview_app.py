"""A stand-in dev server for the preview tests (design §21): `python preview_app.py PORT`
serves, on 127.0.0.1:PORT, `/` (a page), `/headers` (the request's headers as JSON: what
the proxy sent on), `/echo` (a POST's body length), `/big` (200 KB), `/small.json`,
`/page` (a page that loads /big as an image and fetches /small.json: PAGE), `/hot` (a
WebSocket that echoes each text message: what hot reload needs) and `/raw/<name>` (an
answer written as it is: RAW).  With `--child` it starts
a child that sleeps (a group of two, to prove a stop ends both); with `--pidfile F` it
writes its pid (and its child's) there."""
import base64
import hashlib
import http.server
import json
import os
import struct
import subprocess
import sys
import time

BIG = b"x" * 200_000
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: A page the agent could have written: with the person's cookie, it reads and changes the
#: board (?board=<its URL>) and opens its /ws; what it got is written in #result.
HOSTILE = r"""<!doctype html><title>hostile</title><pre id="result">running</pre><script>
const board = new URLSearchParams(location.search).get("board");
const out = [];
const note = (what) => {
  out.push(what);
  document.getElementById("result").textContent = "running\n" + out.join("\n");
};
async function attempt(name, url, options) {
  try {
    const r = await fetch(board + url, { credentials: "include", ...options });
    note(name + " " + r.status + " " + (await r.text()).slice(0, 80));
  } catch (error) { note(name + " refused " + error.name); }
}
(async () => {
  await attempt("read", "/api/projects");
  await attempt("write", "/api/projects", { method: "POST",
    headers: { "Content-Type": "text/plain" },
    body: JSON.stringify({ name: "stolen", slug: "stolen", workingDir: "/" }) });
  await attempt("blind", "/api/projects", { method: "POST", mode: "no-cors",
    body: JSON.stringify({ name: "blind", slug: "blind", workingDir: "/" }) });
  await new Promise((done) => {
    const ws = new WebSocket(board.replace("http", "ws") + "/ws");
    ws.onopen = () => { note("ws open"); ws.close(); done(); };
    ws.onerror = () => { note("ws refused"); done(); };
  });
  document.getElementById("result").textContent = "done\n" + out.join("\n");
})();
</script>"""

#: A page as an app's (bench/preview.py): a 200 KB asset (/big, an image that will not
#: decode: its bytes still come) and a fetched small JSON.  Once both have arrived and the
#: load event is past, window.arrived holds the ms from navigation start to the later of the
#: two's last byte (Resource Timing's responseEnd), and the title says "arrived".
PAGE = r"""<!doctype html><title>page</title><img src="/big" alt=""><script>
const json = fetch("/small.json").then((r) => r.json());
const loaded = new Promise((done) => addEventListener("load", done));
Promise.all([json, loaded]).then(() => {
  const ends = performance.getEntriesByType("resource")
    .filter((e) => /\/(big|small\.json)$/.test(e.name)).map((e) => e.responseEnd);
  window.arrived = ends.length === 2 ? Math.max(...ends) : -1;
  document.title = "arrived";
});
</script>"""

#: Answers a hostile dev server writes as they are (GET /raw/<name>). Those whose end a
#: reader would have to guess: each followed by what a reader that guessed "chunked" (or
#: the first length) would take for the answer to the next request on the connection.
SMUGGLED = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"
RAW = {
    "both": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"0\r\n\r\n" + SMUGGLED,
    "lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Length: 45\r\n\r\n"
               + SMUGGLED,
    "coding": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"
              + SMUGGLED,
    "folded": b"HTTP/1.1 200 OK\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n"
              b"Content-Length: 0\r\n\r\n" + SMUGGLED,
    "status": b"HTTP/1.1 200 OK\nContent-Length: 0\n\n" + SMUGGLED,
    # and those it relays, or ends: "cut" closes 10 bytes into 100, "eof" at its end, "once"
    # after it (as a dev server closes an idle kept-alive connection, unsaid)
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n"
               b"6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
    "early": b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
             b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "cut": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789",
    "eof": b"HTTP/1.1 200 OK\r\n\r\nup to the close",
    "once": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
}


class App(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # an answer in one write (flushed after each request), Nagle off
    disable_nagle_algorithm = True

    def log_message(self, *args):
        print(self.requestline, flush=True)

    def answer(self, status, body, kind="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/hot" and self.headers.get("Upgrade", "").lower() == "websocket":
            return self.hot()
        if self.path.startswith("/headers"):
            return self.answer(200, json.dumps([[k.lower(), v] for k, v in
                                                self.headers.items()]).encode(),
                               "application/json")
        if self.path.startswith("/raw/"):
            self.wfile.write(RAW[self.path[5:]])
            self.close_connection = self.path[5:] in ("cut", "eof", "once")
            return None
        if self.path.startswith("/hostile"):
            return self.answer(200, HOSTILE.encode(), "text/html")
        if self.path == "/big":
            return self.answer(200, BIG, "application/octet-stream")
        if self.path == "/page":
            return self.answer(200, PAGE.encode(), "text/html")
        if self.path == "/small.json":
            return self.answer(200, b'{"ok": true}', "application/json")
        return self.answer(200, b"<!doctype html><title>app</title><p>the app</p>",
                           "text/html")

    def do_POST(self):
        size = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(size)
        self.answer(200, json.dumps({"received": len(data)}).encode(), "application/json")

    def hot(self):
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            opcode, size = head[0] & 0x0F, head[1] & 0x7F
            if size == 126:
                size = struct.unpack(">H", self.rfile.read(2))[0]
            elif size == 127:
                size = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(size)))
            if opcode == 8:
                return
            reply = b"echo: " + data
            self.wfile.write(bytes([0x81, len(reply)]) + reply)
            self.wfile.flush()


def main():
    port = int(sys.argv[1])
    pids = [os.getpid()]
    if "--child" in sys.argv:
        pids.append(subprocess.Popen([sys.executable, "-c",
                                      "import time; time.sleep(600)"]).pid)
    if "--pidfile" in sys.argv:
        with open(sys.argv[sys.argv.index("--pidfile") + 1], "w") as f:
            f.write(" ".join(map(str, pids)))
    if "--slow" in sys.argv:
        time.sleep(float(sys.argv[sys.argv.index("--slow") + 1]))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), App)
    print(f"listening on {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
