"""What the sandbox costs a run's start (design.md §17, issue 46; with its network namespace
and bridge, §20, issue 56): p50 over 50 starts; and a download through the egress proxy.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/sandbox.py                 # 50 starts each way
    python bench/sandbox.py --starts 10     # smoke test
    python bench/sandbox.py --git           # autoBranch on a repository: each start makes a
                                            # worktree (sandboxed: checked out in the run's
                                            # sandbox, issue 55)
    python bench/sandbox.py --download      # each agent first downloads 10 MB from a
                                            # loopback server: sandboxed through the egress
                                            # proxy (networkAllow names it), else directly

One Taskboard server, its agent bench/_flood_agent.py (which records, in FLOOD_DIR, the
time.time() its process started and prints almost nothing), two projects on the same
folder: one `sandbox: bubblewrap`, one `sandbox: none`.  The bench starts a task of each in
turn (interleaved, so drift and noise fall on both alike), each start timed from just
before the PATCH that moves the task to in_progress to the agent's own start time, and
waits for the run to end before the next.  The unsandboxed start is the baseline: the
goal is p50(sandboxed) - p50(unsandboxed) <= 30 ms (a sandboxed start includes its network
namespace and the bridge: socat listening before the agent starts).  With --download the
goal is a download through the proxy at >= 0.5x the direct one's speed (p50).  Needs a
bubblewrap that works here (GET /api/health says so, else the bench stops saying why).

How to read the output: one line per 10 starts, then `figure <name> <value>` lines, then
BENCH_RESULT {...} for bench/run.py.
"""

import argparse
import glob
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from _common import (
    REPO_ROOT,
    Server,
    emit_result,
    free_port,
    percentile,
    result_row,
    taskboard_env,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agents import FLOOD_AGENT, call  # noqa: E402

GOAL_EXTRA_MS = 30.0
GOAL_DOWNLOAD_RATIO = 0.5
DOWNLOAD_BYTES = 10 * 1024 * 1024


def download_server():
    """A loopback HTTP server answering every GET with DOWNLOAD_BYTES; its port."""
    body = os.urandom(DOWNLOAD_BYTES)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def starts(flood_dir, task_id, count=1, timeout=30.0, records=None):
    """The start times of `count` agents of a task, once their records are written (each
    record also appended to `records`)."""
    deadline, found = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        for path in glob.glob(os.path.join(flood_dir, "*.json")):
            with open(path) as f:
                record = json.load(f)
            if record.get("taskId") == str(task_id):
                os.remove(path)
                found.append(record["started"])
                if records is not None:
                    records.append(record)
        if len(found) >= count:
            return found
        time.sleep(0.005)
    raise RuntimeError(f"task {task_id}: {len(found)} of {count} agents recorded their start")


def settled(port, task_id, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = call(port, "GET", f"/api/tasks/{task_id}")
        if task["status"] == "testing" and not task["is_running"]:
            return task
        time.sleep(0.01)
    raise RuntimeError(f"task {task_id} did not end")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--starts", type=int, default=50, help="starts of each kind")
    parser.add_argument("--git", action="store_true",
                        help="the folder a repository, the projects autoBranch: each start "
                             "makes a worktree (sandboxed: checked out in the run's sandbox)")
    parser.add_argument("--download", action="store_true",
                        help="each agent downloads 10 MB first: through the proxy, or direct")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tb-sandbox-bench-") as tmp:
        flood_dir, work = os.path.join(tmp, "flood"), os.path.join(tmp, "work")
        os.makedirs(flood_dir)
        os.makedirs(work)
        if args.git:
            for step in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m",
                                                         "initial"]):
                subprocess.run(["git", "-c", "user.name=B", "-c", "user.email=b@b", *step],
                               cwd=work, check=True)
        os.environ.update(FLOOD_RATE="1", FLOOD_SECONDS="0", FLOOD_DIR=flood_dir)
        allow = None
        if args.download:
            served = download_server()
            os.environ["FLOOD_FETCH"] = f"http://127.0.0.1:{served}/blob"
            allow = [f"127.0.0.1:{served}"]
        port = free_port()
        server = Server("taskboard", [sys.executable, "taskboard.py", "--port", str(port),
                                      "--db", os.path.join(tmp, "data", "tb.db"), "--agent-command",
                                      f"{sys.executable} {FLOOD_AGENT}"],
                        os.path.join(tmp, "taskboard.log"), "/api/health", port,
                        env=taskboard_env())
        with server:
            sandbox = call(port, "GET", "/api/health")["sandbox"]
            if not sandbox["works"]:
                sys.exit(f"bubblewrap does not work here: {sandbox['error']}")
            print(f"bubblewrap {sandbox['version']}; {args.starts} starts each way, "
                  f"interleaved", flush=True)
            projects = {}
            for mode in ("bubblewrap", "none"):
                projects[mode] = call(port, "POST", "/api/projects", {
                    "name": mode, "slug": f"bench-{mode}", "workingDir": work,
                    "sandbox": mode, "sandboxPaths": {"readWrite": [flood_dir]},
                    "networkAllow": allow,
                    "autoBranch": 1 if args.git else 0})["id"]
            times = {"bubblewrap": [], "none": []}
            fetches = {"bubblewrap": [], "none": []}
            for n in range(args.starts * 2):
                mode = ("bubblewrap", "none")[n % 2]
                task = call(port, "POST", f"/api/projects/{projects[mode]}/tasks",
                            {"title": f"start {n}", "description": "Start."})
                asked = time.time()
                call(port, "PATCH", f"/api/tasks/{task['id']}/status", {"status": "in_progress"})
                records = []
                times[mode].append((starts(flood_dir, task["id"], records=records)[0] - asked)
                                   * 1000)
                if args.download:
                    assert records[0]["fetched"] == DOWNLOAD_BYTES, records[0]
                    fetches[mode].append(DOWNLOAD_BYTES / records[0]["fetchSeconds"] / 1e6)
                ran = settled(port, task["id"])
                assert ran["sandboxed"] is (mode == "bubblewrap"), ran
                if n % 20 == 19:
                    print(f"  {n // 2 + 1} starts each", flush=True)
    p50 = {mode: percentile(sorted(values), 0.5) for mode, values in times.items()}
    p90 = {mode: percentile(sorted(values), 0.9) for mode, values in times.items()}
    extra = p50["bubblewrap"] - p50["none"]
    for mode in ("none", "bubblewrap"):
        print(f"figure start_p50_{mode}_ms {p50[mode]:.1f} (p90 {p90[mode]:.1f})")
    print(f"figure start_extra_p50_ms {extra:.1f} (goal <= {GOAL_EXTRA_MS:.0f})")
    print(f"ratio start_p50_sandboxed_unsandboxed {p50['bubblewrap'] / p50['none']:.2f}")
    if args.download:
        speed = {mode: percentile(sorted(values), 0.5) for mode, values in fetches.items()}
        ratio = speed["bubblewrap"] / speed["none"]
        print(f"figure download_p50_direct_MBps {speed['none']:.0f}")
        print(f"figure download_p50_proxy_MBps {speed['bubblewrap']:.0f}")
        print(f"ratio download_proxy_direct {ratio:.2f} (goal >= {GOAL_DOWNLOAD_RATIO})")
        emit_result("sandbox-download", [
            result_row("10 MB download p50, direct", round(speed["none"]), "MB/s"),
            result_row("10 MB download p50, through the proxy", round(speed["bubblewrap"]),
                       "MB/s", baseline=round(speed["none"]), ratio=round(ratio, 2),
                       goal=f">= {GOAL_DOWNLOAD_RATIO}x", met=ratio >= GOAL_DOWNLOAD_RATIO)],
            repo=REPO_ROOT)
        return
    emit_result("sandbox-git" if args.git else "sandbox", [
        result_row("start p50, unsandboxed", round(p50["none"], 1), "ms"),
        result_row("start p50, sandboxed", round(p50["bubblewrap"], 1), "ms",
                   baseline=round(p50["none"], 1),
                   ratio=round(p50["bubblewrap"] / p50["none"], 2)),
        result_row("sandbox's extra start p50 (namespace and bridge included)", round(extra, 1),
                   "ms",
                   goal=f"<= {GOAL_EXTRA_MS:.0f} ms", met=extra <= GOAL_EXTRA_MS)],
        repo=REPO_ROOT)


if __name__ == "__main__":
    main()
