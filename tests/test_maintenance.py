"""Keeping a big board healthy: log pages, log retention, online backups (issue 9)."""
import datetime as dt
import os
import sqlite3
import subprocess
import sys
import threading
import time

import gevent.monkey
import pytest

import taskboard
from agent_helpers import logs, start, wait_status
from conftest import ROOT, assert_error, sql, wait_for


@pytest.fixture
def task_with_logs(api, client):
    project = api.project()
    task_id = start(api, project, "fake:lines=120")
    wait_status(client, task_id, "testing")
    taskboard.runtime.logs.flush()  # what the run's end still buffers: every entry is stored
    return task_id


def test_log_pages_walk_back_with_before(client, task_with_logs):
    everything = logs(client, task_with_logs)
    assert len(everything) > 120
    newest = client.get(f"/api/tasks/{task_with_logs}/logs?limit=50").json
    assert newest == everything[-50:]
    older = client.get(f"/api/tasks/{task_with_logs}/logs?limit=50"
                       f"&before={newest[0]['id']}").json
    assert older == everything[-100:-50]
    walked, before = [], None
    while True:
        query = f"?limit=37{f'&before={before}' if before else ''}"
        page = client.get(f"/api/tasks/{task_with_logs}/logs{query}").json
        if not page:
            break
        walked = page + walked
        before = page[0]["id"]
    assert walked == everything


@pytest.mark.parametrize("value", ["0", "-1", "x", "9" * 30])
def test_log_page_cursor_must_be_a_positive_id(client, task_with_logs, value):
    response = client.get(f"/api/tasks/{task_with_logs}/logs?before={value}", status=400)
    assert_error(response, 400, "validation_error", "before")


def test_retention_removes_only_old_log_entries_and_keeps_the_tasks(client, tb,
                                                                    task_with_logs):
    count = len(logs(client, task_with_logs))
    events = sql(tb, "SELECT COUNT(*) FROM task_events")[0][0]
    assert count > 100 and events > 100
    old = (dt.datetime.now(dt.UTC) - dt.timedelta(days=40)).isoformat()
    sql(tb, "UPDATE logs SET created_at = ? WHERE id IN (SELECT id FROM logs ORDER BY id "
            "LIMIT 60)", (old,))
    sql(tb, "UPDATE task_events SET created_at = ? WHERE id IN (SELECT id FROM task_events "
            "ORDER BY id LIMIT 50)", (old,))
    before = client.get(f"/api/tasks/{task_with_logs}").json
    assert taskboard.compact_logs() == 0, "no retention set: nothing goes"
    client.put_json("/api/settings", {"logRetentionDays": 30})
    assert taskboard.compact_logs() == 110
    assert len(logs(client, task_with_logs)) == count - 60
    assert sql(tb, "SELECT COUNT(*) FROM task_events")[0][0] == events - 50
    assert client.get(f"/api/tasks/{task_with_logs}").json == before
    assert taskboard.compact_logs() == 0


def test_retention_works_in_small_transactions(client, tb, task_with_logs, monkeypatch):
    monkeypatch.setattr(taskboard, "LOG_COMPACT_CHUNK", 7)
    old = (dt.datetime.now(dt.UTC) - dt.timedelta(days=3)).isoformat()
    sql(tb, "UPDATE logs SET created_at = ?", (old,))
    client.put_json("/api/settings", {"logRetentionDays": 1})
    calls = []
    real = taskboard.delete_old_log_rows
    monkeypatch.setattr(taskboard, "delete_old_log_rows",
                        lambda *a: calls.append(a) or real(*a))
    removed = taskboard.compact_logs()
    assert removed >= 120 and logs(client, task_with_logs) == []
    assert len(calls) > removed // 7 and all(call[2] == 7 for call in calls)


def test_backup_copies_a_running_board_while_it_writes(tmp_path, api, client, tb):
    project = api.project()
    for i in range(50):
        api.task(project["id"], title=f"task {i}")
    target = tmp_path / "copy.db"
    stop = threading.Event()

    def keep_writing():  # the board goes on working during the backup
        n = 0
        while not stop.is_set():
            api.task(project["id"], title=f"during {n}")
            n += 1
            time.sleep(0.005)  # a greenlet (threads are patched): let the backup run too
    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        done = subprocess.run([sys.executable, "taskboard.py", "--db", tb.config["db_path"],
                               "--backup", str(target)], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
    finally:
        stop.set()
        writer.join()
    assert done.returncode == 0, done.stderr
    assert "integrity ok" in done.stdout
    copy = sqlite3.connect(target)
    try:
        assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        titles = {row[0] for row in copy.execute("SELECT title FROM tasks")}
    finally:
        copy.close()
    assert {f"task {i}" for i in range(50)} <= titles
    assert not [name for name in os.listdir(tmp_path) if ".partial-" in name]


def test_backup_into_a_folder_names_a_dated_copy(tmp_path, tb):
    folder = tmp_path / "backups"
    folder.mkdir()
    done = subprocess.run([sys.executable, "taskboard.py", "--db", tb.config["db_path"],
                           "--backup", str(folder)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    [name] = os.listdir(folder)
    assert name.startswith("taskboard-") and name.endswith(".db")


def test_backup_of_a_missing_database_fails_clearly(tmp_path):
    done = subprocess.run([sys.executable, "taskboard.py", "--db", str(tmp_path / "no.db"),
                           "--backup", str(tmp_path / "copy.db")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "no database" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "copy.db").exists() and not (tmp_path / "no.db").exists()


# --- checkpoints ------------------------------------------------------------------------

def test_write_ahead_log_is_checkpointed_in_the_background(client, tb, monkeypatch):
    """SQLite's own checkpoint (inside a COMMIT, with a sync to disk) is off; a worker
    copies the log into the database file instead."""
    with taskboard.tx() as t:
        assert t.value("PRAGMA wal_autocheckpoint") == 0
    results = []
    real = taskboard.checkpoint_wal
    monkeypatch.setattr(taskboard, "checkpoint_wal",
                        lambda path: results.append(real(path)) or results[-1])
    monkeypatch.setattr(taskboard, "CHECKPOINT_SECONDS", 0.05)
    project = client.post_json("/api/projects", {"name": "P", "slug": "p",
                                                 "workingDir": ROOT}).json
    for n in range(50):
        client.post_json(f"/api/projects/{project['id']}/tasks", {"title": f"T{n}"})
    wait_for(lambda: any(busy == 0 and logged > 0 and done == logged
                         for busy, logged, done in results),
             message="a checkpoint of every frame in the log")


def test_the_log_starts_again_from_its_beginning_under_steady_writes(client, tb,
                                                                    monkeypatch):
    """A checkpoint run beside writes never copies the pages written meanwhile, and SQLite
    starts the log again only at a write that finds all of it copied: past a limit, the
    rest is copied holding the lock, or the log grows for as long as writes go on."""
    blocking_sleep = gevent.monkey.get_original("time", "sleep")
    frames = []
    real = taskboard.checkpoint_wal

    def checkpoint_then_wait(path):  # writes go on before the checkpoint ends
        frames.append(real(path)[1])
        blocking_sleep(0.03)
        return (0, frames[-1], frames[-1])
    monkeypatch.setattr(taskboard, "checkpoint_wal", checkpoint_then_wait)
    monkeypatch.setattr(taskboard, "WAL_LIMIT_FRAMES", 50)
    monkeypatch.setattr(taskboard, "WAL_LOCKED_FRAMES", 10_000)
    monkeypatch.setattr(taskboard, "CHECKPOINT_SECONDS", 0.01)
    project = client.post_json("/api/projects", {"name": "P", "slug": "p",
                                                 "workingDir": ROOT}).json
    def starts():  # checkpoints that found the log begun again
        return sum(later < earlier for earlier, later in zip(frames, frames[1:]))
    deadline = time.monotonic() + 30
    while (len(frames) < 12 or starts() < 3) and time.monotonic() < deadline:
        client.post_json(f"/api/projects/{project['id']}/tasks", {"title": "T"})
        gevent.sleep(0)
    assert starts() >= 3, frames


def test_a_slow_checkpoint_does_not_stop_the_server(client, tb, monkeypatch):
    """The checkpoint is held (a sync to a busy disk) until the test has had its answers:
    in the worker thread it lets them through, on the hub it would come first."""
    blocking_sleep = gevent.monkey.get_original("time", "sleep")
    steps = []

    def slow_checkpoint(path):
        steps.append("checkpoint started")
        for _ in range(1000):  # until the test lets go, 10 s at most
            if "let go" in steps:
                break
            blocking_sleep(0.01)
        steps.append("checkpoint finished")
        return (0, 0, 0)
    monkeypatch.setattr(taskboard, "checkpoint_wal", slow_checkpoint)
    monkeypatch.setattr(taskboard, "CHECKPOINT_SECONDS", 0.01)
    wait_for(lambda: "checkpoint started" in steps, message="the checkpoint to start")
    assert client.get("/api/health").status_code == 200
    steps.append("health answered")
    assert client.get("/api/projects").status_code == 200
    steps.append("projects answered")
    steps.append("let go")
    wait_for(lambda: "checkpoint finished" in steps, message="the checkpoint to finish")
    assert steps[:5] == ["checkpoint started", "health answered", "projects answered",
                         "let go", "checkpoint finished"]


def test_a_failing_checkpoint_is_logged_once_not_every_second(tb, monkeypatch, caplog):
    calls = []

    def full(path):
        calls.append(path)
        raise sqlite3.OperationalError("database or disk is full")
    monkeypatch.setattr(taskboard, "checkpoint_wal", full)
    monkeypatch.setattr(taskboard, "CHECKPOINT_SECONDS", 0.01)
    wait_for(lambda: len(calls) >= 5, message="several checkpoints")
    said = [r for r in caplog.records if "checkpoint" in r.getMessage()]
    assert len(said) == 1 and "disk is full" in said[0].getMessage()
