"""Templates, snippets and webhooks: per-project CRUD, validation, secrets, template defaults."""

import pytest

from conftest import ISO_MS, assert_error

#: kind -> (a create body, the fields it reads back beyond id/projectId/createdAt, an update)
KINDS = {
    "templates": ({"name": "Bugfix", "content": "Fix {{task_title}}", "taskType": "bugfix",
                   "model": "model_small", "thinkingEffort": "low"},
                  {"name": "Bugfix", "content": "Fix {{task_title}}", "taskType": "bugfix",
                   "model": "model_small", "thinkingEffort": "low"},
                  {"content": "Repair {{task_title}}"}),
    "snippets": ({"name": "Style", "content": "Use tabs."},
                 {"name": "Style", "content": "Use tabs.", "enabled": True},
                 {"enabled": False}),
    "webhooks": ({"platform": "custom", "url": "https://example.test/hook",
                  "events": ["task:created", "task:failed"]},
                 {"platform": "custom", "url": "https://example.test/hook",
                  "events": ["task:created", "task:failed"], "enabled": True,
                  "hasSecret": False},
                 {"url": "http://127.0.0.1:9/other"}),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request):
    return request.param


def create(client, pid, kind, **extra):
    return client.post_json(f"/api/projects/{pid}/{kind}", KINDS[kind][0] | extra,
                            status=201).json


def test_resource_create_answers_201_with_the_full_resource(client, api, kind):
    project = api.project()
    response = client.post_json(f"/api/projects/{project['id']}/{kind}", KINDS[kind][0])
    assert response.status_int == 201
    body = response.json
    assert isinstance(body["id"], int) and ISO_MS.match(body["createdAt"])
    assert body == KINDS[kind][1] | {"id": body["id"], "projectId": project["id"],
                                     "createdAt": body["createdAt"]}


def test_resource_get_one_and_list_show_what_was_created(client, api, kind):
    project = api.project()
    first = create(client, project["id"], kind)
    second = create(client, project["id"], kind)
    create(client, api.project()["id"], kind)
    base = f"/api/projects/{project['id']}/{kind}"
    assert client.get(f"{base}/{first['id']}").json == first
    assert client.get(base).json == [first, second]


def test_resource_put_changes_only_the_sent_fields(client, api, kind):
    project = api.project()
    item = create(client, project["id"], kind)
    change = KINDS[kind][2]
    url = f"/api/projects/{project['id']}/{kind}/{item['id']}"
    response = client.put_json(url, change)
    assert response.status_int == 200 and response.json == item | change
    assert client.get(url).json == item | change


def test_resource_put_what_was_got_is_accepted(client, api, kind):
    project = api.project()
    item = create(client, project["id"], kind)
    url = f"/api/projects/{project['id']}/{kind}/{item['id']}"
    got = client.get(url).json
    assert client.put_json(url, got | {"id": 12345, "projectId": 999}).json == got


def test_resource_delete_answers_ok_and_the_resource_is_gone(client, api, kind):
    project = api.project()
    item, kept = create(client, project["id"], kind), create(client, project["id"], kind)
    url = f"/api/projects/{project['id']}/{kind}/{item['id']}"
    response = client.delete(url)
    assert response.status_int == 200 and response.json == {"ok": True}
    assert_error(client.get(url, expect_errors=True), 404, "not_found")
    assert_error(client.delete(url, expect_errors=True), 404, "not_found")
    assert client.get(f"/api/projects/{project['id']}/{kind}").json == [kept]


@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_resource_id_of_another_project_is_not_found(client, api, snapshot, kind, method):
    owner, other = api.project(), api.project()
    item = create(client, owner["id"], kind)
    before = snapshot()
    url = f"/api/projects/{other['id']}/{kind}/{item['id']}"
    if method == "put":
        response = client.put_json(url, {"name": "x"} if kind != "webhooks"
                                   else {"enabled": False}, expect_errors=True)
    else:
        response = getattr(client, method)(url, expect_errors=True)
    assert_error(response, 404, "not_found")
    assert snapshot() == before


@pytest.mark.parametrize("method", ["get_list", "post", "get", "put", "delete"])
def test_resource_of_unknown_project_is_not_found(client, api, snapshot, kind, method):
    api.project()
    before = snapshot()
    base = f"/api/projects/999/{kind}"
    if method == "get_list":
        response = client.get(base, expect_errors=True)
    elif method == "post":
        response = client.post_json(base, KINDS[kind][0], expect_errors=True)
    elif method == "put":
        response = client.put_json(f"{base}/1", KINDS[kind][2], expect_errors=True)
    else:
        response = getattr(client, method)(f"{base}/1", expect_errors=True)
    assert_error(response, 404, "not_found")
    assert snapshot() == before


@pytest.mark.parametrize("kind, body, field", [
    ("templates", {"content": "x"}, "name"), ("templates", {"name": "x"}, "content"),
    ("templates", {"name": "", "content": "x"}, "name"),
    ("templates", {"name": "x", "content": "x", "taskType": "epic"}, "taskType"),
    ("templates", {"name": "x", "content": "x", "model": "gpt"}, "model"),
    ("templates", {"name": "x", "content": "x", "thinkingEffort": "max"}, "thinkingEffort"),
    ("templates", {"name": "x", "content": "x", "variables": []}, "variables"),
    ("snippets", {"content": "x"}, "name"), ("snippets", {"name": "x"}, "content"),
    ("snippets", {"name": "x", "content": "x", "enabled": "yes"}, "enabled"),
    ("snippets", {"name": "x", "content": 5}, "content"),
])
def test_resource_invalid_create_is_refused(client, api, snapshot, kind, body, field):
    project = api.project()
    before = snapshot()
    response = client.post_json(f"/api/projects/{project['id']}/{kind}", body,
                                expect_errors=True)
    assert_error(response, 400, "validation_error", field)
    assert snapshot() == before


def test_snippet_enabled_defaults_to_true_and_can_be_sent_false(api):
    project = api.project()
    assert api.snippet(project["id"])["enabled"] is True
    assert api.snippet(project["id"], enabled=False)["enabled"] is False


HOOK = {"platform": "custom", "url": "http://127.0.0.1:9/hook", "events": ["task:created"]}


@pytest.mark.parametrize("change, field", [
    ({"platform": "slack"}, "platform"), ({"platform": None}, "platform"),
    ({"events": ["task:exploded"]}, "events"), ({"events": []}, "events"),
    ({"events": "task:created"}, "events"), ({"events": [1]}, "events"),
    ({"url": "ftp://example.test/hook"}, "url"), ({"url": "javascript:alert(1)"}, "url"),
    ({"url": "file:///etc/passwd"}, "url"), ({"url": "example.test/hook"}, "url"),
    ({"url": ""}, "url"), ({"enabled": "no"}, "enabled"), ({"secret": 5}, "secret"),
])
def test_webhook_invalid_value_is_refused_on_create_and_update(client, api, snapshot,
                                                                 change, field):
    project = api.project()
    hook = api.webhook(project["id"])
    before = snapshot()
    base = f"/api/projects/{project['id']}/webhooks"
    assert_error(client.post_json(base, HOOK | change, expect_errors=True),
                 400, "validation_error", field)
    assert_error(client.put_json(f"{base}/{hook['id']}", change, expect_errors=True),
                 400, "validation_error", field)
    assert snapshot() == before


@pytest.mark.parametrize("platform", ["platform_a", "platform_b", "platform_c", "custom"])
def test_webhook_every_platform_and_event_is_accepted(api, platform):
    events = ["task:created", "task:started", "task:completed", "task:approved",
              "task:changes_requested", "task:failed"]
    hook = api.webhook(api.project()["id"], platform=platform, events=events,
                       url="https://example.test/x?y=1")
    assert (hook["platform"], hook["events"]) == (platform, events)


def test_webhook_secret_is_write_only(client, api):
    project = api.project()
    hook = api.webhook(project["id"], secret="s3cret-value")
    url = f"/api/projects/{project['id']}/webhooks/{hook['id']}"
    assert hook["hasSecret"] is True and "secret" not in hook
    for shown in (client.get(url), client.get(f"/api/projects/{project['id']}/webhooks"),
                  client.put_json(url, {"enabled": False})):
        assert "s3cret-value" not in shown.text and "secret" not in shown.text.replace(
            "hasSecret", "")
    assert client.get(url).json["hasSecret"] is True
    assert client.put_json(url, {"secret": None}).json["hasSecret"] is False
    assert client.put_json(url, {"secret": "new"}).json["hasSecret"] is True


def _template_task(client, api, templates, **task):
    project = api.project()
    for template in templates:
        api.template(project["id"], **template)
    return api.task(project["id"], **task)


def test_template_of_matching_type_sets_defaults_of_a_new_task(client, api):
    task = _template_task(client, api, [
        {"taskType": "docs", "model": "model_large", "thinkingEffort": "low"},
        {"taskType": "bugfix", "model": "model_small", "thinkingEffort": "high"},
    ], task_type="bugfix")
    assert (task["model"], task["thinking_effort"]) == ("model_small", "high")


def test_template_lowest_id_wins_when_several_match(client, api):
    task = _template_task(client, api, [
        {"name": "first", "taskType": "bugfix", "model": "model_large",
         "thinkingEffort": "low"},
        {"name": "second", "taskType": "bugfix", "model": "model_small",
         "thinkingEffort": "high"},
    ], task_type="bugfix")
    assert (task["model"], task["thinking_effort"]) == ("model_large", "low")


def test_template_defaults_yield_to_values_sent_with_the_task(client, api):
    task = _template_task(client, api, [
        {"taskType": "bugfix", "model": "model_small", "thinkingEffort": "high"},
    ], task_type="bugfix", model="model_large")
    assert (task["model"], task["thinking_effort"]) == ("model_large", "high")


def test_template_of_another_type_or_project_is_not_applied(client, api):
    other = api.project()
    api.template(other["id"], taskType="feature", model="model_large", thinkingEffort="high")
    task = _template_task(client, api, [
        {"taskType": "docs", "model": "model_small", "thinkingEffort": "low"},
    ], task_type="feature")
    assert (task["model"], task["thinking_effort"]) == ("model_medium", "medium")


def test_template_without_model_falls_back_to_settings(client, api):
    client.put_json("/api/settings", {"defaultModel": "model_large"})
    task = _template_task(client, api, [{"taskType": "feature", "thinkingEffort": "high"}])
    assert (task["model"], task["thinking_effort"]) == ("model_large", "high")
