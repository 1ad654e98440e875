"""The real Codex CLI against a loopback stand-in for the OpenAI Responses API.

Codex (npm @openai/codex, pinned below) is pointed at the stub as a model provider of its own
config: `codex_args(stub)` gives the `-c` options (wire_api "responses", base_url here, the key
from $FAKE_KEY).  See fixtures/agent-streams/codex-gemini-NOTES.md for what was probed.

- `ResponsesStub`: an HTTP server on 127.0.0.1 (port 0, in a thread) that answers
  `POST /v1/responses` with a streamed SSE response.  What it answers is chosen from the last
  thing the user said:
    MODE:echo X      -> text "You said: X"
    MODE:bash CMD    -> a reasoning item, a text and one call of the request's shell tool
                        running CMD; once it sees the tool's output, text "Tool said: <output>"
    MODE:write F T   -> one shell call writing T into F (`printf %s T > F`), then as above
    MODE:subtask T   -> a call of the board tools' create_task {title: T} (in the request's
                        mcp__taskboard namespace), then as above
    MODE:status N [RETRY_AFTER] -> HTTP error N with an OpenAI-style error body (and a
                        retry-after header when given)
    MODE:usage-limit [SECONDS] -> HTTP 429 with the `usage_limit_reached` body ChatGPT plans
                        get, resetting in SECONDS (default 3600)
    anything else    -> text "You said: <text>"
  Every request is kept in `stub.requests`.
- `codex_cli()`: the real CLI, installed once with npm (tests/npm_cli.py), or a skip.
- `codex_env()`: a throwaway $HOME/$CODEX_HOME and the key, without the caller's OPENAI_*.

Run it alone (`python tests/codex_stub.py`) to get a stub on a printed URL for probing.
"""

import json
import os
import shlex
import time

import npm_cli

from claude_stub import LoopbackApi, joined_text, new_id

CODEX_VERSION = "0.169.0"
CODEX_PACKAGE = f"@openai/codex@{CODEX_VERSION}"
#: The model name the tests pass with -m; the stub answers any name, and the board prices
#: it as gpt-5-codex (taskboard.MODEL_PRICES).
MODEL = "gpt-5-codex"
#: The stub's token counts per response.
USAGE = {"input_tokens": 3000, "input_tokens_details": {"cached_tokens": 2000},
         "output_tokens": 120, "output_tokens_details": {"reasoning_tokens": 40},
         "total_tokens": 3120}



def _output_text(output):
    """A function_call_output's output: a string, or a list of content items."""
    if isinstance(output, dict):
        output = output.get("content") or output.get("output") or ""
    return joined_text(output)


def shell_call(tools, command):
    """A function call of the request's shell tool running command (its name and argument
    shape differ between Codex's model families), as (name, arguments)."""
    names = [t.get("name") for t in tools or [] if isinstance(t, dict)]
    if "exec_command" in names:
        return "exec_command", {"cmd": command}
    if "shell_command" in names:
        return "shell_command", {"command": command}
    return "shell", {"command": ["bash", "-lc", command]}


def namespaced_call(tools, wanted):
    """The request's tool named wanted inside a `namespace` tool (how Codex offers an MCP
    server's tools: namespace mcp__<server>), as (name, namespace), else (None, None)."""
    for tool in tools or []:
        for inner in (tool.get("tools") or []) if isinstance(tool, dict) else []:
            if isinstance(inner, dict) and inner.get("name") == wanted:
                return wanted, tool.get("name")
    return None, None


def plan_reply(body):
    """What to answer one request with: ("status", (code, retry_after)), ("limit", seconds),
    or ("ok", steps), steps a list of ("reasoning"|"text"|"call", value)."""
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    last = items[-1] if items else {}
    if last.get("type") == "function_call_output":
        output = _output_text(last.get("output")).strip()
        return "ok", [("text", "Tool said: " + output)]
    users = [i for i in items if i.get("role") == "user"]
    said = joined_text(users[-1].get("content")).strip() if users else ""
    if "MODE:" in said:
        said = said[said.index("MODE:"):].split("\n", 1)[0].strip()
    word, _, rest = said.partition(" ")
    if word == "MODE:bash":
        return "ok", [("reasoning", "I should run a shell command."), ("text", "I'll run it."),
                      ("call", shell_call(body.get("tools"), rest))]
    if word == "MODE:write":
        name, _, content = rest.partition(" ")
        command = f"printf %s {shlex.quote(content)} > {shlex.quote(name)}"
        return "ok", [("call", shell_call(body.get("tools"), command))]
    if word == "MODE:subtask":  # the board tools' create_task, {title: rest}
        name, namespace = namespaced_call(body.get("tools"), "create_task")
        if name is None:
            return "ok", [("text", "There is no create_task tool.")]
        return "ok", [("text", "Splitting it."), ("call", (name, {"title": rest}, namespace))]
    if word == "MODE:status":
        code, _, retry = rest.partition(" ")
        return "status", (int(code), retry.strip() or None)
    if word == "MODE:usage-limit":
        return "limit", int(rest or 3600)
    if word == "MODE:echo":
        said = rest
    return "ok", [("text", "You said: " + said)]


class ResponsesStub(LoopbackApi):
    """A loopback stand-in for POST /v1/responses (module docstring)."""

    def responses(self):
        """The bodies of the POST /v1/responses requests, in order."""
        with self._lock:
            return [r["body"] for r in self.requests if r["path"] == "/v1/responses"]

    def answer(self, handler, path, body):
        if handler.command == "POST" and path == "/v1/responses":
            self.answer_responses(handler, body or {})
        else:
            self.not_found(handler, path, {"error": {"message": f"stub: no {path}",
                                                     "type": "not_found_error"}})

    def answer_responses(self, handler, body):
        kind, plan = plan_reply(body)
        if kind == "status":
            code, retry = plan
            kinds = {401: "invalid_request_error", 429: "rate_limit_exceeded"}
            headers = [("retry-after", retry)] if retry else []
            handler.send_json(code, {"error": {
                "message": f"stub: HTTP {code}", "type": kinds.get(code, "server_error"),
                "code": kinds.get(code, "server_error")}}, headers)
            return
        if kind == "limit":
            handler.send_json(429, {"error": {
                "type": "usage_limit_reached", "message": "The usage limit has been reached",
                "plan_type": "plus", "resets_at": int(time.time()) + plan,
                "resets_in_seconds": plan}})
            return
        response_id = new_id("resp")
        model = body.get("model") or MODEL
        handler.start_events()
        response = {"id": response_id, "object": "response", "model": model,
                    "status": "in_progress", "output": []}
        items = [e for index, (step, value) in enumerate(plan)
                 for e in self.item_events(index, step, value)]
        try:
            for event in [{"type": "response.created", "response": response}, *items,
                          {"type": "response.completed", "response": {
                              **response, "status": "completed", "usage": USAGE}}]:
                handler.send_event(event, event["type"])
        except (BrokenPipeError, ConnectionResetError):
            pass

    @staticmethod
    def item_events(index, step, value):
        """The output_item.added, delta and output_item.done events of one output item."""
        item_id = new_id({"reasoning": "rs", "text": "msg", "call": "fc"}[step])
        if step == "reasoning":
            item = {"type": "reasoning", "id": item_id,
                    "summary": [{"type": "summary_text", "text": value}]}
            deltas = [{"type": "response.reasoning_summary_text.delta", "item_id": item_id,
                       "output_index": index, "summary_index": 0, "delta": value}]
        elif step == "text":
            item = {"type": "message", "id": item_id, "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": value, "annotations": []}]}
            deltas = [{"type": "response.output_text.delta", "item_id": item_id,
                       "output_index": index, "content_index": 0, "delta": value}]
        else:
            name, arguments, *namespace = value
            item = {"type": "function_call", "id": item_id, "call_id": new_id("call"),
                    "name": name, "arguments": json.dumps(arguments), "status": "completed"}
            if namespace:
                item["namespace"] = namespace[0]
            deltas = []
        yield {"type": "response.output_item.added", "output_index": index,
               "item": {**item, "status": "in_progress"}}
        yield from deltas
        yield {"type": "response.output_item.done", "output_index": index, "item": item}


# Config and environment ##########################################################################

def codex_args(stub):
    """The `-c` options that make the stub Codex's model provider ("stub")."""
    provider = (f'{{name="stub",base_url="{stub.url}/v1",env_key="FAKE_KEY",'
                f'wire_api="responses"}}')
    return ["-c", "model_provider=stub", "-c", f"model_providers.stub={provider}"]


def codex_env(home, stub=None, **extra):
    """The environment for running the CLI with home as $HOME and $CODEX_HOME under it,
    without the caller's OPENAI_*/CODEX_* variables.  With a stub, $CODEX_HOME/config.toml
    makes it the model provider, as codex_args() does on the command line."""
    home = str(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update({"HOME": home, "CODEX_HOME": os.path.join(home, ".codex"),
                "FAKE_KEY": "test-key"})
    os.makedirs(env["CODEX_HOME"], exist_ok=True)
    if stub is not None:
        with open(os.path.join(env["CODEX_HOME"], "config.toml"), "w") as f:
            f.write(f'model_provider = "stub"\n\n[model_providers.stub]\nname = "stub"\n'
                    f'base_url = "{stub.url}/v1"\nenv_key = "FAKE_KEY"\n'
                    f'wire_api = "responses"\n')
    env.update(extra)
    return env


# Installing and locating the real CLI #############################################################

def cache_dir():
    return npm_cli.cache_dir(f"codex-{CODEX_VERSION}", "TASKBOARD_CODEX_DIR")


def installed_cli(prefix):
    """The installed `codex` at CODEX_VERSION under prefix, or None (a Node launcher that
    runs the native binary of the platform package)."""
    path = os.path.join(prefix, "node_modules", ".bin", "codex")
    return npm_cli.first_runnable([path], codex_env, CODEX_VERSION)


def codex_cli():
    """The path of the real `codex` at CODEX_VERSION, installing it on first use with npm
    into cache_dir() ($TASKBOARD_CODEX_DIR or ~/.cache/taskboard-tests/codex-<version>).
    Skips the calling test with npm's reason when it cannot be had."""
    return npm_cli.npm_cli(f"Codex CLI {CODEX_VERSION}", CODEX_PACKAGE, cache_dir(),
                           installed_cli)


if __name__ == "__main__":  # a stub to probe by hand; prints its URL and the options to use
    with ResponsesStub() as stub:
        print(stub.url, flush=True)
        print(shlex.join(codex_args(stub)), flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
