"""Taskboard at rest (issue 34): start-up, memory when idle and after 10,000 tasks.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/rest.py                        # 7 starts of each, 10,000 tasks
    python bench/rest.py --quick                # 3 starts, 2,000 tasks
    python bench/rest.py --baseline-rev HEAD~3  # compare with another commit

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
                   bare server's is rss_idle_bare, a script's rss_idle_script
  rss_tasks        VmRSS after creating --tasks tasks through the API (one keep-alive
                   connection) and listing them three times (GET /api/projects/:id/tasks,
                   plain, plain, gzip); baseline: --baseline-rev's. Goal < 100 MB
  list_p50         then that list's p50 over 30 GETs, served from what is kept ready;
                   baseline: --baseline-rev's, on the same tasks. Goal: >= 0.9x (today's
                   speed is the floor)

The last line, BENCH_RESULT {...}, is for bench/run.py.
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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

GOAL_STARTUP_RATIO, GOAL_IDLE_MB, GOAL_TASKS_MB, GOAL_LIST_RATIO = 2.0, 70.0, 100.0, 0.9

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
    parser.add_argument("--quick", action="store_true", help="3 starts, 2,000 tasks")
    args = parser.parse_args(argv)
    if args.quick:
        args.starts, args.tasks = 3, 2_000
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

    def __init__(self, argv, cwd, env, port):
        self.port = port
        t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def tasks_and_list(code, db, env, tasks):
    """ (RSS MB after creating `tasks` tasks and listing them, list p50 in ms). """
    port = free_port()
    server = Started(taskboard_argv("module", db, port), code, env, port)
    try:
        work = os.path.join(os.path.dirname(db), "work")
        os.makedirs(work, exist_ok=True)
        status, body = server.call("POST", "/api/projects", {"name": "Rest", "slug": "rest",
                                                              "workingDir": work})
        project = json.loads(body)["id"]
        for n in range(tasks):
            status, _ = server.call("POST", f"/api/projects/{project}/tasks",
                                    {"title": f"Task {n}", "description": "some words " * 5})
            assert status == 201, status
        path = f"/api/projects/{project}/tasks"
        for gzip in (False, False, True):
            status, body = server.call("GET", path, gzip=gzip)
            assert status == 200, status
        rss = server.rss_mb()
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            server.call("GET", path)
            times.append((time.perf_counter() - t0) * 1000)
        return rss, statistics.median(times)
    finally:
        server.stop()


def main(argv=None):
    args = parse_args(argv)
    print(f"bench/rest.py: {args.starts} starts of each, {args.tasks:,} tasks, baseline "
          f"{args.baseline_rev or 'none'}, {os.cpu_count()} CPUs", flush=True)
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
    for code, name in ((ours, "ours-db"), (before, "before-db")):
        if code:
            port = free_port()
            Started(taskboard_argv("module", db(name), port), code, cached, port).stop()
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
    before_s = before_idle = None
    if before:
        before_s, before_idle = starts(f"{args.baseline_rev} (python -m, bytecode cached)",
                                       args.starts, lambda port: taskboard_argv(
                                           "module", db("before-db"), port), before, cached)
    tasks_rss, list_ms = tasks_and_list(ours, db("ours-db"), cached, args.tasks)
    print(f"taskboard: {args.tasks:,} tasks created and listed: RSS {tasks_rss:.1f} MB, list "
          f"p50 {list_ms:.2f} ms", flush=True)
    before_tasks = before_list = None
    if before:
        before_tasks, before_list = tasks_and_list(before, db("before-db"), cached, args.tasks)
        print(f"{args.baseline_rev}: {args.tasks:,} tasks created and listed: RSS "
              f"{before_tasks:.1f} MB, list p50 {before_list:.2f} ms", flush=True)

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
        result_row("rss_idle_script", script_rss, "MB", *vs(script_rss, before_idle)),
        result_row(f"rss_tasks_{k}", tasks_rss, "MB", *vs(tasks_rss, before_tasks),
                   f"< {GOAL_TASKS_MB:g} MB", tasks_rss < GOAL_TASKS_MB),
        result_row(f"list_{k}_p50", list_ms, "ms", *vs(list_ms, before_list),
                   f">= {GOAL_LIST_RATIO:g}x before" if before else "",
                   (before_list / list_ms >= GOAL_LIST_RATIO) if before else None),
    ]


if __name__ == "__main__":
    main()
