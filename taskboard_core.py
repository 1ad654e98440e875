from gevent import monkey; monkey.patch_all()  # noqa: E702, I001 -- first, before any import

"""taskboard_core: the pure front half of taskboard.py, which imports it.

Configuration, errors, utilities, the field tables and the store: everything that knows
neither HTTP, nor events, nor agent processes.  Only the STORE section touches the
database, each function in one short transaction (tx()).

    CONFIGURATION · ERRORS · UTILITIES · FIELDS · STORE
"""

import collections
import contextlib
import datetime as dt
import functools
import itertools
import json
import logging
import os
import re
import sqlite3
import subprocess
import threading
import time
import unicodedata
import urllib.parse

import dataset
import gevent
import gevent.event
import gevent.queue

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
#: Events a webhook may subscribe to: the spec's five plus our task:failed.
WEBHOOK_EVENTS = ("task:created", "task:started", "task:completed", "task:approved",
                  "task:changes_requested", "task:failed")
#: Priority numbers as words, for {{priority}} in templates.
PRIORITY_NAMES = ("low", "medium", "high", "urgent")
#: How finely a planning session splits its topic, and the task count each asks for.
GRANULARITIES = {"high-level": "3 to 5", "balanced": "5 to 10", "detailed": "10 to 20"}
#: A plan with more tasks keeps the first ones (and says so in its warnings).
MAX_PLAN_TASKS = 50

#: A webhook delivery attempt gives up after this long.
WEBHOOK_TIMEOUT_SECONDS = 10.0
#: The pauses before the second and third attempt after a 5xx or connection error.
WEBHOOK_BACKOFF_SECONDS = (2.0, 8.0)
#: Delivery records kept per webhook.
WEBHOOK_DELIVERIES_KEPT = 50
#: Moments kept waiting per webhook (a target that hangs); beyond, the oldest are dropped.
WEBHOOK_QUEUE_KEPT = 1000

#: Request bodies larger than this are refused with 413 (attachments have their own limit).
MAX_BODY_BYTES = 1024 * 1024
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
#: How many published events /ws keeps for ?since= replay, and at most how many bytes.
EVENT_BUFFER_SIZE = 20_000
EVENT_BUFFER_BYTES = 32 * 1024 * 1024
#: A /ws client with more than this many bytes waiting to be sent is sent `resync` and
#: dropped; a ?since= replay larger than this is answered with `resync`.
CLIENT_QUEUE_BYTES = 4 * 1024 * 1024
WS_PING_SECONDS = 25
WS_SEND_TIMEOUT_SECONDS = 10
#: A dropped client's connection is reset if its `resync` is not sent within this time.
WS_DROP_GRACE_SECONDS = 2
#: A client message (clients only send keep-alives) larger than this ends the connection.
WS_MAX_MESSAGE_BYTES = 64 * 1024
#: Agent log entries are written and published at most this often per task.
LOG_FLUSH_SECONDS = 0.1

#: The agent CLI's --model alias of each tier.
MODEL_ALIASES = {"model_large": "opus", "model_medium": "sonnet", "model_small": "haiku"}
#: USD per million tokens (input, output, cache read, cache write), to estimate the cost of a
#: run when the CLI reports none.  Estimates only; published list prices of each tier.
PRICES = {"model_large": (15.0, 75.0, 1.5, 18.75), "model_medium": (3.0, 15.0, 0.3, 3.75),
          "model_small": (1.0, 5.0, 0.1, 1.25)}
#: Timeouts are set in minutes; tests shrink the minute.
SECONDS_PER_MINUTE = 60.0
#: A stopped agent gets SIGTERM, then SIGKILL after this long.
KILL_GRACE_SECONDS = 5.0
#: After the agent exits, output still in its pipes is read for this long at most.
EXIT_GRACE_SECONDS = 2.0
#: Board secrets that never reach an agent's environment.
SECRET_ENV = ("TASKBOARD_TOKEN", "TASKBOARD_GIT_HOST_TOKEN")
#: A longer agent output line is cut into pieces of this size.
MAX_LINE_BYTES = 1024 * 1024
#: Log messages are cut to this many characters (the raw line is kept whole).
MAX_LOG_MESSAGE = 8000

#: Every event a /ws client can receive, with what its data holds.
EVENT_TYPES = {
    "project:created": "a project was created; data is the full project",
    "project:updated": "a project changed; data is the full project",
    "project:deleted": "a project and everything in it was removed; data is {id}",
    "task:created": "a task was created; data is the full task",
    "task:updated": "a task changed (fields, status, usage, run state); data is the full task",
    "task:deleted": "a task was removed; data is {id, projectId}",
    "task:log": "new log entries of a task: {taskId, projectId, entries}; only with ?logs=",
    "task:usage": "live token usage of a running task: {taskId, projectId, ...}",
    "template:created": "a template was created; data is the template",
    "template:updated": "a template changed; data is the template",
    "template:deleted": "a template was removed; data is {id, projectId}",
    "snippet:created": "a snippet was created; data is the snippet",
    "snippet:updated": "a snippet changed; data is the snippet",
    "snippet:deleted": "a snippet was removed; data is {id, projectId}",
    "webhook:created": "a webhook was created; data is the webhook",
    "webhook:updated": "a webhook changed; data is the webhook",
    "webhook:deleted": "a webhook was removed; data is {id, projectId}",
    "webhook:delivery": "a webhook delivery attempt was recorded: {webhookId, projectId, "
                        "id, event, attempt, status, ok, error, durationMs, createdAt}",
    "plan:started": "a planning session began: {projectId, planId, topic, model, effort}",
    "plan:phase": "the planner's phase changed: {projectId, planId, phase} (starting, "
                  "exploring, writing)",
    "plan:progress": "the planner wrote text: {projectId, planId, type: text, content}",
    "plan:log": "a planner tool call, result or error: {projectId, planId, type, message, "
                "tool?}",
    "plan:stats": "after each planner turn: {projectId, planId, elapsed, tokens, toolCalls, "
                  "turns}",
    "plan:completed": "planning finished: {projectId, planId, tasks, stats, error, warnings}",
    "plan:cancelled": "a planning session was cancelled: {projectId, planId}",
    "settings:updated": "application settings changed; data is the full settings object",
    "dependencies:updated": "a project's dependency edges changed: {projectId}",
    "resync": "the replay gap is gone or the client fell behind: refetch everything",
    "ping": "keep-alive every 25 s, without seq; ignore it",
}

#: Command-line options; each has an environment twin.
Option = collections.namedtuple("Option", "flag env default help")
OPTIONS = (
    Option("--host", "TASKBOARD_HOST", "127.0.0.1", "address to bind"),
    Option("--port", "TASKBOARD_PORT", "4000", "port to bind (0 picks a free one)"),
    Option("--db", "TASKBOARD_DB", None, "SQLite database path; its folder becomes the data dir"),
    Option("--agent-command", "TASKBOARD_AGENT_COMMAND", "claude", "agent CLI to run"),
    Option("--token", "TASKBOARD_TOKEN", None, "API token (required to bind a non-loopback host)"),
)
#: Environment-only settings.
ENV_SETTINGS = (
    Option(None, "TASKBOARD_RETRY_BASE_SECONDS", "30", "base of the retry backoff"),
    Option(None, "TASKBOARD_ALLOWED_HOSTS", "", "extra Host names to accept, comma-separated"),
    Option(None, "TASKBOARD_GIT_HOST_API", "https://api.github.com", "source-host REST API"),
    Option(None, "TASKBOARD_GIT_HOST_TOKEN", None, "source-host token (else GITHUB_TOKEN)"),
    Option(None, "STATE_DIRECTORY", None, "data dir under systemd (when --db is not given)"),
    Option(None, "XDG_DATA_HOME", "~/.local/share", "data dir base otherwise"),
)



# =============================================================================
# ERRORS
# =============================================================================

class ApiError(Exception):
    """An error a client caused or must see; carries the HTTP status and code."""
    status = 400
    code = "validation_error"

    def __init__(self, message, field=None):
        super().__init__(message)
        self.message = message
        self.field = field

    def body(self):
        out = {"error": self.message, "code": self.code}
        if self.field is not None:
            out["field"] = self.field
        return out


class Invalid(ApiError):
    """A value in the request is wrong."""


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
    """The board has a token and the request did not carry it."""
    status = 401
    code = "unauthorized"


class LocalOnly(ApiError):
    """A desktop command asked from anywhere but this machine."""
    status = 403
    code = "local_only"


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


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


# =============================================================================
# UTILITIES
# =============================================================================

def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def iso(moment: dt.datetime | None) -> str | None:
    """ISO 8601 UTC with milliseconds and Z, the only timestamp format we write."""
    if moment is None:
        return None
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + \
        f"{moment.microsecond // 1000:03d}Z"


_second = [None, ""]


def now_iso() -> str:
    """iso(utc_now()), formatted once a second: agent output stamps every line."""
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))]
    return f"{_second[1]}{int((now - second) * 1000):03d}Z"


def parse_iso(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def local_day_start_iso(moment: dt.datetime | None = None) -> str:
    """The UTC timestamp of the start of the server-local calendar day."""
    local = (moment or utc_now()).astimezone()
    return iso(local.replace(hour=0, minute=0, second=0, microsecond=0))


def json_dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


#: Half of a UTF-16 surrogate pair, standing alone: JSON can spell one ("\ud83d"),
#: json.loads() keeps it, UTF-8 (so SQLite, so a response) cannot encode it.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: The only way JSON text can hold one: an escape.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def without_lone_surrogates(text: str) -> str:
    """The text with U+FFFD for each half of a surrogate pair standing alone."""
    return LONE_SURROGATE.sub("\ufffd", text)


def lone_surrogates_replaced(value, text: str):
    """The value parsed from the JSON text, with U+FFFD for each half of a surrogate pair
    standing alone (json.loads() has joined the whole pairs); the value itself when it
    holds none."""
    if not SURROGATE_ESCAPE.search(text):
        return value
    dumped = json_dumps(value)
    return json.loads(without_lone_surrogates(dumped)) if LONE_SURROGATE.search(dumped) \
        else value


class RawJson(str):
    """Text that is already JSON, sent as it is."""


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


def run_command(argv: list[str], cwd: str | None = None, timeout: float = 30,
                stderr=subprocess.DEVNULL, env: dict | None = None) -> tuple[int | None, str]:
    """Run a short command; return (exit code, stdout), (None, message) if it could not run.

    Unlike subprocess.run(capture_output=True), whose helper greenlets would be left
    watching closed pipes if the caller is killed (libev then aborts the process), this
    reads in the calling greenlet and always cleans up.
    """
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=stderr, env=env)
    except OSError as exc:
        return None, str(exc)
    try:
        with gevent.Timeout(timeout):
            out = proc.stdout.read()
            return proc.wait(), out.decode("utf-8", "replace")
    except gevent.Timeout:
        return None, f"{argv[0]} did not finish within {timeout:g}s"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def project_key_from_slug(slug: str) -> str:
    """Initials of the slug's parts (2..4 letters), else its first 3 letters, else P."""
    parts = [p for p in slug.split("-") if p]
    initials = [p[0] for p in parts if p[0].isalpha()][:4]
    if len(parts) >= 2 and len(initials) >= 2:
        return "".join(initials).upper()
    letters = [c for c in slug if c.isalpha()][:3]
    return "".join(letters).upper() or "P"


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


class Field:
    """One field of a resource as the API sees it.

    kind: str, int, number, bool (JSON boolean out), flag (1/0 out), enum, tags,
    tools (comma string or array in, comma string out), events (array of event names),
    secret (write-only), time (read-only timestamp).
    """

    def __init__(self, name, kind, *, column=None, required=False, default=None,
                 nullable=False, choices=None, lo=None, hi=None, maxlen=None, pattern=None,
                 readonly=False, create_only=False, check=None, doc=""):
        self.name, self.kind = name, kind
        self.column = column or name
        self.required, self.default, self.nullable = required, default, nullable
        self.choices, self.lo, self.hi, self.maxlen = choices, lo, hi, maxlen
        self.pattern, self.check, self.doc = pattern, check, doc
        self.readonly, self.create_only = readonly, create_only

    def parse(self, value):
        """Turn a JSON value into the column value, or raise Invalid naming the value."""
        name = self.name
        if value is None:
            if self.nullable:
                return None
            raise Invalid(f"{name} must not be null", name)
        kind = self.kind
        if kind in ("str", "secret"):
            if not isinstance(value, str):
                raise Invalid(f"{name} must be a string, not {json_dumps(value)[:60]}", name)
            if self.required and not value.strip():
                raise Invalid(f"{name} must not be empty", name)
            if self.maxlen and len(value) > self.maxlen:
                raise Invalid(f"{name} is longer than {self.maxlen} characters", name)
            if self.pattern and (value or self.default != "") \
                    and not self.pattern.fullmatch(value):
                raise Invalid(f"{name} {value[:80]!r} is not valid: {self.doc}", name)
        elif kind == "enum":
            if value not in self.choices:
                raise Invalid(f"{name} {json_dumps(value)[:60]} is not one of: "
                              f"{', '.join(self.choices)}", name)
        elif kind in ("int", "number"):
            ok = (int,) if kind == "int" else (int, float)
            if isinstance(value, bool) or not isinstance(value, ok) or value != value:
                word = "an integer" if kind == "int" else "a number"
                raise Invalid(f"{name} must be {word}, not {json_dumps(value)[:60]}", name)
            if not -2**63 <= value < 2**63:
                raise Invalid(f"{name} {value} is out of range", name)
            if (self.lo is not None and value < self.lo) or \
                    (self.hi is not None and value > self.hi):
                raise Invalid(f"{name} {value} is out of range {self.lo}..{self.hi}", name)
        elif kind in ("bool", "flag"):
            if value not in (True, False, 0, 1) or isinstance(value, float):
                raise Invalid(f"{name} must be true or false, not {json_dumps(value)[:60]}",
                              name)
            value = int(bool(value))
        elif kind == "tags":
            value = _parse_tags(value, name)
        elif kind == "tools":
            value = _parse_tools(value, name)
        elif kind == "events":
            if not isinstance(value, list) or not value:
                raise Invalid(f"{name} must be a non-empty array of event names", name)
            for event in value:
                if event not in WEBHOOK_EVENTS:
                    raise Invalid(f"{name}: {json_dumps(event)[:60]} is not one of: "
                                  f"{', '.join(WEBHOOK_EVENTS)}", name)
            value = json_dumps(list(dict.fromkeys(value)))
        if self.check:
            self.check(value, name)
        return value

    def render(self, value):
        """Turn a column value into its JSON value."""
        if value is None:
            return None
        if self.kind == "bool":
            return bool(value)
        if self.kind == "events":
            return json.loads(value)
        return value

    def schema(self) -> dict:
        """The JSON schema of the field, for /api/openapi.json."""
        types = {"str": "string", "secret": "string", "time": "string", "enum": "string",
                 "int": "integer", "number": "number", "bool": "boolean", "flag": "integer",
                 "tags": "string", "tools": "string", "events": "array"}
        out = {"type": types[self.kind]}
        if self.kind == "enum":
            out["enum"] = list(self.choices)
        if self.kind == "events":
            out["items"] = {"type": "string", "enum": list(WEBHOOK_EVENTS)}
        if self.kind == "flag":
            out["enum"] = [0, 1]
        if self.kind == "time":
            out["format"] = "date-time"
        if self.lo is not None:
            out["minimum"] = self.lo
        if self.hi is not None:
            out["maximum"] = self.hi
        if self.maxlen:
            out["maxLength"] = self.maxlen
        if self.pattern is not None:
            out["pattern"] = self.pattern.pattern
        if self.nullable:
            out["type"] = [out["type"], "null"]
        if self.default is not None and not callable(self.default):
            out["default"] = self.default
        if self.doc:
            out["description"] = self.doc
        if self.readonly:
            out["readOnly"] = True
        if self.kind == "secret":
            out["writeOnly"] = True
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
        raise Invalid(f"{name} {value!r} must be an absolute path", name)
    if not os.path.isdir(value):
        raise Invalid(f"{name} {value!r} is not an existing directory", name)


def _check_webhook_url(value, name):
    if not URL_RE.fullmatch(value):
        raise Invalid(f"{name} {value[:80]!r} must be an http:// or https:// url", name)


def _ro(name, kind="int", **kw):
    return Field(name, kind, readonly=True, **kw)


def _created(column="created_at"):
    return _ro("createdAt", "time", column=column)


PROJECT_FIELDS = (
    _ro("id"),
    Field("name", "str", required=True, maxlen=200, doc="display name"),
    Field("slug", "str", required=True, pattern=SLUG_RE,
          doc="lowercase letters, digits and dashes, starting with a letter or digit; unique"),
    _ro("key", "str", doc="prefix of the task keys, derived from the slug once"),
    Field("workingDir", "str", column="working_dir", required=True, maxlen=4096,
          check=_check_working_dir, doc="absolute path of an existing directory"),
    Field("icon", "str", nullable=True, maxlen=200),
    Field("iconSeed", "str", column="icon_seed", nullable=True, maxlen=200),
    Field("permissionMode", "enum", column="permission_mode", choices=PERMISSION_MODES,
          default="default"),
    Field("allowedTools", "tools", column="allowed_tools", nullable=True,
          doc="comma-separated tool names (an array is accepted too), for allow-tools"),
    Field("autoQueue", "flag", column="auto_queue", default=0),
    Field("maxConcurrent", "int", column="max_concurrent", lo=1, hi=5, default=1),
    Field("autoBranch", "flag", column="auto_branch", default=0),
    Field("autoPr", "flag", column="auto_pr", default=0),
    Field("prBaseBranch", "str", column="pr_base_branch", default="main", pattern=BRANCH_RE,
          doc="a git branch name"),
    Field("autoTest", "flag", column="auto_test", default=0),
    Field("testPrompt", "str", column="test_prompt", default="", maxlen=100_000),
    Field("taskTimeoutMinutes", "int", column="task_timeout_minutes", nullable=True, lo=0,
          hi=1440, default=0, doc="0 or null = no timeout"),
    Field("maxRetries", "int", column="max_retries", lo=0, hi=10, default=2),
    Field("gitHostRepo", "str", column="git_host_repo", default="", pattern=REPO_RE,
          doc="owner/repo"),
    Field("gitHostSyncEnabled", "flag", column="git_host_sync_enabled", default=0),
    Field("taskBudgetUsd", "number", column="task_budget_usd", nullable=True, lo=0.01,
          hi=10_000, doc="passed to the agent as --max-budget-usd"),
    _created(),
    _ro("updatedAt", "time", column="updated_at"),
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
    Field("parent_task_id", "int", nullable=True, create_only=True,
          doc="a task of the same project; set only on create"),
    _ro("task_key", "str"),
    _ro("created_at", "time"), _ro("updated_at", "time"), _ro("started_at", "time"),
    _ro("completed_at", "time"), _ro("retry_count"), _ro("is_running", "bool"),
    _ro("awaiting_subtasks", "bool"), _ro("branch_name", "str"), _ro("pr_url", "str"),
    _ro("session_id", "str"), _ro("input_tokens"), _ro("output_tokens"),
    _ro("cache_read_tokens"), _ro("cache_creation_tokens"), _ro("total_cost", "number"),
    _ro("work_duration_ms"), _ro("revision_count"), _ro("queue_position"),
    _ro("permission_denials", doc="tools the agent was refused in its latest run"),
    _ro("last_error", "str", doc="why the latest run failed, or null"),
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
    Field("events", "events", column="events_json", required=True),
    Field("enabled", "bool", default=1),
    Field("secret", "secret", nullable=True, maxlen=500,
          doc="write-only; signs custom payloads (X-Taskboard-Signature)"),
    _ro("hasSecret", "bool", column="has_secret"),
    _created(),
)

PLAN_FIELDS = (
    Field("topic", "str", required=True, maxlen=10_000, doc="what to plan"),
    Field("model", "enum", choices=MODELS, default="model_medium"),
    Field("effort", "enum", choices=EFFORTS, default="medium"),
    Field("granularity", "enum", choices=tuple(GRANULARITIES), default="balanced",
          doc="high-level 3-5 tasks, balanced 5-10, detailed 10-20"),
    Field("context", "str", default="", maxlen=100_000,
          doc="extra context on stack or constraints"),
)

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
          doc="kill a run without output for this long; 0 = off"),
    Field("logRetentionDays", "int", nullable=True, lo=1, hi=36500,
          doc="delete agent logs older than this; null = keep forever"),
)

#: Log entry and revision shapes (read-only), for the OpenAPI document.
LOG_FIELDS = (
    _ro("id"), _ro("taskId", column="task_id"), _ro("runId", column="run_id"),
    _ro("createdAt", "time", column="created_at"), _ro("kind", "str"), _ro("message", "str"),
    _ro("tool", "str"), _ro("isError", "bool", column="is_error"),
    _ro("durationMs", column="duration_ms"),
)
#: Log entry kinds.
LOG_KINDS = ("text", "thinking", "tool_call", "tool_result", "system", "stderr", "raw", "status")
REVISION_FIELDS = (_ro("id"), _ro("taskId", column="task_id"), _ro("feedback", "str"),
                   _created())
ATTACHMENT_FIELDS = (_ro("id"), _ro("taskId", column="task_id"), _ro("fileName", "str",
                     column="file_name"), _ro("mimeType", "str", column="mime_type"),
                     _ro("size"), _created())


def validate(fields, body, *, partial=False, defaults=True) -> dict:
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
            if defaults and field.default is not None:
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
    return {name: (convert(row.get(column)) if convert else row.get(column))
            for name, column, convert in _render_plan(fields, only)}


@functools.cache
def json_object_sql(fields) -> str:
    """An SQLite json_object() expression rendering a row exactly as render() does.

    For long lists SQLite builds the JSON text itself, without a Python object per value.
    """
    parts = []
    for f in fields:
        if f.kind == "secret":
            continue
        if f.kind == "bool":
            value = f"json(CASE WHEN {f.column} IS NULL THEN 'null' WHEN {f.column} " \
                    f"THEN 'true' ELSE 'false' END)"
        elif f.kind == "events":
            value = f"json({f.column})"
        else:
            value = f.column
        parts.append(f"'{f.name}', {value}")
    return f"json_object({', '.join(parts)})"


@functools.cache
def _render_plan(fields, only=None):
    def convert(field):
        return field.render if field.kind in ("bool", "events") else None
    return tuple((f.name, f.column, convert(f)) for f in fields
                 if f.kind != "secret" and (only is None or f.name in only))


# =============================================================================
# STORE
# =============================================================================
# dataset opens the database and its connections (WAL, foreign keys); transactions run
# one at a time under WRITE_LOCK, a gevent lock (sqlite's busy wait would freeze the hub),
# all on one connection taken from dataset's pool, with no I/O inside.  Statements are
# plain parameterised SQL on that connection, several times faster than going through
# SQLAlchemy for every row.  Every store function is one transaction.

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
    # Every change to a project's tasks bumps its version, so that its list, counts and
    # stats can be kept between two changes (triggers: no write path can forget one).
    # The covering indexes answer a project's stats without reading task or run rows.
    # (migrate() splits a script at ";\n": a trigger's inner statements end mid-line.)
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
    # A webhook's moments wait here until delivered, so that a restart loses none.
    ("0007_webhook_outbox", """
CREATE TABLE webhook_outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  webhook_id INTEGER NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
  moment_json TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX webhook_outbox_by_hook ON webhook_outbox(webhook_id, id);
"""),
)


class Tx:
    """The statements of one transaction, run on its raw sqlite3 connection."""

    def __init__(self, connection):
        self.connection = connection

    def execute(self, sql: str, params=()) -> sqlite3.Cursor:
        return self.connection.execute(sql, params)

    def one(self, sql: str, params=()) -> dict | None:
        cursor = self.connection.execute(sql, params)
        row = cursor.fetchone()
        return None if row is None else dict(zip(_names(cursor), row))

    def all(self, sql: str, params=()) -> list[dict]:
        cursor = self.connection.execute(sql, params)
        names = _names(cursor)
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

    def update(self, table: str, row_id: int, changes: dict) -> None:
        if changes:
            assignments = ", ".join(f"{name} = ?" for name in changes)
            self.connection.execute(f"UPDATE {table} SET {assignments} WHERE id = ?",
                                    (*changes.values(), row_id))

    def in_thread(self, read):
        """read(self) in a worker thread, for reads that take tens of milliseconds at
        scale (a big project's list, a long log, sums over every run).

        The transaction and its lock stay held, so nothing else touches the database,
        but the hub goes on serving sockets and agents meanwhile: SQLite releases the
        GIL while it works.
        """
        future = gevent.get_hub().threadpool.spawn(read, self)
        try:
            return future.get()
        finally:
            # NOTE: even when this greenlet is killed meanwhile, the transaction must not
            # end (rollback, the lock released, the connection reused) under a read
            while not future.ready():
                with contextlib.suppress(gevent.GreenletExit):
                    future.wait()


def _insert_sql(table: str, values: dict) -> str:
    return f"INSERT INTO {table} ({', '.join(values)}) VALUES ({_marks(values)})"


def _names(cursor) -> list[str]:
    return [d[0] for d in cursor.description]


def _marks(values) -> str:
    return ",".join("?" * len(values))


def open_db(path: str) -> dataset.Database:
    return dataset.connect(
        f"sqlite:///{path}", ensure_schema=False, sqlite_wal_mode=True,
        on_connect_statements=["PRAGMA foreign_keys=ON", "PRAGMA synchronous=NORMAL",
                               "PRAGMA busy_timeout=0", "PRAGMA wal_autocheckpoint=0"])


#: How often checkpoint_wal() runs (SQLite's own checkpoints are turned off).
CHECKPOINT_SECONDS = 1.0


def checkpoint_wal(path: str) -> tuple[int, int, int]:
    """Copy what the write-ahead log holds into the database file; run it in a thread.
    Returns SQLite's (busy, frames in the log, frames checkpointed).

    NOTE: SQLite checkpoints by itself inside the COMMIT that takes the log past 1,000
    pages, and a checkpoint syncs the file to disk: under load, just after a 2 GB copy,
    one took 0.77 s, and the whole server (one thread) stood still.  A PASSIVE checkpoint
    takes no lock and waits for nobody, so it is the one database access outside tx(),
    on a connection of its own (it reads and writes no rows).
    """
    connection = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=rw", uri=True,
                                 isolation_level=None)
    try:
        return connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        connection.close()


def checkpoint(path: str) -> None:
    """checkpoint_wal() in a worker thread.  Once the log holds more than WAL_LIMIT_FRAMES,
    again for the pages written meanwhile, until a pass finds few of them: that pass is
    repeated holding WRITE_LOCK, so it copies the rest while nothing is written.

    NOTE: SQLite starts the log again from its beginning only at a write that finds all of
    it copied.  Under steady writes a checkpoint beside them never got there: the log grew
    by 80 MB for each second of task creation.  A pass holding the lock stops every write
    while it copies and syncs, so it only ever copies a few pages.
    """
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
#: starts again (see checkpoint).
#: NOTE: the file keeps its size and is written over: cutting it back (journal_size_limit)
#: made the first COMMIT after a restart wait up to 160 ms for the truncate, on the hub.
#: At 4,096 pages, the pass holding the lock came every 2 s under the load.
WAL_LIMIT_FRAMES = 16384
#: At most this many pages written during a pass let the next one hold the lock.
WAL_LOCKED_FRAMES = 256


#: How long a transaction waits for another program to release the database's write lock
#: (cooperatively: SQLite's own busy wait would sleep in C and freeze every greenlet).
BUSY_WAIT_SECONDS = 5.0


#: The open database (a dataset.Database): taskboard.init() sets it, shutdown() clears it.
database = None
#: (database, pooled connection): the connection every transaction of that database runs on.
_held = None


#: Greenlets waiting in tx() for WRITE_LOCK.
_waiting = 0


@contextlib.contextmanager
def tx():
    """The one way to touch the database: a short transaction, committed on exit."""
    _take_turn()
    try:
        connection = _connection()
        _begin_immediate(connection)
        try:
            yield Tx(connection)
        except BaseException:
            _roll_back(connection)
            raise
        try:
            connection.commit()
        except BaseException:
            # a COMMIT that failed (a full disk, a lock held too long) leaves the
            # transaction open: end it, or the next one could not begin
            _roll_back(connection)
            raise
    finally:
        WRITE_LOCK.release()


def _take_turn() -> None:
    """Acquire WRITE_LOCK after the greenlets already waiting for it.

    NOTE: gevent's lock goes to whoever asks while it is free, even before the greenlets
    it is waking up: the log writer, taking it batch after batch, kept requests waiting
    for 200 ms.  Yielding first lets the woken one take it.
    """
    global _waiting
    if _waiting:
        gevent.sleep(0)
    _waiting += 1
    try:
        WRITE_LOCK.acquire()
    finally:
        _waiting -= 1


class GroupCommit:
    """A write that greenlets calling it at about the same time share one transaction for
    (group commit), each in a savepoint of its own: one failing leaves the others be.

    Calling it waits for the COMMIT and answers what write(t, *args) returned, or raises
    what it raised; a transaction that cannot begin or commit fails every call in it.

    NOTE: a COMMIT copies every page the transaction changed to the write-ahead log.  A
    new task changes about a dozen (the task and five indexes, its activity row and two,
    the project's counter, the task version, the id sequence); tasks created together
    share most of them.  With 4 clients creating tasks (bench/api.py's), groups held about
    3, and the server made 10-20 % more tasks a second, with a p99 20 % lower.
    """

    #: At most this many calls per transaction.
    LIMIT = 64

    def __init__(self, write):
        self.write = write
        self.calls = collections.deque()  # (args, gevent.event.AsyncResult)
        self.greenlet = None

    def __call__(self, *args):
        answer = gevent.event.AsyncResult()
        self.calls.append((args, answer))
        if self.greenlet is None:
            self.greenlet = gevent.spawn(self._run)
        return answer.get()

    def _run(self) -> None:
        try:
            while self.calls:
                gevent.sleep(0)  # the requests ready to run join this group first
                group = [self.calls.popleft()
                         for _ in range(min(self.LIMIT, len(self.calls)))]
                self._commit(group)
        finally:
            self.greenlet = gevent.spawn(self._run) if self.calls else None  # when killed

    def _commit(self, group) -> None:
        outcomes = []
        try:
            with tx() as t:
                for args, _ in group:
                    outcomes.append(self._in_savepoint(t, args))
        except BaseException as exc:
            for _, answer in group:
                answer.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, answer), (value, error) in zip(group, outcomes):
            if error is None:
                answer.set(value)
            else:
                answer.set_exception(error)

    def _in_savepoint(self, t: Tx, args) -> tuple:
        t.execute("SAVEPOINT call")
        try:
            value = self.write(t, *args)
        except Exception as exc:
            try:
                t.execute("ROLLBACK TO call")
                t.execute("RELEASE call")
            except sqlite3.Error:
                raise exc from None  # SQLite ended the whole transaction (a full disk)
            return None, exc
        t.execute("RELEASE call")
        return value, None


def _connection() -> sqlite3.Connection:
    """The open database's connection, taken from dataset's pool on first use and kept.

    NOTE: transactions never overlap (WRITE_LOCK), so one connection serves them all.
    dataset would check a connection out of its pool per greenlet and give it back at the
    end of every transaction: that took longer than the INSERTs of a new task.
    """
    global _held
    if _held is None or _held[0] is not database:
        release_connection()
        _held = (database, database.engine.raw_connection())
    return _held[1].driver_connection


def release_connection() -> None:
    """Give the kept connection back to dataset's pool (before the database is closed)."""
    global _held
    held, _held = _held, None
    if held is not None:
        with contextlib.suppress(Exception):
            held[1].close()


def _roll_back(connection: sqlite3.Connection) -> None:
    try:
        connection.rollback()
    except Exception:
        release_connection()  # one that cannot even roll back is not used again
        log.exception("a rollback failed")


#: Bumped after every write that can change the agents' usage sums (a run or plan that
#: ends, deleted tasks and projects), so that the sums can be kept between two such writes.
usage_version = 0


def _usage_changed() -> None:
    global usage_version
    usage_version += 1


#: Bumped after every write to webhooks, so that the projects that have one can be kept.
webhooks_version = 0


def _bumps(*counters):
    """Bump these counters of this module after the store function's commit (a reader
    that read before it then reads again)."""
    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            finally:
                for name in counters:
                    globals()[name] += 1
        return wrapper
    return decorate


_changes_usage = _bumps("usage_version")


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


#: Bytes of values derived from tasks (task lists above all) kept between changes.
DERIVED_BYTES = 16 * 1024 * 1024


class Derived:
    """Values derived from a project's tasks (its list as JSON, its counts), each kept
    with the project's task version it was read at; least recently used go first.

    The triggers of migration 0006 bump the version in the same transaction as any change
    to the project's tasks, so a value read in a later transaction at the same version is
    still exact.  A big project's list is 20-40 ms of SQLite; checking the version, 10 us.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.owner = None  # the database the values came from
        self.items = collections.OrderedDict()  # key -> (version, value, size)
        self.size = 0

    def get(self, t: Tx, key: tuple, project_id: int, build):
        """build(t)'s value for key, built only if the project's tasks changed since."""
        if self.owner is not database:
            self.owner, self.size = database, 0
            self.items.clear()
        version = t.value("SELECT version FROM task_versions WHERE project_id = ?",
                          (project_id,)) or 0
        kept = self.items.get(key)
        if kept is not None and kept[0] == version:
            self.items.move_to_end(key)
            return kept[1]
        value = build(t)
        self.forget(key)
        size = len(value) if isinstance(value, str) else 1024
        if size <= self.limit:
            self.items[key] = (version, value, size)
            self.size += size
            while self.size > self.limit:
                self.forget(next(iter(self.items)))
        return value

    def forget(self, key) -> None:
        kept = self.items.pop(key, None)
        if kept is not None:
            self.size -= kept[2]


DERIVED = Derived(DERIVED_BYTES)


def migrate() -> list[str]:
    """Apply the migrations not applied yet, each in its own transaction."""
    with tx() as t:
        t.connection.execute("CREATE TABLE IF NOT EXISTS _migrations "
                             "(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    applied = []
    for name, script in MIGRATIONS:
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


# --- projects ----------------------------------------------------------------

def project_row(project_id: int) -> dict | None:
    with tx() as t:
        return t.one("SELECT * FROM projects WHERE id = ?", (project_id,))


def project_rows() -> list[dict]:
    with tx() as t:
        return t.all("SELECT * FROM projects ORDER BY id")


def project_summary_rows() -> list[dict]:
    """Every project with its task counts per status under "counts"."""
    with tx() as t:
        projects = t.all("SELECT * FROM projects ORDER BY id")
        for p in projects:
            p["counts"] = dict(DERIVED.get(t, ("counts", p["id"]), p["id"],
                                           functools.partial(_status_counts, p["id"])))
    return projects


def _status_counts(project_id: int, t: Tx) -> dict[str, int]:
    return dict(t.execute("SELECT status, COUNT(*) FROM tasks WHERE project_id = ? "
                          "GROUP BY status", (project_id,)).fetchall())


def insert_project_row(values: dict) -> dict:
    """Insert a project, deriving its unique key; raise Conflict on a taken slug."""
    with tx() as t:
        if t.value("SELECT 1 FROM projects WHERE slug = ?", (values["slug"],)):
            raise Conflict(f"slug {values['slug']!r} is already taken", "slug")
        base = project_key_from_slug(values["slug"])
        taken = {r["key"] for r in t.all("SELECT key FROM projects WHERE key LIKE ?",
                                         (base + "%",))}
        candidates = itertools.chain([base], (f"{base}{n}" for n in itertools.count(2)))
        key = next(k for k in candidates if k not in taken)
        now = now_iso()
        project_id = t.insert("projects", {**values, "key": key, "created_at": now,
                                           "updated_at": now})
        return t.one("SELECT * FROM projects WHERE id = ?", (project_id,))


def update_project_row(project_id: int, changes: dict) -> dict | None:
    with tx() as t:
        if not t.exists("projects", project_id):
            return None
        if "slug" in changes and t.value("SELECT 1 FROM projects WHERE slug = ? AND id != ?",
                                         (changes["slug"], project_id)):
            raise Conflict(f"slug {changes['slug']!r} is already taken", "slug")
        t.update("projects", project_id, {**changes, "updated_at": now_iso()})
        return t.one("SELECT * FROM projects WHERE id = ?", (project_id,))


#: A planning session's model, start and tokens, as runs keep them (see USAGE_SOURCE).
PLAN_TOKENS = ("model, started_at, COALESCE(json_extract(stats_json, '$.tokens.input'), 0), "
               "COALESCE(json_extract(stats_json, '$.tokens.output'), 0)")


@_bumps("usage_version", "webhooks_version")
def delete_project_row(project_id: int) -> list[str] | None:
    """Delete a project and everything in it; return its attachment paths, None if absent."""
    with tx() as t:
        if not t.exists("projects", project_id):
            return None
        paths = [r["path"] for r in t.all(
            "SELECT a.path FROM attachments a JOIN tasks k ON k.id = a.task_id "
            "WHERE k.project_id = ?", (project_id,))]
        # the plans go with the project, what they cost stays in the agents' usage (its
        # task runs stay as they are, without their task and project)
        t.execute("INSERT INTO runs (kind, status, ended_at, model, started_at, input_tokens, "
                  f"output_tokens, cost) SELECT 'planner', status, finished_at, {PLAN_TOKENS}, "
                  "cost FROM plans WHERE project_id = ? AND status != 'running' ORDER BY id",
                  (project_id,))
        t.execute("DELETE FROM projects WHERE id = ?", (project_id,))
        t.execute("DELETE FROM task_versions WHERE project_id = ?", (project_id,))
        return paths


# --- tasks -------------------------------------------------------------------

class Moment:
    """A moment webhooks may announce (design §8), queued by the store function that makes
    the change it announces, in the same transaction: a crash keeps both or neither.

    data goes with every task's moment; from_task names more data each task's moment takes
    from its row ({"issue": "issue_number"}).  After the commit, `hooks` are the webhooks it
    was queued for and `dropped` how many older moments made room for it.
    """

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
        if project_id not in _hooked_project_ids(t):
            return
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
            self.dropped += _keep_newest(t, "webhook_outbox", hook_id, WEBHOOK_QUEUE_KEPT)
        self.hooks += [h for h in hooks if h not in self.hooks]


#: The queue's order, which is also the task list's order.
TASK_ORDER = "priority DESC, queue_position, created_at, id"


def task_row(task_id: int) -> dict | None:
    with tx() as t:
        return t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))


def task_rows(project_id: int) -> list[dict] | None:
    with tx() as t:
        if not t.exists("projects", project_id):
            return None
        return t.all(f"SELECT * FROM tasks WHERE project_id = ? ORDER BY {TASK_ORDER}",
                     (project_id,))


def task_rows_json(project_id: int, object_sql: str) -> str | None:
    """The project's tasks as one JSON array built by SQLite, each row as object_sql."""
    with tx() as t:
        if not t.exists("projects", project_id):
            return None
        # NOTE: json_object() makes valid JSON text; json_group_array(json(j)) would
        # parse every object again (a quarter of the time)
        return DERIVED.get(t, ("list", project_id, object_sql), project_id,
                           lambda t: t.in_thread(lambda t: t.value(
                               f"SELECT '[' || coalesce(group_concat(j, ','), '') || ']' "
                               f"FROM (SELECT {object_sql} AS j FROM tasks "
                               f"WHERE project_id = ? ORDER BY {TASK_ORDER})", (project_id,))))


def task_detail_rows(task_id: int, log_sql: str) -> dict | None:
    """The task with its revisions, attachments and complete log, read at one moment; the
    log is one JSON array built by SQLite, each entry as log_sql (a task may have tens of
    thousands)."""
    with tx() as t:
        task = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if task is None:
            return None
        for table in ("revisions", "attachments"):
            task[table] = t.all(f"SELECT * FROM {table} WHERE task_id = ? ORDER BY id",
                                (task_id,))
        task["logs_json"] = t.in_thread(lambda t: t.value(
            f"SELECT json_group_array(json(j)) FROM (SELECT {log_sql} AS j FROM logs "
            "WHERE task_id = ? ORDER BY id)", (task_id,)))
        return task


def insert_task_row(project_id: int, values: dict, defaults: dict, moment: Moment) \
        -> tuple[dict, bool] | None:
    """Insert a task with the project's next key, record its creation and queue its
    moment; return it and whether the project queues automatically, None if there is no
    such project.

    An omitted model or thinking effort comes from the project's template of the task's
    type (lowest id), else from defaults.
    """
    return _insert_tasks(project_id, values, defaults, moment)


def _insert_task(t: Tx, project_id: int, values: dict, defaults: dict, moment: Moment) \
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
    t.insert("activity", {"project_id": project_id, "task_id": task["id"],
                          "task_title": values["title"], "event": "created",
                          "from_status": None, "to_status": "backlog", "created_at": now})
    moment.queue(t, task)
    return task, project["auto_queue"]


_insert_tasks = GroupCommit(_insert_task)


def subtask_rows(parent_id: int) -> list[dict]:
    with tx() as t:
        return t.all("SELECT * FROM tasks WHERE parent_task_id = ? ORDER BY id", (parent_id,))


def update_task_row(task_id: int, changes: dict) -> dict | None:
    with tx() as t:
        if not t.exists("tasks", task_id):
            return None
        t.update("tasks", task_id, {**changes, "updated_at": now_iso()})
        return t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))


def move_task_row(task_id: int, to: str, changes_for, only_from=None,
                  moment: Moment | None = None) -> tuple[dict, dict] | None:
    """Change a task's status, record it and queue its moment; return (before, after),
    None if absent.

    changes_for(before, now) gives the other columns the move changes (timers, counters).
    With only_from, a task in another status is left as it is.
    """
    with tx() as t:
        before = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if before is None:
            return None
        if before["status"] == to or (only_from and before["status"] != only_from):
            return before, before
        now = now_iso()
        t.update("tasks", task_id, {**changes_for(before, now), "status": to,
                                    "updated_at": now})
        t.insert("activity", {"project_id": before["project_id"], "task_id": task_id,
                              "task_title": before["title"], "event": "status_change",
                              "from_status": before["status"], "to_status": to,
                              "created_at": now})
        after = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if moment is not None:
            moment.queue(t, after)
        return before, after


@_changes_usage
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


def log_rows_json(task_id: int, limit: int, before: int | None, object_sql: str) \
        -> str | None:
    """The newest `limit` log entries of a task (with ids below `before`, when given),
    oldest first, as one JSON array built by SQLite, each entry as object_sql; None if no
    such task.  One index range: never a scan of the logs."""
    with tx() as t:
        if not t.exists("tasks", task_id):
            return None
        return t.value(
            f"SELECT '[' || coalesce(group_concat(j, ','), '') || ']' FROM (SELECT j FROM "
            f"(SELECT {object_sql} AS j, id FROM logs WHERE task_id = ? AND id < ? "
            "ORDER BY id DESC LIMIT ?) ORDER BY id)",
            (task_id, 2**63 - 1 if before is None else before, limit))


def delete_old_log_rows(table: str, cutoff: str, chunk: int) -> int:
    """Delete up to `chunk` of the oldest rows of logs or task_events created before
    cutoff; return how many.  Rows are walked in id order (which is time order), so no
    index on created_at is needed and each call is one short transaction."""
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
    """Insert a batch of log entries and raw agent lines in order; return the entries as
    the API shows them, one JSON array SQLite makes in the worker thread (None without
    entries), and {task: project}.  Rows of tasks deleted meanwhile are dropped.
    """
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


def revision_rows(task_id: int) -> list[dict] | None:
    with tx() as t:
        if not t.exists("tasks", task_id):
            return None
        return t.all("SELECT * FROM revisions WHERE task_id = ? ORDER BY id", (task_id,))


# --- runs ----------------------------------------------------------------------

def run_context_rows(task_id: int) -> dict | None:
    """Everything a run's prompt and command line need, read at one moment."""
    with tx() as t:
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
        }


def task_slot_row(task_id: int) -> dict | None:
    """A task's status with its project's concurrency limit."""
    with tx() as t:
        return t.one("SELECT k.status, k.project_id, p.max_concurrent, p.slug FROM tasks k "
                     "JOIN projects p ON p.id = k.project_id WHERE k.id = ?", (task_id,))


def insert_run_row(values: dict) -> int:
    with tx() as t:
        return t.insert("runs", {**values, "status": "running", "started_at": now_iso()})


def update_run_row(run_id: int, changes: dict) -> None:
    with tx() as t:
        t.update("runs", run_id, changes)
    if "status" in changes:  # a run that could not start ends here
        _usage_changed()


@_changes_usage
def finish_run_rows(run_id: int, run_changes: dict, task_changes: dict) -> dict | None:
    """Record a run's end and add its usage to its task; return the task (None if gone)."""
    with tx() as t:
        t.update("runs", run_id, {**run_changes, "ended_at": now_iso()})
        run = t.one("SELECT * FROM runs WHERE id = ?", (run_id,))
        if run["task_id"] is None:
            return None
        t.execute("UPDATE tasks SET input_tokens = input_tokens + ?, output_tokens = "
                  "output_tokens + ?, cache_read_tokens = cache_read_tokens + ?, "
                  "cache_creation_tokens = cache_creation_tokens + ?, total_cost = "
                  "total_cost + ? WHERE id = ?",
                  (run["input_tokens"], run["output_tokens"], run["cache_read_tokens"],
                   run["cache_creation_tokens"], run["cost"], run["task_id"]))
        t.update("tasks", run["task_id"], {**task_changes, "updated_at": now_iso()})
        return t.one("SELECT * FROM tasks WHERE id = ?", (run["task_id"],))


def bump_retry_row(task_id: int) -> dict | None:
    with tx() as t:
        t.execute("UPDATE tasks SET retry_count = retry_count + 1 WHERE id = ?", (task_id,))
        return t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))


def unfinished_run_rows() -> list[dict]:
    """Runs a previous server left 'running' (it was killed before it could stop them)."""
    with tx() as t:
        return t.all("SELECT * FROM runs WHERE status = 'running' AND pid IS NOT NULL "
                     "ORDER BY id")


@_changes_usage
def restart_rows() -> list[dict]:
    """After a restart: mark runs left 'running' interrupted, clear stale run flags, and
    return every in_progress task with the status and session of its latest run."""
    with tx() as t:
        t.execute("UPDATE runs SET status = 'interrupted', ended_at = ? "
                  "WHERE status = 'running'", (now_iso(),))
        t.execute("UPDATE tasks SET is_running = 0 WHERE is_running = 1")
        return t.all("SELECT k.*, r.status AS run_status, r.session_id AS run_session "
                     "FROM tasks k LEFT JOIN runs r ON r.id = (SELECT MAX(id) FROM runs "
                     "WHERE task_id = k.id AND kind = 'task') WHERE k.status = 'in_progress' "
                     "ORDER BY k.id")


# --- pipeline: dependencies, revisions, queue order -----------------------------

def pipeline_rows(project_id: int) -> tuple[list[dict], list[dict]] | None:
    """A project's tasks (in queue order) and dependency edges; None if no project."""
    with tx() as t:
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
    with tx() as t:
        tasks = t.all(f"SELECT * FROM tasks WHERE project_id = ? AND status = 'backlog' AND "
                      f"{which} ORDER BY {TASK_ORDER}", params)
        ids = [task["id"] for task in tasks]
        edges = t.all(f"{EDGES_WITH_PARENTS} WHERE d.to_id IN ({_marks(ids)})", ids) \
            if ids else []
        return tasks, edges


def task_dependency_rows(task_id: int) -> dict | None:
    with tx() as t:
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
        seen, stack = set(), [to_id]
        while stack:  # does from_id already depend on to_id, directly or not?
            node = stack.pop()
            if node == from_id:
                raise Conflict(f"task {to_id} depending on task {from_id} would make a cycle",
                               "dependsOnId")
            if node not in seen:
                seen.add(node)
                stack.extend(children[node])
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


def insert_revision_row(task_id: int, feedback: str, moment: Moment) -> dict | None:
    """Record a change request (and its activity) and queue its moment; return the task,
    None if absent."""
    with tx() as t:
        task = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if task is None:
            return None
        now = now_iso()
        t.insert("revisions", {"task_id": task_id, "feedback": feedback, "created_at": now})
        t.insert("activity", {"project_id": task["project_id"], "task_id": task_id,
                              "task_title": task["title"], "event": "revision",
                              "from_status": task["status"], "to_status": task["status"],
                              "created_at": now})
        t.update("tasks", task_id, {"revision_count": task["revision_count"] + 1,
                                    "updated_at": now})
        task = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        moment.queue(t, task)
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
        missing = [i for i in task_ids if i not in rows]
        if missing:
            raise Invalid(f"task {missing[0]} is not a task of project {project_id}", "taskIds")
        priority, now = 0, now_iso()
        for position in range(len(task_ids) - 1, -1, -1):
            task_id = task_ids[position]
            priority = max(rows[task_id]["priority"], priority)
            t.update("tasks", task_id, {"queue_position": position, "priority": priority,
                                        "updated_at": now})
        return t.all(f"SELECT * FROM tasks WHERE id IN ({_marks(task_ids)})", task_ids)


def task_event_rows(task_id: int, limit: int) -> list[dict] | None:
    """The newest `limit` raw agent lines of a task, oldest first."""
    with tx() as t:
        if not t.exists("tasks", task_id):
            return None
        rows = t.all("SELECT * FROM task_events WHERE task_id = ? ORDER BY id DESC LIMIT ?",
                     (task_id, limit))
    rows.reverse()
    return rows


def last_move_row(task_id: int) -> int | None:
    """The id of the task's latest status change, to notice a move."""
    with tx() as t:
        return t.value("SELECT MAX(id) FROM activity WHERE task_id = ? AND event = "
                       "'status_change'", (task_id,))


def verifier_rejections(task_id: int) -> int:
    with tx() as t:
        return t.value("SELECT COUNT(*) FROM runs WHERE task_id = ? AND kind = 'verifier' "
                       "AND status = 'rejected'", (task_id,))


def run_rows(task_id: int) -> list[dict]:
    with tx() as t:
        return t.all("SELECT * FROM runs WHERE task_id = ? AND kind = 'task' ORDER BY id",
                     (task_id,))


# --- attachments -------------------------------------------------------------

def attachment_row(attachment_id: int) -> dict | None:
    with tx() as t:
        return t.one("SELECT * FROM attachments WHERE id = ?", (attachment_id,))


def insert_attachment_row(values: dict) -> dict | None:
    with tx() as t:
        if not t.exists("tasks", values["task_id"]):
            return None
        attachment_id = t.insert("attachments", {**values, "created_at": now_iso()})
        return t.one("SELECT * FROM attachments WHERE id = ?", (attachment_id,))


def delete_attachment_row(attachment_id: int) -> dict | None:
    with tx() as t:
        row = t.one("SELECT * FROM attachments WHERE id = ?", (attachment_id,))
        if row is not None:
            t.execute("DELETE FROM attachments WHERE id = ?", (attachment_id,))
        return row


# --- per-project resources: templates, snippets, webhooks ---------------------

def child_rows(table: str, project_id: int) -> list[dict] | None:
    with tx() as t:
        if not t.exists("projects", project_id):
            return None
        return t.all(f"SELECT * FROM {table} WHERE project_id = ? ORDER BY id", (project_id,))


def child_row(table: str, project_id: int, row_id: int) -> dict | None:
    with tx() as t:
        return t.one(f"SELECT * FROM {table} WHERE id = ? AND project_id = ?",
                     (row_id, project_id))


@_bumps("webhooks_version")  # templates and snippets too: rare writes
def insert_child_row(table: str, project_id: int, values: dict) -> dict | None:
    with tx() as t:
        if not t.exists("projects", project_id):
            return None
        now = now_iso()
        row_id = t.insert(table, {**values, "project_id": project_id, "created_at": now,
                                  "updated_at": now})
        return t.one(f"SELECT * FROM {table} WHERE id = ?", (row_id,))


@_bumps("webhooks_version")
def update_child_row(table: str, project_id: int, row_id: int, changes: dict) -> dict | None:
    with tx() as t:
        if not t.value(f"SELECT 1 FROM {table} WHERE id = ? AND project_id = ?",
                       (row_id, project_id)):
            return None
        t.update(table, row_id, {**changes, "updated_at": now_iso()})
        return t.one(f"SELECT * FROM {table} WHERE id = ?", (row_id,))


@_bumps("webhooks_version")
def delete_child_row(table: str, project_id: int, row_id: int) -> bool:
    with tx() as t:
        return t.execute(f"DELETE FROM {table} WHERE id = ? AND project_id = ?",
                         (row_id, project_id)).rowcount > 0


def delivery_rows(webhook_id: int, limit: int = 50) -> list[dict]:
    with tx() as t:
        return t.all("SELECT * FROM webhook_deliveries WHERE webhook_id = ? "
                     "ORDER BY id DESC LIMIT ?", (webhook_id, limit))


def queue_moment(moment: Moment, task_id: int) -> None:
    """Queue a moment that comes with no change of its own (none if the task is gone)."""
    with tx() as t:
        task = t.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if task is not None:
            moment.queue(t, task)


def next_webhook_moment(hook_id: int, after: int) -> tuple[int, dict, dict, dict] | None:
    """The webhook's oldest queued moment after outbox id `after`: (its id, the moment, the
    webhook as it is now, its project); None when there is none."""
    with tx() as t:
        row = t.one("SELECT id, moment_json FROM webhook_outbox WHERE webhook_id = ? AND "
                    "id > ? ORDER BY id LIMIT 1", (hook_id, after))
        if row is None:
            return None
        hook = t.one("SELECT * FROM webhooks WHERE id = ?", (hook_id,))
        if hook is None:  # deleted by a program that leaves foreign keys off
            t.execute("DELETE FROM webhook_outbox WHERE webhook_id = ?", (hook_id,))
            return None
        project = t.one("SELECT id, name, slug FROM projects WHERE id = ?",
                        (hook["project_id"],))
        return row["id"], json.loads(row["moment_json"]), hook, project


def delete_webhook_moment(outbox_id: int) -> None:
    with tx() as t:
        t.execute("DELETE FROM webhook_outbox WHERE id = ?", (outbox_id,))


def queued_webhook_ids() -> list[int]:
    """The webhooks with moments waiting (at start-up: the ones a stop left behind)."""
    with tx() as t:
        return [r[0] for r in t.execute("SELECT DISTINCT webhook_id FROM webhook_outbox "
                                        "ORDER BY webhook_id")]


#: (database, webhooks_version, projects with an enabled webhook) as last read.
_hooked = (None, -1, frozenset())


def _hooked_project_ids(t: Tx) -> frozenset:
    """The projects that have an enabled webhook, read again only after webhooks changed:
    a change in any other project queues its moment without a statement."""
    global _hooked
    if _hooked[0] is not database or _hooked[1] != webhooks_version:
        version = webhooks_version
        ids = frozenset(r[0] for r in t.execute(
            "SELECT DISTINCT project_id FROM webhooks WHERE enabled = 1"))
        _hooked = (database, version, ids)
    return _hooked[2]


def webhook_test_rows(project_id: int, webhook_id: int) -> tuple[dict, dict, dict | None] | None:
    """A webhook (secret included), its project and the project's latest task, for the
    test route; None when there is no such webhook."""
    with tx() as t:
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
        _keep_newest(t, "webhook_deliveries", values["webhook_id"], keep)
        return t.one("SELECT * FROM webhook_deliveries WHERE id = ?", (row_id,))


def _keep_newest(t: Tx, table: str, webhook_id: int, keep: int) -> int:
    """Delete all but the newest `keep` rows of the webhook in table; how many went."""
    return t.execute(f"DELETE FROM {table} WHERE webhook_id = ? AND id <= (SELECT id FROM "
                     f"{table} WHERE webhook_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
                     (webhook_id, webhook_id, keep)).rowcount


# --- source host -----------------------------------------------------------------

def sync_project_rows() -> list[dict]:
    """The projects whose source-host issues are imported."""
    with tx() as t:
        return t.all("SELECT * FROM projects WHERE git_host_sync_enabled = 1 AND "
                     "git_host_repo != '' ORDER BY id")


def insert_issue_tasks(project_id: int, issues: list[dict], defaults: dict,
                       moment: Moment) -> list[dict]:
    """Import the issues never imported before as backlog tasks (the queue leaves them
    alone until a person moves or edits them), each with its moment; return the new task
    rows."""
    with tx() as t:
        rows = []
        for issue in issues:
            if t.value("SELECT 1 FROM imported_issues WHERE project_id = ? AND number = ?",
                       (project_id, issue["issue_number"])):
                continue
            inserted = _insert_task(t, project_id, {**issue, "source": "git_host"}, defaults,
                                    moment)
            if inserted is None:
                return []
            rows.append(inserted[0])
            t.insert("imported_issues", {"project_id": project_id,
                                         "number": issue["issue_number"],
                                         "task_id": inserted[0]["id"],
                                         "imported_at": now_iso()})
        return rows


# --- planning ------------------------------------------------------------------

def insert_plan_row(values: dict) -> dict | None:
    with tx() as t:
        if not t.exists("projects", values["project_id"]):
            return None
        t.insert("plans", values)
        return t.one("SELECT * FROM plans WHERE plan_id = ?", (values["plan_id"],))


def update_plan_row(plan_id: str, changes: dict) -> None:
    with tx() as t:
        assignments = ", ".join(f"{name} = ?" for name in changes)
        t.execute(f"UPDATE plans SET {assignments} WHERE plan_id = ?",
                  (*changes.values(), plan_id))
    if "status" in changes:  # the session ended
        _usage_changed()


@_changes_usage
def insert_plan_tasks(plan_id: str, project_id: int, tasks: list[dict],
                      edges: list[tuple[int, int]], defaults: dict, changes: dict,
                      moment: Moment) -> tuple[list[dict], bool] | None:
    """Write a plan's tasks with their moments and its edges (index pairs into tasks,
    on_success) and finish the plan row, all in one transaction; return the task rows and
    whether the project queues automatically, None when the project is gone."""
    with tx() as t:
        rows, auto_queue = [], False
        for values in tasks:
            inserted = _insert_task(t, project_id, values, defaults, moment)
            if inserted is None:
                return None
            rows.append(inserted[0])
            auto_queue = inserted[1]
        now = now_iso()
        for parent, child in edges:
            t.execute("INSERT INTO task_dependencies (from_id, to_id, condition_type, "
                      "created_at) VALUES (?, ?, 'on_success', ?)",
                      (rows[parent]["id"], rows[child]["id"], now))
        changes = {**changes, "tasks_json": json_dumps([plan_task_view(r) for r in rows])}
        assignments = ", ".join(f"{name} = ?" for name in changes)
        t.execute(f"UPDATE plans SET {assignments} WHERE plan_id = ?",
                  (*changes.values(), plan_id))
        return rows, bool(auto_queue)


def plan_task_view(row: dict) -> dict:
    """A task as plan:completed and plan/status list it."""
    return {"id": row["id"], "title": row["title"], "task_type": row["task_type"],
            "task_key": row["task_key"]}


def last_plan_row(project_id: int) -> dict | None:
    """The project's latest finished planning session."""
    with tx() as t:
        return t.one("SELECT * FROM plans WHERE project_id = ? AND status != 'running' "
                     "ORDER BY id DESC LIMIT 1", (project_id,))


def running_plan_rows() -> list[dict]:
    with tx() as t:
        return t.all("SELECT * FROM plans WHERE status = 'running' ORDER BY id")


# --- settings ------------------------------------------------------------------

def settings_rows() -> dict:
    with tx() as t:
        return {r["name"]: json.loads(r["value_json"])
                for r in t.all("SELECT name, value_json FROM settings")}


def upsert_settings_rows(values: dict) -> dict:
    with tx() as t:
        for name, value in values.items():
            t.execute("INSERT INTO settings (name, value_json) VALUES (?, ?) ON CONFLICT(name) "
                      "DO UPDATE SET value_json = excluded.value_json", (name, json_dumps(value)))
        return {r["name"]: json.loads(r["value_json"])
                for r in t.all("SELECT name, value_json FROM settings")}


# --- statistics ------------------------------------------------------------------

def db_check() -> str:
    """"ok", or what is wrong with the database (health must always answer)."""
    try:
        with tx() as t:
            t.value("SELECT 1")
    except (sqlite3.Error, OSError) as exc:
        return f"error: {exc}"
    return "ok"


def project_stats_rows(project_id: int, day_start: str) -> dict | None:
    def counts(t, column):
        return {r["k"]: r["n"] for r in t.all(
            f"SELECT {column} AS k, COUNT(*) AS n FROM tasks WHERE project_id = ? "
            f"GROUP BY {column}", (project_id,))}

    def read(t):
        return {
            "status": counts(t, "status"), "type": counts(t, "task_type"),
            "priority": counts(t, "priority"),
            "avg": t.value("SELECT AVG(work_duration_ms) FROM tasks WHERE project_id = ? "
                           "AND status = 'done'", (project_id,)),
            "today": t.value("SELECT COUNT(*) FROM tasks WHERE project_id = ? AND "
                             "status = 'done' AND completed_at >= ?", (project_id, day_start)),
        }
    with tx() as t:
        if not t.exists("projects", project_id):
            return None
        # every figure is read from an index (migration 0006): no task or run row
        return {**DERIVED.get(t, ("stats", project_id, day_start), project_id, read),
                "usage": t.one("SELECT SUM(input_tokens) AS input, SUM(output_tokens) AS "
                               "output, SUM(cost) AS cost, COUNT(*) AS runs FROM runs "
                               "WHERE project_id = ?", (project_id,))}


def activity_rows(project_id: int, limit: int, offset: int) -> list[dict] | None:
    """Skip the `offset` newest entries, take the next `limit`, oldest first."""
    with tx() as t:
        if not t.exists("projects", project_id):
            return None
        rows = t.all("SELECT * FROM activity WHERE project_id = ? ORDER BY id DESC "
                     "LIMIT ? OFFSET ?", (project_id, limit, offset))
    rows.reverse()
    return rows


#: Every agent's usage: task and verifier runs, and planning sessions, once they ended
#: (their usage is written when they end; running ones have none yet).
USAGE_SOURCE = (
    "(SELECT task_id, model, started_at, input_tokens, output_tokens, cache_read_tokens, "
    "cache_creation_tokens, cost FROM runs WHERE status != 'running' UNION ALL SELECT NULL, "
    f"{PLAN_TOKENS}, 0, 0, cost FROM plans WHERE status != 'running')")


def cost_since_row(moment: str) -> float:
    with tx() as t:
        return t.value(f"SELECT COALESCE(SUM(cost), 0) FROM {USAGE_SOURCE} "
                       "WHERE started_at >= ?", (moment,))


def usage_rows(day_start: str) -> dict:
    """Token and cost totals of every agent (task, verifier, planner): overall, per model
    tier, per local day, today."""
    sums = ("SUM(input_tokens) AS input, SUM(output_tokens) AS output, "
            "SUM(cache_read_tokens) AS cache_read, SUM(cache_creation_tokens) AS "
            "cache_creation, SUM(cost) AS cost")
    reads = {
        "total": lambda t: t.one(f"SELECT {sums} FROM {USAGE_SOURCE}"),
        "models": lambda t: t.all(f"SELECT model, COUNT(DISTINCT task_id) AS tasks, {sums} "
                                  f"FROM {USAGE_SOURCE} GROUP BY model"),
        "days": lambda t: t.all(f"SELECT date(started_at, 'localtime') AS day, {sums} "
                                f"FROM {USAGE_SOURCE} GROUP BY day ORDER BY day"),
        "today": lambda t: t.value(f"SELECT SUM(cost) FROM {USAGE_SOURCE} "
                                   "WHERE started_at >= ?", (day_start,)),
    }
    # NOTE: each sum reads every run (60 ms at 67,000 runs), so each has a transaction of
    # its own: together they held the lock for 220 ms.  A run that ends in between bumps
    # usage_version, and a caller that keeps the sums reads them all again.
    out = {}
    for name, read in reads.items():
        with tx() as t:
            out[name] = t.in_thread(read)
    return out
