"""The queue, dependencies and sub-tasks end to end, with real tests/fake_agent.py runs
(design.md §5 "Queue", "Dependencies", sub-task row; README "Desktop commands (local only)").

The task description picks what the fake agent does (`fake:<directive>`); it records every
invocation in $FAKE_AGENT_DIR/calls.jsonl (TASKBOARD_TASK_ID says which task it ran for).
"""

import pytest

import taskboard
from agent_helpers import (
    RUN,
    alive,
    assert_stays,
    get_task,
    query,
    read_calls,
    task_calls,
    wait_running,
    wait_status,
)
from conftest import assert_error, desk, wait_for

pytestmark = pytest.mark.usefixtures("fast_retries")

QUICK = "fake:sleep=0.05 fake:ok"


# --- helpers ------------------------------------------------------------------------------


def quick_tasks(api, project_id, priorities):
    """A quick task for each (title, priority), created in that order; their ids."""
    return [api.task(project_id, title=title, priority=priority, description=QUICK)["id"]
            for title, priority in priorities]


def started_order(agent_dir):
    """Task ids in the order their agents were started (first run of each)."""
    order = []
    for call in read_calls(agent_dir):
        tid = int(call["env"]["TASKBOARD_TASK_ID"])
        if tid not in order:
            order.append(tid)
    return order


def statuses(client, project_id):
    return {t["id"]: t["status"] for t in client.get(f"/api/projects/{project_id}/tasks").json}


def wait_agent_done(client, task_id, agent_dir):
    """The task's (only) agent run ended ok and the task still is in_progress: it waits
    for its sub-tasks."""
    def waiting():
        task = get_task(client, task_id)
        ended = query("SELECT status FROM runs WHERE task_id = ? AND kind = 'task'",
                      (task_id,))
        return task if ended == [("ok",)] and not task["is_running"] else None
    task = wait_for(waiting, RUN, message=f"task {task_id}'s agent to finish ok")
    assert task["status"] == "in_progress", task
    return task


def set_queue(client, project_id, on):
    client.put_json(f"/api/projects/{project_id}", {"autoQueue": on})


# --- the queue ----------------------------------------------------------------------------

def test_queue_auto_on_starts_backlog_tasks_up_to_max_concurrent(client, api, agent_dir):
    project = api.project(autoQueue=True, maxConcurrent=2)
    pid = project["id"]
    a, b, c = (api.task(pid, title=f"T{i}", description="fake:hang")["id"] for i in range(3))
    wait_running(client, a, agent_dir)
    wait_running(client, b, agent_dir)
    assert_stays(lambda: statuses(client, pid)[c] == "backlog" and len(read_calls(agent_dir)) == 2
                 and taskboard.runtime.agents.used(pid) == 2, 0.5,
                 "the third task to wait for a free slot")
    api.move(a, "done")  # frees a slot: the queue reacts at once
    wait_running(client, c, agent_dir)
    assert taskboard.runtime.agents.used(pid) == 2
    assert statuses(client, pid) == {a: "done", b: "in_progress", c: "in_progress"}


def test_queue_burst_of_20_tasks_never_exceeds_max_concurrent(client, api, agent_dir):
    project = api.project(autoQueue=True, maxConcurrent=3)
    pid = project["id"]
    tids = [api.task(pid, title=f"Burst {i}", description=QUICK)["id"] for i in range(20)]
    samples = []

    def sample_until_all_done():
        now = statuses(client, pid)
        in_progress = sum(1 for s in now.values() if s == "in_progress")
        samples.append((in_progress, taskboard.runtime.agents.used(pid),
                        sum(1 for r in taskboard.runtime.agents.runs.values()
                            if r.project_id == pid)))
        assert max(samples[-1]) <= 3, f"more than maxConcurrent at once: {samples[-1]}"
        return all(now[t] == "testing" for t in tids)
    wait_for(sample_until_all_done, 60, interval=0.01, message="all 20 tasks to reach testing")
    assert max(s[0] for s in samples) == 3, "the queue fills every slot"
    assert max(s[1] for s in samples) <= 3 and max(s[2] for s in samples) <= 3
    assert sorted(started_order(agent_dir)) == sorted(tids)
    assert len(read_calls(agent_dir)) == 20, "each task ran exactly once"
    assert taskboard.runtime.agents.used(pid) == 0


def test_queue_start_order_follows_priority_then_creation(client, api, agent_dir):
    project = api.project(maxConcurrent=1)
    pid = project["id"]
    first_low, high, medium, urgent, second_low = quick_tasks(
        api, pid, [("low 1", 0), ("high", 2), ("medium", 1), ("urgent", 3), ("low 2", 0)])
    set_queue(client, pid, True)
    for tid in (first_low, high, medium, urgent, second_low):
        wait_status(client, tid, "testing")
    assert started_order(agent_dir) == [urgent, high, medium, first_low, second_low]


def test_queue_start_order_follows_reorder_queue(client, api, agent_dir):
    project = api.project(maxConcurrent=1)
    pid = project["id"]
    a, b, c, d = quick_tasks(api, pid, [("a", 3), ("b", 0), ("c", 1), ("d", 2)])
    order = [c, a, d, b]
    assert desk(client, "reorder_queue", {"projectId": pid, "taskIds": order}).json == \
        {"ok": True}
    assert read_calls(agent_dir) == [], "reordering with autoQueue off starts nothing"
    set_queue(client, pid, True)
    for tid in order:
        wait_status(client, tid, "testing")
    assert started_order(agent_dir) == order


def test_queue_auto_off_starts_nothing(client, api, agent_dir):
    project = api.project(maxConcurrent=3)
    pid = project["id"]
    assert project["autoQueue"] == 0
    waiting = [api.task(pid, title=f"W{i}", description=QUICK)["id"] for i in range(3)]
    desk(client, "add_task_dependency",
         {"taskId": waiting[1], "dependsOnId": waiting[0], "conditionType": "always"})
    client.put_json("/api/settings", {"dailyCostLimit": None})
    manual = api.task(pid, title="By hand", description=QUICK)["id"]
    api.move(manual, "in_progress")
    wait_status(client, manual, "testing")  # a run ending is a queue trigger too
    client.put_json(f"/api/projects/{pid}", {"maxConcurrent": 4})
    assert_stays(lambda: [statuses(client, pid)[t] for t in waiting] == ["backlog"] * 3
                 and started_order(agent_dir) == [manual], 0.7, "nothing starts by itself")


def test_queue_turning_auto_on_starts_waiting_tasks(client, api, agent_dir):
    project = api.project(maxConcurrent=2)
    pid = project["id"]
    tids = [api.task(pid, description=QUICK)["id"] for _ in range(2)]
    assert_stays(lambda: read_calls(agent_dir) == [], 0.3, "nothing starts while off")
    set_queue(client, pid, True)
    for tid in tids:
        wait_status(client, tid, "testing")


# --- dependency conditions ----------------------------------------------------------------

@pytest.mark.parametrize("condition, parent_ends, child_runs", [
    ("always", "testing", True),
    ("always", "failed", True),
    ("on_success", "testing", True),
    ("on_success", "failed", False),
    ("on_failure", "failed", True),
    ("on_failure", "testing", False),
])
def test_dependency_condition_gates_child(client, api, agent_dir, condition, parent_ends,
                                          child_runs):
    project = api.project(maxConcurrent=2, maxRetries=0)
    pid = project["id"]
    parent_mode = "fake:ok" if parent_ends == "testing" else "fake:exit=3"
    parent = api.task(pid, title="Parent", priority=0,
                      description=f"fake:sleep=0.1 {parent_mode}")
    child = api.task(pid, title="Child", priority=3, description=QUICK)["id"]
    desk(client, "add_task_dependency",
         {"taskId": child, "dependsOnId": parent["id"], "conditionType": condition})
    set_queue(client, pid, True)

    def parent_finished():
        now = statuses(client, pid)
        if now[parent["id"]] in ("backlog", "in_progress"):
            assert now[child] == "backlog", "the child started before its parent finished"
            assert not task_calls(agent_dir, child)
            return False
        return True
    wait_for(parent_finished, RUN, message="the parent to finish")
    wait_status(client, parent["id"], parent_ends)
    if child_runs:
        wait_status(client, child, "testing")
        assert started_order(agent_dir) == [parent["id"], child]
    else:
        assert_stays(lambda: statuses(client, pid)[child] == "backlog"
                     and not task_calls(agent_dir, child), 0.7, "the child never starts")
        status = desk(client, "get_pipeline_status", {"projectId": pid}).json
        blocked = {b["taskId"]: b for b in status["blocked"]}
        assert child in blocked, status
        assert isinstance(blocked[child]["reason"], str) and blocked[child]["reason"].strip()
        assert child not in [q["taskId"] for q in status["queued"]]


def test_dependency_chain_runs_in_waves(client, api, agent_dir):
    project = api.project(maxConcurrent=3)
    pid = project["id"]
    a = api.task(pid, title="A", description=QUICK)["id"]
    b = api.task(pid, title="B", description=QUICK)["id"]
    c = api.task(pid, title="C", description=QUICK)["id"]
    free = api.task(pid, title="Free", description="fake:hang")["id"]
    desk(client, "add_task_dependency", {"taskId": b, "dependsOnId": a,
                                         "conditionType": "on_success"})
    desk(client, "add_task_dependency", {"taskId": c, "dependsOnId": b,
                                         "conditionType": "on_success"})
    set_queue(client, pid, True)
    wait_status(client, c, "testing")
    order = started_order(agent_dir)
    assert order.index(a) < order.index(b) < order.index(c)
    assert free in order, "an independent task starts alongside the first wave"


# --- daily cost limit ---------------------------------------------------------------------

def test_queue_daily_cost_limit_reached_starts_nothing_new(client, api, agent_dir):
    client.put_json("/api/settings", {"dailyCostLimit": 0.5})
    project = api.project(autoQueue=True, maxConcurrent=1)
    pid = project["id"]
    spender = api.task(pid, title="Spender", description="fake:sleep=0.1 fake:ok fake:cost=0.5")
    queued = api.task(pid, title="Queued", description=QUICK)["id"]
    wait_status(client, spender["id"], "testing")
    later = api.task(pid, title="Later", description=QUICK)["id"]
    assert client.get("/api/stats/agent-usage").json["limits"] == \
        {"dailyLimit": 0.5, "currentUsage": 0.5}
    assert_stays(lambda: [statuses(client, pid)[t] for t in (queued, later)] ==
                 ["backlog", "backlog"] and started_order(agent_dir) == [spender["id"]], 0.7,
                 "nothing new starts once today's cost reached the limit")
    client.put_json("/api/settings", {"dailyCostLimit": 5})
    wait_status(client, queued, "testing")
    wait_status(client, later, "testing")
    assert started_order(agent_dir) == [spender["id"], queued, later]


def test_queue_daily_cost_limit_below_today_cost_keeps_queue_going(client, api, agent_dir):
    client.put_json("/api/settings", {"dailyCostLimit": 1})
    project = api.project(autoQueue=True, maxConcurrent=1)
    pid = project["id"]
    first = api.task(pid, description="fake:ok fake:cost=0.4")["id"]
    second = api.task(pid, description="fake:ok fake:cost=0.4")["id"]
    wait_status(client, first, "testing")
    wait_status(client, second, "testing")
    third = api.task(pid, description=QUICK)["id"]
    wait_status(client, third, "testing")  # 0.8 of 1 USD spent: the queue goes on
    assert started_order(agent_dir) == [first, second, third]


# --- sub-tasks ----------------------------------------------------------------------------

def test_subtask_parent_agent_done_waits_in_progress_without_slot(client, api, agent_dir):
    project = api.project(maxConcurrent=2)
    pid = project["id"]
    parent = api.task(pid, title="Parent", description="fake:ok")["id"]
    sub = api.task(pid, title="Sub", description="fake:hang", parent_task_id=parent)["id"]
    wait_running(client, sub, agent_dir)  # queued although autoQueue is off
    assert get_task(client, parent)["awaiting_subtasks"] is True
    api.move(parent, "in_progress")
    task = wait_agent_done(client, parent, agent_dir)
    assert (task["is_running"], task["awaiting_subtasks"]) == (False, True)
    assert_stays(lambda: get_task(client, parent)["status"] == "in_progress", 0.5,
                 "the parent waits for its sub-task")
    assert not taskboard.runtime.agents.holds(parent)
    assert taskboard.runtime.agents.used(pid) == 1
    other = api.task(pid, title="Other", description="fake:hang")["id"]
    api.move(other, "in_progress")  # the waiting parent holds no slot: 2 of 2 now
    wait_running(client, other, agent_dir)
    assert taskboard.runtime.agents.used(pid) == 2
    status = desk(client, "get_pipeline_status", {"projectId": pid}).json
    assert status["slotsUsed"] == 2
    extra = api.task(pid, title="Extra")["id"]
    refused = client.patch_json(f"/api/tasks/{extra}/status", {"status": "in_progress"},
                                expect_errors=True)
    assert_error(refused, 409, "conflict")
    api.move(sub, "done")
    wait_status(client, parent, "testing")
    assert len(task_calls(agent_dir, parent)) == 1, "the parent's agent is not run again"
    assert get_task(client, other)["status"] == "in_progress"


def test_subtask_parent_moves_to_testing_when_all_subtasks_testing_or_done(client, api,
                                                                           agent_dir):
    project = api.project(maxConcurrent=3)
    pid = project["id"]
    parent = api.task(pid, title="Parent", description="fake:ok")["id"]
    manual = api.task(pid, title="Sub 1", description="fake:hang", parent_task_id=parent)["id"]
    finishing = api.task(pid, title="Sub 2", description=QUICK, parent_task_id=parent)["id"]
    api.move(parent, "in_progress")
    wait_status(client, finishing, "testing")  # its agent finished by itself
    wait_agent_done(client, parent, agent_dir)
    assert_stays(lambda: get_task(client, parent)["status"] == "in_progress", 0.5,
                 "one sub-task is still in progress")
    api.move(manual, "done")
    wait_status(client, parent, "testing")


def test_subtask_waiting_parent_gets_slot_freed_for_its_subtask(client, api, agent_dir):
    """maxConcurrent 1, autoQueue off: the parent's agent holds the only slot; once it
    finishes, the parent waits without a slot and its sub-task starts by itself."""
    project = api.project(maxConcurrent=1)
    pid = project["id"]
    parent = api.task(pid, title="Parent", description="fake:sleep=0.3 fake:ok")["id"]
    bystander = api.task(pid, title="Not a sub-task", description=QUICK)["id"]
    api.move(parent, "in_progress")
    wait_running(client, parent, agent_dir)
    sub = api.task(pid, title="Sub", description=QUICK, parent_task_id=parent)["id"]

    def sub_started():
        now = statuses(client, pid)
        if now[parent] == "in_progress" and get_task(client, parent)["is_running"]:
            assert now[sub] == "backlog", "the sub-task started beyond maxConcurrent"
        return now[sub] != "backlog"
    wait_for(sub_started, RUN, message="the sub-task to start")
    wait_status(client, sub, "testing")
    wait_status(client, parent, "testing")
    assert started_order(agent_dir) == [parent, sub]
    assert statuses(client, pid)[bystander] == "backlog", "autoQueue off: only sub-tasks"


@pytest.mark.parametrize("sub_fails_first", [False, True], ids=["parent-first", "sub-first"])
def test_subtask_failure_fails_waiting_parent(client, api, agent_dir, sub_fails_first):
    project = api.project(maxConcurrent=2, maxRetries=0)
    pid = project["id"]
    gate = agent_dir / "gate"  # the one that ends second waits for it
    held = f"fake:wait={gate}"
    parent_mode = f"{held} fake:ok" if sub_fails_first else "fake:ok"
    sub_mode = "fake:exit=3" if sub_fails_first else f"{held} fake:exit=3"
    parent = api.task(pid, title="Parent", description=parent_mode)["id"]
    sub = api.task(pid, title="Sub", description=sub_mode, parent_task_id=parent)
    api.move(parent, "in_progress")
    if sub_fails_first:
        wait_status(client, sub["id"], "failed")
        assert get_task(client, parent)["status"] == "in_progress"
    else:
        wait_agent_done(client, parent, agent_dir)
        assert get_task(client, sub["id"])["status"] == "in_progress"
    gate.touch()
    task = wait_status(client, parent, "failed")
    assert get_task(client, sub["id"])["status"] == "failed"
    assert task["last_error"] and (sub["task_key"] in task["last_error"]
                                   or "sub" in task["last_error"].lower()), task["last_error"]


def test_subtask_manual_failure_fails_waiting_parent(client, api, agent_dir):
    project = api.project(maxConcurrent=2)
    pid = project["id"]
    parent = api.task(pid, title="Parent", description="fake:ok")["id"]
    sub = api.task(pid, title="Sub", description="fake:hang", parent_task_id=parent)["id"]
    api.move(parent, "in_progress")
    wait_agent_done(client, parent, agent_dir)
    api.move(sub, "failed")
    wait_status(client, parent, "failed")


def test_subtask_of_waiting_parent_is_queued_with_auto_queue_off(client, api, agent_dir):
    project = api.project(maxConcurrent=3)
    pid = project["id"]
    assert project["autoQueue"] == 0
    plain = api.task(pid, title="Plain", description=QUICK)["id"]
    parent = api.task(pid, title="Parent", description="fake:hang")["id"]
    api.move(parent, "in_progress")
    wait_running(client, parent, agent_dir)
    subs = [api.task(pid, title=f"Sub {i}", description=QUICK, parent_task_id=parent)["id"]
            for i in range(2)]
    for sub in subs:
        wait_status(client, sub, "testing")
    assert statuses(client, pid)[plain] == "backlog"
    assert not task_calls(agent_dir, plain)


def test_subtask_delete_only_subtask_releases_parent(client, api, agent_dir):
    project = api.project(maxConcurrent=2)
    pid = project["id"]
    parent = api.task(pid, title="Parent", description="fake:ok")["id"]
    sub = api.task(pid, title="Sub", description="fake:hang", parent_task_id=parent)["id"]
    call = wait_running(client, sub, agent_dir)
    api.move(parent, "in_progress")
    wait_agent_done(client, parent, agent_dir)
    assert client.delete(f"/api/tasks/{sub}").json == {"ok": True}
    task = wait_status(client, parent, "testing")
    assert task["awaiting_subtasks"] is False
    wait_for(lambda: not alive(call["pid"]), RUN, message="the deleted sub-task's agent to end")
