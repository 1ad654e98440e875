"""Preview per task (design §21): a task's dev server on a port of its own, behind a
cookie only the board's one-time link sets, reaching nothing of the board."""
import json
import os
import shlex
import socket
import sys

import pytest
import requests
import websocket

import taskboard
from agent_helpers import RUN, alive, assert_stays
from conftest import assert_error, sql, wait_for

APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "preview_app.py")


def serve(*extra):
    """A previewCommand that runs the stand-in dev server on $PORT."""
    return f"exec {shlex.quote(sys.executable)} {shlex.quote(APP)} \"$PORT\" " + \
        " ".join(shlex.quote(e) for e in extra)


@pytest.fixture
def board(api, client, tmp_path):
    """A project whose previewCommand serves the stand-in app, and a task in testing;
    previews() -> every Preview the board has."""
    pids = tmp_path / "pids"
    project = api.project(previewCommand=serve("--child", "--pidfile", str(pids)))
    task = api.task(project["id"])
    sql(taskboard.runtime, "UPDATE tasks SET status = 'testing' WHERE id = ?", (task["id"],))
    return {"project": project, "task": task, "pids": pids, "url":
            f"/api/tasks/{task['id']}/preview"}


#: The sessions browser() made, closed after each test (a kept connection left open is a
#: ResourceWarning in whichever test collects it).
SESSIONS = []


def browser() -> requests.Session:
    """A requests session keeping cookies as a browser does; closed after the test."""
    SESSIONS.append(requests.Session())
    return SESSIONS[-1]


@pytest.fixture(autouse=True)
def closed_sessions():
    yield
    while SESSIONS:
        SESSIONS.pop().close()


def ready(client, url):
    return wait_for(lambda: (p := client.get(url).json)["status"] != "starting" and p, 30,
                    message="the preview to leave starting")


def opened(client, url):
    """A started, ready preview and a requests session holding its cookie."""
    client.post(url, status=202)
    preview = ready(client, url)
    assert preview["status"] == "ready", preview
    session = browser()
    link = session.get(preview["url"], allow_redirects=False)
    assert link.status_code == 303 and link.headers["Location"] == "/"
    cookie = link.headers["Set-Cookie"]
    port = preview["url"].split(":")[2].split("/")[0]
    assert cookie.startswith(f"tb_preview_{port}=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    return preview, session, f"http://127.0.0.1:{port}"


def group(board):
    return [int(p) for p in wait_for(lambda: board["pids"].exists() and
                                     board["pids"].read_text().split(), 10)]


def test_bad_preview_fields_are_refused_naming_them(api, client):
    project = api.project()
    for field, value in (("previewPath", "app"), ("previewPath", "//evil.example"),
                         ("previewPath", "/a b"), ("previewCommand", "serve\x00"),
                         ("previewCommand", "a\nb"), ("previewCommand", "x" * 2001),
                         ("previewCommand", 3)):
        response = client.put_json(f"/api/projects/{project['id']}", {field: value},
                                   expect_errors=True)
        assert_error(response, 400, field=field)
    assert client.get(f"/api/projects/{project['id']}").json["previewPath"] == "/"
    for field, value in (("maxPreviews", -1), ("previewIdleMinutes", 0)):
        assert_error(client.put_json("/api/settings", {field: value}, expect_errors=True),
                     400, field=field)


def test_a_preview_starts_serves_its_link_and_cookie_and_stops_its_group(board, client):
    url = board["url"]
    ws = None
    preview, session, origin = opened(client, url)
    assert preview["readyAt"] and preview["startedAt"] and "listening on" in preview["output"]
    page = session.get(origin + "/")
    assert page.status_code == 200 and "the app" in page.text
    # without the cookie: 401, whatever else is sent; a link works once
    assert requests.get(origin + "/").status_code == 401
    assert requests.get(origin + "/", headers=taskboard_auth()).status_code == 401
    assert requests.get(preview["url"], allow_redirects=False).status_code == 401
    # the board's cookie, the previews' and Authorization never reach the app
    cookie = "; ".join(f"{c.name}={c.value}" for c in session.cookies)
    sent = dict(requests.get(origin + "/headers", headers={
        "Authorization": "Bearer secret",
        "Cookie": f"taskboard_session=s1; {cookie}; app=kept; tb_preview_1=x"}).json())
    assert "authorization" not in sent
    assert sent["cookie"] == "app=kept", sent
    # a body goes through (and one past the cap does not)
    assert session.post(origin + "/echo", data=b"y" * 5000).json() == {"received": 5000}
    big = session.post(origin + "/echo", data=b"z" * (taskboard.PREVIEW_BODY_BYTES + 10))
    assert big.status_code == 413
    # a WebSocket (hot reload) goes through
    ws = websocket.create_connection(origin.replace("http", "ws") + "/hot", timeout=5,
                                     cookie=cookie)
    ws.send("ping")
    assert ws.recv() == "echo: ping"
    with pytest.raises(websocket.WebSocketBadStatusException):
        websocket.create_connection(origin.replace("http", "ws") + "/hot", timeout=5)
    pids = group(board)
    assert all(alive(p) for p in pids) and len(pids) == 2
    stopped = client.delete(url).json
    assert stopped["status"] == "stopped" and stopped["url"] is None
    wait_for(lambda: not any(alive(p) for p in pids), 10, message="the group to end")
    with pytest.raises(requests.ConnectionError):
        session.get(origin + "/", timeout=5)
    wait_for(lambda: not sql(taskboard.runtime, "SELECT * FROM previews"), 10)
    ws.close()


def test_an_answer_whose_end_would_be_a_guess_is_refused_and_smuggles_nothing(
        board, client):
    """A hostile dev server's framings (preview_app's RAW): what two readers could end in
    two places is a 502 and its connection dropped, so what it hid after is never the next
    answer; chunked, 1xx and up-to-the-close answers go through; one cut short ends the
    client's connection instead of leaving it waiting for the rest."""
    preview, session, origin = opened(client, board["url"])
    for name in ("both", "lengths", "coding", "folded", "status"):
        refused = session.get(f"{origin}/raw/{name}")
        assert refused.status_code == 502 and "cannot be relayed" in refused.text, \
            (name, refused.text)
        assert session.get(origin + "/small.json").json() == {"ok": True}, name
    for name, text in (("chunked", "hello world"), ("early", "ok"), ("eof", "up to the close")):
        answer = session.get(f"{origin}/raw/{name}")
        assert (answer.status_code, answer.text) == (200, text), name
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        session.get(origin + "/raw/cut")
    assert session.get(origin + "/small.json").json() == {"ok": True}
    # a request's folded header line is refused too, before anything reaches the app
    cookie = "; ".join(f"{c.name}={c.value}" for c in session.cookies)
    port = int(origin.rsplit(":", 1)[1])
    for bad in ("X-A: a\r\n Transfer-Encoding: chunked", "X A: a", "X-A: a\x01"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(f"GET /headers HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n"
                        f"{bad}\r\n\r\n".encode())
            assert raw.recv(100).startswith(b"HTTP/1.1 400"), bad
    client.delete(board["url"])


def test_a_kept_connection_the_dev_server_closed_takes_no_request(board, client):
    """Dev servers close idle kept-alive connections unsaid (Node after 5 s): a request
    with a body then goes on a new one instead of being lost on the closed one (502)."""
    preview, session, origin = opened(client, board["url"])
    assert session.get(origin + "/raw/once").text == "ok"
    live = next(iter(taskboard.runtime.previews.by_task.values()))
    wait_for(lambda: live.idle and all(kept.stale() for kept in live.idle), 10,
             message="the board to see the dev server's close")
    assert session.post(origin + "/echo", data=b"x" * 10).json() == {"received": 10}
    client.delete(board["url"])


def taskboard_auth():
    return {"Authorization": f"Bearer {taskboard.runtime.config['token']}"}


def test_the_board_refuses_what_a_preview_page_asks_of_it(board, client, live):
    preview, session, origin = opened(client, board["url"])
    for headers in ({"Origin": origin}, {"Sec-Fetch-Site": "same-site"}):
        for method in ("GET", "POST"):
            answer = requests.request(method, live.url + "/api/projects", headers={
                **taskboard_auth(), **headers}, json={})
            assert answer.status_code == 403, (headers, answer.text)
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            websocket.create_connection(live.url.replace("http", "ws") + "/ws", timeout=5,
                                        header=[f"{k}: {v}" for k, v in
                                                {**taskboard_auth(), **headers}.items()],
                                        suppress_origin="Origin" not in headers,
                                        origin=headers.get("Origin"))
        assert refused.value.status_code == 403
    assert requests.get(live.url + "/api/projects", headers=taskboard_auth()).status_code == 200
    client.delete(board["url"])


def test_the_limit_the_command_and_the_status_are_checked(api, board, client):
    client.put_json("/api/settings", {"maxPreviews": 1})
    client.post(board["url"], status=202)
    other = api.task(board["project"]["id"])
    sql(taskboard.runtime, "UPDATE tasks SET status = 'in_progress' WHERE id = ?",
        (other["id"],))
    assert_error(client.post(f"/api/tasks/{other['id']}/preview", expect_errors=True), 409,
                 field="maxPreviews")
    backlog = api.task(board["project"]["id"])
    assert_error(client.post(f"/api/tasks/{backlog['id']}/preview", expect_errors=True), 409,
                 field="status")
    strict = api.task(api.project(sandbox="bubblewrap", previewCommand="true")["id"])
    sql(taskboard.runtime, "UPDATE tasks SET status = 'testing' WHERE id = ?", (strict["id"],))
    assert_error(client.post(f"/api/tasks/{strict['id']}/preview", expect_errors=True), 409,
                 field="sandbox")  # bubblewrap does not work on the test's board
    bare = api.task(api.project()["id"])
    assert_error(client.post(f"/api/tasks/{bare['id']}/preview", expect_errors=True), 409,
                 field="previewCommand")
    assert_error(client.post("/api/tasks/99999/preview", expect_errors=True), 404)
    assert_error(client.post(f"{board['url'].rsplit('/', 1)[0]}/attempts/1/preview",
                             expect_errors=True), 404)
    pids = group(board)
    client.delete(f"/api/tasks/{board['task']['id']}")  # a deleted task's preview stops
    wait_for(lambda: not any(alive(p) for p in pids), 10, message="the group to end")


@pytest.mark.parametrize("command,why", [
    ("echo 'cannot find vite' >&2; exit 3", "exited with code 3"),
    ("echo 'serving elsewhere'; " + serve().replace('"$PORT"', "0"),  # a port of its own
     "nothing answered HTTP")])
def test_a_command_that_exits_or_never_listens_fails_with_its_output(
        api, client, monkeypatch, command, why):
    monkeypatch.setattr(taskboard, "PREVIEW_READY_SECONDS", 1.0)
    task = api.task(api.project(previewCommand=command)["id"])
    sql(taskboard.runtime, "UPDATE tasks SET status = 'testing' WHERE id = ?", (task["id"],))
    client.post(f"/api/tasks/{task['id']}/preview", status=202)
    failed = ready(client, f"/api/tasks/{task['id']}/preview")
    assert failed["status"] == "failed" and why in failed["error"], failed
    assert ("cannot find vite" if "exit" in command else "serving elsewhere") in failed["output"]
    pid = taskboard.runtime.previews.by_task[(task["id"], None)].proc.pid
    wait_for(lambda: not alive(pid), 10, message="the command to end")
    wait_for(lambda: not sql(taskboard.runtime, "SELECT * FROM previews"), 10)


def test_a_preview_stops_when_idle_and_when_its_task_is_done(board, client, monkeypatch):
    monkeypatch.setattr(taskboard, "SECONDS_PER_MINUTE", 0.5)
    client.put_json("/api/settings", {"previewIdleMinutes": 1})
    ws = taskboard.runtime.events.subscribe()
    preview, session, origin = opened(client, board["url"])
    pids = group(board)
    # a page holding hot reload's WebSocket open is not idle; once it closes, it is
    cookie = "; ".join(f"{c.name}={c.value}" for c in session.cookies)
    hot = websocket.create_connection(origin.replace("http", "ws") + "/hot", timeout=5,
                                      cookie=cookie)
    assert_stays(lambda: client.get(board["url"]).json["status"] == "ready", 1.5,
                 "a preview with an open WebSocket stopped as idle")
    hot.close()
    wait_for(lambda: client.get(board["url"]).json["status"] == "stopped", 10,
             message="the idle preview to stop")
    wait_for(lambda: not any(alive(p) for p in pids), 10, message="the group to end")
    events = [m for m in ws.bus.since(ws) if m.event == "preview:updated"]
    assert [json.loads(m.frame[m.frame.index(b"{"):])["data"]["status"] for m in events] \
        == ["starting", "ready", "stopped"]
    taskboard.runtime.events.unsubscribe(ws)
    board["pids"].unlink()
    client.put_json("/api/settings", {"previewIdleMinutes": 30})
    opened(client, board["url"])
    pids = group(board)
    client.patch_json(f"/api/tasks/{board['task']['id']}/status", {"status": "done"})
    wait_for(lambda: not any(alive(p) for p in pids), 10, message="the group to end")
    assert client.get(board["url"]).json["status"] == "stopped"


def test_a_slow_client_on_a_preview_port_is_bounded_by_the_boards_deadlines(
        board, client, monkeypatch):
    monkeypatch.setattr(taskboard, "HEADER_TIMEOUT_SECONDS", 0.3)
    monkeypatch.setattr(taskboard, "BODY_TIMEOUT_SECONDS", 0.3)
    preview, session, origin = opened(client, board["url"])
    port = int(origin.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
        slow.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends its headers
        assert slow.recv(100) == b""  # closed, unanswered
    cookie = "; ".join(f"{c.name}={c.value}" for c in session.cookies)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
        slow.sendall(f"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n"
                     "Content-Length: 100\r\n\r\nonly ten..".encode())
        assert slow.recv(100).startswith(b"HTTP/1.1 408")
    client.delete(board["url"])


def test_a_board_killed_with_9_leaves_no_preview_at_its_next_start(start_board, tmp_path):
    """A real board process: killed with SIGKILL while its preview runs, started again."""
    from browser_helpers import sql as board_sql
    board = start_board(token="s3cret-token-for-the-kill-test", demo=False,
                        agent_command=sys.executable)
    (tmp_path / "code").mkdir()
    pids = tmp_path / "pids"
    project = board.api("POST", "/api/projects", {
        "name": "Shop", "slug": "shop", "workingDir": str(tmp_path / "code"), "sandbox": "none",
        "previewCommand": serve("--child", "--pidfile", str(pids))})  # pids as the board sees
    task = board.api("POST", f"/api/projects/{project['id']}/tasks", {"title": "Cart"})
    board_sql(board, "UPDATE tasks SET status = 'testing' WHERE id = ?", (task["id"],))
    board.api("POST", f"/api/tasks/{task['id']}/preview", status=202)
    wait_for(lambda: board.api("GET", f"/api/tasks/{task['id']}/preview")["status"]
             == "ready", 20, message="the preview to be ready")
    group = [int(p) for p in pids.read_text().split()]
    board.proc.kill()
    board.proc.wait(10)
    assert all(alive(p) for p in group), "the preview outlived its board, as -9 leaves it"
    board._log.close()
    board._spawn()
    board.wait_until_up()
    wait_for(lambda: not any(alive(p) for p in group), 10, message="the survivors to die")
    assert board.api("GET", f"/api/tasks/{task['id']}/preview")["status"] == "stopped"


def test_each_attempt_previews_its_own_worktree_until_the_pick(api, client, repo):
    """Best of N: attempt n's preview serves attempt n's worktree; the pick stops the
    previews of the attempts (their worktrees go)."""
    from test_attempts import PAIR, attempts, run_two
    project, task_id = run_two(api, client, repo, previewCommand=(
        f"exec {shlex.quote(sys.executable)} -m http.server \"$PORT\" --bind 127.0.0.1"))
    wait_for(lambda: client.get(f"/api/tasks/{task_id}").json["status"] == "testing", RUN,
             message="both attempts ended")
    assert len(attempts(client, task_id)) == len(PAIR)
    pages = {}
    for n, wrote in ((1, "small.txt"), (2, "big.txt")):
        url = f"/api/tasks/{task_id}/attempts/{n}/preview"
        client.post(url, status=202)
        preview = ready(client, url)
        assert preview["status"] == "ready" and preview["n"] == n, preview
        pages[n] = browser().get(preview["url"]).text
        assert wrote in pages[n], pages[n]
    assert "big.txt" not in pages[1] and "small.txt" not in pages[2]
    assert client.get(f"/api/tasks/{task_id}/preview").json["status"] == "stopped"
    processes = [p.proc.pid for p in taskboard.runtime.previews.by_task.values()]
    client.post(f"/api/tasks/{task_id}/attempts/1/pick")
    wait_for(lambda: not any(alive(p) for p in processes), 10,
             message="the attempts' previews to stop")
