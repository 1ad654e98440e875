"""A sandboxed run's network (design.md §20): its own namespace, whose only way out is the
board's egress proxy, through the bridge the sandbox gets; the project's policy says where
it goes.

Each test is a run of the fake agent running a shell script, in a real bubblewrap, with the
person's layout outside /tmp (test_sandbox_git's fixtures); the hosts it tries are loopback
stand-ins: tiny HTTP servers of the test, a port and an abstract UNIX socket of the machine,
the board itself.
"""
import http.server
import socket
import threading

import gevent
import pytest
from test_sandbox import processes_with

# the person's layout outside /tmp, its board and its API (fixtures), and the fake agent's script
from test_sandbox_git import api, config, person, said, script  # noqa: F401

import taskboard
from agent_helpers import RUN, wait_status
from conftest import connecting_to, full_listener, no_socket_left_open, wait_for

pytestmark = pytest.mark.sandbox


class Site:
    """A loopback HTTP server answering every GET with its name."""

    def __init__(self, name: str):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = f"hello from {name}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sites():
    made = [Site("allowed"), Site("refused")]
    yield made
    for site in made:
        site.close()


def tries(*commands: str) -> str:
    """A script that runs each command and says how it went: `OK <output>` or `NO <code>`."""
    return "\n".join(f'if out=$({c} 2>&1); then echo "OK $out"; else echo "NO $? $out"; fi'
                     for c in commands)


def curl(url: str) -> str:
    """curl through the proxy variables the run has (curl reads the lower-case ones)."""
    return f"curl -sS -f --max-time 20 {url}"


def sandboxed(api, person, **fields):  # noqa: F811
    """A bubblewrap project whose runs may keep the fake agent's records."""
    return api.project(permissionMode="auto-accept", sandbox="bubblewrap", **fields,
                       sandboxPaths={"readWrite": [str(person.records)]})


def run(client, api, project, text, status="testing", timeout=RUN):  # noqa: F811
    task = api.task(project["id"], description=script(text))
    api.move(task["id"], "in_progress")
    done = wait_status(client, task["id"], status, timeout)
    return task, done, [line for line in said(client, task["id"]).splitlines()
                        if line.startswith(("OK", "NO"))]


def network_entries(client, task_id):
    return [e["message"] for e in client.get(f"/api/tasks/{task_id}/logs?kind=network").json]


def test_a_sandboxed_run_reaches_only_what_its_project_allows(client, api, person, sites):  # noqa: F811
    """The loopback host networkAllow names is reached through the proxy; another loopback
    host is refused (three times, logged once, counted three times); a direct socket to a
    machine port and an abstract UNIX socket of the machine reach nothing; the board's API
    is refused, its /mcp answers only with the run's token.  Nothing of the bridge is left
    running once the run ended, and its socket is gone."""
    allowed, refused = sites
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\0taskboard-test-abstract")
    listener.listen()
    try:
        project = sandboxed(api, person, networkAllow=[f"127.0.0.1:{allowed.port}"])
        board = f"http://127.0.0.1:{taskboard.NET_PORT}"
        task, done, lines = run(client, api, project, tries(
            curl(f"http://127.0.0.1:{allowed.port}/"),
            *[curl(f"http://127.0.0.1:{refused.port}/")] * 3,
            f"curl -sS -f --noproxy '*' --max-time 5 http://127.0.0.1:{allowed.port}/",
            f"{taskboard.sys.executable} -c \"import socket; s = socket.socket(socket.AF_UNIX);"
            " s.connect('\\0taskboard-test-abstract')\"",
            curl(f"{board}/api/projects"),
            f"curl -sS -f --max-time 5 -X POST {board}/mcp -d '{{}}'"))
    finally:
        listener.close()
    assert lines[0] == "OK hello from allowed", lines
    assert all(line.startswith("NO") and "403" in line for line in lines[1:4]), lines
    assert [line.split()[0] for line in lines[4:]] == ["NO"] * 4, lines
    assert "403" in lines[6] and "403" in lines[7], lines  # the board: only /mcp, with a token
    assert done["sandboxed"] is True
    assert network_entries(client, task["id"]) == [
        f"refused 127.0.0.1:{refused.port} (127.0.0.1 is a loopback, link-local or private "
        "address networkAllow does not name)",
        f"refused board:{taskboard.NET_PORT} (only /mcp, with the run's token)"]
    assert done["network"]["refused"] == 5
    assert done["network"]["reached"] == [f"127.0.0.1:{allowed.port}"]
    assert [(h["port"], h["count"]) for h in done["network"]["refusedHosts"]] == [
        (refused.port, 3), (taskboard.NET_PORT, 2)]
    wait_for(lambda: not processes_with(str(person.data / "net")),
             message="the run's sandbox and bridge to be gone")
    assert list((person.data / "net").iterdir()) == []


def test_an_allowlist_refuses_what_it_does_not_list_and_none_refuses_all(
        client, api, person, sites, live):  # noqa: F811
    """... each refusal on the task's log, live on task:log."""
    allowed, _ = sites
    ws = live.ws("?logs=all")
    project = sandboxed(api, person, network="allowlist",
                        networkAllow=[f"127.0.0.1:{allowed.port}"])
    # round the proxy, its error on the agent's own stderr (as a CLI's would be)
    past = "curl -sS --noproxy '*' --max-time 5 https://example.com/ 2>/proc/$PPID/fd/2"
    task, _, lines = run(client, api, project, tries(
        curl(f"http://127.0.0.1:{allowed.port}/"), curl("https://example.com/")) +
        f"\n{past}\n{past}\n")
    assert lines[0] == "OK hello from allowed" and lines[1].startswith("NO"), lines
    hints = [e["message"] for e in client.get(f"/api/tasks/{task['id']}/logs").json
             if e["message"].startswith("the sandbox's network may be why")]
    assert len(hints) == 1 and "(Could not resolve host)" in hints[0], hints
    assert network_entries(client, task["id"]) == [
        "refused example.com:443 (allowlist: not in networkAllow)"]
    live_entry = ws.until("task:log", lambda d: any(e["kind"] == "network" for e in d["entries"]),
                          timeout=10)["data"]
    assert live_entry["taskId"] == task["id"] and [
        e["message"] for e in live_entry["entries"] if e["kind"] == "network"] == [
        "refused example.com:443 (allowlist: not in networkAllow)"]
    client.put_json(f"/api/projects/{project['id']}", {"network": "none"})
    task, _, lines = run(client, api, project, tries(curl(f"http://127.0.0.1:{allowed.port}/")))
    assert lines[0].startswith("NO"), lines
    assert network_entries(client, task["id"]) == [
        f"refused 127.0.0.1:{allowed.port} (network none: no host is reached)"]


def test_under_no_auth_the_sandbox_works_and_a_run_cannot_reach_the_board(
        config, request, person, live):  # noqa: F811
    """--no-auth asks no credential of a loopback caller, so the board's API is anyone's on
    the machine: a sandboxed run (its own network namespace) reaches it neither directly
    nor through the proxy, even where networkAllow names it; health says the sandbox works
    (design §17 v6, §20)."""
    config["no_auth"] = True  # the board tries bubblewrap itself (marked sandbox) at its start
    client = request.getfixturevalue("anonymous")  # no credential: none is asked
    api = request.getfixturevalue("api")  # noqa: F811
    taskboard.runtime.url = live.url
    assert client.get("/api/health").json["sandbox"]["works"] is True
    assert client.get("/api/projects").status_code == 200  # anyone's, on loopback
    project = sandboxed(api, person, networkAllow=[live.url.split("//")[1]])
    task, done, lines = run(client, api, project, tries(
        f"curl -sS -f --noproxy '*' --max-time 5 {live.url}/api/projects",
        curl(f"{live.url}/api/projects")))
    assert [line.split()[0] for line in lines] == ["NO", "NO"] and "403" in lines[1], lines
    assert done["sandboxed"] is True
    assert len(client.get(f"/api/projects/{project['id']}/tasks").json) == 1
    assert network_entries(client, task["id"]) == [
        f"refused {live.url.split('//')[1]} (the board: a run reaches only its /mcp, with its "
        "token)"]


def test_a_planners_refusals_are_on_its_session_log(client, api, person, sites, live):  # noqa: F811
    """A planner has no task: the first refusal of each host is a plan:log entry of type
    network, live on its session's log; its plan is written as usual."""
    _, refused = sites
    project = sandboxed(api, person)
    ws = live.ws(f"?projectId={project['id']}")
    client.post_json(f"/api/projects/{project['id']}/plan", {
        "topic": "Plan a thing", "context": script(tries(  # no fake:ok: the planner plans
            *[curl(f"http://127.0.0.1:{refused.port}/")] * 2)).removeprefix("fake:ok ")},
        status=200)
    seen = []
    while not seen or seen[-1]["event"] != "plan:completed":
        message = ws.next(RUN)
        if message["event"].startswith("plan:"):
            seen.append(message)
    assert [m["data"]["message"] for m in seen if m["event"] == "plan:log"
            and m["data"]["type"] == "network"] == [
        f"refused 127.0.0.1:{refused.port} (127.0.0.1 is a loopback, link-local or private "
        "address networkAllow does not name)"], seen
    assert seen[-1]["data"]["error"] is None and seen[-1]["data"]["tasks"], seen[-1]


def no_inotify(folder, gone):
    raise OSError(24, "Too many open files")  # inotify_init1's: the person's instances taken


@pytest.mark.parametrize("watched", [True, False])
def test_a_run_whose_proxy_socket_is_removed_fails_and_leaves_nothing(
        client, api, person, monkeypatch, watched):  # noqa: F811
    """The run's socket deleted from the data dir's net/ while it runs: the sandbox's bind
    would keep it reachable, so the board ends the run, as soon as its watch of the folder
    says so, or, with no inotify instance to watch it, at the run's next connection (which
    the agent tries once told of the removal); the task fails saying why, and nothing of
    the run (its bridge, its sandbox) is left."""
    if not watched:
        monkeypatch.setattr(taskboard, "FolderWatch", no_inotify)
    started, told = person.records / "started", person.records / "told"
    project = sandboxed(api, person)
    task = api.task(project["id"], description=script(
        f"touch {started}; while [ ! -e {told} ]; do sleep 0.05; done; "
        f"{curl('http://127.0.0.1:9/')}; sleep 60"))
    api.move(task["id"], "in_progress")
    wait_for(started.exists, timeout=30, message="the agent to start")
    [socket_file] = list((person.data / "net").iterdir())
    socket_file.unlink()
    if taskboard.runtime.egress.watch is None:  # (watched: the machine's instances all taken)
        told.touch()
    done = wait_status(client, task["id"], "failed")
    assert done["last_error"] == taskboard.ENDED_BY_THE_BOARD["proxy-gone"][1], done
    assert done["sandboxed"] is True
    wait_for(lambda: not processes_with(str(person.data / "net")),
             message="the run's sandbox and bridge to be gone")
    assert list((person.data / "net").iterdir()) == []
    assert taskboard.runtime.egress.watch is None  # at rest the proxy holds nothing


@pytest.mark.parametrize("pattern", ["http://example.com", "exa mple.com", "*.", "a:99999",
                                     "*.*.example.com", 7])
def test_a_bad_host_pattern_is_refused(client, api, person, pattern):  # noqa: F811
    project = api.project()
    response = client.put_json(f"/api/projects/{project['id']}",
                               {"networkAllow": ["example.com", pattern]}, expect_errors=True)
    assert response.status_code == 400 and "networkAllow" in response.json["error"], \
        response.json
    assert client.get(f"/api/projects/{project['id']}").json["networkAllow"] is None


def test_without_socat_the_sandbox_does_not_work(monkeypatch, outside_tmp):
    """The bridge's forwarder is a requirement of the sandbox: where it is not found,
    health says so (and no run goes sandboxed)."""
    bwrap = taskboard.shutil.which("bwrap")
    (outside_tmp / "true").symlink_to(taskboard.shutil.which("true"))
    monkeypatch.setenv("PATH", str(outside_tmp))  # bubblewrap by its path, `true`, no socat
    state = taskboard.try_sandbox([bwrap])
    assert state["works"] is False and "socat is not installed" in state["error"], state


FLOOD = """import concurrent.futures, socket
def one(n):
    with socket.create_connection(("127.0.0.1", PORT)) as s:
        s.sendall(f"CONNECT host{n % 250}.example:443 HTTP/1.1\\r\\n\\r\\n".encode())
        return s.recv(100).startswith(b"HTTP/1.1 403")
with concurrent.futures.ThreadPoolExecutor(20) as pool:
    print("refused", sum(pool.map(one, range(1000))))
"""


def test_a_thousand_refused_connections_log_each_host_once(client, api, person):  # noqa: F811
    """A run floods the proxy: a thousand connections at once to 250 hosts, each refused.
    The task's log has one entry per host, for the first NETWORK_HOSTS_KEPT hosts; every
    refusal is counted, each kept host with its four; the run ends as usual."""
    project = sandboxed(api, person, network="none")
    flood = FLOOD.replace("PORT", str(taskboard.NET_PORT))
    task, done, _ = run(client, api, project, f"{taskboard.sys.executable} - <<'EOF'\n"
                        f"{flood}EOF\n", timeout=4 * RUN)  # a thousand forks of socat
    assert "sh said:\nrefused 1000" in said(client, task["id"])
    entries = network_entries(client, task["id"])
    assert len(entries) == len(set(entries)) == taskboard.NETWORK_HOSTS_KEPT, entries
    assert all(e.endswith(".example:443 (network none: no host is reached)") for e in entries)
    assert done["network"]["refused"] == 1000
    assert len(done["network"]["refusedHosts"]) == taskboard.NETWORK_HOSTS_KEPT
    assert {h["count"] for h in done["network"]["refusedHosts"]} == {4}


def test_host_patterns():
    assert taskboard.host_pattern("Example.COM") == ("example.com", None, False)
    assert taskboard.host_pattern("*.example.com:8443") == ("example.com", 8443, True)
    assert taskboard.host_pattern("[::1]:5432") == ("::1", 5432, False)
    assert taskboard.host_pattern("10.0.0.1") == ("10.0.0.1", None, False)
    policy = taskboard.NetPolicy("allowlist", ["*.example.com", "db:5432"], "claude",
                                 {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9000"})
    assert policy.judge("a.b.example.com", 443) == (None, True)
    assert policy.judge("example.com", 443)[0] is not None  # *. is what is under it
    assert policy.judge("db", 5432) == (None, False)  # named exactly: any address
    assert policy.judge("db", 5433)[0] is not None
    assert policy.judge("api.anthropic.com", 443) == (None, True)  # the CLI's API
    assert policy.judge("127.0.0.1", 9000) == (None, False)  # its base URL


def test_a_connect_cut_short_closes_its_socket_at_once():
    """A connect a timeout or a kill ends (the egress proxy's, as its run ends; a preview's,
    as it stops) closes its socket then: dropped open, it would close whenever the garbage
    collector next ran, and its ResourceWarning fail whatever test ran then."""
    with full_listener() as address:
        with pytest.raises(gevent.Timeout), gevent.Timeout(0.2):
            taskboard.dial(address, 10)
        assert not connecting_to(address[1]), "the socket was not closed"
    no_socket_left_open()
