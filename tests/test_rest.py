"""A board at rest does no work: every background loop waits for its next timer or a wake
(issue 42: the pull-request follower with nothing to follow once spun a whole core)."""

import subprocess
import sys
import time

import gevent

import taskboard
from conftest import wait_for
from fault_helpers import ServerProcess, clean_env


def cpu_seconds(pid):
    """User and system CPU a process has used so far (its children not counted)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / taskboard.os.sysconf("SC_CLK_TCK")


def test_a_started_board_at_rest_uses_far_less_cpu_than_a_busy_loop(tmp_path):
    """The board's own CPU over the same seconds as a busy loop's beside it: a loop that
    does not wait would take about as much as the busy loop, whatever the machine."""
    board = ServerProcess.board(tmp_path, tmp_path / "data" / "taskboard.db",
                                clean_env(tmp_path)).wait_ready()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        board.health()  # what start-up began (the agent CLI checks) has ended
        wait_for(lambda: board.health()["agent"]["found"] is not None, 10,
                 message="the agent command check")
        before = cpu_seconds(board.pid), cpu_seconds(busy.pid)
        time.sleep(2)  # the measurement: two seconds of rest
        after = cpu_seconds(board.pid), cpu_seconds(busy.pid)
    finally:
        busy.kill()
        busy.wait()
        board.stop()
    resting, spinning = after[0] - before[0], after[1] - before[1]
    assert spinning > 0.2, "the busy loop got no CPU: nothing can be judged"
    assert resting < spinning / 20, (resting, spinning)


class Counted:
    """A stand-in that counts the calls of a store function and passes them on."""

    def __init__(self, function):
        self.function, self.calls = function, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.function(*args, **kwargs)


def test_the_pull_request_follower_with_nothing_to_follow_waits_for_a_wake(
        config, monkeypatch):
    """It reads what to follow once at start, then only when something wakes it."""
    rows = Counted(taskboard.followed_pr_rows)
    monkeypatch.setattr(taskboard, "followed_pr_rows", rows)
    taskboard.init(config)
    try:
        wait_for(lambda: rows.calls, message="the follower's first look")
        gevent.sleep(0.3)  # the measurement: a third of a second of rest
        assert rows.calls == 1
        taskboard.runtime.prs.wake()
        wait_for(lambda: rows.calls == 2, message="the look a wake asks for")
        gevent.sleep(0.3)
        assert rows.calls == 2
    finally:
        taskboard.shutdown()
