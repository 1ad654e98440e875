"""Sandboxed runs (design.md §17): an agent that may act alone holds none of the keys to
the house.

A hostile agent (tests/fake_agent.py running a shell script, `fake:sh`, as an auto-accept
run) tries to read, write and signal what it must not, and to plant a hook; run through a
real bubblewrap it gets nothing while its legitimate work lands, and the same agent without
the sandbox (the control) gets everything.  The rigs' boards run unsandboxed unless a test
asks (conftest.NO_SANDBOX); these tests ask, and skip, saying why, where bubblewrap cannot
work on this machine (under TASKBOARD_CI they fail: conftest.unavailable).
"""
import base64
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid

import pytest
from fault_helpers import ServerProcess, clean_env

import taskboard
from agent_helpers import RUN, logs, wait_status
from conftest import desk, git, make_repo, unavailable, wait_for

pytestmark = pytest.mark.sandbox
BWRAP = ["bwrap"]
WORKS = None


def bwrap_state():
    """What bubblewrap does here, tried once per test process."""
    global WORKS
    if WORKS is None:
        WORKS = taskboard.try_sandbox(BWRAP)
    return WORKS


@pytest.fixture
def tmp_path(outside_tmp):
    """Every folder of these tests (the data dir, home, projects) outside /tmp: a sandboxed
    run has a /tmp of its own, so that it cannot read what is kept in the real one would
    prove nothing (conftest's outside_tmp)."""
    return outside_tmp


@pytest.fixture
def sandboxed(tb, tmp_path, monkeypatch):
    """The board with a real bubblewrap, the fake agent's records in a folder the sandbox
    may write (its pids are of the sandbox's own namespace: the autouse agent folder of
    conftest, which kills leftovers by pid, stays empty)."""
    state = bwrap_state()
    if not state["works"]:
        unavailable(f"bubblewrap does not work on this machine: {state['error']}")
    tb.config["bwrap"] = BWRAP
    tb.sandbox = dict(state)
    records = tmp_path / "sandboxed-agent"
    records.mkdir()
    monkeypatch.setenv("FAKE_AGENT_DIR", str(records))
    return records


def script(text: str) -> str:
    """A fake:sh directive running `text`."""
    return "fake:sh=" + base64.b64encode(text.encode()).decode()


def said(client, task_id) -> str:
    """What the agent's shell script printed (its "sh said:" text)."""
    return "\n".join(e["message"] for e in logs(client, task_id)
                     if e["message"].startswith("sh said:"))


def processes_with(marker: str) -> list[int]:
    """The pids of this machine whose command line holds marker."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


# --- the hostile agent --------------------------------------------------------------------

#: (what, a shell test that succeeds only when the agent got it)
READS = [
    ("the board's token", 'grep -qF -e "$TOKEN" "$DATA/token"'),  # it may start with -
    ("the database", 'head -c 15 "$DATA/taskboard.db" | grep -q SQLite'),
    ("the board's SSH sockets", 'ls "$DATA/ssh/master"'),
    ("another run's MCP config", 'cat "$DATA/mcp/run-999.json"'),
    ("another task's worktree", 'ls "$DATA/worktrees/99/OTHER-1/file"'),
    ("an SSH private key", 'grep -q PRIVATE "$HOME/.ssh/id_ed25519"'),
    ("~/.netrc", 'grep -q NETRC "$HOME/.netrc"'),
    ("gh's login, in a folder the project shows", 'grep -q GHHOSTS "$HOME/.config/gh/hosts.yml"'),
    ("a browser's cookies", 'grep -q COOKIE "$HOME/.mozilla/firefox/p/cookies.sqlite"'),
    ("a notes file in home", 'grep -q NOTES "$HOME/notes.txt"'),
    ("another CLI's login", 'grep -q CODEXKEY "$HOME/.codex/auth.json"'),
    ("another project", 'grep -q OTHER "$OTHER/secret.txt"'),
    ("the board's process", 'test -e "/proc/$BOARD/status"'),
    ("a signal to the board", 'kill -0 "$BOARD"'),
]


def hostile(data, other, token, board, checkout, common, marks):
    """The agent's one shell script: every read it tries, then what it writes; its own
    work, then a hook in a tracked hooks folder that the board's end-of-run commit of its
    leftovers would run."""
    checks = "\n".join(f'if {test} >/dev/null 2>&1; then echo "GOT {what}"; '
                       f'else echo "NOT {what}"; fi' for what, test in READS)
    return script(f"""DATA={data}; OTHER={other}; TOKEN={token}; BOARD={board}
{checks}
env | grep -q GHTOKEN && echo "GOT the source-host token" || echo "NOT the source-host token"
echo work > work.txt && git add work.txt && git -c user.name=A -c user.email=a@b \
  commit -qm "the agent's work" && echo "GOT its commit"
echo kept > "$HOME/.claude/state.txt" && echo "GOT its CLI state"
echo cached > "$HOME/.cache/tool.txt" && echo "GOT its cache"
grep -q TOOL "$HOME/.config/tool.ini" && echo "GOT the folder it was shown"
echo pwned >> "$HOME/.bashrc"
echo pwned >> {checkout}/README.md
printf '#!/bin/sh\\ntouch {marks}/hook-ran\\n' > {common}/hooks/post-commit
chmod +x {common}/hooks/post-commit
git config core.fsmonitor "touch {marks}/fsmonitor-ran"
mkdir -p .githooks && printf '#!/bin/sh\\ntouch {marks}/tracked-hook-ran\\n' \
  > .githooks/post-commit && chmod +x .githooks/post-commit
""")


@pytest.fixture
def house(tmp_path, monkeypatch, api, client, tb):
    """A home with keys, cookies and notes; another project; a repository whose config
    names a tracked hooks folder; a source-host token in the board's environment."""
    home = tmp_path / "home"
    for path, text in [(".ssh/id_ed25519", "PRIVATE KEY"), (".netrc", "machine x NETRC"),
                       (".mozilla/firefox/p/cookies.sqlite", "COOKIE"),
                       ("notes.txt", "NOTES"), (".bashrc", "# mine\n"),
                       (".config/gh/hosts.yml", "GHHOSTS"), (".config/tool.ini", "TOOL"),
                       (".codex/auth.json", "CODEXKEY"),
                       (".claude/settings.json", "{}"), (".cache/keep", ""),
                       (".gitconfig", "[user]\n\tname = Me\n\temail = me@example.com\n")]:
        (home / path).parent.mkdir(parents=True, exist_ok=True)
        (home / path).write_text(text)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GITHUB_TOKEN", "GHTOKEN")
    data = tb.config["data_dir"]
    for folder in ("ssh", "mcp", "worktrees/99/OTHER-1"):
        os.makedirs(os.path.join(data, folder), exist_ok=True)
    for path in ("ssh/master", "mcp/run-999.json", "worktrees/99/OTHER-1/file"):
        with open(os.path.join(data, path), "w") as f:
            f.write("secret")
    other = home / "code" / "other"  # beside the run's project, as a person keeps them
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("OTHER PROJECT")
    api.project(name="Other", slug="other", workingDir=str(other))
    make_repo(api.workdir)
    git(api.workdir, "config", "core.hooksPath", ".githooks")
    return home, other


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_a_hostile_agent_in_the_sandbox_gets_nothing_and_its_work_lands(
        client, api, tb, sandboxed, house, tmp_path, mode):
    home, other = house
    # ~/.config and ~/code shown read-only: all they hold but gh's login (NEVER_VISIBLE)
    # and the other project
    project = api.project(permissionMode="auto-accept", autoBranch=1, sandbox=mode,
                          sandboxPaths={"readWrite": [str(sandboxed)], "readOnly": [
                              str(home / ".config"), str(home / "code")]})
    common = os.path.join(api.workdir, ".git")
    marks = sandboxed  # what a hook would leave: a folder a sandboxed run may write
    task = api.task(project["id"], description="fake:ok " + hostile(
        tb.config["data_dir"], other, tb.config["token"], os.getpid(), api.workdir, common,
        marks))
    api.move(task["id"], "in_progress")
    done = wait_status(client, task["id"], "testing")
    out = said(client, task["id"])
    got = {line[4:] for line in out.splitlines() if line.startswith("GOT ")}
    assert {"its commit", "its CLI state", "its cache", "the folder it was shown"} <= got, out
    assert "the source-host token" not in got, "never in an agent's environment"
    kept = pathlib.Path(tb.config["data_dir"], "cli-state", str(project["id"]), ".claude")
    commits = git(api.workdir, "log", "--format=%s", done["branch_name"])
    assert "the agent's work" in commits
    assert "uncommitted changes from the agent" in commits  # its leftovers: .githooks
    assert not (marks / "tracked-hook-ran").exists(), "the board's own commit ran no hook"
    if mode == "none":  # the control: the same agent, unsandboxed, takes everything
        assert got >= {what for what, _ in READS}, out
        assert done["sandboxed"] is False
        assert (home / ".claude/state.txt").read_text() == "kept\n"
        assert (home / ".bashrc").read_text().endswith("pwned\n")
        assert os.path.exists(os.path.join(common, "hooks", "post-commit"))
        return
    assert done["sandboxed"] is True
    assert not got & {what for what, _ in READS}, out
    assert (kept / "state.txt").read_text() == "kept\n"  # the project's copy
    assert not (home / ".claude/state.txt").exists()
    assert (home / ".bashrc").read_text() == "# mine\n"
    assert (api.workdir / "README.md").read_text() == "# Shop\n"
    assert not os.path.exists(os.path.join(common, "hooks", "post-commit"))
    assert subprocess.run(["git", "config", "--get", "core.fsmonitor"],
                          cwd=api.workdir).returncode == 1, "the repository's config is as it was"
    git(api.workdir, "status")
    assert not (marks / "fsmonitor-ran").exists()


def test_a_sandboxed_run_uses_the_board_tools_with_its_run_token(
        client, api, tb, sandboxed, live, repo):
    taskboard.runtime.url = live.url
    project = api.project(sandbox="bubblewrap")
    call = (
        "import glob, json, os, subprocess\n"
        f"[path] = glob.glob({tb.config['data_dir']!r} + '/mcp/*.json')\n"
        "server = json.load(open(path))['mcpServers']['taskboard']\n"
        "lines = [{'jsonrpc': '2.0', 'id': 1, 'method': 'initialize', 'params': {}},\n"
        "         {'jsonrpc': '2.0', 'id': 2, 'method': 'tools/call', 'params': {\n"
        "             'name': 'create_task', 'arguments': {'title': 'From the sandbox'}}}]\n"
        "done = subprocess.run([server['command'], *server['args']], text=True,\n"
        "                      input=''.join(json.dumps(l) + '\\n' for l in lines),\n"
        "                      capture_output=True)\n"
        "print(done.stdout.splitlines()[-1])\n")
    task = api.task(project["id"], title="Parent", description="fake:ok " + script(
        f"{sys.executable} - <<'EOF'\n{call}EOF\n"))
    api.move(task["id"], "in_progress")
    parent = wait_for(lambda: (t := client.get(f"/api/tasks/{task['id']}").json)[
        "awaiting_subtasks"] and t, RUN, message="the agent to finish with a sub-task")
    children = [t for t in client.get(f"/api/projects/{project['id']}/tasks").json
                if t["parent_task_id"] == task["id"]]
    assert [t["title"] for t in children] == ["From the sandbox"], said(client, task["id"])
    assert parent["sandboxed"] is True


def test_a_sandboxed_session_resumes_with_the_feedback(client, api, sandboxed, repo):
    project = api.project(sandbox="bubblewrap", sandboxPaths={"readWrite": [str(sandboxed)]})
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    first = wait_status(client, task["id"], "testing")
    desk(client, "request_changes", {"id": task["id"], "feedback": "Again"})
    again = wait_status(client, task["id"], "testing")
    calls = [json.loads(line) for line in (sandboxed / "calls.jsonl").read_text().splitlines()]
    assert [c["resumed"] for c in calls] == [False, True]
    assert again["session_id"] == first["session_id"] and again["sandboxed"] is True


# --- ends: stop, kill, restart -------------------------------------------------------------

def lingering(marker):
    return script(f"sleep {marker} & sleep {marker} & echo started")


def test_stopping_a_sandboxed_run_ends_every_process_in_it(client, api, sandboxed, repo):
    marker = str(100000 + uuid.uuid4().int % 800000)
    project = api.project(sandbox="bubblewrap")
    task = api.task(project["id"], description="fake:hang " + lingering(marker))
    api.move(task["id"], "in_progress")
    wait_for(lambda: len(processes_with(marker)) == 2, RUN, message="the run's sleeps")
    api.move(task["id"], "backlog")
    wait_for(lambda: not processes_with(marker), RUN, message="every process of the run to end")


def test_bubblewrap_killed_mid_run_is_a_crash_and_leaves_nothing(client, api, sandboxed, repo,
                                                                  fast_retries):
    marker = str(100000 + uuid.uuid4().int % 800000)
    project = api.project(sandbox="bubblewrap", maxRetries=0)
    task = api.task(project["id"], description="fake:hang " + lingering(marker))
    api.move(task["id"], "in_progress")
    wait_for(lambda: len(processes_with(marker)) == 2, RUN, message="the run's sleeps")
    [run] = taskboard.find_rows("runs", task_id=task["id"])
    with open(f"/proc/{run['pid']}/cmdline", "rb") as f:
        assert b"bwrap" in f.read(), "the run's process is bubblewrap"
    os.kill(run["pid"], signal.SIGKILL)
    failed = wait_status(client, task["id"], "failed")
    assert failed["last_error"]
    wait_for(lambda: not processes_with(marker), RUN, message="every process of the run to end")


def test_a_board_killed_with_9_leaves_no_sandboxed_process_behind(tmp_path):
    if not bwrap_state()["works"]:
        unavailable(f"bubblewrap does not work on this machine: {bwrap_state()['error']}")
    marker = str(100000 + uuid.uuid4().int % 800000)
    workdir = tmp_path / "code"
    workdir.mkdir()
    make_repo(workdir)
    env = clean_env(tmp_path, TASKBOARD_BWRAP="bwrap")
    server = ServerProcess.board(tmp_path, tmp_path / "data" / "tb.db", env).wait_ready()
    try:
        project = server.project(workdir, sandbox="bubblewrap")
        task = server.task(project["id"], description="fake:hang " + lingering(marker))
        server.move(task["id"], "in_progress")
        wait_for(lambda: len(processes_with(marker)) == 2, RUN, message="the run's sleeps")
        assert server.get_task(task["id"])["sandboxed"] is True
    finally:
        server.kill9()
    wait_for(lambda: not processes_with(marker), RUN,
             message="the sandbox to die with the board")


# --- where it does not work ------------------------------------------------------------------

def waits_for_the_sandbox(client, api):
    """A task of a new bubblewrap project moved to in_progress, waiting for the sandbox (not
    started, not charged, no run); the task and how it waits."""
    project = api.project(sandbox="bubblewrap")
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    waiting = wait_for(lambda: (t := client.get(f"/api/tasks/{task['id']}").json)[
        "waitingFor"] and t, RUN, message="the task to wait for the sandbox")
    assert (waiting["status"], waiting["is_running"], waiting["retry_count"]) == \
        ("in_progress", False, 0)
    assert taskboard.find_rows("runs", task_id=task["id"]) == []
    return task, waiting


def test_a_bubblewrap_project_waits_where_the_sandbox_fails_and_starts_once_it_works(
        client, api, tb, sandboxed, repo):
    tb.config["bwrap"] = [sys.executable, "-c", "import sys; sys.exit('no user namespaces')"]
    tb.sandbox = taskboard.try_sandbox(tb.config["bwrap"])
    assert client.get("/api/health").json["sandbox"] == {
        "engine": "bubblewrap", "works": False, "version": None, "error": "no user namespaces"}
    task, waiting = waits_for_the_sandbox(client, api)
    assert "no user namespaces" in waiting["waitingFor"]["sandbox"]
    tb.config["bwrap"] = BWRAP  # it works now: the next try starts the task
    taskboard.runtime.sandbox_retry.wake()
    done = wait_status(client, task["id"], "testing")
    assert done["sandboxed"] is True and done["waitingFor"] is None
    assert client.get("/api/health").json["sandbox"]["works"] is True


def test_auto_runs_unsandboxed_where_the_sandbox_fails_says_so_and_tries_again(
        client, api, tb, sandboxed, repo, monkeypatch):
    """auto runs without a sandbox that fails, saying so, and tries it again before the next
    run (design §17 v6: as bubblewrap's wait does): once it works, runs are sandboxed."""
    tb.config["bwrap"] = [sys.executable, "-c", "import sys; sys.exit('not here')"]
    tb.sandbox = taskboard.try_sandbox(tb.config["bwrap"])
    assert client.get("/api/health").json["sandbox"]["works"] is False
    project = api.project()
    assert project["sandbox"] == "auto"
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    done = wait_status(client, task["id"], "testing")
    assert done["sandboxed"] is False
    assert any(e["message"].startswith("not sandboxed: bubblewrap does not work")
               for e in logs(client, task["id"]))
    tb.config["bwrap"] = BWRAP  # it works now, and its last try is old enough
    monkeypatch.setattr(taskboard, "SANDBOX_RETRY_SECONDS", 0)
    again = api.task(project["id"], description="fake:ok")
    api.move(again["id"], "in_progress")
    assert wait_status(client, again["id"], "testing")["sandboxed"] is True
    assert client.get("/api/health").json["sandbox"]["works"] is True


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_the_token_file_is_hidden_wherever_it_is(config, request, outside_tmp, monkeypatch,
                                                 mode):
    """--token-file outside the data dir (as the README suggests) is hidden from a sandboxed
    run, its variable is not passed, and sandboxPaths holding it are refused (design §17
    v6); the control, unsandboxed, reads it."""
    token_file = outside_tmp / "secrets" / "board-token"
    token_file.parent.mkdir()
    token_file.write_text("T" * 43 + "\n")
    token_file.chmod(0o600)
    config["token_file"] = str(token_file)
    monkeypatch.setenv("TASKBOARD_TOKEN_FILE", str(token_file))
    request.getfixturevalue("sandboxed")
    client, api = request.getfixturevalue("client"), request.getfixturevalue("api")
    make_repo(api.workdir)
    project = api.project(permissionMode="auto-accept", sandbox=mode)
    task = api.task(project["id"], description="fake:ok " + script(
        f'cat {token_file} 2>&1; echo "told: ${{TASKBOARD_TOKEN_FILE:-nothing}}"'))
    api.move(task["id"], "in_progress")
    assert wait_status(client, task["id"], "testing")["sandboxed"] is (mode == "bubblewrap")
    out = said(client, task["id"])
    assert "told: nothing" in out, out
    assert ("T" * 43 in out) is (mode == "none"), out
    for paths in ({"readOnly": [str(token_file)]}, {"readWrite": [str(token_file.parent)]}):
        response = client.put_json(f"/api/projects/{project['id']}", {"sandboxPaths": paths},
                                   expect_errors=True)
        assert response.status_code == 400 and "token file" in response.json["error"], \
            response.json


# --- sandboxPaths ------------------------------------------------------------------------------

@pytest.mark.parametrize("paths", [
    {"readOnly": ["relative/path"]}, {"readWrite": ["/no/such/folder"]}, {"readOnly": "/tmp"},
    {"elsewhere": []}, "DATA", "DATA/mcp", "DATA/..", "HOME/.ssh", "HOME/.aws/credentials"])
def test_sandbox_paths_refuse_what_a_run_must_never_see(client, api, tb, tmp_path,
                                                        monkeypatch, paths):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".aws").mkdir()
    (home / ".aws/credentials").write_text("x")
    monkeypatch.setenv("HOME", str(home))
    if isinstance(paths, str):
        paths = {"readWrite": [paths.replace("DATA", tb.config["data_dir"])
                               .replace("HOME", str(home))]}
    project = api.project()
    response = client.put_json(f"/api/projects/{project['id']}", {"sandboxPaths": paths},
                               expect_errors=True)
    assert response.status_code == 400 and response.json["field"] == "sandboxPaths", \
        response.json
    assert client.get(f"/api/projects/{project['id']}").json["sandboxPaths"] is None


def test_sandbox_paths_keep_what_may_be_granted(client, api, tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    project = api.project(sandbox="bubblewrap", sandboxPaths={
        "readOnly": [str(folder)], "readWrite": []})
    assert (project["sandbox"], project["sandboxPaths"]) == \
        ("bubblewrap", {"readOnly": [str(folder)], "readWrite": []})
    response = client.put_json(f"/api/projects/{project['id']}", {"sandbox": "chroot"},
                               expect_errors=True)
    assert response.status_code == 400 and response.json["field"] == "sandbox"



# --- on a host -----------------------------------------------------------------------------

@pytest.fixture
def sshd(tmp_path):
    from ssh_helpers import SshServer, sshd_missing
    if sshd_missing() is not None:
        unavailable(sshd_missing())
    server = SshServer(tmp_path)
    yield server
    server.stop()


def test_a_run_on_a_host_goes_through_bubblewrap_there(client, api, tb, sandboxed, sshd,
                                                        tmp_path):
    """... and its only way out is the board's egress proxy, over the host's connection
    (design §20): a loopback site networkAllow names is reached through it, not past it."""
    from ssh_helpers import trusted_host
    from test_network import Site
    site = Site("the site")
    make_repo(api.workdir)
    host = trusted_host(client, sshd, tmp_path)
    assert host["lastCheck"]["sandbox"]["works"] is True, host["lastCheck"]
    other = tmp_path / "host" / "worktrees" / "99" / "OTHER-1"
    other.mkdir(parents=True)
    (other / "secret").write_text("OTHER")
    project = api.project(host=host["id"], repoUrl=str(api.workdir), sandbox="bubblewrap",
                          permissionMode="auto-accept", networkAllow=[f"127.0.0.1:{site.port}"],
                          sandboxPaths={"readWrite": [str(sandboxed)]})
    url = f"http://127.0.0.1:{site.port}/"
    task = api.task(project["id"], description="fake:ok " + script(f"""
curl -sSf --max-time 20 {url} | grep -q "the site" && echo "GOT the site through the proxy"
curl -sSf --noproxy '*' --max-time 5 {url} && echo "GOT the site past the proxy"
grep -q OTHER {other}/secret && echo "GOT another task's worktree there"
test -e /proc/{os.getpid()}/status && echo "GOT the board's process"
echo work > work.txt && git add work.txt && git -c user.name=A -c user.email=a@b \\
  commit -qm "the agent's work" && echo "GOT its commit"
"""))
    api.move(task["id"], "in_progress")
    done = wait_status(client, task["id"], "testing")
    site.close()
    out = said(client, task["id"])
    assert done["sandboxed"] is True, out
    assert [line for line in out.splitlines() if line.startswith("GOT")] == \
        ["GOT the site through the proxy", "GOT its commit"], out
    assert done["network"]["reached"] == [f"127.0.0.1:{site.port}"]
    clone = tmp_path / "host" / "repos" / project["slug"]
    assert "the agent's work" in git(clone, "log", "--format=%s", done["branch_name"])


def checks_in_each_mode(client, api, hidden, sandboxed, timeout=RUN, **where):
    """Two attempts of a task in a bubblewrap project and in a none one (`where`: its host
    and repository), each with a stop check that fails where `hidden` can be seen; {mode:
    the attempts' checks passed}, {mode: the stop checks' outcomes}."""
    checks, stop_checks = {}, {}
    for mode in ("bubblewrap", "none"):
        project = api.project(slug=f"best-{mode}", sandbox=mode, maxConcurrent=2,
                              stopCheckCommand=f"test ! -e {hidden}",
                              sandboxPaths={"readWrite": [str(sandboxed)]} if mode != "none"
                              else None, **where)
        task = api.task(project["id"], description="fake:ok")
        client.post_json(f"/api/tasks/{task['id']}/attempts", {"agents": [
            {"agent": "claude"}, {"agent": "claude", "model": "model_small"}]}, status=202)
        wait_status(client, task["id"], "testing", timeout=timeout)
        checks[mode] = [a["check"]["passed"] for a in client.get(
            f"/api/tasks/{task['id']}/attempts").json]
        stop_checks[mode] = {e["message"].split("` ")[1][:6] for e in client.get(
            f"/api/tasks/{task['id']}/logs").json if e["kind"] == "stop_check"}
    return checks, stop_checks


def test_the_stop_check_and_an_attempts_check_run_in_the_sandbox(client, api, tb, sandboxed,
                                                                   repo):
    """The stop check runs what the agent wrote: in a run's sandbox, it and the check run once
    more when an attempt ends (design §18) are as blind to the board as the run; the same
    checks unsandboxed see the database (the control)."""
    checks, stop_checks = checks_in_each_mode(client, api, tb.config["db_path"], sandboxed)
    assert checks == {"bubblewrap": [True, True], "none": [False, False]}
    assert stop_checks == {"bubblewrap": {"passed"}, "none": {"failed"}}


def test_the_stop_check_and_an_attempts_check_run_in_the_sandbox_on_a_host(
        client, api, tb, sandboxed, sshd, tmp_path):
    """As on this machine (the test above): a host's stop check and an attempt's check run in
    the run's sandbox there (design §17 v6), blind to what the board keeps in the host's
    baseDir; unsandboxed they see it (the control)."""
    from ssh_helpers import trusted_host
    make_repo(api.workdir)
    host = trusted_host(client, sshd, tmp_path)
    assert host["lastCheck"]["sandbox"]["works"] is True, host["lastCheck"]
    kept = tmp_path / "host" / "kept-by-the-board"
    kept.parent.mkdir(exist_ok=True)
    kept.write_text("a run's token")
    checks, stop_checks = checks_in_each_mode(  # two runs over ssh
        client, api, kept, sandboxed, timeout=4 * RUN, host=host["id"],
        repoUrl=str(api.workdir))
    assert checks == {"bubblewrap": [True, True], "none": [False, False]}
    assert stop_checks == {"bubblewrap": {"passed"}, "none": {"failed"}}


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_a_failure_the_sandbox_may_explain_says_so_and_points_at_sandbox_paths(
        client, api, tb, sandboxed, repo, outside_tmp, monkeypatch, mode):
    """A tool under home that the sandbox hides (as a version manager's shim finds nothing:
    exit code 127) fails the stop check: the task's log says the sandbox may be why and
    points at sandboxPaths, once; unsandboxed the same check passes and nothing is said."""
    home = outside_tmp / "home"
    tool = home / ".tools" / "check"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    project = api.project(sandbox=mode, stopCheckCommand=f"sh -c {tool}", stopCheckMaxBlocks=0)
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    wait_status(client, task["id"], "testing")
    hints = [e["message"] for e in logs(client, task["id"]) if "sandbox may be why" in e["message"]]
    if mode == "none":
        assert hints == []
        return
    assert len(hints) == 1 and "sandboxPaths" in hints[0], hints


ACCOUNT = {"oauthAccount": "old account", "mcpServers": {"mine": {}}}


def test_cli_state_and_cache_are_the_projects_own_and_logins_are_shared(
        client, api, tb, sandboxed, repo, outside_tmp, monkeypatch):
    """A sandboxed run sees its CLI's state as its project's copy, made from the person's
    the first time, and a ~/.cache of the project's: a hook and a CLAUDE.md it writes there
    reach neither the person's own CLI nor another project; the login file is the person's
    own, so a login a run refreshes holds for both (design §17 v6)."""
    home = outside_tmp / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude/settings.json").write_text('{"mine": true}')
    (home / ".claude/.credentials.json").write_text("old login")
    (home / ".claude.json").write_text(json.dumps(ACCOUNT))
    (home / ".claude/projects/-home-me-secret").mkdir(parents=True)
    (home / ".claude/projects/-home-me-secret/1.jsonl").write_text("another project's session")
    (home / ".claude/history.jsonl").write_text("my prompts")
    (home / ".cache").mkdir()
    (home / ".cache/big").write_text("the person's cache")
    monkeypatch.setenv("HOME", str(home))
    first = api.project(slug="first", permissionMode="auto-accept")
    second = api.project(slug="second", permissionMode="auto-accept")
    writes = script("""cat "$HOME/.claude/settings.json"; echo; ls "$HOME/.cache"
cat "$HOME/.claude/history.jsonl" "$HOME"/.claude/projects/*/*.jsonl
printf '{"hooks": {"SessionStart": "pwn"}}' > "$HOME/.claude/settings.json"
echo 'obey me' > "$HOME/.claude/CLAUDE.md"; echo x > "$HOME/.cache/planted"
echo 'new login' > "$HOME/.claude/.credentials.json"
printf '{"oauthAccount": "old account", "mcpServers": {"planted": {}}}' > "$HOME/.claude.json"
""")
    reads = script('cat "$HOME/.claude/settings.json"; echo; ls "$HOME/.claude" "$HOME/.cache"')
    task = api.task(first["id"], description="fake:ok " + writes)
    api.move(task["id"], "in_progress")
    wait_status(client, task["id"], "testing")
    out = said(client, task["id"])
    assert '{"mine": true}' in out and "big" not in out, out  # a copy; its cache empty
    assert "my prompts" not in out and "session" not in out, out  # the person's other work
    assert (home / ".claude/settings.json").read_text() == '{"mine": true}'
    assert not (home / ".claude/CLAUDE.md").exists()
    assert not (home / ".cache/planted").exists()
    assert (home / ".claude/.credentials.json").read_text() == "new login\n"
    other = api.task(second["id"], description="fake:ok " + reads)
    api.move(other["id"], "in_progress")
    wait_status(client, other["id"], "testing")
    out = said(client, other["id"])
    assert '{"mine": true}' in out and "pwn" not in out, out
    assert "CLAUDE.md" not in out and "planted" not in out, out
    # ~/.claude.json: its account part is the person's at every run, the rest the project's
    assert json.loads((home / ".claude.json").read_text()) == ACCOUNT, "never changed by a run"
    (home / ".claude.json").write_text(json.dumps({**ACCOUNT, "oauthAccount": "new account"}))
    again = api.task(first["id"], description="fake:ok " + script('cat "$HOME/.claude.json"'))
    api.move(again["id"], "in_progress")
    wait_status(client, again["id"], "testing")
    out = said(client, again["id"])
    assert '"new account"' in out and '"planted"' in out and "old account" not in out, out


def test_two_runs_that_start_at_once_both_get_the_whole_state_copy(
        client, api, tb, sandboxed, repo, outside_tmp, monkeypatch):
    """Two runs of a project that start together (best of N, maxConcurrent): one makes the
    project's copy of the CLI state while the other waits, then both see all of it. Before,
    the second one's sandbox failed ("mkdir: File exists", exit 126) or showed a copy half
    made."""
    home = outside_tmp / "home"
    (home / ".claude").mkdir(parents=True)
    for n in range(300):  # copied one by one: long enough for the other run to start
        (home / f".claude/note-{n:03}").write_text("mine")
    monkeypatch.setenv("HOME", str(home))
    project = api.project(permissionMode="auto-accept", maxConcurrent=2)
    count = script('echo "notes: $(ls "$HOME/.claude" | grep -c note-)"')
    tasks = [api.task(project["id"], description="fake:ok " + count) for _ in range(2)]
    for task in tasks:
        api.move(task["id"], "in_progress")
    for task in tasks:
        wait_status(client, task["id"], "testing")
        assert "notes: 300" in said(client, task["id"])
        assert not [e for e in logs(client, task["id"]) if "code 126" in e["message"]]


def tool(path: pathlib.Path, body: str) -> pathlib.Path:
    """An executable sh script at path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def in_tmp():
    """A folder under /tmp itself, where a sandboxed run has a /tmp of its own."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="tb-shared-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_persons_toolchains_work_in_the_sandbox_and_nothing_else_of_home_shows(
        client, api, tb, sandboxed, repo, outside_tmp, in_tmp, monkeypatch):
    """A pyenv shim, an nvm node, a rustup-managed cargo, uv's and pipx's tool links on PATH
    and the agent CLI in ~/bin (its native installer's link in ~/.local/bin too) run
    sandboxed, read-only; the rest of home (history, OpenCode's key, cargo's credentials)
    does not show (design §17 v6: bound by resolved files, never home or ~/.local).  A
    sandboxPaths folder that is a link into home (outside it) is read through its link, and
    one under /tmp (the sandbox's own there) is shown too."""
    home = outside_tmp / "home"
    tool(home / ".pyenv/shims/python3", 'exec "$HOME/.pyenv/libexec/pyenv" exec python3 "$@"')
    tool(home / ".pyenv/libexec/pyenv", 'shift; exec "$HOME/.pyenv/versions/3.12/bin/$@"')
    tool(home / ".pyenv/versions/3.12/bin/python3", "echo pyenv-python")
    tool(home / ".nvm/versions/node/v20/bin/node", "echo nvm-node")
    tool(home / ".cargo/bin/cargo", 'exec "$HOME/.rustup/toolchains/stable/bin/cargo"')
    tool(home / ".rustup/toolchains/stable/bin/cargo", "echo rustup-cargo")
    (home / ".local/bin").mkdir(parents=True)
    for name, target in [("ruff", ".local/share/uv/tools/ruff/bin/ruff"),
                         ("black", ".local/share/pipx/venvs/black/bin/black")]:
        os.symlink(tool(home / target, f"echo {name}-tool"), home / ".local/bin" / name)
    os.symlink(tool(home / ".local/share/claude/versions/2.1", f'exec {sys.executable} '
                    f'{pathlib.Path(__file__).parent / "fake_agent.py"} "$@"'),
               home / ".local/bin/claude")
    tool(home / "bin/claude", f'exec "{home}/.local/bin/claude" "$@"')
    for secret in (".bash_history", ".local/share/opencode/auth.json",
                   ".cargo/credentials.toml"):
        (home / secret).parent.mkdir(parents=True, exist_ok=True)
        (home / secret).write_text("SECRET")
    (home / "notes").mkdir()
    (home / "notes/plan.txt").write_text("the plan\n")
    (in_tmp / "shared.txt").write_text("shared in tmp\n")
    os.symlink(home / "notes", outside_tmp / "notes")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", ":".join([
        str(home / p) for p in (".pyenv/shims", ".nvm/versions/node/v20/bin", ".cargo/bin",
                                ".local/bin", "bin")] + [os.environ["PATH"]]))
    tb.config["agents"]["claude"] = [str(home / "bin/claude")]
    project = api.project(permissionMode="auto-accept", sandbox="bubblewrap",
                          sandboxPaths={"readOnly": [str(outside_tmp / "notes"),
                                                     str(in_tmp)]})
    task = api.task(project["id"], description="fake:ok " + script(
        f"cat {outside_tmp}/notes/plan.txt {in_tmp}/shared.txt\n"
        "for t in python3 node cargo ruff black; do $t || echo \"$t failed\"; done\n"
        "grep -rl SECRET \"$HOME\" 2>/dev/null | sed 's/^/SEEN /'; :"))
    api.move(task["id"], "in_progress")
    assert wait_status(client, task["id"], "testing")["sandboxed"] is True
    out = said(client, task["id"])
    for ran in ("the plan", "shared in tmp", "pyenv-python", "nvm-node", "rustup-cargo",
                "ruff-tool", "black-tool"):
        assert ran in out, out
    assert "failed" not in out and "SEEN" not in out, out
