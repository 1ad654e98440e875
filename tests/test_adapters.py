"""Agent adapters (design.md §14): Codex, Gemini and OpenCode runs, each replayed by
tests/fake_agent.py `--as NAME` from its recorded stream (tests/fixtures/agent-streams/),
reach the same log, usage, cost and retry rules as Claude's."""
import os
import sys
import tomllib

import pytest
import webtest

import taskboard
from agent_helpers import (
    get_task,
    logs,
    read_calls,
    start,
    task_calls,
    wait_logs,
    wait_status,
)
from conftest import (
    FAKE_AGENT,
    assert_error,
    assert_refused,
    desk,
    fake_cli_environ,
    wait_for,
)

pytestmark = pytest.mark.usefixtures("fast_retries")

RUN = 15
FOREIGN = ("codex", "gemini", "opencode")


@pytest.fixture
def config(tmp_path):
    """The board with every agent CLI pointed at the fake."""
    return taskboard.parse_args(
        ["--db", str(tmp_path / "data" / "taskboard.db"),
         "--agent-command", f"{sys.executable} {FAKE_AGENT}"], environ=fake_cli_environ())


def entry(entries, kind, text):
    return any(e["kind"] == kind and text in e["message"] for e in entries)


#: agent -> (stream, text, tool call, tool result, (input, output, cache read, cache
#: creation), cost, estimated)
SUCCESS = {
    # codex: input_tokens counts the cached ones; no cost: gpt-5-codex's prices
    "codex": ("codex-success", "Created hello.txt.",
              "shell: /bin/bash -lc 'echo hello > hello.txt && cat hello.txt'", "hello",
              (1000, 120, 2000, 0), (1000 * 1.25 + 120 * 10 + 2000 * 0.125) / 1e6, True),
    # gemini: input_tokens counts the cached ones; no cost: gemini-2.5-flash's prices
    "gemini": ("gemini-success", "Created hello.txt.",
               "run_shell_command: echo hello > hello.txt && cat hello.txt", "hello",
               (1200, 80, 600, 0), (1200 * 0.30 + 80 * 2.50 + 600 * 0.075) / 1e6, True),
    # opencode: two steps, each 1000 in / 85 out / 200 cache read costing 0.004335
    "opencode": ("opencode-tool", "Tool said: hi", "bash: echo hi > hi.txt && cat hi.txt",
                 "hi", (2000, 170, 400, 0), 2 * 0.004335, False),
}


@pytest.mark.parametrize("agent", FOREIGN)
def test_run_of_each_agent_reaches_testing_with_log_usage_and_cost(client, api, agent_dir,
                                                                    agent):
    stream, text, call, result, usage, cost, estimated = SUCCESS[agent]
    tid = start(api, api.project(agent=agent), f"fake:replay={stream}")
    task = wait_status(client, tid, "testing")
    assert (task["input_tokens"], task["output_tokens"], task["cache_read_tokens"],
            task["cache_creation_tokens"]) == usage
    assert task["total_cost"] == pytest.approx(cost)
    assert task["cost_estimated"] is estimated
    assert task["session_id"] and task["last_error"] is None
    entries = wait_logs(client, tid, lambda es: entry(es, "text", text), "the agent's text")
    assert entry(entries, "tool_call", call), [e["message"] for e in entries]
    assert entry(entries, "tool_result", result)
    assert entry(entries, "system", f"session {task['session_id']}")
    assert entry(entries, "system", f"approvals not available for this agent ({agent})")
    assert not any(e["kind"] == "raw" for e in entries), "every recorded line is known"
    [call_made] = read_calls(agent_dir)
    assert call_made["as"] == agent


def test_codex_invocation_prompt_on_stdin_sandbox_from_permissions(client, api, agent_dir):
    tid = start(api, api.project(agent="codex", permissionMode="allow-tools"), "fake:ok")
    wait_status(client, tid, "testing")
    [call] = task_calls(agent_dir, tid)
    argv = call["argv"]
    assert argv[:3] == ["exec", "--json", "--skip-git-repo-check"]
    assert argv[argv.index("-s") + 1] == "workspace-write"
    assert argv[argv.index("-m") + 1] == "gpt-5-codex"
    assert "model_reasoning_effort=medium" in argv
    assert argv[-1] == "-", "the prompt goes on stdin, not in argv (128 KiB an argument)"
    assert call["stdin"].startswith("# ") and "fake:ok" in call["stdin"]
    assert "## Board tools" in call["stdin"]


def test_codex_gets_the_board_tools_before_the_prompt_and_resume(client, api, agent_dir):
    """-c mcp_servers.taskboard={...}: the server reads its token from the run's 0600 file
    (Codex hands MCP servers a filtered environment), approved and required."""
    tid = start(api, api.project(agent="codex"), "fake:ok")
    first = wait_status(client, tid, "testing")
    desk(client, "request_changes", {"id": tid, "feedback": "again"})
    wait_for(lambda: len(task_calls(agent_dir, tid)) == 2, RUN, message="the resumed run")
    wait_status(client, tid, "testing")
    for call in task_calls(agent_dir, tid):
        argv = call["argv"]
        [spec] = [a for a in argv if a.startswith("mcp_servers.taskboard=")]
        at = argv.index(spec)
        assert argv[at - 1] == "-c" and at < len(argv) - 1
        if "resume" in argv:
            assert at < argv.index("resume") and argv[-3:] == ["resume", first["session_id"],
                                                                "-"]
        server = tomllib.loads(spec)["mcp_servers"]["taskboard"]
        assert server["command"] == sys.executable and server["required"] is True
        assert server["default_tools_approval_mode"] == "approve"
        args = server["args"]
        assert args[1:4] == ["--mcp", "--url", taskboard.runtime.url]
        config = args[args.index("--config") + 1]
        assert config.startswith(str(taskboard.runtime.data_dir))
        assert not os.path.exists(config), "the run's file goes with the run"
        assert "TASKBOARD_MCP_TOKEN" not in spec, "the token is never on a command line"


def test_opencode_gets_the_board_tools_merged_into_the_users_config(client, api, agent_dir,
                                                                    monkeypatch):
    mine = {"provider": {"local": {"npm": "x"}}, "mcp": {"mine": {"type": "local",
                                                                   "command": ["m"]}}}
    monkeypatch.setenv("OPENCODE_CONFIG_CONTENT", taskboard.json.dumps(mine))
    monkeypatch.setenv("OPENCODE_PERMISSION", '{"*": "ask"}')
    tid = start(api, api.project(agent="opencode"), "fake:ok")
    wait_status(client, tid, "testing")
    [call] = task_calls(agent_dir, tid)
    config = taskboard.json.loads(call["env"]["OPENCODE_CONFIG_CONTENT"])
    assert config["provider"] == mine["provider"] and config["mcp"]["mine"] == mine["mcp"]["mine"]
    server = config["mcp"]["taskboard"]
    assert server["type"] == "local" and server["enabled"] is True
    assert server["command"][:4] == [sys.executable, taskboard.__file__, "--mcp", "--url"]
    assert server["environment"] == {}, "no lower layer's variables leak into the server"
    assert taskboard.json.loads(call["env"]["OPENCODE_PERMISSION"]) == {
        "*": "ask", "taskboard_*": "allow"}, "the user's rules stay; the board's tools run"
    assert "## Board tools" in call["stdin"]


@pytest.mark.parametrize("content, permission", [("not json", '"allow"'), ("[1]", "ask")])
def test_opencode_settings_that_are_not_objects_are_left_as_they_are(client, api, agent_dir,
                                                                      monkeypatch, content,
                                                                      permission):
    """A config OpenCode will refuse is its to report, and a rule for every tool ("allow")
    must not become the board's one rule."""
    monkeypatch.setenv("OPENCODE_CONFIG_CONTENT", content)
    monkeypatch.setenv("OPENCODE_PERMISSION", permission)
    tid = start(api, api.project(agent="opencode"), "fake:ok")
    wait_status(client, tid, "testing")
    [call] = task_calls(agent_dir, tid)
    assert call["env"]["OPENCODE_CONFIG_CONTENT"] == content
    assert call["env"]["OPENCODE_PERMISSION"] == permission


def test_opencode_gets_the_board_tools_when_only_its_permission_is_a_string(
        client, api, agent_dir, monkeypatch):
    monkeypatch.setenv("OPENCODE_PERMISSION", '"allow"')
    tid = start(api, api.project(agent="opencode"), "fake:ok")
    wait_status(client, tid, "testing")
    [call] = task_calls(agent_dir, tid)
    assert "taskboard" in taskboard.json.loads(call["env"]["OPENCODE_CONFIG_CONTENT"])["mcp"]
    assert call["env"]["OPENCODE_PERMISSION"] == '"allow"'


def test_gemini_gets_no_board_tools_and_its_prompt_does_not_offer_them(client, api,
                                                                       agent_dir):
    tid = start(api, api.project(agent="gemini"), "fake:ok")
    wait_status(client, tid, "testing")
    [call] = task_calls(agent_dir, tid)
    assert "Board tools" not in call["stdin"]
    assert not any("mcp" in a for a in call["argv"])


@pytest.mark.parametrize("mode, sandbox", [("auto-accept", "danger-full-access"),
                                           ("default", "workspace-write")])
def test_codex_sandbox_of_each_permission_mode(client, api, agent_dir, mode, sandbox):
    tid = start(api, api.project(agent="codex", permissionMode=mode), "fake:ok")
    wait_status(client, tid, "testing")
    [call] = task_calls(agent_dir, tid)
    assert call["argv"][call["argv"].index("-s") + 1] == sandbox
    notes = [e for e in logs(client, tid) if "approvals not available" in e["message"]]
    assert len(notes) == (0 if mode == "auto-accept" else 1)


def test_gemini_invocation_prompt_on_stdin_and_approval_mode(client, api, agent_dir):
    tid = start(api, api.project(agent="gemini", permissionMode="auto-accept"), "fake:ok")
    wait_status(client, tid, "testing")
    [call] = task_calls(agent_dir, tid)
    argv = call["argv"]
    assert argv[argv.index("-o") + 1] == "stream-json"
    assert argv[argv.index("--approval-mode") + 1] == "yolo"
    assert argv[argv.index("-m") + 1] == "gemini-2.5-flash"
    assert "--skip-trust" in argv, "headless Gemini refuses an untrusted folder without it"
    assert "-p" not in argv and "fake:ok" in call["stdin"]


@pytest.mark.parametrize("agent, mode, flags", [
    ("codex", "read-only", ["-s", "read-only"]),
    ("codex", "default", ["-s", "workspace-write"]),
    ("gemini", "read-only", ["--approval-mode", "plan"]),
    ("gemini", "default", ["--approval-mode", "auto_edit"]),
    ("gemini", "allow-tools", ["--approval-mode", "auto_edit"]),
    ("opencode", "read-only", ["--agent", "plan"]),
    ("opencode", "auto-accept", ["--auto"])])
def test_permission_mode_of_each_agent(agent, mode, flags):
    adapter = taskboard.ADAPTERS[agent]()
    argv = adapter.invocation(["cli"], "hi", model=None, effort="high", permission_mode=mode,
                              session_id=None, cwd="/tmp")
    at = argv.index(flags[0])
    assert argv[at:at + len(flags)] == flags
    env = adapter.environment(mode)
    if (agent, mode) == ("opencode", "read-only"):  # its plan agent's bash could still write
        assert taskboard.json.loads(env["OPENCODE_PERMISSION"]) == {"bash": "deny",
                                                                     "edit": "deny"}
    else:
        assert env == {}


def test_opencode_invocation_prompt_on_stdin_and_dir_and_pwd_set(client, api, agent_dir):
    tid = start(api, api.project(agent="opencode"), "fake:ok")
    wait_status(client, tid, "testing")
    [call] = task_calls(agent_dir, tid)
    argv = call["argv"]
    assert argv[:3] == ["run", "--format", "json"]
    assert argv[argv.index("--dir") + 1] == call["cwd"] == call["env"]["PWD"]
    assert "-m" not in argv, "OpenCode's own configured model by default"
    assert "fake:ok" in call["stdin"]


@pytest.mark.parametrize("agent, flag", [("codex", "resume"), ("gemini", "--resume"),
                                         ("opencode", "--session")])
def test_changes_requested_resume_the_agents_session(client, api, agent_dir, agent, flag):
    stream = SUCCESS[agent][0]
    tid = start(api, api.project(agent=agent), f"fake:replay={stream}")
    first = wait_status(client, tid, "testing")
    desk(client, "request_changes", {"id": tid, "feedback": "also add a test"})
    wait_for(lambda: len(task_calls(agent_dir, tid)) == 2, RUN, message="the resumed run")
    task = wait_status(client, tid, "testing")
    second = task_calls(agent_dir, tid)[1]
    argv = second["argv"]
    assert argv[argv.index(flag) + 1] == first["session_id"]
    assert second["stdin"] == "also add a test"
    if agent == "codex":  # the thread's usage is cumulative: the replay adds nothing
        assert argv[-3:] == ["resume", first["session_id"], "-"], "exec's options first"
        assert task["input_tokens"] == first["input_tokens"]
        assert task["output_tokens"] == first["output_tokens"]


@pytest.mark.parametrize("agent, stream, why", [
    ("codex", "codex-auth-error", r"Reconnecting"),
    ("gemini", "gemini-api-error", r"API key not valid"),
    ("opencode", "opencode-auth-error", r"APIError"),
    ("opencode", "opencode-permission-rejected", r"rejected permission"),
])
def test_error_stream_fails_at_once_saying_why(client, api, agent_dir, agent, stream, why):
    tid = start(api, api.project(agent=agent, maxRetries=2), f"fake:replay={stream}")
    task = wait_status(client, tid, "failed")
    assert task["retry_count"] == 0
    assert why in task["last_error"], task["last_error"]
    assert len(read_calls(agent_dir)) == 1


def test_api_error_retries_then_fails(client, api, agent_dir):
    """(A 429 that says when to try again waits instead: test_usage_limits.py.)"""
    tid = start(api, api.project(agent="opencode", maxRetries=1),
                "fake:replay=opencode-api-error")
    task = wait_status(client, tid, "failed")
    assert task["retry_count"] == 1
    assert "model API failed" in task["last_error"]
    assert len(read_calls(agent_dir)) == 2


@pytest.mark.parametrize("agent", FOREIGN)
def test_unknown_lines_are_kept_raw_and_the_run_goes_on(client, api, agent_dir, agent):
    stream = SUCCESS[agent][0]
    tid = start(api, api.project(agent=agent), f"fake:replay={stream} fake:garbage")
    wait_status(client, tid, "testing")
    entries = logs(client, tid)
    assert entry(entries, "raw", "this line is not JSON")
    assert entry(entries, "raw", '"mystery_event"')


def test_task_agent_overrides_the_projects(client, api, agent_dir):
    project = api.project()
    assert project["agent"] == "claude"
    tid = start(api, project, "fake:ok", agent="gemini")
    task = wait_status(client, tid, "testing")
    assert task["agent"] == "gemini"
    [call] = task_calls(agent_dir, tid)
    assert call.get("as") == "gemini"
    other = start(api, project, "fake:ok")
    wait_status(client, other, "testing")
    assert get_task(client, other)["agent"] is None
    assert "as" not in task_calls(agent_dir, other)[0], "null: the project's (Claude)"


@pytest.mark.parametrize("where", ["project", "task"])
def test_unknown_agent_is_400_naming_the_field_and_the_known_ones(client, api, where):
    if where == "project":
        url, body = "/api/projects", {"name": "X", "slug": "x", "workingDir":
                                      str(api.workdir), "agent": "cursor"}
    else:
        url, body = f"/api/projects/{api.project()['id']}/tasks", {"title": "t",
                                                                   "agent": "cursor"}
    error = assert_error(client.post_json(url, body, expect_errors=True), 400,
                         "validation_error", "agent")
    assert all(name in error["error"] for name in taskboard.AGENTS)


def test_agent_not_installed_fails_at_once_with_how_to_install(client, api, tb):
    config = taskboard.parse_args(
        ["--db", tb.config["db_path"], "--agent-command", f"{sys.executable} {FAKE_AGENT}"],
        environ=fake_cli_environ(TASKBOARD_GEMINI_COMMAND="definitely-missing-gemini"))
    taskboard.shutdown()
    taskboard.init(config)
    config["retry_base_seconds"] = 0.05
    tid = start(api, api.project(agent="gemini", maxRetries=2), "fake:ok")
    task = wait_status(client, tid, "failed")
    assert task["retry_count"] == 0
    assert "npm install -g @google/gemini-cli" in task["last_error"]
    assert "TASKBOARD_GEMINI_COMMAND" in task["last_error"]


def test_health_reports_every_configured_cli(client):
    def checked():
        body = client.get("/api/health").json
        return body if all(a["version"] for a in body["agents"].values()) else None
    body = wait_for(checked, RUN, message="every CLI checked")
    assert set(body["agents"]) == set(taskboard.AGENTS)
    assert body["agent"] == {k: body["agents"]["claude"][k]
                             for k in ("found", "version", "checking")}
    assert not any(a["checking"] for a in body["agents"].values())
    for name in FOREIGN:
        assert body["agents"][name]["waitingUntil"] is None
        assert body["agents"][name]["found"] is True
        assert body["agents"][name]["version"].startswith(name)


def cli_script(folder, name, stdout, stderr="", wait_for_file=None):
    """An executable that answers --version with stdout and stderr as given (once
    wait_for_file exists, when one is named)."""
    path = folder / name
    wait = f"while [ ! -e '{wait_for_file}' ]; do sleep 0.02; done\n" if wait_for_file else ""
    path.write_text(f"#!/bin/sh\n{wait}printf '%s\\n' '{stderr}' >&2\n"
                    f"printf '%s\\n' '{stdout}'\n")
    path.chmod(0o755)
    return str(path)


def test_health_reads_a_version_from_stdout_and_never_shows_stderr(tmp_path, tb):
    """Codex 0.169.0 warns on stderr when its home is in a temporary folder: health shows
    its version, not the warning and the path in it; a --version that prints no version
    is reported as unknown (null)."""
    warning = ("WARNING: proceeding, even though we could not create PATH aliases: "
               "/tmp/secret-home/.codex/tmp (codex_home: /tmp/secret-home/.codex)")
    go = tmp_path / "go"
    environ = {"TASKBOARD_CODEX_COMMAND": cli_script(tmp_path, "codex", "codex-cli 0.169.0",
                                                     warning, wait_for_file=go),
               "TASKBOARD_GEMINI_COMMAND": cli_script(tmp_path, "gemini", "Loading...")}
    config = taskboard.parse_args(["--db", tb.config["db_path"]], environ=environ)
    taskboard.shutdown()
    taskboard.init(config)
    client = webtest.TestApp(taskboard.app, extra_environ={"REMOTE_ADDR": "127.0.0.1"})
    first = client.get("/api/health").json["agents"]["codex"]
    assert first["checking"] is True and first["version"] is None  # not checked yet
    go.touch()

    def checked():
        agents = client.get("/api/health").json["agents"]
        return agents if not any(a["checking"] for a in agents.values()) else None
    agents = wait_for(checked, RUN, message="every CLI checked")
    assert agents["codex"]["version"] == "codex-cli 0.169.0"
    assert (agents["gemini"]["found"], agents["gemini"]["version"]) == (True, None)
    assert "secret-home" not in client.get("/api/health").text


def test_parse_args_builds_every_agents_argv():
    config = taskboard.parse_args(["--agent-command", "my-claude --x"],
                                  environ={"TASKBOARD_CODEX_COMMAND": "npx codex"})
    assert config["agents"] == {"claude": ["my-claude", "--x"], "codex": ["npx", "codex"],
                                "gemini": ["gemini"], "opencode": ["opencode"]}


def test_agent_models_setting_picks_the_model_of_a_tier(client, api, agent_dir):
    models = {"codex": {"model_medium": "o4-mini"}, "gemini": {"model_medium": None}}
    settings = client.put_json("/api/settings", {"agentModels": models}).json
    assert settings["agentModels"] == models
    assert client.get("/api/settings").json["agentModels"] == models
    project = api.project(maxConcurrent=2)
    codex = start(api, project, "fake:ok", agent="codex")
    gemini = start(api, project, "fake:ok", agent="gemini")
    for tid in (codex, gemini):
        wait_status(client, tid, "testing")
    argv = task_calls(agent_dir, codex)[0]["argv"]
    assert argv[argv.index("-m") + 1] == "o4-mini"
    assert "-m" not in task_calls(agent_dir, gemini)[0]["argv"], "null: the CLI's default"


@pytest.mark.parametrize("value", [{"cursor": {}}, {"codex": {"model_huge": "x"}},
                                   {"codex": {"model_small": "two words"}}, ["codex"]])
def test_agent_models_setting_refuses_unknown_agents_tiers_and_odd_names(client, snapshot,
                                                                         value):
    from conftest import assert_refused
    assert_refused(snapshot, client.put_json, "/api/settings", {"agentModels": value},
                   field="agentModels")


def test_agent_usage_sums_each_agent_and_marks_estimates(client, api, agent_dir):
    project = api.project()
    claude = start(api, project, "fake:ok")
    codex = start(api, api.project(agent="codex"), "fake:replay=codex-success")
    for tid in (claude, codex):
        wait_status(client, tid, "testing")
    body = client.get("/api/stats/agent-usage").json
    assert body["agents"]["claude"]["costEstimated"] is False
    assert body["agents"]["claude"]["cost"] == pytest.approx(0.03765)
    assert body["agents"]["codex"] == {
        "tasks": 1, "inputTokens": 1000, "outputTokens": 120, "costEstimated": True,
        "cost": pytest.approx(SUCCESS["codex"][5])}
    assert body["agents"]["gemini"]["tasks"] == 0
    assert body["usage"]["costEstimated"] is True, "part of the total is an estimate"


#: How each CLI is told to only read (the planner and the verifier).
READ_ONLY = {"codex": ("-s", "read-only"), "gemini": ("--approval-mode", "plan"),
             "opencode": ("--agent", "plan")}


def read_only(argv, agent):
    flag, value = READ_ONLY[agent]
    return flag in argv and argv[argv.index(flag) + 1] == value


@pytest.mark.parametrize("agent", FOREIGN)
def test_the_verifier_runs_the_tasks_agent_read_only(client, api, agent_dir, agent):
    project = api.project(agent=agent, autoTest=True, permissionMode="auto-accept")
    tid = start(api, project, "fake:verdict=approve")
    wait_status(client, tid, "done")
    first, verifier = task_calls(agent_dir, tid)
    assert (first["as"], verifier["as"]) == (agent, agent)
    assert read_only(verifier["argv"], agent) and not read_only(first["argv"], agent)
    assert verifier["stdin"].startswith("You are reviewing the work")
    entries = logs(client, tid)
    assert entry(entries, "system", f"the verifier checks the work (autoTest; {agent}")


@pytest.mark.parametrize("agent", FOREIGN)
def test_the_planner_runs_any_agent_read_only(client, api, agent_dir, agent):
    project = api.project()  # Claude's; the plan asks for another agent
    body = {"topic": "Add a cart", "agent": agent}
    client.post_json(f"/api/projects/{project['id']}/plan", body, status=200)

    def over():
        state = client.get(f"/api/projects/{project['id']}/plan/status").json
        return state["last"] if not state["active"] else None
    last = wait_for(over, RUN, message="the plan to end")
    assert last["status"] == "completed", last
    assert len(last["tasks"]) >= 2
    [call] = read_calls(agent_dir)
    assert call["as"] == agent and read_only(call["argv"], agent)


def test_an_unknown_plan_agent_is_refused(client, api):
    project = api.project()
    resp = client.post_json(f"/api/projects/{project['id']}/plan",
                            {"topic": "x", "agent": "cursor"}, expect_errors=True)
    assert_error(resp, 400, "validation_error", "agent")
    assert "claude, codex, gemini, opencode" in resp.json["error"]


def test_a_task_moved_to_another_agent_starts_it_fresh_not_resuming(client, api, agent_dir):
    tid = start(api, api.project(), "fake:ok")
    first = wait_status(client, tid, "testing")
    assert first["session_id"]
    client.put_json(f"/api/tasks/{tid}", {"agent": "codex"})
    desk(client, "request_changes", {"id": tid, "feedback": "Also add a test."})
    wait_status(client, tid, "testing")
    claude, codex = task_calls(agent_dir, tid)
    assert codex["as"] == "codex" and "resume" not in codex["argv"]
    assert "Also add a test." in codex["stdin"], "a fresh session gets the whole story"
    assert first["title"] in codex["stdin"]


def replayed_result(agent, stream, exit_code=1):
    """The result event the adapter makes of a recorded stream (its lines, then the exit)."""
    adapter = taskboard.ADAPTERS[agent]("m")
    path = f"{FAKE_AGENT.rsplit('/', 1)[0]}/fixtures/agent-streams/{stream}.jsonl"
    events = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            events += adapter.translate(taskboard.json.loads(line)) or []
    events += adapter.finish(exit_code)
    [result] = [e for e in events if e["type"] == "result"]
    return result


#: A usage or rate limit, as each CLI printed it (codex-gemini-NOTES.md, opencode-NOTES.md):
#: the reset or retry time must reach the result for the board to read it.
@pytest.mark.parametrize("agent, stream, when", [
    ("codex", "codex-usage-limit", "try again at 8:20 AM."),
    ("codex", "codex-rate-limit", "last status: 429 Too Many Requests"),
    ("gemini", "gemini-quota-retry", "Suggested retry after 600s."),
    ("gemini", "gemini-quota", "exhausted your daily quota"),
    ("opencode", "opencode-rate-limit", "retry-after: 2, at 1795670242555"),
])
def test_limit_text_and_status_429_reach_the_result(agent, stream, when):
    result = replayed_result(agent, stream)
    assert result["is_error"] and result["api_error_status"] == 429
    assert when in result["result"] and any(when in e for e in result["errors"])


def test_unknown_lines_stay_raw():
    for agent in FOREIGN:
        adapter = taskboard.ADAPTERS[agent]("m")
        assert adapter.translate({"type": "mystery_event"}) in (None, [taskboard.RAW_LINE])


def test_the_agent_models_setting_has_a_valid_schema(client):
    schema = client.get("/api/openapi.json").json["components"]["schemas"]["Settings"]
    field = schema["properties"]["agentModels"]
    assert field["type"] == ["object", "null"]
    assert field["additionalProperties"]["additionalProperties"]["type"] == ["string", "null"]


@pytest.mark.parametrize("agent", FOREIGN)
def test_a_crash_mid_stream_goes_by_the_retry_rules(client, api, agent_dir, agent):
    tid = start(api, api.project(agent=agent, maxRetries=1), "fake:crash")
    task = wait_status(client, tid, "failed")
    assert task["retry_count"] == 1
    assert "exited with code 1 without a result" in task["last_error"]
    assert len(task_calls(agent_dir, tid)) == 2
    assert any(e["kind"] == "raw" for e in logs(client, tid)), "the cut line is kept raw"


@pytest.mark.parametrize("agent", FOREIGN)
def test_a_message_to_a_one_way_agent_resumes_it_when_its_run_ends(client, api, agent_dir,
                                                                   agent):
    """No channel to a running Codex, Gemini or OpenCode: a message waits for the run's
    end, then resumes the session with it (as a request for changes)."""
    gate = agent_dir / "gate"
    tid = start(api, api.project(agent=agent, permissionMode="auto-accept"),
                f"fake:replay={SUCCESS[agent][0]} fake:wait={gate}")
    wait_for(lambda: task_calls(agent_dir, tid), RUN, message="the run to start")
    sent = client.post_json(f"/api/tasks/{tid}/messages", {"text": "Use tabs."}).json
    assert sent["state"] == "queued"
    gate.write_text("go")
    wait_for(lambda: len(task_calls(agent_dir, tid)) == 2, RUN, message="the resumed run")
    wait_status(client, tid, "testing")
    assert task_calls(agent_dir, tid)[1]["stdin"] == "Use tabs."
    assert [m["state"] for m in client.get(f"/api/tasks/{tid}/messages").json] == ["sent"]


@pytest.mark.parametrize("agent", FOREIGN)
def test_an_interrupt_to_a_one_way_agent_is_refused_and_stores_nothing(client, api, agent_dir,
                                                                         snapshot, agent):
    """Design §14: no channel, no interrupt. The board says so (409 naming the agent)
    instead of storing a message that claims `interrupt: true` while the run goes on."""
    gate = agent_dir / "gate"
    tid = start(api, api.project(agent=agent, permissionMode="auto-accept"),
                f"fake:replay={SUCCESS[agent][0]} fake:wait={gate}")
    wait_for(lambda: task_calls(agent_dir, tid), RUN, message="the run to start")
    error = assert_refused(snapshot, client.post_json, f"/api/tasks/{tid}/messages",
                           {"text": "Stop and use tabs.", "interrupt": True}, "interrupt",
                           status=409, code="conflict")
    assert agent in error["error"] and "without interrupt" in error["error"]
    sent = client.post_json(f"/api/tasks/{tid}/messages", {"text": "Use tabs."}).json
    assert (sent["interrupt"], sent["state"]) == (False, "queued")
    gate.write_text("go")
    wait_status(client, tid, "testing")


def test_agents_lists_each_cli_with_what_uses_it(client, api, anonymous):
    project = api.project(agent="gemini")
    api.project()
    api.task(project["id"], agent="codex")
    done = api.task(project["id"], agent="opencode")
    api.move(done["id"], "done")
    agents = {a["name"]: a for a in client.get("/api/agents").json}
    assert list(agents) == list(taskboard.AGENTS)
    assert {n: (a["projects"], a["openTasks"]) for n, a in agents.items()} == {
        "claude": (1, 0), "gemini": (1, 0), "codex": (0, 1), "opencode": (0, 0)}
    assert agents["codex"]["package"] == "@openai/codex" and not agents["codex"]["twoWay"]
    assert agents["claude"]["twoWay"] and agents["claude"]["waitingUntil"] is None
    assert anonymous.get("/api/agents", status=401).json["code"]


@pytest.mark.parametrize("text, status", [
    ("stub: HTTP 429", 429), ('API Error: 500 {"type":"error"}', 500),
    ("Reconnecting... 5/5 (exceeded retry limit, last status: 429 Too Many Requests)", 429),
    ("API Error: Request rejected (429) · This request would exceed your rate limit", 429),
    ('{"error": {"code": 401, "message": "bad key"}}', 401), ("503 Service Unavailable", 503),
    ("You have exhausted your daily quota on this model.", 429),
    ("the prompt exceeded 500 tokens", None), ("wrote 404 files", None),
])
def test_http_status_is_read_only_where_the_text_says_one(text, status):
    assert taskboard._http_status(text) == status


#: A board tools' call as each CLI printed it (the real CLIs against their stand-ins):
#: the call's name in the log, what the tool answered, and whether it failed.
@pytest.mark.parametrize("stream, call, answer, failed", [
    ("codex-mcp-call", "mcp__taskboard__create_task", "created task 7", False),
    ("codex-mcp-error", "mcp__taskboard__create_task", "no board: task not created", True),
    ("codex-mcp-not-approved", "mcp__taskboard__create_task",
     "MCP tool call requires approval", True),
    ("opencode-mcp-call", "taskboard_create_task", "created task 7", False),
    ("opencode-mcp-error", "taskboard_create_task", "could not create task", True),
])
def test_board_tool_calls_of_codex_and_opencode_are_logged(stream, call, answer, failed):
    agent = stream.split("-", 1)[0]
    parser = taskboard.StreamParser(taskboard.ADAPTERS[agent]("m"))
    path = f"{FAKE_AGENT.rsplit('/', 1)[0]}/fixtures/agent-streams/{stream}.jsonl"
    with open(path, encoding="utf-8") as f:
        entries = [e for line in f for e in parser.feed(line.rstrip("\n"))]
    [called] = [e for e in entries if e["kind"] == "tool_call"]
    assert called["message"].startswith(call)
    [result] = [e for e in entries if e["kind"] == "tool_result"]
    assert answer in result["message"] and bool(result.get("is_error")) is failed
