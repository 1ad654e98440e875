"""Best of N: one task run by several agents at once, compared and picked (design §18)."""

import os

import taskboard
from agent_helpers import RUN, read_calls
from conftest import git, wait_for

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
