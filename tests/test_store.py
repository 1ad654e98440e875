"""The SQLite store: migrations, connection PRAGMAs, many writers at once (design.md §2, STORE)."""

import sqlite3
import threading

import gevent
import gevent.monkey
import pytest
import requests

import taskboard
from conftest import assert_error, bearer, during_a_write, sql, wait_for

#: The tables the design's resources need (§4-§8); later migrations may add more.
REQUIRED_TABLES = {"projects", "tasks", "revisions", "attachments", "activity", "runs", "logs",
                   "templates", "snippets", "webhooks", "webhook_deliveries", "settings"}


def schema(db_path):
    con = sqlite3.connect(db_path)
    try:
        return con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    finally:
        con.close()


def test_store_fresh_db_gets_every_table(tb):
    tables = {name for kind, name, _ in schema(tb.config["db_path"]) if kind == "table"}
    assert REQUIRED_TABLES <= tables, REQUIRED_TABLES - tables


def test_store_fresh_db_records_every_migration(tb):
    con = sqlite3.connect(tb.config["db_path"])
    try:
        applied = [r[0] for r in con.execute("SELECT name FROM _migrations ORDER BY name")]
    finally:
        con.close()
    assert applied == sorted(name for name, _ in taskboard.MIGRATIONS)


def test_store_migrate_again_changes_nothing(tb, api, snapshot):
    project = api.project()
    api.task(project["id"])
    before_schema, before_rows = schema(tb.config["db_path"]), snapshot()
    assert taskboard.migrate() == []
    assert schema(tb.config["db_path"]) == before_schema
    assert snapshot() == before_rows


def test_store_reopening_the_same_db_keeps_data(tb, api, client, config):
    project = api.project(name="Kept")
    task = api.task(project["id"], title="Still here")
    taskboard.shutdown()
    runtime = taskboard.init(config)
    assert runtime is not tb
    assert client.get(f"/api/projects/{project['id']}").json["name"] == "Kept"
    assert client.get(f"/api/tasks/{task['id']}").json["title"] == "Still here"
    second = api.task(project["id"])  # the per-project counter continues, never reused
    assert second["task_key"] != task["task_key"]
    assert second["task_key"].endswith("-2")


def test_store_db_file_is_in_wal_mode(tb):
    con = sqlite3.connect(tb.config["db_path"])
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        con.close()


def test_store_connections_have_wal_and_foreign_keys_in_every_greenlet(tb):
    def pragmas():
        with taskboard.tx() as t:
            return (t.value("PRAGMA journal_mode"), t.value("PRAGMA foreign_keys"))
    jobs = [gevent.spawn(pragmas) for _ in range(5)]
    gevent.joinall(jobs, timeout=5, raise_error=True)
    assert [j.value for j in jobs] == [("wal", 1)] * 5
    assert pragmas() == ("wal", 1)


def test_store_foreign_keys_are_enforced(tb, api, client):
    project = api.project()
    task = api.task(project["id"])
    with pytest.raises(sqlite3.IntegrityError):
        with taskboard.tx() as t:
            t.insert("logs", {"task_id": task["id"] + 1000, "created_at": "x", "kind": "text",
                              "message": "orphan"})
    client.delete(f"/api/projects/{project['id']}")
    con = sqlite3.connect(tb.config["db_path"])
    try:  # ON DELETE CASCADE ran: the project's tasks went with it
        assert con.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 0
    finally:
        con.close()


def task_keys(db_path, project_id):
    con = sqlite3.connect(db_path)
    try:
        return [r[0] for r in con.execute(
            "SELECT task_key FROM tasks WHERE project_id = ?", (project_id,))]
    finally:
        con.close()


class Ticker:
    """A greenlet that notes each turn it gets, beside what the test notes in `seen`: a
    hub frozen by a blocking wait (SQLite's busy handler) would give it none meanwhile."""

    def __init__(self):
        self.seen = []
        self.greenlet = gevent.spawn(self._tick)

    def _tick(self):
        while True:
            gevent.sleep(0.001)
            self.seen.append("tick")

    def note(self, what):
        self.seen.append(what)

    def stop(self):
        self.greenlet.kill()
        done = [n for n, what in enumerate(self.seen) if what != "tick"]
        return self.seen[done[0]:done[-1]].count("tick") if done else 0


def test_store_fifty_concurrent_service_creates_all_succeed(tb, api):
    """Fifty greenlets creating at once each get their own key.  (Whether the hub runs
    anything meanwhile is the HTTP test's question: these creates do no I/O, so they may
    well run one after another without ever handing it a turn.)"""
    project = api.project(slug="tb")
    jobs = [gevent.spawn(taskboard.create_task, project["id"], {"title": f"Task {n}"})
            for n in range(50)]
    gevent.joinall(jobs, timeout=30)
    assert all(j.successful() for j in jobs), [j.exception for j in jobs if j.exception]
    keys = task_keys(tb.config["db_path"], project["id"])
    assert len(keys) == 50
    assert sorted(keys) == sorted(f"TB-{n}" for n in range(1, 51))


def create_at_once(client, project_id, bodies):
    """POST every body at the same moment; the responses in the same order."""
    jobs = [gevent.spawn(client.post_json, f"/api/projects/{project_id}/tasks", body,
                         expect_errors=True) for body in bodies]
    gevent.joinall(jobs, timeout=30, raise_error=True)
    return [job.value for job in jobs]


def test_tasks_created_at_the_same_moment_keep_their_keys(tb, api, client):
    project = api.project(slug="tb")
    responses = create_at_once(client, project["id"], [{"title": f"Task {n}"}
                                                      for n in range(8)])
    assert [r.status_int for r in responses] == [201] * 8
    assert [r.json["task_key"] for r in responses] == [f"TB-{n}" for n in range(1, 9)]
    listed = client.get(f"/api/projects/{project['id']}/tasks").json
    assert sorted(t["title"] for t in listed) == sorted(f"Task {n}" for n in range(8))
    created = [a for a in client.get(f"/api/projects/{project['id']}/activity").json
               if a["event"] == "created"]
    assert len(created) == 8


def test_a_refused_create_leaves_the_others_made_with_it_stored(tb, api, client):
    """A bad parent undoes only its own create, the project's key counter too, so the
    keys stay without a gap."""
    project, other = api.project(slug="tb"), api.project(slug="other")
    stranger = api.task(other["id"])
    bodies = [{"title": f"Task {n}"} for n in range(6)]
    bodies[3] = {"title": "Adopted", "parent_task_id": stranger["id"]}
    responses = create_at_once(client, project["id"], bodies)
    assert_error(responses[3], 400, field="parent_task_id")
    good = [r for n, r in enumerate(responses) if n != 3]
    assert [r.status_int for r in good] == [201] * 5
    assert sorted(task_keys(tb.config["db_path"], project["id"])) == \
        [f"TB-{n}" for n in range(1, 6)]
    assert sql(tb, "SELECT COUNT(*) FROM tasks WHERE title = 'Adopted'") == [(0,)]


def test_when_sqlite_ends_a_creates_transaction_it_is_refused_and_nothing_stored(
        tb, api, client, snapshot, monkeypatch):
    """A full disk can make SQLite roll the transaction back by itself: then nothing of
    the create was stored, and it is answered 507, not 201."""
    project = api.project(slug="tb")
    before = snapshot()
    queue = taskboard.Notice.queue

    def full_disk_on_boom(moment, t, row):
        queue(moment, t, row)
        if row["title"] == "Boom":
            t.connection.rollback()  # what SQLite does on SQLITE_FULL, say
            raise sqlite3.OperationalError("database or disk is full")
    monkeypatch.setattr(taskboard.Notice, "queue", full_disk_on_boom)
    response = client.post_json(f"/api/projects/{project['id']}/tasks", {"title": "Boom"},
                                expect_errors=True)
    assert_error(response, 507, "storage_full")
    assert snapshot() == before
    monkeypatch.setattr(taskboard.Notice, "queue", queue)
    assert api.task(project["id"])["task_key"] == "TB-1"


def test_store_fifty_concurrent_http_creates_all_succeed(live, api, tb):
    project = api.project()
    ws = live.ws()
    ticker = Ticker()

    def post(n):
        response = requests.post(f"{live.url}/api/projects/{project['id']}/tasks",
                                 json={"title": f"Task {n}"}, timeout=20, headers=bearer())
        ticker.note("created")
        return response
    jobs = [gevent.spawn(post, n) for n in range(50)]
    gevent.joinall(jobs, timeout=30, raise_error=True)
    ticks = ticker.stop()
    assert [j.value.status_code for j in jobs] == [201] * 50
    keys = task_keys(tb.config["db_path"], project["id"])
    assert len(keys) == 50 and len(set(keys)) == 50
    assert {j.value.json()["task_key"] for j in jobs} == set(keys)
    created = set()
    while len(created) < 50:  # every create was published too
        created.add(ws.until("task:created")["data"]["id"])
    assert ticks > 0, "the hub ran nothing else while the creates went on"


def test_a_read_in_a_thread_ends_before_its_transaction_even_when_killed(tb):
    """A greenlet killed while its long read runs in a worker thread ends the transaction
    only once the read is done; the next transaction then finds the store as it was."""
    blocking_sleep = gevent.monkey.get_original("time", "sleep")
    started, finished = threading.Event(), threading.Event()

    def slow_read(t):
        started.set()
        blocking_sleep(0.3)
        value = t.value("SELECT COUNT(*) FROM projects")
        finished.set()
        return value

    def reader():
        with taskboard.read() as t:
            return t.in_thread(slow_read)
    greenlet = gevent.spawn(reader)
    wait_for(started.is_set, message="the read to start")
    greenlet.kill()
    assert finished.is_set()
    with taskboard.tx() as t:
        assert t.value("SELECT COUNT(*) FROM projects") == 0


# --- task lists, kept until the project's tasks change ----------------------------------

def count_list_reads(monkeypatch):
    """How many times a project's task list is read from SQLite (the long part)."""
    reads = []
    real = taskboard.Tx.in_thread

    def in_thread(self, read):
        reads.append(read)
        return real(self, read)
    monkeypatch.setattr(taskboard.Tx, "in_thread", in_thread)
    return reads


def test_an_unchanged_projects_list_is_read_once_and_a_change_reads_it_again(
        tb, client, api, monkeypatch):
    project, other = api.project(), api.project()
    first = api.task(project["id"], title="First")
    api.task(project["id"], title="Second", priority=2)
    reads = count_list_reads(monkeypatch)
    listed = client.get(f"/api/projects/{project['id']}/tasks").json
    assert client.get(f"/api/projects/{project['id']}/tasks").json == listed
    assert [t["title"] for t in listed] == ["Second", "First"] and len(reads) == 1
    api.task(other["id"], title="Elsewhere")  # another project's change keeps this list
    assert client.get(f"/api/projects/{project['id']}/tasks").json == listed
    assert len(reads) == 1
    client.put_json(f"/api/tasks/{first['id']}", {"title": "Renamed", "priority": 3})
    assert [t["title"] for t in client.get(f"/api/projects/{project['id']}/tasks").json] \
        == ["Renamed", "Second"] and len(reads) == 2
    api.move(first["id"], "testing")
    client.delete(f"/api/tasks/{listed[0]['id']}")
    assert [(t["title"], t["status"]) for t in
            client.get(f"/api/projects/{project['id']}/tasks").json] == [("Renamed", "testing")]
    assert client.get(f"/api/projects/{other['id']}/tasks").json[0]["title"] == "Elsewhere"


def test_lists_counts_and_stats_follow_changes_another_program_writes(tb, client, api):
    """A kept list is dropped by triggers in the database, not by the board's own write
    paths: a change made outside the board shows at once, in counts and stats too."""
    project, other = api.project(), api.project()
    tasks = [api.task(project["id"], title=f"Task {i}") for i in range(3)]

    def seen():
        listed = client.get(f"/api/projects/{project['id']}/tasks").json
        summary = {p["id"]: (p["backlogCount"], p["doneCount"])
                   for p in client.get("/api/projects/summary").json}
        stats = client.get(f"/api/projects/{project['id']}/stats").json
        return ({t["title"]: t["status"] for t in listed}, summary[project["id"]],
                summary[other["id"]], stats["statusCounts"]["done"], stats["completedToday"])
    assert seen() == ({"Task 0": "backlog", "Task 1": "backlog", "Task 2": "backlog"},
                      (3, 0), (0, 0), 0, 0)
    sql(tb, "UPDATE tasks SET status = 'done', title = 'Shipped', completed_at = ? "
            "WHERE id = ?", (taskboard.now_iso(), tasks[0]["id"]))
    assert seen() == ({"Shipped": "done", "Task 1": "backlog", "Task 2": "backlog"},
                      (2, 1), (0, 0), 1, 1)
    sql(tb, "DELETE FROM tasks WHERE id = ?", (tasks[1]["id"],))
    sql(tb, "UPDATE tasks SET project_id = ? WHERE id = ?", (other["id"], tasks[2]["id"]))
    assert seen() == ({"Shipped": "done"}, (0, 1), (1, 0), 1, 1)
    assert [t["title"] for t in client.get(f"/api/projects/{other['id']}/tasks").json] \
        == ["Task 2"]
    client.delete(f"/api/projects/{other['id']}")
    assert sql(tb, "SELECT * FROM task_versions WHERE project_id = ?", (other["id"],)) == []


def test_kept_task_lists_are_bounded_in_bytes(tb, client, api, monkeypatch):
    derived = taskboard.DERIVED
    monkeypatch.setattr(derived, "limit", 3300)
    projects = [api.project() for _ in range(3)]
    for p in projects:
        api.task(p["id"], description="x" * 800)
    sizes = [len(client.get(f"/api/projects/{p['id']}/tasks").body) for p in projects]
    assert all(1100 < size <= 1650 for size in sizes), sizes  # two fit the bound, not three
    assert derived.kept.total <= 3300
    kept = {key[1] for key in derived.kept.items if key[0] == "list"}
    assert kept == {projects[1]["id"], projects[2]["id"]}  # the least recently read went
    api.task(projects[0]["id"], description="y" * 4000)  # a list bigger than the bound
    assert len(client.get(f"/api/projects/{projects[0]['id']}/tasks").json) == 2
    assert derived.kept.total <= 3300


def test_a_read_is_answered_while_a_write_transaction_is_under_way(tb, client, api):
    """Reads run on connections of their own: a request reading the store is answered
    while a long write holds the write lock, and sees the last commit before it."""
    project = api.project()
    api.task(project["id"], title="Committed")
    listed, order = during_a_write(
        lambda t: t.execute("UPDATE tasks SET title = 'Not yet' WHERE project_id = ?",
                            (project["id"],)),
        lambda: client.get(f"/api/projects/{project['id']}/tasks").json)
    assert order == ["read answered", "write done"]
    assert [t["title"] for t in listed] == ["Committed"]
    assert [t["title"] for t in client.get(f"/api/projects/{project['id']}/tasks").json] \
        == ["Not yet"]


def test_a_write_from_outside_waits_for_a_write_under_way_and_lands_after_it(tb, api):
    """Another program's write (conftest.sql) while a board transaction holds the write
    lock across a switch (Tx.in_thread) waits for its commit, then lands: it must not
    freeze the hub that commit needs (it failed "database is locked" after 5 s)."""
    project = api.project()
    _, order = during_a_write(
        lambda t: t.execute("UPDATE projects SET name = 'Board' WHERE id = ?",
                            (project["id"],)),
        lambda: sql(tb, "UPDATE projects SET name = 'Outside' WHERE id = ?",
                    (project["id"],)))
    assert order == ["write done", "read answered"]
    assert sql(tb, "SELECT name FROM projects WHERE id = ?", (project["id"],)) == [("Outside",)]
