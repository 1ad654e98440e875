"""Application settings: defaults, partial updates, refusals, effect on new tasks."""
import json

import pytest

import taskboard
from conftest import assert_error

DEFAULTS = {"confirmBeforeDelete": True, "defaultModel": "model_medium",
            "defaultEffort": "medium", "language": "en", "autoOpenTerminal": False,
            "soundEnabled": True, "dailyCostLimit": None, "agentIdleTimeoutMinutes": 60,
            "logRetentionDays": None, "agentModels": None, "hasGitHostWebhookSecret": False,
            "hasGitHostToken": False, "maxPreviews": 3, "previewIdleMinutes": 30}


def test_settings_webhook_secret_is_write_only(client):
    body = client.put_json("/api/settings", {"gitHostWebhookSecret": "s3cret-value"}).json
    assert body == DEFAULTS | {"hasGitHostWebhookSecret": True}
    assert "s3cret-value" not in client.get("/api/settings").text
    cleared = client.put_json("/api/settings", {"gitHostWebhookSecret": None}).json
    assert cleared == DEFAULTS


def test_settings_fresh_board_answers_the_defaults(client):
    response = client.get("/api/settings")
    assert response.content_type == "application/json"
    assert response.json == DEFAULTS


def test_settings_put_subset_returns_the_full_object(client):
    response = client.put_json("/api/settings", {"language": "tr", "soundEnabled": False})
    expected = DEFAULTS | {"language": "tr", "soundEnabled": False}
    assert response.status_int == 200 and response.json == expected
    assert client.get("/api/settings").json == expected


def test_settings_put_keeps_earlier_changes(client):
    client.put_json("/api/settings", {"defaultModel": "model_small"})
    client.put_json("/api/settings", {"dailyCostLimit": 12.5})
    assert client.get("/api/settings").json == DEFAULTS | {"defaultModel": "model_small",
                                                           "dailyCostLimit": 12.5}


@pytest.mark.parametrize("field", ["confirmBeforeDelete", "autoOpenTerminal", "soundEnabled"])
@pytest.mark.parametrize("value", [True, False])
def test_settings_booleans_read_back_as_json_booleans(client, field, value):
    body = client.put_json("/api/settings", {field: value}).json
    assert body[field] is value
    assert client.get("/api/settings").json[field] is value


@pytest.mark.parametrize("field, value", [
    ("defaultModel", "model_large"), ("defaultModel", "model_small"),
    ("defaultEffort", "low"), ("defaultEffort", "high"), ("language", "tr"),
    ("dailyCostLimit", 0), ("dailyCostLimit", 3), ("agentIdleTimeoutMinutes", 0),
    ("agentIdleTimeoutMinutes", 5), ("logRetentionDays", 30), ("logRetentionDays", None),
])
def test_settings_accepts_every_allowed_value(client, field, value):
    assert client.put_json("/api/settings", {field: value}).json[field] == value


def test_settings_nullable_limit_can_be_cleared(client):
    client.put_json("/api/settings", {"dailyCostLimit": 5, "logRetentionDays": 7})
    body = client.put_json("/api/settings", {"dailyCostLimit": None,
                                             "logRetentionDays": None, "agentModels": None}).json
    assert body == DEFAULTS


@pytest.mark.parametrize("field, value", [
    ("defaultModel", "model_huge"), ("defaultModel", None), ("defaultModel", "MODEL_MEDIUM"),
    ("defaultEffort", "max"), ("defaultEffort", ""), ("language", "fr"), ("language", 1),
    ("confirmBeforeDelete", "true"), ("confirmBeforeDelete", None),
    ("soundEnabled", 2), ("autoOpenTerminal", []), ("dailyCostLimit", -1),
    ("dailyCostLimit", "10"), ("dailyCostLimit", True), ("agentIdleTimeoutMinutes", -1),
    ("agentIdleTimeoutMinutes", 1.5), ("agentIdleTimeoutMinutes", None),
    ("agentIdleTimeoutMinutes", "60"), ("agentIdleTimeoutMinutes", 2**70),
    ("logRetentionDays", -1), ("logRetentionDays", "30"), ("logRetentionDays", False),
])
def test_settings_bad_value_is_refused_and_nothing_changes(client, snapshot, field, value):
    client.put_json("/api/settings", {"language": "tr"})
    before = snapshot()
    response = client.put_json("/api/settings", {field: value}, expect_errors=True)
    assert_error(response, 400, "validation_error", field)
    assert snapshot() == before
    assert client.get("/api/settings").json == DEFAULTS | {"language": "tr"}


def test_settings_one_bad_field_refuses_the_whole_update(client, snapshot):
    before = snapshot()
    response = client.put_json("/api/settings", {"language": "tr", "defaultEffort": "max"},
                               expect_errors=True)
    assert_error(response, 400, "validation_error", "defaultEffort")
    assert snapshot() == before
    assert client.get("/api/settings").json == DEFAULTS


def test_settings_unknown_field_is_refused(client, snapshot):
    before = snapshot()
    response = client.put_json("/api/settings", {"theme": "dark"}, expect_errors=True)
    assert_error(response, 400, "validation_error", "theme")
    assert snapshot() == before


@pytest.mark.parametrize("body", [[], ["language"], "en", 1, None])
def test_settings_body_that_is_not_an_object_is_refused(client, snapshot, body):
    before = snapshot()
    response = client.put_json("/api/settings", body, expect_errors=True)
    assert_error(response, 400)
    assert response.json["code"] in ("validation_error", "invalid_json")
    assert snapshot() == before


def test_settings_defaults_apply_to_new_tasks(client, api):
    project = api.project()
    before = api.task(project["id"])
    assert (before["model"], before["thinking_effort"]) == ("model_medium", "medium")
    client.put_json("/api/settings", {"defaultModel": "model_large", "defaultEffort": "high"})
    after = api.task(project["id"])
    assert (after["model"], after["thinking_effort"]) == ("model_large", "high")
    unchanged = client.get(f"/api/tasks/{before['id']}").json
    assert (unchanged["model"], unchanged["thinking_effort"]) == ("model_medium", "medium")


def test_settings_defaults_yield_to_values_sent_with_the_task(client, api):
    project = api.project()
    client.put_json("/api/settings", {"defaultModel": "model_large", "defaultEffort": "high"})
    task = api.task(project["id"], model="model_small")
    assert (task["model"], task["thinking_effort"]) == ("model_small", "high")
    task = api.task(project["id"], thinking_effort="low")
    assert (task["model"], task["thinking_effort"]) == ("model_large", "low")


def test_settings_survive_a_restart(client, config):
    client.put_json("/api/settings", {"language": "tr", "agentIdleTimeoutMinutes": 15})
    taskboard.shutdown()
    taskboard.init(config)
    assert client.get("/api/settings").json == DEFAULTS | {"language": "tr",
                                                           "agentIdleTimeoutMinutes": 15}


def test_settings_say_whether_the_board_has_a_source_host_token(client, tb):
    """Issue 44: following a PR needs a token in the board's environment; the settings
    say whether there is one, never the token."""
    tb.config["git_host_token"] = "ghp_secret-token-value"
    body = client.get("/api/settings").json
    assert body["hasGitHostToken"] is True and "ghp_secret" not in json.dumps(body)
