"""Taskboard on a big database: start-up time, read latency at scale, and the query plans.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/scale.py                    # 20 projects, 50,000 tasks, 5,000,000 log lines
    python bench/scale.py --quick            # 20 projects, 5,000 tasks, 500,000 log lines
    python bench/scale.py --tasks 20000 --logs 2000000    # any other scale
    TASKBOARD_BENCH_CACHE=<dir> python bench/scale.py     # keep the database between runs

The database. Built once per scale by writing SQLite directly: Taskboard itself creates the
schema (`taskboard.py --port 0 --db <file>` until it prints its URL, then SIGTERM), then
big executemany transactions fill it (journal off while building, WAL again afterwards, no
ANALYZE: the planner sees what a real board's database gives it). Contents: `--projects`
projects with `--tasks` tasks spread evenly (20 % backlog, 8 % testing, 65 % done, 7 % failed;
none in progress, so a start resumes no agent and the cached file stays as built), 1-3 task
runs per started task plus verifier runs, planning sessions, revisions, dependencies,
activity rows for every creation and move, and `--logs` log lines shaped like real agent
logs (session line, thinking, text, tool calls and their results, stderr, finish line; runs
overlap, so a task's lines are interleaved with others' as on a live board). `--heavy` tasks
carry `--heavy-lines` lines each (50,000 by default); the rest is spread unevenly over the
other runs. The full scale is ~2 GB: the free disk is checked first. With
`--cache-dir`/TASKBOARD_BENCH_CACHE the file (named after the scale, the generator version
and Taskboard's migrations) is kept and reused; without, it lives in a temp dir that is
removed at the end. Raw agent lines (task_events) are not generated.

What it measures, on one `taskboard.py` started on that file (agent command: a name that
does not exist, so no agent runs):

  start-up       process start -> URL printed, and -> first 200 from /api/health, median
                 of 5 starts; baseline: the same on an empty (migrated) database
  reads          p50/p99 over `--requests` GETs each (sequential, keep-alive, fewer when an
                 endpoint needs more than `--budget` s in all), interleaved in 4 rounds:
                 the task list of a project with tasks/projects tasks, a task, the detail
                 of a task with `--heavy-lines` log lines, its logs (?limit=500, and a page
                 deep in it with ?before=<id> when the server supports the cursor), the
                 project's stats, its activity (limit 50 at offset 0 and at the oldest
                 page), agent usage, the projects summary; baseline: a bare bottle + gevent
                 server (bench/api.py's) answering the same task-list bytes (for the list)
                 and a small JSON object (for the rest), measured in the same rounds
  query plans    bench/_query_audit.py calls the store functions behind those routes and
                 behind start-up on a read-only connection, times each statement and
                 prints its EXPLAIN QUERY PLAN; a full SCAN of tasks, runs, activity or logs
                 is flagged with the statement, and so is a log read without LIMIT
  memory         the server's peak RSS (VmHWM) after all of that

How to read the output: the plans and the flagged scans, then a table (figure, value,
baseline, ratio, goal). Ratios are baseline/value for latencies, so higher is better and
1.0 means "as fast as bare bottle". Goals (issue 9): task list p99 < 50 ms at 50,000
tasks, start-up < 1 s. The last line, BENCH_RESULT {...}, is for bench/run.py. Latencies
are single-client and wall-clock on a shared machine: compare within one run.
"""

import argparse
import datetime
import hashlib
import http.client
import json
import os
import random
import re
import selectors
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

from _common import (
    REPO_ROOT,
    Server,
    auth_headers,
    emit_result,
    free_port,
    percentile,
    proc_memory_kb,
    quickack,
    result_row,
    taskboard_env,
)

GOAL_LIST_P99_MS, GOAL_STARTUP_S = 50.0, 1.0
#: tools/list and list_tasks over POST /mcp for an outside client (issue 48).
GOAL_MCP_P99_MS = 20.0
GENERATOR_VERSION = 2
FULL = {"projects": 20, "tasks": 50_000, "logs": 5_000_000, "heavy": 10, "heavy_lines": 50_000}
QUICK = {"projects": 20, "tasks": 5_000, "logs": 500_000, "heavy": 2, "heavy_lines": 50_000}
BYTES_PER_LOG_LINE = 450  # what the generated log costs on disk, index included (measured)
MISSING_AGENT = "taskboard-bench-no-such-agent"
AUDIT = os.path.join(REPO_ROOT, "bench", "_query_audit.py")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="5,000 tasks, 500,000 log lines, 50 requests per endpoint")
    for name in FULL:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=None)
    parser.add_argument("--requests", type=int, default=None,
                        help="requests per endpoint (default 200, 50 with --quick)")
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds per endpoint at most (fewer requests if slower)")
    parser.add_argument("--cache-dir", default=os.environ.get("TASKBOARD_BENCH_CACHE"),
                        help="keep the database here between runs (env TASKBOARD_BENCH_CACHE)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild a cached database")
    parser.add_argument("--build-only", action="store_true",
                        help="build (or find) the database, print its path, measure nothing")
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    for name, default in scale.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.requests is None:
        args.requests = 50 if args.quick else 200
    args.heavy = min(args.heavy, args.logs // max(1, args.heavy_lines),
                     args.tasks // 2)
    if args.tasks < 4 * args.projects:
        parser.error("--tasks must be at least 4 per project")
    return args


# The database ###############################################################################

def migration_names():
    """ The migration names in taskboard.py's source (no import: it monkey-patches). """
    with open(os.path.join(REPO_ROOT, "taskboard.py"), encoding="utf-8") as f:
        source = f.read()
    block = source[source.index("MIGRATIONS = ("):]
    block = block[:block.index("\n)\n")]
    return re.findall(r'^    \("(\w+)", """', block, re.M)


def db_name(args):
    fingerprint = hashlib.sha1(json.dumps(migration_names()).encode()).hexdigest()[:8]
    return (f"taskboard-scale-p{args.projects}-t{args.tasks}-l{args.logs}-h{args.heavy}x"
            f"{args.heavy_lines}-g{GENERATOR_VERSION}-{fingerprint}.db")


def find_or_build(args, folder):
    """ The database's path and its description (meta), building it unless it is cached. """
    path = os.path.join(folder, db_name(args))
    meta_path = path + ".json"
    if os.path.exists(path) and os.path.exists(meta_path) and not args.rebuild:
        with open(meta_path) as f:
            meta = json.load(f)
        print(f"using the cached database {path} ({os.path.getsize(path) / 1e9:.2f} GB, "
              f"built in {meta['build_seconds']:.0f} s)", flush=True)
        return path, meta
    need = args.logs * BYTES_PER_LOG_LINE + args.tasks * 3000 + 200e6
    free = shutil.disk_usage(folder).free
    print(f"building {path}: needs ~{need / 1e9:.1f} GB, {free / 1e9:.1f} GB free", flush=True)
    if free < need * 1.2:
        sys.exit(f"not enough free disk for this scale in {folder}: ~{need / 1e9:.1f} GB "
                 f"needed, {free / 1e9:.1f} GB free. Use --tasks/--logs (e.g. --quick) "
                 "or another --cache-dir.")
    for stale in (path, meta_path, path + "-wal", path + "-shm"):
        if os.path.exists(stale):
            os.remove(stale)
    building = path + ".building"
    for stale in (building, building + "-wal", building + "-shm"):
        if os.path.exists(stale):
            os.remove(stale)
    started = time.monotonic()
    work_dir = os.path.join(folder, "work")
    os.makedirs(work_dir, exist_ok=True)
    create_schema(building, folder)
    meta = fill(building, args, work_dir)
    os.replace(building, path)
    meta["build_seconds"] = time.monotonic() - started
    meta["bytes"] = os.path.getsize(path)
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    print(f"built in {meta['build_seconds']:.0f} s: {meta['bytes'] / 1e9:.2f} GB", flush=True)
    return path, meta


def create_schema(path, folder):
    """ Let Taskboard create and migrate the database: start it once, stop it. """
    with open(os.path.join(folder, "schema.log"), "wb") as log:
        proc, _, _ = start_until_url(path, log)
    stop(proc)
    if proc.returncode != 0:
        sys.exit(f"taskboard.py exited with {proc.returncode} while creating {path}")


# The generator: Taskboard's tables written directly, in big transactions.

WORDS = ("board queue agent worker log task project webhook token session cache index "
         "parser router schema migration stream socket client server retry budget branch "
         "worktree diff commit review template snippet setting badge column filter search "
         "timeline chart usage cost model effort plan dependency wave export import").split()
VERBS = "Add Fix Refactor Document Test Speed up Remove Rename Split Validate Cache".split()
TOOLS = ("Bash", "Read", "Edit", "Write", "Grep", "Glob", "TodoWrite", "WebFetch")
KIND_PATTERN = ("thinking", "text", "tool_call", "tool_result", "tool_call", "tool_result",
                "tool_call", "tool_result", "text", "tool_call", "tool_result", "tool_call",
                "tool_result", "stderr", "tool_call", "tool_result", "thinking", "text",
                "tool_call", "tool_result")
STATUS_WEIGHTS = (("backlog", 20), ("testing", 8), ("done", 65), ("failed", 7))
TYPES = ("feature", "bugfix", "refactor", "docs", "test", "chore")
MODELS = (("model_large", 2), ("model_medium", 6), ("model_small", 2))
PRICES = {"model_large": (15.0, 75.0, 1.5, 18.75), "model_medium": (3.0, 15.0, 0.3, 3.75),
          "model_small": (1.0, 5.0, 0.1, 1.25)}  # taskboard.PRICES
ALIASES = {"model_large": "opus", "model_medium": "sonnet", "model_small": "haiku"}
DAY = 86400.0


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(t)) + f"{int(t % 1 * 1000):03d}Z"


def sentence(rnd, words=12):
    text = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(words // 2, words)))
    return text.capitalize() + "."


def message_pools(rnd):
    """ Per kind, messages like the ones StreamParser writes (lengths as in real logs). """
    def path():
        return "src/" + "/".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 3))) + ".py"

    def code_lines(n):
        return "\n".join(f"{i:>4}  {rnd.choice(('def', 'return', 'if', 'for', 'x ='))} "
                         + " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(2, 9)))
                         for i in range(1, n + 1))
    pools = {
        "thinking": [" ".join(sentence(rnd, 18) for _ in range(rnd.randint(1, 5)))
                     for _ in range(300)],
        "text": [" ".join(sentence(rnd, 16) for _ in range(rnd.randint(1, 4)))
                 for _ in range(300)],
        "stderr": [f"warning: {sentence(rnd, 8)}" for _ in range(50)],
    }
    calls, results = [], []
    for _ in range(600):
        tool = rnd.choice(TOOLS)
        if tool == "Bash":
            arg = rnd.choice(("pytest -q tests/", "git status", "ls -la src", "ruff check .",
                              f"grep -rn {rnd.choice(WORDS)} src", "git diff --stat"))
        else:
            arg = path()
        calls.append((tool, f"{tool}: {arg}"))
        results.append((tool, code_lines(rnd.choice((1, 3, 8, 20, 40)))))
    pools["tool_call"], pools["tool_result"] = calls, results
    return pools


def fill(path, args, work_dir):
    rnd = random.Random(9)
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode=OFF", "synchronous=OFF", "cache_size=-400000",
                   "temp_store=MEMORY", "foreign_keys=OFF"):
        conn.execute(f"PRAGMA {pragma}")
    conn.execute("BEGIN")
    end = time.time() - 3600
    start = end - 365 * DAY
    meta = {"projects": args.projects, "tasks": args.tasks, "logs": args.logs,
            "generator": GENERATOR_VERSION, "built_at": iso(time.time())}

    # projects
    projects = []
    for p in range(1, args.projects + 1):
        created = start - rnd.uniform(1, 30) * DAY
        projects.append({"id": p, "name": f"Scale project {p}", "slug": f"scale-{p:02d}",
                         "key": f"SC{p}", "working_dir": work_dir, "max_concurrent": 5,
                         "permission_mode": "auto-accept", "created_at": iso(created),
                         "updated_at": iso(created), "task_counter": 0})

    # tasks, created over the year, ids in creation order
    per_project = [args.tasks // args.projects + (p < args.tasks % args.projects)
                   for p in range(args.projects)]
    births = sorted((rnd.uniform(start, end - 5 * DAY), p + 1) for p, n in enumerate(per_project)
                    for _ in range(n))
    statuses = [s for s, w in STATUS_WEIGHTS for _ in range(w)]
    models = [m for m, w in MODELS for _ in range(w)]
    tasks, counters = [], {}
    for task_id, (born, project_id) in enumerate(births, 1):
        counters[project_id] = counters.get(project_id, 0) + 1
        task = {"id": task_id, "project_id": project_id, "born": born,
                "task_key": f"SC{project_id}-{counters[project_id]}",
                "title": f"{rnd.choice(VERBS)} {' '.join(rnd.sample(WORDS, 3))}",
                "description": " ".join(sentence(rnd, 14) for _ in range(rnd.randint(2, 8))),
                "status": rnd.choice(statuses), "priority": rnd.choice((0, 0, 1, 1, 1, 2, 3)),
                "task_type": rnd.choice(TYPES), "model": rnd.choice(models),
                "thinking_effort": rnd.choice(("low", "medium", "medium", "high")),
                "acceptance_criteria": "\n".join(f"- {sentence(rnd, 8)}"
                                                 for _ in range(rnd.randint(0, 3))),
                "tags": json.dumps(rnd.sample(WORDS, rnd.randint(1, 3)))
                if rnd.random() < 0.5 else None,
                "created_at": iso(born), "updated_at": iso(born), "parent_task_id": None,
                "source": None, "issue_number": None, "issue_url": None, "released": 0,
                "started_at": None, "completed_at": None, "retry_count": 0,
                "session_id": None, "input_tokens": 0, "output_tokens": 0,
                "cache_read_tokens": 0, "cache_creation_tokens": 0, "total_cost": 0.0,
                "work_duration_ms": 0, "revision_count": 0, "last_error": None,
                "agent_done": 0}
        if rnd.random() < 0.04 and counters[project_id] > 10:
            parent = task_id - rnd.randint(1, 200)
            if parent >= 1 and tasks[parent - 1]["project_id"] == project_id:
                task["parent_task_id"] = parent
        if rnd.random() < 0.03:
            task["source"], task["issue_number"] = "git_host", task_id
            task["issue_url"], task["released"] = f"https://example.com/i/{task_id}", 1
        tasks.append(task)
    for p in projects:
        p["task_counter"] = counters.get(p["id"], 0)

    # runs: 1-3 task runs per started task, a verifier run for some; sequential per task
    started = [t for t in tasks if t["status"] != "backlog"]
    heavy = set()
    for project_id in range(1, args.projects + 1):  # one heavy task per project first
        if len(heavy) >= args.heavy:
            break
        done = [t["id"] for t in started if t["project_id"] == project_id
                and t["status"] == "done"]
        if done:
            heavy.add(done[len(done) // 2])
    runs = []
    for task in started:
        begin = task["born"] + rnd.uniform(0.01, 3) * DAY
        count = rnd.choice((1, 1, 1, 1, 1, 1, 1, 2, 2, 3)) if task["id"] not in heavy else 3
        kinds = ["task"] * count
        if task["status"] in ("testing", "done") and rnd.random() < 0.3:
            kinds.append("verifier")
        for i, kind in enumerate(kinds):
            last = i == len(kinds) - 1
            weight = rnd.lognormvariate(0, 1) * (0.3 if kind == "verifier" else 1)
            runs.append({"task": task, "kind": kind, "begin": begin + i * 600,
                         "weight": weight, "last": last})
    # lines per run: heavy tasks get exactly heavy_lines, the rest is spread by weight
    heavy_runs = [r for r in runs if r["task"]["id"] in heavy]
    rest = [r for r in runs if r["task"]["id"] not in heavy]
    for task_id in heavy:
        mine = [r for r in heavy_runs if r["task"]["id"] == task_id]
        for i, r in enumerate(mine):
            r["lines"] = args.heavy_lines // len(mine) + (i < args.heavy_lines % len(mine))
    budget = args.logs - sum(r["lines"] for r in heavy_runs)
    total_weight = sum(r["weight"] for r in rest)
    for r in rest:
        r["lines"] = max(2, int(r["weight"] / total_weight * budget))
    diff = budget - sum(r["lines"] for r in rest)
    for r in sorted(rest, key=lambda r: -r["lines"]):  # the rounding: on the biggest runs
        if diff == 0:
            break
        change = diff if diff > 0 else max(diff, 2 - r["lines"])
        r["lines"] += change
        diff -= change
    # timing: a run writes 2-10 lines a second; runs of a task follow each other
    runs.sort(key=lambda r: (r["task"]["id"], r["begin"]))
    previous = {}
    for r in runs:
        r["begin"] = max(r["begin"], previous.get(r["task"]["id"], 0) + 30)
        r["end"] = r["begin"] + r["lines"] / rnd.uniform(2, 10)
        previous[r["task"]["id"]] = r["end"]
    runs.sort(key=lambda r: r["begin"])
    for run_id, r in enumerate(runs, 1):
        r["id"] = run_id
    print(f"  {len(tasks)} tasks, {len(runs)} runs, heavy tasks {sorted(heavy)}", flush=True)

    # task and run fields that follow from the runs; activity for every creation and move
    activity = [(t["born"], t["project_id"], t["id"], t["title"], "created", None, "backlog")
                for t in tasks]
    revisions = []
    by_task = {}
    for r in runs:
        by_task.setdefault(r["task"]["id"], []).append(r)
    run_rows = []
    for task_id, mine in by_task.items():
        task = tasks[task_id - 1]
        totals = [0, 0, 0, 0, 0.0]
        task_runs = [r for r in mine if r["kind"] == "task"]
        for i, r in enumerate(mine):
            tokens = [rnd.randint(2_000, 60_000), rnd.randint(500, 30_000),
                      rnd.randint(10_000, 900_000), rnd.randint(0, 80_000)]
            cost = sum(n * p for n, p in zip(tokens, PRICES[task["model"]])) / 1e6
            if r["kind"] == "verifier":
                status = rnd.choice(("approved", "approved", "rejected"))
            elif r is task_runs[-1]:
                status = "failed" if task["status"] == "failed" else "ok"
            else:
                status = "failed"
            r["status"] = status
            session = f"{task_id:08x}-{r['id']:04x}-4000-8000-{rnd.getrandbits(48):012x}"
            r["session"] = session
            error = "the agent exited with code 1 without a result" if status == "failed" \
                else None
            run_rows.append((r["id"], task_id, task["project_id"], r["kind"], task["model"],
                             status, iso(r["begin"]), iso(r["end"]),
                             0 if status != "failed" else 1, session, *tokens, cost,
                             rnd.randint(1000, 4_000_000), rnd.randint(10**6, 10**9),
                             work_dir, int(i > 0 and r["kind"] == "task"), None, None, error,
                             0))
            for n, value in enumerate(tokens + [cost]):
                totals[n] += value
            if r["kind"] == "task":
                if i == 0:
                    activity.append((r["begin"], task["project_id"], task_id, task["title"],
                                     "status_change", "backlog", "in_progress"))
                if r is task_runs[-1]:
                    to = "failed" if task["status"] == "failed" else "testing"
                    activity.append((r["end"], task["project_id"], task_id, task["title"],
                                     "status_change", "in_progress", to))
            elif status == "rejected":
                revisions.append((task_id, sentence(rnd, 14), iso(r["end"] + 1)))
                activity.append((r["end"] + 1, task["project_id"], task_id, task["title"],
                                 "revision", "testing", "testing"))
        first, last = mine[0], mine[-1]
        completed = last["end"] + (rnd.uniform(0.01, 2) * DAY
                                   if task["status"] == "done" else 0)
        if task["status"] == "done":
            completed = min(completed, end)
            activity.append((completed, task["project_id"], task_id, task["title"],
                             "status_change", "testing", "done"))
        task.update({
            "started_at": iso(first["begin"]), "completed_at": iso(completed),
            "updated_at": iso(completed), "retry_count": len(task_runs) - 1,
            "session_id": task_runs[-1]["session"], "input_tokens": totals[0],
            "output_tokens": totals[1], "cache_read_tokens": totals[2],
            "cache_creation_tokens": totals[3], "total_cost": totals[4],
            "work_duration_ms": int(sum(r["end"] - r["begin"] for r in task_runs) * 1000),
            "revision_count": sum(r["status"] == "rejected" for r in mine),
            "last_error": "the agent exited with code 1 without a result"
            if task["status"] == "failed" else None,
            "agent_done": 0})

    insert(conn, "projects", projects)
    task_columns = sorted({k for t in tasks for k in t} - {"born"})
    insert(conn, "tasks", [{c: t.get(c) for c in task_columns} for t in tasks])
    conn.executemany(
        "INSERT INTO runs (id, task_id, project_id, kind, model, status, started_at, ended_at, "
        "exit_code, session_id, input_tokens, output_tokens, cache_read_tokens, "
        "cache_creation_tokens, cost, pid, proc_start, cwd, resumed, head_start, head_end, "
        "error, permission_denials) VALUES (" + ",".join("?" * 23) + ")", run_rows)
    activity.sort(key=lambda a: a[0])
    conn.executemany("INSERT INTO activity (project_id, task_id, task_title, event, "
                     "from_status, to_status, created_at) VALUES (?,?,?,?,?,?,?)",
                     [(*a[1:], iso(a[0])) for a in activity])
    conn.executemany("INSERT INTO revisions (task_id, feedback, created_at) VALUES (?,?,?)",
                     revisions)
    edges = set()
    for t in tasks:
        if rnd.random() < 0.1 and t["id"] > 5:
            parent = t["id"] - rnd.randint(1, 5)
            if tasks[parent - 1]["project_id"] == t["project_id"]:
                edges.add((parent, t["id"]))
    conn.executemany("INSERT INTO task_dependencies (from_id, to_id, condition_type, "
                     "created_at) VALUES (?, ?, 'on_success', ?)",
                     [(a, b, tasks[b - 1]["created_at"]) for a, b in sorted(edges)])
    plans = []
    for p in projects:
        for i in range(5):
            at = rnd.uniform(start, end)
            plans.append((f"plan-{p['id']}-{i}", p["id"], sentence(rnd, 6), "", "model_medium",
                          "medium", "balanced", "completed", "[]", "[]",
                          json.dumps({"elapsed": 90, "tokens": {"input": 40000,
                                                                 "output": 6000},
                                      "toolCalls": 20, "turns": 8, "exitCode": 0}),
                          0.21, iso(at), iso(at + 90)))
    conn.executemany("INSERT INTO plans (plan_id, project_id, topic, context, model, effort, "
                     "granularity, status, tasks_json, warnings_json, stats_json, cost, "
                     "started_at, finished_at) VALUES (" + ",".join("?" * 14) + ")", plans)
    for p in projects:
        for task_type in ("feature", "bugfix"):
            conn.execute("INSERT INTO templates (project_id, name, content, task_type, "
                         "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                         (p["id"], f"{task_type} template", sentence(rnd, 30), task_type,
                          p["created_at"], p["created_at"]))
    conn.execute("COMMIT")

    write_logs(conn, rnd, runs, args.logs)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    meta["heavy"] = sorted(heavy)
    meta["runs"] = len(runs)
    meta["activity"] = len(activity)
    return meta


def insert(conn, table, rows):
    columns = list(rows[0])
    conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                     f"({','.join('?' * len(columns))})", [tuple(r.values()) for r in rows])


def write_logs(conn, rnd, runs, total):
    """ Every run's lines in time order (overlapping runs interleave), in big transactions. """
    pools = message_pools(rnd)
    kinds = [KIND_PATTERN[i % len(KIND_PATTERN)] for i in range(4096)]
    sql = ("INSERT INTO logs (task_id, run_id, created_at, kind, message, tool, is_error, "
           "duration_ms) VALUES (?,?,?,?,?,?,?,?)")
    batch, written, t0 = [], 0, time.monotonic()
    seconds = {}

    def stamp(t):
        whole = int(t)
        prefix = seconds.get(whole)
        if prefix is None:
            if len(seconds) > 4096:
                seconds.clear()
            prefix = seconds[whole] = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(whole))
        return f"{prefix}{int((t - whole) * 1000):03d}Z"

    def lines(r, first, last):
        """ Rows first..last-1 of run r. """
        task_id, run_id, n = r["task"]["id"], r["id"], r["lines"]
        step = (r["end"] - r["begin"]) / n
        out = []
        for i in range(first, last):
            at = stamp(r["begin"] + i * step)
            if i == 0:
                out.append((task_id, run_id, at, "system",
                            f"session {r['session']} (model "
                            f"{ALIASES[r['task']['model']]}, auto-accept permissions)",
                            None, None, None))
                continue
            if i == n - 1:
                failed = r["status"] == "failed"
                out.append((task_id, run_id, at, "system",
                            "the agent exited with code 1 without a result" if failed else
                            f"finished: {pools['text'][run_id % 300]}", None,
                            1 if failed else None, None))
                continue
            kind = kinds[(run_id + i) & 4095]
            pick = (i * 7919 + run_id * 104729) % 600
            if kind == "tool_call":
                tool, message = pools["tool_call"][pick]
                out.append((task_id, run_id, at, kind, message, tool, None, None))
            elif kind == "tool_result":
                tool, message = pools["tool_result"][pick]
                out.append((task_id, run_id, at, kind, message, tool,
                            1 if pick % 23 == 0 else 0, pick * 3 % 4000))
            else:
                pool = pools[kind]
                out.append((task_id, run_id, at, kind, pool[pick % len(pool)], None,
                            None, None))
        return out

    def flush():
        nonlocal batch, written
        conn.execute("BEGIN")
        conn.executemany(sql, batch)
        conn.execute("COMMIT")
        written += len(batch)
        batch = []
        rate = written / (time.monotonic() - t0)
        print(f"  logs: {written:,} of {total:,} ({rate:,.0f} rows/s)", flush=True)

    # sweep: the active runs (by their next line's time) and the ones about to start
    import heapq
    active, pending = [], 0
    while active or pending < len(runs):
        if not active or (pending < len(runs) and runs[pending]["begin"] <= active[0][0]):
            r = runs[pending]
            heapq.heappush(active, (r["begin"], pending, 0))
            pending += 1
            continue
        t, index, done = heapq.heappop(active)
        r = runs[index]
        limit = min(active[0][0] if active else float("inf"),
                    runs[pending]["begin"] if pending < len(runs) else float("inf"))
        step = (r["end"] - r["begin"]) / r["lines"]
        upto = r["lines"] if limit == float("inf") else \
            min(r["lines"], max(done + 1, int((limit - r["begin"]) / step) + 1))
        upto = min(upto, done + 200)  # runs interleave in batches, as the log writer does
        batch += lines(r, done, upto)
        if upto < r["lines"]:
            heapq.heappush(active, (r["begin"] + upto * step, index, upto))
        if len(batch) >= 200_000:
            flush()
    if batch:
        flush()


# The server ##################################################################################

def start_until_url(db, log, agent=MISSING_AGENT, timeout=60.0):
    """ Start taskboard.py on port 0; return (process, port, seconds until the URL). """
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "taskboard.py", "--port", "0", "--db", db,
                             "--agent-command", agent], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=log, stdin=subprocess.DEVNULL, env=taskboard_env())
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    buffered = b""
    while True:
        left = t0 + timeout - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            stop(proc)
            raise RuntimeError(f"taskboard.py printed no URL (exit {proc.returncode})")
        if selector.select(left):
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                continue
            buffered += chunk
            m = re.search(rb"on http://127\.0\.0\.1:(\d+)/", buffered)
            if m:
                selector.close()
                return proc, int(m[1]), time.monotonic() - t0


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout:
        proc.stdout.close()


def timed_start(db, log):
    """ (process, port, s to URL, s to the first 200 of /api/health), from process start. """
    t0 = time.monotonic()
    proc, port, to_url = start_until_url(db, log)
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/api/health")
            resp = conn.getresponse()
            resp.read()
            conn.close()
            if resp.status == 200:
                return proc, port, to_url, time.monotonic() - t0
        except OSError:
            pass
        if time.monotonic() - t0 > 60:
            stop(proc)
            raise RuntimeError("/api/health did not answer 200 within 60 s")
        time.sleep(0.002)


def measure_startup(db, log, times=5):
    """ Median seconds to URL and to health over `times` starts (each stopped again). """
    urls, healths = [], []
    for _ in range(times):
        proc, _, to_url, to_health = timed_start(db, log)
        stop(proc)
        urls.append(to_url)
        healths.append(to_health)
    return sorted(urls)[len(urls) // 2], sorted(healths)[len(healths) // 2], healths


def timed_get(conn, path):
    """ (status, body bytes, seconds) of one GET on a keep-alive connection, with the bearer
    (Taskboard needs it; the bare baseline ignores it, so both get the same bytes); a path
    given as (method, path, JSON body) is that request instead (POST /mcp). """
    method, path, body = path if isinstance(path, tuple) else ("GET", path, None)
    headers = auth_headers() | ({"Content-Type": "application/json"} if body else {})
    t0 = time.monotonic()
    conn.request(method, path, body=json.dumps(body) if body else None, headers=headers)
    quickack(conn)
    resp = conn.getresponse()
    body = resp.read()
    return resp.status, body, time.monotonic() - t0


# The run ###################################################################################

def main(argv=None):
    args = parse_args(argv)
    print(f"bench/scale.py: {args.projects} projects, {args.tasks:,} tasks, {args.logs:,} log "
          f"lines ({args.heavy} tasks with {args.heavy_lines:,}), {args.requests} requests "
          f"per endpoint, {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="taskboard-bench-scale-") as tmp:
        folder = args.cache_dir or tmp
        if args.cache_dir:
            os.makedirs(folder, exist_ok=True)
        else:
            print("no --cache-dir / TASKBOARD_BENCH_CACHE: the database is built in a temp "
                  "dir and removed at the end", flush=True)
        db, meta = find_or_build(args, folder)
        if args.build_only:
            print(f"database: {db}")
            return
        rows = run(args, tmp, db, meta)
    report(rows)


def probe(db, meta):
    """ Ids the measurements need, read from the database (read-only, server stopped). """
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    project = conn.execute("SELECT project_id, COUNT(*) FROM tasks GROUP BY project_id "
                           "ORDER BY 2 DESC, 1 LIMIT 1").fetchone()
    heavy = meta["heavy"][0] if meta.get("heavy") else conn.execute(
        "SELECT task_id FROM runs GROUP BY task_id ORDER BY COUNT(*) DESC LIMIT 1").fetchone()[0]
    heavy_lines = conn.execute("SELECT COUNT(*) FROM logs WHERE task_id = ?",
                               (heavy,)).fetchone()[0]
    middle = conn.execute("SELECT id FROM logs WHERE task_id = ? ORDER BY id LIMIT 1 OFFSET ?",
                          (heavy, heavy_lines // 2)).fetchone()
    activity = conn.execute("SELECT COUNT(*) FROM activity WHERE project_id = ?",
                            (project[0],)).fetchone()[0]
    some_task = conn.execute("SELECT id FROM tasks WHERE project_id = ? AND status = 'done' "
                             "ORDER BY id LIMIT 1 OFFSET 100", (project[0],)).fetchone()
    counts = {t: conn.execute(f"SELECT MAX(id) FROM {t}").fetchone()[0]
              for t in ("tasks", "runs", "activity", "logs")}
    conn.close()
    return {"project": project[0], "project_tasks": project[1], "heavy": heavy,
            "heavy_lines": heavy_lines, "middle_log": middle[0] if middle else None,
            "activity": activity, "task": some_task[0] if some_task else heavy,
            "counts": counts}


def run(args, tmp, db, meta):
    ids = probe(db, meta)
    print(f"database: {os.path.getsize(db) / 1e9:.2f} GB, rows {ids['counts']}; project "
          f"{ids['project']} has {ids['project_tasks']:,} tasks and {ids['activity']:,} "
          f"activity rows, task {ids['heavy']} has {ids['heavy_lines']:,} log lines",
          flush=True)
    log_path = os.path.join(tmp, "taskboard.log")
    empty = os.path.join(tmp, "empty.db")
    with open(log_path, "ab") as log:
        proc, _, _ = start_until_url(empty, log)  # creates and migrates it
        stop(proc)
        base_url, base_health, _ = measure_startup(empty, log)
        url_s, health_s, all_health = measure_startup(db, log)
        print(f"start-up: empty database {base_url:.3f} s to URL, {base_health:.3f} s to "
              f"health; scaled database {url_s:.3f} s to URL, {health_s:.3f} s to health "
              f"(each start: {', '.join(f'{h:.3f}' for h in all_health)} s)", flush=True)

        proc, port, _, _ = timed_start(db, log)
        try:
            reads, payload_bytes, peak_kb = measure_reads(args, tmp, port, proc.pid, ids)
        finally:
            stop(proc)
    audit = run_audit(db, ids)
    rows, extra = figures(args, ids, (base_url, base_health, url_s, health_s), reads, peak_kb,
                          audit, payload_bytes)
    return rows, {**extra, "db": db}


def endpoint_paths(port, ids):
    """ [(name, path, baseline route)]; the ?before= cursor only when the server has it. """
    p, heavy = ids["project"], ids["heavy"]
    deep = max(0, ids["activity"] - 50)
    paths = [
        ("task_list", f"/api/projects/{p}/tasks", "/bare/tasks"),
        ("task_get", f"/api/tasks/{ids['task']}", "/bare/health"),
        ("task_detail_heavy", f"/api/tasks/{heavy}/detail", "/bare/health"),
        ("logs_newest_500", f"/api/tasks/{heavy}/logs?limit=500", "/bare/health"),
        ("stats", f"/api/projects/{p}/stats", "/bare/health"),
        ("activity_first", f"/api/projects/{p}/activity?limit=50&offset=0", "/bare/health"),
        ("activity_deep", f"/api/projects/{p}/activity?limit=50&offset={deep}",
         "/bare/health"),
        ("agent_usage", "/api/stats/agent-usage", "/bare/health"),
        ("projects_summary", "/api/projects/summary", "/bare/health"),
        ("mcp_tools_list", ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1,
                                             "method": "tools/list"}), "/bare/health"),
        ("mcp_list_tasks", ("POST", "/mcp", {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "list_tasks", "arguments": {"project_id": p}}}), "/bare/health"),
    ]
    if ids["middle_log"]:
        cursor = f"/api/tasks/{heavy}/logs?limit=500&before={ids['middle_log']}"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        status, body, _ = timed_get(conn, cursor)
        conn.close()
        entries = json.loads(body) if status == 200 else []
        if entries and entries[-1]["id"] < ids["middle_log"]:
            paths.insert(4, ("logs_cursor_500", cursor, "/bare/health"))
        else:
            print("note: /api/tasks/:id/logs ignores ?before= (no cursor): not measured",
                  flush=True)
    return paths


def measure_reads(args, tmp, port, pid, ids):
    """ {name: {"latencies", "bytes", "baseline"}} over interleaved rounds. """
    import api  # its baseline server
    paths = endpoint_paths(port, ids)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    status, list_body, _ = timed_get(conn, paths[0][1])
    if status != 200:
        raise RuntimeError(f"GET {paths[0][1]} answered {status}")
    tasks = json.loads(list_body)
    separators = None
    for candidate in (None, (",", ":")):
        if json.dumps(tasks, separators=candidate).encode() == list_body:
            separators = candidate
    payload_path = os.path.join(tmp, "tasks.json")
    with open(payload_path, "wb") as f:
        f.write(list_body)
    baseline_path = os.path.join(tmp, "baseline_server.py")
    with open(baseline_path, "w") as f:
        f.write(api.BASELINE_SERVER)
    base_port = free_port()
    baseline = Server("baseline", [sys.executable, baseline_path, str(base_port), payload_path,
                                   json.dumps(separators), os.path.join(tmp, "baseline.db")],
                      os.path.join(tmp, "baseline.log"), "/bare/health", base_port)
    results = {name: {"latencies": [], "bytes": 0, "spent": 0.0} for name, _, _ in paths}
    base = {route: [] for route in ("/bare/tasks", "/bare/health")}
    rounds = 4
    per_round = max(1, args.requests // rounds)
    with baseline:
        bconn = http.client.HTTPConnection("127.0.0.1", base_port, timeout=60)
        for _name, path, _ in paths:  # warm-up: one request each
            timed_get(conn, path)
        for route in base:
            timed_get(bconn, route)
        for round_no in range(rounds):
            for name, path, route in paths:
                r = results[name]
                for _ in range(per_round):
                    if r["spent"] > args.budget * (round_no + 1) / rounds \
                            and len(r["latencies"]) >= 5:
                        break
                    status, body, seconds = timed_get(conn, path)
                    if status != 200:
                        raise RuntimeError(f"GET {path} answered {status}: {body[:200]!r}")
                    r["latencies"].append(seconds)
                    r["bytes"] = len(body)
                    r["spent"] += seconds
                for _ in range(per_round):
                    base[route].append(timed_get(bconn, route)[2])
            print(f"round {round_no + 1}/{rounds} done", flush=True)
        bconn.close()
    conn.close()
    peak = proc_memory_kb(pid)
    for name, path, route in paths:
        r = results[name]
        r["latencies"].sort()
        r["path"], r["route"] = path, route
    for route in base:
        base[route].sort()
    return {"endpoints": results, "baseline": base}, len(list_body), peak


def run_audit(db, ids):
    """ bench/_query_audit.py's findings (it imports taskboard, so its own process). """
    params = json.dumps({"project": ids["project"], "heavy": ids["heavy"],
                         "task": ids["task"], "deep": max(0, ids["activity"] - 50),
                         "middle_log": ids["middle_log"]})
    out = subprocess.run([sys.executable, AUDIT, db, params], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        print(f"query audit failed:\n{out.stderr[-3000:]}")
        return {}
    return json.loads(out.stdout.strip().splitlines()[-1])


# Reporting ###################################################################################

def figures(args, ids, startup, reads, peak_kb, audit, list_bytes):
    base_url, base_health, url_s, health_s = startup
    full_scale = args.tasks >= 50_000 and args.logs >= 5_000_000
    scale_note = "" if full_scale else f" (at {args.tasks:,} tasks, not 50,000)"
    print_audit(audit)
    rows = [
        result_row("startup_to_url", url_s, "s", base_url, base_url / url_s),
        result_row("startup_to_health", health_s, "s", base_health, base_health / health_s,
                   f"< {GOAL_STARTUP_S:g} s", health_s < GOAL_STARTUP_S),
    ]
    base = reads["baseline"]
    for name, r in reads["endpoints"].items():
        lats = r["latencies"]
        b = base[r["route"]]
        p50, p99 = percentile(lats, .5) * 1000, percentile(lats, .99) * 1000
        b50, b99 = percentile(b, .5) * 1000, percentile(b, .99) * 1000
        goal, met = "", None
        if name == "task_list":
            goal, met = f"< {GOAL_LIST_P99_MS:g} ms{scale_note}", p99 < GOAL_LIST_P99_MS
        elif name.startswith("mcp_"):  # issue 48: an outside MCP client's reads
            goal, met = f"< {GOAL_MCP_P99_MS:g} ms{scale_note}", p99 < GOAL_MCP_P99_MS
        rows.append(result_row(f"{name}_p50", p50, "ms", b50, b50 / p50))
        rows.append(result_row(f"{name}_p99", p99, "ms", b99, b99 / p99, goal, met))
        shown = r["path"] if isinstance(r["path"], str) else " ".join(r["path"][:2])
        print(f"{name:<18} {shown:<58} {len(lats):>4} requests, {r['bytes']:>10,} bytes, "
              f"p50 {p50:8.2f} ms, p99 {p99:8.2f} ms (baseline {r['route']} p99 {b99:.2f} ms)")
    rows.append(result_row("scale_server_peak_rss", peak_kb.get("VmHWM", 0) / 1024, "MB"))
    if audit:
        statements = [s for e in audit["endpoints"].values() for s in e["statements"]]
        log_scans = sum(any(re.search(r"\bSCAN (logs|task_events)\b", x)
                            for x in s["scans"]) for s in statements)
        other = sum(bool(s["scans"]) for s in statements) - log_scans
        # design §4: the task detail carries the complete log; every other read pages
        unpaged = {e for e, x in audit["endpoints"].items()
                   if any(s["unpaged"] for s in x["statements"])}
        rows.append(result_row("log_full_scans", log_scans, "", goal="== 0",
                               met=log_scans == 0))
        rows.append(result_row("log_reads_unpaged", len(unpaged), "",
                               goal="only task_detail_heavy",
                               met=unpaged <= {"task_detail_heavy"}))
        rows.append(result_row("other_full_scans", other, ""))
    return rows, {"scale": {k: getattr(args, k) for k in FULL}, "ids": ids,
                  "list_bytes": list_bytes, "audit": audit}


def print_audit(audit):
    if not audit:
        return
    print()
    print("Query plans (bench/_query_audit.py, read-only connection, server stopped):")
    for endpoint, e in audit["endpoints"].items():
        print(f"\n[{endpoint}] {e['call']}  {e['ms']:.1f} ms"
              + (f"  FAILED: {e['error']}" if e.get("error") else ""))
        for s in e["statements"]:
            print(f"  {s['ms']:8.2f} ms  {s['rows']:>6} rows  {s['sql'][:150]}")
            for line in s["plan"]:
                mark = "  <-- FULL SCAN" if line in s["scans"] else ""
                print(f"                {line}{mark}")
            if s["unpaged"]:
                print("                <-- NO LIMIT on a log read")
    flagged = [(endpoint, s) for endpoint, e in audit["endpoints"].items()
               for s in e["statements"] if s["scans"] or s["unpaged"]]
    print()
    print(f"Full scans of tasks/runs/activity/logs/task_events, and log reads without LIMIT: "
          f"{len(flagged)}")
    for endpoint, s in flagged:
        print(f"  [{endpoint}] {s['ms']:.2f} ms, {s['rows']} rows: {s['sql']}  "
              f"params {s['params']}")
        for line in s["scans"]:
            print(f"      {line.strip()}")
        if s["unpaged"]:
            print("      no LIMIT: returns every line of the task")


def report(result):
    rows, extra = result
    print()
    print(f"{'figure':<24} {'value':>12} {'baseline':>12} {'ratio':>8}  goal")
    def fmt(v, unit):
        if v is None:
            return "-"
        return f"{v:.3f} {unit}" if isinstance(v, float) else f"{v} {unit}"

    for r in rows:
        mark = "" if r["met"] is None else "ok" if r["met"] else "MISSED"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        print(f"{r['figure']:<24} {fmt(r['value'], r['unit']):>12} "
              f"{fmt(r['baseline'], r['unit']):>12} "
              f"{ratio:>8}  {r['goal']} {mark}")
    print()
    extra = {k: v for k, v in extra.items() if k != "audit"}
    extra["at"] = datetime.datetime.now().isoformat(timespec="seconds")
    emit_result("scale", rows, **extra)


if __name__ == "__main__":
    main()
