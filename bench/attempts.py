"""Best of N (design.md §18, issue 47): how fast four attempts start, how fast their
comparison answers, and how fast the board paints it.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/attempts.py                # 10 starts of 4 attempts, 2,000 comparisons
    python bench/attempts.py --quick        # smoke test

One Taskboard server, its agent bench/_flood_agent.py (which records, in FLOOD_DIR, the
time.time() its process started), a project on a git repository with maxConcurrent 4.

- start: a task is run with four agents (POST /api/tasks/:id/attempts) on an idle board,
  timed from just before the POST to the fourth agent's own start time; the baseline is
  one task's start on the same board (PATCH to in_progress → its agent's start), measured
  in turns with the fours.  Goal: all four within 1 s.
- comparison: GET /api/tasks/:id/attempts of a task whose four finished attempts printed
  10,000 lines each (40,000 log entries), one request after the other on one connection;
  the baseline is GET /api/tasks/:id of the same task, interleaved.  Goal: p99 < 50 ms.
- paint (with Chromium, unless --no-browser): the task page of that task, from navigation
  to the comparison's fourth column, in fresh browser contexts (cold: every module fetched)
  and reloaded where the board's files are cached (warm); the baseline (the floor) is the
  same page to its title.  Goal: < 500 ms.

How to read the output: progress lines, then `figure <name> <value>` lines, then
BENCH_RESULT {...} for bench/run.py.
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import (
    AUTH_HEADER,
    REPO_ROOT,
    Server,
    emit_result,
    free_port,
    percentile,
    quickack,
    result_row,
    taskboard_env,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agents import FLOOD_AGENT, call  # noqa: E402
from sandbox import settled, starts  # noqa: E402

GOAL_START_MS, GOAL_COMPARE_MS, GOAL_PAINT_MS = 1000.0, 50.0, 500.0
AGENTS = [{"agent": "claude", "model": tier} for tier in
          ("model_large", "model_medium", "model_small", "model_medium")]
CHROMIUM = "/usr/bin/chromium"
#: The comparison's fourth column, and the task page's title (the baseline).
COLUMNS_READY = "document.querySelectorAll('[data-testid^=attempt-][data-status]').length >= 4"
TITLE_READY = "!!document.querySelector('h1 .card-key')"


def timed_gets(port, paths, rounds):
    """{path: sorted ms} of `rounds` GETs of each path, in turns, on one connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    took = {path: [] for path in paths}
    for _ in range(rounds):
        for path in paths:
            begin = time.perf_counter()
            conn.request("GET", path, headers={"Authorization": AUTH_HEADER})
            quickack(conn)
            response = conn.getresponse()
            response.read()
            took[path].append((time.perf_counter() - begin) * 1000)
            assert response.status == 200, (path, response.status)
    conn.close()
    return {path: sorted(values) for path, values in took.items()}


def paint(port, task_id, loads):
    """Median ms from navigation to the comparison's four columns, and to the page's title
    (the floor): in fresh browser contexts (cold: every module fetched), and reloaded in one
    context whose cache and service worker hold the board's files (warm)."""
    from playwright.sync_api import sync_playwright
    cookie = call_login(port)
    url = f"http://127.0.0.1:{port}/#/tasks/{task_id}"
    out = {}

    def timed(page, ready, reload):
        if reload:
            page.reload(wait_until="commit")
        else:
            page.goto(url, wait_until="commit")
        return page.wait_for_function(f"() => ({ready}) && performance.now()",
                                      polling="raf", timeout=60_000).json_value()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run"])
        for name, ready in (("title", TITLE_READY), ("columns", COLUMNS_READY)):
            cold = []
            for _ in range(loads):
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                context.add_cookies([cookie])
                cold.append(timed(context.new_page(), ready, False))
                context.close()
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            context.add_cookies([cookie])
            page = context.new_page()
            timed(page, ready, False)
            page.wait_for_function("() => navigator.serviceWorker.controller !== null",
                                   timeout=30_000)
            warm = [timed(page, ready, True) for _ in range(loads)]
            context.close()
            out[f"{name}_cold"] = sorted(cold)[len(cold) // 2]
            out[f"{name}_warm"] = sorted(warm)[len(warm) // 2]
        browser.close()
    return out


def call_login(port):
    from _common import TOKEN
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/api/login", body=json.dumps({"token": TOKEN}),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    name, _, rest = response.getheader("Set-Cookie").partition("=")
    conn.close()
    return {"name": name, "value": rest.split(";")[0], "url": f"http://127.0.0.1:{port}"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test")
    parser.add_argument("--no-browser", action="store_true", help="skip the paint figure")
    args = parser.parse_args()
    sets, rounds, loads = (3, 200, 2) if args.quick else (10, 2000, 7)
    with tempfile.TemporaryDirectory(prefix="tb-attempts-bench-") as tmp:
        flood_dir, work = os.path.join(tmp, "flood"), os.path.join(tmp, "work")
        os.makedirs(flood_dir)
        os.makedirs(work)
        for step in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "0"]):
            subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *step],
                           cwd=work, check=True)
        os.environ.update(FLOOD_RATE="1", FLOOD_SECONDS="0", FLOOD_DIR=flood_dir)
        port = free_port()
        server = Server("taskboard", [sys.executable, "taskboard.py", "--port", str(port),
                                      "--db", os.path.join(tmp, "data", "tb.db"),
                                      "--agent-command", f"{sys.executable} {FLOOD_AGENT}"],
                        os.path.join(tmp, "taskboard.log"), "/api/health", port,
                        env=taskboard_env())
        with server:
            project = call(port, "POST", "/api/projects", {
                "name": "bench", "slug": "bench", "workingDir": work, "maxConcurrent": 4,
                "sandboxPaths": {"readWrite": [flood_dir]}})["id"]
            single, four = [], []
            for n in range(sets):
                task = call(port, "POST", f"/api/projects/{project}/tasks", {"title": f"one {n}"})
                asked = time.time()
                call(port, "PATCH", f"/api/tasks/{task['id']}/status", {"status": "in_progress"})
                single.append((starts(flood_dir, task["id"], 1)[0] - asked) * 1000)
                settled(port, task["id"])
                task = call(port, "POST", f"/api/projects/{project}/tasks", {"title": f"four {n}"})
                asked = time.time()
                call(port, "POST", f"/api/tasks/{task['id']}/attempts", {"agents": AGENTS},
                     expect=(202,))
                four.append((max(starts(flood_dir, task["id"], 4)) - asked) * 1000)
                settled(port, task["id"])
                print(f"  set {n + 1}: one {single[-1]:.0f} ms, four {four[-1]:.0f} ms",
                      flush=True)
            print("four attempts of 10,000 lines each", flush=True)
            os.environ.update(FLOOD_RATE="10000", FLOOD_SECONDS="1")
            server.stop()  # the agents read FLOOD_* from the board's environment
            server.env = taskboard_env()
            server.__enter__()
            heavy = call(port, "POST", f"/api/projects/{project}/tasks", {"title": "heavy"})["id"]
            call(port, "POST", f"/api/tasks/{heavy}/attempts", {"agents": AGENTS}, expect=(202,))
            settled(port, heavy, timeout=120.0)
            done = call(port, "GET", f"/api/tasks/{heavy}/attempts")
            lines = call(port, "GET", f"/api/tasks/{heavy}/logs?limit=10000&attempt=1")
            print(f"  {[a['status'] for a in done]}; attempt 1 has {len(lines)}+ entries",
                  flush=True)
            took = timed_gets(port, [f"/api/tasks/{heavy}/attempts", f"/api/tasks/{heavy}"],
                              rounds)
            painted = None if args.no_browser else paint(port, heavy, loads)
    compare, task = took[f"/api/tasks/{heavy}/attempts"], took[f"/api/tasks/{heavy}"]
    p50 = {"single": percentile(sorted(single), 0.5), "four": percentile(sorted(four), 0.5)}
    worst = max(four)
    p99 = {"compare": percentile(compare, 0.99), "task": percentile(task, 0.99)}
    print(f"figure start_one_p50_ms {p50['single']:.1f}")
    print(f"figure start_four_p50_ms {p50['four']:.1f} (worst {worst:.1f}, goal < "
          f"{GOAL_START_MS:.0f})")
    print(f"ratio start_one_four {p50['single'] / p50['four']:.2f}")
    print(f"figure compare_p99_ms {p99['compare']:.2f} (task GET p99 {p99['task']:.2f}, goal < "
          f"{GOAL_COMPARE_MS:.0f})")
    print(f"ratio task_compare_p99 {p99['task'] / p99['compare']:.2f}")
    rows = [
        result_row("four attempts started, worst of the sets", round(worst, 1), "ms",
                   baseline=round(p50["single"], 1), ratio=round(p50["single"] / worst, 2),
                   goal=f"< {GOAL_START_MS:.0f} ms", met=worst < GOAL_START_MS),
        result_row("GET …/attempts p99, 4 × 10,000 lines", round(p99["compare"], 2), "ms",
                   baseline=round(p99["task"], 2), ratio=round(p99["task"] / p99["compare"], 2),
                   goal=f"< {GOAL_COMPARE_MS:.0f} ms", met=p99["compare"] < GOAL_COMPARE_MS)]
    if painted is not None:
        for when in ("cold", "warm"):
            columns, title = painted[f"columns_{when}"], painted[f"title_{when}"]
            print(f"figure paint_{when}_columns_ms {columns:.0f} (the page's title {title:.0f},"
                  f" goal < {GOAL_PAINT_MS:.0f})")
            rows.append(result_row(f"comparison view painted, {when}", round(columns), "ms",
                                   baseline=round(title), ratio=round(title / columns, 2),
                                   goal=f"< {GOAL_PAINT_MS:.0f} ms",
                                   met=columns < GOAL_PAINT_MS))
    emit_result("attempts", rows, repo=REPO_ROOT)


if __name__ == "__main__":
    main()
