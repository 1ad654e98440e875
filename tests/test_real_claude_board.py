"""The board drives the real Claude Code 2.1.197 (design.md §12), against the loopback
Messages API stand-in of claude_stub.py: approve, deny, question, steering message and stop
check, through the HTTP API as a person would.  Skips with npm's reason when the CLI cannot
be installed."""
import os
import sys

import pytest

import taskboard
from agent_helpers import get_task, logs, start, wait_status
from claude_stub import claude_env, tool_results
from conftest import wait_for

pytestmark = pytest.mark.sandbox

#: The real CLI starts in about a second; a turn takes a few.
RUN = 60
BASH = "MODE:bash echo hello > hello.txt && cat hello.txt"


@pytest.fixture
def config(real_claude, claude_api, tmp_path, monkeypatch):
    """The board with the real CLI as its agent, in an environment that points the CLI at
    the stub (the board hands its environment to its agents)."""
    home = tmp_path / "home"
    home.mkdir()
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "CLAUDE")):
            monkeypatch.delenv(name)
    for name, value in claude_env(claude_api, home).items():
        monkeypatch.setenv(name, value)
    return taskboard.parse_args(["--db", str(tmp_path / "data" / "taskboard.db"),
                                 "--agent-command", real_claude], environ={})


def pending(client, task_id):
    return wait_for(lambda: [a for a in client.get(f"/api/tasks/{task_id}/approvals").json
                             if a["status"] == "pending"], RUN,
                    message=f"a request of task {task_id}'s agent")[0]


def test_real_claude_waits_for_an_approval_then_runs_the_tool(client, api, claude_api):
    tid = start(api, api.project(), BASH)
    approval = pending(client, tid)
    assert (approval["kind"], approval["toolName"]) == ("tool", "Bash")
    assert approval["input"]["command"] == "echo hello > hello.txt && cat hello.txt"
    client.post_json(f"/api/approvals/{approval['id']}", {"decision": "allow"})
    wait_status(client, tid, "testing", timeout=RUN)
    assert (api.workdir / "hello.txt").read_text() == "hello\n"
    assert get_task(client, tid)["total_cost"] > 0
    # the CLI works inside the board's sandbox wherever bubblewrap does (conftest.tb)
    task = get_task(client, tid)
    assert task["sandboxed"] is client.get("/api/health").json["sandbox"]["works"]
    if task["sandboxed"]:  # its only way out, the proxy, took it to its API (design §20)
        assert task["network"]["reached"] == [claude_api.url.split("//")[1]], task["network"]


def test_real_claude_is_told_why_a_tool_call_was_denied(client, api, claude_api):
    tid = start(api, api.project(), BASH)
    approval = pending(client, tid)
    client.post_json(f"/api/approvals/{approval['id']}",
                     {"decision": "deny", "message": "No files today."})
    wait_status(client, tid, "testing", timeout=RUN)
    assert not (api.workdir / "hello.txt").exists()
    told = [r for m in claude_api.messages() for r in tool_results(m["messages"][-1])]
    assert any("No files today." in str(r.get("content")) for r in told)


def test_real_claude_gets_the_answer_to_its_question(client, api, claude_api):
    tid = start(api, api.project(permissionMode="auto-accept"), "MODE:ask")
    approval = pending(client, tid)  # a question waits for a person even in auto-accept
    question = approval["input"]["questions"][0]["question"]
    client.post_json(f"/api/approvals/{approval['id']}",
                     {"decision": "allow", "answers": {question: "Blue"}})
    wait_status(client, tid, "testing", timeout=RUN)
    told = [r for m in claude_api.messages() for r in tool_results(m["messages"][-1])]
    assert any("Blue" in str(r.get("content")) for r in told)


def test_real_claude_is_steered_by_a_message(client, api, claude_api):
    tid = start(api, api.project(), "MODE:slow")
    wait_for(claude_api.slow_started.is_set, RUN, message="the slow answer to start")
    client.post_json(f"/api/tasks/{tid}/messages",
                     {"text": "Stop that and say ready.", "interrupt": True}, status=201)
    wait_status(client, tid, "testing", timeout=RUN)
    replies = [m["text"] for m in client.get(f"/api/tasks/{tid}/messages").json
               if m["author"] == "agent"]
    assert replies and "Stop that and say ready." in replies[-1]


def test_real_claude_goes_on_while_the_stop_check_fails(client, api):
    check = "sh -c 'test -f checked || { touch checked; echo not yet; exit 1; }'"
    tid = start(api, api.project(stopCheckCommand=check), "MODE:echo hi")
    wait_status(client, tid, "testing", timeout=RUN)
    checks = [e for e in logs(client, tid) if e["kind"] == "stop_check"]
    assert [e["isError"] for e in checks] == [True, False]
    texts = [e["message"] for e in logs(client, tid) if e["kind"] == "text"]
    assert any("not yet" in text for text in texts)  # the stub echoes the hook's feedback


def test_real_claude_creates_a_sub_task_with_the_board_tools(client, api, live, outside_tmp,
                                                             monkeypatch):
    """--mcp-config's server (token from its 0600 file) reaches the real CLI: the model's
    mcp__taskboard__create_task makes a sub-task, and the task waits for it.  The server
    takes 4 s to start here (a small or busy machine): the CLI waits for it before its
    first turn (by itself, it would not)."""
    taskboard.runtime.url = live.url  # where the tools' server calls the board
    slow = outside_tmp / "slow-python"  # the server's command: the board's Python
    slow.write_text(f'#!/bin/sh\nsleep 4\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(slow))
    project = api.project()
    tid = start(api, project, "MODE:subtask Write the docs")
    try:
        child = wait_for(lambda: [t for t in client.get(f"/api/projects/{project['id']}/tasks")
                                  .json if t["title"] == "Write the docs"],
                         RUN, message="the sub-task")[0]
    except AssertionError as exc:  # what the run did instead
        said = [f"{e['kind']}: {e['message'][:300]}" for e in logs(client, tid)]
        raise AssertionError(f"{exc}; the task's log: {said[-15:]}") from None
    assert child["parent_task_id"] == tid
    wait_for(lambda: not get_task(client, tid)["is_running"], RUN, message="the run to end")
    task = get_task(client, tid)
    assert task["awaiting_subtasks"] is True and task["status"] == "in_progress"
    assert any(e["kind"] == "text" and "Tool said:" in e["message"] for e in logs(client, tid))
