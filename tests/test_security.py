"""The security model of design.md §11: a token always, sessions, rate limits, fetch
metadata, proxies, Host and Origin checks."""
import http.client
import socket
import time

import pytest
import websocket
import webtest

import taskboard
from conftest import assert_error, bearer


def token():
    return taskboard.runtime.config["token"]


def login(app, given, peer="127.0.0.1", **kw):
    return app.post_json("/api/login", {"token": given}, extra_environ={"REMOTE_ADDR": peer},
                         **kw)


@pytest.fixture
def no_auth(tb):
    """The board as --no-auth runs it (loopback only, no token)."""
    tb.config.update(no_auth=True, token=None)
    return webtest.TestApp(taskboard.app, extra_environ={
        "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1:4000"})


# --- a token always ------------------------------------------------------------------------

def test_a_new_board_makes_a_private_token_and_keeps_it(tmp_path):
    config = taskboard.parse_args(["--db", str(tmp_path / "data" / "t.db")], environ={})
    taskboard.init(config)
    try:
        made = token()
        data = tmp_path / "data"
        assert len(made) >= taskboard.TOKEN_MIN_LENGTH
        assert (data / "token").read_text().strip() == made
        assert oct((data / "token").stat().st_mode & 0o777) == "0o600"
        assert oct(data.stat().st_mode & 0o777) == "0o700"
        assert oct((data / "t.db").stat().st_mode & 0o777) == "0o600"
    finally:
        taskboard.shutdown()
    again = taskboard.parse_args(["--db", str(tmp_path / "data" / "t.db")], environ={})
    taskboard.init(again)
    try:
        assert token() == made
    finally:
        taskboard.shutdown()


def test_a_given_token_or_token_file_is_used_and_a_short_one_refused(tmp_path, capsys):
    long_token = "a-long-enough-token-0123456789"
    given = taskboard.parse_args(["--db", str(tmp_path / "t.db")],
                                 environ={"TASKBOARD_TOKEN": long_token})
    assert given["token"] == long_token and not given["token_on_command_line"]
    assert taskboard.parse_args(["--token", long_token], environ={})["token_on_command_line"]
    path = tmp_path / "token.txt"
    path.write_text(long_token + "\n")
    path.chmod(0o600)
    config = taskboard.parse_args(["--db", str(tmp_path / "t.db"), "--token-file", str(path)],
                                  environ={})
    assert taskboard.load_token(config) == long_token
    for argv in (["--token", "short"], ["--no-auth", "--host", "0.0.0.0"],
                 ["--no-auth", "--token", long_token]):
        with pytest.raises(SystemExit):
            taskboard.parse_args(argv, environ={})
        assert capsys.readouterr().err
    assert taskboard.parse_args(["--no-auth", "--host", "::1"], environ={})["no_auth"]


@pytest.mark.parametrize("path", ["/api/projects", "/api/settings", "/api/stats/agent-usage",
                                  "/api/openapi.json"])
def test_no_credential_is_401(anonymous, path):
    assert_error(anonymous.get(path, status=401), 401, "unauthorized")


def test_a_wrong_bearer_is_401_and_the_right_one_passes(anonymous):
    anonymous.get("/api/projects", headers={"Authorization": "Bearer nope"}, status=401)
    anonymous.get("/api/projects", headers={"Authorization": "Basic eDp5"}, status=401)
    assert anonymous.get("/api/projects", headers=bearer()).json == []


def test_health_and_login_stay_open_and_health_hides_the_agent_command(anonymous, tb):
    health = anonymous.get("/api/health").json
    assert health["ok"] is True and set(health["agent"]) == {"found", "version", "checking"}
    assert tb.config["agent_command"] not in anonymous.get("/api/health").text
    assert_error(login(anonymous, "wrong", status=401), 401, "unauthorized")


def test_a_login_makes_a_session_that_logout_revokes(anonymous, snapshot):
    before = snapshot()
    response = login(anonymous, token())
    cookie = response.headers["Set-Cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert token() not in cookie
    session = anonymous.cookies[taskboard.SESSION_COOKIE]
    assert anonymous.get("/api/projects").json == []  # the cookie jar now carries it
    anonymous.post("/api/logout", headers={"Content-Type": "application/json"})
    anonymous.get("/api/projects", status=401)
    # the cookie itself, replayed after the logout, is refused: the session is gone
    anonymous.set_cookie(taskboard.SESSION_COOKIE, session)
    refused = anonymous.get("/api/projects", status=401)
    assert "Max-Age=0" in refused.headers["Set-Cookie"], "the stale cookie is cleared"
    assert snapshot() == before


def test_logout_deletes_the_cookie_with_the_session_cookies_attributes(anonymous):
    login(anonymous, token())
    deleted = anonymous.post("/api/logout", headers={"Content-Type": "application/json"})
    cookie = deleted.headers["Set-Cookie"].lower()
    assert "max-age=0" in cookie and "httponly" in cookie and "samesite=strict" in cookie


def test_every_api_answer_is_nosniff(client, anonymous):
    """Pages and attachments had it; the API's JSON answers (errors too) did not."""
    for response in (client.get("/api/projects"), client.get("/api/openapi.json"),
                     anonymous.get("/api/health"), anonymous.get("/api/projects", status=401),
                     client.get("/api/nope", status=404),
                     client.post_json("/api/projects", {}, status=400)):
        assert response.headers["X-Content-Type-Options"] == "nosniff", response.request.url


def test_a_request_with_two_host_headers_is_400(live):
    with socket.create_connection(("127.0.0.1", live.port), timeout=5) as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Host: attacker.example\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), head
    assert b"nosniff" in head.lower() and b"host is given more than once" in body


def test_sessions_survive_a_restart_but_not_a_new_token(tmp_path):
    config = taskboard.parse_args(["--db", str(tmp_path / "data" / "t.db")], environ={})
    taskboard.init(config)
    app = webtest.TestApp(taskboard.app, extra_environ={"HTTP_HOST": "127.0.0.1:4000",
                                                        "REMOTE_ADDR": "127.0.0.1"})
    try:
        login(app, token())
    finally:
        taskboard.shutdown()
    for env, status in (({}, 200), ({"TASKBOARD_TOKEN": "another-token-0123456789abc"}, 401)):
        taskboard.init(taskboard.parse_args(["--db", str(tmp_path / "data" / "t.db")],
                                            environ=env))
        try:
            app.get("/api/projects", status=status)
        finally:
            taskboard.shutdown()


def test_the_login_url_signs_the_browser_in_and_drops_the_token(anonymous):
    response = anonymous.get(f"/login?token={token()}", status=303)
    assert response.headers["Location"].endswith("/") and token() not in \
        response.headers["Location"]
    assert anonymous.get("/api/projects").json == []
    wrong = webtest.TestApp(taskboard.app, extra_environ={"HTTP_HOST": "127.0.0.1:4000",
                                                          "REMOTE_ADDR": "192.0.2.1"})
    page = wrong.get("/login?token=guess", status=401)
    assert page.content_type == "text/html" and "set-cookie" not in \
        {k.lower() for k in page.headers}


def test_desktop_commands_need_the_token_even_from_this_machine(anonymous, client, api):
    """A proxy that adds no forwarded header makes every request look local: the token is
    what keeps the desktop commands closed then."""
    task = api.task(api.project()["id"])
    assert_error(anonymous.post_json("/api/desktop/get_task_events", {"taskId": task["id"]},
                                     status=401), 401, "unauthorized")
    assert client.post_json("/api/desktop/get_task_events", {"taskId": task["id"]}).json == []


def test_refused_create_without_token_changes_nothing(anonymous, snapshot, tmp_path):
    before = snapshot()
    anonymous.post_json("/api/projects",
                        {"name": "X", "slug": "x", "workingDir": str(tmp_path)}, status=401)
    assert snapshot() == before


def test_ws_needs_a_credential(live):
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        live.ws(headers={})
    assert refused.value.status_code == 401
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        live.ws(headers={"Authorization": "Bearer wrong"})
    assert refused.value.status_code == 401
    live.ws().conn.close()


# --- --no-auth: an explicit opt-out that keeps every other protection -----------------------

def test_no_auth_serves_without_a_credential_but_never_with_a_bad_one(no_auth):
    assert no_auth.get("/api/projects").json == []
    assert_error(no_auth.get("/api/projects", headers={"Authorization": "Bearer guess"},
                             status=401), 401, "unauthorized")


def test_a_revoked_run_token_is_401_not_anonymous(no_auth, tb):
    tb.run_tokens["run-token-for-the-test-0123"] = {"project_id": 1, "task_id": 1}
    headers = {"Authorization": "Bearer run-token-for-the-test-0123"}
    no_auth.get("/api/projects/1/tasks", headers=headers, status=(200, 404))
    del tb.run_tokens["run-token-for-the-test-0123"]
    assert_error(no_auth.get("/api/projects/1/tasks", headers=headers, status=401), 401)


@pytest.mark.parametrize("header", ["Forwarded", "X-Forwarded-For", "X-Real-IP"])
def test_no_auth_refuses_proxied_requests(no_auth, header):
    response = no_auth.get("/api/projects", headers={header: "for=203.0.113.9"}, status=403)
    assert_error(response, 403, "forbidden")


def test_proxied_request_with_token_is_allowed(client):
    client.get("/api/projects", headers={"X-Forwarded-For": "203.0.113.9"}, status=200)


# --- requests from other sites, methods ---------------------------------------------------

def test_foreign_origin_on_a_write_is_403_and_own_origin_passes(client, tmp_path, snapshot):
    before = snapshot()
    body = {"name": "X", "slug": "x", "workingDir": str(tmp_path)}
    client.post_json("/api/projects", body, headers={"Origin": "http://evil.example"},
                     status=403)
    assert snapshot() == before
    client.post_json("/api/projects", body, headers={"Origin": "http://127.0.0.1:4000"},
                     status=201)


def test_cross_site_requests_are_refused_but_links_to_pages_work(client, snapshot, tmp_path):
    before = snapshot()
    cross = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}
    assert_error(client.get("/api/projects", headers=cross, status=403), 403, "forbidden")
    client.post_json("/api/projects", {"name": "X", "slug": "x", "workingDir": str(tmp_path)},
                     headers=cross, status=403)
    client.get("/api/projects", headers={**cross, "Sec-Fetch-Mode": "navigate"}, status=403)
    client.get("/static/css/base.css", headers={**cross, "Sec-Fetch-Mode": "no-cors",
                                            "Sec-Fetch-Dest": "style"}, status=403)
    assert snapshot() == before
    client.get("/", headers={**cross, "Sec-Fetch-Mode": "navigate"}, status=200)
    client.get("/api/projects", headers={"Sec-Fetch-Site": "same-origin"}, status=200)


@pytest.mark.parametrize("method", ["post", "Post", "PROPFIND", "TRACE"])
def test_methods_are_compared_exactly(live, method, snapshot, tmp_path):
    """RFC 9110: methods are case-sensitive. "post" must not pass as POST without the
    Origin check a POST gets."""
    before = snapshot()
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=5)
    try:
        conn.request(method, "/api/projects", body=b'{"name": "X", "slug": "x", '
                     b'"workingDir": "/tmp"}', headers={**bearer(), "Origin": "http://evil.example",
                                                        "Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 405, response.read()
    finally:
        conn.close()
    assert snapshot() == before


# --- wrong credentials are rate-limited per client and in total ------------------------------

def test_failed_logins_are_rate_limited_per_client(anonymous, monkeypatch):
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED):
        login(anonymous, "guess", status=401)
    refused = login(anonymous, "another guess", status=429)
    assert_error(refused, 429, "rate_limited")
    assert 1 <= int(refused.headers["Retry-After"]) <= taskboard.LOGIN_WINDOW_SECONDS + 1
    assert "set-cookie" not in {k.lower() for k in refused.headers}
    login(anonymous, "guess", peer="192.0.2.7", status=401), "another client"
    later = time.monotonic() + taskboard.LOGIN_WINDOW_SECONDS + 1
    monkeypatch.setattr(taskboard.time, "monotonic", lambda: later)
    login(anonymous, "guess", status=401), "the window has passed"


def test_a_successful_login_forgets_earlier_failures(anonymous):
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED - 1):
        login(anonymous, "guess", status=401)
    login(anonymous, token(), status=200)
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED - 1):
        login(anonymous, "guess", status=401)
    login(anonymous, token(), status=200)


@pytest.mark.parametrize("guess", [{"Authorization": "Bearer guess"},
                                   {"Cookie": f"{taskboard.SESSION_COOKIE}=guess"}])
def test_bearer_and_cookie_guesses_are_rate_limited(anonymous, guess):
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED):
        anonymous.get("/api/projects", headers=guess, status=401)
    assert_error(anonymous.get("/api/projects", headers=guess, status=429), 429,
                 "rate_limited")
    anonymous.get("/api/projects", headers=guess, extra_environ={"REMOTE_ADDR": "192.0.2.8"},
                  status=401)


def test_a_valid_credential_is_never_refused_for_failures_from_its_address(anonymous):
    """Issue 32: any local program (an agent too) sent five wrong bearers a minute and the
    owner's own bearer, session and login from that address got 429. The credential is
    checked first; only wrong ones are counted and made to wait."""
    session = login(anonymous, token()).headers["Set-Cookie"].split(";")[0]
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED):
        anonymous.get("/api/projects", headers={"Authorization": "Bearer guess"}, status=401)
    anonymous.get("/api/projects", headers={"Authorization": "Bearer guess"}, status=429)
    assert anonymous.get("/api/projects", headers=bearer()).json == []
    assert anonymous.get("/api/projects", headers={"Cookie": session}).json == []
    assert login(anonymous, token()).json == {"ok": True}


def test_guesses_from_many_clients_meet_a_limit_in_total(anonymous):
    for n in range(taskboard.LOGIN_FAILURES_TOTAL):
        login(anonymous, "guess", peer=f"198.51.100.{n % 250 + 1}", status=401)
    login(anonymous, "guess", peer="198.51.100.1", status=429)
    login(anonymous, token(), peer="192.0.2.9", status=200), "a client that never failed"


def test_behind_a_trusted_proxy_the_client_is_the_forwarded_address(anonymous, tb):
    tb.config["trusted_proxies"] = [taskboard.ipaddress.ip_network("10.0.0.0/8")]
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED):
        anonymous.post_json("/api/login", {"token": "guess"}, extra_environ=proxy, headers={
            "X-Forwarded-For": "203.0.113.66, 10.0.0.3"}, status=401)
    # the owner, behind the same proxy, is not locked out by the attacker's guesses
    anonymous.post_json("/api/login", {"token": token()}, extra_environ=proxy,
                        headers={"X-Forwarded-For": "198.51.100.20"}, status=200)
    anonymous.post_json("/api/login", {"token": "guess"}, extra_environ=proxy,
                        headers={"X-Forwarded-For": "203.0.113.66"}, status=429)


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
            conn.request("GET", "/api/settings", headers=bearer())
            assert conn.getresponse().read()
        assert len(served) == 1, "the ten requests came on one kept-alive connection"
        assert served[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), \
            "Nagle is on: each response would wait for the client's delayed ACK"
    finally:
        conn.close()


@pytest.mark.parametrize("host", ["attacker.example:4000", "attacker.example", "10.0.0.5:4000",
                                  "127.0.0.1:4517@evil.example", "localhost:x@evil.example"])
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


# --- the board's pages ---------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/", "/login", "/static/login.js", "/static/login.css"])
def test_board_pages_carry_security_headers(client, path):
    response = client.get(path)
    csp = response.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "no-referrer"


def test_login_page_has_no_inline_script_and_is_open(anonymous):
    page = anonymous.get("/login")
    assert page.content_type == "text/html"
    scripts = page.html.find_all("script")
    assert scripts and all(s.get("src") and not s.string for s in scripts)
    assert page.html.find("input", {"type": "password"}) is not None
    assert anonymous.get("/static/login.js").content_type == "text/javascript"


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
