"""A fake Claude Code CLI for bench/approvals.py: asks for tool approvals, times the answers.

Standard library only. It speaks the CLI's two-way stream-json protocol (design.md §12, as
tests/fake_agent.py does): stdin is JSON lines. The board first sends
`control_request` initialize (answered at once), then the prompt as a `user` message. Then,
like `claude -p --input-format stream-json ... --permission-prompt-tool stdio` in `default`
mode, it prints:

    {"type":"system","subtype":"init","session_id":<uuid4>,...}
    {"type":"user",...,"isReplay":true}                       (the prompt, echoed)
    then ASK_COUNT times, ASK_INTERVAL s apart:
      {"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash",...}]}}
      {"type":"control_request","request_id":R,"request":{"subtype":"can_use_tool",...}}
      ... waits for the board's {"type":"control_response","response":{"request_id":R,...}}
      {"type":"control_response",...}                         (echoed, as the CLI does)
      {"type":"user","message":{"content":[{"type":"tool_result",...}]}}
    {"type":"result","subtype":"success",...}

and exits 0 when the board closes stdin (it does once a turn ends and nothing is queued).
Stdin ending while a request waits: exit 1, no result (the CLI would be gone too).

Timings: for each request, `asked` is time.time() just before its line is written (and
flushed), `answered` the time.time() right after the matching control_response line was
read; `asked_mono` is time.monotonic() taken with `asked` (bench/push.py compares it with
the push service's clock, which is time.monotonic(): on Linux one clock for every process).
Each is appended as a JSON line {request_id, asked, asked_mono, answered, behavior, task} to
`<ASK_DIR>/<session id>.jsonl`, flushed per request. `task` is $TASKBOARD_TASK_ID, which tells
the bench's phases apart. bench/approvals.py compares `asked` with the moment its /ws client
got `approval:requested`, and `answered` with the moment its "person" POSTed allow (the same
machine clock for all).

Env: ASK_COUNT (requests per run, default 10), ASK_INTERVAL (s between an answer and the next
request, default 0.1), ASK_SECONDS (stop asking this long after the first request, even before
ASK_COUNT; default no limit), ASK_DIR (where timings go; unset: nowhere).

Other tasks on the same board. The board has one agent command for every task, and
bench/approvals.py needs flooding agents beside this one (bench/load.py's load). So a prompt
that does not contain ASK_MARKER (default "[bench:ask]") is handed over to ASK_ELSE, another
fake CLI (e.g. "<python> bench/_flood_agent.py"): this process answers initialize, then
execs ASK_ELSE with the one-way invocation it was written for: the channel flags removed
from argv, the prompt on stdin and then EOF. The board's stdin pipe is closed by that
(writes to it fail quietly on the board's side). Without ASK_ELSE every prompt asks.
`--version` prints a version and exits.
"""

import json
import os
import shlex
import sys
import time
import uuid

#: The channel flags the board adds to a task run's argv (design §12), with their values.
CHANNEL_FLAGS = {"--input-format": 1, "--replay-user-messages": 0,
                 "--permission-prompt-tool": 1}

out = sys.stdout


def emit(obj):
    """ One stdout line, flushed at once (the board reads line by line). """
    out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    out.flush()


def read_message(timed=False):
    """ The next JSON line on stdin, None at EOF (a line that is not JSON is skipped). With
    `timed`, (message, time.time() right after the line was read). """
    while True:
        line = sys.stdin.buffer.readline()
        read_at = time.time()
        if not line:
            return (None, read_at) if timed else None
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        return (msg, read_at) if timed else msg


def answer_control(msg, response=None, error=None):
    """ Answer one of the board's control requests (initialize: success, an empty answer). """
    request_id = msg.get("request_id")
    answer = {"subtype": "error", "request_id": request_id, "error": error} if error else \
        {"subtype": "success", "request_id": request_id, "response": response or {}}
    emit({"type": "control_response", "response": answer})


def next_user_turn():
    """ Read until the first user message, answering initialize on the way; None at EOF. """
    while True:
        msg = read_message()
        if msg is None or msg.get("type") == "user":
            return msg
        if msg.get("type") == "control_request":
            subtype = (msg.get("request") or {}).get("subtype")
            if subtype == "initialize":
                answer_control(msg, {"commands": [], "agents": [], "models": []})
            else:
                answer_control(msg, error=f"Unsupported control request subtype: {subtype}")


def prompt_text(turn):
    content = (turn.get("message") or {}).get("content")
    if isinstance(content, list):  # content blocks
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else ""


def hand_over(command, prompt):
    """ Become `command` (another fake CLI), invoked one-way: the channel flags dropped, the
    prompt on stdin, then EOF. The prompt goes through a pipe written before the exec, so it
    must fit in the pipe's buffer (64 KB on Linux); the fakes this serves ignore it anyway. """
    argv, rest = shlex.split(command), sys.argv[1:]
    i = 0
    while i < len(rest):
        if rest[i] in CHANNEL_FLAGS:
            i += 1 + CHANNEL_FLAGS[rest[i]]
            continue
        argv.append(rest[i])
        i += 1
    read_end, write_end = os.pipe()
    os.write(write_end, prompt.encode()[:60000])
    os.close(write_end)
    out.flush()
    os.dup2(read_end, 0)  # this also closes our end of the board's stdin pipe
    os.close(read_end)
    os.execvp(argv[0], argv)


def main():
    if "--version" in sys.argv[1:]:
        print("0.0.1 (bench asking agent)")
        return 0
    turn = next_user_turn()
    if turn is None:
        return 0  # stdin ended before any prompt
    prompt = prompt_text(turn)
    marker, other = os.environ.get("ASK_MARKER", "[bench:ask]"), os.environ.get("ASK_ELSE")
    if other and marker not in prompt:
        hand_over(other, prompt)  # does not return

    count = int(os.environ.get("ASK_COUNT", "10"))
    interval = float(os.environ.get("ASK_INTERVAL", "0.1"))
    limit = float(os.environ.get("ASK_SECONDS", "0") or 0)
    out_dir = os.environ.get("ASK_DIR")
    task = os.environ.get("TASKBOARD_TASK_ID")
    sid = str(uuid.uuid4())
    tag = sid[:8]
    timings = open(os.path.join(out_dir, f"{sid}.jsonl"), "a") if out_dir else None
    usage = {"input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}

    def assistant(content):
        emit({"type": "assistant", "message": {
            "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
            "model": "claude-ask", "content": content, "stop_reason": None,
            "stop_sequence": None, "usage": usage, "context_management": None},
            "parent_tool_use_id": None, "session_id": sid, "uuid": str(uuid.uuid4())})

    emit({"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": sid,
          "tools": ["Bash", "Read"], "mcp_servers": [], "model": "claude-ask",
          "permissionMode": "default", "claude_code_version": "0.0.1",
          "uuid": str(uuid.uuid4())})
    emit({**turn, "session_id": sid, "parent_tool_use_id": None, "uuid": str(uuid.uuid4()),
          "isReplay": True})
    assistant([{"type": "text", "text": f"I will ask for {count} approvals."}])

    start = time.monotonic()
    asked_n = allowed = 0
    for i in range(count):
        if limit and i and time.monotonic() - start >= limit:
            break
        request_id = f"ask-{tag}-{i}"
        tool_use_id = f"toolu_bench_{tag}_{i:05d}"
        tool_input = {"command": f"echo approval {i}", "description": f"Approval {i}"}
        # the CLI prints the tool call, then asks (as in agent-streams/claude-control-approve)
        assistant([{"type": "tool_use", "id": tool_use_id, "name": "Bash",
                    "input": tool_input}])
        request = {"type": "control_request", "request_id": request_id, "request": {
            "subtype": "can_use_tool", "tool_name": "Bash", "display_name": "Bash",
            "input": tool_input, "description": tool_input["description"],
            "permission_suggestions": [{"type": "addRules", "rules": [
                {"toolName": "Bash", "ruleContent": "echo approval *"}],
                "behavior": "allow", "destination": "localSettings"}],
            "tool_use_id": tool_use_id}}
        line = json.dumps(request, separators=(",", ":")) + "\n"
        asked_mono = time.monotonic()  # system-wide on Linux: bench/push.py's push service
        asked = time.time()  # just before the line goes out
        out.write(line)
        out.flush()
        asked_n += 1
        while True:  # the board's answer to this very request
            msg, answered = read_message(timed=True)
            if msg is None:
                print(f"stdin ended while {request_id} waited", file=sys.stderr)
                return 1
            if msg.get("type") == "control_response" and \
                    (msg.get("response") or {}).get("request_id") == request_id:
                break
            if msg.get("type") == "control_request":  # e.g. interrupt: not part of the bench
                answer_control(msg, error="the bench agent does not take control requests")
        response = msg["response"].get("response") or {}
        behavior = response.get("behavior")
        allowed += behavior == "allow"
        if timings:
            timings.write(json.dumps({"request_id": request_id, "asked": asked,
                                      "asked_mono": asked_mono, "answered": answered,
                                      "behavior": behavior, "task": task}) + "\n")
            timings.flush()
        emit(msg)  # the CLI echoes the control responses it reads
        emit({"type": "user", "message": {"role": "user", "content": [
            {"tool_use_id": tool_use_id, "type": "tool_result",
             "content": f"approval {i}" if behavior == "allow" else "denied",
             "is_error": behavior != "allow"}]},
            "parent_tool_use_id": None, "session_id": sid, "uuid": str(uuid.uuid4())})
        time.sleep(interval)
    elapsed = time.monotonic() - start
    if timings:
        timings.close()

    def result(text):
        emit({"type": "result", "subtype": "success", "is_error": False,
              "duration_ms": int(elapsed * 1000), "num_turns": asked_n + 1, "result": text,
              "session_id": sid, "total_cost_usd": 0.0, "usage": usage,
              "permission_denials": [], "terminal_reason": "completed",
              "uuid": str(uuid.uuid4())})

    result(f"asked {asked_n} times, {allowed} allowed")
    # the board closes stdin once the turn ended and nothing is queued; a queued message
    # is a new turn, answered with a result of its own
    while True:
        msg = read_message()
        if msg is None:
            return 0
        if msg.get("type") == "user":
            result("nothing more to do")
        elif msg.get("type") == "control_request":
            answer_control(msg, error="the bench agent does not take control requests")


if __name__ == "__main__":
    sys.exit(main())
