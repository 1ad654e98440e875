"""The board's own git on what a sandboxed run wrote (design.md §17 v6): it runs nothing the
run could have planted outside a sandbox, and binds into the next run only what the board
recorded, never what git or a link in the checkout says.

Each escape is a hostile auto-accept run (tests/fake_agent.py running a shell script) in a
person's layout kept **outside /tmp** (a run's private /tmp would hide anything there, and
prove nothing): home, data dir, projects and a fake key under conftest's outside_tmp.  Sandboxed it
gets nothing while its work lands; the same script in a `sandbox: none` project (the
control) gets what it went for, so the script is shown to work.
"""
import base64
import os
import shutil
import socket
import sys
import types

import pytest

import taskboard
from agent_helpers import RUN, get_task, task_calls, wait_logs, wait_status
from conftest import FAKE_AGENT, Api, desk, git, make_repo, unavailable, wait_for

pytestmark = pytest.mark.sandbox
KEY = "-----BEGIN OPENSSH PRIVATE KEY----- fake"
PROXY = taskboard.NET_ENV["HTTPS_PROXY"]


@pytest.fixture
def person(monkeypatch, outside_tmp):
    """A person's layout outside /tmp: ~/.ssh/id_ed25519, ~/.bashrc, the data dir in
    ~/.local/share/taskboard, projects in ~/code; `marks`, where a thief would leave what it
    took (beside home: read-only to a sandbox), and `records`, the fake agent's."""
    root = outside_tmp
    home = root / "home"
    for path, text in [(".ssh/id_ed25519", KEY + "\n"), (".bashrc", "# mine\n"),
                       (".gitconfig", "[user]\n\tname = Me\n\temail = me@example.com\n"
                                      "[commit]\n\tgpgsign = false\n")]:
        (home / path).parent.mkdir(parents=True, exist_ok=True)
        (home / path).write_text(text)
    data = home / ".local" / "share" / "taskboard"
    data.mkdir(parents=True, mode=0o700)
    for folder in ("code/shop", "code/other", "marks", "records"):
        (home.parent / folder if folder in ("marks", "records") else home / folder).mkdir(
            parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("FAKE_AGENT_DIR", str(root / "records"))
    return types.SimpleNamespace(root=root, home=home, data=data, shop=home / "code" / "shop",
                                marks=root / "marks", records=root / "records")


@pytest.fixture
def config(person):
    return taskboard.parse_args(["--db", str(person.data / "taskboard.db"),
                                 "--agent-command", f"{sys.executable} {FAKE_AGENT}"],
                                environ={})


@pytest.fixture
def api(client, person, tb):
    state = taskboard.try_sandbox(["bwrap"])
    if not state["works"]:
        unavailable(f"bubblewrap does not work on this machine: {state['error']}")
    tb.config["bwrap"] = ["bwrap"]
    tb.sandbox = dict(state)
    make_repo(person.shop)
    return Api(client, person.shop)


def script(text: str) -> str:
    return "fake:ok fake:sh=" + base64.b64encode(text.encode()).decode()


def said(client, task_id) -> str:
    return "\n".join(e["message"] for e in client.get(f"/api/tasks/{task_id}/logs").json
                     if e["message"].startswith("sh said:"))


def thief(marks, name, port=None) -> str:
    """A shell script that a filter or diff driver runs: it keeps who ran it and the
    person's key in marks/name, knocks at a loopback `port` of the machine, then passes its
    input on."""
    knock = f"python3 -c {knocks(port)!r} 2>/dev/null; " if port else ""
    return f"{{ id; cat \"$HOME/.ssh/id_ed25519\"; }} >> {marks}/{name} 2>/dev/null; " \
        f"{knock}cat\n"


def knocks(port) -> str:
    return f"import socket; socket.create_connection(('127.0.0.1', {port}), 5)"


@pytest.fixture
def door():
    """A loopback port of the machine; knocked(door): whether anything connected to it."""
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


def knocked(door) -> bool:
    door.settimeout(0)
    try:
        door.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_a_nested_repository_and_a_planted_reflog_never_run_as_the_board(
        client, api, person, door, mode):
    """A worktree run (autoBranch) makes `sub/` a repository whose own config and
    info/attributes name a clean filter, stages the gitlink, touches the file under it (so
    that `git add` must look through the filter), and points its worktree's logs/HEAD at
    ~/.bashrc: the board's end-of-run commit recursed into `sub/` and appended its reflog
    line there, as the board.  Sandboxed, both happen blind and with no network (the filter
    reaches no port of the machine), and the work lands: its commit, the leftovers'
    commit, the diff, done."""
    origin = person.home / "code" / "origin.git"
    git(person.shop, "clone", "-q", "--bare", str(person.shop), str(origin))
    git(person.shop, "remote", "add", "origin", str(origin))
    git(person.shop, "fetch", "-q", "origin")
    project = api.project(permissionMode="auto-accept", autoBranch=1, sandbox=mode, autoPr=1,
                          sandboxPaths={"readWrite": [str(person.records)]})
    task = api.task(project["id"], description=script(f"""
echo work > work.txt && git add work.txt && git commit -qm "the agent's work" &&
  echo "GOT its commit"
cat > .thief.sh <<'EOF'
{thief(person.marks, "stolen", door.getsockname()[1])}EOF
top=$(pwd)
mkdir sub && cd sub && git init -q && echo x > f && git add f && git commit -qm sub
git config filter.ev.clean "sh $top/.thief.sh" && echo '* filter=ev' > .git/info/attributes
cd .. && git add sub && git commit -qm "a nested repository"
touch -d '2001-01-01 00:00' sub/f
ln -sf "$HOME/.bashrc" "$(git rev-parse --git-dir)/logs/HEAD"
t=$(git rev-parse --git-common-dir)/logs/refs/remotes/origin/$(git branch --show-current)
mkdir -p "$(dirname "$t")" && ln -sf "$HOME/.bashrc" "$t"
echo left > left.txt
"""))
    api.move(task["id"], "in_progress")
    done = wait_status(client, task["id"], "testing")
    out = said(client, task["id"])
    assert "GOT its commit" in out, out
    commits = git(person.shop, "log", "--format=%s", done["branch_name"])
    assert "the agent's work" in commits and "uncommitted changes from the agent" in commits
    diff = desk(client, "get_task_diff", {"taskId": task["id"]}).json
    assert "+work" in diff["diff"] and "+left" in diff["diff"], diff
    api.move(task["id"], "done")  # approved: pushed, and its worktree goes
    worktree = person.data / "worktrees" / str(project["id"]) / task["task_key"]
    wait_for(lambda: not worktree.exists(), RUN, message="the worktree to be removed")
    assert done["branch_name"] in git(person.shop, "branch", "--list")
    assert "the agent's work" in git(origin, "log", "--format=%s", done["branch_name"])
    stolen = person.marks / "stolen"
    bashrc = (person.home / ".bashrc").read_text()
    assert "update by push" not in bashrc, "the push wrote no reflog through the link"
    if mode == "none":  # the control: the board's own git ran the agent's filter and link
        assert KEY in stolen.read_text()
        assert "uncommitted changes from the agent" in bashrc
        assert knocked(door)
        return
    assert done["sandboxed"] is True
    assert not stolen.exists(), stolen.read_text()
    assert not knocked(door), "the board's git has no network"
    assert bashrc == "# mine\n"
    remotes = person.shop / ".git" / "logs" / "refs" / "remotes" / "origin"
    assert not (remotes / done["branch_name"]).is_symlink(), "remote-tracking logs: read-only"


@pytest.mark.parametrize("end", ["by itself", "stopped", "none"])
def test_a_runs_leftovers_are_committed_as_blind_as_the_run(client, api, person, door, end):
    """A worktree run's last act: a nested repository whose own config names a clean filter
    (a thief that also says it ran, in the run's sandboxPaths folder), a file under it to
    look through, and a file left uncommitted.  A run that ends by itself commits them as it
    ends, in its own sandbox, as blind as it (the filter writes where the run may, and no
    more); a run that is stopped (its sandbox killed first) has them committed by the
    board, in a sandbox of the board's git (the filter writes nothing outside the
    checkout).  Either way the filter reads no key and reaches no port of the machine, and
    the leftovers land on the run's branch (not before the end: the stop check runs in the
    run's sandbox too); the control (sandbox none) ran it as the board."""
    project = api.project(permissionMode="auto-accept", autoBranch=1,
                          sandbox="none" if end == "none" else "bubblewrap",
                          sandboxPaths={"readWrite": [str(person.records)]},
                          stopCheckCommand="true")  # the run's sandbox, but not its end
    trap = f"""
cat > .thief.sh <<'EOF'
echo ran >> {person.records}/filtered; {thief(person.marks, "stolen", door.getsockname()[1])}EOF
top=$(pwd)
mkdir sub && cd sub && git init -q && echo x > f && git add f && git commit -qm sub
cd .. && git add sub .thief.sh && git commit -qm "a nested repository" && echo "GOT it"
git -C sub config filter.ev.clean "sh $top/.thief.sh"
echo '* filter=ev' > sub/.git/info/attributes
touch -d '2001-01-01 00:00' sub/f; echo left > left.txt
"""
    task = api.task(project["id"], description=script(trap).replace(
        "fake:ok", "fake:hang" if end == "stopped" else "fake:ok"))
    api.move(task["id"], "in_progress")
    if end == "stopped":
        wait_for(lambda: "GOT it" in said(client, task["id"]), RUN,
                 message="the run to lay its trap")
        api.move(task["id"], "backlog")
    branch = wait_for(lambda: get_task(client, task["id"])["branch_name"], RUN,
                      message="the task's branch")
    wait_for(lambda: "uncommitted changes from the agent" in git(
        person.shop, "log", "--format=%s", branch), RUN, message="the leftovers' commit")
    assert "GOT it" in said(client, task["id"])
    assert "+left" in desk(client, "get_task_diff", {"taskId": task["id"]}).json["diff"]
    logs = wait_logs(client, task["id"], lambda entries: any(
        e["message"] == "committed the changes the agent left uncommitted" for e in entries),
        "the log to say the leftovers were committed")
    assert not any(taskboard.RUN_END_MARK in e["message"] for e in logs), \
        "what the sandbox says of the run's end is the board's, not the log's"
    stolen, filtered = person.marks / "stolen", person.records / "filtered"
    if end == "none":  # the control: the board's own git ran the agent's filter
        assert KEY in stolen.read_text() and filtered.exists()
        assert knocked(door)
        return
    assert not stolen.exists(), stolen.read_text()
    assert not knocked(door), "the filter reached no port of the machine"
    assert filtered.exists() == (end == "by itself"), \
        "the run's own sandbox commits as it ends; a stopped run's, the board's git sandbox"


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_a_worktree_run_moves_its_own_branch_only(client, api, person, mode):
    """A worktree run (autoBranch) moves `main` (packed) and another task's branch beside
    its own, deletes a third, and writes main's ref file itself: before, a run's `refs`
    were the repository's, writable.  Sandboxed it moves its copy only (OWN_REFS), where
    it reads every branch (packed or not) as it was, while its own commits land on its
    branch, at the end of the run and of the next (resumed) one; the control moves them
    all."""
    git(person.shop, "pack-refs", "--all")
    main = git(person.shop, "rev-parse", "main").strip()
    for name in ("feature/other-task", "gone"):
        git(person.shop, "branch", name)
    project = api.project(permissionMode="auto-accept", autoBranch=1, sandbox=mode,
                          sandboxPaths={"readWrite": [str(person.records)]})
    task = api.task(project["id"], description=script("""
echo "SAW $(git rev-parse main feature/other-task gone | tr '\\n' ' ')"
echo work > work.txt && git add work.txt && git commit -qm "the agent's work" &&
  echo "GOT its commit"
git update-ref refs/heads/main HEAD; git branch -f feature/other-task HEAD
git branch -D gone; echo left > left.txt
"""))
    api.move(task["id"], "in_progress")
    done = wait_status(client, task["id"], "testing")
    assert "GOT its commit" in said(client, task["id"])
    assert f"SAW {main} {main} {main} " in said(client, task["id"]), "it reads every branch"
    desk(client, "request_changes", {"id": task["id"], "feedback": script("""
echo more >> work.txt && git commit -qam "more work" && echo "GOT its second commit"
c=$(git rev-parse --git-common-dir); git rev-parse HEAD > "$c/refs/heads/main"
""")})
    wait_status(client, task["id"], "testing")
    assert "GOT its second commit" in said(client, task["id"])
    own = git(person.shop, "log", "--format=%s", done["branch_name"])
    assert own.split("\n")[:3] == ["more work", f"{task['task_key']}: uncommitted changes "
                                    "from the agent", "the agent's work"], own
    branches = git(person.shop, "branch", "--format=%(refname:short) %(objectname)")
    if mode == "none":  # the control: the run moved them all
        assert f"main {main}" not in branches and "gone" not in branches
        assert git(person.shop, "rev-parse", "feature/other-task").strip() != main
        return
    assert done["sandboxed"] is True
    for name in ("main", "feature/other-task", "gone"):
        assert f"{name} {main}" in branches, branches


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_a_new_worktree_is_checked_out_in_its_runs_sandbox(client, api, person, mode):
    """The branch's `.gitattributes` names a filter the person's own config defines (as Git
    LFS's is), and a run may have written the branch: checking a task's new worktree out
    runs that filter on its files.  Sandboxed, the board makes the worktree without a
    checkout and the run's sandbox checks it out: the filter runs there (the sandbox's
    host name, no key, the run's egress proxy: a fetch of Git LFS's obeys the project's
    network policy), the agent finds the files smudged, and the person's CLAUDE.md, which
    the branch holds too, is not passed again.  The control: it ran as the board."""
    records, smudge = person.records, person.root / "smudge.sh"
    smudge.write_text(f'{{ hostname; echo "proxy=$HTTPS_PROXY"; cat "$HOME/.ssh/id_ed25519"; '
                      f'}} >> {records}/smudged 2>/dev/null\nsed s/^/smudged:/\n')
    with open(person.home / ".gitconfig", "a") as f:
        f.write(f'[filter "mark"]\n\tsmudge = sh {smudge}\n\tclean = cat\n')
    for name, text in [(".gitattributes", "data.txt filter=mark\n"), ("data.txt", "mine\n"),
                       ("CLAUDE.md", "Be brief.\n")]:
        (person.shop / name).write_text(text)
    git(person.shop, "add", ".")
    git(person.shop, "commit", "-qm", "a filtered file")
    project = api.project(permissionMode="auto-accept", autoBranch=1, sandbox=mode,
                          sandboxPaths={"readWrite": [str(records)]})
    task = api.task(project["id"], description=script('echo "SAW $(cat data.txt)"'))
    api.move(task["id"], "in_progress")
    wait_status(client, task["id"], "testing")
    assert "SAW smudged:mine" in said(client, task["id"])
    [call] = task_calls(records, task["id"])
    assert "--append-system-prompt" not in call["argv"], "the worktree has the same CLAUDE.md"
    smudged = (records / "smudged").read_text()
    if mode == "none":
        assert KEY in smudged and "sandbox" not in smudged.split("\n")
        return
    assert smudged.split("\n")[:2] == ["sandbox", f"proxy={PROXY}"], smudged
    assert KEY not in smudged


@pytest.mark.parametrize("then", ["bubblewrap", "none"])
def test_a_checkout_that_failed_in_the_sandbox_is_made_again_at_the_next_run(
        client, api, person, then):
    """The branch's filter fails in the run's sandbox (as a Git LFS fetch the network
    policy refuses would): the task fails saying the worktree could not be checked out,
    with git's words, and nothing is committed; once the person mends the filter, the next
    run checks it out whole, sandboxed or (the project's sandbox turned off) not."""
    filter_ = person.root / "smudge.sh"
    filter_.write_text("echo 'the filter broke' >&2; exit 3\n")
    with open(person.home / ".gitconfig", "a") as f:
        f.write(f'[filter "mark"]\n\tsmudge = sh {filter_}\n\tclean = cat\n'
                "\trequired = true\n")
    (person.shop / ".gitattributes").write_text("data.txt filter=mark\n")
    (person.shop / "data.txt").write_text("mine\n")
    git(person.shop, "add", ".")
    git(person.shop, "commit", "-qm", "a filtered file")
    project = api.project(permissionMode="auto-accept", autoBranch=1, sandbox="bubblewrap",
                          maxRetries=0, sandboxPaths={"readWrite": [str(person.records)]})
    task = api.task(project["id"], description=script('echo "SAW $(cat data.txt)"'))
    api.move(task["id"], "in_progress")
    failed = wait_status(client, task["id"], "failed")
    logs = "\n".join(e["message"] for e in client.get(f"/api/tasks/{task['id']}/logs").json)
    assert "could not be checked out in the sandbox" in logs and "the filter broke" in logs, \
        logs
    assert not said(client, task["id"]), failed
    assert "uncommitted" not in logs, "nothing of an agent's to commit"
    assert git(person.shop, "rev-parse", failed["branch_name"]) == git(
        person.shop, "rev-parse", "main")
    filter_.write_text("cat\n")
    if then == "none":
        client.put_json(f"/api/projects/{project['id']}", {"sandbox": "none"})
    api.move(task["id"], "in_progress")
    wait_status(client, task["id"], "testing")
    assert "SAW mine" in said(client, task["id"])


def test_a_link_on_the_way_to_a_new_branchs_reflog_is_never_written_through(
        client, api, person):
    """A run in the person's own checkout (no autoBranch) may write the repository's logs:
    it plants logs/refs/heads/feature as a link to ~/.ssh.  The board makes a sandboxed
    task's new worktree outside a sandbox (no checkout: nothing of the branch runs), and
    refuses a branch whose ref or reflog a link is on the way to: the task fails naming
    it, and nothing is written in ~/.ssh (a reflog there, as the board, before)."""
    logs = person.shop / ".git" / "logs" / "refs" / "heads"
    logs.mkdir(parents=True, exist_ok=True)
    os.symlink(person.home / ".ssh", logs / "feature")
    project = api.project(permissionMode="auto-accept", autoBranch=1, sandbox="bubblewrap")
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    failed = wait_status(client, task["id"], "failed")
    assert "is a link" in failed["last_error"] and str(logs / "feature") in \
        failed["last_error"], failed["last_error"]
    assert os.listdir(person.home / ".ssh") == ["id_ed25519"]


def test_a_branch_moved_during_a_run_stays_and_the_log_names_the_runs_commit(
        client, api, person):
    """The run's branch is put where its copy says only from where it was when the copy
    was made: moved by the person meanwhile, it stays, and the log names the run's commit
    so that nothing is lost."""
    project = api.project(permissionMode="auto-accept", autoBranch=1, sandbox="bubblewrap",
                          sandboxPaths={"readWrite": [str(person.records)]})
    marks = person.records
    task = api.task(project["id"], description=script(f"""
echo work > work.txt && git add work.txt && git commit -qm "the agent's work" &&
  git rev-parse HEAD > {marks}/committed.tmp && mv {marks}/committed.tmp {marks}/committed
until [ -e {marks}/go ]; do sleep 0.05; done
"""))
    api.move(task["id"], "in_progress")
    wait_for(lambda: (marks / "committed").exists(), RUN, message="the agent's commit")
    branch = client.get(f"/api/tasks/{task['id']}").json["branch_name"]
    mine = git(person.shop, "commit-tree", "-p", branch, "-m", "mine", f"{branch}^{{tree}}")
    git(person.shop, "update-ref", f"refs/heads/{branch}", mine.strip())
    (marks / "go").touch()
    wait_status(client, task["id"], "testing")
    assert git(person.shop, "rev-parse", branch) == mine
    ours = (marks / "committed").read_text().strip()
    refused = f"refused: the run's commits ({ours}) were not put on {branch}"
    assert any(refused in e["message"] for e in client.get(
        f"/api/tasks/{task['id']}/logs").json), "the log names the run's commit"


def test_a_checkout_that_is_a_worktree_of_the_persons_keeps_committing(client, api, person):
    """A project whose workingDir is a worktree the person made of a repository (no
    autoBranch) is the person's checkout, not a task's: its run commits on its branch
    there as it did before runs got a copy of refs."""
    checkout = person.home / "code" / "shop-feature"
    git(person.shop, "worktree", "add", "-q", "-b", "feature", str(checkout))
    project = api.project(permissionMode="auto-accept", sandbox="bubblewrap",
                          workingDir=str(checkout),
                          sandboxPaths={"readWrite": [str(person.records)]})
    task = api.task(project["id"], description=script(
        'echo x > x.txt && git add x.txt && git commit -qm "on feature" && echo GOT'))
    api.move(task["id"], "in_progress")
    assert wait_status(client, task["id"], "testing")["sandboxed"] is True
    assert "GOT" in said(client, task["id"])
    assert git(person.shop, "log", "-1", "--format=%s", "feature").strip() == "on feature"


def test_attempts_are_made_picked_and_cleared_by_the_boards_sandboxed_git(
        client, api, person, door):
    """Best of N in a sandboxed project: each attempt's worktree is made, diffed and, once
    one is picked, moved or removed by the board's git in the runs' sandbox; a worktree of
    the person's own, which that sandbox does not show, is not pruned for looking gone.
    The check each attempt gets after its run, sandboxed as the run was, has no network
    either: its run's way out closed with it (design §20)."""
    mine = person.home / "code" / "shop-mine"
    git(person.shop, "worktree", "add", "-q", "-b", "mine", str(mine))
    project = api.project(sandbox="bubblewrap", maxConcurrent=2, stopCheckMaxBlocks=0,
                          stopCheckCommand=f'python3 -c "{knocks(door.getsockname()[1])}"',
                          sandboxPaths={"readWrite": [str(person.records)]})
    task = api.task(project["id"], description="fake:ok fake:write=mine.txt")
    client.post_json(f"/api/tasks/{task['id']}/attempts", {"agents": [
        {"agent": "claude"}, {"agent": "claude", "model": "model_small"}]}, status=202)
    wait_status(client, task["id"], "testing")
    first, second = client.get(f"/api/tasks/{task['id']}/attempts").json
    assert first["diff"]["files"] == second["diff"]["files"] == 1, (first, second)
    assert "ConnectionRefusedError" in first["check"]["output"], first["check"]
    assert not knocked(door), "a check after its run reaches no port of the machine"
    client.post(f"/api/tasks/{task['id']}/attempts/1/pick")
    picked = client.get(f"/api/tasks/{task['id']}").json
    assert picked["branch_name"] == first["branch"]
    assert "mine.txt" in desk(client, "get_task_diff", {"taskId": task["id"]}).json["diff"]
    assert second["branch"] not in git(person.shop, "branch", "--list").split()
    folder = person.data / "worktrees" / str(project["id"])
    assert sorted(os.listdir(folder)) == [".refs", task["task_key"]]
    assert os.listdir(folder / ".refs") == [], "the attempts' copies of refs go with them"
    assert str(mine) in git(person.shop, "worktree", "list"), "the person's own is kept"


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_a_planted_commondir_neither_runs_its_config_nor_binds_its_links(
        client, api, person, mode):
    """A run in the checkout itself (no autoBranch, the default) makes `.git/evil` a common
    dir of its own (objects and refs back to the real ones, `logs` a relative link to
    ~/.ssh, a config naming a clean filter and a diff.external, info/attributes using the
    filter) and writes `evil` into `.git/commondir`.  The board's diff of the task ran the
    filter as the board; the next run had git's answer bound: ~/.ssh read-write.
    Sandboxed, the diff's filter runs blind and the resumed run sees no key, while both
    runs' edits land and the session resumes."""
    project = api.project(permissionMode="auto-accept", sandbox=mode,
                          sandboxPaths={"readWrite": [str(person.records)]})
    task = api.task(project["id"], description=script(f"""
echo first >> README.md && top=$(pwd)
cat > .thief.sh <<'EOF'
{thief(person.marks, "stolen-by-diff")}EOF
mkdir .git/evil && cd .git/evil && ln -s ../objects objects && ln -s ../refs refs &&
  ln -s ../../../../.ssh logs && mkdir info && echo '* filter=ev' > info/attributes
printf '[core]\\n\\trepositoryformatversion = 0\\n[filter "ev"]\\n\\tclean = sh %s\\n' \\
  "$top/.thief.sh" > config
printf '[diff]\\n\\texternal = sh %s\\n' "$top/.thief.sh" >> config
cd ../.. && echo evil > .git/commondir && echo planted
"""))
    api.move(task["id"], "in_progress")
    wait_status(client, task["id"], "testing")
    assert "planted" in said(client, task["id"])
    diff = desk(client, "get_task_diff", {"taskId": task["id"]}).json
    assert "+first" in diff["diff"], diff
    desk(client, "request_changes", {"id": task["id"], "feedback": script("""
echo second >> README.md
grep -q OPENSSH .git/evil/logs/id_ed25519 && echo "GOT the key through .git"
grep -q OPENSSH "$HOME/.ssh/id_ed25519" && echo "GOT the key"
echo resumed
""")})
    again = wait_status(client, task["id"], "testing")
    out = said(client, task["id"])
    assert "resumed" in out, out
    assert (person.shop / "README.md").read_text() == "# Shop\nfirst\nsecond\n"
    stolen = person.marks / "stolen-by-diff"
    if mode == "none":  # the control: the script's filter ran as the board; the link works
        assert KEY in stolen.read_text()
        assert "GOT the key through .git" in out
        return
    assert again["sandboxed"] is True
    assert "GOT" not in out, out
    assert not stolen.exists(), stolen.read_text()
    calls = [c for c in (person.records / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 2 and '"resumed": true' in calls[1]


@pytest.fixture
def sshd(person):
    from ssh_helpers import SshServer, sshd_missing
    if sshd_missing() is not None:
        unavailable(sshd_missing())
    server = SshServer(person.root)
    shutil.copy(person.home / ".gitconfig", server.home)  # the login's own identity there
    yield server
    server.stop()


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_on_a_host_a_nested_repository_never_runs_as_the_board(client, api, person, sshd,
                                                                mode):
    """The first escape on a host (its baseDir beside the person's home here): the board's
    end-of-run commit there, over ssh, runs in the run's sandbox there as it does here."""
    from ssh_helpers import trusted_host
    host = trusted_host(client, sshd, person.root)
    project = api.project(host=host["id"], repoUrl=str(person.shop), sandbox=mode,
                          permissionMode="auto-accept", slug=f"far-{mode}",
                          sandboxPaths={"readWrite": [str(person.records)]})
    task = api.task(project["id"], description=script(f"""
printf 'id >> {person.marks}/ran-on-host; cat\\n' > .thief.sh && top=$(pwd)
mkdir sub && cd sub && git init -q && echo x > f && git add f && git commit -qm sub
git config filter.ev.clean "sh $top/.thief.sh" && echo '* filter=ev' > .git/info/attributes
cd .. && git add sub && git commit -qm "a nested repository" && echo "GOT its commit"
touch -d '2001-01-01 00:00' sub/f
echo left > left.txt
"""))
    api.move(task["id"], "in_progress")
    done = wait_status(client, task["id"], "testing", timeout=4 * RUN)
    assert "GOT its commit" in said(client, task["id"])
    clone = person.root / "host" / "repos" / project["slug"]
    assert "uncommitted changes from the agent" in git(clone, "log", "--format=%s",
                                                       done["branch_name"])
    ran = person.marks / "ran-on-host"
    if mode == "none":  # the control: the board's git there ran the agent's filter
        assert ran.exists()
        return
    assert done["sandboxed"] is True
    assert not ran.exists(), ran.read_text()


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_a_worktrees_link_never_makes_the_boards_prune_empty_the_repository(
        client, api, person, mode):
    """A run in the checkout itself makes `.git/worktrees` a link to `.git`: the board's next
    `git worktree prune` (making a task's worktree once autoBranch is on) took every folder
    of `.git` for a stale worktree and removed it.  Sandboxed the link cannot be made (the
    folder is made and bound read-only first); unsandboxed (the control) it is, and the
    board refuses to work on that repository's worktrees rather than prune through it."""
    project = api.project(permissionMode="auto-accept", sandbox=mode,
                          sandboxPaths={"readWrite": [str(person.records)]})
    first = api.task(project["id"], description=script(
        "rmdir .git/worktrees 2>/dev/null; ln -s . .git/worktrees && echo planted"))
    api.move(first["id"], "in_progress")
    wait_status(client, first["id"], "testing")
    client.put_json(f"/api/projects/{project['id']}", {"autoBranch": 1})
    second = api.task(project["id"], description="fake:ok")
    api.move(second["id"], "in_progress")
    if mode == "none":
        assert "planted" in said(client, first["id"])
        failed = wait_status(client, second["id"], "failed")
        assert "worktrees folder is a link" in failed["last_error"], failed
    else:
        assert "planted" not in said(client, first["id"])
        assert not (person.shop / ".git" / "worktrees").is_symlink()
        wait_status(client, second["id"], "testing")
    assert (person.shop / ".git" / "objects").is_dir(), "the repository is whole"
    assert "initial" in git(person.shop, "log", "--format=%s", "--all")
