"""Fixtures of the browser tests (tests/test_browser*.py), loaded by conftest.py.

Playwright (pytest-playwright's `page`, `context`, `browser`) drives Debian's Chromium
against a real `python taskboard.py` subprocess: the board as a person would run it.
"""

import asyncio
import inspect
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = os.path.join(ROOT, "tests", "screenshots")
#: Environment variables the board reads; none may leak in from the developer's shell.
BOARD_ENV = re.compile(r"^(TASKBOARD_.*|GITHUB_TOKEN|STATE_DIRECTORY|XDG_DATA_HOME)$")
URL_LINE = re.compile(r"^Taskboard \S+ on (http://127\.0\.0\.1:\d+)/ \(data in .*\)$", re.M)
DESKTOP = (1280, 800)
PHONE = (390, 844)


#: Playwright's driver asks an expectation (expect(locator).to_…) again every 500 ms once it
#: has waited 270 ms, when its timeout is 2.5 s or more, and every 100 ms under that: the
#: page's change was seen 250 ms late on average, in each wait for an agent or the server.
#: A longer expectation is asked in steps of this many ms instead (the same timeout in all).
EXPECT_STEP_MS = 2_000


def expect_in_steps() -> None:
    """Make Playwright's Frame._expect, which every expect(…) calls, ask in EXPECT_STEP_MS
    steps. A private method: left as it is if it is not there or takes other arguments."""
    try:
        from playwright._impl.frame import Frame
    except ImportError:  # pragma: no cover
        return
    asked = getattr(Frame, "_expect", None)
    if asked is None or getattr(asked, "in_steps", False) or list(
            inspect.signature(asked).parameters) != ["self", "selector", "expression",
                                                     "options", "title"]:
        return

    async def in_steps(self, selector, expression, options, title):
        timeout = options.get("timeout")
        if not timeout or timeout <= EXPECT_STEP_MS:  # 0: no timeout at all
            return await asked(self, selector, expression, options, title)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout / 1000
        while True:
            left = (deadline - loop.time()) * 1000
            step = max(1, round(min(left, EXPECT_STEP_MS)))
            result = await asked(self, selector, expression, {**options, "timeout": step}, title)
            if result["matches"] != bool(options.get("isNot")) or not result.get("timedOut") \
                    or left <= EXPECT_STEP_MS:
                if result["matches"] == bool(options.get("isNot")):
                    result["log"] = [f"  - asked in steps of at most {EXPECT_STEP_MS}ms, "
                                     f"{timeout:.0f}ms in all; the last step:",
                                     *(result.get("log") or [])]
                return result

    in_steps.in_steps = True
    Frame._expect = in_steps


expect_in_steps()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """Debian's Chromium, never a downloaded browser build."""
    if not os.access(CHROMIUM, os.X_OK):
        message = f"{CHROMIUM} is missing: apt-get install chromium"
        if os.environ.get("TASKBOARD_CI"):
            pytest.fail(message)
        pytest.skip(message)
    return {**browser_type_launch_args, "executable_path": CHROMIUM,
            "args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--no-first-run"]}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": DESKTOP[0], "height": DESKTOP[1]},
            "locale": "en-GB", "timezone_id": "UTC"}


class ApiFailed(AssertionError):
    pass


class Board:
    """A `python taskboard.py` subprocess on a free port, with its own data dir and HOME.
    With token=None it runs --no-auth (these tests look at the board, not at signing in);
    token="generate" lets it make its own, read from the sign-in line it prints; env adds
    variables to its environment (e.g. TASKBOARD_CODEX_COMMAND). With later=True it is
    started and not waited for: wait_until_up() does."""

    def __init__(self, folder, *args, demo=True, token=None, agent_command=None, pace=0.15,
                 env=None, later=False):
        self.folder = folder
        self.token = token
        os.makedirs(os.path.join(folder, "home"), exist_ok=True)
        argv = [sys.executable, os.path.join(ROOT, "taskboard.py"), "--port", "0",
                "--db", os.path.join(folder, "data", "tb.db")]
        if demo:
            argv.append("--demo")
        if token is None:
            argv.append("--no-auth")
        elif token != "generate":
            argv += ["--token", token]
        if demo and agent_command is None:  # other projects than the Demo: simulated too
            agent_command = shlex.join([sys.executable, os.path.join(ROOT, "taskboard.py"),
                                        "--simulate-agent"])
        if agent_command:
            argv += ["--agent-command", agent_command]
        argv += list(args)
        extra = env or {}
        env = {k: v for k, v in os.environ.items() if not BOARD_ENV.match(k)}
        env |= {"HOME": os.path.join(folder, "home"), "TASKBOARD_SIMULATE_PACE": str(pace),
                "PYTHONUNBUFFERED": "1", **extra}
        self.log_path = os.path.join(folder, "server.log")
        self.argv, self.env, self.earlier = argv, env, ""
        self._spawn()
        self.url = None
        if not later:
            self.wait_until_up()

    def _spawn(self) -> None:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 -- closed in stop()
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def restart(self) -> None:
        """Stop the board (SIGTERM, as systemd does) and start it again on the same port,
        data and arguments: the pages open on it reconnect to the new process."""
        port = self.url.rsplit(":", 1)[1]
        self.stop()
        assert self.proc.returncode == 0, f"the board exited with {self.proc.returncode}"
        self.earlier += self._current()
        self.argv = [*self.argv]
        self.argv[self.argv.index("--port") + 1] = port
        self._spawn()
        self.wait_until_up()

    def wait_until_up(self) -> None:
        """Wait for the URL the board prints once it listens (then its sign-in URL is
        printed too, if any)."""
        self.url = self._wait_for_url()
        signed = re.search(r"Open (\S+/login\?token=(\S+)) to sign in", self._current())
        self.sign_in_url, self.token = (signed.group(1), signed.group(2)) if signed else \
            (None, None)
        self.session = requests.Session()
        if self.token:
            self.session.headers["Authorization"] = f"Bearer {self.token}"

    def output(self) -> str:
        """What it printed (before a restart too)."""
        return self.earlier + self._current()

    def _current(self) -> str:
        """What its current process printed."""
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def _wait_for_url(self, timeout=20.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            match = URL_LINE.search(self._current())
            if match:
                return match.group(1)
            if self.proc.poll() is not None:
                raise AssertionError(f"the board exited ({self.proc.returncode}):\n"
                                     f"{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the board printed no URL in {timeout}s:\n"
                                     f"{self.output()}")
            time.sleep(0.05)

    def api(self, method, path, json_body=None, status=None):
        """One API call; returns the decoded JSON. Fails unless 2xx (or `status`)."""
        response = self.session.request(method, self.url + path, json=json_body, timeout=10)
        ok = response.status_code == status if status else response.ok
        if not ok:
            raise ApiFailed(f"{method} {path} -> {response.status_code}: {response.text}")
        return response.json() if response.content else None

    def demo_project(self) -> dict:
        return next(p for p in self.api("GET", "/api/projects") if p["name"] == "Demo")

    def tasks(self, project_id) -> list:
        return self.api("GET", f"/api/projects/{project_id}/tasks")

    def task(self, task_id) -> dict:
        return self.api("GET", f"/api/tasks/{task_id}")

    def wait_status(self, task_id, status, timeout=30.0) -> dict:
        """Poll the API until the task is in `status` (the UI is checked separately)."""
        deadline = time.monotonic() + timeout
        while True:
            task = self.task(task_id)
            if task["status"] == status and not task.get("is_running"):
                return task
            if time.monotonic() > deadline:
                raise AssertionError(f"task {task_id} is {task['status']}, not {status}, "
                                     f"after {timeout}s")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


def new_board_folder(parent, migrated_db) -> str:
    """A board's folder: data/tb.db a copy of conftest's migrated_db, as each `tb`'s is."""
    folder = str(parent)
    os.makedirs(os.path.join(folder, "data"), mode=0o700)
    shutil.copyfile(migrated_db, os.path.join(folder, "data", "tb.db"))
    return folder


class SpareBoards:
    """A board of start_board's defaults (`python taskboard.py --demo`, the `board` fixture's,
    which most tests use) started ahead, while the test before runs: a test that asks for one
    takes a board that is up already (its start is a second of the test's setup otherwise).
    Each is used by one test only, in a folder of its own; the one left at the end of the
    test process is stopped then. A board inherits this process's environment when it
    starts: a test that changed it (e.g. push_service) gets no spare, and none is started
    then. But for FAKE_AGENT_DIR (conftest's, per test: a spare has its own; its agents are
    the simulated one, never tests/fake_agent.py) and pytest's PYTEST_CURRENT_TEST."""

    PER_TEST = ("FAKE_AGENT_DIR", "PYTEST_CURRENT_TEST")

    def __init__(self, tmp_path_factory, migrated_db):
        self.tmp_path_factory, self.migrated_db = tmp_path_factory, migrated_db
        self.environ = self._environ()  # the environment each spare starts with
        self.spare = None

    @classmethod
    def _environ(cls) -> dict:
        return {k: v for k, v in os.environ.items() if k not in cls.PER_TEST}

    def _start(self) -> Board:
        folder = new_board_folder(self.tmp_path_factory.mktemp("board"), self.migrated_db)
        return Board(folder, later=True,
                     env={"FAKE_AGENT_DIR": os.path.join(folder, "fake-agent")})

    def take(self) -> Board | None:
        """A board up already, or None when the environment is not the spares'."""
        if self._environ() != self.environ:
            return None
        board, self.spare = self.spare or self._start(), None
        board.wait_until_up()
        self.spare = self._start()  # for the next test: it starts while this one runs
        return board

    def close(self) -> None:
        if self.spare is not None:
            self.spare.stop()


@pytest.fixture(scope="session")
def spare_boards(tmp_path_factory, migrated_db):
    spares = SpareBoards(tmp_path_factory, migrated_db)
    yield spares
    spares.close()


@pytest.fixture
def start_board(tmp_path, migrated_db, spare_boards):
    """start_board(*extra_args, demo=True, token=None, agent_command=None, pace=0.15,
    env=None) -> a running Board; `pace` scales the simulated agent's pauses (1 = believable).
    Its database starts as a copy of conftest's migrated_db, as each `tb`'s does. With no
    arguments: a board of SpareBoards, up already (see there)."""
    boards = []

    def start(*args, **options):
        board = spare_boards.take() if not args and not options else None
        if board is None:
            folder = new_board_folder(tmp_path / f"board{len(boards)}", migrated_db)
            board = Board(folder, *args, **options)
        boards.append(board)
        return board

    yield start
    for board in boards:
        board.stop()
    for board in boards:  # shown with a failing test's captured output
        print(f"--- {board.url} server output ---\n{board.output()}")
        assert board.proc.returncode == 0, f"the board exited with {board.proc.returncode}"


@pytest.fixture
def board(start_board):
    """`python taskboard.py --demo`: a Demo project with three backlog tasks."""
    return start_board()


@pytest.fixture
def token_board(start_board):
    return start_board(token="s3cret-token-for-the-browser-test")


@pytest.fixture
def missing_agent_board(start_board):
    return start_board(demo=False, agent_command="/nonexistent")


@pytest.fixture
def context(start_board, new_context):
    """pytest-playwright's context, set up after start_board so that it closes before any
    board stops (a board going away under an open page is not what a test looks at)."""
    context = new_context()
    context.set_default_timeout(15_000)  # an action (click, fill) waits at most this long
    return context


@pytest.fixture
def phone(start_board, browser, browser_context_args, console_errors):
    """A phone-sized context (390×844, touch), its pages watched by console_errors."""
    context = browser.new_context(**{**browser_context_args,
                                     "viewport": {"width": PHONE[0], "height": PHONE[1]},
                                     "is_mobile": True, "has_touch": True,
                                     "device_scale_factor": 2})
    context.set_default_timeout(15_000)
    console_errors.watch_context(context)
    yield context
    context.close()


class ConsoleErrors(list):
    """Console errors and uncaught page errors of every page of the test's context."""

    def __init__(self):
        super().__init__()
        # None allowed by default: not even the 404 of a /favicon.ico that Chromium asks
        # for when a page names no icon (the board's pages name one).
        self.allowed = []

    def allow(self, pattern: str) -> None:
        """An expected error (e.g. the 401 that sends an anonymous visitor to /login)."""
        self.allowed.append(re.compile(pattern))

    def watch_context(self, context) -> None:
        context.on("page", self.watch)
        for page in context.pages:
            self.watch(page)

    def watch(self, page) -> None:
        page.on("console", lambda message: self._console(message))
        page.on("pageerror", lambda error: self.append(f"pageerror: {error}"))

    def _console(self, message) -> None:
        if message.type == "error":
            where = message.location or {}
            self.append(f"console.error: {message.text} ({where.get('url')}:"
                        f"{where.get('lineNumber')})")

    def unexpected(self) -> list:
        return [e for e in self if not any(p.search(e) for p in self.allowed)]


@pytest.fixture
def console_errors(context):
    """Collects console errors and page errors; the test fails if any was unexpected."""
    errors = ConsoleErrors()
    errors.watch_context(context)
    yield errors
    assert not errors.unexpected(), "console errors:\n" + "\n".join(errors.unexpected())


@pytest.fixture
def screenshot():
    """screenshot(page, "board") saves tests/screenshots/board.png (an artifact, not
    committed) and returns its path."""
    os.makedirs(SCREENSHOTS, exist_ok=True)

    def take(page, name, full_page=False):
        path = os.path.join(SCREENSHOTS, f"{name}.png")
        page.screenshot(path=path, full_page=full_page, animations="disabled")
        return path

    return take

