"""Projects: list, summary, full record and defaults, create/update/delete, slug, key."""
import os
import re
import sys

import pytest

import taskboard
from conftest import ISO_MS, assert_error, git, make_repo

DEFAULTS = {"permissionMode": "default", "allowedTools": None, "icon": None,
            "iconSeed": None, "autoQueue": 0, "maxConcurrent": 1, "autoBranch": 0,
            "autoPr": 0, "prBaseBranch": "main", "autoTest": 0, "testPrompt": "",
            "taskTimeoutMinutes": 0, "maxRetries": 2, "gitHostRepo": "",
            "gitHostSyncEnabled": 0}
FLAGS = ("autoQueue", "autoBranch", "autoPr", "autoTest", "gitHostSyncEnabled")


SLEEPER = "import sys, time; '--version' in sys.argv or time.sleep(60)"


@pytest.fixture
def config(tmp_path):
    """An agent that just sleeps (answers --version at once), so in_progress stays put."""
    return taskboard.parse_args(["--db", str(tmp_path / "data" / "taskboard.db"),
                                 "--agent-command", f'{sys.executable} -c "{SLEEPER}"'],
                                environ={})


def test_project_list_entries_have_exactly_the_spec_fields(client, api):
    project = api.project(name="Board", slug="board", testPrompt="x", autoQueue=True)
    listed = client.get("/api/projects").json
    assert listed == [{"id": project["id"], "name": "Board", "slug": "board",
                       "workingDir": str(api.workdir), "createdAt": project["createdAt"]}]


def test_project_list_is_empty_json_array_without_projects(client):
    response = client.get("/api/projects")
    assert response.content_type == "application/json" and response.json == []


def test_project_summary_counts_tasks_per_status(client, api):
    project, other = api.project(), api.project()
    for status in ("backlog", "backlog", "in_progress", "testing", "done", "done", "done"):
        api.task(project["id"], status=status)
    api.task(other["id"])
    summary = {s["id"]: s for s in client.get("/api/projects/summary").json}
    entry = summary[project["id"]]
    assert {k: entry[k] for k in ("id", "name", "slug", "workingDir")} == \
        {k: project[k] for k in ("id", "name", "slug", "workingDir")}
    assert (entry["backlogCount"], entry["inProgressCount"], entry["testingCount"],
            entry["doneCount"]) == (2, 1, 1, 3)
    assert (summary[other["id"]]["backlogCount"], summary[other["id"]]["doneCount"]) == (1, 0)


def test_project_create_returns_201_with_full_project_and_defaults(client, api):
    response = client.post_json("/api/projects", {"name": "Board", "slug": "task-board",
                                                  "workingDir": str(api.workdir)})
    assert response.status_int == 201
    body = response.json
    assert {k: body[k] for k in DEFAULTS} == DEFAULTS
    assert (body["name"], body["slug"], body["workingDir"], body["key"]) == \
        ("Board", "task-board", str(api.workdir), "TB")
    assert isinstance(body["id"], int) and ISO_MS.match(body["createdAt"])
    assert client.get(f"/api/projects/{body['id']}").json == body


def test_project_create_accepts_update_fields_too(api):
    project = api.project(maxConcurrent=3, autoTest=True, testPrompt="run make test",
                          gitHostRepo="me/repo", taskTimeoutMinutes=30, maxRetries=0)
    assert (project["maxConcurrent"], project["autoTest"], project["testPrompt"],
            project["gitHostRepo"], project["taskTimeoutMinutes"], project["maxRetries"]) \
        == (3, 1, "run make test", "me/repo", 30, 0)


@pytest.mark.parametrize("sent, read", [(True, 1), (False, 0), (1, 1), (0, 0)])
@pytest.mark.parametrize("flag", FLAGS)
def test_project_boolean_written_as_bool_or_int_reads_as_int(client, api, flag, sent, read):
    if flag == "autoBranch":
        make_repo(api.workdir)  # else refused (below)
    project = api.project(**{flag: not sent})
    updated = client.put_json(f"/api/projects/{project['id']}", {flag: sent}).json
    assert updated[flag] == read and type(updated[flag]) is int
    assert client.get(f"/api/projects/{project['id']}").json[flag] == read


@pytest.mark.parametrize("value", ["true", 2, -1, 0.5, None, [], {}])
def test_project_boolean_of_another_type_is_refused(client, api, snapshot, value):
    project = api.project()
    before = snapshot()
    response = client.put_json(f"/api/projects/{project['id']}", {"autoQueue": value},
                               expect_errors=True)
    assert_error(response, 400, "validation_error", "autoQueue")
    assert snapshot() == before


def test_auto_branch_needs_a_git_repository_with_a_commit_and_the_folder_route_says(
        client, api, snapshot, tmp_path):
    """Each task's branch starts at a commit: autoBranch on a folder without one is a 400
    naming the field and the folder; GET /api/folder tells the new-project dialog first."""
    plain = api.project()
    folder = str(api.workdir)
    before = snapshot()
    for step, why in (("plain", "is not a git repository"), ("init", "has no commit yet")):
        if step == "init":
            git(api.workdir, "init", "-q", "-b", "main")
        state = client.get("/api/folder", {"path": folder}).json
        assert state == {"path": folder, "directory": True, "repository": step == "init",
                         "commit": False, "noBranch": why}
        refused = [client.post_json("/api/projects", {"name": "B", "slug": "b",
                                                      "workingDir": folder, "autoBranch": True},
                                    expect_errors=True),
                   client.put_json(f"/api/projects/{plain['id']}", {"autoBranch": 1},
                                   expect_errors=True)]
        for response in refused:
            body = assert_error(response, 400, "validation_error", "autoBranch")
            assert f"workingDir {folder!r} {why}" in body["error"], body
        assert snapshot() == before
    make_repo(api.workdir)
    assert client.get("/api/folder", {"path": folder}).json["noBranch"] is None
    branched = client.put_json(f"/api/projects/{plain['id']}", {"autoBranch": True}).json
    assert branched["autoBranch"] == 1
    # moving a branched project to a plain folder is refused the same way
    (tmp_path / "plain").mkdir()
    moved = client.put_json(f"/api/projects/{plain['id']}",
                            {"workingDir": str(tmp_path / "plain")}, expect_errors=True)
    assert_error(moved, 400, "validation_error", "autoBranch")
    missing = client.get("/api/folder", {"path": str(tmp_path / "gone")}).json
    assert missing["directory"] is False and missing["noBranch"] == "is not an existing directory"
    for path in ("", "relative/dir"):
        assert_error(client.get("/api/folder", {"path": path}, expect_errors=True), 400,
                     "validation_error", "path")


def test_project_put_changes_only_the_sent_fields(client, api):
    project = api.project(testPrompt="keep me", maxRetries=5)
    updated = client.put_json(f"/api/projects/{project['id']}", {"name": "Renamed"})
    assert updated.status_int == 200
    changed = {k for k in project if project[k] != updated.json[k]}
    assert changed <= {"name", "updatedAt"} and updated.json["name"] == "Renamed"
    assert client.get(f"/api/projects/{project['id']}").json == updated.json


def test_project_put_what_was_got_ignores_read_only_fields(client, api):
    project = api.project()
    got = client.get(f"/api/projects/{project['id']}").json
    sent = got | {"id": 999, "key": "ZZZ", "createdAt": "2000-01-01T00:00:00.000Z",
                  "maxConcurrent": 4}
    updated = client.put_json(f"/api/projects/{project['id']}", sent).json
    assert (updated["id"], updated["key"], updated["createdAt"], updated["maxConcurrent"]) \
        == (got["id"], got["key"], got["createdAt"], 4)
    assert client.get("/api/projects/999", expect_errors=True).status_int == 404


@pytest.mark.parametrize("method", ["post", "put"])
def test_project_unknown_field_is_refused_naming_it(client, api, snapshot, method):
    project = api.project()
    before = snapshot()
    url = "/api/projects" if method == "post" else f"/api/projects/{project['id']}"
    body = {"name": "X", "slug": "x", "workingDir": str(api.workdir), "maxConcurent": 2}
    response = getattr(client, f"{method}_json")(url, body, expect_errors=True)
    assert_error(response, 400, "validation_error", "maxConcurent")
    assert snapshot() == before


@pytest.mark.parametrize("field, value", [
    ("maxConcurrent", 0), ("maxConcurrent", 6), ("maxRetries", -1), ("maxRetries", 11),
    ("taskTimeoutMinutes", -1), ("taskTimeoutMinutes", 1441), ("maxConcurrent", "2"),
    ("maxConcurrent", 2.5), ("maxConcurrent", True), ("maxConcurrent", None),
    ("maxRetries", 2**70), ("permissionMode", "yolo"), ("name", ""), ("name", None),
    ("gitHostRepo", "not a repo"), ("allowedTools", 5), ("prBaseBranch", None),
    ("prPollSeconds", 0), ("prPollSeconds", 3601), ("prPollSeconds", "60"),
    ("prFixMaxAttempts", -1), ("prFixMaxAttempts", 21), ("prTrustedAuthors", "alice"),
    ("prTrustedAuthors", ["ok", "not a login"]), ("prTrustedAuthors", [5]),
    ("prTrustedAuthors", ["-dash"]), ("prTrustedAuthors", {"a": 1}),
    ("prTrustedAuthors", ["x"] * 101),
])
def test_project_update_with_bad_value_is_refused(client, api, snapshot, field, value):
    project = api.project()
    before = snapshot()
    response = client.put_json(f"/api/projects/{project['id']}", {field: value},
                               expect_errors=True)
    assert_error(response, 400, "validation_error", field)
    assert snapshot() == before


@pytest.mark.parametrize("field, value", [("maxConcurrent", 1), ("maxConcurrent", 5),
                                          ("maxRetries", 0), ("maxRetries", 10),
                                          ("taskTimeoutMinutes", 1440),
                                          ("taskTimeoutMinutes", None)])
def test_project_limits_accept_their_bounds(client, api, field, value):
    project = api.project()
    updated = client.put_json(f"/api/projects/{project['id']}", {field: value}).json
    assert updated[field] == value


@pytest.mark.parametrize("slug", ["a", "0abc", "task-board-2", "a" * 63, "a--b"])
def test_project_slug_matching_the_pattern_is_accepted(api, slug):
    assert api.project(slug=slug)["slug"] == slug


@pytest.mark.parametrize("slug", ["", "-abc", "Abc", "a_b", "a b", "a" * 64, "é", "a/b"])
def test_project_slug_not_matching_the_pattern_is_refused(client, api, snapshot, slug):
    before = snapshot()
    response = client.post_json("/api/projects", {"name": "X", "slug": slug,
                                                  "workingDir": str(api.workdir)},
                                expect_errors=True)
    # (not assert_error: its lowercase check trips on a message quoting "Abc" as sent)
    assert response.status_int == 400 and response.content_type == "application/json"
    assert response.json | {"error": "-"} == {"error": "-", "code": "validation_error",
                                              "field": "slug"}
    assert snapshot() == before


def test_project_duplicate_slug_on_create_is_conflict(client, api, snapshot):
    api.project(slug="board")
    before = snapshot()
    response = client.post_json("/api/projects", {"name": "Other", "slug": "board",
                                                  "workingDir": str(api.workdir)},
                                expect_errors=True)
    assert_error(response, 409, "conflict")
    assert snapshot() == before


def test_project_duplicate_slug_on_update_is_conflict(client, api, snapshot):
    api.project(slug="board")
    other = api.project(slug="other")
    before = snapshot()
    response = client.put_json(f"/api/projects/{other['id']}", {"slug": "board"},
                               expect_errors=True)
    assert_error(response, 409, "conflict")
    assert snapshot() == before
    assert client.put_json(f"/api/projects/{other['id']}", {"slug": "other"}).status_int == 200


@pytest.mark.parametrize("working_dir", ["relative/dir", "/no/such/dir", "FILE", "",
                                         "/tmp/a\x00b", None, 5])
def test_project_working_dir_must_be_an_existing_absolute_dir(client, api, snapshot,
                                                                working_dir):
    if working_dir == "FILE":
        working_dir = str(api.workdir / "file.txt")
        (api.workdir / "file.txt").write_text("not a directory")
    before = snapshot()
    response = client.post_json("/api/projects", {"name": "X", "slug": "x",
                                                  "workingDir": working_dir},
                                expect_errors=True)
    assert_error(response, 400, "validation_error", "workingDir")
    assert snapshot() == before


@pytest.mark.parametrize("missing", ["name", "slug", "workingDir"])
def test_project_create_without_a_required_field_is_refused(client, api, missing):
    body = {"name": "X", "slug": "x", "workingDir": str(api.workdir)}
    del body[missing]
    response = client.post_json("/api/projects", body, expect_errors=True)
    assert_error(response, 400, "validation_error", missing)


@pytest.mark.parametrize("sent, read", [
    ("Read,Edit", "Read,Edit"), (["Read", "Bash(git log:*)"], "Read,Bash(git log:*)"),
    ([], ""), (" Read , Edit ", "Read,Edit"),
])
def test_project_allowed_tools_string_or_array_reads_as_comma_string(api, sent, read):
    assert api.project(permissionMode="allow-tools", allowedTools=sent)["allowedTools"] == read


@pytest.mark.parametrize("slug, key", [
    ("task-board", "TB"), ("taskboard", "TAS"), ("a-b-c-d-e", "ABCD"),
    ("my-big-project", "MBP"), ("x", "X"), ("123", "P"),
])
def test_project_key_is_derived_from_the_slug(api, slug, key):
    assert api.project(slug=slug)["key"] == key


def test_project_key_is_made_unique_with_a_digit(api):
    first = api.project(slug="task-board")
    second = api.project(slug="tb")
    third = api.project(slug="tab")
    assert first["key"] == "TB" and third["key"] == "TAB"
    assert re.fullmatch(r"TB\d", second["key"])


def test_project_key_never_changes_when_the_slug_changes(client, api):
    project = api.project(slug="task-board")
    renamed = client.put_json(f"/api/projects/{project['id']}", {"slug": "zebra"}).json
    assert renamed["key"] == "TB"
    newcomer = api.project(slug="task-board")
    assert newcomer["key"] != "TB" and newcomer["key"].startswith("TB")
    assert api.task(project["id"])["task_key"] == "TB-1"


def test_project_delete_answers_ok_and_removes_everything_in_it(client, api, snapshot):
    project = api.project()
    task = api.task(project["id"])
    api.move(task["id"], "done")
    kept = api.project()
    kept_task = api.task(kept["id"])
    template, snippet, webhook = (api.template(project["id"]), api.snippet(project["id"]),
                                  api.webhook(project["id"]))
    attachment = client.post(f"/api/tasks/{task['id']}/attachments",
                             upload_files=[("file", "notes.txt", b"hello")], status=201).json
    stored = [os.path.join(d, f) for d, _, files in os.walk(taskboard.runtime.data_dir)
              for f in files if f == "notes.txt"]
    assert len(stored) == 1
    response = client.delete(f"/api/projects/{project['id']}")
    assert response.status_int == 200 and response.json == {"ok": True}
    pid = project["id"]
    for url in (f"/api/projects/{pid}", f"/api/tasks/{task['id']}",
                f"/api/projects/{pid}/templates/{template['id']}",
                f"/api/projects/{pid}/snippets/{snippet['id']}",
                f"/api/projects/{pid}/webhooks/{webhook['id']}", f"/api/projects/{pid}/tasks",
                f"/api/attachments/{attachment['id']}"):
        assert_error(client.get(url, expect_errors=True), 404, "not_found")
    rows = snapshot()
    for table in ("templates", "snippets", "webhooks"):
        assert rows[table] == [], table
    assert {r[1] for r in rows["tasks"]} == {kept["id"]}  # tasks.project_id
    assert {r[1] for r in rows["activity"]} <= {kept["id"]}  # activity.project_id
    assert {r[1] for r in rows["logs"]} <= {kept_task["id"]}  # logs.task_id
    assert [p["id"] for p in client.get("/api/projects").json] == [kept["id"]]
    assert not os.path.exists(stored[0])


def test_project_delete_of_unknown_id_is_not_found(client, api, snapshot):
    api.project()
    before = snapshot()
    assert_error(client.delete("/api/projects/999", expect_errors=True), 404, "not_found")
    assert snapshot() == before


def test_project_ids_are_never_reused_after_a_delete(client, api):
    """A stale board tab or webhook must never point at a different object (AUTOINCREMENT)."""
    first = api.project()
    client.delete(f"/api/projects/{first['id']}")
    second = api.project()
    assert second["id"] > first["id"]
    task = api.task(second["id"])
    client.delete(f"/api/tasks/{task['id']}")
    assert api.task(second["id"])["id"] > task["id"]


def test_pr_base_branch_must_not_be_empty_but_git_host_repo_may(client, api, snapshot):
    project = api.project()
    before = snapshot()
    response = client.put_json(f"/api/projects/{project['id']}", {"prBaseBranch": ""},
                               expect_errors=True)
    assert_error(response, 400, "validation_error", "prBaseBranch")
    assert snapshot() == before
    assert client.put_json(f"/api/projects/{project['id']}",
                           {"gitHostRepo": ""}).json["gitHostRepo"] == ""


def test_project_list_carries_the_fields_of_the_full_project_it_is_asked_for(client, api):
    project = api.project(name="Board", slug="board", agent="codex", prFixMaxAttempts=5)
    listed = client.get("/api/projects?fields=agent,host,prFixMaxAttempts,simulated").json
    assert listed == [{"id": project["id"], "name": "Board", "slug": "board",
                       "workingDir": str(api.workdir), "createdAt": project["createdAt"],
                       "agent": "codex", "host": None, "prFixMaxAttempts": 5,
                       "simulated": False}]


@pytest.mark.parametrize("fields", ["nope", "agent,gitHostWebhookSecret", "agent,,x"])
def test_project_list_refuses_a_field_a_project_does_not_show(client, api, fields):
    api.project()
    response = client.get(f"/api/projects?fields={fields}", expect_errors=True)
    assert response.status_code == 400
    assert response.json["field"] == "fields" and fields.split(",")[-1] in \
        response.json["error"]
