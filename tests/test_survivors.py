"""A restarted server kills what its predecessor left running, and only that (design §5)."""
import contextlib
import os
import signal
import subprocess
import sys
import types

import pytest

import taskboard
from conftest import wait_for

SLEEPER = [sys.executable, "-c", "import subprocess, sys, time; "
           "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
           "time.sleep(60)"]


@pytest.fixture
def orphan():
    """An agent-like process group (leader and child) that no server owns any more."""
    proc = subprocess.Popen(SLEEPER, start_new_session=True)
    wait_for(lambda: _group(proc.pid) and len(_group(proc.pid)) == 2, message="the child")
    yield proc
    for pid in _group(proc.pid) or []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


def _group(pgid):
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    with open(f"/proc/{entry}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                            members.append(int(entry))
            except (ProcessLookupError, FileNotFoundError):
                pass
    return members


def test_kill_survivor_kills_the_whole_group_when_the_identity_matches(orphan):
    started = taskboard.process_start(orphan.pid)
    assert taskboard.kill_survivor(orphan.pid, started) is True
    orphan.wait(timeout=5)
    wait_for(lambda: _group(orphan.pid) == [], message="the whole group to die")


def test_kill_survivor_spares_a_process_that_only_reuses_the_pid(orphan):
    started = taskboard.process_start(orphan.pid)
    assert taskboard.kill_survivor(orphan.pid, started - 1) is False
    assert orphan.poll() is None and len(_group(orphan.pid)) == 2


def test_kill_survivor_kills_children_whose_leader_is_gone(orphan):
    started = taskboard.process_start(orphan.pid)
    orphan.kill()
    orphan.wait()
    assert len(_group(orphan.pid)) == 1  # the child lives on in the leader's group
    assert taskboard.kill_survivor(orphan.pid, started) is True
    wait_for(lambda: _group(orphan.pid) == [], message="the orphaned child to die")


def test_restart_kills_a_recorded_survivor_and_marks_its_run_interrupted(config, orphan):
    taskboard.init(config)
    project = taskboard.create_project({"name": "P", "slug": "p",
                                        "workingDir": config["data_dir"]})
    task = taskboard.create_task(project["id"], {"title": "T"})
    with taskboard.tx() as t:  # as a server killed with -9 leaves it
        t.execute("UPDATE tasks SET status = 'done' WHERE id = ?", (task["id"],))
        t.insert("runs", {"task_id": task["id"], "project_id": project["id"],
                          "model": "model_medium", "status": "running",
                          "started_at": taskboard.now_iso(), "pid": orphan.pid,
                          "proc_start": taskboard.process_start(orphan.pid)})
    taskboard.shutdown()
    taskboard.init(config)
    try:
        orphan.wait(timeout=5)
        wait_for(lambda: _group(orphan.pid) == [], message="the survivor's group to die")
        with taskboard.tx() as t:
            assert t.value("SELECT status FROM runs") == "interrupted"
    finally:
        taskboard.shutdown()


def test_once_shut_down_the_agent_pool_starts_nothing(tb):
    """A start already on its way when the board stops (a queue pass, a retry firing)
    reaches launch() after shutdown() has collected the runs it stops: it must not start
    a process that nobody would stop."""
    started = []
    run = types.SimpleNamespace(task_id=1, project_id=1, start=lambda: started.append(1))
    tb.agents.shutdown()
    tb.agents.waiting[1] = (1, None)  # its slot, reserved while the shutdown waited
    assert tb.agents.launch(run) is False
    with pytest.raises(OSError, match="shutting down"):
        tb.agents.launch_verifier(run)
    assert started == []
