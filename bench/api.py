"""Taskboard API throughput and latency, as ratios against a bare bottle + gevent baseline.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies (both
servers are started with that same interpreter); it is not a test:

    python bench/api.py                 # 5 s per figure, 4 clients, 2 rounds
    python bench/api.py --quick         # smoke test: 1 s per figure, 1 round
    python bench/api.py --plain-client  # no TCP_QUICKACK (see below)

What it measures, each for `--seconds` after a 1 s warm-up, with `--clients` client
processes that each send requests back to back on one keep-alive connection:

  list_tasks   GET  /api/projects/:id/tasks on a project holding 1,000 tasks
  create_task  POST /api/projects/:id/tasks {"title", "description", "priority"}
               (into a fresh project per round, so the listed project stays at 1,000)

The baselines run in a tiny bottle app, monkey-patched and served the way Taskboard is
served (gevent.pywsgi.WSGIServer + geventwebsocket's WebSocketHandler, log=None), in its
own process. Each does the figure's work, the bare way:

  list_tasks   GET /bare/tasks re-serialises, per request, the very list Taskboard
               returned (same bytes). Taskboard keeps a project's list until its tasks
               change, so list_tasks times a list read again while nothing changed.
  create_task  POST /bare/tasks/same-writes creates the task: it runs the very statements
               Taskboard's create runs (BEGIN IMMEDIATE; the project's counter; the type's
               template; the task with RETURNING *; the activity row; COMMIT) on an online
               copy of Taskboard's own database (its schema and indexes, the listed
               project's 1,000 tasks), one transaction per request, and answers the row.
               The ratio is what Taskboard's own code (routing, validation, rendering,
               events, its way of writing) makes of the same durable writes.

Two more, for information (no goal): POST /bare/tasks parses the JSON body and echoes it
with 201 (create_vs_echo_*: a create against a request that stores nothing), and POST
/bare/tasks/stored stores the task with one INSERT into a table without indexes and one
COMMIT (create_vs_stored_*; WAL, synchronous=NORMAL like Taskboard). same_writes_vs_echo_rps
is what the writes of a create cost the bare stack itself.

NOTE: create_task was judged against the echo until 2026-11-22. A task's writes cannot
reach half an echo on this stack: the bare server running only those writes made
0.34-0.47x of it (one INSERT into a table without indexes: 0.57-0.85x).

Baselines and Taskboard run alternately (baseline, taskboard, baseline, taskboard, ...) on
the same machine with the same clients; each side's best round is kept.

The auth check's cost (goal: token/no-auth req/s >= 0.95, "the auth check must not cost the
API more than 5 %"). The board always has a token (design §11), so every request above
carries `Authorization: Bearer`. Three more Taskboards, each on its own copy of the seeded
database: one with the token, one started --no-auth (no header sent), and one whose clients
send a personal token (read and write, design §19) instead of the board's. The same mix goes
to each, each client cycling GET a task, GET the 1,000-task list, POST a task (into a project
of its own): `--auth-rounds` rounds of `--auth-seconds` per side, the sides' order turning
each round, so that drift and noise hit all alike. Each side's rounds are pooled (all
requests over all time, all latencies), not the best one: the difference sought is a few per
cent, below what one round's luck gives. Rows auth_rps (the goal: >= 0.95x --no-auth),
personal_auth_rps (issue 48's goal: a personal token >= 0.95x the board's token), their p50
and p99 (no goal).

The clients set TCP_QUICKACK after each request (Linux). Without it, gevent.pywsgi's
separate header and body writes meet Nagle and the client's delayed ACK, and every small
response of the bare baseline takes ~40 ms (Taskboard sets TCP_NODELAY on its connections):
the figures would time the kernel, not the servers. --plain-client turns that off.

How to read the output: one line per measurement while it runs, then a table with
Taskboard's figure, the baseline's, and the ratio, where higher is always better:
taskboard/baseline for req/s, baseline/taskboard for p50 and p99 latency. A ratio of 0.6
means "60 % of what bare bottle + gevent manages". The goal is >= 0.5 for every ratio.
The lines `ratio <figure> <x> (goal >= 0.5)` are meant for grep, the last one,
BENCH_RESULT {...}, for bench/run.py. Absolute numbers
are only comparable within one run: the clients share the CPU with both servers. The
clients keep the servers saturated, so mean latency = clients / req/s; a busy gevent server
serves its ready connections unevenly, so p50 can sit well below that mean and p99 far
above it (the per-measurement lines show the mean too).
"""

import argparse
import http.client
import json
import os
import sqlite3
import sys
import tempfile

from _common import (
    LoadGenerator,
    Server,
    auth_headers,
    best_of,
    emit_result,
    free_port,
    percentile,
    print_report,
    ratios,
    request,
    result_row,
    taskboard_env,
)

GOAL = 0.5
AUTH_GOAL = 0.95  # token / --no-auth req/s: the auth check costs the API at most 5 %
AUTH_SIDES = ("token", "no_auth", "personal")
TASK_COUNT = 1000
CREATE_BODY = json.dumps({"title": "bench task {n}",
                          "description": "A task created by bench/api.py to time task creation.",
                          "priority": 1})

#: The baseline server, written into the temp dir and run as its own process.
BASELINE_SERVER = '''\
from gevent import monkey; monkey.patch_all()
import datetime, json, sqlite3, sys
import bottle
from gevent.pywsgi import WSGIServer
from geventwebsocket.handler import WebSocketHandler

port, payload_path, separators = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
with open(payload_path, encoding="utf-8") as f:
    TASKS = json.load(f)
db = sqlite3.connect(sys.argv[4], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=NORMAL")
db.execute("CREATE TABLE tasks (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, "
           "description TEXT NOT NULL, priority INTEGER NOT NULL, created_at TEXT NOT NULL)")
same = None  # a copy of Taskboard's database and a project in it, when given (not scale.py)
if len(sys.argv) > 6:
    same = sqlite3.connect(sys.argv[5], isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
        same.execute(f"PRAGMA {pragma}")
    SAME_PROJECT = int(sys.argv[6])
app = bottle.Bottle()

@app.get("/bare/health")
def health():
    return {"ok": True}

@app.get("/bare/tasks")
def list_tasks():
    bottle.response.content_type = "application/json"
    return json.dumps(TASKS, separators=separators)

@app.post("/bare/tasks")
def create_task():
    task = json.loads(bottle.request.body.read())
    bottle.response.status = 201
    return task

@app.post("/bare/tasks/stored")
def create_stored_task():
    task = json.loads(bottle.request.body.read())
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    db.execute("BEGIN IMMEDIATE")
    cursor = db.execute("INSERT INTO tasks (title, description, priority, created_at) "
                        "VALUES (?, ?, ?, ?) RETURNING *", (task["title"],
                        task["description"], task["priority"], now))
    names = [d[0] for d in cursor.description]
    row = dict(zip(names, cursor.fetchone()))
    cursor.close()
    db.execute("COMMIT")
    bottle.response.status = 201
    return row

@app.post("/bare/tasks/same-writes")
def create_task_same_writes():
    if same is None:
        bottle.abort(404, "no database given")
    task = json.loads(bottle.request.body.read())
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    same.execute("BEGIN IMMEDIATE")
    counter, key = same.execute(
        "UPDATE projects SET task_counter = task_counter + 1 WHERE id = ? "
        "RETURNING task_counter, key", (SAME_PROJECT,)).fetchone()
    same.execute("SELECT model, thinking_effort FROM templates WHERE project_id = ? AND "
                 "task_type = ? ORDER BY id LIMIT 1", (SAME_PROJECT, "feature")).fetchone()
    cursor = same.execute(
        "INSERT INTO tasks (title, description, priority, task_type, model, thinking_effort, "
        "project_id, status, task_key, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
        (task["title"], task["description"], task["priority"], "feature", "model_large",
         "high", SAME_PROJECT, "backlog", f"{key}-{counter}", now, now))
    names = [d[0] for d in cursor.description]
    row = dict(zip(names, cursor.fetchone()))
    same.execute("INSERT INTO activity (project_id, task_id, task_title, event, from_status, "
                 "to_status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (SAME_PROJECT, row["id"], task["title"], "created", None, "backlog", now))
    same.execute("COMMIT")
    bottle.response.status = 201
    return row

WSGIServer(("127.0.0.1", port), app, handler_class=WebSocketHandler, log=None).serve_forever()
'''


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured time per figure")
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per side")
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 s, 1 round")
    parser.add_argument("--plain-client", action="store_true",
                        help="do not set TCP_QUICKACK on the clients' sockets")
    parser.add_argument("--auth-seconds", type=float, default=2.0,
                        help="measured time per round of the token/--no-auth comparison")
    parser.add_argument("--auth-rounds", type=int, default=6,
                        help="rounds per side of the token/--no-auth comparison")
    args = parser.parse_args()
    args.warmup = 1.0
    if args.quick:
        args.seconds, args.rounds, args.warmup = 1.0, 1, 0.5
        args.auth_seconds, args.auth_rounds = 1.0, 4
    return args


def connect(port):
    return http.client.HTTPConnection("127.0.0.1", port, timeout=30)


def create_project(port, slug, working_dir, auth=True):
    """ POST /api/projects; returns the new project's id. """
    conn = connect(port)
    status, body = request(conn, "POST", "/api/projects",
                           {"name": f"Bench {slug}", "slug": slug, "workingDir": working_dir},
                           auth=auth)
    conn.close()
    if status != 201:
        raise RuntimeError(f"POST /api/projects answered {status}: {body}")
    return body["id"]


def seed_tasks(port, project_id):
    """ TASK_COUNT tasks with varied priorities, through the API. """
    conn = connect(port)
    for i in range(TASK_COUNT):
        task = {"title": f"seeded task {i}", "priority": i % 4,
                "description": f"Seeded by bench/api.py; task {i} of {TASK_COUNT}."}
        status, body = request(conn, "POST", f"/api/projects/{project_id}/tasks", task)
        if status != 201:
            raise RuntimeError(f"POST /api/projects/{project_id}/tasks answered {status}: {body}")
    conn.close()


def copy_database(source, target):
    """ An online copy (SQLite's backup) of the running Taskboard's database. """
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def fetch_raw(port, path, auth=True):
    conn = connect(port)
    conn.request("GET", path, headers=auth_headers(auth))
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"GET {path} answered {resp.status}: {raw[:300]!r}")
    return raw


def matching_separators(raw):
    """ The json.dumps separators that reproduce Taskboard's list body byte for byte. """
    tasks = json.loads(raw)
    if len(tasks) != TASK_COUNT:
        raise RuntimeError(f"the seeded project lists {len(tasks)} tasks, not {TASK_COUNT}")
    for separators in (None, (",", ":")):
        if json.dumps(tasks, separators=separators).encode() == raw:
            return separators
    print("warning: could not reproduce Taskboard's list body exactly; using json.dumps "
          f"defaults ({len(json.dumps(tasks))} bytes vs Taskboard's {len(raw)})")
    return None


def main():
    args = parse_args()
    print(f"bench/api.py: {args.clients} clients, {args.seconds:g} s per figure after "
          f"{args.warmup:g} s warm-up, {args.rounds} round(s), {os.cpu_count()} CPUs"
          f"{', plain clients (no TCP_QUICKACK)' if args.plain_client else ''}")
    with tempfile.TemporaryDirectory(prefix="taskboard-bench-") as tmp:
        load = LoadGenerator(args.clients, args.warmup, fast_ack=not args.plain_client)
        try:
            run(args, tmp, load)
        except KeyboardInterrupt:
            sys.exit("interrupted")
        finally:
            load.close()


def run(args, tmp, load):
    tb_port = free_port()
    taskboard = Server("taskboard", [sys.executable, "taskboard.py", "--port", str(tb_port),
                                     "--db", os.path.join(tmp, "taskboard.db")],
                       os.path.join(tmp, "taskboard.log"), "/api/health", tb_port,
                       env=taskboard_env())
    with taskboard:
        list_project = create_project(tb_port, "bench", tmp)
        seed_tasks(tb_port, list_project)
        list_path = f"/api/projects/{list_project}/tasks"
        raw = fetch_raw(tb_port, list_path)
        payload_path = os.path.join(tmp, "tasks.json")
        with open(payload_path, "wb") as f:
            f.write(raw)
        baseline_path = os.path.join(tmp, "baseline_server.py")
        with open(baseline_path, "w") as f:
            f.write(BASELINE_SERVER)

        same_path = os.path.join(tmp, "same_writes.db")
        copy_database(os.path.join(tmp, "taskboard.db"), same_path)
        auth_dbs = {}  # the auth comparison's servers start from the same seeded state
        for side in AUTH_SIDES:
            os.makedirs(os.path.join(tmp, side))  # a data dir each
            auth_dbs[side] = os.path.join(tmp, side, "taskboard.db")
            copy_database(os.path.join(tmp, "taskboard.db"), auth_dbs[side])
        task_id = json.loads(raw)[0]["id"]
        base_port = free_port()
        separators = json.dumps(matching_separators(raw))
        baseline = Server("baseline", [sys.executable, baseline_path, str(base_port),
                                       payload_path, separators,
                                       os.path.join(tmp, "baseline.db"), same_path,
                                       str(list_project)],
                          os.path.join(tmp, "baseline.log"), "/bare/health", base_port)
        with baseline:
            base_raw = fetch_raw(base_port, "/bare/tasks")
            print(f"task list payload: taskboard {len(raw)} bytes, baseline {len(base_raw)} "
                  f"bytes ({TASK_COUNT} tasks)")
            results = measure(args, load, tmp, tb_port, base_port, list_path)
    auth = measure_auth(args, load, tmp, auth_dbs, list_path, task_id)

    creates = {side: best_of(results["create_task"][side])
               for side in ("taskboard", "baseline", "stored", "same_writes")}
    rows = ratios("list_tasks", best_of(results["list_tasks"]["taskboard"]),
                  best_of(results["list_tasks"]["baseline"]))
    rows += ratios("create_task", creates["taskboard"], creates["same_writes"])
    echo = ratios("create_vs_echo", creates["taskboard"], creates["baseline"])
    stored = ratios("create_vs_stored", creates["taskboard"], creates["stored"])
    ceiling = ratios("same_writes_vs_echo", creates["same_writes"], creates["baseline"])[:1]
    print_report(rows, GOAL)
    auth_rows = ratios("auth", auth["token"], auth["no_auth"])
    personal_rows = ratios("personal_auth", auth["personal"], auth["token"])
    print(f"the auth check: the same mix with the token, --no-auth and a personal token, "
          f"{args.auth_rounds} rounds of {args.auth_seconds:g} s per side, pooled:")
    for (figure, ours, base, ratio), than in [(r, "--no-auth") for r in auth_rows] + \
            [(r, "the board's token") for r in personal_rows]:
        goal = f" (goal >= {AUTH_GOAL})" if figure.endswith("_rps") else ""
        print(f"ratio {figure} {ratio:.2f}{goal} ({ours:.2f} against {than}'s {base:.2f}"
              f"{' req/s' if figure.endswith('_rps') else ' ms'})")
    print("create_task's baseline is a bare server running Taskboard's own create statements "
          "on a copy of its database; against the others (no goal):")
    for figure, ours, base, ratio in echo:
        print(f"ratio {figure} {ratio:.2f} (taskboard {ours:.2f}, bare echo {base:.2f})")
    for figure, ours, base, ratio in stored:
        print(f"ratio {figure} {ratio:.2f} (taskboard {ours:.2f}, bare + one INSERT "
              f"{base:.2f})")
    for figure, ours, base, ratio in ceiling:
        print(f"ratio {figure} {ratio:.2f} (bare + the same writes {ours:.0f} req/s, echo "
              f"{base:.0f} req/s): what these writes cost the bare stack")

    def unit(figure):
        return "req/s" if figure.endswith("_rps") else "ms"
    emit_result("api", [result_row(figure, ours, unit(figure), base, ratio,
                                   f">= {GOAL}x baseline", ratio >= GOAL)
                        for figure, ours, base, ratio in rows] +
                [result_row(figure, ours, unit(figure), base, ratio,
                            f">= {AUTH_GOAL}x {than}" if figure.endswith("_rps") else "",
                            ratio >= AUTH_GOAL if figure.endswith("_rps") else None)
                 for rows_of, than in ((auth_rows, "--no-auth"),
                                       (personal_rows, "the board's token"))
                 for figure, ours, base, ratio in rows_of] +
                [result_row(figure, ours, unit(figure), base, ratio)
                 for figure, ours, base, ratio in echo + stored + ceiling])


def measure(args, load, tmp, tb_port, base_port, list_path):
    """ Alternating rounds; returns {figure: {side: [result per round]}}. """
    results = {f: {"baseline": [], "taskboard": [], "stored": [], "same_writes": []}
               for f in ("list_tasks", "create_task")}
    for round_no in range(1, args.rounds + 1):
        create_project_id = create_project(tb_port, f"bench-create-{round_no}", tmp)
        plan = [
            ("list_tasks", "baseline", base_port, "GET", "/bare/tasks", None),
            ("list_tasks", "taskboard", tb_port, "GET", list_path, None),
            ("create_task", "baseline", base_port, "POST", "/bare/tasks", CREATE_BODY),
            ("create_task", "stored", base_port, "POST", "/bare/tasks/stored", CREATE_BODY),
            ("create_task", "same_writes", base_port, "POST", "/bare/tasks/same-writes",
             CREATE_BODY),
            ("create_task", "taskboard", tb_port, "POST",
             f"/api/projects/{create_project_id}/tasks", CREATE_BODY),
        ]
        for figure, side, port, method, path, body in plan:
            r = load.run(port, method, path, args.seconds, body)
            results[figure][side].append(r)
            errors = f", {r['errors']} ERRORS (non-2xx or dropped)" if r["errors"] else ""
            print(f"round {round_no} {figure:<11} {side:<11} {r['rps']:6.0f} req/s  "
                  f"mean {r['mean_ms']:6.2f}  p50 {r['p50_ms']:6.2f}  p99 {r['p99_ms']:6.2f} ms"
                  f"  ({r['requests']} requests{errors})", flush=True)
    return results


def measure_auth(args, load, tmp, dbs, list_path, task_id):
    """ The same mix on a Taskboard with the token (bearer sent) and one --no-auth (no
    header), in ABBA order; returns {side: {"rps", "p50_ms", "p99_ms"}}, rounds pooled. """
    servers, bearers = {}, {}
    for side in AUTH_SIDES:
        port = free_port()
        argv = [sys.executable, "taskboard.py", "--port", str(port), "--db", dbs[side]]
        servers[side] = Server(f"taskboard ({side})", argv + ["--no-auth"] * (side == "no_auth"),
                               os.path.join(tmp, side, "taskboard.log"), "/api/health", port,
                               env=taskboard_env(auth=side != "no_auth"))
    with servers["token"], servers["no_auth"], servers["personal"]:
        plans = {}
        for side, server in servers.items():
            bearers[side] = side == "token"
            if side == "personal":  # the board's token makes it; the mix sends it
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
                status, made = request(conn, "POST", "/api/tokens", {
                    "name": "bench", "scopes": ["read", "write"]})
                conn.close()
                assert status == 201, made
                bearers[side] = made["secret"]
            create = create_project(server.port, "bench-auth", tmp, auth=side != "no_auth")
            fetch_raw(server.port, list_path, auth=bearers[side])  # also checks it answers
            plans[side] = [("GET", f"/api/tasks/{task_id}", None), ("GET", list_path, None),
                           ("POST", f"/api/projects/{create}/tasks", CREATE_BODY)]
        runs = {side: [] for side in AUTH_SIDES}
        for round_no in range(args.auth_rounds):
            shift = round_no % len(AUTH_SIDES)  # each side first, second and last in turn
            for side in AUTH_SIDES[shift:] + AUTH_SIDES[:shift]:
                r = load.run_mix(servers[side].port, plans[side], args.auth_seconds,
                                 auth=bearers[side])
                runs[side].append(r)
                errors = f", {r['errors']} ERRORS (non-2xx or dropped)" if r["errors"] else ""
                print(f"auth round {round_no + 1} {side:<8} {r['rps']:6.0f} req/s  "
                      f"p50 {r['p50_ms']:6.2f}  p99 {r['p99_ms']:6.2f} ms  "
                      f"({r['requests']} requests{errors})", flush=True)
    pooled = {}
    for side, rs in runs.items():
        latencies = sorted(lat for r in rs for lat in r["latencies"])
        pooled[side] = {"rps": sum(r["rps"] for r in rs) / len(rs),  # rounds of equal length
                        "p50_ms": percentile(latencies, 0.50) * 1000,
                        "p99_ms": percentile(latencies, 0.99) * 1000}
    return pooled


if __name__ == "__main__":
    main()
