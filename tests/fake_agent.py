"""A scripted stand-in for the Claude Code CLI (agent-cli.md §3), for the run tests.

It takes the argv the board builds (`-p --output-format stream-json --verbose --model M
--effort E ... [--resume SID]`), reads the prompt from stdin until EOF, and prints Claude's
stream-json, one flushed line at a time.  What it does is chosen by `fake:<name>[=<value>]`
tokens anywhere in the prompt (tests put them in the task description).

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
    fake:fail-times=N     the first N runs of this task (TASKBOARD_TASK_ID) act as fake:exit=3,
                          later ones as fake:ok
    fake:verdict=V        when the prompt is the board's verifier prompt ("You are reviewing
                          the work ..."): answer with a fenced JSON verdict V (approve or
                          reject; `none` answers without a JSON block); default approve
    fake:plan=NAME        the default when the prompt is the board's planner prompt ("You
                          are planning ..."): a Read and a Bash(ls) call, text, then a final
                          answer ending in the plan NAME of PLANS below (default good), or,
                          when NAME is a path, that file's text as the final answer

Modifiers:

    fake:cost=X           total_cost_usd of the result line (ok / lines)
    fake:sleep=S          pause S seconds after every stdout line
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

State lives in $FAKE_AGENT_DIR (unset: only sessions are kept, in <tmp>/taskboard-fake-agent):
    calls.jsonl           one line per run: {argv, cwd, stdin, env (TASKBOARD_* and FAKE_*),
                          pid, pgid, sid, session_id, resumed, time}
    transcripts/<pid>.out exactly what the run wrote to stdout
    sessions/<id>.json    {directives, cwd} of each session, for --resume
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
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
STREAMS = os.path.join(HERE, "fixtures", "agent-streams")
VERSION = "2.1.197 (Claude Code)"
DIRECTIVE = re.compile(r"fake:([a-z-]+)(?:=(\S+))?")
MODES = ("ok", "replay", "denied", "lines", "exit", "crash", "no-result", "hang",
         "api-error", "overloaded", "budget", "fail-times", "plan", "flood-no-newline",
         "surrogates")
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


def state_dir():
    path = os.environ.get("FAKE_AGENT_DIR") or os.path.join(tempfile.gettempdir(),
                                                             "taskboard-fake-agent")
    for sub in ("sessions", "transcripts", "tasks"):
        os.makedirs(os.path.join(path, sub), exist_ok=True)
    return path


def parse_directives(text):
    """{name: value} of the fake:... tokens; 'mode' holds the last mode given."""
    out = {}
    for name, value in DIRECTIVE.findall(text):
        if name in MODES:
            out["mode"], out["arg"] = name, value
        else:
            out[name] = value or "1"
    return out


def option(argv, name):
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


class Out:
    """Writes stdout lines (flushed, recorded), with the sleep and stderr modifiers."""

    def __init__(self, directives, transcript):
        self.sleep = float(directives.get("sleep", 0))
        self.stderr_left = int(directives.get("stderr", 0))
        self.stderr_n = 0
        self.survive_pipe = "survive-pipe" in directives
        self.gone = set()  # the streams found closed (with survive-pipe)
        self.transcript = open(transcript, "w", encoding="utf-8")

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

    def raw(self, text, newline=True):
        text = text + ("\n" if newline else "")
        self._write(sys.stdout, text)
        self.transcript.write(text)
        self.transcript.flush()
        if self.stderr_left:
            self.stderr_left -= 1
            self.stderr_n += 1
            self._write(sys.stderr, f"fake stderr {self.stderr_n}\n")
        if self.sleep:
            time.sleep(self.sleep)

    def emit(self, obj):
        self.raw(json.dumps(obj))

    def finish(self, code):
        while self.stderr_left:
            self.stderr_left -= 1
            self.stderr_n += 1
            sys.stderr.write(f"fake stderr {self.stderr_n}\n")
        sys.stderr.flush()
        self.transcript.close()
        sys.exit(code)


def init_line(sid, cwd, model):
    return {"type": "system", "subtype": "init", "cwd": cwd, "session_id": sid,
            "tools": ["Bash", "Edit", "Read", "Write"], "mcp_servers": [], "model": model,
            "permissionMode": "default", "apiKeySource": "none",
            "claude_code_version": VERSION.split()[0], "uuid": str(uuid.uuid4())}


def assistant(sid, block, msg_id=None, model="claude-sonnet-5", **extra):
    return {"type": "assistant", "message": {
        "id": msg_id or f"msg_{uuid.uuid4().hex[:22]}", "type": "message", "role": "assistant",
        "model": model, "content": [block], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 1200, "output_tokens": 85, "cache_creation_input_tokens": 3000,
                  "cache_read_input_tokens": 9000}},
        "parent_tool_use_id": None, "session_id": sid, "uuid": str(uuid.uuid4()), **extra}


def result(sid, *, is_error=False, subtype="success", text=None, cost=0.03765, status=None,
           usage=USAGE, errors=None):
    line = {"type": "result", "subtype": subtype, "is_error": is_error,
            "api_error_status": status, "duration_ms": 353, "duration_api_ms": 98,
            "num_turns": 2, "result": text, "stop_reason": "end_turn", "session_id": sid,
            "total_cost_usd": cost, "usage": dict(usage), "permission_denials": [],
            "terminal_reason": "completed", "uuid": str(uuid.uuid4())}
    if errors is not None:
        line["errors"] = errors
    return line


def run_ok(out, sid, d):
    msg = f"msg_{uuid.uuid4().hex[:22]}"
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
        "uuid": str(uuid.uuid4())})
    out.emit(assistant(sid, {"type": "text", "text": "Created hello.txt."}))
    if "garbage" in d:
        out.raw("this line is not JSON")
    out.emit(result(sid, text="Created hello.txt.", cost=float(d.get("cost", 0.03765))))
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
    first, second = f"msg_{uuid.uuid4().hex[:22]}", f"msg_{uuid.uuid4().hex[:22]}"
    out.emit(assistant(sid, {"type": "text", "text": "Let me look at the code."}, first))
    out.emit(assistant(sid, {"type": "tool_use", "id": "toolu_plan1", "name": "Read",
                             "input": {"file_path": os.path.join(cwd, "README.md")}}, first))
    out.emit({"type": "user", "message": {"role": "user", "content": [
        {"tool_use_id": "toolu_plan1", "type": "tool_result", "content": "# Shop",
         "is_error": False}]}, "parent_tool_use_id": None, "session_id": sid,
        "uuid": str(uuid.uuid4())})
    out.emit(assistant(sid, {"type": "tool_use", "id": "toolu_plan2", "name": "Bash",
                             "input": {"command": "rm -rf build"}}, second))
    out.emit({"type": "user", "message": {"role": "user", "content": [
        {"tool_use_id": "toolu_plan2", "type": "tool_result", "is_error": True,
         "content": "Claude requested permissions to use Bash, but you haven't granted it "
                    "yet."}]}, "parent_tool_use_id": None, "session_id": sid,
        "uuid": str(uuid.uuid4())})
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


def run(out, sid, cwd, d, task_id):
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
    out.emit(init_line(sid, cwd, "claude-sonnet-5"))
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
        for i in range(int(arg)):
            out.emit(assistant(sid, {"type": "text", "text": f"line {i}"}))
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
            "uuid": str(uuid.uuid4())})
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
    elif mode == "budget":
        out.emit(assistant(sid, {"type": "text", "text": "Starting."}))
        out.emit(result(sid, is_error=True, subtype="error_max_budget_usd", cost=0.0512,
                        errors=["Reached maximum budget ($0.05)"]))
        out.finish(1)
    else:  # hang: silence until a signal ends us
        while True:
            time.sleep(3600)


def main(argv):
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
    prompt = sys.stdin.read()
    cwd, base = os.getcwd(), state_dir()
    task_id = os.environ.get("TASKBOARD_TASK_ID", "none")
    resume = option(argv, "--resume")
    d = parse_directives(prompt)
    if prompt.startswith("You are reviewing the work"):  # the board's verifier (autoTest)
        d["mode"], d["arg"] = "verdict", d.get("verdict", "approve")
    elif prompt.startswith("You are planning") and "mode" not in d:  # the board's planner
        d["mode"], d["arg"] = "plan", "good"
    if resume:
        path = os.path.join(base, "sessions", f"{resume}.json")
        saved = json.load(open(path)) if os.path.exists(path) else None
        if saved and saved["cwd"] == cwd:
            old = saved["directives"]
            d = {**{k: v for k, v in old.items() if k in ("cost", "sleep", "forget", "resume")},
                 "mode": old.get("resume", "ok"), "arg": None, **d}
        else:
            d = None
    sid = resume if resume and d is not None else str(uuid.uuid4())
    record = {"argv": argv, "cwd": cwd, "stdin": prompt, "pid": os.getpid(),
              "pgid": os.getpgid(0), "sid": os.getsid(0), "session_id": sid,
              "resumed": bool(resume), "time": time.time(),
              "env": {k: v for k, v in os.environ.items()
                      if k.startswith(("TASKBOARD_", "FAKE_"))}}
    recording = bool(os.environ.get("FAKE_AGENT_DIR"))  # else: a shared dir, keep it small
    if recording:
        with open(os.path.join(base, "calls.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    out = Out(d or {}, os.path.join(base, "transcripts", f"{os.getpid()}.out") if recording
              else os.devnull)
    if d is None:
        out.emit(result(sid, is_error=True, subtype="error_during_execution", cost=0,
                        usage=dict.fromkeys(USAGE, 0),
                        errors=[f"No conversation found with session ID: {resume}"]))
        out.finish(1)
    ignore = "ignore-term" in d
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore else lambda *_: os._exit(143))
    if "forget" not in d:
        with open(os.path.join(base, "sessions", f"{sid}.json"), "w") as f:
            json.dump({"directives": d, "cwd": cwd}, f)
    for key in ("write", "commit"):
        if key in d:
            with open(os.path.join(cwd, d[key]), "a", encoding="utf-8") as f:
                f.write(f"written by fake agent {os.getpid()}\n")
            if key == "commit":
                ident = ["-c", "user.name=Fake Agent", "-c", "user.email=fake@agent"]
                subprocess.run(["git", "add", d[key]], check=True)
                subprocess.run(["git", *ident, "commit", "-q", "-m", f"fake agent: {d[key]}"],
                               check=True)
    if "child" in d:
        code = ("import signal, time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                           if ignore else "") + "time.sleep(300)\n")
        child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
        with open(os.path.join(base, "children.txt"), "a") as f:
            f.write(f"{child.pid}\n")
    run(out, sid, cwd, d, task_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
