"""The board in Chromium at scale (issue 33), this checkout side by side with an older one.

Run it by hand, from any directory, with the Python that has Taskboard's dev dependencies
(Playwright) and Debian's Chromium (/usr/bin/chromium); it is not a test:

    python bench/ui.py                          # against f11f554 (before issue 33)
    python bench/ui.py --quick                  # fewer requests, a smaller log
    python bench/ui.py --baseline-rev <commit>  # against another commit of this repository

The database, one for each server, made the same way by that server's own code: its
taskboard.py creates the schema (--no-auth, until it answers), its API creates three
projects and a task, then SQLite is written directly, with the same seeded data: "Board"
with 2,500 tasks (20 % backlog, 8 % testing, 65 % done, 7 % failed), "Phone" with 500,
"List" with 10,000, and one task of "Board" with 50,000 log entries shaped like an agent's.
The task rows copy every column of the task the API made, so each schema gets its own
defaults. (One file for both would not do: a server refuses a database that a newer
checkout migrated, and an older one has other migrations.) Both get the same ids, checked.

The baseline is `git archive <rev> taskboard.py static` in a temp dir, its database built
by it, started the same way, measured in the same run; the ratio is baseline / value
(higher is better). Each server
gets fresh browser contexts (an empty cache, no service worker) at 1440 x 900, signed in
with the run's token through its session cookie:

  board_paint           navigation -> every column with cards shows some (a frame after),
                        for the 2,500-card board; the median of 7 loads (3 --quick)
  tasks_request_start   navigation -> the tasks request starts (resource timing)
  longtask_render       the longest main-thread task (PerformanceObserver "longtask") from
                        navigation to 1 s after the paint
  longtask_filter       ... while typing a search that matches a tenth of the cards
  longtask_drag         ... while dragging a card from Backlog to Testing
  longtask_burst        ... while 100 task:updated arrive (100 PUTs as fast as they go)
  dom_elements          elements in the document once painted
  requests_board        requests the board's first paint waited for: the page and each
                        resource that started before the paint (resource timing; /ws is
                        not one), in the last of those loads (issue 59)
  bytes_board           ... their bytes on the wire (transferSize), the page's included
  slow4g_cold           the 500-card board on Chromium's "Slow 4G" (562.5 ms latency,
                        1.44 Mbit/s down, 675 kbit/s up): navigation -> paint, empty cache
  slow4g_cold_files     ... when the last of the board's files that the paint needed came
                        (the network's share: 562.5 ms a round trip, six connections)
  slow4g_warm           the same reloaded with the service worker in control: the median
                        of WARM_LOADS reloads
  list_bytes            bytes on the wire of GET /api/projects/:id/tasks at 10,000 tasks
                        (Accept-Encoding: gzip, as a browser sends it)
  first_log_line        the task page of the 50,000-entry task: navigation -> a log row
                        (median of 7 loads, 3 --quick)
  requests_task_page    requests before that first log row, as requests_board
  bytes_task_page       ... their bytes on the wire
  detail_p50, _p99      GET /api/tasks/:id/detail of that task, sequential, keep-alive, gzip

The goals (issue 33): paint < 1 s, no long task > 200 ms, < 5,000 elements, Slow 4G < 3 s
cold and < 1 s warm, the list <= 10 % of the baseline's bytes, first log line < 500 ms,
detail p50 < 50 ms; (issue 59) at most 12 requests before the board's first paint. The
last line, BENCH_RESULT {...}, is for bench/run.py.
"""

import argparse
import http.client
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from _common import (
    REPO_ROOT,
    TOKEN,
    Server,
    emit_result,
    free_port,
    percentile,
    print_table,
    result_row,
    taskboard_env,
)

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1440, "height": 900}
MISSING_AGENT = "taskboard-bench-no-such-agent"
#: Chromium DevTools' "Slow 4G" preset.
#: Reloads of the warm Slow 4G board, whose median is slow4g_warm.
WARM_LOADS = 5
SLOW_4G = {"offline": False, "latency": 562.5, "downloadThroughput": 1.6e6 / 8 * 0.9,
           "uploadThroughput": 750e3 / 8 * 0.9}
STATUS_SHARES = (("backlog", 20), ("testing", 8), ("done", 65), ("failed", 7))
SIZES = {"Board": 2500, "Phone": 500, "List": 10_000}
LOG_KINDS = ("thinking", "text", "tool_call", "tool_result", "tool_call", "tool_result",
             "text", "tool_call", "tool_result", "stderr")
TOOLS = ("Bash", "Read", "Edit", "Grep", "Write")
WORDS = ("board queue agent worker log task project webhook token session cache index parser "
         "router schema migration stream socket client server retry budget branch").split()

#: Collects the page's long tasks from its first moment (an init script of each context).
LONG_TASKS = """
window.__longTasks = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__longTasks.push([e.startTime, e.duration]);
}).observe({ type: "longtask", buffered: true });
"""
#: Truthy (the time) once every column that has tasks shows cards.
PAINTED = """() => {
  const cols = [...document.querySelectorAll("section.board-col")];
  if (!cols.length) return false;
  const count = (c) => parseInt(c.querySelector(".col-count")?.textContent || "0", 10);
  const shown = cols.every((c) => count(c) === 0 || c.querySelector("article"));
  return shown && cols.some((c) => c.querySelector("article")) ? performance.now() : false;
}"""
FIRST_LOG_ROW = "() => document.querySelector('.log-row') ? performance.now() : false"
#: [requests, bytes on the wire] the page had started before `painted` (its page time).
BEFORE_PAINT = """(painted) => {
  const started = [...performance.getEntriesByType("navigation"),
    ...performance.getEntriesByType("resource").filter((e) => e.startTime <= painted)];
  return [started.length, started.reduce((n, e) => n + (e.transferSize || 0), 0)];
}"""


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests, a smaller log")
    parser.add_argument("--baseline-rev", default="f11f554",
                        help="the commit measured beside this checkout ('' for none)")
    parser.add_argument("--log-entries", type=int, default=None,
                        help="entries of the long task's log (default 50,000; 10,000 quick)")
    args = parser.parse_args()
    if args.log_entries is None:
        args.log_entries = 10_000 if args.quick else 50_000
    args.requests = 10 if args.quick else 40
    args.loads = 3 if args.quick else 7  # page loads a median is taken of
    return args


# The database ###############################################################################

def call(port, method, path, body=None, headers=None):
    """ (status, headers, raw body bytes) of one request to a --no-auth server. """
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), data


def build(name, root, folder, log_entries):
    """ The database of the server `name` (see the module's text), its schema and first rows
    made by root's taskboard.py; returns its path and the ids measured. """
    db = os.path.join(folder, f"{name}.db")
    work = os.path.join(folder, "work")
    os.makedirs(work, exist_ok=True)
    port = free_port()
    ids = {}
    with serve(f"{name}-schema", root, db, port, folder, auth=False):
        for project in SIZES:
            status, _, data = call(port, "POST", "/api/projects", {
                "name": project, "slug": project.lower(), "workingDir": work})
            assert status == 201, data
            ids[project] = json.loads(data)["id"]
        status, _, data = call(port, "POST", f"/api/projects/{ids['Board']}/tasks",
                               {"title": "The long log", "description": "50,000 entries"})
        template = json.loads(data)
    rnd = random.Random(33)
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        base = dict(conn.execute("SELECT * FROM tasks WHERE id = ?", (template["id"],)).fetchone())
        ids["heavy"] = base.pop("id")
        for project, size in SIZES.items():
            key = conn.execute("SELECT key FROM projects WHERE id = ?",
                               (ids[project],)).fetchone()[0]
            first = 2 if project == "Board" else 1
            rows = []
            for n in range(first, size + 1):
                status = rnd.choices(*zip(*STATUS_SHARES))[0]
                stamp = f"2026-{1 + n % 11:02d}-{1 + n % 27:02d}T10:{n % 60:02d}:00.000Z"
                rows.append({**base, "project_id": ids[project], "task_key": f"{key}-{n}",
                             "title": f"{rnd.choice(WORDS).title()} the {rnd.choice(WORDS)} "
                                      f"{rnd.choice(WORDS)} #{n}",
                             "description": " ".join(rnd.choices(WORDS, k=rnd.randint(10, 40))),
                             "status": status, "priority": rnd.choice((0, 0, 1, 2, 3)),
                             "tags": json.dumps(rnd.sample(WORDS, 2)) if n % 3 == 0 else None,
                             "created_at": stamp, "updated_at": stamp,
                             "total_cost": round(rnd.random(), 4)})
            columns = list(rows[0])
            conn.executemany(f"INSERT INTO tasks ({','.join(columns)}) VALUES "
                             f"({','.join('?' * len(columns))})",
                             [tuple(r[c] for c in columns) for r in rows])
            conn.execute("UPDATE projects SET task_counter = ? WHERE id = ?", (size, ids[project]))
        logs = []
        for n in range(log_entries):
            kind = LOG_KINDS[n % len(LOG_KINDS)]
            text = " ".join(rnd.choices(WORDS, k=rnd.randint(4, 60)))
            tool = rnd.choice(TOOLS) if kind.startswith("tool_") else None
            logs.append((ids["heavy"], "2026-11-27T10:00:00.000Z", kind, text, tool))
        conn.executemany("INSERT INTO logs (task_id, created_at, kind, message, tool) "
                         "VALUES (?,?,?,?,?)", logs)
    return db, ids


def baseline_checkout(rev, folder):
    """ taskboard.py and static/ of rev in folder, or None (and why) when it cannot be had. """
    if not rev:
        return None, "no --baseline-rev"
    target = os.path.join(folder, "baseline")
    os.makedirs(target)
    try:
        archive = subprocess.run(["git", "-C", REPO_ROOT, "archive", rev, "taskboard.py",
                                  "static"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", target], input=archive, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        return None, f"git archive {rev} failed: {exc}"
    return target, None


def serve(name, root, db, port, folder, auth=True):
    argv = [sys.executable, os.path.join(root, "taskboard.py"), "--port", str(port), "--db", db,
            "--agent-command", MISSING_AGENT]
    if not auth:
        argv.append("--no-auth")
    return Server(name, argv, os.path.join(folder, f"{name}.log"), "/api/health", port,
                  env=taskboard_env(auth=auth))


# The measurements ##########################################################################

def session_cookie(port):
    """ A signed-in session for the browser: the cookie POST /api/login sets. """
    status, headers, data = call(port, "POST", "/api/login", {"token": TOKEN})
    assert status == 200, data
    name, _, rest = headers["Set-Cookie"].partition("=")
    return {"name": name, "value": rest.split(";")[0], "url": f"http://127.0.0.1:{port}"}


def new_page(browser, port):
    context = browser.new_context(viewport=VIEWPORT, locale="en-GB", timezone_id="UTC")
    context.add_cookies([session_cookie(port)])
    context.add_init_script(LONG_TASKS)
    return context, context.new_page()


def longest_task(page, since=0.0):
    """ The longest main-thread task (ms) that started after `since` (page time), 0 if none. """
    return page.evaluate("(since) => Math.max(0, ...window.__longTasks"
                         ".filter(([start]) => start >= since).map(([, d]) => d))", since)


def settle(page, seconds=1.0):
    page.wait_for_timeout(seconds * 1000)
    return page.evaluate("performance.now()")


def put_titles(port, task_ids, suffix):
    """ 100 PUTs, one after the other on one connection, as fast as they go. """
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    for task_id in task_ids:
        body = json.dumps({"title": f"{task_id} {suffix}"})
        conn.request("PUT", f"/api/tasks/{task_id}", body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200, resp.status
    conn.close()


def loads(browser, port, path, ready, times):
    """ Open path in `times` fresh contexts: the median ms to `ready`, each one, the last
    page (its context still open) and what that one loaded before it was ready
    (BEFORE_PAINT). """
    took = []
    for n in range(times):
        context, page = new_page(browser, port)
        page.goto(f"http://127.0.0.1:{port}{path}", wait_until="commit")
        took.append(page.wait_for_function(ready, polling="raf", timeout=120_000).json_value())
        if n < times - 1:
            context.close()
    before = page.evaluate(BEFORE_PAINT, took[-1])
    return statistics.median(took), sorted(round(ms) for ms in took), context, page, before


def board_figures(browser, port, ids, times):
    """ Paint (median), long tasks and elements of the 2,500-card board. """
    out = {}
    out["board_paint"], out["board_paints"], context, page, before = loads(
        browser, port, f"/#/projects/{ids['Board']}", PAINTED, times)
    out["tasks_request_start"] = page.evaluate(
        "performance.getEntriesByType('resource').find((e) => /\\/api\\/projects\\/\\d+\\/tasks$/"
        ".test(e.name))?.startTime ?? null")
    out["dom_elements"] = page.evaluate("document.getElementsByTagName('*').length")
    out["requests_board"], out["bytes_board"] = before
    settle(page)
    out["longtask_render"] = longest_task(page)

    search = page.locator("input.board-search")
    search.click()
    since = page.evaluate("performance.now()")
    search.press_sequentially("worker", delay=50)  # one of WORDS: in about a tenth of the titles
    settle(page, 1.5)
    out["longtask_filter"] = longest_task(page, since)
    search.fill("")
    settle(page)

    since = page.evaluate("performance.now()")
    page.locator("section.col-backlog article").first.drag_to(page.locator("section.col-testing"))
    settle(page, 1.5)
    out["longtask_drag"] = longest_task(page, since)

    shown = page.evaluate("[...document.querySelectorAll('section.col-done article')]"
                          ".slice(0, 40).map((a) => Number(a.dataset.id))")
    task_ids = [i for i in shown if i]  # these are in view; the rest of the 100 are not
    status, _, data = call(port, "GET", f"/api/projects/{ids['Board']}/tasks",
                           headers={"Authorization": f"Bearer {TOKEN}"})
    others = [t["id"] for t in json.loads(data) if t["id"] not in task_ids]
    burst = (others[:100 - len(task_ids)] + task_ids)[-100:]
    since = page.evaluate("performance.now()")
    put_titles(port, burst, "burst")
    page.wait_for_function(f"() => document.body.textContent.includes('{burst[-1]} burst')",
                           timeout=60_000)
    settle(page)
    out["longtask_burst"] = longest_task(page, since)
    out["burst_updates"] = len(burst)
    context.close()
    return out


def slow_4g(browser, port, ids):
    """ The 500-card board on Slow 4G: cold, then reloaded with the service worker warm. """
    context, page = new_page(browser, port)
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", SLOW_4G)
    page.goto(f"http://127.0.0.1:{port}/#/projects/{ids['Phone']}", wait_until="commit")
    cold = page.wait_for_function(PAINTED, polling="raf", timeout=120_000).json_value()
    files = page.evaluate("(cold) => Math.max(...performance.getEntriesByType('resource')"
                          ".filter((e) => e.name.includes('/static/') && e.responseEnd <= cold)"
                          ".map((e) => e.responseEnd))", cold)
    page.evaluate("navigator.serviceWorker.ready.then(() => new Promise((done) => "
                  "navigator.serviceWorker.controller ? done() : "
                  "navigator.serviceWorker.addEventListener('controllerchange', done)))")
    settle(page, 2)
    warms = []
    for _ in range(WARM_LOADS):  # one load is noisy: the median of a few
        page.reload(wait_until="commit")
        warms.append(page.wait_for_function(PAINTED, polling="raf",
                                            timeout=120_000).json_value())
        settle(page, 1)
    controlled = page.evaluate("Boolean(navigator.serviceWorker.controller)")
    context.close()
    return {"slow4g_cold": cold, "slow4g_cold_files": files,
            "slow4g_warm": statistics.median(warms), "slow4g_warms": sorted(warms),
            "sw_controlled": controlled}


def transfer(port, ids, requests):
    """ The list's bytes on the wire, and the detail of the long task: p50, p99. """
    auth = {"Authorization": f"Bearer {TOKEN}", "Accept-Encoding": "gzip, deflate, br"}
    status, headers, data = call(port, "GET", f"/api/projects/{ids['List']}/tasks", headers=auth)
    assert status == 200
    out = {"list_bytes": len(data), "list_encoding": headers.get("Content-Encoding", "identity")}
    tag = headers.get("ETag")
    if tag:
        status, _, data = call(port, "GET", f"/api/projects/{ids['List']}/tasks",
                               headers={**auth, "If-None-Match": tag})
        out["list_revalidated"] = f"{status}, {len(data)} bytes"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    for _ in range(requests):
        t0 = time.perf_counter()
        conn.request("GET", f"/api/tasks/{ids['heavy']}/detail", headers=auth)
        resp = conn.getresponse()
        resp.read()
        times.append((time.perf_counter() - t0) * 1000)
        assert resp.status == 200
    conn.close()
    times.sort()
    out["detail_p50"], out["detail_p99"] = percentile(times, 0.5), percentile(times, 0.99)
    return out


def first_log_line(browser, port, ids, times):
    median, all_of_them, context, _, (requests, sent) = loads(
        browser, port, f"/#/tasks/{ids['heavy']}", FIRST_LOG_ROW, times)
    context.close()
    return {"first_log_line": median, "first_log_lines": all_of_them,
            "requests_task_page": requests, "bytes_task_page": sent}


def measure(name, root, db, folder, ids, args):
    from playwright.sync_api import sync_playwright

    port = free_port()
    print(f"{name}: starting {os.path.join(root, 'taskboard.py')}", flush=True)
    with serve(name, root, db, port, folder), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        out = {}
        for step in (lambda: transfer(port, ids, args.requests),
                     lambda: first_log_line(browser, port, ids, args.loads),
                     lambda: board_figures(browser, port, ids, args.loads),
                     lambda: slow_4g(browser, port, ids)):
            got = step()
            print(f"{name}: {got}", flush=True)
            out.update(got)
        browser.close()
    return out


# The report ################################################################################

GOALS = (  # figure, unit, goal text, met(value, baseline)
    ("board_paint", "ms", "< 1,000 ms", lambda v, b: v < 1000),
    ("tasks_request_start", "ms", "", None),
    ("longtask_render", "ms", "<= 200 ms", lambda v, b: v <= 200),
    ("longtask_filter", "ms", "<= 200 ms", lambda v, b: v <= 200),
    ("longtask_drag", "ms", "<= 200 ms", lambda v, b: v <= 200),
    ("longtask_burst", "ms", "<= 200 ms", lambda v, b: v <= 200),
    ("dom_elements", "", "< 5,000", lambda v, b: v < 5000),
    ("requests_board", "", "<= 12", lambda v, b: v <= 12),
    ("bytes_board", "B", "", None),
    ("slow4g_cold", "ms", "< 3,000 ms", lambda v, b: v < 3000),
    ("slow4g_cold_files", "ms", "", None),
    ("slow4g_warm", "ms", "< 1,000 ms", lambda v, b: v < 1000),
    ("list_bytes", "B", "<= 10 % of the baseline's", lambda v, b: b is not None and v <= b / 10),
    ("first_log_line", "ms", "< 500 ms", lambda v, b: v < 500),
    ("requests_task_page", "", "", None),
    ("bytes_task_page", "B", "", None),
    ("detail_p50", "ms", "< 50 ms", lambda v, b: v < 50),
    ("detail_p99", "ms", "", None),
)


def rows_of(ours, base):
    rows = []
    for figure, unit, goal, met in GOALS:
        value = ours.get(figure)
        baseline = (base or {}).get(figure)
        ratio = baseline / value if value and baseline is not None else None
        rows.append(result_row(figure, value, unit, baseline, ratio, goal,
                               None if met is None or value is None else met(value, baseline)))
    return rows


def main():
    args = parse_args()
    if not os.access(CHROMIUM, os.X_OK):
        sys.exit(f"{CHROMIUM} is missing: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="taskboard-bench-ui-") as tmp:
        print(f"bench/ui.py: boards of {', '.join(f'{n:,}' for n in SIZES.values())} tasks, "
              f"a log of {args.log_entries:,} entries; baseline {args.baseline_rev or 'none'}; "
              f"{os.cpu_count()} CPUs", flush=True)
        db, ids = build("taskboard", REPO_ROOT, tmp, args.log_entries)
        base_root, why = baseline_checkout(args.baseline_rev, tmp)
        if why:
            print(f"no baseline: {why}", flush=True)
        base = None
        if base_root:
            base_db, base_ids = build("baseline", base_root, tmp, args.log_entries)
            if base_ids != ids:
                sys.exit(f"the baseline's database got other ids: {base_ids}, not {ids}")
            base = measure("baseline", base_root, base_db, tmp, ids, args)
        ours = measure("taskboard", REPO_ROOT, db, tmp, ids, args)
    rows = rows_of(ours, base)
    print_table(rows, value="this checkout", baseline=args.baseline_rev or "baseline")
    for key in ("board_paints", "first_log_lines", "list_encoding", "list_revalidated",
                "sw_controlled", "burst_updates"):
        print(f"{key}: {ours.get(key)} (baseline: {(base or {}).get(key)})")
    emit_result("ui", rows, baseline_rev=args.baseline_rev if base else None)


if __name__ == "__main__":
    main()
