"""The /ws event channel over a live server (design.md §7, §11 for the Origin rule)."""

import collections
import json
import socket
import sqlite3
import time
import tracemalloc

import gevent
import pytest
import requests
import websocket

import taskboard
from conftest import WS_OPTIONS, bearer, sql, wait_for


@pytest.fixture
def boot_ms(config):
    """Wall-clock ms just before the runtime (and so the hub) is built; list it before `live`."""
    return int(time.time() * 1000)


def read_all(ws, until_event, predicate=lambda data: True, timeout=5):
    """Every non-ping message up to and including the first `until_event` matching predicate."""
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        message = ws.next(max(deadline - time.monotonic(), 0.01))
        seen.append(message)
        if message["event"] == until_event and predicate(message["data"]):
            return seen


def marker(api):
    """A settings change: a global event every connection receives, to end a read."""
    return api.client.put_json("/api/settings", {"language": "tr"}).json


def connect(live, query="", origin=None):
    """A raw websocket-client connection sending exactly one Origin header (or none)."""
    return websocket.create_connection(f"ws://127.0.0.1:{live.port}/ws{query}", timeout=5,
                                       origin=origin, suppress_origin=origin is None,
                                       header=[f"Authorization: {bearer()['Authorization']}"],
                                       **WS_OPTIONS)


def raw_upgrade(live, query="", origin=None):
    """Try the /ws upgrade; the HTTP status when it is refused, else 101."""
    try:
        ws = connect(live, query, origin)
    except websocket.WebSocketBadStatusException as exc:
        return exc.status_code
    ws.close()
    return 101


# --- envelope and seq -----------------------------------------------------------------

def test_ws_message_envelope_has_seq_above_boot_time(boot_ms, live, api, tb):
    ws = live.ws()
    project = api.project()
    message = ws.until("project:created")
    assert set(message) == {"seq", "event", "data"}
    assert isinstance(message["seq"], int)
    assert message["seq"] > boot_ms * 1000
    assert message["seq"] <= (int(time.time() * 1000) + 1) * 1000
    assert message["data"]["id"] == project["id"]


def test_ws_seq_strictly_increasing_across_messages(live, api):
    ws = live.ws()
    project = api.project()
    task = api.task(project["id"])
    api.client.put_json(f"/api/tasks/{task['id']}", {"title": "Renamed"})
    api.template(project["id"])
    api.client.delete(f"/api/tasks/{task['id']}")
    seen = read_all(ws, "task:deleted")
    seqs = [m["seq"] for m in seen]
    assert len(seqs) >= 5
    assert all(a < b for a, b in zip(seqs, seqs[1:])), seqs


# --- every change publishes its event with the full resource ---------------------

def test_ws_project_changes_publish_full_project(live, api):
    ws = live.ws()
    project = api.project()
    assert ws.until("project:created")["data"] == api.client.get(
        f"/api/projects/{project['id']}").json
    api.client.put_json(f"/api/projects/{project['id']}", {"name": "Renamed"})
    updated = ws.until("project:updated")["data"]
    assert updated["name"] == "Renamed"
    assert updated == api.client.get(f"/api/projects/{project['id']}").json
    api.client.delete(f"/api/projects/{project['id']}")
    assert ws.until("project:deleted")["data"] == {"id": project["id"]}


def test_ws_task_changes_publish_full_task(live, api):
    project = api.project()
    ws = live.ws()
    task = api.task(project["id"])
    assert ws.until("task:created")["data"] == api.client.get(f"/api/tasks/{task['id']}").json
    api.client.put_json(f"/api/tasks/{task['id']}", {"title": "Renamed"})
    updated = ws.until("task:updated")["data"]
    assert updated["title"] == "Renamed"
    assert updated == api.client.get(f"/api/tasks/{task['id']}").json
    api.move(task["id"], "testing")
    moved = ws.until("task:updated", lambda d: d["status"] == "testing")["data"]
    assert moved == api.client.get(f"/api/tasks/{task['id']}").json
    api.client.delete(f"/api/tasks/{task['id']}")
    assert ws.until("task:deleted")["data"] == {"id": task["id"], "projectId": project["id"]}


@pytest.mark.parametrize("kind,change", [
    ("template", {"name": "Renamed"}),
    ("snippet", {"name": "Renamed"}),
    ("webhook", {"url": "http://127.0.0.1:9/renamed"}),
])
def test_ws_child_changes_publish_full_resource(live, api, kind, change):
    project = api.project()
    ws = live.ws()
    item = getattr(api, kind)(project["id"])
    url = f"/api/projects/{project['id']}/{kind}s/{item['id']}"
    assert ws.until(f"{kind}:created")["data"] == api.client.get(url).json
    api.client.put_json(url, change)
    updated = ws.until(f"{kind}:updated")["data"]
    assert updated == api.client.get(url).json
    assert all(updated[k] == v for k, v in change.items())
    api.client.delete(url)
    assert ws.until(f"{kind}:deleted")["data"] == {"id": item["id"],
                                                   "projectId": project["id"]}


def test_ws_settings_update_publishes_full_settings(live, api):
    ws = live.ws()
    api.client.put_json("/api/settings", {"soundEnabled": False})
    data = ws.until("settings:updated")["data"]
    assert data == api.client.get("/api/settings").json
    assert data["soundEnabled"] is False


# --- after commit -----------------------------------------------------------------------

def test_ws_events_are_published_after_commit(live, api, tb, monkeypatch):
    """At the moment an event is published, another connection already sees the change."""
    project = api.project()
    checks = []
    publish = tb.events.publish

    def committed(event):
        con = sqlite3.connect(tb.config["db_path"])
        try:
            if event["event"] == "task:created":
                row = con.execute("SELECT title FROM tasks WHERE id = ?",
                                  (event["data"]["id"],)).fetchone()
                return row == (event["data"]["title"],)
            if event["event"] == "task:updated":
                row = con.execute("SELECT title, status FROM tasks WHERE id = ?",
                                  (event["data"]["id"],)).fetchone()
                return row == (event["data"]["title"], event["data"]["status"])
            if event["event"] == "task:deleted":
                return con.execute("SELECT 1 FROM tasks WHERE id = ?",
                                   (event["data"]["id"],)).fetchone() is None
            return True
        finally:
            con.close()

    def spy(event, data, project_id=None):
        checks.append((event, committed({"event": event, "data": data})))
        return publish(event, data, project_id)

    monkeypatch.setattr(tb.events, "publish", spy)
    ws = live.ws()
    task = api.task(project["id"])
    message = ws.until("task:created")
    assert requests.get(f"{live.url}/api/tasks/{message['data']['id']}", timeout=5,
                        headers=bearer()).status_code == 200
    api.client.put_json(f"/api/tasks/{task['id']}", {"title": "Renamed"})
    api.move(task["id"], "done")
    api.client.delete(f"/api/tasks/{task['id']}")
    ws.until("task:deleted")
    task_checks = [c for c in checks if c[0].startswith("task:") and c[0] != "task:log"]
    assert {e for e, _ in task_checks} >= {"task:created", "task:updated", "task:deleted"}
    assert all(ok for _, ok in task_checks), checks


# --- replay with ?since= ---------------------------------------------------------------

def test_ws_since_replays_missed_events_in_order_then_live(live, api):
    watcher = live.ws()
    project = api.project()
    since = watcher.until("project:created")["seq"]
    for n in range(3):
        api.task(project["id"], title=f"Missed {n}")
    missed = read_all(watcher, "task:created", lambda d: d["title"] == "Missed 2")

    late = live.ws(f"?since={since}")
    assert [late.next() for _ in missed] == missed
    api.task(project["id"], title="Live")
    live_message = late.next()
    assert live_message["event"] == "task:created"
    assert live_message["data"]["title"] == "Live"
    assert live_message["seq"] > missed[-1]["seq"]


def test_ws_since_current_seq_replays_nothing(live, api, tb):
    project = api.project()
    ws = live.ws(f"?since={tb.events.seq}")
    api.task(project["id"], title="Next")
    message = ws.next()
    assert message["event"] == "task:created" and message["data"]["title"] == "Next"


def test_an_answer_names_the_events_it_reflects_so_since_misses_nothing(live, api, tb):
    """Every API answer names the seq of the last event published before it began
    (X-Taskboard-Seq): a client that reads, then connects with ?since= that seq, hears
    every change after its read, however late it connects."""
    project = api.project()
    read = requests.get(f"{live.url}/api/projects/{project['id']}/tasks", headers=bearer(),
                        timeout=5)
    seq = int(read.headers["X-Taskboard-Seq"])
    assert seq == tb.events.seq and read.json() == []
    created = api.task(project["id"], title="After the read")
    refused = requests.get(f"{live.url}/api/tasks/999999", headers=bearer(), timeout=5)
    assert refused.status_code == 404 and int(refused.headers["X-Taskboard-Seq"]) == seq + 1
    ws = live.ws(f"?since={seq}")
    message = ws.next()
    assert message["event"] == "task:created" and message["data"]["id"] == created["id"]


@pytest.mark.parametrize("since", ["1", "before-boot", "future"])
def test_ws_since_outside_this_run_sends_resync_first(live, api, tb, since):
    api.project()
    value = {"1": 1, "before-boot": tb.events.first_seq - 1, "future": tb.events.seq + 1000}[since]
    current = tb.events.seq
    ws = live.ws(f"?since={value}")
    assert ws.next() == {"seq": current, "event": "resync", "data": {}}
    marker(api)
    assert ws.next()["event"] == "settings:updated"


def test_ws_since_gap_gone_from_buffer_sends_resync(live, api, tb):
    tb.events.buffer_size = 3
    project = api.project()
    since = tb.events.seq
    for n in range(5):
        api.task(project["id"], title=f"T{n}")
    ws = live.ws(f"?since={since}")
    assert ws.next() == {"seq": tb.events.seq, "event": "resync", "data": {}}


def test_ws_since_replays_megabytes_the_buffer_still_holds(live, tb):
    """A replay is the client's place in the one buffer, not a copy: all of it is sent."""
    since = tb.events.seq
    for n in range(20):
        tb.events.publish("settings:updated", {"n": n, "pad": "x" * 300_000})
    ws = live.ws(f"?since={since}")
    assert [ws.next()["data"]["n"] for _ in range(20)] == list(range(20))


def test_clients_that_never_read_hold_no_more_than_the_buffer(tb):
    """200 stalled clients and 10 MB of events: what stays in memory is the buffer's 1 MB
    (each client keeps only its place in it), and every one of them is dropped."""
    tb.events.buffer_bytes = 1_000_000
    stalled = [tb.events.subscribe(logs=["all"]) for _ in range(200)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(100):
            tb.events.publish("task:log", {"taskId": 1, "projectId": 1,
                                           "entries": [{"message": f"{n} " + "x" * 100_000}]})
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 1_500_000
    assert not tb.events.subscribers
    assert {tuple(m.event for m in sub.get(0)) for sub in stalled} == {("resync",)}
    assert {sub.get(0) for sub in stalled} == {None}  # and then the end


# --- filters --------------------------------------------------------------------------

def test_ws_project_filter_drops_other_projects_events(live, api):
    mine, other = api.project(), api.project()
    ws = live.ws(f"?projectId={mine['id']}")
    api.task(other["id"], title="Theirs")
    api.task(mine["id"], title="Mine")
    api.client.put_json(f"/api/projects/{other['id']}", {"name": "Other renamed"})
    marker(api)
    seen = read_all(ws, "settings:updated")
    assert [(m["event"], m["data"].get("title")) for m in seen] == [
        ("task:created", "Mine"), ("settings:updated", None)]


def test_ws_task_log_only_for_connections_that_asked(live, api, tb):
    project = api.project()
    task, other = api.task(project["id"]), api.task(project["id"])
    plain = live.ws()
    by_id = live.ws(f"?logs={task['id']}")
    by_other = live.ws(f"?logs={other['id']}")
    everything = live.ws("?logs=all")
    api.move(task["id"], "testing")
    for ws in (by_id, everything):
        message = ws.until("task:log")
        assert message["data"]["taskId"] == task["id"]
        assert message["data"]["projectId"] == project["id"]
        entries = message["data"]["entries"]
        assert [e["kind"] for e in entries] == ["status"]
        assert entries[0]["taskId"] == task["id"]
        assert "testing" in entries[0]["message"]
    marker(api)
    for ws in (plain, by_other):
        assert "task:log" not in [m["event"] for m in read_all(ws, "settings:updated")]


def test_ws_task_log_entries_are_exactly_the_logs_entries(live, api, tb, client):
    """task:log carries the entries as they were written, /logs reads them back later: the
    same JSON either way, whatever the text holds."""
    task = api.task(api.project()["id"])
    ws = live.ws(f"?logs={task['id']}")
    tb.logs.append(task["id"], "text", 'quotes " \\ and \t tabs, \x00\x1f\x7f controls, '
                   'ünï 😀 \u2028, </script>')
    tb.logs.append(task["id"], "tool_call", "Bash: ls", tool="Bash")
    tb.logs.append(task["id"], "tool_result", "ok", tool="Bash", is_error=False, duration_ms=12)
    tb.logs.append(task["id"], "tool_result", "boom", tool="Bash", is_error=True,
                   duration_ms=0)
    tb.logs.flush()
    message = ws.until("task:log")
    logs = client.get(f"/api/tasks/{task['id']}/logs").json
    assert message["data"]["entries"] == logs[-4:]
    assert list(message["data"]) == ["taskId", "projectId", "entries"]
    assert [list(e) for e in message["data"]["entries"]] == [list(e) for e in logs[-4:]]


def test_ws_logs_param_is_repeatable(live, api):
    project = api.project()
    first, second = api.task(project["id"]), api.task(project["id"])
    ws = live.ws(f"?logs={first['id']}&logs={second['id']}")
    api.move(first["id"], "testing")
    api.move(second["id"], "testing")
    got = set()
    while got != {first["id"], second["id"]}:
        got.add(ws.until("task:log")["data"]["taskId"])


def test_ws_task_log_batch_arrives_as_one_message(live, api, tb):
    project = api.project()
    task = api.task(project["id"])
    ws = live.ws(f"?logs={task['id']}")
    for n in range(20):  # no yield in between: one batch
        tb.logs.append(task["id"], "text", f"line {n}")
    message = ws.until("task:log")
    assert [e["message"] for e in message["data"]["entries"]] == [f"line {n}" for n in range(20)]


@pytest.mark.parametrize("failing", ["entries", "raw lines"])
def test_tasks_flushed_together_keep_their_lines_in_order_across_chunks(live, api, tb,
                                                                       monkeypatch, failing):
    """Several tasks' lines are written CHUNK_ROWS at a time (a task's entries first, then
    its raw lines); a write that fails keeps every task's lines, in order, for the next
    flush."""
    monkeypatch.setattr(tb.logs, "CHUNK_ROWS", 7)
    project = api.project()
    tasks = [api.task(project["id"])["id"] for _ in range(3)]
    ws = live.ws("?logs=all")
    real, calls, failed = taskboard.insert_log_rows, [], []

    def failing_once(rows, raw):
        calls.append(len(rows) + len(raw))
        if not failed and (raw if failing == "raw lines" else len(calls) == 2):
            failed.append(calls[-1])
            raise sqlite3.OperationalError("database or disk is full")
        return real(rows, raw)
    monkeypatch.setattr(taskboard, "insert_log_rows", failing_once)
    for n in range(10):
        for task_id in tasks:
            tb.logs.append(task_id, "text", f"{task_id}:{n}")
            tb.logs.append_raw(task_id, None, n, "assistant", "{}")
    with pytest.raises(sqlite3.OperationalError):
        tb.logs.flush()
    tb.logs.flush()
    assert max(calls) <= 7
    received = collections.defaultdict(list)
    while sum(map(len, received.values())) < 30:
        data = ws.until("task:log")["data"]
        received[data["taskId"]] += data["entries"]
    for task_id in tasks:
        assert [e["message"] for e in received[task_id]] == [f"{task_id}:{n}" for n in range(10)]
        ids = [e["id"] for e in received[task_id]]
        assert ids == sorted(ids)
        assert [e["id"] for e in json.loads(taskboard.task_logs(task_id, 100, None))] == ids
    assert failed
    for task_id in tasks:
        assert sql(tb, f"SELECT seq FROM task_events WHERE task_id = {task_id} "
                       "ORDER BY id") == [(n,) for n in range(10)]


# --- the upgrade: Origin and parameters -----------------------------------------------

@pytest.mark.parametrize("origin", ["http://evil.example", "http://127.0.0.1:1", "null",
                                    "http://127.0.0.1:{port}.evil.example"])
def test_ws_foreign_origin_is_refused_with_403(live, tb, origin):
    assert raw_upgrade(live, origin=origin.format(port=live.port)) == 403
    assert not tb.events.subscribers


def test_ws_own_origin_or_none_is_accepted(live, api, tb):
    for origin in (f"http://127.0.0.1:{live.port}", None):
        ws = connect(live, origin=origin)
        try:
            wait_for(lambda: len(tb.events.subscribers) == 1, message="subscribed")
            marker(api)
            assert json.loads(ws.recv())["event"] == "settings:updated"
        finally:
            ws.close()
        wait_for(lambda: not tb.events.subscribers, message="unsubscribed")


@pytest.mark.parametrize("query", ["?since=abc", "?logs=x", "?projectId=-1", "?since=1.5",
                                   "?logs=all&logs=x"])
def test_ws_invalid_query_is_refused_with_400_before_upgrade(live, tb, query):
    assert raw_upgrade(live, query) == 400
    assert not tb.events.subscribers


def test_ws_refused_upgrade_answers_json_error(live):
    response = requests.get(f"{live.url}/ws?since=abc", timeout=5, headers={
        "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", **bearer()})
    assert response.status_code == 400
    assert response.json()["code"] == "validation_error"


# --- slow clients, pings, disconnects ---------------------------------------------------

def test_ws_slow_client_gets_resync_and_is_dropped_while_others_keep_up(live, tb,
                                                                       monkeypatch):
    # this client does read its tail: a busy machine must not reset it before the resync
    monkeypatch.setattr(taskboard, "WS_DROP_GRACE_SECONDS", 30)
    tb.events.buffer_bytes = 1_000_000  # five of the 200 KB messages below
    fast = live.ws()
    slow = websocket.create_connection(  # a tiny receive buffer so the server's send blocks
        f"ws://127.0.0.1:{live.port}/ws", timeout=5, suppress_origin=True,
        sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096),),
        header=[f"Authorization: {bearer()['Authorization']}"], **WS_OPTIONS)
    try:
        wait_for(lambda: len(tb.events.subscribers) == 2, message="two subscribers")
        padding = "x" * 200_000
        published = []
        for n in range(300):
            published.append(tb.events.publish("settings:updated", {"n": n, "pad": padding}).seq)
            assert fast.next()["seq"] == published[-1]
            if len(tb.events.subscribers) == 1 and n > 10:
                break
        assert len(tb.events.subscribers) == 1, "the slow client was never dropped"
        for n in range(3):  # the fast client is still served
            published.append(tb.events.publish("settings:updated", {"n": n, "pad": ""}).seq)
            assert fast.next()["seq"] == published[-1]

        tail = []
        slow.settimeout(5)
        with pytest.raises(websocket.WebSocketConnectionClosedException):
            while True:
                raw = slow.recv()
                if not raw:  # a close frame
                    raise websocket.WebSocketConnectionClosedException()
                tail.append(json.loads(raw))
    finally:
        slow.shutdown()  # close() skips a connection the server closed, leaking it
    assert tail[-1]["event"] == "resync"
    assert tail[-1]["data"] == {}
    assert all(m["event"] == "settings:updated" for m in tail[:-1])
    assert len(tail) < len(published)


def test_ws_client_that_never_reads_is_reset_soon_after_it_is_dropped(live, tb, monkeypatch):
    """Its resync can never reach it: the connection is reset after WS_DROP_GRACE_SECONDS,
    not left to the (here one minute) send timeout, and its unsent bytes are discarded."""
    monkeypatch.setattr(taskboard, "WS_SEND_TIMEOUT_SECONDS", 60)
    monkeypatch.setattr(taskboard, "WS_DROP_GRACE_SECONDS", 0.2)
    aborted = []
    monkeypatch.setattr(taskboard, "_ws_abort",
                        lambda sock, abort=taskboard._ws_abort: (aborted.append(sock),
                                                                 abort(sock)))
    tb.events.buffer_bytes = 1_000_000
    slow = websocket.create_connection(
        f"ws://127.0.0.1:{live.port}/ws", timeout=5, suppress_origin=True,
        sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096),),
        header=[f"Authorization: {bearer()['Authorization']}"], **WS_OPTIONS)
    try:
        wait_for(lambda: len(tb.events.subscribers) == 1, message="subscribed")
        for n in range(300):
            tb.events.publish("settings:updated", {"n": n, "pad": "x" * 200_000})
            gevent.sleep(0)
            if not tb.events.subscribers:
                break
        assert not tb.events.subscribers, "the client was never dropped"
        wait_for(lambda: aborted, timeout=3, message="the connection to be reset")
        with pytest.raises((ConnectionResetError, websocket.WebSocketConnectionClosedException)):
            for _ in range(1000):
                if not slow.recv():
                    raise websocket.WebSocketConnectionClosedException()
    finally:
        slow.shutdown()


def test_ws_idle_connection_gets_pings_without_seq(live, api, monkeypatch):
    monkeypatch.setattr(taskboard, "WS_PING_SECONDS", 0.2)
    ws = live.ws()
    ws.conn.settimeout(3)
    assert json.loads(ws.conn.recv()) == {"event": "ping"}
    marker(api)
    assert "seq" in ws.until("settings:updated", timeout=3)


def test_ws_disconnect_removes_subscriber(live, tb):
    ws = live.ws()
    wait_for(lambda: len(tb.events.subscribers) == 1, message="subscribed")
    ws.close()
    wait_for(lambda: not tb.events.subscribers, message="subscriber removed after close")


def test_ws_many_clients_all_receive_each_event(live, api):
    clients = [live.ws() for _ in range(5)]
    project = api.project()
    jobs = [gevent.spawn(c.until, "project:created") for c in clients]
    gevent.joinall(jobs, timeout=5, raise_error=True)
    assert {j.value["seq"] for j in jobs} == {jobs[0].value["seq"]}
    assert all(j.value["data"]["id"] == project["id"] for j in jobs)


def test_replay_buffer_is_bounded_by_bytes_too(tb):
    """A busy agent's task:log batches must not pile up megabytes for replay."""
    tb.events.buffer_bytes = 50_000
    entry = {"message": "x" * 1000}
    for _ in range(200):
        tb.events.publish("task:log", {"taskId": 1, "projectId": 1, "entries": [entry] * 5})
    assert tb.events.buffered <= 50_000
    assert 5 <= len(tb.events.kept()) <= 10
    assert tb.events.buffered == sum(len(m.frame) for m in tb.events.kept())
