"""Tasks: create, read, update, status moves, timers, logs, delete (design.md §3, §4, §5)."""
import json
import sqlite3

import gevent
import pytest

import taskboard
from conftest import ISO_MS, assert_error, assert_refused, ms_ago, sql

STATUSES = ["backlog", "in_progress", "testing", "done", "failed"]
EXTRA_READ_FIELDS = {
    "project_id", "created_at", "updated_at", "started_at", "completed_at", "retry_count",
    "is_running", "awaiting_subtasks", "branch_name", "pr_url", "session_id", "input_tokens",
    "output_tokens", "cache_read_tokens", "cache_creation_tokens", "total_cost",
    "work_duration_ms", "revision_count", "queue_position"}


def activity(client, project_id):
    return [(a["event"], a["from"], a["to"])
            for a in client.get(f"/api/projects/{project_id}/activity").json]


@pytest.fixture
def project(api):
    return api.project(slug="task-board")


def test_task_create_minimal_gets_defaults(client, project):
    resp = client.post_json(f"/api/projects/{project['id']}/tasks", {"title": "Fix login"})
    assert resp.status_int == 201
    task = resp.json
    assert {k: task[k] for k in ("title", "description", "priority", "task_type", "model",
                                 "thinking_effort", "acceptance_criteria", "tags", "status",
                                 "parent_task_id", "task_key", "project_id")} == {
        "title": "Fix login", "description": "", "priority": 0, "task_type": "feature",
        "model": "model_medium", "thinking_effort": "medium", "acceptance_criteria": "",
        "tags": None, "status": "backlog", "parent_task_id": None, "task_key": "TB-1",
        "project_id": project["id"]}
    assert ISO_MS.match(task["created_at"]) and ISO_MS.match(task["updated_at"])
    assert client.get(f"/api/tasks/{task['id']}").json == task


def test_task_reads_carry_every_extra_field_of_design(client, api, project):
    task = api.task(project["id"])
    assert EXTRA_READ_FIELDS <= set(task)
    assert EXTRA_READ_FIELDS <= set(client.get(f"/api/tasks/{task['id']}").json)
    assert (task["started_at"], task["completed_at"], task["work_duration_ms"],
            task["retry_count"], task["total_cost"]) == (None, None, 0, 0, 0)


def test_task_key_counter_is_never_reused_after_delete(client, api, project):
    first, second = api.task(project["id"]), api.task(project["id"])
    assert (first["task_key"], second["task_key"]) == ("TB-1", "TB-2")
    client.delete(f"/api/tasks/{second['id']}")
    assert api.task(project["id"])["task_key"] == "TB-3"
    other = api.project(slug="other-thing")
    assert api.task(other["id"])["task_key"] == "OT-1"


def test_task_create_with_status_goes_through_move(client, api, project):
    task = api.task(project["id"], status="testing")
    assert task["status"] == "testing" and task["completed_at"] is not None
    assert activity(client, project["id"]) == [
        ("created", None, "backlog"), ("status_change", "backlog", "testing")]


@pytest.mark.parametrize("body, field", [
    ({}, "title"), ({"title": ""}, "title"), ({"title": "   "}, "title"),
    ({"title": "t", "priority": 4}, "priority"), ({"title": "t", "priority": -1}, "priority"),
    ({"title": "t", "priority": "1"}, "priority"), ({"title": "t", "task_type": "epic"},
                                                    "task_type"),
    ({"title": "t", "model": "gpt"}, "model"), ({"title": "t", "thinking_effort": "max"},
                                                "thinking_effort"),
    ({"title": "t", "status": "archived"}, "status"), ({"title": "t", "titel": "x"}, "titel"),
])
def test_task_create_invalid_field_is_refused(client, project, snapshot, body, field):
    assert_refused(snapshot, client.post_json, f"/api/projects/{project['id']}/tasks", body,
                   field)


@pytest.mark.parametrize("tags", [["ui", "urgent"], '["ui","urgent"]', '["ui", "urgent"]'])
def test_task_tags_array_or_json_string_stored_as_json_string(api, project, tags):
    task = api.task(project["id"], tags=tags)
    assert isinstance(task["tags"], str) and json.loads(task["tags"]) == ["ui", "urgent"]


@pytest.mark.parametrize("tags", ["ui,urgent", "[ui]", '{"a": 1}', "[1, 2]", 7])
def test_task_tags_invalid_is_refused_and_nothing_stored(client, project, snapshot, tags):
    assert_refused(snapshot, client.post_json, f"/api/projects/{project['id']}/tasks",
                   {"title": "t", "tags": tags}, "tags")


def test_task_subtask_flags_parent_awaiting(client, api, project):
    parent = api.task(project["id"])
    child = api.task(project["id"], parent_task_id=parent["id"])
    assert child["parent_task_id"] == parent["id"]
    assert client.get(f"/api/tasks/{parent['id']}").json["awaiting_subtasks"] is True


@pytest.mark.parametrize("where", ["other_project", "missing"])
def test_task_parent_outside_project_is_refused(client, api, project, snapshot, where):
    other = api.project()
    parent_id = api.task(other["id"])["id"] if where == "other_project" else 9999
    assert_refused(snapshot, client.post_json, f"/api/projects/{project['id']}/tasks",
                   {"title": "t", "parent_task_id": parent_id}, "parent_task_id")


def test_task_list_orders_by_priority_then_creation(client, api, project):
    titles = [("a", 0), ("b", 2), ("c", 0), ("d", 3), ("e", 2)]
    for title, priority in titles:
        api.task(project["id"], title=title, priority=priority)
    listed = client.get(f"/api/projects/{project['id']}/tasks").json
    assert [t["title"] for t in listed] == ["d", "b", "e", "a", "c"]


def test_task_put_changes_only_sent_fields(client, api, project):
    task = api.task(project["id"], description="keep me", tags=["x"])
    updated = client.put_json(f"/api/tasks/{task['id']}", {"priority": 2}).json
    assert updated["priority"] == 2
    unchanged = {k: v for k, v in task.items() if k not in ("priority", "updated_at")}
    assert {k: updated[k] for k in unchanged} == unchanged


def test_task_put_what_was_got_is_accepted(client, api, project):
    parent = api.task(project["id"])
    child = api.task(project["id"], parent_task_id=parent["id"])
    got = client.get(f"/api/tasks/{child['id']}").json
    resp = client.put_json(f"/api/tasks/{child['id']}", dict(got, title="Renamed"))
    assert resp.status_int == 200
    assert resp.json["title"] == "Renamed" and resp.json["parent_task_id"] == parent["id"]


def test_task_put_ignores_read_only_fields(client, api, project):
    task = api.task(project["id"])
    sent = {"id": 777, "task_key": "HACK-1", "project_id": 999, "total_cost": 9.5,
            "title": "Renamed"}
    updated = client.put_json(f"/api/tasks/{task['id']}", sent).json
    assert (updated["id"], updated["task_key"], updated["project_id"], updated["total_cost"]) \
        == (task["id"], task["task_key"], project["id"], 0)
    assert updated["title"] == "Renamed"


@pytest.mark.parametrize("body, field", [
    ({"title": "x", "titel": "y"}, "titel"), ({"title": "x", "status": "archived"}, "status"),
    ({"title": "x", "priority": 9}, "priority"), ({"title": ""}, "title"),
])
def test_task_put_invalid_changes_nothing(client, api, project, snapshot, body, field):
    task = api.task(project["id"])
    assert_refused(snapshot, client.put_json, f"/api/tasks/{task['id']}", body, field)


def test_task_put_changing_parent_is_refused(client, api, project, snapshot):
    parent = api.task(project["id"])
    task = api.task(project["id"])
    assert_refused(snapshot, client.put_json, f"/api/tasks/{task['id']}",
                   {"title": "x", "parent_task_id": parent["id"]}, "parent_task_id")


def test_task_put_with_new_status_moves_like_patch(client, api, project, tb):
    task = api.task(project["id"])
    moved = client.put_json(f"/api/tasks/{task['id']}",
                            {"title": "Renamed", "status": "in_progress"}).json
    assert (moved["title"], moved["status"]) == ("Renamed", "in_progress")
    assert moved["started_at"] is not None
    assert activity(client, project["id"])[-1] == ("status_change", "backlog", "in_progress")
    tb.logs.flush()
    assert [e["kind"] for e in client.get(f"/api/tasks/{task['id']}/logs").json][0] == "status"


@pytest.mark.parametrize("start", STATUSES)
@pytest.mark.parametrize("to", STATUSES)
def test_task_patch_status_any_to_any(client, api, project, start, to):
    task = api.task(project["id"], status=start)
    resp = client.patch_json(f"/api/tasks/{task['id']}/status", {"status": to})
    assert resp.status_int == 200
    assert resp.json["status"] == to and EXTRA_READ_FIELDS <= set(resp.json)
    assert client.get(f"/api/tasks/{task['id']}").json["status"] == to


def test_task_patch_same_status_is_noop(client, api, project, snapshot):
    task = api.move(api.task(project["id"])["id"], "testing")
    before = snapshot()
    resp = client.patch_json(f"/api/tasks/{task['id']}/status", {"status": "testing"})
    assert resp.status_int == 200 and resp.json == task
    assert snapshot() == before


@pytest.mark.parametrize("body", [{"status": "archived"}, {"status": None}, {}, {"state": "done"}])
def test_task_patch_bad_status_is_refused(client, api, project, snapshot, body):
    task = api.task(project["id"])
    assert_refused(snapshot, client.patch_json, f"/api/tasks/{task['id']}/status", body)


def test_task_timers_started_and_completed(client, api, project):
    tid = api.task(project["id"])["id"]
    first = api.move(tid, "in_progress")
    assert ISO_MS.match(first["started_at"]) and first["completed_at"] is None
    api.move(tid, "backlog")
    again = api.move(tid, "in_progress")
    assert again["started_at"] == first["started_at"]
    done = api.move(tid, "done")
    assert ISO_MS.match(done["completed_at"]) and done["completed_at"] >= done["started_at"]


def test_task_work_duration_accumulates_in_progress_time(api, project, tb):
    tid = api.task(project["id"])["id"]
    api.move(tid, "in_progress")
    sql(tb, "UPDATE tasks SET in_progress_since = ? WHERE id = ?", (ms_ago(2000), tid))
    first = api.move(tid, "testing")["work_duration_ms"]
    assert 2000 <= first < 4000
    assert api.move(tid, "failed")["work_duration_ms"] == first  # not counted outside
    api.move(tid, "in_progress")
    sql(tb, "UPDATE tasks SET in_progress_since = ? WHERE id = ?", (ms_ago(3000), tid))
    total = api.move(tid, "done")["work_duration_ms"]
    assert first + 3000 <= total < first + 5000


def test_task_status_change_writes_status_log(client, api, project, tb):
    tid = api.task(project["id"])["id"]
    api.move(tid, "testing")  # a move that starts no agent, so the status entry is alone
    tb.logs.flush()
    entries = client.get(f"/api/tasks/{tid}/logs").json
    assert len(entries) == 1
    entry = entries[0]
    assert (entry["taskId"], entry["kind"]) == (tid, "status")
    assert "backlog" in entry["message"] and "testing" in entry["message"]
    assert ISO_MS.match(entry["createdAt"])


def test_task_logs_limit_returns_newest_oldest_first(client, api, project, tb):
    tid = api.task(project["id"])["id"]
    for n in range(502):
        tb.logs.append(tid, "text", f"line {n}")
    tb.logs.flush()
    newest = client.get(f"/api/tasks/{tid}/logs?limit=3").json
    assert [e["message"] for e in newest] == ["line 499", "line 500", "line 501"]
    default = client.get(f"/api/tasks/{tid}/logs").json
    assert len(default) == 500
    assert (default[0]["message"], default[-1]["message"]) == ("line 2", "line 501")
    assert len(client.get(f"/api/tasks/{tid}/detail").json["logs"]) == 502  # complete


def test_task_detail_log_entries_are_exactly_the_logs_entries(client, api, project, tb):
    """The detail's whole log and a page of /logs: the same entries either way, each text
    exactly as it was written, whatever it holds."""
    tid = api.task(project["id"])["id"]
    text = 'quotes " \\ and \t tabs, \x00\x1f\x7f controls, ünï 😀 \u2028, </script>'
    tb.logs.append(tid, "text", text)
    tb.logs.append(tid, "tool_call", "Bash: ls", tool="Bash")
    tb.logs.append(tid, "tool_result", "ok", tool="Bash", is_error=False, duration_ms=12)
    tb.logs.append(tid, "tool_result", "boom", tool="Bash", is_error=True, duration_ms=0)
    tb.logs.flush()
    detail = client.get(f"/api/tasks/{tid}/detail")
    logs = client.get(f"/api/tasks/{tid}/logs").json
    assert detail.json["logs"] == logs
    assert [(e["isError"], e["durationMs"]) for e in logs] == \
        [(None, None), (None, None), (False, 12), (True, 0)]
    assert [e["message"] for e in logs] == [text, "Bash: ls", "ok", "boom"]
    assert [list(e) for e in logs] == [["id", "taskId", "runId", "createdAt", "kind", "message",
                                       "tool", "isError", "durationMs", "author"]] * 4
    assert detail.content_type == "application/json"
    empty = client.get(f"/api/tasks/{api.task(project['id'])['id']}/detail").json
    assert empty["logs"] == []


def test_task_detail_keeps_its_log_and_follows_what_is_added_or_deleted(client, api, project,
                                                                         tb):
    """Issue 33: the detail's log is kept between reads (and extended by what is added)
    instead of being rendered whole for every read; it is always exactly the log."""
    tid = api.task(project["id"])["id"]

    def detail_log():
        tb.logs.flush()
        return client.get(f"/api/tasks/{tid}/detail").json["logs"]

    def whole_log():
        return client.get(f"/api/tasks/{tid}/logs?limit=10000").json
    assert detail_log() == []
    for n in range(3):
        tb.logs.append(tid, "text", f"line {n}")
    assert detail_log() == whole_log() and len(whole_log()) == 3
    assert detail_log() == whole_log()  # read again, unchanged
    tb.logs.append(tid, "text", "added")
    assert [e["message"] for e in detail_log()] == ["line 0", "line 1", "line 2", "added"]
    sql(tb, "DELETE FROM logs WHERE task_id = ? AND message = 'line 1'", (tid,))
    assert [e["message"] for e in detail_log()] == ["line 0", "line 2", "added"]
    tb.logs.append(tid, "text", "after the delete")
    sql(tb, "DELETE FROM logs WHERE task_id = ? AND message = 'line 0'", (tid,))
    assert detail_log() == whole_log() and len(whole_log()) == 3


def test_task_logs_of_one_kind_page_back_among_that_kind_only(client, api, project, tb):
    tid = api.task(project["id"])["id"]
    for n in range(6):
        tb.logs.append(tid, "pr" if n % 2 else "text", f"line {n}")
    tb.logs.flush()
    newest = client.get(f"/api/tasks/{tid}/logs?kind=pr&limit=2").json
    assert [e["message"] for e in newest] == ["line 3", "line 5"]
    older = client.get(f"/api/tasks/{tid}/logs?kind=pr&before={newest[0]['id']}").json
    assert [e["message"] for e in older] == ["line 1"]
    assert client.get(f"/api/tasks/{tid}/logs?kind=message").json == []


@pytest.mark.parametrize("kind", ["", "PR", "pr;drop", "x" * 41])
def test_task_logs_bad_kind_is_refused(client, api, project, kind):
    tid = api.task(project["id"])["id"]
    resp = client.get(f"/api/tasks/{tid}/logs?kind={kind}", expect_errors=True)
    assert_error(resp, 400, "validation_error", "kind")


@pytest.mark.parametrize("limit", ["0", "-1", "x", "1.5", "99999999999999999999999"])
def test_task_logs_bad_limit_is_refused(client, api, project, limit):
    tid = api.task(project["id"])["id"]
    resp = client.get(f"/api/tasks/{tid}/logs?limit={limit}", expect_errors=True)
    assert_error(resp, 400, "validation_error", "limit")


def test_task_revisions_empty_and_detail_carries_arrays(client, api, project, tb):
    tid = api.task(project["id"])["id"]
    assert client.get(f"/api/tasks/{tid}/revisions").json == []
    api.move(tid, "testing")
    tb.logs.flush()
    detail = client.get(f"/api/tasks/{tid}/detail").json
    assert (detail["commits"], detail["revisions"], detail["attachments"]) == ([], [], [])
    assert [e["kind"] for e in detail["logs"]] == ["status"]
    task = client.get(f"/api/tasks/{tid}").json
    assert {k: detail[k] for k in task} == task


def test_task_delete_removes_it_and_orphans_children(client, api, project):
    parent = api.task(project["id"])
    child = api.task(project["id"], parent_task_id=parent["id"])
    assert client.delete(f"/api/tasks/{parent['id']}").json == {"ok": True}
    assert_error(client.get(f"/api/tasks/{parent['id']}", expect_errors=True), 404,
                 "not_found")
    assert client.get(f"/api/tasks/{child['id']}").json["parent_task_id"] is None
    assert [t["id"] for t in client.get(f"/api/projects/{project['id']}/tasks").json] == \
        [child["id"]]


@pytest.mark.parametrize("method, path, body", [
    ("get", "/api/tasks/9999", None),
    ("get", "/api/tasks/9999/detail", None),
    ("get", "/api/tasks/9999/logs", None),
    ("get", "/api/tasks/9999/revisions", None),
    ("put_json", "/api/tasks/9999", {"title": "x"}),
    ("patch_json", "/api/tasks/9999/status", {"status": "done"}),
    ("delete", "/api/tasks/9999", None),
    ("get", "/api/projects/9999/tasks", None),
    ("post_json", "/api/projects/9999/tasks", {"title": "x"}),
])
def test_task_unknown_ids_answer_404(client, snapshot, method, path, body):
    before = snapshot()
    call = getattr(client, method)
    resp = call(path, body, expect_errors=True) if body is not None else \
        call(path, expect_errors=True)
    assert_error(resp, 404, "not_found")
    assert snapshot() == before


def test_a_long_read_leaves_the_server_free_for_sockets_and_agents(client, api, tb,
                                                                    monkeypatch):
    """Listing a big project takes SQLite tens of milliseconds; meanwhile the other
    greenlets (WebSocket writers, agent pumps) must go on, not wait for it."""
    project = api.project()
    con = sqlite3.connect(tb.config["db_path"])
    with con:
        con.executemany(
            "INSERT INTO tasks (project_id, title, description, status, task_key, model, "
            "thinking_effort, created_at, updated_at) VALUES (?, ?, ?, 'backlog', ?, "
            "'model_medium', 'medium', '2026-01-01T00:00:00.000Z', "
            "'2026-01-01T00:00:00.000Z')",
            [(project["id"], f"Task {n}", "d" * 2000, f"BIG-{n}") for n in range(6000)])
    con.close()
    steps = []  # "tick" from another greenlet, between SQLite's "began" and "ended"
    in_thread = taskboard.Tx.in_thread

    def recorded(tx, work):
        def working(t):
            steps.append("began")
            try:
                return work(t)
            finally:
                steps.append("ended")
        return in_thread(tx, working)
    monkeypatch.setattr(taskboard.Tx, "in_thread", recorded)

    def ticker():
        while True:
            steps.append("tick")
            gevent.sleep(0.001)
    greenlet = gevent.spawn(ticker)
    gevent.sleep(0.01)
    try:
        listed = client.get(f"/api/projects/{project['id']}/tasks").json
    finally:
        greenlet.kill()
    assert len(listed) == 6000
    assert "began" in steps, "the list was not read in a worker thread"
    reading, during = 0, 0  # reads under way; ticks while one was
    for step in steps:
        if step == "began":
            reading += 1
        elif step == "ended":
            reading -= 1
        elif reading:
            during += 1
    assert during >= 3, "nothing else ran while SQLite read the list"
