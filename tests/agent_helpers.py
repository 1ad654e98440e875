"""Helpers for tests that run tests/fake_agent.py (its calls, processes, tasks)."""

import json
import os
import sqlite3
import time

import taskboard
from conftest import wait_for

#: Seconds to wait for anything that involves an agent process.
RUN = 15


def read_calls(folder):
    path = os.path.join(folder, "calls.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def task_calls(agent_dir, task_id):
    return [c for c in read_calls(agent_dir) if c["env"].get("TASKBOARD_TASK_ID") == str(task_id)]


def children(folder):
    path = os.path.join(folder, "children.txt")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [int(line) for line in f if line.strip()]


def alive(pid):
    """True while pid is a live process (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def transcript(folder, pid):
    with open(os.path.join(folder, "transcripts", f"{pid}.out"), encoding="utf-8") as f:
        return f.read().splitlines()


def query(sql, params=()):
    con = sqlite3.connect(taskboard.runtime.config["db_path"])
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def get_task(client, task_id):
    """The task as GET /api/tasks/<id> answers it; `client` is a webtest client, or a
    fault_helpers.ServerProcess (a server in its own process)."""
    if hasattr(client, "get_task"):
        return client.get_task(task_id)
    return client.get(f"/api/tasks/{task_id}").json


def wait_quiet(client, task_id):
    """A hanging run has stored its session and the echo of its prompt, which the CLI prints
    after its init line: nothing more will change."""
    wait_for(lambda: get_task(client, task_id)["session_id"]
             and query("SELECT COUNT(*) FROM task_events WHERE task_id = ? AND kind = 'user'",
                       (task_id,))[0][0] >= 1,
             RUN, message=f"task {task_id}'s session and prompt echo to be stored")


def logs(client, task_id):
    return client.get(f"/api/tasks/{task_id}/logs?limit=10000").json


def wait_logs(client, task_id, predicate, message="log entries"):
    """The task's log once predicate(entries) holds (entries are written in batches)."""
    def check():
        entries = logs(client, task_id)
        return entries if predicate(entries) else None
    return wait_for(check, RUN, message=message)


def start(api, project, description, **fields):
    task = api.task(project["id"], description=description, **fields)
    api.move(task["id"], "in_progress")
    return task["id"]


def wait_status(client, task_id, status, timeout=RUN):
    """Wait until the task has `status` and no live run; return it."""
    def settled():
        task = get_task(client, task_id)
        return task if task["status"] == status and not task["is_running"] else None
    return wait_for(settled, timeout, message=f"task {task_id} to be {status}, not running")


def wait_running(client, task_id, agent_dir, runs=1):
    """Wait until run number `runs` of the task has read its prompt and is live."""
    wait_for(lambda: len(task_calls(agent_dir, task_id)) >= runs
             and get_task(client, task_id)["is_running"], RUN,
             message=f"run {runs} of task {task_id} to be live")
    return task_calls(agent_dir, task_id)[runs - 1]


def assert_stays(predicate, seconds, message):
    """Fail if predicate() turns false at any point during `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), message
        time.sleep(0.02)
