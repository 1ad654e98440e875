"""Outside clients (design §19): personal tokens, the board's work over MCP for any client,
and schedules that start work on a clock."""

import datetime as dt
import json
import os
import subprocess
import sys

import bottle
import pytest
import websocket
import webtest

import taskboard
from agent_helpers import RUN, get_task, logs, read_calls, wait_status
from conftest import ROOT, assert_error, assert_refused, bearer, sql, wait_for


def token(client, name="script", scopes=("read",), **fields):
    answer = client.post_json("/api/tokens", {"name": name, "scopes": list(scopes), **fields},
                              status=201).json
    return answer


def as_token(secret):
    return {"Authorization": f"Bearer {secret}"}


def mcp(client, method, params=None, secret=None, status=200, **headers):
    """One JSON-RPC request to POST /mcp with a token (default: the board's)."""
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return client.post_json("/mcp", message, headers={
        **(as_token(secret) if secret else bearer()), **headers}, status=status).json


def call_tool(client, name, arguments, secret=None):
    result = mcp(client, "tools/call", {"name": name, "arguments": arguments}, secret)["result"]
    return json.loads(result["content"][0]["text"]), result["isError"]


# --- personal tokens ----------------------------------------------------------------------------

def test_a_token_shows_its_secret_once_keeps_a_hash_and_records_its_use(client, tb):
    made = token(client, "nightly script", ["read", "write"])
    secret = made.pop("secret")
    assert secret.startswith("tbp_") and len(secret) > 40
    assert made["name"] == "nightly script" and made["scopes"] == ["read", "write"]
    assert made["lastUsedAt"] is None and made["expiresAt"] is None
    [listed] = client.get("/api/tokens").json
    assert "secret" not in listed and listed["id"] == made["id"]
    stored = sql(tb, "SELECT * FROM tokens")
    assert secret not in json.dumps(stored)
    client.get("/api/projects", headers=as_token(secret), status=200)
    assert client.get("/api/tokens").json[0]["lastUsedAt"] is not None
    client.delete(f"/api/tokens/{made['id']}")
    assert_error(client.get("/api/projects", headers=as_token(secret), expect_errors=True), 401)


def test_each_scope_reaches_only_its_own_and_the_owners_things_stay_the_owners(
        client, api, tb, tmp_path):
    project = api.project()
    task = api.task(project["id"])
    read = token(client, "reader", ["read"])["secret"]
    write = token(client, "writer", ["read", "write"])["secret"]
    everything = token(client, "all", ["read", "write", "approve"])["secret"]
    client.get(f"/api/projects/{project['id']}/tasks", headers=as_token(read), status=200)
    assert_error(client.post_json(f"/api/projects/{project['id']}/tasks", {"title": "x"},
                                  headers=as_token(read), expect_errors=True), 403)
    client.post_json(f"/api/projects/{project['id']}/tasks", {"title": "x"},
                     headers=as_token(write), status=201)
    client.put_json(f"/api/tasks/{task['id']}", {"title": "renamed"}, headers=as_token(write))
    for method, path in (("GET", "/api/settings"), ("GET", "/api/hosts"), ("GET", "/api/tokens"),
                         ("POST", "/api/tokens"), ("GET", "/api/push/subscriptions"),
                         ("GET", f"/api/projects/{project['id']}/webhooks"),
                         ("POST", "/api/desktop/stop_task"), ("PUT", "/api/settings"),
                         ("DELETE", f"/api/projects/{project['id']}"),
                         ("POST", "/api/projects")):
        response = client.request(path, method=method, headers=as_token(everything),
                                  body=b"{}", content_type="application/json",
                                  expect_errors=True)
        assert_error(response, 403)
    assert client.get(f"/api/projects/{project['id']}", headers=bearer()).status_int == 200


def test_a_route_that_does_not_say_who_may_call_it_is_refused_when_declared():
    """Each route declares its scope: a new GET is not readable by every token by default."""
    app = bottle.Bottle()
    vars(app)["router"] = taskboard.Router()
    with pytest.raises(ValueError, match="must say who may call it"):
        app.route("/api/new-thing", "GET", lambda: {"secret": True})
    with pytest.raises(ValueError, match="must say who may call it"):
        app.route("/api/new-thing", "GET", lambda: {}, scope="admin")
    app.route("/api/new-thing", "GET", lambda: {}, scope="owner")
    assert all(route.config["scope"] in taskboard.SCOPES for route in taskboard.app.routes)


def test_a_wrong_expired_or_deleted_token_is_401_and_counted(client, tb):
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).isoformat()
    brief = token(client, "brief", expiresAt=soon)
    client.get("/api/projects", headers=as_token(brief["secret"]), status=200)
    wait_for(lambda: client.get("/api/projects", headers=as_token(brief["secret"]),
                                expect_errors=True).status_int == 401, 5,
             message="the token to expire")
    statuses = [client.get("/api/projects", headers=as_token("tbp_" + "x" * 43),
                           expect_errors=True).status_int for _ in range(30)]
    assert statuses[0] == 401 and 429 in statuses, statuses


@pytest.mark.parametrize("body,field", [
    ({"name": "x", "scopes": ["admin"]}, "scopes"), ({"name": "x", "scopes": []}, "scopes"),
    ({"name": "x", "scopes": "read"}, "scopes"), ({"name": "x", "scopes": ["read", "read"]},
                                                   "scopes"),
    ({"name": "", "scopes": ["read"]}, "name"), ({"name": "Şirket", "scopes": ["read"]}, "name"),
    ({"name": "a/b", "scopes": ["read"]}, "name"), ({"scopes": ["read"]}, "name"),
    ({"name": "x", "scopes": ["read"], "expiresAt": "2020-01-01T00:00:00Z"}, "expiresAt"),
    ({"name": "x", "scopes": ["read"], "expiresAt": "tomorrow"}, "expiresAt"),
    ({"name": "x", "scopes": ["read"], "expiresAt": "2099-01-01T00:00:00"}, "expiresAt"),
    ({"name": "x", "scopes": ["read"], "expiresAt": "9999-12-31T23:59:59-14:00"}, "expiresAt"),
    ({"name": "x", "scopes": ["read"], "secret": "mine"}, "secret")])
def test_a_bad_token_is_refused_naming_the_field(client, snapshot, body, field):
    assert_refused(snapshot, client.post_json, "/api/tokens", body, field)


def test_a_token_name_is_unique(client, snapshot):
    token(client, "twice")
    assert_refused(snapshot, client.post_json, "/api/tokens", {"name": "twice",
                   "scopes": ["read"]}, "name", status=409, code="conflict")


def test_an_approval_answered_with_a_token_says_which(client, api, agent_dir):
    project = api.project()
    task = api.task(project["id"], description="fake:ask")
    api.move(task["id"], "in_progress")
    approver = token(client, "phone", ["approve"])["secret"]
    [pending] = wait_for(lambda: client.get("/api/approvals?status=pending").json, RUN,
                         message="the agent's request")
    answered = client.post_json(f"/api/approvals/{pending['id']}", {"decision": "allow"},
                                headers=as_token(approver)).json
    assert answered["decidedBy"] == "token:phone"
    wait_status(client, task["id"], "testing")
    assert any("allowed by token:phone" in e["message"] for e in logs(client, task["id"]))


# --- MCP for any client ---------------------------------------------------------------------------

def test_the_tools_a_token_is_offered_follow_its_scopes(client, api):
    every = {t["name"] for t in mcp(client, "tools/list")["result"]["tools"]}
    assert every == set(taskboard.CLIENT_TOOLS)
    reader = token(client, "reader", ["read"])["secret"]
    offered = {t["name"] for t in mcp(client, "tools/list", secret=reader)["result"]["tools"]}
    assert offered == {"list_projects", "list_tasks", "get_task", "list_requests"}
    answer = mcp(client, "tools/call", {"name": "create_task", "arguments": {
        "project_id": api.project()["id"], "title": "sneaky"}}, reader)
    assert answer["error"]["code"] == -32601
    for tool in mcp(client, "tools/list")["result"]["tools"]:
        assert len(tool["description"]) > 60 and tool["inputSchema"]["type"] == "object"


def test_a_client_lists_creates_starts_and_reads_tasks_over_mcp(client, api, agent_dir):
    project = api.project()
    writer = token(client, "script", ["read", "write"])["secret"]
    projects, failed = call_tool(client, "list_projects", {}, writer)
    assert not failed and [p["id"] for p in projects] == [project["id"]]
    made, failed = call_tool(client, "create_task", {
        "project_id": project["id"], "title": "From a script", "description": "fake:ok",
        "status": "in_progress"}, writer)
    assert not failed and made["status"] == "in_progress"
    wait_status(client, made["id"], "testing")
    listed, _ = call_tool(client, "list_tasks", {"project_id": project["id"],
                                                 "status": "testing"}, writer)
    assert [t["id"] for t in listed] == [made["id"]]
    task, _ = call_tool(client, "get_task", {"task_id": made["id"]}, writer)
    assert task["title"] == "From a script" and task["logs"] and task["requests"] == []
    moved, _ = call_tool(client, "move_task", {"task_id": made["id"], "status": "done"}, writer)
    assert moved["status"] == "done"
    error, failed = call_tool(client, "get_task", {"task_id": 999}, writer)
    assert failed and "not found" in error["error"]


def test_mcp_speaks_streamable_http_and_refuses_what_is_not_json_rpc(client):
    assert mcp(client, "initialize", {"protocolVersion": "2025-06-18"})["result"][
        "protocolVersion"] == "2025-06-18"
    assert mcp(client, "initialize", {"protocolVersion": "1999-01-01"})["result"][
        "protocolVersion"] == taskboard.MCP_VERSIONS[-1]
    assert_error(client.get("/mcp", headers=bearer(), expect_errors=True), 405)
    answer = mcp(client, "tools/list", status=400, **{"MCP-Protocol-Version": "1999-01-01"})
    assert answer["error"]["code"] == -32600 and "1999-01-01" in answer["error"]["message"]
    assert mcp(client, "tools/list", **{"MCP-Protocol-Version": "2025-06-18"})["result"]
    broken = client.post("/mcp", b"{not json", headers={**bearer(),
                         "Content-Type": "application/json"}, expect_errors=True)
    assert broken.status_int == 400 and broken.json["error"]["code"] == -32700
    answer = client.post_json("/mcp", [1, {"jsonrpc": "2.0"}], headers=bearer()).json
    assert [a["error"]["code"] for a in answer] == [-32600, -32600]
    assert mcp(client, "server/discover")["error"]["code"] == -32601
    # JSON-RPC 2.0 as written: an empty batch, another version, an object as id are invalid
    empty = client.post_json("/mcp", [], headers=bearer(), expect_errors=True)
    assert empty.status_int == 400 and empty.json["error"]["code"] == -32600
    answer = client.post_json("/mcp", [
        {"jsonrpc": "1.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": {"a": 1},
                                                        "method": "ping"},
        {"jsonrpc": "2.0", "id": True, "method": "ping"},
        {"jsonrpc": "2.0", "id": "x", "method": "ping"}], headers=bearer()).json
    assert [(a["id"], "error" in a) for a in answer] == [
        (None, True), (None, True), (None, True), ("x", False)], answer


def test_one_mcp_batch_cannot_stall_the_board(client, api, monkeypatch):
    """Probe v5: one 1 MiB batch of list_tasks calls answered 602 MB.  A batch holds at most
    MCP_MAX_BATCH messages, and calls past MCP_MAX_ANSWER_CHARS of answer are not made."""
    project = api.project()
    api.task(project["id"], title="A task " + "x" * 180, description="d" * 2000)
    call = {"jsonrpc": "2.0", "method": "tools/call", "params": {
        "name": "get_task", "arguments": {"task_id": 1}}}
    too_many = client.post_json("/mcp", [{**call, "id": n} for n in range(
        taskboard.MCP_MAX_BATCH + 1)], headers=bearer(), expect_errors=True)
    assert too_many.status_int == 400 and str(taskboard.MCP_MAX_BATCH) in too_many.json[
        "error"]["message"]
    one = len(taskboard.json_dumps(client.post_json("/mcp", {**call, "id": 0},
                                                     headers=bearer()).json))
    monkeypatch.setattr(taskboard, "MCP_MAX_ANSWER_CHARS", 2 * one + 1)
    answer = client.post_json("/mcp", [{**call, "id": n} for n in range(10)],
                              headers=bearer()).json
    assert ["result" in a for a in answer] == [True] * 3 + [False] * 7, answer
    assert "fewer calls" in answer[-1]["error"]["message"]


SDK_CLIENT = r"""
import asyncio, json, sys
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main(url, secret, calls):
    out = {"results": []}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            out["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
            for name, arguments in calls:
                if name == "wait_for_request":
                    for _ in range(300):
                        result = await client.call_tool("list_requests", {})
                        if json.loads(result.content[0].text):
                            break
                        await asyncio.sleep(0.05)
                    arguments = {**arguments, "id": json.loads(result.content[0].text)[0]["id"]}
                    name = "answer_request"
                result = await client.call_tool(name, arguments)
                out["results"].append([result.is_error, json.loads(result.content[0].text)])
    print(json.dumps(out))

asyncio.run(main(*json.loads(sys.argv[1])))
"""


def sdk(url, secret, calls):
    """The official MCP Python SDK's client, in a process of its own (no gevent there)."""
    done = subprocess.run([sys.executable, "-c", SDK_CLIENT, json.dumps([url, secret, calls])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_official_mcp_client_starts_a_task_and_answers_its_approval(client, api, live,
                                                                        agent_dir):
    project = api.project()
    secret = token(client, "claude code", ["read", "write", "approve"])["secret"]
    out = sdk(f"{live.url}/mcp", secret, [
        ["create_task", {"project_id": project["id"], "title": "Over MCP",
                         "description": "fake:ask", "status": "in_progress"}],
        ["wait_for_request", {"decision": "allow"}]])
    assert out["tools"] == sorted(taskboard.CLIENT_TOOLS)
    (failed, made), (refused, answered) = out["results"]
    assert not failed and not refused, out
    assert answered["decidedBy"] == "token:claude code" and answered["status"] == "allowed"
    wait_status(client, made["id"], "testing")


def readme_stdio_config(url: str, secret: str) -> dict:
    """The README's stdio MCP config as written, with this checkout, board and token filled
    in (its command: the checkout's .venv, which the README's set-up makes; a checkout
    tested with another venv gets this one's interpreter)."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    block = text.split("<!-- mcp-stdio-config -->", 1)[1].split("```json\n", 1)[1]
    block = block.split("```", 1)[0].replace("/path/to/taskboard", ROOT).replace(
        "http://127.0.0.1:4000", url).replace("tbp_…", secret)
    server = json.loads(block)["mcpServers"]["taskboard"]
    if not os.path.exists(server["command"]):
        server["command"] = sys.executable
    return server


def stdio_client(server: dict, lines: list, **env) -> list[dict]:
    """What the stdio bridge answers `lines`, started as an MCP client would: its command,
    args and env alone (no shell, no venv activated)."""
    done = subprocess.run([server["command"], *server["args"]], input="".join(
        json.dumps(line) + "\n" for line in lines), capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", **server["env"], **env})
    return [json.loads(line) for line in done.stdout.splitlines()]


HANDSHAKE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}}


def test_a_stdio_client_reaches_the_board_through_the_readmes_config(client, api, live):
    """The README's Claude Desktop config, run as written (newcomer v6: it named `python3`,
    which has no gevent); a wrong port or token fails at the handshake, saying what to fix."""
    project = api.project()
    server = readme_stdio_config(live.url, token(client, "desktop", ["read"])["secret"])
    first, second = stdio_client(server, [
        HANDSHAKE, {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "list_projects", "arguments": {}}}])
    assert first["id"] == 1 and first["result"]["serverInfo"]["name"] == "taskboard"
    [listed] = json.loads(second["result"]["content"][0]["text"])
    assert listed["id"] == project["id"]
    [refused] = stdio_client(server, [HANDSHAKE], TASKBOARD_TOKEN="tbp_" + "x" * 43)
    assert "set it to the board's token" in refused["error"]["message"], refused
    [away] = stdio_client({**server, "args": [*server["args"][:-1], "http://127.0.0.1:9"]},
                          [HANDSHAKE])
    assert "is it running there?" in away["error"]["message"], away


# --- schedules -----------------------------------------------------------------------------------

def schedule(client, project_id, status=201, **fields):
    body = {"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Istanbul",
            "task": {"title": "Check for dependency updates", "description": "fake:ok"}}
    return client.post_json(f"/api/projects/{project_id}/schedules", {**body, **fields},
                            status=status).json


def due_now(tb, schedule_id):
    """Make a schedule due (its next fire a minute ago) and let the scheduler look."""
    past = taskboard.iso(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))
    sql(tb, "UPDATE schedules SET next_at = ? WHERE id = ?", (past, schedule_id))
    taskboard.runtime.schedules.wake()


def fired(client, schedule_id):
    return client.get(f"/api/schedules/{schedule_id}").json


def test_a_schedule_is_made_changed_and_deleted_with_its_next_fire(client, api):
    project = api.project()
    made = schedule(client, project["id"])
    at = dt.datetime.fromisoformat(made["nextAt"].replace("Z", "+00:00"))
    assert at.astimezone(dt.timezone(dt.timedelta(hours=3))).hour == 3
    assert at > dt.datetime.now(dt.UTC) and made["enabled"] is True and made["mode"] == "new"
    off = client.put_json(f"/api/schedules/{made['id']}", {"enabled": False}).json
    assert off["nextAt"] is None
    assert [s["id"] for s in client.get(f"/api/projects/{project['id']}/schedules").json] == [
        made["id"]]
    client.delete(f"/api/schedules/{made['id']}")
    assert_error(client.get(f"/api/schedules/{made['id']}", expect_errors=True), 404)
    again = schedule(client, project["id"])
    client.delete(f"/api/projects/{project['id']}")
    assert_error(client.get(f"/api/schedules/{again['id']}", expect_errors=True), 404)


@pytest.mark.parametrize("fields,field", [
    ({"cron": "0 3 * *"}, "cron"), ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "every night"}, "cron"), ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"task": {"description": "no title"}}, "task.title"), ({"task": "x"}, "task"),
    ({"task": {"title": "x", "type": "epic"}}, "task.type"),
    ({"task": {"title": "x", "priority": 9}}, "task.priority"),
    ({"task": {"title": "x", "color": "red"}}, "task.color"), ({"mode": "often"}, "mode"),
    ({"name": ""}, "name")])
def test_a_bad_schedule_is_refused_naming_the_field(client, api, snapshot, fields, field):
    project = api.project()
    body = {"name": "n", "cron": "0 3 * * *", "task": {"title": "t"}, **fields}
    assert_refused(snapshot, client.post_json, f"/api/projects/{project['id']}/schedules",
                   body, field)


def test_a_fire_makes_and_starts_a_task_then_skips_while_it_runs(client, api, tb, agent_dir):
    project = api.project()
    made = schedule(client, project["id"], task={"title": "Nightly", "description": "fake:hang",
                                                 "priority": 2})
    due_now(tb, made["id"])
    first = wait_for(lambda: fired(client, made["id"])["lastTaskId"], RUN,
                     message="the first fire")
    task = get_task(client, first)
    assert task["title"] == "Nightly" and task["priority"] == 2
    assert task["status"] == "in_progress"
    after = fired(client, made["id"])
    assert after["lastError"] is None and after["nextAt"] > after["lastAt"]
    wait_for(lambda: get_task(client, first)["is_running"], RUN, message="its agent")
    due_now(tb, made["id"])
    wait_for(lambda: fired(client, made["id"])["lastError"], RUN, message="the second fire")
    assert "still runs" in fired(client, made["id"])["lastError"]
    assert len(client.get(f"/api/projects/{project['id']}/tasks").json) == 1


def test_continue_resumes_the_last_task_with_its_text(client, api, tb, agent_dir):
    project = api.project()
    made = schedule(client, project["id"], task={"title": "Keep going",
                                                 "description": "fake:ok"})
    due_now(tb, made["id"])
    first = wait_for(lambda: fired(client, made["id"])["lastTaskId"], RUN, message="a fire")
    wait_status(client, first, "testing")
    client.put_json(f"/api/schedules/{made['id']}", {"mode": "continue", "task": {
        "title": "Keep going", "description": "And check again fake:ok"}})
    due_now(tb, made["id"])
    wait_for(lambda: len(read_calls(agent_dir)) == 2, RUN, message="the resumed agent")
    resumed = read_calls(agent_dir)[1]
    assert "--resume" in resumed["argv"] and "And check again" in resumed["stdin"]
    assert len(client.get(f"/api/projects/{project['id']}/tasks").json) == 1
    # probe v5: a continue fire past the daily budget is skipped, as a new one is
    wait_status(client, first, "testing")
    client.put_json("/api/settings", {"dailyCostLimit": 0.001})  # the fake spent more today
    due_now(tb, made["id"])
    assert "daily limit" in wait_for(lambda: fired(client, made["id"])["lastError"], RUN,
                                     message="the skipped fire")
    assert len(read_calls(agent_dir)) == 2


def test_fires_missed_while_the_board_was_down_fire_once(client, api, tb, agent_dir):
    project = api.project()
    made = schedule(client, project["id"], cron="*/5 * * * *")
    config = tb.config
    taskboard.shutdown()
    week_ago = taskboard.iso(dt.datetime.now(dt.UTC) - dt.timedelta(days=7))
    sql(tb, "UPDATE schedules SET next_at = ? WHERE id = ?", (week_ago, made["id"]))
    taskboard.init(config)
    wait_for(lambda: fired(client, made["id"])["lastTaskId"], RUN, message="the missed fire")
    assert len(client.get(f"/api/projects/{project['id']}/tasks").json) == 1
    assert fired(client, made["id"])["nextAt"] > taskboard.now_iso()


def test_the_clock_set_back_or_forward_never_fires_twice(client, api, tb, monkeypatch,
                                                          agent_dir):
    project = api.project()
    made = schedule(client, project["id"], cron="0 3 * * *", timezone="UTC",
                    task={"title": "Once", "description": "fake:ok"}, enabled=False)
    taskboard.runtime.schedules.stop()  # the test drives fire_schedules() by its clock
    now = [dt.datetime(2026, 12, 1, 2, 59, tzinfo=dt.UTC)]
    monkeypatch.setattr(taskboard, "utc_now", lambda: now[0])
    client.put_json(f"/api/schedules/{made['id']}", {"enabled": True})
    count = lambda: len(client.get(f"/api/projects/{project['id']}/tasks").json)  # noqa: E731
    now[0] = dt.datetime(2026, 12, 1, 3, 0, 30, tzinfo=dt.UTC)
    taskboard.fire_schedules()
    [first] = client.get(f"/api/projects/{project['id']}/tasks").json
    wait_status(client, first["id"], "testing")  # else the next fire is skipped: it runs
    now[0] = dt.datetime(2026, 12, 1, 2, 0, tzinfo=dt.UTC)  # set back an hour
    taskboard.fire_schedules()
    now[0] = dt.datetime(2026, 12, 1, 3, 0, 30, tzinfo=dt.UTC)
    taskboard.fire_schedules()
    assert count() == 1
    now[0] = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)  # set forward four days
    taskboard.fire_schedules()
    taskboard.fire_schedules()
    assert count() == 2
    assert fired(client, made["id"])["nextAt"] == "2026-12-06T03:00:00.000Z"


def test_daylight_saving_time_fires_a_skipped_or_repeated_time_once():
    def fires(cron, zone, start, days):
        at, out = dt.datetime.fromisoformat(start), []
        schedule_row = {"cron": cron, "timezone": zone}
        while True:
            at = taskboard.parse_iso(taskboard._next_fire(schedule_row, at))
            if at > dt.datetime.fromisoformat(start) + dt.timedelta(days=days):
                return out
            out.append(at)
    spring = fires("30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00+00:00", 3)
    autumn = fires("30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00+00:00", 3)
    assert len(spring) == 3 and len(autumn) == 3
    assert len({a.date() for a in autumn}) == 3


def test_a_fire_is_an_event_and_a_webhook(client, api, tb, live, agent_dir):
    project = api.project()
    hook = client.post_json(f"/api/projects/{project['id']}/webhooks", {
        "platform": "custom", "url": "http://127.0.0.1:9/hook", "events": ["schedule:fired"]},
        status=201).json
    ws = live.ws(f"?projectId={project['id']}")
    made = schedule(client, project["id"])
    due_now(tb, made["id"])
    message = ws.until("schedule:fired", lambda data: data["id"] == made["id"], timeout=RUN)
    assert message["data"]["taskId"] and message["data"]["name"] == "nightly"
    deliveries = wait_for(lambda: client.get(
        f"/api/projects/{project['id']}/webhooks/{hook['id']}/deliveries").json, RUN,
        message="the webhook's delivery")
    assert deliveries[0]["event"] == "schedule:fired"


def test_a_read_token_follows_the_board_live_and_a_token_without_read_cannot(client, api,
                                                                            live):
    project = api.project()
    reader = token(client, "watch", ["read"])["secret"]
    writer = token(client, "writer only", ["write"])["secret"]
    ws = live.ws(f"?projectId={project['id']}", headers=as_token(reader))
    made = api.task(project["id"], title="Seen live")
    assert ws.until("task:created", lambda data: data["id"] == made["id"])["data"]["title"] \
        == "Seen live"
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        live.ws(headers=as_token(writer))
    assert refused.value.status_code == 403


def test_a_read_token_never_hears_the_owners_events_over_ws(client, api, live):
    """/ws filters each event by the scope of the route that reads what it tells (probe v5:
    a read token heard hosts, webhook URLs and settings that REST refused it)."""
    project = api.project()
    reader = live.ws(headers=as_token(token(client, "watch", ["read"])["secret"]))
    owner = live.ws()
    client.post_json("/api/hosts", {"name": "box", "address": "me@box.example"}, status=201)
    client.post_json(f"/api/projects/{project['id']}/webhooks", {
        "platform": "custom", "url": "http://127.0.0.1:9/secret-hook", "events": ["task:created"]},
        status=201)
    client.put_json("/api/settings", {"language": "tr"})
    made = api.task(project["id"], title="After them")
    heard = {name: [] for name in ("reader", "owner")}
    for name, ws in (("reader", reader), ("owner", owner)):
        while (message := ws.next())["event"] != "task:created":
            heard[name].append(message["event"])
        assert message["data"]["id"] == made["id"]
    assert {"host:created", "webhook:created", "settings:updated"} <= set(heard["owner"])
    assert heard["reader"] == [e for e in heard["owner"] if e.partition(":")[0] not in (
        "host", "webhook", "settings")], heard
    kinds = {e.partition(":")[0] for e in taskboard.EVENT_TYPES} - {"resync", "ping"}
    assert kinds <= set(taskboard.EVENT_READS), "every event says which route reads it"


def closing(ws, timeout=5) -> tuple[int, str]:
    """The close frame the server ends a /ws connection with: (code, reason)."""
    ws.conn.settimeout(timeout)
    while True:
        frame = ws.conn.recv_data_frame(True)[1]
        if frame.opcode == websocket.ABNF.OPCODE_CLOSE:
            return int.from_bytes(frame.data[:2], "big"), frame.data[2:].decode()


def test_a_revoked_or_expired_token_or_a_logout_closes_its_sockets(client, api, live):
    """The sockets a credential opened close when it is revoked, expires or logs out, with
    code 4401 and the reason; the others' stay open."""
    revoked = token(client, "revoked")
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)).isoformat()
    brief = token(client, "brief", expiresAt=soon)
    gone, expiring = (live.ws(headers=as_token(t["secret"])) for t in (revoked, brief))
    browser = webtest.TestApp(taskboard.app)
    browser.post_json("/api/login", {"token": taskboard.runtime.config["token"]})
    session = live.ws(headers={
        "Cookie": f"{taskboard.SESSION_COOKIE}={browser.cookies[taskboard.SESSION_COOKIE]}"})
    owner = live.ws()
    client.delete(f"/api/tokens/{revoked['id']}")
    assert closing(gone) == (4401, "token 'revoked' was revoked")
    assert closing(expiring) == (4401, "the token expired")
    browser.post("/api/logout")
    assert closing(session) == (4401, "the session was logged out")
    project = api.project()
    assert owner.until("project:created")["data"]["id"] == project["id"]


def test_list_tasks_over_mcp_is_a_page_of_brief_entries(client, api):
    project = api.project()
    for n in range(3):
        api.task(project["id"], title=f"task {n}", priority=n)
    page, failed = call_tool(client, "list_tasks", {"project_id": project["id"], "limit": 2})
    assert not failed and [t["title"] for t in page] == ["task 2", "task 1"]
    assert set(page[0]) == {"id", "task_key", "title", "status", "priority", "task_type",
                            "agent", "is_running", "pending_approvals", "parent_task_id"}
    for arguments, words in (({"project_id": project["id"], "limit": 0}, "limit 0"),
                             ({"project_id": 999}, "not found"),
                             ({"project_id": project["id"], "status": "lost"}, "lost")):
        error, failed = call_tool(client, "list_tasks", arguments)
        assert failed and words in error["error"], error


def test_the_stdio_bridge_of_a_run_starts_its_cli_while_the_board_is_away():
    """A run's CLI refuses to start when its MCP server fails the handshake: the bridge
    answers it and the run's tool list itself; only a tool's call needs the board."""
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18"}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "list_tasks", "arguments": {}}}]
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "taskboard.py"), "--mcp", "--url",
         "http://127.0.0.1:9"], input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "TASKBOARD_MCP_TOKEN": "run-token", "TASKBOARD_TASK_ID": "1"})
    first, second, third = [json.loads(line) for line in done.stdout.splitlines()]
    assert first["result"]["protocolVersion"] == "2025-06-18"
    assert {t["name"] for t in second["result"]["tools"]} == set(taskboard.RUN_TOOLS)
    assert third["id"] == 3 and "did not answer" in third["error"]["message"]
    # a personal token's tools are the board's to say, whatever the environment holds
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "taskboard.py"), "--mcp", "--url",
         "http://127.0.0.1:9"], input=json.dumps(lines[2]) + "\n", capture_output=True,
        text=True, timeout=60, env={**os.environ, "TASKBOARD_TOKEN": "tbp_" + "x" * 43,
                                    "TASKBOARD_TASK_ID": "1"})
    assert "did not answer" in json.loads(done.stdout)["error"]["message"], done.stdout
