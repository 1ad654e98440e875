def test_health_answers_ok(client):
    body = client.get("/api/health").json
    assert body["ok"] is True and body["db"] == "ok"
    assert set(body["agent"]) == {"command", "found", "version"}


def test_ws_receives_task_created(live, api):
    ws = live.ws()
    project = api.project()
    message = ws.until("project:created")
    assert message["data"]["id"] == project["id"]
