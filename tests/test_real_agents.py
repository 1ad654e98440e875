"""The board drives the real Codex 0.169.0, Gemini CLI 0.61.0 and OpenCode 1.18.33 (design.md
§14), each against its loopback API stand-in (codex_stub, gemini_stub, opencode_stub): a tool
really runs, the log, tokens and cost are recorded, a requested change resumes the session,
and the read-only mode keeps the CLI from writing.  Each test skips with npm's reason when its
CLI cannot be installed."""
import json
import os
import subprocess
from types import SimpleNamespace

import pytest

import taskboard
from agent_helpers import logs, start, wait_status
from conftest import desk, wait_for

pytestmark = pytest.mark.sandbox

#: A real CLI starts in one to a few seconds; a turn against the stub takes about as long.
RUN = 90


def _codex(tmp_path):
    import codex_stub
    cli = codex_stub.codex_cli()
    stub = codex_stub.ResponsesStub().start()
    return cli, stub, codex_stub.codex_env(tmp_path / "home", stub)


def _gemini(tmp_path):
    import gemini_stub
    cli = gemini_stub.gemini_cli()
    stub = gemini_stub.GenerateStub().start()
    return cli, stub, gemini_stub.gemini_env(stub, tmp_path / "home")


def _opencode(tmp_path):
    import opencode_stub
    cli = opencode_stub.opencode_cli()
    stub = opencode_stub.ChatStub().start()
    return cli, stub, opencode_stub.opencode_env(tmp_path / "home",
                                                 opencode_stub.opencode_config(stub.url))


SETUPS = {"codex": _codex, "gemini": _gemini, "opencode": _opencode}
#: The request log of each stub: what the CLI sent to the model, in order.
REQUESTS = {"codex": "responses", "gemini": "generations", "opencode": "chats"}


@pytest.fixture(params=sorted(SETUPS))
def real_agent(request, tmp_path, monkeypatch):
    """One real CLI (installed or a skip), its stub, and the environment that points the
    CLI at the stub (the board hands its own environment to its agents)."""
    name = request.param
    (tmp_path / "home").mkdir()
    cli, stub, env = SETUPS[name](tmp_path)
    for key in set(os.environ) - set(env):
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield SimpleNamespace(name=name, cli=cli, stub=stub, env=env,
                          requests=getattr(stub, REQUESTS[name]))
    stub.stop()


@pytest.fixture
def config(real_agent, tmp_path):
    return taskboard.parse_args(["--db", str(tmp_path / "data" / "taskboard.db")],
                                environ={taskboard.AGENTS[real_agent.name].env: real_agent.cli})


def write_request(agent, folder, name, text):
    """What to ask each stub for so that its CLI writes `text` into folder/name with a tool
    the project's default mode lets it use (Gemini's auto_edit has no shell)."""
    if agent == "gemini":
        return f"MODE:write {folder / name} {text}"
    return f"MODE:bash echo {text} > {name} && cat {name}"


def test_real_agent_runs_a_tool_then_resumes_for_changes(client, api, real_agent):
    agent = real_agent.name
    project = api.project(agent=agent)
    tid = start(api, project, write_request(agent, api.workdir, "hello.txt", "hello"))
    task = wait_status(client, tid, "testing", timeout=RUN)
    assert (api.workdir / "hello.txt").read_text().strip() == "hello"
    entries = logs(client, tid)
    tool = {"codex": "shell", "gemini": "write_file", "opencode": "bash"}[agent]
    assert any(e["kind"] == "tool_call" and e["message"].startswith(tool) for e in entries), \
        [e["message"] for e in entries]
    assert any(e["kind"] == "text" and "Tool said:" in e["message"] for e in entries)
    assert task["input_tokens"] > 0 and task["output_tokens"] > 0
    assert task["total_cost"] > 0
    assert task["cost_estimated"] is (agent != "opencode"), "OpenCode reports its cost"
    assert task["session_id"] and task["last_error"] is None
    # the CLI works inside the board's sandbox wherever bubblewrap does (conftest.tb)
    assert task["sandboxed"] is client.get("/api/health").json["sandbox"]["works"]
    if task["sandboxed"]:  # its only way out, the proxy, took it to its API (design §20)
        assert task["network"]["reached"] == [real_agent.stub.url.split("//")[1]], task["network"]

    asked = len(real_agent.requests())
    desk(client, "request_changes", {"id": tid, "feedback": "MODE:echo once more"})
    wait_for(lambda: any(e["kind"] == "text" and "You said: once more" in e["message"]
                         for e in logs(client, tid)), RUN, message="the resumed run's answer")
    again = wait_status(client, tid, "testing", timeout=RUN)
    assert again["session_id"] == task["session_id"], "the same session goes on"
    history = json.dumps(real_agent.requests()[asked])
    assert "hello.txt" in history, "the resumed request carries the first turn"
    assert again["input_tokens"] > task["input_tokens"]


def test_real_agent_read_only_cannot_write(real_agent, tmp_path):
    """The adapter's read-only invocation, run by hand: the stub asks for a write (Codex and
    OpenCode by shell, which OpenCode's plan agent alone would allow; Gemini by write_file)
    and the file must not appear."""
    agent, work = real_agent.name, tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    adapter = taskboard.ADAPTERS[agent]
    model = {"codex": "gpt-5-codex", "gemini": "gemini-2.5-flash", "opencode": None}[agent]
    argv = adapter(model).invocation([real_agent.cli], "", model=model, effort="low",
                                     permission_mode="read-only", session_id=None,
                                     cwd=str(work))
    env = {**real_agent.env, **adapter(model).environment("read-only"), "PWD": str(work)}
    prompt = write_request("codex" if agent == "opencode" else agent, work, "made.txt", "hi")
    done = subprocess.run(argv, cwd=work, env=env, input=prompt, capture_output=True,
                          text=True, timeout=RUN)
    assert len(real_agent.requests()) >= 2, (done.returncode, done.stdout, done.stderr)
    assert not (work / "made.txt").exists(), done.stdout
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert results, "it printed its JSON lines"


@pytest.mark.parametrize("real_agent", ["gemini"], indirect=True)
def test_real_gemini_daily_quota_waits_for_the_reset_on_stderr(client, api, real_agent):
    """The daily quota's result names no reset; the real CLI's stack trace on stderr carries
    the API's "Please retry in 3600s.": the task waits that long instead of failing."""
    before = taskboard.time.time()
    tid = start(api, api.project(agent="gemini"), "MODE:quota daily 3600")
    waiting = wait_for(lambda: client.get(f"/api/tasks/{tid}").json["waitingUntil"], RUN,
                       message="the task to wait for the quota")
    until = taskboard.parse_iso(waiting).timestamp()
    assert 3600 <= until - before <= 3600 + RUN
    assert client.get(f"/api/tasks/{tid}").json["status"] == "in_progress"


@pytest.mark.parametrize("real_agent", ["codex", "opencode"], indirect=True)
def test_real_agent_creates_a_sub_task_with_the_board_tools(client, api, real_agent, live):
    """The board tools' MCP server reaches Codex (-c mcp_servers…) and OpenCode
    (OPENCODE_CONFIG_CONTENT) too: the model's create_task call makes a sub-task of the
    task, through the run's token, and the task then waits for it."""
    taskboard.runtime.url = live.url  # where the tools' server calls the board
    project = api.project(agent=real_agent.name)
    tid = start(api, project, "MODE:subtask Write the docs")
    child = wait_for(lambda: [t for t in client.get(f"/api/projects/{project['id']}/tasks")
                              .json if t["title"] == "Write the docs"],
                     RUN, message="the sub-task")[0]
    assert child["parent_task_id"] == tid and child["status"] == "backlog"
    wait_for(lambda: not client.get(f"/api/tasks/{tid}").json["is_running"], RUN,
             message="the run to end")
    task = client.get(f"/api/tasks/{tid}").json
    assert task["awaiting_subtasks"] is True and task["status"] == "in_progress"
    entries = logs(client, tid)
    name = {"codex": "mcp__taskboard__create_task", "opencode": "taskboard_create_task"}
    assert any(e["kind"] == "tool_call" and e["message"].startswith(name[real_agent.name])
               for e in entries), [e["message"] for e in entries]
    assert any(e["kind"] == "text" and "Tool said:" in e["message"] for e in entries)
