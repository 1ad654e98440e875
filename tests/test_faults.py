"""Fault tolerance (issue 9): the board killed with -9 and restarted, an agent killed from
outside, an agent flooding stdout without newlines, a full disk, a database locked by
another process, a webhook target that never answers.

Most tests run the real `python taskboard.py` as a subprocess (tests/fault_helpers.py) with
tests/fake_agent.py as its agent CLI; conftest's autouse fixture then checks that no agent
process recorded in $FAKE_AGENT_DIR, nor a child of one, outlives the test.
"""
import logging
import os
import signal
import sqlite3
import time

import pytest
from fault_helpers import (
    HangingTarget,
    ServerProcess,
    WriteLock,
    clean_env,
    db_rows,
    fill,
    group_members,
    integrity,
    small_filesystem,
    state,
)

import taskboard
from agent_helpers import (
    RUN,
    alive,
    children,
    get_task,
    logs,
    read_calls,
    start,
    task_calls,
    wait_running,
    wait_status,
)
from conftest import assert_error, sql, wait_for
from taskboard import MAX_LINE_BYTES, MAX_LOG_MESSAGE


@pytest.fixture
def servers(tmp_path):
    """start(db, *args, env=...) -> a ready ServerProcess; every one is killed at the end."""
    started = []

    def start(db, *args, **env):
        server = ServerProcess.board(tmp_path, db, clean_env(tmp_path, **env), *args)
        started.append(server)
        return server.wait_ready()
    yield start
    for server in started:
        server.stop()


@pytest.fixture
def workdir(tmp_path):
    path = tmp_path / "code"
    path.mkdir()
    return path


# --- kill -9 of the server --------------------------------------------------------------

#: Five agents that keep printing a line every 10 ms; a resumed session hangs (stays live).
#: When the server dies, the first two die of the broken pipe but leave a child in their
#: group, the third outlives its closed stdout (a CLI busy in a long tool call), the fourth
#: does both, the last just dies: whatever is left must be gone after the restart.
SLOW_WRITERS = [f"fake:lines=100000 fake:sleep=0.01 fake:resume=hang {extra}"
                for extra in ("fake:child", "fake:child", "fake:survive-pipe",
                              "fake:survive-pipe fake:child", "")]


def test_kill_9_with_five_running_agents_then_restart_loses_nothing_and_leaves_no_orphan(
        servers, tmp_path, workdir, agent_dir):
    db = tmp_path / "data" / "tb.db"
    first = servers(db)
    project = first.project(workdir, maxConcurrent=5)
    tasks = [first.task(project["id"], title=f"Writer {n}", description=d)["id"]
             for n, d in enumerate(SLOW_WRITERS)]
    for task_id in tasks:
        first.move(task_id, "in_progress")
    wait_for(lambda: all(len(task_calls(agent_dir, t)) == 1 and first.get_task(t)["is_running"]
                         and len(first.logs(t)) >= 30 for t in tasks), 15,
             message="five live agents with 30 log lines each")
    sessions = {t: first.get_task(t)["session_id"] for t in tasks}
    assert all(sessions.values())
    committed = {t: [(e["id"], e["kind"], e["message"]) for e in first.logs(t)] for t in tasks}
    groups = [c["pgid"] for c in read_calls(agent_dir)]
    assert sorted(groups) == sorted(c["pid"] for c in read_calls(agent_dir)), \
        "each agent leads its own process group"

    first.kill9()
    # what the dead server left behind: leaders that survive the broken pipe, and children
    time.sleep(0.3)
    left = {g: group_members(g) for g in groups}
    assert sum(len(m) for m in left.values()) >= 5, left
    assert len(children(agent_dir)) == 3

    second = servers(db)
    wait_for(lambda: not any(group_members(g) for g in groups), 10,
             message="every process group of the killed server's agents to be killed")
    assert not any(alive(p) for p in children(agent_dir))

    def resumed(task_id):
        calls = task_calls(agent_dir, task_id)
        return len(calls) == 2 and second.get_task(task_id)["is_running"] and calls[1]
    for task_id in tasks:
        call = wait_for(lambda t=task_id: resumed(t), 15, message=f"task {task_id} resumed")
        assert call["resumed"] is True and call["stdin"] == "continue"
        assert call["argv"][call["argv"].index("--resume") + 1] == sessions[task_id]
        task = second.get_task(task_id)
        assert (task["status"], task["retry_count"], task["session_id"]) == \
            ("in_progress", 0, sessions[task_id])
        runs = db_rows(db, "SELECT status, resumed, session_id FROM runs WHERE task_id = ? "
                           "ORDER BY id", (task_id,))
        assert runs == [("interrupted", 0, sessions[task_id]),
                        ("running", 1, sessions[task_id])]
        after = [(e["id"], e["kind"], e["message"]) for e in second.logs(task_id)]
        assert after[:len(committed[task_id])] == committed[task_id], \
            "a log line the API returned before the kill is missing or changed"
        assert any(m == "the server restarted; resuming the agent's session"
                   for _, _, m in after[len(committed[task_id]):])

    assert second.terminate() == 0, second.errors()[-3000:]
    assert "Traceback" not in second.errors()
    pids = [c["pid"] for c in read_calls(agent_dir)] + children(agent_dir)
    wait_for(lambda: not any(alive(p) for p in pids), 5, message="no agent left")
    assert integrity(db) == [("ok",)]
    assert {s for (s,) in db_rows(db, "SELECT status FROM runs")} == {"interrupted"}
    assert {s for (s,) in db_rows(db, "SELECT status FROM tasks")} == {"in_progress"}


# --- an agent flooding stdout without a newline -------------------------------------------

FLOOD_BYTES = 50_000_000


def test_agent_flooding_stdout_without_newlines_is_cut_into_pieces_in_bounded_memory(
        servers, tmp_path, workdir, agent_dir):
    db = tmp_path / "data" / "tb.db"
    server = servers(db)
    project = server.project(workdir, maxRetries=0)
    baseline = server.status("VmRSS")
    task_id = server.task(project["id"], description=f"fake:flood-no-newline={FLOOD_BYTES} "
                          "fake:sleep=0.02")["id"]
    server.move(task_id, "in_progress")
    [call] = wait_for(lambda: task_calls(agent_dir, task_id), 10, message="the flooding agent")
    # a write of the agent ends once the server has read it (the pipe holds 64 KiB): the
    # agent's transcript says how far the server has read
    read = os.path.join(agent_dir, "transcripts", f"{call['pid']}.out")
    waited = []  # bytes of the flood the server read while one round of requests waited
    while True:
        before = os.path.getsize(read)
        if server.get_task(task_id)["status"] != "in_progress":
            break
        assert server.call("GET", "/api/health", timeout=5)["ok"] is True
        assert server.call("GET", f"/api/projects/{project['id']}/tasks", timeout=5)
        waited.append(os.path.getsize(read) - before)
        time.sleep(0.05)
    peak = server.status("VmHWM")
    assert len(waited) >= 10, "the flood ended before the API could be asked while it ran"
    assert max(waited) <= FLOOD_BYTES // 4, \
        f"the API waited while the server read {max(waited):,} bytes of the flood"
    assert peak - baseline < 100_000, \
        f"the server grew from {baseline} kB to {peak} kB reading a {FLOOD_BYTES:,}-byte line"
    assert peak < 300_000
    pieces = db_rows(db, "SELECT length(raw), raw GLOB '*[^x]*' FROM task_events "
                         "WHERE task_id = ? AND kind = 'raw' ORDER BY seq", (task_id,))
    assert len(pieces) == -(-FLOOD_BYTES // MAX_LINE_BYTES)
    assert sum(n for n, _ in pieces) == FLOOD_BYTES, "every byte is kept, in the raw events"
    assert all(n == MAX_LINE_BYTES for n, _ in pieces[:-1]) and not any(o for _, o in pieces)
    shown = [e for e in server.logs(task_id) if e["kind"] == "raw"]
    assert len(shown) == len(pieces)
    assert all(e["message"] == "x" * MAX_LOG_MESSAGE + f"… [{MAX_LINE_BYTES - MAX_LOG_MESSAGE}"
               " more]" for e in shown[:-1])
    task = server.get_task(task_id)
    assert (task["status"], task["is_running"]) == ("failed", False)
    assert task["last_error"] == "the agent exited with code 0 without a result (no retries " \
        "left of 0)"


# --- an agent killed from outside ---------------------------------------------------------

@pytest.mark.usefixtures("fast_retries")
@pytest.mark.parametrize("victim", ["group", "leader"])
def test_agent_killed_from_outside_is_retried_then_fails_and_frees_its_slot(
        client, api, agent_dir, victim, monkeypatch):
    """SIGKILL from someone else: the whole group (`kill -9 -PGID`), or only the leader
    while its child holds the pipes.  Each run is reaped, the task retried once
    (maxRetries 1) and then failed with a last_error that says why; the slot comes back."""
    # the child's pipes are read 0.2 s after the leader died, not 2 s, before the group's kill
    monkeypatch.setattr(taskboard, "EXIT_GRACE_SECONDS", 0.2)
    project = api.project(maxRetries=1)
    task_id = start(api, project, "fake:hang fake:child" if victim == "leader" else "fake:hang")
    for attempt in (1, 2):
        call = wait_running(client, task_id, agent_dir, runs=attempt)
        if victim == "group":
            os.killpg(call["pgid"], signal.SIGKILL)
        else:
            os.kill(call["pid"], signal.SIGKILL)
        wait_for(lambda c=call: state(c["pid"]) is None, RUN,
                 message=f"run {attempt}'s process {call['pid']} to be reaped")
        wait_for(lambda c=call: not group_members(c["pgid"]), RUN,
                 message=f"the rest of run {attempt}'s group (its child) to be killed")
        if attempt == 1:
            wait_for(lambda: get_task(client, task_id)["retry_count"] == 1, RUN,
                     message="the retry")
            assert get_task(client, task_id)["status"] == "in_progress"
    task = wait_status(client, task_id, "failed")
    assert task["retry_count"] == 1 and len(task_calls(agent_dir, task_id)) == 2
    assert task["last_error"] == "the agent exited with code -9 without a result " \
        "(no retries left of 1)"
    assert not any(alive(p) for p in children(agent_dir))
    messages = wait_for(lambda: (m := [e["message"] for e in logs(client, task_id)])[-1] ==
                        "status in_progress -> failed: " + task["last_error"] and m,
                        message="the failure's log entries")
    assert "failed: " + task["last_error"] in messages
    assert any(m.startswith("attempt failed: the agent exited with code -9") for m in messages)
    pipeline = client.post_json("/api/desktop/get_pipeline_status",
                                {"projectId": project["id"]}).json
    assert pipeline["slotsUsed"] == 0 and pipeline["running"] == []
    other = start(api, project, "fake:ok")  # maxConcurrent 1: the slot is free again
    wait_status(client, other, "testing")


# --- a full disk ---------------------------------------------------------------------------
# The data dir is an 8 MiB tmpfs mounted by the test (as root; skipped where mount is not
# permitted), filled up by a file while an agent writes its log and tasks are created.

BIG = "d" * 100_000  # a task description that makes the WAL grow


class FullDisk:
    """A server whose data dir is full: `refused` holds the error answers of the creates
    that failed, `created` the titles of those answered 201."""

    def __init__(self, server, data, project, writer):
        self.server, self.data, self.db = server, data, server.db
        self.project, self.writer = project, writer
        self.filler = fill(data)
        self.created, self.refused = [], []
        for n in range(80):
            title = f"Big {n}"
            response = server.request("POST", f"/api/projects/{project['id']}/tasks",
                                      json={"title": title, "description": BIG})
            if response.status_code == 201:
                self.created.append(title)
            else:
                self.refused.append((title, response))
                if len(self.refused) == 3:
                    break
        wait_for(lambda: "log writer: flush failed" in server.errors(), 15,
                 message="the agent's log to meet the full disk")

    def free(self):
        os.remove(self.filler)


@pytest.fixture
def full_disk(servers, tmp_path, workdir, agent_dir):
    data = tmp_path / "small"
    with small_filesystem(data, "8m"):
        server = servers(data / "tb.db")
        project = server.project(workdir, maxRetries=0, maxConcurrent=2)
        writer = server.task(project["id"], title="Writer",
                             description="fake:lines=2000 fake:sleep=0.004")["id"]
        server.move(writer, "in_progress")
        wait_for(lambda: len(server.logs(writer)) > 20, 10, message="the agent's first lines")
        yield FullDisk(server, data, project, writer)
        server.stop()


def test_disk_full_answers_json_errors_and_leaves_an_intact_database(full_disk):
    server = full_disk.server
    assert full_disk.refused, "80 creates of 100 kB each fitted on an 8 MiB file system"
    for _, response in full_disk.refused:
        assert response.status_code >= 500 and "Traceback" not in response.text
        assert response.headers["content-type"] == "application/json"
        body = response.json()
        assert isinstance(body["error"], str) and body["error"] and body["code"]
    assert server.proc.poll() is None, "the server died of a full disk"
    health = server.request("GET", "/api/health")  # 200, or 500 by the bug of the next test
    assert health.headers["content-type"] == "application/json"
    assert "Traceback" not in health.text
    assert integrity(full_disk.db) == [("ok",)]
    full_disk.free()
    assert integrity(full_disk.db) == [("ok",)]
    assert server.terminate() == 0, server.errors()[-3000:]
    assert integrity(full_disk.db) == [("ok",)]
    titles = [t for (t,) in db_rows(full_disk.db, "SELECT title FROM tasks ORDER BY id")]
    assert titles == ["Writer", *full_disk.created], \
        "a create answered 201 is missing, or a refused one was stored"


def test_after_a_full_disk_is_freed_the_server_works_again_and_agent_logs_resume(full_disk):
    server, writer = full_disk.server, full_disk.writer
    full_disk.free()
    for n in range(40):  # fresh request greenlets must not inherit a broken connection
        assert server.request("GET", f"/api/tasks/{writer}/logs?limit=5").status_code == 200
        server.call("POST", f"/api/projects/{full_disk.project['id']}/tasks", 201,
                    json={"title": f"After {n}"})
    seen = len(server.logs(writer))
    wait_for(lambda: len(server.logs(writer)) > seen + 20, 5,
             message="the running agent's new log lines to be stored")
    task = wait_status(server, writer, "testing", 20)
    assert task["last_error"] is None
    assert "finished: done: 2000 lines" in [e["message"] for e in server.logs(writer)]
    assert server.terminate() == 0
    assert integrity(full_disk.db) == [("ok",)]


def test_disk_full_error_says_the_disk_is_full(full_disk):
    for _, response in full_disk.refused:
        body = response.json()
        assert response.status_code == 507, body
        assert "disk" in body["error"] or "space" in body["error"], body


# --- the database locked by another process ------------------------------------------------
# Another process takes the write lock (BEGIN IMMEDIATE) and holds it; the server's
# busy_timeout is 5 s.

def start_writer(server, workdir, lines):
    """A project (maxRetries 0) whose task's agent prints `lines` lines, one per 20 ms;
    returns (project, task id) once 20 log lines are stored."""
    project = server.project(workdir, maxRetries=0)
    writer = server.task(project["id"], title="Writer",
                         description=f"fake:lines={lines} fake:sleep=0.02")["id"]
    server.move(writer, "in_progress")
    wait_for(lambda: len(server.logs(writer)) > 20, 10, message="the agent's first lines")
    return project, writer


def assert_every_line_stored_once_in_order(server, writer, lines):
    texts = [(e["id"], e["message"]) for e in server.logs(writer) if e["kind"] == "text"]
    missing = sorted(set(range(lines)) - {int(m.split()[1]) for _, m in texts})
    assert not missing, f"agent log lines lost: {[f'line {i}' for i in missing]}"
    assert [m for _, m in texts] == [f"line {i}" for i in range(lines)]
    assert [i for i, _ in texts] == sorted(i for i, _ in texts)


def test_writes_wait_for_a_short_lock_by_another_process_then_succeed(
        servers, tmp_path, workdir, agent_dir):
    db = tmp_path / "data" / "tb.db"
    server = servers(db)
    # 200 lines of 20 ms from the 20th on: the 3 s lock ends before the agent does
    project, writer = start_writer(server, workdir, 200)
    with WriteLock(db, 3) as lock:
        created = server.request("POST", f"/api/projects/{project['id']}/tasks",
                                 json={"title": "During the lock"}, timeout=20)
        answered_while_held = lock.held
    assert created.status_code == 201, created.text
    assert not answered_while_held, "a write went through while the lock was held"
    assert server.get_task(created.json()["id"])["title"] == "During the lock"
    task = wait_status(server, writer, "testing", 20)
    assert task["last_error"] is None
    assert_every_line_stored_once_in_order(server, writer, 200)
    assert integrity(db) == [("ok",)]


class LongLock:
    """A create sent while another process holds the write lock until the answer comes
    (longer than the server's busy_timeout), with no agent running: its answer, and
    whether the lock was still held when it came."""

    def __init__(self, server, workdir):
        self.server, self.db = server, server.db
        self.project = server.project(workdir)
        with WriteLock(self.db, 60) as lock:
            self.response = server.request("POST", f"/api/projects/{self.project['id']}/tasks",
                                           json={"title": "Refused"}, timeout=20)
            self.answered_while_held = lock.held
            lock.release()


@pytest.fixture(scope="module")
def long_lock(tmp_path_factory):
    """One per test process: its create waits out the server's whole busy timeout (5 s),
    and the tests only read what it answered (one then stops its server)."""
    folder = tmp_path_factory.mktemp("long-lock")
    (folder / "fake-agent").mkdir()  # no agent runs here; were one to, it is recorded here
    env = clean_env(folder, FAKE_AGENT_DIR=str(folder / "fake-agent"))
    server = ServerProcess.board(folder, folder / "data" / "tb.db", env)
    try:
        (folder / "code").mkdir()
        yield LongLock(server.wait_ready(), folder / "code")
    finally:
        server.stop()


def test_a_lock_longer_than_busy_timeout_answers_a_json_error_then_the_server_recovers(
        long_lock):
    server, response = long_lock.server, long_lock.response
    # the server gave up by itself (that it first waits is shown by the short lock's test)
    assert long_lock.answered_while_held, "the create waited for the lock to be given back"
    # today: 500 {"error": "internal error; see the server log", "code": "internal_error"}
    assert response.status_code >= 500 and "Traceback" not in response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"] and response.json()["code"]
    for n in range(30):  # nothing of the failed transaction is left behind
        server.call("POST", f"/api/projects/{long_lock.project['id']}/tasks", 201,
                    json={"title": f"After {n}"})
        assert server.request("GET", "/api/projects").status_code == 200
    titles = [t for (t,) in db_rows(long_lock.db, "SELECT title FROM tasks ORDER BY id")]
    assert titles == [f"After {n}" for n in range(30)]
    assert server.terminate() == 0, server.errors()[-3000:]
    assert integrity(long_lock.db) == [("ok",)]


def test_a_locked_database_error_says_the_database_is_busy(long_lock):
    body = long_lock.response.json()
    assert long_lock.response.status_code == 503, body
    assert "locked" in body["error"] or "busy" in body["error"], body


def test_agent_log_lines_written_during_a_long_lock_are_not_lost(
        servers, tmp_path, workdir, agent_dir):
    db = tmp_path / "data" / "tb.db"
    server = servers(db)
    _, writer = start_writer(server, workdir, 400)
    with WriteLock(db, 7):
        pass  # the agent's lines wait longer than the server's busy_timeout
    wait_status(server, writer, "testing", 25)
    assert_every_line_stored_once_in_order(server, writer, 400)


def test_the_server_stays_responsive_while_another_process_holds_the_write_lock(
        servers, tmp_path, workdir, agent_dir):
    """The wait for the lock is cooperative (SQLite's own busy wait would sleep in C and
    freeze every greenlet): pages and the event stream go on."""
    db = tmp_path / "data" / "tb.db"
    server = servers(db)
    start_writer(server, workdir, 300)
    # shorter than the server's busy_timeout: its writes get through
    with WriteLock(db, 3) as lock:
        time.sleep(0.5)  # the agent's next lines are waiting for the lock by now
        page = server.request("GET", "/", timeout=20)
        answered_while_held = lock.held
        lock.release()  # the answer is in: the rest of the 3 s shows nothing more
    assert page.status_code == 200
    assert answered_while_held, "the page waited for another process's write lock"


def test_reads_are_answered_while_another_process_holds_the_write_lock(
        servers, tmp_path, workdir, agent_dir):
    """Reads run on connections of their own (WAL): they wait neither for the board's
    writes, which wait for the lock, nor for the other program."""
    db = tmp_path / "data" / "tb.db"
    server = servers(db)
    project, writer = start_writer(server, workdir, 300)
    with WriteLock(db, 60) as lock:
        wait_for(lambda: server.get_task(writer)["is_running"],
                 message="the agent to be running")
        read = server.request("GET", f"/api/projects/{project['id']}/tasks", timeout=20)
        answered_while_held = lock.held
        lock.release()
    assert read.status_code == 200
    assert answered_while_held, "the read was answered only once the other program let go"


# --- a webhook target that hangs -------------------------------------------------------------

@pytest.fixture
def target():
    hanging = HangingTarget()
    yield hanging
    hanging.stop()


def assert_delivery_cut_short(db, target):
    """After a stop: the target still holds the one delivery, which the board left queued
    without recording an attempt (it did not wait for an answer or its own timeout)."""
    assert len(target.received) == 1 and target.answered == [], "the target still holds it"
    assert db_rows(db, "SELECT COUNT(*) FROM webhook_deliveries") == [(0,)], \
        "the board waited for the delivery to end"
    assert db_rows(db, "SELECT COUNT(*) FROM webhook_outbox") == [(1,)]


def test_shutdown_returns_while_a_webhook_delivery_hangs(tb, api, target):
    project = api.project()
    api.webhook(project["id"], url=target.url, events=["task:created"])
    api.task(project["id"])
    wait_for(lambda: target.received, message="the delivery to reach the target")
    sender = taskboard.runtime.webhooks
    assert not sender.idle, "the delivery is in flight"
    taskboard.shutdown()
    assert_delivery_cut_short(tb.config["db_path"], target)
    assert all(worker.greenlet.dead for worker in sender.workers.values())
    assert taskboard.runtime is None


def test_sigterm_exits_while_a_webhook_delivery_hangs(servers, tmp_path, workdir, target):
    server = servers(tmp_path / "data" / "tb.db")
    project = server.project(workdir)
    server.call("POST", f"/api/projects/{project['id']}/webhooks", 201,
                json={"platform": "custom", "url": target.url, "events": ["task:created"]})
    server.task(project["id"])
    wait_for(lambda: target.received, message="the delivery to reach the target")
    assert server.terminate(timeout=10) == 0, server.errors()[-3000:]
    assert "Traceback" not in server.errors()
    assert_delivery_cut_short(server.db, target)


def test_moments_waiting_for_a_target_survive_a_stop_and_go_out_after_the_restart(
        tb, api, target):
    """A stop kills the delivery in flight and leaves the moments behind it queued: after
    the restart the target gets that one again, then the others, in order, each once."""
    project = api.project()
    hook = api.webhook(project["id"], url=target.url, events=["task:created"])
    ids = [api.task(project["id"], title=f"Task {n}")["id"] for n in range(3)]
    wait_for(lambda: target.received, message="the first delivery to hang")
    taskboard.shutdown()
    assert [body["task"]["id"] for body in target.received] == ids[:1]
    target.release()
    taskboard.init(tb.config)
    wait_for(lambda: len(target.received) == 4, message="the queued moments after the restart")
    assert [body["task"]["id"] for body in target.received] == [ids[0], *ids]
    wait_for(lambda: taskboard.runtime.webhooks.idle, message="the worker to end")
    assert sql(tb, "SELECT COUNT(*) FROM webhook_outbox") == [(0,)]
    records = api.client.get(f"/api/projects/{project['id']}/webhooks/{hook['id']}"
                             "/deliveries").json
    assert len(records) == 3 and all(r["ok"] for r in records)
    taskboard.shutdown()
    taskboard.init(tb.config)  # nothing delivered is sent again
    api.task(project["id"], title="After")
    wait_for(lambda: len(target.received) == 5, message="the next moment")
    assert target.received[-1]["task"]["title"] == "After"


def test_moments_of_a_webhook_another_program_deleted_are_dropped_at_the_restart(
        tb, api, target):
    """sqlite3 leaves foreign keys off: a webhook deleted that way leaves its queued
    moments behind, and the restart drops them instead of retrying them forever."""
    project = api.project()
    hook = api.webhook(project["id"], url=target.url, events=["task:created"])
    api.task(project["id"])
    api.task(project["id"])
    wait_for(lambda: target.received, message="the first delivery to hang")
    taskboard.shutdown()
    sql(tb, "DELETE FROM webhooks WHERE id = ?", (hook["id"],))
    assert sql(tb, "SELECT COUNT(*) FROM webhook_outbox") == [(2,)]
    taskboard.init(tb.config)
    wait_for(lambda: taskboard.runtime.webhooks.idle, message="the worker to end")
    assert sql(tb, "SELECT COUNT(*) FROM webhook_outbox") == [(0,)]
    assert len(target.received) == 1


@pytest.mark.parametrize("change", ["create", "move", "request changes"])
def test_a_change_and_its_webhook_moment_are_stored_together_or_not_at_all(
        tb, api, client, target, snapshot, monkeypatch, change):
    """A moment is queued in the transaction of the change it announces. When it cannot be
    written (here the disk fills up just after it), the change is refused as a whole with
    507, so a crash in between can never keep a change whose moment is lost; once the disk
    has room the same change goes through and the target gets its moment."""
    project = api.project()
    api.webhook(project["id"], url=target.url,
                events=["task:created", "task:approved", "task:changes_requested"])
    task = api.task(project["id"], status="testing")
    wait_for(lambda: target.received, message="the task's own creation to be delivered")
    target.release()
    wait_for(lambda: taskboard.runtime.webhooks.idle, message="the sender to be idle")
    before = snapshot()
    queue = taskboard.Notice.queue

    def disk_fills_up(moment, t, row):
        queue(moment, t, row)
        raise sqlite3.OperationalError("database or disk is full")
    monkeypatch.setattr(taskboard.Notice, "queue", disk_fills_up)
    request = {
        "create": lambda status: client.post_json(f"/api/projects/{project['id']}/tasks",
                                                  {"title": "Later"}, status=status),
        "move": lambda status: client.patch_json(f"/api/tasks/{task['id']}/status",
                                                 {"status": "done"}, status=status),
        "request changes": lambda status: client.post_json(
            "/api/desktop/request_changes", {"id": task["id"], "feedback": "Add a test"},
            status=status),
    }[change]
    assert_error(request(507), 507, "storage_full")
    assert snapshot() == before, "neither the change nor its moment was stored"
    monkeypatch.setattr(taskboard.Notice, "queue", queue)  # room again
    request(200 if change != "create" else 201)
    event = {"create": "task:created", "move": "task:approved",
             "request changes": "task:changes_requested"}[change]
    wait_for(lambda: len(target.received) == 2, message=f"the {event} moment")
    assert target.received[1]["event"] == event
    wait_for(lambda: taskboard.runtime.webhooks.idle, message="the sender to be idle")
    assert sql(tb, "SELECT COUNT(*) FROM webhook_outbox") == [(0,)]


def test_moments_queued_for_a_hanging_target_are_bounded_and_the_oldest_dropped(
        tb, api, target, monkeypatch, caplog):
    """One delivery hangs while 1,100 more moments come: the hook's queue keeps the newest
    1,000 and says so in the log; once the target answers, exactly those are delivered."""
    monkeypatch.setattr(taskboard, "WEBHOOK_TIMEOUT_SECONDS", 20.0)
    project = api.project()
    hook = api.webhook(project["id"], url=target.url, events=["task:created"])
    first = api.task(project["id"], title="First")["id"]
    wait_for(lambda: target.received, message="the first delivery to hang")
    caplog.set_level(logging.WARNING, logger="taskboard")
    ids = [taskboard.create_task(project["id"], {"title": f"Queued {n}"})["id"]
           for n in range(1100)]
    assert sql(tb, "SELECT COUNT(*) FROM webhook_outbox WHERE webhook_id = ?",
               (hook["id"],)) == [(1000,)]
    assert any("dropped the 1 oldest" in r.getMessage() for r in caplog.records)
    assert len(target.received) == 1, "the hook's deliveries are sent one after another"
    target.release()
    wait_for(lambda: len(target.received) == 1001, 20,
             message="the 1,000 queued moments to be delivered")
    delivered = [body["task"]["id"] for body in target.received]
    assert delivered == [first, *ids[100:]]
    records = api.client.get(f"/api/projects/{project['id']}/webhooks/{hook['id']}"
                             "/deliveries").json
    assert len(records) == 50 and all(r["ok"] for r in records)


# --- the person's umask -----------------------------------------------------------------

def test_files_a_run_writes_in_your_code_get_your_umask_not_the_boards(servers, workdir,
                                                                       tmp_path):
    """Issue 55: the board keeps its own files to itself (umask 077), but what an agent and
    the stop check write in the person's code gets the umask the board was started with."""
    before = os.umask(0o022)  # the person's shell: the board inherits it
    try:
        server = servers(tmp_path / "data" / "tb.db")
    finally:
        os.umask(before)
    project = server.project(workdir, permissionMode="auto-accept",
                             stopCheckCommand="touch checked.txt")
    task = server.task(project["id"], description="fake:write=made.txt fake:ok")
    server.move(task["id"], "in_progress")
    wait_for(lambda: server.get_task(task["id"])["status"] == "testing", timeout=30,
             message="the run to finish")
    assert oct((workdir / "made.txt").stat().st_mode & 0o777) == oct(0o644)
    assert oct((workdir / "checked.txt").stat().st_mode & 0o777) == oct(0o644)
    assert oct(os.stat(tmp_path / "data" / "tb.db").st_mode & 0o777) == oct(0o600)
