"""Taskboard under load: 200 /ws log followers while 5 agents flood and the API is busy.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/load.py                       # 200 clients, 5 agents x 2,000 lines/s, 30 s
    python bench/load.py --quick               # the same for 10 s
    python bench/load.py --db <file>           # on a copy of that database (e.g. scale.py's)
    python bench/load.py --clients 50 --seconds 20 --no-slow
    python bench/load.py --mixed               # the agents: claude, codex, gemini, opencode, claude

The scenario (issue 9): Taskboard runs with `--agent-command "<python> bench/_flood_agent.py"`
(bench/agents.py's fake CLI: `--rate` stream-json text lines a second for `--seconds` s, each
text "<n> <time.time()> <tag> <padding>"); the bench creates a project with `--agents` tasks
(maxConcurrent = that) and moves them all to in_progress. Meanwhile:

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
  fan-out floor    (unless --no-floor) first, the same clients and agents against
                   bench/_bare_fanout.py: bare bottle + gevent doing only the fan-out (each
                   agent line parsed, batched per task every 100 ms, one encoded message
                   per batch sent to the task's followers; no database, no API traffic). Its
                   fan-out p50/p99 are the baseline of fanout_p50/p99 (ratio floor/ours):
                   what this machine allows at this load without Taskboard's other work
  API traffic      `--api-rate` GETs a second on one keep-alive connection, a mix of the
                   projects summary, a task list, a task, its logs (?limit=500), stats,
                   activity (limit 50) and agent usage; baseline: the same mix on the idle
                   server just before (same length), p50/p99 and per route
  memory, CPU      the server's RSS from /proc/<pid>/status every 0.25 s (VmRSS), its peak
                   (VmHWM), and its RSS when idle before the load (the baseline); the CPU
                   time it used while the agents ran (/proc/<pid>/stat), as a share of one
                   core (a gevent server uses one), and the clients' CPU time
  slow clients     (unless --no-slow) two more /ws?logs=all connections with a 4 KB receive
                   buffer: one never reads after the handshake, one reads 4 KB every 0.25 s.
                   Each must be dropped by the server during the run (its connection leaves
                   ESTABLISHED in /proc/net/tcp); afterwards it is drained (did `resync`
                   arrive?) and reconnects with ?since=<the last seq it got>: the first
                   event must be `resync` or the very next seq (a replay), never a gap. The
                   other clients must not be dropped
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

How to read the output: progress lines, then a table (figure, value, baseline, ratio, goal).
Goals (issue 9): fan-out p99 < 100 ms, server RSS < 300 MB, no event lost or reordered for
any client, slow clients dropped. The last line, BENCH_RESULT {...}, is for bench/run.py.
Clients, agents and server share the machine's CPUs: a 2-core machine is the worst case.
"""

import argparse
import base64
import collections
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
    taskboard_env,
)
from agents import FLOOD_AGENT, TEXT, call, emitted, wait_for_runs

GOAL_FANOUT_P99_MS, GOAL_RSS_MB = 100.0, 300.0
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
    parser.add_argument("--rate", type=float, default=2000, help="lines/s per agent")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long agents write")
    parser.add_argument("--api-rate", type=float, default=50, help="API requests/s")
    parser.add_argument("--pad", type=int, default=80, help="padding characters per text")
    parser.add_argument("--db", help="run on a copy of this database")
    parser.add_argument("--no-slow", action="store_true", help="no slow clients")
    parser.add_argument("--no-floor", action="store_true",
                        help="no fan-out floor (bare gevent) run first")
    parser.add_argument("--quick", action="store_true", help="10 s of flooding")
    parser.add_argument("--mixed", action="store_true",
                        help="agents of mixed CLIs: " + ", ".join(MIXED))
    parser.add_argument("--taskboard", default=os.path.join(REPO_ROOT, "taskboard.py"),
                        help="the taskboard.py to run (e.g. a patched copy, to try a fix)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 10.0
    args.agents = min(args.agents, 5)
    return args


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

def ws_connect(port, path, rcvbuf=None, timeout=10.0):
    """ A connected, upgraded socket (blocking) and the bytes already read past the 101. """
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  f"Authorization: {AUTH_HEADER}\r\n"  # Taskboard's /ws needs it; bare ignores
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
    for index, task_id in assignments:
        sock, rest = ws_connect(port, f"/ws?logs={task_id}")
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

    def resume(self, since):
        """ The first event a reconnection with ?since= gets: replay, resync or a gap. """
        t0 = time.monotonic()
        try:
            sock, buf = ws_connect(self.port, f"/ws?logs=all&since={since}", timeout=60)
            sock.settimeout(60)
            # the first frame may have come with the handshake's answer, already in buf
            got = [f for f in frames(buf) if f[0] == 1 and FRAME_HEAD.match(f[1])]
            while not got:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                buf += chunk
                got = [f for f in frames(buf) if f[0] == 1 and FRAME_HEAD.match(f[1])]
            sock.close()
        except OSError as exc:
            return f"NO ANSWER ({exc!r} after {time.monotonic() - t0:.0f} s)"
        if not got:
            return "NO ANSWER (closed)"
        head = FRAME_HEAD.match(got[0][1])
        took = f" after {time.monotonic() - t0:.1f} s"
        if head[2] == b"resync":
            return "resync" + took
        seq = int(head[1])
        return ("replay" if seq == since + 1 else f"GAP (since={since}, then seq {seq})") + took


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
    print(f"bench/load.py: {args.clients} /ws clients in {args.workers} processes, "
          f"{args.agents} agents x {args.rate:g} lines/s for {args.seconds:g} s, API at "
          f"{args.api_rate:g} req/s{', slow clients' if not args.no_slow else ''}"
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
    flood_dir, work_dir, db = (os.path.join(tmp, "flood"), os.path.join(tmp, "work"),
                               os.path.join(tmp, "taskboard.db"))
    os.makedirs(flood_dir)
    os.makedirs(work_dir)
    big_project = None
    if args.db:
        t0 = time.monotonic()
        for suffix in ("", "-wal"):
            if os.path.exists(args.db + suffix):
                shutil.copyfile(args.db + suffix, db + suffix)
                # NOTE: else the kernel writes the copy back while the load runs, and the
                # server's syncs (checkpoints) wait for gigabytes that are not its own
                with open(db + suffix, "rb+") as copy:
                    os.fsync(copy.fileno())
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        big_project = conn.execute("SELECT project_id FROM tasks GROUP BY project_id "
                                   "ORDER BY COUNT(*) DESC LIMIT 1").fetchone()
        conn.close()
        big_project = big_project[0] if big_project else None
        print(f"copied the database ({os.path.getsize(db) / 1e9:.2f} GB) in "
              f"{time.monotonic() - t0:.1f} s", flush=True)
    os.environ.update(FLOOD_RATE=str(args.rate), FLOOD_SECONDS=str(args.seconds),
                      FLOOD_PAD=str(args.pad), FLOOD_DIR=flood_dir,
                      FLOOD_LINES_PER_MESSAGE="1", **agent_env(args))
    floor = None if args.no_floor else fanout_floor(args, ctx, tmp)
    port = free_port()
    server = Server("taskboard", [sys.executable, args.taskboard, "--port", str(port), "--db", db,
                                  "--agent-command", f"{sys.executable} {FLOOD_AGENT}"],
                    os.path.join(tmp, "taskboard.log"), "/api/health", port,
                    env=taskboard_env())
    with server:
        try:
            measured = measure(args, ctx, pool, port, work_dir, server.proc.pid, big_project)
        except Exception:
            print(f"server log tail:\n{server.log_tail()}")
            raise
        if any(s != "testing" for s in measured["final"].values()):
            print(f"server log tail:\n{server.log_tail()}")
    return figures(args, measured, db, emitted(flood_dir), floor)


def fanout_floor(args, ctx, tmp):
    """ The fan-out of bench/_bare_fanout.py to the same clients at the same load:
    {"p50", "p99" (ms), "complete", "ran", "server_cpu", "machine_busy"}. """
    port = free_port()
    floor_dir = os.path.join(tmp, "floor")
    os.makedirs(floor_dir)
    run_dir, os.environ["FLOOD_DIR"] = os.environ["FLOOD_DIR"], floor_dir  # the run's records
    # count Taskboard's lines only
    tasks = list(range(1, args.agents + 1))
    server = Server("bare fan-out", [sys.executable, BARE_FANOUT, str(port), str(args.agents),
                                     sys.executable, FLOOD_AGENT],
                    os.path.join(tmp, "bare_fanout.log"), "/bare/health", port)
    try:
        with server:
            ready, stop, results = ctx.Queue(), ctx.Event(), ctx.Queue()
            heard = ctx.RawValue("d", 0.0)
            shares = [[] for _ in range(args.workers)]
            for i in range(args.clients):
                shares[i % args.workers].append((i, tasks[i % len(tasks)]))
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
    finally:
        os.environ["FLOOD_DIR"] = run_dir
    sent = {int(t): n for t, n in status["entries"].items()}
    followers = [f for c in clients for f in c["followers"]]
    complete = sum(f["count"] == sent.get(f["task"]) and not f["misordered"]
                   for f in followers)
    hist = merge(c["hist"]["fanout"] for c in clients)
    floor = {"p50": hist_percentile(hist, .5), "p99": hist_percentile(hist, .99),
             "complete": complete, "ran": ran, "server_cpu": server_cpu,
             "machine_busy": machine[0] / max(1e-9, sum(machine))}
    print(f"fan-out floor (bare gevent, no database): {connected} clients, p50 "
          f"{floor['p50']:.1f} ms, p99 {floor['p99']:.1f} ms; {complete} of {len(followers)} "
          f"clients got every entry in order; {sum(sent.values()):,} entries in {ran:.1f} s, "
          f"server CPU {server_cpu:.1f} s ({server_cpu / ran:.0%} of a core), the machine's "
          f"{os.cpu_count()} CPUs {floor['machine_busy']:.0%} busy", flush=True)
    return floor


def measure(args, ctx, pool, port, work_dir, pid, big_project):
    project = call(port, "POST", "/api/projects", {"name": "Load", "slug": "bench-load",
                                                   "workingDir": work_dir})["id"]
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
    idle = pool.apply(paced_by_path, (port, api_paths, args.api_rate, time.monotonic() + 0.2,
                                      idle_window))
    show_api("idle", idle)
    before = {t: (call(port, "GET", f"/api/tasks/{t}/logs?limit=1") or [{"id": 0}])[-1]["id"]
              for t in tasks}

    # the clients: workers first (each waits for all its connections), then the slow ones
    ready, stop, results = ctx.Queue(), ctx.Event(), ctx.Queue()
    heard = ctx.RawValue("d", 0.0)  # time.time() of the latest bytes any client received
    shares = [[] for _ in range(args.workers)]
    for i in range(args.clients):
        shares[i % args.workers].append((i, tasks[i % len(tasks)]))
    workers = [ctx.Process(target=ws_worker, args=(port, share, ready, stop, results, heard),
                           daemon=True) for share in shares if share]
    for w in workers:
        w.start()
    connected = sum(ready.get(timeout=60) for _ in workers)
    slow = [] if args.no_slow else [SlowClient("never_reads", port, 0),
                                    SlowClient("trickle_16KBps", port, 16384)]
    time.sleep(0.5)  # every subscription is in place
    print(f"{connected} clients connected (+{len(slow)} slow ones); RSS idle "
          f"{idle_rss / 1024:.0f} MB", flush=True)

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
        for s in slow:
            state = states.get(s.local_port, "gone")
            if state != "01" and s.dropped_at is None:
                s.dropped_at = now - started
                print(f"slow client {s.name} dropped after {s.dropped_at:.1f} s "
                      f"(server side: {state})", flush=True)
            states_seen[s.name] = state
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
    slow_out = {}
    for s in slow:
        slow_out[s.name] = {"dropped_at": s.dropped_at, "state": states_seen.get(s.name),
                            **s.drained()}
    return {"tasks": tasks, "clis": clis, "before": before, "final": final, "idle": idle,
            "loaded": loaded, "idle_rss": idle_rss, "rss": rss, "peak": peak,
            "clients": clients, "slow": slow_out, "connected": connected, "ran": ran,
            "server_cpu": server_cpu, "machine_busy": machine[0] / max(1e-9, sum(machine)),
            "api_paths": api_paths}


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


def figures(args, m, db, records, floor=None):
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
        result_row("end_to_end_p99", e99, "ms"),
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
    ]
    if floor is not None:
        rows.append(result_row("fanout_floor_complete", floor["complete"], "",
                               goal=f"== {args.clients}", met=floor["complete"] == args.clients))
        rows.append(result_row("fanout_floor_machine_busy", floor["machine_busy"] * 100,
                               f"% of {os.cpu_count()} cores"))
    for name, s in m["slow"].items():
        got_resync = "resync" in s["events"]
        print(f"slow client {name}: dropped at {s['dropped_at']} s (last server-side state "
              f"{s['state']}), then read {s['bytes']:,} bytes: {s['events']}, last "
              f"{s['last']}, {'EOF' if s['eof'] else 'no EOF (still open)'}; reconnecting "
              f"with ?since={s['last_seq']}: {s['resume']}")
        rows.append(result_row(f"slow_{name}_dropped_s", s["dropped_at"], "s",
                               goal="dropped during the run", met=s["dropped_at"] is not None))
        rows.append(result_row(f"slow_{name}_got_resync", "yes" if got_resync else "no"))
        rows.append(result_row(f"slow_{name}_since", s["resume"], "",
                               goal="replay or resync", met=s["resume"].startswith(
                                   ("replay", "resync"))))
    extra = {"emitted": emitted_total, "ran": m["ran"], "clients": args.clients,
             "db": bool(args.db), "slow": m["slow"], "mixed": args.mixed,
             "agents": {str(t): p for t, p in parsed.items()},
             "api_paths": {p: {"idle_p99_ms": percentile(sorted(idle_paths.get(p, [0])), .99)
                               * 1000, "load_p99_ms": percentile(sorted(load_paths.get(p, [0])),
                                                                 .99) * 1000}
                           for p in m["api_paths"]}}
    return rows, extra


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
