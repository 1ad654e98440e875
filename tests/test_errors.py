"""The canonical error body over every error path, and refused requests change nothing."""
import json
import re

import pytest

BIG = 2**70
OWN_ORIGIN = "http://127.0.0.1:4000"


def refused(response, status, code, field=None):
    """design §3: a JSON body {error, code, field?} with a message, never a traceback."""
    assert response.status_int == status, response.text
    assert response.content_type == "application/json", response.text[:200]
    body = response.json
    assert set(body) <= {"error", "code", "field"} and body["code"] == code, body
    assert isinstance(body["error"], str) and body["error"]
    assert "Traceback" not in response.text
    if field is not None:
        assert body.get("field") == field, body
    return body


def send(client, method, url, body=b"", content_type="application/json", **headers):
    if isinstance(body, str):
        body = body.encode("utf-8")
    if content_type is not None and body:
        headers["Content-Type"] = content_type
    headers["Host"] = "127.0.0.1:4000"  # webtest's request() would send localhost:80
    return client.request(url, method=method, body=body, headers=headers, expect_errors=True)


@pytest.fixture
def ids(api):
    project = api.project()
    return {"pid": project["id"], "tid": api.task(project["id"])["id"],
            "template": api.template(project["id"])["id"],
            "snippet": api.snippet(project["id"])["id"],
            "webhook": api.webhook(project["id"])["id"]}


#: Every route that takes a JSON body, with a body it would accept.
BODY_ROUTES = [
    ("POST", "/api/projects", {"name": "N", "slug": "n", "workingDir": "/"}),
    ("PUT", "/api/projects/{pid}", {"name": "N"}),
    ("POST", "/api/projects/{pid}/tasks", {"title": "T"}),
    ("PUT", "/api/tasks/{tid}", {"title": "T"}),
    ("PATCH", "/api/tasks/{tid}/status", {"status": "done"}),
    ("PUT", "/api/settings", {"language": "tr"}),
    ("POST", "/api/projects/{pid}/templates", {"name": "N", "content": "C"}),
    ("PUT", "/api/projects/{pid}/snippets/{snippet}", {"name": "N"}),
    ("PUT", "/api/projects/{pid}/webhooks/{webhook}", {"enabled": False}),
]
ROUTE_IDS = [f"{m} {u}" for m, u, _ in BODY_ROUTES]


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE"])
@pytest.mark.parametrize("url", ["/api/nope", "/api/projects/{pid}/nope", "/api/projects/abc",
                                 "/api/tasks/1.5", "/api/", "/api/tasks/{tid}/status/x"])
def test_error_unknown_api_path_is_json_not_found(client, ids, snapshot, method, url):
    before = snapshot()
    response = send(client, method, url.format(**ids), b"{}", Accept="text/html")
    refused(response, 404, "not_found")
    assert "<html" not in response.text.lower()
    assert snapshot() == before


@pytest.mark.parametrize("method, url, body", [
    ("GET", "/api/projects/{x}", None), ("PUT", "/api/projects/{x}", {"name": "n"}),
    ("DELETE", "/api/projects/{x}", None), ("GET", "/api/projects/{x}/tasks", None),
    ("POST", "/api/projects/{x}/tasks", {"title": "t"}), ("GET", "/api/projects/{x}/stats", None),
    ("GET", "/api/projects/{x}/activity", None), ("GET", "/api/projects/{x}/templates", None),
    ("POST", "/api/projects/{x}/snippets", {"name": "n", "content": "c"}),
    ("GET", "/api/projects/{pid}/templates/{x}", None),
    ("PUT", "/api/projects/{pid}/snippets/{x}", {"name": "n"}),
    ("DELETE", "/api/projects/{pid}/webhooks/{x}", None),
    ("GET", "/api/projects/{pid}/webhooks/{x}/deliveries", None),
    ("GET", "/api/tasks/{x}", None), ("GET", "/api/tasks/{x}/detail", None),
    ("PUT", "/api/tasks/{x}", {"title": "t"}), ("PATCH", "/api/tasks/{x}/status",
                                                {"status": "done"}),
    ("GET", "/api/tasks/{x}/logs", None), ("GET", "/api/tasks/{x}/revisions", None),
    ("DELETE", "/api/tasks/{x}", None), ("GET", "/api/attachments/{x}", None),
    ("DELETE", "/api/attachments/{x}", None),
])
@pytest.mark.parametrize("x", [999, 0, -1, 2**63 - 1, 2**63, BIG])
def test_error_unknown_id_is_not_found(client, ids, snapshot, method, url, body, x):
    before = snapshot()
    raw = json.dumps(body) if body is not None else b""
    response = send(client, method, url.format(x=x, pid=ids["pid"]), raw)
    refused(response, 404, "not_found")
    assert snapshot() == before


@pytest.mark.parametrize("method, url", [
    ("PATCH", "/api/projects"), ("DELETE", "/api/projects"), ("POST", "/api/projects/{pid}"),
    ("PATCH", "/api/projects/{pid}"), ("PUT", "/api/projects/summary"),
    ("POST", "/api/settings"), ("DELETE", "/api/settings"), ("POST", "/api/tasks/{tid}"),
    ("GET", "/api/tasks/{tid}/status"), ("PUT", "/api/tasks/{tid}/status"),
    ("DELETE", "/api/projects/{pid}/templates"), ("POST", "/api/projects/{pid}/snippets/1"),
    ("PUT", "/api/health"),
])
def test_error_wrong_method_is_method_not_allowed(client, ids, snapshot, method, url):
    before = snapshot()
    response = send(client, method, url.format(**ids), b'{"name": "x"}')
    refused(response, 405, "method_not_allowed")
    assert method not in response.headers.get("Allow", "")
    assert snapshot() == before


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None,
                                          "application/jsonx"])
@pytest.mark.parametrize("method, url, body", BODY_ROUTES, ids=ROUTE_IDS)
def test_error_body_that_is_not_declared_json_is_unsupported(client, ids, snapshot, method,
                                                              url, body, content_type):
    before = snapshot()
    raw = json.dumps(body)
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.request(url.format(**ids), method=method, body=raw.encode(),
                              headers=headers | {"Host": "127.0.0.1:4000"},
                              expect_errors=True)
    refused(response, 415, "unsupported_media_type")
    assert snapshot() == before


@pytest.mark.parametrize("url", ["/api/projects/{pid}", "/api/tasks/{tid}",
                                 "/api/projects/{pid}/snippets/{snippet}"])
def test_error_delete_with_a_non_json_body_is_unsupported(client, ids, snapshot, url):
    """design §3: any non-empty body must be declared JSON, even where none is read."""
    before = snapshot()
    response = send(client, "DELETE", url.format(**ids), b"id=1", "text/plain")
    refused(response, 415, "unsupported_media_type")
    assert snapshot() == before


def test_error_json_with_charset_parameter_is_accepted(client, api):
    response = send(client, "POST", "/api/projects",
                    json.dumps({"name": "N", "slug": "n", "workingDir": str(api.workdir)}),
                    content_type="application/json; charset=utf-8")
    assert response.status_int == 201


@pytest.mark.parametrize("method, url, body", BODY_ROUTES, ids=ROUTE_IDS)
def test_error_body_over_one_mib_is_too_large(client, ids, snapshot, method, url, body):
    before = snapshot()
    raw = json.dumps(body).encode()
    response = send(client, method, url.format(**ids), raw + b" " * (2**20 + 1 - len(raw)))
    refused(response, 413, "payload_too_large")
    assert snapshot() == before


def test_error_body_of_exactly_one_mib_is_accepted(client, ids):
    raw = b'{"language": "tr"}'
    response = send(client, "PUT", "/api/settings", raw + b" " * (2**20 - len(raw)))
    assert response.status_int == 200 and response.json["language"] == "tr"


BAD_JSON = {
    "truncated": b'{"name": ', "trailing comma": b'{"name": "x",}', "single quotes": b"{'a': 1}",
    "NaN value": b'{"priority": NaN}', "Infinity value": b'{"maxConcurrent": Infinity}',
    "bare NaN": b"NaN", "lone surrogate": b'{"name": "\\ud800"}',
    "lone surrogate key": b'{"\\udfff": 1}', "invalid utf-8": b'{"name": "\xff\xfe"}',
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
    "int of 5000 digits": b'{"priority": 1' + b"0" * 5000 + b"}",
}


@pytest.mark.parametrize("raw", BAD_JSON.values(), ids=BAD_JSON.keys())
@pytest.mark.parametrize("method, url, body", BODY_ROUTES, ids=ROUTE_IDS)
def test_error_invalid_json_is_refused(client, ids, snapshot, method, url, body, raw):
    before = snapshot()
    response = send(client, method, url.format(**ids), raw)
    assert response.status_int == 400, response.text
    refused(response, 400, response.json["code"])
    assert response.json["code"] in ("invalid_json", "validation_error")
    assert snapshot() == before


@pytest.mark.parametrize("raw", [b"[]", b'[{"name": "x"}]', b'"text"', b"42", b"null", b"true"])
@pytest.mark.parametrize("method, url, body", BODY_ROUTES, ids=ROUTE_IDS)
def test_error_json_that_is_not_an_object_is_refused(client, ids, snapshot, method, url, body,
                                                      raw):
    before = snapshot()
    response = send(client, method, url.format(**ids), raw)
    assert response.status_int == 400, response.text
    assert refused(response, 400, response.json["code"])["code"] in (
        "invalid_json", "validation_error")
    assert snapshot() == before


@pytest.mark.parametrize("method, url, body", BODY_ROUTES, ids=ROUTE_IDS)
def test_error_empty_body_where_one_is_needed_is_refused(client, ids, snapshot, method, url,
                                                          body):
    before = snapshot()
    refused(send(client, method, url.format(**ids), b""), 400, "validation_error")
    assert snapshot() == before


@pytest.mark.parametrize("method, url, body, field", [
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "priority": "1"}, "priority"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "priority": True}, "priority"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "priority": 1.0}, "priority"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "priority": 1.5}, "priority"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "priority": None}, "priority"),
    ("POST", "/api/projects/{pid}/tasks", {"title": None}, "title"),
    ("POST", "/api/projects/{pid}/tasks", {"title": ["t"]}, "title"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "priority": 4}, "priority"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "priority": -1}, "priority"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "priority": BIG}, "priority"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "priority": -BIG}, "priority"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "parent_task_id": BIG},
     "parent_task_id"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "parent_task_id": "1"},
     "parent_task_id"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "status": None}, "status"),
    ("POST", "/api/projects/{pid}/tasks", {"title": "t", "model": None}, "model"),
    ("PUT", "/api/tasks/{tid}", {"priority": "high"}, "priority"),
    ("PUT", "/api/tasks/{tid}", {"task_type": 1}, "task_type"),
    ("PUT", "/api/tasks/{tid}", {"description": None}, "description"),
    ("PATCH", "/api/tasks/{tid}/status", {"status": "archived"}, "status"),
    ("PATCH", "/api/tasks/{tid}/status", {"status": None}, "status"),
    ("PATCH", "/api/tasks/{tid}/status", {}, "status"),
    ("PATCH", "/api/tasks/{tid}/status", {"status": "done", "force": True}, "force"),
    ("PUT", "/api/projects/{pid}", {"maxConcurrent": BIG}, "maxConcurrent"),
    ("PUT", "/api/projects/{pid}", {"maxConcurrent": 1e400}, "maxConcurrent"),
    ("PUT", "/api/projects/{pid}", {"taskBudgetUsd": 1e400}, "taskBudgetUsd"),
    ("PUT", "/api/projects/{pid}", {"workingDir": None}, "workingDir"),
    ("PUT", "/api/settings", {"dailyCostLimit": 1e400}, "dailyCostLimit"),
    ("PUT", "/api/settings", {"agentIdleTimeoutMinutes": BIG}, "agentIdleTimeoutMinutes"),
])
def test_error_wrong_type_or_range_is_a_validation_error(client, ids, snapshot, method, url,
                                                          body, field):
    before = snapshot()
    raw = json.dumps(body).replace("Infinity", "1e400")
    response = send(client, method, url.format(**ids), raw)
    refused(response, 400, "validation_error", field)
    assert snapshot() == before


@pytest.mark.parametrize("query", ["limit=abc", f"limit={BIG}", "limit=-5", "limit=1.5"])
@pytest.mark.parametrize("path", ["/api/tasks/{tid}/logs", "/api/projects/{pid}/activity"])
def test_error_bad_query_number_is_a_validation_error(client, ids, path, query):
    response = client.get(f"{path.format(**ids)}?{query}", expect_errors=True)
    refused(response, 400, "validation_error", "limit")


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:4000.evil",
                                    "https://127.0.0.1:4001", "file://"])
@pytest.mark.parametrize("method, url, body", BODY_ROUTES + [
    ("DELETE", "/api/projects/{pid}", None), ("DELETE", "/api/tasks/{tid}", None)],
    ids=ROUTE_IDS + ["DELETE project", "DELETE task"])
def test_error_foreign_origin_on_a_change_is_forbidden(client, ids, snapshot, method, url,
                                                        body, origin):
    before = snapshot()
    raw = json.dumps(body) if body is not None else b""
    response = send(client, method, url.format(**ids), raw, Origin=origin)
    refused(response, 403, "forbidden")
    assert snapshot() == before


def test_error_own_origin_on_a_change_is_allowed(client, api):
    response = send(client, "POST", "/api/projects",
                    json.dumps({"name": "N", "slug": "n", "workingDir": str(api.workdir)}),
                    Origin=OWN_ORIGIN)
    assert response.status_int == 201


def test_error_foreign_origin_may_still_read(client, ids):
    response = client.get("/api/projects", headers={"Origin": "http://evil.example"})
    assert response.status_int == 200 and [p["id"] for p in response.json] == [ids["pid"]]


@pytest.mark.parametrize("method, url, raw, content_type", [
    ("PUT", "/api/settings", b"[]", "application/json"),
    ("PUT", "/api/settings", b"", "application/json"),
    ("PUT", "/api/settings", b"{", "application/json"),
    ("PUT", "/api/settings", b"{}", "text/plain"),
    ("PUT", "/api/settings", b"{}" + b" " * 2**20, "application/json"),
    ("PUT", "/api/settings", b'{"language": "fr"}', "application/json"),
    ("PATCH", "/api/settings", b"{}", "application/json"),
    ("GET", "/api/tasks/999", b"", None),
    ("GET", "/api/nope", b"", None),
], ids=["array", "empty", "broken", "text/plain", "too large", "enum", "method", "id", "path"])
def test_error_message_is_lowercase_prose(client, method, url, raw, content_type):
    """design §3: a lowercase message; quoted values, field and method names keep case."""
    body = send(client, method, url, raw, content_type).json
    prose = re.sub(r"'[^']*'|\"[^\"]*\"|\b(GET|POST|PUT|PATCH|DELETE)\b", "", body["error"])
    prose = prose.replace(body.get("field") or "\0", "")
    assert prose == prose.lower(), body["error"]
