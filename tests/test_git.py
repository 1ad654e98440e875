"""Git: per-task worktrees and branches (autoBranch), commits and diffs (design.md §10).

Every test makes a real git repository as the project's workingDir and runs the scripted
tests/fake_agent.py (its directives go in the task description: fake:write=NAME leaves a
file uncommitted, fake:commit=NAME commits one; each spawn's cwd is in calls.jsonl).
The source-host half (autoPr, issues) is in test_git_host.py.
"""
import os
import shutil
import subprocess

import pytest

import taskboard
from agent_helpers import (
    RUN,
    get_task,
    logs,
    read_calls,
    start,
    task_calls,
    wait_running,
    wait_status,
)
from conftest import assert_error, desk, git, stats, wait_for, worktree_of

pytestmark = pytest.mark.usefixtures("fast_retries")


# --- helpers ----------------------------------------------------------------------------


def commit_file(repo, name, text, message):
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)


def branches(repo):
    return git(repo, "branch", "--format=%(refname:short)").split()


def worktrees(repo):
    """The paths of the repository's linked worktrees (its own checkout left out)."""
    paths = [line.split(" ", 1)[1] for line in
             git(repo, "worktree", "list", "--porcelain").splitlines()
             if line.startswith("worktree ")]
    return [os.path.realpath(p) for p in paths[1:]]


def checkout_state(repo):
    """All a user could notice of their checkout: branch, HEAD, status, files."""
    return {"branch": git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip(),
            "head": git(repo, "rev-parse", "HEAD").strip(),
            "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
            "files": sorted(os.listdir(repo))}


def diff_of(client, task_id):
    return desk(client, "get_task_diff", {"taskId": task_id}).json


def commits_of(client, task_id):
    return client.get(f"/api/tasks/{task_id}/detail").json["commits"]


def messages(client, task_id):
    return [e["message"] for e in logs(client, task_id)]


def wait_gone(path, repo=None):
    """Wait for a worktree's folder to go and, given its repository, for the repository to
    forget it too (its prune comes after the folder goes)."""
    wait_for(lambda: not os.path.exists(path), RUN, message=f"{path} to be removed")
    if repo is not None:
        wait_for(lambda: os.path.realpath(path) not in worktrees(repo), RUN,
                 message=f"{repo} to forget the worktree {path}")


# --- the worktree of a task ---------------------------------------------------------------


def test_task_runs_in_its_own_worktree_on_its_branch_and_the_checkout_is_untouched(
        tb, client, api, repo, agent_dir):
    git(repo, "checkout", "-q", "-b", "topic")  # the user works on another branch ...
    commit_file(repo, "topic.txt", "not on main\n", "topic work")
    (repo / "README.md").write_text("# Shop\nedited, not committed\n")  # ... with edits
    (repo / "scratch.txt").write_text("staged\n")
    git(repo, "add", "scratch.txt")
    (repo / "notes.txt").write_text("untracked\n")
    before = checkout_state(repo)
    project = api.project(autoBranch=True)

    task = api.task(project["id"], title="Write tests!", description="fake:ok fake:write=hello.txt")
    api.move(task["id"], "in_progress")
    done = wait_status(client, task["id"], "testing")

    key = task["task_key"]
    assert done["branch_name"] == f"feature/{key.lower()}-write-tests"
    path = worktree_of(tb, task)
    [call] = task_calls(agent_dir, task["id"])
    assert os.path.realpath(call["cwd"]) == os.path.realpath(path)
    assert worktrees(repo) == [os.path.realpath(path)]
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD").strip() == done["branch_name"]
    assert (os.path.exists(os.path.join(path, "README.md"))
            and not os.path.exists(os.path.join(path, "topic.txt"))), "made from main"
    assert checkout_state(repo) == before
    assert "hello.txt" not in os.listdir(repo)


def append_system_prompt(call):
    """The text a run got with --append-system-prompt, None without it."""
    argv = call["argv"]
    return argv[argv.index("--append-system-prompt") + 1] \
        if "--append-system-prompt" in argv else None


def test_a_worktree_run_gets_the_checkouts_agent_instructions_it_lacks(
        tb, client, api, repo, agent_dir):
    """design §4: the CLI reads CLAUDE.md in its cwd only; the checkout's, not committed to
    the base branch (or changed since), reaches a worktree run as an extra system prompt."""
    (repo / "CLAUDE.md").write_text("Run make lint before you commit.\n")
    project = api.project(autoBranch=True)
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    wait_status(client, task["id"], "testing")
    commit_file(repo, "CLAUDE.md", "Run make lint before you commit.\n", "instructions")
    same = api.task(project["id"], description="fake:ok")  # its worktree has the same file
    api.move(same["id"], "in_progress")
    wait_status(client, same["id"], "testing")
    unbranched = api.project(slug="plain")  # runs in the checkout, which the CLI reads
    plain = api.task(unbranched["id"], description="fake:ok")
    api.move(plain["id"], "in_progress")
    wait_status(client, plain["id"], "testing")

    [lacking] = task_calls(agent_dir, task["id"])
    assert append_system_prompt(lacking) == "Run make lint before you commit.\n"
    assert append_system_prompt(task_calls(agent_dir, same["id"])[0]) is None
    assert append_system_prompt(task_calls(agent_dir, plain["id"])[0]) is None


def test_agent_instructions_a_run_planted_are_read_as_absent_or_capped(
        tb, client, api, repo, agent_dir):
    """Issue 55: the board reads CLAUDE.md as a regular file only, never through a link nor
    blocking on a FIFO, and at most MAX_INSTRUCTIONS_CHARS of it: a FIFO, a link or a 1 GB
    file there is absent or cut, never a hang (the board's hub would stop with it)."""
    project = api.project(autoBranch=True)
    instructions = repo / "CLAUDE.md"

    def told():
        """What a run in a worktree is told of CLAUDE.md; what get_agent_md answers."""
        task = api.task(project["id"], description="fake:ok")
        api.move(task["id"], "in_progress")
        wait_status(client, task["id"], "testing")
        shown = desk(client, "get_agent_md", {"projectId": project["id"]}, status="*")
        return append_system_prompt(task_calls(agent_dir, task["id"])[0]), shown

    (repo / "secret.txt").write_text("the board's eyes only\n")
    os.symlink(repo / "secret.txt", instructions)
    for planted in ("link", "fifo"):
        told_run, shown = told()
        assert told_run is None, planted
        assert_error(shown, 409)
        instructions.unlink()
        if planted == "link":
            os.mkfifo(instructions)  # nobody writes it: a blocking open would wait for ever
    with open(instructions, "wb") as f:  # 1 GB, sparse past its first 500 kB of text
        f.write(b"Be brief. " * 50_000)
        f.truncate(1 << 30)
    told_run, shown = told()
    assert told_run.startswith("Be brief. ")
    assert len(told_run) == len(shown.json["content"]) == taskboard.MAX_INSTRUCTIONS_CHARS


def test_branch_starts_from_pr_base_branch_else_origins_copy_else_head(tb, client, api, repo,
                                                                      tmp_path):
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "checkout", "-q", "-b", "release")
    commit_file(repo, "release.txt", "on origin's release only\n", "release work")
    git(repo, "push", "-q", "origin", "release")
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "release")  # only origin/release is left
    commit_file(repo, "head.txt", "on main\n", "main work")
    cases = {"main": "head.txt", "release": "release.txt", "nowhere": "head.txt"}
    for base, expected in cases.items():
        project = api.project(autoBranch=True, prBaseBranch=base)
        tid = start(api, project, "fake:ok")
        task = wait_status(client, tid, "testing")
        files = os.listdir(worktree_of(tb, task))
        assert expected in files, (base, files)
        if base == "release":
            assert "head.txt" not in files


def test_leftover_changes_are_committed_at_the_end_of_each_run(tb, client, api, repo):
    project = api.project(autoBranch=True)
    tid = start(api, project, "fake:ok fake:commit=made.txt fake:write=left.txt")
    task = wait_status(client, tid, "testing")
    path = worktree_of(tb, task)
    assert git(path, "status", "--porcelain") == ""
    key = task["task_key"]
    assert git(repo, "log", "--format=%s", f"main..{task['branch_name']}").splitlines() == [
        f"{key}: uncommitted changes from the agent", "fake agent: made.txt"]
    assert git(repo, "show", f"{task['branch_name']}:left.txt").startswith("written by fake")
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert any("committed the changes" in m for m in messages(client, tid))


def test_commits_are_those_of_the_branch_since_the_base(tb, client, api, repo):
    project = api.project(autoBranch=True)
    tid = start(api, project, "fake:ok fake:commit=made.txt fake:write=left.txt")
    task = wait_status(client, tid, "testing")
    commit_file(repo, "later.txt", "main moved on\n", "later on main")  # not the task's

    commits = commits_of(client, tid)
    assert [c["message"] for c in commits] == [
        f"{task['task_key']}: uncommitted changes from the agent", "fake agent: made.txt"]
    assert [c["hash"] for c in commits] == git(
        repo, "log", "--format=%H", f"main..{task['branch_name']}").split()
    assert commits[1]["author"] == "Fake Agent"
    assert all(c["date"][:4].isdigit() and "T" in c["date"] for c in commits)


def test_diff_is_the_branch_against_its_merge_base_with_uncommitted_work(tb, client, api,
                                                                         repo):
    project = api.project(autoBranch=True)
    tid = start(api, project, "fake:ok fake:commit=made.txt fake:write=left.txt")
    task = wait_status(client, tid, "testing")
    commit_file(repo, "README.md", "# Shop\nmain moved on\n", "later on main")
    path = worktree_of(tb, task)
    with open(os.path.join(path, "made.txt"), "a") as f:  # uncommitted, in the worktree
        f.write("one more line\n")

    diff = diff_of(client, tid)
    assert diff["branch"] == task["branch_name"]
    assert diff["stats"] == {"files": 2, "insertions": 3, "deletions": 0}
    assert "+++ b/made.txt" in diff["diff"] and "+++ b/left.txt" in diff["diff"]
    assert "+one more line" in diff["diff"]
    assert "README.md" not in diff["diff"], "main's own later work is not the task's"


@pytest.mark.parametrize("auto_branch", [True, False], ids=["worktree", "checkout"])
def test_diff_includes_a_new_file_the_agent_has_not_committed_yet(tb, client, api, repo,
                                                                  agent_dir, auto_branch):
    project = api.project(autoBranch=auto_branch)
    tid = start(api, project, "fake:hang fake:write=new.txt")
    call = wait_running(client, tid, agent_dir)
    wait_for(lambda: os.path.exists(os.path.join(call["cwd"], "new.txt")), RUN,
             message="the agent to write new.txt")
    diff = diff_of(client, tid)
    assert "new.txt" in diff["diff"]
    assert diff["stats"]["files"] == 1


def test_diff_is_cut_at_max_diff_bytes_with_a_marker(tb, client, api, repo, monkeypatch):
    project = api.project(autoBranch=True)
    tid = start(api, project, "fake:ok")
    task = wait_status(client, tid, "testing")
    path = worktree_of(tb, task)
    with open(os.path.join(path, "big.txt"), "w") as f:
        f.write("".join(f"line {i} of a long file\n" for i in range(200)))
    git(path, "add", "big.txt")
    whole = diff_of(client, tid)
    assert "diff truncated" not in whole["diff"] and len(whole["diff"]) > 4000

    monkeypatch.setattr(taskboard, "MAX_DIFF_BYTES", 1000)
    cut = diff_of(client, tid)
    head, marker, _ = cut["diff"].partition("diff truncated")
    assert marker, cut["diff"][-200:]
    assert whole["diff"].startswith(head.rstrip("… \n")) and len(head.encode()) <= 1000 + 10
    assert len(cut["diff"]) < 1200
    assert cut["stats"] == whole["stats"] == {"files": 1, "insertions": 200, "deletions": 0}


# --- one worktree for every run of a task ------------------------------------------------


def test_revision_and_restart_reuse_the_worktree_and_its_session(tb, client, api, repo,
                                                                  agent_dir):
    project = api.project(autoBranch=True)
    tid = start(api, project, "fake:ok fake:write=one.txt")
    task = wait_status(client, tid, "testing")
    desk(client, "request_changes", {"id": tid, "feedback": "Add two. fake:write=two.txt"})
    wait_for(lambda: len(task_calls(agent_dir, tid)) == 2, RUN, message="the revision's run")
    wait_status(client, tid, "testing")
    desk(client, "restart_task", {"id": tid})
    wait_for(lambda: len(task_calls(agent_dir, tid)) == 3, RUN, message="the restarted run")
    task = wait_status(client, tid, "testing")

    first, revision, restart = task_calls(agent_dir, tid)
    path = os.path.realpath(worktree_of(tb, task))
    assert {os.path.realpath(c["cwd"]) for c in (first, revision, restart)} == {path}
    # the fake agent resumes a session only in the cwd it was saved in
    assert revision["resumed"] and revision["session_id"] == first["session_id"]
    assert "--resume" not in restart["argv"]
    assert worktrees(repo) == [path]
    files = git(repo, "ls-tree", "--name-only", task["branch_name"]).split()
    assert "one.txt" in files and "two.txt" in files
    assert len(commits_of(client, tid)) == 3  # one leftover commit per run


def test_verifier_checks_the_worktree_then_done_removes_it_and_keeps_the_branch(
        tb, client, api, repo, agent_dir):
    project = api.project(autoBranch=True, autoTest=True)
    tid = start(api, project, "fake:ok fake:write=one.txt fake:verdict=approve")
    wait_status(client, tid, "done")
    task = get_task(client, tid)
    path = worktree_of(tb, task)
    agent, verifier = read_calls(agent_dir)
    assert verifier["stdin"].startswith("You are reviewing")
    assert os.path.realpath(verifier["cwd"]) == os.path.realpath(agent["cwd"]) \
        == os.path.realpath(path)

    wait_gone(path, repo)
    assert worktrees(repo) == []
    assert task["branch_name"] in branches(repo)
    assert "one.txt" in git(repo, "ls-tree", "--name-only", task["branch_name"])
    assert [c["message"] for c in commits_of(client, tid)] == [
        f"{task['task_key']}: uncommitted changes from the agent"]
    diff = diff_of(client, tid)  # read from the kept branch now
    assert "+++ b/one.txt" in diff["diff"] and diff["stats"]["files"] == 1


def test_a_running_task_moved_to_done_keeps_the_agents_uncommitted_work(tb, client, api, repo,
                                                                       agent_dir):
    project = api.project(autoBranch=True)
    tid = start(api, project, "fake:hang fake:write=wip.txt")
    call = wait_running(client, tid, agent_dir)
    wait_for(lambda: os.path.exists(os.path.join(call["cwd"], "wip.txt")), RUN,
             message="the agent to write wip.txt")
    api.move(tid, "done")
    task = get_task(client, tid)
    wait_gone(worktree_of(tb, task))
    assert task["branch_name"] in branches(repo)
    assert "wip.txt" in git(repo, "ls-tree", "--name-only", task["branch_name"])


def test_done_deletes_a_branch_without_commits_of_its_own(tb, client, api, repo):
    project = api.project(autoBranch=True)
    tid = start(api, project, "fake:ok")  # says it made hello.txt, but changes nothing
    task = wait_status(client, tid, "testing")
    assert task["branch_name"] in branches(repo)
    api.move(tid, "done")
    wait_gone(worktree_of(tb, task), repo)
    wait_for(lambda: task["branch_name"] not in branches(repo), RUN,
             message="the empty branch to be deleted")
    assert branches(repo) == ["main"] and worktrees(repo) == []


def test_done_task_worked_on_again_gets_its_worktree_back_from_its_branch(
        tb, client, api, repo, agent_dir):
    project = api.project(autoBranch=True)
    tid = start(api, project, "fake:ok fake:write=one.txt")
    task = wait_status(client, tid, "testing")
    [earlier] = commits_of(client, tid)
    api.move(tid, "done")
    path = worktree_of(tb, task)
    wait_gone(path)

    api.move(tid, "in_progress")
    wait_for(lambda: len(task_calls(agent_dir, tid)) == 2, RUN, message="the second run")
    again = wait_status(client, tid, "testing")
    assert again["branch_name"] == task["branch_name"]
    second = task_calls(agent_dir, tid)[1]
    assert os.path.realpath(second["cwd"]) == os.path.realpath(path)
    assert earlier["hash"] in git(path, "log", "--format=%H").split()
    assert len(commits_of(client, tid)) == 2
    with open(os.path.join(path, "one.txt")) as f:  # both runs' lines
        assert len(f.read().splitlines()) == 2
    assert any("made again from branch" in m for m in messages(client, tid))


def test_changes_requested_on_a_done_task_resume_its_session_in_the_same_worktree(
        tb, client, api, repo, agent_dir):
    project = api.project(autoBranch=True)
    tid = start(api, project, "fake:ok fake:write=one.txt")
    task = wait_status(client, tid, "testing")
    api.move(tid, "done")
    wait_gone(worktree_of(tb, task))
    desk(client, "request_changes", {"id": tid, "feedback": "More. fake:write=two.txt"})
    wait_for(lambda: len(task_calls(agent_dir, tid)) == 2, RUN, message="the revision's run")
    wait_status(client, tid, "testing")
    first, revision = task_calls(agent_dir, tid)
    assert os.path.realpath(revision["cwd"]) == os.path.realpath(worktree_of(tb, task))
    assert revision["resumed"] and revision["session_id"] == first["session_id"]
    assert not any("No conversation found" in m for m in messages(client, tid))
    files = git(repo, "ls-tree", "--name-only", task["branch_name"]).split()
    assert "one.txt" in files and "two.txt" in files


def test_two_tasks_of_a_project_run_at_once_in_two_worktrees(tb, client, api, repo,
                                                             agent_dir):
    project = api.project(autoBranch=True, maxConcurrent=2)
    a = start(api, project, "fake:hang fake:write=a.txt")
    b = start(api, project, "fake:hang fake:write=b.txt")
    call_a = wait_running(client, a, agent_dir)
    call_b = wait_running(client, b, agent_dir)
    task_a, task_b = get_task(client, a), get_task(client, b)
    assert os.path.realpath(call_a["cwd"]) == os.path.realpath(worktree_of(tb, task_a))
    assert os.path.realpath(call_b["cwd"]) == os.path.realpath(worktree_of(tb, task_b))
    assert call_a["cwd"] != call_b["cwd"] and task_a["branch_name"] != task_b["branch_name"]
    wait_for(lambda: os.path.exists(os.path.join(call_b["cwd"], "b.txt")), RUN,
             message="b.txt in B's worktree")
    assert not os.path.exists(os.path.join(call_b["cwd"], "a.txt"))
    assert sorted(worktrees(repo)) == sorted(os.path.realpath(c["cwd"])
                                             for c in (call_a, call_b))
    assert not any("one checkout" in m for m in messages(client, a) + messages(client, b))


def test_deleting_a_task_removes_its_worktree(tb, client, api, repo, agent_dir):
    project = api.project(autoBranch=True)
    tid = start(api, project, "fake:hang fake:write=wip.txt")
    wait_running(client, tid, agent_dir)
    task = get_task(client, tid)
    path = worktree_of(tb, task)
    assert os.path.isdir(path)
    client.delete(f"/api/tasks/{tid}", status=200)
    wait_gone(path, repo)
    assert worktrees(repo) == []
    assert checkout_state(repo)["status"] == ""


@pytest.mark.parametrize("kind", ["plain folder", "repository without a commit"])
def test_outside_a_git_repository_the_task_runs_in_working_dir_and_says_why(
        tb, client, api, agent_dir, repo, kind):
    project = api.project(autoBranch=True)  # (refused outside a repository with a commit)
    if kind == "plain folder":  # the repository went away since
        shutil.rmtree(repo / ".git")
    else:
        git(repo, "update-ref", "-d", "HEAD")
    tid = start(api, project, "fake:ok fake:write=hello.txt")
    task = wait_status(client, tid, "testing")
    [call] = task_calls(agent_dir, tid)
    assert os.path.realpath(call["cwd"]) == os.path.realpath(api.workdir)
    assert task["branch_name"] is None
    assert (api.workdir / "hello.txt").exists()
    assert any("no branch made" in m for m in messages(client, tid))
    assert not os.path.exists(os.path.join(tb.data_dir, "worktrees", str(project["id"])))
    assert stats(client, project["id"])["worktrees"] == 0


def test_worktree_count_and_bytes_are_in_the_project_stats(tb, client, api, repo, agent_dir):
    project = api.project(autoBranch=True)
    other = api.project(autoBranch=True)
    tid = start(api, project, "fake:hang")
    wait_running(client, tid, agent_dir)
    now = stats(client, project["id"])
    assert now["worktrees"] == 1 and now["worktreeBytes"] > 0
    assert (stats(client, other["id"])["worktrees"], stats(client, other["id"])["worktreeBytes"]) \
        == (0, 0)
    api.move(tid, "done")
    wait_gone(worktree_of(tb, get_task(client, tid)))
    after = stats(client, project["id"])
    assert (after["worktrees"], after["worktreeBytes"]) == (0, 0)


def test_start_up_prunes_worktrees_whose_folder_is_gone(tb, client, api, repo):
    project = api.project(autoBranch=True)
    tid = start(api, project, "fake:ok")
    path = worktree_of(tb, wait_status(client, tid, "testing"))
    taskboard.shutdown()
    subprocess.run(["rm", "-rf", path], check=True)
    assert "prunable" in git(repo, "worktree", "list", "--porcelain")
    taskboard.init(tb.config)
    wait_for(lambda: worktrees(repo) == [], RUN, message="git worktree prune at start-up")


# --- without autoBranch: the user's checkout --------------------------------------------


def test_max_concurrent_above_one_without_auto_branch_warns_in_every_run(client, api, repo,
                                                                          agent_dir):
    shared = api.project(maxConcurrent=2)
    single = api.project(maxConcurrent=1)
    branched = api.project(maxConcurrent=2, autoBranch=True)
    warned = start(api, shared, "fake:ok")
    wait_status(client, warned, "testing")
    desk(client, "request_changes", {"id": warned, "feedback": "Again."})
    wait_for(lambda: len(task_calls(agent_dir, warned)) == 2, RUN, message="the second run")
    wait_status(client, warned, "testing")
    quiet = [start(api, p, "fake:ok") for p in (single, branched)]
    for tid in quiet:
        wait_status(client, tid, "testing")

    warnings = [m for m in messages(client, warned) if m.startswith("warning")]
    assert len(warnings) == 2
    assert all("one checkout" in w and "autoBranch" in w for w in warnings)
    for tid in quiet:
        assert not any("one checkout" in m for m in messages(client, tid))


def test_without_auto_branch_commits_and_diff_come_from_the_runs_heads(client, api, repo,
                                                                       agent_dir):
    commit_file(repo, "before.txt", "before the task\n", "before the task")
    project = api.project()
    tid = start(api, project, "fake:ok fake:commit=made.txt")
    task = wait_status(client, tid, "testing")
    [call] = task_calls(agent_dir, tid)
    assert os.path.realpath(call["cwd"]) == os.path.realpath(repo)
    assert task["branch_name"] is None
    commit_file(repo, "after.txt", "after the run\n", "after the run")  # not the task's
    (repo / "README.md").write_text("# Shop\nuncommitted edit\n")

    assert [c["message"] for c in commits_of(client, tid)] == ["fake agent: made.txt"]
    diff = diff_of(client, tid)
    assert diff["branch"] == "main"
    assert "+++ b/made.txt" in diff["diff"] and "+uncommitted edit" in diff["diff"]
    assert "before.txt" not in diff["diff"]


def test_without_auto_branch_the_board_never_commits_in_the_users_checkout(
        tb, client, api, repo, agent_dir):
    project = api.project()
    tid = start(api, project, "fake:ok fake:write=left.txt")
    wait_status(client, tid, "testing")
    desk(client, "request_changes", {"id": tid, "feedback": "More. fake:write=more.txt"})
    wait_for(lambda: len(read_calls(agent_dir)) == 2, RUN, message="the revision's run")
    wait_status(client, tid, "testing")
    assert git(repo, "log", "--format=%s").splitlines() == ["initial"]
    assert git(repo, "status", "--porcelain") == "?? left.txt\n?? more.txt\n"
    assert commits_of(client, tid) == []
    assert branches(repo) == ["main"]
    assert not os.path.exists(os.path.join(tb.data_dir, "worktrees"))
