"""Parsing the agent CLI's stream-json and judging how a run ended (agent-cli.md §3)."""
import json
import os
import subprocess
import sys

import pytest

import taskboard

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "agent-streams")


def feed(name):
    parser = taskboard.StreamParser()
    with open(os.path.join(FIXTURES, f"{name}.jsonl"), encoding="utf-8") as f:
        entries = [e for line in f for e in parser.feed(line.rstrip("\n"))]
    return parser, entries


def test_success_stream_becomes_thinking_text_tool_call_and_result_entries():
    parser, entries = feed("claude-success")
    assert [e["kind"] for e in entries] == [
        "system", "thinking", "text", "tool_call", "tool_result", "text", "system"]
    call, result = entries[3], entries[4]
    assert (call["tool"], call["message"]) == (
        "Bash", "Bash: echo hello > hello.txt && cat hello.txt")
    assert (result["tool"], result["message"], result["is_error"]) == ("Bash", "hello", False)
    assert isinstance(result["duration_ms"], int)
    assert parser.session_id == "46937f58-889d-4f08-afff-ea911cab86f5"
    assert parser.result["is_error"] is False
    assert taskboard.judge_run(parser, 0, None) == ("ok", None)


def test_usage_counts_each_api_message_once_until_the_result_gives_totals():
    parser = taskboard.StreamParser()
    with open(os.path.join(FIXTURES, "claude-success.jsonl"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines[:-1]:  # the three blocks of msg_0154… repeat one usage
        parser.feed(line)
    assert parser.usage == {"input": 2400, "output": 170, "cache_read": 18000,
                            "cache_creation": 6000}
    estimate = parser.cost("model_medium")
    assert estimate == pytest.approx((2400 * 3 + 170 * 15 + 18000 * 0.3 + 6000 * 3.75) / 1e6)
    parser.feed(lines[-1])
    assert parser.cost("model_medium") == json.loads(lines[-1])["total_cost_usd"]


def test_permission_denials_are_logged_as_errors_and_counted():
    parser, entries = feed("claude-permission-denied")
    denied = [e for e in entries if "permission denied" in e["message"]]
    assert len(parser.denials) == 1 and len(denied) == 1
    assert denied[0]["is_error"] is True and denied[0]["tool"] == "Write"
    assert "/etc/forbidden.txt" in denied[0]["message"]


@pytest.mark.parametrize("name,reason", [
    ("claude-not-logged-in", "not logged in"),
    ("claude-api-error", "prompt is too long"),
    ("claude-max-turns", "maximum number of turns"),
])
def test_recorded_errors_fail_at_once_without_retry(name, reason):
    parser, entries = feed(name)
    outcome, why = taskboard.judge_run(parser, 1, None)
    assert outcome == "fail" and reason in why
    assert any(e.get("is_error") for e in entries)


@pytest.mark.parametrize("result,exit_code,stop,expected", [
    (None, 1, None, "retry"),                                     # crashed, no result line
    (None, 0, None, "retry"),                                     # exited 0, no result
    (None, -15, "timeout", "retry"),
    (None, -15, "idle", "retry"),
    (None, -15, "stopped", "stopped"),
    (None, -15, "interrupted", "interrupted"),
    ({"is_error": False}, 2, None, "retry"),                      # non-zero exit, no is_error
    ({"is_error": True, "api_error_status": 529, "result": "Overloaded"}, 1, None, "retry"),
    ({"is_error": True, "api_error_status": 429, "result": "slow down"}, 1, None, "retry"),
    ({"is_error": True, "subtype": "error_max_budget_usd"}, 1, None, "fail"),
    ({"is_error": True, "subtype": "error_during_execution",
      "errors": ["No conversation found with session ID: x"]}, 1, None, "no_session"),
    ({"is_error": True, "result": "something else"}, 1, None, "fail"),
])
def test_judge_run_table(result, exit_code, stop, expected):
    parser = taskboard.StreamParser()
    parser.result = result
    assert taskboard.judge_run(parser, exit_code, stop)[0] == expected


@pytest.mark.parametrize("line", ["not json at all", "[1, 2]", '{"type": "mystery"}', "42"])
def test_unknown_or_non_json_lines_never_raise(line):
    entries = taskboard.StreamParser().feed(line)
    assert all(e["kind"] == "raw" for e in entries)


@pytest.mark.parametrize("line", [
    '{"type": "assistant", "message": "oops"}',
    '{"type": "assistant", "message": {"content": "not a list", "usage": []}}',
    '{"type": "user", "message": 7}',
    '{"type": "result", "is_error": false, "permission_denials": [1, "x"], "usage": "?"}',
    '{"type": "system", "subtype": null}',
])
def test_malformed_known_events_never_raise(line):
    taskboard.StreamParser().feed(line)


def test_half_a_surrogate_pair_becomes_u_fffd_in_all_the_parser_keeps():
    """JSON can spell half of a UTF-16 pair, which UTF-8 cannot store: the entries, the
    texts a verdict or plan is read from, and the result all get U+FFFD instead."""
    parser = taskboard.StreamParser()
    line = json.dumps({"type": "assistant", "message": {"id": "msg_1", "content": [
        {"type": "text", "text": "half \ud83d a pair, a whole one \U0001F600"}]}})
    assert "\\ud83d" in line
    [entry] = parser.feed(line)
    assert entry["message"] == "half \ufffd a pair, a whole one \U0001F600"
    assert list(parser.texts) == [entry["message"]]
    parser.feed(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                            "result": "done \udfff"}))
    assert parser.result["result"] == "done \ufffd"


# --- the running cost ------------------------------------------------------------------------

def agent_lines(path):
    """The lines an agent printed: a recording as written, or the `out` side of a recorded
    two-way session ({"dir": "out", "msg": …})."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            event = json.loads(line)
            if "dir" in event:
                if event["dir"] == "out":
                    yield json.dumps(event["msg"])
            else:
                yield line.rstrip("\n")


def running_and_final_cost(agent, lines, tier):
    """Every cost the board publishes while the agent works (task:usage), and its cost at
    the end, for one stream parsed as a run of `tier`."""
    parser = taskboard.StreamParser()
    if agent != "claude":
        parser.adapter = taskboard.ADAPTERS[agent](None, None)
    running = []
    for line in lines:
        parser.feed(line)
        running.append(parser.cost(tier))
    parser.close(0)
    return running, parser.cost(tier)


def simulated_stream(tmp_path, model):
    out = subprocess.run([sys.executable, taskboard.__file__, "--simulate-agent", "-p",
                          "--model", model], cwd=tmp_path, input="# TB-1: Do it\n",
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TASKBOARD_SIMULATE_PACE": "0"})
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


@pytest.mark.parametrize("tier", taskboard.MODELS)
def test_the_running_cost_never_exceeds_the_final_cost_of_any_stream(tmp_path, tier):
    """Issue 31: the demo's card showed $0.0249 while the agent worked and $0.0123 at the
    end. For every recorded stream of the four CLIs and the simulated agent's, what the card
    shows during the run stays at or under what it shows once the run is done."""
    streams = {name: (name.split("-")[0], list(agent_lines(os.path.join(FIXTURES, name))))
               for name in sorted(os.listdir(FIXTURES)) if name.endswith(".jsonl")}
    streams["simulated"] = ("claude", simulated_stream(
        tmp_path, taskboard.MODEL_ALIASES[tier]))
    overshoots = {}
    for name, (agent, lines) in streams.items():
        running, final = running_and_final_cost(agent, lines, tier)
        if max(running, default=0) > final + 1e-9:
            overshoots[name] = (round(max(running), 6), round(final, 6))
    assert len(streams) > 40 and not overshoots


def test_the_simulated_agent_reports_the_cost_of_the_usage_it_streamed(tmp_path):
    running, final = running_and_final_cost("claude", simulated_stream(tmp_path, "sonnet"),
                                            "model_medium")
    assert running[-2] == pytest.approx(final) and final > 0
