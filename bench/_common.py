"""Shared helpers for the benchmarks in bench/: servers, a load generator, reporting.

Nothing here is timed by itself. A benchmark starts its servers with `Server`, drives them
with `LoadGenerator.run()` and prints the figures with `print_report()`.
"""

import http.client
import json
import math
import multiprocessing
import os
import secrets
import signal
import socket
import subprocess
import time

#: The root of the checkout (bench/ lives directly under it).
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: How long a server may take to answer its health route before we give up.
START_TIMEOUT = 20.0

#: Linux only. gevent.pywsgi sends a response's headers and body in two send() calls, so with
#: Nagle on (the default) a small body waits for the client's delayed ACK: ~40 ms per request
#: on a keep-alive connection, for any server "served the same way". The clients therefore
#: ask for an immediate ACK after each request, so the figures show the servers' own work.
TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


def quickack(conn):
    """ Make the kernel ACK the coming response at once (see TCP_QUICKACK above). """
    if TCP_QUICKACK is not None and conn.sock is not None:
        conn.sock.setsockopt(socket.IPPROTO_TCP, TCP_QUICKACK, 1)


#: The board always needs a token (design §11 v3). Every benchmark starts Taskboard with this
#: one through the environment (never argv: any local user can read the process list), and
#: its clients send it. Made per run; the client processes are forked, so they share it.
TOKEN = secrets.token_urlsafe(32)
AUTH_HEADER = f"Bearer {TOKEN}"
#: What would override or contradict the token we give (design §11: --no-auth plus a token
#: is refused), taken out of the server's environment.
AUTH_ENV = ("TASKBOARD_TOKEN", "TASKBOARD_TOKEN_FILE", "TASKBOARD_NO_AUTH")


def auth_headers(auth=True):
    """ The Authorization header, or none (for a `--no-auth` board: any bearer there is 401);
    `auth` a string: that bearer instead of TOKEN (a personal token, design §19). """
    if isinstance(auth, str):
        return {"Authorization": f"Bearer {auth}"}
    return {"Authorization": AUTH_HEADER} if auth else {}


def taskboard_env(auth=True):
    """ This process's environment for a Taskboard server: with TOKEN, or no token at all
    (for one started `--no-auth`). Built at the call, so set FLOOD_* etc. before it. """
    env = {k: v for k, v in os.environ.items() if k not in AUTH_ENV}
    if auth:
        env["TASKBOARD_TOKEN"] = TOKEN
    return env


def sandbox_fields(sandbox="auto"):
    """ A bench project's `sandbox` (auto, bubblewrap, none: design §17) with the folders its
    agents write besides their checkout (this environment's FLOOD_DIR and ASK_DIR) granted:
    else a sandboxed agent's records would land in its own private /tmp. """
    dirs = [os.environ[k] for k in ("FLOOD_DIR", "ASK_DIR") if os.environ.get(k)]
    granted = {"sandboxPaths": {"readWrite": dirs}} if dirs and sandbox != "none" else {}
    return {"sandbox": sandbox, **granted}


def free_port():
    """ A TCP port on 127.0.0.1 that nothing listens on right now. """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(conn, method, path, body=None, auth=True):
    """ One JSON request on a keep-alive connection: returns (status, parsed body or None).
    Carries the bearer unless `auth` is false (bare baselines ignore it). """
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    headers.update(auth_headers(auth))
    conn.request(method, path, body=data, headers=headers)
    quickack(conn)
    resp = conn.getresponse()
    raw = resp.read()
    try:
        return resp.status, json.loads(raw) if raw else None
    except ValueError:
        return resp.status, raw.decode(errors="replace")


class Server:
    """ A server subprocess on 127.0.0.1:<free port>, its output in `log_path`.

    Use as a context manager: entering waits until `health_path` answers 200 (or raises
    with the log's tail), leaving sends SIGTERM and waits (SIGKILL after 10 s). `env` (None:
    this process's) is the server's environment: `taskboard_env()` for a Taskboard.
    """

    def __init__(self, name, argv, log_path, health_path, port, env=None):
        self.name, self.argv, self.log_path = name, argv, log_path
        self.health_path, self.port, self.env = health_path, port, env
        self.proc = None

    def __enter__(self):
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, cwd=REPO_ROOT, stdout=log, env=self.env,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def _wait_healthy(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before "
                                   f"answering {self.health_path}:\n{self.log_tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                # the health route is open; a bearer would be 401 on a --no-auth board
                status, _ = request(conn, "GET", self.health_path, auth=False)
                conn.close()
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not answer {self.health_path} within "
                           f"{START_TIMEOUT:.0f} s:\n{self.log_tail()}")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            print(f"warning: {self.name} ignored SIGTERM for 10 s, killing it")
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines=30):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])


# Load generator ###########################################################################

def _client(port, plan, start_at, warmup, seconds, worker_id, fast_ack, auth):
    """ One client process: a keep-alive connection sending requests back to back.

    Waits until `start_at` (time.monotonic(), which is system-wide on Linux), warms up for
    `warmup` s, then records latencies of requests started during the next `seconds` s.
    `plan` is [(method, path, body_template or None)], sent in turn from entry `worker_id`
    on (so that the clients spread over a mix); a body template has "{n}" replaced by a
    unique request number. `fast_ack` asks for immediate ACKs (see TCP_QUICKACK). `auth`:
    send the bearer.
    """
    headers = [({"Content-Type": "application/json"} if body else {}) | auth_headers(auth)
               for _, _, body in plan]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies, errors, n, t1 = [], 0, 0, 0.0
    time.sleep(max(0.0, start_at - time.monotonic()))
    measure_from = start_at + warmup
    stop_at = measure_from + seconds
    while True:
        t0 = time.monotonic()
        if t0 >= stop_at:
            break
        n += 1
        i = (worker_id + n) % len(plan)
        method, path, body_template = plan[i]
        body = body_template.replace("{n}", f"{worker_id}-{n}").encode() if body_template else None
        try:
            conn.request(method, path, body=body, headers=headers[i])
            if fast_ack:
                quickack(conn)
            resp = conn.getresponse()
            resp.read()
            ok = 200 <= resp.status < 300
        except (OSError, http.client.HTTPException):
            conn.close()  # reconnects on the next request
            ok = False
        t1 = time.monotonic()
        if t0 >= measure_from:
            latencies.append(t1 - t0)
            errors += not ok
    conn.close()
    elapsed = max(t1, stop_at) - measure_from if latencies else seconds
    return latencies, errors, elapsed


class LoadGenerator:
    """ `clients` worker processes, kept for the whole run (their start-up is never timed). """

    def __init__(self, clients, warmup=1.0, fast_ack=True):
        self.clients, self.warmup, self.fast_ack = clients, warmup, fast_ack
        # Workers ignore Ctrl-C: the main process stops them (and the servers) on its way out.
        self.pool = multiprocessing.get_context("fork").Pool(
            clients, initializer=signal.signal, initargs=(signal.SIGINT, signal.SIG_IGN))

    def close(self):
        self.pool.terminate()
        self.pool.join()

    def run(self, port, method, path, seconds, body_template=None, auth=True):
        """ Returns {"rps", "mean_ms", "p50_ms", "p99_ms", "requests", "errors",
        "latencies" (sorted, s)}. `auth`: send the bearer. """
        return self.run_mix(port, [(method, path, body_template)], seconds, auth)

    def run_mix(self, port, plan, seconds, auth=True):
        """ As run(), each client sending plan's (method, path, body_template) in turn. """
        start_at = time.monotonic() + 0.2
        args = [(port, plan, start_at, self.warmup, seconds, i, self.fast_ack, auth)
                for i in range(self.clients)]
        results = self.pool.starmap(_client, args)
        latencies = sorted(lat for lats, _, _ in results for lat in lats)
        if not latencies:
            raise RuntimeError(f"no request of {plan} completed")
        return {
            "rps": sum(len(lats) / elapsed for lats, _, elapsed in results),
            "mean_ms": sum(latencies) / len(latencies) * 1000,
            "p50_ms": percentile(latencies, 0.50) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "requests": len(latencies),
            "errors": sum(errors for _, errors, _ in results),
            "latencies": latencies,
        }


def paced_requests(port, paths, rate, start_at, seconds, fast_ack=True, by_path=None):
    """ One keep-alive connection GETting `paths` in turn at a steady `rate` req/s.

    Waits until `start_at` (time.monotonic()), then sends on a fixed schedule for `seconds` s
    (a late request goes out at once; the schedule does not slip). Each latency is timed from
    the request's actual send. Returns (sorted latencies in s, errors); with `by_path` (a
    dict), also fills it with {path: [latencies in s]}.
    """
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies, errors, headers = [], 0, auth_headers()
    for i in range(max(1, int(rate * seconds))):
        time.sleep(max(0.0, start_at + i / rate - time.monotonic()))
        t0 = time.monotonic()
        try:
            conn.request("GET", paths[i % len(paths)], headers=headers)
            if fast_ack:
                quickack(conn)
            resp = conn.getresponse()
            resp.read()
            errors += not 200 <= resp.status < 300
        except (OSError, http.client.HTTPException):
            conn.close()  # reconnects on the next request
            errors += 1
        latencies.append(time.monotonic() - t0)
        if by_path is not None:
            by_path.setdefault(paths[i % len(paths)], []).append(latencies[-1])
    conn.close()
    return sorted(latencies), errors


def percentile(sorted_values, q):
    """ Nearest-rank percentile of an already sorted, non-empty list. """
    index = math.ceil(q * len(sorted_values)) - 1
    return sorted_values[max(0, min(len(sorted_values) - 1, index))]


# Reporting ################################################################################

def best_of(runs):
    """ The best figure of several rounds: highest req/s, lowest latencies. """
    return {
        "rps": max(r["rps"] for r in runs),
        "p50_ms": min(r["p50_ms"] for r in runs),
        "p99_ms": min(r["p99_ms"] for r in runs),
    }


def ratios(name, ours, baseline):
    """ Rows (figure, ours, baseline, ratio) where a higher ratio is always better. """
    return [
        (f"{name}_rps", ours["rps"], baseline["rps"], ours["rps"] / baseline["rps"]),
        (f"{name}_p50", ours["p50_ms"], baseline["p50_ms"], baseline["p50_ms"] / ours["p50_ms"]),
        (f"{name}_p99", ours["p99_ms"], baseline["p99_ms"], baseline["p99_ms"] / ours["p99_ms"]),
    ]


def print_report(rows, goal):
    """ The table, then one grep-friendly `ratio <figure> <x> (goal >= <goal>)` line each. """
    def fmt(figure, value):
        return f"{value:.0f} req/s" if figure.endswith("_rps") else f"{value:.2f} ms"

    print()
    print(f"{'figure':<18} {'taskboard':>13} {'baseline':>13} {'ratio':>7}  goal")
    for figure, ours, base, ratio in rows:
        mark = "ok" if ratio >= goal else "MISSED"
        print(f"{figure:<18} {fmt(figure, ours):>13} {fmt(figure, base):>13} {ratio:>6.2f}x"
              f"  >= {goal}x  {mark}")
    print()
    for figure, _, _, ratio in rows:
        print(f"ratio {figure} {ratio:.2f} (goal >= {goal})")


# Machine-readable results and process figures ###########################################

#: bench/run.py reads the one line of each benchmark that starts with this.
RESULT_PREFIX = "BENCH_RESULT "


def fmt(value, unit):
    """A figure with its unit, for the tables; "-" when there is none."""
    if value is None:
        return "-"
    return f"{value:.2f} {unit}".strip() if isinstance(value, float) else \
        f"{value} {unit}".strip()


def print_table(rows, value="value", baseline="baseline"):
    """The result rows as a table: figure, value, baseline, ratio, goal, met."""
    print()
    print(f"{'figure':<30} {value:>14} {baseline:>12} {'ratio':>8}  goal")
    for r in rows:
        mark = "" if r["met"] is None else "ok" if r["met"] else "MISSED"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        print(f"{r['figure']:<30} {fmt(r['value'], r['unit']):>14} "
              f"{fmt(r['baseline'], r['unit']):>12} {ratio:>8}  {r['goal']} {mark}")
    print()


def result_row(figure, value, unit="", baseline=None, ratio=None, goal="", met=None):
    """ One figure for bench/run.py's table; `met` is None when the figure has no goal. """
    return {"figure": figure, "value": value, "unit": unit, "baseline": baseline,
            "ratio": ratio, "goal": goal, "met": met}


def emit_result(bench, rows, **extra):
    """ Print the machine-readable line: {"bench", "rows": [result_row, ...], ...extra}. """
    print(RESULT_PREFIX + json.dumps({"bench": bench, "rows": rows, **extra}), flush=True)


def proc_memory_kb(pid):
    """ {"VmRSS": kB, "VmHWM": kB} of a live process (Linux /proc), {} when it is gone. """
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    out[name] = int(rest.split()[0])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out
