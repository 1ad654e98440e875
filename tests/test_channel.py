"""Talking to a running agent (design.md §12): tool approvals, questions, messages, steering,
review comments and the stop check, with tests/fake_agent.py speaking Claude Code's two-way
stream-json protocol (as recorded in tests/fixtures/agent-streams/claude-control-*.jsonl).
"""
import json
import os
import re

import gevent
import pytest

import taskboard
from agent_helpers import RUN, get_task, logs, query, start, task_calls, wait_status
from conftest import assert_error, wait_for

pytestmark = pytest.mark.usefixtures("fast_retries")


# --- helpers ----------------------------------------------------------------------------

def sent(agent_dir, **match):
    """What the board wrote to the agents' stdin, as the fake recorded it."""
    path = os.path.join(agent_dir, "stdin.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return [m for m in lines if all(m.get(k) == v for k, v in match.items())]


def answers_to(agent_dir, request_id):
    return [m["response"] for m in sent(agent_dir, type="control_response")
            if m["response"].get("request_id") == request_id]


def pending(client, task_id, count=1):
    """Wait until the task has `count` pending approvals; return them."""
    def check():
        rows = [a for a in client.get(f"/api/tasks/{task_id}/approvals").json
                if a["status"] == "pending"]
        return rows if len(rows) >= count else None
    return wait_for(check, RUN, message=f"{count} pending approval(s) of task {task_id}")


def finished_text(client, task_id):
    return [e["message"] for e in logs(client, task_id)
            if e["kind"] == "system" and e["message"].startswith("finished: ")][-1]


# --- tool approvals ---------------------------------------------------------------------

def test_a_tool_call_waits_for_a_person_and_goes_on_when_allowed(client, api, agent_dir):
    project = api.project()
    tid = start(api, project, "fake:ask")
    [approval] = pending(client, tid)
    assert approval["kind"] == "tool" and approval["toolName"] == "Bash"
    assert approval["input"]["command"] == "echo hello > hello.txt && cat hello.txt"
    assert approval["suggestions"][0]["rules"][0]["ruleContent"] == "echo hello *"
    assert get_task(client, tid)["pending_approvals"] == 1
    assert [a["id"] for a in client.get("/api/approvals?status=pending").json] == \
        [approval["id"]]

    answer = client.post_json(f"/api/approvals/{approval['id']}", {"decision": "allow"}).json
    assert answer["status"] == "allowed" and answer["decidedBy"] == "person"
    task = wait_status(client, tid, "testing")
    assert task["pending_approvals"] == 0
    assert "allowed: echo hello" in finished_text(client, tid)
    [response] = answers_to(agent_dir, approval["requestId"])
    assert response == {"subtype": "success", "request_id": approval["requestId"],
                        "response": {"behavior": "allow", "updatedInput": approval["input"]}}
    # the argv of a task run keeps its stdin open for the protocol
    argv = task_calls(agent_dir, tid)[0]["argv"]
    for flag in taskboard.CHANNEL_FLAGS:
        assert flag in argv


def test_a_denied_tool_call_tells_the_agent_why_and_a_second_answer_is_refused(
        client, api, agent_dir, snapshot):
    tid = start(api, api.project(), "fake:ask")
    [approval] = pending(client, tid)
    client.post_json(f"/api/approvals/{approval['id']}",
                     {"decision": "deny", "message": "Do not write files."})
    wait_status(client, tid, "testing")
    assert "denied: Do not write files." in finished_text(client, tid)
    assert any(e["kind"] == "tool_result" and e["isError"] and "Do not write files" in
               e["message"] for e in logs(client, tid))

    before = snapshot()
    response = client.post_json(f"/api/approvals/{approval['id']}", {"decision": "allow"},
                                status=409)
    assert_error(response, 409)
    assert "no longer pending" in response.json["error"]
    assert snapshot() == before
    assert len(answers_to(agent_dir, approval["requestId"])) == 1


def test_two_answers_at_once_send_exactly_one(client, api, agent_dir):
    tid = start(api, api.project(), "fake:ask")
    [approval] = pending(client, tid)
    outcomes = []

    def answer(decision):
        try:
            outcomes.append(taskboard.decide_approval(approval["id"], {"decision": decision}))
        except taskboard.Conflict:
            outcomes.append("409")
    gevent.joinall([gevent.spawn(answer, "allow"), gevent.spawn(answer, "deny")])
    assert sorted(map(str, outcomes)).count("409") == 1
    wait_status(client, tid, "testing")
    assert len(answers_to(agent_dir, approval["requestId"])) == 1


def test_bad_answers_are_refused_and_change_nothing(client, api, snapshot):
    tid = start(api, api.project(), "fake:question")
    [approval] = pending(client, tid)
    before = snapshot()
    for body, field in (({"decision": "maybe"}, "decision"), ({}, "decision"),
                        ({"decision": "allow", "answers": {"Other?": "Red"}}, "answers"),
                        ({"decision": "allow", "answers": "Blue"}, "answers"),
                        ({"decision": "allow", "remember": "forever"}, "remember"),
                        ({"decision": "deny", "remember": "project"}, "remember"),
                        ({"decision": "allow", "surprise": 1}, "surprise")):
        assert_error(client.post_json(f"/api/approvals/{approval['id']}", body, status=400),
                     400, field=field)
    assert_error(client.post_json("/api/approvals/999999", {"decision": "allow"},
                                  status=404), 404)
    assert_error(client.get("/api/approvals?status=later", status=400), 400, field="status")
    assert snapshot() == before
    assert pending(client, tid)[0]["status"] == "pending"


def test_allow_for_the_project_remembers_the_suggested_rule(client, api, agent_dir):
    project = api.project()
    tid = start(api, project, "fake:ask=2")
    [approval] = pending(client, tid)
    client.post_json(f"/api/approvals/{approval['id']}",
                     {"decision": "allow", "remember": "project"})
    wait_status(client, tid, "testing")  # the second call matched the session's rule
    [response] = answers_to(agent_dir, approval["requestId"])
    assert response["response"]["updatedPermissions"][0]["destination"] == "session"
    assert client.get(f"/api/projects/{project['id']}").json["allowedTools"] == \
        "Bash(echo hello *)"
    assert len(client.get(f"/api/tasks/{tid}/approvals").json) == 1
    # the next run of the project gets the rule from the start
    other = start(api, project, "fake:ok")
    wait_status(client, other, "testing")
    argv = task_calls(agent_dir, other)[0]["argv"]
    assert "Bash(echo hello *)" in argv[argv.index("--allowedTools") + 1]


def test_auto_accept_is_answered_by_the_board(client, api, agent_dir):
    tid = start(api, api.project(permissionMode="auto-accept"), "fake:ask")
    wait_status(client, tid, "testing")
    [approval] = client.get(f"/api/tasks/{tid}/approvals").json
    assert (approval["status"], approval["decidedBy"]) == ("allowed", "rule")
    argv = task_calls(agent_dir, tid)[0]["argv"]
    # as root the CLI refuses --dangerously-skip-permissions: the board answers instead
    assert ("--dangerously-skip-permissions" in argv) == (not taskboard.running_as_root())


def test_a_question_gets_the_persons_answer(client, api, agent_dir):
    tid = start(api, api.project(permissionMode="auto-accept"), "fake:question")
    [approval] = pending(client, tid)  # questions go to a person even in auto-accept
    assert approval["kind"] == "question"
    question = approval["input"]["questions"][0]
    assert [o["label"] for o in question["options"]] == ["Red", "Blue"]
    client.post_json(f"/api/approvals/{approval['id']}",
                     {"decision": "allow", "answers": {question["question"]: "Blue"}})
    wait_status(client, tid, "testing")
    assert json.dumps({question["question"]: "Blue"}) in finished_text(client, tid)
    # the log says the question as a person reads it, never its JSON
    asked = "Which colour should the button be? (Red / Blue)"
    lines = [(e["kind"], e["message"]) for e in logs(client, tid)]
    assert ("tool_call", f"AskUserQuestion: {asked}") in lines
    assert ("system", f"waiting for you: a question: {asked}") in lines
    assert not [m for kind, m in lines if kind != "text" and '"questions"' in m], lines


def test_a_multiple_choice_question_gets_the_labels_joined(client, api, agent_dir):
    tid = start(api, api.project(), "fake:question=multi")
    [approval] = pending(client, tid)
    question = approval["input"]["questions"][0]["question"]
    client.post_json(f"/api/approvals/{approval['id']}",
                     {"decision": "allow", "answers": {question: ["Red", "Blue"]}})
    wait_status(client, tid, "testing")
    [response] = answers_to(agent_dir, approval["requestId"])
    assert response["response"]["updatedInput"]["answers"] == {question: "Red, Blue"}


def test_a_stopped_run_expires_its_requests(client, api, agent_dir):
    tid = start(api, api.project(), "fake:ask")
    [approval] = pending(client, tid)
    api.move(tid, "backlog")
    wait_for(lambda: not get_task(client, tid)["is_running"], RUN, message="the run to end")
    [row] = client.get(f"/api/tasks/{tid}/approvals").json
    assert row["status"] == "expired" and get_task(client, tid)["pending_approvals"] == 0
    assert_error(client.post_json(f"/api/approvals/{approval['id']}", {"decision": "allow"},
                                  status=409), 409)
    assert answers_to(agent_dir, approval["requestId"]) == []


def test_a_restart_expires_what_the_agents_asked(client, api, tb, config):
    tid = start(api, api.project(), "fake:ask")
    pending(client, tid)
    taskboard.shutdown()
    taskboard.init(config, resume_runs=False)
    rows = query("SELECT status FROM approvals WHERE task_id = ?", (tid,))
    assert rows == [("expired",)]
    assert query("SELECT pending_approvals FROM tasks WHERE id = ?", (tid,)) == [(0,)]


def test_waiting_for_a_person_pauses_the_task_timeout(client, api, agent_dir, monkeypatch):
    monkeypatch.setattr(taskboard, "SECONDS_PER_MINUTE", 0.3)
    tid = start(api, api.project(taskTimeoutMinutes=1), "fake:ask")
    [approval] = pending(client, tid)
    # twice the timeout passes while the person thinks; the run is still there
    gevent.sleep(0.6)
    assert get_task(client, tid)["is_running"]
    client.post_json(f"/api/approvals/{approval['id']}", {"decision": "allow"})
    task = wait_status(client, tid, "testing")
    assert task["retry_count"] == 0


def test_an_unanswered_approval_is_denied_after_the_projects_timeout(client, api, agent_dir,
                                                                     monkeypatch):
    monkeypatch.setattr(taskboard, "SECONDS_PER_MINUTE", 0.05)
    tid = start(api, api.project(approvalTimeoutMinutes=1), "fake:ask")
    wait_status(client, tid, "testing")
    [row] = client.get(f"/api/tasks/{tid}/approvals").json
    assert (row["status"], row["decidedBy"]) == ("denied", "timeout")
    assert "approvalTimeoutMinutes" in finished_text(client, tid)


def test_the_first_pending_request_reaches_webhooks_as_needs_input(client, api):
    project = api.project()
    hook = api.webhook(project["id"], events=["task:needs_input"])
    tid = start(api, project, "fake:ask")
    pending(client, tid)
    deliveries = wait_for(lambda: client.get(
        f"/api/projects/{project['id']}/webhooks/{hook['id']}/deliveries").json, RUN,
        message="a delivery")
    assert deliveries[0]["event"] == "task:needs_input"


def test_approvals_are_published_on_ws(live, client, api):
    ws = live.ws()
    tid = start(api, api.project(), "fake:ask")
    requested = ws.until("approval:requested")["data"]
    assert requested["taskId"] == tid and requested["status"] == "pending"
    ws.until("task:updated", lambda d: d["id"] == tid and d["pending_approvals"] == 1)
    client.post_json(f"/api/approvals/{requested['id']}", {"decision": "allow"})
    resolved = ws.until("approval:resolved")["data"]
    assert (resolved["id"], resolved["status"]) == (requested["id"], "allowed")


# --- messages -----------------------------------------------------------------------------

def test_a_message_waits_for_the_turn_and_send_now_steers(client, api, agent_dir):
    tid = start(api, api.project(), "fake:slow=30")
    wait_for(lambda: sent(agent_dir, type="user"), RUN, message="the prompt")
    queued = client.post_json(f"/api/tasks/{tid}/messages", {"text": "Use tabs."},
                              status=201).json
    assert (queued["state"], queued["author"]) == ("queued", "person")
    steer = client.post_json(f"/api/tasks/{tid}/messages",
                             {"text": "Stop and write docs.", "interrupt": True},
                             status=201).json
    wait_status(client, tid, "testing")
    assert len(sent(agent_dir, type="control_request",
                    request={"subtype": "interrupt"})) == 1
    turns = [m["message"]["content"] for m in sent(agent_dir, type="user")]
    assert turns[1:] == ["Use tabs.", "Stop and write docs."]
    states = {m["id"]: m["state"] for m in client.get(f"/api/tasks/{tid}/messages").json
              if m["author"] == "person"}
    assert states == {queued["id"]: "sent", steer["id"]: "sent"}
    replies = [m["text"] for m in client.get(f"/api/tasks/{tid}/messages").json
               if m["author"] == "agent"]
    assert replies[-1] == "You said: Stop and write docs."
    entries = [e for e in logs(client, tid) if e["kind"] == "message"]
    assert [(e["author"], e["message"]) for e in entries] == \
        [("person", "Use tabs."), ("person", "Stop and write docs.")]
    events = client.post_json("/api/desktop/get_task_events", {"taskId": tid}).json
    assert [json.loads(e["raw"])["text"] for e in events
            if e["kind"] == "message" and json.loads(e["raw"])["author"] == "person"] == \
        ["Use tabs.", "Stop and write docs."]


def test_a_message_on_a_task_in_testing_requests_changes(client, api, agent_dir):
    tid = start(api, api.project(), "fake:ok")
    wait_status(client, tid, "testing")
    message = client.post_json(f"/api/tasks/{tid}/messages", {"text": "Add a test."},
                               status=201).json
    assert message["state"] == "sent"
    wait_status(client, tid, "testing")
    task = get_task(client, tid)
    assert task["revision_count"] == 1
    assert task_calls(agent_dir, tid)[-1]["stdin"] == "Add a test."
    assert [m["message"]["content"] for m in sent(agent_dir, type="user")].count(
        "Add a test.") == 1
    assert [e["message"] for e in logs(client, tid) if e["kind"] == "message"] == \
        ["Add a test."]


def test_a_request_for_changes_without_a_free_slot_stores_nothing(client, api, agent_dir,
                                                                  snapshot):
    project = api.project(maxConcurrent=1)
    done = start(api, project, "fake:ok")
    wait_status(client, done, "testing")
    start(api, project, "fake:slow=30")
    before = snapshot()
    response = client.post_json(f"/api/tasks/{done}/messages", {"text": "Add a test."},
                                status=409)
    assert "maxConcurrent" in response.json["error"]
    assert snapshot() == before
    assert get_task(client, done)["revision_count"] == 0


def test_steering_while_a_request_waits_expires_the_request(client, api, agent_dir):
    tid = start(api, api.project(), "fake:ask")
    [approval] = pending(client, tid)
    client.post_json(f"/api/tasks/{tid}/messages", {"text": "Never mind.", "interrupt": True},
                     status=201)
    wait_status(client, tid, "testing")
    [after] = client.get(f"/api/tasks/{tid}/approvals").json
    assert after["status"] == "expired" and get_task(client, tid)["pending_approvals"] == 0
    assert answers_to(agent_dir, approval["requestId"]) == []


def test_a_message_elsewhere_is_refused(client, api, snapshot):
    task = api.task(api.project()["id"])
    before = snapshot()
    response = client.post_json(f"/api/tasks/{task['id']}/messages", {"text": "hi"},
                                status=409)
    assert "backlog" in response.json["error"]
    assert_error(client.post_json(f"/api/tasks/{task['id']}/messages", {"text": ""},
                                  status=400), 400, field="text")
    assert_error(client.post_json("/api/tasks/99999/messages", {"text": "hi"}, status=404),
                 404)
    assert snapshot() == before


# --- review comments ------------------------------------------------------------------------

def test_review_comments_go_as_one_message_naming_file_and_line(client, api, repo,
                                                                agent_dir):
    tid = start(api, api.project(), "fake:write=notes.txt fake:ok")
    wait_status(client, tid, "testing")
    comments = [{"path": "notes.txt", "line": 1, "side": "new", "body": "Say why."}]
    message = client.post_json(f"/api/tasks/{tid}/review",
                               {"comments": comments, "summary": "Nearly."}, status=201).json
    assert "notes.txt, line 1 (new)" in message["text"] and "Say why." in message["text"]
    assert "Nearly." in message["text"]
    wait_status(client, tid, "testing")
    assert task_calls(agent_dir, tid)[-1]["stdin"] == message["text"]
    [kept] = client.get(f"/api/tasks/{tid}/review").json
    assert (kept["path"], kept["line"], kept["messageId"]) == ("notes.txt", 1, message["id"])
    assert_error(client.post_json(f"/api/tasks/{tid}/review",
                                  {"comments": [{"path": "x", "line": 0, "body": "b"}]},
                                  status=400), 400, field="comments")
    long = [{"path": "notes.txt", "line": 1, "body": "x" * 19_000}] * 6
    assert_error(client.post_json(f"/api/tasks/{tid}/review", {"comments": long},
                                  status=400), 400, field="comments")


def test_review_lines_are_read_from_the_hunks_not_their_headers():
    diff = ("--- a/q.sql\n+++ b/q.sql\n@@ -1,3 +1,3 @@\n--- an old comment\n+++ a new one\n"
            " SELECT 1;\n-x\n+y\n")
    lines = taskboard.diff_lines(diff)
    assert lines[("q.sql", "old", 1)] == "-- an old comment"
    assert lines[("q.sql", "new", 1)] == "++ a new one"
    assert lines[("q.sql", "new", 2)] == lines[("q.sql", "old", 2)] == "SELECT 1;"
    assert (lines[("q.sql", "old", 3)], lines[("q.sql", "new", 3)]) == ("x", "y")


def test_the_api_description_names_the_values_the_board_shows(client):
    schemas = client.get("/api/openapi.json").json["components"]["schemas"]
    approval, message = schemas["Approval"]["properties"], schemas["Message"]["properties"]
    assert approval["status"]["enum"] == ["pending", "allowed", "denied", "expired"]
    assert approval["kind"]["enum"] == ["tool", "question"]
    deciders = re.compile(approval["decidedBy"]["pattern"])  # or a personal token's
    assert all(deciders.fullmatch(d) for d in ("person", "rule", "timeout", "push", "token:ci"))
    assert not deciders.fullmatch("somebody")
    assert (message["author"]["enum"], message["state"]["enum"]) == \
        (["person", "agent", "verifier", "pull_request"], ["queued", "sent"])
    review = schemas["api_post_review_body"]["properties"]["comments"]
    assert review["items"]["required"] == ["path", "line", "body"]


# --- the stop check and odd agents -----------------------------------------------------------

def test_the_stop_check_sends_the_agent_back_until_it_passes(client, api, agent_dir):
    check = "sh -c 'test -f checked || { touch checked; echo 2 tests failed; exit 1; }'"
    tid = start(api, api.project(stopCheckCommand=check), "fake:ok")
    wait_status(client, tid, "testing")
    with open(os.path.join(agent_dir, "stop_reasons.txt"), encoding="utf-8") as f:
        reasons = [json.loads(line) for line in f]
    assert len(reasons) == 1 and "2 tests failed" in reasons[0]
    checks = [e for e in logs(client, tid) if e["kind"] == "stop_check"]
    assert [e["isError"] for e in checks] == [True, False]
    assert "(1 of 3)" in checks[0]["message"] and "passed" in checks[1]["message"]


def test_the_stop_check_runs_without_the_boards_secrets(client, api, agent_dir,
                                                       monkeypatch):
    monkeypatch.setenv("TASKBOARD_GIT_HOST_TOKEN", "s3cret-host-token")
    check = "sh -c 'echo \"host token: [$TASKBOARD_GIT_HOST_TOKEN]\"; exit 1'"
    tid = start(api, api.project(stopCheckCommand=check, stopCheckMaxBlocks=1), "fake:ok")
    wait_status(client, tid, "testing")
    with open(os.path.join(agent_dir, "stop_reasons.txt"), encoding="utf-8") as f:
        [reason] = [json.loads(line) for line in f]
    assert "host token: []" in reason


def test_a_stop_check_that_cannot_run_lets_the_agent_stop(client, api, agent_dir):
    tid = start(api, api.project(stopCheckCommand="no-such-checker --all"), "fake:ok")
    wait_status(client, tid, "testing")
    [check] = [e for e in logs(client, tid) if e["kind"] == "stop_check"]
    assert "cannot run" in check["message"] and check["isError"]
    assert not os.path.exists(os.path.join(agent_dir, "stop_reasons.txt"))


def test_a_failing_stop_check_gives_up_after_its_limit(client, api, agent_dir):
    tid = start(api, api.project(stopCheckCommand="false", stopCheckMaxBlocks=2), "fake:ok")
    wait_status(client, tid, "testing")
    checks = [e for e in logs(client, tid) if e["kind"] == "stop_check"]
    assert len(checks) == 3 and "may stop" in checks[-1]["message"]


def test_an_unknown_control_request_is_refused_and_the_run_goes_on(client, api, agent_dir):
    tid = start(api, api.project(), "fake:unknown-request fake:garbage-protocol")
    wait_status(client, tid, "testing")
    assert "mystery answered: error" in finished_text(client, tid)
    assert any("does not know" in e["message"] for e in logs(client, tid))


def test_planner_and_verifier_runs_do_not_talk(client, api, agent_dir):
    project = api.project(autoTest=1)
    tid = start(api, project, "fake:ok")
    wait_for(lambda: len(task_calls(agent_dir, tid)) >= 2, RUN, message="the verifier")
    verifier = task_calls(agent_dir, tid)[1]
    assert "--input-format" not in verifier["argv"]
