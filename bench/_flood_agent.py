"""A fake Claude Code CLI for bench/agents.py: floods stdout with stream-json text lines.

Standard library only. It accepts (and ignores) Taskboard's agent argv and reads the prompt
on stdin: to EOF, or, when the argv says `--input-format stream-json` (a task run's two-way
channel), up to the first user message, answering the board's initialize request. Then it
prints, like `claude -p --output-format stream-json --verbose`:

    {"type":"system","subtype":"init","session_id":<uuid4>,...}
    {"type":"assistant","message":{"id":"msg_<m>","content":[{"type":"text","text":T}],...}}
    ...  (FLOOD_RATE lines/s for FLOOD_SECONDS s, in bursts every TICK s)
    {"type":"result","subtype":"success","is_error":false,...}

and exits 0 (on the channel, once the board closes stdin). T is "<n> <time.time()!r> <tag>
<padding>": n counts from 1, the time is taken just before the line is written (the bench's
/ws client subtracts it from its arrival time), tag is the first 8 hex digits of the session
id (it tells which agent wrote a persisted line).
When FLOOD_DIR is set, `<FLOOD_DIR>/<session_id>.json` records how many lines were emitted;
it is written after the last text line and before the result line.

Env: FLOOD_RATE (lines/s, default 2000), FLOOD_SECONDS (default 10), FLOOD_PAD (padding
characters, default 80), FLOOD_LINES_PER_MESSAGE (consecutive lines sharing a message.id,
as the CLI's content blocks of one API response do; default 1), FLOOD_DIR (optional).
`--version` prints a version and exits.
"""

import json
import os
import sys
import time
import uuid

TICK = 0.005  # burst period: 10 lines per burst at 2,000 lines/s


def line(obj):
    return json.dumps(obj, separators=(",", ":")) + "\n"


def main():
    if "--version" in sys.argv[1:]:
        print("0.0.1 (bench flood agent)")
        return 0
    channel = "--input-format" in sys.argv  # the board only ever passes stream-json
    if channel:
        read_prompt_turn()
    else:
        sys.stdin.read()  # the prompt
    rate = float(os.environ.get("FLOOD_RATE", "2000"))
    seconds = float(os.environ.get("FLOOD_SECONDS", "10"))
    padding = "x" * int(os.environ.get("FLOOD_PAD", "80"))
    per_message = int(os.environ.get("FLOOD_LINES_PER_MESSAGE", "1"))  # lines per message.id
    out_dir = os.environ.get("FLOOD_DIR")
    sid = str(uuid.uuid4())
    tag = sid[:8]
    out = sys.stdout
    out.write(line({"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": sid,
                    "tools": ["Bash", "Read"], "mcp_servers": [], "model": "claude-flood",
                    "permissionMode": "default", "claude_code_version": "0.0.1",
                    "uuid": str(uuid.uuid4())}))
    out.flush()

    usage = {"input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    total = int(rate * seconds)
    n = 0
    start = time.monotonic()
    next_tick = start
    while n < total:
        elapsed = time.monotonic() - start
        if elapsed >= seconds + TICK:  # behind schedule (the pipe was full): stop on time
            break
        due = min(total, int(elapsed * rate) + 1)
        chunk = []
        while n < due:
            n += 1
            text = f"{n} {time.time()!r} {tag} {padding}"
            chunk.append(line({"type": "assistant", "message": {
                "id": f"msg_{(n - 1) // per_message + 1}", "type": "message",
                "role": "assistant", "model": "claude-flood",
                "content": [{"type": "text", "text": text}], "stop_reason": None,
                "stop_sequence": None, "usage": usage, "context_management": None},
                "parent_tool_use_id": None,
                "session_id": sid, "uuid": str(uuid.uuid4())}))
        out.write("".join(chunk))
        out.flush()  # blocks when the server does not drain the pipe: that is backpressure
        next_tick += TICK
        time.sleep(max(0.0, next_tick - time.monotonic()))
    elapsed = time.monotonic() - start

    if out_dir:
        path = os.path.join(out_dir, f"{sid}.json")
        with open(path + ".tmp", "w") as f:
            json.dump({"sessionId": sid, "tag": tag, "emitted": n, "seconds": elapsed,
                       "rate": rate, "taskId": os.environ.get("TASKBOARD_TASK_ID")}, f)
        os.replace(path + ".tmp", path)
    out.write(line({"type": "result", "subtype": "success", "is_error": False,
                    "duration_ms": int(elapsed * 1000), "num_turns": 1,
                    "result": f"flooded {n} lines", "session_id": sid,
                    "total_cost_usd": 0.0, "usage": usage, "permission_denials": [],
                    "terminal_reason": "completed", "uuid": str(uuid.uuid4())}))
    out.flush()
    if channel:
        sys.stdin.read()  # the board closes stdin when the turn has ended
    return 0


def read_prompt_turn():
    """Answer control requests until the first user message (the prompt) arrives."""
    for raw in sys.stdin:
        message = json.loads(raw)
        if message.get("type") == "user":
            return
        if message.get("type") == "control_request":
            sys.stdout.write(line({"type": "control_response", "response": {
                "subtype": "success", "request_id": message["request_id"], "response": {}}}))
            sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
