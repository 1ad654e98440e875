"""--demo creates a Demo project on a scratch repository in the data dir, once."""
import json
import os
import subprocess
import sys

import pytest

import taskboard
from agent_helpers import read_calls
from conftest import FAKE_AGENT, NO_SANDBOX, wait_for


def test_demo_creates_a_scratch_repo_project_with_tasks_once(tmp_path):
    config = taskboard.parse_args(["--demo", "--db", str(tmp_path / "data" / "tb.db")],
                                  environ={})
    assert config["agent_argv"] == ["claude"]  # other projects keep their CLI
    taskboard.init(config)
    try:
        projects = taskboard.list_projects()
        assert [p["name"] for p in projects] == ["Demo"]
        repo = projects[0]["workingDir"]
        assert repo.startswith(str(tmp_path / "data"))
        log = subprocess.run(["git", "log", "--oneline"], cwd=repo, capture_output=True,
                             text=True, check=True).stdout
        assert "Initial demo app" in log
        tasks = json.loads(taskboard.list_tasks(projects[0]["id"]))
        assert len(tasks) == len(taskboard.DEMO_TASKS)
        assert {t["status"] for t in tasks} == {"backlog"}
        taskboard.delete_project(projects[0]["id"])
    finally:
        taskboard.shutdown()
    taskboard.init(config)  # a restart does not bring back a deleted Demo project
    try:
        assert taskboard.list_projects() == []
        assert os.path.isdir(repo)
    finally:
        taskboard.shutdown()


@pytest.fixture
def demo(tmp_path, monkeypatch):
    """A --demo board with the simulated agent at full speed; its Demo project."""
    monkeypatch.setenv("TASKBOARD_SIMULATE_PACE", "0")
    taskboard.init(taskboard.parse_args(["--demo", "--db", str(tmp_path / "data" / "tb.db")],
                                        environ={}))
    yield taskboard.list_projects()[0]
    taskboard.shutdown()


def next_request():
    """The first request of the simulated agent waiting for a person."""
    return wait_for(lambda: taskboard.list_approvals("pending"), timeout=20,
                    message="the simulated agent to ask")[0]


def test_demo_task_asks_before_its_edit_then_reaches_testing_with_a_commit(demo):
    """Issue 31: the demo shows the headline flow: its project is in `default` mode, so its
    first task's agent asks before its edit (design §12)."""
    project = demo  # the Demo project
    assert taskboard.get_project(project["id"])["permissionMode"] == "default"
    task = json.loads(taskboard.list_tasks(project["id"]))[0]
    taskboard.move_task(task["id"], "in_progress")
    edit = next_request()
    assert (edit["kind"], edit["toolName"], edit["taskId"]) == ("tool", "Edit", task["id"])
    assert taskboard.get_task(task["id"])["status"] == "in_progress"
    taskboard.decide_approval(edit["id"], {"decision": "allow"})
    done = wait_for(lambda: taskboard.get_task(task["id"])["status"] == "testing"
                    and taskboard.get_task(task["id"]), timeout=20,
                    message="the simulated agent to finish")
    assert done["session_id"] and done["input_tokens"] > 0 and not done["is_running"]
    kinds = [e["kind"] for e in json.loads(taskboard.task_logs(task["id"], 500))]
    assert {"thinking", "text", "tool_call", "tool_result"} <= set(kinds)
    log = subprocess.run(["git", "log", "--format=%s"], cwd=project["workingDir"],
                         capture_output=True, text=True, check=True).stdout
    assert f"Simulated work: {task['title']}" in log


def test_demo_work_matches_each_task_and_the_answer_to_its_question(demo):
    """Issue 44: each Demo task's edit is what its title asks for, and the README reads as
    the person answered."""
    tasks = {t["title"]: t for t in json.loads(taskboard.list_tasks(demo["id"]))}
    repo = demo["workingDir"]
    taskboard.update_project(demo["id"], {"permissionMode": "auto-accept"})
    for title in ("Add a greeting function", "Fix the off-by-one in count_to"):
        taskboard.move_task(tasks[title]["id"], "in_progress")
        wait_for(lambda t=tasks[title]: taskboard.get_task(t["id"])["status"] == "testing",
                 timeout=20, message=f"{title!r} to finish")
    app = subprocess.run([sys.executable, "-c", "import app; print(app.count_to(3), "
                          "app.greet('Ada'))"], cwd=repo, capture_output=True, text=True)
    assert app.stdout == "[1, 2, 3] Hello, Ada!\n", app.stderr
    readme = tasks["Document the app in the README"]
    taskboard.move_task(readme["id"], "in_progress")
    question = next_request()
    asked = question["input"]["questions"][0]["question"]
    taskboard.decide_approval(question["id"], {"decision": "allow",
                                               "answers": {asked: "Friendly"}})
    wait_for(lambda: taskboard.get_task(readme["id"])["status"] == "testing", timeout=20,
             message="the README task to finish")
    with open(os.path.join(repo, "README.md"), encoding="utf-8") as f:
        assert f.read().startswith("# Demo app\n\nWelcome!")
    assert not os.path.exists(os.path.join(repo, "NOTES.md"))


def test_demo_runs_only_the_demo_project_simulated_and_never_as_a_clis_spend(
        tmp_path, agent_dir, capfd, monkeypatch):
    """Issue 44: under --demo a project beside the Demo runs its configured CLI; the
    Demo's runs are marked simulated, cost nothing and count in no CLI's usage."""
    monkeypatch.setenv("TASKBOARD_SIMULATE_PACE", "0")  # the simulated agent at full speed
    config = taskboard.parse_args(
        ["--demo", "--db", str(tmp_path / "data" / "tb.db"), "--agent-command",
         f"{sys.executable} {FAKE_AGENT}"], environ=NO_SANDBOX)
    taskboard.init(config)
    try:
        demo_project = taskboard.list_projects()[0]
        taskboard.update_project(demo_project["id"], {"permissionMode": "auto-accept"})
        code = tmp_path / "code"
        code.mkdir()
        real = taskboard.create_project({"name": "Real", "slug": "real",
                                         "workingDir": str(code)})
        task = taskboard.create_task(real["id"], {"title": "Real work",
                                                  "description": "fake:ok"})
        demo_task = json.loads(taskboard.list_tasks(demo_project["id"]))[0]
        for moved in (task, demo_task):
            taskboard.move_task(moved["id"], "in_progress")
        for moved in (task, demo_task):
            wait_for(lambda t=moved: taskboard.get_task(t["id"])["status"] == "testing",
                     timeout=20, message=f"{moved['title']!r} to finish")
        assert [taskboard.get_project(p["id"])["simulated"] for p in (demo_project, real)] \
            == [True, False]
        [call] = read_calls(agent_dir)  # the fake CLI ran the real project's task only
        assert call["cwd"] == str(code)
        assert taskboard.get_task(task["id"])["total_cost"] == pytest.approx(0.03765)
        simulated = taskboard.get_task(demo_task["id"])
        assert simulated["total_cost"] == 0 and simulated["input_tokens"] > 0
        logs = [e["message"] for e in json.loads(taskboard.task_logs(demo_task["id"], 500))]
        assert any("simulated agent" in m for m in logs)
        usage = taskboard.agent_usage()
        assert usage["agents"]["claude"]["cost"] == pytest.approx(0.03765)
        assert usage["agents"]["claude"]["tasks"] == 1
        assert usage["usage"]["totalInputTokens"] == taskboard.get_task(task["id"])[
            "input_tokens"]
    finally:
        taskboard.shutdown()


def test_simulated_agent_outside_a_demo_repository_changes_nothing(tmp_path):
    repo = tmp_path / "real-checkout"
    repo.mkdir()
    (repo / "keep.txt").write_text("mine\n")
    out = subprocess.run([sys.executable, taskboard.__file__, "--simulate-agent", "-p"],
                         cwd=repo, input="# TB-1: Do something\n", capture_output=True,
                         text=True, timeout=60, env={**os.environ,
                                                     "TASKBOARD_SIMULATE_PACE": "0"})
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines[0]["subtype"] == "init" and lines[-1]["type"] == "result"
    assert lines[-1]["is_error"] is False and out.returncode == 0
    assert sorted(p.name for p in repo.iterdir()) == ["keep.txt"]


def test_a_demo_task_asks_a_question_then_before_its_edit(demo):
    project = demo  # the Demo project
    [task] = [t for t in json.loads(taskboard.list_tasks(project["id"]))
              if "ask me" in (t["description"] or "")]
    taskboard.move_task(task["id"], "in_progress")
    question = next_request()
    assert question["kind"] == "question"
    asked = question["input"]["questions"][0]["question"]
    taskboard.decide_approval(question["id"], {"decision": "allow",
                                               "answers": {asked: "Short"}})
    edit = next_request()
    assert (edit["kind"], edit["toolName"]) == ("tool", "Edit")
    taskboard.decide_approval(edit["id"], {"decision": "allow"})
    wait_for(lambda: taskboard.get_task(task["id"])["status"] == "testing", timeout=20,
             message="the simulated agent to finish")
    texts = [e["message"] for e in json.loads(taskboard.task_logs(task["id"], 500))]
    assert any('"Short"' in text for text in texts)
    assert f"answered by person: {asked} → Short" in texts  # not "allowed by person"


def test_a_demo_run_says_it_is_simulated_not_unsandboxed(demo):
    """Issue 55: the simulated agent needs no sandbox, and says so; its task wears no
    "no sandbox" chip (sandboxed is null), whether bubblewrap works here or not."""
    taskboard.update_project(demo["id"], {"permissionMode": "auto-accept"})
    task = json.loads(taskboard.list_tasks(demo["id"]))[0]
    taskboard.move_task(task["id"], "in_progress")
    wait_for(lambda: taskboard.get_task(task["id"])["status"] == "testing", timeout=20,
             message="the demo task to finish")
    taskboard.runtime.logs.flush()
    logs = [e["message"] for e in json.loads(taskboard.task_logs(task["id"], 500))]
    assert "simulated: no sandbox needed" in logs
    assert not [m for m in logs if m.startswith("not sandboxed")]
    assert taskboard.get_task(task["id"])["sandboxed"] is None
