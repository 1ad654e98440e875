"""The fan-out floor for bench/load.py: bare bottle + gevent storing each batch, then its fan-out.

    python bench/_bare_fanout.py <port> <agents> <database> <flood agent argv...>

Served the way Taskboard is served (gevent.pywsgi.WSGIServer + geventwebsocket's
WebSocketHandler, log=None), in its own process, with nothing Taskboard does besides what
design §6 and §7 make every agent line cost: parse it, store it, send it. No API, no events
but task:log, no checks, no tasks table. It

  GET  /ws?logs=<task>   keeps the socket: one writer greenlet and one queue per client
  POST /bare/start       starts <agents> flood agents, tasks 1..<agents>: each stdout
                         line is read and parsed (json.loads) on the hub and stamped with
                         the time it arrived; its text blocks become log entries. A task's
                         lines are written when its last batch is at least 100 ms old (as
                         Taskboard's LogWriter does, design §7), then go out as one task:log
                         message, encoded once, the same bytes queued for each follower
  GET  /bare/status      {"done": bool, "entries": {task: count}} - done once every agent
                         exited and its last lines went out
  GET  /bare/health

Storing, as design §6 and Taskboard's LogWriter / insert_log_rows() do: <database> is a
SQLite file in WAL mode (synchronous=NORMAL, as Taskboard opens its own) with Taskboard's
`logs` (the entries) and `task_events` (every raw stdout line), their columns, AUTOINCREMENT
ids and by-task indexes copied from taskboard.py's migrations (no foreign key: there is no
tasks table). Each batch is ONE transaction (BEGIN IMMEDIATE, the entries, then the raw
lines, COMMIT), run the way Taskboard's tx() / in_thread() run a write: in a real OS thread
of gevent's threadpool, under one cooperative write lock, so the hub is not blocked while
SQLite works. SQLite checkpoints the WAL itself, in that thread (Taskboard does it in a
thread of its own every second). The message goes out after the commit.

The messages have the shape and key order of Taskboard's (load.py's clients read them with
the same regexes): {"seq", "event": "task:log", "data": {"taskId", "projectId",
"entries": [{"id", "taskId", "runId", "createdAt", "kind", "message", ...}]}}; an entry's id
is its rowid in `logs`.
"""

from gevent import monkey; monkey.patch_all()  # noqa: E702,I001

import collections
import itertools
import json
import sqlite3
import subprocess
import sys
import time

import bottle
import gevent
import gevent.event
import gevent.lock
import gevent.queue
from gevent.pywsgi import WSGIServer
from geventwebsocket.handler import WebSocketHandler

INTERVAL = 0.1  # seconds between a task's messages (Taskboard's LOG_FLUSH_SECONDS)
#: taskboard.py's migrations 0001 (logs), 0002 (task_events) and 0008 (logs.author), less
#: the foreign keys to tasks
SCHEMA = """
CREATE TABLE IF NOT EXISTS logs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER NOT NULL,
  run_id INTEGER,
  created_at TEXT NOT NULL,
  kind TEXT NOT NULL,
  message TEXT NOT NULL,
  tool TEXT,
  is_error INTEGER,
  duration_ms INTEGER,
  author TEXT
);
CREATE INDEX IF NOT EXISTS logs_by_task ON logs(task_id, id);
CREATE TABLE IF NOT EXISTS task_events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER NOT NULL,
  run_id INTEGER,
  seq INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  kind TEXT NOT NULL,
  raw TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS task_events_by_task ON task_events(task_id, id);
"""
INSERT_ENTRIES = ("INSERT INTO logs (task_id, run_id, created_at, kind, message, tool, "
                  "is_error, duration_ms, author) VALUES (?,?,?,?,?,?,?,?,?)")
INSERT_LINES = ("INSERT INTO task_events (task_id, run_id, seq, created_at, kind, raw) "
                "VALUES (?,?,?,?,?,?)")

app = bottle.Bottle()
followers = collections.defaultdict(set)  # task -> {queue}
pending = collections.defaultdict(list)  # task -> [entry row]
raw_lines = collections.defaultdict(list)  # task -> [task_events row]
sent = collections.Counter()  # task -> entries sent
seqs = itertools.count(1)
agents = []
db = None  # the sqlite3 connection, used by one threadpool thread at a time
write_lock = gevent.lock.Semaphore()  # Taskboard's WRITE_LOCK: one write at a time


_second = [None, ""]


def stamp():
    """Taskboard's createdAt: "YYYY-MM-DDTHH:MM:SS.mmmZ" (the date part made once a second)."""
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))]
    return f"{_second[1]}{int((now - second) * 1000):03d}Z"


def open_db(path):
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA)
    return conn


def store(entries, lines):
    """One transaction: the entries, then the raw lines. In a threadpool thread; returns
    the first entry's id (one writer, AUTOINCREMENT: the ids are consecutive)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        first = None
        if entries:
            db.executemany(INSERT_ENTRIES, entries)
            first = db.execute("SELECT last_insert_rowid()").fetchone()[0] - len(entries) + 1
        if lines:
            db.executemany(INSERT_LINES, lines)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return first


def read_agent(task, proc, wake):
    seq = 0
    for line in proc.stdout:
        text = line.rstrip("\r\n")
        event = json.loads(text)
        at = stamp()  # the line and its entries: one stamp
        seq += 1
        kind = event.get("type")
        raw_lines[task].append((task, task, seq, at, kind, text))
        if kind == "assistant":
            for block in event["message"]["content"]:
                if block.get("type") == "text":
                    pending[task].append((task, task, at, "text", block["text"], None, None,
                                          None, None))
        wake.set()
    proc.wait()
    wake.set()


def flush_task(task, reader, wake):
    last = 0.0
    pool = gevent.get_hub().threadpool
    while True:
        if not reader.dead:
            wake.wait()
        wake.clear()
        wait = last + INTERVAL - time.monotonic()
        if wait > 0 and not reader.dead:
            gevent.sleep(wait)
        rows, pending[task] = pending[task], []
        lines, raw_lines[task] = raw_lines[task], []
        if rows or lines:
            last = time.monotonic()
            with write_lock:
                first = pool.apply(store, (rows, lines))
        if rows:
            entries = [{"id": first + i, "taskId": t, "runId": r, "createdAt": at, "kind": k,
                        "message": msg, "tool": tool, "isError": err, "durationMs": ms,
                        "author": who}
                       for i, (t, r, at, k, msg, tool, err, ms, who) in enumerate(rows)]
            frame = json.dumps({"seq": next(seqs), "event": "task:log",
                                "data": {"taskId": task, "projectId": 1, "entries": entries}},
                               separators=(",", ":"))
            sent[task] += len(entries)
            for queue in list(followers[task]):
                queue.put(frame)
        elif not lines and reader.dead:
            return


@app.post("/bare/start")
def start():
    for task in range(1, int(sys.argv[2]) + 1):
        proc = subprocess.Popen(sys.argv[4:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                text=True)
        wake = gevent.event.Event()
        reader = gevent.spawn(read_agent, task, proc, wake)
        agents.append((reader, gevent.spawn(flush_task, task, reader, wake)))
    return {"started": len(agents)}


@app.get("/bare/status")
def status():
    return {"done": bool(agents) and all(g.dead for pair in agents for g in pair),
            "entries": dict(sent)}


@app.get("/bare/health")
def health():
    return {"ok": True}


@app.get("/ws")
def ws():
    sock = bottle.request.environ["wsgi.websocket"]
    task = int(bottle.request.query.logs)
    queue = gevent.queue.Queue()
    followers[task].add(queue)

    def write():
        for frame in queue:
            sock.send(frame)

    writer = gevent.spawn(write)
    try:
        while sock.receive() is not None:
            pass
    finally:
        followers[task].discard(queue)
        writer.kill()
    return ""


if __name__ == "__main__":
    db = open_db(sys.argv[3])
    WSGIServer(("127.0.0.1", int(sys.argv[1])), app, handler_class=WebSocketHandler,
               log=None).serve_forever()
