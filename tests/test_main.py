"""The real entry point, `python taskboard.py`, as a user starts it (design.md §2)."""

import re
import shlex
import signal
import sys

import pytest
import requests
from fake_cli import VERSION
from fault_helpers import AGENT_COMMAND, ServerProcess, clean_env

import taskboard
from agent_helpers import alive
from conftest import wait_for

MISSING_AGENT = "definitely-not-a-command-xyz"


#: A token as an environment twin gives it (at least TOKEN_MIN_LENGTH characters).
ENV_TOKEN = "env-token-0123456789abcdef"

@pytest.fixture
def start(tmp_path):
    """start(*args, env=...) -> a `python taskboard.py ARGS` process in a clean environment
    (no TASKBOARD_* variable, a scratch HOME); every one is killed at the end."""
    servers = []

    def run(*args, env=None):
        server = ServerProcess(tmp_path, clean_env(tmp_path, **(env or {})), *args)
        servers.append(server)
        return server
    yield run
    for server in servers:
        server.stop()


class SlowVersion:
    """The fake agent as --agent-command, its `--version` held until open() (it writes its
    pid first): an agent check that is still running for as long as a test wants."""

    def __init__(self, tmp_path):
        self.gate = tmp_path / "version-gate"
        self.command = AGENT_COMMAND
        self.env = {"FAKE_VERSION_GATE": str(self.gate)}

    def asked(self) -> int | None:
        """The pid of the waiting `--version`, once the board has run it."""
        path = self.gate.with_name(self.gate.name + ".asked")
        return int(path.read_text()) if path.exists() else None

    def open(self) -> None:
        self.gate.touch()


@pytest.fixture
def slow_version(tmp_path):
    slow = SlowVersion(tmp_path)
    yield slow
    slow.open()
    if (pid := slow.asked()) is not None:
        wait_for(lambda: not alive(pid), message=f"the agent's --version {pid} to end")


def test_main_prints_url_and_serves_without_waiting_for_the_agent_check(start, tmp_path,
                                                                       slow_version):
    """Start-up is measured by bench/; here the order: the agent's --version, held until
    the test lets it answer, never holds back the URL line, the page or /api/health."""
    server = start("--port", 0, "--db", tmp_path / "x.db", "--agent-command",
                   slow_version.command, env=slow_version.env).wait_ready()
    assert server.host == "127.0.0.1" and server.port > 0
    assert requests.get(server.url, timeout=5).status_code == 200
    version = wait_for(slow_version.asked, message="the agent check to run --version")
    assert server.health()["agent"] == {"found": True, "version": None, "checking": True}
    assert alive(version), "the URL and the answers waited for the agent's --version"
    slow_version.open()
    body = wait_for(lambda: (b := server.health())["agent"]["version"] is not None and b,
                    message="the agent version")
    assert body["agent"]["version"] == VERSION


def test_main_health_reports_missing_agent(start, tmp_path):
    server = start("--port", 0, "--db", tmp_path / "x.db", "--agent-command", MISSING_AGENT)
    server.wait_ready()
    body = wait_for(lambda: (b := server.health())["agent"]["found"] is not None and b,
                    message="the agent check")
    agents = body.pop("agents")
    assert set(body.pop("sandbox")) == {"engine", "works", "version", "error"}
    assert body == {"ok": True, "version": taskboard.__version__, "db": "ok", "hosts": [],
                    "hostsInUse": {"count": 0, "reachable": 0},
                    "agent": {"found": False, "version": None, "checking": False}}
    assert set(agents) == set(taskboard.AGENTS)
    assert agents["claude"] == {**body["agent"], "package": "@anthropic-ai/claude-code",
                                "twoWay": True, "waitingUntil": None}


def test_main_health_reports_found_agent_version(start, tmp_path):
    command = shlex.quote(sys.executable)  # `python --version` answers like an agent CLI
    server = start("--port", 0, "--db", tmp_path / "x.db", "--agent-command", command)
    server.wait_ready()
    body = wait_for(lambda: (b := server.health())["agent"]["version"] is not None and b,
                    message="the agent version")
    assert body["agent"]["found"] is True
    assert body["agent"]["version"] == f"Python {sys.version.split()[0]}"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_main_signal_exits_zero_while_the_agent_check_still_runs(start, tmp_path, signum,
                                                                 slow_version):
    """The signal ends the server before the agent's --version answers (the test never lets
    it): the exit waits for no background work, and ends that --version on the way out."""
    server = start("--port", 0, "--db", tmp_path / "x.db", "--agent-command",
                   slow_version.command, env=slow_version.env).wait_ready()
    version = wait_for(slow_version.asked, message="the agent check to run --version")
    assert server.health()["ok"] is True
    server.proc.send_signal(signum)
    assert server.proc.wait(timeout=10) == 0, server.errors()
    assert "Traceback" not in server.errors()
    assert not alive(version), "the agent's --version outlived the server"
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{server.url}/api/health", timeout=2)


def test_main_env_twins_configure_the_server(start, tmp_path):
    db = tmp_path / "env" / "board.db"
    server = start(env={"TASKBOARD_PORT": "0", "TASKBOARD_DB": str(db),
                        "TASKBOARD_HOST": "127.0.0.2", "TASKBOARD_TOKEN": ENV_TOKEN,
                        "TASKBOARD_AGENT_COMMAND": MISSING_AGENT + "-env"})
    assert server.wait_ready().host == "127.0.0.2"
    wait_for(lambda: MISSING_AGENT + "-env" in server.errors(), message="the agent check")
    assert requests.get(f"{server.url}/api/projects", timeout=5, headers={
        "Authorization": f"Bearer {ENV_TOKEN}"}).status_code == 200
    assert db.exists()


def test_main_flags_win_over_env(start, tmp_path):
    env_db, flag_db = tmp_path / "env" / "board.db", tmp_path / "flag" / "board.db"
    server = start("--port", 0, "--db", flag_db, "--host", "127.0.0.1",
                   "--agent-command", MISSING_AGENT + "-flag",
                   env={"TASKBOARD_PORT": "not-a-port", "TASKBOARD_DB": str(env_db),
                        "TASKBOARD_HOST": "127.0.0.2", "TASKBOARD_AGENT_COMMAND": "env-agent"})
    assert server.wait_ready().host == "127.0.0.1"
    wait_for(lambda: MISSING_AGENT + "-flag" in server.errors(), message="the agent check")
    assert flag_db.exists() and not env_db.exists()


def test_main_prints_a_login_url_that_signs_a_browser_in(start, tmp_path):
    server = start("--port", 0, "--db", tmp_path / "x.db", "--agent-command",
                   MISSING_AGENT).wait_ready()
    [url] = re.findall(r"Open (\S+) to sign in", server.output())
    browser = requests.Session()
    assert browser.get(f"{server.url}/api/projects", timeout=5).status_code == 401
    landed = browser.get(url, timeout=5)
    assert landed.url == f"{server.url}/" and "token" not in landed.url
    assert browser.get(f"{server.url}/api/projects", timeout=5).json() == []
    for private in ("token", "x.db"):  # umask 077: the owner's alone
        assert oct((tmp_path / private).stat().st_mode & 0o777) == "0o600"
    assert "process list" not in server.errors()


def test_main_says_demo_mode_is_on_and_what_it_simulates(start, tmp_path):
    server = start("--port", 0, "--db", tmp_path / "x.db", "--agent-command", MISSING_AGENT,
                   "--demo").wait_ready()
    assert "Demo mode: the Demo project's tasks run the built-in simulated agent" in \
        server.output()
    assert "Demo mode" not in start("--port", 0, "--db", tmp_path / "y.db", "--agent-command",
                                     MISSING_AGENT).wait_ready().output()


def test_main_warns_about_a_token_in_the_process_list(start, tmp_path):
    server = start("--port", 0, "--db", tmp_path / "x.db", "--agent-command", MISSING_AGENT,
                   "--token", ENV_TOKEN).wait_ready()
    assert "process list" in server.errors()
    assert server.token == ENV_TOKEN and server.call("GET", "/api/projects") == []


def test_main_bad_port_exits_with_usage_error(start, tmp_path):
    server = start("--port", "99999", "--db", tmp_path / "x.db")
    assert server.proc.wait(timeout=10) == 2
    assert "port" in server.errors()
    assert not (tmp_path / "x.db").exists()


# --- configuration through parse_args ---------------------------------------------------

@pytest.mark.parametrize("argv,environ", [
    (["--port", "abc"], {}),
    (["--port", "-1"], {}),
    (["--port", "65536"], {}),
    ([], {"TASKBOARD_PORT": "abc"}),
])
def test_parse_args_bad_port_exits_2(argv, environ, capsys):
    with pytest.raises(SystemExit) as exc:
        taskboard.parse_args(argv, environ=environ)
    assert exc.value.code == 2
    assert "port" in capsys.readouterr().err


def test_parse_args_defaults_match_design(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = taskboard.parse_args([], environ={})
    assert (config["host"], config["port"], config["agent_command"]) == \
        ("127.0.0.1", 4000, "claude")


def test_parse_args_env_twins_apply(tmp_path):
    config = taskboard.parse_args([], environ={
        "TASKBOARD_HOST": "0.0.0.0", "TASKBOARD_PORT": "4123",
        "TASKBOARD_DB": str(tmp_path / "d" / "t.db"), "TASKBOARD_AGENT_COMMAND": "codex x",
        "TASKBOARD_TOKEN": ENV_TOKEN})
    assert (config["host"], config["port"], config["agent_command"], config["token"]) == \
        ("0.0.0.0", 4123, "codex x", ENV_TOKEN)
    assert config["db_path"] == str(tmp_path / "d" / "t.db")


@pytest.mark.parametrize("case", ["db-flag", "db-env", "state-directory", "xdg", "home"])
def test_parse_args_data_dir_follows_design_order(tmp_path, monkeypatch, case):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    everything = {"STATE_DIRECTORY": str(tmp_path / "state"),
                  "XDG_DATA_HOME": str(tmp_path / "xdg")}
    argv, environ, expected = {
        "db-flag": (["--db", str(tmp_path / "mine" / "b.db")], everything, tmp_path / "mine"),
        "db-env": ([], everything | {"TASKBOARD_DB": str(tmp_path / "envdb" / "b.db")},
                   tmp_path / "envdb"),
        "state-directory": ([], everything, tmp_path / "state"),
        "xdg": ([], {"XDG_DATA_HOME": str(tmp_path / "xdg")}, tmp_path / "xdg" / "taskboard"),
        "home": ([], {}, tmp_path / "home" / ".local" / "share" / "taskboard"),
    }[case]
    config = taskboard.parse_args(argv, environ=environ)
    assert config["data_dir"] == str(expected)
    if not case.startswith("db-"):
        assert config["db_path"] == str(expected / "taskboard.db")


def test_parse_args_relative_db_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = taskboard.parse_args(["--db", "sub/x.db"], environ={})
    assert config["db_path"] == str(tmp_path / "sub" / "x.db")
    assert config["data_dir"] == str(tmp_path / "sub")


@pytest.mark.parametrize("value", ["x", "-1", "nan"])
def test_parse_args_bad_retry_base_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as stopped:
        taskboard.parse_args([], environ={"TASKBOARD_RETRY_BASE_SECONDS": value})
    assert stopped.value.code == 2
    assert "TASKBOARD_RETRY_BASE_SECONDS" in capsys.readouterr().err
