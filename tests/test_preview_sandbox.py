"""A sandboxed project's preview (design §21): its dev server runs as a run does (§17, §20),
in bubblewrap with its checkout writable and a network of its own; the board reaches its
port through the bridge's UNIX socket, and it reaches nothing of the board; on a host
(§15) the same there, its bridge's socket forwarded over the host's connection."""
import shlex
import sys

import pytest
from test_preview import browser, closed_sessions, ready, serve  # noqa: F401

# the person's layout outside /tmp, its board and its API (fixtures)
from test_sandbox_git import KEY, api, config, person, sshd  # noqa: F401

import taskboard
from agent_helpers import alive
from conftest import sql, wait_for

pytestmark = pytest.mark.sandbox


def test_a_sandboxed_preview_is_served_through_its_bridge_and_reaches_no_board(
        api, client, live, person):  # noqa: F811
    probe = shlex.quote(
        f"import socket; s = socket.socket(); print('board', s.connect_ex(('127.0.0.1', "
        f"{live.port})))")
    command = (f"{shlex.quote(sys.executable)} -c {probe}; "
               f"curl -fsS --max-time 10 http://127.0.0.1:{live.port}/api/health; "
               "echo \" curl $?\"; cat ~/.ssh/id_ed25519 || echo no key; "
               "echo made > preview-wrote.txt; " + serve())
    project = api.project(sandbox="bubblewrap", previewCommand=command)
    task = api.task(project["id"])
    sql(taskboard.runtime, "UPDATE tasks SET status = 'testing' WHERE id = ?", (task["id"],))
    url = f"/api/tasks/{task['id']}/preview"
    client.post(url, status=202)
    preview = ready(client, url)
    assert preview["status"] == "ready", preview
    session = browser()
    assert "the app" in session.get(preview["url"]).text  # the link, then previewPath
    output = preview["output"]
    assert "board 111" in output, output  # ECONNREFUSED: its loopback is its own
    # through the egress proxy, the board is refused too (its policy: a loopback address)
    assert " curl 0" not in output and '"sandbox"' not in output, output
    logged = [e["message"] for e in client.get(f"/api/tasks/{task['id']}/logs").json
              if e["kind"] == "network"]
    assert any(f"127.0.0.1:{live.port}" in m for m in logged), logged
    assert KEY not in output and "no key" in output
    assert (person.shop / "preview-wrote.txt").read_text() == "made\n"
    pid = taskboard.runtime.previews.by_task[(task["id"], None)].proc.pid
    client.delete(url)
    wait_for(lambda: not alive(pid), 10, message="the sandbox to end")
    wait_for(lambda: not sql(taskboard.runtime, "SELECT * FROM previews"), 10)


def test_a_sandboxed_preview_on_a_host_is_served_through_its_connection(
        api, client, person, sshd, live):  # noqa: F811
    from ssh_helpers import trusted_host
    host = trusted_host(client, sshd, person.root)
    assert host["lastCheck"]["sandbox"]["works"], host["lastCheck"]
    command = (f"curl -fsS --max-time 10 http://127.0.0.1:{live.port}/api/health; "
               "echo \" curl $?\"; cat ~/.ssh/id_ed25519 || echo no key; " + serve())
    project = api.project(host=host["id"], repoUrl=str(person.shop), sandbox="bubblewrap",
                          previewCommand=command)
    task = api.task(project["id"])
    sql(taskboard.runtime, "UPDATE tasks SET status = 'testing' WHERE id = ?", (task["id"],))
    (person.root / "host" / "worktrees" / str(project["id"]) / task["task_key"]).mkdir(
        parents=True)
    url = f"/api/tasks/{task['id']}/preview"
    client.post(url, status=202)
    preview = ready(client, url)
    assert preview["status"] == "ready", preview
    assert "the app" in browser().get(preview["url"]).text
    output = preview["output"]
    # through the egress proxy, the board is refused too (its policy: a loopback address)
    assert " curl 0" not in output and '"sandbox"' not in output, output
    logged = [e["message"] for e in client.get(f"/api/tasks/{task['id']}/logs").json
              if e["kind"] == "network"]
    assert any(f"127.0.0.1:{live.port}" in m for m in logged), logged
    assert KEY not in output and "no key" in output
    client.delete(url)
    wait_for(lambda: not sql(taskboard.runtime, "SELECT * FROM previews"), 15)
