"""Token auth, proxy refusal and Origin checks (design.md §11)."""
import http.client
import socket
import time

import pytest
import websocket
import webtest

import taskboard
from conftest import assert_error

TOKEN = "s3cret-token"


@pytest.fixture
def secured(tb):
    tb.config["token"] = TOKEN
    return webtest.TestApp(taskboard.app, extra_environ={
        "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1:4000"})


@pytest.mark.parametrize("path", ["/api/projects", "/api/settings", "/api/stats/agent-usage",
                                  "/api/openapi.json"])
def test_token_missing_is_401(secured, path):
    assert_error(secured.get(path, status=401), 401, "unauthorized")


def test_token_wrong_bearer_is_401_and_right_bearer_passes(secured):
    secured.get("/api/projects", headers={"Authorization": "Bearer nope"}, status=401)
    assert secured.get("/api/projects",
                       headers={"Authorization": f"Bearer {TOKEN}"}).json == []


def test_health_and_login_stay_open_with_a_token(secured):
    assert secured.get("/api/health").json["ok"] is True
    assert_error(secured.post_json("/api/login", {"token": "wrong"}, status=401), 401,
                 "unauthorized")


def test_login_sets_an_httponly_strict_cookie_that_authorizes(secured, snapshot):
    before = snapshot()
    response = secured.post_json("/api/login", {"token": TOKEN})
    cookie = response.headers["Set-Cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert TOKEN not in cookie
    assert secured.get("/api/projects").json == []  # the cookie jar now carries it
    secured.post("/api/logout", headers={"Content-Type": "application/json"})
    secured.get("/api/projects", status=401)
    assert snapshot() == before


def test_login_cookie_is_secure_only_behind_https(secured):
    plain = secured.post_json("/api/login", {"token": TOKEN}).headers["Set-Cookie"]
    assert "secure" not in plain.lower()
    proxied = secured.post_json("/api/login", {"token": TOKEN}, headers={
        "X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"})
    assert "; secure" in proxied.headers["Set-Cookie"].lower()


def test_refused_create_without_token_changes_nothing(secured, snapshot, tmp_path):
    before = snapshot()
    secured.post_json("/api/projects", {"name": "X", "slug": "x", "workingDir": str(tmp_path)},
                      status=401)
    assert snapshot() == before


@pytest.mark.parametrize("header", ["Forwarded", "X-Forwarded-For", "X-Real-IP"])
def test_proxied_request_without_token_is_403(client, header):
    response = client.get("/api/projects", headers={header: "for=203.0.113.9"}, status=403)
    assert_error(response, 403, "forbidden")


def test_proxied_request_with_token_is_allowed(secured):
    secured.get("/api/projects", headers={"X-Forwarded-For": "203.0.113.9",
                                          "Authorization": f"Bearer {TOKEN}"}, status=200)


def test_foreign_origin_on_a_write_is_403_and_own_origin_passes(client, tmp_path, snapshot):
    before = snapshot()
    body = {"name": "X", "slug": "x", "workingDir": str(tmp_path)}
    client.post_json("/api/projects", body, headers={"Origin": "http://evil.example"},
                     status=403)
    assert snapshot() == before
    client.post_json("/api/projects", body, headers={"Origin": "http://127.0.0.1:4000"},
                     status=201)


def test_ws_needs_the_token(live, tb):
    tb.config["token"] = TOKEN
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        live.ws()
    assert refused.value.status_code == 401
    conn = websocket.create_connection(f"ws://127.0.0.1:{live.port}/ws", timeout=5,
                                       header=[f"Authorization: Bearer {TOKEN}"],
                                       suppress_origin=True)
    conn.close()


def test_non_loopback_bind_generates_a_private_token_once(tmp_path, capsys):
    config = taskboard.parse_args(["--host", "0.0.0.0", "--db", str(tmp_path / "t.db")],
                                  environ={})
    taskboard.ensure_token(config)
    token_file = tmp_path / "token"
    assert config["token"] and token_file.read_text().strip() == config["token"]
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert config["token"] in capsys.readouterr().out
    again = taskboard.parse_args(["--host", "0.0.0.0", "--db", str(tmp_path / "t.db")],
                                 environ={})
    taskboard.ensure_token(again)
    assert again["token"] == config["token"] and config["token"] not in capsys.readouterr().out


def test_keep_alive_responses_do_not_wait_for_delayed_acks(live, monkeypatch):
    """Regression: pywsgi writes headers and body apart; with Nagle on, each small response
    on a keep-alive connection stalled ~40 ms for the client's delayed ACK. The connection
    that serves them all has Nagle off (TCP_NODELAY) while it serves them."""
    served = []
    handle = taskboard.Handler.handle

    def recorded(handler):
        served.append(handler.socket)
        return handle(handler)
    monkeypatch.setattr(taskboard.Handler, "handle", recorded)
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=5)
    try:
        for _ in range(10):
            conn.request("GET", "/api/settings")
            assert conn.getresponse().read()
        assert len(served) == 1, "the ten requests came on one kept-alive connection"
        assert served[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), \
            "Nagle is on: each response would wait for the client's delayed ACK"
    finally:
        conn.close()


@pytest.mark.parametrize("host", ["attacker.example:4000", "attacker.example", "10.0.0.5:4000"])
def test_foreign_host_is_refused_even_with_a_matching_origin(client, host, snapshot, tmp_path):
    """DNS rebinding: a page can point its own name at 127.0.0.1 and send Host and Origin
    that agree with each other."""
    before = snapshot()
    response = client.get("/api/projects", headers={"Host": host}, status=403)
    assert_error(response, 403, "forbidden")
    client.post_json("/api/projects", {"name": "X", "slug": "x", "workingDir": str(tmp_path)},
                     headers={"Host": host, "Origin": f"http://{host}"}, status=403)
    assert snapshot() == before


def test_allowed_hosts_and_the_bound_host_are_accepted(client, tb):
    tb.config["allowed_hosts"] = ["board.lan"]
    tb.config["host"] = "192.168.1.20"
    client.get("/api/projects", headers={"Host": "board.lan:4000"}, status=200)
    client.get("/api/projects", headers={"Host": "192.168.1.20:4000"}, status=200)
    client.get("/api/projects", headers={"Host": "[::1]:4000"}, status=200)


def test_ws_upgrade_with_a_foreign_host_is_refused(live):
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(f"ws://127.0.0.1:{live.port}/ws", timeout=5,
                                    host="attacker.example", suppress_origin=True)
    assert refused.value.status_code == 403


@pytest.mark.parametrize("field,value", [("slug", "demo\n"), ("gitHostRepo", "o/r\n"),
                                         ("prBaseBranch", "main\n")])
def test_patterns_refuse_a_trailing_newline(api, client, field, value):
    project = api.project()
    response = client.put_json(f"/api/projects/{project['id']}", {field: value}, status=400)
    assert_error(response, 400, "validation_error", field)


# --- failed logins are rate-limited per peer -----------------------------------------------

def login(app, token, peer="127.0.0.1", **kw):
    return app.post_json("/api/login", {"token": token}, extra_environ={"REMOTE_ADDR": peer},
                         **kw)


def test_failed_logins_are_rate_limited_per_peer(secured, monkeypatch):
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED):
        login(secured, "guess", status=401)
    refused = login(secured, TOKEN, status=429)  # even the right token must wait
    assert_error(refused, 429, "rate_limited")
    assert 1 <= int(refused.headers["Retry-After"]) <= taskboard.LOGIN_WINDOW_SECONDS + 1
    assert "set-cookie" not in {k.lower() for k in refused.headers}
    assert login(secured, TOKEN, peer="192.0.2.7").json == {"ok": True}, "another peer"
    # once the window has passed, the peer may try again
    later = time.monotonic() + taskboard.LOGIN_WINDOW_SECONDS + 1
    monkeypatch.setattr(taskboard.time, "monotonic", lambda: later)
    assert login(secured, TOKEN).json == {"ok": True}


def test_a_successful_login_forgets_earlier_failures(secured):
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED - 1):
        login(secured, "guess", status=401)
    login(secured, TOKEN, status=200)
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED - 1):
        login(secured, "guess", status=401)
    login(secured, TOKEN, status=200)


# --- the board's pages ---------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/", "/login", "/static/login.js", "/static/login.css"])
def test_board_pages_carry_security_headers(client, path):
    response = client.get(path)
    csp = response.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "no-referrer"


def test_login_page_has_no_inline_script_and_is_open_with_a_token(secured):
    page = secured.get("/login")
    assert page.content_type == "text/html"
    scripts = page.html.find_all("script")
    assert scripts and all(s.get("src") and not s.string for s in scripts)
    assert page.html.find("input", {"type": "password"}) is not None
    assert secured.get("/static/login.js").content_type == "text/javascript"


def test_attachment_downloads_cannot_run_as_pages(client, api, tmp_path):
    project = api.project()
    task = api.task(project["id"])
    uploaded = client.post(f"/api/tasks/{task['id']}/attachments", upload_files=[
        ("file", "evil.html", b"<script>alert(1)</script>", "text/html")]).json
    response = client.get(f"/api/attachments/{uploaded['id']}")
    assert response.headers["Content-Disposition"].startswith("attachment")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response.headers["Content-Security-Policy"]


# --- WebSocket message size ----------------------------------------------------------------

def test_a_huge_websocket_message_ends_only_that_connection(live, api):
    big = live.ws()
    small = live.ws()
    big.conn.send("x" * (taskboard.WS_MAX_MESSAGE_BYTES + 1))
    with pytest.raises((websocket.WebSocketConnectionClosedException, ConnectionError,
                        OSError)):
        for _ in range(3):  # the server closes it; reading then fails
            big.next(timeout=5)
    project = api.project()
    assert small.until("project:created")["data"]["id"] == project["id"]
    small.conn.send("x" * 1000)  # a small message is fine
    api.project()
    assert small.until("project:created")["data"]["id"] != project["id"]


def test_root_is_warned_about(monkeypatch):
    monkeypatch.setattr(taskboard.os, "geteuid", lambda: 0)
    assert taskboard.running_as_root()
    monkeypatch.setattr(taskboard.os, "geteuid", lambda: 1000)
    assert not taskboard.running_as_root()
