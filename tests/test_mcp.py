"""Board tools for agents: the stdio MCP server and the per-run token (design §6)."""
import json
import os
import subprocess
import sys

import pytest
import requests

import taskboard
from agent_helpers import RUN, wait_status
from conftest import wait_for


class Mcp:
    """The board tools' server as a run's config names it (`python taskboard.py --mcp --url
    ... --config ...`), spoken to over stdio, one JSON-RPC per line.  Its token comes from
    the config file, not the environment (Codex hands MCP servers a filtered one)."""

    def __init__(self, server):
        self.proc = subprocess.Popen([server["command"], *server["args"]],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=os.environ.copy())
        self.next_id = 0

    def request(self, method, params=None):
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id,
                                          "method": method, "params": params or {}}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        assert answer["id"] == self.next_id
        return answer

    def tool(self, name, **arguments):
        result = self.request("tools/call", {"name": name, "arguments": arguments})["result"]
        return json.loads(result["content"][0]["text"]), result["isError"]

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=10) == 0


@pytest.fixture
def running(api, fake_agent_dir, live):
    """A task whose fake agent hangs, and the board-tools config its run was given."""
    taskboard.runtime.url = live.url
    project = api.project()
    task = api.task(project["id"], title="Parent", description="fake:hang")
    api.move(task["id"], "in_progress")
    calls = fake_agent_dir / "calls.jsonl"
    wait_for(lambda: calls.exists() and calls.read_text().strip(), RUN, message="the agent")
    call = json.loads(calls.read_text().splitlines()[0])
    argv = call["argv"]
    # Claude Code's first turn goes without a server not yet up: it is told to wait, longer
    assert (call["env"]["MCP_CONNECTION_NONBLOCKING"], call["env"]["MCP_CONNECT_TIMEOUT_MS"]) \
        == ("0", "30000")
    path = argv[argv.index("--mcp-config") + 1]
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    with open(path) as f:
        server = json.load(f)["mcpServers"]["taskboard"]
    assert server["command"] == sys.executable and "--mcp" in server["args"]
    return project, task, server, path


@pytest.mark.parametrize("no_auth", [False, True])
def test_mcp_lists_creates_sub_tasks_and_refuses_to_move_its_own_task(running, client, tb,
                                                                      no_auth):
    project, task, server, _ = running
    if no_auth:  # the run token works on a --no-auth board too
        tb.config.update(no_auth=True, token=None)
    assert "TASKBOARD_MCP_TOKEN" not in os.environ
    mcp = Mcp(server)
    try:
        init = mcp.request("initialize", {"protocolVersion": "2025-06-18"})["result"]
        assert init["serverInfo"]["name"] == "taskboard"
        names = {t["name"] for t in mcp.request("tools/list")["result"]["tools"]}
        assert names == {"list_tasks", "create_task", "update_task", "change_task_status",
                         "get_task_detail"}
        assert tuple(taskboard.RUN_TOOLS) == taskboard.RUN_TOOL_NAMES  # as its prompt names them
        listed, failed = mcp.tool("list_tasks")
        assert not failed and [t["id"] for t in listed] == [task["id"]]
        child, failed = mcp.tool("create_task", title="Write the tests")
        assert not failed and child["parent_task_id"] == task["id"]
        assert taskboard.get_task(task["id"])["awaiting_subtasks"] is True
        _, failed = mcp.tool("change_task_status", id=task["id"], status="done")
        assert failed and taskboard.get_task(task["id"])["status"] == "in_progress"
        moved, failed = mcp.tool("change_task_status", id=child["id"], status="testing")
        assert not failed and moved["status"] == "testing"
        detail, failed = mcp.tool("get_task_detail", id=child["id"])
        assert not failed and detail["task_key"] == child["task_key"]
    finally:
        mcp.close()


def test_run_token_reaches_only_its_project_and_dies_with_the_run(running, api, live, tb):
    project, task, server, config_file = running
    token = server["env"]["TASKBOARD_MCP_TOKEN"]
    auth = {"Authorization": f"Bearer {token}"}
    other = taskboard.create_project({"name": "Other", "slug": "other",
                                      "workingDir": project["workingDir"]})
    assert requests.get(f"{live.url}/api/projects/{project['id']}/tasks", headers=auth,
                        timeout=5).status_code == 200
    for method, path in [("GET", f"/api/projects/{other['id']}/tasks"),
                         ("GET", "/api/projects"), ("GET", "/api/settings"),
                         ("PATCH", f"/api/tasks/{task['id']}/status")]:
        response = requests.request(method, live.url + path, headers=auth, timeout=5,
                                    json={"status": "done"} if method == "PATCH" else None)
        assert response.status_code == 403, (method, path)
    taskboard.move_task(task["id"], "backlog")  # the run ends: its token and file go
    assert requests.get(f"{live.url}/api/projects/{project['id']}/tasks", headers=auth,
                        timeout=5).status_code == 401
    assert not os.path.exists(config_file)


def test_run_token_changes_only_what_its_run_created(running, api, live):
    """Design §11: a run's token edits and moves the tasks its run created and those below
    them; never a person's task, never to done, never below a person's task."""
    project, task, server, _ = running
    auth = {"Authorization": f"Bearer {server['env']['TASKBOARD_MCP_TOKEN']}"}

    def call(method, path, body, status):
        response = requests.request(method, live.url + path, headers=auth, json=body,
                                    timeout=5)
        assert response.status_code == status, (method, path, body, response.text)
        return response.json()
    persons = api.task(project["id"], title="A person's task")
    child = call("POST", f"/api/projects/{project['id']}/tasks",
                 {"title": "Agent's", "parent_task_id": task["id"]}, 201)
    below = api.task(project["id"], title="Below it", parent_task_id=child["id"])
    call("PUT", f"/api/tasks/{child['id']}", {"title": "Agent's, renamed"}, 200)
    call("PUT", f"/api/tasks/{below['id']}", {"priority": 3}, 200)
    call("PATCH", f"/api/tasks/{child['id']}/status", {"status": "testing"}, 200)
    for method, path, body in [
            ("PATCH", f"/api/tasks/{child['id']}/status", {"status": "done"}),
            ("PUT", f"/api/tasks/{child['id']}", {"status": "done"}),
            ("PUT", f"/api/tasks/{persons['id']}", {"title": "Mine now"}),
            ("PATCH", f"/api/tasks/{persons['id']}/status", {"status": "in_progress"}),
            ("PUT", f"/api/tasks/{task['id']}", {"title": "My own"}),
            ("POST", f"/api/projects/{project['id']}/tasks",
             {"title": "Hidden under", "parent_task_id": persons["id"]}),
            ("POST", f"/api/projects/{project['id']}/tasks",
             {"title": "Shipped", "status": "done"})]:
        assert "error" in call(method, path, body, 403)
    assert api.client.get(f"/api/tasks/{persons['id']}").json["title"] == "A person's task"
    assert api.client.get(f"/api/tasks/{child['id']}").json["status"] == "testing"


def test_a_run_token_creates_tasks_only_inside_its_own_subtree(running, api, live):
    """Issue 32: with no parent_task_id (or null) a run token made a top-level task, and
    with status in_progress started an agent outside its run's subtree. A missing or null
    parent now means the run's own task."""
    project, task, server, _ = running
    auth = {"Authorization": f"Bearer {server['env']['TASKBOARD_MCP_TOKEN']}"}
    api.client.put_json(f"/api/projects/{project['id']}", {"maxConcurrent": 4})
    url = f"{live.url}/api/projects/{project['id']}/tasks"
    for body in ({"title": "No parent"}, {"title": "Null parent", "parent_task_id": None},
                 {"title": "Started", "parent_task_id": None, "status": "in_progress"}):
        response = requests.post(url, json=body, headers=auth, timeout=5)
        assert response.status_code == 201, response.text
        assert response.json()["parent_task_id"] == task["id"], body
    tasks = api.client.get(f"/api/projects/{project['id']}/tasks").json
    assert [t["title"] for t in tasks if t["parent_task_id"] is None] == ["Parent"]


@pytest.mark.parametrize("params", [
    {"name": {"a": 1}, "arguments": {}}, {"name": ["list_tasks"], "arguments": {}},
    {"name": 7}, {"name": "list_tasks", "arguments": ["a"]},
    {"name": "list_tasks", "arguments": "everything"}])
def test_a_malformed_tool_call_is_a_json_rpc_error_never_a_500(client, params):
    """Security probe v4 (issue 43): a name that is an object or a list, or arguments that
    are a list or a string, made POST /mcp answer 500 (unhashable, no attribute 'get')."""
    answer = client.post_json("/mcp", {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                       "params": params}, status=200).json
    assert answer["id"] == 4 and answer["error"]["code"] == -32602, answer
    assert "name" in answer["error"]["message"] and "Traceback" not in str(answer)


def test_a_run_whose_board_tools_did_not_connect_says_so(api, client, fake_agent_dir):
    """The CLI went on without the tools (its init line: "pending", after its wait): the
    task's log says what the run cannot do, as an error."""
    project = api.project()
    task = api.task(project["id"], description="fake:ok fake:mcp=pending")
    api.move(task["id"], "in_progress")
    wait_status(client, task["id"], "testing")
    [entry] = [e for e in client.get(f"/api/tasks/{task['id']}/logs").json
               if "board tools" in e["message"]]
    assert entry["isError"] and "(pending)" in entry["message"], entry
