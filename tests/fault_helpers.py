"""Helpers for tests/test_faults.py and tests/test_main.py: a real `python taskboard.py`
process driven over HTTP, another process holding the database's write lock, a size-limited
file system, the live members of a process group, and a webhook target that never answers."""

import contextlib
import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
import uuid

import gevent.event
import pytest
import requests
from gevent.pywsgi import WSGIServer

from conftest import FAKE_AGENT, NO_SANDBOX, ROOT, wait_for

URL_RE = re.compile(r"http://(\d+\.\d+\.\d+\.\d+):(\d+)/")
#: The fake agent as an --agent-command (the same interpreter as the tests).
AGENT_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(FAKE_AGENT)}"


def clean_env(tmp_path, **extra) -> dict:
    """This environment without any TASKBOARD_* or data-dir variable, with a scratch HOME
    (FAKE_AGENT_DIR, set by conftest, stays so the agents' calls are recorded)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TASKBOARD_") and k not in ("STATE_DIRECTORY", "XDG_DATA_HOME")}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env["HOME"] = str(home)
    return env | NO_SANDBOX | extra


class ServerProcess:
    """One `python taskboard.py ARGS` process; stdout and stderr go to files in tmp_path.
    `db` is the database it was given, for the helpers that read it from outside."""

    def __init__(self, tmp_path, env, *args, db=None):
        stamp = time.monotonic_ns()
        self.out_path = tmp_path / f"server-{stamp}.out"
        self.err_path = tmp_path / f"server-{stamp}.err"
        self.db = None if db is None else str(db)
        argv = [sys.executable, "taskboard.py", *map(str, args)]
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self.url = self.host = self.port = self.token = None

    @classmethod
    def board(cls, tmp_path, db, env, *args) -> "ServerProcess":
        """`--port 0 --db DB --agent-command <the fake agent> ARGS`."""
        return cls(tmp_path, env, "--port", 0, "--db", db, "--agent-command", AGENT_COMMAND,
                   *args, db=db)

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def errors(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait_ready(self, timeout=15) -> "ServerProcess":
        """Wait for the line with the URL; `url` (no trailing slash), `host` and `port`."""
        def found():
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}: "
                                     f"{self.errors()[-3000:]}")
            return URL_RE.search(self.output())
        match = wait_for(found, timeout, interval=0.01, message="the server's URL line")
        self.host, self.port = match.group(1), int(match.group(2))
        self.url = f"http://{self.host}:{self.port}"
        signed = re.search(r"/login\?token=(\S+) to sign in", self.output())
        self.token = signed.group(1) if signed else None  # None: --no-auth
        return self

    def request(self, method, path, timeout=10, **kwargs) -> requests.Response:
        """A request with the board's token (the one its sign-in line printed)."""
        if self.token is not None:
            kwargs["headers"] = {"Authorization": f"Bearer {self.token}",
                                 **(kwargs.get("headers") or {})}
        return requests.request(method, self.url + path, timeout=timeout, **kwargs)

    def call(self, method, path, status=200, **kwargs):
        """The JSON answer of a request that must answer `status`."""
        response = self.request(method, path, **kwargs)
        assert response.status_code == status, (method, path, response.status_code,
                                                response.text[:2000])
        return response.json()

    def project(self, workdir, **fields) -> dict:
        body = {"name": "Faults", "slug": "faults", "workingDir": str(workdir)} | fields
        return self.call("POST", "/api/projects", 201, json=body)

    def task(self, project_id, **fields) -> dict:
        return self.call("POST", f"/api/projects/{project_id}/tasks", 201,
                         json={"title": "Survive"} | fields)

    def move(self, task_id, status) -> dict:
        return self.call("PATCH", f"/api/tasks/{task_id}/status", json={"status": status})

    def health(self) -> dict:
        return self.call("GET", "/api/health", timeout=5)

    def get_task(self, task_id) -> dict:
        return self.call("GET", f"/api/tasks/{task_id}")

    def logs(self, task_id) -> list[dict]:
        return self.call("GET", f"/api/tasks/{task_id}/logs?limit=10000")

    def status(self, name) -> int:
        """A number of kB from /proc/<pid>/status (VmRSS, VmHWM, ...)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
        raise KeyError(name)

    def kill9(self) -> None:
        """SIGKILL to the server alone (its agents, in their own groups, live on)."""
        os.kill(self.pid, signal.SIGKILL)
        assert self.proc.wait(timeout=10) == -signal.SIGKILL

    def terminate(self, timeout=15) -> int:
        """SIGTERM, then the exit code (or an AssertionError with the log if it hangs)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the server did not exit within {timeout}s after SIGTERM: "
                                 f"{self.errors()[-3000:]}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def db_rows(path, statement, params=()):
    """Read the database from outside, as another process would (committed data only)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return con.execute(statement, params).fetchall()
    finally:
        con.close()


def integrity(path) -> list:
    return db_rows(path, "PRAGMA integrity_check")


def state(pid):
    """The /proc state letter of pid (R, S, Z, ...), or None once it is gone (reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def group_members(pgid) -> list[int]:
    """The live (not zombie) processes of a process group."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) == pgid and state(entry) not in (None, "Z", "X"):
                members.append(int(entry))
        except (ProcessLookupError, PermissionError):
            pass
    return members


LOCKER = """
import select, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
con.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))  # until told (EOF), or `seconds`
open(sys.argv[3], "w").close()  # the mark, before the lock is given back
con.execute("ROLLBACK")
con.close()
print("released", flush=True)
"""


class WriteLock:
    """Another process that takes the database's write lock (BEGIN IMMEDIATE: in WAL mode
    readers go on, writers wait) and holds it for `seconds`, or until release(); as a
    context manager, for the block and until it is given back.

    `held` stays True until the locker starts to give the lock back (it writes a mark file
    first), so a test can tell whether an answer came while the lock was still held."""

    def __init__(self, db, seconds):
        self.seconds = seconds
        self.mark = f"{db}.released-{uuid.uuid4().hex}"
        self.proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(db), str(seconds),
                                      self.mark], stdout=subprocess.PIPE,
                                     stdin=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        assert line == "locked", f"the locker said {line!r}"

    @property
    def held(self) -> bool:
        """True while the other process still holds the lock (it has not begun to let go)."""
        return not os.path.exists(self.mark)

    def release(self) -> None:
        """Tell the other process to give the lock back now."""
        if not self.proc.stdin.closed:
            self.proc.stdin.close()

    def wait(self) -> None:
        """Wait until the lock is given back."""
        assert self.proc.stdout.readline().strip() == "released"
        self.proc.stdout.close()
        assert self.proc.wait(timeout=10) == 0

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self.release()
        self.proc.stdout.close()

    def __enter__(self) -> "WriteLock":
        return self

    def __exit__(self, exc_type, *_) -> None:
        """Leaving the block waits until the lock is given back (after `seconds`, or at once
        after release()); leaving it by an exception kills the other process."""
        try:
            if exc_type is None:
                self.wait()
        finally:
            self.close()


@contextlib.contextmanager
def small_filesystem(path, size="8m"):
    """A tmpfs of `size` mounted on path for the duration (root only; skipped when mount is
    not permitted), unmounted afterwards whatever happened."""
    os.makedirs(path, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                              str(path)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs (needs root or CAP_SYS_ADMIN): "
                    f"{mounted.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(folder) -> str:
    """Write a file in folder until the file system is full; return its path."""
    path = os.path.join(folder, "filler")
    block = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(block)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 512)
    return path


class HangingTarget:
    """A webhook target that accepts every request, reads it, and answers none (200 once
    release() is called).  `received` holds the JSON bodies in arrival order, `answered` the
    ones answered so far."""

    def __init__(self):
        self.received, self.answered = [], []
        self.released = gevent.event.Event()
        self.server = WSGIServer(("127.0.0.1", 0), self._handle, log=None, error_log=None)
        self.server.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"

    def _handle(self, environ, start_response):
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        self.received.append(json.loads(body))
        self.released.wait(120)
        self.answered.append(json.loads(body))
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    def release(self) -> None:
        self.released.set()

    def stop(self) -> None:
        self.released.set()
        self.server.stop(timeout=1)
