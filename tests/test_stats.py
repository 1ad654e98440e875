"""Project statistics, the activity feed and agent usage (design.md §4, §5)."""
import datetime as dt

import pytest

import taskboard
from conftest import ISO_MS, assert_error, during_a_write, iso, ms_ago, sql, stats

ZERO_STATS = {
    "statusCounts": {"backlog": 0, "in_progress": 0, "testing": 0, "done": 0, "failed": 0},
    "typeCounts": {"feature": 0, "bugfix": 0, "refactor": 0, "docs": 0, "test": 0,
                   "chore": 0},
    "priorityCounts": {"0": 0, "1": 0, "2": 0, "3": 0},
    "totalTasks": 0, "avgDuration": 0, "completedToday": 0,
    "agentRuns": 0, "inputTokens": 0, "outputTokens": 0, "totalCost": 0.0,
    "worktrees": 0, "worktreeBytes": 0,
}


def add_run(tb, model, started_at, task_id=None, kind="task", inp=0, out=0, cache_read=0,
            cache_creation=0, cost=0.0):
    sql(tb, "INSERT INTO runs (task_id, kind, model, status, started_at, ended_at, "
            "input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens, cost) "
            "VALUES (?, ?, ?, 'ok', ?, ?, ?, ?, ?, ?, ?)",
        (task_id, kind, model, started_at, started_at, inp, out, cache_read, cache_creation,
         cost))


@pytest.fixture
def project(api):
    return api.project()


def test_stats_empty_project_has_every_key_at_zero(client, project):
    assert stats(client, project["id"]) == ZERO_STATS


def test_stats_counts_by_status_type_and_priority(client, api, project):
    api.task(project["id"], task_type="bugfix", priority=3)
    api.task(project["id"], task_type="bugfix", priority=1, status="testing")
    api.task(project["id"], task_type="docs", status="failed")
    body = stats(client, project["id"])
    assert body["statusCounts"] == dict(ZERO_STATS["statusCounts"], backlog=1, testing=1,
                                        failed=1)
    assert body["typeCounts"] == dict(ZERO_STATS["typeCounts"], bugfix=2, docs=1)
    assert body["priorityCounts"] == {"0": 1, "1": 1, "2": 0, "3": 1}
    assert (body["totalTasks"], body["avgDuration"], body["completedToday"]) == (3, 0, 0)


def test_stats_other_projects_are_not_counted(client, api, project):
    other = api.project()
    api.task(other["id"], status="done")
    assert stats(client, project["id"]) == ZERO_STATS


def test_stats_avg_duration_is_mean_in_progress_time_of_done_tasks(client, api, project, tb):
    for spent_ms, end in ((1000, "done"), (3000, "done"), (60_000, "testing")):
        tid = api.task(project["id"], status="in_progress")["id"]
        sql(tb, "UPDATE tasks SET in_progress_since = ? WHERE id = ?", (ms_ago(spent_ms), tid))
        api.move(tid, end)
    avg = stats(client, project["id"])["avgDuration"]
    assert isinstance(avg, int) and 2000 <= avg < 3000


def test_stats_completed_today_counts_tasks_done_today_only(client, api, project, tb):
    api.task(project["id"], status="done")
    api.task(project["id"], status="done")
    api.move(api.task(project["id"], status="done")["id"], "testing")
    old = api.task(project["id"], status="done")["id"]
    sql(tb, "UPDATE tasks SET completed_at = ? WHERE id = ?", (ms_ago(3 * 86_400_000), old))
    body = stats(client, project["id"])
    assert (body["statusCounts"]["done"], body["completedToday"]) == (3, 2)


def test_stats_unknown_project_is_404(client):
    assert_error(client.get("/api/projects/9999/stats", expect_errors=True), 404, "not_found")


def test_activity_entries_are_chronological_with_full_shape(client, api, project):
    tid = api.task(project["id"], title="Ship it")["id"]
    api.move(tid, "in_progress")
    api.move(tid, "done")
    entries = client.get(f"/api/projects/{project['id']}/activity").json
    assert [{k: e[k] for k in ("taskId", "taskTitle", "event", "from", "to")}
            for e in entries] == [
        {"taskId": tid, "taskTitle": "Ship it", "event": "created", "from": None,
         "to": "backlog"},
        {"taskId": tid, "taskTitle": "Ship it", "event": "status_change", "from": "backlog",
         "to": "in_progress"},
        {"taskId": tid, "taskTitle": "Ship it", "event": "status_change",
         "from": "in_progress", "to": "done"}]
    assert all(set(e) == {"id", "taskId", "taskTitle", "event", "from", "to", "timestamp"}
               for e in entries)
    assert all(ISO_MS.match(e["timestamp"]) for e in entries)
    assert [e["timestamp"] for e in entries] == sorted(e["timestamp"] for e in entries)


def test_activity_same_status_move_records_nothing(client, api, project):
    tid = api.task(project["id"])["id"]
    api.move(tid, "backlog")
    assert len(client.get(f"/api/projects/{project['id']}/activity").json) == 1


@pytest.fixture
def six_entries(api, project):
    """created, then five moves: entry n's `to` is TARGETS[n]."""
    tid = api.task(project["id"])["id"]
    for status in ("in_progress", "testing", "failed", "in_progress", "done"):
        api.move(tid, status)
    return ["backlog", "in_progress", "testing", "failed", "in_progress", "done"]


@pytest.mark.parametrize("query, wanted", [
    ("", slice(0, 6)),
    ("?limit=2", slice(4, 6)),
    ("?limit=2&offset=1", slice(3, 5)),
    ("?offset=4", slice(0, 2)),
    ("?limit=3&offset=5", slice(0, 1)),
    ("?offset=6", slice(0, 0)),
])
def test_activity_page_skips_offset_newest_and_returns_oldest_first(
        client, project, six_entries, query, wanted):
    entries = client.get(f"/api/projects/{project['id']}/activity{query}").json
    assert [e["to"] for e in entries] == six_entries[wanted]


def test_activity_default_limit_is_50_newest(client, api, project):
    tid = api.task(project["id"])["id"]
    for _ in range(30):
        api.move(tid, "testing")
        api.move(tid, "backlog")
    entries = client.get(f"/api/projects/{project['id']}/activity").json
    assert len(entries) == 50
    assert entries[0]["event"] == "status_change" and entries[-1]["to"] == "backlog"
    assert [e["id"] for e in entries] == sorted(e["id"] for e in entries)


@pytest.mark.parametrize("query, field", [
    ("limit=0", "limit"), ("limit=-1", "limit"), ("limit=x", "limit"),
    ("limit=99999999999999999999999", "limit"), ("offset=-1", "offset"),
    ("offset=x", "offset"), ("offset=1.5", "offset"),
])
def test_activity_bad_paging_is_refused(client, project, query, field):
    resp = client.get(f"/api/projects/{project['id']}/activity?{query}", expect_errors=True)
    assert_error(resp, 400, "validation_error", field)


def test_agent_usage_without_runs_is_all_zero(client):
    assert client.get("/api/stats/agent-usage").json == {
        "usage": {"totalInputTokens": 0, "totalOutputTokens": 0, "totalCacheRead": 0,
                  "totalCacheCreation": 0, "totalCost": 0, "costEstimated": False,
                  "totalTasks": 0},
        "models": {m: {"tasks": 0, "inputTokens": 0, "outputTokens": 0, "cost": 0}
                   for m in ("model_large", "model_medium", "model_small")},
        "agents": {a: {"tasks": 0, "inputTokens": 0, "outputTokens": 0, "cost": 0,
                       "costEstimated": False} for a in taskboard.AGENTS},
        "timeline": [],
        "limits": {"dailyLimit": None, "currentUsage": 0},
    }


def test_agent_usage_sums_per_tier_day_and_today(client, api, project, tb):
    first = api.task(project["id"])["id"]
    second = api.task(project["id"])["id"]
    now = dt.datetime.now(dt.UTC)
    past_day = dt.datetime(2025, 1, 10, 12, 0).astimezone()  # server-local noon
    add_run(tb, "model_large", iso(now), first, inp=100, out=10, cache_read=5, cost=0.5)
    add_run(tb, "model_large", iso(now), first, inp=200, out=20, cache_creation=7, cost=0.25)
    add_run(tb, "model_small", iso(past_day), second, inp=1000, out=100, cost=2.0)
    add_run(tb, "model_medium", iso(now), None, kind="planner", inp=50, out=5, cost=0.125)
    client.put_json("/api/settings", {"dailyCostLimit": 5})
    body = client.get("/api/stats/agent-usage").json
    assert body["usage"] == {"totalInputTokens": 1350, "totalOutputTokens": 135,
                             "totalCacheRead": 5, "totalCacheCreation": 7,
                             "totalCost": pytest.approx(2.875), "costEstimated": False,
                             "totalTasks": 2}
    assert body["models"] == {
        "model_large": {"tasks": 1, "inputTokens": 300, "outputTokens": 30,
                        "cost": pytest.approx(0.75)},
        "model_medium": {"tasks": 0, "inputTokens": 50, "outputTokens": 5,
                         "cost": pytest.approx(0.125)},
        "model_small": {"tasks": 1, "inputTokens": 1000, "outputTokens": 100,
                        "cost": pytest.approx(2.0)}}
    today = dt.datetime.now().date().isoformat()
    assert body["timeline"] == [
        {"date": "2025-01-10", "inputTokens": 1000, "outputTokens": 100,
         "cost": pytest.approx(2.0), "costEstimated": False},
        {"date": today, "inputTokens": 350, "outputTokens": 35,
         "cost": pytest.approx(0.875), "costEstimated": False}]
    assert body["limits"] == {"dailyLimit": 5, "currentUsage": pytest.approx(0.875)}


def test_agent_usage_counts_a_task_once_in_all_and_in_each_tier_it_ran_with(client, api,
                                                                            project, tb):
    task = api.task(project["id"])["id"]
    now = iso(dt.datetime.now(dt.UTC))
    add_run(tb, "model_large", now, task, inp=100, cost=0.5)
    add_run(tb, "model_small", now, task, kind="verifier", inp=10, cost=0.25)
    body = client.get("/api/stats/agent-usage").json
    assert (body["models"]["model_large"]["tasks"], body["models"]["model_small"]["tasks"],
            body["usage"]["totalTasks"]) == (1, 1, 1)


def test_agent_usage_is_one_snapshot_read_beside_an_unfinished_write(client, api, project,
                                                                      tb):
    """The sums are read in one transaction of their own: a write under way (a run ending)
    neither holds them up nor shows in some figures and not in others."""
    task = api.task(project["id"])["id"]
    add_run(tb, "model_large", iso(dt.datetime.now(dt.UTC)), task, inp=100, cost=0.5)
    during, order = during_a_write(
        lambda t: t.insert("runs", {"task_id": task, "kind": "task", "model": "model_large",
                                    "status": "ok", "started_at": taskboard.now_iso(),
                                    "input_tokens": 50, "cost": 0.25}),
        lambda: client.get("/api/stats/agent-usage").json)
    after = client.get("/api/stats/agent-usage").json
    assert order == ["read answered", "write done"]
    assert (during["usage"]["totalInputTokens"],
            during["models"]["model_large"]["inputTokens"]) == (100, 100)
    assert (after["usage"]["totalInputTokens"],
            after["models"]["model_large"]["inputTokens"]) == (150, 150)


def test_agent_usage_follows_each_run_the_board_records(client, api, tb):
    """The usage sums are kept between reads; every run that ends shows at once."""
    project = api.project()
    task = api.task(project["id"])
    before = client.get("/api/stats/agent-usage").json["usage"]["totalInputTokens"]
    assert client.get("/api/stats/agent-usage").json["usage"]["totalInputTokens"] == before
    run_id = taskboard.insert_run_row({"task_id": task["id"], "project_id": project["id"],
                                       "kind": "task", "model": "model_small"})
    assert client.get("/api/stats/agent-usage").json["models"]["model_small"]["tasks"] == 0
    taskboard.finish_run_rows(run_id, {"status": "ok", "input_tokens": 1234, "cost": 0.5},
                              {})
    body = client.get("/api/stats/agent-usage").json
    assert body["usage"]["totalInputTokens"] == before + 1234
    assert body["models"]["model_small"]["tasks"] == 1
    api.client.delete(f"/api/tasks/{task['id']}")
    body = client.get("/api/stats/agent-usage").json
    assert body["usage"]["totalInputTokens"] == before + 1234  # a deleted task's usage stays
    assert body["models"]["model_small"]["tasks"] == 0
