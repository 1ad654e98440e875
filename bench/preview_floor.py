"""The floor under bench/preview.py's proxied figures (issue 60): the same stand-in dev
server asked directly, through a bare gevent relay (one greenlet per connection copying
each request head and its Content-Length answer, no parsing, no checks: what any Python
proxy on gevent at least costs), and through socat (a C relay, when installed: what any
proxy in its own process at least costs).

Run it by hand with the Python that has Taskboard's dependencies; it is not a test:

    python bench/preview_floor.py                  # 1500 requests of each kind each way

Requests go one at a time on a keep-alive connection, every way interleaved, from a client
process of their own; `figure <way>_<path> <p50 ms>` lines, then BENCH_RESULT.
"""
from gevent import monkey; monkey.patch_all()  # noqa: E702, I001

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import gevent.subprocess  # the client runs while this process relays
from gevent.server import StreamServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import REPO_ROOT, emit_result, free_port, print_table, result_row  # noqa: E402

APP = os.path.join(REPO_ROOT, "tests", "preview_app.py")
PATHS = ("/big", "/small.json")
#: The client: times each way's requests, interleaved, and prints "<way> <path> <p50>".
CLIENT = """
import http.client, json, sys, time
ways, count = json.loads(sys.argv[1]), int(sys.argv[2])
conns = {way: http.client.HTTPConnection("127.0.0.1", port) for way, port in ways.items()}
times = {(way, path): [] for way in ways for path in ("/big", "/small.json")}
for _ in range(count):
    for path in ("/big", "/small.json"):
        for way, conn in conns.items():
            started = time.perf_counter()
            conn.request("GET", path)
            answer = conn.getresponse()
            answer.read()
            times[(way, path)].append((time.perf_counter() - started) * 1000)
for (way, path), spent in times.items():
    print(way, path, sorted(spent)[len(spent) // 2])
"""


def listening(port: int) -> None:
    while True:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return
        except OSError:
            time.sleep(0.01)


def head_of(sock, rest: bytes) -> tuple[bytes | None, bytes]:
    """A message's head (None at the close) and the bytes read after it."""
    while b"\r\n\r\n" not in rest:
        data = sock.recv(65536)
        if not data:
            return None, b""
        rest += data
    end = rest.index(b"\r\n\r\n") + 4
    return rest[:end], rest[end:]


def relay(upstream_port: int, client, _address) -> None:
    """Each request head on to the dev server, its answer (head and Content-Length body)
    back: bytes copied, nothing parsed but the length."""
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    upstream = socket.create_connection(("127.0.0.1", upstream_port))
    upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rest = b""
    try:
        while True:
            head, rest = head_of(client, rest)
            if head is None:
                return
            upstream.sendall(head)
            answer, body = head_of(upstream, b"")
            length = next(int(line.split(b":")[1]) for line in answer.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            client.sendall(answer + body)
            left = length - len(body)
            while left > 0:
                data = upstream.recv(min(left, 262144))
                left -= len(data)
                client.sendall(data)
    finally:
        client.close()
        upstream.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1500, help="requests of each kind")
    args = parser.parse_args()
    direct = free_port()
    app = subprocess.Popen([sys.executable, APP, str(direct)], stdout=subprocess.DEVNULL)
    extra = []
    try:
        listening(direct)
        ways = {"direct": direct, "gevent relay": free_port()}
        StreamServer(("127.0.0.1", ways["gevent relay"]),
                     lambda c, a: relay(direct, c, a)).start()
        if shutil.which("socat"):
            ways["socat"] = free_port()
            extra.append(subprocess.Popen([
                "socat", "-b", "262144",
                f"TCP-LISTEN:{ways['socat']},bind=127.0.0.1,fork,reuseaddr,nodelay",
                f"TCP:127.0.0.1:{direct},nodelay"]))
            listening(ways["socat"])
        out = gevent.subprocess.run([sys.executable, "-c", CLIENT, json.dumps(ways),
                                     str(args.requests)], capture_output=True, text=True,
                                    check=True).stdout
    finally:
        for proc in (app, *extra):
            proc.kill()
            proc.wait()
    p50 = {}
    for line in out.splitlines():
        *way, path, ms = line.split()
        p50[(" ".join(way), path)] = float(ms)
    rows = []
    for way in ways:
        if way == "direct":
            continue
        for path, name in zip(PATHS, ("200 KB asset", "small JSON")):
            ours, base = p50[(way, path)], p50[("direct", path)]
            rows.append(result_row(f"{name} p50 through {way}", round(ours, 3), "ms",
                                   round(base, 3), round(ours / base, 2)))
    print_table(rows, value="relayed", baseline="direct")
    for row in rows:
        print(f"figure {row['figure'].replace(' ', '_')} {row['value']}")
    emit_result("preview_floor", rows)


if __name__ == "__main__":
    main()
