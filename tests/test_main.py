"""The real entry point, `python taskboard.py`, as a user starts it (design.md §2)."""

import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest
import requests

import taskboard
from conftest import ROOT, wait_for

URL_RE = re.compile(r"http://(\d+\.\d+\.\d+\.\d+):(\d+)/")
MISSING_AGENT = "definitely-not-a-command-xyz"


class Server:
    """One `python taskboard.py ...` process; stdout and stderr go to files."""

    def __init__(self, tmp_path, args, env):
        self.out_path = tmp_path / f"stdout-{time.monotonic_ns()}.log"
        self.err_path = tmp_path / f"stderr-{time.monotonic_ns()}.log"
        self.started = time.monotonic()
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "taskboard.py", *args], cwd=ROOT,
                                         env=env, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL)
        self.url = None

    def output(self):
        return self.out_path.read_text()

    def errors(self):
        return self.err_path.read_text()

    def wait_for_url(self, timeout=10):
        def found():
            if self.proc.poll() is not None:
                raise AssertionError(f"exited with {self.proc.returncode}: {self.errors()}")
            return URL_RE.search(self.output())
        match = wait_for(found, timeout=timeout, interval=0.005, message="the URL line")
        self.url = match.group(0)
        return match

    def health(self):
        return requests.get(f"{self.url}api/health", timeout=5).json()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def clean_env(tmp_path):
    """The environment without any TASKBOARD_* or data-dir variable, with a scratch HOME."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TASKBOARD_") and k not in ("STATE_DIRECTORY", "XDG_DATA_HOME")}
    env["HOME"] = str(tmp_path / "home")
    return env


@pytest.fixture
def start(tmp_path, clean_env):
    servers = []

    def run(*args, env=None):
        server = Server(tmp_path, [str(a) for a in args], clean_env | (env or {}))
        servers.append(server)
        return server
    yield run
    for server in servers:
        server.stop()


def test_main_prints_url_and_serves_without_waiting_for_the_agent_check(start, tmp_path):
    """Start-up is measured by bench/ (about 0.6 s idle); here only a hang would fail: the
    agent's --version must never hold the URL back, so a slow machine still gets 3 s."""
    server = start("--port", 0, "--db", tmp_path / "x.db", "--agent-command", MISSING_AGENT)
    match = server.wait_for_url()
    elapsed = time.monotonic() - server.started
    assert match.group(1) == "127.0.0.1" and int(match.group(2)) > 0
    assert elapsed < 3.0, f"start-up took {elapsed:.2f}s"
    assert requests.get(server.url, timeout=5).status_code == 200


def test_main_health_reports_missing_agent(start, tmp_path):
    server = start("--port", 0, "--db", tmp_path / "x.db", "--agent-command", MISSING_AGENT)
    server.wait_for_url()
    body = wait_for(lambda: (b := server.health())["agent"]["found"] is not None and b,
                    message="the agent check")
    assert body == {"ok": True, "version": taskboard.__version__, "db": "ok",
                    "agent": {"command": MISSING_AGENT, "found": False, "version": None}}


def test_main_health_reports_found_agent_version(start, tmp_path):
    command = shlex.quote(sys.executable)  # `python --version` answers like an agent CLI
    server = start("--port", 0, "--db", tmp_path / "x.db", "--agent-command", command)
    server.wait_for_url()
    body = wait_for(lambda: (b := server.health())["agent"]["version"] is not None and b,
                    message="the agent version")
    assert body["agent"]["found"] is True
    assert body["agent"]["command"] == command
    assert body["agent"]["version"] == f"Python {sys.version.split()[0]}"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_main_signal_exits_zero_promptly(start, tmp_path, signum):
    server = start("--port", 0, "--db", tmp_path / "x.db", "--agent-command", MISSING_AGENT)
    server.wait_for_url()
    assert server.health()["ok"] is True
    server.proc.send_signal(signum)
    began = time.monotonic()
    assert server.proc.wait(timeout=5) == 0, server.errors()
    assert time.monotonic() - began < 3
    assert "Traceback" not in server.errors()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{server.url}api/health", timeout=2)


def test_main_env_twins_configure_the_server(start, tmp_path):
    db = tmp_path / "env" / "board.db"
    server = start(env={"TASKBOARD_PORT": "0", "TASKBOARD_DB": str(db),
                        "TASKBOARD_HOST": "127.0.0.2", "TASKBOARD_TOKEN": "env-token-123",
                        "TASKBOARD_AGENT_COMMAND": MISSING_AGENT + "-env"})
    match = server.wait_for_url()
    assert match.group(1) == "127.0.0.2"
    body = wait_for(lambda: (b := server.health())["agent"]["found"] is not None and b,
                    message="the agent check")
    assert body["agent"]["command"] == MISSING_AGENT + "-env"
    assert db.exists()


def test_main_flags_win_over_env(start, tmp_path):
    env_db, flag_db = tmp_path / "env" / "board.db", tmp_path / "flag" / "board.db"
    server = start("--port", 0, "--db", flag_db, "--host", "127.0.0.1",
                   "--agent-command", MISSING_AGENT + "-flag",
                   env={"TASKBOARD_PORT": "not-a-port", "TASKBOARD_DB": str(env_db),
                        "TASKBOARD_HOST": "127.0.0.2", "TASKBOARD_AGENT_COMMAND": "env-agent"})
    match = server.wait_for_url()
    assert match.group(1) == "127.0.0.1"
    assert server.health()["agent"]["command"] == MISSING_AGENT + "-flag"
    assert flag_db.exists() and not env_db.exists()


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
        "TASKBOARD_TOKEN": "tok"})
    assert (config["host"], config["port"], config["agent_command"], config["token"]) == \
        ("0.0.0.0", 4123, "codex x", "tok")
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
