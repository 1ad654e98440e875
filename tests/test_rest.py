"""A board at rest does no work: every background loop waits for its next timer or a wake
(issue 42: the pull-request follower with nothing to follow once spun a whole core)."""

import os
import shutil
import subprocess
import sys
import time

import gevent
import pytest
from fault_helpers import ServerProcess, clean_env
from test_pull_requests import forge, opened  # noqa: F401  (a fixture)

import taskboard
from agent_helpers import RUN
from conftest import ROOT, wait_for


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


@pytest.mark.usefixtures("fast_retries")
def test_a_followed_pull_request_is_looked_at_once_per_poll_and_not_in_between(
        client, api, forge, monkeypatch):  # noqa: F811
    """Between two looks at a PR the follower waits for the next one's time: no query of
    what to follow and no request to the source host."""
    rows = Counted(taskboard.followed_pr_rows)
    monkeypatch.setattr(taskboard, "followed_pr_rows", rows)
    _, task = opened(client, api, forge, prPollSeconds=60)
    prs = taskboard.runtime.prs
    wait_for(lambda: prs.looks and not prs.stepping, RUN, message="the first look to end")
    queried, asked = rows.calls, len(forge.calls("GET"))
    gevent.sleep(0.3)  # the measurement: a third of a second of rest
    assert (rows.calls, len(forge.calls("GET"))) == (queried, asked)
    assert prs.due is not None, "the next look is on the clock"


# --- the one shape of every background loop ---------------------------------------------

def test_a_worker_with_nothing_due_waits_for_a_wake_or_its_next_time():
    rounds = []

    def step():
        rounds.append(len(rounds))
        return None if len(rounds) < 3 else 0.01
    worker = taskboard.Worker("test", step)
    worker.start()
    try:
        wait_for(lambda: rounds == [0], message="the first round, at start")
        gevent.sleep(0.2)
        assert rounds == [0] and worker.idle, "nothing due: no round until a wake"
        worker.wake()
        wait_for(lambda: rounds == [0, 1], message="the round a wake asks for")
        worker.wake(after=0.05)
        worker.wake(after=60)  # a later wake does not put off an earlier one
        wait_for(lambda: len(rounds) >= 3, message="the round due in 0.05 s")
        wait_for(lambda: len(rounds) >= 6, message="the rounds every 0.01 s it asks for")
    finally:
        worker.stop()
    assert worker.greenlet.dead


def test_a_worker_whose_round_fails_logs_it_and_tries_again_after_retry(caplog):
    rounds = []

    def step():
        rounds.append(1)
        raise RuntimeError("the disk is gone")
    worker = taskboard.Worker("flaky", step, retry=0.01)
    worker.start()
    try:
        wait_for(lambda: len(rounds) >= 3, message="the rounds after failures")
    finally:
        worker.stop()
    assert "flaky failed" in caplog.text and "the disk is gone" in caplog.text


@pytest.mark.parametrize("grace", [0.0, 5.0])
def test_stopping_a_worker_lets_a_round_under_way_end_within_its_grace(grace):
    release, ended = gevent.event.Event(), []

    def step():
        release.wait()
        ended.append(True)
    worker = taskboard.Worker("slow", step, grace=grace)
    worker.start()
    wait_for(lambda: worker.stepping, message="the round to start")
    gevent.spawn_later(0.05, release.set)
    worker.stop()
    assert worker.greenlet.dead
    assert ended == ([True] if grace else []), "ended within its grace, else killed"


def test_an_outbox_stopping_while_a_message_is_queued_stops_all_and_starts_none():
    """A worker stopping yields; a message queued meanwhile (a webhook's notice from a run
    that ends) neither breaks the stop nor starts a worker that outlives it."""
    outbox = taskboard.Outbox("webhook_outbox", "webhook_id", lambda target, after: None,
                              lambda *arguments: None)
    stop = taskboard.Worker.stop

    def stop_and_queue(worker):
        outbox.wake(3)
        stop(worker)
    for target in (1, 2):
        outbox.wake(target)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(taskboard.Worker, "stop", stop_and_queue)
        outbox.stop()
    assert sorted(outbox.workers) == [1, 2]
    assert all(worker.greenlet.dead for worker in outbox.workers.values())


# --- memory: the README's `python taskboard.py` -------------------------------------------

def test_the_readme_command_goes_on_as_an_import_of_the_cached_module(tmp_path):
    """A script's compile is done at every start and what the compiler used would stay in
    the server (28 MB); `python taskboard.py` goes on as an import instead, whose bytecode
    is cached, with the interpreter's options and the arguments it was given."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(os.path.join(ROOT, "taskboard.py"), checkout)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, "-O", "taskboard.py", "--help"], cwd=checkout,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "usage: taskboard.py" in done.stdout, done.stderr
    assert list((checkout / "__pycache__").glob("taskboard.*.opt-1.pyc")), \
        "imported, with -O, and its bytecode cached"


def test_without_a_bytecode_cache_the_readme_command_goes_on_in_a_fresh_image(tmp_path):
    """With PYTHONDONTWRITEBYTECODE (Docker images set it) no .pyc may be written, and the
    script skipped its re-exec, keeping the compile heap (96.8 MB idle against 63.8): the
    code it compiled goes to a fresh image through a file in memory, nothing on disk."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(os.path.join(ROOT, "taskboard.py"), checkout)
    server = subprocess.Popen(
        [sys.executable, "taskboard.py", "--port", "0", "--db", str(tmp_path / "data" / "t.db")],
        cwd=checkout, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in server.stdout:
            if "/login?token=" in line:
                break
        with open(f"/proc/{server.pid}/cmdline", "rb") as f:
            assert b"marshal.loads" in f.read(), "the same process, in a fresh image"
        assert not (checkout / "__pycache__").exists()
    finally:
        server.terminate()
        server.wait(timeout=30)
