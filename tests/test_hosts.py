"""Agents on other machines (design.md §15): the hosts they run on, reached over OpenSSH."""

import json
import os
import re
import subprocess
import sys

import pytest
import requests
import websocket
from fault_helpers import ServerProcess, clean_env, group_members
from git_host_helpers import REPO, TOKEN, FakeHost, add_origin
from ssh_helpers import SshServer, host_body, trusted_host

import taskboard
from agent_helpers import RUN, alive, children, logs, query, read_calls, task_calls, wait_status
from conftest import FAKE_AGENT, assert_error, assert_refused, desk, git, make_repo, wait_for

pytestmark = pytest.mark.sshd


@pytest.fixture
def sshd(tmp_path):
    server = SshServer(tmp_path)
    yield server
    server.stop()


def text_of(path):
    with open(path) as f:
        return f.read()


@pytest.fixture
def remote_project(api, client, sshd, tmp_path):
    """A project whose tasks run on the sshd host, cloning the local repository."""
    make_repo(api.workdir)
    host = trusted_host(client, sshd, tmp_path)
    project = api.project(host=host["id"], repoUrl=str(api.workdir), autoBranch=1)
    return project, host


def test_the_loopback_host_takes_its_key_only_and_runs_commands_there(sshd, tmp_path):
    """The rig of the host tests: a real sshd, key-only, its host key pinned."""
    done = sshd.ssh(f"cd {tmp_path} && pwd && printf '%s' \"$SSH_CONNECTION\"")
    assert done.returncode == 0, done.stderr
    folder, connection = done.stdout.split("\n", 1)
    assert folder == str(tmp_path) and connection.startswith("127.0.0.1 ")
    assert sshd.fingerprint.startswith("SHA256:")
    stranger = os.path.join(tmp_path, "stranger")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger], check=True)
    refused = sshd.ssh("true", identity=stranger)
    assert refused.returncode == 255 and "Permission denied" in refused.stderr


@pytest.mark.parametrize("field, value", [
    ("address", "-oProxyCommand=touch pwned"), ("address", "me@box; touch pwned"),
    ("address", ""), ("port", 0), ("port", 70000), ("port", "22"),
    ("baseDir", "relative/dir"), ("baseDir", "~/../escape"), ("baseDir", "/srv/$(touch x)"),
    ("identityFile", "relative/key"), ("identityFile", "/no/such/key"),
    ("maxConcurrent", 0), ("maxConcurrent", 51), ("enabled", "yes"),
    ("agentCommands", {"nope": "x"}), ("agentCommands.claude", {"claude": "unclosed 'quote"}),
    ("hostKey", "SHA256:short"),
])
def test_a_bad_host_field_is_refused_naming_it(client, snapshot, tmp_path, field, value):
    body = {"name": "box", "address": "me@box.example"} | {field.split(".")[0]: value}
    assert_refused(snapshot, client.post_json, "/api/hosts", body, field=field)


def test_paths_under_home_are_shown_expanded_in_their_errors(client, api, snapshot):
    """Issue 44: `~` means the board's user's home, and the error says which path that is."""
    home = os.path.expanduser("~")
    error = assert_refused(snapshot, client.post_json, "/api/hosts", {
        "name": "box", "address": "me@box.example", "identityFile": "~/no-such-key"},
        field="identityFile")
    assert f"'~/no-such-key' ({home}/no-such-key) is not a readable file" in error["error"]
    error = assert_refused(snapshot, client.post_json, "/api/projects", {
        "name": "P", "slug": "p", "workingDir": "~/code"}, field="workingDir")
    assert error["error"] == f"workingDir '~/code' must be an absolute path: write {home}/code"


def test_a_host_is_added_listed_changed_and_deleted(client, tmp_path):
    host = client.post_json("/api/hosts", {"name": "box", "address": "me@box.example"},
                            status=201).json
    assert host == host | {"name": "box", "address": "me@box.example", "port": 22,
                           "identityFile": None, "baseDir": "~/.taskboard", "maxConcurrent": 2,
                           "enabled": True, "hostKey": None, "lastCheck": None, "running": 0}
    assert client.get("/api/hosts").json == [host]
    changed = client.put_json(f"/api/hosts/{host['id']}", {"maxConcurrent": 4,
                                                           "enabled": False}).json
    assert changed["maxConcurrent"] == 4 and changed["enabled"] is False
    assert_error(client.post_json("/api/hosts", {"name": "box", "address": "x"},
                                  expect_errors=True), 409, field="name")
    assert client.delete(f"/api/hosts/{host['id']}").json == {"ok": True}
    assert_error(client.get(f"/api/hosts/{host['id']}", expect_errors=True), 404)


def test_a_host_a_project_names_cannot_be_deleted(client, api):
    host = client.post_json("/api/hosts", {"name": "box", "address": "me@box.example"},
                            status=201).json
    api.project(name="Shop", host=host["id"], repoUrl="https://git.example/shop.git")
    error = assert_error(client.delete(f"/api/hosts/{host['id']}", expect_errors=True), 409)
    assert "'Shop'" in error["error"]
    assert client.get(f"/api/hosts/{host['id']}").json["name"] == "box"


def test_a_deleted_hosts_machine_says_so_instead_of_being_none(client, api, tb):
    """The machine of a project whose host is gone (a race: a host a project names cannot be
    deleted) is one that says so: what would reach the host raises HostDown, reads and
    clean-ups find nothing (internals: the API cannot make this state)."""
    host = client.post_json("/api/hosts", {"name": "box", "address": "me@box.example"},
                            status=201).json
    client.delete(f"/api/hosts/{host['id']}")
    project = {**api.project(name="Shop"), "host_id": host["id"]}
    machine = taskboard.project_machine(project)
    task = {"id": 1, "task_key": "SHOP-1", "branch_name": "b", "base_commit": None}
    with pytest.raises(taskboard.HostDown, match=r"host \(host \d+\) is gone"):
        machine.repository(project)
    with pytest.raises(taskboard.HostDown, match=r"host \(host \d+\) is gone"):
        machine.agent_command("claude")
    assert machine.task_git(task, project) == (None, None)
    assert machine.sandbox()["works"] is False and machine.full() is None
    machine.remove_worktree(task, project, None, False)
    assert machine.bring_home(task, project) is None


def test_a_project_cannot_name_a_host_that_is_not_there(api, client, snapshot):
    assert_refused(snapshot, client.post_json, "/api/projects",
                   {"name": "P", "slug": "p", "workingDir": str(api.workdir), "host": 99},
                   field="host")


def test_a_project_on_a_host_needs_something_the_host_can_clone(api, client, snapshot,
                                                                tmp_path):
    """Issue 44: no repoUrl and a workingDir without origin → 400 naming repoUrl, on create
    and on update; an origin or a repoUrl will do."""
    host = client.post_json("/api/hosts", {"name": "vm", "address": "me@vm.example"},
                            status=201).json
    make_repo(api.workdir)
    body = {"name": "P", "slug": "p", "workingDir": str(api.workdir), "host": host["id"]}
    error = assert_refused(snapshot, client.post_json, "/api/projects", body, field="repoUrl")
    assert str(api.workdir) in error["error"]
    here = api.project()
    assert_refused(snapshot, client.put_json, f"/api/projects/{here['id']}",
                   {"host": host["id"]}, field="repoUrl")
    assert api.project(slug="with-url", host=host["id"], repoUrl="https://git.example/a/b")
    add_origin(api.workdir, tmp_path / "origin.git")
    client.put_json(f"/api/projects/{here['id']}", {"host": host["id"]})


@pytest.mark.parametrize("planted", [False, True])
def test_an_approved_host_tasks_branch_comes_home_to_the_working_dir(
        client, api, remote_project, agent_dir, tmp_path, planted):
    """Issue 44: with no pull request, the work done on a host is fetched into workingDir's
    repository when the task is approved, and the task says where its branch is.  Issue
    55: where a run in that checkout left the branch's reflog a link to a file of home, the
    fetch (which would append a line there) is refused, saying so; the file stays whole."""
    project, host = remote_project
    task = api.task(project["id"], title="Greet", description="fake:ok fake:write=hello.txt")
    api.move(task["id"], "in_progress")
    testing = wait_status(client, task["id"], "testing")
    branch, clone = testing["branch_name"], os.path.join(tmp_path, "host", "repos",
                                                         project["slug"])
    assert testing["branchAt"] == f"{host['name']}:{clone}"
    assert not git(api.workdir, "branch", "--list", branch)
    bashrc = tmp_path / "bashrc"
    bashrc.write_text("# mine\n")
    if planted:
        reflog = api.workdir / ".git" / "logs" / "refs" / "heads" / branch
        reflog.parent.mkdir(parents=True, exist_ok=True)
        reflog.symlink_to(bashrc)
    api.move(task["id"], "done")
    if planted:
        said = f"refused: {api.workdir / '.git' / 'logs' / 'refs' / 'heads' / branch} is a link"
        wait_for(lambda: any(said in e["message"] for e in logs(client, task["id"])), RUN,
                 message="the log to say why the branch stays on the host")
        assert not git(api.workdir, "branch", "--list", branch)
        assert bashrc.read_text() == "# mine\n"
        return
    done = wait_for(lambda: (t := client.get(f"/api/tasks/{task['id']}").json)["branchAt"]
                    == str(api.workdir) and t, RUN, message="the branch to come home")
    assert git(api.workdir, "rev-parse", branch) == git(clone, "rev-parse", branch)
    assert git(api.workdir, "show", f"{branch}:hello.txt")
    reflog = api.workdir / ".git" / "logs" / "refs" / "heads" / branch
    assert "fetch" in reflog.read_text(), "the fetch writes there: a link would be followed"
    said = f"branch {branch} fetched from host {host['name']!r} into {api.workdir}"
    wait_for(lambda: said in [e["message"] for e in logs(client, done["id"])], RUN,
             message="the log to say where the branch came")  # log lines land in batches


def test_the_first_check_shows_the_key_and_trusting_it_pins_it(client, sshd, tmp_path):
    host = client.post_json("/api/hosts", host_body(sshd, tmp_path), status=201).json
    first = client.post(f"/api/hosts/{host['id']}/check").json
    assert first["hostKey"] is None
    assert first["lastCheck"]["fingerprint"] == sshd.fingerprint
    assert first["lastCheck"]["ok"] is False and "not trusted" in first["lastCheck"]["error"]
    known = os.path.join(taskboard.runtime.data_dir, "ssh", "known_hosts")
    assert not os.path.exists(known) or "ssh-" not in text_of(known)

    other = "SHA256:" + "A" * 43
    error = assert_error(client.put_json(f"/api/hosts/{host['id']}", {"hostKey": other},
                                         expect_errors=True), 409, field="hostKey")
    assert sshd.fingerprint in error["error"]
    pinned = client.put_json(f"/api/hosts/{host['id']}", {"hostKey": sshd.fingerprint}).json
    assert pinned["hostKey"] == sshd.fingerprint
    assert "taskboard-host-" in text_of(known)

    checked = client.post(f"/api/hosts/{host['id']}/check").json["lastCheck"]
    assert checked["ok"] is True and checked["error"] is None
    assert isinstance(checked["latencyMs"], int)
    assert checked["git"] and checked["git"].startswith("git version")
    assert checked["agents"]["claude"]["found"] is True
    assert checked["agents"]["claude"]["version"]
    assert checked["agents"]["codex"] == {"found": False, "version": None}


def test_a_changed_host_key_is_refused_and_disables_the_host(client, sshd, tmp_path):
    host = trusted_host(client, sshd, tmp_path)
    old = host["hostKey"]
    sshd.drop()
    new = sshd.new_host_key()
    sshd.start()
    checked = client.post(f"/api/hosts/{host['id']}/check").json
    assert checked["enabled"] is False and checked["hostKey"] == old
    assert checked["lastCheck"]["ok"] is False
    assert old in checked["lastCheck"]["error"] and new in checked["lastCheck"]["error"]
    assert checked["lastCheck"]["fingerprint"] == new
    again = client.post(f"/api/hosts/{host['id']}/check").json
    assert again["hostKey"] == old and again["enabled"] is False  # never re-pinned by itself
    # a person compares and trusts the new key
    client.put_json(f"/api/hosts/{host['id']}", {"hostKey": new, "enabled": True})
    assert client.post(f"/api/hosts/{host['id']}/check").json["lastCheck"]["ok"] is True


def test_a_task_of_a_remote_project_runs_in_a_worktree_on_the_host(
        client, api, remote_project, agent_dir, tmp_path):
    project, host = remote_project
    task = api.task(project["id"], title="Add a page", description="fake:ok")
    api.move(task["id"], "in_progress")
    done = wait_status(client, task["id"], "testing")
    worktree = os.path.join(tmp_path, "host", "worktrees", str(project["id"]),
                            done["task_key"])
    [call] = task_calls(agent_dir, task["id"])
    assert os.path.realpath(call["cwd"]) == os.path.realpath(worktree)
    assert call["env"]["TASKBOARD_TASK_ID"] == str(task["id"])
    clone = os.path.join(tmp_path, "host", "repos", project["slug"])
    assert git(clone, "branch", "--list", done["branch_name"]).strip()
    messages = [e["message"] for e in logs(client, task["id"])]
    assert any("on host 'build box'" in m for m in messages), messages
    assert done["waitingFor"] is None
    assert client.get(f"/api/hosts/{host['id']}").json["running"] == 0


def test_the_planner_of_a_remote_project_reads_the_hosts_clone_there_and_cancels_there(
        client, api, remote_project, agent_dir, tmp_path):
    project, host = remote_project
    plan = f"/api/projects/{project['id']}/plan"
    client.post_json(plan, {"topic": "Cart", "context": "fake:hang fake:child"})
    [call] = wait_for(lambda: read_calls(agent_dir), RUN, message="the planner")
    clone = os.path.join(tmp_path, "host", "repos", project["slug"])
    assert os.path.realpath(call["cwd"]) == os.path.realpath(clone)
    wait_for(lambda: children(agent_dir), RUN, message="the planner's child")
    assert group_members(call["pgid"]), "the planner leads its own group on the host"
    client.post_json(f"{plan}/cancel", {})
    wait_for(lambda: not group_members(call["pgid"]), RUN,
             message="the planner's group on the host to be killed")
    assert not any(alive(p) for p in children(agent_dir))
    good = client.post_json(plan, {"topic": "Cart"}).json["planId"]  # a plan, from the host
    last = wait_for(lambda: client.get(f"{plan}/status").json.get("last"), RUN,
                    message="the plan")
    assert (last["planId"], last["status"], last["error"]) == (good, "completed", None)
    assert last["tasks"], "its tasks were written"


def test_a_task_waits_for_a_host_that_is_down_and_starts_when_it_is_back(
        client, api, remote_project, agent_dir, sshd):
    project, host = remote_project
    sshd.drop()
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    waiting = wait_for(lambda: client.get(f"/api/tasks/{task['id']}").json["waitingFor"],
                       RUN, message="the task to wait for its host")
    assert waiting["host"] == host["id"] and waiting["error"]
    now = client.get(f"/api/tasks/{task['id']}").json
    assert now["status"] == "in_progress" and now["retry_count"] == 0
    assert not now["is_running"] and task_calls(agent_dir, task["id"]) == []
    assert client.post(f"/api/hosts/{host['id']}/check").json["lastCheck"]["ok"] is False
    sshd.start()
    assert client.post(f"/api/hosts/{host['id']}/check").json["lastCheck"]["ok"] is True
    done = wait_status(client, task["id"], "testing")
    assert done["waitingFor"] is None and done["retry_count"] == 0


def test_shell_words_from_a_task_never_reach_the_remote_shell_unquoted(
        client, api, remote_project, agent_dir, tmp_path):
    project, host = remote_project
    evil = "$(touch pwned)`touch pwned2`; touch pwned3 'x"
    task = api.task(project["id"], title=evil, description=f"fake:ok {evil}")
    api.move(task["id"], "in_progress")
    wait_status(client, task["id"], "testing")
    [call] = task_calls(agent_dir, task["id"])
    assert evil in call["stdin"]
    for where in (tmp_path, os.getcwd(), os.path.expanduser("~"), call["cwd"]):
        found = subprocess.run(["find", str(where), "-maxdepth", "6", "-name", "pwned*"],
                               capture_output=True, text=True).stdout
        assert found == "", found


def test_the_stop_check_of_a_run_on_a_host_runs_there(client, api, remote_project, agent_dir,
                                                      tmp_path, monkeypatch):
    """Security probe v4 (issue 43): a remote run's stop check ran on the board's machine,
    with the board's environment, in the host's worktree path. It runs on the host, in the
    worktree there, with the host's login environment: nothing of the board's."""
    project, _ = remote_project
    monkeypatch.setenv("ONLY_ON_THE_BOARD", "board-env")
    check = "sh -c 'echo \"where=$(pwd -P) env=[$ONLY_ON_THE_BOARD]\"; exit 1'"
    client.put_json(f"/api/projects/{project['id']}",
                    {"stopCheckCommand": check, "stopCheckMaxBlocks": 1})
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    done = wait_status(client, task["id"], "testing")
    with open(os.path.join(agent_dir, "stop_reasons.txt"), encoding="utf-8") as f:
        [reason] = [json.loads(line) for line in f]
    worktree = os.path.join(tmp_path, "host", "worktrees", str(project["id"]),
                            done["task_key"])
    assert f"where={os.path.realpath(worktree)} env=[]" in reason, reason
    checks = [e for e in logs(client, task["id"]) if e["kind"] == "stop_check"]
    assert [e["isError"] for e in checks] == [True, True]


def test_the_boards_token_never_reaches_the_host(client, api, remote_project, agent_dir,
                                                 tmp_path):
    project, host = remote_project
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    wait_status(client, task["id"], "testing")
    token = taskboard.runtime.config["token"]
    [call] = task_calls(agent_dir, task["id"])
    assert token not in json.dumps(call)
    leaked = subprocess.run(["grep", "-rlF", "-e", token, str(tmp_path / "host")],
                            capture_output=True, text=True).stdout
    assert leaked == ""
    assert os.listdir(tmp_path / "host" / "runs") == []  # the settings file is gone


def test_one_connection_serves_every_run_on_a_host(client, api, remote_project, agent_dir,
                                                   sshd):
    project, host = remote_project
    client.put_json(f"/api/projects/{project['id']}", {"maxConcurrent": 3})
    tasks = [api.task(project["id"], title=f"T{n}", description="fake:slow=30")
             for n in range(3)]
    for task in tasks[:2]:
        api.move(task["id"], "in_progress")
    full = assert_error(client.patch_json(f"/api/tasks/{tasks[2]['id']}/status",
                                          {"status": "in_progress"}, expect_errors=True), 409)
    assert "host 'build box'" in full["error"] and "maxConcurrent 2" in full["error"]
    client.put_json(f"/api/hosts/{host['id']}", {"maxConcurrent": 3})
    api.move(tasks[2]["id"], "in_progress")
    wait_for(lambda: client.get(f"/api/hosts/{host['id']}").json["running"] == 3, RUN,
             message="three runs on the host")
    for task in tasks:
        wait_for(lambda task=task: any(e["message"].startswith("session ")
                                       for e in logs(client, task["id"])), RUN,
                 message="the session")
        client.post_json(f"/api/tasks/{task['id']}/messages", {"text": "done",
                                                                "interrupt": True})
    for task in tasks:
        wait_status(client, task["id"], "testing")
    accepted = text_of(sshd.log).count("Accepted publickey")
    assert accepted == 1, accepted  # the board's one master


def ssh_processes(marker):
    """Live ssh clients whose command line names `marker` (a board's ssh folder)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and alive(int(name)):
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")
            except OSError:
                continue
            if argv[0] == "ssh" and any(marker in a for a in argv):
                found.append(int(name))
    return found


def test_stopping_a_remote_run_kills_its_process_group_on_the_host(
        client, api, remote_project, agent_dir):
    project, host = remote_project
    task = api.task(project["id"], description="fake:hang fake:child")
    api.move(task["id"], "in_progress")
    [call] = wait_for(lambda: task_calls(agent_dir, task["id"]), RUN, message="the agent")
    wait_for(lambda: children(agent_dir), RUN, message="the agent's child")
    assert group_members(call["pgid"]), "the agent leads its own group on the host"
    api.move(task["id"], "backlog")
    wait_for(lambda: not group_members(call["pgid"]), RUN,
             message="the agent's group on the host to be killed")
    assert not any(alive(p) for p in children(agent_dir))
    assert client.get(f"/api/hosts/{host['id']}").json["running"] == 0


def test_a_connection_lost_mid_run_is_a_crash_and_the_run_is_killed_there(
        client, api, remote_project, agent_dir, sshd, fast_retries):
    project, host = remote_project
    task = api.task(project["id"], description="fake:hang")
    api.move(task["id"], "in_progress")
    [call] = wait_for(lambda: task_calls(agent_dir, task["id"]), RUN, message="the agent")
    sshd.drop()
    waiting = wait_for(lambda: client.get(f"/api/tasks/{task['id']}").json["waitingFor"],
                       30, message="the retry to wait for the host")
    assert waiting["host"] == host["id"]
    after = client.get(f"/api/tasks/{task['id']}").json
    assert after["status"] == "in_progress" and after["retry_count"] == 1
    messages = [e["message"] for e in logs(client, task["id"])]
    assert any("the connection to host 'build box' was lost" in m for m in messages), messages
    wait_for(lambda: not group_members(call["pgid"]), RUN,
             message="the agent on the host to notice its channel closed and end")
    sshd.start()
    client.post(f"/api/hosts/{host['id']}/check")
    wait_for(lambda: len(task_calls(agent_dir, task["id"])) == 2, RUN,
             message="the task to start again on the host")
    api.move(task["id"], "backlog")


def test_a_board_killed_with_9_leaves_nothing_running_on_either_machine(
        tmp_path, sshd, agent_dir):
    db = tmp_path / "data" / "tb.db"
    (tmp_path / "code").mkdir()
    repo = make_repo(tmp_path / "code")
    env = clean_env(tmp_path)
    board = ServerProcess.board(tmp_path, db, env).wait_ready()
    try:
        def call(method, path, body=None, status=200):
            return board.call(method, path, status=status, json=body)
        host = call("POST", "/api/hosts", host_body(sshd, tmp_path), 201)
        shown = call("POST", f"/api/hosts/{host['id']}/check")["lastCheck"]["fingerprint"]
        call("PUT", f"/api/hosts/{host['id']}", {"hostKey": shown})
        assert call("POST", f"/api/hosts/{host['id']}/check")["lastCheck"]["ok"]
        project = board.project(repo, host=host["id"], repoUrl=str(repo), autoBranch=1)
        task = board.task(project["id"], description="fake:lines=100000 fake:sleep=0.01 "
                                                     "fake:resume=hang fake:child")
        board.move(task["id"], "in_progress")
        [first] = wait_for(lambda: task_calls(agent_dir, task["id"]), RUN, message="the agent")
        wait_for(lambda: len(board.logs(task["id"])) >= 20, RUN, message="its lines")
        ssh_folder = str(tmp_path / "data" / "ssh")
        assert ssh_processes(ssh_folder), "the board's master and the run's channel"
        board.kill9()
        wait_for(lambda: not ssh_processes(ssh_folder), RUN,
                 message="every ssh client of the killed board to end with it")
        wait_for(lambda: not group_members(first["pgid"]), 20,
                 message="the agent's group on the host to end with its channel")
        assert not any(alive(p) for p in children(agent_dir))

        board = ServerProcess.board(tmp_path, db, env).wait_ready()
        [_, again] = wait_for(lambda: task_calls(agent_dir, task["id"])[1:] and
                              task_calls(agent_dir, task["id"]), 30,
                              message="the task to resume on the host")
        assert again["resumed"] is True and again["stdin"] == "continue"
        assert board.terminate() == 0, board.errors()[-3000:]
        wait_for(lambda: not group_members(again["pgid"]), RUN,
                 message="the resumed agent to end with the board")
        assert not ssh_processes(ssh_folder)
    finally:
        board.stop()


def test_commits_diff_verifier_and_pull_request_act_on_the_hosts_worktree(
        tb, client, api, sshd, tmp_path, agent_dir, fast_retries):
    make_repo(api.workdir)
    origin = add_origin(api.workdir, tmp_path / "origin.git")
    forge = FakeHost(origin)
    tb.config.update(git_host_api=forge.url, git_host_token=TOKEN)
    url = f"https://git.example/{REPO}/pull/7"
    try:
        host = trusted_host(client, sshd, tmp_path)
        project = api.project(host=host["id"], autoPr=1, gitHostRepo=REPO, prPollSeconds=1)
        task = api.task(project["id"], title="Greet", description="fake:ok fake:write=hello.txt")
        api.move(task["id"], "in_progress")
        testing = wait_status(client, task["id"], "testing")
        worktree = os.path.join(tmp_path, "host", "worktrees", str(project["id"]),
                                testing["task_key"])
        assert git(worktree, "status", "--porcelain") == ""  # the end-of-run commit, there
        [commit] = client.get(f"/api/tasks/{task['id']}/detail").json["commits"]
        assert commit["message"] == f"{testing['task_key']}: uncommitted changes from the agent"
        diff = desk(client, "get_task_diff", {"taskId": task["id"]}).json
        assert "+++ b/hello.txt" in diff["diff"] and diff["stats"]["files"] == 1

        client.put_json(f"/api/projects/{project['id']}", {"autoTest": 1})
        api.move(task["id"], "in_progress")  # again: this time a verifier follows
        done = wait_status(client, task["id"], "done")  # the verifier approved, on the host
        verifier = [c for c in task_calls(agent_dir, task["id"]) if "reviewing" in c["stdin"]]
        assert [os.path.realpath(c["cwd"]) for c in verifier] == [os.path.realpath(worktree)]
        wait_for(lambda: client.get(f"/api/tasks/{task['id']}").json["pr_url"] == url, RUN,
                 message="the pull request")
        clone = os.path.join(tmp_path, "host", "repos", project["slug"])
        branch = done["branch_name"]
        assert git(origin, "rev-parse", branch) == git(clone, "rev-parse", branch)
        assert forge.calls("POST")[0]["json"]["head"] == branch
        wait_for(lambda: not os.path.exists(worktree), RUN, message="the worktree to go")
        assert git(clone, "branch", "--list", branch)
        forge.pull().merged, forge.pull().state = True, "closed"  # merged: the branch goes
        wait_for(lambda: not git(clone, "branch", "--list", branch), RUN,
                 message="the merged branch to be removed from the host's clone")
        assert client.get(f"/api/tasks/{task['id']}").json["pr"]["state"] == "merged"
    finally:
        forge.stop()


def mcp(url, token, method, params=None, id_=1):
    answer = requests.post(url, json={"jsonrpc": "2.0", "id": id_, "method": method,
                                      "params": params or {}},
                           headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_board_tools_answer_over_http_with_the_run_tokens_bounds(
        tb, client, api, live, agent_dir):
    taskboard.runtime.url = live.url
    project = api.project()
    task = api.task(project["id"], title="Parent", description="fake:hang")
    api.move(task["id"], "in_progress")
    [call] = wait_for(lambda: task_calls(agent_dir, task["id"]), RUN, message="the agent")
    with open(call["argv"][call["argv"].index("--mcp-config") + 1]) as f:
        token = json.load(f)["mcpServers"]["taskboard"]["env"]["TASKBOARD_MCP_TOKEN"]
    url = f"{live.url}/mcp"
    assert mcp(url, token, "initialize")["result"]["serverInfo"]["name"] == "taskboard"
    listed = mcp(url, token, "tools/call", {"name": "list_tasks", "arguments": {}})["result"]
    assert [t["id"] for t in json.loads(listed["content"][0]["text"])] == [task["id"]]
    moved = mcp(url, token, "tools/call", {"name": "change_task_status",
                                           "arguments": {"id": task["id"], "status": "done"}})
    assert moved["result"]["isError"] is True
    note = requests.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                         headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert note.status_code == 202 and note.text == ""
    assert requests.post(url, json={}, timeout=30).status_code == 401
    api.move(task["id"], "backlog")  # the run ends: its token with it
    gone = requests.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                         headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert gone.status_code == 401


def hanging_remote_claude(client, api, live, sshd, tmp_path, agent_dir):
    """A task whose Claude run hangs on the sshd host: (the task, the path of its board
    tools' settings there)."""
    taskboard.runtime.url = live.url  # before the connection opens: its forward goes there
    make_repo(api.workdir)
    host = trusted_host(client, sshd, tmp_path)
    project = api.project(host=host["id"], repoUrl=str(api.workdir))
    task = api.task(project["id"], title="Parent", description="fake:hang")
    api.move(task["id"], "in_progress")
    [call] = wait_for(lambda: task_calls(agent_dir, task["id"]), RUN, message="the agent")
    return task, call["argv"][call["argv"].index("--mcp-config") + 1]


def test_a_remote_claude_run_reaches_the_board_tools_through_its_connection(
        tb, client, api, live, sshd, tmp_path, agent_dir):
    task, path = hanging_remote_claude(client, api, live, sshd, tmp_path, agent_dir)
    assert path.startswith(str(tmp_path / "host" / "runs"))
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    with open(path) as f:
        server = json.load(f)["mcpServers"]["taskboard"]
    assert server["type"] == "http" and server["url"].startswith("http://127.0.0.1:")
    assert str(live.port) not in server["url"]  # the forward's port on the host
    token = server["headers"]["Authorization"].split()[1]
    created = mcp(server["url"], token, "tools/call", {"name": "create_task", "arguments": {
        "title": "A sub-task from the host"}})["result"]
    assert created["isError"] is False
    child = json.loads(created["content"][0]["text"])
    assert child["parent_task_id"] == task["id"]
    api.move(task["id"], "backlog")
    wait_for(lambda: not os.path.exists(path), RUN, message="the settings file to go")


@pytest.mark.parametrize("no_auth", [False, True])
def test_a_hosts_forward_reaches_only_the_board_tools_with_a_run_token(
        tb, client, api, live, sshd, tmp_path, agent_dir, no_auth):
    """Security probe v4 (issue 43): the run's remote forward put the whole API on the
    host's loopback, counted as local, so anyone on the host (under --no-auth, without a
    token) read settings, called desktop commands and started agents on the board's
    machine. Now it lands on a listener of its own: /mcp alone, a run token always."""
    task, path = hanging_remote_claude(client, api, live, sshd, tmp_path, agent_dir)
    with open(path) as f:
        server = json.load(f)["mcpServers"]["taskboard"]
    run_token = server["headers"]["Authorization"].split()[1]
    forward = server["url"].rsplit("/", 1)[0]  # the forward's port on the host's loopback
    if no_auth:
        tb.config["no_auth"] = True
    board = {"Authorization": f"Bearer {tb.config['token']}"}
    for method, path in (("GET", "/api/settings"), ("GET", "/api/projects"),
                         ("POST", "/api/desktop/stop_task"), ("GET", "/"), ("GET", "/ws")):
        answer = requests.request(method, forward + path, json={"id": task["id"]},
                                  headers=board, timeout=30)
        assert answer.status_code == 404, (path, answer.status_code, answer.text[:200])
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for headers in ({}, board, {"Authorization": "Bearer not-a-run-token"}):
        refused = requests.post(forward + "/mcp", json=ping, headers=headers, timeout=30)
        assert refused.status_code == 401, (headers, refused.text)
    assert mcp(forward + "/mcp", run_token, "ping")["result"] == {}
    with pytest.raises(websocket.WebSocketBadStatusException):  # no event stream there
        websocket.create_connection(forward.replace("http", "ws") + "/ws", timeout=10,
                                    header=[f"Authorization: Bearer {tb.config['token']}"])
    assert client.get(f"/api/tasks/{task['id']}").json["status"] == "in_progress"


def test_approvals_messages_and_attachments_work_for_a_run_on_a_host(
        client, api, remote_project, agent_dir, tmp_path):
    project, host = remote_project
    task = api.task(project["id"], description="fake:ask")
    client.post(f"/api/tasks/{task['id']}/attachments",
                upload_files=[("file", "notes.txt", b"read me", "text/plain")])
    api.move(task["id"], "in_progress")
    approval = wait_for(lambda: [a for a in client.get(f"/api/tasks/{task['id']}/approvals").json
                                 if a["status"] == "pending"], RUN, message="the request")[0]
    assert approval["toolName"] == "Bash"
    client.post_json(f"/api/approvals/{approval['id']}", {"decision": "allow"})
    done = wait_status(client, task["id"], "testing")
    text = [m for m in client.get(f"/api/tasks/{task['id']}/messages").json
            if m["author"] == "agent"][-1]["text"]
    assert "allowed: echo hello" in text
    [call] = task_calls(agent_dir, task["id"])
    folder = call["argv"][call["argv"].index("--add-dir") + 1]
    assert os.path.realpath(folder) == os.path.realpath(
        tmp_path / "host" / "attachments" / done["task_key"])
    assert text_of(os.path.join(folder, "notes.txt")) == "read me"


def tool_call(url, token, name, **arguments):
    answer = mcp(url, token, "tools/call", {"name": name, "arguments": arguments})["result"]
    return json.loads(answer["content"][0]["text"]), answer["isError"]


@pytest.mark.parametrize("cli", ["codex", "opencode"])
def test_another_agent_cli_runs_on_a_host_with_the_board_tools(
        cli, tb, client, api, live, sshd, tmp_path, agent_dir):
    taskboard.runtime.url = live.url  # before the connection opens: its forward goes there
    make_repo(api.workdir)
    fake = f"env FAKE_AGENT_DIR={os.environ['FAKE_AGENT_DIR']} {sys.executable} {FAKE_AGENT}"
    host = trusted_host(client, sshd, tmp_path, agentCommands={cli: f"{fake} --as {cli}"})
    assert host["lastCheck"]["agents"][cli]["found"] is True
    project = api.project(host=host["id"], repoUrl=str(api.workdir), agent=cli)
    task = api.task(project["id"], description="fake:hang")
    api.move(task["id"], "in_progress")
    [call] = wait_for(lambda: task_calls(agent_dir, task["id"]), RUN, message="the agent")
    assert call["as"] == cli
    if cli == "codex":  # /mcp through the forward, its token in the run's environment
        [spec] = [a for a in call["argv"] if a.startswith("mcp_servers.taskboard=")]
        url = re.search(r'url="([^"]+)"', spec).group(1)
        assert 'bearer_token_env_var="TASKBOARD_MCP_TOKEN"' in spec
        token = call["env"]["TASKBOARD_MCP_TOKEN"]
    else:
        server = json.loads(call["env"]["OPENCODE_CONFIG_CONTENT"])["mcp"]["taskboard"]
        assert server["type"] == "remote"
        url, token = server["url"], server["headers"]["Authorization"].split()[1]
    assert token not in " ".join(call["argv"])
    assert url.startswith("http://127.0.0.1:") and f":{live.port}/" not in url
    listed, failed = tool_call(url, token, "list_tasks")
    assert not failed and [t["id"] for t in listed] == [task["id"]]
    api.move(task["id"], "backlog")  # the run is over: its token with it
    assert requests.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                         headers={"Authorization": f"Bearer {token}"},
                         timeout=30).status_code == 401


@pytest.fixture
def quick_checks(monkeypatch):
    """Hosts are checked every 0.3 s instead of every minute (before the board starts)."""
    monkeypatch.setattr(taskboard, "HOST_CHECK_SECONDS", 0.3)


def test_a_host_that_refuses_the_key_holds_the_task_until_a_check_lets_it_start(
        quick_checks, client, api, remote_project, agent_dir, sshd, tmp_path):
    project, host = remote_project
    stranger = os.path.join(tmp_path, "stranger")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger], check=True)
    client.put_json(f"/api/hosts/{host['id']}", {"identityFile": stranger})
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    waiting = wait_for(lambda: client.get(f"/api/tasks/{task['id']}").json["waitingFor"],
                       RUN, message="the task to wait for its host")
    assert "Permission denied" in waiting["error"]
    assert f"the host refused the key {stranger}; check the key file" in waiting["error"]
    assert task_calls(agent_dir, task["id"]) == []
    health = client.get("/api/health").json["hosts"]
    wait_for(lambda: client.get("/api/health").json["hosts"][0]["reachable"] is False, RUN,
             message="health to say the host is unreachable")
    assert health[0]["name"] == "build box"
    client.put_json(f"/api/hosts/{host['id']}", {"identityFile": sshd.identity})
    done = wait_status(client, task["id"], "testing")  # the next periodic check started it
    assert done["retry_count"] == 0 and done["waitingFor"] is None
    assert client.get("/api/health").json["hosts"][0]["reachable"] is True


def test_health_tells_a_stranger_only_how_many_hosts_are_in_use_and_reachable(
        client, anonymous, remote_project):
    """Security probe v4 (issue 43): without a credential, health listed the hosts' names
    and whether each was reachable; now only how many (design §11, v5)."""
    assert client.get("/api/health").json["hosts"][0]["name"] == "build box"
    answer = anonymous.get("/api/health")
    assert "hosts" not in answer.json and "build box" not in answer.text
    assert answer.json["hostsInUse"] == {"count": 1, "reachable": 1}


def test_agents_tells_a_read_token_no_host(client, remote_project):
    """Security probe v5: GET /api/agents named the hosts to a read token; hosts are the
    owner's (as health shows them to the owner alone)."""
    assert client.get("/api/agents").json[0]["hosts"][0]["name"] == "build box"
    reader = client.post_json("/api/tokens", {"name": "watch", "scopes": ["read"]}).json
    answer = client.get("/api/agents", headers={"Authorization": f"Bearer {reader['secret']}"})
    assert "build box" not in answer.text and answer.json[0]["hosts"] == []


def test_a_hosts_slots_are_shared_by_its_projects_and_the_queue_fills_them(
        client, api, remote_project, agent_dir):
    project, host = remote_project
    client.put_json(f"/api/hosts/{host['id']}", {"maxConcurrent": 1})
    other = api.project(host=host["id"], repoUrl=project["repoUrl"], autoQueue=1)
    first = api.task(project["id"], description="fake:slow=30")
    api.move(first["id"], "in_progress")
    wait_for(lambda: task_calls(agent_dir, first["id"]), RUN, message="the first agent")
    queued = api.task(other["id"], description="fake:ok")
    assert client.get(f"/api/tasks/{queued['id']}").json["status"] == "backlog"
    assert task_calls(agent_dir, queued["id"]) == []  # the host is full
    wait_for(lambda: any(e["message"].startswith("session ")
                         for e in logs(client, first["id"])), RUN, message="the session")
    client.post_json(f"/api/tasks/{first['id']}/messages", {"text": "stop", "interrupt": True})
    wait_status(client, first["id"], "testing")
    wait_status(client, queued["id"], "testing")  # the freed slot went to the other project


def test_how_a_host_is_reached_cannot_change_under_its_runs(
        client, api, remote_project, agent_dir, tmp_path):
    project, host = remote_project
    task = api.task(project["id"], description="fake:hang")
    api.move(task["id"], "in_progress")
    wait_for(lambda: client.get(f"/api/tasks/{task['id']}").json["is_running"], RUN,
             message="the run on the host")
    error = assert_error(client.put_json(f"/api/hosts/{host['id']}", {"port": 2222},
                                         expect_errors=True), 409)
    assert "stop them" in error["error"]
    assert client.put_json(f"/api/hosts/{host['id']}", {"name": "renamed"}).json["name"] == \
        "renamed"  # what does not touch the connection may change
    assert client.get(f"/api/tasks/{task['id']}").json["is_running"]
    api.move(task["id"], "backlog")


def test_a_run_whose_settings_cannot_reach_the_host_is_recorded_as_never_started(
        client, api, remote_project, agent_dir, tmp_path):
    project, host = remote_project
    (tmp_path / "host").mkdir(exist_ok=True)
    (tmp_path / "host" / "runs").write_text("a file where the runs' folder goes")
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    failed = wait_status(client, task["id"], "failed")
    assert "settings could not be written" in failed["last_error"]
    assert task_calls(agent_dir, task["id"]) == []
    assert query("SELECT status FROM runs WHERE task_id = ?", (task["id"],)) == [("failed",)]
    assert client.get(f"/api/hosts/{host['id']}").json["running"] == 0


def test_the_hosts_clone_is_fetched_before_each_run(client, api, sshd, tmp_path, agent_dir):
    make_repo(api.workdir)
    origin = add_origin(api.workdir, tmp_path / "origin.git")
    host = trusted_host(client, sshd, tmp_path)
    project = api.project(host=host["id"])  # repoUrl: the origin of workingDir
    first = api.task(project["id"], description="fake:ok")
    api.move(first["id"], "in_progress")
    wait_status(client, first["id"], "testing")
    clone = os.path.join(tmp_path, "host", "repos", project["slug"])
    (api.workdir / "NEWS.md").write_text("news\\n")
    git(api.workdir, "add", "NEWS.md")
    git(api.workdir, "commit", "-q", "-m", "news")
    git(api.workdir, "push", "-q", "origin", "main")
    api.move(first["id"], "in_progress")  # its worktree is kept; the clone is fetched
    wait_status(client, first["id"], "testing")
    assert git(clone, "rev-parse", "origin/main") == git(origin, "rev-parse", "main")


def test_a_quiet_run_on_a_host_meets_its_idle_timeout(client, api, remote_project, agent_dir,
                                                     monkeypatch):
    """The wrapper's heartbeat (an empty stderr line every second) is not the agent's
    output."""
    project, host = remote_project
    # idle after two and a half heartbeats
    monkeypatch.setattr(taskboard, "SECONDS_PER_MINUTE", 2.5 * taskboard.REMOTE_BEAT_SECONDS)
    monkeypatch.setattr(taskboard, "KILL_GRACE_SECONDS", 1)
    client.put_json("/api/settings", {"agentIdleTimeoutMinutes": 1})
    client.put_json(f"/api/projects/{project['id']}", {"maxRetries": 0})
    task = api.task(project["id"], description="fake:hang")
    api.move(task["id"], "in_progress")
    [call] = wait_for(lambda: task_calls(agent_dir, task["id"]), RUN, message="the agent")
    failed = wait_status(client, task["id"], "failed", timeout=30)
    assert "idle" in failed["last_error"] or "no output" in failed["last_error"]
    wait_for(lambda: not group_members(call["pgid"]), RUN,
             message="the quiet agent's group on the host to be killed")


def test_the_board_hears_a_hosts_runs_start_and_end(client, api, live, remote_project,
                                                    agent_dir):
    project, host = remote_project
    ws = live.ws()
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    ws.until("host:updated", lambda h: h["id"] == host["id"] and h["running"] == 1, RUN)
    ws.until("host:updated", lambda h: h["id"] == host["id"] and h["running"] == 0, RUN)
    assert wait_status(client, task["id"], "testing")["waitingFor"] is None


def test_attempts_of_a_remote_task_run_compare_and_pick_on_the_host(
        client, api, remote_project, agent_dir, tmp_path):
    """Best of N on a host (design §18): each attempt in its own worktree there, its check
    run there, and the pick moves the worktree there and deletes the other branch there."""
    project, _ = remote_project
    client.put_json(f"/api/projects/{project['id']}", {
        "stopCheckCommand": "test -f small.txt", "maxConcurrent": 2})
    task = api.task(project["id"], description="fake:ok fake@haiku:write=small.txt "
                    "fake@sonnet:write=big.txt")
    client.post_json(f"/api/tasks/{task['id']}/attempts", {"agents": [
        {"agent": "claude", "model": "model_small"},
        {"agent": "claude", "model": "model_medium"}]}, status=202)
    # two runs, two sandboxed checks and their worktrees, each over ssh: more than one run's
    wait_status(client, task["id"], "testing", timeout=60)
    small, medium = client.get(f"/api/tasks/{task['id']}/attempts").json
    assert (small["check"]["passed"], medium["check"]["passed"]) == (True, False)
    worktrees = os.path.join(tmp_path, "host", "worktrees", str(project["id"]))
    key = task["task_key"]
    assert sorted(c["cwd"] for c in task_calls(agent_dir, task["id"])) == [
        os.path.realpath(os.path.join(worktrees, f"{key}-{n}")) for n in (1, 2)]
    client.post(f"/api/tasks/{task['id']}/attempts/1/pick")
    clone = os.path.join(tmp_path, "host", "repos", project["slug"])
    wait_for(lambda: os.listdir(worktrees) == [key], RUN, message="the picked worktree moved")
    assert os.path.exists(os.path.join(worktrees, key, "small.txt"))
    branches = git(clone, "branch", "--list").split()
    assert small["branch"] in branches and medium["branch"] not in branches
    picked = client.get(f"/api/tasks/{task['id']}").json
    assert picked["branch_name"] == small["branch"] and picked["branchAt"].startswith("build box:")
