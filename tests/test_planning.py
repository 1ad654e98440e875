"""Planning sessions: a read-only planner turns a topic into backlog tasks (design.md §9;
spec "Planning" and "Planning events").

The planner is tests/fake_agent.py.  It plays the good plan of its PLANS unless the prompt
says otherwise (`fake:plan=NAME`, `fake:hang`, `fake:exit=N`, `fake:child`, see its
docstring); it records every spawn in $FAKE_AGENT_DIR/calls.jsonl.  Tests put directives in
the plan's context, so the topic (and the tag made from it) stays clean.
"""
import itertools
import json
import os
import re
import signal
import subprocess
import sys

import pytest

import taskboard
from agent_helpers import RUN, alive, children, read_calls
from conftest import ISO_MS, assert_error, sql, tasks_of, wait_for

TOPIC = "Add a shopping cart: coupons, gift cards & saved carts for later"
TAG = json.dumps(["plan:add-a-shopping-cart-coupons-gift-cards-s"])  # slug cut to 40 chars
GOOD_TITLES = ["Add the data model", "Add the cart API", "Document the cart API"]
IDS = {"projectId", "planId"}
#: The exact payload keys of each plan:* event (plan:log adds `tool` on tool entries).
KEYS = {
    "plan:started": IDS | {"topic", "model", "effort"},
    "plan:phase": IDS | {"phase"},
    "plan:progress": IDS | {"type", "content"},
    "plan:log": IDS | {"type", "message"},
    "plan:stats": IDS | {"elapsed", "tokens", "toolCalls", "turns"},
    "plan:completed": IDS | {"tasks", "stats", "error", "warnings"},
    "plan:cancelled": IDS,
}
LAST_KEYS = {"planId", "status", "topic", "tasks", "error", "warnings", "finishedAt"}
#: Shell commands the planner may run unasked: all of them only read (git log and git show
#: only in exact forms: as prefixes they would grant --output=<file>).
READ_ONLY_RULE = re.compile(r"Read|Bash\((ls|cat|head|tail|wc|grep|git (ls-files|status)):\*\)"
                            r"|Bash\(git log --oneline -n 30\)|Bash\(git show --stat HEAD\)")


# --- helpers -------------------------------------------------------------------------------

def url(project_id, action=""):
    return f"/api/projects/{project_id}/plan{action}"


def start(client, project_id, topic=TOPIC, **fields):
    """Start a session; check the answer; return its planId."""
    answer = client.post_json(url(project_id), {"topic": topic, **fields}, status=200).json
    assert answer["status"] == "started" and set(answer) == {"planId", "status"}
    assert re.fullmatch(rf"plan-{project_id}-\d{{13}}", answer["planId"]), answer
    return answer["planId"]


def status(client, project_id):
    return client.get(url(project_id, "/status")).json


def wait_last(client, project_id):
    """`last` of plan/status once the session is over."""
    def over():
        body = status(client, project_id)
        return body["last"] if not body["active"] else None
    last = wait_for(over, RUN, message=f"the plan of project {project_id} to end")
    assert set(last) == LAST_KEYS, last
    assert ISO_MS.fullmatch(last["finishedAt"]), last
    return last


def planner(agent_dir, count=1):
    """The latest planner process, once `count` of them have read their prompt."""
    calls = wait_for(lambda: len(read_calls(agent_dir)) >= count and read_calls(agent_dir),
                     RUN, message=f"planner {count} to start")
    return calls[-1]


def start_hanging(client, api, agent_dir, live=None):
    """A new project (with a /ws on it, given `live`) and a planner that hangs with a child
    process: (project id, the socket or None, plan id, the planner's call, the child's pid)."""
    pid = api.project()["id"]
    ws = live and live.ws(f"?projectId={pid}")
    plan_id = start(client, pid, context="fake:hang fake:child")
    call = planner(agent_dir)
    [child] = wait_for(lambda: children(agent_dir), RUN, message="the planner's child")
    return pid, ws, plan_id, call, child


def assert_planner_killed(call, child, message):
    """The planner is dead already (else fail with `message`); its child dies too."""
    assert not alive(call["pid"]), message
    wait_for(lambda: not alive(child), RUN, message="the planner's child to die")


def plan_events(ws, until="plan:completed"):
    """The plan:* messages up to and including the first `until` one."""
    seen = []
    while not seen or seen[-1]["event"] != until:
        message = ws.next(RUN)
        if message["event"].startswith("plan:"):
            seen.append(message)
    return seen


def edges_of(client, project_id):
    graph = client.post_json("/api/desktop/get_dependency_graph",
                             {"projectId": project_id}).json
    return sorted((e["from"], e["to"], e["conditionType"]) for e in graph["edges"])


def flat(text):
    return text.replace(" ", "")


# --- a good plan ---------------------------------------------------------------------------

def test_good_plan_streams_events_in_order_then_writes_tagged_backlog_tasks(client, api,
                                                                             live):
    pid = api.project()["id"]
    ws = live.ws(f"?projectId={pid}")
    plan_id = start(client, pid)
    events = plan_events(ws)

    assert [(e["event"], e["data"].get("phase") or e["data"].get("type")) for e in events] == [
        ("plan:started", None),
        ("plan:phase", "starting"), ("plan:log", "phase"),
        ("plan:progress", "text"),  # text before any tool call: still starting
        ("plan:phase", "exploring"), ("plan:log", "phase"),
        ("plan:log", "tool"), ("plan:log", "result"), ("plan:stats", None),
        ("plan:log", "tool"), ("plan:log", "error"), ("plan:stats", None),
        ("plan:phase", "writing"), ("plan:log", "phase"), ("plan:progress", "text"),
        ("plan:stats", None),
        ("plan:completed", None)]
    for e in events:
        tool = {"tool"} if e["event"] == "plan:log" and e["data"]["type"] == "tool" else set()
        assert set(e["data"]) == KEYS[e["event"]] | tool, e
        assert (e["data"]["projectId"], e["data"]["planId"]) == (pid, plan_id)
    data = [e["data"] for e in events]
    assert (data[0]["topic"], data[0]["model"], data[0]["effort"]) == \
        (TOPIC, "model_medium", "medium")
    assert [d["tool"] for d in data if d.get("type") == "tool"] == ["Read", "Bash"]
    assert "permission" in next(d["message"] for d in data if d.get("type") == "error")
    progress = [d["content"] for d in data if d.get("type") == "text"]
    assert progress[0] == "Let me look at the code." and "```json" in progress[1]
    stats = [d for e, d in zip(events, data) if e["event"] == "plan:stats"]
    assert [s["toolCalls"] for s in stats] == [1, 2, 2]
    assert stats[-1]["tokens"] == {"input": 2400, "output": 170}  # the result line's totals

    done = data[-1]
    assert (done["error"], done["warnings"]) == (None, [])
    assert done["stats"]["exitCode"] == 0 and done["stats"]["toolCalls"] == 2
    assert set(done["stats"]) == {"elapsed", "tokens", "toolCalls", "turns", "exitCode"}
    assert [t["title"] for t in done["tasks"]] == GOOD_TITLES
    created = {t["id"]: t for t in tasks_of(client, pid)}
    assert sorted(created) == sorted(t["id"] for t in done["tasks"])
    for listed in done["tasks"]:
        task = created[listed["id"]]
        assert set(listed) == {"id", "title", "task_type", "task_key"}
        assert listed == {k: task[k] for k in listed}
        assert (task["status"], task["tags"]) == ("backlog", TAG)
    model, api_task, docs = (created[t["id"]] for t in done["tasks"])
    assert (model["priority"], model["description"]) == (2, "Tables for carts.")
    assert api_task["acceptance_criteria"] == "- Routes answer\n- Errors are 4xx"
    assert (docs["task_type"], docs["priority"]) == ("docs", 0)
    assert edges_of(client, pid) == [(model["id"], api_task["id"], "on_success"),
                                     (api_task["id"], docs["id"], "on_success")]

    body = status(client, pid)
    assert (body["active"], body["planId"]) == (False, None)
    last = wait_last(client, pid)
    assert last | {"finishedAt": None} == {
        "planId": plan_id, "status": "completed", "topic": TOPIC, "tasks": done["tasks"],
        "error": None, "warnings": [], "finishedAt": None}


# --- plans that are refused or corrected ---------------------------------------------------

@pytest.mark.parametrize("plan, why", [
    ("badjson", r"json"),
    ("noblock", r"block"),
    ("empty", r"no tasks"),
    ("notitle", r"task 1 .*title"),
])
def test_unusable_plan_completes_with_error_and_creates_nothing(client, api, live, tmp_path,
                                                                plan, why):
    if plan == "noblock":
        answer = tmp_path / "answer.txt"
        answer.write_text("I looked around; the cart should reuse the session store.")
        plan = str(answer)
    pid = api.project()["id"]
    ws = live.ws(f"?projectId={pid}")
    plan_id = start(client, pid, context=f"fake:plan={plan}")
    done = plan_events(ws)[-1]["data"]
    assert (done["planId"], done["tasks"], done["warnings"]) == (plan_id, [], [])
    assert re.search(why, done["error"], re.IGNORECASE), done["error"]
    assert done["stats"]["exitCode"] == 0
    last = wait_last(client, pid)
    assert (last["status"], last["tasks"], last["error"]) == ("failed", [], done["error"])
    assert tasks_of(client, pid) == []


def test_cyclic_and_bad_edges_are_dropped_with_warnings_the_rest_kept(client, api):
    pid = api.project()["id"]
    start(client, pid, context="fake:plan=cyclic")
    last = wait_last(client, pid)
    assert (last["status"], last["error"]) == ("completed", None)
    warnings = [flat(w) for w in last["warnings"]]
    assert len(warnings) == 4, last["warnings"]
    for edge in ("[2,0]", "[0,7]", "[1,1]", '"x"'):
        assert sum(edge in w for w in warnings) == 1, (edge, last["warnings"])
    assert any("[2,0]" in w and "cycle" in w for w in warnings), last["warnings"]
    assert not any("[0,1]" in w for w in warnings), "a repeated edge is no mistake"
    first, second, third = (t["id"] for t in last["tasks"])
    assert edges_of(client, pid) == [(first, second, "on_success"),
                                     (second, third, "on_success")]


def test_odd_fields_are_corrected_with_warnings(client, api):
    pid = api.project()["id"]
    start(client, pid, context="fake:plan=odd")
    last = wait_last(client, pid)
    assert (last["status"], last["error"]) == ("completed", None)
    [task] = tasks_of(client, pid)
    assert (task["title"], task["task_type"], task["priority"]) == ("Odd task", "feature", 1)
    assert json.loads(task["description"]) == {"a": 1}
    warnings = last["warnings"]
    assert len(warnings) == 4, warnings
    assert any("description" in w and "JSON" in w for w in warnings), warnings
    assert any("task_type" in w and "epic" in w for w in warnings), warnings
    assert any("priority" in w and "9" in w for w in warnings), warnings
    assert any("dependencies" in w for w in warnings), warnings


def test_planner_failure_is_reported_in_completed_and_last(client, api, live):
    pid = api.project()["id"]
    ws = live.ws(f"?projectId={pid}")
    start(client, pid, context="fake:exit=3")
    done = plan_events(ws)[-1]["data"]
    assert (done["tasks"], done["warnings"], done["stats"]["exitCode"]) == ([], [], 3)
    assert re.search(r"\b3\b", done["error"]), done["error"]
    last = wait_last(client, pid)
    assert (last["status"], last["error"]) == ("failed", done["error"])
    assert tasks_of(client, pid) == []


# --- the planner's process -----------------------------------------------------------------

@pytest.mark.parametrize("choice, alias, effort", [
    ({}, "sonnet", "medium"),
    ({"model": "model_small", "effort": "low"}, "haiku", "low"),
    ({"model": "model_large", "effort": "high"}, "opus", "high"),
])
def test_planner_is_read_only_and_gets_its_prompt_on_stdin(client, api, agent_dir, choice,
                                                           alias, effort):
    project = api.project()
    context = "Flask and SQLite; keep the REST style. fake:hang"
    start(client, project["id"], context=context, **choice)
    call = planner(agent_dir)
    argv = call["argv"]
    assert argv[argv.index("--model") + 1] == alias
    assert argv[argv.index("--effort") + 1] == effort
    assert argv[argv.index("--tools") + 1] == "Read,Bash"
    after = argv[argv.index("--allowedTools") + 1:]
    rules = list(itertools.takewhile(lambda a: not a.startswith("-"), after))
    assert tuple(rules) == taskboard.PLANNER_TOOLS and "Read" in rules
    assert all(READ_ONLY_RULE.fullmatch(r) for r in rules), rules
    assert "--dangerously-skip-permissions" not in argv and "--mcp-config" not in argv
    assert "--permission-mode" not in argv, "the default mode denies what is not allowed"
    prompt = call["stdin"]
    assert prompt.startswith("You are planning")
    assert TOPIC in prompt and context in prompt and "5 to 10" in prompt
    assert not any(TOPIC in a or context in a for a in argv), "the prompt is never in argv"
    assert os.path.realpath(call["cwd"]) == os.path.realpath(project["workingDir"])


@pytest.mark.parametrize("granularity, count", [
    ("high-level", "3 to 5"), ("balanced", "5 to 10"), ("detailed", "10 to 20")])
def test_prompt_asks_for_the_granularitys_number_of_tasks(client, api, agent_dir,
                                                          granularity, count):
    start(client, api.project()["id"], granularity=granularity, context="fake:hang")
    prompt = planner(agent_dir)["stdin"]
    others = {"3 to 5", "5 to 10", "10 to 20"} - {count}
    assert count in prompt and not any(o in prompt for o in others), prompt


# --- one session per project, cancel -------------------------------------------------------

def test_cancel_kills_the_process_group_and_creates_nothing(client, api, live, agent_dir):
    pid, ws, plan_id, call, child = start_hanging(client, api, agent_dir, live)
    body = status(client, pid)
    shown = ("active", "planId", "tokens", "toolCalls", "turns", "phase", "topic")
    assert {k: body[k] for k in shown} == {
        "active": True, "planId": plan_id, "tokens": {"input": 0, "output": 0},
        "toolCalls": 0, "turns": 0, "phase": "starting", "topic": TOPIC}
    assert isinstance(body["elapsed"], int) and body["elapsed"] >= 0

    answer = client.post(url(pid, "/cancel"), status=200).json
    assert answer == {"status": "cancelled"}
    assert_planner_killed(call, child, "the planner is dead when cancel answers")
    events = plan_events(ws, until="plan:cancelled")
    assert [e["event"] for e in events] == \
        ["plan:started", "plan:phase", "plan:log", "plan:cancelled"]
    assert events[-1]["data"] == {"projectId": pid, "planId": plan_id}
    last = wait_last(client, pid)
    assert (last["planId"], last["status"], last["tasks"]) == (plan_id, "cancelled", [])
    assert tasks_of(client, pid) == []
    assert_error(client.post(url(pid, "/cancel"), status=404), 404, "not_found")
    start(client, pid, context="fake:hang")  # the project is free to plan again


def test_second_start_in_a_project_is_409_another_project_is_fine(client, api, agent_dir,
                                                                  snapshot):
    first, other = api.project()["id"], api.project()["id"]
    plan_id = start(client, first, context="fake:hang")
    planner(agent_dir)
    before = snapshot()
    response = client.post_json(url(first), {"topic": "Something else"}, status=409)
    assert plan_id in assert_error(response, 409, "conflict")["error"]
    assert snapshot() == before
    other_id = start(client, other, context="fake:hang")
    planner(agent_dir, 2)
    assert len(read_calls(agent_dir)) == 2
    assert (status(client, first)["planId"], status(client, other)["planId"]) == \
        (plan_id, other_id)


# --- refused requests ----------------------------------------------------------------------

@pytest.mark.parametrize("body, field", [
    ({}, "topic"),
    ({"topic": "   "}, "topic"),
    ({"topic": 7}, "topic"),
    ({"topic": TOPIC, "model": "gpt-4"}, "model"),
    ({"topic": TOPIC, "effort": "max"}, "effort"),
    ({"topic": TOPIC, "granularity": "tiny"}, "granularity"),
    ({"topic": TOPIC, "context": ["a"]}, "context"),
    ({"topic": TOPIC, "tasks": 3}, "tasks"),
])
def test_bad_start_body_is_400_naming_the_field_and_changes_nothing(client, api, agent_dir,
                                                                    snapshot, body, field):
    pid = api.project()["id"]
    before = snapshot()
    error = assert_error(client.post_json(url(pid), body, status=400), 400,
                         "validation_error", field)
    assert field in error["error"]
    assert snapshot() == before and read_calls(agent_dir) == []
    assert status(client, pid) == {"active": False, "planId": None, "last": None}


def test_start_with_malformed_json_is_400(client, api, agent_dir, snapshot):
    pid = api.project()["id"]
    before = snapshot()
    response = client.post(url(pid), '{"topic": ', content_type="application/json",
                           status=400)
    assert_error(response, 400, "invalid_json")
    assert snapshot() == before and read_calls(agent_dir) == []


def test_unknown_project_is_404_on_every_planning_route(client, tb, agent_dir):
    for response in (client.post_json(url(999), {"topic": TOPIC}, status=404),
                     client.post_json(url(999), {"topic": ""}, status=404),
                     client.get(url(999, "/status"), status=404),
                     client.post(url(999, "/cancel"), status=404)):
        assert_error(response, 404, "not_found")
    assert read_calls(agent_dir) == []


# --- the session outlives its server -------------------------------------------------------

def test_shutdown_interrupts_a_running_session_and_restart_reports_it(client, api, tb,
                                                                      agent_dir):
    pid, _, plan_id, call, child = start_hanging(client, api, agent_dir)
    taskboard.shutdown()
    assert_planner_killed(call, child, "shutdown returns after the planner is dead")
    assert sql(tb, "SELECT plan_id, status FROM plans") == [(plan_id, "interrupted")]
    taskboard.init(tb.config)
    last = wait_last(client, pid)
    assert (last["planId"], last["status"], last["tasks"]) == (plan_id, "interrupted", [])
    assert last["error"]
    start(client, pid, context="fake:hang")  # no stale session blocks a new one


def test_restart_after_a_crash_kills_the_planner_left_running(client, api, tb):
    """A server killed with -9 leaves its session row 'running' and its planner alive."""
    pid = api.project()["id"]
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              start_new_session=True)
    try:
        sql(tb, "INSERT INTO plans (plan_id, project_id, topic, context, model, effort, "
                "granularity, status, pid, proc_start, started_at) VALUES (?, ?, ?, '', "
                "'model_medium', 'medium', 'balanced', 'running', ?, ?, ?)",
            (f"plan-{pid}-1700000000000", pid, TOPIC, orphan.pid,
             taskboard.process_start(orphan.pid), "2026-01-01T00:00:00.000Z"))
        taskboard.shutdown()
        assert orphan.poll() is None, "only the server died"
        taskboard.init(tb.config)
        orphan.wait(timeout=RUN)
        last = wait_last(client, pid)
        assert (last["planId"], last["status"]) == (f"plan-{pid}-1700000000000",
                                                   "interrupted")
    finally:
        if orphan.poll() is None:
            os.kill(orphan.pid, signal.SIGKILL)
            orphan.wait()


def test_deleting_the_project_cancels_its_session(client, api, live, agent_dir):
    pid, ws, plan_id, call, child = start_hanging(client, api, agent_dir, live)
    assert client.delete(f"/api/projects/{pid}", status=200).json == {"ok": True}
    assert_planner_killed(call, child, "the planner is dead when the delete answers")
    assert plan_events(ws, until="plan:cancelled")[-1]["data"] == \
        {"projectId": pid, "planId": plan_id}
    assert_error(client.get(url(pid, "/status"), status=404), 404, "not_found")


def test_a_plans_cost_counts_in_agent_usage_and_the_daily_limit(client, api):
    before = client.get("/api/stats/agent-usage").json
    pid = api.project()["id"]
    start(client, pid)
    wait_last(client, pid)
    after = client.get("/api/stats/agent-usage").json
    assert after["usage"]["totalCost"] == pytest.approx(before["usage"]["totalCost"] + 0.02)
    assert after["limits"]["currentUsage"] == pytest.approx(
        before["limits"]["currentUsage"] + 0.02)
    assert after["models"]["model_medium"]["inputTokens"] >= 2400
    client.delete(f"/api/projects/{pid}")
    assert client.get("/api/stats/agent-usage").json == after, \
        "deleting the project takes its plans, not what they cost"
