"""Best of N: one task run by several agents at once, compared and picked (design §18)."""

import os
import re

import taskboard
from agent_helpers import RUN, alive, assert_stays, logs, query, read_calls
from conftest import assert_error, assert_refused, git, wait_for

#: Each attempt acts by its model: haiku's writes small.txt and passes the check (the
#: file it tests for), sonnet's writes big.txt and fails it.
BY_MODEL = ("fake:ok fake@haiku:write=small.txt fake@sonnet:write=big.txt "
            "fake@sonnet:commit=big2.txt")
CHECK = "test -f small.txt"
PAIR = [{"agent": "claude", "model": "model_small"}, {"agent": "claude", "model": "model_medium"}]


def attempts(client, task_id):
    return client.get(f"/api/tasks/{task_id}/attempts").json


def ended(client, task_id):
    rows = attempts(client, task_id)
    return rows and all(a["status"] not in ("queued", "running") for a in rows)


def task(client, task_id):
    return client.get(f"/api/tasks/{task_id}").json


def run_two(api, client, repo, description=BY_MODEL, **project_fields):
    project = api.project(workingDir=str(repo), stopCheckCommand=CHECK, maxConcurrent=2,
                          **project_fields)
    task_id = api.task(project["id"], description=description)["id"]
    answer = client.post_json(f"/api/tasks/{task_id}/attempts", {"agents": PAIR})
    assert answer.status_code == 202
    assert [(a["n"], a["status"], a["model"]) for a in answer.json] == [
        (1, "queued", "model_small"), (2, "queued", "model_medium")]
    return project, task_id


def test_two_attempts_run_on_their_own_branches_and_are_compared(api, client, repo,
                                                                fake_agent_dir):
    project, task_id = run_two(api, client, repo)
    assert task(client, task_id)["status"] == "in_progress"
    wait_for(lambda: task(client, task_id)["status"] == "testing", RUN,
             message="both attempts ended: the task is in testing")
    small, medium = attempts(client, task_id)
    assert small["status"] == medium["status"] == "done"
    assert small["branch"].endswith("-1") and medium["branch"].endswith("-2")
    assert small["check"]["passed"] is True and small["check"]["command"] == CHECK
    assert medium["check"]["passed"] is False and medium["check"]["exitCode"] == 1
    assert small["diff"]["files"] == 1 and medium["diff"]["files"] == 2
    assert small["costUsd"] > 0 and small["tokens"] > 0 and not small["picked"]
    assert task(client, task_id)["attempts"] == 2
    cwds = {c["cwd"] for c in read_calls(fake_agent_dir)}
    assert len(cwds) == 2 and all(c.endswith(("-1", "-2")) for c in cwds)
    diff = client.get(f"/api/tasks/{task_id}/attempts/2/diff").json
    assert "big2.txt" in diff["diff"] and diff["stats"]["files"] == 2
    log = client.get(f"/api/tasks/{task_id}/logs?attempt=1").json
    assert log and {e["runId"] for e in log} == {small["runId"]}

    picked = client.post(f"/api/tasks/{task_id}/attempts/1/pick").json
    assert [a["picked"] for a in picked] == [True, False]
    after = task(client, task_id)
    assert after["branch_name"] == small["branch"] and after["model"] == "model_small"
    diff = client.post_json("/api/desktop/get_task_diff", {"taskId": task_id}).json
    assert "small.txt" in diff["diff"] and "big.txt" not in diff["diff"]
    branches = git(repo, "branch", "--list").split()
    assert small["branch"] in branches and medium["branch"] not in branches
    worktrees = os.path.join(taskboard.runtime.data_dir, "worktrees", str(project["id"]))
    assert sorted(os.listdir(worktrees)) == [after["task_key"]]
    again = client.post(f"/api/tasks/{task_id}/attempts/2/pick", status=409)
    assert again.status_code == 409 and "picked already" in again.json["error"]


def test_attempt_pick_auto_picks_the_passing_check(api, client, repo, fake_agent_dir):
    _, task_id = run_two(api, client, repo, attemptPick="auto")
    wait_for(lambda: any(a["picked"] for a in attempts(client, task_id)), RUN,
             message="the rule picked one")
    assert [a["picked"] for a in attempts(client, task_id)] == [True, False]
    assert task(client, task_id)["status"] == "testing"


def both_hanging(api, client, repo, fake_agent_dir):
    """A task run by two agents that hang (until stopped): (project, task id)."""
    project = api.project(workingDir=str(repo), maxConcurrent=2)
    task_id = api.task(project["id"], description="fake:hang")["id"]
    client.post_json(f"/api/tasks/{task_id}/attempts", {"agents": PAIR}, status=202)
    wait_for(lambda: len(read_calls(fake_agent_dir)) == 2 and all(
        a["status"] == "running" for a in attempts(client, task_id)), RUN,
        message="both agents")
    return project, task_id


# --- bad input -------------------------------------------------------------------------------

def test_bad_attempts_are_refused_naming_the_field_and_store_nothing(api, client, repo,
                                                                    snapshot):
    project = api.project(workingDir=str(repo))
    task_id = api.task(project["id"])["id"]
    url = f"/api/tasks/{task_id}/attempts"
    one = {"agent": "claude"}
    for agents, field, words in (
            ([one], "agents", "2 to 4 agents"), ([one] * 5, "agents", "2 to 4 agents"),
            ("claude", "agents", "2 to 4 agents"),
            ([one, {"agent": "cursor"}], "agents[1].agent", '"cursor" is not one of'),
            ([one, {"agent": "claude", "model": "model_huge"}], "agents[1].model", "model_huge"),
            ([{"agent": "claude", "effort": "max"}, one], "agents[0].effort", '"max"'),
            ([one, {"agent": "claude", "color": "red"}], "agents[1].color", "'color'"),
            ([one, {"model": "model_small"}], "agents[1]", "with an agent")):
        error = assert_refused(snapshot, client.post_json, url, {"agents": agents}, field)
        assert words in error["error"], error
    assert_refused(snapshot, client.post_json, url, {}, "agents")
    assert_refused(snapshot, client.post_json, "/api/tasks/999/attempts", {"agents": [one, one]},
                   status=404, code="not_found")


def test_a_running_task_or_one_outside_git_cannot_run_attempts(api, client, tmp_path, repo,
                                                              snapshot, fake_agent_dir):
    body = {"agents": PAIR}
    plain = tmp_path / "plain"
    plain.mkdir()
    outside = api.task(api.project(workingDir=str(plain), slug="plain")["id"])["id"]
    error = assert_refused(snapshot, client.post_json, f"/api/tasks/{outside}/attempts", body,
                           "workingDir", status=409, code="conflict")
    assert "git repository" in error["error"]
    running = api.task(api.project(workingDir=str(repo))["id"], description="fake:hang")["id"]
    api.move(running, "in_progress")
    wait_for(lambda: task(client, running)["is_running"], RUN, message="the run")
    error = assert_refused(snapshot, client.post_json, f"/api/tasks/{running}/attempts", body,
                           "id", status=409, code="conflict")
    assert "is running" in error["error"]


# --- the queue, stops, failures ----------------------------------------------------------------

def test_attempts_wait_for_a_slot_in_order_and_a_move_stops_them_all(api, client, repo,
                                                                     fake_agent_dir):
    project = api.project(workingDir=str(repo), maxConcurrent=1)
    task_id = api.task(project["id"], description="fake:hang")["id"]
    client.post_json(f"/api/tasks/{task_id}/attempts", {"agents": PAIR}, status=202)
    wait_for(lambda: [a["status"] for a in attempts(client, task_id)] == ["running", "queued"],
             RUN, message="the first attempt runs, the second waits for the slot")
    wait_for(lambda: read_calls(fake_agent_dir), RUN, message="the first agent")
    assert_stays(lambda: len(read_calls(fake_agent_dir)) == 1, 0.5,
                 "the second attempt waits while the project's one slot is taken")
    backlog = api.task(project["id"], description="fake:hang")["id"]
    client.put_json(f"/api/projects/{project['id']}", {"autoQueue": 1})
    pid = read_calls(fake_agent_dir)[0]["pid"]
    client.patch_json(f"/api/tasks/{task_id}/status", {"status": "backlog"})
    assert [a["status"] for a in attempts(client, task_id)] == ["stopped", "stopped"]
    assert not alive(pid) and not taskboard.runtime.agents.slots(task_id)
    wait_for(lambda: task(client, backlog)["is_running"], RUN,
             message="the freed slot goes to the backlog")
    assert not [c for c in read_calls(fake_agent_dir) if c["cwd"].endswith("-2")]


def test_an_attempt_whose_cli_is_missing_or_crashes_fails_alone(api, client, repo, tb,
                                                                 fake_agent_dir):
    tb.config["agents"]["codex"] = ["/nonexistent/codex"]
    project = api.project(workingDir=str(repo), maxConcurrent=3, maxRetries=0)
    task_id = api.task(project["id"], description="fake:ok fake@haiku:crash "
                       "fake@sonnet:write=kept.txt")["id"]
    client.post_json(f"/api/tasks/{task_id}/attempts", {"agents": [
        {"agent": "claude", "model": "model_small"}, {"agent": "claude", "model": "model_medium"},
        {"agent": "codex"}]}, status=202)
    wait_for(lambda: task(client, task_id)["status"] == "testing", RUN,
             message="the one attempt that worked moves the task to testing")
    crashed, worked, missing = attempts(client, task_id)
    assert crashed["status"] == "failed" and crashed["error"]
    assert missing["status"] == "failed" and "not installed" in missing["error"]
    assert worked["status"] == "done" and worked["diff"]["files"] == 1
    checkout = [c["cwd"] for c in read_calls(fake_agent_dir) if c["cwd"].endswith("-2")][0]
    assert os.path.exists(os.path.join(checkout, "kept.txt"))


def test_pick_waits_for_the_end_and_the_open_set_refuses_messages(api, client, repo,
                                                                  fake_agent_dir):
    project, task_id = both_hanging(api, client, repo, fake_agent_dir)
    error = assert_error(client.post(f"/api/tasks/{task_id}/attempts/1/pick",
                                     expect_errors=True), 409, "conflict", "n")
    assert "still running" in error["error"]
    assert_error(client.post(f"/api/tasks/{task_id}/attempts/3/pick", expect_errors=True),
                 404, "not_found")
    key = task(client, task_id)["task_key"]  # a person's words: its key, no id, no route
    error = assert_error(client.post_json(f"/api/tasks/{task_id}/messages", {"text": "hi"},
                                          expect_errors=True), 409, "conflict")
    assert error["error"] == f"several agents work on {key}: a message goes to one of " \
        "them; once they end, pick the attempt to keep, then send it"
    client.patch_json(f"/api/tasks/{task_id}/status", {"status": "testing"})
    error = assert_error(client.post_json("/api/desktop/request_changes", {
        "id": task_id, "feedback": "again"}, expect_errors=True), 409, "conflict")
    assert error["error"] == f"task {key} was run by several agents: pick the attempt to keep " \
        "first, then ask its agent for changes"
    client.post(f"/api/tasks/{task_id}/attempts/2/pick")
    assert task(client, task_id)["model"] == "model_medium"


def test_a_deleted_task_takes_its_attempts_worktrees_and_branches(api, client, repo,
                                                                   fake_agent_dir):
    project, task_id = both_hanging(api, client, repo, fake_agent_dir)
    pids = [c["pid"] for c in read_calls(fake_agent_dir)]
    client.delete(f"/api/tasks/{task_id}")
    assert not any(alive(pid) for pid in pids)
    worktrees = os.path.join(taskboard.runtime.data_dir, "worktrees", str(project["id"]))
    assert os.listdir(worktrees) == []
    assert git(repo, "branch", "--list").split() == ["*", "main"]


# --- restart, verdicts, statistics --------------------------------------------------------------

def test_a_restart_resumes_each_attempt_in_its_own_session(api, client, repo, tb,
                                                           fake_agent_dir):
    project, task_id = both_hanging(api, client, repo, fake_agent_dir)
    wait_for(lambda: len(query("SELECT session_id FROM attempts WHERE session_id IS NOT NULL"))
             == 2, RUN, message="both sessions stored")
    first = {c["cwd"]: c for c in read_calls(fake_agent_dir)}
    taskboard.shutdown()
    assert not any(alive(c["pid"]) for c in first.values())
    taskboard.init(tb.config)
    wait_for(lambda: len(read_calls(fake_agent_dir)) == 4, RUN, message="both resumed")
    for call in read_calls(fake_agent_dir)[2:]:
        argv = call["argv"]
        assert argv[argv.index("--resume") + 1] == first[call["cwd"]]["session_id"]
        assert call["stdin"].strip() == "continue"
    assert task(client, task_id)["status"] == "in_progress"
    client.patch_json(f"/api/tasks/{task_id}/status", {"status": "backlog"})


def test_the_verifier_judges_each_attempt_and_statistics_count_the_pick(api, client, repo,
                                                                       fake_agent_dir):
    _, task_id = run_two(api, client, repo, "fake:ok fake:verdict=approve", autoTest=1)
    wait_for(lambda: task(client, task_id)["status"] == "testing", RUN,
             message="both attempts judged")
    assert [(a["verdict"], bool(a["summary"])) for a in attempts(client, task_id)] == [
        ("approve", True), ("approve", True)]
    assert task(client, task_id)["status"] == "testing", "a verdict never moves the task"
    client.post(f"/api/tasks/{task_id}/attempts/2/pick")
    rows = {(r["agent"], r["model"]): r for r in client.get("/api/stats/attempts").json["agents"]}
    assert rows[("claude", "model_medium")]["picks"] == 1
    assert rows[("claude", "model_medium")]["winRate"] == 1.0
    assert rows[("claude", "model_small")]["picks"] == 0
    assert rows[("claude", "model_small")]["meanCostUsd"] > 0


# --- one rule for a task's run and an attempt's -------------------------------------------------

def test_an_attempts_verifier_waits_for_its_agents_usage_limit_as_a_tasks_does(
        api, client, repo, fake_agent_dir):
    """Both attempts' agents ask a person; Claude hits its usage limit meanwhile.  Once
    answered they finish, and each one's verifier checks the work when the limit lifts (as
    a task's verifier does) instead of ending without a verdict."""
    project = api.project(workingDir=str(repo), maxConcurrent=2, autoTest=1)
    task_id = api.task(project["id"], description="fake:ask")["id"]
    client.post_json(f"/api/tasks/{task_id}/attempts", {"agents": PAIR}, status=202)
    asked = wait_for(lambda: len(rows := [
        a for a in client.get(f"/api/tasks/{task_id}/approvals").json
        if a["status"] == "pending"]) == 2 and rows, RUN, message="both agents ask")
    reset = taskboard.time.time() + 8
    taskboard.set_agent_limit("claude", reset, "a test's limit")
    for approval in asked:
        client.post_json(f"/api/approvals/{approval['id']}", {"decision": "allow"})
    wait_for(lambda: task(client, task_id)["status"] == "testing", 3 * RUN,
             message="both attempts judged after the reset")
    assert [a["verdict"] for a in attempts(client, task_id)] == ["approve", "approve"]
    waited = sorted(e["message"] for e in logs(client, task_id)
                    if "the verifier's agent is at its usage limit" in e["message"])
    assert {m[:len("attempt n:")] for m in waited} == {"attempt 1:", "attempt 2:"}, waited
    verifiers = [c for c in read_calls(fake_agent_dir)
                 if c["stdin"].startswith("You are reviewing the work")]
    assert len(verifiers) == 2 and all(c["time"] >= reset for c in verifiers), \
        "no verifier before the reset"


def test_an_attempt_is_retried_by_the_rule_of_a_tasks_run(api, client, repo, tb,
                                                          fake_agent_dir):
    """The same backoff with its jitter (a fifth either way), the same count of retries
    against maxRetries, the same last error."""
    tb.config["retry_base_seconds"] = 0.5
    _, task_id = run_two(api, client, repo, "fake:ok fake@haiku:exit=3", maxRetries=1)
    wait_for(lambda: task(client, task_id)["status"] == "testing", RUN,
             message="the attempt that worked moves the task to testing")
    failed, worked = attempts(client, task_id)
    assert worked["status"] == "done"
    assert failed["status"] == "failed"
    assert failed["error"].endswith("(no retries left of 1)"), failed["error"]
    [retry] = [m for e in logs(client, task_id) if (m := re.fullmatch(
        r"attempt 1 failed: .*; retry 1 of 1 in (\d+\.\d)s", e["message"]))]
    assert 0.4 <= float(retry[1]) <= 0.6
    first, second = [c for c in read_calls(fake_agent_dir) if c["cwd"].endswith("-1")]
    assert "A previous attempt at this task failed" in second["stdin"]
    assert second["time"] - first["time"] >= 0.4
