"""The moments webhooks announce are recorded for delivery (design §5, §8)."""
from conftest import wait_for

RUN = 15


def events(tb, task_id):
    return [e["event"] for e in tb.webhook_outbox if e["taskId"] == task_id]


def test_agent_success_records_created_started_completed(api, client, tb):
    project = api.project()
    task = api.task(project["id"], description="fake:ok")
    api.move(task["id"], "in_progress")
    wait_for(lambda: "task:completed" in events(tb, task["id"]), RUN, message="completed")
    assert events(tb, task["id"]) == ["task:created", "task:started", "task:completed"]
    api.move(task["id"], "done")
    assert events(tb, task["id"])[-1] == "task:approved"


def test_failure_records_task_failed_but_a_manual_move_does_not(api, client, tb):
    project = api.project(maxRetries=0)
    failing = api.task(project["id"], description="fake:exit=3")
    api.move(failing["id"], "in_progress")
    wait_for(lambda: "task:failed" in events(tb, failing["id"]), RUN, message="task:failed")
    other = api.task(project["id"], title="by hand")
    api.move(other["id"], "failed")
    api.move(other["id"], "testing")
    assert events(tb, other["id"]) == ["task:created"]


def test_request_changes_records_changes_requested(api, client, tb):
    project = api.project()
    task = api.task(project["id"], description="fake:ok fake:resume=hang")
    api.move(task["id"], "in_progress")
    wait_for(lambda: client.get(f"/api/tasks/{task['id']}").json["status"] == "testing", RUN,
             message="testing")
    client.post_json("/api/desktop/request_changes", {"id": task["id"], "feedback": "More."})
    assert events(tb, task["id"])[-1] == "task:changes_requested"
    assert [e["data"] for e in tb.webhook_outbox if e["event"] ==
            "task:changes_requested"] == [{"feedback": "More."}]
