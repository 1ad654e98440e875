"""The real Gemini CLI against a loopback stand-in for the Gemini API.

Gemini CLI (npm @google/gemini-cli, pinned below) is pointed at the stub with
GOOGLE_GEMINI_BASE_URL and an API key, and told to use that key by its settings file
(`gemini_env()`).  See fixtures/agent-streams/codex-gemini-NOTES.md for what was probed.

- `GenerateStub`: an HTTP server on 127.0.0.1 (port 0, in a thread) that answers
  `POST /v1beta/models/<model>:streamGenerateContent?alt=sse` (and `:generateContent`,
  `:countTokens`).  What it answers is chosen from the last thing the user said:
    MODE:echo X      -> text "You said: X"
    MODE:bash CMD    -> a text and one `run_shell_command {command: CMD}` call; once it sees
                        the function's response, text "Tool said: <output>"
    MODE:write F T   -> one `write_file {file_path: F, content: T}` call, then as above
    MODE:status N    -> HTTP error N with a Google-style error body
    MODE:quota minute SECONDS -> 429 RESOURCE_EXHAUSTED, a per-minute quota with RetryInfo
                        `retryDelay: SECONDS s` (and "Please retry in …" in the message)
    MODE:quota daily -> 429 RESOURCE_EXHAUSTED, a per-day quota (with RetryInfo too)
    anything else    -> text "You said: <text>"
  Every request is kept in `stub.requests`.
- `gemini_cli()`: the real CLI, installed once with npm (tests/npm_cli.py), or a skip.

Run it alone (`python tests/gemini_stub.py`) to get a stub on a printed URL for probing.
"""

import json
import os
import time

import npm_cli

from claude_stub import LoopbackApi

GEMINI_VERSION = "0.61.0"
GEMINI_PACKAGE = f"@google/gemini-cli@{GEMINI_VERSION}"
#: The model the tests pass with -m; the board prices it (taskboard.MODEL_PRICES).
MODEL = "gemini-2.5-flash"
#: The stub's token counts per response.
USAGE = {"promptTokenCount": 1800, "candidatesTokenCount": 80, "totalTokenCount": 1880,
         "cachedContentTokenCount": 600}


def _said(contents):
    """The text of the last user turn that is not a function response, and whether the
    last turn is one: (text, function response output or None)."""
    last = contents[-1] if contents else {}
    for part in last.get("parts") or []:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        if response:
            output = _dict(response.get("response"))
            return "", str(output.get("output") or output.get("error") or output)
    texts = [p.get("text", "") for c in contents if c.get("role") == "user"
             for p in c.get("parts") or [] if isinstance(p, dict) and "text" in p]
    return (texts[-1] if texts else ""), None


def _dict(value):
    return value if isinstance(value, dict) else {}


def quota_error(kind, seconds):
    """A 429 body as the Gemini API gives for an exhausted quota."""
    metric = "generativelanguage.googleapis.com/generate_content_free_tier_requests"
    quota = "GenerateRequestsPerDayPerProjectPerModel-FreeTier" if kind == "daily" else \
        "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"
    message = ("You exceeded your current quota, please check your plan and billing details."
               f"\n* Quota exceeded for metric: {metric}, limit: 50, model: {MODEL}"
               f"\nPlease retry in {seconds}s.")
    return {"error": {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED",
                      "details": [
                          {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                           "violations": [{"quotaMetric": metric, "quotaId": quota,
                                           "quotaValue": "50"}]},
                          {"@type": "type.googleapis.com/google.rpc.RetryInfo",
                           "retryDelay": f"{seconds}s"}]}}


def plan_reply(body):
    """("error", (status, body)) or ("ok", parts): the Gemini content parts to answer with."""
    text, output = _said(body.get("contents") or [])
    if output is not None:
        return "ok", [{"text": "Tool said: " + output.strip()}]
    said = text.strip()
    if "MODE:" in said:
        said = said[said.index("MODE:"):].split("\n", 1)[0].strip()
    word, _, rest = said.partition(" ")
    if word == "MODE:bash":
        return "ok", [{"text": "I'll run it."},
                      {"functionCall": {"name": "run_shell_command",
                                        "args": {"command": rest,
                                                 "description": "Run the command"}}}]
    if word == "MODE:write":
        name, _, content = rest.partition(" ")
        return "ok", [{"functionCall": {"name": "write_file",
                                        "args": {"file_path": name, "content": content}}}]
    if word == "MODE:status":
        code = int(rest)
        return "error", (code, {"error": {"code": code, "message": f"stub: HTTP {code}",
                                          "status": "UNAVAILABLE"}})
    if word == "MODE:quota":
        kind, _, seconds = rest.partition(" ")
        return "error", (429, quota_error(kind, int(seconds or 30)))
    if word == "MODE:echo":
        said = rest
    return "ok", [{"text": "You said: " + said}]


class GenerateStub(LoopbackApi):
    """A loopback stand-in for the Gemini API's generateContent (module docstring)."""

    def generations(self):
        """The bodies of the streamGenerateContent/generateContent requests, in order."""
        with self._lock:
            return [r["body"] for r in self.requests if "enerateContent" in r["path"]]

    def answer(self, handler, path, body):
        action = path.rsplit(":", 1)[-1] if ":" in path else ""
        if handler.command == "POST" and action in ("streamGenerateContent", "generateContent"):
            self.answer_generate(handler, body or {}, action == "streamGenerateContent")
        elif handler.command == "POST" and action == "countTokens":
            handler.send_json(200, {"totalTokens": USAGE["promptTokenCount"]})
        else:
            self.not_found(handler, path, {"error": {"code": 404, "status": "NOT_FOUND",
                                                     "message": f"stub: no {path}"}})

    def answer_generate(self, handler, body, stream):
        kind, plan = plan_reply(body)
        if kind == "error":
            handler.send_json(*plan)
            return
        model = handler.path.split("/models/", 1)[-1].split(":", 1)[0]
        if body.get("generationConfig", {}).get("responseMimeType") == "application/json":
            plan = [{"text": "{}"}]  # the CLI's own side questions (routing, next speaker)
        chunks = [{"candidates": [{"content": {"role": "model", "parts": [part]},
                                   "index": 0}], "modelVersion": model} for part in plan]
        chunks[-1]["candidates"][0]["finishReason"] = "STOP"
        chunks[-1]["usageMetadata"] = USAGE
        if not stream:
            handler.send_json(200, {"candidates": [{
                "content": {"role": "model", "parts": plan}, "finishReason": "STOP",
                "index": 0}], "usageMetadata": USAGE, "modelVersion": model})
            return
        handler.start_events()
        try:
            for chunk in chunks:
                handler.send_event(chunk, end="\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass


# Environment ######################################################################################

def gemini_env(stub, home, **extra):
    """The environment for running the CLI against stub with home as $HOME (its
    ~/.gemini/settings.json selects API-key auth), without the caller's GEMINI_*/GOOGLE_*."""
    home = str(home)
    settings = os.path.join(home, ".gemini", "settings.json")
    os.makedirs(os.path.dirname(settings), exist_ok=True)
    with open(settings, "w") as f:
        json.dump({"security": {"auth": {"selectedType": "gemini-api-key"}},
                   "privacy": {"usageStatisticsEnabled": False},
                   "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}, f)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI_", "GOOGLE_"))}
    env.update({"HOME": home, "GEMINI_API_KEY": "test-key",
                "GOOGLE_GEMINI_BASE_URL": stub.url if stub else "http://127.0.0.1:9",
                "GEMINI_CLI_NO_RELAUNCH": "true"})
    env.update(extra)
    return env


# Installing and locating the real CLI #############################################################

def cache_dir():
    return npm_cli.cache_dir(f"gemini-{GEMINI_VERSION}", "TASKBOARD_GEMINI_DIR")


def installed_cli(prefix):
    """The installed `gemini` at GEMINI_VERSION under prefix, or None."""
    path = os.path.join(prefix, "node_modules", ".bin", "gemini")
    return npm_cli.first_runnable([path], lambda home: gemini_env(None, home), GEMINI_VERSION)


def gemini_cli():
    """The path of the real `gemini` at GEMINI_VERSION, installing it on first use with npm
    into cache_dir() ($TASKBOARD_GEMINI_DIR or ~/.cache/taskboard-tests/gemini-<version>).
    Skips the calling test with npm's reason when it cannot be had."""
    return npm_cli.npm_cli(f"Gemini CLI {GEMINI_VERSION}", GEMINI_PACKAGE, cache_dir(),
                           installed_cli)


if __name__ == "__main__":  # a stub to probe by hand; prints its URL
    with GenerateStub() as stub:
        print(stub.url, flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
