"""A fake agent CLI for bench/agents.py and bench/load.py: floods stdout with stream lines.

Standard library only. It speaks one of the board's agent CLIs (design §14), chosen by
`--as claude|codex|gemini|opencode` anywhere in argv, else guessed from the board's argv
(`exec --json`: codex, `--approval-mode`: gemini, `run --format`: opencode, else claude).
Every other argument and flag is ignored. It takes the prompt where that CLI does:

    claude    stdin: to EOF, or, when the argv says `--input-format stream-json` (a task
              run's two-way channel), up to the first user message, answering the board's
              initialize request; at the end it waits for the board to close stdin
    codex     stdin, to EOF (`codex exec --json ... -`)
    gemini    stdin, to EOF (`gemini -o stream-json ...`, no -p)
    opencode  stdin, to EOF (`opencode run --format json ...`)

Then it prints FLOOD_RATE stdout lines a second for FLOOD_SECONDS s, in bursts every TICK s,
between that CLI's opening and closing lines, and exits 0. What a line is:

    claude    {"type":"assistant","message":{"id":"msg_<m>","content":[{"type":"text",
              "text":T}],...}}, after {"type":"system","subtype":"init",...}; last
              {"type":"result","subtype":"success",...}
    codex     cycles of item.started and item.completed of a command_execution, then
              item.completed of an agent_message (text T), after thread.started and
              turn.started; last turn.completed with usage
    gemini    cycles of tool_use, tool_result (run_shell_command), then T in two assistant
              message deltas, after init and the user's message; last result
    opencode  cycles of step_start, text T, tool_use (a completed bash call), step_finish
              (reason tool-calls; tokens and cost); last one more step with a plain text
              and step_finish reason stop (opencode prints no result line)

so Claude's lines are all texts, Codex's one in 3, Gemini's and OpenCode's one in 4, and
the others are tool calls and results (and step ends). T is "<n> <time.time()!r> <tag>
<padding>": n counts texts from 1, the time is taken just before the line is written (the
bench's /ws client subtracts it from its arrival time), tag is the first 8 hex digits of the
session id (it tells which agent wrote a persisted line). A tool's output is the padding.

When FLOOD_DIR is set, `<FLOOD_DIR>/<session_id>.json` records what was emitted: "emitted"
(texts: the last n), "lines" (flooded lines, opening and closing ones not counted), "tools"
(tool calls, each with its result), "as" (the CLI), "prompt" (the prompt's length) and
"started" (time.time() when the process started). It is written after the last flooded line
and before the closing ones.

Env: FLOOD_RATE (lines/s, default 2000), FLOOD_SECONDS (default 10), FLOOD_PAD (padding
characters, default 80), FLOOD_LINES_PER_MESSAGE (claude: consecutive lines sharing a
message.id, as the CLI's content blocks of one API response do; default 1), FLOOD_DIR
(optional), FLOOD_FETCH (optional: a URL it downloads first, through the proxy variables
it has, recording "fetched" bytes and "fetchSeconds": bench/sandbox.py --download).
`--version` prints a version and exits.
"""

import time

STARTED = time.time()  # the process's start, as early as it can tell (bench/sandbox.py)

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402

TICK = 0.005  # burst period: 10 lines per burst at 2,000 lines/s
CLIS = ("claude", "codex", "gemini", "opencode")


def line(obj):
    return json.dumps(obj, separators=(",", ":")) + "\n"


def which_cli(argv):
    """ The CLI to speak: `--as NAME`, else what the board's argv looks like. """
    if "--as" in argv[:-1] and argv[argv.index("--as") + 1] in CLIS:
        return argv[argv.index("--as") + 1]
    if "exec" in argv and "--json" in argv:
        return "codex"
    if "--approval-mode" in argv:
        return "gemini"
    if "run" in argv and "--format" in argv:
        return "opencode"
    return "claude"


def option(argv, name):
    """ The value after `name` in argv, or None. """
    if name in argv[:-1]:
        return argv[argv.index(name) + 1]
    return None


def read_prompt(cli, argv):
    """ The prompt, taken where `cli` takes it. """
    if cli == "claude" and "--input-format" in argv:  # the board only ever passes stream-json
        return read_prompt_turn()
    return sys.stdin.read()  # every other CLI takes it on stdin, then EOF


class Flood:
    """ One CLI's lines: opening(), cycle() (a list of lines, one of them a text made by
    text()), closing(). Counts texts (n) and tool calls. """

    def __init__(self, sid, padding, per_message):
        self.sid, self.tag, self.padding, self.per_message = sid, sid[:8], padding, per_message
        self.n = self.tools = 0
        self.usage = {"input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}

    def text(self):
        self.n += 1
        return f"{self.n} {time.time()!r} {self.tag} {self.padding}"

    def command(self):
        self.tools += 1
        return f"echo {self.tools}", f"{self.padding}\n"


class Claude(Flood):
    def opening(self):
        return [{"type": "system", "subtype": "init", "cwd": os.getcwd(),
                 "session_id": self.sid, "tools": ["Bash", "Read"], "mcp_servers": [],
                 "model": "claude-flood", "permissionMode": "default",
                 "claude_code_version": "0.0.1", "uuid": str(uuid.uuid4())}]

    def cycle(self):
        text = self.text()
        return [{"type": "assistant", "message": {
            "id": f"msg_{(self.n - 1) // self.per_message + 1}", "type": "message",
            "role": "assistant", "model": "claude-flood",
            "content": [{"type": "text", "text": text}], "stop_reason": None,
            "stop_sequence": None, "usage": self.usage, "context_management": None},
            "parent_tool_use_id": None, "session_id": self.sid, "uuid": str(uuid.uuid4())}]

    def closing(self, elapsed):
        return [{"type": "result", "subtype": "success", "is_error": False,
                 "duration_ms": int(elapsed * 1000), "num_turns": 1,
                 "result": f"flooded {self.n} lines", "session_id": self.sid,
                 "total_cost_usd": 0.0, "usage": self.usage, "permission_denials": [],
                 "terminal_reason": "completed", "uuid": str(uuid.uuid4())}]


class Codex(Flood):
    """ `codex exec --json` (tests/fixtures/agent-streams/codex-success.jsonl). """

    def opening(self):
        return [{"type": "thread.started", "thread_id": self.sid}, {"type": "turn.started"}]

    def cycle(self):
        command, output = self.command()
        item = {"id": f"item_{2 * self.tools}", "type": "command_execution",
                "command": f"/bin/bash -lc '{command}'"}
        started = {**item, "aggregated_output": "", "exit_code": None, "status": "in_progress"}
        completed = {**item, "aggregated_output": output, "exit_code": 0,
                     "status": "completed"}
        message = {"type": "item.completed", "item": {
            "id": f"item_{2 * self.tools + 1}", "type": "agent_message", "text": self.text()}}
        return [{"type": "item.started", "item": started},
                {"type": "item.completed", "item": completed}, message]

    def closing(self, elapsed):
        return [{"type": "turn.completed", "usage": {
            "input_tokens": 3000, "cached_input_tokens": 2000, "cache_write_input_tokens": 0,
            "output_tokens": 120, "reasoning_output_tokens": 40}}]


class Gemini(Flood):
    """ `gemini -o stream-json` (tests/fixtures/agent-streams/gemini-success.jsonl). """

    def stamp(self):
        return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())

    def opening(self):
        return [{"type": "init", "timestamp": self.stamp(), "session_id": self.sid,
                 "model": "gemini-flood"},
                {"type": "message", "timestamp": self.stamp(), "role": "user",
                 "content": "Print many lines."}]

    def cycle(self):
        command, output = self.command()
        tool_id = f"run_shell_command__run_shell_command_{self.tools}"
        at = self.stamp()
        text = self.text()
        half = len(text) // 2
        return [{"type": "tool_use", "timestamp": at, "tool_name": "run_shell_command",
                 "tool_id": tool_id, "parameters": {"command": command,
                                                    "description": "print a line"}},
                {"type": "tool_result", "timestamp": at, "tool_id": tool_id,
                 "status": "success", "output": output},
                {"type": "message", "timestamp": at, "role": "assistant",
                 "content": text[:half], "delta": True},
                {"type": "message", "timestamp": at, "role": "assistant",
                 "content": text[half:], "delta": True}]

    def closing(self, elapsed):
        stats = {"total_tokens": 1920, "input_tokens": 1800, "output_tokens": 80, "cached": 600,
                 "input": 1200, "duration_ms": int(elapsed * 1000), "tool_calls": self.tools}
        return [{"type": "result", "timestamp": self.stamp(), "status": "success",
                 "stats": stats}]


class OpenCode(Flood):
    """ `opencode run --format json` (tests/fixtures/agent-streams/opencode-tool.jsonl). """

    def __init__(self, *args):
        super().__init__(*args)
        self.sid = "ses_" + self.sid.replace("-", "")[:26]
        self.parts = 0

    def part(self, kind, **fields):
        self.parts += 1
        return {"id": f"prt_{self.parts:012d}", "messageID": f"msg_{self.n:08d}",
                "sessionID": self.sid, "type": kind, **fields}

    def event(self, kind, part):
        return {"type": kind, "timestamp": int(time.time() * 1000), "sessionID": self.sid,
                "part": part}

    def opening(self):
        return []

    def step(self, text, reason):
        lines = [self.event("step_start", self.part("step-start", snapshot="0" * 40)),
                 self.event("text", self.part("text", text=text))]
        if reason == "tool-calls":
            command, output = self.command()
            lines.append(self.event("tool_use", self.part(
                "tool", tool="bash", callID=f"call_{self.tools}", state={
                    "status": "completed", "input": {"command": command,
                                                     "description": "print a line"},
                    "output": output, "metadata": {"output": output, "exit": 0,
                                                   "truncated": False},
                    "title": command})))
        lines.append(self.event("step_finish", self.part(
            "step-finish", reason=reason, snapshot="0" * 40, tokens={
                "total": 2, "input": 1, "output": 1, "reasoning": 0,
                "cache": {"write": 0, "read": 0}}, cost=0.0)))
        return lines

    def cycle(self):
        return self.step(self.text(), "tool-calls")

    def closing(self, elapsed):
        return self.step(f"flooded {self.n} texts", "stop")


FLOODS = {"claude": Claude, "codex": Codex, "gemini": Gemini, "opencode": OpenCode}


def main():
    argv = sys.argv[1:]
    if "--version" in argv:
        print("0.0.1 (bench flood agent)")
        return 0
    cli = which_cli(argv)
    channel = cli == "claude" and "--input-format" in argv
    prompt = read_prompt(cli, argv)
    rate = float(os.environ.get("FLOOD_RATE", "2000"))
    seconds = float(os.environ.get("FLOOD_SECONDS", "10"))
    padding = "x" * int(os.environ.get("FLOOD_PAD", "80"))
    per_message = int(os.environ.get("FLOOD_LINES_PER_MESSAGE", "1"))  # lines per message.id
    out_dir = os.environ.get("FLOOD_DIR")
    fetched = fetch(os.environ["FLOOD_FETCH"]) if os.environ.get("FLOOD_FETCH") else {}
    sid = str(uuid.uuid4())
    flood = FLOODS[cli](sid, padding, per_message)
    out = sys.stdout
    out.write("".join(map(line, flood.opening())))
    out.flush()

    total = int(rate * seconds)
    lines = 0
    start = time.monotonic()
    next_tick = start
    while lines < total:
        elapsed = time.monotonic() - start
        if elapsed >= seconds + TICK:  # behind schedule (the pipe was full): stop on time
            break
        due = min(total, int(elapsed * rate) + 1)
        chunk = []
        while lines < due:  # whole cycles: a burst may end up to a cycle past `due`
            cycle = flood.cycle()
            lines += len(cycle)
            chunk.extend(map(line, cycle))
        out.write("".join(chunk))
        out.flush()  # blocks when the server does not drain the pipe: that is backpressure
        next_tick += TICK
        time.sleep(max(0.0, next_tick - time.monotonic()))
    elapsed = time.monotonic() - start

    if out_dir:
        path = os.path.join(out_dir, f"{sid}.json")
        with open(path + ".tmp", "w") as f:
            json.dump({"sessionId": sid, "tag": flood.tag, "emitted": flood.n, "lines": lines,
                       "tools": flood.tools, "as": cli, "prompt": len(prompt),
                       "seconds": elapsed, "rate": rate, "started": STARTED,
                       "taskId": os.environ.get("TASKBOARD_TASK_ID"), **fetched}, f)
        os.replace(path + ".tmp", path)
    out.write("".join(map(line, flood.closing(elapsed))))
    out.flush()
    if channel:
        sys.stdin.read()  # the board closes stdin when the turn has ended
    return 0


def fetch(url):
    """Download url (urllib: through http_proxy when it is set); its size and time."""
    import urllib.request
    start = time.monotonic()
    with urllib.request.urlopen(url, timeout=60) as answer:
        size = 0
        while chunk := answer.read(1 << 16):
            size += len(chunk)
    return {"fetched": size, "fetchSeconds": time.monotonic() - start}


def read_prompt_turn():
    """Answer control requests until the first user message (the prompt) arrives; returns
    the prompt's text."""
    for raw in sys.stdin:
        message = json.loads(raw)
        if message.get("type") == "user":
            content = message.get("message", {}).get("content")
            return content if isinstance(content, str) else json.dumps(content)
        if message.get("type") == "control_request":
            sys.stdout.write(line({"type": "control_response", "response": {
                "subtype": "success", "request_id": message["request_id"], "response": {}}}))
            sys.stdout.flush()
    return ""


if __name__ == "__main__":
    sys.exit(main())
