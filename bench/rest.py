"""Taskboard at rest (issues 34, 42): start-up, memory when idle and after 10,000 tasks, CPU.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/rest.py                        # 7 starts of each, 10,000 tasks
    python bench/rest.py --quick                # 3 starts, 2,000 tasks, 10 s of rest
    python bench/rest.py --baseline-rev HEAD~3  # compare with another commit
    python bench/rest.py --rest-seconds 60      # the CPU at rest over 60 s (default 30)

Every server runs from a copy of its code in a temp folder, as the systemd unit runs it
(taskboard.service: `python -m taskboard` in the code's folder, PYTHONPYCACHEPREFIX set to
its CacheDirectory; ProtectSystem makes the code read-only, and with the prefix Python
writes nothing beside it). Each is started on a database an earlier start made (the push
key pair and the token exist), from a clean environment with the token in TASKBOARD_TOKEN.

  startup_bare     a bare bottle + gevent server (monkey.patch_all, bottle, gevent's
                   WSGIServer, one route): process start to its first 200; median of
                   --starts. The baseline of every start-up figure
  startup          Taskboard: process start to the first 200 of GET /api/projects with the
                   token, its bytecode cached by one start before; median. Goal: <= 2x bare
                   (gevent's monkey.patch_all() as everyone writes it: its plugin hooks
                   read every installed package's metadata, which Taskboard skips)
  startup_vs_bare_no_plugins  the same against a bare server that skips them too
  startup_before   the same for --baseline-rev (default ca438c1, before this issue)
  startup_no_cache the same with no bytecode cache anywhere (PYTHONDONTWRITEBYTECODE, no
                   prefix): a read-only checkout without the unit's cache folder
  startup_script   `python taskboard.py`, the README's command: a script is compiled at
                   every start
  rss_idle         VmRSS of the started board 1 s after its first answer, the median start
                   of `startup`; baseline: the same for --baseline-rev. Goal < 70 MB. The
                   bare server's is rss_idle_bare
  rss_idle_script  the same for `python taskboard.py` (the README's command), the median
                   start of `startup_script`. Goal (issue 42) < 62 MB
  rss_tasks        VmRSS after creating --tasks tasks through the API as a person's
                   clients do (8 at once, each on a kept-alive connection) and listing them
                   ten times (GET /api/projects/:id/tasks, plain and gzip in turn), 2 s
                   later (at rest: the board gives the heap's free pages back a second
                   after its last request, issue 42); baseline:
                   --baseline-rev's. Goal < 100 MB
  rss_tasks_<k>_script  the same for `python taskboard.py`, on a database of its own.
                   Goal (issue 42) < 82 MB at 10,000 tasks (--quick's 2,000: indicative)
  rss_idle_script_no_cache, rss_tasks_<k>_script_no_cache  the same two with
                   PYTHONDONTWRITEBYTECODE=1 (Docker images set it): no .pyc anywhere
                   (issue 59); same goals
  list_p50         then that list's p50 over 30 GETs, served from what is kept ready;
                   baseline: --baseline-rev's, on the same tasks. Goal: >= 0.9x (today's
                   speed is the floor)

  cpu_rest_bare    a board started as the README says (`python taskboard.py`) on a fresh
                   data dir, no client connected: its own CPU (utime + stime of
                   /proc/<pid>/stat, its children not counted) over --rest-seconds (30;
                   --quick 10), from 5 s after its first answer (the agent command's
                   --version and the other start-up work over). % of one core; goal
                   (issue 42) < 0.5 %
  cpu_rest_schedules  the same board with 1,000 enabled schedules made through its API,
                   none due in the window (issue 48), over the furnished window. Goal
                   < 0.5 %; baseline: cpu_rest_bare
  cpu_rest_furnished  the same board furnished first through its API: one project with
                   autoBranch, autoPr and gitHostRepo whose workingDir's `origin` is a bare
                   repository behind a fake source host (tests/git_host_helpers.FakeHost,
                   in a thread of this process), one task run by tests/fake_agent.py to
                   testing, moved to done, its pull request opened and followed (every
                   prPollSeconds, 60); one host, a real sshd (tests/ssh_helpers.SshServer),
                   added, checked, trusted, and the project set to run there (host checks
                   every 60 s); one push device (bench/_push_receiver.py, a process of its
                   own). Then 5 s, then a window of at least 70 s (--quick: the same as
                   bare), so that each once-a-minute timer fires in it once. Goal (issue
                   42) < 1 %. Printed too: the fake host's requests in the window and
                   whether a host check fell in it

The last line, BENCH_RESULT {...}, is for bench/run.py.
"""

import argparse
import datetime as dt
import http.client
import json
import os
import pathlib
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from _common import (
    AUTH_HEADER,
    REPO_ROOT,
    emit_result,
    free_port,
    print_table,
    proc_memory_kb,
    result_row,
    taskboard_env,
)

sys.path.insert(0, os.path.join(REPO_ROOT, "tests"))
from git_host_helpers import REPO, FakeHost, add_origin  # noqa: E402
from git_host_helpers import TOKEN as HOST_TOKEN  # noqa: E402
from ssh_helpers import SshServer, sshd_missing  # noqa: E402

GOAL_STARTUP_RATIO, GOAL_IDLE_MB, GOAL_TASKS_MB, GOAL_LIST_RATIO = 2.0, 70.0, 100.0, 0.9
#: issue 42: memory on the README's path (`python taskboard.py`), CPU at rest (% of a core)
GOAL_IDLE_SCRIPT_MB, GOAL_TASKS_SCRIPT_MB = 62.0, 82.0
GOAL_CPU_BARE, GOAL_CPU_FURNISHED = 0.5, 1.0
#: Issue 48: a board with this many schedules at rest costs < GOAL_CPU_SCHEDULES % of a core.
SCHEDULES, GOAL_CPU_SCHEDULES = 1000, 0.5
#: the furnished window at least: every once-a-minute timer fires once in it
FURNISHED_SECONDS = 70.0
#: after its first answer, what a board does once (the agent's --version, ...) is over by then
SETTLE_SECONDS = 5.0
FAKE_AGENT = os.path.join(REPO_ROOT, "tests", "fake_agent.py")
PUSH_RECEIVER = os.path.join(REPO_ROOT, "bench", "_push_receiver.py")
PR_TASK = "Add a greeting. fake:ok fake:commit=hello.txt"

BARE = """
import sys
if sys.argv[2:] == ["--no-plugins"]:  # as Taskboard's first lines do
    import gevent.events; gevent.events.notify_and_call_entry_points = gevent.events.notify
from gevent import monkey; monkey.patch_all()
import bottle
from gevent.pywsgi import WSGIServer
app = bottle.Bottle()
@app.get("/api/projects")
def projects():
    return {"ok": True}
WSGIServer(("127.0.0.1", int(sys.argv[1])), app, log=None).serve_forever()
"""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--starts", type=int, default=7, help="starts of each server")
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks created and listed")
    parser.add_argument("--baseline-rev", default="ca438c1",
                        help="the commit to compare with ('' for none)")
    parser.add_argument("--rest-seconds", type=float, default=30.0,
                        help="the window of the CPU at rest")
    parser.add_argument("--quick", action="store_true",
                        help="3 starts, 2,000 tasks, 10 s of rest")
    args = parser.parse_args(argv)
    if args.quick:
        args.starts, args.tasks, args.rest_seconds = 3, 2_000, 10.0
    return args


def checkout(rev, folder):
    """ taskboard.py and static/ of rev (None: the working tree) copied into folder. """
    os.makedirs(folder)
    if rev is None:
        shutil.copy(os.path.join(REPO_ROOT, "taskboard.py"), folder)
        shutil.copytree(os.path.join(REPO_ROOT, "static"), os.path.join(folder, "static"))
        return folder
    archive = subprocess.run(["git", "-C", REPO_ROOT, "archive", rev, "taskboard.py",
                              "static"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


def clean_env(**extra):
    env = {k: v for k, v in taskboard_env().items()
           if not (k.startswith("TASKBOARD_") and k != "TASKBOARD_TOKEN")
           and k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    return {**env, **extra}


class Started:
    """ One server process, started and timed to its first 200 of GET /api/projects. """

    def __init__(self, argv, cwd, env, port, log=None):
        self.port = port
        t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=log or subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT if log else subprocess.DEVNULL)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv} exited with {self.proc.returncode}")
            try:
                status, _ = self.get("/api/projects")
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() - t0 > 60:
                self.stop()
                raise RuntimeError(f"{argv} did not answer within 60 s")
            time.sleep(0.002)
        self.seconds = time.monotonic() - t0
        self.conn = None

    def get(self, path, gzip=False):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            return self._call(conn, "GET", path, gzip=gzip)
        finally:
            conn.close()

    def call(self, method, path, body=None, gzip=False):
        """ On one kept-alive connection: (status, bytes). """
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        return self._call(self.conn, method, path, body, gzip)

    @staticmethod
    def _call(conn, method, path, body=None, gzip=False):
        headers = {"Authorization": AUTH_HEADER}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if gzip:
            headers["Accept-Encoding"] = "gzip"
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()

    def rss_mb(self):
        return proc_memory_kb(self.proc.pid).get("VmRSS", 0) / 1024

    def stop(self):
        if self.conn is not None:
            self.conn.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def taskboard_argv(form, db, port):
    run = ["-m", "taskboard"] if form == "module" else ["taskboard.py"]
    return [sys.executable, *run, "--port", str(port), "--db", db, "--agent-command", "true"]


def starts(label, times, argv_for, cwd, env):
    """ Median start (seconds) and the idle RSS (MB) of the median start's server. """
    results = []
    for _ in range(times):
        port = free_port()
        server = Started(argv_for(port), cwd, env, port)
        time.sleep(1.0)  # settled: what it keeps at rest
        results.append((server.seconds, server.rss_mb()))
        server.stop()
    results.sort()
    seconds, rss = results[len(results) // 2]
    print(f"{label}: start {seconds * 1000:.0f} ms (median of {times}: "
          f"{', '.join(f'{s * 1000:.0f}' for s, _ in results)}), idle RSS {rss:.1f} MB",
          flush=True)
    return seconds, rss


#: What a person's clients do before rss_tasks is read: create the tasks from CLIENTS at once,
#: then list them LISTS times plain and as many gzipped.
CLIENTS, LISTS = 8, 5


def from_clients(port, count, make):
    """ make(conn, n) for each n in range(count), from CLIENTS clients at once, each on a
    kept-alive connection of its own, as a person's clients make tasks. """
    def client(first):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            for n in range(first, count, CLIENTS):
                make(conn, n)
        finally:
            conn.close()
    clients = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for each in clients:
        each.start()
    for each in clients:
        each.join()


def tasks_and_list(code, db, env, tasks, form="module"):
    """ (RSS MB after creating `tasks` tasks and listing them, list p50 in ms). """
    port = free_port()
    server = Started(taskboard_argv(form, db, port), code, env, port)
    try:
        work = os.path.join(os.path.dirname(db), "work")
        os.makedirs(work, exist_ok=True)
        status, body = server.call("POST", "/api/projects", {"name": "Rest", "slug": "rest",
                                                              "workingDir": work})
        project = json.loads(body)["id"]

        def create(conn, n):
            status, _ = Started._call(conn, "POST", f"/api/projects/{project}/tasks", {
                "title": f"Task {n}", "description": "some words " * 5})
            assert status == 201, status
        from_clients(server.port, tasks, create)
        path = f"/api/projects/{project}/tasks"
        for gzip in (False, True) * LISTS:
            status, body = server.call("GET", path, gzip=gzip)
            assert status == 200, status
        time.sleep(2.0)  # at rest again: a second after its last request it frees the heap
        rss = server.rss_mb()
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            server.call("GET", path)
            times.append((time.perf_counter() - t0) * 1000)
        return rss, statistics.median(times)
    finally:
        server.stop()


def cpu_seconds(pid):
    """ User + system CPU the process has used so far, its children not counted. """
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def context_switches(pid):
    """ Voluntary + involuntary context switches of the main thread (gevent's hub, where
    every timer fires) so far: how often the board wakes. """
    with open(f"/proc/{pid}/status") as f:
        return sum(int(line.split()[1]) for line in f
                   if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")))


def at_rest(server, seconds, mark=lambda: None):
    """ SETTLE_SECONDS, then the server's own CPU over `seconds`: (% of a core, wakeups of
    its main thread a second, the window's (start, end) in time.time(), mark() at its start
    and end). Nothing is connected. """
    time.sleep(SETTLE_SECONDS)
    pid = server.proc.pid
    marked0, wall0, t0 = mark(), time.time(), time.monotonic()
    cpu0, switches0 = cpu_seconds(pid), context_switches(pid)
    time.sleep(seconds)
    cpu1, switches1, t1 = cpu_seconds(pid), context_switches(pid), time.monotonic()
    marked1 = mark()
    if server.proc.poll() is not None:
        raise RuntimeError(f"the board exited with {server.proc.returncode} while at rest")
    return ((cpu1 - cpu0) / (t1 - t0) * 100, (switches1 - switches0) / (t1 - t0),
            (wall0, wall0 + t1 - t0), (marked0, marked1))


def cpu_rest(code, tmp, env, seconds, schedules=0):
    """ A board started as the README says on a fresh data dir (with `schedules` enabled
    schedules, design §19, none due in the window): its CPU at rest (%). """
    port = free_port()
    folder = os.path.join(tmp, f"rest-{schedules}-schedules")
    os.makedirs(os.path.join(folder, "work"))
    server = Started(taskboard_argv("script", os.path.join(folder, "taskboard.db"), port), code,
                     env, port)
    try:
        if schedules:
            status, body = server.call("POST", "/api/projects", {
                "name": "Clock", "slug": "clock", "workingDir": os.path.join(folder, "work")})
            assert status == 201, body
            project = json.loads(body)["id"]
            hour = (time.gmtime().tm_hour + 12) % 24  # half a day away: none fires at rest
            for n in range(schedules):
                status, body = server.call("POST", f"/api/projects/{project}/schedules", {
                    "name": f"schedule {n}", "cron": f"{n % 60} {hour} * * *",
                    "timezone": "UTC", "task": {"title": f"Scheduled {n}"}})
                assert status == 201, body
            server.conn.close()
            server.conn = None
        percent, switches, _, _ = at_rest(server, seconds)
    finally:
        server.stop()
    print(f"taskboard (python taskboard.py, fresh data dir, {schedules:,} schedules) at rest "
          f"over {seconds:g} s: {percent:.3f} % of a core, its main thread woken "
          f"{switches:.1f} times/s", flush=True)
    return percent


def git_here(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=Bench", "-c", "user.email=bench@example.com",
                           "-c", "commit.gpgsign=false", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


class SourceHost:
    """ tests/git_host_helpers.FakeHost served by a gevent hub of its own, in a thread of
    this (unpatched) process: the board reaches it over loopback, its CPU is not the
    board's. """

    def __init__(self, origin):
        started = threading.Event()

        def serve():
            import gevent
            self.hub = gevent.get_hub()
            self.fake = FakeHost(origin)
            started.set()
            self.fake.server.serve_forever()

        self.thread = threading.Thread(target=serve, name="fake source host", daemon=True)
        self.thread.start()
        if not started.wait(30):
            raise RuntimeError("the fake source host did not start")
        self.url = self.fake.url

    def requests(self):
        return list(self.fake.requests)

    def stop(self):
        self.hub.loop.run_callback_threadsafe(self.fake.stop)
        self.thread.join(5)


class PushReceiver:
    """ bench/_push_receiver.py (tests/push_service.py in a process of its own), one phone. """

    def __init__(self, folder):
        self.proc = subprocess.Popen(
            [sys.executable, PUSH_RECEIVER, "--devices", "1", "--out",
             os.path.join(folder, "pushes.jsonl")], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        first = json.loads(self.proc.stdout.readline())
        self.env, self.device = first["env"], first["devices"][0]

    def stop(self):
        self.proc.stdin.close()
        last = self.proc.stdout.read().strip()
        self.proc.wait(10)
        return json.loads(last.splitlines()[-1]) if last else {}


def api(server, method, path, body=None, status=200):
    """ One call on a connection of its own, closed after: nothing stays connected. """
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        got, raw = server._call(conn, method, path, body)
    finally:
        conn.close()
    if got != status:
        raise RuntimeError(f"{method} {path}: {got} {raw[:300]!r}")
    return json.loads(raw) if raw else None


def wait_task(server, task_id, ready, what, seconds=120):
    deadline = time.monotonic() + seconds
    while True:
        task = api(server, "GET", f"/api/tasks/{task_id}")
        if ready(task):
            return task
        if task["status"] == "failed" or time.monotonic() > deadline:
            raise RuntimeError(f"task {task_id}: waited for {what}: status "
                               f"{task['status']}, pr {task.get('pr')}")
        time.sleep(0.2)


def furnish(server, folder, repo, sshd, push, agent):
    """ One project with a followed pull request, one host it runs on, one push device. """
    project = api(server, "POST", "/api/projects", {
        "name": "Shop", "slug": "shop", "workingDir": repo, "autoBranch": True,
        "autoPr": True, "gitHostRepo": REPO}, 201)
    task = api(server, "POST", f"/api/projects/{project['id']}/tasks",
               {"title": "Add a greeting", "description": PR_TASK}, 201)
    api(server, "PATCH", f"/api/tasks/{task['id']}/status", {"status": "in_progress"})
    wait_task(server, task["id"], lambda t: t["status"] == "testing", "testing")
    api(server, "PATCH", f"/api/tasks/{task['id']}/status", {"status": "done"})
    wait_task(server, task["id"], lambda t: (t.get("pr") or {}).get("state") == "open",
              "its pull request to be open and followed")
    host = api(server, "POST", "/api/hosts", {
        "name": "build box", "address": sshd.address, "port": sshd.port,
        "identityFile": sshd.identity, "baseDir": os.path.join(folder, "host"),
        "agentCommands": {"claude": agent}}, 201)
    shown = api(server, "POST", f"/api/hosts/{host['id']}/check")["lastCheck"]
    if shown["fingerprint"] != sshd.fingerprint:
        raise RuntimeError(f"the host check showed {shown}")
    api(server, "PUT", f"/api/hosts/{host['id']}", {"hostKey": shown["fingerprint"]})
    checked = api(server, "POST", f"/api/hosts/{host['id']}/check")["lastCheck"]
    if not checked["ok"]:
        raise RuntimeError(f"the trusted host's check failed: {checked}")
    api(server, "PUT", f"/api/projects/{project['id']}", {"host": host["id"]})
    api(server, "POST", "/api/push/subscriptions",
        {**push.device, "events": ["approval", "question"]}, 201)
    return task["id"], host["id"]


def cpu_rest_furnished(code, tmp, env, seconds):
    """ The board furnished (see the module's doc), then at rest: its CPU (%), or None
    when this machine has no sshd. """
    missing = sshd_missing()
    if missing:
        print(f"cpu_rest_furnished not measured: {missing}", flush=True)
        return None
    folder = os.path.join(tmp, "rest-furnished")
    repo = os.path.join(folder, "code")
    os.makedirs(repo)
    git_here(repo, "init", "-q", "-b", "main")
    with open(os.path.join(repo, "README.md"), "w") as f:
        f.write("# Shop\n")
    git_here(repo, "add", "README.md")
    git_here(repo, "commit", "-q", "-m", "initial")
    origin = add_origin(pathlib.Path(repo), pathlib.Path(folder, "origin.git"))
    agent_dir = os.path.join(folder, "agent")
    os.makedirs(agent_dir)
    fake = f"{shlex.quote(sys.executable)} {shlex.quote(FAKE_AGENT)}"
    forge = push = sshd = server = None
    try:
        forge = SourceHost(str(origin))
        push = PushReceiver(folder)
        sshd = SshServer(folder)
        port = free_port()
        board_env = {**env, **push.env, "TASKBOARD_GIT_HOST_API": forge.url,
                     "TASKBOARD_GIT_HOST_TOKEN": HOST_TOKEN, "FAKE_AGENT_DIR": agent_dir}
        argv = [sys.executable, "taskboard.py", "--port", str(port), "--db",
                os.path.join(folder, "data", "taskboard.db"), "--agent-command", fake]
        with open(os.path.join(folder, "board.log"), "wb") as log:
            server = Started(argv, code, board_env, port, log)
        t0 = time.monotonic()
        try:
            task_id, host_id = furnish(server, folder, repo, sshd, push,
                                       f"env FAKE_AGENT_DIR={shlex.quote(agent_dir)} {fake}")
        except RuntimeError as exc:
            with open(os.path.join(folder, "board.log"), errors="replace") as f:
                raise RuntimeError(f"furnishing the board failed: {exc}\nits log's tail:\n"
                                   f"{f.read()[-3000:]}") from None
        print(f"furnished in {time.monotonic() - t0:.1f} s: a project with a followed pull "
              f"request, a host it runs on, a push device", flush=True)
        percent, switches, (start, end), (before, after) = at_rest(
            server, seconds, lambda: len(forge.requests()))
        window = forge.requests()[before:after]
        checked = api(server, "GET", f"/api/hosts/{host_id}")["lastCheck"]
        pr = api(server, "GET", f"/api/tasks/{task_id}")["pr"]
    finally:
        for thing in (server, sshd, forge):
            if thing is not None:
                thing.stop()
        if push is not None:
            push.stop()
    at = dt.datetime.fromisoformat(checked["at"].replace("Z", "+00:00")).timestamp()
    gets = [r for r in window if r["method"] == "GET"]
    print(f"taskboard (python taskboard.py, furnished) at rest over {seconds:g} s: "
          f"{percent:.3f} % of a core, its main thread woken {switches:.1f} times/s; in the "
          f"window the fake source host got {len(window)} request(s) ({len(gets)} GET, "
          f"{sum(r.get('status') == 304 for r in gets)} answered 304), a host check "
          f"{'fell' if start <= at <= end else 'did not fall'} in it (last at "
          f"{checked['at']}, ok {checked['ok']}); the pull request is {pr['state']}",
          flush=True)
    return percent


def main(argv=None):
    args = parse_args(argv)
    print(f"bench/rest.py: {args.starts} starts of each, {args.tasks:,} tasks, "
          f"{args.rest_seconds:g} s at rest, baseline {args.baseline_rev or 'none'}, "
          f"{os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="taskboard-bench-rest-") as tmp:
        rows = run(args, tmp)
    print_table(rows)
    emit_result("rest", rows, baseline_rev=args.baseline_rev or None)


def run(args, tmp):
    ours = checkout(None, os.path.join(tmp, "ours"))
    before = checkout(args.baseline_rev, os.path.join(tmp, "before")) \
        if args.baseline_rev else None
    bare = os.path.join(tmp, "bare.py")
    with open(bare, "w") as f:
        f.write(BARE)
    cached = clean_env(PYTHONPYCACHEPREFIX=os.path.join(tmp, "cache"))
    uncached = clean_env(PYTHONDONTWRITEBYTECODE="1")

    def db(name):
        return os.path.join(tmp, name, "taskboard.db")

    # a first start of each makes its database, key and bytecode
    for code, name, form, env in ((ours, "ours-db", "module", cached),
                                  (ours, "script-db", "script", cached),
                                  (ours, "nocache-db", "script", uncached),
                                  (before, "before-db", "module", cached)):
        if code:
            port = free_port()
            Started(taskboard_argv(form, db(name), port), code, env, port).stop()
    bare_s, bare_rss = starts("bare bottle + gevent", args.starts,
                              lambda port: [sys.executable, bare, str(port)], tmp, cached)
    bare_np_s, _ = starts("bare bottle + gevent, no plugin hooks", args.starts,
                          lambda port: [sys.executable, bare, str(port), "--no-plugins"], tmp,
                          cached)
    start_s, idle = starts("taskboard (python -m, bytecode cached)", args.starts,
                           lambda port: taskboard_argv("module", db("ours-db"), port), ours,
                           cached)
    no_cache_s, _ = starts("taskboard (python -m, no bytecode cache)", args.starts,
                           lambda port: taskboard_argv("module", db("ours-db"), port), ours,
                           uncached)
    script_s, script_rss = starts("taskboard (python taskboard.py)", args.starts,
                                  lambda port: taskboard_argv("script", db("ours-db"), port),
                                  ours, cached)
    _, nocache_rss = starts("taskboard (python taskboard.py, PYTHONDONTWRITEBYTECODE=1)",
                            args.starts, lambda port: taskboard_argv(
                                "script", db("ours-db"), port), ours, uncached)
    before_s = before_idle = None
    if before:
        before_s, before_idle = starts(f"{args.baseline_rev} (python -m, bytecode cached)",
                                       args.starts, lambda port: taskboard_argv(
                                           "module", db("before-db"), port), before, cached)
    tasks_rss, list_ms = tasks_and_list(ours, db("ours-db"), cached, args.tasks)
    print(f"taskboard: {args.tasks:,} tasks created and listed: RSS {tasks_rss:.1f} MB, list "
          f"p50 {list_ms:.2f} ms", flush=True)
    script_tasks_rss, script_list_ms = tasks_and_list(ours, db("script-db"), cached,
                                                      args.tasks, "script")
    print(f"taskboard (python taskboard.py): {args.tasks:,} tasks created and listed: RSS "
          f"{script_tasks_rss:.1f} MB, list p50 {script_list_ms:.2f} ms", flush=True)
    nocache_tasks_rss, _ = tasks_and_list(ours, db("nocache-db"), uncached, args.tasks,
                                          "script")
    print(f"taskboard (python taskboard.py, PYTHONDONTWRITEBYTECODE=1): {args.tasks:,} tasks "
          f"created and listed: RSS {nocache_tasks_rss:.1f} MB", flush=True)
    before_tasks = before_list = None
    if before:
        before_tasks, before_list = tasks_and_list(before, db("before-db"), cached, args.tasks)
        print(f"{args.baseline_rev}: {args.tasks:,} tasks created and listed: RSS "
              f"{before_tasks:.1f} MB, list p50 {before_list:.2f} ms", flush=True)

    cpu_bare = cpu_rest(ours, tmp, cached, args.rest_seconds)
    # a minute's timers (a look at the PR, a host check) fall in a window of 70 s
    cpu_furnished = cpu_rest_furnished(ours, tmp, cached, args.rest_seconds if args.quick
                                       else max(args.rest_seconds, FURNISHED_SECONDS))
    cpu_schedules = cpu_rest(ours, tmp, cached, args.rest_seconds if args.quick
                             else max(args.rest_seconds, FURNISHED_SECONDS), SCHEDULES)

    def vs(ours_value, base):
        return (base, base / ours_value) if base else (None, None)

    k = f"{args.tasks // 1000}k" if args.tasks % 1000 == 0 else str(args.tasks)
    return [
        result_row("startup_bare", bare_s * 1000, "ms"),
        result_row("startup", start_s * 1000, "ms", bare_s * 1000, bare_s / start_s,
                   f"<= {GOAL_STARTUP_RATIO:g}x bare", start_s <= GOAL_STARTUP_RATIO * bare_s),
        result_row("startup_vs_bare_no_plugins", start_s * 1000, "ms", bare_np_s * 1000,
                   bare_np_s / start_s),
        result_row("startup_before", before_s and before_s * 1000, "ms", bare_s * 1000,
                   before_s and bare_s / before_s),
        result_row("startup_no_cache", no_cache_s * 1000, "ms", bare_s * 1000,
                   bare_s / no_cache_s),
        result_row("startup_script", script_s * 1000, "ms", bare_s * 1000, bare_s / script_s),
        result_row("rss_idle_bare", bare_rss, "MB"),
        result_row("rss_idle", idle, "MB", *vs(idle, before_idle), f"< {GOAL_IDLE_MB:g} MB",
                   idle < GOAL_IDLE_MB),
        result_row("rss_idle_script", script_rss, "MB", *vs(script_rss, before_idle),
                   f"< {GOAL_IDLE_SCRIPT_MB:g} MB", script_rss < GOAL_IDLE_SCRIPT_MB),
        result_row("rss_idle_script_no_cache", nocache_rss, "MB", *vs(nocache_rss, before_idle),
                   f"< {GOAL_IDLE_SCRIPT_MB:g} MB", nocache_rss < GOAL_IDLE_SCRIPT_MB),
        result_row(f"rss_tasks_{k}", tasks_rss, "MB", *vs(tasks_rss, before_tasks),
                   f"< {GOAL_TASKS_MB:g} MB", tasks_rss < GOAL_TASKS_MB),
        result_row(f"rss_tasks_{k}_script", script_tasks_rss, "MB",
                   *vs(script_tasks_rss, before_tasks), f"< {GOAL_TASKS_SCRIPT_MB:g} MB",
                   script_tasks_rss < GOAL_TASKS_SCRIPT_MB),
        result_row(f"rss_tasks_{k}_script_no_cache", nocache_tasks_rss, "MB",
                   *vs(nocache_tasks_rss, before_tasks), f"< {GOAL_TASKS_SCRIPT_MB:g} MB",
                   nocache_tasks_rss < GOAL_TASKS_SCRIPT_MB),
        result_row(f"list_{k}_p50", list_ms, "ms", *vs(list_ms, before_list),
                   f">= {GOAL_LIST_RATIO:g}x before" if before else "",
                   (before_list / list_ms >= GOAL_LIST_RATIO) if before else None),
        result_row("cpu_rest_bare", cpu_bare, "%", goal=f"< {GOAL_CPU_BARE:g} %",
                   met=cpu_bare < GOAL_CPU_BARE),
        result_row("cpu_rest_furnished", cpu_furnished, "%", goal=f"< {GOAL_CPU_FURNISHED:g} %",
                   met=None if cpu_furnished is None else cpu_furnished < GOAL_CPU_FURNISHED),
        result_row("cpu_rest_schedules", cpu_schedules, "%", cpu_bare,
                   goal=f"< {GOAL_CPU_SCHEDULES:g} %", met=cpu_schedules < GOAL_CPU_SCHEDULES),
    ]


if __name__ == "__main__":
    main()
