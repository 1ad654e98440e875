"""The real Claude Code 2.1.197 runs on another machine (design.md §15): the board reaches a
loopback sshd, the CLI runs there against the Messages API stand-in of claude_stub.py, its
two-way channel works through the connection and its board tools are /mcp through the
connection's remote forward.  Skips with npm's or sshd's reason when either is missing."""
import json
import os
import shlex

import pytest
from ssh_helpers import SshServer, trusted_host

import taskboard
from agent_helpers import get_task, query, wait_status
from claude_stub import claude_env
from conftest import make_repo, wait_for

pytestmark = pytest.mark.sshd

RUN = 60  # the real CLI starts in about a second; a turn takes a few


def test_real_claude_runs_on_a_host_asks_there_and_reaches_the_board_tools(
        real_claude, claude_api, tmp_path, client, api, live):
    taskboard.runtime.url = live.url  # before the connection opens: its forward goes there
    server = SshServer(tmp_path)
    try:
        home = tmp_path / "claude-home"
        home.mkdir()
        # the host's login environment is not the test's: the CLI's is given on its command
        env = claude_env(claude_api, home, PATH=os.environ["PATH"])
        command = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()
                                       if k.startswith(("ANTHROPIC_", "DISABLE_", "CLAUDE_",
                                                        "XDG_", "HOME", "PATH"))),
                              real_claude])
        host = trusted_host(client, server, tmp_path, agentCommands={"claude": command})
        assert host["lastCheck"]["agents"]["claude"]["version"].startswith("2.1.197")
        make_repo(api.workdir)
        project = api.project(host=host["id"], repoUrl=str(api.workdir))
        task = api.task(project["id"], title="Say hello",
                        description="MODE:bash echo hello > hello.txt && cat hello.txt")
        api.move(task["id"], "in_progress")
        approval = wait_for(lambda: [a for a in client.get(
            f"/api/tasks/{task['id']}/approvals").json if a["status"] == "pending"], RUN,
            message="the agent's request")[0]
        assert approval["toolName"] == "Bash"
        client.post_json(f"/api/approvals/{approval['id']}", {"decision": "allow"})
        done = wait_status(client, task["id"], "testing", timeout=RUN)
        worktree = tmp_path / "host" / "worktrees" / str(project["id"]) / done["task_key"]
        assert (worktree / "hello.txt").read_text() == "hello\n"
        assert get_task(client, task["id"])["total_cost"] > 0
        [(raw,)] = query("SELECT raw FROM task_events WHERE task_id = ? AND kind = 'system' "
                         "AND raw LIKE '%\"init\"%' ORDER BY id LIMIT 1", (task["id"],))
        init = json.loads(raw)
        assert os.path.realpath(init["cwd"]) == os.path.realpath(worktree)
        assert {"name": "taskboard", "status": "connected"} in init["mcp_servers"], \
            init["mcp_servers"]
    finally:
        server.stop()
