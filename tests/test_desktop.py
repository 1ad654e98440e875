"""Desktop commands over HTTP: POST /api/desktop/<command> (design.md §5, §10, §11;
spec "Desktop-only commands"; README "Desktop commands (local only)").

Runs use the scripted tests/fake_agent.py: the task description picks its behaviour
(`fake:<directive>`), and it records every invocation in $FAKE_AGENT_DIR/calls.jsonl.
"""
import json
import os

import pytest

import taskboard
from agent_helpers import (
    RUN,
    alive,
    assert_stays,
    children,
    get_task,
    logs,
    query,
    read_calls,
    start,
    task_calls,
    transcript,
    wait_quiet,
    wait_running,
    wait_status,
)
from conftest import assert_error, desk, git, wait_for

pytestmark = pytest.mark.usefixtures("fast_retries")

TOKEN = "desk-token"

COMMANDS = ("stop_task", "restart_task", "request_changes", "get_task_diff",
            "add_task_dependency", "remove_task_dependency", "get_task_dependencies",
            "get_dependency_graph", "get_execution_waves", "get_pipeline_status",
            "reorder_queue", "get_agent_activity", "get_active_file_map", "get_task_events",
            "get_agent_md", "save_agent_md")


# --- helpers (small copies of the run-test helpers) ---------------------------------------


def ids(tasks):
    return [t["id"] for t in tasks]


# --- stop_task ------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["id", "taskId"])
def test_stop_task_running_kills_process_group_and_moves_to_backlog(client, api, agent_dir,
                                                                      key):
    tid = start(api, api.project(maxRetries=2), "fake:child fake:hang")
    call = wait_running(client, tid, agent_dir)
    [child] = wait_for(lambda: children(agent_dir), RUN, message="the agent's child")
    task = desk(client, "stop_task", {key: tid}).json
    assert task["id"] == tid and task["task_key"] and task["title"] == "Write tests"
    assert (task["status"], task["is_running"]) == ("backlog", False)
    wait_for(lambda: not alive(call["pid"]) and not alive(child), RUN,
             message="the agent and its child (the whole group) to be killed")
    assert_stays(lambda: len(read_calls(agent_dir)) == 1
                 and get_task(client, tid)["status"] == "backlog", 0.5, "no retry, no restart")
    assert not taskboard.runtime.agents.holds(tid)


@pytest.mark.parametrize("status", ["backlog", "testing", "done", "failed"])
def test_stop_task_not_in_progress_is_409_and_changes_nothing(client, api, snapshot, status):
    task = api.task(api.project()["id"])
    if status != "backlog":
        api.move(task["id"], status)
    before = snapshot()
    response = desk(client, "stop_task", {"id": task["id"]}, status=409)
    assert_error(response, 409, "conflict")
    assert snapshot() == before


def test_stop_task_unknown_task_is_404(client, tb):
    assert_error(desk(client, "stop_task", {"id": 999}, status=404), 404, "not_found")


# --- restart_task -----------------------------------------------------------------------------

def test_restart_task_running_starts_fresh_session_without_resume(client, api, agent_dir):
    tid = start(api, api.project(), "Restart me. fake:hang")
    first = wait_running(client, tid, agent_dir)
    wait_quiet(client, tid)
    task = desk(client, "restart_task", {"id": tid, "mcpPort": 4123}).json
    assert (task["id"], task["status"]) == (tid, "in_progress")
    second = wait_running(client, tid, agent_dir, runs=2)
    wait_for(lambda: not alive(first["pid"]), RUN, message="the old agent to be killed")
    assert "--resume" not in second["argv"]
    assert second["session_id"] != first["session_id"]
    assert "Restart me." in second["stdin"], "a fresh session gets the whole prompt"
    task = get_task(client, tid)
    assert (task["status"], task["is_running"], task["retry_count"]) == ("in_progress", True, 0)
    wait_for(lambda: get_task(client, tid)["session_id"] == second["session_id"], RUN,
             message="the fresh session to be recorded")
    assert len(task_calls(agent_dir, tid)) == 2


def test_restart_task_from_testing_starts_fresh_session_in_progress(client, api, agent_dir):
    tid = start(api, api.project(), "fake:ok")
    wait_status(client, tid, "testing")
    [first] = task_calls(agent_dir, tid)
    task = desk(client, "restart_task", {"taskId": tid}).json
    assert task["status"] == "in_progress"
    second = wait_for(lambda: task_calls(agent_dir, tid)[1:], RUN,
                      message="a second run")[0]
    assert "--resume" not in second["argv"]
    assert second["session_id"] != first["session_id"]
    wait_status(client, tid, "testing")


# --- request_changes --------------------------------------------------------------------------

def _to_status(client, api, agent_dir, project, status):
    """A task that has had one run and is now in `status`; its id and that run's call."""
    if status == "failed":
        tid = start(api, project, "fake:exit=3")
        wait_status(client, tid, "failed")
    elif status == "in_progress":
        tid = start(api, project, "fake:hang")
        wait_running(client, tid, agent_dir)
        wait_quiet(client, tid)
    else:
        tid = start(api, project, "fake:ok")
        wait_status(client, tid, "testing")
        if status == "done":
            api.move(tid, "done")
    [call] = task_calls(agent_dir, tid)
    wait_for(lambda: get_task(client, tid)["session_id"] == call["session_id"], RUN,
             message="the session id to be stored")
    return tid, call


@pytest.mark.parametrize("status", ["testing", "done", "failed", "in_progress"])
def test_request_changes_records_revision_and_resumes_session_with_feedback(
        client, api, agent_dir, status):
    project = api.project(maxRetries=0)
    tid, first = _to_status(client, api, agent_dir, project, status)
    before = get_task(client, tid)
    feedback = "Please also handle negative totals."
    task = desk(client, "request_changes", {"id": tid, "feedback": feedback,
                                            "mcpPort": 4123}).json
    assert task["id"] == tid
    assert task["status"] == "in_progress"
    assert task["revision_count"] == before["revision_count"] + 1
    second = wait_for(lambda: task_calls(agent_dir, tid)[1:], RUN,
                      message="the resumed run")[0]
    argv = second["argv"]
    assert "--resume" in argv and argv[argv.index("--resume") + 1] == first["session_id"]
    assert second["stdin"].strip() == feedback
    wait_for(lambda: not alive(first["pid"]), RUN, message="the old agent to be stopped")
    wait_status(client, tid, "testing")  # the resumed session (fake: ok) finishes
    revisions = client.get(f"/api/tasks/{tid}/revisions").json
    assert [r["feedback"] for r in revisions] == [feedback]
    assert revisions[0]["taskId"] == tid and revisions[0]["createdAt"].endswith("Z")
    # the person's words where they talk to the agent, and in the log, as it was sent them
    messages = client.get(f"/api/tasks/{tid}/messages").json
    assert [(m["text"], m["state"]) for m in messages if m["author"] == "person"] == \
        [(feedback, "sent")]
    assert [(e["message"], e["author"]) for e in logs(client, tid) if e["kind"] == "message"] \
        == [(feedback, "person")]
    activity = client.get(f"/api/projects/{project['id']}/activity?limit=200").json
    assert [a for a in activity if a["taskId"] == tid and a["event"] == "revision"], activity
    assert len(task_calls(agent_dir, tid)) == 2


@pytest.mark.parametrize("feedback", ["", "   \n", None, 5])
def test_request_changes_empty_or_missing_feedback_is_400_and_changes_nothing(
        client, api, snapshot, feedback):
    tid = api.task(api.project()["id"])["id"]
    api.move(tid, "testing")
    body = {"id": tid} if feedback is None else {"id": tid, "feedback": feedback}
    before = snapshot()
    response = desk(client, "request_changes", body, status=400)
    assert_error(response, 400, "validation_error")
    assert snapshot() == before


def test_request_changes_from_backlog_is_409_and_changes_nothing(client, api, snapshot,
                                                                 agent_dir):
    tid = api.task(api.project()["id"])["id"]
    before = snapshot()
    response = desk(client, "request_changes", {"id": tid, "feedback": "Do more."},
                    status=409)
    assert_error(response, 409, "conflict")
    assert snapshot() == before
    assert read_calls(agent_dir) == []


# --- get_task_diff ------------------------------------------------------------------------------

def test_get_task_diff_covers_commits_and_working_tree_since_first_run(client, api, agent_dir):
    repo = api.workdir
    git(repo, "init", "-q", "-b", "main")
    (repo / "app.py").write_text("a\nb\nc\n")
    git(repo, "add", "app.py")
    git(repo, "commit", "-q", "-m", "initial")
    (repo / "before.txt").write_text("made before the task ran\n")
    git(repo, "add", "before.txt")
    git(repo, "commit", "-q", "-m", "before the task")
    tid = start(api, api.project(), "fake:hang")
    wait_running(client, tid, agent_dir)
    wait_quiet(client, tid)
    (repo / "notes.md").write_text("one\ntwo\n")  # committed during the run
    git(repo, "add", "notes.md")
    git(repo, "commit", "-q", "-m", "notes")
    (repo / "app.py").write_text("a\nB\nc\nd\n")  # left uncommitted
    result = desk(client, "get_task_diff", {"taskId": tid}).json
    assert result["branch"] == "main"
    assert result["stats"] == {"files": 2, "insertions": 4, "deletions": 1}
    diff = result["diff"]
    assert "app.py" in diff and "notes.md" in diff and "before.txt" not in diff
    assert "+B" in diff and "-b" in diff and "+two" in diff
    desk(client, "stop_task", {"id": tid})
    assert desk(client, "get_task_diff", {"taskId": tid}).json["stats"] == \
        {"files": 2, "insertions": 4, "deletions": 1}


def test_get_task_diff_outside_git_is_empty_with_zero_stats(client, api, agent_dir):
    tid = start(api, api.project(), "fake:ok")
    wait_status(client, tid, "testing")
    (api.workdir / "hello.txt").write_text("hello\n")
    result = desk(client, "get_task_diff", {"taskId": tid}).json
    assert result["diff"] == ""
    assert isinstance(result["branch"], str)
    assert result["stats"] == {"files": 0, "insertions": 0, "deletions": 0}


def test_get_task_diff_unknown_task_is_404(client, tb):
    assert_error(desk(client, "get_task_diff", {"taskId": 404}, status=404), 404, "not_found")


# --- dependencies ------------------------------------------------------------------------------

def test_add_task_dependency_returns_edge_and_both_sides_see_it(client, api):
    pid = api.project()["id"]
    a, b = api.task(pid, title="A")["id"], api.task(pid, title="B")["id"]
    edge = desk(client, "add_task_dependency",
                {"taskId": b, "dependsOnId": a, "conditionType": "on_success"}).json
    assert edge == {"from": a, "to": b, "conditionType": "on_success"}
    assert desk(client, "get_task_dependencies", {"taskId": b}).json == \
        {"parents": [a], "children": []}
    assert desk(client, "get_task_dependencies", {"taskId": a}).json == \
        {"parents": [], "children": [b]}


def test_add_task_dependency_existing_edge_updates_its_condition(client, api):
    pid = api.project()["id"]
    a, b = api.task(pid)["id"], api.task(pid)["id"]
    desk(client, "add_task_dependency", {"taskId": b, "dependsOnId": a, "conditionType": "always"})
    edge = desk(client, "add_task_dependency",
                {"taskId": b, "dependsOnId": a, "conditionType": "on_failure"}).json
    assert edge == {"from": a, "to": b, "conditionType": "on_failure"}
    graph = desk(client, "get_dependency_graph", {"projectId": pid}).json
    assert graph["edges"] == [{"from": a, "to": b, "conditionType": "on_failure"}]


@pytest.mark.parametrize("shape", ["self", "two", "three"])
def test_add_task_dependency_cycle_or_self_edge_is_409_and_changes_nothing(client, api,
                                                                           snapshot, shape):
    pid = api.project()["id"]
    a, b, c = (api.task(pid)["id"] for _ in range(3))
    desk(client, "add_task_dependency", {"taskId": b, "dependsOnId": a, "conditionType": "always"})
    desk(client, "add_task_dependency", {"taskId": c, "dependsOnId": b, "conditionType": "always"})
    body = {"self": {"taskId": b, "dependsOnId": b}, "two": {"taskId": a, "dependsOnId": b},
            "three": {"taskId": a, "dependsOnId": c}}[shape] | {"conditionType": "always"}
    before = snapshot()
    response = desk(client, "add_task_dependency", body, status=409)
    assert_error(response, 409, "conflict")
    assert snapshot() == before


def test_add_task_dependency_across_projects_is_400_and_changes_nothing(client, api, snapshot):
    a = api.task(api.project()["id"])["id"]
    b = api.task(api.project()["id"])["id"]
    before = snapshot()
    response = desk(client, "add_task_dependency",
                    {"taskId": b, "dependsOnId": a, "conditionType": "always"}, status=400)
    assert_error(response, 400, "validation_error")
    assert snapshot() == before


@pytest.mark.parametrize("condition", ["sometimes", "", 1, None])
def test_add_task_dependency_bad_condition_is_400_and_changes_nothing(client, api, snapshot,
                                                                      condition):
    pid = api.project()["id"]
    a, b = api.task(pid)["id"], api.task(pid)["id"]
    before = snapshot()
    response = desk(client, "add_task_dependency",
                    {"taskId": b, "dependsOnId": a, "conditionType": condition}, status=400)
    assert_error(response, 400, "validation_error")
    assert snapshot() == before


def test_add_task_dependency_unknown_task_is_404(client, api):
    a = api.task(api.project()["id"])["id"]
    response = desk(client, "add_task_dependency",
                    {"taskId": a, "dependsOnId": 9999, "conditionType": "always"}, status=404)
    assert_error(response, 404, "not_found")


def test_remove_task_dependency_removes_edge_and_missing_edge_is_404(client, api, snapshot):
    pid = api.project()["id"]
    a, b = api.task(pid)["id"], api.task(pid)["id"]
    desk(client, "add_task_dependency", {"taskId": b, "dependsOnId": a, "conditionType": "always"})
    assert desk(client, "remove_task_dependency", {"taskId": b, "dependsOnId": a}).json == \
        {"ok": True}
    assert desk(client, "get_task_dependencies", {"taskId": b}).json == \
        {"parents": [], "children": []}
    assert desk(client, "get_dependency_graph", {"projectId": pid}).json["edges"] == []
    before = snapshot()
    response = desk(client, "remove_task_dependency", {"taskId": b, "dependsOnId": a},
                    status=404)
    assert_error(response, 404, "not_found")
    response = desk(client, "remove_task_dependency", {"taskId": a, "dependsOnId": b},
                    status=404)
    assert_error(response, 404, "not_found")
    assert snapshot() == before


def test_get_task_dependencies_unknown_task_is_404(client, tb):
    assert_error(desk(client, "get_task_dependencies", {"taskId": 77}, status=404), 404,
                 "not_found")


def test_delete_task_removes_its_edges(client, api):
    pid = api.project()["id"]
    a, b, c = (api.task(pid)["id"] for _ in range(3))
    desk(client, "add_task_dependency", {"taskId": b, "dependsOnId": a, "conditionType": "always"})
    desk(client, "add_task_dependency", {"taskId": c, "dependsOnId": b, "conditionType": "always"})
    client.delete(f"/api/tasks/{b}")
    assert desk(client, "get_task_dependencies", {"taskId": a}).json == \
        {"parents": [], "children": []}
    assert desk(client, "get_task_dependencies", {"taskId": c}).json == \
        {"parents": [], "children": []}
    assert desk(client, "get_dependency_graph", {"projectId": pid}).json["edges"] == []


# --- graph, waves, pipeline ----------------------------------------------------------------------

def _wave_project(client, api):
    """A -> B -> C, A -> E, C -> E, D alone, F (done) -> G."""
    pid = api.project()["id"]
    t = {name: api.task(pid, title=name)["id"] for name in "ABCDEFG"}
    for child, parent in (("B", "A"), ("C", "B"), ("E", "A"), ("E", "C"), ("G", "F")):
        desk(client, "add_task_dependency",
             {"taskId": t[child], "dependsOnId": t[parent], "conditionType": "always"})
    api.move(t["F"], "done")
    return pid, t


def test_get_execution_waves_groups_unfinished_tasks_by_unfinished_parents(client, api,
                                                                           agent_dir):
    pid, t = _wave_project(client, api)
    waves = desk(client, "get_execution_waves", {"projectId": pid}).json
    assert isinstance(waves, list) and all(isinstance(w, list) for w in waves)
    assert all(isinstance(task, dict) and task["title"] and "status" in task
               for wave in waves for task in wave), "waves hold task objects"
    as_sets = [set(ids(w)) for w in waves]
    assert as_sets == [{t["A"], t["D"], t["G"]}, {t["B"]}, {t["C"]}, {t["E"]}]
    assert read_calls(agent_dir) == [], "reading waves starts nothing"


def test_get_execution_waves_moves_on_when_a_parent_finishes(client, api):
    pid, t = _wave_project(client, api)
    api.move(t["A"], "testing")
    api.move(t["B"], "failed")
    waves = desk(client, "get_execution_waves", {"projectId": pid}).json
    assert [set(ids(w)) for w in waves] == [{t["C"], t["D"], t["G"]}, {t["E"]}]


def test_get_execution_waves_unknown_project_is_404(client, tb):
    assert_error(desk(client, "get_execution_waves", {"projectId": 55}, status=404), 404,
                 "not_found")


def test_get_dependency_graph_lists_tasks_edges_and_waves(client, api):
    pid, t = _wave_project(client, api)
    other = api.task(api.project()["id"])["id"]
    graph = desk(client, "get_dependency_graph", {"projectId": pid}).json
    assert set(graph) >= {"tasks", "edges", "waves"}
    assert sorted(ids(graph["tasks"])) == sorted(t.values())
    assert other not in ids(graph["tasks"])
    edges = sorted((e["from"], e["to"], e["conditionType"]) for e in graph["edges"])
    assert edges == sorted([(t["A"], t["B"], "always"), (t["B"], t["C"], "always"),
                            (t["A"], t["E"], "always"), (t["C"], t["E"], "always"),
                            (t["F"], t["G"], "always")])
    assert all(set(e) == {"from", "to", "conditionType"} for e in graph["edges"])
    waves = [{x if isinstance(x, int) else x["id"] for x in w} for w in graph["waves"]]
    assert waves == [{t["A"], t["D"], t["G"]}, {t["B"]}, {t["C"]}, {t["E"]}]


def test_get_pipeline_status_reports_blocked_child_with_reason(client, api):
    project = api.project()
    pid = project["id"]
    parent = api.task(pid, title="Parent")
    doomed = api.task(pid, title="Cleanup after failure")["id"]
    ready = api.task(pid, title="Follow-up")["id"]
    desk(client, "add_task_dependency",
         {"taskId": doomed, "dependsOnId": parent["id"], "conditionType": "on_failure"})
    desk(client, "add_task_dependency",
         {"taskId": ready, "dependsOnId": parent["id"], "conditionType": "on_success"})
    api.move(parent["id"], "done")
    status = desk(client, "get_pipeline_status", {"projectId": pid}).json
    assert set(status) >= {"activeWave", "waves", "running", "queued", "blocked", "slotsUsed",
                           "maxConcurrent", "autoQueue"}
    blocked = {b["taskId"]: b for b in status["blocked"]}
    assert doomed in blocked
    reason = blocked[doomed]["reason"]
    assert isinstance(reason, str) and reason.strip()
    assert parent["task_key"] in reason or "fail" in reason.lower(), reason
    assert ready not in blocked
    assert status["maxConcurrent"] == 1 and status["slotsUsed"] == 0
    assert status["running"] == []


def test_get_pipeline_status_counts_running_agent_in_slots(client, api, agent_dir):
    project = api.project(maxConcurrent=2)
    tid = start(api, project, "fake:hang")
    wait_running(client, tid, agent_dir)
    status = desk(client, "get_pipeline_status", {"projectId": project["id"]}).json
    assert (status["slotsUsed"], status["maxConcurrent"]) == (1, 2)
    assert [r["taskId"] for r in status["running"]] == [tid]


# --- reorder_queue ------------------------------------------------------------------------------

def test_reorder_queue_sets_exact_list_order_positions_and_raised_priorities(client, api):
    pid = api.project()["id"]
    a = api.task(pid, title="a", priority=0)["id"]
    b = api.task(pid, title="b", priority=2)["id"]
    c = api.task(pid, title="c", priority=1)["id"]
    d = api.task(pid, title="d", priority=0)["id"]
    e = api.task(pid, title="e", priority=3)["id"]
    order = [a, c, e, d, b]
    assert desk(client, "reorder_queue", {"projectId": pid, "taskIds": order}).json == \
        {"ok": True}
    tasks = client.get(f"/api/projects/{pid}/tasks").json
    assert ids(tasks) == order
    by_id = {x["id"]: x for x in tasks}
    assert [by_id[i]["queue_position"] for i in order] == [0, 1, 2, 3, 4]
    priorities = [by_id[i]["priority"] for i in order]
    assert priorities == [3, 3, 3, 2, 2]  # each raised to at least the next one's, no more
    assert priorities == sorted(priorities, reverse=True)


def test_reorder_queue_keeps_priorities_already_in_order(client, api):
    pid = api.project()["id"]
    low = api.task(pid, priority=0)["id"]
    high = api.task(pid, priority=3)["id"]
    desk(client, "reorder_queue", {"projectId": pid, "taskIds": [high, low]})
    tasks = client.get(f"/api/projects/{pid}/tasks").json
    assert [(x["id"], x["priority"]) for x in tasks] == [(high, 3), (low, 0)]


@pytest.mark.parametrize("task_ids", ["1,2", [], [1, "2"], [True], "foreign", "repeat"])
def test_reorder_queue_bad_task_ids_is_400_and_changes_nothing(client, api, snapshot,
                                                               task_ids):
    pid = api.project()["id"]
    a, b = api.task(pid)["id"], api.task(pid)["id"]
    if task_ids == "foreign":
        task_ids = [a, api.task(api.project()["id"])["id"]]
    elif task_ids == "repeat":
        task_ids = [a, b, a]
    before = snapshot()
    response = desk(client, "reorder_queue", {"projectId": pid, "taskIds": task_ids},
                    status=400)
    assert_error(response, 400, "validation_error")
    assert snapshot() == before


def test_reorder_queue_unknown_project_is_404(client, tb):
    response = desk(client, "reorder_queue", {"projectId": 42, "taskIds": [1]}, status=404)
    assert_error(response, 404, "not_found")


# --- agent activity and the file map ----------------------------------------------------------

DENIED = "fake:replay=claude-permission-denied fake:hold={gate}"  # live until the gate opens
FORBIDDEN = "/etc/forbidden.txt"


def test_get_agent_activity_shows_live_agents_files_and_conflicts(client, api, agent_dir):
    project = api.project(maxConcurrent=3)
    pid = project["id"]
    gate = agent_dir / "gate"
    denied = DENIED.format(gate=gate)
    a = start(api, project, denied, title="First writer", model="model_large")
    b = start(api, project, denied, title="Second writer")
    idle = start(api, project, "fake:hang", title="Idle")
    elsewhere = start(api, api.project(), denied, title="Elsewhere")

    def both_touch():
        body = desk(client, "get_agent_activity", {"projectId": pid}).json
        agents = {x["taskId"]: x for x in body["agents"]}
        return body if all(FORBIDDEN in agents.get(t, {}).get("activeFiles", [])
                           for t in (a, b)) else None
    body = wait_for(both_touch, RUN, message="both agents to have written the file")
    agents = {x["taskId"]: x for x in body["agents"]}
    assert elsewhere not in agents, "only the project's agents"
    first = agents[a]
    assert set(first) >= {"taskId", "taskKey", "title", "model", "elapsedSec", "inputTokens",
                          "outputTokens", "totalCost", "toolCallCount", "recentTools",
                          "activeFiles", "isRunning", "awaitingSubtasks"}
    assert (first["taskKey"], first["title"], first["model"]) == \
        (get_task(client, a)["task_key"], "First writer", "model_large")
    assert isinstance(first["elapsedSec"], int) and first["elapsedSec"] >= 0
    assert isinstance(first["inputTokens"], int) and isinstance(first["outputTokens"], int)
    assert isinstance(first["totalCost"], (int, float))
    assert first["toolCallCount"] >= 1
    assert "Write" in first["recentTools"]
    assert first["activeFiles"] == [FORBIDDEN]
    assert (first["isRunning"], first["awaitingSubtasks"]) == (True, False)
    assert agents[idle]["activeFiles"] == [] and agents[idle]["toolCallCount"] == 0
    assert sorted(body["fileMap"][FORBIDDEN]) == sorted([a, b])
    assert [(c["filePath"], sorted(c["taskIds"])) for c in body["conflicts"]] == \
        [(FORBIDDEN, sorted([a, b]))]

    def everywhere():
        files = desk(client, "get_active_file_map", {}).json
        return files if sorted(files.get(FORBIDDEN, [])) == sorted([a, b, elsewhere]) \
            else None
    files = wait_for(everywhere, RUN, message="the global file map to list all three")
    assert set(files) == {FORBIDDEN}

    gate.touch()
    for t in (a, b, elsewhere):
        wait_status(client, t, "testing")
    body = desk(client, "get_agent_activity", {"projectId": pid}).json
    assert [x["taskId"] for x in body["agents"]] == [idle]
    assert (body["fileMap"], body["conflicts"]) == ({}, [])
    assert desk(client, "get_active_file_map", {}).json == {}


def test_get_active_file_map_without_agents_is_empty(client, tb):
    assert desk(client, "get_active_file_map", {}).json == {}


# --- get_task_events --------------------------------------------------------------------------

def raw_lines(events):
    """The agent's own lines among a task's structured events."""
    return [e for e in events if e["kind"] not in ("status", "message")]


def test_get_task_events_returns_raw_lines_newest_limit_oldest_first(client, api, agent_dir):
    tid = start(api, api.project(), "fake:lines=10")
    wait_status(client, tid, "testing")
    [call] = task_calls(agent_dir, tid)
    lines = transcript(agent_dir, call["pid"])
    assert len(lines) == 14  # and the answer to initialize, the prompt replayed
    events = wait_for(lambda: (lambda es: es if len(raw_lines(es)) == 14 else None)(
        desk(client, "get_task_events", {"taskId": tid}).json), RUN,
        message="every raw line to be stored")
    assert [e["raw"] for e in raw_lines(events)] == lines
    assert [json.loads(e["raw"]) for e in events if e["kind"] == "status"] == [
        {"from": "backlog", "to": "in_progress"}, {"from": "in_progress", "to": "testing"}]
    said = [e["message"] for e in logs(client, tid) if e["kind"] == "text"]
    assert said and [json.loads(e["raw"])["text"] for e in events
                     if e["kind"] == "message"] == said
    # moved, then the agent's answer to initialize and its init line
    assert [e["kind"] for e in events][:3] == ["status", "control_response", "system"]
    events = raw_lines(events)
    assert all(set(e) == {"id", "runId", "seq", "createdAt", "kind", "raw"} for e in events)
    assert ids(events) == sorted(ids(events))
    [(run_id,)] = query("SELECT id FROM runs WHERE task_id = ?", (tid,))
    assert {e["runId"] for e in events} == {run_id}
    newest = desk(client, "get_task_events", {"taskId": tid, "limit": 5}).json
    assert [e["kind"] for e in newest][-1] == "status"  # to testing, after the last line
    assert desk(client, "get_task_events", {"taskId": tid, "limit": 1}).json == newest[-1:]


def test_get_task_events_of_task_without_runs_is_empty_and_unknown_is_404(client, api):
    tid = api.task(api.project()["id"])["id"]
    assert desk(client, "get_task_events", {"taskId": tid}).json == []
    assert_error(desk(client, "get_task_events", {"taskId": 999}, status=404), 404,
                 "not_found")


# --- agent instructions file ------------------------------------------------------------------

def test_get_agent_md_missing_file_reports_not_existing(client, api):
    pid = api.project()["id"]
    body = desk(client, "get_agent_md", {"projectId": pid}).json
    assert body == {"content": "", "path": str(api.workdir / "CLAUDE.md"), "exists": False}


def test_save_agent_md_writes_claude_md_atomically_and_reads_back(client, api):
    pid = api.project()["id"]
    target = api.workdir / "CLAUDE.md"
    target.write_text("old instructions\n")
    old_inode = os.stat(target).st_ino
    content = "# Rules\n\nRun `pytest -q` before you finish. ünïcode\n"
    saved = desk(client, "save_agent_md", {"projectId": pid, "content": content}).json
    assert saved == {"content": content, "path": str(target), "exists": True}
    assert target.read_text(encoding="utf-8") == content
    assert os.stat(target).st_ino != old_inode, "written to a temp file, then renamed"
    assert sorted(os.listdir(api.workdir)) == ["CLAUDE.md"], "no temp file left behind"
    assert desk(client, "get_agent_md", {"projectId": pid}).json == saved


def test_save_agent_md_empty_content_creates_empty_file(client, api):
    pid = api.project()["id"]
    saved = desk(client, "save_agent_md", {"projectId": pid, "content": ""}).json
    assert (saved["content"], saved["exists"]) == ("", True)
    assert (api.workdir / "CLAUDE.md").read_text() == ""


def test_agent_md_unknown_project_is_404(client, tb):
    assert_error(desk(client, "get_agent_md", {"projectId": 31}, status=404), 404, "not_found")
    assert_error(desk(client, "save_agent_md", {"projectId": 31, "content": "x"}, status=404),
                 404, "not_found")


# --- local only ---------------------------------------------------------------------------------

def _bodies(world):
    p, a, b, running = world["project"], world["a"], world["b"], world["running"]
    return {
        "stop_task": {"id": running},
        "restart_task": {"id": running},
        "request_changes": {"id": running, "feedback": "Do it differently."},
        "get_task_diff": {"taskId": a},
        "add_task_dependency": {"taskId": a, "dependsOnId": b, "conditionType": "on_failure"},
        "remove_task_dependency": {"taskId": b, "dependsOnId": a},
        "get_task_dependencies": {"taskId": a},
        "get_dependency_graph": {"projectId": p},
        "get_execution_waves": {"projectId": p},
        "get_pipeline_status": {"projectId": p},
        "reorder_queue": {"projectId": p, "taskIds": [b, a]},
        "get_agent_activity": {"projectId": p},
        "get_active_file_map": {},
        "get_task_events": {"taskId": running},
        "get_agent_md": {"projectId": p},
        "save_agent_md": {"projectId": p, "content": "# injected"},
    }


@pytest.fixture
def world(client, api, agent_dir):
    """A project with two tasks joined by an edge, and one task whose agent hangs."""
    project = api.project(maxConcurrent=2)
    pid = project["id"]
    a, b = api.task(pid, title="A")["id"], api.task(pid, title="B")["id"]
    desk(client, "add_task_dependency", {"taskId": b, "dependsOnId": a, "conditionType": "always"})
    running = start(api, project, "fake:hang", title="Running")
    call = wait_running(client, running, agent_dir)
    wait_quiet(client, running)
    return {"project": pid, "a": a, "b": b, "running": running, "call": call}


REFUSALS = {
    "remote-addr": ({}, {"REMOTE_ADDR": "203.0.113.9"}),
    "forwarded": ({"Forwarded": "for=127.0.0.1"}, {}),
    "x-forwarded-for": ({"X-Forwarded-For": "127.0.0.1"}, {}),
    "x-real-ip": ({"X-Real-IP": "127.0.0.1"}, {}),
    "foreign-host": ({"Host": "attacker.example:4000"}, {}),
    "allowed-host": ({"Host": "board.lan:4000"}, {}),
    "bound-host": ({"Host": "192.168.1.20:4000"}, {}),
    "foreign-origin": ({"Origin": "http://evil.example"}, {}),
}


@pytest.mark.parametrize("with_token", [False, True], ids=["no-token", "token"])
@pytest.mark.parametrize("kind", list(REFUSALS))
def test_desktop_non_local_request_is_403_local_only_and_changes_nothing(
        client, api, tb, world, agent_dir, snapshot, kind, with_token):
    tb.config["allowed_hosts"] = ["board.lan"]
    tb.config["host"] = "192.168.1.20"
    headers, environ = REFUSALS[kind]
    headers = dict(headers)
    if with_token:
        tb.config["token"] = TOKEN
        headers["Authorization"] = f"Bearer {TOKEN}"
    before = snapshot()
    for command, body in _bodies(world).items():
        response = desk(client, command, body, status=403, headers=headers,
                        extra_environ=environ)
        assert_error(response, 403, "local_only")
    assert snapshot() == before
    assert not (api.workdir / "CLAUDE.md").exists()
    assert alive(world["call"]["pid"]), "the running agent was not touched"
    assert len(read_calls(agent_dir)) == 1


@pytest.mark.parametrize("headers, environ", [
    ({}, {"REMOTE_ADDR": "::ffff:127.0.0.1"}),
    ({}, {"REMOTE_ADDR": "::1"}),
    ({}, {"REMOTE_ADDR": "127.0.0.2"}),
    ({"Host": "localhost:4000"}, {}),
    ({"Host": "[::1]:4000"}, {}),
    ({"Origin": "http://127.0.0.1:4000"}, {}),
], ids=["ipv4-mapped", "ipv6-loopback", "127/8", "localhost", "ipv6-host", "own-origin"])
def test_desktop_local_request_is_answered(client, api, headers, environ):
    pid = api.project()["id"]
    if "Origin" in headers and "Host" not in headers:
        headers = headers | {"Host": "127.0.0.1:4000"}
    body = desk(client, "save_agent_md", {"projectId": pid, "content": "local\n"},
                headers=headers, extra_environ=environ).json
    assert body["exists"] is True
    assert (api.workdir / "CLAUDE.md").read_text() == "local\n"


def test_desktop_with_token_local_request_carrying_it_is_answered(client, api, tb):
    pid = api.project()["id"]
    tb.config["token"] = TOKEN
    response = desk(client, "get_agent_md", {"projectId": pid},
                    headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.json["exists"] is False


@pytest.fixture
def quiet_world(client, api):
    """Like `world`, without a live agent: the 'running' task sits in testing."""
    pid = api.project()["id"]
    a, b = api.task(pid, title="A")["id"], api.task(pid, title="B")["id"]
    desk(client, "add_task_dependency", {"taskId": b, "dependsOnId": a, "conditionType": "always"})
    running = api.task(pid, title="Reviewed")["id"]
    api.move(running, "testing")
    return {"project": pid, "a": a, "b": b, "running": running}


@pytest.mark.parametrize("command", COMMANDS)
def test_desktop_unknown_body_field_is_400_and_changes_nothing(client, quiet_world, snapshot,
                                                               agent_dir, command):
    body = _bodies(quiet_world)[command] | {"projectid": 1}
    before = snapshot()
    response = desk(client, command, body, status=400)
    assert_error(response, 400, "validation_error")
    assert "projectid" in response.json["error"]
    assert snapshot() == before
    assert read_calls(agent_dir) == []


WRONG_TYPES = [  # "@name" stands for an id of quiet_world
    ("stop_task", {"id": "1"}),
    ("stop_task", {"id": True}),
    ("stop_task", {}),
    ("restart_task", {"id": 1.5}),
    ("restart_task", {"id": "@running", "mcpPort": "x"}),
    ("request_changes", {"id": "@running", "feedback": 5}),
    ("request_changes", {"id": "@running", "feedback": ["a"]}),
    ("get_task_diff", {"taskId": None}),
    ("get_task_diff", {"taskId": "a"}),
    ("add_task_dependency", {"taskId": "@b", "dependsOnId": "1", "conditionType": "always"}),
    ("add_task_dependency", {"taskId": "@b", "dependsOnId": "@a", "conditionType": 1}),
    ("remove_task_dependency", {"taskId": ["@b"], "dependsOnId": "@a"}),
    ("get_task_dependencies", {"taskId": {}}),
    ("get_dependency_graph", {"projectId": "1"}),
    ("get_execution_waves", {"projectId": 1.0}),
    ("get_pipeline_status", {}),
    ("reorder_queue", {"projectId": "@project", "taskIds": "1,2"}),
    ("reorder_queue", {"projectId": "@project", "taskIds": [True]}),
    ("get_agent_activity", {"projectId": False}),
    ("get_task_events", {"taskId": "@a", "limit": "5"}),
    ("get_task_events", {"taskId": "@a", "limit": 0}),
    ("get_agent_md", {"projectId": -1}),
    ("save_agent_md", {"projectId": "@project", "content": 5}),
    ("save_agent_md", {"projectId": "@project"}),
]


def _resolve(value, world):
    if isinstance(value, str) and value.startswith("@"):
        return world[value[1:]]
    if isinstance(value, list):
        return [_resolve(v, world) for v in value]
    return value


@pytest.mark.parametrize("command, template", WRONG_TYPES,
                         ids=[f"{c}-{i}" for i, (c, _) in enumerate(WRONG_TYPES)])
def test_desktop_wrong_type_is_400_and_changes_nothing(client, api, quiet_world, snapshot,
                                                       agent_dir, command, template):
    body = {k: _resolve(v, quiet_world) for k, v in template.items()}
    before = snapshot()
    response = desk(client, command, body, status=400)
    assert_error(response, 400, "validation_error")
    assert snapshot() == before
    assert read_calls(agent_dir) == []
    assert not (api.workdir / "CLAUDE.md").exists()


@pytest.mark.parametrize("raw", [b"[1, 2]", b"\"text\"", b"{not json"])
def test_desktop_body_not_a_json_object_is_400(client, quiet_world, snapshot, raw):
    before = snapshot()
    response = client.post("/api/desktop/get_dependency_graph", raw,
                           headers={"Content-Type": "application/json"}, status=400)
    assert_error(response, 400)
    assert response.json["code"] in ("validation_error", "invalid_json")
    assert snapshot() == before
