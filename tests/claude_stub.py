"""The real Claude Code CLI against a loopback stand-in for the Anthropic Messages API.

Tests that drive the real `claude` (npm @anthropic-ai/claude-code, pinned below) use:

- `MessagesStub`: an HTTP server on 127.0.0.1 (port 0, in a thread) that answers
  `POST /v1/messages` like the API would, streaming SSE. What it answers is chosen from the
  last thing the user said, like the stub the recordings in agent-streams/claude-control-*
  were made with:
    MODE:echo X   -> text "You said: X"
    MODE:bash CMD -> thinking + text + tool_use Bash {command: CMD}; after the tool result,
                     text "Tool said: <result>"
    MODE:ask Q    -> tool_use AskUserQuestion (one question, options Red/Blue); after the
                     tool result, text "Tool said: <result>"
    MODE:subtask T -> text + tool_use mcp__taskboard__create_task {title: T} (the board
                     tools); after the tool result, as MODE:bash
    MODE:slow     -> a text streamed one delta every 0.2 s for up to 30 s (room for an interrupt)
    anything else -> text "You said: <text>" (follow-ups, stop-hook feedback)
  Every request is kept in `stub.requests` for assertions.
- `claude_cli()`: the path of the real CLI, installed once with npm into a cache dir;
  skips the test with a clear reason when that cannot be done (no npm, registry unreachable).
- `claude_env()`: the environment that points the CLI at the stub and keeps it off the network
  and out of the real user's config.
- `ClaudeSession`: one CLI process speaking the stream-json control protocol (design.md §12),
  with deadline-bound reads.
"""

import glob
import http.server
import itertools
import json
import os
import queue
import subprocess
import threading
import time

import npm_cli

CLAUDE_VERSION = "2.1.197"
CLAUDE_PACKAGE = f"@anthropic-ai/claude-code@{CLAUDE_VERSION}"
#: The model name the tests pass with --model; the stub answers any name.
MODEL = "claude-sonnet-5"


# The Messages API stand-in ######################################################################

#: Token counts per API response, as in the recordings (sonnet prices -> $0.018825 a response).
USAGE = {"input_tokens": 1200, "output_tokens": 85,
         "cache_creation_input_tokens": 3000, "cache_read_input_tokens": 9000}

#: The one question MODE:ask puts to the person.
QUESTION = {"question": "Which colour should the button be?", "header": "Colour",
            "options": [{"label": "Red", "description": "warm"},
                        {"label": "Blue", "description": "cool"}],
            "multiSelect": False}

_ids = itertools.count(1)


def new_id(prefix):
    """A unique id of the API's kind (`toolu_…`, `call_…`), for every stand-in."""
    return f"{prefix}_{os.getpid():06x}{next(_ids):016x}"


def joined_text(content):
    """A message's content as one text: a string, or its parts' texts joined by lines."""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def message_text(message):
    """What the person said in one user message: its last text block that the CLI did not
    add itself. The CLI appends `<system-reminder>` blocks (skills, context) after the
    person's text; the recordings' stub took the last block and echoed a skills list."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    texts = [b.get("text", "") for b in content or [] if b.get("type") == "text"]
    said = [t for t in texts if not t.lstrip().startswith("<system-reminder>")]
    return (said or texts or [""])[-1]


def tool_results(message):
    """The tool_result blocks of a user message (empty for a plain user turn)."""
    content = message.get("content")
    if isinstance(content, str):
        return []
    return [b for b in content or [] if b.get("type") == "tool_result"]


def result_text(block):
    """A tool_result's content as one string (it is a string or a list of text blocks)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if b.get("type") == "text")


def plan_reply(body):
    """The blocks to answer a Messages request with, from its last user message.

    Returns (blocks, slow): blocks like the API's content list; slow=True streams the text
    a delta at a time (MODE:slow)."""
    # The last *user* message: 2.1.197 may put a role "system" message after it (the agent
    # list; beta mid-conversation-system), which the recordings' stub echoed by mistake.
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    last = users[-1] if users else {"role": "user", "content": ""}
    results = tool_results(last)
    if results:
        # The second leg of MODE:bash / MODE:ask: report what the tool said.
        return [{"type": "text", "text": "Tool said: " + result_text(results[-1])}], False
    said = message_text(last).strip()
    if "MODE:" in said:  # the board's prompt holds the task's description among its lines
        said = said[said.index("MODE:"):].split("\n", 1)[0].strip()
    if said.startswith("MODE:bash"):
        command = said[len("MODE:bash"):].strip()
        return [{"type": "thinking", "thinking": "I should run a shell command.",
                 "signature": "c2lnbmF0dXJl"},
                {"type": "text", "text": "I'll run it."},
                {"type": "tool_use", "id": new_id("toolu"), "name": "Bash",
                 "input": {"command": command, "description": "Run the command"}}], False
    if said.startswith("MODE:ask"):
        return [{"type": "tool_use", "id": new_id("toolu"), "name": "AskUserQuestion",
                 "input": {"questions": [QUESTION]}}], False
    if said.startswith("MODE:subtask"):
        names = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
        if "mcp__taskboard__create_task" not in names:
            return [{"type": "text", "text": "There is no create_task tool."}], False
        return [{"type": "text", "text": "Splitting it."},
                {"type": "tool_use", "id": new_id("toolu"), "name": "mcp__taskboard__create_task",
                 "input": {"title": said[len("MODE:subtask"):].strip()}}], False
    if said.startswith("MODE:slow"):
        return [{"type": "text", "text": "Working slowly"}], True
    if said.startswith("MODE:echo"):
        said = said[len("MODE:echo"):].strip()
    return [{"type": "text", "text": "You said: " + said}], False


def sse_events(message_id, model, blocks):
    """The SSE events of one streamed response, in the API's order (without MODE:slow)."""
    stop_reason = "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn"
    yield "message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": USAGE}}  # the CLI's assistant lines carry these (as in the recordings)
    for index, block in enumerate(blocks):
        yield from block_events(index, block)
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                            "usage": {"output_tokens": USAGE["output_tokens"]}}
    yield "message_stop", {"type": "message_stop"}


def block_events(index, block):
    """content_block_start, its deltas and content_block_stop for one content block."""
    kind = block["type"]
    if kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                  {"type": "signature_delta", "signature": block["signature"]}]
    elif kind == "tool_use":
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
    else:
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": block["text"]}]
    yield "content_block_start", {"type": "content_block_start", "index": index,
                                  "content_block": start}
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                      "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


class LoopbackApi:
    """A model API stand-in on 127.0.0.1 in a thread: what MessagesStub and the stand-ins of
    the other CLIs' APIs share.  A subclass gives answer(handler, path, body); the handler
    sends with send_json(), start_events() and send_event().

    `requests` lists every request received: {"method", "path", "headers", "body"} (body is
    the parsed JSON, or None); `unknown` the (method, path) of requests for endpoints the
    stub does not know (answered 404)."""

    def __init__(self, slow_interval=0.2, slow_seconds=30.0):
        self.slow_interval = slow_interval
        self.slow_seconds = slow_seconds
        self.requests = []
        self.unknown = []
        #: Set once a MODE:slow stream has begun (the moment to interrupt), and when one
        #: ended because the client went away (the interrupt landed).
        self.slow_started = threading.Event()
        self.slow_aborted = threading.Event()
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _handler(self):
        """The request handler class: every request goes, read, to answer()."""
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest's output clean
                pass

            def do_POST(self):
                stub.answer(self, *stub.received(self))

            do_GET = do_HEAD = do_POST

            def send_json(self, status, payload, headers=()):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in [*stub.headers(), *headers]:
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def start_events(self):
                """A 200 text/event-stream without a length: it ends when we close."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                for name, value in stub.headers():
                    self.send_header(name, value)
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

            def send_event(self, payload, name=None, end="\n\n"):
                """One server-sent event: `event: name` when named, then its data."""
                data = payload if isinstance(payload, str) else json.dumps(payload)
                head = f"event: {name}\n" if name else ""
                self.wfile.write(f"{head}data: {data}{end}".encode())
                self.wfile.flush()

        return Handler

    def answer(self, handler, path, body):
        """Answer one request (the subclass's API)."""
        raise NotImplementedError

    def headers(self):
        """Headers of every answer, beside its type and length."""
        return []

    def not_found(self, handler, path, payload):
        """A 404 for an endpoint the stub does not know, kept in `unknown`."""
        self.unknown.append((handler.command, path))
        handler.send_json(404, payload)

    def received(self, handler) -> tuple[str, object]:
        """Read a request (its JSON body; None when there is none or it is not JSON), keep
        it in `requests`, and give its path and body."""
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = handler.path.split("?", 1)[0]
        with self._lock:
            self.requests.append({"method": handler.command, "path": path,
                                  "headers": dict(handler.headers), "body": body})
        return path, body


class MessagesStub(LoopbackApi):
    """A loopback stand-in for the Anthropic Messages API (see the module docstring).

    `requests` lists every request received: {"method", "path", "headers", "body"} (body is
    the parsed JSON, or None). `unknown` lists the (method, path) of requests for endpoints
    the stub does not know; they are answered 404 with an API-style error, which the CLI
    treats as "feature not available"."""

    def messages(self):
        """The bodies of the POST /v1/messages requests, in order."""
        with self._lock:
            return [r["body"] for r in self.requests
                    if r["method"] == "POST" and r["path"] == "/v1/messages"]


    def headers(self):
        return [("request-id", new_id("req"))]

    def answer(self, handler, path, body):
        if handler.command == "POST" and path == "/v1/messages":
            self.answer_messages(handler, body or {})
        elif handler.command == "POST" and path == "/v1/messages/count_tokens":
            handler.send_json(200, {"input_tokens": 1200})
        elif path == "/":
            # The CLI's runtime (Bun) probes the base URL with HEAD / at start-up.
            handler.send_json(200, {})
        else:  # the CLI takes a 404 for "feature not available"
            self.not_found(handler, path, {"type": "error", "error": {
                "type": "not_found_error", "message": f"stub: no {path}"}})

    def answer_messages(self, handler, body):
        blocks, slow = plan_reply(body)
        model = body.get("model") or MODEL
        message_id = new_id("msg")
        if not body.get("stream"):
            stop_reason = "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn"
            handler.send_json(200, {"id": message_id, "type": "message", "role": "assistant",
                                    "model": model, "content": blocks,
                                    "stop_reason": stop_reason, "stop_sequence": None,
                                    "usage": USAGE})
            return
        handler.start_events()
        try:
            if slow:
                self.stream_slowly(handler, message_id, model)
            else:
                for name, payload in sse_events(message_id, model, blocks):
                    handler.send_event(payload, name)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the CLI hung up (an interrupt); nothing more to say

    def stream_slowly(self, handler, message_id, model):
        """MODE:slow: a text block that grows by one delta every slow_interval seconds, so
        an interrupt lands mid-stream; the client hanging up ends it (slow_aborted)."""
        events = list(sse_events(message_id, model, [{"type": "text", "text": ""}]))
        for name, payload in events[:2]:  # message_start, content_block_start
            handler.send_event(payload, name)
        deadline = time.monotonic() + self.slow_seconds
        self.slow_started.set()
        try:
            while time.monotonic() < deadline:
                handler.send_event({"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "text_delta", "text": "."}},
                                   "content_block_delta")
                time.sleep(self.slow_interval)
        except (BrokenPipeError, ConnectionResetError):
            self.slow_aborted.set()
            raise
        for name, payload in events[3:]:  # skip the empty delta; stop the block and message
            handler.send_event(payload, name)


# Installing and locating the real CLI #############################################################

def cache_dir():
    return npm_cli.cache_dir(f"claude-code-{CLAUDE_VERSION}", "TASKBOARD_CLAUDE_DIR")


def version_env(home):
    return dict(os.environ, HOME=home, DISABLE_AUTOUPDATER="1",
                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")


def installed_cli(prefix):
    """The installed `claude` at CLAUDE_VERSION under prefix, or None.

    The package's bin/claude.exe is a placeholder until its postinstall copies the native
    binary over it; npm may skip postinstall scripts (allowScripts), so the native binary in
    the platform package is the fallback."""
    modules = os.path.join(prefix, "node_modules")
    candidates = [os.path.join(modules, ".bin", "claude")]
    candidates += sorted(glob.glob(os.path.join(modules, "@anthropic-ai", "claude-code-*",
                                                "claude")))
    return npm_cli.first_runnable(candidates, version_env, CLAUDE_VERSION)


def claude_cli():
    """The path of the real `claude` at CLAUDE_VERSION, installing it on first use with npm
    into cache_dir() ($TASKBOARD_CLAUDE_DIR or ~/.cache/taskboard-tests/claude-code-<version>)
    (tests/npm_cli.py).  Skips the calling test with npm's reason when it cannot be had."""
    return npm_cli.npm_cli(f"Claude Code {CLAUDE_VERSION}", CLAUDE_PACKAGE, cache_dir(),
                           installed_cli)


def claude_env(stub, home, **extra):
    """The environment for running the CLI against stub, with home as its $HOME.

    Starts from os.environ (PATH, locale) without any ANTHROPIC_*/CLAUDE* variable of the
    caller, so a developer's own key or a surrounding Claude Code session cannot leak in."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    env.update({
        "ANTHROPIC_BASE_URL": stub.url,
        "ANTHROPIC_API_KEY": "test-key",
        # The CLI keeps its config, sessions and caches under $HOME (~/.claude, ~/.claude.json,
        # ~/.cache/claude-cli-nodejs): a fresh one per test, never the real user's.
        "HOME": str(home),
        "XDG_CONFIG_HOME": os.path.join(str(home), ".config"),
        "XDG_CACHE_HOME": os.path.join(str(home), ".cache"),
        # No update checks, telemetry, error reports or other calls beyond the API.
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    })
    env.update(extra)
    return env


# Driving one CLI process over the control protocol ###############################################

#: The argv (after the executable) of a task run that talks both ways (design.md §12).
CONTROL_ARGS = ["-p", "--output-format", "stream-json", "--verbose",
                "--input-format", "stream-json", "--replay-user-messages",
                "--permission-prompt-tool", "stdio", "--model", MODEL]


class ClaudeSession:
    """One `claude` process: JSON lines in on stdin, JSON lines out on stdout.

    A reader thread queues stdout lines, so every read has a deadline and a test never
    hangs on a silent CLI. `seen` keeps every line read, for failure messages."""

    def __init__(self, cli, cwd, env, args=CONTROL_ARGS):
        self.proc = subprocess.Popen([cli, *args], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.seen = []
        self._lines = queue.Queue()
        self._stderr = []
        self._threads = [threading.Thread(target=self._pump, args=(self.proc.stdout, True),
                                          daemon=True),
                         threading.Thread(target=self._pump, args=(self.proc.stderr, False),
                                          daemon=True)]
        for thread in self._threads:
            thread.start()

    def _pump(self, stream, is_stdout):
        for line in stream:
            if is_stdout:
                self._lines.put(line)
            else:
                self._stderr.append(line)
        if is_stdout:
            self._lines.put(None)  # end of output

    def send(self, msg):
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def initialize(self, hooks=None, request_id="req_init"):
        request = {"subtype": "initialize"}
        if hooks:
            request["hooks"] = hooks
        self.send({"type": "control_request", "request_id": request_id, "request": request})

    def say(self, text):
        self.send({"type": "user", "message": {"role": "user", "content": text}})

    def respond(self, request_id, response):
        self.send({"type": "control_response", "response": {
            "subtype": "success", "request_id": request_id, "response": response}})

    def allow(self, request, updated_input=None):
        """Allow a can_use_tool request, with its own input unless told otherwise."""
        inner = request["request"]
        self.respond(request["request_id"], {
            "behavior": "allow",
            "updatedInput": inner["input"] if updated_input is None else updated_input})

    def deny(self, request, message):
        self.respond(request["request_id"],
                     {"behavior": "deny", "message": message, "interrupt": False})

    def interrupt(self, request_id="req_int"):
        self.send({"type": "control_request", "request_id": request_id,
                   "request": {"subtype": "interrupt"}})

    def close_stdin(self):
        self.proc.stdin.close()

    def read_until(self, predicate, timeout=30, what="a matching line"):
        """Read stdout lines until predicate(msg) is true; that msg is returned.
        Fails after timeout seconds, or when the CLI ends first, with what it printed."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(left, 0))
            except queue.Empty:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                                     + self.story()) from None
            if line is None:
                self._lines.put(None)  # keep reporting the end to later reads
                raise AssertionError(f"claude ended (exit {self.proc.wait(5)}) before {what}"
                                     + self.story())
            line = line.strip()
            if not line:
                continue
            msg = json.loads(line)
            self.seen.append(msg)
            if predicate(msg):
                return msg

    def control_request(self, subtype, timeout=30):
        return self.read_until(lambda m: m.get("type") == "control_request"
                               and m["request"].get("subtype") == subtype,
                               timeout, f"a control_request {subtype}")

    def result(self, timeout=30):
        return self.read_until(lambda m: m.get("type") == "result", timeout, "a result")

    def wait(self, timeout=30):
        """The exit code, once the process has ended (fails after timeout)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"claude still running after {timeout}s"
                                 + self.story()) from None

    def stop(self):
        """End the process if it still runs (tests' teardown), and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for thread in self._threads:
            thread.join(5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if not stream.closed:
                try:
                    stream.close()
                except BrokenPipeError:
                    pass

    def story(self):
        """What the CLI said so far: the last lines of stdout (types) and stderr."""
        kinds = [f"{m.get('type')}/{m.get('subtype') or m.get('request', {}).get('subtype', '')}"
                 for m in self.seen[-30:]]
        stderr = "".join(self._stderr[-20:])
        return f"\n  stdout so far: {kinds}\n  stderr: {stderr.strip()[-2000:]}"
