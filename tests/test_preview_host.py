"""A task's preview on a host (design §21, §15): its dev server runs there through the
host's connection (a real loopback sshd), its port forwarded back over that connection to
the preview's own origin here; stopping it ends its group there."""
import os

import pytest
import requests
from ssh_helpers import SshServer, trusted_host
from test_preview import browser, closed_sessions, ready, serve  # noqa: F401

import taskboard
from agent_helpers import alive
from conftest import make_repo, sql, wait_for

pytestmark = pytest.mark.sshd


@pytest.fixture
def sshd(tmp_path):
    server = SshServer(tmp_path)
    yield server
    server.stop()


def test_a_preview_on_a_host_is_served_through_its_connection(
        api, client, sshd, tmp_path):
    make_repo(api.workdir)
    host = trusted_host(client, sshd, tmp_path)
    pids = tmp_path / "pids"
    project = api.project(host=host["id"], repoUrl=str(api.workdir), autoBranch=1,
                          sandbox="none", previewCommand=serve("--child", "--pidfile",
                                                               str(pids)))
    task = api.task(project["id"])
    sql(taskboard.runtime, "UPDATE tasks SET status = 'testing' WHERE id = ?", (task["id"],))
    # its worktree there, as its run left it
    worktree = tmp_path / "host" / "worktrees" / str(project["id"]) / task["task_key"]
    os.makedirs(worktree)
    url = f"/api/tasks/{task['id']}/preview"
    client.post(url, status=202)
    preview = ready(client, url)
    assert preview["status"] == "ready", preview
    session = browser()
    assert "the app" in session.get(preview["url"]).text
    origin = preview["url"].split("/__tb_preview")[0]
    assert requests.get(origin + "/").status_code == 401
    sent = dict(requests.get(origin + "/headers", headers={
        "Cookie": "; ".join(f"{c.name}={c.value}" for c in session.cookies) +
        "; taskboard_session=s1", "Authorization": "Bearer x"}).json())
    assert "authorization" not in sent and "taskboard_session" not in sent.get("cookie", "")
    group = [int(p) for p in pids.read_text().split()]
    assert all(alive(p) for p in group)
    assert "listening on" in preview["output"] and "taskboard-pgid" not in preview["output"]
    client.delete(url)
    wait_for(lambda: not any(alive(p) for p in group), 15, message="its group there to end")
    wait_for(lambda: not sql(taskboard.runtime, "SELECT * FROM previews"), 15)
