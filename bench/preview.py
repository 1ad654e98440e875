"""What a task's preview costs (design §21, issue 60): a page through the preview's proxy
against the same dev server asked directly (p50 of a 200 KB asset and of a small JSON, each
request alone, and of a page in Chromium that loads both), a preview's start-to-ready
against the dev server's own, and the board's CPU while a ready preview sits unused.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/preview.py              # 300 requests of each kind, 10 starts, 50 pages
    python bench/preview.py --requests 50 --starts 3 --loads 5   # smoke test
    python bench/preview.py --sandbox bubblewrap          # the preview sandboxed (§17, §20):
                                                          # reached through its bridge

One Taskboard server, a project whose previewCommand runs tests/preview_app.py (the tests'
stand-in dev server) on $PORT, a task of it in testing.  The direct baseline is the same
app started by the bench on a port of its own.  Requests go one at a time on a keep-alive
connection, the proxied and the direct interleaved (drift and noise fall on both alike).
The page (tests/preview_app.py's /page, in Debian's Chromium through Playwright): a 200 KB
asset (/big, as an image) and a fetched small JSON, timed in the page from navigation start
to the later one's last byte (Resource Timing), so Playwright's own round trips are not in
it.  Each load is cold: a fresh browser context (its cache, cookies and connections empty;
the cache also disabled through CDP) first opens the preview's one-time link (a new one each
time: it sets the port's cookie and lands on `/`) or the direct app's `/`, then navigates to
/page, the timed load (the connection `/` opened may serve it, as for a person's next page);
proxied and direct alternate, one of each first not counted.  Chromium's own work (commit,
parse, its network service) is most of a page's time, so this ratio says what a person
feels of the proxy; the per-request ratios say what the proxy itself costs.
Start-to-ready: from just before the POST to the first GET that says `ready` (asked every
2 ms), against the same command started by the bench and asked by the same loop until it
answers.  Goals: proxied p50 <= 1.2x direct for the page (the issue's goal as a person
meets it) and, read per request, for each of the two; start-to-ready + <= 100 ms p50; the
board's CPU over 5 s with a ready, unused preview ~0.

How to read the output: `figure <name> <value>` lines, then BENCH_RESULT {...} for
bench/run.py.
"""

import argparse
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

from _common import (
    REPO_ROOT,
    Server,
    emit_result,
    free_port,
    percentile,
    print_table,
    result_row,
    taskboard_env,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agents import call  # noqa: E402

APP = os.path.join(REPO_ROOT, "tests", "preview_app.py")
COMMAND = f"exec {sys.executable} {APP} \"$PORT\""
GOAL_RATIO = 1.2
GOAL_EXTRA_MS = 100.0
IDLE_SECONDS = 5.0
CHROMIUM = "/usr/bin/chromium"


def answers(port: int) -> bool:
    """Whether something answers HTTP on the port (the board's own readiness test)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            return conn.recv(5) == b"HTTP/"
    except OSError:
        return False


def direct_start() -> tuple[float, subprocess.Popen, int]:
    """The dev server started by hand: ms until it answers, its process, its port."""
    port = free_port()
    started = time.monotonic()
    proc = subprocess.Popen(["sh", "-c", COMMAND], env={**os.environ, "PORT": str(port)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    while not answers(port):
        time.sleep(0.002)
    return (time.monotonic() - started) * 1000, proc, port


def preview_start(port: int, task_id: int) -> tuple[float, dict]:
    """A preview started through the API: ms until it says ready, its state."""
    started = time.monotonic()
    call(port, "POST", f"/api/tasks/{task_id}/preview", expect=(202,))
    while True:
        state = call(port, "GET", f"/api/tasks/{task_id}/preview")
        if state["status"] == "ready":
            return (time.monotonic() - started) * 1000, state
        if state["status"] != "starting":
            raise RuntimeError(f"the preview did not start: {state}")
        time.sleep(0.002)


def cookie_of(link: str) -> tuple[int, str]:
    """Follow a preview's one-time link: its port and the cookie it sets."""
    host, _, rest = link.removeprefix("http://").partition("/")
    port = int(host.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/" + rest)
    response = conn.getresponse()
    response.read()
    conn.close()
    return port, response.getheader("Set-Cookie").split(";")[0]


def timed(conn, path: str, headers: dict) -> float:
    started = time.perf_counter()
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    body = response.read()
    elapsed = (time.perf_counter() - started) * 1000
    if response.status != 200 or not body:
        raise RuntimeError(f"GET {path} answered {response.status}")
    return elapsed


def page_load(browser, first: str, url: str) -> float:
    """One cold load of the app's /page: a fresh context opens `first` (the preview's
    one-time link, or the direct app's /), then `url`; the ms from that navigation's start
    until both its 200 KB asset and its JSON have arrived, as the page reads them."""
    context = browser.new_context()
    try:
        page = context.new_page()
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
        for where in (first, url):
            response = page.goto(where)
            if response is None or response.status != 200:
                raise RuntimeError(f"{where} answered {response and response.status}")
        page.wait_for_function("window.arrived !== undefined", timeout=30_000)
        arrived = page.evaluate("window.arrived")
    finally:
        context.close()
    if arrived < 0:
        raise RuntimeError(f"{url}: the page did not see both its asset and its JSON")
    return arrived


def page_loads(port: int, task_id: int, direct_port: int, loads: int) -> dict:
    """`loads` cold page loads each way (after one each not counted), proxied and direct
    alternating, the first of each pair swapped every time: {"proxy": [ms], "direct": [ms]}."""
    from playwright.sync_api import sync_playwright

    times = {"proxy": [], "direct": []}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            for n in range(loads + 1):
                for kind in (("proxy", "direct") if n % 2 else ("direct", "proxy")):
                    if kind == "proxy":
                        link = call(port, "GET", f"/api/tasks/{task_id}/preview")["url"]
                        origin = "http://" + urllib.parse.urlsplit(link).netloc
                        ms = page_load(browser, link, origin + "/page")
                    else:
                        origin = f"http://127.0.0.1:{direct_port}"
                        ms = page_load(browser, origin + "/", origin + "/page")
                    if n:
                        times[kind].append(ms)
        finally:
            browser.close()
    return times


def cpu_ms(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="requests of each kind")
    parser.add_argument("--starts", type=int, default=10, help="starts of each kind")
    parser.add_argument("--loads", type=int, default=50,
                        help="cold page loads in Chromium each way (0: none)")
    parser.add_argument("--sandbox", default="none", choices=("none", "bubblewrap"))
    args = parser.parse_args()
    if args.loads and not os.access(CHROMIUM, os.X_OK):
        sys.exit(f"{CHROMIUM} is missing: apt-get install chromium (or --loads 0)")
    with tempfile.TemporaryDirectory(prefix="tb-preview-bench-") as tmp:
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        port = free_port()
        server = Server("taskboard", [sys.executable, "taskboard.py", "--port", str(port),
                                      "--db", os.path.join(tmp, "data", "tb.db")],
                        os.path.join(tmp, "taskboard.log"), "/api/health", port,
                        env=taskboard_env())
        with server:
            project = call(port, "POST", "/api/projects", {
                "name": "Shop", "slug": "shop", "workingDir": work, "sandbox": args.sandbox,
                "previewCommand": COMMAND})
            task = call(port, "POST", f"/api/projects/{project['id']}/tasks",
                        {"title": "Cart"})
            call(port, "PATCH", f"/api/tasks/{task['id']}/status", {"status": "testing"})
            starts = {"preview": [], "direct": []}
            for _ in range(args.starts):
                ms, state = preview_start(port, task["id"])
                starts["preview"].append(ms)
                call(port, "DELETE", f"/api/tasks/{task['id']}/preview")
                ms, proc, _ = direct_start()
                starts["direct"].append(ms)
                os.killpg(proc.pid, 9)
                proc.wait()
            print(f"  {args.starts} starts each", flush=True)
            _, state = preview_start(port, task["id"])
            proxy_port, cookie = cookie_of(state["url"])
            _, direct, direct_port = direct_start()
            try:
                through = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=30)
                alone = http.client.HTTPConnection("127.0.0.1", direct_port, timeout=30)
                times = {(kind, path): [] for kind in ("proxy", "direct")
                         for path in ("/big", "/small.json")}
                for n in range(args.requests * 2):
                    path = ("/big", "/small.json")[n % 2]
                    times[("proxy", path)].append(timed(through, path, {"Cookie": cookie}))
                    times[("direct", path)].append(timed(alone, path, {}))
                print(f"  {args.requests} requests of each kind each way", flush=True)
                before = cpu_ms(server.proc.pid)
                time.sleep(IDLE_SECONDS)
                idle = cpu_ms(server.proc.pid) - before
                through.close()
                alone.close()
                pages = page_loads(port, task["id"], direct_port, args.loads) \
                    if args.loads else None
                if pages:
                    print(f"  {args.loads} page loads each way", flush=True)
            finally:
                os.killpg(direct.pid, 9)
                direct.wait()
            call(port, "DELETE", f"/api/tasks/{task['id']}/preview")
    rows = []
    for path, name in (("/big", "200 KB asset"), ("/small.json", "small JSON")):
        ours = percentile(sorted(times[("proxy", path)]), 0.5)
        base = percentile(sorted(times[("direct", path)]), 0.5)
        rows.append(result_row(f"{name} p50 through the proxy", round(ours, 3), "ms",
                               round(base, 3), round(ours / base, 2), f"<= {GOAL_RATIO}x",
                               ours / base <= GOAL_RATIO))
    if pages:
        ours = percentile(sorted(pages["proxy"]), 0.5)
        base = percentile(sorted(pages["direct"]), 0.5)
        rows.append(result_row("page p50 through the proxy", round(ours, 2), "ms",
                               round(base, 2), round(ours / base, 2), f"<= {GOAL_RATIO}x",
                               ours / base <= GOAL_RATIO))
        for q in (0.1, 0.9):
            ours = percentile(sorted(pages["proxy"]), q)
            base = percentile(sorted(pages["direct"]), q)
            rows.append(result_row(f"page p{q * 100:.0f} through the proxy", round(ours, 2),
                                   "ms", round(base, 2), round(ours / base, 2)))
    extra = percentile(sorted(starts["preview"]), 0.5) - percentile(sorted(starts["direct"]), 0.5)
    rows.append(result_row("start-to-ready p50", round(percentile(sorted(starts["preview"]), 0.5),
                                                       1), "ms",
                           round(percentile(sorted(starts["direct"]), 0.5), 1), None,
                           f"+ <= {GOAL_EXTRA_MS:g} ms", extra <= GOAL_EXTRA_MS))
    rows.append(result_row(f"board CPU, a ready preview unused {IDLE_SECONDS:g} s",
                           round(idle, 1), "ms"))
    print_table(rows, value="preview", baseline="direct")
    for row in rows:
        print(f"figure {row['figure'].replace(' ', '_')} {row['value']}")
    emit_result("preview", rows, sandbox=args.sandbox)


if __name__ == "__main__":
    main()
