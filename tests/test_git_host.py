"""The source host: pull requests (autoPr) and issue sync (gitHostSyncEnabled), design.md §10.

The host is faked by tests/git_host_helpers.py's FakeHost, which records every request and
answers scripted routes; the board is pointed at it through tb.config["git_host_api"] /
["git_host_token"].
Pushes go to a bare repository made by the test as `origin`.  Runs use tests/fake_agent.py.
"""
import os

import pytest
from git_host_helpers import REPO, TOKEN, FakeHost, add_origin

import taskboard
from agent_helpers import RUN, get_task, logs, task_calls, wait_running, wait_status
from conftest import assert_error, git, tasks_of, wait_for, worktree_of

pytestmark = pytest.mark.usefixtures("fast_retries")


@pytest.fixture
def host(tb):
    fake = FakeHost()
    tb.config["git_host_api"] = fake.url
    tb.config["git_host_token"] = TOKEN
    yield fake
    fake.stop()


def logged(client, task_id, text, error):
    """The task's log entries containing `text` (is_error or not, as `error` says), once
    there is one: the log is written in batches."""
    return wait_for(lambda: [e for e in logs(client, task_id)
                             if bool(e["isError"]) == error and text in e["message"]], RUN,
                    message=f"an entry of task {task_id} saying {text!r} (error: {error})")


def finish(client, api, project, description="fake:ok fake:write=hello.txt", **fields):
    """A task whose agent works and finishes (-> testing), then moved to done by hand."""
    task = api.task(project["id"], description=description, **fields)
    api.move(task["id"], "in_progress")
    wait_status(client, task["id"], "testing")
    api.move(task["id"], "done")
    return get_task(client, task["id"])


def enable_sync(client, project_id, repo=REPO):
    return client.put_json(f"/api/projects/{project_id}", {
        "gitHostRepo": repo, "gitHostSyncEnabled": 1}, status=200).json


def issue(number, title, body="", labels=(), **extra):
    return {"number": number, "title": title, "body": body, "state": "open",
            "html_url": f"https://git.example/{REPO}/issues/{number}",
            "labels": [{"name": name} for name in labels], **extra}


# --- pull requests (autoPr) -------------------------------------------------------------


def test_auto_pr_pushes_the_branch_and_opens_a_pull_request(tb, client, api, repo, host,
                                                           tmp_path):
    origin = add_origin(repo, tmp_path / "origin.git")
    url = f"https://git.example/{REPO}/pull/7"
    host.route("POST", f"/repos/{REPO}/pulls", (201, {"number": 7, "html_url": url}))
    project = api.project(autoBranch=True, autoPr=True, gitHostRepo=REPO)
    task = finish(client, api, project, "Greet the user. fake:ok fake:write=hello.txt",
                  title="Add a greeting", acceptance_criteria="hello.txt says hello")

    wait_for(lambda: get_task(client, task["id"])["pr_url"] == url, RUN, message="pr_url")
    branch = task["branch_name"]
    assert git(origin, "rev-parse", branch) == git(repo, "rev-parse", branch)
    [call] = host.calls("POST")
    assert call["path"] == f"/repos/{REPO}/pulls"
    assert call["headers"]["Authorization"] == f"Bearer {TOKEN}"
    body = call["json"]
    assert body["title"] == f"{task['task_key']}: Add a greeting"
    assert (body["head"], body["base"]) == (branch, "main")
    for part in (task["task_key"], "Greet the user.", "hello.txt says hello"):
        assert part in body["body"]
    logged(client, task["id"], url, error=False)
    assert get_task(client, task["id"])["status"] == "done"


def test_auto_pr_for_an_existing_pull_request_looks_it_up(tb, client, api, repo, host,
                                                         tmp_path):
    add_origin(repo, tmp_path / "origin.git")
    url = f"https://git.example/{REPO}/pull/3"
    host.route("POST", f"/repos/{REPO}/pulls", (422, {
        "message": "Validation Failed", "errors": [{
            "resource": "PullRequest", "code": "custom",
            "message": "A pull request already exists for acme:feature/x."}]}))
    host.route("GET", f"/repos/{REPO}/pulls", (200, [{"number": 3, "html_url": url}]))
    project = api.project(autoBranch=True, autoPr=True, gitHostRepo=REPO)
    task = finish(client, api, project)

    wait_for(lambda: get_task(client, task["id"])["pr_url"] == url, RUN, message="pr_url")
    post, lookup = host.calls()[:2]  # then the board follows the PR (a 404 here)
    assert post["method"] == "POST"
    assert (lookup["method"], lookup["path"]) == ("GET", f"/repos/{REPO}/pulls")
    assert lookup["query"] == {"state": ["open"], "head": [f"acme:{task['branch_name']}"]}
    assert lookup["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert not any(e["isError"] for e in logs(client, task["id"]) if e["kind"] != "pr")


#: How autoPr fails: the host's answer to the POST (None: no request) and the logged words.
PR_FAILURES = {
    "no branch": (None, "autoBranch"),
    "no origin": (None, "origin"),
    "no repository": (None, "gitHostRepo"),
    "401": ((401, {"message": "Bad credentials"}), "401"),
    "422": ((422, {"message": "Validation Failed",
                   "errors": [{"message": "No commits between main and the branch"}]}), "422"),
    "500": ((500, {"message": "Server Error"}), "500"),
}


@pytest.mark.parametrize("case", PR_FAILURES)
def test_auto_pr_failure_is_logged_and_the_task_stays_done(tb, client, api, repo, host,
                                                          tmp_path, case):
    answer, error = PR_FAILURES[case]
    gone = tmp_path / "a host-less path"  # no owner/repo can be read from this origin
    gone.mkdir()
    if case == "no repository":
        add_origin(repo, gone / "origin.git")
    elif case != "no origin":
        add_origin(repo, tmp_path / "origin.git")
    if answer:
        host.route("POST", f"/repos/{REPO}/pulls", answer)
    project = api.project(autoBranch=case != "no branch", autoPr=True,
                          gitHostRepo="" if case == "no repository" else REPO)
    task = finish(client, api, project)

    logged(client, task["id"], error, error=True)
    if case != "no branch":
        wait_for(lambda: not os.path.exists(worktree_of(tb, task)), RUN,
                 message="the worktree to be removed all the same")
    after = get_task(client, task["id"])
    assert (after["status"], after["pr_url"]) == ("done", None)
    assert len(host.calls()) == (1 if answer else 0)
    if case == "no repository":
        assert git(gone / "origin.git", "rev-parse", task["branch_name"])  # it was pushed


# --- issue sync (gitHostSyncEnabled) ----------------------------------------------------


def test_open_issues_are_imported_once_each(tb, client, api, host):
    host.route("GET", f"/repos/{REPO}/issues", (200, [
        issue(11, "Crash on empty cart", "Steps: open the cart.", labels=["bug"]),
        issue(12, "Dark mode", None),
        issue(13, "Bump deps", pull_request={"url": "https://git.example/pulls/13"})]))
    project = api.project()
    assert enable_sync(client, project["id"])["gitHostSyncEnabled"] == 1

    imported = wait_for(lambda: len(tasks_of(client, project["id"])) == 2 and
                        tasks_of(client, project["id"]), RUN, message="two imported tasks")
    [call] = host.calls()
    assert (call["method"], call["path"]) == ("GET", f"/repos/{REPO}/issues")
    assert call["query"] == {"state": ["open"], "per_page": ["100"], "page": ["1"]}
    assert call["headers"]["Authorization"] == f"Bearer {TOKEN}"
    by_title = {t["title"]: t for t in imported}
    assert set(by_title) == {"Crash on empty cart", "Dark mode"}
    crash = by_title["Crash on empty cart"]
    assert crash["status"] == "backlog" and crash["task_type"] == "bugfix"
    assert "Steps: open the cart." in crash["description"] and "#11" in crash["description"]
    assert by_title["Dark mode"]["task_type"] == "feature"

    assert taskboard.sync_issues(project["id"]) == {"imported": 0}
    client.delete(f"/api/tasks/{by_title['Dark mode']['id']}", status=200)
    host.route("GET", f"/repos/{REPO}/issues", (200, [
        issue(11, "Crash on empty cart"), issue(12, "Dark mode"), issue(14, "Export CSV")]))
    assert taskboard.sync_issues(project["id"]) == {"imported": 1}
    assert sorted(t["title"] for t in tasks_of(client, project["id"])) == [
        "Crash on empty cart", "Export CSV"]


def test_sync_reads_every_page_of_open_issues(tb, client, api, host):
    host.route("GET", f"/repos/{REPO}/issues",
               (200, [issue(n, f"Issue {n}") for n in range(1, 101)]),
               (200, [issue(101, "Issue 101")]))
    project = api.project()
    enable_sync(client, project["id"])
    wait_for(lambda: len(tasks_of(client, project["id"])) == 101, RUN,
             message="101 imported tasks")
    assert [c["query"]["page"] for c in host.calls()] == [["1"], ["2"]]


@pytest.mark.parametrize("how", [
    "update",
    "create",
])
def test_issues_are_imported_right_after_sync_is_enabled(tb, client, api, host, how):
    host.route("GET", f"/repos/{REPO}/issues", (200, [issue(61, "Fix login")]))
    if how == "create":
        project = api.project(gitHostRepo=REPO, gitHostSyncEnabled=1)
    else:
        project = api.project()
        enable_sync(client, project["id"])
    wait_for(lambda: [t["title"] for t in tasks_of(client, project["id"])] == ["Fix login"],
             5, message="the imported issue")


def test_the_queue_starts_an_imported_task_only_after_a_person_edits_it(tb, client, api,
                                                                        host, agent_dir):
    host.route("GET", f"/repos/{REPO}/issues", (200, [issue(21, "Fix login", "fake:ok")]))
    project = api.project(autoQueue=True, maxConcurrent=2)
    enable_sync(client, project["id"])
    [imported] = wait_for(lambda: tasks_of(client, project["id"]), RUN, message="the import")
    own = api.task(project["id"], title="Own work", description="fake:hang", priority=0)
    # The queue starts the person's task; it would have picked the imported one first
    # (priority 1 > 0), and a second slot is free.
    wait_running(client, own["id"], agent_dir)
    assert get_task(client, imported["id"])["status"] == "backlog"
    assert task_calls(agent_dir, imported["id"]) == []

    client.put_json(f"/api/tasks/{imported['id']}", {"priority": 2}, status=200)
    wait_status(client, imported["id"], "testing")
    assert len(task_calls(agent_dir, imported["id"])) == 1
    assert any("started by the queue" in e["message"] for e in logs(client, imported["id"]))


def test_an_imported_task_done_comments_on_and_closes_its_issue(tb, client, api, host):
    host.route("GET", f"/repos/{REPO}/issues", (200, [issue(31, "Fix login")]))
    host.route("POST", f"/repos/{REPO}/issues/31/comments", (201, {"id": 1}))
    host.route("PATCH", f"/repos/{REPO}/issues/31", (200, {"number": 31, "state": "closed"}))
    project = api.project()
    enable_sync(client, project["id"])
    [task] = wait_for(lambda: tasks_of(client, project["id"]), RUN, message="the import")
    api.move(task["id"], "done")

    wait_for(lambda: len(host.calls()) == 3, RUN, message="the comment and the close")
    _, comment, close = host.calls()
    assert (comment["method"], comment["path"]) == ("POST", f"/repos/{REPO}/issues/31/comments")
    assert task["task_key"] in comment["json"]["body"]
    assert (close["method"], close["path"]) == ("PATCH", f"/repos/{REPO}/issues/31")
    assert close["json"]["state"] == "closed"
    assert all(c["headers"]["Authorization"] == f"Bearer {TOKEN}" for c in host.calls())
    logged(client, task["id"], "closed issue #31", error=False)


@pytest.mark.parametrize("failing, error", [("comment", "not commented on"),
                                            ("close", "not closed")])
def test_closing_an_issue_that_fails_is_logged_on_the_task(tb, client, api, host, failing,
                                                           error):
    host.route("GET", f"/repos/{REPO}/issues", (200, [issue(41, "Fix login")]))
    host.route("POST", f"/repos/{REPO}/issues/41/comments",
               (500, {"message": "boom"}) if failing == "comment" else (201, {"id": 1}))
    host.route("PATCH", f"/repos/{REPO}/issues/41", (403, {"message": "Forbidden"}))
    project = api.project()
    enable_sync(client, project["id"])
    [task] = wait_for(lambda: tasks_of(client, project["id"]), RUN, message="the import")
    api.move(task["id"], "done")

    [entry] = logged(client, task["id"], error, error=True)
    assert "#41" in entry["message"]
    assert len(host.calls("PATCH")) == (0 if failing == "comment" else 1)
    assert get_task(client, task["id"])["status"] == "done"


@pytest.mark.parametrize("refusal", [(401, {"message": "Bad credentials"}),
                                     (500, {"message": "Server Error"}), None],
                         ids=["401", "500", "unreachable"])
def test_a_failing_sync_imports_nothing_and_the_board_carries_on(tb, client, api, host,
                                                                caplog, refusal):
    if refusal:
        host.route("GET", f"/repos/{REPO}/issues", refusal)
    else:  # nobody listens there
        tb.config["git_host_api"] = "http://127.0.0.1:9"
    project = api.project()
    enable_sync(client, project["id"])  # answers at once: the sync runs in the background
    wait_for(lambda: "issue sync failed" in caplog.text, RUN, message="the first sync")
    result = taskboard.sync_issues(project["id"])
    assert result["imported"] == 0
    assert (str(refusal[0]) if refusal else "cannot reach") in result["error"]
    assert tasks_of(client, project["id"]) == []
    assert client.get("/api/health").status_int == 200

    tb.config["git_host_api"] = host.url
    host.route("GET", f"/repos/{REPO}/issues", (200, [issue(51, "Later issue")]))
    assert taskboard.sync_issues(project["id"]) == {"imported": 1}
    assert [t["title"] for t in tasks_of(client, project["id"])] == ["Later issue"]


@pytest.mark.parametrize("value", ["not a repo", "acme", "acme/shop/extra", "/shop",
                                   "acme/", "https://git.example/acme/shop", "../..",
                                   "acme/.."])
def test_git_host_repo_must_be_owner_slash_repo(tb, client, api, host, snapshot, value):
    project = api.project()
    before = snapshot()
    response = client.put_json(f"/api/projects/{project['id']}", {
        "gitHostRepo": value, "gitHostSyncEnabled": 1}, expect_errors=True)
    assert_error(response, 400, "validation_error", "gitHostRepo")
    assert snapshot() == before
    assert host.calls() == []
