"""The fan-out floor for bench/load.py: bare bottle + gevent doing only the fan-out.

    python bench/_bare_fanout.py <port> <agents> <flood agent argv...>

Served the way Taskboard is served (gevent.pywsgi.WSGIServer + geventwebsocket's
WebSocketHandler, log=None), in its own process, with nothing Taskboard does besides the
fan-out: no database, no events but task:log, no checks. It

  GET  /ws?logs=<task>   keeps the socket: one writer greenlet and one queue per client
  POST /bare/start       starts <agents> flood agents, tasks 1..<agents>: each stdout
                         line is read and parsed (json.loads) on the hub, its text stamped with
                         the time it arrived; a task's lines go out as one task:log message
                         when its last message is at least 100 ms old (as Taskboard's
                         LogWriter does, design §7), encoded once, the same bytes queued for
                         each follower of the task
  GET  /bare/status      {"done": bool, "entries": {task: count}} - done once every agent
                         exited and its last lines went out
  GET  /bare/health

The messages have the shape and key order of Taskboard's (load.py's clients read them with
the same regexes): {"seq", "event": "task:log", "data": {"taskId", "projectId",
"entries": [{"id", "taskId", "runId", "createdAt", "kind", "message", ...}]}}.
"""

from gevent import monkey; monkey.patch_all()  # noqa: E702,I001

import collections
import itertools
import json
import subprocess
import sys
import time

import bottle
import gevent
import gevent.event
import gevent.queue
from gevent.pywsgi import WSGIServer
from geventwebsocket.handler import WebSocketHandler

INTERVAL = 0.1  # seconds between a task's messages (Taskboard's LOG_FLUSH_SECONDS)

app = bottle.Bottle()
followers = collections.defaultdict(set)  # task -> {queue}
pending = collections.defaultdict(list)  # task -> [entry]
sent = collections.Counter()  # task -> entries sent
seqs, ids = itertools.count(1), itertools.count(1)
agents = []


_second = [None, ""]


def stamp():
    """Taskboard's createdAt: "YYYY-MM-DDTHH:MM:SS.mmmZ" (the date part made once a second)."""
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))]
    return f"{_second[1]}{int((now - second) * 1000):03d}Z"


def read_agent(task, proc, wake):
    for line in proc.stdout:
        event = json.loads(line)
        if event.get("type") != "assistant":
            continue
        for block in event["message"]["content"]:
            if block.get("type") == "text":
                pending[task].append({"id": None, "taskId": task, "runId": task,
                                      "createdAt": stamp(), "kind": "text",
                                      "message": block["text"], "tool": None,
                                      "isError": None, "durationMs": None})
                wake.set()
    proc.wait()
    wake.set()


def flush_task(task, reader, wake):
    last = 0.0
    while True:
        if not reader.dead:
            wake.wait()
        wake.clear()
        wait = last + INTERVAL - time.monotonic()
        if wait > 0 and not reader.dead:
            gevent.sleep(wait)
        entries, pending[task] = pending[task], []
        if entries:
            last = time.monotonic()
            for entry in entries:
                entry["id"] = next(ids)
            frame = json.dumps({"seq": next(seqs), "event": "task:log",
                                "data": {"taskId": task, "projectId": 1, "entries": entries}},
                               separators=(",", ":"))
            sent[task] += len(entries)
            for queue in list(followers[task]):
                queue.put(frame)
        elif reader.dead:
            return


@app.post("/bare/start")
def start():
    for task in range(1, int(sys.argv[2]) + 1):
        proc = subprocess.Popen(sys.argv[3:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
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
    WSGIServer(("127.0.0.1", int(sys.argv[1])), app, handler_class=WebSocketHandler,
               log=None).serve_forever()
