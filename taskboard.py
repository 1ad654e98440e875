# Run as a script (`python taskboard.py`), the module was just compiled, and what the compiler
# used stays in the process: 28 MB of freed heap that glibc cannot give back, for the life
# of the server.  An imported module is compiled once and cached, so the script goes on as
# an import in a fresh image of the same process, with the same interpreter options.  Where
# no .pyc may be written (PYTHONDONTWRITEBYTECODE, as Docker images set it), the code just
# compiled goes to the fresh image through a file in memory, never on disk.
import os, sys  # noqa: E401, I001
if __name__ == "__main__" and __spec__ is None and (
        not sys.dont_write_bytecode or hasattr(os, "memfd_create")):
    _start = [sys.executable, *sys.orig_argv[1:len(sys.orig_argv) - len(sys.argv)], "-c"]
    _here = os.path.dirname(os.path.abspath(__file__))
    if not sys.dont_write_bytecode:
        os.execv(sys.executable, [*_start, "import sys; sys.path.insert(0, sys.argv.pop(1)); "
                                  "import taskboard; taskboard.main()", _here, *sys.argv[1:]])
    import marshal
    _code = os.memfd_create("taskboard.pyc", 0)
    os.write(_code, marshal.dumps(sys._getframe().f_code))
    os.lseek(_code, 0, os.SEEK_SET)
    os.set_inheritable(_code, True)
    os.execv(sys.executable, [*_start, "import sys, os, marshal, types; "
                              "code = open(int(sys.argv.pop(1)), 'rb').read(); "
                              "sys.path.insert(0, sys.argv.pop(1)); "
                              "m = sys.modules['taskboard'] = types.ModuleType('taskboard'); "
                              "m.__file__ = sys.argv.pop(1); "
                              "exec(marshal.loads(code), m.__dict__); m.main()",
                              str(_code), _here, os.path.abspath(__file__), *sys.argv[1:]])

# First, before any other import: gevent's monkey patch. Its plugin hooks are skipped: they
# read every installed package's metadata, 0.1 s of each start, for plugins Taskboard has
# none of.
import gevent.events; gevent.events.notify_and_call_entry_points = gevent.events.notify  # noqa
from gevent import monkey; monkey.patch_all()  # noqa: E402, E702, I001

__doc__ = """taskboard: a self-hosted project and task board that drives AI coding agents.

Run:   python taskboard.py [--host H] [--port P] [--db PATH] [--agent-command CMD]
Test:  python -m pytest

One module in ordered sections; find them with  grep -n '^# [A-Z]' taskboard.py

    CONFIGURATION · ERRORS · UTILITIES · FIELDS · FIELDS: THE TABLES ·
    STORE · STORE: PROJECTS, HOSTS, TASKS AND RUNS · STORE: THE REST · EVENTS ·
    AGENT OUTPUT · AGENT ADAPTERS · SIMULATED AGENT · SANDBOX · MACHINES: THIS ONE ·
    MACHINES: SSH HOSTS ·
    SERVICES: PROJECTS AND TASKS · SERVICES: RUNS ·
    SERVICES: THE AGENT CHANNEL AND THE VERIFIER · SERVICES: ATTEMPTS ·
    SERVICES: GIT · SERVICES: THE SOURCE HOST ·
    SERVICES: PHONES AND WEBHOOKS · SERVICES: PLANNING, RESOURCES AND SETTINGS ·
    SERVICES: OUTSIDE CLIENTS · SERVICES: HOSTS · SERVICES: PREVIEWS · SUPERVISORS ·
    HTTP PLUMBING · ROUTES · WEBSOCKET · PREVIEW PROXY · DESKTOP ROUTES · OPENAPI ·
    BOARD TOOLS (MCP) · MAIN

Each section uses only what the sections above it define, except the SERVICES sections and
SUPERVISORS, which call each other (tests/test_layout.py).

Layers: ROUTES call SERVICES, and each route declares who may call it (SCOPES); only
SERVICES change state (one transaction each, events published after commit; every status
change through move_task()); services never read the HTTP request; only the STORE
sections touch the database; SUPERVISORS own agent processes and report through
services; a run's MACHINE (this one or an SSH host) is the one place it is spawned.
The contract is design.md and spec/interface.md of the shared folder.
"""

import argparse
import base64
import codecs
import collections
import contextlib
import datetime as dt
import fcntl
import functools
import gc
import gzip
import hashlib
import hmac
import importlib
import importlib.util
import ipaddress
import itertools
import json
import logging
import mimetypes
import operator
import posixpath
import re
import resource
import secrets
import shlex
import shutil
import signal
import socket
import sqlite3
import stat
import struct
import subprocess
import tempfile
import threading
import time
import types
import unicodedata
import urllib.parse
import uuid
import zoneinfo

import bottle
import cronsim
import gevent
import gevent.event
import gevent.lock
import gevent.os
import gevent.pool
import gevent.server
import gevent.socket
from gevent import pywsgi
from geventwebsocket.exceptions import WebSocketError
from geventwebsocket.handler import WebSocketHandler
from geventwebsocket.websocket import Header, WebSocket


class Deferred:
    """`name` of `module`, imported when first called or looked into."""

    def __init__(self, module: str, name: str):
        self.where = module, name

    def real(self):
        return getattr(importlib.import_module(self.where[0]), self.where[1])

    def __call__(self, *args, **kwargs):
        return self.real()(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.real(), name)


def deferred_module(name: str) -> types.ModuleType:
    """The module `name`, imported when first used (importlib's LazyLoader)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _import_dataset() -> types.ModuleType:
    """dataset, whose import also loads alembic, for schema changes through its table API
    (Taskboard's migrations make them), and SQLAlchemy's PostgreSQL dialect, for a type:
    12 MB and 0.16 s of each start. The names it takes from them stand in until used."""
    stand_ins = {name: attr for name, attr in (
        ("alembic", None), ("alembic.migration", "MigrationContext"),
        ("alembic.operations", "Operations"), ("sqlalchemy.dialects.postgresql", "JSONB"))
        if name not in sys.modules}
    for name, attr in stand_ins.items():
        module = sys.modules[name] = types.ModuleType(name)
        if attr:
            setattr(module, attr, Deferred(name, attr))
    try:
        import dataset
    finally:
        for name in stand_ins:
            del sys.modules[name]
    return dataset


class _Dataset(types.ModuleType):
    """dataset, imported (_import_dataset) when first looked into: the simulated agent and
    the board tools' bridge (--simulate-agent, --mcp), each run's processes of their own,
    never open a database; its import was most of their start (0.2-0.45 s of CPU)."""

    def __getattr__(self, name):
        module = globals()["dataset"] = _import_dataset()
        return getattr(module, name)


dataset = _Dataset("dataset")
# Only webhooks, push and the source host need these; they cost a start 13 MB.
py_vapid = deferred_module("py_vapid")
requests = deferred_module("requests")
ec = deferred_module("cryptography.hazmat.primitives.asymmetric.ec")
serialization = deferred_module("cryptography.hazmat.primitives.serialization")

# =============================================================================
# CONFIGURATION
# =============================================================================

__version__ = "0.1.0"

log = logging.getLogger("taskboard")

#: The five task statuses, in board order.
STATUSES = ("backlog", "in_progress", "testing", "done", "failed")
TASK_TYPES = ("feature", "bugfix", "refactor", "docs", "test", "chore")
MODELS = ("model_large", "model_medium", "model_small")
EFFORTS = ("low", "medium", "high")
PERMISSION_MODES = ("auto-accept", "allow-tools", "default")
PLATFORMS = ("platform_a", "platform_b", "platform_c", "custom")
LANGUAGES = ("en", "tr")
#: Events a webhook may subscribe to (the spec's five, task:failed, task:needs_input,
#: task:merged), with the headline and Discord embed colour (0xRRGGBB) of their deliveries;
#: webhook:test is the test route's.
WEBHOOK_EVENTS = {
    "task:created": ("New task", 0x5865F2), "task:started": ("Task started", 0xF0B232),
    "task:completed": ("Task ready for review", 0x3BA55C),
    "task:approved": ("Task approved", 0x2D7D46),
    "task:changes_requested": ("Changes requested", 0xEB6E2F),
    "task:failed": ("Task failed", 0xED4245),
    "task:needs_input": ("The agent needs you", 0xFEE75C),
    "task:merged": ("Pull request merged", 0x8957E5),
    "schedule:fired": ("Schedule fired", 0x1ABC9C)}
WEBHOOK_TEST = ("Test message from Taskboard", 0x99AAB5)
#: Priority numbers as words, for {{priority}} in templates.
PRIORITY_NAMES = ("low", "medium", "high", "urgent")
#: How finely a planning session splits its topic, and the task count each asks for.
GRANULARITIES = {"high-level": "3 to 5", "balanced": "5 to 10", "detailed": "10 to 20"}
#: A plan with more tasks keeps the first ones (and says so in its warnings).
MAX_PLAN_TASKS = 50

#: A webhook delivery attempt gives up after this long.
WEBHOOK_TIMEOUT_SECONDS = 10.0
#: The pause before the second attempt after a 5xx or connection error (each next: 4 times
#: longer, see Deliveries).
WEBHOOK_BACKOFF_BASE = 2.0
#: The longest a delivery waits before its next attempt when its target asks (Retry-After).
RETRY_AFTER_MAX_SECONDS = 60.0
#: Delivery records kept per webhook.
WEBHOOK_DELIVERIES_KEPT = 50
#: Notices kept waiting per webhook (a target that hangs); beyond, the oldest are dropped.
WEBHOOK_QUEUE_KEPT = 1000

#: What a device can be sent (design §13), as Settings → Notifications offers it.
PUSH_EVENTS = {"approval": "a tool call waits for Allow or Deny",
               "question": "the agent asks you a question",
               "testing": "a task is ready for review", "failed": "a task failed",
               "plan": "a plan is ready", "budget": "today's cost reached the daily limit"}
#: A notification's Allow and Deny work once, for this long (and so long it is kept).
ACTION_TOKEN_MINUTES = 15
#: Any other notification is kept by the push service for a phone that is off this long.
PUSH_TTL_SECONDS = 86_400
#: Messages waiting per device for a push service that hangs; beyond, the oldest go.
PUSH_QUEUE_KEPT = 100

#: A shorter API token is refused at start; a session (the cookie of a login) lasts this long.
TOKEN_MIN_LENGTH = 24
SESSION_DAYS = 30
#: Failed credentials (logins, bearers, cookies) allowed per client, and from all clients
#: together, in LOGIN_WINDOW_SECONDS; past them the client gets 429.
LOGIN_FAILURES_ALLOWED = 5
LOGIN_FAILURES_TOTAL = 50
LOGIN_WINDOW_SECONDS = 60.0
#: Request bodies larger than this are refused with 413 (attachments have their own limit).
MAX_BODY_BYTES = 1024 * 1024
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
#: How many published events /ws keeps, and at most how many bytes: what ?since= replays,
#: and how far a client may fall behind before it is sent `resync` and dropped.
EVENT_BUFFER_SIZE = 20_000
EVENT_BUFFER_BYTES = 16 * 1024 * 1024
WS_PING_SECONDS = 25
WS_SEND_TIMEOUT_SECONDS = 10
#: A dropped client's connection is reset if its `resync` is not sent within this time.
WS_DROP_GRACE_SECONDS = 2
#: A client message (clients only send keep-alives) larger than this ends the connection.
WS_MAX_MESSAGE_BYTES = 64 * 1024
#: The close code of a /ws connection whose credential was revoked or expired, or whose
#: session was logged out (its reason says which); a client must not reconnect with it.
WS_CREDENTIAL_ENDED = 4401
#: Agent log entries are written and published at most this often per task.
LOG_FLUSH_SECONDS = 0.1

#: The agent CLI's --model alias of each tier.
MODEL_ALIASES = {"model_large": "opus", "model_medium": "sonnet", "model_small": "haiku"}
#: The agent CLIs a project or task can run (design §14): the environment variable naming
#: its command, the default command, its npm package (how to install it) and whether it has
#: a two-way channel (approvals, messages; design §12).  Claude keeps --agent-command too.
#: `api`: the hosts of its API and login, which its sandboxed runs always reach (design §20).
AgentCli = collections.namedtuple("AgentCli", "env command package two_way api")
AGENTS = {
    "claude": AgentCli("TASKBOARD_AGENT_COMMAND", "claude", "@anthropic-ai/claude-code", True,
                       ("api.anthropic.com", "console.anthropic.com", "claude.ai")),
    "codex": AgentCli("TASKBOARD_CODEX_COMMAND", "codex", "@openai/codex", False,
                      ("api.openai.com", "chatgpt.com", "auth.openai.com")),
    "gemini": AgentCli("TASKBOARD_GEMINI_COMMAND", "gemini", "@google/gemini-cli", False,
                       ("generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com",
                        "oauth2.googleapis.com")),
    "opencode": AgentCli("TASKBOARD_OPENCODE_COMMAND", "opencode", "opencode-ai", False,
                         ("opencode.ai", "models.dev", "api.anthropic.com", "api.openai.com")),
}
#: A CLI's `--version` line as health may show it: a version number, words, no paths.
VERSION_LINE = re.compile(r"^[\w .()@+-]{0,60}\d+\.\d+[\w .()@+-]{0,60}$")
#: Each agent's model of each tier; None: the CLI's own default (OpenCode names a
#: provider/model the user configured, so the board cannot guess one).
AGENT_MODELS = {
    "claude": MODEL_ALIASES,
    "codex": {"model_large": "gpt-5-codex", "model_medium": "gpt-5-codex",
              "model_small": "gpt-5-codex-mini"},
    "gemini": {"model_large": "gemini-2.5-pro", "model_medium": "gemini-2.5-flash",
               "model_small": "gemini-2.5-flash-lite"},
    "opencode": dict.fromkeys(MODELS),
}
#: USD per million tokens (as PRICES) of the non-Claude models the board knows, to estimate
#: a run's cost when the CLI reports none; an unknown model is priced as its tier in PRICES.
MODEL_PRICES = {"gpt-5-codex": (1.25, 10.0, 0.125, 0.0),
                "gpt-5-codex-mini": (0.25, 2.0, 0.025, 0.0),
                "gemini-2.5-pro": (1.25, 10.0, 0.31, 0.0),
                "gemini-2.5-flash": (0.30, 2.50, 0.075, 0.0),
                "gemini-2.5-flash-lite": (0.10, 0.40, 0.025, 0.0)}
#: USD per million tokens (input, output, cache read, cache write), to estimate the cost of a
#: run when the CLI reports none.  Estimates only: the prices Claude Code 2.1 itself charges
#: each tier's model at (recorded: claude-opus-4-8 at 5/25/0.5/6.25).
PRICES = {"model_large": (5.0, 25.0, 0.5, 6.25), "model_medium": (3.0, 15.0, 0.3, 3.75),
          "model_small": (1.0, 5.0, 0.1, 1.25)}
#: The tier whose PRICES a Claude model is charged at, by the family word in its name
#: ("claude-sonnet-4-5-…"): a run is estimated at the model that answered, not the tier asked.
CLAUDE_FAMILIES = {family: tier for tier, family in MODEL_ALIASES.items()}
#: Timeouts are set in minutes; tests shrink the minute.
SECONDS_PER_MINUTE = 60.0
#: A stopped agent gets SIGTERM, then SIGKILL after this long.
KILL_GRACE_SECONDS = 5.0
#: How long an agent CLI waits for the board tools' MCP server to start.  Claude Code
#: 2.1.197 in print mode does not wait at all unless told (MCP_CONNECTION_NONBLOCKING=0),
#: then 5 s (MCP_CONNECT_TIMEOUT_MS), less than the server's start can take on a small or
#: busy machine: its first turn went without the tools, its init line saying "pending".
MCP_START_SECONDS = 30
#: The board tools' MCP server's name, in every CLI's configuration and tool names.
BOARD_TOOLS_SERVER = "taskboard"
#: After the agent exits, output still in its pipes is read for this long at most.
EXIT_GRACE_SECONDS = 2.0
#: Hosts (design §15): each one a project names is checked this often; ssh gives up opening
#: a connection after SSH_CONNECT_SECONDS and probes a quiet one every SSH_ALIVE_SECONDS.
HOST_CHECK_SECONDS = 60.0
SSH_CONNECT_SECONDS = 10
SSH_ALIVE_SECONDS = 15
#: Board secrets that never reach an agent's environment.
SECRET_ENV = ("TASKBOARD_TOKEN", "TASKBOARD_TOKEN_FILE", "TASKBOARD_GIT_HOST_TOKEN",
              "GITHUB_TOKEN")
#: A longer agent output line is cut into pieces of this size.
MAX_LINE_BYTES = 1024 * 1024
#: The most lines of what a run's sandbox says as it ends (its commit's output) kept.
MAX_END_LINES = 200
#: Log messages are cut to this many characters (the raw line is kept whole).
MAX_LOG_MESSAGE = 8000

#: Every event a /ws client can receive, and what its data holds (the README's table of
#: events is made from this: readme_reference()).
EVENT_TYPES = {
    "project:created": "the full project",
    "project:updated": "the full project",
    "project:deleted": "`{id}`",
    "task:created": "the full task",
    "task:updated": "the full task (fields, status, usage, run state)",
    "task:deleted": "`{id, projectId}`",
    "task:log": (
        "`{taskId, projectId, entries}`: new log entries, at most one message per 100 ms per "
        "task"),
    "task:usage": (
        "live usage of a running task: `{taskId, projectId, runId, inputTokens, outputTokens, "
        "cacheReadTokens, cacheCreationTokens, cost}`"),
    "schedule:created": "a [schedule](#schedules), as `GET /api/schedules/:id` answers it",
    "schedule:updated": "a [schedule](#schedules), as `GET /api/schedules/:id` answers it",
    "schedule:deleted": "`{id, projectId}`",
    "schedule:fired": (
        "a schedule fired: the schedule as it is now, and `taskId` (the task it made or sent "
        "to; `null` when it made none: see its `lastError`)"),
    "attempt:updated": (
        "an attempt of a task run by several agents changed: `{taskId, n, agent, model, effort,"
        " status, runId, branch, costUsd, durationMs, tokens, diff, check, verdict, summary, "
        "picked, error, endedAt}`"),
    "template:created": "the template",
    "template:updated": "the template",
    "template:deleted": "`{id, projectId}`",
    "snippet:created": "the snippet",
    "snippet:updated": "the snippet",
    "snippet:deleted": "`{id, projectId}`",
    "webhook:created": "the webhook",
    "webhook:updated": "the webhook",
    "webhook:deleted": "`{id, projectId}`",
    "webhook:delivery": (
        "a recorded webhook delivery attempt: `{webhookId, projectId, id, event, attempt, "
        "status, ok, error, durationMs, createdAt}`"),
    "plan:started": "`{projectId, planId, topic, model, effort}`",
    "plan:phase": (
        "`{projectId, planId, phase}`: `starting` at spawn, `exploring` at the first tool call,"
        " `writing` at the first text after a tool call"),
    "plan:progress": "`{projectId, planId, type: \"text\", content}`: text the planner wrote",
    "plan:log": (
        "`{projectId, planId, type, message, tool}`: `type` is `tool` (with `tool`), `result`, "
        "`error`, `phase` or `network` (a host the [network policy](#network-policy) refused "
        "the planner, the first time: \"refused host:port (rule)\")"),
    "plan:stats": (
        "`{projectId, planId, elapsed, tokens: {input, output}, toolCalls, turns}` after each "
        "turn"),
    "plan:completed": (
        "`{projectId, planId, tasks: [{id, title, task_type, task_key}], stats: {elapsed, "
        "tokens, toolCalls, turns, exitCode}, error, warnings}`; `error` is `null` when tasks "
        "were created"),
    "plan:cancelled": "`{projectId, planId}`",
    "settings:updated": "the full settings object",
    "approval:requested": "an approval waiting for a person",
    "approval:resolved": "an approval decided (by a person, a rule or the timeout) or expired",
    "message:created": (
        "a message: yours (queued or sent) or the agent's answer at the end of a turn"),
    "message:updated": "a message, now sent to the agent",
    "dependencies:updated": "`{projectId}`: a project's dependency edges changed",
    "host:created": (
        "the host (also after each check, and when a run there starts or ends: its `running`)"),
    "host:updated": (
        "the host (also after each check, and when a run there starts or ends: its `running`)"),
    "host:deleted": "`{id}`",
    "preview:updated": (
        "a task's [preview](#preview-a-tasks-running-result) changed: `{taskId, n, status, "
        "url, startedAt, readyAt, error, output}` (`n`: its attempt, or `null`)"),
    "resync": "`{}`: refetch everything",
    "ping": "sent every 25 s without `seq`; ignore it",
}

#: The agent CLI's flags for a task run's two-way channel (design §12).
CHANNEL_FLAGS = ("--input-format", "stream-json", "--replay-user-messages",
                 "--permission-prompt-tool", "stdio")
#: What a person may answer an approval with, and what they may ask to be remembered.
DECISIONS = ("allow", "deny")
APPROVAL_STATUSES = ("pending", "allowed", "denied", "expired")
APPROVAL_KINDS = ("tool", "question")
DECIDERS = ("person", "rule", "timeout", "push")
REMEMBER = ("session", "project")
#: Who wrote a message of a task's thread: a person, its agent, or who sent the agent back
#: by itself (changes_from): the verifier's verdict, its pull request's reviews and checks.
MESSAGE_AUTHORS = ("person", "agent", "verifier", "pull_request")
MESSAGE_STATES = ("queued", "sent")
#: The stop check (stopCheckCommand) is killed after this long; the agent is sent the last
#: STOP_CHECK_TAIL characters of its output.
STOP_CHECK_TIMEOUT_SECONDS = 600.0
STOP_CHECK_TAIL = 4000
MESSAGE_MAX = 100_000  # characters of a message to the agent
#: A followed pull request (design §16): its states, its checks, its review.
PR_STATES = ("open", "merged", "closed")
PR_CHECKS = ("pending", "passing", "failing", "none")
PR_REVIEWS = ("none", "approved", "changes_requested")
#: Best of N (design §18): an attempt's states, how a project picks one, and how many.
ATTEMPT_STATUSES = ("queued", "running", "done", "failed", "stopped")
ATTEMPT_PICKS = ("manual", "auto")
ATTEMPTS_MIN, ATTEMPTS_MAX = 2, 4
#: Personal tokens (design §19): what each scope lets a token do, and how its secret
#: starts (so the board knows it for one without hashing a run's or its own token).
TOKEN_SCOPES = ("read", "write", "approve")
PERSONAL_TOKEN_PREFIX = "tbp_"
#: A personal token's lastUsedAt is written at most this often.
TOKEN_USE_SECONDS = 60.0
#: A schedule's modes: a new task each fire, or a message to the last one it made; the
#: longest its worker sleeps (a wall clock set forward is noticed within it).
SCHEDULE_MODES = ("new", "continue")
SCHEDULE_NAP_SECONDS = 60.0
#: A project's sandbox (design §17): bubblewrap whenever it works where the run happens
#: (auto), always (bubblewrap: never unsandboxed), or never (none).
SANDBOX_MODES = ("auto", "bubblewrap", "none")
#: A project's network policy for its sandboxed runs (design §20): any host through the
#: board's egress proxy (open), only networkAllow's and its CLI's API (allowlist), none.
NETWORK_MODES = ("open", "allowlist", "none")
#: A sandboxed run's egress proxy keeps at most this many hosts it reached, and logs at most
#: this many hosts it refused (each once; later refusals of a host are counted).
NETWORK_HOSTS_KEPT = 100
#: Under the home directory: what no sandboxed run ever sees, whatever sandboxPaths says
#: (SSH keys, credentials, keyrings, browser profiles).
NEVER_VISIBLE = (".ssh", ".gnupg", ".netrc", ".git-credentials", ".aws", ".config/gh",
                 ".kube", ".docker", ".password-store", ".local/share/keyrings", ".pki",
                 ".mozilla", ".thunderbird", ".config/google-chrome", ".config/chromium",
                 ".config/BraveSoftware", ".config/microsoft-edge", ".var/app",
                 ".cargo/credentials.toml", ".cargo/credentials", ".config/uv/credentials")

#: A task's preview (design §21): its states; a start not answering HTTP on its port after
#: PREVIEW_READY_SECONDS fails; its output's last PREVIEW_OUTPUT_LINES lines are kept; the
#: one-time link to it works for PREVIEW_LINK_SECONDS.
PREVIEW_STATUSES = ("starting", "ready", "failed", "stopped")
PREVIEW_READY_SECONDS = 120.0
PREVIEW_OUTPUT_LINES = 50
PREVIEW_LINK_SECONDS = 300.0
#: The path of a preview's one-time link on its port, and its cookie's name (with the port).
PREVIEW_LINK_PATH = "/__tb_preview"
PREVIEW_COOKIE = "tb_preview_{port}"

#: Command-line options; each has an environment twin.
Option = collections.namedtuple("Option", "flag env default help")
OPTIONS = (
    Option("--host", "TASKBOARD_HOST", "127.0.0.1", "address to bind"),
    Option("--port", "TASKBOARD_PORT", "4000", "port to bind (0 picks a free one)"),
    Option("--db", "TASKBOARD_DB", None, "SQLite database path; its folder becomes the data dir"),
    Option("--agent-command", "TASKBOARD_AGENT_COMMAND", "claude", "agent CLI to run"),
    Option("--token", "TASKBOARD_TOKEN", None,
           "API token (visible in the process list: prefer the env var or --token-file)"),
    Option("--token-file", "TASKBOARD_TOKEN_FILE", None,
           "file holding the API token (default: the data dir's token, made at first start)"),
)
#: Environment-only settings.
ENV_SETTINGS = (
    *(Option(None, cli.env, cli.command, f"{name} CLI to run (npm package {cli.package})")
      for name, cli in AGENTS.items() if name != "claude"),
    Option(None, "TASKBOARD_RETRY_BASE_SECONDS", "30", "base of the retry backoff"),
    Option(None, "TASKBOARD_ALLOWED_HOSTS", "", "extra Host names to accept, comma-separated"),
    Option(None, "TASKBOARD_NO_AUTH", "", "1: no token (as --no-auth; loopback only)"),
    Option(None, "TASKBOARD_TRUSTED_PROXIES", "",
           "addresses or networks of your reverse proxies, comma-separated"),
    Option(None, "TASKBOARD_PUSH_CONTACT", "mailto:taskboard@localhost",
           "who runs this board, for push services (mailto: or https:; Apple wants a real one)"),
    Option(None, "TASKBOARD_GIT_HOST_API", "https://api.github.com", "source-host REST API"),
    Option(None, "TASKBOARD_GIT_HOST_TOKEN", None, "source-host token (else GITHUB_TOKEN)"),
    Option(None, "TASKBOARD_BWRAP", "bwrap", "bubblewrap's command, for sandboxed runs"),
    Option(None, "STATE_DIRECTORY", None, "data dir under systemd (when --db is not given)"),
    Option(None, "XDG_DATA_HOME", "~/.local/share", "data dir base otherwise"),
)

#: runtime holds every process-wide object; built by init() in MAIN.
runtime = None


# =============================================================================
# ERRORS
# =============================================================================

class ApiError(Exception):
    """An error a client caused or must see; carries the HTTP status and code."""
    status = 400
    code = "validation_error"

    def __init__(self, message, field=None, headers=None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.headers = headers or {}  # e.g. Retry-After

    def body(self):
        out = {"error": self.message, "code": self.code}
        if self.field is not None:
            out["field"] = self.field
        return out


class Invalid(ApiError):
    """A value in the request is wrong."""


class RpcError(ApiError):
    """A message to /mcp the board cannot take: 400, its body a JSON-RPC error."""

    def __init__(self, rpc_code: int, message: str):
        super().__init__(message)
        self.rpc_code = rpc_code

    def body(self):
        return {"jsonrpc": "2.0", "id": None, "error": {"code": self.rpc_code,
                                                        "message": self.message}}


class InvalidJson(ApiError):
    """The body is not the JSON it claims to be."""
    code = "invalid_json"


class NotFound(ApiError):
    """The id in the URL does not exist."""
    status = 404
    code = "not_found"


class Conflict(ApiError):
    """The request clashes with the current state."""
    status = 409
    code = "conflict"


class Forbidden(ApiError):
    """The request may not be made from where it came."""
    status = 403
    code = "forbidden"


class Unauthorized(ApiError):
    """No credential where one is needed, or one that is wrong, revoked or expired."""
    status = 401
    code = "unauthorized"


class MethodNotAllowed(ApiError):
    status = 405
    code = "method_not_allowed"


class LocalOnly(ApiError):
    """A desktop command asked from anywhere but this machine."""
    status = 403
    code = "local_only"


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class RequestTimeout(ApiError):
    status = 408
    code = "request_timeout"


class UnsupportedMediaType(ApiError):
    status = 415
    code = "unsupported_media_type"


class TooManyRequests(ApiError):
    status = 429
    code = "rate_limited"


class DatabaseBusy(ApiError):
    status = 503
    code = "database_busy"


class StorageFull(ApiError):
    status = 507
    code = "storage_full"


class CannotRun(Exception):
    """Why an agent cannot run now: its CLI is missing, (`until`) its usage limit, or
    (`sandbox`) the sandbox a project must have does not work."""

    def __init__(self, why: str, agent: str, until: float | None = None,
                 sandbox: bool = False):
        super().__init__(why)
        self.agent, self.until, self.sandbox = agent, until, sandbox


class GitError(Exception):
    """A git command failed; the message says which and why."""


class GitHostTrouble(Exception):
    """The source host did not answer a look as it should; `wait`: how long it asked to
    be left alone (Retry-After, X-RateLimit-Reset), if it said."""

    def __init__(self, why: str, wait: float | None = None):
        super().__init__(why)
        self.wait = wait


class HostDown(Exception):
    """A host cannot be reached or refused the connection; `shown`: the fingerprint of a
    host key that differs from the pinned one."""

    def __init__(self, message: str, shown: str | None = None):
        super().__init__(message)
        self.shown = shown


class InvalidParams(ValueError):
    """JSON-RPC's -32602: a method's params are not what it takes."""


# =============================================================================
# UTILITIES
# =============================================================================

def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def b64url(raw: bytes) -> str:
    """base64url without padding, as Web Push writes keys."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def b64url_decode(text) -> bytes | None:
    """The bytes of base64url text (padding optional); None when it is not that."""
    if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9_-]*={0,2}", text):
        return None
    try:
        return base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))
    except ValueError:
        return None


def iso(when: dt.datetime) -> str:
    """ISO 8601 UTC with milliseconds and Z, the only timestamp format we write."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + \
        f"{when.microsecond // 1000:03d}Z"


def iso_at(epoch: float) -> str:
    """iso() of a Unix time."""
    return iso(dt.datetime.fromtimestamp(epoch, dt.UTC))


def now_iso() -> str:
    """iso(utc_now()), its seconds formatted once a second: every agent line is stamped,
    and strftime() was a tenth of the server's time under a log flood."""
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))]
    return f"{_second[1]}{int((now - second) * 1000):03d}Z"


_second = [None, ""]  # the second now_iso() last formatted, and its text


def parse_iso(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def local_day_start_iso() -> str:
    """The UTC timestamp of the start of the server-local calendar day."""
    return iso(utc_now().astimezone().replace(hour=0, minute=0, second=0, microsecond=0))


def json_dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


#: Half of a UTF-16 surrogate pair, standing alone: JSON can spell one ("\ud83d"),
#: json.loads() keeps it, UTF-8 (so SQLite, so a response) cannot encode it.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: The only way JSON text can hold one: an escape.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def lone_surrogates_replaced(value, text: str):
    """value (parsed from text) with U+FFFD for each lone surrogate."""
    if not SURROGATE_ESCAPE.search(text):
        return value
    dumped = json_dumps(value)
    return json.loads(LONE_SURROGATE.sub("\ufffd", dumped)) if LONE_SURROGATE.search(dumped) \
        else value


def found(value, message: str):
    """value, else NotFound(message): store functions answer None for an unknown id."""
    if value is None:
        raise NotFound(message)
    return value


class RawJson(str):
    """Text that is already JSON, sent as it is."""


def backoff(base: float, failures: int, factor: float = 2.0) -> float:
    """The pause after a number of failures in a row: base, then `factor` times longer
    each time (runs, deliveries, the PR follower)."""
    return base * factor ** (failures - 1)


class Kept:
    """Values kept between reads, up to `limit` in all as measured by `size`; the least
    recently read goes first, the one just kept never."""

    def __init__(self, limit: int, size=len):
        self.limit, self.size, self.total = limit, size, 0
        self.items = collections.OrderedDict()

    def get(self, key):
        """The value kept for key (now the most recently read), or None."""
        if key in self.items:
            self.items.move_to_end(key)
        return self.items.get(key)

    def put(self, key, value):
        self.pop(key)
        self.items[key] = value
        self.total += self.size(value)
        while self.total > self.limit and len(self.items) > 1:
            self.total -= self.size(self.items.popitem(last=False)[1])
        return value

    def pop(self, key) -> None:
        if key in self.items:
            self.total -= self.size(self.items.pop(key))


class Worker:
    """A background loop, written once: step() does one round of work and returns the
    seconds until the next round is due, or None to wait for a wake().  A round that
    raises is logged and tried again after `retry` seconds.
    Between rounds it waits on one event, so an idle worker does no work at all; stop()
    lets a round under way end for `grace` seconds, then kills it."""

    def __init__(self, name: str, step=None, first: float | None = 0.0,
                 retry: float = 1.0, grace: float = 0.0):
        self.name, self.first, self.retry, self.grace = name, first, retry, grace
        if step is not None:
            self.step = step
        self.due = None  # time.monotonic() of the next round; None: when woken
        self.woken = gevent.event.Event()
        self.greenlet, self.stepping, self.stopping = None, False, False

    def step(self) -> float | None:
        raise NotImplementedError

    @property
    def idle(self) -> bool:
        """Nothing under way and nothing due: only a wake() starts the next round."""
        return not self.stepping and self.due is None

    def start(self) -> None:
        if self.first is not None:
            self._due_in(self.first)
        self.greenlet = gevent.spawn(self._run)

    def wake(self, after: float = 0.0) -> None:
        """Have the next round start within `after` seconds (at once by default)."""
        self._due_in(after)

    def _due_in(self, seconds: float) -> None:
        due = time.monotonic() + seconds
        if self.due is None or due < self.due:
            self.due = due
            self.woken.set()

    def stop(self) -> None:
        self.stopping = True
        self.woken.set()
        if self.greenlet is not None:
            self.greenlet.join(timeout=self.grace)
            self.greenlet.kill()

    def _run(self) -> None:
        while not self.stopping:
            self.woken.clear()  # before reading `due`: a wake from now on ends the wait
            left = None if self.due is None else self.due - time.monotonic()
            if left is None or left > 0:
                self.woken.wait(left)
                continue
            self.due, self.stepping = None, True
            try:
                pause = self.step()
            except Exception:  # a background loop: log and carry on
                log.exception("%s failed", self.name)
                pause = self.retry
            finally:
                self.stepping = False
            if pause is not None:
                self._due_in(max(pause, 0.0))


#: Seconds after a request (the last of a burst, at most one a second) that the heap's free
#: pages go back to the system.
RELEASE_MEMORY_SECONDS = 1.0


@functools.cache
def _malloc_trim():
    import ctypes
    return getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc's; None elsewhere


def release_memory() -> None:
    """Give the heap's free pages back to the system: glibc keeps what a big answer used
    once it is freed (16 MB after listing 10,000 tasks).  Well under a millisecond."""
    if _malloc_trim() is not None:
        _malloc_trim()(0)


def slugify(text: str, limit: int = 40) -> str:
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:limit].strip("-") or "untitled"


def safe_file_name(name: str) -> str:
    """A file name that cannot leave its folder or hide: no paths, no dot files."""
    name = unicodedata.normalize("NFC", os.path.basename(name.replace("\\", "/")))
    name = re.sub(r"[^\w.\- ]+", "_", name).strip(" .") or "file"
    stem, ext = os.path.splitext(name)
    if len(ext.encode()) > 20:
        stem, ext = name, ""
    while len((stem + ext).encode()) > 150:  # file systems allow 255 bytes; keep room
        stem = stem[:-1]
    return (stem.rstrip(" .") or "file") + ext


def _stdlib_subprocess():
    """A copy of the standard library's subprocess module, loaded apart from the one
    gevent patched, with the os functions gevent patched as they were (gevent's os.close
    waits for the hub, which this module's start of a child never gives a turn)."""
    spec = importlib.util.find_spec("subprocess")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.os = types.ModuleType("os")
    module.os.__dict__.update({**os.__dict__, **monkey.saved.get("os", {})})
    return module


_STDLIB_POPEN = _stdlib_subprocess().Popen


class Popen(subprocess.Popen):
    """gevent's Popen (pipes and waits that let other greenlets run), its child started as
    CPython starts one, by vfork (_posixsubprocess): gevent's own forks the whole board
    first, 6 ms of CPU and a copy of its page tables at 150 MB for every git command.
    gevent watches the child as one of its own (gevent.os._watch_child, pinned gevent),
    from before the hub can reap it."""

    _close_pipe_fds = _STDLIB_POPEN._close_pipe_fds
    _posix_spawn = _STDLIB_POPEN._posix_spawn

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       universal_newlines, startupinfo, creationflags, shell, *rest):
        *rest, process_group = rest  # gevent's None is CPython's -1
        self._loop.install_sigchld()
        _STDLIB_POPEN._execute_child(self, args, executable, preexec_fn, close_fds, pass_fds,
                                     cwd, env, startupinfo, creationflags, shell, *rest,
                                     -1 if process_group is None else process_group)
        gevent.os._watch_child(self.pid, self._on_child, self._loop, True)


def run_process(argv: list[str], input=None, timeout: float | None = None,
                **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(argv, input=input, capture_output=True, timeout=timeout, **kwargs),
    its child started by Popen above; no input: stdin is /dev/null."""
    with Popen(argv, stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
               stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run_command(argv: list[str], cwd: str | None = None, timeout: float = 30,
                stderr=subprocess.DEVNULL, env: dict | None = None,
                session: bool = False, keep: int = 0, umask: int = -1) \
        -> tuple[int | None, str]:
    """Run a short command; (exit code, stdout), or (None, why) if it could not run.
    With session, in a process group of its own, killed whole after the timeout; with
    keep, only the last `keep` bytes of the output are kept (also after a timeout); with
    umask, under that umask (-1: the board's).

    It reads in the calling greenlet: subprocess.run's helper greenlets outlive a kill."""
    try:
        proc = Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                     stderr=stderr, env=env, start_new_session=session, umask=umask)
    except OSError as exc:
        return None, str(exc)
    out = bytearray()
    try:
        with gevent.Timeout(timeout):
            while chunk := proc.stdout.read(65536):
                out += chunk
                if keep and len(out) > keep:
                    del out[:-keep]
            return proc.wait(), out.decode("utf-8", "replace")
    except gevent.Timeout:
        return None, f"{argv[0]} did not finish within {timeout:g}s" + (
            f"; the end of its output:\n{out.decode('utf-8', 'replace')}" if keep else "")
    finally:
        if session:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def reaches(children, start, goal) -> bool:
    """Whether goal can be reached from start along children[node] (a cycle check)."""
    seen, stack = set(), [start]
    while stack:
        node = stack.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(children[node])
    return False


def project_key_from_slug(slug: str) -> str:
    """Initials of the slug's parts (2..4 letters), else its first 3 letters, else P."""
    parts = [p for p in slug.split("-") if p]
    initials = [p[0] for p in parts if p[0].isalpha()][:4]
    if len(parts) >= 2 and len(initials) >= 2:
        return "".join(initials).upper()
    letters = [c for c in slug if c.isalpha()][:3]
    return "".join(letters).upper() or "P"


def _dict(value) -> dict:
    """value if it is a dict, else {}: agent output is parsed, never trusted."""
    return value if isinstance(value, dict) else {}


def _cut(text: str, limit: int = MAX_LOG_MESSAGE) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more]"


def http_call(method: str, url: str, timeout: float, session=None, whole: bool = True,
              **options) -> "requests.Response | str":
    """The board's one outbound HTTP call (webhooks, push services, the source host): its
    response, or why there is none.  The timeout bounds the whole call; a session keeps
    its connections alive; without whole the answer's body is never read (a webhook's).
    The exchange runs in a greenlet of its own (_exchange()) that neither this timeout nor
    the caller's end (a kill as the board stops, a timeout of its own) cuts short: it ends
    by its own timeouts, closing its socket.  Cut mid-connect, that socket would be left
    open for the garbage collector to close, whenever it next ran."""
    exchange = gevent.spawn(_exchange, method, url, timeout, session, whole, options)
    exchange.join(timeout)
    if not exchange.ready():
        return f"no answer within {timeout:g} s"
    answer = exchange.get()
    if isinstance(answer, Exception):  # not one of requests' errors: a bug, the caller's
        raise answer
    return answer


def _exchange(method: str, url: str, timeout: float, session, whole: bool, options: dict) \
        -> "requests.Response | str | Exception":
    """http_call()'s request: its response, why there is none, or what else it raised.  Its
    connect and each read have the timeout (a socket's: what it ends closes the
    connection); the whole of it twice that, for an answer that comes a byte at a time."""
    try:
        with gevent.Timeout(2 * timeout):  # no name: the timer's traceback holds no cycle
            response = (session or requests).request(
                method, url, timeout=timeout, stream=not whole, verify=os.environ.get(
                    "REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE") or True,
                **options)
            if not whole:
                response.close()
            return response
    except (gevent.Timeout, requests.Timeout):
        return f"no answer within {timeout:g} s"
    except OSError as exc:  # requests' errors, and a CA bundle path that is not there
        reason = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(exc))
        reason = reason.group(1) if reason else "its certificate is not trusted" if \
            "CERTIFICATE_VERIFY_FAILED" in str(exc) else type(exc).__name__
        return f"cannot reach {urllib.parse.urlsplit(url).netloc}: {reason}"
    except Exception as exc:  # handed to the caller (a greenlet's own would only be printed)
        return exc


def dial(address, timeout: float, family: int = socket.AF_INET) -> socket.socket:
    """A connection to address (an IP address and port, or a Unix socket's path), or
    OSError.  Whatever ends the attempt (a refusal, its timeout, a kill or a caller's
    timeout mid-connect) closes the socket: dropped open, it would close only when the
    garbage collector next runs."""
    conn = socket.socket(family, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout)
        conn.connect(address)
    except BaseException:
        conn.close()
        raise
    return conn


def open_regular(path: str):
    """A regular file at path opened for reading in binary, or OSError: never through a
    link (O_NOFOLLOW) and never blocking on a FIFO or a device (O_NONBLOCK, then refused),
    so a file an agent could have planted cannot hang the board (design §17 v6)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError("not a regular file")
    return open(fd, "rb")


def read_regular(path: str, limit: int) -> str | None:
    """The first `limit` characters of a regular file (see open_regular), None when there is
    none or it cannot be read; at most 4 × limit bytes are read, whatever its size."""
    try:
        with open_regular(path) as f:
            return f.read(4 * limit).decode("utf-8", "replace")[:limit]
    except OSError:
        return None


def wait_asked(response) -> float | None:
    """Seconds the host asks a client to wait (Retry-After, else X-RateLimit-Reset when
    no requests remain), or None."""
    with contextlib.suppress(KeyError, ValueError):
        if response.headers.get("Retry-After"):
            return max(float(response.headers["Retry-After"]), 1.0)
        if response.headers.get("X-RateLimit-Remaining") == "0":
            return max(float(response.headers["X-RateLimit-Reset"]) - time.time(), 1.0)
    return None


#: A host name in networkAllow (design §20), `*.` before it for any name under it.
HOST_NAME_RE = re.compile(r"^(\*\.)?((?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*"
                          r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)$")


def host_pattern(text) -> tuple[str, int | None, bool] | None:
    """A networkAllow entry (`example.com`, `*.example.com`, `host:port`, an IP, `[v6]:port`)
    as (host in lower case or the address as ipaddress spells it, port or None: any,
    whether it is a `*.` pattern); None when it is none of these."""
    if not isinstance(text, str) or not 0 < len(text) <= 260:
        return None
    host, port = text.lower(), None
    bracketed = re.fullmatch(r"\[([0-9a-f:.]+)\](?::(\d{1,5}))?", host)
    if bracketed:
        host, port = bracketed.groups()
    elif host.count(":") == 1:
        host, port = host.split(":")
    if port is not None:
        if not port.isdigit() or not 0 < int(port) < 65536:
            return None
        port = int(port)
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host)), port, False
    name = None if bracketed or ":" in host else HOST_NAME_RE.fullmatch(host)
    return (name.group(2), port, bool(name.group(1))) if name else None


def check_network_allow(value, name):
    """At most 200 host patterns (host_pattern())."""
    if not isinstance(value, list) or len(value) > 200:
        raise Invalid(f"{name} must be an array of at most 200 host patterns", name)
    for entry in value:
        if host_pattern(entry) is None:
            raise Invalid(f"{name}: {json_dumps(entry)[:100]} is not a host pattern (example.com, "
                          "*.example.com, host:port, an IP address)", name)


# =============================================================================
# FIELDS
# =============================================================================
# One table per resource says, for every field: its API name, its column, its type, whether
# it is required, writable or read-only, its default and its limits.  Validation, reads,
# the OpenAPI document and the README's field lists all come from these tables.

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*/(?!\.\.?$)[A-Za-z0-9_.-]+$")
BRANCH_RE = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,200}(?<![/.])$")
URL_RE = re.compile(r"^https?://[^\s/?#]+[^\s]*$", re.IGNORECASE)
LOG_KIND_RE = re.compile(r"^[a-z_]{1,40}$")


class Field:
    """One field of a resource as the API sees it.

    kind: str, int, number, bool (JSON boolean out), flag (1/0 out), enum, tags,
    tools (comma string or array in, comma string out), events (array of `choices`),
    secret (a write-only str), time (read-only timestamp), json (stored as JSON text; `shape` is
    its JSON schema).
    """

    def __init__(self, name, kind, *, column=None, required=False, default=None,
                 nullable=False, choices=None, lo=None, hi=None, maxlen=None, pattern=None,
                 readonly=False, create_only=False, check=None, doc="", shape=None,
                 write_only=False):
        self.name, self.kind = name, kind
        self.column = column or name
        self.required, self.default, self.nullable = required, default, nullable
        self.choices, self.lo, self.hi, self.maxlen = choices, lo, hi, maxlen
        self.pattern, self.check, self.doc, self.shape = pattern, check, doc, shape or {}
        self.readonly, self.create_only = readonly, create_only
        self.write_only = write_only or kind == "secret"

    def parse(self, value):
        """Turn a JSON value into the column value, or raise Invalid naming the value."""
        name = self.name
        if value is None:
            if self.nullable:
                return None
            raise Invalid(f"{name} must not be null", name)
        parser = self.PARSERS.get(self.kind)
        if parser:
            value = parser(self, value)
        if self.check:
            self.check(value, name)
        if self.kind == "json" and self.column.endswith("_json"):  # kept as JSON text
            value = json_dumps(value)
        return value

    def _parse_string(self, value):
        name = self.name
        if not isinstance(value, str):
            raise Invalid(f"{name} must be a string, not {json_dumps(value)[:60]}", name)
        if self.required and not value.strip():
            raise Invalid(f"{name} must not be empty", name)
        if self.maxlen and len(value) > self.maxlen:
            raise Invalid(f"{name} is longer than {self.maxlen} characters", name)
        if self.pattern and (value or self.default != "") \
                and not self.pattern.fullmatch(value):
            raise Invalid(f"{name} {value[:80]!r} is not valid: {self.doc}", name)
        return value

    def _parse_enum(self, value):
        if value not in self.choices:
            raise Invalid(f"{self.name} {json_dumps(value)[:60]} is not one of: "
                          f"{', '.join(self.choices)}", self.name)
        return value

    def _parse_number(self, value):
        name, kind = self.name, self.kind
        ok = (int,) if kind == "int" else (int, float)
        if isinstance(value, bool) or not isinstance(value, ok) or value != value:
            word = "an integer" if kind == "int" else "a number"
            raise Invalid(f"{name} must be {word}, not {json_dumps(value)[:60]}", name)
        if not -2**63 <= value < 2**63:
            raise Invalid(f"{name} {value} is out of range", name)
        if (self.lo is not None and value < self.lo) or \
                (self.hi is not None and value > self.hi):
            raise Invalid(f"{name} {value} is out of range {self.lo}..{self.hi}", name)
        return value

    def _parse_boolean(self, value):
        if value not in (True, False, 0, 1) or isinstance(value, float):
            raise Invalid(f"{self.name} must be true or false, not "
                          f"{json_dumps(value)[:60]}", self.name)
        return int(bool(value))

    def _parse_events(self, value):
        name = self.name
        if not isinstance(value, list) or not value:
            raise Invalid(f"{name} must be a non-empty array of event names", name)
        for event in value:
            if not isinstance(event, str) or event not in self.choices:
                raise Invalid(f"{name}: {json_dumps(event)[:60]} is not one of: "
                              f"{', '.join(self.choices)}", name)
        return json_dumps(list(dict.fromkeys(value)))

    #: How parse checks a value of each kind and turns it into its column value; a kind
    #: not here (json, time) is taken as it is.
    PARSERS = {"str": _parse_string, "secret": _parse_string, "enum": _parse_enum,
               "int": _parse_number, "number": _parse_number,
               "bool": _parse_boolean, "flag": _parse_boolean,
               "tags": lambda self, value: _parse_tags(value, self.name),
               "tools": lambda self, value: _parse_tools(value, self.name),
               "events": _parse_events}

    def render(self, value):
        """Turn a column value into its JSON value."""
        if value is None:
            return None
        if self.kind == "bool":
            return bool(value)
        if self.kind == "events" or self.kind == "json" and isinstance(value, str):
            return json.loads(value)
        return value  # a json setting is stored decoded

    def schema(self) -> dict:
        """The JSON schema of the field, for /api/openapi.json."""
        types = {"str": "string", "secret": "string", "time": "string", "enum": "string",
                 "int": "integer", "number": "number", "bool": "boolean", "flag": "integer",
                 "tags": "string", "tools": "string", "events": "array"}
        out = {"type": types[self.kind]} if self.kind != "json" else dict(self.shape)
        if self.kind == "enum":
            out["enum"] = list(self.choices)
        if self.kind == "events":
            out["items"] = {"type": "string", "enum": list(self.choices)}
        if self.kind == "flag":
            out["enum"] = [0, 1]
        if self.kind == "time":
            out["format"] = "date-time"
        if self.nullable:
            out["type"] = [out["type"], "null"]
        keywords = {"minimum": self.lo, "maximum": self.hi, "maxLength": self.maxlen or None,
                    "pattern": self.pattern.pattern if self.pattern else None,
                    "default": self.default, "description": self.doc or None,
                    "readOnly": self.readonly or None, "writeOnly": self.write_only or None}
        out.update({key: value for key, value in keywords.items() if value is not None})
        return out


def _parse_tags(value, name):
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise Invalid(f"{name} must be a json array of strings, not {value[:60]!r}",
                          name) from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise Invalid(f"{name} must be a json array of strings", name)
    return json_dumps(value)


def _parse_tools(value, name):
    if isinstance(value, list):
        if not all(isinstance(t, str) and t.strip() for t in value):
            raise Invalid(f"{name} must be tool names", name)
        return ",".join(t.strip() for t in value)
    if not isinstance(value, str):
        raise Invalid(f"{name} must be a comma-separated string or an array of tool names", name)
    return ",".join(t.strip() for t in value.split(",") if t.strip())


def _check_working_dir(value, name):
    if not os.path.isabs(value):
        home = os.path.expanduser(value) if value.startswith("~") else None
        raise Invalid(f"{name} {value!r} must be an absolute path" + (
            f": write {home}" if home and os.path.isabs(home) else ""), name)
    if not os.path.isdir(value):
        raise Invalid(f"{name} {value!r} is not an existing directory", name)


def _check_webhook_url(value, name):
    if not URL_RE.fullmatch(value):
        raise Invalid(f"{name} {value[:80]!r} must be an http:// or https:// url", name)


def _check_command(value, name):
    try:
        shlex.split(value)
    except ValueError as exc:
        raise Invalid(f"{name} is not a valid command line: {exc}", name) from None


def _by_agent(value, name, each: str):
    """The items of an object whose keys are agent CLIs (AGENTS), or Invalid."""
    if not isinstance(value, dict):
        raise Invalid(f"{name} must be an object of agents, each {each}", name)
    for agent in value:
        if agent not in AGENTS:
            raise Invalid(f"{name}: {json_dumps(agent)[:60]} is not one of: "
                          f"{', '.join(AGENTS)}", name)
    return value.items()


def _check_agent_models(value, name):
    """{agent: {tier: model name or null}}, agents of AGENTS and tiers of MODELS only."""
    for agent, tiers in _by_agent(value, name, "an object of tiers"):
        if not isinstance(tiers, dict):
            raise Invalid(f"{name}.{agent} must be an object of tiers", name)
        for tier, model in tiers.items():
            if tier not in MODELS:
                raise Invalid(f"{name}.{agent}: {json_dumps(tier)[:60]} is not one of: "
                              f"{', '.join(MODELS)}", name)
            if model is not None and (not isinstance(model, str) or not
                                      re.fullmatch(r"[\w.:/@][\w.:/@-]{0,199}", model)):
                raise Invalid(f"{name}.{agent}.{tier} must be a model name or null", name)


def _ro(name, kind="int", **kw):
    return Field(name, kind, readonly=True, **kw)


def _created():
    return _ro("createdAt", "time", column="created_at")


#: A source host's login (GitHub's: letters, digits, single dashes; an app's ends in [bot]).
LOGIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}(?:\[bot\])?$")


def _check_sandbox_paths(value, name):
    """{readOnly, readWrite}: absolute paths that exist, none of them the data dir (or in
    it, or holding it) or a credential store a sandboxed run never sees (design §17)."""
    if not isinstance(value, dict) or not set(value) <= {"readOnly", "readWrite"}:
        raise Invalid(f"{name} must be an object {{readOnly: [...], readWrite: [...]}}", name)
    data = os.path.realpath(runtime.data_dir)
    home = os.path.realpath(os.path.expanduser("~"))
    stores = [os.path.join(home, name) for name in NEVER_VISIBLE]  # as real paths
    for side, paths in value.items():
        if not isinstance(paths, list) or len(paths) > 50:
            raise Invalid(f"{name}.{side} must be an array of at most 50 paths", name)
        for path in paths:
            shown = json_dumps(path)[:200]
            if not isinstance(path, str) or not os.path.isabs(path):
                raise Invalid(f"{name}.{side}: {shown} is not an absolute path", name)
            real = os.path.realpath(path)
            if not os.path.exists(real):
                raise Invalid(f"{name}.{side}: {shown} does not exist", name)
            if _inside(real, data) or _inside(data, real):
                raise Invalid(f"{name}.{side}: {shown} is or holds the board's data dir, "
                              "which a sandboxed run never sees", name)
            secret = next((p for p in stores if _inside(real, p)), None)
            if secret is not None:
                raise Invalid(f"{name}.{side}: {shown} is a credential store ({secret}) a "
                              "sandboxed run never sees", name)
            token = runtime.config["token_file"]
            if token and _inside(os.path.realpath(token), real):
                raise Invalid(f"{name}.{side}: {shown} is or holds the board's token file, "
                              "which a sandboxed run never sees", name)


def _inside(path: str, folder: str) -> bool:
    """Whether path is folder or under it (both real and absolute)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _check_logins(value, name):
    """At most 100 logins, each as the source host spells them."""
    if not isinstance(value, list) or len(value) > 100:
        raise Invalid(f"{name} must be an array of at most 100 logins", name)
    for login in value:
        if not isinstance(login, str) or not LOGIN_RE.fullmatch(login):
            raise Invalid(f"{name}: {json_dumps(login)[:60]} is not a login", name)


def validate(fields, body, *, partial=False) -> dict:
    """Check a request body against a field table; return {column: value}.

    Unknown fields are refused (a typo must never be dropped silently); read-only fields
    are ignored so a client may PUT what it GOT.  With partial=False, required fields
    must be present and missing ones get their defaults.
    """
    if not isinstance(body, dict):
        raise Invalid("the request body must be a json object")
    by_name = {f.name: f for f in fields}
    out = {}
    for name, value in body.items():
        field = by_name.get(name)
        if field is None:
            raise Invalid(f"unknown field {name!r}", name)
        if field.readonly or (partial and field.create_only):
            continue
        out[field.column] = field.parse(value)
    if not partial:
        for field in fields:
            if field.readonly or field.column in out:
                continue
            if field.required:
                raise Invalid(f"{field.name} is required", field.name)
            if field.default is not None:
                out[field.column] = field.default
    return out


def validate_known(lookup, fields, body, **options) -> dict:
    """validate(), except that an unknown id in the URL wins over a bad body: when the body
    is refused, lookup() runs and raises NotFound if the id is unknown."""
    try:
        return validate(fields, body, **options)
    except Invalid:
        lookup()
        raise


def render(fields, row, only=None) -> dict:
    """A stored row as the API shows it (write-only fields never leave)."""
    return {f.name: f.render(row.get(f.column)) for f in fields
            if not f.write_only and (only is None or f.name in only)}


@functools.cache
def json_object_sql(fields) -> str:
    """An SQLite json_object() expression rendering a row exactly as render() does."""
    parts = []
    for f in fields:
        if f.write_only:
            continue
        if f.kind == "bool":
            value = f"json(CASE WHEN {f.column} IS NULL THEN 'null' WHEN {f.column} " \
                    f"THEN 'true' ELSE 'false' END)"
        elif f.kind in ("events", "json"):
            value = f"json({f.column})"
        else:
            value = f.column
        parts.append(f"'{f.name}', {value}")
    return f"json_object({', '.join(parts)})"


# =============================================================================
# FIELDS: THE TABLES
# =============================================================================
# One table per resource (see FIELDS), with the checks only it uses.

#: A preview's first page: a path on its own origin (one /, then no / or \\: never a link
#: to another host), without spaces or control characters.
PREVIEW_PATH_RE = re.compile(r"/(?![/\\])[^\s\x00-\x1f\x7f]*")


def _check_preview_command(value, name):
    """A shell line (sh -c): one line, no NUL or other control character."""
    if re.search(r"[\x00-\x08\x0a-\x1f\x7f]", value):
        raise Invalid(f"{name} must be one line without control characters", name)


PROJECT_FIELDS = (
    _ro("id", doc="the project's id"),
    Field("name", "str", required=True, maxlen=200, doc="display name"),
    Field("slug", "str", required=True, pattern=SLUG_RE,
          doc="lowercase letters, digits and dashes, starting with a letter or digit; unique"),
    _ro("key", "str", doc="prefix of the task keys, made from the slug once (`task-board` → "
        "`TB`)"),
    Field("workingDir", "str", column="working_dir", required=True, maxlen=4096,
          check=_check_working_dir, doc="absolute path of an existing directory"),
    Field("icon", "str", nullable=True, maxlen=200,
          doc="an emoji or one or two letters shown as its icon; `null` = its name's first "
          "letter"),
    Field("iconSeed", "str", column="icon_seed", nullable=True, maxlen=200,
          doc="any text; picks its icon's colour; `null` = its slug's"),
    Field("agent", "enum", choices=tuple(AGENTS), default="claude",
          doc="the agent CLI its tasks run"),
    Field("permissionMode", "enum", column="permission_mode", choices=PERMISSION_MODES,
          default="default", doc="how its agents' tool calls are allowed: all of them, those "
          "of `allowedTools`, or each by a person"),
    Field("allowedTools", "tools", column="allowed_tools", nullable=True,
          doc="comma-separated tool names (an array is accepted too), for `allow-tools`"),
    Field("autoQueue", "flag", column="auto_queue", default=0,
          doc="start its ready backlog tasks, in order, whenever a slot is free"),
    Field("maxConcurrent", "int", column="max_concurrent", lo=1, hi=5, default=1,
          doc="how many of its agents run at once"),
    Field("autoBranch", "flag", column="auto_branch", default=0,
          doc="each task works in a worktree on its own branch (needs a git repository with "
          "a commit); off, in `workingDir` itself"),
    Field("autoPr", "flag", column="auto_pr", default=0,
          doc="push a done task's branch and open a pull request on `gitHostRepo`"),
    Field("prBaseBranch", "str", column="pr_base_branch", default="main", pattern=BRANCH_RE,
          doc="a git branch name"),
    Field("prPollSeconds", "int", column="pr_poll_seconds", lo=1, hi=3600, default=60,
          doc="how often an open pull request of a task is looked at (seconds)"),
    Field("prFixMaxAttempts", "int", column="pr_fix_max_attempts", lo=0, hi=20, default=3,
          doc="failing checks, reviews and conflicts of one pull request sent back to the "
          "agent at most this many times; then it waits for you"),
    Field("prTrustedAuthors", "json", column="pr_trusted_authors_json", nullable=True,
          check=_check_logins, shape={"type": "array", "maxItems": 100, "items": {
              "type": "string", "pattern": LOGIN_RE.pattern}},
          doc="source-host logins whose reviews and comments go back to the agent by "
          "themselves, beside the repository's owners, members and collaborators"),
    Field("autoTest", "flag", column="auto_test", default=0,
          doc="a verifier judges each finished task: approved, done; else back to its agent"),
    Field("testPrompt", "str", column="test_prompt", default="", maxlen=100_000,
          doc="what the verifier is told besides the task"),
    Field("taskTimeoutMinutes", "int", column="task_timeout_minutes", nullable=True, lo=0,
          hi=1440, default=0, doc="kill a run that takes longer (minutes); `0` or `null` = no "
          "timeout"),
    Field("maxRetries", "int", column="max_retries", lo=0, hi=10, default=2,
          doc="how many times a crashed or timed-out run is tried again"),
    Field("gitHostRepo", "str", column="git_host_repo", default="", pattern=REPO_RE,
          doc="owner/repo"),
    Field("gitHostSyncEnabled", "flag", column="git_host_sync_enabled", default=0,
          doc="import the open issues of `gitHostRepo` as backlog tasks, every 5 minutes"),
    Field("taskBudgetUsd", "number", column="task_budget_usd", nullable=True, lo=0.01,
          hi=10_000, doc="USD a run may spend, passed to the agent as `--max-budget-usd`"),
    Field("approvalTimeoutMinutes", "int", column="approval_timeout_minutes", lo=0, hi=10_080,
          default=0, doc="deny a tool approval nobody answered after this long (minutes); "
          "`0` = wait for a person"),
    Field("stopCheckCommand", "str", column="stop_check_command", default="", maxlen=2000,
          check=_check_command, doc="run when the agent tries to finish (e.g. `pytest -q`); "
          "while it fails the agent goes on; empty = off"),
    Field("stopCheckMaxBlocks", "int", column="stop_check_max_blocks", lo=0, hi=20, default=3,
          doc="at most this many times a failing stop check sends the agent back"),
    Field("host", "int", column="host_id", nullable=True, doc="the host (`GET /api/hosts`) "
          "its tasks run on; `null` = this machine"),
    Field("repoUrl", "str", column="repo_url", default="", maxlen=2000,
          pattern=re.compile(r"^[^\s-]\S*$"), doc="what a host clones (git URL); empty = "
          "the origin of `workingDir`"),
    Field("sandbox", "enum", choices=SANDBOX_MODES, default="auto", doc="`auto`: its runs go "
          "through bubblewrap wherever it works, else unsandboxed (health says which); "
          "`bubblewrap`: never unsandboxed (a task waits while it cannot work); `none`: never"),
    Field("sandboxPaths", "json", column="sandbox_paths_json", nullable=True,
          check=_check_sandbox_paths, shape={"type": "object", "properties": {
              side: {"type": "array", "maxItems": 50, "items": {"type": "string"}}
              for side in ("readOnly", "readWrite")}, "additionalProperties": False},
          doc="`{readOnly: [...], readWrite: [...]}`: absolute paths a sandboxed run may also "
          "read, or write; never the data dir, `~/.ssh` or another credential store"),
    Field("network", "enum", choices=NETWORK_MODES, default="open", doc="where its sandboxed "
          "runs go: anywhere, only `networkAllow` and its CLI's API, or nowhere"),
    Field("networkAllow", "json", column="network_allow_json", nullable=True,
          check=check_network_allow, shape={"type": "array", "items": {"type": "string"}},
          doc="host patterns: `example.com`, `*.example.com`, `host:port`, an IP, `[v6]:port`"),
    Field("attemptPick", "enum", column="attempt_pick", choices=ATTEMPT_PICKS,
          default="manual", doc="`auto`: when a task's last attempt ends, pick the one whose "
          "check passed, then the verifier approved, then the cheapest, then the fastest; "
          "`manual`: a person picks"),
    Field("keepAttemptBranches", "flag", column="keep_attempt_branches", default=0,
          doc="keep the branches of the attempts not picked (their worktrees go anyway)"),
    Field("previewCommand", "str", column="preview_command", default="", maxlen=2000,
          check=_check_preview_command, doc="one shell line that serves the task's checkout "
          "on `127.0.0.1:$PORT`, for its [preview](#preview-a-tasks-running-result); empty "
          "= no preview"),
    Field("previewPath", "str", column="preview_path", default="/", maxlen=2000,
          pattern=PREVIEW_PATH_RE, doc="where a preview opens: a path starting with one `/`"),
    _ro("simulated", "bool", doc="its runs use the built-in simulated agent, which spends "
        "nothing: the Demo project under `--demo`"),
    _ro("createdAt", "time", column="created_at", doc="when it was made"),
    _ro("updatedAt", "time", column="updated_at", doc="when it last changed"),
)
#: The project list entry and summary entry show these fields only.
PROJECT_LIST_FIELDS = ("id", "name", "slug", "workingDir", "createdAt")
PROJECT_SUMMARY_FIELDS = ("id", "name", "slug", "workingDir")

TASK_FIELDS = (
    _ro("id"),
    _ro("project_id"),
    Field("title", "str", required=True, maxlen=500),
    Field("description", "str", default="", maxlen=200_000),
    Field("status", "enum", choices=STATUSES, default="backlog"),
    Field("priority", "int", lo=0, hi=3, default=0, doc="0 low .. 3 urgent"),
    Field("task_type", "enum", choices=TASK_TYPES, default="feature"),
    Field("model", "enum", choices=MODELS, doc="default: the template's, else settings"),
    Field("thinking_effort", "enum", choices=EFFORTS, doc="default: the template's, else "
          "settings"),
    Field("acceptance_criteria", "str", default="", maxlen=100_000),
    Field("tags", "tags", nullable=True, doc="a string holding a JSON array of strings"),
    Field("agent", "enum", choices=tuple(AGENTS), nullable=True,
          doc="the agent CLI this task runs; null = the project's"),
    Field("parent_task_id", "int", nullable=True, create_only=True,
          doc="a task of the same project; set only on create"),
    _ro("task_key", "str"),
    _ro("created_at", "time"), _ro("updated_at", "time"), _ro("started_at", "time"),
    _ro("completed_at", "time"), _ro("retry_count"), _ro("is_running", "bool"),
    _ro("awaiting_subtasks", "bool"), _ro("branch_name", "str"),
    _ro("branchAt", "str", column="branch_at", nullable=True, doc="where branch_name is, "
        "for a task of a project on a host: `<host name>:<path of its clone>` until the "
        "approved task's branch is fetched into the repository of workingDir, then that "
        "repository's path; null otherwise"),
    _ro("pr_url", "str"),
    _ro("session_id", "str"), _ro("input_tokens"), _ro("output_tokens"),
    _ro("cache_read_tokens"), _ro("cache_creation_tokens"), _ro("total_cost", "number"),
    _ro("cost_estimated", "bool", doc="some of total_cost is estimated from token counts "
        "(the agent CLI reported no cost)"),
    _ro("work_duration_ms"), _ro("revision_count"), _ro("queue_position"),
    _ro("permission_denials", doc="tools the agent was refused in its latest run"),
    _ro("last_error", "str", doc="why the latest run failed, or null"),
    _ro("waitingUntil", "time", column="waiting_until", nullable=True,
        doc="when the agent's usage limit lifts and the task continues by itself (it stays "
        "in_progress), or null"),
    _ro("waitingFor", "json", column="waiting_for_json", nullable=True,
        shape={"type": "object"}, doc="{host, error}: the task waits for its project's host "
        "to be reachable (it stays where it was moved, and starts when a check of the host "
        "succeeds); {sandbox}: for bubblewrap to work there (sandbox bubblewrap); or null"),
    _ro("sandboxed", "bool", nullable=True, doc="whether its latest run went through the "
        "sandbox (null: it has not run, or its run was simulated: no sandbox needed)"),
    _ro("network", "json", column="network_json", nullable=True, shape={"type": "object"},
        doc="its latest sandboxed run's network: {refused (count), reached ([host:port]), "
        "refusedHosts ([{host, port, rule, count}])}"),
    _ro("pending_approvals", doc="tool approvals and questions waiting for a person"),
    _ro("attempts", nullable=True, doc="how many attempts its latest run with several "
        "agents had (GET /api/tasks/:id/attempts), or null"),
    _ro("pr", "json", column="pr_json", nullable=True, shape={"type": "object", "properties": {
        "number": {"type": "integer"}, "url": {"type": "string"},
        "state": {"type": "string", "enum": list(PR_STATES)},
        "checks": {"type": "string", "enum": list(PR_CHECKS)},
        "review": {"type": "string", "enum": list(PR_REVIEWS)},
        "fixAttempts": {"type": "integer"}, "error": {"type": ["string", "null"]},
        "needsYou": {"type": ["string", "null"]}, "held": {"type": "array", "items": {
            "type": "object", "properties": {
                "key": {"type": "string"}, "author": {"type": ["string", "null"]},
                "what": {"type": "string"}, "text": {"type": "string"}}}}}},
        doc="the task's pull request as the board follows it (autoPr): fixAttempts = "
        "revisions it sent back; error = why it stopped following; needsYou = why it "
        "waits for you; held = reviews and comments of people the repository does not "
        "trust, which go back only when a person sends them; null = no pull request"),
)

TEMPLATE_FIELDS = (
    _ro("id"), _ro("projectId", column="project_id"),
    Field("name", "str", required=True, maxlen=200),
    Field("content", "str", required=True, maxlen=200_000,
          doc="text with {{project_name}} {{task_title}} {{task_type}} {{priority}} {{model}}"),
    Field("taskType", "enum", column="task_type", choices=TASK_TYPES, nullable=True),
    Field("model", "enum", choices=MODELS, nullable=True),
    Field("thinkingEffort", "enum", column="thinking_effort", choices=EFFORTS, nullable=True),
    _created(),
)

SNIPPET_FIELDS = (
    _ro("id"), _ro("projectId", column="project_id"),
    Field("name", "str", required=True, maxlen=200),
    Field("content", "str", required=True, maxlen=200_000),
    Field("enabled", "bool", default=1),
    _created(),
)

WEBHOOK_FIELDS = (
    _ro("id"), _ro("projectId", column="project_id"),
    Field("platform", "enum", choices=PLATFORMS, required=True),
    Field("url", "str", required=True, maxlen=2000, check=_check_webhook_url),
    Field("events", "events", column="events_json", required=True,
          choices=tuple(WEBHOOK_EVENTS)),
    Field("enabled", "bool", default=1),
    Field("secret", "secret", nullable=True, maxlen=500,
          doc="write-only; signs custom payloads (X-Taskboard-Signature)"),
    _ro("hasSecret", "bool", column="has_secret"),
    _created(),
)

PLAN_FIELDS = (
    Field("topic", "str", required=True, maxlen=10_000, doc="what to plan"),
    Field("agent", "enum", choices=tuple(AGENTS), nullable=True,
          doc="the agent CLI that plans (read-only); null = the project's"),
    Field("model", "enum", choices=MODELS, default="model_medium"),
    Field("effort", "enum", choices=EFFORTS, default="medium"),
    Field("granularity", "enum", choices=tuple(GRANULARITIES), default="balanced",
          doc="high-level 3-5 tasks, balanced 5-10, detailed 10-20"),
    Field("context", "str", default="", maxlen=100_000,
          doc="extra context on stack or constraints"),
)

#: The body of PATCH /api/tasks/:id/status.
STATUS_FIELDS = (Field("status", "enum", choices=STATUSES, required=True),)

SETTINGS_FIELDS = (
    Field("confirmBeforeDelete", "bool", default=1,
          doc="show a confirmation before deleting tasks"),
    Field("defaultModel", "enum", choices=MODELS, default="model_medium",
          doc="model of new tasks"),
    Field("defaultEffort", "enum", choices=EFFORTS, default="medium",
          doc="thinking effort of new tasks"),
    Field("language", "enum", choices=LANGUAGES, default="en", doc="board language"),
    Field("autoOpenTerminal", "bool", default=0, doc="open the log panel when a task starts"),
    Field("soundEnabled", "bool", default=1, doc="play a sound when a task completes"),
    Field("dailyCostLimit", "number", nullable=True, lo=0, hi=1_000_000,
          doc="USD; when today's cost reaches it the queue starts nothing new"),
    Field("agentIdleTimeoutMinutes", "int", lo=0, hi=1440, default=60,
          doc="kill a run that printed nothing for this long; `0` = off"),
    Field("logRetentionDays", "int", nullable=True, lo=1, hi=36500,
          doc="delete agent log entries and raw events older than this many days (within a "
          "minute of start, then hourly; tasks, runs and usage stay); `null` = keep forever"),
    Field("agentModels", "json", nullable=True, check=_check_agent_models,
          shape={"type": "object", "x-builtIn": AGENT_MODELS, "additionalProperties": {
              "type": "object", "additionalProperties": {"type": ["string", "null"]}}},
          doc="`{agent: {model_large, model_medium, model_small}}`: the model each agent CLI "
          "is given for a tier, over the built-in ones (a `null` model: the CLI's own "
          "default); `null` = the built-in ones"),
    Field("maxPreviews", "int", lo=0, hi=20, default=3,
          doc="[previews](#preview-a-tasks-running-result) running at once at most; `0` = "
          "none; the next start → 409 naming `maxPreviews`"),
    Field("previewIdleMinutes", "int", lo=1, hi=1440, default=30,
          doc="stop a preview nobody asked anything of for this long (a page holding a "
          "WebSocket to it open counts as asking)"),
    Field("gitHostWebhookSecret", "secret", nullable=True, maxlen=500,
          doc="what the source host signs its webhook calls with (`X-Hub-Signature-256`); "
          "`null` = the webhook route refuses every call"),
    _ro("hasGitHostWebhookSecret", "bool", default=0,
        doc="whether `gitHostWebhookSecret` is set"),
    _ro("hasGitHostToken", "bool", default=0, doc="whether the board has a source-host token "
        "(`TASKBOARD_GIT_HOST_TOKEN` or `GITHUB_TOKEN` in its environment); pull requests "
        "and issue sync need one"),
)

#: Log entry and revision shapes (read-only), for the OpenAPI document.
LOG_FIELDS = (
    _ro("id"), _ro("taskId", column="task_id"), _ro("runId", column="run_id"),
    _ro("createdAt", "time", column="created_at"), _ro("kind", "str"), _ro("message", "str"),
    _ro("tool", "str"), _ro("isError", "bool", column="is_error"),
    _ro("durationMs", column="duration_ms"),
    _ro("author", "enum", choices=MESSAGE_AUTHORS, nullable=True,
        doc="who wrote an entry of kind message"),
)
#: A tool call or question of a running agent waiting for (or answered by) a person.
APPROVAL_FIELDS = (
    _ro("id"), _ro("taskId", column="task_id"), _ro("projectId", column="project_id"),
    _ro("runId", column="run_id"), _ro("requestId", "str", column="request_id"),
    _ro("kind", "enum", choices=APPROVAL_KINDS), _ro("toolName", "str", column="tool_name"),
    _ro("input", "json", column="input_json", doc="the tool's input as the agent sent it"),
    _ro("suggestions", "json", column="suggestions_json",
        doc="the CLI's permission_suggestions: rules it proposes to remember"),
    _ro("status", "enum", choices=APPROVAL_STATUSES),
    _ro("decidedBy", "str", column="decided_by", nullable=True,
        pattern=re.compile(rf"^({'|'.join(DECIDERS)}|token:.+)$"), doc=f"one of: "
        f"{', '.join(DECIDERS)}; or token:<name>, a personal token's (design §19)"),
    _ro("message", "str", nullable=True, doc="the denial's message to the agent"),
    _ro("createdAt", "time", column="created_at"),
    _ro("decidedAt", "time", column="decided_at", nullable=True),
)
DECISION_FIELDS = (
    Field("decision", "enum", choices=DECISIONS, required=True),
    Field("message", "str", maxlen=10_000, doc="for deny: what the agent is told"),
    Field("answers", "json", doc="for a question: {question: label, labels or own text}",
          shape={"type": "object", "additionalProperties": {"anyOf": [
              {"type": "string"}, {"type": "array", "items": {"type": "string"}}]}}),
    Field("remember", "enum", choices=REMEMBER, nullable=True,
          doc="allow the CLI's suggested rules for the session, or also for the project"),
)
MESSAGE_FIELDS = (
    _ro("id"), _ro("taskId", column="task_id"), _ro("runId", column="run_id"),
    _ro("author", "enum", choices=MESSAGE_AUTHORS),
    Field("text", "str", required=True, maxlen=MESSAGE_MAX),
    Field("interrupt", "bool", default=False,
          doc="end the agent's turn now and send this at once (steering)"),
    _ro("state", "enum", choices=MESSAGE_STATES,
        doc="queued until the agent's turn ends, then sent"),
    _created(),
)
PR_RELEASE_FIELDS = (
    Field("key", "str", required=True, maxlen=100, pattern=re.compile(
        r"^(review|comment|note):[0-9]{1,19}$"), doc="a held item's key (pr.held[].key)"),
)

REVIEW_FIELDS = (
    Field("comments", "json", required=True, doc="the comments, sent as one message",
          shape={"type": "array", "minItems": 1, "maxItems": 100, "items": {
              "type": "object", "required": ["path", "line", "body"], "properties": {
                  "path": {"type": "string"}, "line": {"type": "integer", "minimum": 1},
                  "side": {"type": "string", "enum": ["new", "old"]},
                  "body": {"type": "string"}}}}),
    Field("summary", "str", default="", maxlen=100_000),
)
REVIEW_COMMENT_FIELDS = (
    _ro("id"), _ro("taskId", column="task_id"),
    _ro("messageId", column="message_id", nullable=True),
    Field("path", "str", required=True, maxlen=4096),
    Field("line", "int", required=True, lo=1),
    Field("side", "enum", choices=("new", "old"), default="new"),
    Field("body", "str", required=True, maxlen=20_000),
    _created(),
)


#: An SSH destination: `user@host` or a ~/.ssh/config alias (never an option, never a space).
SSH_ADDRESS_RE = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}@)?"
                            r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\])$")
#: A folder on a host: absolute, or under the login's home (~); plain names, no `..`.
HOST_DIR_RE = re.compile(r"^(?:~|~?(?:/(?!\.\.?(?:/|$))[\w.+@-]{1,255}){1,32})$")
#: A host key's fingerprint as `ssh-keygen -lf` prints it.
FINGERPRINT_RE = re.compile(r"^SHA256:[A-Za-z0-9+/]{43}$")


def _check_identity_file(value, name):
    path = os.path.expanduser(value)
    if not os.path.isabs(path) or "\n" in value:
        raise Invalid(f"{name} {value[:80]!r} must be an absolute path (or ~/...) on the "
                      "board's machine", name)
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        shown = f"{value[:80]!r}" + (f" ({path[:200]})" if path != value else "")
        raise Invalid(f"{name} {shown} is not a readable file on the board's machine", name)


def _check_agent_commands(value, name):
    """{cli: command line}, CLIs of AGENTS only."""
    for agent, command in _by_agent(value, name, "a command line"):
        if not isinstance(command, str) or not command.strip() or len(command) > 2000:
            raise Invalid(f"{name}.{agent} must be a command line", f"{name}.{agent}")
        _check_command(command, f"{name}.{agent}")


HOST_FIELDS = (
    _ro("id"),
    Field("name", "str", required=True, maxlen=100, doc="what the board calls it; unique"),
    Field("address", "str", required=True, maxlen=320, pattern=SSH_ADDRESS_RE,
          doc="user@host, or a host alias of ~/.ssh/config"),
    Field("port", "int", lo=1, hi=65535, default=22,
          doc="the SSH port (22 leaves it to ~/.ssh/config)"),
    Field("identityFile", "str", column="identity_file", nullable=True, maxlen=4096,
          check=_check_identity_file, doc="a private key on the board's machine (absolute "
          "or ~/...); null = ssh's own choice"),
    Field("baseDir", "str", column="base_dir", default="~/.taskboard", maxlen=4096,
          pattern=HOST_DIR_RE, doc="the board's folder on the host (absolute or ~/...): "
          "clones, worktrees, attachments"),
    Field("maxConcurrent", "int", column="max_concurrent", lo=1, hi=50, default=2,
          doc="at most this many agents on the host at once"),
    Field("enabled", "bool", default=1),
    Field("agentCommands", "json", column="agent_commands_json", nullable=True,
          check=_check_agent_commands, shape={"type": "object", "additionalProperties": {
              "type": "string"}}, doc="{cli: command} on the host, over the CLI's name "
          "found on the login PATH"),
    Field("hostKey", "str", column="host_key", nullable=True, pattern=FINGERPRINT_RE,
          doc="the pinned host key's fingerprint: set it to lastCheck.fingerprint to trust "
          "the key the host showed (null forgets it)"),
    _ro("lastCheck", "json", column="last_check_json", nullable=True, shape={"type": "object"},
        doc="the latest check: {at, ok, error, latencyMs, fingerprint, agents: {cli: "
        "{found, version}}, git, sandbox: {engine, works, version, error}}"),
    _ro("running", doc="agent runs on the host now"),
    _created(),
    _ro("updatedAt", "time", column="updated_at"),
)

#: A push service's origin as a VAPID audience (py_vapid refuses to sign any other).
VAPID_AUDIENCE = re.compile(r"https://[^/:@\[\]]+(:\d{1,5})?", re.I)


def _check_push_endpoint(value, name):
    """An https URL whose origin the board can sign for (VAPID's `aud`, RFC 8292, as
    py_vapid takes it): no user info, no IPv6 literal, a port that is a number."""
    parts = urllib.parse.urlsplit(value)
    if parts.scheme != "https" or not parts.hostname or any(c.isspace() for c in value):
        raise Invalid(f"{name} {value[:80]!r} must be an https:// URL: push needs a secure "
                      "push service", name)
    if not VAPID_AUDIENCE.fullmatch(f"https://{parts.netloc}"):
        raise Invalid(f"{name} {value[:80]!r} names a push service the board cannot sign "
                      "for: no user info, no IPv6 address, a port that is a number", name)


def _check_push_keys(value, name):
    """{p256dh, auth} as PushSubscription.toJSON() gives them: a P-256 public key (an
    uncompressed point on the curve) and a 16-byte secret, base64url."""
    if not isinstance(value, dict) or set(value) != {"p256dh", "auth"}:
        raise Invalid(f"{name} must be an object of exactly p256dh and auth", name)
    for key, size in (("p256dh", 65), ("auth", 16)):
        raw = b64url_decode(value[key])
        if raw is None or len(raw) != size:
            raise Invalid(f"{name}.{key} must be {size} bytes in base64url", f"{name}.{key}")
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(),
                                                     b64url_decode(value["p256dh"]))
    except ValueError:
        raise Invalid(f"{name}.p256dh is not a P-256 public key", f"{name}.p256dh") from None


PUSH_FIELDS = (
    _ro("id"),
    Field("endpoint", "str", required=True, maxlen=2000, check=_check_push_endpoint,
          doc="the browser's push service URL (https)"),
    Field("keys", "json", required=True, write_only=True, check=_check_push_keys,
          doc="the browser's p256dh and auth keys (base64url)",
          shape={"type": "object", "required": ["p256dh", "auth"], "properties": {
              "p256dh": {"type": "string"}, "auth": {"type": "string"}}}),
    Field("name", "str", default="", maxlen=100, doc="what the device is called"),
    Field("events", "events", column="events_json", required=True,
          choices=tuple(PUSH_EVENTS), doc="what the device is sent: " + "; ".join(
              f"{event}: {meaning}" for event, meaning in PUSH_EVENTS.items())),
    _created(),
    _ro("lastSentAt", "time", column="last_sent_at", nullable=True),
    _ro("lastStatus", column="last_status", nullable=True,
        doc="the push service's status code of the latest message (null: unreachable)"),
    _ro("lastError", "str", column="last_error", nullable=True),
)
def _check_scopes(value, name):
    if not isinstance(value, list) or not value or any(s not in TOKEN_SCOPES for s in value) \
            or len(set(value)) < len(value):
        raise Invalid(f"{name} must be a non-empty array of: {', '.join(TOKEN_SCOPES)}, each "
                      f"once, not {json_dumps(value)[:60]}", name)


def _check_future(value, name):
    try:
        moment = parse_iso(value)
    except ValueError:
        raise Invalid(f"{name} {value[:40]!r} is not an ISO 8601 time", name) from None
    if moment.tzinfo is None:
        raise Invalid(f"{name} {value[:40]!r} has no time zone (e.g. Z)", name)
    try:
        moment = moment.astimezone(dt.UTC)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is in the year 10000 in UTC
        raise Invalid(f"{name} {value[:40]!r} is after the year 9999 in UTC", name) from None
    if moment <= utc_now():
        raise Invalid(f"{name} {value[:40]!r} is not in the future", name)


#: A personal token (design §19): a bearer for /api, /ws and /mcp within its scopes.
TOKEN_FIELDS = (
    _ro("id"),
    Field("name", "str", required=True, maxlen=100,
          pattern=re.compile(r"^[A-Za-z0-9_.@ -]+$"),
          doc="what it is for (letters, digits, spaces and . _ - @); unique; approvals it "
          "answers say decidedBy token:<name>"),
    Field("scopes", "json", column="scopes_json", required=True, check=_check_scopes, shape={
        "type": "array", "minItems": 1, "uniqueItems": True, "items": {
            "type": "string", "enum": list(TOKEN_SCOPES)}},
          doc="read: GETs and /ws; write: creating, changing, moving, starting and stopping "
          "tasks, messages; approve: answering approvals and questions"),
    Field("expiresAt", "str", column="expires_at", nullable=True, check=_check_future,
          doc="when it stops working (an ISO 8601 time in the future); null: never"),
    _created(),
    _ro("lastUsedAt", "time", column="last_used_at", nullable=True),
)

def _check_cron(value, name):
    if len(value.split()) != 5:
        raise Invalid(f"{name} {value[:60]!r} must have 5 fields: minute hour day month "
                      "weekday", name)
    try:
        cronsim.CronSim(value, utc_now())
    except cronsim.CronSimError as exc:
        raise Invalid(f"{name} {value[:60]!r} is not a cron expression: {exc}", name) from None


def _check_timezone(value, name):
    try:
        zoneinfo.ZoneInfo(value)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise Invalid(f"{name} {value[:60]!r} is not an IANA time zone (e.g. Europe/Istanbul)",
                      name) from None


def _check_schedule_task(value, name):
    """{title, description?, type?, priority?, agent?, model?, effort?}: what a fire makes."""
    if not isinstance(value, dict):
        raise Invalid(f"{name} must be an object with a title", name)
    kinds = {"title": str, "description": str, "type": TASK_TYPES, "priority": range(4),
             "agent": (*AGENTS, None), "model": MODELS, "effort": EFFORTS}
    for key, given in value.items():
        allowed = kinds.get(key)
        if allowed is None:
            raise Invalid(f"{name}: unknown field {key!r}", f"{name}.{key}")
        if allowed is str and not isinstance(given, str) or allowed is not str and (
                isinstance(given, (bool, dict, list, float)) or given not in allowed):
            raise Invalid(f"{name}.{key} {json_dumps(given)[:60]} is not valid", f"{name}.{key}")
    if not str(value.get("title") or "").strip() or len(value["title"]) > 500:
        raise Invalid(f"{name}.title is required (at most 500 characters)", f"{name}.title")


#: A schedule (design §19): a task made (or continued) on a clock.
SCHEDULE_FIELDS = (
    _ro("id"), _ro("projectId", column="project_id"),
    Field("name", "str", required=True, maxlen=200),
    Field("cron", "str", required=True, maxlen=200, check=_check_cron,
          doc="5 fields: minute hour day-of-month month day-of-week, e.g. 0 3 * * * (every "
          "night at 3)"),
    Field("timezone", "str", maxlen=100, check=_check_timezone,
          doc="an IANA time zone the cron is read in; default: the server's"),
    Field("task", "json", column="task_json", required=True, check=_check_schedule_task,
          shape={"type": "object", "required": ["title"], "additionalProperties": False,
                 "properties": {
                     "title": {"type": "string", "minLength": 1, "maxLength": 500},
                     "description": {"type": "string"},
                     "type": {"type": "string", "enum": list(TASK_TYPES)},
                     "priority": {"type": "integer", "minimum": 0, "maximum": 3},
                     "agent": {"type": ["string", "null"], "enum": [*AGENTS, None]},
                     "model": {"type": "string", "enum": list(MODELS)},
                     "effort": {"type": "string", "enum": list(EFFORTS)}}},
          doc="the task a fire makes; in mode continue, its description (else title) is the "
          "message to the last task it made"),
    Field("mode", "enum", choices=SCHEDULE_MODES, default="new", doc="new: a new task each "
          "fire, started; continue: a message to the last task it made, resuming its agent"),
    Field("enabled", "bool", default=1),
    _ro("nextAt", "time", column="next_at", nullable=True, doc="its next fire (null: off)"),
    _ro("lastAt", "time", column="last_at", nullable=True),
    _ro("lastTaskId", column="last_task_id", nullable=True),
    _ro("lastError", "str", column="last_error", nullable=True,
        doc="why its last fire started nothing (skipped, the budget, a full project), or null"),
    _created(), _ro("updatedAt", "time", column="updated_at"),
)

#: The body of POST /api/approvals/:id/act: a notification's button, without a session.
ACT_FIELDS = (
    Field("token", "str", required=True, maxlen=200, doc="the notification's action token"),
    Field("decision", "enum", choices=DECISIONS, required=True),
)
def _check_attempt_agents(value, name):
    """2-4 entries of {agent, model?, effort?}: CLIs of AGENTS, tiers of MODELS, EFFORTS."""
    if not isinstance(value, list) or not ATTEMPTS_MIN <= len(value) <= ATTEMPTS_MAX:
        raise Invalid(f"{name} must be an array of {ATTEMPTS_MIN} to {ATTEMPTS_MAX} agents, "
                      f"not {json_dumps(value)[:60]}", name)
    for i, entry in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(entry, dict) or "agent" not in entry:
            raise Invalid(f"{where} must be an object with an agent", where)
        for key, given in entry.items():
            allowed = {"agent": tuple(AGENTS), "model": MODELS, "effort": EFFORTS}.get(key)
            if allowed is None:
                raise Invalid(f"{where}: unknown field {key!r}", f"{where}.{key}")
            if given not in allowed and not (given is None and key != "agent"):
                raise Invalid(f"{where}.{key} {json_dumps(given)[:60]} is not one of: "
                              f"{', '.join(allowed)}", f"{where}.{key}")


#: The body of POST /api/tasks/:id/attempts (design §18).
ATTEMPTS_BODY_FIELDS = (
    Field("agents", "json", required=True, check=_check_attempt_agents, shape={
        "type": "array", "minItems": ATTEMPTS_MIN, "maxItems": ATTEMPTS_MAX, "items": {
            "type": "object", "required": ["agent"], "additionalProperties": False,
            "properties": {"agent": {"type": "string", "enum": list(AGENTS)},
                           "model": {"type": ["string", "null"], "enum": [*MODELS, None]},
                           "effort": {"type": ["string", "null"], "enum": [*EFFORTS, None]}}}},
        doc="the CLI, model tier (default: the task's) and effort (default: the task's) "
        "of each attempt"),
)
#: One attempt of a task run by several agents at once (design §18).
ATTEMPT_FIELDS = (
    _ro("n", doc="1..N"), _ro("agent", "enum", choices=tuple(AGENTS)),
    _ro("model", "enum", choices=MODELS), _ro("effort", "enum", choices=EFFORTS),
    _ro("status", "enum", choices=ATTEMPT_STATUSES),
    _ro("runId", column="run_id", doc="its latest run (its log: GET "
        "/api/tasks/:id/logs?attempt=n)"),
    _ro("branch", "str", column="branch_name", nullable=True),
    _ro("costUsd", "number", column="cost"),
    _ro("durationMs", column="duration_ms"), _ro("tokens", doc="input and output tokens"),
    _ro("diff", "json", column="diff_json", nullable=True, shape={
        "type": "object", "properties": {k: {"type": "integer"} for k in (
            "files", "additions", "deletions")}}, doc="what its branch changed"),
    _ro("check", "json", column="check_json", nullable=True, shape={
        "type": "object", "properties": {
            "command": {"type": "string"}, "exitCode": {"type": ["integer", "null"]},
            "passed": {"type": "boolean"}, "output": {"type": "string"}}},
        doc="the project's stopCheckCommand run once more in its worktree when it ended; "
        "null: none (no command, or it did not finish its work)"),
    _ro("verdict", "enum", choices=("approve", "reject"), nullable=True,
        doc="the verifier's (autoTest)"),
    _ro("summary", "str", nullable=True, doc="the verifier's summary"),
    _ro("picked", "bool"), _ro("error", "str", nullable=True, doc="why it failed"),
    _ro("endedAt", "time", column="ended_at", nullable=True),
)

#: A task's preview (design §21), as its routes answer and preview:updated tells it.
PREVIEW_FIELDS = (
    _ro("taskId"), _ro("n", nullable=True, doc="its attempt of best of N; null: the task's"),
    _ro("status", "enum", choices=PREVIEW_STATUSES),
    _ro("url", "str", nullable=True, doc="a one-time link to it (its own port): it sets "
        "the port's cookie and opens previewPath; null unless starting or ready"),
    _ro("startedAt", "time", nullable=True), _ro("readyAt", "time", nullable=True),
    _ro("error", "str", nullable=True, doc="why it failed"),
    _ro("output", "str", doc="the command's last lines"),
)

REVISION_FIELDS = (_ro("id"), _ro("taskId", column="task_id"), _ro("feedback", "str"),
                   _created())
ATTACHMENT_FIELDS = (_ro("id"), _ro("taskId", column="task_id"), _ro("fileName", "str",
                     column="file_name"), _ro("mimeType", "str", column="mime_type"),
                     _ro("size"), _created())


# =============================================================================
# STORE
# =============================================================================
# Every store function is one transaction: a write, tx(), under WRITE_LOCK and with no I/O
# inside; a read, read(), on a pooled connection of its own, never waiting behind a write.

#: Serialises transactions; cooperative because it is created after monkey-patching.
WRITE_LOCK = threading.RLock()

#: Schema changes in order.  Never edit an applied one: append a new one.
MIGRATIONS = (
    ("0001_initial", """
CREATE TABLE projects (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  slug TEXT NOT NULL UNIQUE,
  key TEXT NOT NULL UNIQUE,
  working_dir TEXT NOT NULL,
  icon TEXT,
  icon_seed TEXT,
  permission_mode TEXT NOT NULL DEFAULT 'default',
  allowed_tools TEXT,
  auto_queue INTEGER NOT NULL DEFAULT 0,
  max_concurrent INTEGER NOT NULL DEFAULT 1,
  auto_branch INTEGER NOT NULL DEFAULT 0,
  auto_pr INTEGER NOT NULL DEFAULT 0,
  pr_base_branch TEXT NOT NULL DEFAULT 'main',
  auto_test INTEGER NOT NULL DEFAULT 0,
  test_prompt TEXT NOT NULL DEFAULT '',
  task_timeout_minutes INTEGER DEFAULT 0,
  max_retries INTEGER NOT NULL DEFAULT 2,
  git_host_repo TEXT NOT NULL DEFAULT '',
  git_host_sync_enabled INTEGER NOT NULL DEFAULT 0,
  task_budget_usd REAL,
  task_counter INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE TABLE tasks (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  parent_task_id INTEGER REFERENCES tasks(id) ON DELETE SET NULL,
  task_key TEXT NOT NULL UNIQUE,
  title TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL DEFAULT 'backlog',
  priority INTEGER NOT NULL DEFAULT 0,
  task_type TEXT NOT NULL DEFAULT 'feature',
  model TEXT NOT NULL,
  thinking_effort TEXT NOT NULL,
  acceptance_criteria TEXT NOT NULL DEFAULT '',
  tags TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  started_at TEXT,
  completed_at TEXT,
  in_progress_since TEXT,
  retry_count INTEGER NOT NULL DEFAULT 0,
  is_running INTEGER NOT NULL DEFAULT 0,
  awaiting_subtasks INTEGER NOT NULL DEFAULT 0,
  branch_name TEXT,
  pr_url TEXT,
  session_id TEXT,
  input_tokens INTEGER NOT NULL DEFAULT 0,
  output_tokens INTEGER NOT NULL DEFAULT 0,
  cache_read_tokens INTEGER NOT NULL DEFAULT 0,
  cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
  total_cost REAL NOT NULL DEFAULT 0,
  work_duration_ms INTEGER NOT NULL DEFAULT 0,
  revision_count INTEGER NOT NULL DEFAULT 0,
  queue_position INTEGER
);
CREATE INDEX tasks_by_project ON tasks(project_id, priority DESC, queue_position, created_at, id);
CREATE INDEX tasks_by_parent ON tasks(parent_task_id);
CREATE TABLE revisions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
  feedback TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX revisions_by_task ON revisions(task_id, id);
CREATE TABLE attachments (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
  file_name TEXT NOT NULL,
  mime_type TEXT NOT NULL,
  size INTEGER NOT NULL,
  path TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX attachments_by_task ON attachments(task_id, id);
CREATE TABLE activity (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  task_id INTEGER REFERENCES tasks(id) ON DELETE SET NULL,
  task_title TEXT NOT NULL,
  event TEXT NOT NULL,
  from_status TEXT,
  to_status TEXT,
  created_at TEXT NOT NULL
);
CREATE INDEX activity_by_project ON activity(project_id, id);
CREATE INDEX activity_by_task ON activity(task_id);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER REFERENCES tasks(id) ON DELETE SET NULL,
  project_id INTEGER REFERENCES projects(id) ON DELETE SET NULL,
  kind TEXT NOT NULL DEFAULT 'task',
  model TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'running',
  started_at TEXT NOT NULL,
  ended_at TEXT,
  exit_code INTEGER,
  session_id TEXT,
  input_tokens INTEGER NOT NULL DEFAULT 0,
  output_tokens INTEGER NOT NULL DEFAULT 0,
  cache_read_tokens INTEGER NOT NULL DEFAULT 0,
  cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
  cost REAL NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_task ON runs(task_id, id);
CREATE INDEX runs_by_start ON runs(started_at);
CREATE TABLE logs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
  run_id INTEGER,
  created_at TEXT NOT NULL,
  kind TEXT NOT NULL,
  message TEXT NOT NULL,
  tool TEXT,
  is_error INTEGER,
  duration_ms INTEGER
);
CREATE INDEX logs_by_task ON logs(task_id, id);
CREATE TABLE templates (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  content TEXT NOT NULL,
  task_type TEXT,
  model TEXT,
  thinking_effort TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX templates_by_project ON templates(project_id, id);
CREATE TABLE snippets (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  content TEXT NOT NULL,
  enabled INTEGER NOT NULL DEFAULT 1,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX snippets_by_project ON snippets(project_id, id);
CREATE TABLE webhooks (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  platform TEXT NOT NULL,
  url TEXT NOT NULL,
  events_json TEXT NOT NULL,
  enabled INTEGER NOT NULL DEFAULT 1,
  secret TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX webhooks_by_project ON webhooks(project_id, id);
CREATE TABLE webhook_deliveries (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  webhook_id INTEGER NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
  event TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  status INTEGER,
  ok INTEGER NOT NULL,
  error TEXT,
  duration_ms INTEGER,
  created_at TEXT NOT NULL
);
CREATE INDEX deliveries_by_webhook ON webhook_deliveries(webhook_id, id);
CREATE TABLE settings (
  name TEXT PRIMARY KEY,
  value_json TEXT NOT NULL
);
"""),
    ("0002_agent_runs", """
ALTER TABLE runs ADD COLUMN pid INTEGER;
ALTER TABLE runs ADD COLUMN proc_start INTEGER;
ALTER TABLE runs ADD COLUMN cwd TEXT;
ALTER TABLE runs ADD COLUMN resumed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN head_start TEXT;
ALTER TABLE runs ADD COLUMN head_end TEXT;
ALTER TABLE runs ADD COLUMN error TEXT;
ALTER TABLE runs ADD COLUMN permission_denials INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_by_status ON runs(status);
ALTER TABLE tasks ADD COLUMN permission_denials INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN last_error TEXT;
CREATE TABLE task_events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
  run_id INTEGER,
  seq INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  kind TEXT NOT NULL,
  raw TEXT NOT NULL
);
CREATE INDEX task_events_by_task ON task_events(task_id, id);
"""),
    ("0003_pipeline", """
CREATE TABLE task_dependencies (
  from_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
  to_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
  condition_type TEXT NOT NULL DEFAULT 'always',
  created_at TEXT NOT NULL,
  PRIMARY KEY (from_id, to_id)
);
CREATE INDEX task_dependencies_by_to ON task_dependencies(to_id);
ALTER TABLE tasks ADD COLUMN agent_done INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN source TEXT;
"""),
    ("0004_queue_indexes", """
CREATE INDEX tasks_awaiting ON tasks(project_id) WHERE awaiting_subtasks = 1;
CREATE INDEX tasks_by_status ON tasks(project_id, status);
"""),
    ("0006_git", """
ALTER TABLE tasks ADD COLUMN base_commit TEXT;
ALTER TABLE tasks ADD COLUMN issue_number INTEGER;
ALTER TABLE tasks ADD COLUMN issue_url TEXT;
ALTER TABLE tasks ADD COLUMN released INTEGER NOT NULL DEFAULT 0;
CREATE TABLE imported_issues (
  project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  number INTEGER NOT NULL,
  task_id INTEGER,
  imported_at TEXT NOT NULL,
  PRIMARY KEY (project_id, number)
);
"""),
    ("0007_scale_indexes", """
CREATE INDEX runs_by_project ON runs(project_id);
CREATE INDEX runs_by_task_kind ON runs(task_id, kind, status);
CREATE INDEX tasks_running ON tasks(id) WHERE is_running = 1;
CREATE INDEX tasks_in_progress ON tasks(id) WHERE status = 'in_progress';
CREATE INDEX tasks_by_type ON tasks(project_id, task_type);
"""),
    ("0005_plans", """
CREATE TABLE plans (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  plan_id TEXT NOT NULL UNIQUE,
  project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  topic TEXT NOT NULL,
  context TEXT NOT NULL,
  model TEXT NOT NULL,
  effort TEXT NOT NULL,
  granularity TEXT NOT NULL,
  status TEXT NOT NULL,
  pid INTEGER,
  proc_start INTEGER,
  tasks_json TEXT,
  warnings_json TEXT,
  error TEXT,
  stats_json TEXT,
  cost REAL NOT NULL DEFAULT 0,
  started_at TEXT NOT NULL,
  finished_at TEXT
);
CREATE INDEX plans_by_project ON plans(project_id, id);
CREATE INDEX plans_running ON plans(status) WHERE status = 'running';
"""),
    # (migrate() splits at ";\n", so a trigger's inner statements end mid-line.)
    ("0006_task_versions", """
CREATE TABLE task_versions (
  project_id INTEGER PRIMARY KEY,
  version INTEGER NOT NULL
);
CREATE TRIGGER tasks_inserted AFTER INSERT ON tasks BEGIN
  INSERT INTO task_versions VALUES (NEW.project_id, 1)
  ON CONFLICT (project_id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER tasks_updated AFTER UPDATE ON tasks BEGIN
  INSERT INTO task_versions VALUES (NEW.project_id, 1)
  ON CONFLICT (project_id) DO UPDATE SET version = version + 1; INSERT INTO task_versions
  SELECT OLD.project_id, 1 WHERE OLD.project_id != NEW.project_id
  ON CONFLICT (project_id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER tasks_deleted AFTER DELETE ON tasks BEGIN
  INSERT INTO task_versions VALUES (OLD.project_id, 1)
  ON CONFLICT (project_id) DO UPDATE SET version = version + 1; END;
DROP INDEX tasks_by_status;
CREATE INDEX tasks_by_status ON tasks(project_id, status, completed_at, work_duration_ms);
DROP INDEX runs_by_project;
CREATE INDEX runs_by_project ON runs(project_id, input_tokens, output_tokens, cost);
"""),
    # A webhook's notices wait here until delivered, so that a restart loses none.
    ("0007_webhook_outbox", """
CREATE TABLE webhook_outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  webhook_id INTEGER NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
  moment_json TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX webhook_outbox_by_hook ON webhook_outbox(webhook_id, id);
"""),
    # Talking to a running agent (design §12).
    ("0008_agent_channel", """
ALTER TABLE projects ADD COLUMN approval_timeout_minutes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE projects ADD COLUMN stop_check_command TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN stop_check_max_blocks INTEGER NOT NULL DEFAULT 3;
ALTER TABLE tasks ADD COLUMN pending_approvals INTEGER NOT NULL DEFAULT 0;
ALTER TABLE logs ADD COLUMN author TEXT;
CREATE TABLE approvals (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
  project_id INTEGER NOT NULL,
  run_id INTEGER,
  request_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  tool_name TEXT NOT NULL,
  input_json TEXT NOT NULL,
  suggestions_json TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'pending',
  decided_by TEXT,
  message TEXT,
  created_at TEXT NOT NULL,
  decided_at TEXT
);
CREATE INDEX approvals_by_task ON approvals(task_id, id);
CREATE INDEX approvals_pending ON approvals(id) WHERE status = 'pending';
CREATE TABLE messages (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
  run_id INTEGER,
  author TEXT NOT NULL,
  text TEXT NOT NULL,
  interrupt INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX messages_by_task ON messages(task_id, id);
CREATE TABLE review_comments (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
  message_id INTEGER REFERENCES messages(id) ON DELETE SET NULL,
  path TEXT NOT NULL,
  line INTEGER NOT NULL,
  side TEXT NOT NULL,
  body TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX review_comments_by_task ON review_comments(task_id, id);
"""),
    ("0009_sessions", """
CREATE TABLE sessions (
  id_hash TEXT PRIMARY KEY,
  token_hash TEXT NOT NULL,
  created_at TEXT NOT NULL,
  expires_at TEXT NOT NULL
);
"""),
    ("0010_push", """
CREATE TABLE push_subscriptions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  endpoint TEXT NOT NULL UNIQUE,
  p256dh TEXT NOT NULL,
  auth TEXT NOT NULL,
  name TEXT NOT NULL DEFAULT '',
  events_json TEXT NOT NULL,
  created_at TEXT NOT NULL,
  last_sent_at TEXT,
  last_status INTEGER,
  last_error TEXT
);
CREATE TABLE push_outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  subscription_id INTEGER NOT NULL REFERENCES push_subscriptions(id) ON DELETE CASCADE,
  moment_json TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX push_outbox_by_subscription ON push_outbox(subscription_id, id);
CREATE TABLE push_actions (
  token_hash TEXT PRIMARY KEY,
  approval_id INTEGER NOT NULL REFERENCES approvals(id) ON DELETE CASCADE,
  expires_at TEXT NOT NULL,
  used_at TEXT
);
"""),
    ("0011_agents", """
ALTER TABLE projects ADD COLUMN agent TEXT NOT NULL DEFAULT 'claude';
ALTER TABLE tasks ADD COLUMN agent TEXT;
ALTER TABLE tasks ADD COLUMN cost_estimated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN agent TEXT NOT NULL DEFAULT 'claude';
ALTER TABLE runs ADD COLUMN cost_estimated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE plans ADD COLUMN agent TEXT NOT NULL DEFAULT 'claude';
ALTER TABLE plans ADD COLUMN cost_estimated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN waiting_until TEXT;
CREATE TABLE agent_limits (
  agent TEXT PRIMARY KEY,
  until TEXT NOT NULL,
  reason TEXT NOT NULL
);
"""),
    # Counts the changes to finished runs and plans (what agent usage sums), so that the
    # usage read is kept between them (usage_rows).
    ("0012_usage_version", """
CREATE TABLE usage_version (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  version INTEGER NOT NULL
);
INSERT INTO usage_version VALUES (1, 0);
""" + "".join(f"""CREATE TRIGGER {table}_usage_{name} AFTER {event} ON {table} WHEN {when}
  BEGIN UPDATE usage_version SET version = version + 1; END;
""" for table in ("runs", "plans") for name, event, when in (
        ("inserted", "INSERT", "NEW.status != 'running'"),
        ("updated", "UPDATE", "NEW.status != 'running' OR OLD.status != 'running'"),
        ("deleted", "DELETE", "OLD.status != 'running'")))),
    ("0013_hosts", """
CREATE TABLE hosts (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL UNIQUE,
  address TEXT NOT NULL,
  port INTEGER NOT NULL DEFAULT 22,
  identity_file TEXT,
  base_dir TEXT NOT NULL DEFAULT '~/.taskboard',
  max_concurrent INTEGER NOT NULL DEFAULT 2,
  enabled INTEGER NOT NULL DEFAULT 1,
  agent_commands_json TEXT,
  host_key TEXT,
  last_check_json TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
ALTER TABLE projects ADD COLUMN host_id INTEGER REFERENCES hosts(id);
ALTER TABLE projects ADD COLUMN repo_url TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN waiting_for_json TEXT;
ALTER TABLE runs ADD COLUMN host_id INTEGER;
"""),
    # tasks.pr_json is the PR as the API shows it; pull_requests is what following it needs
    # (design §16).  PRs opened before are followed from now on.
    ("0014_pull_requests", """
ALTER TABLE projects ADD COLUMN pr_poll_seconds INTEGER NOT NULL DEFAULT 60;
ALTER TABLE projects ADD COLUMN pr_fix_max_attempts INTEGER NOT NULL DEFAULT 3;
ALTER TABLE tasks ADD COLUMN pr_json TEXT;
CREATE TABLE pull_requests (
  task_id INTEGER PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
  repo TEXT NOT NULL,
  head_sha TEXT,
  since TEXT NOT NULL,
  sent_json TEXT NOT NULL DEFAULT '[]',
  posted_json TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX tasks_with_pr ON tasks(id) WHERE pr_json IS NOT NULL;
UPDATE tasks SET pr_json = json_object('number', CAST(substr(pr_url, instr(pr_url, '/pull/')
  + 6) AS INTEGER), 'url', pr_url, 'state', 'open', 'checks', 'none', 'review', 'none',
  'fixAttempts', 0, 'error', NULL, 'needsYou', NULL)
  WHERE pr_url LIKE '%/pull/%' AND CAST(substr(pr_url, instr(pr_url, '/pull/') + 6)
  AS INTEGER) > 0 AND project_id IN (SELECT id FROM projects WHERE git_host_repo != '');
INSERT INTO pull_requests (task_id, repo, since) SELECT t.id, p.git_host_repo,
  strftime('%Y-%m-%dT%H:%M:%SZ', 'now') FROM tasks t JOIN projects p ON p.id = t.project_id
  WHERE t.pr_json IS NOT NULL;
"""),
    ("0015_pr_trust", """
ALTER TABLE projects ADD COLUMN pr_trusted_authors_json TEXT;
ALTER TABLE pull_requests ADD COLUMN released_json TEXT NOT NULL DEFAULT '[]';
UPDATE tasks SET pr_json = json_set(pr_json, '$.held', json('[]')) WHERE pr_json IS NOT NULL;
"""),
    ("0016_demo_and_host_branches", """
ALTER TABLE runs ADD COLUMN simulated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE plans ADD COLUMN simulated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN branch_at TEXT;
"""),
    ("0017_sandbox", """
ALTER TABLE projects ADD COLUMN sandbox TEXT NOT NULL DEFAULT 'auto';
ALTER TABLE projects ADD COLUMN sandbox_paths_json TEXT;
ALTER TABLE runs ADD COLUMN sandboxed INTEGER;
ALTER TABLE tasks ADD COLUMN sandboxed INTEGER;
"""),
    ("0018_attempts", """
CREATE TABLE attempts (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER REFERENCES tasks(id) ON DELETE SET NULL,
  project_id INTEGER REFERENCES projects(id) ON DELETE SET NULL,
  current INTEGER NOT NULL DEFAULT 1,
  n INTEGER NOT NULL,
  agent TEXT NOT NULL,
  model TEXT NOT NULL,
  effort TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'queued',
  run_id INTEGER,
  branch_name TEXT,
  base_commit TEXT,
  branch_at TEXT,
  session_id TEXT,
  retry_count INTEGER NOT NULL DEFAULT 0,
  cost REAL NOT NULL DEFAULT 0,
  duration_ms INTEGER NOT NULL DEFAULT 0,
  tokens INTEGER NOT NULL DEFAULT 0,
  diff_json TEXT,
  check_json TEXT,
  verdict TEXT,
  summary TEXT,
  error TEXT,
  picked INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  ended_at TEXT
);
CREATE INDEX attempts_by_task ON attempts(task_id, current, n);
CREATE INDEX attempts_queued ON attempts(status, project_id) WHERE status = 'queued';
ALTER TABLE tasks ADD COLUMN attempts INTEGER;
ALTER TABLE projects ADD COLUMN attempt_pick TEXT NOT NULL DEFAULT 'manual';
ALTER TABLE projects ADD COLUMN keep_attempt_branches INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN attempt_id INTEGER;
"""),
    ("0019_outside_clients", """
CREATE TABLE tokens (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL UNIQUE,
  scopes_json TEXT NOT NULL,
  hash TEXT NOT NULL UNIQUE,
  created_at TEXT NOT NULL,
  expires_at TEXT,
  last_used_at TEXT
);
CREATE TABLE schedules (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  cron TEXT NOT NULL,
  timezone TEXT NOT NULL,
  task_json TEXT NOT NULL,
  mode TEXT NOT NULL DEFAULT 'new',
  enabled INTEGER NOT NULL DEFAULT 1,
  next_at TEXT,
  last_at TEXT,
  last_task_id INTEGER,
  last_error TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX schedules_by_project ON schedules(project_id, id);
CREATE INDEX schedules_due ON schedules(next_at) WHERE enabled = 1;
"""),
    ("0020_network", """
ALTER TABLE projects ADD COLUMN network TEXT NOT NULL DEFAULT 'open';
ALTER TABLE projects ADD COLUMN network_allow_json TEXT;
ALTER TABLE runs ADD COLUMN network_refused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN network_json TEXT;
"""),
    ("0021_previews", """
ALTER TABLE projects ADD COLUMN preview_command TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN preview_path TEXT NOT NULL DEFAULT '/';
CREATE TABLE previews (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id INTEGER NOT NULL,
  attempt_n INTEGER,
  pid INTEGER NOT NULL,
  proc_start INTEGER,
  started_at TEXT NOT NULL
);
"""),
)


#: (table, its CREATE statement) -> SQLAlchemy's description of it, reflected once per
#: process: dataset reflects a table again (~10 ms) for every new database object and after
#: every rolled-back transaction (a refused request), though the schema has not changed.
_REFLECTED = {}


class Tx:
    """One transaction: dataset's table API (t["projects"]) for plain CRUD and SQL on the
    same connection (its sqlite3 connection) for the hot paths."""

    def __init__(self, db: "dataset.Database"):
        self.db = db
        self.connection = db.executable.connection.driver_connection

    def __getitem__(self, table: str) -> "dataset.Table":
        loaded = self.db.load_table(table)
        if loaded._table is None:  # NOTE: dataset's private attributes, see _REFLECTED
            schema = (table, self.value("SELECT sql FROM sqlite_master WHERE type = 'table' "
                                        "AND name = ?", (table,)))
            if schema not in _REFLECTED:
                loaded._sync_table(())
                _REFLECTED[schema] = loaded._table
            loaded._table, loaded._columns = _REFLECTED[schema], None
        return loaded

    def execute(self, sql: str, params=()) -> sqlite3.Cursor:
        return self.connection.execute(sql, params)

    def one(self, sql: str, params=()) -> dict | None:
        cursor = self.connection.execute(sql, params)
        row = cursor.fetchone()
        return None if row is None else dict(zip([d[0] for d in cursor.description], row))

    def all(self, sql: str, params=()) -> list[dict]:
        cursor = self.connection.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def value(self, sql: str, params=()):
        row = self.connection.execute(sql, params).fetchone()
        return row[0] if row else None

    def exists(self, table: str, row_id: int) -> bool:
        return self.value(f"SELECT 1 FROM {table} WHERE id = ?", (row_id,)) is not None

    def insert(self, table: str, values: dict) -> int:
        return self.connection.execute(_insert_sql(table, values),
                                       tuple(values.values())).lastrowid

    def insert_row(self, table: str, values: dict) -> dict:
        """Insert a row and return it as stored (with its id and defaults)."""
        return self.one(_insert_sql(table, values) + " RETURNING *", tuple(values.values()))

    def update(self, table: str, row_id, changes: dict, key: str = "id") -> dict | None:
        """Change a row (changes must not be empty); return it as stored, None if absent."""
        assignments = ", ".join(f"{name} = ?" for name in changes)
        return self.one(f"UPDATE {table} SET {assignments} WHERE {key} = ? RETURNING *",
                        (*changes.values(), row_id))

    def in_thread(self, work):
        """work(self) in a worker thread, for statements of tens of milliseconds."""
        future = gevent.get_hub().threadpool.spawn(work, self)
        try:
            return future.get()
        finally:
            # NOTE: a killed greenlet must not end the transaction under the statement
            while not future.ready():
                with contextlib.suppress(gevent.GreenletExit):
                    future.wait()


def _insert_sql(table: str, values: dict) -> str:
    return f"INSERT INTO {table} ({', '.join(values)}) VALUES ({_marks(values)})"


def _keep_newest(t: Tx, table: str, column: str, owner: int, keep: int) -> int:
    """Delete all but the newest `keep` rows of the owner (a webhook, a device) in table;
    how many went."""
    return t.execute(f"DELETE FROM {table} WHERE {column} = ? AND id <= (SELECT id FROM "
                     f"{table} WHERE {column} = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
                     (owner, owner, keep)).rowcount


def _marks(values) -> str:
    return ",".join("?" * len(values))


def open_db(path: str, **pool) -> "dataset.Database":
    # every transaction ends before dataset gives its connection back, so the pool need
    # not roll it back again
    return dataset.connect(
        f"sqlite:///{path}", ensure_schema=False, sqlite_wal_mode=True,
        engine_kwargs={"pool_reset_on_return": None, **pool},
        on_connect_statements=["PRAGMA foreign_keys=ON", "PRAGMA synchronous=NORMAL",
                               "PRAGMA busy_timeout=0", "PRAGMA wal_autocheckpoint=0"])


@contextlib.contextmanager
def tx():
    """A short write transaction, committed on exit: dataset's `with db`, under WRITE_LOCK
    (SQLite's own busy wait would freeze every greenlet), never with I/O inside."""
    with WRITE_LOCK, _transaction(runtime.db) as t:
        _begin_immediate(t.connection)
        yield t
    runtime.checkpoints.wake(CHECKPOINT_SECONDS)


@contextlib.contextmanager
def read():
    """A read transaction on a pooled connection of its own, outside WRITE_LOCK: WAL gives
    it a snapshot of the last commit, so it never waits behind a write."""
    with _transaction(runtime.reads) as t:
        t.execute("BEGIN")  # one snapshot for all its statements
        yield t


@contextlib.contextmanager
def _transaction(db: "dataset.Database"):
    try:
        with db:
            yield Tx(db)
    except BaseException:
        # NOTE: dataset forgets a transaction whose COMMIT failed (a full disk) without
        # ending it or giving the connection back: the greenlet's next one could not begin
        if db.in_transaction or threading.get_ident() in db.connections:
            db.local.tx = []
            with contextlib.suppress(Exception):
                db.executable.invalidate()
            db._release_connection()
        raise


def _begin_immediate(connection) -> None:
    """Take the database's write lock now, waiting cooperatively while another program
    holds it; sqlite3.OperationalError ("database is locked") after BUSY_WAIT_SECONDS."""
    deadline = time.monotonic() + BUSY_WAIT_SECONDS
    pause = 0.002
    while True:
        try:
            connection.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or \
                    time.monotonic() + pause > deadline:
                raise
        gevent.sleep(pause)
        pause = min(pause * 2, 0.05)


#: How long a transaction waits for another program to release the database's write lock.
BUSY_WAIT_SECONDS = 5.0
#: How often checkpoint_wal() runs (SQLite's own checkpoints are turned off).
CHECKPOINT_SECONDS = 1.0


def checkpoint_wal(path: str) -> tuple[int, int, int]:
    """Copy what the write-ahead log holds into the database file, in a thread (SQLite's own
    checkpoint syncs inside a COMMIT and stalled the hub); SQLite's (busy, frames, copied).
    PASSIVE takes no lock: the one database access outside tx(), on its own connection."""
    connection = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=rw", uri=True,
                                 isolation_level=None)
    try:
        return connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        connection.close()


def checkpoint(path: str) -> None:
    """checkpoint_wal() in a worker thread; past WAL_LIMIT_FRAMES, again until a pass finds
    few new pages, and that one under WRITE_LOCK: SQLite restarts the log only once all of
    it is copied, which a checkpoint beside steady writes never reached."""
    pool = gevent.get_hub().threadpool
    _, frames, _ = pool.apply(checkpoint_wal, (path,))
    if frames <= WAL_LIMIT_FRAMES:
        return
    for _ in range(4):
        _, now, _ = pool.apply(checkpoint_wal, (path,))
        if now < frames:
            return  # the log started again meanwhile
        written, frames = now - frames, now
        if written <= WAL_LOCKED_FRAMES:
            with WRITE_LOCK:
                pool.apply(checkpoint_wal, (path,))
            return


#: Pages (of 4 KB, so 64 MB) the write-ahead log may hold before checkpoints see that it
#: starts again; the file is written over, never cut back (a truncate stalled the hub).
WAL_LIMIT_FRAMES = 16384
#: At most this many pages written during a pass let the next one hold the lock.
WAL_LOCKED_FRAMES = 256


def storage_error(exc: Exception) -> ApiError | None:
    """The API error for a database that is full or busy (another process holds its
    lock), None for any other failure.  SQLAlchemy wraps the driver's error of a COMMIT."""
    exc = getattr(exc, "orig", exc)
    if not isinstance(exc, sqlite3.OperationalError):
        return None
    text = str(exc).lower()
    if "full" in text:
        return StorageFull("the disk holding the database is full: free some space; "
                           "nothing was changed")
    if "locked" in text or "busy" in text:
        return DatabaseBusy("the database is busy (another program holds its lock); "
                            "nothing was changed, try again")
    return None


#: Bytes of task lists kept between changes.
DERIVED_BYTES = 16 * 1024 * 1024


class Derived:
    """Each project's task list as JSON, kept (in a Kept) with the project's task version
    (bumped by migration 0006's triggers in the transaction of any change to its tasks) it
    was read at.  A big list is 20-40 ms of SQLite; the version, 10 us."""

    def __init__(self, limit: int):
        self.limit = limit
        self.owner = None  # the database the values came from
        self.kept = None  # key -> (version, value, size)

    def get(self, t: Tx, key: tuple, project_id: int, build):
        """build(t)'s value for key, built only if the project's tasks changed since."""
        if self.owner is not runtime.db:
            self.owner, self.kept = runtime.db, Kept(self.limit, operator.itemgetter(2))
        version = t.value("SELECT version FROM task_versions WHERE project_id = ?",
                          (project_id,)) or 0
        kept = self.kept.get(key)
        if kept is not None and kept[0] == version:
            return kept[1]
        value = build(t)
        size = len(value) if isinstance(value, str) else 1024
        if size <= self.limit:
            self.kept.put(key, (version, value, size))
        else:
            self.kept.pop(key)
        return value


DERIVED = Derived(DERIVED_BYTES)


def migrate() -> list[str]:
    """Apply the migrations not applied yet, each in its own transaction (a start with none
    left to apply takes one)."""
    with tx() as t:
        t.connection.execute("CREATE TABLE IF NOT EXISTS _migrations "
                             "(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        done = {name for (name,) in t.execute("SELECT name FROM _migrations")}
    applied = []
    for name, script in MIGRATIONS:
        if name in done:
            continue
        with tx() as t:
            if t.value("SELECT 1 FROM _migrations WHERE name = ?", (name,)):
                continue
            # NOTE: tx() began the transaction (BEGIN IMMEDIATE): the DDL is atomic with it.
            t.insert("_migrations", {"name": name, "applied_at": now_iso()})
            for statement in script.split(";\n"):
                if statement.strip():
                    t.connection.execute(statement)
        applied.append(name)
    return applied


def find_rows(table: str, order_by="id", **where) -> list[dict]:
    """Plain reads: the rows matching where (dataset's filters, e.g. {"!=": ""})."""
    with read() as t:
        return list(t[table].find(order_by=order_by, **where))


def find_row(table: str, **where) -> dict | None:
    with read() as t:
        return t[table].find_one(**where)


def running_rows(table: str) -> list[dict]:
    """The runs or planning sessions marked running: at start-up, what the last server left.
    SQL, as the next one: dataset would reflect the table, 10-20 ms of every start."""
    with read() as t:
        return t.all(f"SELECT * FROM {table} WHERE status = 'running' ORDER BY id")


def waiting_verifier_rows() -> list[dict]:
    """The tasks in testing whose verifier waits for a usage limit."""
    with read() as t:
        return t.all("SELECT * FROM tasks WHERE status = 'testing' AND waiting_until IS NOT "
                     "NULL ORDER BY id")


def owned_rows(table: str, owner: str, **key) -> list[dict] | None:
    """The rows of table that belong to one project or task (key), by id; None without it."""
    with read() as t:
        if not t.exists(owner, *key.values()):
            return None
        return list(t[table].find(order_by="id", **key))


# =============================================================================
# STORE: PROJECTS, HOSTS, TASKS AND RUNS
# =============================================================================
# The reads and writes of projects, hosts, tasks, runs and the pipeline (see STORE).

# --- projects ----------------------------------------------------------------

def project_row(project_id: int) -> dict | None:
    with read() as t:  # SQL: every create, move and run reads it
        return t.one("SELECT * FROM projects WHERE id = ?", (project_id,))


def project_summary_rows() -> list[dict]:
    """Every project with its task counts per status under "counts"."""
    with read() as t:
        projects = t.all("SELECT * FROM projects ORDER BY id")
        for p in projects:
            p["counts"] = dict(t.execute("SELECT status, COUNT(*) FROM tasks WHERE "
                                         "project_id = ? GROUP BY status", (p["id"],)))
    return projects


def insert_project_row(values: dict) -> dict:
    """Insert a project, deriving its unique key; raise Conflict on a taken slug."""
    with tx() as t:
        projects = t["projects"]
        if projects.find_one(slug=values["slug"]):
            raise Conflict(f"slug {values['slug']!r} is already taken", "slug")
        _check_host_exists(t, values)
        base = project_key_from_slug(values["slug"])
        taken = {r["key"] for r in projects.find(key={"startswith": base})}
        candidates = itertools.chain([base], (f"{base}{n}" for n in itertools.count(2)))
        key = next(k for k in candidates if k not in taken)
        now = now_iso()
        project_id = projects.insert({**values, "key": key, "created_at": now, "updated_at": now})
        return projects.find_one(id=project_id)


def update_project_row(project_id: int, changes: dict) -> dict | None:
    with tx() as t:
        projects = t["projects"]
        if not projects.find_one(id=project_id):
            return None
        if "slug" in changes and projects.find_one(slug=changes["slug"],
                                                   id={"!=": project_id}):
            raise Conflict(f"slug {changes['slug']!r} is already taken", "slug")
        _check_host_exists(t, changes)
        projects.update({**changes, "updated_at": now_iso(), "id": project_id}, ["id"])
        return projects.find_one(id=project_id)


def _check_host_exists(t: Tx, values: dict) -> None:
    if values.get("host_id") is not None and not t.exists("hosts", values["host_id"]):
        raise Invalid(f"host {values['host_id']} is not a host of the board (GET /api/hosts)",
                      "host")


def add_allowed_tools_row(project_id: int, rules: list[str]) -> dict | None:
    """Append the rules a project's allowedTools lacks; None if there is no such project."""
    with tx() as t:
        row = t.one("SELECT allowed_tools FROM projects WHERE id = ?", (project_id,))
        if row is None:
            return None
        have = [r for r in (row["allowed_tools"] or "").split(",") if r]
        return t.update("projects", project_id, {"allowed_tools": ",".join(
            have + [r for r in dict.fromkeys(rules) if r not in have]), "updated_at": now_iso()})


#: A planning session's model, start and tokens, as runs keep them (see USAGE_SOURCE).
PLAN_TOKENS = ("model, started_at, COALESCE(json_extract(stats_json, '$.tokens.input'), 0), "
               "COALESCE(json_extract(stats_json, '$.tokens.output'), 0)")


def delete_project_row(project_id: int) -> list[str] | None:
    """Delete a project and everything in it; return its attachment paths, None if absent."""
    with tx() as t:
        if not t.exists("projects", project_id):
            return None
        paths = [r["path"] for r in t.all(
            "SELECT a.path FROM attachments a JOIN tasks k ON k.id = a.task_id "
            "WHERE k.project_id = ?", (project_id,))]
        # the plans go, what they cost stays in the agents' usage
        t.execute("INSERT INTO runs (kind, status, ended_at, model, started_at, input_tokens, "
                  f"output_tokens, cost) SELECT 'planner', status, finished_at, {PLAN_TOKENS}, "
                  "cost FROM plans WHERE project_id = ? AND status != 'running' ORDER BY id",
                  (project_id,))
        t.execute("DELETE FROM projects WHERE id = ?", (project_id,))
        t.execute("DELETE FROM task_versions WHERE project_id = ?", (project_id,))
        return paths


# --- hosts -------------------------------------------------------------------

#: A host row with its live run count.
HOST_SQL = "SELECT h.*, (SELECT COUNT(*) FROM runs r WHERE r.host_id = h.id AND r.status = " \
    "'running') AS running FROM hosts h"


def host_rows() -> list[dict]:
    with read() as t:
        return t.all(f"{HOST_SQL} ORDER BY h.id")


def host_row(host_id: int) -> dict | None:
    with read() as t:
        return t.one(f"{HOST_SQL} WHERE h.id = ?", (host_id,))


def insert_host_row(values: dict) -> dict:
    """Add a host; Conflict when its name is taken."""
    now = now_iso()
    with tx() as t:
        if t.value("SELECT 1 FROM hosts WHERE name = ?", (values["name"],)):
            raise Conflict(f"name {values['name']!r} is already taken", "name")
        host_id = t.insert("hosts", {**values, "created_at": now, "updated_at": now})
        return t.one(f"{HOST_SQL} WHERE h.id = ?", (host_id,))


def update_host_row(host_id: int, changes: dict) -> dict | None:
    with tx() as t:
        if not t.exists("hosts", host_id):
            return None
        if "name" in changes and t.value("SELECT 1 FROM hosts WHERE name = ? AND id != ?",
                                         (changes["name"], host_id)):
            raise Conflict(f"name {changes['name']!r} is already taken", "name")
        t.update("hosts", host_id, {**changes, "updated_at": now_iso()})
        return t.one(f"{HOST_SQL} WHERE h.id = ?", (host_id,))


def delete_host_row(host_id: int) -> dict | None:
    """Forget a host; Conflict naming the runs on it and the projects that name it."""
    with tx() as t:
        row = t.one(f"{HOST_SQL} WHERE h.id = ?", (host_id,))
        if row is None:
            return None
        runs = t.all("SELECT k.task_key FROM runs r JOIN tasks k ON k.id = r.task_id "
                     "WHERE r.host_id = ? AND r.status = 'running' ORDER BY r.id", (host_id,))
        projects = t.all("SELECT name FROM projects WHERE host_id = ? ORDER BY id", (host_id,))
        if runs or projects:
            what = ([f"runs on it ({', '.join(r['task_key'] for r in runs)})"] if runs else []) \
                + ([f"projects name it ({', '.join(repr(p['name']) for p in projects)})"]
                   if projects else [])
            raise Conflict(f"host {row['name']!r} is in use: {'; '.join(what)}")
        t.execute("DELETE FROM hosts WHERE id = ?", (host_id,))
        return row


def host_project_rows(host_id: int) -> list[int]:
    """The ids of the projects whose tasks run on a host."""
    with read() as t:
        return [r[0] for r in t.execute("SELECT id FROM projects WHERE host_id = ?", (host_id,))]


def hosts_in_use_rows() -> list[dict]:
    with read() as t:
        return t.all("SELECT id, name, enabled, last_check_json FROM hosts h WHERE EXISTS "
                     "(SELECT 1 FROM projects p WHERE p.host_id = h.id) ORDER BY id")


def task_host_row(task_id: int) -> dict | None:
    """The host a task's project runs its tasks on, or None (this machine)."""
    with read() as t:
        return t.one(f"{HOST_SQL} WHERE h.id = (SELECT p.host_id FROM tasks k JOIN projects p "
                     "ON p.id = k.project_id WHERE k.id = ?)", (task_id,))


def waiting_task_rows(host_id: int | None) -> list[dict]:
    """The tasks that wait for a host; with None, those that wait for the sandbox."""
    with read() as t:
        if host_id is None:
            return t.all("SELECT * FROM tasks WHERE waiting_for_json IS NOT NULL AND "
                         "json_extract(waiting_for_json, '$.sandbox') IS NOT NULL ORDER BY id")
        return t.all("SELECT * FROM tasks WHERE waiting_for_json IS NOT NULL AND "
                     "json_extract(waiting_for_json, '$.host') = ? ORDER BY id", (host_id,))


# --- tasks -------------------------------------------------------------------

class Notice:
    """A notice for webhooks (design §8), queued in the transaction of the change it
    announces; `hooks` and `dropped` tell announce() what happened after the commit."""

    def __init__(self, event: str, *, from_task: dict | None = None, **data):
        self.event = event
        self.data = {name: value for name, value in data.items() if value is not None}
        self.from_task = from_task or {}
        self.project_id = None
        self.hooks = []
        self.dropped = 0

    def queue(self, t: Tx, task: dict) -> None:
        """Queue it with the task as it is in this transaction, for each enabled webhook of
        the task's project subscribed to the event; each keeps its newest
        WEBHOOK_QUEUE_KEPT."""
        project_id = self.project_id = task["project_id"]
        hooks = [r[0] for r in t.execute(
            "SELECT id FROM webhooks WHERE project_id = ? AND enabled = 1 AND EXISTS "
            "(SELECT 1 FROM json_each(events_json) WHERE value = ?) ORDER BY id",
            (project_id, self.event))]
        if not hooks:
            return
        now = now_iso()
        data = {**self.data, **{name: task[column] for name, column in self.from_task.items()
                                if task[column] is not None}}
        text = json_dumps({"event": self.event, "taskId": task["id"], "projectId": project_id,
                           "at": now, "task": render(TASK_FIELDS, task), "data": data})
        for hook_id in hooks:
            t.insert("webhook_outbox", {"webhook_id": hook_id, "moment_json": text,
                                        "created_at": now})
            self.dropped += _keep_newest(t, "webhook_outbox", "webhook_id", hook_id,
                                         WEBHOOK_QUEUE_KEPT)
        self.hooks += [h for h in hooks if h not in self.hooks]


#: The queue's order, which is also the task list's order.
TASK_ORDER = "priority DESC, queue_position, created_at, id"


def task_row(task_id: int) -> dict | None:
    with read() as t:
        return t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))


#: The rows of a query (each a column j holding JSON) as one JSON array built by SQLite.
JSON_ARRAY = "SELECT '[' || coalesce(group_concat(j, ','), '') || ']' FROM ({})"


def task_list_json(project_id: int, object_sql: str, status: str | None,
                   limit: int) -> str | None:
    """A page of the project's tasks (of one status) in queue order, as SQLite-built JSON."""
    with read() as t:
        if not t.exists("projects", project_id):
            return None
        return t.value(JSON_ARRAY.format(
            f"SELECT {object_sql} AS j FROM tasks WHERE project_id = ? "
            + ("AND status = ? " if status else "") + f"ORDER BY {TASK_ORDER} LIMIT ?"),
            (project_id, *([status] if status else []), limit))


def task_rows_json(project_id: int, object_sql: str) -> str | None:
    """The project's tasks as one JSON array built by SQLite, each row as object_sql."""
    with read() as t:
        if not t.exists("projects", project_id):
            return None
        return DERIVED.get(t, ("list", project_id, object_sql), project_id,
                           lambda t: t.in_thread(lambda t: t.value(JSON_ARRAY.format(
                               f"SELECT {object_sql} AS j FROM tasks WHERE project_id = ? "
                               f"ORDER BY {TASK_ORDER}"), (project_id,))))


def task_detail_rows(task_id: int, log_sql: str) -> dict | None:
    """The task with its revisions, attachments and its log as SQLite-built JSON."""
    with read() as t:
        task = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if task is None:
            return None
        for table in ("revisions", "attachments"):
            task[table] = t.all(f"SELECT * FROM {table} WHERE task_id = ? ORDER BY id",
                                (task_id,))
        task["logs_json"] = _log_json(t, task_id, log_sql)
        return task


#: The rendered logs of the tasks whose detail was read last, at most this many characters.
LOG_JSON_KEPT_CHARS = 64 * 2**20


def _log_json(t: Tx, task_id: int, log_sql: str) -> str:
    """A task's whole log as a JSON array, kept between reads: log rows are only ever added
    (with higher ids) or deleted, so (last id, count) tells whether the kept text is still
    the log, or the log plus rows added since, which are rendered alone and appended."""
    last, count = t.one("SELECT MAX(id) AS last, COUNT(*) AS n FROM logs WHERE task_id = ?",
                        (task_id,)).values()
    kept = runtime.log_json.get(task_id)
    if kept is not None and kept[:2] == (last, count):
        text = kept[2]
    else:
        since = kept[0] if kept is not None and kept[0] is not None and \
            last is not None and kept[0] < last else None
        added = t.in_thread(lambda t: t.one(
            f"SELECT COUNT(*) AS n, json_group_array(json(j)) AS rows FROM (SELECT {log_sql} "
            "AS j FROM logs WHERE task_id = ? AND id > ? ORDER BY id)",
            (task_id, -1 if since is None else since)))
        if since is not None and kept[1] + added["n"] == count:
            text = kept[2][:-1] + ("," if kept[1] else "") + added["rows"][1:]
        elif since is None and added["n"] == count:
            text = added["rows"]
        else:  # rows were deleted since, and others added: all of it again
            text = t.in_thread(lambda t: t.value(
                f"SELECT json_group_array(json(j)) FROM (SELECT {log_sql} AS j FROM logs "
                "WHERE task_id = ? ORDER BY id)", (task_id,)))
    return runtime.log_json.put(task_id, (last, count, text))[2]


def insert_task_row(project_id: int, values: dict, defaults: dict, notice: Notice) \
        -> tuple[dict, bool] | None:
    """Insert a task with the project's next key, its activity and its notice; return
    (task, project autoQueue), None without such project.  Model and effort default to the
    project's template of the task's type, else to defaults."""
    with tx() as t:
        return _insert_task(t, project_id, values, defaults, notice)


def _insert_task(t: Tx, project_id: int, values: dict, defaults: dict, notice: Notice) \
        -> tuple[dict, bool] | None:
    project = t.one("UPDATE projects SET task_counter = task_counter + 1 "
                    "WHERE id = ? RETURNING task_counter, key, auto_queue", (project_id,))
    if project is None:
        return None
    parent_id = values.get("parent_task_id")
    if parent_id is not None and not t.value(
            "SELECT 1 FROM tasks WHERE id = ? AND project_id = ?", (parent_id, project_id)):
        raise Invalid(f"parent_task_id {parent_id} is not a task of project {project_id}",
                      "parent_task_id")
    now = now_iso()
    if "model" not in values or "thinking_effort" not in values:
        template = t.one("SELECT model, thinking_effort FROM templates WHERE project_id = ? "
                         "AND task_type = ? ORDER BY id LIMIT 1",
                         (project_id, values["task_type"])) or {}
        values = {"model": template.get("model") or defaults["model"],
                  "thinking_effort": template.get("thinking_effort")
                  or defaults["thinking_effort"], **values}
    values = {**values, "project_id": project_id, "status": "backlog",
              "task_key": f"{project['key']}-{project['task_counter']}",
              "created_at": now, "updated_at": now}
    task = t.insert_row("tasks", values)
    if parent_id is not None:
        t.execute("UPDATE tasks SET awaiting_subtasks = 1 WHERE id = ?", (parent_id,))
    add_activity(t, task, "created", now, (None, "backlog"))
    notice.queue(t, task)
    return task, project["auto_queue"]


def add_activity(t: Tx, task: dict, event: str, now: str,
                 statuses: tuple[str | None, str] | None = None) -> None:
    """An activity entry of the task: statuses (from, to), by default the status it has."""
    start, end = statuses or (task["status"], task["status"])
    t.insert("activity", {"project_id": task["project_id"], "task_id": task["id"],
                          "task_title": task["title"], "event": event, "from_status": start,
                          "to_status": end, "created_at": now})


def update_task_row(task_id: int, changes: dict) -> dict | None:
    with tx() as t:
        return t.update("tasks", task_id, {**changes, "updated_at": now_iso()})


def move_task_row(task_id: int, to: str, changes_for, only_from=None,
                  notice: Notice | None = None) -> tuple[dict, dict] | None:
    """Change a task's status with the columns changes_for(before, now) gives, record it
    and queue its notice; (before, after), None if absent.  only_from: else unchanged."""
    with tx() as t:
        before = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if before is None:
            return None
        if before["status"] == to or (only_from and before["status"] != only_from):
            return before, before
        now = now_iso()
        after = t.update("tasks", task_id, {**changes_for(before, now), "status": to,
                                            "updated_at": now})
        add_activity(t, before, "status_change", now, (before["status"], to))
        if notice is not None:
            notice.queue(t, after)
        return before, after


def delete_task_row(task_id: int) -> tuple[dict, list[str], list[dict]] | None:
    """Delete a task; return it, its attachment paths and the tasks it changed (its
    sub-tasks lose their parent, its parent may stop awaiting)."""
    with tx() as t:
        task = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if task is None:
            return None
        paths = [r["path"] for r in t.all("SELECT path FROM attachments WHERE task_id = ?",
                                          (task_id,))]
        children = [r["id"] for r in t.all("SELECT id FROM tasks WHERE parent_task_id = ?",
                                           (task_id,))]
        t.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
        if task["parent_task_id"] is not None:  # its parent may have no sub-task left
            t.execute("UPDATE tasks SET awaiting_subtasks = EXISTS (SELECT 1 FROM tasks "
                      "WHERE parent_task_id = ?) WHERE id = ?",
                      (task["parent_task_id"], task["parent_task_id"]))
            children.append(task["parent_task_id"])
        orphans = t.all(f"SELECT * FROM tasks WHERE id IN ({_marks(children)})", children)
        return task, paths, orphans


def log_rows_json(task_id: int, limit: int, before: int | None, object_sql: str,
                  kind: str | None = None, attempt: int | None = None) -> str | None:
    """The newest `limit` log entries (of `kind`, of the runs of current `attempt` n)
    below `before`, oldest first, as SQLite-built JSON."""
    where = ("AND kind = ? " if kind else "") + (
        "AND run_id IN (SELECT r.id FROM runs r JOIN attempts a ON a.id = r.attempt_id "
        "WHERE r.task_id = ? AND a.current = 1 AND a.n = ?) " if attempt else "")
    with read() as t:
        if not t.exists("tasks", task_id):
            return None
        return t.value(JSON_ARRAY.format(
            f"SELECT j FROM (SELECT {object_sql} AS j, id FROM logs WHERE task_id = ? AND "
            f"id < ? {where}ORDER BY id DESC LIMIT ?) ORDER BY id"),
            (task_id, 2**63 - 1 if before is None else before, *([kind] if kind else []),
             *([task_id, attempt] if attempt else []), limit))


def delete_old_log_rows(table: str, cutoff: str, chunk: int) -> int:
    """Delete up to `chunk` of the oldest rows of table created before cutoff."""
    with tx() as t:
        return t.execute(f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} ORDER BY "
                         "id LIMIT ?) AND created_at < ?", (chunk, cutoff)).rowcount


def backup_database(source: str, target: str) -> int:
    """Copy the database with SQLite's online backup (safe while the server writes to
    it), to target through a temporary file; return the copy's size in bytes."""
    partial = f"{target}.partial-{os.getpid()}"
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst, pages=1024, sleep=0.005)
            problem = dst.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            dst.close()
        if problem != "ok":
            raise sqlite3.DatabaseError(f"the copy fails its integrity check: {problem}")
        os.replace(partial, target)
    finally:
        src.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)
    return os.path.getsize(target)


def insert_log_rows(rows: list[dict], events: list[dict]) -> tuple[str | None, dict]:
    """Insert log entries and raw lines; (the entries as JSON, {task: project}).
    Rows of tasks deleted meanwhile are dropped."""
    task_ids = tuple({r["task_id"] for r in rows} | {e["task_id"] for e in events})
    with tx() as t:
        projects = {r["id"]: r["project_id"] for r in t.all(
            f"SELECT id, project_id FROM tasks WHERE id IN ({_marks(task_ids)})", task_ids)}
        rows = [r for r in rows if r["task_id"] in projects]
        events = [e for e in events if e["task_id"] in projects]
        inserts = [(f"INSERT INTO {table} ({', '.join(batch[0])}) VALUES "
                    f"({_marks(batch[0])})", [tuple(r.values()) for r in batch])
                   for table, batch in (("logs", rows), ("task_events", events)) if batch]

        def write(t):
            for sql, values in inserts:
                t.connection.executemany(sql, values)
            # NOTE: one writer, one transaction, AUTOINCREMENT: the ids are consecutive.
            return t.value(f"SELECT '[' || group_concat(j, ',') || ']' FROM (SELECT "
                           f"{json_object_sql(LOG_FIELDS)} AS j FROM logs WHERE id > "
                           "(SELECT MAX(id) FROM logs) - ? ORDER BY id)",
                           (len(rows),)) if rows else None
        return t.in_thread(write), projects


# --- runs ----------------------------------------------------------------------

def run_context_rows(task_id: int) -> dict | None:
    """Everything a run's prompt and command line need, read at once."""
    with read() as t:
        task = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if task is None:
            return None
        project_id = task["project_id"]
        return {
            "task": task,
            "project": t.one("SELECT * FROM projects WHERE id = ?", (project_id,)),
            "template": t.one("SELECT * FROM templates WHERE project_id = ? AND task_type = ? "
                              "ORDER BY id LIMIT 1", (project_id, task["task_type"])),
            "snippets": t.all("SELECT * FROM snippets WHERE project_id = ? AND enabled = 1 "
                              "ORDER BY id", (project_id,)),
            "revisions": t.all("SELECT * FROM revisions WHERE task_id = ? ORDER BY id",
                               (task_id,)),
            "attachments": t.all("SELECT * FROM attachments WHERE task_id = ? ORDER BY id",
                                 (task_id,)),
            "host": t.one(f"{HOST_SQL} JOIN projects p ON p.host_id = h.id WHERE p.id = ?",
                          (project_id,)),
        }


#: Whether task k has a set of attempts none of which was picked (design §18).
ATTEMPTS_OPEN = "(k.attempts IS NOT NULL AND NOT EXISTS (SELECT 1 FROM attempts a WHERE " \
    "a.task_id = k.id AND a.current = 1 AND a.picked = 1))"


def task_slot_row(task_id: int) -> dict | None:
    """A task's status with its project's concurrency limit."""
    with read() as t:
        return t.one("SELECT k.status, k.project_id, p.max_concurrent, p.slug, p.host_id, "
                     f"{ATTEMPTS_OPEN} AS attempts_open FROM tasks k JOIN projects p ON "
                     "p.id = k.project_id WHERE k.id = ?", (task_id,))


def insert_run_row(values: dict) -> int:
    with tx() as t:
        return t.insert("runs", {**values, "status": "running", "started_at": now_iso()})


def session_usage_row(session_id: str) -> dict:
    """The tokens the earlier runs of an agent session counted, by the CLI's names (a
    Codex thread reports its usage from the start of the thread)."""
    with read() as t:
        row = t.one("SELECT SUM(input_tokens) AS i, SUM(output_tokens) AS o, "
                    "SUM(cache_read_tokens) AS r, SUM(cache_creation_tokens) AS c FROM runs "
                    "WHERE session_id = ? AND status != 'running'", (session_id,))
    return {"input_tokens": row["i"] or 0, "output_tokens": row["o"] or 0,
            "cache_read_input_tokens": row["r"] or 0,
            "cache_creation_input_tokens": row["c"] or 0}


def session_agent_row(session_id: str | None) -> str | None:
    """The agent CLI whose session this is (a task may change agents between runs)."""
    if session_id is None:
        return None
    with read() as t:
        return t.value("SELECT agent FROM runs WHERE session_id = ? ORDER BY id DESC LIMIT 1",
                       (session_id,))


def run_agent_row(run_id: int) -> str:
    with read() as t:
        return t.value("SELECT agent FROM runs WHERE id = ?", (run_id,))


def agent_limit_rows() -> list[dict]:
    with read() as t:
        return t.all("SELECT * FROM agent_limits ORDER BY agent")


def save_agent_limit_row(agent: str, until: str, reason: str) -> None:
    with tx() as t:
        t.execute("INSERT INTO agent_limits (agent, until, reason) VALUES (?, ?, ?) ON "
                  "CONFLICT (agent) DO UPDATE SET until = excluded.until, reason = "
                  "excluded.reason", (agent, until, reason))


def delete_agent_limit_row(agent: str) -> None:
    with tx() as t:
        t.execute("DELETE FROM agent_limits WHERE agent = ?", (agent,))


def agent_use_rows(demo_dir: str | None) -> tuple[dict, dict, list]:
    """Of the projects on this machine (not the one whose runs are simulated, in
    `demo_dir`): {agent: projects running it}, {agent: tasks not done that chose it
    themselves}; and of those on hosts, [{host_id, agent, projects}], a task's own choice
    counting as a use with no project."""
    local = "p.host_id IS NULL AND p.working_dir IS NOT ?"
    with read() as t:
        return ({r["agent"]: r["n"] for r in t.all(
                    f"SELECT agent, COUNT(*) AS n FROM projects p WHERE {local} "
                    "GROUP BY agent", (demo_dir,))},
                {r["agent"]: r["n"] for r in t.all(
                    "SELECT k.agent, COUNT(*) AS n FROM tasks k JOIN projects p ON p.id = "
                    f"k.project_id WHERE k.agent IS NOT NULL AND k.status != 'done' AND {local} "
                    "GROUP BY k.agent", (demo_dir,))},
                t.all("SELECT host_id, agent, SUM(own) AS projects FROM (SELECT host_id, "
                      "agent, 1 AS own FROM projects WHERE host_id IS NOT NULL UNION ALL "
                      "SELECT DISTINCT p.host_id, k.agent, 0 FROM tasks k JOIN projects p ON "
                      "p.id = k.project_id WHERE p.host_id IS NOT NULL AND k.agent IS NOT "
                      "NULL AND k.status != 'done') GROUP BY host_id, agent "
                      "ORDER BY host_id"))


def project_ids_of_agent(agent: str) -> list[int]:
    """The projects with backlog tasks that run this agent (their own or the project's)."""
    with read() as t:
        return [r["id"] for r in t.all(
            "SELECT DISTINCT p.id FROM projects p JOIN tasks k ON k.project_id = p.id "
            "WHERE k.status = 'backlog' AND COALESCE(k.agent, p.agent) = ?", (agent,))]


def update_run_row(run_id: int, changes: dict) -> None:
    with tx() as t:
        t.update("runs", run_id, changes)


def run_network_rows(run_id: int, task_id: int | None, network: dict) -> None:
    """What a sandboxed run's network did (design §20): counted on its row, kept on its task
    as its latest run's."""
    with tx() as t:
        t.update("runs", run_id, {"network_refused": network["refused"]})
        if task_id is not None:
            t.execute("UPDATE tasks SET network_json = ? WHERE id = ?",
                      (json_dumps(network), task_id))


def finish_run_rows(run_id: int, run_changes: dict, task_changes: dict) -> dict | None:
    """Record a run's end and add its usage to its task; return the task (None if gone)."""
    with tx() as t:
        run = t.update("runs", run_id, {**run_changes, "ended_at": now_iso()})
        if run["task_id"] is None:
            return None
        t.execute("UPDATE tasks SET input_tokens = input_tokens + ?, output_tokens = "
                  "output_tokens + ?, cache_read_tokens = cache_read_tokens + ?, "
                  "cache_creation_tokens = cache_creation_tokens + ?, total_cost = "
                  "total_cost + ?, cost_estimated = MAX(cost_estimated, ?) WHERE id = ?",
                  (run["input_tokens"], run["output_tokens"], run["cache_read_tokens"],
                   run["cache_creation_tokens"], run["cost"],
                   int(bool(run["cost_estimated"] and run["cost"])), run["task_id"]))
        return t.update("tasks", run["task_id"], {**task_changes, "updated_at": now_iso()})


def insert_attempt_rows(task_id: int, project_id: int, attempts: list[dict]) -> list[dict]:
    """A task's new set of attempts, queued; the rows of its earlier sets stay (not
    current) for the statistics."""
    with tx() as t:
        now = now_iso()
        t.execute("UPDATE attempts SET current = 0 WHERE task_id = ?", (task_id,))
        rows = [t.insert_row("attempts", {"task_id": task_id, "project_id": project_id,
                                          "n": n, **a, "created_at": now})
                for n, a in enumerate(attempts, 1)]
        t.update("tasks", task_id, {"attempts": len(rows), "updated_at": now})
        return rows


def attempt_rows(task_id: int) -> list[dict]:
    """The task's current attempts, by n."""
    with read() as t:
        return t.all("SELECT * FROM attempts WHERE task_id = ? AND current = 1 ORDER BY n",
                      (task_id,))


def update_attempt_row(attempt_id: int, changes: dict, run: dict | None = None) -> dict:
    """Change an attempt; with `run` (a runs row), add its cost, time and tokens."""
    with tx() as t:
        if run is not None:
            t.execute("UPDATE attempts SET cost = cost + ?, tokens = tokens + ?, duration_ms ="
                      " duration_ms + CAST(ROUND((julianday(?) - julianday(?)) * 86400000) "
                      "AS INTEGER) WHERE id = ?", (
                          run["cost"], run["input_tokens"] + run["output_tokens"],
                          run["ended_at"], run["started_at"], attempt_id))
        return t.update("attempts", attempt_id, changes) if changes else \
            t.one("SELECT * FROM attempts WHERE id = ?", (attempt_id,))


def queued_attempt_rows(project_id: int) -> list[dict]:
    """The queued attempts of the project's running tasks, oldest set first."""
    with read() as t:
        return t.all("SELECT a.* FROM attempts a JOIN tasks k ON k.id = a.task_id WHERE "
                     "a.status = 'queued' AND a.project_id = ? AND a.current = 1 AND "
                     "k.status = 'in_progress' ORDER BY a.id", (project_id,))


def pick_attempt_rows(attempt_id: int, task_changes: dict) -> tuple[dict, dict] | None:
    """Mark the attempt picked and give its task its branch, once: (attempt, task), None
    when it or another of its set was picked meanwhile."""
    with tx() as t:
        attempt = t.one("SELECT * FROM attempts WHERE id = ?", (attempt_id,))
        if attempt is None or t.value("SELECT 1 FROM attempts WHERE task_id = ? AND current "
                                      "= 1 AND picked = 1", (attempt["task_id"],)):
            return None
        return t.update("attempts", attempt_id, {"picked": 1}), t.update(
            "tasks", attempt["task_id"], {**task_changes, "updated_at": now_iso()})


def attempt_stat_rows() -> list[dict]:
    """Per CLI and model tier: the attempts that ended, how many were picked, their
    mean cost."""
    with read() as t:
        return t.all("SELECT agent, model, COUNT(*) AS attempts, SUM(picked) AS picks, "
                     "AVG(cost) AS mean_cost FROM attempts WHERE status IN ('done', "
                     "'failed', 'stopped') GROUP BY agent, model ORDER BY agent, model")


def bump_retry_row(task_id: int) -> dict | None:
    with tx() as t:
        t.execute("UPDATE tasks SET retry_count = retry_count + 1 WHERE id = ?", (task_id,))
        return t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))


def restart_rows() -> list[dict]:
    """After a restart: mark runs left 'running' interrupted, clear stale run flags, and
    return every in_progress task with the status and session of its latest run, and the
    feedback of a change request no run has started with yet (one waiting for a limit).
    Attempts left running are queued again (stopped, when their task no longer runs)."""
    with tx() as t:
        t.execute("UPDATE runs SET status = 'interrupted', ended_at = ? "
                  "WHERE status = 'running'", (now_iso(),))
        t.execute("UPDATE tasks SET is_running = 0 WHERE is_running = 1")
        t.execute("UPDATE attempts SET status = CASE WHEN task_id IN (SELECT id FROM tasks "
                  "WHERE status = 'in_progress') THEN 'queued' ELSE 'stopped' END WHERE "
                  "current = 1 AND status = 'running'")
        return t.all(f"SELECT k.*, {ATTEMPTS_OPEN} AS attempts_open, r.status AS run_status, "
                     "r.session_id AS run_session, "
                     "(SELECT feedback FROM revisions v WHERE v.task_id = k.id AND "
                     "v.created_at > COALESCE(r.started_at, '') ORDER BY v.id DESC LIMIT 1) "
                     "AS pending_feedback "
                     "FROM tasks k LEFT JOIN runs r ON r.id = (SELECT MAX(id) FROM runs "
                     "WHERE task_id = k.id AND kind = 'task') WHERE k.status = 'in_progress' "
                     "ORDER BY k.id")


# --- pipeline: dependencies, revisions, queue order -----------------------------

def pipeline_rows(project_id: int) -> tuple[list[dict], list[dict]] | None:
    """A project's tasks (in queue order) and dependency edges; None if no project."""
    with read() as t:
        if not t.exists("projects", project_id):
            return None
        tasks = t.all(f"SELECT * FROM tasks WHERE project_id = ? ORDER BY {TASK_ORDER}",
                      (project_id,))
        edges = t.all(f"{EDGES_WITH_PARENTS} WHERE k.project_id = ? "
                      "ORDER BY d.from_id, d.to_id", (project_id,))
        return tasks, edges


#: Dependency edges with the status and key of the task depended on.
EDGES_WITH_PARENTS = ("SELECT d.*, p.status AS parent_status, p.task_key AS parent_key "
                      "FROM task_dependencies d JOIN tasks p ON p.id = d.from_id "
                      "JOIN tasks k ON k.id = d.to_id")


def queue_rows(project_id: int, auto_queue: bool) -> tuple[list[dict], list[dict]]:
    """The backlog tasks the queue may start, in queue order, with their incoming edges:
    all of them with autoQueue (but imported ones no person has touched yet), else the
    sub-tasks of waiting parents."""
    waiting_parent = "parent_task_id IN (SELECT id FROM tasks WHERE project_id = ? AND " \
        "awaiting_subtasks = 1)"
    mine = "(source IS NULL OR released = 1)"  # imported tasks wait for a person
    which = mine if auto_queue else f"{mine} AND {waiting_parent}"
    params = (project_id,) if auto_queue else (project_id, project_id)
    with read() as t:
        tasks = t.all(f"SELECT * FROM tasks WHERE project_id = ? AND status = 'backlog' AND "
                      f"{which} ORDER BY {TASK_ORDER}", params)
        ids = [task["id"] for task in tasks]
        edges = t.all(f"{EDGES_WITH_PARENTS} WHERE d.to_id IN ({_marks(ids)})", ids) \
            if ids else []
        return tasks, edges


def task_dependency_rows(task_id: int) -> dict | None:
    with read() as t:
        if not t.exists("tasks", task_id):
            return None
        return {"parents": t.all("SELECT * FROM task_dependencies WHERE to_id = ? "
                                 "ORDER BY from_id", (task_id,)),
                "children": t.all("SELECT * FROM task_dependencies WHERE from_id = ? "
                                  "ORDER BY to_id", (task_id,))}


def upsert_dependency_row(from_id: int, to_id: int, condition: str) -> dict:
    """Add the edge from_id -> to_id (or change its condition); refuse cycles."""
    with tx() as t:
        tasks = {r["id"]: r for r in t.all("SELECT id, project_id FROM tasks WHERE id IN (?, ?)",
                                           (from_id, to_id))}
        for task_id, name in ((to_id, "taskId"), (from_id, "dependsOnId")):
            if task_id not in tasks:
                raise NotFound(f"task {task_id} not found", name)
        if tasks[from_id]["project_id"] != tasks[to_id]["project_id"]:
            raise Invalid(f"tasks {to_id} and {from_id} belong to different projects",
                          "dependsOnId")
        if from_id == to_id:
            raise Conflict(f"task {to_id} cannot depend on itself", "dependsOnId")
        children = collections.defaultdict(list)
        for edge in t.all("SELECT d.from_id, d.to_id FROM task_dependencies d JOIN tasks k "
                          "ON k.id = d.to_id WHERE k.project_id = ?",
                          (tasks[to_id]["project_id"],)):
            children[edge["from_id"]].append(edge["to_id"])
        if reaches(children, to_id, from_id):  # from_id depends on to_id already
            raise Conflict(f"task {to_id} depending on task {from_id} would make a cycle",
                           "dependsOnId")
        t.execute("INSERT INTO task_dependencies (from_id, to_id, condition_type, created_at) "
                  "VALUES (?, ?, ?, ?) ON CONFLICT(from_id, to_id) DO UPDATE SET "
                  "condition_type = excluded.condition_type",
                  (from_id, to_id, condition, now_iso()))
        return {**t.one("SELECT * FROM task_dependencies WHERE from_id = ? AND to_id = ?",
                        (from_id, to_id)), "project_id": tasks[to_id]["project_id"]}


def delete_dependency_row(from_id: int, to_id: int) -> int | None:
    """Remove an edge; return its project id, None if there was no such edge."""
    with tx() as t:
        project_id = t.value("SELECT project_id FROM tasks WHERE id = ?", (to_id,))
        removed = t.execute("DELETE FROM task_dependencies WHERE from_id = ? AND to_id = ?",
                            (from_id, to_id)).rowcount
        return project_id if removed else None


def insert_revision_row(task_id: int, feedback: str, notice: Notice,
                        sent: dict | None = None) -> dict | None:
    """Record a change request (and its activity) and queue its notice; return the task,
    None if absent.  `sent` {keys, since}: it sends a pull request's signals back, which
    happens only while the task is done, and counts one of the PR's attempts."""
    with tx() as t:
        task = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if task is None or (sent and task["status"] != "done"):
            return None
        now = now_iso()
        changes = {"revision_count": task["revision_count"] + 1, "updated_at": now}
        if sent:
            follow = t.one("SELECT sent_json FROM pull_requests WHERE task_id = ?", (task_id,))
            t.update("pull_requests", task_id, {"since": sent["since"], "sent_json": json_dumps(
                json.loads(follow["sent_json"]) + sent["keys"])}, key="task_id")
            pr = json.loads(task["pr_json"])
            changes["pr_json"] = json_dumps({**pr, "fixAttempts": pr["fixAttempts"] + 1,
                                             "needsYou": None})
        t.insert("revisions", {"task_id": task_id, "feedback": feedback, "created_at": now})
        add_activity(t, task, "revision", now)
        task = t.update("tasks", task_id, changes)
        notice.queue(t, task)
        return task


def reorder_rows(project_id: int, task_ids: list[int]) -> list[dict] | None:
    """Queue the tasks in exactly this order: queue_position = index, and walking from the
    end each priority is raised to at least the next one's.  Returns the changed tasks."""
    with tx() as t:
        if not t.exists("projects", project_id):
            return None
        rows = {r["id"]: r for r in t.all(
            f"SELECT id, priority FROM tasks WHERE project_id = ? AND id IN "
            f"({_marks(task_ids)})", (project_id, *task_ids))}
        if missing := [i for i in task_ids if i not in rows]:
            raise Invalid(f"task {missing[0]} is not a task of project {project_id}", "taskIds")
        priority, now = 0, now_iso()
        for position, task_id in reversed(list(enumerate(task_ids))):
            priority = max(rows[task_id]["priority"], priority)
            t.update("tasks", task_id, {"queue_position": position, "priority": priority,
                                        "updated_at": now})
        return t.all(f"SELECT * FROM tasks WHERE id IN ({_marks(task_ids)})", task_ids)


def task_event_rows(task_id: int, limit: int) -> list[dict] | None:
    """The newest `limit` structured events of a task, oldest first: the agent's raw lines,
    its status changes (kind status), the agent's and the person's messages (message),
    stop checks (stop_check) and tool approvals and questions (approval)."""
    with read() as t:
        if not t.exists("tasks", task_id):
            return None
        rows = t.all(
            "SELECT id, run_id, seq, created_at, kind, raw, 0 AS source FROM task_events "
            "WHERE task_id = ? UNION ALL SELECT id, NULL, 0, created_at, 'status', "
            "json_object('from', from_status, 'to', to_status), 1 FROM activity "
            "WHERE task_id = ? AND event = 'status_change' UNION ALL SELECT id, run_id, 0, "
            "created_at, CASE kind WHEN 'text' THEN 'message' ELSE kind END, CASE kind WHEN "
            "'stop_check' THEN json_object('text', message) ELSE json_object('author', "
            "coalesce(author, 'agent'), 'text', message) END, 2 FROM logs "
            "WHERE task_id = ? AND kind IN ('text', 'message', 'stop_check') UNION ALL "
            "SELECT id, run_id, 0, created_at, 'approval', json_object('kind', kind, "
            "'toolName', tool_name, 'input', json(input_json), 'status', status, 'decidedBy', "
            "decided_by, 'message', message), 3 FROM approvals WHERE task_id = ? "
            "ORDER BY created_at DESC, source DESC, id DESC LIMIT ?",
            (task_id, task_id, task_id, task_id, limit))
    rows.reverse()
    return rows


def last_move_row(task_id: int) -> int | None:
    """The id of the task's latest status change, to notice a move."""
    with read() as t:
        return t.value("SELECT MAX(id) FROM activity WHERE task_id = ? AND event = "
                       "'status_change'", (task_id,))


def verifier_rejections(task_id: int) -> int:
    with read() as t:
        return t.value("SELECT COUNT(*) FROM runs WHERE task_id = ? AND kind = 'verifier' "
                       "AND status = 'rejected'", (task_id,))


# =============================================================================
# STORE: THE REST
# =============================================================================
# The reads and writes of the agent channel, attachments, resources, push, the source
# host, plans, settings, sessions and statistics (see STORE).

# --- the agent channel: approvals, messages, review comments ------------------

def insert_approval_row(values: dict, notice: Notice) -> tuple[dict, dict] | None:
    """Store an agent's request and count it on its task; queue task:needs_input when it is
    the task's first pending one.  (approval, task), None if the task is gone."""
    with tx() as t:
        if not t.exists("tasks", values["task_id"]):
            return None
        approval = t.insert_row("approvals", {**values, "created_at": now_iso()})
        task = _count_pending(t, values["task_id"])
        if approval["status"] == "pending" and task["pending_approvals"] == 1:
            notice.queue(t, task)
        return approval, task


def decide_approval_row(approval_id: int, changes: dict) -> tuple[dict, dict | None] | None:
    """Decide a pending approval, once: (approval, task); (approval, None) when it was no
    longer pending (the approval unchanged); None when there is no such approval."""
    with tx() as t:
        approval = t.one("UPDATE approvals SET status = ?, decided_by = ?, message = ?, "
                         "decided_at = ? WHERE id = ? AND status = 'pending' RETURNING *",
                         (changes["status"], changes["decided_by"], changes.get("message"),
                          now_iso(), approval_id))
        if approval is None:
            row = t.one("SELECT * FROM approvals WHERE id = ?", (approval_id,))
            return None if row is None else (row, None)
        return approval, _count_pending(t, approval["task_id"])


def expire_approval_rows(run_id: int | None = None) -> list[tuple[dict, dict]]:
    """Mark the pending approvals of a run (default: of every run) expired; (approval,
    task) of each."""
    with tx() as t:
        rows = t.all("UPDATE approvals SET status = 'expired', decided_at = ? WHERE status = "
                     "'pending' AND (? IS NULL OR run_id = ?) RETURNING *",
                     (now_iso(), run_id, run_id))
        tasks = {r["task_id"]: _count_pending(t, r["task_id"]) for r in rows}
        return [(r, tasks[r["task_id"]]) for r in rows]


def _count_pending(t: Tx, task_id: int) -> dict:
    return t.update("tasks", task_id, {"pending_approvals": t.value(
        "SELECT COUNT(*) FROM approvals WHERE task_id = ? AND status = 'pending'", (task_id,)),
        "updated_at": now_iso()})


def approval_rows(task_id: int | None = None, status: str | None = None) -> list[dict] | None:
    """A task's approvals (None if no such task), or every task's; oldest first."""
    with read() as t:
        if task_id is not None and not t.exists("tasks", task_id):
            return None
        return t.all("SELECT * FROM approvals WHERE (? IS NULL OR task_id = ?) AND "
                     "(? IS NULL OR status = ?) ORDER BY id",
                     (task_id, task_id, status, status))


def insert_message_row(values: dict, comments=()) -> dict | None:
    """Store a message (and the review comments it carries); None if the task is gone."""
    with tx() as t:
        if not t.exists("tasks", values["task_id"]):
            return None
        now = now_iso()
        message = t.insert_row("messages", {**values, "created_at": now})
        for comment in comments:
            t.insert("review_comments", {**comment, "task_id": values["task_id"],
                                         "message_id": message["id"], "created_at": now})
        return message


def message_sent_row(message_id: int, run_id: int | None) -> dict | None:
    with tx() as t:
        return t.update("messages", message_id, {"state": "sent", "run_id": run_id})


def queued_message_rows(task_id: int) -> list[dict]:
    with read() as t:
        return t.all("SELECT * FROM messages WHERE task_id = ? AND state = 'queued' "
                     "ORDER BY id", (task_id,))


# --- attachments -------------------------------------------------------------

def insert_attachment_row(values: dict) -> dict | None:
    with tx() as t:
        if not t.exists("tasks", values["task_id"]):
            return None
        return t.insert_row("attachments", {**values, "created_at": now_iso()})


def delete_attachment_row(attachment_id: int) -> dict | None:
    with tx() as t:
        return t.one("DELETE FROM attachments WHERE id = ? RETURNING *", (attachment_id,))


# --- per-project resources: templates, snippets, webhooks ---------------------

def insert_resource_row(table: str, project_id: int, values: dict) -> dict | None:
    with tx() as t:
        if not t.exists("projects", project_id):
            return None
        now = now_iso()
        row_id = t[table].insert({**values, "project_id": project_id, "created_at": now,
                                  "updated_at": now})
        return t[table].find_one(id=row_id)


def update_resource_row(table: str, project_id: int, row_id: int, changes: dict) \
        -> dict | None:
    with tx() as t:
        if not t[table].update({**changes, "updated_at": now_iso(), "id": row_id,
                                "project_id": project_id}, ["id", "project_id"]):
            return None
        return t[table].find_one(id=row_id)


def delete_resource_row(table: str, project_id: int, row_id: int) -> bool:
    with tx() as t:
        return t[table].delete(id=row_id, project_id=project_id)


def queue_notice(notice: Notice, task_id: int) -> None:
    """Queue a notice that comes with no change of its own (none if the task is gone)."""
    with tx() as t:
        if (task := t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))) is not None:
            notice.queue(t, task)


def next_notice(hook_id: int, after: int) -> tuple[int, tuple[dict, dict, dict]] | None:
    """The webhook's oldest queued notice after outbox id `after`: (its id, (the webhook as
    it is now, its project, the notice)); None when there is none."""
    with tx() as t:
        row = t.one("SELECT id, moment_json FROM webhook_outbox WHERE webhook_id = ? AND "
                    "id > ? ORDER BY id LIMIT 1", (hook_id, after))
        if row is None:
            return None
        hook = t.one("SELECT * FROM webhooks WHERE id = ?", (hook_id,))
        if hook is None:  # deleted by a program that leaves foreign keys off
            t.execute("DELETE FROM webhook_outbox WHERE webhook_id = ?", (hook_id,))
            return None
        project = t.one("SELECT id, name, slug FROM projects WHERE id = ?", (hook["project_id"],))
        return row["id"], (hook, project, json.loads(row["moment_json"]))


def delete_outbox_row(table: str, outbox_id: int) -> None:
    with tx() as t:
        t.execute(f"DELETE FROM {table} WHERE id = ?", (outbox_id,))


def outbox_owners(table: str, column: str) -> list[int]:
    """The webhooks or devices with messages waiting in an outbox (at start-up: the ones a
    stop left behind)."""
    with read() as t:
        return [r[0] for r in t.execute(f"SELECT DISTINCT {column} FROM {table} "
                                        f"ORDER BY {column}")]


def webhook_test_rows(project_id: int, webhook_id: int) -> tuple[dict, dict, dict | None] | None:
    """A webhook (secret included), its project and the project's latest task, for the
    test route; None when there is no such webhook."""
    with read() as t:
        hook = t.one("SELECT * FROM webhooks WHERE id = ? AND project_id = ?",
                     (webhook_id, project_id))
        if hook is None:
            return None
        project = t.one("SELECT id, name, slug FROM projects WHERE id = ?", (project_id,))
        task = t.one("SELECT * FROM tasks WHERE project_id = ? ORDER BY updated_at DESC, id "
                     "DESC LIMIT 1", (project_id,))
        return hook, project, task


def insert_delivery_row(values: dict, keep: int) -> dict | None:
    """Record a delivery attempt and forget all but the newest `keep` of its webhook;
    None when the webhook is gone meanwhile."""
    with tx() as t:
        if not t.exists("webhooks", values["webhook_id"]):
            return None
        row_id = t.insert("webhook_deliveries", values)
        _keep_newest(t, "webhook_deliveries", "webhook_id", values["webhook_id"], keep)
        return t.one("SELECT * FROM webhook_deliveries WHERE id = ?", (row_id,))


# --- push: devices, their outbox, action tokens, the inbox (design §13) -------------

def upsert_push_row(values: dict) -> dict:
    """Add a device, or replace the one with the same endpoint (a browser subscribing
    again, or the board saving its name and events); its id stays."""
    values = {**values, "created_at": now_iso()}
    with tx() as t:
        return t.one(_insert_sql("push_subscriptions", values) + " ON CONFLICT(endpoint) DO "
                     "UPDATE SET p256dh = excluded.p256dh, auth = excluded.auth, name = "
                     "excluded.name, events_json = excluded.events_json RETURNING *",
                     tuple(values.values()))


def delete_push_row(device_id: int) -> dict | None:
    """Forget a device (its waiting messages go with it); None if there was none."""
    with tx() as t:
        return t.one("DELETE FROM push_subscriptions WHERE id = ? RETURNING *", (device_id,))


def record_push_row(device_id: int, status: int | None, error: str | None) -> None:
    with tx() as t:
        t.execute("UPDATE push_subscriptions SET last_sent_at = ?, last_status = ?, "
                  "last_error = ? WHERE id = ?", (now_iso(), status, error, device_id))


def queue_push_rows(event: str, moment: dict) -> list[int]:
    """Queue a message for each device that wants the event; the ids of those devices."""
    with read() as t:  # most boards have no device: no write then
        if t.value("SELECT 1 FROM push_subscriptions LIMIT 1") is None:
            return []
    with tx() as t:
        devices = [r[0] for r in t.execute(
            "SELECT id FROM push_subscriptions WHERE EXISTS (SELECT 1 FROM "
            "json_each(events_json) WHERE value = ?) ORDER BY id", (event,))]
        if devices and "projectId" in moment:
            moment = {**moment, "projectName": t.value(
                "SELECT name FROM projects WHERE id = ?", (moment["projectId"],))}
        text, now = json_dumps(moment), now_iso()
        for device in devices:
            t.insert("push_outbox", {"subscription_id": device, "moment_json": text,
                                     "created_at": now})
            _keep_newest(t, "push_outbox", "subscription_id", device, PUSH_QUEUE_KEPT)
        return devices


def next_push(device_id: int, after: int) -> tuple[int, tuple[dict, dict]] | None:
    """The device's oldest queued message after outbox id `after`: (its id, (the device,
    the message)); None when there is none (or the device is gone)."""
    with read() as t:
        row = t.one("SELECT o.id AS outbox_id, o.moment_json, s.* FROM push_outbox o JOIN "
                    "push_subscriptions s ON s.id = o.subscription_id WHERE "
                    "o.subscription_id = ? AND o.id > ? ORDER BY o.id LIMIT 1",
                    (device_id, after))
    if row is None:
        return None
    return row.pop("outbox_id"), (row, json.loads(row.pop("moment_json")))


def insert_action_row(token_hash: str, approval_id: int, minutes: int) -> None:
    """Keep an action token's hash for the approval (and forget long-expired ones)."""
    now = utc_now()
    with tx() as t:
        t.execute("DELETE FROM push_actions WHERE expires_at < ?",
                  (iso(now - dt.timedelta(days=1)),))
        t.insert("push_actions", {"token_hash": token_hash, "approval_id": approval_id,
                                  "expires_at": iso(now + dt.timedelta(minutes=minutes))})


def spend_action_row(token_hash: str, approval_id: int) -> bool | None:
    """Use an action token once: False when it is used, expired or another approval's (it
    is then left as it was), None when the board never issued it."""
    now = now_iso()
    with tx() as t:
        if t.execute("UPDATE push_actions SET used_at = ? WHERE token_hash = ? AND "
                     "approval_id = ? AND used_at IS NULL AND expires_at > ?",
                     (now, token_hash, approval_id, now)).rowcount == 1:
            return True
        return False if t.value("SELECT 1 FROM push_actions WHERE token_hash = ?",
                                (token_hash,)) else None


#: Tasks whose pull request waits for a person (design §16).
PR_NEEDS_YOU = "pr_json IS NOT NULL AND json_extract(pr_json, '$.needsYou') IS NOT NULL " \
    "AND json_extract(pr_json, '$.state') = 'open'"


def inbox_count() -> int:
    with read() as t:
        return t.value("SELECT (SELECT COUNT(*) FROM approvals WHERE status = 'pending') + "
                       "(SELECT COUNT(*) FROM tasks WHERE status = 'testing') + "
                       f"(SELECT COUNT(*) FROM tasks WHERE {PR_NEEDS_YOU})")


def inbox_rows() -> tuple[list[dict], list[dict]]:
    """What waits for a person in every project: the pending approvals (with their task
    and project), the tasks in testing (with when they got there) and those whose pull
    request waits for a person (`pr` set)."""
    with read() as t:
        approvals = t.all("SELECT a.*, k.task_key, k.title AS task_title, p.name AS "
                          "project_name FROM approvals a JOIN tasks k ON k.id = a.task_id "
                          "JOIN projects p ON p.id = a.project_id WHERE a.status = 'pending'")
        reviews = t.all("SELECT k.id, k.project_id, k.task_key, k.title, p.name AS "
                        "project_name, COALESCE((SELECT MAX(created_at) FROM activity WHERE "
                        "task_id = k.id AND to_status = 'testing'), k.updated_at) AS at FROM "
                        "tasks k JOIN projects p ON p.id = k.project_id "
                        "WHERE k.status = 'testing'")
        reviews += t.all("SELECT k.id, k.project_id, k.task_key, k.title, p.name AS "
                         "project_name, k.updated_at AS at, k.pr_json AS pr FROM tasks k "
                         f"JOIN projects p ON p.id = k.project_id WHERE {PR_NEEDS_YOU}")
        return approvals, reviews


# --- source host -----------------------------------------------------------------

def insert_issue_tasks(project_id: int, issues: list[dict], defaults: dict,
                       notice: Notice) -> list[dict]:
    """Import the issues never imported before as backlog tasks (the queue leaves them
    alone until a person moves or edits them), each with its notice; return the new task
    rows."""
    with tx() as t:
        rows = []
        for issue in issues:
            if t.value("SELECT 1 FROM imported_issues WHERE project_id = ? AND number = ?",
                       (project_id, issue["issue_number"])):
                continue
            inserted = _insert_task(t, project_id, {**issue, "source": "git_host"}, defaults,
                                    notice)
            if inserted is None:
                return []
            rows.append(inserted[0])
            t.insert("imported_issues", {"project_id": project_id,
                                         "number": issue["issue_number"],
                                         "task_id": inserted[0]["id"],
                                         "imported_at": now_iso()})
        return rows


def followed_pr_rows() -> list[dict]:
    """The pull requests the board follows (open, not given up on), each with its task's
    status and project, and the project's poll interval, attempt limit and base branch."""
    with read() as t:
        return t.all("SELECT r.*, k.pr_json, k.status, k.project_id, "
                     "p.pr_poll_seconds, p.pr_fix_max_attempts, p.pr_base_branch, "
                     "p.pr_trusted_authors_json FROM "
                     "pull_requests r JOIN tasks k ON k.id = r.task_id JOIN projects p ON "
                     "p.id = k.project_id WHERE json_extract(k.pr_json, '$.state') = 'open' "
                     "AND json_extract(k.pr_json, '$.error') IS NULL ORDER BY r.task_id")


def add_posted_pr_row(task_id: int, comment_id: int) -> None:
    """Keep the id of a comment the board posted on the task's PR (never read as a
    person's)."""
    with tx() as t:
        t.execute("UPDATE pull_requests SET posted_json = json_insert(posted_json, '$[#]', ?) "
                  "WHERE task_id = ?", (comment_id, task_id))


def release_pr_row(task_id: int, key: str) -> None:
    """A person sent a held review or comment of the task's PR back: it counts as trusted."""
    with tx() as t:
        t.execute("UPDATE pull_requests SET released_json = json_insert(released_json, "
                  "'$[#]', ?) WHERE task_id = ?", (key, task_id))


def update_pr_row(task_id: int, shown: dict, kept: dict | None = None,
                  event: str | None = None, notice: Notice | None = None) -> dict | None:
    """Change the task's pull request: `shown` fields of its pr (the API's), `kept` columns
    of pull_requests (made when absent, with repo and since), an activity `event` and a
    notice, in one transaction; the task, None if absent."""
    with tx() as t:
        task = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if task is None:
            return None
        now = now_iso()
        pr = json.loads(task["pr_json"] or "{}")
        if {**pr, **shown} != pr:
            pr.update(shown)
            task = t.update("tasks", task_id, {"pr_json": json_dumps(pr), "pr_url": pr["url"],
                                               "updated_at": now})
        if kept and not t.update("pull_requests", task_id, kept, key="task_id"):
            t.insert("pull_requests", {"task_id": task_id, **kept})
        if event:
            add_activity(t, task, event, now)
        if notice is not None:
            notice.queue(t, task)
        return task


# --- planning ------------------------------------------------------------------

def insert_plan_row(values: dict) -> dict | None:
    with tx() as t:
        if not t.exists("projects", values["project_id"]):
            return None
        return t.insert_row("plans", values)


def update_plan_row(plan_id: str, changes: dict) -> None:
    with tx() as t:
        t.update("plans", plan_id, changes, key="plan_id")


def insert_plan_tasks(plan_id: str, project_id: int, tasks: list[dict],
                      edges: list[tuple[int, int]], defaults: dict, changes: dict,
                      notice: Notice) -> tuple[list[dict], bool] | None:
    """Write a plan's tasks with their notices and its edges (index pairs into tasks,
    on_success) and finish the plan row, all in one transaction; return the task rows and
    whether the project queues automatically, None when the project is gone."""
    with tx() as t:
        rows, auto_queue = [], False
        for values in tasks:
            inserted = _insert_task(t, project_id, values, defaults, notice)
            if inserted is None:
                return None
            rows.append(inserted[0])
            auto_queue = inserted[1]
        now = now_iso()
        for parent, child in edges:
            t.execute("INSERT INTO task_dependencies (from_id, to_id, condition_type, "
                      "created_at) VALUES (?, ?, 'on_success', ?)",
                      (rows[parent]["id"], rows[child]["id"], now))
        t.update("plans", plan_id, {**changes, "tasks_json": json_dumps(
            [plan_task_view(r) for r in rows])}, key="plan_id")
        return rows, bool(auto_queue)


def plan_task_view(row: dict) -> dict:
    """A task as plan:completed and plan/status list it."""
    return {"id": row["id"], "title": row["title"], "task_type": row["task_type"],
            "task_key": row["task_key"]}


# --- settings ------------------------------------------------------------------

def settings_rows() -> dict:
    with read() as t:  # SQL: read at every start (see running_rows)
        return {r["name"]: json.loads(r["value_json"])
                for r in t.all("SELECT * FROM settings ORDER BY name")}


def upsert_settings_rows(values: dict) -> dict:
    with tx() as t:
        for name, value in values.items():
            t["settings"].upsert({"name": name, "value_json": json_dumps(value)}, ["name"])
        return {r["name"]: json.loads(r["value_json"]) for r in t["settings"].all()}


# --- previews (design §21) -------------------------------------------------------
# A running preview's process, kept so that a board killed with -9 finds it at its next
# start (as a run's pid and proc_start): what is kept is only what kills it.

def insert_preview_row(task_id: int, n: int | None, pid: int, started: int | None) -> int:
    with tx() as t:
        return t.insert("previews", {"task_id": task_id, "attempt_n": n, "pid": pid,
                                     "proc_start": started, "started_at": now_iso()})


def delete_preview_rows(row_id: int | None = None) -> list[dict]:
    """Forget one preview's process (row_id), or every one; the rows forgotten."""
    with tx() as t:
        where, params = ("WHERE id = ?", (row_id,)) if row_id is not None else ("", ())
        return t.all(f"DELETE FROM previews {where} RETURNING *", params)


# --- sessions --------------------------------------------------------------------
# A login's cookie holds a random id; the table keeps its hash, and the hash of the token it
# was made with, so a new token ends the sessions of the old one.

def session_rows(token_hash: str) -> dict[str, str]:
    """The live sessions of this token, {id hash: expires_at}; the rest are deleted."""
    with tx() as t:
        t.execute("DELETE FROM sessions WHERE token_hash != ? OR expires_at <= ?",
                  (token_hash, now_iso()))
        return {r["id_hash"]: r["expires_at"] for r in t.all("SELECT * FROM sessions")}


def insert_session_row(id_hash: str, token_hash: str, expires_at: str) -> None:
    with tx() as t:
        t.insert("sessions", {"id_hash": id_hash, "token_hash": token_hash,
                              "created_at": now_iso(), "expires_at": expires_at})


def delete_session_row(id_hash: str) -> None:
    with tx() as t:
        t.execute("DELETE FROM sessions WHERE id_hash = ?", (id_hash,))


# --- statistics ------------------------------------------------------------------

def db_check() -> str:
    """"ok", or what is wrong with the database (health must always answer)."""
    try:
        with read() as t:
            t.value("SELECT 1")
    except (sqlite3.Error, OSError) as exc:
        return f"error: {exc}"
    return "ok"


def project_stats_rows(project_id: int, day_start: str) -> dict | None:
    def counts(column):
        return {r["k"]: r["n"] for r in t.all(
            f"SELECT {column} AS k, COUNT(*) AS n FROM tasks WHERE project_id = ? "
            f"GROUP BY {column}", (project_id,))}
    with read() as t:
        if not t.exists("projects", project_id):
            return None
        return {
            "status": counts("status"), "type": counts("task_type"),
            "priority": counts("priority"),
            "avg": t.value("SELECT AVG(work_duration_ms) FROM tasks WHERE project_id = ? "
                           "AND status = 'done'", (project_id,)),
            "today": t.value("SELECT COUNT(*) FROM tasks WHERE project_id = ? AND "
                             "status = 'done' AND completed_at >= ?", (project_id, day_start)),
            "usage": t.one("SELECT SUM(input_tokens) AS input, SUM(output_tokens) AS output, "
                           "SUM(cost) AS cost, COUNT(*) AS runs FROM runs WHERE project_id = ?",
                           (project_id,))}


def activity_rows(project_id: int, limit: int, offset: int) -> list[dict] | None:
    """Skip the `offset` newest entries, take the next `limit`, oldest first."""
    with read() as t:
        if not t.exists("projects", project_id):
            return None
        rows = t.all("SELECT * FROM activity WHERE project_id = ? ORDER BY id DESC "
                     "LIMIT ? OFFSET ?", (project_id, limit, offset))
    rows.reverse()
    return rows


#: Every agent's usage: task and verifier runs, and planning sessions, once they ended
#: (their usage is written when they end; running ones have none yet).
USAGE_SOURCE = (
    "(SELECT task_id, agent, model, started_at, input_tokens, output_tokens, "
    "cache_read_tokens, cache_creation_tokens, cost, cost_estimated FROM runs WHERE status != "
    f"'running' AND NOT simulated UNION ALL SELECT NULL, agent, {PLAN_TOKENS}, 0, 0, cost, "
    "cost_estimated FROM plans WHERE status != 'running' AND NOT simulated)")


def cost_since_row(since: str) -> float:
    with read() as t:
        return t.value(f"SELECT COALESCE(SUM(cost), 0) FROM {USAGE_SOURCE} "
                       "WHERE started_at >= ?", (since,))


def usage_rows(day_start: str) -> dict:
    """Token and cost totals of every agent (task, verifier, planner): overall, per model
    tier, per local day, today."""
    sums = ("SUM(input_tokens) AS input, SUM(output_tokens) AS output, "
            "SUM(cache_read_tokens) AS cache_read, SUM(cache_creation_tokens) AS "
            "cache_creation, SUM(cost) AS cost, MAX(cost_estimated AND cost > 0) AS estimated")
    reads = {
        "total": lambda t: t.one(f"SELECT COUNT(DISTINCT task_id) AS tasks, {sums} "
                                 f"FROM {USAGE_SOURCE}"),
        "models": lambda t: t.all(f"SELECT model, COUNT(DISTINCT task_id) AS tasks, {sums} "
                                  f"FROM {USAGE_SOURCE} GROUP BY model"),
        "agents": lambda t: t.all(f"SELECT agent, COUNT(DISTINCT task_id) AS tasks, {sums} "
                                  f"FROM {USAGE_SOURCE} GROUP BY agent"),
        "days": lambda t: t.all(f"SELECT date(started_at, 'localtime') AS day, {sums} "
                                f"FROM {USAGE_SOURCE} GROUP BY day ORDER BY day"),
        "today": lambda t: t.value(f"SELECT SUM(cost) FROM {USAGE_SOURCE} "
                                   "WHERE started_at >= ?", (day_start,)),
    }
    with read() as t:  # each sum reads every run: ~80 ms at 50,000 tasks, so they are kept
        version = (t.value("SELECT version FROM usage_version"), day_start)
        return runtime.usage.get(version) or runtime.usage.put(version, t.in_thread(
            lambda t: {name: r(t) for name, r in reads.items()}))


# --- outside clients: personal tokens, schedules (design §19) -----------------------

def insert_token_row(values: dict) -> dict | None:
    """Store a personal token; None when its name is taken."""
    with tx() as t:
        if t.value("SELECT 1 FROM tokens WHERE name = ?", (values["name"],)):
            return None
        return t.insert_row("tokens", {**values, "created_at": now_iso()})


def delete_token_row(token_id: int) -> dict | None:
    with tx() as t:
        return t.one("DELETE FROM tokens WHERE id = ? RETURNING *", (token_id,))


def token_used_row(token_id: int, at: str) -> None:
    with tx() as t:
        t.execute("UPDATE tokens SET last_used_at = ? WHERE id = ?", (at, token_id))


def insert_schedule_row(values: dict) -> dict | None:
    """Store a schedule; None when its project is gone."""
    with tx() as t:
        if not t.exists("projects", values["project_id"]):
            return None
        now = now_iso()
        return t.insert_row("schedules", {**values, "created_at": now, "updated_at": now})


def update_schedule_row(schedule_id: int, changes: dict, notice: Notice | None = None,
                        task_id: int | None = None) -> dict | None:
    """Change a schedule; with a notice (a fire), queue it with the task it made or sent to."""
    with tx() as t:
        row = t.update("schedules", schedule_id, {**changes, "updated_at": now_iso()})
        task = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,)) if task_id else None
        if notice is not None and task is not None:
            notice.queue(t, task)
        return row


def delete_schedule_row(schedule_id: int) -> dict | None:
    with tx() as t:
        return t.one("DELETE FROM schedules WHERE id = ? RETURNING *", (schedule_id,))


def due_schedule_rows(now: str) -> tuple[list[dict], str | None]:
    """The enabled schedules due by `now`, and the next fire of any enabled one after."""
    with read() as t:
        return (t.all("SELECT * FROM schedules WHERE enabled = 1 AND next_at <= ? ORDER BY "
                      "next_at, id", (now,)),
                t.value("SELECT MIN(next_at) FROM schedules WHERE enabled = 1 AND next_at > ?",
                        (now,)))


# =============================================================================
# EVENTS
# =============================================================================

class Message:
    """A published event with its WebSocket frame, encoded once for every client."""
    __slots__ = ("seq", "event", "project_id", "task_id", "frame")

    def __init__(self, seq, event: str, data: dict | RawJson | None = None, project_id=None,
                 task_id=None):
        self.seq, self.event, self.project_id = seq, event, project_id
        self.task_id = data["taskId"] if task_id is None and event == "task:log" else task_id
        if seq is None:
            payload = json_dumps({"event": event})
        elif isinstance(data, RawJson):
            payload = f'{{"seq":{seq},"event":{json_dumps(event)},"data":{data}}}'
        else:
            payload = json_dumps({"seq": seq, "event": event, "data": data})
        payload = payload.encode()
        # what geventwebsocket's send() would write: a final text frame, unmasked
        self.frame = Header.encode_header(True, WebSocket.OPCODE_TEXT, b"", len(payload),
                                          0) + payload


PING = Message(None, "ping")  # no seq: clients ignore it


class Subscriber:
    """One /ws connection's view of the event stream: its filters and a cursor into the
    bus's buffer, so that a client that stops reading costs its place, not a copy."""

    def __init__(self, bus, cursor: int, project_id=None, logs=(), credential=None,
                 unheard=frozenset()):
        self.bus, self.cursor = bus, cursor  # the seq of the next message it may be sent
        self.project_id = project_id
        self.all_logs = "all" in logs
        self.log_tasks = {int(t) for t in logs if t != "all"}
        # who opened it (("token", id), ("session", its hash); None: the board's token) and
        # the events that credential may not hear (the /ws route's credential_events())
        self.credential, self.unheard = credential, unheard
        self.pending = []  # sent before the buffer's messages: a resync
        self.ready = gevent.event.Event()  # set when there may be something to send
        self.closed = False
        self.ended = None  # why its credential ended: the connection closes saying so
        self.abort = None  # ends the connection at once (set by the /ws route)

    def wants(self, message: Message) -> bool:
        if message.event in self.unheard:
            return False
        if self.project_id is not None and message.project_id is not None \
                and message.project_id != self.project_id:
            return False
        if message.event == "task:log":
            return self.all_logs or message.task_id in self.log_tasks
        return True

    def get(self, timeout) -> list[Message] | None:
        """The messages due, in order: [PING] after `timeout` idle seconds, None at the end."""
        while True:
            messages, self.pending = self.pending, []
            if self.cursor is not None:
                messages += self.bus.since(self)
            if messages:
                return messages
            if self.closed:
                return None
            self.ready.clear()
            if not self.ready.wait(timeout):
                return [PING]

    def close(self) -> None:
        """End the connection once what is due has been sent."""
        self.closed = True
        self.ready.set()

    def resync(self) -> None:
        """Send `resync` next, instead of what it has not been sent, then end."""
        self.pending, self.cursor = [self.bus.resync_message()], None
        self.close()

    def end(self, why: str) -> None:
        """Its credential ended (revoked, expired, logged out): nothing more is sent, and the
        connection closes with WS_CREDENTIAL_ENDED and `why`."""
        self.pending, self.cursor, self.ended = [], None, why
        self.close()


class EventBus:
    """Stamps events with a strictly increasing seq (from boot ms x 1000) and keeps the
    latest in one buffer, bounded in count and bytes, that ?since= replays from and every
    client is sent from at its own cursor. A client the buffer has moved past gets resync
    and is dropped."""

    def __init__(self):
        self.seq = self.first_seq = int(time.time() * 1000) * 1000
        self.buffer, self.head = [], 0  # the kept messages are buffer[head:], oldest first
        self.buffer_size, self.buffer_bytes = EVENT_BUFFER_SIZE, EVENT_BUFFER_BYTES
        self.buffered = 0  # bytes of the frames kept
        self.subscribers = set()

    def kept(self) -> list[Message]:
        return self.buffer[self.head:]

    def oldest(self) -> int:
        """The seq of the oldest message kept (the next seq when none is)."""
        return self.buffer[self.head].seq if self.head < len(self.buffer) else self.seq + 1

    def publish(self, event: str, data: dict | RawJson, project_id=None, task_id=None) \
            -> Message:
        """Send an event to every interested client.  Call after the commit.  data may be
        JSON text already (RawJson); a task:log then names its task_id."""
        self.seq += 1
        message = Message(self.seq, event, data, project_id, task_id)
        self.buffer.append(message)
        self.buffered += len(message.frame)
        buffer = self.buffer
        while len(buffer) - self.head > 1 and (len(buffer) - self.head > self.buffer_size
                                               or self.buffered > self.buffer_bytes):
            self.buffered -= len(buffer[self.head].frame)
            buffer[self.head] = None  # NOTE: the frame is freed now, the slot later
            self.head += 1
        if self.head > 1024 and self.head * 2 > len(buffer):
            del buffer[:self.head]
            self.head = 0
        oldest = buffer[self.head].seq
        for sub in list(self.subscribers):
            if sub.cursor is not None and sub.cursor < oldest:
                self._drop(sub)
            elif sub.wants(message):
                sub.ready.set()
        return message

    def since(self, sub: Subscriber) -> list[Message]:
        """The kept messages sub wants from its cursor on; its cursor moves past them."""
        start = sub.cursor - self.oldest()
        if start < 0:  # it fell behind (a drop sees to it first)
            sub.resync()
            return []
        sub.cursor = self.seq + 1
        return [m for m in self.buffer[self.head + start:] if sub.wants(m)]

    def subscribe(self, project_id=None, logs=(), since=None, credential=None,
                  unheard=frozenset()) -> Subscriber:
        """A subscriber sent what follows `since` first (or resync if that is gone), then
        what is published (but the `unheard` events: see Subscriber)."""
        sub = Subscriber(self, self.seq + 1, project_id, logs, credential, unheard)
        if since is not None:
            if since < self.first_seq or since > self.seq or since + 1 < self.oldest():
                sub.pending = [self.resync_message()]
            else:
                sub.cursor = since + 1
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def end(self, credential: tuple, why: str) -> None:
        """A credential ended (a token revoked, a session logged out): the connections it
        opened close (Subscriber.end)."""
        for sub in list(self.subscribers):
            if sub.credential == credential:
                sub.end(why)

    def resync_message(self) -> Message:
        return Message(self.seq, "resync", {})

    def _drop(self, sub: Subscriber) -> None:
        """A client fell too far behind: send it resync, then close it."""
        self.subscribers.discard(sub)
        sub.resync()
        if sub.abort is not None:  # its writer may be stuck on a client that stopped reading
            gevent.spawn_later(WS_DROP_GRACE_SECONDS, sub.abort)


class LogWriter(Worker):
    """Buffers agent log lines and writes them in batches, at most every `interval` per
    task, publishing one task:log per batch; big batches go in chunks, in order."""

    #: Rows (log entries plus raw lines) written per transaction before yielding.
    CHUNK_ROWS = 1000
    #: At most this many unwritten lines are kept per task while the database cannot be
    #: written (a full disk, a lock held by another program).
    MAX_PENDING_ROWS = 100_000

    def __init__(self, interval=LOG_FLUSH_SECONDS):
        super().__init__("log writer", first=None, grace=5.0)
        self.interval = interval
        self.pending = collections.defaultdict(list)
        self.events = collections.defaultdict(list)
        self.last_flush = {}
        self._flushing = threading.Lock()  # one flush at a time keeps ids in line order

    def append(self, task_id: int, kind: str, message: str, run_id=None, tool=None,
               is_error=None, duration_ms=None, at=None, author=None) -> None:
        """Buffer a log entry, stamped `at` (an ISO time; default now)."""
        self._nudge(task_id)
        self.pending[task_id].append({
            "task_id": task_id, "run_id": run_id, "created_at": at or now_iso(), "kind": kind,
            "message": message, "tool": tool,
            "is_error": None if is_error is None else int(bool(is_error)),
            "duration_ms": duration_ms, "author": author})

    def append_raw(self, task_id: int, run_id: int, seq: int, kind: str, raw: str,
                   at=None) -> None:
        """Keep one raw agent line for the structured event log."""
        self._nudge(task_id)
        self.events[task_id].append({"task_id": task_id, "run_id": run_id, "seq": seq,
                                     "created_at": at or now_iso(), "kind": kind, "raw": raw})

    def flush(self, task_ids=None) -> None:
        """Write each task's entries and raw lines, then publish its entries (default: all
        tasks), one task after the other."""
        with self._flushing:
            if task_ids is None:
                task_ids = set(self.pending) | set(self.events)
            now = time.monotonic()
            for task_id in task_ids:
                self.last_flush[task_id] = now
                self._write(task_id, self.pending.pop(task_id, []), self.events.pop(task_id, []))

    def _write(self, task_id, entries, lines) -> None:
        """A task's entries, then its raw lines, CHUNK_ROWS to a transaction, in order."""
        written, project_id = [], None  # JSON arrays of the entries written, per chunk
        while entries or lines:
            chunk, entries = entries[:self.CHUNK_ROWS], entries[self.CHUNK_ROWS:]
            room = self.CHUNK_ROWS - len(chunk)
            raw, lines = lines[:room], lines[room:]
            try:
                array, projects = insert_log_rows(chunk, raw)
            except Exception:  # a full disk, a locked database: keep them for later
                self._requeue(task_id, chunk + entries, raw + lines)
                self._publish(task_id, project_id, written)
                raise
            if array is not None:
                written.append(array)
            project_id = projects.get(task_id, project_id)
            gevent.sleep(0)  # a waiting write (a person's answer) goes before the next chunk
        self._publish(task_id, project_id, written)

    def _publish(self, task_id, project_id, written: list[str]):
        """One task:log of the entries written, given as the JSON arrays of their chunks."""
        if written:
            entries = ",".join(array[1:-1] for array in written)
            runtime.events.publish("task:log", RawJson(
                f'{{"taskId":{task_id},"projectId":{json_dumps(project_id)},'
                f'"entries":[{entries}]}}'), project_id, task_id)

    def _requeue(self, task_id, entries, events):
        """Put unwritten lines back in front of what arrived meanwhile; beyond
        MAX_PENDING_ROWS a task keeps its newest lines and a note of how many it lost."""
        entries = entries + self.pending.pop(task_id, [])
        events = events + self.events.pop(task_id, [])
        if lost := max(0, len(entries) - self.MAX_PENDING_ROWS):
            entries = entries[lost:]
            entries.insert(0, {**entries[0], "kind": "system", "is_error": 1, "tool": None,
                               "duration_ms": None, "author": None,
                               "message": f"{lost} log lines were "
                               "lost: the database could not be written"})
        events = events[-self.MAX_PENDING_ROWS:]
        if entries:
            self.pending[task_id] = entries
        if events:
            self.events[task_id] = events

    def stop(self) -> None:
        super().stop()
        self.flush()

    def _nudge(self, task_id):
        """A task's first buffered line: the writer's next round is due when the task's is."""
        if task_id not in self.pending and task_id not in self.events:
            self.wake(self.last_flush.get(task_id, 0) + self.interval - time.monotonic())

    def step(self) -> float | None:
        """Write the tasks whose batch is due; the seconds until the next one is."""
        now = time.monotonic()
        due = [t for t in set(self.pending) | set(self.events)
               if now - self.last_flush.get(t, 0) >= self.interval]
        try:
            self.flush(due)
        except Exception:  # the writer must outlive one bad batch
            log.exception("log writer: flush failed")
        if len(self.last_flush) > 1000:  # forget tasks that went quiet
            self.last_flush = {t: at for t, at in self.last_flush.items()
                               if now - at < self.interval}
        now = time.monotonic()
        return min((self.last_flush.get(t, 0) + self.interval - now
                    for t in set(self.pending) | set(self.events)), default=None)


# =============================================================================
# AGENT OUTPUT
# =============================================================================
# What an agent prints, read: the stream parser, costs, how a run ended, usage limits
# and one adapter per CLI.

def cli_version(out: str) -> str | None:
    """The first stdout line that looks like a version ("2.1.197 (Claude Code)",
    "codex-cli 0.169.0"); None (unknown) when none does."""
    return next((line.strip() for line in out.splitlines() if VERSION_LINE.match(line.strip())),
                None)


#: Tool inputs worth showing in a tool call's one-line summary, by preference.
SUMMARY_KEYS = ("command", "file_path", "path", "pattern", "url", "query", "description",
                "prompt", "notebook_path")
#: The token counts a run keeps, in PRICES' order, and the CLI's name for each.
USAGE_KEYS = {"input": "input_tokens", "output": "output_tokens",
              "cache_read": "cache_read_input_tokens",
              "cache_creation": "cache_creation_input_tokens"}


def usd(tokens, prices) -> float:
    """What token counts cost at prices per million, both in USAGE_KEYS order."""
    return sum(map(operator.mul, tokens, prices)) / 1_000_000


def claude_prices(model: str) -> tuple | None:
    """The PRICES of the tier a Claude model's name belongs to ("claude-opus-4-8"), if any."""
    family = next((f for f in CLAUDE_FAMILIES if f in model), None)
    return PRICES[CLAUDE_FAMILIES[family]] if family else None


#: What an adapter's translate() puts among its events for "and keep this line as raw".
RAW_LINE = {"type": "raw"}


class StreamParser:
    """Turns stream-json lines into log entries and keeps the run's state (usage counted
    once per message.id; the result's totals win)."""

    def __init__(self, adapter=None):
        #: A non-Claude CLI's adapter: translates each line into Claude-shaped events.
        self.adapter = adapter
        #: USD per million tokens to estimate with (None: the tier's PRICES); a Claude run's
        #: are those of the model its messages name.
        self.prices = None
        #: The cost the CLI reported before its result (OpenCode's steps), if any.
        self.cost_so_far = None
        #: The simulated agent's run (design §2): it spends nothing, whatever it reports.
        self.simulated = False
        self.session_id = None
        self.last_type = "raw"
        self.tool_calls = 0
        self.texts = collections.deque(maxlen=20)  # the latest text blocks, for verdicts
        self.recent_tools = collections.deque(maxlen=5)
        self.files = set()
        self.root = None  # the repository root that file paths are made relative to
        self.result = None
        self.event = None  # the latest line as parsed (a dict), None when it was not one
        self.api_error = None
        #: When a usage limit the CLI hit lifts (epoch seconds; Claude's rate_limit_event)
        self.limit_resets = None
        #: The latest lines on stderr: Gemini's daily quota names its reset only there.
        self.stderr = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.denials = []
        self.usage = dict.fromkeys(USAGE_KEYS, 0)
        self._results_usage = dict.fromkeys(USAGE_KEYS, 0)  # the turns ended so far
        self.usage_changes = 0  # how often usage was added to: a cheap "has it changed"
        self._messages = 0  # assistant messages (by id), usage counted once each
        #: Their latest ids: the blocks of a message come as consecutive lines, and a
        #: set of every id would grow with the run.
        self._recent_messages = collections.deque(maxlen=16)
        self._model = None  # the model self.prices is for
        self._tool_started = {}
        self._tool_names = {}

    def feed(self, line: str) -> list[dict]:
        """The log entries of one stdout line (a non-JSON line is kept as `raw`)."""
        self.last_type, self.event = "raw", None
        try:
            event = json.loads(line)
        except ValueError:
            return [{"kind": "raw", "message": _cut(line)}]
        # NOTE: half a surrogate pair could never be written: the task's log stopped there
        event = lone_surrogates_replaced(event, line)
        if not isinstance(event, dict):
            return [{"kind": "raw", "message": _cut(line)}]
        kind = event.get("type")
        self.last_type, self.event = str(kind or "raw"), event
        if self.adapter is not None:
            events = self.adapter.translate(event)
            if events is None:  # a line the adapter does not know: kept as written
                events = [RAW_LINE]
            return [entry for e in events for entry in (
                [{"kind": "raw", "message": _cut(line)}] if e is RAW_LINE else self._handle(e))]
        return self._handle(event)

    def close(self, exit_code: int | None) -> list[dict]:
        """The log entries of what the adapter makes of the process's end (an
        OpenCode run's result)."""
        if self.adapter is None:
            return []
        return [entry for e in self.adapter.finish(exit_code) for entry in self._handle(e)]

    def _handle(self, event: dict) -> list[dict]:
        kind = event.get("type")
        if event.get("session_id") and not self.session_id:
            self.session_id = str(event["session_id"])
        if handle := self.HANDLERS.get(kind):
            return handle(self, event)
        if kind == "rate_limit_event":
            return self._rate_limit(_dict(event.get("rate_limit_info")))
        return []

    def _rate_limit(self, info):
        """Claude's report of its plan's limits, sent every turn: only a refusal is news."""
        if info.get("status") != "rejected":
            return []
        resets = info.get("resetsAt")
        if isinstance(resets, (int, float)) and not isinstance(resets, bool):
            self.limit_resets = float(resets)
        when = f", resets at {iso_at(self.limit_resets)}" if self.limit_resets else ""
        return [{"kind": "system", "is_error": True, "message": f"usage limit reached "
                 f"({info.get('rateLimitType') or 'limit'}{when})"}]

    def _system(self, event):
        subtype = event.get("subtype")
        if subtype == "init":
            tools = next((s.get("status") for s in event.get("mcp_servers") or []
                          if isinstance(s, dict) and s.get("name") == BOARD_TOOLS_SERVER), None)
            return [{"kind": "system", "message": f"session {event.get('session_id')} "
                     f"(model {event.get('model')}, {event.get('permissionMode')} permissions)"},
                    *([{"kind": "system", "is_error": True, "message": "the board tools did not "
                        f"connect ({_cut(str(tools), 40)}): this run cannot create sub-tasks or "
                        "change tasks"}] if tools not in (None, "connected") else [])]
        if "rate" in str(subtype) or "retry" in str(subtype):
            return [{"kind": "system", "is_error": True,
                     "message": f"{subtype}: " + _cut(json_dumps(event), 500)}]
        if subtype == "warning":  # an adapter's: a CLI's error line that is not the end
            return [{"kind": "system", "is_error": True,
                     "message": "agent warning: " + _cut(str(event.get("message")), 1000)}]
        return []

    def _assistant(self, event):
        message = _dict(event.get("message"))
        if event.get("error"):
            self.api_error = str(event["error"])
        usage = message.get("usage")
        if isinstance(usage, dict) and message.get("id") not in self._recent_messages:
            self._recent_messages.append(message.get("id"))
            self._messages += 1
            self._add_usage(usage)
        if isinstance(event.get("total_cost_usd"), (int, float)):  # an adapter's, so far
            self.cost_so_far = float(event["total_cost_usd"])
        model = message.get("model")
        if self.adapter is None and model and model != self._model:
            self._model = model
            self.prices = claude_prices(str(model)) or self.prices
        entries = []
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text"):
                self.texts.append(str(block["text"]))
                entries.append({"kind": "text", "message": _cut(block["text"]),
                                **({"is_error": True} if event.get("error") else {})})
            elif block.get("type") == "thinking" and block.get("thinking"):
                entries.append({"kind": "thinking", "message": _cut(block["thinking"])})
            elif block.get("type") == "tool_use":
                name = str(block.get("name") or "tool")
                self.tool_calls += 1
                self.recent_tools.append(name)
                self._note_file(block.get("input"))
                self._tool_started[block.get("id")] = time.monotonic()
                self._tool_names[block.get("id")] = name
                entries.append({"kind": "tool_call", "tool": name,
                                "message": f"{name}: {tool_summary(block.get('input'))}"})
        return entries

    def _user(self, event):
        entries = []
        content = _dict(event.get("message")).get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            started = self._tool_started.pop(block.get("tool_use_id"), None)
            text = block.get("content")
            if isinstance(text, list):
                text = "\n".join(str(part.get("text", "")) for part in text
                                 if isinstance(part, dict))
            entries.append({
                "kind": "tool_result", "tool": self._tool_names.get(block.get("tool_use_id")),
                "message": _cut(str(text or "")), "is_error": bool(block.get("is_error")),
                "duration_ms": None if started is None else
                int((time.monotonic() - started) * 1000)})
        return entries

    def _result(self, event):
        """A turn's end; a process that is sent more turns prints one per turn, each with
        that turn's usage and the process's cumulative cost."""
        self.result = event
        if isinstance(event.get("usage"), dict):
            self.usage = dict(self._results_usage)
            self._add_usage(event["usage"])
            self._results_usage = dict(self.usage)
        entries = []
        denials = event.get("permission_denials")
        for denial in denials if isinstance(denials, list) else []:
            denial = _dict(denial)
            self.denials.append(denial)
            entries.append({"kind": "system", "is_error": True, "tool": denial.get("tool_name"),
                            "message": f"permission denied: {denial.get('tool_name')} "
                            f"{tool_summary(denial.get('tool_input'))} — allow the tool or "
                            "change the project's permission mode"})
        text = event.get("result") or "; ".join(map(str, event.get("errors") or [])) or ""
        if event.get("is_error"):
            entries.append({"kind": "system", "is_error": True,
                            "message": f"the agent reported an error ({event.get('subtype')}): "
                            + _cut(text, 1000)})
        else:
            entries.append({"kind": "system", "message": "finished: " + _cut(text, 2000)})
        return entries

    @property
    def turns(self) -> int:
        """API round trips: the result's count once there is one, else one per assistant
        message so far."""
        counted = (self.result or {}).get("num_turns")
        return counted if isinstance(counted, int) else self._messages

    HANDLERS = {"system": _system, "assistant": _assistant, "user": _user, "result": _result}

    def _note_file(self, tool_input):
        """Remember the file a tool call reads or writes, relative to the repository."""
        path = _dict(tool_input).get("file_path") or _dict(tool_input).get("notebook_path")
        if not isinstance(path, str) or not path:
            return
        if self.root and os.path.isabs(path):
            relative = os.path.relpath(path, self.root)
            path = path if relative.startswith("..") else relative
        self.files.add(path)

    def _add_usage(self, usage: dict):
        self.usage_changes += 1
        for key, name in USAGE_KEYS.items():
            value = usage.get(name)
            if isinstance(value, int):
                self.usage[key] += value

    @property
    def cost_estimated(self) -> bool:
        """True when cost() is an estimate: no result reported a cost."""
        return not self.simulated and not (
            self.result and isinstance(self.result.get("total_cost_usd"), (int, float)))

    def cost(self, model: str) -> float:
        """The CLI's cost when it reported one (so far, before its result), else an estimate
        from the run's prices (PRICES of the tier unless the model has its own)."""
        if self.simulated:
            return 0.0
        if not self.cost_estimated:
            return float(self.result["total_cost_usd"])
        if self.cost_so_far is not None and self.result is None:
            return self.cost_so_far
        return usd(self.usage.values(), self.prices or PRICES[model])


def _json_object(text: str | None) -> dict | None:
    """The JSON object a variable holds (e.g. a user's OPENCODE_CONFIG_CONTENT): {} when it
    is unset, None when it holds something else."""
    if text is None:
        return {}
    with contextlib.suppress(ValueError):
        value = json.loads(text)
        return value if isinstance(value, dict) else None
    return None


def question_summary(tool_input) -> str | None:
    """The questions of a call that asks the person (Claude's AskUserQuestion), as they read
    them: each question and its options ("Which colour? (Red / Blue)"); None without any."""
    questions = _dict(tool_input).get("questions")
    parts = []
    for question in questions if isinstance(questions, list) else []:
        text, options = _dict(question).get("question"), _dict(question).get("options")
        if not isinstance(text, str) or not text.strip():
            continue
        labels = [label.strip() for label in (_dict(o).get("label") for o in (
            options if isinstance(options, list) else [])) if isinstance(label, str)
            and label.strip()]
        parts.append(" ".join(text.split()) + (f" ({' / '.join(labels)})" if labels else ""))
    return _cut(" ".join(parts), 200) if parts else None


def tool_summary(tool_input) -> str:
    """One line about a tool call's input: its command, path, ... or its questions; else the
    input as JSON."""
    if question := question_summary(tool_input):
        return question
    for key in SUMMARY_KEYS:
        if isinstance(_dict(tool_input).get(key), str):
            return _cut(tool_input[key].strip().replace("\n", " "), 200)
    return _cut(json_dumps(tool_input), 200)


#: How a run ended that the board ended (its stop reason): outcome and why.
ENDED_BY_THE_BOARD = {
    "stopped": ("stopped", None), "interrupted": ("interrupted", None),
    "timeout": ("retry", "the run exceeded the project's task timeout and was killed"),
    "idle": ("retry", "the agent printed nothing for too long (idle timeout) and was killed"),
    "proxy-gone": ("fail", "the egress proxy's socket of the sandboxed run was removed, its "
                   "only way out: the board ended the run")}


def judge_run(parser: StreamParser, exit_code: int | None, stop_reason: str | None) \
        -> tuple[str, str | None]:
    """How a run ended: ok, retry, fail, no_session, stopped or interrupted, and why.

    The result line's is_error decides, never its subtype: the CLI says "success" with
    is_error true when it is not logged in.  A killed run prints no result at all.
    """
    if stop_reason in ENDED_BY_THE_BOARD:
        return ENDED_BY_THE_BOARD[stop_reason]
    result = parser.result
    if result is None:
        return "retry", f"the agent exited with code {exit_code} without a result"
    if not result.get("is_error"):
        if exit_code == 0:
            return "ok", None
        return "retry", f"the agent exited with code {exit_code}"
    return _judge_error(parser, result)


def _judge_error(parser: StreamParser, result: dict) -> tuple[str, str]:
    """How a run ended whose result is an error: by what its text and fields say."""
    text = " ".join([str(result.get("result") or ""), *map(str, result.get("errors") or [])])
    lowered = text.lower()
    status = result.get("api_error_status")
    if "no conversation found" in lowered:
        return "no_session", "the agent has no such session to resume in this directory"
    if result.get("subtype") == "error_max_turns":
        return "fail", "the agent reached its maximum number of turns"
    if result.get("subtype") == "error_max_budget_usd":
        return "fail", "the agent reached the project's budget (taskBudgetUsd)"
    if result.get("terminal_reason") == "prompt_too_long" or "prompt is too long" in lowered:
        return "fail", "the prompt is too long for the model"
    if parser.api_error == "authentication_failed" or "not logged in" in lowered \
            or "login" in lowered and "please run" in lowered:
        return "fail", "the agent CLI is not logged in: run its login (e.g. `claude login`) " \
            "as the user running the board, or set its API key"
    if limit_resets(parser) is not None:
        return "wait", "the agent's usage limit was reached: " + _cut(text, 300)
    if (isinstance(status, int) and (status >= 500 or status == 429)) or any(
            word in lowered for word in ("overloaded", "rate limit", "rate_limit")):
        return "retry", "the model API failed: " + _cut(text, 300)
    return "fail", "the agent reported an error: " + _cut(text, 300)


# --- usage limits -------------------------------------------------------------------------
# A CLI that hits its plan's usage limit or a rate limit says when it lifts: Claude in a
# rate_limit_event (resetsAt) or its text ("resets 2pm (Europe/Berlin)"), Codex "try again
# in 2 hours 5 minutes", Gemini "Please retry in 37.2s", an API's Retry-After.  Such a run
# is not a failure: the task waits and continues by itself then (design §14).

#: Words that make an error a limit rather than a fault: Codex "You've hit your usage
#: limit. … try again at 8:20 AM.", Gemini "[API Error: You have exhausted your daily quota
#: on this model.]" (codex-gemini-NOTES.md), Claude "You've hit your limit · resets 2pm".
LIMIT_WORDS = re.compile(r"usage limit|rate.?limit|quota|hit your limit|limit reached|"
                         r"too many requests|resource.?exhausted|\b429\b", re.I)
#: A Unix time after "resets"/"reset at"/a pipe (Claude's old "usage limit reached|1700000000").
LIMIT_EPOCH = re.compile(r"(?:resets?(?:_?at)?\W{0,3}|\|)(\d{10})(?:\.\d+)?\b", re.I)
#: An ISO time after "reset", "until" or "after".
LIMIT_ISO = re.compile(r"(?:resets?|until|after)\W{0,12}(?:at\W{0,3})?"
                       r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?"
                       r"(?:Z|[+-]\d\d:?\d\d)?)", re.I)
#: A clock time after "resets" or "try again at", maybe with a date: "resets 2pm", "resets at
#: 14:30 (Europe/Berlin)", "resets Oct 6 at 2pm", Codex's "try again at Nov 29th, 2026 6:50 AM".
LIMIT_CLOCK = re.compile(r"(?:resets?|try again)\s+(?:at\s+|on\s+)?(?:([A-Z][a-z]{2,8})\s+"
                         r"(\d{1,2})(?:st|nd|rd|th)?,?\s+(?:(\d{4}),?\s+)?(?:at\s+)?)?"
                         r"(\d{1,2})(?::(\d\d))?\s*([ap]\.?m\.?)?"
                         r"(?:\s*\(([A-Za-z_]+(?:/[A-Za-z_+-]+)*)\))?", re.I)
#: A clock time this much past is "now", not tomorrow (the message was printed a moment ago).
LIMIT_PAST_SECONDS = 300
#: A wait: "try again in 2 hours 5 minutes", "retry in 37.2s", "retry-after: 30",
#: "retryDelay": "37s".
LIMIT_WAIT = re.compile(r"(?:try again|retry|resets?|available again)\s*(?:in|after)\s+"
                        r"((?:\d+(?:\.\d+)?\s*[a-z]+[\s,]*(?:and\s+)?)+)|"
                        r"retry-?after\W{0,3}(\d+(?:\.\d+)?)|"
                        r"retryDelay\W{0,4}(\d+(?:\.\d+)?)s|"
                        r"retry-?after-?ms\W{0,3}(\d+)", re.I)
LIMIT_UNITS = {"d": 86400, "day": 86400, "days": 86400, "h": 3600, "hr": 3600, "hrs": 3600,
               "hour": 3600, "hours": 3600, "m": 60, "min": 60, "mins": 60, "minute": 60,
               "minutes": 60, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
               "ms": 0.001}
#: The longest wait the board takes from a CLI (a week's limit and a day to spare).
LIMIT_MAX_SECONDS = 8 * 86400
#: The least wait: a reset already past still gets the API a moment.
LIMIT_MIN_SECONDS = 5
#: The stderr lines a run keeps for a reset its result does not name (Gemini's stack trace
#: of a quota error is about 30 lines, the API's "Please retry in 3600s." near its end).
STDERR_TAIL_LINES = 50
#: Waits in a row after which a task's limit counts as a failed attempt (a CLI that keeps
#: saying "retry in 2s" must not loop for ever).
MAX_LIMIT_WAITS = 10


def limit_resets(parser: StreamParser, now: float | None = None) -> float | None:
    """When the usage or rate limit that ended the run lifts (Unix time), or None when the
    run did not end on one or the CLI did not say when."""
    result = parser.result or {}
    if not result.get("is_error"):
        return None
    now = time.time() if now is None else now
    text = " ".join([str(result.get("result") or ""), *map(str, result.get("errors") or [])])
    if result.get("api_error_status") != 429 and not LIMIT_WORDS.search(text):
        return None  # an error of another kind, even after a limit event earlier in the run
    at = parser.limit_resets if parser.limit_resets is not None else reset_time(text, now)
    for line in reversed(parser.stderr if at is None else ()):  # the latest reset named
        at = reset_time(line, now)
        if at is not None:
            break
    if at is None or at - now > LIMIT_MAX_SECONDS:
        return None
    return max(at, now + LIMIT_MIN_SECONDS)


def reset_time(text: str, now: float) -> float | None:
    """The first reset time a limit message names (Unix time), else None."""
    if match := LIMIT_EPOCH.search(text):
        return float(match.group(1))
    if match := LIMIT_ISO.search(text):
        with contextlib.suppress(ValueError):
            when = dt.datetime.fromisoformat(match.group(1).replace("Z", "+00:00"))
            return (when if when.tzinfo else when.astimezone()).timestamp()
    if match := LIMIT_WAIT.search(text):
        if match.group(1):
            parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", match.group(1), re.I)
            seconds = [float(n) * LIMIT_UNITS[u.lower()] for n, u in parts
                       if u.lower() in LIMIT_UNITS]
            if seconds:
                return now + sum(seconds)
        elif match.group(4):
            return now + int(match.group(4)) / 1000
        else:
            return now + float(match.group(2) or match.group(3))
    for match in LIMIT_CLOCK.finditer(text):
        month, day, year, hour, minute, half, zone = match.groups()
        if half or minute:
            return _next_clock(now, int(hour), int(minute or 0), (half or "")[:1].lower(),
                               zone, (month, int(day), year and int(year)) if month else None)
    return None


def _next_clock(now: float, hour: int, minute: int, half: str, zone: str | None,
                date: tuple | None = None) -> float | None:
    """When the clock next shows hour:minute (half: "a", "p" or "") in zone (else the
    server's), on date (month name, day, year or None) when one is named."""
    if half and not 1 <= hour <= 12:
        return None
    if half:
        hour = hour % 12 + (12 if half == "p" else 0)
    if hour > 23 or minute > 59:
        return None
    try:
        tz = zoneinfo.ZoneInfo(zone) if zone else None
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        tz = None
    today = dt.datetime.fromtimestamp(now, tz).date()  # tz None: the server's local date

    def at(day: dt.date) -> float:  # a wall-clock time there, daylight saving included
        return dt.datetime.combine(day, dt.time(hour, minute), tzinfo=tz).timestamp()
    if date is None:
        when = at(today)
        return when if when > now - LIMIT_PAST_SECONDS else at(today + dt.timedelta(days=1))
    month, day, year = date
    try:
        number = dt.datetime.strptime(month[:3].title(), "%b").month
        when = at(dt.date(year or today.year, number, day))
        if year is None and when <= now - LIMIT_PAST_SECONDS:  # "Jan 2" said in December
            when = at(dt.date(today.year + 1, number, day))
    except ValueError:
        return None
    return when


# =============================================================================
# AGENT ADAPTERS
# =============================================================================
# One adapter per agent CLI (design §14) builds its invocation and turns each line it prints
# into the Claude-shaped events StreamParser reads (system init, assistant blocks, user
# tool results, a final result), so the log, usage, cost, judge_run, retries and events are
# shared.  translate() returns None for a line it does not know: that line stays a raw log
# entry and the run goes on.  finish() may add events once the process has exited.

#: An HTTP status named in a CLI's error text (an API error's code), for judge_run.
HTTP_STATUS_RE = re.compile(r"(?:\"code\"\s*:\s*|status(?: code)?[ :=]*|http\W{0,2}|error\W{0,3}|"
                            r"rejected \()([45]\d\d)\b|\b([45]\d\d) (?=too many|internal|"
                            r"unauthorized|forbidden|not found|bad gateway|bad request|"
                            r"service unavailable|gateway timeout)", re.I)


def _http_status(text: str) -> int | None:
    """The HTTP status a CLI's error text names; 429 for its words for a limit."""
    if match := HTTP_STATUS_RE.search(text or ""):
        return int(match.group(1) or match.group(2))
    return 429 if LIMIT_WORDS.search(text or "") else None


def _text_event(kind: str, text: str) -> dict:
    block = {"type": "text", "text": text} if kind == "text" else \
        {"type": "thinking", "thinking": text}
    return {"type": "assistant", "message": {"content": [block]}}


def _tool_call_event(call_id, name: str, tool_input) -> dict:
    return {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}]}}


def _tool_result_event(call_id, output, is_error: bool) -> dict:
    return {"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": call_id, "content": str(output or ""),
         "is_error": is_error}]}}


def _result_event(ok: bool, text: str, usage: dict, *, errors=(), cost=None, status=None) -> dict:
    return {"type": "result", "subtype": "success" if ok else "error", "is_error": not ok,
            "result": text, "usage": usage, "errors": [str(e) for e in errors],
            "api_error_status": status, **({} if cost is None else {"total_cost_usd": cost})}


class ClaudeAdapter:
    """Claude Code: its stream-json is the board's own shape; the prompt goes on stdin
    (through the two-way channel of a task run)."""

    #: Whether the run is in the board's sandbox, which the CLI's own must not nest in.
    sandboxed = False
    #: Whether a task run of this CLI gets the board tools (the stdio MCP server of
    #: the machines' board_tools()), so its agent can create sub-tasks.
    BOARD_TOOLS = True

    def __init__(self, model: str | None = None, base_usage: dict | None = None):
        self.model = model
        self.base_usage = base_usage or {}
        self.text = ""  # an adapter's latest text: the result's

    def invocation(self, argv, prompt, *, model, effort, permission_mode, session_id, cwd):
        raise NotImplementedError("Claude runs are built by agent_invocation()")

    def environment(self, permission_mode: str) -> dict:
        """Variables the run's environment needs on top of the board's (the permission
        mode's, where a flag cannot say it)."""
        return {}

    @staticmethod
    def board_tools(argv: list, env: dict, server: dict) -> None:
        """Add the board tools' MCP server ({command, args, config}: its 0600 config file)
        to a run's argv or environment, allowed in every permission mode: the run's token
        bounds what the tools may do (design §11); the CLI waits for it before its first
        turn, MCP_START_SECONDS at most, unless the person's environment says otherwise."""
        argv += ["--mcp-config", server["config"]]
        env.setdefault("MCP_CONNECTION_NONBLOCKING", "0")
        env.setdefault("MCP_CONNECT_TIMEOUT_MS", str(MCP_START_SECONDS * 1000))

    def translate(self, event: dict) -> list[dict] | None:
        return [event]

    def finish(self, exit_code: int | None) -> list[dict]:
        return []


class CodexAdapter(ClaudeAdapter):
    """OpenAI Codex CLI, `codex exec --json` (agent-cli.md §3.3, codex-gemini-NOTES.md):
    the prompt comes on stdin (`-` as the prompt argument), then EOF; resume is
    `exec [options] resume <thread id> -`, the exec options before `resume`.  It reports no
    cost, and its usage counts the whole thread: base_usage is what the earlier runs of the
    thread already counted."""

    #: The sandbox of each permission mode.  exec cannot ask for approvals, so default is
    #: workspace-write like allow-tools: edits inside the project, no network.
    SANDBOX = {"auto-accept": "danger-full-access", "allow-tools": "workspace-write",
               "default": "workspace-write", "read-only": "read-only"}
    TOOL_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search")

    def __init__(self, model=None, base_usage=None):
        super().__init__(model, base_usage)
        self.started = set()
        self.error = None
        self.done = False

    def invocation(self, argv, prompt, *, model, effort, permission_mode, session_id, cwd):
        argv = [*argv, "exec", "--json", "--skip-git-repo-check", "-s",
                "danger-full-access" if self.sandboxed else self.SANDBOX[permission_mode],
                "-c", f"model_reasoning_effort={effort}"]
        if model:
            argv += ["-m", model]
        if session_id:
            argv += ["resume", session_id]
        return [*argv, "-"]  # the prompt on stdin: an argument is limited to 128 KiB

    @staticmethod
    def board_tools(argv, env, server):
        """A `-c mcp_servers.taskboard=…` before the prompt's `-` (and `resume <thread>`;
        every resume needs it again).  Its MCP servers get a filtered environment, so the
        server reads its token from the config file; exec cannot ask, so the tools are
        approved (else refused outside danger-full-access); required, so codex waits for
        the server to start (an optional one gets about a second, then is left out)."""
        where = [f"command={json.dumps(server['command'])}",
                 f"args={json.dumps(server['args'])}"] if "url" not in server else [
            f"url={json.dumps(server['url'])}",  # on a host: /mcp, its token in the env
            'bearer_token_env_var="TASKBOARD_MCP_TOKEN"']
        if "url" in server:
            env["TASKBOARD_MCP_TOKEN"] = server["token"]
        spec = ", ".join([*where, "required=true", f"startup_timeout_sec={MCP_START_SECONDS}",
                          'default_tools_approval_mode="approve"'])
        at = len(argv) - (3 if argv[-3:-2] == ["resume"] else 1)
        argv[at:at] = ["-c", f"mcp_servers.{BOARD_TOOLS_SERVER}={{{spec}}}"]

    def translate(self, event):
        kind = event.get("type")
        if kind == "thread.started":
            return [{"type": "system", "subtype": "init", "session_id": event.get("thread_id"),
                     "model": self.model, "permissionMode": "sandbox"}]
        if kind in ("turn.started", "item.updated"):
            return []
        if kind == "error":
            self.error = str(event.get("message") or "")
            return [{"type": "system", "subtype": "warning", "message": self.error}]
        if kind == "turn.completed":
            self.done = True
            return [_result_event(True, self.text, self._usage(event.get("usage")))]
        if kind == "turn.failed":
            self.done = True
            message = str(_dict(event.get("error")).get("message") or self.error or "")
            return [_result_event(False, message, self._usage(event.get("usage")),
                                  errors=[message], status=_http_status(message))]
        item = _dict(event.get("item"))
        if kind not in ("item.started", "item.completed") or not item:
            return None
        return self._item(kind, item)

    def _item(self, kind, item):
        item_type, item_id = item.get("type"), item.get("id")
        if item_type in self.TOOL_ITEMS:
            events = []
            if item_id not in self.started:
                self.started.add(item_id)
                events.append(_tool_call_event(item_id, *self._tool(item)))
            if kind == "item.completed":
                code = item.get("exit_code")
                failed = item.get("status") == "failed" or code not in (None, 0)
                output = item.get("aggregated_output") or item.get("result") or \
                    _dict(item.get("error")).get("message") or item.get("status") or ""
                events.append(_tool_result_event(item_id, output, failed))
            return events
        if kind == "item.started":
            return []
        if item_type == "agent_message":
            self.text = str(item.get("text") or "")
            return [_text_event("text", self.text)]
        if item_type == "reasoning":
            return [_text_event("thinking", str(item.get("text") or ""))]
        if item_type == "error":  # a warning: a failure ends the turn with turn.failed
            return [{"type": "system", "subtype": "warning", "message": item.get("message")}]
        if item_type == "todo_list":
            return []
        return None

    @staticmethod
    def _tool(item):
        item_type = item.get("type")
        if item_type == "command_execution":
            return "shell", {"command": item.get("command")}
        if item_type == "file_change":
            changes = [c for c in item.get("changes") or [] if isinstance(c, dict)]
            return "file_change", {"file_path": changes[0].get("path") if changes else None,
                                   "changes": changes}
        if item_type == "mcp_tool_call":
            return f"mcp__{item.get('server')}__{item.get('tool')}", item.get("arguments")
        return item_type, {"query": item.get("query")}

    def _usage(self, usage) -> dict:
        """The thread's cumulative usage as this run's share, in Claude's names."""
        usage = _dict(usage)
        cached = usage.get("cached_input_tokens") or 0
        total = {"input_tokens": (usage.get("input_tokens") or 0) - cached,
                 "output_tokens": usage.get("output_tokens") or 0,
                 "cache_read_input_tokens": cached,
                 "cache_creation_input_tokens": usage.get("cache_write_input_tokens") or 0}
        return {k: max(0, v - (self.base_usage.get(k) or 0)) for k, v in total.items()}

    def finish(self, exit_code):
        if self.done or not self.error:
            return []  # no error seen either: judge_run says it ended without a result
        return [_result_event(False, self.error, {}, errors=[self.error],
                              status=_http_status(self.error))]


class GeminiAdapter(ClaudeAdapter):
    """Gemini CLI, `gemini -o stream-json` with the prompt on stdin and no -p (agent-cli.md
    §3.4, codex-gemini-NOTES.md): headless because stdin is not a terminal; --skip-trust, or
    it refuses an untrusted folder (exit 55).  `--resume <session id>` continues a session
    of the same folder.  Assistant text comes in delta chunks (joined here until the next
    other line); no cost, and its usage counts this run only."""

    #: Its --approval-mode of each permission mode.  Headless, default drops the edit and
    #: shell tools, so default is auto_edit (edits, no shell); plan refuses writes outside
    #: its own plans folder and has no shell.
    APPROVAL = {"auto-accept": "yolo", "allow-tools": "auto_edit", "default": "auto_edit",
                "read-only": "plan"}
    #: No board tools: 0.61 takes an MCP server only from a settings file, and the one that
    #: leaves the project and the user's settings alone (GEMINI_CLI_SYSTEM_DEFAULTS_PATH) is
    #: read only when root owns it and every folder above it.
    BOARD_TOOLS = False

    def __init__(self, model=None, base_usage=None):
        super().__init__(model, base_usage)
        self.pending = []

    def invocation(self, argv, prompt, *, model, effort, permission_mode, session_id, cwd):
        argv = [*argv, "-o", "stream-json", "--skip-trust",
                "--approval-mode", self.APPROVAL[permission_mode]]
        if model:
            argv += ["-m", model]
        if session_id:
            argv += ["--resume", session_id]
        return argv

    def _flush(self) -> list[dict]:
        if not self.pending:
            return []
        self.text, self.pending = "".join(self.pending), []
        return [_text_event("text", self.text)]

    def translate(self, event):
        kind = event.get("type")
        if kind == "message" and event.get("role") == "assistant":
            self.pending.append(str(event.get("content") or ""))
            return [] if event.get("delta") else self._flush()
        events = self._flush()
        if kind == "init":
            return events + [{"type": "system", "subtype": "init", "model": event.get("model"),
                              "session_id": event.get("session_id"),
                              "permissionMode": "approval-mode"}]
        if kind == "message":
            return events  # the prompt, echoed
        if kind == "tool_use":
            return events + [_tool_call_event(event.get("tool_id"),
                                              str(event.get("tool_name") or "tool"),
                                              event.get("parameters"))]
        if kind == "tool_result":
            error = _dict(event.get("error")).get("message")
            return events + [_tool_result_event(event.get("tool_id"),
                                                event.get("output") or error,
                                                event.get("status") != "success")]
        if kind == "error":
            return events + [{"type": "system", "subtype": "warning",
                              "message": event.get("message")}]
        if kind == "result":
            stats = _dict(event.get("stats"))
            cached = stats.get("cached") or 0
            usage = {"input_tokens": max(0, (stats.get("input_tokens") or 0) - cached),
                     "output_tokens": stats.get("output_tokens") or 0,
                     "cache_read_input_tokens": cached}
            ok = event.get("status") == "success"
            message = str(_dict(event.get("error")).get("message") or "")
            return events + [_result_event(ok, self.text if ok else
                                           message, usage, errors=[message] if message else [],
                                           status=_http_status(message))]
        return events + [RAW_LINE]

    def finish(self, exit_code):
        return self._flush()


class OpenCodeAdapter(ClaudeAdapter):
    """OpenCode, `opencode run --format json` (tests/fixtures/agent-streams/
    opencode-NOTES.md): prompt on stdin, then EOF; no init and no result line, so the
    session starts with the first line's sessionID and the result is made at exit (exit 0
    and a last step that stopped = done).  Usage and cost come per step: summed here."""

    #: read-only: the plan agent refuses edit and write, but its bash runs and can write
    #: files, so bash and edit are denied outright (they leave the model's tool list).
    READ_ONLY_PERMISSION = {"bash": "deny", "edit": "deny"}

    def __init__(self, model=None, base_usage=None):
        super().__init__(model, base_usage)
        self.session = None
        self.usage = dict.fromkeys(USAGE_KEYS.values(), 0)
        self.cost = 0.0
        self.reason = None
        self.rejected = None
        self.done = False

    def invocation(self, argv, prompt, *, model, effort, permission_mode, session_id, cwd):
        argv = [*argv, "run", "--format", "json", "--dir", cwd]
        if model:
            argv += ["-m", model]
        if permission_mode == "auto-accept":
            argv.append("--auto")
        elif permission_mode == "read-only":
            argv += ["--agent", "plan"]
        if session_id:
            argv += ["--session", session_id]
        return argv

    def environment(self, permission_mode):
        if permission_mode != "read-only":
            return {}
        return {"OPENCODE_PERMISSION": json.dumps(self.READ_ONLY_PERMISSION)}

    @staticmethod
    def board_tools(argv, env, server):
        """An `mcp.taskboard` local server in OPENCODE_CONFIG_CONTENT (the layer above the
        project's opencode.json, merged into what the user set there), every field set so
        that no lower layer's leaks in; its tools (`taskboard_*`) allowed, or a user's
        `"*": "ask"` would have them rejected headless.  A value of the user's that is not
        an object stays as it is: OpenCode reports a bad one, and a rule for every tool
        (`"allow"`) must not shrink to the board's."""
        config = _json_object(env.get("OPENCODE_CONFIG_CONTENT"))
        if config is None:
            return
        where = {"type": "local", "command": [server["command"], *server["args"]],
                 "environment": {}} if "url" not in server else {  # on a host: /mcp
            "type": "remote", "url": server["url"],
            "headers": {"Authorization": f"Bearer {server['token']}"}}
        config["mcp"] = {**_dict(config.get("mcp")), BOARD_TOOLS_SERVER: {
            **where, "enabled": True, "timeout": MCP_START_SECONDS * 1000}}
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(config)
        if (permission := _json_object(env.get("OPENCODE_PERMISSION"))) is not None:
            env["OPENCODE_PERMISSION"] = json.dumps({**permission, "taskboard_*": "allow"})

    def translate(self, event):
        events = []
        if event.get("sessionID") and not self.session:
            self.session = str(event["sessionID"])
            events.append({"type": "system", "subtype": "init", "session_id": self.session,
                           "model": self.model, "permissionMode": "opencode"})
        kind = event.get("type")
        line = self.LINES.get(kind) if isinstance(kind, str) else None  # (an array: no key)
        return events + (line(self, event, _dict(event.get("part"))) if line else [RAW_LINE])

    def _text(self, event, part):
        self.text = str(part.get("text") or "")
        return [_text_event("text", self.text)]

    def _reasoning(self, event, part):
        return [_text_event("thinking", str(part.get("text") or ""))]

    def _tool_use(self, event, part):
        """A tool call and its result come in one line; a rejected permission is kept for
        the result (the run did not finish)."""
        state = _dict(part.get("state"))
        call_id = part.get("callID") or part.get("id")
        exit_code = _dict(state.get("metadata")).get("exit")
        failed = state.get("status") == "error" or exit_code not in (None, 0)
        output = state.get("output") if state.get("status") != "error" else state.get("error")
        if state.get("status") == "error" and "rejected permission" in str(output):
            self.rejected = f"{part.get('tool')}: {output}"
        return [_tool_call_event(call_id, str(part.get("tool") or "tool"), state.get("input")),
                _tool_result_event(call_id, output, failed)]

    def _step_finish(self, event, part):
        """A step's usage and cost, added to the run's; its reason says whether it stopped."""
        tokens = _dict(part.get("tokens"))
        cache = _dict(tokens.get("cache"))
        step = {"input_tokens": tokens.get("input") or 0,
                "output_tokens": (tokens.get("output") or 0) + (tokens.get("reasoning") or 0),
                "cache_read_input_tokens": cache.get("read") or 0,
                "cache_creation_input_tokens": cache.get("write") or 0}
        for key, value in step.items():
            self.usage[key] += value if isinstance(value, int) else 0
        if isinstance(part.get("cost"), (int, float)):
            self.cost += part["cost"]
        self.reason = part.get("reason")
        # an assistant line without content: StreamParser adds its usage once (by id)
        return [{"type": "assistant", "total_cost_usd": self.cost, "message": {
            "id": str(part.get("id")), "content": [], "usage": step}}]

    def _error(self, event, part):
        """An error line ends the run: it is the result."""
        self.done = True
        error = _dict(event.get("error"))
        data = _dict(error.get("data"))
        message = f"{error.get('name')}: {data.get('message')}"
        headers = {str(k).lower(): v for k, v in _dict(data.get("responseHeaders")).items()}
        for header in ("retry-after-ms", "retry-after"):
            if headers.get(header):  # when the limit resets: the line's timestamp + it
                message += f" ({header}: {headers[header]}, at {event.get('timestamp')})"
        status = data.get("statusCode") if isinstance(data.get("statusCode"), int) \
            else _http_status(message)
        return [_result_event(False, message, dict(self.usage), errors=[message],
                              cost=self.cost, status=status)]

    #: What translate makes of each type of line (self, the line, its part); a type not
    #: here is shown raw.
    LINES = {"step_start": lambda self, event, part: [], "text": _text,
             "reasoning": _reasoning, "tool_use": _tool_use, "step_finish": _step_finish,
             "error": _error}

    def finish(self, exit_code):
        if self.done or exit_code != 0:
            return []  # an error line was the result; else judge_run: no result
        self.done = True
        ok = self.reason == "stop" and not self.rejected
        errors = [] if ok else [f"the agent stopped without finishing: {self.rejected}"
                                if self.rejected else "the agent stopped without a final "
                                "answer"]
        return [_result_event(ok, self.text if ok else errors[0], dict(self.usage), errors=errors,
                              cost=self.cost)]


#: Each agent's adapter class.
ADAPTERS = {"claude": ClaudeAdapter, "codex": CodexAdapter, "gemini": GeminiAdapter,
            "opencode": OpenCodeAdapter}


# =============================================================================
# SIMULATED AGENT
# =============================================================================
# `python taskboard.py --simulate-agent ...` speaks the agent CLI's contract (argv, prompt
# on stdin, stream-json on stdout) with believable tool calls and pacing, so --demo works
# with no agent installed.  It edits and commits only in a repository --demo created.

#: The file marking a scratch repository made by --demo.
DEMO_MARKER = ".taskboard-demo"
#: How the Demo project's runs start the simulated agent.
SIMULATED_AGENT = [sys.executable, os.path.abspath(__file__), "--simulate-agent"]


def simulate_agent(argv: list[str]) -> int:
    """Pretend to be the agent CLI for one run; returns the exit code."""
    parser = argparse.ArgumentParser(prog="taskboard.py --simulate-agent", add_help=False)
    parser.add_argument("--model", default="sonnet")
    parser.add_argument("--resume")
    parser.add_argument("--version", action="store_true")
    known, _ = parser.parse_known_args(argv)
    if known.version:
        print(f"{__version__} (taskboard simulated agent)")
        return 0
    session = known.resume or str(uuid.uuid4())

    def emit(event):
        print(json_dumps({**event, "session_id": session}), flush=True)

    talk = _SimulatedChannel(emit) if "--input-format" in argv else None
    prompt = (talk.next_turn() or "") if talk else sys.stdin.read()
    allowed = argv[argv.index("--allowedTools") + 1] if "--allowedTools" in argv else ""
    asks = talk is not None and "--dangerously-skip-permissions" not in argv \
        and "Edit" not in allowed
    pace = float(os.environ.get("TASKBOARD_SIMULATE_PACE", "1"))
    title = next((line.lstrip("# ").split(": ", 1)[-1] for line in prompt.splitlines()
                  if line.strip()), "the task")
    cwd = os.getcwd()
    demo = os.path.exists(os.path.join(cwd, DEMO_MARKER))
    turn = itertools.count(1)

    model = f"simulated-{known.model}"
    usage = dict(zip(USAGE_KEYS.values(), (900, 120, 2000, 300)))  # each message's
    turn_usage = dict.fromkeys(USAGE_KEYS.values(), 0)
    spent = 0.0  # the process's cost so far, priced as the board prices the model

    def say(block):
        nonlocal spent
        for key, value in usage.items():
            turn_usage[key] += value
        spent += usd(usage.values(), claude_prices(model) or PRICES["model_medium"])
        emit({"type": "assistant", "message": {
            "id": f"msg_sim_{session[:8]}_{next(turn)}", "type": "message",
            "role": "assistant", "model": model, "content": [block], "usage": usage}})

    def tool(name, tool_input, run):
        tool_id = f"toolu_sim_{uuid.uuid4().hex[:12]}"
        say({"type": "tool_use", "id": tool_id, "name": name, "input": tool_input})
        time.sleep(0.6 * pace)
        answer = talk.ask({"subtype": "can_use_tool", "tool_name": name, "input": tool_input,
                           "tool_use_id": tool_id, "permission_suggestions": [{
                               "type": "addRules", "rules": [{"toolName": name}],
                               "behavior": "allow", "destination": "localSettings"}]}) \
            if asks and name == "Edit" else {"behavior": "allow"}
        if answer.get("behavior") == "allow":
            output, failed = run()
        else:
            output, failed = str(answer.get("message") or "The tool call was denied."), True
        emit({"type": "user", "message": {"role": "user", "content": [{
            "type": "tool_result", "tool_use_id": tool_id, "content": output,
            "is_error": failed}]}})
        time.sleep(0.3 * pace)

    def shell(args):
        code, out = run_command(args, cwd=cwd, stderr=subprocess.STDOUT)
        return out.strip() or "(no output)", code != 0

    emit({"type": "system", "subtype": "init", "cwd": cwd, "model": model,
          "permissionMode": "simulated", "tools": ["Bash", "Read", "Edit"], "mcp_servers": []})
    time.sleep(0.4 * pace)
    say({"type": "thinking", "thinking": f"The task is: {title}. I'll look around first."})
    time.sleep(0.5 * pace)
    say({"type": "text", "text": "Let me look at the repository."})
    tool("Bash", {"command": "ls -a", "description": "List files"},
         lambda: ("\n".join(sorted(os.listdir(cwd))), False))
    if prompt.startswith("You are planning"):  # the board's planner: answer with a plan
        topic = prompt.split("## Topic\n", 1)[-1].split("\n\n", 1)[0].strip() or "the topic"
        summary = "Here is the plan.\n```json\n" + json.dumps(_simulated_plan(topic), indent=2) \
            + "\n```"
        time.sleep(0.5 * pace)
        say({"type": "text", "text": summary})
    elif prompt.startswith("You are reviewing the work"):  # the verifier: approve
        summary = 'The work looks right.\n```json\n{"verdict": "approve", "summary": ' \
            '"the simulated verifier approves"}\n```'
        say({"type": "text", "text": summary})
    else:
        answer = None
        if talk is not None and "ask me" in prompt.lower():
            answers = _dict(_dict(talk.ask({
                "subtype": "can_use_tool", "tool_name": "AskUserQuestion",
                "input": _SIMULATED_QUESTION}).get("updatedInput")).get("answers"))
            answer = next(iter(answers.values()), None)
            say({"type": "text", "text": f"Thanks, I'll go with: {json_dumps(answers)}."})
        summary = _simulated_work(cwd, title, demo, answer, tool, shell, say)

    def finish(text):
        for again in range(3):  # the board's stop check may send it back to work
            if talk is None or talk.hook is None or talk.ask({
                    "subtype": "hook_callback", "callback_id": talk.hook, "input": {
                        "hook_event_name": "Stop", "stop_hook_active": again > 0}}).get(
                        "decision") != "block":
                break
            say({"type": "text", "text": "The stop check failed, so I looked again."})
        emit({"type": "result", "subtype": "success", "is_error": False,
              "num_turns": next(turn), "result": text, "permission_denials": [],
              "total_cost_usd": round(spent, 6), "usage": dict(turn_usage)})
        turn_usage.update(dict.fromkeys(turn_usage, 0))

    finish(summary)
    while talk is not None and (text := talk.next_turn()) is not None:
        say({"type": "text", "text": f"You said: {text}"})
        finish(f"You said: {text}")
    return 0


_SIMULATED_QUESTION = {"questions": [{
    "question": "How should the README read?", "header": "Style", "multiSelect": False,
    "options": [{"label": "Short", "description": "what it has and how to run it"},
                {"label": "Friendly", "description": "a warm welcome and a first try"}]}]}


class _SimulatedChannel:
    """The simulated agent's side of the two-way protocol (design §12): it answers the
    board's control requests, keeps its user turns and waits for answers to its own."""

    def __init__(self, emit):
        self.emit, self.turns, self.hook = emit, collections.deque(), None
        self.numbers = itertools.count(1)

    def next_turn(self) -> str | None:
        """The next user message's text; None when the board closed stdin."""
        while not self.turns:
            if self._read() is None:
                return None
        return self.turns.popleft()

    def ask(self, request: dict) -> dict:
        """Send a control request and wait for its answer ({} when stdin ends)."""
        request_id = f"sim-{next(self.numbers)}"
        self.emit({"type": "control_request", "request_id": request_id, "request": request})
        while (answer := self._read()) is not None:
            if answer and answer.get("request_id") == request_id:
                return _dict(answer.get("response"))
        return {}

    def _read(self) -> dict | None:
        """One stdin line handled; the answer to a request of ours, {} for anything else."""
        line = sys.stdin.readline()
        if not line:
            return None
        try:
            message = _dict(json.loads(line))
        except ValueError:
            return {}
        request = _dict(message.get("request"))
        if message.get("type") == "user":
            content = _dict(message.get("message")).get("content")
            self.turns.append(content if isinstance(content, str) else json_dumps(content))
        elif message.get("type") == "control_request":
            if request.get("subtype") == "initialize":
                stop = (_dict(request.get("hooks")).get("Stop") or [{}])[0]
                self.hook = (_dict(stop).get("hookCallbackIds") or [None])[0]
            self.emit({"type": "control_response", "response": {
                "subtype": "success", "request_id": message.get("request_id"),
                "response": {}}})
        elif message.get("type") == "control_response":
            return _dict(message.get("response"))
        return {}


def _simulated_plan(topic: str) -> dict:
    steps = [("Explore how {} fits the code", "chore", 1),
             ("Build the core of {}", "feature", 2),
             ("Test {}", "test", 1), ("Document {}", "docs", 0)]
    return {"tasks": [{"title": title.format(topic[:80]), "task_type": kind,
                       "priority": priority,
                       "description": f"Part of the plan for: {topic[:200]}",
                       "acceptance_criteria": "A reviewer agrees it is done."}
                      for title, kind, priority in steps],
            "dependencies": [[0, 1], [1, 2], [1, 3]]}


def _simulated_work(cwd, title, demo, answer, tool, shell, say) -> str:
    if not demo:
        say({"type": "text", "text": "This is not a demo repository, so I change nothing."})
        summary = "Looked around; nothing was changed (simulated agent outside the demo)."
        say({"type": "text", "text": summary})
        return summary
    path, old, new, summary = _demo_change(cwd, title, answer)

    def edit():
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            text = ""
        if old not in text:
            return f"String to replace not found in file.\nString: {old}", True
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1) if old else text + new)
        return f"The file {path} has been updated.", False

    def commit():
        output, failed = shell(["git", "add", "-A"])
        if failed:
            return output, True
        return shell(["git", "-c", "user.name=Simulated Agent", "-c",
                      "user.email=agent@taskboard.invalid", "commit", "-qm",
                      f"Simulated work: {title}"])
    tool("Edit", {"file_path": path, "old_string": old, "new_string": new}, edit)
    tool("Bash", {"command": f"git add -A && git commit -m 'Simulated work: {title}'",
                  "description": "Commit the change"}, commit)
    say({"type": "text", "text": summary})
    return summary


#: What the README of the demo reads like, by the answer to the demo's question.
_DEMO_README = {
    "Short": "\n`app.py` has `count_to(n)`, the numbers 1 to n, and `greet(name)`. Run "
             "`python3 -c 'import app; print(app.count_to(3))'`.\n",
    "Friendly": "\nWelcome! This little app counts with you: `count_to(3)` gives `[1, 2, 3]`, "
                "and `greet('Ada')` says hello. Try it with `python3 -c 'import app; "
                "print(app.greet(\"you\"))'`.\n"}


def _demo_change(cwd, title, answer) -> tuple[str, str, str, str]:
    """The edit a Demo task asks for, by its title: (file, text to replace, "" to append;
    its replacement; the summary).  A task a person added gets a line in NOTES.md."""
    words = title.lower()
    app_py = os.path.join(cwd, "app.py")
    if "greeting" in words:
        return (app_py, "", '\n\ndef greet(name):\n    return f"Hello, {name}!"\n',
                "Added greet(name) to app.py: greet('Ada') returns 'Hello, Ada!'.")
    if "off-by-one" in words:
        return (app_py, "range(1, n)", "range(1, n + 1)",
                "Fixed count_to in app.py: count_to(3) now returns [1, 2, 3].")
    if "readme" in words:
        style = answer if answer in _DEMO_README else "Short"
        return (os.path.join(cwd, "README.md"), "# Demo app\n",
                "# Demo app\n" + _DEMO_README[style],
                f"Documented the app in README.md, {style.lower()} as you asked.")
    return (os.path.join(cwd, "NOTES.md"), "", f"- {title}\n",
            f"Added a note for “{title}” to NOTES.md and committed it.")


# =============================================================================
# SANDBOX
# =============================================================================
# A sandboxed run (design §17) goes through bubblewrap, wrapped once where its machine
# spawns it: the machine read-only, its own PID, IPC and UTS namespaces (it sees and
# signals only its own processes, and dies with the board's handle on it), private /tmp,
# the board's data dir and the person's home hidden but for what the run needs, and
# writable only its checkout, what a commit writes, its CLI's state and ~/.cache; a network
# of its own, whose only way out is the board's egress proxy (design §20: the bridge here,
# the policy NetPolicy, the proxy in SUPERVISORS).

#: bubblewrap's namespaces and limits for every sandboxed run (and its try at start):
#: no nested user namespace, so the CLIs' own sandboxes cannot nest inside it.  Its own
#: /dev (a tmpfs) holds an empty, writable /dev/shm of its own: no mount of its own
#: (each mount costs a start about 0.2 ms).
SANDBOX_BASE = ("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--tmpfs", "/tmp", "--tmpfs", "/var/tmp",
                "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc",
                "--unshare-uts", "--hostname", "sandbox", "--die-with-parent", "--new-session",
                "--cap-drop", "ALL")
#: The same for the board's own git (git_sandbox()), with a /dev (GIT_DEV) of what git and
#: a filter's shell use: fewer mounts than bubblewrap's own /dev (each device a bind),
#: about 1 ms of the start of each of its sandboxes.
GIT_DEV = ("--tmpfs", "/dev", *(arg for name in ("null", "zero", "urandom") for arg in (
    "--dev-bind", f"/dev/{name}", f"/dev/{name}")), "--symlink", "/proc/self/fd", "/dev/fd",
           *(arg for fd, name in enumerate(("stdin", "stdout", "stderr")) for arg in (
               "--symlink", f"/proc/self/fd/{fd}", f"/dev/{name}")))
GIT_SANDBOX_BASE = (*SANDBOX_BASE[:SANDBOX_BASE.index("--dev")], *GIT_DEV,
                    *SANDBOX_BASE[SANDBOX_BASE.index("--dev") + 2:])
#: A sandboxed run's network (design §20): its own namespace (only its loopback), its own
#: empty /run, and a bridge: the egress proxy's socket for the run, bound in at NET_SOCKET,
#: and a forwarder (socat) listening on the run's loopback at NET_PORT, where the proxy
#: variables (NET_ENV) point.
NET_SOCKET = "/run/taskboard/proxy.sock"
NET_PORT = 3128
NET_ARGS = ("--unshare-net", "--tmpfs", "/run")
NET_ENV = {**dict.fromkeys(("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy",
                            "http_proxy", "all_proxy"), f"http://127.0.0.1:{NET_PORT}"),
           "NO_PROXY": "", "no_proxy": ""}
#: What runs first in a run's sandbox, before its command ("$@", after three arguments):
#: with $1, the checkout of its worktree, made without one (WORKTREE_SCRIPT: the run's
#: sandbox is where a filter or Git LFS fetch that the branch names runs, as the run,
#: through its proxy), while with $2 the bridge starts: socat listening on the run's
#: loopback, each connection going to the proxy; the command starts once both are done,
#: socat saying it listens (its log read through a pipe, then drained by the same shell,
#: with no program of its own).  Its processes end with the command (bubblewrap's PID
#: namespace); with $3 (a script: the run's end, run_end()), they are killed once the
#: command ended, then the script runs in the same sandbox, and says on stderr what it
#: printed, each line after RUN_END_MARK and ": ", then " exited" and its exit code: the
#: end-of-run commit, made as blind as the run, in no sandbox of its own.
RUN_END_MARK = "taskboard: the run's end"
RUN_START = f"""ck=$1 net=$2 end=$3; shift 3
[ -z "$ck" ] || {{ git reset -q --hard --no-recurse-submodules >&2 & ck=$!; }}
if [ -n "$net" ]; then r=$(socat -d -d -b 262144 \\
    TCP-LISTEN:{NET_PORT},bind=127.0.0.1,reuseaddr,nodelay,fork \\
    UNIX-CONNECT:{NET_SOCKET} 2>&1 >/dev/null </dev/null |
    {{ while IFS= read -r l; do case $l in *"listening on"*) echo up; exec >/dev/null
      while read -r l; do :; done;; esac; done; }} 2>/dev/null &)
  [ "$r" = up ] || {{ echo "taskboard: the sandbox's network bridge (socat) did not start" >&2
    exit 126; }}
fi
[ -z "$ck" ] || wait "$ck" || {{
  echo "taskboard: the task's worktree could not be checked out in the sandbox" >&2; exit 126; }}
[ -n "$end" ] || exec "$@"
"$@"; s=$?; kill -s KILL -- -1 2>/dev/null
o=$(eval "$end" </dev/null 2>&1); c=$?; IFS='
'; set -f; for l in $o; do printf '%s: %s\n' "{RUN_END_MARK}" "$l"; done >&2
printf '%s exited %s\n' "{RUN_END_MARK}" "$c" >&2; exit "$s\""""
#: A sandboxed preview's dev server (design §21) is reached through a folder of the data dir
#: bound in at PREVIEW_FOLDER (TB_PREVIEW), where PREVIEW_BRIDGE's socat listens on a UNIX
#: socket (PREVIEW_SOCKET) for the board and connects each connection to the dev server's
#: $PORT on the sandbox's own loopback (copying up to 256 KiB a read, not socat's 8 KiB:
#: a 200 KB asset in one or two, with Nagle off); then the preview's command (its $1) runs.
PREVIEW_FOLDER = "/run/taskboard/preview"
PREVIEW_SOCKET = "port.sock"
PREVIEW_BRIDGE = f"""command -v socat >/dev/null || {{
  echo "taskboard: socat, the preview's bridge out of its sandbox, is not installed" >&2
  exit 126; }}
socat -b 262144 UNIX-LISTEN:{PREVIEW_FOLDER}/{PREVIEW_SOCKET},fork,unlink-early \\
  TCP:127.0.0.1:"$PORT",nodelay </dev/null >/dev/null 2>&1 &
exec sh -c "$1\""""
#: The sandbox of a run (design §17), built where it is spawned (here or on a host) by
#: `sh`, from the run's variables: TB_BWRAP, TB_BASE (the board's folder there: hidden),
#: TB_WORDS (how many words of the argv are the CLI's own command), TB_SHOW (more programs
#: to run), TB_READ_ONLY (a planner's or verifier's checkout), TB_STATE (its CLI's state
#: under home, and ~/.cache: writable, the project's own copies kept in TB_KEEP, made from
#: the person's the first time but for TB_PRIVATE, ~/.cache empty; two runs of a project
#: may start at once, so one makes a copy while the other waits on TB_KEEP/.lock, and it
#: is made whole under a name of its own, then renamed into place), TB_LOGINS (login files
#: under home, shared so that a login refreshes), TB_MANAGERS (VERSION_MANAGERS), TB_NEVER
#: (never seen under home), TB_HIDE (other projects' folders, the token file), TB_RO and
#: TB_RW (sandboxPaths), TB_FILES (the run's own, read-only), TB_GIT (the repository's
#: common git folder as the board found it: git_dirs()), TB_NET (its egress proxy's
#: socket: NET_ARGS and the bridge), TB_CHECKOUT (an agent's run: its worktree, when it
#: may write it, checked out first when it has no index yet), TB_END (an agent's run: what
#: runs once it ended), TB_START (RUN_START, in front of its command for those three),
#: TB_PREVIEW (a preview's bridge folder, bound at PREVIEW_FOLDER: design §21); and for
#: the board's own git on the repository (WORKTREE_SCRIPT, WORKTREE_REMOVE, PICK_SCRIPT),
#: TB_GIT_WRITE (all of TB_GIT writable) and TB_OUT (its worktrees' folder, writable).
#: Later mounts cover earlier ones: home hidden, what the run may use shown (each `PATH`
#: folder under home once, by its version manager's folders when it is inside one, then
#: the programs' own folders, none inside one shown already: the same files with fewer
#: mounts, each of which costs bubblewrap time), the board's
#: folder hidden again, then the checkout and the git metadata a commit writes, read-only
#: what must never be written (hooks, config, what points git elsewhere), the run's files,
#: and last what no bind may show: other projects and credential stores (under home,
#: only where a bind shows them: shown(), of real paths, rp(); home's tmpfs hides the rest
#: with no mount of its own).  The metadata bound is TB_GIT's and its worktree's admin folder
#: (the one whose `gitdir`, read-only to every run, names the checkout: looked for first
#: under the checkout's own name, as git names it, for the shell reads a file a byte per
#: call, and each worktree of a repository cost every sandbox of it some), never what git
#: or a link in the checkout says, and only real folders, never a link a run planted
#: (design §17 v6); a run in a task's
#: worktree sees its own copy of `refs`, `logs` and `packed-refs` ($t: OWN_REFS), so it
#: moves no other branch (a read-only one, the verifier, sees the repository's: not what
#: the task's run made of `main` in its copy); in the person's checkout (no autoBranch:
#: its .git, or a worktree of theirs) it works on their branches as they do, but the
#: remote-tracking refs and their logs stay read-only, so the board's fetch never follows
#: a link a run left.
#: A checkout's own .git (no autoBranch) stays writable but for its config, hooks, info,
#: worktrees and modules (made empty first when missing, so that no link takes their
#: place): git writes HEAD and the index by renaming into it.  A path given (sandboxPaths)
#: that is a link outside home is bound where it leads (bubblewrap follows a link it binds
#: onto, into home's tmpfs, where the target is not).  What the machine's read-only root
#: already shows as it is (rooted(): not under home, the board's folder or a folder the
#: sandbox mounts anew) is shown read-only by no bind of its own.  p() quotes
#: each argument for the `eval` that makes them bubblewrap's (no temporary file, no fork);
#: $dir is the checkout, "$@" the run's argv, which becomes bubblewrap's.
SANDBOX_RUN = r"""if [ -n "${TB_SANDBOX-}" ]; then
  q=
  { p() { case $1 in --*bind*) rp "$3" || r_=$3; bound=$bound$nl$r_;; esac
      for _a; do _r=; while :; do case $_a in *\'*) _r=$_r${_a%%\'*}"'\\''"
          _a=${_a#*\'};; *) break;; esac; done; q="$q '$_r$_a'"; done; }
    rp() { if [ -d "$1" ]; then cd -P -- "$1" 2>/dev/null && r_=$PWD
      else cd -P -- "${1%/*}/" 2>/dev/null && r_=${PWD%/}/${1##*/}; fi && cd -- "$here"; }
    shown() { for b in $bound; do case $1/ in "${b%/}"/*) return 0;; esac
        case $b/ in "$1"/*) return 0;; esac; done; return 1; }
    each() { m=$1; shift; for x; do r_=$x; if [ -L "$x" ]; then case $x/ in "$h"/*) ;;
          *) r_=$(readlink -f -- "$x") || r_=$x;; esac; fi
        [ "$m" = --ro-bind-try ] && rooted "$r_" && continue; p "$m" "$r_" "$r_"; done; }
    rooted() { rp "$1" || return 1; case $r_/ in "$h"/*|"$TB_BASE"/*|/tmp/*|/var/tmp/*|/run/*|\
        /var/run/*|/dev/*|/proc/*) return 1;; esac; }
    once() { a=$1; while [ -n "$a" ]; do case $seen$nl in *"$nl$a$nl"*) return;; esac
        a=${a%/*}; done; seen=$seen$nl$1; rooted "$1" || p --ro-bind-try "$1" "$1"; }
    inst() { x=$1; while :; do d=${x%/*}; [ "${d##*/}" = bin ] && d=${d%/*}
      case $d in "$h"|"$h"/.local|"$h"/.config) d=${x%/*};; esac
      [ "$d" = "$h" ] || once "$d"
      [ -L "$x" ] || break; x=$(readlink -f -- "$x"); done; }
    here=$PWD; cd -P -- "$HOME" && h=$PWD; cd -P -- "$dir" && k=$PWD/.git; cd -- "$here"
    nl='
'; if [ -n "$TB_STATE" ]; then p @BASE@; else p @GITBASE@; fi; p --tmpfs "$h"
    bound=; seen=; set -f
    IFS=:; for d in $PATH; do case $d in "$h"/*)
      o=; IFS=$nl; for m in $TB_MANAGERS; do case $d in "$h/${m%%=*}"|"$h/${m%%=*}"/*)
        IFS=,; for r in ${m#*=}; do once "$h/$r"; case $d in "$h/$r"/*) o=1;; esac
        done;; esac; done
      [ -n "$o" ] || once "$d"
      IFS=:;; esac; done
    IFS=$nl
    n=0; for w in "$@"; do n=$((n + 1)); [ "$n" -gt "$TB_WORDS" ] && break
      [ "$n" = 1 ] && w=$(command -v -- "$w"); case $w in /*) inst "$w";; esac; done
    for x in $TB_SHOW; do inst "$x"; done
    each --ro-bind-try "$h/.gitconfig" "$h/.config/git" $TB_RO
    for x in $TB_STATE; do
      s=$TB_KEEP/${x%/}; x=$h/${x%/}
      if [ ! -e "$s" ]; then mkdir -p -m 700 -- "${s%/*}" || exit 126
        exec 9>>"$TB_KEEP/.lock"; ! command -v flock >/dev/null || flock 9 || exit 126
        if [ ! -e "$s" ]; then t=$s.part; rm -rf -- "$t" || exit 126
          if [ "$x" = "$h/.cache" ] || [ ! -e "$x" ]; then
            case $s in */*.json) echo '{}' > "$t";; *) mkdir -m 700 -- "$t";; esac
          elif [ -d "$x" ]; then mkdir -m 700 -- "$t" && set +f &&
            for e in "$x"/* "$x"/.[!.]* "$x"/..?*; do [ -e "$e" ] || [ -L "$e" ] || continue
              case $nl$TB_PRIVATE$nl in *"$nl${e##*/}$nl"*) continue;; esac
              cp -a -- "$e" "$t/" || exit 126; done; set -f
          else cp -a -- "$x" "$t"; fi && mv -- "$t" "$s" || exit 126; fi
        exec 9>&-; fi
      p --bind "$s" "$x"
    done
    for x in $TB_LOGINS; do [ -f "$h/$x" ] && p --bind "$h/$x" "$h/$x"; done
    each --bind-try $TB_RW
    p --tmpfs "$TB_BASE"
    if [ -n "$TB_READ_ONLY" ]; then p --ro-bind "$dir" "$dir"; else p --bind "$dir" "$dir"; fi
    c=$TB_GIT; g=; t=; ck=
    if [ -n "$c" ] && [ -d "$c" ] && [ ! -L "$c" ]; then
      set +f; n=${k%/.git}
      for x in "$c/worktrees/${n##*/}/gitdir" "$c"/worktrees/*/gitdir; do
        [ -f "$x" ] && [ ! -L "$x" ] && IFS= read -r l < "$x" && [ "$l" = "$k" ] &&
          g=${x%/gitdir} && break
      done
      set -f
      case $k in "${c%/.git}"/*) rw=--bind;; *) rw=;; esac
      if [ -n "$TB_GIT_WRITE" ]; then p --bind "$c" "$c"
      elif [ -n "$rw" ] && [ "$c" = "${c%/.git}/.git" ]; then
        [ -n "$TB_READ_ONLY" ] && rw=--ro-bind
        p "$rw" "$c" "$c"
        for x in config hooks info worktrees modules; do
          [ -e "$c/$x" ] || [ -L "$c/$x" ] || [ "$x" = config ] || mkdir -- "$c/$x"
          [ -e "$c/$x" ] && [ ! -L "$c/$x" ] && p --ro-bind "$c/$x" "$c/$x"; done
      else
        p --ro-bind "$c" "$c"
        t=${k%/.git}; t=${t%/*}/.refs/${t##*/}; [ -n "$g" ] && [ -d "$t/refs" ] || t=
        w="objects${nl}refs${nl}logs"; [ -n "$t" ] && w=objects
        if [ -z "$TB_READ_ONLY" ]; then for x in $w; do
            [ -d "$c/$x" ] && [ ! -L "$c/$x" ] && p --bind "$c/$x" "$c/$x"; done
          [ -n "$t" ] && [ -d "$c/logs" ] && [ ! -L "$c/logs" ] && {
            p --bind "$t/refs" "$c/refs" --bind "$t/logs" "$c/logs"
            [ -f "$t/packed-refs" ] && [ -f "$c/packed-refs" ] && [ ! -L "$c/packed-refs" ] &&
              p --ro-bind "$t/packed-refs" "$c/packed-refs"; }
          [ -n "$g" ] && p --bind "$g" "$g" && [ -n "$TB_CHECKOUT" ] && [ ! -e "$g/index" ] &&
            ck=1; fi
        if [ -n "$g" ]; then for x in commondir gitdir config.worktree; do
            if [ -f "$g/$x" ] && [ ! -L "$g/$x" ]; then p --ro-bind "$g/$x" "$g/$x"
            elif [ ! -e "$g/$x" ]; then p --ro-bind /dev/null "$g/$x"; fi; done
          p --ro-bind "$dir/.git" "$dir/.git"; fi
      fi
      [ -z "$TB_GIT_WRITE" ] && [ -z "$t" ] && for x in refs/remotes logs/refs/remotes; do
        [ -d "$c/$x" ] && [ ! -L "$c/$x" ] && p --ro-bind "$c/$x" "$c/$x"; done
    fi
    for x in $TB_OUT; do { [ -d "$x" ] || mkdir -p -m 700 -- "$x"; } && p --bind "$x" "$x"
    done
    each --ro-bind-try $TB_FILES
    for x in $TB_HIDE; do
      [ -e "$x" ] || continue; rp "$x" || r_=$x
      case $r_/ in "$h"/*) shown "$r_" || continue;; esac  # else / shows it
      if [ -f "$x" ]; then p --ro-bind /dev/null "$x"; continue; fi
      [ -d "$x" ] || continue
      case $dir/ in "$x"/*) continue;; esac
      case $c/ in "$x"/*) continue;; esac
      p --tmpfs "$x"; done
    for x in $TB_NEVER; do [ -e "$h/$x" ] || continue; rp "$h/$x" || r_=$h/$x
      shown "$r_" || continue
      if [ -d "$h/$x" ]; then p --tmpfs "$h/$x"; else p --ro-bind /dev/null "$h/$x"; fi; done
    nb=; if [ -n "$TB_NET" ]; then [ -L /var/run ] || p --tmpfs /var/run; p @NET@
      if [ "$TB_NET" != - ]; then p --ro-bind "$TB_NET" @SOCKET@; nb=1; fi
      [ -n "$TB_PREVIEW" ] && p --bind "$TB_PREVIEW" @PREVIEW@
    else set +f  # the board's own git: no network of its own, but no agent of the person's
      for u in /run/user/*; do [ -O "$u" ] && p --tmpfs "$u"; done; set -f
    fi
    o=$q; q=; p --; [ -z "$ck$nb$TB_END" ] || p sh -c "$TB_START" sh "$ck" "$nb" "$TB_END"
    st=$q; q=$o
  }
  unset IFS; set +f
  eval "set -- $TB_BWRAP $q --chdir \"\$dir\" $st \"\$@\""
  unset TB_SANDBOX TB_BWRAP TB_BASE TB_WORDS TB_SHOW TB_READ_ONLY TB_STATE TB_KEEP TB_LOGINS \
    TB_PRIVATE TB_MANAGERS TB_NEVER TB_HIDE TB_RO TB_RW TB_FILES TB_GIT TB_GIT_WRITE TB_OUT \
    TB_NET TB_START TB_CHECKOUT TB_PREVIEW TB_END
fi""".replace("@GITBASE@", shlex.join(GIT_SANDBOX_BASE), 1) \
    .replace("@BASE@", shlex.join(SANDBOX_BASE), 1).replace("@NET@", shlex.join(NET_ARGS), 1) \
    .replace("@SOCKET@", NET_SOCKET, 1).replace("@PREVIEW@", PREVIEW_FOLDER, 1)
#: `sh -c SANDBOXED sh DIR ARGV...`: ARGV in DIR, in the sandbox SANDBOX_RUN builds from the
#: variables sandbox_env() gives, as bubblewrap (exec); unsandboxed without them.  With
#: TB_AFTER (the board's own script), that script runs after it, outside the sandbox, in
#: the same process (no fork: its `exit` too ends in the trap), which exits as ARGV did.
SANDBOXED = 'dir=$1; shift; after=${TB_AFTER-}; unset TB_AFTER\n' + SANDBOX_RUN + \
    '\n[ -n "$after" ] || exec "$@"\n"$@"; s=$?; trap \'exit "$s"\' EXIT; eval "$after"'
#: Under the home directory: each agent CLI's own state (settings, sessions: resume works),
#: which a sandboxed run sees as its project's copy, writable, with a ~/.cache of the
#: project's: nothing a run writes there reaches the person's own CLI, another project or
#: an unsandboxed run (design §17 v6).
CLI_STATE = {"claude": (".claude/", ".claude.json"), "codex": (".codex/",),
             "gemini": (".gemini/",), "opencode": (".config/opencode/", ".local/share/opencode/",
                                                   ".local/state/opencode/")}
#: The version managers people use (design §17 v6): a `PATH` folder under home inside the
#: first (a shim, a tool's link) needs the others, read-only, to find its tool; never a
#: folder that holds other dotfolders of home (the programs' own folders are bound by
#: their resolved files: SANDBOX_RUN's inst).
VERSION_MANAGERS = {
    ".pyenv": (".pyenv",), ".rbenv": (".rbenv",), ".asdf": (".asdf", ".tool-versions"),
    ".local/share/mise": (".local/share/mise", ".config/mise"), ".nvm": (".nvm",),
    ".volta": (".volta",), ".local/share/fnm": (".local/share/fnm",), ".fnm": (".fnm",),
    ".sdkman": (".sdkman",), ".cargo": (".cargo", ".rustup"), "go": ("go",),
    ".local/bin": (".local/share/uv", ".local/share/pipx", ".local/pipx")}
#: What of a CLI's state folder is the person's own work elsewhere (sessions' transcripts,
#: prompt history, snapshots of other folders' files), never copied into a project's copy:
#: a run of one project reads nothing of the person's other work.
CLI_PRIVATE = {"claude": ("projects", "todos", "shell-snapshots", "file-history",
                          "history.jsonl", "debug", "session-env"),
               "codex": ("sessions", "archived_sessions", "history.jsonl", "log"),
               "gemini": ("tmp", "history"), "opencode": ("storage", "snapshot", "log")}
#: The login files in CLI_STATE, the person's own in every copy: a login refreshed by a run
#: or by the person holds for both.
CLI_LOGINS = {"claude": (".claude/.credentials.json",), "codex": (".codex/auth.json",),
              "gemini": (".gemini/oauth_creds.json",),
              "opencode": (".local/share/opencode/auth.json",)}


def git_dirs(path: str) -> tuple[str, str] | None:
    """The top of the git repository around path and its common git folder, found as git
    finds them but without git, and without trusting what a run could write (design §17
    v6): a `.git` folder is the common one (a `commondir` planted in it is not followed);
    a `.git` file (a worktree's, read-only to its runs) names its admin folder, whose
    `commondir` (read-only too) names the common one.  None outside a repository."""
    top = os.path.realpath(path)
    while True:
        dot = os.path.join(top, ".git")
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(dot).st_mode):
                return top, dot
        text = read_regular(dot, 4096)
        if text is not None:
            if not text.startswith("gitdir: "):
                return None
            admin = os.path.join(top, text[8:].strip())
            common = (read_regular(os.path.join(admin, "commondir"), 4096) or "").strip()
            return top, os.path.realpath(os.path.join(admin, common))
        if os.path.dirname(top) == top:
            return None
        top = os.path.dirname(top)


def try_sandbox(bwrap: list[str]) -> dict:
    """Try bubblewrap for real, a trivial command in the runs' namespaces: {engine,
    works, version, error} (the error its own words: missing, no user namespaces ...)."""
    code, out = run_command([*bwrap, *SANDBOX_BASE, *NET_ARGS, "--", "true"], timeout=15,
                            stderr=subprocess.STDOUT)
    state = {"engine": "bubblewrap", "works": code == 0, "version": None,
             "error": None if code == 0 else _cut(out.strip() or f"exit code {code}", 300)}
    if code == 0 and shutil.which("socat") is None:  # the bridge's forwarder (design §20)
        state.update(works=False, error="socat is not installed: a sandboxed run's only way "
                     "out, the bridge to the board's egress proxy, needs it (apt install socat)")
    if code is not None:
        code, out = run_command([*bwrap, "--version"], timeout=15)
        state["version"] = out.strip().removeprefix("bubblewrap ") if code == 0 else None
    if not state["works"]:
        log.warning("sandbox: bubblewrap (%s) does not work here: %s", shlex.join(bwrap),
                    state["error"])
    return state


#: A sandbox that did not work is tried again before a run goes without it, at most this
#: often (design §17 v6: `auto` retries it as `bubblewrap` does).
SANDBOX_RETRY_SECONDS = 10.0


def sandbox_here(config: dict) -> dict:
    """try_sandbox() for the runs of this machine (under --no-auth too: a sandboxed run has
    its own network namespace and reaches only /mcp of the board, with its token: §20)."""
    return try_sandbox(config["bwrap"])


#: What a failed command says when the sandbox may be why (design §17 v6): not found (exit
#: code 127: a tool or a version manager's shim under a hidden home), a read-only file
#: system, access refused (under home: sandbox_sign).
SANDBOX_SIGNS = re.compile(r"exit(?:ed with)? code 127|command not found|Read-only file "
                           r"system|Permission denied|EACCES", re.IGNORECASE)
#: What the task's log says then, once a run.
SANDBOX_HINT = ("the sandbox may be why ({sign}): a sandboxed run sees the machine read-only "
                "and your home hidden but for the agent CLI, the PATH folders under it and "
                "its own state; give it what it needs with the project's sandboxPaths "
                "(readOnly, readWrite), or set its sandbox to none")


#: The account part of a CLI's state file (design §17 v6): the person's own, put into the
#: project's copy before each sandboxed run here, so that the person's login (or a new
#: account) holds there too; the rest of the copy (its projects, MCP servers) stays its own.
CLI_ACCOUNT = {"claude": (".claude.json", ("oauthAccount", "userID", "primaryApiKey",
                                           "customApiKeyResponses", "hasCompletedOnboarding"))}


def share_account(sandbox: dict, base: str) -> None:
    """Before a sandboxed run here: the account part (CLI_ACCOUNT) of the project's copy of
    its CLI's state file becomes the person's, written in place (runs of the project may
    have it open) and only when it differs; a copy not made yet is made whole at the run's
    start (SANDBOX_RUN).  What cannot be read as JSON is left as it is."""
    name, keys = CLI_ACCOUNT.get(sandbox["agent"] or "", (None, ()))
    if name is None:
        return
    copy = os.path.join(base, "cli-state", str(sandbox["project"]), name)
    try:
        mine = json.loads(read_regular(os.path.join(os.path.expanduser("~"), name),
                                       CLI_ACCOUNT_LIMIT) or "null")
        kept = json.loads(read_regular(copy, CLI_ACCOUNT_LIMIT) or "null")
    except ValueError:
        return
    if not isinstance(mine, dict) or not isinstance(kept, dict):
        return
    account = {key: kept[key] for key in keys if key in kept}
    if account == {key: mine[key] for key in keys if key in mine}:
        return
    kept = {key: value for key, value in kept.items() if key not in keys} | {
        key: mine[key] for key in keys if key in mine}
    with contextlib.suppress(OSError), \
            open(os.open(copy, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "w") as f:
        f.write(json.dumps(kept, indent=2))
        f.truncate()


#: The most of a CLI's state file share_account() reads.
CLI_ACCOUNT_LIMIT = 16 << 20


#: What a failed command says when the sandbox's network may be why (design §20): a tool
#: that went round the proxy (its own namespace has nothing to connect to, no name server).
NET_SIGNS = re.compile(r"ECONNREFUSED|Connection refused|Couldn't connect to server|"
                       r"ENETUNREACH|Network is unreachable|"
                       r"ENOTFOUND|EAI_AGAIN|Could not resolve host|Temporary failure in name "
                       r"resolution|Name or service not known", re.IGNORECASE)
#: What the task's log says then, once a run.
NET_HINT = ("the sandbox's network may be why ({sign}): a sandboxed run reaches other "
            "machines only through the board's egress proxy (HTTPS_PROXY, HTTP_PROXY and "
            "ALL_PROXY are set for it), as its project's network policy allows; a tool that "
            "ignores those variables reaches nothing, and each host the proxy refused is in "
            "this log (network)")


def sandbox_sign(text: str, home: str | None) -> str | None:
    """What in a sandboxed command's failure says the sandbox may be why, or None
    (access refused counts only when the text names a path under home, the home of the
    machine the run is on: None when not known)."""
    under_home = home is not None and home.rstrip("/") + "/" in text
    return next((found.group(0) for found in SANDBOX_SIGNS.finditer(text) if under_home or
                 found.group(0).lower() not in ("permission denied", "eacces")), None)


def sandbox_env(sandbox: dict, base: str, show=(), files=()) -> dict:
    """The variables SANDBOX_RUN builds a run's sandbox from (design §17).  `sandbox`:
    {agent (None: the board's own git, no CLI state), project (its id: its CLI state's
    copy), command (the CLI's own words), files (the run's own, read-only: its MCP config,
    its attachments), paths (sandboxPaths), read_only (a planner's or verifier's: its
    checkout too), hide (other projects' folders, the token file), git (the repository's
    common git folder: git_dirs()), out (the board's own git on the repository: its
    worktrees' folder, writable with all of `git`), after (the board's own script, run
    outside the sandbox once the command ended: SANDBOXED), net (its egress proxy's
    socket: its own network and the bridge, design §20), offline (without `net`: its own
    network and no way out: a check after its run, the board's own git), preview (a
    preview's folder for the socket of its bridge, design §21), end (an agent's run: the
    script its sandbox runs once the agent ended, run_end())}; `base`: the
    board's folder where the run happens (the data dir, a host's baseDir); `show`: more
    programs the run starts."""
    paths = sandbox.get("paths") or {}
    return {"TB_SANDBOX": "1", "TB_BWRAP": shlex.join(runtime.config["bwrap"]), "TB_BASE": base,
            "TB_WORDS": str(len(sandbox["command"])), "TB_SHOW": "\n".join(show),
            "TB_READ_ONLY": "1" if sandbox.get("read_only") else "",
            "TB_STATE": "\n".join([*CLI_STATE.get(sandbox["agent"], ()), ".cache/"]
                                  if sandbox["agent"] else ()),
            "TB_KEEP": os.path.join(base, "cli-state", str(sandbox.get("project"))),
            "TB_LOGINS": "\n".join(CLI_LOGINS.get(sandbox["agent"], ())),
            "TB_PRIVATE": "\n".join(CLI_PRIVATE.get(sandbox["agent"], ())),
            "TB_MANAGERS": "\n".join(f"{where}={','.join(roots)}"
                                     for where, roots in VERSION_MANAGERS.items()),
            "TB_NEVER": "\n".join(NEVER_VISIBLE), "TB_HIDE": "\n".join(sandbox.get("hide") or ()),
            "TB_RO": "\n".join(paths.get("readOnly", ())),
            "TB_RW": "\n".join(paths.get("readWrite", ())),
            "TB_FILES": "\n".join([*sandbox["files"], *files]),
            "TB_GIT": sandbox.get("git") or "", "TB_GIT_WRITE": "1" if sandbox.get("out") else "",
            "TB_OUT": "\n".join(sandbox.get("out") or ()), "TB_AFTER": sandbox.get("after") or "",
            "TB_NET": sandbox.get("net") or ("-" if sandbox.get("offline") else ""),
            "TB_START": RUN_START if sandbox.get("net") or sandbox["agent"] else "",
            "TB_CHECKOUT": "1" if sandbox["agent"] else "",
            "TB_PREVIEW": sandbox.get("preview") or "", "TB_END": sandbox.get("end") or ""}


def in_sandbox(argv: list[str], cwd: str, env: dict, sandbox: dict | None, base: str,
               show=(), files=(), check: bool = False) -> tuple[list[str], dict]:
    """A command of a run (its agent; with `check`, its stop check: only its first word is
    a program to show) and its environment, in the run's sandbox when it has one: the one
    place a run's command is wrapped, here or on a host (see sandbox_env() for `base`,
    `show` and `files`)."""
    if sandbox is None:
        return argv, env
    if check:  # a check's own: no end of a run's (run_end())
        sandbox = {**sandbox, "command": argv[:1], "end": None}
    return ["sh", "-c", SANDBOXED, "sh", cwd, *argv], {
        **env, **(NET_ENV if sandbox.get("net") else {}),
        **sandbox_env(sandbox, base, show=show, files=files)}


#: A base URL in a CLI's own settings (OpenCode's `baseURL` in OPENCODE_CONFIG_CONTENT,
#: Codex's `base_url` in its config.toml), which its runs always reach (design §20).
API_URL_RE = re.compile(r"""\bbase_?url["']?\s*[:=]\s*["'](https?://[^"'\s]+)""", re.IGNORECASE)


def api_urls(agent: str, env: dict) -> set[tuple[str, int]]:
    """The (host, port) of each base URL a run of `agent` is set to use: a `*_BASE_URL`
    variable of its environment (ANTHROPIC_BASE_URL, OPENAI_BASE_URL,
    GOOGLE_GEMINI_BASE_URL ...), and its CLI's own settings (API_URL_RE)."""
    urls = [value for key, value in env.items() if key.endswith("_BASE_URL")]
    texts = [env.get("OPENCODE_CONFIG_CONTENT") or ""]
    if agent == "codex":
        home = env.get("CODEX_HOME") or os.path.join(env.get("HOME") or "~", ".codex")
        texts.append(read_regular(os.path.join(os.path.expanduser(home), "config.toml"),
                                  1 << 20) or "")
    urls += [found.group(1) for text in texts for found in API_URL_RE.finditer(text)]
    hosts = set()
    for url in urls:
        with contextlib.suppress(ValueError):
            parts = urllib.parse.urlsplit(url.strip())
            if parts.hostname and parts.scheme in ("http", "https"):
                hosts.add((_net_host(parts.hostname), parts.port or (
                    443 if parts.scheme == "https" else 80)))
    return hosts


def _net_host(host: str) -> str:
    """A host as the policy compares it: lower case, an address as ipaddress spells it."""
    host = host.strip("[]").lower().rstrip(".")
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))
    return host


def public_address(address: str) -> bool:
    """Whether an address is on the internet: not loopback, link-local, private, shared,
    reserved or multicast (an IPv4-mapped IPv6 address as its IPv4 one)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    ip = getattr(ip, "ipv4_mapped", None) or ip
    return ip.is_global and not ip.is_multicast


class NetPolicy:
    """A sandboxed run's network policy (design §20), its project's `network` and
    `networkAllow` with its CLI's API hosts (AGENTS' `api`, api_urls())."""

    def __init__(self, mode: str, allow: list | None, agent: str | None, env: dict):
        self.mode = mode
        self.patterns = [found for found in map(host_pattern, allow or ()) if found]
        self.api = AGENTS[agent].api if agent in AGENTS else ()
        self.exact = api_urls(agent, env) if agent in AGENTS else set()

    def judge(self, host: str, port: int) -> tuple[str | None, bool]:
        """(why a connection to host:port is refused, None when it may go; whether its
        addresses must be public: not when networkAllow or a base URL names it exactly)."""
        host = _net_host(host)
        if self.mode == "none":
            return "network none: no host is reached", False
        if (host, port) in self.exact or any(
                not wild and name == host and at in (None, port)
                for name, at, wild in self.patterns):
            return None, False
        listed = host in self.api or any(wild and host.endswith("." + name) and at in (
            None, port) for name, at, wild in self.patterns)
        if self.mode == "allowlist" and not listed:
            return "allowlist: not in networkAllow", True
        return None, True


# =============================================================================
# MACHINES: THIS ONE
# =============================================================================
# Where a run happens: this machine (ThisMachine) or an SSH host (HostLink, in MACHINES:
# SSH HOSTS), the one seam every run goes through; and git, as the board runs it here.

#: git never waits for a password on a terminal: a push without credentials fails at once.
#: It runs no hook nor fsmonitor and does not recurse into nested repositories (whose
#: config an agent writes): what an agent wrote (a tracked hooks folder) never runs as the
#: board.  What git has no switch for (a filter, `git add` looking into a nested
#: repository) is why the board's git on a run's checkout runs sandboxed (git_sandbox()).
GIT_NEUTRAL = (("core.hooksPath", os.devnull), ("core.fsmonitor", "false"),
               ("submodule.recurse", "false"), ("diff.ignoreSubmodules", "all"))
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "echo", "SSH_ASKPASS": "echo",
           "GIT_SSH_COMMAND": "ssh -o BatchMode=yes -o ConnectTimeout=20", "LC_ALL": "C",
           "GIT_CONFIG_COUNT": str(len(GIT_NEUTRAL)), **{
               f"GIT_CONFIG_{part}_{i}": text for i, pair in enumerate(GIT_NEUTRAL)
               for part, text in zip(("KEY", "VALUE"), pair)}}


def git(cwd: str, *args: str, timeout: float = 60) -> str:
    """Run `git args` in cwd; its output, or GitError with git's own message."""
    return git_output(args, *run_command(["git", *args], cwd, timeout, stderr=subprocess.STDOUT,
                                         env={**os.environ, **GIT_ENV}))


def git_output(args, code: int | None, out: str) -> str:
    """A git command's output (here or on a host), or GitError with git's last word."""
    if code != 0:
        detail = out.strip().splitlines()[-1] if out.strip() else f"exit code {code}"
        raise GitError(f"git {args[0]} failed: {_cut(detail, 300)}")
    return out


def git_lock(path: str) -> "gevent.lock.RLock":
    """The lock that serialises git operations on one repository (its worktrees share
    it: the key is the repository's common .git directory, as git_dirs() finds it)."""
    key = (git_dirs(path) or (None, os.path.realpath(path)))[1]
    return runtime.git_locks.setdefault(key, gevent.lock.RLock())


def git_head(cwd: str) -> str | None:
    """The commit checked out in cwd, or None when it is not a git repository."""
    code, out = run_command(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd, timeout=10)
    return out.strip() or None if code == 0 else None


def head_file(cwd: str, name: str, limit: int) -> str | None:
    """The first `limit` characters of a file as the checkout's HEAD holds it (git's blob:
    no filter runs), None when it holds none."""
    code, out = run_command(["sh", "-c", 'git cat-file blob "HEAD:$1" | head -c "$2"', "sh",
                             name, str(4 * limit)], cwd, 30, env={**os.environ, **GIT_ENV})
    return out[:limit] if code == 0 and out else None


def repo_root(cwd: str) -> str:
    """The top of the git repository around cwd (cwd itself outside one), as git_dirs()
    finds it: never by asking git in a tree a run could write."""
    return (git_dirs(cwd) or (cwd,))[0]


def link_on_the_way(common: str, branch: str) -> str | None:
    """The first link on the way to a branch's ref or reflog file in the repository whose
    common git folder is `common` (git follows it when it writes there: a reflog line
    appended to a file of home), or None (design §17 v6: for the board's git that writes
    a ref outside a sandbox)."""
    for top in ("refs", "logs/refs"):
        path = common
        for part in [*top.split("/"), "heads", *branch.split("/")]:
            path = os.path.join(path, part)
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.lstat(path).st_mode):
                    return path
    return None


def worktree_path(task: dict) -> str:
    return os.path.join(runtime.data_dir, "worktrees", str(task["project_id"]), task["task_key"])


#: A task's worktree, kept or made (design §10, §15): the one description both machines run,
#: in the repository, hooks off: `sh -c WORKTREE_SCRIPT sh WORKTREE BRANCH FROM BASE ORDER
#: [LATER]`.  A checkout at WORKTREE is kept; else it is made again from BRANCH when that
#: exists, else on a new BRANCH from FROM or else BASE, as found in ORDER's namespaces (else
#: HEAD), never through a link on the way to the branch's ref or reflog.  With LATER, made
#: without checking its files out (its sandboxed run does: SANDBOX_RUN's TB_CHECKOUT), which
#: runs nothing of the branch's (no filter, no hook): outside a sandbox; without, a kept one
#: that such a run could not check out (no index) is checked out now.  It prints what it
#: did (kept, again, or new <ref>), the worktree's real path and its HEAD.
WORKTREE_SCRIPT = r"""set -e
wt=$1; b=$2; f=$3; pr=$4; order=$5; later=${6:+--no-checkout}
if [ -d "$wt" ] && d=$(git -C "$wt" rev-parse --git-dir 2>/dev/null); then echo kept
  case $d in /*) ;; *) d=$wt/$d;; esac
  [ -n "$later" ] || [ -e "$d/index" ] || git -C "$wt" reset -q --hard --no-recurse-submodules >&2
else
  prune
  mkdir -p "$(dirname "$wt")"
  if git rev-parse --verify -q "refs/heads/$b" >/dev/null; then
    git worktree add -q $later "$wt" "$b" >&2; echo again
  else
    from=HEAD
    for want in "$f" "$pr"; do for ns in $order; do
      if git rev-parse --verify -q "$ns$want" >/dev/null; then
        from=${ns#refs/heads/}$want; from=${from#refs/remotes/}; break 2
      fi
    done; done
    c=${GIT_COMMON_DIR:-$(git rev-parse --git-common-dir)}
    plain "$c" "refs/heads/$b" && plain "$c" "logs/refs/heads/$b" || exit 1
    git worktree add -q $later -b "$b" "$wt" "$from" >&2; echo "new $from"
  fi
fi
refs "$wt" "$b"
cd "$wt" && pwd -P && git rev-parse HEAD"""


def worktree_args(task: dict, project: dict, worktree: str, branch: str,
                  order: str, later: bool = False) -> list[str]:
    """WORKTREE_SCRIPT's arguments for a task's worktree (checked out `later` by its run);
    an attempt's starts from its task's branch when there is one."""
    return [worktree, branch, task.get("from_branch") or project["pr_base_branch"],
            project["pr_base_branch"], order, *(["later"] if later else [])]


#: A task's worktree removed, the other end of WORKTREE_SCRIPT, which both machines run in
#: the repository: `sh -c WORKTREE_REMOVE sh WORKTREE BRANCH BASE MERGED`.  BRANCH goes too
#: when MERGED, or when it has no commits of its own since BASE.
WORKTREE_REMOVE = r"""wt=$1; b=$2; base=$3; merged=$4
if [ -d "$wt" ]; then git worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf -- "$wt"; fi
unrefs "$wt"
prune
[ -n "$b" ] || exit 0
if [ -n "$merged" ] || { [ -n "$base" ] &&
    [ "$(git rev-list --count "$base..$b" 2>/dev/null)" = 0 ]; }; then
  git branch -D "$b" >/dev/null 2>&1
fi
true"""


def worktree_gone_args(task: dict, worktree: str, merged: bool) -> list[str]:
    """WORKTREE_REMOVE's arguments for a task's worktree."""
    return [worktree, task["branch_name"] or "", task["base_commit"] or "",
            "1" if merged else ""]


def worktree_made(code: int | None, out: str, where: str) -> tuple[str, str, str]:
    """What WORKTREE_SCRIPT did, the worktree's path and HEAD; GitError when it failed."""
    lines = out.strip().splitlines()
    if code != 0 or len(lines) < 3:
        raise GitError(f"the worktree{where} could not be made: "
                       f"{_cut(lines[-1] if lines else f'exit code {code}', 300)}")
    what, path, head = lines[-3:]
    return what, path, head


#: A worktree run's own refs (design §17 v6): SANDBOX_RUN shows it, over the repository's
#: `refs`, `logs` and `packed-refs`, a copy the board keeps beside its worktree
#: (`<worktrees>/.refs/<key>`): `refs` holding its branch alone, `packed-refs` every ref of
#: the repository as it was (read-only: one file, however many branches and tags there are),
#: `logs` its own; so that whatever it does to `main` or another task's branch moves the copy
#: only, and a run still reads them all.  `sync_refs WORKTREE BRANCH` (at the end of a
#: sandboxed run, after its commit, outside the sandbox: commit_leftovers()) puts what
#: BRANCH became in the copy on BRANCH in the repository, only from the value it had when
#: the copy was made (else it says so, on a line of its own: "refused: ...", and nothing
#: moves), never through a link, by git's update-ref alone (no filter, hook or driver to
#: run); it reads nothing when the copy was made after the branch was last written there.
#: `refs WORKTREE BRANCH` (at the start of each sandboxed run: WORKTREE_SCRIPT) syncs what a
#: run cut short left, then makes the copy again (the repository gets an empty
#: `packed-refs` when it has none, for the copy to be shown over); `unrefs WORKTREE`: the
#: copy goes (WORKTREE_REMOVE, PICK_SCRIPT).
OWN_REFS = r"""plain() {
  x=$1; IFS=/; for y in $2; do x=$x/$y
    if [ -L "$x" ]; then unset IFS; echo "refused: $x is a link"; return 1; fi; done
  unset IFS
}
at() {
  t=${1%/*}/.refs/${1##*/}; c=${GIT_COMMON_DIR:-$(git rev-parse --git-common-dir)}
  r=refs/heads/$2
}
sync_refs() {
  at "$@"; [ -f "$t/was" ] && read -r was wb < "$t/was" && [ "$wb" = "$2" ] &&
    plain "$t" "$r" >/dev/null && [ -f "$t/$r" ] && ! [ "$t/was" -nt "$t/$r" ] || return 0
  now=; IFS= read -r now < "$t/$r" || :
  [ "$now" != "$was" ] || return 0
  case $now in *[!0-9a-f]*|''|*[!0]*) ;; *) now=;; esac  # all zeros: update-ref deletes
  case $now in *[!0-9a-f]*|'')
    echo "refused: $2 in the run's copy of refs is not a commit"; return 0;; esac
  e=; if plain "$c" "$r" && plain "$c" "logs/$r" &&
      e=$(git update-ref -m "taskboard: the run's commits" "$r" "$now" "$was" 2>&1); then
    echo "$now $2" > "$t/was"
  else echo "refused: the run's commits ($now) were not put on $2 (at $was before it)" \
    "$(printf %s "$e" | tr '\n' ' ')"; fi
}
unrefs() { rm -rf -- "${1%/*}/.refs/${1##*/}"; }
copy_refs() {
  at "$@"; if [ -L "$c/refs" ] || [ -L "$c/logs" ] || [ -L "$c/packed-refs" ]; then
    echo "refused: the repository's refs, logs or packed-refs is a link"; return 1; fi
  [ -d "$c/logs" ] || mkdir -- "$c/logs"
  [ -e "$c/packed-refs" ] || : > "$c/packed-refs"
  { [ ! -d "$t" ] || rm -rf -- "$t/refs"; } && mkdir -p -- "$t/logs" "$t/${r%/*}" &&
    git for-each-ref --format='%(objectname) %(refname)' > "$t/packed-refs" || return 1
  was=; [ -f "$c/$r" ] && [ ! -L "$c/$r" ] && read -r was < "$c/$r"
  case $was in *[!0-9a-f]*|'') was=$(git rev-parse --verify -q "$r") || return 0;; esac
  echo "$was" > "$t/$r" && echo "$was $2" > "$t/was"
}"""


def sync_after(repo: str, worktree: str, branch: str, common: str | None) -> str:
    """The script that puts a worktree's branch where its run's copy of refs says (OWN_REFS's
    sync_refs, in the repository), as a sandbox's `after` (SANDBOXED's TB_AFTER)."""
    return f"cd -- {shlex.quote(repo)}\nset -- {shlex.join([worktree, branch])}\n" + \
        in_repository('sync_refs "$1" "$2"', common)


def in_repository(script: str, common: str | None, sandbox: dict | None = None,
                  own_refs: bool | None = None) -> str:
    """A script of the board's git work on a repository's worktrees (WORKTREE_SCRIPT,
    WORKTREE_REMOVE, PICK_SCRIPT, PRUNE, OWN_REFS) pinned to its common git folder as the
    board found it (GIT_COMMON_DIR: a `commondir` a run planted is not followed), refusing
    a `worktrees` folder that is a link (its prune would empty what it points at); stderr
    with stdout.  Its `prune` is `git worktree prune`, but nothing in a `sandbox`, where the
    worktrees it does not show (the person's own, other projects') would look gone: PRUNE
    runs outside it then (prune_outside()); its `refs` (OWN_REFS) only where the project's
    runs are sandboxed (`own_refs`; by default, in a `sandbox`), the only place a run sees
    the copy of refs."""
    pin = f"export GIT_COMMON_DIR={shlex.quote(common)}\n" if common else ""
    where = '"$GIT_COMMON_DIR"' if common else '"$(git rev-parse --git-common-dir)"'
    prune = ":" if sandbox else "git worktree prune"
    refs = 'sync_refs "$@"; copy_refs "$@"' if (
        sandbox is not None if own_refs is None else own_refs) else ":"
    return pin + f'exec 2>&1\nif [ -L {where}/worktrees ]; then\n' \
        '  echo "refused: the repository\'s worktrees folder is a link"; exit 1\nfi\n' \
        f"prune() {{ {prune}; }}\n{OWN_REFS}\nrefs() {{ {refs}; }}\n" + script


#: Stale worktrees forgotten: what the scripts above do as `prune`.
PRUNE = "prune"


def prune_outside(shell, common: str | None, sandbox: dict | None, path: str | None = None) \
        -> None:
    """After (or before) a sandboxed script of in_repository(), its prune, outside the
    sandbox, where every worktree of the repository is seen (shell: a machine's shell()
    in the repository); with `path` (a worktree to make, here), only when the repository
    holds it as a worktree that is gone."""
    if sandbox is not None and (path is None or _registered_gone(common, path)):
        shell(["sh", "-c", in_repository(PRUNE, common)], 60)


def _registered_gone(common: str | None, path: str) -> bool:
    """Whether the repository whose common git folder is `common` names `path` as one of
    its worktrees (an admin folder's `gitdir`) while it is gone."""
    if common is None or os.path.isdir(path):
        return common is None
    want = os.path.join(os.path.realpath(path), ".git")
    folder = os.path.join(common, "worktrees")
    with contextlib.suppress(OSError):
        return any((read_regular(os.path.join(folder, name, "gitdir"), 4096) or "").strip()
                   == want for name in os.listdir(folder))
    return False


def not_installed(agent: str) -> str:
    """Why a run of an agent whose command is not found cannot start, and what to do."""
    cli = AGENTS[agent]
    command = runtime.config["agents"][agent][0]
    flag = "--agent-command / " if agent == "claude" else ""
    return f"the {agent} agent command {command!r} is not installed: install it with " \
        f"`npm install -g {cli.package}` or set {flag}{cli.env}"


def mcp_config_path(run_id: int) -> str:
    return os.path.join(runtime.data_dir, "mcp", f"run-{int(run_id)}.json")


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def process_start(pid: int) -> int | None:
    """The kernel's start time of a process (clock ticks since boot), to tell it from a
    later process that got the same pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def kill_survivor(pid: int, started: int | None) -> bool:
    """Kill the process group of an agent a previous server left running, if it is still
    that agent (same pid, same start time, its own group)."""
    alive = process_start(pid)
    if alive is not None and (alive != started or _pgid(pid) != pid):
        return False  # the pid belongs to some other process now
    if alive is None and not any(_pgid(int(p)) == pid for p in os.listdir("/proc")
                                 if p.isdigit()):
        return False  # nothing of that group is left
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
        log.warning("killed agent process group %s left by a previous server", pid)
        return True
    return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


class ThisMachine:
    """The board's own machine, as a run's code sees it: the seam between where a run
    happens and what it does, whose other kinds are HostLink (an SSH host) and MissingHost
    (a deleted one).  Each gives what runs need: the agent's command and readiness, a
    task's worktree made and removed (WORKTREE_SCRIPT, WORKTREE_REMOVE), attachments and
    board tools of a run, spawn() (every agent process starts there, in_sandbox()), a
    short command in a folder, git, a repository and its lock, the stop check (sandboxed
    as its run), its slots, its branch brought home, and how the log says where."""
    host = None
    where = ""

    @property
    def home(self) -> str:
        """The home folder of the board's login."""
        return os.path.expanduser("~")

    def shell(self, cwd: str, reopen: bool = True, sandbox: dict | None = None):
        """run(argv, timeout) -> (exit code, stdout) in cwd, git's hooks off (GIT_ENV);
        with `sandbox`, in that sandbox (the board's own git on a checkout a run could
        write: git_sandbox())."""
        def run(argv, timeout=30):
            argv, env = in_sandbox(argv, cwd, {**os.environ, **GIT_ENV}, sandbox,
                                   os.path.realpath(runtime.data_dir))
            return run_command(argv, cwd, timeout, env=env)
        return run

    def git_dir(self, project: dict) -> str | None:
        """The common git folder of the project's repository (git_dirs()): what a sandbox
        of its runs binds, never what git in a checkout says."""
        return (git_dirs(project["working_dir"]) or (None, None))[1]

    def git(self, cwd: str, *args: str, timeout: float = 60) -> str:
        return git(cwd, *args, timeout=timeout)

    def head(self, cwd: str) -> str | None:
        return git_head(cwd)

    def repo_lock(self, path: str) -> "gevent.lock.RLock":
        return git_lock(path)

    def neighbours(self, project_id: int) -> list[int]:
        """The other projects a run's end frees a slot for: none here (slots are per
        project)."""
        return []

    def full(self) -> str | None:
        """Why the machine cannot take another agent now, or None: here each project's
        maxConcurrent alone says."""
        return None

    def runs_changed(self) -> None:
        """A run there started or ended: what the machine tells (nothing here)."""

    def bring_home(self, task: dict, project: dict) -> str | None:
        """Bring an approved task's branch into workingDir's repository; the folder it is
        in now, or None when it needed no bringing (here: it is there) or could not come
        (logged)."""
        return None

    def kill_survivor(self, pid: int, started: int | None) -> None:
        """At start-up: a run's process group a previous server left there goes."""
        kill_survivor(pid, started)

    def begin(self, start, *args) -> None:
        """Start a run (start(*args)): here at once."""
        start(*args)

    def has_git(self, project: dict) -> bool:
        """Whether the project's branches can be made there."""
        return git_head(project["working_dir"]) is not None

    def worktree_at(self, cwd: str) -> bool:
        """Whether a run's cwd is a worktree of the board's (not workingDir itself) that
        was checked out: one its sandboxed run could not check out (SANDBOX_RUN's
        TB_CHECKOUT) has no index, and nothing of an agent's."""
        if not (os.path.isdir(cwd) and cwd.startswith(
                os.path.join(runtime.data_dir, "worktrees") + os.sep)):
            return False
        admin = (read_regular(os.path.join(cwd, ".git"), 4096) or "").removeprefix("gitdir: ")
        return os.path.exists(os.path.join(cwd, admin.strip(), "index"))

    def agent_command(self, agent: str) -> tuple[list | None, str | None]:
        """An agent CLI's command line there (None: as configured) and why it cannot
        start (None: it can)."""
        on_path = shutil.which(runtime.config["agents"][agent][0]) is not None
        return None, None if on_path else not_installed(agent)

    def missing_folder(self, project: dict) -> str | None:
        """Why the project's runs cannot start in its folder here (it is gone), or None."""
        if os.path.isdir(project["working_dir"]):
            return None
        return f"the project's folder {project['working_dir']} is gone (deleted or moved): " \
            "put it back, or set the project's Working directory (workingDir) in its " \
            "settings to where its code is now"

    def ready(self) -> None:
        """Raise HostDown when runs cannot start there: never here."""

    def repository(self, project: dict) -> str:
        """The repository of the project's branches there."""
        return repo_root(project["working_dir"])

    def task_git(self, task: dict, project: dict, sandbox: dict | None = None) -> tuple:
        """See task_git()."""
        if not git_head(project["working_dir"]):
            return None, None
        path = worktree_path(task)
        return (self.shell(self.repository(project), sandbox=sandbox),
                self.shell(path, sandbox=sandbox) if os.path.isdir(path) else None)

    #: Whether every task there works on a branch of its own (here: with autoBranch).
    branches_always = False

    def make_worktree(self, task: dict, project: dict, branch: str,
                      sandbox: dict | None = None, later: bool = False) -> tuple:
        """Keep or make a task's worktree on `branch` (WORKTREE_SCRIPT, in `sandbox`; with
        `later`, its run's sandbox checks it out: made here without, outside it): what it
        did, its path, its HEAD, and where the branch is when not in workingDir
        (GitError)."""
        root, path = self.repository(project), worktree_path(task)
        own_refs, sandbox = sandbox is not None, None if later else sandbox
        with git_lock(root):
            prune_outside(self.shell(root), self.git_dir(project), sandbox, path)
            code, out = self.shell(root, sandbox=sandbox)(
                ["sh", "-c", in_repository(WORKTREE_SCRIPT, self.git_dir(project), sandbox,
                                           own_refs), "sh", *worktree_args(
                    task, project, path, branch, "refs/heads/ refs/remotes/origin/", later)],
                600)
        what, _, head = worktree_made(code, out, self.where)
        return what, path, head, None

    def source(self, project: dict) -> str:
        """Where a planner reads the project's code (OSError when it is not there)."""
        if not os.path.isdir(project["working_dir"]):
            raise FileNotFoundError(f"the project's workingDir {project['working_dir']!r} "
                                    "does not exist")
        return project["working_dir"]

    def worktree(self, task: dict, project: dict) -> str:
        """Where a task's worktree is (or would be)."""
        return worktree_path(task)

    def review_cwd(self, task: dict, project: dict) -> str:
        """Where the verifier looks at a task's work."""
        path = worktree_path(task)
        return path if project["auto_branch"] and os.path.isdir(path) \
            else project["working_dir"]

    def remove_worktree(self, task: dict, project: dict, only_if, merged: bool,
                        sandbox=lambda: None) -> None:
        """Remove a task's worktree, and its branch when merged or it has no commits of its
        own (WORKTREE_REMOVE, in the sandbox `sandbox()` gives); with only_if, only if
        only_if(task) holds under the repository's lock."""
        path = worktree_path(task)
        if not (project["auto_branch"] or os.path.isdir(path)) or git_head(
                project["working_dir"]) is None:
            return
        root = repo_root(project["working_dir"])
        with git_lock(root):
            if only_if is not None and not only_if(task):
                return
            box = sandbox()
            self.shell(root, sandbox=box)(["sh", "-c", in_repository(
                WORKTREE_REMOVE, self.git_dir(project), box), "sh",
                *worktree_gone_args(task, path, merged)], 60)
            prune_outside(self.shell(root), self.git_dir(project), box)

    def attachments(self, task: dict, attachments: list[dict]) -> str | None:
        """The folder of a task's attachments for its run (None without any)."""
        return os.path.join(runtime.data_dir, "attachments", str(task["id"])) \
            if attachments else None

    #: Whether a run there reaches the board's tools.
    reaches_board = True
    #: Whether its sandboxed runs reach the egress proxy through a bridge (design §20).
    bridged = True

    def bridge(self, run: "AgentRun", proxy: str) -> None:
        """A sandboxed run's bridge gets the proxy's socket for it (design §20): here, as
        it is."""
        run.sandbox["net"] = proxy

    def unbridge(self, run: "AgentRun") -> None:
        """The run ended: its bridge goes (here its socket went with the proxy's)."""

    def board_tools(self, agent: str, run_id: int, task_id: int, project_id: int,
                    invocation: dict, mcp_port: int | None = None) -> str | None:
        """The board tools of a run here: a token, the 0600 config file that holds it (Claude's
        --mcp-config) and the server's command, given to the adapter as {command, args,
        config}; the token.  The server reads it from the file (`--config`), so it is never on
        a command line."""
        token = secrets.token_urlsafe(24)
        runtime.run_tokens[token] = {"project_id": project_id, "task_id": task_id,
                                     "created": set()}
        url = runtime.url if mcp_port is None else f"http://127.0.0.1:{NET_PORT}" \
            if mcp_port == NET_PORT else re.sub(r":\d+$", f":{mcp_port}", runtime.url)
        path = mcp_config_path(run_id)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        server = {"command": sys.executable,
                  "args": [os.path.abspath(__file__), "--mcp", "--url", url, "--config", path]}
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"mcpServers": {BOARD_TOOLS_SERVER: {**server, "env": {
                "TASKBOARD_MCP_TOKEN": token, "TASKBOARD_TASK_ID": str(task_id)}}}}, f)
        ADAPTERS[agent].board_tools(invocation["argv"], invocation["env"], {**server,
                                                                            "config": path})
        return token

    def sandbox(self, retry: bool = False) -> dict:
        """bubblewrap there: {engine, works, version, error} (design §17); with `retry`, one
        that did not work is tried again first (at most every SANDBOX_RETRY_SECONDS)."""
        if retry and not runtime.sandbox["works"] and \
                time.monotonic() - runtime.sandbox_tried > SANDBOX_RETRY_SECONDS:
            runtime.sandbox, runtime.sandbox_tried = sandbox_here(runtime.config), \
                time.monotonic()
        return runtime.sandbox

    def spawn(self, argv: list[str], cwd: str, env: dict, sandbox: dict | None = None) \
            -> subprocess.Popen:
        """Start an agent's process, its stdio piped, in a process group of its own: the
        one place every run's command starts (task, verifier, planner), in the sandbox
        when it has one (in_sandbox())."""
        if sandbox is not None:
            share_account(sandbox, os.path.realpath(runtime.data_dir))
        argv, env = self._in_sandbox(argv, cwd, env, sandbox)
        return Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, start_new_session=True, umask=runtime.umask)

    @staticmethod
    def _in_sandbox(argv: list[str], cwd: str, env: dict, sandbox: dict | None,
                    check: bool = False):
        """in_sandbox() here: the data dir hidden, the board tools' server shown: the
        interpreter's installation, and this module as files (its folder may hold more)."""
        here = os.path.realpath(__file__)
        return in_sandbox(argv, cwd, env, sandbox, os.path.realpath(runtime.data_dir),
                          show=[sys.executable], files=[
                              here, importlib.util.cache_from_source(here)], check=check)

    def invocation(self, invocation: dict, name: str, sandbox: dict | None = None) -> dict:
        """A run's invocation (run_invocation()'s) as it starts there; `name`: the run's,
        for its files (a sandboxed run reads its board tools' config)."""
        if sandbox is not None and name.isdigit():
            sandbox["files"].append(mcp_config_path(int(name)))
        return {**invocation, "root": repo_root(invocation["cwd"])}

    def started(self, run: "AgentRun") -> None:
        """A run's process was spawned there: remembered, so that a restarted server can
        recognise and kill a survivor."""
        update_run_row(run.run_id, {"pid": run.proc.pid, "proc_start": process_start(run.proc.pid)})

    def heard(self, run: "AgentRun", text: str) -> bool:
        """Whether a line of a run's stderr was its machine's, not its agent's."""
        return False

    def kill_group(self, run: "AgentRun", signum: int) -> None:
        """Signal every process of a run."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.proc.pid, signum)

    def ended(self, run: "AgentRun") -> None:
        """A run's process exited: what its machine makes of that (nothing here)."""

    def check(self, cwd: str, argv: list[str], env: dict, sandbox: dict | None = None) \
            -> tuple[int | None, str] | None:
        """The stop check in cwd with the run's environment (and in its sandbox): (exit
        code, or None when it ran out of time; the end of its output), None when its
        command is not found."""
        if shutil.which(argv[0], path=env.get("PATH")) is None \
                and not os.access(os.path.join(cwd, argv[0]), os.X_OK):
            return None
        argv, env = self._in_sandbox(argv, cwd, env, sandbox, check=True)
        return run_command(argv, cwd, STOP_CHECK_TIMEOUT_SECONDS, env=env,
                           stderr=subprocess.STDOUT, session=True, keep=STOP_CHECK_TAIL,
                           umask=runtime.umask)

    def preview_checkout(self, task: dict, project: dict) -> str:
        """Where a task's preview runs (design §21): its worktree, else workingDir."""
        path = worktree_path(task)
        return path if os.path.isdir(path) else project["working_dir"]

    def start_preview(self, preview, argv: list[str]) -> subprocess.Popen:
        """A preview's command here, with PORT a free port of the loopback, in a process
        group of its own, its output in one pipe; sandboxed (its sandbox's network, design
        §20), its bridge's folder made in the data dir and its egress proxy opened."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            preview.dev_port = probe.getsockname()[1]
        env = {**preview.env, "PORT": str(preview.dev_port)}
        if preview.sandbox is not None:
            preview.bridge = os.path.join(runtime.data_dir, "previews", preview.name)
            os.makedirs(preview.bridge, mode=0o700)
            preview.sandbox.update(preview=preview.bridge,
                                   net=runtime.egress.open(preview, preview.project, None))
            argv, env = in_sandbox(argv, preview.cwd, env, preview.sandbox,
                                   os.path.realpath(runtime.data_dir))
        return Popen(argv, cwd=preview.cwd, env=env, stdin=subprocess.DEVNULL,
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     start_new_session=True, umask=runtime.umask)

    def preview_heard(self, preview, text: str) -> bool:
        """Whether a line of a preview's output was its machine's (none here)."""
        return False

    def end_preview(self, preview) -> None:
        """A preview's process ended: what its machine undoes (nothing here)."""


THIS_MACHINE = ThisMachine()


# =============================================================================
# MACHINES: SSH HOSTS
# =============================================================================
# Agents on other machines, over OpenSSH (design §15): a host's connection and machine
# (HostLink), a deleted host's (MissingHost), and which machine a project's runs use.

# --- hosts: agents on other machines, over OpenSSH (design §15) ------------------

#: Sourced by every command sent to a host, its output dropped: the login's PATH.
#: git's switches as GIT_ENV's, GIT_CONFIG_* (REMOTE_RUN takes them away from the agent).
REMOTE_PROFILE = 'for p in /etc/profile "$HOME/.profile"; do [ -r "$p" ] && . "$p" ' \
    '>/dev/null 2>&1 </dev/null; done; export GIT_TERMINAL_PROMPT=0 LC_ALL=C ' + " ".join(
        f"{k}={shlex.quote(v)}" for k, v in GIT_ENV.items() if k.startswith("GIT_CONFIG_"))
#: The POSIX sh wrapper of a run on a host, sent with every run (nothing is installed
#: there): `sh -c WRAPPER sh ENV_FILE WORKTREE ARGV...`.  It reads the run's variables
#: from the 0600 file the board wrote (and removes it), starts the CLI in the worktree in
#: its own process group (ARGV is in_sandbox()'s: in its sandbox when it has one), says the
#: group's id on stderr, and kills the group when the channel closes: a newline on stderr
#: every REMOTE_BEAT_SECONDS fails once nobody reads it.
REMOTE_BEAT_SECONDS = 1
REMOTE_RUN = REMOTE_PROFILE + "\nunset " + " ".join(
    k for k in GIT_ENV if k.startswith("GIT_CONFIG_")) + r'''
f=$1; dir=$2; shift 2
. "$f"; rm -f -- "$f"
cd -- "$dir" || exit 127
exec 3<&0
if command -v setsid >/dev/null 2>&1; then setsid "$@" <&3 3<&- &
else perl -e 'setpgrp(0, 0); exec { $ARGV[0] } @ARGV or exit 127' "$@" <&3 3<&- &
fi
pid=$!
exec 3<&-
printf 'taskboard-pgid %s\n' "$pid" >&2
( trap '' PIPE
  while sleep ''' + str(REMOTE_BEAT_SECONDS) + r''' </dev/null >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || exit 0
    printf '\n' >&2 || break
  done
  kill -s TERM -- "-$pid" 2>/dev/null; sleep 5; kill -s KILL -- "-$pid" 2>/dev/null
) </dev/null >/dev/null &
beat=$!
wait "$pid"; code=$?
rm -f -- "${f%.env}.mcp.json"
kill "$beat" 2>/dev/null
kill -s KILL -- "-$pid" 2>/dev/null
exit "$code"
'''
#: The first stderr line of a remote run: its process group on the host.
REMOTE_GROUP_RE = re.compile(r"^taskboard-pgid (\d+)$")


#: libc's prctl, loaded by the first ssh_options() (never in a forked child).
_PRCTL = []


def _die_with_board() -> None:
    """preexec_fn of the board's ssh processes: SIGKILL when the board dies, even by -9
    (Linux), so that no connection or run outlives it."""
    for prctl in _PRCTL:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def host_alias(host_id: int) -> str:
    """The name a host's key is pinned under, whatever its address or port."""
    return f"taskboard-host-{host_id}"


def ssh_folder() -> str:
    folder = os.path.join(runtime.data_dir, "ssh")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return folder


def ssh_options(host: dict, known_hosts: str | None = None) -> list[str]:
    """What every ssh of the board passes for a host: its port and key, BatchMode, the
    board's own known_hosts (the key pinned under host_alias), no forwarding of agents."""
    if not _PRCTL and sys.platform == "linux":
        import ctypes  # only a board with hosts needs it
        _PRCTL.append(ctypes.CDLL(None, use_errno=True).prctl)
    known_hosts = known_hosts or os.path.join(ssh_folder(), "known_hosts")
    options = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
               "-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
               "-o", f"HostKeyAlias={host_alias(host['id'])}",
               "-o", "HashKnownHosts=no", "-o", "UpdateHostKeys=no", "-o", "ForwardAgent=no",
               "-o", "ForwardX11=no", "-o", "RequestTTY=no", "-o", "PermitLocalCommand=no",
               "-o", f"ConnectTimeout={SSH_CONNECT_SECONDS}",
               "-o", f"ServerAliveInterval={SSH_ALIVE_SECONDS}", "-o", "ServerAliveCountMax=3"]
    if host["port"] != 22:
        options += ["-p", str(host["port"])]
    if host["identity_file"]:
        options += ["-i", os.path.expanduser(host["identity_file"]), "-o", "IdentitiesOnly=yes"]
    return options


def _ssh_error(stderr: str, fallback: str, host: dict | None = None) -> str:
    """ssh's last word on why it failed, with what to do when the host refused the key."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()
             and not line.startswith(("Warning: Permanently added", "Allocated port"))]
    error = _cut(lines[-1], 500) if lines else fallback
    if host is not None and "Permission denied (publickey" in error:
        key = os.path.expanduser(host["identity_file"]) if host["identity_file"] else \
            "ssh's own choice of key (no key file is set)"
        error += f": the host refused the key {key}; check the key file, and that its " \
            "public key (.pub) is in ~/.ssh/authorized_keys of the login on the host"
    return error


def origin_url(folder: str) -> str | None:
    code, out = run_command(["git", "remote", "get-url", "origin"], folder, 10)
    return out.strip() or None if code == 0 else None


class HostLink:
    """One host's connection: an OpenSSH master the board keeps as its own child (`ssh -M
    -N`), which every run, git command and copy on the host shares (ControlPath), and
    which ends with the board.  It is opened when first needed and again when it drops.
    Its remote forward lets runs there reach the board (`port` on the host's loopback)."""

    def __init__(self, host: dict):
        self.host = dict(host)
        self.master = None
        self.port = None
        self.home = None
        self.errors = collections.deque(maxlen=20)
        self.lock = gevent.lock.Semaphore()
        self.control = os.path.join(ssh_folder(), f"{host['id']}.sock")
        if len(self.control) > 85:  # a socket's path has at most 107 bytes (ssh adds 17)
            board = hashlib.sha256(runtime.data_dir.encode("utf-8", "replace")).hexdigest()
            self.control = os.path.join(tempfile.gettempdir(),
                                        f"taskboard-{os.getuid()}-{board[:12]}-{host['id']}.sock")

    def same(self, host: dict) -> bool:
        keys = ("address", "port", "identity_file", "host_key")
        return all(self.host[k] == host[k] for k in keys)

    def argv(self, command: str) -> list[str]:
        """ssh running one command on the host through the master."""
        return ["ssh", *ssh_options(self.host), "-o", f"ControlPath={self.control}",
                "-o", "ControlMaster=no", "-o", "ClearAllForwardings=yes", "-T",
                self.host["address"], command]

    def up(self) -> None:
        """Open the master unless it is open; raise HostDown saying why it cannot be."""
        with self.lock:
            if self.master is not None and self.master.poll() is None:
                return  # a master that lost its host exits (ServerAliveCountMax)
            self.close()
            if not self.host["host_key"]:
                raise HostDown("the host key is not trusted yet: check the host, compare "
                               "its fingerprint and trust it")
            with contextlib.suppress(FileNotFoundError):  # a dead master's (a killed board)
                os.remove(self.control)
            # a remote run's requests come in on a listener of their own (forwarded());
            # LogLevel INFO: the master says the forward's port (whatever ~/.ssh/config says)
            forward = f"127.0.0.1:0:127.0.0.1:{runtime.forward.port()}"
            master = self.master = Popen(
                ["ssh", "-M", "-N", *ssh_options(self.host), "-o", "LogLevel=INFO",
                 "-o", f"ControlPath={self.control}", "-o", "ControlPersist=no",
                 "-R", forward, self.host["address"]],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=_die_with_board)
            self.errors.clear()
            answered = gevent.event.Event()
            reader = gevent.spawn(self._read_master, master, answered)
            deadline = time.monotonic() + SSH_CONNECT_SECONDS + 5
            while True:
                # the master listens on ControlPath before its forward is answered: woken
                # then (or when it ends), the connection is open and runs know the port
                answered.wait(max(0.0, deadline - time.monotonic()))
                if self._check():
                    break
                # NOTE: close() may run meanwhile (the host was changed or deleted)
                if master.poll() is not None or self.master is not master or \
                        time.monotonic() > deadline:
                    if self.master is master:
                        self.close()
                    elif master.poll() is None:
                        master.kill()
                    reader.join(2)  # the master's last words
                    raise self._failure("\n".join(self.errors))
                gevent.sleep(0.05)
        for group in runtime.leftovers.pop(self.host["id"], set()):
            gevent.spawn(kill_remote_group, self, group)

    def _check(self) -> bool:
        return run_process(["ssh", "-o", f"ControlPath={self.control}", "-O", "check",
                            "-o", "BatchMode=yes", self.host["address"]],
                           timeout=10).returncode == 0

    def _read_master(self, master, answered: "gevent.event.Event") -> None:
        """What the master says: its forward's port, else why it failed; `answered` is set
        when the forward was answered (its port, or that it failed) and when it ends."""
        try:
            for line in master.stderr:
                text = line.decode("utf-8", "replace").strip()
                found_port = re.match(r"Allocated port (\d+) for remote forward", text)
                if found_port:
                    self.port = int(found_port.group(1))
                    answered.set()
                elif text:
                    self.errors.append(text)
                    if "remote port forwarding failed" in text:
                        answered.set()
        finally:
            answered.set()

    def _failure(self, stderr: str) -> HostDown:
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr or \
                "Host key verification failed" in stderr:
            shown = re.search(r"SHA256:[A-Za-z0-9+/]{43}", stderr)
            shown = shown.group(0) if shown else scan_host_key(self.host)[0]
            return HostDown(f"the host key changed: {self.host['host_key']} is pinned, the "
                            f"host shows {shown or 'another key'}; the host is disabled until "
                            "a person checks and trusts the new key", shown)
        return HostDown(_ssh_error(stderr, "the connection could not be opened", self.host))

    def run(self, command: str, stdin: bytes | None = None, timeout: float = 120,
            reopen: bool = True) -> tuple[int | None, str]:
        """Run a shell command on the host (the login's PATH); its exit code and stdout
        (then stderr, when it failed), or (None, why) when it ran out of time, as
        run_command() answers here.  HostDown when the connection fails (ssh's 255), at
        once without reopen when it is not open."""
        master = self.master
        if reopen:
            self.up()
        elif master is None or master.poll() is not None:
            raise HostDown("the connection to the host is not open")
        try:
            done = run_process(self.argv(f"{REMOTE_PROFILE}; {command}"), input=stdin,
                               timeout=timeout, preexec_fn=_die_with_board)
        except subprocess.TimeoutExpired:  # as run_command() answers
            return None, f"the command on the host did not finish within {timeout:g}s"
        out = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0:
            out += done.stderr.decode("utf-8", "replace")
        master = self.master
        if done.returncode == 255 and (master is None or master.poll() is not None):
            raise HostDown(_ssh_error(out, "the connection was lost"))
        return done.returncode, out

    def path(self, *parts, reopen: bool = True) -> str:
        """The absolute path of parts under the host's baseDir (~ is the login's home)."""
        base = self.host["base_dir"]
        if base == "~" or base.startswith("~/"):
            if self.home is None:
                code, out = self.run('printf %s "$HOME"', timeout=30, reopen=reopen)
                if code != 0 or not out.startswith("/"):
                    raise HostDown(f"the host's home folder is unknown: {_cut(out, 200)}")
                self.home = out
            base = self.home + base[1:]
        return posixpath.join(base, *map(str, parts))

    def write(self, path: str, data: bytes, what: str, line_to: str | None = None) -> None:
        """Write a file on the host that only its login may read; OSError naming what.  With
        line_to (a file in the same folder), data's first line goes there and the rest to
        path: two files in one round trip."""
        first = "" if line_to is None else \
            f"IFS= read -r line && printf '%s\\n' \"$line\" > {shlex.quote(line_to)} && "
        code, out = self.run(f"umask 077 && mkdir -p {shlex.quote(posixpath.dirname(path))} "
                             f"&& {first}cat > {shlex.quote(path)}", stdin=data)
        if code != 0:
            raise OSError(f"{what} could not be written on host {self.host['name']!r}: "
                          f"{_cut(out.strip(), 300)}")

    def shell(self, cwd: str, reopen: bool = True, sandbox: dict | None = None):
        """run(argv, timeout) -> (exit code, stdout) in cwd on the host, as run_command()
        runs one here (HostDown when the host cannot be reached), in `sandbox` as here."""
        def run(argv, timeout=30):
            argv, own = in_sandbox(argv, cwd, {}, sandbox,
                                   self.path(reopen=reopen) if sandbox else "")
            return self.run(f"cd {shlex.quote(cwd)} && " + "".join(
                f"export {k}={shlex.quote(v)}; " for k, v in own.items()) + shlex.join(argv),
                timeout=timeout, reopen=reopen)
        return run

    def git_dir(self, project: dict) -> str:
        """The common git folder of the project's clone there: the board made it (HostDown
        when the host's home is not known without connecting)."""
        return posixpath.join(self.repository(project, reopen=False), ".git")

    @property
    def where(self) -> str:
        return f" on host {self.host['name']!r}"

    def git(self, cwd: str, *args: str, timeout: float = 60) -> str:
        return git_output(args, *self.run(f"git -C {shlex.quote(cwd)} {shlex.join(args)}",
                                          timeout=timeout))

    def head(self, cwd: str) -> str | None:
        try:
            return self.git(cwd, "rev-parse", "--verify", "-q", "HEAD",
                            timeout=30).strip() or None
        except (GitError, HostDown):
            return None

    def repo_lock(self, path: str) -> "gevent.lock.RLock":
        return runtime.git_locks.setdefault(f"host:{self.host['id']}:{path}",
                                            gevent.lock.RLock())

    def neighbours(self, project_id: int) -> list[int]:
        """The other projects on this host: a run's end frees a slot they may use."""
        return [p for p in host_project_rows(self.host["id"]) if p != project_id]

    def full(self) -> str | None:
        """Why the host cannot take another agent now (its maxConcurrent), or None."""
        used = sum(runtime.agents.used(p) for p in host_project_rows(self.host["id"]))
        if used < self.host["max_concurrent"]:
            return None
        return f"host {self.host['name']!r} already runs {used} agent" \
            f"{'s' if used != 1 else ''} (maxConcurrent {self.host['max_concurrent']}); " \
            "wait for one to finish or raise it"

    def runs_changed(self) -> None:
        """host:updated: its `running` changed."""
        row = host_row(self.host["id"])
        if row is not None:
            runtime.events.publish("host:updated", render(HOST_FIELDS, row))

    def bring_home(self, task: dict, project: dict) -> str | None:
        """The branch is fetched from the host's clone over its connection, not through a
        link a run could have left where git writes its ref or reflog (link_on_the_way()),
        nor writing FETCH_HEAD."""
        branch = task["branch_name"]
        root, common = git_dirs(project["working_dir"]) or (project["working_dir"], None)
        try:
            clone = self.repository(project)
            with self.repo_lock(clone), git_lock(root):
                link = link_on_the_way(common, branch) if common else None
                code, out = (1, f"refused: {link} is a link") if link else run_command(
                    ["git", "fetch", "--no-tags", "--no-write-fetch-head", "--upload-pack",
                     f"{REMOTE_PROFILE}; git-upload-pack", f"{self.host['address']}:{clone}",
                     f"refs/heads/{branch}:refs/heads/{branch}"], root, 300,
                    stderr=subprocess.STDOUT, env={**os.environ, **GIT_ENV, "GIT_SSH_COMMAND":
                                                  shlex.join(self.argv("")[:-2])})
        except HostDown as exc:
            code, out = 255, str(exc)
        if code != 0:
            runtime.logs.append(task["id"], "system", f"branch {branch} stays on host "
                                f"{self.host['name']!r}, in {task['branch_at'] or 'its clone'}"
                                f": it could not be fetched into {root}: "
                                f"{_cut(out.strip(), 500)}", is_error=True)
            return None
        runtime.logs.append(task["id"], "system", f"branch {branch} fetched from host "
                            f"{self.host['name']!r} into {root}")
        return root

    def kill_survivor(self, pid: int, started: int | None) -> None:
        """Killed when the host is reached again."""
        runtime.leftovers.setdefault(self.host["id"], set()).add(pid)

    def begin(self, start, *args) -> None:
        """In the background: the connection may take seconds to open."""
        starter = gevent.spawn(start, *args)
        runtime.agents.starters.add(starter)
        starter.link(runtime.agents.starters.discard)

    def has_git(self, project: dict) -> bool:
        return True  # its clone of repoUrl, checked when the project was saved

    def worktree_at(self, cwd: str) -> bool:
        return True  # a run there always works in a worktree of the clone

    def agent_command(self, agent: str) -> tuple[list | None, str | None]:
        commands = json.loads(self.host["agent_commands_json"] or "{}")  # else its name
        return shlex.split(commands.get(agent) or agent), self._missing(agent)

    def _missing(self, agent: str) -> str | None:
        """Why an agent CLI cannot start on the host its last check found it missing on."""
        check = json.loads(self.host["last_check_json"] or "null") or {}
        seen = (check.get("agents") or {}).get(agent) or {}
        if not check.get("ok") or seen.get("found") is not False:
            return None
        return f"the {agent} agent command was not found on host {self.host['name']!r}: " \
            f"install it there (npm install -g {AGENTS[agent].package}) or set the host's " \
            "agentCommands"

    def missing_folder(self, project: dict) -> None:
        """Its runs work in the host's copy of the repository (fetched before each run, which
        says what fails): nothing to ask here."""
        return None

    def ready(self) -> None:
        if not self.host["enabled"]:
            raise HostDown("the host is disabled")
        self.up()

    def repository(self, project: dict, reopen: bool = True) -> str:
        return self.path("repos", project["slug"], reopen=reopen)  # fetched before each run

    def task_git(self, task: dict, project: dict, sandbox: dict | None = None) -> tuple:
        try:  # only while connected: a read never waits for the connection
            repo = self.repository(project, reopen=False)
            root = self.shell(repo, reopen=False, sandbox=sandbox)
            path = self.path("worktrees", project["id"], task["task_key"], reopen=False)
            checkout = self.shell(path, reopen=False, sandbox=sandbox) \
                if self.shell(repo, reopen=False)(["test", "-d", path])[0] == 0 else None
        except HostDown:
            return None, None
        return root, checkout

    branches_always = True  # design §15

    def make_worktree(self, task: dict, project: dict, branch: str,
                      sandbox: dict | None = None, later: bool = False) -> tuple:
        """The worktree in the project's clone there, fetched first (the clone's branches
        are older than origin's), in `sandbox` as here, checked out there now (`later` is
        this machine's)."""
        repo = self.repository(project)
        prune = shlex.join(["sh", "-c", in_repository(PRUNE, self.git_dir(project))]) \
            if sandbox else ":"
        argv, own = in_sandbox(["sh", "-c", in_repository(
            WORKTREE_SCRIPT, self.git_dir(project), sandbox), "sh", *worktree_args(
            task, project, self.worktree(task, project), branch,
            "refs/remotes/origin/ refs/heads/")], repo, {}, sandbox, self.path())
        with self.repo_lock(repo):
            code, out = self.run(self.clone_script(project) + f'\ncd "$repo"\n{prune}\n' + "".join(
                f"export {k}={shlex.quote(v)}\n" for k, v in own.items()) + shlex.join(argv),
                timeout=600)
        what, path, head = worktree_made(code, out, self.where)
        return what, path, head, f"{self.host['name']}:{repo}"

    def source(self, project: dict) -> str:
        """The project's clone there, fetched (GitError, HostDown)."""
        repo = self.repository(project)
        with self.repo_lock(repo):
            code, out = self.run(self.clone_script(project) + "\ngit -C \"$repo\" "
                                 "merge -q --ff-only '@{u}' >&2 || true", timeout=600)
        if code != 0:
            raise GitError(f"the clone on host {self.host['name']!r} could not be fetched: "
                           f"{_cut(out.strip().splitlines()[-1] if out.strip() else '', 300)}")
        return repo

    def worktree(self, task: dict, project: dict) -> str:
        """Where the task's worktree is on its project's host (an absolute path)."""
        return self.path("worktrees", project["id"], task["task_key"])

    review_cwd = worktree

    def clone_script(self, project: dict) -> str:
        """The start of a script run on the host: the project's clone at <baseDir>/repos/<slug>
        ($repo), cloned from repoUrl (else workingDir's origin) the first time, then fetched."""
        url = project["repo_url"] or origin_url(project["working_dir"])
        if not url:
            raise GitError(f"project {project['name']!r} runs on host {self.host['name']!r} but "
                           "has no repoUrl, and its workingDir has no origin to clone")
        return f"""set -e
repo={shlex.quote(self.repository(project))}
mkdir -p "$(dirname "$repo")"
[ -d "$repo/.git" ] || git clone -q -- {shlex.quote(url)} "$repo" >&2
git -C "$repo" fetch -q origin >&2 || true"""

    def attachments(self, task: dict, attachments: list[dict]) -> str | None:
        """Copy the task's attachments to <baseDir>/attachments/<task_key>/ on the host; the
        folder's path there."""
        if not attachments:
            return None
        folder = self.path("attachments", task["task_key"])
        self.run(f"rm -rf {shlex.quote(folder)}")  # what an earlier run was given
        for item in attachments:
            with open(os.path.join(runtime.data_dir, item["path"]), "rb") as f:
                self.write(posixpath.join(folder, item["file_name"]), f.read(),
                           f"attachment {item['file_name']!r}")
        return folder

    def remove_worktree(self, task: dict, project: dict, only_if, merged: bool,
                        sandbox=lambda: None) -> None:
        """In the background: the host may be slow to reach (nothing when it cannot be)."""
        if task["branch_name"]:
            gevent.spawn(self._remove_worktree, task, project, only_if, merged, sandbox)

    def _remove_worktree(self, task, project, only_if, merged, sandbox) -> None:
        try:
            repo = self.repository(project)
            with self.repo_lock(repo):
                if only_if is not None and not only_if(task):
                    return
                box = sandbox()
                self.shell(repo, sandbox=box)(["sh", "-c", in_repository(
                    WORKTREE_REMOVE, self.git_dir(project), box), "sh", *worktree_gone_args(
                        task, self.worktree(task, project), merged)], 60)
                prune_outside(self.shell(repo), self.git_dir(project), box)
        except HostDown as exc:
            if task_row(task["id"]) is not None:
                runtime.logs.append(task["id"], "system", f"the worktree{self.where} was not "
                                    f"removed: {exc}", is_error=True)

    @property
    def reaches_board(self) -> bool:
        return bool(self.port)  # the connection's remote forward

    #: Its sandboxed runs reach the board's egress proxy over the connection (design §20).
    bridged = True

    def net_socket(self, name: str) -> str:
        """Where the proxy's socket of run `name` is forwarded to on the host."""
        path = self.path("runs", f"{name}.net")
        return path if len(path) < 100 else \
            f"/tmp/taskboard-net-{hashlib.sha256(path.encode()).hexdigest()[:16]}"

    def bridge(self, run: "AgentRun", proxy: str) -> None:
        """The proxy's socket for the run, forwarded by the connection to the path its
        sandbox binds (invocation() named it); OSError when the connection will not."""
        remote = run.sandbox["net"]
        done = run_process(["ssh", "-o", f"ControlPath={self.control}", "-O", "forward",
                            "-R", f"{remote}:{proxy}", self.host["address"]], timeout=30)
        if done.returncode != 0:
            raise OSError(f"the egress proxy could not be forwarded to host "
                          f"{self.host['name']!r}: "
                          f"{_cut(done.stderr.decode('utf-8', 'replace').strip(), 300)}")
        run.net_forward = f"{remote}:{proxy}"

    def unbridge(self, run: "AgentRun") -> None:
        """The run ended: the connection forwards its socket no more (nor leaves it)."""
        forward = getattr(run, "net_forward", None)
        if forward is not None and self.master is not None and self.master.poll() is None:
            run_process(["ssh", "-o", f"ControlPath={self.control}", "-O", "cancel", "-R",
                         forward, self.host["address"]], timeout=30)
            with contextlib.suppress(HostDown):
                self.run(f"rm -f {shlex.quote(forward.rsplit(':', 1)[0])}", timeout=30,
                         reopen=False)

    def board_tools(self, agent: str, run_id: int, task_id: int, project_id: int,
                    invocation: dict, mcp_port: int | None = None) -> str | None:
        """The board tools of a run on a host: /mcp through the connection's remote forward,
        given to the adapter as {url, token} (Claude's --mcp-config names a 0600 file there,
        written with the run's settings by invocation(); the token is never on a command
        line); the token, or None when there is no forward."""
        if not self.port:
            return None
        token = secrets.token_urlsafe(24)  # a sandboxed run's through its bridge (§20)
        port = NET_PORT if mcp_port == NET_PORT else self.port
        server = {"url": f"http://127.0.0.1:{port}/mcp", "token": token}
        if agent == "claude":
            server["config"] = self.path("runs", f"{int(run_id)}.mcp.json")
            config = {"mcpServers": {BOARD_TOOLS_SERVER: {
                "type": "http", "url": server["url"],
                "headers": {"Authorization": f"Bearer {token}"}}}}
            invocation["host_file"] = (server["config"], json_dumps(config))  # one line
        ADAPTERS[agent].board_tools(invocation["argv"], invocation["env"], server)
        runtime.run_tokens[token] = {"project_id": project_id, "task_id": task_id,
                                     "created": set()}
        return token

    def sandbox(self, retry: bool = False) -> dict:
        """bubblewrap there, as the host's last check found it (its checks try it again)."""
        check = json.loads(self.host["last_check_json"] or "null") or {}
        return check.get("sandbox") or {"engine": "bubblewrap", "works": False,
                                        "version": None, "error": "not checked yet"}

    def spawn(self, argv: list[str], cwd: str, env: dict, sandbox: dict | None = None) \
            -> subprocess.Popen:
        """The ssh client of a run's channel (argv: invocation()'s), which dies with
        the board; its other end (REMOTE_RUN) starts the agent in the worktree there."""
        return Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_die_with_board)

    def invocation(self, invocation: dict, name: str, sandbox: dict | None = None) -> dict:
        """A run's invocation sent to its host first (OSError, HostDown): the run's own
        variables (what it adds to the board's environment) go to a 0600 file there, never on
        a command line, with its board tools' settings (board_tools()) in the same round trip;
        the argv is the ssh client of its channel, which runs REMOTE_RUN (in the sandbox there
        when it has one) and dies with the board; the board's environment stays here."""
        own = {k: v for k, v in invocation["env"].items()
               if os.environ.get(k) != v and re.fullmatch(r"[A-Za-z_]\w*", k)}
        own.pop("TASKBOARD_URL", None)
        if sandbox is not None:  # the proxy's socket, bridged (design §20)
            sandbox["net"] = self.net_socket(name)
            own["TASKBOARD_URL"] = f"http://127.0.0.1:{NET_PORT}"
        elif self.port:  # the board, through the connection's remote forward
            own["TASKBOARD_URL"] = f"http://127.0.0.1:{self.port}"
        env_file = self.path("runs", f"{name}.env")
        argv, own = in_sandbox(invocation["argv"], invocation["cwd"], own, sandbox, self.path(),
                               files=[env_file[:-4] + ".mcp.json"])
        settings = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in own.items()).encode()
        # the board tools' settings (beside it in runs/) go first: one line of JSON
        tools, tools_text = invocation.get("host_file") or (None, "")
        if tools is not None:
            settings = tools_text.encode() + b"\n" + settings
        self.write(env_file, settings, "the run's settings", line_to=tools)
        remote = f"sh -c {shlex.quote(REMOTE_RUN)} sh {shlex.quote(env_file)} " \
            f"{shlex.quote(invocation['cwd'])} {shlex.join(argv)}"
        return {**{k: v for k, v in invocation.items() if k != "host_file"},
                "argv": self.argv(remote),
                "env": {k: v for k, v in os.environ.items() if k not in SECRET_ENV}}

    def started(self, run: "AgentRun") -> None:
        self.runs_changed()  # the process to remember is its group there: see heard()

    def heard(self, run: "AgentRun", text: str) -> bool:
        found = run.group is None and REMOTE_GROUP_RE.match(text)
        if found:
            run.group = int(found.group(1))
            if run.run_id is not None:
                update_run_row(run.run_id, {"pid": run.group})
        return bool(found)

    def kill_group(self, run: "AgentRun", signum: int) -> None:
        """Over the connection; closing the channel (SIGKILL) ends the group too."""
        if run.group is not None and run.proc.poll() is None:
            gevent.spawn(kill_remote_group, self, run.group, signum)
        if signum == signal.SIGKILL or run.group is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.proc.pid, signal.SIGKILL)

    def ended(self, run: "AgentRun") -> None:
        if run.exit_code != 255 or run.stop_reason is not None:
            return
        if run.task_id is not None:
            why = run.parser.stderr[-1] if run.parser.stderr else "ssh 255"
            runtime.logs.append(run.task_id, "system", f"the connection to host "
                                f"{self.host['name']!r} was lost: {why}", run.run_id,
                                is_error=True)
        if run.group is not None:
            runtime.leftovers.setdefault(self.host["id"], set()).add(run.group)

    def check(self, cwd: str, argv: list[str], env: dict, sandbox: dict | None = None) \
            -> tuple[int | None, str] | None:
        """The stop check there: in its worktree, with the host's login environment,
        nothing of the board's (design §15), in its sandbox as here (design §17)."""
        try:
            command = argv[0]
            argv, own = in_sandbox(argv, cwd, {}, sandbox, self.path(), check=True)
            code, out = self.run(
                f"cd {shlex.quote(cwd)} && {{ command -v {shlex.quote(command)} >/dev/null "
                f"2>&1 || [ -x {shlex.quote(command)} ] || exit 127; }} && "
                + "".join(f"export {k}={shlex.quote(v)}; " for k, v in own.items())
                + f"{shlex.join(argv)} 2>&1", timeout=STOP_CHECK_TIMEOUT_SECONDS)
        except HostDown as exc:
            return None, str(exc)
        if code == 127:  # the shell there did not find it
            return None
        return code, out[-STOP_CHECK_TAIL:]

    def preview_checkout(self, task: dict, project: dict) -> str:
        """Where a task's preview runs there: its worktree (every task there has one)."""
        return self.worktree(task, project)

    def start_preview(self, preview, argv: list[str]) -> subprocess.Popen:
        """A preview's command on the host (design §21), as a run's: REMOTE_RUN over the
        connection, its group ended with its channel; sandboxed there as its runs are (its
        bridge's folder under baseDir, its egress proxy forwarded: bridge()).  The board
        reaches its port (a random one there, or its bridge's socket) through a local
        forward of the connection to a socket in a folder of the preview here."""
        preview.dev_port = 20000 + secrets.randbelow(40000)
        target = f"127.0.0.1:{preview.dev_port}"
        if preview.sandbox is not None:
            folder = self.path("previews", preview.name)
            code, out = self.run(f"mkdir -p -m 700 {shlex.quote(folder)}", timeout=30)
            if code != 0:
                raise OSError(f"the preview's folder could not be made on the host: "
                              f"{_cut(out, 200)}")
            preview.sandbox["preview"], target = folder, f"{folder}/{PREVIEW_SOCKET}"
        invocation = self.invocation({"argv": argv, "env": {"PORT": str(preview.dev_port)},
                                      "cwd": preview.cwd}, f"preview-{preview.name}",
                                     preview.sandbox)
        if preview.sandbox is not None:
            self.bridge(preview, runtime.egress.open(preview, preview.project, None))
        local = os.path.join(runtime.data_dir, "previews", preview.name)
        if len(local) > 90:  # ssh binds the socket by its path (at most 107 bytes)
            local = os.path.join(tempfile.gettempdir(),
                                 f"taskboard-{os.getuid()}-preview-{preview.name}")
        os.makedirs(local, mode=0o700)
        preview.bridge = local
        forward = f"{os.path.join(local, PREVIEW_SOCKET)}:{target}"
        done = run_process(["ssh", "-o", f"ControlPath={self.control}", "-O", "forward",
                            "-L", forward, self.host["address"]], timeout=30)
        if done.returncode != 0:
            raise OSError(f"the preview's port could not be forwarded from host "
                          f"{self.host['name']!r}: "
                          f"{_cut(done.stderr.decode('utf-8', 'replace').strip(), 300)}")
        preview.forward = forward
        return self.spawn(invocation["argv"], preview.cwd, invocation["env"])

    def preview_heard(self, preview, text: str) -> bool:
        """REMOTE_RUN's lines: its group's id (kept), its beat (blank)."""
        found = preview.group is None and REMOTE_GROUP_RE.match(text)
        if found:
            preview.group = int(found.group(1))
        return bool(found) or not text.strip()

    def end_preview(self, preview) -> None:
        """Its forwards cancelled, its folder there removed (while the connection is up)."""
        if self.master is None or self.master.poll() is not None:
            return
        if preview.forward is not None:
            run_process(["ssh", "-o", f"ControlPath={self.control}", "-O", "cancel", "-L",
                         preview.forward, self.host["address"]], timeout=30)
        self.unbridge(preview)
        folder = (preview.sandbox or {}).get("preview")
        if folder:
            with contextlib.suppress(HostDown):
                self.run(f"rm -rf -- {shlex.quote(folder)}", timeout=30, reopen=False)

    def close(self) -> None:
        master, self.master, self.port = self.master, None, None
        if master is not None and master.poll() is None:
            master.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                master.wait(5)
            if master.poll() is None:
                master.kill()


def host_link(host: dict) -> HostLink:
    """The host's connection; made again when its address, port, key or pin changed."""
    link = runtime.links.get(host["id"])
    if link is None or not link.same(host):
        if link is not None:
            link.close()
        link = runtime.links[host["id"]] = HostLink(host)
    link.host = dict(host)  # its name, folder, commands and state as they are now
    return link


def machine_of(host: dict | None) -> "ThisMachine | HostLink":
    """The machine a project's runs use: this one, or its host's connection."""
    return THIS_MACHINE if host is None else host_link(host)


def host_machine(host_id: int | None) -> "ThisMachine | HostLink | MissingHost":
    """The machine of runs on a host (None: this one), which says so when it was deleted."""
    if host_id is None:
        return THIS_MACHINE
    host = host_row(host_id)
    return host_link(host) if host is not None else MissingHost(host_id)


def project_machine(project: dict) -> "ThisMachine | HostLink | MissingHost":
    """The machine the project's runs use."""
    return host_machine(project["host_id"])


class MissingHost:
    """The machine of a project whose host was deleted meanwhile (a host a project names
    cannot be deleted): nothing runs there, what would reach it raises HostDown, and what
    only reads or cleans up finds nothing."""
    host = home = None
    reaches_board = False
    bridged = False

    def unbridge(self, run: "AgentRun") -> None:
        """Nothing was bridged."""

    def __init__(self, host_id: int):
        self.host_id = host_id
        self.where = f" on host {host_id}, which was deleted"

    def _gone(self, *args, **kwargs):
        raise HostDown(f"the project's host (host {self.host_id}) is gone")

    agent_command = ready = has_git = repository = worktree = review_cwd = source = \
        attachments = repo_lock = shell = git = invocation = board_tools = git_dir = \
        missing_folder = _gone

    def sandbox(self, retry: bool = False) -> dict:
        return {"engine": "bubblewrap", "works": False, "version": None,
                "error": "the project's host is gone"}

    def task_git(self, task: dict, project: dict, sandbox: dict | None = None) -> tuple:
        return None, None

    def head(self, cwd: str) -> None:
        return None

    def full(self) -> None:
        return None  # its runs stop at ready()

    def remove_worktree(self, task, project, only_if, merged, sandbox=None) -> None:
        """Nothing: what was on the host went with it."""

    def bring_home(self, task: dict, project: dict) -> None:
        return None

    def runs_changed(self) -> None:
        """Nothing: no host to tell of."""

    def kill_survivor(self, pid: int, started: int | None) -> None:
        """Nothing: the host is never reached again."""


def scan_host_key(host: dict) -> tuple[str | None, str]:
    """The host key the host shows, without logging in: (fingerprint, its known_hosts
    line), or (None, why not)."""
    with tempfile.TemporaryDirectory(dir=ssh_folder()) as folder:
        seen = os.path.join(folder, "seen")
        options = ssh_options(host, known_hosts=seen)
        options[options.index("StrictHostKeyChecking=yes")] = "StrictHostKeyChecking=accept-new"
        try:
            done = run_process(["ssh", *options, "-o", "ControlPath=none",
                                "-o", "PreferredAuthentications=none",
                                "-o", "PubkeyAuthentication=no", host["address"], "true"],
                               text=True, timeout=SSH_CONNECT_SECONDS + 5,
                               preexec_fn=_die_with_board)
        except subprocess.TimeoutExpired:
            return None, "the host did not answer"
        try:
            with open(seen) as f:
                line = f.read().strip().splitlines()[0]
        except (OSError, IndexError):
            return None, _ssh_error(done.stderr, "the host showed no key")
        printed = run_process(["ssh-keygen", "-lf", seen], text=True,
                              timeout=10).stdout.split()
    return (printed[1], line) if len(printed) > 1 else (None, "ssh-keygen cannot read the key")


def pin_host_key(host_id: int, line: str | None) -> None:
    """Write (line) or remove (None) the host's key in the board's known_hosts."""
    path = os.path.join(ssh_folder(), "known_hosts")
    alias = host_alias(host_id)
    kept = []
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        kept = [k for k in f.read().splitlines() if k.split(" ", 1)[0] != alias]
    if line is not None:
        kept.append(f"{alias} {line.split(' ', 1)[1]}")
    fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(k + "\n" for k in kept))
    os.replace(path + ".new", path)


def kill_remote_group(link: "HostLink", group: int, signum=signal.SIGKILL) -> None:
    """Signal an agent's process group on its host (nothing when it is unreachable)."""
    with contextlib.suppress(HostDown):
        link.run(f"kill -s {signal.Signals(signum).name[3:]} -- -{int(group)} 2>/dev/null; "
                 "true", timeout=30)


# =============================================================================
# SERVICES: PROJECTS AND TASKS
# =============================================================================
# The only code that changes state.  Each service validates, writes in one transaction,
# then publishes its event after the commit.
# The sections named SERVICES: are the services, by concern.

# --- projects ----------------------------------------------------------------

def project_view(row: dict, only=None) -> dict:
    return render(PROJECT_FIELDS, {**row, "simulated": runs_simulated(row)}, only)


def list_projects(more: str = "") -> list[dict]:
    """The project list entries, with `more` fields of the full project (comma-separated
    names: what the board shows of each project, in one read)."""
    names = [name for name in more.split(",") if name]
    readable = {f.name for f in PROJECT_FIELDS if not f.write_only}
    for name in names:
        if name not in readable:
            raise Invalid(f"fields: {name[:40]!r} is not a field of a project", "fields")
    return [project_view(r, (*PROJECT_LIST_FIELDS, *names)) for r in find_rows("projects")]


#: The task counts a project's summary entry shows, by status.
SUMMARY_COUNTS = {"backlog": "backlogCount", "in_progress": "inProgressCount",
                  "testing": "testingCount", "done": "doneCount", "failed": "failedCount"}


def project_summaries() -> list[dict]:
    return [{**render(PROJECT_FIELDS, row, PROJECT_SUMMARY_FIELDS),
             **{name: row["counts"].get(status, 0) for status, name in SUMMARY_COUNTS.items()}}
            for row in project_summary_rows()]


def get_project(project_id: int) -> dict:
    """The full project; raises NotFound."""
    return project_view(found(project_row(project_id), f"project {project_id} not found"))


def create_project(body) -> dict:
    values = validate(PROJECT_FIELDS, body)
    _check_clone_source(values)
    _check_auto_branch(values)
    row = insert_project_row(values)
    project = project_view(row)
    runtime.events.publish("project:created", project, project["id"])
    if row["git_host_sync_enabled"] and row["git_host_repo"]:
        gevent.spawn(sync_issues, row["id"])  # import the issues now, in the background
    return project


def update_project(project_id: int, body) -> dict:
    changes = validate_known(lambda: get_project(project_id), PROJECT_FIELDS, body, partial=True)
    if {"auto_branch", "host_id", "repo_url", "working_dir"} & changes.keys():
        after = {**found(project_row(project_id), f"project {project_id} not found"), **changes}
        if {"host_id", "repo_url", "working_dir"} & changes.keys():
            _check_clone_source(after)
        _check_auto_branch(after)
    row = found(update_project_row(project_id, changes), f"project {project_id} not found")
    project = project_view(row)
    runtime.events.publish("project:updated", project, project_id)
    schedule_queue(project_id)
    if row["git_host_sync_enabled"] and row["git_host_repo"] and (
            "git_host_sync_enabled" in changes or "git_host_repo" in changes):
        gevent.spawn(sync_issues, project_id)  # import the issues now, in the background
    return project


def _check_clone_source(values: dict) -> None:
    """A project on a host needs something the host can clone (design §15): its repoUrl,
    else the origin of its workingDir."""
    if values.get("host_id") is not None and not values.get("repo_url") \
            and host_row(values["host_id"]) is not None \
            and not origin_url(values["working_dir"]):  # (a missing host: the store's 400)
        raise Invalid(f"repoUrl must be set: the project runs on a host, which clones it, and "
                      f"workingDir {values['working_dir'][:200]!r} has no origin remote",
                      "repoUrl")


def folder_state(path: str) -> dict:
    """What a folder is as a project's workingDir, before it is one (the new-project dialog
    asks): a directory, a git repository, one with a commit (each task's branch of autoBranch
    starts there), and, when not, why no branch can be made."""
    if not isinstance(path, str) or not os.path.isabs(path):
        raise Invalid(f"path {str(path)[:200]!r} must be an absolute path", "path")
    directory = os.path.isdir(path)
    repository = directory and git_dirs(path) is not None
    commit = repository and git_head(path) is not None
    return {"path": path, "directory": directory, "repository": repository, "commit": commit,
            "noBranch": None if commit else "is not an existing directory" if not directory
            else "is not a git repository" if not repository else "has no commit yet"}


def _check_auto_branch(values: dict) -> None:
    """autoBranch on this machine needs workingDir in a git repository with a commit, where
    each task's branch starts (on a host, its clone of repoUrl has one)."""
    if values.get("auto_branch") and values.get("host_id") is None:
        why = folder_state(values["working_dir"])["noBranch"]
        if why:
            raise Invalid(f"autoBranch needs a git repository with a commit: workingDir "
                          f"{values['working_dir'][:200]!r} {why} (turn autoBranch off, or "
                          f"run git init and commit there)", "autoBranch")


#: The agent-instructions file the default agent CLI reads.
AGENT_MD = "CLAUDE.md"
#: At most this much of it is passed to a run in a worktree (an argument, not a file).
MAX_INSTRUCTIONS_CHARS = 100_000


def agent_md(project_id: int) -> dict:
    """The project's agent-instructions file: {content, path, exists}."""
    path = os.path.join(get_project(project_id)["workingDir"], AGENT_MD)
    try:  # a run may have made it a link or a FIFO: read as absent, never followed
        with open_regular(path) as f:
            content = f.read(4 * MAX_INSTRUCTIONS_CHARS).decode("utf-8", "replace")
        return {"content": content[:MAX_INSTRUCTIONS_CHARS], "path": path, "exists": True}
    except (FileNotFoundError, IsADirectoryError):
        return {"content": "", "path": path, "exists": False}
    except OSError as exc:
        raise Conflict(f"cannot read {path}: {exc.strerror or exc}") from exc


def save_agent_md(project_id: int, content) -> dict:
    """Replace the agent-instructions file atomically (write a temp file, then rename)."""
    if not isinstance(content, str):
        raise Invalid("content must be a string", "content")
    path = os.path.join(get_project(project_id)["workingDir"], AGENT_MD)
    temp = f"{path}.taskboard-{secrets.token_hex(4)}"
    try:
        with open(temp, "w", encoding="utf-8") as f:
            f.write(content)
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(temp)
        raise Conflict(f"cannot write {path}: {exc.strerror or exc}") from exc
    return agent_md(project_id)


def delete_project(project_id: int) -> dict:
    """Remove a project with its tasks, logs, templates, snippets, webhooks, attachments;
    its agents and its planning session are stopped first."""
    if project_id in runtime.plans:
        cancel_plan(project_id)
    for task_id in runtime.agents.tasks_of(project_id):
        runtime.agents.stop(task_id)
    project = project_row(project_id)
    paths = found(delete_project_row(project_id), f"project {project_id} not found")
    _remove_files(paths)
    folder = os.path.join(runtime.data_dir, "worktrees", str(project_id))
    if os.path.isdir(folder):  # the worktrees go; their branches stay in the repository
        shutil.rmtree(folder, ignore_errors=True)
        if git_head(project["working_dir"]):
            run_command(["sh", "-c", in_repository("git worktree prune", THIS_MACHINE.git_dir(
                project))], repo_root(project["working_dir"]), 30, env={**os.environ, **GIT_ENV})
    # its sandboxed runs' CLI state and cache (SANDBOX_RUN's TB_KEEP; a host's stay there)
    shutil.rmtree(os.path.join(runtime.data_dir, "cli-state", str(project_id)),
                  ignore_errors=True)
    runtime.events.publish("project:deleted", {"id": project_id}, project_id)
    return {"ok": True}


# --- tasks -------------------------------------------------------------------

def task_view(row: dict) -> dict:
    return render(TASK_FIELDS, row)


def list_tasks(project_id: int) -> RawJson:
    """The project's tasks as JSON text made by SQLite: the board's hottest read."""
    return RawJson(found(task_rows_json(project_id, json_object_sql(TASK_FIELDS)),
                         f"project {project_id} not found"))


def get_task(task_id: int) -> dict:
    """The task; raises NotFound."""
    return task_view(found(task_row(task_id), f"task {task_id} not found"))


def task_detail(task_id: int) -> "RawJson":
    """The task with commits, revisions, attachments and its complete log, as JSON text:
    the log's entries are rendered by SQLite, not one Python object each."""
    row = found(task_detail_rows(task_id, json_object_sql(LOG_FIELDS)), f"task {task_id} not found")
    detail = task_view(row)
    detail["commits"] = task_commits(row)
    detail["revisions"] = [render(REVISION_FIELDS, r) for r in row["revisions"]]
    detail["attachments"] = [render(ATTACHMENT_FIELDS, r) for r in row["attachments"]]
    return RawJson(f'{json_dumps(detail)[:-1]},"logs":{row["logs_json"]}}}')


def create_task(project_id: int, body) -> dict:
    """Create a task in backlog, then apply a requested status through move_task()."""
    values = validate_known(lambda: get_project(project_id), TASK_FIELDS, body)
    status = values.pop("status")
    if status == "in_progress":  # refuse before creating anything
        if project := project_row(project_id):
            runtime.agents.check_free(project_id, project["max_concurrent"], project["slug"])
    notice = Notice("task:created")
    row, auto_queue = found(insert_task_row(project_id, values, task_defaults(), notice),
                            f"project {project_id} not found")
    task = task_view(row)
    runtime.events.publish("task:created", task, project_id)
    announce(notice)
    if values.get("parent_task_id") is not None:
        _publish_task(task_row(values["parent_task_id"]))
    if status != "backlog":
        task = move_task(task["id"], status)
    elif auto_queue or values.get("parent_task_id") is not None:
        schedule_queue(project_id)  # a new backlog task may be startable at once
    return task


def task_defaults() -> dict:
    """A new task's model and effort unless its type's template names them."""
    settings = get_settings()
    return {"model": settings["defaultModel"], "thinking_effort": settings["defaultEffort"]}


def update_task(task_id: int, body) -> dict:
    """Change the fields sent; a changed status goes through move_task()."""
    before = found(task_row(task_id), f"task {task_id} not found")
    changes = validate(TASK_FIELDS, body, partial=True)
    if body.get("parent_task_id", before["parent_task_id"]) != before["parent_task_id"]:
        raise Invalid("parent_task_id can only be set when the task is created", "parent_task_id")
    status = changes.pop("status", None)
    if status == "in_progress" and before["status"] != "in_progress" \
            and not runtime.agents.holds(task_id):  # refuse before changing anything
        slot = task_slot_row(task_id)
        runtime.agents.check_free(slot["project_id"], slot["max_concurrent"], slot["slug"])
    if changes:
        row = found(update_task_row(task_id, changes), f"task {task_id} not found")
        _publish_task(row)
    if status is not None:
        return move_task(task_id, status)
    return get_task(task_id)


def release_task(task_id: int) -> dict:
    """A person moved or edited the task: an imported one may now be queued."""
    row = task_row(task_id)
    if row is not None and row["source"] and not row["released"]:
        row = update_task_row(task_id, {"released": 1})
        _publish_task(row)
        schedule_queue(row["project_id"])
    return get_task(task_id)


def move_task(task_id: int, to: str, *, manual: bool = True, only_from: str | None = None,
              reason: str | None = None, run_options: dict | None = None,
              event: str | None = "auto") -> dict:
    """Apply a status change: the one function every move goes through (design §5).

    Records it, starts (409 without a free slot) or stops the agent, queues the webhook
    notice and lets the parent and the queue look again; only_from guards the move."""
    if to not in STATUSES:
        raise Invalid(f"status {json_dumps(to)[:60]} is not one of: {', '.join(STATUSES)}",
                      "status")
    if event == "auto":
        event = {"in_progress": "task:started", "done": "task:approved"}.get(to) or (
            {"testing": "task:completed", "failed": "task:failed"}.get(to) if not manual
            else None)
    notice = Notice(event, reason=reason) if event else None
    reserved = to == "in_progress" and _reserve_slot(task_id)
    try:
        moved = move_task_row(task_id, to, functools.partial(_move_changes, to, manual),
                              only_from, notice)
    except BaseException:
        if reserved:
            runtime.agents.release(task_id)
        raise
    before, after = found(moved, f"task {task_id} not found")
    if before["status"] == after["status"]:
        if reserved:
            runtime.agents.release(task_id)
        return task_view(after)
    runtime.logs.append(task_id, "status", f"status {before['status']} -> {to}"
                        + (f": {reason}" if reason else ""))
    _publish_task(after)
    announce(notice)
    if event in ("task:completed", "task:failed"):
        push_task("testing" if to == "testing" else "failed", after)
    if to == "in_progress":
        start_run(task_id, **(run_options or {}))
    else:
        runtime.agents.stop(task_id)
        if after["attempts"] is not None:
            _stop_attempts(task_id)
    if to in ("done", "backlog"):
        stop_previews(task_id)
    if to == "done":
        runtime.chores.spawn(after_done, task_id)  # PR, issue, worktree: in the background
    settle_parent(after["parent_task_id"])
    schedule_queue(after["project_id"])
    return get_task(task_id)


def _reserve_slot(task_id: int) -> bool:
    """Hold an agent slot of the task's project, or raise Conflict when none is free."""
    row = found(task_slot_row(task_id), f"task {task_id} not found")
    if row["status"] == "in_progress" or row["attempts_open"]:
        return False  # running, or its attempts take slots of their own
    if full := host_machine(row["host_id"]).full():
        raise Conflict(full)
    return runtime.agents.reserve(task_id, row["project_id"], row["max_concurrent"], row["slug"])


def delete_task(task_id: int) -> dict:
    runtime.agents.stop(task_id)
    stop_previews(task_id)
    _stop_attempts(task_id)
    attempts = attempt_rows(task_id)
    task, paths, orphans = found(delete_task_row(task_id), f"task {task_id} not found")
    _remove_files(paths)
    if project := project_row(task["project_id"]):
        remove_worktree(task, project)
        if attempts and not any(a["picked"] for a in attempts):
            try:
                _clear_attempts(task, project, attempts)
            except Conflict as exc:
                log.warning("task %s: its attempts' worktrees were not removed: %s",
                            task_id, exc)
    runtime.events.publish("task:deleted", {"id": task_id, "projectId": task["project_id"]},
                        task["project_id"])
    for orphan in orphans:
        _publish_task(orphan)
    settle_parent(task["parent_task_id"])
    schedule_queue(task["project_id"])
    return {"ok": True}


def stop_task(task_id: int) -> dict:
    """Kill the task's agent (its whole process group) and put it back in the backlog."""
    task = get_task(task_id)
    if task["status"] != "in_progress":
        raise Conflict(f"task {task_id} is not in progress (it is {task['status']})", "id")
    return move_task(task_id, "backlog", reason="stopped by hand")


def restart_task(task_id: int, mcp_port: int | None = None) -> dict:
    """Stop any agent of the task and start a fresh session (no resume)."""
    task = get_task(task_id)
    if task["status"] != "in_progress":
        return move_task(task_id, "in_progress", reason="restarted",
                         run_options={"mcp_port": mcp_port})
    runtime.agents.stop(task_id)
    runtime.logs.append(task_id, "system", "restarted by hand: a fresh session")
    notice = Notice("task:started", reason="restarted")
    queue_notice(notice, task_id)
    announce(notice)
    if runtime.agents.reserve(task_id, task["project_id"], None):
        start_run(task_id, mcp_port=mcp_port)
    return get_task(task_id)


def request_changes(task_id: int, feedback, mcp_port: int | None = None,
                    sent: dict | None = None) -> dict:
    """Record a revision and have the agent work on the feedback: its own session resumed
    with the feedback as the prompt, else a fresh one with every revision in the prompt.
    `sent`: the signals of its pull request that this sends back (see send_pr_back)."""
    if not isinstance(feedback, str) or not feedback.strip():
        raise Invalid("feedback must be a non-empty string", "feedback")
    task = get_task(task_id)
    if task["status"] == "backlog":
        raise Conflict(f"task {task_id} is in the backlog: start it instead", "id")
    if task["attempts"] is not None and not any(a["picked"] for a in attempt_rows(task_id)):
        raise Conflict(f"task {task['task_key']} was run by several agents: pick the attempt "
                       "to keep first, then ask its agent for changes", "id")
    if task["status"] != "in_progress" and not runtime.agents.holds(task_id):
        slot = found(task_slot_row(task_id), f"task {task_id} not found")
        runtime.agents.check_free(slot["project_id"], slot["max_concurrent"], slot["slug"])
    runtime.agents.stop(task_id)
    notice = Notice("task:changes_requested", feedback=feedback.strip())
    task = insert_revision_row(task_id, feedback.strip(), notice, sent)
    if task is None and sent and task_row(task_id):
        raise Conflict(f"task {task_id} is no longer done")
    task = found(task, f"task {task_id} not found")
    _publish_task(task)
    announce(notice)
    options = {"resume": True, "prompt": feedback.strip(), "mcp_port": mcp_port}
    if task["status"] != "in_progress":
        return move_task(task_id, "in_progress", reason="the pull request needs changes"
                         if sent else "changes requested", run_options=options, event=None,
                         only_from="done" if sent else None)
    if runtime.agents.reserve(task_id, task["project_id"], None):
        start_run(task_id, **options)
    return get_task(task_id)


def task_logs(task_id: int, limit: int, before: int | None = None,
              kind: str | None = None, attempt: int | None = None) -> RawJson:
    """A page of the task's log (of one kind, of one attempt's runs) as JSON text made by
    SQLite (up to 10,000 entries)."""
    return RawJson(found(log_rows_json(task_id, limit, before, json_object_sql(LOG_FIELDS),
                                       kind, attempt), f"task {task_id} not found"))


def task_events(task_id: int, limit: int) -> list[dict]:
    rows = found(task_event_rows(task_id, limit), f"task {task_id} not found")
    return [{"id": r["id"], "runId": r["run_id"], "seq": r["seq"], "createdAt": r["created_at"],
             "kind": r["kind"], "raw": r["raw"]} for r in rows]


#: Log retention deletes this many rows per transaction, and runs this often.
LOG_COMPACT_CHUNK = 2000
LOG_COMPACT_SECONDS = 3600.0


def compact_logs() -> int:
    """Delete agent log entries and raw events older than the logRetentionDays setting
    (task data stays); in small transactions, yielding between them.  Returns how many."""
    days = get_settings()["logRetentionDays"]
    if not days:
        return 0
    cutoff = iso(utc_now() - dt.timedelta(days=days))
    removed = 0
    for table in ("logs", "task_events"):
        while True:
            count = delete_old_log_rows(table, cutoff, LOG_COMPACT_CHUNK)
            removed += count
            if count < LOG_COMPACT_CHUNK:
                break
            gevent.sleep(0)  # let requests in between chunks
    if removed:
        log.info("log retention: removed %s entries older than %s days", removed, days)
    return removed


def retain_logs() -> float:
    """A round of the background retention (shortly after start, then every
    LOG_COMPACT_SECONDS)."""
    compact_logs()
    return LOG_COMPACT_SECONDS


class Checkpoints(Worker):
    """Keeps the write-ahead log short: a round (see checkpoint) CHECKPOINT_SECONDS after
    the first commit since the last round (tx() wakes it), so none while nothing is written."""

    def __init__(self):
        super().__init__("checkpoint", first=None)
        self.failing = None

    def step(self) -> float | None:
        try:
            checkpoint(runtime.config["db_path"])
        except sqlite3.Error as exc:  # a full disk, a lock another program holds: again
            if str(exc) != self.failing:  # said once, not every round
                log.warning("checkpoint: %s", exc)
            self.failing = str(exc)
            return CHECKPOINT_SECONDS
        self.failing = None
        return None


def task_revisions(task_id: int) -> list[dict]:
    return [render(REVISION_FIELDS, r) for r in found(
        owned_rows("revisions", "tasks", task_id=task_id), f"task {task_id} not found")]


def announce(notice: Notice | None) -> None:
    """After the commit of the change a notice announces: wake the webhooks it was queued
    for (their Outbox delivers it in the background)."""
    if notice is None:
        return
    if notice.dropped:
        log.warning("webhooks of project %s: more than %s notices waiting; dropped the %s "
                    "oldest", notice.project_id, WEBHOOK_QUEUE_KEPT, notice.dropped)
    for hook_id in notice.hooks:
        runtime.webhooks.wake(hook_id)


def _publish_task(row: dict | None) -> None:
    if row is not None:
        runtime.events.publish("task:updated", task_view(row), row["project_id"])


def _move_changes(to: str, manual: bool, before: dict, now: str) -> dict:
    """The timer and counter columns a move from before["status"] to `to` changes."""
    changes = {"agent_done": 0, "waiting_until": None, "waiting_for_json": None}
    if before["status"] == "in_progress" and before["in_progress_since"]:
        spent = parse_iso(now) - parse_iso(before["in_progress_since"])
        changes["work_duration_ms"] = before["work_duration_ms"] + \
            int(spent.total_seconds() * 1000)
        changes["in_progress_since"] = None
    if to == "in_progress":
        changes.update(in_progress_since=now, started_at=before["started_at"] or now,
                       completed_at=None)
        if manual:
            changes["retry_count"] = 0
    elif to in ("testing", "done"):
        changes["completed_at"] = now
    elif to == "backlog":
        changes["completed_at"] = None
    return changes


def _remove_files(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(runtime.data_dir, path))
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(os.path.join(runtime.data_dir, path)))


# --- pipeline: queue, dependencies, sub-tasks ----------------------------------
# The queue starts ready backlog tasks whenever something changes that could free a slot
# or satisfy a dependency: every move, run end, new task, edge, reorder or setting.

#: Parent statuses that satisfy an edge of each condition.
CONDITIONS = {"always": ("testing", "done", "failed"), "on_success": ("testing", "done"),
              "on_failure": ("failed",)}
#: A task in one of these has finished, for dependencies and waves.
FINISHED = ("testing", "done", "failed")


def schedule_queue(project_id: int) -> None:
    """Run the project's queue soon, once, however many changes asked for it."""
    if project_id in runtime.queue_pending:
        return
    runtime.queue_pending.add(project_id)
    scheduled_by = runtime

    def tick():
        if runtime is not scheduled_by or runtime.agents.closed:
            return  # the board shut down meanwhile
        runtime.queue_pending.discard(project_id)
        try:
            run_queue(project_id)
        except Exception:  # a background loop: log and carry on
            log.exception("queue of project %s failed", project_id)
    runtime.chores.spawn(tick)


def run_queue(project_id: int) -> list[int]:
    """Start the queued attempts of running tasks, then ready backlog tasks in queue
    order, while the project has free slots; return the ids of the tasks started.
    Sub-tasks of a waiting parent are started even without autoQueue."""
    project = project_row(project_id)
    if project is None or runtime.agents.used(project_id) >= project["max_concurrent"]:
        return []
    tasks, edges = queue_rows(project_id, bool(project["auto_queue"]))
    if not tasks and not queued_attempt_rows(project_id):
        return []
    if daily_limit_reached():
        return []  # start nothing new today
    limited = {a for a, until in runtime.limits.items() if until > time.time()}
    _start_queued_attempts(project, limited)  # first: their tasks run already
    states = dependency_states(tasks, edges)
    started = []
    for task in tasks:
        if states[task["id"]][0] != "ready" or (task["agent"] or project["agent"]) in limited:
            continue  # not ready, or its agent waits out a usage limit
        if runtime.agents.used(project_id) >= project["max_concurrent"] or \
                host_machine(project["host_id"]).full():
            break
        try:
            move_task(task["id"], "in_progress", manual=False, only_from="backlog",
                      reason="started by the queue")
        except Conflict:
            break
        started.append(task["id"])
    return started


def daily_limit_reached() -> bool:
    """Whether today's agent cost reached the dailyCostLimit setting."""
    limit = get_settings()["dailyCostLimit"]
    return limit is not None and cost_since_row(local_day_start_iso()) >= limit


def dependency_states(tasks: list[dict], edges: list[dict]) -> dict:
    """For every task: ("ready" | "waiting" | "blocked", reason or None).

    Each edge carries its parent's status and key (parent_status, parent_key).
    """
    parents = collections.defaultdict(list)
    for edge in edges:
        parents[edge["to_id"]].append(edge)
    states = {}
    for task in tasks:
        waits, blocks = [], []
        for edge in parents[task["id"]]:
            status, key = edge["parent_status"], edge["parent_key"]
            if status in CONDITIONS[edge["condition_type"]]:
                continue
            if status in FINISHED:
                blocks.append(f"{key} is {status}, so its {edge['condition_type']} "
                              "condition cannot hold")
            else:
                waits.append(f"{key} ({status})")
        if blocks:
            states[task["id"]] = ("blocked", "; ".join(blocks))
        elif waits:
            states[task["id"]] = ("waiting", "waits for " + ", ".join(waits))
        else:
            states[task["id"]] = ("ready", None)
    return states


def execution_waves(tasks: list[dict], edges: list[dict]) -> list[list[dict]]:
    """Wave 0: unfinished tasks with no unfinished parents; wave n+1: those whose unfinished
    parents are all in waves <= n.  Tasks of one wave may run in parallel."""
    open_ids = [t["id"] for t in tasks if t["status"] not in FINISHED]
    parents = collections.defaultdict(set)
    for edge in edges:
        if edge["from_id"] in open_ids and edge["to_id"] in open_ids:
            parents[edge["to_id"]].add(edge["from_id"])
    by_id = {t["id"]: t for t in tasks}
    placed, waves, left = set(), [], list(open_ids)
    while left:
        wave = [i for i in left if parents[i] <= placed] or left  # a cycle: put it last
        waves.append([by_id[i] for i in wave])
        placed.update(wave)
        left = [i for i in left if i not in placed]
    return waves


def settle_parent(parent_id: int | None) -> None:
    """A parent whose agent finished waits in in_progress for its sub-tasks: it moves to
    testing when all are in testing or done, to failed as soon as one failed."""
    if parent_id is None:
        return
    parent = task_row(parent_id)
    if parent is None or parent["status"] != "in_progress" or not parent["agent_done"]:
        return
    children = find_rows("tasks", parent_task_id=parent_id)
    if failed := [c["task_key"] for c in children if c["status"] == "failed"]:
        _fail_task(parent_id, f"sub-task {', '.join(failed)} failed")
    elif all(c["status"] in ("testing", "done") for c in children):
        move_task(parent_id, "testing", manual=False, only_from="in_progress",
                  reason="every sub-task is finished")


def add_dependency(task_id: int, depends_on_id: int, condition: str) -> dict:
    if not isinstance(condition, str) or condition not in CONDITIONS:
        raise Invalid(f"conditionType {json_dumps(condition)[:40]} is not one of: "
                      f"{', '.join(CONDITIONS)}", "conditionType")
    edge = upsert_dependency_row(depends_on_id, task_id, condition)
    _dependencies_changed(edge["project_id"])
    return {"from": edge["from_id"], "to": edge["to_id"], "conditionType": edge["condition_type"]}


def remove_dependency(task_id: int, depends_on_id: int) -> dict:
    _dependencies_changed(found(delete_dependency_row(depends_on_id, task_id),
                                f"task {task_id} does not depend on task {depends_on_id}"))
    return {"ok": True}


def task_dependencies(task_id: int) -> dict:
    rows = found(task_dependency_rows(task_id), f"task {task_id} not found")
    return {"parents": [e["from_id"] for e in rows["parents"]],
            "children": [e["to_id"] for e in rows["children"]]}


def dependency_graph(project_id: int) -> dict:
    tasks, edges = found(pipeline_rows(project_id), f"project {project_id} not found")
    return {"tasks": [task_view(t) for t in tasks],
            "edges": [{"from": e["from_id"], "to": e["to_id"],
                       "conditionType": e["condition_type"]} for e in edges],
            "waves": [[t["id"] for t in wave] for wave in execution_waves(tasks, edges)]}


def waves_of(project_id: int) -> list[list[dict]]:
    tasks, edges = found(pipeline_rows(project_id), f"project {project_id} not found")
    return [[task_view(t) for t in wave] for wave in execution_waves(tasks, edges)]


def pipeline_status(project_id: int) -> dict:
    """What the pipeline is doing: the active wave, running, queued and blocked tasks."""
    project = get_project(project_id)
    tasks, edges = found(pipeline_rows(project_id), f"project {project_id} not found")
    states = dependency_states(tasks, edges)
    waves = execution_waves(tasks, edges)
    wave_of = {t["id"]: n for n, wave in enumerate(waves) for t in wave}
    running = [t for t in tasks if t["status"] == "in_progress"]
    backlog = [t for t in tasks if t["status"] == "backlog"]
    queue_on = bool(project["autoQueue"])
    return {
        "projectId": project_id, "autoQueue": project["autoQueue"],
        "maxConcurrent": project["maxConcurrent"],
        "slotsUsed": runtime.agents.used(project_id),
        "activeWave": min((wave_of[t["id"]] for t in running + backlog), default=None),
        "waves": [[t["id"] for t in wave] for wave in waves],
        "running": [{"taskId": t["id"], "taskKey": t["task_key"],
                     "isRunning": runtime.agents.holds(t["id"]),
                     "awaitingSubtasks": bool(t["agent_done"])} for t in running],
        "queued": [{"taskId": t["id"], "taskKey": t["task_key"],
                    "reason": "starts when a slot is free"
                    if queue_on and (not t["source"] or t["released"])
                    else "autoQueue is off, or the task was imported and waits for you to "
                         "move or edit it"}
                   for t in backlog if states[t["id"]][0] == "ready"],
        "blocked": [{"taskId": t["id"], "taskKey": t["task_key"],
                     "state": states[t["id"]][0], "reason": states[t["id"]][1]}
                    for t in backlog if states[t["id"]][0] != "ready"],
    }


def reorder_queue(project_id: int, task_ids) -> dict:
    if not isinstance(task_ids, list) or not task_ids or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 < i < 2**63
            for i in task_ids):
        raise Invalid("taskIds must be a non-empty array of task ids", "taskIds")
    if len(set(task_ids)) != len(task_ids):
        raise Invalid("taskIds must not repeat a task", "taskIds")
    rows = found(reorder_rows(project_id, task_ids), f"project {project_id} not found")
    for row in rows:
        _publish_task(row)
    schedule_queue(project_id)
    return {"ok": True}


def _dependencies_changed(project_id: int) -> None:
    runtime.events.publish("dependencies:updated", {"projectId": project_id}, project_id)
    schedule_queue(project_id)


# =============================================================================
# SERVICES: RUNS
# =============================================================================
# An agent run from start to end (AgentRun in SUPERVISORS owns its process): prepared,
# started, ended, retried, waiting for a limit or the sandbox; the same path for a task's
# own run and an attempt's, which differ by their owner (RunOwner).

# --- runs ----------------------------------------------------------------------

def start_run(task_id: int, *, resume: bool = False, prompt: str | None = None,
              note: str | None = None, mcp_port: int | None = None,
              owner: "RunOwner | None" = None) -> None:
    """Start the agent of a task (or of the `owner` given: one of its attempts) holding a
    slot: fresh, or its session resumed with `prompt`, as its machine begins a run.
    Whatever goes wrong, the slot is given back."""
    owner = owner or TaskOwner(task_id)
    machine_of(task_host_row(task_id)).begin(_start_guarded, owner, resume, prompt, note,
                                             mcp_port)


def _start_guarded(owner: "RunOwner", resume: bool, prompt: str | None, note: str | None,
                   mcp_port: int | None) -> None:
    try:
        _start_run(owner, resume, prompt, note, mcp_port)
    except (HostDown, sqlite3.Error, OSError, GitError) as exc:
        owner.could_not_start(exc)


def _start_run(owner: "RunOwner", resume: bool, prompt: str | None, note: str | None,
               mcp_port: int | None) -> None:
    context = run_context_rows(owner.task_id)
    if context is None or context["task"]["status"] != "in_progress":
        runtime.agents.release(owner.slot)
        return
    task, project, host = context["task"], context["project"], context["host"]
    if owner.runs_instead(task):
        return
    machine, own = machine_of(host), owner.own(task)
    try:
        agent, command, sandboxed = run_agent(project, own["agent"], machine)
    except CannotRun as exc:
        owner.cannot_run(task, exc, owner.again(resume=resume, prompt=prompt, note=note,
                                                mcp_port=mcp_port))
        return
    except HostDown as exc:
        owner.wait_for_host(task, host, exc)
        return
    session_id = own["session_id"] if resume and \
        session_agent_row(own["session_id"]) == agent else None
    if session_id is None:
        prompt = None  # a fresh session needs the whole story, revisions included
    tools = ADAPTERS[agent].BOARD_TOOLS and machine.reaches_board
    text = prompt if prompt is not None else build_prompt(context, note=note, tools=tools)
    cwd = task_checkout(*owner.checkout(task, project), machine)
    attachments = machine.attachments(task, context["attachments"])
    two_way = AGENTS[agent].two_way
    run = prepare_run(machine, project, agent, command, "task", cwd, own["model"],
                      own["effort"], text, task_run_flags(project, session_id, attachments),
                      task_id=owner.task_id, session_id=session_id, tools=tools,
                      mcp_port=mcp_port, sandboxed=sandboxed, files=[attachments],
                      end=run_end(owner.work(task), project, cwd, machine),
                      owner=owner, on_finish=finish_run,
                      channel=run_channel(project) if two_way else None)
    if agent == "claude":
        run.queued.extend(owner.queued_messages())  # sent while no agent ran
    _log_start(run, project, agent, own["effort"], session_id, two_way)
    _launch(run, owner, sandboxed)


def _log_start(run: "AgentRun", project: dict, agent: str, effort: str,
               session_id: str | None, two_way: bool) -> None:
    """What the log says of a run about to start: which agent, where, how sandboxed and
    whether it can ask for approvals."""
    task_id, run_id, where = run.task_id, run.run_id, run.machine.where
    what = f"resuming session {session_id}" if session_id else "starting the agent"
    runtime.logs.append(task_id, "system", f"{run.owner.said}{what} ({agent}, "
                        f"{run.model_name}, effort {effort}) in {run.cwd}{where}", run_id)
    if run.parser.simulated:  # the demo's agent edits only its scratch repository
        runtime.logs.append(task_id, "system", "simulated: no sandbox needed", run_id)
    elif run.sandbox is not None or project["sandbox"] == "auto":
        runtime.logs.append(task_id, "system", "in the sandbox (bubblewrap)" if run.sandbox
                            is not None else f"not sandboxed: bubblewrap does not work{where}: "
                            f"{run.machine.sandbox()['error']}", run_id)
    if not two_way and project["permission_mode"] != "auto-accept":
        runtime.logs.append(task_id, "system", f"approvals not available for this agent "
                            f"({agent}): what would need a person's approval is refused "
                            "(permission mode auto-accept lets it run)", run_id)


def _launch(run: "AgentRun", owner: "RunOwner", sandboxed: bool) -> None:
    """The prepared run takes its held slot and starts: the owner and its task show it
    running; what cannot start fails the owner."""
    try:
        launched = runtime.agents.launch(run)
    except OSError as exc:
        revoke_run_token(run)
        update_run_row(run.run_id, {"status": "failed", "error": str(exc),
                                    "ended_at": now_iso()})
        owner.give_up(f"could not start {run.argv[0]!r} in {run.cwd}: {exc}", run.run_id)
        return
    if not launched:
        revoke_run_token(run)
        update_run_row(run.run_id, {"status": "stopped", "ended_at": now_iso()})
        return
    owner.started(run.run_id)
    _publish_task(update_task_row(owner.task_id, {
        "is_running": 1, "last_error": None, "waiting_until": None, "waiting_for_json": None,
        "sandboxed": None if run.parser.simulated else sandboxed}))


def wait_for_sandbox(task: dict, why: str) -> None:
    """The project must be sandboxed and the sandbox does not work: the task keeps its
    place, is not charged an attempt, and starts once it works (design §17)."""
    runtime.agents.release(task["id"])
    runtime.logs.append(task["id"], "system", f"waiting: {why}", is_error=True)
    _publish_task(update_task_row(task["id"], {"waiting_for_json": json_dumps(
        {"sandbox": why}), "is_running": 0}))
    runtime.sandbox_retry.wake(HOST_CHECK_SECONDS)


def retry_sandbox() -> float | None:
    """While tasks wait for the sandbox: try bubblewrap again every HOST_CHECK_SECONDS
    (a host's: its checks), and start each once it works where the task runs."""
    waiting = waiting_task_rows(None)
    if not waiting:
        return None
    runtime.sandbox = sandbox_here(runtime.config)  # a host's: its check's
    for task in waiting:
        project = project_row(task["project_id"])
        if project is not None and project_machine(project).sandbox()["works"] and \
                task["status"] == "in_progress" and runtime.agents.reserve(
                    task["id"], task["project_id"], None):
            start_run(task["id"], resume=bool(task["session_id"]), prompt="continue")
    return HOST_CHECK_SECONDS


def record_session(run: "AgentRun", session_id: str) -> None:
    """Keep the session id: of the run, and of its owner when it is the owner's own agent
    (a verifier's session must never be resumed as the task's)."""
    update_run_row(run.run_id, {"session_id": session_id})
    if run.on_finish is finish_run:
        run.owner.record_session(session_id)


def publish_usage(run: "AgentRun") -> None:
    usage = run.parser.usage
    runtime.events.publish("task:usage", {
        "taskId": run.task_id, "projectId": run.project_id, "runId": run.run_id,
        "inputTokens": usage["input"], "outputTokens": usage["output"],
        "cacheReadTokens": usage["cache_read"], "cacheCreationTokens": usage["cache_creation"],
        "cost": round(run.cost(), 6)}, run.project_id)


def run_network_ended(run_id: int | None, task_id: int | None, network: dict) -> None:
    """A sandboxed run's egress proxy closed: what it reached and refused is recorded (its
    task is published with its run's end)."""
    if run_id is not None:
        run_network_rows(run_id, task_id, network)


def finish_run(run: "AgentRun") -> None:
    """Record how a task's or an attempt's run ended, add its usage to the task, and move
    its owner on: done, retried, waiting for a limit, failed or stopped.

    The run's log is written first, so whoever sees the task move has seen all of it.
    """
    owner = run.owner
    task = task_row(run.task_id)
    outcome, reason = close_run(run, task and owner.work(task), owner.said)
    status = outcome if outcome in ("ok", "stopped", "interrupted") else "failed"
    outcome, reason, until, waits = _limit_outcome(run, outcome, reason)
    denials = len(run.parser.denials)
    task = finish_run_rows(run.run_id, {
        "status": status, "exit_code": run.exit_code, "error": reason, **run.usage_columns(),
        "permission_denials": denials, "head_end": run.machine.head(run.cwd)},
        owner.task_changes(run, outcome, reason))
    kept = outcome in ("retry", "wait") and task is not None
    runtime.agents.forget(run, keep_slot=kept)
    owner.recorded(run)
    run.machine.runs_changed()
    for project_id in run.machine.neighbours(run.project_id):  # a slot is free
        schedule_queue(project_id)
    check_budget()
    if task is None:  # deleted meanwhile: an attempt's row, kept, says it stopped
        owner.stopped(outcome, False)
        return
    _publish_task(task)
    if owner.stopped(outcome, task["status"] == "in_progress"):
        if kept:
            runtime.agents.release(run.slot)
    elif outcome == "wait" and task["status"] == "in_progress":
        runtime.limit_waits[run.slot] = waits
        _wait_for_limit(owner, task, run_agent_row(run.run_id), until, run.run_id,
                        owner.again(resume=True, prompt="continue"))
    elif outcome == "wait":
        runtime.agents.release(run.slot)
    elif outcome == "ok":
        owner.done(run, task)
    elif outcome == "retry":
        _retry_or_fail(owner, task, reason, run.run_id)
    elif outcome == "fail":
        owner.fail(reason, run.run_id)
    elif outcome == "no_session":
        runtime.logs.append(run.task_id, "system", f"{owner.said}{reason}; starting a fresh "
                            "session", run.run_id)
        if runtime.agents.reserve(run.slot, run.project_id, None):
            owner.again()()
    schedule_queue(run.project_id)


def _limit_outcome(run: "AgentRun", outcome: str, reason: str | None) \
        -> tuple[str, str | None, float | None, int]:
    """A run that ended on its agent's usage limit: the limit kept, and the wait it asks
    for (outcome "wait", until when, the waits in a row, this one included) unless the
    reset is unknown or past the longest wait, or its owner waited MAX_LIMIT_WAITS times in
    a row (then "retry", as a failure)."""
    until = limit_resets(run.parser) if outcome == "wait" else None
    waits = runtime.limit_waits.pop(run.slot, 0) + 1
    if until is not None:
        set_agent_limit(run_agent_row(run.run_id), until, reason)
        if waits > MAX_LIMIT_WAITS:
            reason = f"{reason} (still limited after {waits - 1} waits)"
            return "retry", reason, None, waits
    elif outcome == "wait":  # the reset moved past the longest wait meanwhile
        outcome = "retry"
    return outcome, reason, until, waits


def close_run(run: "AgentRun", task: dict | None, said: str = "") -> tuple[str, str | None]:
    """What every end of a task's (or an attempt's: `task` as attempt_task() gives it,
    `said` the log's prefix) agent run does first: its token revoked, what it left
    uncommitted committed (by its sandbox, as it ended, unless it was cut short) and its
    commits put on its branch, its open requests expired, its log written; how it ended."""
    revoke_run_token(run)
    if task is not None:
        try:
            commit_leftovers(task, run.cwd, run.run_id, run.machine, None if run.end_code
                             is None else (run.end_code, "\n".join(run.end_lines)))
        except (GitError, HostDown) as exc:
            runtime.logs.append(run.task_id, "system", f"{said}the agent's changes were not "
                                f"committed: {exc}", run.run_id, is_error=True)
    expire_requests(run.run_id)
    runtime.logs.flush([run.task_id])
    return judge_run(run.parser, run.exit_code, run.stop_reason)


def _retry_or_fail(owner: "RunOwner", task: dict, reason: str, run_id: int) -> None:
    """A retryable failure of a task's or an attempt's run: try again after a backoff
    (with a fifth of jitter either way) while the project's retries are left, else fail."""
    project = project_row(task["project_id"])
    if task["status"] != "in_progress" or project is None:
        runtime.agents.release(owner.slot)
        return
    if owner.retries(task) >= project["max_retries"]:
        owner.give_up(f"{reason} (no retries left of {project['max_retries']})", run_id)
        return
    retry = owner.count_retry()
    delay = backoff(runtime.config["retry_base_seconds"], retry) * \
        (1 + secrets.SystemRandom().uniform(-0.2, 0.2))
    runtime.logs.append(task["id"], "system", f"{owner.tried} failed: {reason}; retry {retry} "
                        f"of {project['max_retries']} in {delay:.1f}s", run_id, is_error=True)
    note = f"A previous attempt at this task failed: {reason}. Check the current state of " \
        "the working directory before continuing."
    runtime.agents.retry_later(owner.slot, project["id"], delay, owner.again(note=note))


def _fail_task(task_id: int, reason: str, run_id: int | None = None) -> None:
    runtime.logs.append(task_id, "system", f"failed: {reason}", run_id, is_error=True)
    _publish_task(update_task_row(task_id, {"last_error": reason}))
    move_task(task_id, "failed", manual=False, only_from="in_progress", reason=reason)


# --- whose run it is -------------------------------------------------------------
# A task's own run and an attempt's (design §18) take one path, start to end, retries and
# verdict; what differs is their owner: the slot it holds, the checkout it works in, the
# session, retry count and rows it keeps, what it publishes and what a failure does to it.

class RunOwner:
    """Whose agent run (and whose verifier's) it is: a task's (TaskOwner) or one of its
    attempts' (AttemptOwner, in SERVICES: ATTEMPTS).  One owner follows its runs through
    retries and waits."""

    task_id: int
    #: the AgentPool key of its runs: the task's id, or (task id, n)
    slot: object
    #: how the log begins what it says of the owner's runs
    said = ""
    #: what the log calls one failed try of its agent
    tried = "attempt"
    #: the task's status while the owner's work waits for the verifier's verdict
    verified_in = "testing"
    #: its attempt's row (None: the task's own run) and its number, for the diff
    attempt = None
    n = None

    def again(self, **how) -> "functools.partial":
        """Its agent started again (`how`: start_run's resume, prompt, note)."""
        return functools.partial(start_run, self.task_id, owner=self, **how)

    def cannot_run(self, task: dict, exc: "CannotRun", start) -> None:
        """Its agent cannot run now: at its usage limit it waits, then start() runs it as
        it was about to; a sandbox that does not work, it waits for (a task; an attempt
        fails); else it fails."""
        if exc.until is not None:
            _wait_for_limit(self, task, exc.agent, exc.until, None, start)
        elif exc.sandbox:  # not started, not charged: it starts once the sandbox works
            self.wait_for_sandbox(task, str(exc))
        else:
            self.give_up(str(exc))

    def give_up(self, reason: str, run_id: int | None = None) -> None:
        """The slot goes back and the owner fails."""
        runtime.agents.release(self.slot)
        self.fail(reason, run_id)

    def work(self, task: dict) -> dict:
        """The task as the owner's checkout sees it."""
        return task

    def checkout(self, task: dict, project: dict) -> tuple[dict, dict]:
        """The task and project its machine makes the owner's checkout of."""
        return self.work(task), project


class TaskOwner(RunOwner):
    """A task's own agent: its slot is the task's id, its session and retries the task's."""

    def __init__(self, task_id: int):
        self.task_id = self.slot = task_id

    def runs_instead(self, task: dict) -> bool:
        """A set of attempts none of which was picked runs instead (_run_attempts)."""
        return task["attempts"] is not None and _run_attempts(task)

    def own(self, task: dict) -> dict:
        """Whose agent, model, effort and session the run has."""
        return {"agent": task["agent"], "model": task["model"],
                "effort": task["thinking_effort"], "session_id": task["session_id"]}

    def queued_messages(self) -> list[dict]:
        return queued_message_rows(self.task_id)

    def started(self, run_id: int) -> None:
        pass  # the task shows it running

    def record_session(self, session_id: str) -> None:
        _publish_task(update_task_row(self.task_id, {"session_id": session_id}))

    def task_changes(self, run: "AgentRun", outcome: str, reason: str | None) -> dict:
        """What the end of its run changes in the task's row."""
        return {"is_running": 0, "permission_denials": len(run.parser.denials),
                **({"session_id": run.parser.session_id} if run.parser.session_id else {}),
                **({"last_error": reason} if outcome in ("retry", "fail") else {})}

    def recorded(self, run: "AgentRun") -> None:
        pass  # the task's row took the run's usage

    def stopped(self, outcome: str, running: bool) -> bool:
        return outcome in ("stopped", "interrupted")

    def retries(self, task: dict) -> int:
        return task["retry_count"]

    def count_retry(self) -> int:
        task = bump_retry_row(self.task_id)
        _publish_task(task)
        return task["retry_count"]

    def fail(self, reason: str, run_id: int | None = None) -> None:
        _fail_task(self.task_id, reason, run_id)

    def could_not_start(self, exc: Exception) -> None:
        """Its run could not be prepared: a lost host waits for it, else the task fails."""
        if isinstance(exc, HostDown):  # lost while the run was being prepared
            context = run_context_rows(self.task_id)
            if context is not None and context["host"] is not None:
                wait_for_host(context["task"], context["host"], str(exc))
            else:
                runtime.agents.release(self.slot)
            return
        if not isinstance(exc, GitError):  # e.g. the task was deleted meanwhile
            log.exception("task %s: the agent could not start", self.task_id)
        runtime.agents.release(self.slot)
        if task_row(self.task_id) is not None:
            _fail_task(self.task_id, f"the agent could not start: {exc}")

    def wait_for_host(self, task: dict, host: dict, exc: "HostDown") -> None:
        wait_for_host(task, host, str(exc))
        if exc.shown:  # its check disables it and shows the new key
            gevent.spawn(check_host, host["id"])

    def wait_for_sandbox(self, task: dict, why: str) -> None:
        wait_for_sandbox(task, why)

    def done(self, run: "AgentRun", task: dict) -> None:
        """The agent finished: the task waits for its sub-tasks, or goes to testing (the
        verifier's, or back to the agent with the messages sent as it was finishing)."""
        if task["awaiting_subtasks"] and task["status"] == "in_progress":
            runtime.logs.append(run.task_id, "system", "the agent finished; the task waits "
                                "for its sub-tasks", run.run_id)
            _publish_task(update_task_row(run.task_id, {"agent_done": 1}))
            settle_parent(run.task_id)
            return
        moved = move_task(run.task_id, "testing", manual=False, only_from="in_progress",
                          reason="the agent finished")
        late = queued_message_rows(run.task_id)  # sent as the agent was finishing
        if moved["status"] == "testing" and late:
            for message in late:  # first: the resumed run must not send them again
                _message_sent(message, None)
            try:
                request_changes(run.task_id, "\n\n".join(m["text"] for m in late))
            except Conflict as exc:
                runtime.logs.append(run.task_id, "system", "the messages above could not "
                                    f"resume the agent: {exc.message}", is_error=True)
        elif moved["status"] == "testing":
            start_verifier(self)

    def verifies(self, context: dict) -> bool:
        """Whether its verifier runs now: the task in testing, in an autoTest project."""
        return context["task"]["status"] == "testing" and bool(context["project"]["auto_test"])

    def unverified(self, why: str, run_id: int | None = None) -> None:
        runtime.logs.append(self.task_id, "system", f"{why}; the task waits in testing",
                            run_id, is_error=True)

    def verifier_stopped(self, run: "AgentRun", outcome: str, problem: str | None) -> None:
        pass  # a person's move, or the board's stop: the verifier runs again when due

    def judged(self, run: "AgentRun", verdict: dict | None, problem: str | None) -> None:
        """The verifier's verdict moves the task: approved, done; rejected, back to the
        agent with its feedback (after MAX_AUTO_REVISIONS, to a person); none, it waits."""
        task_id = self.task_id
        if verdict is None:
            runtime.logs.append(task_id, "system", f"no verdict from the verifier ({problem});"
                                " the task waits in testing", run.run_id, is_error=True)
            _publish_task(task_row(task_id))
            return
        summary = verdict.get("summary") or ""
        if verdict["verdict"] == "approve":
            move_task(task_id, "done", manual=False, only_from="testing",
                      reason=f"approved by the verifier: {summary}"[:500])
        elif verifier_rejections(task_id) > MAX_AUTO_REVISIONS:
            runtime.logs.append(task_id, "system", f"the verifier rejected the work again "
                                f"({summary}); after {MAX_AUTO_REVISIONS} automatic revisions"
                                " the task waits in testing for you", run.run_id,
                                is_error=True)
        else:
            feedback = verdict.get("feedback") or summary or "The verifier rejected the work."
            runtime.logs.append(task_id, "system", f"the verifier rejected the work: "
                                f"{summary}", run.run_id, is_error=True)
            changes_from("verifier", task_id, f"[verifier] {feedback}")


def set_agent_limit(agent: str, until: float, reason: str) -> None:
    """Remember that an agent CLI is limited until `until` (kept over a restart): the queue
    starts none of its tasks before then, and looks again once it lifts."""
    if until <= runtime.limits.get(agent, 0):
        return
    runtime.limits[agent] = until
    save_agent_limit_row(agent, iso_at(until), reason)
    scheduled_by = runtime

    def lifted():
        if runtime is scheduled_by and runtime.limits.get(agent) == until:
            del runtime.limits[agent]  # else a restart, or a later limit with its own timer
            _limit_lifted(agent)
    runtime.greenlets = [g for g in runtime.greenlets if not g.dead]
    runtime.greenlets.append(gevent.spawn_later(_seconds_until(until), lifted))


def _limit_lifted(agent: str) -> None:
    delete_agent_limit_row(agent)
    for project_id in project_ids_of_agent(agent):
        schedule_queue(project_id)


def _wait_for_limit(owner: RunOwner, task: dict, agent: str, until: float,
                    run_id: int | None, start) -> None:
    """The owner holding a slot waits for its agent's usage limit to lift, then start()
    runs its agent as it was about to (a resumed session, a change request, a retry's
    note)."""
    at = iso_at(until)
    runtime.logs.append(task["id"], "system", f"the {agent} agent is at its usage limit; the "
                        f"task continues by itself at {at}", run_id, is_error=True)
    _publish_task(update_task_row(task["id"], {"waiting_until": at}))
    runtime.agents.retry_later(owner.slot, task["project_id"], _seconds_until(until), start)


def _seconds_until(until: float) -> float:
    """The delay of a timer for `until`, a little after it: the loop's clock may fire a
    timer a few milliseconds early, and the limit must have lifted by then."""
    return max(0.0, until - time.time()) + 0.05


def restore_agent_limits() -> None:
    """At start-up: the limits that have not lifted yet, with their timers; the queue looks
    again at what waited for one that lifted while the server was down."""
    for row in agent_limit_rows():
        until = parse_iso(row["until"]).timestamp()
        if until > time.time():
            set_agent_limit(row["agent"], until, row["reason"])
        else:
            _limit_lifted(row["agent"])


def resume_interrupted_runs() -> None:
    """At start-up: kill what survived the last server, then give every in_progress task
    its agent back — its own session resumed ("continue"), not counted as a retry."""
    for run in running_rows("runs"):
        if run["pid"]:  # on a host: killed when the host is reached again
            host_machine(run["host_id"]).kill_survivor(run["pid"], run["proc_start"])
    for task in restart_rows():
        if task["agent_done"]:  # waits for its sub-tasks, with no agent
            settle_parent(task["id"])
            continue
        if task["attempts_open"]:  # its queued attempts start, the interrupted resume
            schedule_queue(task["project_id"])
            continue
        runtime.agents.reserve(task["id"], task["project_id"], None)
        if task["session_id"] and (task["run_status"] == "interrupted" or task["waiting_until"]):
            runtime.logs.append(task["id"], "system",
                                "the server restarted; resuming the agent's session")
            start_run(task["id"], resume=True, prompt=task["pending_feedback"] or "continue")
        else:
            start_run(task["id"])


def build_prompt(context: dict, *, note: str | None = None, tools: bool = True) -> str:
    """The agent's instructions: the task, its template, project snippets, change requests,
    attached files and, on a retry, what went wrong before."""
    task, project = context["task"], context["project"]
    parts = [f"# {task['task_key']}: {task['title']}"]
    if task["description"].strip():
        parts.append(task["description"].strip())
    if task["acceptance_criteria"].strip():
        parts.append("## Acceptance criteria\n" + task["acceptance_criteria"].strip())
    if context["template"]:
        parts.append("## Instructions\n" + render_template(context["template"]["content"],
                                                           task, project))
    for snippet in context["snippets"]:
        parts.append(f"## {snippet['name']}\n{snippet['content'].strip()}")
    if context["revisions"]:
        parts.append("## Requested changes\n" + "\n".join(
            f"{n}. {r['feedback'].strip()}" for n, r in enumerate(context["revisions"], 1)))
    if context["attachments"]:
        parts.append("## Attached files\n" + "\n".join(
            f"- {os.path.join(runtime.data_dir, a['path'])}" for a in context["attachments"]))
    if note:
        parts.append("## Previous attempt\n" + note)
    if tools:  # the CLI takes the board tools' MCP server (the adapter's BOARD_TOOLS)
        names = ", ".join(RUN_TOOL_NAMES)
        parts.append(f"## Board tools\nThe taskboard tools ({names}) show and change this "
                     "project's tasks. A task you create is a sub-task of this one by "
                     "default, and this task then waits until its sub-tasks are finished.")
    parts.append("Work in the current directory. When you are done, reply with a short "
                 "summary of what you changed.")
    return "\n\n".join(parts) + "\n"


def render_template(content: str, task: dict, project: dict) -> str:
    """Resolve {{project_name}} {{task_title}} {{task_type}} {{priority}} {{model}}; leave
    unknown variables as written."""
    values = {"project_name": project["name"], "task_title": task["title"],
              "task_type": task["task_type"], "priority": PRIORITY_NAMES[task["priority"]],
              "model": task["model"]}
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values.get(m.group(1), m.group(0)), content)


def agent_invocation(project: dict, cwd: str, model: str, effort: str, flags=(),
                     task_id: int | None = None, command: list | None = None) -> dict:
    """How every agent run starts (task, verifier, planner): its argv (design §6; the
    prompt goes on stdin, never here), its environment without the board's secrets, its
    cwd and its timeouts, as AgentRun takes them."""
    argv = [*(command or runtime.config["agent_argv"]), "-p", "--output-format", "stream-json",
            "--verbose", "--model", agent_model("claude", model) or MODEL_ALIASES[model],
            "--effort", effort, *flags]
    if instructions := _checkout_instructions(project, cwd):
        argv += ["--append-system-prompt", instructions]
    return {"argv": argv, **_run_setting(project, cwd, task_id)}


def _run_setting(project: dict, cwd: str, task_id: int | None) -> dict:
    """An agent run's environment (without the board's secrets), cwd and timeouts."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    if task_id is not None:
        env.update(TASKBOARD_TASK_ID=str(task_id), TASKBOARD_URL=runtime.url)
    minute = SECONDS_PER_MINUTE
    return {"env": env, "cwd": cwd,
            "timeout_s": (project["task_timeout_minutes"] or 0) * minute,
            "idle_s": get_settings()["agentIdleTimeoutMinutes"] * minute}


def agent_model(agent: str, tier: str) -> str | None:
    """The model name an agent CLI is given for a tier (None: the CLI's own default):
    the agentModels setting's, else AGENT_MODELS'."""
    chosen = get_settings()["agentModels"] or {}
    return _dict(chosen.get(agent)).get(tier, AGENT_MODELS[agent][tier])


def run_agent(project: dict, chosen: str | None, machine: "ThisMachine | HostLink") \
        -> tuple[str, list | None, bool]:
    """The CLI a run of the project uses (`chosen` by its task or planner, else the
    project's), its command line on the machine (None: the one configured here) and
    whether the run is sandboxed, once it can start there: else CannotRun, or HostDown
    from the machine.  Under --demo the Demo project's runs use the simulated agent,
    which speaks Claude Code's contract (design §2)."""
    if why := machine.missing_folder(project):  # not the CLI's fault: say so
        raise CannotRun(why, chosen or project["agent"])
    if runs_simulated(project):
        return "claude", SIMULATED_AGENT, False
    agent = chosen or project["agent"]
    command, missing = machine.agent_command(agent)
    if missing:
        raise CannotRun(missing, agent)
    until = runtime.limits.get(agent)
    if until is not None and until > time.time():
        raise CannotRun(f"the {agent} agent is at its usage limit until {iso_at(until)}",
                        agent, until)
    machine.ready()
    sandbox = machine.sandbox(retry=True) if project["sandbox"] != "none" else {"works": False}
    if project["sandbox"] == "bubblewrap" and not sandbox["works"]:
        raise CannotRun(f"the sandbox does not work{machine.where}: {sandbox['error']}",
                        agent, sandbox=True)
    return agent, command, bool(sandbox["works"])


def prepare_run(machine: "ThisMachine | HostLink", project: dict, agent: str, command,
                kind: str, cwd: str, tier: str, effort: str, prompt: str, flags=(), *,
                task_id: int | None = None, session_id: str | None = None,
                mode: str | None = None, tools: bool = False, mcp_port: int | None = None,
                plan=None, sandboxed: bool = False, files=(), owner: "RunOwner | None" = None,
                end: str | None = None, **kw) -> "AgentRun":
    """A task's, verifier's or planner's run (`kind`; a planner's `plan`: its id and
    values), not started: its invocation (design §6, §14), its runs row, the board tools
    for `tools`, the run there, its adapter, and with `sandboxed` its sandbox (`files`:
    what it reads of the data dir; `end`: what it does as it ends, when it may write:
    run_end()).  What fails on the way marks the row failed."""
    invocation = run_invocation(agent, project, cwd, tier, effort, prompt, flags, mode=mode,
                                session_id=session_id, task_id=task_id, command=command,
                                sandboxed=sandboxed)
    sandbox = {"agent": agent, "project": project["id"],
               "command": command or runtime.config["agents"][agent], "files": [
        f for f in files if f], "paths": json.loads(project["sandbox_paths_json"] or "null"),
        "read_only": (mode or project["permission_mode"]) == "read-only",
        "hide": hidden_from(project), "git": machine.git_dir(project)} if sandboxed else None
    if sandbox is not None and not sandbox["read_only"]:
        sandbox["end"] = end
    simulated = command is SIMULATED_AGENT
    if plan is not None:
        run = PlanRun(plan[0], project["id"], plan[1], prompt, agent, machine=machine,
                      **machine.invocation(invocation, plan[0], sandbox))
    else:
        run_id = insert_run_row({
            "task_id": task_id, "project_id": project["id"], "kind": kind, "agent": agent,
            "model": tier, "cwd": cwd, "resumed": int(bool(session_id)),
            "session_id": session_id, "head_start": machine.head(cwd), "simulated": simulated,
            "host_id": (machine.host or {}).get("id"), "sandboxed": sandboxed,
            "attempt_id": owner and owner.attempt and owner.attempt["id"]})
        token = None
        try:  # a host's run gets its settings there before it starts
            if tools:
                token = machine.board_tools(agent, run_id, task_id, project["id"], invocation,
                                            NET_PORT if sandboxed and machine.bridged
                                            else mcp_port)  # through the bridge: §20
            run = AgentRun(task_id, project["id"], run_id, prompt, model=tier, machine=machine,
                           **machine.invocation(invocation, str(run_id), sandbox), owner=owner,
                           **kw)
        except (HostDown, OSError) as exc:  # the run never started: so says its row
            runtime.run_tokens.pop(token, None)
            update_run_row(run_id, {"status": "failed", "error": str(exc),
                                    "ended_at": now_iso()})
            raise
        run.board_token = token
    run.sandbox = sandbox
    run.model_name = adapt_run(run, agent, tier, session_id, simulated)
    return run


def run_invocation(agent: str, project: dict, cwd: str, tier: str, effort: str, prompt: str,
                   claude_flags=(), *, mode: str | None = None, session_id: str | None = None,
                   task_id: int | None = None, command: list | None = None,
                   sandboxed: bool = False) -> dict:
    """Any agent CLI's run as AgentRun takes it (design §14): Claude's own flags, else its
    adapter's argv in `mode` (one of PERMISSION_MODES or "read-only"; default the
    project's; the prompt goes on stdin), with the environment without the board's secrets
    (PWD = cwd: OpenCode works where PWD says; plus what the mode needs), cwd and timeouts."""
    if agent == "claude":
        return agent_invocation(project, cwd, tier, effort, claude_flags, task_id, command)
    mode = mode or project["permission_mode"]
    setting = _run_setting(project, cwd, task_id)
    setting["env"]["PWD"] = cwd
    model = agent_model(agent, tier)
    adapter = ADAPTERS[agent](model)
    adapter.sandboxed = sandboxed
    setting["env"].update(adapter.environment(mode))
    argv = adapter.invocation(command or runtime.config["agents"][agent], prompt, model=model,
                              effort=effort, permission_mode=mode, session_id=session_id,
                              cwd=cwd)
    return {"argv": argv, **setting}


def adapt_run(run: "AgentRun", agent: str, tier: str, session_id: str | None = None,
              simulated: bool = False) -> str:
    """Give a run of a CLI other than Claude its adapter (the parser then reads that CLI's
    lines) and its model's prices; return the model's name for the log.  The simulated
    agent's run spends nothing."""
    if simulated:
        run.parser.simulated = True
        return "the simulated agent of --demo: nothing is spent"
    model = agent_model(agent, tier)
    if agent != "claude":
        run.parser.adapter = ADAPTERS[agent](model, session_usage_row(session_id)
                                             if session_id else None)
        run.parser.prices = MODEL_PRICES.get(model)
    return model or "its default model"


def _checkout_instructions(project: dict, cwd: str) -> str | None:
    """The checkout's agent instructions for a run in a task's worktree whose own differ
    (design §4): the CLI reads only the file in its cwd (in a worktree its sandboxed run
    checks out, the one its HEAD holds)."""
    if os.path.realpath(cwd) == os.path.realpath(project["working_dir"]):
        return None
    wanted = read_regular(os.path.join(project["working_dir"], AGENT_MD),
                          MAX_INSTRUCTIONS_CHARS)
    if not (wanted and wanted.strip()):
        return None
    unchecked = False  # a host's worktree is not here: read as absent
    with contextlib.suppress(OSError):
        unchecked = os.listdir(cwd) == [".git"]
    present = head_file(cwd, AGENT_MD, MAX_INSTRUCTIONS_CHARS) if unchecked else \
        read_regular(os.path.join(cwd, AGENT_MD), MAX_INSTRUCTIONS_CHARS)
    return wanted if wanted != present else None


def task_run_flags(project: dict, session_id: str | None, attachment_dir: str | None) \
        -> list[str]:
    """A task run's channel, permission, resume, budget and attachment flags (design §6,
    §12).  Tools the CLI's rules do not allow become requests on the channel; as root, where
    the CLI refuses --dangerously-skip-permissions, auto-accept is answered by the board."""
    flags = list(CHANNEL_FLAGS)
    if project["permission_mode"] == "auto-accept":
        if not running_as_root():
            flags.append("--dangerously-skip-permissions")
    else:  # the board's own tools never need a person (a run token bounds them)
        flags += ["--allowedTools", ",".join(filter(None, [project["allowed_tools"],
                                                           f"mcp__{BOARD_TOOLS_SERVER}__*"]))]
    if session_id:
        flags += ["--resume", session_id]
    if project["task_budget_usd"]:
        flags += ["--max-budget-usd", f"{project['task_budget_usd']:g}"]
    if attachment_dir:
        flags += ["--add-dir", attachment_dir]
    return flags


# =============================================================================
# SERVICES: THE AGENT CHANNEL AND THE VERIFIER
# =============================================================================
# What a person and the board say to a running agent, and the verifier that judges a
# task's work in testing.

# --- talking to a running agent (design §12) ------------------------------------

def run_channel(project: dict) -> dict:
    """What a task run's channel needs to know of its project."""
    command = project["stop_check_command"].strip()
    return {"auto_allow": project["permission_mode"] == "auto-accept",
            "approval_timeout_minutes": project["approval_timeout_minutes"],
            "stop_check": (command, project["stop_check_max_blocks"]) if command else None}


def user_turn(text: str) -> dict:
    return {"type": "user", "message": {"role": "user", "content": text}}


def agent_request(run: "AgentRun", event: dict) -> None:
    """A control request from the agent: a tool approval or question, the stop check's
    hook, or a kind the board does not know (answered with an error; the run goes on)."""
    request, request_id = _dict(event.get("request")), event.get("request_id")
    subtype = request.get("subtype")
    if subtype == "can_use_tool":
        ask_person(run, request_id, request)  # in the reader: one hop less to the person
    elif subtype == "hook_callback" and request.get("callback_id") == "stop_check" \
            and run.channel["stop_check"]:
        run.helpers.append(gevent.spawn(stop_check, run, request_id))
    else:
        run.respond(request_id, error=f"unsupported control request {subtype!r}")
        runtime.logs.append(run.task_id, "system", "the agent sent a control request the "
                            f"board does not know ({_cut(str(subtype), 80)}): refused",
                            run.run_id, is_error=True)


def ask_person(run: "AgentRun", request_id, request: dict) -> None:
    """Store a can_use_tool request and ask a person, or allow it by auto-accept (never a
    question: questions always go to a person)."""
    tool = _cut(str(request.get("tool_name") or "tool"), 200)
    tool_input = _dict(request.get("input"))
    kind = "question" if tool == "AskUserQuestion" else "tool"
    by_rule = run.channel["auto_allow"] and kind == "tool"
    notice = Notice("task:needs_input")
    stored = insert_approval_row({
        "task_id": run.task_id, "project_id": run.project_id, "run_id": run.run_id,
        "request_id": str(request_id), "kind": kind, "tool_name": tool,
        "input_json": json_dumps(tool_input),
        "suggestions_json": json_dumps(request.get("permission_suggestions") or []),
        **({"status": "allowed", "decided_by": "rule", "decided_at": now_iso()}
           if by_rule else {})}, notice)
    if stored is None:  # the task was deleted meanwhile
        run.respond(request_id, {"behavior": "deny", "message": "The task was deleted.",
                                 "interrupt": True})
        return
    approval, task = stored
    if by_rule:
        run.respond(request_id, {"behavior": "allow", "updatedInput": tool_input})
        runtime.events.publish("approval:resolved", approval_view(approval), run.project_id)
        return
    run.waiting.add(approval["id"])
    asked = question_summary(tool_input)
    what = (f"a question: {asked}" if asked else "a question") if kind == "question" \
        else f"{tool}: {tool_summary(tool_input)}"
    runtime.logs.append(run.task_id, "system", f"waiting for you: {what}", run.run_id)
    runtime.events.publish("approval:requested", approval_view(approval), run.project_id)
    _publish_task(task)
    announce(notice)
    push_request(approval, task)
    if minutes := run.channel["approval_timeout_minutes"]:
        run.helpers.append(gevent.spawn_later(minutes * SECONDS_PER_MINUTE,
                                              _approval_timed_out, approval["id"], minutes))


def _approval_timed_out(approval_id: int, minutes: int) -> None:
    with contextlib.suppress(Conflict, NotFound):
        decide_approval(approval_id, {"decision": "deny", "message": f"Nobody answered within "
                                      f"{minutes} minutes (approvalTimeoutMinutes): denied."},
                        decided_by="timeout")


def approval_view(row: dict) -> dict:
    return render(APPROVAL_FIELDS, row)


def list_approvals(status: str | None = None) -> list[dict]:
    """Every task's approvals, oldest first (?status=pending: the inbox)."""
    if status is not None and status not in APPROVAL_STATUSES:
        raise Invalid(f"status {status[:40]!r} is not one of: {', '.join(APPROVAL_STATUSES)}",
                      "status")
    return [approval_view(r) for r in approval_rows(status=status)]


def task_approvals(task_id: int) -> list[dict]:
    return [approval_view(r) for r in found(approval_rows(task_id), f"task {task_id} not found")]


def decide_approval(approval_id: int, body, decided_by: str = "person") -> dict:
    """Answer a pending request, exactly once (409 when it is no longer pending): allow,
    with a question's answers and the rules to remember, or deny with a message."""
    before = find_row("approvals", id=approval_id)
    values = validate_known(lambda: found(before, f"approval {approval_id} not found"),
                            DECISION_FIELDS, body)
    found(before, f"approval {approval_id} not found")
    tool_input, remember = json.loads(before["input_json"]), values.get("remember")
    if remember and values["decision"] != "allow":
        raise Invalid(f"remember {remember!r} goes with allow, not deny", "remember")
    message = None
    if values["decision"] == "allow":
        if before["kind"] == "question":
            tool_input = {**tool_input, "answers": _answers(tool_input, values.get("answers"))}
        response = {"behavior": "allow", "updatedInput": tool_input}
        if remember and before["kind"] == "tool":
            response["updatedPermissions"] = [
                {**s, "destination": "session"}
                for s in json.loads(before["suggestions_json"]) if isinstance(s, dict)]
    else:
        message = values.get("message", "").strip() or (
            "The person did not answer." if before["kind"] == "question"
            else "The person denied this tool call.")
        response = {"behavior": "deny", "message": message, "interrupt": False}
    status = "allowed" if values["decision"] == "allow" else "denied"
    approval, task = found(decide_approval_row(approval_id, {
        "status": status, "decided_by": decided_by, "message": message}),
        f"approval {approval_id} not found")
    if task is None:
        raise Conflict(f"approval {approval_id} is no longer pending (it is "
                       f"{approval['status']})", "id")
    run = runtime.agents.by_run(approval["run_id"])
    if run is not None:
        run.waiting.discard(approval_id)
        run.respond(approval["request_id"], response)
    if remember == "project" and approval["kind"] == "tool":
        _remember_for_project(approval)
    if approval["kind"] == "question" and status == "allowed":  # as the agent got it
        what = f"answered by {decided_by}: " + "; ".join(
            f"{q} → {a}" for q, a in _dict(tool_input.get("answers")).items())
    elif approval["kind"] == "question":
        what = f"question left unanswered by {decided_by}"
    else:
        what = f"{status} by {decided_by}: {approval['tool_name']}"
    runtime.logs.append(approval["task_id"], "system", what + (
        f" — {message}" if message else ""), approval["run_id"])
    approval_resolved(approval, task)
    return approval_view(approval)


def _answers(tool_input: dict, answers) -> dict:
    """{question: answer} for every question asked: a label, labels joined by ", ", or the
    person's own text."""
    if not isinstance(answers, dict):
        raise Invalid("answers must be an object of {question: answer}", "answers")
    out = {}
    for question in (_dict(q).get("question") for q in tool_input.get("questions") or []):
        value = answers.get(question)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = ", ".join(v.strip() for v in value if v.strip())
        if not isinstance(value, str) or not value.strip():
            raise Invalid(f"answers has no answer for {str(question)[:80]!r}", "answers")
        out[question] = value.strip()
    return out


def _remember_for_project(approval: dict) -> None:
    """Append the rules the CLI suggested to the project's allowedTools."""
    rules = []
    for suggestion in json.loads(approval["suggestions_json"]):
        for rule in _dict(suggestion).get("rules") or []:
            name, content = _dict(rule).get("toolName"), _dict(rule).get("ruleContent")
            text = f"{name}({content})" if content else name
            if isinstance(text, str) and text.strip() and "," not in text:
                rules.append(text.strip())
    if row := add_allowed_tools_row(approval["project_id"], rules):
        runtime.events.publish("project:updated", project_view(row), row["id"])


def expire_requests(run_id: int | None = None) -> None:
    """The run ended (default: the server restarted): its pending requests expire."""
    for approval, task in expire_approval_rows(run_id):
        approval_resolved(approval, task)


def turn_ended(run: "AgentRun") -> None:
    """The agent's turn ended (a result line): send the next queued message, or end its
    input so that it exits.  A turn's answer is kept as the agent's message."""
    result = run.parser.result or {}
    if any(isinstance(w, int) for w in run.waiting):  # interrupted while it asked
        run.waiting.difference_update([w for w in run.waiting if isinstance(w, int)])
        expire_requests(run.run_id)
    if not result.get("is_error") and isinstance(result.get("result"), str):
        message = insert_message_row({"task_id": run.task_id, "run_id": run.run_id,
                                      "author": "agent", "text": result["result"],
                                      "state": "sent"})
        if message is not None:
            runtime.events.publish("message:created", message_view(message), run.project_id)
    if run.queued:
        message = run.queued.popleft()
        if run.send(user_turn(message["text"])):
            _message_sent(message, run.run_id)
            return
        run.queued.appendleft(message)  # the agent is gone: finish_run resumes with it
    run.end_input()


def _message_sent(message: dict, run_id: int | None) -> None:
    row = message_sent_row(message["id"], run_id)
    if row is None:
        return
    runtime.logs.append(row["task_id"], "message", row["text"], run_id, author="person")
    task = task_row(row["task_id"])
    runtime.events.publish("message:updated", message_view(row),
                           task["project_id"] if task else None)


def message_view(row: dict) -> dict:
    return render(MESSAGE_FIELDS, row)


def task_messages(task_id: int) -> list[dict]:
    return [message_view(r) for r in found(owned_rows("messages", "tasks", task_id=task_id),
                                           f"task {task_id} not found")]


def post_message(task_id: int, body, comments=()) -> dict:
    """A person's message: to the running agent when its turn ends (at once with
    interrupt: steering); on a task in testing or failed, a request for changes."""
    values = validate_known(lambda: get_task(task_id), MESSAGE_FIELDS, body)
    task = get_task(task_id)
    text = values["text"].strip()
    run = runtime.agents.runs.get(task_id)
    live = run is not None and run.channel is not None and run.accepting
    if run is None and any(isinstance(s, tuple) for s in runtime.agents.slots(task_id)):
        raise Conflict(f"several agents work on {task['task_key']}: a message goes to one "
                       "of them; once they end, pick the attempt to keep, then send it", "id")
    if not live and task["status"] in ("testing", "failed"):
        return message_view(changes_from("person", task_id, text, comments=comments)[1])
    if task["status"] != "in_progress":
        raise Conflict(f"task {task_id} is {task['status']}: a message goes to a running "
                       "agent, or to a task in testing or failed as a request for changes",
                       "id")
    agent = task["agent"] or project_row(task["project_id"])["agent"]
    if values.get("interrupt") and not AGENTS[agent].two_way:
        raise Conflict(f"interrupt is not available for {agent}: its CLI cannot be reached "
                       "during a run; send the message without interrupt and it goes to the "
                       "agent when this run ends", "interrupt")
    message = found(insert_message_row({
        "task_id": task_id, "run_id": run.run_id if live else None, "author": "person",
        "text": text, "interrupt": int(bool(values.get("interrupt"))), "state": "queued"},
        comments), f"task {task_id} not found")
    runtime.events.publish("message:created", message_view(message), task["project_id"])
    if live:
        run.queued.append(message)
        if values.get("interrupt"):
            run.interrupt()
    return message_view(message)


def changes_from(author: str, task_id: int, feedback, mcp_port: int | None = None,
                 comments=(), sent: dict | None = None) -> tuple[dict, dict]:
    """A request for changes, by a person (the task page's button, a message to a task in
    testing or failed) or by itself (the verifier's rejection, a pull request's reviews or
    checks: `sent`): request_changes, and the words kept where a person talks to the agent,
    in the task's messages and its log, as the agent was sent them, under whose they are
    (a MESSAGE_AUTHORS). (task, message)"""
    task = request_changes(task_id, feedback, mcp_port, sent)  # a Conflict stores nothing
    resumed = runtime.agents.runs.get(task_id)
    message = found(insert_message_row({
        "task_id": task_id, "run_id": resumed.run_id if resumed else None,
        "author": author, "text": feedback.strip(), "state": "sent"}, comments),
        f"task {task_id} not found")
    runtime.logs.append(task_id, "message", message["text"], message["run_id"],
                        author=author)
    runtime.events.publish("message:created", message_view(message), task["project_id"])
    return task, message


def task_review(task_id: int) -> list[dict]:
    return [render(REVIEW_COMMENT_FIELDS, r) for r in found(
        owned_rows("review_comments", "tasks", task_id=task_id), f"task {task_id} not found")]


def post_review(task_id: int, body) -> dict:
    """Review comments on the task's diff, sent as one message naming each file and line."""
    values = validate_known(lambda: get_task(task_id), REVIEW_FIELDS, body)
    comments = values["comments"]
    if not isinstance(comments, list) or not 1 <= len(comments) <= 100:
        raise Invalid("comments must be an array of 1 to 100 comments", "comments")
    rows = []
    for n, comment in enumerate(comments):
        try:
            rows.append(validate(REVIEW_COMMENT_FIELDS, comment))
        except Invalid as exc:
            raise Invalid(f"comments[{n}]: {exc.message}", "comments") from None
    lines = diff_lines(task_diff(task_id)["diff"])
    parts = ["Review comments on your changes:"]
    if values.get("summary", "").strip():
        parts.append(values["summary"].strip())
    for n, c in enumerate(rows, 1):
        parts.append(review_comment_text(n, c["path"], c["line"], c["side"],
                                         lines.get((c["path"], c["side"], c["line"])),
                                         c["body"]))
    text = "\n\n".join(parts)
    if len(text) > MESSAGE_MAX:
        raise Invalid(f"comments make a message of {len(text):,} characters, more than "
                      f"{MESSAGE_MAX:,}", "comments")
    return post_message(task_id, {"text": text}, rows)


def review_comment_text(n: int, path: str, line, side: str, quoted: str | None,
                        body: str) -> str:
    """One review comment as the agent is sent it (design §12): number, file, line, side,
    the line it is on, and the comment."""
    return f"{n}. {path}, line {line} ({side})" + (
        f": `{quoted.strip()}`" if quoted and quoted.strip() else "") + f"\n{body.strip()}"


def stop_check(run: "AgentRun", request_id) -> None:
    """The agent tries to finish: run the project's stop check in its cwd; while it fails
    (at most stopCheckMaxBlocks times) send the agent back with the failure."""
    command, limit = run.channel["stop_check"]
    argv = shlex.split(command)
    run.waiting.add("stop_check")
    try:  # where the run is, in its environment and sandbox: it runs what the agent wrote
        checked = run.machine.check(run.cwd, argv, run.env, run.sandbox)
    finally:
        run.waiting.discard("stop_check")
    if checked is None:
        runtime.logs.append(run.task_id, "stop_check", f"stop check `{command}` cannot run: "
                            f"{argv[0]!r} is not found{run.machine.where}; the agent may "
                            "stop", run.run_id, is_error=True)
        run.respond(request_id, {})
        return
    code, out = checked
    if code != 0:
        run.hint_sandbox(f"exit code {code}\n{out}")
    if code != 0 and run.stop_blocks < limit:
        run.stop_blocks += 1
        why = f"exit {code}" if code is not None else \
            f"did not finish within {STOP_CHECK_TIMEOUT_SECONDS:g}s"
        verdict = f"failed ({why}); the agent goes on ({run.stop_blocks} of {limit})"
        response = {"decision": "block", "reason": f"The stop check `{command}` failed "
                    f"({why}). Make it pass before you finish. The end of its output:\n"
                    f"{out[-STOP_CHECK_TAIL:]}"}
    else:
        verdict = "passed" if code == 0 else f"failed {limit} times: the agent may stop"
        response = {}
    runtime.logs.append(run.task_id, "stop_check", f"stop check `{command}` {verdict}",
                        run.run_id, is_error=code != 0)
    run.respond(request_id, response)


# --- verifier (autoTest) -----------------------------------------------------------
# autoTest: a read-only run of the same CLI checks the work and ends with a JSON verdict.

#: Tools the verifier may use without asking (Claude Code's permission rule syntax).
#: `Bash(x:*)` grants any command `x …` whatever options follow (not `a && b`, and a
#: redirection is a file write, never granted), so only commands with no option that writes
#: or runs a program get one: not `find` (-delete, -exec), `rg` (--pre), `tree` (-o) nor
#: `git log/show/diff` (--output), which get exact rules.  The test and build commands run
#: the project's code by intent: judging the work needs them.  tests/test_verifier.py tries to
#: write through every other rule.
VERIFIER_TOOLS = (
    "Read", "Grep", "Glob", "Bash(ls:*)", "Bash(cat:*)", "Bash(head:*)", "Bash(tail:*)",
    "Bash(wc:*)", "Bash(grep:*)", "Bash(git status:*)", "Bash(git ls-files:*)",
    "Bash(git log --oneline -n 30)", "Bash(git show HEAD)", "Bash(git diff)",
    "Bash(git diff HEAD)",
    "Bash(pytest:*)", "Bash(python -m pytest:*)", "Bash(python3 -m pytest:*)",
    "Bash(npm test:*)", "Bash(npm run test:*)", "Bash(npm run build:*)", "Bash(make test:*)",
    "Bash(make check:*)", "Bash(cargo test:*)", "Bash(cargo build:*)", "Bash(go test:*)",
    "Bash(go build:*)", "Bash(mvn test:*)", "Bash(./gradlew test:*)", "Bash(tox:*)")
#: After this many automatic revisions the task waits in testing for a person.
MAX_AUTO_REVISIONS = 3


VERIFIER_FLAGS = ("--tools", "Read,Grep,Glob,Bash", "--allowedTools", *VERIFIER_TOOLS)


def start_verifier(owner: "RunOwner") -> None:
    """Start the verifier on the owner's work: a task's that just entered testing (autoTest
    projects), or an attempt's that did its work (in its worktree).  An agent at its usage
    limit checks it when the limit lifts; what cannot run is logged, and the owner goes on
    without a verdict (a task waits in testing, an attempt is done)."""
    task_id = owner.task_id
    context = run_context_rows(task_id)
    if context is None or not owner.verifies(context) or \
            runtime.agents.verifiers.get(owner.slot):
        return
    task, project, host = context["task"], context["project"], context["host"]
    machine = machine_of(host)
    try:
        agent, command, sandboxed = run_agent(project, task["agent"], machine)
    except CannotRun as exc:
        if exc.until is not None:
            _verify_after_limit(owner, exc.until, last_move_row(task_id))
            return
        missing = str(exc)
    except HostDown as exc:
        missing = f"host {host['name']!r} cannot be reached ({exc})"
    else:
        missing = None
    if missing:
        owner.unverified(f"the verifier cannot run: {missing}")
        return
    if task["waiting_until"]:
        _publish_task(update_task_row(task_id, {"waiting_until": None}))
    cwd = machine.review_cwd(*owner.checkout(task, project))
    prompt = verifier_prompt(task, project, task_diff(task_id, owner.n))
    try:
        run = prepare_run(machine, project, agent, command, "verifier", cwd, task["model"],
                          task["thinking_effort"], prompt, VERIFIER_FLAGS, mode="read-only",
                          task_id=task_id, sandboxed=sandboxed, owner=owner,
                          on_finish=finish_verifier)
    except (HostDown, OSError) as exc:
        owner.unverified(f"the verifier could not start: {exc}")
        return
    run.moves_before = last_move_row(task_id)
    runtime.logs.append(task_id, "system", f"{owner.said}the verifier checks the work "
                        f"(autoTest; {agent}, {run.model_name}, read-only)", run.run_id)
    try:
        runtime.agents.launch_verifier(run)
    except OSError as exc:
        update_run_row(run.run_id, {"status": "failed", "error": str(exc),
                                    "ended_at": now_iso()})
        owner.unverified(f"the verifier could not start: {exc}", run.run_id)


def finish_verifier(run: "AgentRun") -> None:
    """Act on the verifier's verdict (its owner's: a task's, an attempt's), unless the task
    was moved while it worked; a verifier that ended on its agent's usage limit checks the
    work again when the limit lifts."""
    owner = run.owner
    runtime.logs.flush([run.task_id])
    runtime.agents.forget(run)
    outcome, reason = judge_run(run.parser, run.exit_code, run.stop_reason)
    verdict, problem = parse_verdict(run.parser.texts) if outcome == "ok" else (None, reason)
    status = {"approve": "approved", "reject": "rejected"}[verdict["verdict"]] if verdict \
        else "failed"
    finish_run_rows(run.run_id, {
        "status": "stopped" if outcome in ("stopped", "interrupted") else status,
        "exit_code": run.exit_code, "error": problem, **run.usage_columns()}, {})
    run.machine.runs_changed()
    check_budget()
    until = limit_resets(run.parser) if outcome == "wait" else None
    if until is not None:
        set_agent_limit(run_agent_row(run.run_id), until, problem)
    task = task_row(run.task_id)
    if task is None:
        return
    if outcome in ("stopped", "interrupted"):
        owner.verifier_stopped(run, outcome, problem)
    elif task["status"] != owner.verified_in or last_move_row(run.task_id) != run.moves_before:
        runtime.logs.append(run.task_id, "system", "the verifier's verdict is ignored: the "
                            "task was moved meanwhile", run.run_id)
    elif until is not None:
        _verify_after_limit(owner, until, run.moves_before, run.run_id)
    else:
        owner.judged(run, verdict, problem)


def _verify_after_limit(owner: "RunOwner", until: float, moves_before,
                        run_id: int | None = None) -> None:
    """The verifier's agent is at its usage limit: the task shows when the verifier checks
    the owner's work, and it does then, unless the task was moved meanwhile (a restart
    re-arms a task's: verify_waiting_tasks)."""
    task_id, at = owner.task_id, iso_at(until)
    runtime.logs.append(task_id, "system", f"{owner.said}the verifier's agent is at its "
                        f"usage limit; it checks the work at {at}", run_id, is_error=True)
    _publish_task(update_task_row(task_id, {"waiting_until": at}))
    scheduled_by = runtime

    def verify():
        if runtime is not scheduled_by or last_move_row(task_id) != moves_before:
            return  # a restart (which re-arms it), or the task moved on
        try:
            start_verifier(owner)
        except Exception:  # a background timer: log and carry on
            log.exception("task %s: the verifier could not start", task_id)
    runtime.greenlets = [g for g in runtime.greenlets if not g.dead]
    runtime.greenlets.append(gevent.spawn_later(_seconds_until(until), verify))


def verify_waiting_tasks() -> None:
    """At start-up: the tasks in testing whose verifier waited for a usage limit."""
    for task in waiting_verifier_rows():
        _verify_after_limit(TaskOwner(task["id"]), parse_iso(task["waiting_until"]).timestamp(),
                            last_move_row(task["id"]))


def parse_verdict(texts) -> tuple[dict | None, str | None]:
    """The last fenced JSON block of the verifier's text: (verdict, None) or (None, why)."""
    try:
        verdict = last_json_block("\n".join(texts), "its")
    except Invalid as exc:
        return None, exc.message
    if not isinstance(verdict, dict) or verdict.get("verdict") not in ("approve", "reject"):
        return None, 'its JSON block has no "verdict" of "approve" or "reject"'
    return verdict, None


def verifier_prompt(task: dict, project: dict, diff: dict) -> str:
    stats = diff["stats"]
    changes = diff["diff"][:20_000] + ("\n… (cut)" if len(diff["diff"]) > 20_000 else "")
    parts = [
        f"You are reviewing the work done on task {task['task_key']}: {task['title']}.",
        "Do not change any file. Read the changes, build the project and run its tests "
        "where you can, and judge whether the task is done.",
        "## Task\n" + (task["description"].strip() or "(no description)"),
        "## Acceptance criteria\n" + (task["acceptance_criteria"].strip() or "(none given)")]
    if project["test_prompt"]:
        parts.append("## How to test this project\n" + project["test_prompt"])
    parts.append(f"## Changes ({stats['files']} files, +{stats['insertions']} "
                 f"-{stats['deletions']})\n```diff\n{changes}\n```")
    parts.append('End your answer with exactly one fenced JSON block:\n```json\n'
                 '{"verdict": "approve" or "reject", "summary": "one sentence", '
                 '"feedback": "what must change, when you reject"}\n```')
    return "\n\n".join(parts) + "\n"


# =============================================================================
# SERVICES: ATTEMPTS
# =============================================================================
# Best of N (design §18): a task run by several agents at once, each attempt a full run on
# a branch and worktree of its own, in a slot of its own ((task id, n)); when one ends,
# the project's check runs once more in its worktree and the verifier judges it; the
# attempt picked (by a person, or by the rule) gives the task its branch.

def _publish_attempt(row: dict) -> None:
    runtime.events.publish("attempt:updated", {"taskId": row["task_id"], **render(
        ATTEMPT_FIELDS, row)}, row["project_id"])


def list_attempts(task_id: int) -> list[dict]:
    found(task_row(task_id), f"task {task_id} not found")
    return [render(ATTEMPT_FIELDS, row) for row in attempt_rows(task_id)]


def start_attempts(task_id: int, body) -> list[dict]:
    """Run the task with 2-4 agents at once (design §18): their attempts are queued and
    the task moves to in_progress; the queue starts each when a slot is free."""
    values = validate_known(lambda: get_task(task_id), ATTEMPTS_BODY_FIELDS, body)
    task = get_task(task_id)
    project = project_row(task["project_id"])
    if task["status"] == "in_progress" or runtime.agents.holds(task_id):
        raise Conflict(f"task {task_id} is running: stop it before running it with several "
                       "agents", "id")
    if not project_machine(project).has_git(project):
        raise Conflict(f"attempts need a git repository: workingDir "
                       f"{project['working_dir']!r} is not one with a commit", "workingDir")
    earlier = attempt_rows(task_id)
    if earlier and not any(a["picked"] for a in earlier):
        _clear_attempts(task_row(task_id), project, earlier)  # a set nobody picked
    rows = insert_attempt_rows(task_id, project["id"], [{
        "agent": a["agent"], "model": a.get("model") or task["model"],
        "effort": a.get("effort") or task["thinking_effort"]} for a in values["agents"]])
    for row in rows:
        _publish_attempt(row)
    move_task(task_id, "in_progress", reason=f"run with {len(rows)} agents at once")
    return [render(ATTEMPT_FIELDS, row) for row in attempt_rows(task_id)]


def _run_attempts(task: dict) -> bool:
    """A task entered in_progress: when it has a set of attempts none of which was
    picked, those that did not finish their work are queued again (each resumes its
    session) and True; a set whose attempts all finished goes back to testing."""
    rows = attempt_rows(task["id"])
    if any(a["picked"] for a in rows):
        return False
    for row in rows:
        if row["status"] in ("failed", "stopped"):
            _publish_attempt(update_attempt_row(row["id"], {
                "status": "queued", "error": None, "ended_at": None}))
    _settle_attempts(task["id"])
    schedule_queue(task["project_id"])
    return True


def _start_queued_attempts(project: dict, limited: set) -> None:
    """The queue's first pass: the queued attempts of the project's running tasks, while
    the project and its host have free slots."""
    for attempt in queued_attempt_rows(project["id"]):
        if runtime.agents.used(project["id"]) >= project["max_concurrent"] or \
                host_machine(project["host_id"]).full():
            return
        owner = AttemptOwner(attempt)
        if attempt["agent"] not in limited and runtime.agents.reserve(owner.slot, project["id"],
                                                                      None):
            resume = bool(attempt["session_id"])
            start_run(attempt["task_id"], resume=resume, prompt="continue" if resume else None,
                      owner=owner)


def attempt_task(task: dict, attempt: dict) -> dict:
    """The task as attempt n's checkout and diff see it: key, branch and worktree
    `<key>-<n>`, made from the task's branch when it has one; `attempt` tells
    record_checkout() to keep what is made on the attempt."""
    branch = task["branch_name"] or branch_name(task)
    return {**task, "task_key": f"{task['task_key']}-{attempt['n']}",
            "branch_name": attempt["branch_name"] or f"{branch}-{attempt['n']}",
            "base_commit": attempt["base_commit"], "attempt": attempt, "from_branch": branch}


def record_checkout(task: dict, changes: dict) -> None:
    """A new worktree's branch, its base and where it is: the task's, or its attempt's."""
    if task.get("attempt") is not None:
        _publish_attempt(update_attempt_row(task["attempt"]["id"], changes))
    else:
        _publish_task(update_task_row(task["id"], changes))


class AttemptOwner(RunOwner):
    """Attempt n's agent (RunOwner): its slot (task id, n), its own branch and worktree,
    session and retries; it fails alone (the other attempts go on), and its work done, it
    is judged (_judge_attempt) while the task stays in_progress."""

    verified_in = "in_progress"

    def __init__(self, attempt: dict):
        self.attempt, self.n, self.task_id = attempt, attempt["n"], attempt["task_id"]
        self.slot = (self.task_id, self.n)
        self.tried = f"attempt {self.n}"
        self.said = f"{self.tried}: "

    def runs_instead(self, task: dict) -> bool:
        return False

    def own(self, task: dict) -> dict:
        a = self.attempt
        return {"agent": a["agent"], "model": a["model"], "effort": a["effort"],
                "session_id": a["session_id"]}

    def work(self, task: dict) -> dict:
        return attempt_task(task, self.attempt)

    def checkout(self, task: dict, project: dict) -> tuple[dict, dict]:
        return self.work(task), {**project, "auto_branch": 1}

    def queued_messages(self) -> list[dict]:
        return []  # messages wait until an attempt is picked

    def started(self, run_id: int) -> None:
        self.update({"status": "running", "run_id": run_id})

    def record_session(self, session_id: str) -> None:
        self.attempt = update_attempt_row(self.attempt["id"], {"session_id": session_id})

    def task_changes(self, run: "AgentRun", outcome: str, reason: str | None) -> dict:
        return {"is_running": int(any(s != self.slot and s in runtime.agents.runs
                                      for s in runtime.agents.slots(self.task_id)))}

    def recorded(self, run: "AgentRun") -> None:
        """The attempt takes the run's cost, time, tokens and session."""
        self.attempt = update_attempt_row(self.attempt["id"], {
            "session_id": run.parser.session_id or self.attempt["session_id"]},
            find_row("runs", id=run.run_id))

    def stopped(self, outcome: str, running: bool) -> bool:
        """A stop, or the task left in_progress: the attempt stops (the board's stop:
        queued, it resumes at the restart)."""
        if outcome == "interrupted" and running:
            self.update({"status": "queued"})
        elif not running or outcome in ("stopped", "interrupted"):
            _attempt_ended(self.attempt, "stopped")
        else:
            return False
        return True

    def retries(self, task: dict) -> int:
        return self.attempt["retry_count"]

    def count_retry(self) -> int:
        self.update({"retry_count": self.attempt["retry_count"] + 1})
        return self.attempt["retry_count"]

    def fail(self, reason: str, run_id: int | None = None) -> None:
        _attempt_failed(self.attempt, reason, run_id)

    def could_not_start(self, exc: Exception) -> None:
        self.give_up(f"the agent could not start: {exc}")

    def wait_for_host(self, task: dict, host: dict, exc: "HostDown") -> None:
        self.could_not_start(exc)

    def wait_for_sandbox(self, task: dict, why: str) -> None:
        self.give_up(why)

    def done(self, run: "AgentRun", task: dict) -> None:
        runtime.agents.judge(self.slot, _judge_attempt, task, project_row(run.project_id),
                             self, run)

    def verifies(self, context: dict) -> bool:
        """Whether its verifier runs now: the task in_progress, the attempt not ended."""
        row = find_row("attempts", id=self.attempt["id"])
        return context["task"]["status"] == "in_progress" and row is not None and \
            row["status"] == "running"

    def unverified(self, why: str, run_id: int | None = None) -> None:
        runtime.logs.append(self.task_id, "system", f"{self.said}{why}", run_id,
                            is_error=True)
        _attempt_ended(self.attempt, "done")

    def verifier_stopped(self, run: "AgentRun", outcome: str, problem: str | None) -> None:
        """The board's stop: it resumes, and is judged, at the restart; another stop (a
        pick, a move): its work stays done, without a verdict."""
        if outcome == "interrupted":
            self.update({"status": "queued"})
        else:
            self.judged(run, None, problem)

    def judged(self, run: "AgentRun", verdict: dict | None, problem: str | None) -> None:
        """The verdict is the attempt's, to compare: it never moves the task."""
        said = f"the verifier says {verdict['verdict']}: {verdict.get('summary') or ''}" \
            if verdict else f"no verdict from the verifier ({problem})"
        runtime.logs.append(self.task_id, "system", f"{self.said}{said}", run.run_id,
                            is_error=verdict is None)
        _attempt_ended(self.attempt, "done", verdict=verdict and verdict["verdict"],
                       summary=verdict and _cut(str(verdict.get("summary") or ""), 2000))

    def update(self, changes: dict) -> None:
        self.attempt = update_attempt_row(self.attempt["id"], changes)
        _publish_attempt(self.attempt)


def _judge_attempt(task: dict, project: dict, owner: AttemptOwner, run: "AgentRun") -> None:
    """An attempt did its work: its diff, the project's check once more in its worktree
    (sandboxed as its run was), then with autoTest the verifier's verdict."""
    n, machine, cwd = owner.n, run.machine, run.cwd
    stats = task_diff(task["id"], n)["stats"]
    changes = {"diff_json": json_dumps({"files": stats["files"], "additions": stats[
        "insertions"], "deletions": stats["deletions"]})}
    command = project["stop_check_command"].strip()
    if command:
        runtime.logs.append(task["id"], "system", f"attempt {n}: the check `{command}` runs "
                            f"in {cwd}", run.run_id)
        checked = machine.check(cwd, shlex.split(command), run.env, run.sandbox)
        code, out = checked if checked is not None else (None, f"{command!r} is not found")
        changes["check_json"] = json_dumps({"command": command, "exitCode": code,
                                            "passed": code == 0,
                                            "output": out[-STOP_CHECK_TAIL:]})
    owner.update(changes)
    if task_row(task["id"])["status"] != "in_progress":
        _attempt_ended(owner.attempt, "stopped")
    elif not project["auto_test"]:
        _attempt_ended(owner.attempt, "done")
    else:
        start_verifier(owner)


def _attempt_failed(attempt: dict, reason: str, run_id: int | None = None) -> None:
    runtime.logs.append(attempt["task_id"], "system", f"attempt {attempt['n']} failed: "
                        f"{reason}", run_id, is_error=True)
    _attempt_ended(attempt, "failed", error=reason)


def _attempt_ended(attempt: dict, status: str, **changes) -> None:
    _publish_attempt(update_attempt_row(attempt["id"], {
        "status": status, "ended_at": now_iso(), **changes}))
    _settle_attempts(attempt["task_id"])


def _stop_attempts(task_id: int) -> None:
    """The task left in_progress (its runs are stopped): what was queued or waiting
    stops too."""
    for row in attempt_rows(task_id):
        if row["status"] in ("queued", "running") and not runtime.agents.holds(
                (task_id, row["n"])):
            _publish_attempt(update_attempt_row(row["id"], {"status": "stopped",
                                                            "ended_at": now_iso()}))


def _settle_attempts(task_id: int) -> None:
    """Once every attempt of a running task ended: testing (and with attemptPick auto,
    the pick by the rule) when one did its work, else failed."""
    rows = attempt_rows(task_id)
    task = task_row(task_id)
    if task is None or task["status"] != "in_progress" or task_id in runtime.agents.picking \
            or not rows or any(
            a["status"] in ("queued", "running") or a["picked"] for a in rows):
        return
    done = [a for a in rows if a["status"] == "done"]
    _publish_task(update_task_row(task_id, {"is_running": 0}))
    if not done:
        _fail_task(task_id, f"none of its {len(rows)} attempts did its work")
        return
    move_task(task_id, "testing", manual=False, only_from="in_progress", reason=f"{len(done)}"
              f" of {len(rows)} attempts did their work: compare them and pick one")
    if project_row(task["project_id"])["attempt_pick"] == "auto":
        best = min(done, key=lambda a: (not (json.loads(a["check_json"] or "{}").get(
            "passed")), a["verdict"] != "approve", a["cost"], a["duration_ms"]))
        with contextlib.suppress(Conflict):  # picked by a person meanwhile
            pick_attempt(task_id, best["n"], by="the rule (attemptPick auto)")


def pick_attempt(task_id: int, n: int, by: str = "person") -> list[dict]:
    """Attempt n's branch becomes the task's (its worktree, session and CLI with it); the
    others stop, and their worktrees and (unless keepAttemptBranches) branches go."""
    task = get_task(task_id)
    project = project_row(task["project_id"])
    rows = attempt_rows(task_id)
    attempt = found(next((a for a in rows if a["n"] == n), None),
                    f"task {task_id} has no attempt {n}")
    picked = next((a for a in rows if a["picked"]), None)
    if picked is not None:
        raise Conflict(f"attempt {picked['n']} of task {task_id} was picked already", "n")
    if attempt["status"] in ("queued", "running"):
        raise Conflict(f"attempt {n} is still {attempt['status']}: pick it once it ended",
                       "n")
    if not attempt["branch_name"]:
        raise Conflict(f"attempt {n} made no branch: it never started", "n")
    if task_id in runtime.agents.picking:
        raise Conflict(f"an attempt of task {task_id} is being picked", "n")
    runtime.agents.picking.add(task_id)
    try:
        runtime.agents.stop(task_id)  # the others stop now
        _stop_attempts(task_id)
        row = task_row(task_id)
        _clear_attempts(row, project, attempt_rows(task_id), keep=attempt)
    finally:
        runtime.agents.picking.discard(task_id)
    moved = pick_attempt_rows(attempt["id"], {
        "branch_name": attempt["branch_name"], "base_commit": attempt["base_commit"],
        "branch_at": attempt["branch_at"] or row["branch_at"], "agent": attempt["agent"],
        "model": attempt["model"], "thinking_effort": attempt["effort"],
        "session_id": attempt["session_id"]})
    if moved is None:
        raise Conflict(f"an attempt of task {task_id} was picked meanwhile", "n")
    _publish_attempt(moved[0])
    _publish_task(moved[1])
    runtime.logs.append(task_id, "system", f"attempt {n} ({attempt['agent']}, "
                        f"{attempt['model']}) picked by {by}: its branch "
                        f"{attempt['branch_name']} is the task's")
    if moved[1]["status"] == "in_progress":
        move_task(task_id, "testing", manual=False, only_from="in_progress",
                  reason=f"attempt {n} picked")
    return list_attempts(task_id)


#: Moves the picked attempt's worktree ($1) to the task's ($2), then removes the other
#: attempts' worktrees and branches (pairs after those; an empty branch: kept).
PICK_SCRIPT = """src=$1 dst=$2; shift 2
if [ -n "$src" ]; then
  if [ -e "$dst" ]; then git worktree remove --force "$dst" || rm -rf "$dst"; fi
  prune; mkdir -p "$(dirname "$dst")"; unrefs "$dst"; unrefs "$src"
  if [ -d "$src" ]; then git worktree move "$src" "$dst" || exit 1; fi
fi
while [ $# -gt 1 ]; do
  git worktree remove --force "$1" 2>/dev/null || rm -rf "$1"
  unrefs "$1"
  if [ -n "$2" ]; then git branch -D "$2" >/dev/null 2>&1; fi
  shift 2
done
prune"""


def _clear_attempts(task: dict, project: dict, rows: list[dict], keep=None) -> None:
    """The worktrees of a set's attempts go, with their branches unless
    keepAttemptBranches; `keep`'s worktree becomes the task's (their previews stop)."""
    stop_previews(task["id"], attempts_only=True)
    machine = project_machine(project)
    repo = machine.repository(project)
    gone = [part for a in rows if a is not keep and a["branch_name"] for part in (
        machine.worktree(attempt_task(task, a), project),
        "" if project["keep_attempt_branches"] else a["branch_name"])]
    src, dst = (machine.worktree(attempt_task(task, keep), project),
                machine.worktree(task, project)) if keep else ("", "")
    sandbox = git_sandbox(project, machine, worktree=task)
    with machine.repo_lock(repo):
        code, out = machine.shell(repo, sandbox=sandbox)(
            ["sh", "-c", in_repository(PICK_SCRIPT, machine.git_dir(project), sandbox), "sh",
             src, dst, *gone], timeout=120)
        prune_outside(machine.shell(repo), machine.git_dir(project), sandbox)
    if code != 0:
        raise Conflict(f"the attempts' worktrees could not be moved: {_cut(out.strip(), 300)}")


def attempt_stats() -> dict:
    """Which CLI and model win on this board: per pair, the attempts that ended, how many
    were picked, their win rate (picks / attempts) and mean cost."""
    return {"agents": [{
        "agent": r["agent"], "model": r["model"], "attempts": r["attempts"],
        "picks": r["picks"], "winRate": round(r["picks"] / r["attempts"], 4),
        "meanCostUsd": round(r["mean_cost"] or 0, 6)} for r in attempt_stat_rows()]}


# =============================================================================
# SERVICES: GIT
# =============================================================================
# Branches and worktrees, commits and diffs.  With autoBranch each task works in its own
# worktree and branch (design §10); git runs one operation at a time per repository.

#: How often synced projects import new issues.
SYNC_INTERVAL_SECONDS = 300.0
#: Timeout of a source-host API call and of a push.
GIT_HOST_TIMEOUT_SECONDS = 30.0
PUSH_TIMEOUT_SECONDS = 120.0


def branch_name(task: dict) -> str:
    return f"{task['task_type']}/{task['task_key'].lower()}-{slugify(task['title'], 40)}"


def task_checkout(task: dict, project: dict, machine: "ThisMachine | HostLink",
                  run_id: int | None = None) -> str:
    """Where the task's agent works on its machine: with autoBranch (implied on a host),
    its worktree (made, or made again from its kept branch, at the same path); else, or
    outside git, workingDir."""
    cwd = project["working_dir"]
    if not (project["auto_branch"] or machine.branches_always):
        if project["max_concurrent"] > 1:
            runtime.logs.append(task["id"], "system", "warning: this project runs up to "
                                f"{project['max_concurrent']} agents in one checkout; turn on "
                                "autoBranch to give each task its own worktree", run_id)
        return cwd
    if not machine.has_git(project):
        runtime.logs.append(task["id"], "system", f"no branch made: {cwd} is not a git "
                            "repository with a commit; the agent works in it directly", run_id)
        return cwd
    branch = task["branch_name"] or branch_name(task)
    sandbox = git_sandbox(project, machine, worktree=task, fetches=True)
    what, path, head, at = machine.make_worktree(  # a writable run checks it out itself
        task, project, branch, sandbox, sandbox is not None and
        project["permission_mode"] != "read-only")
    if what == "kept":
        return path
    changes = {"branch_name": branch, **({"branch_at": at} if at else {})}
    if what.startswith("new "):
        changes["base_commit"] = head
        said = f"worktree {path}{machine.where} on new branch {branch} from {what[4:]}"
    else:
        said = f"worktree {path}{machine.where} made again from branch {branch}"
    runtime.logs.append(task["id"], "system", said, run_id)
    record_checkout(task, changes)
    return path


def hidden_from(project: dict) -> list[str]:
    """What a sandboxed run of the project never sees wherever it is (design §17 v6): the
    other projects' folders and the board's token file."""
    return [*(p["working_dir"] for p in find_rows("projects") if p["id"] != project["id"]),
            *filter(None, [runtime.config["token_file"]])]


def git_sandbox(project: dict, machine: "ThisMachine | HostLink", write: bool = False,
                worktree: dict | None = None, fetches: bool = False) -> dict | None:
    """The sandbox of the board's own git on a checkout or repository a run of the project
    could have written (design §17 v6): its runs' layout, with no CLI and nothing of the
    data dir, the checkout read-only unless the command must `write` (the end-of-run
    commit); with `worktree` (a task), the repository's own git work on its worktrees
    (WORKTREE_SCRIPT, WORKTREE_REMOVE, PICK_SCRIPT): the repository read-only but its git
    folder, and the worktrees' folder, writable.  A nested repository's filter, an
    agent-set diff driver, a planted `commondir` or reflog link then act as blind as the
    run.  It has no network (design §20: a planted filter reaches no loopback service,
    no abstract socket, not the board) but where it `fetches` (a new worktree's checkout,
    where Git LFS and a partial clone fetch what they lack: the machine's network, as
    before; that checkout is of a branch the run cannot move: a read-only project's, a
    host's; a writable run checks its new worktree out in its own sandbox, through its
    proxy: task_checkout()).  None where the project's
    runs are not sandboxed (`none`, simulated, bubblewrap not working there); its git
    then runs with what executes code off as far as git
    allows (GIT_ENV, DIFF_SCRIPT's and COMMIT_SCRIPT's flags), but git has no switch for a
    filter that `.gitattributes` or a nested repository's own config names (`git add` runs
    it), nor for a reflog it appends through a link: that stays open for an unsandboxed
    project, whose agent runs as the person chose anyway.  HostDown when a host's folders
    are not known without connecting."""
    if project["sandbox"] == "none" or runs_simulated(project) or \
            not machine.sandbox()["works"]:
        return None
    return {"agent": None, "command": [], "files": [], "read_only": not write,
            "hide": hidden_from(project), "git": machine.git_dir(project),
            "out": [posixpath.dirname(machine.worktree(worktree, project))] if worktree
            else [], "offline": not fetches}


#: The end-of-run commit of what a run left in its worktree (`sh -c COMMIT_SCRIPT sh
#: MESSAGE`), in one sandbox: nothing when clean, else all of it, hooks skipped, as the
#: repository's own identity or else Taskboard's; its last line "committed" when it did.
COMMIT_SCRIPT = r"""exec 2>&1
s=$(git status --porcelain --ignore-submodules=all) || exit 1
[ -n "$s" ] || exit 0
git add -A || exit 1
if git config user.email >/dev/null; then set -- commit -q --no-verify -m "$1"
else set -- -c user.name=Taskboard -c user.email=taskboard@localhost commit -q \
  --no-verify -m "$1"; fi
git "$@" && echo committed"""


def run_end(task: dict, project: dict, cwd: str, machine: "ThisMachine | HostLink") \
        -> str | None:
    """What a sandboxed run of the task (or of an attempt: attempt_task()) in its worktree
    does in its sandbox once its agent ended (RUN_START's end): what it left uncommitted
    committed (COMMIT_SCRIPT, with the board's git settings, GIT_ENV), as blind as the run
    and in no sandbox of its own; None where its cwd is not a worktree of the board's."""
    if cwd != machine.worktree(task, project):
        return None
    return "".join(f"export {key}={shlex.quote(value)}\n" for key, value in GIT_ENV.items()) \
        + f"set -- {shlex.quote(_commit_message(task))}\n" + COMMIT_SCRIPT


def _commit_message(task: dict) -> str:
    return f"{task['task_key']}: uncommitted changes from the agent"


def commit_leftovers(task: dict, cwd: str, run_id: int | None,
                     machine: "ThisMachine | HostLink",
                     ended: tuple[int, str] | None = None) -> None:
    """Commit what the agent left uncommitted in the task's worktree, on the machine the
    run used, in the sandbox of its runs (git_sandbox()); then, in the same process but
    outside the sandbox, put the run's commits, made on its copy of the repository's refs,
    on its branch (OWN_REFS's sync_refs: git's update-ref alone, which runs nothing a run
    could have written, through no link).  With `ended` (the exit code and output of the
    commit the run's own sandbox made as it ended: run_end()), only the branch is put there,
    outside any sandbox.  What could not be put there goes to the task's log, with the
    commit it would have been."""
    project = project_row(task["project_id"])
    if project is None or not machine.worktree_at(cwd):
        return
    sandbox = git_sandbox(project, machine, write=True)
    after = sync_after(machine.repository(project), machine.worktree(task, project),
                       task["branch_name"], machine.git_dir(project)) \
        if sandbox is not None and task["branch_name"] else None
    with machine.repo_lock(cwd):
        if ended is None:
            code, out = machine.shell(cwd, sandbox=sandbox and {**sandbox, "after": after})(
                ["sh", "-c", COMMIT_SCRIPT, "sh", _commit_message(task)], 300)
        else:
            code, out = ended
            if after is not None:
                out += "\n" + machine.shell(cwd)(["sh", "-c", after], 60)[1]
    refused = [line for line in out.splitlines() if line.startswith("refused: ")]
    if refused:
        runtime.logs.append(task["id"], "system", "the run's branch was not brought up to "
                            f"date: {_cut('; '.join(refused), 500)}", run_id, is_error=True)
    out = "\n".join(line for line in out.splitlines() if not line.startswith("refused: "))
    if not git_output(["commit"], code, out).strip().endswith("committed"):
        return
    runtime.logs.append(task["id"], "system", "committed the changes the agent left "
                        "uncommitted", run_id)


def remove_worktree(task: dict, project: dict, only_if_done: bool = False,
                    merged: bool = False) -> None:
    """Remove the task's worktree; its branch stays unless it has no commits of its own
    or they were merged.  With only_if_done, nothing happens unless the task is still
    done and has no agent.  What fails goes to the task's log."""
    try:
        machine = project_machine(project)
        machine.remove_worktree(task, project, _still_done if only_if_done else None, merged,
                                lambda: git_sandbox(project, machine, worktree=task))
    except (GitError, HostDown) as exc:
        if task_row(task["id"]) is None:
            log.warning("task %s: its worktree was not removed: %s", task["id"], exc)
        else:
            runtime.logs.append(task["id"], "system", f"the worktree was not removed: {exc}",
                                is_error=True)


def _still_done(task: dict) -> bool:
    """Whether a task is still done with no agent (checked under its repository's lock:
    task_checkout() takes it too)."""
    now = task_row(task["id"])
    return now is not None and now["status"] == "done" and not runtime.agents.holds(task["id"])


def prune_worktrees() -> None:
    """Start-up: forget worktrees whose directories are gone (never blocks start-up)."""
    for project in find_rows("projects"):
        if project["auto_branch"] and git_head(project["working_dir"]):
            root = repo_root(project["working_dir"])
            with git_lock(root):
                run_command(["sh", "-c", in_repository("git worktree prune", THIS_MACHINE.git_dir(
                    project))], root, 30, env={**os.environ, **GIT_ENV})


def worktree_disk(project_id: int) -> dict:
    """How many worktrees the project has and the disk they use."""
    folder = os.path.join(runtime.data_dir, "worktrees", str(project_id))
    names = [n for n in os.listdir(folder) if not n.startswith(".")] \
        if os.path.isdir(folder) else []  # .refs: OWN_REFS
    if not names:
        return {"worktrees": 0, "worktreeBytes": 0}
    code, out = run_command(["du", "-sk", folder], None, 30)
    size = int(out.split()[0]) * 1024 if code == 0 and out.split() else 0
    return {"worktrees": len(names), "worktreeBytes": size}


def after_done(task_id: int) -> None:
    """A task entered done: open its pull request (autoPr), close its imported issue,
    then remove its worktree.  Runs in the background; failures go to the task's log."""
    context = run_context_rows(task_id)
    if context is None:
        return
    task, project = context["task"], context["project"]
    for step in (bring_branch_home, open_pull_request, close_issue):
        try:
            step(task, project)
        except Exception as exc:  # the move to done is never undone by these
            log.exception("task %s: %s failed", task_id, step.__name__)
            runtime.logs.append(task_id, "system", f"{step.__name__.replace('_', ' ')} "
                                f"failed: {exc}", is_error=True)
        task = task_row(task_id) or task
    if task["status"] == "done":
        remove_worktree(task, project, only_if_done=True)


#: The largest diff get_task_diff returns; the rest is cut with a marker.
MAX_DIFF_BYTES = 2 * 1024 * 1024
#: At most this many new (untracked) files are shown in a task's diff.
MAX_NEW_FILES = 200


def diff_lines(diff: str) -> dict:
    """{(path, "new"|"old", line number): text} of a unified diff."""
    out, path, old, new = {}, None, 0, 0
    left = 0  # lines of the hunk still to come: a "--- " or "+++ " line inside is content
    for line in diff.splitlines():
        if line.startswith("@@"):
            if match := re.match(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))?", line):
                old, new = int(match.group(1)), int(match.group(3))
                left = int(match.group(2) or 1) + int(match.group(4) or 1)
            continue
        if not left:
            if line.startswith("+++ "):
                path = line[4:].removeprefix("b/")
            continue
        left -= 1 if line[:1] in ("+", "-") else 2 if line[:1] == " " else 0
        if path and line[:1] == "+":
            out[(path, "new", new)] = line[1:]
            new += 1
        elif path and line[:1] == "-":
            out[(path, "old", old)] = line[1:]
            old += 1
        elif path and line[:1] == " ":
            out[(path, "new", new)] = out[(path, "old", old)] = line[1:]
            old, new = old + 1, new + 1
    return out


def task_diff(task_id: int, attempt: int | None = None) -> dict:
    """What the task (or its `attempt` n) changed, with numstat totals: on its branch
    (autoBranch), the diff against the merge base, uncommitted work included; else from
    the HEAD before its first run to the working tree now."""
    task = get_task(task_id)
    project = project_row(task["project_id"])
    if attempt is not None:
        task = attempt_task(task, found(next((a for a in attempt_rows(task_id) if a["n"] ==
                                              attempt), None),
                                        f"task {task_id} has no attempt {attempt}"))
    if task["branch_name"]:
        root, checkout = task_git(task, project)
        branch = task["branch_name"]
        base = _task_base(root, task, project["pr_base_branch"]) if root else None
        try:
            code, merge_base = root(["git", "merge-base", base, branch], 10) if base else (1, "")
        except HostDown:
            code = 1
        if code != 0:
            return _diff(None, [], branch)
        if checkout is not None:
            return _diff(checkout, [merge_base.strip()], branch)
        return _diff(root, [merge_base.strip(), branch], branch)
    runs = find_rows("runs", task_id=task_id, kind="task")
    cwd = runs[-1]["cwd"] if runs and runs[-1]["cwd"] else project["working_dir"]
    base = next((r["head_start"] for r in runs if r["head_start"]), None)
    code, branch = run_command(["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd, 10)
    return _diff(THIS_MACHINE.shell(cwd, sandbox=git_sandbox(project, THIS_MACHINE))
                 if base else None, [base],
                 branch.strip() if code == 0 else "")


def task_git(task: dict, project: dict) -> tuple:
    """Where the git commands of a task on a branch run: (its repository, its worktree or
    None), each a run(argv, timeout) as a machine's shell() gives; (None, None) outside git
    or on a host whose connection is not open (a read never waits for one)."""
    machine = project_machine(project)
    try:
        sandbox = git_sandbox(project, machine)
    except HostDown:
        return None, None
    return machine.task_git(task, project, sandbox)


def task_commits(task: dict) -> list[dict]:
    """The task's own commits: those on its branch (autoBranch), else those made between
    its first run and its latest run's end."""
    if task["branch_name"]:
        project = project_row(task["project_id"])
        root = task_git(task, project)[0] if project else None
        base = _task_base(root, task, project["pr_base_branch"]) if root else None
        if base is None:
            return []
        commit_range, run = f"{base}..{task['branch_name']}", root
    else:
        runs = find_rows("runs", task_id=task["id"], kind="task")
        base = next((r["head_start"] for r in runs if r["head_start"]), None)
        end = next((r["head_end"] for r in reversed(runs) if r["head_end"]), None)
        if base is None or end is None or base == end:
            return []
        project = project_row(task["project_id"])
        if project is None:
            return []
        commit_range, run = f"{base}..{end}", THIS_MACHINE.shell(
            runs[-1]["cwd"], sandbox=git_sandbox(project, THIS_MACHINE))
    try:
        code, out = run(["git", "log", "--format=%H%x1f%s%x1f%an%x1f%aI", commit_range], 20)
    except HostDown:
        code, out = 1, ""
    fields = ("hash", "message", "author", "date")
    return [dict(zip(fields, line.split("\x1f") + ["", "", ""]))
            for line in (out.splitlines() if code == 0 else [])]


def _task_base(root, task: dict, base_branch: str) -> str | None:
    """What the task's branch is compared with (root runs git in its repository):
    prBaseBranch when it exists, else the commit the branch was made from."""
    try:
        if root(["git", "rev-parse", "--verify", "-q", f"refs/heads/{base_branch}"], 10)[0] \
                == 0:
            return base_branch
    except HostDown:
        return None
    return task["base_commit"]


#: The board's diff (`sh -c DIFF_SCRIPT sh ARGS...`), in one sandbox: numstat, NUL, the
#: diff, and against the working tree (one ARG) NUL and the new files, NUL-separated; no
#: external diff, textconv or nested repository runs (their config may be the agent's).
DIFF_SCRIPT = r"""n=$#; set -- --no-ext-diff --no-textconv --ignore-submodules=all "$@" --
git diff --numstat "$@" && printf '\0' && git diff "$@" || exit 1
[ "$n" = 1 ] || exit 0
printf '\0'; git ls-files --others --exclude-standard -z"""
#: New files as diffs (`sh -c NEW_FILES_DIFF sh FILE...`): each one's numstat, NUL, diff, NUL.
NEW_FILES_DIFF = r"""for f; do
  git diff --no-index --no-ext-diff --no-textconv --numstat -- /dev/null "$f"; printf '\0'
  git diff --no-index --no-ext-diff --no-textconv -- /dev/null "$f"; printf '\0'
done"""


def _diff(run, args: list[str], branch: str) -> dict:
    """`git diff args` with numstat totals, cut at MAX_DIFF_BYTES with a marker; run (as a
    machine's shell() gives, in git_sandbox()) runs git where the diff is made; None: an
    empty diff."""
    stats = {"files": 0, "insertions": 0, "deletions": 0}
    out = {"diff": "", "branch": branch, "stats": stats}
    if run is None:
        return out
    with contextlib.suppress(HostDown):  # a host lost meanwhile: no diff
        code, text = run(["sh", "-c", DIFF_SCRIPT, "sh", *args], 60)
        parts = text.split("\0", 2) if code == 0 else []
        if len(parts) < 2:
            return out
        for line in parts[0].splitlines():
            added, removed, _ = (line.split("\t", 2) + ["", ""])[:3]
            stats["files"] += 1
            stats["insertions"] += int(added) if added.isdigit() else 0
            stats["deletions"] += int(removed) if removed.isdigit() else 0
        diff = parts[1]
        names = [n for n in parts[2].split("\0") if n][:MAX_NEW_FILES] if len(parts) > 2 \
            else []
        if names:  # against the working tree: new files are changes too
            code, text = run(["sh", "-c", NEW_FILES_DIFF, "sh", *names], 120)
            pieces = text.split("\0") if code == 0 else []
            for numstat, piece in zip(pieces[0::2], pieces[1::2]):
                added = numstat.split("\t", 1)[0]
                stats["files"] += 1
                stats["insertions"] += int(added) if added.isdigit() else 0
                diff += piece
                if len(diff) > MAX_DIFF_BYTES:
                    break
        data = diff.encode("utf-8")
        if len(data) > MAX_DIFF_BYTES:
            diff = data[:MAX_DIFF_BYTES].decode("utf-8", "ignore") + \
                f"\n… diff truncated ({len(data) - MAX_DIFF_BYTES} more bytes)\n"
        out["diff"] = diff
    return out


# =============================================================================
# SERVICES: THE SOURCE HOST
# =============================================================================
# Pull requests and issues on the project's source host (GitHub, GitLab, Gitea), and the
# follower of open pull requests.

def open_pull_request(task: dict, project: dict) -> None:
    """autoPr: push the task's branch to origin and open a pull request for it; a task
    whose pull request is open (it was sent back, §16) pushes to it again, never
    forced."""
    pr = json.loads(task["pr_json"]) if task["pr_json"] else None
    pr = pr if pr and pr["state"] == "open" and not pr["error"] else None
    if not project["auto_pr"] or task["pr_url"] and not pr:
        return
    say = functools.partial(runtime.logs.append, task["id"], "system")
    if not task["branch_name"]:
        say("no pull request: the task has no branch (turn on autoBranch)", is_error=True)
        return
    root = repo_root(project["working_dir"])
    repo = project["git_host_repo"] or _repo_of_origin(root)
    if not _push_branch(task, project, pr, say):
        return
    if pr:
        _publish_task(update_pr_row(task["id"], {"needsYou": None, "checks": "pending"}))
        runtime.logs.append(task["id"], "pr", f"pushed {task['branch_name']}: pull request "
                            f"#{pr['number']} updated")
        runtime.prs.wake(task["id"])
        return
    say(f"pushed {task['branch_name']} to origin")
    if not repo:
        say("no pull request: set the project's Repository (gitHostRepo, owner/repo) in its "
            "Source host settings", is_error=True)
        return
    status, answer = _post_pull_request(task, project, repo)
    if status == 201 and isinstance(answer, dict) and answer.get("html_url"):
        follow_pull_request(task, repo, answer)
    else:
        say(f"the pull request was not opened: {_host_problem(status, answer)}", is_error=True)


def _push_branch(task: dict, project: dict, pr: dict | None, say) -> bool:
    """Push the task's branch to origin from the project's machine (a host's clone, with
    the host's credentials); False, said on the task's log, when that failed."""
    refs = f"refs/heads/{task['branch_name']}:refs/heads/{task['branch_name']}"
    try:  # from the project's machine (a host's clone, with the host's credentials)
        machine = project_machine(project)
        where = machine.repository(project)
        with machine.repo_lock(where):  # to origin's URL: no remote-tracking ref is
            # written, nor its reflog, which a run may have made a link to a file of home
            url = machine.git(where, "remote", "get-url", "--push", "origin", timeout=30)
            machine.git(where, "push", url.strip(), refs, timeout=PUSH_TIMEOUT_SECONDS)
    except (GitError, HostDown, NotFound) as exc:
        if pr:
            runtime.logs.append(task["id"], "pr", f"pull request #{pr['number']} was not "
                                f"updated: pushing {task['branch_name']} failed ({exc})",
                                is_error=True)
        else:
            say(f"no pull request: pushing {task['branch_name']} to origin failed ({exc})",
                is_error=True)
        return False
    return True


def _post_pull_request(task: dict, project: dict, repo: str) -> tuple[int, object]:
    """Open the task's pull request on the source host: (status, answer); one already
    open for the branch is taken as opened (201)."""
    body = "\n\n".join(filter(None, [
        f"Task **{task['task_key']}**: {task['title']}", task["description"].strip(),
        "## Acceptance criteria\n" + task["acceptance_criteria"].strip()
        if task["acceptance_criteria"].strip() else "", "Opened by Taskboard."]))
    status, answer = git_host_call("POST", f"/repos/{repo}/pulls", {
        "title": f"{task['task_key']}: {task['title']}", "head": task["branch_name"],
        "base": project["pr_base_branch"], "body": body})
    if status == 422 and "already exists" in json_dumps(answer):
        owner = repo.split("/")[0]
        status, open_ones = git_host_call("GET", f"/repos/{repo}/pulls?state=open&head="
                                          f"{owner}:{urllib.parse.quote(task['branch_name'])}")
        answer = open_ones[0] if status == 200 and isinstance(open_ones, list) and open_ones \
            else answer
        status = 201 if isinstance(answer, dict) and answer.get("html_url") else status
    return status, answer


def close_issue(task: dict, project: dict) -> None:
    """An imported issue's task is done: comment on the issue and close it."""
    if not task["issue_number"] or not project["git_host_repo"]:
        return
    path = f"/repos/{project['git_host_repo']}/issues/{task['issue_number']}"
    text = f"Done in Taskboard as {task['task_key']}: {task['title']}." + (
        f"\n\nPull request: {task['pr_url']}" if task["pr_url"] else "")
    status, answer = git_host_call("POST", f"{path}/comments", {"body": text})
    if status != 201:
        runtime.logs.append(task["id"], "system", f"issue #{task['issue_number']} was not "
                            f"commented on: {_host_problem(status, answer)}", is_error=True)
        return
    status, answer = git_host_call("PATCH", path, {"state": "closed",
                                                   "state_reason": "completed"})
    if status == 200:
        runtime.logs.append(task["id"], "system", f"closed issue #{task['issue_number']}")
    else:
        runtime.logs.append(task["id"], "system", f"issue #{task['issue_number']} was not "
                            f"closed: {_host_problem(status, answer)}", is_error=True)


def sync_issues(project_id: int) -> dict:
    """Import the open issues of the project's gitHostRepo not imported before."""
    project = project_row(project_id)
    if project is None or not project["git_host_sync_enabled"] or \
            not project["git_host_repo"]:
        return {"imported": 0}
    issues = []
    for page in range(1, 11):  # at most 1,000 open issues a sync
        status, answer = git_host_call(
            "GET", f"/repos/{project['git_host_repo']}/issues?state=open&per_page=100"
            f"&page={page}")
        if status != 200 or not isinstance(answer, list):
            log.warning("project %s: issue sync failed: %s", project_id,
                        _host_problem(status, answer))
            return {"imported": 0, "error": _host_problem(status, answer)}
        for item in answer:
            if isinstance(item, dict) and "pull_request" not in item and \
                    isinstance(item.get("number"), int) and item.get("title"):
                issues.append(_issue_task(item))
        if len(answer) < 100:
            break
    notice = Notice("task:created", from_task={"issue": "issue_number"})
    rows = insert_issue_tasks(project_id, issues, task_defaults(), notice)
    for row in rows:
        runtime.events.publish("task:created", task_view(row), project_id)
    announce(notice)
    return {"imported": len(rows)}


def sync_all_issues() -> float:
    """A round of the background sync: every synced project (at start, then every
    SYNC_INTERVAL_SECONDS)."""
    for project in find_rows("projects", git_host_sync_enabled=1, git_host_repo={"!=": ""}):
        try:
            sync_issues(project["id"])
        except Exception:
            log.exception("project %s: issue sync failed", project["id"])
    return SYNC_INTERVAL_SECONDS


def git_host_call(method: str, path: str, body: dict | None = None) -> tuple[int | None, object]:
    """One call to the source host's REST API: (status, decoded answer), (None, why)."""
    response = git_host_response(method, path, body)
    return (None, response) if isinstance(response, str) else \
        (response.status_code, _decoded(response))


def git_host_response(method: str, path: str, body: dict | None = None,
                      headers: dict | None = None, redirects: bool = True):
    """One call to the source host's REST API: its requests.Response, or why there is none."""
    headers = {"Accept": "application/vnd.github+json", "User-Agent": f"taskboard/{__version__}",
               "X-GitHub-Api-Version": "2022-11-28", **(headers or {})}
    if runtime.config.get("git_host_token"):
        headers["Authorization"] = f"Bearer {runtime.config['git_host_token']}"
    return http_call(method, runtime.config["git_host_api"].rstrip("/") + path,
                     GIT_HOST_TIMEOUT_SECONDS, json=body, headers=headers,
                     allow_redirects=redirects)


def _decoded(response) -> object:
    try:
        return response.json()
    except ValueError:
        return response.text[:300]


def _issue_task(item: dict) -> dict:
    body = item.get("body") if isinstance(item.get("body"), str) else ""
    return {"title": " ".join(str(item["title"]).split())[:500] or f"Issue #{item['number']}",
            "description": (body.strip() + "\n\n" if body.strip() else "")
            + f"Imported from issue #{item['number']}: {item.get('html_url') or ''}",
            "task_type": "bugfix" if any(
                isinstance(label, dict) and "bug" in str(label.get("name", "")).lower()
                for label in item.get("labels") or []) else "feature",
            "priority": 1, "issue_number": item["number"],
            "issue_url": str(item.get("html_url") or ""), "acceptance_criteria": "",
            "tags": json_dumps(["issue"])}


def _host_problem(status: int | None, answer) -> str:
    if status is None:
        return str(answer)
    message = answer.get("message") if isinstance(answer, dict) else None
    hint = {401: " (check TASKBOARD_GIT_HOST_TOKEN)", 403: " (the token may lack access)",
            404: " (check the project's Repository, gitHostRepo, and the token's "
                 "access)"}.get(status, "")
    return f"the source host answered {status}{': ' + str(message)[:200] if message else ''}" \
        + hint


def _repo_of_origin(root: str) -> str:
    """owner/repo from origin's URL when it is a hosted one (https, ssh or scp form), or
    "" (a local path names no repository on the source host)."""
    code, url = run_command(["git", "remote", "get-url", "origin"], root, 10)
    match = re.fullmatch(r"(?:(?:https?|ssh|git)://[^/]+/|[\w.-]+@[\w.-]+:)"
                         r"([\w-]+)/([\w.-]+?)(?:\.git)?/?", url.strip()) if code == 0 else None
    return f"{match.group(1)}/{match.group(2)}" if match else ""


# --- following a pull request (design §16) -----------------------------------------
# One greenlet looks at every open PR the board opened, one at a time; what fails goes back
# to the agent as one revision per look (at most prFixMaxAttempts), and what was sent is
# kept in the store so that a restart never sends it twice.

#: Check-run conclusions and commit-status states that fail a pull request's checks.
FAILING = ("failure", "timed_out", "action_required", "startup_failure", "error")
#: Characters of one check's output, and of a whole revision, sent back to the agent.
PR_CHECK_OUTPUT_CHARS = 2000
PR_FEEDBACK_CHARS = 20_000
#: A host that fails is looked at again after prPollSeconds·2^n, at most this long.
PR_BACKOFF_MAX_SECONDS = 3600.0


class PullRequests(Worker):
    """The follower: each followed PR is looked at every prPollSeconds, at once when
    woken (the host's webhook, a push), later and later while its host fails (logged
    once).  Conditional GETs with the ETags of the last look cost no rate limit.  A look
    under way when the board stops may end (a killed one would leave its socket open)."""

    def __init__(self):
        super().__init__("pull requests", grace=5.0)
        self.next_look = {}  # task id -> time.monotonic() of its next look
        self.failures = {}  # task id -> failed looks in a row
        self.etags = {}  # task id -> {path: (ETag, decoded answer)} of its last look
        self.asked = set()  # task ids to look at now, even during a look at them
        self.looking, self.looks = None, 0  # the task id looked at now; looks ended

    def wake(self, task_id: int | None = None) -> None:
        self.asked |= {task_id} if task_id else set(self.next_look)
        super().wake()

    def step(self) -> float | None:
        """Look at the PRs due or asked for; the seconds until the next is due (None:
        nothing is followed, so only a wake can give it something to do)."""
        rows = followed_pr_rows()
        followed = {row["task_id"] for row in rows}
        self.asked &= followed
        for gone in set(self.next_look) - followed:
            for kept in (self.next_look, self.failures, self.etags):
                kept.pop(gone, None)
        for row in rows:
            task_id = row["task_id"]
            if self.stopping:
                return None
            if task_id in self.asked or \
                    self.next_look.setdefault(task_id, 0.0) <= time.monotonic():
                self.asked.discard(task_id)
                self.looking = task_id
                try:
                    self.look(row)
                finally:
                    self.looking, self.looks = None, self.looks + 1
        if self.asked:
            return 0.0
        due = min(self.next_look.values(), default=None)
        return None if due is None else due - time.monotonic()

    def look(self, row: dict) -> None:
        task_id = row["task_id"]
        etags = {}
        try:
            look_at_pull_request(row, functools.partial(self.get, task_id, etags))
        except GitHostTrouble as exc:
            failed = self.failures[task_id] = self.failures.get(task_id, 0) + 1
            wait = min(exc.wait or backoff(row["pr_poll_seconds"], failed + 1),
                       PR_BACKOFF_MAX_SECONDS)
            if failed == 1:
                runtime.logs.append(task_id, "pr", f"{exc}; looking again in {wait:.0f} s, "
                                    "then less often until it answers", is_error=True)
            self.next_look[task_id] = time.monotonic() + wait
            return
        except Exception:
            log.exception("task %s: looking at its pull request failed", task_id)
        else:
            self.etags[task_id] = etags
            if self.failures.pop(task_id, 0):
                runtime.logs.append(task_id, "pr", "the source host answers again")
        self.next_look[task_id] = time.monotonic() + row["pr_poll_seconds"]

    def get(self, task_id: int, etags: dict, path: str) -> tuple[int, object]:
        """GET path of the host, conditionally: (status, answer); a 304 gives the answer
        kept from the last look.  5xx, 403 and 429 (rate limits) raise GitHostTrouble."""
        etag, kept = self.etags.get(task_id, {}).get(path, (None, None))
        response = git_host_response("GET", path, headers={"If-None-Match": etag}
                                     if etag else None, redirects=False)
        if isinstance(response, str):
            raise GitHostTrouble(f"the source host did not answer ({response})")
        if response.status_code == 304 and etag:
            etags[path] = etag, kept
            return 200, kept
        answer = _decoded(response)
        status = response.status_code
        if status == 200 and response.headers.get("ETag"):
            etags[path] = response.headers["ETag"], answer
        if status in (403, 429) or status >= 500:
            raise GitHostTrouble(_host_problem(status, answer), wait_asked(response))
        return status, answer


def follow_pull_request(task: dict, repo: str, answer: dict) -> None:
    """autoPr opened (or found) the task's pull request: follow it from now on (one the
    host gives no number for is only linked)."""
    number = answer.get("number")
    if not isinstance(number, int):
        _publish_task(update_task_row(task["id"], {"pr_url": str(answer["html_url"])}))
        runtime.logs.append(task["id"], "system", f"pull request: {answer['html_url']}")
        return
    _publish_task(update_pr_row(task["id"], {
        "number": number, "url": str(answer["html_url"]), "state": "open", "checks": "none",
        "review": "none", "fixAttempts": 0, "error": None, "needsYou": None, "held": []}, {
        "repo": repo, "head_sha": None, "sent_json": "[]", "posted_json": "[]",
        "since": str(answer.get("created_at") or now_iso())}))
    runtime.logs.append(task["id"], "pr", f"opened pull request #{number}: "
                        f"{answer['html_url']}")
    runtime.prs.wake(task["id"])


def look_at_pull_request(row: dict, get) -> None:
    """One look at a followed PR (get: the follower's conditional GET): record its state,
    checks and review; clean up after a merge; send back what fails, or say why not."""
    task_id, pr, repo = row["task_id"], json.loads(row["pr_json"]), row["repo"]
    number = pr["number"]
    status, pull = get(f"/repos/{repo}/pulls/{number}")
    if status in (301, 302, 307, 308, 404, 410):
        return _pr_lost(task_id, repo, number, status)
    if status != 200 or not isinstance(pull, dict):
        raise GitHostTrouble(_host_problem(status, pull))
    if pull.get("merged") or pull.get("merged_at"):
        return pr_ended(row, pr, "merged")
    if pull.get("state") == "closed":
        return pr_ended(row, pr, "closed")
    sha = str(_dict(pull.get("head")).get("sha") or "")
    answers = _pr_details(get, repo, number, sha, row["since"])
    runs = _latest(_dict(answers["runs"]).get("check_runs"), "name")
    statuses = _latest(_dict(answers["statuses"]).get("statuses"), "context")
    reviews = [r for r in answers["reviews"] if isinstance(r, dict)] \
        if isinstance(answers["reviews"], list) else []
    checks = _checks_state(runs, statuses)
    shown = {"checks": checks, "review": _review_state(reviews)}
    if {k: pr[k] for k in shown} != shown:
        _publish_task(update_pr_row(task_id, shown, {"head_sha": sha}))
    elif row["head_sha"] != sha:
        update_pr_row(task_id, {}, {"head_sha": sha})
    done = set(json.loads(row["sent_json"])) | {  # the board's own comments count as sent
        f"note:{comment_id}" for comment_id in json.loads(row["posted_json"])}
    signals, held = pr_signals(row, pull, sha, runs if checks == "failing" else [],
                               statuses if checks == "failing" else [], reviews,
                               answers["lines"], answers["notes"], done)
    if held != pr.get("held", []):
        _publish_task(update_pr_row(task_id, {"held": held}))
    if signals:
        send_pr_back(row, {**pr, **shown}, signals)


def _pr_lost(task_id: int, repo: str, number: int, status: int) -> None:
    """The source host redirects or no longer knows the PR: say so on the task, which
    stops following it."""
    moved = status < 400
    error = f"pull request #{number} of {repo} " + (
        "moved: the repository was renamed or transferred" if moved else
        "is gone: it was deleted, or its repository renamed") + \
        f" (the source host answered {status}); the board no longer follows it"
    _publish_task(update_pr_row(task_id, {"error": error}))
    runtime.logs.append(task_id, "pr", error, is_error=True)


def _pr_details(get, repo: str, number: int, sha: str, since: str) -> dict:
    """The head's check runs and statuses, the PR's reviews, and its line and
    conversation comments since the last revision ({name: answer})."""
    since = f"per_page=100&since={urllib.parse.quote(since)}"  # after the last revision
    answers = {}
    for name, path in (("runs", f"/repos/{repo}/commits/{sha}/check-runs?per_page=100"),
                       ("statuses", f"/repos/{repo}/commits/{sha}/status?per_page=100"),
                       ("reviews", f"/repos/{repo}/pulls/{number}/reviews?per_page=100"),
                       ("lines", f"/repos/{repo}/pulls/{number}/comments?{since}"),
                       ("notes", f"/repos/{repo}/issues/{number}/comments?{since}")):
        status, answers[name] = get(path)
        if status == 404 and name in ("runs", "statuses"):  # a host without checks
            answers[name] = {}
        elif status != 200:
            raise GitHostTrouble(_host_problem(status, answers[name]))
    return answers


def _latest(items, key: str) -> list[dict]:
    """The newest item (highest id) of each `key` (a check's name, a status's context)."""
    newest = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and (item.get(key) not in newest or (
                item.get("id") or 0) > (newest[item.get(key)].get("id") or 0)):
            newest[item.get(key)] = item
    return list(newest.values())


def _checks_state(runs: list[dict], statuses: list[dict]) -> str:
    """pending while any check runs; failing when none runs and one failed; passing when
    all passed; none without checks."""
    states = {"pending" if r.get("status") != "completed" else "failing"
              if r.get("conclusion") in FAILING else "passing" for r in runs}
    states |= {"pending" if s.get("state") == "pending" else "failing"
               if s.get("state") in FAILING else "passing" for s in statuses}
    return next((state for state in ("pending", "failing", "passing") if state in states), "none")


def _review_state(reviews: list[dict]) -> str:
    """changes_requested when a reviewer's latest verdict asks for changes, else approved
    when one approved, else none."""
    verdicts = {}
    for review in sorted(reviews, key=lambda r: r.get("id") or 0):
        if review.get("state") in ("APPROVED", "CHANGES_REQUESTED", "DISMISSED"):
            verdicts[_dict(review.get("user")).get("login")] = review["state"]
    return "changes_requested" if "CHANGES_REQUESTED" in verdicts.values() else \
        "approved" if "APPROVED" in verdicts.values() else "none"


#: Whom the source host says its repository trusts (a comment's author_association).
TRUSTED_ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR")
#: Characters of a held comment the task's PR section shows.
PR_HELD_CHARS = 500


def pr_signals(row, pull, sha, failing_runs, failing_statuses, reviews, lines, notes,
               done: set) -> tuple[list[tuple[str, str, str, str]], list[dict]]:
    """What the PR asks of the agent that was not sent back before (done: those keys):
    ([(key, what, text, host time)], held).  A conversation comment only goes with another
    one.  Reviews and comments go back by themselves only from people the repository
    trusts, the project's prTrustedAuthors, or once a person released them; the others
    are held ({key, author, what, text}) for a person to decide (design §16, v5)."""
    since, trust = row["since"], _PrTrust(row)
    signals = [*_failing_checks_signal(sha, since, failing_runs, failing_statuses, done),
               *_changes_requested_signals(reviews, since, done, trust),
               *_review_comment_signals(lines, since, done, trust),
               *_conflict_signal(row, pull, sha, since, done)]
    said = _conversation_signals(notes, since, done, trust)
    released = trust.released
    if signals or released & {key for key, _, _, _ in said}:  # a person sent one: it goes
        signals += [(key, what or "a comment" if key in released else what, text, at)
                    for key, what, text, at in said]
    return signals, trust.held


class _PrTrust:
    """Whether a review or comment of a PR goes back by itself: its author is one the
    repository trusts or one of the project's prTrustedAuthors, or a person released it.
    What does not is held ({key, author, what, text}) for a person to decide."""

    def __init__(self, row: dict):
        self.logins = set(json.loads(row["pr_trusted_authors_json"] or "[]"))
        self.released = set(json.loads(row["released_json"]))
        self.held = []

    def admits(self, item: dict, key: str, what: str, text: str) -> bool:
        login = str(_dict(item.get("user")).get("login") or "")
        if item.get("author_association") in TRUSTED_ASSOCIATIONS or login in self.logins \
                or key in self.released:
            return True
        self.held.append({"key": key, "author": login or None, "what": what,
                          "text": _cut(text, PR_HELD_CHARS)})
        return False


def _failing_checks_signal(sha, since, failing_runs, failing_statuses, done) -> list:
    """The checks failing on the head, with their output: one signal, unless sent before."""
    if not (failing_runs or failing_statuses) or f"checks:{sha}" in done:
        return []
    failed = [r for r in failing_runs if r.get("conclusion") in FAILING] + \
        [s for s in failing_statuses if s.get("state") in FAILING]
    names = [str(f.get("name") or f.get("context")) for f in failed]
    parts = [f"Failing checks on the pull request's head {sha[:7]}:"] + [
        _failing_check_text(n, item) for n, item in enumerate(failed, 1)]
    what = ("the failing check " if len(names) == 1 else "the failing checks ") + \
        ", ".join(f"`{name}`" for name in names)
    return [(f"checks:{sha}", what, "\n".join(parts), since)]


def _failing_check_text(n: int, item: dict) -> str:
    """The n-th failing check as the agent reads it: a commit status, or a check run with
    its output."""
    if "context" in item:
        return (f"{n}. `{item['context']}` (commit status): {item.get('state')}"
                + (f": {item['description']}" if item.get("description") else "")
                + (f" ({item['target_url']})" if item.get("target_url") else ""))
    output = _dict(item.get("output"))
    detail = "\n".join(str(output[k]).strip() for k in ("title", "summary", "text")
                       if output.get(k) and str(output[k]).strip())
    return (f"{n}. `{item.get('name')}`: {item.get('conclusion')}"
            + (f" ({item['html_url']})" if item.get("html_url") else "")
            + (f"\n{_cut(detail, PR_CHECK_OUTPUT_CHARS)}" if detail else ""))


def _changes_requested_signals(reviews, since, done, trust: _PrTrust) -> list:
    """Each new review that requests changes, from an author the PR trusts."""
    asked = [r for r in reviews if r.get("state") == "CHANGES_REQUESTED"
             and f"review:{r.get('id')}" not in done and str(r.get("submitted_at")) >= since]
    signals = []
    for review in asked:
        who = _dict(review.get("user")).get("login") or "a reviewer"
        text = f"{who} requested changes" + (f": {review['body'].strip()}" if str(
            review.get("body") or "").strip() else ".")
        if trust.admits(review, f"review:{review['id']}", f"the review by {who}", text):
            signals.append((f"review:{review['id']}", f"the review by {who}", text,
                            str(review.get("submitted_at"))))
    return signals


def _review_comment_signals(lines, since, done, trust: _PrTrust) -> list:
    """Each new comment on a line of the diff, from an author the PR trusts, numbered."""
    new_lines = [c for c in (lines if isinstance(lines, list) else []) if isinstance(c, dict)
                 and f"comment:{c.get('id')}" not in done and f"note:{c.get('id')}" not in done
                 and str(c.get("created_at")) >= since and c.get("path")]
    new_lines = [c for c in new_lines if trust.admits(
        c, f"comment:{c['id']}", "a review comment", f"{c['path']}, line "
        f"{c.get('line') or c.get('original_line')}: {c.get('body') or ''}")]
    return [_review_comment_signal(n, c) for n, c in enumerate(new_lines, 1)]


def _review_comment_signal(n: int, c: dict) -> tuple[str, str, str, str]:
    """The n-th review comment as the agent reads it: the line it is on, quoted."""
    quoted = str(c.get("diff_hunk") or "").splitlines()[-1:] or [""]
    return (f"comment:{c['id']}", "a review comment", review_comment_text(
        n, c["path"], c.get("line") or c.get("original_line"),
        "old" if c.get("side") == "LEFT" else "new", quoted[0][1:],
        f"{_dict(c.get('user')).get('login') or 'a reviewer'}: {c.get('body') or ''}"),
        str(c.get("created_at")))


def _conflict_signal(row, pull, sha, since, done) -> list:
    """The PR no longer merges into its base: one signal per head and base, unless sent."""
    if pull.get("mergeable") is not False:
        return []
    base = _dict(pull.get("base"))
    key = f"conflict:{sha}:{base.get('sha')}"
    if key in done:
        return []
    branch = base.get("ref") or row["pr_base_branch"]
    return [(key, f"the conflict with `{branch}`", (
        f"The pull request can no longer be merged: it conflicts with `{branch}`. "
        f"Merge the base branch in (`git fetch origin {branch}` then `git merge "
        f"origin/{branch}`), resolve the conflicts, check that the tests pass and "
        "commit the merge."), since)]


def _conversation_signals(notes, since, done, trust: _PrTrust) -> list:
    """Each new comment in the PR's conversation, from an author the PR trusts (it goes
    only with another signal, or once a person released it)."""
    said = []
    for c in notes if isinstance(notes, list) else []:
        if isinstance(c, dict) and f"note:{c.get('id')}" not in done and \
                str(c.get("created_at")) >= since and str(c.get("body") or "").strip():
            who = _dict(c.get("user")).get("login") or "someone"
            text = f"{who} wrote on the pull request: {c['body'].strip()}"
            if trust.admits(c, f"note:{c['id']}", "a comment", text):
                said.append((f"note:{c['id']}", "", text, str(c.get("created_at"))))
    return said


def release_pr_comment(task_id: int, body) -> dict:
    """A person sends a held review or comment of the task's pull request back to the
    agent (design §16, v5): from now on it counts as trusted, and the follower looks at
    once (the revision goes when the task is done, as any other)."""
    key = validate_known(lambda: get_task(task_id), PR_RELEASE_FIELDS, body)["key"]
    task = get_task(task_id)
    item = next((h for h in (task["pr"] or {}).get("held", []) if h["key"] == key), None)
    if item is None:
        raise Invalid(f"key {key!r} is not held on this task's pull request", "key")
    release_pr_row(task_id, key)
    runtime.logs.append(task_id, "pr", f"{item['what']} by {item['author'] or 'someone'} "
                        "(not a collaborator) is sent back by a person")
    runtime.prs.wake(task_id)
    return task


def send_pr_back(row: dict, pr: dict, signals: list) -> None:
    """Send the signals back to the agent as one revision (the task must be done: a task
    being worked on or reviewed waits), and say so on the PR; past prFixMaxAttempts, put
    the task in the "Needs you" inbox instead (once per reason) and tell the phones."""
    task_id, limit = row["task_id"], row["pr_fix_max_attempts"]
    if row["status"] != "done":
        return
    names = [what for _, what, _, _ in signals if what]
    comments = names.count("a review comment")
    names = [name for name in names if name != "a review comment"] + (
        [f"{comments} review comments" if comments > 1 else "a review comment"]
        if comments else [])
    what = ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]
    if pr["fixAttempts"] >= limit:
        why = f"{what} waits for you: {pr['fixAttempts']} of {limit} automatic fixes of " \
            f"pull request #{pr['number']} were used"
        if pr.get("needsYou") != why:
            task = update_pr_row(task_id, {"needsYou": why})
            _publish_task(task)
            runtime.logs.append(task_id, "pr", why, is_error=True)
            push_task("failed", task, error=why)
        return
    text = "\n\n".join([f"The pull request #{pr['number']} ({pr['url']}) needs changes."]
                        + [text for _, _, text, _ in signals] + [
        "Work on this branch. When the task is approved, the board pushes your commits to the "
        "same pull request: do not open another one, and do not force-push."])
    attempt = pr["fixAttempts"] + 1
    try:
        changes_from("pull_request", task_id, _cut(text, PR_FEEDBACK_CHARS), sent={
            "keys": [key for key, _, _, _ in signals],
            "since": max([row["since"]] + [at for _, _, _, at in signals])})
    except (Conflict, NotFound) as exc:  # no free slot, or moved meanwhile: next look
        log.info("task %s: its pull request's changes wait: %s", task_id, exc)
        return
    said = f"sent {what} back to the agent (attempt {attempt} of {limit})"
    runtime.logs.append(task_id, "pr", said)
    status, answer = git_host_call("POST", f"/repos/{row['repo']}/issues/{pr['number']}/"
                                   "comments", {"body": f"Taskboard {said}."})
    if status == 201 and isinstance(_dict(answer).get("id"), int):
        add_posted_pr_row(task_id, answer["id"])
    else:
        runtime.logs.append(task_id, "pr", "the note on the pull request was not posted: "
                            f"{_host_problem(status, answer)}", is_error=True)


def pr_ended(row: dict, pr: dict, state: str) -> None:
    """Merged: remove the task's worktree and branch (when it is done, no agent working)
    and tell the webhooks (task:merged); closed: record it, nothing else."""
    task_id = row["task_id"]
    notice = Notice("task:merged", pullRequest=pr["url"]) if state == "merged" else None
    task = update_pr_row(task_id, {"state": state, "needsYou": None}, event=f"pr_{state}",
                         notice=notice)
    _publish_task(task)
    announce(notice)
    runtime.logs.append(task_id, "pr", f"pull request #{pr['number']} was {state}"
                        + ("" if state == "merged" else " without being merged"))
    project = project_row(row["project_id"])
    if state == "merged" and task is not None and project is not None:
        remove_worktree(task, project, only_if_done=True, merged=True)


def git_host_event(raw: bytes, signature: str | None, client: str) -> dict:
    """The source host's webhook: with a valid X-Hub-Signature-256, look now at the
    followed PRs the event names (by number or head commit); the payload is never
    trusted beyond that: the look reads the host's API.  A wrong signature counts against
    the client (its address)."""
    secret = runtime.settings.get("gitHostWebhookSecret")
    expected = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest() \
        if secret else None
    if expected is None or not hmac.compare_digest(expected.encode(),
                                                   (signature or "").encode()):
        raise runtime.failures.refused(client) or Unauthorized(
            "the webhook's X-Hub-Signature-256 is missing or wrong" if secret else
            "set gitHostWebhookSecret in the settings to receive the source host's webhooks")
    try:
        event = json.loads(raw) if raw else {}
    except (ValueError, RecursionError, UnicodeError) as exc:
        raise InvalidJson(f"invalid json: {str(exc)[:200].lower()}") from None
    event = _dict(event)
    repo = str(_dict(event.get("repository")).get("full_name") or "").lower()
    numbers = {_dict(event.get(key)).get("number") for key in ("pull_request", "issue")}
    shas = {event.get("sha")}
    for key in ("check_run", "check_suite"):
        part = _dict(event.get(key))
        shas.add(part.get("head_sha"))
        numbers |= {_dict(p).get("number") for p in part.get("pull_requests") or []
                    if isinstance(part.get("pull_requests"), list)}
    woken = 0
    for row in followed_pr_rows():
        if row["repo"].lower() == repo and (json.loads(row["pr_json"])["number"] in numbers
                                            or row["head_sha"] in shas - {None}):
            runtime.prs.wake(row["task_id"])
            woken += 1
    return {"ok": True, "pullRequests": woken}


# =============================================================================
# SERVICES: PHONES AND WEBHOOKS
# =============================================================================
# What goes out: push messages to phones, the "Needs you" inbox, webhook deliveries.

# --- phones: push messages and the "Needs you" inbox (design §13) ----------------

def push(event: str, moment: dict) -> None:
    """Queue a message for every device that wants the event (after the commit of what it
    tells); the PushSender sends it in the background."""
    for device in queue_push_rows(event, {"kind": event, **moment}):
        runtime.push.wake(device)


def push_task(event: str, task: dict, error: str | None = None) -> None:
    push(event, {"taskId": task["id"], "projectId": task["project_id"],
                 "taskKey": task["task_key"], "taskTitle": task["title"],
                 "error": error or (task["last_error"] if event == "failed" else None)})


def push_request(approval: dict, task: dict) -> None:
    """A tool approval or a question waits: the devices get it with Allow and Deny."""
    tool_input = json.loads(approval["input_json"])
    questions = [_dict(q).get("question") for q in tool_input.get("questions") or []]
    summary = " ".join(q for q in questions if isinstance(q, str)) \
        if approval["kind"] == "question" else tool_summary(tool_input)
    push("approval" if approval["kind"] == "tool" else "question", {
        "approvalId": approval["id"], "taskId": task["id"], "projectId": task["project_id"],
        "taskKey": task["task_key"], "taskTitle": task["title"],
        "tool": approval["tool_name"], "summary": _cut(summary, 200)})


def approval_resolved(approval: dict, task: dict) -> None:
    """An approval was answered or expired: the board shows it, and its notification on
    every device is replaced by what became of it."""
    runtime.events.publish("approval:resolved", approval_view(approval), approval["project_id"])
    _publish_task(task)
    push("approval" if approval["kind"] == "tool" else "question", {
        "kind": "answered", "approvalId": approval["id"], "taskId": approval["task_id"],
        "projectId": approval["project_id"], "tool": approval["tool_name"],
        "status": approval["status"], "decidedBy": approval["decided_by"]})


def check_budget() -> None:
    """A run's cost was counted: once a local day (kept as the setting _budgetToldDay),
    tell the devices that today's cost reached the daily limit (the queue then starts
    nothing new)."""
    limit = get_settings()["dailyCostLimit"]
    day = local_day_start_iso()
    if limit is None or runtime.settings.get("_budgetToldDay") == day:
        return
    cost = cost_since_row(day)
    if cost >= limit:  # in the store: a restart the same day does not tell again
        runtime.settings = upsert_settings_rows({"_budgetToldDay": day})
        push("budget", {"day": dt.date.today().isoformat(), "cost": cost, "limit": limit})


def push_key() -> dict:
    return {"publicKey": runtime.push.public_key}


def list_push_devices() -> list[dict]:
    return [render(PUSH_FIELDS, r) for r in find_rows("push_subscriptions")]


def add_push_device(body) -> dict:
    """A browser's PushSubscription, named and with its events; the same endpoint again
    replaces it (its id stays)."""
    values = validate(PUSH_FIELDS, body)
    keys = values.pop("keys")
    row = upsert_push_row({**values, "p256dh": keys["p256dh"], "auth": keys["auth"]})
    runtime.push.prepare()
    return render(PUSH_FIELDS, row)


def remove_push_device(device_id: int) -> dict:
    found(delete_push_row(device_id), f"push subscription {device_id} not found")
    return {"ok": True}


def test_push_device(device_id: int) -> dict:
    """Send the device a test notification now; answer the push service's status."""
    device = found(find_row("push_subscriptions", id=device_id),
                   f"push subscription {device_id} not found")
    status, error = deliver_push(device, {"kind": "test"}, attempts=1)
    return {"ok": error is None, "status": status, **({"error": error} if error else {})}


ACT_REFUSED = ("this notification's button was used already, has expired or is not for "
               "this request: open the board to answer")


def act_on_approval(approval_id: int, body, client: str) -> dict:
    """A notification's Allow or Deny, without a session: its token works once, for
    ACTION_TOKEN_MINUTES, and only for its approval (403 otherwise, the approval as it was).
    The answer is the least needed (design §13): {id, status, decidedBy}.  Only a token
    the board never issued counts as a wrong credential (of the client: its address)."""
    values = validate(ACT_FIELDS, body)
    spent = spend_action_row(_digest(values["token"]), approval_id)
    if spent is None:  # not a token the board issued: a guess
        raise runtime.failures.refused(client) or Forbidden(ACT_REFUSED, "token")
    if not spent:  # the board's, but used, expired or another request's: a late tap
        raise Forbidden(ACT_REFUSED, "token")
    approval = decide_approval(approval_id, {"decision": values["decision"]}, decided_by="push")
    return {key: approval[key] for key in ("id", "status", "decidedBy")}


def inbox() -> dict:
    """The "Needs you" inbox: every pending approval and question, every task waiting
    for review and every pull request waiting for a person, in every project, newest
    first."""
    approvals, reviews = inbox_rows()
    items = [{"kind": "approval" if row["kind"] == "tool" else "question",
              "at": row["created_at"], "projectId": row["project_id"],
              "projectName": row["project_name"], "taskId": row["task_id"],
              "taskKey": row["task_key"], "taskTitle": row["task_title"],
              "approval": approval_view(row), "pr": None} for row in approvals]
    items += [{"kind": "pull_request" if row.get("pr") else "review", "at": row["at"],
               "projectId": row["project_id"], "projectName": row["project_name"],
               "taskId": row["id"], "taskKey": row["task_key"], "taskTitle": row["title"],
               "approval": None, "pr": json.loads(row["pr"]) if row.get("pr") else None}
              for row in reviews]
    items.sort(key=lambda item: item["at"], reverse=True)
    return {"count": len(items), "items": items}


# --- outboxes: webhooks and push ----------------------------------------------
# Notices wait in an outbox (a webhook's, a device's), written when their change commits;
# a sender reads only its outbox, so a delivery's own event never triggers another.


class Outbox:
    """One delivery worker per target (a webhook, a device) with messages waiting in its
    outbox table: in order, and a slow target delays only its own; a message leaves the
    outbox once delivered or given up on.  take(target, after) gives (outbox id, send's
    arguments)."""

    def __init__(self, table: str, column: str, take, send):
        self.table, self.column, self.take, self.send = table, column, take, send
        self.workers = {}  # target id -> its Worker
        self.stopping = False  # what is queued from then on waits for the next start
        self.done = {}  # NOTE: target id -> the outbox id sent last: a failed delete or
        #                 a send that raises does not loop

    @property
    def idle(self) -> bool:
        return all(worker.idle for worker in self.workers.values())

    def start(self) -> None:
        for target in outbox_owners(self.table, self.column):  # left by the last stop
            self.wake(target)

    def wake(self, target: int) -> None:
        """A message was queued for the target: have its worker deliver it."""
        if self.stopping:
            return
        if target not in self.workers:
            self.workers[target] = Worker(f"{self.table} {target}", functools.partial(
                self.deliver_next, target), first=None)
            self.workers[target].start()
        self.workers[target].wake()

    def stop(self) -> None:
        self.stopping = True  # a worker stopping yields: a message may be queued meanwhile
        for worker in list(self.workers.values()):
            worker.stop()

    def deliver_next(self, target: int) -> float | None:
        """Send the target's next message: 0 (look for another at once), or None when
        none is left."""
        queued = self.take(target, self.done.get(target, 0))
        if queued is None:
            return None
        self.done[target], arguments = queued
        self.send(*arguments)
        delete_outbox_row(self.table, self.done[target])
        return 0.0


def deliver_notice(hook: dict, project: dict, notice: dict) -> None:
    if hook["enabled"]:
        deliver(hook, project, notice)


def deliver(hook: dict, project: dict, notice: dict, attempts: int = 3) \
        -> tuple[int | None, str | None, int]:
    """POST the notice in the hook's format, retrying 5xx, 429 and connection errors with
    backoff; every attempt is recorded.  Returns (status, error or None, attempts made)."""
    status, error, attempt = None, None, 0
    tries = Deliveries(attempts)
    for attempt in tries:
        if attempt > 1:  # the hook may have been changed, disabled or deleted meanwhile
            hook = find_row("webhooks", id=hook["id"], project_id=hook["project_id"])
            if hook is None or not hook["enabled"]:
                break
        body = json_dumps(webhook_payload(hook["platform"], project, notice)).encode()
        headers = {"Content-Type": "application/json",
                   "User-Agent": f"taskboard/{__version__}",
                   "X-Taskboard-Event": notice["event"]}
        if hook["secret"]:
            digest = hmac.new(hook["secret"].encode(), body, hashlib.sha256).hexdigest()
            headers["X-Taskboard-Signature"] = f"sha256={digest}"
        started = time.monotonic()
        status, error, tries.wait = _post(hook["url"], body, headers)
        record_delivery(hook, notice["event"], attempt, status, error is None, error,
                        int((time.monotonic() - started) * 1000))
        if not retryable(status, error):
            break
    return status, error, attempt


class Deliveries:
    """The attempts of one delivery (a webhook's, a push message's): 1, 2, ... with the
    backoff before each next one, or the `wait` its target last asked for when longer (at
    most RETRY_AFTER_MAX_SECONDS); the caller stops when an answer is not retryable()."""

    def __init__(self, attempts: int):
        self.attempts, self.wait = attempts, None

    def __iter__(self):
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                gevent.sleep(max(backoff(WEBHOOK_BACKOFF_BASE, attempt - 1, factor=4),
                                 min(self.wait or 0.0, RETRY_AFTER_MAX_SECONDS)))
            yield attempt


def retryable(status: int | None, error: str | None) -> bool:
    """Whether a delivery is tried again: no answer, a 5xx or a 429."""
    return error is not None and (status is None or status >= 500 or status == 429)


def webhook_payload(platform: str, project: dict, notice: dict) -> dict:
    """The body of a delivery in the platform's format (design §8)."""
    event, task = notice["event"], notice["task"]
    if platform == "custom":
        return {"event": event, "timestamp": notice["at"],
                "project": {"id": project["id"], "name": project["name"],
                            "slug": project["slug"]},
                "task": task, "data": notice["data"]}
    title, color = WEBHOOK_EVENTS.get(event, WEBHOOK_TEST)
    name = f"{task.get('task_key') or ''} {task.get('title') or ''}".strip()
    facts = [("Project", project["name"]), ("Status", task.get("status") or "-"),
             ("Type", task.get("task_type") or "-")]
    if isinstance(task.get("priority"), int) and 0 <= task["priority"] < 4:
        facts.append(("Priority", PRIORITY_NAMES[task["priority"]]))
    facts += [(key.replace("_", " ").capitalize(), str(value))
              for key, value in notice["data"].items() if value not in (None, "", True)]
    if event == "task:failed" and task.get("last_error"):
        facts.append(("Error", task["last_error"]))
    if platform == "platform_a":  # Slack: blocks, with text for notifications
        return {"text": _slack(f"{title}: {name}", 3000), "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": _slack(name, 3000)}},
            {"type": "section", "fields": [
                {"type": "mrkdwn", "text": _slack(f"*{k}*\n{v}", 2000)} for k, v in facts[:10]]},
            {"type": "context", "elements": [
                {"type": "mrkdwn", "text": _slack(f"Taskboard · {project['name']}", 300)}]}]}
    if platform == "platform_b":  # Discord: one embed
        embed = {"title": _cut(f"{title}: {name}", 200),
                 "color": color, "timestamp": notice["at"],
                 "fields": [{"name": k[:256], "value": _cut(v, 1000) or "-",
                             "inline": len(v) < 40} for k, v in facts[:25]],
                 "footer": {"text": f"Taskboard · {project['name']}"[:2048]}}
        if task.get("description"):  # Discord refuses an empty description
            embed["description"] = _cut(task["description"], 1000)
        return {"username": "Taskboard", "embeds": [embed]}
    return {"type": "message", "attachments": [{  # Teams: an Adaptive Card message
        "contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
        "content": {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard", "version": "1.4", "body": [
                {"type": "TextBlock", "text": title, "weight": "Bolder", "size": "Medium",
                 "wrap": True},
                {"type": "TextBlock", "text": name, "wrap": True},
                {"type": "FactSet", "facts": [{"title": k, "value": _cut(v, 1000)}
                                              for k, v in facts]}]}}]}


class PushSender(Outbox):
    """The devices' outbox, and what a push message needs: the board's VAPID key pair
    (RFC 8292; made at first start, 0600 in the data dir, read when first needed) and
    pywebpush, whose import is slow (aiohttp): it is imported once the first device is
    added, not at start."""

    def __init__(self, key_file: str, contact: str):
        super().__init__("push_outbox", "subscription_id", next_push, deliver_push)
        if not os.path.exists(key_file):
            key = py_vapid.Vapid02()
            key.generate_keys()
            with open(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600),
                      "wb") as out:
                out.write(key.private_pem())
        self.key_file, self.contact = key_file, contact
        self.signed = {}  # push service origin -> (Authorization header, its expiry)

    @functools.cached_property
    def key(self):
        return py_vapid.Vapid02.from_file(self.key_file)

    @functools.cached_property
    def public_key(self) -> str:
        return b64url(self.key.public_key.public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint))

    @functools.cached_property
    def session(self):
        return requests.Session()  # a TLS handshake per service, not per message

    def start(self) -> None:
        super().start()
        if find_row("push_subscriptions") is not None:
            self.prepare()

    def stop(self) -> None:
        super().stop()
        if "session" in self.__dict__:
            self.session.close()

    def prepare(self) -> None:
        """Import pywebpush now, so that the first message goes out at once."""
        gevent.spawn(self.library)

    @functools.cache  # noqa: B019 -- one sender per process
    def library(self):
        import pywebpush
        return pywebpush

    def post(self, device: dict, payload: bytes, headers: dict, ttl: int) \
            -> tuple[int | None, str | None, float | None]:
        """Encrypt the payload for the device (RFC 8291) and POST it to its push service:
        _post()'s answer."""
        pusher = self.library().WebPusher({"endpoint": device["endpoint"], "keys": {
            "p256dh": device["p256dh"], "auth": device["auth"]}})
        return _post(device["endpoint"], pusher.encode(payload)["body"], {
            **headers, "TTL": str(ttl), "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
            "Authorization": self.authorization(device["endpoint"])}, self.session)

    def authorization(self, endpoint: str) -> str:
        """The VAPID header for a push service, signed once and kept for hours."""
        parts = urllib.parse.urlsplit(endpoint)
        origin = f"{parts.scheme}://{parts.netloc}"
        header, expires = self.signed.get(origin, (None, 0))
        if expires - time.time() < 3600:
            expires = int(time.time()) + 12 * 3600
            header = self.key.sign({"aud": origin, "exp": expires,
                                    "sub": self.contact})["Authorization"]
            self.signed[origin] = header, expires
        return header


#: How an answered request's notification reads on the other devices.
ANSWERED_BY = {"person": "on the board", "push": "from a notification",
               "timeout": "after approvalTimeoutMinutes", "rule": "by a rule", None: ""}


def deliver_push(device: dict, moment: dict, attempts: int = 3) \
        -> tuple[int | None, str | None]:
    """Send a device one message, retrying 5xx, 429 and connection errors with backoff;
    a push service answering 404 or 410 no longer knows the device: it is removed."""
    message = push_message(moment)
    payload = json_dumps(message).encode()
    waits = moment["kind"] in ("approval", "question", "answered")
    headers = {"Urgency": "high" if waits else "normal"}
    if "approvalId" in moment:  # the push service keeps only the newest of a topic
        headers["Topic"] = f"approval-{moment['approvalId']}"
    ttl = ACTION_TOKEN_MINUTES * 60 if waits else PUSH_TTL_SECONDS
    try:  # a device stored before its endpoint was checked (_check_push_endpoint)
        runtime.push.authorization(device["endpoint"])
    except (py_vapid.VapidException, ValueError) as exc:
        error = f"the board cannot sign for this push service: {exc}"
        log.warning("push to device %s: %s", device["id"], error)
        record_push_row(device["id"], None, error)
        return None, error
    status, error = None, None
    tries = Deliveries(attempts)
    for _ in tries:
        started = time.monotonic()
        status, error, tries.wait = runtime.push.post(device, payload, headers, ttl)
        log.info("push %s to device %s (%s): %s, %d ms", message["kind"], device["id"],
                 device["name"] or "unnamed", error or status,
                 (time.monotonic() - started) * 1000)
        if status in (404, 410):
            delete_push_row(device["id"])
            log.info("push device %s removed: its push service no longer knows it", device["id"])
            return status, error
        record_push_row(device["id"], status, error)
        if not retryable(status, error):
            break
    return status, error


def push_message(moment: dict) -> dict:
    """What a device shows for a moment: the least needed (project, task, tool and a short
    summary), never a secret; a tool approval carries its single-use action token."""
    kind = moment["kind"]
    task = f"{moment.get('taskKey') or ''} {moment.get('taskTitle') or ''}".strip()
    where = " · ".join(filter(None, [task, moment.get("projectName")]))
    message = {"kind": kind, "tag": f"task-{moment.get('taskId')}",
               "url": f"/#/tasks/{moment['taskId']}" if "taskId" in moment else "/"}
    if "approvalId" in moment:
        message.update(tag=f"approval-{moment['approvalId']}",
                       approvalId=moment["approvalId"],
                       url=f"{message['url']}?approval={moment['approvalId']}")
    if kind == "approval":
        token = secrets.token_urlsafe(32)
        insert_action_row(_digest(token), moment["approvalId"], ACTION_TOKEN_MINUTES)
        message["token"] = token
        title, body = f"Allow {moment['tool']}?", f"{moment['summary']}\n{where}"
    elif kind == "question":
        title, body = f"Question from {moment.get('taskKey')}", f"{moment['summary']}\n{where}"
    elif kind == "answered":
        title = f"{moment['status'].capitalize()}: {moment['tool']}"
        body = f"{moment['status'].capitalize()} {ANSWERED_BY.get(moment['decidedBy'], '')}"
    elif kind == "testing":
        title, body = f"Ready for review: {moment['taskKey']}", where
    elif kind == "failed":
        title, body = f"Failed: {moment['taskKey']}", \
            "\n".join(filter(None, [where, moment.get("error")]))
    elif kind == "plan":
        message.update(tag=f"plan-{moment['planId']}",
                       url=f"/#/projects/{moment['projectId']}/plan")
        title = "Plan ready"
        body = f"{moment['tasks']} tasks for “{moment['topic']}” · {moment['projectName']}"
    elif kind == "budget":
        message.update(tag=f"budget-{moment['day']}", url="/#/usage")
        title = "Daily cost limit reached"
        body = f"Today's agent cost is ${moment['cost']:.2f} of ${moment['limit']:.2f}: " \
               "the queue starts nothing new today."
    else:
        message.update(tag="test", url="/#/settings")
        title, body = "Taskboard", "Notifications work on this device."
    message.update(title=_cut(title, 120), body=_cut(body.strip(), 400), needsYou=inbox_count())
    return message


def _post(url: str, body: bytes, headers: dict, session=None) \
        -> tuple[int | None, str | None, float | None]:
    """One POST of a webhook or push message: (status, None, None) on 2xx, else (status or
    None, why, the wait it asked for before the next attempt: wait_asked()).  With a
    session (a push service's kept-alive connections) the short answer is read whole, so
    that its connection serves the next message; a webhook's is never read."""
    response = http_call("POST", url, WEBHOOK_TIMEOUT_SECONDS, session, whole=session is not None,
                         data=body, headers=headers, allow_redirects=False)
    if isinstance(response, str):
        return None, response, None
    if 200 <= response.status_code < 300:
        return response.status_code, None, None
    return response.status_code, f"the target answered {response.status_code} " \
        f"{response.reason or ''}".rstrip(), wait_asked(response)


def _slack(text: str, limit: int) -> str:
    """Text for a Slack mrkdwn field: &, < and > escaped, cut to the block's limit."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text if len(text) <= limit else text[:limit - 1] + "…"


# =============================================================================
# SERVICES: PLANNING, RESOURCES AND SETTINGS
# =============================================================================
# Planning, attachments, templates, snippets, webhooks as resources, statistics,
# settings, the demo and login sessions.

# --- planning --------------------------------------------------------------------
# A read-only agent run whose final JSON block becomes backlog tasks and on_success edges
# (design §9); one per project, in runtime.plans and in the plans table.

#: Tools the planner may use without asking: reading and shell commands that cannot write,
#: chosen as VERIFIER_TOOLS are (tests/test_verifier.py tries to write through each rule).
PLANNER_TOOLS = (
    "Read", "Bash(ls:*)", "Bash(cat:*)", "Bash(head:*)", "Bash(tail:*)", "Bash(wc:*)",
    "Bash(grep:*)", "Bash(git ls-files:*)", "Bash(git status:*)",
    "Bash(git log --oneline -n 30)", "Bash(git show --stat HEAD)")


def start_plan(project_id: int, body) -> dict:
    """Start a planning session; it goes on in the background (plan:* events)."""
    values = validate_known(lambda: get_project(project_id), PLAN_FIELDS, body)
    project = found(project_row(project_id), f"project {project_id} not found")
    _no_plan_yet(project)
    stamp = max(int(time.time() * 1000), runtime.last_plan_ms + 1)
    runtime.last_plan_ms = stamp
    plan_id = f"plan-{project_id}-{stamp}"
    machine = project_machine(project)
    try:  # on a host: its connection, its clone fetched, the run's settings sent there
        agent, command, sandboxed = run_agent(project, values.get("agent"), machine)
        prompt = planner_prompt(project, values)
        run = prepare_run(machine, project, agent, command, "planner", machine.source(project),
                          values["model"], values["effort"], prompt, [
                              "--tools", "Read,Bash", "--allowedTools", *PLANNER_TOOLS],
                          mode="read-only", plan=(plan_id, values), sandboxed=sandboxed)
    except CannotRun as exc:
        raise Conflict(f"the planner cannot run: {exc}" + (
            "; plan then, or with another agent" if exc.until else "")) from None
    except (HostDown, OSError, GitError) as exc:
        raise Conflict(f"the planner cannot run: {exc}") from None
    _no_plan_yet(project)  # again: a second start may have come during the yields above
    runtime.plans[project_id] = run  # before any yield: a second start must see it
    try:
        insert_plan_row({"plan_id": plan_id, "project_id": project_id, "status": "running",
                         "topic": values["topic"], "context": values["context"],
                         "agent": agent, "model": values["model"], "effort": values["effort"],
                         "granularity": values["granularity"], "started_at": now_iso(),
                         "simulated": run.parser.simulated})
    except BaseException:
        runtime.plans.pop(project_id, None)
        raise
    _publish_plan(run, "plan:started", topic=values["topic"], model=values["model"],
                  effort=values["effort"])
    try:
        run.start()
    except OSError as exc:
        why = f"the planner could not start {run.argv[0]!r} in {run.cwd}" \
              f"{machine.where}: {exc.strerror or exc}"
        _end_plan(run, "failed", error=why)
        run.finished.set()
    return {"planId": plan_id, "status": "started"}


def _no_plan_yet(project: dict) -> None:
    active = runtime.plans.get(project["id"])
    if active is not None:
        raise Conflict(f"project {project['slug']!r} already has a planning session "
                       f"({active.plan_id}); cancel it or wait for it to finish")


def cancel_plan(project_id: int) -> dict:
    """Kill the session's agent (its whole process group); nothing is created."""
    run = runtime.plans.get(project_id)
    if run is None:
        get_project(project_id)
        raise NotFound(f"project {project_id} has no active planning session")
    run.kill("cancelled")
    run.finished.wait(KILL_GRACE_SECONDS + 5)
    _publish_plan(run, "plan:cancelled")
    return {"status": "cancelled"}


def plan_status(project_id: int) -> dict:
    if run := runtime.plans.get(project_id):
        return {"active": True, "planId": run.plan_id, **run.stats(), "phase": run.phase,
                "topic": run.values["topic"], "model": run.values["model"],
                "effort": run.values["effort"], "granularity": run.values["granularity"]}
    get_project(project_id)
    row = find_row("plans", project_id=project_id, status={"!=": "running"}, order_by="-id")
    last = None if row is None else {
        "planId": row["plan_id"], "status": row["status"], "topic": row["topic"],
        "tasks": json.loads(row["tasks_json"] or "[]"), "error": row["error"],
        "warnings": json.loads(row["warnings_json"] or "[]"),
        "finishedAt": row["finished_at"]}
    return {"active": False, "planId": None, "last": last}


def record_plan_process(run: "PlanRun") -> None:
    """The planner is spawned: remember its process (for a restarted server) and say so."""
    update_plan_row(run.plan_id, {"pid": run.proc.pid, "proc_start": process_start(run.proc.pid)})
    _plan_phase(run, "starting", "the planner started")


def plan_output(run: "PlanRun", entries: list[dict], line_type: str) -> None:
    """Announce what the planner just printed as plan:* events (design §9 phases)."""
    for entry in entries:
        kind = entry["kind"]
        if kind == "tool_call":
            if run.phase == "starting":
                _plan_phase(run, "exploring", "exploring the code")
            _publish_plan(run, "plan:log", type="tool", message=entry["message"],
                          tool=entry.get("tool"))
        elif kind == "tool_result":
            _publish_plan(run, "plan:log", type="error" if entry.get("is_error") else "result",
                          message=_cut(entry["message"], 2000))
        elif kind == "text":
            if run.phase == "exploring":
                _plan_phase(run, "writing", "writing the plan")
            _publish_plan(run, "plan:progress", type="text", content=entry["message"])
        elif entry.get("is_error") or kind == "stderr":
            _publish_plan(run, "plan:log", type="error", message=_cut(entry["message"], 2000))
    if line_type in ("user", "result"):  # a turn ended: its tool results came back
        _publish_plan(run, "plan:stats", **run.stats())


def finish_plan(run: "PlanRun") -> None:
    """The planner exited: validate its plan and write it, or say why there is none."""
    if runtime.plans.get(run.project_id) is run:
        del runtime.plans[run.project_id]
    if run.stop_reason in ("cancelled", "interrupted"):
        error = "cancelled" if run.stop_reason == "cancelled" else \
            "the server stopped during planning"
        _end_plan(run, run.stop_reason, error=error, publish=False)
        return
    try:
        _write_plan(run)
    except Exception as exc:  # e.g. a full disk: the session must still end, and say why
        log.exception("plan %s: writing the plan failed", run.plan_id)
        with contextlib.suppress(Exception):
            _end_plan(run, "failed", error=f"the plan could not be written: {exc}")


def _write_plan(run: "PlanRun") -> None:
    outcome, reason = judge_run(run.parser, run.exit_code, run.stop_reason)
    until = limit_resets(run.parser) if outcome == "wait" else None
    if until is not None:
        set_agent_limit(run.agent, until, reason)
        reason = f"{reason} (it lifts at {iso_at(until)})"
    if outcome != "ok":
        _end_plan(run, "failed", error=f"the planner failed: {reason}")
        return
    texts = list(run.parser.texts)  # the latest text blocks, then the final answer
    final = (run.parser.result or {}).get("result")
    if isinstance(final, str) and final and (not texts or texts[-1] != final):
        texts.append(final)
    try:
        tasks, edges, warnings = parse_plan("\n".join(texts))
    except Invalid as exc:
        _end_plan(run, "failed", error=exc.message)
        return
    tag = json_dumps([f"plan:{slugify(run.values['topic'], 40)}"])
    changes, stats = _plan_end_changes(run, "completed", None, warnings)
    notice = Notice("task:created", plan=run.plan_id)
    written = insert_plan_tasks(
        run.plan_id, run.project_id, [{**t, "tags": tag} for t in tasks], edges,
        task_defaults(), changes, notice)
    if written is None:
        return  # the project was deleted meanwhile
    rows, auto_queue = written
    created = [plan_task_view(r) for r in rows]
    for row in rows:
        runtime.events.publish("task:created", task_view(row), run.project_id)
    announce(notice)
    if edges:
        runtime.events.publish("dependencies:updated", {"projectId": run.project_id},
                            run.project_id)
    if auto_queue:
        schedule_queue(run.project_id)
    _publish_plan(run, "plan:completed", tasks=created, stats=stats,
                  error=None, warnings=warnings)
    push("plan", {"projectId": run.project_id, "planId": run.plan_id,
                  "topic": _cut(run.values["topic"], 100), "tasks": len(created)})


def stop_plans() -> None:
    """Server stop: end every planning session (recorded as interrupted)."""
    end_runs(list(runtime.plans.values()), "interrupted")


def interrupt_stale_plans() -> None:
    """Start-up: a session the last server left running is over; kill what survived."""
    for row in running_rows("plans"):
        if row["pid"]:
            kill_survivor(row["pid"], row["proc_start"])
        update_plan_row(row["plan_id"], {"status": "interrupted", "finished_at": now_iso(),
                                         "error": "the server stopped during planning"})


def parse_plan(text: str) -> tuple[list[dict], list[tuple[int, int]], list[str]]:
    """The planner's last fenced JSON block as (task values, edges, warnings); Invalid
    when there is no usable plan.  Bad or cyclic edges and corrected fields are warned about."""
    plan = last_json_block(text, "the planner's")
    if not isinstance(plan, dict) or not isinstance(plan.get("tasks"), list):
        raise Invalid('the planner\'s JSON block has no "tasks" array')
    raw_tasks, warnings = plan["tasks"], []
    if not raw_tasks:
        raise Invalid("the planner's plan has no tasks")
    if len(raw_tasks) > MAX_PLAN_TASKS:
        warnings.append(f"the plan has {len(raw_tasks)} tasks; only the first "
                        f"{MAX_PLAN_TASKS} were kept")
        raw_tasks = raw_tasks[:MAX_PLAN_TASKS]
    tasks = [_plan_task(i, raw, warnings) for i, raw in enumerate(raw_tasks)]
    edges, children = [], collections.defaultdict(set)
    raw_edges = plan.get("dependencies") or []
    if not isinstance(raw_edges, list):
        warnings.append('"dependencies" is not an array; ignored')
        raw_edges = []
    for edge in raw_edges:
        shown = json_dumps(edge)[:60]
        if not (isinstance(edge, list) and len(edge) == 2 and all(
                isinstance(i, int) and not isinstance(i, bool) for i in edge)):
            warnings.append(f"dependency {shown} is not a pair of task indexes; dropped")
            continue
        parent, child = edge
        if not (0 <= parent < len(tasks) and 0 <= child < len(tasks)):
            warnings.append(f"dependency {shown} names a task that is not in the plan; dropped")
        elif parent == child:
            warnings.append(f"dependency {shown} makes a task depend on itself; dropped")
        elif child in children[parent]:
            continue  # the same edge twice
        elif reaches(children, child, parent):
            warnings.append(f"dependency {shown} would make a cycle; dropped")
        else:
            children[parent].add(child)
            edges.append((parent, child))
    return tasks, edges, warnings


def last_json_block(text: str, whose: str):
    """The value of the last ``` fenced block (json or unmarked) of text; Invalid saying
    what is wrong with `whose` answer."""
    blocks = re.findall(r"```(?:json)?[ \t]*\n(.*?)```", text, re.DOTALL | re.IGNORECASE)
    if not blocks:
        raise Invalid(f"{whose} answer has no fenced JSON block")
    try:
        return json.loads(blocks[-1])
    except ValueError as exc:
        raise Invalid(f"{whose} JSON block is not valid JSON ({exc})") from None


def planner_prompt(project: dict, values: dict) -> str:
    granularity = values["granularity"]
    return "\n\n".join([
        f"You are planning work on the project {project['name']!r} in "
        f"{project['working_dir']}. Do not change anything: read the code (the Read tool, "
        "and read-only shell commands such as ls, grep, git ls-files, `git log --oneline "
        "-n 30` and `git show --stat HEAD`) to understand it, then split the topic below "
        "into tasks that an AI coding agent can each finish in one session.",
        "## Topic\n" + values["topic"].strip(),
        "## Context\n" + (values["context"].strip() or "(none given)"),
        f"## Granularity: {granularity}\nAim for {GRANULARITIES[granularity]} tasks. " + {
            "high-level": "Each task is a milestone that delivers something usable.",
            "balanced": "Each task is one coherent change of a few files.",
            "detailed": "Each task is one small, focused change."}[granularity],
        "Each task has a short imperative title, a description of what to change and "
        "where, a task_type (one of: " + ", ".join(TASK_TYPES) + "), a priority (0 low, "
        "1 medium, 2 high, 3 urgent) and acceptance criteria a reviewer can check. "
        "Dependencies are pairs [parentIndex, childIndex] of 0-based positions in the task "
        "list: the child starts only after the parent is done. Add them only where the "
        "order matters, and never in a cycle.",
        "End your answer with exactly one fenced JSON block:\n```json\n"
        '{"tasks": [{"title": "...", "description": "...", "task_type": "feature", '
        '"priority": 1, "acceptance_criteria": "..."}], "dependencies": [[0, 1]]}\n```'])


def _plan_task(index: int, raw, warnings: list[str]) -> dict:
    """One planned task as task column values; Invalid when it has no title."""
    if not isinstance(raw, dict) or not isinstance(raw.get("title"), str) \
            or not raw["title"].strip():
        raise Invalid(f"task {index} of the plan has no title")
    title = " ".join(raw["title"].split())
    if len(title) > 500:
        warnings.append(f"the title of task {index} was cut to 500 characters")
        title = title[:500]
    values = {"title": title}
    for name, limit in (("description", 200_000), ("acceptance_criteria", 100_000)):
        value = raw.get(name)
        if isinstance(value, list):  # a list of criteria, one per line
            value = "\n".join(f"- {item}" for item in value)
        elif value is not None and not isinstance(value, str):
            warnings.append(f"the {name} of task {index} is not text; kept as JSON")
            value = json_dumps(value)
        values[name] = (value or "").strip()[:limit]
    task_type = raw.get("task_type", "feature")
    if task_type not in TASK_TYPES:
        warnings.append(f"task {index} has task_type {json_dumps(task_type)[:40]}; "
                        "made it feature")
        task_type = "feature"
    values["task_type"] = task_type
    priority = raw.get("priority", 1)
    if isinstance(priority, str) and priority.lower() in PRIORITY_NAMES:
        priority = PRIORITY_NAMES.index(priority.lower())
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 3:
        warnings.append(f"task {index} has priority {json_dumps(priority)[:40]}; made it 1")
        priority = 1
    values["priority"] = priority
    return values


def _plan_phase(run: "PlanRun", phase: str, message: str) -> None:
    run.phase = phase
    _publish_plan(run, "plan:phase", phase=phase)
    _publish_plan(run, "plan:log", type="phase", message=message)


def _publish_plan(run: "PlanRun", event: str, **data) -> None:
    runtime.events.publish(event, {"projectId": run.project_id, "planId": run.plan_id,
                                **{k: v for k, v in data.items()
                                   if v is not None or k == "error"}}, run.project_id)


def _plan_end_changes(run: "PlanRun", status: str, error: str | None,
                      warnings: list[str]) -> tuple[dict, dict]:
    """The plans row's columns of a finished session, and its stats."""
    stats = {**run.stats(), "exitCode": run.exit_code}
    return {"status": status, "error": error, "warnings_json": json_dumps(warnings),
            "stats_json": json_dumps(stats), "cost": run.cost(),
            "cost_estimated": int(run.parser.cost_estimated), "finished_at": now_iso(),
            "tasks_json": "[]"}, stats


def _end_plan(run: "PlanRun", status: str, *, error: str, publish: bool = True) -> None:
    """Finish a session that created nothing."""
    changes, stats = _plan_end_changes(run, status, error, [])
    update_plan_row(run.plan_id, changes)
    if runtime.plans.get(run.project_id) is run:
        del runtime.plans[run.project_id]
    if publish:
        _publish_plan(run, "plan:completed", tasks=[], stats=stats, error=error, warnings=[])


# --- attachments -------------------------------------------------------------
# The stored type comes from the bytes, never from the uploader (design §11): a page
# elsewhere must not be able to load an attachment as a script, a page or an SVG.

#: The inert types, served inline with this Content-Type; every other type is a download.
INERT_MIME_TYPES = {"image/png": "image/png", "image/jpeg": "image/jpeg",
                    "image/gif": "image/gif", "image/webp": "image/webp",
                    "application/pdf": "application/pdf",
                    "text/plain": "text/plain; charset=utf-8"}
#: Leading bytes of the inert binary types (WebP is checked apart: RIFF, a size, WEBP).
MAGIC_NUMBERS = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
                 (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"),
                 (b"%PDF-", "application/pdf"))
#: Markup a browser would render as a page (scripts included) if it ever sniffed the text.
MARKUP_TYPES = {"text/html", "application/xhtml+xml", "image/svg+xml", "text/xml",
                "application/xml"}


class ContentSniffer:
    """An upload's type, decided from its bytes as they are written, chunk by chunk.

    Magic numbers for the inert binary types; text/plain when every byte is UTF-8 and none
    is NUL; else application/octet-stream.  Text that looks like markup (it starts with
    `<`, or its name or claimed type says HTML/SVG/XML) is stored as
    application/octet-stream, not text/plain: the API's mimeType then never calls a page
    "plain text" for a client that would show it, and serving stays one table lookup.
    """

    def __init__(self):
        self.head = b""
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.is_text = True
        self.first_char = ""  # the text's first character after blanks and a BOM

    def feed(self, chunk: bytes) -> None:
        if len(self.head) < 12:
            self.head += chunk[:12 - len(self.head)]
        if not self.is_text:
            return
        try:
            text = self.decoder.decode(chunk)
        except UnicodeDecodeError:
            self.is_text = False
            return
        if "\0" in text:
            self.is_text = False
        elif not self.first_char:
            self.first_char = text.lstrip(" \t\r\n\f\ufeff")[:1]

    def mime_type(self, markup_hint: bool) -> str:
        for magic, mime in MAGIC_NUMBERS:
            if self.head.startswith(magic):
                return mime
        if self.head[:4] == b"RIFF" and self.head[8:12] == b"WEBP":
            return "image/webp"
        try:
            self.decoder.decode(b"", final=True)  # a sequence cut at the end is not text
        except UnicodeDecodeError:
            self.is_text = False
        if self.is_text and self.first_char != "<" and not markup_hint:
            return "text/plain"
        return "application/octet-stream"


def add_attachment(task_id: int, file_name: str, stream, claimed_type: str | None) -> dict:
    """Store an uploaded file in the data dir (never in the repository) and record it.

    `claimed_type` (the uploader's Content-Type) can only make the stored type stricter.
    """
    get_task(task_id)
    name = safe_file_name(file_name)
    folder = os.path.join(runtime.data_dir, "attachments", str(task_id))
    os.makedirs(folder, exist_ok=True)
    stem, ext = os.path.splitext(name)
    path = os.path.join(folder, name)
    for n in itertools.count(2):
        if not os.path.exists(path):
            break
        path = os.path.join(folder, f"{stem}-{n}{ext}")
    size = 0
    sniffer = ContentSniffer()
    try:
        with open(path, "xb") as out:
            while chunk := stream.read(64 * 1024):
                size += len(chunk)
                if size > MAX_UPLOAD_BYTES:
                    raise PayloadTooLarge(f"attachment {name!r} is larger than 20 mib")
                sniffer.feed(chunk)
                out.write(chunk)
        claimed = (claimed_type or "").split(";")[0].strip().lower()
        mime = sniffer.mime_type(claimed in MARKUP_TYPES
                                 or mimetypes.guess_type(name)[0] in MARKUP_TYPES)
        row = found(insert_attachment_row({
            "task_id": task_id, "file_name": os.path.basename(path), "mime_type": mime,
            "size": size, "path": os.path.relpath(path, runtime.data_dir)}),
            f"task {task_id} not found")
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(path)
        raise
    _publish_task(task_row(task_id))
    return render(ATTACHMENT_FIELDS, row)


def get_attachment(attachment_id: int) -> tuple[dict, str]:
    """The attachment and its absolute path; raises NotFound."""
    row = found(find_row("attachments", id=attachment_id),
                f"attachment {attachment_id} not found")
    return render(ATTACHMENT_FIELDS, row), os.path.join(runtime.data_dir, row["path"])


def delete_attachment(attachment_id: int) -> dict:
    row = found(delete_attachment_row(attachment_id), f"attachment {attachment_id} not found")
    _remove_files([row["path"]])
    _publish_task(task_row(row["task_id"]))
    return {"ok": True}


# --- templates, snippets, webhooks -------------------------------------------
# Three per-project resources with the same life cycle; each differs only in its fields.

Resource = collections.namedtuple("Resource", "table fields noun")
TEMPLATES = Resource("templates", TEMPLATE_FIELDS, "template")
SNIPPETS = Resource("snippets", SNIPPET_FIELDS, "snippet")
WEBHOOKS = Resource("webhooks", WEBHOOK_FIELDS, "webhook")


def resource_view(kind: Resource, row: dict) -> dict:
    if kind is WEBHOOKS:
        row = dict(row, has_secret=int(bool(row["secret"])))
    return render(kind.fields, row)


def list_resources(kind: Resource, project_id: int) -> list[dict]:
    rows = owned_rows(kind.table, "projects", project_id=project_id)
    return [resource_view(kind, r) for r in found(rows, f"project {project_id} not found")]


def get_resource(kind: Resource, project_id: int, row_id: int) -> dict:
    return resource_view(kind, found(find_row(kind.table, id=row_id, project_id=project_id),
                                     f"{kind.noun} {row_id} not found in project {project_id}"))


def create_resource(kind: Resource, project_id: int, body) -> dict:
    values = validate_known(lambda: get_project(project_id), kind.fields, body)
    row = found(insert_resource_row(kind.table, project_id, values),
                f"project {project_id} not found")
    item = resource_view(kind, row)
    runtime.events.publish(f"{kind.noun}:created", item, project_id)
    return item


def update_resource(kind: Resource, project_id: int, row_id: int, body) -> dict:
    changes = validate_known(lambda: get_resource(kind, project_id, row_id), kind.fields, body,
                             partial=True)
    row = found(update_resource_row(kind.table, project_id, row_id, changes),
                f"{kind.noun} {row_id} not found in project {project_id}")
    item = resource_view(kind, row)
    runtime.events.publish(f"{kind.noun}:updated", item, project_id)
    return item


def delete_resource(kind: Resource, project_id: int, row_id: int) -> dict:
    if not delete_resource_row(kind.table, project_id, row_id):
        raise NotFound(f"{kind.noun} {row_id} not found in project {project_id}")
    runtime.events.publish(f"{kind.noun}:deleted", {"id": row_id, "projectId": project_id},
                        project_id)
    return {"ok": True}


def delivery_view(row: dict) -> dict:
    return {"id": row["id"], "event": row["event"], "attempt": row["attempt"],
            "status": row["status"], "ok": bool(row["ok"]), "error": row["error"],
            "durationMs": row["duration_ms"], "createdAt": row["created_at"]}


def webhook_deliveries(project_id: int, webhook_id: int) -> list[dict]:
    get_resource(WEBHOOKS, project_id, webhook_id)
    return [delivery_view(r) for r in find_rows("webhook_deliveries", "-id",
                                                webhook_id=webhook_id, _limit=50)]


def record_delivery(hook: dict, event: str, attempt: int, status: int | None, ok: bool,
                    error: str | None, duration_ms: int) -> None:
    """Keep one delivery attempt (the newest WEBHOOK_DELIVERIES_KEPT per webhook).  Its
    event never triggers a delivery itself: the sender reads only the outbox."""
    row = insert_delivery_row({
        "webhook_id": hook["id"], "event": event, "attempt": attempt, "status": status,
        "ok": int(ok), "error": error, "duration_ms": duration_ms, "created_at": now_iso()},
        WEBHOOK_DELIVERIES_KEPT)
    if row is not None:
        runtime.events.publish("webhook:delivery", {"webhookId": hook["id"],
                                                 "projectId": hook["project_id"],
                                                 **delivery_view(row)}, hook["project_id"])


def test_webhook(project_id: int, webhook_id: int) -> dict:
    """Send one sample payload now, in the webhook's format; answer the target's status."""
    hook, project, task = found(webhook_test_rows(project_id, webhook_id),
                                f"webhook {webhook_id} not found in project {project_id}")
    sample = task_view(task) if task else {
        "id": 0, "project_id": project_id, "task_key": f"{project['slug'].upper()}-0",
        "title": "Example task", "description": "A sample task sent by the webhook test.",
        "status": "testing", "task_type": "feature", "priority": 1}
    notice = {"event": "webhook:test", "at": now_iso(), "task": sample, "data": {"test": True}}
    status, error, _ = deliver(hook, project, notice, attempts=1)
    return {"ok": error is None, "status": status,
            **({"error": error} if error is not None else {})}


# --- statistics ----------------------------------------------------------------

def project_stats(project_id: int) -> dict:
    rows = found(project_stats_rows(project_id, local_day_start_iso()),
                 f"project {project_id} not found")
    return {
        "statusCounts": {s: rows["status"].get(s, 0) for s in STATUSES},
        "typeCounts": {t: rows["type"].get(t, 0) for t in TASK_TYPES},
        "priorityCounts": {str(p): rows["priority"].get(p, 0) for p in range(4)},
        "totalTasks": sum(rows["status"].values()),
        "avgDuration": int(rows["avg"] or 0),
        "completedToday": rows["today"] or 0,
        "agentRuns": rows["usage"]["runs"],
        "inputTokens": rows["usage"]["input"] or 0,
        "outputTokens": rows["usage"]["output"] or 0,
        "totalCost": round(rows["usage"]["cost"] or 0.0, 6),
        **worktree_disk(project_id),
    }


def project_activity(project_id: int, limit: int, offset: int) -> list[dict]:
    rows = found(activity_rows(project_id, limit, offset), f"project {project_id} not found")
    return [{"id": r["id"], "taskId": r["task_id"], "taskTitle": r["task_title"],
             "event": r["event"], "from": r["from_status"], "to": r["to_status"],
             "timestamp": r["created_at"]} for r in rows]


def agent_activity(project_id: int | None) -> dict:
    """Live agents: usage, tool calls, files they touch, and files two agents touch."""
    agents, file_map = [], collections.defaultdict(list)
    for run in sorted(runtime.agents.runs.values(), key=lambda r: (r.task_id, r.run_id)):
        task_id = run.task_id
        if project_id is not None and run.project_id != project_id:
            continue
        for path in sorted(run.parser.files):
            file_map[path].append(task_id)
        task = task_row(task_id)
        if task is None:
            continue
        agents.append({
            "taskId": task_id, "taskKey": task["task_key"], "title": task["title"],
            "model": task["model"], "elapsedSec": int(time.monotonic() - run.started),
            "inputTokens": run.parser.usage["input"], "outputTokens": run.parser.usage["output"],
            "totalCost": round(run.cost(), 6), "toolCallCount": run.parser.tool_calls,
            "recentTools": list(run.parser.recent_tools),
            "activeFiles": sorted(run.parser.files), "isRunning": True,
            "awaitingSubtasks": bool(task["awaiting_subtasks"])})
    return {"agents": agents, "fileMap": dict(file_map),
            "conflicts": [{"filePath": path, "taskIds": ids}
                          for path, ids in sorted(file_map.items()) if len(ids) > 1]}


def agent_usage() -> dict:
    """Tokens and estimated cost of every agent run (tasks, planner, verifier)."""
    rows = usage_rows(local_day_start_iso())
    total = rows["total"]
    def group(names, key, **extra):
        sums = {n: {"tasks": 0, "inputTokens": 0, "outputTokens": 0, "cost": 0.0,
                    **{k: False for k in extra}} for n in names}
        for r in rows[key]:
            sums[r[key[:-1]]] = {"tasks": r["tasks"], "inputTokens": r["input"] or 0,
                                 "outputTokens": r["output"] or 0,
                                 "cost": round(r["cost"] or 0.0, 6),
                                 **{k: bool(r[column]) for k, column in extra.items()}}
        return sums
    return {
        "usage": {"totalInputTokens": total["input"] or 0,
                  "totalOutputTokens": total["output"] or 0,
                  "totalCacheRead": total["cache_read"] or 0,
                  "totalCacheCreation": total["cache_creation"] or 0,
                  "totalCost": round(total["cost"] or 0.0, 6),
                  "costEstimated": bool(total["estimated"]),
                  # a task counts once here, and in each tier and agent it ran with there
                  "totalTasks": total["tasks"]},
        "models": group(MODELS, "models"),
        "agents": group(AGENTS, "agents", costEstimated="estimated"),
        "timeline": [{"date": r["day"], "inputTokens": r["input"] or 0,
                      "outputTokens": r["output"] or 0, "cost": round(r["cost"] or 0.0, 6),
                      "costEstimated": bool(r["estimated"])}
                     for r in rows["days"]],
        "limits": {"dailyLimit": get_settings()["dailyCostLimit"],
                   "currentUsage": round(rows["today"] or 0.0, 6)},
    }


# --- settings --------------------------------------------------------------------

def get_settings() -> dict:
    """The settings object: stored values over the defaults of SETTINGS_FIELDS."""
    stored = {**runtime.settings,
              "hasGitHostWebhookSecret": bool(runtime.settings.get("gitHostWebhookSecret")),
              "hasGitHostToken": bool(runtime.config.get("git_host_token"))}
    return render(SETTINGS_FIELDS, {f.column: stored.get(f.name, f.default)
                                    for f in SETTINGS_FIELDS})


def update_settings(body) -> dict:
    runtime.settings = upsert_settings_rows(validate(SETTINGS_FIELDS, body, partial=True))
    settings = get_settings()
    runtime.events.publish("settings:updated", settings)
    for project in find_rows("projects"):  # a raised daily cost limit may let queues go on
        schedule_queue(project["id"])
    return settings


# --- demo --------------------------------------------------------------------------

#: Tasks of the Demo project that --demo creates once: in `default` mode each asks before
#: its edit, and the one whose description says "ask me" asks a question first.
DEMO_TASKS = (
    {"title": "Add a greeting function", "priority": 2, "task_type": "feature",
     "description": "Add greet(name) to app.py returning 'Hello, <name>!'.",
     "acceptance_criteria": "greet('Ada') returns 'Hello, Ada!'"},
    {"title": "Document the app in the README", "priority": 1, "task_type": "docs",
     "description": "Explain what app.py does and how to run it; ask me how it should read."},
    {"title": "Fix the off-by-one in count_to", "priority": 3, "task_type": "bugfix",
     "description": "count_to(3) should return [1, 2, 3]."},
)


def simulated_dir() -> str | None:
    """Under --demo, the Demo project's scratch repository (its workingDir): that
    project's runs use the simulated agent; None without --demo."""
    return os.path.join(runtime.data_dir, "demo-repo") if runtime.config["demo"] else None


def runs_simulated(project: dict) -> bool:
    """Whether a project's runs use the simulated agent: the Demo project under --demo."""
    return project["host_id"] is None and project["working_dir"] == simulated_dir()


def create_demo_project() -> dict | None:
    """Once per data dir: a Demo project on a scratch git repository with a few tasks.

    The repository lives in the data dir, so no real checkout is ever touched.
    """
    if runtime.settings.get("_demoCreated"):
        return None
    repo = simulated_dir()
    os.makedirs(repo, exist_ok=True)
    for name, text in (("app.py", "def count_to(n):\n    return list(range(1, n))\n"),
                       ("README.md", "# Demo app\n"),
                       (DEMO_MARKER, "A scratch repository made by taskboard --demo; its "
                                     "simulated agent may edit and commit here.\n")):
        with open(os.path.join(repo, name), "w", encoding="utf-8") as f:
            f.write(text)
    git = ["git", "-c", "user.name=Taskboard Demo", "-c", "user.email=demo@taskboard.invalid"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["commit", "-q", "-m", "Initial demo app"]):
        code, out = run_command([*git, *args], repo, stderr=subprocess.STDOUT)
        if code != 0:
            log.warning("demo: git %s failed in the scratch repository: %s", args[0], out)
            break
    taken = {p["slug"] for p in find_rows("projects")}
    slug = next(s for s in itertools.chain(["demo"], (f"demo-{n}" for n in
                                                      itertools.count(2))) if s not in taken)
    project = create_project({"name": "Demo", "slug": slug, "workingDir": repo,
                              "permissionMode": "default"})  # its agent asks (design §12)
    for task in DEMO_TASKS:
        create_task(project["id"], task)
    runtime.settings = upsert_settings_rows({"_demoCreated": True})
    return project


# --- sessions ----------------------------------------------------------------------
# A login gets a random id for its cookie; only its hash is kept (in the store and, for the
# check every request makes, in runtime.sessions), tied to the token it was made with.

def start_session() -> str:
    secret = secrets.token_urlsafe(32)
    expires = iso(utc_now() + dt.timedelta(days=SESSION_DAYS))
    insert_session_row(_digest(secret), _digest(runtime.config["token"] or ""), expires)
    runtime.sessions[_digest(secret)] = expires
    return secret


def end_session(secret: str) -> None:
    """Log out: the session is revoked here, whatever its cookie does elsewhere."""
    if runtime.sessions.pop(_digest(secret), None) is not None:
        delete_session_row(_digest(secret))
        runtime.events.end(("session", _digest(secret)), "the session was logged out")


def session_alive(secret: str) -> bool:
    expires = runtime.sessions.get(_digest(secret))
    return expires is not None and expires > now_iso()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


# =============================================================================
# SERVICES: OUTSIDE CLIENTS
# =============================================================================
# What drives the board from outside (design §19): personal tokens, each a bearer within
# its scopes, and schedules, which start work on a clock.

# --- personal tokens ------------------------------------------------------------------
# What each may call, its routes say (their scope: see SCOPES in HTTP PLUMBING).

def token_view(row: dict) -> dict:
    return render(TOKEN_FIELDS, row)


def list_tokens() -> list[dict]:
    return [token_view(row) for row in find_rows("tokens")]


def create_token(body) -> dict:
    """A new personal token: its secret is in this answer only (the board keeps a hash)."""
    values = validate(TOKEN_FIELDS, body)
    if values.get("expires_at"):
        values["expires_at"] = iso(parse_iso(values["expires_at"]))
    secret = PERSONAL_TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = insert_token_row({**values, "hash": _token_hash(secret)})
    if row is None:
        raise Conflict(f"a token named {values['name']!r} exists already", "name")
    runtime.personal[row["hash"]] = row
    return {**token_view(row), "secret": secret}


def delete_token(token_id: int) -> dict:
    row = found(delete_token_row(token_id), f"token {token_id} not found")
    runtime.personal.pop(row["hash"], None)
    runtime.events.end(("token", token_id), f"token {row['name']!r} was revoked")
    return {"ok": True}


def _token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def personal_token(secret: str) -> dict | None:
    """The personal token with this secret, unless it expired; its use is kept (at most
    once every TOKEN_USE_SECONDS)."""
    row = runtime.personal.get(_token_hash(secret))
    now = now_iso()
    if row is None or (row["expires_at"] is not None and row["expires_at"] <= now):
        return None
    if time.monotonic() - row.get("written", -TOKEN_USE_SECONDS) >= TOKEN_USE_SECONDS:
        row["written"], row["last_used_at"] = time.monotonic(), now  # kept in memory only
        token_used_row(row["id"], now)
    return row


# --- run tokens ---------------------------------------------------------------------
# A run's board tools (BOARD TOOLS (MCP)) hold a token, its scope in runtime.run_tokens:
# {project_id, task_id (the run's own task), created (the ids of the tasks it made)}.  It
# reaches only its project's tasks and changes only those its run created, over HTTP (the
# routes declared run_token=True) and in the tools alike.

#: A run's board tools (RUN_TOOLS), as its prompt names them.
RUN_TOOL_NAMES = ("list_tasks", "create_task", "update_task", "change_task_status",
                  "get_task_detail")


def revoke_run_token(run: "AgentRun") -> None:
    if runtime.run_tokens.pop(getattr(run, "board_token", None), None) is not None:
        with contextlib.suppress(OSError):
            os.remove(mcp_config_path(run.run_id))


def run_reach_refusal(agent: dict, project_id: int | None = None,
                      task_id: int | None = None) -> ApiError | None:
    """Forbidden when the project, or the task's project, is not the run token's own; a task
    not found counts as its own (the service then says 404)."""
    if task_id is not None:
        task = task_row(task_id) if 0 < task_id < 2**63 else None
        project_id = task["project_id"] if task else agent["project_id"]
    if project_id is not None and project_id != agent["project_id"]:
        return Forbidden("the board tools reach only the tasks of their own project")
    return None


def agent_bounds(agent: dict | None, body, task_id: int | None = None) -> None:
    """Forbidden unless the change a running agent asks (agent: its run token's scope; None:
    a person, unbounded) is within its bounds (design §11): it edits and moves only tasks
    its run created and their descendants, never its own task, never to done (a person's
    approval), and creates tasks below its own task (when the body names no parent) or
    below those it created."""
    if agent is None:
        return
    if isinstance(body, dict) and body.get("status") == "done":
        raise Forbidden("an agent cannot move a task to done: that is a person's approval")
    if task_id == agent["task_id"]:
        raise Forbidden("an agent cannot change its own task")
    if task_id is not None and not _created_by(agent, task_id):
        raise Forbidden(f"task {task_id} was not created by this agent's run (nor is it below "
                        "one that was): the board tools change only those")
    parent = body.get("parent_task_id") if isinstance(body, dict) else None
    if task_id is None and isinstance(body, dict) and parent is None:
        body["parent_task_id"] = parent = agent["task_id"]  # none named: below its own task
    if task_id is None and isinstance(parent, int) and not isinstance(parent, bool) and \
            parent != agent["task_id"] and not _created_by(agent, parent):
        raise Forbidden(f"parent_task_id {parent} is neither this agent's task nor one it "
                        "created")


def _created_by(agent: dict, task_id: int) -> bool:
    """Whether the task is one the run created, or below one (along parent_task_id)."""
    seen = set()
    while task_id is not None and task_id not in seen:
        if task_id in agent["created"]:
            return True
        seen.add(task_id)
        row = task_row(task_id) if 0 < task_id < 2**63 else None
        task_id = row["parent_task_id"] if row else None
    return False


# --- what a request asks of a task ------------------------------------------------------
# A person's, a personal token's or a running agent's (agent: its run token's scope, None
# for the others): the routes and the board tools both ask these.

def create_task_by(agent: dict | None, project_id: int, body) -> dict:
    """create_task(), within the agent's bounds; the task is then one its run created."""
    agent_bounds(agent, body)
    task = create_task(project_id, body)
    if agent is not None:
        agent["created"].add(task["id"])
    return task


def update_task_by(agent: dict | None, task_id: int, body) -> dict:
    """update_task(), within the agent's bounds; a person's edit releases an imported task."""
    agent_bounds(agent, body, task_id)
    task = update_task(task_id, body)
    return task if agent is not None else release_task(task_id)


def move_task_by(agent: dict | None, task_id: int, body) -> dict:
    """move_task() to the body's status, within the agent's bounds; a person's move releases
    an imported task."""
    body = validate_known(lambda: get_task(task_id), STATUS_FIELDS, body)
    agent_bounds(agent, body, task_id)
    task = move_task(task_id, body["status"])
    return task if agent is not None else release_task(task_id)


# --- schedules ----------------------------------------------------------------------

def schedule_view(row: dict) -> dict:
    return render(SCHEDULE_FIELDS, row)


def list_schedules(project_id: int) -> list[dict]:
    get_project(project_id)
    return [schedule_view(row) for row in find_rows("schedules", project_id=project_id)]


def get_schedule(schedule_id: int) -> dict:
    return schedule_view(found(find_row("schedules", id=schedule_id),
                               f"schedule {schedule_id} not found"))


def create_schedule(project_id: int, body) -> dict:
    values = validate_known(lambda: get_project(project_id), SCHEDULE_FIELDS, body)
    values.setdefault("timezone", local_zone())
    values["next_at"] = _next_fire(values) if values["enabled"] else None
    row = found(insert_schedule_row({**values, "project_id": project_id}),
                f"project {project_id} not found")
    _schedule_changed("schedule:created", row)
    return schedule_view(row)


def update_schedule(schedule_id: int, body) -> dict:
    before = found(find_row("schedules", id=schedule_id), f"schedule {schedule_id} not found")
    changes = validate(SCHEDULE_FIELDS, body, partial=True)
    if changes.keys() & {"cron", "timezone", "enabled"}:
        merged = {**before, **changes}
        changes["next_at"] = _next_fire(merged) if merged["enabled"] else None
    row = update_schedule_row(schedule_id, changes) if changes else before
    _schedule_changed("schedule:updated", row)
    return schedule_view(row)


def delete_schedule(schedule_id: int) -> dict:
    row = found(delete_schedule_row(schedule_id), f"schedule {schedule_id} not found")
    runtime.events.publish("schedule:deleted", {"id": schedule_id,
                                                "projectId": row["project_id"]},
                           row["project_id"])
    return {"ok": True}


def _schedule_changed(event: str, row: dict) -> None:
    runtime.events.publish(event, schedule_view(row), row["project_id"])
    runtime.schedules.wake()


def local_zone() -> str:
    """The server's IANA time zone: $TZ, else what /etc/localtime is, else UTC."""
    for name in (os.environ.get("TZ", "").lstrip(":"),
                 os.path.realpath("/etc/localtime").partition("/zoneinfo/")[2]):
        with contextlib.suppress(ValueError, zoneinfo.ZoneInfoNotFoundError):
            if name and zoneinfo.ZoneInfo(name):
                return name
    return "UTC"


def _next_fire(schedule: dict, after: dt.datetime | None = None) -> str:
    """A schedule's next fire after `after` (now), read in its time zone (the library
    knows daylight saving time: a time skipped or repeated fires once)."""
    start = (after or utc_now()).astimezone(zoneinfo.ZoneInfo(schedule["timezone"]))
    return iso(next(cronsim.CronSim(schedule["cron"], start)))


def fire_schedules() -> float | None:
    """Fire each schedule that is due, those missed while the board was down once; then
    sleep until the next is due (at most SCHEDULE_NAP_SECONDS: a clock set forward is
    noticed), or until a schedule changes when none is on."""
    now = utc_now()
    due, upcoming = due_schedule_rows(iso(now))
    for row in due:
        fire_schedule(row, now)
    if due:
        upcoming = due_schedule_rows(iso(now))[1]
    if upcoming is None:
        return None
    return min(SCHEDULE_NAP_SECONDS, max(0.0, (parse_iso(upcoming) - utc_now()).total_seconds()))


def fire_schedule(row: dict, now: dt.datetime) -> None:
    """One fire: a new task, started through the queue, or (mode continue) the text sent
    to the last task it made; skipped (and said so) while that task still runs or once
    today's daily budget is spent.  Its next fire is after now, so no fire comes twice."""
    spec = json.loads(row["task_json"])
    last = task_row(row["last_task_id"]) if row["last_task_id"] else None
    task_id, error = None, None
    try:
        if last is not None and last["status"] == "in_progress":
            task_id, error = last["id"], f"skipped: {last['task_key']}, which its last fire " \
                "made, still runs"
        elif daily_limit_reached():  # whichever way the fire would start work
            error = "skipped: today's agent cost reached the daily limit (dailyCostLimit)"
        elif row["mode"] == "continue" and last is not None:
            task_id = last["id"]
            request_changes(task_id, spec.get("description") or spec["title"])
        else:
            task_id = create_task(row["project_id"], {
                "title": spec["title"], "description": spec.get("description", ""),
                **{column: spec[key] for key, column in (
                    ("type", "task_type"), ("priority", "priority"), ("agent", "agent"),
                    ("model", "model"), ("effort", "thinking_effort")) if key in spec}})["id"]
            move_task(task_id, "in_progress", manual=False,
                      reason=f"started by schedule {row['name']!r}")
    except ApiError as exc:  # a full project (the task waits in the backlog), a gone task
        error = exc.message
    notice = Notice("schedule:fired", schedule=row["name"], error=error)
    saved = update_schedule_row(row["id"], {
        "last_at": iso(now), "next_at": _next_fire(row, now), "last_error": error,
        "last_task_id": task_id or row["last_task_id"]}, notice, task_id)
    announce(notice)
    runtime.events.publish("schedule:fired", {**schedule_view(saved), "taskId": task_id},
                           row["project_id"])


# =============================================================================
# SERVICES: HOSTS
# =============================================================================
# Agents on other machines (design §15): hosts as a resource, their checks and keys, the
# tasks that wait for one, a branch brought home, and health.  What runs there, and how,
# is the host's machine's (MACHINES: SSH HOSTS).

# --- hosts ---------------------------------------------------------------------------

def host_view(row: dict) -> dict:
    return render(HOST_FIELDS, row)


def list_hosts() -> list[dict]:
    return [host_view(r) for r in host_rows()]


def get_host(host_id: int) -> dict:
    return host_view(found(host_row(host_id), f"host {host_id} not found"))


def create_host(body) -> dict:
    values = validate(HOST_FIELDS, body)
    if values.get("host_key"):
        raise Invalid("hostKey is set by trusting the key a check shows: add the host, check "
                      "it, compare the fingerprint, then trust it", "hostKey")
    host = host_view(insert_host_row(values))
    runtime.events.publish("host:created", host)
    return host


def update_host(host_id: int, body) -> dict:
    """Change a host.  hostKey set to the fingerprint its last check showed pins that key
    (design §15); null forgets it, as does a new address or port."""
    changes = validate_known(lambda: get_host(host_id), HOST_FIELDS, body, partial=True)
    before = found(host_row(host_id), f"host {host_id} not found")
    moved = [k for k in ("address", "port", "identity_file", "host_key")
             if k in changes and changes[k] != before[k]]
    if moved and before["running"]:  # a new connection would end theirs
        raise Conflict(f"host {before['name']!r} has {before['running']} agent run(s) on it: "
                       f"stop them before changing how it is reached")
    seen = None
    if changes.get("host_key") and changes["host_key"] != before["host_key"]:
        shown = json.loads(before["last_check_json"] or "{}").get("fingerprint")
        seen = read_regular(_seen_key_file(host_id), 20_000) if shown else None
        if changes["host_key"] != shown or not seen:
            raise Conflict(f"hostKey {changes['host_key']} is not the key the host showed at "
                           f"its last check ({shown or 'none'}): check the host again and "
                           "compare", "hostKey")
    elif any(k in changes and changes[k] != before[k] for k in ("address", "port")):
        changes.setdefault("host_key", None)  # another machine, maybe: trust it again
    row = update_host_row(host_id, changes)
    if "host_key" in changes and changes["host_key"] != before["host_key"]:
        pin_host_key(host_id, seen.strip() if seen else None)
    host = host_view(row)
    runtime.events.publish("host:updated", host)
    if row["enabled"] and not before["enabled"]:
        for project_id in host_project_rows(host_id):
            schedule_queue(project_id)
    return host


def delete_host(host_id: int) -> dict:
    """Forget a host; 409 while a run is on it or a project names it."""
    found(delete_host_row(host_id), f"host {host_id} not found")
    link = runtime.links.pop(host_id, None)
    if link is not None:
        link.close()
    pin_host_key(host_id, None)
    with contextlib.suppress(FileNotFoundError):
        os.remove(_seen_key_file(host_id))
    runtime.events.publish("host:deleted", {"id": host_id})
    return {"ok": True}


def _seen_key_file(host_id: int) -> str:
    return os.path.join(ssh_folder(), f"seen-{host_id}")


def check_host(host_id: int) -> dict:
    """Reach the host now: its key (shown, not pinned, while none is trusted), then over
    the pinned key its latency, git and agent CLIs.  A changed key disables the host.
    Tasks waiting for the host start when it is reachable."""
    host = found(host_row(host_id), f"host {host_id} not found")
    check = {"at": now_iso(), "ok": False, "error": None, "latencyMs": None,
             "fingerprint": None, "agents": {}, "git": None}
    changes = {}
    if not host["host_key"]:
        check["fingerprint"], check["error"] = _show_key(host)
        if check["fingerprint"]:
            check["error"] = "the host key is not trusted yet: compare its fingerprint with " \
                "`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` run on the host, then trust it"
    else:
        link = host_link(host)
        try:
            started = time.monotonic()
            link.run("true", timeout=30)
            check["latencyMs"] = round((time.monotonic() - started) * 1000)
            code, out = link.run(_discovery_script(host), timeout=60)
            check.update(ok=True, fingerprint=host["host_key"], **_discovered(out))
        except HostDown as exc:
            check["error"] = str(exc)
            if exc.shown:
                check["fingerprint"] = _show_key(host)[0] or exc.shown
                changes["enabled"] = 0
    row = update_host_row(host_id, {"last_check_json": json_dumps(check), **changes})
    if row is None:  # deleted meanwhile
        raise NotFound(f"host {host_id} not found")
    view = host_view(row)
    runtime.events.publish("host:updated", view)
    if check["ok"] and row["enabled"]:
        host_came_back(row)
        if (check.get("sandbox") or {}).get("works"):
            runtime.sandbox_retry.wake()  # its tasks that wait for the sandbox
    return view


def _show_key(host: dict) -> tuple[str | None, str | None]:
    """The host key the host shows, kept (not pinned) for a person to trust: (its
    fingerprint, None) or (None, why it could not be read)."""
    fingerprint, line = scan_host_key(host)
    if fingerprint is None:
        return None, line
    fd = os.open(_seen_key_file(host["id"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(line + "\n")
    return fingerprint, None


def _discovery_script(host: dict) -> str:
    """Prints `git<TAB>version`, `sandbox<TAB>works<TAB>version or why not` (bubblewrap,
    TASKBOARD_BWRAP's command there too, tried as the runs use it) and
    `<cli><TAB>found<TAB>version` lines."""
    commands = json.loads(host["agent_commands_json"] or "{}")
    lines = ["printf 'git\\t%s\\n' \"$(git --version 2>/dev/null | head -n 1)\"",
             f"b={shlex.join(runtime.config['bwrap'])}; if ! command -v socat >/dev/null; then "
             "printf 'sandbox\\t0\\t%s\\n' 'socat is not installed: a sandboxed run needs it "
             "(apt install socat)'; "
             f"elif e=$($b {shlex.join(SANDBOX_BASE + NET_ARGS)} "
             "-- true 2>&1); then printf 'sandbox\\t1\\t%s\\n' \"$($b --version 2>/dev/null)\"; "
             "else printf "
             "'sandbox\\t0\\t%s\\n' \"$(printf %s \"$e\" | tr '\\t\\n' '  ' | cut -c1-300)\"; fi"]
    for name in AGENTS:
        words = shlex.split(commands.get(name) or name)
        lines.append(f"if command -v {shlex.quote(words[0])} >/dev/null 2>&1; then printf "
                     f"'{name}\\t1\\t%s\\n' \"$({shlex.join(words)} --version </dev/null "
                     f"2>/dev/null | head -n 1)\"; else printf '{name}\\t0\\t\\n'; fi")
    return "\n".join(lines)


def _discovered(out: str) -> dict:
    found_ = {"agents": {name: {"found": False, "version": None} for name in AGENTS},
              "git": None}
    for line in out.splitlines():
        parts = line.split("\t")
        if parts[0] == "git" and len(parts) == 2:
            found_["git"] = cli_version(parts[1])
        elif parts[0] == "sandbox" and len(parts) == 3:
            works = parts[1] == "1"
            found_["sandbox"] = {"engine": "bubblewrap", "works": works,
                                 "version": parts[2].removeprefix("bubblewrap ") or None
                                 if works else None,
                                 "error": None if works else parts[2].strip() or "exit code"}
        elif parts[0] in AGENTS and len(parts) == 3:
            found_["agents"][parts[0]] = {"found": parts[1] == "1",
                                          "version": cli_version(parts[2])}
    return found_


def host_came_back(host: dict) -> None:
    """The host is reachable: start the tasks that wait for it."""
    for task in waiting_task_rows(host["id"]):
        if task["status"] == "in_progress" and runtime.agents.reserve(
                task["id"], task["project_id"], None):
            start_run(task["id"], resume=bool(task["session_id"]), prompt="continue")
    for project_id in host_project_rows(host["id"]):
        schedule_queue(project_id)


def check_hosts() -> float:
    """A round of the background checks: every enabled, trusted host a project names
    (every HOST_CHECK_SECONDS)."""
    for host in host_rows():
        if host["enabled"] and host["host_key"] and host_project_rows(host["id"]):
            try:
                check_host(host["id"])
            except Exception:  # a background loop: log and carry on
                log.exception("checking host %s failed", host["id"])
    return HOST_CHECK_SECONDS


def wait_for_host(task: dict, host: dict, error: str) -> None:
    """The task's host cannot be reached: the task keeps its place, is not charged an
    attempt, and starts when a check of the host succeeds (design §15)."""
    runtime.agents.release(task["id"])
    waiting = {"host": host["id"], "error": error}
    runtime.logs.append(task["id"], "system", f"waiting for host {host['name']!r}: {error}")
    _publish_task(update_task_row(task["id"], {"waiting_for_json": json_dumps(waiting),
                                               "is_running": 0}))


def bring_branch_home(task: dict, project: dict) -> None:
    """An approved task's branch comes home to workingDir's repository from the machine
    its runs used, PR or not (design §15), and the task says where the branch is."""
    if task["branch_name"] and (home := project_machine(project).bring_home(task, project)):
        _publish_task(update_task_row(task["id"], {"branch_at": home}))


# --- health ------------------------------------------------------------------------

def health(owner: bool) -> dict:
    """Open to all: the agent CLIs' found and version (never a path or arguments), and of
    the hosts in use only how many there are and are reachable; their names and states
    only for the owner (asked with the owner's credential: design §11)."""
    db_state = db_check()
    hosts = hosts_in_use() if db_state == "ok" else []
    answer = {"ok": db_state == "ok", "version": __version__, "agent": dict(runtime.agent),
              "agents": {name: agent_state(name) for name in AGENTS}, "db": db_state,
              "hostsInUse": {"count": len(hosts),
                             "reachable": sum(host["reachable"] is True for host in hosts)},
              "sandbox": dict(runtime.sandbox)}
    if owner:
        answer["hosts"] = hosts
    return answer


def hosts_in_use() -> list[dict]:
    """The hosts a project runs its tasks on, and whether each was reachable at its last
    check (null: never checked), for the board's banner."""
    return [{"id": row["id"], "name": row["name"], "enabled": bool(row["enabled"]),
             "reachable": (json.loads(row["last_check_json"]) or {}).get("ok")
             if row["last_check_json"] else None} for row in hosts_in_use_rows()]


def agent_state(name: str) -> dict:
    """An agent CLI as anyone may know it: found, version, its npm package, whether it
    talks both ways, and until when its usage limit holds."""
    until = runtime.limits.get(name, 0)
    return {**runtime.clis[name], "package": AGENTS[name].package,
            "twoWay": AGENTS[name].two_way,
            "waitingUntil": iso_at(until) if until > time.time() else None}


def list_agents(owner: bool = True) -> list[dict]:
    """Every agent CLI with how many projects on this machine run it and how many of
    their open tasks chose it (the banner names a missing CLI only when something uses
    it), and, to the owner (hosts are the owner's: design §19), each host a project runs it
    on with what the host's last check found."""
    projects, tasks, remote = agent_use_rows(simulated_dir())
    if not owner:
        remote = []
    hosts = {row["id"]: row for row in hosts_in_use_rows()}
    on_hosts = collections.defaultdict(list)
    for use in remote:
        host = hosts.get(use["host_id"])
        if host is None:  # deleted between the two reads
            continue
        check = _dict(json.loads(host["last_check_json"] or "null"))
        cli = _dict(_dict(check.get("agents")).get(use["agent"]))
        on_hosts[use["agent"]].append({
            "id": host["id"], "name": host["name"], "found": cli.get("found"),
            "version": cli.get("version"), "projects": use["projects"]})
    return [{"name": name, **agent_state(name), "projects": projects.get(name, 0),
             "openTasks": tasks.get(name, 0), "hosts": on_hosts[name]} for name in AGENTS]


# =============================================================================
# SERVICES: PREVIEWS
# =============================================================================
# A task's running result, clicked through (design §21): its project's previewCommand run
# in the task's (or an attempt's) checkout with PORT set, in a process group of its own
# (Preview owns it), served to the browser from a port of its own by the board's proxy
# (PREVIEW PROXY), which lets through only the holder of that port's cookie.  Previews (in
# runtime.previews) holds the live ones; a preview stops on DELETE, when nobody asked it
# anything for previewIdleMinutes (a timer), when its task is deleted or moved to done or
# backlog, and with the board; a board killed with -9 kills its survivors at its next
# start (their pids are kept as a run's are).

class Preview:
    """One preview: its command's process group, its state, its listener and its links."""

    run_id = None  # the egress proxy logs a refusal on its task, of no run

    def __init__(self, task: dict, n: int | None, project: dict, cwd: str,
                 sandbox: dict | None, machine: "ThisMachine | HostLink"):
        self.task_id, self.n, self.project_id = task["id"], n, task["project_id"]
        self.project, self.sandbox, self.machine = project, sandbox, machine
        self.name = secrets.token_hex(8)  # its folders' (bridge, forward) and files'
        self.bridge = self.group = self.forward = self.net_forward = None
        self.command, self.path, self.cwd = project["preview_command"], \
            project["preview_path"], cwd
        self.status, self.error, self.ready_at = "starting", None, None
        self.started_at = now_iso()
        self.output = collections.deque(maxlen=PREVIEW_OUTPUT_LINES)
        self.cookie = secrets.token_urlsafe(32)  # the port's cookie: who passes the proxy
        self.links = {}  # one-time link token -> until when it works (time.monotonic())
        self.proc = self.row_id = self.listener = self.port = self.dev_port = None
        self.seen = time.monotonic()  # the last request through the proxy
        self.greenlets = gevent.pool.Group()
        self.tunnels = set()  # open WebSocket connections (closed with it)
        self.idle = []  # kept-alive connections to the dev server (PREVIEW PROXY's)

    @property
    def live(self) -> bool:
        return self.status in ("starting", "ready")

    def network_refused(self, message: str) -> None:
        """The egress proxy refused a host the first time (design §20): the task's log."""
        runtime.logs.append(self.task_id, "network", f"preview: {message}", None,
                            is_error=True)

    def kill(self, reason: str) -> None:
        """The egress proxy ends it (its socket went: `proxy-gone`)."""
        self.stop(f"its sandbox's way out went ({reason})", "failed")

    def start(self, listen) -> None:
        """Listen on its own port (`listen`: PREVIEW PROXY's), start the command, and
        watch it: its output, its end, its port answering."""
        self.listener = listen(self)
        self.port = self.listener.server_port
        runtime.previews.ports.add(self.port)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in SECRET_ENV and not k.startswith("TASKBOARD_")}
        # as a run (design §17, §20) when sandboxed: reached by its bridge
        argv = ["sh", "-c", PREVIEW_BRIDGE, "sh", self.command] if self.sandbox is not None \
            else ["sh", "-c", self.command]
        self.proc = self.machine.start_preview(self, argv)
        self.row_id = insert_preview_row(self.task_id, self.n, self.proc.pid,
                                         process_start(self.proc.pid))
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                self.greenlets.spawn(self._drain, pipe)
        for work in (self._await_ready, self._await_exit):
            self.greenlets.spawn(work)
        self.idle_timer(get_settings()["previewIdleMinutes"] * SECONDS_PER_MINUTE)

    def _drain(self, pipe) -> None:
        """Its output's last lines; what its machine says (a host's group, its beat) not."""
        for line in iter(pipe.readline, b""):
            text = line[:2000].decode("utf-8", "replace").rstrip("\n")
            if not self.machine.preview_heard(self, text):
                self.output.append(text)

    def _await_exit(self) -> None:
        code = self.proc.wait()
        if self.live:
            self.stop(f"the command exited with code {code} "
                      f"{'before its port answered' if self.status == 'starting' else ''}"
                      .strip(), "failed")

    def _await_ready(self) -> None:
        """Ask its port until it answers HTTP: with backoff, only while it starts."""
        deadline, pause = time.monotonic() + PREVIEW_READY_SECONDS, 0.005
        while self.status == "starting":
            if self.answers():
                self.ready_at, self.status, self.seen = now_iso(), "ready", time.monotonic()
                self.publish()
                return
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop(f"nothing answered HTTP on its port ($PORT, {self.dev_port}) "
                          f"within {PREVIEW_READY_SECONDS:g} s", "failed")
                return
            gevent.sleep(min(pause, left))
            pause = min(pause * 1.5, 0.05)

    def connect(self, timeout: float = 10.0) -> socket.socket:
        """A connection to the dev server: on this machine's loopback, or a sandboxed one's
        through its bridge's socket (opened through its folder: a data dir's path may be
        longer than a socket's address takes)."""
        if self.bridge is None:  # an address, never a name to resolve
            conn = dial(("127.0.0.1", self.dev_port), timeout)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return conn
        where = os.open(self.bridge, os.O_PATH | os.O_DIRECTORY)
        try:
            return dial(f"/proc/self/fd/{where}/{PREVIEW_SOCKET}", timeout, socket.AF_UNIX)
        finally:
            os.close(where)

    def answers(self) -> bool:
        """Whether the dev server answers an HTTP request on its port."""
        try:
            with self.connect(timeout=5.0) as conn:
                conn.sendall(f"GET {self.path} HTTP/1.0\r\nHost: 127.0.0.1:{self.dev_port}"
                             "\r\n\r\n".encode())
                return conn.recv(5) == b"HTTP/"
        except OSError:
            return False

    def idle_timer(self, seconds: float) -> None:
        """Stop after `seconds` without a request (a timer, put off by each request, while
        it starts, and while a page holds a WebSocket to it open: hot reload)."""
        def fire():
            if self.status == "starting" or self.tunnels:
                self.seen = time.monotonic()
            left = self.seen + seconds - time.monotonic()
            if not self.live:
                return
            if left > 0:
                self.greenlets.add(gevent.spawn_later(left, fire))
            else:
                self.stop(None, "stopped")
        self.greenlets.add(gevent.spawn_later(seconds, fire))

    def link(self) -> str | None:
        """A new one-time link to it (None unless live)."""
        if not self.live:
            return None
        now = time.monotonic()
        self.links = {t: until for t, until in self.links.items() if until > now}
        while len(self.links) >= 20:
            self.links.pop(next(iter(self.links)))
        token = secrets.token_urlsafe(24)
        self.links[token] = now + PREVIEW_LINK_SECONDS
        host = preview_host()
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}" \
            f"{PREVIEW_LINK_PATH}?t={token}"

    def take_link(self, token: str) -> bool:
        """Whether a one-time link's token is good (it then works no more)."""
        for known in list(self.links):
            if hmac.compare_digest(known.encode(), token.encode()):
                return self.links.pop(known) > time.monotonic() and self.live
        return False

    def view(self) -> dict:
        return {"taskId": self.task_id, "n": self.n, "status": self.status, "url": self.link(),
                "startedAt": self.started_at, "readyAt": self.ready_at, "error": self.error,
                "output": "\n".join(self.output)}

    def publish(self) -> None:
        runtime.events.publish("preview:updated", self.view(), self.project_id)

    def stop(self, error: str | None, status: str) -> None:
        """End it: its listener, its open tunnels, its process group (SIGTERM, then SIGKILL
        after KILL_GRACE_SECONDS), its kept pid; `status` failed (with `error`) or stopped."""
        if not self.live:
            return
        self.status, self.error = status, error
        if self.listener is not None:
            runtime.previews.ending.spawn(self.listener.stop, 1)
        for tunnel in list(self.tunnels):
            with contextlib.suppress(OSError):
                tunnel.shutdown(socket.SHUT_RDWR)
        while self.idle:
            self.idle.pop().close()
        if self.proc is not None:
            if self.group is not None:  # a host's: its group there (its channel too, below)
                runtime.previews.ending.spawn(kill_remote_group, self.machine, self.group,
                                              signal.SIGTERM)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            runtime.previews.ending.spawn(self._kill, self.proc, self.row_id)
        else:  # it never started: what its start made goes
            runtime.previews.ending.spawn(self._clean)
        if self.sandbox is not None:
            runtime.egress.close(self)
        self.publish()

    def _kill(self, proc, row_id) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(KILL_GRACE_SECONDS)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # what the group left, the leader gone or not
        delete_preview_rows(row_id)
        self._clean()

    def _clean(self) -> None:
        """Its machine's forwards and folders, and its bridge's folder here."""
        self.machine.end_preview(self)
        if self.bridge is not None:
            shutil.rmtree(self.bridge, ignore_errors=True)


def preview_host() -> str:
    """The board's address as a browser reaches it (a wildcard: this machine's name)."""
    host = runtime.config["host"]
    return "localhost" if host in ("0.0.0.0", "::", "") else host


class Previews:
    """The previews of this board: (task id, attempt n or None) -> Preview; `listen` makes
    a preview's listener (PREVIEW PROXY's); `ending` the kills under way."""

    def __init__(self, listen):
        self.listen, self.by_task, self.ending = listen, {}, gevent.pool.Group()
        self.ports = set()  # every port a preview had: its pages may still be open

    def running(self) -> int:
        return sum(p.live for p in self.by_task.values())

    def stop_all(self) -> None:
        for preview in list(self.by_task.values()):
            preview.stop(None, "stopped")
        self.ending.join(timeout=KILL_GRACE_SECONDS + 1)


def _preview_target(task_id: int, n: int | None) -> tuple:
    """The task (or its attempt n), its project, the checkout its preview serves, its
    sandbox (its runs', design §17: None where they are not sandboxed) and its machine (a
    host's: design §15); 409 when its project has no previewCommand, its host is gone or
    unreachable, it must be sandboxed where bubblewrap does not work, or the task is not in
    progress or testing."""
    task = get_task(task_id)
    project = project_row(task["project_id"])
    if not project["preview_command"].strip():
        raise Conflict(f"project {project['slug']!r} has no previewCommand: set one in its "
                       "settings to preview its tasks", "previewCommand")
    if task["status"] not in ("in_progress", "testing"):
        raise Conflict(f"task {task_id} is {task['status']}: only a task in progress or "
                       "testing has a preview", "status")
    machine = project_machine(project)
    if isinstance(machine, MissingHost):
        raise Conflict("the project's host was deleted", "host")
    sandbox = None
    if project["sandbox"] != "none" and not runs_simulated(project):
        works = machine.sandbox(retry=True)
        if works["works"]:
            try:
                git = machine.git_dir(project)
            except HostDown as exc:
                raise Conflict(f"the project's host cannot be reached: {exc}", "host") \
                    from None
            sandbox = {"agent": None, "project": project["id"], "command": [], "files": [],
                       "paths": json.loads(project["sandbox_paths_json"] or "null"),
                       "hide": hidden_from(project), "git": git}
        elif project["sandbox"] == "bubblewrap":
            raise Conflict(f"the sandbox does not work{machine.where}: {works['error']}",
                           "sandbox")
    checkout = task
    if n is not None:
        attempt = found(next((a for a in attempt_rows(task_id) if a["n"] == n), None),
                        f"task {task_id} has no attempt {n}")
        checkout = attempt_task(task, attempt)
    return task, project, machine.preview_checkout(checkout, project), sandbox, machine


def start_preview(task_id: int, n: int | None = None) -> dict:
    """Start the task's (or attempt n's) preview, or answer the one that runs."""
    task, project, cwd, sandbox, machine = _preview_target(task_id, n)
    preview = runtime.previews.by_task.get((task_id, n))
    if preview is not None and preview.live:
        return preview.view()
    limit = get_settings()["maxPreviews"]
    if runtime.previews.running() >= limit:
        raise Conflict(f"{runtime.previews.running()} previews run, the most maxPreviews "
                       f"({limit}) allows: stop one, or raise maxPreviews", "maxPreviews")
    preview = runtime.previews.by_task[(task_id, n)] = Preview(task, n, project, cwd,
                                                               sandbox, machine)
    try:
        preview.start(runtime.previews.listen)
    except (OSError, HostDown) as exc:
        preview.output.append(str(exc))
        preview.stop(f"the preview could not start: {exc}", "failed")
        return preview.view()
    preview.publish()
    return preview.view()


def get_preview(task_id: int, n: int | None = None) -> dict:
    get_task(task_id)
    preview = runtime.previews.by_task.get((task_id, n))
    if preview is None:
        return {"taskId": task_id, "n": n, "status": "stopped", "url": None,
                "startedAt": None, "readyAt": None, "error": None, "output": ""}
    return preview.view()


def stop_preview(task_id: int, n: int | None = None) -> dict:
    get_task(task_id)
    preview = runtime.previews.by_task.get((task_id, n))
    if preview is not None:
        preview.stop(None, "stopped")
    return get_preview(task_id, n)


def start_attempt_preview(task_id: int, n: int) -> dict:
    return start_preview(task_id, n)


def get_attempt_preview(task_id: int, n: int) -> dict:
    return get_preview(task_id, n)


def stop_attempt_preview(task_id: int, n: int) -> dict:
    return stop_preview(task_id, n)


def stop_previews(task_id: int, attempts_only: bool = False) -> None:
    """A task deleted, or moved to done or backlog: its previews (and its attempts') stop
    and are forgotten; its attempts' alone when their worktrees go."""
    for key in [k for k in runtime.previews.by_task
                if k[0] == task_id and (k[1] is not None or not attempts_only)]:
        runtime.previews.by_task.pop(key).stop(None, "stopped")


def kill_preview_survivors() -> None:
    """At start: the preview processes a board killed with -9 left, killed."""
    for row in delete_preview_rows():
        kill_survivor(row["pid"], row["proc_start"])


# =============================================================================
# SUPERVISORS
# =============================================================================
# An AgentRun owns one agent process: it writes the prompt, drains stdout and stderr at
# once, watches the clocks and kills the whole process group.  The AgentPool knows which
# task holds which slot.  Outcomes are recorded through services (finish_run).

class AgentRun:
    """One agent process and the greenlets that serve it."""

    def __init__(self, task_id, project_id, run_id, prompt, *, argv, cwd, env, model,
                 machine=None, root=None, timeout_s=0.0, idle_s=0.0, on_finish=None,
                 channel=None, owner=None):
        self.task_id, self.project_id, self.run_id = task_id, project_id, run_id
        #: Whose run it is (a task's, an attempt's: RunOwner); its slot is the owner's.
        self.owner = owner
        self.slot = task_id if owner is None else owner.slot
        #: A task run's two-way channel (design §12): {auto_allow, approval_timeout_minutes,
        #: stop_check: (command, max blocks) or None}; None: the prompt, then EOF.
        self.channel = channel
        self.queued = collections.deque()  # messages to send when the agent's turn ends
        self.waiting = set()  # what a person (or the stop check) is asked: timeouts pause
        self.accepting = channel is not None  # stdin is open for more turns
        self.stop_blocks = 0
        self.helpers = []  # greenlets that end with the run: the stop check, approval timers
        self.paused = 0.0  # seconds spent waiting for a person: not counted by the timeout
        self._stdin_lock = gevent.lock.Semaphore()  # one writer on stdin
        self._requests = itertools.count(1)
        self.on_finish = on_finish or finish_run
        self.machine = machine or THIS_MACHINE  # where it runs: ThisMachine or a HostLink
        self.group = None  # its process group on a host, once the host said so
        self.sandbox = None  # what sandbox_env() says of its sandbox, or None: unsandboxed
        self.sandbox_hinted = False  # its log said the sandbox may be why something failed
        self.network_hinted = False  # ... or the sandbox's network
        #: what its sandbox said as the run ended (RUN_START's end: the commit's output, at
        #: most MAX_END_LINES lines), and the end's exit code once said (None: the run made
        #: no end of its own, as a run cut short: commit_leftovers() commits)
        self.end_lines, self.end_code = [], None
        self.argv, self.cwd, self.env, self.prompt, self.model = argv, cwd, env, prompt, model
        self.timeout_s, self.idle_s = timeout_s, idle_s
        self.parser = StreamParser()
        self.parser.root = root or cwd
        self.proc = None
        self.exit_code = None
        self.stop_reason = None
        self.finished = gevent.event.Event()
        self.started = self.last_output = self._watched = time.monotonic()
        self._seq = 0
        self._usage_published = 0.0
        self._kill_timer = None

    def start(self) -> None:
        """Spawn the agent on its machine; raises OSError if it cannot start.  A sandboxed
        run gets its egress proxy's socket first (design §20), where its machine bridges."""
        try:
            if self.sandbox is not None and self.machine.bridged:
                self.machine.bridge(self, runtime.egress.open(
                    self, project_row(self.project_id), self.sandbox["agent"]))
            self.proc = self.machine.spawn(self.argv, self.cwd, self.env, self.sandbox)
        except BaseException:
            if runtime.egress.close(self) is not None:
                self.machine.unbridge(self)
            raise
        gevent.spawn(self._supervise)

    def kill(self, reason: str) -> None:
        """End the run, once: SIGTERM to the group now, SIGKILL after KILL_GRACE_SECONDS."""
        if self.stop_reason is not None:
            return
        self.stop_reason = reason
        if self.proc is not None and not self.finished.is_set():
            self._signal(signal.SIGTERM)
            self._kill_timer = gevent.spawn_later(KILL_GRACE_SECONDS, self._signal,
                                                  signal.SIGKILL)

    def cost(self) -> float:
        return self.parser.cost(self.model)

    def send(self, message: dict) -> bool:
        """Write one JSON line to the agent's stdin; False once it is closed."""
        data = (json_dumps(message) + "\n").encode("utf-8")
        with self._stdin_lock:
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
                return True
            except (OSError, ValueError):
                return False

    def respond(self, request_id, response: dict | None = None, error: str | None = None):
        """Answer one of the agent's control requests."""
        answer = {"subtype": "error", "request_id": request_id, "error": error} if error \
            else {"subtype": "success", "request_id": request_id, "response": response or {}}
        return self.send({"type": "control_response", "response": answer})

    def interrupt(self) -> bool:
        """End the agent's turn now (its session stays); the next turn comes from queued."""
        return self.send({"type": "control_request", "request_id":
                          f"interrupt-{next(self._requests)}", "request": {"subtype": "interrupt"}})

    def end_input(self) -> None:
        """No more turns: closing stdin lets the agent exit once its turn is over."""
        with self._stdin_lock:
            self.accepting = False
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.close()

    def usage_columns(self) -> dict:
        """The run's usage as the runs table keeps it (input_tokens, ..., cost)."""
        return {**{f"{key}_tokens": n for key, n in self.parser.usage.items()},
                "cost": self.cost(), "cost_estimated": int(self.parser.cost_estimated)}

    def _supervise(self):
        pumps = []
        try:
            self._started()
            if self.stop_reason:  # stopped while it was starting
                self._signal(signal.SIGTERM)
                self._kill_timer = gevent.spawn_later(KILL_GRACE_SECONDS, self._signal,
                                                      signal.SIGKILL)
            feeder = gevent.spawn(self._feed_stdin)
            pumps = [gevent.spawn(self._pump, self.proc.stdout, self._on_stdout),
                     gevent.spawn(self._pump, self.proc.stderr, self._stderr)]
            exited_at = None
            while len(gevent.joinall(pumps, timeout=0.5)) < len(pumps):
                exited_at = self._watch(exited_at)
                if exited_at is not None and \
                        time.monotonic() - exited_at > 2 * EXIT_GRACE_SECONDS:
                    break  # a process outside the group holds the pipes: stop reading
            while self.exit_code is None:  # the agent may have closed its pipes and go on
                try:
                    self.exit_code = self.proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    self._watch(None)
            feeder.kill()
        except Exception:  # a supervisor must always record its run's end
            log.exception("run %s: supervisor died", self.run_id)
            self.stop_reason = self.stop_reason or "crashed"
        finally:
            gevent.killall(pumps + self.helpers)
            self._signal(signal.SIGKILL)  # whatever the agent left behind in its group
            if self._kill_timer is not None:
                self._kill_timer.kill(block=False)
            if self.exit_code is None and self.proc is not None:
                with contextlib.suppress(Exception):
                    self.exit_code = self.proc.wait(timeout=KILL_GRACE_SECONDS)
            for pipe in (self.proc.stdout, self.proc.stderr) if self.proc else ():
                with contextlib.suppress(OSError):
                    pipe.close()
            try:
                self._network_ended()
                self.machine.ended(self)
                self._on_exit()
            except Exception:  # what the adapter makes of the end is logged, never fatal
                log.exception("run %s: reading the agent's end failed", self.run_id)
            try:
                self.on_finish(self)
            except Exception:  # the slot must come back even if recording failed
                log.exception("run %s: recording its end failed", self.run_id)
                runtime.agents.forget(self)
            finally:
                self.finished.set()

    def _network_ended(self) -> None:
        """The run's egress proxy closes; what its network did is recorded."""
        network = runtime.egress.close(self)
        if network is not None:
            self.machine.unbridge(self)
            self.sandbox.pop("net", None)  # a check after the run has no way out
            self.sandbox["offline"] = True
            run_network_ended(self.run_id, self.task_id, network)

    def _watch(self, exited_at):
        """Enforce the task timeout and the idle timeout; after the agent exited, kill what
        is left of its group.  Returns when the agent was first seen exited."""
        now = time.monotonic()
        if self.waiting:  # waiting for a person is not working: the clocks stand still
            self.paused += now - self._watched
            self.last_output += now - self._watched
        self._watched = now
        if self.timeout_s and now - self.started - self.paused > self.timeout_s:
            self.kill("timeout")
        elif self.idle_s and now - self.last_output > self.idle_s:
            self.kill("idle")
        if exited_at is None and self.proc.poll() is not None:
            return now
        if exited_at is not None and now - exited_at > EXIT_GRACE_SECONDS:
            self._signal(signal.SIGKILL)
        return exited_at

    def _feed_stdin(self):
        if self.channel is not None:
            request = {"subtype": "initialize"}
            if self.channel["stop_check"]:
                request["hooks"] = {"Stop": [{"matcher": None,
                                              "hookCallbackIds": ["stop_check"]}]}
            self.send({"type": "control_request", "request_id": "init", "request": request})
            self.send(user_turn(self.prompt))
            return
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(self.prompt.encode("utf-8"))
            self.proc.stdin.flush()
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()

    def _pump(self, stream, handle):
        for count in itertools.count(1):
            line = stream.readline(MAX_LINE_BYTES)
            if not line:
                return
            if count % 64 == 0:
                gevent.sleep(0)  # a full pipe must not starve the requests
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if not text.strip():  # nothing said (a remote run's heartbeat): not activity
                continue
            self.last_output = time.monotonic()
            try:
                handle(text)
            except Exception:  # one odd line must not stop the reading (the agent would block)
                log.exception("run %s: cannot handle an output line", self.run_id)
                self._bad_line(text)

    def _stderr(self, text: str):
        if self.machine.heard(self, text) or self._ending(text):
            return
        self.parser.stderr.append(text)  # where Gemini names a quota's reset (limit_resets)
        self._on_stderr(text)

    def _ending(self, text: str) -> bool:
        """Whether a line of stderr was its sandbox's, of the run's end (RUN_START)."""
        said = text.removeprefix(RUN_END_MARK)
        if said == text or self.sandbox is None or not self.sandbox.get("end"):
            return False
        if said.startswith(": ") and len(self.end_lines) < MAX_END_LINES:
            self.end_lines.append(said[2:])
        elif re.fullmatch(r" exited \d+", said):
            self.end_code = int(said[8:])
        return True

    def _started(self):
        self.machine.started(self)

    def _bad_line(self, text: str):
        runtime.logs.append(self.task_id, "raw", _cut(text), self.run_id)

    def network_refused(self, message: str) -> None:
        """The egress proxy refused a host the first time (design §20): the task's log."""
        runtime.logs.append(self.task_id, "network", message, self.run_id, is_error=True)

    def _on_stdout(self, text: str):
        self._seq += 1
        had_session = self.parser.session_id
        usage_before = self.parser.usage_changes
        entries = self.parser.feed(text)
        at = now_iso()  # the line and its entries: one notice
        runtime.logs.append_raw(self.task_id, self.run_id, self._seq, self.parser.last_type,
                                text, at)
        for entry in entries:
            runtime.logs.append(self.task_id, run_id=self.run_id, at=at, **entry)
            if entry.get("is_error"):
                self.hint_sandbox(entry["message"])
        if self.parser.session_id and not had_session:
            record_session(self, self.parser.session_id)
        if self.channel is not None and self.parser.last_type == "control_request":
            agent_request(self, self.parser.event)
        elif self.channel is not None and self.parser.last_type == "result":
            turn_ended(self)
        now = time.monotonic()
        if self.parser.usage_changes != usage_before and (now - self._usage_published >= 1.0
                                                 or self.parser.last_type == "result"):
            self._usage_published = now  # at most one task:usage a second per run
            publish_usage(self)

    def _on_exit(self):
        """Log what the adapter makes of the process's end (e.g. OpenCode's result)."""
        entries = self.parser.close(self.exit_code)
        at = now_iso()
        for entry in entries:
            runtime.logs.append(self.task_id, run_id=self.run_id, at=at, **entry)
        if entries and self.parser.session_id:
            publish_usage(self)

    def _on_stderr(self, text: str):
        self._seq += 1
        at = now_iso()
        runtime.logs.append_raw(self.task_id, self.run_id, self._seq, "stderr", text, at)
        runtime.logs.append(self.task_id, "stderr", _cut(text), self.run_id, at=at)
        self.hint_sandbox(text)

    def hint_sandbox(self, failure: str) -> None:
        """Say once a run, in the task's log, when the sandbox may be why a command of a
        sandboxed run failed, and what to do about it."""
        sign = None if self.sandbox is None or self.sandbox_hinted or self.task_id is None \
            else sandbox_sign(failure, self.machine.home)
        if sign is not None:
            self.sandbox_hinted = True
            runtime.logs.append(self.task_id, "system", SANDBOX_HINT.format(sign=sign),
                                self.run_id, is_error=True)
        found = None if self.sandbox is None or self.network_hinted or self.task_id is None \
            or not self.sandbox.get("net") else NET_SIGNS.search(failure)
        if found is not None:
            self.network_hinted = True
            runtime.logs.append(self.task_id, "system", NET_HINT.format(sign=found.group(0)),
                                self.run_id, is_error=True)

    def _signal(self, signum):
        if self.proc is not None:
            self.machine.kill_group(self, signum)


class PlanRun(AgentRun):
    """A planning session's agent: read-only and tied to no task; what it prints becomes
    plan:* events, and finish_plan() turns its answer into tasks."""

    def __init__(self, plan_id, project_id, values, prompt, agent="claude", **invocation):
        super().__init__(None, project_id, None, prompt, model=values["model"],
                         on_finish=finish_plan, **invocation)
        self.plan_id, self.values, self.agent = plan_id, values, agent
        self.phase = "starting"

    def stats(self) -> dict:
        usage = self.parser.usage
        return {"elapsed": int((time.monotonic() - self.started) * 1000),
                "tokens": {"input": usage["input"], "output": usage["output"]},
                "toolCalls": self.parser.tool_calls, "turns": self.parser.turns}

    def _started(self):
        record_plan_process(self)

    def _bad_line(self, text: str):
        pass  # already logged; a planner has no task log to keep it in

    def network_refused(self, message: str) -> None:
        """... a planner's: its session's log, live (plan:log, type network)."""
        _publish_plan(self, "plan:log", type="network", message=message)

    def _on_stdout(self, text: str):
        entries = self.parser.feed(text)
        plan_output(self, entries, self.parser.last_type)

    def _on_stderr(self, text: str):
        plan_output(self, [{"kind": "stderr", "message": _cut(text), "is_error": True}],
                    "stderr")

    def _on_exit(self):
        entries = self.parser.close(self.exit_code)  # what an adapter makes of the end
        if entries:
            plan_output(self, entries, "result")


class AgentPool:
    """Which task holds which agent slot: live runs, runs starting, retries waiting.  A
    slot is a task's id, or (task id, n) for its attempt n (design §18)."""

    def __init__(self):
        #: slot -> its live AgentRun
        self.runs = {}
        #: slot -> (project id, retry greenlet or None): slots held without a process
        self.waiting = {}
        #: slot -> its verifier run (verifiers hold no slot)
        self.verifiers = {}
        #: set by shutdown(): from then on no agent starts
        self.closed = False
        #: greenlets starting runs on hosts (opening a connection may take seconds)
        self.starters = set()
        #: tasks whose attempt is being picked: their other attempts stop, unsettled
        self.picking = set()
        #: slot -> the greenlet judging an attempt's work (its check): a stop kills it
        self.judging = {}

    def used(self, project_id: int) -> int:
        return len(self.tasks_of(project_id))

    def reserve(self, slot, project_id: int, limit: int | None, name="") -> bool:
        """Hold a slot for a task about to start (Conflict when none is free; limit None
        forces it); False when it holds one already.  A dying run is waited for first."""
        dying = self.runs.get(slot)
        if dying is not None and dying.stop_reason is not None:
            dying.finished.wait(KILL_GRACE_SECONDS + 5)
        if slot in self.runs or slot in self.waiting:
            return False
        if limit is not None:
            self.check_free(project_id, limit, name)
        self.waiting[slot] = (project_id, None)
        return True

    def check_free(self, project_id: int, limit: int, name="") -> None:
        """Raise Conflict when the project already uses all its agent slots."""
        if self.used(project_id) >= limit:
            raise Conflict(f"project {name!r} already runs {limit} agent"
                           f"{'s' if limit != 1 else ''} (maxConcurrent {limit}); "
                           "wait for one to finish or raise maxConcurrent")

    def release(self, slot) -> None:
        project_id, greenlet = self.waiting.pop(slot, (None, None))
        if greenlet is not None:
            greenlet.kill(block=False)

    def launch(self, run: AgentRun) -> bool:
        """Turn the task's held slot into a live run; False if the slot was given up or
        the board is shutting down."""
        if self.closed or run.slot not in self.waiting:
            return False
        self.runs[run.slot] = run
        del self.waiting[run.slot]
        try:
            run.start()
        except OSError:
            del self.runs[run.slot]
            raise
        return True

    def retry_later(self, slot, project_id: int, delay: float, start) -> None:
        """Keep the slot and call start() after delay seconds."""
        def fire():
            self.waiting[slot] = (project_id, None)  # from here on, stop() cannot kill us
            start()
        self.waiting[slot] = (project_id, gevent.spawn_later(delay, fire))

    def launch_verifier(self, run: AgentRun) -> None:
        if self.closed:
            raise OSError("the board is shutting down")
        self.verifiers[run.slot] = run
        try:
            run.start()
        except OSError:
            del self.verifiers[run.slot]
            raise

    def forget(self, run: AgentRun, keep_slot: bool = False) -> None:
        """The run is over; with keep_slot its task keeps the slot (for a retry)."""
        if self.verifiers.get(run.slot) is run:
            del self.verifiers[run.slot]
        if self.runs.get(run.slot) is run:
            del self.runs[run.slot]
            if keep_slot:
                self.waiting[run.slot] = (run.project_id, None)

    def slots(self, key) -> list:
        """The slots held (and verifiers running) for a slot, or for a task id: its own
        and its attempts'."""
        return [s for s in {**self.runs, **self.waiting, **self.verifiers, **self.judging}
                if s == key or (isinstance(s, tuple) and s[0] == key)]

    def holds(self, key) -> bool:
        return any(s in self.runs or s in self.waiting for s in self.slots(key))

    def judge(self, slot, work, *args) -> None:
        """work(*args) in a greenlet that stop() kills: an attempt's check and verdict."""
        greenlet = self.judging[slot] = gevent.spawn(work, *args)
        greenlet.link(lambda done: self.judging.get(slot) is done and self.judging.pop(slot))

    def by_run(self, run_id: int) -> AgentRun | None:
        return next((r for r in self.runs.values() if r.run_id == run_id), None)

    def tasks_of(self, project_id: int) -> list:
        """The project's slots."""
        return [t for t, r in self.runs.items() if r.project_id == project_id] + \
            [t for t, (p, _) in self.waiting.items() if p == project_id]

    def stop(self, key) -> None:
        """Kill the runs of a slot or a task, its attempts' included (each whole process
        group), and drop a waiting retry; waits until the runs are recorded."""
        runs = []
        for slot in self.slots(key):
            self.release(slot)
            if self.judging.get(slot, gevent.getcurrent()) is not gevent.getcurrent():
                self.judging.pop(slot).kill()  # not the one judging (and picking) now
            runs += filter(None, (self.runs.get(slot), self.verifiers.get(slot)))
        end_runs(runs, "stopped")

    def shutdown(self) -> None:
        """Stop every run as interrupted (its task stays in_progress, to resume later).
        A start already on its way (a queue pass, a retry) finds the pool closed."""
        self.closed = True
        gevent.killall(list(self.starters) + list(self.judging.values()))
        for task_id in list(self.waiting):
            self.release(task_id)
        end_runs([*self.runs.values(), *self.verifiers.values()], "interrupted")


def end_runs(runs: list[AgentRun], reason: str) -> None:
    """Kill every run at once, then wait until each is recorded."""
    for run in runs:
        run.kill(reason)
    for run in runs:
        run.finished.wait(KILL_GRACE_SECONDS + 5)


# --- the egress proxy (design §20) ---------------------------------------------------
# A sandboxed run's only way out: one proxy per board, which listens for each run on a
# UNIX socket of its own (its bridge's other end, so a connection says whose run it is),
# from the run's start to its end; at rest it holds nothing.  HTTP CONNECT is tunnelled,
# a plain HTTP request forwarded, each after the project's policy (NetPolicy) and a check
# of every address the name resolves to; the board itself answers only /mcp, with the
# run's token.  Each refusal is logged once per host (`network`) and counted.

#: A proxy request's head may hold at most this many bytes, and come within this time.
NET_HEAD_BYTES = 64 * 1024
NET_HEAD_SECONDS = 30
#: A tunnelled direction's bytes go from socket to socket in the kernel (os.splice), through
#: a pipe, never copied into Python: the default one (64 KiB), this size once it moves bulk
#: (where the person's pipe quota allows: pipe-user-pages-soft counts every pipe's size, so
#: an idle tunnel keeps the default); the run's end of a connection may hold NET_SEND_BYTES
#: unread, so that its forwarder reads big chunks.  Half the proxy's CPU per byte of copying
#: 64 KiB at a time through Python: a 10 MB download 0.4x direct before, 0.5-0.6x now
#: (bench/sandbox.py --download).
NET_PIPE_BYTES = 256 * 1024
NET_SEND_BYTES = 1024 * 1024
#: Hop-by-hop headers a forwarded request loses (it goes with `Connection: close`).
NET_HOP_HEADERS = ("proxy-authorization", "proxy-connection", "connection", "keep-alive")
#: inotify(7)'s events of a name leaving a folder: IN_MOVED_FROM, IN_DELETE, and the folder
#: itself going, IN_DELETE_SELF, IN_MOVE_SELF; IN_IGNORED: its watch is over.
INOTIFY_GONE = 0x40 | 0x200 | 0x400 | 0x800
INOTIFY_IGNORED = 0x8000


class Egress:
    """One sandboxed run's side of the proxy: its socket, its policy, the hosts it reached
    and was refused (NETWORK_HOSTS_KEPT of each), its refusals counted."""

    def __init__(self, run: "AgentRun", path: str, policy: NetPolicy):
        self.run, self.path, self.policy = run, path, policy
        self.server = None
        self.inode = None  # its socket's, to tell it from another put in its place
        self.group = gevent.pool.Group()  # its connections' greenlets (two each)
        self.reached = {}  # "host:port" -> True, in the order first reached
        self.refused = {}  # (host, port) -> [rule, count]
        self.count = 0

    def refuse(self, host: str, port: int, rule: str) -> None:
        """Count a refusal; the first of a host is logged where its run logs (the task's
        log, a planner's plan:log)."""
        self.count += 1
        seen = self.refused.get((host, port))
        if seen is not None:
            seen[1] += 1
            return
        if len(self.refused) >= NETWORK_HOSTS_KEPT:
            return
        self.refused[(host, port)] = [rule, 1]
        self.run.network_refused(f"refused {host}:{port} ({rule})")

    def there(self) -> bool:
        """Whether its socket is still where the sandbox found it (not removed, moved or
        replaced)."""
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

    def summary(self) -> dict:
        return {"refused": self.count, "reached": list(self.reached),
                "refusedHosts": [{"host": host, "port": port, "rule": rule, "count": count}
                                 for (host, port), (rule, count) in self.refused.items()]}


class FolderWatch:
    """inotify(7) on a folder while the proxy has runs: gone() is called whenever a name
    leaves it (deleted, moved away) or the folder itself goes.  At rest its greenlet waits
    on the descriptor; stop() ends it (a watch whose folder went ends by itself: alive)."""

    def __init__(self, folder: str, gone):
        import ctypes  # only a board with sandboxed runs needs it
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)  # IN_NONBLOCK, IN_CLOEXEC
        if self.fd < 0 or libc.inotify_add_watch(self.fd, os.fsencode(folder),
                                                 INOTIFY_GONE) < 0:
            error = ctypes.get_errno()
            if self.fd >= 0:
                os.close(self.fd)
            raise OSError(error, os.strerror(error))
        self.greenlet = gevent.spawn(self._read, gone)

    @property
    def alive(self) -> bool:
        return not self.greenlet.dead

    def stop(self) -> None:
        self.greenlet.kill()  # a greenlet not started yet never runs: its finally neither
        self._close()

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _read(self, gone) -> None:
        try:
            over = False
            while not over:
                gevent.socket.wait_read(self.fd)
                try:
                    data = os.read(self.fd, 64 * 1024)
                except BlockingIOError:
                    continue
                at = 0
                while at < len(data):  # struct inotify_event: wd, mask, cookie, len, name
                    _wd, mask, _cookie, size = struct.unpack_from("iIII", data, at)
                    over = over or bool(mask & INOTIFY_IGNORED)
                    at += 16 + size
                gone()
        finally:
            self._close()


class EgressProxy:
    """The board's egress proxy: open(run) before a sandboxed run starts, close(run) when it
    ended; close_all() at shutdown.  A run whose socket is removed meanwhile (deleted,
    moved, its folder gone) has lost its only way out: it ends, "proxy-gone", as soon as
    the folder's watch says so, else (no inotify instance left) at its next connection."""

    def __init__(self):
        self.runs = {}  # the run's id() -> Egress
        self.watch = None  # a FolderWatch on the sockets' folder while it has runs

    def open(self, run: "AgentRun", project: dict, agent: str | None) -> str:
        """A new socket for the run, served until close(run): its path."""
        folder = os.path.join(runtime.data_dir, "net")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if self.watch is None or not self.watch.alive:
            try:
                self.watch = FolderWatch(folder, self._removed)
            except OSError as exc:  # e.g. the person's inotify instances all taken
                self.watch = None
                log.warning("the egress proxy cannot watch %s (%s): a run whose socket is "
                            "removed there ends only at its next connection", folder, exc)
        name = secrets.token_hex(8) + ".sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        where = os.open(folder, os.O_PATH | os.O_DIRECTORY)
        try:  # through the folder's descriptor: a data dir's path may be longer than bind takes
            listener.bind(f"/proc/self/fd/{where}/{name}")
            listener.listen(64)
        except BaseException:
            listener.close()
            raise
        finally:
            os.close(where)
        egress = Egress(run, os.path.join(folder, name), NetPolicy(
            project["network"], json.loads(project["network_allow_json"] or "null"), agent,
            run.env))
        egress.inode = os.stat(egress.path).st_ino
        egress.server = gevent.server.StreamServer(listener, functools.partial(
            self._serve, egress), spawn=egress.group.spawn)
        egress.server.start()
        self.runs[id(run)] = egress
        return egress.path

    def close(self, run: "AgentRun") -> dict | None:
        """Stop serving the run (its connections end) and say what its network did."""
        egress = self.runs.pop(id(run), None)
        if egress is None:
            return None
        egress.server.close()
        egress.group.kill()  # each connection's greenlets close its sockets
        with contextlib.suppress(OSError):
            os.remove(egress.path)
        if not self.runs and self.watch is not None:
            self.watch.stop()
            self.watch = None
        return egress.summary()

    def _removed(self) -> None:
        """A name left the sockets' folder: a run whose socket is not there any more (or
        another is in its place) is ended."""
        for egress in list(self.runs.values()):
            if not egress.there():
                egress.run.kill("proxy-gone")

    def close_all(self) -> None:
        for egress in list(self.runs.values()):
            self.close(egress.run)

    def _serve(self, egress: Egress, client, _address) -> None:
        upstream = forth = None
        try:
            if not egress.there():  # removed unnoticed (no watch): the run ends now
                egress.run.kill("proxy-gone")
                return
            client.settimeout(NET_HEAD_SECONDS)
            head, rest = _read_head(client)
            if head is None:
                return
            method, target, lines = head
            if method == "CONNECT":
                host, port = _host_port(target)
                path = None
            elif target.startswith("/"):
                host, port, path = "127.0.0.1", NET_PORT, target
            else:
                parts = urllib.parse.urlsplit(target)
                if parts.scheme != "http" or not parts.hostname:
                    return _answer(client, 400, f"not a proxy request: {target[:200]}")
                host, port = _net_host(parts.hostname), parts.port or 80
                path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
            if host is None:
                return _answer(client, 400, f"not host:port: {target[:200]}")
            if path is not None and host in ("127.0.0.1", "localhost") and port == NET_PORT:
                upstream = self._board(egress, client, path, lines)
            else:
                upstream = self._connect(egress, client, host, port)
            if upstream is None:
                return
            client.settimeout(None)
            with contextlib.suppress(OSError):
                client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, NET_SEND_BYTES)
                upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if path is None:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.sendall(_forwarded(method, path, lines) + rest)
                rest = b""
            if rest:
                upstream.sendall(rest)
            forth = egress.group.spawn(_pipe, client, upstream)
            _pipe(upstream, client)
            if path is not None:  # a plain request is answered: its connection ends
                forth.kill()
            forth.join()
        except (OSError, ValueError, UnicodeError):
            pass
        finally:
            if forth is not None:  # never left waiting on a socket closed below
                forth.kill()
            for end in (client, upstream):
                if end is not None:
                    with contextlib.suppress(OSError):
                        end.close()

    def _board(self, egress: Egress, client, path: str, lines: list):
        """The board's /mcp for a request with the run's token (on the listener of what
        hosts' forwards bring: /mcp alone, never a local request), else refused."""
        token = next((line.split(":", 1)[1].strip() for line in lines
                      if line.lower().startswith("authorization:")), "")
        scope = runtime.run_tokens.get(token.removeprefix("Bearer ").strip())
        if path.split("?")[0] != "/mcp" or scope is None or \
                scope["project_id"] != egress.run.project_id:
            egress.refuse("board", NET_PORT, "only /mcp, with the run's token")
            return _answer(client, 403, "the board answers a run only at /mcp, with its token")
        # the listener hosts' forwards reach: /mcp alone, a run's token always needed
        upstream = dial(("127.0.0.1", runtime.forward.port()), 10)
        upstream.settimeout(None)  # a tool's answer may take its time
        return upstream

    def _connect(self, egress: Egress, client, host: str, port: int):
        """A connection to host:port as the policy allows (every address it resolves to
        checked, the one checked connected to), else refused and answered 403."""
        rule, public = egress.policy.judge(host, port)
        addresses, error = [], None
        if rule is None:
            try:
                addresses = [(host, port)] if _address(host) else [
                    info[4][:2] for info in socket.getaddrinfo(host, port,
                                                               type=socket.SOCK_STREAM)]
            except (OSError, UnicodeError) as exc:
                return _answer(client, 502, f"{host} not found: {exc}")
            inner = next((a[0] for a in addresses if public and not public_address(a[0])), None)
            if inner is not None:
                rule = f"{inner} is a loopback, link-local or private address networkAllow " \
                    "does not name"
            elif any(not public_address(a[0]) for a in addresses) and port in _board_ports():
                rule = "the board: a run reaches only its /mcp, with its token"
        if rule is not None:
            egress.refuse(host, port, rule)
            return _answer(client, 403, f"{host}:{port} refused by the project's network "
                           f"policy: {rule}")
        for address in addresses:
            try:
                upstream = dial(address, 15, socket.AF_INET6 if ":" in address[0]
                                else socket.AF_INET)
            except OSError as exc:
                error = exc
                continue
            upstream.settimeout(None)
            if len(egress.reached) < NETWORK_HOSTS_KEPT:
                egress.reached[f"{host}:{port}"] = True
            return upstream
        return _answer(client, 502, f"{host}:{port} did not answer: {error}")


def _board_ports() -> set[int]:
    """The ports the board listens on (its own, the listener of hosts' forwards)."""
    ports = {int(runtime.url.rsplit(":", 1)[1]), runtime.config["port"]}
    if runtime.forward.server is not None:
        ports.add(runtime.forward.server.server_port)
    return ports


def _address(host: str) -> bool:
    """Whether host is an IP address (nothing to resolve)."""
    with contextlib.suppress(ValueError):
        return bool(ipaddress.ip_address(host))
    return False


def _read_head(client) -> tuple[tuple | None, bytes]:
    """A request's (method, target, header lines) and the bytes read past its head."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(16384)
        if not chunk or len(data) > NET_HEAD_BYTES:
            return None, b""
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    first, *lines = head.decode("latin-1").split("\r\n")
    method, target, _version = first.split(" ", 2)
    return (method, target, lines), rest


def _host_port(target: str) -> tuple[str | None, int | None]:
    """CONNECT's host:port ([v6]:port), or (None, None)."""
    found = re.fullmatch(r"\[([^\]]+)\]:(\d{1,5})|([^:\[\]]+):(\d{1,5})", target)
    if not found:
        return None, None
    host, port = (found.group(1), found.group(2)) if found.group(1) else found.group(3, 4)
    return (_net_host(host), int(port)) if 0 < int(port) < 65536 else (None, None)


def _forwarded(method: str, path: str, lines: list) -> bytes:
    """A plain HTTP request's head as its server takes it: origin-form, hop by hop out."""
    kept = [line for line in lines if line.split(":", 1)[0].strip().lower()
            not in NET_HOP_HEADERS]
    return "\r\n".join([f"{method} {path} HTTP/1.1", *kept, "Connection: close", "", ""]) \
        .encode("latin-1")


def _answer(client, status: int, text: str) -> None:
    """The proxy's own answer (a refusal, an error), then the connection ends."""
    body = f"taskboard: {text}\n".encode()
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    with contextlib.suppress(OSError):
        client.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
                       f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                       .encode() + body)


def _pipe(source, target) -> None:
    """Move one direction of a connection until it ends, then end it on the other side: in
    the kernel, spliced through a pipe (NET_PIPE_BYTES once it fills the default one); the
    greenlet waits for the source to have bytes or the target room (its sockets must not be
    closed meanwhile: kill it first)."""
    flags, pipe, grown = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK, (), False
    try:
        pipe = out, into = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        room = fcntl.fcntl(into, fcntl.F_GETPIPE_SZ)
        while True:
            try:
                size = moved = os.splice(source.fileno(), into, room, flags=flags)
            except BlockingIOError:
                gevent.socket.wait_read(source.fileno())
                continue
            if not size:
                break
            while size:
                try:
                    size -= os.splice(out, target.fileno(), size, flags=flags)
                except BlockingIOError:
                    gevent.socket.wait_write(target.fileno())
            if moved == room and not grown:  # bulk: a bigger pipe, where the quota allows
                grown = True
                with contextlib.suppress(OSError):
                    room = fcntl.fcntl(into, fcntl.F_SETPIPE_SZ, NET_PIPE_BYTES)
    except OSError:  # a connection reset, no descriptor left for the pipe
        pass
    finally:
        for end in pipe:
            os.close(end)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


# =============================================================================
# HTTP PLUMBING
# =============================================================================

#: Who may call a route, said where it is declared (`scope=`): the owner (the board's token,
#: a session, or a board run with --no-auth), and a personal token with that scope ("read",
#: "write", "approve"); "owner": the owner alone, even to read; "tools": any credential, each
#: board tool then asking for its own (POST /mcp).  Beside it, `run_token=True`: a running
#: agent's board tools may call it too (run_token_refusal); `open=True`: it needs no
#: credential (one sent is still checked); `local=True`: it answers this machine alone.
SCOPES = ("read", "write", "approve", "owner", "tools")


class Router(bottle.Router):
    """bottle's router, compiling a method's patterns when it next matches one: bottle
    compiles them all again at each route added, a tenth of the start-up for 80 routes.
    It refuses a route that does not say who may call it (SCOPES)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stale = set()

    def add(self, rule, method, target, name=None):
        if target.config.get("scope") not in SCOPES:
            raise ValueError(f"route {method} {rule} must say who may call it: scope= one of "
                             f"{', '.join(SCOPES)}")
        super().add(rule, method, target, name)

    def _compile(self, method):
        self.stale.add(method)

    def match(self, environ):
        while self.stale:
            super()._compile(self.stale.pop())
        return super().match(environ)


app = bottle.Bottle()
vars(app)["router"] = Router()  # NOTE: Bottle refuses to have an attribute set twice
app.uninstall(bottle.JSONPlugin)

#: Where the board's files live.
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
#: Bodies of these methods change state; a foreign Origin on them is refused (CSRF).
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
#: Headers a reverse proxy adds; refused with --no-auth.
PROXY_HEADERS = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP")
#: Methods are compared exactly (RFC 9110: case-sensitive); any other gets 405.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
SESSION_COOKIE = "taskboard_session"
#: The Set-Cookie that ends a session in the browser, with the session cookie's attributes.
EXPIRED_COOKIE = f"{SESSION_COOKIE}=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict"
#: An upload's multipart body may exceed MAX_UPLOAD_BYTES by this: part headers, boundaries.
UPLOAD_SLACK_BYTES = 64 * 1024
#: A client has this long, from connecting or from the first byte after an idle keep-alive
#: wait, to send a request's line and headers: a slow client cannot hold a connection.
HEADER_TIMEOUT_SECONDS = 10.0
#: ... and its body within this many seconds of them (design §11, v5), else 408.
BODY_TIMEOUT_SECONDS = 30.0
#: A kept-alive connection waits this long for its next request, then closes.
IDLE_TIMEOUT_SECONDS = 60.0
#: Descriptors never given to client connections: the database, agents' pipes, logs, git.
FD_RESERVE = 256
#: Open client connections at most, however high the file limit (each one costs memory).
MAX_CONNECTIONS = 10_000
#: The board's pages: no inline script, nothing from elsewhere, never in a frame.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; object-src 'none'; "
                               "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY", "Cross-Origin-Opener-Policy": "same-origin",
}


#: What is gzip-compressed for a client that accepts it (design §3 v4): JSON, JS, CSS and
#: HTML (the board's page carries its stylesheets) answers over GZIP_MIN_BYTES.
COMPRESSIBLE = ("application/json", "text/javascript", "application/javascript", "text/css",
                "application/manifest+json", "text/html")
GZIP_MIN_BYTES = 1024
#: zlib's fast deflate: about half the CPU of level 5 for a few per cent more bytes.
GZIP_LEVEL = 3
#: Gzipped answers kept by their ETag, at most this many bytes: the big ones are read again
#: and again unchanged (a board's task list, a long log's detail, the board's files).
GZIP_KEPT_BYTES = 8 * 2**20


def transfer(wsgi_app):
    """The app with design §3's transfer rules around it.  A 200 answer to GET of JSON, JS,
    CSS or HTML gets an ETag (the file's, else its body's hash; weak, so that the gzip and
    plain bodies share it) and answers a matching If-None-Match with 304: only after the
    app, so never without a credential.  JSON, JS, CSS and HTML over 1 KiB are gzipped when
    Accept-Encoding allows it.  /ws and every other answer pass through untouched."""
    def with_transfer(environ, start_response):
        if environ.get("PATH_INFO") == "/ws":
            return wsgi_app(environ, start_response)
        answer = {}

        def capture(status, headers, exc_info=None):
            answer.update(status=status, headers=headers)
            return None  # bottle never writes through it
        body = wsgi_app(environ, capture)
        status, headers = answer["status"], answer["headers"]
        kind = next((v for k, v in headers if k.lower() == "content-type"), "")
        kind = kind.split(";")[0].strip().lower()
        tagged = environ.get("REQUEST_METHOD") == "GET" and status.startswith("200 ") and \
            (kind in COMPRESSIBLE or kind == "text/html")
        compress = kind in COMPRESSIBLE and status[:3] not in ("204", "206", "304")
        if not tagged and not compress:
            start_response(status, headers)
            return body
        try:
            data = b"".join(body)
        finally:
            if hasattr(body, "close"):
                body.close()
        if tagged:
            given = next((v.strip('"') for k, v in headers if k.lower() == "etag"), None)
            tag = f'W/"{given or hashlib.sha1(data, usedforsecurity=False).hexdigest()[:24]}"'
            headers = [(k, v) for k, v in headers if k.lower() != "etag"] + [("ETag", tag)]
        if compress:
            headers.append(("Vary", "Accept-Encoding"))
        if tagged and etag_matches(environ.get("HTTP_IF_NONE_MATCH", ""), tag):
            start_response("304 Not Modified", [(k, v) for k, v in headers if k.lower() in (
                "etag", "cache-control", "vary", "x-content-type-options", SEQ_HEADER.lower())])
            return []
        if compress and len(data) > GZIP_MIN_BYTES and accepts_gzip(environ):
            data = (tagged and runtime.gzipped.get(tag)) or gzip.compress(data, GZIP_LEVEL, mtime=0)
            if tagged:
                runtime.gzipped.put(tag, data)
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"] + [
                ("Content-Encoding", "gzip"), ("Content-Length", str(len(data)))]
        start_response(status, headers)
        return [data]
    return with_transfer


def etag_matches(if_none_match: str, tag: str) -> bool:
    """Whether If-None-Match names the tag (weakly compared, RFC 9110) or is `*`."""
    wanted = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
    return "*" in wanted or tag.removeprefix("W/") in wanted


def accepts_gzip(environ) -> bool:
    """Whether Accept-Encoding allows gzip (named, or `*`, with a q above 0)."""
    for coding in environ.get("HTTP_ACCEPT_ENCODING", "").lower().split(","):
        name, _, params = coding.strip().partition(";")
        if name.strip() in ("gzip", "x-gzip", "*"):
            q = re.search(r"q\s*=\s*([0-9.]+)", params)
            try:
                return not q or float(q.group(1)) > 0
            except ValueError:
                return False
    return False


def json_response(value, status: int = 200) -> str:
    """The one way JSON leaves the server (bottle turns a returned list into a 500)."""
    bottle.response.status = status
    bottle.response.content_type = "application/json"
    bottle.response.set_header("Cache-Control", "no-store")
    bottle.response.set_header("X-Content-Type-Options", "nosniff")
    return value if isinstance(value, RawJson) else json_dumps(value)


#: The header of every API answer that names the last event published before the answer
#: began (its seq): a client that reads before its /ws connection opens asks that
#: connection for what followed the lowest of these (?since=), and misses nothing between.
SEQ_HEADER = "X-Taskboard-Seq"


class ApiPlugin:
    """Refuses what refusal() refuses, answers dicts, lists and RawJson as JSON (with
    the route's `status`) and ApiErrors as the error body; each answer names the seq of
    the events it reflects (SEQ_HEADER)."""
    name, api = "taskboard_api", 2

    def apply(self, callback, route):
        status = route.config.get("status", 200)
        checks_body = route.config.get("body") != "Upload"
        # the browser may keep the answer, asking again with its ETag each time (a 304)
        revalidate = route.config.get("revalidate", False)

        @functools.wraps(callback)
        def wrapper(*args, **kwargs):
            spool = None
            # what the answer reflects at least: every event up to this seq (design §7)
            bottle.response.set_header(SEQ_HEADER, str(runtime.events.seq))
            try:
                environ = bottle.request.environ
                error = refusal(environ, route, kwargs) or \
                    (body_refusal(environ) if checks_body else None)
                if error is not None:
                    raise error
                spool = spool_chunked_body(environ, body_cap(route))
                for name, value in kwargs.items():
                    if isinstance(value, int) and not 0 < value < 2**63:
                        raise NotFound(f"{name.replace('_', ' ')} {value} not found")
                result = callback(*args, **kwargs)
            except ApiError as exc:
                for name, value in exc.headers.items():
                    bottle.response.set_header(name, value)
                return json_response(exc.body(), exc.status)
            except Exception as exc:
                error = storage_error(exc)
                if error is None:
                    raise
                log.warning("%s %s: %s", bottle.request.method, bottle.request.path, exc)
                if error.status == 503:
                    bottle.response.set_header("Retry-After", "2")
                return json_response(error.body(), error.status)
            finally:
                if spool is not None:
                    spool.close()
            if isinstance(result, (dict, list, RawJson)):
                text = json_response(result, status)
                if revalidate:
                    bottle.response.set_header("Cache-Control", "private, no-cache")
                return text
            return result
        return wrapper


app.install(ApiPlugin())

_ERROR_CODES = {400: "validation_error", 401: "unauthorized", 403: "forbidden",
                404: "not_found", 405: "method_not_allowed", 413: "payload_too_large",
                415: "unsupported_media_type"}


def _error_body(res: bottle.HTTPError) -> str:
    """JSON for errors bottle raises itself: unknown paths, wrong methods, crashes."""
    status = res.status_code
    if status == 404:
        message = f"no route for {bottle.request.path}"
    elif status == 405:
        message = f"method {bottle.request.method} is not allowed on {bottle.request.path}"
    elif status >= 500:
        message = "internal error; see the server log"
    else:
        message = str(res.body or res.status_line).lower()
    return json_response({"error": message, "code": _ERROR_CODES.get(status, "internal_error")},
                         status)


app.default_error_handler = _error_body


def body_refusal(environ) -> ApiError | None:
    """A request body must be JSON and at most 1 MiB (uploads have their own rules)."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return Invalid("content-length is not a number")
    if not length and "chunked" not in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
        return None
    if length > MAX_BODY_BYTES:
        return PayloadTooLarge(f"request body of {length} bytes is larger than 1 mib")
    media_type = environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        return UnsupportedMediaType(
            f"content-type must be application/json, not {media_type or 'missing'!r}")
    return None


def read_json(required: bool = True):
    """The request body as parsed JSON (its headers were checked by body_refusal)."""
    raw = bottle.request.body.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise PayloadTooLarge("request body is larger than 1 mib")
    if not raw:
        if required:
            raise Invalid("a json object body is required")
        return None
    try:
        text = raw.decode("utf-8")
        body = json.loads(text, parse_constant=_refuse_constant)
        storable = lone_surrogates_replaced(body, text)
    except (ValueError, RecursionError, UnicodeError) as exc:
        raise InvalidJson(f"invalid json: {str(exc)[:200].lower()}") from None
    if storable is not body:
        raise InvalidJson("invalid json: half of a utf-16 surrogate pair (\\ud800-\\udfff) "
                          "standing alone cannot be stored")
    return body


def _refuse_constant(name):
    raise ValueError(f"{name} is not valid json")


def body_cap(route) -> int:
    """The most body bytes a request to `route` may send (None: no route matched)."""
    if route is not None and route.config.get("body") == "Upload":
        return MAX_UPLOAD_BYTES + UPLOAD_SLACK_BYTES
    return MAX_BODY_BYTES


def too_large(cap: int) -> PayloadTooLarge:
    if cap == MAX_BODY_BYTES:
        return PayloadTooLarge("request body is larger than 1 mib")
    return PayloadTooLarge(f"attachment is larger than {MAX_UPLOAD_BYTES / 2**20:g} mib")


def spool_chunked_body(environ, cap: int):
    """Read a chunked body (at most cap bytes, else PayloadTooLarge) into a spool, the file
    to close after the request, and hand it to bottle with its length and without
    Transfer-Encoding: bottle would de-chunk what gevent has already de-chunked, and read
    all of it before any limit applied."""
    if "HTTP_TRANSFER_ENCODING" not in environ:
        return None
    del environ["HTTP_TRANSFER_ENCODING"]
    source, size = environ["wsgi.input"], 0
    spool = tempfile.SpooledTemporaryFile(max_size=MAX_BODY_BYTES)
    try:
        while data := source.read(min(64 * 1024, cap + 1 - size)):
            size += len(data)
            if size > cap:
                raise too_large(cap)
            spool.write(data)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    environ["wsgi.input"], environ["CONTENT_LENGTH"] = spool, str(size)
    return spool


def framing_refusal(codings: list[str], lengths: list[str], hosts: list[str]) \
        -> ApiError | None:
    """Why a request's Transfer-Encoding, Content-Length and Host headers are refused, if
    they are: anything but one `chunked` or one plain length, or a second Host, could be read
    differently by a proxy in front (request smuggling), and gevent would not de-chunk it."""
    if len(hosts) > 1:
        return Invalid("host is given more than once")
    names = [c.strip().lower() for value in codings for c in value.split(",")]
    if codings and names != ["chunked"]:
        shown = ", ".join(v.strip() for v in codings)[:100]
        return Invalid(f"transfer-encoding {shown!r} is not supported: send one 'chunked' "
                       "or a content-length")
    if codings and lengths:
        return Invalid("a request must not have both transfer-encoding and content-length")
    if len(lengths) > 1:
        return Invalid("content-length is given more than once")
    if lengths and not re.fullmatch(r"[0-9]{1,18}", lengths[0].strip()):
        return Invalid(f"content-length {lengths[0].strip()[:40]!r} is not a number")
    return None


class BoundedInput:
    """A request's body as the app reads it: from gevent's (de-chunked) input, never more
    than `cap` + 1 bytes; past the cap a read raises PayloadTooLarge. What the app leaves
    unread is skipped only when it is known to fit under the cap; otherwise the connection
    closes after the answer instead of reading on."""

    def __init__(self, raw, cap: int, length: int | None):
        self.raw, self.cap, self.length = raw, cap, length  # length None: chunked
        self.used, self.ended, self.broken = 0, length == 0, False
        self.deadline = time.monotonic() + BODY_TIMEOUT_SECONDS

    def read(self, size=-1):
        return self._take(self.raw.read, size)

    def readline(self, size=-1):
        return self._take(self.raw.readline, size)

    def _in_time(self, reader, *args):
        """reader(*args), unless the body's deadline passes first: then RequestTimeout, and
        the connection closes after the answer."""
        timer = gevent.Timeout.start_new(max(self.deadline - time.monotonic(), 0.001))
        try:
            return reader(*args)
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            self.broken = True
            raise RequestTimeout(f"the request body did not arrive within "
                                 f"{BODY_TIMEOUT_SECONDS:g} s of its headers") from None
        finally:
            timer.close()

    def __iter__(self):
        return iter(self.readline, b"")

    def _take(self, reader, size) -> bytes:
        room = self.cap + 1 - self.used
        size = room if size is None or size < 0 else min(size, room)
        if self.ended or not size:
            return b""
        try:
            data = self._in_time(reader, size)
        except OSError as exc:  # a malformed chunk, or the client gone mid-body
            self.broken = True
            raise Invalid(f"the request body cannot be read: {exc}"[:200].lower()) from None
        self.used += len(data)
        if self.used > self.cap:
            self.broken = True
            raise too_large(self.cap)
        # a short read (a line without its newline) is the end of the body
        self.ended = (len(data) < size and not data.endswith(b"\n")) or self.used == self.length
        return data

    def skippable(self) -> bool:
        """Whether the connection can take another request after this one."""
        return not self.broken and (self.ended or self.length is not None
                                    and self.length <= self.cap)

    def _discard(self):
        # gevent skips the rest of a body to reach the next request: only a bounded rest
        if not self.ended and self.skippable():
            with contextlib.suppress(RequestTimeout):  # broken: the connection closes
                self._in_time(self.raw._discard)


def query_int(name: str, default: int, lo: int, hi: int) -> int:
    raw = bottle.request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Invalid(f"{name} must be an integer, not {raw[:40]!r}", name) from None
    if not lo <= value <= hi:
        raise Invalid(f"{name} {value} is out of range {lo}..{hi}", name)
    return value


def own_origin(environ) -> bool:
    """True when the request has no Origin or comes from a page of this board."""
    origin = environ.get("HTTP_ORIGIN")
    if origin is None:
        return True
    host = environ.get("HTTP_HOST", "")
    return bool(host) and re.sub(r"^https?://", "", origin.lower()) == host.lower() \
        and origin.lower().startswith(("http://", "https://"))


def preview_origin(environ) -> bool:
    """Whether the request's Origin is a preview's (a port a preview of this board had)."""
    origin = environ.get("HTTP_ORIGIN")
    if not origin or runtime is None:
        return False
    with contextlib.suppress(ValueError):
        return urllib.parse.urlsplit(origin).port in runtime.previews.ports
    return False


def refusal(environ, route, ids: dict) -> ApiError | None:
    """Why a request must be refused before it reaches `route` (`ids`: the ids in its URL),
    if it must."""
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
    if method not in METHODS:
        return MethodNotAllowed(f"method {method[:20]!r} is not allowed")
    if route.config.get("local") and (error := local_refusal(environ)):
        return error
    name = host_name(environ)
    config = runtime.config
    # SECURITY: DNS rebinding: a page on evil.example can resolve its name to 127.0.0.1.
    if name not in LOOPBACK_NAMES and name != config["host"].lower() \
            and name not in config["allowed_hosts"]:
        return Forbidden(f"host {name[:100]!r} is not allowed: add it to "
                         "TASKBOARD_ALLOWED_HOSTS")
    # SECURITY: fetch metadata: another site may link to the board's pages, nothing more.
    if environ.get("HTTP_SEC_FETCH_SITE") == "cross-site" and not (
            environ.get("HTTP_SEC_FETCH_MODE") == "navigate" and method == "GET"
            and not path.startswith("/api/") and path != "/ws"):
        return Forbidden("cross-site requests are refused")
    # SECURITY: a task's preview (design §21) is this host on another port: same-site, so
    # the session cookie (SameSite=Strict) goes with what its pages ask of the board.  No
    # page but the board's own reaches the API or /ws.
    if path.startswith("/api/") or path == "/ws":
        if environ.get("HTTP_SEC_FETCH_SITE") == "same-site":
            return Forbidden("same-site requests are refused: only the board's own pages "
                             "reach its api")
        if preview_origin(environ):
            return Forbidden(f"origin {environ['HTTP_ORIGIN'][:100]!r} is a task's preview, "
                             "which reaches nothing of the board")
    proxied = any(h in environ for h in PROXY_HEADERS)
    if config["no_auth"] and proxied:
        # SECURITY: a board without a token must not be published through a proxy.
        return Forbidden("this board runs with --no-auth, so it refuses proxied requests")
    if method in UNSAFE_METHODS and not own_origin(environ):
        return Forbidden(f"origin {environ['HTTP_ORIGIN'][:100]!r} is not this board's")
    return credential_refusal(environ, route, ids, proxied)


def credential_refusal(environ, route, ids: dict, proxied: bool) -> ApiError | None:
    """A wrong, revoked or expired credential is always 401 (never anonymous access), and
    a client that sent too many is told to wait; a personal token or a run token is held
    to what the route declares.  A valid credential is looked at first, so it is never
    refused for failures (anyone's from the same address)."""
    bearer = environ.get("HTTP_AUTHORIZATION")
    scheme, _, value = (bearer or "").partition(" ")
    value = value.strip() if scheme.lower() == "bearer" else None
    # SECURITY: through a host's forward comes another machine, whatever the address: a run
    # token always, --no-auth or not (design §15, v5)
    if environ.get("taskboard.forwarded") and value not in runtime.run_tokens:
        return runtime.failures.refused(client_address(environ)) or Unauthorized(
            "what comes through a host's forward needs a run's token")
    if bearer is None:
        return session_refusal(environ, route)
    if is_board_token(value):
        return None
    personal = personal_token(value) if value and value.startswith(PERSONAL_TOKEN_PREFIX) \
        else None
    if personal is not None:
        environ["taskboard.token"] = personal
        return token_refusal(environ, route, personal)
    agent = runtime.run_tokens.get(value)
    if agent is None:
        return runtime.failures.refused(client_address(environ)) or \
            Unauthorized("the token is wrong, revoked or expired")
    if proxied:
        return Forbidden("the board tools reach the board directly, not through a proxy")
    environ["taskboard.agent"] = agent  # a board tool of a running agent, not a person
    return run_token_refusal(environ, route, ids, agent)


def is_board_token(value: str | None) -> bool:
    """Whether a bearer's value is the board's token (the owner's)."""
    token = runtime.config["token"]
    return value is not None and token is not None and \
        hmac.compare_digest(value.encode(), token.encode())


def session_refusal(environ, route) -> ApiError | None:
    """A request without a bearer: a route that is not open needs a live session's cookie
    (unless the board runs with --no-auth)."""
    if route.config.get("open") or runtime.config["no_auth"]:
        return None
    cookie = bottle.BaseRequest(environ).get_cookie(SESSION_COOKIE)
    if not cookie:
        return Unauthorized("a valid token is required: send 'authorization: bearer "
                            "<token>' or log in at /login")
    if session_alive(cookie):
        return None
    return runtime.failures.refused(client_address(environ)) or Unauthorized(
        "the session has ended: log in again at /login", headers={"Set-Cookie": EXPIRED_COOKIE})


class Failures:
    """Wrong credentials per client and from all clients, over LOGIN_WINDOW_SECONDS: past
    LOGIN_FAILURES_ALLOWED a client waits; past LOGIN_FAILURES_TOTAL every client that
    failed waits (a client that never failed is never locked out)."""

    def __init__(self):
        self.by_client = collections.OrderedDict()  # client -> deque of failure times
        self.every = collections.deque()

    def wait(self, client: str) -> int:
        """Seconds the client must wait before a credential of its is looked at."""
        mine = self.by_client.get(client)
        if mine is None:
            return 0
        now = time.monotonic()
        for times in (mine, self.every):
            while times and times[0] <= now - LOGIN_WINDOW_SECONDS:
                times.popleft()
        if not mine:
            del self.by_client[client]
            return 0
        if len(mine) >= LOGIN_FAILURES_ALLOWED:
            return int(mine[-LOGIN_FAILURES_ALLOWED] + LOGIN_WINDOW_SECONDS - now) + 1
        if len(self.every) >= LOGIN_FAILURES_TOTAL:
            return int(self.every[0] + LOGIN_WINDOW_SECONDS - now) + 1
        return 0

    def refused(self, client: str) -> "TooManyRequests | None":
        """A wrong credential from client: 429 while it must wait (not counted again),
        else None once the failure is counted (the caller answers 401 or 403)."""
        wait = self.wait(client)
        if not wait:
            self.add(client)
            return None
        return TooManyRequests(f"too many wrong credentials from {client}; try again in "
                               f"{wait} s", headers={"Retry-After": str(wait)})

    def add(self, client: str) -> None:
        now = time.monotonic()
        self.by_client.setdefault(client, collections.deque()).append(now)
        self.by_client.move_to_end(client)
        self.every.append(now)
        while len(self.every) > LOGIN_FAILURES_TOTAL:
            self.every.popleft()
        while len(self.by_client) > 10_000:  # many addresses: forget the least recent
            self.by_client.popitem(last=False)

    def forget(self, client: str) -> None:
        self.by_client.pop(client, None)


def client_address(environ) -> str:
    """Who is asking: the TCP peer, or, when the peer is one of TASKBOARD_TRUSTED_PROXIES,
    the last address in X-Forwarded-For that is not (a client can only prepend to it)."""
    peer = environ.get("REMOTE_ADDR", "")
    trusted = runtime.config["trusted_proxies"]
    if not trusted or not _within(peer, trusted):
        return peer
    hops = [h.strip() for h in environ.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    return next((h for h in reversed(hops) if h and not _within(h, trusted)), peer)


def _within(address: str, networks) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    return any(ip in network for network in networks)


def is_loopback_host(host: str) -> bool:
    """Whether an address to bind (or a Host name) is this machine only."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(environ) -> str:
    """The Host header's name, lower case, without the port ("[::1]:4000" -> "::1"), read
    as a URL's authority is (RFC 3986: a name, an IPv4 address or a bracketed IP, then
    digits after a colon); what is not one ("127.0.0.1:80@evil.example") comes back whole,
    so that it is no allowed name."""
    host = environ.get("HTTP_HOST", "").strip().lower()
    found = HOST_HEADER.fullmatch(host)
    if found is None:
        return host
    return found.group(1) or found.group(2)


#: A Host header (RFC 9110 §7.2): uri-host [":" port].
HOST_HEADER = re.compile(r"(?:\[([0-9a-f:.]+)\]|([a-z0-9._~!$&'()*+,;=%-]*))(?::[0-9]*)?")


def asked_by_owner(environ) -> bool:
    """Whether the request carries the board's token or a live session (or the board has
    no token): what an open route may show only to the owner."""
    if runtime.config["no_auth"]:
        return True
    scheme, _, value = (environ.get("HTTP_AUTHORIZATION") or "").partition(" ")
    if scheme.lower() == "bearer":
        return is_board_token(value.strip())
    cookie = bottle.BaseRequest(environ).get_cookie(SESSION_COOKIE)
    return bool(cookie) and session_alive(cookie)


def agent_of(environ) -> dict | None:
    """The run token's scope when a running agent's board tools make the request (None: a
    person, or a personal token)."""
    return environ.get("taskboard.agent")


def requester(environ) -> str:
    """Who makes the request, as an approval records it: a personal token, or a person."""
    token = environ.get("taskboard.token")
    return f"token:{token['name']}" if token is not None else "person"


def token_refusal(environ, route, token: dict) -> ApiError | None:
    """Why a personal token may not make this request (design §19), if it may not: the
    route's scope is not one of the token's."""
    need = route.config["scope"]
    if need == "tools":
        return None  # each tool asks for its own scope (_tools())
    if need == "owner":
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")[:100]
        if method in ("GET", "HEAD"):
            return Forbidden(f"{path} is the board owner's: a personal token cannot reach it")
        return Forbidden(f"a personal token cannot {method} {path}: that is the board owner's")
    if need not in json.loads(token["scopes_json"]):
        return Forbidden(f"token {token['name']!r} has no {need} scope")
    return None


def run_token_refusal(environ, route, ids: dict, agent: dict) -> ApiError | None:
    """A run token calls the routes declared run_token=True (by their own method: not HEAD)
    for its own project's tasks; which of them it may change, their services ask
    agent_bounds()."""
    method = environ["REQUEST_METHOD"]
    if not route.config.get("run_token") or method != route.method:
        return Forbidden(f"the board tools cannot use {method} "
                         f"{environ.get('PATH_INFO', '')[:100]}")
    return run_reach_refusal(agent, **ids)


def local_refusal(environ) -> ApiError | None:
    peer = environ.get("REMOTE_ADDR") or ""
    name = host_name(environ)
    # SECURITY: the socket's peer, never X-Forwarded-For, which anyone can send; never
    # what a host's forward brings from another machine
    if not _is_loopback(peer) or any(h in environ for h in PROXY_HEADERS) \
            or environ.get("taskboard.forwarded") \
            or name not in LOOPBACK_NAMES or not own_origin(environ):
        return LocalOnly("desktop commands answer only requests made on this machine "
                         "(loopback address and host, no proxy, no other origin)")
    return None


def _is_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)


# =============================================================================
# ROUTES
# =============================================================================

def _service_route(method: str, rule: str, service, returns: str, name=None, **config):
    """A route that hands the ids in its URL, in order, and its JSON body if it takes one,
    to a service and answers what it returns; named api_<service> unless named."""
    def call(**ids):
        return service(*ids.values(), *([read_json()] if "body" in config else []))
    app.route(rule, method, call, name=name or f"api_{service.__name__}", returns=returns,
              **config)


@app.get("/api/health", scope="read", open=True, returns="Health")
def api_health():
    return health(owner=asked_by_owner(bottle.request.environ))


@app.get("/api/agents", scope="read", returns="AgentCli[]")
def api_agents():
    return list_agents(owner=asked_by_owner(bottle.request.environ))


@app.post("/api/login", scope="owner", open=True, body="Login", returns="Ok")
def api_login():
    body = read_json()
    given = body.get("token") if isinstance(body, dict) else None
    if not isinstance(given, str):
        raise Invalid("token is required", "token")
    log_in(given)
    return {"ok": True}


def log_in(given: str) -> None:
    """Check a token (wrong ones count against the client) and set a new session's cookie."""
    token = runtime.config["token"]
    if token is None:  # --no-auth
        return
    client = client_address(bottle.request.environ)
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise runtime.failures.refused(client) or Unauthorized("wrong token")
    runtime.failures.forget(client)
    secure = bottle.request.urlparts.scheme == "https" or \
        bottle.request.get_header("X-Forwarded-Proto", "") == "https"
    bottle.response.set_cookie(SESSION_COOKIE, start_session(), path="/", httponly=True,
                               samesite="strict", secure=secure,
                               max_age=SESSION_DAYS * 86_400)


@app.post("/api/git-host/webhook", scope="owner", open=True, body="GitHostEvent",
           returns="GitHostEventResult")
def api_git_host_webhook():
    raw = bottle.request.body.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise PayloadTooLarge("request body is larger than 1 mib")
    return git_host_event(raw, bottle.request.get_header("X-Hub-Signature-256"),
                          client_address(bottle.request.environ))


@app.post("/api/logout", scope="owner", returns="Ok")
def api_logout():
    end_session(bottle.request.get_cookie(SESSION_COOKIE) or "")
    bottle.response.set_header("Set-Cookie", EXPIRED_COOKIE)
    return {"ok": True}


# --- tasks -------------------------------------------------------------------

@app.post("/api/projects/<project_id:int>/tasks", scope="write", run_token=True,
          body=TASK_FIELDS, status=201, returns="Task")
def api_create_task(project_id):
    return create_task_by(agent_of(bottle.request.environ), project_id, read_json())


@app.put("/api/tasks/<task_id:int>", scope="write", run_token=True, body=TASK_FIELDS,
         partial=True, returns="Task")
def api_update_task(task_id):
    return update_task_by(agent_of(bottle.request.environ), task_id, read_json())


@app.patch("/api/tasks/<task_id:int>/status", scope="write", run_token=True, body="Status",
           returns="Task")
def api_move_task(task_id):
    return move_task_by(agent_of(bottle.request.environ), task_id, read_json())


@app.get("/api/projects", scope="read", returns="ProjectListEntry[]",
         query={"fields": {"type": "string", "pattern": r"^[A-Za-z]+(,[A-Za-z]+)*$",
                           "description": "more fields of the full project in each entry, "
                           "comma-separated (e.g. agent,host)"}})
def api_list_projects():
    return list_projects(bottle.request.query.get("fields") or "")


@app.get("/api/folder", scope="owner", returns="Folder",
         query={"path": {"type": "string", "description": "the absolute path of a folder"}})
def api_folder():
    """What a folder would be as a project's workingDir (the new-project dialog asks)."""
    return folder_state(bottle.request.query.getunicode("path") or "")


@app.get("/api/approvals", scope="read", returns="Approval[]",
         query={"status": {"type": "string", "enum": list(APPROVAL_STATUSES)}})
def api_list_approvals():
    """Every project's approvals; ?status=pending is the "Needs you" inbox."""
    return list_approvals(bottle.request.query.get("status") or None)


@app.post("/api/approvals/<approval_id:int>", scope="approve", body=DECISION_FIELDS,
          returns="Approval")
def api_decide_approval(approval_id):
    """A person's (or a personal token's) answer to an approval or question."""
    return decide_approval(approval_id, read_json(), requester(bottle.request.environ))


@app.post("/api/approvals/<approval_id:int>/act", scope="owner", open=True, body=ACT_FIELDS,
          returns="ActResult")
def api_act_on_approval(approval_id):
    """A notification's button: its token in the body, no session."""
    return act_on_approval(approval_id, read_json(), client_address(bottle.request.environ))


@app.get("/api/tasks/<task_id:int>/logs", scope="read", returns="LogEntry[]", revalidate=True,
         query={"before": {"type": "integer", "minimum": 1, "description": "only the "
                           "entries below this id (the first id of the page you have)"},
                "kind": {"type": "string", "pattern": LOG_KIND_RE.pattern,
                         "description": "only the entries of this kind (e.g. pr)"},
                "attempt": {"type": "integer", "minimum": 1, "maximum": ATTEMPTS_MAX,
                            "description": "only the entries of attempt n's runs"}})
def api_task_logs(task_id):
    query = bottle.request.query
    before = query_int("before", 0, 1, 2**63 - 1) if "before" in query else None
    kind = query.get("kind")
    if kind is not None and not LOG_KIND_RE.fullmatch(kind):
        raise Invalid(f"kind {kind[:40]!r} is not a log entry kind", "kind")
    attempt = query_int("attempt", 0, 1, ATTEMPTS_MAX) if "attempt" in query else None
    return task_logs(task_id, query_int("limit", 500, 1, 10_000), before, kind, attempt)


# --- attachments ---------------------------------------------------------------

@app.post("/api/tasks/<task_id:int>/attachments", scope="owner", body="Upload",
          returns="Attachment", status=201)
def api_add_attachment(task_id):
    environ = bottle.request.environ
    if int(environ.get("CONTENT_LENGTH") or 0) > MAX_UPLOAD_BYTES + UPLOAD_SLACK_BYTES:
        raise too_large(MAX_UPLOAD_BYTES + UPLOAD_SLACK_BYTES)
    if not environ.get("CONTENT_TYPE", "").lower().startswith("multipart/form-data"):
        raise UnsupportedMediaType("content-type must be multipart/form-data with a 'file'")
    try:
        upload = bottle.request.files.get("file")
    except ValueError as exc:  # a malformed multipart body
        raise Invalid(f"the multipart body cannot be read: {exc}"[:200], "file") from None
    if upload is None:
        raise Invalid("multipart field 'file' is required", "file")
    return add_attachment(task_id, upload.raw_filename or "file", upload.file,
                          upload.content_type)


@app.get("/api/attachments/<attachment_id:int>", scope="read", returns="file")
def api_get_attachment(attachment_id):
    """Inline only for an inert type; anything else (older rows too) downloads as bytes.

    Always nosniff, same-origin only (no <script src>/<img> from another site) and
    sandboxed, should a browser render it anyway.
    """
    attachment, path = get_attachment(attachment_id)
    inert = INERT_MIME_TYPES.get(attachment["mimeType"])
    response = bottle.static_file(os.path.basename(path), root=os.path.dirname(path),
                                  mimetype=inert or "application/octet-stream")
    name = attachment["fileName"]
    fallback = name.encode("ascii", "replace").decode().replace('"', "_").replace("?", "_")
    response.set_header("Content-Disposition",
                        f"{'inline' if inert else 'attachment'}; filename=\"{fallback}\"; "
                        f"filename*=UTF-8''{urllib.parse.quote(name, safe='')}")
    response.set_header("X-Content-Type-Options", "nosniff")
    response.set_header("Cross-Origin-Resource-Policy", "same-origin")
    response.set_header("Content-Security-Policy", "sandbox")
    return response


# --- statistics ------------------------------------------------------------------

@app.get("/api/projects/<project_id:int>/activity", scope="read", returns="Activity[]")
def api_project_activity(project_id):
    return project_activity(project_id, query_int("limit", 50, 1, 1000),
                            query_int("offset", 0, 0, 2**62))


# --- the service routes: the index of the API ----------------------------------

#: Routes that hand the ids in their URL, and their body if they take one, to a service:
#: (method, rule, scope, service, response schema[, route config]); see _service_route()
#: and, for the scope and config's run_token and open, SCOPES.
SERVICE_ROUTES = (
    ("POST", "/api/projects", "owner", create_project, "Project",
     {"body": PROJECT_FIELDS, "status": 201}),
    ("PUT", "/api/projects/<project_id:int>", "owner", update_project, "Project",
     {"body": PROJECT_FIELDS, "partial": True}),
    ("POST", "/api/projects/<project_id:int>/plan", "owner", start_plan, "PlanStarted",
     {"body": PLAN_FIELDS}),
    ("PUT", "/api/settings", "owner", update_settings, "Settings",
     {"body": SETTINGS_FIELDS, "partial": True}),
    ("GET", "/api/projects/summary", "read", project_summaries, "ProjectSummary[]"),
    ("GET", "/api/projects/<project_id:int>", "read", get_project, "Project"),
    ("DELETE", "/api/projects/<project_id:int>", "owner", delete_project, "Ok"),
    ("GET", "/api/projects/<project_id:int>/tasks", "read", list_tasks, "Task[]",
     {"revalidate": True, "run_token": True}),
    ("GET", "/api/tasks/<task_id:int>", "read", get_task, "Task",
     {"revalidate": True, "run_token": True}),
    ("GET", "/api/tasks/<task_id:int>/detail", "read", task_detail, "TaskDetail",
     {"revalidate": True, "run_token": True}),
    ("GET", "/api/tasks/<task_id:int>/revisions", "read", task_revisions, "Revision[]"),
    ("DELETE", "/api/tasks/<task_id:int>", "owner", delete_task, "Ok"),
    ("DELETE", "/api/attachments/<attachment_id:int>", "owner", delete_attachment, "Ok"),
    ("GET", "/api/projects/<project_id:int>/webhooks/<webhook_id:int>/deliveries",
     "owner", webhook_deliveries, "Delivery[]"),
    ("POST", "/api/projects/<project_id:int>/webhooks/<webhook_id:int>/test",
     "owner", test_webhook, "SendTest"),
    ("GET", "/api/projects/<project_id:int>/plan/status", "read", plan_status, "PlanStatus"),
    ("POST", "/api/projects/<project_id:int>/plan/cancel", "owner", cancel_plan,
     "PlanCancelled"),
    ("GET", "/api/projects/<project_id:int>/stats", "read", project_stats, "ProjectStats"),
    ("GET", "/api/stats/agent-usage", "read", agent_usage, "AgentUsage"),
    ("GET", "/api/settings", "owner", get_settings, "Settings"),
    ("GET", "/api/tasks/<task_id:int>/approvals", "read", task_approvals, "Approval[]"),
    ("GET", "/api/inbox", "read", inbox, "Inbox"),
    ("GET", "/api/push/key", "owner", push_key, "PushKey"),
    ("GET", "/api/push/subscriptions", "owner", list_push_devices, "PushSubscription[]"),
    ("POST", "/api/push/subscriptions", "owner", add_push_device, "PushSubscription",
     {"body": PUSH_FIELDS, "status": 201}),
    ("DELETE", "/api/push/subscriptions/<device_id:int>", "owner", remove_push_device, "Ok"),
    ("POST", "/api/push/subscriptions/<device_id:int>/test", "owner", test_push_device,
     "SendTest"),
    ("GET", "/api/tasks/<task_id:int>/messages", "read", task_messages, "Message[]"),
    ("POST", "/api/tasks/<task_id:int>/messages", "write", post_message, "Message",
     {"body": MESSAGE_FIELDS, "status": 201}),
    ("GET", "/api/tasks/<task_id:int>/review", "read", task_review, "ReviewComment[]"),
    ("GET", "/api/hosts", "owner", list_hosts, "Host[]"),
    ("POST", "/api/hosts", "owner", create_host, "Host", {"body": HOST_FIELDS, "status": 201}),
    ("GET", "/api/hosts/<host_id:int>", "owner", get_host, "Host"),
    ("PUT", "/api/hosts/<host_id:int>", "owner", update_host, "Host",
     {"body": HOST_FIELDS, "partial": True}),
    ("DELETE", "/api/hosts/<host_id:int>", "owner", delete_host, "Ok"),
    ("POST", "/api/hosts/<host_id:int>/check", "owner", check_host, "Host"),
    ("POST", "/api/tasks/<task_id:int>/review", "owner", post_review, "Message",
     {"body": REVIEW_FIELDS, "status": 201}),
    ("POST", "/api/tasks/<task_id:int>/pr/release", "owner", release_pr_comment, "Task",
     {"body": PR_RELEASE_FIELDS}),
    ("GET", "/api/tasks/<task_id:int>/attempts", "read", list_attempts, "Attempt[]"),
    ("POST", "/api/tasks/<task_id:int>/attempts", "write", start_attempts, "Attempt[]",
     {"body": ATTEMPTS_BODY_FIELDS, "status": 202}),
    ("POST", "/api/tasks/<task_id:int>/attempts/<n:int>/pick", "write", pick_attempt,
     "Attempt[]"),
    ("GET", "/api/tasks/<task_id:int>/attempts/<n:int>/diff", "read", task_diff, "Diff"),
    ("GET", "/api/stats/attempts", "read", attempt_stats, "AttemptStats"),
    ("GET", "/api/tokens", "owner", list_tokens, "Token[]"),
    ("POST", "/api/tokens", "owner", create_token, "NewToken",
     {"body": TOKEN_FIELDS, "status": 201}),
    ("DELETE", "/api/tokens/<token_id:int>", "owner", delete_token, "Ok"),
    ("GET", "/api/projects/<project_id:int>/schedules", "read", list_schedules, "Schedule[]"),
    ("POST", "/api/projects/<project_id:int>/schedules", "owner", create_schedule, "Schedule",
     {"body": SCHEDULE_FIELDS, "status": 201}),
    ("GET", "/api/schedules/<schedule_id:int>", "read", get_schedule, "Schedule"),
    ("PUT", "/api/schedules/<schedule_id:int>", "owner", update_schedule, "Schedule",
     {"body": SCHEDULE_FIELDS, "partial": True}),
    ("DELETE", "/api/schedules/<schedule_id:int>", "owner", delete_schedule, "Ok"),
    ("POST", "/api/tasks/<task_id:int>/preview", "write", start_preview, "Preview",
     {"status": 202}),
    ("GET", "/api/tasks/<task_id:int>/preview", "read", get_preview, "Preview"),
    ("DELETE", "/api/tasks/<task_id:int>/preview", "write", stop_preview, "Preview"),
    ("POST", "/api/tasks/<task_id:int>/attempts/<n:int>/preview", "write",
     start_attempt_preview, "Preview", {"status": 202}),
    ("GET", "/api/tasks/<task_id:int>/attempts/<n:int>/preview", "read", get_attempt_preview,
     "Preview"),
    ("DELETE", "/api/tasks/<task_id:int>/attempts/<n:int>/preview", "write",
     stop_attempt_preview, "Preview"),
)
for _method, _rule, _scope, _service, _returns, *_config in SERVICE_ROUTES:
    _service_route(_method, _rule, _service, _returns, scope=_scope,
                   **(_config[0] if _config else {}))
# The five CRUD routes of each per-project resource; only the owner changes them, and reads
# webhooks (their URLs and secrets).
for _kind, _schema, _read in ((TEMPLATES, "Template", "read"), (SNIPPETS, "Snippet", "read"),
                              (WEBHOOKS, "Webhook", "owner")):
    _base = f"/api/projects/<project_id:int>/{_kind.table}"
    _service_route("GET", _base, functools.partial(list_resources, _kind), f"{_schema}[]",
                   name=f"api_list_{_kind.table}", scope=_read)
    _service_route("POST", _base, functools.partial(create_resource, _kind), _schema,
                   name=f"api_create_{_kind.noun}", scope="owner", body=_kind.fields,
                   status=201)
    _service_route("GET", f"{_base}/<item_id:int>", functools.partial(get_resource, _kind),
                   _schema, name=f"api_get_{_kind.noun}", scope=_read)
    _service_route("PUT", f"{_base}/<item_id:int>", functools.partial(update_resource, _kind),
                   _schema, name=f"api_update_{_kind.noun}", scope="owner", body=_kind.fields,
                   partial=True)
    _service_route("DELETE", f"{_base}/<item_id:int>", functools.partial(delete_resource, _kind),
                   "Ok", name=f"api_delete_{_kind.noun}", scope="owner")


# --- the board -------------------------------------------------------------------

@app.get("/static/<path:path>", scope="read", open=True)
def page_static(path: str):
    """A file of the board's pages, with the headers every page gets."""
    mimetype = "text/javascript" if path.endswith((".js", ".mjs")) else \
        "application/manifest+json" if path.endswith(".webmanifest") else True
    response = bottle.static_file(path, root=STATIC_DIR, mimetype=mimetype)
    response.set_header("Cache-Control", "no-cache")
    for name, value in PAGE_HEADERS.items():
        response.set_header(name, value)
    return response


#: What the board's first paint reads, name -> path, in the order boot.js asks for them: the
#: page carries this table (#first-data), boot.js asks for each path whose answer the page
#: does not carry, and store.js's api reads the project list's path from it.
FIRST_DATA = {"openapi": "/api/openapi.json", "settings": "/api/settings",
              "projects": "/api/projects?fields=agent,host,prFixMaxAttempts,simulated,"
                          "stopCheckCommand",
              "health": "/api/health"}
#: The views a page may open first (boot.js knows their addresses): the projects, a board,
#: a task's page (where the cards and push notifications lead).
FIRST_VIEWS = ("projects", "board", "task_detail")


@app.get("/", name="page_index", scope="read", open=True)
def page_index():
    """The board's page (board_page); opened by a signed-in browser, with the answers its
    first paint needs written into it (first_answers), so that it waits for fewer requests."""
    _, _, page, policy = board_build()
    answers = first_answers(bottle.request.environ)
    if answers is not None:
        boot = page.index("  <script>")
        page = page[:boot] + answers + page[boot:]
    # the task previews' origins (design §21), which its panel frames: their ports of the
    # host the page was asked by (an allowed one: refusal()), as the page links to them
    host = host_name(bottle.request.environ) or preview_host()
    policy += f"; frame-src http://{f'[{host}]' if ':' in host else host}:*"
    return built_page("text/html", page, {"Content-Security-Policy": policy})


def first_answers(environ) -> str | None:
    """The answers the board's first paint needs (FIRST_DATA: the API description, the
    settings, the project list, health), each in a JSON block of its own that names its
    path (data-answer) and the seq the API would name (data-seq, see SEQ_HEADER), as the
    API writes it ("<" escaped so that it stays inside its block): boot.js hands each
    one's text to whoever asks, unparsed (the API description is a quarter of a megabyte);
    None unless the request is a browser's navigation with the owner's session (or the
    board runs with --no-auth): the page is open to anyone, and the copy the service worker
    keeps has no answers (it would serve them stale; its fetch is no navigation)."""
    if environ.get("HTTP_SEC_FETCH_MODE") != "navigate" or "HTTP_AUTHORIZATION" in environ \
            or not asked_by_owner(environ):
        return None
    blocks, seq = [], runtime.events.seq  # what the answers reflect at least (SEQ_HEADER)
    for name, path in FIRST_DATA.items():
        answer = FIRST_PAINT[name]().replace("<", "\\u003c")
        blocks.append(f'  <script type="application/json" data-answer="{path}" data-seq="{seq}">'
                      f'{answer}</script>\n')
    return "".join(blocks)


#: The answer to each path of FIRST_DATA, by name, as JSON text (first_answers()); the API
#: description's is filled in by OPENAPI, which reads every route and so comes after them.
FIRST_PAINT = {"openapi": None, "settings": lambda: json_dumps(get_settings()),
               "projects": lambda: json_dumps(list_projects(
                   FIRST_DATA["projects"].partition("=")[2])),
               "health": lambda: json_dumps(health(owner=True))}


@app.get("/sw.js", scope="read", open=True)
def page_service_worker():
    """The board's service worker, at the root so that its scope is the whole board; the
    build stamp in it changes with the board's files, so an upgraded server replaces it."""
    return built_page("text/javascript", board_build()[1])


def built_page(kind: str, text: str, headers: dict | None = None) -> str:
    """A page the server builds from static/, with the headers every page gets."""
    bottle.response.content_type = f"{kind}; charset=utf-8"
    bottle.response.set_header("Cache-Control", "no-cache")
    for name, value in (PAGE_HEADERS | (headers or {})).items():
        bottle.response.set_header(name, value)
    return text


@functools.cache
def board_build() -> tuple[str, str, str, str]:
    """A stamp of the board's files and the server's version; the service worker that
    carries it with the list of the files it keeps for offline use (all but the login
    page's and its own); the board's page (board_page) and its CSP."""
    digest, files, texts = hashlib.sha256(__version__.encode()), ["/"], {}
    for folder, subfolders, names in os.walk(STATIC_DIR):
        subfolders.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            url = "/static/" + os.path.relpath(path, STATIC_DIR).replace(os.sep, "/")
            with open(path, "rb") as source:
                text = source.read()
            digest.update(url.encode() + text)
            if not name.startswith("login.") and url != "/static/sw.js":
                files.append(url)
            texts[url] = text
    stamp = digest.hexdigest()[:16]
    with open(os.path.join(STATIC_DIR, "sw.js"), encoding="utf-8") as source:
        worker = source.read().replace("__TASKBOARD_BUILD__", stamp).replace(
            "__TASKBOARD_FILES__", json_dumps(files))
    page, policy = board_page(texts)
    return stamp, worker, page, policy


def board_page(files: dict[str, bytes]) -> tuple[str, str]:
    """index.html as the server sends it, and its CSP, so that the board's first paint waits
    for few requests (design §3 v6): its classic scripts and its stylesheets written into it
    (each allowed by its hash; a stylesheet's text stays as readable as its file); its SVG
    icon as a data: URL; and a JSON block that boot.js reads: the page's modules and those
    they import ("shell", see imported), then the modules of each view in FIRST_VIEWS
    that the shell does not import, for boot.js to preload, after its data requests, the
    shell's and those of the view the address opens. Other views and dialogs load on use
    (dynamic import())."""
    texts = {url: text.decode("utf-8") for url, text in files.items()
             if url.endswith((".html", ".js", ".css"))}
    page, modules = texts["/static/index.html"], {
        url: text for url, text in texts.items() if url.startswith("/static/js/")}
    sha256 = {"script": [], "style": []}
    for kind, pattern in (("script", r'<script src="([^"]+)"></script>'),
                          ("style", r'<link rel="stylesheet" href="([^"]+)">')):
        for found in re.finditer(pattern, page):
            text = modules.pop(found[1], None) or f"/* {found[1]} */\n{texts[found[1]]}"
            sha256[kind].append(base64.b64encode(hashlib.sha256(text.encode()).digest()).decode())
            page = page.replace(found[0], f"<{kind}>{text}</{kind}>")
    policy = PAGE_HEADERS["Content-Security-Policy"]
    for kind, hashes in sha256.items():
        policy = policy.replace(f"{kind}-src 'self'", " ".join(
            [f"{kind}-src 'self'", *(f"'sha256-{h}'" for h in hashes)]))
    for found in re.finditer(r'<link rel="icon" href="([^"]+\.svg)"', page):
        icon = urllib.parse.quote(files[found[1]].decode("utf-8"), safe=" =:/'")
        page = page.replace(found[0], f'<link rel="icon" href="data:image/svg+xml,{icon}"')
    shell = imported(modules, re.findall(r'<script type="module"[^>]* src="([^"]+)"', page))
    views = {"shell": shell} | {
        name: [url for url in imported(modules, [f"/static/js/views/{name}.js"])
               if url not in shell] for name in FIRST_VIEWS}
    boot = page.index("  <script>")
    blocks = "".join(f'  <script type="application/json" id="{name}">{json_dumps(table)}</script>\n'
                     for name, table in (("first-views", views), ("first-data", FIRST_DATA)))
    return page[:boot] + blocks + page[boot:], policy


#: A module's static imports of its neighbours: `import … from "./x.js"`, `export … from`.
IMPORT_FROM = re.compile(r"^(?:import|export)\b[^;]*?[\"'](\.\.?/[^\"']+)[\"']", re.M)


def imported(modules: dict[str, str], roots) -> list[str]:
    """The roots and the modules they import at any depth, the nearest first: the order in
    which a browser on a slow network should get them."""
    order = list(dict.fromkeys(roots))
    for url in order:
        for spec in IMPORT_FROM.findall(modules.get(url, "")):
            found = posixpath.normpath(posixpath.join(posixpath.dirname(url), spec))
            if found in modules and found not in order:
                order.append(found)
    return order


@app.get("/login", scope="read", open=True)
def page_login():
    """The login page; /login?token=T (the URL printed at start) signs the browser in and
    opens the board, so the token leaves the address bar (as Jupyter does)."""
    given = bottle.request.query.get("token")
    if given is None:
        return page_static("login.html")
    try:
        log_in(given)
    except ApiError as exc:
        page = page_static("login.html")
        page.status = exc.status
        return page
    bottle.redirect("/", 303)


# =============================================================================
# WEBSOCKET
# =============================================================================

def ws_params(query: dict) -> dict:
    """The /ws query (?since= ?projectId= ?logs=) as subscribe() arguments; raises Invalid."""
    out = {"since": None, "project_id": None, "logs": []}
    for name, key in (("since", "since"), ("projectId", "project_id")):
        raw = query.get(name)
        if raw not in (None, ""):
            if not re.fullmatch(r"\d{1,18}", raw):
                raise Invalid(f"{name} must be a non-negative integer, not {raw[:40]!r}", name)
            out[key] = int(raw)
    for raw in query.getall("logs"):
        for item in raw.split(","):
            if item != "all" and not re.fullmatch(r"\d{1,18}", item):
                raise Invalid(f"logs must be task ids or 'all', not {item[:40]!r}", "logs")
            out["logs"].append(item)
    return out


class Handler(WebSocketHandler):
    """gevent-websocket's handler: /ws is refused before the upgrade (the library upgrades
    before the app runs); 101s are not logged. A request's line and headers must arrive
    within HEADER_TIMEOUT_SECONDS, a kept-alive connection closes after IDLE_TIMEOUT_SECONDS
    without a request, framings that could smuggle a request are refused, and the app reads
    the body through a BoundedInput."""
    served = 0  # requests read on this connection
    deadline = body = framing_error = None

    def handle(self):
        # NOTE: with Nagle on, keep-alive answers waited ~40 ms for a delayed ACK
        with contextlib.suppress(OSError):
            self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().handle()

    def handle_one_request(self):
        # one deadline covers the wait for a request and its line and headers, never the app
        # (get_environ ends it), so an upgraded /ws stays open however quiet it is
        self.deadline = gevent.Timeout.start_new(IDLE_TIMEOUT_SECONDS if self.served
                                                 else HEADER_TIMEOUT_SECONDS)
        try:
            return super().handle_one_request()
        except gevent.Timeout as exc:
            if exc is not self.deadline:
                raise
            return None  # the connection closes without an answer
        finally:
            self.deadline.close()
            self.served += 1
            if runtime is not None:
                runtime.memory.wake(RELEASE_MEMORY_SECONDS)

    def read_requestline(self):
        if self.served:  # kept alive: the idle wait ends with the next request's first byte
            self.rfile.peek(1)
            self.deadline.close()
            self.deadline = gevent.Timeout.start_new(HEADER_TIMEOUT_SECONDS)
        return super().read_requestline()

    def MessageClass(self, *args):
        headers = super().MessageClass(*args)
        # read_request drops a Content-Length sent beside "chunked": judge both before
        self.framing_error = framing_refusal(*(headers.get_all(name, []) for name in (
            "Transfer-Encoding", "Content-Length", "Host")))
        return headers

    def get_environ(self):
        self.deadline.close()  # the line and headers are in
        environ = super().get_environ()
        raw = self.wsgi_input
        self.body = BoundedInput(raw, self.body_cap(environ),
                                 None if raw.chunked_input else raw.content_length or 0)
        if self.framing_error is not None:
            self.body.broken = True  # never read: the connection closes after the answer
        # gevent skips what the app left through it too; an upgrade request would otherwise
        # hand the app the raw socket as its body
        self.wsgi_input = environ["wsgi.input"] = self.body
        environ["wsgi.input_terminated"] = True
        return environ

    @staticmethod
    def body_cap(environ) -> int:
        """The most body bytes the request may send: its route's (body_cap())."""
        try:
            route = app.router.match(environ)[0]
        except bottle.HTTPError:
            route = None
        return body_cap(route)

    def run_application(self):
        error = self.framing_error
        if error is None:
            return super().run_application()
        body = json_dumps(error.body()).encode()
        self.start_response(f"{error.status} {bottle.HTTP_CODES[error.status]}", [
            ("Content-Type", "application/json"), ("Content-Length", str(len(body))),
            ("X-Content-Type-Options", "nosniff")])
        self.result = [body]
        try:
            self.process_result()
        finally:
            self.result = None

    def start_response(self, status, headers, exc_info=None):
        # the rest of the body will not be read, so no next request can be found after it
        if self.body is not None and not self.body.skippable():
            headers = [*headers, ("Connection", "close")]
        return super().start_response(status, headers, exc_info)

    def handle_one_response(self):
        super().handle_one_response()
        if self.body is not None and not self.body.skippable():
            self.close_connection = True

    def upgrade_websocket(self):
        if self.environ.get("HTTP_UPGRADE", "").lower() != "websocket" \
                or self.environ.get("PATH_INFO") != "/ws":
            return None
        if error := ws_refusal(self.environ):
            self.start_response(f"{error.status} {bottle.HTTP_CODES[error.status]}",
                                [("Content-Type", "application/json"),
                                 *error.headers.items()])
            return [json_dumps(error.body()).encode()]
        return super().upgrade_websocket()

    def log_request(self):
        if "101" not in str(self.status):
            pywsgi.WSGIHandler.log_request(self)


class Server(pywsgi.WSGIServer):
    """pywsgi's server with at most `max_connections` open: at the cap it stops accepting,
    and new clients wait in the listen backlog rather than take the descriptors the store
    and the agents need."""
    max_connections = MAX_CONNECTIONS
    connections = 0

    def full(self):
        return self.connections >= self.max_connections

    def do_handle(self, sock, address):
        self.connections += 1  # counted at accept, before the handler's greenlet runs
        super().do_handle(sock, address)

    def do_close(self, sock, *args):
        super().do_close(sock, *args)
        self.connections -= 1
        if self._watcher is None and self._timer is None and not self.full():
            self._start_accepting_if_started()  # accepting had stopped at the cap


def raise_file_limit() -> int | None:
    """Raise the soft limit on open files to the hard one; the soft limit then (None: no
    limit known)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    except (ValueError, OSError) as exc:  # e.g. an unlimited hard limit on macOS
        log.info("open files stay limited to %s: %s", soft, exc)
    return None if soft == resource.RLIM_INFINITY else soft


def connection_cap(file_limit: int | None) -> int:
    """How many client connections may be open at once: FD_RESERVE below the file limit
    (half of a limit too small for that)."""
    if file_limit is None:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, max(file_limit // 2, file_limit - FD_RESERVE)))


def ws_refusal(environ) -> ApiError | None:
    # the /ws route, whatever the method: the library refuses an upgrade but by GET, after
    route, ids = app.router.match({"REQUEST_METHOD": "GET", "PATH_INFO": "/ws"})
    if error := refusal(environ, route, ids):
        return error
    if not own_origin(environ):
        return Forbidden(f"origin {environ['HTTP_ORIGIN'][:100]!r} is not this board's")
    try:
        ws_params(bottle.FormsDict(bottle._parse_qsl(environ.get("QUERY_STRING", ""))))
    except ApiError as exc:
        return exc
    return None


@app.get("/ws", scope="read")
def ws_events():
    ws = bottle.request.environ.get("wsgi.websocket")
    if ws is None:
        raise Invalid("/ws expects a websocket upgrade")
    events = runtime.events  # the runtime may be gone by the time the socket closes
    credential, unheard, expires = ws_credential(bottle.request.environ)
    sub = events.subscribe(**ws_params(bottle.request.query), credential=credential,
                           unheard=unheard)
    sub.abort = functools.partial(_ws_abort, ws.handler.socket)
    reader = gevent.spawn(_ws_read, ws, sub)
    ending = None if expires is None else gevent.spawn_later(
        max(0.0, (parse_iso(expires) - utc_now()).total_seconds()), sub.end,
        "the token expired" if credential[0] == "token" else "the session expired")
    try:
        _ws_write(ws, sub)
    finally:
        events.unsubscribe(sub)
        reader.kill()
        if ending is not None:
            ending.kill()
    return ""


def ws_credential(environ) -> tuple:
    """Who opens a /ws connection (see Subscriber), the events it may not hear, and when its
    credential expires (None: never)."""
    token = environ.get("taskboard.token")
    if token is not None:
        return ("token", token["id"]), credential_events()["owner"], token["expires_at"]
    cookie = bottle.BaseRequest(environ).get_cookie(SESSION_COOKIE)
    if "HTTP_AUTHORIZATION" not in environ and cookie and session_alive(cookie):
        return ("session", _digest(cookie)), frozenset(), runtime.sessions[_digest(cookie)]
    return None, frozenset(), None


#: What each event tells, as the GET route that reads it: a /ws client hears an event only
#: when its credential may call that route (its declared scope), so the events of what is
#: the owner's alone (hosts, webhooks, settings) never reach a personal token.
EVENT_READS = {
    "project": "/api/projects/<project_id:int>", "task": "/api/tasks/<task_id:int>",
    "dependencies": "/api/tasks/<task_id:int>",
    "template": "/api/projects/<project_id:int>/templates",
    "snippet": "/api/projects/<project_id:int>/snippets",
    "webhook": "/api/projects/<project_id:int>/webhooks",
    "plan": "/api/projects/<project_id:int>/plan/status", "settings": "/api/settings",
    "approval": "/api/approvals", "message": "/api/tasks/<task_id:int>/messages",
    "host": "/api/hosts", "attempt": "/api/tasks/<task_id:int>/attempts",
    "schedule": "/api/schedules/<schedule_id:int>",
    "preview": "/api/tasks/<task_id:int>/preview"}


@functools.cache
def credential_events() -> dict[str, frozenset]:
    """{scope: the events (EVENT_TYPES) whose EVENT_READS route needs that scope}."""
    scopes = {route.rule: route.config["scope"] for route in app.routes
              if route.method == "GET"}
    by_scope = collections.defaultdict(set)
    for event in EVENT_TYPES:
        kind = event.partition(":")[0]
        if kind in EVENT_READS:
            by_scope[scopes[EVENT_READS[kind]]].add(event)
    return {scope: frozenset(by_scope[scope]) for scope in SCOPES}


def _ws_read(ws, sub: Subscriber) -> None:
    """Clients only send keep-alives; when the socket closes, end the writer.  A message
    larger than WS_MAX_MESSAGE_BYTES ends the connection before it is read into memory."""
    used = [0]
    read = ws.raw_read

    def bounded_read(size):
        used[0] += size
        if used[0] > WS_MAX_MESSAGE_BYTES:
            raise WebSocketError(f"a client message is larger than {WS_MAX_MESSAGE_BYTES} bytes")
        return read(size)
    ws.raw_read = bounded_read  # the library reads every frame's payload through it
    with contextlib.suppress(WebSocketError):
        while True:
            used[0] = 0
            if ws.receive() is None:
                break
    sub.close()


def _ws_write(ws, sub: Subscriber) -> None:
    """The one writer of a socket: sends what is due to the subscriber, pings when idle."""
    timer = gevent.Timeout(WS_SEND_TIMEOUT_SECONDS)  # one, restarted for each frame
    while True:
        messages = sub.get(timeout=WS_PING_SECONDS)
        if messages is None and sub.ended is not None and not ws.closed:
            why = sub.ended.encode()[:120]  # a close frame's reason: at most 123 bytes
            with contextlib.suppress(WebSocketError, OSError):
                ws.raw_write(Header.encode_header(True, WebSocket.OPCODE_CLOSE, b"",
                                                  len(why) + 2, 0)
                             + struct.pack("!H", WS_CREDENTIAL_ENDED) + why)
            return
        if messages is None or ws.closed:
            return
        try:
            for message in messages:
                timer.start()
                try:
                    ws.raw_write(message.frame)  # the frame every client gets, built once
                finally:
                    timer.cancel()
        except (WebSocketError, gevent.Timeout, OSError):
            _ws_abort(ws.handler.socket)
            return


def _ws_abort(sock) -> None:
    """End a connection whose client stopped reading: a close frame could never reach it,
    so the socket itself is shut (a send blocked on it fails at once), and its close will
    reset the connection rather than keep the unsent bytes in the kernel."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)


# =============================================================================
# PREVIEW PROXY
# =============================================================================
# A preview's own origin (design §21): a listener per preview on a port of its own of the
# board's address, with the board's deadlines and framing rules (Handler) and a body cap.
# Its one-time link sets the port's cookie (tb_preview_<port>) and opens previewPath;
# without that cookie every request is 401.  What passes goes on to the dev server without
# the board's session cookie, the previews' cookies and Authorization: HTTP, and WebSocket
# upgrades (hot reload) as a tunnel.  No cookie the board's pages use is set through it.

#: Request headers never sent on to a dev server: one hop's (RFC 9110 §7.6.1), and the
#: credentials of the board (its cookies are filtered out of Cookie: preview_cookies()).
PREVIEW_DROP_REQUEST = frozenset((
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
    "upgrade", "proxy-authorization", "authorization", "content-length", "cookie"))
#: Response headers never sent back: one hop's (pywsgi frames the answer itself).
PREVIEW_DROP_RESPONSE = frozenset((
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
    "upgrade", "proxy-authenticate"))
#: A preview's cookie is kept by the browser this long at most (a preview lives shorter).
PREVIEW_COOKIE_SECONDS = 86_400
#: A request body sent to a preview is capped as an attachment is; its dev server has this
#: long to answer (a first page may compile for a while).
PREVIEW_BODY_BYTES = MAX_UPLOAD_BYTES
PREVIEW_UPSTREAM_SECONDS = 120.0
#: Open connections to one preview at most; kept-alive ones to its dev server at most; the
#: most bytes read or written at once.
PREVIEW_MAX_CONNECTIONS = 512
PREVIEW_KEPT_CONNECTIONS = 8
PREVIEW_CHUNK_BYTES = 256 * 1024
#: A dev server's answer is read strictly (RFC 9112), so that where one ends is never a
#: guess: its head is at most PREVIEW_HEAD_BYTES, a chunk's size line or a trailer at most
#: PREVIEW_LINE_BYTES, its trailers (dropped) at most PREVIEW_MAX_TRAILERS; a request body
#: up to PREVIEW_ONE_WRITE_BYTES goes with its head in one write, and an answer's head with
#: its first piece of body up to that size.
PREVIEW_HEAD_BYTES = 64 * 1024
PREVIEW_LINE_BYTES = 4096
#: A request's header lines are read (PreviewHeaders) as http.client would: at most
#: PREVIEW_MAX_HEADERS, each at most PREVIEW_LINE_LIMIT bytes.
PREVIEW_MAX_HEADERS = 100
PREVIEW_LINE_LIMIT = 65536
PREVIEW_MAX_TRAILERS = 100
PREVIEW_ONE_WRITE_BYTES = 64 * 1024
PREVIEW_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: ([\t\x20-\x7e\x80-\xff]*))?")
PREVIEW_HEADER_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):([\t\x20-\x7e\x80-\xff]*)")
PREVIEW_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,15})(?:[\t ]*;[\t\x20-\x7e\x80-\xff]*)?")


class PreviewHeaders(pywsgi.WSGIHandler):
    """A request's headers read without email.parser (pywsgi's way, a good part of what a
    proxied request costs), each line strictly `name: value`: one that is not (a folded
    line, a name with spaces, a control character), a line over PREVIEW_LINE_LIMIT or more
    than PREVIEW_MAX_HEADERS of them is a 400 and the connection ends."""

    def MessageClass(self, fp, *args):
        headers, lines = pywsgi.OldMessage(), []
        while (line := fp.readline(PREVIEW_LINE_LIMIT + 1)) not in (b"\r\n", b"\n", b""):
            header = PREVIEW_HEADER_LINE.fullmatch(line.rstrip(b"\r\n"))
            if len(line) > PREVIEW_LINE_LIMIT or not line.endswith(b"\n"):
                headers.status = f"A header line over {PREVIEW_LINE_LIMIT} bytes or cut off"
            elif header is None:
                headers.status = f"Malformed header line {line[:80]!r}"
            elif len(lines) == PREVIEW_MAX_HEADERS:
                headers.status = f"More than {PREVIEW_MAX_HEADERS} headers"
            else:
                lines.append((header[1].decode("latin-1"),
                              header[2].strip(b" \t").decode("latin-1")))
                continue
            return headers  # read_request refuses it (400), unread lines and all
        headers._headers = lines  # email.message's list, as its parser would fill it
        return headers


class PreviewHandler(Handler, PreviewHeaders):
    """Handler's deadlines and framing rules for a preview's port (its headers read by
    PreviewHeaders, below Handler's framing check); an upgrade a cookie holder asks for
    becomes a tunnel to the dev server (the board's /ws is not here)."""
    held = None  # an answer's head, until its first piece of body joins it in one write

    def body_cap(self, environ) -> int:
        return PREVIEW_BODY_BYTES

    def get_environ(self):
        environ = super().get_environ()
        environ["taskboard.target"] = self.path  # as sent: PATH_INFO is decoded
        return environ

    def upgrade_websocket(self):
        return None

    def log_request(self):
        pass  # a preview's listener logs no request (listen_preview): none is formatted

    def process_result(self):
        try:
            super().process_result()
        except PreviewRefused as exc:  # its head went: the answer ends short, and so does
            self.close_connection = True  # the connection (no next answer after it)
            log.info("preview of task %s: its answer cut short: %s",
                     self.server.preview.task_id, exc)

    def _write_with_headers(self, data):
        # the head waits for the first piece of the body: one write, so the client has no
        # second packet to wait for (the dev server sent both at once)
        self.held = b""
        try:
            super()._write_with_headers(data)
        finally:
            head, self.held = self.held, None
            if head:  # no body: the head alone
                super()._sendall(head)

    def _sendall(self, data):
        if self.held is None:
            return super()._sendall(data)
        if not self.held:
            self.held = data  # the head, a bytearray of its own
            return None
        head, self.held = self.held, None
        if len(data) > PREVIEW_ONE_WRITE_BYTES:
            super()._sendall(head)
            return super()._sendall(data)
        head += data
        return super()._sendall(head)

    def run_application(self):
        preview, environ = self.server.preview, self.environ
        if self.framing_error is None and environ.get("HTTP_UPGRADE") \
                and preview_allowed(preview, environ):
            preview.seen = time.monotonic()
            self.close_connection = True
            tunnel_preview(preview, environ, self)
            self.status, self.response_length = "101 Switching Protocols", 0
            return None
        return super().run_application()


def listen_preview(preview) -> "Server":
    """A preview's listener, started, on a free port of the board's address."""
    host = runtime.config["host"]
    server = Server((host, 0), functools.partial(preview_app, preview),
                    handler_class=PreviewHandler, log=None,
                    error_log=logging.getLogger("taskboard.preview"),
                    environ={"SERVER_NAME": host})
    server.preview, server.max_connections = preview, PREVIEW_MAX_CONNECTIONS
    server.start()
    return server


def preview_allowed(preview, environ) -> bool:
    """Whether the request carries the preview port's cookie (one of that name may be
    another path's, set by a page: any of them with its value passes)."""
    name, want = PREVIEW_COOKIE.format(port=preview.port), preview.cookie.encode()
    for pair in environ.get("HTTP_COOKIE", "").split(";"):
        key, eq, given = pair.partition("=")
        if eq and key.strip() == name and hmac.compare_digest(given.strip().encode(), want):
            return True
    return False


def _board_cookie(name: str) -> bool:
    """Whether a cookie is the board's or a preview's: never sent to, nor set by, an app."""
    return name == SESSION_COOKIE or name.startswith(PREVIEW_COOKIE.format(port=""))


def preview_headers(environ) -> list[tuple[str, str]]:
    """The request's headers as the dev server gets them: no credential of the board."""
    out = []
    for key, value in environ.items():
        if not key.startswith("HTTP_"):
            continue
        name = key[5:].replace("_", "-").lower()
        if name not in PREVIEW_DROP_REQUEST:
            out.append((name, value))
    if environ.get("CONTENT_TYPE"):
        out.append(("content-type", environ["CONTENT_TYPE"]))
    kept = [c.strip() for c in environ.get("HTTP_COOKIE", "").split(";")
            if c.strip() and not _board_cookie(c.split("=", 1)[0].strip())]
    if kept:
        out.append(("cookie", "; ".join(kept)))
    return out


def _plain(start_response, status: int, text: str) -> list[bytes]:
    body = (text + "\n").encode()
    start_response(f"{status} {bottle.HTTP_CODES[status]}", [
        ("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")])
    return [body]


def preview_app(preview, environ, start_response):
    """A preview port's one WSGI app: its link, its cookie check, then its dev server."""
    if environ.get("PATH_INFO") == PREVIEW_LINK_PATH:
        query = bottle.FormsDict(bottle._parse_qsl(environ.get("QUERY_STRING", "")))
        if not preview.take_link(query.get("t") or ""):
            return _plain(start_response, 401, "this preview link was used or has expired: "
                          "open the preview again from the board")
        preview.seen = time.monotonic()  # asked: not idle
        start_response("303 See Other", [
            ("Location", preview.path), ("Content-Length", "0"), ("Cache-Control", "no-store"),
            ("Referrer-Policy", "no-referrer"),
            ("Set-Cookie", f"{PREVIEW_COOKIE.format(port=preview.port)}={preview.cookie}; "
                           f"Path=/; HttpOnly; SameSite=Strict; Max-Age={PREVIEW_COOKIE_SECONDS}")])
        return []
    if not preview_allowed(preview, environ):
        return _plain(start_response, 401, "this is a task's preview: open it from the "
                      "board (its link sets this port's cookie)")
    preview.seen = time.monotonic()
    return forward_preview(preview, environ, start_response)


class PreviewRefused(Exception):
    """The dev server's answer cannot be read without guessing where it ends (a request
    smuggled through a kept connection would start there): it goes no further."""


class PreviewUpstream:
    """A connection to a preview's dev server (Preview.connect(): its loopback port, or its
    sandbox's bridge), kept alive between requests (Preview.idle), and its read buffer:
    an answer is read straight into it, and the body relayed from it in views."""

    def __init__(self, preview):
        self.sock = preview.connect(PREVIEW_UPSTREAM_SECONDS)
        self.buffer = bytearray(PREVIEW_CHUNK_BYTES)
        self.view = memoryview(self.buffer)
        self.start = self.end = 0  # the read bytes not used yet: buffer[start:end]
        self.heard = False  # any byte of an answer read on this connection

    def close(self) -> None:
        self.sock.close()

    def stale(self) -> bool:
        """Whether the dev server closed it while it was kept (Node does after 5 s idle),
        or sent something nobody asked for: then it takes no request (a body sent on it
        would be lost: 502)."""
        self.sock.settimeout(0)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
            return True  # its close (b""), or bytes before any request
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            self.sock.settimeout(PREVIEW_UPSTREAM_SECONDS)

    def fill(self) -> int:
        """Read what the dev server has sent (waiting up to PREVIEW_UPSTREAM_SECONDS for
        it) after the unused bytes, moved to the front first: how many bytes came."""
        if self.start:
            self.buffer[:self.end - self.start] = self.view[self.start:self.end]
            self.start, self.end = 0, self.end - self.start
        got = self.sock.recv_into(self.view[self.end:])
        self.end += got
        self.heard = self.heard or bool(got)
        return got

    def take(self, most: int) -> memoryview:
        """Up to `most` of the unused bytes (read more first if none), used up: valid until
        the next fill(); empty when the dev server closed."""
        if self.start == self.end:
            self.start = self.end = 0
            self.fill()
        end = min(self.end, self.start + most)
        piece, self.start = self.view[self.start:end], end
        return piece

    def line(self, most: int = PREVIEW_LINE_BYTES) -> bytes:
        """The next line, without its CRLF (a chunk's size, a trailer)."""
        while (at := self.buffer.find(b"\r\n", self.start, self.end)) < 0:
            if self.end - self.start > most:
                raise PreviewRefused("a line of its chunked body is too long")
            if not self.fill():
                raise PreviewRefused("it closed the connection inside its answer")
        line, self.start = bytes(self.view[self.start:at]), at + 2
        return line

    def head(self) -> tuple[int, str, list[tuple[str, str]], bool]:
        """The answer's status line and headers (interim 1xx answers skipped): its status,
        reason, headers and whether it is HTTP/1.0; raises PreviewRefused for one that is
        not plainly HTTP/1.x."""
        while True:
            while (at := self.buffer.find(b"\r\n\r\n", self.start, self.end)) < 0:
                if self.end - self.start >= PREVIEW_HEAD_BYTES:
                    raise PreviewRefused(f"its answer's head is over {PREVIEW_HEAD_BYTES} "
                                         "bytes")
                if not self.fill():
                    raise PreviewRefused("it closed the connection before a whole answer")
            lines = bytes(self.view[self.start:at]).split(b"\r\n")
            self.start = at + 4
            status = PREVIEW_STATUS_LINE.fullmatch(lines[0])
            if status is None:
                raise PreviewRefused(f"its status line {lines[0][:80]!r} is not HTTP/1.x")
            headers = []
            for line in lines[1:]:
                if (header := PREVIEW_HEADER_LINE.fullmatch(line)) is None:
                    raise PreviewRefused(f"its header line {line[:80]!r} is malformed "
                                         "(a folded line, a name with spaces, a control "
                                         "character)")
                headers.append((header[1].decode("latin-1"),
                                header[2].strip(b" \t").decode("latin-1")))
            code = int(status[2])
            if code == 101 or code >= 200:
                return code, (status[3] or b"").decode("latin-1"), headers, status[1] == b"0"
            # 100 Continue, 103 Early Hints: the final answer follows


def preview_framing(method: str, status: int, headers) -> int | str | None:
    """How the answer's body ends: its length (0: none), "chunked", or None (at the
    close); raises PreviewRefused when that is ambiguous (RFC 9112 §6.3)."""
    lengths = {v.strip() for k, v in headers if k.lower() == "content-length"}
    codings = [v for k, v in headers if k.lower() == "transfer-encoding"]
    if status == 101:
        raise PreviewRefused("it switched protocols without being asked to")
    if lengths and codings:
        raise PreviewRefused("it sent both Content-Length and Transfer-Encoding")
    if len(lengths) > 1:
        raise PreviewRefused(f"it sent different Content-Lengths {sorted(lengths)}")
    if codings and (len(codings) > 1 or codings[0].strip().lower() != "chunked"):
        raise PreviewRefused(f"its Transfer-Encoding {', '.join(codings)[:80]!r} is not "
                             "just chunked")
    length = lengths.pop() if lengths else None
    if length is not None and not re.fullmatch(r"\d{1,18}", length):
        raise PreviewRefused(f"its Content-Length {length[:40]!r} is not a number")
    if method == "HEAD" or status in (204, 304):
        return 0
    return "chunked" if codings else None if length is None else int(length)


def preview_request_head(environ, framing: str) -> bytes:
    """The request line and headers the dev server gets, in one piece."""
    head = [f"{environ['REQUEST_METHOD']} {environ['taskboard.target']} HTTP/1.1",
            *(f"{name}: {value}" for name, value in preview_headers(environ))]
    if framing:
        head.append(framing)
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")


def forward_preview(preview, environ, start_response):
    """The request sent on to the dev server (its head in one write, with a small body;
    a larger body streamed, capped and on time) on a kept-alive connection (a new one when
    a kept one turns out closed before it answered a request without a body), and its
    answer streamed back, framed as strictly as the board reads a request."""
    length = environ.get("CONTENT_LENGTH") or ""
    chunked = not length and "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
    body, first = environ["wsgi.input"], b""
    try:
        if length and int(length) <= PREVIEW_ONE_WRITE_BYTES:
            while len(first) < int(length) and (data := body.read(int(length) - len(first))):
                first += data  # BoundedInput: capped, on time
            if len(first) < int(length):
                raise Invalid(f"the request body ended after {len(first)} of its {length} "
                              "bytes")
    except ApiError as exc:  # the body: too large, too late, unreadable
        return _plain(start_response, exc.status, exc.message)
    head = preview_request_head(environ, f"content-length: {length}" if length else
                                "transfer-encoding: chunked" if chunked else "")
    sent = bool(first)
    while True:
        reused = bool(preview.idle)
        try:
            upstream = preview.idle.pop() if reused else PreviewUpstream(preview)
        except OSError as exc:
            return _plain(start_response, 502, f"the preview's server did not answer: {exc}")
        if reused and upstream.stale():
            upstream.close()
            continue
        try:
            upstream.heard = False
            upstream.sock.sendall(head + first)
            if not first:
                while data := body.read(PREVIEW_CHUNK_BYTES):
                    sent = True
                    upstream.sock.sendall(b"%x\r\n%b\r\n" % (len(data), data) if chunked
                                          else data)
                if chunked:
                    upstream.sock.sendall(b"0\r\n\r\n")
            status, reason, headers, old = upstream.head()
            framing = preview_framing(environ["REQUEST_METHOD"], status, headers)
            break
        except ApiError as exc:
            upstream.close()
            return _plain(start_response, exc.status, exc.message)
        except (OSError, PreviewRefused) as exc:
            upstream.close()
            if reused and not sent and not upstream.heard:
                continue  # the dev server closed the kept connection as it was sent
            if isinstance(exc, PreviewRefused) and upstream.heard:
                log.info("preview of task %s: its answer refused: %s", preview.task_id, exc)
                return _plain(start_response, 502, f"the preview's server answered what "
                              f"cannot be relayed: {exc}")
            return _plain(start_response, 502, f"the preview's server did not answer: {exc}")
        except BaseException:  # killed (its listener stopped) or past a deadline: it goes
            upstream.close()
            raise
    connection = ",".join(v for k, v in headers if k.lower() == "connection").lower()
    closes = framing is None or "close" in connection or old and "keep-alive" not in connection
    start_response(f"{status} {reason}", [
        (k, v) for k, v in headers if k.lower() not in PREVIEW_DROP_RESPONSE and not (
            k.lower() == "set-cookie" and _board_cookie(v.split("=", 1)[0].strip()))])
    return relay_preview(preview, upstream, framing, closes)


def relay_preview(preview, upstream, framing, closes: bool):
    """The answer's body, in views of the connection's buffer (pywsgi writes each before
    asking for the next); the connection kept for the next request when the body ended
    where its framing said and nothing followed it.  A dev server that closes early or
    breaks its framing raises PreviewRefused: the client's connection then ends."""
    kept = False
    try:
        if framing == "chunked":
            while size := preview_chunk_size(upstream.line()):
                while size:
                    if not (piece := upstream.take(size)):
                        raise PreviewRefused("it closed the connection inside a chunk")
                    size -= len(piece)
                    yield piece
                if upstream.line():
                    raise PreviewRefused("a chunk is longer than its size")
            trailers = 0
            while upstream.line():  # trailers: not relayed (pywsgi writes none)
                trailers += 1
                if trailers > PREVIEW_MAX_TRAILERS:
                    raise PreviewRefused("its chunked body has too many trailers")
        elif framing is None:
            while piece := upstream.take(PREVIEW_CHUNK_BYTES):
                yield piece
        else:
            while framing:
                if not (piece := upstream.take(framing)):
                    raise PreviewRefused("it closed the connection before the end of its "
                                         "Content-Length")
                framing -= len(piece)
                yield piece
        kept = not closes and upstream.start == upstream.end and preview.live and \
            len(preview.idle) < PREVIEW_KEPT_CONNECTIONS
    except OSError:
        raise PreviewRefused("the connection to it broke inside its answer") from None
    finally:
        if kept:
            preview.idle.append(upstream)
        else:
            upstream.close()


def preview_chunk_size(line: bytes) -> int:
    """A chunk's size from its line (chunk extensions ignored)."""
    size = PREVIEW_CHUNK_LINE.fullmatch(line)
    if size is None:
        raise PreviewRefused(f"its chunk size line {line[:40]!r} is malformed")
    return int(size[1], 16)


def tunnel_preview(preview, environ, handler) -> None:
    """An upgrade (a WebSocket: hot reload) through to the dev server, its bytes both ways
    until either side or the preview ends."""
    client = handler.socket
    try:
        upstream = preview.connect()
    except OSError as exc:
        handler.start_response("502 Bad Gateway", [("Content-Length", "0")])
        handler.write(b"")
        log.info("preview of task %s: no upgrade: %s", preview.task_id, exc)
        return
    upstream.settimeout(None)
    head = [f"{environ['REQUEST_METHOD']} {environ['taskboard.target']} HTTP/1.1",
            *(f"{name}: {value}" for name, value in preview_headers(environ)),
            "connection: Upgrade", f"upgrade: {environ['HTTP_UPGRADE']}"]
    preview.tunnels.update((client, upstream))

    def pump(read, write, other):
        try:
            while data := read(65536):
                write(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                other.shutdown(socket.SHUT_RDWR)
    try:
        upstream.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        back = gevent.spawn(pump, upstream.recv, client.sendall, client)
        pump(handler.rfile.read1, upstream.sendall, upstream)
        back.join()
    except OSError:
        pass
    finally:
        preview.tunnels.difference_update((client, upstream))
        upstream.close()


# =============================================================================
# DESKTOP ROUTES
# =============================================================================
# The spec's desktop-only commands as POST /api/desktop/<command>, with the spec's
# argument names in a JSON body.  They answer only the machine itself (design §11): a
# loopback peer, no proxy header, a loopback Host and no foreign Origin — even with a token.

def _shape(types: str = "", required: str = "", **props) -> dict:
    """An object schema from "name:type" words (a type ending in ? may also be null) and
    whole property schemas given by name; `required` names the required properties."""
    properties = {}
    for word in types.split():
        name, kind = word.split(":")
        properties[name] = {"type": [kind[:-1], "null"] if kind.endswith("?") else kind}
    schema = {"type": "object", "properties": {**properties, **props}}
    if required:
        schema["required"] = required.split()
    return schema


def _ref(name: str) -> dict:
    """The schema of a named component; "Name[]" for an array of them."""
    ref = {"$ref": f"#/components/schemas/{name.removesuffix('[]')}"}
    return {"type": "array", "items": ref} if name.endswith("[]") else ref


#: JSON schemas of the commands' arguments and results.
_ID = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
_TASK = _ref("Task")
_OK = _ref("Ok")
_AGENT_MD = _ref("AgentMd")
_OBJECT = {"type": "object"}
_IDS = {"type": "array", "items": {"type": "integer"}}
_PORT = {"type": ["integer", "null"], "minimum": 1, "maximum": 65535}
_TASK_FIELDS_IN = {
    "title": {"type": "string"}, "description": {"type": "string"},
    "acceptance_criteria": {"type": "string"},
    "task_type": {"type": "string", "enum": list(TASK_TYPES)},
    "priority": {"type": "integer", "minimum": 0, "maximum": 3}}

#: A desktop command (run(arg, body)) or a board tool (run(arguments, BoardApi)): its
#: description, the JSON schemas of its arguments and result, and (an outside client's
#: tool) the scope a personal token needs to be offered it.
Command = collections.namedtuple("Command", "doc args required returns run scope",
                                 defaults=(None,))
#: The spec's desktop commands, each a route POST /api/desktop/<name> that only the owner
#: on this machine may call; the routes, OpenAPI and docs read it.
COMMANDS = {
    "stop_task": Command(
        "Stop the task's agent; the task goes back to backlog.",
        {"id": _ID, "taskId": _ID}, [], _TASK, lambda arg, b: stop_task(arg("id"))),
    "restart_task": Command(
        "Kill the agent and start a fresh session.",
        {"id": _ID, "taskId": _ID, "mcpPort": _PORT}, [], _TASK,
        lambda arg, b: restart_task(arg("id"), arg("mcpPort"))),
    "request_changes": Command(
        "Record feedback and resume the agent's session with it.",
        {"id": _ID, "taskId": _ID, "feedback": {"type": "string", "pattern": r"\S"},
         "mcpPort": _PORT}, ["feedback"], _TASK,
        lambda arg, b: changes_from("person", arg("id"), b.get("feedback"),
                                    arg("mcpPort"))[0]),
    "get_task_diff": Command(
        "The task's diff, stats and commits.", {"taskId": _ID}, ["taskId"],
        _OBJECT, lambda arg, b: task_diff(arg("taskId"))),
    "add_task_dependency": Command(
        "Make a task wait for another (or change the condition).",
        {"taskId": _ID, "dependsOnId": _ID,
         "conditionType": {"type": "string", "enum": list(CONDITIONS), "default": "always"}},
        ["taskId", "dependsOnId"], _ref("Dependency"),
        lambda arg, b: add_dependency(arg("taskId"), arg("dependsOnId"),
                                      b.get("conditionType", "always"))),
    "remove_task_dependency": Command(
        "Remove a dependency edge.", {"taskId": _ID, "dependsOnId": _ID},
        ["taskId", "dependsOnId"], _OK,
        lambda arg, b: remove_dependency(arg("taskId"), arg("dependsOnId"))),
    "get_task_dependencies": Command(
        "The ids of the tasks a task waits for and of those waiting for it.",
        {"taskId": _ID}, ["taskId"],
        _shape("", "parents children", parents=_IDS, children=_IDS),
        lambda arg, b: task_dependencies(arg("taskId"))),
    "get_dependency_graph": Command(
        "A project's tasks and dependency edges.", {"projectId": _ID},
        ["projectId"], _OBJECT, lambda arg, b: dependency_graph(arg("projectId"))),
    "get_execution_waves": Command(
        "A project's unfinished tasks in waves that may run in parallel.",
        {"projectId": _ID}, ["projectId"], {"type": "array", "items": {
            "type": "array", "items": _TASK}},
        lambda arg, b: waves_of(arg("projectId"))),
    "get_pipeline_status": Command(
        "Each task's place in the pipeline: ready, waiting, blocked, ...",
        {"projectId": _ID}, ["projectId"], _OBJECT,
        lambda arg, b: pipeline_status(arg("projectId"))),
    "reorder_queue": Command(
        "Run a project's tasks in exactly this order.",
        {"projectId": _ID, "taskIds": {"type": "array", "minItems": 1, "uniqueItems": True,
                                       "items": _ID}}, ["projectId", "taskIds"], _OK,
        lambda arg, b: reorder_queue(arg("projectId"), b.get("taskIds"))),
    "get_agent_activity": Command(
        "The running agents of a project and the files they touch.",
        {"projectId": _ID}, ["projectId"], _OBJECT,
        lambda arg, b: agent_activity(arg("projectId"))),
    "get_active_file_map": Command(
        "Every file any running agent touches, with the tasks touching it.", {},
        [], {"type": "object", "additionalProperties": _IDS},
        lambda arg, b: agent_activity(None)["fileMap"]),
    "get_task_events": Command(
        "A task's structured events: raw agent lines, status changes, messages.",
        {"taskId": _ID, "limit": {"type": "integer", "minimum": 1, "maximum": 10_000,
                                  "default": 500}}, ["taskId"], _ref("TaskEvent[]"),
        lambda arg, b: task_events(arg("taskId"), arg("limit"))),
    "get_agent_md": Command(
        "The project's agent-instructions file.", {"projectId": _ID},
        ["projectId"], _AGENT_MD, lambda arg, b: agent_md(arg("projectId"))),
    "save_agent_md": Command(
        "Write the project's agent-instructions file.",
        {"projectId": _ID, "content": {"type": "string"}}, ["projectId", "content"],
        _AGENT_MD,
        lambda arg, b: save_agent_md(arg("projectId"), b.get("content"))),
}


def _desktop_route(name: str, command: Command) -> None:
    def local_command():  # refusal() already applied local_refusal()
        body = read_json(required=False)
        body = {} if body is None else body
        if not isinstance(body, dict):
            raise Invalid("the request body must be a json object")
        if unknown := [field for field in body if field not in command.args]:
            raise Invalid(f"unknown field {unknown[0]!r} for {name}", unknown[0])
        return command.run(functools.partial(_desktop_arg, name, body), body)
    local_command.__doc__ = f"Desktop command {name}: {command.doc}"
    app.route(f"/api/desktop/{name}", "POST", local_command, name=f"local_{name}",
              scope="owner", local=True, body="Desktop", returns="Desktop")


for _name, _command in COMMANDS.items():
    _desktop_route(_name, _command)


def _desktop_arg(command: str, body: dict, name: str) -> int | None:
    """An integer argument of a desktop command, checked against its schema in COMMANDS;
    "id", the task of stop_task, restart_task and request_changes, may come as taskId."""
    asked = name
    if name == "id" and "id" not in body:
        name = "taskId"
    schema = COMMANDS[command].args[name]
    value = body.get(name, schema.get("default"))
    if name not in body and (asked == "id" or name in COMMANDS[command].required):
        raise Invalid(f"{name} is required", name)
    if value is None and isinstance(schema["type"], list) and "null" in schema["type"]:
        return None  # a nullable argument (mcpPort) left out or sent as null
    lo, hi = schema["minimum"], schema["maximum"]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise Invalid(f"{name} must be an integer from {lo} to {hi}, not "
                      f"{json_dumps(value)[:40]}", name)
    return value


# =============================================================================
# OPENAPI
# =============================================================================

#: Response shapes that are not a field table.
_SCHEMAS = {
    "Ok": _shape("ok:boolean", "ok"),
    "Error": _shape("error:string code:string field:string", "error code"),
    "Status": {**_shape("", "status", status={"type": "string", "enum": list(STATUSES)}),
               "additionalProperties": False},
    "Upload": _shape("", "file", file={"type": "string", "format": "binary"}),
    "ProjectStats": _shape(
        "statusCounts:object typeCounts:object priorityCounts:object totalTasks:integer "
        "avgDuration:integer completedToday:integer agentRuns:integer inputTokens:integer "
        "outputTokens:integer totalCost:number worktrees:integer worktreeBytes:integer"),
    "Activity": _shape("id:integer taskId:integer? taskTitle:string event:string "
                       "from:string? to:string?",
                       timestamp={"type": "string", "format": "date-time"}),
    "Diff": _shape("diff:string branch:string", stats=_shape(
        "files:integer insertions:integer deletions:integer")),
    "AttemptStats": _shape(agents={"type": "array", "items": _shape(
        "agent:string model:string attempts:integer picks:integer winRate:number "
        "meanCostUsd:number")}),
    "AgentUsage": _shape("usage:object models:object agents:object limits:object",
                         timeline={"type": "array", "items": {"type": "object"}}),
    "Delivery": _shape("id:integer event:string attempt:integer status:integer? ok:boolean "
                       "error:string? durationMs:integer? createdAt:string"),
    "SendTest": _shape("ok:boolean status:integer? error:string", "ok status"),
    "PushKey": _shape("publicKey:string", "publicKey"),
    "Folder": _shape("path:string directory:boolean repository:boolean commit:boolean "
                     "noBranch:string?", "path directory repository commit noBranch"),
    "Inbox": _shape("count:integer", "count items", items={"type": "array", "items": _shape(
        "at:string projectId:integer projectName:string taskId:integer taskKey:string "
        "taskTitle:string", "kind at projectId taskId",
        kind={"type": "string", "enum": ["approval", "question", "review", "pull_request"]},
        approval={"anyOf": [{"$ref": "#/components/schemas/Approval"}, {"type": "null"}]},
        pr={"anyOf": [{"type": "object"}, {"type": "null"}],
            "description": "for pull_request: the task's pr (its needsYou says why)"})}),
    "PlanStarted": _shape("planId:string", "planId status",
                          status={"type": "string", "enum": ["started"]}),
    "PlanCancelled": _shape("", "status", status={"type": "string", "enum": ["cancelled"]}),
    "PlanStatus": _shape(
        "active:boolean planId:string? elapsed:integer toolCalls:integer turns:integer "
        "topic:string", "active planId",
        phase={"type": "string", "enum": ["starting", "exploring", "writing"]},
        tokens=_shape("input:integer output:integer"),
        last={"type": ["object", "null"], "description": "the latest finished session "
              "(inactive only): planId, status, topic, tasks, error, warnings, finishedAt"}),
    "Health": {"type": "object"},
    "AgentCli": _shape("name:string found:boolean? version:string? checking:boolean "
                       "package:string twoWay:boolean waitingUntil:string? projects:integer "
                       "openTasks:integer", "name found version checking package twoWay "
                       "waitingUntil projects openTasks hosts", hosts={
                           "type": "array", "description": "each host a project runs this "
                           "CLI on, with what its last check found", "items": _shape(
                               "id:integer name:string found:boolean? version:string? "
                               "projects:integer", "id name found version projects")}),
    "Login": _shape("token:string", "token"),
    "GitHostEvent": {"type": "object", "description": "the source host's webhook payload "
                     "(GitHub's shapes), signed in X-Hub-Signature-256"},
    "GitHostEventResult": _shape("ok:boolean pullRequests:integer", "ok pullRequests"),
    "ActResult": _shape("id:integer status:string decidedBy:string", "id status decidedBy"),
    "Desktop": {"type": "object", "description": "the spec's arguments and result of the "
                "desktop command (design.md §11)"},
    "AgentMd": _shape("content:string path:string exists:boolean", "content path exists"),
    "Dependency": _shape("from:integer to:integer", "from to conditionType",
                         conditionType={"type": "string", "enum": list(CONDITIONS)}),
    "TaskEvent": _shape("id:integer runId:integer? seq:integer createdAt:string "
                        "kind:string raw:string?"),
}
#: Read-only fields that are null until there is something to show.
_NULLABLE_OUTPUT = {"started_at", "completed_at", "branch_name", "pr_url", "session_id",
                    "queue_position", "last_error", "runId", "tool", "isError", "durationMs"}
#: Operations that answer 409 when the board's state forbids the change.
_CONFLICTS = {"api_create_project", "api_update_project", "api_create_task", "api_update_task",
              "api_move_task", "api_start_plan", "local_stop_task", "local_restart_task",
              "local_request_changes", "local_add_task_dependency", "local_get_agent_md",
              "local_save_agent_md", "api_decide_approval", "api_act_on_approval",
              "api_post_message", "api_post_review", "api_create_host", "api_update_host",
              "api_delete_host", "api_start_attempts", "api_pick_attempt",
              "api_create_token", "api_start_preview", "api_start_attempt_preview"}
#: Error answers, in the document's order; _operation() says which an operation gives.
_ERROR_ANSWERS = {
    "400": "invalid input",
    "403": "refused: a host that is not allowed, a foreign origin or another site, a proxied "
           "request to a --no-auth board, a board tool beyond its run's bounds, or (desktop "
           "commands) a request not made on this machine",
    "404": "not found",
    "401": "no credential where one is needed, or a wrong, revoked or expired one",
    "429": "too many wrong credentials from this client (Retry-After)",
    "503": "the database is busy: another program holds its lock (Retry-After)",
    "507": "the disk holding the database is full",
    "409": "the board's state does not allow it now",
    "413": "the body is too large (json: 1 mib, upload: 20 mib)",
    "415": "the body is not of the documented content type",
}
#: Integer query parameters by the route's last path segment: (name, min, max, default).
_QUERIES = {"logs": [("limit", 1, 10_000, 500)],
            "activity": [("limit", 1, 1000, 50), ("offset", 0, 2**62, 0)]}


def _object_schema(fields, *, only=None, request=False, partial=False) -> dict:
    props = {}
    for f in fields:
        if (only is not None and f.name not in only) or (request and f.readonly) \
                or (not request and f.write_only):
            continue
        props[f.name] = _property_schema(f)
    schema = {"type": "object", "properties": props}
    required = [f.name for f in fields if f.required and f.name in props]
    if request:
        schema["additionalProperties"] = True  # read-only fields are accepted and ignored
        if required and not partial:
            schema["required"] = required
    return schema


def _property_schema(f: Field) -> dict:
    """The field's JSON schema, with what Field.parse() and the field's check require of a
    string as a pattern."""
    prop = f.schema()
    if f.check is _check_working_dir:
        prop["pattern"] = "^/"  # an absolute path (of an existing directory)
    elif f.check is _check_webhook_url:  # URL_RE, which ignores case
        prop["pattern"] = URL_RE.pattern.replace("https?", "[Hh][Tt][Tt][Pp][Ss]?")
    elif f.kind == "str" and f.pattern is not None and f.default == "":
        prop["pattern"] = f"^$|(?:{prop['pattern']})"  # empty is allowed, as Field.parse
    elif f.kind == "str" and f.required and f.pattern is None:
        prop.update(minLength=1, pattern=r"\S")  # not empty, not only spaces
    if f.readonly and f.name in _NULLABLE_OUTPUT:
        prop["type"] = [prop["type"], "null"]
    return prop


def openapi() -> dict:
    """The OpenAPI 3.1 document of every /api route, built from the field tables."""
    schemas = dict(_SCHEMAS)
    for name, fields in (("Project", PROJECT_FIELDS), ("Task", TASK_FIELDS),
                         ("Template", TEMPLATE_FIELDS), ("Snippet", SNIPPET_FIELDS),
                         ("Webhook", WEBHOOK_FIELDS), ("Settings", SETTINGS_FIELDS),
                         ("LogEntry", LOG_FIELDS), ("Revision", REVISION_FIELDS),
                         ("Attachment", ATTACHMENT_FIELDS), ("Approval", APPROVAL_FIELDS),
                         ("Message", MESSAGE_FIELDS), ("PushSubscription", PUSH_FIELDS),
                         ("Host", HOST_FIELDS), ("Attempt", ATTEMPT_FIELDS),
                         ("Token", TOKEN_FIELDS), ("Schedule", SCHEDULE_FIELDS),
                         ("ReviewComment", REVIEW_COMMENT_FIELDS),
                         ("Preview", PREVIEW_FIELDS)):
        schemas[name] = _object_schema(fields)
    schemas["NewToken"] = _object_schema(TOKEN_FIELDS)
    schemas["NewToken"]["properties"]["secret"] = {
        "type": "string", "description": "the token itself: shown this once"}
    schemas["ProjectListEntry"] = _object_schema(PROJECT_FIELDS, only=PROJECT_LIST_FIELDS)
    summary = _object_schema(PROJECT_FIELDS, only=PROJECT_SUMMARY_FIELDS)
    summary["properties"].update({name: {"type": "integer"} for name in SUMMARY_COUNTS.values()})
    schemas["ProjectSummary"] = summary
    detail = _object_schema(TASK_FIELDS)
    detail["properties"].update({
        "commits": {"type": "array", "items": _shape("hash:string message:string")},
        "revisions": _ref("Revision[]"), "attachments": _ref("Attachment[]"),
        "logs": _ref("LogEntry[]")})
    schemas["TaskDetail"] = detail

    paths = {}
    for route in app.routes:
        if not route.rule.startswith("/api/"):
            continue
        path = re.sub(r"<(\w+)(:[^>]*)?>", r"{\1}", route.rule)
        op = _operation(route, schemas)
        if route.config.get("open"):
            op["security"] = []
        paths.setdefault(path, {})[route.method.lower()] = op
    return {"openapi": "3.1.0",
            "info": {"title": "Taskboard API", "version": __version__},
            "paths": paths, "security": [{"token": []}, {"session": []}],
            "components": {"schemas": schemas, "securitySchemes": {
                "token": {"type": "http", "scheme": "bearer",
                          "description": "the board's token (or a run's, for its tools)"},
                "session": {"type": "apiKey", "in": "cookie", "name": SESSION_COOKIE,
                            "description": "a session from /login or POST /api/login"}}}}


def _operation(route, schemas) -> dict:
    config = route.config
    op_id = route.name or route.callback.__name__
    status = str(config.get("status", 200))
    returns = config.get("returns", "Health")
    body = config.get("body")
    command = COMMANDS[op_id.removeprefix("local_")] if body == "Desktop" else None
    if returns == "file":  # its mimeType (read from its bytes) or application/octet-stream
        content = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
    else:
        schema = _ref(returns) if command is None else command.returns
        content = {"application/json": {"schema": schema}}
    responses = {status: {"description": "success", "content": content}}
    op = {"operationId": op_id,
          "parameters": [{"name": name, "in": "path", "required": True, "schema": _ID}
                         for name in re.findall(r"<(\w+):int>", route.rule)],
          "responses": responses}
    if isinstance(body, tuple):
        schemas[f"{op_id}_body"] = _object_schema(body, request=True,
                                                  partial=config.get("partial"))
        body = f"{op_id}_body"
    if command is not None:
        args = {"type": "object", "additionalProperties": False, "properties": command.args}
        if "id" in command.args:
            args["anyOf"] = [{"required": ["id"]}, {"required": ["taskId"]}]
        if command.required:
            args["required"] = command.required
        op["requestBody"] = {"required": False, "content": {"application/json": {"schema": args}}}
    elif body:
        media = "multipart/form-data" if body == "Upload" else "application/json"
        op["requestBody"] = {"required": True, "content": {media: {"schema": _ref(body)}}}
    answers = {"409": op_id in _CONFLICTS, "413": "requestBody" in op,
               "415": "requestBody" in op}
    error = {"application/json": {"schema": _ref("Error")}}
    responses.update({code: {"description": text, "content": error}
                      for code, text in _ERROR_ANSWERS.items() if answers.get(code, True)})
    for name, lo, hi, default in _QUERIES.get(route.rule.rsplit("/", 1)[-1], ()):
        op["parameters"].append({"name": name, "in": "query", "required": False, "schema": {
            "type": "integer", "minimum": lo, "maximum": hi, "default": default}})
    query = {}  # bottle keeps a route's query={name: schema} flattened: query.<name>.<key>
    for key, value in config.items():
        if key.startswith("query."):
            name, _, keyword = key.removeprefix("query.").partition(".")
            query.setdefault(name, {})[keyword] = value
    op["parameters"] += [{"name": name, "in": "query", "required": False, "schema": schema}
                         for name, schema in query.items()]
    return op


@app.get("/api/openapi.json", scope="read", revalidate=True)
@functools.cache
def api_openapi() -> RawJson:
    """The OpenAPI document as JSON text, made once: routes and field tables are fixed
    once the module is loaded (it took 6.7 ms to build, at every board's start)."""
    return RawJson(json_dumps(openapi()))


FIRST_PAINT["openapi"] = api_openapi  # the first paint's description (ROUTES)


# --- the README's reference, made from the same tables -------------------------------

def _md(value) -> str:
    """A JSON value as the README writes it: `true`, `null`, `"main"` ..."""
    text = json_dumps(value) if not isinstance(value, str) or value == "" else value
    return f"`{text}`".replace("|", "\\|")


def _md_values(field: Field) -> str:
    """What a field takes, in words: its type, choices, range, length, pattern."""
    kind = field.kind
    words = {"enum": ", ".join(_md(c) for c in field.choices or ()),
             "flag": "`1`/`0` (`true`/`false` accepted)", "bool": "`true`/`false`",
             "tools": "string or array", "time": "timestamp", "secret": "string",
             "json": f"JSON {field.shape.get('type', 'value')}"}.get(kind, {
                 "str": "string", "int": "integer", "number": "number"}.get(kind, kind))
    if field.lo is not None and field.hi is not None:
        words += f" {field.lo}–{field.hi}"
    if field.maxlen:
        words += f", ≤ {field.maxlen:,} characters"
    if field.pattern is not None:
        words += f" {_md(field.pattern.pattern)}"
    if field.nullable:
        words += " or `null`"
    return words


def _md_meaning(field: Field) -> str:
    """A field's doc as a README cell, marked read-only, write-only or required."""
    mark = "read-only: " if field.readonly else "write-only: " if field.write_only else \
        "required: " if field.required else ""
    return (mark + field.doc).replace("|", "\\|").replace("\n", " ")


def _md_default(field: Field) -> str:
    if field.kind == "bool" and field.default is not None:
        return _md(bool(field.default))
    return "" if field.default is None and not field.nullable else _md(field.default)


def readme_reference() -> dict[str, str]:
    """The README's blocks made from the tables (the settings', the project's fields and
    EVENT_TYPES; between `<!-- generated: NAME -->` and `<!-- /generated -->`), by name:
    tools/readme_reference.py writes them, and tests/test_docs.py fails while README.md
    says otherwise."""
    def table(head: str, rows) -> str:
        cells = head.split("|")
        return "\n".join([f"| {' | '.join(cells)} |", "|" + "---|" * len(cells),
                          *(f"| {' | '.join(row)} |" for row in rows)])
    settings = table("setting|default|values|meaning", (
        (f"`{f.name}`", _md_default(f), _md_values(f), _md_meaning(f))
        for f in SETTINGS_FIELDS))
    project = table("field|default|values|meaning", (
        (f"`{f.name}`", _md_default(f), _md_values(f), _md_meaning(f))
        for f in PROJECT_FIELDS))
    events = table("event|data", (  # events side by side with the same data share a row
        (", ".join(f"`{name}`" for name, _ in group), data.replace("|", "\\|"))
        for data, group in itertools.groupby(EVENT_TYPES.items(), key=lambda item: item[1])))
    return {"settings": settings, "project-fields": project, "events": events}


# =============================================================================
# BOARD TOOLS (MCP)
# =============================================================================
# Each task run gets, through --mcp-config, the board tools: a stdio MCP server (`python
# taskboard.py --mcp --url URL`) whose token reaches only that project's tasks, and only while
# the run lives.


#: The other way to start this module, as `--help` says it.
MCP_USAGE = """\
The board's MCP over stdio, for an MCP client that starts its servers (Claude Desktop):
  taskboard.py --mcp --url http://127.0.0.1:4000
with TASKBOARD_TOKEN set to the board's token or a personal token (see the README's
"MCP for any client"; run it with the Python that has the board's dependencies)."""


def mcp_serve(argv: list[str]) -> int:
    """The board's MCP over stdio until stdin closes, for a client that starts its servers
    (a run's CLI, Claude Desktop): the handshake is answered here (and a run's tool list:
    a CLI starts even while the board cannot be reached); every other message goes to POST
    /mcp with the token (a run's, from its config file or TASKBOARD_MCP_TOKEN; else
    TASKBOARD_TOKEN: the board's or a personal one) and its answer comes back."""
    parser = argparse.ArgumentParser(prog="taskboard.py --mcp", description=MCP_USAGE)
    parser.add_argument("--url", required=True, help="the board, e.g. http://127.0.0.1:8080")
    parser.add_argument("--config", help="the run's 0600 config file: its token and task "
                        "(a CLI that does not hand its environment to MCP servers)")
    args = parser.parse_args(argv)
    env = os.environ
    if args.config:
        with open(args.config, encoding="utf-8") as f:
            env = json.load(f)["mcpServers"][BOARD_TOOLS_SERVER]["env"]
    board = requests.Session()
    board.headers.update({"Content-Type": "application/json", "Accept": "application/json"})
    run_token = env.get("TASKBOARD_MCP_TOKEN") or ""
    token = run_token or env.get("TASKBOARD_TOKEN")
    if token:
        board.headers["Authorization"] = f"Bearer {token}"
    # a run's CLI must start even while the board is away: its handshake and tools (the same
    # for every run) are answered here, for a run's token alone (the tools follow the token,
    # never TASKBOARD_TASK_ID); a person's client hears at once when the board is not there
    # or refuses its token
    here = ("initialize", "ping", "tools/list") if run_token and not run_token.startswith(
        PERSONAL_TOKEN_PREFIX) else ()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            message = None  # the board answers what is not JSON (-32700)
        if isinstance(message, dict) and message.get("method") in here:
            answer = {"jsonrpc": "2.0", "id": message.get("id"),
                      **_mcp_reply(message, None, RUN_TOOLS)}
        else:
            try:
                response = board.post(args.url.rstrip("/") + "/mcp", data=line.encode(),
                                      timeout=120)
                answer = response.json() if response.status_code != 202 else None
                if response.status_code == 401:
                    answer = {"error": (f"the board at {args.url} refused TASKBOARD_TOKEN"
                                        if token else "no token: TASKBOARD_TOKEN is not set")
                              + ": set it to the board's token or a personal token (the "
                              "board's Settings → Personal tokens)"}
            except (requests.RequestException, ValueError) as exc:
                answer = {"error": f"the board at {args.url} did not answer ({exc}): is it "
                          f"running there? (--url; its default port is "
                          f"{next(o.default for o in OPTIONS if o.flag == '--port')})"}
            if isinstance(answer, dict) and "jsonrpc" not in answer:  # refused before /mcp
                known = message if isinstance(message, dict) else {}
                answer = None if message is not None and "id" not in known else {
                    "jsonrpc": "2.0", "id": known.get("id"),
                    "error": {"code": -32000, "message": str(answer["error"])}}
        if answer is not None:
            sys.stdout.write(json_dumps(answer) + "\n")
            sys.stdout.flush()
    return 0


def mcp_http(body, environ):
    """POST /mcp: the answers to a JSON-RPC message or batch; None when it held only
    notifications.  The tools call the board's services, within the bounds of the
    request's credential (a run's token keeps its bounds)."""
    board = BoardApi(agent_of(environ), requester(environ))
    messages = body if isinstance(body, list) else [body]
    if not messages:
        raise RpcError(-32600, "invalid request: an empty batch")
    if len(messages) > MCP_MAX_BATCH:
        raise RpcError(-32600, f"invalid request: a batch holds at most {MCP_MAX_BATCH} "
                       f"messages, not {len(messages)}")
    answers, size = [], 0
    for message in messages:
        if not _rpc_request(message):
            answers.append({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": "invalid request"}})
        elif "id" in message and size > MCP_MAX_ANSWER_CHARS:
            answers.append({"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": -32000, "message": f"not answered: the batch's answer is over "
                f"{MCP_MAX_ANSWER_CHARS} characters; ask again with fewer calls"}})
        elif "id" in message:
            answers.append({"jsonrpc": "2.0", "id": message["id"], **_mcp_reply(
                message, board, _tools(environ))})
            size += len(json_dumps(answers[-1]))
        gevent.sleep(0)  # one call at a time: the board answers others in between
    if not answers:
        return None
    return answers if isinstance(body, list) else answers[0]


#: A JSON-RPC batch to POST /mcp holds at most this many messages, and its answer stops
#: calling tools past this many characters (probe v5: one 1 MiB batch of list_tasks calls
#: made a 602 MB answer and stalled the board).
MCP_MAX_BATCH = 100
MCP_MAX_ANSWER_CHARS = 4 * 2**20


def _rpc_request(message) -> bool:
    """Whether a message is a JSON-RPC 2.0 request or notification: "jsonrpc": "2.0", a
    method, and an id (when there is one) a string, a number or null."""
    return isinstance(message, dict) and message.get("jsonrpc") == "2.0" and \
        isinstance(message.get("method"), str) and (
            "id" not in message or message["id"] is None or
            isinstance(message["id"], str | int | float) and not isinstance(message["id"], bool))


#: The protocol revisions of the initialize handshake the board speaks, newest last.
MCP_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
_TASK_ID = {"type": "integer", "minimum": 1, "description": "the task's id (not its key)"}
_LIST_ENTRY = tuple(f for f in TASK_FIELDS if f.name in (
    "id", "task_key", "title", "status", "priority", "task_type", "agent", "is_running",
    "pending_approvals", "parent_task_id"))

#: The board's work for an outside MCP client (design §19), with the board's token or a
#: personal token: each tool under the scope it needs (Command.scope), offered only to a
#: token that has it.  A run's token gets RUN_TOOLS instead.
CLIENT_TOOLS = {
    "list_projects": Command(
        "List the board's projects: id, name, slug, workingDir (the code folder its "
        "agents work in) and agent (the CLI its tasks run). Start here to find a project_id.",
        {}, [], {"type": "array", "items": _OBJECT},
        lambda a, board: list_projects("agent"), scope="read"),
    "list_tasks": Command(
        "List the tasks of a project, priority first: id, task_key, title, status "
        "(backlog, in_progress, testing, done, failed), priority (0-3), task_type, agent, "
        "is_running, pending_approvals (requests waiting for an answer) and parent_task_id. "
        "Give status to list only those; at most limit (default 100) are listed.",
        {"project_id": _ID, "status": {"type": "string", "enum": list(STATUSES)},
         "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}},
        ["project_id"], {"type": "array", "items": _OBJECT},
        lambda a, board: client_task_list(a["project_id"], a.get("status"),
                                          a.get("limit", 100)), scope="read"),
    "get_task": Command(
        "One task: every field, its newest 20 log lines (what its agent did and said) "
        "and its pending requests (approvals and questions; answer them with "
        "answer_request).", {"task_id": _TASK_ID}, ["task_id"], _OBJECT,
        lambda a, board: _task_for_client(int(a["task_id"]), board), scope="read"),
    "create_task": Command(
        "Create a task in a project's backlog (status in_progress starts its agent "
        "at once). title is required; description says what to do, acceptance_criteria when "
        "it is done.", {"project_id": _ID, **_TASK_FIELDS_IN, "status": {
            "type": "string", "enum": ["backlog", "in_progress"]}},
        ["project_id", "title"], _TASK,
        lambda a, board: board.create(int(a["project_id"]), {
            k: v for k, v in a.items() if k != "project_id"}), scope="write"),
    "update_task": Command(
        "Change fields of a task (title, description, acceptance_criteria, "
        "task_type, priority); use move_task for its status.",
        {"task_id": _TASK_ID, **_TASK_FIELDS_IN}, ["task_id"], _TASK,
        lambda a, board: board.update(int(a["task_id"]), {
            k: v for k, v in a.items() if k != "task_id"}), scope="write"),
    "move_task": Command(
        "Move a task to a status: in_progress starts its agent, testing waits for "
        "review, done approves the work, backlog stops its agent, failed gives it up.",
        {"task_id": _TASK_ID, "status": {"type": "string", "enum": list(STATUSES)}},
        ["task_id", "status"], _TASK,
        lambda a, board: board.move(int(a["task_id"]), a.get("status")), scope="write"),
    "stop_task": Command(
        "Stop a running task's agent (every process of it); the task goes back to "
        "the backlog.", {"task_id": _TASK_ID}, ["task_id"], _TASK,
        lambda a, board: stop_task(int(a["task_id"])), scope="write"),
    "list_requests": Command(
        "Every request of a running agent waiting for an answer, in every project: "
        "tool calls it asks to make (kind tool: toolName and input) and questions it asks "
        "(kind question: input.questions with their options). Answer with answer_request.",
        {}, [], {"type": "array", "items": _OBJECT},
        lambda a, board: list_approvals("pending"), scope="read"),
    "answer_request": Command(
        "Answer a request of list_requests by its id: decision allow or deny (a "
        "tool call; message tells the agent why when denying); for a question, decision "
        "allow with answers {question text: chosen label, or labels, or your own text}.",
        {"id": _ID, "decision": {"type": "string", "enum": list(DECISIONS)},
         "message": {"type": "string"}, "answers": {"type": "object"}},
        ["id", "decision"], _ref("Approval"),
        lambda a, board: decide_approval(int(a["id"]), {
            k: v for k, v in a.items() if k != "id"}, board.decided_by), scope="approve"),
    "send_message": Command(
        "Send a message to a task's agent: a running agent reads it when its turn "
        "ends (interrupt true: at once); a task in testing or failed resumes its agent with "
        "it as a change request.", {"task_id": _TASK_ID, "text": {"type": "string"},
                                    "interrupt": {"type": "boolean"}},
        ["task_id", "text"], _ref("Message"),
        lambda a, board: post_message(int(a["task_id"]), {
            k: v for k, v in a.items() if k != "task_id"}), scope="write"),
}


def client_task_list(project_id, status, limit) -> RawJson:
    """list_tasks of an outside client: a page of the project's tasks, each in brief."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"status {json_dumps(status)[:40]} is not one of: {', '.join(STATUSES)}")
    if not isinstance(limit, int) or not 0 < limit <= 1000:
        raise ValueError(f"limit {json_dumps(limit)[:40]} is not an integer in 1..1000")
    return RawJson(found(task_list_json(int(project_id), json_object_sql(_LIST_ENTRY), status,
                                        limit), f"project {project_id} not found"))


def _task_for_client(task_id: int, board: "BoardApi") -> dict:
    task = board.task(task_id)
    return {**task, "logs": json.loads(task_logs(task_id, 20)), "requests": [
        a for a in task_approvals(task_id) if a["status"] == "pending"]}


#: A run's board tools (design §6), in the order its prompt names them (RUN_TOOL_NAMES).
RUN_TOOLS = {
    "list_tasks": Command(
        "List the tasks of this project (id, key, title, status, priority, type, "
        "parent).", {"status": {"type": "string", "enum": list(STATUSES)}}, [],
        {"type": "array", "items": _OBJECT},
        lambda a, board: [{k: t[k] for k in ("id", "task_key", "title", "status", "priority",
                                             "task_type", "parent_task_id")}
                          for t in board.tasks(board.project())
                          if a.get("status") in (None, t["status"])]),
    "create_task": Command(
        "Create a sub-task in this project: below the task you are working on "
        "(which then waits until its sub-tasks are finished), or below a task you created "
        "when you pass its id as parent_task_id.",
        {**_TASK_FIELDS_IN, "parent_task_id": {"type": ["integer", "null"]}}, ["title"],
        _TASK, lambda a, board: board.create(board.project(), {"parent_task_id": board.own,
                                                               **a})),
    "update_task": Command(
        "Change fields of a task you created (or one below it), not its status.",
        {"id": {"type": "integer"}, **_TASK_FIELDS_IN}, ["id"], _TASK,
        lambda a, board: board.update(int(a["id"]), {k: v for k, v in a.items() if k != "id"})),
    "change_task_status": Command(
        "Move a task you created (or one below it) to a status; never the task you "
        "are working on, never to done (a person approves).", {"id": {"type": "integer"},
                         "status": {"type": "string", "enum": list(STATUSES)}},
        ["id", "status"], _TASK, lambda a, board: board.move(int(a["id"]), a.get("status"))),
    "get_task_detail": Command(
        "A task with its revisions, attachments, commits and latest log entries.",
        {"id": {"type": "integer"}}, ["id"], _OBJECT,
        lambda a, board: board.detail(int(a["id"]))),
}


def _tools(environ) -> dict:
    """The tools of the request's credential: a run's, or a person's within its scopes."""
    if environ.get("taskboard.agent") is not None:
        return RUN_TOOLS
    token = environ.get("taskboard.token")
    scopes = json.loads(token["scopes_json"]) if token is not None else TOKEN_SCOPES
    return {name: c for name, c in CLIENT_TOOLS.items() if c.scope in scopes}


def _mcp_reply(message: dict, board: "BoardApi | None", tools: dict) -> dict:
    """A request's result, or the JSON-RPC error of a refused call: bad params, else an
    unknown method or tool (stdio and HTTP answer alike)."""
    params = message.get("params")
    try:
        return {"result": _mcp_answer(message.get("method"),
                                      params if isinstance(params, dict) else {}, board, tools)}
    except (LookupError, InvalidParams) as exc:
        return {"error": {"code": -32602 if isinstance(exc, InvalidParams) else -32601,
                          "message": str(exc)}}


def _mcp_answer(method, params, board: "BoardApi | None", tools: dict):
    if method == "initialize":
        asked = params.get("protocolVersion")
        return {"protocolVersion": asked if asked in MCP_VERSIONS else MCP_VERSIONS[-1],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "taskboard", "version": __version__},
                "instructions": "Taskboard: projects of tasks that AI coding agents work on. "
                "list_projects, then list_tasks; create_task and move_task start work; "
                "list_requests and answer_request answer what a running agent asks."}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": [{"name": name, "description": c.doc, "inputSchema": {
            "type": "object", "properties": c.args, "required": c.required}}
            for name, c in tools.items()]}
    if method == "tools/call":
        name, args = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(args, dict):
            raise InvalidParams("tools/call takes a tool's name (a string) and its "
                                "arguments (an object)")
        if name not in tools:
            raise LookupError(f"unknown tool {name[:100]!r}")
        try:
            value, failed = tools[name].run(args, board), False
        except (ApiError, ValueError, TypeError, KeyError) as exc:
            value, failed = {"error": getattr(exc, "message", None) or str(exc)}, True
        text = value if isinstance(value, RawJson) else json_dumps(value)
        return {"content": [{"type": "text", "text": text}], "isError": failed}
    raise LookupError(f"unknown method {method!r}")


class BoardApi:
    """The board as the tools call it (POST /mcp): its services, within the bounds of the
    request's credential.  `agent`: a run token's scope (None: a person's client), which
    reaches only its own project's tasks (run_reach_refusal) and changes only those
    agent_bounds() allows; `own`: the task its run works on; `decided_by`: who answers a
    request (answer_request), as an approval records it."""

    def __init__(self, agent: dict | None, decided_by: str = "person"):
        self.agent, self.decided_by = agent, decided_by
        self.own = agent["task_id"] if agent is not None else None

    def reach(self, project_id: int | None = None, task_id: int | None = None) -> None:
        """Forbidden when a run token may not reach the project or the task."""
        if self.agent is not None and \
                (error := run_reach_refusal(self.agent, project_id, task_id)):
            raise error

    def project(self) -> int:
        if self.own is None:
            raise ValueError("this tool works inside a task's run: which project?")
        return self.task(self.own)["project_id"]

    def tasks(self, project_id: int) -> list[dict]:
        self.reach(project_id=project_id)
        return json.loads(list_tasks(project_id))

    def task(self, task_id: int) -> dict:
        self.reach(task_id=task_id)
        return get_task(task_id)

    def create(self, project_id: int, fields: dict) -> dict:
        self.reach(project_id=project_id)
        return create_task_by(self.agent, project_id, fields)

    def update(self, task_id: int, fields: dict) -> dict:
        if "status" in fields:
            raise ValueError("a task's status changes by moving it (the tool that moves a "
                             "task), not by updating it")
        self.reach(task_id=task_id)
        return update_task_by(self.agent, task_id, fields)

    def move(self, task_id: int, status) -> dict:
        if task_id == self.own:
            raise ValueError("you cannot change the status of the task you are working on")
        self.reach(task_id=task_id)
        return move_task_by(self.agent, task_id, {"status": status})

    def detail(self, task_id: int) -> dict:
        self.reach(task_id=task_id)
        detail = json.loads(task_detail(task_id))
        detail["logs"] = detail["logs"][-20:]
        return detail


@app.post("/mcp", scope="tools", run_token=True, body="McpMessage", returns="McpAnswer")
def board_tools_http():
    """The board's MCP over the streamable HTTP transport (design §19), answered as JSON
    (no event stream): a JSON-RPC message or a batch; only notifications → 202, no body.
    A revision the client names (MCP-Protocol-Version) that the board does not speak, or a
    body that is not JSON → 400 with a JSON-RPC error."""
    try:
        body = read_json()
    except (Invalid, InvalidJson) as exc:
        raise RpcError(-32700, exc.message) from None
    version = bottle.request.get_header("MCP-Protocol-Version")
    if version is not None and version not in MCP_VERSIONS:
        raise RpcError(-32600, f"MCP-Protocol-Version {version[:40]!r} is not one of: "
                       f"{', '.join(MCP_VERSIONS)}")
    answer = mcp_http(body, bottle.request.environ)
    if answer is None:
        bottle.response.status = 202
        return ""
    return answer


# =============================================================================
# MAIN
# =============================================================================

class Runtime:
    """Process-wide objects built by init(); tests build a fresh one per test."""

    def __init__(self, config: dict):
        self.config = config
        self.data_dir = config["data_dir"]
        os.makedirs(self.data_dir, mode=0o700, exist_ok=True)
        # writes take turns (WRITE_LOCK) on a connection of their own, so a write never
        # waits for a pooled connection that readers hold, and its page cache stays valid
        self.db = open_db(config["db_path"], pool_size=1, max_overflow=0)
        self.reads = open_db(config["db_path"], pool_use_lifo=True)  # the warmest first
        self.events = EventBus()
        self.logs = LogWriter()
        self.agents = AgentPool()
        #: sha256 of a personal token's secret -> its row (design §19), see personal_token()
        self.personal = {}
        #: fires the schedules (design §19): its first round fires those missed meanwhile
        self.schedules = Worker("schedules", fire_schedules, retry=SCHEDULE_NAP_SECONDS)
        #: Projects whose queue is about to run (see schedule_queue).
        self.queue_pending = set()
        #: token -> {project_id, task_id} of each live run's board tools.
        self.run_tokens = {}
        #: The egress proxy of the sandboxed runs (design §20): a socket per run, while it runs.
        self.egress = EgressProxy()
        #: task id -> (last log id, log rows, the log as JSON), see _log_json()
        self.log_json = Kept(LOG_JSON_KEPT_CHARS, lambda entry: len(entry[2]))
        #: (usage version, day start) -> the sums of agent usage (the latest), see usage_rows()
        self.usage = Kept(1, lambda sums: 1)
        #: ETag -> the gzipped body of that answer, see transfer()
        self.gzipped = Kept(GZIP_KEPT_BYTES)
        #: wrong credentials per client; session id hash -> expiry of each live login
        self.failures = Failures()
        self.sessions = {}
        self.webhooks = Outbox("webhook_outbox", "webhook_id", next_notice, deliver_notice)
        self.push = PushSender(os.path.join(self.data_dir, "vapid.pem"), config["push_contact"])
        #: repository root -> the lock that serialises git operations on it
        self.git_locks = {}
        #: project id -> its live planning session; the last planId's milliseconds.
        self.plans = {}
        self.last_plan_ms = 0
        #: The board's address, for agents (TASKBOARD_URL); serve() sets the bound port.
        self.url = board_url(config["host"], config["port"])
        #: Each configured agent CLI's {found, version, checking}, for /api/health.
        self.clis = {name: {"found": None, "version": None, "checking": True} for name in AGENTS}
        #: the person's umask, for what runs write in their code (-1: the process's own)
        self.umask = config.get("umask", -1)
        #: agent name -> when its usage limit lifts (Unix time); the agent_limits table
        self.limits = {}
        #: task id -> the waits for a limit its runs made in a row
        self.limit_waits = {}
        self.agent = self.clis["claude"]
        #: bubblewrap here, as its last try found it: {engine, works, version, error};
        #: what tries it again while tasks wait for it
        self.sandbox = {"engine": "bubblewrap", "works": None, "version": None,
                        "error": "not tried yet"}
        self.sandbox_tried = 0.0  # when (time.monotonic()) it was tried last
        self.sandbox_retry = Worker("sandbox", retry_sandbox, retry=HOST_CHECK_SECONDS)
        #: The stored settings, read once at start and replaced by every update.
        self.settings = {}
        #: host id -> its connection (HostLink); -> the process groups that runs whose
        #: connection was lost left there, to kill when it is reachable again
        self.links = {}
        self.leftovers = {}
        #: the listener hosts' remote forwards reach, started once one is needed
        self.forward = ForwardListener()
        #: the open pull requests the board follows (design §16)
        self.prs = PullRequests()
        #: the background clocks (Worker) and one-off greenlets; the chores of one change
        #: each (after_done, a queue run)
        self.workers, self.greenlets = [], []
        self.checkpoints = Checkpoints()
        self.memory = Worker("memory release", release_memory, first=0.0)
        #: the running previews (design §21), each on a port of its own
        self.previews = Previews(listen_preview)
        self.chores = gevent.pool.Group()


def board_url(host: str, port: int) -> str:
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def parse_args(argv=None, environ=None) -> dict:
    """The configuration from flags, their TASKBOARD_* twins and the defaults."""
    environ = os.environ if environ is None else environ
    parser = _argument_parser(environ)
    args = parser.parse_args(argv)
    _check_auth_flags(parser, args)
    trusted = _trusted_proxies(parser, environ)
    port = _listen_port(parser, args.port)
    db_path, data_dir = _database_path(args.db, environ)
    agent_argv, agents = _agent_commands(parser, args.agent_command, environ)
    contact = _push_contact(parser, environ)
    retry_base = _retry_base_seconds(parser, environ)
    return {"host": args.host, "port": port, "db_path": db_path, "data_dir": data_dir,
            "agent_command": args.agent_command,
            "agent_argv": agent_argv, "agents": agents,
            "token": (args.token or "").strip() or None, "token_file": args.token_file,
            "no_auth": args.no_auth, "trusted_proxies": trusted,
            "token_on_command_line": any(a == "--token" or a.startswith("--token=")
                                         for a in (sys.argv[1:] if argv is None else argv)),
            "demo": args.demo, "backup": args.backup,
            "retry_base_seconds": retry_base, "push_contact": contact,
            "allowed_hosts": [h.strip().lower() for h in
                              environ.get("TASKBOARD_ALLOWED_HOSTS", "").split(",")
                              if h.strip()],
            "git_host_api": environ.get("TASKBOARD_GIT_HOST_API", "https://api.github.com"),
            "bwrap": shlex.split(environ.get("TASKBOARD_BWRAP") or "bwrap"),
            "git_host_token": environ.get("TASKBOARD_GIT_HOST_TOKEN")
            or environ.get("GITHUB_TOKEN")}


def _argument_parser(environ) -> argparse.ArgumentParser:
    """The flags: one per option of OPTIONS (its environment variable its default), and
    --backup, --demo and --no-auth."""
    parser = argparse.ArgumentParser(
        prog="taskboard.py", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=MCP_USAGE)
    for option in OPTIONS:
        parser.add_argument(option.flag, default=environ.get(option.env, option.default),
                            help=f"{option.help} (env {option.env}, default {option.default})")
    parser.add_argument("--backup", metavar="PATH",
                        help="copy the database to PATH (a file, or a folder to put a dated "
                             "copy in) with SQLite's online backup, safe while the board "
                             "runs, then exit")
    parser.add_argument("--demo", action="store_true",
                        help="create a Demo project on a scratch repository, whose tasks the "
                             "built-in simulated agent runs (other projects keep their CLI)")
    parser.add_argument("--no-auth", action="store_true",
                        default=environ.get("TASKBOARD_NO_AUTH", "") in ("1", "true", "yes"),
                        help="no token at all (env TASKBOARD_NO_AUTH=1); only on a loopback "
                             "address")
    return parser


def _check_auth_flags(parser, args) -> None:
    """--no-auth only on a loopback address and without a token; a token long enough."""
    if args.no_auth and not is_loopback_host(args.host):
        parser.error(f"--no-auth is refused on {args.host!r}: without a token the board may "
                     "only listen on a loopback address (127.0.0.1, ::1, localhost)")
    if args.no_auth and (args.token or args.token_file):
        parser.error("--no-auth and a token (--token, --token-file) contradict each other")
    if args.token and len(args.token.strip()) < TOKEN_MIN_LENGTH:
        parser.error(f"the token must be at least {TOKEN_MIN_LENGTH} characters long")


def _trusted_proxies(parser, environ) -> list:
    """The networks of TASKBOARD_TRUSTED_PROXIES (comma-separated)."""
    try:
        return [ipaddress.ip_network(n.strip(), strict=False) for n in
                environ.get("TASKBOARD_TRUSTED_PROXIES", "").split(",") if n.strip()]
    except ValueError as exc:
        parser.error(f"TASKBOARD_TRUSTED_PROXIES: {exc}")


def _listen_port(parser, value) -> int:
    """The port to listen on: 0 (any free one) to 65535."""
    try:
        port = int(value)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        parser.error(f"port must be a number from 0 to 65535, not {value!r}")
    return port


def _database_path(db, environ) -> tuple[str, str]:
    """(the database's path, its folder): --db, else systemd's StateDirectory, else the
    XDG data home."""
    if db:
        db_path = os.path.abspath(os.path.expanduser(db))
        return db_path, os.path.dirname(db_path)
    base = environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    data_dir = environ.get("STATE_DIRECTORY", "").split(":")[0] or \
        os.path.join(base, "taskboard")
    return os.path.join(data_dir, "taskboard.db"), data_dir


def _agent_commands(parser, agent_command: str, environ) -> tuple[list, dict]:
    """(claude's argv, {agent: argv}): claude's from --agent-command, each other CLI's from
    its environment variable or its default command."""
    try:
        agent_argv = shlex.split(agent_command)
    except ValueError as exc:
        parser.error(f"agent command {agent_command!r} cannot be parsed: {exc}")
    if not agent_argv:
        parser.error("agent command must not be empty")
    agents = {"claude": agent_argv}
    for name, cli in AGENTS.items():
        if name == "claude":
            continue
        command = environ.get(cli.env) or cli.command
        try:
            agents[name] = shlex.split(command)
        except ValueError as exc:
            parser.error(f"{cli.env} {command!r} cannot be parsed: {exc}")
        if not agents[name]:
            parser.error(f"{cli.env} must not be empty")
    return agent_argv, agents


def _push_contact(parser, environ) -> str:
    """Whom push services may write to (TASKBOARD_PUSH_CONTACT): a mailto: or https: URL."""
    contact = environ.get("TASKBOARD_PUSH_CONTACT", "mailto:taskboard@localhost")
    if not re.fullmatch(r"mailto:[^@\s]+@(localhost|[\w-]+(\.[\w-]+)+)|https://\S+", contact):
        parser.error(f"TASKBOARD_PUSH_CONTACT must be a mailto: or https: URL, not "
                     f"{contact[:80]!r}")
    return contact


def _retry_base_seconds(parser, environ) -> float:
    """The base of the retry backoff, in seconds (TASKBOARD_RETRY_BASE_SECONDS)."""
    retry_base = environ.get("TASKBOARD_RETRY_BASE_SECONDS", "30")
    try:
        retry_base = float(retry_base)
        if not 0 <= retry_base <= 86_400:
            raise ValueError
    except ValueError:
        parser.error("TASKBOARD_RETRY_BASE_SECONDS must be a number of seconds from 0 to "
                     f"86400, not {retry_base!r}")
    return retry_base


def init(config: dict, resume_runs: bool = True) -> Runtime:
    """Build the runtime: open and migrate the database, start the background workers and
    (unless serve() will, once it listens) give interrupted tasks their agents back."""
    global runtime
    runtime = Runtime(config)
    config["token"] = load_token(config)
    migrate()
    for suffix in ("", "-wal", "-shm"):  # the store is the owner's alone, whatever the umask
        with contextlib.suppress(OSError):
            os.chmod(config["db_path"] + suffix, 0o600)
    runtime.sessions = session_rows(_digest(runtime.config["token"] or ""))
    runtime.sandbox, runtime.sandbox_tried = sandbox_here(config), time.monotonic()
    runtime.settings = settings_rows()
    runtime.personal = {row["hash"]: row for row in find_rows("tokens")}
    interrupt_stale_plans()
    kill_preview_survivors()
    runtime.logs.start()
    runtime.checkpoints.start()
    runtime.webhooks.start()
    runtime.push.start()
    expire_requests()  # nobody can answer what the agents of a stopped server asked
    restore_agent_limits()
    verify_waiting_tasks()
    if config["demo"]:
        create_demo_project()
    runtime.greenlets += [gevent.spawn(check_agent_command), gevent.spawn(prune_worktrees)]
    runtime.workers = [
        Worker("issue sync", sync_all_issues, retry=SYNC_INTERVAL_SECONDS),
        Worker("log retention", retain_logs, first=30.0, retry=LOG_COMPACT_SECONDS),
        Worker("host checks", check_hosts, first=HOST_CHECK_SECONDS,
               retry=HOST_CHECK_SECONDS), runtime.sandbox_retry, runtime.schedules]
    for worker in runtime.workers:
        worker.start()
    runtime.prs.start()
    if resume_runs:
        resume_interrupted_runs()
    return runtime


def shutdown() -> None:
    """Stop the background workers, end every /ws connection, close the database."""
    global runtime
    if runtime is None:
        return
    for greenlet in runtime.greenlets:
        greenlet.kill()
    for worker in (*runtime.workers, runtime.checkpoints, runtime.memory):
        worker.stop()
    runtime.prs.stop()
    runtime.chores.join(timeout=5)
    runtime.chores.kill()
    runtime.webhooks.stop()
    runtime.push.stop()
    stop_plans()
    runtime.previews.stop_all()
    runtime.agents.shutdown()
    runtime.chores.kill()  # what the runs' ends asked for
    for link in runtime.links.values():
        link.close()
    runtime.forward.stop()
    runtime.egress.close_all()
    runtime.logs.stop()
    for sub in list(runtime.events.subscribers):
        sub.close()
    with WRITE_LOCK:  # a transaction still under way ends first
        runtime.db.close()
        runtime.reads.close()
    runtime = None


def check_agent_command() -> None:
    """Find each agent CLI and ask its version, for /api/health (never blocks start-up).
    The version is read from stdout; stderr (warnings naming paths) is logged, never shown."""
    for name, argv in runtime.config["agents"].items():
        agent = runtime.clis[name]
        path = shutil.which(argv[0])
        agent["found"] = path is not None
        if path is None and name == "claude":  # the others are optional
            log.warning("agent command %r not found: set --agent-command or "
                        "TASKBOARD_AGENT_COMMAND", argv[0])
        if path is not None:
            with tempfile.TemporaryFile() as errors:
                code, out = run_command([path, *argv[1:], "--version"], timeout=15, stderr=errors)
                errors.seek(0)
                said = errors.read(4096).decode("utf-8", "replace").strip()
            if said:
                log.info("agent command %r --version said on stderr: %s", argv[0], said)
            if code is None:
                log.warning("agent command %r --version failed: %s", argv[0], out)
            agent["version"] = cli_version(out) if code is not None else None
        agent["checking"] = False


class ForwardedHandler(Handler):
    """The handler of what a host's remote forward brings: marked as such, and no /ws."""

    def get_environ(self):
        environ = super().get_environ()
        environ["taskboard.forwarded"] = True
        return environ

    def upgrade_websocket(self):
        return None


def forwarded(environ, start_response):
    """What a host's remote forward reaches (design §15, v5): the board tools (/mcp) alone,
    for a run token only (see credential_refusal), never as a local request."""
    if environ.get("PATH_INFO") == "/mcp":
        return app(environ, start_response)
    body = json_dumps(NotFound("a host's forward reaches the board tools (/mcp) alone")
                      .body()).encode()
    start_response("404 Not Found", [("Content-Type", "application/json"),
                                     ("Content-Length", str(len(body))),
                                     ("X-Content-Type-Options", "nosniff")])
    return [body]


class ForwardListener:
    """The listener that hosts' remote forwards reach (runtime.forward): a loopback port of
    its own, serving forwarded(), started when a host's connection first needs its port."""

    def __init__(self):
        self.server = None

    def port(self) -> int:
        if self.server is None:
            self.server = Server(("127.0.0.1", 0), forwarded, handler_class=ForwardedHandler,
                                 log=None, error_log=logging.getLogger("taskboard.http"),
                                 environ={"SERVER_NAME": "127.0.0.1"})
            self.server.start()
        return self.server.server_port

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(timeout=1)


def make_server(host: str, port: int) -> Server:
    """The HTTP + WebSocket server for `app` (not started). The soft limit on open files is
    raised first, and open connections are capped below it.  SERVER_NAME is the address
    bound: gevent would look the host's name up in the DNS, 20 ms of a start or far more."""
    server = Server((host, port), transfer(app), handler_class=Handler, log=None,
                    error_log=logging.getLogger("taskboard.http"), backlog=socket.SOMAXCONN,
                    environ={"SERVER_NAME": host})
    server.max_connections = connection_cap(raise_file_limit())
    return server


def serve(config: dict) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting, stop the workers and exit."""
    stop = gevent.event.Event()
    gevent.signal_handler(signal.SIGTERM, stop.set)
    gevent.signal_handler(signal.SIGINT, stop.set)
    server = make_server(config["host"], config["port"])
    try:
        server.start()
    except OSError as exc:
        log.error("cannot listen on %s:%s: %s", config["host"], config["port"], exc)
        shutdown()
        sys.exit(1)
    runtime.url = board_url(config["host"], server.server_port)
    sign_in = f"\nOpen {runtime.url}/login?token={config['token']} to sign in" \
        if config["token"] else ""
    demo = "\nDemo mode: the Demo project's tasks run the built-in simulated agent, which " \
        "spends nothing; every other project runs its own agent CLI" if config["demo"] else ""
    print(f"Taskboard {__version__} on {runtime.url}/ (data in {runtime.data_dir})"
          f"{sign_in}{demo}", flush=True)
    resume_interrupted_runs()  # now that agents can reach TASKBOARD_URL
    # objects made so far live as long as the server: frozen, the cyclic collector no
    # longer walks them (its full passes under load: 55-90 ms, nothing served, to < 20 ms)
    gc.freeze()
    runtime.memory.start()
    stop.wait()
    log.info("stopping")
    server.stop(timeout=2)
    shutdown()


def load_token(config: dict) -> str | None:
    """The board's token (None with --no-auth): given, read from --token-file, else the data
    dir's `token`, made at first start (32 random bytes, URL-safe, mode 0600)."""
    if config["no_auth"]:
        return None
    if config["token"]:
        return config["token"]
    path = config["token_file"] or os.path.join(config["data_dir"], "token")
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except FileNotFoundError:
        if config["token_file"]:
            raise SystemExit(f"taskboard: the token file {path} does not exist") from None
        token = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
        log.info("made a new token in %s", path)
    if len(token) < TOKEN_MIN_LENGTH:
        raise SystemExit(f"taskboard: the token in {path} is shorter than "
                         f"{TOKEN_MIN_LENGTH} characters")
    if os.stat(path).st_mode & 0o077:
        log.warning("the token file %s can be read by other users: chmod 600 it", path)
    return token


def run_backup(config: dict) -> int:
    """--backup PATH: copy the live database; the exit code says whether it worked."""
    source = config["db_path"]
    if not os.path.exists(source):
        print(f"backup failed: there is no database at {source}", file=sys.stderr)
        return 1
    target = os.path.abspath(os.path.expanduser(config["backup"]))
    if os.path.isdir(target):
        target = os.path.join(target, f"taskboard-{utc_now():%Y%m%d-%H%M%S}.db")
    if os.path.realpath(target) == os.path.realpath(source):
        print("backup failed: the copy cannot replace the database itself", file=sys.stderr)
        return 1
    try:
        size = backup_database(source, target)
    except (sqlite3.Error, OSError) as exc:
        print(f"backup failed: {exc}", file=sys.stderr)
        return 1
    print(f"backed up {source} to {target} ({size:,} bytes, integrity ok)")
    return 0


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--simulate-agent"]:
        sys.exit(simulate_agent(argv[1:]))
    if argv[:1] == ["--mcp"]:
        sys.exit(mcp_serve(argv[1:]))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s "
                        "%(message)s", stream=sys.stderr)
    config = parse_args(argv)
    if config["backup"]:
        sys.exit(run_backup(config))
    if running_as_root():
        log.warning("running as root: agent CLIs refuse some permission modes as root (Claude "
                    "Code's --dangerously-skip-permissions), and files they write in your "
                    "repositories will belong to root; run Taskboard as the code's owner")
    # the database, the token and attachments are the owner's alone; what runs write in the
    # person's code gets the person's umask (design §17 v6)
    config["umask"] = os.umask(0o077)
    if config["token_on_command_line"]:
        log.warning("--token on the command line can be read by every local user in the "
                    "process list: use TASKBOARD_TOKEN or --token-file instead")
    if config["no_auth"]:
        log.warning("--no-auth: anyone who can reach %s:%s uses the board without a token",
                    config["host"], config["port"])
    init(config, resume_runs=False)
    serve(config)


if __name__ == "__main__":
    main()
