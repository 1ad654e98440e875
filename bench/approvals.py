"""Tool approvals under load: agent's request -> /ws client, person's click -> agent's stdin.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/approvals.py                 # bench/load.py's load for 30 s, idle baseline first
    python bench/approvals.py --quick         # the same with 10 s of load, the ladder 500,2000
    python bench/approvals.py --at-rate 1000  # no ladder: the load at 5 x 1,000 lines/s
    python bench/approvals.py --interval 0.2 --no-idle
    python bench/approvals.py --clients 50 --no-slow    # any other option goes to bench/load.py

The scenario (the approvals issue): an agent run in `default` permission mode asks for a tool
(Claude Code's two-way stream-json protocol, design.md §12). Taskboard runs with
`--agent-command "<python> bench/_asking_agent.py"`: on a task whose description holds
"[bench:ask]" that fake CLI prints a `control_request` `can_use_tool` (Bash) every
`--interval` s and waits for its answer; on any other task it hands over to
bench/_flood_agent.py, so the same server also runs bench/load.py's flooding agents (the
board has one agent command for every task). Both phases use one server and one database:

  idle      (the baseline; unless --no-idle) one asking task in an otherwise idle server,
            for as long as the loaded phase asks
  load      bench/load.py's load, run by load.measure() itself: its /ws log followers
            (200 by default, in 4 processes), its 5 flooding agents at the judged rung, its
            50 API reads a second, its slow clients. A second asking task starts as soon as
            the first flooding task is in progress, and stops asking 2 s before the flood
            ends, so every request is made under the load

The rung (issue 34): as bench/load.py, the latency goals are judged at the highest rung of
bench/load.py's `--ladder` (default 250,500,1000,2000 lines/s per agent; --quick 500,2000)
where the bare fan-out floor's own p99 is < 50 ms: load.floor_ladder() runs the floor at each
rung first (rows floor_p99_at_<rate>), then both phases run at that rung (row judged_rung).
`--at-rate R` skips the ladder and measures at R lines/s (bench/run.py passes the rung
bench/load.py judged at, so that the whole run judges at one rung); `--rate R` or
`--no-ladder` alone: one rate, no floor, as before the ladder.

Two processes measure, on the same machine clock (time.time()) as the agent:
  _asking_agent.py   `asked`: just before it writes a request line; `answered`: right after it
                     read the board's `control_response` for it (one JSON line per request in
                     ASK_DIR)
  the person         one /ws connection (no ?logs=, like a board page) and one keep-alive
                     HTTP connection. For every `approval:requested` it takes the moment the
                     kernel received the frame (SO_TIMESTAMPNS, as bench/load.py's fan-out),
                     then at once POSTs /api/approvals/:id {"decision": "allow"}: `click` is
                     the time.time() just before the request is sent

Figures (p50/p99 over every request of the phase, nearest rank):
  request_to_ws     /ws arrival - asked: the agent's line read, stored, published, sent
  click_to_stdin    answered - click: the POST handled and the answer written to the agent's
                    stdin, and the agent scheduled to read it
  goals: both p99 < 50 ms under the load. Baseline: the same figures on the idle server
  (ratio idle/loaded, higher is better, as in every bench here). Without a goal:
  request_to_ws_client (when the person's process read the frame), click_to_http (the
  POST's round trip), request_to_answer (the whole loop, the person included), and a few of
  bench/load.py's own figures, to show the load was there (clients connected, agents kept
  their rate, fan-out p99, API p99)

How to read the output: progress lines (bench/load.py's among them), a table (figure, value,
baseline, ratio, goal), one grep-friendly `figure <name> <value> (goal ...)` line each and a
`ratio <name> ...` line for each figure with a baseline, then BENCH_RESULT {...} (the format
bench/run.py reads). The agents, clients and server share the machine's CPUs: on a 2-core
machine the p99 depends on what else runs; compare within one run and give ranges.
"""

import argparse
import collections
import glob
import http.client
import json
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import time

import load  # bench/load.py: its load generator is reused as is (load.measure)
from _common import (
    REPO_ROOT,
    Server,
    emit_result,
    fmt,
    free_port,
    percentile,
    print_table,
    request,
    result_row,
    sandbox_fields,
    taskboard_env,
)
from agents import FLOOD_AGENT, call, emitted

GOAL_MS = 50.0
ASKING_AGENT = os.path.join(REPO_ROOT, "bench", "_asking_agent.py")
MARKER = "[bench:ask]"  # a task whose prompt holds it asks; the others flood
#: bench/load.py's figures repeated here, to show the load was really there
LOAD_ROWS = ("ws_clients_connected", "agents_sustained", "fanout_p99", "api_p99_load",
             "server_cpu_busy", "machine_cpu_busy")


def parse_args(argv=None):
    """ (our options, bench/load.py's options): every option we do not know is load.py's. """
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Other options (--clients, --agents, --ladder, --rate, --seconds, --no-slow, "
               "--taskboard, ...) are bench/load.py's.")
    parser.add_argument("--interval", type=float, default=0.05,
                        help="seconds between an answer and the agent's next request")
    parser.add_argument("--no-idle", action="store_true", help="no idle baseline")
    parser.add_argument("--quick", action="store_true", help="10 s of load")
    parser.add_argument("--at-rate", type=float,
                        help="no ladder: the load at this many lines/s per agent")
    args, rest = parser.parse_known_args(argv)
    largs = load.parse_args(rest + (["--quick"] if args.quick else []))
    if largs.db:
        parser.error("--db is not supported here (bench/load.py's run() copies it; "
                     "measure() alone does not)")
    # the asking stops 2 s before the flood does, so that no request is made after the load
    args.ask_seconds = max(1.0, largs.seconds - 2.0)
    return args, largs


# The person: a /ws client that answers every approval ##################################

def person(port, own_project, start_task, ready, stop, results):
    """ Its own process: follow /ws; answer each `approval:requested` with allow over a
    keep-alive connection, timing both. When the first task of another project (the load's
    flood) goes in progress, start `start_task` (the loaded phase's asking task). """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock, buf = load.ws_connect(port, "/ws")
    sock.setsockopt(socket.SOL_SOCKET, load.SO_TIMESTAMPNS, 1)  # the kernel's arrival time
    sock.settimeout(0.1)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    request(conn, "GET", "/api/health")  # connected before the first click
    ready.set()
    seen, started_at, events, errors = [], None, collections.Counter(), []

    def send(method, path, body):
        try:
            return request(conn, method, path, body)[0]
        except (OSError, http.client.HTTPException) as exc:
            conn.close()  # reconnects on the next request
            errors.append(repr(exc))
            return None

    while not stop.is_set():
        try:
            data, ancillary, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(16))
        except TimeoutError:
            continue
        read_at = time.time()
        arrived = load.kernel_time(ancillary) or read_at
        if not data:
            errors.append("the server closed /ws")
            break
        buf += data
        for opcode, payload in load.frames(buf):
            head = load.FRAME_HEAD.match(payload) if opcode == 1 else None
            if head is None:  # pings, close
                continue
            event = head[2].decode()
            events[event] += 1
            if event == "approval:requested":
                approval = json.loads(payload)["data"]
                click = time.time()  # just before the request goes out
                status = send("POST", f"/api/approvals/{approval['id']}", {"decision": "allow"})
                seen.append({"request_id": approval["requestId"], "task": approval["taskId"],
                             "arrived": arrived, "read": read_at, "click": click,
                             "http_done": time.time(), "status": status})
            elif event == "task:updated" and started_at is None and start_task:
                task = json.loads(payload)["data"]  # a task's fields are snake_case
                if task.get("status") == "in_progress" and task.get("project_id") != own_project:
                    started_at = time.time()
                    status = send("PATCH", f"/api/tasks/{start_task}/status",
                                  {"status": "in_progress"})
                    if status != 200:
                        errors.append(f"starting task {start_task} answered {status}")
    sock.close()
    conn.close()
    results.put({"approvals": seen, "started_at": started_at, "events": dict(events),
                 "errors": errors, "cpu": time.process_time()})


# The run ####################################################################################

def main(argv=None):
    args, largs = parse_args(argv)
    print(f"bench/approvals.py: an agent asks every {args.interval:g} s for {args.ask_seconds:g}"
          f" s{'' if args.no_idle else ', idle first, then'} under bench/load.py's load: "
          f"{largs.clients} /ws clients in {largs.workers} processes, {largs.agents} agents x "
          f"{rates(args, largs)} lines/s for {largs.seconds:g} s, API at "
          f"{largs.api_rate:g} req/s, {largs.slow_clients} slow clients; {os.cpu_count()} CPUs",
          flush=True)
    ctx = multiprocessing.get_context("fork")
    # load.measure() sends its API traffic from this pool (a process forked before any thread)
    pool = ctx.Pool(1, initializer=signal.signal, initargs=(signal.SIGINT, signal.SIG_IGN))
    with tempfile.TemporaryDirectory(prefix="taskboard-bench-approvals-") as tmp:
        try:
            rows, extra = run(args, largs, tmp, ctx, pool)
        except KeyboardInterrupt:
            sys.exit("interrupted")
        finally:
            pool.terminate()
            pool.join()
    report(rows, extra)


def rates(args, largs):
    """ The rate(s) of the load, for the first line: the one given, or the ladder's rungs. """
    if args.at_rate is not None:
        return f"{args.at_rate:g}"
    return " / ".join(f"{r:g}" for r in largs.ladder) + (
        " (the rung the floor allows)" if len(largs.ladder) > 1 and not largs.no_floor else "")


def run(args, largs, tmp, ctx, pool):
    # the rung: bench/load.py's floor ladder, unless given (before anything else runs)
    rate, floor, ladder = load.judged_rate(largs, ctx, tmp, args.at_rate)
    largs = load.at_rate(largs, rate)
    dirs = {name: os.path.join(tmp, name) for name in ("flood", "ask", "work", "ask_work")}
    for path in dirs.values():
        os.makedirs(path)
    db = os.path.join(tmp, "data", "taskboard.db")
    # the server passes its environment on to its agents: FLOOD_* as bench/load.py sets them
    os.environ.update(FLOOD_RATE=str(largs.rate), FLOOD_SECONDS=str(largs.seconds),
                      FLOOD_PAD=str(largs.pad), FLOOD_DIR=dirs["flood"],
                      FLOOD_LINES_PER_MESSAGE="1", **load.agent_env(largs),
                      ASK_DIR=dirs["ask"], ASK_INTERVAL=str(args.interval),
                      ASK_SECONDS=str(args.ask_seconds),
                      ASK_COUNT=str(int(args.ask_seconds / args.interval) + 1),
                      ASK_MARKER=MARKER, ASK_ELSE=f"{sys.executable} {FLOOD_AGENT}")
    port = free_port()
    server = Server("taskboard", [sys.executable, largs.taskboard, "--port", str(port),
                                  "--db", db, "--agent-command",
                                  f"{sys.executable} {ASKING_AGENT}"],
                    os.path.join(tmp, "taskboard.log"), "/api/health", port,
                    env=taskboard_env())
    with server:
        try:
            phases = run_phases(args, largs, ctx, pool, port, dirs, server.proc.pid)
        except Exception:
            print(f"server log tail:\n{server.log_tail()}")
            raise
        if phases["final"] != "testing" or phases["idle_final"] not in (None, "testing"):
            print(f"server log tail:\n{server.log_tail()}")
    # bench/load.py's own checks and figures (the server is stopped: the database is final)
    load_rows, _ = load.figures(largs, phases["measured"], db, emitted(dirs["flood"]), floor,
                                top=rate == largs.ladder[-1])
    rows, extra = figures(args, largs, phases, read_timings(dirs["ask"]), load_rows)
    return ladder + rows, {**extra, "rung": rate}


def run_phases(args, largs, ctx, pool, port, dirs, pid):
    project = call(port, "POST", "/api/projects", {
        "name": "Approvals", "slug": "bench-approvals", "workingDir": dirs["ask_work"],
        "permissionMode": "default", **sandbox_fields(largs.sandbox)})["id"]
    tasks = {phase: call(port, "POST", f"/api/projects/{project}/tasks", {
        "title": f"ask ({phase})", "description": f"{MARKER} Ask for tool approvals."})["id"]
        for phase in ("idle", "load")}
    ready, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
    watcher = ctx.Process(target=person, daemon=True,
                          args=(port, project, tasks["load"], ready, stop, results))
    watcher.start()
    if not ready.wait(30):
        raise RuntimeError("the person's /ws client did not connect within 30 s")
    idle_final = None
    if not args.no_idle:
        print(f"idle: task {tasks['idle']} asks for {args.ask_seconds:g} s", flush=True)
        t0 = time.monotonic()
        call(port, "PATCH", f"/api/tasks/{tasks['idle']}/status", {"status": "in_progress"})
        idle_final = wait_task(port, tasks["idle"], time.monotonic() + args.ask_seconds + 60)
        print(f"idle: task {tasks['idle']} is {idle_final} after {time.monotonic() - t0:.1f} s",
              flush=True)
    print(f"load: bench/load.py's measure(); task {tasks['load']} asks once the flood "
          "starts", flush=True)
    measured = load.measure(largs, ctx, pool, port, dirs["work"], pid, None)
    final = wait_task(port, tasks["load"], time.monotonic() + 60)
    print(f"load: task {tasks['load']} is {final}", flush=True)
    stop.set()
    watched = results.get(timeout=60)
    watcher.join(10)
    return {"tasks": tasks, "idle_final": idle_final, "final": final, "measured": measured,
            "watched": watched}


def wait_task(port, task, deadline):
    """ Poll (twice a second: light) until the task leaves backlog and in_progress. """
    status = None
    while time.monotonic() < deadline:
        status = call(port, "GET", f"/api/tasks/{task}")["status"]
        if status not in ("backlog", "in_progress"):
            break
        time.sleep(0.5)
    return status


def read_timings(ask_dir):
    """ {request_id: the asking agent's record} from every run's timings file. """
    out = {}
    for path in glob.glob(os.path.join(ask_dir, "*.jsonl")):
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                out[record["request_id"]] = record
    return out


def phase_figures(task, timings, seen):
    """ Latency lists (ms, sorted) of one phase's requests, and what went missing. """
    mine = [r for r in timings.values() if r["task"] == str(task)]
    lists = collections.defaultdict(list)
    missing = not_allowed = 0
    for r in mine:
        s = seen.get(r["request_id"])
        if s is None or s["status"] != 200:  # asked, but never seen or never answered
            missing += 1
            continue
        not_allowed += r["behavior"] != "allow"
        for name, value in (("request_to_ws", s["arrived"] - r["asked"]),
                            ("request_to_ws_client", s["read"] - r["asked"]),
                            ("click_to_stdin", r["answered"] - s["click"]),
                            ("click_to_http", s["http_done"] - s["click"]),
                            ("request_to_answer", r["answered"] - r["asked"])):
            lists[name].append(value * 1000)
    return {"n": len(mine), "missing": missing, "not_allowed": not_allowed,
            "asked": sorted(r["asked"] for r in mine),
            **{k: sorted(v) for k, v in lists.items()}}


def figures(args, largs, phases, timings, load_rows):
    watched = phases["watched"]
    seen = {s["request_id"]: s for s in watched["approvals"]}
    loaded = phase_figures(phases["tasks"]["load"], timings, seen)
    idle = None if args.no_idle else phase_figures(phases["tasks"]["idle"], timings, seen)
    if watched["errors"]:
        print(f"person: errors {watched['errors'][:5]}")
    print(f"person: /ws events {watched['events']}, {watched['cpu']:.1f} s CPU")
    started = watched["started_at"]
    if started and loaded["asked"]:
        first, last = loaded["asked"][0] - started, loaded["asked"][-1] - started
        print(f"load: {loaded['n']} requests from {first:.1f} s to {last:.1f} s after the first "
              f"flooding task started (the flood lasts {largs.seconds:g} s)"
              + ("" if last < largs.seconds else "  WARNING: some were made after the flood"))
    for label, p in (("idle", idle), ("load", loaded)):
        if p is not None:
            print(f"{label}: {p['n']} requests, {p['missing']} not seen on /ws or not "
                  f"answered, {p['not_allowed']} answered other than allow")

    def q(p, name, quantile):
        return percentile(p[name], quantile) if p and p.get(name) else None

    rows = []
    for name, goal in (("request_to_ws", True), ("click_to_stdin", True),
                       ("request_to_ws_client", False), ("click_to_http", False),
                       ("request_to_answer", False)):
        for quantile in (0.50, 0.99):
            ours, base = q(loaded, name, quantile), q(idle, name, quantile)
            figure = f"{name}_p{quantile * 100:.0f}"
            judged = goal and quantile == 0.99
            rows.append(result_row(
                figure, ours, "ms", base, base / ours if base and ours else None,
                f"< {GOAL_MS:g} ms" if judged else "",
                (ours is not None and ours < GOAL_MS) if judged else None))
    lost = loaded["missing"] + (idle["missing"] if idle else 0)
    rows += [
        result_row("requests_under_load", loaded["n"], "", idle["n"] if idle else None,
                   goal=">= 1", met=loaded["n"] > 0),
        result_row("requests_unanswered", lost, "", goal="== 0", met=lost == 0),
    ]
    for r in load_rows:  # the load's own figures, as context (their goals are load.py's)
        if r["figure"] in LOAD_ROWS:
            keep_goal = r["figure"] in ("ws_clients_connected", "agents_sustained")
            rows.append({**r, "figure": f"load_{r['figure']}",
                         "goal": r["goal"] if keep_goal else "",
                         "met": r["met"] if keep_goal else None})
    extra = {"interval": args.interval, "ask_seconds": args.ask_seconds,
             "seconds": largs.seconds, "clients": largs.clients, "agents": largs.agents,
             "rate": largs.rate, "cpus": os.cpu_count()}
    return rows, extra


def report(rows, extra):
    print_table(rows, value="under load", baseline="idle")
    for r in rows:
        print(f"figure {r['figure']} {fmt(r['value'], r['unit'])}"
              + (f" (goal {r['goal']})" if r["goal"] else ""))
    for r in rows:
        if r["ratio"] is not None:
            print(f"ratio {r['figure']} {r['ratio']:.2f} (idle {fmt(r['baseline'], r['unit'])}"
                  f" / under load {fmt(r['value'], r['unit'])})")
    emit_result("approvals", rows, **extra)


if __name__ == "__main__":
    main()
