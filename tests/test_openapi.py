"""/api/openapi.json describes every route, generated from the validation's field tables."""
import re

import pytest

import taskboard


@pytest.fixture
def doc(client):
    return client.get("/api/openapi.json").json


def test_openapi_lists_every_api_route(doc):
    assert doc["openapi"].startswith("3.1")
    for route in taskboard.app.routes:
        if route.rule.startswith("/api/"):
            path = re.sub(r"<(\w+)(:[^>]*)?>", r"{\1}", route.rule)
            assert route.method.lower() in doc["paths"][path], f"{route.method} {path}"


def test_openapi_request_schema_follows_the_field_table(doc):
    create = doc["paths"]["/api/projects"]["post"]
    ref = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert schema["required"] == ["name", "slug", "workingDir"]
    assert schema["properties"]["maxConcurrent"] == {
        "type": "integer", "minimum": 1, "maximum": 5, "default": 1,
        "description": "how many of its agents run at once"}
    assert "id" not in schema["properties"] and "key" not in schema["properties"]
    assert "201" in create["responses"]
    update = doc["paths"]["/api/projects/{project_id}"]["put"]
    ref = update["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert "required" not in doc["components"]["schemas"][ref.rsplit("/", 1)[1]]


def _properties(doc, name):
    return set(doc["components"]["schemas"][name]["properties"])


def test_openapi_response_schemas_match_real_responses(doc, api, client):
    project = api.project()
    task = api.task(project["id"])
    template = api.template(project["id"])
    snippet = api.snippet(project["id"])
    webhook = api.webhook(project["id"], secret="s")
    assert set(project) == _properties(doc, "Project")
    assert set(task) == _properties(doc, "Task")
    assert set(template) == _properties(doc, "Template")
    assert set(snippet) == _properties(doc, "Snippet")
    assert set(webhook) == _properties(doc, "Webhook") and "secret" not in webhook
    assert set(client.get("/api/settings").json) == _properties(doc, "Settings")
    detail = client.get(f"/api/tasks/{task['id']}/detail").json
    assert set(detail) == _properties(doc, "TaskDetail")
    listed = client.get("/api/projects").json[0]
    assert set(listed) == _properties(doc, "ProjectListEntry")
    summary = client.get("/api/projects/summary").json[0]
    assert set(summary) == _properties(doc, "ProjectSummary")


def test_openapi_enums_come_from_the_same_constants(doc):
    task = doc["components"]["schemas"]["Task"]["properties"]
    assert task["status"]["enum"] == list(taskboard.STATUSES)
    assert task["task_type"]["enum"] == list(taskboard.TASK_TYPES)
    assert task["model"]["enum"] == list(taskboard.MODELS)


def test_task_list_json_from_sqlite_equals_the_python_rendering(api, client):
    """The task list is rendered by SQLite for speed; it must match render() exactly."""
    project = api.project()
    parent = api.task(project["id"], title="Ünïcode \"quoted\" \\ back\nslash", priority=3,
                      tags=["a", "b"], description="x" * 300)
    for n in range(12):
        api.task(project["id"], title=f"t{n}", priority=n % 4,
                 parent_task_id=parent["id"] if n % 5 == 0 else None)
    api.move(parent["id"], "done")
    listed = client.get(f"/api/projects/{project['id']}/tasks").json
    rows = taskboard.pipeline_rows(project["id"])[0]  # the same tasks, in the same order
    assert listed == [taskboard.task_view(r) for r in rows]
    assert [t["priority"] for t in listed] == sorted((t["priority"] for t in listed),
                                                      reverse=True)
    assert listed[0]["awaiting_subtasks"] is True and listed[0]["total_cost"] == 0
