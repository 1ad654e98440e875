"""Web Push under load: an agent's tool request -> the phones' push service (issue 23).

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/push.py                      # bench/load.py's load for 30 s, idle baseline first
    python bench/push.py --quick              # 10 s of a lighter load (50 clients, no slow ones)
    python bench/push.py --at-rate 1000       # no ladder: the load at 5 x 1,000 lines/s
    python bench/push.py --devices 5 --interval 0.5 --no-idle
    python bench/push.py --clients 50 --rate 500 --no-slow   # any other option is bench/load.py's

The scenario (design.md §13): a person's phones are subscribed to Web Push for `approval`;
an agent asks for a tool; each phone gets a notification with Allow and Deny. Measured: from
the agent writing its `can_use_tool` control_request line to the push service receiving the
encrypted message, for every phone.

Everything of bench/approvals.py is reused: Taskboard runs with `bench/_asking_agent.py` as
its agent command (on a "[bench:ask]" task it asks for a Bash call every `--interval` s and
waits for each answer; any other task floods like bench/_flood_agent.py), and its "person"
(a /ws client) answers every `approval:requested` with allow at once, so the agent keeps
asking. Each request thus makes one "approval" message per phone, and its answer one
"answered" message, sent after it to the same phone; only the former are timed.

The push service is tests/push_service.py, run by bench/_push_receiver.py in a process of
its own: HTTPS on 127.0.0.1 with a CA of its own (the board trusts it through SSL_CERT_FILE
and REQUESTS_CA_BUNDLE, nothing else changes), decrypting every message (RFC 8291) and
checking its VAPID signature (RFC 8292), as a browser vendor's service would. `--devices`
(3) subscriptions are registered with POST /api/push/subscriptions, events ["approval"]; a
test push to each (POST /api/push/subscriptions/:id/test) checks the chain and loads
pywebpush before anything is timed.

Phases, as in bench/approvals.py, on one server:

  idle      (the baseline; unless --no-idle) one asking task in an otherwise idle server
  load      load.measure() of bench/load.py: its /ws log followers, flooding agents, API
            reads and slow clients, with its options (full: 200 clients, 5 agents at the
            judged rung, 50 req/s; --quick: 50 clients, no slow clients, for 10 s). A
            second asking task asks while the flood runs (from its start until 2 s before
            its end)

The rung (issue 34), as in bench/approvals.py: the goal is judged at the highest rung of
bench/load.py's `--ladder` (default 250,500,1000,2000 lines/s per agent; --quick 500,2000)
where the bare fan-out floor's p99 is < 50 ms (load.floor_ladder(), first; rows
floor_p99_at_<rate> and judged_rung). `--at-rate R` skips the ladder (bench/run.py passes
bench/load.py's rung); `--rate R` or `--no-ladder` alone: one rate, no floor.

Clocks: the agent takes time.monotonic() just before writing its request (with the
time.time() bench/approvals.py uses); the push service stamps each message with
time.monotonic() once its body has been read. On Linux that clock is system-wide.

Figures (p50/p99 over the phase's messages, nearest rank):
  request_to_push        push service received the message - the agent's request: the line
                         read and stored, the message queued, encrypted and POSTed over a
                         new TLS connection, per phone. Goal: p99 < 200 ms under the load;
                         baseline: the same on the idle server (ratio idle/loaded, higher is
                         better)
  push_messages          approval messages received (requests x devices when none is lost)
  push_missing           a (request, phone) without its message; goal 0
  push_duplicates        an approval or answered message a phone got more than once; goal 0
  push_failed            any message the service refused or could not decrypt or verify
                         (approval, answered or test); goal 0
  without a goal: request_to_all_devices (the last phone of a request), board_post (the
  board's own timing of its POST: encryption, connection, TLS, the service's answer; from
  its log, whole ms), request_to_ws (the /ws client's kernel received approval:requested,
  as in bench/approvals.py), answered_messages, and some of bench/load.py's figures to show
  the load was there

How to read the output: progress lines (bench/load.py's among them), a table (figure, value
under load, idle baseline, ratio, goal), one grep-friendly `figure <name> <value> (goal ...)`
line each and a `ratio <name> ...` line for each figure with a baseline, then
BENCH_RESULT {...} (the format bench/run.py reads). The agents, clients, push service and
server share the machine's CPUs: on a 2-core machine the p99 depends on what else runs;
compare within one run and give ranges.
"""

import argparse
import collections
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import approvals  # bench/approvals.py: its person, phases and agent are reused as they are
import load
from _common import (
    REPO_ROOT,
    Server,
    emit_result,
    fmt,
    free_port,
    percentile,
    print_table,
    result_row,
    taskboard_env,
)
from agents import FLOOD_AGENT, call, emitted

GOAL_MS = 200.0
RECEIVER = os.path.join(REPO_ROOT, "bench", "_push_receiver.py")
#: --quick's load, before the options given (a later option wins): fewer clients, no slow
#: ones (at a light rung they are not dropped, and their drain and reconnection only add
#: seconds); the rate is the ladder's rung (--quick: 500 or 2,000 lines/s per agent)
QUICK_LOAD = ["--quick", "--clients", "50", "--no-slow"]
#: The board's log line for each message it sent (deliver_push), with the POST's duration
POSTED = re.compile(r" push approval to device \d+ \(.*\): 201, (\d+) ms$")


def parse_args(argv=None):
    """ (our options, bench/load.py's options): every option we do not know is load.py's. """
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Other options (--clients, --agents, --ladder, --rate, --seconds, --no-slow, "
               "--taskboard, ...) are bench/load.py's.")
    parser.add_argument("--devices", type=int, default=3, help="phones subscribed")
    parser.add_argument("--interval", type=float, default=0.2,
                        help="seconds between an answer and the agent's next request")
    parser.add_argument("--no-idle", action="store_true", help="no idle baseline")
    parser.add_argument("--quick", action="store_true",
                        help="10 s of a lighter load: " + " ".join(QUICK_LOAD[1:]))
    parser.add_argument("--at-rate", type=float,
                        help="no ladder: the load at this many lines/s per agent")
    args, rest = parser.parse_known_args(argv)
    if args.devices < 1:
        parser.error("--devices must be at least 1")
    largs = load.parse_args((QUICK_LOAD if args.quick else []) + rest)
    if largs.db:
        parser.error("--db is not supported here (bench/load.py's run() copies it; "
                     "measure() alone does not)")
    args.ask_seconds = max(1.0, largs.seconds - 2.0)  # no request after the load
    return args, largs


def main(argv=None):
    args, largs = parse_args(argv)
    print(f"bench/push.py: {args.devices} phones; an agent asks every {args.interval:g} s for "
          f"{args.ask_seconds:g} s{'' if args.no_idle else ', idle first, then'} under "
          f"bench/load.py's load: {largs.clients} /ws clients in {largs.workers} processes, "
          f"{largs.agents} agents x {approvals.rates(args, largs)} lines/s for "
          f"{largs.seconds:g} s, API at {largs.api_rate:g} req/s, {largs.slow_clients} slow "
          f"clients; {os.cpu_count()} CPUs", flush=True)
    ctx = multiprocessing.get_context("fork")
    # load.measure() sends its API traffic from this pool (a process forked before any thread)
    pool = ctx.Pool(1, initializer=signal.signal, initargs=(signal.SIGINT, signal.SIG_IGN))
    with tempfile.TemporaryDirectory(prefix="taskboard-bench-push-") as tmp:
        try:
            rows, extra = run(args, largs, tmp, ctx, pool)
        except KeyboardInterrupt:
            sys.exit("interrupted")
        finally:
            pool.terminate()
            pool.join()
    report(rows, extra)


# The push service ###########################################################################

class Receiver:
    """ bench/_push_receiver.py: the push service and its phones, in a process of its own. """

    def __init__(self, devices, out):
        self.out = out
        self.proc = subprocess.Popen([sys.executable, RECEIVER, "--devices", str(devices),
                                      "--out", out], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            raise RuntimeError(f"the push service exited with {self.proc.returncode}")
        info = json.loads(line)
        self.url, self.env, self.devices = info["url"], info["env"], info["devices"]
        self.summary = None

    def deliveries(self):
        """ Every message received so far (one JSON line each). """
        try:
            with open(self.out) as f:
                return [json.loads(line) for line in f if line.endswith("\n")]
        except FileNotFoundError:
            return []

    def stop(self):
        """ Its stdin ends: it writes what is left, prints its summary and exits. """
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                line = self.proc.stdout.readline()
                self.summary = json.loads(line) if line else None
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.summary


# The run ####################################################################################

def run(args, largs, tmp, ctx, pool):
    # the rung: bench/load.py's floor ladder, unless given (before anything else runs)
    rate, floor, ladder = load.judged_rate(largs, ctx, tmp, args.at_rate)
    largs = load.at_rate(largs, rate)
    dirs = {name: os.path.join(tmp, name) for name in ("flood", "ask", "work", "ask_work")}
    for path in dirs.values():
        os.makedirs(path)
    db = os.path.join(tmp, "data", "taskboard.db")
    # the server passes its environment on to its agents: as in bench/approvals.py
    os.environ.update(FLOOD_RATE=str(largs.rate), FLOOD_SECONDS=str(largs.seconds),
                      FLOOD_PAD=str(largs.pad), FLOOD_DIR=dirs["flood"],
                      FLOOD_LINES_PER_MESSAGE="1", **load.agent_env(largs),
                      ASK_DIR=dirs["ask"], ASK_INTERVAL=str(args.interval),
                      ASK_SECONDS=str(args.ask_seconds),
                      ASK_COUNT=str(int(args.ask_seconds / args.interval) + 1),
                      ASK_MARKER=approvals.MARKER, ASK_ELSE=f"{sys.executable} {FLOOD_AGENT}")
    receiver = Receiver(args.devices, os.path.join(tmp, "pushes.jsonl"))
    try:
        port = free_port()
        server = Server("taskboard", [sys.executable, largs.taskboard, "--port", str(port),
                                      "--db", db, "--agent-command",
                                      f"{sys.executable} {approvals.ASKING_AGENT}"],
                        os.path.join(tmp, "taskboard.log"), "/api/health", port,
                        env={**taskboard_env(), **receiver.env})
        with server:
            try:
                subscribe(port, receiver)
                phases = approvals.run_phases(args, largs, ctx, pool, port, dirs,
                                              server.proc.pid)
                decided = {a["id"]: a for a in call(port, "GET", "/api/approvals")}
                drained = wait_drained(receiver, decided, phases["tasks"], args.devices)
            except Exception:
                print(f"server log tail:\n{server.log_tail()}")
                raise
            if phases["final"] != "testing" or phases["idle_final"] not in (None, "testing"):
                print(f"server log tail:\n{server.log_tail()}")
        with open(server.log_path, errors="replace") as f:
            posts = [float(m[1]) for m in map(POSTED.search, f) if m]
        summary = receiver.stop()
    finally:
        receiver.stop()
    print(f"push service: {summary['deliveries']} messages over {summary['connections']} TLS "
          f"connections, {len(summary['tlsFailures'])} TLS handshakes failed, "
          f"{summary['cpu']:.1f} s CPU" if summary else "push service: no summary",
          flush=True)
    # bench/load.py's own checks and figures (the server is stopped: the database is final)
    load_rows, _ = load.figures(largs, phases["measured"], db, emitted(dirs["flood"]), floor,
                                top=rate == largs.ladder[-1])
    rows, extra = figures(args, largs, phases, approvals.read_timings(dirs["ask"]), decided,
                          receiver.deliveries(), summary, drained, posts, load_rows)
    return ladder + rows, {**extra, "rung": rate}


def subscribe(port, receiver):
    """ Register the phones, and send each a test message: the chain works (TLS trust, VAPID,
    encryption) and pywebpush is loaded before anything is timed. """
    for device in receiver.devices:
        added = call(port, "POST", "/api/push/subscriptions",
                     {**device, "events": ["approval"]})
        answer = call(port, "POST", f"/api/push/subscriptions/{added['id']}/test")
        if answer.get("status") != 201:
            raise RuntimeError(f"the test push to {device['name']} answered {answer}")
    print(f"{len(receiver.devices)} phones subscribed at {receiver.url}; a test message "
          "reached each", flush=True)


def wait_drained(receiver, decided, tasks, devices, quiet=10.0):
    """ Wait until every phone has both messages of every request of the asking tasks (or
    nothing arrives for `quiet` s); seconds waited. """
    asks = {str(t) for t in tasks.values()}
    expected = 2 * devices * sum(str(a["taskId"]) in asks for a in decided.values())
    t0 = last_change = time.monotonic()
    count = -1
    while time.monotonic() - last_change < quiet:
        now = len([d for d in receiver.deliveries() if d["kind"] in ("approval", "answered")])
        if now >= expected:
            break
        if now != count:
            count, last_change = now, time.monotonic()
        time.sleep(0.25)
    waited = time.monotonic() - t0
    print(f"push: {now} of {expected} approval and answered messages received "
          f"{waited:.1f} s after the load", flush=True)
    return waited


# Figures ####################################################################################

def phase_figures(task, timings, by_request, messages, seen, devices):
    """ One phase's latency lists (ms, sorted) and counts. `by_request`: request id ->
    approval id; `messages`: approval id -> its "approval" deliveries; `seen`: request id ->
    the person's record. """
    mine = [r for r in timings.values() if r["task"] == str(task)]
    lists = collections.defaultdict(list)
    n = received = missing = duplicates = 0
    for r in mine:
        n += 1
        got = messages.get(by_request.get(r["request_id"]), [])
        firsts = {}
        for d in got:
            if d["status"] == 201 and d["device"] not in firsts:
                firsts[d["device"]] = d
        duplicates += len(got) - len(firsts)
        received += len(firsts)
        missing += devices - len(firsts)
        latencies = [(d["received"] - r["asked_mono"]) * 1000 for d in firsts.values()]
        lists["request_to_push"] += latencies
        if len(firsts) == devices:
            lists["request_to_all_devices"].append(max(latencies))
        s = seen.get(r["request_id"])
        if s is not None:
            lists["request_to_ws"].append((s["arrived"] - r["asked"]) * 1000)
    return {"n": n, "received": received, "missing": missing, "duplicates": duplicates,
            "asked": sorted(r["asked"] for r in mine),
            **{k: sorted(v) for k, v in lists.items()}}


def figures(args, largs, phases, timings, decided, deliveries, summary, drained, posts,
            load_rows):
    watched = phases["watched"]
    seen = {s["request_id"]: s for s in watched["approvals"]}
    by_request = {a["requestId"]: a["id"] for a in decided.values()}
    messages = collections.defaultdict(list)
    answered, answers = collections.Counter(), collections.Counter()
    for d in deliveries:
        if d["kind"] == "approval":
            messages[d["approvalId"]].append(d)
        elif d["kind"] == "answered":
            answered[str(decided.get(d["approvalId"], {}).get("taskId"))] += 1
            answers[d["approvalId"], d["device"]] += 1
    failed = [d for d in deliveries if d["status"] != 201 or not d["vapidOk"]
              or not d["decrypted"] or d["problems"]]
    for d in failed[:5]:
        print(f"push: failed delivery {d}")
    tasks = phases["tasks"]
    loaded = phase_figures(tasks["load"], timings, by_request, messages, seen, args.devices)
    idle = None if args.no_idle else phase_figures(tasks["idle"], timings, by_request,
                                                   messages, seen, args.devices)
    # the board's POSTs of approval messages, in its log's order: the idle phase's first
    if idle is not None:
        idle["board_post"] = sorted(posts[:idle["received"]])
        posts = posts[idle["received"]:]
    loaded["board_post"] = sorted(posts)
    if watched["errors"]:
        print(f"person: errors {watched['errors'][:5]}")
    started = watched["started_at"]
    if started and loaded["asked"]:
        first, last = loaded["asked"][0] - started, loaded["asked"][-1] - started
        print(f"load: {loaded['n']} requests from {first:.1f} s to {last:.1f} s after the first "
              f"flooding task started (the flood lasts {largs.seconds:g} s)"
              + ("" if last < largs.seconds else "  WARNING: some were made after the flood"))
    for label, p in (("idle", idle), ("load", loaded)):
        if p is not None:
            print(f"{label}: {p['n']} requests, {p['received']} approval messages "
                  f"({args.devices} phones), {p['missing']} missing, {p['duplicates']} "
                  f"duplicated, {answered[str(tasks[label])]} answered messages")

    def q(p, name, quantile):
        return percentile(p[name], quantile) if p and p.get(name) else None

    rows = []
    for name, goal in (("request_to_push", True), ("request_to_all_devices", False),
                       ("board_post", False), ("request_to_ws", False)):
        for quantile in (0.50, 0.99):
            ours, base = q(loaded, name, quantile), q(idle, name, quantile)
            judged = goal and quantile == 0.99
            rows.append(result_row(
                f"{name}_p{quantile * 100:.0f}", ours, "ms", base,
                base / ours if base and ours else None,
                f"< {GOAL_MS:g} ms" if judged else "",
                (ours is not None and ours < GOAL_MS) if judged else None))
    missing = loaded["missing"] + (idle["missing"] if idle else 0)
    duplicates = loaded["duplicates"] + (idle["duplicates"] if idle else 0) + \
        sum(n - 1 for n in answers.values())
    rows += [
        result_row("requests_under_load", loaded["n"], "", idle["n"] if idle else None,
                   goal=">= 1", met=loaded["n"] > 0),
        result_row("push_messages", loaded["received"], "", idle["received"] if idle else None,
                   goal=">= 1", met=loaded["received"] > 0),
        result_row("push_missing", missing, "", goal="== 0", met=missing == 0),
        result_row("push_duplicates", duplicates, "", goal="== 0", met=duplicates == 0),
        result_row("push_failed", len(failed), "", goal="== 0", met=not failed),
        result_row("answered_messages", answered[str(tasks["load"])], "",
                   answered[str(tasks["idle"])] if idle else None),
    ]
    for r in load_rows:  # the load's own figures, as context (their goals are load.py's)
        if r["figure"] in approvals.LOAD_ROWS:
            keep_goal = r["figure"] in ("ws_clients_connected", "agents_sustained")
            rows.append({**r, "figure": f"load_{r['figure']}",
                         "goal": r["goal"] if keep_goal else "",
                         "met": r["met"] if keep_goal else None})
    extra = {"devices": args.devices, "interval": args.interval,
             "ask_seconds": args.ask_seconds, "seconds": largs.seconds,
             "clients": largs.clients, "agents": largs.agents, "rate": largs.rate,
             "api_rate": largs.api_rate, "slow": largs.slow_clients, "cpus": os.cpu_count(),
             "drained_after": round(drained, 1),
             "service": summary and {k: summary[k] for k in ("connections", "cpu")}}
    return rows, extra


def report(rows, extra):
    print_table(rows, value="under load", baseline="idle")
    print(f"load: {extra['clients']} /ws clients, {extra['agents']} agents x {extra['rate']:g}"
          f" lines/s for {extra['seconds']:g} s, API {extra['api_rate']:g} req/s, "
          f"{extra['slow']} slow clients; {extra['devices']} phones, a request "
          f"every {extra['interval']:g} s; {extra['cpus']} CPUs")
    for r in rows:
        print(f"figure {r['figure']} {fmt(r['value'], r['unit'])}"
              + (f" (goal {r['goal']})" if r["goal"] else ""))
    for r in rows:
        if r["ratio"] is not None:
            print(f"ratio {r['figure']} {r['ratio']:.2f} (idle {fmt(r['baseline'], r['unit'])}"
                  f" / under load {fmt(r['value'], r['unit'])})")
    emit_result("push", rows, **extra)


if __name__ == "__main__":
    main()
