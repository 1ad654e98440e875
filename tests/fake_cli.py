"""A scripted stand-in for the Claude Code CLI (agent-cli.md §3), for the run tests.

It takes the argv the board builds (`-p --output-format stream-json --verbose --model M
--effort E ... [--resume SID]`), reads the prompt from stdin until EOF (or speaks the two-way
protocol, see below), and prints Claude's stream-json, one flushed line at a time.  What it
does is chosen by `fake:<name>[=<value>]` tokens anywhere in the prompt (tests put them in the
task description).

A token fake@MODEL:name[=value] counts only in a run of that --model (e.g. fake@haiku:write=a):
the attempts of one task (best of N) each act by their own model.

Modes (the last one given wins; none given = `hang`, so a task moved to in_progress by a
test that does not care about runs stays there):

    fake:ok               a small successful transcript (thinking, text, Bash tool call and
                          result, text, result); usage 2400 in / 170 out / 18000 cache read /
                          6000 cache creation, cost 0.03765 (the numbers of claude-success)
    fake:replay=NAME      replay tests/fixtures/agent-streams/NAME.jsonl line by line (session
                          id and init cwd rewritten); exit 1 when its result has is_error
    fake:denied           = fake:replay=claude-permission-denied
    fake:lines=N          N assistant text lines "line 0" .. "line N-1", then a success result
    fake:exit=N           init and one text line, then exit N with no result line
    fake:crash            init, then half a JSON line (no newline), exit 1
    fake:no-result        init and one text line, exit 0 with no result line
    fake:hang             init, then silence until killed
    fake:flood-no-newline=BYTES
                          init, then BYTES bytes of "x" in writes of at most 1 MiB with no
                          newline at all (fake:sleep pauses after each write), then exit 0
                          with no result line
    fake:surrogates       text halves of UTF-16 surrogate pairs, which JSON can spell and
                          UTF-8 cannot: an assistant text "half a pair: \ud83d!", a whole
                          pair, a tool result "x\udc00y", a result "done \udfff", exit 0
    fake:api-error=S      a synthetic API error: result is_error true, api_error_status S, exit 1
    fake:overloaded       = fake:api-error=529
    fake:budget           result subtype error_max_budget_usd (is_error true), exit 1
    fake:limit=S          the plan's usage limit, as Claude 2.1 reports it: a rate_limit_event
                          (status rejected, resetsAt = now + S seconds, a whole second), the
                          text "You've hit your limit · resets <time>", a result with
                          is_error and api_error_status 429, exit 1
    fake:fail-times=N     the first N runs of this task (TASKBOARD_TASK_ID) act as fake:exit=3,
                          later ones as fake:ok
    fake:verdict=V        when the prompt is the board's verifier prompt ("You are reviewing
                          the work ..."): answer with a fenced JSON verdict V (approve or
                          reject; `none` answers without a JSON block); default approve
    fake:plan=NAME        the default when the prompt is the board's planner prompt ("You
                          are planning ..."): a Read and a Bash(ls) call, text, then a final
                          answer ending in the plan NAME of PLANS below (default good), or,
                          when NAME is a path, that file's text as the final answer
    fake:echo             one text "You said: <prompt>" and a result costing 0.018825
                          (claude-control-follow-up's first turn)
    fake:ask[=N]          N (default 1) Bash calls "echo hello > hello.txt && cat hello.txt"
                          (then hello2.txt ...), each asked for with a can_use_tool request
                          shaped like claude-control-approve; allow runs updatedInput's
                          command (tool result "ran: <command>"), deny gives an is_error tool
                          result with the message; the result text has one line per call,
                          "allowed: <command>" or "denied: <message>" (denials also in
                          permission_denials).  An allow carrying updatedPermissions adds its
                          rules: later calls they match are not asked for
    fake:question[=multi] an AskUserQuestion request as in claude-control-question (one
                          question, Red/Blue; multi: multiSelect true); the result says
                          'Tool said: ["<tool result>"] answers <updatedInput.answers as JSON>'
                          ("Question denied: <message>" on deny)
    fake:slow[=S]         init, then wait up to S seconds (default 60) for an interrupt: the
                          recorded interrupted end (result error_during_execution, is_error,
                          terminal_reason aborted_streaming); else text and a success result
    fake:unknown-request  sends a control_request of subtype mystery_kind, then goes on as
                          fake:ok with result text "mystery answered: <response subtype>"
Without the protocol (below) ask, question and unknown-request act as ok, slow just sleeps.

Modifiers:

    fake:cost=X           total_cost_usd of the result line (ok / lines)
    fake:sleep=S          pause S seconds after every stdout line
    fake:wait=PATH        after the init line, print nothing more until PATH exists (at most
                          a minute): the run stays live until the test opens that gate
    fake:hold=PATH        the same gate before the result line: the run has said all the rest
    fake:verifier-hold=PATH
                          fake:hold=PATH in the verifier's run only (fake:verdict)
    fake:stderr=N         N stderr lines "fake stderr <i>", one after each stdout line
    fake:garbage          one non-JSON stdout line "this line is not JSON" before the result
    fake:child            first spawn a child (same process group) that sleeps; its pid is
                          appended to $FAKE_AGENT_DIR/children.txt
    fake:ignore-term      ignore SIGTERM (the child too), so only SIGKILL ends the run;
                          otherwise SIGTERM exits 143 with no result line, like Claude
    fake:survive-pipe     carry on when stdout or stderr is gone (the board died): later
                          writes to them are dropped, the transcript still gets them;
                          otherwise the first write after that ends the run (BrokenPipeError)
    fake:forget           do not save the session, so a later --resume of it fails
    fake:resume=MODE      what a resumed run of this session does: a mode without an
                          argument (default: ok)
    fake:write=NAME       first write NAME (a file name) in the working directory, with the
                          pid in it, and leave it uncommitted
    fake:commit=NAME      first write NAME and commit it (git add + commit, message
                          "fake agent: NAME")
    fake:sh=B64           first run the shell script B64 (base64) with `sh -c` in the working
                          directory and say what it printed (stdout and stderr) as an
                          assistant text "sh said:\n<output>": what an agent's Bash tool does
    fake:garbage-protocol after the first init: a cut (non-JSON) control_request line and a
                          JSON line of the unknown type "mystery_event"

The two-way protocol (design.md §12), when argv has `--input-format stream-json`: stdin is
JSON lines, read by a thread; the run is as above with these differences.
  - control_request initialize is answered (a short version of the recorded answer) and its
    hooks.Stop[].hookCallbackIds remembered; interrupt is answered success (and ends a turn
    waiting in fake:slow or on a can_use_tool answer); any other subtype is answered with a
    control_response of subtype error "Unsupported control request subtype: <subtype>".
  - Each user message is a turn: system init, the message echoed (isReplay), then the turn.
    The first message is the prompt (directives, resume, calls.jsonl as before); later ones
    are follow-ups answered "You said: <text>" (cost 0.018825 each).  Messages that arrive
    during a turn wait for it.  Every result's total_cost_usd is the process's cumulative cost.
  - Each control_response read is echoed on stdout, as the CLI does; a control_request the
    fake sends waits for the response with its request_id (stdin ending first: exit 1, no
    result).
  - With a Stop hook, a turn about to print a success result first sends hook_callback
    (hook_event_name Stop, stop_hook_active false, then true); {"decision": "block",
    "reason": R} prints the recorded feedback lines ("You said: Stop hook feedback:\nR") and
    asks again; anything else lets the result through (its text the last "You said: ...", each
    block adding 0.018825 and one call's usage).
  - After a result the fake waits for the next line; at stdin EOF it exits with the last
    turn's code (1 when its result had is_error).  A turn ending with no result line (exit,
    crash, no-result, flood-no-newline) ends the process with its code, as before; hang hangs.

Other CLIs (design.md §14): `fake_agent.py --as codex|gemini|opencode <that CLI's argv>`
stands in for Codex, Gemini or OpenCode (run_foreign): it takes the prompt where that CLI
does, understands fake:replay=NAME (default FOREIGN_DEFAULT), fake:garbage, fake:hang,
fake:crash (half the stream, a cut line, exit 1), fake:wait=PATH (print nothing until
PATH exists), fake:sleep and fake:stderr, records its call (with "as") and exits as that
CLI would.

State lives in $FAKE_AGENT_DIR (unset: only sessions are kept, in <tmp>/taskboard-fake-agent):
    calls.jsonl           one line per run: {argv, cwd, stdin, env (TASKBOARD_*, FAKE_*, MCP_*),
                          pid, pgid, sid, session_id, resumed, time}
    transcripts/<pid>.out exactly what the run wrote to stdout
    sessions/<id>.json    {directives, cwd} of each session, for --resume
    stdin.jsonl           protocol mode: every stdin line, each {...the message, t: time.time(),
                          pid} (a non-JSON line as {raw, t, pid})
    stop_reasons.txt      protocol mode: each Stop hook block reason, one JSON string a line
`--resume SID` reuses the stored directives (mode = their `resume`, default ok; directives in
the new prompt win).  An unknown SID, or one saved from another cwd, gets Claude's own error:
a result with subtype error_during_execution and errors ["No conversation found with session
ID: SID"], exit 1.  Every fresh session id is a new uuid4.  `--version` prints a version;
with $FAKE_VERSION_GATE set to a path it first writes its pid to PATH.asked, then waits until
PATH exists (at most a minute): a CLI slow to answer, for as long as a test wants.
"""

import contextlib
import json
import os
import re
import signal
import sys
import threading
import time

from fake_agent import VERSION  # what `--version` prints (fake_agent.py answers it alone)

# base64, fnmatch, subprocess and tempfile are imported where a mode needs them, and uuid not
# at all (new_uuid): this CLI starts thousands of times a test run, most of them to print a
# stream and exit.

HERE = os.path.dirname(os.path.abspath(__file__))
STREAMS = os.path.join(HERE, "fixtures", "agent-streams")
DIRECTIVE = re.compile(r"fake(?:@([\w.:-]+))?:([a-z-]+)(?:=(\S+))?")
MODES = ("ok", "replay", "denied", "lines", "exit", "crash", "no-result", "hang",
         "api-error", "overloaded", "budget", "limit", "fail-times", "plan", "flood-no-newline",
         "surrogates", "echo", "ask", "question", "slow", "unknown-request")
#: The largest single write of fake:flood-no-newline.
FLOOD_CHUNK = 1024 * 1024
PLAN_TASKS = [
    {"title": "Add the data model", "description": "Tables for carts.", "task_type": "feature",
     "priority": 2, "acceptance_criteria": "Migrations run."},
    {"title": "Add the cart API", "description": "CRUD routes.", "task_type": "feature",
     "priority": 1, "acceptance_criteria": ["Routes answer", "Errors are 4xx"]},
    {"title": "Document the cart API", "description": "README section.", "task_type": "docs",
     "priority": 0, "acceptance_criteria": "README lists every route."},
]
#: The final JSON block of each fake:plan=NAME.
PLANS = {
    "good": {"tasks": PLAN_TASKS, "dependencies": [[0, 1], [1, 2]]},
    "cyclic": {"tasks": PLAN_TASKS, "dependencies": [[0, 1], [1, 2], [2, 0], [0, 7], [1, 1],
                                                     "x", [0, 1]]},
    "notitle": {"tasks": [PLAN_TASKS[0], {"description": "no title here"}],
                "dependencies": []},
    "empty": {"tasks": [], "dependencies": []},
    "odd": {"tasks": [{"title": "  Odd   task ", "task_type": "epic", "priority": 9,
                       "description": {"a": 1}}], "dependencies": "none"},
}
USAGE = {"input_tokens": 2400, "cache_creation_input_tokens": 6000,
         "cache_read_input_tokens": 18000, "output_tokens": 170}
#: One API round trip of the recorded control streams (a follow-up, an echo, a stop-hook retry).
ONE_CALL = {key: value // 2 for key, value in USAGE.items()}
ONE_CALL_COST = 0.018825


def new_uuid() -> str:
    """A random (version 4) UUID as text, as uuid.uuid4() makes them."""
    b = bytearray(os.urandom(16))
    b[6], b[8] = b[6] & 0x0F | 0x40, b[8] & 0x3F | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def state_dir():
    """$FAKE_AGENT_DIR, or where it cannot be written (a sandboxed run not granted it, as a
    real CLI would not be) the temporary folder's: the run goes on, unrecorded there."""
    import tempfile
    spare = os.path.join(tempfile.gettempdir(), "taskboard-fake-agent")
    path = os.environ.get("FAKE_AGENT_DIR") or spare
    try:
        for sub in ("sessions", "transcripts", "tasks"):
            os.makedirs(os.path.join(path, sub), exist_ok=True)
        if not os.access(path, os.W_OK):
            raise PermissionError(path)
    except OSError:
        if path == spare:
            raise
        os.environ["FAKE_AGENT_DIR"] = path = spare
        return state_dir()
    return path


def sessions_dir(base):
    """Where sessions are kept for --resume: in $FAKE_AGENT_DIR, but in a board's sandbox
    (its host is named so) where the real CLI keeps them, its state folder under home (the
    project's own copy there): $FAKE_AGENT_DIR may be in the sandbox's own /tmp, gone with
    the run."""
    import socket
    if socket.gethostname() != "sandbox":
        return os.path.join(base, "sessions")
    path = os.path.join(os.path.expanduser("~"), ".claude", "fake-agent-sessions")
    os.makedirs(path, exist_ok=True)
    return path


def transcript_path(base):
    """Where this run's stdout is copied (only when $FAKE_AGENT_DIR is set)."""
    if not os.environ.get("FAKE_AGENT_DIR"):
        return os.devnull
    return os.path.join(base, "transcripts", f"{os.getpid()}.out")


def parse_directives(text, model=None):
    """{name: value} of the fake:... tokens; 'mode' holds the last mode given.  A token
    fake@MODEL:... counts only in a run of that --model (the attempts of best of N)."""
    out = {}
    for only, name, value in DIRECTIVE.findall(text):
        if only and only != model:
            continue
        if name in MODES:
            out["mode"], out["arg"] = name, value
        else:
            out[name] = value or "1"
    return out


def option(argv, name):
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


class TurnDone(Exception):
    """A protocol turn ended (Out.finish inside a turn): its exit code, for when stdin ends."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


class Interrupted(Exception):
    """The board sent an interrupt while the turn was waiting for it (fake:slow, a request)."""


class Out:
    """Writes stdout lines (flushed, recorded), with the sleep and stderr modifiers."""

    def __init__(self, directives, transcript):
        self.configure(directives)
        self.stderr_n = 0
        self.gone = set()  # the streams found closed (with survive-pipe)
        self.transcript = open(transcript, "w", encoding="utf-8")
        self.lock = threading.RLock()  # the protocol's stdin reader writes too
        self.proto = None  # the Protocol, with --input-format stream-json

    def configure(self, directives):
        self.sleep = float(directives.get("sleep", 0))
        self.stderr_left = int(directives.get("stderr", 0))
        self.survive_pipe = "survive-pipe" in directives
        self.hold = directives.get("hold")

    def _write(self, stream, text):
        if stream in self.gone:
            return
        try:
            stream.write(text)
            stream.flush()
        except OSError:  # BrokenPipeError: the board is gone
            if not self.survive_pipe:
                raise
            self.gone.add(stream)
            with contextlib.suppress(OSError):  # nobody reads it: never flush it again
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())

    def _put(self, text):
        with self.lock:
            if self.transcript.closed:
                return
            self._write(sys.stdout, text)
            self.transcript.write(text)
            self.transcript.flush()

    def raw(self, text, newline=True):
        proto = self.proto if newline and text.startswith("{") else None
        if proto:
            text = proto.before_line(text)
        if self.hold and newline and is_result(text):
            wait_for_file(self.hold)
        self._put(text + ("\n" if newline else ""))
        if self.stderr_left:
            self.stderr_left -= 1
            self.stderr_n += 1
            self._write(sys.stderr, f"fake stderr {self.stderr_n}\n")
        if self.sleep:
            time.sleep(self.sleep)
        if proto:
            proto.after_line(text)

    def emit(self, obj):
        self.raw(json.dumps(obj))

    def plain(self, obj):
        """A line from the stdin reader thread (control responses): no modifiers."""
        try:
            self._put(json.dumps(obj) + "\n")
        except OSError:  # the board is gone
            os._exit(1)

    def finish(self, code):
        """The run is over; inside a protocol turn only the turn is (TurnDone)."""
        if self.proto and self.proto.running:
            raise TurnDone(code)
        self.exit(code)

    def exit(self, code):
        while self.stderr_left:
            self.stderr_left -= 1
            self.stderr_n += 1
            sys.stderr.write(f"fake stderr {self.stderr_n}\n")
        sys.stderr.flush()
        with self.lock:
            self.transcript.close()
        sys.exit(code)


def init_line(sid, cwd, model, mcp=None):
    """The init line; `mcp`: the board tools' server's status as the CLI reports it
    (fake:mcp=STATUS: "failed", "pending" when it answered too late)."""
    servers = [{"name": "taskboard", "status": mcp}] if mcp else []
    return {"type": "system", "subtype": "init", "cwd": cwd, "session_id": sid,
            "tools": ["Bash", "Edit", "Read", "Write"], "mcp_servers": servers, "model": model,
            "permissionMode": "default", "apiKeySource": "none",
            "claude_code_version": VERSION.split()[0], "uuid": new_uuid()}


def assistant(sid, block, msg_id=None, model="claude-sonnet-5", **extra):
    return {"type": "assistant", "message": {
        "id": msg_id or f"msg_{os.urandom(16).hex()[:22]}", "type": "message", "role": "assistant",
        "model": model, "content": [block], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 1200, "output_tokens": 85, "cache_creation_input_tokens": 3000,
                  "cache_read_input_tokens": 9000}},
        "parent_tool_use_id": None, "session_id": sid, "uuid": new_uuid(), **extra}


def result(sid, *, is_error=False, subtype="success", text=None, cost=0.03765, status=None,
           usage=USAGE, errors=None, num_turns=2, denials=()):
    line = {"type": "result", "subtype": subtype, "is_error": is_error,
            "api_error_status": status, "duration_ms": 353, "duration_api_ms": 98,
            "num_turns": num_turns, "result": text, "stop_reason": "end_turn", "session_id": sid,
            "total_cost_usd": cost, "usage": dict(usage), "permission_denials": list(denials),
            "terminal_reason": "completed", "uuid": new_uuid()}
    if errors is not None:
        line["errors"] = errors
    return line


def run_ok(out, sid, d, text="Created hello.txt."):
    msg = f"msg_{os.urandom(16).hex()[:22]}"
    out.emit(assistant(sid, {"type": "thinking", "thinking": "Create the file with a shell "
                                                             "command.", "signature": "c2ln"},
                       msg))
    out.emit(assistant(sid, {"type": "text", "text": "I'll create the file."}, msg))
    out.emit(assistant(sid, {"type": "tool_use", "id": "toolu_fake1", "name": "Bash",
                             "input": {"command": "echo hello > hello.txt",
                                       "description": "Create hello.txt"}}, msg))
    out.emit({"type": "user", "message": {"role": "user", "content": [
        {"tool_use_id": "toolu_fake1", "type": "tool_result", "content": "hello",
         "is_error": False}]}, "parent_tool_use_id": None, "session_id": sid,
        "uuid": new_uuid()})
    out.emit(assistant(sid, {"type": "text", "text": "Created hello.txt."}))
    if "garbage" in d:
        out.raw("this line is not JSON")
    out.emit(result(sid, text=text, cost=float(d.get("cost", 0.03765))))
    out.finish(0)


def run_plan(out, sid, cwd, name):
    """A planner session: explore (Read, then ls), say so, then answer with the plan."""
    if name == "badjson":
        answer = "Here is the plan.\n```json\n{\"tasks\": [{\"title\": \"A\",}\n```"
    elif os.path.sep in name:
        with open(name, encoding="utf-8") as f:
            answer = f.read()
    else:
        answer = "Here is the plan.\n```json\n" + json.dumps(PLANS[name], indent=2) + "\n```"
    first, second = f"msg_{os.urandom(16).hex()[:22]}", f"msg_{os.urandom(16).hex()[:22]}"
    out.emit(assistant(sid, {"type": "text", "text": "Let me look at the code."}, first))
    out.emit(assistant(sid, {"type": "tool_use", "id": "toolu_plan1", "name": "Read",
                             "input": {"file_path": os.path.join(cwd, "README.md")}}, first))
    out.emit({"type": "user", "message": {"role": "user", "content": [
        {"tool_use_id": "toolu_plan1", "type": "tool_result", "content": "# Shop",
         "is_error": False}]}, "parent_tool_use_id": None, "session_id": sid,
        "uuid": new_uuid()})
    out.emit(assistant(sid, {"type": "tool_use", "id": "toolu_plan2", "name": "Bash",
                             "input": {"command": "rm -rf build"}}, second))
    out.emit({"type": "user", "message": {"role": "user", "content": [
        {"tool_use_id": "toolu_plan2", "type": "tool_result", "is_error": True,
         "content": "Claude requested permissions to use Bash, but you haven't granted it "
                    "yet."}]}, "parent_tool_use_id": None, "session_id": sid,
        "uuid": new_uuid()})
    out.emit(assistant(sid, {"type": "text", "text": answer}))
    out.emit(result(sid, text=answer, cost=0.02))
    out.finish(0)


def run_replay(out, sid, cwd, name, d):
    with open(os.path.join(STREAMS, f"{name}.jsonl"), encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    first = json.loads(lines[0])
    old_sid, old_cwd = first["session_id"], first.get("cwd")
    last = json.loads(lines[-1])
    for i, line in enumerate(lines):
        line = line.replace(old_sid, sid)
        if i == 0 and old_cwd:
            line = line.replace(json.dumps(old_cwd), json.dumps(cwd))
        if i == len(lines) - 1 and "garbage" in d:
            out.raw("this line is not JSON")
        out.raw(line)
    out.finish(1 if last.get("type") == "result" and last.get("is_error") else 0)


def now_iso():
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


def user_line(sid, content, **extra):
    return {"type": "user", "message": {"role": "user", "content": content},
            "parent_tool_use_id": None, "session_id": sid, "uuid": new_uuid(),
            "timestamp": now_iso(), **extra}


def tool_result(sid, tool_id, content, is_error=None, use_result=None):
    block = {"type": "tool_result", "content": content, "tool_use_id": tool_id}
    if is_error is not None:
        block["is_error"] = is_error
    extra = {} if use_result is None else {"tool_use_result": use_result}
    return user_line(sid, [block], **extra)


def user_text(msg):
    """The text of a stdin user message: a string, or its text blocks joined."""
    content = (msg.get("message") or {}).get("content")
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content or []
                     if isinstance(block, dict) and block.get("type") == "text")


def init_response():
    """A short version of the recorded answer to `initialize`."""
    return {"commands": [], "agents": [], "output_style": "default",
            "available_output_styles": ["default"],
            "models": [{"value": "default", "resolvedModel": "claude-sonnet-5",
                        "displayName": "Default (recommended)"}],
            "account": {"tokenSource": "none", "apiKeySource": "none",
                        "apiProvider": "firstParty"}, "pid": os.getpid()}


class Protocol:
    """Claude's two-way stream-json protocol (design.md §12): a thread reads stdin (user turns,
    control requests and responses), the main thread runs the turns."""

    def __init__(self, out, argv):
        self.out = out
        out.proto = self
        self.effort = option(argv, "--effort") or "high"
        self.cond = threading.Condition()
        self.users = []  # user messages not yet run
        self.responses = {}  # request_id -> the board's control_response "response"
        self.eof = False
        self.stop_ids = []  # the Stop hook callback ids given at initialize
        self.in_turn = False  # a user message was taken and its turn has not ended
        self.interrupted = False
        self.running = False  # inside run_turn: Out.finish ends the turn only
        self.result_seen = False
        self.replay = None  # the echo of this turn's user message, printed after init
        self.defer_replay = False  # fake:slow: the echo comes when the turn ends
        self.extra = []  # lines printed after the first init (fake:garbage-protocol)
        self.cost = 0.0  # the process's cumulative cost
        self.rules = []  # allow rules the board sent as updatedPermissions
        self.sid, self.cwd, self.prompt_id = None, os.getcwd(), new_uuid()
        folder = os.environ.get("FAKE_AGENT_DIR")
        self.folder = folder
        self.log = os.path.join(folder, "stdin.jsonl") if folder else None
        threading.Thread(target=self._read, daemon=True).start()

    # -- the stdin reader thread
    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(0, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            *lines, buf = (buf + chunk).split(b"\n")
            for line in lines:
                self._line(line)
        if buf.strip():
            self._line(buf)
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def _line(self, raw):
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            return
        try:
            msg = json.loads(text)
        except ValueError:
            msg = None
        if self.log:
            entry = ({**msg, "t": time.time(), "pid": os.getpid()} if isinstance(msg, dict)
                     else {"raw": text, "t": time.time(), "pid": os.getpid()})
            with open(self.log, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        if not isinstance(msg, dict):
            return
        kind = msg.get("type")
        if kind == "control_request":
            self._control(msg)
        elif kind == "control_response":
            self.out.plain(msg)  # the CLI echoes each answer it gets
            response = msg.get("response")
            if isinstance(response, dict):
                with self.cond:
                    self.responses[response.get("request_id")] = response
                    self.cond.notify_all()
        elif kind == "user":
            with self.cond:
                self.users.append(msg)
                self.cond.notify_all()

    def _control(self, msg):
        rid = msg.get("request_id")
        request = msg.get("request") if isinstance(msg.get("request"), dict) else {}
        subtype = request.get("subtype")
        if subtype == "initialize":
            hooks = request.get("hooks") if isinstance(request.get("hooks"), dict) else {}
            self.stop_ids = [cid for matcher in hooks.get("Stop") or []
                             for cid in (matcher or {}).get("hookCallbackIds") or []]
            self.out.plain({"type": "control_response", "response": {
                "subtype": "success", "request_id": rid, "response": init_response()}})
        elif subtype == "interrupt":
            self.out.plain({"type": "control_response",
                            "response": {"subtype": "success", "request_id": rid}})
            with self.cond:
                if self.in_turn or self.users:  # idle: nothing to interrupt
                    self.interrupted = True
                    self.cond.notify_all()
        else:
            self.out.plain({"type": "control_response", "response": {
                "subtype": "error", "request_id": rid,
                "error": f"Unsupported control request subtype: {subtype}"}})

    # -- the main thread
    def next_user(self):
        """The next user message (its turn starts), or None when stdin has ended."""
        with self.cond:
            while not self.users and not self.eof:
                self.cond.wait(0.5)
            if not self.users:
                return None
            self.in_turn = True
            return self.users.pop(0)

    def request(self, body, interruptible=False):
        """Send a control_request; the board's control_response (subtype, response|error).
        Stdin ending first ends the run (exit 1, no result): the board is gone."""
        if interruptible and self.interrupted:
            raise Interrupted
        rid = new_uuid()
        self.out.emit({"type": "control_request", "request_id": rid, "request": body})
        with self.cond:
            while rid not in self.responses and not self.eof and not (
                    interruptible and self.interrupted):
                self.cond.wait(0.5)
            answer = self.responses.pop(rid, None)
        if answer is None and interruptible and self.interrupted:
            raise Interrupted
        if answer is None:
            self.out.exit(1)
        return answer

    def ask_tool(self, name, tool_input, tool_id, **fields):
        """A can_use_tool request: the decision, {behavior: allow|deny, ...}."""
        answer = self.request({"subtype": "can_use_tool", "tool_name": name, "display_name": name,
                               "input": tool_input, **fields, "tool_use_id": tool_id},
                              interruptible=True)
        if answer.get("subtype") != "success" or not isinstance(answer.get("response"), dict):
            return {"behavior": "deny", "message": str(answer.get("error", ""))}
        decision = answer["response"]
        for update in decision.get("updatedPermissions") or []:
            if isinstance(update, dict) and update.get("behavior") == "allow":
                self.rules += [r for r in update.get("rules") or [] if isinstance(r, dict)]
        return decision

    def allowed_by_rule(self, name, command):
        import fnmatch
        return any(rule.get("toolName") == name and (
            not rule.get("ruleContent") or fnmatch.fnmatchcase(command, rule["ruleContent"]))
            for rule in self.rules)

    def wait_interrupt(self, seconds):
        deadline = time.monotonic() + seconds
        with self.cond:
            while not self.interrupted and time.monotonic() < deadline:
                self.cond.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            hit = self.interrupted
        if hit:
            raise Interrupted

    def flush_replay(self):
        self.defer_replay = False
        if self.replay:
            line, self.replay = self.replay, None
            self.out.emit(line)

    def before_line(self, text):
        """A result line: ask the Stop hook first, then make its cost cumulative."""
        if not self.running or '"result"' not in text:
            return text
        try:
            obj = json.loads(text)
        except ValueError:
            return text
        if not isinstance(obj, dict) or obj.get("type") != "result":
            return text
        changed = False
        if self.stop_ids and not obj.get("is_error"):
            obj, changed = self.stop_check(obj)
        turn = obj.get("total_cost_usd") or 0
        total = round(self.cost + turn, 9) if self.cost else turn
        self.cost, self.result_seen = total, True
        if total != turn:
            obj["total_cost_usd"], changed = total, True
        return json.dumps(obj) if changed else text

    def after_line(self, text):
        """After a system init line: this turn's user message echo (and garbage-protocol)."""
        if not (self.replay or self.extra) or self.defer_replay or '"init"' not in text:
            return
        try:
            obj = json.loads(text)
        except ValueError:
            return
        if isinstance(obj, dict) and obj.get("type") == "system" and obj.get("subtype") == "init":
            self.flush_replay()
            extra, self.extra = self.extra, []
            for line in extra:
                self.out.raw(line)

    def stop_check(self, obj):
        """Ask each Stop hook until none blocks; a block is answered like the recording."""
        last, active, blocks = obj.get("result") or "", False, 0
        while blocks < 50:
            reasons = []
            for cid in self.stop_ids:
                answer = self.request({"subtype": "hook_callback", "callback_id": cid, "input": {
                    "session_id": self.sid,
                    "transcript_path": os.path.join(os.path.expanduser("~"), ".claude",
                                                    "projects", self.cwd.replace("/", "-"),
                                                    f"{self.sid}.jsonl"),
                    "cwd": self.cwd, "prompt_id": self.prompt_id, "permission_mode": "default",
                    "effort": {"level": self.effort}, "hook_event_name": "Stop",
                    "stop_hook_active": active, "last_assistant_message": last,
                    "background_tasks": [], "session_crons": []},
                    "tool_use_id": new_uuid()})
                decision = answer.get("response")
                if isinstance(decision, dict) and decision.get("decision") == "block":
                    reasons.append(str(decision.get("reason", "")))
            if not reasons:
                break
            if self.folder:
                with open(os.path.join(self.folder, "stop_reasons.txt"), "a",
                          encoding="utf-8") as f:
                    f.writelines(json.dumps(reason) + "\n" for reason in reasons)
            feedback = "Stop hook feedback:\n" + "\n".join(reasons)
            self.out.emit(user_line(self.sid, [{"type": "text", "text": feedback}],
                                    isSynthetic=True))
            self.out.emit({"type": "system", "subtype": "notification", "key": "stop-hook-error",
                           "text": "Stop hook error occurred \u00b7 ctrl+o to see",
                           "priority": "immediate", "uuid": new_uuid(),
                           "session_id": self.sid})
            last = "You said: " + feedback
            self.out.emit(assistant(self.sid, {"type": "text", "text": last}))
            active, blocks = True, blocks + 1
        if not blocks:
            return obj, False
        usage = dict(obj.get("usage") or {})
        for key, value in ONE_CALL.items():
            usage[key] = usage.get(key, 0) + value * blocks
        return {**obj, "result": last, "usage": usage,
                "num_turns": (obj.get("num_turns") or 0) + blocks,
                "total_cost_usd": round((obj.get("total_cost_usd") or 0)
                                        + ONE_CALL_COST * blocks, 9)}, True

    def run_turn(self, msg, body=None):
        """Run one user turn (body: the first turn's mode; None: a follow-up); its exit code.
        A turn that ends without a result line ends the process, as the CLI dying would."""
        self.replay = {"type": "user", "message": msg.get("message"), "session_id": self.sid,
                       "parent_tool_use_id": None, "uuid": new_uuid(),
                       "timestamp": now_iso(), "isReplay": True}
        self.defer_replay, self.result_seen, self.running = False, False, True
        self.prompt_id = new_uuid()
        code = 0
        try:
            if body:
                body()
            else:
                self.follow_up(user_text(msg))
        except TurnDone as done:
            code = done.code
        except Interrupted:
            code = self.interrupted_end()
        finally:
            self.running = False
        if not self.result_seen:
            self.out.exit(code)
        with self.cond:
            self.in_turn = self.interrupted = False
        return code

    def follow_up(self, text):
        """A later user message, answered like the recorded follow-up."""
        self.out.emit(init_line(self.sid, self.cwd, "claude-sonnet-5"))
        answer = "You said: " + text
        self.out.emit(assistant(self.sid, {"type": "text", "text": answer}))
        self.out.emit(result(self.sid, text=answer, cost=ONE_CALL_COST, usage=ONE_CALL,
                             num_turns=1))
        self.out.finish(0)

    def interrupted_end(self):
        """The recorded end of an interrupted turn (the session stays)."""
        self.flush_replay()
        self.out.emit(user_line(self.sid, [{"type": "text",
                                            "text": "[Request interrupted by user]"}]))
        line = result(self.sid, is_error=True, subtype="error_during_execution", cost=0,
                      usage=dict.fromkeys(USAGE, 0), errors=[
                          "[ede_diagnostic] result_type=user last_content_type=n/a "
                          "stop_reason=null"])
        for key in ("api_error_status", "result"):
            del line[key]
        line.update(stop_reason=None, terminal_reason="aborted_streaming")
        self.out.emit(line)
        return 1


def run_echo(out, sid, prompt):
    """One API call answering "You said: <prompt>" (the recorded MODE:echo)."""
    answer = "You said: " + prompt
    out.emit(assistant(sid, {"type": "text", "text": answer}))
    out.emit(result(sid, text=answer, cost=ONE_CALL_COST, usage=ONE_CALL, num_turns=1))
    out.finish(0)


def run_ask(out, sid, cwd, d, count):
    """COUNT Bash calls, each asked for with can_use_tool (unless an allow rule the board sent
    as updatedPermissions covers it), as in claude-control-approve / -deny."""
    outcomes, denials = [], []
    for i in range(count):
        name = "hello.txt" if i == 0 else f"hello{i + 1}.txt"
        command = f"echo hello > {name} && cat {name}"
        tool_input = {"command": command, "description": f"Create {name}"}
        tool_id, msg = f"toolu_{os.urandom(16).hex()[:24]}", f"msg_{os.urandom(16).hex()[:22]}"
        if i == 0:
            out.emit(assistant(sid, {"type": "thinking", "signature": "c2lnbmF0dXJl",
                                     "thinking": "I should create the file with a shell "
                                                 "command."}, msg))
        out.emit(assistant(sid, {"type": "text", "text": f"I'll create {name}."}, msg))
        out.emit(assistant(sid, {"type": "tool_use", "id": tool_id, "name": "Bash",
                                 "input": tool_input}, msg))
        if out.proto.allowed_by_rule("Bash", command):
            decision = {"behavior": "allow", "updatedInput": tool_input}
        else:
            decision = out.proto.ask_tool("Bash", tool_input, tool_id,
                                          description=tool_input["description"],
                                          permission_suggestions=[
                {"type": "addRules", "rules": [{"toolName": "Bash",
                                                "ruleContent": "echo hello *"}],
                 "behavior": "allow", "destination": "localSettings"},
                {"type": "addDirectories", "directories": [cwd], "destination": "session"}],
                blocked_path=os.path.join(cwd, name))
        if decision.get("behavior") == "allow":
            updated = decision.get("updatedInput")
            ran = (updated if isinstance(updated, dict) else tool_input).get("command", command)
            output = f"ran: {ran}"
            out.emit(tool_result(sid, tool_id, output, False, {
                "stdout": output, "stderr": "", "interrupted": False, "isImage": False,
                "noOutputExpected": False}))
            outcomes.append(f"allowed: {ran}")
        else:
            message = str(decision.get("message", ""))
            out.emit(tool_result(sid, tool_id, message, True, f"Error: {message}"))
            denials.append({"tool_name": "Bash", "tool_use_id": tool_id,
                            "tool_input": tool_input})
            outcomes.append(f"denied: {message}")
    text = "\n".join(outcomes)
    out.emit(assistant(sid, {"type": "text", "text": text}))
    out.emit(result(sid, text=text, cost=float(d.get("cost", 0.03765)), denials=denials))
    out.finish(0)


def run_question(out, sid, multi):
    """An AskUserQuestion call (claude-control-question): one question, Red or Blue."""
    question = {"question": "Which colours should the button have?" if multi else
                "Which colour should the button be?", "header": "Colour",
                "options": [{"label": "Red", "description": "warm"},
                            {"label": "Blue", "description": "cool"}], "multiSelect": multi}
    tool_input = {"questions": [question]}
    tool_id = f"toolu_{os.urandom(16).hex()[:24]}"
    out.emit(assistant(sid, {"type": "tool_use", "id": tool_id, "name": "AskUserQuestion",
                             "input": tool_input}))
    decision = out.proto.ask_tool("AskUserQuestion", tool_input, tool_id)
    if decision.get("behavior") == "allow":
        updated = decision.get("updatedInput")
        updated = updated if isinstance(updated, dict) else {}
        answers = updated.get("answers")
        said = ", ".join(f'"{q}"="{a}"' for q, a in (
            answers.items() if isinstance(answers, dict) else []))
        content = (f"Your questions have been answered: {said}. You can now continue with "
                   "these answers in mind.")
        out.emit(tool_result(sid, tool_id, content, use_result=updated))
        text = f"Tool said: {json.dumps([content])} answers {json.dumps(answers)}"
    else:
        message = str(decision.get("message", ""))
        out.emit(tool_result(sid, tool_id, message, True, f"Error: {message}"))
        text = f"Question denied: {message}"
    out.emit(assistant(sid, {"type": "text", "text": text}))
    out.emit(result(sid, text=text))
    out.finish(0)


def run_slow(out, sid, seconds):
    """Wait for an interrupt (Interrupted) for up to SECONDS, then end the turn normally."""
    if out.proto:
        out.proto.wait_interrupt(seconds)
        out.proto.flush_replay()
    else:
        time.sleep(seconds)
    out.emit(assistant(sid, {"type": "text", "text": "Slow turn done."}))
    out.emit(result(sid, text="Slow turn done."))
    out.finish(0)


def is_result(line):
    """The line is a result line (the run's or the turn's end)."""
    if not line.startswith("{") or '"result"' not in line:
        return False
    try:
        return json.loads(line).get("type") == "result"
    except ValueError:
        return False


def wait_for_file(path):
    """fake:wait=PATH: go on once PATH exists (a test's gate), or after a minute."""
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def run(out, sid, cwd, d, task_id, prompt=""):
    mode, arg = d.get("mode", "hang"), d.get("arg")
    if mode == "fail-times":
        counter = os.path.join(state_dir(), "tasks", f"{task_id}.count")
        done = int(open(counter).read()) if os.path.exists(counter) else 0
        with open(counter, "w") as f:
            f.write(str(done + 1))
        mode, arg = ("exit", "3") if done < int(arg or 1) else ("ok", None)
    if mode == "denied":
        mode, arg = "replay", "claude-permission-denied"
    if mode == "overloaded":
        mode, arg = "api-error", "529"
    if mode == "replay":
        run_replay(out, sid, cwd, arg, d)
    if mode in ("ask", "question", "unknown-request") and not out.proto:
        mode = "ok"  # nobody to ask without the protocol
    if mode == "slow" and out.proto:
        out.proto.defer_replay = True  # as recorded: the echo comes when the turn ends
    out.emit(init_line(sid, cwd, "claude-sonnet-5", d.get("mcp")))
    if d.get("wait"):
        wait_for_file(d["wait"])
    if mode == "echo":
        run_echo(out, sid, prompt)
    if mode == "ask":
        run_ask(out, sid, cwd, d, int(arg or 1))
    if mode == "question":
        run_question(out, sid, arg == "multi")
    if mode == "slow":
        run_slow(out, sid, float(arg or 60))
    if mode == "unknown-request":
        answer = out.proto.request({"subtype": "mystery_kind", "detail": "a request the board "
                                    "does not know"})
        run_ok(out, sid, d, text=f"mystery answered: {answer.get('subtype')}")
    if mode == "verdict":  # approve, reject, or none (no JSON block)
        text = "I checked the work." if arg == "none" else (
            "I checked the work.\n```json\n" + json.dumps(
                {"verdict": arg, "summary": f"the verifier says {arg}",
                 "feedback": "please add a test"}) + "\n```")
        out.emit(assistant(sid, {"type": "text", "text": text}))
        out.emit(result(sid, text=text, cost=0.01))
        out.finish(0)
    if mode == "plan":
        run_plan(out, sid, cwd, arg or "good")
    if mode == "ok":
        run_ok(out, sid, d)
    elif mode == "lines":
        # one line's JSON made once, its ids and text put in per line (a third of the CPU)
        template = json.dumps(assistant(sid, {"type": "text", "text": "\0text"}, "\0msg",
                                        uuid="\0uuid")).replace("{", "{{").replace("}", "}}")
        template = template.replace("\\u0000text", "{text}").replace(
            "\\u0000msg", "{msg}").replace("\\u0000uuid", "{uuid}")
        for i in range(int(arg)):
            out.raw(template.format(text=f"line {i}", msg=f"msg_{os.urandom(11).hex()}",
                                    uuid=new_uuid()))
        out.emit(result(sid, text=f"done: {arg} lines", cost=float(d.get("cost", 0.03765))))
        out.finish(0)
    elif mode in ("exit", "no-result"):
        out.emit(assistant(sid, {"type": "text", "text": "Working on it."}))
        out.finish(int(arg) if mode == "exit" else 0)
    elif mode == "flood-no-newline":
        left = int(arg)
        while left > 0:
            chunk = min(left, FLOOD_CHUNK)
            out.raw("x" * chunk, newline=False)
            left -= chunk
        out.finish(0)
    elif mode == "surrogates":  # json.dumps spells each lone surrogate as an escape
        out.emit(assistant(sid, {"type": "text", "text": "half a pair: \ud83d!"}))
        out.emit(assistant(sid, {"type": "text", "text": "a whole pair: \U0001F600"}))
        out.emit(assistant(sid, {"type": "tool_use", "id": "toolu_half", "name": "Bash",
                                 "input": {"command": "printf 'x\\udc00y'"}}))
        out.emit({"type": "user", "message": {"role": "user", "content": [
            {"tool_use_id": "toolu_half", "type": "tool_result", "content": "x\udc00y",
             "is_error": False}]}, "parent_tool_use_id": None, "session_id": sid,
            "uuid": new_uuid()})
        out.emit(result(sid, text="done \udfff", cost=0.01))
        out.finish(0)
    elif mode == "crash":
        out.raw('{"type":"assistant","message":{"id":"msg_cut","content":[{"type":"te',
                newline=False)
        out.finish(1)
    elif mode == "api-error":
        text = f"API Error: {arg} {{\"type\":\"error\",\"error\":{{\"type\":" \
               f"\"{'overloaded_error' if arg == '529' else 'api_error'}\"}}}}"
        out.emit(assistant(sid, {"type": "text", "text": text}, model="<synthetic>",
                           error="unknown"))
        out.emit(result(sid, is_error=True, text=text, cost=0, status=int(arg),
                        usage=dict.fromkeys(USAGE, 0)))
        out.finish(1)
    elif mode == "limit":
        resets = int(time.time() + float(arg or 60)) + 1
        out.emit({"type": "rate_limit_event", "rate_limit_info": {
            "status": "rejected", "resetsAt": resets, "rateLimitType": "five_hour",
            "overageStatus": "rejected", "isUsingOverage": False},
            "session_id": sid, "uuid": new_uuid()})
        text = f"You've hit your limit · resets {time.strftime('%-I%p', time.localtime(resets))}"
        out.emit(assistant(sid, {"type": "text", "text": text}, model="<synthetic>",
                           error="rate_limit"))
        out.emit(result(sid, is_error=True, text=text, cost=0, status=429,
                        usage=dict.fromkeys(USAGE, 0)))
        out.finish(1)
    elif mode == "budget":
        out.emit(assistant(sid, {"type": "text", "text": "Starting."}))
        out.emit(result(sid, is_error=True, subtype="error_max_budget_usd", cost=0.0512,
                        errors=["Reached maximum budget ($0.05)"]))
        out.finish(1)
    else:  # hang: silence until a signal ends us
        while True:
            time.sleep(3600)


#: What a stand-in for another CLI replays when its prompt names no stream.
FOREIGN_DEFAULT = {"codex": "codex-success", "gemini": "gemini-success",
                   "opencode": "opencode-text"}


def foreign_exit_code(name, lines):
    """The exit code the CLI gave after printing `lines` (agent-cli.md §3.3-3.4,
    opencode-NOTES.md): 1 after an error end, else 0."""
    events = [json.loads(line) for line in lines]
    types = [e.get("type") for e in events]
    if name == "codex":
        return 0 if "turn.completed" in types else 1
    if name == "gemini":
        return 0 if events and events[-1].get("status") == "success" else 1
    return 1 if "error" in types else 0


def board_answer(prompt, d):
    """What the verifier (fake:verdict, default approve) or the planner (fake:plan, default
    good) answers, as in Claude's fake; None for any other prompt."""
    if prompt.startswith("You are reviewing the work"):
        verdict = d.get("arg") if d.get("mode") == "verdict" else "approve"
        return "I checked the work.\n```json\n" + json.dumps(
            {"verdict": verdict, "summary": f"the verifier says {verdict}",
             "feedback": "please add a test"}) + "\n```"
    if prompt.startswith("You are planning"):
        plan = d.get("arg") if d.get("mode") == "plan" else "good"
        return "Here is the plan.\n```json\n" + json.dumps(PLANS[plan], indent=2) + "\n```"
    return None


def with_answer(stream, answer):
    """The lines of a recorded success stream with its last text replaced by `answer`."""
    with open(os.path.join(STREAMS, f"{stream}.jsonl"), encoding="utf-8") as f:
        events = [json.loads(line) for line in f if line.strip()]
    for event in reversed(events):
        item, part = event.get("item") or {}, event.get("part") or {}
        if item.get("type") == "agent_message":
            item["text"] = answer
        elif event.get("type") == "message" and event.get("role") == "assistant":
            event["content"] = answer
        elif event.get("type") == "text" and "text" in part:
            part["text"] = answer
        else:
            continue
        break
    return [json.dumps(e) for e in events]


def run_foreign(name, argv):
    """Stand in for another agent CLI (`--as codex|gemini|opencode` before its argv): take
    the prompt where that CLI takes it (codex: the last argument, or stdin when it is
    `-`; gemini: -p, or stdin without it; opencode: stdin), record the call as main() does
    and replay the stream its fake:replay=NAME names
    (default FOREIGN_DEFAULT) with the CLI's exit code, and NAME.stderr, when there is one,
    on stderr before the stream's last line.  fake:garbage adds, before the last
    line, a non-JSON line and a JSON line of a type no CLI prints; fake:hang replays, then
    waits to be killed."""
    if "--version" in argv:
        print(f"{name} {VERSION}")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    if name == "codex" and argv[-1:] != ["-"]:  # `-`: stdin, as the real one
        prompt = argv[-1]
    elif name == "gemini" and "-p" in argv:  # without -p: stdin, as the real one
        prompt = option(argv, "-p") or ""
    else:
        prompt = sys.stdin.read()
    d = parse_directives(prompt)
    base = state_dir()
    record = {"argv": argv, "cwd": os.getcwd(), "stdin": prompt, "pid": os.getpid(),
              "pgid": os.getpgid(0), "sid": os.getsid(0), "as": name, "time": time.time(),
              "resumed": bool({"resume", "--session", "--resume"} & set(argv)),
              "env": {k: v for k, v in os.environ.items()
                      if k.startswith(("TASKBOARD_", "FAKE_", "OPENCODE_", "MCP_")) or k == "PWD"}}
    if os.environ.get("FAKE_AGENT_DIR"):
        with open(os.path.join(base, "calls.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    stream = d["arg"] if d.get("mode") == "replay" else FOREIGN_DEFAULT[name]
    with open(os.path.join(STREAMS, f"{stream}.jsonl"), encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    answer = board_answer(prompt, d)
    if answer is not None:
        lines = with_answer(FOREIGN_DEFAULT[name], answer)
    out = Out({k: v for k, v in d.items() if k in ("sleep", "stderr")}, transcript_path(base))
    if d.get("wait"):  # hold the stream until that file exists
        wait_for_file(d["wait"])
    if d.get("mode") == "crash":  # half the stream, half a line, and gone
        for line in lines[:len(lines) // 2]:
            out.raw(line)
        out.raw(lines[len(lines) // 2][:40], newline=False)
        out.finish(1)
    recorded_stderr = os.path.join(STREAMS, f"{stream}.stderr")  # what the CLI said there
    for i, line in enumerate(lines):
        if i == len(lines) - 1 and "garbage" in d:
            out.raw("this line is not JSON")
            out.raw(json.dumps({"type": "mystery_event", "detail": "no CLI prints this"}))
        if i == len(lines) - 1 and os.path.exists(recorded_stderr):
            with open(recorded_stderr, encoding="utf-8") as f:
                sys.stderr.write(f.read())
            sys.stderr.flush()
        out.raw(line)
    if d.get("mode") == "hang":
        while True:
            time.sleep(3600)
    out.finish(foreign_exit_code(name, lines))


def main(argv):
    if argv[:1] == ["--as"]:
        return run_foreign(argv[1], argv[2:])
    if "--version" in argv:
        gate = os.environ.get("FAKE_VERSION_GATE")
        if gate:
            with open(gate + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(gate + ".tmp", gate + ".asked")
            deadline = time.monotonic() + 60
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.01)
        print(VERSION)
        return 0
    if "stream-json" in argv and "--verbose" not in argv:
        print("Error: When using --print, --output-format=stream-json requires --verbose",
              file=sys.stderr)
        return 1
    out = proto = first = None
    if option(argv, "--input-format") == "stream-json":  # the two-way protocol (design §12)
        signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
        out = Out({}, transcript_path(state_dir()))
        proto = Protocol(out, argv)
        first = proto.next_user()
        if first is None:  # stdin ended before any user message
            out.exit(0)
        prompt = user_text(first)
    else:
        prompt = sys.stdin.read()
    cwd, base = os.getcwd(), state_dir()
    task_id = os.environ.get("TASKBOARD_TASK_ID", "none")
    resume = option(argv, "--resume")
    d = parse_directives(prompt, option(argv, "--model"))
    if prompt.startswith("You are reviewing the work"):  # the board's verifier (autoTest)
        d["mode"], d["arg"] = "verdict", d.get("verdict", "approve")
        if d.get("verifier-hold"):
            d["hold"] = d["verifier-hold"]
    elif prompt.startswith("You are planning") and "mode" not in d:  # the board's planner
        d["mode"], d["arg"] = "plan", "good"
    if resume:
        path = os.path.join(sessions_dir(base), f"{resume}.json")
        saved = json.load(open(path)) if os.path.exists(path) else None
        if saved and saved["cwd"] == cwd:
            old = saved["directives"]
            d = {**{k: v for k, v in old.items() if k in ("cost", "sleep", "forget", "resume")},
                 "mode": old.get("resume", "ok"), "arg": None, **d}
        else:
            d = None
    sid = resume if resume and d is not None else new_uuid()
    record = {"argv": argv, "cwd": cwd, "stdin": prompt, "pid": os.getpid(),
              "pgid": os.getpgid(0), "sid": os.getsid(0), "session_id": sid,
              "resumed": bool(resume), "time": time.time(),
              "env": {k: v for k, v in os.environ.items()
                      if k.startswith(("TASKBOARD_", "FAKE_", "MCP_"))}}
    if os.environ.get("FAKE_AGENT_DIR"):  # else: a shared dir, keep it small
        with open(os.path.join(base, "calls.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    if out is None:
        out = Out(d or {}, transcript_path(base))
    else:
        out.configure(d or {})
    if d is None:
        out.emit(result(sid, is_error=True, subtype="error_during_execution", cost=0,
                        usage=dict.fromkeys(USAGE, 0),
                        errors=[f"No conversation found with session ID: {resume}"]))
        out.finish(1)
    ignore = "ignore-term" in d
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore else lambda *_: os._exit(143))
    if "forget" not in d:
        with open(os.path.join(sessions_dir(base), f"{sid}.json"), "w") as f:
            json.dump({"directives": d, "cwd": cwd}, f)
    import subprocess
    for key in ("write", "commit"):
        if key in d:
            with open(os.path.join(cwd, d[key]), "a", encoding="utf-8") as f:
                f.write(f"written by fake agent {os.getpid()}\n")
            if key == "commit":
                ident = ["-c", "user.name=Fake Agent", "-c", "user.email=fake@agent"]
                subprocess.run(["git", "add", d[key]], check=True)
                subprocess.run(["git", *ident, "commit", "-q", "-m", f"fake agent: {d[key]}"],
                               check=True)
    if "sh" in d:
        import base64
        done = subprocess.run(["sh", "-c", base64.b64decode(d["sh"]).decode()], cwd=cwd,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace")
        out.emit(assistant(sid, {"type": "text", "text": f"sh said:\n{done.stdout}"}))
    if "child" in d:
        code = ("import signal, time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                           if ignore else "") + "time.sleep(300)\n")
        child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
        with open(os.path.join(base, "children.txt"), "a") as f:
            f.write(f"{child.pid}\n")
    if proto:
        proto.sid = sid
        if "garbage-protocol" in d:
            proto.extra = ['{"type": "control_request", "request_id": "cut',
                           json.dumps({"type": "mystery_event", "session_id": sid,
                                       "detail": "a line of a type the board does not know"})]
        code = proto.run_turn(first, lambda: run(out, sid, cwd, d, task_id, prompt))
        while (msg := proto.next_user()) is not None:
            code = proto.run_turn(msg)
        out.exit(code)
    run(out, sid, cwd, d, task_id, prompt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
