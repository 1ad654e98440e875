"""Taskboard under load: 200 /ws log followers while 5 agents flood and the API is busy.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/load.py                       # 200 clients, 5 agents x 250..2,000 lines/s, 30 s
    python bench/load.py --quick               # the ladder 500,2000, 10 s a run
    python bench/load.py --ladder 250,2000     # other rungs (lines/s per agent)
    python bench/load.py --no-ladder           # one run at --rate (2,000), as before the ladder
    python bench/load.py --db <file>           # on a copy of that database (e.g. scale.py's)
    python bench/load.py --clients 50 --seconds 20 --no-slow
    python bench/load.py --mixed               # the agents: claude, codex, gemini, opencode, claude

The scenario (issue 9): Taskboard runs with `--agent-command "<python> bench/_flood_agent.py"`
(bench/agents.py's fake CLI: a rate of stream-json text lines a second for `--seconds` s,
each text "<n> <time.time()> <tag> <padding>"); the bench creates a project with `--agents`
tasks (maxConcurrent = that) and moves them all to in_progress. Meanwhile:

  /ws clients      `--clients` connections `/ws?logs=<task id>`, spread evenly over the
                   running tasks, served by `--workers` client processes (a small selector
                   loop each: frames are parsed by hand, entry ids and agent times are read
                   with a regex checked against json.loads on every 50th message). Every
                   client checks that its task:log entries arrive with strictly increasing
                   ids (see entry_ids()); after the run its (first id, last id, count) must
                   equal the task's rows in the database from the moment it connected: no
                   loss, no reorder, no duplicate. Timed at every 8th client (1 in 8 keeps
                   the clients' own CPU down; they are spread over the tasks and over the
                   server's subscriber order), p50/p99 from histograms (0.1 ms bins, 10 ms
                   above 10 s), arrival time.time() minus:
                     fan-out     the newest createdAt in each task:log message, i.e. the
                                 moment its batch was cut (a flooding agent's last line came
                                 a fraction of a ms before): the server's write, publish and
                                 delivery to 200 clients. This is the goal's figure: design
                                 §7 batches a task's lines for up to 100 ms on purpose, so
                                 anything counted from the agent is >= that by design.
                                 Arrival is when the client's kernel received the message's
                                 last bytes (SO_TIMESTAMPNS): on a 2-core machine the client
                                 processes, agents and server compete for the CPUs, and a
                                 message can wait in a busy client's socket buffer for
                                 hundreds of ms. What the client process saw, when it got
                                 to read, is fanout_client_p50/p99.
                     end to end  the agent's time in each text entry (same machine clock),
                                 for every entry: batching included; split at the server's
                                 createdAt into ingest (agent -> stamped) and deliver
                                 (stamped -> client).
                   The clients stop once they have received nothing for 2 s after the
                   server wrote its last batch
  fan-out floor    (unless --no-floor) first, at each rung of the ladder (below), the
                   same clients and agents against bench/_bare_fanout.py: bare bottle +
                   gevent doing only what design §6 and §7 make each line cost (each agent
                   line parsed, batched per task every 100 ms, each batch stored as
                   Taskboard stores it: its entries and raw lines in one SQLite transaction,
                   in WAL mode, in a threadpool thread; then one encoded message per batch
                   sent to the task's followers; no API traffic, no other event). Its
                   fan-out p50/p99 are the baseline of fanout_p50/p99 (ratio floor/ours):
                   what this machine allows at this load without Taskboard's other work
  API traffic      `--api-rate` GETs a second on one keep-alive connection, a mix of the
                   projects summary, a task list, a task, its logs (?limit=500), stats,
                   activity (limit 50) and agent usage; baseline: the same mix on the idle
                   server just before (same length), p50/p99 and per route
  memory, CPU      the server's RSS from /proc/<pid>/status every 0.25 s (VmRSS), its peak
                   (VmHWM), and its RSS when idle before the load (the baseline);
                   rss_growth_last_half: the RSS at the end of the agents' run minus at its
                   middle (the event buffer, 16 MiB, fills in the first seconds; after that
                   memory must not grow). The CPU time it used while the agents ran
                   (/proc/<pid>/stat), as a share of one core (a gevent server uses one), and
                   the clients' CPU time. cpu_per_line_us: that CPU less the API's share (the
                   server's CPU a second during the idle API phase x the run's seconds), per
                   line the agents printed; baseline: the floor's server CPU per line it
                   stored and sent, at the same rate (the floor has no API). A server busy at
                   rest cannot be judged this way (its busyness would be subtracted and the
                   lines would look nearly free, issue 42): when it took more than 3 % of a
                   core (REST_CPU_LIMIT) over 5 s at rest, before the API phase (no request,
                   no agent), nothing is taken out, the row shows the whole CPU per line,
                   says why in its goal, and fails
  slow clients     (unless --no-slow) `--slow-clients` more /ws?logs=all connections (2; the
                   stress run: `--stress-slow-clients`, 200) with a 4 KB receive buffer:
                   half never read after the handshake, half read 4 KB every 0.25 s (the
                   stress run's: 256 bytes, 1 KB/s), in a thread each. At the top rung each
                   must be dropped by the server during the run (its connection leaves
                   ESTABLISHED in /proc/net/tcp: a client that never reads cannot tell);
                   at a lower rung the server's event buffer (16 MiB, 20,000 events) may
                   hold the whole run, so that is reported, not judged. Afterwards each is
                   drained (did `resync` arrive?) and reconnects with ?since=<the last seq it
                   got>: the first event must be `resync` or the very next seq (a replay),
                   never a gap (nothing within 10 s: it was not dropped and missed nothing).
                   Counted over all of them: slow_dropped, slow_since_ok. The other clients
                   must not be dropped
  lines            what each agent says it emitted against its task's text rows in the
                   database (lost, duplicated, reordered), as bench/agents.py checks
  --mixed          (issue 24) the five agents speak claude, codex, gemini, opencode and
                   claude: the three others' tasks get that `agent` through the API and
                   TASKBOARD_CODEX_COMMAND etc. name `_flood_agent.py --as <cli>`. Each
                   prints the same lines a second in its CLI's stream (texts, tool calls and
                   results, step ends), so the load on the server stays comparable. After
                   the run, each task's rows by kind must match what its agent printed:
                   every text, tool call and tool result parsed, no raw entry, the prompt
                   received. Everything else (the floor, which stays Claude's lines, the
                   clients, the API, the ratios) is as without it

With `--db`, the database is copied into the temp dir first (the run adds rows to it); the
API mix then reads the biggest project of that database (its task list, stats, activity),
so slow queries there show up in both the API and the fan-out figures (SQLite calls block
the gevent hub).

The load ladder (issue 34): a 2-core machine cannot carry 5 x 2,000 lines/s even for the
bare floor, so the latency goals are judged where the machine allows them. `--ladder` (default
250,500,1000,2000 lines/s per agent; --quick 500,2000) runs the fan-out floor at each rung
(rows floor_p99_at_<rate>); the judged rung (row judged_rung, e.g. "5x1000/s") is the highest
whose floor p99 is < 50 ms, else the lowest (said so, and judged_rung is then missed).
Taskboard runs there, on a fresh server and database, and every goal is judged, against that
rung's floor. Then the stress run: Taskboard again, fresh, at
the top rung with `--stress-slow-clients` slow clients; its rows are prefixed stress_ and
only its non-latency checks keep their goals (clients connected and complete, entries lost,
misordered, clients dropped, database lines, agents parsed, API errors, RSS peak and growth,
CPU per line against the top rung's floor, slow clients dropped and resumed); its latencies
are reported. When the judged rung is the top one, the stress run still follows, so that the
latencies are always judged with the usual slow clients. A ladder of one rung
(`--no-ladder`, `--rate` alone, `--ladder 2000`, `--no-floor`) is one run as before the ladder,
with `--slow-clients`.

How to read the output: progress lines (one per rung of the ladder), then a table (figure,
value, baseline, ratio, goal). Goals (issues 9 and 34), at the judged rung: fan-out p99 <
100 ms; stdout -> /ws (end_to_end_p99) < 200 ms, because design.md §7 batches a task's lines
at most every 100 ms, so under a continuous flood a line waits up to 100 ms for its batch and
< 100 ms cannot be met by any correct server (bench/agents.py's goal); no event lost or
reordered for any client; server RSS < 300 MB and < 20 MB of growth over the run's second
half; CPU per agent line <= 1.5x the floor's; slow clients dropped (top rung) and resumed
without a gap. The last line, BENCH_RESULT {...}, is for bench/run.py: its "rung" is the
judged rate. Clients, agents and server share the machine's CPUs: a 2-core machine is the
worst case.
"""

import argparse
import base64
import collections
import concurrent.futures
import contextlib
import copy
import json
import multiprocessing
import os
import re
import selectors
import shlex
import shutil
import signal
import socket
import sqlite3
import struct
import sys
import tempfile
import threading
import time

from _common import (
    AUTH_HEADER,
    REPO_ROOT,
    Server,
    emit_result,
    free_port,
    paced_requests,
    percentile,
    print_table,
    proc_memory_kb,
    result_row,
    sandbox_fields,
    taskboard_env,
)
from agents import FLOOD_AGENT, TEXT, call, emitted, wait_for_runs

GOAL_FANOUT_P99_MS, GOAL_RSS_MB = 100.0, 300.0
#: stdout -> /ws (end_to_end_p99): design.md §7 holds a line up to 100 ms for its batch, so
#: the fan-out goal plus those 100 ms (bench/agents.py's goal)
GOAL_END_TO_END_P99_MS = 200.0
#: the latency goals are judged at the highest rung whose bare floor has a p99 below this
GOAL_FLOOR_P99_MS = 50.0
#: the server's CPU per agent line, at most this many times the floor's (issue 34)
GOAL_CPU_PER_LINE_X = 1.5
#: above this share of a core while nothing runs (the rest phase, REST_WINDOW_SECONDS before
#: the API phase), the server is busy at rest: its CPU per line is not judged against the
#: floor and the row fails (issue 42)
REST_CPU_LIMIT = 0.03
REST_WINDOW_SECONDS = 5.0
#: RSS growth over the second half of the agents' run (the 16 MiB event buffer fills first)
GOAL_RSS_GROWTH_MB = 20.0
#: lines/s per agent of each rung: the default ladder and --quick's
LADDER, QUICK_LADDER, DEFAULT_RATE = (250, 500, 1000, 2000), (500, 2000), 2000.0
#: slow clients of the stress run (the top rung): half never read, half read this (bytes/s)
STRESS_SLOW_CLIENTS, STRESS_TRICKLE = 200, 1024
#: bytes/s read by the trickling slow client of any other run (4 KB every 0.25 s)
TRICKLE = 16384
#: a stress run's figures that are latencies (or the agents' pace): reported, not judged
STRESS_UNJUDGED = ("agents_sustained", "fanout_p50", "fanout_p99", "fanout_client_p50",
                   "fanout_client_p99", "end_to_end_p50", "end_to_end_p99",
                   "end_to_end_ingest_p99", "end_to_end_deliver_p99", "api_p50_load",
                   "api_p99_load")
#: --mixed: the agent CLI of each task, in order (issue 24: "five agents of mixed CLIs")
MIXED = ("claude", "codex", "gemini", "opencode", "claude")
#: the environment variable naming each non-Claude CLI's command (taskboard.py's AGENTS)
CLI_ENV = {"codex": "TASKBOARD_CODEX_COMMAND", "gemini": "TASKBOARD_GEMINI_COMMAND",
           "opencode": "TASKBOARD_OPENCODE_COMMAND"}
BARE_FANOUT = os.path.join(REPO_ROOT, "bench", "_bare_fanout.py")
LATENCY_EVERY = 8  # clients 0, 8, 16, ... time every text entry they receive
FINE, COARSE, SPLIT = 1e-4, 1e-2, 10.0  # histogram bins: 0.1 ms below 10 s, 10 ms above
FRAME_HEAD = re.compile(rb'\{"seq":(\d+),"event":"([^"]+)"')
ENTRY_ID = re.compile(rb'(?<!\\)"id":(\d+),"taskId":')
TEXT_ENTRY = re.compile(rb'"createdAt":"([^"]+)","kind":"text","message":"\d+ (\d+\.\d+) ')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=200, help="/ws log followers")
    parser.add_argument("--workers", type=int, default=4, help="client processes")
    parser.add_argument("--agents", type=int, default=5, help="flooding agents (max 5)")
    parser.add_argument("--ladder",
                        help="lines/s per agent of each rung, comma-separated (default "
                             + ",".join(map(str, LADDER)) + "; --quick "
                             + ",".join(map(str, QUICK_LADDER)) + ")")
    parser.add_argument("--no-ladder", action="store_true",
                        help="one run at --rate, as before the ladder")
    parser.add_argument("--rate", type=float,
                        help=f"lines/s per agent of the one run (default {DEFAULT_RATE:g}); "
                             "given without --ladder, it means --no-ladder")
    parser.add_argument("--seconds", type=float,
                        help="how long agents write, per run (default 30; --quick 10)")
    parser.add_argument("--api-rate", type=float, default=50, help="API requests/s")
    parser.add_argument("--pad", type=int, default=80, help="padding characters per text")
    parser.add_argument("--db", help="run on a copy of this database")
    parser.add_argument("--slow-clients", type=int, default=2,
                        help="slow clients of the judged run: half never read, half read "
                             f"{TRICKLE // 1024} KB/s (default 2)")
    parser.add_argument("--stress-slow-clients", type=int, default=STRESS_SLOW_CLIENTS,
                        help="slow clients of the stress run: half never read, half read "
                             f"{STRESS_TRICKLE // 1024} KB/s (default {STRESS_SLOW_CLIENTS})")
    parser.add_argument("--no-slow", action="store_true", help="no slow clients at all")
    parser.add_argument("--no-floor", action="store_true",
                        help="no fan-out floor (bare gevent) run first; implies --no-ladder")
    parser.add_argument("--sandbox", choices=("auto", "bubblewrap", "none"), default="auto",
                        help="the project's sandbox (default auto: bubblewrap where it works)")
    parser.add_argument("--quick", action="store_true",
                        help="10 s per run, the ladder " + ",".join(map(str, QUICK_LADDER)))
    parser.add_argument("--mixed", action="store_true",
                        help="agents of mixed CLIs: " + ", ".join(MIXED))
    parser.add_argument("--read-tokens", type=float, default=0.0, metavar="SHARE",
                        help="the share of /ws clients (0-1) that follow with a personal "
                             "read token instead of the board's (default 0)")
    parser.add_argument("--taskboard", default=os.path.join(REPO_ROOT, "taskboard.py"),
                        help="the taskboard.py to run (e.g. a patched copy, to try a fix)")
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 10.0 if args.quick else 30.0
    args.agents = min(args.agents, 5)
    if args.no_slow:
        args.slow_clients = args.stress_slow_clients = 0
    if args.no_ladder or args.no_floor or (args.ladder is None and args.rate is not None):
        args.ladder = [args.rate or DEFAULT_RATE]
    else:
        try:
            rungs = [float(r) for r in (args.ladder or ",".join(
                map(str, QUICK_LADDER if args.quick else LADDER))).split(",") if r.strip()]
        except ValueError:
            parser.error(f"--ladder: not a list of rates: {args.ladder!r}")
        if not rungs or min(rungs) <= 0:
            parser.error("--ladder needs at least one rate above 0")
        args.ladder = sorted(set(rungs))
    args.rate = args.ladder[-1]  # each run sets its own (at_rate())
    args.slow_rate = TRICKLE
    return args


def at_rate(args, rate, slow=None, slow_rate=TRICKLE):
    """ A copy of args for one run at `rate` lines/s per agent, with `slow` slow clients
    (default: --slow-clients) whose trickling half reads `slow_rate` bytes/s. """
    out = copy.copy(args)
    out.rate, out.slow_rate = rate, slow_rate
    out.slow_clients = args.slow_clients if slow is None else slow
    return out


def rung_name(args, rate):
    """ "5x1000/s": the agents and each one's lines a second. """
    return f"{args.agents}x{rate:g}/s"


def agent_clis(args):
    """ The agent CLI of each task, in order. """
    return list(MIXED[:args.agents]) if args.mixed else ["claude"] * args.agents


def agent_env(args):
    """ With --mixed, the server's environment naming the flood agent as each other CLI's
    command (put in os.environ before the server starts); else nothing. """
    if not args.mixed:
        return {}
    return {env: shlex.join([sys.executable, FLOOD_AGENT, "--as", cli])
            for cli, env in CLI_ENV.items()}


# A minimal WebSocket client (RFC 6455, server frames are never masked) #####################

def ws_connect(port, path, rcvbuf=None, timeout=10.0, auth=AUTH_HEADER):
    """ A connected, upgraded socket (blocking) and the bytes already read past the 101;
    `auth`: the Authorization header's value. """
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  f"Authorization: {auth}\r\n"  # Taskboard's /ws needs it; bare ignores
                  "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"{path}: closed during the handshake")
        head += chunk
    head, _, rest = head.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        raise ConnectionError(f"{path}: {head.splitlines()[0]!r}")
    return sock, bytearray(rest)


def frames(buf):
    """ Complete frames at the front of buf (consumed): [(opcode, payload)]. """
    out = []
    while len(buf) >= 2:
        opcode, length, head = buf[0] & 0x0F, buf[1] & 0x7F, 2
        if length == 126:
            if len(buf) < 4:
                break
            length, head = int.from_bytes(buf[2:4], "big"), 4
        elif length == 127:
            if len(buf) < 10:
                break
            length, head = int.from_bytes(buf[2:10], "big"), 10
        if len(buf) < head + length:
            break
        out.append((opcode, bytes(buf[head:head + length])))
        del buf[:head + length]
    return out


def entry_ids(payload, full):
    """ (first id, last id, count) of a task:log message's entries; count is negative when
    the ids are not strictly increasing. With `full`, every id is read; else only the first
    and the last, and every id only when they are not first..first+count-1 (a flush writes
    consecutive ids). Every follower of a task gets the same bytes, so the full check of
    the sampled followers covers the order inside each message for all of them. """
    count = payload.count(b'{"id":')  # each entry starts so; in a text the quote is escaped
    if not count:
        return None, None, 0
    if full:
        ids = list(map(int, ENTRY_ID.findall(payload)))
    else:
        first = int(ENTRY_ID.search(payload)[1])
        at = payload.rfind(b'{"id":')
        last = int(payload[at + 6:payload.index(b",", at)])
        if last - first + 1 == count:
            return first, last, count
        ids = list(map(int, ENTRY_ID.findall(payload)))
    increasing = all(b > a for a, b in zip(ids, ids[1:])) and len(ids) == count
    return ids[0], ids[-1], count if increasing else -count


def iso_seconds(stamp):
    """ time.time() of Taskboard's "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC). """
    return _day_start(stamp[:10]) + int(stamp[11:13]) * 3600 + int(stamp[14:16]) * 60 \
        + float(stamp[17:23])


_days = {}


def _day_start(day):
    if day not in _days:
        import calendar
        _days[day] = calendar.timegm(time.strptime(day, "%Y-%m-%d"))
    return _days[day]


class Follower:
    """ One /ws?logs=<task> client's checks. """

    def __init__(self, index, task_id):
        self.index, self.task_id = index, task_id
        self.first = self.last = None
        self.count = self.misordered = self.seq_misordered = self.bytes = self.messages = 0
        self.last_seq = 0
        self.events = collections.Counter()
        self.closed = None
        self.mismatch = 0  # regex and json.loads disagreed

    def state(self):
        return {"index": self.index, "task": self.task_id, "first": self.first,
                "last": self.last, "count": self.count, "misordered": self.misordered,
                "seq_misordered": self.seq_misordered, "events": dict(self.events),
                "closed": self.closed, "bytes": self.bytes, "mismatch": self.mismatch}


def ws_worker(port, assignments, ready, stop, results, heard):
    """ A client process: follow its share of the tasks until `stop`, then report. """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    selector = selectors.DefaultSelector()
    followers = {}
    for index, task_id, auth in assignments:
        sock, rest = ws_connect(port, f"/ws?logs={task_id}", auth=auth)
        if index % LATENCY_EVERY == 0:  # the kernel stamps what it receives (see docstring)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setblocking(False)
        follower = Follower(index, task_id)
        followers[sock] = (follower, rest)
        selector.register(sock, selectors.EVENT_READ)
    ready.put(len(followers))
    total, ingest, deliver, fanout, fanout_app = {}, {}, {}, {}, {}
    while not stop.is_set():
        for key, _ in selector.select(0.1):
            sock = key.fileobj
            follower, buf = followers[sock]
            arrived = None
            try:
                if follower.index % LATENCY_EVERY == 0:
                    data, ancillary, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(16))
                    arrived = kernel_time(ancillary)
                else:
                    data = sock.recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError as exc:
                data, follower.closed = b"", f"error {exc!r}"
            now = time.time()
            arrived = arrived or now
            heard.value = now
            if not data:
                follower.closed = follower.closed or "closed by the server"
                selector.unregister(sock)
                continue
            follower.bytes += len(data)
            buf += data
            for opcode, payload in frames(buf):
                if opcode == 8:
                    follower.closed = "close frame"
                    continue
                if opcode != 1:
                    continue
                follower.messages += 1
                head = FRAME_HEAD.match(payload)
                if head is None:  # {"event": "ping"} has no seq
                    follower.events["ping" if b'"ping"' in payload[:30] else "?"] += 1
                    continue
                seq, event = int(head[1]), head[2].decode()
                follower.events[event] += 1
                follower.seq_misordered += seq <= follower.last_seq
                follower.last_seq = seq
                if event != "task:log":
                    continue
                sampled = follower.index % LATENCY_EVERY == 0
                first, last, count = entry_ids(payload, full=sampled)
                if follower.messages % 50 == 0:  # the regexes against a real parse
                    ids = [e["id"] for e in json.loads(payload)["data"]["entries"]]
                    follower.mismatch += (first, last, count) != (
                        ids[0] if ids else None, ids[-1] if ids else None, len(ids))
                if not count:
                    continue
                if follower.last is not None and first <= follower.last:
                    follower.misordered += 1
                if count < 0:  # not strictly increasing inside the message
                    follower.misordered += 1
                    count = -count
                follower.first = first if follower.first is None else follower.first
                follower.last = last
                follower.count += count
                if not sampled:
                    continue
                newest = None
                for created, sent in TEXT_ENTRY.findall(payload):
                    sent, created = float(sent), iso_seconds(created.decode())
                    newest = created if newest is None else max(newest, created)
                    for hist, seconds in ((total, now - sent), (ingest, created - sent),
                                          (deliver, now - created)):
                        b = bin_of(seconds)
                        hist[b] = hist.get(b, 0) + 1
                if newest is not None:  # once per message: the batch left the server
                    for hist, seconds in ((fanout, arrived - newest),
                                          (fanout_app, now - newest)):
                        b = bin_of(seconds)
                        hist[b] = hist.get(b, 0) + 1
    for sock in followers:
        sock.close()
    results.put({"followers": [f.state() for f, _ in followers.values()],
                 "hist": {"total": total, "ingest": ingest, "deliver": deliver,
                          "fanout": fanout, "fanout_app": fanout_app},
                 "cpu": time.process_time()})


#: Linux: the kernel's receive time of the data a recvmsg() returns (SCM_TIMESTAMPNS).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def kernel_time(ancillary):
    """ The time.time() at which the kernel received the data, from recvmsg()'s ancillary
    data; None if it gave none. For TCP it is the time of the newest segment read, so a
    message that waited in the buffer behind a later one is counted late, never early. """
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
            seconds, nanoseconds = struct.unpack("qq", payload[:16])
            return seconds + nanoseconds / 1e9
    return None


def bin_of(seconds):
    """ A latency's histogram bin: 0.1 ms wide below 10 s, 10 ms wide above. """
    if seconds < SPLIT:
        return max(0, int(seconds / FINE))
    return int(SPLIT / FINE) + int((seconds - SPLIT) / COARSE)


def bin_top_ms(b):
    """ The upper edge of a bin, in ms. """
    if b < int(SPLIT / FINE):
        return (b + 1) * FINE * 1000
    return (SPLIT + (b - int(SPLIT / FINE) + 1) * COARSE) * 1000


def hist_percentile(hist, q):
    """ The q-quantile (ms) of a sparse {bin: count} histogram. """
    total = sum(hist.values())
    if not total:
        return 0.0
    rank, seen = q * total, 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return bin_top_ms(b)
    return bin_top_ms(max(hist))


def merge(hists):
    out = collections.Counter()
    for h in hists:
        out.update({int(k): v for k, v in h.items()})
    return out


# Slow clients ##############################################################################

class SlowClient:
    """ A /ws?logs=all connection with a tiny receive buffer that reads `rate` bytes/s (0:
    never). drained() reads what is left afterwards and tells what arrived. """

    def __init__(self, name, port, rate):
        self.name, self.rate, self.port = name, rate, port
        self.sock, self.buf = ws_connect(port, "/ws?logs=all", rcvbuf=4096)
        self.local_port = self.sock.getsockname()[1]
        self.read = len(self.buf)
        self.dropped_at = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True) if rate else None
        if self.thread:
            self.thread.start()

    def _trickle(self):
        self.sock.settimeout(0.25)
        while not self.stop.is_set():
            try:
                chunk = self.sock.recv(int(self.rate / 4))
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            self.buf += chunk
            self.read += len(chunk)
            time.sleep(0.25)

    def drained(self):
        """ What arrived ({"events", "eof", "last", "bytes"}), and what a reconnection with
        ?since=<the last seq it got> answers first ("resume": "replay" when that is the
        next seq, "resync", or "GAP ..."): a dropped client must lose nothing. """
        self.stop.set()
        if self.thread:
            self.thread.join(2)
        self.sock.settimeout(2.0)
        eof = False
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                chunk = self.sock.recv(1 << 20)
            except (TimeoutError, OSError):
                break
            if not chunk:
                eof = True
                break
            self.buf += chunk
            self.read += len(chunk)
        events = collections.Counter()
        last, last_seq = None, 0
        for opcode, payload in frames(self.buf):
            if opcode == 8:
                events["close frame"] += 1
                continue
            head = FRAME_HEAD.match(payload)
            last = head[2].decode() if head else "ping"
            last_seq = int(head[1]) if head else last_seq
            events[last] += 1
        self.sock.close()
        return {"events": dict(events), "eof": eof, "last": last, "bytes": self.read,
                "last_seq": last_seq, "resume": self.resume(last_seq)}

    def resume(self, since, quiet=10.0):
        """ The first event a reconnection with ?since= gets: replay, resync or a gap. The
        server answers at once when anything followed `since`; when nothing comes within
        `quiet` s (the client was not dropped and read everything), "nothing to replay". """
        t0 = time.monotonic()
        try:
            sock, buf = ws_connect(self.port, f"/ws?logs=all&since={since}", timeout=60)
            deadline = time.monotonic() + quiet
            # the first frame may have come with the handshake's answer, already in buf
            got = [f for f in frames(buf) if f[0] == 1 and FRAME_HEAD.match(f[1])]
            while not got and time.monotonic() < deadline:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    chunk = sock.recv(1 << 16)
                except TimeoutError:
                    break
                if not chunk:
                    break
                buf += chunk
                got = [f for f in frames(buf) if f[0] == 1 and FRAME_HEAD.match(f[1])]
            sock.close()
        except OSError as exc:
            return f"NO ANSWER ({exc!r} after {time.monotonic() - t0:.0f} s)"
        if not got:
            return ("nothing to replay" if time.monotonic() >= deadline
                    else "NO ANSWER (closed)")
        head = FRAME_HEAD.match(got[0][1])
        took = f" after {time.monotonic() - t0:.1f} s"
        if head[2] == b"resync":
            return "resync" + took
        seq = int(head[1])
        return ("replay" if seq == since + 1 else f"GAP (since={since}, then seq {seq})") + took


#: what a slow client's reconnection may get: never a gap
RESUME_OK = ("replay", "resync", "nothing to replay")


def slow_clients(port, n, rate):
    """ n SlowClients: the first half (rounded up) never read, the others read `rate`
    bytes/s. A name is numbered when there are several of its kind. """
    never, trickle = (n + 1) // 2, n // 2
    kinds = [("never_reads", 0, never), (f"trickle_{rate // 1024}KBps", rate, trickle)]
    return [SlowClient(name if count == 1 else f"{name}_{i + 1}", port, r)
            for name, r, count in kinds for i in range(count)]


def tcp_states(server_port):
    """ {remote port: state} of the server's connections (state 01 = ESTABLISHED). """
    out = {}
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            local, remote, state = parts[1], parts[2], parts[3]
            if local == f"0100007F:{server_port:04X}":
                out[int(remote.split(":")[1], 16)] = state
    return out


# The run ####################################################################################

def paced_by_path(port, paths, rate, start_at, seconds):
    by_path = {}
    latencies, errors = paced_requests(port, paths, rate, start_at, seconds, by_path=by_path)
    return latencies, errors, by_path


def main(argv=None):
    args = parse_args(argv)
    slow = (f", slow clients {args.slow_clients} (stress run {args.stress_slow_clients})"
            if args.slow_clients or args.stress_slow_clients else "")
    print(f"bench/load.py: {args.clients} /ws clients in {args.workers} processes, "
          f"{args.agents} agents x {' / '.join(f'{r:g}' for r in args.ladder)} lines/s for "
          f"{args.seconds:g} s a run, API at {args.api_rate:g} req/s{slow}"
          f"{f', on a copy of {args.db}' if args.db else ', fresh database'}, "
          f"{os.cpu_count()} CPUs; agents: {', '.join(agent_clis(args))}", flush=True)
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(1, initializer=signal.signal, initargs=(signal.SIGINT, signal.SIG_IGN))
    with tempfile.TemporaryDirectory(prefix="taskboard-bench-load-") as tmp:
        try:
            rows, extra = run(args, tmp, ctx, pool)
        except KeyboardInterrupt:
            sys.exit("interrupted")
        finally:
            pool.terminate()
            pool.join()
    report(rows, extra)


def run(args, tmp, ctx, pool):
    """ The floor ladder, Taskboard at the judged rung, then (with a ladder) Taskboard
    again at the top rung with many slow clients: the stress run, its rows prefixed
    stress_ (a second run even when the top rung is the judged one, so that the latency
    goals are always judged with the usual slow clients). """
    rung, floors = floor_ladder(args, ctx, tmp)
    top = args.ladder[-1]
    judged = at_rate(args, rung)
    print(f"judged run: Taskboard at {rung_name(args, rung)}", flush=True)
    rows, extra = run_taskboard(judged, tmp, ctx, pool, "judged", floors.get(rung),
                                top=rung == top)
    extra.update(rung=rung, ladder={f"{r:g}": floors[r]["p99"] for r in floors},
                 stress=None)
    if len(args.ladder) > 1:
        stress = at_rate(args, top, args.stress_slow_clients, STRESS_TRICKLE)
        print(f"stress run: Taskboard at {rung_name(args, top)} with {stress.slow_clients} "
              "slow clients; its latencies are reported, not judged", flush=True)
        stress_rows, stress_extra = run_taskboard(stress, tmp, ctx, pool, "stress",
                                                  floors.get(top), top=True)
        rows += [as_stress(r) for r in stress_rows]
        extra["stress"] = {k: stress_extra[k] for k in ("emitted", "ran", "slow_summary")}
    return ladder_rows(args, rung, floors) + rows, extra


def as_stress(row):
    """ A stress-run row: prefixed stress_, a latency reported without its goal. """
    latency = row["figure"] in STRESS_UNJUDGED
    return {**row, "figure": "stress_" + row["figure"],
            **({"goal": "", "met": None} if latency else {})}


def ladder_rows(args, rung, floors, given=False):
    """ floor_p99_at_<rate> of every rung measured, and judged_rung: its goal is that the
    floor carries the rung (p99 < GOAL_FLOOR_P99_MS); none when the rate was given or there
    was no ladder. """
    rows = [result_row(f"floor_p99_at_{rate:g}", f["p99"], "ms")
            for rate, f in sorted(floors.items())]
    floor = floors.get(rung)
    judged = floor is not None and not given
    rows.append(result_row("judged_rung", rung_name(args, rung), "",
                           goal=f"floor p99 < {GOAL_FLOOR_P99_MS:g} ms" if judged else "",
                           met=(0 < floor["p99"] < GOAL_FLOOR_P99_MS) if judged else None))
    return rows


def run_taskboard(args, tmp, ctx, pool, name, floor, top=True):
    """ One run of Taskboard at args.rate, on a fresh server and database (or a fresh copy of
    --db) in <tmp>/<name>: (rows, extra) of figures(). """
    tmp = os.path.join(tmp, name)
    flood_dir, work_dir, db = (os.path.join(tmp, "flood"), os.path.join(tmp, "work"),
                               os.path.join(tmp, "data", "taskboard.db"))
    os.makedirs(flood_dir)
    os.makedirs(os.path.dirname(db))
    os.makedirs(work_dir)
    big_project = None
    if args.db:
        t0 = time.monotonic()
        for suffix in ("", "-wal"):
            if os.path.exists(args.db + suffix):
                shutil.copyfile(args.db + suffix, db + suffix)
                # NOTE: else the kernel writes the copy back while the load runs, and the
                # server's syncs (checkpoints) wait for gigabytes that are not its own
                with open(db + suffix, "rb+") as copy_:
                    os.fsync(copy_.fileno())
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        big_project = conn.execute("SELECT project_id FROM tasks GROUP BY project_id "
                                   "ORDER BY COUNT(*) DESC LIMIT 1").fetchone()
        conn.close()
        big_project = big_project[0] if big_project else None
        print(f"copied the database ({os.path.getsize(db) / 1e9:.2f} GB) in "
              f"{time.monotonic() - t0:.1f} s", flush=True)
    port = free_port()
    # the server passes its environment on to its agents
    with flood_environ(args, flood_dir, **agent_env(args)):
        server = Server("taskboard", [sys.executable, args.taskboard, "--port", str(port),
                                      "--db", db, "--agent-command",
                                      f"{sys.executable} {FLOOD_AGENT}"],
                        os.path.join(tmp, "taskboard.log"), "/api/health", port,
                        env=taskboard_env())
        with server:
            try:
                measured = measure(args, ctx, pool, port, work_dir, server.proc.pid,
                                   big_project)
            except Exception:
                print(f"server log tail:\n{server.log_tail()}")
                raise
            if any(s != "testing" for s in measured["final"].values()):
                print(f"server log tail:\n{server.log_tail()}")
    return figures(args, measured, db, emitted(flood_dir), floor, top)


@contextlib.contextmanager
def flood_environ(args, flood_dir, **more):
    """ os.environ with the FLOOD_* of a run at args.rate (and `more`) while it runs, then as
    before: a server started meanwhile passes it on to its agents. """
    values = {"FLOOD_RATE": str(args.rate), "FLOOD_SECONDS": str(args.seconds),
              "FLOOD_PAD": str(args.pad), "FLOOD_DIR": flood_dir,
              "FLOOD_LINES_PER_MESSAGE": "1", **more}
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def floor_ladder(args, ctx, tmp):
    """ The fan-out floor at each rung of args.ladder: (the rung to judge at, {rate: floor}).
    The rung is the highest whose floor has a p99 below GOAL_FLOOR_P99_MS, else the lowest.
    With --no-floor: (the one rate, {}). """
    if args.no_floor:
        return args.ladder[-1], {}
    floors = {}
    for rate in args.ladder:
        floors[rate] = f = fanout_floor(at_rate(args, rate), ctx, tmp)
        ok = 0 < f["p99"] < GOAL_FLOOR_P99_MS
        print(f"ladder: {rung_name(args, rate)}: floor p99 {f['p99']:.1f} ms "
              f"({'<' if ok else 'not <'} {GOAL_FLOOR_P99_MS:g} ms), CPU "
              f"{(f['cpu_per_line'] or 0) * 1e6:.1f} µs a line", flush=True)
    fit = [r for r in args.ladder if 0 < floors[r]["p99"] < GOAL_FLOOR_P99_MS]
    rung = max(fit) if fit else args.ladder[0]
    if fit:
        print(f"ladder: the latency goals are judged at {rung_name(args, rung)}, the highest "
              f"rung whose floor p99 is < {GOAL_FLOOR_P99_MS:g} ms", flush=True)
    else:
        print(f"ladder: no rung's floor p99 is < {GOAL_FLOOR_P99_MS:g} ms: judged at the "
              f"lowest, {rung_name(args, rung)}, where this machine cannot meet them", flush=True)
    return rung, floors


def judged_rate(args, ctx, tmp, given=None):
    """ For bench/approvals.py and bench/push.py: the rate to measure at (lines/s per agent),
    its floor (or None) and the rows saying so. `given` (their --at-rate, what run.py
    passes from load.py's judged rung): that rate, no floor. Else the floor ladder's rung
    when args.ladder has several; else its one rate, no floor (as before the ladder). """
    if given is not None:
        print(f"rate: {rung_name(args, given)}, as given (--at-rate)", flush=True)
        return given, None, ladder_rows(args, given, {}, given=True)
    if len(args.ladder) == 1 or args.no_floor:
        return args.ladder[-1], None, ladder_rows(args, args.ladder[-1], {})
    rung, floors = floor_ladder(args, ctx, tmp)
    return rung, floors[rung], ladder_rows(args, rung, floors)


def fanout_floor(args, ctx, tmp):
    """ The fan-out of bench/_bare_fanout.py to the same clients at the same load (args.rate):
    {"p50", "p99" (ms), "complete", "ran", "server_cpu", "lines", "cpu_per_line" (s),
    "machine_busy"}. """
    port = free_port()
    floor_dir = os.path.join(tmp, f"floor-{args.rate:g}")  # its agents' records, apart
    os.makedirs(floor_dir)
    tasks = list(range(1, args.agents + 1))
    server = Server("bare fan-out", [sys.executable, BARE_FANOUT, str(port), str(args.agents),
                                     os.path.join(floor_dir, "bare_fanout.db"),
                                     sys.executable, FLOOD_AGENT],
                    os.path.join(tmp, f"bare_fanout-{args.rate:g}.log"), "/bare/health", port)
    with flood_environ(args, floor_dir), server:
        ready, stop, results = ctx.Queue(), ctx.Event(), ctx.Queue()
        heard = ctx.RawValue("d", 0.0)
        shares = [[] for _ in range(args.workers)]
        for i in range(args.clients):
            shares[i % args.workers].append((i, tasks[i % len(tasks)], AUTH_HEADER))
        workers = [ctx.Process(target=ws_worker, daemon=True,
                               args=(port, share, ready, stop, results, heard))
                   for share in shares if share]
        for w in workers:
            w.start()
        connected = sum(ready.get(timeout=60) for _ in workers)
        time.sleep(0.5)  # every follower is in place
        started, cpu_start, machine_start = (time.monotonic(), cpu_seconds(
            server.proc.pid), machine_cpu())
        call(port, "POST", "/bare/start")
        status = call(port, "GET", "/bare/status")
        while not status["done"] and time.monotonic() - started < args.seconds + 120:
            time.sleep(0.25)
            status = call(port, "GET", "/bare/status")
        ran = time.monotonic() - started
        server_cpu = cpu_seconds(server.proc.pid) - cpu_start
        machine = [b - a for a, b in zip(machine_start, machine_cpu())]
        while time.time() - heard.value < 2.0 and time.monotonic() - started < 600:
            time.sleep(0.25)  # the clients get the last messages
        stop.set()
        clients = [results.get(timeout=60) for _ in workers]
        for w in workers:
            w.join(10)
    sent = {int(t): n for t, n in status["entries"].items()}
    lines = sum(sent.values())
    followers = [f for c in clients for f in c["followers"]]
    complete = sum(f["count"] == sent.get(f["task"]) and not f["misordered"]
                   for f in followers)
    hist = merge(c["hist"]["fanout"] for c in clients)
    floor = {"p50": hist_percentile(hist, .5), "p99": hist_percentile(hist, .99),
             "complete": complete, "ran": ran, "server_cpu": server_cpu, "lines": lines,
             "cpu_per_line": server_cpu / lines if lines else None,
             "machine_busy": machine[0] / max(1e-9, sum(machine))}
    print(f"fan-out floor (bare gevent, storing each batch) at {rung_name(args, args.rate)}: "
          f"{connected} clients, p50 "
          f"{floor['p50']:.1f} ms, p99 {floor['p99']:.1f} ms; {complete} of {len(followers)} "
          f"clients got every entry in order; {lines:,} entries in {ran:.1f} s, "
          f"server CPU {server_cpu:.1f} s ({server_cpu / ran:.0%} of a core), the machine's "
          f"{os.cpu_count()} CPUs {floor['machine_busy']:.0%} busy", flush=True)
    return floor


def measure(args, ctx, pool, port, work_dir, pid, big_project):
    project = call(port, "POST", "/api/projects", {"name": "Load", "slug": "bench-load",
                                                   "workingDir": work_dir,
                                                   **sandbox_fields(args.sandbox)})["id"]
    call(port, "PUT", f"/api/projects/{project}", {"maxConcurrent": args.agents})
    # a Claude task runs the project's agent (claude); the others name theirs (issue 24)
    tasks = [call(port, "POST", f"/api/projects/{project}/tasks",
                  {"title": f"flood {i} ({cli})", "description": "Print many lines.",
                   **({} if cli == "claude" else {"agent": cli})})["id"]
             for i, cli in enumerate(agent_clis(args))]
    clis = {t: call(port, "GET", f"/api/tasks/{t}")["agent"] or "claude" for t in tasks}
    listed = big_project or project
    api_paths = ["/api/projects/summary", f"/api/projects/{listed}/tasks",
                 f"/api/tasks/{tasks[0]}", f"/api/tasks/{tasks[0]}/logs?limit=500",
                 f"/api/projects/{listed}/stats", f"/api/projects/{listed}/activity?limit=50",
                 "/api/stats/agent-usage"]
    window = max(2.0, args.seconds - 1.0)
    idle_window = min(window, 8.0)
    call(port, "GET", api_paths[1])  # warm the caches the way the load will
    idle_rss = proc_memory_kb(pid).get("VmRSS", 0)
    # the server's CPU a second at rest: nobody asks anything, no agent runs (issue 42)
    rest_cpu, rest_t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(REST_WINDOW_SECONDS)
    rest_cpu = (cpu_seconds(pid) - rest_cpu) / (time.monotonic() - rest_t0)
    # the server's CPU a second while it serves only the API: taken out of its CPU per line
    idle_cpu, idle_t0 = cpu_seconds(pid), time.monotonic()
    idle = pool.apply(paced_by_path, (port, api_paths, args.api_rate, time.monotonic() + 0.2,
                                      idle_window))
    idle_cpu = (cpu_seconds(pid) - idle_cpu) / (time.monotonic() - idle_t0)
    show_api("idle", idle)
    before = {t: (call(port, "GET", f"/api/tasks/{t}/logs?limit=1") or [{"id": 0}])[-1]["id"]
              for t in tasks}

    # the clients: workers first (each waits for all its connections), then the slow ones
    ready, stop, results = ctx.Queue(), ctx.Event(), ctx.Queue()
    heard = ctx.RawValue("d", 0.0)  # time.time() of the latest bytes any client received
    shares = [[] for _ in range(args.workers)]
    reader = None  # --read-tokens: a share of the clients follow with a personal read token
    if args.read_tokens:
        reader = "Bearer " + call(port, "POST", "/api/tokens", {
            "name": "bench reader", "scopes": ["read"]})["secret"]
    for i in range(args.clients):
        auth = reader if reader and int((i + 1) * args.read_tokens) > int(
            i * args.read_tokens) else AUTH_HEADER
        shares[i % args.workers].append((i, tasks[i % len(tasks)], auth))
    workers = [ctx.Process(target=ws_worker, args=(port, share, ready, stop, results, heard),
                           daemon=True) for share in shares if share]
    for w in workers:
        w.start()
    connected = sum(ready.get(timeout=60) for _ in workers)
    slow = slow_clients(port, args.slow_clients, args.slow_rate)
    time.sleep(0.5)  # every subscription is in place
    print(f"{connected} clients connected (+{len(slow)} slow ones); RSS idle "
          f"{idle_rss / 1024:.0f} MB; server CPU at rest {rest_cpu:.1%} of a core"
          + (f": busy at rest (> {REST_CPU_LIMIT:.0%})" if rest_cpu > REST_CPU_LIMIT else "")
          + f", with only the API {idle_cpu:.1%}", flush=True)

    started = time.monotonic()
    rss, sampling = [], threading.Event()
    sampler = threading.Thread(target=sample_rss, args=(pid, started, rss, sampling),
                               daemon=True)
    sampler.start()
    cpu_start, machine_start = cpu_seconds(pid), machine_cpu()
    load = pool.apply_async(paced_by_path, (port, api_paths, args.api_rate, started + 0.5,
                                            window))
    for t in tasks:
        call(port, "PATCH", f"/api/tasks/{t}/status", {"status": "in_progress"})
    states_seen = {}
    deadline = started + args.seconds + 60
    final = {}
    next_status = started
    while time.monotonic() < deadline:
        now = time.monotonic()
        states = tcp_states(port)
        was = sum(s.dropped_at is not None for s in slow)
        for s in slow:
            state = states.get(s.local_port, "gone")
            if state != "01" and s.dropped_at is None:
                s.dropped_at = now - started
                if len(slow) <= 4:
                    print(f"slow client {s.name} dropped after {s.dropped_at:.1f} s "
                          f"(server side: {state})", flush=True)
            states_seen[s.name] = state
        gone = sum(s.dropped_at is not None for s in slow)
        if len(slow) > 4 and gone > was and (was == 0 or gone == len(slow)):
            print(f"slow clients: {gone} of {len(slow)} dropped after {now - started:.1f} s",
                  flush=True)
        if now >= next_status:
            final = {t: call(port, "GET", f"/api/tasks/{t}")["status"] for t in tasks}
            next_status = now + 1.0
            if now - started > 2 and all(v not in ("backlog", "in_progress")
                                         for v in final.values()):
                break
        time.sleep(0.25)
    final = wait_for_runs(port, tasks, time.monotonic() + 5)
    ran = time.monotonic() - started
    server_cpu = cpu_seconds(pid) - cpu_start
    machine = [b - a for a, b in zip(machine_start, machine_cpu())]
    print(f"runs ended after {ran:.1f} s: {dict(collections.Counter(final.values()))}",
          flush=True)
    loaded = load.get()
    show_api("under load", loaded)
    caught_up = wait_caught_up(port, tasks, pid)
    print(f"the server's last batches were written {caught_up:.1f} s after the runs ended",
          flush=True)
    while time.time() - heard.value < 2.0 and time.monotonic() - started < 600:
        time.sleep(0.25)  # the clients get the last batches
    peak = proc_memory_kb(pid)
    sampling.set()
    sampler.join(5)
    stop.set()
    clients = [results.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(10)
    # drained and reconnected all at once: each may wait seconds for what is left
    with concurrent.futures.ThreadPoolExecutor(max(1, len(slow))) as threads:
        drained = list(threads.map(SlowClient.drained, slow))
    slow_out = {s.name: {"dropped_at": s.dropped_at, "state": states_seen.get(s.name),
                         "rate": s.rate, **d} for s, d in zip(slow, drained)}
    return {"tasks": tasks, "clis": clis, "before": before, "final": final, "idle": idle,
            "loaded": loaded, "idle_rss": idle_rss, "rss": rss, "peak": peak,
            "clients": clients, "slow": slow_out, "connected": connected, "ran": ran,
            "server_cpu": server_cpu, "machine_busy": machine[0] / max(1e-9, sum(machine)),
            "api_paths": api_paths, "idle_cpu": idle_cpu,
            "rest_cpu": rest_cpu}


def sample_rss(pid, started, out, done):
    """ (seconds since start, VmRSS kB) every 0.25 s until `done`. """
    while not done.is_set():
        kb = proc_memory_kb(pid).get("VmRSS")
        if kb is None:
            return
        out.append((time.monotonic() - started, kb))
        done.wait(0.25)


def wait_caught_up(port, tasks, pid, quiet=1.0, timeout=300):
    """ Seconds until the tasks' newest log ids stop changing for `quiet` s. """
    t0 = time.monotonic()
    newest, since = None, time.monotonic()
    while time.monotonic() - t0 < timeout:
        now = [(call(port, "GET", f"/api/tasks/{t}/logs?limit=1") or [{"id": 0}])[-1]["id"]
               for t in tasks]
        if now != newest:
            newest, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
        time.sleep(0.2)
    return since - t0


def cpu_seconds(pid):
    """ user + system CPU seconds of a live process (/proc/<pid>/stat). """
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu():
    """ (busy, idle) CPU time of the whole machine, in ticks (/proc/stat). """
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return sum(ticks) - idle, idle


def show_api(label, result):
    latencies, errors, _ = result
    print(f"API {label + ':':<11} p50 {percentile(latencies, .5) * 1000:6.2f} ms  p99 "
          f"{percentile(latencies, .99) * 1000:6.2f} ms  ({len(latencies)} requests, "
          f"{errors} errors)", flush=True)


def database_rows(db, tasks, before):
    """ {task: [log ids after `before`]}, {task: [(n, tag)] of flood text rows} and
    {task: Counter of the rows' kinds}. """
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    ids, texts, kinds = {}, {}, {}
    for t in tasks:
        rows = conn.execute("SELECT id, kind, message FROM logs WHERE task_id = ? AND id > ? "
                            "ORDER BY id", (t, before[t])).fetchall()
        ids[t] = [r[0] for r in rows]
        texts[t] = [(int(m[1]), m[3]) for m in (TEXT.match(r[2] or "") for r in rows
                                                if r[1] == "text") if m]
        kinds[t] = collections.Counter(r[1] for r in rows)
    conn.close()
    return ids, texts, kinds


def parsed_lines(m, texts, kinds, records):
    """ Whether each agent's lines arrived parsed, whatever its CLI: per task, its CLI, what
    its agent printed ("lines", "texts", "tools", "prompt" chars) and what the log holds
    ("text" rows of its lines, "tool_call", "tool_result", "raw"); "ok" when every text and
    tool call and result is there, no line was kept raw and the agent got its prompt. """
    out = {}
    for t in m["tasks"]:
        tags = {tag for _, tag in texts[t]}
        record = records.get(next(iter(tags))) if len(tags) == 1 else None
        record = record or {}
        tools = record.get("tools", 0)
        got = {"text": len(texts[t]), "tool_call": kinds[t]["tool_call"],
               "tool_result": kinds[t]["tool_result"], "raw": kinds[t]["raw"]}
        out[t] = {"cli": m["clis"].get(t), "as": record.get("as"),
                  "lines": record.get("lines", record.get("emitted", 0)),
                  "texts": record.get("emitted", 0), "tools": tools,
                  "prompt": record.get("prompt"), **got,
                  "ok": bool(record) and record.get("as", "claude") == m["clis"].get(t)
                  and got["text"] == record.get("emitted") and got["tool_call"] == tools
                  and got["tool_result"] == tools and got["raw"] == 0
                  and (record.get("prompt") or 0) > 0}
        p = out[t]
        print(f"task {t} ({p['cli']}, agent spoke {p['as']}): printed {p['lines']:,} lines, "
              f"{p['texts']:,} texts, {p['tools']:,} tool calls, prompt {p['prompt']} chars; "
              f"logged {p['text']:,} texts, {p['tool_call']:,} tool calls, "
              f"{p['tool_result']:,} tool results, {p['raw']} raw"
              f"{'' if p['ok'] else '  MISMATCH'}")
    return out


def figures(args, m, db, records, floor=None, top=True):
    """ The rows of one Taskboard run (at args.rate) and BENCH_RESULT's extra. `floor`: the
    fan-out floor at the same rate (the baseline of fan-out and CPU per line). `top`: the run
    is at the ladder's top rung (the stress load), where the slow clients must be dropped; at
    a lower rung the server's event buffer may hold the whole run, so that is not judged. """
    ids, texts, kinds = database_rows(db, m["tasks"], m["before"])
    followers = [f for c in m["clients"] for f in c["followers"]]
    complete = lost = misordered = dropped = mismatch = 0
    for f in followers:
        expected = ids[f["task"]]
        ok = (f["count"] == len(expected) and f["misordered"] == 0 and expected
              and f["first"] == expected[0] and f["last"] == expected[-1])
        complete += bool(ok)
        lost += max(0, len(expected) - f["count"])
        misordered += f["misordered"] + f["seq_misordered"]
        dropped += bool(f["closed"]) or bool(f["events"].get("resync"))
        mismatch += f["mismatch"]
    # the agents' lines in the database, as bench/agents.py checks them
    db_lost = db_dup = db_reordered = emitted_total = 0
    for t in m["tasks"]:
        ns = [n for n, _ in texts[t]]
        tags = {tag for _, tag in texts[t]}
        record = records.get(next(iter(tags))) if len(tags) == 1 else None
        n_emitted = record["emitted"] if record else 0
        emitted_total += n_emitted
        db_lost += len(set(range(1, n_emitted + 1)) - set(ns))
        db_dup += len(ns) - len(set(ns))
        db_reordered += sum(b < a for a, b in zip(ns, ns[1:]))
        print(f"task {t}: {m['final'].get(t)}, agent emitted {n_emitted}, {len(ids[t])} rows "
              f"in the database since the clients connected")
    # a record counts the lines it printed (a Claude agent: its texts; older: only texts)
    sustained = len(records) == len(m["tasks"]) and all(
        r.get("lines", r["emitted"]) >= int(args.rate * args.seconds) for r in records.values())
    parsed = parsed_lines(m, texts, kinds, records)
    hist = {k: merge(c["hist"][k] for c in m["clients"])
            for k in ("total", "ingest", "deliver", "fanout", "fanout_app")}
    p50, p99 = hist_percentile(hist["fanout"], .5), hist_percentile(hist["fanout"], .99)
    a50, a99 = hist_percentile(hist["fanout_app"], .5), hist_percentile(hist["fanout_app"], .99)
    e50, e99 = hist_percentile(hist["total"], .5), hist_percentile(hist["total"], .99)
    ingest99, deliver99 = hist_percentile(hist["ingest"], .99), \
        hist_percentile(hist["deliver"], .99)
    client_cpu = sum(c["cpu"] for c in m["clients"])
    print(f"fan-out: {sum(hist['fanout'].values()):,} task:log messages and "
          f"{sum(hist['total'].values()):,} text entries timed at the clients; "
          f"regex/json mismatches {mismatch}; CPU while the agents ran ({m['ran']:.1f} s): "
          f"server {m['server_cpu']:.1f} s ({m['server_cpu'] / m['ran']:.0%} of a core), "
          f"/ws clients {client_cpu:.1f} s in all; the machine's {os.cpu_count()} CPUs were "
          f"{m['machine_busy']:.0%} busy")
    idle_lat, _, idle_paths = m["idle"]
    load_lat, load_errors, load_paths = m["loaded"]
    for path in m["api_paths"]:
        a, b = sorted(idle_paths.get(path, [0])), sorted(load_paths.get(path, [0]))
        print(f"  {path:<44} idle p50 {percentile(a, .5) * 1000:7.2f} p99 "
              f"{percentile(a, .99) * 1000:7.2f} ms | load p50 {percentile(b, .5) * 1000:7.2f}"
              f" p99 {percentile(b, .99) * 1000:7.2f} ms")
    peak_mb = m["peak"].get("VmHWM", 0) / 1024
    idle_mb = m["idle_rss"] / 1024
    at, sampled = max(m["rss"], key=lambda x: x[1], default=(0, 0))
    print(f"RSS: idle {idle_mb:.0f} MB, sampled max {sampled / 1024:.0f} MB at {at:.0f} s, "
          f"peak (VmHWM) {peak_mb:.0f} MB; timeline (s, MB): "
          + ", ".join(f"{t:.0f}:{r / 1024:.0f}" for t, r in m["rss"][::12]))
    i50, i99 = percentile(idle_lat, .5) * 1000, percentile(idle_lat, .99) * 1000
    l50, l99 = percentile(load_lat, .5) * 1000, percentile(load_lat, .99) * 1000
    n = len(followers)
    rows = [
        result_row("ws_clients_connected", m["connected"], "", goal=f"== {args.clients}",
                   met=m["connected"] == args.clients),
        result_row("agents_sustained", f"{args.agents}x{args.rate:g}/s", "",
                   goal="all lines on time", met=sustained),
        result_row("fanout_p50", p50, "ms", *against(floor, "p50", p50)),
        result_row("fanout_p99", p99, "ms", *against(floor, "p99", p99),
                   goal=f"< {GOAL_FANOUT_P99_MS:g} ms", met=0 < p99 < GOAL_FANOUT_P99_MS),
        result_row("fanout_client_p50", a50, "ms"),
        result_row("fanout_client_p99", a99, "ms"),
        result_row("end_to_end_p50", e50, "ms"),
        result_row("end_to_end_p99", e99, "ms", goal=f"< {GOAL_END_TO_END_P99_MS:g} ms",
                   met=0 < e99 < GOAL_END_TO_END_P99_MS),
        result_row("end_to_end_ingest_p99", ingest99, "ms"),
        result_row("end_to_end_deliver_p99", deliver99, "ms"),
        result_row("clients_complete", complete, "", goal=f"== {n}", met=complete == n),
        result_row("ws_entries_lost", lost, "", goal="== 0", met=lost == 0),
        result_row("ws_misordered", misordered, "", goal="== 0", met=misordered == 0),
        result_row("ws_clients_dropped", dropped, "", goal="== 0", met=dropped == 0),
        result_row("db_lines_lost_dup_reord", db_lost + db_dup + db_reordered, "",
                   goal="== 0", met=db_lost + db_dup + db_reordered == 0),
        result_row("agents_lines_parsed", sum(p["ok"] for p in parsed.values()), "",
                   goal=f"== {len(parsed)}", met=all(p["ok"] for p in parsed.values())),
        result_row("api_p50_load", l50, "ms", i50, i50 / l50),
        result_row("api_p99_load", l99, "ms", i99, i99 / l99, "", None),
        result_row("api_errors", load_errors, "", goal="== 0", met=load_errors == 0),
        result_row("server_cpu_busy", m["server_cpu"] / m["ran"] * 100, "% of 1 core"),
        result_row("machine_cpu_busy", m["machine_busy"] * 100,
                   f"% of {os.cpu_count()} cores"),
        result_row("server_rss_peak", peak_mb, "MB", idle_mb, idle_mb / peak_mb if peak_mb
                   else None, f"< {GOAL_RSS_MB:g} MB", 0 < peak_mb < GOAL_RSS_MB),
        rss_growth_row(m),
        cpu_per_line_row(m, records, floor),
    ]
    if floor is not None:
        rows.append(result_row("fanout_floor_complete", floor["complete"], "",
                               goal=f"== {args.clients}", met=floor["complete"] == args.clients))
        rows.append(result_row("fanout_floor_machine_busy", floor["machine_busy"] * 100,
                               f"% of {os.cpu_count()} cores"))
    slow_rows, slow_summary = slow_figures(m["slow"], top)
    rows += slow_rows
    extra = {"emitted": emitted_total, "ran": m["ran"], "clients": args.clients,
             "db": bool(args.db), "rate": args.rate, "slow_summary": slow_summary,
             "mixed": args.mixed, **({"slow": m["slow"]} if len(m["slow"]) <= 4 else {}),
             "agents": {str(t): p for t, p in parsed.items()},
             "api_paths": {p: {"idle_p99_ms": percentile(sorted(idle_paths.get(p, [0])), .99)
                               * 1000, "load_p99_ms": percentile(sorted(load_paths.get(p, [0])),
                                                                 .99) * 1000}
                           for p in m["api_paths"]}}
    return rows, extra


def rss_growth_row(m):
    """ RSS at the end of the agents' run minus RSS at its middle (MB): once the event buffer
    (16 MiB) has filled, in the first seconds, the server's memory must stay flat. """
    def at(t):  # the last sample taken by t
        return max(((s, kb) for s, kb in m["rss"] if s <= t), default=(0, 0))[1]

    middle, end = at(m["ran"] / 2), at(m["ran"])
    growth = (end - middle) / 1024
    print(f"RSS over the agents' run: {middle / 1024:.0f} MB at {m['ran'] / 2:.1f} s, "
          f"{end / 1024:.0f} MB at {m['ran']:.1f} s: {growth:+.1f} MB in the second half",
          flush=True)
    return result_row("rss_growth_last_half", growth, "MB", goal=f"< {GOAL_RSS_GROWTH_MB:g} MB",
                      met=bool(middle and end) and growth < GOAL_RSS_GROWTH_MB)


def cpu_per_line_row(m, records, floor):
    """ The server's CPU per line its agents printed (µs), the API's share taken out: its
    CPU while the agents ran, less its CPU a second with only the API (the idle phase) times
    the run's seconds. Baseline: the floor's CPU per line at the same rate (it stores and
    sends each line, and has no API); ratio floor/ours; goal: at most GOAL_CPU_PER_LINE_X
    times the floor's. A server that took more than REST_CPU_LIMIT of a core in the rest
    phase (nothing asked, no agent) is busy at rest, and taking that out would make its
    lines look nearly free (issue 42): then nothing is taken out, the figure is its whole
    CPU per line, and the row fails, its goal saying why. """
    lines = sum(r.get("lines", r["emitted"]) for r in records.values())
    busy = m["rest_cpu"] > REST_CPU_LIMIT
    api = 0.0 if busy else m["idle_cpu"] * m["ran"]
    ours = (m["server_cpu"] - api) / lines * 1e6 if lines else None
    base = floor["cpu_per_line"] * 1e6 if floor and floor.get("cpu_per_line") else None
    if busy:
        taken = (f"(the server was busy at rest: {m['rest_cpu']:.1%} of a core with nothing "
                 f"to do, above {REST_CPU_LIMIT:.0%}, so nothing is taken out and the figure "
                 "cannot be judged)")
    else:
        taken = f"- the API's {m['idle_cpu']:.3f} s a second x {m['ran']:.1f} s"
    print(f"CPU per agent line: server {m['server_cpu']:.2f} s while the agents ran "
          f"({m['ran']:.1f} s) {taken} = {m['server_cpu'] - api:.2f} s for {lines:,} lines: "
          + (f"{ours:.1f} µs" if ours is not None else "-")
          + (f"; the floor: {floor['server_cpu']:.2f} s for {floor['lines']:,} lines: "
             f"{base:.1f} µs" if base else ""), flush=True)
    judged = ours is not None and base is not None
    ratio = base / ours if judged and ours > 0 else None
    if busy:
        return result_row("cpu_per_line_us", ours, "µs", base, ratio,
                          f"not judged: busy at rest ({m['rest_cpu']:.0%} of a core > "
                          f"{REST_CPU_LIMIT:.0%}), API not taken out", False)
    return result_row("cpu_per_line_us", ours, "µs", base, ratio,
                      f"<= {GOAL_CPU_PER_LINE_X:g}x floor" if judged else "",
                      ours <= GOAL_CPU_PER_LINE_X * base if judged else None)


def slow_figures(slow, top):
    """ The slow clients' rows, counted over all of them, and a summary for the extra: each
    must be dropped during the run (judged only when `top`) and, reconnecting with ?since=,
    get a replay or resync, never a gap. """
    n = len(slow)
    if not n:
        return [], None
    dropped = [s["dropped_at"] for s in slow.values() if s["dropped_at"] is not None]
    resync = sum("resync" in s["events"] for s in slow.values())
    resumes = collections.Counter(s["resume"].split(" after ")[0] for s in slow.values())
    since_ok = sum(s["resume"].startswith(RESUME_OK) for s in slow.values())
    kinds = collections.Counter("never reads" if not s["rate"] else
                                f"reads {s['rate'] // 1024} KB/s" for s in slow.values())
    if n <= 4:
        for name, s in slow.items():
            at = "never" if s["dropped_at"] is None else f"{s['dropped_at']:.1f} s"
            print(f"slow client {name}: dropped at {at} (last server-side "
                  f"state {s['state']}), then read {s['bytes']:,} bytes: {s['events']}, last "
                  f"{s['last']}, {'EOF' if s['eof'] else 'no EOF (still open)'}; "
                  f"reconnecting with ?since={s['last_seq']}: {s['resume']}")
    print(f"slow clients ({', '.join(f'{c} {k}' for k, c in kinds.items())}): {len(dropped)} "
          f"of {n} dropped during the run"
          + (f" ({min(dropped):.1f}-{max(dropped):.1f} s)" if dropped else "")
          + f", {resync} read resync; reconnecting with ?since=: {dict(resumes)}", flush=True)
    rows = [
        result_row("slow_dropped", len(dropped), "", goal=f"== {n}" if top else "",
                   met=len(dropped) == n if top else None),
        result_row("slow_dropped_by_s", max(dropped) if dropped else None, "s"),
        result_row("slow_got_resync", resync, ""),
        result_row("slow_since_ok", since_ok, "", goal=f"== {n}", met=since_ok == n),
    ]
    return rows, {"clients": n, "kinds": dict(kinds), "dropped": len(dropped),
                  "resync": resync, "resume": dict(resumes)}


def against(floor, key, ours):
    """ (baseline, ratio) of a fan-out figure against the floor's; (None, None) without. """
    if floor is None or not ours:
        return None, None
    return floor[key], floor[key] / ours


def report(rows, extra):
    print_table(rows)
    emit_result("load", rows, **extra)


if __name__ == "__main__":
    main()
