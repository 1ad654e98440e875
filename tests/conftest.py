from gevent import monkey; monkey.patch_all()  # noqa: E702, I001 -- first, as in taskboard.py

import contextlib
import datetime as dt
import functools
import gc
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
import uuid

import gevent
import gevent._socket3
import pytest
import websocket
import webtest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import taskboard  # noqa: E402

pytest_plugins = ["browser_fixtures", "push_service"]

# What the tests start (boards, simulated agents, the MCP bridge) runs as from a newcomer's
# shell: with PYTHONDONTWRITEBYTECODE, as some harnesses set it, each such `python
# taskboard.py` compiled the module again (0.15 s of CPU) and skipped its re-exec as an
# import (the first lines of taskboard.py), unlike the README's board.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

FAKE_AGENT = os.path.join(ROOT, "tests", "fake_agent.py")


# --- pytest-xdist under gevent ---------------------------------------------------------------
# A worker gets its tests from execnet's receiver, a real OS thread started before this file
# patched threading; xdist's queue then holds gevent's lock and Event, which no other thread
# can wake ("LoopExit: This operation would block forever").  Give the queue a real lock and an
# event the main greenlet polls.

class _PolledEvent:
    """threading.Event's set/clear/wait for a flag that another OS thread sets."""

    def __init__(self):
        self.flag = False

    def set(self):
        self.flag = True

    def clear(self):
        self.flag = False

    def is_set(self):
        return self.flag

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.flag and (deadline is None or time.monotonic() < deadline):
            gevent.sleep(0.005)
        return self.flag


# --- sockets left open -----------------------------------------------------------------------
# A socket dropped while open is closed by the garbage collector, whenever it runs: its
# ResourceWarning then fails whichever test is running, far from the code that dropped it.
# Each socket remembers where it was made, by its descriptor (which it holds until closed, so
# the last socket made on a descriptor is the one a warning names); a test failed by one
# says where, in a section "socket left open" of its report.

_made_at = {}  # descriptor -> where its last socket was made


def _remembered(init):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _made_at[self.fileno()] = [(frame.f_code, line) for frame, line in
                                   traceback.walk_stack(sys._getframe(1))]
    return __init__


gevent._socket3.socket.__init__ = _remembered(gevent._socket3.socket.__init__)


@contextlib.contextmanager
def full_listener():
    """A loopback listener whose backlog is full: a connect to its address waits (until its
    own timeout) instead of being answered or refused."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        held = []
        try:
            while True:  # connections until the backlog is full: the next one waits
                try:
                    with gevent.Timeout(0.5):
                        held.append(taskboard.dial(listener.getsockname(), 10))
                except gevent.Timeout:
                    break
                assert len(held) < 100, "the backlog never filled"
            yield listener.getsockname()
        finally:
            for conn in held:
                conn.close()


def connecting_to(port):
    """Whether a socket of this network namespace is connecting to the loopback port (the
    kernel's table of TCP sockets: SYN_SENT, state 02)."""
    with open("/proc/net/tcp") as f:
        return any(fields[2].endswith(f":{port:04X}") and fields[3] == "02"
                   for fields in (line.split() for line in f.readlines()[1:]))


def no_socket_left_open():
    """Let the hub drop what it held, then collect: a socket dropped open warns now, failing
    the test that left it (its report says where the socket was made)."""
    gevent.sleep(0)
    gc.collect()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        for fd in sorted(set(re.findall(r"<socket object, fd=(\d+)", report.longreprtext))):
            stack = [traceback.FrameSummary(code.co_filename, line, code.co_name)
                     for code, line in reversed(_made_at.get(int(fd), ()))  # not pytest's
                     if not re.search(r"[/\\](_pytest|pluggy)[/\\]", code.co_filename)]
            where = "".join(traceback.format_list(stack)) or "(not by a socket of this process)"
            report.sections.append((f"socket left open: fd {fd}", f"made at\n{where}"))
    return report


def pytest_configure(config):
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor":  # in an xdist worker
            plugin.torun._lock = gevent.monkey.get_original("_thread", "RLock")()
            plugin.torun._has_items_event = _PolledEvent()
    config.addinivalue_line("markers", "browser: drives Chromium (tests/test_browser*.py)")
    config.addinivalue_line("markers", "real_cli: drives a real agent CLI installed from npm "
                                       "(tests/test_real_*.py)")
    config.addinivalue_line("markers", "sshd: starts a real OpenSSH server (tests/ssh_helpers.py)")


def pytest_collection_modifyitems(items):
    """Mark the slow kinds by file, so `-m "not browser and not real_cli"` is the fast subset."""
    for item in items:
        name = item.path.name
        if name.startswith("test_browser"):
            item.add_marker(pytest.mark.browser)
        elif name.startswith("test_real_"):
            item.add_marker(pytest.mark.real_cli)


def unavailable(reason):
    """A test that cannot run here (a tool missing, or not working) is skipped, saying why;
    under TASKBOARD_CI it fails instead: .ci/run installs every tool, and CI must not go
    green with the sandbox or the hosts untested."""
    if os.environ.get("TASKBOARD_CI"):
        pytest.fail(f"{reason} (TASKBOARD_CI is set: here it must work)", pytrace=False)
    pytest.skip(reason)


@functools.cache
def bwrap_state():
    """What bubblewrap does on this machine (taskboard.try_sandbox), tried once."""
    return taskboard.try_sandbox(["bwrap"])


def pytest_runtest_setup(item):
    """A test marked sshd needs OpenSSH; one marked sandbox, under TASKBOARD_CI, a working
    bubblewrap (elsewhere it checks the board's sandbox either way, or skips itself)."""
    if item.get_closest_marker("sshd"):
        from ssh_helpers import sshd_missing
        if sshd_missing() is not None:
            unavailable(sshd_missing())
    if item.get_closest_marker("sandbox") and os.environ.get("TASKBOARD_CI"):
        if not bwrap_state()["works"]:
            unavailable(f"bubblewrap does not work on this machine: {bwrap_state()['error']}")


#: A timestamp as the board writes them: UTC, milliseconds, "Z".
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def iso(moment):
    """A datetime as the board writes timestamps (ISO_MS)."""
    moment = moment.astimezone(dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def ms_ago(ms):
    return iso(dt.datetime.now(dt.UTC) - dt.timedelta(milliseconds=ms))


def wait_for(predicate, timeout=5.0, interval=0.02, message="condition"):
    """Poll predicate() until it is truthy; fail with `message` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def during_a_write(change, read):
    """read() while a write transaction that made change(t) holds on for 0.3 s in a
    worker thread: what read() returned, and the order in which the two ended."""
    blocking_sleep = gevent.monkey.get_original("time", "sleep")
    started, order = threading.Event(), []

    def write(t):
        change(t)
        started.set()
        blocking_sleep(0.3)
        order.append("write done")

    def writer():
        with taskboard.tx() as t:
            t.in_thread(write)
    busy = gevent.spawn(writer)
    wait_for(started.is_set, message="the write to start")
    value = read()
    order.append("read answered")
    busy.get(timeout=5)
    return value, order


def sql(tb, statement, params=()):
    """Run one statement on the test board's database from outside (committed), in a
    worker thread.  On the hub, SQLite's busy wait for a write lock the board holds would
    freeze every greenlet, the board's own too: the one holding that lock across a switch
    (Tx.in_thread) could never commit it, and the statement failed with "database is
    locked" after sqlite3's 5 s."""
    def run():
        con = sqlite3.connect(tb.config["db_path"])
        try:
            with con:
                return con.execute(statement, params).fetchall()
        finally:
            con.close()
    return gevent.get_hub().threadpool.apply(run)


def assert_error(response, status, code=None, field=None):
    """The canonical error body of design.md §3: {error, code, field?}, never a traceback."""
    assert response.status_int == status, response.text
    assert response.content_type == "application/json"
    body = response.json
    assert isinstance(body["error"], str) and body["error"]
    assert not body["error"][0].isupper(), "messages start in lower case"
    assert "Traceback" not in response.text
    if code is not None:
        assert body["code"] == code, body
    if field is not None:
        assert body.get("field") == field, body
    return body


def assert_refused(snapshot, send, url, body, field=None, status=400,
                   code="validation_error"):
    """send(url, body), a webtest client's post_json, put_json or patch_json, is answered
    with the canonical error (assert_error) and changes nothing stored; the error body."""
    before = snapshot()
    error = assert_error(send(url, body, expect_errors=True), status, code, field)
    assert snapshot() == before
    return error


def desk(client, command, body, status=200, **kwargs):
    """POST /api/desktop/<command> (the commands of the desktop API); the response."""
    return client.post_json(f"/api/desktop/{command}", body, status=status, **kwargs)


def tasks_of(client, project_id):
    return client.get(f"/api/projects/{project_id}/tasks").json


def stats(client, project_id):
    return client.get(f"/api/projects/{project_id}/stats").json


def git(cwd, *args):
    """Run git as a person would (own identity, no signing); its stdout.  Started as the
    board starts its own (taskboard.Popen: no fork of this whole test process)."""
    argv = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com",
            "-c", "commit.gpgsign=false", *args]
    proc = taskboard.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv, out, err)
    return out


def make_repo(path):
    """A repository on `main` with one commit (README.md)."""
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("# Shop\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial")
    return path


def worktree_of(tb, task):
    """Where the board keeps the task's git worktree."""
    return os.path.join(tb.data_dir, "worktrees", str(task["project_id"]), task["task_key"])


#: Where outside_tmp() makes its folders: the checkout's .test-roots, or when the checkout
#: is itself in a folder a sandboxed run has its own of, a folder under the login's home.
OUTSIDE_TMP = pathlib.Path(__file__).resolve().parent.parent / ".test-roots"
if str(OUTSIDE_TMP).startswith(("/tmp/", "/var/tmp/", "/dev/shm/")):
    OUTSIDE_TMP = pathlib.Path.home() / ".cache" / "taskboard-test-roots"


@pytest.fixture
def outside_tmp():
    """A folder outside /tmp, under the checkout's .test-roots (removed after): a sandboxed
    run has a /tmp of its own, so that it cannot see what is kept in the real one proves
    nothing.  Not under tests/, which a run of the fake agent sees (its CLI's folder)."""
    folder = OUTSIDE_TMP / uuid.uuid4().hex[:12]
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per CPU and one more: the tests wait on browsers, servers and
    subprocesses about as much as they compute (a run used 1.2 of 2 CPUs with 2 workers)."""
    return (os.cpu_count() or 1) + 1


@pytest.fixture(autouse=True)
def fake_agent_dir(tmp_path, monkeypatch):
    """Where tests/fake_agent.py keeps its sessions and call records, per test.

    Autouse, so it is set up before `tb` and torn down after the board's shutdown: then
    no fake agent, nor any child of one, may be left alive — in any test.
    """
    from agent_helpers import alive, children, read_calls
    folder = tmp_path / "fake-agent"
    folder.mkdir(exist_ok=True)
    monkeypatch.setenv("FAKE_AGENT_DIR", str(folder))
    yield folder
    pids = [c["pid"] for c in read_calls(folder)] + children(folder)
    try:
        wait_for(lambda: not any(alive(p) for p in pids), 15,
                 message=f"every agent process {pids} to end after shutdown")
    finally:
        for pid in filter(alive, pids):  # never leave them behind, even when failing
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def agent_dir(fake_agent_dir):
    return fake_agent_dir


@pytest.fixture
def fast_retries(tb):
    """Retries after ~0.05 s instead of 30 s."""
    tb.config["retry_base_seconds"] = 0.05


def fake_cli_environ(**overrides):
    """The environment that points every non-Claude agent CLI at tests/fake_agent.py,
    which then speaks that CLI's stream (`--as NAME`, see its docstring)."""
    return {cli.env: f"{sys.executable} {FAKE_AGENT} --as {name}"
            for name, cli in taskboard.AGENTS.items() if name != "claude"} | overrides


#: The rigs' boards run agents unsandboxed (bubblewrap "does not work") unless a test is
#: marked `sandbox`: a sandboxed agent's processes have pids of their own namespace, which
#: the tests of process groups cannot look up.
NO_SANDBOX = {"TASKBOARD_BWRAP": "false"}


@pytest.fixture
def config(tmp_path):
    return taskboard.parse_args(
        ["--db", str(tmp_path / "data" / "taskboard.db"),
         "--agent-command", f"{sys.executable} {FAKE_AGENT}"], environ={})


@pytest.fixture(scope="session")
def migrated_db(tmp_path_factory):
    """A database as a board's first start leaves it (every migration applied), made once
    per test process: each `tb` starts from a copy, not from migrating a new one (a third
    of a board's start)."""
    folder = tmp_path_factory.mktemp("migrated")
    config = taskboard.parse_args(["--db", str(folder / "data" / "taskboard.db"),
                                   "--agent-command", "true"], environ={})
    config["bwrap"] = [NO_SANDBOX["TASKBOARD_BWRAP"]]
    taskboard.init(config, resume_runs=False)
    taskboard.shutdown()
    # All of it in the database file, which is what gets copied: a checkpoint of the board's
    # (in a thread of its own, which shutdown() stops waiting for after its grace) may still
    # hold the write-ahead log open, for as long as a loaded machine makes it last.
    def folded():
        con = sqlite3.connect(config["db_path"])
        try:
            return con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        finally:
            con.close()
    wait_for(folded, 30, message="the migrated database's write-ahead log to be folded in")
    return config["db_path"]


@functools.cache
def unsandboxed():
    """What taskboard.try_sandbox finds of NO_SANDBOX's bubblewrap, asked once per process
    (two processes of every board's start)."""
    return taskboard.try_sandbox([NO_SANDBOX["TASKBOARD_BWRAP"]])


@pytest.fixture
def tb(config, request, migrated_db, monkeypatch):
    if not os.path.exists(config["db_path"]):
        os.makedirs(config["data_dir"], mode=0o700, exist_ok=True)
        shutil.copyfile(migrated_db, config["db_path"])
    with monkeypatch.context() as starting:
        if request.node.get_closest_marker("sandbox") is None:
            config["bwrap"] = [NO_SANDBOX["TASKBOARD_BWRAP"]]
            state = unsandboxed()
            starting.setattr(taskboard, "try_sandbox", lambda bwrap: dict(state))
        runtime = taskboard.init(config)
    yield runtime
    taskboard.shutdown()


def bearer():
    """The Authorization header of the running board's token (every board has one)."""
    return {"Authorization": f"Bearer {taskboard.runtime.config['token']}"}


@pytest.fixture
def client(tb):
    """The API as the board's owner calls it: from this machine, with the token."""
    return webtest.TestApp(taskboard.app, extra_environ={
        "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1:4000",
        "HTTP_AUTHORIZATION": bearer()["Authorization"]})


@pytest.fixture
def anonymous(tb):
    """The API as someone without a credential calls it."""
    return webtest.TestApp(taskboard.app, extra_environ={
        "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1:4000"})


class Api:
    """Builds data through the HTTP API with defaults, the way a user would."""

    def __init__(self, client, workdir):
        self.client = client
        self.workdir = workdir
        self._n = 0

    def project(self, **fields):
        self._n += 1
        body = {"name": f"Project {self._n}", "slug": f"project-{self._n}",
                "workingDir": str(self.workdir)} | fields
        return self.client.post_json("/api/projects", body, status=201).json

    def task(self, project_id, **fields):
        body = {"title": "Write tests"} | fields
        return self.client.post_json(f"/api/projects/{project_id}/tasks", body,
                                     status=201).json

    def template(self, project_id, **fields):
        body = {"name": "Bugfix", "content": "Fix {{task_title}}"} | fields
        return self.client.post_json(f"/api/projects/{project_id}/templates", body,
                                     status=201).json

    def snippet(self, project_id, **fields):
        body = {"name": "Style", "content": "Use tabs."} | fields
        return self.client.post_json(f"/api/projects/{project_id}/snippets", body,
                                     status=201).json

    def webhook(self, project_id, **fields):
        body = {"platform": "custom", "url": "http://127.0.0.1:9/hook",
                "events": ["task:created"]} | fields
        return self.client.post_json(f"/api/projects/{project_id}/webhooks", body,
                                     status=201).json

    def move(self, task_id, status):
        return self.client.patch_json(f"/api/tasks/{task_id}/status", {"status": status},
                                      status=200).json


@pytest.fixture
def api(client, tmp_path):
    workdir = tmp_path / "code"
    workdir.mkdir()
    return Api(client, workdir)


@pytest.fixture
def repo(api):
    """The project's workingDir, made a git repository with one commit on main."""
    return make_repo(api.workdir)


@pytest.fixture
def snapshot(tb):
    """snapshot() -> every row of every table, to prove a refused request changed nothing."""
    def take():
        taskboard.runtime.logs.flush()
        con = sqlite3.connect(tb.config["db_path"])
        try:
            tables = [r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            return {t: con.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()
                    for t in tables}
        finally:
            con.close()
    return take


# websocket-client checks a text frame's UTF-8 byte by byte in Python (0.4 s a megabyte)
# before recv() decodes it with the strict codec, which refuses the same bytes: skip the first.
WS_OPTIONS = {"skip_utf8_validation": True}


class WsClient:
    """A websocket-client connection that reads JSON messages, skipping pings."""

    def __init__(self, url, origin=None, timeout=5, headers=None):
        self.conn = websocket.create_connection(
            url, timeout=timeout, origin=origin, suppress_origin=origin is None,
            header=[f"{k}: {v}" for k, v in (bearer() if headers is None else headers).items()],
            **WS_OPTIONS)

    def next(self, timeout=5):
        self.conn.settimeout(timeout)
        while True:
            message = json.loads(self.conn.recv())
            if message.get("event") != "ping":
                return message

    def until(self, event, predicate=lambda data: True, timeout=5):
        """Read until a message of `event` whose data satisfies predicate; return it."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {event} message within {timeout}s")
            message = self.next(left)
            if message["event"] == event and predicate(message["data"]):
                return message

    def close(self):
        # NOTE: close() returns early, leaving the socket open, once the server has closed.
        self.conn.shutdown()


class Live:
    """A real server on a free port, in this process, with WebSocket support."""

    def __init__(self, server):
        self.server = server
        self.port = server.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        self.sockets = []

    def ws(self, query="", origin=None, timeout=5, headers=None):
        client = WsClient(f"ws://127.0.0.1:{self.port}/ws{query}", origin=origin,
                          timeout=timeout, headers=headers)
        self.sockets.append(client)
        return client


@pytest.fixture
def live(tb):
    server = taskboard.make_server("127.0.0.1", 0)
    server.start()
    live = Live(server)
    yield live
    for sock in live.sockets:
        sock.close()
    server.stop(timeout=1)


@pytest.fixture(scope="session")
def real_claude():
    """The path of the real Claude Code CLI: installed (or found) once per test session, else
    a skip that says why (tests/claude_stub.py)."""
    from claude_stub import claude_cli
    return claude_cli()


@pytest.fixture
def claude_api():
    """A loopback stand-in for the Messages API that the real CLI is pointed at."""
    from claude_stub import MessagesStub
    with MessagesStub() as stub:
        yield stub
