"""Limits before authentication (design.md §11): request bodies are capped on the decoded
stream in every framing, request headers and idle keep-alive connections have deadlines,
and open connections are capped below the file limit. Everything here goes through a real
socket to a live server."""
import contextlib
import http.client
import json
import os
import socket

import gevent
import pytest
from gevent import pywsgi

import taskboard
from conftest import wait_for

TOKEN = "limits-token"
MIB = 1024 * 1024


def bearer() -> dict:
    """The header a request to a guarded path needs (none while the board has no token)."""
    token = taskboard.runtime.config["token"]
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def auth() -> str:
    """bearer() as a raw header line."""
    return "".join(f"{name}: {value}\r\n" for name, value in bearer().items())


def chunked(data: bytes, size: int = 64 * 1024) -> bytes:
    """data in Transfer-Encoding: chunked framing."""
    parts = (data[i:i + size] for i in range(0, len(data), size))
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def head(method: str, path: str, lines: str = "", content_type="application/json") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
            f"{lines}\r\n").encode()


class Raw:
    """One client connection that writes bytes as given and reads responses by hand."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buffer = b""
        self.pusher = None

    def send(self, request_head: bytes, body: bytes = b""):
        """Send the head, then the body from another greenlet: the server may stop reading
        it, and the response must still be read."""
        self.sock.sendall(request_head)
        if body:
            self.pusher = gevent.spawn(self._push, body)

    def _push(self, body):
        with contextlib.suppress(OSError):
            self.sock.sendall(body)

    def _recv(self):
        data = self.sock.recv(256 * 1024)
        if not data:
            raise EOFError("the server closed the connection")
        self.buffer += data

    def response(self):
        """(status, headers, parsed JSON body) of the next response."""
        while b"\r\n\r\n" not in self.buffer:
            self._recv()
        top, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = top.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
        length = int(headers.get("content-length", 0))
        while len(self.buffer) < length:
            self._recv()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split()[1]), headers, json.loads(body) if body else None

    def rest(self) -> bytes:
        """Everything the server sends until it closes the connection."""
        try:
            while True:
                self._recv()
        except (EOFError, ConnectionResetError):
            return self.buffer

    def close(self):
        if self.pusher is not None:
            self.pusher.kill()
        self.sock.close()


@pytest.fixture
def raw(live):
    conns = []

    def connect():
        conns.append(Raw(live.port))
        return conns[-1]
    yield connect
    for conn in conns:
        conn.close()


@pytest.fixture
def body_read(monkeypatch):
    """[bytes of request bodies the server has read so far (after de-chunking)]."""
    total = [0]
    read, readline = pywsgi.Input.read, pywsgi.Input.readline

    def counted_read(self, length=None):
        data = read(self, length)
        total[0] += len(data)
        return data

    def counted_readline(self, size=None):
        data = readline(self, size)
        total[0] += len(data)
        return data
    monkeypatch.setattr(pywsgi.Input, "read", counted_read)
    monkeypatch.setattr(pywsgi.Input, "readline", counted_readline)
    return total


def project_body(tmp_path, name="Chunked") -> bytes:
    return json.dumps({"name": name, "slug": name.lower(), "workingDir": str(tmp_path)}).encode()


# --- request bodies ---------------------------------------------------------------

@pytest.mark.parametrize("coding", ["chunked", "Chunked"])
def test_chunked_json_body_is_accepted_and_the_connection_kept(live, raw, tmp_path, coding):
    """Regression: gevent de-chunks the body and bottle tried to de-chunk it again, so every
    chunked JSON request was answered 400."""
    conn = raw()
    conn.send(head("POST", "/api/projects", f"Transfer-Encoding: {coding}\r\n{auth()}"),
              chunked(project_body(tmp_path), size=7))
    status, _, project = conn.response()
    assert status == 201 and project["name"] == "Chunked"
    conn.send(head("GET", "/api/projects", auth()))
    status, _, projects = conn.response()
    assert status == 200 and [p["id"] for p in projects] == [project["id"]]


def test_chunked_body_of_exactly_the_cap_is_accepted(live, raw):
    raw_body = b'{"language": "tr"}'
    conn = raw()
    conn.send(head("PUT", "/api/settings", f"Transfer-Encoding: chunked\r\n{auth()}"),
              chunked(raw_body + b" " * (MIB - len(raw_body))))
    status, _, settings = conn.response()
    assert status == 200 and settings["language"] == "tr"


FRAMINGS = {
    "content-length": lambda body: (f"Content-Length: {len(body)}\r\n", body),
    "chunked": lambda body: ("Transfer-Encoding: chunked\r\n", chunked(body)),
    "Chunked": lambda body: ("Transfer-Encoding: Chunked\r\n", chunked(body)),
    # what bottle decoded again after gevent, reading it all before any limit applied
    "chunked twice": lambda body: ("Transfer-Encoding: chunked\r\n", chunked(chunked(body))),
}


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize("path", ["/api/login", "/api/projects"])
def test_body_over_the_cap_is_413_and_reading_stops(live, raw, tb, body_read, path, framing):
    """8 MiB in any framing: 413, at most the cap (1 MiB) + 1 byte read, and the connection
    closed rather than the rest read. /api/login is open, so this is before any login."""
    tb.config["token"] = TOKEN
    lines, body = FRAMINGS[framing](b'{"token": "' + b"x" * (8 * MIB) + b'"}')
    conn = raw()
    conn.send(head("POST", path, lines + auth()), body)
    status, headers, error = conn.response()
    assert (status, error["code"]) == (413, "payload_too_large")
    assert headers["connection"] == "close"
    assert conn.rest() == b"", "the connection closes after the answer"
    assert body_read[0] <= taskboard.MAX_BODY_BYTES + 1


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_unauthenticated_body_is_refused_without_being_read(live, raw, tb, body_read, framing):
    tb.config["token"] = TOKEN
    lines, body = FRAMINGS[framing](b"x" * (8 * MIB))
    conn = raw()
    conn.send(head("POST", "/api/projects", lines), body)
    status, _, error = conn.response()
    assert (status, error["code"]) == (401, "unauthorized")
    assert conn.rest() == b""
    assert body_read[0] == 0


SMUGGLED = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.mark.parametrize("lines", [
    "Transfer-Encoding: chunked, chunked\r\n",
    "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    "Transfer-Encoding: chunked\r\nContent-Length: 12\r\n",
    "Content-Length: 12\r\nTransfer-Encoding: chunked\r\n",
    "Content-Length: 12\r\nContent-Length: 13\r\n",
    "Content-Length: +12\r\n",
    "Transfer-Encoding: gzip, chunked\r\n",
    "Transfer-Encoding: identity\r\n",
    "Transfer-Encoding:\r\n",
], ids=["chunked,chunked", "TE twice", "TE then CL", "CL then TE", "CL twice", "CL +12",
        "gzip", "identity", "TE empty"])
def test_ambiguous_or_unsupported_framing_is_400_and_closes(live, raw, body_read, lines):
    """Framings two parsers could read differently (request smuggling): refused before any
    of the body is read, and the connection closed, so no byte of it is taken for a next
    request."""
    conn = raw()
    conn.send(head("POST", "/api/projects", lines + auth()), chunked(b'{"a": 1}') + SMUGGLED)
    status, headers, error = conn.response()
    assert (status, error["code"]) == (400, "validation_error"), error
    assert "Traceback" not in error["error"] and headers["connection"] == "close"
    assert conn.rest() == b"", "nothing answers the request hidden in the body"
    assert body_read[0] == 0


def test_malformed_chunked_body_is_400_and_closes(live, raw):
    conn = raw()
    conn.send(head("POST", "/api/projects", f"Transfer-Encoding: chunked\r\n{auth()}"),
              b"5\r\n{\"a\":\r\nzz\r\n1}\r\n0\r\n\r\n" + SMUGGLED)
    status, headers, error = conn.response()
    assert (status, error["code"]) == (400, "validation_error"), error
    assert "Traceback" not in error["error"] and headers["connection"] == "close"
    assert conn.rest() == b""


def multipart(data: bytes, boundary="b0und4ry") -> tuple[str, bytes]:
    content = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
               f"filename=\"data.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"
               ).encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", content


@pytest.fixture
def small_uploads(monkeypatch):
    """Attachments of at most 256 KiB, so that over-the-cap bodies stay quick to send."""
    monkeypatch.setattr(taskboard, "MAX_UPLOAD_BYTES", 256 * 1024)
    return 256 * 1024 + taskboard.UPLOAD_SLACK_BYTES


def test_chunked_upload_is_stored(live, raw, api, small_uploads):
    task = api.task(api.project()["id"])
    content_type, body = multipart(bytes(range(256)) * 512)
    conn = raw()
    conn.send(head("POST", f"/api/tasks/{task['id']}/attachments",
                   f"Transfer-Encoding: chunked\r\n{auth()}", content_type), chunked(body))
    status, _, attachment = conn.response()
    assert status == 201 and attachment["size"] == 256 * 512
    stored = api.client.get(f"/api/attachments/{attachment['id']}").body
    assert stored == bytes(range(256)) * 512


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_upload_over_the_cap_is_413_and_reading_stops(live, raw, api, tb, body_read,
                                                      small_uploads, framing):
    task = api.task(api.project()["id"])
    content_type, body = multipart(b"x" * (8 * MIB))
    lines, body = FRAMINGS[framing](body)
    conn = raw()
    conn.send(head("POST", f"/api/tasks/{task['id']}/attachments", lines + auth(),
                   content_type), body)
    status, _, error = conn.response()
    assert (status, error["code"]) == (413, "payload_too_large")
    assert conn.rest() == b""
    assert body_read[0] <= small_uploads + 1
    assert api.client.get(f"/api/tasks/{task['id']}/detail").json["attachments"] == []


# --- deadlines ---------------------------------------------------------------------

def trickle(sock, data: bytes, every: float) -> bool:
    """A slow client: one byte of data every `every` seconds, until the server closes the
    connection (True) or all of data is sent (False)."""
    try:
        for byte in data:
            sock.send(bytes([byte]))
            gevent.sleep(every)  # the slowness under test, not a wait for a condition
    except OSError:
        return True
    return False


def test_headers_must_arrive_within_the_header_deadline(live, raw, monkeypatch):
    monkeypatch.setattr(taskboard, "HEADER_TIMEOUT_SECONDS", 0.3)
    slow = raw()
    endless = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 100_000
    sender = gevent.spawn(trickle, slow.sock, endless, 0.02)
    assert slow.rest() == b"", "closed without an answer, though a byte came every 20 ms"
    sender.kill()
    conn = raw()
    conn.send(head("GET", "/api/health"))
    assert conn.response()[0] == 200


@pytest.mark.parametrize("signed_in", [True, False])
def test_a_body_must_arrive_within_its_deadline_else_408_and_closed(live, raw, tb, tmp_path,
                                                                     monkeypatch, signed_in):
    """Security probe v4 (issue 43): headers, then one body byte every few seconds, held a
    connection forever, before any credential. Now the body has BODY_TIMEOUT_SECONDS: a
    request the board reads gets 408; one refused unread (no credential) gets its 401, and
    the connection closes at the deadline instead of waiting for the rest."""
    monkeypatch.setattr(taskboard, "BODY_TIMEOUT_SECONDS", 0.5)
    tb.config["token"] = TOKEN
    body = project_body(tmp_path)
    auth = f"Authorization: Bearer {TOKEN}\r\n" if signed_in else ""
    slow = raw()
    slow.send(head("POST", "/api/projects", f"{auth}Content-Length: {len(body)}\r\n"))
    sender = gevent.spawn(trickle, slow.sock, body, 0.05)
    try:
        status, headers, error = slow.response()
        assert (status, error["code"]) == ((408, "request_timeout") if signed_in else
                                           (401, "unauthorized")), error
        assert slow.rest() == b"", "the connection closes"
    finally:
        sender.kill()
    conn = raw()  # a body sent in time is read as ever
    conn.send(head("POST", "/api/projects", f"Authorization: Bearer {TOKEN}\r\n"
                   f"Content-Length: {len(body)}\r\n"), body)
    assert conn.response()[0] == 201


def test_slow_bodies_do_not_keep_health_from_answering(live, raw, tb, monkeypatch):
    """200 connections trickling bodies (before any credential) while health answers, and
    each is closed by the body deadline."""
    monkeypatch.setattr(taskboard, "BODY_TIMEOUT_SECONDS", 1.0)
    closed = []

    def slow_body(i):
        conn = raw()
        conn.send(head("POST", "/api/projects", "Content-Length: 1000\r\n"))
        if trickle(conn.sock, b"x" * 1000, 0.2):
            closed.append(i)
    clients = [gevent.spawn(slow_body, i) for i in range(200)]
    try:
        health = http.client.HTTPConnection("127.0.0.1", live.port, timeout=30)
        health.request("GET", "/api/health")
        assert health.getresponse().status == 200
        health.close()
        wait_for(lambda: len(closed) == 200, 30, message="every slow body to be cut off")
    finally:
        gevent.killall(clients)


def test_idle_keep_alive_closes_but_websocket_stays(live, raw, api, monkeypatch):
    monkeypatch.setattr(taskboard, "HEADER_TIMEOUT_SECONDS", 0.3)
    monkeypatch.setattr(taskboard, "IDLE_TIMEOUT_SECONDS", 0.3)
    ws = live.ws()  # idle from here on: the server sends its first ping after 25 s
    conn = raw()
    for _ in range(2):  # a request within the idle time is served on the same connection
        conn.send(head("GET", "/api/health"))
        assert conn.response()[0] == 200
    assert conn.rest() == b"", "the idle keep-alive connection is closed"
    task = api.task(api.project()["id"])
    assert ws.until("task:created")["data"]["id"] == task["id"], \
        "the websocket, idle for longer, was not cut"


# --- connection cap -----------------------------------------------------------------

SLOW = 300


def open_fds() -> int | None:
    """How many descriptors this process has open (None where /proc does not say)."""
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None


def test_slow_client_flood_leaves_health_and_writes_working(live, api, monkeypatch):
    """300 clients that trickle header bytes and never finish; the server holds at most
    `max_connections` of them, the rest and new clients wait in the listen backlog, and the
    header deadline frees the slots: /api/health and a write still answer."""
    monkeypatch.setattr(taskboard, "HEADER_TIMEOUT_SECONDS", 0.5)
    cap = live.server.max_connections = 50
    project = api.project()
    before = api.task(project["id"], title="Before the flood")
    fds = open_fds()
    socks, closed = [], []

    def slow_client(i):
        sock = socket.create_connection(("127.0.0.1", live.port), timeout=30)
        socks.append(sock)
        if trickle(sock, b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "
                   + b"a" * 1000, 0.1):
            closed.append(i)
    clients = [gevent.spawn(slow_client, i) for i in range(SLOW)]
    try:
        wait_for(lambda: len(socks) == SLOW, 30, message="every slow client to connect")
        wait_for(lambda: live.server.connections == cap, message="the server at its cap")
        if fds is not None:  # ours to the server, and the server's at most `cap`
            assert open_fds() <= fds + SLOW + cap + 5, "more descriptors than the cap"

        health = http.client.HTTPConnection("127.0.0.1", live.port, timeout=60)
        health.request("GET", "/api/health")
        response = health.getresponse()
        assert (response.status, json.loads(response.read())["ok"]) == (200, True)
        closed_before_health = len(closed)
        headers = {"Content-Type": "application/json"} | bearer()
        health.request("POST", f"/api/projects/{project['id']}/tasks",
                       json.dumps({"title": "During the flood"}), headers)
        response = health.getresponse()
        assert response.status == 201, response.read()
        during = json.loads(response.read())
        health.close()

        assert closed_before_health >= SLOW - 2 * cap, \
            "health waited in the backlog while the header deadline freed slots"
        wait_for(lambda: len(closed) == SLOW, 30, message="every slow client to be closed")
        titles = {t["id"]: t["title"] for t in api.client.get(
            f"/api/projects/{project['id']}/tasks").json}
        assert titles == {before["id"]: "Before the flood", during["id"]: "During the flood"}
    finally:
        gevent.killall(clients)
        for sock in socks:
            sock.close()


def refuse(which, value):
    raise ValueError("not permitted")


def test_file_limit_is_raised_and_connections_capped_below_it(tb, monkeypatch):
    resource = pytest.importorskip("resource")
    limits = {"now": (1024, 4096)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits["now"])
    monkeypatch.setattr(resource, "setrlimit",
                        lambda which, value: limits.update(now=value))
    server = taskboard.make_server("127.0.0.1", 0)
    try:
        assert limits["now"] == (4096, 4096), "the soft limit is raised to the hard one"
        assert 0 < server.max_connections <= 4096 - taskboard.FD_RESERVE
        monkeypatch.setattr(resource, "setrlimit", refuse)
        limits["now"] = (200, 1000)
        small = taskboard.make_server("127.0.0.1", 0)
        assert 0 < small.max_connections < 200, "a limit that cannot be raised still caps"
        small.close()
    finally:
        server.close()
