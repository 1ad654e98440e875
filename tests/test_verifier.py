"""autoTest: a verifier run judges finished work (design.md §5 "Verifier")."""

import pytest

import taskboard
from agent_helpers import RUN, read_calls
from conftest import wait_for


def calls(agent_dir):
    return read_calls(agent_dir)


def verifier_calls(agent_dir):
    return [c for c in calls(agent_dir) if c["stdin"].startswith("You are reviewing")]


def run_statuses(task_id):
    with taskboard.tx() as t:
        return [(r["kind"], r["status"]) for r in t.all(
            "SELECT kind, status FROM runs WHERE task_id = ? ORDER BY id", (task_id,))]


def start(api, client, description, **project_fields):
    project = api.project(autoTest=True, testPrompt="Run `make check` first.",
                          **project_fields)
    task = api.task(project["id"], description=description,
                    acceptance_criteria="hello.txt exists")
    api.move(task["id"], "in_progress")
    return task["id"]


def status(client, task_id):
    return client.get(f"/api/tasks/{task_id}").json["status"]


def test_verifier_approval_moves_the_task_to_done(api, client, fake_agent_dir):
    task_id = start(api, client, "fake:ok fake:verdict=approve")
    wait_for(lambda: status(client, task_id) == "done", RUN, message="approval → done")
    [call] = verifier_calls(fake_agent_dir)
    argv = call["argv"]
    assert "--dangerously-skip-permissions" not in argv and "--resume" not in argv
    assert argv[argv.index("--tools") + 1] == "Read,Grep,Glob,Bash"
    allowed = argv[argv.index("--allowedTools") + 1:]
    assert "Read" in allowed and "Bash(git diff:*)" in allowed
    assert not any(rule.startswith(("Edit", "Write", "Bash(rm")) for rule in allowed)
    assert "Run `make check` first." in call["stdin"] and "hello.txt exists" in call["stdin"]
    assert run_statuses(task_id) == [("task", "ok"), ("verifier", "approved")]


def test_verifier_rejection_resumes_the_agent_with_its_feedback(api, client,
                                                                 fake_agent_dir):
    task_id = start(api, client, "fake:ok fake:verdict=reject fake:resume=hang")
    wait_for(lambda: len([c for c in calls(fake_agent_dir) if "--resume" in c["argv"]]) == 1,
             RUN, message="the agent resumed with the verifier's feedback")
    resumed = [c for c in calls(fake_agent_dir) if "--resume" in c["argv"]][0]
    assert "please add a test" in resumed["stdin"]
    task = client.get(f"/api/tasks/{task_id}").json
    assert task["status"] == "in_progress" and task["revision_count"] == 1
    revisions = client.get(f"/api/tasks/{task_id}/revisions").json
    assert "please add a test" in revisions[0]["feedback"]


def test_verifier_stops_after_three_automatic_revisions(api, client, fake_agent_dir):
    task_id = start(api, client, "fake:ok fake:verdict=reject fake:resume=ok")
    wait_for(lambda: len(verifier_calls(fake_agent_dir)) == 4 and status(client, task_id)
             == "testing" and not taskboard.runtime.agents.verifiers, RUN * 2,
             message="four verdicts, then the task waits in testing")
    assert client.get(f"/api/tasks/{task_id}").json["revision_count"] == 3
    assert run_statuses(task_id).count(("verifier", "rejected")) == 4


def test_verifier_without_a_verdict_leaves_the_task_in_testing_saying_why(api, client,
                                                                         fake_agent_dir, tb):
    task_id = start(api, client, "fake:ok fake:verdict=none")
    wait_for(lambda: run_statuses(task_id)[-1:] == [("verifier", "failed")], RUN,
             message="the verifier run to end without a verdict")
    tb.logs.flush()
    logs = client.get(f"/api/tasks/{task_id}/logs").json
    assert status(client, task_id) == "testing"
    assert any("no verdict" in e["message"] and e["isError"] for e in logs)


def test_verdict_after_a_manual_move_is_ignored(api, client, fake_agent_dir):
    task_id = start(api, client, "fake:ok fake:verdict=approve fake:sleep=0.3")
    wait_for(lambda: verifier_calls(fake_agent_dir), RUN, message="the verifier to start")
    api.move(task_id, "failed")  # the person decides first
    wait_for(lambda: not taskboard.runtime.agents.verifiers, RUN,
             message="the verifier to be stopped")
    assert status(client, task_id) == "failed"


@pytest.mark.parametrize("texts,verdict", [
    (["```json\n{\"verdict\": \"approve\", \"summary\": \"ok\"}\n```"], "approve"),
    (["a", "```json\n{\"verdict\": \"reject\"}\n```", "```\n{\"verdict\": \"approve\"}\n```"],
     "approve"),
    (["no block here"], None),
    (["```json\n{not json}\n```"], None),
    (["```json\n{\"verdict\": \"maybe\"}\n```"], None),
])
def test_parse_verdict_takes_the_last_fenced_block(texts, verdict):
    parsed, problem = taskboard.parse_verdict(texts)
    assert (parsed or {}).get("verdict") == verdict
    assert (problem is None) == (verdict is not None)


def test_verifier_session_never_replaces_the_tasks_session(api, client, fake_agent_dir):
    start(api, client, "fake:ok fake:verdict=reject fake:resume=hang")
    wait_for(lambda: [c for c in calls(fake_agent_dir) if "--resume" in c["argv"]], RUN,
             message="the agent to resume")
    first, verifier, resumed = calls(fake_agent_dir)[:3]
    assert resumed["argv"][resumed["argv"].index("--resume") + 1] == first["session_id"]
    assert verifier["session_id"] != first["session_id"]


def test_verifier_rules_allow_no_command_that_writes_or_runs_programs():
    """`find -delete`, `find -exec` and `rg --pre` would pass a prefix rule."""
    rules = " ".join(taskboard.VERIFIER_TOOLS + taskboard.PLANNER_TOOLS)
    for command in ("find", "rg", "rm", "mv", "cp", "sed", "tee", "curl", "python -c", "sh"):
        assert f"Bash({command}:" not in rules and f"Bash({command} " not in rules
    assert "Bash" not in taskboard.VERIFIER_TOOLS and "Bash" not in taskboard.PLANNER_TOOLS
