"""The two programs taskboard.py starts as child processes, each a whole program of its own.

`python taskboard.py --mcp --url URL` runs the board tools' MCP server, and
`python taskboard.py --simulate-agent ...` the simulated agent CLI.  taskboard.py imports
this module after patching the standard library and dispatches to mcp_serve() and
simulate_agent(); neither touches the database or the runtime.

Sections: BOARD TOOLS (MCP) · SIMULATED AGENT.
"""

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
import uuid

import requests

from taskboard_core import STATUSES, TASK_TYPES, __version__, json_dumps

# =============================================================================
# BOARD TOOLS (MCP)
# =============================================================================
# A stdio MCP server (JSON-RPC, one message per line) that each task run gets through
# --mcp-config.  Its tools call the HTTP API with the run's own token, which reaches only
# that project's tasks, and only while the run lives (taskboard.py issues and revokes it).

#: MCP tools: name -> (description, input schema properties, required).
MCP_TOOLS = {
    "list_tasks": ("List the tasks of this project (id, key, title, status, priority, type, "
                   "parent).", {"status": {"type": "string", "enum": list(STATUSES)}}, []),
    "create_task": ("Create a task in this project. By default it is a sub-task of the task "
                    "you are working on, which then waits until its sub-tasks are finished; "
                    "pass parent_task_id null for an independent task.", {
                        "title": {"type": "string"}, "description": {"type": "string"},
                        "acceptance_criteria": {"type": "string"},
                        "task_type": {"type": "string", "enum": list(TASK_TYPES)},
                        "priority": {"type": "integer", "minimum": 0, "maximum": 3},
                        "parent_task_id": {"type": ["integer", "null"]}}, ["title"]),
    "update_task": ("Change fields of a task of this project (not its status).", {
        "id": {"type": "integer"}, "title": {"type": "string"},
        "description": {"type": "string"}, "acceptance_criteria": {"type": "string"},
        "task_type": {"type": "string", "enum": list(TASK_TYPES)},
        "priority": {"type": "integer", "minimum": 0, "maximum": 3}}, ["id"]),
    "change_task_status": ("Move another task of this project to a status (never the task "
                           "you are working on).", {
                               "id": {"type": "integer"},
                               "status": {"type": "string", "enum": list(STATUSES)}},
                           ["id", "status"]),
    "get_task_detail": ("A task with its revisions, attachments, commits and latest log "
                        "entries.", {"id": {"type": "integer"}}, ["id"]),
}


def mcp_serve(argv: list[str]) -> int:
    """Serve the board tools over stdio until stdin closes."""
    parser = argparse.ArgumentParser(prog="taskboard.py --mcp")
    parser.add_argument("--url", required=True)
    url = parser.parse_args(argv).url.rstrip("/")
    own = int(os.environ.get("TASKBOARD_TASK_ID") or 0) or None
    http = requests.Session()
    token = os.environ.get("TASKBOARD_MCP_TOKEN")
    if token:
        http.headers["Authorization"] = f"Bearer {token}"
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            _mcp_send({"jsonrpc": "2.0", "id": None,
                       "error": {"code": -32700, "message": "parse error"}})
            continue
        if not isinstance(message, dict) or "id" not in message:
            continue  # a notification (e.g. notifications/initialized)
        try:
            result = _mcp_answer(message.get("method"), message.get("params") or {}, http,
                                 url, own)
            _mcp_send({"jsonrpc": "2.0", "id": message["id"], "result": result})
        except LookupError as exc:
            _mcp_send({"jsonrpc": "2.0", "id": message["id"],
                       "error": {"code": -32601, "message": str(exc)}})
    return 0


def _mcp_answer(method, params, http, url, own):
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "taskboard", "version": __version__}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": [{"name": name, "description": text, "inputSchema": {
            "type": "object", "properties": props, "required": required}}
            for name, (text, props, required) in MCP_TOOLS.items()]}
    if method == "tools/call":
        name, args = params.get("name"), params.get("arguments") or {}
        if name not in MCP_TOOLS:
            raise LookupError(f"unknown tool {name!r}")
        try:
            value, failed = _mcp_tool(name, args, http, url, own), False
        except (ValueError, requests.RequestException) as exc:
            value, failed = {"error": str(exc)}, True
        return {"content": [{"type": "text", "text": json_dumps(value)}], "isError": failed}
    raise LookupError(f"unknown method {method!r}")


def _mcp_tool(name, args, http, url, own):
    def call(method, path, body=None):
        response = http.request(method, url + path, json=body, timeout=30)
        answer = response.json() if response.content else {}
        if response.status_code >= 400:
            raise ValueError(answer.get("error") if isinstance(answer, dict) else answer)
        return answer

    def project_id():
        if own is None:
            raise ValueError("TASKBOARD_TASK_ID is not set: which project?")
        return call("GET", f"/api/tasks/{own}")["project_id"]

    if name == "list_tasks":
        tasks = call("GET", f"/api/projects/{project_id()}/tasks")
        return [{k: t[k] for k in ("id", "task_key", "title", "status", "priority",
                                   "task_type", "parent_task_id")}
                for t in tasks if args.get("status") in (None, t["status"])]
    if name == "create_task":
        body = {"parent_task_id": own, **args}
        return call("POST", f"/api/projects/{project_id()}/tasks", body)
    if name == "update_task":
        fields = {k: v for k, v in args.items() if k != "id"}
        if "status" in fields:
            raise ValueError("use change_task_status to move a task")
        return call("PUT", f"/api/tasks/{int(args['id'])}", fields)
    if name == "change_task_status":
        if int(args["id"]) == own:
            raise ValueError("you cannot change the status of the task you are working on")
        return call("PATCH", f"/api/tasks/{int(args['id'])}/status",
                    {"status": args.get("status")})
    detail = call("GET", f"/api/tasks/{int(args['id'])}/detail")
    detail["logs"] = detail["logs"][-20:]
    return detail


def _mcp_send(message: dict) -> None:
    sys.stdout.write(json_dumps(message) + "\n")
    sys.stdout.flush()


# =============================================================================
# SIMULATED AGENT
# =============================================================================
# `python taskboard.py --simulate-agent ...` speaks the agent CLI's contract (argv, prompt
# on stdin, stream-json on stdout) with believable tool calls and pacing, so --demo works
# with no agent installed.  It edits and commits only in a repository --demo created.

#: The file marking a scratch repository made by --demo.
DEMO_MARKER = ".taskboard-demo"


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
    prompt = sys.stdin.read()
    session = known.resume or str(uuid.uuid4())
    pace = float(os.environ.get("TASKBOARD_SIMULATE_PACE", "1"))
    title = next((line.lstrip("# ").split(": ", 1)[-1] for line in prompt.splitlines()
                  if line.strip()), "the task")
    cwd = os.getcwd()
    demo = os.path.exists(os.path.join(cwd, DEMO_MARKER))
    turn = itertools.count(1)

    def emit(event):
        print(json_dumps({**event, "session_id": session}), flush=True)

    def say(block):
        emit({"type": "assistant", "message": {
            "id": f"msg_sim_{session[:8]}_{next(turn)}", "type": "message",
            "role": "assistant", "model": f"simulated-{known.model}", "content": [block],
            "usage": {"input_tokens": 900, "output_tokens": 120,
                      "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 300}}})

    def tool(name, tool_input, run):
        tool_id = f"toolu_sim_{uuid.uuid4().hex[:12]}"
        say({"type": "tool_use", "id": tool_id, "name": name, "input": tool_input})
        time.sleep(0.6 * pace)
        output, failed = run()
        emit({"type": "user", "message": {"role": "user", "content": [{
            "type": "tool_result", "tool_use_id": tool_id, "content": output,
            "is_error": failed}]}})
        time.sleep(0.3 * pace)

    def shell(args):
        def run():
            try:
                done = subprocess.run(args, cwd=cwd, capture_output=True, text=True,
                                      timeout=30)
            except (OSError, subprocess.SubprocessError) as exc:
                return str(exc), True
            return (done.stdout + done.stderr).strip() or "(no output)", done.returncode != 0
        return run

    emit({"type": "system", "subtype": "init", "cwd": cwd, "model": f"simulated-{known.model}",
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
        summary = _simulated_work(cwd, title, demo, tool, shell, say)
    emit({"type": "result", "subtype": "success", "is_error": False, "num_turns": next(turn),
          "result": summary, "total_cost_usd": 0.0123, "permission_denials": [],
          "usage": {"input_tokens": 3600, "output_tokens": 480,
                    "cache_read_input_tokens": 8000, "cache_creation_input_tokens": 1200}})
    return 0


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


def _simulated_work(cwd, title, demo, tool, shell, say) -> str:
    notes = os.path.join(cwd, "NOTES.md")
    if demo:
        def edit():
            with open(notes, "a", encoding="utf-8") as f:
                f.write(f"- {title}\n")
            return f"The file {notes} has been updated.", False
        tool("Edit", {"file_path": notes, "new_string": f"- {title}"}, edit)
        def commit():
            output, failed = shell(["git", "add", "-A"])()
            if failed:
                return output, True
            return shell(["git", "-c", "user.name=Simulated Agent", "-c",
                          "user.email=agent@taskboard.invalid", "commit", "-qm",
                          f"Simulated work: {title}"])()
        tool("Bash", {"command": f"git add -A && git commit -m 'Simulated work: {title}'",
                      "description": "Commit the change"}, commit)
        summary = f"Added a note for “{title}” to NOTES.md and committed it."
    else:
        say({"type": "text", "text": "This is not a demo repository, so I change nothing."})
        summary = "Looked around; nothing was changed (simulated agent outside the demo)."
    say({"type": "text", "text": summary})
    return summary
