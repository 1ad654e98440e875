"""The real OpenCode CLI against a loopback stand-in for an OpenAI-compatible chat API.

OpenCode (npm opencode-ai, pinned below) reaches models through AI SDK providers; the
`@ai-sdk/openai-compatible` one is bundled in its binary, so a provider declared in the config
with that npm name and `options.baseURL` pointing here needs nothing from the network. See
fixtures/agent-streams/opencode-NOTES.md for what was probed and recorded with this stub.

- `ChatStub`: an HTTP server on 127.0.0.1 (port 0, in a thread) that answers
  `POST /v1/chat/completions` (streamed SSE or plain JSON). What it answers is chosen from
  the last thing the user said:
    MODE:echo X     -> text "You said: X"
    MODE:bash CMD   -> reasoning + text + one tool call `bash {command: CMD}`; after the tool
                       result, text "Tool said: <result>"
    MODE:write F T  -> one tool call `write {filePath: <abs F>, content: T}`, then as above
    MODE:subtask T  -> one call of the board tools' `taskboard_create_task {title: T}`, then
                       as above
    MODE:status N [RETRY_AFTER] -> HTTP error N with an OpenAI-style error body
                       (and a retry-after header when given), e.g. `MODE:status 429 30`
    MODE:slow       -> a text streamed one delta every 0.2 s for up to 30 s
    anything else   -> text "You said: <text>"
  A request without tools (OpenCode's title generation) is answered with a short title.
  Every request is kept in `stub.requests` for assertions.
- `opencode_cli()`: the path of the real CLI, installed once with npm into a cache dir;
  skips the test with a clear reason when that cannot be done.
- `opencode_config()` / `opencode_env()`: the config that declares the stub as provider
  "stub" and the environment that keeps the CLI in a throwaway $HOME/XDG dirs and off the
  network.

Run it alone (`python tests/opencode_stub.py`) to get a stub on a printed URL for probing.
"""

import json
import os
import time

import npm_cli

from claude_stub import LoopbackApi, joined_text, new_id

OPENCODE_VERSION = "1.18.33"
OPENCODE_PACKAGE = f"opencode-ai@{OPENCODE_VERSION}"
#: The provider id the config declares, and the model ids it lists (run with -m stub/MODEL).
PROVIDER = "stub"
MODEL = "stub-large"
#: The stub's token counts per response; prices in opencode_config() are per million tokens.
USAGE = {"prompt_tokens": 1200, "completion_tokens": 85, "total_tokens": 1285,
         "prompt_tokens_details": {"cached_tokens": 200}}



def plan_reply(body):
    """What to answer one chat request with: (status, payload) for an HTTP error, or
    ("ok", steps) where steps is a list of ("reasoning"|"text"|"tool", value)."""
    messages = body.get("messages") or []
    if not body.get("tools"):
        return "ok", [("text", "Stub title")]
    last = messages[-1] if messages else {"role": "user", "content": ""}
    if last.get("role") == "tool":
        return "ok", [("text", "Tool said: " + joined_text(last.get("content")).strip())]
    users = [m for m in messages if m.get("role") == "user"]
    said = joined_text(users[-1]["content"]).strip() if users else ""
    if "MODE:" in said:
        said = said[said.index("MODE:"):].split("\n", 1)[0].strip()
    word, _, rest = said.partition(" ")
    if word == "MODE:bash":
        return "ok", [("reasoning", "I should run a shell command."), ("text", "I'll run it."),
                      ("tool", ("bash", {"command": rest, "description": "Run the command"}))]
    if word == "MODE:write":
        name, _, content = rest.partition(" ")
        return "ok", [("tool", ("write", {"filePath": name, "content": content}))]
    if word == "MODE:subtask":  # the board tools' create_task (taskboard_create_task)
        names = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        if "taskboard_create_task" not in names:
            return "ok", [("text", "There is no create_task tool.")]
        return "ok", [("text", "Splitting it."),
                      ("tool", ("taskboard_create_task", {"title": rest}))]
    if word == "MODE:status":
        code, _, retry = rest.partition(" ")
        return int(code), retry.strip() or None
    if word == "MODE:slow":
        return "ok", [("slow", "Working slowly")]
    if word == "MODE:echo":
        said = rest
    return "ok", [("text", "You said: " + said)]


class ChatStub(LoopbackApi):
    """A loopback stand-in for an OpenAI-compatible /v1/chat/completions (module docstring;
    `requests` and `unknown` as LoopbackApi says)."""

    def chats(self):
        """The bodies of the POST /v1/chat/completions requests, in order."""
        with self._lock:
            return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]

    def answer(self, handler, path, body):
        if handler.command == "POST" and path == "/v1/chat/completions":
            self.answer_chat(handler, body or {})
        else:
            self.not_found(handler, path, {"error": {"message": f"stub: no {path}",
                                                     "type": "not_found_error"}})

    def answer_chat(self, handler, body):
        kind, plan = plan_reply(body)
        if kind != "ok":
            kinds = {401: "invalid_request_error", 429: "rate_limit_exceeded"}
            headers = [("retry-after", plan)] if plan else []
            handler.send_json(kind, {"error": {
                "message": f"stub: HTTP {kind}", "type": kinds.get(kind, "server_error"),
                "code": kinds.get(kind, "server_error")}}, headers)
            return
        model, chat_id, created = body.get("model") or MODEL, new_id("chatcmpl"), int(time.time())

        def chunk(delta, finish=None, usage=None):
            out = {"id": chat_id, "object": "chat.completion.chunk", "created": created,
                   "model": model, "choices": [] if usage else [
                       {"index": 0, "delta": delta, "finish_reason": finish}]}
            if usage:
                out["usage"] = usage
            return out

        tool = [v for k, v in plan if k == "tool"]
        finish = "tool_calls" if tool else "stop"
        if not body.get("stream"):
            message = {"role": "assistant",
                       "content": "".join(v for k, v in plan if k in ("text", "slow")) or None}
            if tool:
                message["tool_calls"] = [{"id": new_id("call"), "type": "function", "function": {
                    "name": tool[0][0], "arguments": json.dumps(tool[0][1])}}]
            handler.send_json(200, {"id": chat_id, "object": "chat.completion",
                                    "created": created, "model": model, "usage": USAGE,
                                    "choices": [{"index": 0, "message": message,
                                                 "finish_reason": finish}]})
            return
        handler.start_events()
        try:
            handler.send_event(chunk({"role": "assistant", "content": ""}))
            for step, value in plan:
                if step == "reasoning":
                    handler.send_event(chunk({"reasoning_content": value}))
                elif step == "text":
                    handler.send_event(chunk({"content": value}))
                elif step == "slow":
                    self.stream_slowly(handler, chunk, value)
                else:
                    name, args = value
                    handler.send_event(chunk({"tool_calls": [{
                        "index": 0, "id": new_id("call"), "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)}}]}))
            handler.send_event(chunk({}, finish))
            handler.send_event(chunk(None, usage=USAGE))
            handler.send_event("[DONE]")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the CLI hung up (cancelled)

    def stream_slowly(self, handler, chunk, text):
        handler.send_event(chunk({"content": text}))
        self.slow_started.set()
        deadline = time.monotonic() + self.slow_seconds
        try:
            while time.monotonic() < deadline:
                handler.send_event(chunk({"content": "."}))
                time.sleep(self.slow_interval)
        except (BrokenPipeError, ConnectionResetError):
            self.slow_aborted.set()
            raise


# Config and environment ##########################################################################

def opencode_config(stub_url, permission=None, **extra):
    """An opencode.json (as a dict) whose only provider is the stub, as provider "stub" with
    models stub-large and stub-small (priced so that cost is not 0)."""
    cost = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}
    models = {name: {"name": name, "tool_call": True, "reasoning": True, "cost": cost,
                     "limit": {"context": 200000, "output": 32000}}
              for name in (MODEL, "stub-small")}
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{PROVIDER}/{MODEL}",
        "small_model": f"{PROVIDER}/stub-small",
        "enabled_providers": [PROVIDER],
        "provider": {PROVIDER: {"npm": "@ai-sdk/openai-compatible", "name": "Stub",
                                "options": {"baseURL": stub_url + "/v1", "apiKey": "test-key"},
                                "models": models}},
    }
    if permission is not None:
        config["permission"] = permission
    config.update(extra)
    return config


def opencode_env(home, config=None, **extra):
    """The environment for running the CLI with home as $HOME and every XDG dir under it
    (config, sessions DB, logs, caches), without the caller's OPENCODE_* or provider keys.
    config (a dict) is passed as OPENCODE_CONFIG_CONTENT."""
    home = str(home)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENCODE", "ANTHROPIC_", "OPENAI_", "GEMINI_", "GOOGLE_"))}
    env.update({
        "HOME": home,
        "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
        "XDG_STATE_HOME": os.path.join(home, ".local", "state"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        # No models.dev fetch, update check, LSP downloads or share links.
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
    })
    if config is not None:
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(config)
    env.update(extra)
    return env


# Installing and locating the real CLI #############################################################

def cache_dir():
    return npm_cli.cache_dir(f"opencode-{OPENCODE_VERSION}", "TASKBOARD_OPENCODE_DIR")


def installed_cli(prefix):
    """The installed `opencode` at OPENCODE_VERSION under prefix, or None. The package's
    bin/opencode.exe is a placeholder until its postinstall links the platform binary; the
    binary in the platform package is the fallback."""
    modules = os.path.join(prefix, "node_modules")
    candidates = [os.path.join(modules, ".bin", "opencode")]
    candidates += [os.path.join(modules, name, "bin", "opencode")
                   for name in ("opencode-linux-x64", "opencode-linux-x64-baseline",
                                "opencode-linux-arm64")]
    return npm_cli.first_runnable(candidates, opencode_env, OPENCODE_VERSION)


def opencode_cli():
    """The path of the real `opencode` at OPENCODE_VERSION, installing it on first use with
    npm into cache_dir() ($TASKBOARD_OPENCODE_DIR or ~/.cache/taskboard-tests/opencode-<v>)
    (tests/npm_cli.py).  Skips the calling test with npm's reason when it cannot be had."""
    return npm_cli.npm_cli(f"OpenCode {OPENCODE_VERSION}", OPENCODE_PACKAGE, cache_dir(),
                           installed_cli)


if __name__ == "__main__":  # a stub to probe by hand; prints its URL and the config to use
    with ChatStub() as stub:
        print(stub.url, flush=True)
        print(json.dumps(opencode_config(stub.url)), flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
