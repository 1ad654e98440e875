"""Taskboard's memory beside a peer's, in the same run (issue 59): KanBot's `kanbot up` (its
server and its local runner in one process, as its README starts it) against `python
taskboard.py` (the README's command), each idle and after --tasks tasks made as a person's
clients make them; Taskboard both plainly and with PYTHONDONTWRITEBYTECODE=1 (Docker images
and some shells set it).

Run it by hand, from any directory, with the Python that has Taskboard's dependencies and a
KanBot installed in a venv of its own (it is not one of ours); it is not a test:

    python3 -m venv /tmp/kanbot && /tmp/kanbot/bin/pip install kanbot==0.9.11
    python bench/peer.py --kanbot /tmp/kanbot/bin/kanbot          # 10,000 tasks
    python bench/peer.py --kanbot /tmp/kanbot/bin/kanbot --quick  # 2,000, 3 starts

  rss_idle_<who>    VmRSS 1 s after the first answer, the median of --starts starts
  rss_tasks_<who>   VmRSS after --tasks tasks created by 8 clients at once (each on its own
                    kept-alive connection) and the list read ten times, 2 s later (at rest)

Taskboard's rows are bench/rest.py's (`rss_idle_script`, `rss_tasks_<k>_script` and their
`_no_cache` twins), measured the same way; KanBot's tasks are cards of one board (POST
/api/boards/:id/cards), its list the board (GET /api/boards/:id).  Goal: each Taskboard row
below KanBot's.

How to read the output: a line per measurement, then BENCH_RESULT {...} for bench/run.py.
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

from _common import emit_result, free_port, result_row
from rest import (
    LISTS,
    Started,
    checkout,
    clean_env,
    from_clients,
    starts,
    taskboard_argv,
    tasks_and_list,
)

KANBOT_VERSION = "0.9.11"


class Kanbot(Started):
    """ `kanbot up` on a home and database of its own, started and waited for (its RSS and
    its stop: Started's). """

    def __init__(self, exe, home, port):
        self.port, self.conn = port, None
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KANBOT_", "DECKHAND_"))}
        env.update(HOME=home, KANBOT_HOME=os.path.join(home, ".kanbot"), NO_COLOR="1")
        self.proc = subprocess.Popen(
            [exe, "up", "--no-open", "--port", str(port),
             "--db", os.path.join(home, "kanbot.db")], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kanbot up exited with {self.proc.returncode}")
            try:
                if self.call("GET", "/api/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("kanbot up did not answer within 60 s")
            time.sleep(0.01)

    def call(self, method, path, body=None, conn=None):
        own = conn is None
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body),
                         headers={"Content-Type": "application/json"} if body else {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            if own:
                conn.close()


def kanbot_idle(exe, tmp, times):
    results = []
    for n in range(times):
        server = Kanbot(exe, os.path.join(tmp, f"kanbot-idle-{n % 2}"), free_port())
        time.sleep(1.0)
        results.append(server.rss_mb())
        server.stop()
    rss = statistics.median(results)
    print(f"kanbot up: idle RSS {rss:.1f} MB (median of {times}: "
          f"{', '.join(f'{r:.1f}' for r in results)})", flush=True)
    return rss


def kanbot_tasks(exe, tmp, tasks):
    home = os.path.join(tmp, "kanbot-tasks")
    work = os.path.join(home, "work")
    os.makedirs(work)
    server = Kanbot(exe, home, free_port())
    try:
        status, body = server.call("POST", "/api/boards", {"name": "Rest", "repo_path": work})
        assert status == 200, (status, body[:200])
        board = json.loads(body)["board"]["id"]

        def create(conn, n):
            status, _ = server.call("POST", f"/api/boards/{board}/cards", {
                "title": f"Task {n}", "prompt": "some words " * 5}, conn)
            assert status == 200, status
        from_clients(server.port, tasks, create)
        for _ in range(2 * LISTS):
            assert server.call("GET", f"/api/boards/{board}")[0] == 200
        time.sleep(2.0)
        rss = server.rss_mb()
    finally:
        server.stop()
    print(f"kanbot up: {tasks:,} cards created and listed: RSS {rss:.1f} MB", flush=True)
    return rss


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kanbot", default=shutil.which("kanbot"),
                        help=f"KanBot {KANBOT_VERSION}'s `kanbot` command")
    parser.add_argument("--starts", type=int, default=5, help="starts of each, idle")
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks created and listed")
    parser.add_argument("--quick", action="store_true", help="3 starts, 2,000 tasks")
    args = parser.parse_args(argv)
    if args.quick:
        args.starts, args.tasks = 3, 2_000
    if not args.kanbot or not os.access(args.kanbot, os.X_OK):
        sys.exit("no KanBot here: install it in a venv of its own (pip install "
                 f"kanbot=={KANBOT_VERSION}) and give its `kanbot` with --kanbot")
    version = subprocess.run([args.kanbot, "--version"], capture_output=True, text=True)
    print(f"KanBot: {(version.stdout or version.stderr).strip()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tb-peer-") as tmp:
        ours = checkout(None, os.path.join(tmp, "ours"))
        plain = clean_env(PYTHONPYCACHEPREFIX=os.path.join(tmp, "cache"))
        uncached = clean_env(PYTHONDONTWRITEBYTECODE="1")

        def db(name):
            return os.path.join(tmp, name, "taskboard.db")
        rows = []
        k = f"{args.tasks // 1000}k" if args.tasks % 1000 == 0 else str(args.tasks)
        kb_idle = kanbot_idle(args.kanbot, tmp, args.starts)
        kb_tasks = kanbot_tasks(args.kanbot, tmp, args.tasks)
        rows += [result_row("rss_idle_kanbot", kb_idle, "MB"),
                 result_row(f"rss_tasks_{k}_kanbot", kb_tasks, "MB")]
        for suffix, env in (("", plain), ("_no_cache", uncached)):
            name, said = f"script{suffix}-db", ", PYTHONDONTWRITEBYTECODE=1" if suffix else ""
            port = free_port()  # a first start makes the database, its key and its bytecode
            Started(taskboard_argv("script", db(name), port), ours, env, port).stop()
            _, idle = starts(f"taskboard (python taskboard.py{said})", args.starts,
                             lambda port, name=name: taskboard_argv("script", db(name), port), ours,
                             env)
            tasks_rss, _ = tasks_and_list(ours, db(name), env, args.tasks, "script")
            print(f"taskboard (python taskboard.py{said}): {args.tasks:,} tasks created and "
                  f"listed: RSS {tasks_rss:.1f} MB", flush=True)
            rows += [
                result_row(f"rss_idle_script{suffix}", idle, "MB", kb_idle, kb_idle / idle,
                           "< KanBot's", idle < kb_idle),
                result_row(f"rss_tasks_{k}_script{suffix}", tasks_rss, "MB", kb_tasks,
                           kb_tasks / tasks_rss, "< KanBot's", tasks_rss < kb_tasks)]
    emit_result("peer", rows)


if __name__ == "__main__":
    main()
