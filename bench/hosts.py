"""Agents on another machine (design §15): 5 agents on a host against 5 on this machine.

Run it by hand, alone on the machine, with the Python that has Taskboard's dependencies
(and Debian's openssh-server); it is not a test:

    python bench/hosts.py                  # 5 + 5 agents x 500 lines/s, 10 s, 3 rounds
    python bench/hosts.py --quick          # 1 round of 5 s
    python bench/hosts.py --rate 2000 --seconds 20 --rounds 2 --clients 20

One Taskboard (`--agent-command "<python> bench/_flood_agent.py"`) and one real sshd on a
loopback port with its own host key and a key-only login (tests/ssh_helpers.py): the
"host" is this machine through that sshd, added, checked and trusted through the API as a
person would. Two projects: one here, one on the host (its clone made from a local
repository). Each round runs 5 agents of the local project, then 5 of the remote one, each
flooding `--rate` stream-json text lines a second for `--seconds` s (bench/_flood_agent.py),
with `--clients` /ws followers spread over the running tasks. For every text entry a
follower receives:

  end to end   its arrival (time.time()) minus the agent's time in its text: stdout -> /ws,
               the §7 batching (up to 100 ms) included; for a remote agent, the SSH channel
               and the wrapper too
  fan-out      its arrival minus the newest createdAt of its message (the server's batch)

The local runs are the baseline: the goal is remote p99 <= 1.5x local p99 (end to end and
fan-out). Also: the most TCP connections from the board to the host seen at any moment
during the remote runs (sampled every 0.1 s from /proc/net/tcp; goal 1), and the logins
sshd accepted during the whole run (the board's one master, nothing else).
"""

import argparse
import datetime as dt
import http.client
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time

import websocket
from _common import (
    REPO_ROOT,
    TOKEN,
    Server,
    emit_result,
    free_port,
    percentile,
    print_table,
    request,
    result_row,
    taskboard_env,
)

sys.path.insert(0, os.path.join(REPO_ROOT, "tests"))
from ssh_helpers import SshServer, sshd_missing  # noqa: E402

FLOOD_AGENT = os.path.join(REPO_ROOT, "bench", "_flood_agent.py")
TEXT_RE = re.compile(r"^(\d+) (\d+\.\d+) ")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=5)
    parser.add_argument("--rate", type=int, default=500, help="lines/s per agent")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=10, help="/ws followers")
    parser.add_argument("--quick", action="store_true", help="one round of 5 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds = 1, 5.0
    return args


def api(port, method, path, body=None, status=200):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        got, answer = request(conn, method, path, body)
    finally:
        conn.close()
    if got != status:
        raise RuntimeError(f"{method} {path}: {got} {answer}")
    return answer


class Follower(threading.Thread):
    """One /ws?logs=<task> client: the end-to-end and fan-out seconds of every text entry."""

    def __init__(self, port, task_id):
        super().__init__(daemon=True)
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{port}/ws?logs={task_id}", timeout=60,
            header=[f"Authorization: Bearer {TOKEN}"])
        self.end_to_end, self.fanout = [], []
        self.stopped = False

    def run(self):
        while not self.stopped:
            try:
                raw = self.ws.recv()
            except (websocket.WebSocketException, OSError):
                return
            arrived = time.time()
            if not raw or '"task:log"' not in raw[:80]:
                continue
            entries = json.loads(raw)["data"]["entries"]
            stamps = [iso_seconds(e["createdAt"]) for e in entries]
            newest = max(stamps) if stamps else None
            for entry in entries:
                found = TEXT_RE.match(entry.get("message") or "")
                if found and entry["kind"] == "text":
                    self.end_to_end.append(arrived - float(found.group(2)))
                    self.fanout.append(arrived - newest)

    def stop(self):
        self.stopped = True
        self.ws.close()


def iso_seconds(stamp):
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def board_connections(ssh_port):
    """Established TCP connections to the sshd's port (from /proc/net/tcp)."""
    count = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            remote, state = parts[2], parts[3]
            if state == "01" and int(remote.split(":")[1], 16) == ssh_port:
                count += 1
    return count


def one_phase(args, port, project_id, sshd, label):
    """Start --agents flooding tasks of a project with followers; their figures."""
    tasks = [api(port, "POST", f"/api/projects/{project_id}/tasks",
                 {"title": f"{label} {n}", "description": "flood"}, 201)["id"]
             for n in range(args.agents)]
    followers = [Follower(port, tasks[n % len(tasks)]) for n in range(args.clients)]
    for f in followers:
        f.start()
    peak, sampling = [0], [True]

    def sample():
        while sampling[0]:
            peak[0] = max(peak[0], board_connections(sshd.port))
            time.sleep(0.1)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for task_id in tasks:
        api(port, "PATCH", f"/api/tasks/{task_id}/status", {"status": "in_progress"})
    deadline = time.monotonic() + args.seconds * 3 + 60
    while time.monotonic() < deadline:
        states = [api(port, "GET", f"/api/tasks/{t}")["status"] for t in tasks]
        if all(s in ("testing", "failed") for s in states):
            break
        time.sleep(0.5)
    else:
        raise RuntimeError(f"{label}: the agents did not finish: {states}")
    if "failed" in states:
        raise RuntimeError(f"{label}: an agent failed: {states}")
    time.sleep(1.0)  # the last batches
    sampling[0] = False
    for f in followers:
        f.stop()
    return ([x for f in followers for x in f.end_to_end],
            [x for f in followers for x in f.fanout], peak[0])


def main(argv=None):
    args = parse_args(argv)
    missing = sshd_missing()
    if missing:
        sys.exit(f"cannot run: {missing}")
    tmp = tempfile.mkdtemp(prefix="taskboard-bench-hosts-")
    sshd = SshServer(tmp)
    port = free_port()
    flood = f"env FLOOD_RATE={args.rate} FLOOD_SECONDS={args.seconds:g} " \
        f"{shlex.quote(sys.executable)} {shlex.quote(FLOOD_AGENT)}"
    env = taskboard_env() | {"FLOOD_RATE": str(args.rate), "FLOOD_SECONDS": f"{args.seconds:g}"}
    argv = [sys.executable, "taskboard.py", "--port", str(port), "--db",
            os.path.join(tmp, "data", "tb.db"), "--agent-command",
            f"{shlex.quote(sys.executable)} {shlex.quote(FLOOD_AGENT)}"]
    code = os.path.join(tmp, "code")
    os.makedirs(code)
    for step in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "one"]):
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *step], cwd=code,
                       check=True)
    try:
        with Server("taskboard", argv, os.path.join(tmp, "server.log"), "/api/health", port,
                    env):
            host = api(port, "POST", "/api/hosts", {
                "name": "bench", "address": sshd.address, "port": sshd.port,
                "identityFile": sshd.identity, "baseDir": os.path.join(tmp, "host"),
                "maxConcurrent": args.agents, "agentCommands": {"claude": flood}}, 201)
            shown = api(port, "POST", f"/api/hosts/{host['id']}/check")["lastCheck"]
            api(port, "PUT", f"/api/hosts/{host['id']}", {"hostKey": shown["fingerprint"]})
            checked = api(port, "POST", f"/api/hosts/{host['id']}/check")["lastCheck"]
            assert checked["ok"], checked
            local = api(port, "POST", "/api/projects", {
                "name": "Here", "slug": "here", "workingDir": code, "sandbox": "none",
                "maxConcurrent": args.agents, "permissionMode": "auto-accept"}, 201)
            remote = api(port, "POST", "/api/projects", {
                "name": "There", "slug": "there", "workingDir": code, "repoUrl": code,
                "host": host["id"], "maxConcurrent": args.agents, "sandbox": "none",
                "permissionMode": "auto-accept"}, 201)
            figures = {"local": ([], [], 0), "remote": ([], [], 0)}
            for round_ in range(args.rounds):
                for label, project in (("local", local), ("remote", remote)):
                    e2e, fan, peak = one_phase(args, port, project["id"], sshd, label)
                    old = figures[label]
                    figures[label] = (old[0] + e2e, old[1] + fan, max(old[2], peak))
                    print(f"round {round_ + 1} {label}: {len(e2e)} entries, end to end p99 "
                          f"{percentile(sorted(e2e), 0.99) * 1000:.1f} ms", flush=True)
    finally:
        sshd.stop()
    with open(sshd.log) as f:
        logins = f.read().count("Accepted publickey") - 1  # the rig's own first probe
    rows = []
    for name, index in (("end_to_end", 0), ("fanout", 1)):
        here = sorted(figures["local"][index])
        there = sorted(figures["remote"][index])
        for q in (0.5, 0.99):
            ours, base = percentile(there, q) * 1000, percentile(here, q) * 1000
            ratio = ours / base if base else None
            rows.append(result_row(f"remote_{name}_p{int(q * 100)}", round(ours, 1), "ms",
                                   round(base, 1), ratio and round(ratio, 2),
                                   "<= 1.5x local" if q == 0.99 else "",
                                   ratio <= 1.5 if q == 0.99 and ratio else None))
    rows.append(result_row("tcp_connections_to_host", figures["remote"][2], "", goal="1",
                           met=figures["remote"][2] == 1))
    rows.append(result_row("sshd_logins_accepted", logins, "", goal="1", met=logins == 1))
    print_table(rows, value="remote", baseline="local")
    emit_result("hosts", rows, rate=args.rate, agents=args.agents, clients=args.clients)


if __name__ == "__main__":
    main()
